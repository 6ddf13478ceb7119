#include "api/http_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/log.h"
#include "base/metrics.h"
#include "base/parse.h"
#include "base/time.h"

#define DEFAULT_MAX_BODY (1u << 20)
#define DEFAULT_MAX_CONNECTIONS 512
#define DEFAULT_MAX_PER_IP 64
#define DEFAULT_BODY_TIMEOUT_S 30
#define DEFAULT_BODY_MIN_RATE 1024
#define DEFAULT_MAX_STREAMS 32
#define HEAD_MAX (8u << 10)
#define TARGET_MAX (4u << 10)
#define PARAMS_MAX 100
#define HEADERS_MAX 100
#define DEFAULT_IDLE_TIMEOUT_S 60
#define DEFAULT_HEADER_TIMEOUT_S 15
#define DEFAULT_CONN_MEMORY (32u << 10)
#define MIN_CONN_MEMORY (8u << 10)
#define DEFAULT_SSE_BUFFER (256u << 10)
#define DEFAULT_DISCARD_MAX (16u << 20)

static void kick(sbx_http_server *srv);
void sbx_http__kick(sbx_http_server *srv)
{
    kick(srv);
}

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
void sbx_http__on_header_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct conn_ctx *cc = arg;
    if (cc->at_gate) {
        sbx_http__gate_timeout(cc);
        return;
    }
    logf_srv(cc->srv, "closing a connection: no complete request within %us",
             cc->srv->cfg.header_timeout_s);
    shutdown(cc->fd, SHUT_RDWR);
    kick(cc->srv);
}

/* A request's body must keep coming: body_timeout_s, plus a second for
 * every body_min_rate bytes. MHD's idle timeout never fires for a client
 * sending a byte a second; the shutdown makes MHD close as usual. */
static void on_body_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct conn_ctx *cc = arg;
    const sbx_http_config *c = &cc->srv->cfg;
    int64_t allowed = (int64_t)c->body_timeout_s * 1000 +
                      (int64_t)(cc->body_bytes * 1000 / (c->body_min_rate ? c->body_min_rate : 1));
    int64_t left = cc->body_t0 + allowed - sbx_mono_ms();
    /* A body we paused ourselves (the sink is busy) is not the client's delay. */
    if (left > 0 || (cc->req && cc->req->body_paused)) {
        struct timeval tv = {.tv_sec = left > 1000 ? left / 1000 : 1};
        evtimer_add(cc->body_timer, &tv);
        return;
    }
    logf_srv(cc->srv, "closing a connection: request body too slow (%llu bytes in %llds)",
             (unsigned long long)cc->body_bytes, (long long)(allowed / 1000));
    shutdown(cc->fd, SHUT_RDWR);
    kick(cc->srv);
}

/* The client shut its side while its body is incomplete: it will never
 * send the rest. (libmicrohttpd may miss an end that came with the last
 * data under edge-triggered epoll, and wait for the idle timeout.) */
static void on_body_closed(evutil_socket_t fd, short what, void *arg)
{
    struct conn_ctx *cc = arg;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n != 0) {
        /* Data still to read first: MHD reads it. The end came with it and
         * makes no new edge: look again soon, until the data is read. */
        if (n > 0) {
            struct timeval tv = {0, 50000};
            event_add(cc->body_watch, &tv);
        }
        return;
    }
    logf_srv(cc->srv, "closing a connection: the client ended within its request body");
    /* Once: a socket shut both ways stays readable (its end), and a body we
     * paused keeps libmicrohttpd from closing it until it is resumed. */
    event_del(cc->body_watch);
    evtimer_del(cc->body_timer);
    shutdown(cc->fd, SHUT_RDWR);
    kick(cc->srv);
}

void sbx_http__body_timer(struct conn_ctx *cc, bool on)
{
    if (!on) {
        if (cc->body_timer)
            evtimer_del(cc->body_timer);
        if (cc->body_watch)
            event_del(cc->body_watch);
        return;
    }
    if (cc->srv->early_close && !cc->body_watch)
        cc->body_watch =
            event_new(cc->srv->base, cc->fd, EV_CLOSED | EV_ET | EV_PERSIST, on_body_closed, cc);
    if (cc->body_watch)
        event_add(cc->body_watch, NULL);
    if (!cc->body_timer && !(cc->body_timer = evtimer_new(cc->srv->base, on_body_timeout, cc)))
        return;
    cc->body_t0 = sbx_mono_ms();
    cc->body_bytes = 0;
    struct timeval tv = {.tv_sec = cc->srv->cfg.body_timeout_s};
    evtimer_add(cc->body_timer, &tv);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    sbx_http_server *srv = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        /* Every connection comes from the gate, inside add_connection(). */
        struct conn_ctx *cc = srv->adopting;
        srv->adopting = NULL;
        if (cc) {
            cc->conn = conn;
            *socket_context = cc;
        }
        return;
    }
    struct conn_ctx *cc = *socket_context;
    if (!cc)
        return;
    if (cc->req)
        cc->req->cc = NULL;
    *socket_context = NULL;
    sbx_http__conn_closed(cc);
}

