/* OpenSandbox's execd (specs/execd-api.yaml of OpenSandbox), served for each
 * sandbox under /v1/sandboxes/{id}/proxy/44772: ping and commands, each a
 * task of the sandbox's session; and its egress sidecar's /policy (port
 * 18080) over the session's live egress policy. */
#include "api/opensandbox/os_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/time.h"

#define EXECD "/v1/sandboxes/{id}/proxy/" OS_EXECD_PORT
#define EGRESS "/v1/sandboxes/{id}/proxy/" OS_EGRESS_PORT
/* As often as OpenSandbox's execd pings its streams. */
#define HEARTBEAT_MS 3000

struct os_cmd *os_cmd_find(struct os_box *b, const char *id)
{
    for (struct os_cmd *c = b->cmds; c; c = c->next)
        if (strcmp(c->id, id) == 0)
            return c;
    return NULL;
}

/* One event of the stream: {type, text?, timestamp, ...extra}. */
static void cmd_send(struct os_cmd *c, const char *type, const char *text, json_t *extra)
{
    json_t *ev = extra ? extra : json_object();
    json_object_set_new(ev, "type", json_string(type));
    if (text)
        json_object_set_new(ev, "text", json_string(text));
    json_object_set_new(ev, "timestamp", json_integer(sbx_now_ms()));
    if (c->sse && sbx_sse_send_json(c->sse, NULL, NULL, ev, NULL) < 0) {
        /* A client that reads nothing for a whole buffer loses its stream,
         * not the daemon's memory: the command goes on (its status says how
         * it ended). */
        sbx_sse_close(c->sse);
        c->sse = NULL;
    }
    json_decref(ev);
}

/* A code run's stdout is one JSON event per line (interp.c's client):
 * each complete line goes on as an event; its stderr (the client's own
 * trouble) as stderr. */
static void code_output(struct os_cmd *c, const char *stream, const char *text, size_t len)
{
    if (strcmp(stream, "stdout") != 0) {
        cmd_send(c, "stderr", text, NULL);
        return;
    }
    evbuffer_add(c->log, text, len);
    for (;;) {
        struct evbuffer_ptr eol = evbuffer_search_eol(c->log, NULL, NULL, EVBUFFER_EOL_LF);
        if (eol.pos < 0)
            break;
        size_t n = (size_t)eol.pos;
        const char *line = (const char *)evbuffer_pullup(c->log, (ssize_t)n + 1);
        json_t *ev = json_loadb(line, n, 0, NULL);
        const char *type = json_string_value(json_object_get(ev, "type"));
        if (type) {
            c->sent_error |= strcmp(type, "error") == 0;
            char t[32];
            snprintf(t, sizeof(t), "%s", type);
            json_object_del(ev, "type");
            cmd_send(c, t, NULL, json_incref(ev));
        }
        json_decref(ev);
        evbuffer_drain(c->log, n + 1);
    }
    if (evbuffer_get_length(c->log) > OS_LOG_MAX) /* no line this long comes from the client */
        evbuffer_drain(c->log, evbuffer_get_length(c->log));
}

void os_cmd_event(struct os_box *b, const char *type, json_t *data)
{
    const char *id = json_string_value(json_object_get(data, "taskId"));
    const char *stream = json_string_value(json_object_get(data, "stream"));
    json_t *text = json_object_get(data, "data");
    struct os_cmd *c = id ? os_cmd_find(b, id) : NULL;
    if (!c || !stream || !json_is_string(text))
        return;
    if (c->code) {
        code_output(c, stream, json_string_value(text), json_string_length(text));
        return;
    }
    if (c->background) {
        evbuffer_add(c->log, json_string_value(text), json_string_length(text));
        size_t len = evbuffer_get_length(c->log);
        if (len > OS_LOG_MAX) {
            evbuffer_drain(c->log, len - OS_LOG_MAX);
            c->log_dropped += len - OS_LOG_MAX;
        }
    }
    cmd_send(c, strcmp(stream, "stderr") == 0 ? "stderr" : "stdout", json_string_value(text), NULL);
}

static void cmd_free(struct os_cmd *c)
{
    if (c->running)
        sbx_runtime_forget(c->box->os->api->rt, c->id);
    if (c->sse)
        sbx_sse_close(c->sse);
    if (c->log)
        evbuffer_free(c->log);
    free(c->command);
    free(c->error);
    free(c);
}

