/* The OpenSandbox API (docs/opensandbox.md): OpenSandbox's lifecycle server
 * (/v1/sandboxes…) and the execd agent each of its sandboxes runs (served
 * here under /v1/sandboxes/{id}/proxy/44772/…), so its SDKs drive sandboxd
 * unchanged. An OpenSandbox sandbox is one live session of the runtime with a
 * clone of its own under the caller's tenant. A sandbox's record (image,
 * metadata, state, times) is kept in the store too, so that it outlives a
 * restart of the daemon (which ends its session: it comes back Terminated);
 * its commands and contexts live in memory only. Shared by the files of this
 * folder only. */
#pragma once

#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>

#include "api/opensandbox/bodies.h"
#include "api/routes_int.h"
#include "api/sse.h"

#define OS_EXECD_PORT "44772"
#define OS_EGRESS_PORT "18080"
/* Ended commands kept per sandbox for their status and logs (the oldest
 * beyond it are forgotten). */
#define OS_CMDS_KEPT 256
/* Output kept of one background command (beyond it, the oldest is dropped). */
#define OS_LOG_MAX (4u << 20)

struct os_box;

/* One command run through execd: a task of the sandbox's session. */
struct os_cmd {
    struct os_box *box;
    char id[SBX_ID_SIZE];
    char *command;
    bool background;
    bool code;       /* a code interpreter's run: its output is JSON event lines */
    bool sent_error; /* ... one of which was an error */
    bool running;
    int exit_code;
    char *error;          /* "" or why it did not complete */
    int64_t started_at;   /* ms */
    int64_t finished_at;  /* ms, 0 while running */
    struct evbuffer *log; /* background: stdout and stderr as they came; code: a
                             partial event line */
    uint64_t log_dropped; /* bytes dropped from the front of log */
    sbx_sse *sse;         /* foreground: the client's stream, NULL once gone */
    struct os_cmd *next;
};

struct os_box {
    struct os_state *os;
    char id[SBX_ID_SIZE];
    struct sbx_clone clone; /* tenant, no key, id = the sandbox's id */
    char *image;
    json_t *entrypoint; /* array of strings */
    json_t *metadata;   /* object of strings */
    json_t *env;        /* object of strings */
    json_t *limits;     /* resourceLimits as given */
    json_t *policy;     /* networkPolicy as given (or the default) */
    const char *state;  /* Pending, Running, Pausing, Paused, Resuming, ... */
    char reason[256];
    int64_t created_at, expires_at; /* ms; expires_at 0: none */
    struct event *ttl;              /* expiry */
    struct event *freeze;           /* a freeze or thaw not settled yet */
    sbx_http_request *freeze_req;   /* the pause or resume waiting for it */
    bool subscribed;
    struct sbx_subscriber sub; /* its session's events: the commands' output */
    struct os_cmd *cmds;
    struct os_ctx *ctxs;           /* code interpreter contexts and bash sessions */
    struct os_watch *watches;      /* /metrics/watch streams */
    int64_t cpu_at;                /* the last cpu sample of /metrics: when (ms) */
    uint64_t cpu_usec_at;          /* ... and the cgroup's cpu time then */
    double cpu_pct;                /* ... and the share it gave */
    sbx_http_request *create;      /* the create request waiting for the session */
    bool forgotten;                /* deleted: its record is gone from the store */
    char snapshot_id[SBX_ID_SIZE]; /* the snapshot it was made from, or "" */
    struct sbx_cg_limits lim;      /* of its session */
    struct os_snap *snapping;      /* a snapshot of it being taken (frozen meanwhile) */
    struct os_box *next;
};

struct os_state {
    struct sbx_api *api;
    struct os_box *boxes;
    struct os_snap *snaps; /* snapshots.c */
};

/* lifecycle.c */
/* The caller's sandbox of the path's {id}, Running unless any_state; NULL
 * with the answer given (404, or 409 when not running). */
struct os_box *os_box_get(sbx_http_request *req, struct os_state *os, bool any_state);
bool os_box_live(struct os_box *b);
/* Write b's record to the store (a failure is logged: the sandbox goes on). */
void os_box_save(struct os_box *b);
/* Write one record of kind to the store (steals record; a failure is
 * logged). */
