/* Supervision of one task on the caller's libevent loop: stdio relay with
 * per-stream caps, the timeout, cancel, and the outcome. Nothing here blocks
 * the loop for long: every fd is non-blocking and watched by events. */
#pragma once

#include <event2/event.h>
#include <stddef.h>

#include "exec/report.h"
#include "isolate/sandbox.h"

enum sbx_stream { SBX_STDOUT = 1, SBX_STDERR = 2 };

/* A sandbox asked of the spawner (isolate/spawner.h) for a caller on the
 * loop other than a task (a live session's holder): fn is called from the
 * loop with rc 1 and the sandbox (the caller's from then on), or -1 and why.
 * 1: asked (*handle lets sbx_spawn_async_cancel drop the wait: fn is not
 * called, the answer goes to fn2 with ud2 instead, to release the sandbox
 * that comes; fn2 NULL: it is killed and its release tried once, a cgroup
 * still busy then is left to the next start's sweep); 0: not asked (no
 * spawner, or a spec it cannot carry): the caller makes it (sbx_spawn_local). */
typedef void (*sbx_spawned_fn)(void *ud, int rc, struct sbx_sandbox *sb, const sbx_err *err);
int sbx_spawn_async(struct event_base *base, const struct sbx_spec *spec, sbx_spawned_fn fn,
                    void *ud, void **handle);
void sbx_spawn_async_cancel(void *handle, sbx_spawned_fn fn2, void *ud2);

struct sbx_task;

struct sbx_task_opts {
    struct sbx_spec spec;
    /* The init binary and seccomp programs; when either is -1, prepare() is
     * called right after the clone to provide both (so a one-shot caller
     * builds them while the child builds its root). */
    struct sbx_sandbox_fds fds;
    int (*prepare)(void *ud, struct sbx_sandbox_fds *fds, sbx_err *err);
    double timeout_s;
    uint64_t output_limit; /* bytes kept per stream */
    /* stdin: either a buffer, or an fd of the caller to relay (-1: neither). */
    const char *stdin_data;
    size_t stdin_len;
    int stdin_fd;
    /* Called right after the clone, before the child gets its fds, with
     * the sandbox's network namespace (sbx_sandbox.netns_fd, the caller's
     * to use, not to keep; e.g. to start an egress in it); a -1 return
     * kills the sandbox and fails sbx_task_start with that err. */
    int (*on_spawn)(void *ud, int netns_fd, sbx_err *err);
    /* Called with each piece of output that is kept (within the cap). */
    void (*on_output)(void *ud, enum sbx_stream s, const char *buf, size_t n);
    /* Called once, when the task and everything of its sandbox are gone. */
    void (*on_done)(void *ud, struct sbx_task *t);
    void *ud;
    /* The caller allows a pooled sandbox (exec/pool.h) for this task. */
    bool poolable;
    /* A task with on_spawn (an egress) is pooled only with this: a pooled
     * sandbox's egress (exec/pool.h net_start), the caller's from now on,
     * to bind to the task; called before the command is sent. -1: the
     * sandbox is discarded (and the egress with it: the caller keeps
     * nothing), the task built as usual. */
    int (*on_take)(void *ud, void *net, sbx_err *err);
    /* ... and one holding a zygote: zygote_argv started ahead with
     * zygote_envp (no secret of any task), to which the task's command goes
     * (NULL: none). */
    char *const *zygote_argv;
    char *const *zygote_envp;
};

/* Spawn the sandbox and start watching it. The spec's strings must outlive
 * the task. Returns NULL with err when the sandbox could not even be cloned
 * (later setup failures end as outcome setup_error). */
struct sbx_task *sbx_task_start(struct event_base *base, const struct sbx_task_opts *o,
                                sbx_err *err);
/* Kill the whole tree now; on_done follows with outcome canceled. */
void sbx_task_cancel(struct sbx_task *t);
const struct sbx_report *sbx_task_report(const struct sbx_task *t);
/* The kept output of a stream (not NUL-terminated). */
const char *sbx_task_output(const struct sbx_task *t, enum sbx_stream s, size_t *len);
void sbx_task_free(struct sbx_task *t);
