/* The gate in front of libmicrohttpd: the server accepts its own
 * connections, reads each new connection's first request head (peeking,
 * so nothing is consumed) and checks it before the connection is handed to
 * libmicrohttpd with MHD_add_connection() (through the relay, http_relay.c,
 * which checks every later byte the same way). What it refuses is answered here
 * with our JSON error and the connection closed: libmicrohttpd's own error
 * answers are HTML (and were framed twice for some), and a few heads it
 * never answered at all (an unsupported Transfer-Encoding, hundreds of
 * query parameters).
 *
 * It also owns the connection count: the server's cap (idle connections,
 * oldest first, make room for a new one before it is refused with 503), the
 * per-address cap (429), and the counts of requests in progress and event
 * streams per token and per tenant. libmicrohttpd never sees the listening
 * socket, so it has none to drop from its epoll set at its limit and forget
 * to add back (issue 17.1: it re-adds it only at the start of a later run,
 * and when the last connections close in one run none comes). */
#include "api/http_internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "api/json.h"
#include "base/parse.h"
#include "base/log.h"

#define ACCEPT_BATCH 64
#define LINGER_MS 2000
#define LINGER_DRAIN_MAX (256u << 10)

/* ---------------------------------------------------------------------- */
/* Counters by key: addresses, tokens, tenants                             */

struct share {
    struct share *next;
    unsigned n;
    char key[];
};

static size_t share_hash(const char *key)
{
    size_t h = 5381;
    for (; *key; key++)
        h = h * 33 + (unsigned char)*key;
    return h % SBX_HTTP_SHARE_BUCKETS;
}

unsigned sbx_http__share_count(const struct share_table *t, const char *key)
{
    for (const struct share *s = t->b[share_hash(key)]; s; s = s->next)
        if (strcmp(s->key, key) == 0)
            return s->n;
    return 0;
}

struct share *sbx_http__share_take(struct share_table *t, const char *key)
{
    struct share **head = &t->b[share_hash(key)];
    for (struct share *s = *head; s; s = s->next)
        if (strcmp(s->key, key) == 0) {
            s->n++;
            return s;
        }
    size_t len = strlen(key);
    struct share *s = malloc(sizeof(*s) + len + 1);
    if (!s)
        return NULL;
    memcpy(s->key, key, len + 1);
    s->n = 1;
    s->next = *head;
    *head = s;
    return s;
}

void sbx_http__share_put(struct share_table *t, struct share *s)
{
    if (!s || --s->n > 0)
        return;
    struct share **p = &t->b[share_hash(s->key)];
    while (*p && *p != s)
        p = &(*p)->next;
    if (*p)
        *p = s->next;
    free(s);
}

void sbx_http__share_clear(struct share_table *t)
{
    for (size_t i = 0; i < SBX_HTTP_SHARE_BUCKETS; i++)
        while (t->b[i]) {
            struct share *s = t->b[i];
            t->b[i] = s->next;
            free(s);
        }
}

/* ---------------------------------------------------------------------- */
/* The request head's check                                                */

static bool tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int head_fail(struct sbx_http_head *h, unsigned status, const char *code, const char *fmt,
                     ...) __attribute__((format(printf, 4, 5)));
static int head_fail(struct sbx_http_head *h, unsigned status, const char *code, const char *fmt,
                     ...)
{
    h->status = status;
    h->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->msg, sizeof(h->msg), fmt, ap);
    va_end(ap);
    return -1;
}

static bool ieq(const char *a, size_t alen, const char *b)
{
    return alen == strlen(b) && strncasecmp(a, b, alen) == 0;
}

/* One line of buf from *pos: [start, end) without its CRLF or LF. */
static bool next_line(const char *buf, size_t len, size_t *pos, size_t *start, size_t *end)
{
    const char *nl = memchr(buf + *pos, '\n', len - *pos);
    if (!nl)
        return false;
    *start = *pos;
    *end = (size_t)(nl - buf);
    *pos = *end + 1;
    if (*end > *start && buf[*end - 1] == '\r')
        (*end)--;
    return true;
}

/* The request line [s, e): method SP target SP HTTP/x.y, with the target's
 * length and query parameters bounded. */
