/* Inside the egress connection machinery: the connection's state and what
 * its parts share. conn.c: limits at accept, the handshake buffer and
 * timeout, the one way a connection ends and its flow report;
 * conn_connect.c: policy, resolution and the non-blocking connect to each
 * allowed address; conn_relay.c: the relay both ways. Not for use outside
 * src/net/conn*.c (the handlers use proto.h). */
#pragma once

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/time.h"
#include "net/proto.h"

/* The relay's bounce buffer, and what a fallback recv takes at once. */
#define CONN_CHUNK 65536

enum conn_phase { CONN_HANDSHAKE, CONN_CONNECT, CONN_RELAY };

struct conn_pump {
    struct sbx_conn *c;
    int from, to;
    int pipe[2];
    size_t in_pipe;
    uint8_t *buf; /* queued bytes, or the fallback's bounce buffer */
    size_t off, len, cap;
    bool splice_ok, eof, done;
    size_t pipe_cap; /* what the pipe holds */
    struct event *rev, *wev;
    uint64_t *count;
};

struct sbx_conn {
    struct sbx_conn *next, **pprev; /* ctx->live */
    struct sbx_conn_ctx *ctx;
    const struct sbx_conn_ops *ops;
    void *state;
    void (*free_state)(void *);
    int stage;
    enum conn_phase phase;
    int cfd, ufd;
    bool reset; /* close the client with SO_LINGER 0 */
    struct event *cev, *uev, *timer;
    double t0;       /* sbx_mono_s(): the flow's duration needs sub-millisecond precision */
    int64_t last_ms; /* CLOCK_MONOTONIC_COARSE: idle tracking, read on every pump */
    uint8_t *in;
    size_t in_len, in_cap;
    /* target */
    uint16_t port;
    struct sbx_resolve_req *rreq;
    bool resolving, in_resolve_call, resolved;
    int res_err;
    struct sbx_addr addrs[SBX_RESOLVE_MAX];
    size_t naddrs, next_addr;
    struct sbx_decision allow, deny;
    struct sbx_addr deny_addr;
    bool allowed_one, denied_one;
    int last_err;
    struct conn_pump p[2]; /* 0: client -> target, 1: target -> client */
    struct sbx_flow flow;
};

/* ---- conn.c ---- */

/* The limits with their defaults filled in. */
double conn_idle_s(const struct sbx_conn_ctx *ctx);
double conn_connect_s(const struct sbx_conn_ctx *ctx);
void conn_set_rule(struct sbx_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* (Re)arm the connection's one timer: the handshake, connect or idle timeout. */
void conn_arm_timer(struct sbx_conn *c, double s);
/* The one way a live connection ends: unlink, release, report. */
void conn_end(struct sbx_conn *c);
/* Denied by the policy: on_denied tells the client, rule goes into the flow. */
void conn_end_deny(struct sbx_conn *c, const char *rule);
/* Allowed but never connected: the flow's rule is "<what>: <errno name>". */
void conn_end_failed(struct sbx_conn *c, int errnum, const char *what);

/* Idle tracking reads the clock after every chunk: the coarse clock is
 * cheaper, and a tick's error is nothing against an idle timeout. */
static inline int64_t conn_idle_clock_ms(void)
{
    return sbx_ms_of(CLOCK_MONOTONIC_COARSE);
}

/* ---- conn_relay.c ---- */

/* Connected: what the client sent past its handshake goes first, then both
 * directions relay until both end, one fails, a limit or the idle timeout. */
void conn_relay_start(struct sbx_conn *c);
void conn_pump_free(struct conn_pump *p);
