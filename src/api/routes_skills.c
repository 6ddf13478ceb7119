/* The skill routes, in the original's shapes: GET /runtime/skills (an array
 * of SkillInfo), GET /runtime/skills/{name}, POST /runtime/skills/reload
 * ({ok, skills}), POST /runtime/skills/{name}/activate {"version"} ({ok,
 * skill}). A SkillInfo has the original's keys only: name and enabled
 * always, the others left out when empty. The catalog is the clone's: its
 * overlay decides the active versions. */
#include "api/extended.h"
#include "api/routes_int.h"

#include <stdlib.h>
#include <string.h>

#include "skills/catalog.h"

/* A request waiting for the catalog (its first scan, a reload, an
 * activation). */
struct skill_wait {
    struct sbx_api *api;
    sbx_http_request *req;
    struct sbx_clone clone;
    char name[65];
    bool one; /* GET one skill */
};

static void wait_cancel(sbx_http_request *req, void *ud)
{
    struct skill_wait *w = ud;
    sbx_skills_unwait(w->api->skills, w);
    free(w);
}

static bool no_skills(sbx_http_request *req, struct sbx_api *api)
{
    if (api->skills)
        return false;
    sbx_http_respond_error(req, SBX_HTTP_NOT_READY, "skills are not configured in this daemon");
    return true;
}

static json_t *skills_json(struct skill_wait *w)
{
    json_t *all = sbx_skills_list(w->api->skills, &w->clone);
    size_t i;
    json_t *s;
    /* the drop-in switch: what SKILL.md says is added */
    if (sbx_api_extended(w->req))
        json_array_foreach(all, i, s) sbx_skills_extend(w->api->skills, &w->clone, s);
    return all;
}

static void answer_catalog(struct skill_wait *w)
{
    sbx_err e = {0};
    if (!w->one)
        return (void)sbx_http_respond_json(w->req, 200, skills_json(w));
    json_t *s = sbx_skills_get(w->api->skills, &w->clone, w->name, strlen(w->name), &e);
    if (!s)
        return (void)sbx_http_respond_err(w->req, &e);
    if (sbx_api_extended(w->req))
        sbx_skills_extend(w->api->skills, &w->clone, s);
    sbx_http_respond_json(w->req, 200, s);
}

static void on_loaded(void *ud, const sbx_err *err)
{
    struct skill_wait *w = ud;
    if (err && err->errnum == ECANCELED)
        sbx_http_respond_err(w->req, err);
    else
        answer_catalog(w);
    free(w);
}

static void catalog(sbx_http_request *req, struct sbx_api *api, bool one)
{
    if (no_skills(req, api))
        return;
    struct skill_wait *w = calloc(1, sizeof(*w));
    sbx_err e = {0};
    if (!w)
        return (void)sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
    *w = (struct skill_wait){.api = api, .req = req, .one = one};
    if (api_request_clone(req, api, NULL, &w->clone, &e) < 0) {
        free(w);
        return (void)sbx_http_respond_err(req, &e);
    }
    if (one) {
        const char *name = sbx_http_req_param(req, "name");
        if (!sbx_skill_name_ok(name, strlen(name))) {
            free(w);
            return (void)sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST,
                                                "invalid skill name: 1 to 64 letters, digits, "
                                                "'.', '_' or '-', not starting with '.' or '-'");
        }
        snprintf(w->name, sizeof(w->name), "%s", name);
    }
    int rc = sbx_skills_when_loaded(api->skills, on_loaded, w);
    if (rc == 0)
        return sbx_http_req_defer(req, wait_cancel, w);
    answer_catalog(w);
    free(w);
}

void h_skills_list(sbx_http_request *req, void *ud)
{
    catalog(req, ud, false);
}

void h_skill_get(sbx_http_request *req, void *ud)
{
    catalog(req, ud, true);
}

static void on_reloaded(void *ud, const sbx_err *err)
{
    struct skill_wait *w = ud;
    if (err)
        sbx_http_respond_err(w->req, err);
    else
        sbx_http_respond_json(w->req, 200,
                              json_pack("{s:b, s:o}", "ok", 1, "skills", skills_json(w)));
    free(w);
}

void h_skills_reload(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    if (no_skills(req, api))
        return;
    static const char *const fields[] = {"tenantCode", "cloneKey", "cloneId", NULL};
    json_t *body = sbx_http_req_json(req, fields);
    if (!body)
        return;
    struct skill_wait *w = calloc(1, sizeof(*w));
    sbx_err e = {0};
    if (!w || api_request_clone(req, api, body, &w->clone, &e) < 0 ||
        sbx_skills_reload(api->skills, on_reloaded, w, &e) < 0) {
        json_decref(body);
        free(w);
        return (void)(e.msg[0] ? sbx_http_respond_err(req, &e)
                               : sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory"));
    }
    json_decref(body);
    w->api = api, w->req = req;
    api_audit(req, api, "skills_reload", "");
    sbx_http_req_defer(req, wait_cancel, w);
}

static void on_activated(void *ud, json_t *skill, const sbx_err *err)
{
    struct skill_wait *w = ud;
    if (err)
        sbx_http_respond_err(w->req, err);
    else
        sbx_http_respond_json(w->req, 200, json_pack("{s:b, s:O}", "ok", 1, "skill", skill));
    free(w);
}

void h_skill_activate(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    if (no_skills(req, api))
        return;
    static const char *const fields[] = {"version", "tenantCode", "cloneKey", "cloneId", NULL};
    json_t *body = sbx_http_req_json(req, fields);
    if (!body)
        return;
    const char *name = sbx_http_req_param(req, "name");
    json_t *v = json_object_get(body, "version");
    struct skill_wait *w = calloc(1, sizeof(*w));
    sbx_err e = {0};
    if (!w)
        sbx_err_set(&e, ENOMEM, "activation");
    else if (v && !json_is_null(v) && !json_is_string(v))
        sbx_err_set(&e, EINVAL, "version must be a string");
    else if (api_request_clone(req, api, body, &w->clone, &e) == 0) {
        *w = (struct skill_wait){.api = api, .req = req, .clone = w->clone};
        if (sbx_skills_activate(api->skills, &w->clone, name, strlen(name),
                                json_is_string(v) ? json_string_value(v) : NULL,
                                json_is_string(v) ? json_string_length(v) : 0, on_activated, w,
                                &e) == 0) {
            api_audit(req, api, "skill_activate", name);
            sbx_http_req_defer(req, wait_cancel, w);
            json_decref(body);
            return;
        }
    }
    json_decref(body);
    free(w);
    sbx_http_respond_err(req, &e);
}

int api_skill_task(sbx_http_request *req, struct sbx_api *api, struct parsed_task *p, sbx_err *err)
{
    if (!p->skill)
        return 0;
    if (!api->skills)
        return sbx_err_set(err, EINVAL, "unsupported skill: %s", p->skill);
    return sbx_skills_task(api->skills, p->skill, p->action, p->args, &p->r, &p->hold, err);
}
