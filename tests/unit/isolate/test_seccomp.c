/* The seccomp profiles: tables checked against SECURITY.md, then each profile
 * loaded for real in a forked child that tries the refused syscalls and runs
 * real programs. Children report through their exit status (0 = every check
 * held; otherwise the failed check is printed on stderr). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "isolate/seccomp.h"

#define PYTHON "/usr/bin/python3"
#define NODE "/usr/bin/node"

/* ---- tables ---- */

static const struct sbx_sc_rule *denied_find(const char *name)
{
    for (size_t i = 0; i < sbx_seccomp_denied_len; i++)
        if (strcmp(sbx_seccomp_denied[i].name, name) == 0)
            return &sbx_seccomp_denied[i];
    return NULL;
}

static bool strict_allows(const char *name)
{
    for (size_t i = 0; i < sbx_seccomp_strict_allowed_len; i++)
        if (strcmp(sbx_seccomp_strict_allowed[i], name) == 0)
            return true;
    return false;
}

static void test_profile_parse(void **state)
{
    enum sbx_seccomp_profile p = SBX_SECCOMP_STRICT;
    sbx_err err = {0};
    assert_int_equal(sbx_seccomp_profile_parse("default", &p, &err), 0);
    assert_int_equal(p, SBX_SECCOMP_DEFAULT);
    assert_int_equal(sbx_seccomp_profile_parse("strict", &p, &err), 0);
    assert_int_equal(p, SBX_SECCOMP_STRICT);
    assert_string_equal(sbx_seccomp_profile_name(SBX_SECCOMP_DEFAULT), "default");
    assert_string_equal(sbx_seccomp_profile_name(SBX_SECCOMP_STRICT), "strict");

    const char *bad[] = {"", "Default", "strict ", " default", "none", "unconfined", "def"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        p = SBX_SECCOMP_STRICT;
        memset(&err, 0, sizeof(err));
        assert_int_equal(sbx_seccomp_profile_parse(bad[i], &p, &err), -1);
        assert_int_equal(err.errnum, EINVAL);
        assert_non_null(strstr(err.msg, bad[i]));
        assert_int_equal(p, SBX_SECCOMP_STRICT);
    }
    assert_int_equal(sbx_seccomp_profile_parse(NULL, &p, &err), -1);
    assert_int_equal(sbx_seccomp_profile_parse("strict", &p, NULL), 0);
    assert_int_equal(sbx_seccomp_profile_parse("bogus", &p, NULL), -1);
}

static void test_denied_covers_security_md(void **state)
{
    static const char *const eperm[] = {
        "mount",
        "umount2",
        "ptrace",
        "bpf",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "userfaultfd",
        "keyctl",
        "add_key",
        "request_key",
        "setns",
        "unshare",
        "open_by_handle_at",
        "name_to_handle_at",
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "perf_event_open",
        "process_vm_readv",
        "process_vm_writev",
        "pivot_root",
        "move_mount",
        "open_tree",
        "fsopen",
        "fsmount",
        "acct",
        "swapon",
        "swapoff",
        "reboot",
        "syslog",
        "settimeofday",
        "clock_settime",
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(eperm); i++) {
        const struct sbx_sc_rule *r = denied_find(eperm[i]);
        if (!r)
            fail_msg("%s is missing from sbx_seccomp_denied", eperm[i]);
        if (r->action != SBX_SC_ERRNO_EPERM)
            fail_msg("%s must be answered EPERM", eperm[i]);
    }
    const struct sbx_sc_rule *clone3 = denied_find("clone3");
    assert_non_null(clone3);
    assert_int_equal(clone3->action, SBX_SC_ERRNO_ENOSYS);
    /* Argument-filtered, so neither denied outright nor allowed outright. */
    static const char *const by_args[] = {"clone", "ioctl", "personality"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(by_args); i++) {
        assert_null(denied_find(by_args[i]));
        assert_false(strict_allows(by_args[i]));
    }
}

