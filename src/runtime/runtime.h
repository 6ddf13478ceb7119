/* The daemon's task manager: a bounded queue fair between tenants, at most
 * max_concurrent sandboxes at once, every task recorded in the store before it
 * starts and at each transition, and the per-session event streams (stored,
 * then pushed to live subscribers). A task runs in a sandbox of its own, or,
 * when it names a live session, inside that session's sandbox, which stays
 * (its namespaces, /tmp, background processes) until stop or idleness. */
#pragma once

#include <event2/event.h>
#include <jansson.h>

#include "base/id.h"
#include "base/json.h"
#include "exec/task.h"
#include "runtime/settings.h"
#include "store/store.h"

#define SBX_SEGMENT_MAX 64

struct sbx_clone {
    char tenant[SBX_SEGMENT_MAX + 1];
    char key[SBX_SEGMENT_MAX + 1]; /* "" when none */
    char id[SBX_SEGMENT_MAX + 1];
};

struct sbx_runtime_opts {
    struct event_base *base;
    struct sbx_store *store;
    const struct sbx_runtime_settings *settings; /* copied; its strings borrowed */
    const struct sbx_cg_host *cg_host;
    struct sbx_sandbox_fds fds[2];             /* per seccomp profile */
    const struct sbx_policy *policy;           /* for proxy sandboxes */
    const struct sbx_policy_opts *policy_opts; /* what it was built from */
    struct sbx_resolver *resolver;
};

struct sbx_runtime;

/* The runtime's sandboxes have cgroups named task-<tag>-<id> and
 * session-<tag>-<id>, the tag being the first hex digits of the SHA-256 of
 * the state directory's real path: other daemons on the host (another state
 * directory) keep theirs beside ours in the same "sandboxd/" base, and a
 * restart after a crash removes every cgroup with its own tag. */
#define SBX_RUNTIME_CG_TAG_SIZE 13
int sbx_runtime_cg_tag(const char *state_dir, char tag[SBX_RUNTIME_CG_TAG_SIZE], sbx_err *err);
/* Whether the cgroup `name` is one of a runtime with this tag. */
bool sbx_runtime_cg_is_ours(const char *name, const char *tag);

struct sbx_runtime *sbx_runtime_new(const struct sbx_runtime_opts *o, sbx_err *err);
/* Graceful stop: queued tasks are canceled, running ones killed, all recorded. */
void sbx_runtime_free(struct sbx_runtime *rt);
/* The runtime's copy of its settings, for the API. */
const struct sbx_runtime_settings *sbx_runtime_settings(const struct sbx_runtime *rt);

struct sbx_task_request {
    struct sbx_clone clone;
    const char *session;     /* "" or NULL: the runtime's default session */
    const char *const *argv; /* the command, or NULL with language + code */
    const char *language;    /* an environment name or alias */
    const char *code;
    const char *const *env; /* "KEY=VALUE", NULL-terminated, may be NULL */
    const char *stdin_data;
    size_t stdin_len;
    /* Network of this task: -1 keeps the configured policy / default; extra
     * egress rules (NULL-terminated, may be NULL) are added to the
     * operator's. Whether the caller may widen is the API's to check. */
    int net;
    int net_default;
    const char *const *allow;
    const char *const *deny;
    double timeout_s; /* 0: the default; each bounded by the maxima */
    uint64_t memory_bytes;
    uint64_t pids;
    double cpu_cores;
    /* A skill's task (skills/ fills these): its names for the record and
     * the events, the read-only binds of its sandbox, the strict seccomp
     * profile when strict; it never joins a live session (its events still
     * go to that session's stream). on_output, when set, also gets each
     * piece of its output as it comes (claw-skill relays it). */
    const char *skill, *skill_source, *skill_trust, *skill_version;
    const struct sbx_mount *mounts;
    size_t n_mounts;
    bool strict;
    /* Egress opened only by the request's own allow rules: the operator's
     * allow rules and allowed CIDRs are left out, and of its allowed
     * internal targets only those the request's allow rules name exactly
     * (a community skill reaches what it declares, and an internal target
     * only when the operator allows it too). */
    bool declared_only;
    void (*on_output)(void *ud, int stream, const char *buf, size_t n); /* 1 stdout, 2 stderr */
    void *output_ud;
    /* The agent's tool call this task runs (NULL: none): its output events
     * carry the call's id as callId and the text as text too. */
    const char *call_id;
};

