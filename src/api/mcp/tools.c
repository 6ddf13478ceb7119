/* The MCP tools: each one an action the HTTP routes also offer, done the
 * same way (the same request parsing, clone and token checks, audit, runtime
 * calls), its result told as text a model reads. A failure of the action is
 * a tool result with isError (the model can read it and try again), never a
 * protocol error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/json.h"
#include "api/mcp/mcp_int.h"
#include "skills/skills.h"
#include "api/mcp/message.h"
#include "workspace/files.h"
#include "workspace/path.h"

/* What a model is shown of each output stream, and of a file: the rest is
 * in the task's record (GET /runtime/tasks/{id}) or the file API. */
#define MCP_OUTPUT_MAX (64u << 10)
#define MCP_FILE_MAX (1u << 20)

/* ---- tasks: run_code, exec ---- */

/* Up to MCP_OUTPUT_MAX bytes of an output, never cut inside a UTF-8
 * sequence; *cut tells whether some was left out. */
static size_t shown_len(const char *data, size_t len, bool *cut)
{
    *cut = len > MCP_OUTPUT_MAX;
    if (!*cut)
        return len;
    size_t n = MCP_OUTPUT_MAX;
    while (n > 0 && ((unsigned char)data[n] & 0xc0) == 0x80)
        n--;
    return n;
}

static void put_stream(FILE *out, const char *name, const char *data, size_t len, bool task_cut,
                       bool *cut)
{
    size_t n = shown_len(data, len, cut);
    fprintf(out, "--- %s ---\n", name);
    fwrite(data, 1, n, out);
    if (n && data[n - 1] != '\n')
        fputc('\n', out);
    if (task_cut)
        fprintf(out, "[%s was cut: the task wrote more than its output limit]\n", name);
    if (*cut)
        fprintf(out, "[%s shown up to %u of %zu bytes]\n", name, MCP_OUTPUT_MAX, len);
}

/* The text and structured result of a finished task. */
static json_t *task_result(const struct sbx_store_task *t)
{
    json_error_t je;
    json_t *report = t->result ? json_loads(t->result, 0, &je) : NULL;
    int code = report ? (int)json_integer_value(json_object_get(report, "exitCode")) : 125;
    const char *outcome = json_string_value(json_object_get(report, "outcome"));
    const char *message = json_string_value(json_object_get(report, "message"));
    bool out_cut_task = json_is_true(json_object_get(report, "stdoutTruncated"));
    bool err_cut_task = json_is_true(json_object_get(report, "stderrTruncated"));
    const char *status = sbx_task_status_name(t->status);
    char *text = NULL;
    size_t len = 0;
    bool out_cut = false, err_cut = false;
    FILE *out = open_memstream(&text, &len);
    if (out) {
        fprintf(out, "exit code %d, status %s (outcome %s), task %s\n", code, status,
                outcome ? outcome : "-", t->id);
        if (t->status != SBX_TASK_SUCCEEDED && ((message && *message) || (t->error && *t->error)))
            fprintf(out, "error: %s\n", message && *message ? message : t->error);
        put_stream(out, "stdout", t->stdout_data, t->stdout_len, out_cut_task, &out_cut);
        put_stream(out, "stderr", t->stderr_data, t->stderr_len, err_cut_task, &err_cut);
        if (out_cut || err_cut)
            fprintf(out, "[the whole output: GET /runtime/tasks/%s]\n", t->id);
        fclose(out);
    }
    bool failed = t->status != SBX_TASK_SUCCEEDED || code != 0;
    json_t *r = json_pack("{s:[{s:s, s:o}], s:b}", "content", "type", "text", "text",
                          sbx_json_text(text ? text : "", text ? len : 0), "isError", failed);
    bool c1, c2;
    json_t *sc = json_pack(
        "{s:s, s:s, s:s, s:i, s:o, s:o, s:b, s:b}", "taskId", t->id, "status", status, "outcome",
        outcome ? outcome : "", "exitCode", code, "stdout",
        sbx_json_text(t->stdout_data, shown_len(t->stdout_data, t->stdout_len, &c1)), "stderr",
        sbx_json_text(t->stderr_data, shown_len(t->stderr_data, t->stderr_len, &c2)),
        "stdoutTruncated", out_cut_task || out_cut, "stderrTruncated", err_cut_task || err_cut);
    if (r && sc)
        json_object_set_new(r, "structuredContent", sc);
    else
        json_decref(sc);
    json_decref(report);
    free(text);
    return r;
}

