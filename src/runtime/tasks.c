/* Tasks: validated and recorded (pending) at submit, started by the queue,
 * their output coalesced into events, their end recorded, their waiter told. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/strv.h"
#include "base/time.h"
#include "exec/env.h"
#include "runtime/runtime_int.h"

#define COALESCE_BYTES 65536
#define COALESCE_MS 50
#define OUTPUT_PIECE (32 * 1024)

static json_t *task_event_data(const struct rt_task *rt_t, const char *status)
{
    json_t *cmd = json_array();
    for (size_t i = 0; rt_t->argv && rt_t->argv[i]; i++)
        json_array_append_new(cmd, sbx_json_text(rt_t->argv[i], strlen(rt_t->argv[i])));
    json_t *d = json_pack("{s:s, s:o, s:s, s:s, s:s, s:s, s:s}", "taskId", rt_t->id, "command", cmd,
                          "status", status, "backend", "sandbox", "skill",
                          rt_t->skill[0] ? rt_t->skill[0] : "", "skillSource",
                          rt_t->skill[1] ? rt_t->skill[1] : "", "skillTrustLevel",
                          rt_t->skill[2] ? rt_t->skill[2] : "");
    if (rt_t->skill[0])
        json_object_set_new(d, "skillVersion", json_string(rt_t->skill[3] ? rt_t->skill[3] : ""));
    return d;
}

static void flush_output(struct rt_task *t, int idx)
{
    struct evbuffer *b = t->pending[idx];
    size_t len = b ? evbuffer_get_length(b) : 0;
    if (!len)
        return;
    const char *data = (const char *)evbuffer_pullup(b, -1);
    /* Pieces small enough that even JSON's worst case (\u00XX for every
     * byte) fits a client's stream buffer; never cut inside a UTF-8 sequence. */
    for (size_t off = 0; off < len;) {
        size_t cut = len - off < OUTPUT_PIECE ? len - off : OUTPUT_PIECE;
        while (off + cut < len && cut > 4 && ((unsigned char)data[off + cut] & 0xc0) == 0x80)
            cut--;
        json_t *d =
            json_pack("{s:s, s:s, s:o}", "taskId", t->id, "stream", idx == 0 ? "stdout" : "stderr",
                      "data", sbx_json_text(data + off, cut));
        if (t->call_id) {
            json_object_set_new(d, "callId", json_string(t->call_id));
            json_object_set(d, "text", json_object_get(d, "data"));
        }
        rt_emit(t->rt, t->clone.tenant, t->session, "tool_call_output", d);
        off += cut;
    }
    evbuffer_drain(b, len);
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    struct rt_task *t = arg;
    flush_output(t, 0);
    flush_output(t, 1);
}

static void on_output(void *ud, enum sbx_stream s, const char *buf, size_t n)
{
    struct rt_task *t = ud;
    int idx = s == SBX_STDOUT ? 0 : 1;
    if (t->tap)
        t->tap(t->tap_ud, idx + 1, buf, n);
    evbuffer_add(t->pending[idx], buf, n);
    if (evbuffer_get_length(t->pending[idx]) >= COALESCE_BYTES)
        flush_output(t, idx);
    else if (!evtimer_pending(t->flush, NULL)) {
        struct timeval tv = {0, COALESCE_MS * 1000};
        evtimer_add(t->flush, &tv);
    }
}

static void task_free(struct rt_task *t)
{
    if (!t)
        return;
    if (t->t)
        sbx_task_free(t->t);
    sbx_egress_free(t->eg);
    if (t->flush)
        event_free(t->flush);
    for (int i = 0; i < 2; i++)
        if (t->pending[i])
            evbuffer_free(t->pending[i]);
    rt_policies_free(t->own_policy, t->retired);
    for (size_t i = 0; i < SBX_ARRAY_LEN(t->skill); i++)
        free(t->skill[i]);
    for (size_t i = 0; i < SBX_ARRAY_LEN(t->mount_strs); i++)
        free(t->mount_strs[i]);
    for (size_t i = 0; i < SBX_ARRAY_LEN(t->env_mount_src); i++)
        free(t->env_mount_src[i]);
    sbx_strv_free(t->argv);
    free(t->call_id);
    sbx_env_free(t->env);
    free(t->stdin_data);
    free(t->workspace);
    free(t->kill_reason);
    rt_task_sub_cgroup_free(t);
    free(t);
}

