/* The warm pool: sandboxes built ahead of their task by the spawner
 * (isolate/spawner.h), each for one exact spec but its command: the same
 * clone (workspace, host id range), root, limits and seccomp programs, with
 * no network (no egress, not the host's) and no extra binds. Its init waits
 * on the sync socket for the command (sbx_sandbox_send_command). A task
 * whose spec matches an idle one takes it (a hit); any other is built as
 * before (a miss, or not eligible). A pooled sandbox serves one task and is
 * gone with it, as any sandbox: nothing crosses from one task to the next.
 * Refills are asked of the spawner when a task starts, answered later on the
 * loop; without a spawner there is no pool (the loop never builds one).
 * Pooled for any clone: a sandbox built with no workspace (spec.attach_later)
 * under a host id range of its own, from the pool's region (ids_first, one
 * range per live pooled sandbox, given back only once its sandbox is all
 * gone), serves the first task of any clone whose spec matches but for the
 * clone: the spawner makes the clone's workspace an idmapped mount (the
 * clone's host ids seen as the sandbox's) and its binds detached mounts
 * (sbx_attach_open), init moves them in place with the command. So clones
 * still share no host uid, on disk or in a live process. Where the
 * workspace's filesystem cannot be idmapped, the task is built cold and
 * that filesystem is pooled per clone from then on: a sandbox built for the
 * clone that ran a task, keyed by its own host ids (the fallback). */
#pragma once

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

struct sbx_pool_config {
    bool enabled;
    /* Sandboxes held ready (and being built) for one description (the
     * spec but the command and what is bound at take): max_idle at first;
     * one more each time a task of it finds none ready, back down as idle
     * ones time out; never more than max_total in all. */
    uint64_t max_idle;
    uint64_t max_total;
    uint64_t max_active;   /* running tasks + pooled sandboxes at most; 0: no bound */
    double idle_timeout_s; /* an idle sandbox older than this is discarded */
    /* Sandboxes with an egress (spec.net_rules, a task with on_spawn and
     * on_take): net_start(net_ctx, netns) starts it when the sandbox
     * arrives, under a placeholder policy that denies everything;
     * the task's on_take binds it before its command is sent; net_drop
     * frees one whose sandbox is discarded. NULL: such tasks are not
     * pooled. exec/ never looks inside it. */
    void *(*net_start)(void *net_ctx, int netns_fd, sbx_err *err);
    void (*net_drop)(void *net_ctx, void *net);
    void *net_ctx;
    /* A pooled sandbox with an egress is built with the nftables rules
     * (address sets) of its description's latest take. A task whose rules
     * differ from the taken sandbox's (rules by address) has
     * net_sets(net_ctx, net) make its sets the task's once its egress is
     * bound: a job whose net_sets_fd is readable once it answered;
     * net_sets_end then says 0 (the sets are the task's: its command may be
     * sent) or -1 (the sandbox is discarded, the task built cold), and
     * frees it; net_sets_abort kills and frees it. NULL: the rules are part
     * of the description instead. */
    void *(*net_sets)(void *net_ctx, void *net, sbx_err *err);
    int (*net_sets_fd)(void *job);
    int (*net_sets_end)(void *job, sbx_err *err);
    void (*net_sets_abort)(void *job);
    /* The pool's own host id ranges (SBX_ID_RANGE ids each), apart from
     * every clone's: [ids_first, ids_first + ids_ranges * SBX_ID_RANGE).
     * 0 ranges: sandboxes are pooled per clone only. */
    uint32_t ids_first, ids_ranges;
    /* Live sessions' holders (sbx_pool_take_holder): a description of
     * theirs holds at least this many ready once a session of it started
     * (within max_total). 0: as any other description. */
    uint64_t session_idle;
};

void sbx_pool_configure(struct event_base *base, const struct sbx_pool_config *c);
/* Kill and release every pooled sandbox (the daemon's teardown). */
void sbx_pool_shutdown(void);

/* Discard every pooled sandbox built on dir or beneath it (before the
 * workspace is unmounted: a sandbox held ready must not pin it). */
void sbx_pool_forget_workspace(const char *dir);

struct sbx_pool_stats {
    uint64_t hits, misses;   /* eligible tasks served ready / built cold */
    uint64_t zygote_hits;    /* hits with an interpreter started ahead */
    uint64_t any_clone_hits; /* hits of a sandbox pooled for any clone (attached) */
    uint64_t session_hits;   /* live sessions' holders served ready (attached) */
    uint64_t session_misses; /* ... built cold */
    uint64_t built;          /* pooled sandboxes that arrived */
    uint64_t discarded;      /* idle ones ended unused (timeout, evicted, gone stale) */
    uint64_t idle, building;
};
void sbx_pool_stats(struct sbx_pool_stats *out);
/* The memory the idle pooled sandboxes hold: the sum of their cgroups'
 * memory.usage_in_bytes (v1) or memory.current (v2), read now (a few small
 * cgroupfs reads each: for /runtime/status and /metrics, not per task);
 * *counted gets how many were measured (0 in rlimit mode: no cgroup). */
uint64_t sbx_pool_memory(uint64_t *counted);

/* A live session's holder from the pool: a ready sandbox pooled for any
 * clone that matches o (a task's options for the holder's spec with argv
 * NULL, session false; on_take binds its egress) gets the clone's
 * workspace and binds attached, o's limits and egress policy, and instead
 * of a command the order to hold the session (sbx_sandbox_send_command_fds
 * with argv NULL). 1: taken, fn comes later from the loop (*handle until
 * then); 0: none ready or not eligible (a miss: build the holder cold).
 * fn's rc 1: sb is the holder (its STARTED message comes on its sync
 * socket), slot its host id range (sbx_pool_slot_free once the sandbox is
 * all gone), name its cgroup's name; rc 0: it could not be served (the
 * session's description o is no longer needed: build it cold). o's
 * strings and o->ud must live until fn or sbx_pool_holder_cancel. The
 * sandbox is the session's alone: never back in the pool. */
struct sbx_task_opts;
struct sbx_sandbox;
typedef void (*sbx_pool_holder_fn)(void *ud, int rc, struct sbx_sandbox *sb, int slot,
                                   const char *name);
int sbx_pool_take_holder(struct event_base *base, const struct sbx_task_opts *o,
                         sbx_pool_holder_fn fn, void *ud, void **handle);
/* The session is gone before fn: fn never comes; the sandbox goes back to
 * the pool if it was not given the order yet. */
void sbx_pool_holder_cancel(void *handle);
/* A holder's host id range is free again (its sandbox is all gone); -1:
 * nothing. */
void sbx_pool_slot_free(int slot);
