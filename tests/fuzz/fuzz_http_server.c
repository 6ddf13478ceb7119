/* libFuzzer target: the API's HTTP server driven for real. Each input is
 * the raw bytes a client sends on one connection to a `sandboxd serve`-like
 * server (libmicrohttpd on our loop, our access handler, auth, routing,
 * bodies buffered, streamed and paused, deferred answers, SSE), here with
 * small limits so that the 413 and discard paths are reached, and handlers
 * of its own that use every accessor a route uses. The loop runs until the
 * server has closed the connection (the input is followed by the client's
 * end of sending) or it stays idle for a few rounds.
 *
 * Beyond "no crash, no leak": whatever the server sends back starts as an
 * HTTP/1.x status line; every request that reached a handler was
 * authenticated; no handler ever sees a body larger than max_body, or a
 * path, query value or header holding a NUL. Nothing leaves the machine:
 * the server listens on a unix socket in a temporary directory. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>

#include "api/http.h"
#include "api/sse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_BODY 4096
#define ROUNDS 64

static struct {
    struct event_base *base;
    sbx_http_server *srv;
    sbx_auth *auth;
    char dir[64], path[128];
    struct event *later; /* answers a deferred request */
    sbx_http_request *deferred;
    size_t streamed;
} g;

static void check_request(sbx_http_request *req)
{
    assert(sbx_http_req_identity(req) != NULL); /* no route is public here */
    const char *path = sbx_http_req_path(req);
    assert(path && path[0] == '/');
    size_t len;
    const char *body = sbx_http_req_body(req, &len);
    assert(len <= MAX_BODY && body[len] == '\0');
}

static void h_json(sbx_http_request *req, void *ud)
{
    check_request(req);
    static const char *const allowed[] = {"a", "b", "sessionID", NULL};
    json_t *v = sbx_http_req_json(req, allowed);
    if (v)
        sbx_http_respond_json(req, 200, v);
}

static void h_query(sbx_http_request *req, void *ud)
{
    check_request(req);
    const char *id = sbx_http_req_param(req, "id");
    assert(id && *id && !strchr(id, '/'));
    const char *a = sbx_http_req_query(req, "a"), *b = sbx_http_req_query(req, "b");
    const char *t = sbx_http_req_header(req, "X-Tenant-Code");
    uint64_t after;
    sbx_err e = {0};
    if (sbx_sse_last_event_id(sbx_http_req_header(req, "Last-Event-ID"), &after, &e) < 0)
        return (void)sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "Last-Event-ID: %s", e.msg);
    sbx_http_add_header(req, "X-Echo", a ? a : "-"); /* refused when it holds CR or LF */
    json_t *o = json_pack("{s:s, s:s?, s:s?, s:s?, s:I}", "id", id, "a", a, "b", b, "tenant", t,
                          "after", (json_int_t)after);
    if (!o)
        return (void)sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "not UTF-8");
    sbx_http_respond_json(req, 200, o);
}

static void on_later(evutil_socket_t fd, short what, void *arg)
{
    if (g.deferred) {
        sbx_http_request *req = g.deferred;
        g.deferred = NULL;
        sbx_http_respond_data(req, 200, "text/plain", "late\n", 5);
    }
}

static void deferred_cancel(sbx_http_request *req, void *ud)
{
    if (g.deferred == req)
        g.deferred = NULL;
}

static void h_defer(sbx_http_request *req, void *ud)
{
    check_request(req);
    if (g.deferred)
        return (void)sbx_http_respond_error(req, SBX_HTTP_CONFLICT, "one at a time");
    g.deferred = req;
    sbx_http_req_defer(req, deferred_cancel, NULL);
    event_active(g.later, EV_TIMEOUT, 0);
}

/* An upload: takes at most 7 bytes a chunk, so MHD keeps the rest and the
 * body is paused and resumed again and again. */
static struct event *resume_ev;
static sbx_http_request *paused;

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    if (paused) {
        sbx_http_request *req = paused;
        paused = NULL;
        sbx_http_req_resume_body(req);
    }
}

static ssize_t up_chunk(sbx_http_request *req, const char *d, size_t len, void *ud)
{
    size_t take = len < 7 ? len : 7;
    g.streamed += take;
    if (g.streamed > 64 * 1024)
        return sbx_http_respond_error(req, SBX_HTTP_TOO_LARGE, "enough"), -1;
    if (take < len) {
        paused = req;
        event_active(resume_ev, EV_TIMEOUT, 0);
    }
    return (ssize_t)take;
}

static void up_end(sbx_http_request *req, void *ud)
{
    if (paused == req)
        paused = NULL;
    json_t *o = json_pack("{s:I}", "bytes", (json_int_t)g.streamed);
    sbx_http_respond_json(req, 201, o);
}