static void test_ns_flags(void **state)
{
    const unsigned long want[] = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,    CLONE_NEWUSER,
                                  CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP, CLONE_NEWTIME};
    unsigned long all = 0;
    for (size_t i = 0; i < SBX_ARRAY_LEN(want); i++) {
        assert_int_equal(sbx_seccomp_ns_flags & want[i], want[i]);
        all |= want[i];
    }
    /* Nothing else: threads and fork must pass. */
    assert_int_equal(sbx_seccomp_ns_flags, all);
}

/* No typos: libseccomp knows every name (for some architecture), and those of
 * SECURITY.md exist on this one. */
static void test_tables_resolve(void **state)
{
    for (size_t i = 0; i < sbx_seccomp_denied_len; i++)
        if (seccomp_syscall_resolve_name(sbx_seccomp_denied[i].name) == __NR_SCMP_ERROR)
            fail_msg("denied syscall '%s' is unknown to libseccomp", sbx_seccomp_denied[i].name);
    for (size_t i = 0; i < sbx_seccomp_strict_allowed_len; i++)
        if (seccomp_syscall_resolve_name(sbx_seccomp_strict_allowed[i]) == __NR_SCMP_ERROR)
            fail_msg("allowed syscall '%s' is unknown to libseccomp",
                     sbx_seccomp_strict_allowed[i]);
    static const char *const native[] = {"mount",  "ptrace",  "bpf",         "io_uring_setup",
                                         "setns",  "unshare", "kexec_load",  "perf_event_open",
                                         "clone3", "reboot",  "init_module", "open_by_handle_at"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(native); i++)
        assert_true(seccomp_syscall_resolve_name(native[i]) >= 0);
}

static void test_tables_disjoint(void **state)
{
    for (size_t i = 0; i < sbx_seccomp_denied_len; i++) {
        if (strict_allows(sbx_seccomp_denied[i].name))
            fail_msg("'%s' is both denied and allowed by strict", sbx_seccomp_denied[i].name);
        for (size_t j = i + 1; j < sbx_seccomp_denied_len; j++)
            assert_string_not_equal(sbx_seccomp_denied[i].name, sbx_seccomp_denied[j].name);
    }
    for (size_t i = 0; i < sbx_seccomp_strict_allowed_len; i++)
        for (size_t j = i + 1; j < sbx_seccomp_strict_allowed_len; j++)
            assert_string_not_equal(sbx_seccomp_strict_allowed[i], sbx_seccomp_strict_allowed[j]);
    /* And by number, in case two names alias one syscall here. */
    for (size_t i = 0; i < sbx_seccomp_denied_len; i++) {
        int nr = seccomp_syscall_resolve_name(sbx_seccomp_denied[i].name);
        for (size_t j = 0; nr >= 0 && j < sbx_seccomp_strict_allowed_len; j++)
            assert_int_not_equal(nr, seccomp_syscall_resolve_name(sbx_seccomp_strict_allowed[j]));
    }
}

static void test_bpf_len(void **state)
{
    sbx_err err = {0};
    int def = sbx_seccomp_bpf_len(SBX_SECCOMP_DEFAULT, &err);
    int strict = sbx_seccomp_bpf_len(SBX_SECCOMP_STRICT, &err);
    assert_true(def > 0);
    assert_true(strict > def);
    /* The kernel refuses programs over BPF_MAXINSNS (4096) instructions. */
    assert_true(strict < 4096);

    memset(&err, 0, sizeof(err));
    assert_int_equal(sbx_seccomp_bpf_len((enum sbx_seccomp_profile)7, &err), -1);
    assert_string_equal(err.stage, "seccomp");
    assert_int_equal(err.errnum, EINVAL);
}

static void test_compile_unknown_profile(void **state)
{
    sbx_err err = {0};
    assert_int_equal(sbx_seccomp_compile_fd((enum sbx_seccomp_profile)42, &err), -1);
    assert_string_equal(err.stage, "seccomp");
    assert_int_equal(err.errnum, EINVAL);
}

/* The compiled fd holds each filter as <count><instructions>, as many filters
 * as the profile has (strict is stacked on default), sealed. */
