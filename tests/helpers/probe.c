/* probe: the attacks of SECURITY.md's probe table, one multi-call program that
 * runs inside a sandbox and tries each one for real.
 *
 *   probe NAME [ARGS...]
 *
 * Every attempt prints one line: "blocked: ..." when it failed the way the
 * sandbox promises, "ok: ..." for what must keep working, "ESCAPED: ..." when an
 * attack got through (or failed some other way than promised: the layer that
 * should have answered did not), "FAILED: ..." when something that must work did
 * not. Exit status: 0 only when nothing escaped or failed, 1 otherwise, 2 on a
 * usage error. Probes whose verdict lives on the host (output cap, CPU share)
 * print what they did and leave the judgement to tests/security/test_probes.py.
 *
 * Where the kernel would refuse a call anyway for lack of capabilities, the
 * arguments are chosen so that an unfiltered call gets a different answer
 * (EFAULT, EINVAL, EBADF, ESRCH or success): an EPERM then proves the seccomp
 * filter answered. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/klog.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/swap.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <linux/perf_event.h>
#include <linux/reboot.h>
#include <linux/rtnetlink.h>
#include <linux/userfaultfd.h>

#include "helper_util.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#ifndef OPEN_TREE_CLOEXEC
#define OPEN_TREE_CLOEXEC O_CLOEXEC
#endif
#ifndef FSOPEN_CLOEXEC
#define FSOPEN_CLOEXEC 0x00000001
#endif
#ifndef FSMOUNT_CLOEXEC
#define FSMOUNT_CLOEXEC 0x00000001
#endif
#ifndef FSPICK_CLOEXEC
#define FSPICK_CLOEXEC 0x00000001
#endif
#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif
#define X32_SYSCALL_BIT 0x40000000L
#define RUNNER_ID 10001
#define MIB (1024L * 1024L)
/* Bits above the 32 the kernel's ioctl() looks at (CVE-2019-10063). */
#define IOCTL_HIGH_BITS 0xdeadbeef00000000UL

/* Attempts that escaped, or failed where they had to work. */
static int bad;

static __attribute__((format(printf, 2, 3))) void say(const char *tag, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s: ", tag);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (strcmp(tag, "ESCAPED") == 0 || strcmp(tag, "FAILED") == 0)
        bad++;
}

static bool errno_in(int e, const int *ok)
{
    for (; *ok; ok++)
        if (*ok == e)
            return true;
    return false;
}

static void names(const int *ok, char *buf, size_t len)
{
    buf[0] = '\0';
    for (size_t at = 0; *ok && at < len; ok++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? " or " : "", ename(*ok));
}

/* An attack attempt that must fail with one of `ok` (0-terminated). */
static void expect_fail(const char *what, long rc, int err, const int *ok)
{
    char want[128];
    names(ok, want, sizeof(want));
    if (rc != -1)
        say("ESCAPED", "%s succeeded (returned %ld), expected %s", what, rc, want);
    else if (!errno_in(err, ok))
        say("ESCAPED", "%s failed with %s, expected %s: the layer meant to answer did not", what,
            ename(err), want);
    else
        say("blocked", "%s -> %s", what, ename(err));
}

/* Run `call`, which must fail with one of the errnos listed; a returned fd is closed. */
#define ATTEMPT(what, call, ...)                                                                   \
    do {                                                                                           \
        errno = 0;                                                                                 \
        long rc_ = (long)(call);                                                                   \
        int err_ = errno;                                                                          \
        expect_fail(what, rc_, err_, (const int[]){__VA_ARGS__, 0});                               \
        if (rc_ > 2 && rc_ < INT_MAX)                                                              \
            close((int)rc_);                                                                       \
    } while (0)

/* --- running an attempt in a throwaway child ------------------------------------ */

struct child_result {
    long rc;
    int err;
    int sig; /* the child died by this signal before answering */
};

/* Calls fn(arg) in a forked child, so that an attempt that succeeds (a new
 * namespace, a clone, being traced) or gets the child killed leaves this
 * process as it was. fn must _exit(0) in any process it creates itself. */
static struct child_result in_child(long (*fn)(void *), void *arg)
{
    struct child_result r = {.rc = -1, .err = 0, .sig = 0};
    int p[2];
    if (pipe(p) < 0) {
        r.err = errno;
        return r;
    }
    pid_t pid = fork();
    if (pid < 0) {
        r.err = errno;
        close(p[0]), close(p[1]);
        return r;
    }
    if (pid == 0) {
        close(p[0]);
        errno = 0;
        struct child_result c = {.rc = fn(arg)};
        c.err = errno;
        (void)!write(p[1], &c, sizeof(c));
        _exit(0);
    }
    close(p[1]);
    struct child_result got;
    ssize_t n = read(p[0], &got, sizeof(got));
    close(p[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (n == (ssize_t)sizeof(got))
        return got;
    if (WIFSIGNALED(st))
        r.sig = WTERMSIG(st);
    else
        r.err = EIO;
    return r;
}

static void expect_child_fail(const char *what, long (*fn)(void *), void *arg, const int *ok)
{
    struct child_result r = in_child(fn, arg);
    if (r.sig) {
        say("ESCAPED", "%s: the attempt was killed by %s instead of failing", what,
            sigabbrev_np(r.sig) ? sigabbrev_np(r.sig) : "?");
        return;
    }
    expect_fail(what, r.rc, r.err, ok);
}

/* --- 1: host files ---------------------------------------------------------------- */

static void try_read(const char *path)
{
    char what[PATH_MAX + 32];
    snprintf(what, sizeof(what), "open %s for reading", path);
    ATTEMPT(what, open(path, O_RDONLY | O_CLOEXEC), ENOENT, EACCES);
}

static int probe_read_host(int argc, char **argv)
{
    static const char *const host_paths[] = {
        "/etc/shadow", "/etc/gshadow", "/etc/sudoers",   "/root",       "/root/.ssh", "/var/lib",
        "/run",        "/boot",        "/sys/fs/cgroup", "/proc/kcore", "/proc/kmsg",
    };
    char path[PATH_MAX];
    for (size_t i = 0; i < sizeof(host_paths) / sizeof(host_paths[0]); i++)
        try_read(host_paths[i]);
    for (int i = 0; i < argc; i++) {
        try_read(argv[i]);
        /* init's root is the same sandbox root, but try its door too. */
        snprintf(path, sizeof(path), "/proc/1/root%s", argv[i]);
        try_read(path);
    }
    return 0;
}

/* --- 2: the read-only system ------------------------------------------------------ */

static int probe_write_system(int argc, char **argv)
{
    static const char *const dirs[] = {"/", "/usr", "/usr/bin", "/usr/lib", "/etc"};
    char path[PATH_MAX], what[PATH_MAX + 64];
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        snprintf(path, sizeof(path), "%s/sbx-probe-file", strcmp(dirs[i], "/") ? dirs[i] : "");
        snprintf(what, sizeof(what), "create %s", path);
        ATTEMPT(what, open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644), EROFS, EACCES);
        snprintf(path, sizeof(path), "%s/sbx-probe-dir", strcmp(dirs[i], "/") ? dirs[i] : "");
        snprintf(what, sizeof(what), "mkdir %s", path);
        ATTEMPT(what, mkdir(path, 0755), EROFS, EACCES);
    }
    static const char *const files[] = {"/etc/passwd", "/etc/hosts", "/usr/bin/env", "/bin/sh"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(what, sizeof(what), "open %s for writing", files[i]);
        ATTEMPT(what, open(files[i], O_WRONLY | O_APPEND | O_CLOEXEC), EROFS, EACCES);
        snprintf(what, sizeof(what), "truncate %s", files[i]);
        ATTEMPT(what, truncate(files[i], 0), EROFS, EACCES);
    }
    ATTEMPT("unlink /etc/hostname", unlink("/etc/hostname"), EROFS, EACCES);
    ATTEMPT("rename /etc/hosts", rename("/etc/hosts", "/etc/hosts.sbx-probe"), EROFS, EACCES);
    ATTEMPT("symlink /sbx-probe-link", symlink("/workspace", "/sbx-probe-link"), EROFS, EACCES);
    ATTEMPT("chmod /etc/passwd 0666", chmod("/etc/passwd", 0666), EROFS, EACCES, EPERM);
    /* The host kernel's knobs, reachable through the sandbox's own /proc
     * (absent where the kernel lacks them). */
    static const char *const knobs[] = {"/proc/sysrq-trigger", "/proc/sys/kernel/core_pattern",
                                        "/proc/sys/vm/drop_caches", "/proc/sys/kernel/hostname"};
    for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++) {
        snprintf(what, sizeof(what), "open %s for writing", knobs[i]);
        ATTEMPT(what, open(knobs[i], O_WRONLY | O_CLOEXEC), EROFS, EACCES, ENOENT);
    }
    return 0;
}

