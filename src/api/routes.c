#include "api/routes.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/json.h"
#include "api/sse.h"
#include "base/log.h"
#include "base/parse.h"
#include "workspace/files.h"
#include "workspace/path.h"

/* ---- the clone a request names ---- */

/* Headers, then query, then body fields, then the daemon's defaults. */
static int request_clone(sbx_http_request *req, struct sbx_api *api, json_t *body,
                         struct sbx_clone *c, sbx_err *err)
{
    static const struct {
        const char *header, *field;
        size_t off;
    } parts[] = {
        {"X-Tenant-Code", "tenantCode", offsetof(struct sbx_clone, tenant)},
        {"X-Clone-Key", "cloneKey", offsetof(struct sbx_clone, key)},
        {"X-Clone-Id", "cloneId", offsetof(struct sbx_clone, id)},
    };
    const char *defaults[] = {api->set.tenant_code, api->set.clone_key, api->set.clone_id};
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
static void audit(sbx_http_request *req, struct sbx_api *api, const char *action,
                  const char *target)
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

/* ---- task JSON in the original's shape ---- */

static json_t *task_json(const struct sbx_store_task *t, bool with_output)
{
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
        json_object_set_new(r, "report", report);
        json_object_set_new(o, "result", r);
    } else {
        json_object_set_new(o, "result", json_null());
    }
    return o;
}

/* ---- request bodies ---- */

static const char *const task_fields[] = {
    "command", "env",  "timeoutSeconds", "language",  "code",       "stdin",    "memoryMB",
    "pids",    "cpu",  "sessionID",      "sessionId", "tenantCode", "cloneKey", "cloneId",
    "skill",   "args", "network",        NULL};

struct parsed_task {
    struct sbx_task_request r;
    const char **argv;
    const char **env;
    const char **rules[2]; /* allow, deny */
};

static void parsed_free(struct parsed_task *p)
{
    free(p->argv);
    free(p->env);
    free(p->rules[0]);
    free(p->rules[1]);
}

/* "network": {"policy", "default", "allow", "deny"}. An operator may choose
 * anything; a tenant-bound token may only narrow: no host policy, no allow
 * rules (EACCES), but none instead of proxy, default deny and deny rules. */
static int parse_network(sbx_http_request *req, json_t *net, struct parsed_task *p, sbx_err *err)
{
    if (!net || json_is_null(net))
        return 0;
    if (!json_is_object(net))
        return sbx_err_set(err, EINVAL, "network must be an object");
    static const char *const fields[] = {"policy", "default", "allow", "deny", NULL};
    if (sbx_json_check_fields(net, "network", fields, err) < 0)
        return -1;
    const sbx_identity *who = sbx_http_req_identity(req);
    bool tenant = who && who->tenant;
    json_t *pol = json_object_get(net, "policy"), *def = json_object_get(net, "default");
    if (pol) {
        enum sbx_net_policy np;
        if (!json_is_string(pol) || sbx_net_policy_parse(json_string_value(pol), &np, err) < 0)
            return sbx_err_set(err, EINVAL, "network.policy must be none, proxy or host");
        if (np == SBX_NET_HOST && tenant)
            return sbx_err_set(err, EACCES, "network.policy host needs an operator token");
        p->r.net = (int)np;
    }
    if (def) {
        const char *d = json_is_string(def) ? json_string_value(def) : "";
        if (strcmp(d, "allow") != 0 && strcmp(d, "deny") != 0)
            return sbx_err_set(err, EINVAL, "network.default must be allow or deny");
        if (strcmp(d, "allow") == 0 && tenant)
            return sbx_err_set(err, EACCES, "network.default allow needs an operator token");
        p->r.net_default = strcmp(d, "deny") == 0 ? SBX_DEFAULT_DENY : SBX_DEFAULT_ALLOW;
    }
    static const char *const names[2] = {"allow", "deny"};
    for (int i = 0; i < 2; i++) {
        json_t *list = json_object_get(net, names[i]);
        if (!list || json_is_null(list))
            continue;
        if (!json_is_array(list) || json_array_size(list) > 256)
            return sbx_err_set(err, EINVAL, "network.%s must be a list of rules", names[i]);
        if (i == 0 && tenant && json_array_size(list))
            return sbx_err_set(err, EACCES, "network.allow needs an operator token");
        p->rules[i] = calloc(json_array_size(list) + 1, sizeof(char *));
        if (!p->rules[i])
            return sbx_err_set(err, ENOMEM, "network");
        for (size_t k = 0; k < json_array_size(list); k++) {
            json_t *r = json_array_get(list, k);
            if (!json_is_string(r) || strlen(json_string_value(r)) != json_string_length(r))
                return sbx_err_set(err, EINVAL, "network.%s[%zu] must be a string", names[i], k);
            p->rules[i][k] = json_string_value(r);
        }
    }
    p->r.allow = p->rules[0];
    p->r.deny = p->rules[1];
    return 0;
}

