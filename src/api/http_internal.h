/* The server's and a request's insides, shared by the three files of the
 * HTTP server (http.c: the loop, connections and parking; http_request.c:
 * headers, auth, routing and bodies; http_answer.c: answers) and by what
 * answers on top of it (sse.c). The server knows nothing of the last: a
 * request tells whoever keeps its answer of its end through `ended`. */
#pragma once

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

/* One TCP (or unix) connection; requests come one after another on it. */
struct conn_ctx {
    sbx_http_server *srv;
    struct MHD_Connection *conn;
    int fd;
    struct event *header_timer; /* running while we wait for a request's headers */
    bool bad_nul;               /* the URL of the current request decodes to a NUL */
    sbx_http_request *req;
};

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
    struct event *watch; /* notices a disconnect while parked */
    /* Called once when the request ends with its answer still kept by its
     * maker (an event stream): the client is gone, or the server stops. */
    void (*ended)(void *ud);
    void *ended_ud;
    double t0; /* CLOCK_MONOTONIC at its start, for the request log */
};

/* ---- http.c: the server, its connections, parking ---- */
/* Park / wake the connection of req (parking only from an MHD callback). */
void sbx_http__suspend(sbx_http_request *req);
void sbx_http__resume(sbx_http_request *req);
/* The client is gone (or nothing can be said to it): tell the owner, and
 * wake the connection so MHD closes it. */
void sbx_http__client_gone(sbx_http_request *req);
struct conn_ctx *sbx_http__conn_of(struct MHD_Connection *conn);
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

/* ---- http_answer.c: answers ---- */
/* Give req its answer (takes resp). */
int sbx_http__answer(sbx_http_request *req, unsigned status, struct MHD_Response *resp);
/* Hand the pending answer to MHD; only from the access handler (or while
 * the connection is parked). */
enum MHD_Result sbx_http__flush(sbx_http_request *req);
/* Out of memory while answering: still say something. */
void sbx_http__answer_oom(sbx_http_request *req);
void sbx_http__free_headers(sbx_http_request *req);

/* CLOCK_MONOTONIC in seconds: the request log gives tenths of a
 * millisecond, finer than sbx_mono_ms(). */
static inline double sbx_http__mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