/* --- 3: the writable places ------------------------------------------------------- */

static void write_read_back(const char *path, const char *content)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    size_t len = strlen(content);
    if (fd < 0 || write(fd, content, len) != (ssize_t)len || fsync(fd) < 0) {
        say("FAILED", "write %s: %s", path, ename(errno));
        if (fd >= 0)
            close(fd);
        return;
    }
    close(fd);
    char buf[4096] = {0};
    fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
    if (fd >= 0)
        close(fd);
    if (n != (ssize_t)len || memcmp(buf, content, len) != 0)
        say("FAILED", "read back %s: got %zd bytes, not what was written", path, n);
    else
        say("ok", "wrote and read back %zu bytes in %s", len, path);
}

static int probe_workspace_rw(int argc, char **argv)
{
    const char *content = argc > 0 ? argv[0] : "sbx-probe";
    write_read_back("/workspace/probe-owned.txt", content);
    write_read_back("/tmp/probe-tmp.txt", content);
    write_read_back("/home/runner/probe-home.txt", content);
    return 0;
}

/* --- 4: processes ----------------------------------------------------------------- */

static int read_text(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, len - 1);
    int saved = errno;
    close(fd);
    if (n < 0) {
        errno = saved;
        return -1;
    }
    buf[n] = '\0';
    return (int)n;
}

/* The value after "Key:" in a /proc status file, or NULL. */
static const char *status_field(const char *status, const char *key, char *out, size_t len)
{
    size_t kl = strlen(key);
    for (const char *l = status; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, key, kl) == 0 && l[kl] == ':') {
            const char *v = l + kl + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            size_t n = strcspn(v, "\n");
            snprintf(out, len, "%.*s", (int)n, v);
            return out;
        }
    }
    return NULL;
}

/* Calls fn for every pid visible in /proc; returns how many. */
static int each_pid(void (*fn)(pid_t, void *), void *ud)
{
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        n++;
        if (fn)
            fn((pid_t)pid, ud);
    }
    closedir(d);
    return n;
}

static void check_visible(pid_t pid, void *ud)
{
    char path[64], status[4096], name[64] = "?", uid[64] = "?";
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (read_text(path, status, sizeof(status)) > 0) {
        status_field(status, "Name", name, sizeof(name));
        status_field(status, "Uid", uid, sizeof(uid));
        uid[strcspn(uid, "\t ")] = '\0'; /* the real uid */
    }
    if (pid == 1 || pid == getpid())
        say("ok", "pid %d visible (%s, uid %s): %s", (int)pid, name, uid,
            pid == 1 ? "the sandbox's init" : "this probe");
    else
        say("ESCAPED", "pid %d visible (%s, uid %s): not the sandbox's own", (int)pid, name, uid);
}

static int probe_proc_list(int argc, char **argv)
{
    int n = each_pid(check_visible, NULL);
    if (n < 0)
        say("FAILED", "opendir /proc: %s", ename(errno));
    else
        say(n <= 2 ? "ok" : "ESCAPED", "%d processes visible in /proc", n);
    char buf[256], status[4096], nspid[64];
    if (read_text("/proc/1/cmdline", buf, sizeof(buf)) < 0)
        say("FAILED", "read /proc/1/cmdline: %s", ename(errno));
    else if (strcmp(buf, "sandbox-init") != 0)
        say("ESCAPED", "pid 1 is '%s', not the sandbox's init", buf);
    else
        say("ok", "pid 1 is the sandbox's init (%s)", buf);
    if (read_text("/proc/self/status", status, sizeof(status)) > 0 &&
        status_field(status, "NSpid", nspid, sizeof(nspid)))
        say(strchr(nspid, '\t') || strchr(nspid, ' ') ? "ESCAPED" : "ok",
            "NSpid of this probe as /proc shows it: %s", nspid);
    /* Host pids the test passes: none may be seen or signalled from here. */
    for (int i = 0; i < argc; i++) {
        pid_t pid = (pid_t)atoi(argv[i]);
        char what[96], path[64];
        if (pid == 1 || pid == getpid()) {
            say("ok", "host pid %d equals a sandbox pid here, not checkable", (int)pid);
            continue;
        }
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        snprintf(what, sizeof(what), "open %s (a host pid)", path);
        ATTEMPT(what, open(path, O_RDONLY | O_CLOEXEC), ENOENT);
    }
    return 0;
}

/* --- 5: identity ------------------------------------------------------------------ */