/* The fields a request shape names a task's limits by, for the messages. */
struct sbx_limit_names {
    const char *memory, *pids, *cpu, *timeout;
};

/* A task's limits (0: the default) against the daemon's maxima, and the
 * least memory and cpu a sandbox can run with. names: NULL for /runtime's
 * (memoryMB, pids, cpu, timeoutSeconds). */
static int sbx_task_limits_check(const struct sbx_task_request *r, const struct sbx_limits *max,
                                 const struct sbx_limit_names *names, sbx_err *err)
{
    static const struct sbx_limit_names runtime_names = {"memoryMB", "pids", "cpu",
                                                         "timeoutSeconds"};
    const struct sbx_limit_names *n = names ? names : &runtime_names;
    double mib = (double)r->memory_bytes / (1 << 20);
    if (r->memory_bytes && r->memory_bytes < (8u << 20))
        return sbx_err_set(err, EINVAL, "%s %g MiB is below the minimum 8 MiB", n->memory, mib);
    if (r->memory_bytes > max->memory_bytes)
        return sbx_err_set(err, EINVAL, "%s %g MiB is above the maximum %llu MiB", n->memory, mib,
                           (unsigned long long)(max->memory_bytes >> 20));
    if (r->pids > max->pids)
        return sbx_err_set(err, EINVAL, "%s %llu is above the maximum %llu", n->pids,
                           (unsigned long long)r->pids, (unsigned long long)max->pids);
    if (r->cpu_cores && r->cpu_cores < 0.01)
        return sbx_err_set(err, EINVAL, "%s %g is below the minimum 0.01", n->cpu, r->cpu_cores);
    if (r->cpu_cores > max->cpu_cores)
        return sbx_err_set(err, EINVAL, "%s %g is above the maximum %g", n->cpu, r->cpu_cores,
                           max->cpu_cores);
    if (r->timeout_s > max->timeout_s)
        return sbx_err_set(err, EINVAL, "%s %g is above the maximum %g", n->timeout, r->timeout_s,
                           max->timeout_s);
    return 0;
}

/* v, a count or a size from JSON, as an integer: past the largest one, the
 * largest (which no maximum reaches), never the undefined conversion. */
static uint64_t json_u64(double v)
{
    return v >= 0x1p64 ? UINT64_MAX : (uint64_t)v;
}

static int number_field(json_t *body, const char *name, double *out, sbx_err *err)
{
    json_t *v = json_object_get(body, name);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v) || json_number_value(v) <= 0)
        return sbx_err_set(err, EINVAL, "%s must be a positive number", name);
    *out = json_number_value(v);
    return 0;
}

