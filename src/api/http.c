#include "api/http_internal.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "api/json.h"
#include "base/log.h"
#include "base/parse.h"

#define DEFAULT_MAX_BODY (1u << 20)
#define DEFAULT_MAX_CONNECTIONS 512
#define DEFAULT_MAX_PER_IP 256
#define DEFAULT_IDLE_TIMEOUT_S 60
#define DEFAULT_HEADER_TIMEOUT_S 15
#define DEFAULT_CONN_MEMORY (32u << 10)
#define MIN_CONN_MEMORY (8u << 10)
#define DEFAULT_SSE_BUFFER (256u << 10)
#define DEFAULT_DISCARD_MAX (16u << 20)
#define PRODUCER_BLOCK (64u << 10)

static void kick(sbx_http_server *srv);
static int answer_error(sbx_http_request *req, unsigned status, const char *code, const char *fmt,
                        va_list ap) __attribute__((format(printf, 4, 0)));

/* ---------------------------------------------------------------------- */
/* Driving MHD from the loop                                               */

static void rearm(sbx_http_server *srv)
{
    struct timeval tv = {0, 0};
    if (srv->kick) {
        srv->kick = false;
    } else {
        MHD_UNSIGNED_LONG_LONG ms;
        if (sbx_mhd.get_timeout(srv->mhd, &ms) != MHD_YES) {
            evtimer_del(srv->timer_ev);
            return;
        }
        tv.tv_sec = (time_t)(ms / 1000);
        tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
    }
    evtimer_add(srv->timer_ev, &tv);
}

static void run_mhd(sbx_http_server *srv)
{
    srv->in_run = true;
    sbx_mhd.run(srv->mhd);
    srv->in_run = false;
    rearm(srv);
}

static void on_mhd_io(evutil_socket_t fd, short what, void *arg)
{
    run_mhd(arg);
}

static void on_mhd_timer(evutil_socket_t fd, short what, void *arg)
{
    run_mhd(arg);
}

/* Something changed outside MHD's view (a resume): run it again soon. */
static void kick(sbx_http_server *srv)
{
    if (srv->stopping || !srv->mhd)
        return;
    if (srv->in_run) {
        srv->kick = true;
        return;
    }
    struct timeval now = {0, 0};
    evtimer_add(srv->timer_ev, &now);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    sbx_http_server *srv = cls;
    if (!srv->cfg.log)
        return;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    srv->cfg.log(srv->cfg.log_ud, msg);
}

static void logf_srv(sbx_http_server *srv, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void logf_srv(sbx_http_server *srv, const char *fmt, ...)
{
    if (!srv->cfg.log)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    srv->cfg.log(srv->cfg.log_ud, msg);
}

/* ---------------------------------------------------------------------- */
/* Connections                                                             */

static void header_timer_start(struct conn_ctx *cc)
{
    if (!cc->header_timer || cc->srv->stopping)
        return;
    struct timeval tv = {.tv_sec = cc->srv->cfg.header_timeout_s};
    evtimer_add(cc->header_timer, &tv);
}

/* MHD only knows an idle timeout, which a client trickling one byte at a
 * time never reaches: cut a connection whose headers take too long. The
 * shutdown makes MHD see the end of the stream and clean up as usual. */
static void on_header_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct conn_ctx *cc = arg;
    logf_srv(cc->srv, "closing a connection: no complete request within %us",
             cc->srv->cfg.header_timeout_s);
    shutdown(cc->fd, SHUT_RDWR);
    kick(cc->srv);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    sbx_http_server *srv = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        struct conn_ctx *cc = calloc(1, sizeof(*cc));
        const union MHD_ConnectionInfo *ci =
            sbx_mhd.get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!cc || !ci) {
            free(cc);
            return;
        }
        cc->srv = srv;
        cc->conn = conn;
        cc->fd = ci->connect_fd;
        cc->header_timer = evtimer_new(srv->base, on_header_timeout, cc);
        header_timer_start(cc);
        *socket_context = cc;
        return;
    }
    struct conn_ctx *cc = *socket_context;
    if (!cc)
        return;
    if (cc->req)
        cc->req->cc = NULL;
    if (cc->header_timer)
        event_free(cc->header_timer);
    free(cc);
    *socket_context = NULL;
}

static struct conn_ctx *conn_ctx_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        sbx_mhd.get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* MHD's own %HH decoding, plus a note when it yields a NUL: C strings would
 * silently cut such a name short ("a%00/../b"), so the request is refused. */
static size_t unescape(void *cls, struct MHD_Connection *conn, char *s)
{
    char *out = s;
    bool nul = false;
    for (const char *in = s; *in;) {
        int hi, lo;
        if (in[0] == '%' && (hi = sbx_hex_digit(in[1])) >= 0 && (lo = sbx_hex_digit(in[2])) >= 0) {
            char c = (char)(hi << 4 | lo);
            nul = nul || c == '\0';
            *out++ = c;
            in += 3;
        } else {
            *out++ = *in++;
        }
    }
    *out = '\0';
    if (nul) {
        struct conn_ctx *cc = conn_ctx_of(conn);
        if (cc)
            cc->bad_nul = true;
    }
    return (size_t)(out - s);
}

