/* The server's and a request's insides, shared by the three files of the
 * HTTP server (http.c: the loop, connections and parking; http_request.c:
 * headers, auth, routing and bodies; http_answer.c: answers) and by what
 * answers on top of it (sse.c). The server knows nothing of the last: a
 * request tells whoever keeps its answer of its end through `ended`. */
#pragma once

#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/event.h>
#include "api/mhd.h"

#include "api/http.h"
#include "api/listen.h"
#include "api/router.h"

struct route_rec {
    struct route_rec *next;
    sbx_http_handler fn;
    void *ud;
    unsigned flags;
};

#define SBX_HTTP_SHARE_BUCKETS 256

/* Counts by key (an address, a token's name, a tenant): http_gate.c. */
struct share;
struct share_table {
    struct share *b[SBX_HTTP_SHARE_BUCKETS];
};
unsigned sbx_http__share_count(const struct share_table *t, const char *key);
/* Count one more for key; NULL when out of memory. */
struct share *sbx_http__share_take(struct share_table *t, const char *key);
/* One fewer (s may be NULL). */
void sbx_http__share_put(struct share_table *t, struct share *s);
void sbx_http__share_clear(struct share_table *t);

/* One TCP (or unix) connection; requests come one after another on it. It
 * is ours from accept() (at the gate, until its first request head is in
 * and checked) until libmicrohttpd closes it. */
struct conn_ctx {
    sbx_http_server *srv;
    struct MHD_Connection *conn; /* NULL at the gate */
    int fd;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    struct share *addr_share;               /* its place in the per-address count */
    bool counted;                           /* takes one of the server's max_connections */
    bool at_gate;                           /* not handed to libmicrohttpd yet */
    bool lingering;                         /* answered at the gate, draining before the close */
    bool idle;                              /* in the idle list: waiting for a request head */
    size_t drained;                         /* bytes dropped while lingering */
    size_t peeked;                          /* at the gate: bytes seen so far */
    struct conn_ctx *gprev, *gnext;         /* the gate's list */
    struct conn_ctx *idle_prev, *idle_next; /* the idle list, oldest first */
    struct event *gate_ev;                  /* at the gate: the head's arrival, or the linger */
    struct event *header_timer;             /* running while we wait for a request's headers */
    struct event *body_timer;               /* running while a request's body arrives */
    struct event *body_watch;               /* ... and this one notices the client ending it */
    int64_t body_t0;                        /* when its body began (monotonic ms) */
    uint64_t body_bytes;                    /* body bytes so far */
    bool bad_nul;                           /* the URL of the current request decodes to a NUL */
    struct sbx_http_relay *relay;           /* after the gate: the client's bytes both ways */
    sbx_http_request *req;
};

/* Limits on a request head, checked at the gate. */
struct sbx_http_head_limits {
    size_t max_head;    /* request line and headers, bytes */
    size_t max_target;  /* the request target, bytes */
    size_t max_params;  /* query parameters */
    size_t max_headers; /* header lines */
};

/* What the check found: on success the head's length and framing, on
 * failure the answer to give. */
struct sbx_http_head {
    size_t head_len;
    bool http11;
    bool chunked;
    bool has_length;
    uint64_t content_length;
    unsigned status;
    const char *code;
    char msg[160];
};

/* Checks one complete request head (up to and including its empty line):
 * the request line, the HTTP version (1.0 or 1.1, else 505), the headers'
 * syntax and count (431), one Host on HTTP/1.1, one Content-Length of digits
 * only, Transfer-Encoding exactly "chunked" and never with Content-Length,
 * the target's length and query parameter count (414). Pure. */
int sbx_http_head_check(const char *buf, size_t len, const struct sbx_http_head_limits *lim,
                        struct sbx_http_head *h);

struct resp_header {
    struct resp_header *next;
    char *name;
    char *value;
};

