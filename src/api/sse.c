#include "api/sse.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "api/http_internal.h"
#include "base/parse.h"

#define SSE_BLOCK (16u << 10)

struct sbx_sse {
    sbx_http_request *req; /* NULL once the request has ended */
    struct event_base *base;
    struct evbuffer *buf;
    size_t cap;
    bool full;        /* a push was refused; stays so until half is drained */
    bool closing;     /* end the stream once buf is empty */
    bool caller_done; /* the caller has let go (sbx_sse_close or on_close) */
    int refs;         /* the request and MHD's response each hold one */
    sbx_sse_opts opts;
    struct event *heartbeat;
    struct event *drain_ev;
};

static void sse_unref(sbx_sse *sse)
{
    if (--sse->refs > 0)
        return;
    if (sse->heartbeat)
        event_free(sse->heartbeat);
    if (sse->drain_ev)
        event_free(sse->drain_ev);
    if (sse->buf)
        evbuffer_free(sse->buf);
    free(sse);
}

/* MHD wants more of the body. Nothing buffered: park the connection until
 * the next push (returning 0 without parking would make MHD spin). */
static ssize_t sse_read(void *cls, uint64_t pos, char *out, size_t max)
{
    sbx_sse *sse = cls;
    sbx_http_request *req = sse->req;
    if (!req || req->gone || req->srv->stopping)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    if (evbuffer_get_length(sse->buf) == 0) {
        if (sse->closing)
            return MHD_CONTENT_READER_END_OF_STREAM;
        sbx_http__suspend(req);
        return 0;
    }
    int n = evbuffer_remove(sse->buf, out, max);
    if (n <= 0)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    if (sse->full && evbuffer_get_length(sse->buf) <= sse->cap / 2) {
        sse->full = false;
        /* Not from inside MHD: the caller will push, and may close. */
        if (sse->opts.on_drain && sse->drain_ev)
            event_active(sse->drain_ev, EV_TIMEOUT, 0);
    }
    return n;
}

static void sse_response_freed(void *cls)
{
    sse_unref(cls);
}

static void on_drain(evutil_socket_t fd, short what, void *arg)
{
    sbx_sse *sse = arg;
    if (sse->req && !sse->caller_done && !sse->full && sse->opts.on_drain)
        sse->opts.on_drain(sse, sse->opts.ud);
}

static int push(sbx_sse *sse, struct evbuffer *ev, bool is_heartbeat, sbx_err *err)
{
    if (!sse->req || sse->req->gone || sse->caller_done || sse->closing)
        return sbx_err_set(err, EPIPE, "event stream: closed");
    size_t len = evbuffer_get_length(ev);
    if (len > sse->cap)
        return sbx_err_set(err, EMSGSIZE,
                           "event stream: an event of %zu bytes never fits the "
                           "%zu-byte buffer",
                           len, sse->cap);
    if (sse->full || evbuffer_get_length(sse->buf) + len > sse->cap) {
        /* A heartbeat that does not fit loses nothing: it does not make the
         * stream full, and the caller is not told to replay. */
        if (!is_heartbeat)
            sse->full = true;
        return sbx_err_set(err, ENOBUFS, "event stream: client buffer full (%zu bytes)", sse->cap);
    }
    if (evbuffer_add_buffer(sse->buf, ev) < 0)
        return sbx_err_set(err, ENOMEM, "event stream");
    if (sse->req->suspended)
        sbx_http__resume(sse->req);
    return 0;
}

static bool one_line(const char *s)
{
    return !s || !strpbrk(s, "\r\n");
}

static int add_data_lines(struct evbuffer *ev, const char *data, size_t len)
{
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && data[i] != '\r' && data[i] != '\n')
            continue;
        if (evbuffer_add(ev, "data: ", 6) < 0 || evbuffer_add(ev, data + start, i - start) < 0 ||
            evbuffer_add(ev, "\n", 1) < 0)
            return -1;
        if (i + 1 < len && data[i] == '\r' && data[i + 1] == '\n')
            i++;
        start = i + 1;
    }
    return 0;
}

int sbx_sse_send(sbx_sse *sse, const char *id, const char *event, const char *data, size_t len,
                 sbx_err *err)
{
    if (!one_line(id) || !one_line(event) || (data && memchr(data, '\0', len)))
        return sbx_err_set(err, EINVAL,
                           "event stream: id and event must be one line, data "
                           "without NUL");
    struct evbuffer *ev = evbuffer_new();
    if (!ev)
        return sbx_err_set(err, ENOMEM, "event stream");
    int rc = 0;
    if (id)
        rc |= evbuffer_add_printf(ev, "id: %s\n", id) < 0;
    if (event)
        rc |= evbuffer_add_printf(ev, "event: %s\n", event) < 0;
    if (data)
        rc |= add_data_lines(ev, data, len) < 0;
    rc |= evbuffer_add(ev, "\n", 1) < 0;
    if (rc)
        rc = sbx_err_set(err, ENOMEM, "event stream");
    else
        rc = push(sse, ev, false, err);
    evbuffer_free(ev);
    return rc;
}

