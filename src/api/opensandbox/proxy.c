/* Any other port of an OpenSandbox sandbox: /v1/sandboxes/{id}/proxy/{port}/...
 * is an HTTP request to that port on the sandbox's own loopback (a socket
 * made in its network namespace: never the host's), so a server an agent
 * starts inside is reachable through its endpoint, behind the same token.
 * One request per connection (Connection: close); the answer is read whole
 * (at most PROXY_MAX bytes) and then sent. A request to upgrade (WebSocket)
 * goes on with its Upgrade; when the sandbox's server answers 101, so does
 * the daemon, and from then on bytes are relayed both ways between the
 * client's connection and the sandbox's (libevent's bufferevents) until
 * either side ends. */
#include "api/opensandbox/os_int.h"

#include <ctype.h>
#include <event2/bufferevent.h>
#include <http_parser.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "api/http_internal.h"
#include "api/mhd.h"
#include "base/parse.h"

#define PROXY "/v1/sandboxes/{id}/proxy/{port}"
#define PROXY_MAX (16u << 20) /* an answer read from the sandbox */
#define PROXY_TIMEOUT_S 60    /* with no byte from the sandbox */
/* An upgraded connection: bytes one side may have waiting for the other
 * before reading from it pauses. */
#define RELAY_HIGH (1u << 20)

/* Headers that belong to one hop, or to us (the caller's token). */
static bool hop_header(const char *name)
{
    static const char *const hop[] = {"Connection",
                                      "Keep-Alive",
                                      "Proxy-Authenticate",
                                      "Proxy-Authorization",
                                      "TE",
                                      "Trailer",
                                      "Transfer-Encoding",
                                      "Upgrade",
                                      "Host",
                                      "Content-Length",
                                      "Authorization",
                                      "X-Claw-Token",
                                      "OPEN-SANDBOX-API-KEY"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(hop); i++)
        if (strcasecmp(name, hop[i]) == 0)
            return true;
    return false;
}

/* Percent-encode s, keeping unreserved characters (and '/' when path). */
static void add_encoded(struct evbuffer *b, const char *s, bool path)
{
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (isalnum(*c) || strchr("-._~", *c) || (path && *c == '/'))
            evbuffer_add(b, c, 1);
        else
            evbuffer_add_printf(b, "%%%02X", *c);
    }
}

struct build {
    struct evbuffer *b;
    bool first;
};

static enum MHD_Result add_query(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    struct build *q = cls;
    evbuffer_add(q->b, q->first ? "?" : "&", 1);
    q->first = false;
    add_encoded(q->b, key, false);
    if (value) {
        evbuffer_add(q->b, "=", 1);
        add_encoded(q->b, value, false);
    }
    return MHD_YES;
}

static enum MHD_Result add_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
    struct build *h = cls;
    /* A name or value with CR or LF would split the request: left out. */
    if (!hop_header(key) && !strpbrk(key, "\r\n") && !strpbrk(value ? value : "", "\r\n"))
        evbuffer_add_printf(h->b, "%s: %s\r\n", key, value ? value : "");
    return MHD_YES;
}

/* One proxied request. */
struct proxy {
    sbx_http_request *req;
    struct bufferevent *bev;
    bool upgrade;               /* the client asked to upgrade */
    struct bufferevent *client; /* upgraded: the client's connection */
    sbx_http_upgrade *up;       /* ... and its handle */
    bool ending;                /* upgraded: one side ended, the other drains */
    /* the answer, parsed */
    http_parser parser;
    json_t *headers; /* [[name, value], ...] */
    struct evbuffer *body;
    bool complete;
    bool in_value;
    struct evbuffer *field, *value;
};

static void proxy_free(struct proxy *p)
{
    if (p->bev)
        bufferevent_free(p->bev);
    if (p->client)
        bufferevent_free(p->client); /* not its socket: the upgrade's close */
    sbx_http_upgrade_close(p->up);
    json_decref(p->headers);
    if (p->body)
        evbuffer_free(p->body);
    if (p->field)
        evbuffer_free(p->field);
    if (p->value)
        evbuffer_free(p->value);
    free(p);
}

static void header_done(struct proxy *p)
{
    if (!p->in_value)
        return;
    evbuffer_add(p->field, "", 1);
    evbuffer_add(p->value, "", 1);
    json_array_append_new(p->headers,
                          json_pack("[s, s]", (const char *)evbuffer_pullup(p->field, -1),
                                    (const char *)evbuffer_pullup(p->value, -1)));
    evbuffer_drain(p->field, evbuffer_get_length(p->field));
    evbuffer_drain(p->value, evbuffer_get_length(p->value));
    p->in_value = false;
}

