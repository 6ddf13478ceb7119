/* Workspace files, kernel-facing: everything the file API does on a clone's
 * workspace. Every user path (a parsed struct sbx_ws_path, see path.h) is
 * resolved by the kernel with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS |
 * RESOLVE_NO_XDEV) relative to an O_PATH fd of the workspace, never by string
 * checks: ".." and absolute symlinks planted by a task stay inside the
 * workspace ("/etc/passwd" there is <ws>/etc/passwd), /proc magic links are
 * refused (ELOOP), and so is leaving the workspace's filesystem (EXDEV).
 *
 * Errors follow base/err.h and always carry errno: EINVAL for a bad name or a
 * file of the wrong kind (400), ENOENT (404), ENOTDIR, EISDIR, ELOOP and EXDEV
 * (an escape attempt, 400). Nothing here blocks on a peer: a FIFO planted in
 * the workspace is refused, never opened for a read that waits for a writer.
 * Regular-file I/O goes through fds the caller drives in chunks. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "base/err.h"
#include "workspace/path.h"

#define SBX_WS_LIST_MAX 10000 /* default bound on the entries of one listing */

/* Create (if needed) the workspace of a clone, <root>/<tenant>[/<key>]/<id>/work
 * (key NULL or "": none), one directory at a time with mkdirat and openat2
 * (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS): a symlink planted at any step is
 * refused (ELOOP), never followed. root is the operator's and must exist.
 * Directories this call creates are mode 0750 (tenant, key, id: the daemon's)
 * and 0700 for work, which belongs to uid:gid (the clone's host ids; made so
 * even when work already existed with other owners). On success *ws_fd is an
 * O_PATH | O_DIRECTORY fd of work, which the caller closes. */
int sbx_ws_ensure(const char *root, const char *tenant, const char *key, const char *id, uid_t uid,
                  gid_t gid, int *ws_fd, sbx_err *err);

/* Open rel ("" the workspace itself) as the file API resolves a path:
 * inside the workspace, no magic links, no other filesystem; no_symlinks
 * also refuses any symlink on the way (ELOOP) instead of following it
 * inside. An fd, or -1 with errno (ENOSYS without openat2). */
int sbx_ws_openat(int ws_fd, const char *rel, int flags, bool no_symlinks);

enum sbx_ws_type {
    SBX_WS_FILE,
    SBX_WS_DIR,
    SBX_WS_SYMLINK,
    SBX_WS_OTHER, /* fifo, socket, device */
};
/* "file", "dir", "symlink", "other": the names the API shows. */
const char *sbx_ws_type_name(enum sbx_ws_type type);

struct sbx_ws_stat {
    enum sbx_ws_type type;
    uint64_t size;
    unsigned mode; /* permission bits, 07777 */
    struct timespec mtime;
};

/* Stat a path. follow: a final symlink is followed (inside the workspace, as
 * every symlink is); otherwise a symlink reports itself. */
int sbx_ws_stat(int ws_fd, const struct sbx_ws_path *p, bool follow, struct sbx_ws_stat *st,
                sbx_err *err);

struct sbx_ws_entry {
    char *name;
    struct sbx_ws_stat st; /* of the entry itself: symlinks are not followed */
};
struct sbx_ws_listing {
    struct sbx_ws_entry *entries; /* sorted by name */
    size_t n;
    bool truncated; /* the directory had more than max entries */
};

/* List a directory (a symlink to one is followed, inside the workspace):
 * at most max entries (0: SBX_WS_LIST_MAX; beyond it, the first max the
 * directory yields, and truncated), "." and ".." left out. On success
 * the caller frees *out with sbx_ws_listing_free. A non-directory is ENOTDIR. */
int sbx_ws_list(int ws_fd, const struct sbx_ws_path *p, size_t max, struct sbx_ws_listing *out,
                sbx_err *err);
void sbx_ws_listing_free(struct sbx_ws_listing *l);

/* A download: a regular file opened for reading. */
struct sbx_ws_download {
    int fd;                /* O_RDONLY; -1 when closed. The caller may steal it
                              (sendfile, evbuffer_add_file), sending st.size bytes */
    struct sbx_ws_stat st; /* at open time; st.size bounds what is read */
    uint64_t offset;       /* bytes handed out so far */
};

