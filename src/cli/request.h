/* The JSON bodies sandboxctl sends, built from the parsed command line.
 * Pure, unit-tested alone. */
#pragma once

#include <jansson.h>
#include <stddef.h>

#include "base/err.h"
#include "cli/args.h"

/* The body of POST /runtime/exec and /runtime/tasks: {"command":[…]} for
 * exec, {"language","code"} for run (code, len: the program text), then
 * "env", "timeoutSeconds", "memoryMB", "pids", "cpu", "sessionID" when
 * given. EINVAL naming the argument that is not UTF-8 (JSON cannot carry
 * it). The caller decrefs. */
json_t *sbx_cli_exec_body(const struct sbx_cli_args *a, const char *code, size_t len, sbx_err *err);