static void expect_field(const char *status, const char *key, const char *want)
{
    char v[128];
    if (!status_field(status, key, v, sizeof(v)))
        say("FAILED", "/proc/self/status has no %s line", key);
    else if (strcmp(v, want) != 0)
        say("ESCAPED", "%s is '%s', expected '%s'", key, v, want);
    else
        say("blocked", "%s is '%s'", key, v);
}

static int probe_identity(int argc, char **argv)
{
    uid_t r, e, s;
    gid_t gr, ge, gs;
    getresuid(&r, &e, &s);
    getresgid(&gr, &ge, &gs);
    if (r != RUNNER_ID || e != RUNNER_ID || s != RUNNER_ID || gr != RUNNER_ID || ge != RUNNER_ID ||
        gs != RUNNER_ID)
        say("ESCAPED", "ids are uid %u/%u/%u gid %u/%u/%u, expected all %d", r, e, s, gr, ge, gs,
            RUNNER_ID);
    else
        say("blocked", "real/effective/saved uid and gid are all %d", RUNNER_ID);
    gid_t groups[64];
    int ng = getgroups(64, groups);
    if (ng != 0)
        say("ESCAPED", "%d supplementary groups (first %d), expected none", ng,
            ng > 0 ? (int)groups[0] : -1);
    else
        say("blocked", "no supplementary groups");

    char status[8192];
    if (read_text("/proc/self/status", status, sizeof(status)) < 0) {
        say("FAILED", "read /proc/self/status: %s", ename(errno));
        return 0;
    }
    char want[64];
    snprintf(want, sizeof(want), "%d\t%d\t%d\t%d", RUNNER_ID, RUNNER_ID, RUNNER_ID, RUNNER_ID);
    expect_field(status, "Uid", want);
    expect_field(status, "Gid", want);
    expect_field(status, "Groups", "");
    static const char *const caps[] = {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"};
    for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++)
        expect_field(status, caps[i], "0000000000000000");
    expect_field(status, "NoNewPrivs", "1");
    expect_field(status, "Seccomp", "2");
    ATTEMPT("setuid(0)", setuid(0), EPERM);
    ATTEMPT("setgid(0)", setgid(0), EPERM);
    ATTEMPT("setgroups([0])", setgroups(1, (gid_t[]){0}), EPERM);
    return 0;
}

/* --- 6: the denied syscalls ------------------------------------------------------- */

static long do_unshare(void *flags)
{
    /* Runs in a throwaway child: a namespace it enters dies with it. */
    return unshare((int)(intptr_t)flags);
}

static long do_clone(void *flags)
{
    long rc = syscall(SYS_clone, (unsigned long)(intptr_t)flags | SIGCHLD, 0, NULL, NULL, 0);
    if (rc == 0)
        _exit(0);
    if (rc > 0)
        waitpid((pid_t)rc, NULL, 0);
    return rc;
}

struct clone3_args { /* struct clone_args, version 0 (64 bytes) */
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
};

static long do_clone3(void *flags)
{
    struct clone3_args ca = {.flags = (uint64_t)(intptr_t)flags, .exit_signal = SIGCHLD};
    long rc = syscall(SYS_clone3, &ca, sizeof(ca));
    if (rc == 0)
        _exit(0);
    if (rc > 0)
        waitpid((pid_t)rc, NULL, 0);
    return rc;
}

static long do_traceme(void *unused)
{
    return ptrace(PTRACE_TRACEME, 0, NULL, NULL);
}

static long do_x32_getpid(void *unused)
{
    return syscall(X32_SYSCALL_BIT | SYS_getpid);
}

/* getpid through the i386 entry point (int $0x80, eax = 20). */
static long do_i386_getpid(void *unused)
{
    long ret = 20;
    __asm__ volatile("int $0x80" : "+a"(ret) : : "memory", "r8", "r9", "r10", "r11");
    int r = (int)ret;
    if (r < 0 && r > -4096) {
        errno = -r;
        return -1;
    }
    return r;
}

/* Through a non-native entry point a call must be killed or refused. */
static void expect_foreign_arch(const char *what, long (*fn)(void *))
{
    struct child_result r = in_child(fn, NULL);
    if (r.sig)
        say("blocked", "%s: killed by %s", what, sigabbrev_np(r.sig) ? sigabbrev_np(r.sig) : "?");
    else if (r.rc == -1)
        say("blocked", "%s -> %s", what, ename(r.err));
    else
        say("ESCAPED", "%s answered %ld (a pid: the call ran)", what, r.rc);
}

static void *thread_main(void *arg)
{
    return arg;
}