/* command | language+code, env, stdin, limits, session, clone. */
static int parse_task(sbx_http_request *req, struct sbx_api *api, json_t *body,
                      struct parsed_task *p, sbx_err *err)
{
    memset(p, 0, sizeof(*p));
    p->r.net = p->r.net_default = -1;
    if (request_clone(req, api, body, &p->r.clone, err) < 0 ||
        parse_network(req, json_object_get(body, "network"), p, err) < 0)
        return -1;
    json_t *cmd = json_object_get(body, "command");
    json_t *lang = json_object_get(body, "language");
    json_t *code = json_object_get(body, "code");
    if (json_object_get(body, "skill"))
        return sbx_err_set(err, EINVAL, "skill: skills are not available in this daemon yet");
    if (cmd && (lang || code))
        return sbx_err_set(err, EINVAL, "give either command or language and code, not both");
    if (cmd) {
        if (!json_is_array(cmd) || json_array_size(cmd) == 0 || json_array_size(cmd) > 4096)
            return sbx_err_set(err, EINVAL, "command must be a non-empty array of strings");
        p->argv = calloc(json_array_size(cmd) + 1, sizeof(char *));
        if (!p->argv)
            return sbx_err_set(err, ENOMEM, "command");
        for (size_t i = 0; i < json_array_size(cmd); i++) {
            json_t *a = json_array_get(cmd, i);
            if (!json_is_string(a) || strlen(json_string_value(a)) != json_string_length(a))
                return sbx_err_set(err, EINVAL, "command[%zu] must be a string without NUL", i);
            p->argv[i] = json_string_value(a);
        }
        p->r.argv = p->argv;
    } else if (lang || code) {
        if (!json_is_string(lang) || !json_is_string(code))
            return sbx_err_set(err, EINVAL, "language and code must both be strings");
        if (strlen(json_string_value(code)) != json_string_length(code))
            return sbx_err_set(err, EINVAL, "code must not hold NUL");
        p->r.language = json_string_value(lang);
        p->r.code = json_string_value(code);
    } else {
        return sbx_err_set(err, EINVAL, "command (or language and code) is required");
    }
    json_t *env = json_object_get(body, "env");
    if (env && !json_is_null(env)) {
        if (!json_is_object(env))
            return sbx_err_set(err, EINVAL, "env must be an object of strings");
        if (json_object_size(env) > 256)
            return sbx_err_set(err, EINVAL, "env has %zu entries (at most 256)",
                               json_object_size(env));
        p->env = calloc(json_object_size(env) + 1, sizeof(char *));
        if (!p->env)
            return sbx_err_set(err, ENOMEM, "env");
        size_t n = 0;
        const char *k;
        json_t *v;
        json_object_foreach(env, k, v)
        {
            if (!json_is_string(v))
                return sbx_err_set(err, EINVAL, "env.%s must be a string", k);
            char *kv;
            if (asprintf(&kv, "%s=%s", k, json_string_value(v)) < 0)
                return sbx_err_set(err, ENOMEM, "env");
            p->env[n++] = kv; /* freed by free_env_strings */
            if (strncmp(kv, "CLAW_", 5) == 0)
                return sbx_err_set(err, EINVAL, "env.%s: CLAW_ settings are not for tasks", k);
            if (sbx_parse_env_assignment(kv, err) < 0)
                return -1;
        }
        p->r.env = p->env;
    }
    json_t *in = json_object_get(body, "stdin");
    if (in && !json_is_null(in)) {
        if (!json_is_string(in))
            return sbx_err_set(err, EINVAL, "stdin must be a string");
        p->r.stdin_data = json_string_value(in);
        p->r.stdin_len = json_string_length(in);
    }
    double mem = 0, pids = 0;
    if (number_field(body, "timeoutSeconds", &p->r.timeout_s, err) < 0 ||
        number_field(body, "memoryMB", &mem, err) < 0 ||
        number_field(body, "pids", &pids, err) < 0 ||
        number_field(body, "cpu", &p->r.cpu_cores, err) < 0)
        return -1;
    p->r.memory_bytes = json_u64(mem * (1 << 20));
    p->r.pids = json_u64(pids);
    if (pids != floor(pids))
        return sbx_err_set(err, EINVAL, "pids must be an integer");
    if (sbx_task_limits_check(&p->r, &api->set.max, NULL, err) < 0)
        return -1;
    json_t *s = json_object_get(body, "sessionID");
    if (!s)
        s = json_object_get(body, "sessionId");
    if (s && !json_is_null(s)) {
        if (!json_is_string(s) ||
            sbx_ws_segment_check("sessionID", json_string_value(s), json_string_length(s), err) < 0)
            return json_is_string(s) ? -1 : sbx_err_set(err, EINVAL, "sessionID must be a string");
        p->r.session = json_string_value(s);
    }
    return 0;
}

static void free_env_strings(struct parsed_task *p)
{
    for (size_t i = 0; p->env && p->env[i]; i++)
        free((char *)p->env[i]);
}

/* ---- handlers ---- */

static void h_healthz(sbx_http_request *req, void *ud)
{
    sbx_http_respond_json(req, 200, json_pack("{s:b}", "ok", 1));
}

static void h_readyz(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    unsigned running, queued;
    sbx_runtime_counts(api->rt, &running, &queued);
    const char *status = !api->ready ? "created" : running ? "busy" : "ready";
    sbx_http_respond_json(req, api->ready ? 200 : 503,
                          json_pack("{s:b, s:s}", "ok", api->ready, "status", status));
}

