#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli/cmd.h"
#include "cli/format.h"

int sbx_cli_fail(const sbx_err *e)
{
    fprintf(stderr, "sandboxctl: %s\n", e->msg);
    return 1;
}

int sbx_cli_fail_http(const struct sbx_cli_response *rs)
{
    cleanup_free char *m = sbx_cli_http_error(rs->status, rs->body, rs->len);
    fprintf(stderr, "sandboxctl: %s\n", m ? m : "error answer");
    return 1;
}

int sbx_cli_call_json(struct sbx_cli_client *c, const struct sbx_cli_request *rq,
                      struct sbx_cli_response *rs, json_t **out)
{
    sbx_err e = {0};
    *out = NULL;
    if (sbx_cli_send(c, rq, rs, &e) < 0)
        return sbx_cli_fail(&e);
    if (rs->status < 200 || rs->status >= 300)
        return sbx_cli_fail_http(rs);
    if (rs->len == 0)
        return 0;
    json_error_t je;
    /* Task output may hold NUL bytes: keep them. */
    *out = json_loadb(rs->body, rs->len, JSON_ALLOW_NUL, &je);
    if (!*out) {
        fprintf(stderr, "sandboxctl: %s %s: the answer is not JSON (line %d, column %d: %s)\n",
                rq->method, rq->path, je.line, je.column, je.text);
        return 1;
    }
    return 0;
}

int sbx_cli_print_raw(const struct sbx_cli_response *rs)
{
    if (rs->len && fwrite(rs->body, 1, rs->len, stdout) != rs->len)
        return 1;
    if (!rs->len || rs->body[rs->len - 1] != '\n')
        putchar('\n');
    return fflush(stdout) == 0 ? 0 : 1;
}

static void put_stream(const json_t *v, FILE *f)
{
    if (json_is_string(v) && json_string_length(v))
        fwrite(json_string_value(v), 1, json_string_length(v), f);
    fflush(f);
}

static void truncation_note(const json_t *r, const char *name)
{
    char key[32], bytes_key[32];
    snprintf(key, sizeof(key), "%sTruncated", name);
    snprintf(bytes_key, sizeof(bytes_key), "%sBytes", name);
    if (!json_is_true(json_object_get(r, key)))
        return;
    json_t *b = json_object_get(r, bytes_key);
    if (json_is_integer(b))
        fprintf(stderr,
                "sandboxctl: %s was cut at the output limit (the task wrote %" JSON_INTEGER_FORMAT
                " bytes)\n",
                name, json_integer_value(b));
    else
        fprintf(stderr, "sandboxctl: %s was cut at the output limit\n", name);
}

int sbx_cli_print_outputs(const json_t *task)
{
    const json_t *r = sbx_cli_task_result(task);
    put_stream(json_object_get(r, "stdout"), stdout);
    put_stream(json_object_get(r, "stderr"), stderr);
    /* The engine's report: nested under "report", or merged into the result. */
    const json_t *rep = json_object_get(r, "report");
    if (!json_is_object(rep))
        rep = r;
    truncation_note(rep, "stdout");
    truncation_note(rep, "stderr");
    const char *outcome = json_string_value(json_object_get(rep, "outcome"));
    const char *message = json_string_value(json_object_get(rep, "message"));
    const char *status = json_string_value(json_object_get(task, "status"));
    const char *error = json_string_value(json_object_get(task, "error"));
    if (outcome && strcmp(outcome, "exited") != 0)
        fprintf(stderr, "sandboxctl: task %s%s%s\n", outcome, message && *message ? ": " : "",
                message ? message : "");
    else if (!outcome && error && *error)
        fprintf(stderr, "sandboxctl: task %s: %s\n", status ? status : "failed", error);
    return 0;
}

void sbx_cli_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}
