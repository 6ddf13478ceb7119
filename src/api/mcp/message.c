/* The MCP messages as data (message.h): what mcp.c and tools.c check of a
 * message and of a tool call before they act. */
#include "api/mcp/message.h"

#include <stdio.h>
#include <string.h>

#include "api/json.h"

enum mcp_msg_kind mcp_message_parse(const char *body, size_t len, struct mcp_msg *m, char *why,
                                    size_t why_len)
{
    json_error_t je;
    *m = (struct mcp_msg){0};
    if (!(m->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je))) {
        snprintf(why, why_len, "parse error: body:%d:%d: %s", je.line, je.column, je.text);
        return MCP_MSG_PARSE_ERROR;
    }
    json_t *method = json_object_get(m->root, "method"), *id = json_object_get(m->root, "id");
    json_t *params = json_object_get(m->root, "params");
    const char *version = json_string_value(json_object_get(m->root, "jsonrpc"));
    m->method = json_string_value(method);
    m->id = json_is_string(id) || json_is_integer(id) ? id : NULL;
    m->params = json_is_object(params) ? params : NULL;
    if (json_is_array(m->root))
        return MCP_MSG_BATCH;
    if (!json_is_object(m->root) || !version || strcmp(version, "2.0") != 0 ||
        (method && !m->method) || (id && !m->id) || (params && !m->params))
        return MCP_MSG_INVALID;
    return m->method && m->id ? MCP_MSG_REQUEST : MCP_MSG_NOTIFICATION;
}

int mcp_call_params(json_t *params, bool (*known)(const char *name), const char **name,
                    json_t **args, json_t **progress, char *why, size_t why_len)
{
    json_t *n = json_object_get(params, "name");
    json_t *a = json_object_get(params, "arguments");
    *name = json_string_value(n);
    *args = *progress = NULL;
    if (!*name)
        return snprintf(why, why_len, "params.name must be a string"), -1;
    if (!known(*name))
        return snprintf(why, why_len, "unknown tool '%.100s'", *name), -1;
    if (a && !json_is_null(a) && !json_is_object(a))
        return snprintf(why, why_len, "params.arguments must be an object"), -1;
    *args = json_is_object(a) ? a : NULL;
    json_t *token = json_object_get(json_object_get(params, "_meta"), "progressToken");
    if (json_is_string(token) || json_is_integer(token))
        *progress = token;
    return 0;
}

/* (message.h) */
void mcp_task_options(json_t *args, json_t *body)
{
    static const struct {
        const char *arg, *field;
    } map[] = {{"session", "sessionID"},
               {"timeoutSeconds", "timeoutSeconds"},
               {"stdin", "stdin"},
               {"env", "env"}};
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        json_t *v = json_object_get(args, map[i].arg);
        if (v && !json_is_null(v))
            json_object_set(body, map[i].field, v);
    }
}

static json_t *run_code_body(json_t *args, sbx_err *err)
{
    static const char *const fields[] = {"language", "code", "session", "timeoutSeconds",
                                         "stdin",    "env",  NULL};
    if (sbx_json_check_fields(args, "arguments", fields, err) < 0)
        return NULL;
    json_t *lang = json_object_get(args, "language"), *code = json_object_get(args, "code");
    if (!json_is_string(lang) || !json_is_string(code))
        return sbx_err_set(err, EINVAL, "language and code are required, both strings"), NULL;
    return json_pack("{s:O, s:O}", "language", lang, "code", code);
}

static json_t *exec_body(json_t *args, sbx_err *err)
{
    static const char *const fields[] = {"command", "argv", "session", "timeoutSeconds",
                                         "stdin",   "env",  NULL};
    if (sbx_json_check_fields(args, "arguments", fields, err) < 0)
        return NULL;
    json_t *cmd = json_object_get(args, "command"), *argv = json_object_get(args, "argv");
    if (!!cmd == !!argv)
        return sbx_err_set(err, EINVAL,
                           "give either command (a shell command line) or argv (a list "
                           "of strings), not both"),
               NULL;
    if (cmd && !json_is_string(cmd))
        return sbx_err_set(err, EINVAL, "command must be a string (a shell command line)"), NULL;
    if (argv && (!json_is_array(argv) || !json_array_size(argv)))
        return sbx_err_set(err, EINVAL, "argv must be a non-empty list of strings"), NULL;
    if (cmd)
        return json_pack("{s:[s, s, O]}", "command", "/bin/sh", "-c", cmd);
    return json_pack("{s:O}", "command", argv);
}

json_t *mcp_task_body(const char *tool, json_t *args, sbx_err *err)
{
    json_t *body = strcmp(tool, "exec") == 0 ? exec_body(args, err) : run_code_body(args, err);
    if (body)
        mcp_task_options(args, body);
    else if (!err->errnum)
        sbx_err_set(err, ENOMEM, "the task's body");
    return body;
}
