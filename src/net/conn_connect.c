/* The upstream side of an egress connection: once the handshake named its
 * target, the policy judges the name (before any lookup), the resolver
 * answers, the policy judges each address with the name, and each allowed
 * one is tried in turn with a non-blocking connect, until one connects and
 * the relay starts (conn_relay.c). */
#include "net/conn_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void try_next(struct sbx_conn *c);

static void connected(struct sbx_conn *c)
{
    if (c->uev) {
        event_free(c->uev);
        c->uev = NULL;
    }
    event_del(c->timer);
    c->flow.verdict = SBX_VERDICT_ALLOW;
    conn_set_rule(c, "%s", c->allow.rule);
    int one = 1;
    setsockopt(c->ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (c->ops->on_connected)
        c->ops->on_connected(c);
    conn_relay_start(c);
}

static void on_connect_ready(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_conn *c = arg;
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(c->ufd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err == 0) {
        connected(c);
        return;
    }
    event_free(c->uev);
    c->uev = NULL;
    close(c->ufd);
    c->ufd = -1;
    c->last_err = err;
    try_next(c);
}

socklen_t sbx_sockaddr_of(const struct sbx_addr *a, uint16_t port, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (a->family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)ss;
        sin->sin_family = AF_INET;
        sin->sin_addr = a->u.v4;
        sin->sin_port = htons(port);
        return sizeof(*sin);
    }
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
    sin6->sin6_family = AF_INET6;
    sin6->sin6_addr = a->u.v6;
    sin6->sin6_port = htons(port);
    return sizeof(*sin6);
}

/* 1 connected, 0 in progress, -1 failed (c->last_err). The socket is made
 * in the calling process's namespace: the daemon's, never the sandbox's. */
static int start_connect(struct sbx_conn *c, const struct sbx_addr *a)
{
    struct sockaddr_storage ss;
    socklen_t sl = sbx_sockaddr_of(a, c->port, &ss);
    c->ufd = socket(a->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->ufd < 0) {
        c->last_err = errno;
        return -1;
    }
    if (connect(c->ufd, (struct sockaddr *)&ss, sl) == 0)
        return 1;
    if (errno == EINPROGRESS) {
        c->uev = event_new(c->ctx->base, c->ufd, EV_WRITE, on_connect_ready, c);
        if (c->uev && event_add(c->uev, NULL) == 0)
            return 0;
        errno = ENOMEM;
    }
    c->last_err = errno;
    close(c->ufd);
    c->ufd = -1;
    return -1;
}

/* Each address in the order resolved: the policy judges it with the name,
 * a denied one is skipped, an allowed one is tried. */
static void try_next(struct sbx_conn *c)
{
    const char *name = c->flow.name[0] ? c->flow.name : NULL;
    while (c->next_addr < c->naddrs) {
        const struct sbx_addr *a = &c->addrs[c->next_addr++];
        struct sbx_decision d;
        sbx_policy_check(c->ctx->policy, name, a, c->port, &d);
        if (d.verdict != SBX_VERDICT_ALLOW) {
            if (!c->denied_one) {
                c->deny = d;
                c->deny_addr = *a;
                c->denied_one = true;
            }
            continue;
        }
        c->flow.addr = *a;
        c->allow = d;
        c->allowed_one = true;
        int r = start_connect(c, a);
        if (r == 0)
            return;
        if (r == 1) {
            connected(c);
            return;
        }
    }
    if (!c->allowed_one && c->denied_one) {
        c->flow.addr = c->deny_addr;
        conn_end_deny(c, c->deny.rule);
        return;
    }
    conn_end_failed(c, c->last_err ? c->last_err : EHOSTUNREACH, "connect");
}

void sbx_conn_target_connected(struct sbx_conn *c, const char *name, const struct sbx_addr *addr,
                               uint16_t port, int ufd, const char *rule)
{
    if (c->cev)
        event_del(c->cev);
    c->phase = CONN_CONNECT;
    c->port = port;
    c->flow.port = port;
    if (name)
        snprintf(c->flow.name, sizeof(c->flow.name), "%s", name);
    c->flow.addr = *addr;
    c->allow.verdict = SBX_VERDICT_ALLOW;
    snprintf(c->allow.rule, sizeof(c->allow.rule), "%s", rule);
    c->allowed_one = true;
    c->ufd = ufd;
    connected(c);
}

static void resolved(struct sbx_conn *c)
{
    if (c->res_err || c->naddrs == 0) {
        conn_end_failed(c, c->res_err ? c->res_err : EHOSTUNREACH, "resolve");
        return;
    }
    try_next(c);
}

static void on_resolved(void *ud, int errnum, const struct sbx_addr *addrs, size_t n)
{
    struct sbx_conn *c = ud;
    c->rreq = NULL;
    c->resolving = false;
    c->resolved = true;
    c->res_err = errnum;
    if (n > SBX_RESOLVE_MAX)
        n = SBX_RESOLVE_MAX;
    c->naddrs = errnum ? 0 : n;
    if (c->naddrs)
        memcpy(c->addrs, addrs, n * sizeof(*addrs));
    if (!c->in_resolve_call)
        resolved(c);
}

void sbx_conn_target(struct sbx_conn *c, const char *name, const struct sbx_addr *addr,
                     uint16_t port)
{
    if (c->cev)
        event_del(c->cev); /* what the client sends now waits in its socket */
    c->phase = CONN_CONNECT;
    conn_arm_timer(c, conn_connect_s(c->ctx));
    c->port = port;
    c->flow.port = port;
    if (name)
        snprintf(c->flow.name, sizeof(c->flow.name), "%s", name);
    if (addr) {
        c->addrs[0] = *addr;
        c->naddrs = 1;
        try_next(c);
        return;
    }
    /* A name the policy could never allow is not even looked up: resolving
     * it upstream would be a channel out (DNS exfiltration). */
    struct sbx_decision d;
    if (!sbx_policy_name_allowed(c->ctx->policy, c->flow.name, &d)) {
        conn_end_deny(c, d.rule);
        return;
    }
    c->resolving = true;
    c->in_resolve_call = true;
    struct sbx_resolve_req *req =
        sbx_resolve(c->ctx->resolver, c->flow.name, AF_UNSPEC, on_resolved, c);
    c->in_resolve_call = false;
    if (c->resolved) {
        resolved(c);
        return;
    }
    if (!req) {
        conn_end_failed(c, ENOMEM, "resolve");
        return;
    }
    c->rreq = req;
}