static void h_status(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    struct sbx_clone c;
    sbx_err e = {0};
    if (request_clone(req, api, NULL, &c, &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    unsigned running, queued;
    /* A tenant token learns nothing of other tenants' load. */
    const sbx_identity *who = sbx_http_req_identity(req);
    if (who && who->tenant)
        sbx_runtime_tenant_counts(api->rt, c.tenant, &running, &queued);
    else
        sbx_runtime_counts(api->rt, &running, &queued);
    char *ws = sbx_ws_dir(api->set.workspace_root, c.tenant, c.key, c.id, NULL);
    const char *session = sbx_http_req_query(req, "sessionID");
    if (session && sbx_ws_segment_check("sessionID", session, strlen(session), &e) < 0) {
        free(ws);
        sbx_http_respond_err(req, &e);
        return;
    }
    sbx_http_respond_json(req, 200,
                          json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:o, s:i, s:i}",
                                    "runtimeId", sbx_runtime_default_session(api->rt), "tenantCode",
                                    c.tenant, "cloneId", c.id, "cloneKey", c.key, "sessionId",
                                    session ? session : sbx_runtime_default_session(api->rt),
                                    "workspace", ws ? ws : "", "status", running ? "busy" : "ready",
                                    "startedAt", sbx_json_time(api->started_at), "lastEventAt",
                                    json_null(), "running", running, "queued", queued));
    free(ws);
}

/* The answer of a start (once the session is ready) or a stop, with its
 * event on the session's stream unless the runtime sent it (a session that
 * became ready says so once, whoever waited for it). */
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
    sbx_http_respond_json(req, 200,
                          json_pack("{s:b, s:s, s:s}", "ok", 1, "status",
                                    start ? "ready" : "stopped", "sessionId", session));
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

static void h_start_stop(sbx_http_request *req, void *ud, bool start)
{
    struct sbx_api *api = ud;
    static const char *const fields[] = {"sessionID", "sessionId", "tenantCode",
                                         "cloneKey",  "cloneId",   NULL};
    json_t *body = sbx_http_req_json(req, fields);
    if (!body)
        return;
    struct sbx_clone c;
    sbx_err e = {0};
    if (request_clone(req, api, body, &c, &e) < 0) {
        json_decref(body);
        return (void)sbx_http_respond_err(req, &e);
    }
    json_t *s = json_object_get(body, "sessionID");
    if (!s)
        s = json_object_get(body, "sessionId");
    char session[SBX_SEGMENT_MAX + 1];
    if (s && (!json_is_string(s) || sbx_ws_segment_check("sessionID", json_string_value(s),
                                                         json_string_length(s), &e) < 0)) {
        json_decref(body);
        {
            (void)sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "%s",
                                         e.msg[0] ? e.msg : "sessionID must be a string");
            return;
        }
    }
    if (s) {
        snprintf(session, sizeof(session), "%s", json_string_value(s));
    } else if (start) {
        char id[SBX_ID_SIZE];
        if (sbx_id_new(id, &e) < 0) {
            json_decref(body);
            sbx_http_respond_err(req, &e);
            return;
        }
        snprintf(session, sizeof(session), "%s", id);
    } else {
        snprintf(session, sizeof(session), "%s", sbx_runtime_default_session(api->rt));
    }
    json_decref(body);
    audit(req, api, start ? "session_start" : "session_stop", session);
    if (!start) {
        sbx_runtime_session_stop(api->rt, c.tenant, session);
        session_answer(req, api, &c, session, false, true);
        return;
    }
    /* A live sandbox for the session: its tasks share /tmp, processes, the
     * workspace and the egress until stop or the idle timeout. The answer
     * waits until it is set up, without holding the loop. */
    struct start_wait *w = calloc(1, sizeof(*w));
    if (!w) {
        sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
        return;
    }
    *w = (struct start_wait){.req = req, .api = api, .clone = c};
    snprintf(w->session, sizeof(w->session), "%s", session);
    int rc = sbx_runtime_session_start(api->rt, &c, session, start_ready, w, &e);
    if (rc == 0) {
        sbx_http_req_defer(req, start_cancel, w);
        return;
    }
    free(w);
    if (rc < 0)
        sbx_http_respond_err(req, &e);
    else
        session_answer(req, api, &c, session, true, true);
}

static void h_start(sbx_http_request *req, void *ud)
{
    h_start_stop(req, ud, true);
}

