/* The daemon's HTTP routes: the original's contract (reference API), plus code
 * by language, /execute, workspace files, paging, tenancy and tokens. */
#pragma once

#include "api/http.h"
#include "runtime/runtime.h"
#include "skills/skills.h"

struct sbx_agent;

struct sbx_api {
    struct sbx_runtime *rt;
    struct sbx_skills *skills; /* NULL: no skill routes answer but 503 */
    struct sbx_agent *agent;   /* turns (src/agent) */
    struct sbx_store *store;
    bool ready; /* the store is open and the engine's self-check passed */
    int64_t started_at;
    struct mcp_call *mcp_calls; /* MCP tool calls in flight (api/mcp/) */
    /* Tasks refused for a full queue (429) since the last audit record of
     * them: counted, not each written (sbx_api_audit_refusals). */
    uint64_t refused_busy;
    int64_t refused_since; /* sbx_now_ms() of the first of them */
    /* How long an Idempotency-Key names its task (0: 24 h). */
    double idempotency_ttl_s;
    /* Adds the daemon's own facts (cgroup caps...) to an extended
     * /runtime/status; may be NULL. reads: also what costs a read per
     * sandbox (the pool's memory: GET /runtime/status, not the answer of
     * every session's start and stop). */
    void (*status_extra)(void *ud, json_t *status, bool reads);
    void *status_extra_ud;
    struct os_state *opensandbox; /* the OpenSandbox API's sandboxes (api/opensandbox/) */
};

/* One audit record for the tasks refused with 429 since the last one (none
 * when there were none): the daemon calls it from a timer. */
void sbx_api_audit_refusals(struct sbx_api *api);

int sbx_api_routes(sbx_http_server *srv, struct sbx_api *api, sbx_err *err);
/* Let go of what the routes keep between requests (the OpenSandbox API's
 * sandboxes: their sessions are stopped): after the server, before the
 * runtime is freed. */
void sbx_api_close(struct sbx_api *api);
