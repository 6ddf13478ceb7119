/* sandboxctl's HTTP side: one connection (kept alive between requests,
 * e.g. while polling a task; our own socket for http:// and unix: targets,
 * libcurl for https:// or through a proxy: cli/client_int.h), the caller's identity sent on each
 * request (Authorization: Bearer, X-Tenant-Code, X-Clone-Key, X-Clone-Id), bodies streamed both
 * ways: an upload is read from a FILE as curl sends it, a successful answer can go to a sink chunk
 * by chunk, so neither sits whole in memory. Error answers are kept (bounded) for their message. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "cli/args.h"
#include "cli/target.h"

/* Bounds on answers kept in memory: a whole JSON answer (exec results carry
 * up to 10 MB of stdout and 10 MB of stderr, escaped), an error's body. */
#define SBX_CLI_BODY_MAX (256u << 20)
#define SBX_CLI_ERROR_BODY_MAX (64u << 10)

struct sbx_cli_client;
struct curl_slist;

/* Append "name: v" to a libcurl header list (nothing when v is NULL); *ok
 * turns false when out of memory, and later calls then add nothing. The
 * line is wiped from memory once copied (it may hold a token). */
struct curl_slist *sbx_cli_header(struct curl_slist *h, bool *ok, const char *name, const char *v);

/* NULL with err when args->url is bad, or libcurl, needed for it, cannot
 * be loaded. */
struct sbx_cli_client *sbx_cli_client_new(const struct sbx_cli_args *args, sbx_err *err);
void sbx_cli_client_free(struct sbx_cli_client *c);
/* "http://127.0.0.1:8080" or "unix:/run/sandbox.sock". */
const char *sbx_cli_client_display(const struct sbx_cli_client *c);

/* Takes each chunk of a successful (2xx) answer; -1 with err stops the
 * transfer. */
typedef int (*sbx_cli_sink_fn)(void *ud, const char *buf, size_t len, sbx_err *err);

struct sbx_cli_request {
    const char *method;        /* GET, POST, PUT, DELETE */
    const char *path;          /* "/runtime/exec", used as given */
    const char *const *query;  /* pairs, see sbx_cli_url(); may be NULL */
    const char *json;          /* a JSON body, or NULL */
    FILE *upload;              /* a raw body read from here, or NULL */
    int64_t upload_size;       /* its length; -1: unknown (chunked) */
    const char *last_event_id; /* Last-Event-ID header, or NULL */
    bool event_stream;         /* SSE: Accept text/event-stream, stall detection */
    sbx_cli_sink_fn sink;      /* a 2xx body goes here instead of into body */
    void *sink_ud;
    /* When set, a 2xx answer of another Content-Type is cut off at its
     * headers and reported as wrong_type. */
    const char *require_type;
};

struct sbx_cli_response {
    long status;
    char *body; /* NUL-terminated: the error body, or a 2xx body without sink */
    size_t len;
    bool body_cut; /* an error body longer than SBX_CLI_ERROR_BODY_MAX */
    bool wrong_type;
    bool received; /* some of the body arrived */
};
void sbx_cli_response_clear(struct sbx_cli_response *rs);

/* Send one request. 0 when an answer came (whatever its status: the caller
 * looks); -1 with err when none did: no connection ("cannot connect to
 * <url>: …"), a broken transfer, or the sink's own error (err as the sink
 * set it, errnum kept). */
int sbx_cli_send(struct sbx_cli_client *c, const struct sbx_cli_request *rq,
                 struct sbx_cli_response *rs, sbx_err *err);
