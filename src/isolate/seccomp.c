#include "isolate/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/strv.h"
#include "isolate/stage.h"

/* How the profiles are built.
 *
 * The kernel runs every filter a task has stacked and keeps the strictest
 * answer. `default` is one filter: allow by default, refuse the denied table and
 * the argument patterns below. `strict` stacks that same filter and an
 * allowlist filter (refuse by default), so strict is never looser than default,
 * by construction. Stacking also covers what one libseccomp filter cannot say:
 * it refuses a rule whose action equals the filter's default, and compares an
 * argument at most once per rule. So "ioctl except TIOCSTI" is said by the deny
 * filter and strict's allowlist simply allows ioctl; "personality only for
 * these values" is a plain allowlist in strict's filter and is spelled out bit
 * by bit in the deny filter (add_persona_denials).
 *
 * Only the native architecture is added; any other (i386 through int 0x80) hits
 * the bad-arch action, KILL_PROCESS. On x86_64 libseccomp also sends x32
 * numbers (bit 30 set) to the bad-arch action when x32 is not in the filter, so
 * no explicit guard is needed: tests/unit/isolate/test_seccomp.c proves it. */

/* clone(2) takes its flags in the second argument on s390, the first elsewhere. */
#if defined(__s390__) || defined(__s390x__)
#define CLONE_FLAGS_ARG 1
#else
#define CLONE_FLAGS_ARG 0
#endif

/* The kernel reads ioctl's request and personality's argument as unsigned int:
 * compare only the low 32 bits so high bits cannot slip past (CVE-2019-10063). */
#define LOW32 0xffffffffu

/* personality(2) values a task may pass: Linux, optionally with the 32-bit
 * address space or the 2.6 uname, and 0xffffffff, which only queries. */
#define PERSONA_FLAGS_OK ((uint32_t)(PER_LINUX32 | UNAME26))
static const uint32_t persona_ok[] = {
    PER_LINUX, PER_LINUX32, UNAME26, UNAME26 | PER_LINUX32, 0xffffffffu,
};

const unsigned long sbx_seccomp_ns_flags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC |
                                           CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |
                                           CLONE_NEWCGROUP | CLONE_NEWTIME;

