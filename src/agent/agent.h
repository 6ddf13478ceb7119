/* The agent runtime, above the runtime: turns on a live session. A turn is
 * tool calls to run in the session's sandbox, or a user message the model
 * loop answers (chat completions streamed over HTTP by libcurl's multi
 * interface on the daemon's loop, its tool calls run and fed back), or the
 * result of an external tool a waiting turn asked for. Everything a turn
 * does is told on the session's event stream (stored before sent):
 * tool_call_start, tool_call_output, tool_call_end, text_delta,
 * runtime_error, done. One turn at a time per session. */
#pragma once

#include <event2/event.h>
#include <jansson.h>

#include "runtime/runtime.h"

/* The model a tenant's turns talk to; every string owned by the caller. */
struct sbx_agent_model {
    const char *base_url; /* "https://api.openai.com/v1"; NULL or "": no model */
    const char *name;     /* the model's name */
    const char *key;      /* the API key (never given to a sandbox), or NULL */
};

struct sbx_skills;

struct sbx_agent_opts {
    struct event_base *base;
    struct sbx_runtime *rt;
    struct sbx_store *store;
    struct sbx_skills *skills;    /* runs the skill tool; NULL: that tool is a tool error */
    struct sbx_agent_model model; /* the default */
    /* Per tenant (NULL: the default): the caller's lookup. */
    const struct sbx_agent_model *(*tenant_model)(void *ud, const char *tenant);
    void *tenant_ud;
    uint64_t tool_output_limit; /* bytes of a tool's output fed back; 0: 16 KiB */
    unsigned max_steps;         /* model calls in one turn; 0: 16 */
    double turn_timeout_s;      /* a user message's turn, all included; 0: 600 */
    uint64_t max_tokens;        /* total tokens of one turn; 0: no bound */
    unsigned max_retries;       /* of a model call on 429, 5xx, a failed connect; 0: 4 */
    double stall_timeout_s;     /* a model stream silent this long is cut; 0: 120 */
};

struct sbx_agent;
struct sbx_agent *sbx_agent_new(const struct sbx_agent_opts *o, sbx_err *err);
/* Turns still going end (their tasks are forgotten: the runtime ends them). */
void sbx_agent_free(struct sbx_agent *a);

/* The built-in tools' schemas, as the model sees them (a new reference). */
json_t *sbx_agent_tools(void);

/* Start a turn on the live session of clone c (input is borrowed): EBUSY when
 * a turn is going on there, ENOENT when the session is not live, EINVAL for a
 * bad input (named), ENOTSUP for a user message without a model. */
int sbx_agent_turn(struct sbx_agent *a, const struct sbx_clone *c, const char *session,
                   json_t *input, char turn_id[SBX_ID_SIZE], sbx_err *err);
/* Cancel a turn of tenant (its tools are killed; done {stopReason: canceled}
 * follows). ENOENT when there is no such turn going on. */
int sbx_agent_cancel(struct sbx_agent *a, const char *tenant, const char *turn_id, sbx_err *err);

/* The tools a session declared at its start (external ones wait for the
 * caller's tool_result): a JSON array [{name, description, parameters,
 * external}], checked (EINVAL naming the bad entry), kept for the session. */
int sbx_agent_session_tools(struct sbx_agent *a, const struct sbx_clone *c, const char *session,
                            json_t *tools, sbx_err *err);
