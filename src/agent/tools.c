/* The built-in tools: exec, python and node run as tasks in the session's
 * sandbox; skill runs a skill's action as a task of its own through skills/
 * (the sandbox its tier decides, its events on the session's stream);
 * read_file, write_file and list_files act on the clone's workspace
 * through workspace/ (paths resolved inside it by the kernel). A call that
 * cannot run (bad arguments, an unknown tool) ends as a tool error, fed back
 * like any result. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent_int.h"
#include "base/strv.h"
#include "skills/skills.h"
#include "workspace/files.h"

static const char tools_json[] =
    "["
    "{\"name\":\"exec\",\"description\":\"Run a command in the sandbox: a string is run by "
    "/bin/sh -c, an array is the argv.\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"command\":{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"type\":"
    "\"string\"},\"minItems\":1}]},\"timeoutSeconds\":{\"type\":\"number\",\"exclusiveMinimum\":0}"
    "},\"required\":[\"command\"],\"additionalProperties\":false}},"
    "{\"name\":\"python\",\"description\":\"Run Python code in the sandbox.\",\"parameters\":{"
    "\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\"}},\"required\":[\"code\"],"
    "\"additionalProperties\":false}},"
    "{\"name\":\"node\",\"description\":\"Run JavaScript code with Node.js in the sandbox.\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\"}},"
    "\"required\":[\"code\"],\"additionalProperties\":false}},"
    "{\"name\":\"read_file\",\"description\":\"Read a text file of the workspace.\",\"parameters\""
    ":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}},\"required\":[\"path\"]"
    ",\"additionalProperties\":false}},"
    "{\"name\":\"write_file\",\"description\":\"Write (create or replace) a file of the "
    "workspace.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":"
    "\"string\"},\"content\":{\"type\":\"string\"}},\"required\":[\"path\",\"content\"],"
    "\"additionalProperties\":false}},"
    "{\"name\":\"list_files\",\"description\":\"List a directory of the workspace.\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}},"
    "\"additionalProperties\":false}},"
    "{\"name\":\"skill\",\"description\":\"Run an action of an installed skill, in the "
    "sandbox its tier decides; its output is the result.\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"name\":{\"type\":\"string\"},\"action\":{\"type\":\"string\"},"
    "\"args\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},\"required\":[\"name\","
    "\"action\"],\"additionalProperties\":false}}"
    "]";

json_t *sbx_agent_tools(void)
{
    return json_loads(tools_json, 0, NULL);
}

json_t *ag_tools_for_model(struct ag_turn *t)
{
    json_t *all = sbx_agent_tools(), *out = json_array();
    json_t *ext = t->conv ? t->conv->tools : NULL;
    size_t i;
    json_t *k;
    if (ext)
        json_array_extend(all, ext);
    json_array_foreach(all, i, k)
    {
        json_t *desc = json_object_get(k, "description");
        json_t *params = json_object_get(k, "parameters");
        json_array_append_new(
            out, json_pack("{s:s, s:{s:O, s:o, s:o}}", "type", "function", "function", "name",
                           json_object_get(k, "name"), "description",
                           desc ? json_incref(desc) : json_string(""), "parameters",
                           params ? json_incref(params) : json_pack("{s:s}", "type", "object")));
    }
    json_decref(all);
    return out;
}

static json_t *external_tool(struct ag_call *c)
{
    json_t *ext = c->turn->conv ? c->turn->conv->tools : NULL;
    size_t i;
    json_t *k;
    json_array_foreach(ext, i, k) if (strcmp(json_string_value(json_object_get(k, "name")),
                                             c->name) == 0) return k;
    return NULL;
}

/* total: the size of the whole output, of which text holds len bytes. */
static void tool_end(struct ag_call *c, json_t *exit_code, const char *outcome, const char *text,
                     size_t len, uint64_t total, json_t *usage)
{
    struct ag_turn *t = c->turn;
    uint64_t cap = t->a->o.tool_output_limit;
    char note[96] = "";
    size_t keep = len;
    if (total > cap || len > cap) {
        keep = len < cap ? len : (size_t)cap;
        while (keep > 0 && ((unsigned char)text[keep] & 0xc0) == 0x80)
            keep--; /* not inside a UTF-8 sequence */
        snprintf(note, sizeof(note), "\n[output cut: %zu of %llu bytes shown]", keep,
                 (unsigned long long)total);
    }
    size_t nl = strlen(note);
    free(c->output);
    if ((c->output = malloc(keep + nl + 1))) {
        memcpy(c->output, text, keep);
        memcpy(c->output + keep, note, nl + 1);
    }
    const char *out = c->output ? c->output : "";
    ag_emit(t, "tool_call_end",
            json_pack("{s:s, s:s, s:o, s:s, s:o, s:b, s:o}", "callId", c->id, "name", c->name,
                      "exitCode", exit_code ? exit_code : json_null(), "outcome", outcome, "result",
                      sbx_json_text(out, strlen(out)), "truncated", total > cap || len > cap,
                      "usage", usage ? usage : json_object()));
    ag_conv_append(t, json_pack("{s:s, s:s, s:o}", "role", "tool", "tool_call_id", c->id, "content",
                                sbx_json_text(out, strlen(out))));
    c->ended = true;
    if (c->waiting) {
        c->waiting = false;
        t->running--;
    }
}

