#include "api/routes_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/json.h"
#include "base/parse.h"
#include "net/netpolicy.h"
#include "net/policy.h"
#include "workspace/path.h"

/* ---- a task request's body ---- */

const char *const task_request_fields[] = {
    "command", "env",  "timeoutSeconds", "language",  "code",       "stdin",    "memoryMB",
    "pids",    "cpu",  "sessionID",      "sessionId", "tenantCode", "cloneKey", "cloneId",
    "skill",   "args", "network",        "action",    NULL};

/* "network": {"policy", "default", "allow", "deny"}. An operator may choose
 * anything; a tenant-bound token may only narrow: no host policy, no allow
 * rules (EACCES), but none instead of proxy, default deny and deny rules. */
int task_request_network(sbx_http_request *req, json_t *net, struct parsed_task *p, sbx_err *err)
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

static int task_request_rest(sbx_http_request *req, struct sbx_api *api, json_t *body,
                             struct parsed_task *p, sbx_err *err);

/* {"skill", "action", "args"}: checked here, resolved by api_skill_task. */
static int task_request_skill(json_t *body, struct parsed_task *p, sbx_err *err)
{
    json_t *skill = json_object_get(body, "skill"), *action = json_object_get(body, "action");
    json_t *args = json_object_get(body, "args");
    if (json_object_get(body, "command") || json_object_get(body, "language") ||
        json_object_get(body, "code"))
        return sbx_err_set(err, EINVAL, "give either skill and action, or a command, not both");
    if (!json_is_string(skill) || strlen(json_string_value(skill)) != json_string_length(skill))
        return sbx_err_set(err, EINVAL, "skill must be a string without NUL");
    if (!json_is_string(action) || strlen(json_string_value(action)) != json_string_length(action))
        return sbx_err_set(err, EINVAL,
                           "action must be a string without NUL (usage: claw-skill "
                           "<skill> <command>)");
    size_t n = args && !json_is_null(args) ? json_array_size(args) : 0;
    if (args && !json_is_null(args) && (!json_is_array(args) || n > 4096))
        return sbx_err_set(err, EINVAL, "args must be an array of strings");
    p->args = calloc(n + 1, sizeof(char *));
    if (!p->args)
        return sbx_err_set(err, ENOMEM, "args");
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(args, i);
        if (!json_is_string(a) || strlen(json_string_value(a)) != json_string_length(a))
            return sbx_err_set(err, EINVAL, "args[%zu] must be a string without NUL", i);
        p->args[i] = json_string_value(a);
    }
    p->skill = json_string_value(skill);
    p->action = json_string_value(action);
    return 0;
}

/* A command ["claw-skill" | "sandbox-skill", skill, action, args...] is the
 * skill request it names, as the original resolved it: the task carries the
 * skill and runs in the skill's own sandbox. */
static int task_request_claw_skill(struct parsed_task *p, sbx_err *err)
{
    const char *a0 = p->argv[0], *slash = strrchr(a0, '/');
    const char *base = slash ? slash + 1 : a0;
    if (strcmp(base, "claw-skill") != 0 && strcmp(base, "sandbox-skill") != 0)
        return 0;
    size_t n = 0;
    while (p->argv[n])
        n++;
    if (n < 3)
        return sbx_err_set(err, EINVAL, "usage: claw-skill <skill> <command>");
    if (!(p->args = calloc(n - 2, sizeof(char *))))
        return sbx_err_set(err, ENOMEM, "args");
    memcpy(p->args, p->argv + 3, (n - 3) * sizeof(char *));
    p->skill = p->argv[1];
    p->action = p->argv[2];
    return 0;
}

/* command | language+code, env, stdin, limits, session, clone. */
int task_request_parse(sbx_http_request *req, struct sbx_api *api, json_t *body,
                       struct parsed_task *p, sbx_err *err)
{
    memset(p, 0, sizeof(*p));
    p->r.net = p->r.net_default = -1;
    if (api_request_clone(req, api, body, &p->r.clone, err) < 0 ||
        task_request_network(req, json_object_get(body, "network"), p, err) < 0)
        return -1;
    json_t *cmd = json_object_get(body, "command");
    json_t *lang = json_object_get(body, "language");
    json_t *code = json_object_get(body, "code");
    json_t *skill = json_object_get(body, "skill");
    if (skill && !json_is_null(skill))
        return task_request_skill(body, p, err) < 0 ? -1
                                                    : task_request_rest(req, api, body, p, err);
    if (json_object_get(body, "action") || json_object_get(body, "args"))
        return sbx_err_set(err, EINVAL, "action and args go with skill");
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
    /* a shared or mapped skill runs only as a skill, in its tier's sandbox */
    if (api->skills && sbx_skills_check_command(api->skills, p->r.argv, p->r.code, err) < 0)
        return -1;
    if (p->argv && task_request_claw_skill(p, err) < 0)
        return -1;
    return task_request_rest(req, api, body, p, err);
}

/* env, stdin, limits, session: for commands and skills alike. */
static int task_request_rest(sbx_http_request *req, struct sbx_api *api, json_t *body,
                             struct parsed_task *p, sbx_err *err)
{
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
    if (sbx_runtime_check_limits(sbx_runtime_settings(api->rt), &p->r, NULL, err) < 0)
        return -1;
    json_t *s = sbx_json_session(body);
    if (s && !json_is_null(s)) {
        if (!json_is_string(s) ||
            sbx_ws_segment_check("sessionID", json_string_value(s), json_string_length(s), err) < 0)
            return json_is_string(s) ? -1 : sbx_err_set(err, EINVAL, "sessionID must be a string");
        p->r.session = json_string_value(s);
    }
    return 0;
}

void task_request_free(struct parsed_task *p)
{
    sbx_skill_task_free(&p->hold);
    free(p->args);
    for (size_t i = 0; p->env && p->env[i]; i++)
        free((char *)p->env[i]);
    free(p->argv);
    free(p->env);
    free(p->rules[0]);
    free(p->rules[1]);
}
