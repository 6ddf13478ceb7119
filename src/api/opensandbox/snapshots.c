/* OpenSandbox's snapshots (specs/sandbox-lifecycle.yml): POST
 * /v1/sandboxes/{id}/snapshots, GET /v1/snapshots[/{id}], DELETE
 * /v1/snapshots/{id}, and create-from-snapshot (lifecycle.c). A snapshot
 * here is one of the workspace snapshots of the runtime (runtime/snapshots.c)
 * of the sandbox's clone, taken while its session is frozen: every process
 * stops (the cgroup freezer, as pause does), the workspace is captured by
 * the snapshot helper, then the session is thawed. What a snapshot keeps is
 * the workspace (/workspace), not memory or processes (docs/opensandbox.md).
 * Its record is in the store, so it outlives the daemon; its contents are
 * in the tenant's snapshot store, so it outlives its sandbox. */
#include "api/opensandbox/os_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/http_internal.h"
#include "base/log.h"
#include "base/parse.h"
#include "base/time.h"
#include "store/store.h"
#include "workspace/snapstore.h"

#define OS_RECORD_SNAPSHOT "os_snapshot"
/* Tries to see a session frozen (or thawed), 10 ms apart. */
#define FREEZE_TRIES 1000

struct os_snap {
    struct os_state *os;
    char id[SBX_ID_SIZE];
    struct sbx_clone src; /* the tenant and the source sandbox's clone (id = its id) */
    char *name;           /* or NULL */
    char *image;
    char ws[SBX_SHA256_HEX_SIZE]; /* the workspace snapshot, "" until Ready */
    const char *state;            /* Creating, Ready, Failed, Deleting */
    char reason[64];
    char message[256];
    int64_t created_at, transition_at; /* ms */
    struct event *timer;               /* freezing or thawing its sandbox */
    bool thawing, job;                 /* ... ; the snapshot helper runs */
    int tries;                         /* of the freeze or thaw under way */
    sbx_http_request *del;             /* a DELETE waiting for the helper */
    struct os_snap *next;
};

/* ---- the record ---- */

static json_t *snap_json(const struct os_snap *s)
{
    json_t *j =
        json_pack("{s:s, s:s, s:{s:s, s:o}, s:o}", "id", s->id, "sandboxId", s->src.id, "status",
                  "state", s->state, "lastTransitionAt", sbx_json_time(s->transition_at),
                  "createdAt", sbx_json_time(s->created_at));
    if (j && s->name)
        json_object_set_new(j, "name", json_string(s->name));
    json_t *st = json_object_get(j, "status");
    if (st && s->reason[0])
        json_object_set_new(st, "reason", json_string(s->reason));
    if (st && s->message[0])
        json_object_set_new(st, "message", json_string(s->message));
    return j;
}

static void snap_save(struct os_snap *s)
{
    os_record_put(s->os, OS_RECORD_SNAPSHOT, s->id, s->src.tenant,
                  json_pack("{s:s, s:s*, s:s, s:s, s:s, s:s, s:s, s:I, s:I}", "sandboxId",
                            s->src.id, "name", s->name, "image", s->image, "ws", s->ws, "state",
                            s->state, "reason", s->reason, "message", s->message, "createdAt",
                            (json_int_t)s->created_at, "transitionAt",
                            (json_int_t)s->transition_at));
}

static void snap_set(struct os_snap *s, const char *state, const char *reason, const char *message)
{
    s->state = state;
    s->transition_at = sbx_now_ms();
    snprintf(s->reason, sizeof(s->reason), "%s", reason);
    snprintf(s->message, sizeof(s->message), "%s", message ? message : "");
    snap_save(s);
}

static void snap_free(struct os_snap *s)
{
    if (s->timer)
        event_free(s->timer);
    if (s->job)
        sbx_runtime_snapshot_forget(s->os->api->rt, s);
    free(s->name);
    free(s->image);
    free(s);
}

static struct os_snap *snap_find(struct os_state *os, const char *tenant, const char *id)
{
    for (struct os_snap *s = os->snaps; s; s = s->next)
        if (strcmp(s->id, id) == 0 && strcmp(s->src.tenant, tenant) == 0)
            return s;
    return NULL;
}

/* ---- taking one: freeze, snapshot, thaw ---- */

static void snap_step(evutil_socket_t fd, short what, void *arg);

static void again(struct os_snap *s)
{
    struct timeval tv = {.tv_usec = 10000};
    event_add(s->timer, &tv);
}

static void thaw(struct os_snap *s)
{
    s->thawing = true;
    s->tries = 0;
    snap_step(-1, 0, s);
}

