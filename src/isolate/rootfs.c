#include "isolate/rootfs.h"

#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/parse.h"
#include "base/strv.h"
#include "isolate/stage.h"

/* Where the new root is assembled: a tmpfs mounted over /tmp of our private
 * mount namespace (the host's /tmp is untouched). Sources under the host's /tmp
 * are reached through fds opened before, never through paths. */
#define NEWROOT "/tmp"

/* Host system directories bound read-only, or recreated as symlinks when the
 * host has them as symlinks (merged /usr). */
static const char *const system_dirs[] = {"usr", "bin", "sbin", "lib", "lib64", "lib32", "libx32"};

/* The host /etc entries programs need: files copied, directories bound
 * read-only, symlinks recreated; never the whole /etc, where an operator keeps
 * config and tokens. */
static const char *const etc_entries[] = {
    "ld.so.cache", "ld.so.conf",     "ld.so.conf.d", "ssl",       "ca-certificates", "alternatives",
    "localtime",   "mime.types",     "protocols",    "services",  "os-release",      "python3",
    "python3.11",  "debian_version", "gai.conf",     "host.conf",
};

static const char *const dev_nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};

/* Mount flags a remount inside a user namespace must keep: the kernel locks
 * them on mounts inherited from the host. */
static unsigned long locked_flags(const char *path)
{
    struct statvfs sv;
    if (statvfs(path, &sv) < 0)
        return 0;
    unsigned long f = 0;
    if (sv.f_flag & ST_NOSUID)
        f |= MS_NOSUID;
    if (sv.f_flag & ST_NODEV)
        f |= MS_NODEV;
    if (sv.f_flag & ST_NOEXEC)
        f |= MS_NOEXEC;
    if (sv.f_flag & ST_NOATIME)
        f |= MS_NOATIME;
    if (sv.f_flag & ST_NODIRATIME)
        f |= MS_NODIRATIME;
    if (sv.f_flag & ST_RELATIME)
        f |= MS_RELATIME;
    return f;
}

static int bind_mount(const char *src, const char *dst, unsigned long flags, sbx_err *err)
{
    if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
        return sbx_err_at(err, SBX_STAGE_BIND_MOUNT, errno, "%s on %s", src, dst);
    flags |= MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | locked_flags(dst);
    if (mount(NULL, dst, NULL, flags, NULL) < 0)
        return sbx_err_at(err, SBX_STAGE_REMOUNT, errno, "%s", dst);
    return 0;
}

static int make_dir(const char *path, mode_t mode, sbx_err *err)
{
    if (mkdir(path, mode) < 0 && errno != EEXIST)
        return sbx_err_at(err, SBX_STAGE_MKDIR, errno, "%s", path);
    return 0;
}

static int write_file(const char *path, const char *content, sbx_err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return sbx_err_at(err, SBX_STAGE_WRITE_ETC, errno, "%s", path);
    size_t len = strlen(content);
    ssize_t n = write(fd, content, len);
    int saved = errno;
    close(fd);
    if (n != (ssize_t)len)
        return sbx_err_at(err, SBX_STAGE_WRITE_ETC, n < 0 ? saved : EIO, "%s", path);
    return 0;
}

/* A private copy of a small host file: cheaper than a bind mount and its
 * remount, and no host inode is exposed. */
static int copy_file(const char *host, const char *dst, off_t size, sbx_err *err)
{
    cleanup_fd int in = open(host, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (in < 0)
        return sbx_err_at(err, SBX_STAGE_COPY_ETC, errno, "%s", host);
    cleanup_fd int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (out < 0)
        return sbx_err_at(err, SBX_STAGE_COPY_ETC, errno, "%s", dst);
    for (off_t done = 0; done < size;) {
        ssize_t n = sendfile(out, in, NULL, (size_t)(size - done));
        if (n < 0)
            return sbx_err_at(err, SBX_STAGE_COPY_ETC, errno, "%s", host);
        if (n == 0)
            break;
        done += n;
    }
    return 0;
}

/* What a bind goes onto: a directory, or an empty file. */
static int mount_point(const char *dst, bool dir, sbx_err *err)
{
    if (dir)
        return make_dir(dst, 0755, err);
    int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0444);
    if (fd < 0)
        return sbx_err_at(err, SBX_STAGE_CREATE_MOUNT_POINT, errno, "%s", dst);
    close(fd);
    return 0;
}