static int check_request_line(const char *buf, size_t s, size_t e,
                              const struct sbx_http_head_limits *lim, struct sbx_http_head *h)
{
    size_t i = s;
    while (i < e && tchar((unsigned char)buf[i]))
        i++;
    if (i == s || i >= e || buf[i] != ' ' || i - s > 32)
        return head_fail(h, 400, "bad_request", "malformed request line (method)");
    size_t t0 = ++i;
    while (i < e && buf[i] != ' ') {
        unsigned char c = (unsigned char)buf[i];
        if (c < 0x21 || c == 0x7f)
            return head_fail(h, 400, "bad_request",
                             "malformed request line (a control byte in the target)");
        i++;
    }
    size_t tlen = i - t0;
    if (tlen == 0 || buf[t0] != '/')
        return head_fail(h, 400, "bad_request",
                         "malformed request line (the target must be a path from /)");
    if (tlen > lim->max_target)
        return head_fail(h, 414, "uri_too_long",
                         "request target of %zu bytes is over the %zu-byte limit", tlen,
                         lim->max_target);
    if (i >= e || buf[i] != ' ')
        return head_fail(h, 400, "bad_request", "malformed request line (no HTTP version)");
    const char *ver = buf + i + 1;
    size_t vlen = e - (i + 1);
    if (vlen == 8 && memcmp(ver, "HTTP/1.1", 8) == 0)
        h->http11 = true;
    else if (vlen == 8 && memcmp(ver, "HTTP/1.0", 8) == 0)
        h->http11 = false;
    else if (vlen >= 6 && memcmp(ver, "HTTP/", 5) == 0 && ver[5] >= '0' && ver[5] <= '9')
        return head_fail(h, 505, "http_version_not_supported",
                         "HTTP version %.*s is not supported (HTTP/1.1 or HTTP/1.0)",
                         (int)(vlen > 16 ? 16 : vlen), ver);
    else
        return head_fail(h, 400, "bad_request", "malformed request line (HTTP version)");
    const char *q = memchr(buf + t0, '?', tlen);
    if (q) {
        size_t params = 1;
        for (const char *p = q + 1; p < buf + t0 + tlen; p++)
            params += *p == '&' || *p == ';';
        if (params > lim->max_params)
            return head_fail(h, 414, "uri_too_long",
                             "%zu query parameters, at most %zu are accepted", params,
                             lim->max_params);
    }
    return 0;
}

/* What the header lines told, checked once they are all read. */
struct head_counts {
    unsigned hosts, cls, tes;
};

static int check_content_length(const char *val, size_t vl, bool trailing_ws,
                                struct sbx_http_head *h)
{
    int shown = (int)(vl > 32 ? 32 : vl);
    /* Whitespace after the digits: libmicrohttpd would refuse it. */
    if (vl == 0 || vl > 19 || trailing_ws)
        return head_fail(h, 400, "bad_request", "Content-Length '%.*s' is not a length", shown,
                         val);
    uint64_t v = 0;
    for (size_t k = 0; k < vl; k++) {
        if (val[k] < '0' || val[k] > '9')
            return head_fail(h, 400, "bad_request", "Content-Length '%.*s' is not a length", shown,
                             val);
        v = v * 10 + (uint64_t)(val[k] - '0');
    }
    h->content_length = v;
    h->has_length = true;
    return 0;
}

/* Header line number `nth`, [s, e): name ":" OWS value OWS. */
static int check_header_line(const char *buf, size_t s, size_t e, size_t nth, struct head_counts *c,
                             struct sbx_http_head *h)
{
    if (buf[s] == ' ' || buf[s] == '\t')
        return head_fail(h, 400, "bad_request", "folded header lines are not accepted");
    size_t n = s;
    while (n < e && tchar((unsigned char)buf[n]))
        n++;
    if (n == s || n >= e || buf[n] != ':')
        return head_fail(h, 400, "bad_request", "malformed header line %zu", nth);
    const char *name = buf + s;
    size_t nlen = n - s;
    size_t vs = n + 1, ve = e;
    for (size_t k = vs; k < ve; k++) {
        unsigned char ch = (unsigned char)buf[k];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            return head_fail(h, 400, "bad_request", "a control byte in header %.*s",
                             (int)(nlen > 64 ? 64 : nlen), name);
    }
    while (vs < ve && (buf[vs] == ' ' || buf[vs] == '\t'))
        vs++;
    while (ve > vs && (buf[ve - 1] == ' ' || buf[ve - 1] == '\t'))
        ve--;
    const char *val = buf + vs;
    size_t vl = ve - vs;
    if (ieq(name, nlen, "Host")) {
        c->hosts++;
    } else if (ieq(name, nlen, "Content-Length")) {
        if (++c->cls > 1)
            return head_fail(h, 400, "bad_request", "Content-Length given twice");
        return check_content_length(val, vl, ve != e, h);
    } else if (ieq(name, nlen, "Transfer-Encoding")) {
        if (++c->tes > 1)
            return head_fail(h, 400, "bad_request", "Transfer-Encoding given twice");
        if (!ieq(val, vl, "chunked"))
            return head_fail(h, 400, "bad_request",
                             "Transfer-Encoding '%.*s' is not supported (only 'chunked')",
                             (int)(vl > 64 ? 64 : vl), val);
        h->chunked = true;
    }
    return 0;
}

