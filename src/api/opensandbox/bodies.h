/* The OpenSandbox request bodies as data: each function checks a body (or
 * one entry of one) and says what it asks for, or why it is refused; no
 * request, sandbox or workspace is touched. The handlers of lifecycle.c,
 * execd.c and files.c act on what these return; tests/fuzz/fuzz_opensandbox
 * drives them directly. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "base/err.h"
#include "isolate/cgroup.h"
#include "runtime/settings.h"
#include "workspace/path.h"

/* The longest timeout (and renewal) of a sandbox. */
#define OS_TTL_MAX_S (7 * 24 * 3600)

/* POST /v1/sandboxes, checked: what the sandbox is made of. The pointers
 * are borrowed from the body. */
struct os_create {
    const char *image;       /* image.uri: one of set's environments, or NULL with */
    const char *snapshot_id; /* ... the snapshot to restore (not checked here) */
    json_t *entrypoint;      /* NULL or an array of strings */
    json_t *to;              /* timeout: NULL, null or whole seconds in range */
    struct sbx_cg_limits lim;
};
int os_create_parse(const struct sbx_runtime_settings *set, json_t *body, struct os_create *out,
                    sbx_err *err);

/* networkPolicy {defaultAction, egress: [{action, target}]} as our network
 * request {default, allow, deny} (a new reference); NULL when there is none
 * (err untouched) or it is refused (err set). */
json_t *os_policy_network(json_t *np, sbx_err *err);

/* PATCH .../metadata: a merge patch of strings (null removes a key) applied
 * to metadata; nothing changes when one value is refused. */
int os_metadata_merge(json_t *metadata, json_t *patch, sbx_err *err);

/* execd POST /command. */
struct os_run {
    const char *command;
    const char *const *argv;
    const char *cwd;
    json_t *envs;
    const char *stdin_data;
    double timeout_s;
    bool background, code;
};
/* Its body (fields already checked) into run; the pointers are borrowed. */
int os_command_parse(const struct sbx_runtime_settings *set, json_t *body, struct os_run *run,
                     sbx_err *err);

/* A path of the sandbox's view into p: "/workspace/a", "a". */
int os_path(const char *path, struct sbx_ws_path *p, sbx_err *err);
/* 755 (or "755") as the API writes a mode: 0755; -1 when not octal digits. */
int os_mode_parse(json_t *v);
/* One entry k: {mode} of POST /directories (mkdir) or /files/permissions:
 * the path and the mode (mkdir: 0755 when none is given; chmod: -2). */
int os_mode_entry(const char *k, json_t *v, bool mkdir, struct sbx_ws_path *p, int *mode,
                  sbx_err *err);
/* One entry {src, dest} of POST /files/mv. */
int os_move_entry(json_t *item, struct sbx_ws_path *from, struct sbx_ws_path *to, sbx_err *err);
/* One entry k: {old, new} of POST /files/replace. */
int os_replace_entry(const char *k, json_t *v, struct sbx_ws_path *p, const char **old,
                     const char **new_text, sbx_err *err);
/* The metadata part of an upload, NUL-terminated text: {path, mode}; *mode
 * is left as it is when none is given. */
int os_upload_meta_parse(const char *text, struct sbx_ws_path *p, int *mode, sbx_err *err);
