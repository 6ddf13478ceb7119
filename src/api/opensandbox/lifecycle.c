/* OpenSandbox's lifecycle API (specs/sandbox-lifecycle.yml of OpenSandbox):
 * /v1/sandboxes, one live session per sandbox (docs/opensandbox.md). */
#include "api/opensandbox/os_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "workspace/path.h"
#include "base/parse.h"
#include "api/http_internal.h"
#include "base/time.h"
#include "store/store.h"

/* The kind of the sandboxes' records in the store. */
#define OS_RECORD_SANDBOX "os_sandbox"

/* The longest timeout (TTL) a sandbox may ask for, and renew to. */

static struct event_base *req_base(sbx_http_request *req)
{
    return req->srv->base;
}

static sbx_http_server *req_server(sbx_http_request *req)
{
    return req->srv;
}

static const char *const states[] = {"Pending",  "Running",    "Pausing", "Paused", "Resuming",
                                     "Stopping", "Terminated", "Failed",  NULL};

void os_no_content(sbx_http_request *req)
{
    sbx_http_respond_data(req, 204, NULL, "", 0);
}

bool os_box_live(struct os_box *b)
{
    if (strcmp(b->state, "Terminated") == 0 || strcmp(b->state, "Failed") == 0 ||
        strcmp(b->state, "Pending") == 0)
        return false;
    if (!sbx_runtime_session_live(b->os->api->rt, &b->clone, b->id)) {
        b->state = "Terminated";
        snprintf(b->reason, sizeof(b->reason), "its session ended");
        os_box_save(b);
        return false;
    }
    return true;
}

/* ---- the record in the store ---- */

static json_t *box_record(struct os_box *b)
{
    return json_pack("{s:s, s:O, s:O, s:O, s:O, s:O*, s:s, s:s, s:I, s:I, s:s*}", "image", b->image,
                     "entrypoint", b->entrypoint, "metadata", b->metadata, "env", b->env, "limits",
                     b->limits, "policy", b->policy, "state", b->state, "reason", b->reason,
                     "createdAt", (json_int_t)b->created_at, "expiresAt", (json_int_t)b->expires_at,
                     "snapshotId", b->snapshot_id[0] ? b->snapshot_id : NULL);
}

void os_record_put(struct os_state *os, const char *kind, const char *id, const char *tenant,
                   json_t *record)
{
    struct sbx_store *st = os->api->store;
    char *text = st && record ? json_dumps(record, JSON_COMPACT) : NULL;
    json_decref(record);
    if (!st)
        return;
    sbx_err e = {0};
    if (!text)
        sbx_err_set(&e, ENOMEM, "a record");
    else
        sbx_store_record_put(st, kind, id, tenant, text, &e);
    free(text);
    if (e.errnum) {
        char msg[600], why[300], id_s[128];
        sbx_log(SBX_LOG_WARN, "opensandbox record not kept kind=%s id=%s error=%s", kind,
                sbx_log_safe(id, id_s, sizeof(id_s)),
                sbx_log_safe(sbx_err_format(&e, msg, sizeof(msg)), why, sizeof(why)));
    }
}

void os_box_save(struct os_box *b)
{
    if (!b->forgotten)
        os_record_put(b->os, OS_RECORD_SANDBOX, b->id, b->clone.tenant, box_record(b));
}

int os_page_parse(sbx_http_request *req, uint64_t *page, uint64_t *size)
{
    const char *ps = sbx_http_req_query(req, "page"), *pss = sbx_http_req_query(req, "pageSize");
    sbx_err e = {0};
    *page = 1;
    *size = 20;
    if ((ps && sbx_parse_uint(ps, 1, 1000000, page, &e) < 0) ||
        (pss && sbx_parse_uint(pss, 1, 200, size, &e) < 0)) {
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "page and pageSize: %s", e.msg);
        return -1;
    }
    return 0;
}

void os_page_respond(sbx_http_request *req, json_t *items, uint64_t page, uint64_t size,
                     uint64_t total)
{
    uint64_t pages = (total + size - 1) / size;
    sbx_http_respond_json(req, 200,
                          json_pack("{s:o, s:{s:I, s:I, s:I, s:I, s:b}}", "items", items,
                                    "pagination", "page", (json_int_t)page, "pageSize",
                                    (json_int_t)size, "totalItems", (json_int_t)total, "totalPages",
                                    (json_int_t)pages, "hasNextPage", page < pages));
}

