/* The egress side of the runtime's sandboxes: their egress options (limits,
 * the shared connection count), the policies a task or a session gets and
 * replaces while running, and every flow as an audit record and an event. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "runtime/flow.h"
#include "runtime/runtime_int.h"

/* A task's or a session's own policy and the ones it replaced. */
void rt_policies_free(struct sbx_policy *own, struct retired_policy *retired)
{
    sbx_policy_free(own);
    for (struct retired_policy *r = retired, *next; r; r = next) {
        next = r->next;
        sbx_policy_free(r->p);
        free(r);
    }
}

/* A live egress's new rules (req's, on top of the operator's): they become
 * *own; the policy they replace is kept in *retired until its owner is freed,
 * as connections being set up may still use it. */
int rt_policy_replace(struct sbx_runtime *rt, struct sbx_egress *eg,
                      const struct sbx_task_request *req, struct sbx_policy **own,
                      struct retired_policy **retired, sbx_err *err)
{
    struct sbx_policy *p = rt_task_policy(rt, req, err);
    struct retired_policy *r = p ? calloc(1, sizeof(*r)) : NULL;
    if (!r) {
        sbx_policy_free(p);
        return p ? sbx_err_set(err, ENOMEM, "policy") : -1;
    }
    sbx_egress_set_policy(eg, p);
    *r = (struct retired_policy){.p = *own, .next = *retired};
    *retired = r;
    *own = p;
    return 0;
}
/* A denial of a real target, not of a malformed handshake: worth an event. */
static bool denied_target(const struct sbx_flow *f)
{
    return f->verdict == SBX_VERDICT_DENY && (f->addr.family || f->name[0]);
}

/* Every egress flow of a task is an audit record; a denied real target is
 * also a network_denied event on its session. */
static void on_flow(void *ud, const struct sbx_flow *f)
{
    struct rt_task *t = ud;
    bool denied = f->verdict == SBX_VERDICT_DENY;
    json_t *d = json_pack("{s:s, s:s, s:s}", "taskId", t->id, "tenantCode", t->clone.tenant,
                          "cloneId", t->clone.id);
    json_t *flow = sbx_flow_json(f);
    if (d && (!flow || json_object_update(d, flow) < 0)) {
        json_decref(d);
        d = NULL;
    }
    json_decref(flow);
    char *detail = d ? json_dumps(d, JSON_COMPACT) : NULL;
    struct sbx_store_audit rec = {.identity = "egress",
                                  .action = denied ? "egress_denied" : "egress_flow",
                                  .target = t->id,
                                  .detail = detail};
    sbx_err e = {0};
    if (!detail)
        sbx_err_set(&e, ENOMEM, "audit record");
    /* The flow happened (or was refused) whatever the store says: a lost
     * record is the operator's to know, in the log; the task goes on. */
    if (!detail || sbx_store_audit_append(t->rt->o.store, &rec, &e) < 0) {
        char msg[600], why[300];
        sbx_log(SBX_LOG_WARN, "egress audit record lost task=%s action=%s error=%s", t->id,
                rec.action, sbx_log_safe(sbx_err_format(&e, msg, sizeof(msg)), why, sizeof(why)));
    }
    free(detail);
    if (d && denied_target(f))
        rt_emit(t->rt, t->clone.tenant, t->session, "network_denied", json_incref(d));
    json_decref(d);
}

/* The egress of a sandbox of ours: the configured limits, the shared
 * connection count, flows to on_flow_cb. */
struct sbx_egress_opts rt_egress_opts(struct sbx_runtime *rt, const struct sbx_policy *policy,
                                      sbx_flow_cb on_flow_cb, void *ud)
{
    const struct sbx_runtime_settings *set = &rt->settings;
    return (struct sbx_egress_opts){
        .base = rt->o.base,
        .socks_port = set->network.proxy_port,
        .policy = policy,
        .resolver = rt->o.resolver,
        .limits = {.max_conns = (unsigned)set->network.max_connections,
                   .max_bytes = set->network.max_bytes,
                   .idle_timeout_s = set->network.idle_timeout_s,
                   .connect_timeout_s = set->network.connect_timeout_s,
                   .total_active = &rt->egress_conns,
                   .max_total = (unsigned)set->network.total_connections},
        .on_flow = on_flow_cb,
        .ud = ud};
}

/* The egress of a session reports its denials on the session's stream. */
void rt_session_flow(void *ud, const struct sbx_flow *f)
{
    struct rt_session *x = ud;
    if (denied_target(f))
        rt_emit(x->rt, x->tenant, x->name, "network_denied", sbx_flow_json(f));
}

/* The operator's rules plus the request's, as one policy of the task. */
/* Of a comma-separated list of internal targets, those named exactly by one
 * of the allow rules (a new string, "" when none). */
static char *declared_targets(const char *list, const char *const *allow)
{
    char *out = calloc(1, list ? strlen(list) + 1 : 1), *copy = list ? strdup(list) : NULL;
    char *save = NULL;
    for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; out && t;
         t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ' || *t == '\t')
            t++;
        size_t n = strlen(t);
        while (n && (t[n - 1] == ' ' || t[n - 1] == '\t'))
            t[--n] = '\0';
        for (size_t i = 0; allow && allow[i]; i++)
            if (strcmp(allow[i], t) == 0) {
                if (*out)
                    strcat(out, ",");
                strcat(out, t);
                break;
            }
    }
    free(copy);
    return out;
}