static int probe_syscalls(int argc, char **argv)
{
    char what[128];
    /* io_uring: bypasses seccomp for the operations it carries. */
    struct io_uring_params up = {0};
    ATTEMPT("io_uring_setup(4 entries)", syscall(SYS_io_uring_setup, 4, &up), EPERM);
    ATTEMPT("io_uring_enter(-1)", syscall(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0), EPERM);
    ATTEMPT("io_uring_register(-1)", syscall(SYS_io_uring_register, -1, 0, NULL, 0), EPERM);
    ATTEMPT("userfaultfd(UFFD_USER_MODE_ONLY)",
            syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY), EPERM);
    union bpf_attr ba;
    memset(&ba, 0, sizeof(ba));
    ba.map_type = BPF_MAP_TYPE_ARRAY, ba.key_size = 4, ba.value_size = 4, ba.max_entries = 1;
    ATTEMPT("bpf(BPF_MAP_CREATE)", syscall(SYS_bpf, BPF_MAP_CREATE, &ba, sizeof(ba)), EPERM);
    struct perf_event_attr pa = {.type = PERF_TYPE_SOFTWARE,
                                 .size = sizeof(pa),
                                 .config = PERF_COUNT_SW_TASK_CLOCK,
                                 .disabled = 1,
                                 .exclude_kernel = 1,
                                 .exclude_hv = 1};
    ATTEMPT("perf_event_open(own task clock)",
            syscall(SYS_perf_event_open, &pa, 0, -1, -1, PERF_FLAG_FD_CLOEXEC), EPERM);
    ATTEMPT("keyctl(KEYCTL_GET_KEYRING_ID, session)",
            syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0), EPERM);
    ATTEMPT("add_key(user, process keyring)",
            syscall(SYS_add_key, "user", "sbx-probe", "x", 1, KEY_SPEC_PROCESS_KEYRING), EPERM);
    ATTEMPT("request_key(user)",
            syscall(SYS_request_key, "user", "sbx-probe-none", NULL, KEY_SPEC_PROCESS_KEYRING),
            EPERM);
    long peek = 0;
    ATTEMPT("ptrace(PTRACE_PEEKUSER, 1)", syscall(SYS_ptrace, PTRACE_PEEKUSER, 1, 0, &peek), EPERM);
    expect_child_fail("ptrace(PTRACE_TRACEME)", do_traceme, NULL, (const int[]){EPERM, 0});
    char src[8] = "secret", dst[8] = {0};
    struct iovec local = {dst, sizeof(dst)}, remote = {src, sizeof(src)};
    ATTEMPT("process_vm_readv(own pid)",
            syscall(SYS_process_vm_readv, getpid(), &local, 1, &remote, 1, 0), EPERM);
    ATTEMPT("process_vm_writev(own pid)",
            syscall(SYS_process_vm_writev, getpid(), &remote, 1, &local, 1, 0), EPERM);
    ATTEMPT("kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0), EPERM);
    ATTEMPT("kexec_file_load", syscall(SYS_kexec_file_load, -1, -1, 0, "", 0), EPERM);
    ATTEMPT("init_module", syscall(SYS_init_module, NULL, 0, ""), EPERM);
    ATTEMPT("finit_module(-1)", syscall(SYS_finit_module, -1, "", 0), EPERM);
    ATTEMPT("delete_module", syscall(SYS_delete_module, "sbx_probe", O_NONBLOCK), EPERM);
    /* Mount API. */
    ATTEMPT("mount(tmpfs on /tmp)", mount("tmpfs", "/tmp", "tmpfs", 0, "size=1m"), EPERM);
    ATTEMPT("mount(bad target pointer)", mount("tmpfs", (const char *)8, "tmpfs", 0, NULL), EPERM);
    ATTEMPT("umount2(/workspace, MNT_DETACH)", umount2("/workspace", MNT_DETACH), EPERM);
    ATTEMPT("umount2(bad pointer)", umount2((const char *)8, 0), EPERM);
    ATTEMPT("pivot_root(/tmp, /tmp)", syscall(SYS_pivot_root, "/tmp", "/tmp"), EPERM);
    ATTEMPT("move_mount(/tmp -> /workspace)",
            syscall(SYS_move_mount, AT_FDCWD, "/tmp", AT_FDCWD, "/workspace", 0), EPERM);
    ATTEMPT("open_tree(/tmp)", syscall(SYS_open_tree, AT_FDCWD, "/tmp", OPEN_TREE_CLOEXEC), EPERM);
    ATTEMPT("fsopen(tmpfs)", syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC), EPERM);
    ATTEMPT("fsmount(-1)", syscall(SYS_fsmount, -1, FSMOUNT_CLOEXEC, 0), EPERM);
    ATTEMPT("fspick(/tmp)", syscall(SYS_fspick, AT_FDCWD, "/tmp", FSPICK_CLOEXEC), EPERM);
    /* Namespaces: each flag alone, in a child so a success changes nothing here. */
    static const struct {
        int flag;
        const char *name;
    } ns[] = {{CLONE_NEWUSER, "CLONE_NEWUSER"},     {CLONE_NEWNS, "CLONE_NEWNS"},
              {CLONE_NEWNET, "CLONE_NEWNET"},       {CLONE_NEWPID, "CLONE_NEWPID"},
              {CLONE_NEWIPC, "CLONE_NEWIPC"},       {CLONE_NEWUTS, "CLONE_NEWUTS"},
              {CLONE_NEWCGROUP, "CLONE_NEWCGROUP"}, {CLONE_NEWTIME, "CLONE_NEWTIME"}};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
        snprintf(what, sizeof(what), "unshare(%s)", ns[i].name);
        expect_child_fail(what, do_unshare, (void *)(intptr_t)ns[i].flag, (const int[]){EPERM, 0});
        if (ns[i].flag == CLONE_NEWTIME) /* its bit is CSIGNAL's for clone() */
            continue;
        snprintf(what, sizeof(what), "clone(%s)", ns[i].name);
        expect_child_fail(what, do_clone, (void *)(intptr_t)ns[i].flag, (const int[]){EPERM, 0});
    }
    expect_child_fail("unshare(CLONE_NEWUSER|CLONE_NEWNS)", do_unshare,
                      (void *)(intptr_t)(CLONE_NEWUSER | CLONE_NEWNS), (const int[]){EPERM, 0});
    ATTEMPT("setns(-1, 0)", setns(-1, 0), EPERM);
    int nsfd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    ATTEMPT("setns(own net namespace)", setns(nsfd, CLONE_NEWNET), EPERM);
    if (nsfd >= 0)
        close(nsfd);
    /* clone3 hides its flags from seccomp: ENOSYS, so libc falls back to clone. */
    expect_child_fail("clone3(plain fork)", do_clone3, (void *)0, (const int[]){ENOSYS, 0});
    expect_child_fail("clone3(CLONE_NEWUSER)", do_clone3, (void *)(intptr_t)CLONE_NEWUSER,
                      (const int[]){ENOSYS, 0});
    pthread_t th;
    int terr = pthread_create(&th, NULL, thread_main, NULL);
    if (terr == 0 && pthread_join(th, NULL) == 0)
        say("ok", "pthread_create still works (libc falls back from clone3 to clone)");
    else
        say("FAILED", "pthread_create: %s", ename(terr));
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    if (child > 0 && waitpid(child, NULL, 0) == child)
        say("ok", "plain fork still works");
    else
        say("FAILED", "fork: %s", ename(errno));
    /* File handles. */
    static uint64_t hbuf[(sizeof(struct file_handle) + MAX_HANDLE_SZ) / 8 + 1];
    struct file_handle *fh = (struct file_handle *)hbuf;
    fh->handle_bytes = MAX_HANDLE_SZ;
    int mount_id;
    ATTEMPT("name_to_handle_at(/workspace)",
            name_to_handle_at(AT_FDCWD, "/workspace", fh, &mount_id, 0), EPERM);
    memset(hbuf, 0, sizeof(hbuf));
    fh->handle_bytes = 8;
    ATTEMPT("open_by_handle_at", open_by_handle_at(AT_FDCWD, fh, O_RDONLY), EPERM);
    /* Personality: only the default may be set; querying stays allowed. */
    long persona = personality(PER_BSD);
    expect_fail("personality(PER_BSD)", persona, errno, (const int[]){EPERM, 0});
    if (persona != -1)
        personality(PER_LINUX);
    persona = personality(READ_IMPLIES_EXEC);
    expect_fail("personality(READ_IMPLIES_EXEC)", persona, errno, (const int[]){EPERM, 0});
    if (persona != -1)
        personality(PER_LINUX);
    persona = personality(0xffffffff);
    if (persona == PER_LINUX)
        say("ok", "personality query answers PER_LINUX");
    else
        say("FAILED", "personality(0xffffffff) = %ld (%s)", persona, ename(errno));
    /* Host administration. */
    ATTEMPT("acct(NULL)", acct(NULL), EPERM);
    ATTEMPT("swapon(/tmp/sbx-probe-swap)", swapon("/tmp/sbx-probe-swap", 0), EPERM);
    ATTEMPT("swapoff(/tmp/sbx-probe-swap)", swapoff("/tmp/sbx-probe-swap"), EPERM);
    ATTEMPT("reboot(LINUX_REBOOT_CMD_CAD_OFF)",
            syscall(SYS_reboot, LINUX_REBOOT_MAGIC1, LINUX_REBOOT_MAGIC2, LINUX_REBOOT_CMD_CAD_OFF,
                    NULL),
            EPERM);
    ATTEMPT("syslog(SIZE_BUFFER)", klogctl(10, NULL, 0), EPERM);
    struct timeval tv = {.tv_sec = time(NULL), .tv_usec = 2000000};
    ATTEMPT("settimeofday(invalid usec)", syscall(SYS_settimeofday, &tv, NULL), EPERM);
    struct timespec ts = {.tv_sec = time(NULL), .tv_nsec = -1};
    ATTEMPT("clock_settime(REALTIME, invalid nsec)",
            syscall(SYS_clock_settime, CLOCK_REALTIME, &ts), EPERM);
    /* Other architectures' entry points. */
    expect_foreign_arch("x32 getpid (nr | 0x40000000)", do_x32_getpid);
    expect_foreign_arch("i386 getpid (int $0x80)", do_i386_getpid);
    return 0;
}

