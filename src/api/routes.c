#include "api/routes_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/extended.h"
#include "api/mcp/mcp.h"
#include "api/opensandbox/os_int.h"
#include "base/log.h"
#include "workspace/path.h"

/* ---- the clone a request names, the audit ---- */

/* Headers, then query, then body fields, then the daemon's defaults. */
int api_request_clone(sbx_http_request *req, struct sbx_api *api, json_t *body, struct sbx_clone *c,
                      sbx_err *err)
{
    static const struct {
        const char *header, *field;
        size_t off;
    } parts[] = {
        {"X-Tenant-Code", "tenantCode", offsetof(struct sbx_clone, tenant)},
        {"X-Clone-Key", "cloneKey", offsetof(struct sbx_clone, key)},
        {"X-Clone-Id", "cloneId", offsetof(struct sbx_clone, id)},
    };
    const char *defaults[] = {api_set(api)->tenant_code, api_set(api)->clone_key,
                              api_set(api)->clone_id};
    for (size_t i = 0; i < SBX_ARRAY_LEN(parts); i++) {
        const char *v = sbx_http_req_header(req, parts[i].header);
        if (!v)
            v = sbx_http_req_query(req, parts[i].field);
        json_t *j = body ? json_object_get(body, parts[i].field) : NULL;
        if (!v && j && !json_is_string(j))
            return sbx_err_set(err, EINVAL, "%s must be a string", parts[i].field);
        if (!v && j)
            v = json_string_value(j);
        if (!v)
            v = defaults[i] ? defaults[i] : "";
        char *dst = (char *)c + parts[i].off;
        bool optional = i == 1;
        if (!(optional && !*v) &&
            sbx_ws_segment_check(parts[i].field, v,
                                 j && v == json_string_value(j) ? json_string_length(j) : strlen(v),
                                 err) < 0)
            return -1;
        snprintf(dst, SBX_SEGMENT_MAX + 1, "%s", v);
    }
    if (sbx_ws_clone_check(c->tenant, c->key, c->id, err) < 0)
        return -1;
    /* A tenant token sees its own tenant only. */
    const sbx_identity *who = sbx_http_req_identity(req);
    if (who && who->tenant && strcmp(who->tenant, c->tenant) != 0)
        return sbx_err_set(err, EACCES, "this token may not act for tenant '%s'", c->tenant);
    return 0;
}

/* Every action is audited with the token's name (never the token). A record
 * the store cannot take goes to the daemon's log instead, and the action
 * still happens: refusing it would keep an operator from stopping a session,
 * cancelling a task or deleting files to free the very disk that is full. */
void api_audit(sbx_http_request *req, struct sbx_api *api, const char *action, const char *target)
{
    const sbx_identity *who = sbx_http_req_identity(req);
    const char *peer = sbx_http_req_peer(req);
    json_t *d = json_pack("{s:s, s:s}", "peer", peer ? peer : "", "route", sbx_http_req_path(req));
    cleanup_free char *detail = d ? json_dumps(d, JSON_COMPACT) : NULL;
    json_decref(d);
    struct sbx_store_audit rec = {.identity = who && who->name ? who->name : "",
                                  .action = action,
                                  .target = target ? target : "",
                                  .detail = detail};
    sbx_err e = {0};
    if (sbx_store_audit_append(api->store, &rec, &e) == 0)
        return;
    char name[128], what[300], msg[600], why[300];
    sbx_log(SBX_LOG_ERROR, "audit record not stored action=%s who=%s target=%s peer=%s error=%s",
            action, sbx_log_safe(rec.identity, name, sizeof(name)),
            sbx_log_safe(rec.target, what, sizeof(what)), peer ? peer : "",
            sbx_log_safe(sbx_err_format(&e, msg, sizeof(msg)), why, sizeof(why)));
}

void sbx_api_audit_refusals(struct sbx_api *api)
{
    if (!api->refused_busy)
        return;
    json_t *d = json_pack("{s:I, s:I}", "count", (json_int_t)api->refused_busy, "since",
                          (json_int_t)api->refused_since);
    cleanup_free char *detail = d ? json_dumps(d, JSON_COMPACT) : NULL;
    json_decref(d);
    struct sbx_store_audit rec = {
        .identity = "sandboxd", .action = "tasks_refused_busy", .detail = detail};
    sbx_err e = {0};
    if (detail && sbx_store_audit_append(api->store, &rec, &e) < 0) {
        char msg[600], why[300];
        sbx_log(SBX_LOG_WARN,
                "audit record not stored action=tasks_refused_busy count=%llu error=%s",
                (unsigned long long)api->refused_busy,
                sbx_log_safe(sbx_err_format(&e, msg, sizeof(msg)), why, sizeof(why)));
        return; /* counted on, tried again */
    }
    api->refused_busy = 0;
}

/* ---- the daemon ---- */

void h_healthz(sbx_http_request *req, void *ud)
{
    sbx_http_respond_json(req, 200, json_pack("{s:b}", "ok", 1));
}

/* /readyz: the original's {ok, status} with the runtime's state of the
 * request's clone (created until its first start); 503 while the daemon
 * itself is not ready. Extended: the daemon's own readiness too. */
