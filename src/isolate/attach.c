/* A clone's workspace and binds as detached mounts, for a pooled sandbox
 * built for any clone (spec.attach_later; see sbx_attach_open in
 * isolate/sandbox.h). Run by the spawner: privileged, single-threaded, small
 * enough that the short-lived child holding the idmap's user namespace is a
 * cheap clone. */
#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "isolate/sandbox.h"
#include "isolate/stage.h"

#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef OPEN_TREE_CLOEXEC
#define OPEN_TREE_CLOEXEC O_CLOEXEC
#endif

/* A user namespace whose ids from..from+65535 are the host's to..to+65535:
 * a child made in it waits (on a pipe) while its maps are written and the
 * namespace opened, then goes. */
static int idmap_userns(uint32_t from, uint32_t to, sbx_err *err)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return sbx_err_at(err, SBX_STAGE_ATTACH, errno, "pipe");
    pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, NULL);
    if (pid == 0) {
        char c;
        close(p[1]);
        (void)!read(p[0], &c, 1);
        _exit(0);
    }
    int saved = errno, fd = -1;
    close(p[0]);
    if (pid < 0) {
        close(p[1]);
        return sbx_err_at(err, SBX_STAGE_ATTACH, saved, "clone a user namespace");
    }
    char ns[64];
    snprintf(ns, sizeof(ns), "/proc/%d/ns/user", (int)pid);
    if (sbx_id_map_write(pid, "uid_map", from, to, SBX_STAGE_ATTACH, err) == 0 &&
        sbx_id_map_write(pid, "gid_map", from, to, SBX_STAGE_ATTACH, err) == 0 &&
        (fd = open(ns, O_RDONLY | O_CLOEXEC)) < 0)
        sbx_err_at(err, SBX_STAGE_ATTACH, errno, "open %s", ns);
    close(p[1]);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    return fd;
}

/* The idmaps' user namespaces made lately, by (from, to): a clone taking a
 * range it took before (ranges are few and reused) costs no clone. A
 * namespace holds no process, only its map; the fds are close-on-exec. */
#define USERNS_KEPT 32
static struct {
    uint32_t from, to;
    int fd; /* 0: the slot is empty (fd 0 is the spawner's stdin) */
    uint64_t used;
} kept[USERNS_KEPT];
static uint64_t uses;

/* The namespace for (from, to), the cache's (not the caller's to close). */
static int userns_for(uint32_t from, uint32_t to, sbx_err *err)
{
    size_t lru = 0;
    for (size_t i = 0; i < USERNS_KEPT; i++) {
        if (kept[i].fd > 0 && kept[i].from == from && kept[i].to == to) {
            kept[i].used = ++uses;
            return kept[i].fd;
        }
        if (kept[i].used < kept[lru].used)
            lru = i;
    }
    int fd = idmap_userns(from, to, err);
    if (fd < 0)
        return -1;
    if (kept[lru].fd > 0)
        close(kept[lru].fd);
    kept[lru].from = from, kept[lru].to = to, kept[lru].fd = fd, kept[lru].used = ++uses;
    return fd;
}

/* A detached copy of the mount at path (not of what is mounted beneath). */
static int clone_tree(const char *path, uint64_t set, int userns, sbx_err *err)
{
    cleanup_fd int fd = (int)syscall(SYS_open_tree, AT_FDCWD, path,
                                     OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_NO_AUTOMOUNT);
    if (fd < 0)
        return sbx_err_at(err, SBX_STAGE_ATTACH, errno, "open_tree %s", path);
    struct mount_attr attr = {.attr_set = set, .userns_fd = userns >= 0 ? (uint64_t)userns : 0};
    if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
        return sbx_err_at(err, SBX_STAGE_ATTACH, errno, "%s%s",
                          userns >= 0 ? "idmap " : "mount_setattr ", path);
    return sbx_steal_fd(&fd);
}

int sbx_attach_open(const struct sbx_attach *a, int *fds, sbx_err *err)
{
    if (a->n_mounts > SBX_MOUNTS_MAX)
        return sbx_err_at(err, SBX_STAGE_ATTACH, E2BIG, "%zu mounts", a->n_mounts);
    /* The workspace's root is the clone's runner's, as a cold spawn makes it. */
    if (sbx_workspace_own(a->workspace, a->from_base + a->uid, a->from_base + a->gid, err) < 0)
        return -1;
    int userns = userns_for(a->from_base, a->to_base, err);
    if (userns < 0)
        return -1;
    size_t n = 0;
    fds[n] = clone_tree(a->workspace, MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                        userns, err);
    if (fds[n] >= 0)
        for (n = 1; n <= a->n_mounts; n++) {
            const struct sbx_mount *m = &a->mounts[n - 1];
            uint64_t set =
                MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (m->writable ? 0 : MOUNT_ATTR_RDONLY);
            if ((fds[n] = clone_tree(m->host, set, -1, err)) < 0)
                break;
        }
    if (n <= a->n_mounts) {
        for (size_t i = 0; i < n; i++)
            close(fds[i]);
        return -1;
    }
    return 0;
}
