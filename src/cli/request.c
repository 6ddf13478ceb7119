#include "cli/request.h"

#include <math.h>
#include <string.h>

static int set(json_t *o, const char *key, json_t *v, sbx_err *err)
{
    if (!v || json_object_set_new(o, key, v) < 0)
        return sbx_err_set(err, ENOMEM, "request body");
    return 0;
}

static json_t *command_array(const struct sbx_cli_args *a, sbx_err *err)
{
    json_t *cmd = json_array();
    for (size_t i = 0; cmd && i < a->n_command; i++) {
        json_t *s = json_string(a->command[i]);
        if (!s) {
            json_decref(cmd);
            sbx_err_set(err, EINVAL, "exec: argument %zu of the command is not UTF-8 text", i + 1);
            return NULL;
        }
        json_array_append_new(cmd, s);
    }
    if (!cmd)
        sbx_err_set(err, ENOMEM, "request body");
    return cmd;
}

static int add_env(json_t *body, const struct sbx_cli_args *a, sbx_err *err)
{
    if (!a->n_env)
        return 0;
    json_t *env = json_object();
    if (set(body, "env", env, err) < 0)
        return -1;
    for (size_t i = 0; i < a->n_env; i++) {
        const char *eq = strchr(a->env[i], '=');
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)(eq - a->env[i]), a->env[i]);
        json_t *v = json_string(eq + 1);
        if (!v)
            return sbx_err_set(err, EINVAL, "--env: the value of %s is not UTF-8 text", key);
        if (set(env, key, v, err) < 0) /* a later --env of the same name wins */
            return -1;
    }
    return 0;
}

json_t *sbx_cli_exec_body(const struct sbx_cli_args *a, const char *code, size_t len, sbx_err *err)
{
    json_t *body = json_object();
    if (!body) {
        sbx_err_set(err, ENOMEM, "request body");
        return NULL;
    }
    int rc = 0;
    if (a->cmd == SBX_CLI_RUN) {
        json_t *c = json_stringn(code, len);
        if (!c)
            rc = sbx_err_set(err, EINVAL, "run: %s is not UTF-8 text",
                             a->code_file ? a->code_file : "the code");
        else if (set(body, "language", json_string(a->language), err) < 0) {
            json_decref(c);
            rc = -1;
        } else {
            rc = set(body, "code", c, err);
        }
    } else {
        json_t *cmd = command_array(a, err);
        rc = cmd ? set(body, "command", cmd, err) : -1;
    }
    if (rc == 0)
        rc = add_env(body, a, err);
    if (rc == 0 && a->timeout_s > 0) {
        double t = a->timeout_s;
        rc = set(body, "timeoutSeconds", t == floor(t) ? json_integer((json_int_t)t) : json_real(t),
                 err);
    }
    if (rc == 0 && a->memory_mb)
        rc = set(body, "memoryMB", json_integer((json_int_t)a->memory_mb), err);
    if (rc == 0 && a->pids)
        rc = set(body, "pids", json_integer((json_int_t)a->pids), err);
    if (rc == 0 && a->cpu > 0)
        rc = set(body, "cpu", json_real(a->cpu), err);
    if (rc == 0 && a->session)
        rc = set(body, "sessionID", json_string(a->session), err);
    if (rc < 0) {
        json_decref(body);
        return NULL;
    }
    return body;
}

static int add_rules(json_t *body, const char *key, const char *const *rules, size_t n,
                     sbx_err *err)
{
    if (!n)
        return 0;
    json_t *arr = json_array();
    if (set(body, key, arr, err) < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        json_t *r = json_string(rules[i]);
        if (!r)
            return sbx_err_set(err, EINVAL, "--%s: rule %zu is not UTF-8 text", key, i + 1);
        if (json_array_append_new(arr, r) < 0)
            return sbx_err_set(err, ENOMEM, "request body");
    }
    return 0;
}

json_t *sbx_cli_network_body(const struct sbx_cli_args *a, sbx_err *err)
{
    json_t *body = json_object();
    if (!body) {
        sbx_err_set(err, ENOMEM, "request body");
        return NULL;
    }
    bool session = a->cmd == SBX_CLI_SESSION_NETWORK;
    if ((session && set(body, "sessionID", json_string(a->session), err) < 0) ||
        (a->net_default && set(body, "default", json_string(a->net_default), err) < 0) ||
        add_rules(body, "allow", a->allow, a->n_allow, err) < 0 ||
        add_rules(body, "deny", a->deny, a->n_deny, err) < 0) {
        json_decref(body);
        return NULL;
    }
    return body;
}
