#include "runtime/settings.h"

#include <string.h>

const char *sbx_language_name(enum sbx_language l)
{
    switch (l) {
    case SBX_LANG_PYTHON:
        return "python";
    case SBX_LANG_NODE:
        return "node";
    case SBX_LANG_SHELL:
        return "shell";
    }
    return "?";
}

const struct sbx_environment *sbx_environment_find(const struct sbx_environment *envs, size_t n,
                                                   const char *name)
{
    for (size_t i = 0; name && i < n; i++)
        if (strcmp(envs[i].name, name) == 0)
            return &envs[i];
    for (size_t i = 0; name && i < n; i++)
        if (sbx_strv_has(&envs[i].aliases, name))
            return &envs[i];
    /* Seed 004's clients name environments by language and version
     * ("python-3.9", "node-18"): a name no environment has, made of an
     * environment's name, '-' and a version (digits and dots), is that
     * environment. The version is not checked: its root filesystem decides. */
    const char *dash = name ? strchr(name, '-') : NULL;
    if (!dash || !dash[1] || strspn(dash + 1, "0123456789.") != strlen(dash + 1))
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (strlen(envs[i].name) == (size_t)(dash - name) &&
            strncmp(envs[i].name, name, (size_t)(dash - name)) == 0)
            return &envs[i];
    return NULL;
}

const struct sbx_tenant_conf *sbx_tenant_find(const struct sbx_tenant_conf *tenants, size_t n,
                                              const char *code)
{
    for (size_t i = 0; code && i < n; i++)
        if (strcmp(tenants[i].code, code) == 0)
            return &tenants[i];
    return NULL;
}

const struct sbx_environment *sbx_settings_environment(const struct sbx_runtime_settings *s,
                                                       const char *name)
{
    return sbx_environment_find(s->environments, s->n_environments, name);
}

const struct sbx_tenant_conf *sbx_settings_tenant(const struct sbx_runtime_settings *s,
                                                  const char *code)
{
    return sbx_tenant_find(s->tenants, s->n_tenants, code);
}
