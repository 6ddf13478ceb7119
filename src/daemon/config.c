/* The configuration of `sandboxd serve` (schema in config.h, operator's guide
 * in docs/configuration.md; config_int.h lists the loader's files). This file
 * is the chain itself, its defaults, last checks and free.
 *
 * How it is built: defaults, then the YAML document (sections in a fixed
 * order, so environments are judged against the final maxima), then the
 * CLAW_* entries of envp, then the flags; cross-checks and derived values
 * last. Every value of every source goes through one parser per kind
 * (cfg_apply()), so "256m" means the same in the file and on a flag; only
 * the original's variables keep their units (CLAW_CPU_LIMIT in percent,
 * CLAW_MEMORY_LIMIT_MB in MiB, CLAW_IDLE_TIMEOUT_SEC in seconds). `sandboxd
 * run` takes the first part of the chain: defaults, then its six CLAW_*
 * network variables (sbx_config_load_run).
 *
 * Decisions (tests/unit/daemon/test_config.c holds them):
 * - Errors name the source: "FILE:LINE:COL: section.key" (the key's position,
 *   or the list item's), "CLAW_NAME", "--flag".
 * - A default limit above its maximum is refused, naming whichever of the two
 *   was configured (the default unless it is the built-in one).
 * - Relative paths: in the file, against the file's directory; in CLAW_* and
 *   flags, against the current directory.
 * - Empty CLAW_* values are unset; in CLAW_* lists blanks around entries and
 *   empty entries are dropped (the original's behaviour), except in
 *   CLAW_API_TOKEN where an empty entry is an error ("a,,b" or "$A,$B" with
 *   B unset would otherwise lose a token silently).
 * - Tokens: 16 to 512 printable characters without blanks or commas; a
 *   secret or a name given twice is an error.
 * - Injected task variables: CLAW_* names are refused (the daemon's settings
 *   and tokens never reach a task); values are taken from envp at load, so
 *   the daemon never reads its environment again.
 * - CLAW_ENABLE_SANDBOX_NET=false means `none`, never `host`: the host's
 *   network is only ever chosen by name.
 * - Seed 004's keys are understood where they mean something here (address,
 *   max_workers, default_timeout, bridge, max_idle, environments as a list,
 *   working_dir, read_only_rootfs: true); its container images, mounts and
 *   custom seccomp tables are refused with the reason, never ignored. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config_int.h"
#include "net/egress.h"

/* --- tokens ------------------------------------------------------------------------ */

int cfg_token_add(struct loader *L, const char *name, const char *token, const char *tenant)
{
    struct sbx_config *c = L->c;
    struct sbx_token *v = realloc(c->tokens, (c->n_tokens + 1) * sizeof(*v));
    if (!v)
        return cfg_oom(L);
    c->tokens = v;
    struct sbx_token *t = &v[c->n_tokens];
    *t = (struct sbx_token){0};
    if (!(t->name = strdup(name)) || !(t->token = strdup(token)) ||
        (tenant && !(t->tenant = strdup(tenant)))) {
        free(t->name), cfg_free_secret(t->token), free(t->tenant);
        return cfg_oom(L);
    }
    c->n_tokens++;
    return 0;
}

/* A higher source names the operator tokens: those of lower sources go. */
void cfg_drop_operator_tokens(struct sbx_config *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n_tokens; i++) {
        if (c->tokens[i].tenant) {
            c->tokens[n++] = c->tokens[i];
            continue;
        }
        free(c->tokens[i].name);
        cfg_free_secret(c->tokens[i].token);
    }
    c->n_tokens = n;
}

/* --- defaults --------------------------------------------------------------------- */

#ifndef SBX_BUILTIN_SKILLS_DIR
#define SBX_BUILTIN_SKILLS_DIR "/usr/lib/sandbox/skills"
#endif

/* The defaults and maxima of a task's limits, from the key table. */
static int builtin_limits(struct loader *L)
{
    for (int i = 0; i < N_LIM; i++) {
        const struct lim_field *f = &cfg_lim_fields[i];
        if (cfg_apply(L, f->kind, (char *)&L->c->limits + f->off, f->min, f->max, f->builtin,
                      "built-in") < 0 ||
            cfg_apply(L, f->kind, (char *)&L->c->max + f->off, f->min, f->max, f->builtin_max,
                      "built-in") < 0)
            return -1;
    }
    return 0;
}

