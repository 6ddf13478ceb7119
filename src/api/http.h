/* The HTTP server of `sandboxd serve`: libmicrohttpd driven from the
 * daemon's single libevent loop (MHD's epoll fd watched by the loop, MHD's
 * timeout re-armed after every run; no MHD threads), plus the small
 * request/response surface that route handlers use.
 *
 * A handler runs on the loop and must not block. It answers with one of the
 * sbx_http_respond_* calls, either before it returns or later
 * (sbx_http_req_defer). Everything a request hands out (method, path,
 * params, headers, body, identity) stays valid until the request ends: the
 * response is sent, or its cancel callback has returned.
 *
 * Bodies: a route's body is read into memory up to the server's max_body
 * (413 beyond, told from Content-Length before a byte is read), and the
 * handler runs once it is complete. A route registered with
 * SBX_HTTP_ROUTE_STREAM_BODY runs its handler as soon as the headers are
 * in (authenticated, routed); the handler then either answers at once or
 * calls sbx_http_req_stream_body() to receive the body chunk by chunk as it
 * arrives, never holding more than the chunk in hand. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "api/auth.h"
#include "base/err.h"

struct event_base;

typedef struct sbx_http_server sbx_http_server;
typedef struct sbx_http_request sbx_http_request;

typedef struct sbx_http_config {
    const char *listen;   /* "host:port", ":port", "[::1]:port", "unix:/path" */
    const sbx_auth *auth; /* NULL: no authentication (tests only); must outlive the server */
    size_t max_body;      /* in-memory request bodies; default 1 MiB */
    /* Connections at once; at the cap the one idle the longest (waiting for
     * a request head) is closed to make room, else the new one gets 503.
     * Default 512. */
    unsigned max_connections;
    unsigned max_per_ip;       /* one client address's share (429 beyond); default 64 */
    unsigned idle_timeout_s;   /* no byte either way for this long: closed; default 60 */
    unsigned header_timeout_s; /* headers of a request (and keep-alive wait) must come within
                                  this; default 15 */
    /* A request body must arrive within body_timeout_s plus one second per
     * body_min_rate bytes received, else the connection is cut. Defaults
     * 30 s and 1024 bytes/s. */
    unsigned body_timeout_s;
    unsigned body_min_rate;
    /* Requests in progress (parked execs, uploads, event streams) per token
     * and per tenant (a tenant token's, or the X-Tenant-Code an operator
     * names), 429 beyond; default a quarter of max_connections. */
    unsigned max_requests_per_token;
    unsigned max_requests_per_tenant;
    /* Event streams per token and per tenant, 429 beyond; default 32. */
    unsigned max_streams_per_token;
    unsigned max_streams_per_tenant;
    size_t conn_memory; /* per-connection memory, caps the request headers; default 32 KiB */
    size_t sse_buffer;  /* per-client SSE buffer; default 256 KiB */
    /* libmicrohttpd sends no answer before the whole request is in: when one
     * is decided mid-body (413, a refused upload), up to this many more body
     * bytes are read and dropped (never kept) so the client still gets it; a
     * client that sends more is cut off. Default 16 MiB. */
    uint64_t discard_max;
    /* Every answer closes its connection (Connection: close): each request
     * then comes on a new connection, and its head is checked at the gate.
     * With keep-alive, a later request on a connection is parsed by
     * libmicrohttpd alone, whose answer to a malformed one is its own. */
    bool no_keep_alive;
    /* The process ignores SIGPIPE: lets the server use sendfile() for files. */
    bool sigpipe_ignored;
    /* Where libmicrohttpd's own diagnostics go; NULL: dropped. */
    void (*log)(void *ud, const char *msg);
    void *log_ud;
} sbx_http_config;

/* A route's handler. ud is what was given to sbx_http_route(). */
typedef void (*sbx_http_handler)(sbx_http_request *req, void *ud);

enum {
    SBX_HTTP_ROUTE_STREAM_BODY = 1 << 0, /* see above */
};

/* Server lifecycle. new() only records the configuration; routes may be
 * added before or after listen(), which binds and starts serving on base.
 * free() stops: deferred requests get their cancel, SSE streams their
 * close, the unix socket file is removed. */
int sbx_http_server_new(struct event_base *base, const sbx_http_config *cfg, sbx_http_server **out,
                        sbx_err *err);
int sbx_http_route(sbx_http_server *srv, const char *method, const char *pattern,
                   sbx_http_handler fn, void *ud, unsigned flags, sbx_err *err);