int sbx_http_head_check(const char *buf, size_t len, const struct sbx_http_head_limits *lim,
                        struct sbx_http_head *h)
{
    memset(h, 0, sizeof(*h));
    if (memchr(buf, '\0', len))
        return head_fail(h, 400, "bad_request", "the request head holds a NUL byte");
    size_t pos = 0, s, e;
    /* Empty lines before the request line are allowed (RFC 9112 2.2). */
    do {
        if (!next_line(buf, len, &pos, &s, &e))
            return head_fail(h, 400, "bad_request", "incomplete request head");
    } while (s == e && pos < 8);
    if (check_request_line(buf, s, e, lim, h) < 0)
        return -1;
    struct head_counts c = {0};
    for (size_t headers = 1;; headers++) {
        if (!next_line(buf, len, &pos, &s, &e))
            return head_fail(h, 400, "bad_request", "incomplete request head");
        if (s == e)
            break;
        if (headers > lim->max_headers)
            return head_fail(h, 431, "headers_too_large", "more than %zu request headers",
                             lim->max_headers);
        if (check_header_line(buf, s, e, headers, &c, h) < 0)
            return -1;
    }
    if (h->http11 && c.hosts == 0)
        return head_fail(h, 400, "bad_request", "an HTTP/1.1 request needs a Host header");
    if (c.hosts > 1)
        return head_fail(h, 400, "bad_request", "Host given twice");
    if (h->chunked && !h->http11)
        return head_fail(h, 400, "bad_request", "Transfer-Encoding in an HTTP/1.0 request");
    if (h->chunked && h->has_length)
        return head_fail(h, 400, "bad_request",
                         "both Transfer-Encoding and Content-Length are given");
    h->head_len = pos;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Connections at the gate                                                 */

static void cc_free(struct conn_ctx *cc);

void sbx_http__idle(struct conn_ctx *cc, bool idle)
{
    sbx_http_server *srv = cc->srv;
    if (cc->idle == idle || (idle && !cc->counted))
        return;
    if (idle) {
        cc->idle_prev = srv->idle_tail;
        cc->idle_next = NULL;
        if (srv->idle_tail)
            srv->idle_tail->idle_next = cc;
        else
            srv->idle_head = cc;
        srv->idle_tail = cc;
    } else {
        if (cc->idle_prev)
            cc->idle_prev->idle_next = cc->idle_next;
        else
            srv->idle_head = cc->idle_next;
        if (cc->idle_next)
            cc->idle_next->idle_prev = cc->idle_prev;
        else
            srv->idle_tail = cc->idle_prev;
        cc->idle_prev = cc->idle_next = NULL;
    }
    cc->idle = idle;
}

/* The connection no longer takes a place (closed, or being closed). */
static void uncount(struct conn_ctx *cc)
{
    sbx_http__idle(cc, false);
    if (!cc->counted)
        return;
    cc->counted = false;
    cc->srv->nconns--;
    sbx_http__share_put(&cc->srv->by_addr, cc->addr_share);
    cc->addr_share = NULL;
}

static void gate_unlink(struct conn_ctx *cc)
{
    if (cc->gprev)
        cc->gprev->gnext = cc->gnext;
    else
        cc->srv->gate = cc->gnext;
    if (cc->gnext)
        cc->gnext->gprev = cc->gprev;
    cc->gprev = cc->gnext = NULL;
    cc->at_gate = false;
}

static void cc_free(struct conn_ctx *cc)
{
    uncount(cc);
    sbx_http_server *srv = cc->srv;
    if (cc->gate_ev)
        event_free(cc->gate_ev);
    if (cc->header_timer)
        event_free(cc->header_timer);
    if (cc->body_timer)
        event_free(cc->body_timer);
    if (cc->body_watch)
        event_free(cc->body_watch);
    if (cc->relay)
        sbx_http__relay_conn_closed(cc->relay);
    if (!cc->conn && cc->fd >= 0)
        close(cc->fd);
    if (cc->at_gate) {
        gate_unlink(cc);
        if (cc->lingering)
            srv->lingering--;
    }
    free(cc);
}

/* libmicrohttpd has closed the connection. */
void sbx_http__conn_closed(struct conn_ctx *cc)
{
    cc->conn = NULL;
    cc->fd = -1;
    cc_free(cc);
}

static void on_linger(evutil_socket_t fd, short what, void *arg)
{
    struct conn_ctx *cc = arg;
    if (what & EV_READ) {
        char sink[4096];
        for (;;) {
            ssize_t n = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
            if (n > 0 && (cc->drained += (size_t)n) <= LINGER_DRAIN_MAX)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return;
            break; /* EOF, an error, or too much */
        }
    }
    cc_free(cc);
}

/* Answer with our JSON error and close: the answer first, then our side
 * shut, then what the client still sends read and dropped for a moment, so
 * that unread bytes do not make the kernel reset the connection before the
 * client has read the answer. */
char *sbx_http__error_text(unsigned status, const char *code, const char *msg)
{
    static const struct {
        unsigned status;
        const char *reason;
    } reasons[] = {{400, "Bad Request"},
                   {408, "Request Timeout"},
                   {413, "Content Too Large"},
                   {414, "URI Too Long"},
                   {429, "Too Many Requests"},
                   {431, "Request Header Fields Too Large"},
                   {500, "Internal Server Error"},
                   {503, "Service Unavailable"},
                   {505, "HTTP Version Not Supported"}};
    const char *reason = "Error";
    for (size_t i = 0; i < SBX_ARRAY_LEN(reasons); i++)
        if (reasons[i].status == status)
            reason = reasons[i].reason;
    json_t *body = sbx_json_error_body(code, msg);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    char *out = NULL;
    if (asprintf(&out,
                 "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                 "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
                 "Connection: close\r\n\r\n%s\n",
                 status, reason, text ? strlen(text) + 1 : 1, text ? text : "") < 0)
        out = NULL;
    free(text);
    return out;
}

static void gate_answer(struct conn_ctx *cc, unsigned status, const char *code, const char *msg)
{
    sbx_http_server *srv = cc->srv;
    char *out = sbx_http__error_text(status, code, msg);
    if (out)
        (void)!send(cc->fd, out, strlen(out), MSG_DONTWAIT | MSG_NOSIGNAL);
    free(out);
    shutdown(cc->fd, SHUT_WR);
    uncount(cc); /* its place goes to the next client at once */
    if (cc->header_timer)
        evtimer_del(cc->header_timer);
    if (cc->gate_ev) {
        event_free(cc->gate_ev);
        cc->gate_ev = NULL;
    }
    if (srv->lingering >= srv->cfg.max_connections || srv->stopping) {
        cc_free(cc);
        return;
    }
    cc->lingering = true;
    srv->lingering++;
    cc->gate_ev = event_new(srv->base, cc->fd, EV_READ | EV_PERSIST, on_linger, cc);
    struct timeval tv = {LINGER_MS / 1000, (LINGER_MS % 1000) * 1000};
    if (!cc->gate_ev || event_add(cc->gate_ev, &tv) < 0)
        cc_free(cc);
}

static void handoff(struct conn_ctx *cc)
{
    sbx_http_server *srv = cc->srv;
    int mhd_fd;
    if (sbx_http__relay_start(cc, &mhd_fd) < 0) {
        gate_answer(cc, 503, "unavailable", "the server is out of resources; retry later");
        return;
    }
    event_free(cc->gate_ev);
    cc->gate_ev = NULL;
    gate_unlink(cc);
    cc->fd = mhd_fd; /* the client's socket is the relay's now */
    srv->adopting = cc;
    sbx_mhd.add_connection(srv->mhd, cc->fd, (const struct sockaddr *)&cc->addr, cc->addrlen);
    if (srv->adopting == cc) {
        /* Never started: libmicrohttpd refused it and closed its end.
         * (Once started, cc is libmicrohttpd's, freed at its close.) */
        srv->adopting = NULL;
        cc->fd = -1;
        sbx_http__relay_free(cc->relay);
        cc_free(cc);
        return;
    }
    sbx_http__kick(srv);
}

/* The end of the request head that starts at buf[from] (just after its
 * empty line), or 0 when it is not all in buf[..n). */
size_t sbx_http__head_end(const char *buf, size_t from, size_t n)
{
    for (size_t i = from; i < n; i++)
        if (buf[i] == '\n' && ((i >= from + 1 && buf[i - 1] == '\n') ||
                               (i >= from + 3 && buf[i - 1] == '\r' && buf[i - 2] == '\n')))
            return i + 1;
    return 0;
}

/* A chunked body from buf[off]: 0 and its end in *end when it is all in and
 * well framed, 1 when it is not all in yet, -1 (h: the answer) when it is
 * malformed: libmicrohttpd's answer to that would be its own page. Stricter
 * than it: CRLF line ends, no trailers. */
static int chunked_end(const char *buf, size_t off, size_t n, size_t *end, struct sbx_http_head *h)
{
    for (;;) {
        size_t i = off, digits = 0;
        uint64_t size = 0;
        int v;
        while (i < n && (v = sbx_hex_digit(buf[i])) >= 0) {
            if (++digits > 16)
                return head_fail(h, 413, "too_large", "a chunk size of more than 16 hex digits");
            size = size << 4 | (uint64_t)v;
            i++;
        }
        if (i == n)
            return 1;
        if (digits == 0)
            return head_fail(h, 400, "bad_request", "malformed chunked body (a chunk size)");
        if (buf[i] == ';') /* an extension: ignored, but one line of visible text */
            while (i < n && buf[i] != '\r' && ((unsigned char)buf[i] >= 0x20 || buf[i] == '\t'))
                i++;
        if (i + 2 > n)
            return 1;
        if (buf[i] != '\r' || buf[i + 1] != '\n')
            return head_fail(h, 400, "bad_request", "malformed chunked body (a chunk size line)");
        i += 2;
        if (size == 0) {
            if (i + 2 > n)
                return 1;
            if (buf[i] != '\r' || buf[i + 1] != '\n')
                return head_fail(h, 400, "bad_request",
                                 "malformed chunked body (trailers are not accepted)");
            *end = i + 2;
            return 0;
        }
        if (size > n - i || n - i - size < 2)
            return 1;
        i += size;
        if (buf[i] != '\r' || buf[i + 1] != '\n')
            return head_fail(h, 400, "bad_request",
                             "malformed chunked body (a chunk longer than its size)");
        off = i + 2;
    }
}

/* Chunked bodies and requests pipelined behind the first one, as far as
 * they are in (the peek holds max_head + 1 bytes): libmicrohttpd would
 * answer a bad one with its own page, so the connection is refused here
 * (-1). 1: a head or chunked body has begun and is not all in yet (wait);
 * 0: hand the connection over. */
static int check_pipelined(sbx_http_server *srv, size_t off, const struct sbx_http_head *first,
                           size_t n, struct sbx_http_head *h)
{
    struct sbx_http_head prev = *first;
    for (int k = 2; k <= 16; k++) {
        if (prev.chunked) {
            size_t body_end = n;
            int rc = chunked_end(srv->peek, off, n, &body_end, h);
            if (rc < 0) {
                char msg[sizeof(h->msg)];
                memcpy(msg, h->msg, sizeof(msg));
                snprintf(h->msg, sizeof(h->msg), "request %d: %.130s", k - 1, msg);
                return -1;
            }
            if (rc > 0) /* wait for more, unless no more can be seen */
                return n > srv->head_limits.max_head ? 0 : 1;
            off = body_end;
        } else {
            if (prev.content_length >= n - off)
                return 0; /* its body is not all in yet */
            off += (size_t)prev.content_length;
        }
        if (off == n)
            return 0;
        size_t end = sbx_http__head_end(srv->peek, off, n);
        if (!end && n > srv->head_limits.max_head) {
            snprintf(h->msg, sizeof(h->msg),
                     "pipelined request %d: the requests' heads are over the %zu-byte limit", k,
                     srv->head_limits.max_head);
            h->status = 431;
            h->code = "headers_too_large";
            return -1;
        }
        if (!end)
            return 1; /* wait for the rest of its head */
        if (sbx_http_head_check(srv->peek + off, end - off, &srv->head_limits, h) < 0) {
            char msg[sizeof(h->msg)];
            memcpy(msg, h->msg, sizeof(msg));
            snprintf(h->msg, sizeof(h->msg), "pipelined request %d: %.130s", k, msg);
            return -1;
        }
        off = end;
        prev = *h;
    }
    return 0;
}

static void on_gate_read(evutil_socket_t fd, short what, void *arg)
{
    struct conn_ctx *cc = arg;
    sbx_http_server *srv = cc->srv;
    size_t max = srv->head_limits.max_head;
    ssize_t n = recv(cc->fd, srv->peek, max + 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        cc_free(cc); /* gone before a whole request head */
        return;
    }
    if (n < 0)
        return;
    size_t end = sbx_http__head_end(srv->peek, 0, (size_t)n);
    if (!end) {
        if ((size_t)n > max) {
            char msg[96];
            bool line = memchr(srv->peek, '\n', max) != NULL;
            snprintf(msg, sizeof(msg), "request %s over the %zu-byte limit", line ? "head" : "line",
                     max);
            gate_answer(cc, line ? 431 : 414, line ? "headers_too_large" : "uri_too_long", msg);
        } else if ((what & EV_CLOSED) ||
                   (!srv->early_close && (what & EV_READ) && (size_t)n == cc->peeked)) {
            /* Woken with nothing new: the client has shut its side (a peek
             * shows the bytes still unread, never the end after them). */
            gate_answer(cc, 400, "bad_request", "the client ended before a complete request head");
        }
        cc->peeked = (size_t)n;
        return; /* the rest of the head is still to come (edge-triggered) */
    }
    struct sbx_http_head h, next;
    if (sbx_http_head_check(srv->peek, end, &srv->head_limits, &h) < 0) {
        gate_answer(cc, h.status, h.code, h.msg);
        return;
    }
    int more = check_pipelined(srv, end, &h, (size_t)n, &next);
    if (more < 0 || (more > 0 && ((what & EV_CLOSED) || (!srv->early_close && (what & EV_READ) &&
                                                         (size_t)n == cc->peeked)))) {
        if (more > 0)
            snprintf(next.msg, sizeof(next.msg), "the client ended within a request");
        gate_answer(cc, more < 0 ? next.status : 400, more < 0 ? next.code : "bad_request",
                    next.msg);
        return;
    }
    if (more > 0) {
        cc->peeked = (size_t)n;
        return;
    }
    handoff(cc);
}

/* The head did not come in time: 408 at the gate. */
void sbx_http__gate_timeout(struct conn_ctx *cc)
{
    char msg[96];
    snprintf(msg, sizeof(msg), "no complete request head within %us",
             cc->srv->cfg.header_timeout_s);
    gate_answer(cc, 408, "request_timeout", msg);
}

/* Make room: close the connection idle the longest (waiting for a request
 * head, at the gate or between two requests). */
static bool evict_one(sbx_http_server *srv)
{
    struct conn_ctx *cc = srv->idle_head;
    if (!cc)
        return false;
    srv->evicted++;
    if (cc->at_gate) {
        cc_free(cc);
        return true;
    }
    uncount(cc);
    shutdown(cc->fd, SHUT_RDWR); /* libmicrohttpd sees the end and closes it */
    sbx_http__kick(srv);
    return true;
}

static void address_key(const struct sockaddr_storage *ss, char *out, size_t n)
{
    char host[INET6_ADDRSTRLEN] = "";
    if (ss->ss_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, host, sizeof(host));
    else if (ss->ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ss)->sin6_addr, host, sizeof(host));
    snprintf(out, n, "%s", host);
}

