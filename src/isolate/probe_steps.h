/* The steps a sandbox is built of, each tried for real in throw-away children
 * (a user namespace with the id map run writes, the other namespaces inside
 * it, a tmpfs, a fresh procfs, pivot_root), plus the capabilities, a cgroup
 * write, the seccomp load and a loop device; and for each step that failed,
 * the exact fix (the container flag or capability to add). A container often
 * offers a namespace yet refuses a later step (Docker masks /proc paths and its
 * seccomp profile blocks pivot_root): only trying the whole chain tells. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "isolate/cgroup.h"
#include "isolate/probe_host.h"

enum sbx_step {
    SBX_STEP_CAPS,        /* the capabilities run (and serve) need */
    SBX_STEP_USERNS,      /* unshare(CLONE_NEWUSER) */
    SBX_STEP_IDMAP,       /* uid_map/gid_map of 65536 ids from the host id base */
    SBX_STEP_NAMESPACES,  /* pid mount net ipc uts cgroup, inside that user namespace */
    SBX_STEP_USER_LIMITS, /* /proc/sys/user of the new user namespace written */
    SBX_STEP_TMPFS,       /* a tmpfs for the new root */
    SBX_STEP_PROCFS,      /* a fresh procfs for the new pid namespace */
    SBX_STEP_PIVOT,       /* pivot_root into the new root */
    SBX_STEP_CGROUP,      /* a child cgroup made, limited and removed */
    SBX_STEP_SECCOMP,     /* the default profile loaded */
    SBX_STEP_LOOP,        /* a free loop device opened (serve's workspace quota) */
    SBX_STEP_COUNT,
};

enum sbx_step_state { SBX_STEP_OK, SBX_STEP_FAILED, SBX_STEP_NOT_TRIED };

#define SBX_STEP_DETAIL_LEN 200
#define SBX_STEP_FIX_LEN 360

struct sbx_step_result {
    enum sbx_step_state state;
    int errnum;                       /* when FAILED: what the kernel said (0: see detail) */
    bool required;                    /* run cannot build a sandbox without it */
    char detail[SBX_STEP_DETAIL_LEN]; /* what was tried or found */
    char fix[SBX_STEP_FIX_LEN];       /* when FAILED: what to change */
};

struct sbx_steps {
    bool in_container; /* /.dockerenv, /run/.containerenv or $container */
    struct sbx_step_result step[SBX_STEP_COUNT];
};

/* Capability bits (linux/capability.h numbers) run and serve need. */
#define SBX_CAPS_RUN                                                                               \
    ((1ull << 21) | (1ull << 7) | (1ull << 6) | (1ull << 0)) /* SYS_ADMIN SETUID SETGID CHOWN */
/* Not SYS_PTRACE: a sandbox's network namespace is opened while its init
 * still has the creator's ids (src/isolate/sandbox.c, map_ids). */
#define SBX_CAPS_SERVE                                                                             \
    (SBX_CAPS_RUN | (1ull << 1) | (1ull << 3) | (1ull << 27)) /* + DAC_OVERRIDE FOWNER MKNOD */

const char *sbx_step_name(enum sbx_step s); /* "user namespace", "pivot_root", ... */

/* Pure: "--cap-add SYS_ADMIN --cap-add SETUID" for the bits of want missing
 * from have, into buf ("" when none is missing). */
void sbx_caps_flags(uint64_t have, uint64_t want, char *buf, size_t len);

/* Pure: the fix for step s failing with errnum (in a container, or on a host). */
void sbx_step_fix(enum sbx_step s, int errnum, bool in_container, char *buf, size_t len);

/* Try every step. p and cg are what the host probe and cgroup detection found
 * (the seccomp load and the cgroup bases come from them). Forks short-lived
 * children; call it from a single-threaded process. Never fails for a step,
 * only for a bad argument. */
int sbx_steps_try(const struct sbx_host_probe *p, const struct sbx_cg_host *cg,
                  struct sbx_steps *out, sbx_err *err);

/* Pure: add a warning (with its fix) to plan for every failed step, a
 * required one making the plan not full. */
void sbx_steps_to_plan(const struct sbx_steps *st, struct sbx_isolation_plan *plan);