const struct sbx_sc_rule sbx_seccomp_denied[] = {
    /* io_uring does file and socket I/O out of seccomp's sight. */
    {"io_uring_setup", SBX_SC_ERRNO_EPERM},
    {"io_uring_enter", SBX_SC_ERRNO_EPERM},
    {"io_uring_register", SBX_SC_ERRNO_EPERM},
    /* Kernel attack surface with a long exploit history. */
    {"userfaultfd", SBX_SC_ERRNO_EPERM},
    {"bpf", SBX_SC_ERRNO_EPERM},
    {"perf_event_open", SBX_SC_ERRNO_EPERM},
    {"keyctl", SBX_SC_ERRNO_EPERM},
    {"add_key", SBX_SC_ERRNO_EPERM},
    {"request_key", SBX_SC_ERRNO_EPERM},
    {"lookup_dcookie", SBX_SC_ERRNO_EPERM},
    /* 16-bit segments: only old DOS emulators need them (Docker denies it). */
    {"modify_ldt", SBX_SC_ERRNO_EPERM},
    /* Reaching into other processes. */
    {"ptrace", SBX_SC_ERRNO_EPERM},
    {"process_vm_readv", SBX_SC_ERRNO_EPERM},
    {"process_vm_writev", SBX_SC_ERRNO_EPERM},
    {"process_madvise", SBX_SC_ERRNO_EPERM},
    {"pidfd_getfd", SBX_SC_ERRNO_EPERM},
    {"kcmp", SBX_SC_ERRNO_EPERM},
    /* Kernels and modules. */
    {"kexec_load", SBX_SC_ERRNO_EPERM},
    {"kexec_file_load", SBX_SC_ERRNO_EPERM},
    {"init_module", SBX_SC_ERRNO_EPERM},
    {"finit_module", SBX_SC_ERRNO_EPERM},
    {"delete_module", SBX_SC_ERRNO_EPERM},
    {"create_module", SBX_SC_ERRNO_EPERM},
    {"get_kernel_syms", SBX_SC_ERRNO_EPERM},
    {"query_module", SBX_SC_ERRNO_EPERM},
    /* Mounts and the root. */
    {"mount", SBX_SC_ERRNO_EPERM},
    {"umount2", SBX_SC_ERRNO_EPERM},
    {"pivot_root", SBX_SC_ERRNO_EPERM},
    {"chroot", SBX_SC_ERRNO_EPERM},
    {"move_mount", SBX_SC_ERRNO_EPERM},
    {"open_tree", SBX_SC_ERRNO_EPERM},
    {"fsopen", SBX_SC_ERRNO_EPERM},
    {"fsmount", SBX_SC_ERRNO_EPERM},
    {"fsconfig", SBX_SC_ERRNO_EPERM},
    {"fspick", SBX_SC_ERRNO_EPERM},
    {"mount_setattr", SBX_SC_ERRNO_EPERM},
    /* Namespaces. A task never needs unshare, whatever the flags; clone is
     * refused only with namespace flags (argument rule). clone3 passes its
     * flags in memory seccomp cannot read: ENOSYS makes glibc fall back to
     * clone, where it can; EPERM would fail every thread. */
    {"unshare", SBX_SC_ERRNO_EPERM},
    {"setns", SBX_SC_ERRNO_EPERM},
    {"clone3", SBX_SC_ERRNO_ENOSYS},
    /* File handles bypass the path walk (and so the new root). */
    {"open_by_handle_at", SBX_SC_ERRNO_EPERM},
    {"name_to_handle_at", SBX_SC_ERRNO_EPERM},
    /* Host-wide state. */
    {"acct", SBX_SC_ERRNO_EPERM},
    {"swapon", SBX_SC_ERRNO_EPERM},
    {"swapoff", SBX_SC_ERRNO_EPERM},
    {"reboot", SBX_SC_ERRNO_EPERM},
    {"syslog", SBX_SC_ERRNO_EPERM},
    {"settimeofday", SBX_SC_ERRNO_EPERM},
    {"clock_settime", SBX_SC_ERRNO_EPERM},
    {"clock_adjtime", SBX_SC_ERRNO_EPERM},
    {"adjtimex", SBX_SC_ERRNO_EPERM},
    {"quotactl", SBX_SC_ERRNO_EPERM},
    {"iopl", SBX_SC_ERRNO_EPERM},
    {"ioperm", SBX_SC_ERRNO_EPERM},
};
const size_t sbx_seccomp_denied_len = SBX_ARRAY_LEN(sbx_seccomp_denied);

/* Enough for python3, node and sh with coreutils. clone, clone3, ioctl and
 * personality are handled by argument rules, not listed here. */