/* ---------------------------------------------------------------------- */
/* Parking and disconnects                                                 */

static void watch_stop(sbx_http_request *req)
{
    if (req->watch) {
        event_free(req->watch);
        req->watch = NULL;
    }
}

static void fire_cancel(sbx_http_request *req)
{
    if (req->cancelled || req->answered)
        return;
    req->cancelled = true;
    if (req->cancel_fn)
        req->cancel_fn(req, req->cancel_ud);
}

static void tell_ended(sbx_http_request *req)
{
    void (*ended)(void *ud) = req->ended;
    req->ended = NULL;
    if (ended)
        ended(req->ended_ud);
}

/* The client is gone while its connection was parked (or we are stopping):
 * tell the owner, then wake the connection so MHD closes it. */
static void client_gone(sbx_http_request *req)
{
    req->gone = true;
    watch_stop(req);
    fire_cancel(req);
    if (req->suspended)
        sbx_http__resume(req);
}

/* MHD does not watch a parked connection, so a client that hangs up would
 * go unnoticed until we answer: watch for the end of its stream ourselves. */
static void on_watch(evutil_socket_t fd, short what, void *arg)
{
    sbx_http_request *req = arg;
    if (!(what & EV_CLOSED)) {
        char c;
        ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n > 0) {
            /* A pipelined next request: it cannot be read now, and polling
             * for it would spin. MHD sees the connection again on resume. */
            watch_stop(req);
            return;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
    }
    client_gone(req);
}

static void watch_start(sbx_http_request *req)
{
    if (req->watch || !req->cc || req->cc->fd < 0)
        return;
    short what = req->srv->early_close ? EV_CLOSED : EV_READ;
    req->watch = event_new(req->srv->base, req->cc->fd, what | EV_PERSIST, on_watch, req);
    if (req->watch)
        event_add(req->watch, NULL);
}

void sbx_http__suspend(sbx_http_request *req)
{
    if (req->suspended)
        return;
    sbx_mhd.suspend_connection(req->conn);
    req->suspended = true;
    watch_start(req);
}

void sbx_http__resume(sbx_http_request *req)
{
    if (!req->suspended)
        return;
    watch_stop(req);
    req->suspended = false;
    sbx_mhd.resume_connection(req->conn);
    kick(req->srv);
}

/* ---------------------------------------------------------------------- */
/* Answers                                                                 */

static bool header_name_ok(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c <= 0x20 || c >= 0x7f || strchr("()<>@,;:\\\"/[]?={}", c))
            return false;
    }
    return true;
}

static bool header_value_ok(const char *s)
{
    return !strpbrk(s, "\r\n");
}

int sbx_http_add_header(sbx_http_request *req, const char *name, const char *value)
{
    if (req->answered || !header_name_ok(name) || !header_value_ok(value))
        return -1;
    struct resp_header *h = calloc(1, sizeof(*h));
    if (!h || !(h->name = strdup(name)) || !(h->value = strdup(value))) {
        if (h)
            free(h->name);
        free(h);
        return -1;
    }
    struct resp_header **tail = &req->hdrs;
    while (*tail)
        tail = &(*tail)->next;
    *tail = h;
    return 0;
}

static void free_headers(sbx_http_request *req)
{
    while (req->hdrs) {
        struct resp_header *h = req->hdrs;
        req->hdrs = h->next;
        free(h->name);
        free(h->value);
        free(h);
    }
}

/* Hand the pending answer to MHD; only from the access handler (or while
 * the connection is parked). */
static enum MHD_Result flush_answer(sbx_http_request *req)
{
    if (!req->resp)
        return MHD_YES;
    enum MHD_Result r = sbx_mhd.queue_response(req->conn, req->resp_status, req->resp);
    sbx_mhd.destroy_response(req->resp);
    req->resp = NULL;
    if (r != MHD_YES)
        return MHD_NO;
    req->queued = true;
    return MHD_YES;
}

int sbx_http__answer(sbx_http_request *req, unsigned status, struct MHD_Response *resp)
{
    if (!resp)
        return -1;
    if (req->answered || req->gone) {
        sbx_mhd.destroy_response(resp);
        return -1;
    }
    for (struct resp_header *h = req->hdrs; h; h = h->next)
        sbx_mhd.add_response_header(resp, h->name, h->value);
    free_headers(req);
    sbx_mhd.add_response_header(resp, "X-Content-Type-Options", "nosniff");
    req->answered = true;
    req->resp = resp;
    req->resp_status = status;
    if (req->body_paused) {
        /* MHD takes no answer before the body is in: drop the rest of it,
         * the answer goes out at the end (see discard_max). */
        req->mode = BODY_DISCARD;
        req->body_paused = false;
        sbx_http__resume(req);
    } else if (req->suspended) {
        /* MHD takes an answer for a parked connection at any time. */
        if (flush_answer(req) != MHD_YES)
            req->gone = true; /* the access handler will close it */
        sbx_http__resume(req);
    }
    /* Otherwise we are inside one of MHD's callbacks, or the body is still
     * arriving: the access handler hands it over at its next call. */
    return 0;
}