/* A task of a session: a cgroup of its own below the session's with the
 * session's CPU quota; what it joins is in *join (t->sub_cg[1]). */
int rt_task_sub_cgroup(struct rt_task *t, const struct rt_session *x,
                       const struct sbx_cgroup **join, sbx_err *err)
{
    if (!(t->sub_cg = calloc(2, sizeof(*t->sub_cg))))
        return sbx_err_set(err, ENOMEM, "task cgroup");
    if (sbx_cgroup_create_sub(&x->sb.cg, t->name, x->task_cpu, &t->sub_cg[1], &t->sub_cg[0], err) <
        0) {
        free(sbx_steal_pointer(&t->sub_cg));
        return -1;
    }
    *join = &t->sub_cg[1];
    return 0;
}

/* Its own cgroup, once it has ended: removed when empty; a busy one (a
 * background process it left in the session) goes with the session's. */
void rt_task_sub_cgroup_free(struct rt_task *t)
{
    if (!t->sub_cg)
        return;
    (void)sbx_cgroup_remove(&t->sub_cg[0], NULL);
    free(sbx_steal_pointer(&t->sub_cg));
}

static void unlink_active(struct sbx_runtime *rt, struct rt_task *t)
{
    for (struct rt_task **p = &rt->active; *p; p = &(*p)->all_next)
        if (*p == t) {
            *p = t->all_next;
            return;
        }
}

static enum sbx_task_status final_status(const struct sbx_report *r)
{
    switch (r->outcome) {
    case SBX_OUTCOME_EXITED:
        return r->exit_code == 0 ? SBX_TASK_SUCCEEDED : SBX_TASK_FAILED;
    case SBX_OUTCOME_TIMEOUT:
        return SBX_TASK_TIMEOUT;
    case SBX_OUTCOME_CANCELED:
        return SBX_TASK_CANCELED;
    default:
        return SBX_TASK_FAILED;
    }
}

/* The final transition. A task that ended must not stay "running" in the
 * store: when the store refuses the record (an output over its bound, a full
 * disk), the task is recorded as failed with the store's reason, without its
 * outputs, and the refusal is logged; if even that fails, the log is all
 * there is until the next start's recovery marks it interrupted. */
static void record_end(struct rt_task *t, struct sbx_store_transition *tr, char *why, size_t len)
{
    struct sbx_store *store = t->rt->o.store;
    sbx_err e = {0};
    /* A setup that failed before the task was running (its workspace, its
     * sandbox) ends it as failed, through running: the store knows no
     * pending -> failed. */
    if (t->started_at == 0 && tr->to != SBX_TASK_CANCELED) {
        struct sbx_store_transition run = {.to = SBX_TASK_RUNNING, .at = tr->at, .sandbox = ""};
        if (sbx_store_task_transition(store, t->id, &run, &e) == 0)
            t->started_at = tr->at;
    }
    if (sbx_store_task_transition(store, t->id, tr, &e) == 0)
        return;
    char safe[300];
    sbx_err_format(&e, why, len);
    sbx_log(SBX_LOG_WARN, "task end not recorded id=%s status=%s error=%s", t->id,
            sbx_task_status_name(tr->to), sbx_log_safe(why, safe, sizeof(safe)));
    *tr = (struct sbx_store_transition){
        .to = SBX_TASK_FAILED, .at = tr->at, .error = why, .result = tr->result};
    if (sbx_store_task_transition(store, t->id, tr, &e) < 0) {
        char msg[600];
        sbx_log(SBX_LOG_ERROR, "task end lost id=%s error=%s", t->id,
                sbx_log_safe(sbx_err_format(&e, msg, sizeof(msg)), safe, sizeof(safe)));
    }
}