/* clang-format off */
const char *const sbx_seccomp_strict_allowed[] = {
    /* Descriptors. */
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2",
    "pwritev2", "lseek", "sendfile", "splice", "tee", "vmsplice", "copy_file_range", "close",
    "close_range", "dup", "dup2", "dup3", "fcntl", "flock", "fsync", "fdatasync", "sync", "syncfs",
    "sync_file_range", "ftruncate", "truncate", "fallocate", "fadvise64", "readahead", "pipe",
    "pipe2", "eventfd", "eventfd2", "memfd_create",
    /* Paths. */
    "open", "openat", "openat2", "creat", "stat", "fstat", "lstat", "newfstatat", "statx", "statfs",
    "fstatfs", "access", "faccessat", "faccessat2", "readlink", "readlinkat", "getdents",
    "getdents64", "getcwd", "chdir", "fchdir", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat",
    "rename", "renameat", "renameat2", "link", "linkat", "symlink", "symlinkat", "chmod", "fchmod",
    "fchmodat", "chown", "fchown", "lchown", "fchownat", "umask", "utime", "utimes", "utimensat",
    "futimesat", "mknod", "mknodat", "getxattr", "lgetxattr", "fgetxattr", "listxattr",
    "llistxattr", "flistxattr", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
    "fremovexattr", "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
    /* Memory. */
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "mlock", "mlock2",
    "munlock", "mlockall", "munlockall", "membarrier", "pkey_alloc", "pkey_free", "pkey_mprotect",
    "get_mempolicy",
    /* Processes and threads. */
    "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "kill", "tkill",
    "tgkill", "pidfd_open", "pidfd_send_signal", "getpid", "getppid", "gettid", "getpgid",
    "setpgid", "getpgrp", "getsid", "setsid", "getuid", "geteuid", "getgid", "getegid", "getresuid",
    "getresgid", "getgroups", "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid",
    "setgroups", "setfsuid", "setfsgid", "capget", "capset", "prctl", "arch_prctl",
    "set_tid_address", "set_robust_list", "get_robust_list", "rseq", "futex", "futex_waitv",
    "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_setparam",
    "sched_getscheduler", "sched_setscheduler", "sched_get_priority_max", "sched_get_priority_min",
    "sched_rr_get_interval", "sched_getattr", "sched_setattr", "getpriority", "setpriority",
    "ioprio_get", "ioprio_set", "getrlimit", "setrlimit", "prlimit64", "getrusage", "times",
    "uname", "sysinfo", "getrandom", "getcpu",
    /* Signals. */
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigsuspend", "rt_sigpending",
    "rt_sigtimedwait", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack", "signalfd",
    "signalfd4", "pause", "restart_syscall",
    /* Time. */
    "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time",
    "alarm", "getitimer", "setitimer", "timer_create", "timer_settime", "timer_gettime",
    "timer_getoverrun", "timer_delete", "timerfd_create", "timerfd_settime", "timerfd_gettime",
    /* Waiting. */
    "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
    "epoll_wait", "epoll_pwait", "epoll_pwait2",
    /* Sockets (the network namespace decides where they reach). */
    "socket", "socketpair", "bind", "listen", "accept", "accept4", "connect", "getsockname",
    "getpeername", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "shutdown",
    "setsockopt", "getsockopt",
    /* System V and POSIX IPC (the IPC namespace is the sandbox's own). */
    "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl", "msgget",
    "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
    "mq_notify", "mq_getsetattr",
};
/* clang-format on */
const size_t sbx_seccomp_strict_allowed_len = SBX_ARRAY_LEN(sbx_seccomp_strict_allowed);

int sbx_seccomp_profile_parse(const char *s, enum sbx_seccomp_profile *out, sbx_err *err)
{
    if (s && strcmp(s, "default") == 0)
        *out = SBX_SECCOMP_DEFAULT;
    else if (s && strcmp(s, "strict") == 0)
        *out = SBX_SECCOMP_STRICT;
    else
        return sbx_err_set(err, EINVAL, "seccomp profile '%s' is unknown (use default or strict)",
                           s ? s : "");
    return 0;
}

const char *sbx_seccomp_profile_name(enum sbx_seccomp_profile p)
{
    switch (p) {
    case SBX_SECCOMP_DEFAULT:
        return "default";
    case SBX_SECCOMP_STRICT:
        return "strict";
    }
    return "unknown";
}

static void scmp_releasep(scmp_filter_ctx *ctx)
{
    if (*ctx)
        seccomp_release(*ctx);
}
#define cleanup_scmp __attribute__((cleanup(scmp_releasep)))

static uint32_t sc_action(enum sbx_sc_action a)
{
    return a == SBX_SC_ERRNO_ENOSYS ? SCMP_ACT_ERRNO(ENOSYS) : SCMP_ACT_ERRNO(EPERM);
}

static int rule_add(scmp_filter_ctx ctx, uint32_t action, int nr, const char *what,
                    unsigned int ncmp, const struct scmp_arg_cmp *cmp, sbx_err *err)
{
    int rc = seccomp_rule_add_array(ctx, action, nr, ncmp, cmp);
    if (rc < 0)
        return sbx_err_at(err, SBX_STAGE_SECCOMP, -rc, "rule for %s", what);
    return 0;
}

/* A listed name this architecture lacks resolves negative and is skipped. */
static int named_rule_add(scmp_filter_ctx ctx, uint32_t action, const char *name, sbx_err *err)
{
    int nr = seccomp_syscall_resolve_name(name);
    if (nr < 0)
        return 0;
    return rule_add(ctx, action, nr, name, 0, NULL, err);
}