/* Bring a host entry into the new root: a symlink stays a symlink, a directory
 * is bound read-only (extra flags added), a regular file is copied when
 * copy_files is set and bound otherwise; a missing one is skipped. */
static int mirror_entry(const char *host, const char *dst, unsigned long extra, bool copy_files,
                        sbx_err *err)
{
    struct stat st;
    if (lstat(host, &st) < 0)
        return 0;
    if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX];
        ssize_t n = readlink(host, target, sizeof(target) - 1);
        if (n < 0)
            return sbx_err_at(err, SBX_STAGE_READLINK, errno, "%s", host);
        target[n] = '\0';
        if (symlink(target, dst) < 0)
            return sbx_err_at(err, SBX_STAGE_SYMLINK, errno, "%s", dst);
        return 0;
    }
    if (S_ISREG(st.st_mode) && copy_files)
        return copy_file(host, dst, st.st_size, err);
    if (mount_point(dst, S_ISDIR(st.st_mode), err) < 0)
        return -1;
    return bind_mount(host, dst, MS_RDONLY | extra, err);
}

static int mount_tmpfs(const char *dst, const char *opts, unsigned long flags, sbx_err *err)
{
    if (mount("tmpfs", dst, "tmpfs", flags, opts) < 0)
        return sbx_err_at(err, SBX_STAGE_MOUNT_TMPFS, errno, "%s", dst);
    return 0;
}

static int setup_etc(const struct sbx_rootfs_opts *o, sbx_err *err)
{
    char buf[512], host[PATH_MAX], dst[PATH_MAX];
    if (make_dir(NEWROOT "/etc", 0755, err) < 0)
        return -1;
    snprintf(buf, sizeof(buf),
             "root:x:0:0:root:/root:/bin/sh\n"
             "runner:x:%u:%u:runner:/home/runner:/bin/sh\n"
             "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
             o->runner_id, o->runner_id);
    if (write_file(NEWROOT "/etc/passwd", buf, err) < 0)
        return -1;
    snprintf(buf, sizeof(buf), "root:x:0:\nrunner:x:%u:\nnogroup:x:65534:\n", o->runner_id);
    if (write_file(NEWROOT "/etc/group", buf, err) < 0 ||
        write_file(NEWROOT "/etc/hostname", "sandbox\n", err) < 0 ||
        write_file(NEWROOT "/etc/hosts",
                   "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
                   err) < 0 ||
        write_file(NEWROOT "/etc/nsswitch.conf",
                   "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"
                   "networks: files\nprotocols: files\nservices: files\n",
                   err) < 0)
        return -1;
    if (o->host_resolv) {
        if (mirror_entry("/etc/resolv.conf", NEWROOT "/etc/resolv.conf", 0, false, err) < 0)
            return -1;
    } else if (write_file(NEWROOT "/etc/resolv.conf", "nameserver 127.0.0.1\n", err) < 0) {
        return -1;
    }
    /* An environment's own root brings its /etc entries (its ld.so.cache
     * matches its libraries): its etc/ reached beneath it, no symlink
     * followed on the way; an entry that is a symlink stays one. */
    cleanup_fd int etc = -1;
    char from[32] = "/etc";
    if (o->sysroot_fd >= 0) {
        struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                               .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS};
        etc = (int)syscall(SYS_openat2, o->sysroot_fd, "etc", &how, sizeof(how));
        if (etc < 0)
            return 0; /* none: the generated files only */
        snprintf(from, sizeof(from), "/proc/self/fd/%d", etc);
    }
    for (size_t i = 0; i < SBX_ARRAY_LEN(etc_entries); i++) {
        snprintf(host, sizeof(host), "%s/%s", from, etc_entries[i]);
        snprintf(dst, sizeof(dst), NEWROOT "/etc/%s", etc_entries[i]);
        if (mirror_entry(host, dst, 0, true, err) < 0)
            return -1;
    }
    return 0;
}