struct sbx_http_server {
    struct event_base *base;
    sbx_http_config cfg;
    char *listen_spec;
    sbx_router *router;
    struct route_rec *routes;
    sbx_listener listener;
    bool listening;
    struct MHD_Daemon *mhd;
    struct event *io_ev;    /* MHD's epoll fd */
    struct event *timer_ev; /* MHD's next timeout, or 0 to run again at once */
    sbx_http_request *reqs; /* live requests, for stopping */
    bool in_run;            /* inside MHD_run() */
    bool kick;              /* run again as soon as the current run returns */
    bool stopping;
    bool early_close; /* the loop's backend reports EV_CLOSED */
    /* Upgraded connections (http_upgrade.c). */
    struct sbx_http_upgrade *upgrades;
    /* The gate (http_gate.c). */
    struct event *listen_ev;
    struct event *listen_pause; /* accepting again after EMFILE */
    struct conn_ctx *gate;      /* connections at the gate */
    struct conn_ctx *adopting;  /* being handed to libmicrohttpd */
    struct conn_ctx *idle_head, *idle_tail;
    unsigned nconns;    /* counted connections */
    unsigned lingering; /* answered at the gate, not closed yet */
    uint64_t evicted;   /* idle connections closed to make room */
    char *peek;         /* max_head + 1 bytes */
    struct sbx_http_head_limits head_limits;
    struct share_table by_addr;
    struct share_table req_by_token, req_by_tenant; /* requests in progress */
    struct share_table sse_by_token, sse_by_tenant; /* event streams */
    struct sbx_http_relay *relays;                  /* http_relay.c */
};

enum body_mode {
    BODY_BUFFER,  /* read into req->body, handler when complete */
    BODY_STREAM,  /* handed to the sink chunk by chunk */
    BODY_DISCARD, /* an answer is decided: read and drop the rest */
};

struct sbx_http_request {
    sbx_http_server *srv;
    struct MHD_Connection *conn;
    struct conn_ctx *cc;
    sbx_http_request *prev, *next;
    struct sbx_http_upgrade *upgrade; /* its 101 answer's, or NULL */
    const char *method;
    const char *path;
    const struct route_rec *route;
    sbx_route_match match;
    const sbx_identity *who;
    char peer[64];
    enum body_mode mode;
    char *body;
    size_t body_len, body_cap;
    uint64_t discarded;
    sbx_http_body_sink sink;
    bool sink_set;
    sbx_http_cancel_fn cancel_fn;
    void *cancel_ud;
    struct MHD_Response *resp; /* answer not yet handed to MHD */
    unsigned resp_status;
    struct resp_header *hdrs;
    bool handled;        /* the handler (or the sink's end) has run */
    bool deferred;       /* the handler will answer later */
    bool answered;       /* an answer was given */
    bool queued;         /* ... and handed to MHD */
    bool suspended;      /* parked with MHD_suspend_connection */
    bool gone;           /* the client went away (or we are stopping) */
    bool cancelled;      /* the cancel callback has been called */
    bool in_chunk;       /* inside the sink's chunk callback */
    bool body_paused;    /* the sink took part of a chunk: suspended until resumed */
    bool resume_asked;   /* sbx_http_req_resume_body() from inside the chunk callback */
    struct event *watch; /* notices a disconnect, from the first parking on */
    /* Called once when the request ends with its answer still kept by its
     * maker (an event stream): the client is gone, or the server stops. */
    void (*ended)(void *ud);
    void *ended_ud;
    double t0; /* CLOCK_MONOTONIC at its start, for the request log */
    /* Its places in the per-token and per-tenant counts (NULL: none). */
    struct share *tok_share, *ten_share;
    struct share *sse_tok_share, *sse_ten_share;
    bool has_body; /* Content-Length > 0 or chunked: the body timeout runs */
};

/* ---- http.c: the server, its connections, parking ---- */
/* Park / wake the connection of req (parking only from an MHD callback). */
void sbx_http__suspend(sbx_http_request *req);
void sbx_http__resume(sbx_http_request *req);
/* Watch req's connection for the client's end until the request ends
 * (parked or not); from its first parking, and for every event stream. */
void sbx_http__watch(sbx_http_request *req);
/* The client is gone (or nothing can be said to it): tell the owner, and
 * wake the connection so MHD closes it. */
void sbx_http__client_gone(sbx_http_request *req);
struct conn_ctx *sbx_http__conn_of(struct MHD_Connection *conn);
/* Run libmicrohttpd again soon (something changed outside its view). */
void sbx_http__kick(sbx_http_server *srv);
void sbx_http__on_header_timeout(evutil_socket_t fd, short what, void *arg);
/* Start / stop the body timeout of cc's request. */
void sbx_http__body_timer(struct conn_ctx *cc, bool on);

