/* One sandbox: a process tree in new user, pid, mount, ipc, uts, cgroup and
 * (unless it shares the host's network) net namespaces, on a fresh tmpfs root, with our
 * own init as pid 1 and one task under it. This layer only builds and tears down;
 * supervision (timeouts, output, outcome) is exec/'s. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "base/err.h"
#include "isolate/cgroup.h"
#include "isolate/seccomp.h"
#include "isolate/stage.h"

/* The setup order, written once. Each step is one line of its process's step
 * list and names its stage (isolate/stage.h) in the error it reports; a child
 * or init sends that error to the parent over the sync socket.
 *
 * parent (sbx_sandbox_spawn, parent_steps[] in sandbox.c):
 *   workspace         open it, chown its root to the runner's host ids
 *   cgroup            create it with the limits (a session's task: join the session's)
 *   cgroup            open the v2 directory to clone into / the v1 `tasks` files
 *   spawn             the sync socket, the stdio pipes, init's argv
 *   clone             clone3 into new user, pid, mount, ipc, uts (and net) namespaces
 *   user namespace    write uid_map and gid_map, then release the child
 *   (exec/task.c: the caller's on_spawn, e.g. its egress in the child's network
 *    namespace; then the init binary and seccomp fds: sbx_sandbox_send_fds)
 * child (child_main in sandbox.c, in the new namespaces):
 *   pdeathsig         die with the parent; close the parent's socket end
 *   cgroup            join the sandbox's cgroup (v1), before any allocation
 *   workspace         open it with the parent's ids, for the bind
 *   bind mount        open the extra binds' sources (spec.mounts) the same way
 *                     (wait for the id maps)
 *   user namespace    become root inside
 *   pdeathsig         again: the id change cleared it
 *   hostname          "sandbox"
 *   loopback          up (unless the host's network is shared)
 *   egress            the caller's net_rules (e.g. the egress's nftables), in a
 *                     grandchild whose fd table holds one pipe (see net_rules)
 *   rootfs (sbx_rootfs_setup, steps[] in rootfs.c): make / private, mount
 *                     tmpfs (the new root), bind mount the system dirs, write
 *                     /etc, /dev, mount /proc and mask the host's kernel
 *                     details in it, /tmp and home, /host (without the mount
 *                     sandbox), /workspace, the extra read-only binds (a
 *                     skill at /skill, claw-skill), pivot_root, detach old root,
 *                     remount / read-only, chdir /workspace
 *   user limits       inotify/fanotify bounds of its own, no new namespaces
 *                     (written through its own /proc)
 *   cgroup namespace  unshare, rooted at the sandbox's cgroup
 *   fds               receive init and seccomp fds; stdio, sync, seccomp at 0-4
 *   exec init         execveat of the sealed init memfd (exec_init)
 * init (isolate/init/main.c, pid 1):
 *   init              parse its argv
 *   seccomp           read the compiled programs; block all signals
 *   fork task         then reap, forward signals, report the task's end
 * task (run_task in init/main.c):
 *   session           setsid, signals back to default
 *   rlimit            FSIZE, NOFILE, DATA and NPROC (without cgroups), CORE 0
 *   credentials, capabilities, no_new_privs   drop to the runner, no capability
 *   pdeathsig         (a session's task: die with its sub-init)
 *   fds               only stdio crosses exec
 *   seccomp           install the programs, last
 *   exec              the command
 * A task of a session (join_main in sandbox.c) instead: pdeathsig, cgroup
 * (join the session's), session (setns into its namespaces), user namespace,
 * pdeathsig, session (chdir /workspace), fds, session (fork the sub-init),
 * exec init (as `init --sub`, then the task's steps above). */

#define SBX_RUNNER_ID 10001
#define SBX_DEFAULT_HOST_ID_BASE 100000u
/* Each sandbox's user namespace maps this many ids, from 0 inside. */
#define SBX_ID_RANGE 65536u

/* A host file or directory bound read-only into the sandbox (a skill's
 * active version, the claw-skill program and its socket directory). The
 * host path is opened by the child while its ids are still the creator's;
 * inside is an absolute path its parents are made for. */
