#include "api/http_internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "api/json.h"

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
    /* OPEN-SANDBOX-API-KEY: the header OpenSandbox's SDKs send (docs/opensandbox.md). */
    const char *token = sbx_http_req_header(req, "X-Claw-Token");
    if (!token)
        token = sbx_http_req_header(req, "OPEN-SANDBOX-API-KEY");
    sbx_auth_result r =
        sbx_auth_check(auth, sbx_http_req_header(req, "Authorization"), token, &req->who);
    if (r == SBX_AUTH_OK)
        return true;
    if (r == SBX_AUTH_MISSING) {
        sbx_http_respond_error(
            req, SBX_HTTP_UNAUTHORIZED,
            "a token is required (Authorization: Bearer, X-Claw-Token or OPEN-SANDBOX-API-KEY)");
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

bool sbx_http__content_length(const char *text, unsigned long long *n)
{
    char *end;
    errno = 0;
    *n = strtoull(text, &end, 10);
    return !errno && end != text && !*end;
}

/* The body will be read into memory: refuse it now when Content-Length
 * already says it is too large, and size the buffer once otherwise. */
static void prepare_body(sbx_http_request *req)
{
    const char *cl = sbx_http_req_header(req, "Content-Length");
    if (!cl)
        return;
    unsigned long long n;
    if (!sbx_http__content_length(cl, &n))
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

/* The tenant a request counts against: its tenant token's, else the one it
 * names (header, then query); NULL when it names none. */
static const char *share_tenant(const sbx_http_request *req)
{
    if (req->who && req->who->tenant)
        return req->who->tenant;
    const char *t = sbx_http_req_header(req, "X-Tenant-Code");
    if (!t)
        t = sbx_http_req_query(req, "tenantCode");
    return t && *t ? t : NULL;
}

/* One token or tenant may not hold more than its share (of the server's
 * connections with requests in progress, or of its event streams): a place
 * in both counts, or a 429 naming the setting and false. */
static bool take_pair(sbx_http_request *req, struct share_table *by_token,
                      struct share_table *by_tenant, unsigned max_token, unsigned max_tenant,
                      const char *what, const char *setting, struct share **tok_out,
                      struct share **ten_out)
{
    const char *tok = req->who ? req->who->name : NULL;
    const char *ten = share_tenant(req);
    const char *whose = NULL, *name = NULL;
    unsigned max = 0;
    if (tok && sbx_http__share_count(by_token, tok) >= max_token)
        whose = "token", name = tok, max = max_token;
    else if (ten && sbx_http__share_count(by_tenant, ten) >= max_tenant)
        whose = "tenant", name = ten, max = max_tenant;
    if (whose) {
        sbx_http_respond_error(req, SBX_HTTP_TOO_MANY_REQUESTS,
                               "%s %.64s has %u %s, its most (server.%s_per_%s)", whose, name, max,
                               what, setting, whose);
        return false;
    }
    if (tok)
        *tok_out = sbx_http__share_take(by_token, tok);
    if (ten)
        *ten_out = sbx_http__share_take(by_tenant, ten);
    return true;
}

static bool take_shares(sbx_http_request *req)
{
    sbx_http_server *srv = req->srv;
    return take_pair(req, &srv->req_by_token, &srv->req_by_tenant, srv->cfg.max_requests_per_token,
                     srv->cfg.max_requests_per_tenant, "requests in progress", "max_requests",
                     &req->tok_share, &req->ten_share);
}

int sbx_http__take_stream(sbx_http_request *req)
{
    sbx_http_server *srv = req->srv;
    return take_pair(req, &srv->sse_by_token, &srv->sse_by_tenant, srv->cfg.max_streams_per_token,
                     srv->cfg.max_streams_per_tenant, "event streams open", "max_streams",
                     &req->sse_tok_share, &req->sse_ten_share)
               ? 0
               : -1;
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
    req->t0 = sbx_http__mono_s();
    req->cc = sbx_http__conn_of(conn);
    req->next = srv->reqs;
    if (srv->reqs)
        srv->reqs->prev = req;
    srv->reqs = req;
    if (req->cc) {
        req->cc->req = req;
        if (req->cc->header_timer)
            evtimer_del(req->cc->header_timer);
        sbx_http__idle(req->cc, false);
        const char *cl = sbx_http_req_header(req, "Content-Length");
        req->has_body = sbx_http_req_header(req, "Transfer-Encoding") || (cl && strcmp(cl, "0"));
        if (req->has_body)
            sbx_http__body_timer(req->cc, true);
    }
    describe_peer(req);

    if (req->cc && req->cc->bad_nul) {
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "the URL holds an encoded NUL byte");
        return req;
    }
    if (!authenticate(req) || !route(req) || !take_shares(req))
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
                sbx_http__answer_oom(req);
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
    if (req->cc && req->has_body) {
        req->has_body = false;
        sbx_http__body_timer(req->cc, false);
    }
    if (req->gone || (req->srv->stopping && !req->answered))
        return MHD_NO;
    if (req->queued)
        return MHD_YES;
    if (!req->answered && !req->handled)
        call_handler(req);
    if (req->resp)
        return sbx_http__flush(req);
    if (req->deferred && !req->answered) {
        sbx_http__suspend(req);
        return MHD_YES;
    }
    sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "the handler gave no answer");
    return sbx_http__flush(req);
}

enum MHD_Result sbx_http__on_access(void *cls, struct MHD_Connection *conn, const char *url,
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
            return sbx_http__flush(req);
        return MHD_YES;
    }
    if (req->gone)
        return MHD_NO;
    if (*upload_size) {
        ssize_t took = req_chunk(req, upload, *upload_size);
        if (took < 0)
            return MHD_NO;
        if (req->cc)
            req->cc->body_bytes += (uint64_t)took;
        *upload_size -= (size_t)took;
        return MHD_YES;
    }
    return req_complete(req);
}
