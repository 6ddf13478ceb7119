/* The OpenSandbox request bodies as data (bodies.h): what the handlers of
 * lifecycle.c, execd.c and files.c check before they act. */
#include "api/opensandbox/bodies.h"

#include <stdio.h>
#include <string.h>

#include "base/parse.h"

#define MOUNT "/workspace"

/* ---- lifecycle: create, metadata ---- */

/* "1", "0.5", "500m" cores; "512Mi", "2Gi", "1G", bytes. */
static int parse_limits(const struct sbx_runtime_settings *set, json_t *lim,
                        struct sbx_cg_limits *out, sbx_err *err)
{
    if (!lim || json_is_null(lim))
        return 0;
    if (!json_is_object(lim))
        return sbx_err_set(err, EINVAL, "resourceLimits must be an object of strings");
    const char *k;
    json_t *v;
    json_object_foreach(lim, k, v)
    {
        if (!json_is_string(v))
            return sbx_err_set(err, EINVAL, "resourceLimits.%s must be a string", k);
        const char *s = json_string_value(v);
        if (strcmp(k, "cpu") == 0) {
            char buf[64];
            double cores;
            size_t n = strlen(s);
            bool milli = n > 1 && n < sizeof(buf) && s[n - 1] == 'm';
            snprintf(buf, sizeof(buf), "%.*s", (int)(milli ? n - 1 : n), s);
            if (sbx_parse_cpu(buf, 1e6, &cores, err) < 0)
                return sbx_err_set(err, EINVAL, "resourceLimits.cpu '%s' is not a cpu amount", s);
            if (milli)
                cores /= 1000;
            if (cores > set->max.cpu_cores)
                return sbx_err_set(err, EINVAL, "resourceLimits.cpu %s is above the maximum %g", s,
                                   set->max.cpu_cores);
            out->cpu_cores = cores;
        } else if (strcmp(k, "memory") == 0) {
            uint64_t bytes;
            if (sbx_parse_size(s, &bytes, err) < 0)
                return sbx_err_set(err, EINVAL, "resourceLimits.memory '%s' is not a size", s);
            if (bytes > set->max.memory_bytes)
                return sbx_err_set(err, EINVAL,
                                   "resourceLimits.memory %s is above the maximum %llu MiB", s,
                                   (unsigned long long)(set->max.memory_bytes >> 20));
            out->memory_bytes = bytes;
        } else {
            return sbx_err_set(err, EINVAL, "resourceLimits.%s is not one we limit (cpu, memory)",
                               k);
        }
    }
    return 0;
}

static int check_strings(json_t *o, const char *name, sbx_err *err)
{
    if (!o)
        return 0;
    if (!json_is_object(o))
        return sbx_err_set(err, EINVAL, "%s must be an object of strings", name);
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        if (!json_is_string(v) || !*k)
            return sbx_err_set(err, EINVAL, "%s.%s must be a string", name, k);
    }
    return 0;
}

/* The names of our environments, for the message of an unknown image. */
static void environment_names(const struct sbx_runtime_settings *set, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < set->n_environments && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "",
                                set->environments[i].name);
}

json_t *os_policy_network(json_t *np, sbx_err *err)
{
    if (!np || json_is_null(np))
        return NULL;
    json_t *d = json_object_get(np, "defaultAction"), *eg = json_object_get(np, "egress");
    if (!json_is_object(np) || (d && !json_is_string(d)) || (eg && !json_is_array(eg))) {
        sbx_err_set(err, EINVAL,
                    "networkPolicy must be {defaultAction, egress: [{action, "
                    "target}]}");
        return NULL;
    }
    json_t *net = json_pack("{s:s, s:[], s:[]}", "default", d ? json_string_value(d) : "deny",
                            "allow", "deny");
    size_t i;
    json_t *r;
    json_array_foreach(eg, i, r)
    {
        json_t *a = json_object_get(r, "action"), *t = json_object_get(r, "target");
        const char *as = json_is_string(a) ? json_string_value(a) : "";
        if (!json_is_string(t) || (strcmp(as, "allow") != 0 && strcmp(as, "deny") != 0)) {
            json_decref(net);
            sbx_err_set(err, EINVAL,
                        "networkPolicy.egress[%zu] must be {action: allow|deny, target}", i);
            return NULL;
        }
        json_array_append(json_object_get(net, as), t);
    }
    return net;
}