static void test_compile_fd_layout(void **state)
{
    sbx_err err = {0};
    int fd = sbx_seccomp_compile_fd(SBX_SECCOMP_STRICT, &err);
    assert_true(fd >= 0);
    assert_true(fcntl(fd, F_GET_SEALS) & F_SEAL_WRITE);
    struct sbx_seccomp_progs p;
    assert_int_equal(sbx_seccomp_progs_read(fd, &p, &err), 0);
    close(fd);
    size_t at = 0, filters = 0, insns = 0;
    while (at < p.len) {
        uint32_t count;
        assert_true(p.len - at >= sizeof(count));
        memcpy(&count, (char *)p.buf + at, sizeof(count));
        at += sizeof(count) + (size_t)count * sizeof(struct sock_filter);
        insns += count;
        filters++;
    }
    assert_int_equal(at, p.len);
    assert_int_equal(filters, 2);
    assert_int_equal(insns, sbx_seccomp_bpf_len(SBX_SECCOMP_STRICT, &err));
    sbx_seccomp_progs_free(&p);
}

/* The programs embedded at build time are the very bytes this machine's
 * libseccomp compiles from the same tables; sealed alike. */
static void test_prebuilt_matches_compiled(void **state)
{
    for (int p = SBX_SECCOMP_DEFAULT; p <= SBX_SECCOMP_STRICT; p++) {
        sbx_err err = {0};
        int fds[2] = {sbx_seccomp_prebuilt_fd((enum sbx_seccomp_profile)p, &err),
                      sbx_seccomp_compile_fd((enum sbx_seccomp_profile)p, &err)};
        assert_true(fds[0] >= 0 && fds[1] >= 0);
        assert_true(fcntl(fds[0], F_GET_SEALS) & F_SEAL_WRITE);
        struct sbx_seccomp_progs got[2];
        for (int i = 0; i < 2; i++) {
            assert_int_equal(sbx_seccomp_progs_read(fds[i], &got[i], &err), 0);
            close(fds[i]);
        }
        assert_true(got[0].len > 0);
        assert_int_equal(got[0].len, got[1].len);
        assert_memory_equal(got[0].buf, got[1].buf, got[0].len);
        sbx_seccomp_progs_free(&got[0]);
        sbx_seccomp_progs_free(&got[1]);
    }
    sbx_err err = {0};
    assert_int_equal(sbx_seccomp_prebuilt_fd((enum sbx_seccomp_profile)42, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
}

/* A damaged buffer is refused before anything is installed (so this runs in
 * the test process itself). */
static void test_progs_load_refuses_damage(void **state)
{
    sbx_err err = {0};
    struct sbx_seccomp_progs none = {0};
    assert_int_equal(sbx_seccomp_progs_load(&none, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    char short_hdr[2] = {0};
    struct sbx_seccomp_progs p = {.buf = short_hdr, .len = sizeof(short_hdr)};
    assert_int_equal(sbx_seccomp_progs_load(&p, &err), -1);
    assert_string_equal(err.msg, "truncated BPF header");
    uint32_t big[2] = {100, 0}; /* claims 100 instructions, holds none */
    p = (struct sbx_seccomp_progs){.buf = big, .len = sizeof(big)};
    assert_int_equal(sbx_seccomp_progs_load(&p, &err), -1);
    assert_string_equal(err.msg, "truncated BPF program");
    assert_string_equal(err.stage, "seccomp");
}

/* ---- children ---- */

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "child check failed, line %d: %s (errno %d %s)\n", __LINE__, #cond,    \
                    errno, strerror(errno));                                                       \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static bool fails_with(long rc, int e)
{
    return rc == -1 && errno == e;
}

/* Fork, optionally load profile p (after NO_NEW_PRIVS, so this also works
 * unprivileged), run fn and return its wait status. The profile takes the
 * production path: compiled in the parent into an fd, read back and loaded as
 * raw BPF in the child, as a sandbox's init does. */
static int run_child_fd(int (*fn)(void), int bpf);

static int run_child(int (*fn)(void), bool load, enum sbx_seccomp_profile p)
{
    sbx_err cerr = {0};
    int bpf = load ? sbx_seccomp_compile_fd(p, &cerr) : -1;
    if (load && bpf < 0) {
        char buf[400];
        fail_msg("compile: %s", sbx_err_format(&cerr, buf, sizeof(buf)));
    }
    return run_child_fd(fn, bpf);
}

/* fn in a child under the programs of bpf (-1: none); bpf is closed. */
static int run_child_fd(int (*fn)(void), int bpf)
{
    bool load = bpf >= 0;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* A killed child must not leave a core file behind. */
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
            _exit(120);
        sbx_err err = {0};
        struct sbx_seccomp_progs progs;
        if (load && (sbx_seccomp_progs_read(bpf, &progs, &err) != 0 ||
                     sbx_seccomp_progs_load(&progs, &err) != 0)) {
            char buf[400];
            fprintf(stderr, "load: %s\n", sbx_err_format(&err, buf, sizeof(buf)));
            _exit(121);
        }
        if (load)
            close(bpf);
        _exit(fn());
    }
    if (bpf >= 0)
        close(bpf);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void assert_child_ok(int status)
{
    if (WIFSIGNALED(status))
        fail_msg("child killed by signal %d", WTERMSIG(status));
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void assert_child_sigsys(int status)
{
    if (WIFEXITED(status))
        fail_msg("child exited %d instead of dying of SIGSYS", WEXITSTATUS(status));
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGSYS);
}

/* Every listed syscall, called for real. All-ones arguments make each fail on
 * its own (EINVAL, EFAULT, EBADF) even if the filter were missing, so the
 * host is safe and only the filter can answer EPERM. */
static int call_denied_table(void)
{
    for (size_t i = 0; i < sbx_seccomp_denied_len; i++) {
        const struct sbx_sc_rule *r = &sbx_seccomp_denied[i];
        int nr = seccomp_syscall_resolve_name(r->name);
        if (nr < 0)
            continue;
        errno = 0;
        long rc = syscall(nr, -1L, -1L, -1L, -1L, -1L, -1L);
        int want = r->action == SBX_SC_ERRNO_ENOSYS ? ENOSYS : EPERM;
        if (!fails_with(rc, want)) {
            fprintf(stderr, "%s: rc %ld errno %d, expected %d\n", r->name, rc, errno, want);
            return 1;
        }
    }
    return 0;
}

static void *thread_fn(void *arg)
{
    return arg;
}

/* What both profiles refuse, and what both must still allow. */
static int child_common(void)
{
    if (call_denied_table() != 0)
        return 1;
    CHECK(fails_with(mount("none", "/nonexistent-sbx-seccomp", "tmpfs", 0, NULL), EPERM));
    CHECK(fails_with(unshare(CLONE_NEWUSER), EPERM));
    CHECK(fails_with(unshare(CLONE_FILES), EPERM));
    CHECK(fails_with(syscall(SYS_clone3, NULL, 0), ENOSYS));

    /* clone with any namespace flag, high bits set or not. */
    static const unsigned long ns[] = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,   CLONE_NEWUSER,
                                       CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP};
    for (size_t i = 0; i < SBX_ARRAY_LEN(ns); i++) {
        for (unsigned long hi = 0; hi <= 1; hi++) {
            long rc = syscall(SYS_clone, ns[i] | SIGCHLD | (hi << 32), 0L, 0L, 0L, 0L);
            if (rc == 0)
                _exit(99); /* a clone the filter let through: leave at once */
            if (rc > 0)
                waitpid((pid_t)rc, NULL, 0);
            CHECK(fails_with(rc, EPERM));
        }
    }

    /* Terminal injection: EPERM, not the ENOTTY /dev/null would answer. */
    int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    char c = 'x';
    CHECK(fails_with(syscall(SYS_ioctl, fd, (unsigned long)TIOCSTI, &c), EPERM));
    CHECK(fails_with(syscall(SYS_ioctl, fd, (unsigned long)TIOCSTI | 0x100000000ul, &c), EPERM));
    CHECK(fails_with(syscall(SYS_ioctl, fd, (unsigned long)TIOCSTI | 0xffffffff00000000ul, &c),
                     EPERM));
    CHECK(fails_with(syscall(SYS_ioctl, fd, (unsigned long)TIOCLINUX, &c), EPERM));
    CHECK(fails_with(syscall(SYS_ioctl, fd, (unsigned long)TIOCLINUX | 0x700000000ul, &c), EPERM));
    struct winsize ws;
    CHECK(fails_with(ioctl(fd, TIOCGWINSZ, &ws), ENOTTY));
    int one = 1;
    CHECK(ioctl(fd, FIONBIO, &one) == 0);
    close(fd);

    CHECK(syscall(SYS_getpid) == getpid());
    CHECK(syscall(SYS_personality, 0xffffffffUL) >= 0);
    CHECK(fails_with(syscall(SYS_personality, (unsigned long)PER_BSD), EPERM));

    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        _exit(7);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7);

    /* Threads: glibc tries clone3, gets ENOSYS and falls back to clone. */
    pthread_t t;
    void *ret = NULL;
    CHECK(pthread_create(&t, NULL, thread_fn, &one) == 0);
    CHECK(pthread_join(t, &ret) == 0 && ret == &one);
    return 0;
}

static bool persona_allowed(uint32_t v)
{
    return v == 0 || v == PER_LINUX32 || v == UNAME26 || v == (UNAME26 | PER_LINUX32) ||
           v == 0xffffffffu;
}

static int try_persona(uint32_t low, uint32_t high)
{
    errno = 0;
    long rc = syscall(SYS_personality, (unsigned long)high << 32 | low);
    bool ok = persona_allowed(low) ? rc != -1 : fails_with(rc, EPERM);
    if (!ok) {
        fprintf(stderr, "personality(0x%x%08x): rc %ld errno %d\n", high, low, rc, errno);
        return 1;
    }
    return 0;
}

/* The default profile says "all but these" as bit patterns: sweep the values
 * most likely to slip between them, plus random ones, with high bits. */
static int child_personality(void)
{
    static const uint32_t fixed[] = {0,
                                     PER_LINUX32,
                                     UNAME26,
                                     UNAME26 | PER_LINUX32,
                                     0xffffffffu,
                                     PER_BSD,
                                     PER_SVR4,
                                     PER_LINUX32_3GB,
                                     READ_IMPLIES_EXEC,
                                     ADDR_NO_RANDOMIZE,
                                     MMAP_PAGE_ZERO,
                                     ADDR_COMPAT_LAYOUT,
                                     ADDR_LIMIT_32BIT,
                                     0xfffffffeu,
                                     0x7fffffffu,
                                     0xfffdfff7u,
                                     0x20004,
                                     0x2000c,
                                     0x60008};
    for (size_t i = 0; i < SBX_ARRAY_LEN(fixed); i++)
        if (try_persona(fixed[i], 0) || try_persona(fixed[i], 1) ||
            try_persona(fixed[i], 0xffffffffu))
            return 1;
    for (unsigned b = 0; b < 32; b++) {
        uint32_t base[] = {0, PER_LINUX32, UNAME26, UNAME26 | PER_LINUX32};
        for (size_t i = 0; i < SBX_ARRAY_LEN(base); i++)
            if (try_persona(base[i] | 1u << b, 0) || try_persona(~(1u << b), 0))
                return 1;
        for (unsigned c = b + 1; c < 32; c++)
            if (try_persona(1u << b | 1u << c, 0) || try_persona(~(1u << b | 1u << c), 0))
                return 1;
    }
    srandom(0x5ecc0);
    for (int i = 0; i < 20000; i++) {
        uint32_t v = (uint32_t)random() ^ (uint32_t)random() << 16;
        /* Sparse values too: AND of a few draws. */
        uint32_t sparse = v & (uint32_t)random() & (uint32_t)random() << 1;
        if (try_persona(v, (uint32_t)random()) || try_persona(sparse, 0) || try_persona(~sparse, 0))
            return 1;
    }
    return 0;
}

#if defined(__x86_64__)
static int child_x32(void)
{
    long rc = syscall(0x40000000L | SYS_getpid);
    fprintf(stderr, "x32 getpid was not killed: rc %ld errno %d\n", rc, errno);
    return 1;
}

/* i386 getpid (20) through the 32-bit entry point. */
static long int80_getpid(void)
{
    long ret = 20;
    __asm__ volatile("int $0x80" : "+a"(ret) : : "r8", "r9", "r10", "r11", "memory", "cc");
    return ret;
}

static int child_i386(void)
{
    return int80_getpid() == getpid() ? 0 : 1;
}
#endif

static int exec_status(char *const argv[])
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, STDOUT_FILENO);
        execv(argv[0], argv);
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    if (WIFSIGNALED(status))
        fprintf(stderr, "%s killed by signal %d\n", argv[0], WTERMSIG(status));
    return status;
}

