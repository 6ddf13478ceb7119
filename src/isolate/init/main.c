/* pid 1 of every sandbox: our own small static program (built against musl,
 * embedded in sandboxd and exec'd from a sealed memfd). It starts the task
 * with every privilege dropped, reaps whatever is reparented to it, forwards
 * signals from outside, and reports the task's end to its creator over the sync
 * socket (fd 3). When it exits, the kernel kills everything else in the pid
 * namespace: that is the whole-tree kill. */
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/parse.h"
#include "isolate/init/memwatch.h"
#include "isolate/sandbox.h"
#include "isolate/seccomp.h"
#include "isolate/stage.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif

#define SYNC_FD 3
#define SECCOMP_FD 4
/* A zygote reads its task's command (sbx_sandbox_send_command's message)
 * here, to EOF. */
#define ZYGOTE_FD 4

struct init_opts {
    uid_t uid;
    gid_t gid;
    struct sbx_seccomp_progs seccomp;
    bool session;  /* hold a session's namespaces: no task of our own */
    bool sub;      /* a task of a session, started inside its namespaces */
    bool pooled;   /* built ahead: the command comes on the sync socket */
    bool zygote;   /* pooled, with argv started ahead: the command goes to it */
    int zygote_fd; /* the task's fd 4 (ZYGOTE_FD) in the zygote; init's write end */
    uint64_t fsize, nofile, data, nproc, as;
    uint64_t mem_watch; /* rlimit mode: the namespace's memory limit, watched */
    bool tcp_watch;     /* ... with the TCP queues of its own network namespace */
    char **argv;
    /* attach_later (sandbox.h): where the mounts sent with the command go */
    const char *attach[SBX_MOUNTS_MAX + 1];
    size_t n_attach;
};

static void send_msg(const struct sbx_init_msg *m)
{
    while (send(SYNC_FD, m, sizeof(*m), MSG_NOSIGNAL) < 0 && errno == EINTR)
        ;
}

static __attribute__((noreturn)) void fail(int code, const sbx_err *e)
{
    struct sbx_init_msg m = {.kind = code == 125 ? SBX_MSG_SETUP_ERROR : SBX_MSG_EXEC_ERROR,
                             .errnum = e->errnum};
    snprintf(m.stage, sizeof(m.stage), "%s",
             e->stage[0] ? e->stage : sbx_stage_name(SBX_STAGE_TASK));
    snprintf(m.text, sizeof(m.text), "%s", e->msg);
    send_msg(&m);
    _exit(code);
}

static int parse_opts(int argc, char **argv, struct init_opts *o, sbx_err *err)
{
    uint64_t v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *eq = strchr(a, '=');
        if (strcmp(a, "--") == 0) {
            if (i + 1 >= argc)
                return sbx_err_at(err, SBX_STAGE_INIT, EINVAL, "no command");
            o->argv = &argv[i + 1];
            return 0;
        }
        if (strcmp(a, "--session") == 0) {
            o->session = true;
            continue;
        }
        if (strcmp(a, "--pooled") == 0) {
            o->pooled = true;
            continue;
        }
        if (strcmp(a, "--zygote") == 0) {
            o->zygote = true;
            continue;
        }
        if (strcmp(a, "--sub") == 0) {
            o->sub = true;
            continue;
        }
        if (strcmp(a, "--tcp-watch") == 0) {
            o->tcp_watch = true;
            continue;
        }
        if (strncmp(a, "--attach=", 9) == 0) {
            if (o->n_attach == SBX_ARRAY_LEN(o->attach) || a[9] != '/')
                return sbx_err_at(err, SBX_STAGE_INIT, EINVAL, "bad argument %s", a);
            o->attach[o->n_attach++] = a + 9;
            continue;
        }
        if (!eq)
            return sbx_err_at(err, SBX_STAGE_INIT, EINVAL, "bad argument %s", a);
        if (sbx_parse_uint(eq + 1, 0, UINT64_MAX, &v, err) < 0)
            return -1;
        if (strncmp(a, "--uid=", 6) == 0)
            o->uid = (uid_t)v;
        else if (strncmp(a, "--gid=", 6) == 0)
            o->gid = (gid_t)v;
        else if (strncmp(a, "--fsize=", 8) == 0)
            o->fsize = v;
        else if (strncmp(a, "--nofile=", 9) == 0)
            o->nofile = v;
        else if (strncmp(a, "--data=", 7) == 0)
            o->data = v;
        else if (strncmp(a, "--nproc=", 8) == 0)
            o->nproc = v;
        else if (strncmp(a, "--as=", 5) == 0)
            o->as = v;
        else if (strncmp(a, "--mem-watch=", 12) == 0)
            o->mem_watch = v;
        else
            return sbx_err_at(err, SBX_STAGE_INIT, EINVAL, "unknown argument %s", a);
    }
    return o->session || o->pooled ? 0 : sbx_err_at(err, SBX_STAGE_INIT, EINVAL, "no command");
}

