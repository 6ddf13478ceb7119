/* Between exec/task.c and exec/pool.c (not for other layers). */
#pragma once

#include "exec/task.h"

struct pool_entry;

/* task.c asks: 1 the task got a pooled sandbox (sb; its command is sent),
 * 0 it did not (build it as usual), 2 it gets a sandbox pooled for any clone
 * once the clone's mounts are made (exec_spawner_ask_attach for t: the
 * answer comes to exec_pool_attached), or once its address sets are made
 * its own (exec_task_wait_sets). Either way a refill may be asked. */
int exec_pool_take(struct event_base *base, const struct sbx_task_opts *o, struct sbx_sandbox *sb,
                   struct sbx_task *t);
/* The attach's answer (rc as sbx_spawner_reply_attach's; fds its n fds,
 * closed here, or t's while it waits) for pe, taken for the task t whose
 * options are o (NULL: the task is gone): 1 the command is sent, *sb is the
 * sandbox and *slot its host id range (exec_pool_slot_put once it is all
 * gone); 2 t waits for its address sets (exec_task_wait_sets); 0 not (the
 * task is built cold; pe is back in the pool or gone). */
int exec_pool_attached(struct pool_entry *pe, struct sbx_task *t, const struct sbx_task_opts *o,
                       int rc, int *fds, size_t n, const sbx_err *e, struct sbx_sandbox *sb,
                       int *slot);
/* exec_pool_take and exec_pool_attached may also leave t waiting (2) for
 * its address sets in the sandbox of pe (net_sets' job): task.c watches
 * exec_pool_sets_fd(job) (0 watched: fds, n of them, are t's until then;
 * -1 not), then calls exec_pool_sets_done with t's options (NULL: the
 * task is gone or canceled): 1 the command is sent (*sb, *slot as
 * exec_pool_attached's), 0 not (the sandbox is gone; build the task cold).
 * Either way the job and fds are closed. */
int exec_task_wait_sets(struct sbx_task *t, struct pool_entry *pe, void *job, const int *fds,
                        size_t n);
int exec_pool_sets_fd(void *job);
int exec_pool_sets_done(struct pool_entry *pe, const struct sbx_task_opts *o, void *job, int *fds,
                        size_t n, struct sbx_sandbox *sb, int *slot);
/* A pooled sandbox's host id range is free again (its sandbox is gone). */
void exec_pool_slot_put(int slot);
/* task.c queues an attach (a) of the spawner for t (or a session's holder
 * h, with t NULL) and pe: 1 asked, 0 not. */
struct pool_holder;
int exec_spawner_ask_attach(struct event_base *base, const struct sbx_attach *a,
                            struct pool_entry *pe, struct sbx_task *t, struct pool_holder *h);
/* The attach's answer for a session's holder h (as exec_pool_attached's). */
void exec_pool_holder_attached(struct pool_entry *pe, struct pool_holder *h, int rc, int *fds,
                               size_t n, const sbx_err *e);
/* The number of tasks running (for max_active). */
void exec_pool_task_count(int delta);

/* pool.c asks task.c to request spec of the spawner for pe: 1 asked (the
 * answer comes to exec_pool_arrived; *waiter is its place in the queue), 0
 * not. */
int exec_spawner_ask_for_pool(struct event_base *base, const struct sbx_spec *spec,
                              struct pool_entry *pe, void **waiter);
/* pe is gone before its answer: the sandbox that comes for it is killed. */
void exec_spawner_detach(void *waiter);
/* The spawner's answer for pe: rc 1 sb is made, otherwise it is not. */
void exec_pool_arrived(struct pool_entry *pe, int rc, struct sbx_sandbox *sb);
/* A sandbox nobody wants any more (its task or entry went first): killed
 * now, released from the pool's timer (at its shutdown: waited for). */
void exec_pool_bury(struct sbx_sandbox *sb);
/* At shutdown: the spawner's answers still due, taken as they come for at
 * most ms (each goes where it would have gone), so that no sandbox the
 * spawner makes meanwhile is left behind when it stops. */
void exec_spawner_drain(int64_t ms);
