/* Inside the egress handlers (conn.c, socks5.c, httpproxy.c, transparent.c):
 * the pure protocol parsers, kept free of sockets so unit tests and fuzz
 * targets can drive them, and the connection machinery the three handlers
 * share. Not a public interface of net/: the rest of the daemon uses proxy.h. */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "net/policy.h"
#include "net/proxy.h"

/* ---- pure parsers ------------------------------------------------------- */

/* Every parser returns the number of bytes it consumed (> 0) when a whole
 * message was read, SBX_PARSE_MORE when the input is a valid but incomplete
 * prefix, SBX_PARSE_BAD when it can never become valid. */
#define SBX_PARSE_MORE 0
#define SBX_PARSE_BAD (-1)

/* A handshake's target name is checked by resolve.h's sbx_dns_name_valid(),
 * the rule the resolver and our DNS server apply. */

/* RFC 1928 method selection: VER 5, NMETHODS >= 1, METHODS. *no_auth tells
 * whether method 0x00 was offered. */
int sbx_socks5_parse_greeting(const uint8_t *buf, size_t len, bool *no_auth);

#define SBX_SOCKS5_CONNECT 0x01
#define SBX_SOCKS5_ATYP_V4 0x01
#define SBX_SOCKS5_ATYP_NAME 0x03
#define SBX_SOCKS5_ATYP_V6 0x04

/* RFC 1928 replies. */
enum sbx_socks5_rep {
    SBX_SOCKS5_OK = 0x00,
    SBX_SOCKS5_FAILURE = 0x01,
    SBX_SOCKS5_NOT_ALLOWED = 0x02,
    SBX_SOCKS5_NET_UNREACH = 0x03,
    SBX_SOCKS5_HOST_UNREACH = 0x04,
    SBX_SOCKS5_REFUSED = 0x05,
    SBX_SOCKS5_BAD_COMMAND = 0x07,
    SBX_SOCKS5_BAD_ATYP = 0x08,
};

struct sbx_socks5_req {
    uint8_t cmd;
    uint8_t atyp;
    /* A name (ATYP 3) that is not an address literal; "" otherwise. */
    char name[256];
    /* The address (ATYP 1 and 4, or a literal sent as a name); family 0 when
     * a name is to be resolved. */
    struct sbx_addr addr;
    uint16_t port;
    /* On SBX_PARSE_BAD: the reply to send before closing (0: none, the
     * version was wrong so the peer does not speak SOCKS5), and why. */
    uint8_t reply;
    const char *why;
};

/* VER 5, CMD, RSV, ATYP, DST.ADDR, DST.PORT. A command other than CONNECT
 * is bad with reply 0x07 as soon as it is seen, an unknown ATYP with 0x08. */
int sbx_socks5_parse_request(const uint8_t *buf, size_t len, struct sbx_socks5_req *out);

/* The largest request head the HTTP proxy reads (431 beyond). */
#define SBX_HTTP_HEAD_MAX 16384
/* Room for any rewritten head of an accepted request. */
#define SBX_HTTP_OUT_MAX (2 * SBX_HTTP_HEAD_MAX + 1024)

struct sbx_http_req {
    bool connect;    /* CONNECT host:port, else an absolute-form request */
    char host[256];  /* without brackets for IPv6 */
    uint16_t port;   /* 80 when an absolute-form URL names none */
    int status;      /* on SBX_PARSE_BAD: 400, 431 or 501 */
    const char *why; /* on SBX_PARSE_BAD */
    size_t out_len;  /* absolute-form: length of the rewritten head */
};

/* Parse one proxy request head (http_parser does the HTTP grammar). For an
 * absolute-form request, write into out (cap >= SBX_HTTP_OUT_MAX) the head
 * to send upstream: request line in origin-form, Host from the URL,
 * hop-by-hop and Proxy-* headers (and those Connection names) removed,
 * "Connection: close" added. Returns the length of the head consumed. */
int sbx_http_parse_head(const uint8_t *buf, size_t len, struct sbx_http_req *req, char *out,
                        size_t cap);

/* ---- the connection machinery (conn.c) ----------------------------------- */

struct sbx_conn;

/* A handler's part of a connection. None of these may end the connection
 * themselves; the machinery does once they return. */