static const char *known_state(const char *s)
{
    for (size_t i = 0; s && states[i]; i++)
        if (strcmp(states[i], s) == 0)
            return states[i];
    return NULL;
}

/* A sandbox of an earlier run of the daemon, as its record says. Its session
 * ended with that run: one that was not over yet is Terminated now. */
static int box_load(void *ud, const char *id, const char *tenant, const char *text)
{
    struct os_state *os = ud;
    json_t *r = json_loads(text, 0, NULL);
    struct os_box *b = calloc(1, sizeof(*b));
    const char *image = json_string_value(json_object_get(r, "image"));
    const char *state = known_state(json_string_value(json_object_get(r, "state")));
    const char *reason = json_string_value(json_object_get(r, "reason"));
    const char *snap = json_string_value(json_object_get(r, "snapshotId"));
    char safe[128];
    if (!b || !image || !state || strlen(id) >= sizeof(b->id) ||
        strlen(tenant) >= sizeof(b->clone.tenant)) {
        sbx_log(SBX_LOG_WARN, "opensandbox sandbox record unreadable, skipped id=%s",
                sbx_log_safe(id, safe, sizeof(safe)));
        free(b);
        json_decref(r);
        return 0;
    }
    b->os = os;
    snprintf(b->id, sizeof(b->id), "%s", id);
    snprintf(b->clone.tenant, sizeof(b->clone.tenant), "%s", tenant);
    snprintf(b->clone.id, sizeof(b->clone.id), "%s", id);
    snprintf(b->snapshot_id, sizeof(b->snapshot_id), "%s", snap ? snap : "");
    b->image = strdup(image);
#define FIELD(name, fallback)                                                                      \
    (json_object_get(r, name) ? json_incref(json_object_get(r, name)) : (fallback))
    b->entrypoint = FIELD("entrypoint", json_array());
    b->metadata = FIELD("metadata", json_object());
    b->env = FIELD("env", json_object());
    b->limits = FIELD("limits", json_object());
    b->policy = json_is_null(json_object_get(r, "policy")) ? NULL : FIELD("policy", NULL);
#undef FIELD
    b->created_at = json_integer_value(json_object_get(r, "createdAt"));
    b->expires_at = json_integer_value(json_object_get(r, "expiresAt"));
    if (strcmp(state, "Terminated") != 0 && strcmp(state, "Failed") != 0) {
        b->state = "Terminated";
        snprintf(b->reason, sizeof(b->reason),
                 "the daemon restarted: the sandbox's session ended with it (it was %s)", state);
    } else {
        b->state = state;
        snprintf(b->reason, sizeof(b->reason), "%s", reason ? reason : "");
    }
    json_decref(r);
    /* Oldest first in the store, newest first in the list. */
    b->next = os->boxes;
    os->boxes = b;
    return 0;
}

/* The tenant a request acts for: its token's, else the daemon's default
 * (or X-Tenant-Code for an operator token). */
int os_request_tenant(sbx_http_request *req, struct os_state *os, struct sbx_clone *c, sbx_err *err)
{
    const sbx_identity *who = sbx_http_req_identity(req);
    const char *t = sbx_http_req_header(req, "X-Tenant-Code");
    if (who && who->tenant && (!t || strcmp(t, who->tenant) == 0))
        t = who->tenant;
    else if (!t)
        t = api_set(os->api)->tenant_code ? api_set(os->api)->tenant_code : "";
    *c = (struct sbx_clone){0};
    if (sbx_ws_segment_check("X-Tenant-Code", t, strlen(t), err) < 0)
        return -1;
    if (who && who->tenant && strcmp(who->tenant, t) != 0)
        return sbx_err_set(err, EACCES, "this token may not act for tenant '%s'", t);
    snprintf(c->tenant, sizeof(c->tenant), "%s", t);
    return 0;
}

struct os_box *os_box_find(struct os_state *os, const char *tenant, const char *id)
{
    for (struct os_box *b = os->boxes; b; b = b->next)
        if (strcmp(b->id, id) == 0 && strcmp(b->clone.tenant, tenant) == 0)
            return b;
    return NULL;
}

