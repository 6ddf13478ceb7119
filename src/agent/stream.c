/* Server-Sent Events and chat-completions chunks, incrementally (stream.h). */
#include "agent/stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 256;
    while (n < need)
        n *= 2;
    char *p = realloc(*buf, n);
    if (!p)
        return -1;
    *buf = p;
    *cap = n;
    return 0;
}

/* One whole line (without its end): a field, a comment, or the blank line
 * that ends an event. */
static int sse_line(struct sbx_sse *p, sbx_sse_fn fn, void *ud)
{
    const char *l = p->line;
    size_t n = p->line_len;
    if (n == 0) {
        if (!p->has_data)
            return 0;
        p->has_data = false;
        size_t len = p->data_len;
        p->data_len = 0;
        if (grow(&p->data, &p->data_cap, len + 1) < 0)
            return -1;
        p->data[len] = '\0';
        return fn(ud, p->data, len);
    }
    if (l[0] == ':')
        return 0; /* a comment (keep-alive) */
    const char *colon = memchr(l, ':', n);
    size_t name_len = colon ? (size_t)(colon - l) : n;
    if (name_len != 4 || memcmp(l, "data", 4) != 0)
        return 0; /* event, id, retry: nothing a chat stream needs */
    const char *v = colon ? colon + 1 : l + n;
    if (v < l + n && *v == ' ')
        v++;
    size_t vlen = (size_t)(l + n - v);
    size_t need = p->data_len + (p->has_data ? 1 : 0) + vlen;
    if (need > SBX_SSE_EVENT_MAX || grow(&p->data, &p->data_cap, need + 1) < 0)
        return -1;
    if (p->has_data)
        p->data[p->data_len++] = '\n';
    memcpy(p->data + p->data_len, v, vlen);
    p->data_len += vlen;
    p->has_data = true;
    return 0;
}

int sbx_sse_feed(struct sbx_sse *p, const char *buf, size_t len, sbx_sse_fn fn, void *ud)
{
    for (size_t i = 0; i < len; i++) {
        char c = buf[i];
        if (c == '\n' && p->skip_lf) {
            p->skip_lf = false;
            continue;
        }
        p->skip_lf = c == '\r';
        if (c == '\n' || c == '\r') {
            int rc = sse_line(p, fn, ud);
            p->line_len = 0;
            if (rc < 0)
                return -1;
            continue;
        }
        if (p->line_len >= SBX_SSE_EVENT_MAX + 16 ||
            grow(&p->line, &p->line_cap, p->line_len + 1) < 0)
            return -1;
        p->line[p->line_len++] = c;
    }
    return 0;
}

void sbx_sse_free(struct sbx_sse *p)
{
    free(p->line);
    free(p->data);
    *p = (struct sbx_sse){0};
}

/* Append a piece to a string that grows (its length in *len). */
static int append(char **s, size_t *len, const char *piece, size_t n, size_t max)
{
    if (*len + n > max)
        return -1;
    char *p = realloc(*s, *len + n + 1);
    if (!p)
        return -1;
    memcpy(p + *len, piece, n);
    *len += n;
    p[*len] = '\0';
    *s = p;
    return 0;
}

static int refuse(struct sbx_chat_stream *s, const char *what)
{
    snprintf(s->error, sizeof(s->error), "%s", what);
    return -1;
}

