/* Resource limits through cgroups: v2 where its controllers are available, v1
 * hybrid otherwise, and rlimits (applied by the task itself, see limits.h) when
 * neither is writable. Every sandbox gets its own cgroup inside a "sandboxd/"
 * child of the calling process's own cgroup in each hierarchy; hierarchies are
 * never remounted and controllers never moved. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <limits.h>

#include "base/err.h"

enum sbx_cg_mode {
    SBX_CG_RLIMIT = 0, /* no writable cgroup: rlimits only */
    SBX_CG_V1 = 1,     /* v1 hierarchies (memory, pids, cpu, cpuacct, freezer) */
    SBX_CG_V2 = 2,     /* unified hierarchy with memory, pids, cpu */
};

/* v1 controllers we use, in this order. */
enum sbx_cg_ctrl {
    SBX_CGC_MEMORY,
    SBX_CGC_PIDS,
    SBX_CGC_CPU,
    SBX_CGC_CPUACCT,
    SBX_CGC_FREEZER,
    SBX_CGC_COUNT,
};

const char *sbx_cg_mode_name(enum sbx_cg_mode mode); /* "v2", "v1", "rlimit" */
const char *sbx_cg_ctrl_name(enum sbx_cg_ctrl c);    /* "memory", ... */

/* What the host offers, found once at start-up. */
struct sbx_cg_host {
    enum sbx_cg_mode mode;
    /* v2: <mount>/<own cgroup>/sandboxd */
    char v2_base[PATH_MAX];
    /* v1: per controller <mount>/<own cgroup>/sandboxd, "" when unavailable */
    char v1_base[SBX_CGC_COUNT][PATH_MAX];
    bool v1_has[SBX_CGC_COUNT];
    /* v2: cgroup.kill (5.14), which a session split into cgroups per task
     * needs (sbx_cgroup_split: one write kills the whole subtree) */
    bool v2_kill;
    char why[256]; /* when mode is SBX_CG_RLIMIT (or a v1 controller missing): why */
};

/* Pure: find the cgroup bases from the texts of /proc/self/mountinfo and
 * /proc/self/cgroup. Writes nothing to disk. mode is the best candidate
 * (v2 if the unified mount's own cgroup lists memory, pids and cpu in
 * cgroup.controllers, which this reads from disk, else v1 if memory and pids
 * hierarchies exist, else rlimit). */
int sbx_cg_host_parse(const char *mountinfo, const char *proc_cgroup, struct sbx_cg_host *host,
                      sbx_err *err);

/* The parent cgroup's name beneath the daemon's own cgroup in each
 * hierarchy: "sandboxd" unless set (sandbox.cgroup_parent), before the first
 * detect. name is one path segment (the caller checked it: no '/', not . or
 * ..); -1 (EINVAL) otherwise. Process-wide, like the hierarchies themselves. */
int sbx_cg_set_base_name(const char *name);
const char *sbx_cg_base_name(void);

/* Detect from the live system (reading /proc/self/{mountinfo,cgroup}), then make
 * sure the "sandboxd/" bases exist and are writable (mkdir; on v2 enabling
 * +memory +pids +cpu in subtree_control along the way). When force_rlimit is
 * true, or nothing is writable, mode becomes SBX_CG_RLIMIT with why set.
 * Never fails for lack of cgroups: only for a bad argument. */
int sbx_cg_host_detect(bool force_rlimit, struct sbx_cg_host *host, sbx_err *err);
/* Same, from explicit file paths (tests point these at a temporary tree). */
int sbx_cg_host_detect_at(const char *mountinfo_path, const char *proc_cgroup_path,
                          bool force_rlimit, struct sbx_cg_host *host, sbx_err *err);

struct sbx_cg_limits {
    uint64_t memory_bytes; /* 0 = unlimited */
    uint64_t pids;         /* 0 = unlimited */
    double cpu_cores;      /* 0 = unlimited */
};

