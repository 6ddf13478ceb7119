#include "api/routes_int.h"

#include <stdio.h>
#include <string.h>

#include "agent/agent.h"
#include "api/json.h"
#include "workspace/path.h"

/* ---- turns: /runtime/turn, /runtime/turn/{id}/cancel, /runtime/tools ---- */

/* POST /runtime/turn {sessionID, input}: answered at once with the turn's
 * id; what it does arrives on the session's stream. */
void h_turn(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    static const char *const fields[] = {"sessionID", "sessionId", "tenantCode", "cloneKey",
                                         "cloneId",   "input",     NULL};
    json_t *body = sbx_http_req_json(req, fields);
    if (!body)
        return;
    struct sbx_clone c;
    sbx_err e = {0};
    json_t *s = sbx_json_session(body);
    json_t *input = json_object_get(body, "input");
    char id[SBX_ID_SIZE];
    if (api_request_clone(req, api, body, &c, &e) < 0) {
        sbx_http_respond_err(req, &e);
    } else if (!json_is_string(s) || sbx_ws_segment_check("sessionID", json_string_value(s),
                                                          json_string_length(s), &e) < 0) {
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "%s",
                               e.msg[0] ? e.msg : "sessionID is required (a live session)");
    } else if (!json_is_object(input)) {
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST,
                               "input is required: {type: tool_calls | user_message | "
                               "tool_result, ...}");
    } else if (api_audit(req, api, "turn", json_string_value(s)),
               sbx_agent_turn(api->agent, &c, json_string_value(s), input, id, &e) < 0) {
        sbx_http_respond_err(req, &e);
    } else {
        sbx_http_respond_json(
            req, 200,
            json_pack("{s:b, s:s, s:s}", "ok", 1, "turnId", id, "sessionId", json_string_value(s)));
    }
    json_decref(body);
}

void h_turn_cancel(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    const char *id = sbx_http_req_param(req, "id");
    struct sbx_clone c;
    sbx_err e = {0};
    if (api_request_clone(req, api, NULL, &c, &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    api_audit(req, api, "turn_cancel", id);
    if (sbx_agent_cancel(api->agent, c.tenant, id, &e) < 0)
        return (void)sbx_http_respond_err(req, &e);
    sbx_http_respond_json(
        req, 200, json_pack("{s:b, s:s, s:s}", "ok", 1, "turnId", id, "status", "canceling"));
}

void h_tools(sbx_http_request *req, void *ud)
{
    sbx_http_respond_json(req, 200, json_pack("{s:o}", "tools", sbx_agent_tools()));
}
