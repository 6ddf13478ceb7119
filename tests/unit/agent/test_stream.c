/* The model-stream parser: SSE framing cut at every byte, chat chunks with
 * text, tool calls in pieces and in parallel, the finish, usage, errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent/stream.h"

struct got {
    char data[8][256];
    int n;
    char text[256];
};

static int on_data(void *ud, const char *data, size_t len)
{
    struct got *g = ud;
    assert_true(g->n < 8);
    assert_int_equal(strlen(data), len);
    snprintf(g->data[g->n++], sizeof(g->data[0]), "%s", data);
    return 0;
}

static void sse_framing_any_cut(void **state)
{
    static const char in[] = ": keep-alive\r\n"
                             "data: one\r\n\r\n"
                             "event: x\nid: 3\ndata:two\ndata: lines\n\n"
                             "data: three\r\r"
                             "retry: 10\n\n" /* no data: no event */
                             "data: four\n"; /* not ended: not yet */
    size_t n = sizeof(in) - 1;
    /* Every way of cutting the input in two gives the same events. */
    for (size_t cut = 0; cut <= n; cut++) {
        struct sbx_sse p = {0};
        struct got g = {0};
        assert_int_equal(sbx_sse_feed(&p, in, cut, on_data, &g), 0);
        assert_int_equal(sbx_sse_feed(&p, in + cut, n - cut, on_data, &g), 0);
        assert_int_equal(g.n, 3);
        assert_string_equal(g.data[0], "one");
        assert_string_equal(g.data[1], "two\nlines");
        assert_string_equal(g.data[2], "three");
        assert_int_equal(sbx_sse_feed(&p, "\n", 1, on_data, &g), 0);
        assert_int_equal(g.n, 4);
        assert_string_equal(g.data[3], "four");
        sbx_sse_free(&p);
    }
}

static int stop_at_first(void *ud, const char *data, size_t len)
{
    return -1;
}

static void sse_bounds_and_stop(void **state)
{
    struct sbx_sse p = {0};
    assert_int_equal(sbx_sse_feed(&p, "data: a\n\n", 9, stop_at_first, NULL), -1);
    sbx_sse_free(&p);
    /* An event past the bound is refused, not grown forever. */
    size_t big = SBX_SSE_EVENT_MAX + 100;
    char *line = malloc(big);
    assert_non_null(line);
    memset(line, 'x', big);
    memcpy(line, "data: ", 6);
    struct got g = {0};
    assert_int_equal(sbx_sse_feed(&p, line, big, on_data, &g), -1);
    sbx_sse_free(&p);
    free(line);
}

static void on_text(void *ud, const char *t, size_t len)
{
    struct got *g = ud;
    strncat(g->text, t, len);
}

static int feed(struct sbx_chat_stream *s, const char *json, struct got *g)
{
    return sbx_chat_stream_data(s, json, strlen(json), on_text, g);
}

static void chat_text_tools_finish_usage(void **state)
{
    struct sbx_chat_stream s = {0};
    struct got g = {0};
    assert_int_equal(feed(&s,
                          "{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
                          "\"content\":\"Hi \"}}]}",
                          &g),
                     0);
    assert_int_equal(feed(&s, "{\"choices\":[{\"delta\":{\"content\":\"there\"}}]}", &g), 0);
    /* two calls at once, their names and arguments in pieces */
    assert_int_equal(feed(&s,
                          "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"a\","
                          "\"function\":{\"name\":\"ex\",\"arguments\":\"{\\\"co\"}},"
                          "{\"index\":1,\"id\":\"b\",\"function\":{\"name\":\"python\"}}]}}]}",
                          &g),
                     0);
    assert_int_equal(feed(&s,
                          "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,"
                          "\"function\":{\"name\":\"ec\",\"arguments\":\"mmand\\\":1}\"}}]}}]}",
                          &g),
                     0);
    assert_int_equal(feed(&s,
                          "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,"
                          "\"function\":{\"arguments\":\"{}\"}}]}}]}",
                          &g),
                     0);
    assert_false(sbx_chat_stream_complete(&s));
    assert_int_equal(feed(&s,
                          "{\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}],"
                          "\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}",
                          &g),
                     0);
    assert_true(sbx_chat_stream_complete(&s));
    assert_int_equal(feed(&s, " [DONE]", &g), 0);
    assert_true(s.done);
    assert_string_equal(g.text, "Hi there");
    assert_string_equal(s.text, "Hi there");
    assert_int_equal(s.n_tools, 2);
    assert_string_equal(s.tools[0].id, "a");
    assert_string_equal(s.tools[0].name, "exec");
    assert_string_equal(s.tools[0].args, "{\"command\":1}");
    assert_string_equal(s.tools[1].name, "python");
    assert_string_equal(s.tools[1].args, "{}");
    assert_string_equal(s.finish, "tool_calls");
    assert_true(s.have_usage);
    assert_int_equal(s.total_tokens, 10);
    sbx_chat_stream_free(&s);
}

static void chat_refuses_bad_chunks(void **state)
{
    static const char *const bad[] = {
        "{not json",
        "[1,2]",
        "{\"error\":{\"message\":\"quota\"}}",
        "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":64}]}}]}",
        "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":-1}]}}]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct sbx_chat_stream s = {0};
        assert_int_equal(feed(&s, bad[i], NULL), -1);
        assert_true(s.error[0] != '\0');
        sbx_chat_stream_free(&s);
    }
    struct sbx_chat_stream s = {0};
    assert_int_equal(feed(&s, "{\"error\":{\"message\":\"quota\"}}", NULL), -1);
    assert_non_null(strstr(s.error, "quota"));
    sbx_chat_stream_free(&s);
    /* Odd but harmless shapes are taken: no choices, null content, other
     * choices than the first. */
    assert_int_equal(feed(&s, "{\"choices\":[]}", NULL), 0);
    assert_int_equal(feed(&s, "{\"choices\":[{\"delta\":{\"content\":null}}]}", NULL), 0);
    assert_int_equal(feed(&s, "{\"choices\":[{\"index\":1,\"delta\":{\"content\":\"x\"}}]}", NULL),
                     0);
    assert_null(s.text);
    sbx_chat_stream_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sse_framing_any_cut),
        cmocka_unit_test(sse_bounds_and_stop),
        cmocka_unit_test(chat_text_tools_finish_usage),
        cmocka_unit_test(chat_refuses_bad_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