static void task_done(void *ud, const struct sbx_store_task *t)
{
    struct mcp_call *c = ud;
    c->wait = MCP_WAIT_NONE;
    mcp_call_result(c, task_result(t));
}

/* The task's output events, as progress notifications. */
static int on_event(void *ud, uint64_t id, const char *type, const char *json)
{
    struct mcp_call *c = ud;
    /* The stream is the session's: other tasks' output passes by too. */
    if (strcmp(type, "tool_call_output") != 0 || !strstr(json, c->task_id))
        return 0;
    json_error_t je;
    json_t *ev = json_loads(json, 0, &je);
    json_t *d = json_object_get(ev, "data");
    const char *task = json_string_value(json_object_get(d, "taskId"));
    json_t *data = json_object_get(d, "data");
    if (task && strcmp(task, c->task_id) == 0 && json_is_string(data))
        mcp_call_progress(c, (double)json_string_length(data), json_string_value(data));
    json_decref(ev);
    return 0; /* never "full": a dropped notification is not replayed */
}

/* Submit the task body describes, as POST /runtime/exec would. */
static void submit_task(struct mcp_call *c, sbx_http_request *req, json_t *body)
{
    struct sbx_api *api = c->api;
    struct parsed_task p;
    sbx_err e = {0};
    if (task_request_parse(req, api, body, &p, &e) < 0 || api_skill_task(req, api, &p, &e) < 0) {
        task_request_free(&p);
        return mcp_tool_error(c, "%s", e.msg);
    }
    c->clone = p.r.clone;
    snprintf(c->session, sizeof(c->session), "%s",
             p.r.session && *p.r.session ? p.r.session : sbx_runtime_default_session(api->rt));
    c->wait = MCP_WAIT_TASK;
    c->submitting = true;
    char id[SBX_ID_SIZE];
    int rc = sbx_runtime_submit(api->rt, &p.r, task_done, c, id, &e);
    c->submitting = false;
    task_request_free(&p);
    api_audit(req, api, rc < 0 ? "task_refused" : "task_submit", rc < 0 ? e.msg : id);
    if (c->ended)
        return mcp_call_free(c); /* answered inside submit */
    if (rc < 0) {
        c->wait = MCP_WAIT_NONE;
        return mcp_tool_error(c, "%s", e.msg);
    }
    memcpy(c->task_id, id, SBX_ID_SIZE);
    if (!c->sse || !c->progress)
        return;
    snprintf(c->sub.tenant, sizeof(c->sub.tenant), "%s", c->clone.tenant);
    snprintf(c->sub.session, sizeof(c->sub.session), "%s", c->session);
    c->sub.send = on_event;
    c->sub.ud = c;
    c->subscribed = sbx_runtime_subscribe_live(api->rt, &c->sub, NULL) == 0;
}

/* run_code and exec: their arguments as the task body POST /runtime/exec
 * takes. */
static void begin_task(struct mcp_call *c, sbx_http_request *req)
{
    sbx_err e = {0};
    json_t *body = mcp_task_body(c->tool->name, c->args, &e);
    if (!body)
        return mcp_tool_error(c, "%s", e.msg);
    submit_task(c, req, body);
    json_decref(body);
}

/* ---- files: read_file, write_file, list_files ---- */

static void file_op(struct mcp_call *c);

static void ws_ready(void *ud, const sbx_err *err)
{
    struct mcp_call *c = ud;
    c->wait = MCP_WAIT_NONE;
    if (err)
        return mcp_tool_error(c, "%s", err->msg);
    file_op(c);
}

/* The clone's workspace, now or once its first image is formatted. */
static void begin_files(struct mcp_call *c, sbx_http_request *req, const char *const *fields,
                        const char *audit)
{
    sbx_err e = {0};
    if (sbx_json_check_fields(c->args, "arguments", fields, &e) < 0)
        return mcp_tool_error(c, "%s", e.msg);
    json_t *path = json_object_get(c->args, "path");
    struct sbx_ws_path p;
    if (path && !json_is_string(path))
        return mcp_tool_error(c, "path must be a string");
    if (!path && strcmp(c->tool->name, "list_files") != 0)
        return mcp_tool_error(c, "path is required");
    if (path && sbx_ws_path_parse(json_string_value(path), json_string_length(path), &p, &e) < 0)
        return mcp_tool_error(c, "%s", e.msg);
    if (api_request_clone(req, c->api, NULL, &c->clone, &e) < 0)
        return mcp_tool_error(c, "%s", e.msg);
    if (audit)
        api_audit(req, c->api, audit, path ? p.rel : "");
    int rc = sbx_runtime_workspace_when_ready(c->api->rt, &c->clone, ws_ready, c, &e);
    if (rc < 0)
        return mcp_tool_error(c, "%s", e.msg);
    if (rc == 0) {
        c->wait = MCP_WAIT_WORKSPACE;
        return;
    }
    file_op(c);
}

