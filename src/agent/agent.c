/* Turns and conversations: one turn at a time per live session, its calls run
 * in order (or together), the model asked again after its tools, the end told
 * once (done), whatever ended it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_int.h"
#include "base/log.h"
#include "base/time.h"

void ag_emit(struct ag_turn *t, const char *type, json_t *data)
{
    sbx_err e = {0};
    /* A turn at work keeps its session from idling out. */
    sbx_runtime_session_touch(t->a->o.rt, &t->clone, t->session);
    if (sbx_runtime_emit(t->a->o.rt, t->clone.tenant, t->session, type, data, &e) == 0)
        return;
    char msg[600], why[300];
    sbx_log(SBX_LOG_WARN, "turn event lost turn=%s type=%s error=%s", t->id, type,
            sbx_log_safe(sbx_err_format(&e, msg, sizeof(msg)), why, sizeof(why)));
}

/* The store's name of a conversation: segments never hold ':'. */
static void conv_key(char *out, size_t len, const char *tenant, const char *key, const char *id,
                     const char *session)
{
    snprintf(out, len, "%s:%s:%s:%s", tenant, key, id, session);
}

static void log_store(const char *what, const sbx_err *e)
{
    char msg[600], why[300];
    sbx_log(SBX_LOG_WARN, "agent store %s error=%s", what,
            sbx_log_safe(sbx_err_format(e, msg, sizeof(msg)), why, sizeof(why)));
}

static int load_message(void *ud, const char *text)
{
    json_t *m = json_loads(text, 0, NULL);
    if (m)
        json_array_append_new(ud, m);
    return 0;
}

/* A conversation's history and tools from the store (a restart, or a
 * conversation not in memory yet). */
static void conv_load(struct sbx_agent *a, struct ag_conv *v)
{
    char key[4 * SBX_SEGMENT_MAX + 4];
    conv_key(key, sizeof(key), v->tenant, v->clone_key, v->clone_id, v->session);
    sbx_err e = {0};
    char *tools = NULL;
    if (sbx_store_messages(a->o.store, key, load_message, v->messages, &e) < 0 ||
        sbx_store_conv_tools_get(a->o.store, key, &tools, &e) < 0)
        log_store("load", &e);
    if (tools)
        v->tools = json_loads(tools, 0, NULL);
    free(tools);
}

static struct ag_conv *conv_get(struct sbx_agent *a, const struct sbx_clone *c, const char *session,
                                bool create)
{
    for (struct ag_conv *v = a->convs; v; v = v->next)
        if (strcmp(v->tenant, c->tenant) == 0 && strcmp(v->clone_key, c->key) == 0 &&
            strcmp(v->clone_id, c->id) == 0 && strcmp(v->session, session) == 0)
            return v;
    if (!create)
        return NULL;
    struct ag_conv *v = calloc(1, sizeof(*v));
    if (!v || !(v->messages = json_array())) {
        free(v);
        return NULL;
    }
    snprintf(v->tenant, sizeof(v->tenant), "%s", c->tenant);
    snprintf(v->clone_key, sizeof(v->clone_key), "%s", c->key);
    snprintf(v->clone_id, sizeof(v->clone_id), "%s", c->id);
    snprintf(v->session, sizeof(v->session), "%s", session);
    v->next = a->convs;
    a->convs = v;
    conv_load(a, v);
    return v;
}

static void conv_store(struct sbx_agent *a, struct ag_conv *v, json_t *msg)
{
    char key[4 * SBX_SEGMENT_MAX + 4];
    conv_key(key, sizeof(key), v->tenant, v->clone_key, v->clone_id, v->session);
    char *text = json_dumps(msg, JSON_COMPACT);
    sbx_err e = {0};
    if (!text)
        sbx_err_set(&e, ENOMEM, "message");
    if (!text || sbx_store_message_append(a->o.store, key, text, &e) < 0)
        log_store("append", &e);
    free(text);
}

void ag_conv_append(struct ag_turn *t, json_t *msg)
{
    if (!msg)
        return;
    conv_store(t->a, t->conv, msg); /* stored first */
    json_array_append_new(t->conv->messages, msg);
}

static void call_free(struct ag_call *c)
{
    free(c->id);
    free(c->name);
    json_decref(c->args);
    json_decref(c->shown);
    free(c->error);
    free(c->output);
}