static void accept_one(sbx_http_server *srv, int fd, const struct sockaddr_storage *ss,
                       socklen_t len)
{
    struct conn_ctx *cc = calloc(1, sizeof(*cc));
    if (!cc) {
        close(fd);
        return;
    }
    cc->srv = srv;
    cc->fd = fd;
    cc->addr = *ss;
    cc->addrlen = len;
    cc->at_gate = true;
    cc->gnext = srv->gate;
    if (srv->gate)
        srv->gate->gprev = cc;
    srv->gate = cc;
    if (srv->nconns >= srv->cfg.max_connections)
        evict_one(srv);
    if (srv->nconns >= srv->cfg.max_connections) {
        char msg[128];
        snprintf(msg, sizeof(msg), "the server has all its %u connections busy; retry later",
                 srv->cfg.max_connections);
        gate_answer(cc, 503, "unavailable", msg);
        return;
    }
    char key[INET6_ADDRSTRLEN];
    address_key(ss, key, sizeof(key));
    if (*key && sbx_http__share_count(&srv->by_addr, key) >= srv->cfg.max_per_ip) {
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "%.64s has %u connections open, the most one address may have "
                 "(server.max_connections_per_address)",
                 key, srv->cfg.max_per_ip);
        gate_answer(cc, 429, "too_many_requests", msg);
        return;
    }
    if (*key && !(cc->addr_share = sbx_http__share_take(&srv->by_addr, key))) {
        cc_free(cc);
        return;
    }
    cc->counted = true;
    srv->nconns++;
    sbx_http__idle(cc, true);
    cc->gate_ev =
        event_new(srv->base, fd, EV_READ | EV_ET | EV_PERSIST | (srv->early_close ? EV_CLOSED : 0),
                  on_gate_read, cc);
    cc->header_timer = evtimer_new(srv->base, sbx_http__on_header_timeout, cc);
    if (!cc->gate_ev || !cc->header_timer || event_add(cc->gate_ev, NULL) < 0) {
        cc_free(cc);
        return;
    }
    struct timeval tv = {.tv_sec = srv->cfg.header_timeout_s};
    evtimer_add(cc->header_timer, &tv); /* the head already in is reported by the add */
}

