/* Workspace snapshots, pure: the manifest of a snapshot, its text form and
 * id, the difference of two manifests, and which snapshots retention drops.
 * No syscalls (snapstore.h does the files).
 *
 * A manifest lists every entry of a workspace but `skills/` and special
 * files (FIFOs, sockets, devices), sorted by path (bytewise, so a directory
 * comes before what it holds). Its text, the thing stored and hashed:
 *
 *     sbx-manifest 1
 *     d 0755 0 - src
 *     f 0644 12 <sha256 hex> src/a.txt
 *     h 0644 12 <sha256 hex> src/b.txt src/a.txt     (a hard link of a.txt)
 *     l 0777 6 - src/link ../etc                      (a symlink and its target)
 *
 * Paths and targets are written with every byte <= 0x20, 0x7f and '%' as
 * %XX, so fields never hold a blank. A snapshot's id is the SHA-256 of that
 * text: equal contents (paths, kinds, modes, contents, targets) give equal
 * ids, whatever the times. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/digest.h"
#include "base/err.h"

#define SBX_SNAP_ID_LEN 64 /* hex digits of an id */

enum sbx_snap_type {
    SBX_SNAP_FILE = 'f',
    SBX_SNAP_DIR = 'd',
    SBX_SNAP_SYMLINK = 'l',
    SBX_SNAP_LINK = 'h', /* a hard link of an earlier regular file (link) */
};

struct sbx_snap_entry {
    char *path; /* "a/b", relative to the workspace */
    enum sbx_snap_type type;
    unsigned mode;                  /* permission bits, 07777 */
    uint64_t size;                  /* file bytes (0 for a directory, target bytes for a symlink) */
    char hash[SBX_SHA256_HEX_SIZE]; /* file and link: the content's SHA-256; else "" */
    char *target;                   /* symlink: its target; link: the first path; else NULL */
    /* Not part of the text: what a scan saw, for the restore's decisions
     * and the stat cache (snapstore.h). */
    uint64_t ino;
    uint32_t nlink;
    int64_t mtime_ns, ctime_ns;
};

struct sbx_snap_manifest {
    struct sbx_snap_entry *e;
    size_t n, cap;
};

/* Append an entry (copies path and target). */
int sbx_snap_add(struct sbx_snap_manifest *m, const char *path, enum sbx_snap_type type,
                 unsigned mode, uint64_t size, const char *hash, const char *target, sbx_err *err);
/* Sort by path (a scan adds in directory order). */
void sbx_snap_sort(struct sbx_snap_manifest *m);
void sbx_snap_free(struct sbx_snap_manifest *m);
/* The entry of path (the manifest sorted), or NULL. */
const struct sbx_snap_entry *sbx_snap_find(const struct sbx_snap_manifest *m, const char *path);

/* The text above, sorted first; *out (NUL-terminated, *len bytes) is the
 * caller's to free. */
int sbx_snap_format(struct sbx_snap_manifest *m, char **out, size_t *len, sbx_err *err);
/* Parse a text made by sbx_snap_format: EINVAL naming the line when it is
 * not one (unsorted, a duplicate, a bad field, a link to no earlier file). */
int sbx_snap_parse(const char *text, size_t len, struct sbx_snap_manifest *m, sbx_err *err);
/* The id of a manifest text: SHA-256 hex. */
int sbx_snap_id(const char *text, size_t len, char id[SBX_SHA256_HEX_SIZE], sbx_err *err);
/* Whether s is an id: 64 lower-case hex digits (all a route accepts, so an
 * id can never name a path). */
bool sbx_snap_id_valid(const char *s);
/* fileCount (entries that are not directories) and size (their bytes). */
void sbx_snap_totals(const struct sbx_snap_manifest *m, uint64_t *files, uint64_t *bytes);

/* Differences from a to b (both sorted), one entry a call, in path order:
 * added (in b only), deleted (in a only), modified (kind, mode, content or
 * target differ). A hard link and a file of the same content and mode are
 * the same. old/new are NULL for an added/deleted path. */
enum sbx_snap_change { SBX_SNAP_ADDED, SBX_SNAP_MODIFIED, SBX_SNAP_DELETED };
typedef int (*sbx_snap_diff_fn)(void *ud, enum sbx_snap_change change,
                                const struct sbx_snap_entry *old,
                                const struct sbx_snap_entry *new_);
/* Stops at the first callback that returns < 0 and returns that. */
int sbx_snap_diff(const struct sbx_snap_manifest *a, const struct sbx_snap_manifest *b,
                  sbx_snap_diff_fn fn, void *ud);

/* Retention: a snapshot and the blobs it refers to. */
struct sbx_snap_keep {
    int64_t timestamp_ms;
    bool current;                        /* never dropped */
    const struct sbx_snap_manifest *man; /* its entries (hash, size) */
    bool drop;                           /* out: retention drops it */
};
struct sbx_snap_limits {
    uint64_t max_count; /* 0: no bound */
    int64_t max_age_ms; /* 0: no bound */
    uint64_t max_bytes; /* of distinct contents; 0: no bound */
};
/* Mark the snapshots to drop, oldest first, until the rest (the current one
 * always among them) are at most max_count, none older than max_age_ms
 * before now_ms, and the distinct contents they refer to take at most
 * max_bytes (sbx_snap_unique_bytes). *kept_bytes gets what the kept ones
 * take. s[] in any order. */
int sbx_snap_retain(struct sbx_snap_keep *s, size_t n, const struct sbx_snap_limits *lim,
                    int64_t now_ms, uint64_t *kept_bytes, sbx_err *err);
/* Bytes of the distinct contents (by hash) the manifests refer to. */
int sbx_snap_unique_bytes(const struct sbx_snap_manifest *const *m, size_t n, uint64_t *bytes,
                          sbx_err *err);

/* Percent-escape s (the form paths take in the text): at most 3 * strlen +
 * 1 bytes at out. */
void sbx_snap_escape(const char *s, char *out);
/* The reverse, in place; false when s is not such a form (a bare blank or
 * control byte, a cut or a %00 escape). */
bool sbx_snap_unescape(char *s);