struct os_box *os_box_get(sbx_http_request *req, struct os_state *os, bool any_state)
{
    const char *id = sbx_http_req_param(req, "id");
    struct sbx_clone c;
    sbx_err e = {0};
    if (os_request_tenant(req, os, &c, &e) < 0) {
        sbx_http_respond_err(req, &e);
        return NULL;
    }
    for (struct os_box *b = os->boxes; b; b = b->next)
        if (strcmp(b->id, id) == 0 && strcmp(b->clone.tenant, c.tenant) == 0) {
            bool live = os_box_live(b);
            if (!any_state && (!live || strcmp(b->state, "Running") != 0)) {
                sbx_http_respond_error(req, SBX_HTTP_CONFLICT, "sandbox %s is %s", b->id, b->state);
                return NULL;
            }
            return b;
        }
    /* Another tenant's sandbox is not told apart from none. */
    sbx_http_respond_error(req, SBX_HTTP_NOT_FOUND, "no sandbox %s", id);
    return NULL;
}

static json_t *box_json(struct os_box *b)
{
    os_box_live(b);
    json_t *j = json_pack(
        "{s:s, s:{s:s}, s:O, s:O, s:{s:s, s:s, s:s*, s:o}, s:o, s:o, s:O, s:O}", "id", b->id,
        "image", "uri", b->image, "entrypoint", b->entrypoint, "metadata", b->metadata, "status",
        "state", b->state, "reason", b->reason[0] ? "see message" : "", "message",
        b->reason[0] ? b->reason : NULL, "lastTransitionAt", sbx_json_time(sbx_now_ms()),
        "createdAt", sbx_json_time(b->created_at), "expiresAt", sbx_json_time(b->expires_at),
        "resourceLimits", b->limits, "env", b->env);
    if (j && b->snapshot_id[0])
        json_object_set_new(j, "snapshotId", json_string(b->snapshot_id));
    return j;
}

/* ---- the end of a sandbox ---- */

static void box_stop(struct os_box *b, const char *state, const char *reason)
{
    struct sbx_runtime *rt = b->os->api->rt;
    if (b->ttl)
        event_del(b->ttl);
    if (b->freeze_req) {
        sbx_http_respond_error(b->freeze_req, SBX_HTTP_CONFLICT, "sandbox %s ended", b->id);
        b->freeze_req = NULL;
    }
    if (b->freeze) {
        event_del(b->freeze);
        sbx_runtime_session_freeze(rt, &b->clone, b->id, false, NULL);
    }
    os_watches_free(b);
    os_ctxs_free(b);
    os_cmds_free(b);
    if (b->subscribed) {
        sbx_runtime_unsubscribe(rt, &b->sub);
        b->subscribed = false;
    }
    sbx_runtime_session_stop(rt, &b->clone, b->id);
    b->state = state;
    snprintf(b->reason, sizeof(b->reason), "%s", reason);
    os_box_save(b);
}

/* Free b, which is no longer listed (its record, if any, stays as it is). */
static void box_free(struct os_box *b)
{
    b->forgotten = true;
    box_stop(b, "Terminated", "");
    if (b->create) { /* deleted while being set up: its create hears so */
        sbx_runtime_session_unwait(b->os->api->rt, b);
        sbx_http_respond_error(b->create, SBX_HTTP_CONFLICT, "sandbox %s was deleted", b->id);
        b->create = NULL;
    }
    if (b->ttl)
        event_free(b->ttl);
    if (b->freeze)
        event_free(b->freeze);
    free(b->image);
    json_decref(b->entrypoint);
    json_decref(b->metadata);
    json_decref(b->env);
    json_decref(b->limits);
    json_decref(b->policy);
    free(b);
}

static void box_unlink(struct os_box *b)
{
    for (struct os_box **p = &b->os->boxes; *p; p = &(*p)->next)
        if (*p == b) {
            *p = b->next;
            return;
        }
}

static void on_ttl(evutil_socket_t fd, short what, void *arg)
{
    struct os_box *b = arg;
    char id[128];
    sbx_log(SBX_LOG_INFO, "opensandbox sandbox expired id=%s", sbx_log_safe(b->id, id, sizeof(id)));
    box_stop(b, "Terminated", "its timeout expired");
}