/* The waiter's copy of the final record, as stored (outputs "" when none). */
static void tell_done(struct rt_task *t, const struct sbx_store_transition *tr)
{
    struct sbx_store_task rec = {.tenant = t->clone.tenant,
                                 .clone_key = t->clone.key,
                                 .clone_id = t->clone.id,
                                 .session_id = t->session,
                                 .sandbox = t->name,
                                 .status = tr->to,
                                 .started_at = t->started_at,
                                 .ended_at = tr->at,
                                 .error = tr->error,
                                 .result = tr->result,
                                 .stdout_data = tr->stdout_data ? tr->stdout_data : "",
                                 .stdout_len = tr->stdout_data ? tr->stdout_len : 0,
                                 .stderr_data = tr->stderr_data ? tr->stderr_data : "",
                                 .stderr_len = tr->stderr_data ? tr->stderr_len : 0};
    memcpy(rec.id, t->id, SBX_ID_SIZE);
    t->done(t->ud, &rec);
}

/* Record the end, tell the waiter and the stream, free. */
void rt_finish(struct rt_task *t, enum sbx_task_status status, const char *error,
               const char *result, const char *out, size_t out_len, const char *errout,
               size_t err_len, int exit_code)
{
    struct sbx_runtime *rt = t->rt;
    /* A task that never ran in a sandbox (canceled while queued or at the
     * daemon's stop, or unable to start) still gets a result with its exit
     * code: 124 for a cancel, 125 for a setup failure. */
    char *made = NULL;
    if (!result) {
        json_t *r = json_pack("{s:s, s:i, s:s}", "outcome",
                              status == SBX_TASK_CANCELED ? "canceled" : "setup_error", "exitCode",
                              exit_code, "message", error ? error : "");
        made = r ? json_dumps(r, JSON_COMPACT) : NULL;
        json_decref(r);
        result = made;
    }
    struct sbx_store_transition tr = {.to = status,
                                      .at = sbx_now_ms(),
                                      .error = error ? error : "",
                                      .result = result,
                                      .stdout_data = out,
                                      .stdout_len = out_len,
                                      .stderr_data = errout,
                                      .stderr_len = err_len};
    char why[600];
    record_end(t, &tr, why, sizeof(why));
    rt_metrics_finished(t, tr.to);
    json_t *d = task_event_data(t, sbx_task_status_name(tr.to));
    json_object_set_new(d, "exitCode", json_integer(exit_code));
    json_object_set_new(d, "error", json_string(tr.error));
    rt_emit(rt, t->clone.tenant, t->session, "exec_finished", d);
    unlink_active(rt, t);
    rt_clone_activity(rt, &t->clone);
    if (t->done)
        tell_done(t, &tr);
    task_free(t);
    free(made);
}

static void on_task_done(void *ud, struct sbx_task *et)
{
    struct rt_task *t = ud;
    struct sbx_runtime *rt = t->rt;
    /* Every relay closes now and reports its flow before the report is out. */
    sbx_egress_free(sbx_steal_pointer(&t->eg));
    on_flush(-1, 0, t);
    const struct sbx_report *r = sbx_task_report(et);
    char *result = sbx_report_to_json(r);
    size_t out_len, err_len;
    const char *out = sbx_task_output(et, SBX_STDOUT, &out_len);
    const char *errout = sbx_task_output(et, SBX_STDERR, &err_len);
    enum sbx_task_status st = final_status(r);
    t->outcome = sbx_outcome_name(r->outcome);
    if (t->in_session && rt_find_session(rt, &t->clone, t->session) == t->in_session) {
        t->in_session->tasks--;
        rt_session_touch(t->in_session);
    }
    const char *error = st == SBX_TASK_SUCCEEDED ? "" : r->message;
    if (t->kill_reason && st != SBX_TASK_SUCCEEDED) /* stopped as a writer over its quota */
        st = SBX_TASK_FAILED, error = t->kill_reason;
    if (sbx_log_enabled(SBX_LOG_INFO)) {
        char tenant[128], session[128], why[300];
        sbx_log(SBX_LOG_INFO,
                "task ended id=%s tenant=%s session=%s status=%s outcome=%s exit=%d wall=%.3f "
                "cpu=%.3f peak_mem=%llu%s%s",
                t->id, sbx_log_safe(t->clone.tenant, tenant, sizeof(tenant)),
                t->session[0] ? sbx_log_safe(t->session, session, sizeof(session)) : "-",
                sbx_task_status_name(st), sbx_outcome_name(r->outcome), r->exit_code, r->wall_s,
                r->cpu_s, (unsigned long long)r->peak_memory_bytes, error[0] ? " error=" : "",
                error[0] ? sbx_log_safe(error, why, sizeof(why)) : "");
    }
    rt->running--;
    /* The engine's task is freed with ours, after the callbacks. */
    rt_finish(t, st, error, result, out, out_len, errout, err_len, r->exit_code);
    free(result);
    rt_start_next(rt);
}

