/* The daemon's HTTP routes: the original's contract (reference API), plus code
 * by language, /execute, workspace files, paging, tenancy and tokens. */
#pragma once

#include "api/http.h"
#include "runtime/runtime.h"

struct sbx_api {
    struct sbx_runtime *rt;
    struct sbx_store *store;
    bool ready; /* the store is open and the engine's self-check passed */
    int64_t started_at;
    struct os_state *opensandbox; /* the OpenSandbox API's sandboxes (api/opensandbox/) */
};

int sbx_api_routes(sbx_http_server *srv, struct sbx_api *api, sbx_err *err);
/* Let go of what the routes keep between requests (the OpenSandbox API's
 * sandboxes: their sessions are stopped): after the server, before the
 * runtime is freed. */
void sbx_api_close(struct sbx_api *api);