/* Open a regular file for download. A directory is EISDIR (list it instead);
 * a FIFO, socket or device is EINVAL, refused without blocking (opened with
 * O_NONBLOCK, checked with fstat). */
int sbx_ws_download_open(int ws_fd, const struct sbx_ws_path *p, struct sbx_ws_download *dl,
                         sbx_err *err);
/* Next chunk, at most len bytes: returns the count, 0 at the end (st.size
 * bytes, even if the file grew since), -1 with err on failure or when the
 * file shrank (EIO), so a promised Content-Length is never silently broken. */
ssize_t sbx_ws_download_read(struct sbx_ws_download *dl, void *buf, size_t len, sbx_err *err);
/* Close (idempotent; a zeroed or stolen-from struct is fine after fd = -1). */
void sbx_ws_download_close(struct sbx_ws_download *dl);

/* An upload in progress: bytes go to a temporary file next to the target,
 * renamed into place on commit, so a failed or abandoned upload leaves no
 * partial file (after a daemon crash, at most a ".sbx-upload-*" file). */
struct sbx_ws_upload {
    bool active;   /* between a successful begin and commit/abort */
    int fd;        /* the temporary file */
    int dir_fd;    /* O_PATH fd of the target's directory */
    uint64_t size; /* bytes written */
    char name[SBX_WS_NAME_MAX + 1];
    char tmp[32];
    /* Parents this upload created, removed again (when still empty) on abort:
     * the chain made (relative) below made_fd, or made_fd -1. */
    int made_fd;
    char made[SBX_WS_PATH_MAX + 1];
};

/* Begin an upload to p: parents are created as needed (0755, owned by
 * uid:gid), each step resolved inside the workspace; the file will be 0644,
 * owned by uid:gid. The root, a "dir/" path, or an existing directory is
 * EISDIR. A symlink at the target is replaced on commit, never written
 * through. up may be uninitialised; on failure it is left inactive. */
int sbx_ws_upload_begin(int ws_fd, const struct sbx_ws_path *p, uid_t uid, gid_t gid,
                        struct sbx_ws_upload *up, sbx_err *err);
/* Append len bytes (all of them, or an error: ENOSPC, EDQUOT, EFBIG…). */
int sbx_ws_upload_write(struct sbx_ws_upload *up, const void *buf, size_t len, sbx_err *err);
/* Rename the file into place (no fsync: the loop must not wait on the disk;
 * a crash may lose the upload, never leave a torn file under its name). On
 * failure the upload is aborted. Either way
 * up is inactive afterwards. */
int sbx_ws_upload_commit(struct sbx_ws_upload *up, sbx_err *err);
/* Drop the temporary file and the parents begin created (those still empty).
 * A no-op on an inactive upload (and on a zeroed struct). */
void sbx_ws_upload_abort(struct sbx_ws_upload *up);

/* Delete a file, a symlink (never its target) or a directory tree, which is
 * walked with unlinkat on directory fds, never by path strings: symlinks in it
 * are removed, not followed, and a mount inside it is not entered (EXDEV).
 * Any depth, with at most 64 directory fds open (deeper subtrees are moved up
 * inside the tree being deleted, as ".sbx-delete-N", and emptied from there).
 * The workspace root itself is refused (EINVAL); a "dir/" path that is not a
 * directory is ENOTDIR. Synchronous: time grows with the tree, so a caller on
 * the event loop may prefer to run it in a helper child for large trees. */
int sbx_ws_delete(int ws_fd, const struct sbx_ws_path *p, sbx_err *err);

/* Make the directory p (and its missing parents, as an upload does), mode
 * mode, owned by uid:gid; an existing directory is fine, anything else
 * there is EEXIST. */
int sbx_ws_mkdir(int ws_fd, const struct sbx_ws_path *p, unsigned mode, uid_t uid, gid_t gid,
                 sbx_err *err);
/* Move from to to (missing parents of to are made), each resolved inside
 * the workspace; a symlink is moved, not followed. The root is EINVAL. */
int sbx_ws_rename(int ws_fd, const struct sbx_ws_path *from, const struct sbx_ws_path *to,
                  uid_t uid, gid_t gid, sbx_err *err);
/* Set p's permission bits (07777); a symlink is refused (EINVAL). */
int sbx_ws_chmod(int ws_fd, const struct sbx_ws_path *p, unsigned mode, sbx_err *err);
