#include "api/routes_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent.h"
#include "api/json.h"
#include "base/digest.h"
#include "workspace/path.h"

/* ---- sessions: /runtime/start, /runtime/stop, /runtime/network ---- */

/* The answer of a start or a stop: the original's {ok, status:
 * StatusPayload}; an extended request also gets the session's name (and
 * the daemon's facts but the pool's memory, a read per pooled sandbox: in
 * GET /runtime/status). */
static void start_stop_answer(sbx_http_request *req, struct sbx_api *api, const struct sbx_clone *c,
                              const char *session)
{
    json_t *o =
        json_pack("{s:b, s:o}", "ok", 1, "status", api_status_payload(req, api, false, c, session));
    if (o && session && sbx_api_extended(req))
        json_object_set_new(o, "sessionId", json_string(session));
    sbx_http_respond_json(req, 200, o);
}

/* A session's start (once it is ready) or stop, with its event on the
 * session's stream unless the runtime sent it (a session that became ready
 * says so once, whoever waited for it). */
static void session_answer(sbx_http_request *req, struct sbx_api *api, const struct sbx_clone *c,
                           const char *session, bool start, bool emit)
{
    sbx_err e = {0};
    if (emit) {
        json_t *d = start ? json_pack("{s:s, s:s, s:s}", "runtimeId", session, "cloneId", c->id,
                                      "tenantCode", c->tenant)
                          : json_pack("{s:s, s:s}", "runtimeId", session, "reason", "stopped");
        if (sbx_runtime_emit(api->rt, c->tenant, session,
                             start ? "runtime_started" : "runtime_stopped", d, &e) < 0) {
            (void)sbx_http_respond_err(req, &e);
            return;
        }
    }
    start_stop_answer(req, api, c, session);
}

/* A start request waiting for its session's sandbox. */
struct start_wait {
    sbx_http_request *req;
    struct sbx_api *api;
    struct sbx_clone clone;
    char session[SBX_SEGMENT_MAX + 1];
};

static void start_ready(void *ud, const sbx_err *err)
{
    struct start_wait *w = ud;
    if (err)
        sbx_http_respond_err(w->req, err);
    else
        session_answer(w->req, w->api, &w->clone, w->session, true, false);
    free(w);
}

static void start_cancel(sbx_http_request *req, void *ud)
{
    struct start_wait *w = ud;
    /* The client left: the session goes on being set up, unwaited. */
    sbx_runtime_session_unwait(w->api->rt, w);
    free(w);
}

/* The wait of a start (NULL: answered, out of memory). */
static struct start_wait *start_wait_new(sbx_http_request *req, struct sbx_api *api,
                                         const struct sbx_clone *c, const char *session)
{
    struct start_wait *w = calloc(1, sizeof(*w));
    if (!w) {
        sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
        return NULL;
    }
    *w = (struct start_wait){.req = req, .api = api, .clone = *c};
    snprintf(w->session, sizeof(w->session), "%s", session);
    return w;
}

/* A live sandbox for the session: its tasks share /tmp, processes, the
 * workspace and the egress until stop or the idle timeout. The answer
 * waits until it is set up, without holding the loop. */
static void start_session(sbx_http_request *req, struct sbx_api *api, const struct sbx_clone *c,
                          const char *session)
{
    sbx_err e = {0};
    struct start_wait *w = start_wait_new(req, api, c, session);
    if (!w)
        return;
    int rc = sbx_runtime_session_start(api->rt, c, session, start_ready, w, &e);
    if (rc == 0) {
        sbx_http_req_defer(req, start_cancel, w);
        return;
    }
    free(w);
    if (rc < 0)
        sbx_http_respond_err(req, &e);
    else
        session_answer(req, api, c, session, true, true);
}

/* A start that names a snapshot: the workspace is rolled back to it first
 * (refused with 409 while the clone has a live session or tasks). */
static void rolled_back(void *ud, const sbx_err *err, json_t *res)
{
    struct start_wait *w = ud;
    if (err)
        sbx_http_respond_err(w->req, err);
    else
        start_session(w->req, w->api, &w->clone, w->session);
    free(w);
}

static void rollback_cancel(sbx_http_request *req, void *ud)
{
    struct start_wait *w = ud;
    sbx_runtime_snapshot_forget(w->api->rt, w);
    free(w);
}

static void from_snapshot(sbx_http_request *req, struct sbx_api *api, const struct sbx_clone *c,
                          const char *session, const char *snapshot)
{
    sbx_err e = {0};
    struct start_wait *w = start_wait_new(req, api, c, session);
    if (!w)
        return;
    struct sbx_snapshot_request r = {.op = SBX_SNAPSHOT_ROLLBACK, .id = snapshot};
    if (sbx_runtime_snapshot(api->rt, c, &r, rolled_back, w, &e) < 0) {
        free(w);
        sbx_http_respond_err(req, &e);
        return;
    }
    sbx_http_req_defer(req, rollback_cancel, w);
}