/* The aggregate caps over every sandbox of the daemon: limits on the
 * "sandboxd/" bases themselves (v2: memory.max, pids.max, cpu.max; v1:
 * memory.limit_in_bytes, pids.max, cpu.cfs_quota_us), which every sandbox
 * cgroup is a child of, so many sandboxes together cannot pass them. */
/* One file a cap was written to: its text before, and as the kernel held
 * it just after (the bases are shared with any daemon run before or beside). */
struct sbx_cg_saved {
    char dir[PATH_MAX];
    const char *file;
    char before[64], wrote[64];
};
#define SBX_CG_SAVED_MAX 4 /* memory, pids, cpu (v1: period and quota) */

struct sbx_cg_totals {
    struct sbx_cg_limits want;       /* as configured (0: none) */
    struct sbx_cg_limits now;        /* as read back from the bases (0: none or unknown) */
    bool memory_ok, pids_ok, cpu_ok; /* each wanted one holds */
    char why[256];                   /* the first that does not, and why */
    struct sbx_cg_saved saved[SBX_CG_SAVED_MAX]; /* what was written, in order */
    size_t n_saved;
};
/* Write want to the bases (an unwanted one is left as it is); never fails:
 * what could not be set is said in out (ok false, why). rlimit mode: none
 * can be, said so. What each written file held before is kept in out. */
void sbx_cg_host_set_totals(const struct sbx_cg_host *host, const struct sbx_cg_limits *want,
                            struct sbx_cg_totals *out);
/* Give the bases back what they held before sbx_cg_host_set_totals wrote
 * them, in reverse order: only the files it wrote, and only those that still
 * hold what it wrote (a value changed since is someone else's, kept).
 * Returns how many were restored, or -1 with the first failure in err (the
 * others still tried); t forgets them either way. */
int sbx_cg_host_restore_totals(struct sbx_cg_totals *t, sbx_err *err);
/* What the bases hold now (for doctor and status). */
void sbx_cg_host_read_totals(const struct sbx_cg_host *host, struct sbx_cg_limits *now);

/* One sandbox's cgroup. */
/* The longest path of one sandbox's cgroup directory (its hierarchy's base,
 * the daemon's parent, its name, and for a session's task the session's
 * name too): a longer one is refused (ENAMETOOLONG) when it is made. Six of
 * them are in every live sandbox's record, in every session's, task's and
 * release's: PATH_MAX each made that 24 KiB. */
#define SBX_CG_PATH_MAX 1024

struct sbx_cgroup {
    enum sbx_cg_mode mode;
    char path[SBX_CGC_COUNT][SBX_CG_PATH_MAX]; /* v1: per controller; "" if absent */
    char v2_path[SBX_CG_PATH_MAX];
    /* v2, split (sbx_cgroup_split): the leaf below v2_path its processes go
     * to; "" when they go to v2_path itself */
    char v2_leaf[SBX_CG_PATH_MAX];
    bool cpu_enforced;
    bool subs; /* may have cgroups below it (a session's: its tasks' own) */
    /* v2: a task's own below its session's (sbx_cgroup_create_sub), which
     * counts its memory, CPU time and OOM kills alone */
    bool task_own;
};

/* Longest sandbox cgroup name accepted by sbx_cg_child_path. */
#define SBX_CG_NAME_MAX 128

/* Pure: the directory of sandbox `name` under a base ("<base>/<name>"). name
 * must be a single safe segment ([A-Za-z0-9._-], not "." or "..", at most
 * SBX_CG_NAME_MAX bytes). */
int sbx_cg_child_path(const char *base, const char *name, char *out, size_t len, sbx_err *err);

/* Create the sandbox's cgroup (mkdir in each hierarchy) and write the limits.
 * In SBX_CG_RLIMIT mode this only records the mode. A cgroup of that name that
 * already exists is an error (EEXIST) and is left alone. On failure nothing is
 * left behind. */