/* ---- http_gate.c: accepting, the head's check, the connection count ---- */
int sbx_http__gate_start(sbx_http_server *srv, sbx_err *err);
void sbx_http__gate_stop(sbx_http_server *srv);
/* cc waits for a request head (idle: the first to close to make room), or
 * has a request in progress. */
void sbx_http__idle(struct conn_ctx *cc, bool idle);
/* libmicrohttpd closed cc's connection: frees cc. */
void sbx_http__conn_closed(struct conn_ctx *cc);
/* No head in time at the gate: 408. */
void sbx_http__gate_timeout(struct conn_ctx *cc);
/* The end of the request head that starts at buf[from] (just after its
 * empty line), or 0 when it is not all in buf[..n). */
size_t sbx_http__head_end(const char *buf, size_t from, size_t n);
/* Our JSON error as a whole HTTP answer that closes the connection
 * (malloc'd; NULL when out of memory). */
char *sbx_http__error_text(unsigned status, const char *code, const char *msg);

/* ---- http_relay.c: every byte between the client and libmicrohttpd ---- */
struct sbx_http_relay;
/* Start relaying cc's client socket (cc->fd); *mhd_fd: the pair's end for
 * libmicrohttpd. -1 when out of descriptors or memory. */
int sbx_http__relay_start(struct conn_ctx *cc, int *mhd_fd);
void sbx_http__relay_free(struct sbx_http_relay *r);
/* libmicrohttpd closed its end: the relay flushes its last answers. */
void sbx_http__relay_conn_closed(struct sbx_http_relay *r);
/* libmicrohttpd completed a request (called from its completion; ok: its
 * whole answer was sent). */
void sbx_http__relay_completed(struct sbx_http_relay *r, bool ok);
/* A request's answer was given (status), and a 101's head has gone out
 * (the bytes after it are no longer HTTP). */
void sbx_http__relay_answered(struct sbx_http_relay *r, unsigned status);
void sbx_http__relay_tunnel(struct sbx_http_relay *r);
/* Whether the client has ended its side (*reset: reset the connection). */
bool sbx_http__relay_client_gone(const struct sbx_http_relay *r, bool *reset);
/* The server stops: the last answers out, every relay freed. */
void sbx_http__relays_free(sbx_http_server *srv);
/* The relay saw the client end: tell req (if it is watched). */
void sbx_http__client_ended(sbx_http_request *req);

/* %HH decoding of a URL's path or query part in place (what MHD would do);
 * returns the decoded length, *nul set when a %00 was decoded. Pure: the
 * fuzz target tests/fuzz/fuzz_http_request.c drives it. */
size_t sbx_http__unescape(char *s, bool *nul);

/* ---- http_request.c: headers, auth, routing, bodies ---- */
/* MHD's access handler. */
enum MHD_Result sbx_http__on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                    const char *method, const char *version, const char *upload,
                                    size_t *upload_size, void **con_cls);
/* A Content-Length header's value: false when it is not a plain decimal
 * count (MHD itself refuses such a request). Pure, fuzzed. */
bool sbx_http__content_length(const char *text, unsigned long long *n);

/* An event stream takes a place in its token's and tenant's stream counts
 * (freed with the request); -1 and a 429 answer when one is full. */
int sbx_http__take_stream(sbx_http_request *req);

/* ---- http_answer.c: answers ---- */
/* Give req its answer (takes resp). */
int sbx_http__answer(sbx_http_request *req, unsigned status, struct MHD_Response *resp);
/* Hand the pending answer to MHD; only from the access handler (or while
 * the connection is parked). */
enum MHD_Result sbx_http__flush(sbx_http_request *req);
/* Out of memory while answering: still say something. */
void sbx_http__answer_oom(sbx_http_request *req);
/* http_upgrade.c: the request ends (its upgrade, if any, is let go of); the
 * server stops (every open upgrade is ended first). */
void sbx_http__upgrade_forget(struct sbx_http_upgrade *up);
void sbx_http__upgrades_stop(sbx_http_server *srv);
void sbx_http__free_headers(sbx_http_request *req);

/* CLOCK_MONOTONIC in seconds: the request log gives tenths of a
 * millisecond, finer than sbx_mono_ms(). */
static inline double sbx_http__mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
