/* Between exec/task.c and exec/pool.c (not for other layers). */
#pragma once

#include "exec/task.h"

struct pool_entry;

/* task.c asks: 1 the task got a pooled sandbox (sb; its command is sent),
 * 0 it did not (build it as usual), 2 it gets a sandbox pooled for any clone
 * once the clone's mounts are made (exec_spawner_ask_attach for t: the
 * answer comes to exec_pool_attached). Either way a refill may be asked. */
int exec_pool_take(struct event_base *base, const struct sbx_task_opts *o, struct sbx_sandbox *sb,
                   struct sbx_task *t);
/* The attach's answer (rc as sbx_spawner_reply_attach's; fds its n fds,
 * closed here) for pe, taken for the task whose options are o (NULL: the
 * task is gone): 1 the command is sent, *sb is the sandbox and *slot its
 * host id range (exec_pool_slot_put once it is all gone); 0 not (the task
 * is built cold; pe is back in the pool or gone). */
int exec_pool_attached(struct pool_entry *pe, const struct sbx_task_opts *o, int rc, int *fds,
                       size_t n, const sbx_err *e, struct sbx_sandbox *sb, int *slot);
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