static void begin_read_file(struct mcp_call *c, sbx_http_request *req)
{
    static const char *const fields[] = {"path", NULL};
    begin_files(c, req, fields, NULL);
}

static void begin_write_file(struct mcp_call *c, sbx_http_request *req)
{
    static const char *const fields[] = {"path", "content", NULL};
    json_t *content = json_object_get(c->args, "content");
    if (!json_is_string(content))
        return mcp_tool_error(c, "content is required, a string (the file's whole text)");
    begin_files(c, req, fields, "file_put");
}

static void begin_list_files(struct mcp_call *c, sbx_http_request *req)
{
    static const char *const fields[] = {"path", NULL};
    begin_files(c, req, fields, NULL);
}

static json_t *read_file(int ws, const struct sbx_ws_path *p, sbx_err *e)
{
    struct sbx_ws_download dl;
    if (sbx_ws_download_open(ws, p, &dl, e) < 0)
        return NULL;
    size_t want = dl.st.size < MCP_FILE_MAX ? dl.st.size : MCP_FILE_MAX;
    char *buf = malloc(want + 1);
    size_t got = 0;
    while (buf && got < want) {
        ssize_t n = sbx_ws_download_read(&dl, buf + got, want - got, e);
        if (n <= 0) {
            if (n < 0)
                got = SIZE_MAX;
            break;
        }
        got += (size_t)n;
    }
    sbx_ws_download_close(&dl);
    if (!buf || got == SIZE_MAX) {
        free(buf);
        if (!e->msg[0])
            sbx_err_set(e, ENOMEM, "%s", p->rel);
        return NULL;
    }
    /* NUL bytes: binary. Otherwise text, bad UTF-8 shown replaced. */
    json_t *text = memchr(buf, 0, got) ? NULL : sbx_json_text(buf, got);
    char note[SBX_WS_PATH_MAX + 200];
    json_t *r;
    if (!text) {
        snprintf(note, sizeof(note),
                 "%s is a binary file of %llu bytes: not shown (download it with GET "
                 "/runtime/files?path=…)",
                 p->rel, (unsigned long long)dl.st.size);
        r = mcp_text_content(note, false);
    } else {
        r = json_pack("{s:[{s:s, s:o}]}", "content", "type", "text", "text", text);
        if (r && got < dl.st.size) {
            snprintf(note, sizeof(note), "[shown up to %zu of %llu bytes]", got,
                     (unsigned long long)dl.st.size);
            json_array_append_new(json_object_get(r, "content"),
                                  json_pack("{s:s, s:s}", "type", "text", "text", note));
        }
    }
    free(buf);
    return r;
}

static json_t *write_file(struct mcp_call *c, int ws, uid_t uid, gid_t gid,
                          const struct sbx_ws_path *p, sbx_err *e)
{
    json_t *content = json_object_get(c->args, "content");
    size_t len = json_string_length(content);
    uint64_t quota = api_set(c->api)->workspace_quota_bytes;
    if (len > quota) {
        sbx_err_set(e, EFBIG,
                    "the content (%zu bytes) is larger than the workspace quota "
                    "(%llu bytes)",
                    len, (unsigned long long)quota);
        return NULL;
    }
    struct sbx_ws_upload up;
    if (sbx_ws_upload_begin(ws, p, uid, gid, &up, e) < 0)
        return NULL;
    if (sbx_ws_upload_write(&up, json_string_value(content), len, e) < 0) {
        sbx_ws_upload_abort(&up);
        return NULL;
    }
    if (sbx_ws_upload_commit(&up, e) < 0)
        return NULL;
    char text[SBX_WS_PATH_MAX + 64];
    snprintf(text, sizeof(text), "wrote %zu bytes to /%s", len, p->rel);
    return mcp_text_content(text, false);
}

