/* Live sessions: one sandbox kept between tasks, started on request, stopped
 * on request, when its sandbox ends or after its idle timeout. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/time.h"
#include "exec/env.h"
#include "exec/pool.h"
#include "exec/task.h"
#include "isolate/spawner.h"
#include "runtime/runtime_int.h"

/* The longest a session start waits for its sandbox to be set up. */
#define SESSION_START_MS 10000
static const struct timeval session_start_limit = {.tv_sec = SESSION_START_MS / 1000,
                                                   .tv_usec = (SESSION_START_MS % 1000) * 1000};

/* An ended session's release: the kernel gives no event for a cgroup that is
 * empty and removable, so it is tried again every RELEASE_RETRY_MS for at
 * most RELEASE_BOUND_MS (as exec/task.c does for tasks); past that the cgroup
 * is left (a stale one is swept at the next start) and the log says so. */
#define RELEASE_RETRY_MS 10
#define RELEASE_BOUND_MS 1500

static void release_free(struct rt_release *r)
{
    for (struct rt_release **p = &r->rt->releasing; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    event_free(r->ev);
    free(r);
}

/* r's sandbox is all gone: a pooled one's host id range is free again. */
static void release_done(struct rt_release *r)
{
    sbx_pool_slot_free(r->slot);
    release_free(r);
}

static void release_try(struct rt_release *r)
{
    sbx_err e = {0};
    if (sbx_sandbox_release_step(&r->sb, &e) == 0) {
        release_done(r);
        return;
    }
    if (e.errnum == EBUSY && sbx_mono_ms() < r->deadline) {
        struct timeval tv = {.tv_usec = RELEASE_RETRY_MS * 1000};
        if (event_add(r->ev, &tv) == 0)
            return;
    }
    sbx_sandbox_abandon(&r->sb); /* a pooled one's host id range is not used again */
    char msg[600], why[300];
    sbx_err_wrap(&e, "release");
    sbx_log(SBX_LOG_WARN, "session sandbox left cgroup=%s error=%s", r->cgname,
            sbx_log_safe(sbx_err_format(&e, msg, sizeof(msg)), why, sizeof(why)));
    release_free(r);
}

static void on_release(evutil_socket_t fd, short what, void *arg)
{
    release_try(arg);
}

/* Kill a session's sandbox sb and release it from the loop; without a
 * record for it, the bounded synchronous release (only when memory is
 * short). The first step is never taken here: release_step is for an init
 * that has exited, and this one was only just killed (whether it is dead yet
 * is a race with the kernel), and a step's failure is logged only by
 * release_try. slot: a pooled sandbox's host id range (-1 none), given
 * back once the sandbox is all gone. */
static void sandbox_release(struct sbx_runtime *rt, struct sbx_sandbox *sb, const char *cgname,
                            int slot)
{
    if (sb->pidfd < 0 && !sb->cg_made) {
        sbx_sandbox_abandon(sb); /* never spawned: its fds, if any */
        return;
    }
    sbx_sandbox_kill(sb);
    struct rt_release *r = calloc(1, sizeof(*r));
    if (!r || !(r->ev = evtimer_new(rt->o.base, on_release, r))) {
        free(r);
        if (sbx_sandbox_release(sb, NULL) == 0)
            sbx_pool_slot_free(slot);
        return;
    }
    r->rt = rt;
    r->sb = *sb;
    r->slot = slot;
    snprintf(r->cgname, sizeof(r->cgname), "%s", cgname);
    r->deadline = sbx_mono_ms() + RELEASE_BOUND_MS;
    r->next = rt->releasing;
    rt->releasing = r;
    struct timeval tv = {.tv_usec = RELEASE_RETRY_MS * 1000};
    if (event_add(r->ev, &tv) < 0) { /* not armed: the bounded synchronous one */
        if (sbx_sandbox_release(&r->sb, NULL) == 0)
            release_done(r);
        else
            release_free(r);
    }
}

static void session_release(struct rt_session *x)
{
    sandbox_release(x->rt, &x->sb, x->cgname, x->slot);
}

/* The sandbox of a session that ended while the spawner made it: released
 * like a session's (killed at once, its cgroup removed once empty). */
static void on_orphan_spawned(void *ud, int rc, struct sbx_sandbox *sb, const sbx_err *err)
{
    if (rc == 1)
        sandbox_release(ud, sb, "(a session ended while starting)", -1);
}

void rt_releases_finish(struct sbx_runtime *rt)
{
    while (rt->releasing) {
        struct rt_release *r = rt->releasing;
        if (sbx_sandbox_release(&r->sb, NULL) == 0)
            release_done(r);
        else
            release_free(r);
    }
}

struct rt_session *rt_find_session(struct sbx_runtime *rt, const struct sbx_clone *c,
                                   const char *name)
{
    for (struct rt_session *x = rt->sessions; x; x = x->next)
        if (strcmp(x->name, name) == 0 && strcmp(x->tenant, c->tenant) == 0 &&
            strcmp(x->clone_key, c->key) == 0 && strcmp(x->clone_id, c->id) == 0)
            return x;
    return NULL;
}

/* Tell every waiter of x how its start ended (err NULL: ready). */
static void session_notify(struct rt_session *x, const sbx_err *err)
{
    struct rt_waiter *w = x->waiters;
    x->waiters = NULL;
    rt_waiters_notify(w, err);
}

void rt_session_free(struct rt_session *x)
{
    struct sbx_runtime *rt = x->rt;
    if (x->waiters) {
        sbx_err e = {0};
        sbx_err_set(&e, EBUSY, "session %s ended before it was ready", x->name);
        session_notify(x, &e);
    }
    if (x->ev_ready)
        event_free(x->ev_ready);
    if (x->formatting)
        sbx_runtime_workspace_unwait(rt, x);
    if (x->spawning) /* the sandbox that comes for it is released */
        sbx_spawn_async_cancel(x->spawning, on_orphan_spawned, rt);
    if (x->taking) /* the pooled one being attached goes back untouched */
        sbx_pool_holder_cancel(x->taking);
    /* Its running tasks end as canceled (124), not as a sandbox that broke
     * under them. */
    for (struct rt_task *t = rt->active; t; t = t->all_next)
        if (t->in_session == x && t->t)
            sbx_task_cancel(t->t);
    for (struct rt_session **p = &rt->sessions; *p; p = &(*p)->next)
        if (*p == x) {
            *p = x->next;
            break;
        }
    if (x->ev_exit)
        event_free(x->ev_exit);
    if (x->ev_idle)
        event_free(x->ev_idle);
    sbx_egress_free(x->egress);
    session_release(x);
    rt_policies_free(x->own_policy, x->retired);
    sbx_env_free(x->env);
    free(x->workspace);
    free(x);
}

/* The end of a live session for reason: logged and freed; tasks that waited
 * in the queue for it to be set up are looked at again (they run without
 * it). */
static void session_close(struct rt_session *x, const char *reason)
{
    char tenant_s[128], name_s[128];
    sbx_log(SBX_LOG_INFO, "session ended tenant=%s session=%s reason=\"%s\"",
            sbx_log_safe(x->tenant, tenant_s, sizeof(tenant_s)),
            sbx_log_safe(x->name, name_s, sizeof(name_s)), reason);
    struct sbx_runtime *rt = x->rt;
    bool waited = !x->ready;
    rt_session_free(x);
    if (waited)
        rt_start_next(rt);
}

/* An end the session's stream is told of (not asked for through the API). */
static void session_end(struct rt_session *x, const char *reason)
{
    rt_emit(x->rt, x->tenant, x->name, "runtime_stopped",
            json_pack("{s:s, s:s}", "runtimeId", x->name, "reason", reason));
    session_close(x, reason);
}

static void on_session_exit(evutil_socket_t fd, short what, void *arg)
{
    session_end(arg, "the session's sandbox ended");
}

/* Whether a task of x was submitted and has not started yet (in its tenant's
 * queue, waiting for its workspace): work for x as much as a running one. */
static bool session_has_waiting(const struct rt_session *x)
{
    for (const struct rt_task *t = x->rt->active; t; t = t->all_next)
        if (!t->t && strcmp(t->session, x->name) == 0 && strcmp(t->clone.tenant, x->tenant) == 0 &&
            strcmp(t->clone.key, x->clone_key) == 0 && strcmp(t->clone.id, x->clone_id) == 0)
            return true;
    return false;
}

/* Idle: no task of it running or waiting to run for the whole timeout (the
 * last one to end, or to start, armed the timer again). On a busy machine a
 * task may wait in the queue longer than the timeout: it holds the session. */
static void on_session_idle(evutil_socket_t fd, short what, void *arg)
{
    struct rt_session *x = arg;
    if (x->tasks)
        return; /* the end of the last one arms the timer again */
    if (session_has_waiting(x))
        rt_session_touch(x); /* looked at again later (it may be canceled unstarted) */
    else
        session_end(x, "idle_timeout");
}

void rt_session_touch(struct rt_session *x)
{
    double secs = x->rt->settings.idle_timeout_s;
    if (secs <= 0 || !x->ev_idle)
        return;
    struct timeval tv = {.tv_sec = (time_t)secs,
                         .tv_usec = (suseconds_t)((secs - (double)(time_t)secs) * 1e6)};
    /* Not armed, the session would outlive its idle timeout: the operator
     * hears of it (the session itself still works, and stop ends it). */
    if (event_add(x->ev_idle, &tv) < 0) {
        char tenant_s[128], name_s[128];
        sbx_log(SBX_LOG_WARN, "session idle timer not armed tenant=%s session=%s",
                sbx_log_safe(x->tenant, tenant_s, sizeof(tenant_s)),
                sbx_log_safe(x->name, name_s, sizeof(name_s)));
    }
}

/* x could not be set up: its waiters hear why, it is freed. */
static void session_failed(struct rt_session *x, const sbx_err *e)
{
    char tenant_s[128], name_s[128], msg[600], why[300];
    sbx_log(SBX_LOG_WARN, "session failed to start tenant=%s session=%s error=%s",
            sbx_log_safe(x->tenant, tenant_s, sizeof(tenant_s)),
            sbx_log_safe(x->name, name_s, sizeof(name_s)),
            sbx_log_safe(sbx_err_format(e, msg, sizeof(msg)), why, sizeof(why)));
    struct sbx_runtime *rt = x->rt;
    /* The caller hears what failed and where (a bare "fork" says little);
     * EAGAIN at a clone or fork is a process cap. */
    sbx_err told = {0};
    sbx_err_set(&told, e->errnum, "session %s could not be set up: %s%s", x->name,
                sbx_err_format(e, msg, sizeof(msg)),
                e->errnum == EAGAIN ? " (a process cap: sandbox.total_pids or the host's)" : "");
    memcpy(told.stage, e->stage, sizeof(told.stage));
    session_notify(x, &told);
    rt_session_free(x);
    rt_start_next(rt); /* what waited for it runs now, without it */
}

/* init's first message: STARTED (ready), a set-up error, or nothing in time. */
static void on_session_started(evutil_socket_t fd, short what, void *arg)
{
    struct rt_session *x = arg;
    struct sbx_init_msg m;
    sbx_err e = {0};
    ssize_t n = what & EV_READ ? recv(fd, &m, sizeof(m), MSG_DONTWAIT) : -1;
    if (n < 0 && (errno == EAGAIN || errno == EINTR) && (what & EV_READ)) {
        event_add(x->ev_ready, &session_start_limit);
        return;
    }
    if (n == (ssize_t)sizeof(m) && m.kind == SBX_MSG_STARTED) {
        event_free(x->ev_ready);
        x->ev_ready = NULL;
        x->ready = true;
        char tenant_s[128], name_s[128];
        sbx_log(SBX_LOG_INFO, "session started tenant=%s session=%s sandbox=%s",
                sbx_log_safe(x->tenant, tenant_s, sizeof(tenant_s)),
                sbx_log_safe(x->name, name_s, sizeof(name_s)), x->cgname);
        struct sbx_runtime *rt = x->rt;
        rt_session_touch(x); /* idleness counts from now */
        rt_emit(rt, x->tenant, x->name, "runtime_started",
                json_pack("{s:s, s:s, s:s}", "runtimeId", x->name, "cloneId", x->clone_id,
                          "tenantCode", x->tenant));
        session_notify(x, NULL);
        rt_start_next(rt); /* its tasks waited in the queue */
        return;
    }
    if (!(what & EV_READ))
        sbx_err_stage(&e, "session", ETIMEDOUT, "not set up in %d ms", SESSION_START_MS);
    else if (n == (ssize_t)sizeof(m) && m.kind == SBX_MSG_SETUP_ERROR) {
        m.stage[sizeof(m.stage) - 1] = m.text[sizeof(m.text) - 1] = '\0';
        sbx_err_stage(&e, m.stage, m.errnum, "%s", m.text);
    } else
        sbx_err_stage(&e, "session", n < 0 ? errno : EPIPE, "its init ended before it started");
    session_failed(x, &e);
}

void sbx_runtime_session_unwait(struct sbx_runtime *rt, void *ud)
{
    for (struct rt_session *x = rt->sessions; x; x = x->next)
        rt_waiters_drop(&x->waiters, ud);
}

static int session_made(struct rt_session *x, bool pooled, sbx_err *err);

/* The spawner's answer for x. */
static void on_session_spawned(void *ud, int rc, struct sbx_sandbox *sb, const sbx_err *err)
{
    struct rt_session *x = ud;
    sbx_err e = {0};
    x->spawning = NULL;
    if (rc != 1) {
        session_failed(x, err);
        return;
    }
    x->sb = *sb;
    if (session_made(x, false, &e) < 0)
        session_failed(x, &e);
}

/* A pooled sandbox's egress (started ahead under the pool's placeholder)
 * becomes x's, bound to the operator's policy and x's flows, before the
 * order to hold is sent (exec/pool.h on_take). */
static int session_egress_take(void *ud, void *net, sbx_err *err)
{
    (void)err;
    struct rt_session *x = ud;
    sbx_egress_free(sbx_steal_pointer(&x->egress));
    x->egress = net;
    x->egress_opts = rt_egress_opts(x->rt, x->rt->o.policy, rt_session_flow, x);
    sbx_egress_bind(x->egress, x->egress_opts.policy, x->egress_opts.on_flow, x->egress_opts.ud);
    return 0;
}

static int session_spawn(struct rt_session *x, bool pool, sbx_err *err);

/* The pool's answer for x: its holder, attached, or none (built cold). */
static void on_session_holder(void *ud, int rc, struct sbx_sandbox *sb, int slot, const char *name)
{
    struct rt_session *x = ud;
    sbx_err e = {0};
    x->taking = NULL;
    if (rc == 1) {
        x->sb = *sb;
        x->sb.cg.subs = true; /* its tasks' own cgroups go below it */
        x->slot = slot;
        snprintf(x->cgname, sizeof(x->cgname), "%s", name);
    }
    if (rc == 1 ? session_made(x, true, &e) : session_spawn(x, false, &e))
        session_failed(x, &e);
}

/* Make x's sandbox (its workspace is ready): taken from the warm pool
 * (pool), or asked of the spawner, set up from the loop; its STARTED
 * message tells it is ready. */
static int session_spawn(struct rt_session *x, bool pool, sbx_err *err)
{
    struct sbx_runtime *rt = x->rt;
    const struct sbx_runtime_settings *set = &rt->settings;
    /* One CPU quota shared by every task of a session throttles them all
     * (0.25 CPU: throttled in 81 of 89 periods, exec p99 43-58 ms measured):
     * each task gets the quota in a cgroup of its own below the session's,
     * which then has none (memory and processes stay the session's, shared).
     * On v2 the session's init then lives in a leaf of its own (no process
     * in a cgroup that hands controllers down: sbx_cgroup_split, done by the
     * sandbox's creation when the host has cgroup.kill). */
    x->task_cpu = x->lim.cpu_cores > 0 ? x->lim.cpu_cores : set->limits.cpu_cores;
    const struct sbx_cg_host *h = rt->o.cg_host;
    x->per_task = h && ((h->mode == SBX_CG_V1 && h->v1_has[SBX_CGC_CPU]) ||
                        (h->mode == SBX_CG_V2 && h->v2_kill));
    struct sbx_clone c = {0};
    snprintf(c.tenant, sizeof(c.tenant), "%s", x->tenant);
    snprintf(c.key, sizeof(c.key), "%s", x->clone_key);
    snprintf(c.id, sizeof(c.id), "%s", x->clone_id);
    uid_t uid;
    gid_t gid;
    free(x->workspace);
    sbx_env_free(x->env);
    x->env = NULL;
    if (!(x->workspace = rt_workspace(rt, &c, &uid, &gid, err)) ||
        !(x->env = rt_task_env(set, set->net, x->tenant, NULL, err)))
        return -1;
    struct sbx_spec spec = {.envp = x->env,
                            .workspace = x->workspace,
                            .uid = set->runner_uid,
                            .gid = set->runner_gid,
                            .host_id_base = (uint32_t)uid - set->runner_uid,
                            .host_net = set->net == SBX_NET_HOST,
                            .net_rules = set->net == SBX_NET_PROXY ? sbx_egress_rules : NULL,
                            .cg_host = rt->o.cg_host,
                            .cg_limits = {.memory_bytes = x->lim.memory_bytes
                                                              ? x->lim.memory_bytes
                                                              : set->limits.memory_bytes,
                                          .pids = x->lim.pids ? x->lim.pids : set->limits.pids,
                                          .cpu_cores = x->per_task ? 0 : x->task_cpu},
                            .file_size_bytes = set->limits.file_size_bytes,
                            .tmp_size_bytes = set->limits.tmp_bytes,
                            .nofile = 1024,
                            .name = x->cgname,
                            .session = true,
                            .host_view = !set->mount_sandbox,
                            .host_view_hidden = set->host_view_hidden,
                            .join_pidfd = -1};
    cleanup_free char *rules = NULL;
    if (spec.net_rules &&
        (sbx_egress_rules_load(err) < 0 || !(rules = sbx_egress_rules_text(rt->o.policy, err))))
        return -1;
    spec.net_rules_arg = rules;
    struct sbx_mount mounts[SBX_MOUNTS_MAX];
    if (rt->clone_mounts) {
        spec.n_mounts = rt->clone_mounts(rt->clone_mounts_ud, &c, mounts, SBX_MOUNTS_MAX);
        spec.mounts = mounts;
    }
    /* A ready sandbox of the warm pool, as a task's but with no command
     * (pooled sessions: pool.environments unset, or pool.sessions set);
     * its miss is built as before. */
    struct sbx_task_opts to = {.spec = spec,
                               .fds = rt->o.fds[set->seccomp],
                               .on_take = session_egress_take,
                               .ud = x,
                               .poolable = !set->pool.environments.n || set->pool.sessions};
    to.spec.session = false;
    to.spec.argv = to.spec.envp = NULL;
    if (pool && sbx_pool_take_holder(rt->o.base, &to, on_session_holder, x, &x->taking) == 1)
        return 0;
    /* From the spawner without waiting (its pids cap counts the holder at
     * its clone: isolate/spawner.h); in-process when it cannot. */
    if (sbx_spawn_async(rt->o.base, &spec, on_session_spawned, x, &x->spawning) == 1)
        return 0;
    if (sbx_spawn_local(&spec, &x->sb, err) < 0)
        return -1;
    return session_made(x, false, err);
}

/* x's sandbox is made (x->sb): its egress, its fds (a pooled one has
 * them, its egress bound at take), its events. */
static int session_made(struct rt_session *x, bool pooled, sbx_err *err)
{
    struct sbx_runtime *rt = x->rt;
    const struct sbx_runtime_settings *set = &rt->settings;
    if (!pooled && set->net == SBX_NET_PROXY) {
        /* a pooled egress bound to it whose sandbox then failed: built cold */
        sbx_egress_free(sbx_steal_pointer(&x->egress));
        x->egress_opts = rt_egress_opts(rt, rt->o.policy, rt_session_flow, x);
        if (!(x->egress = sbx_egress_start(&x->egress_opts, x->sb.netns_fd, err)))
            return -1;
    }
    if (!pooled && sbx_sandbox_send_fds(&x->sb, &rt->o.fds[set->seccomp], err) < 0)
        return -1;
    /* Tasks join the session's namespaces: not before its pid 1 has built the
     * root and holds them (a task that joined earlier found a half-made mount
     * namespace). Its STARTED message says so; the loop goes on meanwhile. */
    x->ev_exit = event_new(rt->o.base, x->sb.pidfd, EV_READ, on_session_exit, x);
    x->ev_idle = evtimer_new(rt->o.base, on_session_idle, x);
    x->ev_ready = event_new(rt->o.base, x->sb.sync_fd, EV_READ, on_session_started, x);
    if (!x->ev_exit || !x->ev_idle || !x->ev_ready || event_add(x->ev_exit, NULL) < 0 ||
        event_add(x->ev_ready, &session_start_limit) < 0)
        return sbx_err_set(err, ENOMEM, "session events");
    rt_session_touch(x);
    return 0;
}

/* The clone's first workspace image is made: the sandbox now. */
static void on_session_workspace(void *ud, const sbx_err *err)
{
    struct rt_session *x = ud;
    sbx_err e = {0};
    x->formatting = false;
    if (err)
        session_failed(x, err);
    else if (session_spawn(x, true, &e) < 0)
        session_failed(x, &e);
}

int sbx_runtime_session_start(struct sbx_runtime *rt, const struct sbx_clone *c, const char *name,
                              sbx_session_ready_fn ready, void *ud, sbx_err *err)
{
    return sbx_runtime_session_start_limits(rt, c, name, NULL, ready, ud, err);
}

int sbx_runtime_session_start_limits(struct sbx_runtime *rt, const struct sbx_clone *c,
                                     const char *name, const struct sbx_cg_limits *lim,
                                     sbx_session_ready_fn ready, void *ud, sbx_err *err)
{
    struct rt_session *x = rt_find_session(rt, c, name);
    if (x && x->ready)
        return 1;
    if (!x && rt_snapshot_busy(rt, c, err) < 0)
        return -1;
    struct rt_waiter *w = calloc(1, sizeof(*w));
    if (!w)
        return sbx_err_set(err, ENOMEM, "session");
    *w = (struct rt_waiter){.fn = ready, .ud = ud, .next = x ? x->waiters : NULL};
    if (x) { /* being set up: one more waiter */
        x->waiters = w;
        return 0;
    }
    char id[SBX_ID_SIZE];
    if (!(x = calloc(1, sizeof(*x)))) {
        free(w);
        return sbx_err_set(err, ENOMEM, "session");
    }
    if (sbx_id_new(id, err) < 0) {
        free(w);
        free(x);
        return -1;
    }
    x->rt = rt;
    if (lim)
        x->lim = *lim;
    x->sb.pidfd = x->sb.sync_fd = x->sb.stdin_fd = x->sb.stdout_fd = x->sb.stderr_fd = -1;
    x->sb.netns_fd = -1;
    x->slot = -1;
    snprintf(x->tenant, sizeof(x->tenant), "%s", c->tenant);
    snprintf(x->name, sizeof(x->name), "%s", name);
    snprintf(x->clone_key, sizeof(x->clone_key), "%s", c->key);
    snprintf(x->clone_id, sizeof(x->clone_id), "%s", c->id);
    snprintf(x->cgname, sizeof(x->cgname), "session-%s-%.36s", rt->cg_tag, id);
    x->next = rt->sessions;
    rt->sessions = x;
    /* A clone's first image is formatted off the loop: the sandbox is made
     * once it is (the name is taken meanwhile). */
    int rc = sbx_runtime_workspace_when_ready(rt, c, on_session_workspace, x, err);
    if (rc == 0)
        x->formatting = true;
    if (rc == 0 || (rc > 0 && session_spawn(x, true, err) == 0)) {
        x->waiters = w;
        return 0;
    }
    free(w); /* told by the -1, not by ready */
    rt_session_free(x);
    return -1;
}

void rt_sessions_end_clone(struct sbx_runtime *rt, const struct sbx_clone *c, const char *reason)
{
    for (struct rt_session *x = rt->sessions; x;) {
        struct rt_session *next = x->next;
        if (rt_find_session(rt, c, x->name) == x) {
            session_end(x, reason);
            next = rt->sessions; /* the list changed: from its head again */
        }
        x = next;
    }
}

int sbx_runtime_session_stop(struct sbx_runtime *rt, const struct sbx_clone *c, const char *name)
{
    struct rt_session *x = rt_find_session(rt, c, name);
    if (!x)
        return -1;
    session_close(x, "stopped");
    return 0;
}

int sbx_runtime_session_set_network(struct sbx_runtime *rt, const struct sbx_clone *c,
                                    const char *name, int net_default, const char *const *allow,
                                    const char *const *deny, sbx_err *err)
{
    struct rt_session *x = rt_find_session(rt, c, name);
    if (!x)
        return sbx_err_set(err, ENOENT, "no live session %s", name);
    if (!x->egress)
        return sbx_err_set(err, ENOTSUP, "session %s has no egress (its policy is not proxy)",
                           name);
    struct sbx_task_request req = {.net_default = net_default, .allow = allow, .deny = deny};
    return rt_policy_replace(rt, x->egress, &req, &x->own_policy, &x->retired, err);
}

bool sbx_runtime_session_live(struct sbx_runtime *rt, const struct sbx_clone *c, const char *name)
{
    return rt_find_session(rt, c, name) != NULL;
}

void sbx_runtime_session_touch(struct sbx_runtime *rt, const struct sbx_clone *c, const char *name)
{
    struct rt_session *x = rt_find_session(rt, c, name);
    if (x && x->ready) {
        rt_session_touch(x);
        rt_clone_activity(rt, c); /* and its clone's runtime is not idle either */
    }
}

int sbx_runtime_session_freeze(struct sbx_runtime *rt, const struct sbx_clone *c, const char *name,
                               bool frozen, sbx_err *err)
{
    struct rt_session *x = rt_find_session(rt, c, name);
    if (!x || !x->ready)
        return sbx_err_set(err, ENOENT, "no live session %s", name);
    return sbx_cgroup_freeze_start(&x->sb.cg, frozen, err);
}

int sbx_runtime_session_stats(struct sbx_runtime *rt, const struct sbx_clone *c, const char *name,
                              struct sbx_cg_stats *st, struct sbx_cg_limits *lim, sbx_err *err)
{
    struct rt_session *x = rt_find_session(rt, c, name);
    if (!x || !x->ready)
        return sbx_err_set(err, ENOENT, "no live session %s", name);
    const struct sbx_limits *d = &rt->settings.limits;
    *lim = (struct sbx_cg_limits){
        .memory_bytes = x->lim.memory_bytes ? x->lim.memory_bytes : d->memory_bytes,
        .pids = x->lim.pids ? x->lim.pids : d->pids,
        .cpu_cores = x->lim.cpu_cores > 0 ? x->lim.cpu_cores : d->cpu_cores};
    return sbx_cgroup_stats(&x->sb.cg, st, err);
}

int sbx_runtime_session_connect(struct sbx_runtime *rt, const struct sbx_clone *c, const char *name,
                                uint16_t port, sbx_err *err)
{
    struct rt_session *x = rt_find_session(rt, c, name);
    if (!x || !x->ready)
        return sbx_err_set(err, ENOENT, "no live session %s", name);
    if (rt->settings.net == SBX_NET_HOST)
        return sbx_err_set(err, ENOTSUP,
                           "sandboxes share the host's network here: their loopback is the host's");
    return sbx_netns_connect_loopback(x->sb.netns_fd, port, err);
}