/* The sandbox runs again (or has ended): the snapshot is Ready, or Failed
 * saying why (kept in message meanwhile). */
static void finish(struct os_snap *s)
{
    char why[sizeof(s->message)];
    snprintf(why, sizeof(why), "%s", s->message[0] ? s->message : "the snapshot was not taken");
    if (s->ws[0])
        snap_set(s, "Ready", "snapshot_ready", NULL);
    else
        snap_set(s, "Failed", "snapshot_capture_failed", why);
}

static void snap_done(void *ud, const sbx_err *err, json_t *res)
{
    struct os_snap *s = ud;
    s->job = false;
    const char *ws = json_string_value(json_object_get(json_object_get(res, "snapshot"), "id"));
    if (err || !ws || strlen(ws) >= sizeof(s->ws))
        snprintf(s->message, sizeof(s->message), "%s",
                 err ? err->msg : "the snapshot helper gave no id");
    else
        snprintf(s->ws, sizeof(s->ws), "%s", ws);
    thaw(s);
}

static void snap_step(evutil_socket_t fd, short what, void *arg)
{
    struct os_snap *s = arg;
    struct sbx_runtime *rt = s->os->api->rt;
    struct os_box *b = os_box_find(s->os, s->src.tenant, s->src.id);
    sbx_err e = {0};
    if (!b || !os_box_live(b)) { /* it ended meanwhile: nothing to freeze or thaw */
        if (b && b->snapping == s)
            b->snapping = NULL;
        if (!s->job) { /* else its end comes back here */
            if (!s->thawing)
                snprintf(s->message, sizeof(s->message), "the sandbox ended first");
            finish(s);
        }
        return;
    }
    int rc = sbx_runtime_session_freeze(rt, &b->clone, b->id, !s->thawing, &e);
    if (rc < 0 && e.errnum == EBUSY && ++s->tries < FREEZE_TRIES) {
        again(s);
        return;
    }
    s->tries = 0;
    if (s->thawing) { /* thawed (or cannot be: the sandbox says so) */
        if (rc < 0) {
            b->state = "Failed";
            snprintf(b->reason, sizeof(b->reason), "thaw after a snapshot: %.200s", e.msg);
            os_box_save(b);
        }
        b->snapping = NULL;
        finish(s);
        return;
    }
    struct sbx_snapshot_request r = {
        .op = SBX_SNAPSHOT_CREATE, .message = s->name ? s->name : s->id, .frozen_session = b->id};
    if (rc == 0 && sbx_runtime_snapshot(rt, &b->clone, &r, snap_done, s, &e) == 0) {
        s->job = true;
        return;
    }
    snprintf(s->message, sizeof(s->message), "%s", e.msg);
    thaw(s);
}

static void h_create(sbx_http_request *req, void *ud)
{
    struct os_state *os = ud;
    struct os_box *b = os_box_get(req, os, false);
    if (!b)
        return;
    static const char *const fields[] = {"name", NULL};
    json_t *body = sbx_http_req_json(req, fields);
    if (!body)
        return;
    json_t *name = json_object_get(body, "name");
    if (name && (!json_is_string(name) || !*json_string_value(name))) {
        json_decref(body);
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "name must be a non-empty string");
        return;
    }
    if (b->snapping || b->freeze_req) {
        json_decref(body);
        sbx_http_respond_error(req, SBX_HTTP_CONFLICT, "sandbox %s is %s already", b->id,
                               b->snapping ? "being snapshotted" : b->state);
        return;
    }
    sbx_err e = {0};
    struct os_snap *s = calloc(1, sizeof(*s));
    if (!s || sbx_id_new(s->id, &e) < 0 || !(s->image = strdup(b->image)) ||
        (name && !(s->name = strdup(json_string_value(name)))) ||
        !(s->timer = evtimer_new(req->srv->base, snap_step, s))) {
        json_decref(body);
        if (s)
            snap_free(s);
        sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
        return;
    }
    json_decref(body);
    s->os = os;
    s->src = b->clone;
    s->created_at = sbx_now_ms();
    api_audit(req, os->api, "opensandbox_snapshot", s->id);
    snap_set(s, "Creating", "snapshot_accepted", NULL);
    s->next = os->snaps;
    os->snaps = s;
    b->snapping = s;
    /* Answered at once (202, Creating); the client polls GET /snapshots/{id}. */
    char where[80];
    snprintf(where, sizeof(where), "/v1/snapshots/%s", s->id);
    sbx_http_add_header(req, "Location", where);
    sbx_http_respond_json(req, 202, snap_json(s));
    event_active(s->timer, EV_TIMEOUT, 0);
}