static int on_field(http_parser *hp, const char *at, size_t len)
{
    struct proxy *p = hp->data;
    header_done(p);
    evbuffer_add(p->field, at, len);
    return 0;
}

static int on_value(http_parser *hp, const char *at, size_t len)
{
    struct proxy *p = hp->data;
    p->in_value = true;
    evbuffer_add(p->value, at, len);
    return 0;
}

static int on_headers_complete(http_parser *hp)
{
    header_done(hp->data);
    return 0;
}

static int on_body(http_parser *hp, const char *at, size_t len)
{
    struct proxy *p = hp->data;
    evbuffer_add(p->body, at, len);
    return 0;
}

static int on_complete(http_parser *hp)
{
    ((struct proxy *)hp->data)->complete = true;
    return 0;
}

static const http_parser_settings parse_settings = {.on_header_field = on_field,
                                                    .on_header_value = on_value,
                                                    .on_headers_complete = on_headers_complete,
                                                    .on_body = on_body,
                                                    .on_message_complete = on_complete};

/* The whole answer is in (the sandbox closed): parsed and sent on. */
static void proxy_answer(struct proxy *p)
{
    struct evbuffer *in = bufferevent_get_input(p->bev);
    size_t len = evbuffer_get_length(in);
    const char *data = (const char *)evbuffer_pullup(in, -1);
    json_array_clear(p->headers);
    http_parser_init(&p->parser, HTTP_RESPONSE);
    p->parser.data = p;
    size_t n = http_parser_execute(&p->parser, &parse_settings, data ? data : "", len);
    if (n == len && !p->complete)
        http_parser_execute(&p->parser, &parse_settings, NULL, 0); /* the end of the stream */
    if (!p->complete || HTTP_PARSER_ERRNO(&p->parser) != HPE_OK) {
        sbx_http_respond_error_status(p->req, 502, "bad_gateway",
                                      "the sandbox's server gave no complete HTTP answer");
        return;
    }
    const char *type = NULL;
    size_t i;
    json_t *h;
    json_array_foreach(p->headers, i, h)
    {
        const char *name = json_string_value(json_array_get(h, 0));
        const char *value = json_string_value(json_array_get(h, 1));
        if (strcasecmp(name, "Content-Type") == 0)
            type = value;
        else if (!hop_header(name))
            sbx_http_add_header(p->req, name, value);
    }
    const char *body = (const char *)evbuffer_pullup(p->body, -1);
    sbx_http_respond_data(p->req, p->parser.status_code, type, body ? body : "",
                          evbuffer_get_length(p->body));
}

/* ---- an upgraded connection: bytes both ways ---- */

static struct bufferevent *other_side(struct proxy *p, struct bufferevent *bev)
{
    return bev == p->bev ? p->client : p->bev;
}

static void relay_read(struct bufferevent *bev, void *ud)
{
    struct proxy *p = ud;
    struct bufferevent *to = other_side(p, bev);
    struct evbuffer *out = bufferevent_get_output(to);
    evbuffer_add_buffer(out, bufferevent_get_input(bev));
    /* Back-pressure: a side whose bytes wait unsent is not read meanwhile;
     * the other's write callback (below half) reads it again. */
    if (evbuffer_get_length(out) >= RELAY_HIGH)
        bufferevent_disable(bev, EV_READ);
}

static void relay_write(struct bufferevent *bev, void *ud)
{
    struct proxy *p = ud;
    if (p->ending && evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
        proxy_free(p); /* what the ended side sent is delivered */
        return;
    }
    if (!p->ending)
        bufferevent_enable(other_side(p, bev), EV_READ);
}

static void relay_event(struct bufferevent *bev, short what, void *ud)
{
    struct proxy *p = ud;
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    struct bufferevent *to = other_side(p, bev);
    if (p->ending || (what & BEV_EVENT_ERROR) ||
        evbuffer_get_length(bufferevent_get_output(to)) == 0) {
        proxy_free(p);
        return;
    }
    /* One side ended: the other gets what is still on its way, then both
     * close (a WebSocket's close frames have crossed by then). */
    p->ending = true;
    bufferevent_disable(bev, EV_READ);
    bufferevent_disable(to, EV_READ);
    bufferevent_setwatermark(to, EV_WRITE, 0, 0);
}

