/* The HTTP proxy endpoint: CONNECT host:port (then a plain relay), and
 * absolute-form requests (GET http://host[:port]/path) forwarded in
 * origin-form. http_parser does the HTTP grammar; we only find where the
 * head ends and rebuild it.
 *
 * One request per connection: the forwarded head says "Connection: close"
 * and the rest of the connection is relayed as it comes, so a client that
 * keeps the connection for a second request sends it to the same origin
 * (keep-alive to another host would need re-parsing every request). */
#include "net/proto.h"

#include <arpa/inet.h>
#include <http_parser.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define MAX_HEADERS 128

struct hdr {
    size_t f_off, f_len, v_off, v_len;
};

/* The parse, copied out of http_parser's callbacks into one arena. */
struct head {
    char arena[SBX_HTTP_HEAD_MAX];
    size_t used;
    size_t url_off, url_len;
    struct hdr h[MAX_HEADERS];
    size_t nh;
    int last; /* 0 none, 1 field, 2 value */
    bool complete, too_many, bad_char;
};

static int append(struct head *st, const char *at, size_t len)
{
    /* The arena is as large as the head it copies from: cannot overflow. */
    if (len > sizeof(st->arena) - st->used)
        return -1;
    memcpy(st->arena + st->used, at, len);
    st->used += len;
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
    struct head *st = p->data;
    if (st->url_len == 0)
        st->url_off = st->used;
    st->url_len += len;
    return append(st, at, len);
}

/* RFC 9110 5.6.2: a field name is a token. */
static bool tchar(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* RFC 9110 5.5: visible characters, obs-text, space and tab only. */
static bool value_ok(const char *at, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)at[i];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            return false;
    }
    return true;
}

static int on_field(http_parser *p, const char *at, size_t len)
{
    struct head *st = p->data;
    for (size_t i = 0; i < len; i++) {
        if (!tchar(at[i])) {
            st->bad_char = true;
            return -1;
        }
    }
    if (st->last != 1) {
        if (st->nh == MAX_HEADERS) {
            st->too_many = true;
            return -1;
        }
        st->h[st->nh++] = (struct hdr){.f_off = st->used};
        st->last = 1;
    }
    st->h[st->nh - 1].f_len += len;
    return append(st, at, len);
}

static int on_value(http_parser *p, const char *at, size_t len)
{
    struct head *st = p->data;
    if (st->nh == 0)
        return -1;
    struct hdr *h = &st->h[st->nh - 1];
    if (!value_ok(at, len)) {
        st->bad_char = true;
        return -1;
    }
    if (st->last != 2) {
        h->v_off = st->used;
        st->last = 2;
    } else if (append(st, " ", 1) == 0) { /* an obs-fold continuation */
        h->v_len++;
    }
    h->v_len += len;
    return append(st, at, len);
}

static int on_headers_complete(http_parser *p)
{
    struct head *st = p->data;
    st->complete = true;
    return 0;
}