static void h_stop(sbx_http_request *req, void *ud)
{
    h_start_stop(req, ud, false);
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

static void exec_done(void *ud, const char *task_id)
{
    struct exec_wait *w = ud;
    struct sbx_store_task *t = NULL;
    sbx_err e = {0};
    if (sbx_store_task_get(w->api->store, task_id, NULL, SBX_STORE_WITH_OUTPUT, &t, &e) < 0) {
        sbx_http_respond_err(w->req, &e);
        exec_release(w);
        return;
    }
    json_error_t je;
    json_t *report = t->result ? json_loads(t->result, 0, &je) : NULL;
    json_int_t code = report ? json_integer_value(json_object_get(report, "exitCode")) : 125;
    json_t *o;
    if (w->opensandbox) {
        double secs = report ? json_number_value(json_object_get(report, "wallSeconds")) : 0;
        o = json_pack("{s:o, s:o, s:I, s:f}", "stdout",
                      sbx_json_text(t->stdout_data, t->stdout_len), "stderr",
                      sbx_json_text(t->stderr_data, t->stderr_len), "return_code", code,
                      "execution_time", secs);
        json_decref(report);
    } else {
        o = json_pack("{s:s, s:I, s:o, s:o, s:o, s:o, s:s, s:s, s:o}", "taskId", t->id, "exitCode",
                      code, "stdout", sbx_json_text(t->stdout_data, t->stdout_len), "stderr",
                      sbx_json_text(t->stderr_data, t->stderr_len), "startedAt",
                      sbx_json_time(t->started_at), "endedAt", sbx_json_time(t->ended_at), "status",
                      sbx_task_status_name(t->status), "error", t->error ? t->error : "", "report",
                      report ? report : json_null());
    }
    sbx_store_task_free(t);
    sbx_http_respond_json(w->req, 200, o);
    exec_release(w);
}

static void exec_cancel(sbx_http_request *req, void *ud)
{
    struct exec_wait *w = ud;
    /* The client left: the task goes on to its end, recorded as usual. */
    sbx_runtime_forget(w->api->rt, w->id);
    free(w);
}

static void submit(sbx_http_request *req, struct sbx_api *api, struct parsed_task *p, bool sync,
                   bool opensandbox)
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
    audit(req, api, rc < 0 ? "task_refused" : "task_submit", rc < 0 ? e.msg : id);
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
    sbx_http_respond_json(req, 202, task_json(t, false));
    sbx_store_task_free(t);
}

static void h_exec_or_task(sbx_http_request *req, void *ud, bool sync)
{
    struct sbx_api *api = ud;
    json_t *body = sbx_http_req_json(req, task_fields);
    if (!body)
        return;
    struct parsed_task p;
    sbx_err e = {0};
    if (parse_task(req, api, body, &p, &e) < 0)
        sbx_http_respond_err(req, &e);
    else
        submit(req, api, &p, sync, false);
    free_env_strings(&p);
    parsed_free(&p);
    json_decref(body);
}

static void h_exec(sbx_http_request *req, void *ud)
{
    h_exec_or_task(req, ud, true);
}

static void h_task_create(sbx_http_request *req, void *ud)
{
    h_exec_or_task(req, ud, false);
}

/* POST /execute: {code, env (an environment name), timeout, memory_limit,
 * pids_limit, capabilities} -> {stdout, stderr, return_code, execution_time}. */
static void h_execute(sbx_http_request *req, void *ud)
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
    else if (add && (!json_is_array(add) || json_array_size(add) > 0))
        sbx_err_set(&e, EINVAL, "capabilities.add: adding capabilities is refused");
    else if (mem &&
             !(json_is_string(mem) && sbx_parse_size(json_string_value(mem), &bytes, &e) == 0))
        sbx_err_set(&e, EINVAL, "memory_limit: '%s' is not a size like 256m or 1g",
                    json_is_string(mem) ? json_string_value(mem) : "?");
    if (!e.msg[0])
        request_clone(req, api, NULL, &p.r.clone, &e);
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
    if (e.msg[0] || sbx_task_limits_check(&p.r, &api->set.max, &names, &e) < 0) {
        json_decref(body);
        sbx_http_respond_err(req, &e);
        return;
    }
    p.r.language = env ? json_string_value(env) : "python";
    p.r.code = json_string_value(code);
    json_t *in = json_object_get(body, "stdin");
    if (json_is_string(in))
        p.r.stdin_data = json_string_value(in), p.r.stdin_len = json_string_length(in);
    submit(req, api, &p, true, true);
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

static void h_task_get(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    struct sbx_store_task *t = NULL;
    if (find_task(req, api, sbx_http_req_param(req, "id"), SBX_STORE_WITH_OUTPUT, &t) < 0)
        return;
    sbx_http_respond_json(req, 200, task_json(t, true));
    sbx_store_task_free(t);
}

