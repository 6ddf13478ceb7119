/* The MCP messages as data: a POST's body checked as one JSON-RPC 2.0
 * message, the params of tools/call, and the arguments of the task tools
 * made into a task body; no request, call or runtime is touched. mcp.c and
 * tools.c act on what these return; tests/fuzz/fuzz_mcp drives them
 * directly. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

enum mcp_msg_kind {
    MCP_MSG_PARSE_ERROR,  /* not JSON: 400, -32700 */
    MCP_MSG_BATCH,        /* an array: 400, -32600 */
    MCP_MSG_INVALID,      /* not a JSON-RPC 2.0 message: 400, -32600 (id when usable) */
    MCP_MSG_NOTIFICATION, /* no id, or no method (a response): 202 */
    MCP_MSG_REQUEST,      /* method and id: answered */
};

/* A message: root owns the rest (borrowed from it). */
struct mcp_msg {
    json_t *root;
    const char *method; /* NULL for a response */
    json_t *id;         /* a string or an integer, or NULL */
    json_t *params;     /* an object, or NULL */
};

/* Parse body into m (m->root to be json_decref'd by the caller, NULL when
 * not JSON); why says what is wrong with a PARSE_ERROR. */
enum mcp_msg_kind mcp_message_parse(const char *body, size_t len, struct mcp_msg *m, char *why,
                                    size_t why_len);

/* The params of tools/call: its tool's name (known() says whether we have
 * it), the arguments (NULL when none or null: no arguments) and the
 * progress token (NULL when none usable). -1 with why when refused. */
int mcp_call_params(json_t *params, bool (*known)(const char *name), const char **name,
                    json_t **args, json_t **progress, char *why, size_t why_len);

/* The arguments of run_code or exec (tool) as the body of POST
 * /runtime/exec (a new reference); NULL with err set when refused. */
/* Copy a task tool's shared optional arguments (session, timeoutSeconds,
 * stdin, env) into body, as POST /runtime/exec names them. */
void mcp_task_options(json_t *args, json_t *body);
json_t *mcp_task_body(const char *tool, json_t *args, sbx_err *err);