static void up_cancel(sbx_http_request *req, void *ud)
{
    if (paused == req)
        paused = NULL;
}

static void h_upload(sbx_http_request *req, void *ud)
{
    check_request(req);
    g.streamed = 0;
    if (sbx_http_req_query(req, "refuse"))
        return (void)sbx_http_respond_error(req, SBX_HTTP_FORBIDDEN, "refused before the body");
    sbx_http_body_sink sink = {.chunk = up_chunk, .end = up_end, .cancel = up_cancel};
    sbx_http_req_stream_body(req, &sink);
}

static void sse_close(sbx_sse *sse, void *ud) {}

static void h_stream(sbx_http_request *req, void *ud)
{
    check_request(req);
    sbx_sse_opts o = {.on_close = sse_close, .buffer = 1024};
    sbx_sse *sse = sbx_http_respond_sse(req, &o);
    if (!sse)
        return;
    const char *a = sbx_http_req_query(req, "a");
    sbx_err e = {0};
    sbx_sse_send(sse, "1", "x", a ? a : "", a ? strlen(a) : 0, &e);
    sbx_sse_close(sse);
}

static void setup(void)
{
    sbx_err e = {0};
    g.base = event_base_new();
    assert(g.base);
    snprintf(g.dir, sizeof(g.dir), "/tmp/fuzz-http-XXXXXX");
    assert(mkdtemp(g.dir));
    snprintf(g.path, sizeof(g.path), "%s/api.sock", g.dir);
    char listen[160];
    snprintf(listen, sizeof(listen), "unix:%s", g.path);
    g.auth = sbx_auth_new();
    assert(g.auth &&
           sbx_auth_add(g.auth, &(sbx_auth_token){.name = "op", .token = "tok"}, &e) == 0);
    sbx_http_config cfg = {.listen = listen,
                           .auth = g.auth,
                           .max_body = MAX_BODY,
                           .discard_max = 8192,
                           .conn_memory = 4096,
                           .sigpipe_ignored = true};
    signal(SIGPIPE, SIG_IGN);
    assert(sbx_http_server_new(g.base, &cfg, &g.srv, &e) == 0);
    assert(sbx_http_route(g.srv, "POST", "/json", h_json, NULL, 0, &e) == 0);
    assert(sbx_http_route(g.srv, "GET", "/q/{id}", h_query, NULL, 0, &e) == 0);
    assert(sbx_http_route(g.srv, "GET", "/defer", h_defer, NULL, 0, &e) == 0);
    assert(sbx_http_route(g.srv, "GET", "/stream", h_stream, NULL, 0, &e) == 0);
    assert(sbx_http_route(g.srv, "PUT", "/upload", h_upload, NULL, SBX_HTTP_ROUTE_STREAM_BODY,
                          &e) == 0);
    if (sbx_http_server_listen(g.srv, &e) < 0) {
        fprintf(stderr, "listen: %s\n", e.msg);
        abort();
    }
    g.later = event_new(g.base, -1, 0, on_later, NULL);
    resume_ev = event_new(g.base, -1, 0, on_resume, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g.base)
        setup();
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    assert(c >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", g.path);
    assert(connect(c, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    size_t sent = 0;
    bool shut = false, closed = false;
    char first[16];
    size_t first_len = 0;
    for (int idle = 0; idle < ROUNDS && !closed;) {
        bool progress = false;
        if (sent < size) {
            ssize_t n = send(c, data + sent, size - sent, MSG_NOSIGNAL);
            if (n > 0) {
                sent += (size_t)n;
                progress = true;
            } else if (n < 0 && errno != EAGAIN) {
                sent = size; /* the server hung up */
            }
        }
        if (sent == size && !shut) {
            shutdown(c, SHUT_WR);
            shut = true;
        }
        event_base_loop(g.base, EVLOOP_NONBLOCK);
        char buf[4096];
        ssize_t n;
        while ((n = recv(c, buf, sizeof(buf), 0)) > 0) {
            if (first_len < sizeof(first)) {
                size_t k =
                    sizeof(first) - first_len < (size_t)n ? sizeof(first) - first_len : (size_t)n;
                memcpy(first + first_len, buf, k);
                first_len += k;
            }
            progress = true;
        }
        if (n == 0 || (n < 0 && errno != EAGAIN))
            closed = true;
        idle = progress ? 0 : idle + 1;
    }
    if (first_len >= 8)
        assert(!memcmp(first, "HTTP/1.", 7));
    if (getenv("FUZZ_HTTP_SHOW")) /* what the seeds reach, for whoever writes them */
        fprintf(stderr, "reply: %.*s\n", (int)first_len, first);
    close(c);
    /* Let the server see the close and end whatever is left. */
    for (int i = 0; i < 4; i++)
        event_base_loop(g.base, EVLOOP_NONBLOCK);
    return 0;
}