static void h_task_cancel(sbx_http_request *req, void *ud)
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
    audit(req, api, "task_cancel", id);
    if (sbx_runtime_cancel(api->rt, id, &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    /* A running task is recorded canceled once its tree is dead; answer with
     * what the store says now. */
    if (sbx_store_task_get(api->store, id, NULL, 0, &t, &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    sbx_http_respond_json(req, 200, task_json(t, false));
    sbx_store_task_free(t);
}

/* POST /runtime/tasks/{id}/network {default, allow, deny}: a running task's
 * egress policy, for its new connections from now on; a tenant token may
 * only narrow. */
static void h_task_network(sbx_http_request *req, void *ud)
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
    if (parse_network(req, body, &p, &e) < 0)
        sbx_http_respond_err(req, &e);
    else if (audit(req, api, "task_network", id),
             sbx_runtime_set_network(api->rt, id, p.r.net_default, p.r.allow, p.r.deny, &e) < 0)
        /* The store knows the task: one the runtime does not is no longer
         * (or not yet) running, a conflict with its state. */
        e.errnum == ENOENT ? (void)sbx_http_respond_error(req, SBX_HTTP_CONFLICT, "%s", e.msg)
                           : (void)sbx_http_respond_err(req, &e);
    else
        sbx_http_respond_json(req, 200, json_pack("{s:b, s:s}", "ok", 1, "taskId", id));
    parsed_free(&p);
    json_decref(body);
}

/* POST /runtime/network {sessionID, default, allow, deny}: a live session's
 * egress rules, for its new connections from now on; a tenant token may only
 * narrow. */
static void h_session_network(sbx_http_request *req, void *ud)
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
    json_t *s = json_object_get(body, "sessionID");
    if (!s)
        s = json_object_get(body, "sessionId");
    json_t *net =
        json_pack("{s:O*, s:O*, s:O*}", "default", json_object_get(body, "default"), "allow",
                  json_object_get(body, "allow"), "deny", json_object_get(body, "deny"));
    if (request_clone(req, api, body, &c, &e) < 0) {
        sbx_http_respond_err(req, &e);
    } else if (!json_is_string(s) || sbx_ws_segment_check("sessionID", json_string_value(s),
                                                          json_string_length(s), &e) < 0) {
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "%s",
                               e.msg[0] ? e.msg : "sessionID is required");
    } else if (parse_network(req, net, &p, &e) < 0) {
        sbx_http_respond_err(req, &e);
    } else if (audit(req, api, "session_network", json_string_value(s)),
               sbx_runtime_session_set_network(api->rt, c.tenant, json_string_value(s),
                                               p.r.net_default, p.r.allow, p.r.deny, &e) < 0) {
        sbx_http_respond_err(req, &e);
    } else {
        sbx_http_respond_json(req, 200,
                              json_pack("{s:b, s:s}", "ok", 1, "sessionId", json_string_value(s)));
    }
    parsed_free(&p);
    json_decref(net);
    json_decref(body);
}

static void h_task_list(sbx_http_request *req, void *ud)
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
    for (size_t i = 0; i < page.n; i++)
        json_array_append_new(arr, task_json(page.tasks[i], false));
    json_t *o = json_pack("{s:o, s:s}", "tasks", arr, "nextCursor", page.next_cursor);
    sbx_store_task_page_free(&page);
    /* The original answered a bare array; ?format=array keeps that shape. */
    const char *fmt = sbx_http_req_query(req, "format");
    if (fmt && strcmp(fmt, "array") == 0) {
        json_t *a = json_incref(json_object_get(o, "tasks"));
        json_decref(o);
        o = a;
    }
    sbx_http_respond_json(req, 200, o);
}

/* ---- the event stream ---- */

struct stream {
    struct sbx_api *api;
    sbx_sse *sse;
    struct sbx_subscriber sub;
};