static void arm_ttl(struct os_box *b)
{
    if (!b->expires_at)
        return;
    int64_t left = b->expires_at - sbx_now_ms();
    if (left < 0)
        left = 0;
    struct timeval tv = {.tv_sec = left / 1000, .tv_usec = (left % 1000) * 1000};
    event_add(b->ttl, &tv);
}

/* ---- the session's events: the output of the commands ---- */

static int on_event(void *ud, uint64_t id, const char *type, const char *json)
{
    struct os_box *b = ud;
    if (strcmp(type, "tool_call_output") != 0)
        return 0;
    json_t *ev = json_loads(json, 0, NULL);
    if (ev)
        os_cmd_event(b, type, json_object_get(ev, "data"));
    json_decref(ev);
    return 0;
}

/* ---- create ---- */

/* Apply the box's networkPolicy to its session's egress. Without an egress
 * (the daemon's network is none) the sandbox has no network at all, which
 * is narrower than any policy: the policy is kept and reported. */
int os_box_apply_policy(sbx_http_request *req, struct os_box *b, sbx_err *err)
{
    sbx_err e = {0};
    json_t *net = os_policy_network(b->policy, &e);
    if (!net)
        return e.errnum ? (sbx_err_set(err, e.errnum, "%s", e.msg), -1) : 0;
    struct parsed_task p = {.r = {.net = -1, .net_default = -1}};
    int rc = task_request_network(req, net, &p, err);
    if (rc == 0 && api_set(b->os->api)->net == SBX_NET_PROXY)
        rc = sbx_runtime_session_set_network(b->os->api->rt, &b->clone, b->id, p.r.net_default,
                                             p.r.allow, p.r.deny, err);
    task_request_free(&p);
    json_decref(net);
    return rc;
}

static void created(void *ud, const sbx_err *err)
{
    struct os_box *b = ud;
    sbx_http_request *req = b->create;
    b->create = NULL;
    sbx_err e = {0};
    if (err) {
        b->state = "Failed";
        snprintf(b->reason, sizeof(b->reason), "%s", err->msg);
        os_box_save(b);
        sbx_http_respond_err(req, err);
        return;
    }
    b->state = "Running";
    /* The session's events carry the commands' output. */
    b->sub = (struct sbx_subscriber){.send = on_event, .ud = b};
    snprintf(b->sub.tenant, sizeof(b->sub.tenant), "%s", b->clone.tenant);
    snprintf(b->sub.session, sizeof(b->sub.session), "%s", b->id);
    if (sbx_runtime_subscribe(b->os->api->rt, &b->sub, &e) == 0)
        b->subscribed = true;
    if (e.errnum == 0 && os_box_apply_policy(req, b, &e) == 0) {
        /* The entrypoint runs in the background for as long as it may. */
        json_t *ep = b->entrypoint;
        size_t n = json_array_size(ep);
        if (n) {
            struct evbuffer *cmd = evbuffer_new();
            for (size_t i = 0; cmd && i < n; i++) {
                const char *a = json_string_value(json_array_get(ep, i));
                evbuffer_add_printf(cmd, "%s'", i ? " " : "");
                for (const char *c = a; *c; c++)
                    evbuffer_add_printf(cmd, *c == '\'' ? "'\\''" : "%c", *c);
                evbuffer_add(cmd, "'", 1);
            }
            evbuffer_add(cmd, "", 1);
            const char *text = cmd ? (const char *)evbuffer_pullup(cmd, -1) : NULL;
            struct os_run run = {.command = text,
                                 .timeout_s = api_set(b->os->api)->max.timeout_s,
                                 .background = true};
            if (!text || !os_cmd_start(b, &run, &e))
                sbx_err_wrap(&e, "entrypoint");
            if (cmd)
                evbuffer_free(cmd);
        }
    }
    if (e.errnum) {
        box_stop(b, "Failed", e.msg);
        sbx_http_respond_err(req, &e);
        return;
    }
    arm_ttl(b);
    os_box_save(b);
    sbx_http_respond_json(req, 202, box_json(b));
}

