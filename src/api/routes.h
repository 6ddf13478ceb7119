/* The daemon's HTTP routes: the original's contract (reference API), plus code
 * by language, /execute, workspace files, paging, tenancy and tokens. */
#pragma once

#include "api/http.h"
#include "runtime/runtime.h"

struct sbx_agent;

struct sbx_api {
    struct sbx_runtime *rt;
    struct sbx_agent *agent; /* turns (src/agent) */
    struct sbx_store *store;
    bool ready; /* the store is open and the engine's self-check passed */
    int64_t started_at;
};

int sbx_api_routes(sbx_http_server *srv, struct sbx_api *api, sbx_err *err);
