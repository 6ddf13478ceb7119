/* MCP (Model Context Protocol) over Streamable HTTP at POST /mcp: JSON-RPC
 * 2.0 on the daemon's listener, with its tokens, one tool per action of the
 * runtime (run_code, exec, files, sessions, network). See docs/mcp.md. */
#pragma once

#include "api/http.h"

/* POST /mcp; ud is the struct sbx_api. */
void sbx_mcp_post(sbx_http_request *req, void *ud);