static int child_exec_true(void)
{
    char *argv[] = {"/bin/true", NULL};
    int status = exec_status(argv);
    CHECK(status == 0);
    return 0;
}

static int child_shell(void)
{
    char *argv[] = {"/bin/sh", "-c",
                    "set -e; d=$(mktemp -d); cd \"$d\"; echo hi > a; cat a; ls -la / >/dev/null;"
                    " mkdir -p x/y; printf 'b\\na\\n' | sort | head -1; rm -rf x a;"
                    " cd /; rm -r \"$d\"; echo done",
                    NULL};
    CHECK(exec_status(argv) == 0);
    return 0;
}

static int child_python(void)
{
    char *argv[] = {PYTHON, "-c",
                    "import os, json, subprocess, threading, socket\n"
                    "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
                    "subprocess.run(['true'], check=True)\n"
                    "socket.socket().close()\n"
                    "print(json.dumps(os.listdir('/')))\n",
                    NULL};
    CHECK(exec_status(argv) == 0);
    return 0;
}

static int child_node(void)
{
    char *argv[] = {NODE, "-e",
                    "require('fs').readdirSync('/');"
                    "require('child_process').execSync('true');"
                    "const w = new (require('worker_threads').Worker)('1', {eval: true});"
                    "w.on('exit', (c) => setTimeout(() => process.exit(c), 1));",
                    NULL};
    CHECK(exec_status(argv) == 0);
    return 0;
}