void ag_tool_end(struct ag_call *c, json_t *exit_code, const char *outcome, const char *text,
                 size_t len, json_t *usage)
{
    tool_end(c, exit_code, outcome, text, len, len, usage);
}

static void tool_error(struct ag_call *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void tool_error(struct ag_call *c, const char *fmt, ...)
{
    char msg[600] = "error: ";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + 7, sizeof(msg) - 7, fmt, ap);
    va_end(ap);
    ag_tool_end(c, json_null(), "tool_error", msg, strlen(msg), NULL);
}

/* ---- tasks: exec, python, node ---- */

static void on_task_done(void *ud, const struct sbx_store_task *rec)
{
    struct ag_call *c = ud;
    struct ag_turn *t = c->turn;
    json_error_t je;
    json_t *r = rec->result ? json_loads(rec->result, 0, &je) : NULL;
    json_t *outcome = json_object_get(r, "outcome");
    json_t *usage = json_pack(
        "{s:O*, s:O*, s:O*}", "wallSeconds", json_object_get(r, "wallSeconds"), "cpuSeconds",
        json_object_get(r, "cpuSeconds"), "peakMemoryBytes", json_object_get(r, "peakMemoryBytes"));
    const char *oc = json_is_string(outcome) ? json_string_value(outcome) : "failed";
    /* What the model reads: stdout, then stderr marked as such, then how it
     * ended when that was not an exit. */
    size_t n = rec->stdout_len + rec->stderr_len + 128;
    char *text = malloc(n);
    size_t len = 0;
    if (text) {
        memcpy(text, rec->stdout_data, rec->stdout_len);
        len = rec->stdout_len;
        if (rec->stderr_len) {
            len += (size_t)snprintf(text + len, n - len, "%s[stderr]\n",
                                    len && text[len - 1] != '\n' ? "\n" : "");
            memcpy(text + len, rec->stderr_data, rec->stderr_len);
            len += rec->stderr_len;
        }
        if (strcmp(oc, "exited") != 0)
            len += (size_t)snprintf(text + len, n - len, "%s[%s%s%s]",
                                    len && text[len - 1] != '\n' ? "\n" : "", oc,
                                    rec->error && *rec->error ? ": " : "",
                                    rec->error && *rec->error ? "see exitCode" : "");
    }
    c->task_id[0] = '\0';
    json_t *code = json_object_get(r, "exitCode");
    ag_tool_end(c, code ? json_incref(code) : json_null(), oc, text ? text : "", text ? len : 0,
                usage);
    free(text);
    json_decref(r);
    ag_turn_advance(t);
}

/* Submit c's task: 0 when it runs, 1 when it ended at once as a tool error. */
static int submit(struct ag_call *c, const struct sbx_task_request *req)
{
    struct ag_turn *t = c->turn;
    sbx_err e = {0};
    /* Never without the session: the session's sandbox (or, for a skill,
     * its stream), or not at all. */
    if (!sbx_runtime_session_live(t->a->o.rt, &t->clone, t->session)) {
        tool_error(c, "%s: session '%s' is not live any more (stopped, or its idle timeout)",
                   c->name, t->session);
        return 1;
    }
    if (sbx_runtime_submit(t->a->o.rt, req, on_task_done, c, c->task_id, &e) < 0) {
        char msg[600];
        c->task_id[0] = '\0';
        tool_error(c, "%s could not run: %s", c->name, sbx_err_format(&e, msg, sizeof(msg)));
        return 1;
    }
    return 0;
}

