#include "api/routes_int.h"

#include <stdlib.h>
#include <string.h>

#include "workspace/snapshot.h"

/* ---- workspace snapshots: /workspace/snapshots, /workspace/rollback ---- */

#define MESSAGE_MAX 1024

/* An index entry as the API shows it: the timestamp as RFC 3339. */
static json_t *shown(json_t *s)
{
    json_t *o = json_deep_copy(s);
    if (o)
        json_object_set_new(
            o, "timestamp",
            sbx_json_time((int64_t)json_integer_value(json_object_get(s, "timestamp"))));
    return o;
}

/* A request waiting for its helper. */
struct snap_wait {
    sbx_http_request *req;
    struct sbx_api *api;
    enum sbx_snapshot_op op;
};

static void snap_done(void *ud, const sbx_err *err, json_t *res)
{
    struct snap_wait *w = ud;
    if (err) {
        sbx_http_respond_err(w->req, err);
    } else if (w->op == SBX_SNAPSHOT_CREATE) {
        json_t *out = shown(json_object_get(res, "snapshot"));
        json_object_set(out, "created", json_object_get(res, "created"));
        json_object_set(out, "pruned", json_object_get(res, "pruned"));
        json_object_set(out, "skipped", json_object_get(res, "skipped"));
        sbx_http_respond_json(w->req, json_is_true(json_object_get(res, "created")) ? 201 : 200,
                              out);
    } else {
        sbx_http_respond_json(w->req, 200, json_incref(res));
    }
    free(w);
}

static void snap_cancel(sbx_http_request *req, void *ud)
{
    struct snap_wait *w = ud;
    sbx_runtime_snapshot_forget(w->api->rt, w);
    free(w);
}

/* Run r for the request's clone, answering when the helper is done. */
static void run(sbx_http_request *req, struct sbx_api *api, const struct sbx_clone *c,
                const struct sbx_snapshot_request *r)
{
    sbx_err e = {0};
    struct snap_wait *w = calloc(1, sizeof(*w));
    if (!w) {
        sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
        return;
    }
    *w = (struct snap_wait){.req = req, .api = api, .op = r->op};
    if (sbx_runtime_snapshot(api->rt, c, r, snap_done, w, &e) < 0) {
        free(w);
        sbx_http_respond_err(req, &e);
        return;
    }
    sbx_http_req_defer(req, snap_cancel, w);
}

/* The clone of a request and its id parameter (when the route has one). */
static int target(sbx_http_request *req, struct sbx_api *api, json_t *body, struct sbx_clone *c,
                  const char **id)
{
    sbx_err e = {0};
    if (api_request_clone(req, api, body, c, &e) < 0) {
        sbx_http_respond_err(req, &e);
        return -1;
    }
    if (id && (!(*id = sbx_http_req_param(req, "id")) || !sbx_snap_id_valid(*id))) {
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST,
                               "a snapshot id is 64 lower-case hex digits");
        return -1;
    }
    return 0;
}

void h_snapshot_create(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    static const char *const fields[] = {"message", "tenantCode", "cloneKey", "cloneId", NULL};
    json_t *body = sbx_http_req_json(req, fields);
    if (!body)
        return;
    struct sbx_clone c;
    json_t *msg = json_object_get(body, "message");
    if (target(req, api, body, &c, NULL) < 0) {
        json_decref(body);
        return;
    }
    if (msg && (!json_is_string(msg) || json_string_length(msg) > MESSAGE_MAX ||
                memchr(json_string_value(msg), '\0', json_string_length(msg)))) {
        json_decref(body);
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST,
                               "message must be a string of at most %d bytes", MESSAGE_MAX);
        return;
    }
    api_audit(req, api, "snapshot_create", c.id);
    struct sbx_snapshot_request r = {.op = SBX_SNAPSHOT_CREATE,
                                     .message = msg ? json_string_value(msg) : ""};
    run(req, api, &c, &r);
    json_decref(body);
}

void h_snapshot_list(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    struct sbx_clone c;
    if (target(req, api, NULL, &c, NULL) < 0)
        return;
    json_t *index;
    sbx_err e = {0};
    if (sbx_runtime_snapshot_list(api->rt, &c, &index, &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    json_t *list = json_array();
    /* Newest first, as a history is read. */
    json_t *all = json_object_get(index, "snapshots");
    for (size_t i = json_array_size(all); i-- > 0;)
        json_array_append_new(list, shown(json_array_get(all, i)));
    json_t *cur = json_object_get(index, "current");
    sbx_http_respond_json(
        req, 200, json_pack("{s:o, s:O}", "snapshots", list, "current", cur ? cur : json_null()));
    json_decref(index);
}

void h_snapshot_diff(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    struct sbx_clone c;
    const char *id;
    if (target(req, api, NULL, &c, &id) < 0)
        return;
    const char *against = sbx_http_req_query(req, "against");
    if (against && (!*against || !strcmp(against, "current")))
        against = NULL;
    if (against && !sbx_snap_id_valid(against)) {
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST,
                               "against is \"current\" or a snapshot id (64 lower-case hex "
                               "digits)");
        return;
    }
    const char *path = sbx_http_req_query(req, "path");
    if (path && !*path)
        path = NULL;
    struct sbx_snapshot_request r = {
        .op = SBX_SNAPSHOT_DIFF, .id = id, .against = against, .path = path};
    run(req, api, &c, &r);
}

void h_snapshot_delete(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    struct sbx_clone c;
    const char *id;
    if (target(req, api, NULL, &c, &id) < 0)
        return;
    api_audit(req, api, "snapshot_delete", id);
    struct sbx_snapshot_request r = {.op = SBX_SNAPSHOT_DELETE, .id = id};
    run(req, api, &c, &r);
}

/* The snapshotId of a body: NULL with a 400 answered when it is not one. */
const char *api_snapshot_id(sbx_http_request *req, json_t *body, const char *field)
{
    json_t *id = json_object_get(body, field);
    if (!json_is_string(id) || !sbx_snap_id_valid(json_string_value(id))) {
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST,
                               "%s must be a snapshot id (64 lower-case hex digits)", field);
        return NULL;
    }
    return json_string_value(id);
}

void h_snapshot_rollback(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    static const char *const fields[] = {"snapshotId", "tenantCode", "cloneKey", "cloneId", NULL};
    json_t *body = sbx_http_req_json(req, fields);
    if (!body)
        return;
    struct sbx_clone c;
    const char *id;
    if (target(req, api, body, &c, NULL) == 0 && (id = api_snapshot_id(req, body, "snapshotId"))) {
        api_audit(req, api, "snapshot_rollback", id);
        struct sbx_snapshot_request r = {.op = SBX_SNAPSHOT_ROLLBACK, .id = id};
        run(req, api, &c, &r);
    }
    json_decref(body);
}