static void relay_stop(void *ud)
{
    proxy_free(ud); /* the server stops */
}

static void on_upgraded(void *ud, int fd, const char *extra, size_t extra_len, sbx_http_upgrade *up)
{
    struct proxy *p = ud;
    p->up = up;
    p->req = NULL; /* answered; it ends when the upgrade closes */
    if (evutil_make_socket_nonblocking(fd) < 0 ||
        !(p->client = bufferevent_socket_new(bufferevent_get_base(p->bev), fd, 0))) {
        proxy_free(p);
        return;
    }
    /* What the client sent after its head goes first. */
    if (extra_len)
        bufferevent_write(p->bev, extra, extra_len);
    bufferevent_set_timeouts(p->bev, NULL, NULL);
    for (int i = 0; i < 2; i++) {
        struct bufferevent *b = i ? p->client : p->bev;
        bufferevent_setcb(b, relay_read, relay_write, relay_event, p);
        bufferevent_setwatermark(b, EV_WRITE, RELAY_HIGH / 2, 0);
        bufferevent_enable(b, EV_READ | EV_WRITE);
    }
    /* Bytes the sandbox sent right after its 101 head. */
    if (evbuffer_get_length(bufferevent_get_input(p->bev)))
        relay_read(p->bev, p);
}

/* An upgrade asked for: once the sandbox's answer head is in, a 101 is
 * answered as one (then relayed); anything else as a plain answer. */
static void upgrade_head(struct proxy *p)
{
    struct evbuffer *in = bufferevent_get_input(p->bev);
    struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
    if (end.pos < 0)
        return;
    size_t head = (size_t)end.pos + 4;
    const char *data = (const char *)evbuffer_pullup(in, (ev_ssize_t)head);
    json_array_clear(p->headers);
    http_parser_init(&p->parser, HTTP_RESPONSE);
    p->parser.data = p;
    http_parser_execute(&p->parser, &parse_settings, data, head);
    if (p->parser.status_code != 101 || !p->parser.upgrade) {
        p->upgrade = false; /* a plain answer: read to its end as any */
        return;
    }
    size_t i;
    json_t *h;
    json_array_foreach(p->headers, i, h)
    {
        const char *name = json_string_value(json_array_get(h, 0));
        const char *value = json_string_value(json_array_get(h, 1));
        if (strcasecmp(name, "Upgrade") == 0 || !hop_header(name))
            sbx_http_add_header(p->req, name, value);
    }
    evbuffer_drain(in, head);
    bufferevent_disable(p->bev, EV_READ); /* until the client's side is ours */
    if (sbx_http_respond_upgrade(p->req, on_upgraded, relay_stop, p) < 0)
        proxy_free(p);
}

static void on_read(struct bufferevent *bev, void *ud)
{
    struct proxy *p = ud;
    if (p->upgrade) {
        upgrade_head(p);
        return;
    }
    if (evbuffer_get_length(bufferevent_get_input(bev)) > PROXY_MAX) {
        sbx_http_respond_error_status(p->req, 502, "bad_gateway",
                                      "the sandbox's answer is larger than %u MiB",
                                      PROXY_MAX >> 20);
        proxy_free(p);
    }
}