static void calls_free(struct ag_turn *t)
{
    for (size_t i = 0; i < t->n_calls; i++)
        call_free(&t->calls[i]);
    free(t->calls);
    t->calls = NULL;
    t->n_calls = t->next_call = 0;
}

/* A conversation with no turn going on leaves memory: the store has it all
 * (conv_get loads it again), so memory holds only the sessions at work. */
static void conv_release(struct sbx_agent *a, struct ag_conv *v)
{
    if (!v || v->turn)
        return;
    for (struct ag_conv **p = &a->convs; *p; p = &(*p)->next)
        if (*p == v) {
            *p = v->next;
            break;
        }
    json_decref(v->messages);
    json_decref(v->tools);
    free(v);
}

static void turn_free(struct ag_turn *t)
{
    struct sbx_agent *a = t->a;
    ag_model_abort(t);
    for (size_t i = 0; i < t->n_calls; i++)
        if (t->calls[i].task_id[0] && t->calls[i].waiting)
            sbx_runtime_forget(a->o.rt, t->calls[i].task_id);
    calls_free(t);
    if (t->ev_budget)
        event_free(t->ev_budget);
    if (t->ev_retry)
        event_free(t->ev_retry);
    for (struct ag_turn **p = &a->turns; *p; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            break;
        }
    if (t->conv && t->conv->turn == t) {
        t->conv->turn = NULL;
        conv_release(a, t->conv);
    }
    free((char *)t->m.base_url);
    free((char *)t->m.name);
    free((char *)t->m.key);
    free(t);
}

void ag_turn_end(struct ag_turn *t, const char *stop, const char *reason, const char *message)
{
    if (reason)
        ag_emit(t, "runtime_error",
                json_pack("{s:s, s:s, s:s}", "turnId", t->id, "reason", reason, "message",
                          message ? message : ""));
    sbx_err e = {0};
    if (sbx_store_turn_end(t->a->o.store, t->id, stop, &e) < 0)
        log_store("turn end", &e);
    json_t *d = json_pack("{s:s, s:s}", "turnId", t->id, "stopReason", stop);
    if (t->model)
        json_object_set_new(d, "usage",
                            json_pack("{s:I, s:I, s:I, s:i}", "promptTokens",
                                      (json_int_t)t->prompt_tokens, "completionTokens",
                                      (json_int_t)t->completion_tokens, "totalTokens",
                                      (json_int_t)t->total_tokens, "steps", t->steps));
    ag_emit(t, "done", d);
    turn_free(t);
}

/* Arguments as given: a JSON string (parsed here) or an object. */
static void call_arguments(struct ag_call *c, json_t *args)
{
    char msg[300];
    c->shown = args ? json_incref(args) : json_object();
    if (!args || json_is_null(args)) {
        c->args = json_object();
    } else if (json_is_object(args)) {
        c->args = json_incref(args);
    } else if (json_is_string(args)) {
        json_error_t je;
        const char *s = json_string_value(args);
        json_t *j = json_string_length(args) ? json_loadb(s, json_string_length(args), 0, &je)
                                             : json_object();
        if (json_is_object(j))
            c->args = j;
        else {
            snprintf(msg, sizeof(msg), "the arguments of %s are not a JSON object: %s",
                     c->name ? c->name : "the call", j ? "another JSON value" : je.text);
            json_decref(j);
            c->error = strdup(msg);
        }
    } else {
        snprintf(msg, sizeof(msg), "the arguments of %s must be a JSON object or its text",
                 c->name);
        c->error = strdup(msg);
    }
}