static void create_cancel(sbx_http_request *req, void *ud)
{
    struct os_box *b = ud;
    b->create = NULL;
    sbx_runtime_session_unwait(b->os->api->rt, b);
    sbx_runtime_snapshot_forget(b->os->api->rt, b);
    box_unlink(b);
    box_free(b);
}

/* Start b's session: 0 when created() is called (now or later), -1 with
 * err. */
static int box_start(struct os_box *b, sbx_err *err)
{
    int rc = sbx_runtime_session_start_limits(b->os->api->rt, &b->clone, b->id, &b->lim, created, b,
                                              err);
    if (rc > 0)
        created(b, NULL);
    return rc < 0 ? -1 : 0;
}

/* A sandbox made from a snapshot: its workspace is restored, then its
 * session starts. */
static void restored(void *ud, const sbx_err *err, json_t *res)
{
    struct os_box *b = ud;
    sbx_err e = {0};
    if (!err && box_start(b, &e) == 0)
        return;
    sbx_http_request *req = b->create;
    b->create = NULL;
    b->state = "Failed";
    snprintf(b->reason, sizeof(b->reason), "restore snapshot %.36s: %.180s", b->snapshot_id,
             err ? err->msg : e.msg);
    os_box_save(b);
    if (req) {
        sbx_err out = err ? *err : e;
        sbx_err_wrap(&out, "restore snapshot %s", b->snapshot_id);
        sbx_http_respond_err(req, &out);
    }
}

static void h_create(sbx_http_request *req, void *ud)
{
    struct os_state *os = ud;
    static const char *const fields[] = {
        "image",    "entrypoint",      "resourceLimits", "resourceRequests", "timeout",
        "env",      "metadata",        "networkPolicy",  "extensions",       "secureAccess",
        "platform", "credentialProxy", "volumes",        "snapshotId",       NULL};
    json_t *body = sbx_http_req_json(req, fields);
    if (!body)
        return;
    sbx_err e = {0};
    struct os_create cr = {0};
    struct os_box *b = calloc(1, sizeof(*b));
    if (!b) {
        sbx_err_set(&e, ENOMEM, "sandbox");
        goto fail;
    }
    b->os = os;
    b->state = "Pending";
    if (os_request_tenant(req, os, &b->clone, &e) < 0 ||
        os_create_parse(api_set(os->api), body, &cr, &e) < 0)
        goto fail;
    const char *from = NULL, *ws_snap = NULL, *image = cr.image;
    if (cr.snapshot_id &&
        os_snapshot_source(os, b->clone.tenant, cr.snapshot_id, &from, &ws_snap, &image, &e) < 0)
        goto fail;
    b->image = strdup(image);
    b->policy = json_incref(json_object_get(body, "networkPolicy"));
    b->lim = cr.lim;
    if (sbx_id_new(b->id, &e) < 0)
        goto fail;
    if (cr.snapshot_id) {
        snprintf(b->snapshot_id, sizeof(b->snapshot_id), "%s", cr.snapshot_id);
        /* OpenSandbox's default entrypoint for a sandbox from a snapshot. */
        if (!cr.entrypoint)
            b->entrypoint = json_pack("[s, s, s]", "tail", "-f", "/dev/null");
    }
    snprintf(b->clone.id, sizeof(b->clone.id), "%s", b->id);
    b->clone.key[0] = '\0';
    if (!b->entrypoint)
        b->entrypoint = cr.entrypoint ? json_incref(cr.entrypoint) : json_array();
    b->metadata = json_object_get(body, "metadata")
                      ? json_deep_copy(json_object_get(body, "metadata"))
                      : json_object();
    b->env =
        json_object_get(body, "env") ? json_deep_copy(json_object_get(body, "env")) : json_object();
    b->limits = json_object_get(body, "resourceLimits")
                    ? json_deep_copy(json_object_get(body, "resourceLimits"))
                    : json_object();
    b->created_at = sbx_now_ms();
    if (json_is_integer(cr.to))
        b->expires_at = b->created_at + json_integer_value(cr.to) * 1000;
    if (!(b->ttl = evtimer_new(req_base(req), on_ttl, b))) {
        sbx_err_set(&e, ENOMEM, "sandbox timer");
        goto fail;
    }
    json_decref(body);
    body = NULL;
    api_audit(req, os->api, "opensandbox_create", b->id);
    b->create = req;
    b->next = os->boxes;
    os->boxes = b;
    int rc;
    if (from) { /* the snapshot's workspace first, into the new clone's */
        struct sbx_snapshot_request r = {
            .op = SBX_SNAPSHOT_ROLLBACK, .id = ws_snap, .from_clone = from};
        rc = sbx_runtime_snapshot(os->api->rt, &b->clone, &r, restored, b, &e);
    } else
        rc = box_start(b, &e);
    if (rc < 0) {
        b->create = NULL;
        box_unlink(b);
        goto fail;
    }
    if (b->create) /* not answered yet */
        sbx_http_req_defer(req, create_cancel, b);
    return;
fail:
    json_decref(body);
    sbx_http_respond_err(req, &e);
    if (b)
        box_free(b);
}

