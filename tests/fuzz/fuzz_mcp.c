/* libFuzzer target: a POST /mcp body as the MCP endpoint meets it
 * (api/mcp/message.c): one JSON-RPC 2.0 message checked and classified;
 * for a tools/call request, its params (tool name, arguments, progress
 * token); for run_code and exec, the arguments made into the task body
 * POST /runtime/exec takes (fuzz_task_request drives that parser).
 * Beyond no crash, leak or hang: a request has a method and a string or
 * integer id; params are an object or absent; a refusal says why; an
 * accepted call names one of our tools with object arguments; a task body
 * has what the task parser requires (language and code, or a command). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "api/mcp/message.h"

/* The tools of tools.c (its table needs the runtime: not linked here). */
static const char *const tools[] = {"run_code",    "exec",         "read_file",   "write_file",
                                    "list_files",  "start_session", "stop_session", "set_network",
                                    "list_skills", "run_skill"};

static bool known(const char *name)
{
    for (size_t i = 0; i < sizeof(tools) / sizeof(tools[0]); i++)
        if (strcmp(tools[i], name) == 0)
            return true;
    return false;
}

static void tools_call(json_t *params)
{
    const char *name;
    json_t *args, *token;
    char why[200] = "";
    if (mcp_call_params(params, known, &name, &args, &token, why, sizeof(why)) < 0) {
        if (!why[0])
            __builtin_trap();
        return;
    }
    if (!known(name) || (args && !json_is_object(args)) ||
        (token && !json_is_string(token) && !json_is_integer(token)))
        __builtin_trap();
    if (strcmp(name, "run_code") != 0 && strcmp(name, "exec") != 0)
        return;
    /* tools.c gives a tool without arguments an empty object. */
    json_t *a = args ? json_incref(args) : json_object();
    sbx_err e = {0};
    json_t *body = mcp_task_body(name, a, &e);
    if (!body) {
        if (!e.errnum || !e.msg[0])
            __builtin_trap();
    } else if (strcmp(name, "exec") == 0) {
        if (!json_array_size(json_object_get(body, "command")))
            __builtin_trap();
    } else if (!json_is_string(json_object_get(body, "language")) ||
               !json_is_string(json_object_get(body, "code"))) {
        __builtin_trap();
    }
    json_decref(body);
    json_decref(a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mcp_msg m;
    char why[300] = "";
    enum mcp_msg_kind kind = mcp_message_parse((const char *)data, size, &m, why, sizeof(why));
    if ((kind == MCP_MSG_PARSE_ERROR) != !m.root || (kind == MCP_MSG_PARSE_ERROR && !why[0]))
        __builtin_trap();
    if (m.id && !json_is_string(m.id) && !json_is_integer(m.id))
        __builtin_trap();
    if (m.params && !json_is_object(m.params))
        __builtin_trap();
    if (kind == MCP_MSG_REQUEST) {
        if (!m.method || !m.id)
            __builtin_trap();
        if (strcmp(m.method, "tools/call") == 0)
            tools_call(m.params);
    }
    json_decref(m.root);
    return 0;
}