static int setup_dev(const struct sbx_rootfs_opts *o, sbx_err *err)
{
    char host[64], dst[64], opts[64];
    if (make_dir(NEWROOT "/dev", 0755, err) < 0 ||
        mount_tmpfs(NEWROOT "/dev", "mode=0755,size=64k", MS_NOSUID | MS_NOEXEC, err) < 0)
        return -1;
    for (size_t i = 0; i < SBX_ARRAY_LEN(dev_nodes); i++) {
        snprintf(host, sizeof(host), "/dev/%s", dev_nodes[i]);
        snprintf(dst, sizeof(dst), NEWROOT "/dev/%s", dev_nodes[i]);
        int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0)
            return sbx_err_at(err, SBX_STAGE_CREATE_DEVICE_NODE, errno, "%s", dst);
        close(fd);
        /* Device binds keep their devices working; everything else is nodev. */
        if (mount(host, dst, NULL, MS_BIND, NULL) < 0)
            return sbx_err_at(err, SBX_STAGE_BIND_MOUNT, errno, "%s", host);
    }
    if (make_dir(NEWROOT "/dev/pts", 0755, err) < 0)
        return -1;
    if (mount("devpts", NEWROOT "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
              "newinstance,ptmxmode=0666,mode=620") < 0)
        return sbx_err_at(err, SBX_STAGE_MOUNT_DEVPTS, errno, "/dev/pts");
    if (symlink("pts/ptmx", NEWROOT "/dev/ptmx") < 0 ||
        symlink("/proc/self/fd", NEWROOT "/dev/fd") < 0 ||
        symlink("/proc/self/fd/0", NEWROOT "/dev/stdin") < 0 ||
        symlink("/proc/self/fd/1", NEWROOT "/dev/stdout") < 0 ||
        symlink("/proc/self/fd/2", NEWROOT "/dev/stderr") < 0)
        return sbx_err_at(err, SBX_STAGE_SYMLINK, errno, "/dev");
    snprintf(opts, sizeof(opts), "mode=1777,size=%llu", (unsigned long long)o->tmp_size_bytes);
    if (make_dir(NEWROOT "/dev/shm", 01777, err) < 0 ||
        mount_tmpfs(NEWROOT "/dev/shm", opts, MS_NOSUID | MS_NODEV, err) < 0)
        return -1;
    return 0;
}

/* Cut propagation before anything is mounted: nothing leaks to the host. */
static int make_private(const struct sbx_rootfs_opts *o, sbx_err *err)
{
    (void)o;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return sbx_err_at(err, SBX_STAGE_MAKE_PRIVATE, errno, "/");
    return 0;
}

static int mount_root_tmpfs(const struct sbx_rootfs_opts *o, sbx_err *err)
{
    (void)o;
    return mount_tmpfs(NEWROOT, "mode=0755,size=4m", MS_NOSUID | MS_NODEV, err);
}

/* read_only_rootfs: false: each system directory is an overlay of its
 * source under a tmpfs upper (sized like /tmp) whose root is the runner's.
 * The tmpfs is detached once the overlays hold it: the task never sees it,
 * and it goes with the sandbox's mount namespace. */
#define UPPER NEWROOT "/.upper"

static int overlay_dir(const struct sbx_rootfs_opts *o, const char *host, const char *name,
                       const char *dst, sbx_err *err)
{
    char up[PATH_MAX], work[PATH_MAX], opts[3 * PATH_MAX + 64];
    snprintf(up, sizeof(up), UPPER "/%s", name);
    if (make_dir(up, 0755, err) < 0)
        return -1;
    snprintf(up, sizeof(up), UPPER "/%s/u", name);
    snprintf(work, sizeof(work), UPPER "/%s/w", name);
    if (make_dir(up, 0755, err) < 0 || make_dir(work, 0700, err) < 0 ||
        make_dir(dst, 0755, err) < 0)
        return -1;
    if (chown(up, o->runner_id, o->runner_id) < 0)
        return sbx_err_at(err, SBX_STAGE_MKDIR, errno, "%s", up);
    snprintf(opts, sizeof(opts), "lowerdir=%s,upperdir=%s,workdir=%s,userxattr", host, up, work);
    if (mount("overlay", dst, "overlay", MS_NOSUID | MS_NODEV, opts) < 0)
        return sbx_err_at(err, SBX_STAGE_BIND_MOUNT, errno, "overlay on /%s", name);
    return 0;
}

