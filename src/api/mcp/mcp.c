/* MCP's Streamable HTTP transport on POST /mcp: one JSON-RPC message per
 * POST. A notification or a response is taken with 202; a request is
 * answered with one JSON body, or, for a tools/call that carries a
 * progressToken from a client that reads event streams, with an event
 * stream: progress notifications (the task's output as it comes), then the
 * result. GET /mcp is 405 (no stream opened by the server: the router says
 * so). The server keeps no MCP session state: the Mcp-Session-Id it gives
 * at initialize only scopes cancellation (with the token's name), so a
 * restart loses nothing but the calls in flight. */
#include "api/mcp/mcp.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/mcp/mcp_int.h"
#include "api/mcp/message.h"
#include "base/metrics.h"

#define MCP_SERVER_VERSION "0.1.0"
/* An event stream holds a whole result (outputs are cut for the model well
 * below this) plus the progress notifications still unread. */
#define MCP_SSE_BUFFER (4u << 20)
/* A client that hangs up mid-stream is noticed at once (the server watches
 * every stream's connection); the heartbeat keeps proxies from timing out. */
#define MCP_HEARTBEAT_MS 5000

/* Newest first: an unknown version asked for gets the newest. */
static const char *const versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

static const struct sbx_metric m_calls = {
    .name = "sandbox_mcp_tool_calls_total",
    .help = "MCP tool calls answered, by tool and by whether they failed.",
    .kind = SBX_METRIC_COUNTER,
    .labels = {"tool", "result"}};

static bool version_known(const char *v)
{
    for (size_t i = 0; i < SBX_ARRAY_LEN(versions); i++)
        if (strcmp(v, versions[i]) == 0)
            return true;
    return false;
}

static json_t *rpc_error(const json_t *id, int code, const char *message)
{
    return json_pack("{s:s, s:O?, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id, "error", "code", code,
                     "message", message);
}

static json_t *rpc_result(const json_t *id, json_t *result)
{
    return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
}

/* ---- the calls in flight ---- */

void mcp_call_free(struct mcp_call *c)
{
    for (struct mcp_call **p = &c->api->mcp_calls; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    if (c->subscribed)
        sbx_runtime_unsubscribe(c->api->rt, &c->sub);
    json_decref(c->id);
    json_decref(c->progress);
    json_decref(c->args);
    free(c);
}

json_t *mcp_text_content(const char *text, bool is_error)
{
    json_t *r = json_pack("{s:[{s:s, s:o}]}", "content", "type", "text", "text",
                          sbx_json_text(text, strlen(text)));
    if (r && is_error)
        json_object_set_new(r, "isError", json_true());
    return r;
}

/* The result in the stream, or, when even that does not fit, a short error
 * the model can act on. */
static void stream_result(struct mcp_call *c, json_t *msg)
{
    sbx_err e = {0};
    if (sbx_sse_send_json(c->sse, NULL, NULL, msg, &e) < 0) {
        char text[600];
        snprintf(text, sizeof(text), "the result did not fit in the event stream (%.300s)%s%s",
                 e.msg, c->task_id[0] ? "; the task's record: GET /runtime/tasks/" : "",
                 c->task_id);
        json_t *small = rpc_result(c->id, mcp_text_content(text, true));
        sbx_sse_send_json(c->sse, NULL, NULL, small, NULL);
        json_decref(small);
    }
    sbx_sse_close(c->sse);
    c->sse = NULL;
}

void mcp_call_result(struct mcp_call *c, json_t *result)
{
    json_t *err = json_object_get(result, "isError");
    sbx_metric_add(&m_calls, 1, c->tool->name, json_is_true(err) ? "error" : "ok");
    json_t *msg = rpc_result(c->id, result);
    if (c->sse && msg)
        stream_result(c, msg);
    else if (c->sse)
        stream_result(c, json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", c->id,
                                   "error", "code", -32603, "message", "out of memory"));
    else if (c->req)
        sbx_http_respond_json(c->req, 200, json_incref(msg));
    c->req = NULL;
    json_decref(msg);
    if (c->submitting)
        c->ended = true; /* the caller of submit frees it */
    else
        mcp_call_free(c);
}