static struct MHD_Response *buffer_response(char *buf, size_t len)
{
    struct MHD_Response *r = sbx_mhd.create_response_from_buffer_with_free_callback(len, buf, free);
    if (!r)
        free(buf);
    return r;
}

/* Out of memory while answering: still say something. */
static void answer_oom(sbx_http_request *req)
{
    static const char body[] =
        "{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}\n";
    struct MHD_Response *r =
        sbx_mhd.create_response_from_buffer(sizeof(body) - 1, (void *)body, MHD_RESPMEM_PERSISTENT);
    if (r) {
        sbx_mhd.add_response_header(r, "Content-Type", "application/json");
        sbx_http__answer(req, MHD_HTTP_INTERNAL_SERVER_ERROR, r);
    } else {
        client_gone(req); /* nothing can be said: close the connection */
    }
}

int sbx_http_respond_json(sbx_http_request *req, unsigned status, json_t *body)
{
    if (req->answered || req->gone) {
        json_decref(body);
        return -1;
    }
    char *text =
        body ? json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(body);
    size_t len = text ? strlen(text) : 0;
    char *buf = text ? realloc(text, len + 2) : NULL;
    if (!buf) {
        free(text);
        answer_oom(req);
        return -1;
    }
    buf[len++] = '\n';
    buf[len] = '\0';
    struct MHD_Response *r = buffer_response(buf, len);
    if (!r) {
        answer_oom(req);
        return -1;
    }
    sbx_mhd.add_response_header(r, "Content-Type", "application/json");
    sbx_mhd.add_response_header(r, "Cache-Control", "no-store");
    return sbx_http__answer(req, status, r);
}

static const struct {
    unsigned status;
    const char *code;
} errors[] = {
    [SBX_HTTP_BAD_REQUEST] = {400, "bad_request"},
    [SBX_HTTP_UNAUTHORIZED] = {401, "unauthorized"},
    [SBX_HTTP_FORBIDDEN] = {403, "forbidden"},
    [SBX_HTTP_NOT_FOUND] = {404, "not_found"},
    [SBX_HTTP_METHOD_NOT_ALLOWED] = {405, "method_not_allowed"},
    [SBX_HTTP_CONFLICT] = {409, "conflict"},
    [SBX_HTTP_TOO_LARGE] = {413, "too_large"},
    [SBX_HTTP_TOO_MANY_REQUESTS] = {429, "too_many_requests"},
    [SBX_HTTP_INTERNAL] = {500, "internal"},
    [SBX_HTTP_NOT_READY] = {503, "not_ready"},
    [SBX_HTTP_INSUFFICIENT_STORAGE] = {507, "insufficient_storage"},
};

unsigned sbx_http_error_status(sbx_http_error kind)
{
    return (size_t)kind < SBX_ARRAY_LEN(errors) ? errors[kind].status : 500;
}

const char *sbx_http_error_code(sbx_http_error kind)
{
    return (size_t)kind < SBX_ARRAY_LEN(errors) ? errors[kind].code : "internal";
}

/* The API's one errno -> answer mapping. `plain`: the client's own doing,
 * which err->msg names (a bad path, a refused tenant, a full queue or disk):
 * the message stands alone; otherwise strerror() says what failed. */
static const struct {
    int errnum;
    sbx_http_error kind;
    bool plain;
} errno_answers[] = {
    {ENOENT, SBX_HTTP_NOT_FOUND, true},
    {ESRCH, SBX_HTTP_NOT_FOUND, false},
    {EEXIST, SBX_HTTP_CONFLICT, false},
    {EBUSY, SBX_HTTP_CONFLICT, false},
    {ENOTEMPTY, SBX_HTTP_CONFLICT, false},
    {EALREADY, SBX_HTTP_CONFLICT, false},
    /* What the object is cannot do it (a session without an egress). */
    {ENOTSUP, SBX_HTTP_CONFLICT, true},
    {EACCES, SBX_HTTP_FORBIDDEN, true},
    {EPERM, SBX_HTTP_FORBIDDEN, false},
    {EROFS, SBX_HTTP_FORBIDDEN, false},
    /* A count the daemon caps (a tenant's clones); a full workspace is
     * ENOSPC (it is a filesystem of its own), so is a full store. */
    {EDQUOT, SBX_HTTP_FORBIDDEN, true},
    {EINVAL, SBX_HTTP_BAD_REQUEST, true},
    {ENAMETOOLONG, SBX_HTTP_BAD_REQUEST, true},
    {ELOOP, SBX_HTTP_BAD_REQUEST, true},
    {EXDEV, SBX_HTTP_BAD_REQUEST, true},
    {ENOTDIR, SBX_HTTP_BAD_REQUEST, true},
    {EISDIR, SBX_HTTP_BAD_REQUEST, true},
    {EDOM, SBX_HTTP_BAD_REQUEST, false},
    {ERANGE, SBX_HTTP_BAD_REQUEST, false},
    {EILSEQ, SBX_HTTP_BAD_REQUEST, false},
    {EFBIG, SBX_HTTP_TOO_LARGE, false},
    {E2BIG, SBX_HTTP_TOO_LARGE, false},
    {EMSGSIZE, SBX_HTTP_TOO_LARGE, false},
    {EOVERFLOW, SBX_HTTP_TOO_LARGE, false},
    {ENOSPC, SBX_HTTP_INSUFFICIENT_STORAGE, true},
    {EAGAIN, SBX_HTTP_TOO_MANY_REQUESTS, true},
};