struct sbx_mount {
    const char *host;
    const char *inside;
    /* An environment's mount (sbx_environment.mounts): host is relative to
     * root and resolved beneath it without following any symlink
     * (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS); NULL: host is absolute
     * and trusted (the daemon's own binds). */
    const char *root;
    bool writable; /* bound read-write; otherwise read-only */
    /* spec.attach_later: the mount point is a file (otherwise a directory) */
    bool file;
};
#define SBX_MOUNTS_MAX 8

struct sbx_spec {
    char *const *argv;     /* the command, argv[0] looked up in the task's PATH */
    char *const *envp;     /* the task's whole environment */
    const char *workspace; /* host directory bound read-write at /workspace */
    uid_t uid;             /* inside (10001) */
    gid_t gid;
    uint32_t host_id_base; /* inside 0..65535 -> host base..base+65535 */
    bool host_net;         /* share the host's network namespace (policy host) */
    /* Run inside the new network namespace before the root is built (the
     * egress's nftables rules): in a grandchild with a small fd table, so a
     * library that waits with select() (libnftables) never meets an fd number
     * of FD_SETSIZE or more from the creator's large table. NULL: none.
     * Called with arg NULL in the creator itself, it only prepares (loads
     * what every sandbox's call needs, once: a spawner does before its first
     * such sandbox, so no sandbox loads it again). */
    int (*net_rules)(const char *arg, sbx_err *err);
    const char *net_rules_arg; /* net_rules' argument (the rules' text) */
    /* The creator's fds are all few and low (the spawner's): net_rules runs
     * in the sandbox's own setup, without the grandchild's fork and exit. */
    bool net_rules_inline;
    const struct sbx_cg_host *cg_host;
    struct sbx_cg_limits cg_limits;
    uint64_t file_size_bytes; /* RLIMIT_FSIZE; 0 = unlimited */
    uint64_t tmp_size_bytes;  /* size of each tmpfs: /tmp, /home/runner, /dev/shm */
    uint64_t nofile;          /* RLIMIT_NOFILE */
    const char *name;         /* unique, a safe path segment (cgroup name) */
    /* A session: session starts its holder (init with no task, argv NULL);
     * join_pidfd >= 0 runs argv as a task inside the session whose init that
     * is, in its namespaces and its cgroup join_cg (nothing is built). */
    bool session;
    bool host_view; /* no mount sandbox: the host's root, read-only, at /host */
    const char *const *host_view_hidden; /* absolute host paths masked there (NULL-ended) */
    int join_pidfd;
    const struct sbx_cgroup *join_cg;
    const struct sbx_mount *mounts; /* n_mounts <= SBX_MOUNTS_MAX; none for a join */
    size_t n_mounts;
    /* The environment's root directory (its usr/, bin/, lib*, etc/): the
     * system directories and /etc entries come from it instead of the
     * host's. NULL: the host's. */
    const char *rootfs;
    /* The system directories writable for the task: an overlay with a tmpfs
     * upper over each, gone with the sandbox (read_only_rootfs: false). */
    bool writable_root;
    /* Built ahead of its task (exec/pool.c): init takes no command in its
     * argv but waits on the sync socket for sbx_sandbox_send_command's
     * message; argv and envp are unused (NULL). With argv, a zygote: init
     * starts argv (with envp) at once, as it would a task, and passes the
     * command's message on to it, at its fd 4, to EOF. */
    bool pooled;
    /* Pooled for any clone (exec/pool.c): nothing of a clone is opened;
     * /workspace and each mount's inside are empty mount points (workspace
     * unused, may be NULL; a mount's host unused, its file says the kind),
     * and init, given its command, moves there the detached mounts sent with
     * it (sbx_attach_open), workspace first, then the mounts in order. */
    bool attach_later;
};

/* What init is exec'd from and the task's seccomp programs. They reach the
 * child over the sync socket after its root is built, so a caller that has
 * not cached them can prepare them while the child works. */
struct sbx_sandbox_fds {
    int init_exe; /* from sbx_init_exe_open() */
    int seccomp;  /* from sbx_seccomp_compile_fd() */
};

/* A live sandbox as its creator holds it. */
struct sbx_sandbox {
    pid_t init_pid;
    int pidfd;     /* of init; readable when the whole sandbox is gone */
    int sync_fd;   /* SOCK_SEQPACKET to init: struct sbx_init_msg */
    int stdin_fd;  /* write end, -1 once closed */
    int stdout_fd; /* read ends */
    int stderr_fd;
    /* Its network namespace (-1: the host's, or a session's task), opened
     * before the child was released to change its ids: a creator without
     * CAP_SYS_PTRACE may not open /proc/PID/ns/net of a process that is no
     * longer dumpable, as the child is between its id change and its exec. */
    int netns_fd;
    struct sbx_cgroup cg;
    bool cg_made;
    bool joined; /* a task inside a session: the cgroup and namespaces are not ours */
};

