/* status, exec and run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmd.h"
#include "cli/format.h"
#include "cli/request.h"

#define CODE_MAX (16u << 20)

int sbx_cli_cmd_status(struct sbx_cli_client *c, const struct sbx_cli_args *a)
{
    struct sbx_cli_request rq = {.method = "GET", .path = "/runtime/status"};
    struct sbx_cli_response rs;
    json_t *j;
    int rc = sbx_cli_call_json(c, &rq, &rs, &j);
    if (rc == 0) {
        if (a->json || !json_is_object(j))
            rc = sbx_cli_print_raw(&rs);
        else
            sbx_cli_print_object(stdout, j);
    }
    json_decref(j);
    sbx_cli_response_clear(&rs);
    return rc;
}

/* The program of `run FILE` ("-": stdin), whole: it travels in one JSON
 * string. The caller frees *out. */
static int read_code(const char *file, char **out, size_t *len, sbx_err *err)
{
    FILE *f = strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");
    if (!f)
        return sbx_err_set(err, errno, "run: %s: %s", file, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (;;) {
        if (n + 65536 > cap) {
            if (cap >= CODE_MAX) {
                rc = sbx_err_set(err, EFBIG, "run: %s: larger than %u MiB", file, CODE_MAX >> 20);
                break;
            }
            cap = cap ? cap * 2 : 65536 * 2;
            char *g = realloc(buf, cap + 1);
            if (!g) {
                rc = sbx_err_set(err, ENOMEM, "run: %s", file);
                break;
            }
            buf = g;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f))
                rc = sbx_err_set(err, errno, "run: %s: %s", file, strerror(errno));
            break;
        }
    }
    if (f != stdin)
        fclose(f);
    if (rc < 0) {
        free(buf);
        return -1;
    }
    if (buf)
        buf[n] = '\0'; /* cap + 1 bytes: a string too (run_request sends it as one) */
    *out = buf ? buf : strdup("");
    *len = n;
    return *out ? 0 : sbx_err_set(err, ENOMEM, "run");
}

static int detached(const struct sbx_cli_args *a, const json_t *task,
                    const struct sbx_cli_response *rs)
{
    if (a->json)
        return sbx_cli_print_raw(rs);
    const char *id = json_string_value(json_object_get(task, "id"));
    if (!id) {
        fprintf(stderr, "sandboxctl: the answer names no task id\n");
        return 1;
    }
    printf("%s\n", id);
    return fflush(stdout) == 0 ? 0 : 1;
}

/* seed 004's client: the request, JSON on stdin, goes to POST /execute as
 * it is (the daemon checks its fields); the program's outputs are printed
 * and its return_code is the exit status. */
static int run_request(struct sbx_cli_client *c, const struct sbx_cli_args *a)
{
    sbx_err e = {0};
    cleanup_free char *text = NULL;
    size_t len;
    if (read_code("-", &text, &len, &e) < 0)
        return sbx_cli_fail(&e);
    json_error_t je;
    json_t *req = json_loadb(text, len, 0, &je);
    bool is_obj = json_is_object(req);
    json_decref(req);
    if (!is_obj) {
        fprintf(stderr,
                "sandboxctl: run: stdin is not a JSON request object (%s), e.g. "
                "{\"code\": \"print(1)\", \"env\": \"python\"}\n",
                req ? "not an object" : je.text);
        return 2;
    }
    struct sbx_cli_request rq = {.method = "POST", .path = "/execute", .json = text};
    struct sbx_cli_response rs;
    json_t *j;
    int rc = sbx_cli_call_json(c, &rq, &rs, &j);
    if (rc == 0 && !json_is_object(j)) {
        fprintf(stderr, "sandboxctl: POST /execute: the answer is not a JSON object\n");
        rc = 1;
    } else if (rc == 0) {
        if (a->json) {
            sbx_cli_print_raw(&rs);
        } else {
            const char *names[] = {"stdout", "stderr"};
            FILE *to[] = {stdout, stderr};
            for (int i = 0; i < 2; i++) {
                json_t *v = json_object_get(j, names[i]);
                if (json_is_string(v))
                    fwrite(json_string_value(v), 1, json_string_length(v), to[i]);
            }
            fflush(stdout);
        }
        json_t *code = json_object_get(j, "return_code");
        json_int_t n = json_is_integer(code) ? json_integer_value(code) : 1;
        rc = n >= 0 && n <= 255 ? (int)n : 1;
    }
    json_decref(j);
    sbx_cli_response_clear(&rs);
    return rc;
}

int sbx_cli_cmd_exec(struct sbx_cli_client *c, const struct sbx_cli_args *a)
{
    if (a->request_stdin)
        return run_request(c, a);
    sbx_err e = {0};
    cleanup_free char *file_code = NULL;
    const char *code = a->code;
    size_t len = code ? strlen(code) : 0;
    if (a->cmd == SBX_CLI_RUN && a->code_file) {
        if (read_code(a->code_file, &file_code, &len, &e) < 0)
            return sbx_cli_fail(&e);
        code = file_code;
    }
    json_t *body = sbx_cli_exec_body(a, code, len, &e);
    if (!body)
        return sbx_cli_fail(&e);
    cleanup_free char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text)
        return sbx_cli_fail(&(sbx_err){ENOMEM, "", "request body"});

    struct sbx_cli_request rq = {
        .method = "POST", .path = a->detach ? "/runtime/tasks" : "/runtime/exec", .json = text};
    struct sbx_cli_response rs;
    json_t *j;
    int rc = sbx_cli_call_json(c, &rq, &rs, &j);
    if (rc == 0 && !json_is_object(j)) {
        fprintf(stderr, "sandboxctl: POST %s: the answer is not a JSON object\n", rq.path);
        rc = 1;
    } else if (rc == 0 && a->detach) {
        rc = detached(a, j, &rs);
    } else if (rc == 0) {
        /* The task's own status, whatever we print. */
        if (a->json)
            sbx_cli_print_raw(&rs);
        else
            sbx_cli_print_outputs(j);
        rc = sbx_cli_task_exit_code(j);
    }
    json_decref(j);
    sbx_cli_response_clear(&rs);
    return rc;
}
