#include "workspace/quota.h"

#include "base/digest.h"
#include "base/parse.h"
#include "workspace/quota_mode.h"

#include <dirent.h>
#include <signal.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/loop.h>
#include <linux/major.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef LOOP_CONFIGURE
#define LOOP_CONFIGURE 0x4C0A
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

#define MOUNT_FLAGS (MS_NOSUID | MS_NODEV)
/* The image starts as a sparse file of zeros: the kernel need not zero the
 * inode tables behind our back (which would also fill the sparse file). */
#define MOUNT_DATA "noinit_itable"
#define LOOP_TRIES 16 /* LOOP_CTL_GET_FREE raced by another attacher */
#define MKFS_MSG 160  /* mkfs.ext4's stderr kept for the error */

/* ---- names and paths ---- */

/* The path as given, without trailing slashes ("/" stays "/"). */
static size_t trimmed_len(const char *path)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    return n;
}

int sbx_ws_quota_image_name(const char *mount_point, char out[SBX_WS_QUOTA_NAME_MAX + 1],
                            sbx_err *err)
{
    _Static_assert(SBX_WS_QUOTA_NAME_MAX + 1 == SBX_SHA256_HEX_SIZE + 4, "<hex>.img");
    sbx_err why = {0};
    if (sbx_sha256_hex(mount_point, trimmed_len(mount_point), out, &why) < 0)
        return sbx_err_stage(err, "image", why.errnum, "name the image of \"%s\": %s", mount_point,
                             why.msg);
    memcpy(out + SBX_SHA256_HEX_SIZE - 1, ".img", 5);
    return 0;
}

/* mount_point opened without following a final symlink, and whether
 * something is mounted on it: its st_dev differs from its parent's ("..",
 * which from a mount's root leads to the parent mount). */
static int open_mount_point(const char *mp, struct stat *st, bool *mounted, sbx_err *err)
{
    *mounted = false;
    if (mp[0] != '/')
        return sbx_err_stage(err, "mount", EINVAL, "workspace mount point \"%s\" is not absolute",
                             mp);
    int fd = open(mp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return sbx_err_stage(err, "mount", errno, "workspace mount point \"%s\"", mp);
    struct stat parent;
    if (fstat(fd, st) < 0 || fstatat(fd, "..", &parent, 0) < 0) {
        int e = errno;
        close(fd);
        return sbx_err_stage(err, "mount", e, "stat \"%s\"", mp);
    }
    *mounted = st->st_dev != parent.st_dev;
    return fd;
}

/* The backing file of loop device minor, from sysfs (the path as the kernel
 * shows it in our mount namespace); "" when the device is not attached. */
static void loop_backing(unsigned minor, char *out, size_t len)
{
    char path[96];
    snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/loop/backing_file", LOOP_MAJOR, minor);
    out[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, out, len - 1);
    close(fd);
    if (n <= 0)
        n = 0;
    out[n] = '\0';
    out[strcspn(out, "\n")] = '\0';
}

/* A loop device already backed by image (a lazily unmounted workspace whose
 * files are still open): mounting it again shares its superblock, where a
 * second loop device on the same file would mount the filesystem twice and
 * corrupt it. Returns its minor, or -1. */
static int find_attached(const char *image)
{
    DIR *d = opendir("/sys/block");
    if (!d)
        return -1;
    int found = -1;
    struct dirent *de;
    while (found < 0 && (de = readdir(d))) {
        unsigned minor;
        char back[PATH_MAX];
        if (sscanf(de->d_name, "loop%u", &minor) != 1)
            continue;
        loop_backing(minor, back, sizeof(back));
        if (strcmp(back, image) == 0)
            found = (int)minor;
    }
    closedir(d);
    return found;
}

/* ---- mkfs ---- */

/* mkfs.ext4 on path, in a child (fork + execve, a clean environment, stdin
 * and stdout on /dev/null, stderr into a memfd kept for the error), watched
 * by a pidfd. A journal is kept (a host crash loses at most recent writes,
 * never the filesystem); nothing is reserved for root; one inode per 8 KiB
 * whatever the size (mke2fs would give small images 4 KiB, large ones 16 KiB:
 * 64 Ki files in 1 GiB is tight for a node_modules tree); the image is all
 * holes, so neither inode tables nor journal need zeroing. */
static int mkfs_spawn(const char *path, uid_t uid, gid_t gid, struct sbx_ws_format *f, sbx_err *err)
{
    char ext[96];
    snprintf(ext, sizeof(ext), "root_owner=%u:%u,lazy_itable_init=1,lazy_journal_init=1,nodiscard",
             (unsigned)uid, (unsigned)gid);
    char *argv[] = {
        "mkfs.ext4",     "-q", "-F", "-m", "0",          "-b", "4096", "-i", "8192", "-L",
        "sbx-workspace", "-E", ext,  "--", (char *)path, NULL};
    char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
    static const char *const bins[] = {"/sbin/mkfs.ext4", "/usr/sbin/mkfs.ext4"};

    /* A file, not a pipe: nobody reads while it runs, and it never blocks. */
    cleanup_fd int log = memfd_create("mkfs.ext4", MFD_CLOEXEC);
    if (log < 0)
        return sbx_err_stage(err, "mkfs", errno, "memfd for its messages");
    cleanup_fd int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0)
        return sbx_err_stage(err, "mkfs", errno, "open /dev/null");
    pid_t pid = fork();
    if (pid == 0) {
        /* Only async-signal-safe calls from here on. */
        if (dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0 || dup2(log, 2) < 0)
            _exit(126);
        syscall(SYS_close_range, 3, ~0U, 0);
        for (size_t i = 0; i < SBX_ARRAY_LEN(bins); i++)
            execve(bins[i], argv, envp);
        _exit(127);
    }
    if (pid < 0)
        return sbx_err_stage(err, "mkfs", errno, "fork");
    /* Our child, not yet reaped: its pid cannot name another process. */
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) {
        int e = errno;
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        return sbx_err_stage(err, "mkfs", e, "pidfd_open");
    }
    f->pid = pid;
    f->pidfd = pidfd;
    f->log_fd = sbx_steal_fd(&log);
    return 0;
}