static int add_clone_denials(scmp_filter_ctx ctx, sbx_err *err)
{
    /* One rule per flag: the rules of a syscall are alternatives. */
    for (unsigned long rest = sbx_seccomp_ns_flags; rest; rest &= rest - 1) {
        unsigned long flag = rest & -rest;
        struct scmp_arg_cmp cmp = SCMP_CMP(CLONE_FLAGS_ARG, SCMP_CMP_MASKED_EQ, flag, flag);
        if (rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), "clone", 1, &cmp, err) < 0)
            return -1;
    }
    return 0;
}

/* The socket families a task may create: local sockets, IPv4 and IPv6 (their
 * only way out is the egress), and netlink for the route protocol alone
 * (getifaddrs, AI_ADDRCONFIG). Everything else is refused, AF_VSOCK first:
 * vsock is not network-namespaced, so on a VM host it would reach the
 * hypervisor's services from any sandbox, whatever its network policy.
 * The kernel reads the family as an int: each refused family is matched on
 * the low 32 bits, and any value at or above AF_MAX (which includes every
 * value with high bits set) is refused as a whole. */
static const int socket_families_ok[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};

static bool socket_family_ok(int family)
{
    for (size_t i = 0; i < SBX_ARRAY_LEN(socket_families_ok); i++)
        if (socket_families_ok[i] == family)
            return true;
    return false;
}

/* Whether no family in [from, from + n) is allowed. */
static bool families_refused(int from, int n)
{
    for (int f = from; f < from + n; f++)
        if (socket_family_ok(f))
            return false;
    return true;
}

/* The refused families below FAMILY_SPAN as aligned power-of-two blocks, one
 * masked rule each (a dozen rules instead of one per family: the filter is
 * compiled at every `sandboxd run`), then everything from FAMILY_SPAN on. */
#define FAMILY_SPAN 64 /* a power of two above AF_MAX */
static int add_family_denials(scmp_filter_ctx ctx, int nr, const char *what, sbx_err *err)
{
    _Static_assert(AF_MAX <= FAMILY_SPAN, "FAMILY_SPAN covers every family");
    uint32_t refuse = SCMP_ACT_ERRNO(EAFNOSUPPORT);
    for (int family = 0; family < FAMILY_SPAN;) {
        if (socket_family_ok(family)) {
            family++;
            continue;
        }
        int size = 1;
        while (family % (size * 2) == 0 && family + size * 2 <= FAMILY_SPAN &&
               families_refused(family, size * 2))
            size *= 2;
        uint64_t mask = LOW32 & ~(uint64_t)(size - 1);
        struct scmp_arg_cmp cmp = SCMP_A0(SCMP_CMP_MASKED_EQ, mask, (uint64_t)family);
        if (rule_add(ctx, refuse, nr, what, 1, &cmp, err) < 0)
            return -1;
        family += size;
    }
    /* Compared on all 64 bits: a family with high bits set is refused too. */
    struct scmp_arg_cmp beyond = SCMP_A0(SCMP_CMP_GE, FAMILY_SPAN);
    return rule_add(ctx, refuse, nr, what, 1, &beyond, err);
}

static int add_socket_denials(scmp_filter_ctx ctx, sbx_err *err)
{
    if (add_family_denials(ctx, SCMP_SYS(socket), "socket", err) < 0 ||
        add_family_denials(ctx, SCMP_SYS(socketpair), "socketpair", err) < 0)
        return -1;
    /* Netlink but the route protocol (audit, uevents, sock_diag, ...). */
    struct scmp_arg_cmp netlink[] = {
        SCMP_A0(SCMP_CMP_MASKED_EQ, LOW32, AF_NETLINK),
        SCMP_A2(SCMP_CMP_NE, NETLINK_ROUTE),
    };
    return rule_add(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), SCMP_SYS(socket), "socket",
                    SBX_ARRAY_LEN(netlink), netlink, err);
}

/* No setuid or setgid file is ever made: a workspace outlives the sandbox on
 * the host (in `run --workspace DIR`, on a filesystem that may not be
 * nosuid), where such a file would run as the clone's host uid for anyone
 * who can reach it. Every syscall that sets a mode is refused when the mode
 * has S_ISUID or S_ISGID (one rule per bit: a syscall's rules are
 * alternatives); openat2 carries its mode in memory seccomp cannot read, so
 * it answers ENOSYS and libc falls back to openat. */
