/* The daemon's HTTP routes: the original's contract (reference API), plus code
 * by language, /execute, workspace files, paging, tenancy and tokens. */
#pragma once

#include "api/http.h"
#include "runtime/runtime.h"

/* What the routes take of the daemon's settings, and nothing more. The
 * strings are borrowed: they must outlive the routes. */
struct sbx_api_settings {
    /* The clone of a request that names none (clone_key may be NULL). */
    const char *tenant_code, *clone_key, *clone_id;
    struct sbx_limits max; /* the most a request may ask for a task */
    const char *workspace_root;
    uint64_t workspace_quota_bytes; /* an upload larger is refused before a byte is read */
};

struct sbx_api {
    struct sbx_runtime *rt;
    struct sbx_store *store;
    struct sbx_api_settings set;
    bool ready; /* the store is open and the engine's self-check passed */
    int64_t started_at;
};

int sbx_api_routes(sbx_http_server *srv, struct sbx_api *api, sbx_err *err);
