#include "workspace/quota_mode.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/dqblk_xfs.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <linux/quota.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef SYS_quotactl_fd
#define SYS_quotactl_fd 443
#endif

static const char *const names[] = {
    [SBX_WSQ_AUTO] = "auto",
    [SBX_WSQ_LOOP] = "loop",
    [SBX_WSQ_PROJECT] = "project",
    [SBX_WSQ_MONITOR] = "monitor",
};

const char *sbx_ws_quota_mode_name(enum sbx_ws_quota_mode m)
{
    return (unsigned)m < SBX_ARRAY_LEN(names) ? names[m] : "?";
}

int sbx_ws_quota_mode_parse(const char *s, enum sbx_ws_quota_mode *out, sbx_err *err)
{
    for (size_t i = 0; i < SBX_ARRAY_LEN(names); i++)
        if (strcmp(s, names[i]) == 0)
            return *out = (enum sbx_ws_quota_mode)i, 0;
    return sbx_err_set(err, EINVAL, "'%.80s' is not auto, loop, project or monitor", s);
}

bool sbx_ws_quota_mode_kernel(enum sbx_ws_quota_mode m)
{
    return m == SBX_WSQ_LOOP || m == SBX_WSQ_PROJECT;
}

/* ---- probes ---- */

bool sbx_ws_quota_loop_usable(char *why, size_t len)
{
    int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0) {
        snprintf(why, len, "no loop devices: open /dev/loop-control: %s", strerror(errno));
        return false;
    }
    int minor = ioctl(ctl, LOOP_CTL_GET_FREE);
    int e = errno;
    close(ctl);
    if (minor < 0) {
        snprintf(why, len, "no loop devices: LOOP_CTL_GET_FREE: %s", strerror(e));
        return false;
    }
    if (access("/sbin/mkfs.ext4", X_OK) < 0 && access("/usr/sbin/mkfs.ext4", X_OK) < 0) {
        snprintf(why, len, "mkfs.ext4 not found (install e2fsprogs)");
        return false;
    }
    snprintf(why, len, "loop devices and mkfs.ext4 available");
    return true;
}

static int quotactl_fd(int fd, unsigned cmd, int id, void *addr)
{
    return (int)syscall(SYS_quotactl_fd, fd, cmd, id, addr);
}

bool sbx_ws_quota_project_usable(const char *root, char *why, size_t len)
{
    cleanup_fd int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, len, "workspace root \"%s\": %s", root, strerror(errno));
        return false;
    }
    struct fs_quota_statv qs = {.qs_version = FS_QSTATV_VERSION1};
    if (quotactl_fd(fd, QCMD(Q_XGETQSTATV, PRJQUOTA), 0, &qs) < 0) {
        int e = errno;
        if (e == ENOSYS || e == EOPNOTSUPP)
            snprintf(why, len, "no project quotas: the kernel has no quota support (%s)",
                     strerror(e));
        else
            snprintf(why, len,
                     "no project quotas on the workspace root's filesystem (%s): mount it with "
                     "prjquota (ext4 made with -O quota,project) or pquota (xfs)",
                     strerror(e));
        return false;
    }
    if (!(qs.qs_flags & FS_QUOTA_PDQ_ENFD)) {
        snprintf(why, len,
                 "project quotas are counted but not enforced on the workspace root's "
                 "filesystem: mount it with prjquota (ext4) or pquota (xfs)");
        return false;
    }
    struct fsxattr fa;
    if (ioctl(fd, FS_IOC_FSGETXATTR, &fa) < 0) {
        snprintf(why, len, "project ids on the workspace root: FS_IOC_FSGETXATTR: %s",
                 strerror(errno));
        return false;
    }
    snprintf(why, len, "project quotas enforced on the workspace root's filesystem");
    return true;
}