static int add_setid_mode_denials(scmp_filter_ctx ctx, sbx_err *err)
{
    static const struct {
        const char *name;
        unsigned arg; /* the mode's position */
    } setters[] = {
        {"chmod", 1},  {"fchmod", 1}, {"fchmodat", 2}, {"fchmodat2", 2}, {"open", 2},
        {"openat", 3}, {"creat", 1},  {"mknod", 1},    {"mknodat", 2},
    };
    static const unsigned long bits[] = {S_ISUID, S_ISGID};
    for (size_t i = 0; i < SBX_ARRAY_LEN(setters); i++) {
        int nr = seccomp_syscall_resolve_name(setters[i].name);
        if (nr < 0)
            continue;
        for (size_t b = 0; b < SBX_ARRAY_LEN(bits); b++) {
            struct scmp_arg_cmp cmp =
                SCMP_CMP(setters[i].arg, SCMP_CMP_MASKED_EQ, bits[b], bits[b]);
            if (rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, setters[i].name, 1, &cmp, err) < 0)
                return -1;
        }
    }
    return named_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), "openat2", err);
}

static int add_ioctl_denials(scmp_filter_ctx ctx, sbx_err *err)
{
    static const unsigned long requests[] = {TIOCSTI, TIOCLINUX};
    for (size_t i = 0; i < SBX_ARRAY_LEN(requests); i++) {
        struct scmp_arg_cmp cmp = SCMP_A1(SCMP_CMP_MASKED_EQ, LOW32, requests[i]);
        if (rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), "ioctl", 1, &cmp, err) < 0)
            return -1;
    }
    return 0;
}

static int deny_persona_pattern(scmp_filter_ctx ctx, unsigned set, unsigned clear, sbx_err *err)
{
    uint32_t set_bit = 1u << set, clear_bit = 1u << clear;
    struct scmp_arg_cmp cmp = SCMP_A0(SCMP_CMP_MASKED_EQ, set_bit | clear_bit, set_bit);
    return rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), "personality", 1, &cmp, err);
}

/* Refuse every persona but persona_ok[] in an allow-by-default filter, where
 * "not one of these" cannot be said directly. The refused values are those
 * (low 32 bits) with a bit outside PERSONA_FLAGS_OK set that are not
 * 0xffffffff, and they are exactly the union of the patterns "bit b set, bit c
 * clear" for each bit b outside the allowed flags, with c = b + 1 and also, when
 * b + 1 is an allowed flag, c = b + 2 (cyclically). Each pattern refuses only
 * such values (b set, some bit clear). Each such value matches one: walk up
 * from a disallowed set bit to the first clear bit; the last disallowed bit
 * before it is b, followed by at most one allowed flag, since those are not
 * adjacent. */
static int add_persona_denials(scmp_filter_ctx ctx, sbx_err *err)
{
    _Static_assert(((PERSONA_FLAGS_OK << 1 | PERSONA_FLAGS_OK >> 31) & PERSONA_FLAGS_OK) == 0,
                   "allowed persona flags must not be adjacent bits");
    for (unsigned b = 0; b < 32; b++) {
        if (PERSONA_FLAGS_OK & (1u << b))
            continue;
        unsigned next = (b + 1) % 32;
        if (deny_persona_pattern(ctx, b, next, err) < 0)
            return -1;
        if ((PERSONA_FLAGS_OK & (1u << next)) &&
            deny_persona_pattern(ctx, b, (b + 2) % 32, err) < 0)
            return -1;
    }
    return 0;
}

static int add_deny_rules(scmp_filter_ctx ctx, sbx_err *err)
{
    for (size_t i = 0; i < sbx_seccomp_denied_len; i++) {
        const struct sbx_sc_rule *r = &sbx_seccomp_denied[i];
        if (named_rule_add(ctx, sc_action(r->action), r->name, err) < 0)
            return -1;
    }
    if (add_clone_denials(ctx, err) < 0 || add_ioctl_denials(ctx, err) < 0 ||
        add_persona_denials(ctx, err) < 0 || add_socket_denials(ctx, err) < 0 ||
        add_setid_mode_denials(ctx, err) < 0)
        return -1;
    return 0;
}