static int stream_send(void *ud, uint64_t id, const char *type, const char *json)
{
    struct stream *s = ud;
    char ids[24], small[160];
    sbx_err e = {0};
    snprintf(ids, sizeof(ids), "%llu", (unsigned long long)id);
    if (sbx_sse_send(s->sse, ids, type, json, strlen(json), &e) == 0)
        return 0;
    if (e.errnum != EMSGSIZE)
        return -1;
    /* Larger than the client's whole buffer: say so in its place, never stall. */
    snprintf(small, sizeof(small),
             "{\"id\":%llu,\"type\":\"event_too_large\",\"data\":{\"type\":\"%s\"}}",
             (unsigned long long)id, type);
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

static void h_stream(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    const char *session = sbx_http_req_query(req, "sessionID");
    if (!session)
        session = sbx_http_req_query(req, "sessionId");
    if (!session)
        session = sbx_runtime_default_session(api->rt);
    sbx_err e = {0};
    struct sbx_clone c;
    if (request_clone(req, api, NULL, &c, &e) < 0) {
        sbx_http_respond_err(req, &e);
        return;
    }
    if (sbx_ws_segment_check("sessionID", session, strlen(session), &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    uint64_t after = 0;
    const char *last = sbx_http_req_header(req, "Last-Event-ID");
    if (last && *last && sbx_parse_uint(last, 0, UINT64_MAX, &after, &e) < 0)
        return (void)sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "Last-Event-ID: %s", e.msg);
    struct stream *s = calloc(1, sizeof(*s));
    if (!s)
        return (void)sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
    s->api = api;
    snprintf(s->sub.tenant, sizeof(s->sub.tenant), "%s", c.tenant);
    snprintf(s->sub.session, sizeof(s->sub.session), "%s", session);
    s->sub.last_id = after;
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
    }
}

/* ---- workspace files ---- */

/* What a file route works on: the clone's workspace (an fd the route closes)
 * with its owner, and the parsed ?path=. */
struct file_target {
    int ws;
    uid_t uid;
    gid_t gid;
    struct sbx_ws_path p;
};

/* Fills t, or answers the request and returns -1. */
static int file_target(sbx_http_request *req, struct sbx_api *api, struct file_target *t)
{
    t->ws = -1;
    struct sbx_clone c;
    sbx_err e = {0};
    const char *path = sbx_http_req_query(req, "path");
    if (request_clone(req, api, NULL, &c, &e) < 0) {
        sbx_http_respond_err(req, &e);
        return -1;
    }
    if (!path) {
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "the path query parameter is required");
        return -1;
    }
    if (sbx_ws_path_parse(path, strlen(path), &t->p, &e) < 0 ||
        sbx_runtime_workspace(api->rt, &c, &t->ws, &t->uid, &t->gid, &e) < 0) {
        sbx_http_respond_err(req, &e);
        return -1;
    }
    return 0;
}

static void h_file_get(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    struct file_target t;
    if (file_target(req, api, &t) < 0)
        return;
    sbx_err e = {0};
    struct sbx_ws_stat st;
    if (sbx_ws_stat(t.ws, &t.p, true, &st, &e) < 0) {
        sbx_http_respond_err(req, &e);
    } else if (st.type == SBX_WS_DIR) {
        struct sbx_ws_listing l = {0};
        if (sbx_ws_list(t.ws, &t.p, 0, &l, &e) < 0) {
            sbx_http_respond_err(req, &e);
        } else {
            json_t *arr = json_array();
            for (size_t i = 0; i < l.n; i++)
                json_array_append_new(
                    arr, json_pack("{s:o, s:s, s:I, s:i, s:o}", "name",
                                   sbx_json_text(l.entries[i].name, strlen(l.entries[i].name)),
                                   "type", sbx_ws_type_name(l.entries[i].st.type), "size",
                                   (json_int_t)l.entries[i].st.size, "mode",
                                   (int)l.entries[i].st.mode, "mtime",
                                   sbx_json_time((int64_t)l.entries[i].st.mtime.tv_sec * 1000 +
                                                 l.entries[i].st.mtime.tv_nsec / 1000000)));
            sbx_http_respond_json(req, 200,
                                  json_pack("{s:o, s:o, s:b}", "path",
                                            sbx_json_text(t.p.rel, strlen(t.p.rel)), "entries", arr,
                                            "truncated", l.truncated));
            sbx_ws_listing_free(&l);
        }
    } else {
        struct sbx_ws_download dl;
        if (sbx_ws_download_open(t.ws, &t.p, &dl, &e) < 0) {
            sbx_http_respond_err(req, &e);
        } else {
            int fd = dl.fd;
            dl.fd = -1;
            sbx_http_respond_file(req, 200, "application/octet-stream", fd, 0, dl.st.size);
        }
    }
    close(t.ws);
}

struct upload {
    struct sbx_ws_upload up;
    uint64_t max;
    sbx_err e;
};