static void on_listen_pause(evutil_socket_t fd, short what, void *arg)
{
    sbx_http_server *srv = arg;
    if (srv->listen_ev && !srv->stopping)
        event_add(srv->listen_ev, NULL);
}

static void on_listen(evutil_socket_t lfd, short what, void *arg)
{
    sbx_http_server *srv = arg;
    for (int i = 0; i < ACCEPT_BATCH && !srv->stopping; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int fd = accept4(lfd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            if (len > sizeof(ss))
                len = sizeof(ss);
            accept_one(srv, fd, &ss, len);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            /* Out of descriptors: free one, and stop accepting for a moment
             * rather than spin on a listening socket that stays readable. */
            sbx_log(SBX_LOG_WARN, "http: accept: %s; pausing 100 ms", strerror(errno));
            evict_one(srv);
            event_del(srv->listen_ev);
            struct timeval tv = {0, 100000};
            evtimer_add(srv->listen_pause, &tv);
        }
        return; /* EAGAIN, or an error of the listening socket */
    }
}

int sbx_http__gate_start(sbx_http_server *srv, sbx_err *err)
{
    srv->peek = malloc(srv->head_limits.max_head + 1);
    srv->listen_ev = event_new(srv->base, srv->listener.fd, EV_READ | EV_PERSIST, on_listen, srv);
    srv->listen_pause = evtimer_new(srv->base, on_listen_pause, srv);
    if (!srv->peek || !srv->listen_ev || !srv->listen_pause || event_add(srv->listen_ev, NULL) < 0)
        return sbx_err_set(err, ENOMEM, "listen %s: watching the socket", srv->listener.address);
    return 0;
}

/* Stop accepting; close what waits at the gate. */
void sbx_http__gate_stop(sbx_http_server *srv)
{
    if (srv->listen_ev) {
        event_free(srv->listen_ev);
        srv->listen_ev = NULL;
    }
    if (srv->listen_pause) {
        event_free(srv->listen_pause);
        srv->listen_pause = NULL;
    }
    if (srv->listener.fd >= 0) {
        close(srv->listener.fd);
        srv->listener.fd = -1;
    }
    while (srv->gate)
        cc_free(srv->gate);
    free(srv->peek);
    srv->peek = NULL;
}