void os_cmds_free(struct os_box *b)
{
    while (b->cmds) {
        struct os_cmd *c = b->cmds;
        b->cmds = c->next;
        if (c->running)
            sbx_runtime_cancel(b->os->api->rt, c->id, NULL);
        cmd_free(c);
    }
}

static void cmd_done(void *ud, const struct sbx_store_task *t)
{
    struct os_cmd *c = ud;
    c->running = false;
    c->finished_at = t->ended_at ? t->ended_at : sbx_now_ms();
    json_t *r = t->result ? json_loads(t->result, 0, NULL) : NULL;
    json_t *code = json_object_get(r, "exitCode");
    c->exit_code = json_is_integer(code) ? (int)json_integer_value(code) : 1;
    free(c->error);
    c->error = strdup(t->error ? t->error : "");
    json_decref(r);
    if (c->code && c->sent_error) {
        /* its error event said it */
    } else if (c->exit_code == 0 && !*c->error) {
        cmd_send(
            c, "execution_complete", NULL,
            json_pack("{s:I}", "execution_time", (json_int_t)(c->finished_at - c->started_at)));
    } else {
        char code_s[16];
        snprintf(code_s, sizeof(code_s), "%d", c->exit_code);
        json_t *tb = json_array();
        if (*c->error)
            json_array_append_new(tb, json_string(c->error));
        cmd_send(c, "error", NULL,
                 json_pack("{s:{s:s, s:s, s:o}}", "error", "ename", "CommandExecError", "evalue",
                           code_s, "traceback", tb));
    }
    if (c->sse) {
        sbx_sse_close(c->sse);
        c->sse = NULL;
    }
}

/* The command text through the shell, in cwd (NULL: the workspace). */
struct os_cmd *os_cmd_start(struct os_box *b, const struct os_run *run, sbx_err *err)
{
    const char *command = run->command ? run->command : run->argv[0];
    const char *cwd = run->cwd;
    json_t *envs = run->envs;
    struct os_cmd *c = calloc(1, sizeof(*c));
    size_t n = json_object_size(b->env) + json_object_size(envs);
    char **env = calloc(n + 1, sizeof(char *));
    if (!c || !env || !(c->command = strdup(command)) || !(c->log = evbuffer_new())) {
        sbx_err_set(err, ENOMEM, "command");
        goto fail;
    }
    size_t k = 0;
    json_t *sets[] = {b->env, envs};
    for (int s = 0; s < 2; s++) {
        const char *key;
        json_t *v;
        json_object_foreach(sets[s], key, v)
        {
            if (asprintf(&env[k], "%s=%s", key, json_string_value(v)) < 0) {
                env[k] = NULL;
                sbx_err_set(err, ENOMEM, "command");
                goto fail;
            }
            k++;
        }
    }
    /* cwd and the command are arguments, never spliced into shell text. */
    const char *argv_cwd[] = {"/bin/sh", "-c",    "cd -- \"$0\" && exec /bin/sh -c \"$1\"",
                              cwd,       command, NULL};
    const char *argv[] = {"/bin/sh", "-c", command, NULL};
    struct sbx_task_request r = {.clone = b->clone,
                                 .session = b->id,
                                 .argv = run->argv ? run->argv
                                         : cwd     ? argv_cwd
                                                   : argv,
                                 .env = (const char *const *)env,
                                 .stdin_data = run->stdin_data,
                                 .stdin_len = run->stdin_data ? strlen(run->stdin_data) : 0,
                                 .net = -1,
                                 .net_default = -1,
                                 .timeout_s = run->timeout_s};
    c->box = b;
    c->background = run->background;
    c->code = run->code;
    c->running = true;
    c->started_at = sbx_now_ms();
    if (sbx_runtime_submit(b->os->api->rt, &r, cmd_done, c, c->id, err) < 0)
        goto fail;
    for (size_t i = 0; i < k; i++)
        free(env[i]);
    free(env);
    c->next = b->cmds;
    b->cmds = c;
    /* The list is newest first: past OS_CMDS_KEPT ended ones, forget the rest. */
    unsigned ended = 0;
    for (struct os_cmd **p = &b->cmds; *p;) {
        struct os_cmd *o = *p;
        if (!o->running && ++ended > OS_CMDS_KEPT) {
            *p = o->next;
            cmd_free(o);
        } else {
            p = &o->next;
        }
    }
    return c;
fail:
    for (size_t i = 0; env && i < n; i++)
        free(env[i]);
    free(env);
    if (c) {
        c->running = false;
        c->box = b;
        cmd_free(c);
    }
    return NULL;
}