static int bind_system_dirs(const struct sbx_rootfs_opts *o, sbx_err *err)
{
    char host[PATH_MAX], dst[PATH_MAX], from[32] = "";
    if (o->sysroot_fd >= 0)
        snprintf(from, sizeof(from), "/proc/self/fd/%d", o->sysroot_fd);
    if (o->writable_root) {
        char opts[64];
        snprintf(opts, sizeof(opts), "mode=0755,size=%llu", (unsigned long long)o->tmp_size_bytes);
        if (make_dir(UPPER, 0755, err) < 0 ||
            mount_tmpfs(UPPER, opts, MS_NOSUID | MS_NODEV, err) < 0)
            return -1;
    }
    for (size_t i = 0; i < SBX_ARRAY_LEN(system_dirs); i++) {
        struct stat st;
        snprintf(host, sizeof(host), "%s/%s", from, system_dirs[i]);
        snprintf(dst, sizeof(dst), NEWROOT "/%s", system_dirs[i]);
        int rc = o->writable_root && lstat(host, &st) == 0 && S_ISDIR(st.st_mode)
                     ? overlay_dir(o, host, system_dirs[i], dst, err)
                     : mirror_entry(host, dst, 0, false, err);
        if (rc < 0)
            return -1;
    }
    if (o->writable_root && (umount2(UPPER, MNT_DETACH) < 0 || rmdir(UPPER) < 0))
        return sbx_err_at(err, SBX_STAGE_BIND_MOUNT, errno, "detach the overlays' tmpfs");
    return 0;
}