/* Meant to run stacked under the deny filter, which alone refuses TIOCSTI and
 * TIOCLINUX (an ioctl rule here could only allow). */
static int add_allow_rules(scmp_filter_ctx ctx, sbx_err *err)
{
    for (size_t i = 0; i < sbx_seccomp_strict_allowed_len; i++)
        if (named_rule_add(ctx, SCMP_ACT_ALLOW, sbx_seccomp_strict_allowed[i], err) < 0)
            return -1;
    /* A denied syscall answered other than EPERM (clone3) must say the same
     * here: of two filters answering ERRNO, the kernel takes the newer one. */
    for (size_t i = 0; i < sbx_seccomp_denied_len; i++) {
        const struct sbx_sc_rule *r = &sbx_seccomp_denied[i];
        if (r->action != SBX_SC_ERRNO_EPERM &&
            named_rule_add(ctx, sc_action(r->action), r->name, err) < 0)
            return -1;
    }
    struct scmp_arg_cmp no_ns =
        SCMP_CMP(CLONE_FLAGS_ARG, SCMP_CMP_MASKED_EQ, sbx_seccomp_ns_flags, 0);
    if (rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), "clone", 1, &no_ns, err) < 0 ||
        rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), "ioctl", 0, NULL, err) < 0)
        return -1;
    for (size_t i = 0; i < SBX_ARRAY_LEN(persona_ok); i++) {
        struct scmp_arg_cmp cmp = SCMP_A0(SCMP_CMP_MASKED_EQ, LOW32, persona_ok[i]);
        if (rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(personality), "personality", 1, &cmp, err) < 0)
            return -1;
    }
    return 0;
}

struct filter_spec {
    uint32_t default_action;
    int (*add_rules)(scmp_filter_ctx ctx, sbx_err *err);
};

static const struct filter_spec deny_filter = {SCMP_ACT_ALLOW, add_deny_rules};
static const struct filter_spec allow_filter = {SCMP_ACT_ERRNO(EPERM), add_allow_rules};

/* Each profile's filters, in loading order: the deny filter first, so that the
 * allowlist need not let seccomp() and prctl() through for its own loading. */
#define MAX_FILTERS 2
static const struct filter_spec *const profile_filters[][MAX_FILTERS] = {
    [SBX_SECCOMP_DEFAULT] = {&deny_filter, NULL},
    [SBX_SECCOMP_STRICT] = {&deny_filter, &allow_filter},
};

static int attr_set(scmp_filter_ctx ctx, enum scmp_filter_attr attr, uint32_t value,
                    const char *what, sbx_err *err)
{
    int rc = seccomp_attr_set(ctx, attr, value);
    if (rc < 0)
        return sbx_err_at(err, SBX_STAGE_SECCOMP, -rc, "filter attribute %s", what);
    return 0;
}

/* An empty filter with our attributes; on success *out is the caller's, to
 * seccomp_release(). */
static int filter_new(uint32_t default_action, scmp_filter_ctx *out, sbx_err *err)
{
    cleanup_scmp scmp_filter_ctx ctx = seccomp_init(default_action);
    if (!ctx)
        return sbx_err_at(err, SBX_STAGE_SECCOMP, ENOMEM, "seccomp_init");
    /* Binary-tree dispatch: a syscall costs a few comparisons, not a walk of
     * the whole list. Raw return codes: errors carry the kernel's errno. */
    if (attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS, "bad-arch action", err) < 0 ||
        attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2, "optimize", err) < 0 ||
        attr_set(ctx, SCMP_FLTATR_API_SYSRAWRC, 1, "raw return codes", err) < 0)
        return -1;
    *out = sbx_steal_pointer(&ctx);
    return 0;
}

/* On success *out is the caller's, to seccomp_release(). */
static int filter_build(const struct filter_spec *spec, scmp_filter_ctx *out, sbx_err *err)
{
    cleanup_scmp scmp_filter_ctx ctx = NULL;
    if (filter_new(spec->default_action, &ctx, err) < 0 || spec->add_rules(ctx, err) < 0)
        return -1;
    *out = sbx_steal_pointer(&ctx);
    return 0;
}