static ssize_t upload_chunk(sbx_http_request *req, const char *data, size_t len, void *ud)
{
    struct upload *u = ud;
    if (u->up.size + len > u->max) {
        sbx_ws_upload_abort(&u->up);
        sbx_http_respond_error(req, SBX_HTTP_TOO_LARGE,
                               "the upload is larger than the workspace quota (%llu bytes)",
                               (unsigned long long)u->max);
        free(u); /* neither end nor cancel follows a refused body */
        return -1;
    }
    if (sbx_ws_upload_write(&u->up, data, len, &u->e) < 0) {
        sbx_ws_upload_abort(&u->up);
        sbx_http_respond_err(req, &u->e);
        free(u); /* neither end nor cancel follows a refused body */
        return -1;
    }
    return (ssize_t)len;
}

static void upload_end(sbx_http_request *req, void *ud)
{
    struct upload *u = ud;
    {
        uint64_t size = u->up.size;
        if (sbx_ws_upload_commit(&u->up, &u->e) < 0)
            sbx_http_respond_err(req, &u->e);
        else
            sbx_http_respond_json(req, 201,
                                  json_pack("{s:b, s:I}", "ok", 1, "size", (json_int_t)size));
    }
    free(u);
}

static void upload_cancel(sbx_http_request *req, void *ud)
{
    struct upload *u = ud;
    sbx_ws_upload_abort(&u->up);
    free(u);
}

static void h_file_put(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    struct file_target t;
    if (file_target(req, api, &t) < 0)
        return;
    /* A declared size over the quota is refused before a byte is read. */
    const char *cl = sbx_http_req_header(req, "Content-Length");
    uint64_t declared;
    if (cl && sbx_parse_uint(cl, 0, UINT64_MAX, &declared, NULL) == 0 &&
        declared > api->set.workspace_quota_bytes) {
        close(t.ws);
        sbx_http_respond_error(req, SBX_HTTP_TOO_LARGE,
                               "the upload is larger than the workspace quota (%llu bytes)",
                               (unsigned long long)api->set.workspace_quota_bytes);
        return;
    }
    struct upload *u = calloc(1, sizeof(*u));
    if (!u) {
        close(t.ws);
        sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
        return;
    }
    audit(req, api, "file_put", t.p.rel);
    u->max = api->set.workspace_quota_bytes;
    if (sbx_ws_upload_begin(t.ws, &t.p, t.uid, t.gid, &u->up, &u->e) < 0) {
        close(t.ws);
        sbx_http_respond_err(req, &u->e);
        free(u);
        return;
    }
    close(t.ws);
    sbx_http_body_sink sink = {
        .chunk = upload_chunk, .end = upload_end, .cancel = upload_cancel, .ud = u};
    sbx_http_req_stream_body(req, &sink);
}

static void h_file_delete(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    struct file_target t;
    if (file_target(req, api, &t) < 0)
        return;
    sbx_err e = {0};
    audit(req, api, "file_delete", t.p.rel);
    if (sbx_ws_delete(t.ws, &t.p, &e) < 0)
        sbx_http_respond_err(req, &e);
    else
        sbx_http_respond_json(req, 200, json_pack("{s:b}", "ok", 1));
    close(t.ws);
}

int sbx_api_routes(sbx_http_server *srv, struct sbx_api *api, sbx_err *err)
{
    static const struct {
        const char *method, *pattern;
        sbx_http_handler fn;
    } routes[] = {
        {"GET", "/healthz", h_healthz},
        {"GET", "/readyz", h_readyz},
        {"GET", "/runtime/status", h_status},
        {"POST", "/runtime/start", h_start},
        {"POST", "/runtime/stop", h_stop},
        {"POST", "/runtime/exec", h_exec},
        {"POST", "/runtime/tasks", h_task_create},
        {"GET", "/runtime/tasks", h_task_list},
        {"GET", "/runtime/tasks/{id}", h_task_get},
        {"POST", "/runtime/tasks/{id}/cancel", h_task_cancel},
        {"POST", "/runtime/tasks/{id}/network", h_task_network},
        {"POST", "/runtime/network", h_session_network},
        {"GET", "/runtime/stream", h_stream},
        {"POST", "/execute", h_execute},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(routes); i++)
        if (sbx_http_route(srv, routes[i].method, routes[i].pattern, routes[i].fn, api, 0, err) < 0)
            return -1;
    /* Uploads stream: the body goes to the file as it arrives. */
    if (sbx_http_route(srv, "GET", "/runtime/files", h_file_get, api, 0, err) < 0 ||
        sbx_http_route(srv, "PUT", "/runtime/files", h_file_put, api, SBX_HTTP_ROUTE_STREAM_BODY,
                       err) < 0 ||
        sbx_http_route(srv, "DELETE", "/runtime/files", h_file_delete, api, 0, err) < 0)
        return -1;
    return 0;
}