/* A task in a session shares the session's network namespace and egress:
 * it can get neither less (policy none) nor rules of its own, so asking for
 * them is refused rather than silently given the session's network. */
static int session_network_differs(const struct rt_task *t, const struct rt_session *x,
                                   sbx_err *err)
{
    const struct sbx_runtime_settings *set = &t->rt->settings;
    if (t->net != set->net)
        return sbx_err_set(err, EINVAL,
                           "the task asks for network policy %s, but session '%s' has %s: a "
                           "session's tasks share its network",
                           sbx_net_policy_name(t->net), x->name, sbx_net_policy_name(set->net));
    if (t->own_policy)
        return sbx_err_set(err, EINVAL,
                           "the task asks for egress rules of its own, but session '%s' shares "
                           "one egress with all its tasks (change the session's rules with POST "
                           "/runtime/network)",
                           x->name);
    return 0;
}

/* A task of an environment with a root, mounts or a seccomp table of its
 * own is built in a sandbox of its own: never inside a live session. */
static int env_in_session_refused(const struct sbx_environment *ev, const char *session,
                                  sbx_err *err)
{
    if (ev && (ev->rootfs || ev->image || ev->writable_root || ev->n_mounts || ev->seccomp_table))
        return sbx_err_set(err, EINVAL,
                           "environment '%s' has a root, mounts or a seccomp table of its own: "
                           "its tasks run outside a live session (session '%s' is live)",
                           ev->name, session);
    return 0;
}

