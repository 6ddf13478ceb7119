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

/* The body of POST /runtime/tasks/{id}/network and /runtime/network: the new
 * egress rules {"default","allow":[…],"deny":[…]} (and "sessionID" for a
 * session); what was not given is not sent. EINVAL naming a rule that is not
 * UTF-8. The caller decrefs. */
json_t *sbx_cli_network_body(const struct sbx_cli_args *a, sbx_err *err);