int sbx_cgroup_create(const struct sbx_cg_host *host, const char *name,
                      const struct sbx_cg_limits *lim, struct sbx_cgroup *cg, sbx_err *err);
/* The limits of a live cgroup made (or last set) with was, rewritten to lim:
 * only those that differ, in an order the kernel accepts (v1: memsw never
 * below the memory limit). For a sandbox built ahead of its task (the warm
 * pool), before the task's command is sent. Lowering the memory limit below
 * what the cgroup holds fails on v1 (EBUSY). EOPNOTSUPP in rlimit mode (the
 * limits are init's rlimits and memory watch, fixed at its start). On
 * failure the cgroup may hold some of lim's values: discard the sandbox. */
int sbx_cgroup_relimit(struct sbx_cgroup *cg, const struct sbx_cg_limits *was,
                       const struct sbx_cg_limits *lim, sbx_err *err);
/* A task's own CPU budget inside a session's cgroup parent: the directory
 * <parent's cpu (and cpuacct) path>/<name> (v1), or <parent>/<name> of a
 * split parent (v2, sbx_cgroup_split), with a quota of cpu_cores (0: none),
 * so that each task of a session has its own quota instead of sharing one.
 * join is what the task joins (on v1 the parent's other hierarchies, memory
 * and pids staying shared, with the new directories; on v2 the new one, below
 * the parent's memory and pids limits), own holds only the new directories
 * (for sbx_cgroup_remove). EOPNOTSUPP on v1 without a cpu hierarchy, on v2
 * with a parent not split, in rlimit mode: the caller joins parent. */
/* v2: make a fresh cgroup (no process in it yet) a parent of cgroups per
 * task: memory, pids and cpu enabled for its children, and its own processes
 * (a session's init and holder) sent to the leaf <v2_path>/init (v2 allows no
 * process in a cgroup that gives its children controllers); those already in
 * it (a pooled sandbox's init, taken for a session) are moved there first. Freezing,
 * cgroup.kill and the stats of v2_path take in the whole subtree.
 * EOPNOTSUPP outside v2 or without cgroup.kill (before 5.14: the kill without
 * it goes through v2_path's own processes only). */
int sbx_cgroup_split(struct sbx_cgroup *cg, sbx_err *err);
int sbx_cgroup_create_sub(const struct sbx_cgroup *parent, const char *name, double cpu_cores,
                          struct sbx_cgroup *join, struct sbx_cgroup *own, sbx_err *err);
/* Move pid into the cgroup (every hierarchy). No-op in rlimit mode. */
int sbx_cgroup_attach(const struct sbx_cgroup *cg, pid_t pid, sbx_err *err);
/* v1: open each hierarchy's `tasks` file for writing (one fd per distinct
 * directory, -1 elsewhere), for a child to join with sbx_cgroup_join_self().
 * Writing "0" to `tasks` moves only the calling thread, which the kernel does
 * without the global threadgroup lock (and the RCU grace period, milliseconds)
 * that writing another process's pid to cgroup.procs costs; for a freshly
 * cloned, single-threaded child that is the whole process. The fds are
 * O_CLOEXEC and checked against the opener's credentials. Not v1: all -1. */
int sbx_cgroup_open_join(const struct sbx_cgroup *cg, int fds[SBX_CGC_COUNT], sbx_err *err);
/* In the joining process: write "0" to each; stops at the first failure. */
int sbx_cgroup_join_self(const int fds[SBX_CGC_COUNT], sbx_err *err);
void sbx_cgroup_close_join(int fds[SBX_CGC_COUNT]);
/* v2 only: an O_DIRECTORY fd of the cgroup for CLONE_INTO_CGROUP; -1 otherwise. */
int sbx_cgroup_open_dir(const struct sbx_cgroup *cg, sbx_err *err);
/* The kernel gives no event to wait on for a freezer to settle, a cgroup to
 * empty or its directory to become removable (see cgroup.c). So freezing,
 * killing and removing each come as a step that tries once and never waits
 * (EBUSY: not there yet, ask again later), for a caller on an event loop,
 * and as a bounded synchronous form, which polls with short sleeps, for error
 * paths and recovery at start: never on a loop. */