int sbx_sse_send_json(sbx_sse *sse, const char *id, const char *event, const json_t *data,
                      sbx_err *err)
{
    char *text = json_dumps(data, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text)
        return sbx_err_set(err, ENOMEM, "event stream: encoding the event");
    int rc = sbx_sse_send(sse, id, event, text, strlen(text), err);
    free(text);
    return rc;
}

static int comment(sbx_sse *sse, const char *text, bool is_heartbeat, sbx_err *err)
{
    if (!one_line(text))
        return sbx_err_set(err, EINVAL, "event stream: a comment must be one line");
    struct evbuffer *ev = evbuffer_new();
    if (!ev)
        return sbx_err_set(err, ENOMEM, "event stream");
    int rc;
    if (evbuffer_add_printf(ev, ": %s\n\n", text) < 0)
        rc = sbx_err_set(err, ENOMEM, "event stream");
    else
        rc = push(sse, ev, is_heartbeat, err);
    evbuffer_free(ev);
    return rc;
}

int sbx_sse_comment(sbx_sse *sse, const char *text, sbx_err *err)
{
    return comment(sse, text, false, err);
}

static void on_heartbeat(evutil_socket_t fd, short what, void *arg)
{
    sbx_sse *sse = arg;
    /* Data already waiting says as much as a heartbeat would. */
    if (evbuffer_get_length(sse->buf) != 0)
        return;
    if (!sse->opts.heartbeat_json) {
        comment(sse, "heartbeat", true, NULL);
        return;
    }
    json_t *j = sse->opts.heartbeat_json(sse->opts.ud);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    struct evbuffer *ev = text ? evbuffer_new() : NULL;
    if (ev && evbuffer_add_printf(ev, "data: %s\n\n", text) >= 0)
        push(sse, ev, true, NULL);
    if (ev)
        evbuffer_free(ev);
    free(text);
    json_decref(j);
}

bool sbx_sse_full(const sbx_sse *sse)
{
    return sse->full;
}

size_t sbx_sse_buffered(const sbx_sse *sse)
{
    return evbuffer_get_length(sse->buf);
}

size_t sbx_sse_capacity(const sbx_sse *sse)
{
    return sse->cap;
}

sbx_http_request *sbx_sse_request(const sbx_sse *sse)
{
    return sse->req && !sse->req->gone ? sse->req : NULL;
}

void sbx_sse_close(sbx_sse *sse)
{
    if (sse->caller_done)
        return;
    sse->caller_done = true;
    sse->closing = true;
    if (sse->heartbeat)
        event_del(sse->heartbeat);
    if (sse->req && sse->req->suspended)
        sbx_http__resume(sse->req);
}

/* The request has ended (the client is gone, the server is stopping, or
 * the stream was finished). */
static void request_ended(void *ud)
{
    sbx_sse *sse = ud;
    sse->req = NULL;
    if (sse->heartbeat)
        event_del(sse->heartbeat);
    if (!sse->caller_done) {
        sse->caller_done = true;
        if (sse->opts.on_close)
            sse->opts.on_close(sse, sse->opts.ud);
    }
    sse_unref(sse);
}

sbx_sse *sbx_http_respond_sse(sbx_http_request *req, const sbx_sse_opts *opts)
{
    if (req->answered || req->gone || sbx_http__take_stream(req) < 0)
        return NULL;
    sbx_sse *sse = calloc(1, sizeof(*sse));
    if (!sse) {
        sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
        return NULL;
    }
    sse->base = req->srv->base;
    sse->opts = *opts;
    sse->cap = opts->buffer ? opts->buffer : req->srv->cfg.sse_buffer;
    sse->refs = 1; /* the response's */
    sse->req = req;
    sse->buf = evbuffer_new();
    sse->drain_ev = event_new(sse->base, -1, 0, on_drain, sse);
    if (opts->heartbeat_ms)
        sse->heartbeat = event_new(sse->base, -1, EV_PERSIST, on_heartbeat, sse);
    struct MHD_Response *r = NULL;
    if (sse->buf && sse->drain_ev && (sse->heartbeat || !opts->heartbeat_ms))
        r = sbx_mhd.create_response_from_callback(MHD_SIZE_UNKNOWN, SSE_BLOCK, sse_read, sse,
                                                  sse_response_freed);
    if (!r) {
        sse_unref(sse);
        sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
        return NULL;
    }
    sbx_mhd.add_response_header(r, "Content-Type", "text/event-stream");
    sbx_mhd.add_response_header(r, "Cache-Control", "no-cache");
    sbx_mhd.add_response_header(r, "X-Accel-Buffering", "no");
    if (sbx_http__answer(req, 200, r) < 0)
        return NULL; /* the response, and with it sse, is gone */
    sse->refs++;
    req->ended = request_ended;
    req->ended_ud = sse;
    sbx_http__watch(req); /* its client's hang-up frees its place at once */
    if (sse->heartbeat) {
        struct timeval tv = {.tv_sec = opts->heartbeat_ms / 1000,
                             .tv_usec = (suseconds_t)(opts->heartbeat_ms % 1000) * 1000};
        event_add(sse->heartbeat, &tv);
    }
    return sse;
}

int sbx_sse_last_event_id(const char *header, uint64_t *after, sbx_err *err)
{
    *after = 0;
    if (!header || !*header)
        return 0;
    return sbx_parse_uint(header, 0, UINT64_MAX, after, err);
}
