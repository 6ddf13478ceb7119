#include "isolate/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/sched.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "isolate/rootfs.h"

/* The init program, linked in by init_blob.S. */
extern const unsigned char sbx_init_blob[], sbx_init_blob_end[];

int sbx_init_exe_open(sbx_err *err)
{
    cleanup_fd int fd = memfd_create("sandbox-init", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return sbx_err_stage(err, "init binary", errno, "memfd_create");
    size_t len = (size_t)(sbx_init_blob_end - sbx_init_blob);
    for (size_t done = 0; done < len;) {
        ssize_t n = write(fd, sbx_init_blob + done, len - done);
        if (n <= 0)
            return sbx_err_stage(err, "init binary", n < 0 ? errno : EIO, "write memfd");
        done += (size_t)n;
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
        return sbx_err_stage(err, "init binary", errno, "seal memfd");
    return sbx_steal_fd(&fd);
}

/* What the cloned child needs; everything is prepared by the parent so the
 * child allocates nothing. */
struct child_ctx {
    const struct sbx_spec *spec;
    int sync_fd;
    int parent_end; /* the creator's end of the sync socket: closed at once */
    int stdio[3];
    char **init_argv;
    const int *cg_join; /* v1 `tasks` fds, see sbx_cgroup_open_join() */
};

static __attribute__((noreturn)) void child_fail(int sync_fd, const sbx_err *e)
{
    struct sbx_init_msg m = {.kind = SBX_MSG_SETUP_ERROR, .errnum = e->errnum};
    snprintf(m.stage, sizeof(m.stage), "%s", e->stage[0] ? e->stage : "setup");
    snprintf(m.text, sizeof(m.text), "%s", e->msg);
    (void)!send(sync_fd, &m, sizeof(m), MSG_NOSIGNAL);
    _exit(125);
}

static int loopback_up(sbx_err *err)
{
    cleanup_fd int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return sbx_err_stage(err, "loopback", errno, "socket");
    struct ifreq ifr = {0};
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
        return sbx_err_stage(err, "loopback", errno, "SIOCGIFFLAGS lo");
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
        return sbx_err_stage(err, "loopback", errno, "SIOCSIFFLAGS lo");
    return 0;
}

/* Put the fds init inherits at 0..n-1: each is first copied above n, so no
 * dup2 can clobber a source that happens to sit at a target number. */
static int place_fds(const int *src, int n, sbx_err *err)
{
    int moved[8];
    for (int i = 0; i < n; i++)
        if ((moved[i] = fcntl(src[i], F_DUPFD_CLOEXEC, n)) < 0)
            return sbx_err_stage(err, "fds", errno, "copy fd %d", src[i]);
    for (int i = 0; i < n; i++)
        if (dup2(moved[i], i) < 0)
            return sbx_err_stage(err, "fds", errno, "dup2 %d to %d", moved[i], i);
    return 0;
}

static int recv_fds(int sock, int fds[2], sbx_err *err)
{
    char byte;
    union {
        char buf[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    ssize_t n;
    while ((n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
        ;
    if (n != 1)
        _exit(125); /* our creator is gone */
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    if (!cm || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len != CMSG_LEN(2 * sizeof(int)))
        return sbx_err_stage(err, "fds", EPROTO, "expected the init and seccomp fds");
    memcpy(fds, CMSG_DATA(cm), 2 * sizeof(int));
    return 0;
}

/* The whole in-sandbox setup, one step a line; the task's own steps (ids,
 * capabilities, rlimits, seccomp) are init's, just before its execve. */
static __attribute__((noreturn)) void child_main(const struct child_ctx *c)
{
    const struct sbx_spec *spec = c->spec;
    sbx_err e = {0};
    char go;

    /* The sandbox never outlives its creator: a signal if it dies, and EOF on
     * the sync socket, which only the creator holds the other end of. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
        child_fail(c->sync_fd, &(sbx_err){errno, "pdeathsig", "prctl"});
    close(c->parent_end);
    /* Into the sandbox's cgroup before anything is allocated on its behalf. */
    if (sbx_cgroup_join_self(c->cg_join, &e) < 0)
        child_fail(c->sync_fd, &(sbx_err){e.errnum, "cgroup", "join"});
    /* Open the workspace while our ids are still the creator's (so a root-owned
     * path is traversable) and from inside our own mount namespace (a bind
     * source must belong to it). */
    int ws = open(spec->workspace, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (ws < 0)
        child_fail(c->sync_fd, &(sbx_err){errno, "workspace", "open"});
    /* Wait until the parent has written our id maps. */
    if (read(c->sync_fd, &go, 1) != 1)
        _exit(125);
    /* Become the namespace's own root (host id base): until now our ids were
     * the creator's, unmapped here, and files could not be created. */
    if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0 || setgroups(0, NULL) < 0)
        child_fail(c->sync_fd, &(sbx_err){errno, "user namespace", "become root inside"});
    /* Changing ids cleared the parent-death signal: set it again; it then
     * survives the exec of init. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
        child_fail(c->sync_fd, &(sbx_err){errno, "pdeathsig", "prctl"});
    if (sethostname("sandbox", 7) < 0)
        child_fail(c->sync_fd, &(sbx_err){errno, "hostname", "sethostname"});
    if (!spec->host_net && loopback_up(&e) < 0)
        child_fail(c->sync_fd, &e);
    struct sbx_rootfs_opts ro = {
        .workspace_fd = ws,
        .tmp_size_bytes = spec->tmp_size_bytes,
        .host_resolv = spec->host_net,
        .host_view = spec->host_view,
        .runner_id = spec->uid,
    };
    if (sbx_rootfs_setup(&ro, &e) < 0)
        child_fail(c->sync_fd, &e);
    /* A cgroup namespace rooted at our own cgroup hides the host's hierarchy. */
    if (unshare(CLONE_NEWCGROUP) < 0)
        child_fail(c->sync_fd, &(sbx_err){errno, "cgroup namespace", "unshare"});
    /* stdio on our pipes, the sync socket as fd 3, the task's seccomp
     * programs as fd 4; nothing else crosses exec. */
    /* Our creator sends the init binary and the seccomp programs meanwhile. */
    int got[2];
    if (recv_fds(c->sync_fd, got, &e) < 0)
        child_fail(c->sync_fd, &e);
    const int inherit[] = {c->stdio[0], c->stdio[1], c->stdio[2], c->sync_fd, got[1]};
    int exe = fcntl(got[0], F_DUPFD_CLOEXEC, 5);
    if (exe < 0)
        child_fail(c->sync_fd, &(sbx_err){errno, "fds", "copy init binary fd"});
    if (place_fds(inherit, 5, &e) < 0)
        child_fail(c->sync_fd, &e);
    if (syscall(SYS_close_range, 5, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
        child_fail(3, &(sbx_err){errno, "fds", "close_range"});
    /* init exits with _exit() only, so a sanitizer build runs no leak check there. */
    syscall(SYS_execveat, exe, "", c->init_argv, spec->envp, AT_EMPTY_PATH);
    child_fail(3, &(sbx_err){errno, "exec init", "execveat"});
}

/* A task of a session: into its namespaces and cgroup, then a child of ours
 * (inside its pid namespace) execs our init as the task's sub-init; we wait
 * for it and go with it, so our creator's pidfd tells when the task is over. */
static __attribute__((noreturn)) void join_main(const struct child_ctx *c)
{
    const struct sbx_spec *spec = c->spec;
    sbx_err e = {0};
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
        child_fail(c->sync_fd, &(sbx_err){errno, "pdeathsig", "prctl"});
    close(c->parent_end);
    if (sbx_cgroup_join_self(c->cg_join, &e) < 0)
        child_fail(c->sync_fd, &(sbx_err){e.errnum, "cgroup", "join the session"});
    if (setns(spec->join_pidfd, CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC |
                                    CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_NEWPID) < 0)
        child_fail(c->sync_fd, &(sbx_err){errno, "session", "enter the session's namespaces"});
    if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0 || setgroups(0, NULL) < 0)
        child_fail(c->sync_fd, &(sbx_err){errno, "user namespace", "become root inside"});
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || chdir("/workspace") < 0)
        child_fail(c->sync_fd, &(sbx_err){errno, "session", "chdir /workspace"});
    int got[2];
    if (recv_fds(c->sync_fd, got, &e) < 0)
        child_fail(c->sync_fd, &e);
    pid_t pid = fork();
    if (pid < 0)
        child_fail(c->sync_fd, &(sbx_err){errno, "session", "fork"});
    if (pid == 0) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
            child_fail(c->sync_fd, &(sbx_err){errno, "pdeathsig", "prctl"});
        const int inherit[] = {c->stdio[0], c->stdio[1], c->stdio[2], c->sync_fd, got[1]};
        int exe = fcntl(got[0], F_DUPFD_CLOEXEC, 5);
        if (exe < 0 || place_fds(inherit, 5, &e) < 0)
            child_fail(c->sync_fd, e.msg[0] ? &e : &(sbx_err){errno, "fds", "copy"});
        if (syscall(SYS_close_range, 5, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
            child_fail(3, &(sbx_err){errno, "fds", "close_range"});
        syscall(SYS_execveat, exe, "", c->init_argv, spec->envp, AT_EMPTY_PATH);
        child_fail(3, &(sbx_err){errno, "exec init", "execveat"});
    }
    /* Nothing of ours may keep the task's pipes or socket open (the sub-init
     * dies with us when we cannot make sure). */
    if (syscall(SYS_close_range, 0, ~0U, 0) < 0)
        child_fail(c->sync_fd, &(sbx_err){errno, "fds", "close_range"});
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 125);
}

static int write_map(pid_t pid, const char *file, uint32_t base, sbx_err *err)
{
    char path[64], line[64];
    snprintf(path, sizeof(path), "/proc/%d/%s", pid, file);
    int n = snprintf(line, sizeof(line), "0 %u %u\n", base, SBX_ID_RANGE);
    cleanup_fd int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, line, (size_t)n) != n)
        return sbx_err_stage(err, "user namespace", errno, "write %s", path);
    return 0;
}

/* init's argv: our settings, then "--", then the command. envp is the task's. */
static __attribute__((format(printf, 1, 2))) char *fmt(const char *f, ...)
{
    char *s;
    va_list ap;
    va_start(ap, f);
    int n = vasprintf(&s, f, ap);
    va_end(ap);
    return n < 0 ? NULL : s;
}

static char **build_init_argv(const struct sbx_spec *spec, const struct sbx_cgroup *cg)
{
    size_t argc = 0;
    while (spec->argv && spec->argv[argc])
        argc++;
    char **v = calloc(argc + 14, sizeof(*v));
    if (!v)
        return NULL;
    size_t i = 0;
    bool rl = cg->mode == SBX_CG_RLIMIT;
    v[i++] = strdup(SBX_INIT_ARGV0);
    v[i++] = fmt("--uid=%u", (unsigned)spec->uid);
    v[i++] = fmt("--gid=%u", (unsigned)spec->gid);
    v[i++] = fmt("--fsize=%llu", (unsigned long long)spec->file_size_bytes);
    v[i++] = fmt("--nofile=%llu", (unsigned long long)spec->nofile);
    /* Without cgroups, memory and processes fall back to rlimits. */
    v[i++] = fmt("--data=%llu", rl ? (unsigned long long)spec->cg_limits.memory_bytes : 0ULL);
    v[i++] = fmt("--nproc=%llu", rl ? (unsigned long long)spec->cg_limits.pids : 0ULL);
    if (spec->session) {
        v[i++] = strdup("--session");
    } else {
        if (spec->join_pidfd >= 0)
            v[i++] = strdup("--sub");
        v[i++] = strdup("--");
        for (size_t a = 0; a < argc; a++)
            v[i++] = strdup(spec->argv[a]);
    }
    for (size_t a = 0; a < i; a++)
        if (!v[a]) { /* an allocation failed: free what was made */
            for (size_t b = 0; b < i; b++)
                free(v[b]);
            free(v);
            return NULL;
        }
    return v;
}

static void free_argv(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

static void close_pair(int p[2])
{
    for (int i = 0; i < 2; i++)
        if (p[i] >= 0)
            close(p[i]);
}

int sbx_sandbox_spawn(const struct sbx_spec *spec, struct sbx_sandbox *sb, sbx_err *err)
{
    *sb = (struct sbx_sandbox){.init_pid = -1,
                               .pidfd = -1,
                               .sync_fd = -1,
                               .stdin_fd = -1,
                               .stdout_fd = -1,
                               .stderr_fd = -1};
    int sv[2] = {-1, -1}, in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1};
    cleanup_fd int ws = -1;
    cleanup_fd int cgfd = -1;
    int cg_join[SBX_CGC_COUNT];
    for (int i = 0; i < SBX_CGC_COUNT; i++)
        cg_join[i] = -1;
    char **init_argv = NULL;
    uint32_t host_uid = spec->host_id_base + spec->uid, host_gid = spec->host_id_base + spec->gid;

    /* Checked and chowned here, opened again by the child for its bind. */
    ws = open(spec->workspace, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (ws < 0) {
        sbx_err_stage(err, "workspace", errno, "open %s", spec->workspace);
        goto fail;
    }
    struct stat st;
    /* The workspace root belongs to the sandbox's runner on the host. */
    if (fstat(ws, &st) < 0 || ((st.st_uid != host_uid || st.st_gid != host_gid) &&
                               fchownat(ws, "", host_uid, host_gid, AT_EMPTY_PATH) < 0)) {
        sbx_err_stage(err, "workspace", errno, "chown %s to %u", spec->workspace, host_uid);
        goto fail;
    }
    /* init is one more process in the cgroup than the task's own budget. */
    struct sbx_cg_limits lim = spec->cg_limits;
    if (lim.pids)
        lim.pids += 1;
    if (spec->join_pidfd >= 0) {
        /* A task of a session lives in the session's cgroup, which is not ours
         * to freeze or remove; its namespaces and root are the session's. */
        sb->joined = true;
        sb->cg.mode = spec->join_cg->mode;
    } else {
        if (sbx_cgroup_create(spec->cg_host, spec->name, &lim, &sb->cg, err) < 0)
            goto fail;
        sb->cg_made = true;
    }
    const struct sbx_cgroup *into = sb->joined ? spec->join_cg : &sb->cg;
    if (into->mode == SBX_CG_V2 && (cgfd = sbx_cgroup_open_dir(into, err)) < 0)
        goto fail;
    if (sbx_cgroup_open_join(into, cg_join, err) < 0)
        goto fail;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0 || pipe2(in, O_CLOEXEC) < 0 ||
        pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0) {
        sbx_err_stage(err, "spawn", errno, "socketpair/pipe");
        goto fail;
    }
    init_argv = build_init_argv(spec, &sb->cg);
    if (!init_argv) {
        sbx_err_stage(err, "spawn", ENOMEM, "init argv");
        goto fail;
    }

    struct clone_args ca = {
        .flags = sb->joined ? CLONE_PIDFD
                            : CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC |
                                  CLONE_NEWUTS | CLONE_PIDFD | (spec->host_net ? 0 : CLONE_NEWNET),
        .pidfd = (uint64_t)(uintptr_t)&sb->pidfd,
        .exit_signal = SIGCHLD,
    };
    if (cgfd >= 0) {
        ca.flags |= CLONE_INTO_CGROUP;
        ca.cgroup = (uint64_t)cgfd;
    }
    struct child_ctx c = {.spec = spec,
                          .sync_fd = sv[1],
                          .parent_end = sv[0],
                          .stdio = {in[0], out[1], errp[1]},
                          .init_argv = init_argv,
                          .cg_join = cg_join};
    pid_t pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
    if (pid < 0) {
        sbx_err_stage(err, "clone", errno, "clone3 with new namespaces");
        goto fail;
    }
    if (pid == 0) {
        if (sb->joined)
            join_main(&c);
        child_main(&c);
    }
    sb->init_pid = pid;
    sbx_cgroup_close_join(cg_join);
    free_argv(sbx_steal_pointer(&init_argv));
    close(sv[1]), close(in[0]), close(out[1]), close(errp[1]);
    sv[1] = in[0] = out[1] = errp[1] = -1;
    sb->sync_fd = sv[0], sb->stdin_fd = in[1], sb->stdout_fd = out[0], sb->stderr_fd = errp[0];
    if (sb->joined)
        return 0; /* the session's id maps are set already */
    if (write_map(pid, "uid_map", spec->host_id_base, err) < 0 ||
        write_map(pid, "gid_map", spec->host_id_base, err) < 0)
        goto fail_child;
    if (write(sb->sync_fd, "u", 1) != 1) {
        sbx_err_stage(err, "spawn", errno, "release child");
        goto fail_child;
    }
    return 0;

fail_child:
    sbx_sandbox_kill(sb);
    sbx_sandbox_release(sb, NULL);
    return -1;
fail:
    sbx_cgroup_close_join(cg_join);
    free_argv(init_argv);
    close_pair(sv), close_pair(in), close_pair(out), close_pair(errp);
    if (sb->cg_made)
        sbx_cgroup_destroy(&sb->cg, NULL);
    sb->cg_made = false;
    return -1;
}

int sbx_sandbox_send_fds(struct sbx_sandbox *sb, const struct sbx_sandbox_fds *fds, sbx_err *err)
{
    int pass[2] = {fds->init_exe, fds->seccomp};
    union {
        char buf[CMSG_SPACE(sizeof(pass))];
        struct cmsghdr align;
    } u = {0};
    struct iovec iov = {.iov_base = "f", .iov_len = 1};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(pass));
    memcpy(CMSG_DATA(cm), pass, sizeof(pass));
    if (sendmsg(sb->sync_fd, &mh, MSG_NOSIGNAL) != 1)
        return sbx_err_stage(err, "spawn", errno, "send init and seccomp fds");
    return 0;
}

void sbx_sandbox_kill(struct sbx_sandbox *sb)
{
    if (sb->pidfd < 0)
        return;
    if (sb->joined) {
        /* The sub-init and its task follow by their parent-death signals;
         * what the task left in the background stays in the session. */
        syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0);
        return;
    }
    /* Frozen first, so nothing forks or double-forks while it dies. */
    sbx_cgroup_freeze(&sb->cg, true, NULL);
    syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0);
    sbx_cgroup_freeze(&sb->cg, false, NULL);
}

int sbx_sandbox_release(struct sbx_sandbox *sb, sbx_err *err)
{
    int rc = 0;
    if (sb->pidfd >= 0) {
        siginfo_t si;
        /* init's exit tears down its pid namespace; its waiting ends after all. */
        while (waitid(P_PIDFD, (id_t)sb->pidfd, &si, WEXITED) < 0 && errno == EINTR)
            ;
        close(sb->pidfd);
        sb->pidfd = -1;
    }
    if (sb->cg_made) {
        sbx_cgroup_kill_all(&sb->cg, NULL);
        if (sbx_cgroup_destroy(&sb->cg, err) < 0)
            rc = -1;
        sb->cg_made = false;
    }
    int *fds[] = {&sb->sync_fd, &sb->stdin_fd, &sb->stdout_fd, &sb->stderr_fd};
    for (size_t i = 0; i < SBX_ARRAY_LEN(fds); i++)
        if (*fds[i] >= 0) {
            close(*fds[i]);
            *fds[i] = -1;
        }
    return rc;
}