/* A pooled sandbox waits here, built, for its one command (the message of
 * sbx_sandbox_send_command); its creator closing the socket ends it. */
static char command_msg[SBX_COMMAND_MAX + 1];

static char **unpack_strings(char **at, const char *end, uint32_t n, sbx_err *err)
{
    char **v = calloc((size_t)n + 1, sizeof(*v));
    if (!v)
        return NULL;
    for (uint32_t i = 0; i < n; i++) {
        char *nul = *at < end ? memchr(*at, '\0', (size_t)(end - *at)) : NULL;
        if (!nul) {
            sbx_err_at(err, SBX_STAGE_INIT, EINVAL, "a truncated command");
            free(v);
            return NULL;
        }
        v[i] = *at;
        *at = nul + 1;
    }
    return v;
}

/* The command's message, and the mounts sent with it moved where
 * o->attach says (the workspace first), then into the workspace that is
 * now there: every process started after this has it as its cwd. Returns
 * the message's length; 0: our creator is gone. */
static ssize_t recv_command(const struct init_opts *o, sbx_err *err)
{
    int fds[SBX_MOUNTS_MAX + 1];
    size_t nfds;
    ssize_t n = sbx_recv_with_fds(SYNC_FD, command_msg, sizeof(command_msg) - 1, fds,
                                  SBX_ARRAY_LEN(fds), &nfds, 0);
    if (n == 0 || (n < 0 && errno != EPROTO))
        return n;
    if (n < 0)
        return sbx_err_at(err, SBX_STAGE_ATTACH, EPROTO, "more than %zu mounts sent for %zu",
                          SBX_ARRAY_LEN(fds), o->n_attach);
    if (nfds != o->n_attach) {
        for (size_t i = 0; i < nfds; i++)
            close(fds[i]);
        return sbx_err_at(err, SBX_STAGE_ATTACH, EPROTO, "%zu mounts sent for %zu", nfds,
                          o->n_attach);
    }
    for (size_t i = 0; i < nfds; i++) {
        if (syscall(SYS_move_mount, fds[i], "", AT_FDCWD, o->attach[i], MOVE_MOUNT_F_EMPTY_PATH) <
            0)
            return sbx_err_at(err, SBX_STAGE_ATTACH, errno, "move_mount %s", o->attach[i]);
        close(fds[i]);
    }
    if (nfds && chdir("/workspace") < 0)
        return sbx_err_at(err, SBX_STAGE_CHDIR_WORKSPACE, errno, "/workspace");
    return n;
}

/* A zygote's command: passed on as it came, to EOF (the zygote reads it
 * whole); the zygote gone meanwhile ends the write, and its end is reported. */
