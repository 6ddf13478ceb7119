/* The relay of an egress connection, both ways, once it is connected.
 *
 * Bytes move with splice(2) through one pipe per direction, so the data
 * never enters our memory; when a socket cannot splice (EINVAL) a direction
 * falls back to recv/send through a 64 KiB buffer. Bytes are counted as they
 * are taken from the source. Each direction wakes for one thing at a time
 * (source readable, or target writable while it holds data), which is the
 * back-pressure, and gives the loop back after a burst. */
#include "net/conn_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Each direction's pipe: four times the default, so a splice moves up to
 * 256 KiB (the relay's CPU per GiB fell by about a third, bench/egress.sh);
 * pages are taken only while data waits in it. */
#define PIPE_BYTES (256 << 10)
/* Chunks one direction moves per wake-up before the loop serves others. */
#define BURST 16

void conn_pump_free(struct conn_pump *p)
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

static int buf_reserve(struct conn_pump *p, size_t extra)
{
    if (p->len + extra <= p->cap)
        return 0;
    size_t cap = p->cap ? p->cap : CONN_CHUNK;
    while (cap < p->len + extra)
        cap *= 2;
    uint8_t *b = realloc(p->buf, cap);
    if (!b)
        return -1;
    p->buf = b;
    p->cap = cap;
    return 0;
}

static void pump_wait(struct conn_pump *p)
{
    bool holding = p->off < p->len || p->in_pipe > 0;
    event_add(holding ? p->wev : p->rev, NULL);
}

/* Both directions finished cleanly, or one failed: the connection ends. */
static void pump_finish(struct conn_pump *p)
{
    struct sbx_conn *c = p->c;
    p->done = true;
    if (c->p[0].done && c->p[1].done)
        conn_end(c);
}

/* Take from the source, as much as the sandbox's byte budget allows. */
static ssize_t pump_take(struct conn_pump *p)
{
    struct sbx_conn_ctx *ctx = p->c->ctx;
    size_t want = p->splice_ok ? p->pipe_cap : CONN_CHUNK;
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
        if (buf_reserve(p, CONN_CHUNK) < 0) {
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
static ssize_t pump_give(struct conn_pump *p)
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

static void pump_run(struct conn_pump *p)
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
                conn_set_rule(c, "limit: max_bytes %llu",
                              (unsigned long long)c->ctx->limits.max_bytes);
            conn_end(c); /* a reset or error on either side ends both */
            return;
        }
        c->last_ms = conn_idle_clock_ms();
    }
    pump_wait(p);
}

static void on_pump(evutil_socket_t fd, short what, void *arg)
{
    pump_run(arg);
}

static int pump_setup(struct sbx_conn *c, struct conn_pump *p, int from, int to, uint64_t *count)
{
    p->c = c;
    p->from = from;
    p->to = to;
    p->count = count;
    p->splice_ok = pipe2(p->pipe, O_NONBLOCK | O_CLOEXEC) == 0;
    if (!p->splice_ok)
        p->pipe[0] = p->pipe[1] = -1;
    int cap = p->splice_ok ? fcntl(p->pipe[1], F_SETPIPE_SZ, PIPE_BYTES) : -1;
    p->pipe_cap = cap > 0 ? (size_t)cap : CONN_CHUNK;
    p->rev = event_new(c->ctx->base, from, EV_READ, on_pump, p);
    p->wev = event_new(c->ctx->base, to, EV_WRITE, on_pump, p);
    return p->rev && p->wev ? 0 : -1;
}

void conn_relay_start(struct sbx_conn *c)
{
    c->phase = CONN_RELAY;
    /* What the client sent past its handshake goes first, in order. */
    if (c->in_len && sbx_conn_queue_upstream(c, c->in, c->in_len) < 0) {
        conn_set_rule(c, "relay: ENOMEM");
        conn_end(c);
        return;
    }
    free(c->in);
    c->in = NULL;
    c->in_len = c->in_cap = 0;
    if (pump_setup(c, &c->p[0], c->cfd, c->ufd, &c->flow.bytes_out) < 0 ||
        pump_setup(c, &c->p[1], c->ufd, c->cfd, &c->flow.bytes_in) < 0) {
        conn_set_rule(c, "relay: ENOMEM");
        conn_end(c);
        return;
    }
    c->last_ms = conn_idle_clock_ms();
    conn_arm_timer(c, conn_idle_s(c->ctx));
    pump_wait(&c->p[0]);
    pump_wait(&c->p[1]);
}

static int pump_queue(struct conn_pump *p, const void *buf, size_t n)
{
    if (buf_reserve(p, n) < 0)
        return -1;
    memcpy(p->buf + p->len, buf, n);
    p->len += n;
    return 0;
}

int sbx_conn_queue_client(struct sbx_conn *c, const void *buf, size_t n)
{
    return pump_queue(&c->p[1], buf, n);
}

int sbx_conn_queue_upstream(struct sbx_conn *c, const void *buf, size_t n)
{
    if (pump_queue(&c->p[0], buf, n) < 0)
        return -1;
    c->flow.bytes_out += n;
    c->ctx->bytes_total += n;
    return 0;
}