void os_record_put(struct os_state *os, const char *kind, const char *id, const char *tenant,
                   json_t *record);
/* ?page=&pageSize= (1.., 1..200; defaults 1 and 20): -1 with a 400 given. */
int os_page_parse(sbx_http_request *req, uint64_t *page, uint64_t *size);
/* {items, pagination {page, pageSize, totalItems, totalPages, hasNextPage}}. */
void os_page_respond(sbx_http_request *req, json_t *items, uint64_t page, uint64_t size,
                     uint64_t total);
/* The RFC 3339 text of a time in ms (JSON string). */
json_t *os_time(int64_t ms);
/* 204, or 200 with Content-Length: 0 for routes the SDK reads as JSON. */
void os_no_content(sbx_http_request *req);

/* Apply the networkPolicy kept in b to its session (lifecycle.c). */
int os_box_apply_policy(sbx_http_request *req, struct os_box *b, sbx_err *err);

/* execd.c */
int os_execd_routes(sbx_http_server *srv, struct os_state *os, sbx_err *err);
/* A session event for b: the output of one of its commands. */
void os_cmd_event(struct os_box *b, const char *type, json_t *data);
/* The task of c ended. */
void os_cmds_free(struct os_box *b);
/* What a command runs: text through the shell (in cwd, NULL: the
 * workspace), or argv as is; stdin_data may be NULL. */
/* Start a command as a task of b's session. */
struct os_cmd *os_cmd_start(struct os_box *b, const struct os_run *r, sbx_err *err);
/* The command's event stream (answering req), init sent; background ones
 * end it there. */
void os_cmd_stream(sbx_http_request *req, struct os_cmd *c);
struct os_cmd *os_cmd_find(struct os_box *b, const char *id);

/* interp.c: the code interpreter (/code...) and bash sessions (/session...) */
struct os_ctx {
    char id[SBX_ID_SIZE];
    char language[16];
    char server[SBX_ID_SIZE]; /* the command that is its interpreter */
    struct os_ctx *next;
};
int os_interp_routes(sbx_http_server *srv, struct os_state *os, sbx_err *err);
void os_ctxs_free(struct os_box *b);

/* metrics.c: execd's /metrics and /metrics/watch */
int os_metrics_routes(sbx_http_server *srv, struct os_state *os, sbx_err *err);
void os_watches_free(struct os_box *b);

/* proxy.c: any other port, to the sandbox's loopback */
int os_proxy_routes(sbx_http_server *srv, struct os_state *os, sbx_err *err);

/* files.c */
int os_files_routes(sbx_http_server *srv, struct os_state *os, sbx_err *err);
/* Every value of a repeated query parameter (?path=a&path=b). */
struct os_query_all {
    const char *name;
    const char *vals[256];
    size_t n;
};
void os_query_values(sbx_http_request *req, struct os_query_all *q);

/* lifecycle.c: the sandbox of id in tenant (any state), or NULL. */
struct os_box *os_box_find(struct os_state *os, const char *tenant, const char *id);
/* The caller's tenant: 0 with c->tenant set, else -1 with err. */
int os_request_tenant(sbx_http_request *req, struct os_state *os, struct sbx_clone *c,
                      sbx_err *err);

/* snapshots.c: POST /v1/sandboxes/{id}/snapshots, /v1/snapshots... */
int os_snapshot_routes(sbx_http_server *srv, struct os_state *os, sbx_err *err);
/* Load the snapshots kept in the store (at the start). */
int os_snapshots_load(struct os_state *os, sbx_err *err);
/* The Ready snapshot id of tenant: its source's clone id, the snapshot of
 * the workspace it names, the sandbox's image and entrypoint; -1 with err
 * (ENOENT, or EBUSY while not Ready). */
int os_snapshot_source(struct os_state *os, const char *tenant, const char *id,
                       const char **clone_id, const char **ws_snapshot, const char **image,
                       sbx_err *err);
/* Let go of every snapshot (the daemon stops). */
void os_snapshots_close(struct os_state *os);

/* The route table of the surface (routes.c calls it). */
int sbx_api_opensandbox_routes(sbx_http_server *srv, struct sbx_api *api, sbx_err *err);