static void on_event(struct bufferevent *bev, short what, void *ud)
{
    struct proxy *p = ud;
    if (what & BEV_EVENT_EOF)
        proxy_answer(p);
    else if (what & BEV_EVENT_TIMEOUT)
        sbx_http_respond_error_status(p->req, 504, "gateway_timeout",
                                      "the sandbox's server sent nothing for %d s",
                                      PROXY_TIMEOUT_S);
    else if (what & BEV_EVENT_ERROR)
        sbx_http_respond_error_status(p->req, 502, "bad_gateway",
                                      "the sandbox's server could not be reached: %s",
                                      evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
    else
        return;
    proxy_free(p);
}

static void proxy_cancel(sbx_http_request *req, void *ud)
{
    proxy_free(ud); /* the client left */
}

static void h_proxy(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, false);
    if (!b)
        return;
    const char *port_s = sbx_http_req_param(req, "port");
    uint64_t port;
    sbx_err e = {0};
    if (sbx_parse_uint(port_s, 1, 65535, &port, &e) < 0) {
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "port: %s", e.msg);
        return;
    }
    if (strcmp(port_s, OS_EXECD_PORT) == 0 || strcmp(port_s, OS_EGRESS_PORT) == 0) {
        sbx_http_respond_error(req, SBX_HTTP_NOT_FOUND, "no %s route %s",
                               port == 18080 ? "egress" : "execd", sbx_http_req_path(req));
        return;
    }
    /* The request line: the path after the port, the query as given. */
    char prefix[160];
    snprintf(prefix, sizeof(prefix), "/v1/sandboxes/%s/proxy/%s", b->id, port_s);
    const char *rest = sbx_http_req_path(req) + strlen(prefix);
    struct proxy *p = calloc(1, sizeof(*p));
    struct evbuffer *out = evbuffer_new();
    if (!p || !out || !(p->headers = json_array()) || !(p->body = evbuffer_new()) ||
        !(p->field = evbuffer_new()) || !(p->value = evbuffer_new())) {
        if (out)
            evbuffer_free(out);
        if (p)
            proxy_free(p);
        sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
        return;
    }
    p->req = req;
    struct build q = {.b = out, .first = true};
    evbuffer_add_printf(out, "%s ", sbx_http_req_method(req));
    add_encoded(out, *rest ? rest : "/", true);
    sbx_mhd.get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, add_query, &q);
    size_t body_len;
    const char *body = sbx_http_req_body(req, &body_len);
    /* An upgrade (Connection: upgrade, Upgrade: x) goes on as one. */
    const char *upg = sbx_http_req_header(req, "Upgrade");
    const char *conn = sbx_http_req_header(req, "Connection");
    p->upgrade = upg && conn && strcasestr(conn, "upgrade") && !strpbrk(upg, "\r\n") &&
                 strcmp(sbx_http_req_method(req), "GET") == 0;
    evbuffer_add_printf(out, " HTTP/1.1\r\nHost: 127.0.0.1:%s\r\n", port_s);
    if (p->upgrade)
        evbuffer_add_printf(out, "Connection: Upgrade\r\nUpgrade: %s\r\n", upg);
    else
        evbuffer_add_printf(out, "Connection: close\r\n");
    sbx_mhd.get_connection_values(req->conn, MHD_HEADER_KIND, add_header, &q);
    if (p->upgrade && !body_len)
        evbuffer_add(out, "\r\n", 2);
    else
        evbuffer_add_printf(out, "Content-Length: %zu\r\n\r\n", body_len);
    evbuffer_add(out, body, body_len);
    int fd = sbx_runtime_session_connect(b->os->api->rt, &b->clone, b->id, (uint16_t)port, &e);
    if (fd < 0) {
        evbuffer_free(out);
        proxy_free(p);
        if (e.errnum == ECONNREFUSED)
            sbx_http_respond_error_status(
                req, 502, "bad_gateway", "nothing listens on port %s in sandbox %s", port_s, b->id);
        else
            sbx_http_respond_err(req, &e);
        return;
    }
    struct timeval tv = {.tv_sec = PROXY_TIMEOUT_S};
    if (!(p->bev = bufferevent_socket_new(req->srv->base, fd, BEV_OPT_CLOSE_ON_FREE))) {
        close(fd);
        evbuffer_free(out);
        proxy_free(p);
        sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
        return;
    }
    bufferevent_setcb(p->bev, on_read, NULL, on_event, p);
    bufferevent_set_timeouts(p->bev, &tv, &tv);
    bufferevent_write_buffer(p->bev, out);
    evbuffer_free(out);
    bufferevent_enable(p->bev, EV_READ | EV_WRITE);
    sbx_http_req_defer(req, proxy_cancel, p);
}

int os_proxy_routes(sbx_http_server *srv, struct os_state *os, sbx_err *err)
{
    /* The router's placeholders take one segment each: a pattern per depth. */
    static const char *const depths[] = {
        PROXY,
        PROXY "/{a}",
        PROXY "/{a}/{b}",
        PROXY "/{a}/{b}/{c}",
        PROXY "/{a}/{b}/{c}/{d}",
        PROXY "/{a}/{b}/{c}/{d}/{e}",
        PROXY "/{a}/{b}/{c}/{d}/{e}/{f}",
    };
    static const char *const methods[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"};
    for (size_t d = 0; d < SBX_ARRAY_LEN(depths); d++)
        for (size_t m = 0; m < SBX_ARRAY_LEN(methods); m++)
            if (sbx_http_route(srv, methods[m], depths[d], h_proxy, os, 0, err) < 0)
                return -1;
    return 0;
}
