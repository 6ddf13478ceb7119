#include "isolate/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/openat2.h>
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

#include "isolate/memfd.h"
#include "isolate/rootfs.h"
#include "isolate/stage.h"

/* The init program, linked in by init_blob.S. */
extern const unsigned char sbx_init_blob[], sbx_init_blob_end[];

int sbx_init_exe_open(sbx_err *err)
{
    return sbx_memfd_sealed("sandbox-init", sbx_init_blob,
                            (size_t)(sbx_init_blob_end - sbx_init_blob), SBX_STAGE_INIT_BINARY,
                            err);
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
    uint64_t tmp_size;  /* each tmpfs of the sandbox (see sbx_sandbox_tmp_size) */
};

static __attribute__((noreturn)) void child_fail(int sync_fd, const sbx_err *e)
{
    struct sbx_init_msg m = {.kind = SBX_MSG_SETUP_ERROR, .errnum = e->errnum};
    snprintf(m.stage, sizeof(m.stage), "%s",
             e->stage[0] ? e->stage : sbx_stage_name(SBX_STAGE_SETUP));
    snprintf(m.text, sizeof(m.text), "%s", e->msg);
    (void)!send(sync_fd, &m, sizeof(m), MSG_NOSIGNAL);
    _exit(125);
}

/* One setup step of the child: on failure it reports e (its stage, errno and
 * message) to the creator and exits 125. Uses the caller's c and e. */
#define STEP(call)                                                                                 \
    do {                                                                                           \
        if ((call) < 0)                                                                            \
            child_fail(c->sync_fd, &e);                                                            \
    } while (0)

/* ---- the child's steps, in the order of sandbox.h ---- */

/* A syscall's result as a step's: -1 with errno and the stage when rc < 0. */
static int checked(long rc, enum sbx_stage stage, const char *what, sbx_err *err)
{
    return rc < 0 ? sbx_err_at(err, stage, errno, "%s", what) : 0;
}

/* The sandbox never outlives its creator: a signal if it dies (set again after
 * every id change, which clears it; it survives the exec of init). */
static int set_pdeathsig(sbx_err *err)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
        return sbx_err_at(err, SBX_STAGE_PDEATHSIG, errno, "prctl");
    return 0;
}

/* ... and EOF on the sync socket, which only the creator holds the other end of. */
static int tie_to_creator(const struct child_ctx *c, sbx_err *err)
{
    if (set_pdeathsig(err) < 0)
        return -1;
    close(c->parent_end);
    return 0;
}

/* Into the sandbox's cgroup before anything is allocated on its behalf. */
static int join_cgroup(const struct child_ctx *c, const char *what, sbx_err *err)
{
    sbx_err e = {0};
    if (sbx_cgroup_join_self(c->cg_join, &e) < 0)
        return sbx_err_at(err, SBX_STAGE_CGROUP, e.errnum, "%s", what);
    return 0;
}

/* Open the workspace while our ids are still the creator's (so a root-owned
 * path is traversable) and from inside our own mount namespace (a bind
 * source must belong to it). */
