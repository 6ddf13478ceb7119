#include "exec/env.h"

#include <stdlib.h>
#include <string.h>

#include "base/parse.h"

const char *const sbx_env_base[] = {
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/sandbox/bin",
    "HOME=/home/runner",
    "TMPDIR=/tmp",
    "USER=runner",
    "LOGNAME=runner",
    "SHELL=/bin/sh",
    "LANG=C.UTF-8",
    NULL,
};

static size_t key_len(const char *kv)
{
    const char *eq = strchr(kv, '=');
    return eq ? (size_t)(eq - kv) : strlen(kv);
}

/* Index of the entry with kv's key, or n. */
static size_t find_key(char **env, size_t n, const char *kv)
{
    size_t kl = key_len(kv);
    for (size_t i = 0; i < n; i++)
        if (key_len(env[i]) == kl && strncmp(env[i], kv, kl) == 0)
            return i;
    return n;
}

char **sbx_env_build(const char *const *extra, size_t n_extra, sbx_err *err)
{
    size_t n_base = 0;
    while (sbx_env_base[n_base])
        n_base++;
    char **env = calloc(n_base + n_extra + 1, sizeof(*env));
    if (!env) {
        sbx_err_set(err, ENOMEM, "environment");
        return NULL;
    }
    size_t n = 0;
    for (size_t i = 0; i < n_base + n_extra; i++) {
        const char *kv = i < n_base ? sbx_env_base[i] : extra[i - n_base];
        if (i >= n_base && sbx_parse_env_assignment(kv, err) < 0)
            goto fail;
        char *copy = strdup(kv);
        if (!copy) {
            sbx_err_set(err, ENOMEM, "environment");
            goto fail;
        }
        size_t at = find_key(env, n, kv);
        if (at < n)
            free(env[at]);
        else
            n++;
        env[at] = copy;
    }
    return env;
fail:
    sbx_env_free(env);
    return NULL;
}

void sbx_env_free(char **env)
{
    for (size_t i = 0; env && env[i]; i++)
        free(env[i]);
    free(env);
}

const char *sbx_env_get(char *const *env, const char *key)
{
    size_t kl = strlen(key);
    for (size_t i = 0; env && env[i]; i++)
        if (strncmp(env[i], key, kl) == 0 && env[i][kl] == '=')
            return env[i] + kl + 1;
    return NULL;
}