/* ---- routes ---- */

static void h_ping(sbx_http_request *req, void *ud)
{
    if (os_box_get(req, ud, false))
        sbx_http_respond_data(req, 200, "text/plain", "", 0);
}

static void stream_closed(sbx_sse *sse, void *ud)
{
    struct os_cmd *c = ud;
    c->sse = NULL;
    /* A foreground command whose client left is interrupted, as a shell's
     * would be. */
    if (c->running && !c->background)
        sbx_runtime_cancel(c->box->os->api->rt, c->id, NULL);
}

static void h_command(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, false);
    if (!b)
        return;
    static const char *const fields[] = {"command", "cwd", "background", "timeout",
                                         "envs",    "uid", "gid",        NULL};
    json_t *body = sbx_http_req_json(req, fields);
    if (!body)
        return;
    sbx_err e = {0};
    struct os_run run;
    struct os_cmd *c = NULL;
    if (os_command_parse(api_set(b->os->api), body, &run, &e) == 0)
        c = os_cmd_start(b, &run, &e);
    json_decref(body);
    if (!c) {
        sbx_http_respond_err(req, &e);
        return;
    }
    os_cmd_stream(req, c);
}

/* OpenSandbox's keepalive: a ping event (the SDKs let it pass). */
static json_t *ping_event(void *ud)
{
    return json_pack("{s:s, s:s, s:I}", "type", "ping", "text", "pong", "timestamp",
                     (json_int_t)sbx_now_ms());
}

void os_cmd_stream(sbx_http_request *req, struct os_cmd *c)
{
    sbx_sse_opts o = {.on_close = stream_closed,
                      .ud = c,
                      .heartbeat_ms = HEARTBEAT_MS,
                      .heartbeat_json = ping_event};
    if (!(c->sse = sbx_http_respond_sse(req, &o)))
        return;
    cmd_send(c, "init", c->id, NULL);
    if (c->background) {
        sbx_sse_close(c->sse);
        c->sse = NULL;
    }
}

static struct os_cmd *cmd_of(sbx_http_request *req, struct os_box *b, const char *id)
{
    struct os_cmd *c = id ? os_cmd_find(b, id) : NULL;
    if (!c)
        sbx_http_respond_error(req, id ? SBX_HTTP_NOT_FOUND : SBX_HTTP_BAD_REQUEST, "%s%s",
                               id ? "no command " : "id is required", id ? id : "");
    return c;
}

static void h_command_status(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, true);
    struct os_cmd *c = b ? cmd_of(req, b, sbx_http_req_param(req, "cmd")) : NULL;
    if (!c)
        return;
    json_t *j = json_pack("{s:s, s:s, s:b, s:o, s:o, s:o}", "id", c->id, "content", c->command,
                          "running", c->running, "started_at", sbx_json_time(c->started_at),
                          "finished_at", sbx_json_time(c->finished_at), "exit_code",
                          c->running ? json_null() : json_integer(c->exit_code));
    if (c->error && *c->error)
        json_object_set_new(j, "error", json_string(c->error));
    sbx_http_respond_json(req, 200, j);
}

/* Output from ?cursor= (a byte offset of everything the command wrote) on;
 * the next cursor in EXECD-COMMANDS-TAIL-CURSOR. */
static void h_command_logs(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, true);
    struct os_cmd *c = b ? cmd_of(req, b, sbx_http_req_param(req, "cmd")) : NULL;
    if (!c)
        return;
    const char *cs = sbx_http_req_query(req, "cursor");
    uint64_t cursor = 0, end = c->log_dropped + evbuffer_get_length(c->log);
    char *stop;
    if (cs && *cs) {
        cursor = strtoull(cs, &stop, 10);
        if (*stop || cs[0] == '-') {
            sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "cursor must be a byte offset");
            return;
        }
    }
    if (cursor < c->log_dropped)
        cursor = c->log_dropped;
    if (cursor > end)
        cursor = end;
    size_t from = (size_t)(cursor - c->log_dropped), len = (size_t)(end - cursor);
    const char *data = (const char *)evbuffer_pullup(c->log, -1);
    char next[24];
    snprintf(next, sizeof(next), "%llu", (unsigned long long)end);
    sbx_http_add_header(req, "EXECD-COMMANDS-TAIL-CURSOR", next);
    sbx_http_respond_data(req, 200, "text/plain; charset=utf-8", data ? data + from : "", len);
}

