/* The CLAW_* variables of the original daemon: one per setting of the key
 * table, plus CLAW_API_TOKEN; every other CLAW_* name is an error unless it is
 * one of the original's that mean nothing here. Each also goes by the name a
 * later version of the original gives it, SANDBOX_ in place of CLAW_
 * (SANDBOX_WORKSPACE, SANDBOX_PROXY_PORT...); when both are set the later
 * name wins. SANDBOX_* names are not checked for misspellings: sandboxctl's
 * own variables (SANDBOX_URL, SANDBOX_TOKEN...) share the prefix. */
#include <stdio.h>
#include <string.h>

#include "daemon/config_int.h"

/* The original's variables that mean nothing to this daemon: accepted so its
 * deployments start, reported in ignored_env. */
static const char *const ignored_vars[] = {
    "CLAW_AGENT_ID",
    "CLAW_SESSION_ID",
    "CLAW_WORKSPACE_HOST_PATH",
    "CLAW_AISVR_BASE_URL",
    "CLAW_AISVR_TOKEN",
    "CLAW_RUNTIME_SKILL_COMMON_ROOT",
    "CLAW_RUNTIME_SKILL_SHARED_ROOT",
    "CLAW_RUNTIME_SKILL_MAPPED_ROOT",
};

/* What `sandboxd run` takes from its environment, as the original's tool
 * did: the network of its one sandbox. The rest is serve's (a shell that has
 * the daemon's variables must not change what run does). */
static const char *const run_vars[] = {
    "CLAW_ENABLE_SANDBOX_NET",    "CLAW_SANDBOX_PROXY_PORT",       "CLAW_SANDBOX_ALLOWED_CIDRS",
    "CLAW_SANDBOX_ALLOWED_PORTS", "CLAW_ALLOWED_INTERNAL_TARGETS", "CLAW_SANDBOX_BLOCKED_CIDRS",
};

static bool is_run_var(const char *name)
{
    for (size_t i = 0; i < SBX_ARRAY_LEN(run_vars); i++)
        if (strcmp(run_vars[i], name) == 0)
            return true;
    return false;
}

/* --- environment variables -------------------------------------------------------- */

/* A CLAW_* variable's value, under its later SANDBOX_* name first (when set
 * and not empty); *used: the name the value came from. */
static const char *env_either(char **envp, const char *claw, const char **used, char *buf,
                              size_t len)
{
    snprintf(buf, len, "SANDBOX_%s", claw + 5);
    const char *v = cfg_env_get(envp, buf);
    for (const char *p = v; p && *p; p++)
        if (!cfg_is_blank(*p)) {
            *used = buf;
            return v;
        }
    *used = claw;
    return cfg_env_get(envp, claw);
}

/* The key table's variables found in envp (only run_vars when run_only). */
static int load_settings(struct loader *L, char **envp, bool run_only)
{
    struct sbx_config *c = L->c;
    for (size_t i = 0; i < cfg_n_settings; i++) {
        const struct setting *s = &cfg_settings[i];
        char later[128];
        const char *name = s->env;
        const char *raw = s->env && (!run_only || is_run_var(s->env))
                              ? env_either(envp, s->env, &name, later, sizeof(later))
                              : NULL;
        if (!raw)
            continue;
        while (cfg_is_blank(*raw))
            raw++;
        size_t n = strlen(raw);
        while (n && cfg_is_blank(raw[n - 1]))
            n--;
        if (!n)
            continue; /* empty is unset, as in the original */
        cleanup_free char *v = strndup(raw, n);
        if (!v)
            return cfg_oom(L);
        if (cfg_apply(L, s->env_kind, (char *)c + s->off, s->min, s->max, v, name) < 0)
            return -1;
        if (s->lim >= 0)
            snprintf(L->lim_origin[s->lim], WHERE_MAX, "%s", name);
    }
    return 0;
}

int cfg_load_run_env(struct loader *L, char **envp)
{
    return load_settings(L, envp, true);
}

int cfg_load_env(struct loader *L, char **envp)
{
    struct sbx_config *c = L->c;
    if (load_settings(L, envp, false) < 0)
        return -1;

    char later[64];
    const char *token_var;
    const char *tokens = env_either(envp, "CLAW_API_TOKEN", &token_var, later, sizeof(later));
    while (tokens && cfg_is_blank(*tokens))
        tokens++;
    if (tokens && *tokens) {
        cfg_drop_operator_tokens(c);
        size_t idx = 1;
        for (const char *p = tokens;; idx++) {
            const char *end = strchr(p, ',');
            size_t len = end ? (size_t)(end - p) : strlen(p);
            while (len && cfg_is_blank(*p))
                p++, len--;
            while (len && cfg_is_blank(p[len - 1]))
                len--;
            char *t = strndup(p, len), name[96];
            if (!t)
                return cfg_oom(L);
            const char *why = cfg_token_problem(t);
            snprintf(name, sizeof(name), "%s#%zu", token_var, idx);
            int rc = why ? cfg_fail(L, token_var, EINVAL, "entry %zu %s", idx, why)
                         : cfg_token_add(L, name, t, NULL);
            cfg_free_secret(t);
            if (rc < 0)
                return -1;
            if (!end)
                break;
            p = end + 1;
        }
    }

    /* every CLAW_* variable is ours: a misspelt one must not go unnoticed */
    for (size_t i = 0; envp && envp[i]; i++) {
        const char *eq = strchr(envp[i], '=');
        if (strncmp(envp[i], "CLAW_", 5) != 0 || !eq)
            continue;
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)(eq - envp[i]), envp[i]);
        bool known = strcmp(name, "CLAW_API_TOKEN") == 0;
        for (size_t j = 0; !known && j < cfg_n_settings; j++)
            known = cfg_settings[j].env && strcmp(cfg_settings[j].env, name) == 0;
        if (known)
            continue;
        for (size_t j = 0; !known && j < SBX_ARRAY_LEN(ignored_vars); j++)
            known = strcmp(ignored_vars[j], name) == 0;
        if (!known)
            return cfg_fail(L, name, EINVAL,
                            "unknown setting (see docs/configuration.md; no CLAW_* variable is "
                            "passed to tasks)");
        if (!sbx_strv_has(&c->ignored_env, name) && cfg_strv_push(&c->ignored_env, name) < 0)
            return cfg_oom(L);
    }
    return 0;
}
