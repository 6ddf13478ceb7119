/* The sandbox's root filesystem, built inside its new mount namespace. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

struct sbx_rootfs_opts {
    int workspace_fd; /* O_PATH fd of the host workspace directory; -1: an empty mount point */
    uint64_t tmp_size_bytes;             /* /tmp, /home/runner and /dev/shm tmpfs size */
    bool host_resolv;                    /* bind the host's resolv.conf (net host) */
    bool host_view;                      /* the host's root filesystem, read-only, at /host */
    const char *const *host_view_hidden; /* host paths masked in it, NULL-terminated */
    unsigned runner_id;
    /* Extra binds: O_PATH fds of their host sources and where they go;
     * read-only unless mount_writable[i] (NULL: all read-only). */
    const int *mount_fds;
    const char *const *mount_targets;
    const bool *mount_writable;
    const bool *mount_file; /* a mount_fds[i] of -1: only a mount point, a file if set */
    size_t n_mounts;
    int sysroot_fd;     /* O_PATH fd of the environment's root directory; -1: the host's */
    bool writable_root; /* overlay (tmpfs upper) over each system directory */
};

/* In the calling process's own (fresh) mount namespace: make / private, build a
 * tmpfs root with read-only binds of the host's system directories, a
 * generated /etc, fresh /proc, minimal /dev, tmpfs /tmp and home, /workspace,
 * pivot into it and leave the working directory at /workspace. Errors carry
 * the stage ("mount /proc"). */
int sbx_rootfs_setup(const struct sbx_rootfs_opts *o, sbx_err *err);