static int task_tool(struct ag_call *c)
{
    struct ag_turn *t = c->turn;
    const char *argv_sh[] = {"/bin/sh", "-c", NULL, NULL};
    const char **argv = NULL;
    struct sbx_task_request req = {
        .clone = t->clone, .session = t->session, .net = -1, .net_default = -1, .call_id = c->id};
    if (strcmp(c->name, "exec") == 0) {
        json_t *cmd = json_object_get(c->args, "command");
        json_t *to = json_object_get(c->args, "timeoutSeconds");
        if (to && (!json_is_number(to) || json_number_value(to) <= 0)) {
            tool_error(c, "exec: timeoutSeconds must be a positive number");
            return 1;
        }
        req.timeout_s = to ? json_number_value(to) : 0;
        if (json_is_string(cmd) && json_string_length(cmd)) {
            argv_sh[2] = json_string_value(cmd);
            req.argv = argv_sh;
        } else if (json_is_array(cmd) && json_array_size(cmd) > 0 && json_array_size(cmd) < 4096) {
            argv = calloc(json_array_size(cmd) + 1, sizeof(*argv));
            size_t i;
            json_t *a;
            json_array_foreach(cmd, i, a)
            {
                if (!json_is_string(a)) {
                    free(argv);
                    tool_error(c, "exec: command[%zu] must be a string", i);
                    return 1;
                }
                if (argv)
                    argv[i] = json_string_value(a);
            }
            if (!argv) {
                tool_error(c, "exec: out of memory");
                return 1;
            }
            req.argv = argv;
        } else {
            tool_error(c, "exec: command must be a string (run by /bin/sh -c) or a non-empty "
                          "array of strings (the argv)");
            return 1;
        }
    } else {
        json_t *code = json_object_get(c->args, "code");
        if (!json_is_string(code)) {
            tool_error(c, "%s: code must be a string", c->name);
            return 1;
        }
        req.language = c->name;
        req.code = json_string_value(code);
    }
    /* as for POST /runtime/exec: a shared or mapped skill runs only as a
     * skill, in its tier's sandbox */
    sbx_err e = {0};
    int rc = 1;
    if (t->a->o.skills && sbx_skills_check_command(t->a->o.skills, req.argv, req.code, &e) < 0)
        tool_error(c, "%s: %s (the skill tool runs a skill)", c->name, e.msg);
    else
        rc = submit(c, &req);
    free(argv);
    return rc;
}