static json_t *list_files(int ws, const struct sbx_ws_path *p, sbx_err *e)
{
    struct sbx_ws_listing l = {0};
    if (sbx_ws_list(ws, p, 1000, &l, e) < 0)
        return NULL;
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    if (out) {
        fprintf(out, "/%s: %zu entr%s%s\n", p->rel, l.n, l.n == 1 ? "y" : "ies",
                l.truncated ? " (the first 1000 shown)" : "");
        for (size_t i = 0; i < l.n; i++)
            fprintf(out, "%-7s %12llu  %s%s\n", sbx_ws_type_name(l.entries[i].st.type),
                    (unsigned long long)l.entries[i].st.size, l.entries[i].name,
                    l.entries[i].st.type == SBX_WS_DIR ? "/" : "");
        fclose(out);
    }
    sbx_ws_listing_free(&l);
    json_t *r = mcp_text_content(text ? text : "", false);
    free(text);
    return r;
}

static void file_op(struct mcp_call *c)
{
    sbx_err e = {0};
    struct sbx_ws_path p;
    json_t *path = json_object_get(c->args, "path");
    const char *ps = path ? json_string_value(path) : "/";
    int ws;
    uid_t uid;
    gid_t gid;
    if (sbx_ws_path_parse(ps, strlen(ps), &p, &e) < 0 ||
        sbx_runtime_workspace(c->api->rt, &c->clone, &ws, &uid, &gid, &e) < 0)
        return mcp_tool_error(c, "%s", e.msg);
    json_t *r;
    if (strcmp(c->tool->name, "read_file") == 0)
        r = read_file(ws, &p, &e);
    else if (strcmp(c->tool->name, "write_file") == 0)
        r = write_file(c, ws, uid, gid, &p, &e);
    else
        r = list_files(ws, &p, &e);
    close(ws);
    if (!r)
        return mcp_tool_error(c, "%s", e.msg[0] ? e.msg : "out of memory");
    mcp_call_result(c, r);
}

/* ---- sessions: start_session, stop_session ---- */

static void session_started(struct mcp_call *c)
{
    char text[300];
    snprintf(text, sizeof(text),
             "session %s is ready: give session \"%s\" to run_code and exec to run inside it",
             c->session, c->session);
    json_t *r = mcp_text_content(text, false);
    json_object_set_new(r, "structuredContent",
                        json_pack("{s:s, s:s}", "sessionId", c->session, "status", "ready"));
    mcp_call_result(c, r);
}

static void session_ready(void *ud, const sbx_err *err)
{
    struct mcp_call *c = ud;
    c->wait = MCP_WAIT_NONE;
    if (err)
        return mcp_tool_error(c, "session %s could not start: %s", c->session, err->msg);
    session_started(c);
}

/* The session argument (checked), or NULL when absent; -1 on a bad one. */
static int session_arg(struct mcp_call *c, const char **out, sbx_err *e)
{
    json_t *s = json_object_get(c->args, "session");
    *out = NULL;
    if (!s || json_is_null(s))
        return 0;
    if (!json_is_string(s))
        return sbx_err_set(e, EINVAL, "session must be a string");
    if (sbx_ws_segment_check("session", json_string_value(s), json_string_length(s), e) < 0)
        return -1;
    *out = json_string_value(s);
    return 0;
}

static void begin_start_session(struct mcp_call *c, sbx_http_request *req)
{
    static const char *const fields[] = {"session", NULL};
    struct sbx_api *api = c->api;
    sbx_err e = {0};
    const char *name;
    char id[SBX_ID_SIZE];
    if (sbx_json_check_fields(c->args, "arguments", fields, &e) < 0 ||
        session_arg(c, &name, &e) < 0 || api_request_clone(req, api, NULL, &c->clone, &e) < 0 ||
        (!name && sbx_id_new(id, &e) < 0))
        return mcp_tool_error(c, "%s", e.msg);
    snprintf(c->session, sizeof(c->session), "%s", name ? name : id);
    api_audit(req, api, "session_start", c->session);
    int rc = sbx_runtime_session_start(api->rt, &c->clone, c->session, session_ready, c, &e);
    if (rc < 0)
        return mcp_tool_error(c, "%s", e.msg);
    if (rc == 0) {
        c->wait = MCP_WAIT_SESSION;
        return;
    }
    /* Ready already: the runtime said nothing on the stream this time. */
    sbx_runtime_emit(api->rt, c->clone.tenant, c->session, "runtime_started",
                     json_pack("{s:s, s:s, s:s}", "runtimeId", c->session, "cloneId", c->clone.id,
                               "tenantCode", c->clone.tenant),
                     NULL);
    session_started(c);
}

