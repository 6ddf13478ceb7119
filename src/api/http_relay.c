/* The relay between a client and libmicrohttpd (issue 17.6). After the gate
 * (http_gate.c) has checked a connection's first request head, libmicrohttpd
 * gets one end of a socketpair, never the client's socket: every byte the
 * client sends passes through here and is checked before libmicrohttpd sees
 * it (each request head with sbx_http_head_check(), each body's framing:
 * Content-Length counted, chunked framing parsed), and libmicrohttpd's
 * answers are copied back. libmicrohttpd therefore never meets a malformed
 * request, on a kept-alive connection or deep in a chunked body, and never
 * answers with its own HTML page: a bad request is answered here with our
 * JSON error, after every earlier answer, and the connection closed.
 *
 * Backpressure: at most RELAY_HIGH bytes wait in each direction; beyond it
 * the relay stops reading that side (a paused upload stops the client, a
 * client not reading its stream stops libmicrohttpd's writes). The relay
 * also sees the client's end at once (an EOF, a reset), even while it is
 * not reading, and tells the request in progress (issue 16.8). */
#include "api/http_internal.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <event2/buffer.h>

#include "api/json.h"
#include "base/parse.h"

#define RELAY_HIGH (256u << 10)
#define RELAY_LOW (64u << 10)
#define RELAY_READ (64u << 10)
/* At the close: what the client still sends is read and dropped for a
 * moment, so that unread bytes do not make the kernel reset the connection
 * before the client has read the last answer (as the gate does). */
#define RELAY_LINGER_S 2
#define RELAY_DRAIN_MAX (256u << 10)

enum vstate {
    V_HEAD,     /* a request head (buffered until complete and checked) */
    V_LENGTH,   /* a Content-Length body: `left` bytes */
    V_CSIZE,    /* a chunk's size (hex digits) */
    V_CEXT,     /* ... its extension, up to CR */
    V_CSIZE_LF, /* the LF after the size line's CR */
    V_CDATA,    /* a chunk's data: `left` bytes */
    V_CDATA_CR, /* the CRLF after its data */
    V_CDATA_LF, /* */
    V_LAST_CR,  /* the empty line after the last chunk (no trailers) */
    V_LAST_LF,  /* */
    V_UPGRADE,  /* after a head asking for an upgrade: held until its answer */
    V_TUNNEL,   /* upgraded (101): bytes pass unchecked both ways */
    V_FAILED,   /* a bad request: nothing more is read */
};

struct sbx_http_relay {
    sbx_http_server *srv;
    struct conn_ctx *cc; /* NULL once libmicrohttpd has closed its end */
    struct sbx_http_relay *prev, *next;
    int client, pair;
    struct event *cev;  /* the client: read and write, edge-triggered */
    struct event *pev;  /* our end of the pair: read */
    struct event *pwev; /* ... write, while bytes wait for it */
    struct event *linger;
    struct evbuffer *to_mhd, *to_client;
    struct evbuffer *held; /* what came after an upgrade request, until its answer */
    enum vstate st;
    char *head;
    size_t head_len;
    uint64_t left;
    unsigned digits;
    uint64_t from_mhd; /* bytes read from libmicrohttpd */
    uint64_t mark;     /* ... up to the end of its last complete answer */
    uint64_t heads;    /* request heads passed to libmicrohttpd */
    uint64_t done;     /* ... and answered completely */
    bool fail_in_body; /* the bad part is in the body of the last head passed */
    bool client_eof, client_reset, mhd_eof, pair_shut, blocked, pair_blocked, answered;
    bool closing;              /* our side shut, the client's last bytes dropped */
    size_t dropped;            /* bytes dropped after a bad request, or while closing */
    struct sbx_http_head fail; /* the answer to a bad request */
};

