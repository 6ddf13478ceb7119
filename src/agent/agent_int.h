/* The agent layer's own structures, shared by its files (agent.c: turns and
 * conversations, tools.c: the built-in tools, model.c: the model loop over
 * libcurl, history.c: the conversations in the store); nothing outside
 * src/agent includes this. */
#pragma once

#include "agent/agent.h"
#include "agent/stream.h"
#include "base/curl_dl.h"

struct ag_turn;

/* One tool call of a turn. */
struct ag_call {
    struct ag_turn *turn;
    char *id;
    char *name;
    json_t *args;  /* the parsed arguments (an object), or NULL */
    json_t *shown; /* the arguments as given, for the events */
    char *error;   /* why it cannot run (bad arguments, unknown tool), or NULL */
    char task_id[SBX_ID_SIZE];
    bool external; /* the caller runs it: waiting for its tool_result */
    bool waiting;  /* started, not ended */
    bool ended;
    char *output; /* what is fed back (capped) */
};

/* A session's conversation: its messages (OpenAI's shape) and the tools it
 * declared at its start. */
struct ag_conv {
    char tenant[SBX_SEGMENT_MAX + 1];
    char clone_key[SBX_SEGMENT_MAX + 1];
    char clone_id[SBX_SEGMENT_MAX + 1];
    char session[SBX_SEGMENT_MAX + 1];
    json_t *messages;
    json_t *tools;        /* declared: [{name, description, parameters, external}] */
    struct ag_turn *turn; /* the one going on */
    struct ag_conv *next;
};

/* One model call in flight. */
struct ag_http {
    struct ag_turn *turn;
    CURL *easy;
    struct curl_slist *headers;
    char *body;
    long status;          /* once the headers came */
    double retry_after_s; /* from Retry-After, -1 when none */
    struct sbx_sse sse;
    struct sbx_chat_stream chat;
    char errbody[512]; /* the start of an error answer */
    size_t errbody_len;
    bool bad; /* a chunk was refused: chat.error says why */
    char curl_error[CURL_ERROR_SIZE];
};

struct ag_turn {
    struct sbx_agent *a;
    char id[SBX_ID_SIZE];
    struct sbx_clone clone;
    char session[SBX_SEGMENT_MAX + 1];
    struct ag_conv *conv;
    bool model; /* a user message: the loop runs */
    struct ag_call *calls;
    size_t n_calls, next_call;
    unsigned running; /* calls started and not ended */
    bool parallel;
    bool canceled;
    const char *cancel_stop; /* the stop reason of a canceled turn ("canceled", "budget") */
    bool advancing;
    /* the model loop */
    struct sbx_agent_model m;
    unsigned steps, attempts;
    int64_t prompt_tokens, completion_tokens, total_tokens;
    int64_t deadline; /* sbx_mono_ms() */
    struct ag_http *http;
    struct event *ev_budget, *ev_retry;
    struct ag_turn *next;
};

struct sbx_agent {
    struct sbx_agent_opts o;
    struct ag_conv *convs;
    struct ag_turn *turns;
    CURLM *multi;
    struct event *curl_timer;
};

/* agent.c */
/* Emit an event of t's session (data stolen); a failure is logged. */
void ag_emit(struct ag_turn *t, const char *type, json_t *data);
/* Append a message to t's conversation (stolen), stored first. */
void ag_conv_append(struct ag_turn *t, json_t *msg);
/* The calls of a model's answer (or a tool_calls input): made, to run. */
int ag_turn_set_calls(struct ag_turn *t, json_t *calls, sbx_err *err);
/* Run what is left of t: its calls, then the model or the end. */
void ag_turn_advance(struct ag_turn *t);
/* End t: runtime_error {reason, message} first when reason is set, then
 * done; t is freed. */
void ag_turn_end(struct ag_turn *t, const char *stop, const char *reason, const char *message);

/* tools.c */
/* Start call c: 1 when it ended at once (a file tool, an error), 0 when it
 * runs (a task) or waits (external). */
int ag_tool_start(struct ag_call *c);
/* End call c with its outcome (result text capped here). */
void ag_tool_end(struct ag_call *c, json_t *exit_code, const char *outcome, const char *text,
                 size_t len, json_t *usage);
/* The tools a model of t's session is offered (OpenAI's shape). */
json_t *ag_tools_for_model(struct ag_turn *t);

/* model.c */
void ag_model_fini(struct sbx_agent *a);
/* Ask the model for the next step of t (its conversation so far). */
void ag_model_step(struct ag_turn *t);
/* Stop t's model call and retry timer, if any. */
void ag_model_abort(struct ag_turn *t);