struct sbx_policy *rt_task_policy(struct sbx_runtime *rt, const struct sbx_task_request *req,
                                  sbx_err *err)
{
    struct sbx_policy_opts po = *rt->o.policy_opts;
    char *targets = NULL;
    if (req->declared_only) {
        static const char *const none[] = {NULL};
        po.allow = none;
        po.allowed_cidrs = NULL;
        if (!(targets = declared_targets(po.allowed_internal_targets, req->allow))) {
            sbx_err_set(err, ENOMEM, "policy");
            return NULL;
        }
        po.allowed_internal_targets = targets;
    }
    const char *const *lists[2][2] = {{po.allow, req->allow}, {po.deny, req->deny}};
    const char **merged[2] = {NULL, NULL};
    struct sbx_policy *p = NULL;
    for (int i = 0; i < 2; i++) {
        size_t a = sbx_strv_len(lists[i][0]), b = sbx_strv_len(lists[i][1]);
        if (!(merged[i] = calloc(a + b + 1, sizeof(char *)))) {
            sbx_err_set(err, ENOMEM, "policy");
            goto out;
        }
        if (a)
            memcpy(merged[i], lists[i][0], a * sizeof(char *));
        if (b)
            memcpy(merged[i] + a, lists[i][1], b * sizeof(char *));
    }
    po.allow = merged[0];
    po.deny = merged[1];
    if (req->net_default >= 0)
        po.def = (enum sbx_default)req->net_default;
    p = sbx_policy_new(&po, err);
out:
    free(merged[0]);
    free(merged[1]);
    free(targets);
    return p;
}
int sbx_runtime_set_network(struct sbx_runtime *rt, const char *id, int net_default,
                            const char *const *allow, const char *const *deny, sbx_err *err)
{
    struct rt_task *t = rt_find_active(rt, id);
    if (!t || !t->t)
        return sbx_err_set(err, ENOENT, "task %s is not running", id);
    struct sbx_egress *eg = t->eg;
    if (!eg && t->net == SBX_NET_PROXY) /* its sandbox (or its attach) is not answered yet */
        return sbx_err_set(err, EAGAIN, "task %s's egress is still being set up: try again", id);
    if (!eg)
        return sbx_err_set(err, ENOTSUP, "task %s has no egress (its policy is not proxy)", id);
    struct sbx_task_request req = {.net_default = net_default, .allow = allow, .deny = deny};
    return rt_policy_replace(rt, eg, &req, &t->own_policy, &t->retired, err);
}

static int task_egress_start(void *ud, int netns_fd, sbx_err *err)
{
    struct rt_task *t = ud;
    /* a pooled egress bound to it whose sandbox then failed: built cold */
    sbx_egress_free(sbx_steal_pointer(&t->eg));
    t->eg = sbx_egress_start(&t->egress, netns_fd, err);
    return t->eg ? 0 : -1;
}

int rt_task_egress_take(void *ud, void *net, sbx_err *err)
{
    (void)err;
    struct rt_task *t = ud;
    sbx_egress_free(sbx_steal_pointer(&t->eg));
    t->eg = net;
    sbx_egress_bind(t->eg, t->egress.policy, t->egress.on_flow, t->egress.ud);
    return 0;
}

/* Nothing runs in a pooled sandbox before its task but init (and a
 * zygote, our own program): a flow here is denied by the placeholder, and
 * said in the log. */
static void pool_flow(void *ud, const struct sbx_flow *f)
{
    (void)ud;
    char rule[300];
    sbx_log(SBX_LOG_WARN, "pool: a connection before any task, %s: %s",
            f->verdict == SBX_VERDICT_DENY ? "denied" : "closed",
            sbx_log_safe(f->rule, rule, sizeof(rule)));
}

/* The placeholder policy of the pool's egresses: no allow rule, no allowed
 * CIDR or target, default deny (made once). */
static int pool_policy(struct sbx_runtime *rt, sbx_err *err)
{
    if (!rt->o.policy_opts)
        return sbx_err_set(err, EINVAL, "no policy options");
    struct sbx_policy_opts po = {.def = SBX_DEFAULT_DENY,
                                 .own_addrs = rt->o.policy_opts->own_addrs,
                                 .n_own_addrs = rt->o.policy_opts->n_own_addrs};
    if (!rt->pool_policy && !(rt->pool_policy = sbx_policy_new(&po, err)))
        return -1;
    return 0;
}

void *rt_pool_egress_start(void *ctx, int netns_fd, sbx_err *err)
{
    struct sbx_runtime *rt = ctx;
    if (pool_policy(rt, err) < 0)
        return NULL;
    struct sbx_egress_opts o = rt_egress_opts(rt, rt->pool_policy, pool_flow, NULL);
    return sbx_egress_start(&o, netns_fd, err);
}

void *rt_pool_egress_sets(void *ctx, void *net, sbx_err *err)
{
    (void)ctx;
    return sbx_egress_sets_start(net, err);
}

int rt_pool_sets_fd(void *job)
{
    return sbx_egress_sets_fd(job);
}

int rt_pool_sets_end(void *job, sbx_err *err)
{
    return sbx_egress_sets_end(job, err);
}

void rt_pool_sets_abort(void *job)
{
    sbx_egress_sets_abort(job);
}

void rt_pool_egress_drop(void *ctx, void *net)
{
    (void)ctx;
    sbx_egress_free(net);
}

int (*rt_task_egress(struct rt_task *t))(void *ud, int netns_fd, sbx_err *err)
{
    struct sbx_runtime *rt = t->rt;
    t->egress = rt_egress_opts(rt, t->own_policy ? t->own_policy : rt->o.policy, on_flow, t);
    return t->net == SBX_NET_PROXY ? task_egress_start : NULL;
}
