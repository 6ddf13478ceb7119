#include "api/extended.h"

#include <string.h>

const char *const sbx_api_status_keys[] = {"runtimeId",   "tenantCode", "cloneId", "cloneKey",
                                           "sessionId",   "workspace",  "status",  "startedAt",
                                           "lastEventAt", NULL};
const char *const sbx_api_task_keys[] = {"id",          "command",         "backend", "skill",
                                         "skillSource", "skillTrustLevel", "status",  "createdAt",
                                         "startedAt",   "endedAt",         "error",   "result",
                                         NULL};
const char *const sbx_api_result_keys[] = {"exitCode",  "stdout",  "stderr",
                                           "startedAt", "endedAt", NULL};
const char *const sbx_api_event_keys[] = {"type", "time", "data", NULL};

static bool is_one(const char *v)
{
    return v && strcmp(v, "1") == 0;
}

bool sbx_api_extended(const sbx_http_request *req)
{
    return is_one(sbx_http_req_header(req, SBX_EXTENDED_HEADER)) ||
           is_one(sbx_http_req_query(req, SBX_EXTENDED_QUERY));
}

static bool named(const char *key, const char *const *keys)
{
    for (; *keys; keys++)
        if (strcmp(key, *keys) == 0)
            return true;
    return false;
}

json_t *sbx_api_shape(const sbx_http_request *req, json_t *o, const char *const *keys)
{
    if (!o || !json_is_object(o) || (req && sbx_api_extended(req)))
        return o;
    const char *key;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(o, tmp, key, v)
    {
        if (!named(key, keys))
            json_object_del(o, key);
    }
    return o;
}