int sbx_ws_quota_choose(enum sbx_ws_quota_mode want, const char *root, enum sbx_ws_quota_mode *mode,
                        char *why, size_t len, sbx_err *err)
{
    char loop_why[160], proj_why[240];
    switch (want) {
    case SBX_WSQ_LOOP:
        if (!sbx_ws_quota_loop_usable(loop_why, sizeof(loop_why)))
            return sbx_err_set(err, EOPNOTSUPP, "workspace_quota_mode loop: %s", loop_why);
        snprintf(why, len, "asked for: %s", loop_why);
        return *mode = SBX_WSQ_LOOP, 0;
    case SBX_WSQ_PROJECT:
        if (!sbx_ws_quota_project_usable(root, proj_why, sizeof(proj_why)))
            return sbx_err_set(err, EOPNOTSUPP, "workspace_quota_mode project: %s", proj_why);
        snprintf(why, len, "asked for: %s", proj_why);
        return *mode = SBX_WSQ_PROJECT, 0;
    case SBX_WSQ_MONITOR:
        snprintf(why, len, "asked for: the daemon measures workspaces and stops writers");
        return *mode = SBX_WSQ_MONITOR, 0;
    case SBX_WSQ_AUTO:
        break;
    }
    if (sbx_ws_quota_loop_usable(loop_why, sizeof(loop_why))) {
        snprintf(why, len, "%s", loop_why);
        return *mode = SBX_WSQ_LOOP, 0;
    }
    if (sbx_ws_quota_project_usable(root, proj_why, sizeof(proj_why))) {
        snprintf(why, len, "%s; %s", loop_why, proj_why);
        return *mode = SBX_WSQ_PROJECT, 0;
    }
    snprintf(why, len, "%s; %s", loop_why, proj_why);
    return *mode = SBX_WSQ_MONITOR, 0;
}

/* ---- project ---- */

static uint32_t walk_projid;
static int walk_errno;

/* Regular files and directories only: opening anything else could have
 * effects (a FIFO, a device), and symlinks take no blocks to speak of. */
static int set_projid(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)ftw;
    if (!(flag == FTW_F && S_ISREG(st->st_mode)) && flag != FTW_D)
        return 0;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct fsxattr fa;
    if (fd < 0 || ioctl(fd, FS_IOC_FSGETXATTR, &fa) < 0) {
        walk_errno = errno;
        if (fd >= 0)
            close(fd);
        return 0;
    }
    if (fa.fsx_projid != walk_projid ||
        (flag == FTW_D && !(fa.fsx_xflags & FS_XFLAG_PROJINHERIT))) {
        fa.fsx_projid = walk_projid;
        if (flag == FTW_D)
            fa.fsx_xflags |= FS_XFLAG_PROJINHERIT;
        if (ioctl(fd, FS_IOC_FSSETXATTR, &fa) < 0)
            walk_errno = errno;
    }
    close(fd);
    return 0;
}

int sbx_ws_project_ensure(const char *dir, uint32_t projid, uint64_t bytes, sbx_err *err)
{
    cleanup_fd int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return sbx_err_stage(err, "project", errno, "workspace \"%s\"", dir);
    struct fsxattr fa;
    if (ioctl(fd, FS_IOC_FSGETXATTR, &fa) < 0)
        return sbx_err_stage(err, "project", errno, "project id of \"%s\"", dir);
    /* Once set (with inheritance), everything made below has it: only the
     * first time (or after another mode) has the tree to be walked. A task
     * cannot change a project id (only the initial user namespace can). */
    if (fa.fsx_projid != projid || !(fa.fsx_xflags & FS_XFLAG_PROJINHERIT)) {
        walk_projid = projid;
        walk_errno = 0;
        if (nftw(dir, set_projid, 32, FTW_PHYS | FTW_MOUNT) < 0 || walk_errno)
            return sbx_err_stage(err, "project", walk_errno ? walk_errno : errno,
                                 "set project id %u on \"%s\"", projid, dir);
    }
    struct if_dqblk q = {
        .dqb_bhardlimit = (bytes + 1023) / 1024, .dqb_bsoftlimit = 0, .dqb_valid = QIF_BLIMITS};
    if (quotactl_fd(fd, QCMD(Q_SETQUOTA, PRJQUOTA), (int)projid, &q) < 0)
        return sbx_err_stage(err, "project", errno, "set the quota of project %u (\"%s\")", projid,
                             dir);
    return 0;
}

/* ---- measuring ---- */

#define DU_DEPTH_MAX 256 /* deeper is not counted (each level holds an fd) */

/* The blocks below the directory dfd (closed here), on device dev: every
 * entry is looked at from its parent's fd without following a symlink, so a
 * task that swaps a directory for a symlink meanwhile cannot lead the walk
 * out of its workspace. */