/* --- 7: terminal injection -------------------------------------------------------- */

static int probe_tiocsti(int argc, char **argv)
{
    char c = 'X';
    /* Closing our controlling terminal's master would hang us up. */
    signal(SIGHUP, SIG_IGN);
    /* On a pipe the kernel would answer ENOTTY: EPERM is the filter's. */
    ATTEMPT("ioctl(stdin, TIOCSTI | high bits)",
            syscall(SYS_ioctl, 0, (unsigned long)TIOCSTI | IOCTL_HIGH_BITS, &c), EPERM);
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0) {
        say("FAILED", "open a pty from /dev/ptmx: %s", ename(errno));
        return 0;
    }
    const char *name = ptsname(m);
    /* As our session's leader without a terminal, opening the slave makes it our
     * controlling terminal: exactly where TIOCSTI would inject. */
    int s = name ? open(name, O_RDWR | O_CLOEXEC) : -1;
    if (s < 0) {
        say("FAILED", "open pty slave %s: %s", name ? name : "?", ename(errno));
        return 0;
    }
    (void)!ioctl(s, TIOCSCTTY, 0);
    struct termios t;
    if (tcgetattr(s, &t) == 0) {
        cfmakeraw(&t);
        tcsetattr(s, TCSANOW, &t);
    }
    ATTEMPT("ioctl(pty, TIOCSTI | high bits)",
            syscall(SYS_ioctl, s, (unsigned long)TIOCSTI | IOCTL_HIGH_BITS, &c), EPERM);
    ATTEMPT("ioctl(pty, TIOCSTI)", syscall(SYS_ioctl, s, (unsigned long)TIOCSTI, &c), EPERM);
    char sub = 2; /* TIOCL_SETSEL */
    ATTEMPT("ioctl(pty, TIOCLINUX | high bits)",
            syscall(SYS_ioctl, s, (unsigned long)TIOCLINUX | IOCTL_HIGH_BITS, &sub), EPERM);
    struct pollfd pfd = {.fd = s, .events = POLLIN};
    char got[16];
    if (poll(&pfd, 1, 200) > 0 && (pfd.revents & POLLIN)) {
        ssize_t n = read(s, got, sizeof(got));
        say("ESCAPED", "%zd character(s) injected into the terminal's input", n);
    } else {
        say("blocked", "no character reached the terminal's input");
    }
    close(s);
    close(m);
    return 0;
}

/* --- 8: inherited fds ------------------------------------------------------------- */

static int probe_fds(int argc, char **argv)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) {
        say("FAILED", "opendir /proc/self/fd: %s", ename(errno));
        return 0;
    }
    int extra = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        int fd = atoi(de->d_name);
        if (fd <= 2 || fd == dirfd(d))
            continue;
        char path[64], target[PATH_MAX] = "?";
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        ssize_t n = readlink(path, target, sizeof(target) - 1);
        target[n > 0 ? n : 1] = '\0';
        say("ESCAPED", "fd %d open at exec: %s", fd, target);
        extra++;
    }
    closedir(d);
    if (!extra)
        say("blocked", "no fd above 2 open at exec");
    char cwd[PATH_MAX] = "", root[PATH_MAX] = "";
    ssize_t n = readlink("/proc/self/cwd", cwd, sizeof(cwd) - 1);
    cwd[n > 0 ? n : 0] = '\0';
    say(strcmp(cwd, "/workspace") == 0 ? "blocked" : "ESCAPED", "working directory is '%s'", cwd);
    n = readlink("/proc/self/root", root, sizeof(root) - 1);
    root[n > 0 ? n : 0] = '\0';
    say(strcmp(root, "/") == 0 ? "blocked" : "ESCAPED", "root directory is '%s'", root);
    return 0;
}

/* --- 9: environment --------------------------------------------------------------- */

static int probe_env(int argc, char **argv)
{
    static const char *const whitelist[] = {"PATH",    "HOME",  "TMPDIR", "USER",
                                            "LOGNAME", "SHELL", "LANG"};
    extern char **environ;
    for (char **e = environ; *e; e++) {
        size_t kl = strcspn(*e, "=");
        bool ok = false;
        for (size_t i = 0; i < sizeof(whitelist) / sizeof(whitelist[0]); i++)
            if (strlen(whitelist[i]) == kl && strncmp(*e, whitelist[i], kl) == 0)
                ok = true;
        for (int i = 0; i < argc; i++) /* the test's own --env KEY=VALUE */
            if (strcmp(*e, argv[i]) == 0)
                ok = true;
        if (ok)
            say("blocked", "only a whitelisted variable: %.*s", (int)kl, *e);
        else
            say("ESCAPED", "variable not on the whitelist: %s", *e);
    }
    for (int i = 0; i < argc; i++) {
        size_t kl = strcspn(argv[i], "=");
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)kl, argv[i]);
        const char *v = getenv(key);
        if (!v || strcmp(v, argv[i] + kl + (argv[i][kl] ? 1 : 0)) != 0)
            say("FAILED", "--env %s did not arrive (got %s)", argv[i], v ? v : "nothing");
    }
    ATTEMPT("open /proc/1/environ (init's)", open("/proc/1/environ", O_RDONLY | O_CLOEXEC), EACCES);
    return 0;
}