static int open_workspace(const struct sbx_spec *spec, int *ws, sbx_err *err)
{
    if (spec->attach_later) /* an empty mount point, attached at its command */
        return 0;
    if ((*ws = open(spec->workspace, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
        return sbx_err_at(err, SBX_STAGE_WORKSPACE, errno, "open");
    return 0;
}

/* The sources of the extra read-only binds, for the same reasons. */
static int open_mounts(const struct sbx_spec *spec, int *fds, sbx_err *err)
{
    if (spec->n_mounts > SBX_MOUNTS_MAX)
        return sbx_err_at(err, SBX_STAGE_BIND_MOUNT, E2BIG, "%zu mounts", spec->n_mounts);
    for (size_t i = 0; i < spec->n_mounts; i++) {
        const struct sbx_mount *m = &spec->mounts[i];
        fds[i] = -1;
        if (spec->attach_later)
            continue;
        if (!m->root) {
            fds[i] = open(m->host, O_PATH | O_CLOEXEC);
        } else {
            /* beneath its root, no symlink anywhere on the way, no magic link */
            struct open_how how = {.flags = O_PATH | O_CLOEXEC,
                                   .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
                                              RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
            int root = open(m->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
            fds[i] = root < 0 ? -1 : (int)syscall(SYS_openat2, root, m->host, &how, sizeof(how));
            if (root >= 0) {
                int saved = errno;
                close(root);
                errno = saved;
            }
        }
        if (fds[i] < 0)
            return sbx_err_at(err, SBX_STAGE_BIND_MOUNT, errno, "open %s", m->inside);
    }
    return 0;
}

/* The environment's root directory, opened like the workspace. */
static int open_sysroot(const struct sbx_spec *spec, int *fd, sbx_err *err)
{
    if (spec->rootfs && (*fd = open(spec->rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
        return sbx_err_at(err, SBX_STAGE_BIND_MOUNT, errno, "open the environment's root");
    return 0;
}

/* Until the parent has written our id maps, nothing can be created. */
static void wait_for_id_maps(const struct child_ctx *c)
{
    char go;
    if (read(c->sync_fd, &go, 1) != 1)
        _exit(125); /* our creator is gone */
}

/* Become the namespace's own root (host id base): until now our ids were the
 * creator's, unmapped here. */
static int become_root(sbx_err *err)
{
    if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0 || setgroups(0, NULL) < 0)
        return sbx_err_at(err, SBX_STAGE_USER_NS, errno, "become root inside");
    return 0;
}

static int set_hostname(sbx_err *err)
{
    if (sethostname("sandbox", 7) < 0)
        return sbx_err_at(err, SBX_STAGE_HOSTNAME, errno, "sethostname");
    return 0;
}

/* Limits of the sandbox's own user namespace (/proc/sys/user, read through
 * the writer's namespace). The kernel charges inotify instances and watches
 * and fanotify groups and marks at every level up to the host, where all
 * sandboxes count against root's (128 inotify instances by default): a
 * sandbox bounded below that cannot take them all, and the host can still
 * inotify_init while one holds its maximum. New namespaces are never needed
 * inside (seccomp refuses them too); the cgroup namespace is made in a later
 * step, so its count stays. A kernel without one of the files lacks that
 * limit's object too: skipped. Written after the root is built, through the
 * sandbox's own /proc: the limits are the writer's user namespace's whichever
 * proc is used, and in the host's /proc every sandbox's namespace leaves
 * dentries of these eleven names under the one /proc/sys/user, which each
 * lookup compares one by one (proc_sys_compare): with a few hundred
 * sandboxes on the host, a large part of a start's CPU (docs/performance.md). */
static int set_user_limits(sbx_err *err)
{
    static const struct {
        const char *name;
        const char *value;
    } limits[] = {
        {"max_inotify_instances", "16"}, {"max_inotify_watches", "8192"},
        {"max_fanotify_groups", "16"},   {"max_fanotify_marks", "8192"},
        {"max_user_namespaces", "0"},    {"max_mnt_namespaces", "0"},
        {"max_net_namespaces", "0"},     {"max_pid_namespaces", "0"},
        {"max_ipc_namespaces", "0"},     {"max_uts_namespaces", "0"},
        {"max_time_namespaces", "0"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(limits); i++) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/sys/user/%s", limits[i].name);
        cleanup_fd int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT)
            continue;
        size_t len = strlen(limits[i].value);
        if (fd < 0 || write(fd, limits[i].value, len) != (ssize_t)len)
            return sbx_err_at(err, SBX_STAGE_USER_LIMITS, errno, "%s", path);
    }
    return 0;
}

static int loopback_up(sbx_err *err)
{
    cleanup_fd int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return sbx_err_at(err, SBX_STAGE_LOOPBACK, errno, "socket");
    struct ifreq ifr = {0};
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
        return sbx_err_at(err, SBX_STAGE_LOOPBACK, errno, "SIOCGIFFLAGS lo");
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
        return sbx_err_at(err, SBX_STAGE_LOOPBACK, errno, "SIOCSIFFLAGS lo");
    return 0;
}

/* spec->net_rules in a grandchild: our fd table is a copy of the creator's
 * (a daemon's may hold thousands), the grandchild's holds only the pipe its
 * error comes back on (as fd 0). It lives in our namespaces, as root inside.
 * A creator whose fds are few (spec->net_rules_inline: the spawner) saves
 * that fork: the rules run here. */
static int net_rules(const struct sbx_spec *spec, sbx_err *err)
{
    if (spec->net_rules_inline)
        return spec->net_rules(spec->net_rules_arg, err);
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return sbx_err_at(err, SBX_STAGE_EGRESS, errno, "pipe");
    pid_t pid = fork();
    if (pid < 0) {
        int saved = errno;
        close(p[0]);
        close(p[1]);
        return sbx_err_at(err, SBX_STAGE_EGRESS, saved, "fork");
    }
    if (pid == 0) {
        sbx_err e = {0};
        if (dup2(p[1], 0) < 0 || syscall(SYS_close_range, 1, ~0U, 0) < 0)
            _exit(125);
        if (spec->net_rules(spec->net_rules_arg, &e) < 0) {
            (void)!write(0, &e, sizeof(e));
            _exit(1);
        }
        _exit(0);
    }
    close(p[1]);
    sbx_err got;
    ssize_t n;
    while ((n = read(p[0], &got, sizeof(got))) < 0 && errno == EINTR)
        ;
    close(p[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (n == (ssize_t)sizeof(got)) {
        got.stage[sizeof(got.stage) - 1] = got.msg[sizeof(got.msg) - 1] = '\0';
        *err = got;
        return -1;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return sbx_err_at(err, SBX_STAGE_EGRESS, ECHILD, "rules process: status %#x", status);
    return 0;
}

static int build_root(const struct child_ctx *c, int ws, int sysroot, const int *mount_fds,
                      sbx_err *err)
{
    const struct sbx_spec *spec = c->spec;
    const char *targets[SBX_MOUNTS_MAX];
    bool writable[SBX_MOUNTS_MAX], file[SBX_MOUNTS_MAX];
    for (size_t i = 0; i < spec->n_mounts && i < SBX_MOUNTS_MAX; i++) {
        targets[i] = spec->mounts[i].inside;
        writable[i] = spec->mounts[i].writable;
        file[i] = spec->mounts[i].file;
    }
    struct sbx_rootfs_opts ro = {
        .sysroot_fd = sysroot,
        .writable_root = spec->writable_root,
        .mount_fds = mount_fds,
        .mount_targets = targets,
        .mount_writable = writable,
        .mount_file = file,
        .n_mounts = spec->n_mounts,
        .workspace_fd = ws,
        .tmp_size_bytes = c->tmp_size,
        .host_resolv = spec->host_net,
        .host_view = spec->host_view,
        .host_view_hidden = spec->host_view_hidden,
        .runner_id = spec->uid,
    };
    return sbx_rootfs_setup(&ro, err);
}

/* A cgroup namespace rooted at our own cgroup hides the host's hierarchy. */
static int unshare_cgroup_ns(sbx_err *err)
{
    if (unshare(CLONE_NEWCGROUP) < 0)
        return sbx_err_at(err, SBX_STAGE_CGROUP_NS, errno, "unshare");
    return 0;
}

/* Our creator sends the init binary and the seccomp programs meanwhile. */
static int recv_fds(int sock, int fds[2], sbx_err *err)
{
    char byte;
    size_t n_got;
    ssize_t n = sbx_recv_with_fds(sock, &byte, 1, fds, 2, &n_got, 0);
    if (n == 1 && n_got == 2)
        return 0;
    if (n == 0 || (n < 0 && errno != EPROTO))
        _exit(125); /* our creator is gone */
    for (size_t i = 0; i < n_got; i++)
        close(fds[i]);
    return sbx_err_at(err, SBX_STAGE_FDS, EPROTO, "expected the init and seccomp fds");
}

/* Put the fds init inherits at 0..n-1: each is first copied above n, so no
 * dup2 can clobber a source that happens to sit at a target number. */
static int place_fds(const int *src, int n, sbx_err *err)
{
    int moved[8];
    for (int i = 0; i < n; i++)
        if ((moved[i] = fcntl(src[i], F_DUPFD_CLOEXEC, n)) < 0)
            return sbx_err_at(err, SBX_STAGE_FDS, errno, "copy fd %d", src[i]);
    for (int i = 0; i < n; i++)
        if (dup2(moved[i], i) < 0)
            return sbx_err_at(err, SBX_STAGE_FDS, errno, "dup2 %d to %d", moved[i], i);
    return 0;
}

/* The last step of both kinds of child: stdio on our pipes, the sync socket
 * as fd 3, the task's seccomp programs as fd 4; nothing else crosses the exec
 * of init (which exits with _exit() only, so a sanitizer build runs no leak
 * check there). */
static __attribute__((noreturn)) void exec_init(const struct child_ctx *c, const int got[2])
{
    sbx_err e = {0};
    const int inherit[] = {c->stdio[0], c->stdio[1], c->stdio[2], c->sync_fd, got[1]};
    int exe = fcntl(got[0], F_DUPFD_CLOEXEC, 5);
    STEP(checked(exe, SBX_STAGE_FDS, "copy init binary fd", &e));
    STEP(place_fds(inherit, 5, &e));
    /* From here on the sync socket is fd 3. */
    if (syscall(SYS_close_range, 5, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
        sbx_err_at(&e, SBX_STAGE_FDS, errno, "close_range");
    else if (syscall(SYS_execveat, exe, "", c->init_argv, c->spec->envp, AT_EMPTY_PATH) < 0)
        sbx_err_at(&e, SBX_STAGE_EXEC_INIT, errno, "execveat");
    child_fail(3, &e);
}

/* A new sandbox: the in-sandbox setup, one step a line; the task's own steps
 * (ids, capabilities, rlimits, seccomp) are init's, just before its execve. */
static __attribute__((noreturn)) void child_main(const struct child_ctx *c)
{
    const struct sbx_spec *spec = c->spec;
    sbx_err e = {0};
    int ws = -1, sysroot = -1, got[2], mount_fds[SBX_MOUNTS_MAX];

    STEP(tie_to_creator(c, &e));
    STEP(join_cgroup(c, "join", &e));
    STEP(open_workspace(spec, &ws, &e));
    STEP(open_sysroot(spec, &sysroot, &e));
    STEP(open_mounts(spec, mount_fds, &e));
    wait_for_id_maps(c);
    STEP(become_root(&e));
    STEP(set_pdeathsig(&e));
    STEP(set_hostname(&e));
    if (!spec->host_net)
        STEP(loopback_up(&e));
    if (!spec->host_net && spec->net_rules)
        STEP(net_rules(spec, &e));
    STEP(build_root(c, ws, sysroot, mount_fds, &e));
    STEP(set_user_limits(&e)); /* through our own /proc: see set_user_limits */
    STEP(unshare_cgroup_ns(&e));
    STEP(recv_fds(c->sync_fd, got, &e));
    exec_init(c, got);
}

static int enter_session(const struct sbx_spec *spec, sbx_err *err)
{
    if (setns(spec->join_pidfd, CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC |
                                    CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_NEWPID) < 0)
        return sbx_err_at(err, SBX_STAGE_SESSION, errno, "enter the session's namespaces");
    return 0;
}

static int chdir_workspace(sbx_err *err)
{
    if (chdir("/workspace") < 0)
        return sbx_err_at(err, SBX_STAGE_SESSION, errno, "chdir /workspace");
    return 0;
}

/* A task of a session: into its namespaces and cgroup, then a child of ours
 * (inside its pid namespace) execs our init as the task's sub-init; we wait
 * for it and go with it, so our creator's pidfd tells when the task is over. */
static __attribute__((noreturn)) void join_main(const struct child_ctx *c)
{
    const struct sbx_spec *spec = c->spec;
    sbx_err e = {0};
    int got[2];

    STEP(tie_to_creator(c, &e));
    STEP(join_cgroup(c, "join the session", &e));
    STEP(enter_session(spec, &e));
    STEP(become_root(&e));
    STEP(set_pdeathsig(&e));
    STEP(chdir_workspace(&e));
    STEP(recv_fds(c->sync_fd, got, &e));
    pid_t pid = fork();
    STEP(checked(pid, SBX_STAGE_SESSION, "fork", &e));
    if (pid == 0) {
        STEP(set_pdeathsig(&e));
        exec_init(c, got);
    }
    /* Nothing of ours may keep the task's pipes or socket open (the sub-init
     * dies with us when we cannot make sure). */
    STEP(checked(syscall(SYS_close_range, 0, ~0U, 0), SBX_STAGE_FDS, "close_range", &e));
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 125);
}

int sbx_id_map_write(pid_t pid, const char *file, uint32_t inside, uint32_t outside,
                     enum sbx_stage stage, sbx_err *err)
{
    char path[64], line[64];
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
    int n = snprintf(line, sizeof(line), "%u %u %u\n", inside, outside, SBX_ID_RANGE);
    cleanup_fd int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, line, (size_t)n) != n)
        return sbx_err_at(err, stage, errno, "write %s", path);
    return 0;
}

uint64_t sbx_sandbox_tmp_size(const struct sbx_spec *spec, enum sbx_cg_mode mode)
{
    uint64_t mem = spec->cg_limits.memory_bytes;
    if (mode == SBX_CG_RLIMIT && mem && mem < spec->tmp_size_bytes)
        return mem;
    return spec->tmp_size_bytes;
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
    char **v = calloc(argc + 18 + SBX_MOUNTS_MAX, sizeof(*v));
    if (!v)
        return NULL;
    size_t i = 0;
    bool rl = cg->mode == SBX_CG_RLIMIT;
    v[i++] = strdup(SBX_INIT_ARGV0);
    v[i++] = fmt("--uid=%u", (unsigned)spec->uid);
    v[i++] = fmt("--gid=%u", (unsigned)spec->gid);
    v[i++] = fmt("--fsize=%llu", (unsigned long long)spec->file_size_bytes);
    v[i++] = fmt("--nofile=%llu", (unsigned long long)spec->nofile);
    /* Without cgroups, memory and processes fall back to rlimits, and init
     * watches the namespace's memory (isolate/init/memwatch.h). */
    unsigned long long mem = rl ? (unsigned long long)spec->cg_limits.memory_bytes : 0ULL;
    v[i++] = fmt("--data=%llu", mem);
    v[i++] = fmt("--nproc=%llu", rl ? (unsigned long long)spec->cg_limits.pids : 0ULL);
    v[i++] = fmt("--as=%llu", mem ? mem + SBX_RLIMIT_AS_HEADROOM : 0ULL);
    v[i++] = fmt("--mem-watch=%llu", mem);
    if (mem && !spec->host_net)
        v[i++] = strdup("--tcp-watch");
    if (spec->attach_later) { /* where the mounts sent with its command go */
        v[i++] = strdup("--attach=/workspace");
        for (size_t m = 0; m < spec->n_mounts && m < SBX_MOUNTS_MAX; m++)
            v[i++] = fmt("--attach=%s", spec->mounts[m].inside);
    }
    if (spec->session) {
        v[i++] = strdup("--session");
    } else if (spec->pooled && !argc) {
        v[i++] = strdup("--pooled");
    } else {
        if (spec->pooled) /* a zygote: argv is started now, its command comes later */
            v[i++] = strdup("--pooled"), v[i++] = strdup("--zygote");
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

/* What the parent's steps build before the clone; undone on failure. */
struct spawn {
    const struct sbx_spec *spec;
    struct sbx_sandbox *sb;
    int sv[2], in[2], out[2], errp[2];
    int cgfd;                   /* v2: the cgroup to clone into */
    int cg_join[SBX_CGC_COUNT]; /* v1: its `tasks` files */
    char **init_argv;
};

/* ---- the parent's steps, in the order of sandbox.h ---- */

int sbx_workspace_own(const char *workspace, uint32_t uid, uint32_t gid, sbx_err *err)
{
    cleanup_fd int ws = open(workspace, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (ws < 0)
        return sbx_err_at(err, SBX_STAGE_WORKSPACE, errno, "open %s", workspace);
    struct stat st;
    if (fstat(ws, &st) < 0 ||
        ((st.st_uid != uid || st.st_gid != gid) && fchownat(ws, "", uid, gid, AT_EMPTY_PATH) < 0))
        return sbx_err_at(err, SBX_STAGE_WORKSPACE, errno, "chown %s to %u", workspace, uid);
    return 0;
}

/* Checked and chowned here, opened again by the child for its bind: the
 * workspace root belongs to the sandbox's runner on the host. */
static int own_workspace(struct spawn *s, sbx_err *err)
{
    const struct sbx_spec *spec = s->spec;
    if (spec->attach_later) /* chowned when attached (sbx_attach_open) */
        return 0;
    return sbx_workspace_own(spec->workspace, spec->host_id_base + spec->uid,
                             spec->host_id_base + spec->gid, err);
}

static int make_cgroup(struct spawn *s, sbx_err *err)
{
    const struct sbx_spec *spec = s->spec;
    struct sbx_sandbox *sb = s->sb;
    if (spec->join_pidfd >= 0) {
        /* A task of a session lives in the session's cgroup, which is not ours
         * to freeze or remove; its namespaces and root are the session's. */
        sb->joined = true;
        sb->cg.mode = spec->join_cg->mode;
        return 0;
    }
    /* init is one more process in the cgroup than the task's own budget. */
    struct sbx_cg_limits lim = spec->cg_limits;
    if (lim.pids)
        lim.pids += 1;
    if (sbx_cgroup_create(spec->cg_host, spec->name, &lim, &sb->cg, err) < 0)
        return -1;
    sb->cg_made = true;
    sb->cg.subs = spec->session;
    return 0;
}

int sbx_sandbox_relimit(struct sbx_sandbox *sb, const struct sbx_cg_limits *was,
                        const struct sbx_cg_limits *lim, sbx_err *err)
{
    if (sb->joined || !sb->cg_made)
        return sbx_err_set(err, EINVAL, "the sandbox's cgroup is not its own");
    /* as at its creation: init is one more process than the task's budget */
    struct sbx_cg_limits w = *was, l = *lim;
    w.pids += w.pids ? 1 : 0;
    l.pids += l.pids ? 1 : 0;
    return sbx_cgroup_relimit(&sb->cg, &w, &l, err);
}

static int open_cgroup_fds(struct spawn *s, sbx_err *err)
{
    const struct sbx_cgroup *into = s->sb->joined ? s->spec->join_cg : &s->sb->cg;
    if (into->mode == SBX_CG_V2 && (s->cgfd = sbx_cgroup_open_dir(into, err)) < 0)
        return -1;
    return sbx_cgroup_open_join(into, s->cg_join, err);
}

static int make_channels(struct spawn *s, sbx_err *err)
{
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, s->sv) < 0 ||
        pipe2(s->in, O_CLOEXEC) < 0 || pipe2(s->out, O_CLOEXEC) < 0 ||
        pipe2(s->errp, O_CLOEXEC) < 0)
        return sbx_err_at(err, SBX_STAGE_SPAWN, errno, "socketpair/pipe");
    return 0;
}

static int make_init_argv(struct spawn *s, sbx_err *err)
{
    if (!(s->init_argv = build_init_argv(s->spec, &s->sb->cg)))
        return sbx_err_at(err, SBX_STAGE_SPAWN, ENOMEM, "init argv");
    return 0;
}

/* The child runs child_main (or join_main) and never returns here. */
static int clone_child(struct spawn *s, sbx_err *err)
{
    const struct sbx_spec *spec = s->spec;
    struct sbx_sandbox *sb = s->sb;
    struct clone_args ca = {
        .flags = sb->joined ? CLONE_PIDFD
                            : CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC |
                                  CLONE_NEWUTS | CLONE_PIDFD | (spec->host_net ? 0 : CLONE_NEWNET),
        .pidfd = (uint64_t)(uintptr_t)&sb->pidfd,
        .exit_signal = SIGCHLD,
    };
    if (s->cgfd >= 0) {
        ca.flags |= CLONE_INTO_CGROUP;
        ca.cgroup = (uint64_t)s->cgfd;
    }
    struct child_ctx c = {.spec = spec,
                          .sync_fd = s->sv[1],
                          .parent_end = s->sv[0],
                          .stdio = {s->in[0], s->out[1], s->errp[1]},
                          .init_argv = s->init_argv,
                          .cg_join = s->cg_join,
                          .tmp_size = sbx_sandbox_tmp_size(spec, sb->cg.mode)};
    pid_t pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
    if (pid < 0)
        return sbx_err_at(err, SBX_STAGE_CLONE, errno, "clone3 with new namespaces");
    if (pid == 0) {
        if (sb->joined)
            join_main(&c);
        child_main(&c);
    }
    sb->init_pid = pid;
    return 0;
}

/* What the child has now is not ours to keep; the rest is the sandbox's. */
static void hand_over(struct spawn *s)
{
    struct sbx_sandbox *sb = s->sb;
    sbx_cgroup_close_join(s->cg_join);
    free_argv(sbx_steal_pointer(&s->init_argv));
    close(s->sv[1]), close(s->in[0]), close(s->out[1]), close(s->errp[1]);
    sb->sync_fd = s->sv[0], sb->stdin_fd = s->in[1], sb->stdout_fd = s->out[0];
    sb->stderr_fd = s->errp[0];
    if (s->cgfd >= 0)
        close(s->cgfd);
}

/* A fresh user namespace's id maps, then the child may go on. A session's
 * task finds them set already. */
static int map_ids(struct sbx_sandbox *sb, const struct sbx_spec *spec, sbx_err *err)
{
    if (sb->joined)
        return 0;
    /* The child still has our ids and is still dumpable (it waits for the
     * release below): its namespace can be opened now without CAP_SYS_PTRACE. */
    char ns[64];
    snprintf(ns, sizeof(ns), "/proc/%d/ns/net", (int)sb->init_pid);
    if (!spec->host_net && (sb->netns_fd = open(ns, O_RDONLY | O_CLOEXEC)) < 0)
        return sbx_err_at(err, SBX_STAGE_SPAWN, errno, "open %s", ns);
    uint32_t base = spec->host_id_base;
    if (sbx_id_map_write(sb->init_pid, "uid_map", 0, base, SBX_STAGE_USER_NS, err) < 0 ||
        sbx_id_map_write(sb->init_pid, "gid_map", 0, base, SBX_STAGE_USER_NS, err) < 0)
        return -1;
    if (write(sb->sync_fd, "u", 1) != 1)
        return sbx_err_at(err, SBX_STAGE_SPAWN, errno, "release child");
    return 0;
}

static void spawn_undo(struct spawn *s)
{
    sbx_cgroup_close_join(s->cg_join);
    free_argv(s->init_argv);
    close_pair(s->sv), close_pair(s->in), close_pair(s->out), close_pair(s->errp);
    if (s->cgfd >= 0)
        close(s->cgfd);
    if (s->sb->cg_made)
        sbx_cgroup_destroy(&s->sb->cg, NULL);
    s->sb->cg_made = false;
}

static int (*const parent_steps[])(struct spawn *s, sbx_err *err) = {
    own_workspace,   /* workspace: open, chown to the runner's host ids */
    make_cgroup,     /* cgroup: create with the limits (a session's task: none) */
    open_cgroup_fds, /* cgroup: v2 dir to clone into, v1 `tasks` files to join */
    make_channels,   /* spawn: the sync socket and the stdio pipes */
    make_init_argv,  /* spawn: init's settings, then the command */
    clone_child,     /* clone: new namespaces; the child goes on in child_main */
};

int sbx_sandbox_spawn(const struct sbx_spec *spec, struct sbx_sandbox *sb, sbx_err *err)
{
    *sb = (struct sbx_sandbox){.init_pid = -1,
                               .pidfd = -1,
                               .sync_fd = -1,
                               .stdin_fd = -1,
                               .stdout_fd = -1,
                               .stderr_fd = -1,
                               .netns_fd = -1};
    struct spawn s = {.spec = spec,
                      .sb = sb,
                      .sv = {-1, -1},
                      .in = {-1, -1},
                      .out = {-1, -1},
                      .errp = {-1, -1},
                      .cgfd = -1};
    for (int i = 0; i < SBX_CGC_COUNT; i++)
        s.cg_join[i] = -1;
    for (size_t i = 0; i < SBX_ARRAY_LEN(parent_steps); i++)
        if (parent_steps[i](&s, err) < 0) {
            spawn_undo(&s);
            return -1;
        }
    hand_over(&s);
    if (map_ids(sb, spec, err) < 0) { /* user namespace */
        sbx_sandbox_kill(sb);
        sbx_sandbox_release(sb, NULL);
        return -1;
    }
    return 0;
}

int sbx_sandbox_send_fds(struct sbx_sandbox *sb, const struct sbx_sandbox_fds *fds, sbx_err *err)
{
    int pass[2] = {fds->init_exe, fds->seccomp};
    if (sbx_send_with_fds(sb->sync_fd, "f", 1, pass, 2, MSG_NOSIGNAL) != 1) {
        int e = errno;
        /* The child failed a setup step and exited before taking them: its
         * own message is the reason (it is already in the socket). */
        struct sbx_init_msg m;
        if (recv(sb->sync_fd, &m, sizeof(m), MSG_DONTWAIT | MSG_PEEK) == (ssize_t)sizeof(m) &&
            m.kind == SBX_MSG_SETUP_ERROR) {
            m.text[sizeof(m.text) - 1] = '\0';
            return sbx_err_at(err, SBX_STAGE_SETUP, m.errnum, "%s", m.text);
        }
        return sbx_err_at(err, SBX_STAGE_SPAWN, e, "send init and seccomp fds");
    }
    return 0;
}

static size_t command_len(char *const *lists[2], uint32_t n[2])
{
    size_t len = 2 * sizeof(uint32_t);
    for (int l = 0; l < 2; l++)
        for (n[l] = 0; lists[l] && lists[l][n[l]]; n[l]++)
            len += strlen(lists[l][n[l]]) + 1;
    return len;
}

bool sbx_sandbox_send_command_fits(char *const *argv, char *const *envp)
{
    char *const *lists[2] = {argv, envp};
    uint32_t n[2];
    return command_len(lists, n) <= SBX_COMMAND_MAX;
}

int sbx_sandbox_send_command(struct sbx_sandbox *sb, char *const *argv, char *const *envp,
                             sbx_err *err)
{
    return sbx_sandbox_send_command_fds(sb, argv, envp, NULL, 0, err);
}

int sbx_sandbox_send_command_fds(struct sbx_sandbox *sb, char *const *argv, char *const *envp,
                                 const int *fds, size_t nfds, sbx_err *err)
{
    uint32_t n[2];
    char *const *lists[2] = {argv, envp};
    size_t len = command_len(lists, n);
    if (!n[0] && argv) /* NULL: the holder of a session (no command) */
        return sbx_err_at(err, SBX_STAGE_SPAWN, EINVAL, "no command");
    if (len > SBX_COMMAND_MAX)
        return sbx_err_at(err, SBX_STAGE_SPAWN, E2BIG, "command of %zu bytes", len);
    cleanup_free char *msg = malloc(len);
    if (!msg)
        return sbx_err_at(err, SBX_STAGE_SPAWN, ENOMEM, "command");
    memcpy(msg, n, sizeof(n));
    size_t at = sizeof(n);
    for (int l = 0; l < 2; l++)
        for (uint32_t i = 0; i < n[l]; i++) {
            size_t sl = strlen(lists[l][i]) + 1;
            memcpy(msg + at, lists[l][i], sl);
            at += sl;
        }
    if (nfds > SBX_FDS_PASS_MAX)
        return sbx_err_at(err, SBX_STAGE_SPAWN, E2BIG, "%zu mounts", nfds);
    if (sbx_send_with_fds(sb->sync_fd, msg, len, fds, nfds, MSG_NOSIGNAL | MSG_DONTWAIT) !=
        (ssize_t)len)
        return sbx_err_at(err, SBX_STAGE_SPAWN, errno, "send the command to init");
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
    /* Frozen first, so nothing forks or double-forks while it dies; not
     * waited for (this runs on the caller's loop): init's death kills the
     * whole pid namespace anyway, and the release kills what is left. */
    sbx_cgroup_freeze_start(&sb->cg, true, NULL);
    syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0);
    sbx_cgroup_freeze_start(&sb->cg, false, NULL);
}

static void close_fds(struct sbx_sandbox *sb)
{
    int *fds[] = {&sb->pidfd,     &sb->sync_fd,   &sb->stdin_fd,
                  &sb->stdout_fd, &sb->stderr_fd, &sb->netns_fd};
    for (size_t i = 0; i < SBX_ARRAY_LEN(fds); i++)
        if (*fds[i] >= 0) {
            close(*fds[i]);
            *fds[i] = -1;
        }
}

int sbx_sandbox_release_step(struct sbx_sandbox *sb, sbx_err *err)
{
    if (sb->pidfd >= 0) {
        siginfo_t si = {0};
        int rc;
        while ((rc = waitid(P_PIDFD, (id_t)sb->pidfd, &si, WEXITED | WNOHANG)) < 0 &&
               errno == EINTR)
            ;
        if (rc < 0 && errno != ECHILD)
            return sbx_err_set(err, errno, "reap the sandbox's init");
        if (rc == 0 && si.si_pid == 0)
            return sbx_err_set(err, EBUSY, "the sandbox's init has not exited yet");
        close(sb->pidfd);
        sb->pidfd = -1;
    }
    if (sb->cg_made) {
        sbx_err e = {0};
        if (sbx_cgroup_kill_step(&sb->cg, &e) < 0 || sbx_cgroup_remove(&sb->cg, &e) < 0) {
            if (e.errnum == EBUSY)
                return sbx_err_set(err, EBUSY, "%s", e.msg);
            sbx_sandbox_abandon(sb);
            return err ? (*err = e, -1) : -1;
        }
        sb->cg_made = false;
    }
    close_fds(sb);
    return 0;
}

void sbx_sandbox_abandon(struct sbx_sandbox *sb)
{
    sb->cg_made = false;
    close_fds(sb);
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
    close_fds(sb);
    return rc;
}
