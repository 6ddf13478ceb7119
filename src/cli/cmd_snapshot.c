/* snapshot create | list | diff | rollback | rm: a clone's workspace
 * snapshots (/workspace/snapshots, /workspace/rollback). */
#include <stdio.h>
#include <string.h>

#include "cli/cmd.h"

static int call(struct sbx_cli_client *c, const struct sbx_cli_request *rq, bool json, json_t **ans)
{
    struct sbx_cli_response rs;
    int rc = sbx_cli_call_json(c, rq, &rs, ans);
    if (rc == 0 && json) {
        rc = sbx_cli_print_raw(&rs);
        json_decref(*ans);
        *ans = NULL;
    }
    sbx_cli_response_clear(&rs);
    return rc;
}

static void print_changes(const json_t *d)
{
    static const struct {
        const char *key, *mark;
    } kinds[] = {{"added", "+"}, {"modified", "~"}, {"deleted", "-"}};
    for (size_t k = 0; k < SBX_ARRAY_LEN(kinds); k++) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(d, kinds[k].key), i, e)
        {
            printf("%s %s%s\n", kinds[k].mark, json_string_value(json_object_get(e, "path")),
                   strcmp(json_string_value(json_object_get(e, "type")), "dir") ? "" : "/");
        }
    }
    if (json_is_true(json_object_get(d, "truncated")))
        fprintf(stderr, "sandboxctl: snapshot diff: the list was cut short\n");
    json_t *f = json_object_get(d, "file");
    if (f) {
        fputs(json_string_value(json_object_get(f, "diff")), stdout);
        if (json_is_true(json_object_get(f, "truncated")))
            fprintf(stderr, "sandboxctl: snapshot diff: the text diff was cut short\n");
    }
}

static void print_list(const json_t *l)
{
    const char *cur = json_string_value(json_object_get(l, "current"));
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(l, "snapshots"), i, s)
    {
        const char *id = json_string_value(json_object_get(s, "id"));
        printf("%c %.12s  %s  %6lld files  %10lld bytes  %s\n",
               cur && id && !strcmp(cur, id) ? '*' : ' ', id ? id : "?",
               json_string_value(json_object_get(s, "timestamp")) ?: "-",
               (long long)json_integer_value(json_object_get(s, "fileCount")),
               (long long)json_integer_value(json_object_get(s, "size")),
               json_string_value(json_object_get(s, "message")) ?: "");
    }
}

/* {"key": value} as text (NULL when out of memory). */
static char *body1(const char *key, const char *value)
{
    json_t *b = json_pack("{s:s}", key, value);
    char *text = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    return text;
}

int sbx_cli_cmd_snapshot(struct sbx_cli_client *c, const struct sbx_cli_args *a)
{
    char path[128];
    cleanup_free char *text = NULL;
    struct sbx_cli_request rq = {.method = "GET", .path = path};
    const char *query[] = {"against", a->against ? a->against : "current", "path", a->path, NULL};
    switch (a->cmd) {
    case SBX_CLI_SNAPSHOT_CREATE:
        text = body1("message", a->message ? a->message : "");
        snprintf(path, sizeof(path), "/workspace/snapshots");
        rq.method = "POST";
        rq.json = text;
        break;
    case SBX_CLI_SNAPSHOT_LIST:
        snprintf(path, sizeof(path), "/workspace/snapshots");
        break;
    case SBX_CLI_SNAPSHOT_DIFF:
        snprintf(path, sizeof(path), "/workspace/snapshots/%s/diff", a->snapshot_id);
        if (!a->path)
            query[2] = NULL;
        rq.query = query;
        break;
    case SBX_CLI_SNAPSHOT_ROLLBACK:
        text = body1("snapshotId", a->snapshot_id);
        snprintf(path, sizeof(path), "/workspace/rollback");
        rq.method = "POST";
        rq.json = text;
        break;
    default:
        snprintf(path, sizeof(path), "/workspace/snapshots/%s", a->snapshot_id);
        rq.method = "DELETE";
        break;
    }
    if (!strcmp(rq.method, "POST") && !text)
        return sbx_cli_fail(&(sbx_err){ENOMEM, "", "request body"});
    json_t *ans = NULL;
    int rc = call(c, &rq, a->json, &ans);
    if (rc || !ans)
        return rc;
    const char *id = json_string_value(json_object_get(ans, "id"));
    switch (a->cmd) {
    case SBX_CLI_SNAPSHOT_CREATE:
        printf("%s %s (%lld files, %lld bytes)\n",
               json_is_true(json_object_get(ans, "created")) ? "created" : "unchanged",
               id ? id : "?", (long long)json_integer_value(json_object_get(ans, "fileCount")),
               (long long)json_integer_value(json_object_get(ans, "size")));
        break;
    case SBX_CLI_SNAPSHOT_LIST:
        print_list(ans);
        break;
    case SBX_CLI_SNAPSHOT_DIFF:
        print_changes(ans);
        break;
    case SBX_CLI_SNAPSHOT_ROLLBACK:
        printf("rolled back to %s\n", a->snapshot_id);
        break;
    default:
        printf("deleted %s\n", a->snapshot_id);
        break;
    }
    json_decref(ans);
    return rc;
}