int rt_task_start(struct rt_task *t, sbx_err *err)
{
    struct sbx_runtime *rt = t->rt;
    const struct sbx_runtime_settings *set = &rt->settings;
    /* The queue made its workspace ready first (rt_task_workspace). */
    uint32_t base = (uint32_t)t->ws_uid - set->runner_uid;
    snprintf(t->name, sizeof(t->name), "task-%s-%.36s", rt->cg_tag, t->id);
    t->pending[0] = evbuffer_new();
    t->pending[1] = evbuffer_new();
    t->flush = evtimer_new(rt->o.base, on_flush, t);
    if (!t->pending[0] || !t->pending[1] || !t->flush)
        return sbx_err_set(err, ENOMEM, "task buffers");
    struct sbx_task_opts to = {
        .spec = {.argv = t->argv,
                 .envp = t->env,
                 .workspace = t->workspace,
                 .uid = set->runner_uid,
                 .gid = set->runner_gid,
                 .host_id_base = base,
                 .host_net = t->net == SBX_NET_HOST,
                 .net_rules = t->net == SBX_NET_PROXY ? sbx_egress_rules : NULL,
                 .cg_host = rt->o.cg_host,
                 .cg_limits = t->lim,
                 .file_size_bytes = t->file_size,
                 .tmp_size_bytes = t->tmp_size,
                 .nofile = 1024,
                 .name = t->name,
                 .host_view = !set->mount_sandbox,
                 .host_view_hidden = set->host_view_hidden,
                 .join_pidfd = -1},
        .fds = rt->o.fds[t->seccomp],
        .timeout_s = t->timeout_s,
        .output_limit = t->output_limit,
        .stdin_data = t->stdin_data,
        .stdin_len = t->stdin_len,
        .stdin_fd = -1,
        .on_spawn = rt_task_egress(t),
        .on_take = rt_task_egress_take,
        .on_output = on_output,
        .on_done = on_task_done,
        .ud = t,
        /* the pool serves every task, or only code of the listed environments */
        .poolable = !set->pool.environments.n ||
                    (t->envc && sbx_strv_has(&set->pool.environments, t->envc->name)),
    };
    /* Its own binds, then the clone's (claw-skill and its socket). */
    struct sbx_mount mounts[SBX_MOUNTS_MAX];
    size_t nm = t->n_mounts;
    memcpy(mounts, t->mounts, nm * sizeof(mounts[0]));
    if (rt->clone_mounts)
        nm += rt->clone_mounts(rt->clone_mounts_ud, &t->clone, mounts + nm, SBX_MOUNTS_MAX - nm);
    to.spec.mounts = mounts;
    to.spec.n_mounts = nm;
    /* Inside the live session of that name, if there is one; a skill's
     * task always has a sandbox of its own. */
    struct rt_session *x = t->skill[0] ? NULL : rt_find_session(rt, &t->clone, t->session);
    if (x && session_network_differs(t, x, err) < 0)
        return -1;
    const struct sbx_environment *ev = t->envc;
    if (x && env_in_session_refused(ev, x->name, err) < 0)
        return -1;
    if (!x && ev) { /* its root, its mounts, its seccomp table */
        size_t ne = 0;
        if (rt_env_mounts(t, base, mounts + nm, SBX_MOUNTS_MAX - nm, &ne, err) < 0)
            return -1;
        to.spec.n_mounts = nm + ne;
        to.spec.rootfs = ev->rootfs;
        to.spec.writable_root = ev->writable_root;
        if (ev->seccomp_table && t->seccomp != SBX_SECCOMP_STRICT)
            to.fds.seccomp = ev->seccomp_fd;
    }
    if (x) {
        to.spec.join_pidfd = x->sb.pidfd;
        to.spec.join_cg = &x->sb.cg;
        if (x->per_task && rt_task_sub_cgroup(t, x, &to.spec.join_cg, err) < 0)
            return -1;
        to.spec.workspace = x->workspace;
        to.spec.host_net = set->net == SBX_NET_HOST;
        to.spec.net_rules = NULL;
        to.on_spawn = NULL; /* the session's egress serves it */
    }
    char *zargv[4];
    char **zenv = NULL;
    if (to.poolable && !x && to.spec.argv == t->argv && rt_zygote_for(rt, t, ev, zargv, &zenv)) {
        to.zygote_argv = zargv;
        to.zygote_envp = zenv;
    }
    /* The rules hold the policy's address sets: the task's own policy. */
    cleanup_free char *rules = NULL;
    if (to.spec.net_rules && !x &&
        (sbx_egress_rules_load(err) < 0 || !(rules = sbx_egress_rules_text(t->egress.policy, err))))
        return -1;
    to.spec.net_rules_arg = rules;
    struct sbx_store_transition tr = {
        .to = SBX_TASK_RUNNING, .at = sbx_now_ms(), .sandbox = t->name};
    if (sbx_store_task_transition(rt->o.store, t->id, &tr, err) < 0)
        return -1;
    t->started_at = tr.at;
    rt_metrics_started(t);
    t->t = sbx_task_start(rt->o.base, &to, err);
    if (!t->t)
        return -1;
    if (x) {
        t->in_session = x;
        x->tasks++;
        rt_session_touch(x);
    }
    if (sbx_log_enabled(SBX_LOG_INFO)) {
        char tenant[128], session[128];
        sbx_log(SBX_LOG_INFO, "task started id=%s tenant=%s session=%s sandbox=%s", t->id,
                sbx_log_safe(t->clone.tenant, tenant, sizeof(tenant)),
                t->session[0] ? sbx_log_safe(t->session, session, sizeof(session)) : "-",
                x ? x->cgname : t->name);
    }
    rt_emit(rt, t->clone.tenant, t->session, "task_running", task_event_data(t, "running"));
    rt_clone_activity(rt, &t->clone);
    return 0;
}

