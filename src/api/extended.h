/* The one switch between the original's answers and ours on the original's
 * routes (docs/compatibility.md). By default a route of the original answers
 * exactly the original's keys and shapes, since the original's SDKs reject
 * a key they do not know; what we add there (reports, tenancy, session ids,
 * cursors, event ids) is given only to a request that asks for it with the
 * header `X-Sandbox-Extended: 1` or, for clients that cannot set headers
 * (a browser's EventSource), the query parameter `extended=1`. sandboxctl
 * always asks. */
#pragma once

#include <stdbool.h>

#include <jansson.h>

#include "api/http.h"

#define SBX_EXTENDED_HEADER "X-Sandbox-Extended"
#define SBX_EXTENDED_QUERY "extended"

/* Whether req asked for the extended answers. */
bool sbx_api_extended(const sbx_http_request *req);

/* The answer req gets from o (owned, returned): o itself for an extended
 * request, else (and when req is NULL) o with only the keys named in keys (NULL-terminated); the
 * original's key set of the route. */
json_t *sbx_api_shape(const sbx_http_request *req, json_t *o, const char *const *keys);

/* The original's key sets, shared by the routes that answer them. */
extern const char *const sbx_api_status_keys[]; /* StatusPayload */
extern const char *const sbx_api_task_keys[];   /* Task */
extern const char *const sbx_api_result_keys[]; /* ExecResult */
extern const char *const sbx_api_event_keys[];  /* an event's body */
