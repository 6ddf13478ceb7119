/* The machinery every egress connection shares, whatever handler took it:
 * limits at accept, the handshake buffer and timeout, policy + resolution +
 * non-blocking connect to each allowed address in turn, the relay, and the
 * one flow report at the end.
 *
 * The relay moves bytes with splice(2) through one pipe per direction, so
 * the data never enters our memory; when a socket cannot splice (EINVAL) a
 * direction falls back to recv/send through a 64 KiB buffer. Bytes are
 * counted as they are taken from the source. Each direction wakes for one
 * thing at a time (source readable, or target writable while it holds
 * data), which is the back-pressure, and gives the loop back after a burst.
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
#include "net/proto.h"

#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/time.h"

#define DEFAULT_MAX_CONNS 256
#define DEFAULT_IDLE_S 300.0
#define DEFAULT_CONNECT_S 10.0
#define CHUNK 65536
/* Each direction's pipe: four times the default, so a splice moves up to
 * 256 KiB (the relay's CPU per GiB fell by about a third, bench/egress.sh);
 * pages are taken only while data waits in it. */
#define PIPE_BYTES (256 << 10)
/* Chunks one direction moves per wake-up before the loop serves others. */
#define BURST 16
/* What we read and drop from a client we close after a reply, so the close
 * is a FIN (unread data would turn it into a reset that can eat the reply). */
#define DRAIN_MAX 65536

enum phase { PH_HANDSHAKE, PH_CONNECT, PH_RELAY };

struct pump {
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
    enum phase phase;
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
    struct pump p[2]; /* 0: client -> target, 1: target -> client */
    struct sbx_flow flow;
};

/* Idle tracking reads the clock after every chunk: the coarse clock is
 * cheaper, and a tick's error is nothing against an idle timeout. */
static int64_t idle_clock_ms(void)
{
    return sbx_ms_of(CLOCK_MONOTONIC_COARSE);
}

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

static double idle_s(const struct sbx_conn_ctx *ctx)
{
    return ctx->limits.idle_timeout_s > 0 ? ctx->limits.idle_timeout_s : DEFAULT_IDLE_S;
}

static double connect_s(const struct sbx_conn_ctx *ctx)
{
    return ctx->limits.connect_timeout_s > 0 ? ctx->limits.connect_timeout_s : DEFAULT_CONNECT_S;
}

static void set_rule(struct sbx_conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_rule(struct sbx_conn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->flow.rule, sizeof(c->flow.rule), fmt, ap);
    va_end(ap);
}

static void arm_timer(struct sbx_conn *c, double s)
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

static void report(struct sbx_conn_ctx *ctx, const struct sbx_flow *f)
{
    if (ctx->on_flow)
        ctx->on_flow(ctx->ud, f);
}

static void pump_free(struct pump *p)
{
    if (p->rev)
        event_free(p->rev);
    if (p->wev)
        event_free(p->wev);
    for (int i = 0; i < 2; i++)
        if (p->pipe[i] >= 0)
            close(p->pipe[i]);
    free(p->buf);
}

/* The one way a live connection ends: unlink, release, report. */
static void conn_end(struct sbx_conn *c)
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
    pump_free(&c->p[0]);
    pump_free(&c->p[1]);
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

static void end_deny(struct sbx_conn *c, const char *rule)
{
    c->flow.verdict = SBX_VERDICT_DENY;
    set_rule(c, "%s", rule);
    if (c->ops->on_denied)
        c->ops->on_denied(c, rule, false);
    c->reset = c->ops->reset_on_refusal;
    conn_end(c);
}

static void end_failed(struct sbx_conn *c, int errnum, const char *what)
{
    c->flow.verdict = SBX_VERDICT_ALLOW;
    set_rule(c, "%s: %s", what, sbx_errno_name(errnum));
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
    set_rule(c, "%s: %s", c->ops->proto, why);
    c->reset = c->ops->reset_on_refusal;
    conn_end(c);
}

/* ---- relay --------------------------------------------------------------- */

static int buf_reserve(struct pump *p, size_t extra)
{
    if (p->len + extra <= p->cap)
        return 0;
    size_t cap = p->cap ? p->cap : CHUNK;
    while (cap < p->len + extra)
        cap *= 2;
    uint8_t *b = realloc(p->buf, cap);
    if (!b)
        return -1;
    p->buf = b;
    p->cap = cap;
    return 0;
}