/* A skill task's names, binds and output tap, copied from the request. */
static int rt_task_skill(struct rt_task *t, const struct sbx_task_request *req, sbx_err *err)
{
    const char *names[4] = {req->skill, req->skill_source, req->skill_trust, req->skill_version};
    for (size_t i = 0; req->skill && i < 4; i++)
        if (!(t->skill[i] = strdup(names[i] ? names[i] : "")))
            return sbx_err_set(err, ENOMEM, "skill");
    /* room for the clone's three binds */
    if (req->n_mounts > SBX_MOUNTS_MAX - 3)
        return sbx_err_set(err, E2BIG, "%zu binds", req->n_mounts);
    for (size_t i = 0; i < req->n_mounts; i++) {
        if (!(t->mount_strs[2 * i] = strdup(req->mounts[i].host)) ||
            !(t->mount_strs[2 * i + 1] = strdup(req->mounts[i].inside)))
            return sbx_err_set(err, ENOMEM, "binds");
        t->mounts[i] =
            (struct sbx_mount){.host = t->mount_strs[2 * i], .inside = t->mount_strs[2 * i + 1]};
    }
    t->n_mounts = req->n_mounts;
    t->tap = req->on_output;
    t->tap_ud = req->output_ud;
    return 0;
}

/* argv from a language and code: the environment's command, then the code. */
static char **code_argv(const struct sbx_runtime_settings *set, const char *language,
                        const char *code, sbx_err *err)
{
    const struct sbx_environment *env = sbx_settings_environment(set, language);
    if (!env) {
        sbx_err_set(err, EINVAL, "unknown language or environment '%s'", language);
        return NULL;
    }
    char **argv = sbx_strv_dup((const char *const *)env->command.v, 1);
    if (argv && !(argv[env->command.n] = strdup(code))) {
        sbx_strv_free(argv);
        argv = NULL;
    }
    if (!argv)
        sbx_err_set(err, ENOMEM, "command");
    return argv;
}

/* A task's environment: the fixed base, the operator's injected keys (all
 * tenants, then this tenant's), then the request's own. */
char **rt_task_env(const struct sbx_runtime_settings *set, enum sbx_net_policy net,
                   const char *tenant, const char *const *req, sbx_err *err)
{
    const struct sbx_tenant_conf *tc = sbx_settings_tenant(set, tenant);
    struct sbx_egress_env proxy;
    sbx_egress_env_make(&proxy, set->network.proxy_port);
    size_t n_proxy = net == SBX_NET_PROXY ? SBX_EGRESS_ENV_COUNT : 0;
    size_t n = n_proxy + set->task_env.n + (tc ? tc->env.n : 0);
    for (size_t i = 0; req && req[i]; i++)
        n++;
    const char **all = calloc(n + 1, sizeof(*all));
    if (!all) {
        sbx_err_set(err, ENOMEM, "environment");
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < n_proxy; i++)
        all[k++] = proxy.v[i];
    for (size_t i = 0; i < set->task_env.n; i++)
        all[k++] = set->task_env.v[i];
    for (size_t i = 0; tc && i < tc->env.n; i++)
        all[k++] = tc->env.v[i];
    for (size_t i = 0; req && req[i]; i++)
        all[k++] = req[i];
    char **env = sbx_env_build(all, k, err);
    free(all);
    return env;
}

int sbx_runtime_check_limits(const struct sbx_runtime_settings *set,
                             const struct sbx_task_request *r, const struct sbx_limit_names *names,
                             sbx_err *err)
{
    const struct sbx_limits *max = &set->max;
    static const struct sbx_limit_names runtime_names = {"memoryMB", "pids", "cpu",
                                                         "timeoutSeconds"};
    const struct sbx_limit_names *n = names ? names : &runtime_names;
    double mib = (double)r->memory_bytes / (1 << 20);
    if (r->memory_bytes && r->memory_bytes < (8u << 20))
        return sbx_err_set(err, EINVAL, "%s %g MiB is below the minimum 8 MiB", n->memory, mib);
    if (r->memory_bytes > max->memory_bytes)
        return sbx_err_set(err, EINVAL, "%s %g MiB is above the maximum %llu MiB", n->memory, mib,
                           (unsigned long long)(max->memory_bytes >> 20));
    if (r->pids > max->pids)
        return sbx_err_set(err, EINVAL, "%s %llu is above the maximum %llu", n->pids,
                           (unsigned long long)r->pids, (unsigned long long)max->pids);
    if (r->cpu_cores && r->cpu_cores < 0.01)
        return sbx_err_set(err, EINVAL, "%s %g is below the minimum 0.01", n->cpu, r->cpu_cores);
    if (r->cpu_cores > max->cpu_cores)
        return sbx_err_set(err, EINVAL, "%s %g is above the maximum %g", n->cpu, r->cpu_cores,
                           max->cpu_cores);
    if (r->timeout_s > max->timeout_s)
        return sbx_err_set(err, EINVAL, "%s %g is above the maximum %g", n->timeout, r->timeout_s,
                           max->timeout_s);
    return 0;
}