int sbx_http_server_listen(sbx_http_server *srv, sbx_err *err);
void sbx_http_server_free(sbx_http_server *srv);
/* Every route added (method, pattern), in the order they were added. */
void sbx_http_server_each_route(const sbx_http_server *srv,
                                void (*fn)(void *ud, const char *method, const char *pattern),
                                void *ud);
/* TCP: the port bound (useful with port 0); 0 for a unix socket. */
uint16_t sbx_http_server_port(const sbx_http_server *srv);
/* "127.0.0.1:8080", "[::]:8080", "unix:/run/sandboxd.sock". */
const char *sbx_http_server_address(const sbx_http_server *srv);

/* ---- the request ---- */
const char *sbx_http_req_method(const sbx_http_request *req);
/* Decoded path, without the query. */
const char *sbx_http_req_path(const sbx_http_request *req);
/* A `{name}` segment of the route's pattern. */
const char *sbx_http_req_param(const sbx_http_request *req, const char *name);
/* A decoded query parameter (the first if repeated); "" when present
 * without a value, NULL when absent. Requests whose URL decodes to a NUL
 * byte never reach a handler (400). */
const char *sbx_http_req_query(const sbx_http_request *req, const char *name);
/* A request header, name case-insensitive; NULL when absent. */
const char *sbx_http_req_header(const sbx_http_request *req, const char *name);
/* Who sent it; NULL when the path is public or the server has no auth. */
const sbx_identity *sbx_http_req_identity(const sbx_http_request *req);
/* The client: "127.0.0.1:52344", "[::1]:52344", or "unix". */
const char *sbx_http_req_peer(const sbx_http_request *req);
/* The in-memory body, NUL-terminated (len excludes the NUL). Empty for
 * streaming routes. */
const char *sbx_http_req_body(const sbx_http_request *req, size_t *len);
/* The body as a JSON object whose keys are all in allowed (NULL-terminated;
 * NULL allows any). An empty body is {}. On error, answers 400 itself
 * ("body:1:17: …", "unknown field \"x\"") and returns NULL. The caller owns
 * the reference. */
json_t *sbx_http_req_json(sbx_http_request *req, const char *const *allowed);

/* ---- answering later ---- */
/* Called when a request ends without an answer: the client went away, or the
 * server is stopping. req is freed after it returns; drop every pointer to
 * it. Answering from inside it is allowed and ignored. */
typedef void (*sbx_http_cancel_fn)(sbx_http_request *req, void *ud);
/* The handler will answer later (any sbx_http_respond_* call from any loop
 * callback). The connection is parked meanwhile; on_cancel (may be NULL)
 * fires if the client disconnects first. */
void sbx_http_req_defer(sbx_http_request *req, sbx_http_cancel_fn on_cancel, void *ud);

/* ---- streaming request bodies (SBX_HTTP_ROUTE_STREAM_BODY routes) ---- */
typedef struct sbx_http_body_sink {
    /* One chunk as it arrived (data is not kept after the return). Return
     * how much was taken: len to go on; fewer pauses the body (the client is
     * not read meanwhile) until sbx_http_req_resume_body(), when the rest is
     * offered again; -1 refuses the rest: answer first (else 500). An
     * answer given while the body is still arriving (from here, or later,
     * also while paused) goes out once the client has sent it all, the rest
     * being dropped; see discard_max. */
    ssize_t (*chunk)(sbx_http_request *req, const char *data, size_t len, void *ud);
    /* The whole body has arrived: answer, or defer. */
    void (*end)(sbx_http_request *req, void *ud);
    /* The request ended before an answer (client gone mid-upload, server
     * stopping): clean up. May be NULL. */
    sbx_http_cancel_fn cancel;
    void *ud;
} sbx_http_body_sink;
void sbx_http_req_stream_body(sbx_http_request *req, const sbx_http_body_sink *sink);
/* Go on with a body paused by its chunk callback. */
void sbx_http_req_resume_body(sbx_http_request *req);

/* ---- answers ---- */
/* Each sbx_http_respond_* gives the request its one answer (a second one is
 * refused with -1). Headers added before are sent with it. */
int sbx_http_add_header(sbx_http_request *req, const char *name, const char *value);