static void pass_command(const struct init_opts *o, int fd)
{
    sbx_err e = {0};
    ssize_t n = recv_command(o, &e);
    if (n < 0 && e.msg[0])
        fail(125, &e);
    if (n == 0)
        _exit(0); /* discarded unused: the zygote dies with us */
    for (ssize_t done = 0; n > 0 && done < n;) {
        ssize_t w = write(fd, command_msg + done, (size_t)(n - done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += w;
    }
    close(fd);
}

static int wait_command(struct init_opts *o, sbx_err *err)
{
    ssize_t n = recv_command(o, err);
    if (n < 0 && err->msg[0])
        return -1;
    if (n == 0)
        _exit(0); /* discarded unused */
    uint32_t c[2];
    if (n < (ssize_t)sizeof(c))
        return sbx_err_at(err, SBX_STAGE_INIT, n < 0 ? errno : EINVAL, "read the command");
    memcpy(c, command_msg, sizeof(c));
    if (!c[0] && !c[1]) { /* no command: hold a live session (its mounts are in place) */
        o->session = true;
        return 0;
    }
    char *at = command_msg + sizeof(c), *end = command_msg + n;
    char **env = NULL;
    if (!c[0] || !(o->argv = unpack_strings(&at, end, c[0], err)) ||
        !(env = unpack_strings(&at, end, c[1], err)))
        return err->msg[0] ? -1
                           : sbx_err_at(err, SBX_STAGE_INIT, c[0] ? ENOMEM : EINVAL, "command");
    environ = env; /* the task's, as a cold init has it from execve */
    return 0;
}

static int set_rlimit(int res, uint64_t v, const char *name, sbx_err *err)
{
    struct rlimit rl = {.rlim_cur = v, .rlim_max = v};
    if (setrlimit(res, &rl) < 0)
        return sbx_err_at(err, SBX_STAGE_RLIMIT, errno, "%s", name);
    return 0;
}

static int drop_privileges(const struct init_opts *o, sbx_err *err)
{
    if (setgroups(0, NULL) < 0)
        return sbx_err_at(err, SBX_STAGE_CREDENTIALS, errno, "setgroups");
    for (int cap = 0; cap <= 63; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
            return sbx_err_at(err, SBX_STAGE_CAPABILITIES, errno, "drop bounding cap %d", cap);
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
        return sbx_err_at(err, SBX_STAGE_CAPABILITIES, errno, "clear ambient");
    if (setresgid(o->gid, o->gid, o->gid) < 0)
        return sbx_err_at(err, SBX_STAGE_CREDENTIALS, errno, "setresgid %u", (unsigned)o->gid);
    if (setresuid(o->uid, o->uid, o->uid) < 0)
        return sbx_err_at(err, SBX_STAGE_CREDENTIALS, errno, "setresuid %u", (unsigned)o->uid);
    /* setresuid cleared effective and permitted; inheritable goes explicitly. */
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct data[2] = {{0}};
    if (syscall(SYS_capset, &hdr, data) < 0)
        return sbx_err_at(err, SBX_STAGE_CAPABILITIES, errno, "capset");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return sbx_err_at(err, SBX_STAGE_NO_NEW_PRIVS, errno, "prctl");
    return 0;
}

/* ---- the task's steps, in the order of sandbox.h ---- */

/* One step of the task process: on failure it reports e and exits 125. */
#define STEP(call)                                                                                 \
    do {                                                                                           \
        if ((call) < 0)                                                                            \
            fail(125, &e);                                                                         \
    } while (0)

/* What init blocked or ignored is the task's again. */
static void reset_signals(void)
{
    sigset_t none;
    sigemptyset(&none);
    for (int sig = 1; sig < NSIG; sig++)
        signal(sig, SIG_DFL);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

static int new_session(sbx_err *err)
{
    if (setsid() < 0)
        return sbx_err_at(err, SBX_STAGE_SESSION, errno, "setsid");
    return 0;
}

static int set_rlimits(const struct init_opts *o, sbx_err *err)
{
    if ((o->fsize && set_rlimit(RLIMIT_FSIZE, o->fsize, "RLIMIT_FSIZE", err) < 0) ||
        (o->nofile && set_rlimit(RLIMIT_NOFILE, o->nofile, "RLIMIT_NOFILE", err) < 0) ||
        (o->data && set_rlimit(RLIMIT_DATA, o->data, "RLIMIT_DATA", err) < 0) ||
        (o->nproc && set_rlimit(RLIMIT_NPROC, o->nproc, "RLIMIT_NPROC", err) < 0) ||
        (o->as && set_rlimit(RLIMIT_AS, o->as, "RLIMIT_AS", err) < 0) ||
        set_rlimit(RLIMIT_CORE, 0, "RLIMIT_CORE", err) < 0)
        return -1;
    return 0;
}

/* In a session the task is not under a pid 1 of its own: it dies with the
 * sub-init that started it (set after the id change, which clears it). */
static int die_with_sub_init(const struct init_opts *o, sbx_err *err)
{
    if (o->sub && prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
        return sbx_err_at(err, SBX_STAGE_PDEATHSIG, errno, "prctl");
    return 0;
}

/* Nothing but stdio crosses exec; the sync socket stays for an exec error. */
static int close_fds(const struct init_opts *o, sbx_err *err)
{
    /* dup2 clears close-on-exec; the pipe may be at ZYGOTE_FD already */
    if (o->zygote && (o->zygote_fd != ZYGOTE_FD ? dup2(o->zygote_fd, ZYGOTE_FD)
                                                : fcntl(ZYGOTE_FD, F_SETFD, 0)) < 0)
        return sbx_err_at(err, SBX_STAGE_FDS, errno, "zygote fd");
    if (syscall(SYS_close_range, o->zygote ? ZYGOTE_FD + 1 : SECCOMP_FD, ~0U, 0) < 0)
        return sbx_err_at(err, SBX_STAGE_FDS, errno, "close_range");
    if (fcntl(SYNC_FD, F_SETFD, FD_CLOEXEC) < 0)
        return sbx_err_at(err, SBX_STAGE_FDS, errno, "cloexec sync socket");
    return 0;
}

/* The task process, one step a line; seccomp last before exec. */
static __attribute__((noreturn)) void run_task(const struct init_opts *o)
{
    sbx_err e = {0};
    reset_signals();
    STEP(new_session(&e));
    STEP(set_rlimits(o, &e));
    STEP(drop_privileges(o, &e));
    STEP(die_with_sub_init(o, &e));
    STEP(close_fds(o, &e));
    STEP(sbx_seccomp_progs_load(&o->seccomp, &e));
    if (o->mem_watch)
        STEP(sbx_seccomp_deny_memfd(&e));
    execvp(o->argv[0], o->argv);
    int saved = errno;
    sbx_err_at(&e, SBX_STAGE_EXEC, saved, "%s", o->argv[0]);
    fail(saved == ENOENT ? 127 : 126, &e);
}

/* The memory watch (rlimit mode, see memwatch.h): between signals, a sample
 * every SBX_MEMWATCH_MS; over the limit, every process of the namespace but
 * us is killed (and the task's end then reports it). */
struct watch {
    uint64_t limit; /* 0: no watch */
    bool tcp;
    /* A session's pid 1: watches between its tasks only (while one runs,
     * that task's sub-init watches and reports), and goes on watching after
     * a kill, as the session lives on. */
    bool session;
    uint64_t peak;
    int32_t killed;
    int64_t next_ms; /* CLOCK_MONOTONIC of the next sample */
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Samples are due by the clock, not by quiet: a stream of signals (orphans
 * ending one after another) cannot put the watch off. */
static int next_signal(const sigset_t *set, siginfo_t *si, struct watch *w)
{
    if (!w->limit)
        return sigwaitinfo(set, si);
    int64_t now = mono_ms();
    if (now >= w->next_ms && !w->killed && !(w->session && sbx_memwatch_task_running())) {
        uint64_t held = sbx_memwatch_sample(w->tcp);
        if (held > w->peak)
            w->peak = held;
        if (held > w->limit) {
            w->killed = !w->session;
            kill(-1, SIGKILL);
        }
        now = mono_ms();
        w->next_ms = now + SBX_MEMWATCH_MS;
    }
    int64_t left = w->killed ? 1000 : w->next_ms - now;
    struct timespec ts = {.tv_sec = left / 1000, .tv_nsec = (left % 1000) * 1000000L};
    return sigtimedwait(set, si, &ts);
}

/* pid 1 of a session: keeps its namespaces alive and reaps what its tasks
 * leave behind, until our creator kills us (and so everything in it). */
static __attribute__((noreturn)) void hold_session(const struct init_opts *o)
{
    sigset_t all;
    sigfillset(&all);
    send_msg(&(struct sbx_init_msg){.kind = SBX_MSG_STARTED, .pid = 0});
    struct watch w = {.limit = o->mem_watch, .tcp = o->tcp_watch, .session = true};
    for (;;) {
        siginfo_t si;
        if (next_signal(&all, &si, &w) == SIGCHLD)
            while (waitpid(-1, NULL, WNOHANG) > 0)
                ;
    }
}

int main(int argc, char **argv)
{
    struct init_opts o = {.uid = SBX_RUNNER_ID, .gid = SBX_RUNNER_ID};
    sbx_err e = {0};
    if (parse_opts(argc, argv, &o, &e) < 0)
        fail(125, &e);
    /* The seccomp programs were compiled by our creator; read them now, while
     * we may still allocate, and keep the fd from the task. */
    if (sbx_seccomp_progs_read(SECCOMP_FD, &o.seccomp, &e) < 0)
        fail(125, &e);
    close(SECCOMP_FD);
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    if (o.session)
        hold_session(&o);
    int zpipe[2] = {-1, -1};
    if (o.zygote && pipe2(zpipe, O_CLOEXEC) < 0) {
        sbx_err_at(&e, SBX_STAGE_FORK_TASK, errno, "pipe");
        fail(125, &e);
    }
    o.zygote_fd = zpipe[0];
    if (o.pooled && !o.zygote && wait_command(&o, &e) < 0)
        fail(125, &e);
    if (o.session)
        hold_session(&o);

    pid_t task = fork();
    if (task < 0) {
        sbx_err_at(&e, SBX_STAGE_FORK_TASK, errno, "fork");
        fail(125, &e);
    }
    if (task == 0)
        run_task(&o);
    if (o.zygote) {
        close(zpipe[0]);
        pass_command(&o, zpipe[1]);
    }
    send_msg(&(struct sbx_init_msg){.kind = SBX_MSG_STARTED, .pid = task});

    struct watch w = {.limit = o.mem_watch, .tcp = o.tcp_watch};
    for (;;) {
        siginfo_t si;
        int sig = next_signal(&all, &si, &w);
        if (sig < 0)
            continue;
        if (sig != SIGCHLD) {
            /* From our creator (nothing inside may signal us): pass it on. */
            kill(-task, sig);
            continue;
        }
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            if (pid != task)
                continue;
            struct rusage ru;
            getrusage(RUSAGE_CHILDREN, &ru);
            send_msg(&(struct sbx_init_msg){
                .kind = SBX_MSG_EXITED,
                .wstatus = status,
                .pid = pid,
                .utime_us = (int64_t)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec,
                .stime_us = (int64_t)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec,
                .maxrss_kb = ru.ru_maxrss,
                .mem_peak_bytes = (int64_t)w.peak,
                .mem_killed = w.killed,
            });
            /* Our exit kills every process left in the namespace. */
            _exit(0);
        }
    }
}
