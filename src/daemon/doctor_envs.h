/* doctor --config FILE: the configuration's environments with a root of
 * their own (doctor_envs.c). */
#pragma once

#include <jansson.h>

#include "base/err.h"

/* A JSON array of them (name, image, digest, unpacked, rootfs, seccomp
 * table, mounts), or NULL with err (the configuration does not load). */
json_t *sbx_doctor_environments(const char *config_path, sbx_err *err);
void sbx_doctor_environments_text(const json_t *envs);