static void begin_stop_session(struct mcp_call *c, sbx_http_request *req)
{
    static const char *const fields[] = {"session", NULL};
    struct sbx_api *api = c->api;
    sbx_err e = {0};
    const char *name;
    if (sbx_json_check_fields(c->args, "arguments", fields, &e) < 0 ||
        session_arg(c, &name, &e) < 0 || api_request_clone(req, api, NULL, &c->clone, &e) < 0)
        return mcp_tool_error(c, "%s", e.msg);
    if (!name)
        return mcp_tool_error(c, "session is required (the name start_session gave)");
    api_audit(req, api, "session_stop", name);
    if (sbx_runtime_session_stop(api->rt, &c->clone, name) < 0)
        return mcp_tool_error(c, "there is no live session '%s'", name);
    sbx_runtime_emit(api->rt, c->clone.tenant, name, "runtime_stopped",
                     json_pack("{s:s, s:s}", "runtimeId", name, "reason", "stopped"), NULL);
    char text[200];
    snprintf(text, sizeof(text), "session %s stopped: everything in it was killed", name);
    mcp_call_result(c, mcp_text_content(text, false));
}

/* ---- set_network ---- */

static void begin_set_network(struct mcp_call *c, sbx_http_request *req)
{
    static const char *const fields[] = {"session", "taskId", "default", "allow", "deny", NULL};
    struct sbx_api *api = c->api;
    sbx_err e = {0};
    const char *session;
    json_t *task = json_object_get(c->args, "taskId");
    if (sbx_json_check_fields(c->args, "arguments", fields, &e) < 0 ||
        session_arg(c, &session, &e) < 0)
        return mcp_tool_error(c, "%s", e.msg);
    if (!!session == !!task || (task && !json_is_string(task)))
        return mcp_tool_error(c, "give either session (a live session's name) or taskId (a "
                                 "running task's id), not both");
    json_t *net =
        json_pack("{s:O*, s:O*, s:O*}", "default", json_object_get(c->args, "default"), "allow",
                  json_object_get(c->args, "allow"), "deny", json_object_get(c->args, "deny"));
    struct parsed_task p = {.r = {.net = -1, .net_default = -1}};
    int rc = task_request_network(req, net, &p, &e);
    json_decref(net);
    if (rc == 0 && session && api_request_clone(req, api, NULL, &c->clone, &e) == 0) {
        api_audit(req, api, "session_network", session);
        rc = sbx_runtime_session_set_network(api->rt, &c->clone, session, p.r.net_default,
                                             p.r.allow, p.r.deny, &e);
    } else if (rc == 0 && task) {
        /* A tenant token reaches its own tenant's tasks only. */
        const sbx_identity *who = sbx_http_req_identity(req);
        struct sbx_store_task *t = NULL;
        const char *id = json_string_value(task);
        rc = sbx_store_task_get(api->store, id, who ? who->tenant : NULL, 0, &t, &e);
        sbx_store_task_free(t);
        if (rc == 0) {
            api_audit(req, api, "task_network", id);
            rc = sbx_runtime_set_network(api->rt, id, p.r.net_default, p.r.allow, p.r.deny, &e);
            if (rc < 0 && e.errnum == ENOENT)
                sbx_err_set(&e, ENOENT, "task %s is not running", id);
        } else if (e.errnum == ENOENT) {
            sbx_err_set(&e, ENOENT, "no task %s", id);
        }
    } else if (rc == 0) {
        rc = -1; /* the clone was refused */
    }
    task_request_free(&p);
    if (rc < 0)
        return mcp_tool_error(c, "%s", e.msg);
    char text[200];
    snprintf(text, sizeof(text), "the egress rules of %s %s apply to its new connections now",
             session ? "session" : "task", session ? session : json_string_value(task));
    mcp_call_result(c, mcp_text_content(text, false));
}

/* ---- skills: list_skills, run_skill ---- */

/* One line a skill: name, where from, version, actions, what SKILL.md says
 * of it, and why it cannot run when it cannot. */