static int set_defaults(struct loader *L)
{
    struct sbx_config *c = L->c;
    sbx_err e = {0};
    c->log_level = SBX_LOG_INFO;
    if (cfg_parse_listen(L, ":8080", &c->listen, &e) < 0 ||
        !(c->state_dir = strdup("/var/lib/sandbox")) || !(c->tenant_code = strdup("default")) ||
        !(c->clone_id = strdup("default")) || !(c->cgroup_parent = strdup("sandboxd")))
        return cfg_oom(L);
    c->max_concurrent = 32;
    c->queue_size = 1024;
    c->queue_per_tenant = 64;
    c->max_connections = 512;
    c->max_body_bytes = 16ull << 20;
    c->header_timeout_s = 10;
    c->connection_idle_timeout_s = 60;
    c->store_reserve_bytes = 16ull << 20;
    c->disk_reserve_bytes = 256ull << 20;
    c->max_connections_per_address = 64;
    c->body_timeout_s = 30;
    c->body_min_rate = 1024;
    c->max_streams_per_token = 32;
    c->max_streams_per_tenant = 32;
    c->keep_alive = true;
    c->idempotency_ttl_s = 86400;

    if (builtin_limits(L) < 0)
        return -1;
    c->workspace_quota_bytes = 1ull << 30;
    c->total_memory_bytes = 3ull << 30;
    c->total_pids = 512;
    c->total_cpu_cores = 2;
    c->max_clones_per_tenant = 1000;
    c->idle_timeout_s = 600;
    c->workspace_idle_unmount_s = 300;
    c->net = SBX_NET_PROXY;
    c->mount_sandbox = true;
    c->seccomp = SBX_SECCOMP_DEFAULT;
    c->read_only_rootfs = true;
    c->runner_uid = c->runner_gid = SBX_RUNNER_ID;
    c->host_id_base = SBX_DEFAULT_HOST_ID_BASE;

    if (!(c->skills.builtin_root = strdup(SBX_BUILTIN_SKILLS_DIR)) ||
        !(c->skills.common_root = strdup("/opt/skills-store/common")) ||
        !(c->skills.shared_root = strdup("/opt/skills/shared")) ||
        !(c->skills.mapped_root = strdup("/opt/skills/mapped")) ||
        !(c->skills.token_audience = strdup("ur-api")))
        return cfg_oom(L);
    c->skills.max_bytes = 16ull << 20;
    c->skills.token_ttl_s = 3600;

    c->network.def = SBX_DEFAULT_ALLOW;
    c->network.limits.proxy_port = 1080;
    c->network.limits.max_connections = 256;
    c->network.limits.total_connections = 4096;
    c->network.limits.max_bytes = 0;
    c->network.limits.idle_timeout_s = 300;
    c->network.limits.connect_timeout_s = 10;

    c->retention.max_age_s = 7 * DAY;
    c->retention.max_tasks = 10000;
    c->retention.events_per_session = 10000;
    c->retention.snapshots = 10; /* the original's design: 10, 30 days, 100 MB */
    c->retention.snapshot_max_age_s = 30 * DAY;
    c->retention.snapshot_max_bytes = 100ull << 20;
    c->retention.audit_max_age_s = 30 * DAY;
    c->retention.audit_max_records = 1000000;

    c->pool.enabled = true;
    c->pool.size = 2;       /* per description (an environment of a clone) */
    c->pool.max_total = 32; /* in all: a description short of sandboxes grows to this */
    c->pool.idle_timeout_s = 300;
    c->pool.spawner = true;

    if (cfg_env_add_builtins(L) < 0)
        return cfg_oom(L);
    return 0;
}

/* --- last checks and derived values ------------------------------------------------ */

static int resolve_env(struct loader *L, char **envp, const struct sbx_strv *keys,
                       struct sbx_strv *out)
{
    for (size_t i = 0; i < keys->n; i++) {
        const char *v = cfg_env_get(envp, keys->v[i]);
        char *kv;
        if (!v)
            continue; /* an optional key the daemon was not given */
        if (asprintf(&kv, "%s=%s", keys->v[i], v) < 0)
            return cfg_oom(L);
        int rc = cfg_strv_push(out, kv);
        cfg_free_secret(kv);
        if (rc < 0)
            return cfg_oom(L);
    }
    return 0;
}

/* The SOCKS5 port may not be one of the egress's other listeners; name says
 * where it was set. */
static int check_proxy_port(struct loader *L, const char *name)
{
    sbx_err pe = {0};
    if (sbx_egress_socks_port_check(L->c->network.limits.proxy_port, &pe) < 0)
        return sbx_err_set(L->err, EINVAL, "%s%s", name, pe.msg);
    return 0;
}