/* Messages init sends on sync_fd. */
enum sbx_init_msg_kind {
    SBX_MSG_SETUP_ERROR = 1, /* the sandbox could not be set up: stage, errnum, text */
    SBX_MSG_STARTED = 2,     /* the task process exists: pid (inside) */
    SBX_MSG_EXEC_ERROR = 3,  /* execve of the command failed: errnum, text */
    SBX_MSG_EXITED = 4,      /* the task ended: wstatus and rusage of all reaped */
};

struct sbx_init_msg {
    int32_t kind;
    int32_t errnum;
    int32_t wstatus;
    int32_t pid;
    int64_t utime_us;
    int64_t stime_us;
    int64_t maxrss_kb;
    int64_t mem_peak_bytes; /* rlimit mode: the largest sum the memory watch saw */
    int32_t mem_killed;     /* rlimit mode: the memory watch killed the tree */
    char stage[SBX_ERR_STAGE_MAX];
    char text[SBX_ERR_MSG_MAX];
};

/* RLIMIT_AS of a task without cgroups: its memory limit plus this. Node.js
 * reserves about 1.1 GiB of address space at start (V8's code range and
 * heap cage; Node 24 refuses to start under 1.25 GiB), so the address space
 * can only be a coarse bound per process: the namespace's sum is held by
 * init's memory watch. */
#define SBX_RLIMIT_AS_HEADROOM (2ULL << 30)

/* The size of each of the sandbox's tmpfs mounts: the spec's, and without
 * cgroups (where tmpfs pages are charged to nothing) no more than the
 * memory limit. */
uint64_t sbx_sandbox_tmp_size(const struct sbx_spec *spec, enum sbx_cg_mode mode);

/* A sealed memfd holding the init program (built with the daemon and embedded
 * in it) that each sandbox's pid 1 is exec'd from: a fresh exec, so no daemon
 * memory or fd crosses into the sandbox, and nothing inside can write to the
 * binary. Made once per process; the caller owns the fd. */
int sbx_init_exe_open(sbx_err *err);

/* Make the cgroup, clone the sandbox (its netns_fd held) and let it run. On success *sb owns every
 * fd and the cgroup; the task's setup goes on in the child and its failures
 * arrive later as SBX_MSG_SETUP_ERROR. */
int sbx_sandbox_spawn(const struct sbx_spec *spec, struct sbx_sandbox *sb, sbx_err *err);
/* Hand the child its init binary and seccomp programs; it execs init once it
 * has them. The fds stay the caller's. */
int sbx_sandbox_send_fds(struct sbx_sandbox *sb, const struct sbx_sandbox_fds *fds, sbx_err *err);
/* A pooled sandbox's command (spec.pooled): argv (argv[0] looked up in the
 * task's PATH) and the task's whole environment, in one message on the sync
 * socket that its init reads once: a u32 argc, a u32 envc, then each string
 * with its NUL. -1 with E2BIG when it packs to more than SBX_COMMAND_MAX
 * bytes (such a task is built as any other). */
#define SBX_COMMAND_MAX (128u * 1024u)
bool sbx_sandbox_send_command_fits(char *const *argv, char *const *envp);
int sbx_sandbox_send_command(struct sbx_sandbox *sb, char *const *argv, char *const *envp,
                             sbx_err *err);
/* A pooled sandbox (spec.pooled) made with the cgroup limits was gets lim
 * instead, before its command is sent (sbx_cgroup_relimit: not in rlimit
 * mode). On failure discard it. */
int sbx_sandbox_relimit(struct sbx_sandbox *sb, const struct sbx_cg_limits *was,
                        const struct sbx_cg_limits *lim, sbx_err *err);
/* The same with the detached mounts of an attach_later sandbox (fds, in its
 * order; they stay the caller's). argv NULL (and envp NULL): no command,
 * init holds a live session instead (as spec.session's: STARTED, then it
 * keeps the namespaces and reaps until it is killed). */