/* --- 10: fork bomb ---------------------------------------------------------------- */

static __attribute__((noreturn)) void bomb_child(void)
{
    /* Every child forks too, a bounded bomb: if the cap is missing, it stops at a
     * few hundred processes instead of taking the host with it. */
    for (int i = 0; i < 2; i++)
        if (fork() == 0)
            break;
    for (;;)
        pause();
}

static void count_uid(pid_t pid, void *ud)
{
    char path[64], status[4096], uid[64];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (read_text(path, status, sizeof(status)) > 0 &&
        status_field(status, "Uid", uid, sizeof(uid)))
        *(int *)ud += atoi(uid) == (int)getuid();
}

static int probe_forkbomb(int argc, char **argv)
{
    int limit = argc > 0 ? atoi(argv[0]) : 16;
    int made = 0, fail = 0;
    for (int i = 0; i < limit * 4; i++) {
        pid_t p = fork();
        if (p < 0) {
            fail = errno;
            break;
        }
        if (p == 0)
            bomb_child();
        made++;
    }
    usleep(300 * 1000); /* let the children's own forks land */
    int alive = 0;
    each_pid(count_uid, &alive);
    if (!fail)
        say("ESCAPED", "forked %d children without a failure; %d processes of uid %d alive", made,
            alive, (int)getuid());
    else if (alive > limit)
        say("ESCAPED", "%d processes of uid %d alive, above the limit %d", alive, (int)getuid(),
            limit);
    else if (fail != EAGAIN)
        say("ESCAPED", "fork failed with %s, expected EAGAIN", ename(fail));
    else
        say("blocked", "fork -> EAGAIN after %d children; %d processes of uid %d alive (limit %d)",
            made, alive, (int)getuid(), limit);
    return 0; /* the children die with the sandbox */
}

/* --- 11: memory bomb -------------------------------------------------------------- */

static int probe_membomb(int argc, char **argv)
{
    long max = argc > 0 ? atol(argv[0]) : 1024;
    printf("allocating and touching up to %ld MiB in 1 MiB steps\n", max);
    fflush(stdout);
    for (long mib = 0; mib < max; mib++) {
        char *p = malloc(MIB);
        if (!p) {
            say("blocked", "allocation failed (%s) after %ld MiB", ename(errno), mib);
            return 0;
        }
        memset(p, 0xa5, MIB);
    }
    say("ESCAPED", "allocated and touched %ld MiB without being stopped", max);
    return 0;
}

/* --- 12: CPU hog ------------------------------------------------------------------ */

static double now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *spin(void *arg)
{
    double until = *(double *)arg;
    while (now(CLOCK_MONOTONIC) < until)
        ;
    return NULL;
}

static int probe_cpuhog(int argc, char **argv)
{
    double secs = argc > 0 ? atof(argv[0]) : 3;
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    double start = now(CLOCK_MONOTONIC), until = start + secs;
    pthread_t th[64];
    int n = 0;
    for (; n < threads - 1 && n < 64; n++)
        if (pthread_create(&th[n], NULL, spin, &until) != 0)
            break;
    spin(&until);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    double wall = now(CLOCK_MONOTONIC) - start, cpu = now(CLOCK_PROCESS_CPUTIME_ID);
    say("done", "%d spinning threads got %.3f s of CPU in %.3f s of wall time: %.3f cores", n + 1,
        cpu, wall, cpu / wall);
    return 0;
}

/* --- 13: outliving the timeout ---------------------------------------------------- */

static __attribute__((noreturn)) void linger(void)
{
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    for (;;)
        pause();
}

/* A process that keeps changing its pid (fork, parent exits) to dodge a kill. */
static __attribute__((noreturn)) void hop(void)
{
    for (;;) {
        pid_t p = fork();
        if (p > 0)
            _exit(0);
        if (p < 0)
            linger();
        setsid();
        usleep(2000);
    }
}

static int probe_daemonize(int argc, char **argv)
{
    int n = argc > 0 ? atoi(argv[0]) : 3;
    for (int i = 0; i <= n; i++) {
        pid_t p = fork();
        if (p == 0) {
            setsid();
            if (fork() == 0) {
                if (i == n)
                    hop();
                linger();
            }
            _exit(0);
        }
        if (p > 0)
            waitpid(p, NULL, 0);
    }
    say("done",
        "left %d daemonized grandchildren (double fork, setsid, SIGTERM ignored) and one "
        "pid-hopper; sleeping past the timeout",
        n);
    linger();
}

/* --- 14: output flood ------------------------------------------------------------- */

static int probe_flood(int argc, char **argv)
{
    long long total = argc > 0 ? atoll(argv[0]) : 50000000LL, done = 0;
    bool to_err = argc > 1 && strcmp(argv[1], "stderr") == 0;
    int fd = to_err ? 2 : 1;
    FILE *report = to_err ? stdout : stderr; /* the other stream */
    static char buf[64 * 1024];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (char)('a' + i % 26);
    while (done < total) {
        long long left = total - done;
        size_t want = left < (long long)sizeof(buf) ? (size_t)left : sizeof(buf);
        ssize_t n = write(fd, buf, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(report, "FAILED: write to %s after %lld bytes: %s\n",
                    to_err ? "stderr" : "stdout", done, ename(errno));
            bad++;
            return 0;
        }
        done += n;
    }
    fprintf(report, "done: wrote %lld bytes to %s\n", done, to_err ? "stderr" : "stdout");
    return 0;
}

/* --- 15: file size ---------------------------------------------------------------- */

static int probe_bigfile(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    const char *path = argv[0];
    long mib = atol(argv[1]);
    bool ignore = argc > 2 && strcmp(argv[2], "ignore-sigxfsz") == 0;
    if (ignore)
        signal(SIGXFSZ, SIG_IGN);
    printf("writing %ld MiB to %s (SIGXFSZ %s)\n", mib, path, ignore ? "ignored" : "default");
    fflush(stdout);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        say("FAILED", "open %s: %s", path, ename(errno));
        return 0;
    }
    static char buf[MIB];
    memset(buf, 'z', sizeof(buf));
    long long done = 0;
    while (done < mib * MIB) {
        ssize_t n = write(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            close(fd);
            if (e == EFBIG)
                say("blocked", "write past %lld bytes -> EFBIG", done);
            else
                say("FAILED", "write after %lld bytes: %s", done, ename(e));
            return 0;
        }
        done += n;
    }
    close(fd);
    say("ESCAPED", "wrote all %lld bytes", done);
    return 0;
}