struct conn_ctx *sbx_http__conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        sbx_mhd.get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

size_t sbx_http__unescape(char *s, bool *nul)
{
    char *out = s;
    *nul = false;
    for (const char *in = s; *in;) {
        int hi, lo;
        if (in[0] == '%' && (hi = sbx_hex_digit(in[1])) >= 0 && (lo = sbx_hex_digit(in[2])) >= 0) {
            char c = (char)(hi << 4 | lo);
            *nul = *nul || c == '\0';
            *out++ = c;
            in += 3;
        } else {
            *out++ = *in++;
        }
    }
    *out = '\0';
    return (size_t)(out - s);
}

/* MHD's own %HH decoding, plus a note when it yields a NUL: C strings would
 * silently cut such a name short ("a%00/../b"), so the request is refused. */
static size_t unescape(void *cls, struct MHD_Connection *conn, char *s)
{
    bool nul;
    size_t len = sbx_http__unescape(s, &nul);
    if (nul) {
        struct conn_ctx *cc = sbx_http__conn_of(conn);
        if (cc)
            cc->bad_nul = true;
    }
    return len;
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

/* The client is gone while its request was in progress (or we are
 * stopping): tell the owner, then wake the connection so MHD closes it. */
void sbx_http__client_gone(sbx_http_request *req)
{
    req->gone = true;
    watch_stop(req);
    fire_cancel(req);
    if (req->suspended)
        sbx_http__resume(req);
    else
        kick(req->srv);
}

/* The end of a request's connection, watched from its first parking (an
 * answer deferred, an event stream, a paused upload) until the request
 * ends, parked or not: MHD does not watch a parked connection, and never
 * reads one whose answer it is writing, so a client that hangs up would go
 * unnoticed until the next write fails (an event stream's heartbeat). The
 * relay (http_relay.c) reads the client's socket and sees its end at once,
 * a reset included (issue 16.8); this looks at what it saw. */
static void on_watch(evutil_socket_t fd, short what, void *arg)
{
    sbx_http_request *req = arg;
    bool reset = false;
    if (req->gone || !req->cc || !req->cc->relay ||
        !sbx_http__relay_client_gone(req->cc->relay, &reset))
        return;
    /* The client ended its side: within a body still arriving, the body
     * watch decides (the bytes before the end are still to be read). */
    if (reset || !req->has_body)
        sbx_http__client_gone(req);
}

void sbx_http__watch(sbx_http_request *req)
{
    if (req->watch || req->gone || !req->cc)
        return;
    req->watch = event_new(req->srv->base, -1, 0, on_watch, req);
    if (req->watch)
        event_active(req->watch, EV_TIMEOUT, 0); /* the client may have ended already */
}

void sbx_http__client_ended(sbx_http_request *req)
{
    if (req->watch)
        event_active(req->watch, EV_TIMEOUT, 0);
}

void sbx_http__suspend(sbx_http_request *req)
{
    if (req->suspended)
        return;
    sbx_mhd.suspend_connection(req->conn);
    req->suspended = true;
    sbx_http__watch(req);
}

void sbx_http__resume(sbx_http_request *req)
{
    if (!req->suspended)
        return;
    req->suspended = false;
    sbx_mhd.resume_connection(req->conn);
    kick(req->srv);
}

/* ---------------------------------------------------------------------- */
/* The end of a request                                                    */

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
    sbx_http__share_put(&srv->req_by_token, req->tok_share);
    sbx_http__share_put(&srv->req_by_tenant, req->ten_share);
    sbx_http__share_put(&srv->sse_by_token, req->sse_tok_share);
    sbx_http__share_put(&srv->sse_by_tenant, req->sse_ten_share);
    if (req->resp)
        sbx_mhd.destroy_response(req->resp);
    sbx_http__upgrade_forget(req->upgrade);
    sbx_http__free_headers(req);
    sbx_route_match_clear(&req->match);
    free(req->body);
    free(req);
}

static const struct sbx_metric m_requests = {
    .name = "sandbox_http_requests_total",
    .help =
        "HTTP requests answered, by method, route pattern and status (route \"-\": none matched).",
    .kind = SBX_METRIC_COUNTER,
    .labels = {"method", "route", "status"}};

/* Labels from the route table only (any method or path a client sends
 * would make a series of its own). */