static int finish(struct loader *L, char **envp)
{
    struct sbx_config *c = L->c;
    /* defaults within the maxima */
    for (int i = 0; i < N_LIM; i++) {
        char a[48], b[48];
        if (!cfg_lim_above(i, &c->limits, &c->max, a, b, sizeof(a)))
            continue;
        const char *key = cfg_lim_fields[i].key;
        char max_where[WHERE_MAX];
        if (L->max_origin[i][0])
            snprintf(max_where, sizeof(max_where), "%s", L->max_origin[i]);
        else
            snprintf(max_where, sizeof(max_where), "built-in sandbox.max.%s", key);
        /* blame the one that was configured: the default unless it is built in */
        if (L->lim_origin[i][0])
            return cfg_fail(L, L->lim_origin[i], ERANGE, "%s is above the maximum %s (%s)", a, b,
                            max_where);
        return cfg_fail(L, max_where, ERANGE, "%s is below the default %s (built-in sandbox.%s)", b,
                        a, key);
    }
    if (check_proxy_port(L, "network.proxy_port (CLAW_SANDBOX_PROXY_PORT) ") < 0)
        return -1;
    if (c->queue_per_tenant > c->queue_size)
        return sbx_err_set(
            L->err, ERANGE, "server.queue_per_tenant (%llu) is above server.queue_size (%llu)",
            (unsigned long long)c->queue_per_tenant, (unsigned long long)c->queue_size);
    /* environments: what they did not set comes from the sandbox's defaults */
    for (size_t i = 0; i < c->n_environments; i++) {
        struct sbx_environment *env = &c->environments[i];
        for (int f = 0; f < N_LIM; f++)
            if (!(L->env_set[i] & (1u << f)))
                memcpy((char *)&env->limits + cfg_lim_fields[f].off,
                       (char *)&c->limits + cfg_lim_fields[f].off,
                       cfg_lim_fields[f].kind == K_DURATION || cfg_lim_fields[f].kind == K_CPU
                           ? sizeof(double)
                           : sizeof(uint64_t));
        if (!(L->env_set[i] & ENV_SET_NET))
            env->net = c->net;
        if (!(L->env_set[i] & ENV_SET_SECCOMP)) {
            env->seccomp = c->seccomp;
            env->seccomp_table = c->seccomp_table;
        }
        if (!(L->env_set[i] & ENV_SET_ROOTFS_RW))
            env->writable_root = !c->read_only_rootfs;
        if (env->rootfs && env->image)
            return sbx_err_set(L->err, EINVAL, "environments.%s: give rootfs or image, not both",
                               env->name);
        if (cfg_env_mounts_check(L, env) < 0)
            return -1;
    }
    /* tokens: one name and one secret each */
    for (size_t i = 0; i < c->n_tokens; i++)
        for (size_t j = 0; j < i; j++) {
            if (strcmp(c->tokens[i].name, c->tokens[j].name) == 0)
                return sbx_err_set(L->err, EINVAL, "token name '%s' is given twice",
                                   c->tokens[i].name);
            if (strcmp(c->tokens[i].token, c->tokens[j].token) == 0)
                return sbx_err_set(L->err, EINVAL, "%s: the same secret as %s", c->tokens[i].name,
                                   c->tokens[j].name);
        }
    /* derived paths */
    if (!c->workspace_root && asprintf(&c->workspace_root, "%s/workspaces",
                                       strcmp(c->state_dir, "/") ? c->state_dir : "") < 0)
        return c->workspace_root = NULL, cfg_oom(L);
    if (!c->control_dir &&
        asprintf(&c->control_dir, "%s/control", strcmp(c->state_dir, "/") ? c->state_dir : "") < 0)
        return c->control_dir = NULL, cfg_oom(L);
    if (!c->snapshot_dir && asprintf(&c->snapshot_dir, "%s/snapshots",
                                     strcmp(c->state_dir, "/") ? c->state_dir : "") < 0)
        return c->snapshot_dir = NULL, cfg_oom(L);
    /* injected variables: their values now, from the environment we were given */
    if (resolve_env(L, envp, &c->task_env_keys, &c->task_env) < 0)
        return -1;
    for (size_t i = 0; i < c->n_tenants; i++) {
        struct sbx_tenant_conf *t = &c->tenants[i];
        struct sbx_strv fixed = t->env;
        t->env = (struct sbx_strv){0};
        int rc = resolve_env(L, envp, &t->env_keys, &t->env);
        for (size_t j = 0; rc == 0 && j < fixed.n; j++)
            if (cfg_strv_push(&t->env, fixed.v[j]) < 0)
                rc = cfg_oom(L);
        cfg_strv_clear(&fixed, true);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* --- the public surface --------------------------------------------------------------- */

static void loader_free(struct loader *L)
{
    if (L) {
        free(L->file_dir);
        free(L->cwd);
        free(L);
    }
}

int sbx_config_load(struct sbx_config *c, int argc, char **argv, char **envp, sbx_err *err)
{
    memset(c, 0, sizeof(*c));
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            break;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            c->help = true;
            return 0;
        }
    }
    struct loader *L = calloc(1, sizeof(*L));
    struct flag *flags = calloc((size_t)(argc > 0 ? argc : 1), sizeof(*flags));
    size_t n_flags = 0;
    const char *config = NULL;
    int rc = -1;
    if (!L || !flags) {
        sbx_err_set(err, ENOMEM, "configuration: out of memory");
        goto out;
    }
    L->c = c;
    L->err = err;
    if (cfg_parse_flags(L, argc, argv, flags, &n_flags, &config) < 0 || set_defaults(L) < 0)
        goto out;
    if (config && cfg_load_file(L, config) < 0)
        goto out;
    if (cfg_load_env(L, envp) < 0 || cfg_apply_flags(L, flags, n_flags) < 0 || finish(L, envp) < 0)
        goto out;
    rc = 0;
out:
    loader_free(L);
    free(flags);
    if (rc < 0)
        sbx_config_free(c);
    return rc;
}