static size_t errno_answer(int errnum)
{
    size_t i = 0;
    while (i < SBX_ARRAY_LEN(errno_answers) && errno_answers[i].errnum != errnum)
        i++;
    return i;
}

sbx_http_error sbx_http_error_for_errno(int errnum)
{
    size_t i = errno_answer(errnum);
    return i < SBX_ARRAY_LEN(errno_answers) ? errno_answers[i].kind : SBX_HTTP_INTERNAL;
}

static int answer_error(sbx_http_request *req, unsigned status, const char *code, const char *fmt,
                        va_list ap)
{
    if (req->answered || req->gone)
        return -1;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    json_t *body = sbx_json_error_body(code, msg);
    if (!body) {
        answer_oom(req);
        return -1;
    }
    return sbx_http_respond_json(req, status, body);
}

int sbx_http_respond_error(sbx_http_request *req, sbx_http_error kind, const char *fmt, ...)
{
    if (kind == SBX_HTTP_UNAUTHORIZED)
        sbx_http_add_header(req, "WWW-Authenticate", "Bearer realm=\"sandboxd\"");
    va_list ap;
    va_start(ap, fmt);
    int rc = answer_error(req, sbx_http_error_status(kind), sbx_http_error_code(kind), fmt, ap);
    va_end(ap);
    return rc;
}

int sbx_http_respond_error_status(sbx_http_request *req, unsigned status, const char *code,
                                  const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = answer_error(req, status, code, fmt, ap);
    va_end(ap);
    return rc;
}

int sbx_http_respond_err(sbx_http_request *req, const sbx_err *err)
{
    size_t i = errno_answer(err->errnum);
    if (i == SBX_ARRAY_LEN(errno_answers))
        return err->errnum ? sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "%s: %s", err->msg,
                                                    strerror(err->errnum))
                           : sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "%s", err->msg);
    if (errno_answers[i].plain)
        return sbx_http_respond_error(req, errno_answers[i].kind, "%s", err->msg);
    return sbx_http_respond_error(req, errno_answers[i].kind, "%s: %s", err->msg,
                                  strerror(err->errnum));
}

int sbx_http_respond_data(sbx_http_request *req, unsigned status, const char *content_type,
                          const void *data, size_t len)
{
    if (req->answered || req->gone)
        return -1;
    char *copy = malloc(len ? len : 1);
    if (!copy) {
        answer_oom(req);
        return -1;
    }
    memcpy(copy, data, len);
    struct MHD_Response *r = buffer_response(copy, len);
    if (!r) {
        answer_oom(req);
        return -1;
    }
    if (content_type)
        sbx_mhd.add_response_header(r, "Content-Type", content_type);
    return sbx_http__answer(req, status, r);
}

int sbx_http_respond_file(sbx_http_request *req, unsigned status, const char *content_type, int fd,
                          uint64_t offset, uint64_t size)
{
    if (req->answered || req->gone) {
        close(fd);
        return -1;
    }
    struct MHD_Response *r = sbx_mhd.create_response_from_fd_at_offset64(size, fd, offset);
    if (!r) {
        close(fd);
        answer_oom(req);
        return -1;
    }
    if (content_type)
        sbx_mhd.add_response_header(r, "Content-Type", content_type);
    return sbx_http__answer(req, status, r);
}

struct producer {
    sbx_http_producer fn;
    void *ud;
    void (*ud_free)(void *ud);
};