/* Freeze or thaw (v1 freezer.state FROZEN/THAWED, v2 cgroup.freeze), once:
 * freezing is -1 with EBUSY while the kernel has not stopped every task yet.
 * Returns 0 and does nothing when no freezer is available. */
int sbx_cgroup_freeze_start(const struct sbx_cgroup *cg, bool frozen, sbx_err *err);
/* The same, waiting (at most 100 ms) until frozen. */
int sbx_cgroup_freeze(const struct sbx_cgroup *cg, bool frozen, sbx_err *err);
/* SIGKILL every process in the cgroup, one round: v2 cgroup.kill; v1 (and v2
 * before 5.14) freeze, kill each pid from cgroup.procs, thaw. 0 when nothing
 * is left to kill; -1 with EBUSY when processes were signalled and may not be
 * gone yet. */
int sbx_cgroup_kill_step(const struct sbx_cgroup *cg, sbx_err *err);
/* Rounds of kill_step until the cgroup is empty (for at most 0.5 s). */
int sbx_cgroup_kill_all(const struct sbx_cgroup *cg, sbx_err *err);

struct sbx_cg_stats {
    uint64_t cpu_usec;       /* cpuacct.usage / cpu.stat usage_usec */
    uint64_t peak_mem_bytes; /* memory.max_usage_in_bytes / memory.peak */
    uint64_t mem_bytes;      /* memory.usage_in_bytes / memory.current: now */
    uint64_t oom_kills;      /* memory.oom_control oom_kill / memory.events oom_kill */
    bool have_cpu, have_mem;
};
/* Fills what the cgroup can tell (have_* say which); fails only for a bad
 * argument. All zero in rlimit mode. */
int sbx_cgroup_stats(const struct sbx_cgroup *cg, struct sbx_cg_stats *st, sbx_err *err);
/* The existing cgroup `name` left by an earlier run of the daemon (after a
 * crash): filled from the host's bases where its directories exist, for
 * kill_all and destroy. ENOENT when there is none. */
int sbx_cgroup_adopt(const struct sbx_cg_host *host, const char *name, struct sbx_cgroup *cg,
                     sbx_err *err);
/* Calls fn once for each sandbox cgroup directory under the host's bases, per
 * hierarchy it is found in (so a name can come more than once: fn must
 * tolerate that, e.g. adopt then destroy). Nothing in rlimit mode. */
void sbx_cgroup_each(const struct sbx_cg_host *host, void (*fn)(const char *name, void *ud),
                     void *ud);
/* The same, on v1 in the first and the last hierarchy only: a cgroup is made
 * and removed hierarchy by hierarchy in one order, so what a process killed
 * while making or removing one left behind is in the first or the last. Each
 * hierarchy's directory can hold thousands of other cgroups (a daemon's
 * sessions); `run` looks for its own leftovers at every start. */
void sbx_cgroup_each_ends(const struct sbx_cg_host *host, void (*fn)(const char *name, void *ud),
                          void *ud);
/* rmdir in every hierarchy once, without waiting: removes an empty cgroup
 * (and the empty cgroups below it: a session's tasks' own, see
 * sbx_cgroup_create_sub), leaves one with a process in it (EBUSY) and keeps
 * in cg what is left. 0 when nothing of it is left. */
int sbx_cgroup_remove(struct sbx_cgroup *cg, sbx_err *err);
/* rmdir in every hierarchy, retrying (at most 1 s) while the kernel releases it. */
int sbx_cgroup_destroy(struct sbx_cgroup *cg, sbx_err *err);