int ag_turn_set_calls(struct ag_turn *t, json_t *calls, sbx_err *err)
{
    calls_free(t);
    size_t n = json_array_size(calls);
    if (n == 0)
        return 0;
    if (!(t->calls = calloc(n, sizeof(*t->calls))))
        return sbx_err_set(err, ENOMEM, "tool calls");
    t->n_calls = n;
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_array_get(calls, i);
        struct ag_call *k = &t->calls[i];
        k->turn = t;
        json_t *fn = json_object_get(c, "function"); /* OpenAI's nesting, or flat */
        json_t *name = json_object_get(fn ? fn : c, "name");
        json_t *args = json_object_get(fn ? fn : c, "arguments");
        json_t *id = json_object_get(c, "id");
        char made[64];
        snprintf(made, sizeof(made), "call_%zu", i + 1);
        k->id = strdup(json_is_string(id) && json_string_length(id) ? json_string_value(id) : made);
        k->name = strdup(json_is_string(name) ? json_string_value(name) : "");
        if (!k->id || !k->name)
            return sbx_err_set(err, ENOMEM, "tool calls");
        if (!json_is_string(name) || !json_string_length(name))
            k->error = strdup("the call names no tool");
        else
            call_arguments(k, args);
        if (!k->shown)
            k->shown = args ? json_incref(args) : json_object();
    }
    /* The conversation records what was asked, whoever asked it. */
    if (!t->model) {
        json_t *tc = json_array();
        for (size_t i = 0; i < n; i++) {
            char *text = t->calls[i].args ? json_dumps(t->calls[i].args, JSON_COMPACT) : NULL;
            json_array_append_new(tc, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", t->calls[i].id,
                                                "type", "function", "function", "name",
                                                t->calls[i].name, "arguments", text ? text : "{}"));
            free(text);
        }
        ag_conv_append(
            t, json_pack("{s:s, s:n, s:o}", "role", "assistant", "content", "tool_calls", tc));
    }
    return 0;
}

void ag_turn_advance(struct ag_turn *t)
{
    if (t->advancing)
        return;
    t->advancing = true;
    for (;;) {
        if (t->canceled) {
            if (t->running)
                break;
            t->advancing = false;
            ag_turn_end(t, t->cancel_stop ? t->cancel_stop : "canceled", NULL, NULL);
            return;
        }
        if (t->next_call < t->n_calls && (t->parallel || t->running == 0)) {
            struct ag_call *c = &t->calls[t->next_call++];
            c->waiting = true;
            t->running++;
            if (ag_tool_start(c) == 1 && c->waiting) {
                c->waiting = false; /* ended at once without telling */
                t->running--;
            }
            continue;
        }
        if (t->running)
            break;
        t->advancing = false;
        /* Every call ended: the model hears of them, or the turn is over. */
        if (t->model && !sbx_runtime_session_live(t->a->o.rt, &t->clone, t->session))
            ag_turn_end(t, "error", "session_ended",
                        "the session ended during the turn (stopped, or its idle timeout)");
        else if (t->model)
            ag_model_step(t);
        else
            ag_turn_end(t, "completed", NULL, NULL);
        return;
    }
    t->advancing = false;
}

/* Whether the conversation holds a result for call id. */
static bool answered(json_t *messages, const char *id)
{
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m)
    {
        const char *r = json_string_value(json_object_get(m, "tool_call_id"));
        if (r && strcmp(r, id) == 0)
            return true;
    }
    return false;
}

/* A turn the daemon's end interrupted: its stream hears it ended, and its
 * conversation gets a result for each call left without one (the model's
 * API wants one per call). */
static void on_interrupted(void *ud, const char *id, const char *conversation, const char *tenant,
                           const char *session)
{
    struct sbx_agent *a = ud;
    /* tenant:key:id:session */
    const char *p = strchr(conversation, ':');
    const char *q = p ? strchr(p + 1, ':') : NULL;
    const char *r = q ? strchr(q + 1, ':') : NULL;
    struct ag_conv *v = NULL;
    if (r) {
        struct sbx_clone c = {0};
        snprintf(c.tenant, sizeof(c.tenant), "%s", tenant);
        snprintf(c.key, sizeof(c.key), "%.*s", (int)(q - p - 1), p + 1);
        snprintf(c.id, sizeof(c.id), "%.*s", (int)(r - q - 1), q + 1);
        v = conv_get(a, &c, session, true);
    }
    json_t *last = NULL;
    size_t i;
    json_t *m;
    json_array_foreach(v ? v->messages : NULL, i, m) if (json_object_get(m, "tool_calls")) last = m;
    json_array_foreach(json_object_get(last, "tool_calls"), i, m)
    {
        const char *cid = json_string_value(json_object_get(m, "id"));
        if (!cid || answered(v->messages, cid))
            continue;
        json_t *res = json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", cid, "content",
                                "error: interrupted (the daemon stopped)");
        conv_store(a, v, res);
        json_array_append_new(v->messages, res);
    }
    conv_release(a, v);
    sbx_err e = {0};
    json_t *d = json_pack("{s:s, s:s, s:s}", "turnId", id, "reason", "interrupted", "message",
                          "the daemon stopped during the turn");
    if (sbx_runtime_emit(a->o.rt, tenant, session, "runtime_error", d, &e) < 0 ||
        sbx_runtime_emit(a->o.rt, tenant, session, "done",
                         json_pack("{s:s, s:s}", "turnId", id, "stopReason", "interrupted"),
                         &e) < 0)
        log_store("interrupted turn", &e);
}