void sbx_http__relay_free(struct sbx_http_relay *r)
{
    sbx_http_server *srv = r->srv;
    if (r->prev)
        r->prev->next = r->next;
    else
        srv->relays = r->next;
    if (r->next)
        r->next->prev = r->prev;
    if (r->cc)
        r->cc->relay = NULL;
    struct event *evs[] = {r->cev, r->pev, r->pwev, r->linger};
    for (size_t i = 0; i < SBX_ARRAY_LEN(evs); i++)
        if (evs[i])
            event_free(evs[i]);
    if (r->to_mhd)
        evbuffer_free(r->to_mhd);
    if (r->to_client)
        evbuffer_free(r->to_client);
    if (r->held)
        evbuffer_free(r->held);
    if (r->client >= 0)
        close(r->client);
    if (r->pair >= 0)
        close(r->pair);
    free(r->head);
    free(r);
}

static void on_pair_read(evutil_socket_t fd, short what, void *arg);

/* The server stops (libmicrohttpd has written its last answers, and
 * closed): what it wrote still goes out, as far as it goes at once. */
void sbx_http__relays_free(sbx_http_server *srv)
{
    while (srv->relays) {
        struct sbx_http_relay *r = srv->relays;
        r->cc = NULL;
        if (!r->mhd_eof) {
            on_pair_read(r->pair, EV_READ, r); /* may free r */
            if (srv->relays != r)
                continue;
        }
        sbx_http__relay_free(r);
    }
}

/* No progress for the idle timeout while flushing the last answers. */
static void on_linger(evutil_socket_t fd, short what, void *arg)
{
    sbx_http__relay_free(arg);
}

/* Only once libmicrohttpd is done with the connection (while it has it,
 * its own timeouts apply; a parked request may wait long). */
static void linger_rearm(struct sbx_http_relay *r)
{
    if (r->cc || r->closing)
        return;
    struct timeval tv = {.tv_sec = r->srv->cfg.idle_timeout_s};
    evtimer_add(r->linger, &tv);
}

/* Everything libmicrohttpd said is out (or cannot go out): the end, at
 * once when the client has ended too, else after the linger. */
static void maybe_done(struct sbx_http_relay *r)
{
    if (!r->mhd_eof || (!r->client_reset && evbuffer_get_length(r->to_client) > 0))
        return;
    if (r->client_eof || r->client_reset) {
        sbx_http__relay_free(r);
        return;
    }
    if (r->closing)
        return;
    r->closing = true;
    shutdown(r->client, SHUT_WR);
    struct timeval tv = {.tv_sec = RELAY_LINGER_S};
    evtimer_add(r->linger, &tv);
    event_active(r->cev, EV_READ, 0); /* drop what is already in */
}

/* Closing: drop what the client sends until it ends (then free r: the
 * caller must not touch it after true). */
static bool linger_read(struct sbx_http_relay *r)
{
    char buf[RELAY_READ];
    for (;;) {
        ssize_t n = recv(r->client, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0 && (r->dropped += (size_t)n) <= RELAY_DRAIN_MAX)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return false;
        sbx_http__relay_free(r); /* its end, an error, or too much */
        return true;
    }
}

/* evbuffer_write() without SIGPIPE: a peer that closed gives EPIPE here
 * whatever the process's SIGPIPE disposition (tests run without the
 * daemon's SIG_IGN). */
static int buf_send(struct evbuffer *b, int fd)
{
    struct evbuffer_iovec v[16];
    int n = evbuffer_peek(b, -1, NULL, v, 16);
    if (n > 16)
        n = 16;
    struct iovec iov[16];
    for (int i = 0; i < n; i++)
        iov[i] = (struct iovec){.iov_base = v[i].iov_base, .iov_len = v[i].iov_len};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0)
        evbuffer_drain(b, (size_t)w);
    return (int)w;
}