static void h_start_stop(sbx_http_request *req, void *ud, bool start)
{
    struct sbx_api *api = ud;
    static const char *const fields[] = {"sessionID", "sessionId",  "tenantCode", "cloneKey",
                                         "cloneId",   "snapshotId", "tools",      NULL};
    json_t *body = sbx_http_req_json(req, fields);
    if (!body)
        return;
    json_t *tools = json_incref(json_object_get(body, "tools"));
    struct sbx_clone c;
    sbx_err e = {0};
    if (api_request_clone(req, api, body, &c, &e) < 0) {
        json_decref(body);
        json_decref(tools);
        return (void)sbx_http_respond_err(req, &e);
    }
    char snapshot[SBX_SHA256_HEX_SIZE] = "";
    if (!start && json_object_get(body, "snapshotId")) {
        json_decref(body);
        json_decref(tools);
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "snapshotId applies to a start only");
        return;
    }
    if (start && json_object_get(body, "snapshotId")) {
        const char *id = api_snapshot_id(req, body, "snapshotId");
        if (!id) {
            json_decref(body);
            json_decref(tools);
            return;
        }
        snprintf(snapshot, sizeof(snapshot), "%s", id);
    }
    json_t *s = sbx_json_session(body);
    char session[SBX_SEGMENT_MAX + 1];
    if (s && (!json_is_string(s) || sbx_ws_segment_check("sessionID", json_string_value(s),
                                                         json_string_length(s), &e) < 0)) {
        json_decref(body);
        json_decref(tools);
        {
            (void)sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "%s",
                                         e.msg[0] ? e.msg : "sessionID must be a string");
            return;
        }
    }
    bool named = s != NULL;
    if (named)
        snprintf(session, sizeof(session), "%s", json_string_value(s));
    json_decref(body);
    if (!start && !named) {
        /* The clone's runtime: its tasks canceled, its sessions ended,
         * new tasks refused until the next start. */
        json_decref(tools);
        api_audit(req, api, "runtime_stop", c.id);
        sbx_runtime_clone_stop(api->rt, &c);
        start_stop_answer(req, api, &c, NULL);
        return;
    }
    if (start && sbx_runtime_clone_start(api->rt, &c, &e) < 0) {
        json_decref(tools);
        return (void)sbx_http_respond_err(req, &e);
    }
    if (start && !named && !sbx_api_extended(req)) {
        /* The original's start: the runtime only, no sandbox kept (and no
         * session for tools to belong to). */
        json_decref(tools);
        api_audit(req, api, "runtime_start", c.id);
        start_stop_answer(req, api, &c, NULL);
        return;
    }
    if (!named) {
        /* Ours (extended): a live session with a new name, returned. */
        char id[SBX_ID_SIZE];
        if (sbx_id_new(id, &e) < 0) {
            json_decref(tools);
            return (void)sbx_http_respond_err(req, &e);
        }
        snprintf(session, sizeof(session), "%s", id);
    }
    /* The external tools its turns may call (the caller runs them). */
    int trc = tools && start ? sbx_agent_session_tools(api->agent, &c, session, tools, &e) : 0;
    json_decref(tools);
    if (trc < 0)
        return (void)sbx_http_respond_err(req, &e);
    api_audit(req, api, start ? "session_start" : "session_stop", session);
    if (!start) {
        sbx_runtime_session_stop(api->rt, &c, session);
        session_answer(req, api, &c, session, false, true);
        return;
    }
    if (snapshot[0]) {
        from_snapshot(req, api, &c, session, snapshot);
        return;
    }
    start_session(req, api, &c, session);
}

void h_start(sbx_http_request *req, void *ud)
{
    h_start_stop(req, ud, true);
}

void h_stop(sbx_http_request *req, void *ud)
{
    h_start_stop(req, ud, false);
}

/* POST /runtime/network {sessionID, default, allow, deny}: a live session's
 * egress rules, for its new connections from now on; a tenant token may only
 * narrow. */
void h_session_network(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    static const char *const fields[] = {"sessionID", "sessionId", "tenantCode",
                                         "cloneKey",  "cloneId",   "default",
                                         "allow",     "deny",      NULL};
    json_t *body = sbx_http_req_json(req, fields);
    if (!body)
        return;
    sbx_err e = {0};
    struct sbx_clone c;
    struct parsed_task p = {.r = {.net = -1, .net_default = -1}};
    json_t *s = sbx_json_session(body);
    json_t *net =
        json_pack("{s:O*, s:O*, s:O*}", "default", json_object_get(body, "default"), "allow",
                  json_object_get(body, "allow"), "deny", json_object_get(body, "deny"));
    if (api_request_clone(req, api, body, &c, &e) < 0) {
        sbx_http_respond_err(req, &e);
    } else if (!json_is_string(s) || sbx_ws_segment_check("sessionID", json_string_value(s),
                                                          json_string_length(s), &e) < 0) {
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "%s",
                               e.msg[0] ? e.msg : "sessionID is required");
    } else if (task_request_network(req, net, &p, &e) < 0) {
        sbx_http_respond_err(req, &e);
    } else if (api_audit(req, api, "session_network", json_string_value(s)),
               sbx_runtime_session_set_network(api->rt, &c, json_string_value(s), p.r.net_default,
                                               p.r.allow, p.r.deny, &e) < 0) {
        sbx_http_respond_err(req, &e);
    } else {
        sbx_http_respond_json(req, 200,
                              json_pack("{s:b, s:s}", "ok", 1, "sessionId", json_string_value(s)));
    }
    task_request_free(&p);
    json_decref(net);
    json_decref(body);
}