static ssize_t produce(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct producer *p = cls;
    ssize_t n = p->fn(p->ud, pos, buf, max);
    if (n > 0)
        return n > (ssize_t)max ? MHD_CONTENT_READER_END_WITH_ERROR : n;
    return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void producer_free(void *cls)
{
    struct producer *p = cls;
    if (p->ud_free)
        p->ud_free(p->ud);
    free(p);
}

int sbx_http_respond_stream(sbx_http_request *req, unsigned status, const char *content_type,
                            uint64_t size, sbx_http_producer fn, void *ud,
                            void (*ud_free)(void *ud))
{
    struct producer *p = NULL;
    if (req->answered || req->gone || !(p = malloc(sizeof(*p)))) {
        if (ud_free)
            ud_free(ud);
        if (!req->answered && !req->gone)
            answer_oom(req);
        return -1;
    }
    *p = (struct producer){fn, ud, ud_free};
    uint64_t total = size == SBX_HTTP_SIZE_UNKNOWN ? MHD_SIZE_UNKNOWN : size;
    struct MHD_Response *r =
        sbx_mhd.create_response_from_callback(total, PRODUCER_BLOCK, produce, p, producer_free);
    if (!r) {
        producer_free(p);
        answer_oom(req);
        return -1;
    }
    if (content_type)
        sbx_mhd.add_response_header(r, "Content-Type", content_type);
    return sbx_http__answer(req, status, r);
}

/* ---------------------------------------------------------------------- */
/* The request                                                             */

const char *sbx_http_req_method(const sbx_http_request *req)
{
    return req->method;
}

const char *sbx_http_req_path(const sbx_http_request *req)
{
    return req->path;
}

const char *sbx_http_req_param(const sbx_http_request *req, const char *name)
{
    return sbx_route_param(&req->match, name);
}

const char *sbx_http_req_query(const sbx_http_request *req, const char *name)
{
    const char *value = NULL;
    size_t len = 0;
    if (sbx_mhd.lookup_connection_value_n(req->conn, MHD_GET_ARGUMENT_KIND, name, strlen(name),
                                          &value, &len) != MHD_YES)
        return NULL;
    return value ? value : "";
}

const char *sbx_http_req_header(const sbx_http_request *req, const char *name)
{
    return sbx_mhd.lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const sbx_identity *sbx_http_req_identity(const sbx_http_request *req)
{
    return req->who;
}

const char *sbx_http_req_peer(const sbx_http_request *req)
{
    return req->peer;
}

const char *sbx_http_req_body(const sbx_http_request *req, size_t *len)
{
    if (len)
        *len = req->body ? req->body_len : 0;
    return req->body ? req->body : "";
}

json_t *sbx_http_req_json(sbx_http_request *req, const char *const *allowed)
{
    sbx_err e = {0};
    size_t len;
    const char *body = sbx_http_req_body(req, &len);
    json_t *v = sbx_json_parse_object(body, len, true, &e);
    if (v && allowed && sbx_json_check_fields(v, NULL, allowed, &e) < 0) {
        json_decref(v);
        v = NULL;
    }
    if (!v)
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "%s", e.msg);
    return v;
}

void sbx_http_req_defer(sbx_http_request *req, sbx_http_cancel_fn on_cancel, void *ud)
{
    req->deferred = true;
    if (on_cancel) {
        req->cancel_fn = on_cancel;
        req->cancel_ud = ud;
    }
}

void sbx_http_req_stream_body(sbx_http_request *req, const sbx_http_body_sink *sink)
{
    if (req->mode != BODY_STREAM || req->answered)
        return;
    req->sink = *sink;
    req->sink_set = true;
    req->cancel_fn = sink->cancel;
    req->cancel_ud = sink->ud;
}

static void describe_peer(sbx_http_request *req)
{
    snprintf(req->peer, sizeof(req->peer), "unix");
    const union MHD_ConnectionInfo *ci =
        sbx_mhd.get_connection_info(req->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr)
        return;
    char host[INET6_ADDRSTRLEN];
    if (ci->client_addr->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)ci->client_addr;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        snprintf(req->peer, sizeof(req->peer), "%s:%u", host, ntohs(in->sin_port));
    } else if (ci->client_addr->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const void *)ci->client_addr;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        snprintf(req->peer, sizeof(req->peer), "[%s]:%u", host, ntohs(in6->sin6_port));
    }
}

static bool authenticate(sbx_http_request *req)
{
    const sbx_auth *auth = req->srv->cfg.auth;
    if (!auth || sbx_auth_is_public(auth, req->path))
        return true;
    sbx_auth_result r = sbx_auth_check(auth, sbx_http_req_header(req, "Authorization"),
                                       sbx_http_req_header(req, "X-Claw-Token"), &req->who);
    if (r == SBX_AUTH_OK)
        return true;
    if (r == SBX_AUTH_MISSING) {
        sbx_http_respond_error(req, SBX_HTTP_UNAUTHORIZED,
                               "a token is required (Authorization: Bearer, or X-Claw-Token)");
    } else {
        sbx_http_add_header(req, "WWW-Authenticate",
                            "Bearer realm=\"sandboxd\", error=\"invalid_token\"");
        sbx_http_respond_error_status(req, 401, "unauthorized", "invalid token");
    }
    return false;
}