static void client_flush(struct sbx_http_relay *r)
{
    while (evbuffer_get_length(r->to_client) > 0 && !r->client_reset) {
        int n = buf_send(r->to_client, r->client);
        if (n > 0) {
            linger_rearm(r);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            break;              /* the edge-triggered write event calls again */
        r->client_reset = true; /* nothing more can reach the client */
        evbuffer_drain(r->to_client, evbuffer_get_length(r->to_client));
    }
    if (r->pair_blocked && evbuffer_get_length(r->to_client) < RELAY_LOW) {
        r->pair_blocked = false;
        if (!r->mhd_eof)
            event_add(r->pev, NULL);
    }
}

/* The answer to a bad request, after every complete earlier answer; none
 * when libmicrohttpd had begun one of its own (its framing would break). */
static void give_answer(struct sbx_http_relay *r)
{
    if (r->answered || r->st != V_FAILED || r->from_mhd != r->mark ||
        r->done + (r->fail_in_body ? 1 : 0) != r->heads)
        return;
    r->answered = true;
    char *text = sbx_http__error_text(r->fail.status, r->fail.code, r->fail.msg);
    if (text) {
        evbuffer_add(r->to_client, text, strlen(text));
        free(text);
    }
}

static void pair_shut_maybe(struct sbx_http_relay *r)
{
    if (r->pair_shut || evbuffer_get_length(r->to_mhd) > 0)
        return;
    if (r->client_eof || r->st == V_FAILED) {
        r->pair_shut = true;
        /* A reset client reads nothing more: libmicrohttpd's writes fail. */
        shutdown(r->pair, r->client_reset ? SHUT_RDWR : SHUT_WR);
    }
}

static void on_pair_read(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_http_relay *r = arg;
    char buf[RELAY_READ];
    while (!r->mhd_eof && evbuffer_get_length(r->to_client) < RELAY_HIGH) {
        ssize_t n = recv(r->pair, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) {
            r->from_mhd += (uint64_t)n;
            if (!r->client_reset)
                evbuffer_add(r->to_client, buf, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        r->mhd_eof = true; /* libmicrohttpd closed (or cut) the connection */
    }
    if (r->mhd_eof) {
        event_del(r->pev);
        event_del(r->pwev);
        give_answer(r);
    } else if (evbuffer_get_length(r->to_client) >= RELAY_HIGH) {
        r->pair_blocked = true;
        event_del(r->pev);
    }
    client_flush(r);
    maybe_done(r);
}

static void client_read(struct sbx_http_relay *r);

static void pair_flush(struct sbx_http_relay *r)
{
    while (evbuffer_get_length(r->to_mhd) > 0) {
        int n = buf_send(r->to_mhd, r->pair);
        if (n > 0)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            event_add(r->pwev, NULL);
            return;
        }
        /* libmicrohttpd closed its end: what it did not read is dropped. */
        evbuffer_drain(r->to_mhd, evbuffer_get_length(r->to_mhd));
    }
    event_del(r->pwev);
    pair_shut_maybe(r);
    if (r->blocked) {
        r->blocked = false;
        event_active(r->cev, EV_READ, 0); /* edge-triggered: read what waits */
    }
}

static void on_pair_write(evutil_socket_t fd, short what, void *arg)
{
    pair_flush(arg);
}

static void fail_body(struct sbx_http_relay *r, unsigned status, const char *code, const char *msg);

/* The client ended (EOF) or reset the connection. */
static void client_end(struct sbx_http_relay *r, bool reset)
{
    if (reset) {
        /* Nothing more can be said to it, nor asked for it. */
        r->client_reset = true;
        evbuffer_drain(r->to_client, evbuffer_get_length(r->to_client));
        evbuffer_drain(r->to_mhd, evbuffer_get_length(r->to_mhd));
        event_del(r->pwev);
    }
    r->client_eof = true;
    bool blank = true; /* empty lines between requests are allowed */
    for (size_t i = 0; i < r->head_len && blank; i++)
        blank = r->head[i] == '\r' || r->head[i] == '\n';
    if (!reset && r->st != V_FAILED && r->st != V_UPGRADE && r->st != V_TUNNEL &&
        (r->st != V_HEAD || !blank))
        fail_body(r, 400, "bad_request",
                  r->st == V_HEAD ? "the client ended before a complete request head"
                                  : "the client ended within a request body");
    if (r->cc && r->cc->req)
        sbx_http__client_ended(r->cc->req);
    pair_shut_maybe(r);
}

static void fail(struct sbx_http_relay *r, const struct sbx_http_head *h, const char *prefix)
{
    r->fail = *h;
    if (prefix) {
        char msg[sizeof(h->msg)];
        memcpy(msg, h->msg, sizeof(msg));
        snprintf(r->fail.msg, sizeof(r->fail.msg), "%s%.120s", prefix, msg);
    }
    r->fail_in_body = r->st != V_HEAD;
    r->st = V_FAILED;
    pair_shut_maybe(r);
}

static void fail_body(struct sbx_http_relay *r, unsigned status, const char *code, const char *msg)
{
    struct sbx_http_head h = {.status = status, .code = code};
    snprintf(h.msg, sizeof(h.msg), "%s", msg);
    fail(r, &h, NULL);
}

/* Whether a (checked) head carries an Upgrade header. */
static bool asks_upgrade(const char *head, size_t n)
{
    static const char name[] = "\nupgrade:";
    for (size_t i = 0; i + sizeof(name) - 1 <= n; i++)
        if (strncasecmp(head + i, name, sizeof(name) - 1) == 0)
            return true;
    return false;
}

/* One byte of a head: true when the head is complete (and checked). */
static void head_byte(struct sbx_http_relay *r, char c)
{
    size_t max = r->srv->head_limits.max_head;
    r->head[r->head_len++] = c;
    size_t end = c == '\n' ? sbx_http__head_end(r->head, 0, r->head_len) : 0;
    if (!end) {
        if (r->head_len > max) {
            bool line = memchr(r->head, '\n', max) != NULL;
            struct sbx_http_head h = {.status = line ? 431 : 414,
                                      .code = line ? "headers_too_large" : "uri_too_long"};
            snprintf(h.msg, sizeof(h.msg), "request %s over the %zu-byte limit",
                     line ? "head" : "line", max);
            fail(r, &h, NULL);
        }
        return;
    }
    struct sbx_http_head h;
    if (sbx_http_head_check(r->head, end, &r->srv->head_limits, &h) < 0) {
        fail(r, &h, r->from_mhd ? "a later request on the connection: " : NULL);
        return;
    }
    evbuffer_add(r->to_mhd, r->head, end);
    r->head_len = 0;
    r->heads++;
    if (asks_upgrade(r->head, end) && !h.chunked && !(h.has_length && h.content_length > 0)) {
        r->st = V_UPGRADE; /* what follows may not be HTTP: see its answer first */
    } else if (h.chunked) {
        r->st = V_CSIZE;
        r->digits = 0;
        r->left = 0;
    } else if (h.has_length && h.content_length > 0) {
        r->st = V_LENGTH;
        r->left = h.content_length;
    }
}

/* Check n bytes from the client and queue what is good for libmicrohttpd. */
static void feed(struct sbx_http_relay *r, const char *p, size_t n)
{
    size_t i = 0;
    while (i < n && r->st != V_FAILED) {
        char c = p[i];
        if (r->st == V_UPGRADE || r->st == V_TUNNEL) {
            evbuffer_add(r->st == V_TUNNEL ? r->to_mhd : r->held, p + i, n - i);
            return;
        }
        switch (r->st) {
        case V_HEAD:
            head_byte(r, c);
            i++;
            continue;
        case V_LENGTH:
        case V_CDATA: {
            size_t take = n - i < r->left ? n - i : (size_t)r->left;
            evbuffer_add(r->to_mhd, p + i, take);
            i += take;
            r->left -= take;
            if (r->left == 0)
                r->st = r->st == V_LENGTH ? V_HEAD : V_CDATA_CR;
            continue;
        }
        case V_CSIZE: {
            int v = sbx_hex_digit(c);
            if (v >= 0) {
                if (++r->digits > 16) {
                    fail_body(r, 413, "too_large", "a chunk size of more than 16 hex digits");
                    return;
                }
                r->left = r->left << 4 | (uint64_t)v;
            } else if (r->digits == 0) {
                {
                    fail_body(r, 400, "bad_request", "malformed chunked body (a chunk size)");
                    return;
                }
            } else if (c == ';') {
                r->st = V_CEXT;
            } else if (c == '\r') {
                r->st = V_CSIZE_LF;
            } else {
                {
                    fail_body(r, 400, "bad_request", "malformed chunked body (a chunk size line)");
                    return;
                }
            }
            break;
        }
        case V_CEXT:
            if (c == '\r')
                r->st = V_CSIZE_LF;
            else if ((unsigned char)c < 0x20 && c != '\t') {
                fail_body(r, 400, "bad_request", "malformed chunked body (a chunk extension)");
                return;
            }
            break;
        case V_CSIZE_LF:
            if (c != '\n') {
                fail_body(r, 400, "bad_request", "malformed chunked body (a chunk size line)");
                return;
            }
            r->st = r->left ? V_CDATA : V_LAST_CR;
            break;
        case V_CDATA_CR:
        case V_CDATA_LF:
            if (c != (r->st == V_CDATA_CR ? '\r' : '\n')) {
                fail_body(r, 400, "bad_request",
                          "malformed chunked body (a chunk longer than its size)");
                return;
            }
            if (r->st == V_CDATA_LF) {
                r->digits = 0;
                r->left = 0;
            }
            r->st = r->st == V_CDATA_CR ? V_CDATA_LF : V_CSIZE;
            break;
        case V_LAST_CR:
        case V_LAST_LF:
            if (c != (r->st == V_LAST_CR ? '\r' : '\n')) {
                fail_body(r, 400, "bad_request",
                          "malformed chunked body (trailers are not accepted)");
                return;
            }
            r->st = r->st == V_LAST_CR ? V_LAST_LF : V_HEAD;
            break;
        case V_UPGRADE:
        case V_TUNNEL:
        case V_FAILED:
            return;
        }
        evbuffer_add(r->to_mhd, &c, 1); /* a framing byte of a chunked body */
        i++;
    }
}

static void client_read(struct sbx_http_relay *r)
{
    char buf[RELAY_READ];
    while (!r->client_eof && r->st != V_FAILED) {
        if (evbuffer_get_length(r->to_mhd) >= RELAY_HIGH ||
            (r->st == V_UPGRADE && evbuffer_get_length(r->held) >= RELAY_HIGH)) {
            r->blocked = true;
            /* Not reading: still notice a reset (poll reads nothing). */
            struct pollfd pf = {.fd = r->client, .events = POLLIN | POLLRDHUP};
            if (poll(&pf, 1, 0) > 0 && (pf.revents & (POLLERR | POLLHUP)))
                client_end(r, true);
            break;
        }
        ssize_t n = recv(r->client, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) {
            linger_rearm(r);
            feed(r, buf, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        client_end(r, n < 0);
    }
    /* After a bad request nothing more goes to libmicrohttpd: what the
     * client sends is dropped (a bounded amount), its end still noticed. */
    while (r->st == V_FAILED && !r->client_eof && r->dropped <= RELAY_DRAIN_MAX) {
        ssize_t n = recv(r->client, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0)
            r->dropped += (size_t)n;
        else if (n < 0 && errno == EINTR)
            continue;
        else if (n < 0 && errno == EAGAIN)
            break;
        else
            client_end(r, n < 0);
    }
    pair_flush(r);
}

static void on_client(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_http_relay *r = arg;
    if (r->closing) {
        if (what & EV_READ)
            linger_read(r); /* may free r */
        return;
    }
    if (what & EV_READ)
        client_read(r);
    else if (r->client_eof && !r->client_reset) {
        /* A write event only: after the client's end, a reset shows here. */
        struct pollfd pf = {.fd = r->client, .events = POLLOUT};
        if (poll(&pf, 1, 0) > 0 && (pf.revents & POLLERR))
            client_end(r, true);
    }
    client_flush(r);
    maybe_done(r);
}

int sbx_http__relay_start(struct conn_ctx *cc, int *mhd_fd)
{
    sbx_http_server *srv = cc->srv;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    struct sbx_http_relay *r = calloc(1, sizeof(*r));
    if (!r) {
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    r->srv = srv;
    r->client = cc->fd;
    r->pair = sv[0];
    r->head = malloc(srv->head_limits.max_head + 1);
    r->to_mhd = evbuffer_new();
    r->to_client = evbuffer_new();
    r->held = evbuffer_new();
    r->cev = event_new(srv->base, r->client, EV_READ | EV_WRITE | EV_ET | EV_PERSIST, on_client, r);
    r->pev = event_new(srv->base, r->pair, EV_READ | EV_PERSIST, on_pair_read, r);
    r->pwev = event_new(srv->base, r->pair, EV_WRITE | EV_PERSIST, on_pair_write, r);
    r->linger = evtimer_new(srv->base, on_linger, r);
    r->next = srv->relays;
    if (srv->relays)
        srv->relays->prev = r;
    srv->relays = r;
    if (!r->head || !r->to_mhd || !r->to_client || !r->held || !r->cev || !r->pev || !r->pwev ||
        !r->linger || event_add(r->cev, NULL) < 0 || event_add(r->pev, NULL) < 0) {
        r->client = -1; /* the caller still owns it */
        sbx_http__relay_free(r);
        close(sv[1]);
        return -1;
    }
    /* Small answers go out as they come (libmicrohttpd set this on the
     * socket it wrote to; it now writes to the pair). */
    int one = 1;
    (void)setsockopt(r->client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    r->cc = cc;
    cc->relay = r;
    *mhd_fd = sv[1];
    return 0;
}

void sbx_http__relay_conn_closed(struct sbx_http_relay *r)
{
    r->cc = NULL;
    linger_rearm(r);
    /* The pair's end gives what libmicrohttpd wrote last, then EOF. */
    event_active(r->pev, EV_READ, 0);
}

/* The answer to an upgrade request: a 101 makes the connection a tunnel
 * once libmicrohttpd has sent it (sbx_http__relay_tunnel); any other
 * answer means what followed is HTTP again, checked as usual. */
void sbx_http__relay_answered(struct sbx_http_relay *r, unsigned status)
{
    if (r->st != V_UPGRADE || status == 101)
        return;
    r->st = V_HEAD;
    size_t n = evbuffer_get_length(r->held);
    if (n) {
        char *p = malloc(n);
        if (!p) {
            fail_body(r, 503, "unavailable", "the server is out of memory");
        } else {
            evbuffer_remove(r->held, p, n);
            feed(r, p, n);
            free(p);
        }
    }
    pair_flush(r);
    r->blocked = false;
    event_active(r->cev, EV_READ, 0); /* edge-triggered: read what waits */
}

void sbx_http__relay_tunnel(struct sbx_http_relay *r)
{
    if (r->st != V_UPGRADE)
        return;
    r->st = V_TUNNEL;
    evbuffer_add_buffer(r->to_mhd, r->held);
    pair_flush(r);
    r->blocked = false;
    event_active(r->cev, EV_READ, 0);
}

void sbx_http__relay_completed(struct sbx_http_relay *r, bool ok)
{
    if (!ok)
        return; /* cut short: no whole answer */
    r->done++;
    int queued = 0;
    if (ioctl(r->pair, FIONREAD, &queued) < 0)
        queued = 0;
    r->mark = r->from_mhd + (uint64_t)queued;
}

bool sbx_http__relay_client_gone(const struct sbx_http_relay *r, bool *reset)
{
    *reset = r->client_reset;
    return r->client_eof;
}