int sbx_sandbox_send_command_fds(struct sbx_sandbox *sb, char *const *argv, char *const *envp,
                                 const int *fds, size_t nfds, sbx_err *err);

/* One message of len bytes on sock with nfds fds (SCM_RIGHTS, at most
 * SBX_FDS_PASS_MAX; none when nfds is 0), once, EINTR retried: sendmsg's
 * result. (isolate/fdpass.c, which init is built with too.) */
#define SBX_FDS_PASS_MAX (SBX_MOUNTS_MAX + 1)
ssize_t sbx_send_with_fds(int sock, const void *buf, size_t len, const int *fds, size_t nfds,
                          int flags);
/* Its counterpart: one message into buf (at most len bytes) and the fds
 * that came with it into fds, close-on-exec, once, EINTR retried: recvmsg's
 * result (0: the peer is gone), with *nfds of them, the caller's. More fds
 * than max (or than SBX_FDS_PASS_MAX: the kernel's MSG_CTRUNC) is -1 EPROTO,
 * all of them closed. The caller checks the count it expects. */
ssize_t sbx_recv_with_fds(int sock, void *buf, size_t len, int *fds, size_t max, size_t *nfds,
                          int flags);

/* A clone's workspace and binds as detached mounts for an attach_later
 * sandbox (open_tree(OPEN_TREE_CLONE), never recursive, as the cold binds):
 * the workspace idmapped (mount_setattr(MOUNT_ATTR_IDMAP)) with a user
 * namespace mapping the clone's host ids [from_base, +SBX_ID_RANGE) to the
 * sandbox's [to_base, +SBX_ID_RANGE), so the sandbox's runner sees the
 * clone's files as its own and what it writes is stored with the clone's
 * ids; nosuid, nodev; its root chowned to the clone's runner first, as a
 * cold spawn does. Each mount read-only unless writable, nosuid, nodev, not
 * idmapped. Needs a privileged, single-threaded caller (the spawner).
 * fds gets 1 + n_mounts fds. A filesystem that cannot be idmapped fails at
 * the stage "attach" with EINVAL (tmpfs before Linux 6.3, overlayfs, ramfs,
 * most network filesystems). */
struct sbx_attach {
    const char *workspace;
    uint32_t from_base, to_base;
    uid_t uid;
    gid_t gid;
    const struct sbx_mount *mounts; /* absolute host paths (no root) */
    size_t n_mounts;
};
int sbx_attach_open(const struct sbx_attach *a, int *fds, sbx_err *err);

/* Shared by a sandbox's spawn and an attach (isolate/ only):
 * /proc/PID/FILE (uid_map or gid_map) maps ids inside..+SBX_ID_RANGE to
 * the host's outside..; a failure is reported at stage. */
int sbx_id_map_write(pid_t pid, const char *file, uint32_t inside, uint32_t outside,
                     enum sbx_stage stage, sbx_err *err);
/* The workspace's root owned by host uid:gid (chowned when it is not). */
int sbx_workspace_own(const char *workspace, uint32_t uid, uint32_t gid, sbx_err *err);
/* SIGKILL the whole sandbox: freeze where a freezer exists (without waiting
 * for it to settle), kill init (and so its pid namespace), thaw. Never waits;
 * safe to call more than once. */
void sbx_sandbox_kill(struct sbx_sandbox *sb);
/* After init has exited (pidfd readable), for a caller on an event loop: reap
 * it, kill anything the cgroup still holds, remove the cgroup, close the fds,
 * each tried once. 0 when all is gone; -1 with EBUSY when the cgroup is not
 * empty or removable yet (ask again later: the kernel gives no event for
 * it); -1 with another errno when the release failed (the fds are closed and
 * the cgroup left). */
int sbx_sandbox_release_step(struct sbx_sandbox *sb, sbx_err *err);
/* Give up on what release_step could not remove: close the fds, leave the
 * cgroup (a stale one is swept at the next start). */
void sbx_sandbox_abandon(struct sbx_sandbox *sb);
/* The bounded synchronous form (it waits for init and polls the cgroup's
 * removal for up to about 1.5 s), for error paths and outside a loop. */
int sbx_sandbox_release(struct sbx_sandbox *sb, sbx_err *err);

/* argv[0] of every sandbox's init (src/isolate/init/). */
#define SBX_INIT_ARGV0 "sandbox-init"