/* --- 17: raw and packet sockets --------------------------------------------------- */

static int probe_raw_sockets(int argc, char **argv)
{
    static const struct {
        int family, type, proto;
        const char *name;
    } socks[] = {
        {AF_INET, SOCK_RAW, IPPROTO_RAW, "AF_INET SOCK_RAW IPPROTO_RAW"},
        {AF_INET, SOCK_RAW, IPPROTO_ICMP, "AF_INET SOCK_RAW IPPROTO_ICMP"},
        {AF_INET, SOCK_RAW, IPPROTO_UDP, "AF_INET SOCK_RAW IPPROTO_UDP"},
        {AF_INET6, SOCK_RAW, IPPROTO_ICMPV6, "AF_INET6 SOCK_RAW IPPROTO_ICMPV6"},
        {AF_PACKET, SOCK_RAW, 0x0300 /* htons(ETH_P_ALL) */, "AF_PACKET SOCK_RAW ETH_P_ALL"},
        {AF_PACKET, SOCK_DGRAM, 0x0008 /* htons(ETH_P_IP) */, "AF_PACKET SOCK_DGRAM ETH_P_IP"},
        {AF_INET, SOCK_PACKET, 0x0300, "AF_INET SOCK_PACKET"},
    };
    char what[96];
    for (size_t i = 0; i < sizeof(socks) / sizeof(socks[0]); i++) {
        snprintf(what, sizeof(what), "socket(%s)", socks[i].name);
        /* AF_PACKET is also refused by seccomp (EAFNOSUPPORT), before the
         * missing capability could answer. */
        if (socks[i].family == AF_PACKET)
            ATTEMPT(what, socket(socks[i].family, socks[i].type | SOCK_CLOEXEC, socks[i].proto),
                    EAFNOSUPPORT);
        else
            ATTEMPT(what, socket(socks[i].family, socks[i].type | SOCK_CLOEXEC, socks[i].proto),
                    EPERM, EACCES);
    }
    return 0;
}

/* --- 20: routes, interfaces, nftables --------------------------------------------- */

/* Sends the request, returns -1 with errno from the first error ack, or 0 for a
 * positive ack (the change was made). */
static long nl_talk(int proto, struct nlbuf *b)
{
    int s = nl_send(proto, b);
    if (s < 0)
        return -1;
    char reply[4096];
    ssize_t n = recv(s, reply, sizeof(reply), 0);
    int e = errno;
    close(s);
    if (n < 0) {
        errno = e;
        return -1;
    }
    for (struct nlmsghdr *h = (struct nlmsghdr *)reply; NLMSG_OK(h, (size_t)n);
         h = NLMSG_NEXT(h, n)) {
        if (h->nlmsg_type != NLMSG_ERROR)
            continue;
        struct nlmsgerr *err = NLMSG_DATA(h);
        if (err->error == 0)
            return 0;
        errno = -err->error;
        return -1;
    }
    errno = EBADMSG;
    return -1;
}

static long rtm_newroute(void)
{
    struct nlbuf b = {.len = 0};
    rtm_route_msg(&b, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, 0x0a000000, 8);
    return nl_talk(NETLINK_ROUTE, &b);
}

static long rtm_newaddr(void)
{
    struct nlbuf b = {.len = 0};
    struct ifaddrmsg ia = {.ifa_family = AF_INET,
                           .ifa_prefixlen = 32,
                           .ifa_scope = RT_SCOPE_HOST,
                           .ifa_index = if_nametoindex("lo")};
    struct nlmsghdr *h =
        nl_add(&b, RTM_NEWADDR, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE, &ia, sizeof(ia));
    struct in_addr a = {htonl(0x0a090909)};
    nl_attr(&b, h, IFA_LOCAL, &a, sizeof(a));
    nl_attr(&b, h, IFA_ADDRESS, &a, sizeof(a));
    return nl_talk(NETLINK_ROUTE, &b);
}

static long rtm_setlink_down(void)
{
    struct nlbuf b = {.len = 0};
    rtm_link_down_msg(&b);
    return nl_talk(NETLINK_ROUTE, &b);
}

static long nft_newtable(void)
{
    struct nlbuf b = {.len = 0};
    nft_table_batch(&b, NFT_MSG_NEWTABLE, NFPROTO_INET, "sbxprobe", NLM_F_CREATE);
    return nl_talk(NETLINK_NETFILTER, &b);
}

static int probe_netconfig(int argc, char **argv)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
        say("FAILED", "socket(AF_INET, SOCK_DGRAM): %s", ename(errno));
        return 0;
    }
    struct rtentry rt;
    memset(&rt, 0, sizeof(rt));
    struct sockaddr_in *dst = (struct sockaddr_in *)&rt.rt_dst;
    struct sockaddr_in *mask = (struct sockaddr_in *)&rt.rt_genmask;
    dst->sin_family = mask->sin_family = AF_INET;
    dst->sin_addr.s_addr = htonl(0x0a000000);
    mask->sin_addr.s_addr = htonl(0xff000000);
    char dev[] = "lo";
    rt.rt_flags = RTF_UP;
    rt.rt_dev = dev;
    ATTEMPT("ioctl(SIOCADDRT 10.0.0.0/8 dev lo)", ioctl(s, SIOCADDRT, &rt), EPERM);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
        say("FAILED", "SIOCGIFFLAGS lo: %s", ename(errno));
    short was = ifr.ifr_flags;
    ifr.ifr_flags = (short)(was & ~IFF_UP);
    long rc = ioctl(s, SIOCSIFFLAGS, &ifr);
    int e = errno;
    if (rc == 0) { /* put it back: only the check should fail */
        ifr.ifr_flags = was;
        ioctl(s, SIOCSIFFLAGS, &ifr);
    }
    expect_fail("ioctl(SIOCSIFFLAGS lo down)", rc, e, (const int[]){EPERM, 0});
    ifr.ifr_mtu = 1280;
    ATTEMPT("ioctl(SIOCSIFMTU lo 1280)", ioctl(s, SIOCSIFMTU, &ifr), EPERM);
    close(s);
    ATTEMPT("netlink RTM_NEWROUTE 10.0.0.0/8 dev lo", rtm_newroute(), EPERM);
    ATTEMPT("netlink RTM_NEWADDR 10.9.9.9/32 on lo", rtm_newaddr(), EPERM);
    ATTEMPT("netlink RTM_NEWLINK lo down", rtm_setlink_down(), EPERM);
    /* seccomp refuses every netlink protocol but route (EPROTONOSUPPORT);
     * without it, the missing capability would (EPERM). */
    ATTEMPT("nfnetlink NFT_MSG_NEWTABLE inet sbxprobe", nft_newtable(), EPROTONOSUPPORT);
    char routes[4096];
    if (read_text("/proc/net/route", routes, sizeof(routes)) < 0)
        say("FAILED", "read /proc/net/route: %s", ename(errno));
    else
        say(strstr(routes, "0000000A") ? "ESCAPED" : "blocked", "routing table afterwards: %s",
            strstr(routes, "0000000A") ? "a 10.0.0.0/8 route was added" : "no 10.0.0.0/8 route");
    return 0;
}