/* A protocol upgrade (WebSocket): 101 with the headers added so far (an
 * Upgrade header among them; Connection: Upgrade is added). Once its head
 * is sent, fn(ud, fd, extra, extra_len, up) is called from the loop: fd is
 * the client's socket, for both directions, extra what the client sent after
 * its request head. The caller moves the bytes (never closing fd) and ends
 * it with sbx_http_upgrade_close(up), which closes the connection. stop(ud)
 * is called when the server stops with it open (it must close it), or when
 * the connection ends before fn was called (it lets go of its state). -1
 * when the answer could not be given (then neither is called). */
typedef struct sbx_http_upgrade sbx_http_upgrade;
typedef void (*sbx_http_upgrade_fn)(void *ud, int fd, const char *extra, size_t extra_len,
                                    sbx_http_upgrade *up);
int sbx_http_respond_upgrade(sbx_http_request *req, sbx_http_upgrade_fn fn, void (*stop)(void *ud),
                             void *ud);
void sbx_http_upgrade_close(sbx_http_upgrade *up);

/* 200-style JSON answer; steals body (even on failure). */
int sbx_http_respond_json(sbx_http_request *req, unsigned status, json_t *body);

typedef enum sbx_http_error {
    SBX_HTTP_BAD_REQUEST,          /* 400 bad_request */
    SBX_HTTP_UNAUTHORIZED,         /* 401 unauthorized (adds WWW-Authenticate: Bearer) */
    SBX_HTTP_FORBIDDEN,            /* 403 forbidden */
    SBX_HTTP_NOT_FOUND,            /* 404 not_found */
    SBX_HTTP_METHOD_NOT_ALLOWED,   /* 405 method_not_allowed (add Allow yourself) */
    SBX_HTTP_CONFLICT,             /* 409 conflict */
    SBX_HTTP_TOO_LARGE,            /* 413 too_large */
    SBX_HTTP_TOO_MANY_REQUESTS,    /* 429 too_many_requests */
    SBX_HTTP_INTERNAL,             /* 500 internal */
    SBX_HTTP_NOT_READY,            /* 503 not_ready */
    SBX_HTTP_INSUFFICIENT_STORAGE, /* 507 insufficient_storage (quota, full disk) */
} sbx_http_error;
/* {"error":{"code":…,"message":…}} with the kind's status. */
int sbx_http_respond_error(sbx_http_request *req, sbx_http_error kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same, status and code given. */
int sbx_http_respond_error_status(sbx_http_request *req, unsigned status, const char *code,
                                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* An error of a lower layer, its errno mapped to a status by the API's one
 * mapping, sbx_http_error_for_errno() (ENOENT 404; EEXIST, EBUSY, ENOTSUP
 * 409; EACCES, EPERM, EDQUOT 403; EINVAL 400; EFBIG 413; ENOSPC 507; EAGAIN
 * 429; else 500). The message is err->msg, followed by strerror() unless the
 * errno is the client's own doing (ENOENT, EINVAL, EACCES, EAGAIN, ...), so
 * lower layers must name what the client named, never host paths. */
int sbx_http_respond_err(sbx_http_request *req, const sbx_err *err);
sbx_http_error sbx_http_error_for_errno(int errnum);
unsigned sbx_http_error_status(sbx_http_error kind);
const char *sbx_http_error_code(sbx_http_error kind);

/* Bytes, copied. */
int sbx_http_respond_data(sbx_http_request *req, unsigned status, const char *content_type,
                          const void *data, size_t len);
/* A regular file's [offset, offset+size) read by the server as it sends;
 * takes fd (closed when done, also on failure). */
int sbx_http_respond_file(sbx_http_request *req, unsigned status, const char *content_type, int fd,
                          uint64_t offset, uint64_t size);

/* A body produced on demand: copy up to max bytes at pos into buf and return
 * the count; 0 ends the body, -1 aborts it (the connection is cut). Called
 * on the loop whenever the client can take more, so it must not block. */
typedef ssize_t (*sbx_http_producer)(void *ud, uint64_t pos, char *buf, size_t max);
#define SBX_HTTP_SIZE_UNKNOWN UINT64_MAX
/* size may be SBX_HTTP_SIZE_UNKNOWN (chunked). ud_free (may be NULL) runs
 * once the server is done with ud, also on failure. */
int sbx_http_respond_stream(sbx_http_request *req, unsigned status, const char *content_type,
                            uint64_t size, sbx_http_producer produce, void *ud,
                            void (*ud_free)(void *ud));

/* ---- Server-Sent Events: see sse.h ---- */