struct sbx_conn_ops {
    enum sbx_flow_via via;
    const char *proto; /* "socks5", "http": prefix of handshake errors */
    /* The client is readable during the handshake. Each path must end with
     * a return (wait for more), sbx_conn_fail() or sbx_conn_target(); after
     * the last two the connection may be gone. */
    void (*on_client_data)(struct sbx_conn *c);
    /* The client must learn of a refusal before we close: by the policy, or
     * by a limit at accept (by_limit: then nothing of the handshake was
     * read and only sbx_conn_reply() may be used). */
    void (*on_denied)(struct sbx_conn *c, const char *rule, bool by_limit);
    /* what is "resolve" (resolution failed), "connect" (every allowed
     * address failed, or the connect timeout), or "handshake" (no target
     * named in time; errnum ETIMEDOUT, handler state may be unset). */
    void (*on_failed)(struct sbx_conn *c, int errnum, const char *what);
    /* Connected: queue what the client and the target must see first. */
    void (*on_connected)(struct sbx_conn *c);
    /* Close with a reset (SO_LINGER 0) on denial and failure. */
    bool reset_on_refusal;
};

/* Take fd (made non-blocking) into the context's live list, with a
 * handshake buffer of in_cap bytes (0: no handshake; the caller names the
 * target at once). addr and port, when already known (transparent), go into
 * the flow. NULL when a limit refused it: on_denied has told the client,
 * the flow is reported and fd closed. */
struct sbx_conn *sbx_conn_new(struct sbx_conn_ctx *ctx, int fd, const struct sbx_conn_ops *ops,
                              size_t in_cap, const struct sbx_addr *addr, uint16_t port);
/* The handler's own state, freed with free_state when the connection ends,
 * and a small stage number for its state machine (0 at first). */
void sbx_conn_set_state(struct sbx_conn *c, void *state, void (*free_state)(void *));
void *sbx_conn_state(const struct sbx_conn *c);
int sbx_conn_stage(const struct sbx_conn *c);
void sbx_conn_set_stage(struct sbx_conn *c, int stage);
int sbx_conn_client_fd(const struct sbx_conn *c);
int sbx_conn_upstream_fd(const struct sbx_conn *c); /* -1 until connected */
struct sbx_flow *sbx_conn_flow(struct sbx_conn *c);

/* Read what the client sent into the handshake buffer. False when the
 * connection was failed for it (the client closed "during" its handshake, a
 * read error, or ENOBUFS: the buffer is full); true otherwise, including
 * when nothing was there to read. */
bool sbx_conn_fill(struct sbx_conn *c, const char *during);
const uint8_t *sbx_conn_data(const struct sbx_conn *c, size_t *len);
void sbx_conn_consume(struct sbx_conn *c, size_t n);

/* Best-effort reply during the handshake (a fresh socket takes a few
 * hundred bytes at once); -1 when the client cannot take it whole. */
int sbx_conn_reply(struct sbx_conn *c, const void *buf, size_t n);
/* Queue bytes ahead of the relay: to the client (a reply, not counted) or
 * to the target (counted as bytes out). Only from on_connected. */
int sbx_conn_queue_client(struct sbx_conn *c, const void *buf, size_t n);
int sbx_conn_queue_upstream(struct sbx_conn *c, const void *buf, size_t n);

/* The handshake named its target: the policy decides (a name first by
 * sbx_policy_name_allowed, then each resolved address with the name), then
 * the allowed addresses are tried in order. name may be NULL or "" when
 * addr is given; addr NULL when name is to be resolved. */
void sbx_conn_target(struct sbx_conn *c, const char *name, const struct sbx_addr *addr,
                     uint16_t port);
/* The target was connected before the client's connection was accepted
 * (the SYN queue, net/synq.h): ufd is taken; rule is the policy's allowing
 * decision. The relay starts at once. */
void sbx_conn_target_connected(struct sbx_conn *c, const char *name, const struct sbx_addr *addr,
                               uint16_t port, int ufd, const char *rule);
/* a:port as a socket address in ss; its length. */
socklen_t sbx_sockaddr_of(const struct sbx_addr *a, uint16_t port, struct sockaddr_storage *ss);
/* A flow that never had a connection of its own (judged at the SYN): into
 * the metrics and the context's on_flow. */
void sbx_conn_report_flow(struct sbx_conn_ctx *ctx, const struct sbx_flow *f);
/* Whether a new connection would pass the context's limits (connections,
 * all sandboxes' connections, bytes); rule says which when not. */
bool sbx_conn_over_limit(const struct sbx_conn_ctx *ctx, char *rule, size_t len);
/* The handshake failed: close, reporting a denied flow with rule
 * "<proto>: <why>". The reply, if any, was sent by the caller. */
void sbx_conn_fail(struct sbx_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* transparent.c: how the original destination of a redirected connection is
 * learnt. A test seam only: tests point it at their own function, since a
 * real SO_ORIGINAL_DST needs nftables rules. Returns 0 or -1 with errno. */
typedef int (*sbx_orig_dst_fn)(int fd, struct sbx_addr *addr, uint16_t *port);
extern sbx_orig_dst_fn sbx_transparent_orig_dst;
int sbx_transparent_orig_dst_sockopt(int fd, struct sbx_addr *addr, uint16_t *port);
