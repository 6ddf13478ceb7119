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

struct sbx_pool_config {
    bool enabled;
    uint64_t max_idle;     /* sandboxes held ready (and being built), in all */
    uint64_t max_active;   /* no refill while this many tasks run; 0: no bound */
    double idle_timeout_s; /* an idle sandbox older than this is discarded */
    /* The pool's own host id ranges (SBX_ID_RANGE ids each), apart from
     * every clone's: [ids_first, ids_first + ids_ranges * SBX_ID_RANGE).
     * 0 ranges: sandboxes are pooled per clone only. */
    uint32_t ids_first, ids_ranges;
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
    uint64_t built;          /* pooled sandboxes that arrived */
    uint64_t discarded;      /* idle ones ended unused (timeout, evicted, gone stale) */
    uint64_t idle, building;
};
void sbx_pool_stats(struct sbx_pool_stats *out);
