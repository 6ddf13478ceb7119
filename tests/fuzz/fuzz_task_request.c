/* libFuzzer target: a task request's body (POST /runtime/exec,
 * /runtime/tasks, /execute) and a network-rules body (POST /runtime/network,
 * /runtime/tasks/{id}/network), validated as the routes do: the JSON
 * object (sbx_json_parse_object, as sbx_http_req_json), its fields, then
 * task_request_parse / task_request_network, then the rules turned into
 * the task's egress policy (rt_task_policy, what the runtime does with
 * them). Headers and query reach api_request_clone through the daemon's
 * own accessors (fuzz_input.h).
 *
 * The first input byte picks the token: an operator's, a tenant-bound one
 * (tenant t1), or none. Beyond "no crash, no leak": a refusal always says
 * why; a tenant-bound token never gets the host policy, allow rules or a
 * default allow, nor another tenant's clone; an accepted request has a
 * command or language and code, and its clone's segments pass the
 * workspace's own check. */
#include <assert.h>
#include <stdio.h>

#include <event2/event.h>

#include "api/json.h"
#include "api/routes_int.h"
#include "daemon/config.h"
#include "daemon/settings.h"
#include "net/netpolicy.h"
#include "net/policy.h"
#include "runtime/runtime_int.h"
#include "workspace/path.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct sbx_api api;
static struct sbx_config cfg;
static struct sbx_runtime_settings set;
static struct sbx_policy_opts policy_opts;
static const sbx_identity operator_id = {.name = "op"}, tenant_id = {.name = "t", .tenant = "t1"};

static void setup(void)
{
    sbx_err e = {0};
    char *argv[] = {"serve", NULL};
    if (sbx_config_load(&cfg, 1, argv, NULL, &e) < 0) {
        fprintf(stderr, "defaults: %s\n", e.msg);
        abort();
    }
    sbx_settings_from_config(&set, &cfg);
    /* The runtime arms its timers (the workspace monitor, idle unmounts) on
     * a base; nothing here runs it. */
    struct event_base *base = event_base_new();
    assert(base);
    struct sbx_runtime_opts o = {.base = base, .settings = &set, .policy_opts = &policy_opts};
    api.rt = sbx_runtime_new(&o, &e);
    if (!api.rt)
        fprintf(stderr, "runtime: %s\n", e.msg);
    assert(api.rt);
}

static void refused(const sbx_err *e)
{
    assert(e->msg[0] && e->errnum);
}

static void rules_policy(struct parsed_task *p)
{
    sbx_err e = {0};
    struct sbx_policy *pol = rt_task_policy(api.rt, &p->r, &e);
    if (pol)
        sbx_policy_free(pol);
    else
        refused(&e);
}

static void task_body(sbx_http_request *req, const json_t *body, bool tenant)
{
    sbx_err e = {0};
    if (sbx_json_check_fields(body, NULL, task_request_fields, &e) < 0)
        return refused(&e);
    struct parsed_task p;
    if (task_request_parse(req, &api, (json_t *)body, &p, &e) < 0) {
        refused(&e);
    } else {
        assert(p.r.argv ? p.r.argv[0] != NULL : p.r.language && p.r.code);
        assert(sbx_ws_clone_check(p.r.clone.tenant, p.r.clone.key, p.r.clone.id, &e) == 0);
        if (tenant)
            assert(!strcmp(p.r.clone.tenant, "t1") && p.r.net != SBX_NET_HOST &&
                   p.r.net_default != SBX_DEFAULT_ALLOW && (!p.r.allow || !p.r.allow[0]));
        rules_policy(&p);
    }
    task_request_free(&p);
}

/* As h_session_network: fields, clone, session, then the rules. */
static void network_body(sbx_http_request *req, json_t *body, bool tenant)
{
    static const char *const fields[] = {"sessionID", "sessionId", "tenantCode",
                                         "cloneKey",  "cloneId",   "default",
                                         "allow",     "deny",      NULL};
    sbx_err e = {0};
    if (sbx_json_check_fields(body, NULL, fields, &e) < 0)
        return refused(&e);
    struct sbx_clone c;
    if (api_request_clone(req, &api, body, &c, &e) < 0)
        return refused(&e);
    json_t *s = sbx_json_session(body);
    if (json_is_string(s))
        (void)sbx_ws_segment_check("sessionID", json_string_value(s), json_string_length(s), &e);
    json_t *net =
        json_pack("{s:O*, s:O*, s:O*}", "default", json_object_get(body, "default"), "allow",
                  json_object_get(body, "allow"), "deny", json_object_get(body, "deny"));
    struct parsed_task p = {.r = {.net = -1, .net_default = -1}};
    e = (sbx_err){0};
    if (task_request_network(req, net, &p, &e) < 0) {
        refused(&e);
    } else {
        if (tenant)
            assert(p.r.net_default != SBX_DEFAULT_ALLOW && (!p.r.allow || !p.r.allow[0]));
        rules_policy(&p);
    }
    task_request_free(&p);
    json_decref(net);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!api.rt)
        setup();
    if (size < 1)
        return 0;
    const sbx_identity *who = data[0] % 3 == 0   ? &operator_id
                              : data[0] % 3 == 1 ? &tenant_id
                                                 : NULL;
    struct fz_request fz;
    if (fz_parse(&fz, data + 1, size - 1)) {
        sbx_http_request req;
        fz_request_init(&req, &fz, who);
        sbx_err e = {0};
        json_t *body = sbx_json_parse_object(fz.body, fz.body_len, true, &e);
        if (!body) {
            refused(&e);
        } else {
            bool tenant = who == &tenant_id;
            task_body(&req, body, tenant);
            network_body(&req, body, tenant);
            json_decref(body);
        }
    }
    fz_free(&fz);
    return 0;
}