void h_readyz(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    struct sbx_clone c;
    sbx_err e = {0};
    if (api_request_clone(req, api, NULL, &c, &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    struct sbx_clone_status cs;
    sbx_runtime_clone_status(api->rt, &c, &cs);
    /* Not ready while the store cannot write (a full disk, an I/O error):
     * every request that records something would fail. */
    sbx_err se = {0};
    bool store_ok = !api->store || sbx_store_health(api->store, &se) == 0;
    bool ok = api->ready && store_ok;
    json_t *o =
        json_pack("{s:b, s:s}", "ok", ok, "status", store_ok ? cs.status : "store_unavailable");
    if (o && sbx_api_extended(req)) {
        json_object_set_new(o, "daemon", json_string(api->ready ? "ready" : "starting"));
        if (!store_ok)
            json_object_set_new(o, "reason", json_string(se.msg));
    }
    sbx_http_respond_json(req, ok ? 200 : 503, o);
}

json_t *api_status_payload(sbx_http_request *req, struct sbx_api *api, bool reads,
                           const struct sbx_clone *c, const char *session)
{
    struct sbx_clone_status cs;
    sbx_runtime_clone_status(api->rt, c, &cs);
    char *ws = sbx_ws_dir(api_set(api)->workspace_root, c->tenant, c->key, c->id, NULL);
    json_t *o = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:o}", "runtimeId",
        sbx_runtime_default_session(api->rt), "tenantCode", c->tenant, "cloneId", c->id, "cloneKey",
        c->key, "sessionId", session ? session : sbx_runtime_default_session(api->rt), "workspace",
        ws ? ws : "", "status", cs.status, "startedAt", sbx_json_time(cs.started_at), "lastEventAt",
        sbx_json_time(cs.last_event_at));
    free(ws);
    if (!o || !sbx_api_extended(req))
        return o;
    unsigned running, queued;
    /* A tenant token learns nothing of other tenants' load. */
    const sbx_identity *who = sbx_http_req_identity(req);
    if (who && who->tenant)
        sbx_runtime_tenant_counts(api->rt, c->tenant, &running, &queued);
    else
        sbx_runtime_counts(api->rt, &running, &queued);
    json_object_set_new(o, "running", json_integer(running));
    json_object_set_new(o, "queued", json_integer(queued));
    json_object_set_new(o, "daemonStartedAt", sbx_json_time(api->started_at));
    if (session)
        json_object_set_new(o, "sessionLive",
                            json_boolean(sbx_runtime_session_live(api->rt, c, session)));
    if (api->status_extra)
        api->status_extra(api->status_extra_ud, o, reads);
    return o;
}

void h_status(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    struct sbx_clone c;
    sbx_err e = {0};
    if (api_request_clone(req, api, NULL, &c, &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    const char *session = sbx_http_req_query(req, "sessionID");
    if (session && sbx_ws_segment_check("sessionID", session, strlen(session), &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    sbx_http_respond_json(req, 200, api_status_payload(req, api, true, &c, session));
}

/* ---- the table ---- */

int sbx_api_routes(sbx_http_server *srv, struct sbx_api *api, sbx_err *err)
{
    static const struct {
        const char *method, *pattern;
        sbx_http_handler fn;
        unsigned flags;
    } routes[] = {
        {"GET", "/healthz", h_healthz, 0},
        {"GET", "/readyz", h_readyz, 0},
        {"GET", "/runtime/status", h_status, 0},
        {"POST", "/runtime/start", h_start, 0},
        {"POST", "/runtime/stop", h_stop, 0},
        {"POST", "/runtime/exec", h_exec, 0},
        {"POST", "/runtime/tasks", h_task_create, 0},
        {"GET", "/runtime/tasks", h_task_list, 0},
        {"GET", "/runtime/tasks/{id}", h_task_get, 0},
        {"POST", "/runtime/tasks/{id}/cancel", h_task_cancel, 0},
        {"POST", "/runtime/tasks/{id}/network", h_task_network, 0},
        {"POST", "/runtime/network", h_session_network, 0},
        {"GET", "/runtime/stream", h_stream, 0},
        {"GET", "/runtime/skills", h_skills_list, 0},
        {"GET", "/runtime/skills/{name}", h_skill_get, 0},
        {"POST", "/runtime/skills/reload", h_skills_reload, 0},
        {"POST", "/runtime/skills/{name}/activate", h_skill_activate, 0},
        {"POST", "/execute", h_execute, 0},
        {"GET", "/runtime/files", h_file_get, 0},
        /* Uploads stream: the body goes to the file as it arrives. */
        {"PUT", "/runtime/files", h_file_put, SBX_HTTP_ROUTE_STREAM_BODY},
        {"DELETE", "/runtime/files", h_file_delete, 0},
        {"POST", "/workspace/snapshots", h_snapshot_create, 0},
        {"GET", "/workspace/snapshots", h_snapshot_list, 0},
        {"GET", "/workspace/snapshots/{id}/diff", h_snapshot_diff, 0},
        {"DELETE", "/workspace/snapshots/{id}", h_snapshot_delete, 0},
        {"POST", "/workspace/rollback", h_snapshot_rollback, 0},
        {"GET", "/metrics", h_metrics, 0},
        {"GET", "/openapi.json", h_openapi, 0},
        /* MCP, Streamable HTTP: GET is 405 (the router's), no server stream. */
        {"POST", "/mcp", sbx_mcp_post, 0},
        {"POST", "/runtime/turn", h_turn, 0},
        {"POST", "/runtime/turn/{id}/cancel", h_turn_cancel, 0},
        {"GET", "/runtime/tools", h_tools, 0},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(routes); i++)
        if (sbx_http_route(srv, routes[i].method, routes[i].pattern, routes[i].fn, api,
                           routes[i].flags, err) < 0)
            return -1;
    /* OpenSandbox's lifecycle and execd APIs (api/opensandbox/). */
    return sbx_api_opensandbox_routes(srv, api, err);
}