static bool string_ok(json_t *v)
{
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

/* skill {name, action, args}: the skill's task, as POST /runtime/exec
 * {"skill", "action", "args"} runs it (its tier's sandbox, never the
 * session's; its events on the session's stream). A refusal is a tool error. */
static int skill_tool(struct ag_call *c)
{
    struct ag_turn *t = c->turn;
    json_t *name = json_object_get(c->args, "name"), *action = json_object_get(c->args, "action");
    json_t *args = json_object_get(c->args, "args");
    size_t n = json_is_array(args) ? json_array_size(args) : 0;
    if (!string_ok(name) || !string_ok(action)) {
        tool_error(c, "skill: name and action must be strings without NUL");
        return 1;
    }
    if (args && !json_is_null(args) && (!json_is_array(args) || n > 4096)) {
        tool_error(c, "skill: args must be an array of strings");
        return 1;
    }
    if (!t->a->o.skills) {
        tool_error(c, "skill: skills are not configured in this daemon");
        return 1;
    }
    const char **argv = calloc(n + 1, sizeof(*argv));
    if (!argv) {
        tool_error(c, "skill: out of memory");
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(args, i);
        if (!string_ok(a)) {
            free(argv);
            tool_error(c, "skill: args[%zu] must be a string without NUL", i);
            return 1;
        }
        argv[i] = json_string_value(a);
    }
    struct sbx_task_request req = {
        .clone = t->clone, .session = t->session, .net = -1, .net_default = -1, .call_id = c->id};
    struct sbx_skill_task hold;
    sbx_err e = {0};
    int rc = 1;
    if (sbx_skills_task(t->a->o.skills, json_string_value(name), json_string_value(action), argv,
                        &req, &hold, &e) < 0) {
        char msg[600];
        tool_error(c, "skill: %s",
                   e.errnum == EINVAL || e.errnum == EAGAIN ? e.msg
                                                            : sbx_err_format(&e, msg, sizeof(msg)));
    } else {
        rc = submit(c, &req);
    }
    sbx_skill_task_free(&hold);
    free(argv);
    return rc;
}

/* ---- files of the workspace ---- */

static int file_path(struct ag_call *c, bool required, struct sbx_ws_path *p)
{
    json_t *path = json_object_get(c->args, "path");
    const char *s = json_is_string(path) ? json_string_value(path) : NULL;
    if (!path && !required)
        s = "";
    if (!s) {
        tool_error(c, "%s: path must be a string", c->name);
        return -1;
    }
    sbx_err e = {0};
    char msg[600];
    if (sbx_ws_path_parse(s, strlen(s), p, &e) < 0) {
        tool_error(c, "%s: %s", c->name, sbx_err_format(&e, msg, sizeof(msg)));
        return -1;
    }
    return 0;
}

static void file_tool(struct ag_call *c)
{
    struct ag_turn *t = c->turn;
    bool list = strcmp(c->name, "list_files") == 0;
    struct sbx_ws_path p;
    if (file_path(c, !list, &p) < 0)
        return;
    int ws = -1;
    uid_t uid;
    gid_t gid;
    sbx_err e = {0};
    char msg[600];
    if (sbx_runtime_workspace(t->a->o.rt, &t->clone, &ws, &uid, &gid, &e) < 0) {
        tool_error(c, "%s: %s", c->name, sbx_err_format(&e, msg, sizeof(msg)));
        return;
    }
    if (list) {
        struct sbx_ws_listing l = {0};
        if (sbx_ws_list(ws, &p, 1000, &l, &e) < 0) {
            tool_error(c, "list_files: %s", sbx_err_format(&e, msg, sizeof(msg)));
        } else {
            size_t cap = 64, len = 0;
            char *text = malloc(cap);
            for (size_t i = 0; text && i < l.n; i++) {
                size_t need = strlen(l.entries[i].name) + 48;
                if (len + need > cap) {
                    char *q = realloc(text, cap = 2 * (len + need));
                    if (!q) {
                        free(text);
                        text = NULL;
                        break;
                    }
                    text = q;
                }
                len += (size_t)snprintf(text + len, cap - len, "%s%s\t%llu\n", l.entries[i].name,
                                        l.entries[i].st.type == SBX_WS_DIR ? "/" : "",
                                        (unsigned long long)l.entries[i].st.size);
            }
            if (text && l.truncated && len + 32 < cap)
                len += (size_t)snprintf(text + len, cap - len, "[more entries left out]\n");
            ag_tool_end(c, json_integer(0), "exited", text ? text : "", text ? len : 0, NULL);
            free(text);
            sbx_ws_listing_free(&l);
        }
    } else if (strcmp(c->name, "read_file") == 0) {
        struct sbx_ws_download dl;
        if (sbx_ws_download_open(ws, &p, &dl, &e) < 0) {
            tool_error(c, "read_file: %s", sbx_err_format(&e, msg, sizeof(msg)));
        } else {
            /* Past the output bound is never fed back: not even read. */
            uint64_t want =
                dl.st.size < t->a->o.tool_output_limit ? dl.st.size : t->a->o.tool_output_limit;
            char *buf = malloc(want + 1);
            size_t got = 0;
            ssize_t n = 1;
            while (buf && got < want &&
                   (n = sbx_ws_download_read(&dl, buf + got, want - got, &e)) > 0)
                got += (size_t)n;
            if (!buf || n < 0)
                tool_error(c, "read_file: %s",
                           buf ? sbx_err_format(&e, msg, sizeof(msg)) : "out of memory");
            else
                tool_end(c, json_integer(0), "exited", buf, got, dl.st.size, NULL);
            free(buf);
            sbx_ws_download_close(&dl);
        }
    } else {
        json_t *content = json_object_get(c->args, "content");
        struct sbx_ws_upload up;
        if (!json_is_string(content))
            tool_error(c, "write_file: content must be a string");
        else if (sbx_ws_upload_begin(ws, &p, uid, gid, &up, &e) < 0 ||
                 sbx_ws_upload_write(&up, json_string_value(content), json_string_length(content),
                                     &e) < 0 ||
                 sbx_ws_upload_commit(&up, &e) < 0) {
            sbx_ws_upload_abort(&up);
            tool_error(c, "write_file: %s", sbx_err_format(&e, msg, sizeof(msg)));
        } else {
            snprintf(msg, sizeof(msg), "wrote %zu bytes to %s", json_string_length(content),
                     json_string_value(json_object_get(c->args, "path")));
            ag_tool_end(c, json_integer(0), "exited", msg, strlen(msg), NULL);
        }
    }
    close(ws);
}

int ag_tool_start(struct ag_call *c)
{
    struct ag_turn *t = c->turn;
    json_t *ext = c->error ? NULL : external_tool(c);
    c->external = ext != NULL;
    json_t *d = json_pack("{s:s, s:s, s:o}", "callId", c->id, "name", c->name, "arguments",
                          c->shown ? json_incref(c->shown) : json_object());
    if (c->external)
        json_object_set_new(d, "external", json_true());
    ag_emit(t, "tool_call_start", d);
    if (c->error) {
        tool_error(c, "%s", c->error);
        return 1;
    }
    if (c->external)
        return 0; /* the caller's tool_result ends it */
    static const char *const tasks[] = {"exec", "python", "node"};
    static const char *const files[] = {"read_file", "write_file", "list_files"};
    for (size_t i = 0; i < 3; i++)
        if (strcmp(c->name, tasks[i]) == 0)
            return task_tool(c);
    if (strcmp(c->name, "skill") == 0)
        return skill_tool(c);
    for (size_t i = 0; i < 3; i++)
        if (strcmp(c->name, files[i]) == 0) {
            file_tool(c);
            return 1;
        }
    tool_error(c,
               "unknown tool '%s' (the tools are exec, python, node, skill, read_file, "
               "write_file, list_files%s)",
               c->name, t->conv && json_array_size(t->conv->tools) ? " and the session's own" : "");
    return 1;
}