/* The head ends at its first empty line (CRLF or a bare LF). */
static size_t head_end(const uint8_t *buf, size_t len)
{
    for (size_t i = 0; i + 1 < len; i++) {
        if (buf[i] != '\n')
            continue;
        if (buf[i + 1] == '\n')
            return i + 2;
        if (buf[i + 1] == '\r' && i + 2 < len && buf[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

static int bad(struct sbx_http_req *req, int status, const char *why)
{
    req->status = status;
    req->why = why;
    return SBX_PARSE_BAD;
}

static bool token_in_list(const char *list, size_t list_len, const char *tok, size_t tok_len)
{
    size_t i = 0;
    while (i < list_len) {
        while (i < list_len && (list[i] == ' ' || list[i] == '\t' || list[i] == ','))
            i++;
        size_t s = i;
        while (i < list_len && list[i] != ',')
            i++;
        size_t e = i;
        while (e > s && (list[e - 1] == ' ' || list[e - 1] == '\t'))
            e--;
        if (e - s == tok_len && strncasecmp(list + s, tok, tok_len) == 0)
            return true;
    }
    return false;
}

static bool is_name(const struct head *st, const struct hdr *h, const char *name)
{
    return h->f_len == strlen(name) && strncasecmp(st->arena + h->f_off, name, h->f_len) == 0;
}

/* Hop-by-hop headers stay with us (RFC 9110 7.6.1), so do the client's
 * Proxy-* credentials; Host is rebuilt from the URL (RFC 9112 3.2.2). */
static bool dropped(const struct head *st, const struct hdr *h)
{
    static const char *const hop[] = {"connection", "keep-alive", "te",
                                      "trailer",    "upgrade",    "host"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(hop); i++)
        if (is_name(st, h, hop[i]))
            return true;
    if (h->f_len >= 6 && strncasecmp(st->arena + h->f_off, "proxy-", 6) == 0)
        return true;
    for (size_t i = 0; i < st->nh; i++)
        if (is_name(st, &st->h[i], "connection") &&
            token_in_list(st->arena + st->h[i].v_off, st->h[i].v_len, st->arena + h->f_off,
                          h->f_len))
            return true;
    return false;
}

struct out {
    char *p;
    size_t len, cap;
    bool full;
};

static void put(struct out *o, const char *s, size_t n)
{
    if (o->full || n > o->cap - o->len) {
        o->full = true;
        return;
    }
    memcpy(o->p + o->len, s, n);
    o->len += n;
}

static void puts_(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

static int copy_host(struct sbx_http_req *req, const char *url, const struct http_parser_url *u)
{
    size_t n = u->field_data[UF_HOST].len;
    if (n == 0 || n >= sizeof(req->host))
        return -1;
    memcpy(req->host, url + u->field_data[UF_HOST].off, n);
    req->host[n] = 0;
    return 0;
}

static int rewrite(const struct head *st, const http_parser *p, const struct http_parser_url *u,
                   struct sbx_http_req *req, char *out, size_t cap)
{
    const char *url = st->arena + st->url_off;
    struct out o = {.p = out, .cap = cap};
    puts_(&o, http_method_str(p->method));
    puts_(&o, " ");
    if (u->field_set & (1 << UF_PATH)) {
        size_t off = u->field_data[UF_PATH].off;
        size_t end = off + u->field_data[UF_PATH].len;
        if (u->field_set & (1 << UF_QUERY))
            end = u->field_data[UF_QUERY].off + u->field_data[UF_QUERY].len;
        put(&o, url + off, end - off);
    } else {
        puts_(&o, "/");
        if (u->field_set & (1 << UF_QUERY)) {
            puts_(&o, "?");
            put(&o, url + u->field_data[UF_QUERY].off, u->field_data[UF_QUERY].len);
        }
    }
    char line[64];
    snprintf(line, sizeof(line), " HTTP/%u.%u\r\nHost: ", p->http_major, p->http_minor);
    puts_(&o, line);
    bool v6 = strchr(req->host, ':') != NULL;
    if (v6)
        puts_(&o, "[");
    puts_(&o, req->host);
    if (v6)
        puts_(&o, "]");
    if (u->field_set & (1 << UF_PORT)) {
        snprintf(line, sizeof(line), ":%u", req->port);
        puts_(&o, line);
    }
    puts_(&o, "\r\n");
    for (size_t i = 0; i < st->nh; i++) {
        const struct hdr *h = &st->h[i];
        if (dropped(st, h))
            continue;
        put(&o, st->arena + h->f_off, h->f_len);
        puts_(&o, ": ");
        put(&o, st->arena + h->v_off, h->v_len);
        puts_(&o, "\r\n");
    }
    puts_(&o, "Connection: close\r\n\r\n");
    if (o.full)
        return bad(req, 431, "request head too large");
    req->out_len = o.len;
    return 0;
}

int sbx_http_parse_head(const uint8_t *buf, size_t len, struct sbx_http_req *req, char *out,
                        size_t cap)
{
    memset(req, 0, sizeof(*req));
    size_t scan = len < SBX_HTTP_HEAD_MAX ? len : SBX_HTTP_HEAD_MAX;
    size_t head = head_end(buf, scan);
    if (head == 0)
        return len >= SBX_HTTP_HEAD_MAX ? bad(req, 431, "request head too large") : SBX_PARSE_MORE;

    struct head *st = calloc(1, sizeof(*st));
    if (!st)
        return bad(req, 400, "out of memory");
    http_parser p;
    http_parser_init(&p, HTTP_REQUEST);
    p.data = st;
    http_parser_settings s;
    http_parser_settings_init(&s);
    s.on_url = on_url;
    s.on_header_field = on_field;
    s.on_header_value = on_value;
    s.on_headers_complete = on_headers_complete;
    size_t np = http_parser_execute(&p, &s, (const char *)buf, head);
    int rc = (int)head;
    struct http_parser_url u;
    http_parser_url_init(&u);
    const char *url = st->arena + st->url_off;
    if (st->too_many)
        rc = bad(req, 431, "too many header fields");
    else if (st->bad_char)
        rc = bad(req, 400, "bad character in a header field");
    else if (HTTP_PARSER_ERRNO(&p) != HPE_OK)
        rc = bad(req, 400, http_errno_description(HTTP_PARSER_ERRNO(&p)));
    else if (np != head || !st->complete || st->url_len == 0)
        rc = bad(req, 400, "malformed request head");
    else if (p.http_major != 1)
        rc = bad(req, 400, "unsupported HTTP version");
    else if (p.method == HTTP_CONNECT) {
        req->connect = true;
        if (http_parser_parse_url(url, st->url_len, 1, &u) != 0 || copy_host(req, url, &u) < 0)
            rc = bad(req, 400, "CONNECT needs host:port");
        else if ((req->port = u.port) == 0)
            rc = bad(req, 400, "port 0");
    } else if (http_parser_parse_url(url, st->url_len, 0, &u) != 0)
        rc = bad(req, 400, "bad request target");
    else if (!(u.field_set & (1 << UF_SCHEMA)) || !(u.field_set & (1 << UF_HOST)))
        rc = bad(req, 400, "a proxy needs an absolute URL (http://host/path)");
    else if (u.field_data[UF_SCHEMA].len != 4 ||
             strncasecmp(url + u.field_data[UF_SCHEMA].off, "http", 4) != 0)
        rc = bad(req, 400, "only http:// URLs are forwarded (CONNECT for https)");
    else if (copy_host(req, url, &u) < 0)
        rc = bad(req, 400, "bad host");
    else if ((u.field_set & (1 << UF_PORT)) && u.port == 0)
        rc = bad(req, 400, "port 0");
    else {
        req->port = (u.field_set & (1 << UF_PORT)) ? u.port : 80;
        if (rewrite(st, &p, &u, req, out, cap) < 0)
            rc = SBX_PARSE_BAD;
    }
    free(st);
    return rc;
}

/* ---- the handler --------------------------------------------------------- */

struct http_state {
    struct sbx_http_req req;
    char *out; /* rewritten head, absolute-form only */
};

static void http_state_free(void *p)
{
    struct http_state *hs = p;
    free(hs->out);
    free(hs);
}

static void send_status(struct sbx_conn *c, int code, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void send_status(struct sbx_conn *c, int code, const char *reason, const char *fmt, ...)
{
    char body[256], msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof(body) - 1, fmt, ap);
    va_end(ap);
    /* One line, whatever the rule or host text held. */
    for (char *q = body; *q; q++)
        if (*q == '\r' || *q == '\n')
            *q = ' ';
    strcat(body, "\n");
    int n = snprintf(msg, sizeof(msg),
                     "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s",
                     code, reason, strlen(body), body);
    if (n > 0)
        sbx_conn_reply(c, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
}

static const char *reason_of(int status)
{
    switch (status) {
    case 400:
        return "Bad Request";
    case 431:
        return "Request Header Fields Too Large";
    default:
        return "Error";
    }
}

static void http_data(struct sbx_conn *c)
{
    if (!sbx_conn_fill(c, "request head"))
        return;
    size_t len;
    const uint8_t *buf = sbx_conn_data(c, &len);
    /* Parse only once the head is whole; the stage remembers how far the
     * search went, so a client trickling bytes costs linear time. */
    size_t from = (size_t)sbx_conn_stage(c);
    from = from > 2 ? from - 2 : 0;
    if (len < SBX_HTTP_HEAD_MAX && head_end(buf + from, len - from) == 0) {
        sbx_conn_set_stage(c, (int)len);
        return;
    }
    cleanup_free char *out = malloc(SBX_HTTP_OUT_MAX);
    if (!out) {
        sbx_conn_fail(c, "out of memory");
        return;
    }
    struct sbx_http_req req;
    int r = sbx_http_parse_head(buf, len, &req, out, SBX_HTTP_OUT_MAX);
    if (r == SBX_PARSE_MORE)
        return;
    if (r == SBX_PARSE_BAD) {
        send_status(c, req.status, reason_of(req.status), "sandbox egress: %s", req.why);
        sbx_conn_fail(c, "%d %s", req.status, req.why);
        return;
    }
    struct sbx_addr addr = {0};
    if (inet_pton(AF_INET, req.host, &addr.u.v4) == 1)
        addr.family = AF_INET;
    else if (inet_pton(AF_INET6, req.host, &addr.u.v6) == 1)
        addr.family = AF_INET6;
    else if (!sbx_dns_name_valid(req.host)) {
        send_status(c, 400, "Bad Request", "sandbox egress: invalid host name");
        sbx_conn_fail(c, "400 invalid host name");
        return;
    }
    struct http_state *hs = calloc(1, sizeof(*hs));
    if (!hs || (!req.connect && !(hs->out = malloc(req.out_len)))) {
        free(hs);
        sbx_conn_fail(c, "out of memory");
        return;
    }
    hs->req = req;
    if (!req.connect)
        memcpy(hs->out, out, req.out_len);
    sbx_conn_set_state(c, hs, http_state_free);
    sbx_conn_consume(c, (size_t)r);
    sbx_conn_target(c, addr.family ? NULL : req.host, addr.family ? &addr : NULL, req.port);
}

static void http_denied(struct sbx_conn *c, const char *rule, bool by_limit)
{
    if (by_limit)
        send_status(c, 503, "Service Unavailable", "sandbox egress refused: %s", rule);
    else
        send_status(c, 403, "Forbidden", "sandbox egress denied: %s", rule);
}

static void http_failed(struct sbx_conn *c, int errnum, const char *what)
{
    const struct http_state *hs = sbx_conn_state(c);
    if (!hs) {
        send_status(c, 408, "Request Timeout", "sandbox egress: no complete request head in time");
        return;
    }
    if (strcmp(what, "resolve") == 0)
        send_status(c, 502, "Bad Gateway", "sandbox egress: cannot resolve %s: %s", hs->req.host,
                    sbx_errno_name(errnum));
    else if (errnum == ETIMEDOUT)
        send_status(c, 504, "Gateway Timeout", "sandbox egress: connect %s port %u: %s",
                    hs->req.host, hs->req.port, sbx_errno_name(errnum));
    else
        send_status(c, 502, "Bad Gateway", "sandbox egress: connect %s port %u: %s", hs->req.host,
                    hs->req.port, sbx_errno_name(errnum));
}

static void http_connected(struct sbx_conn *c)
{
    struct http_state *hs = sbx_conn_state(c);
    if (hs->req.connect) {
        static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
        sbx_conn_queue_client(c, ok, sizeof(ok) - 1);
        return;
    }
    sbx_conn_queue_upstream(c, hs->out, hs->req.out_len);
    free(hs->out);
    hs->out = NULL;
}

static const struct sbx_conn_ops http_ops = {
    .via = SBX_VIA_HTTP,
    .proto = "http",
    .on_client_data = http_data,
    .on_denied = http_denied,
    .on_failed = http_failed,
    .on_connected = http_connected,
};

void sbx_httpproxy_accept(struct sbx_conn_ctx *c, int fd)
{
    sbx_conn_new(c, fd, &http_ops, SBX_HTTP_HEAD_MAX, NULL, 0);
}
