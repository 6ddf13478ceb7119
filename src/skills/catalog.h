/* The catalog's scan: every skill under the tiers' roots, every version of
 * it, each parsed (SKILL.md), its actions found and guard-scanned. It reads
 * whole trees, so it runs in a helper child (sbx_catalog_scan_start); the
 * loop only ever sees its JSON:
 *
 *   {"skills": [{"name", "source", "trustLevel", "rootDir", "current" (the
 *     skill's own current file, or null), "flat": bool, "versions": [{"name"
 *     ("" when flat), "dir", "actions": [...], "scripts": {action: file},
 *     "scanVerdict", "blockedReason", "md": {...} or "mdError"}]}],
 *    "leftOut": [{"source", "name", "reason"}]}
 *
 * The active version of a skill for a clone is chosen on the loop from
 * that (skills.c), since every clone has its own overlay. */
#pragma once

#include <jansson.h>
#include <stdint.h>

#include "base/err.h"

enum sbx_skill_source { SBX_SKILL_BUILTIN = 0, SBX_SKILL_SHARED, SBX_SKILL_MAPPED };
const char *sbx_skill_source_name(enum sbx_skill_source s); /* builtin, shared, mapped */
const char *sbx_skill_trust_level(enum sbx_skill_source s); /* builtin, trusted, community */

struct sbx_catalog_root {
    const char *path; /* NULL or "": none */
    enum sbx_skill_source source;
};

/* A name a skill or version may have: 1 to 64 of [A-Za-z0-9._-], not
 * starting with '.' or '-'. */
bool sbx_skill_name_ok(const char *s, size_t len);
/* Natural order of version names (v2 < v10). */
int sbx_version_cmp(const char *a, const char *b);

/* The scan, synchronously (the helper's body; unit tests call it). */
json_t *sbx_catalog_scan(const struct sbx_catalog_root *roots, size_t n, uint64_t max_bytes);

/* The scan in a child process: *pidfd and *out_fd (the read end of its
 * JSON) for the caller's loop; the child exits when it has written. */
int sbx_catalog_scan_start(const struct sbx_catalog_root *roots, size_t n, uint64_t max_bytes,
                           pid_t *pid, int *pidfd, int *out_fd, sbx_err *err);