/* The names a request shape gives the limits, for messages. */
struct sbx_limit_names {
    const char *memory, *pids, *cpu, *timeout;
};
/* Whether the limits a request asks for (0: the default) are within the
 * settings' maxima and above the least memory and cpu a sandbox can run
 * with; EINVAL naming the first that is not ("pids 300 is above the maximum
 * 256"). names NULL: /runtime's (memoryMB, pids, cpu, timeoutSeconds).
 * Submit checks it; the API checks first, with its request's names. */
int sbx_runtime_check_limits(const struct sbx_runtime_settings *set,
                             const struct sbx_task_request *req,
                             const struct sbx_limit_names *names, sbx_err *err);

/* When the task ends: t is its final record as the runtime stored it, with
 * its outputs, valid during the call (no need to read it back). */
typedef void (*sbx_runtime_done_fn)(void *ud, const struct sbx_store_task *t);

/* Validate, record (pending) and queue a task. EAGAIN when the tenant's share
 * of the queue (or the queue) is full: the API answers 429; EINVAL for a bad
 * request, named. done may be NULL. */
int sbx_runtime_submit(struct sbx_runtime *rt, const struct sbx_task_request *req,
                       sbx_runtime_done_fn done, void *ud, char id[SBX_ID_SIZE], sbx_err *err);
/* The waiter of a task went away: done will not be called for it. */
void sbx_runtime_forget(struct sbx_runtime *rt, const char *id);
/* Cancel every queued and running task now (killed, recorded canceled with
 * why), each waiter told as usual: at a stop, before the HTTP server goes,
 * so that a synchronous exec still gets its answer. */
void sbx_runtime_cancel_all(struct sbx_runtime *rt, const char *why);
/* Cancel a queued or running task (whole tree at once). ENOENT when it is not
 * active (it may have ended: the store says). */
int sbx_runtime_cancel(struct sbx_runtime *rt, const char *id, sbx_err *err);

/* The workspace of a clone (created on first use, owned by the clone's host
 * ids): an O_PATH fd the caller closes, and the ids files should get. A
 * clone's first image is formatted here when nobody asked
 * sbx_runtime_workspace_when_ready first: a caller on the loop does. */
int sbx_runtime_workspace(struct sbx_runtime *rt, const struct sbx_clone *c, int *ws_fd, uid_t *uid,
                          gid_t *gid, sbx_err *err);

/* Whether the clone's workspace can be had at once (sbx_runtime_workspace
 * does not wait): 1 when it can (fn is not called), 0 when its first image is
 * being formatted and fn(ud, err) will be called once, from the loop, when it
 * is done (err NULL) or failed (err set), -1 with err. */
typedef void (*sbx_workspace_ready_fn)(void *ud, const sbx_err *err);
int sbx_runtime_workspace_when_ready(struct sbx_runtime *rt, const struct sbx_clone *c,
                                     sbx_workspace_ready_fn fn, void *ud, sbx_err *err);
/* Forget the waiters of sbx_runtime_workspace_when_ready with ud (its request
 * went away). */
void sbx_runtime_workspace_unwait(struct sbx_runtime *rt, void *ud);

/* ---- workspace snapshots (runtime/snapshots.c, docs/snapshots.md) ----
 * Hashing, copying and restoring run in a helper process watched by a
 * pidfd; the loop only starts it and reads its answer. A create or rollback
 * runs only while the clone has no task queued or running and no live
 * session (EBUSY otherwise, 409), and while it runs the clone's new tasks,
 * sessions and file requests are refused (EBUSY): a snapshot is never torn
 * and a rollback never races a writer. Operations of one tenant run one at
 * a time (they share its blobs), those of other tenants alongside. */
enum sbx_snapshot_op {
    SBX_SNAPSHOT_CREATE,   /* message */
    SBX_SNAPSHOT_DIFF,     /* id, against (NULL: the workspace now), path (NULL: none) */
    SBX_SNAPSHOT_ROLLBACK, /* id */
    SBX_SNAPSHOT_DELETE,   /* id */
};
struct sbx_snapshot_request {
    enum sbx_snapshot_op op;
    const char *message;
    const char *id;
    const char *against;
    const char *path;
    /* create: the clone's live session of this name, frozen by the caller
     * (sbx_runtime_session_freeze), does not count as a writer, nor do its
     * tasks; the runtime checks that it is frozen (EBUSY otherwise). NULL:
     * none. */
    const char *frozen_session;
    /* rollback: the snapshot id is one of this other clone of the same
     * tenant (and key): its contents are restored into this clone's
     * workspace, whose own snapshots are left as they are. NULL: this
     * clone's. */
    const char *from_clone;
};
/* result: the helper's answer (borrowed during the call), err NULL; or err.
 *  create:   {snapshot: {id, timestamp (ms), message, fileCount, size},
 *             created, pruned: [ids], skipped}
 *  diff:     {from, to, added: [...], modified: [...], deleted: [...],
 *             truncated, file?: {path, diff, truncated} }
 *  rollback: {success: true}
 *  delete:   {ok: true, blobsRemoved, bytesFreed} */