static bool route(sbx_http_request *req)
{
    char allow[128];
    switch (sbx_router_match(req->srv->router, req->method, req->path, &req->match, allow,
                             sizeof(allow))) {
    case SBX_ROUTE_FOUND:
        req->route = req->match.target;
        return true;
    case SBX_ROUTE_BAD_METHOD:
        sbx_http_add_header(req, "Allow", allow);
        sbx_http_respond_error(req, SBX_HTTP_METHOD_NOT_ALLOWED, "%.16s is not allowed on %.200s",
                               req->method, req->path);
        return false;
    case SBX_ROUTE_NOT_FOUND:
    default:
        sbx_http_respond_error(req, SBX_HTTP_NOT_FOUND, "no route for %.200s", req->path);
        return false;
    }
}

/* The body will be read into memory: refuse it now when Content-Length
 * already says it is too large, and size the buffer once otherwise. */
static void prepare_body(sbx_http_request *req)
{
    const char *cl = sbx_http_req_header(req, "Content-Length");
    if (!cl)
        return;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(cl, &end, 10);
    if (errno || end == cl || *end)
        return; /* MHD itself refuses a malformed length */
    size_t max = req->srv->cfg.max_body;
    if (n > max) {
        req->mode = BODY_DISCARD;
        sbx_http_respond_error(req, SBX_HTTP_TOO_LARGE,
                               "request body of %llu bytes is over the %zu-byte limit", n, max);
        return;
    }
    if (n > 0 && (req->body = malloc((size_t)n + 1)))
        req->body_cap = (size_t)n + 1;
}

static void call_handler(sbx_http_request *req)
{
    req->handled = true;
    if (req->mode == BODY_STREAM && req->sink_set) {
        if (req->sink.end)
            req->sink.end(req, req->sink.ud);
    } else if (req->route) {
        req->route->fn(req, req->route->ud);
    }
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static sbx_http_request *req_begin(sbx_http_server *srv, struct MHD_Connection *conn,
                                   const char *url, const char *method)
{
    if (srv->stopping)
        return NULL;
    sbx_http_request *req = calloc(1, sizeof(*req));
    if (!req)
        return NULL;
    req->srv = srv;
    req->conn = conn;
    req->method = method;
    req->path = url;
    req->t0 = mono_s();
    req->cc = conn_ctx_of(conn);
    req->next = srv->reqs;
    if (srv->reqs)
        srv->reqs->prev = req;
    srv->reqs = req;
    if (req->cc) {
        req->cc->req = req;
        if (req->cc->header_timer)
            evtimer_del(req->cc->header_timer);
    }
    describe_peer(req);

    if (req->cc && req->cc->bad_nul) {
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "the URL holds an encoded NUL byte");
        return req;
    }
    if (!authenticate(req) || !route(req))
        return req;
    if (req->route->flags & SBX_HTTP_ROUTE_STREAM_BODY) {
        req->mode = BODY_STREAM;
        call_handler(req);
        if (!req->answered && !req->sink_set)
            sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "the handler took no body");
        req->handled = false; /* the sink's end is still to come */
        return req;
    }
    prepare_body(req);
    return req;
}

void sbx_http_req_resume_body(sbx_http_request *req)
{
    if (!req->body_paused)
        return;
    if (req->in_chunk) {
        req->resume_asked = true;
        return;
    }
    req->body_paused = false;
    sbx_http__resume(req);
}

/* Hand a chunk to the sink; returns how much of it was taken. */
static size_t stream_chunk(sbx_http_request *req, const char *data, size_t n)
{
    ssize_t took = -1;
    if (!req->answered && req->sink.chunk) {
        req->in_chunk = true;
        req->resume_asked = false;
        took = req->sink.chunk(req, data, n, req->sink.ud);
        req->in_chunk = false;
    }
    if (took < 0 || req->answered) {
        req->mode = BODY_DISCARD;
        if (!req->answered)
            sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "the upload was refused");
        return n;
    }
    if ((size_t)took >= n)
        return n;
    /* Paused: MHD keeps the rest in its buffer and reads no more until the
     * sink asks for it again. */
    req->body_paused = true;
    sbx_http__suspend(req);
    if (req->resume_asked)
        sbx_http_req_resume_body(req);
    return (size_t)took;
}

/* Returns how much of the chunk was taken, or -1 when the connection must
 * be cut. */
static ssize_t req_chunk(sbx_http_request *req, const char *data, size_t n)
{
    size_t max = req->srv->cfg.max_body;
    if (req->mode == BODY_BUFFER && n > max - req->body_len) {
        free(req->body);
        req->body = NULL;
        req->body_len = req->body_cap = 0;
        req->mode = BODY_DISCARD;
        sbx_http_respond_error(req, SBX_HTTP_TOO_LARGE, "request body is over the %zu-byte limit",
                               max);
    }
    switch (req->mode) {
    case BODY_BUFFER:
        if (req->body_len + n + 1 > req->body_cap) {
            size_t cap = req->body_cap ? req->body_cap : 4096;
            while (cap < req->body_len + n + 1)
                cap *= 2;
            if (cap > max + 1)
                cap = max + 1;
            char *grown = realloc(req->body, cap);
            if (!grown) {
                req->mode = BODY_DISCARD;
                answer_oom(req);
                return (ssize_t)n;
            }
            req->body = grown;
            req->body_cap = cap;
        }
        memcpy(req->body + req->body_len, data, n);
        req->body_len += n;
        req->body[req->body_len] = '\0';
        return (ssize_t)n;
    case BODY_STREAM:
        return (ssize_t)stream_chunk(req, data, n);
    case BODY_DISCARD:
    default:
        req->discarded += n;
        return req->discarded <= req->srv->cfg.discard_max ? (ssize_t)n : -1;
    }
}