static void pump_wait(struct pump *p)
{
    bool holding = p->off < p->len || p->in_pipe > 0;
    event_add(holding ? p->wev : p->rev, NULL);
}

/* Both directions finished cleanly, or one failed: the connection ends. */
static void pump_finish(struct pump *p)
{
    struct sbx_conn *c = p->c;
    p->done = true;
    if (c->p[0].done && c->p[1].done)
        conn_end(c);
}

/* Take from the source, as much as the sandbox's byte budget allows. */
static ssize_t pump_take(struct pump *p)
{
    struct sbx_conn_ctx *ctx = p->c->ctx;
    size_t want = p->splice_ok ? p->pipe_cap : CHUNK;
    if (ctx->limits.max_bytes) {
        uint64_t left =
            ctx->bytes_total < ctx->limits.max_bytes ? ctx->limits.max_bytes - ctx->bytes_total : 0;
        if (left == 0) {
            errno = EDQUOT;
            return -1;
        }
        if (left < want)
            want = (size_t)left;
    }
    ssize_t n;
    if (p->splice_ok) {
        n = splice(p->from, NULL, p->pipe[1], NULL, want, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (n > 0)
            p->in_pipe += (size_t)n;
    } else {
        if (buf_reserve(p, CHUNK) < 0) {
            errno = ENOMEM;
            return -1;
        }
        n = recv(p->from, p->buf, want, 0);
        if (n > 0) {
            p->off = 0;
            p->len = (size_t)n;
        }
    }
    if (n > 0) {
        *p->count += (uint64_t)n;
        ctx->bytes_total += (uint64_t)n;
    }
    return n;
}

/* Give to the target what this direction holds. */
static ssize_t pump_give(struct pump *p)
{
    ssize_t n;
    if (p->off < p->len) {
        n = send(p->to, p->buf + p->off, p->len - p->off, MSG_NOSIGNAL);
        if (n > 0) {
            p->off += (size_t)n;
            if (p->off == p->len)
                p->off = p->len = 0;
        }
        return n;
    }
    n = splice(p->pipe[0], NULL, p->to, NULL, p->in_pipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n < 0 && errno == EINVAL) {
        /* The target cannot take spliced pages: bounce through memory. */
        if (buf_reserve(p, p->in_pipe) < 0) {
            errno = ENOMEM;
            return -1;
        }
        ssize_t r = read(p->pipe[0], p->buf, p->in_pipe);
        if (r <= 0)
            return -1;
        p->in_pipe -= (size_t)r;
        p->off = 0;
        p->len = (size_t)r;
        p->splice_ok = false;
        return pump_give(p);
    }
    if (n > 0)
        p->in_pipe -= (size_t)n;
    return n;
}

static void pump_run(struct pump *p)
{
    struct sbx_conn *c = p->c;
    for (int i = 0; i < BURST; i++) {
        ssize_t n;
        if (p->off < p->len || p->in_pipe > 0) {
            n = pump_give(p);
        } else if (p->eof) {
            shutdown(p->to, SHUT_WR);
            pump_finish(p);
            return;
        } else {
            n = pump_take(p);
            if (n < 0 && errno == EINVAL && p->splice_ok) {
                p->splice_ok = false; /* the source cannot splice */
                continue;
            }
            if (n == 0) {
                p->eof = true;
                continue;
            }
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                break;
            if (errno == EDQUOT)
                set_rule(c, "limit: max_bytes %llu", (unsigned long long)c->ctx->limits.max_bytes);
            conn_end(c); /* a reset or error on either side ends both */
            return;
        }
        c->last_ms = idle_clock_ms();
    }
    pump_wait(p);
}

static void on_pump(evutil_socket_t fd, short what, void *arg)
{
    pump_run(arg);
}

static int pump_setup(struct sbx_conn *c, struct pump *p, int from, int to, uint64_t *count)
{
    p->c = c;
    p->from = from;
    p->to = to;
    p->count = count;
    p->splice_ok = pipe2(p->pipe, O_NONBLOCK | O_CLOEXEC) == 0;
    if (!p->splice_ok)
        p->pipe[0] = p->pipe[1] = -1;
    int cap = p->splice_ok ? fcntl(p->pipe[1], F_SETPIPE_SZ, PIPE_BYTES) : -1;
    p->pipe_cap = cap > 0 ? (size_t)cap : CHUNK;
    p->rev = event_new(c->ctx->base, from, EV_READ, on_pump, p);
    p->wev = event_new(c->ctx->base, to, EV_WRITE, on_pump, p);
    return p->rev && p->wev ? 0 : -1;
}

static void start_relay(struct sbx_conn *c)
{
    c->phase = PH_RELAY;
    /* What the client sent past its handshake goes first, in order. */
    if (c->in_len && sbx_conn_queue_upstream(c, c->in, c->in_len) < 0) {
        set_rule(c, "relay: ENOMEM");
        conn_end(c);
        return;
    }
    free(c->in);
    c->in = NULL;
    c->in_len = c->in_cap = 0;
    if (pump_setup(c, &c->p[0], c->cfd, c->ufd, &c->flow.bytes_out) < 0 ||
        pump_setup(c, &c->p[1], c->ufd, c->cfd, &c->flow.bytes_in) < 0) {
        set_rule(c, "relay: ENOMEM");
        conn_end(c);
        return;
    }
    c->last_ms = idle_clock_ms();
    arm_timer(c, idle_s(c->ctx));
    pump_wait(&c->p[0]);
    pump_wait(&c->p[1]);
}

int sbx_conn_queue_client(struct sbx_conn *c, const void *buf, size_t n)
{
    struct pump *p = &c->p[1];
    if (buf_reserve(p, n) < 0)
        return -1;
    memcpy(p->buf + p->len, buf, n);
    p->len += n;
    return 0;
}

int sbx_conn_queue_upstream(struct sbx_conn *c, const void *buf, size_t n)
{
    struct pump *p = &c->p[0];
    if (buf_reserve(p, n) < 0)
        return -1;
    memcpy(p->buf + p->len, buf, n);
    p->len += n;
    c->flow.bytes_out += n;
    c->ctx->bytes_total += n;
    return 0;
}

/* ---- connect ------------------------------------------------------------- */

static void try_next(struct sbx_conn *c);

static void connected(struct sbx_conn *c)
{
    if (c->uev) {
        event_free(c->uev);
        c->uev = NULL;
    }
    event_del(c->timer);
    c->flow.verdict = SBX_VERDICT_ALLOW;
    set_rule(c, "%s", c->allow.rule);
    int one = 1;
    setsockopt(c->ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (c->ops->on_connected)
        c->ops->on_connected(c);
    start_relay(c);
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

static socklen_t sockaddr_of(const struct sbx_addr *a, uint16_t port, struct sockaddr_storage *ss)
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
    socklen_t sl = sockaddr_of(a, c->port, &ss);
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
        end_deny(c, c->deny.rule);
        return;
    }
    end_failed(c, c->last_err ? c->last_err : EHOSTUNREACH, "connect");
}

static void resolved(struct sbx_conn *c)
{
    if (c->res_err || c->naddrs == 0) {
        end_failed(c, c->res_err ? c->res_err : EHOSTUNREACH, "resolve");
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
    c->phase = PH_CONNECT;
    arm_timer(c, connect_s(c->ctx));
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
        end_deny(c, d.rule);
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
        end_failed(c, ENOMEM, "resolve");
        return;
    }
    c->rreq = req;
}

/* ---- accept and handshake ------------------------------------------------- */

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_conn *c = arg;
    switch (c->phase) {
    case PH_HANDSHAKE:
        if (c->ops->on_failed)
            c->ops->on_failed(c, ETIMEDOUT, "handshake");
        sbx_conn_fail(c, "handshake timeout");
        return;
    case PH_CONNECT:
        end_failed(c, ETIMEDOUT, c->resolving ? "resolve" : "connect");
        return;
    case PH_RELAY: {
        double idle = (double)(idle_clock_ms() - c->last_ms) / 1e3;
        if (idle >= idle_s(c->ctx)) {
            set_rule(c, "idle timeout");
            conn_end(c);
            return;
        }
        arm_timer(c, idle_s(c->ctx) - idle);
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
    set_rule(c, "%s: closed before naming a target", ops->proto);
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

    c->phase = PH_HANDSHAKE;
    if (in_cap) {
        event_add(c->cev, NULL);
        arm_timer(c, connect_s(ctx));
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
        if (c->phase != PH_RELAY) {
            c->flow.verdict = SBX_VERDICT_DENY;
            set_rule(c, "closed: egress shut down");
        }
        conn_end(c);
    }
}
