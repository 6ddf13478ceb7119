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
    /* How long an Idempotency-Key names its task (0: 24 h). */
    double idempotency_ttl_s;
};

int sbx_api_routes(sbx_http_server *srv, struct sbx_api *api, sbx_err *err);