/* The request is complete (or MHD calls again after a resume). */
static enum MHD_Result req_complete(sbx_http_request *req)
{
    if (req->gone || (req->srv->stopping && !req->answered))
        return MHD_NO;
    if (req->queued)
        return MHD_YES;
    if (!req->answered && !req->handled)
        call_handler(req);
    if (req->resp)
        return flush_answer(req);
    if (req->deferred && !req->answered) {
        sbx_http__suspend(req);
        return MHD_YES;
    }
    sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "the handler gave no answer");
    return flush_answer(req);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls)
{
    sbx_http_server *srv = cls;
    sbx_http_request *req = *con_cls;
    if (!req) {
        req = req_begin(srv, conn, url, method);
        if (!req)
            return MHD_NO;
        *con_cls = req;
        if (req->resp)
            return flush_answer(req);
        return MHD_YES;
    }
    if (req->gone)
        return MHD_NO;
    if (*upload_size) {
        ssize_t took = req_chunk(req, upload, *upload_size);
        if (took < 0)
            return MHD_NO;
        *upload_size -= (size_t)took;
        return MHD_YES;
    }
    return req_complete(req);
}

static void req_free(sbx_http_request *req)
{
    sbx_http_server *srv = req->srv;
    if (req->prev)
        req->prev->next = req->next;
    else
        srv->reqs = req->next;
    if (req->next)
        req->next->prev = req->prev;
    watch_stop(req);
    if (req->resp)
        sbx_mhd.destroy_response(req->resp);
    free_headers(req);
    sbx_route_match_clear(&req->match);
    free(req->body);
    free(req);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    sbx_http_request *req = *con_cls;
    if (!req)
        return;
    *con_cls = NULL;
    if (sbx_log_enabled(SBX_LOG_DEBUG)) {
        char method[32], path[256];
        sbx_log(SBX_LOG_DEBUG, "http %s %s status=%u ms=%.1f peer=%s who=%s%s",
                sbx_log_safe(req->method, method, sizeof(method)),
                sbx_log_safe(req->path, path, sizeof(path)), req->resp_status,
                (mono_s() - req->t0) * 1e3, req->peer,
                req->who && req->who->name ? req->who->name : "-",
                toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (not completed)");
    }
    watch_stop(req);
    req->suspended = false;
    fire_cancel(req);
    tell_ended(req);
    if (req->cc) {
        req->cc->req = NULL;
        req->cc->bad_nul = false;
        header_timer_start(req->cc); /* keep-alive: the next request's headers */
    }
    req_free(req);
}

/* ---------------------------------------------------------------------- */
/* The server                                                              */

int sbx_http_server_new(struct event_base *base, const sbx_http_config *cfg, sbx_http_server **out,
                        sbx_err *err)
{
    if (sbx_mhd_load(err) < 0)
        return -1;
    sbx_http_server *srv = calloc(1, sizeof(*srv));
    if (!srv)
        return sbx_err_set(err, ENOMEM, "http server");
    srv->base = base;
    srv->cfg = *cfg;
    srv->listener.fd = -1;
    sbx_http_config *c = &srv->cfg;
    if (!c->max_body)
        c->max_body = DEFAULT_MAX_BODY;
    if (!c->max_connections)
        c->max_connections = DEFAULT_MAX_CONNECTIONS;
    if (!c->max_per_ip)
        c->max_per_ip = DEFAULT_MAX_PER_IP;
    if (!c->idle_timeout_s)
        c->idle_timeout_s = DEFAULT_IDLE_TIMEOUT_S;
    if (!c->header_timeout_s)
        c->header_timeout_s = DEFAULT_HEADER_TIMEOUT_S;
    if (!c->conn_memory)
        c->conn_memory = DEFAULT_CONN_MEMORY;
    if (c->conn_memory < MIN_CONN_MEMORY)
        c->conn_memory = MIN_CONN_MEMORY;
    if (!c->sse_buffer)
        c->sse_buffer = DEFAULT_SSE_BUFFER;
    if (!c->discard_max)
        c->discard_max = DEFAULT_DISCARD_MAX;
    srv->listen_spec = strdup(cfg->listen ? cfg->listen : ":8080");
    srv->router = sbx_router_new();
    srv->timer_ev = evtimer_new(base, on_mhd_timer, srv);
    if (!srv->listen_spec || !srv->router || !srv->timer_ev) {
        sbx_http_server_free(srv);
        return sbx_err_set(err, ENOMEM, "http server");
    }
    c->listen = srv->listen_spec;
    srv->early_close = (event_base_get_features(base) & EV_FEATURE_EARLY_CLOSE) != 0;
    *out = srv;
    return 0;
}

int sbx_http_route(sbx_http_server *srv, const char *method, const char *pattern,
                   sbx_http_handler fn, void *ud, unsigned flags, sbx_err *err)
{
    struct route_rec *rec = calloc(1, sizeof(*rec));
    if (!rec)
        return sbx_err_set(err, ENOMEM, "route %s %s", method, pattern);
    *rec = (struct route_rec){.next = srv->routes, .fn = fn, .ud = ud, .flags = flags};
    if (sbx_router_add(srv->router, method, pattern, rec, err) < 0) {
        free(rec);
        return -1;
    }
    srv->routes = rec;
    return 0;
}

int sbx_http_server_listen(sbx_http_server *srv, sbx_err *err)
{
    if (srv->mhd)
        return sbx_err_set(err, EALREADY, "listen %s: already listening", srv->listen_spec);
    sbx_listen_spec spec;
    if (sbx_listen_parse(srv->listen_spec, &spec, err) < 0 ||
        sbx_listen_open(&spec, &srv->listener, err) < 0)
        return -1;
    srv->listening = true;
    const sbx_http_config *c = &srv->cfg;
    /* External epoll mode: no MHD thread; the loop polls MHD's epoll fd. */
    srv->mhd = sbx_mhd.start_daemon(
        MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_access, srv,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv, MHD_OPTION_LISTEN_SOCKET,
        (MHD_socket)srv->listener.fd, MHD_OPTION_CONNECTION_LIMIT, c->max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, c->max_per_ip, MHD_OPTION_CONNECTION_TIMEOUT,
        c->idle_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, c->conn_memory,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
        srv, MHD_OPTION_UNESCAPE_CALLBACK, unescape, srv, MHD_OPTION_STRICT_FOR_CLIENT, 1,
        MHD_OPTION_SIGPIPE_HANDLED_BY_APP, c->sigpipe_ignored ? 1 : 0, MHD_OPTION_END);
    if (!srv->mhd) {
        close(srv->listener.fd);
        sbx_listen_unlink(&srv->listener);
        srv->listening = false;
        return sbx_err_set(err, EINVAL, "listen %s: libmicrohttpd refused to start",
                           srv->listener.address);
    }
    const union MHD_DaemonInfo *di = sbx_mhd.get_daemon_info(srv->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    srv->io_ev =
        di ? event_new(srv->base, di->epoll_fd, EV_READ | EV_PERSIST, on_mhd_io, srv) : NULL;
    if (!srv->io_ev || event_add(srv->io_ev, NULL) < 0) {
        sbx_mhd.stop_daemon(srv->mhd); /* closes the listening socket */
        srv->mhd = NULL;
        sbx_listen_unlink(&srv->listener);
        srv->listening = false;
        return sbx_err_set(err, ENOMEM, "listen %s: watching the server", srv->listener.address);
    }
    rearm(srv);
    return 0;
}

uint16_t sbx_http_server_port(const sbx_http_server *srv)
{
    return srv->listener.spec.kind == SBX_LISTEN_TCP ? srv->listener.port : 0;
}

const char *sbx_http_server_address(const sbx_http_server *srv)
{
    return srv->listener.address;
}

static void stop_mhd(sbx_http_server *srv)
{
    MHD_socket lfd = sbx_mhd.quiesce_daemon(srv->mhd);
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
    srv->stopping = true;
    for (sbx_http_request *req = srv->reqs; req; req = req->next) {
        req->gone = true;
        watch_stop(req);
        fire_cancel(req);
        if (req->suspended) {
            req->suspended = false;
            sbx_mhd.resume_connection(req->conn);
        }
    }
    /* MHD refuses to stop with parked connections, and a resume only takes
     * effect in a run; the runs also let SSE streams end (the reader sees
     * `gone`). Nothing parks again while stopping. */
    for (int i = 0; i < 4; i++)
        sbx_mhd.run(srv->mhd);
    sbx_mhd.stop_daemon(srv->mhd);
    srv->mhd = NULL;
    while (srv->reqs) {
        sbx_http_request *req = srv->reqs;
        tell_ended(req);
        req_free(req);
    }
}

void sbx_http_server_free(sbx_http_server *srv)
{
    if (!srv)
        return;
    if (srv->mhd)
        stop_mhd(srv);
    if (srv->io_ev)
        event_free(srv->io_ev);
    if (srv->timer_ev)
        event_free(srv->timer_ev);
    if (srv->listening)
        sbx_listen_unlink(&srv->listener);
    while (srv->routes) {
        struct route_rec *r = srv->routes;
        srv->routes = r->next;
        free(r);
    }
    sbx_router_free(srv->router);
    free(srv->listen_spec);
    free(srv);
}