/* How mkfs ended, as an error with its message. */
static int mkfs_status(const struct sbx_ws_format *f, int status, sbx_err *err)
{
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    char msg[MKFS_MSG + 1];
    ssize_t n = pread(f->log_fd, msg, MKFS_MSG, 0);
    msg[n > 0 ? n : 0] = '\0';
    for (char *c = msg; *c; c++)
        if (*c == '\n' || *c == '\t')
            *c = ' ';
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        return sbx_err_stage(err, "mkfs", ENOENT, "mkfs.ext4 not found (install e2fsprogs)");
    if (WIFEXITED(status))
        return sbx_err_stage(err, "mkfs", EIO, "mkfs.ext4 \"%s\" exited with %d: %s", f->tmp,
                             WEXITSTATUS(status), msg);
    return sbx_err_stage(err, "mkfs", EIO, "mkfs.ext4 \"%s\" killed by signal %d", f->tmp,
                         WTERMSIG(status));
}

/* A new image: "<name>.tmp" in real_dir made sparse and its mkfs started;
 * sbx_ws_quota_format_finish renames it to name once formatted, so an image
 * under its name is always a formatted one. */
static int format_begin(const char *real_dir, const char *name, uint64_t size, uid_t uid, gid_t gid,
                        struct sbx_ws_format *f, sbx_err *err)
{
    *f = (struct sbx_ws_format){.pid = -1, .pidfd = -1, .log_fd = -1};
    if ((size_t)snprintf(f->tmp, sizeof(f->tmp), "%s/%s.tmp", real_dir, name) >= sizeof(f->tmp) ||
        (size_t)snprintf(f->image, sizeof(f->image), "%s/%s", real_dir, name) >= sizeof(f->image))
        return sbx_err_stage(err, "image", ENAMETOOLONG, "images dir \"%s\"", real_dir);
    int fd = open(f->tmp, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return sbx_err_stage(err, "image", errno, "create \"%s\"", f->tmp);
    if (ftruncate(fd, (off_t)size) < 0) {
        int e = errno;
        close(fd);
        unlink(f->tmp);
        return sbx_err_stage(err, "image", e, "size \"%s\" to %llu bytes", f->tmp,
                             (unsigned long long)size);
    }
    close(fd);
    if (mkfs_spawn(f->tmp, uid, gid, f, err) < 0) {
        unlink(f->tmp);
        return -1;
    }
    return 0;
}

static void format_close(struct sbx_ws_format *f)
{
    sbx_closep(&f->pidfd);
    sbx_closep(&f->log_fd);
    f->pidfd = f->log_fd = -1;
    f->pid = -1;
}

int sbx_ws_quota_format_finish(struct sbx_ws_format *f, sbx_err *err)
{
    int status;
    while (waitpid(f->pid, &status, 0) < 0)
        if (errno != EINTR) {
            int e = errno;
            format_close(f);
            unlink(f->tmp);
            return sbx_err_stage(err, "mkfs", e, "wait for mkfs.ext4");
        }
    int rc = mkfs_status(f, status, err);
    format_close(f);
    if (rc == 0 && rename(f->tmp, f->image) < 0)
        rc = sbx_err_stage(err, "image", errno, "rename \"%s\"", f->tmp);
    if (rc < 0) {
        unlink(f->tmp);
        return -1;
    }
    /* Best effort: at worst a crash formats again. */
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", f->image);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    cleanup_fd int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd >= 0)
        fsync(dirfd);
    return 0;
}

void sbx_ws_quota_format_abort(struct sbx_ws_format *f)
{
    if (f->pid <= 0)
        return;
    kill(f->pid, SIGKILL);
    while (waitpid(f->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    format_close(f);
    unlink(f->tmp);
}

/* ---- loop ---- */

/* /dev/loop<minor>, made when the device exists but its node does not (a
 * container's static /dev). */
static int open_loop(unsigned minor, char *dev, size_t len)
{
    snprintf(dev, len, "/dev/loop%u", minor);
    int fd = open(dev, O_RDWR | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && mknod(dev, S_IFBLK | 0660, makedev(LOOP_MAJOR, minor)) == 0)
        fd = open(dev, O_RDWR | O_CLOEXEC);
    return fd;
}

/* Attach img_fd to a free loop device with LO_FLAGS_AUTOCLEAR: the device
 * detaches itself when its last user (the mount) goes. Returns the device's
 * fd (keep it open until mounted) and its path in dev. */
static int attach_loop(int img_fd, const char *image, char *dev, size_t len, sbx_err *err)
{
    int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0)
        return sbx_err_stage(err, "loop", errno, "open /dev/loop-control");
    for (int tries = 0; tries < LOOP_TRIES; tries++) {
        int minor = ioctl(ctl, LOOP_CTL_GET_FREE);
        if (minor < 0) {
            int e = errno;
            close(ctl);
            return sbx_err_stage(err, "loop", e, "LOOP_CTL_GET_FREE");
        }
        int fd = open_loop((unsigned)minor, dev, len);
        if (fd < 0) {
            int e = errno;
            close(ctl);
            return sbx_err_stage(err, "loop", e, "open %s", dev);
        }
        struct loop_config cfg;
        memset(&cfg, 0, sizeof(cfg));
        cfg.fd = (uint32_t)img_fd;
        cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        /* Shown by losetup; sysfs's backing_file has the whole path. */
        memcpy(cfg.info.lo_file_name, image, strnlen(image, LO_NAME_SIZE - 1));
        int rc = ioctl(fd, LOOP_CONFIGURE, &cfg);
        if (rc < 0 && (errno == EINVAL || errno == ENOTTY)) {
            /* Before Linux 5.8: the two-step form. */
            rc = ioctl(fd, LOOP_SET_FD, img_fd);
            if (rc == 0 && (rc = ioctl(fd, LOOP_SET_STATUS64, &cfg.info)) < 0) {
                int e = errno;
                ioctl(fd, LOOP_CLR_FD, 0);
                errno = e;
            }
        }
        if (rc == 0) {
            close(ctl);
            return fd;
        }
        int e = errno;
        close(fd);
        if (e == EBUSY) /* taken between GET_FREE and CONFIGURE */
            continue;
        close(ctl);
        return sbx_err_stage(err, "loop", e, "attach \"%s\" to %s", image, dev);
    }
    close(ctl);
    return sbx_err_stage(err, "loop", EBUSY, "no free loop device for \"%s\"", image);
}

/* ---- ensure, release, usage ---- */

/* The mounted root: owned by uid:gid, 0700, and no lost+found of root's (the
 * one mkfs made: empty; e2fsck would make it again if it needs one). */
static int fix_root(const char *mp, uid_t uid, gid_t gid, sbx_err *err)
{
    cleanup_fd int fd = open(mp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return sbx_err_stage(err, "mount", errno, "open mounted \"%s\"", mp);
    if ((st.st_uid != uid || st.st_gid != gid) && fchown(fd, uid, gid) < 0)
        return sbx_err_stage(err, "mount", errno, "chown \"%s\" to %u:%u", mp, (unsigned)uid,
                             (unsigned)gid);
    if ((st.st_mode & 07777) != 0700 && fchmod(fd, 0700) < 0)
        return sbx_err_stage(err, "mount", errno, "chmod \"%s\"", mp);
    struct stat lf;
    if (fstatat(fd, "lost+found", &lf, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(lf.st_mode) &&
        lf.st_uid == 0)
        unlinkat(fd, "lost+found", AT_REMOVEDIR); /* not empty: left as it is (root's, 0700) */
    return 0;
}

static int check_size(uint64_t size_bytes, sbx_err *err)
{
    if (size_bytes < SBX_WS_QUOTA_MIN)
        return sbx_err_stage(err, "image", EINVAL,
                             "workspace quota of %llu bytes is under the minimum of 16 MiB",
                             (unsigned long long)size_bytes);
    if (size_bytes > (uint64_t)INT64_MAX)
        return sbx_err_stage(err, "image", EFBIG, "workspace quota of %llu bytes",
                             (unsigned long long)size_bytes);
    return 0;
}

int sbx_ws_quota_room(const char *images_dir, uint64_t size_bytes, uint64_t reserve_bytes,
                      sbx_err *err)
{
    struct statvfs vfs;
    if (statvfs(images_dir, &vfs) < 0)
        return sbx_err_stage(err, "image", errno, "images dir \"%s\"", images_dir);
    DIR *d = opendir(images_dir);
    if (!d)
        return sbx_err_stage(err, "image", errno, "images dir \"%s\"", images_dir);
    uint64_t promised = 0;
    unsigned n = 0;
    for (struct dirent *de; (de = readdir(d));) {
        struct stat st;
        if (!strstr(de->d_name, ".img") ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        uint64_t size = (uint64_t)st.st_size, held = (uint64_t)st.st_blocks * 512;
        promised += size > held ? size - held : 0;
        n++;
    }
    closedir(d);
    uint64_t free_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    if (free_bytes >= promised && free_bytes - promised >= reserve_bytes &&
        free_bytes - promised - reserve_bytes >= size_bytes)
        return 0;
    return sbx_err_stage(
        err, "image", ENOSPC,
        "no room for another workspace image of %llu MiB: %llu MiB free, %llu MiB "
        "of it promised to the %u existing images, %llu MiB kept in reserve "
        "(server.disk_reserve)",
        (unsigned long long)(size_bytes >> 20), (unsigned long long)(free_bytes >> 20),
        (unsigned long long)(promised >> 20), n, (unsigned long long)(reserve_bytes >> 20));
}

bool sbx_ws_quota_image_exists(const char *images_dir, const char *mount_point)
{
    char name[SBX_WS_QUOTA_NAME_MAX + 1], path[PATH_MAX];
    if (sbx_ws_quota_image_name(mount_point, name, NULL) < 0)
        return false;
    struct stat st;
    return (size_t)snprintf(path, sizeof(path), "%s/%s", images_dir, name) < sizeof(path) &&
           lstat(path, &st) == 0;
}

int sbx_ws_quota_format_start(const char *images_dir, const char *mount_point, uint64_t size_bytes,
                              uid_t uid, gid_t gid, struct sbx_ws_format *f, sbx_err *err)
{
    if (check_size(size_bytes, err) < 0)
        return -1;
    char name[SBX_WS_QUOTA_NAME_MAX + 1], real_dir[PATH_MAX];
    if (sbx_ws_quota_image_name(mount_point, name, err) < 0)
        return -1;
    if (!realpath(images_dir, real_dir))
        return sbx_err_stage(err, "image", errno, "images dir \"%s\"", images_dir);
    return format_begin(real_dir, name, size_bytes, uid, gid, f, err);
}

int sbx_ws_quota_ensure(const char *images_dir, const char *mount_point, uint64_t size_bytes,
                        uid_t uid, gid_t gid, sbx_err *err)
{
    if (check_size(size_bytes, err) < 0)
        return -1;
    char name[SBX_WS_QUOTA_NAME_MAX + 1];
    if (sbx_ws_quota_image_name(mount_point, name, err) < 0)
        return -1;

    /* The images directory is the operator's: trusted, but must exist. */
    cleanup_fd int dirfd = open(images_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0)
        return sbx_err_stage(err, "image", errno, "images dir \"%s\"", images_dir);
    char real_dir[PATH_MAX], image[PATH_MAX];
    if (!realpath(images_dir, real_dir))
        return sbx_err_stage(err, "image", errno, "images dir \"%s\"", images_dir);
    if ((size_t)snprintf(image, sizeof(image), "%s/%s", real_dir, name) >= sizeof(image))
        return sbx_err_stage(err, "image", ENAMETOOLONG, "images dir \"%s\"", images_dir);

    struct stat st;
    bool mounted;
    int mfd = open_mount_point(mount_point, &st, &mounted, err);
    if (mfd < 0)
        return -1;
    close(mfd);
    if (mounted) {
        char back[PATH_MAX] = "";
        if (major(st.st_dev) == LOOP_MAJOR)
            loop_backing(minor(st.st_dev), back, sizeof(back));
        if (strcmp(back, image) != 0)
            return sbx_err_stage(err, "mount", EBUSY,
                                 "\"%s\" is already a mount point, not of its image \"%s\"",
                                 mount_point, image);
        return fix_root(mount_point, uid, gid, err);
    }

    cleanup_fd int img = openat(dirfd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (img < 0 && errno == ENOENT) {
        struct sbx_ws_format f;
        if (format_begin(real_dir, name, size_bytes, uid, gid, &f, err) < 0 ||
            sbx_ws_quota_format_finish(&f, err) < 0)
            return -1;
        img = openat(dirfd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    }
    if (img < 0)
        return sbx_err_stage(err, "image", errno, "open \"%s\"", image);
    if (fstat(img, &st) < 0)
        return sbx_err_stage(err, "image", errno, "stat \"%s\"", image);
    if (!S_ISREG(st.st_mode))
        return sbx_err_stage(err, "image", EINVAL, "\"%s\" is not a regular file", image);

    char dev[32];
    int busy = find_attached(image);
    if (busy >= 0) {
        snprintf(dev, sizeof(dev), "/dev/loop%d", busy);
        if (mount(dev, mount_point, "ext4", MOUNT_FLAGS, MOUNT_DATA) == 0)
            return fix_root(mount_point, uid, gid, err);
        /* Cleared meanwhile (autoclear): attach it afresh below. */
    }
    cleanup_fd int loop = attach_loop(img, image, dev, sizeof(dev), err);
    if (loop < 0)
        return -1;
    /* The loop device holds its own reference to the image. */
    if (mount(dev, mount_point, "ext4", MOUNT_FLAGS, MOUNT_DATA) < 0)
        return sbx_err_stage(err, "mount", errno, "mount %s (\"%s\") on \"%s\"", dev, image,
                             mount_point);
    /* Closing loop now leaves the mount as the device's only user. */
    return fix_root(mount_point, uid, gid, err);
}

int sbx_ws_quota_release(const char *mount_point, sbx_err *err)
{
    struct stat st;
    bool mounted;
    int fd = open_mount_point(mount_point, &st, &mounted, err);
    if (fd < 0)
        return -1;
    close(fd);
    if (!mounted)
        return 0;
    if (major(st.st_dev) != LOOP_MAJOR)
        return sbx_err_stage(err, "mount", EINVAL, "\"%s\" is not a workspace image mount",
                             mount_point);
    if (umount2(mount_point, MNT_DETACH | UMOUNT_NOFOLLOW) < 0)
        return sbx_err_stage(err, "mount", errno, "unmount \"%s\"", mount_point);
    return 0;
}

int sbx_ws_quota_usage(const char *mount_point, uint64_t *used, uint64_t *total, sbx_err *err)
{
    struct statvfs sv;
    if (statvfs(mount_point, &sv) < 0)
        return sbx_err_stage(err, "mount", errno, "statvfs \"%s\"", mount_point);
    uint64_t frsize = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
    *total = (uint64_t)sv.f_blocks * frsize;
    *used = (uint64_t)(sv.f_blocks - sv.f_bfree) * frsize;
    return 0;
}

int sbx_ws_quota_release_all(const char *root)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return 0;
    size_t rlen = strlen(root);
    char line[8192];
    char *found[256];
    size_t n = 0;
    while (n < SBX_ARRAY_LEN(found) && fgets(line, sizeof(line), f)) {
        char *save = NULL, *mp = NULL, *tok = strtok_r(line, " ", &save);
        for (int field = 0; tok && field < 4; field++)
            tok = strtok_r(NULL, " ", &save);
        mp = tok;
        if (!mp)
            continue;
        sbx_mountinfo_unescape(mp);
        if (strncmp(mp, root, rlen) == 0 && mp[rlen] == '/' && (found[n] = strdup(mp)))
            n++;
    }
    fclose(f);
    int released = 0;
    /* Deepest first, though workspaces do not nest. */
    while (n > 0) {
        char *mp = found[--n];
        if (sbx_ws_quota_release(mp, NULL) == 0)
            released++;
        free(mp);
    }
    return released;
}

/* ---- jobs in a helper child ---- */

/* In the parent: the child runs op and _exits 0, or writes its sbx_err to
 * fd 3 and _exits 1. */
static int job_start(struct sbx_ws_job *j, sbx_err *err)
{
    *j = (struct sbx_ws_job){.pid = -1, .pidfd = -1, .out_fd = -1};
    cleanup_fd int out = memfd_create("sbx-ws-job", MFD_CLOEXEC);
    if (out < 0)
        return sbx_err_stage(err, "mount", errno, "memfd for the workspace job");
    int pidfd = -1;
    pid_t pid = sbx_ws_helper_fork(out, &pidfd, "mount", err);
    if (pid <= 0)
        return (int)pid; /* 0: the child's turn */
    j->pid = pid;
    j->pidfd = pidfd;
    j->out_fd = sbx_steal_fd(&out);
    return 1;
}

static void __attribute__((noreturn)) job_exit(int rc, const sbx_err *e)
{
    if (rc == 0)
        _exit(0);
    if (write(3, e, sizeof(*e)) != (ssize_t)sizeof(*e))
        _exit(2);
    _exit(1);
}

int sbx_ws_quota_mount_start(const char *images_dir, const char *mount_point, uint64_t size_bytes,
                             uid_t uid, gid_t gid, struct sbx_ws_job *j, sbx_err *err)
{
    /* What can be told at once is told at once. */
    *j = (struct sbx_ws_job){.pid = -1, .pidfd = -1, .out_fd = -1};
    if (check_size(size_bytes, err) < 0)
        return -1;
    int rc = job_start(j, err);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    sbx_err e = {0};
    job_exit(sbx_ws_quota_ensure(images_dir, mount_point, size_bytes, uid, gid, &e), &e);
}

int sbx_ws_quota_unmount_start(const char *mount_point, struct sbx_ws_job *j, sbx_err *err)
{
    int rc = job_start(j, err);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    sbx_err e = {0};
    job_exit(sbx_ws_quota_release(mount_point, &e), &e);
}

static void job_close(struct sbx_ws_job *j)
{
    sbx_closep(&j->pidfd);
    sbx_closep(&j->out_fd);
    j->pidfd = j->out_fd = -1;
    j->pid = -1;
}

int sbx_ws_quota_job_finish(struct sbx_ws_job *j, sbx_err *err)
{
    int status;
    while (waitpid(j->pid, &status, 0) < 0)
        if (errno != EINTR) {
            int e = errno;
            job_close(j);
            return sbx_err_stage(err, "mount", e, "wait for the workspace job");
        }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        job_close(j);
        return 0;
    }
    sbx_err e = {0};
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 1 ||
        pread(j->out_fd, &e, sizeof(e), 0) != (ssize_t)sizeof(e)) {
        job_close(j);
        return sbx_err_stage(err, "mount", EIO, "the workspace job ended with status %d", status);
    }
    job_close(j);
    e.msg[sizeof(e.msg) - 1] = '\0';
    e.stage[sizeof(e.stage) - 1] = '\0';
    if (err)
        *err = e;
    return -1;
}

void sbx_ws_quota_job_abort(struct sbx_ws_job *j)
{
    if (j->pid <= 0)
        return;
    kill(j->pid, SIGKILL);
    while (waitpid(j->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    job_close(j);
}
