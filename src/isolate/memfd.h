/* A read-only copy of bytes in memory as a file: a memfd sealed against any
 * change, for what a sandbox's init receives (its own binary, the seccomp
 * programs). */
#pragma once

#include <stddef.h>

#include "isolate/stage.h"

/* The fd (O_CLOEXEC), or -1 with err at stage. */
int sbx_memfd_sealed(const char *name, const void *data, size_t len, enum sbx_stage stage,
                     sbx_err *err);
