/* Shared by the two transports of cli/client.c: libcurl (https, proxies)
 * and cli/plain.c (http:// and unix: targets, a socket of our own). */
#pragma once

#include "cli/client.h"

#define SBX_CLI_CONNECT_TIMEOUT_S 10
/* An event stream with nothing, not even a heartbeat comment, for this long
 * is taken for a dead connection and resumed. */
#define SBX_CLI_STREAM_STALL_S 90

/* One request's headers besides Host, User-Agent and the body's framing. */
#define SBX_CLI_HEADERS_MAX 10
struct sbx_cli_headers {
    const char *name[SBX_CLI_HEADERS_MAX], *value[SBX_CLI_HEADERS_MAX];
    size_t n;
};

/* One transfer: where the answer goes. */
struct sbx_cli_xfer {
    const struct sbx_cli_request *rq;
    struct sbx_cli_response *rs;
    bool decided; /* status and type looked at */
    bool to_sink;
    bool sink_failed;
    bool too_large;
    sbx_err *err;
};

/* A chunk of the answer's body, rs->status already set, ctype its
 * Content-Type (or NULL): the first one decides where the body goes (the
 * sink, memory, or nowhere: a 2xx of another type than required is cut off
 * as wrong_type); false: stop the transfer. */
bool sbx_cli_xfer_take(struct sbx_cli_xfer *x, const char *ctype, const char *p, size_t n);

/* A kept-alive connection to an http:// or unix: target. */
struct sbx_cli_plain;
struct sbx_cli_plain *sbx_cli_plain_new(const struct sbx_cli_target *t);
void sbx_cli_plain_free(struct sbx_cli_plain *p);
/* One request to url (the target's base + path + query); 0 when an answer
 * came whole (or was cut off as wrong_type), -1 with err as sbx_cli_send
 * says. */
int sbx_cli_plain_send(struct sbx_cli_plain *p, const char *url, const struct sbx_cli_headers *h,
                       struct sbx_cli_xfer *x);