/* ---- the others ---- */

static void h_get(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, true);
    if (b)
        sbx_http_respond_json(req, 200, box_json(b));
}

/* ?metadata=k=v&k2=v2 (URL-encoded as one value): every pair must match. */
static bool metadata_match(struct os_box *b, const char *filter)
{
    if (!filter || !*filter)
        return true;
    char *copy = strdup(filter), *save = NULL;
    bool ok = copy != NULL;
    for (char *kv = copy ? strtok_r(copy, "&", &save) : NULL; kv && ok;
         kv = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(kv, '=');
        if (eq)
            *eq = '\0';
        json_t *v = json_object_get(b->metadata, kv);
        ok = v && (!eq || strcmp(json_string_value(v), eq + 1) == 0);
    }
    free(copy);
    return ok;
}

static void h_list(sbx_http_request *req, void *ud)
{
    struct os_state *os = ud;
    struct sbx_clone c;
    sbx_err e = {0};
    if (os_request_tenant(req, os, &c, &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    const char *state = sbx_http_req_query(req, "state");
    const char *meta = sbx_http_req_query(req, "metadata");
    uint64_t page, size;
    if (os_page_parse(req, &page, &size) < 0)
        return;
    if (state) {
        bool known = false;
        for (size_t i = 0; states[i]; i++)
            known |= strcasecmp(states[i], state) == 0;
        if (!known) {
            sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST,
                                   "state '%s' is not one of Pending, Running, Pausing, Paused, "
                                   "Resuming, Stopping, Terminated, Failed",
                                   state);
            return;
        }
    }
    json_t *items = json_array();
    uint64_t total = 0;
    for (struct os_box *b = os->boxes; b; b = b->next) {
        if (strcmp(b->clone.tenant, c.tenant) != 0)
            continue;
        os_box_live(b);
        if ((state && strcasecmp(state, b->state) != 0) || !metadata_match(b, meta))
            continue;
        if (total >= (page - 1) * size && total < page * size)
            json_array_append_new(items, box_json(b));
        total++;
    }
    os_page_respond(req, items, page, size, total);
}

static void h_delete(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, true);
    if (!b)
        return;
    api_audit(req, b->os->api, "opensandbox_delete", b->id);
    sbx_err e = {0};
    if (b->os->api->store &&
        sbx_store_record_delete(b->os->api->store, OS_RECORD_SANDBOX, b->id, &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    box_unlink(b);
    box_free(b);
    os_no_content(req);
}

static void h_metadata(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, true);
    if (!b)
        return;
    json_t *body = sbx_http_req_json(req, NULL);
    if (!body)
        return;
    /* A merge patch: null removes a key. */
    sbx_err e = {0};
    if (os_metadata_merge(b->metadata, body, &e) < 0) {
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "%s", e.msg);
        json_decref(body); /* e.msg names one of its keys */
        return;
    }
    json_decref(body);
    os_box_save(b);
    sbx_http_respond_json(req, 200, box_json(b));
}

/* Freezing is one try at a time: until the kernel has stopped every
 * process the state is Pausing, and a timer tries again. */
