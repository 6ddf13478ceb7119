/* libFuzzer target: the model-stream parser (src/agent/stream.c) on any
 * bytes. The input is cut in pieces of sizes taken from its first byte, as
 * a network would cut it; every event's data goes through the chat chunk
 * parser, whose result is then read whole (tools, text), as the agent
 * reads it. Each run also checks that feeding the same bytes at once gives
 * the same events. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/stream.h"

struct run {
    struct sbx_chat_stream chat;
    size_t events, text;
    uint64_t hash;
};

static void on_text(void *ud, const char *t, size_t len)
{
    struct run *r = ud;
    r->text += len;
}

static int on_data(void *ud, const char *data, size_t len)
{
    struct run *r = ud;
    r->events++;
    for (size_t i = 0; i < len; i++)
        r->hash = r->hash * 31 + (unsigned char)data[i];
    if (sbx_chat_stream_data(&r->chat, data, len, on_text, r) < 0 && !r->chat.error[0])
        abort(); /* a refusal always says why */
    return 0;
}

static void check_chat(const struct sbx_chat_stream *s)
{
    if (s->n_tools > SBX_CHAT_TOOLS_MAX)
        abort();
    for (size_t i = 0; i < s->n_tools; i++) {
        const struct sbx_chat_tool *t = &s->tools[i];
        if (t->args && strlen(t->args) > t->args_len)
            abort();
        if (t->name)
            (void)strlen(t->name);
    }
    if (s->text && strlen(s->text) > s->text_len)
        abort();
    (void)sbx_chat_stream_complete(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t step = (size_t)data[0] % 16 + 1;
    const char *in = (const char *)data + 1;
    size_t n = size - 1;

    struct run a = {0}, b = {0};
    struct sbx_sse pa = {0}, pb = {0};
    int rca = 0;
    for (size_t off = 0; off < n && rca == 0; off += step)
        rca = sbx_sse_feed(&pa, in + off, n - off < step ? n - off : step, on_data, &a);
    int rcb = sbx_sse_feed(&pb, in, n, on_data, &b);
    if (rca != rcb || (rca == 0 && (a.events != b.events || a.hash != b.hash)))
        abort(); /* the cuts changed what was parsed */
    check_chat(&a.chat);
    check_chat(&b.chat);
    sbx_sse_free(&pa);
    sbx_sse_free(&pb);
    sbx_chat_stream_free(&a.chat);
    sbx_chat_stream_free(&b.chat);
    return 0;
}
