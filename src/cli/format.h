/* What sandboxctl shows: error answers, tasks, listings and events as text,
 * and the exit status a task's record stands for. Pure: JSON and strings in,
 * strings out (the caller frees each), unit-tested alone. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

/* An HTTP error answer as "<status> <code>: <message>" from the API's
 * {"error":{"code","message"}}; for any other body "<status> <reason>" and
 * the body's first line, cut short and with control characters replaced. */
char *sbx_cli_http_error(long status, const char *body, size_t len);

/* Statuses after which a task changes no more. */
bool sbx_cli_task_final(const char *status);
/* The exit status a task (or an exec result) stands for: result.exitCode
 * (or exitCode) when in [0, 255]; else by status: succeeded 0, canceled and
 * timeout 124 (the original's code), anything else 1. */
int sbx_cli_task_exit_code(const json_t *task);
/* The result object of a task, or the object itself when it carries the
 * exec fields (exitCode, stdout, stderr) at the top. */
const json_t *sbx_cli_task_result(const json_t *task);

/* A task's command for one line: an argv joined with shell quoting where
 * needed, "[language] first line of code", or "-". */
char *sbx_cli_command_line(const json_t *task);

/* "<id> <type> <summary>" for one event of the stream; data is the event's
 * data field: the API's {"id","type","time","sessionId","data"} body, whose
 * id and type win over the SSE fields when present. The summary lists the
 * data object's members as key=value, strings quoted (empty ones and nulls
 * left out), cut at max_len. */
char *sbx_cli_event_line(const char *sse_id, const char *sse_type, const char *data, size_t len,
                         size_t max_len);

/* Aligned "key:  value" lines of an object's members (nested values as
 * compact JSON). */
void sbx_cli_print_object(FILE *f, const json_t *obj);
/* One task: the record's fields in order, then the result's. */
void sbx_cli_print_task(FILE *f, const json_t *task);
/* The header and one row per task of a list. */
void sbx_cli_print_task_table(FILE *f, const json_t *tasks);
/* A directory listing {"entries":[{name,type,size,mode,mtime}]}. */
void sbx_cli_print_entries(FILE *f, const json_t *entries);

/* A JSON scalar as text: strings as they are, integers, reals (%g),
 * booleans, null as "". NULL for arrays and objects (the caller dumps). */
char *sbx_cli_scalar(const json_t *v);
