#include "api/routes_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/digest.h"
#include "base/log.h"
#include "base/parse.h"
#include "base/time.h"
#include "workspace/path.h"

/* ---- tasks: /runtime/exec, /runtime/tasks, /execute; JSON in the original's shape ---- */

/* A Task: the original's twelve keys (its result the ExecResult's five),
 * ours added for an extended request. */
static json_t *task_json(sbx_http_request *req, const struct sbx_store_task *t, bool with_output)
{
    bool ext = sbx_api_extended(req);
    json_error_t je;
    json_t *cmd = json_loads(t->command ? t->command : "[]", 0, &je);
    json_t *o = json_pack(
        "{s:s, s:o, s:s, s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:s, s:s, s:s, s:s, s:s}", "id", t->id,
        "command", cmd ? cmd : json_array(), "backend", t->backend ? t->backend : "sandbox",
        "skill", t->skill ? t->skill : "", "skillSource", t->skill_source ? t->skill_source : "",
        "skillTrustLevel", t->skill_trust_level ? t->skill_trust_level : "", "status",
        sbx_task_status_name(t->status), "createdAt", sbx_json_time(t->created_at), "startedAt",
        sbx_json_time(t->started_at), "endedAt", sbx_json_time(t->ended_at), "error",
        t->error ? t->error : "", "tenantCode", t->tenant ? t->tenant : "", "cloneKey",
        t->clone_key ? t->clone_key : "", "cloneId", t->clone_id ? t->clone_id : "", "sessionId",
        t->session_id ? t->session_id : "");
    if (t->language)
        json_object_set_new(o, "language", json_string(t->language));
    if (t->skill_version && *t->skill_version)
        json_object_set_new(o, "skillVersion", json_string(t->skill_version));
    json_t *report = t->result ? json_loads(t->result, 0, &je) : NULL;
    if (report) {
        json_t *r = json_object();
        json_object_set(r, "exitCode", json_object_get(report, "exitCode"));
        if (with_output) {
            json_object_set_new(r, "stdout", sbx_json_text(t->stdout_data, t->stdout_len));
            json_object_set_new(r, "stderr", sbx_json_text(t->stderr_data, t->stderr_len));
        }
        json_object_set_new(r, "startedAt", sbx_json_time(t->started_at));
        json_object_set_new(r, "endedAt", sbx_json_time(t->ended_at));
        if (ext)
            json_object_set_new(r, "report", report);
        else
            json_decref(report);
        json_object_set_new(o, "result", r);
    } else {
        json_object_set_new(o, "result", json_null());
    }
    return sbx_api_shape(req, o, sbx_api_task_keys);
}

/* A synchronous exec: the answer waits for the task. */
struct exec_wait {
    struct sbx_api *api;
    sbx_http_request *req;
    char id[SBX_ID_SIZE];
    bool opensandbox; /* /execute's answer shape */
    bool submitting;  /* inside sbx_runtime_submit: its caller frees */
    bool answered;
};

static void exec_release(struct exec_wait *w)
{
    if (w->submitting)
        w->answered = true;
    else
        free(w);
}

static json_t *exec_answer(const struct sbx_store_task *t, bool opensandbox)
{
    json_error_t je;
    json_t *report = t->result ? json_loads(t->result, 0, &je) : NULL;
    json_int_t code = report ? json_integer_value(json_object_get(report, "exitCode")) : 125;
    json_t *o;
    if (opensandbox) {
        double secs = report ? json_number_value(json_object_get(report, "wallSeconds")) : 0;
        o = json_pack("{s:o, s:o, s:I, s:f}", "stdout",
                      sbx_json_text(t->stdout_data, t->stdout_len), "stderr",
                      sbx_json_text(t->stderr_data, t->stderr_len), "return_code", code,
                      "execution_time", secs);
        /* Seed 004's four keys say nothing of a task that never ran (its
         * sandbox's setup failed, a timeout, a cancel): the reason, then,
         * as "error", else a failed setup would read as an empty 125. */
        if (o && t->status != SBX_TASK_SUCCEEDED && t->error && t->error[0])
            json_object_set_new(o, "error", json_string(t->error));
        json_decref(report);
    } else {
        o = json_pack("{s:s, s:I, s:o, s:o, s:o, s:o, s:s, s:s, s:o}", "taskId", t->id, "exitCode",
                      code, "stdout", sbx_json_text(t->stdout_data, t->stdout_len), "stderr",
                      sbx_json_text(t->stderr_data, t->stderr_len), "startedAt",
                      sbx_json_time(t->started_at), "endedAt", sbx_json_time(t->ended_at), "status",
                      sbx_task_status_name(t->status), "error", t->error ? t->error : "", "report",
                      report ? report : json_null());
    }
    return o;
}

