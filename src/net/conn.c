/* The machinery every egress connection shares, whatever handler took it:
 * limits at accept, the handshake buffer and timeout, and the one way a
 * connection ends, with its one flow report. Policy, resolution and the
 * connect are conn_connect.c's, the relay conn_relay.c's (conn_int.h).
 *
 * Flow verdicts: a policy denial, a limit at accept, and a handshake that
 * never named an allowed target are DENY (rule from the decision,
 * "limit: ...", "<proto>: <why>"); a flow that got past the policy is ALLOW,
 * with the decision's rule, replaced by what ended it when it was not the
 * peers: "resolve: ENOENT", "connect: ECONNREFUSED", "limit: max_bytes N",
 * "idle timeout".
 *
 * Timeouts: connect_timeout_s (default 10 s) bounds each setup phase: a
 * client has that long to name its target (a slow or silent handshake), and
 * then resolution plus every connect attempt together get that long again. */
#include "net/conn_int.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/metrics.h"

#define DEFAULT_MAX_CONNS 256
#define DEFAULT_IDLE_S 300.0
#define DEFAULT_CONNECT_S 10.0
/* What we read and drop from a client we close after a reply, so the close
 * is a FIN (unread data would turn it into a reset that can eat the reply). */
#define DRAIN_MAX 65536

static struct timeval tv_of(double s)
{
    if (s < 0)
        s = 0;
    struct timeval tv = {.tv_sec = (time_t)s};
    tv.tv_usec = (suseconds_t)((s - (double)tv.tv_sec) * 1e6);
    return tv;
}

static unsigned max_conns(const struct sbx_conn_ctx *ctx)
{
    return ctx->limits.max_conns ? ctx->limits.max_conns : DEFAULT_MAX_CONNS;
}

double conn_idle_s(const struct sbx_conn_ctx *ctx)
{
    return ctx->limits.idle_timeout_s > 0 ? ctx->limits.idle_timeout_s : DEFAULT_IDLE_S;
}

double conn_connect_s(const struct sbx_conn_ctx *ctx)
{
    return ctx->limits.connect_timeout_s > 0 ? ctx->limits.connect_timeout_s : DEFAULT_CONNECT_S;
}

void conn_set_rule(struct sbx_conn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->flow.rule, sizeof(c->flow.rule), fmt, ap);
    va_end(ap);
}

void conn_arm_timer(struct sbx_conn *c, double s)
{
    struct timeval tv = tv_of(s);
    event_add(c->timer, &tv);
}

static void drain(int fd)
{
    char buf[4096];
    size_t total = 0;
    while (total < DRAIN_MAX) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
            break;
        total += (size_t)n;
    }
}

static void close_client(int fd, bool reset)
{
    if (reset) {
        struct linger l = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    } else {
        drain(fd);
    }
    close(fd);
}

static const struct sbx_metric m_conns = {
    .name = "sandbox_egress_connections_total",
    .help = "Egress connections of the sandboxes, by verdict and by how they came (socks5, http, "
            "transparent); the denials are those with verdict deny.",
    .kind = SBX_METRIC_COUNTER,
    .labels = {"verdict", "via"}};
static const struct sbx_metric m_bytes = {
    .name = "sandbox_egress_bytes_total",
    .help =
        "Bytes relayed for the sandboxes' egress connections, by verdict and direction (out: to "
        "the target).",
    .kind = SBX_METRIC_COUNTER,
    .labels = {"verdict", "direction"}};

/* Every flow, whatever became of it, is reported here once. */
static void report(struct sbx_conn_ctx *ctx, const struct sbx_flow *f)
{
    const char *verdict = f->verdict == SBX_VERDICT_DENY ? "deny" : "allow";
    sbx_metric_add(&m_conns, 1, verdict, sbx_flow_via_name(f->via));
    sbx_metric_add(&m_bytes, (double)f->bytes_out, verdict, "out");
    sbx_metric_add(&m_bytes, (double)f->bytes_in, verdict, "in");
    if (ctx->on_flow)
        ctx->on_flow(ctx->ud, f);
}

void conn_end(struct sbx_conn *c)
{
    struct sbx_conn_ctx *ctx = c->ctx;
    *c->pprev = c->next;
    if (c->next)
        c->next->pprev = c->pprev;
    ctx->active--;
    if (ctx->limits.total_active)
        (*ctx->limits.total_active)--;

    if (c->rreq)
        sbx_resolve_cancel(c->rreq);
    if (c->cev)
        event_free(c->cev);
    if (c->uev)
        event_free(c->uev);
    if (c->timer)
        event_free(c->timer);
    conn_pump_free(&c->p[0]);
    conn_pump_free(&c->p[1]);
    if (c->ufd >= 0)
        close(c->ufd);
    close_client(c->cfd, c->reset);
    if (c->free_state && c->state)
        c->free_state(c->state);
    free(c->in);

    c->flow.duration_s = c->flow.verdict == SBX_VERDICT_ALLOW ? sbx_mono_s() - c->t0 : 0;
    report(ctx, &c->flow);
    free(c);
}