/* Only strict refuses what neither table lists. */
static int child_strict_only(void)
{
    CHECK(fails_with(syscall(SYS_mbind, -1L, -1L, -1L, -1L, -1L, -1L), EPERM));
#ifdef SYS_modify_ldt
    CHECK(fails_with(syscall(SYS_modify_ldt, -1L, -1L, -1L), EPERM));
#endif
    return 0;
}

static int child_not_strict(void)
{
    CHECK(!fails_with(syscall(SYS_mbind, -1L, -1L, -1L, -1L, -1L, -1L), EPERM));
    return 0;
}

/* ---- behavioural tests ---- */

static void test_default_denies(void **state)
{
    assert_child_ok(run_child(child_common, true, SBX_SECCOMP_DEFAULT));
    assert_child_ok(run_child(child_not_strict, true, SBX_SECCOMP_DEFAULT));
}

static void test_strict_denies(void **state)
{
    assert_child_ok(run_child(child_common, true, SBX_SECCOMP_STRICT));
    assert_child_ok(run_child(child_strict_only, true, SBX_SECCOMP_STRICT));
}

static int child_common_quiet(void)
{
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0)
        dup2(null, STDERR_FILENO);
    return child_common();
}

/* Without a filter the checks must fail: proves they test the filter. */
static void test_checks_need_filter(void **state)
{
    int status = run_child(child_common_quiet, false, SBX_SECCOMP_DEFAULT);
    assert_true(WIFEXITED(status));
    assert_int_not_equal(WEXITSTATUS(status), 0);
}

