/* Shared by the files of the daemon's routes: routes.c (the table of routes,
 * the clone a request names, the audit, the daemon's state), task_request.c
 * (a task request's JSON), routes_tasks.c, routes_sessions.c,
 * routes_stream.c (the event stream) and routes_files.c (workspace files). */
#pragma once

#include <jansson.h>

#include "api/extended.h"
#include "api/routes.h"

/* ---- routes.c ---- */

/* The clone a request names: headers, then query, then body fields (body
 * may be NULL), then the daemon's defaults. EACCES when the token may not
 * act for its tenant. */
int api_request_clone(sbx_http_request *req, struct sbx_api *api, json_t *body, struct sbx_clone *c,
                      sbx_err *err);
/* The original's StatusPayload of clone c (session: the one asked about, or
 * NULL: the runtime's), our facts added for an extended request. */
json_t *api_status_payload(sbx_http_request *req, struct sbx_api *api, bool reads,
                           const struct sbx_clone *c, const char *session);
/* Records the action in the store's audit (else in the daemon's log). */
void api_audit(sbx_http_request *req, struct sbx_api *api, const char *action, const char *target);

/* ---- task_request.c ---- */

/* The fields of a task request's body (POST /runtime/exec, /runtime/tasks). */
extern const char *const task_request_fields[];

/* A task request parsed from JSON: r points into the body and into the
 * arrays here, freed by task_request_free (also after a failed parse). */
struct parsed_task {
    struct sbx_task_request r;
    const char **argv;
    const char **env;
    const char **rules[2]; /* allow, deny */
    /* {"skill", "action", "args"}: filled into r by api_skill_task */
    const char *skill, *action;
    const char **args;
    struct sbx_skill_task hold;
};

/* The fields a request shape names a task's limits by, for the messages. */
/* The runtime's settings, which the routes read (defaults, maxima, the
 * workspace root and quota). */
static inline const struct sbx_runtime_settings *api_set(const struct sbx_api *api)
{
    return sbx_runtime_settings(api->rt);
}
/* command | language+code, env, stdin, limits, session, clone, network. */
int task_request_parse(sbx_http_request *req, struct sbx_api *api, json_t *body,
                       struct parsed_task *p, sbx_err *err);
/* "network": {policy, default, allow, deny} into p (NULL or null: none). */
int task_request_network(sbx_http_request *req, json_t *net, struct parsed_task *p, sbx_err *err);
void task_request_free(struct parsed_task *p);

/* ---- the handlers, by file ---- */

/* routes.c */
void h_healthz(sbx_http_request *req, void *ud);
void h_readyz(sbx_http_request *req, void *ud);
void h_status(sbx_http_request *req, void *ud);
/* routes_tasks.c */
void h_exec(sbx_http_request *req, void *ud);
void h_task_create(sbx_http_request *req, void *ud);
void h_execute(sbx_http_request *req, void *ud);
void h_task_get(sbx_http_request *req, void *ud);
void h_task_cancel(sbx_http_request *req, void *ud);
void h_task_network(sbx_http_request *req, void *ud);
void h_task_list(sbx_http_request *req, void *ud);
/* routes_sessions.c */
void h_start(sbx_http_request *req, void *ud);
void h_stop(sbx_http_request *req, void *ud);
void h_session_network(sbx_http_request *req, void *ud);
/* routes_stream.c */
void h_stream(sbx_http_request *req, void *ud);
/* routes_ops.c */
void h_metrics(sbx_http_request *req, void *ud);
void h_openapi(sbx_http_request *req, void *ud);
/* routes_skills.c */
void h_skills_list(sbx_http_request *req, void *ud);
void h_skill_get(sbx_http_request *req, void *ud);
void h_skills_reload(sbx_http_request *req, void *ud);
void h_skill_activate(sbx_http_request *req, void *ud);
/* A parsed request naming a skill: its task filled in (argv, binds, the
 * tier's profile, UR_TOKEN); 0 when it names none. 1 when the catalog is
 * not loaded yet: then fn(req, ud) is called once it is. */
int api_skill_task(sbx_http_request *req, struct sbx_api *api, struct parsed_task *p, sbx_err *err);
/* routes_turns.c */
void h_turn(sbx_http_request *req, void *ud);
void h_turn_cancel(sbx_http_request *req, void *ud);
void h_tools(sbx_http_request *req, void *ud);
/* routes_files.c */
void h_file_get(sbx_http_request *req, void *ud);
void h_file_put(sbx_http_request *req, void *ud);
void h_file_delete(sbx_http_request *req, void *ud);
/* routes_snapshots.c */
void h_snapshot_create(sbx_http_request *req, void *ud);
void h_snapshot_list(sbx_http_request *req, void *ud);
void h_snapshot_diff(sbx_http_request *req, void *ud);
void h_snapshot_delete(sbx_http_request *req, void *ud);
void h_snapshot_rollback(sbx_http_request *req, void *ud);
/* The snapshot id in body's field, or NULL with a 400 answered. */
const char *api_snapshot_id(sbx_http_request *req, json_t *body, const char *field);