int os_create_parse(const struct sbx_runtime_settings *set, json_t *body, struct os_create *out,
                    sbx_err *err)
{
    json_t *img = json_object_get(body, "image"), *uri = json_object_get(img, "uri");
    json_t *ep = json_object_get(body, "entrypoint"), *to = json_object_get(body, "timeout");
    char names[512];
    *out = (struct os_create){.entrypoint = ep, .to = to};
    json_t *snap = json_object_get(body, "snapshotId");
    if (json_object_get(body, "volumes"))
        return sbx_err_set(err, EINVAL, "volumes are not supported here");
    if (snap && img)
        return sbx_err_set(err, EINVAL, "give either image or snapshotId, not both");
    if (snap && (!json_is_string(snap) || !*json_string_value(snap)))
        return sbx_err_set(err, EINVAL, "snapshotId must be the id of a snapshot");
    out->snapshot_id = json_string_value(snap);
    if (!snap && !json_is_string(uri))
        return sbx_err_set(err, EINVAL,
                           "image.uri is required: the name of one of our environments");
    if (!snap && !sbx_settings_environment(set, json_string_value(uri))) {
        environment_names(set, names, sizeof(names));
        return sbx_err_set(err, EINVAL, "image '%s' is not one of our environments (%s)",
                           json_string_value(uri), names);
    }
    out->image = snap ? NULL : json_string_value(uri); /* else the snapshot's */
    if (ep && !json_is_array(ep))
        return sbx_err_set(err, EINVAL, "entrypoint must be a list of strings");
    for (size_t i = 0; i < json_array_size(ep); i++)
        if (!json_is_string(json_array_get(ep, i)))
            return sbx_err_set(err, EINVAL, "entrypoint[%zu] must be a string", i);
    if (to && !json_is_null(to) &&
        (!json_is_integer(to) || json_integer_value(to) < 1 ||
         json_integer_value(to) > OS_TTL_MAX_S))
        return sbx_err_set(err, EINVAL, "timeout must be whole seconds from 1 to %d", OS_TTL_MAX_S);
    if (check_strings(json_object_get(body, "env"), "env", err) < 0 ||
        check_strings(json_object_get(body, "metadata"), "metadata", err) < 0 ||
        parse_limits(set, json_object_get(body, "resourceLimits"), &out->lim, err) < 0)
        return -1;
    sbx_err e = {0};
    json_t *net = os_policy_network(json_object_get(body, "networkPolicy"), &e);
    json_decref(net);
    if (e.errnum)
        return sbx_err_set(err, e.errnum, "%s", e.msg);
    return 0;
}

int os_metadata_merge(json_t *metadata, json_t *patch, sbx_err *err)
{
    const char *k;
    json_t *v;
    json_object_foreach(patch, k, v)
    {
        if (!json_is_string(v) && !json_is_null(v))
            return sbx_err_set(err, EINVAL, "metadata.%s must be a string or null", k);
    }
    json_object_foreach(patch, k, v)
    {
        if (json_is_null(v))
            json_object_del(metadata, k);
        else
            json_object_set(metadata, k, v);
    }
    return 0;
}

/* ---- execd: command ---- */

int os_command_parse(const struct sbx_runtime_settings *set, json_t *body, struct os_run *run,
                     sbx_err *err)
{
    json_t *cmd = json_object_get(body, "command"), *cwd = json_object_get(body, "cwd");
    json_t *bg = json_object_get(body, "background"), *to = json_object_get(body, "timeout");
    json_t *envs = json_object_get(body, "envs");
    double timeout_s = 0;
    if (!json_is_string(cmd) || !json_string_length(cmd) ||
        strlen(json_string_value(cmd)) != json_string_length(cmd))
        return sbx_err_set(err, EINVAL, "command must be a non-empty string");
    if (cwd && !json_is_null(cwd) && (!json_is_string(cwd) || !json_string_length(cwd)))
        return sbx_err_set(err, EINVAL, "cwd must be a path");
    if (bg && !json_is_boolean(bg))
        return sbx_err_set(err, EINVAL, "background must be true or false");
    if (to && !json_is_null(to) && (!json_is_integer(to) || json_integer_value(to) < 1))
        return sbx_err_set(err, EINVAL, "timeout must be a number of milliseconds");
    if (json_object_get(body, "uid") || json_object_get(body, "gid"))
        return sbx_err_set(err, EINVAL,
                           "uid and gid are not supported: commands run as the sandbox's user");
    if (envs && !json_is_object(envs))
        return sbx_err_set(err, EINVAL, "envs must be an object of strings");
    if (envs) {
        const char *k;
        json_t *v;
        json_object_foreach(envs, k, v)
        {
            if (!json_is_string(v))
                return sbx_err_set(err, EINVAL, "envs.%s must be a string", k);
        }
    }
    if (to && json_is_integer(to)) {
        timeout_s = (double)json_integer_value(to) / 1000.0;
        if (timeout_s > set->max.timeout_s)
            return sbx_err_set(err, EINVAL, "timeout %lld ms is above the maximum %g s",
                               (long long)json_integer_value(to), set->max.timeout_s);
    }
    *run = (struct os_run){.command = json_string_value(cmd),
                           .cwd = json_string_value(cwd),
                           .envs = envs,
                           .timeout_s = timeout_s,
                           .background = json_is_true(bg)};
    return 0;
}