static void on_freeze(evutil_socket_t fd, short what, void *arg)
{
    struct os_box *b = arg;
    bool pause = strcmp(b->state, "Pausing") == 0;
    sbx_err e = {0};
    sbx_http_request *req = b->freeze_req;
    if (sbx_runtime_session_freeze(b->os->api->rt, &b->clone, b->id, pause, &e) == 0) {
        b->state = pause ? "Paused" : "Running";
        b->freeze_req = NULL;
        os_box_save(b);
        if (req)
            sbx_http_respond_data(req, 202, NULL, "", 0);
        return;
    }
    if (e.errnum == EBUSY) {
        struct timeval tv = {.tv_usec = 10000};
        event_add(b->freeze, &tv);
        return;
    }
    b->state = "Failed";
    snprintf(b->reason, sizeof(b->reason), "%s", e.msg);
    os_box_save(b);
    b->freeze_req = NULL;
    if (req)
        sbx_http_respond_err(req, &e);
}

static void freeze_cancel(sbx_http_request *req, void *ud)
{
    struct os_box *b = ud;
    b->freeze_req = NULL; /* the freeze or thaw goes on, unwaited */
}

static void pause_resume(sbx_http_request *req, void *ud, bool pause)
{
    struct os_box *b = os_box_get(req, ud, true);
    if (!b)
        return;
    if (b->freeze_req || b->snapping) {
        sbx_http_respond_error(req, SBX_HTTP_CONFLICT, "sandbox %s is %s already", b->id,
                               b->snapping ? "being snapshotted" : b->state);
        return;
    }
    /* A resume may also undo a pause not settled yet. */
    if (!os_box_live(b) || (strcmp(b->state, pause ? "Running" : "Paused") != 0 &&
                            (pause || strcmp(b->state, "Pausing") != 0))) {
        sbx_http_respond_error(req, SBX_HTTP_CONFLICT, "sandbox %s is %s, not %s", b->id, b->state,
                               pause ? "Running" : "Paused");
        return;
    }
    if (!b->freeze && !(b->freeze = evtimer_new(req_base(req), on_freeze, b))) {
        sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
        return;
    }
    api_audit(req, b->os->api, pause ? "opensandbox_pause" : "opensandbox_resume", b->id);
    /* The answer waits (off the loop's clock) until the kernel has stopped,
     * or let go of, every process: a paused sandbox makes no progress. */
    event_del(b->freeze);
    b->state = pause ? "Pausing" : "Resuming";
    b->freeze_req = req;
    on_freeze(-1, 0, b);
    if (b->freeze_req)
        sbx_http_req_defer(req, freeze_cancel, b);
}

static void h_pause(sbx_http_request *req, void *ud)
{
    pause_resume(req, ud, true);
}

static void h_resume(sbx_http_request *req, void *ud)
{
    pause_resume(req, ud, false);
}

/* "2026-12-02T01:02:03.456Z" or with an offset "+08:00"; ms, or -1. */
static int64_t parse_rfc3339(const char *s)
{
    struct tm tm = {0};
    const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!p)
        return -1;
    int64_t ms = (int64_t)timegm(&tm) * 1000;
    if (*p == '.') {
        int64_t scale = 100;
        for (p++; *p >= '0' && *p <= '9'; p++, scale /= 10)
            ms += (*p - '0') * scale;
    }
    if (*p == 'Z' || *p == 'z')
        return p[1] ? -1 : ms;
    int hh, mm;
    char sign;
    if (sscanf(p, "%c%2d:%2d", &sign, &hh, &mm) != 3 || (sign != '+' && sign != '-') ||
        strlen(p) != 6)
        return -1;
    int64_t off = ((int64_t)hh * 60 + mm) * 60000;
    return sign == '+' ? ms - off : ms + off;
}

static void h_renew(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, true);
    if (!b)
        return;
    static const char *const fields[] = {"expiresAt", NULL};
    json_t *body = sbx_http_req_json(req, fields);
    if (!body)
        return;
    json_t *at = json_object_get(body, "expiresAt");
    int64_t ms = json_is_string(at) ? parse_rfc3339(json_string_value(at)) : -1;
    int64_t now = sbx_now_ms();
    json_decref(body);
    if (ms < 0) {
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST,
                               "expiresAt must be an RFC 3339 time (2026-01-02T03:04:05Z)");
        return;
    }
    if (ms <= now || ms > now + (int64_t)OS_TTL_MAX_S * 1000) {
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST,
                               "expiresAt must be in the future, within %d seconds", OS_TTL_MAX_S);
        return;
    }
    if (!os_box_live(b)) {
        sbx_http_respond_error(req, SBX_HTTP_CONFLICT, "sandbox %s is %s", b->id, b->state);
        return;
    }
    b->expires_at = ms;
    if (strcmp(b->state, "Paused") != 0)
        arm_ttl(b);
    os_box_save(b);
    sbx_http_respond_json(req, 200, json_pack("{s:o}", "expiresAt", sbx_json_time(ms)));
}