static void count_request(const sbx_http_request *req)
{
    static const char *const known[] = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"};
    const char *method = "other";
    for (size_t i = 0; i < SBX_ARRAY_LEN(known); i++)
        if (req->method && strcmp(req->method, known[i]) == 0)
            method = known[i];
    char status[16];
    snprintf(status, sizeof(status), "%u", req->resp_status);
    sbx_metric_add(&m_requests, 1, method, req->match.pattern ? req->match.pattern : "-", status);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    sbx_http_request *req = *con_cls;
    if (!req)
        return;
    *con_cls = NULL;
    count_request(req);
    if (sbx_log_enabled(SBX_LOG_DEBUG)) {
        char method[32], path[256];
        sbx_log(SBX_LOG_DEBUG, "http %s %s status=%u ms=%.1f peer=%s who=%s%s",
                sbx_log_safe(req->method, method, sizeof(method)),
                sbx_log_safe(req->path, path, sizeof(path)), req->resp_status,
                (sbx_http__mono_s() - req->t0) * 1e3, req->peer,
                req->who && req->who->name ? req->who->name : "-",
                toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (not completed)");
    }
    watch_stop(req);
    req->suspended = false;
    fire_cancel(req);
    tell_ended(req);
    if (req->cc) {
        if (req->cc->relay)
            sbx_http__relay_completed(req->cc->relay, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
        req->cc->req = NULL;
        req->cc->bad_nul = false;
        sbx_http__body_timer(req->cc, false);
        sbx_http__idle(req->cc, true);
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
    if (!c->body_timeout_s)
        c->body_timeout_s = DEFAULT_BODY_TIMEOUT_S;
    if (!c->body_min_rate)
        c->body_min_rate = DEFAULT_BODY_MIN_RATE;
    if (!c->max_requests_per_token)
        c->max_requests_per_token = c->max_connections / 4 ? c->max_connections / 4 : 1;
    if (!c->max_requests_per_tenant)
        c->max_requests_per_tenant = c->max_connections / 4 ? c->max_connections / 4 : 1;
    if (!c->max_streams_per_token)
        c->max_streams_per_token = DEFAULT_MAX_STREAMS;
    if (!c->max_streams_per_tenant)
        c->max_streams_per_tenant = DEFAULT_MAX_STREAMS;
    srv->head_limits = (struct sbx_http_head_limits){.max_head = HEAD_MAX,
                                                     .max_target = TARGET_MAX,
                                                     .max_params = PARAMS_MAX,
                                                     .max_headers = HEADERS_MAX};
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

void sbx_http_server_each_route(const sbx_http_server *srv,
                                void (*fn)(void *ud, const char *method, const char *pattern),
                                void *ud)
{
    sbx_router_each(srv->router, fn, ud);
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
    /* External epoll mode: no MHD thread; the loop polls MHD's epoll fd.
     * MHD gets no listening socket: the gate accepts (http_gate.c) and
     * counts; MHD's own limit only leaves room for connections being closed
     * to make room for new ones. */
    srv->mhd = sbx_mhd.start_daemon(
        MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_ALLOW_UPGRADE | MHD_USE_ERROR_LOG |
            MHD_USE_NO_LISTEN_SOCKET,
        0, NULL, NULL, sbx_http__on_access, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv,
        MHD_OPTION_CONNECTION_LIMIT, c->max_connections * 2 + 16, MHD_OPTION_CONNECTION_TIMEOUT,
        c->idle_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, c->conn_memory,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
        srv, MHD_OPTION_UNESCAPE_CALLBACK, unescape, srv, MHD_OPTION_STRICT_FOR_CLIENT, 1,
        MHD_OPTION_SIGPIPE_HANDLED_BY_APP, c->sigpipe_ignored ? 1 : 0, MHD_OPTION_END);
    if (!srv->mhd) {
        close(srv->listener.fd);
        srv->listener.fd = -1;
        sbx_listen_unlink(&srv->listener);
        srv->listening = false;
        return sbx_err_set(err, EINVAL, "listen %s: libmicrohttpd refused to start",
                           srv->listener.address);
    }
    const union MHD_DaemonInfo *di = sbx_mhd.get_daemon_info(srv->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    srv->io_ev =
        di ? event_new(srv->base, di->epoll_fd, EV_READ | EV_PERSIST, on_mhd_io, srv) : NULL;
    if (!srv->io_ev || event_add(srv->io_ev, NULL) < 0 || sbx_http__gate_start(srv, NULL) < 0) {
        sbx_http__gate_stop(srv); /* closes the listening socket */
        sbx_mhd.stop_daemon(srv->mhd);
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
    srv->stopping = true;
    sbx_http__gate_stop(srv);
    sbx_http__upgrades_stop(srv);
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
    sbx_http__relays_free(srv);
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
    sbx_http__gate_stop(srv);
    sbx_http__share_clear(&srv->by_addr);
    sbx_http__share_clear(&srv->req_by_token);
    sbx_http__share_clear(&srv->req_by_tenant);
    sbx_http__share_clear(&srv->sse_by_token);
    sbx_http__share_clear(&srv->sse_by_tenant);
    free(srv->listen_spec);
    free(srv);
}