void conn_end_deny(struct sbx_conn *c, const char *rule)
{
    c->flow.verdict = SBX_VERDICT_DENY;
    conn_set_rule(c, "%s", rule);
    if (c->ops->on_denied)
        c->ops->on_denied(c, rule, false);
    c->reset = c->ops->reset_on_refusal;
    conn_end(c);
}

void conn_end_failed(struct sbx_conn *c, int errnum, const char *what)
{
    c->flow.verdict = SBX_VERDICT_ALLOW;
    conn_set_rule(c, "%s: %s", what, sbx_errno_name(errnum));
    if (c->ops->on_failed)
        c->ops->on_failed(c, errnum, what);
    c->reset = c->ops->reset_on_refusal;
    conn_end(c);
}

void sbx_conn_fail(struct sbx_conn *c, const char *fmt, ...)
{
    char why[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    c->flow.verdict = SBX_VERDICT_DENY;
    conn_set_rule(c, "%s: %s", c->ops->proto, why);
    c->reset = c->ops->reset_on_refusal;
    conn_end(c);
}

/* ---- accept and handshake ------------------------------------------------- */

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_conn *c = arg;
    switch (c->phase) {
    case CONN_HANDSHAKE:
        if (c->ops->on_failed)
            c->ops->on_failed(c, ETIMEDOUT, "handshake");
        sbx_conn_fail(c, "handshake timeout");
        return;
    case CONN_CONNECT:
        conn_end_failed(c, ETIMEDOUT, c->resolving ? "resolve" : "connect");
        return;
    case CONN_RELAY: {
        double idle = (double)(conn_idle_clock_ms() - c->last_ms) / 1e3;
        if (idle >= conn_idle_s(c->ctx)) {
            conn_set_rule(c, "idle timeout");
            conn_end(c);
            return;
        }
        conn_arm_timer(c, conn_idle_s(c->ctx) - idle);
        return;
    }
    }
}

static void on_client_readable(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_conn *c = arg;
    c->ops->on_client_data(c);
}

static bool over_limit(const struct sbx_conn_ctx *ctx, char *rule, size_t len)
{
    if (ctx->active >= max_conns(ctx)) {
        snprintf(rule, len, "limit: max_conns %u", max_conns(ctx));
        return true;
    }
    if (ctx->limits.total_active && ctx->limits.max_total &&
        *ctx->limits.total_active >= ctx->limits.max_total) {
        snprintf(rule, len, "limit: total connections %u", ctx->limits.max_total);
        return true;
    }
    if (ctx->limits.max_bytes && ctx->bytes_total >= ctx->limits.max_bytes) {
        snprintf(rule, len, "limit: max_bytes %llu", (unsigned long long)ctx->limits.max_bytes);
        return true;
    }
    return false;
}

void sbx_conn_report_flow(struct sbx_conn_ctx *ctx, const struct sbx_flow *f)
{
    report(ctx, f);
}

bool sbx_conn_over_limit(const struct sbx_conn_ctx *ctx, char *rule, size_t len)
{
    return over_limit(ctx, rule, len);
}

static void init_flow(struct sbx_flow *f, enum sbx_flow_via via, const struct sbx_addr *addr,
                      uint16_t port)
{
    memset(f, 0, sizeof(*f));
    f->start = (double)sbx_now_ms() / 1e3;
    f->via = via;
    f->verdict = SBX_VERDICT_DENY;
    if (addr)
        f->addr = *addr;
    f->port = port;
}

/* Refused before it began: the client hears it in its protocol, the flow is
 * reported, the fd closed. Nothing is allocated, so a flood costs nothing. */
static void refuse(struct sbx_conn_ctx *ctx, int fd, const struct sbx_conn_ops *ops,
                   const struct sbx_addr *addr, uint16_t port, const char *rule)
{
    struct sbx_conn tmp = {.ctx = ctx, .ops = ops, .cfd = fd, .ufd = -1};
    init_flow(&tmp.flow, ops->via, addr, port);
    snprintf(tmp.flow.rule, sizeof(tmp.flow.rule), "%s", rule);
    if (ops->on_denied)
        ops->on_denied(&tmp, rule, true);
    close_client(fd, ops->reset_on_refusal);
    report(ctx, &tmp.flow);
}