/* ---- files ---- */

int os_path(const char *path, struct sbx_ws_path *p, sbx_err *err)
{
    if (!path)
        return sbx_err_set(err, EINVAL, "path is required");
    const char *rel = path;
    if (strncmp(path, MOUNT, strlen(MOUNT)) == 0 &&
        (path[strlen(MOUNT)] == '/' || path[strlen(MOUNT)] == '\0'))
        rel = path + strlen(MOUNT);
    else if (path[0] == '/')
        return sbx_err_set(
            err, EINVAL,
            "path \"%.200s\" is outside " MOUNT ", the part of the sandbox this API reaches", path);
    if (!*rel)
        rel = "/";
    return sbx_ws_path_parse(rel, strlen(rel), p, err);
}

int os_mode_parse(json_t *v)
{
    char buf[16];
    if (json_is_integer(v))
        snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(v));
    else if (json_is_string(v))
        snprintf(buf, sizeof(buf), "%s", json_string_value(v));
    else
        return -1;
    unsigned m = 0;
    if (!buf[0] || strlen(buf) > 4)
        return -1;
    for (const char *c = buf; *c; c++) {
        if (*c < '0' || *c > '7')
            return -1;
        m = m * 8 + (unsigned)(*c - '0');
    }
    return (int)m;
}

int os_mode_entry(const char *k, json_t *v, bool mkdir, struct sbx_ws_path *p, int *mode,
                  sbx_err *err)
{
    json_t *m = json_object_get(v, "mode");
    *mode = m ? os_mode_parse(m) : (mkdir ? 0755 : -2);
    if (!json_is_object(v) || *mode == -1)
        return sbx_err_set(err, EINVAL, "%s: {mode: octal digits like 755} expected", k);
    return os_path(k, p, err);
}

int os_move_entry(json_t *item, struct sbx_ws_path *from, struct sbx_ws_path *to, sbx_err *err)
{
    if (os_path(json_string_value(json_object_get(item, "src")), from, err) < 0 ||
        os_path(json_string_value(json_object_get(item, "dest")), to, err) < 0)
        return -1;
    return 0;
}

int os_replace_entry(const char *k, json_t *v, struct sbx_ws_path *p, const char **old,
                     const char **new_text, sbx_err *err)
{
    *old = json_string_value(json_object_get(v, "old"));
    *new_text = json_string_value(json_object_get(v, "new"));
    if (!*old || !**old || !*new_text)
        return sbx_err_set(err, EINVAL, "%s: {old, new} strings expected (old not empty)", k);
    return os_path(k, p, err);
}

int os_upload_meta_parse(const char *text, struct sbx_ws_path *p, int *mode, sbx_err *err)
{
    json_t *m = json_loads(text, 0, NULL);
    json_t *jm = json_object_get(m, "mode");
    int rc = -1;
    if (!json_is_object(m))
        sbx_err_set(err, EINVAL, "the metadata part must be JSON {path, mode}");
    else if (jm && (*mode = os_mode_parse(jm)) < 0)
        sbx_err_set(err, EINVAL, "metadata.mode must be octal digits like 644");
    else
        rc = os_path(json_string_value(json_object_get(m, "path")), p, err);
    json_decref(m);
    return rc;
}
