/* Workspace names, pure: the clone segments that name a workspace directory,
 * the directory they derive, and the user paths of the file API. No syscalls:
 * what these functions accept is only a string that is safe to hand to the
 * kernel-facing layer (files.h), which resolves it inside the workspace. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

#define SBX_WS_SEGMENT_MAX 64 /* bytes of a tenantCode, cloneKey or cloneId */
#define SBX_WS_PATH_MAX 4096  /* bytes of a user path, as sent */
#define SBX_WS_NAME_MAX 255   /* bytes of one component (NAME_MAX) */

/* A clone segment (field is its name for the message: "tenantCode"): 1 to 64
 * bytes of [A-Za-z0-9._-], not "." or "..". len is the value's length as
 * received, so an embedded NUL is seen and refused. Errors are EINVAL with a
 * message naming the field and the (escaped) value. */
int sbx_ws_segment_check(const char *field, const char *value, size_t len, sbx_err *err);

/* The three segments of a clone, each checked as above, and together: a
 * clone with a key may not have the id "work", whose directory
 * "<tenant>/<key>/work/work" would lie inside the keyless clone "<key>"'s
 * "<tenant>/<key>/work" (so every clone's directory is its own, and none
 * is inside another's). key NULL or "" is no key. */
int sbx_ws_clone_check(const char *tenant, const char *key, const char *id, sbx_err *err);

/* The workspace directory of a clone: "<root>/<tenant>/<key>/<id>/work", or
 * "<root>/<tenant>/<id>/work" when key is NULL or "" (no cloneKey, as in the
 * original). root must be absolute; its trailing slashes are dropped. The
 * clone is checked by sbx_ws_clone_check. Returns a string the caller frees, or NULL
 * with err. */
char *sbx_ws_dir(const char *root, const char *tenant, const char *key, const char *id,
                 sbx_err *err);

/* A user path of the file API, validated and normalised. */
struct sbx_ws_path {
    char rel[SBX_WS_PATH_MAX + 1]; /* "a/b/c"; "" is the workspace root */
    size_t len;                    /* strlen(rel) */
    bool dir;                      /* written with a trailing "/": must be a directory */
};

/* Parse a user path (len bytes, as received): relative to the workspace root,
 * where a leading "/" means that root, as users expect ("/a" is "a"); empty
 * and "." components are dropped ("a//b/./c" is "a/b/c", "/" and "." are the
 * root); a ".." component anywhere is refused (EINVAL), as are an empty path
 * and a NUL (EINVAL); over SBX_WS_PATH_MAX bytes, or a component over
 * SBX_WS_NAME_MAX, is ENAMETOOLONG. Nothing is written to out on failure. */
int sbx_ws_path_parse(const char *path, size_t len, struct sbx_ws_path *out, sbx_err *err);

/* The last component of a parsed, non-root path ("c" of "a/b/c"). */
const char *sbx_ws_path_base(const struct sbx_ws_path *p);

/* Quote s (len bytes) for a message: printable ASCII as is, '"' and '\' and
 * every other byte as \xNN; cut with "..." to fit out (at least 8 bytes).
 * Returns out. */
const char *sbx_ws_quote(const char *s, size_t len, char *out, size_t out_len);