static int tool_delta(struct sbx_chat_stream *s, json_t *tc)
{
    json_t *idx = json_object_get(tc, "index");
    json_int_t i = json_is_integer(idx) ? json_integer_value(idx) : (json_int_t)s->n_tools;
    /* A call without an index continues the last one when it names no new id. */
    if (!json_is_integer(idx) && s->n_tools > 0 && !json_is_string(json_object_get(tc, "id")))
        i = (json_int_t)s->n_tools - 1;
    if (i < 0 || i >= SBX_CHAT_TOOLS_MAX)
        return refuse(s, "model sent a tool call index out of range");
    struct sbx_chat_tool *t = &s->tools[i];
    if ((size_t)i >= s->n_tools)
        s->n_tools = (size_t)i + 1;
    json_t *id = json_object_get(tc, "id");
    if (json_is_string(id) && json_string_length(id) > 0) {
        free(t->id);
        if (!(t->id = strndup(json_string_value(id), 255)))
            return refuse(s, "out of memory");
    }
    json_t *fn = json_object_get(tc, "function");
    json_t *name = json_object_get(fn, "name");
    json_t *args = json_object_get(fn, "arguments");
    if (json_is_string(name)) {
        size_t nl = t->name ? strlen(t->name) : 0;
        if (append(&t->name, &nl, json_string_value(name), json_string_length(name), 256) < 0)
            return refuse(s, "model sent a tool name too long");
    }
    if (json_is_string(args) && append(&t->args, &t->args_len, json_string_value(args),
                                       json_string_length(args), SBX_CHAT_ARGS_MAX) < 0)
        return refuse(s, "model sent tool arguments too long");
    return 0;
}

int sbx_chat_stream_data(struct sbx_chat_stream *s, const char *data, size_t len,
                         sbx_chat_text_fn on_text, void *ud)
{
    while (len && (*data == ' ' || *data == '\t'))
        data++, len--;
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        s->done = true;
        return 0;
    }
    json_error_t je;
    json_t *j = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(j)) {
        json_decref(j);
        snprintf(s->error, sizeof(s->error), "model sent a chunk that is not a JSON object: %s",
                 j ? "not an object" : je.text);
        return -1;
    }
    int rc = 0;
    json_t *err = json_object_get(j, "error");
    if (err) {
        json_t *m = json_is_object(err) ? json_object_get(err, "message") : err;
        snprintf(s->error, sizeof(s->error), "model sent an error: %s",
                 json_is_string(m) ? json_string_value(m) : "(no message)");
        rc = -1;
        goto out;
    }
    json_t *usage = json_object_get(j, "usage");
    if (json_is_object(usage)) {
        s->have_usage = true;
        s->prompt_tokens = json_integer_value(json_object_get(usage, "prompt_tokens"));
        s->completion_tokens = json_integer_value(json_object_get(usage, "completion_tokens"));
        s->total_tokens = json_integer_value(json_object_get(usage, "total_tokens"));
        if (!s->total_tokens)
            s->total_tokens = s->prompt_tokens + s->completion_tokens;
    }
    json_t *choices = json_object_get(j, "choices");
    size_t k;
    json_t *ch;
    json_array_foreach(choices, k, ch)
    {
        json_t *idx = json_object_get(ch, "index");
        if (json_is_integer(idx) && json_integer_value(idx) != 0)
            continue; /* n = 1 is asked: other choices are not ours */
        json_t *delta = json_object_get(ch, "delta");
        json_t *content = json_object_get(delta, "content");
        if (json_is_string(content) && json_string_length(content) > 0) {
            if (append(&s->text, &s->text_len, json_string_value(content),
                       json_string_length(content), SBX_CHAT_TEXT_MAX) < 0) {
                rc = refuse(s, "model sent more text than an answer may hold");
                goto out;
            }
            if (on_text)
                on_text(ud, json_string_value(content), json_string_length(content));
        }
        json_t *tcs = json_object_get(delta, "tool_calls");
        size_t m;
        json_t *tc;
        json_array_foreach(tcs, m, tc)
        {
            if (json_is_object(tc) && tool_delta(s, tc) < 0) {
                rc = -1;
                goto out;
            }
        }
        json_t *fr = json_object_get(ch, "finish_reason");
        if (json_is_string(fr))
            snprintf(s->finish, sizeof(s->finish), "%s", json_string_value(fr));
    }
out:
    json_decref(j);
    return rc;
}

bool sbx_chat_stream_complete(const struct sbx_chat_stream *s)
{
    return s->finish[0] || s->done;
}

void sbx_chat_stream_free(struct sbx_chat_stream *s)
{
    for (size_t i = 0; i < SBX_CHAT_TOOLS_MAX; i++) {
        free(s->tools[i].id);
        free(s->tools[i].name);
        free(s->tools[i].args);
    }
    free(s->text);
    memset(s, 0, sizeof(*s));
}
