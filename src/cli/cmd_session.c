/* session start [ID] | stop ID: a live session's sandbox (POST /runtime/start,
 * /runtime/stop). start returns once the daemon has it set up and prints its
 * id; tasks run in it with exec/run --session ID. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmd.h"
#include "cli/request.h"
#include "cli/target.h"

int sbx_cli_cmd_session(struct sbx_cli_client *c, const struct sbx_cli_args *a)
{
    bool start = a->cmd == SBX_CLI_SESSION_START;
    json_t *body = a->session ? json_pack("{s:s}", "sessionID", a->session) : json_object();
    cleanup_free char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text)
        return sbx_cli_fail(&(sbx_err){ENOMEM, "", "request body"});
    struct sbx_cli_request rq = {
        .method = "POST", .path = start ? "/runtime/start" : "/runtime/stop", .json = text};
    struct sbx_cli_response rs;
    json_t *ans;
    int rc = sbx_cli_call_json(c, &rq, &rs, &ans);
    if (rc == 0 && a->json) {
        rc = sbx_cli_print_raw(&rs);
    } else if (rc == 0) {
        const char *id = json_string_value(json_object_get(ans, "sessionId"));
        printf("%s%s\n", start ? "" : "stopped ", id ? id : (a->session ? a->session : "?"));
    }
    json_decref(ans);
    sbx_cli_response_clear(&rs);
    return rc;
}

/* tasks network ID | session network ID [--default D] [--allow R]... [--deny R]...:
 * a running task's or a live session's new egress rules, at once. */
int sbx_cli_cmd_network(struct sbx_cli_client *c, const struct sbx_cli_args *a)
{
    sbx_err e = {0};
    json_t *body = sbx_cli_network_body(a, &e);
    if (!body)
        return sbx_cli_fail(&e);
    cleanup_free char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    cleanup_free char *path = a->cmd == SBX_CLI_TASKS_NETWORK
                                  ? sbx_cli_task_path(a->task_id, "/network")
                                  : strdup("/runtime/network");
    if (!text || !path)
        return sbx_cli_fail(&(sbx_err){ENOMEM, "", "request"});
    struct sbx_cli_request rq = {.method = "POST", .path = path, .json = text};
    struct sbx_cli_response rs;
    json_t *ans;
    int rc = sbx_cli_call_json(c, &rq, &rs, &ans);
    if (rc == 0 && a->json)
        rc = sbx_cli_print_raw(&rs);
    else if (rc == 0)
        printf("rules set for %s %s\n", a->cmd == SBX_CLI_TASKS_NETWORK ? "task" : "session",
               a->cmd == SBX_CLI_TASKS_NETWORK ? a->task_id : a->session);
    json_decref(ans);
    sbx_cli_response_clear(&rs);
    return rc;
}
