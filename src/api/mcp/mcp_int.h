/* Shared by the two files of the MCP surface: mcp.c (the transport: JSON-RPC
 * over POST, version negotiation, answers as JSON or as an event stream,
 * the calls in flight and their cancellation) and tools.c (the tools: their
 * schemas and what each does with the runtime). */
#pragma once

#include <jansson.h>

#include "api/routes_int.h"
#include "api/sse.h"

/* What a call in flight waits for. */
enum mcp_wait {
    MCP_WAIT_NONE,
    MCP_WAIT_TASK,
    MCP_WAIT_SESSION,
    MCP_WAIT_WORKSPACE,
    MCP_WAIT_SKILLS, /* the skills catalog's first scan */
};

/* One tools/call whose answer is not given yet. */
struct mcp_call {
    struct mcp_call *next; /* in the api's list of calls in flight */
    struct sbx_api *api;
    sbx_http_request *req; /* the POST, while its answer is pending; NULL once gone */
    sbx_sse *sse;          /* answering as an event stream (progress notifications) */
    json_t *id;            /* the request's JSON-RPC id */
    json_t *progress;      /* the client's progressToken, or NULL */
    double progress_sent;  /* output bytes told so far */
    char owner[200];       /* who may cancel it: MCP session + token name */
    const struct mcp_tool *tool;
    json_t *args;
    struct sbx_clone clone;
    enum mcp_wait wait;
    char task_id[SBX_ID_SIZE];
    char session[SBX_SEGMENT_MAX + 1];
    bool submitting; /* inside sbx_runtime_submit */
    bool ended;      /* answered (or given up) while submitting */
    bool canceled;   /* notifications/cancelled came for it */
    bool subscribed; /* sub is on the runtime's list */
    struct sbx_subscriber sub;
};

enum {
    MCP_READ_ONLY = 1 << 0,   /* changes nothing */
    MCP_DESTRUCTIVE = 1 << 1, /* may delete or overwrite */
    MCP_IDEMPOTENT = 1 << 2,  /* the same call again changes nothing more */
    MCP_OPEN_WORLD = 1 << 3,  /* may reach beyond the daemon (network egress) */
};

struct mcp_tool {
    const char *name, *title, *description;
    const char *schema; /* the input schema, JSON text */
    unsigned hints;     /* MCP_* below: the tool's annotations */
    /* Begin the call: answer it with mcp_call_result / mcp_tool_error, now
     * or later (c->wait says for what). req is valid during the call only. */
    void (*begin)(struct mcp_call *c, sbx_http_request *req);
};

/* ---- tools.c ---- */
extern const struct mcp_tool mcp_tools[];
extern const size_t mcp_tools_count;
const struct mcp_tool *mcp_tool_find(const char *name);
/* The tools/list answer's tools (a new reference). */
json_t *mcp_tools_json(void);
/* A call waiting for a task, a session or a workspace is given up: the
 * client went away or cancelled it. Stops what it waited for. */
void mcp_tool_abandon(struct mcp_call *c);
/* notifications/cancelled for c: a task is cancelled (its result, status
 * canceled, still answers the call); a wait is given up with a tool error. */
void mcp_tool_cancel(struct mcp_call *c);

/* ---- mcp.c ---- */
/* Off the list, unsubscribed, freed (nothing is answered). */
void mcp_call_free(struct mcp_call *c);
/* Answer the call with result (stolen): {"content": [...], ...}; frees c
 * (unless inside submit, which frees it after). */
void mcp_call_result(struct mcp_call *c, json_t *result);
/* A tool error the model reads: isError true, the message as text. */
void mcp_tool_error(struct mcp_call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* {"content":[{"type":"text","text":text}]} (+ "isError": true). */
json_t *mcp_text_content(const char *text, bool is_error);
/* A notifications/progress with message, when the client asked for
 * progress and reads an event stream; best effort (dropped when its buffer
 * is full: the result holds everything). */
void mcp_call_progress(struct mcp_call *c, double add, const char *message);