/* ---- the others ---- */

static struct os_snap *snap_get(sbx_http_request *req, struct os_state *os)
{
    struct sbx_clone c;
    sbx_err e = {0};
    if (os_request_tenant(req, os, &c, &e) < 0) {
        sbx_http_respond_err(req, &e);
        return NULL;
    }
    const char *id = sbx_http_req_param(req, "snapshotId");
    struct os_snap *s = snap_find(os, c.tenant, id);
    if (!s) /* another tenant's is not told apart from none */
        sbx_http_respond_error(req, SBX_HTTP_NOT_FOUND, "no snapshot %s", id);
    return s;
}

static void h_get(sbx_http_request *req, void *ud)
{
    struct os_snap *s = snap_get(req, ud);
    if (s)
        sbx_http_respond_json(req, 200, snap_json(s));
}

static void h_list(sbx_http_request *req, void *ud)
{
    struct os_state *os = ud;
    struct sbx_clone c;
    sbx_err e = {0};
    if (os_request_tenant(req, os, &c, &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    const char *sandbox = sbx_http_req_query(req, "sandboxId");
    uint64_t page, size;
    if (os_page_parse(req, &page, &size) < 0)
        return;
    struct os_query_all states = {.name = "state"};
    os_query_values(req, &states);
    json_t *items = json_array();
    uint64_t total = 0;
    for (struct os_snap *s = os->snaps; s; s = s->next) {
        bool state_ok = states.n == 0;
        for (size_t i = 0; i < states.n; i++)
            state_ok |= strcasecmp(states.vals[i], s->state) == 0;
        if (strcmp(s->src.tenant, c.tenant) != 0 || !state_ok ||
            (sandbox && strcmp(sandbox, s->src.id) != 0))
            continue;
        if (total >= (page - 1) * size && total < page * size)
            json_array_append_new(items, snap_json(s));
        total++;
    }
    os_page_respond(req, items, page, size, total);
}

static void snap_forget(struct os_snap *s)
{
    sbx_err e = {0};
    if (s->os->api->store &&
        sbx_store_record_delete(s->os->api->store, OS_RECORD_SNAPSHOT, s->id, &e) < 0) {
        char msg[600], why[300];
        sbx_log(SBX_LOG_WARN, "opensandbox snapshot record not deleted error=%s",
                sbx_log_safe(sbx_err_format(&e, msg, sizeof(msg)), why, sizeof(why)));
    }
    for (struct os_snap **p = &s->os->snaps; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    snap_free(s);
}

static void deleted(void *ud, const sbx_err *err, json_t *res)
{
    struct os_snap *s = ud;
    sbx_http_request *req = s->del;
    s->job = false;
    s->del = NULL;
    /* Gone already (the workspace's retention pruned it): as good. */
    if (err && err->errnum != ENOENT) {
        snap_set(s, "Ready", "snapshot_ready", NULL);
        if (req)
            sbx_http_respond_err(req, err);
        return;
    }
    snap_forget(s);
    if (req)
        os_no_content(req);
}

static void delete_cancel(sbx_http_request *req, void *ud)
{
    struct os_snap *s = ud;
    s->del = NULL; /* the deletion goes on, unanswered */
}

static void h_delete(sbx_http_request *req, void *ud)
{
    struct os_state *os = ud;
    struct os_snap *s = snap_get(req, os);
    if (!s)
        return;
    if (strcmp(s->state, "Creating") == 0 || strcmp(s->state, "Deleting") == 0) {
        sbx_http_respond_error(req, SBX_HTTP_CONFLICT, "snapshot %s is %s", s->id, s->state);
        return;
    }
    api_audit(req, os->api, "opensandbox_snapshot_delete", s->id);
    /* Its workspace snapshot goes too, unless another of ours names it (a
     * snapshot of the same contents is the same one). */
    bool shared = false;
    for (struct os_snap *o = os->snaps; o; o = o->next)
        shared |= o != s && s->ws[0] && strcmp(o->ws, s->ws) == 0 &&
                  strcmp(o->src.tenant, s->src.tenant) == 0 && strcmp(o->src.id, s->src.id) == 0;
    if (!s->ws[0] || shared) {
        snap_forget(s);
        os_no_content(req);
        return;
    }
    sbx_err e = {0};
    struct sbx_snapshot_request r = {.op = SBX_SNAPSHOT_DELETE, .id = s->ws};
    if (sbx_runtime_snapshot(os->api->rt, &s->src, &r, deleted, s, &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    s->job = true;
    s->del = req;
    snap_set(s, "Deleting", "snapshot_deleting", NULL);
    sbx_http_req_defer(req, delete_cancel, s);
}

/* ---- for lifecycle.c ---- */

int os_snapshot_source(struct os_state *os, const char *tenant, const char *id,
                       const char **clone_id, const char **ws_snapshot, const char **image,
                       sbx_err *err)
{
    struct os_snap *s = snap_find(os, tenant, id);
    if (!s)
        return sbx_err_set(err, ENOENT, "no snapshot %s", id);
    if (strcmp(s->state, "Ready") != 0)
        return sbx_err_set(err, EBUSY, "snapshot %s is %s, not Ready", id, s->state);
    *clone_id = s->src.id;
    *ws_snapshot = s->ws;
    *image = s->image;
    return 0;
}

static int snap_load(void *ud, const char *id, const char *tenant, const char *text)
{
    struct os_state *os = ud;
    json_t *r = json_loads(text, 0, NULL);
    const char *sandbox = json_string_value(json_object_get(r, "sandboxId"));
    const char *name = json_string_value(json_object_get(r, "name"));
    const char *image = json_string_value(json_object_get(r, "image"));
    const char *ws = json_string_value(json_object_get(r, "ws"));
    const char *state = json_string_value(json_object_get(r, "state"));
    const char *reason = json_string_value(json_object_get(r, "reason"));
    const char *message = json_string_value(json_object_get(r, "message"));
    struct os_snap *s = calloc(1, sizeof(*s));
    char safe[128];
    if (!s || !sandbox || !image || !ws || !state || strlen(id) >= sizeof(s->id) ||
        strlen(tenant) >= sizeof(s->src.tenant) || strlen(sandbox) >= sizeof(s->src.id) ||
        strlen(ws) >= sizeof(s->ws) || !(s->image = strdup(image)) ||
        (name && !(s->name = strdup(name)))) {
        sbx_log(SBX_LOG_WARN, "opensandbox snapshot record unreadable, skipped id=%s",
                sbx_log_safe(id, safe, sizeof(safe)));
        if (s)
            snap_free(s);
        json_decref(r);
        return 0;
    }
    s->os = os;
    snprintf(s->id, sizeof(s->id), "%s", id);
    snprintf(s->src.tenant, sizeof(s->src.tenant), "%s", tenant);
    snprintf(s->src.id, sizeof(s->src.id), "%s", sandbox);
    snprintf(s->ws, sizeof(s->ws), "%s", ws);
    snprintf(s->reason, sizeof(s->reason), "%s", reason ? reason : "");
    snprintf(s->message, sizeof(s->message), "%s", message ? message : "");
    s->created_at = json_integer_value(json_object_get(r, "createdAt"));
    s->transition_at = json_integer_value(json_object_get(r, "transitionAt"));
    /* Taken or deleted by the last run, when it ended: the workspace
     * snapshot is there (Ready) or not (Failed). */
    s->state = ws[0] ? "Ready" : "Failed";
    if (strcmp(state, "Creating") == 0)
        snprintf(s->message, sizeof(s->message), "the daemon stopped while it was being taken");
    json_decref(r);
    s->next = os->snaps;
    os->snaps = s;
    return 0;
}

int os_snapshots_load(struct os_state *os, sbx_err *err)
{
    if (!os->api->store || os->snaps)
        return 0;
    return sbx_store_records(os->api->store, OS_RECORD_SNAPSHOT, snap_load, os, err);
}

void os_snapshots_close(struct os_state *os)
{
    while (os->snaps) {
        struct os_snap *s = os->snaps;
        os->snaps = s->next;
        if (s->del)
            sbx_http_respond_error(s->del, SBX_HTTP_NOT_READY, "the daemon is stopping");
        snap_free(s);
    }
}

int os_snapshot_routes(sbx_http_server *srv, struct os_state *os, sbx_err *err)
{
    static const struct {
        const char *method, *pattern;
        sbx_http_handler fn;
    } routes[] = {
        {"POST", "/v1/sandboxes/{id}/snapshots", h_create},
        {"GET", "/v1/snapshots", h_list},
        {"GET", "/v1/snapshots/{snapshotId}", h_get},
        {"DELETE", "/v1/snapshots/{snapshotId}", h_delete},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(routes); i++)
        if (sbx_http_route(srv, routes[i].method, routes[i].pattern, routes[i].fn, os, 0, err) < 0)
            return -1;
    return 0;
}
