/* What the host's kernel offers for isolation, found by really trying each
 * feature (in a throw-away child wherever trying would change the process for
 * good: a namespace, a seccomp filter), and the isolation `sandboxd run` will
 * therefore apply. This layer only finds and decides; rendering (text, JSON) is
 * the caller's. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"
#include "isolate/cgroup.h"

/* A kernel release "6.1.0-18-amd64" as numbers. */
struct sbx_kver {
    unsigned major, minor, patch;
};

/* Pure: parse a uname release; at least "major.minor" is needed, the patch
 * level defaults to 0, anything after the numbers is ignored. */
int sbx_kver_parse(const char *release, struct sbx_kver *v, sbx_err *err);
/* Pure: is v at least major.minor? */
bool sbx_kver_at_least(const struct sbx_kver *v, unsigned major, unsigned minor);

/* The namespaces a sandbox is made of, in the order they are reported. */
enum sbx_ns {
    SBX_NS_USER,
    SBX_NS_PID,
    SBX_NS_MOUNT,
    SBX_NS_NET,
    SBX_NS_IPC,
    SBX_NS_UTS,
    SBX_NS_CGROUP,
    SBX_NS_COUNT,
};
const char *sbx_ns_name(enum sbx_ns ns); /* "user", "pid", "mount", ... */

/* One feature: available, or the errno that said no (0 when nothing was said). */
struct sbx_feature {
    bool ok;
    int errnum;
};

struct sbx_host_probe {
    char kernel[65]; /* uname release */
    struct sbx_kver kver;
    bool kver_known;
    bool root; /* effective uid 0 */
    /* ns[USER]: unshare(CLONE_NEWUSER) in a child; the others are tried in
     * that child's new user namespace (as a sandbox makes them), or directly
     * when there is none. */
    struct sbx_feature ns[SBX_NS_COUNT];
    long max_user_ns; /* /proc/sys/user/max_user_namespaces, -1 when unreadable */
    /* The default profile compiled (seccomp_bpf_len instructions, -1 when
     * not) and loaded in a child as run loads it (an allow-all filter when it
     * did not compile, so the kernel's part is still known). */
    struct sbx_feature seccomp;
    int seccomp_bpf_len;
    char seccomp_why[SBX_ERR_MSG_MAX]; /* why the profile did not compile */
    /* A NETLINK_NETFILTER socket, and nf_tables answering NFT_MSG_GETGEN on it
     * (in a fresh user + network namespace when one can be made, as a sandbox
     * would ask). */
    struct sbx_feature nft_netlink;
    struct sbx_feature nf_tables;
    struct sbx_feature landlock; /* landlock_create_ruleset(VERSION) */
    int landlock_abi;            /* 0 when unsupported */
    struct sbx_feature clone3;   /* clone3 with CLONE_PIDFD made a child */
    struct sbx_feature pidfd;    /* pidfd_open, pidfd_send_signal, waitid(P_PIDFD) */
};

/* Try everything on the live system. Never fails for lack of a feature (each
 * says why in its errnum), only for a bad argument. Forks short-lived children;
 * call it from a single-threaded process. */
int sbx_host_probe(struct sbx_host_probe *p, sbx_err *err);

#define SBX_PLAN_WARN_MAX 24
#define SBX_PLAN_WARN_LEN 640

struct sbx_plan_warning {
    bool required; /* run cannot give full isolation without it */
    char text[SBX_PLAN_WARN_LEN];
};

/* The isolation `sandboxd run` applies on this host. */
struct sbx_isolation_plan {
    bool ns[SBX_NS_COUNT];   /* made for every sandbox (net: unless --net host) */
    enum sbx_cg_mode limits; /* how memory, processes and CPU are held */
    const char *memory_by;   /* "cgroup v1 memory.limit_in_bytes", "RLIMIT_DATA", ... */
    const char *pids_by;     /* "cgroup v1 pids.max", "RLIMIT_NPROC", ... */
    const char *cpu_by;      /* NULL when the CPU share is not enforced */
    bool cpu_enforced;
    const char *kill_by;         /* how a whole sandbox is killed */
    const char *seccomp_profile; /* "default", NULL when seccomp is unavailable */
    bool full;                   /* no required feature missing */
    struct sbx_plan_warning warn[SBX_PLAN_WARN_MAX];
    size_t n_warn;
};

/* Pure: compose the plan and its warnings from what was found. */
void sbx_isolation_plan_make(const struct sbx_host_probe *p, const struct sbx_cg_host *cg,
                             struct sbx_isolation_plan *plan);
/* "cgroup-v2", "cgroup-v1", "rlimit" */
const char *sbx_plan_limits_name(enum sbx_cg_mode mode);
