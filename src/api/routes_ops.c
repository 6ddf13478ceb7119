#include "api/routes_int.h"

#include <stdlib.h>

#include "base/metrics.h"

/* ---- for operators: /metrics, /openapi.json ---- */

/* docs/openapi.json, linked in by openapi_blob.S. */
extern const char sbx_openapi_json[], sbx_openapi_json_end[];

/* GET /metrics: the Prometheus text format. Operator tokens only: the
 * counters are the whole daemon's, every tenant's. */
void h_metrics(sbx_http_request *req, void *ud)
{
    const sbx_identity *who = sbx_http_req_identity(req);
    if (who && who->tenant)
        return (void)sbx_http_respond_error(req, SBX_HTTP_FORBIDDEN,
                                            "metrics need an operator token");
    size_t len = 0;
    char *text = sbx_metrics_render(&len);
    if (!text)
        return (void)sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
    sbx_http_respond_data(req, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
    free(text);
}

/* GET /openapi.json: needs no token (the document is the repository's). */
void h_openapi(sbx_http_request *req, void *ud)
{
    sbx_http_respond_data(req, 200, "application/json", sbx_openapi_json,
                          (size_t)(sbx_openapi_json_end - sbx_openapi_json));
}