int sbx_config_load_run(struct sbx_config *c, char **envp, sbx_err *err)
{
    memset(c, 0, sizeof(*c));
    struct loader *L = calloc(1, sizeof(*L));
    int rc = -1;
    if (!L) {
        sbx_err_set(err, ENOMEM, "configuration: out of memory");
        goto out;
    }
    L->c = c;
    L->err = err;
    if (set_defaults(L) < 0 || cfg_load_run_env(L, envp) < 0 ||
        check_proxy_port(L, "CLAW_SANDBOX_PROXY_PORT: ") < 0)
        goto out;
    rc = 0;
out:
    loader_free(L);
    if (rc < 0)
        sbx_config_free(c);
    return rc;
}

void sbx_config_free(struct sbx_config *c)
{
    if (!c)
        return;
    free(c->config_path);
    free(c->listen.text);
    free(c->listen.host);
    free(c->listen.path);
    free(c->state_dir);
    free(c->workspace_root);
    free(c->control_dir);
    free(c->snapshot_dir);
    free(c->runtime_id);
    free(c->tenant_code);
    free(c->cgroup_parent);
    free(c->clone_key);
    free(c->clone_id);
    for (size_t i = 0; i < c->n_tokens; i++) {
        free(c->tokens[i].name);
        cfg_free_secret(c->tokens[i].token);
        free(c->tokens[i].tenant);
    }
    free(c->tokens);
    cfg_strv_clear(&c->task_env_keys, false);
    cfg_strv_clear(&c->task_env, true);
    cfg_strv_clear(&c->network.allow, false);
    cfg_strv_clear(&c->network.deny, false);
    cfg_strv_clear(&c->network.hosts, false);
    cfg_strv_clear(&c->network.dns_upstream, false);
    free(c->network.allowed_cidrs);
    free(c->network.allowed_ports);
    free(c->network.allowed_internal_targets);
    free(c->network.blocked_cidrs);
    for (size_t i = 0; i < c->n_tenants; i++) {
        free(c->tenants[i].code);
        cfg_strv_clear(&c->tenants[i].env_keys, false);
        cfg_strv_clear(&c->tenants[i].env, true);
    }
    free(c->tenants);
    for (size_t i = 0; i < c->n_environments; i++) {
        if (c->environments[i].seccomp_table == c->seccomp_table)
            c->environments[i].seccomp_table = NULL; /* borrowed */
        cfg_env_free(&c->environments[i]);
    }
    free(c->environments);
    sbx_seccomp_table_free(c->seccomp_table);
    cfg_strv_clear(&c->mount_roots, false);
    cfg_strv_clear(&c->pool.environments, false);
    cfg_strv_clear(&c->pool.zygote_imports, false);
    cfg_strv_clear(&c->pool.zygote_node_requires, false);
    cfg_strv_clear(&c->ignored_env, false);
    free(c->skills.builtin_root);
    free(c->skills.common_root);
    free(c->skills.shared_root);
    free(c->skills.mapped_root);
    free(c->skills.ur_base_url);
    cfg_free_secret(c->skills.token_secret);
    free(c->skills.token_secret_file);
    free(c->skills.token_audience);
    for (size_t i = 0; i <= c->n_tenant_models; i++) {
        struct sbx_model_conf *m = i < c->n_tenant_models ? &c->tenant_models[i].model : &c->model;
        free(m->base_url), free(m->name), free(m->key_env), free(m->key_file);
        if (i < c->n_tenant_models)
            free(c->tenant_models[i].code);
    }
    free(c->tenant_models);
    memset(c, 0, sizeof(*c));
}

const struct sbx_environment *sbx_config_environment(const struct sbx_config *c, const char *name)
{
    return sbx_environment_find(c->environments, c->n_environments, name);
}

const struct sbx_tenant_conf *sbx_config_tenant(const struct sbx_config *c, const char *code)
{
    return sbx_tenant_find(c->tenants, c->n_tenants, code);
}