static int mount_proc(const struct sbx_rootfs_opts *o, sbx_err *err)
{
    (void)o;
    if (make_dir(NEWROOT "/proc", 0555, err) < 0)
        return -1;
    if (mount("proc", NEWROOT "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        /* In a user namespace the kernel refuses a new proc while every
         * proc of the mount namespace has something mounted over part of it
         * (a container's read-only /proc/sys, its masked files). */
        return sbx_err_at(err, SBX_STAGE_MOUNT_PROC, errno,
                          errno == EPERM ? "proc (refused while the host's /proc is partly covered:"
                                           " a read-only /proc/sys or masked files, as in a"
                                           " container)"
                                         : "proc");
    return 0;
}

/* What a fresh /proc shows of the host that no task needs: the kernel's
 * command line and build configuration, its symbols, keys and timers. Each is
 * covered by /dev/null (reads are empty, writes vanish), as container
 * runtimes do; a kernel without one has nothing to cover. */
static int mask_proc(const struct sbx_rootfs_opts *o, sbx_err *err)
{
    (void)o;
    static const char *const masked[] = {
        "cmdline",    "config.gz",   "kallsyms",      "kcore",       "keys",
        "timer_list", "sched_debug", "latency_stats", "timer_stats",
    };
    char path[64];
    for (size_t i = 0; i < SBX_ARRAY_LEN(masked); i++) {
        snprintf(path, sizeof(path), NEWROOT "/proc/%s", masked[i]);
        if (access(path, F_OK) < 0)
            continue;
        if (mount(NEWROOT "/dev/null", path, NULL, MS_BIND, NULL) < 0)
            return sbx_err_at(err, SBX_STAGE_MOUNT_PROC, errno, "mask %s", path + strlen(NEWROOT));
    }
    return 0;
}

static int mount_tmp_and_home(const struct sbx_rootfs_opts *o, sbx_err *err)
{
    char opts[128];
    snprintf(opts, sizeof(opts), "mode=1777,size=%llu", (unsigned long long)o->tmp_size_bytes);
    if (make_dir(NEWROOT "/tmp", 01777, err) < 0 ||
        mount_tmpfs(NEWROOT "/tmp", opts, MS_NOSUID | MS_NODEV, err) < 0)
        return -1;
    snprintf(opts, sizeof(opts), "mode=0700,uid=%u,gid=%u,size=%llu", o->runner_id, o->runner_id,
             (unsigned long long)o->tmp_size_bytes);
    if (make_dir(NEWROOT "/home", 0755, err) < 0 ||
        make_dir(NEWROOT "/home/runner", 0700, err) < 0 ||
        mount_tmpfs(NEWROOT "/home/runner", opts, MS_NOSUID | MS_NODEV, err) < 0)
        return -1;
    return 0;
}

/* Whether p lies strictly beneath dir (as paths, no resolution). */
static bool path_below(const char *p, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(p, dir, n) == 0 && p[n] == '/';
}

/* The mount points strictly beneath dir in our mount namespace (a NULL-ended
 * vector, owned by the caller), read from /proc/self/mountinfo. */
static char **mounts_below(const char *dir, sbx_err *err)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return sbx_err_at(err, SBX_STAGE_BIND_MOUNT, errno, "/proc/self/mountinfo"), NULL;
    char **v = sbx_strv_dup(NULL, 0), *line = NULL;
    size_t n = 0, cap = 0;
    while (v && getline(&line, &cap, f) > 0) {
        char mp[PATH_MAX];
        if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1)
            continue;
        sbx_mountinfo_unescape(mp);
        if (!path_below(mp, dir))
            continue;
        char **nv = realloc(v, (n + 2) * sizeof(*v));
        char *dup = nv ? strdup(mp) : NULL;
        if (nv)
            v = nv;
        if (!dup) {
            sbx_strv_free(v);
            v = NULL;
            break;
        }
        v[n++] = dup;
        v[n] = NULL;
    }
    free(line);
    fclose(f);
    if (!v)
        sbx_err_at(err, SBX_STAGE_BIND_MOUNT, ENOMEM, "mounts below %s", dir);
    return v;
}

/* The host's tree at dir bound read-only with its submounts (MS_REC: a user
 * namespace may not bind a mount without the locked mounts beneath it, so a
 * plain bind fails whenever the host has any mount there), each submount
 * then covered (an empty read-only tmpfs over a directory, /dev/null over a
 * file): the task sees the tree as it is on the host whatever is mounted in
 * it, and nothing of what is mounted there. */
static int bind_host_tree(const char *host, const char *dst, sbx_err *err)
{
    if (mount(host, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
        return sbx_err_at(err, SBX_STAGE_BIND_MOUNT, errno, "%s on %s", host, dst);
    if (mount(NULL, dst, NULL,
              MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | locked_flags(dst),
              NULL) < 0)
        return sbx_err_at(err, SBX_STAGE_REMOUNT, errno, "%s", dst);
    char **v = mounts_below(dst, err);
    if (!v)
        return -1;
    int rc = 0;
    for (size_t i = 0; v[i] && rc == 0; i++) {
        bool hidden = false; /* beneath another one (covered with it), or seen before */
        for (size_t j = 0; v[j] && !hidden; j++)
            hidden = path_below(v[i], v[j]) || (j < i && strcmp(v[i], v[j]) == 0);
        struct stat st;
        if (hidden || stat(v[i], &st) < 0)
            continue;
        if (S_ISDIR(st.st_mode))
            rc = mount_tmpfs(v[i], "size=4k,mode=0555",
                             MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, err);
        else if (mount(NEWROOT "/dev/null", v[i], NULL, MS_BIND, NULL) < 0)
            rc = sbx_err_at(err, SBX_STAGE_BIND_MOUNT, errno, "cover %s", v[i]);
    }
    sbx_strv_free(v);
    return rc;
}

/* Without the mount sandbox (the operator's choice): a wider, read-only view
 * of the host's data directories under /host (bind_host_tree: what is mounted
 * in them is covered). Readable only as the file modes allow the sandbox's
 * host ids, which no other clone and not the daemon share. */
static int bind_host_view(const struct sbx_rootfs_opts *o, sbx_err *err)
{
    static const char *const wide[] = {"opt", "srv", "home", "var", "mnt"};
    char host[PATH_MAX], dst[PATH_MAX];
    if (!o->host_view)
        return 0;
    if (make_dir(NEWROOT "/host", 0755, err) < 0)
        return -1;
    for (size_t i = 0; i < SBX_ARRAY_LEN(wide); i++) {
        snprintf(host, sizeof(host), "/%s", wide[i]);
        snprintf(dst, sizeof(dst), NEWROOT "/host/%s", wide[i]);
        struct stat st;
        if (lstat(host, &st) < 0 || !S_ISDIR(st.st_mode))
            continue;
        if (make_dir(dst, 0755, err) < 0 || bind_host_tree(host, dst, err) < 0)
            return -1;
    }
    /* what must not be seen even there (the skill trees): an empty tmpfs on top */
    for (size_t i = 0; o->host_view_hidden && o->host_view_hidden[i]; i++) {
        const char *p = o->host_view_hidden[i];
        struct stat st;
        if (p[0] != '/' || snprintf(dst, sizeof(dst), NEWROOT "/host%s", p) >= (int)sizeof(dst) ||
            lstat(dst, &st) < 0 || !S_ISDIR(st.st_mode))
            continue;
        if (mount_tmpfs(dst, "size=4k,mode=0555", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                        err) < 0)
            return -1;
    }
    return 0;
}

/* The workspace through its fd: the path may lie under the host's /tmp. */
static int bind_workspace(const struct sbx_rootfs_opts *o, sbx_err *err)
{
    char host[64];
    snprintf(host, sizeof(host), "/proc/self/fd/%d", o->workspace_fd);
    if (make_dir(NEWROOT "/workspace", 0755, err) < 0 ||
        (o->workspace_fd >= 0 && bind_mount(host, NEWROOT "/workspace", 0, err) < 0))
        return -1;
    return 0;
}

/* The extra read-only binds (a skill, the claw-skill program and socket):
 * their parents made in the new root, a file or directory made to bind on. */
static int bind_extra(const struct sbx_rootfs_opts *o, sbx_err *err)
{
    char dst[PATH_MAX], src[64];
    for (size_t i = 0; i < o->n_mounts; i++) {
        const char *in = o->mount_targets[i];
        if (in[0] != '/' || snprintf(dst, sizeof(dst), NEWROOT "%s", in) >= (int)sizeof(dst))
            return sbx_err_at(err, SBX_STAGE_BIND_MOUNT, EINVAL, "%s", in);
        for (char *p = dst + strlen(NEWROOT) + 1; *p; p++)
            if (*p == '/') {
                *p = '\0';
                int rc = make_dir(dst, 0755, err);
                *p = '/';
                if (rc < 0)
                    return -1;
            }
        struct stat st;
        if (o->mount_fds[i] < 0) { /* attached later: its mount point only */
            if (mount_point(dst, !(o->mount_file && o->mount_file[i]), err) < 0)
                return -1;
            continue;
        }
        snprintf(src, sizeof(src), "/proc/self/fd/%d", o->mount_fds[i]);
        if (fstat(o->mount_fds[i], &st) < 0)
            return sbx_err_at(err, SBX_STAGE_BIND_MOUNT, errno, "%s", in);
        bool rw = o->mount_writable && o->mount_writable[i];
        if (mount_point(dst, S_ISDIR(st.st_mode), err) < 0 ||
            bind_mount(src, dst, rw ? 0 : MS_RDONLY, err) < 0)
            return -1;
    }
    return 0;
}

/* Into the new root: the old one stacked under it, then detached; / read-only. */
static int pivot(const struct sbx_rootfs_opts *o, sbx_err *err)
{
    (void)o;
    if (chdir(NEWROOT) < 0)
        return sbx_err_at(err, SBX_STAGE_PIVOT_ROOT, errno, "chdir %s", NEWROOT);
    if (syscall(SYS_pivot_root, ".", ".") < 0)
        return sbx_err_at(err, SBX_STAGE_PIVOT_ROOT, errno, "%s", NEWROOT);
    if (umount2(".", MNT_DETACH) < 0)
        return sbx_err_at(err, SBX_STAGE_DETACH_OLD_ROOT, errno, "/");
    if (chdir("/") < 0)
        return sbx_err_at(err, SBX_STAGE_PIVOT_ROOT, errno, "chdir /");
    if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
        return sbx_err_at(err, SBX_STAGE_REMOUNT_RO, errno, "/");
    if (chdir("/workspace") < 0)
        return sbx_err_at(err, SBX_STAGE_CHDIR_WORKSPACE, errno, "/workspace");
    return 0;
}

/* The root's steps, in the order of sandbox.h; each error names its stage. */
static int (*const steps[])(const struct sbx_rootfs_opts *o, sbx_err *err) = {
    make_private,       /* before anything is mounted */
    mount_root_tmpfs,   /* the new root, over /tmp of our mount namespace */
    bind_system_dirs,   /* /usr, /bin, /lib*, /sbin read-only (or overlays) */
    setup_etc,          /* a generated /etc and a few host files */
    setup_dev,          /* a minimal /dev */
    mount_proc,         /* a fresh /proc */
    mask_proc,          /* /dev/null over the host's kernel details in it */
    mount_tmp_and_home, /* size-capped tmpfs /tmp and /home/runner */
    bind_host_view,     /* /host, only without the mount sandbox */
    bind_workspace,     /* /workspace read-write */
    bind_extra,         /* a skill, claw-skill, the environment's mounts */
    pivot,              /* into it; / read-only; cwd /workspace */
};

int sbx_rootfs_setup(const struct sbx_rootfs_opts *o, sbx_err *err)
{
    for (size_t i = 0; i < SBX_ARRAY_LEN(steps); i++)
        if (steps[i](o, err) < 0)
            return -1;
    return 0;
}
