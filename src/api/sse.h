/* Server-Sent Events: a `text/event-stream` answer that the caller keeps and
 * pushes events into. Each client has a bounded buffer: a push that does
 * not fit is refused with ENOBUFS (never blocks the loop, never drops
 * silently), the handle stays "full" until the client has read half of it,
 * and on_drain then tells the caller to go on (replaying from its store what
 * it could not push). While the buffer is empty the connection is parked;
 * a push wakes it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "api/http.h"
#include "base/err.h"

typedef struct sbx_sse sbx_sse;

typedef struct sbx_sse_opts {
    /* The client went away, or the server is stopping. The handle is freed
     * after it returns. Not called after sbx_sse_close(). */
    void (*on_close)(sbx_sse *sse, void *ud);
    /* A full buffer has drained below half: push again. May be NULL. */
    void (*on_drain)(sbx_sse *sse, void *ud);
    void *ud;
    unsigned heartbeat_ms; /* a ": heartbeat" comment this often; 0: none */
    /* The heartbeat as a data event instead: the JSON this returns (a new
     * reference; NULL: none this time). May be NULL. */
    json_t *(*heartbeat_json)(void *ud);
    size_t buffer; /* per-client buffer; 0: the server's sse_buffer */
} sbx_sse_opts;

/* Answer req with 200 and an event stream. NULL (and a 500 answer) when out
 * of memory or when req was already answered; NULL and a 429 when its token
 * or tenant has all the event streams the server allows it. */
sbx_sse *sbx_http_respond_sse(sbx_http_request *req, const sbx_sse_opts *opts);

/* Queue one event: "id: …", "event: …" (each may be NULL), one "data: …"
 * line per line of data (CR, LF or CRLF), then a blank line. All or
 * nothing: -1 with errnum ENOBUFS when it does not fit (the handle is now
 * full), EMSGSIZE when it is larger than the whole buffer (split it; the
 * handle is not made full), EINVAL when id or event holds CR, LF or NUL,
 * EPIPE when the stream is over. */
int sbx_sse_send(sbx_sse *sse, const char *id, const char *event, const char *data, size_t len,
                 sbx_err *err);
/* data is json_dumps(data, JSON_COMPACT). */
int sbx_sse_send_json(sbx_sse *sse, const char *id, const char *event, const json_t *data,
                      sbx_err *err);
/* ": text" (no event): heartbeats. */
int sbx_sse_comment(sbx_sse *sse, const char *text, sbx_err *err);

bool sbx_sse_full(const sbx_sse *sse);
size_t sbx_sse_buffered(const sbx_sse *sse);
size_t sbx_sse_capacity(const sbx_sse *sse);
/* The request the stream answers (for its headers: Last-Event-ID, …);
 * NULL once the client is gone. */
sbx_http_request *sbx_sse_request(const sbx_sse *sse);

/* A request's Last-Event-ID: *after is the id to replay from (0 when the
 * header is absent or empty); -1 with err saying why for anything but a
 * decimal event id. Pure, fuzzed (tests/fuzz/fuzz_http_request.c). */
int sbx_sse_last_event_id(const char *header, uint64_t *after, sbx_err *err);

/* End the stream once what is buffered has been sent. The caller gives up
 * the handle: on_close will not be called. */
void sbx_sse_close(sbx_sse *sse);