static uint64_t du_fd(int dfd, dev_t dev, int depth)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return 0;
    }
    uint64_t sum = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        sum += (uint64_t)st.st_blocks * 512;
        if (S_ISDIR(st.st_mode) && st.st_dev == dev && depth < DU_DEPTH_MAX) {
            int fd = openat(dirfd(d), de->d_name,
                            O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
            if (fd >= 0)
                sum += du_fd(fd, dev, depth + 1);
        }
    }
    closedir(d);
    return sum;
}

int sbx_ws_du(const char *dir, uint64_t *bytes, sbx_err *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return sbx_err_stage(err, "monitor", e, "measure \"%s\"", dir);
    }
    *bytes = (uint64_t)st.st_blocks * 512 + du_fd(fd, st.st_dev, 0);
    return 0;
}

void sbx_ws_helper_child(int out, pid_t parent, int nice)
{
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_UNBLOCK, &all, NULL);
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            signal(s, SIG_DFL);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent || dup2(out, 3) < 0)
        _exit(126);
    syscall(SYS_close_range, 4, ~0U, 0);
    if (setpriority(PRIO_PROCESS, 0, nice) < 0) {
        /* not fatal */
    }
}

pid_t sbx_ws_helper_fork(int out, int *pidfd, const char *what, sbx_err *err)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        sbx_ws_helper_child(out, parent, 5);
        return 0;
    }
    if (pid < 0)
        return sbx_err_stage(err, what, errno, "fork");
    /* Our child, not yet reaped: its pid cannot name another process. */
    *pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (*pidfd < 0) {
        int e = errno;
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        return sbx_err_stage(err, what, e, "pidfd_open");
    }
    return pid;
}

int sbx_ws_measure_start(const char *const *dirs, size_t n, struct sbx_ws_measure *m, sbx_err *err)
{
    *m = (struct sbx_ws_measure){.pid = -1, .pidfd = -1, .out_fd = -1, .n = n};
    /* A file, not a pipe: nobody reads while it runs, and it never blocks. */
    cleanup_fd int out = memfd_create("sbx-ws-measure", MFD_CLOEXEC);
    if (out < 0)
        return sbx_err_stage(err, "monitor", errno, "memfd for the sizes");
    int pidfd;
    pid_t pid = sbx_ws_helper_fork(out, &pidfd, "monitor", err);
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* The daemon's copy: measure, write a line per directory, exit. */
        out = 3;
        for (size_t i = 0; i < n; i++) {
            uint64_t b;
            char line[32];
            int k = sbx_ws_du(dirs[i], &b, NULL) == 0
                        ? snprintf(line, sizeof(line), "%llu\n", (unsigned long long)b)
                        : snprintf(line, sizeof(line), "-\n");
            if (write(out, line, (size_t)k) != k)
                _exit(1);
        }
        _exit(0);
    }
    m->pid = pid;
    m->pidfd = pidfd;
    m->out_fd = sbx_steal_fd(&out);
    return 0;
}

static void measure_close(struct sbx_ws_measure *m)
{
    sbx_closep(&m->pidfd);
    sbx_closep(&m->out_fd);
    m->pidfd = m->out_fd = -1;
    m->pid = -1;
}

int sbx_ws_measure_finish(struct sbx_ws_measure *m, uint64_t *used, sbx_err *err)
{
    for (size_t i = 0; i < m->n; i++)
        used[i] = UINT64_MAX;
    int status;
    while (waitpid(m->pid, &status, 0) < 0)
        if (errno != EINTR) {
            int e = errno;
            measure_close(m);
            return sbx_err_stage(err, "monitor", e, "wait for the measure");
        }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        measure_close(m);
        return sbx_err_stage(err, "monitor", EIO, "the measuring child failed (status %d)", status);
    }
    FILE *f = fdopen(m->out_fd, "r");
    if (!f || fseek(f, 0, SEEK_SET) < 0) {
        int e = errno;
        if (f)
            fclose(f), m->out_fd = -1;
        measure_close(m);
        return sbx_err_stage(err, "monitor", e, "read the sizes");
    }
    m->out_fd = -1; /* the FILE's now */
    char line[32];
    for (size_t i = 0; i < m->n && fgets(line, sizeof(line), f); i++) {
        unsigned long long b;
        if (sscanf(line, "%llu", &b) == 1)
            used[i] = b;
    }
    fclose(f);
    measure_close(m);
    return 0;
}

void sbx_ws_measure_abort(struct sbx_ws_measure *m)
{
    if (m->pid <= 0)
        return;
    kill(m->pid, SIGKILL);
    while (waitpid(m->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    measure_close(m);
}