static const struct filter_spec *const *filters_of(enum sbx_seccomp_profile p, sbx_err *err)
{
    if ((unsigned)p >= SBX_ARRAY_LEN(profile_filters)) {
        sbx_err_at(err, SBX_STAGE_SECCOMP, EINVAL, "unknown seccomp profile %d", (int)p);
        return NULL;
    }
    return profile_filters[p];
}

static int filter_bpf_len(scmp_filter_ctx ctx, sbx_err *err)
{
    cleanup_fd int fd = memfd_create("sbx-seccomp-bpf", MFD_CLOEXEC);
    if (fd < 0)
        return sbx_err_at(err, SBX_STAGE_SECCOMP, errno, "memfd for the BPF export");
    int rc = seccomp_export_bpf(ctx, fd);
    if (rc < 0)
        return sbx_err_at(err, SBX_STAGE_SECCOMP, -rc, "export the BPF program");
    off_t size = lseek(fd, 0, SEEK_END);
    if (size < 0)
        return sbx_err_at(err, SBX_STAGE_SECCOMP, errno, "size of the BPF export");
    return (int)(size / (off_t)sizeof(struct sock_filter));
}

int sbx_seccomp_bpf_len(enum sbx_seccomp_profile p, sbx_err *err)
{
    const struct filter_spec *const *specs = filters_of(p, err);
    if (!specs)
        return -1;
    int total = 0;
    for (size_t i = 0; i < MAX_FILTERS && specs[i]; i++) {
        cleanup_scmp scmp_filter_ctx ctx = NULL;
        if (filter_build(specs[i], &ctx, err) < 0)
            return -1;
        int len = filter_bpf_len(ctx, err);
        if (len < 0)
            return -1;
        total += len;
    }
    return total;
}

/* Append one filter's program to out as <count><instructions>. */
static int export_filter(scmp_filter_ctx ctx, int out, sbx_err *err)
{
    cleanup_fd int tmp = memfd_create("seccomp-export", MFD_CLOEXEC);
    if (tmp < 0)
        return sbx_err_at(err, SBX_STAGE_SECCOMP, errno, "memfd_create");
    int rc = seccomp_export_bpf(ctx, tmp);
    if (rc < 0)
        return sbx_err_at(err, SBX_STAGE_SECCOMP, -rc, "export BPF");
    off_t size = lseek(tmp, 0, SEEK_END);
    if (size <= 0 || size % (off_t)sizeof(struct sock_filter) != 0)
        return sbx_err_at(err, SBX_STAGE_SECCOMP, EINVAL, "exported BPF has a bad size");
    uint32_t count = (uint32_t)(size / (off_t)sizeof(struct sock_filter));
    if (write(out, &count, sizeof(count)) != (ssize_t)sizeof(count))
        return sbx_err_at(err, SBX_STAGE_SECCOMP, errno, "write BPF");
    for (off_t off = 0; off < size;) {
        ssize_t n = sendfile(out, tmp, &off, (size_t)(size - off));
        if (n <= 0)
            return sbx_err_at(err, SBX_STAGE_SECCOMP, n < 0 ? errno : EIO, "copy BPF");
    }
    return 0;
}

