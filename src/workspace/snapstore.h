/* Workspace snapshots, kernel-facing: reading a workspace into a manifest
 * and its contents into blobs, writing a manifest back into a workspace,
 * and the snapshot store's files. Everything here blocks on the disk for as
 * long as a workspace takes: it runs in a helper process (runtime/
 * snapshots.c), never on the daemon's loop.
 *
 * The store, outside every workspace and its quota:
 *
 *   <dir>/<tenant>/blobs/<2 hex>/<62 hex>      a content, named by SHA-256,
 *                                              shared by the tenant's clones
 *   <dir>/<tenant>/clones/<sha256 of "key/id">/index.json    the clone's list
 *   <dir>/<tenant>/clones/<sha256 of "key/id">/manifests/<id> its manifests
 *
 * A clone reaches only its own index and manifests: an id that another
 * clone has is not in its index, so it is "not found" to it.
 *
 * Walking a workspace never follows a symlink and never leaves its
 * filesystem; writing one resolves every path with openat2 inside the
 * workspace with no symlink allowed on the way (RESOLVE_IN_ROOT |
 * RESOLVE_NO_SYMLINKS), replaces files by rename, and makes symlinks as
 * symlinks. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "base/err.h"
#include "workspace/snapshot.h"

struct sbx_snap_store {
    int tenant_fd; /* <dir>/<tenant> */
    int blobs_fd;  /* <dir>/<tenant>/blobs */
    int clone_fd;  /* the clone's directory */
};

/* Open the store of a clone (create: making what is missing, mode 0700;
 * else ENOENT when the clone has none yet). key "" is no key. s is closed
 * by sbx_snap_store_close, also after a failure. */
int sbx_snap_store_open(const char *dir, const char *tenant, const char *key, const char *id,
                        bool create, struct sbx_snap_store *s, sbx_err *err);
void sbx_snap_store_close(struct sbx_snap_store *s);

/* How a scan reads a workspace. */
struct sbx_snap_scan_opts {
    /* >= 0: every content not in the store yet is copied there (the store
     * synced once at the end); -1: nothing stored. */
    int blobs_fd;
    /* Contents are hashed (false: only those the cache knows get a hash). */
    bool hash;
    /* The stat cache (NULL: none): a regular file whose inode, size, mtime
     * and ctime are the cache's takes the cache's hash unread. */
    const struct sbx_snap_manifest *cache;
};

/* Read the workspace (an fd of its root) into m: `skills/` at its top,
 * FIFOs, sockets and devices (counted in *skipped) and other filesystems
 * mounted inside are left out. ENAMETOOLONG beyond SBX_WS_PATH_MAX or 256
 * levels. */
int sbx_snap_scan(int ws_fd, const struct sbx_snap_scan_opts *o, struct sbx_snap_manifest *m,
                  uint64_t *skipped, sbx_err *err);

/* The stat cache of a clone: the regular files of its last scan with their
 * inode, size, mtime, ctime and hash, so that a snapshot rereads only what
 * changed. Only files unchanged for 2 seconds before that scan are kept in
 * it (a write within the filesystem's timestamp granularity could otherwise
 * leave the times as they were). ctime cannot be set by a task: any change
 * of content or inode moves it. A missing or unreadable cache is empty. */
void sbx_snap_cache_read(int clone_fd, struct sbx_snap_manifest *cache);
int sbx_snap_cache_write(int clone_fd, const struct sbx_snap_manifest *m, int64_t scan_start_ns,
                         sbx_err *err);

/* Make the workspace what m says (m sorted, `skills/` untouched): entries
 * it does not name are deleted, the others made or replaced from the blobs,
 * with m's modes (set-id bits dropped) and owned by uid:gid. Files whose
 * content and kind are already right are kept (their mode fixed). Checked
 * first: every blob is there (EIO otherwise) and the bytes to write fit the
 * workspace's free space (ENOSPC otherwise), before anything changes.
 * cache (may be NULL) is the clone's stat cache, so unchanged files are
 * known without being read. */
int sbx_snap_restore(int ws_fd, int blobs_fd, const struct sbx_snap_manifest *m,
                     const struct sbx_snap_manifest *cache, uid_t uid, gid_t gid, sbx_err *err);

/* Open a blob for reading. */
int sbx_snap_blob_open(int blobs_fd, const char *hash, sbx_err *err);

/* The clone's index: {"current": id|null, "snapshots": [{id, timestamp (ms),
 * message, fileCount, size}]}, {"current": null, "snapshots": []} when
 * there is none yet. New reference in *out. */
int sbx_snap_index_read(int clone_fd, json_t **out, sbx_err *err);
/* Written whole to a temporary file, then renamed over the old one. */
int sbx_snap_index_write(int clone_fd, json_t *index, sbx_err *err);

/* A manifest of the clone: ENOENT when the clone has no snapshot of that id. */
int sbx_snap_manifest_read(int clone_fd, const char *id, struct sbx_snap_manifest *m, sbx_err *err);
/* Store text as the manifest of id (temporary file, then rename). */
int sbx_snap_manifest_write(int clone_fd, const char *id, const char *text, size_t len,
                            sbx_err *err);
void sbx_snap_manifest_remove(int clone_fd, const char *id);

/* Remove every blob that no manifest of any clone of the tenant refers to;
 * *removed and *freed (may be NULL) count them. */
int sbx_snap_gc(int tenant_fd, int blobs_fd, uint64_t *removed, uint64_t *freed, sbx_err *err);