static void test_default_personality(void **state)
{
    assert_child_ok(run_child(child_personality, true, SBX_SECCOMP_DEFAULT));
}

static void test_strict_personality(void **state)
{
    assert_child_ok(run_child(child_personality, true, SBX_SECCOMP_STRICT));
}

static void test_foreign_arch_killed(void **state)
{
#if defined(__x86_64__)
    assert_child_sigsys(run_child(child_x32, true, SBX_SECCOMP_DEFAULT));
    assert_child_sigsys(run_child(child_x32, true, SBX_SECCOMP_STRICT));
    /* i386 through int 0x80, where the kernel has the 32-bit entry at all. */
    int plain = run_child(child_i386, false, SBX_SECCOMP_DEFAULT);
    if (WIFEXITED(plain) && WEXITSTATUS(plain) == 0) {
        assert_child_sigsys(run_child(child_i386, true, SBX_SECCOMP_DEFAULT));
        assert_child_sigsys(run_child(child_i386, true, SBX_SECCOMP_STRICT));
    }
#else
    skip();
#endif
}

/* ---- an operator's table, stacked on the default profile ---- */

static int child_table(void)
{
    if (child_common() != 0) /* the default profile's refusals all hold */
        return 1;
    CHECK(fails_with(mkdirat(AT_FDCWD, "/nonexistent-sbx-table/x", 0700), EPERM));
    CHECK(fails_with(syscall(SYS_io_uring_setup, 4, NULL), EPERM));
    return 0;
}