int sbx_seccomp_compile_fd(enum sbx_seccomp_profile p, sbx_err *err)
{
    const struct filter_spec *const *specs = filters_of(p, err);
    if (!specs)
        return -1;
    cleanup_fd int fd = memfd_create("seccomp-bpf", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return sbx_err_at(err, SBX_STAGE_SECCOMP, errno, "memfd_create");
    for (size_t i = 0; i < MAX_FILTERS && specs[i]; i++) {
        cleanup_scmp scmp_filter_ctx ctx = NULL;
        if (filter_build(specs[i], &ctx, err) < 0 || export_filter(ctx, fd, err) < 0)
            return -1;
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
        return sbx_err_at(err, SBX_STAGE_SECCOMP, errno, "seal BPF memfd");
    return sbx_steal_fd(&fd);
}

/* ---- an operator's table, stacked on the default profile ---- */

static const struct {
    const char *name;
    enum sbx_sc_table_action action;
} table_actions[] = {
    {"allow", SBX_SCT_ALLOW},
    {"errno", SBX_SCT_ERRNO},
    {"kill", SBX_SCT_KILL_THREAD},
    {"kill_thread", SBX_SCT_KILL_THREAD},
    {"kill_process", SBX_SCT_KILL_PROCESS},
    {"trap", SBX_SCT_TRAP},
    {"log", SBX_SCT_LOG},
};

int sbx_seccomp_action_parse(const char *s, enum sbx_sc_table_action *out, sbx_err *err)
{
    const char *v = strncasecmp(s, "SCMP_ACT_", 9) == 0 ? s + 9 : s;
    for (size_t i = 0; i < SBX_ARRAY_LEN(table_actions); i++)
        if (strcasecmp(v, table_actions[i].name) == 0) {
            *out = table_actions[i].action;
            return 0;
        }
    return sbx_err_set(err, EINVAL,
                       "'%.80s' is not a seccomp action (SCMP_ACT_ALLOW, SCMP_ACT_ERRNO, "
                       "SCMP_ACT_KILL, SCMP_ACT_KILL_PROCESS, SCMP_ACT_TRAP, SCMP_ACT_LOG)",
                       s);
}

int sbx_seccomp_syscall_check(const char *name, sbx_err *err)
{
    if (seccomp_syscall_resolve_name(name) == __NR_SCMP_ERROR)
        return sbx_err_set(err, EINVAL, "unknown syscall '%.80s'", name);
    return 0;
}

void sbx_seccomp_table_free(struct sbx_seccomp_table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_rules; i++)
        sbx_strv_free(t->rules[i].names);
    free(t->rules);
    free(t);
}

static uint32_t table_action(enum sbx_sc_table_action a)
{
    switch (a) {
    case SBX_SCT_ALLOW:
        return SCMP_ACT_ALLOW;
    case SBX_SCT_KILL_THREAD:
        return SCMP_ACT_KILL_THREAD;
    case SBX_SCT_KILL_PROCESS:
        return SCMP_ACT_KILL_PROCESS;
    case SBX_SCT_TRAP:
        return SCMP_ACT_TRAP;
    case SBX_SCT_LOG:
        return SCMP_ACT_LOG;
    case SBX_SCT_ERRNO:
    default:
        return SCMP_ACT_ERRNO(EPERM);
    }
}

static int table_filter(const struct sbx_seccomp_table *t, int out, sbx_err *err)
{
    uint32_t def = table_action(t->default_action);
    cleanup_scmp scmp_filter_ctx ctx = NULL;
    if (filter_new(def, &ctx, err) < 0)
        return -1;
    for (size_t i = 0; i < t->n_rules; i++) {
        uint32_t a = table_action(t->rules[i].action);
        if (a == def)
            continue; /* the default says it already (libseccomp refuses such a rule) */
        for (size_t j = 0; t->rules[i].names && t->rules[i].names[j]; j++) {
            const char *name = t->rules[i].names[j];
            int nr = seccomp_syscall_resolve_name(name);
            if (nr == __NR_SCMP_ERROR)
                return sbx_err_at(err, SBX_STAGE_SECCOMP, EINVAL, "unknown syscall '%s'", name);
            if (rule_add(ctx, a, nr, name, 0, NULL, err) < 0)
                return -1;
        }
    }
    return export_filter(ctx, out, err);
}

int sbx_seccomp_table_compile_fd(const struct sbx_seccomp_table *t, sbx_err *err)
{
    cleanup_fd int fd = memfd_create("seccomp-bpf", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return sbx_err_at(err, SBX_STAGE_SECCOMP, errno, "memfd_create");
    cleanup_scmp scmp_filter_ctx ctx = NULL;
    if (filter_build(&deny_filter, &ctx, err) < 0 || export_filter(ctx, fd, err) < 0 ||
        table_filter(t, fd, err) < 0)
        return -1;
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
        return sbx_err_at(err, SBX_STAGE_SECCOMP, errno, "seal BPF memfd");
    return sbx_steal_fd(&fd);
}
