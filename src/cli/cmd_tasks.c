/* tasks list | get | cancel | wait. */
#include <stdio.h>
#include <string.h>

#include "cli/cmd.h"
#include "cli/format.h"
#include "cli/target.h"

#define WAIT_FIRST_MS 100
#define WAIT_MAX_MS 1000
#define WAIT_RETRIES 30 /* consecutive failures (daemon restarting) before giving up */

/* A page of tasks: the original's bare array, or {"tasks":[…],"nextCursor"}. */
static json_t *page_tasks(json_t *page, const char **next)
{
    *next = NULL;
    if (json_is_array(page))
        return page;
    const char *cur = json_string_value(json_object_get(page, "nextCursor"));
    if (cur && *cur)
        *next = cur;
    json_t *t = json_object_get(page, "tasks");
    if (!json_is_array(t))
        t = json_object_get(page, "items");
    return json_is_array(t) ? t : NULL;
}

static int list(struct sbx_cli_client *c, const struct sbx_cli_args *a)
{
    char limit[24];
    snprintf(limit, sizeof(limit), "%llu", (unsigned long long)a->limit);
    cleanup_free char *cursor = a->cursor ? strdup(a->cursor) : NULL;
    json_t *all = json_array();
    int rc = 0;
    for (;;) {
        const char *query[] = {"status", a->status, "limit", a->limit ? limit : NULL,
                               "cursor", cursor,    NULL};
        struct sbx_cli_request rq = {.method = "GET", .path = "/runtime/tasks", .query = query};
        struct sbx_cli_response rs;
        json_t *page;
        if ((rc = sbx_cli_call_json(c, &rq, &rs, &page)) != 0) {
            sbx_cli_response_clear(&rs);
            break;
        }
        const char *next;
        json_t *tasks = page_tasks(page, &next);
        if (!tasks) {
            fprintf(stderr, "sandboxctl: GET /runtime/tasks: the answer holds no task list\n");
            rc = 1;
        } else if (!a->all) {
            if (a->json)
                rc = sbx_cli_print_raw(&rs);
            else
                sbx_cli_print_task_table(stdout, tasks);
            if (next && !a->json)
                fprintf(stderr, "sandboxctl: more tasks: --cursor %s, or --all\n", next);
        } else {
            json_array_extend(all, tasks);
            if (next && cursor && strcmp(next, cursor) == 0) {
                fprintf(stderr, "sandboxctl: GET /runtime/tasks: the cursor does not advance\n");
                rc = 1;
                next = NULL;
            }
            free(cursor);
            cursor = next ? strdup(next) : NULL;
            if (next && !cursor)
                rc = sbx_cli_fail(&(sbx_err){ENOMEM, "", "cursor"});
        }
        json_decref(page);
        sbx_cli_response_clear(&rs);
        if (rc != 0 || !a->all || !cursor)
            break;
    }
    if (rc == 0 && a->all) {
        if (a->json) {
            json_t *out = json_pack("{s:O}", "tasks", all);
            json_dumpf(out, stdout, JSON_COMPACT);
            putchar('\n');
            json_decref(out);
        } else {
            sbx_cli_print_task_table(stdout, all);
        }
    }
    json_decref(all);
    if (fflush(stdout) != 0)
        rc = 1;
    return rc;
}

static int one(struct sbx_cli_client *c, const struct sbx_cli_args *a, bool cancel)
{
    cleanup_free char *path = sbx_cli_task_path(a->task_id, cancel ? "/cancel" : "");
    if (!path)
        return sbx_cli_fail(&(sbx_err){ENOMEM, "", "path"});
    struct sbx_cli_request rq = {.method = cancel ? "POST" : "GET", .path = path};
    struct sbx_cli_response rs;
    json_t *task;
    int rc = sbx_cli_call_json(c, &rq, &rs, &task);
    if (rc == 0) {
        if (a->json || !json_is_object(task)) {
            rc = sbx_cli_print_raw(&rs);
        } else if (cancel) {
            const char *st = json_string_value(json_object_get(task, "status"));
            printf("%s %s\n", a->task_id, st ? st : "canceled");
        } else {
            sbx_cli_print_task(stdout, task);
        }
    }
    json_decref(task);
    sbx_cli_response_clear(&rs);
    return rc;
}

static bool transient(long status)
{
    return status == 502 || status == 503 || status == 504;
}

/* Poll the task until it is final; ride out a daemon that restarts. */
static int wait_task(struct sbx_cli_client *c, const struct sbx_cli_args *a)
{
    cleanup_free char *path = sbx_cli_task_path(a->task_id, "");
    if (!path)
        return sbx_cli_fail(&(sbx_err){ENOMEM, "", "path"});
    long delay = WAIT_FIRST_MS;
    int failures = 0;
    bool contacted = false; /* a daemon that never answered is not restarting */
    for (;;) {
        struct sbx_cli_request rq = {.method = "GET", .path = path};
        struct sbx_cli_response rs;
        sbx_err e = {0};
        if (sbx_cli_send(c, &rq, &rs, &e) < 0 || transient(rs.status)) {
            bool gave_up = !contacted || ++failures >= WAIT_RETRIES;
            if (gave_up) {
                int rc = rs.status ? sbx_cli_fail_http(&rs) : sbx_cli_fail(&e);
                sbx_cli_response_clear(&rs);
                return rc;
            }
            sbx_cli_response_clear(&rs);
            sbx_cli_sleep_ms(WAIT_MAX_MS);
            continue;
        }
        failures = 0;
        contacted = true;
        if (rs.status < 200 || rs.status >= 300) {
            int rc = sbx_cli_fail_http(&rs);
            sbx_cli_response_clear(&rs);
            return rc;
        }
        json_error_t je;
        json_t *task = json_loadb(rs.body ? rs.body : "", rs.len, JSON_ALLOW_NUL, &je);
        const char *st = json_string_value(json_object_get(task, "status"));
        if (!st) {
            fprintf(stderr, "sandboxctl: GET %s: the answer is not a task\n", path);
            json_decref(task);
            sbx_cli_response_clear(&rs);
            return 1;
        }
        if (sbx_cli_task_final(st)) {
            if (a->json)
                sbx_cli_print_raw(&rs);
            else
                sbx_cli_print_outputs(task);
            int rc = sbx_cli_task_exit_code(task);
            json_decref(task);
            sbx_cli_response_clear(&rs);
            return rc;
        }
        json_decref(task);
        sbx_cli_response_clear(&rs);
        sbx_cli_sleep_ms(delay);
        delay = delay * 2 > WAIT_MAX_MS ? WAIT_MAX_MS : delay * 2;
    }
}

int sbx_cli_cmd_tasks(struct sbx_cli_client *c, const struct sbx_cli_args *a)
{
    switch (a->cmd) {
    case SBX_CLI_TASKS_LIST:
        return list(c, a);
    case SBX_CLI_TASKS_GET:
        return one(c, a, false);
    case SBX_CLI_TASKS_CANCEL:
        return one(c, a, true);
    default:
        return wait_task(c, a);
    }
}