static void test_table_stacked(void **state)
{
    char *open_all[] = {"io_uring_setup", "io_uring_enter", "mount", "unshare", NULL};
    char *deny[] = {"mkdirat", "mkdir", NULL};
    struct sbx_sc_table_rule rules[] = {{open_all, SBX_SCT_ALLOW}, {deny, SBX_SCT_ERRNO}};
    struct sbx_seccomp_table t = {SBX_SCT_ALLOW, rules, 2};
    sbx_err err = {0};
    int fd = sbx_seccomp_table_compile_fd(&t, &err);
    assert_true(fd >= 0);
    assert_child_ok(run_child_fd(child_table, fd));
}

static void test_table_names_and_actions(void **state)
{
    sbx_err err = {0};
    enum sbx_sc_table_action a;
    assert_int_equal(sbx_seccomp_action_parse("SCMP_ACT_KILL_PROCESS", &a, &err), 0);
    assert_int_equal(a, SBX_SCT_KILL_PROCESS);
    assert_int_equal(sbx_seccomp_action_parse("errno", &a, &err), 0);
    assert_int_equal(a, SBX_SCT_ERRNO);
    assert_int_equal(sbx_seccomp_action_parse("SCMP_ACT_NOPE", &a, &err), -1);
    assert_non_null(strstr(err.msg, "'SCMP_ACT_NOPE' is not a seccomp action"));
    assert_int_equal(sbx_seccomp_syscall_check("openat", &err), 0);
    assert_int_equal(sbx_seccomp_syscall_check("no_such_call", &err), -1);
    assert_non_null(strstr(err.msg, "unknown syscall 'no_such_call'"));
}

static void test_exec_true(void **state)
{
    assert_child_ok(run_child(child_exec_true, true, SBX_SECCOMP_DEFAULT));
    assert_child_ok(run_child(child_exec_true, true, SBX_SECCOMP_STRICT));
}

static void test_strict_shell(void **state)
{
    assert_child_ok(run_child(child_shell, true, SBX_SECCOMP_STRICT));
}

static void test_strict_python(void **state)
{
    if (access(PYTHON, X_OK) != 0)
        skip();
    assert_child_ok(run_child(child_python, true, SBX_SECCOMP_STRICT));
}

static void test_strict_node(void **state)
{
    if (access(NODE, X_OK) != 0)
        skip();
    assert_child_ok(run_child(child_node, true, SBX_SECCOMP_STRICT));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profile_parse),
        cmocka_unit_test(test_denied_covers_security_md),
        cmocka_unit_test(test_ns_flags),
        cmocka_unit_test(test_tables_resolve),
        cmocka_unit_test(test_tables_disjoint),
        cmocka_unit_test(test_bpf_len),
        cmocka_unit_test(test_compile_unknown_profile),
        cmocka_unit_test(test_compile_fd_layout),
        cmocka_unit_test(test_prebuilt_matches_compiled),
        cmocka_unit_test(test_progs_load_refuses_damage),
        cmocka_unit_test(test_default_denies),
        cmocka_unit_test(test_strict_denies),
        cmocka_unit_test(test_checks_need_filter),
        cmocka_unit_test(test_default_personality),
        cmocka_unit_test(test_strict_personality),
        cmocka_unit_test(test_foreign_arch_killed),
        cmocka_unit_test(test_table_stacked),
        cmocka_unit_test(test_table_names_and_actions),
        cmocka_unit_test(test_exec_true),
        cmocka_unit_test(test_strict_shell),
        cmocka_unit_test(test_strict_python),
        cmocka_unit_test(test_strict_node),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
