/* libFuzzer target: the OpenSandbox request bodies (api/opensandbox/bodies.c)
 * as the handlers of lifecycle.c, execd.c and files.c meet them. The first
 * byte picks the body, the rest is the body as sent:
 *   0 POST /v1/sandboxes (create: image or snapshotId, entrypoint, timeout,
 *     resourceLimits, env, metadata, networkPolicy)
 *   1 PATCH /v1/sandboxes/{id}/metadata (merge patch)
 *   2 execd POST /command
 *   3 POST /directories, 4 POST /files/permissions ({path: {mode}})
 *   5 POST /files/mv ([{src, dest}])
 *   6 POST /files/replace ({path: {old, new}})
 *   7 the metadata part of a multipart upload ({path, mode})
 * Beyond no crash, leak or hang: a refusal says why; what is accepted is
 * within the daemon's settings (a known image, limits at most the maxima, a
 * timeout in range); a refused metadata patch changes nothing and an
 * accepted one leaves only strings; an accepted path stays inside the
 * workspace (no "..", no leading "/"). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/json.h"
#include "api/opensandbox/bodies.h"

/* The field lists of the handlers (h_create, h_command). */
static const char *const create_fields[] = {
    "image",    "entrypoint",      "resourceLimits", "resourceRequests", "timeout",
    "env",      "metadata",        "networkPolicy",  "extensions",       "secureAccess",
    "platform", "credentialProxy", "volumes",        "snapshotId",       NULL};
static const char *const command_fields[] = {"command", "cwd", "background", "timeout",
                                             "envs",    "uid", "gid",        NULL};

static struct sbx_environment envs[] = {{.name = "python"}, {.name = "node"}, {.name = "shell"}};
static const struct sbx_runtime_settings set = {
    .environments = envs,
    .n_environments = sizeof(envs) / sizeof(envs[0]),
    .max = {.timeout_s = 3600, .memory_bytes = 8ull << 30, .cpu_cores = 4},
};

static void refused(const sbx_err *e)
{
    if (!e->errnum || !e->msg[0])
        __builtin_trap(); /* a refusal always says why */
}

static void path_inside(const struct sbx_ws_path *p)
{
    if (p->rel[0] == '/' || strlen(p->rel) != p->len)
        __builtin_trap();
    for (const char *s = p->rel; *s;) {
        size_t n = strcspn(s, "/");
        if ((n == 2 && s[0] == '.' && s[1] == '.') || (n == 1 && s[0] == '.') || n == 0)
            __builtin_trap();
        s += n;
        s += *s == '/';
    }
}

static void create(json_t *body)
{
    sbx_err e = {0};
    struct os_create c;
    if (os_create_parse(&set, body, &c, &e) < 0)
        return refused(&e);
    /* A known image, or (only) a snapshot to restore, named. */
    if ((c.snapshot_id ? c.image || !*c.snapshot_id || json_object_get(body, "image")
                       : !sbx_settings_environment(&set, c.image)) ||
        c.lim.cpu_cores > set.max.cpu_cores || c.lim.cpu_cores < 0 ||
        c.lim.memory_bytes > set.max.memory_bytes)
        __builtin_trap();
    if (c.entrypoint && !json_is_array(c.entrypoint))
        __builtin_trap();
    if (json_is_integer(c.to) &&
        (json_integer_value(c.to) < 1 || json_integer_value(c.to) > OS_TTL_MAX_S))
        __builtin_trap();
    /* What os_box_apply_policy gives the runtime: lists of strings. */
    json_t *net = os_policy_network(json_object_get(body, "networkPolicy"), &e);
    if (e.errnum)
        __builtin_trap(); /* create checked it */
    const char *lists[] = {"allow", "deny"};
    for (size_t l = 0; net && l < 2; l++) {
        size_t i;
        json_t *t;
        json_array_foreach(json_object_get(net, lists[l]), i, t) if (!json_is_string(t))
            __builtin_trap();
    }
    json_decref(net);
}

static void metadata(json_t *patch)
{
    json_t *m = json_pack("{s:s, s:s}", "team", "a", "owner", "b");
    json_t *before = json_deep_copy(m);
    sbx_err e = {0};
    if (os_metadata_merge(m, patch, &e) < 0) {
        refused(&e);
        if (!json_equal(m, before))
            __builtin_trap(); /* a refused patch changes nothing */
    } else {
        const char *k;
        json_t *v;
        json_object_foreach(m, k, v) if (!json_is_string(v)) __builtin_trap();
    }
    json_decref(before);
    json_decref(m);
}

static void command(json_t *body)
{
    sbx_err e = {0};
    struct os_run r;
    if (os_command_parse(&set, body, &r, &e) < 0)
        return refused(&e);
    if (!r.command || !*r.command || r.timeout_s < 0 || r.timeout_s > set.max.timeout_s ||
        (r.envs && !json_is_object(r.envs)))
        __builtin_trap();
}

static void files(int kind, json_t *body)
{
    sbx_err e = {0};
    const char *k;
    json_t *v;
    size_t i;
    struct sbx_ws_path p, q;
    if (kind == 5) {
        json_array_foreach(body, i, v)
        {
            if (os_move_entry(v, &p, &q, &e) < 0)
                return refused(&e);
            path_inside(&p);
            path_inside(&q);
        }
        return;
    }
    json_object_foreach(body, k, v)
    {
        int mode;
        const char *old, *new;
        if (kind == 6 ? os_replace_entry(k, v, &p, &old, &new, &e) < 0
                      : os_mode_entry(k, v, kind == 3, &p, &mode, &e) < 0)
            return refused(&e);
        path_inside(&p);
        if (kind != 6 && (mode < -2 || mode == -1 || mode > 07777))
            __builtin_trap();
        if (kind == 6 && (!old || !*old || !new))
            __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int kind = data[0] % 8;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    sbx_err e = {0};
    if (kind == 7) { /* the upload's metadata part, NUL-terminated as files.c makes it */
        char *s = malloc(len + 1);
        memcpy(s, text, len);
        s[len] = '\0';
        struct sbx_ws_path p;
        int mode = -1;
        if (os_upload_meta_parse(s, &p, &mode, &e) < 0)
            refused(&e);
        else if (path_inside(&p), mode < -1 || mode > 07777)
            __builtin_trap();
        free(s);
        return 0;
    }
    if (kind == 5) { /* mv: any JSON, a list expected (files.c's h_mv) */
        json_t *body = json_loadb(text, len, 0, NULL);
        files(kind, body);
        json_decref(body);
        return 0;
    }
    /* Everything else comes through sbx_http_req_json: an object, with the
     * handler's fields when it has a list. */
    json_t *body = sbx_json_parse_object(text, len, true, &e);
    const char *const *fields = kind == 0 ? create_fields : kind == 2 ? command_fields : NULL;
    if (!body || (fields && sbx_json_check_fields(body, NULL, fields, &e) < 0)) {
        refused(&e);
        json_decref(body);
        return 0;
    }
    switch (kind) {
    case 0:
        create(body);
        break;
    case 1:
        metadata(body);
        break;
    case 2:
        command(body);
        break;
    default:
        files(kind, body);
    }
    json_decref(body);
    return 0;
}
