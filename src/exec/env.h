/* A task's environment: the fixed base, then the caller's additions. Never the
 * environment of the process that starts the task. */
#pragma once

#include <stddef.h>

#include "base/err.h"

/* The fixed base, "KEY=VALUE" strings, NULL-terminated. */
extern const char *const sbx_env_base[];

/* Base plus `extra` (each "KEY=VALUE", validated; a later key replaces an
 * earlier one, base keys included). Returns a NULL-terminated array the caller
 * frees with sbx_env_free, or NULL with err naming the bad entry. */
char **sbx_env_build(const char *const *extra, size_t n_extra, sbx_err *err);
void sbx_env_free(char **env);
/* The value of key in env, or NULL. */
const char *sbx_env_get(char *const *env, const char *key);
