/* An incremental parser of a text/event-stream, as the HTML standard defines
 * it: lines end in CRLF, LF or CR (a CR at the end of one chunk and an LF at
 * the start of the next are one line end); ':' starts a comment; "data" lines
 * are joined with '\n'; "id" sets the id of the event being read (one
 * holding NUL is ignored), "retry" the reconnection delay (digits only); a
 * blank line ends the event: its id becomes the last event id (even without
 * data) and, when it has data, it is dispatched; a leading BOM is skipped; an
 * event cut off by the end of the stream is dropped, id included, so that a
 * client resuming with Last-Event-ID gets it again. Pure: bytes in,
 * callbacks out. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define SBX_CLI_SSE_MAX_EVENT (64u << 20) /* bound on one line or one event's data */
#define SBX_CLI_SSE_ID_MAX 256

struct sbx_cli_sse_event {
    const char *id;   /* the last event id in force ("" when none) */
    const char *type; /* "message" when the event named none */
    const char *data; /* NUL-terminated, without the final '\n' */
    size_t data_len;
};

/* Return 0 to go on, -1 to stop the parse (feed then fails with ECANCELED). */
typedef int (*sbx_cli_sse_fn)(void *ud, const struct sbx_cli_sse_event *ev);

struct sbx_cli_sse_buf {
    char *p;
    size_t len, cap;
};

struct sbx_cli_sse {
    sbx_cli_sse_fn on_event;
    void *ud;
    struct sbx_cli_sse_buf line, data, type;
    char last_id[SBX_CLI_SSE_ID_MAX]; /* of the last whole event: resume after it */
    char id_buf[SBX_CLI_SSE_ID_MAX];  /* of the event being read */
    long retry_ms;                    /* -1 until the server sets it */
    uint64_t events;                  /* dispatched so far */
    uint64_t comments;
    bool cr;      /* the last byte fed was a CR */
    bool started; /* past the BOM check */
};

void sbx_cli_sse_init(struct sbx_cli_sse *p, sbx_cli_sse_fn on_event, void *ud);
/* Feed a chunk. -1 with EMSGSIZE when a line or an event grows past
 * SBX_CLI_SSE_MAX_EVENT, ECANCELED when on_event stopped the parse, ENOMEM. */
int sbx_cli_sse_feed(struct sbx_cli_sse *p, const char *buf, size_t len, sbx_err *err);
/* The connection ended: drop the partial line and event (its id too), keep
 * the last id and the retry delay, and expect a new stream (BOM check
 * again). */
void sbx_cli_sse_reset(struct sbx_cli_sse *p);
void sbx_cli_sse_free(struct sbx_cli_sse *p);