struct sbx_agent *sbx_agent_new(const struct sbx_agent_opts *o, sbx_err *err)
{
    struct sbx_agent *a = calloc(1, sizeof(*a));
    if (!a) {
        sbx_err_set(err, ENOMEM, "agent");
        return NULL;
    }
    a->o = *o;
    if (!a->o.tool_output_limit)
        a->o.tool_output_limit = 16 * 1024;
    if (!a->o.max_steps)
        a->o.max_steps = 16;
    if (a->o.turn_timeout_s <= 0)
        a->o.turn_timeout_s = 600;
    if (!a->o.max_retries)
        a->o.max_retries = 4;
    if (a->o.stall_timeout_s <= 0)
        a->o.stall_timeout_s = 120;
    sbx_err e = {0};
    if (sbx_store_turns_interrupted(a->o.store, on_interrupted, a, &e) < 0)
        log_store("interrupted turns", &e);
    return a;
}

void sbx_agent_free(struct sbx_agent *a)
{
    if (!a)
        return;
    while (a->turns)
        turn_free(a->turns);
    while (a->convs) {
        struct ag_conv *v = a->convs;
        a->convs = v->next;
        json_decref(v->messages);
        json_decref(v->tools);
        free(v);
    }
    ag_model_fini(a);
    free(a);
}

static const struct sbx_agent_model *model_of(struct sbx_agent *a, const char *tenant)
{
    const struct sbx_agent_model *m =
        a->o.tenant_model ? a->o.tenant_model(a->o.tenant_ud, tenant) : NULL;
    return m && m->base_url && *m->base_url ? m : &a->o.model;
}

static void on_budget(evutil_socket_t fd, short what, void *arg)
{
    struct ag_turn *t = arg;
    char msg[128];
    snprintf(msg, sizeof(msg), "the turn ran past its time budget of %g s", t->a->o.turn_timeout_s);
    /* Its tools are killed; the turn ends once they have. */
    ag_emit(t, "runtime_error",
            json_pack("{s:s, s:s, s:s}", "turnId", t->id, "reason", "time_budget", "message", msg));
    ag_model_abort(t);
    t->canceled = true;
    t->cancel_stop = "budget";
    for (size_t i = 0; i < t->n_calls; i++)
        if (t->calls[i].waiting && t->calls[i].task_id[0])
            sbx_runtime_cancel(t->a->o.rt, t->calls[i].task_id, NULL);
    /* External calls no one will answer now. */
    for (size_t i = 0; i < t->n_calls; i++)
        if (t->calls[i].waiting && t->calls[i].external) {
            t->calls[i].waiting = false;
            t->running--;
        }
    t->next_call = t->n_calls;
    ag_turn_advance(t);
}

/* A tool_result for the external call of the turn waiting on this session. */
static int tool_result(struct ag_conv *v, json_t *input, char turn_id[SBX_ID_SIZE], sbx_err *err)
{
    json_t *id = json_object_get(input, "callId");
    json_t *out = json_object_get(input, "output");
    if (!json_is_string(id))
        return sbx_err_set(err, EINVAL, "input.callId is required (a string)");
    struct ag_turn *t = v ? v->turn : NULL;
    struct ag_call *c = NULL;
    for (size_t i = 0; t && i < t->n_calls; i++)
        if (t->calls[i].external && t->calls[i].waiting &&
            strcmp(t->calls[i].id, json_string_value(id)) == 0)
            c = &t->calls[i];
    if (!c)
        return sbx_err_set(err, ENOENT, "no turn of this session waits for call '%s'",
                           json_string_value(id));
    char *text = json_is_string(out) ? strdup(json_string_value(out))
                 : out               ? json_dumps(out, JSON_COMPACT | JSON_ENCODE_ANY)
                                     : strdup("");
    memcpy(turn_id, t->id, SBX_ID_SIZE);
    ag_tool_end(c, json_null(), "external", text ? text : "", text ? strlen(text) : 0, NULL);
    free(text);
    ag_turn_advance(t);
    return 0;
}

