/* The egress connection handlers: SOCKS5, HTTP proxy and transparent. Each
 * takes an accepted connection from a listener inside a sandbox's namespace,
 * learns the target, asks the policy, connects from the daemon's own
 * namespace (non-blocking, names through the resolver) and relays both ways
 * on the loop, counting bytes. A denial is told in the protocol's own terms:
 * SOCKS reply 0x02, HTTP 403 with a one-line body naming the rule, a reset for
 * a transparent connection. Every flow ends in one sbx_flow report. */
#pragma once

#include <event2/event.h>

#include "net/flow.h"
#include "net/resolve.h"

struct sbx_egress_limits {
    unsigned max_conns;       /* concurrent connections of this sandbox (0: 256) */
    uint64_t max_bytes;       /* both ways, whole sandbox life (0: unlimited) */
    double idle_timeout_s;    /* a relay with no traffic for this long closes (0: 300) */
    double connect_timeout_s; /* (0: 10) */
    /* Over all sandboxes: a counter the caller owns and shares between their
     * contexts, and its cap (NULL / 0: no cap over all). */
    unsigned *total_active;
    unsigned max_total;
};

/* Shared by every connection of one sandbox. The caller fills the first
 * fields; the handlers maintain the accounting and the list of live
 * connections. */
struct sbx_conn_ctx {
    struct event_base *base;
    const struct sbx_policy *policy;
    struct sbx_resolver *resolver;
    struct sbx_dns_answers *answers; /* for transparent connections */
    struct sbx_synq *synq;           /* upstreams connected at the SYN (net/synq.h), or NULL */
    struct sbx_egress_limits limits;
    sbx_flow_cb on_flow;
    void *ud;
    /* maintained by the handlers */
    unsigned active;
    uint64_t bytes_total;
    struct sbx_conn *live; /* intrusive list head */
};

/* Take ownership of an accepted, connected fd (any blocking mode). */
void sbx_socks5_accept(struct sbx_conn_ctx *c, int fd);
void sbx_httpproxy_accept(struct sbx_conn_ctx *c, int fd);
void sbx_transparent_accept(struct sbx_conn_ctx *c, int fd);
/* Close every live connection at once (each reports its flow). */
void sbx_conn_ctx_close_all(struct sbx_conn_ctx *c);