static void put_skill(FILE *out, json_t *s)
{
    const char *v;
    size_t i;
    json_t *a;
    fprintf(out, "- %s (%s", json_string_value(json_object_get(s, "name")),
            (v = json_string_value(json_object_get(s, "source"))) ? v : "?");
    if ((v = json_string_value(json_object_get(s, "version"))))
        fprintf(out, ", version %s", v);
    fputs(")", out);
    json_t *actions = json_object_get(s, "actions");
    if (json_array_size(actions)) {
        fputs(" actions:", out);
        json_array_foreach(actions, i, a) fprintf(out, "%s %s", i ? "," : "", json_string_value(a));
    }
    if ((v = json_string_value(json_object_get(s, "description"))) && *v)
        fprintf(out, ": %s", v);
    if (!json_is_true(json_object_get(s, "enabled")))
        fprintf(out, " [cannot run: %s]",
                (v = json_string_value(json_object_get(s, "blockedReason"))) && *v
                    ? v
                    : "not runnable");
    fputc('\n', out);
}

static void skills_answer(struct mcp_call *c)
{
    json_t *all = sbx_skills_list(c->api->skills, &c->clone);
    if (!all)
        return mcp_tool_error(c, "out of memory");
    char *text = NULL;
    size_t len = 0, i;
    json_t *s;
    FILE *out = open_memstream(&text, &len);
    json_array_foreach(all, i, s)
    {
        sbx_skills_extend(c->api->skills, &c->clone, s);
        if (out)
            put_skill(out, s);
    }
    if (out) {
        if (!json_array_size(all))
            fputs("no skills are installed\n", out);
        fputs("Run one with run_skill {skill, action, args}.\n", out);
        fclose(out);
    }
    json_t *r = json_pack("{s:[{s:s, s:o}], s:b, s:{s:o}}", "content", "type", "text", "text",
                          sbx_json_text(text ? text : "", text ? len : 0), "isError", 0,
                          "structuredContent", "skills", all);
    free(text);
    if (!r)
        return mcp_tool_error(c, "out of memory");
    mcp_call_result(c, r);
}

static void skills_loaded(void *ud, const sbx_err *err)
{
    struct mcp_call *c = ud;
    c->wait = MCP_WAIT_NONE;
    if (err)
        return mcp_tool_error(c, "%s", err->msg);
    skills_answer(c);
}

static void begin_list_skills(struct mcp_call *c, sbx_http_request *req)
{
    static const char *const fields[] = {NULL};
    sbx_err e = {0};
    if (sbx_json_check_fields(c->args, "arguments", fields, &e) < 0 ||
        api_request_clone(req, c->api, NULL, &c->clone, &e) < 0)
        return mcp_tool_error(c, "%s", e.msg);
    if (!c->api->skills)
        return mcp_tool_error(c, "skills are not configured in this daemon");
    if (sbx_skills_when_loaded(c->api->skills, skills_loaded, c) == 0) {
        c->wait = MCP_WAIT_SKILLS;
        return;
    }
    skills_answer(c);
}

/* A skill's action as a task, as POST /runtime/exec {skill, action, args}
 * runs it: refused skills (unknown, blocked, an action it lacks) are tool
 * errors. */
static void begin_run_skill(struct mcp_call *c, sbx_http_request *req)
{
    static const char *const fields[] = {"skill", "action", "args",           "session",
                                         "stdin", "env",    "timeoutSeconds", NULL};
    sbx_err e = {0};
    if (sbx_json_check_fields(c->args, "arguments", fields, &e) < 0)
        return mcp_tool_error(c, "%s", e.msg);
    json_t *skill = json_object_get(c->args, "skill"), *action = json_object_get(c->args, "action");
    json_t *args = json_object_get(c->args, "args");
    if (!json_is_string(skill) || !json_is_string(action))
        return mcp_tool_error(c, "skill and action are required, both strings (list_skills "
                                 "shows them)");
    if (args && !json_is_null(args) && !json_is_array(args))
        return mcp_tool_error(c, "args must be a list of strings");
    json_t *body = json_pack("{s:O, s:O}", "skill", skill, "action", action);
    if (body && args && !json_is_null(args))
        json_object_set(body, "args", args);
    mcp_task_options(c->args, body);
    submit_task(c, req, body);
    json_decref(body);
}

/* ---- the table ---- */

#define SESSION_PROP                                                                               \
    "\"session\": {\"type\": \"string\", \"description\": \"Run inside this live session "         \
    "(from start_session): its /tmp and background processes persist between calls. Without "      \
    "it, a fresh sandbox is made for this call only.\"}"
#define TASK_PROPS                                                                                 \
    SESSION_PROP                                                                                   \
    ", \"timeoutSeconds\": {\"type\": \"number\", \"exclusiveMinimum\": 0, "                       \
    "\"description\": \"Kill it after this many seconds (default: the daemon's).\"}, "             \
    "\"stdin\": {\"type\": \"string\", \"description\": \"Text given on standard "                 \
    "input.\"}, \"env\": {\"type\": \"object\", \"additionalProperties\": {\"type\": "             \
    "\"string\"}, \"description\": \"Extra environment variables.\"}"