int sbx_agent_turn(struct sbx_agent *a, const struct sbx_clone *c, const char *session,
                   json_t *input, char turn_id[SBX_ID_SIZE], sbx_err *err)
{
    json_t *type = json_object_get(input, "type");
    if (!json_is_object(input) || !json_is_string(type))
        return sbx_err_set(err, EINVAL,
                           "input must be an object with a type: tool_calls, user_message or "
                           "tool_result");
    const char *ty = json_string_value(type);
    bool calls = strcmp(ty, "tool_calls") == 0, user = strcmp(ty, "user_message") == 0;
    if (strcmp(ty, "tool_result") == 0)
        return tool_result(conv_get(a, c, session, false), input, turn_id, err);
    if (!calls && !user)
        return sbx_err_set(
            err, EINVAL, "input.type '%s' is not one of tool_calls, user_message, tool_result", ty);
    if (!sbx_runtime_session_live(a->o.rt, c, session))
        return sbx_err_set(err, ENOENT, "no live session '%s' (POST /runtime/start first)",
                           session);
    json_t *list = json_object_get(input, "calls");
    json_t *text = json_object_get(input, "text");
    if (calls && !json_is_array(list))
        return sbx_err_set(err, EINVAL, "input.calls must be an array of tool calls");
    if (calls && json_array_size(list) > 256)
        return sbx_err_set(err, EINVAL, "input.calls holds more than 256 calls");
    size_t i;
    json_t *k;
    json_array_foreach(list, i, k) if (!json_is_object(k)) return sbx_err_set(
        err, EINVAL, "input.calls[%zu] must be an object {id, name, arguments}", i);
    if (user && !json_is_string(text))
        return sbx_err_set(err, EINVAL, "input.text is required (a string)");
    const struct sbx_agent_model *m = model_of(a, c->tenant);
    if (user && (!m->base_url || !*m->base_url || !m->name || !*m->name))
        return sbx_err_set(err, ENOTSUP,
                           "no model is configured (the model section, or OPENAI_BASE_URL and "
                           "OPENAI_MODEL)");
    struct ag_conv *v = conv_get(a, c, session, true);
    if (!v)
        return sbx_err_set(err, ENOMEM, "conversation");
    if (v->turn)
        return sbx_err_set(err, EBUSY, "turn %s is going on in session '%s': one at a time",
                           v->turn->id, session);
    struct ag_turn *t = calloc(1, sizeof(*t));
    if (!t) {
        conv_release(a, v);
        return sbx_err_set(err, ENOMEM, "turn");
    }
    t->a = a;
    t->clone = *c;
    snprintf(t->session, sizeof(t->session), "%s", session);
    t->conv = v;
    t->model = user;
    t->parallel = json_is_true(json_object_get(input, "parallel"));
    char key[4 * SBX_SEGMENT_MAX + 4];
    conv_key(key, sizeof(key), c->tenant, c->key, c->id, session);
    if (sbx_id_new(t->id, err) < 0 ||
        sbx_store_turn_begin(a->o.store, t->id, key, c->tenant, session, err) < 0) {
        free(t);
        conv_release(a, v);
        return -1;
    }
    t->next = a->turns;
    a->turns = t;
    v->turn = t;
    if (user) {
        t->m.base_url = strdup(m->base_url);
        t->m.name = strdup(m->name);
        t->m.key = m->key ? strdup(m->key) : NULL;
        t->deadline = sbx_mono_ms() + (int64_t)(a->o.turn_timeout_s * 1000);
        double s = a->o.turn_timeout_s;
        struct timeval tv = {.tv_sec = (time_t)s,
                             .tv_usec = (suseconds_t)((s - (double)(time_t)s) * 1e6)};
        if (!t->m.base_url || !t->m.name || (m->key && !t->m.key) ||
            !(t->ev_budget = evtimer_new(a->o.base, on_budget, t)) ||
            event_add(t->ev_budget, &tv) < 0) {
            turn_free(t);
            return sbx_err_set(err, ENOMEM, "turn");
        }
    } else if (ag_turn_set_calls(t, list, err) < 0) {
        turn_free(t);
        return -1;
    }
    memcpy(turn_id, t->id, SBX_ID_SIZE);
    ag_emit(t, "turn_started",
            json_pack("{s:s, s:s}", "turnId", t->id, "type", user ? "user_message" : "tool_calls"));
    if (user) {
        ag_conv_append(t, json_pack("{s:s, s:s%}", "role", "user", "content",
                                    json_string_value(text), json_string_length(text)));
        ag_model_step(t);
    } else {
        ag_turn_advance(t);
    }
    return 0;
}

