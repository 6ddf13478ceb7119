/* Workspace quotas: each clone's workspace is its own ext4 filesystem, a
 * sparse image file mounted (through a loop device) on the clone's work
 * directory. A task that fills it gets ENOSPC from its own filesystem; other
 * clones' workspaces and the daemon's state directory are other filesystems.
 *
 *   <images_dir>/<sha256 of mount_point, hex>.img   one per clone, sparse
 *
 * Costs: creating an image formats it with mkfs.ext4 (a child process:
 * ~5-15 ms measured, up to ~100 ms on a slow disk, once per clone, the
 * first time its workspace is used); attaching and mounting an existing image
 * is ~1 ms (each daemon start, or after a release). sbx_ws_quota_ensure does
 * both and waits; a caller on an event loop can format first without waiting
 * (sbx_ws_quota_format_start, then _finish when the pidfd is readable).
 *
 * The image is sparse: it takes host space only as the clone writes; a
 * caller accounts the sizes promised against free space before making one
 * (sbx_ws_quota_room), so that the images never fill the filesystem. The usable space is a little
 * under size_bytes: ext4's inode tables (one inode per 8 KiB) and journal take ~6.5% (1 GiB gives
 * 957 MiB; nothing is reserved for root).
 *
 * Needs root (CAP_SYS_ADMIN): /dev/loop-control, mount(2). No losetup or mount
 * processes: the loop device is configured with ioctls (LOOP_CONFIGURE with
 * LO_FLAGS_AUTOCLEAR), so unmounting frees it. Errors carry the stage
 * ("image", "mkfs", "loop", "mount") and errno. */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"

#define SBX_WS_QUOTA_MIN (16ull << 20) /* smallest image: 16 MiB */
#define SBX_WS_QUOTA_NAME_MAX 68       /* 64 hex digits + ".img" */

/* Make mount_point (absolute: a clone's ".../work" directory, which must
 * exist, e.g. made by sbx_ws_ensure) a mount of the clone's image:
 *  - already mounted there (on a loop device backed by this image): no-op
 *    apart from the root's owner and mode below;
 *  - the image exists (a restart, or after a release): attached and mounted
 *    as it is, never reformatted (its size stays what it was made with);
 *  - otherwise a sparse image of size_bytes (>= SBX_WS_QUOTA_MIN) is made and
 *    formatted as "<name>.img.tmp", then renamed into place, so an existing
 *    "<name>.img" is always a formatted one, even after a crash.
 * The filesystem is mounted nosuid,nodev; its root belongs to uid:gid with
 * mode 0700 (lost+found is removed after formatting). Anything else
 * already mounted on mount_point is EBUSY. Note: an O_PATH fd of mount_point
 * opened before this call (sbx_ws_ensure's) refers to the directory under
 * the mount: reopen it afterwards. */
int sbx_ws_quota_ensure(const char *images_dir, const char *mount_point, uint64_t size_bytes,
                        uid_t uid, gid_t gid, sbx_err *err);

/* Formatting a new image without waiting for mkfs.ext4 (an event loop
 * watches pidfd): start, then finish once pidfd is readable. */
struct sbx_ws_format {
    pid_t pid;            /* mkfs.ext4, -1 when none */
    int pidfd;            /* readable once it has ended */
    int log_fd;           /* its stderr */
    char tmp[PATH_MAX];   /* the image being formatted */
    char image[PATH_MAX]; /* where it goes once formatted */
};
/* Whether images_dir's filesystem can promise a new image of size_bytes: its
 * free space, less what the images already there may still grow by (their
 * size less the blocks they hold), less the new size, must leave
 * reserve_bytes. ENOSPC (stage "image", naming the figures) when not. Sparse
 * images then never fill the filesystem, the store's or another's. */
int sbx_ws_quota_room(const char *images_dir, uint64_t size_bytes, uint64_t reserve_bytes,
                      sbx_err *err);
/* Whether mount_point's image exists: sbx_ws_quota_ensure then only attaches
 * and mounts it (~1 ms), no mkfs. */
bool sbx_ws_quota_image_exists(const char *images_dir, const char *mount_point);
/* Make mount_point's image as a sparse "<name>.img.tmp" of size_bytes and
 * start formatting it. f is the caller's until finish or abort. */
int sbx_ws_quota_format_start(const char *images_dir, const char *mount_point, uint64_t size_bytes,
                              uid_t uid, gid_t gid, struct sbx_ws_format *f, sbx_err *err);
/* Reap mkfs (waiting for it if it still runs) and put the image under its
 * name; -1 with mkfs's message, the partial image removed. */
int sbx_ws_quota_format_finish(struct sbx_ws_format *f, sbx_err *err);
/* Kill mkfs, reap it, remove the partial image. */
void sbx_ws_quota_format_abort(struct sbx_ws_format *f);

/* The same work without waiting on an event loop: a helper child (see
 * sbx_ws_helper_fork) formats when needed, attaches and mounts
 * (sbx_ws_quota_ensure), or unmounts (sbx_ws_quota_release); the loop
 * watches pidfd and calls finish once it is readable. A job is the
 * caller's until finish or abort. */
struct sbx_ws_job {
    pid_t pid; /* -1 when none */
    int pidfd; /* readable once it has ended */
    int out_fd;
};
int sbx_ws_quota_mount_start(const char *images_dir, const char *mount_point, uint64_t size_bytes,
                             uid_t uid, gid_t gid, struct sbx_ws_job *j, sbx_err *err);
int sbx_ws_quota_unmount_start(const char *mount_point, struct sbx_ws_job *j, sbx_err *err);
/* Reap it (waiting if it still runs): 0, or -1 with the child's error. */
int sbx_ws_quota_job_finish(struct sbx_ws_job *j, sbx_err *err);
/* Kill it and reap it (a mount it made stays: ensure finds it later). */
void sbx_ws_quota_job_abort(struct sbx_ws_job *j);

/* Unmount the clone's image from mount_point (MNT_DETACH: files still open
 * keep it alive until closed; with AUTOCLEAR the loop device then frees
 * itself). Not mounted: a no-op. The image file stays. */
int sbx_ws_quota_release(const char *mount_point, sbx_err *err);
/* Release every workspace image mounted below root (an absolute directory),
 * including those of an earlier run that crashed. Returns how many. */
int sbx_ws_quota_release_all(const char *root);

/* Bytes used and the filesystem's size (statvfs of mount_point). */
int sbx_ws_quota_usage(const char *mount_point, uint64_t *used, uint64_t *total, sbx_err *err);

/* The image's file name for mount_point ("<64 hex>.img"): the SHA-256 of the
 * path as given (trailing slashes dropped), so any path maps to a fixed-size
 * name made of [0-9a-f.] only. out holds SBX_WS_QUOTA_NAME_MAX + 1 bytes.
 * Fails (stage "image") only when libcrypto cannot hash. */
int sbx_ws_quota_image_name(const char *mount_point, char out[SBX_WS_QUOTA_NAME_MAX + 1],
                            sbx_err *err);
