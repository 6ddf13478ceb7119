/* The runtime's own structures, shared by its files (runtime.c, events.c,
 * queue.c, tasks.c, sessions.c, egress.c, workspace.c); nothing outside
 * src/runtime includes this. */
#pragma once

#include <event2/buffer.h>

#include "net/egress.h"
#include "workspace/quota.h"
#include "workspace/quota_mode.h"
#include "runtime/runtime.h"

struct rt_task;

/* One tenant's queue, in the round-robin ring of tenants with waiting tasks. */
struct rt_tenant {
    char code[SBX_SEGMENT_MAX + 1];
    struct rt_task *head, *tail;
    unsigned queued;
    struct rt_tenant *next;
};

struct rt_task {
    struct sbx_runtime *rt;
    char id[SBX_ID_SIZE];
    struct sbx_clone clone;
    char session[SBX_SEGMENT_MAX + 1];
    char *call_id; /* the agent's tool call, or NULL */
    char **argv;
    char **env;
    char *stdin_data;
    size_t stdin_len;
    struct sbx_cg_limits lim;
    double timeout_s;
    uint64_t output_limit, file_size, tmp_size;
    enum sbx_net_policy net;
    enum sbx_seccomp_profile seccomp;
    char *workspace;          /* once known (rt_task_workspace) */
    uid_t ws_uid;             /* the clone's host uid of the runner */
    struct rt_format *format; /* waiting for its workspace image (not queued) */
    char name[64];            /* the sandbox's cgroup name, "" until started */
    int64_t started_at;       /* as recorded; 0 until running */
    struct sbx_task *t;
    struct rt_session *in_session;  /* running inside this live session */
    struct sbx_policy *own_policy;  /* when the request changed the egress policy */
    struct retired_policy *retired; /* replaced while running, freed at the end */
    struct sbx_egress_opts egress;
    struct sbx_egress *eg; /* proxy policy, not in a session: the task's own */
    sbx_runtime_done_fn done;
    void *ud;
    /* For the metrics: CLOCK_MONOTONIC at submit and start (0 until then),
     * and the report's outcome once it ended in a sandbox. */
    double submitted_s, started_s;
    const char *outcome;
    struct evbuffer *pending[2];
    struct event *flush;
    /* A skill's task: its names (NULL otherwise), its own binds (the
     * clone's are added at start), its output tap. */
    char *skill[4]; /* name, source, trust level, version */
    struct sbx_mount mounts[SBX_MOUNTS_MAX];
    size_t n_mounts;
    char *mount_strs[2 * SBX_MOUNTS_MAX];
    /* Code in an environment: it (borrowed from the settings), and its
     * mounts' sources as this task fills them in (rt_env_mounts). */
    const struct sbx_environment *envc;
    char *env_mount_src[SBX_ENV_MOUNTS_MAX];
    void (*tap)(void *ud, int stream, const char *buf, size_t n);
    void *tap_ud;
    struct rt_task *next;     /* in its tenant's queue */
    struct rt_task *all_next; /* in the list of active tasks */
    bool stopping;            /* canceled by its runtime's stop */
    char *kill_reason;        /* killed for this (its workspace over quota): failed */
    /* In a session: its own cgroup ([0] what was made, [1] what it joins). */
    struct sbx_cgroup *sub_cg;
};

/* The environment's mounts of t (envmounts.c) into out[0..room): their
 * sources made beneath their roots; *n of them. */
int rt_env_mounts(struct rt_task *t, uint32_t host_base, struct sbx_mount *out, size_t room,
                  size_t *n, sbx_err *err);

/* A start request waiting for its session to be ready. */
/* Someone told once how a session's start or a workspace's format ended
 * (err NULL: it went well). */
struct rt_waiter {
    void (*fn)(void *ud, const sbx_err *err);
    void *ud;
    struct rt_waiter *next;
};
/* Call and free every waiter of a list already taken from its owner. */
void rt_waiters_notify(struct rt_waiter *w, const sbx_err *err);
/* Free, uncalled, the waiters of *list with ud (their request went away). */
void rt_waiters_drop(struct rt_waiter **list, void *ud);

struct retired_policy {
    struct sbx_policy *p;
    struct retired_policy *next;
};

/* A live session: one sandbox whose init holds its namespaces; every task
 * naming the session runs inside it, and what a task leaves (files in /tmp,
 * background processes) is there for the next, until stop or idleness. */