struct sbx_conn *sbx_conn_new(struct sbx_conn_ctx *ctx, int fd, const struct sbx_conn_ops *ops,
                              size_t in_cap, const struct sbx_addr *addr, uint16_t port)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && !(fl & O_NONBLOCK))
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    char rule[128];
    if (over_limit(ctx, rule, sizeof(rule))) {
        refuse(ctx, fd, ops, addr, port, rule);
        return NULL;
    }
    struct sbx_conn *c = calloc(1, sizeof(*c));
    if (c) {
        c->in = in_cap ? malloc(in_cap) : NULL;
        c->cev =
            in_cap ? event_new(ctx->base, fd, EV_READ | EV_PERSIST, on_client_readable, c) : NULL;
        c->timer = evtimer_new(ctx->base, on_timer, c);
    }
    if (!c || (in_cap && (!c->in || !c->cev)) || !c->timer) {
        if (c) {
            free(c->in);
            if (c->cev)
                event_free(c->cev);
            if (c->timer)
                event_free(c->timer);
            free(c);
        }
        refuse(ctx, fd, ops, addr, port, "egress: out of memory");
        return NULL;
    }
    c->ctx = ctx;
    c->ops = ops;
    c->cfd = fd;
    c->ufd = -1;
    c->in_cap = in_cap;
    c->p[0].pipe[0] = c->p[0].pipe[1] = c->p[1].pipe[0] = c->p[1].pipe[1] = -1;
    c->t0 = sbx_mono_s();
    init_flow(&c->flow, ops->via, addr, port);
    conn_set_rule(c, "%s: closed before naming a target", ops->proto);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    c->next = ctx->live;
    if (ctx->live)
        ctx->live->pprev = &c->next;
    ctx->live = c;
    c->pprev = &ctx->live;
    ctx->active++;
    if (ctx->limits.total_active)
        (*ctx->limits.total_active)++;

    c->phase = CONN_HANDSHAKE;
    if (in_cap) {
        event_add(c->cev, NULL);
        conn_arm_timer(c, conn_connect_s(ctx));
    }
    return c;
}

void sbx_conn_set_state(struct sbx_conn *c, void *state, void (*free_state)(void *))
{
    c->state = state;
    c->free_state = free_state;
}

void *sbx_conn_state(const struct sbx_conn *c)
{
    return c->state;
}

int sbx_conn_stage(const struct sbx_conn *c)
{
    return c->stage;
}

void sbx_conn_set_stage(struct sbx_conn *c, int stage)
{
    c->stage = stage;
}

int sbx_conn_client_fd(const struct sbx_conn *c)
{
    return c->cfd;
}

int sbx_conn_upstream_fd(const struct sbx_conn *c)
{
    return c->ufd;
}

struct sbx_flow *sbx_conn_flow(struct sbx_conn *c)
{
    return &c->flow;
}

bool sbx_conn_fill(struct sbx_conn *c, const char *during)
{
    ssize_t n = -1;
    if (c->in_len >= c->in_cap)
        errno = ENOBUFS;
    else
        n = read(c->cfd, c->in + c->in_len, c->in_cap - c->in_len);
    if (n > 0) {
        c->in_len += (size_t)n;
        return true;
    }
    if (n == 0) {
        sbx_conn_fail(c, "client closed during %s", during);
        return false;
    }
    if (errno != EAGAIN && errno != EINTR) {
        sbx_conn_fail(c, "read: %s", sbx_errno_name(errno));
        return false;
    }
    return true;
}

const uint8_t *sbx_conn_data(const struct sbx_conn *c, size_t *len)
{
    *len = c->in_len;
    return c->in;
}

void sbx_conn_consume(struct sbx_conn *c, size_t n)
{
    if (n >= c->in_len) {
        c->in_len = 0;
        return;
    }
    memmove(c->in, c->in + n, c->in_len - n);
    c->in_len -= n;
}

int sbx_conn_reply(struct sbx_conn *c, const void *buf, size_t n)
{
    ssize_t w = send(c->cfd, buf, n, MSG_NOSIGNAL);
    return w == (ssize_t)n ? 0 : -1;
}

void sbx_conn_ctx_close_all(struct sbx_conn_ctx *ctx)
{
    while (ctx->live) {
        struct sbx_conn *c = ctx->live;
        if (c->phase != CONN_RELAY) {
            c->flow.verdict = SBX_VERDICT_DENY;
            conn_set_rule(c, "closed: egress shut down");
        }
        conn_end(c);
    }
}
