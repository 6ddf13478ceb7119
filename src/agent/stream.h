/* The model's answer as it streams: Server-Sent Events (the bytes as they
 * arrive, cut anywhere) and the chat-completions chunks they carry (text
 * deltas, tool calls whose name and arguments come in pieces, several at
 * once by index, the finish reason, the usage). Pure: no I/O, no loop, so
 * the fuzz target drives it with any bytes. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SBX_SSE_EVENT_MAX (1u << 20) /* the data of one event */
#define SBX_CHAT_TOOLS_MAX 64        /* tool calls in one answer */
#define SBX_CHAT_ARGS_MAX (1u << 20) /* the arguments of one call */
#define SBX_CHAT_TEXT_MAX (4u << 20) /* the text of one answer */

/* One event's data (its "data:" lines joined by "\n"); 0 to go on, -1 to
 * stop (feed then returns -1). */
typedef int (*sbx_sse_fn)(void *ud, const char *data, size_t len);

struct sbx_sse {
    char *line; /* the line being read */
    size_t line_len, line_cap;
    char *data; /* the event being read */
    size_t data_len, data_cap;
    bool has_data;
    bool skip_lf; /* the last byte was CR: a LF right after it ends nothing */
};

/* Feed bytes: each complete event with data goes to fn. -1 when fn asked to
 * stop or an event is larger than SBX_SSE_EVENT_MAX (the parser is then done
 * for). */
int sbx_sse_feed(struct sbx_sse *p, const char *buf, size_t len, sbx_sse_fn fn, void *ud);
void sbx_sse_free(struct sbx_sse *p);

struct sbx_chat_tool {
    char *id;   /* as the model named it ("" until given) */
    char *name; /* the function's name, pieces joined */
    char *args; /* the arguments' text, pieces joined */
    size_t args_len;
};

/* What one streamed answer said, so far. */
struct sbx_chat_stream {
    char *text; /* all its text */
    size_t text_len;
    struct sbx_chat_tool tools[SBX_CHAT_TOOLS_MAX];
    size_t n_tools;  /* highest index seen + 1 */
    char finish[32]; /* "stop", "tool_calls", "length"…; "" until given */
    bool done;       /* the "[DONE]" marker came */
    bool have_usage;
    int64_t prompt_tokens, completion_tokens, total_tokens;
    char error[256]; /* why the last chunk was refused */
};

/* New text of the answer, as it comes. */
typedef void (*sbx_chat_text_fn)(void *ud, const char *text, size_t len);

/* One event's data: a chunk (JSON) or "[DONE]". -1 with s->error when it is
 * not a chunk ("model sent malformed JSON…", an "error" object, a bound
 * passed). */
int sbx_chat_stream_data(struct sbx_chat_stream *s, const char *data, size_t len,
                         sbx_chat_text_fn on_text, void *ud);
/* Whether the answer came whole: a finish reason or the [DONE] marker. */
bool sbx_chat_stream_complete(const struct sbx_chat_stream *s);
void sbx_chat_stream_free(struct sbx_chat_stream *s);