struct rt_session {
    struct sbx_runtime *rt;
    char tenant[SBX_SEGMENT_MAX + 1];
    char name[SBX_SEGMENT_MAX + 1];
    char clone_key[SBX_SEGMENT_MAX + 1];
    char clone_id[SBX_SEGMENT_MAX + 1];
    char cgname[64];
    char *workspace;
    char **env;
    struct sbx_sandbox sb;
    struct sbx_egress *egress;
    struct sbx_egress_opts egress_opts;
    struct event *ev_exit, *ev_idle;
    struct event *ev_ready; /* init's first message, while not ready */
    bool ready;             /* its pid 1 holds the namespaces: tasks may join */
    bool formatting;        /* waiting for its workspace image, not spawned yet */
    void *spawning;         /* its sandbox asked of the spawner (sbx_spawn_async) */
    void *taking;           /* a pooled sandbox taken for it, being attached */
    int slot;               /* that sandbox's host id range (exec/pool.h), -1 none */
    struct rt_waiter *waiters;
    unsigned tasks;
    struct sbx_cg_limits lim; /* of its cgroup; zero fields: the settings' defaults */
    /* v1: each task gets a cgroup of its own below the session's, with this
     * CPU quota (the session's cpu limit); the session's own has none then.
     * 0 with per_task false: its tasks share the session's cgroup (v2). */
    bool per_task;
    double task_cpu;
    struct sbx_policy *own_policy;  /* set through the API, or NULL */
    struct retired_policy *retired; /* replaced ones, freed with the session */
    struct rt_session *next;
};

/* Someone else waiting for a workspace image (a session start, a file
 * request): told from the loop once it is formatted. */
/* A clone's workspace image being made ready (formatted if new, attached
 * and mounted) or unmounted (idle) by a helper child watched by its pidfd:
 * the clone's tasks wait in the queue until it ends. */
struct rt_format {
    struct sbx_runtime *rt;
    struct sbx_clone clone;
    char *dir; /* the workspace directory it is for */
    struct sbx_ws_job f;
    bool unmount; /* an idle workspace's unmount, not a mount */
    uid_t uid;    /* the owner of its root */
    gid_t gid;
    struct event *ev;        /* the pidfd is readable */
    struct rt_task *waiters; /* tasks that hold a slot for it (linked by next) */
    struct rt_waiter *others;
    bool finished; /* reaped (rc, err: how it went) */
    int rc;
    sbx_err err;
    struct rt_format *next;
};

/* An ended session's sandbox being released from the loop: killed, then
 * reaped and its cgroup removed when the kernel lets it (sessions.c). */
struct rt_release {
    struct sbx_runtime *rt;
    struct sbx_sandbox sb;
    char cgname[64];
    int slot;         /* a pooled sandbox's host id range, given back once it is all gone */
    int64_t deadline; /* sbx_mono_ms(): past it the cgroup is left */
    struct event *ev; /* the next try */
    struct rt_release *next;
};

/* A clone's workspace made ready by this daemon run: mounted (loop), given
 * its project quota (project) or watched (monitor). */
struct mounted_ws {
    char *path;
    struct sbx_clone clone;
    uid_t uid; /* the owner of its root */
    gid_t gid;
    bool dirty;      /* used since the last measure (monitor) */
    int64_t used_at; /* sbx_mono_ms() of its last use: idle ones are unmounted (loop) */
    bool over;       /* measured over its quota (monitor): its writers stopped */
    uint64_t used;   /* as last measured (monitor) */
    struct mounted_ws *next;
};

struct sbx_runtime {
    struct sbx_runtime_opts o;
    char **zygote_env;                    /* a zygote's environment (no tenant's, no task's) */
    char *zygote_code[2];                 /* python's and node's programs (runtime/zygote.c) */
    struct sbx_runtime_settings settings; /* o.settings points here */
    char default_session[SBX_SEGMENT_MAX + 1];
    char cg_tag[SBX_RUNTIME_CG_TAG_SIZE]; /* in its sandboxes' cgroup names */
    struct rt_tenant *ring;               /* tenants with queued tasks */
    unsigned queued, running;
    unsigned preparing;     /* tasks waiting for their workspace image */
    struct rt_task *active; /* queued and running */
    unsigned egress_conns;  /* live egress connections of all sandboxes */
    /* the warm pool's egresses wait under this: deny everything (egress.c) */
    struct sbx_policy *pool_policy;
    struct mounted_ws *mounted; /* workspace images this daemon mounted */
    struct rt_format *formats;  /* workspace images being formatted */
    /* monitor mode: the periodic measure and the helper child measuring */
    struct event *ev_monitor, *ev_measured;
    struct event *ev_idle_ws; /* loop mode: the sweep of idle mounted workspaces */
    struct sbx_ws_measure measure;
    struct mounted_ws **measuring; /* what the child measures, in order */
    struct rt_session *sessions;
    struct rt_release *releasing; /* sandboxes of ended sessions */
    struct sbx_subscriber *subs;
    struct rt_snapjob *snapjobs; /* snapshot operations (snapshots.c) */
    struct rt_clone_rt *clones;  /* the clones' runtimes (lifecycle.c) */
    sbx_clone_mounts_fn clone_mounts;
    void *clone_mounts_ud;
};