typedef void (*sbx_snapshot_done_fn)(void *ud, const sbx_err *err, json_t *result);
/* 0: done(ud, …) will be called once from the loop; -1 with err (EBUSY,
 * EINVAL). */
int sbx_runtime_snapshot(struct sbx_runtime *rt, const struct sbx_clone *c,
                         const struct sbx_snapshot_request *r, sbx_snapshot_done_fn done, void *ud,
                         sbx_err *err);
/* The waiter ud went away: its operation goes on, unanswered. */
void sbx_runtime_snapshot_forget(struct sbx_runtime *rt, void *ud);
/* The clone's index, {current, snapshots: [{id, timestamp (ms), message,
 * fileCount, size}]} oldest first: one small file read. */
int sbx_runtime_snapshot_list(struct sbx_runtime *rt, const struct sbx_clone *c, json_t **out,
                              sbx_err *err);

/* Change the egress policy of a running task (proxy policy): its default
 * and extra rules, on top of the operator's, for new connections and DNS
 * questions from now on. ENOENT when not running, ENOTSUP without an egress,
 * EINVAL for a bad rule. */
int sbx_runtime_set_network(struct sbx_runtime *rt, const char *id, int net_default,
                            const char *const *allow, const char *const *deny, sbx_err *err);

/* Live sessions: a sandbox that stays, holding its namespaces, until stop or
 * the idle timeout; tasks naming the session run inside it (tasks that name
 * it while it is being set up wait in the queue until it is ready).
 *
 * Starting makes the sandbox and returns at once, before its pid 1 has built
 * its root: 1 when the session was ready already (ready is not called), 0
 * when ready(ud, err) will be called once, from the loop, when it is set up
 * (err NULL) or could not be, or ended first (err set; the session is gone
 * then), -1 with err when it could not even be made. */
typedef void (*sbx_session_ready_fn)(void *ud, const sbx_err *err);
int sbx_runtime_session_start(struct sbx_runtime *rt, const struct sbx_clone *c, const char *name,
                              sbx_session_ready_fn ready, void *ud, sbx_err *err);
/* The same, its cgroup limited by lim (NULL or zero fields: the defaults;
 * the caller checks them against the maxima). */
int sbx_runtime_session_start_limits(struct sbx_runtime *rt, const struct sbx_clone *c,
                                     const char *name, const struct sbx_cg_limits *lim,
                                     sbx_session_ready_fn ready, void *ud, sbx_err *err);
/* Freeze (or thaw) everything in a live session, one try that never waits:
 * -1 with EBUSY while the kernel has not stopped every process yet (try
 * again later), ENOENT without such a ready session. */
int sbx_runtime_session_freeze(struct sbx_runtime *rt, const struct sbx_clone *c, const char *name,
                               bool frozen, sbx_err *err);
/* What a live session's cgroup has used (cpu, memory now) and its limits
 * (zero fields: none). ENOENT without such a ready session. */
int sbx_runtime_session_stats(struct sbx_runtime *rt, const struct sbx_clone *c, const char *name,
                              struct sbx_cg_stats *st, struct sbx_cg_limits *lim, sbx_err *err);
/* A TCP connection to port on a live session's own loopback (its network
 * namespace): a non-blocking fd whose connect is under way. ENOTSUP when
 * sandboxes share the host's network (its loopback is the host's), ENOENT
 * without such a ready session, ECONNREFUSED. */
int sbx_runtime_session_connect(struct sbx_runtime *rt, const struct sbx_clone *c, const char *name,
                                uint16_t port, sbx_err *err);
/* Forget a waiter of sbx_runtime_session_start (its request went away). */
void sbx_runtime_session_unwait(struct sbx_runtime *rt, void *ud);
/* A session belongs to the one clone that started it: every lookup below
 * is by (clone, name), so another clone of the same tenant never finds it
 * (its own session of that name is another sandbox).
 * Kill everything in it. -1 when there is no such session. */
int sbx_runtime_session_stop(struct sbx_runtime *rt, const struct sbx_clone *c, const char *name);
/* Change a live session's egress rules (default, allow, deny on top of the
 * operator's) for its new connections and DNS questions, at once. */
