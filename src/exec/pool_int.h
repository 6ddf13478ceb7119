/* Between exec/task.c and exec/pool.c (not for other layers). */
#pragma once

#include "exec/task.h"

struct pool_entry;

/* task.c asks: 1 the task got a pooled sandbox (sb; its command is sent),
 * 0 it did not (build it as usual). Either way a refill may be asked. */
int exec_pool_take(struct event_base *base, const struct sbx_task_opts *o, struct sbx_sandbox *sb);
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