const struct mcp_tool mcp_tools[] = {
    {"run_code", "Run code",
     "Run a program in a language (python, node, shell, or another configured environment) in "
     "an isolated sandbox, with /workspace holding the caller's files. Returns the exit code, "
     "stdout and stderr (each shown up to 64 KiB, saying when output was cut).",
     "{\"type\": \"object\", \"properties\": {\"language\": {\"type\": \"string\", "
     "\"description\": \"python, node, shell, or another environment the daemon has\"}, "
     "\"code\": {\"type\": \"string\", \"description\": \"The program text.\"}, " TASK_PROPS
     "}, \"required\": [\"language\", \"code\"], \"additionalProperties\": false}",
     MCP_DESTRUCTIVE | MCP_OPEN_WORLD, begin_task},
    {"exec", "Run a command",
     "Run a command in an isolated sandbox: either command, a shell command line (run by "
     "/bin/sh -c), or argv, the program and its arguments. The working directory is /workspace. "
     "Returns the exit code, stdout and stderr (each shown up to 64 KiB).",
     "{\"type\": \"object\", \"properties\": {\"command\": {\"type\": \"string\", "
     "\"description\": \"A shell command line (give this or argv).\"}, \"argv\": {\"type\": "
     "\"array\", \"items\": {\"type\": \"string\"}, \"minItems\": 1, \"description\": \"The "
     "program and its arguments, run without a shell (give this or command).\"}, " TASK_PROPS
     "}, \"additionalProperties\": false}",
     MCP_DESTRUCTIVE | MCP_OPEN_WORLD, begin_task},
    {"read_file", "Read a file",
     "Read a text file of the workspace (shown up to 1 MiB). Paths are relative to /workspace; "
     "a leading / means /workspace.",
     "{\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\", \"description\": "
     "\"The file, e.g. src/main.py\"}}, \"required\": [\"path\"], \"additionalProperties\": "
     "false}",
     MCP_READ_ONLY | MCP_IDEMPOTENT, begin_read_file},
    {"write_file", "Write a file",
     "Create or replace a file of the workspace with the given text (parent directories are "
     "made). Tasks see it at /workspace/<path>.",
     "{\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\", \"description\": "
     "\"The file, e.g. data/input.csv\"}, \"content\": {\"type\": \"string\", \"description\": "
     "\"The whole new content.\"}}, \"required\": [\"path\", \"content\"], "
     "\"additionalProperties\": false}",
     MCP_DESTRUCTIVE | MCP_IDEMPOTENT, begin_write_file},
    {"list_files", "List files",
     "List a directory of the workspace: type, size and name of each entry (up to 1000).",
     "{\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\", \"description\": "
     "\"The directory (default: the workspace root)\"}}, \"additionalProperties\": false}",
     MCP_READ_ONLY | MCP_IDEMPOTENT, begin_list_files},
    {"start_session", "Start a session",
     "Start a live session: one sandbox that stays up, so that files in /tmp, installed "
     "packages and background processes persist across run_code and exec calls that name it. "
     "Returns its name. Stop it with stop_session (it also ends after a while idle).",
     "{\"type\": \"object\", \"properties\": {\"session\": {\"type\": \"string\", "
     "\"description\": \"A name for it (letters, digits, - _ .); default: a new id\"}}, "
     "\"additionalProperties\": false}",
     MCP_IDEMPOTENT, begin_start_session},
    {"stop_session", "Stop a session",
     "Stop a live session: every process in it is killed and its /tmp is gone (the workspace "
     "stays).",
     "{\"type\": \"object\", \"properties\": {\"session\": {\"type\": \"string\", "
     "\"description\": \"The session's name\"}}, \"required\": [\"session\"], "
     "\"additionalProperties\": false}",
     MCP_DESTRUCTIVE | MCP_IDEMPOTENT, begin_stop_session},
    {"set_network", "Change network rules",
     "Change the egress rules of a live session or a running task, for its new connections: "
     "default allow or deny, plus allow and deny rules (example.com, *.example.com, "
     "10.0.0.0/8, host:443). A tenant token may only narrow (deny rules, default deny).",
     "{\"type\": \"object\", \"properties\": {\"session\": {\"type\": \"string\", "
     "\"description\": \"A live session's name (give this or taskId)\"}, \"taskId\": {\"type\": "
     "\"string\", \"description\": \"A running task's id (give this or session)\"}, "
     "\"default\": {\"type\": \"string\", \"enum\": [\"allow\", \"deny\"]}, \"allow\": "
     "{\"type\": \"array\", \"items\": {\"type\": \"string\"}}, \"deny\": {\"type\": \"array\", "
     "\"items\": {\"type\": \"string\"}}}, \"additionalProperties\": false}",
     MCP_IDEMPOTENT, begin_set_network},
    {"list_skills", "List skills",
     "List the skills this caller can run: each one's name, where it comes from (builtin, "
     "shared, mapped), its active version, its actions and what it is for, and why it cannot "
     "run when it cannot. Run one with run_skill.",
     "{\"type\": \"object\", \"properties\": {}, \"additionalProperties\": false}",
     MCP_READ_ONLY | MCP_IDEMPOTENT, begin_list_skills},
    {"run_skill", "Run a skill",
     "Run an action of a skill (see list_skills) with its arguments, in the skill's own "
     "sandbox with the caller's /workspace. Returns the exit code, stdout and stderr (each "
     "shown up to 64 KiB); an unknown or blocked skill, or an action it lacks, is an error.",
     "{\"type\": \"object\", \"properties\": {\"skill\": {\"type\": \"string\", "
     "\"description\": \"The skill's name, e.g. ur-api\"}, \"action\": {\"type\": \"string\", "
     "\"description\": \"One of the skill's actions\"}, \"args\": {\"type\": \"array\", "
     "\"items\": {\"type\": \"string\"}, \"description\": \"The action's arguments.\"}, " TASK_PROPS
     "}, \"required\": [\"skill\", \"action\"], \"additionalProperties\": false}",
     MCP_DESTRUCTIVE | MCP_OPEN_WORLD, begin_run_skill},
};
const size_t mcp_tools_count = SBX_ARRAY_LEN(mcp_tools);