/* {endpoint, headers}: no scheme; every port is served by this listener
 * under the sandbox's proxy path, reached with the caller's own token. */
static void h_endpoint(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, true);
    if (!b)
        return;
    const char *port = sbx_http_req_param(req, "port");
    uint64_t p;
    sbx_err e = {0};
    if (sbx_parse_uint(port, 1, 65535, &p, &e) < 0) {
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "port: %s", e.msg);
        return;
    }
    const char *host = sbx_http_req_header(req, "Host");
    if (!host || !*host || strpbrk(host, "/ \t"))
        host = sbx_http_server_address(req_server(req));
    char ep[512];
    snprintf(ep, sizeof(ep), "%s/v1/sandboxes/%s/proxy/%llu", host, b->id, (unsigned long long)p);
    sbx_http_respond_json(req, 200, json_pack("{s:s, s:{}}", "endpoint", ep, "headers"));
}

/* The SDK reports its create latency: taken, not kept. */
static void h_metrics_event(sbx_http_request *req, void *ud)
{
    json_t *body = sbx_http_req_json(req, NULL);
    if (!body)
        return;
    json_decref(body);
    os_no_content(req);
}

void sbx_api_close(struct sbx_api *api)
{
    struct os_state *os = api->opensandbox;
    if (!os)
        return;
    os_snapshots_close(os);
    while (os->boxes) {
        struct os_box *b = os->boxes;
        os->boxes = b->next;
        /* Its record says how it ended: with the daemon. */
        if (os_box_live(b) || strcmp(b->state, "Pending") == 0)
            box_stop(b, "Terminated", "the daemon stopped: the sandbox's session ended with it");
        box_free(b);
    }
    free(os);
    api->opensandbox = NULL;
}

int sbx_api_opensandbox_routes(sbx_http_server *srv, struct sbx_api *api, sbx_err *err)
{
    if (!api->opensandbox && !(api->opensandbox = calloc(1, sizeof(*api->opensandbox))))
        return sbx_err_set(err, ENOMEM, "opensandbox");
    struct os_state *os = api->opensandbox;
    os->api = api;
    /* The sandboxes of earlier runs. */
    if (api->store && !os->boxes &&
        (sbx_store_records(api->store, OS_RECORD_SANDBOX, box_load, os, err) < 0 ||
         os_snapshots_load(os, err) < 0))
        return -1;
    static const struct {
        const char *method, *pattern;
        sbx_http_handler fn;
    } routes[] = {
        {"POST", "/v1/sandboxes", h_create},
        {"GET", "/v1/sandboxes", h_list},
        {"GET", "/v1/sandboxes/{id}", h_get},
        {"DELETE", "/v1/sandboxes/{id}", h_delete},
        {"PATCH", "/v1/sandboxes/{id}/metadata", h_metadata},
        {"POST", "/v1/sandboxes/{id}/pause", h_pause},
        {"POST", "/v1/sandboxes/{id}/resume", h_resume},
        {"POST", "/v1/sandboxes/{id}/renew-expiration", h_renew},
        {"GET", "/v1/sandboxes/{id}/endpoints/{port}", h_endpoint},
        {"POST", "/v1/metrics/events", h_metrics_event},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(routes); i++)
        if (sbx_http_route(srv, routes[i].method, routes[i].pattern, routes[i].fn, os, 0, err) < 0)
            return -1;
    if (os_execd_routes(srv, os, err) < 0 || os_interp_routes(srv, os, err) < 0 ||
        os_metrics_routes(srv, os, err) < 0 || os_proxy_routes(srv, os, err) < 0 ||
        os_snapshot_routes(srv, os, err) < 0)
        return -1;
    return os_files_routes(srv, os, err);
}