int sbx_agent_cancel(struct sbx_agent *a, const char *tenant, const char *turn_id, sbx_err *err)
{
    struct ag_turn *t = a->turns;
    while (t && !(strcmp(t->id, turn_id) == 0 && strcmp(t->clone.tenant, tenant) == 0))
        t = t->next;
    if (!t || t->canceled)
        return sbx_err_set(err, ENOENT, "turn %s is not going on", turn_id);
    t->canceled = true;
    ag_model_abort(t);
    for (size_t i = 0; i < t->n_calls; i++) {
        struct ag_call *c = &t->calls[i];
        if (c->waiting && c->task_id[0])
            sbx_runtime_cancel(a->o.rt, c->task_id, NULL); /* its end comes from the loop */
        else if (c->waiting && c->external) {
            c->waiting = false;
            t->running--;
        }
    }
    t->next_call = t->n_calls;
    ag_turn_advance(t);
    return 0;
}

int sbx_agent_session_tools(struct sbx_agent *a, const struct sbx_clone *c, const char *session,
                            json_t *tools, sbx_err *err)
{
    if (!json_is_array(tools))
        return sbx_err_set(err, EINVAL,
                           "tools must be an array of {name, description, "
                           "parameters, external}");
    json_t *builtin = sbx_agent_tools();
    size_t i;
    json_t *k;
    json_array_foreach(tools, i, k)
    {
        json_t *name = json_object_get(k, "name");
        json_t *params = json_object_get(k, "parameters");
        json_t *desc = json_object_get(k, "description");
        const char *n = json_string_value(name);
        bool bad = !json_is_object(k) || !n || !*n || strlen(n) > 64 ||
                   strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
                       strlen(n);
        if (bad) {
            json_decref(builtin);
            return sbx_err_set(err, EINVAL,
                               "tools[%zu].name must be 1 to 64 letters, digits, '_' or '-'", i);
        }
        if ((params && !json_is_object(params)) || (desc && !json_is_string(desc))) {
            json_decref(builtin);
            return sbx_err_set(err, EINVAL,
                               "tools[%zu]: parameters must be a JSON schema object and "
                               "description a string",
                               i);
        }
        if (!json_is_true(json_object_get(k, "external"))) {
            json_decref(builtin);
            return sbx_err_set(err, EINVAL,
                               "tools[%zu] (%s): only external tools can be declared "
                               "(external: true); the built-in ones are always there",
                               i, n);
        }
        size_t j;
        json_t *b;
        json_array_foreach(builtin, j,
                           b) if (strcmp(json_string_value(json_object_get(b, "name")), n) == 0)
        {
            json_decref(builtin);
            return sbx_err_set(err, EINVAL, "tools[%zu]: '%s' is a built-in tool's name", i, n);
        }
    }
    json_decref(builtin);
    struct ag_conv *v = conv_get(a, c, session, true);
    if (!v)
        return sbx_err_set(err, ENOMEM, "conversation");
    char key[4 * SBX_SEGMENT_MAX + 4];
    conv_key(key, sizeof(key), c->tenant, c->key, c->id, session);
    char *text = json_dumps(tools, JSON_COMPACT);
    int rc = text ? sbx_store_conv_tools_set(a->o.store, key, text, err)
                  : sbx_err_set(err, ENOMEM, "tools");
    free(text);
    if (rc < 0)
        return -1;
    json_decref(v->tools);
    v->tools = json_deep_copy(tools);
    conv_release(a, v);
    return 0;
}