/* events.c */
/* sbx_runtime_emit for the runtime's own events (data stolen): a failure is
 * logged, and what the event told of goes on (the store holds the task's
 * record; the stream is what lost something). */
void rt_emit(struct sbx_runtime *rt, const char *tenant, const char *session, const char *type,
             json_t *data);

/* queue.c: the fair per-tenant queue and the scheduler. */
/* The queue of tenant code; made (joining the ring) when create is set. NULL
 * when there is none (or it cannot be made). */
struct rt_tenant *rt_tenant_queue(struct sbx_runtime *rt, const char *code, bool create);
/* Into its tenant's queue, at the back or the front (the tenant joins the
 * ring if it is not in it); -1 only when a tenant queue cannot be made. */
int rt_queue_put(struct sbx_runtime *rt, struct rt_task *t, bool front);
/* Remove a queued task from its tenant's queue. */
void rt_unqueue(struct sbx_runtime *rt, struct rt_task *t);
/* Start t (dequeued), or end it as failed with the reason. false when it
 * waits for its clone's workspace image instead (it is the format's, holding
 * a slot, until the format's end launches it again). */
bool rt_launch(struct sbx_runtime *rt, struct rt_task *t);
/* Start queued tasks while there is room. */
void rt_start_next(struct sbx_runtime *rt);
/* Fail every queued task of clone c with error (their workspace cannot be
 * made). */
void rt_fail_queued(struct sbx_runtime *rt, const struct sbx_clone *c, const char *error);

/* tasks.c */
int rt_task_start(struct rt_task *t, sbx_err *err);
/* A python or node code task that a zygote can run as the cold interpreter would
 * (runtime/zygote.c): 1 and argv (3 slots and NULL, pointing into rt and ev)
 * and envp set; 0 not. */
int rt_zygote_for(struct sbx_runtime *rt, const struct rt_task *t, const struct sbx_environment *ev,
                  char *argv[4], char ***envp);
void rt_zygote_free(struct sbx_runtime *rt);
int rt_task_sub_cgroup(struct rt_task *t, const struct rt_session *x,
                       const struct sbx_cgroup **join, sbx_err *err);
void rt_task_sub_cgroup_free(struct rt_task *t);
/* Record the end, tell the stream and the waiter, free the task. */
void rt_finish(struct rt_task *t, enum sbx_task_status status, const char *error,
               const char *result, const char *out, size_t out_len, const char *errout,
               size_t err_len, int exit_code);
struct rt_task *rt_find_active(struct sbx_runtime *rt, const char *id);
/* A task's environment: the fixed base, the operator's injected keys (all
 * tenants, then this tenant's), then the request's own. */
char **rt_task_env(const struct sbx_runtime_settings *set, enum sbx_net_policy net,
                   const char *tenant, const char *const *req, sbx_err *err);

/* sessions.c */
/* The live session of clone c called name, or NULL. */
struct rt_session *rt_find_session(struct sbx_runtime *rt, const struct sbx_clone *c,
                                   const char *name);
/* Activity: the idle timeout counts again from now. */
void rt_session_touch(struct rt_session *x);
/* Gone for the API at once; its sandbox is killed and released from the
 * loop afterwards. */
void rt_session_free(struct rt_session *x);
/* At the runtime's end: the releases still going on, finished now (the
 * bounded synchronous release: the loop is ending). */
void rt_releases_finish(struct sbx_runtime *rt);

/* metrics.c: counted where tasks.c sees each event. */
void rt_metrics_init(struct sbx_runtime *rt);
void rt_metrics_fini(struct sbx_runtime *rt);
void rt_metrics_submitted(struct rt_task *t);
void rt_metrics_started(struct rt_task *t);
void rt_metrics_finished(struct rt_task *t, enum sbx_task_status status);
/* End every live session of clone c (its runtime stopped), each saying why
 * on its stream. */
void rt_sessions_end_clone(struct sbx_runtime *rt, const struct sbx_clone *c, const char *reason);

/* lifecycle.c: the runtime of a clone. */
/* 0, or EINVAL "runtime stopped" when c's runtime is stopped. */
int rt_clone_admit(struct sbx_runtime *rt, const struct sbx_clone *c, sbx_err *err);
/* A task of c was submitted, started or ended: its last event is now, its
 * idle timeout counts again once it has no work. */
void rt_clone_activity(struct sbx_runtime *rt, const struct sbx_clone *c);
void rt_clones_free(struct sbx_runtime *rt);

/* workspace.c */
/* The workspace of a clone, made and mounted on first use: its directory
 * (the caller frees it) and the host ids its files belong to. */