/* t is the final record as the runtime stored it (outputs included). */
static void exec_done(void *ud, const struct sbx_store_task *t)
{
    struct exec_wait *w = ud;
    json_t *o = exec_answer(t, w->opensandbox);
    sbx_http_respond_json(w->req, 200,
                          w->opensandbox ? o : sbx_api_shape(w->req, o, sbx_api_result_keys));
    exec_release(w);
}

static void exec_cancel(sbx_http_request *req, void *ud)
{
    struct exec_wait *w = ud;
    /* The client left: the task goes on to its end, recorded as usual. */
    sbx_runtime_forget(w->api->rt, w->id);
    free(w);
}

/* An Idempotency-Key of the request: the key, and the digest of what it
 * asked (method, path and body). */
struct idem {
    const char *key; /* NULL: none */
    char digest[SBX_SHA256_HEX_SIZE];
};

static int64_t idem_not_before(const struct sbx_api *api)
{
    double ttl = api->idempotency_ttl_s > 0 ? api->idempotency_ttl_s : 86400;
    return sbx_now_ms() - (int64_t)(ttl * 1000);
}

/* The key's task was made by the same request: answer as that request was
 * answered (a replay says so in Idempotent-Replayed). */
static void idem_replay(sbx_http_request *req, struct sbx_api *api, const char *id, bool sync)
{
    sbx_err e = {0};
    struct sbx_store_task *t = NULL;
    if (sbx_store_task_get(api->store, id, NULL, sync ? SBX_STORE_WITH_OUTPUT : 0, &t, &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    sbx_http_add_header(req, "Idempotent-Replayed", "true");
    if (!sync)
        sbx_http_respond_json(req, sbx_api_extended(req) ? 202 : 200, task_json(req, t, false));
    else if (sbx_task_status_final(t->status))
        sbx_http_respond_json(req, 200,
                              sbx_api_shape(req, exec_answer(t, false), sbx_api_result_keys));
    else
        sbx_http_respond_error(req, SBX_HTTP_CONFLICT,
                               "the task %s of this Idempotency-Key is still %s: follow it with "
                               "GET /runtime/tasks/%s",
                               id, sbx_task_status_name(t->status), id);
    sbx_store_task_free(t);
}

/* Before submitting: 1 when the request was answered from its key. */
static int idem_check(sbx_http_request *req, struct sbx_api *api, const char *tenant,
                      struct idem *k, bool sync)
{
    k->key = sbx_http_req_header(req, "Idempotency-Key");
    if (!k->key)
        return 0;
    size_t n = strlen(k->key);
    bool ok = n >= 1 && n <= 255;
    for (size_t i = 0; ok && i < n; i++)
        ok = k->key[i] >= 0x20 && k->key[i] < 0x7f;
    if (!ok)
        return sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST,
                                      "Idempotency-Key must be 1 to 255 printable ASCII "
                                      "characters"),
               1;
    size_t blen;
    const char *body = sbx_http_req_body(req, &blen);
    const char *path = sbx_http_req_path(req);
    size_t plen = strlen(path);
    char *buf = malloc(plen + 1 + blen);
    sbx_err e = {0};
    if (!buf)
        return sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory"), 1;
    memcpy(buf, path, plen);
    buf[plen] = '\n';
    memcpy(buf + plen + 1, body, blen);
    int rc = sbx_sha256_hex(buf, plen + 1 + blen, k->digest, &e);
    free(buf);
    char id[SBX_ID_SIZE], digest[SBX_SHA256_HEX_SIZE];
    if (rc == 0)
        rc = sbx_store_idem_get(api->store, tenant, k->key, idem_not_before(api), id, sizeof(id),
                                digest, sizeof(digest), &e);
    if (rc < 0)
        return sbx_http_respond_err(req, &e), 1;
    if (rc == 0)
        return 0;
    if (strcmp(digest, k->digest) != 0)
        return sbx_http_respond_error(req, SBX_HTTP_CONFLICT,
                                      "Idempotency-Key '%.64s' was used for another request",
                                      k->key),
               1;
    idem_replay(req, api, id, sync);
    return 1;
}

static void idem_record(sbx_http_request *req, struct sbx_api *api, const char *tenant,
                        const struct idem *k, const char *id)
{
    sbx_err e = {0};
    if (!k || !k->key ||
        sbx_store_idem_put(api->store, tenant, k->key, k->digest, id, sbx_now_ms(),
                           idem_not_before(api), &e) == 0)
        return;
    /* The task is made all the same; a retry with the key makes another. */
    char msg[600];
    sbx_log(SBX_LOG_WARN, "idempotency key not stored task=%s error=%s", id,
            sbx_err_format(&e, msg, sizeof(msg)));
}

static void submit(sbx_http_request *req, struct sbx_api *api, struct parsed_task *p, bool sync,
                   bool opensandbox, const struct idem *k)
{
    sbx_err e = {0};
    char id[SBX_ID_SIZE];
    struct exec_wait *w = sync ? calloc(1, sizeof(*w)) : NULL;
    if (sync && !w)
        return (void)sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
    if (w) {
        w->api = api, w->req = req, w->opensandbox = opensandbox, w->submitting = true;
        sbx_http_req_defer(req, exec_cancel, w);
    }
    int rc = sbx_runtime_submit(api->rt, &p->r, sync ? exec_done : NULL, w, id, &e);
    /* A full queue's refusals come at the highest rate there is: counted,
     * and audited as one record a second (sbx_api_audit_refusals). */
    if (rc < 0 && e.errnum == EAGAIN) {
        if (!api->refused_busy++)
            api->refused_since = sbx_now_ms();
    } else {
        api_audit(req, api, rc < 0 ? "task_refused" : "task_submit", rc < 0 ? e.msg : id);
    }
    if (rc == 0)
        idem_record(req, api, p->r.clone.tenant, k, id);
    if (w) {
        w->submitting = false;
        /* A task that could not even start was answered inside submit. */
        if (rc < 0 || w->answered) {
            if (rc < 0)
                sbx_http_respond_err(req, &e);
            free(w);
            return;
        }
        memcpy(w->id, id, SBX_ID_SIZE);
        return;
    }
    if (rc < 0)
        return (void)sbx_http_respond_err(req, &e);
    struct sbx_store_task *t = NULL;
    if (sbx_store_task_get(api->store, id, NULL, 0, &t, &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    /* The task as it was accepted (the original's contract: a new task is
     * pending), though the queue may have started it already; GET says
     * what it is now (one that already ended says so). 202 is ours (accepted, not done); the
     * original answered 200. */
    json_t *o = task_json(req, t, false);
    if (t->status == SBX_TASK_RUNNING) {
        json_object_set_new(o, "status", json_string("pending"));
        json_object_set_new(o, "startedAt", json_null());
    }
    sbx_http_respond_json(req, sbx_api_extended(req) ? 202 : 200, o);
    sbx_store_task_free(t);
}

static void h_exec_or_task(sbx_http_request *req, void *ud, bool sync)
{
    struct sbx_api *api = ud;
    json_t *body = sbx_http_req_json(req, task_request_fields);
    if (!body)
        return;
    struct parsed_task p;
    sbx_err e = {0};
    struct idem k = {0};
    if (task_request_parse(req, api, body, &p, &e) < 0 || api_skill_task(req, api, &p, &e) < 0)
        sbx_http_respond_err(req, &e);
    else if (idem_check(req, api, p.r.clone.tenant, &k, sync) == 0)
        submit(req, api, &p, sync, false, &k);
    task_request_free(&p);
    json_decref(body);
}

void h_exec(sbx_http_request *req, void *ud)
{
    h_exec_or_task(req, ud, true);
}

void h_task_create(sbx_http_request *req, void *ud)
{
    h_exec_or_task(req, ud, false);
}

/* POST /execute: {code, env (an environment name), timeout, memory_limit,
 * pids_limit, capabilities} -> {stdout, stderr, return_code, execution_time}. */
void h_execute(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    static const char *const fields[] = {"code",       "env",          "timeout", "memory_limit",
                                         "pids_limit", "capabilities", "stdin",   NULL};
    json_t *body = sbx_http_req_json(req, fields);
    if (!body)
        return;
    struct parsed_task p = {.r = {.net = -1, .net_default = -1}};
    sbx_err e = {0};
    json_t *code = json_object_get(body, "code"), *env = json_object_get(body, "env");
    json_t *caps = json_object_get(body, "capabilities");
    json_t *add = caps ? json_object_get(caps, "add") : NULL;
    json_t *mem = json_object_get(body, "memory_limit");
    uint64_t bytes = 0;
    if (!json_is_string(code))
        sbx_err_set(&e, EINVAL, "code must be a string");
    else if (env && !json_is_string(env))
        sbx_err_set(&e, EINVAL, "env must be the name of an environment");
    else if (caps && !json_is_object(caps))
        sbx_err_set(&e, EINVAL, "capabilities must be an object");
    else if (add && !json_is_array(add))
        sbx_err_set(&e, EINVAL, "capabilities.add must be a list of capability names");
    else if (add && json_array_size(add) > 0)
        sbx_err_set(&e, EINVAL,
                    "capabilities.add: adding %.64s is refused (a task holds no capability; "
                    "drop: [ALL] is accepted)",
                    json_is_string(json_array_get(add, 0))
                        ? json_string_value(json_array_get(add, 0))
                        : "capabilities");
    else if (mem &&
             !(json_is_string(mem) && sbx_parse_size(json_string_value(mem), &bytes, &e) == 0))
        sbx_err_set(&e, EINVAL, "memory_limit: '%s' is not a size like 256m or 1g",
                    json_is_string(mem) ? json_string_value(mem) : "?");
    if (!e.msg[0])
        api_request_clone(req, api, NULL, &p.r.clone, &e);
    if (e.msg[0]) {
        json_decref(body);
        sbx_http_respond_err(req, &e);
        return;
    }
    static const struct sbx_limit_names names = {"memory_limit", "pids_limit", "cpu", "timeout"};
    json_t *t = json_object_get(body, "timeout"), *pl = json_object_get(body, "pids_limit");
    if (t && !json_is_null(t) && (!json_is_number(t) || json_number_value(t) <= 0))
        sbx_err_set(&e, EINVAL, "timeout must be a positive number of seconds");
    else if (pl && !json_is_null(pl) && (!json_is_integer(pl) || json_integer_value(pl) < 1))
        sbx_err_set(&e, EINVAL, "pids_limit must be a positive integer");
    else if (mem && !bytes)
        sbx_err_set(&e, EINVAL, "memory_limit must be a positive size");
    p.r.memory_bytes = bytes;
    if (t && !json_is_null(t))
        p.r.timeout_s = json_number_value(t);
    if (pl && !json_is_null(pl))
        p.r.pids = (uint64_t)json_integer_value(pl);
    if (e.msg[0] || sbx_runtime_check_limits(api_set(api), &p.r, &names, &e) < 0) {
        json_decref(body);
        sbx_http_respond_err(req, &e);
        return;
    }
    p.r.language = env ? json_string_value(env) : "python";
    p.r.code = json_string_value(code);
    if (api->skills && sbx_skills_check_command(api->skills, NULL, p.r.code, &e) < 0) {
        json_decref(body);
        sbx_http_respond_err(req, &e);
        return;
    }
    json_t *in = json_object_get(body, "stdin");
    if (json_is_string(in))
        p.r.stdin_data = json_string_value(in), p.r.stdin_len = json_string_length(in);
    submit(req, api, &p, true, true, NULL);
    json_decref(body);
}

/* The task id names, if the request's token may see it (a tenant token
 * sees its tenant's only). Otherwise answers and returns -1. */
static int find_task(sbx_http_request *req, struct sbx_api *api, const char *id, unsigned flags,
                     struct sbx_store_task **t)
{
    const sbx_identity *who = sbx_http_req_identity(req);
    sbx_err e = {0};
    if (sbx_store_task_get(api->store, id, who ? who->tenant : NULL, flags, t, &e) == 0)
        return 0;
    if (e.errnum == ENOENT)
        sbx_http_respond_error(req, SBX_HTTP_NOT_FOUND, "no task %s", id);
    else
        sbx_http_respond_err(req, &e);
    return -1;
}

void h_task_get(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    struct sbx_store_task *t = NULL;
    if (find_task(req, api, sbx_http_req_param(req, "id"), SBX_STORE_WITH_OUTPUT, &t) < 0)
        return;
    sbx_http_respond_json(req, 200, task_json(req, t, true));
    sbx_store_task_free(t);
}

void h_task_cancel(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    const char *id = sbx_http_req_param(req, "id");
    struct sbx_store_task *t = NULL;
    sbx_err e = {0};
    if (find_task(req, api, id, 0, &t) < 0)
        return;
    bool final = sbx_task_status_final(t->status);
    sbx_store_task_free(t);
    if (final)
        return (void)sbx_http_respond_error(req, SBX_HTTP_CONFLICT, "task %s has already ended",
                                            id);
    api_audit(req, api, "task_cancel", id);
    if (sbx_runtime_cancel(api->rt, id, &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    /* A running task is recorded canceled once its tree is dead; answer with
     * what the store says now. */
    if (sbx_store_task_get(api->store, id, NULL, SBX_STORE_WITH_OUTPUT, &t, &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    sbx_http_respond_json(req, 200, task_json(req, t, true));
    sbx_store_task_free(t);
}

/* POST /runtime/tasks/{id}/network {default, allow, deny}: a running task's
 * egress policy, for its new connections from now on; a tenant token may
 * only narrow. */
void h_task_network(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    static const char *const fields[] = {"default", "allow", "deny", NULL};
    const char *id = sbx_http_req_param(req, "id");
    struct sbx_store_task *t = NULL;
    sbx_err e = {0};
    if (find_task(req, api, id, 0, &t) < 0)
        return;
    sbx_store_task_free(t);
    json_t *body = sbx_http_req_json(req, fields);
    if (!body)
        return;
    struct parsed_task p = {.r = {.net = -1, .net_default = -1}};
    if (task_request_network(req, body, &p, &e) < 0)
        sbx_http_respond_err(req, &e);
    else if (api_audit(req, api, "task_network", id),
             sbx_runtime_set_network(api->rt, id, p.r.net_default, p.r.allow, p.r.deny, &e) < 0)
        /* The store knows the task: one the runtime does not is no longer
         * (or not yet) running, a conflict with its state. */
        e.errnum == ENOENT ? (void)sbx_http_respond_error(req, SBX_HTTP_CONFLICT, "%s", e.msg)
                           : (void)sbx_http_respond_err(req, &e);
    else
        sbx_http_respond_json(req, 200, json_pack("{s:b, s:s}", "ok", 1, "taskId", id));
    task_request_free(&p);
    json_decref(body);
}

void h_task_list(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    const sbx_identity *who = sbx_http_req_identity(req);
    struct sbx_store_task_filter f = {.limit = 50};
    sbx_err e = {0};
    const char *status = sbx_http_req_query(req, "status");
    const char *limit = sbx_http_req_query(req, "limit");
    uint64_t n;
    if (status && sbx_task_status_parse(status, &f.status, &e) < 0)
        return (void)sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "status: %s", e.msg);
    if (limit) {
        if (sbx_parse_uint(limit, 1, SBX_STORE_LIST_MAX, &n, &e) < 0)
            return (void)sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "limit: %s", e.msg);
        f.limit = (unsigned)n;
    }
    f.cursor = sbx_http_req_query(req, "cursor");
    f.session_id = sbx_http_req_query(req, "sessionID");
    if (f.session_id &&
        sbx_ws_segment_check("sessionID", f.session_id, strlen(f.session_id), &e) < 0) {
        sbx_http_respond_err(req, &e);
        return;
    }
    const char *tenant =
        who && who->tenant ? who->tenant : sbx_http_req_header(req, "X-Tenant-Code");
    if (tenant && sbx_ws_segment_check("tenantCode", tenant, strlen(tenant), &e) < 0) {
        sbx_http_respond_err(req, &e);
        return;
    }
    f.tenant = tenant;
    struct sbx_store_task_page page = {0};
    if (sbx_store_task_list(api->store, &f, &page, &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    json_t *arr = json_array();
    bool ext = sbx_api_extended(req);
    for (size_t i = 0; i < page.n; i++) {
        /* The original's list carries each result's outputs; ours (a page
         * of summaries) does not: GET /runtime/tasks/{id} has them. */
        struct sbx_store_task *full = NULL;
        if (!ext && page.tasks[i]->result &&
            sbx_store_task_get(api->store, page.tasks[i]->id, NULL, SBX_STORE_WITH_OUTPUT, &full,
                               NULL) == 0) {
            json_array_append_new(arr, task_json(req, full, true));
            sbx_store_task_free(full);
        } else {
            json_array_append_new(arr, task_json(req, page.tasks[i], false));
        }
    }
    json_t *o = json_pack("{s:o, s:s}", "tasks", arr, "nextCursor", page.next_cursor);
    sbx_store_task_page_free(&page);
    /* The original answers a bare array; the page object with its cursor is
     * ours (extended), and ?format=array keeps the array there too. */
    const char *fmt = sbx_http_req_query(req, "format");
    if (!sbx_api_extended(req) || (fmt && strcmp(fmt, "array") == 0)) {
        json_t *a = json_incref(json_object_get(o, "tasks"));
        json_decref(o);
        o = a;
    }
    sbx_http_respond_json(req, 200, o);
}