const struct mcp_tool *mcp_tool_find(const char *name)
{
    for (size_t i = 0; i < mcp_tools_count; i++)
        if (strcmp(mcp_tools[i].name, name) == 0)
            return &mcp_tools[i];
    return NULL;
}

json_t *mcp_tools_json(void)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < mcp_tools_count; i++) {
        json_error_t je;
        json_t *schema = json_loads(mcp_tools[i].schema, 0, &je);
        unsigned h = mcp_tools[i].hints;
        json_array_append_new(
            arr, json_pack("{s:s, s:s, s:s, s:o, s:{s:s, s:b, s:b, s:b, s:b}}", "name",
                           mcp_tools[i].name, "title", mcp_tools[i].title, "description",
                           mcp_tools[i].description, "inputSchema", schema ? schema : json_object(),
                           "annotations", "title", mcp_tools[i].title, "readOnlyHint",
                           !!(h & MCP_READ_ONLY), "destructiveHint", !!(h & MCP_DESTRUCTIVE),
                           "idempotentHint", !!(h & MCP_IDEMPOTENT), "openWorldHint",
                           !!(h & MCP_OPEN_WORLD)));
    }
    return arr;
}

void mcp_tool_abandon(struct mcp_call *c)
{
    struct sbx_runtime *rt = c->api->rt;
    switch (c->wait) {
    case MCP_WAIT_TASK:
        /* Nobody waits for its result any more: it stops. */
        sbx_runtime_forget(rt, c->task_id);
        sbx_runtime_cancel(rt, c->task_id, NULL);
        break;
    case MCP_WAIT_SESSION:
        sbx_runtime_session_unwait(rt, c);
        break;
    case MCP_WAIT_WORKSPACE:
        sbx_runtime_workspace_unwait(rt, c);
        break;
    case MCP_WAIT_SKILLS:
        sbx_skills_unwait(c->api->skills, c);
        break;
    case MCP_WAIT_NONE:
        break;
    }
    c->wait = MCP_WAIT_NONE;
}

void mcp_tool_cancel(struct mcp_call *c)
{
    if (c->wait == MCP_WAIT_TASK) {
        /* Its end (canceled) answers the call. */
        sbx_runtime_cancel(c->api->rt, c->task_id, NULL);
        return;
    }
    if (c->wait == MCP_WAIT_NONE)
        return;
    mcp_tool_abandon(c);
    mcp_tool_error(c, "cancelled by the client");
}
