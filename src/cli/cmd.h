/* sandboxctl's commands. Each returns the process's exit status: 0, the
 * task's own status for exec, run and tasks wait, 1 for an error (already
 * printed on stderr as "sandboxctl: …"). */
#pragma once

#include <jansson.h>

#include "cli/args.h"
#include "cli/client.h"

int sbx_cli_cmd_status(struct sbx_cli_client *c, const struct sbx_cli_args *a);
int sbx_cli_cmd_exec(struct sbx_cli_client *c, const struct sbx_cli_args *a); /* exec and run */
int sbx_cli_cmd_tasks(struct sbx_cli_client *c, const struct sbx_cli_args *a);
int sbx_cli_cmd_files(struct sbx_cli_client *c, const struct sbx_cli_args *a);
int sbx_cli_cmd_stream(struct sbx_cli_client *c, const struct sbx_cli_args *a);
int sbx_cli_cmd_session(struct sbx_cli_client *c, const struct sbx_cli_args *a);
int sbx_cli_cmd_network(struct sbx_cli_client *c, const struct sbx_cli_args *a);
int sbx_cli_cmd_snapshot(struct sbx_cli_client *c, const struct sbx_cli_args *a);
/* MCP over stdio, bridged to POST /mcp (its own transfers, side by side). */
int sbx_cli_cmd_mcp(const struct sbx_cli_args *a);
int sbx_cli_cmd_turn(struct sbx_cli_client *c, const struct sbx_cli_args *a); /* chat and turn */

/* ---- shared by the commands ---- */

/* Print "sandboxctl: <message>" and return 1. */
int sbx_cli_fail(const sbx_err *e);
/* Print "sandboxctl: <status> <code>: <message>" for an error answer and
 * return 1. */
int sbx_cli_fail_http(const struct sbx_cli_response *rs);
/* Send rq and parse a 2xx JSON answer into *out (the caller decrefs; NULL
 * for an empty body). 0, or 1 after printing the transport or HTTP error. */
int sbx_cli_call_json(struct sbx_cli_client *c, const struct sbx_cli_request *rq,
                      struct sbx_cli_response *rs, json_t **out);
/* The answer's body as it came, ended by a newline (--json). 0, or 1 when
 * stdout failed. */
int sbx_cli_print_raw(const struct sbx_cli_response *rs);
/* A task's (or an exec result's) stdout and stderr to ours, then a line on
 * stderr when the outcome needs saying (timeout, truncation, an error). */
int sbx_cli_print_outputs(const json_t *task);
/* Sleep ms milliseconds. */
void sbx_cli_sleep_ms(long ms);