char *rt_workspace(struct sbx_runtime *rt, const struct sbx_clone *c, uid_t *uid, gid_t *gid,
                   sbx_err *err);
/* The same for a task that is to start, without waiting on the loop: 1 when
 * t->workspace is ready, 0 when its image is being formatted (the task waits
 * in the queue: the format's end starts it), -1 with err. */
int rt_task_workspace(struct rt_task *t, sbx_err *err);
/* Whether clone c's workspace image exists or has room to be made (ENOSPC,
 * naming the figures, when a new one would take the state filesystem's
 * reserve): asked when a task is submitted, so that it is refused at once. */
int rt_workspace_room(struct sbx_runtime *rt, const struct sbx_clone *c, sbx_err *err);
/* The first host id of the warm pool's own ranges (above every clone's) and
 * their number (*n, 0: none). */
uint32_t rt_pool_ids(const struct sbx_runtime_settings *set, uint32_t *n);
/* monitor mode: start and stop measuring the workspaces in use. */
int rt_monitor_init(struct sbx_runtime *rt, sbx_err *err);
void rt_monitor_fini(struct sbx_runtime *rt);
/* loop mode: start and stop the sweep of idle mounted images. */
int rt_idle_unmount_init(struct sbx_runtime *rt, sbx_err *err);
void rt_idle_unmount_fini(struct sbx_runtime *rt);
/* Kill a format still running (at the runtime's end) and free it; the
 * tasks that waited for it are left to the caller (active, not queued), the
 * others are told it failed. */
void rt_format_free(struct rt_format *x);
/* t no longer waits for its workspace image (it was canceled). */
void rt_format_unwait(struct rt_task *t);

/* snapshots.c */
/* EBUSY when a snapshot or rollback of clone c is under way (its tasks,
 * sessions and file writes wait for none: they are refused meanwhile). */
int rt_snapshot_busy(struct sbx_runtime *rt, const struct sbx_clone *c, sbx_err *err);
/* Whether any snapshot operation of clone c is under way. */
bool rt_snapshot_any(const struct sbx_runtime *rt, const struct sbx_clone *c);
/* At the runtime's end: helpers killed and reaped, waiters told. */
void rt_snapshots_free(struct sbx_runtime *rt);

/* egress.c: egress options, policies, flows. */
/* A task's or a session's own policy and the ones it replaced. */
void rt_policies_free(struct sbx_policy *own, struct retired_policy *retired);
/* The operator's rules plus the request's, as one policy of the task. */
struct sbx_policy *rt_task_policy(struct sbx_runtime *rt, const struct sbx_task_request *req,
                                  sbx_err *err);
/* A live egress's new rules (req's, on top of the operator's): they become
 * *own; the policy they replace is kept in *retired until its owner is freed,
 * as connections being set up may still use it. */
int rt_policy_replace(struct sbx_runtime *rt, struct sbx_egress *eg,
                      const struct sbx_task_request *req, struct sbx_policy **own,
                      struct retired_policy **retired, sbx_err *err);
/* The egress of a sandbox of ours: the configured limits, the shared
 * connection count, flows to on_flow_cb. */
struct sbx_egress_opts rt_egress_opts(struct sbx_runtime *rt, const struct sbx_policy *policy,
                                      sbx_flow_cb on_flow_cb, void *ud);
/* The on_spawn hook of a task that is to have its own egress (proxy policy,
 * not in a session), or NULL; its options are filled in t, which outlives
 * them, and the hook starts the egress in the new sandbox's namespace. */
int (*rt_task_egress(struct rt_task *t))(void *ud, int netns_fd, sbx_err *err);
/* The on_take hook of a proxy task the pool may serve: a pooled sandbox's
 * egress (started by rt_pool_egress_start) becomes the task's, bound to
 * its policy and its flows (tenant, audit, events). */
int rt_task_egress_take(void *ud, void *net, sbx_err *err);
/* The pool's egress hooks (exec/pool.h net_start, net_drop): under
 * rt->pool_policy, made at the first call; flows before a task are only
 * logged. */
void *rt_pool_egress_start(void *ctx, int netns_fd, sbx_err *err);
void rt_pool_egress_drop(void *ctx, void *net);
/* The hooks that make a taken sandbox's address sets its task's
 * (exec/pool.h net_sets, net_sets_fd, net_sets_end, net_sets_abort). */
void *rt_pool_egress_sets(void *ctx, void *net, sbx_err *err);
int rt_pool_sets_fd(void *job);
int rt_pool_sets_end(void *job, sbx_err *err);
void rt_pool_sets_abort(void *job);
/* The egress of a session reports its flows on the session's stream. */
void rt_session_flow(void *ud, const struct sbx_flow *f);