int sbx_runtime_submit(struct sbx_runtime *rt, const struct sbx_task_request *req,
                       sbx_runtime_done_fn done, void *ud, char id[SBX_ID_SIZE], sbx_err *err)
{
    const struct sbx_runtime_settings *set = &rt->settings;
    struct rt_tenant *q = rt_tenant_queue(rt, req->clone.tenant, false);
    if ((q && q->queued >= set->queue_per_tenant) || rt->queued >= set->queue_size)
        return sbx_err_set(err, EAGAIN, "the task queue of tenant '%s' is full", req->clone.tenant);
    if (sbx_runtime_check_limits(set, req, NULL, err) < 0 ||
        rt_clone_admit(rt, &req->clone, err) < 0 || rt_snapshot_busy(rt, &req->clone, err) < 0)
        return -1;
    /* A store that cannot write (a full disk: its reserve spent) keeps what
     * room it has for the ends of the tasks already in: no new ones. */
    if (sbx_store_health(rt->o.store, err) < 0 || rt_workspace_room(rt, &req->clone, err) < 0)
        return -1;
    struct rt_task *t = calloc(1, sizeof(*t));
    if (!t)
        return sbx_err_set(err, ENOMEM, "task");
    t->rt = rt;
    t->clone = req->clone;
    snprintf(t->session, sizeof(t->session), "%s",
             req->session && *req->session ? req->session : rt->default_session);
    if (req->call_id && !(t->call_id = strdup(req->call_id))) {
        free(t);
        return sbx_err_set(err, ENOMEM, "task");
    }
    t->argv =
        req->argv ? sbx_strv_dup(req->argv, 0) : code_argv(set, req->language, req->code, err);
    /* Code in a language runs with its environment's settings. */
    const struct sbx_environment *envc =
        req->argv ? NULL : sbx_settings_environment(set, req->language ? req->language : "");
    t->envc = envc;
    if (envc && rt_find_session(rt, &req->clone, t->session) &&
        env_in_session_refused(envc, t->session, err) < 0) {
        task_free(t);
        return -1;
    }
    if (envc && envc->image && !envc->rootfs) {
        sbx_err_set(err, envc->image_error ? EIO : EAGAIN, "environment '%s': image %s %s",
                    envc->name, envc->image,
                    envc->image_error ? envc->image_error : "is still being unpacked");
        task_free(t);
        return -1;
    }
    if (envc && envc->seccomp_table && envc->seccomp_fd < 0) {
        sbx_err_set(err, EIO, "environment '%s': its seccomp table is not compiled", envc->name);
        task_free(t);
        return -1;
    }
    t->net = req->net >= 0 ? (enum sbx_net_policy)req->net : envc ? envc->net : set->net;
    t->env = t->argv ? rt_task_env(set, t->net, req->clone.tenant, req->env, err) : NULL;
    if (!t->argv || !t->env || !t->argv[0]) {
        if (t->argv && !t->argv[0])
            sbx_err_set(err, EINVAL, "command is empty");
        task_free(t);
        return -1;
    }
    if (req->stdin_len && !(t->stdin_data = malloc(req->stdin_len))) {
        task_free(t);
        return sbx_err_set(err, ENOMEM, "stdin");
    }
    if (req->stdin_len)
        memcpy(t->stdin_data, req->stdin_data, req->stdin_len);
    t->stdin_len = req->stdin_len;
    const struct sbx_limits *dl = envc ? &envc->limits : &set->limits;
    t->timeout_s = req->timeout_s > 0 ? req->timeout_s : dl->timeout_s;
    t->lim.memory_bytes = req->memory_bytes ? req->memory_bytes : dl->memory_bytes;
    t->lim.pids = req->pids ? req->pids : dl->pids;
    t->lim.cpu_cores = req->cpu_cores > 0 ? req->cpu_cores : dl->cpu_cores;
    t->output_limit = dl->output_bytes;
    t->file_size = dl->file_size_bytes;
    t->tmp_size = dl->tmp_bytes;
    t->seccomp = req->strict ? SBX_SECCOMP_STRICT : envc ? envc->seccomp : set->seccomp;
    if (rt_task_skill(t, req, err) < 0) {
        task_free(t);
        return -1;
    }
    if ((req->net_default >= 0 || req->allow || req->deny) &&
        !(t->own_policy = rt_task_policy(rt, req, err))) {
        task_free(t);
        return -1;
    }

    json_t *cmd = json_array();
    for (size_t i = 0; t->argv[i]; i++)
        json_array_append_new(cmd, sbx_json_text(t->argv[i], strlen(t->argv[i])));
    char *cmd_text = json_dumps(cmd, JSON_COMPACT);
    json_decref(cmd);
    char limits[256];
    snprintf(limits, sizeof(limits),
             "{\"timeoutSeconds\":%g,\"memoryBytes\":%llu,\"pids\":%llu,\"cpu\":%g}", t->timeout_s,
             (unsigned long long)t->lim.memory_bytes, (unsigned long long)t->lim.pids,
             t->lim.cpu_cores);
    struct sbx_store_task rec = {.tenant = t->clone.tenant,
                                 .clone_key = t->clone.key,
                                 .clone_id = t->clone.id,
                                 .session_id = t->session,
                                 .command = cmd_text,
                                 .skill = t->skill[0],
                                 .skill_source = t->skill[1],
                                 .skill_trust_level = t->skill[2],
                                 .skill_version = t->skill[3],
                                 .language = req->argv ? NULL : req->language,
                                 .code = req->argv ? NULL : req->code,
                                 .limits = limits};
    int rc = cmd_text ? sbx_store_task_insert(rt->o.store, &rec, err)
                      : sbx_err_set(err, ENOMEM, "command");
    free(cmd_text);
    if (rc < 0 || !(q = rt_tenant_queue(rt, t->clone.tenant, true))) {
        if (rc == 0)
            sbx_err_set(err, ENOMEM, "queue");
        task_free(t);
        return -1;
    }
    memcpy(t->id, rec.id, SBX_ID_SIZE);
    memcpy(id, rec.id, SBX_ID_SIZE);
    t->done = done;
    t->ud = ud;
    (void)rt_queue_put(rt, t, false); /* its tenant's queue exists: cannot fail */
    t->all_next = rt->active;
    rt->active = t;
    rt_metrics_submitted(t);
    /* Told at submit, as the original does: the task is pending. */
    rt_emit(rt, t->clone.tenant, t->session, "exec_started", task_event_data(t, "pending"));
    rt_clone_activity(rt, &t->clone);
    rt_start_next(rt);
    return 0;
}

struct rt_task *rt_find_active(struct sbx_runtime *rt, const char *id)
{
    for (struct rt_task *t = rt->active; t; t = t->all_next)
        if (strcmp(t->id, id) == 0)
            return t;
    return NULL;
}

void sbx_runtime_forget(struct sbx_runtime *rt, const char *id)
{
    struct rt_task *t = rt_find_active(rt, id);
    if (t)
        t->done = NULL, t->ud = NULL;
}

int sbx_runtime_cancel(struct sbx_runtime *rt, const char *id, sbx_err *err)
{
    struct rt_task *t = rt_find_active(rt, id);
    if (!t)
        return sbx_err_set(err, ENOENT, "task %s is not queued or running", id);
    if (t->t) {
        sbx_task_cancel(t->t); /* on_task_done records it as canceled */
        return 0;
    }
    if (t->format)
        rt_format_unwait(t);
    else
        rt_unqueue(rt, t);
    rt_finish(t, SBX_TASK_CANCELED, "canceled before it started", NULL, NULL, 0, NULL, 0, 124);
    return 0;
}