void mcp_tool_error(struct mcp_call *c, const char *fmt, ...)
{
    char text[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    mcp_call_result(c, mcp_text_content(text, true));
}

void mcp_call_progress(struct mcp_call *c, double add, const char *message)
{
    if (!c->sse || !c->progress)
        return;
    /* Keep room for the result: progress is a courtesy, the result is not. */
    if (sbx_sse_buffered(c->sse) > sbx_sse_capacity(c->sse) / 4)
        return;
    c->progress_sent += add;
    json_t *n = json_pack("{s:s, s:s, s:{s:O, s:f, s:s}}", "jsonrpc", "2.0", "method",
                          "notifications/progress", "params", "progressToken", c->progress,
                          "progress", c->progress_sent, "message", message);
    if (n)
        sbx_sse_send_json(c->sse, NULL, NULL, n, NULL);
    json_decref(n);
}

/* The client went away: what the call waited for is stopped. */
static void on_req_gone(sbx_http_request *req, void *ud)
{
    struct mcp_call *c = ud;
    c->req = NULL;
    mcp_tool_abandon(c);
    mcp_call_free(c);
}

static void on_sse_close(sbx_sse *sse, void *ud)
{
    struct mcp_call *c = ud;
    c->sse = NULL;
    mcp_tool_abandon(c);
    mcp_call_free(c);
}

/* Who may cancel a call: the same MCP session with the same token. */
static void owner_of(sbx_http_request *req, char *out, size_t len)
{
    const char *session = sbx_http_req_header(req, "Mcp-Session-Id");
    const sbx_identity *who = sbx_http_req_identity(req);
    snprintf(out, len, "%.100s|%.90s", session ? session : "", who && who->name ? who->name : "");
}

/* ---- the methods ---- */

static json_t *initialize(sbx_http_request *req, json_t *params)
{
    const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
    const char *v = asked && version_known(asked) ? asked : versions[0];
    char id[SBX_ID_SIZE];
    if (sbx_id_new(id, NULL) == 0)
        sbx_http_add_header(req, "Mcp-Session-Id", id);
    return json_pack(
        "{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", v, "capabilities", "tools",
        "listChanged", 0, "serverInfo", "name", "sandboxd", "title", "sandbox", "version",
        MCP_SERVER_VERSION, "instructions",
        "Runs code and commands in isolated Linux sandboxes. Files live in the caller's "
        "workspace (/workspace inside every sandbox); a session keeps one sandbox alive "
        "(its /tmp, its processes) across calls until stop_session or idleness.");
}

static bool tool_known(const char *name)
{
    return mcp_tool_find(name) != NULL;
}

static void tools_call(sbx_http_request *req, struct sbx_api *api, const json_t *id, json_t *params)
{
    const char *name;
    json_t *args, *token;
    char msg[200];
    if (mcp_call_params(params, tool_known, &name, &args, &token, msg, sizeof(msg)) < 0)
        return (void)sbx_http_respond_json(req, 200, rpc_error(id, -32602, msg));
    struct mcp_call *c = calloc(1, sizeof(*c));
    if (!c)
        return (void)sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
    c->api = api;
    c->tool = mcp_tool_find(name);
    c->id = json_deep_copy(id);
    c->args = args ? json_incref(args) : json_object();
    c->progress = json_incref(token);
    owner_of(req, c->owner, sizeof(c->owner));
    c->next = api->mcp_calls;
    api->mcp_calls = c;
    const char *accept = sbx_http_req_header(req, "Accept");
    if (c->progress && accept && strstr(accept, "text/event-stream")) {
        sbx_sse_opts o = {.on_close = on_sse_close,
                          .ud = c,
                          .heartbeat_ms = MCP_HEARTBEAT_MS,
                          .buffer = MCP_SSE_BUFFER};
        if (!(c->sse = sbx_http_respond_sse(req, &o))) {
            mcp_call_free(c);
            return;
        }
    } else {
        c->req = req;
        sbx_http_req_defer(req, on_req_gone, c);
    }
    c->tool->begin(c, req);
}

/* notifications/cancelled: the call it names stops (its task is
 * cancelled); its result still closes the POST that asked. */
static void cancelled(sbx_http_request *req, struct sbx_api *api, json_t *params)
{
    json_t *rid = json_object_get(params, "requestId");
    char owner[200];
    owner_of(req, owner, sizeof(owner));
    for (struct mcp_call *c = api->mcp_calls; c; c = c->next) {
        if (c->canceled || strcmp(c->owner, owner) != 0 || !json_equal(c->id, rid))
            continue;
        c->canceled = true;
        api_audit(req, api, "mcp_cancel", c->task_id[0] ? c->task_id : c->tool->name);
        mcp_tool_cancel(c);
        return;
    }
}

/* The Origin of a browser's request must be the daemon itself (DNS
 * rebinding); other clients send none. */
static bool origin_ok(sbx_http_request *req)
{
    const char *origin = sbx_http_req_header(req, "Origin");
    const char *host = sbx_http_req_header(req, "Host");
    if (!origin)
        return true;
    const char *p = strstr(origin, "://");
    return p && host && strcasecmp(p + 3, host) == 0;
}

void sbx_mcp_post(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    const char *pv = sbx_http_req_header(req, "MCP-Protocol-Version");
    char msg[300];
    if (!origin_ok(req))
        return (void)sbx_http_respond_json(
            req, 403, rpc_error(NULL, -32600, "this Origin may not use the MCP endpoint"));
    if (pv && !version_known(pv)) {
        snprintf(msg, sizeof(msg), "MCP-Protocol-Version %.40s is not supported (newest: %s)", pv,
                 versions[0]);
        return (void)sbx_http_respond_json(req, 400, rpc_error(NULL, -32600, msg));
    }
    size_t len;
    const char *body = sbx_http_req_body(req, &len);
    struct mcp_msg m;
    enum mcp_msg_kind kind = mcp_message_parse(body, len, &m, msg, sizeof(msg));
    const char *name = m.method;
    if (kind == MCP_MSG_PARSE_ERROR)
        sbx_http_respond_json(req, 400, rpc_error(NULL, -32700, msg));
    else if (kind == MCP_MSG_BATCH)
        sbx_http_respond_json(req, 400,
                              rpc_error(NULL, -32600,
                                        "batches are not supported: one message "
                                        "per POST"));
    else if (kind == MCP_MSG_INVALID)
        sbx_http_respond_json(req, 400, rpc_error(m.id, -32600, "not a JSON-RPC 2.0 request"));
    else if (kind == MCP_MSG_NOTIFICATION) {
        /* A notification, or a response to a request we never send. */
        if (name && strcmp(name, "notifications/cancelled") == 0)
            cancelled(req, api, m.params);
        sbx_http_respond_data(req, 202, "application/json", "", 0);
    } else if (strcmp(name, "initialize") == 0)
        sbx_http_respond_json(req, 200, rpc_result(m.id, initialize(req, m.params)));
    else if (strcmp(name, "ping") == 0)
        sbx_http_respond_json(req, 200, rpc_result(m.id, json_object()));
    else if (strcmp(name, "tools/list") == 0)
        sbx_http_respond_json(req, 200,
                              rpc_result(m.id, json_pack("{s:o}", "tools", mcp_tools_json())));
    else if (strcmp(name, "tools/call") == 0)
        tools_call(req, api, m.id, m.params);
    else {
        snprintf(msg, sizeof(msg), "method not found: %.100s", name);
        sbx_http_respond_json(req, 200, rpc_error(m.id, -32601, msg));
    }
    json_decref(m.root);
}
