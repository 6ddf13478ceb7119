#include "api/routes_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/sse.h"
#include "workspace/path.h"

/* ---- the event stream: /runtime/stream ---- */

struct stream {
    struct sbx_api *api;
    sbx_sse *sse;
    struct sbx_subscriber sub;
    bool extended; /* our body {id, type, time, sessionId, data}, else the original's */
};

static int stream_send(void *ud, uint64_t id, const char *type, const char *json)
{
    struct stream *s = ud;
    char ids[24], small[160];
    sbx_err e = {0};
    snprintf(ids, sizeof(ids), "%llu", (unsigned long long)id);
    char *strict = NULL;
    if (!s->extended) {
        /* The original's body: {type, time, data} (the id stays on the
         * frame's id: line, which its clients ignore). */
        json_error_t je;
        json_t *o = sbx_api_shape(NULL, json_loads(json, 0, &je), sbx_api_event_keys);
        strict = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (!strict)
            return -1;
        json = strict;
    }
    int rc = sbx_sse_send(s->sse, ids, type, json, strlen(json), &e);
    free(strict);
    if (rc == 0)
        return 0;
    if (e.errnum != EMSGSIZE)
        return -1;
    /* Larger than the client's whole buffer: say so in its place, never stall. */
    if (s->extended)
        snprintf(small, sizeof(small),
                 "{\"id\":%llu,\"type\":\"event_too_large\",\"data\":{\"type\":\"%s\"}}",
                 (unsigned long long)id, type);
    else
        snprintf(small, sizeof(small), "{\"type\":\"event_too_large\",\"data\":{\"type\":\"%s\"}}",
                 type);
    return sbx_sse_send(s->sse, ids, "event_too_large", small, strlen(small), NULL);
}

static void stream_close(sbx_sse *sse, void *ud)
{
    struct stream *s = ud;
    sbx_runtime_unsubscribe(s->api->rt, &s->sub);
    free(s);
}

static void stream_drain(sbx_sse *sse, void *ud)
{
    struct stream *s = ud;
    sbx_runtime_resume(s->api->rt, &s->sub);
}

void h_stream(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    const char *session = sbx_http_req_query(req, "sessionID");
    if (!session)
        session = sbx_http_req_query(req, "sessionId");
    if (!session)
        session = sbx_runtime_default_session(api->rt);
    sbx_err e = {0};
    struct sbx_clone c;
    if (api_request_clone(req, api, NULL, &c, &e) < 0) {
        sbx_http_respond_err(req, &e);
        return;
    }
    if (sbx_ws_segment_check("sessionID", session, strlen(session), &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    uint64_t after = 0;
    /* Without Last-Event-ID, live events only (as the original); with it,
     * the replay of what is stored after it (0: everything kept). */
    const char *last = sbx_http_req_header(req, "Last-Event-ID");
    if (sbx_sse_last_event_id(last, &after, &e) < 0)
        return (void)sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "Last-Event-ID: %s", e.msg);
    struct stream *s = calloc(1, sizeof(*s));
    if (!s)
        return (void)sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
    s->api = api;
    snprintf(s->sub.tenant, sizeof(s->sub.tenant), "%s", c.tenant);
    snprintf(s->sub.session, sizeof(s->sub.session), "%s", session);
    s->sub.last_id = after;
    s->sub.live_only = !last || !*last;
    s->extended = sbx_api_extended(req);
    s->sub.send = stream_send;
    s->sub.ud = s;
    sbx_sse_opts o = {
        .on_close = stream_close, .on_drain = stream_drain, .ud = s, .heartbeat_ms = 15000};
    s->sse = sbx_http_respond_sse(req, &o);
    if (!s->sse) {
        free(s);
        return;
    }
    if (sbx_runtime_subscribe(api->rt, &s->sub, &e) < 0) {
        sbx_sse_close(s->sse); /* closing without on_close: free here */
        free(s);
        return;
    }
    /* The headers go out with a first comment at once: a client waiting for
     * them (a live-only subscriber gets no event yet) is not left until the
     * first heartbeat. */
    (void)sbx_sse_comment(s->sse, "connected", NULL);
}