static void h_command_interrupt(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, true);
    struct os_cmd *c = b ? cmd_of(req, b, sbx_http_req_query(req, "id")) : NULL;
    if (!c)
        return;
    if (c->running)
        sbx_runtime_cancel(b->os->api->rt, c->id, NULL);
    os_no_content(req);
}

/* ---- the egress sidecar: /policy ---- */

static void h_policy_get(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, true);
    if (!b)
        return;
    json_t *pol = b->policy ? json_deep_copy(b->policy)
                            : json_pack("{s:s, s:[]}", "defaultAction", "deny", "egress");
    const char *mode = sbx_net_policy_name(api_set(b->os->api)->net);
    sbx_http_respond_json(
        req, 200, json_pack("{s:s, s:s, s:o}", "status", "ok", "mode", mode, "policy", pol));
}

/* POST: the whole policy; PATCH: rules by target (added or replaced);
 * DELETE: the rules of the targets given. Applied at once to the session's
 * egress; on a refusal the policy stays as it was. */
static void policy_change(sbx_http_request *req, void *ud, int how)
{
    struct os_box *b = os_box_get(req, ud, false);
    if (!b)
        return;
    size_t len;
    const char *text = sbx_http_req_body(req, &len);
    json_error_t je;
    json_t *body = json_loadb(text, len, 0, &je);
    if (!body || (how == 0 && !json_is_object(body)) || (how != 0 && !json_is_array(body))) {
        json_decref(body);
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "%s",
                               how == 0   ? "the body must be {defaultAction, egress}"
                               : how == 1 ? "the body must be a list of {action, target}"
                                          : "the body must be a list of targets");
        return;
    }
    json_t *old = b->policy;
    json_t *pol = how == 0 ? json_incref(body)
                  : old    ? json_deep_copy(old)
                           : json_pack("{s:s, s:[]}", "defaultAction", "deny", "egress");
    json_t *eg = json_object_get(pol, "egress");
    if (!json_is_array(eg))
        json_object_set_new(pol, "egress", eg = json_array());
    size_t i;
    json_t *item;
    json_array_foreach(how == 0 ? NULL : body, i, item) /* POST replaces: no entries */
    {
        const char *target =
            how == 1 ? json_string_value(json_object_get(item, "target")) : json_string_value(item);
        for (size_t k = json_array_size(eg); target && k-- > 0;)
            if (strcmp(json_string_value(json_object_get(json_array_get(eg, k), "target")) ?: "",
                       target) == 0)
                json_array_remove(eg, k);
        if (how == 1)
            json_array_append(eg, item);
    }
    json_decref(body);
    b->policy = pol;
    sbx_err e = {0};
    if (os_box_apply_policy(req, b, &e) < 0) {
        b->policy = old;
        json_decref(pol);
        sbx_http_respond_err(req, &e);
        return;
    }
    json_decref(old);
    api_audit(req, b->os->api, "opensandbox_policy", b->id);
    sbx_http_respond_json(req, 200, json_pack("{s:s, s:O}", "status", "ok", "policy", pol));
}

static void h_policy_post(sbx_http_request *req, void *ud)
{
    policy_change(req, ud, 0);
}

static void h_policy_patch(sbx_http_request *req, void *ud)
{
    policy_change(req, ud, 1);
}

static void h_policy_delete(sbx_http_request *req, void *ud)
{
    policy_change(req, ud, 2);
}

int os_execd_routes(sbx_http_server *srv, struct os_state *os, sbx_err *err)
{
    static const struct {
        const char *method, *pattern;
        sbx_http_handler fn;
    } routes[] = {
        {"GET", EXECD "/ping", h_ping},
        {"POST", EXECD "/command", h_command},
        {"DELETE", EXECD "/command", h_command_interrupt},
        {"GET", EXECD "/command/status/{cmd}", h_command_status},
        {"GET", EXECD "/command/{cmd}/logs", h_command_logs},
        {"GET", EGRESS "/policy", h_policy_get},
        {"POST", EGRESS "/policy", h_policy_post},
        {"PATCH", EGRESS "/policy", h_policy_patch},
        {"DELETE", EGRESS "/policy", h_policy_delete},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(routes); i++)
        if (sbx_http_route(srv, routes[i].method, routes[i].pattern, routes[i].fn, os, 0, err) < 0)
            return -1;
    return 0;
}