int sbx_runtime_session_set_network(struct sbx_runtime *rt, const struct sbx_clone *c,
                                    const char *name, int net_default, const char *const *allow,
                                    const char *const *deny, sbx_err *err);
bool sbx_runtime_session_live(struct sbx_runtime *rt, const struct sbx_clone *c, const char *name);
/* Activity in a live session that is not a task (an agent's turn waiting on
 * its model): its idle timeout counts again from now. */
void sbx_runtime_session_touch(struct sbx_runtime *rt, const struct sbx_clone *c, const char *name);

/* ---- the runtime of a clone (the original's state machine) ---- */
/* created -> start -> ready (busy while the clone's tasks are queued or
 * run) -> stop or idle timeout -> stopped -> start -> ready... A stopped
 * runtime refuses new tasks of its clone (EINVAL "runtime stopped") until
 * the next start. Live sessions are inside it: its stop ends them. */
struct sbx_clone_status {
    const char *status; /* created, ready, busy, stopped */
    int64_t started_at; /* ms; 0 before the first start */
    int64_t last_event_at;
    unsigned active; /* the clone's tasks queued or running */
};
/* Start the clone's runtime: runtime_started {runtimeId, cloneId} on the
 * clone's stream (the tenant's default session) when it was not ready; 1
 * when it was (its idle timeout counts again from now), 0, -1 with err. */
int sbx_runtime_clone_start(struct sbx_runtime *rt, const struct sbx_clone *c, sbx_err *err);
/* Stop it: the clone's queued and running tasks are canceled, its live
 * sessions end, runtime_stopped {runtimeId, cloneId} on its stream. */
void sbx_runtime_clone_stop(struct sbx_runtime *rt, const struct sbx_clone *c);
void sbx_runtime_clone_status(struct sbx_runtime *rt, const struct sbx_clone *c,
                              struct sbx_clone_status *out);
/* Binds every sandbox of a clone gets (the claw-skill program and the
 * clone's skill socket): fn fills m[0..max) and returns how many. */
typedef size_t (*sbx_clone_mounts_fn)(void *ud, const struct sbx_clone *c, struct sbx_mount *m,
                                      size_t max);
void sbx_runtime_set_clone_mounts(struct sbx_runtime *rt, sbx_clone_mounts_fn fn, void *ud);

/* Counts for status and readiness. */
void sbx_runtime_counts(const struct sbx_runtime *rt, unsigned *running, unsigned *queued);
/* The same for one tenant's tasks. */
void sbx_runtime_tenant_counts(const struct sbx_runtime *rt, const char *tenant, unsigned *running,
                               unsigned *queued);
const char *sbx_runtime_default_session(const struct sbx_runtime *rt);

/* ---- events ---- */
/* Record an event of a tenant's session and push it to its subscribers; data
 * is stolen. Sessions are per tenant: the same name in two tenants is two
 * streams, and a tenant can only ever reach its own. */
int sbx_runtime_emit(struct sbx_runtime *rt, const char *tenant, const char *session,
                     const char *type, json_t *data, sbx_err *err);

/* A live subscriber: send() gets each event; it returns 0, or -1 when the
 * client's buffer is full (the runtime then stops pushing until resume). */
struct sbx_subscriber {
    char tenant[SBX_SEGMENT_MAX + 1];
    char session[SBX_SEGMENT_MAX + 1];
    char key[2 * SBX_SEGMENT_MAX + 2]; /* filled by subscribe */
    uint64_t last_id;                  /* the last event delivered */
    bool behind;                       /* stopped pushing: catch up from the store on resume */
    bool live_only;                    /* subscribe: from now on, last_id ignored */
    int (*send)(void *ud, uint64_t id, const char *type, const char *json);
    void *ud;
    struct sbx_subscriber *next;
};
/* Replay from last_id (saying events_lost first when some aged out), then
 * keep pushing; with live_only, only what is emitted from now on. */
int sbx_runtime_subscribe(struct sbx_runtime *rt, struct sbx_subscriber *s, sbx_err *err);
/* Only what comes from now on (no replay): a watcher of one task's output. */
int sbx_runtime_subscribe_live(struct sbx_runtime *rt, struct sbx_subscriber *s, sbx_err *err);
/* After a full buffer drained: replay what was missed, then live again. */
void sbx_runtime_resume(struct sbx_runtime *rt, struct sbx_subscriber *s);
void sbx_runtime_unsubscribe(struct sbx_runtime *rt, struct sbx_subscriber *s);