/* --- 24: init and the daemon ------------------------------------------------------ */

static int probe_signal_init(int argc, char **argv)
{
    ATTEMPT("kill(1, SIGKILL)", kill(1, SIGKILL), EPERM);
    ATTEMPT("kill(1, SIGTERM)", kill(1, SIGTERM), EPERM);
    ATTEMPT("kill(1, SIGSTOP)", kill(1, SIGSTOP), EPERM);
    ATTEMPT("ptrace(PTRACE_ATTACH, 1)", ptrace(PTRACE_ATTACH, 1, NULL, NULL), EPERM);
    ATTEMPT("ptrace(PTRACE_SEIZE, 1)", ptrace(PTRACE_SEIZE, 1, NULL, NULL), EPERM);
    int pfd = (int)syscall(SYS_pidfd_open, 1, 0);
    if (pfd >= 0) {
        ATTEMPT("pidfd_send_signal(init, SIGKILL)",
                syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0), EPERM);
        close(pfd);
    }
    char status[4096];
    if (read_text("/proc/1/status", status, sizeof(status)) > 0)
        say("blocked", "init (pid 1) still alive");
    else
        say("ESCAPED", "init (pid 1) is gone: %s", ename(errno));
    for (int i = 0; i < argc; i++) {
        pid_t pid = (pid_t)atoi(argv[i]);
        char what[96];
        if (pid == 1 || pid == getpid()) {
            say("ok", "host pid %d equals a sandbox pid here, not checkable", (int)pid);
            continue;
        }
        snprintf(what, sizeof(what), "kill(%d, SIGKILL) (a host pid)", (int)pid);
        ATTEMPT(what, kill(pid, SIGKILL), ESRCH);
        snprintf(what, sizeof(what), "ptrace(PTRACE_ATTACH, %d) (a host pid)", (int)pid);
        ATTEMPT(what, ptrace(PTRACE_ATTACH, pid, NULL, NULL), ESRCH, EPERM);
    }
    return 0;
}

/* --- 25: the runtime's binary ----------------------------------------------------- */

static int probe_exe(int argc, char **argv)
{
    /* Any failure will do for writes (ETXTBSY, EACCES, EROFS, ...). */
    ATTEMPT("open /proc/self/exe for writing", open("/proc/self/exe", O_WRONLY | O_CLOEXEC), EACCES,
            ETXTBSY, EROFS, EPERM);
    ATTEMPT("open /proc/self/exe read-write", open("/proc/self/exe", O_RDWR | O_CLOEXEC), EACCES,
            ETXTBSY, EROFS, EPERM);
    ATTEMPT("open /proc/1/exe for writing", open("/proc/1/exe", O_WRONLY | O_CLOEXEC), EACCES,
            ETXTBSY, EROFS, EPERM);
    ATTEMPT("open /proc/1/exe for reading", open("/proc/1/exe", O_RDONLY | O_CLOEXEC), EACCES);
    char target[PATH_MAX];
    ATTEMPT("readlink /proc/1/exe", readlink("/proc/1/exe", target, sizeof(target)), EACCES);
    ATTEMPT("open /proc/1/mem", open("/proc/1/mem", O_RDONLY | O_CLOEXEC), EACCES);
    ATTEMPT("open /proc/1/fd (init's fds)", open("/proc/1/fd", O_RDONLY | O_CLOEXEC), EACCES);
    ATTEMPT("open /proc/1/fd/3 (init's sync socket)", open("/proc/1/fd/3", O_RDWR | O_CLOEXEC),
            EACCES);
    ATTEMPT("open /proc/1/root", open("/proc/1/root/", O_RDONLY | O_CLOEXEC), EACCES);
    return 0;
}

/* ---------------------------------------------------------------------------------- */

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *usage;
} probes[] = {
    {"read-host", probe_read_host, "[HOST-PATH...]   1: host secrets, state and control dirs"},
    {"write-system", probe_write_system, "            2: /, /usr, /etc are read-only"},
    {"workspace-rw", probe_workspace_rw, "CONTENT     3: /workspace, /tmp, ~ writable"},
    {"proc-list", probe_proc_list, "[HOST-PID...]  4: only the sandbox's processes"},
    {"identity", probe_identity, "                5: ids, capabilities, NNP, seccomp"},
    {"syscalls", probe_syscalls, "                6: the denied syscalls"},
    {"tiocsti", probe_tiocsti, "                  7: terminal injection"},
    {"fds", probe_fds, "                      8: no fd above 2"},
    {"env", probe_env, "[KEY=VALUE...]            9: whitelisted environment"},
    {"forkbomb", probe_forkbomb, "LIMIT           10: pid cap"},
    {"membomb", probe_membomb, "MAX-MIB          11: memory cap"},
    {"cpuhog", probe_cpuhog, "SECONDS THREADS   12: CPU share"},
    {"daemonize", probe_daemonize, "N            13: grandchildren past the timeout"},
    {"flood", probe_flood, "BYTES [stdout|stderr] 14: output cap"},
    {"bigfile", probe_bigfile, "PATH MIB [ignore-sigxfsz] 15: file size cap"},
    {"raw-sockets", probe_raw_sockets, "          17: raw and packet sockets"},
    {"netconfig", probe_netconfig, "              20: routes, interfaces, nftables"},
    {"signal-init", probe_signal_init, "[HOST-PID...] 24: kill or trace init"},
    {"exe", probe_exe, "                      25: /proc/self/exe, /proc/1/exe"},
};

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t i = 0; argc > 1 && i < sizeof(probes) / sizeof(probes[0]); i++) {
        if (strcmp(argv[1], probes[i].name) != 0)
            continue;
        if (probes[i].fn(argc - 2, argv + 2) == 2)
            break;
        printf("%s: %s\n", probes[i].name,
               bad ? "something ESCAPED or FAILED (see above)"
                   : "every attack blocked, everything allowed worked");
        return bad ? 1 : 0;
    }
    fprintf(stderr, "usage: probe NAME [ARGS]\n");
    for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++)
        fprintf(stderr, "  probe %s %s\n", probes[i].name, probes[i].usage);
    return 2;
}
