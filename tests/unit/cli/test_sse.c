/* The event-stream parser: fields, multi-line data, comments, id and retry,
 * every line ending, and chunks cut anywhere. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cli/sse.h"

struct seen {
    char log[4096]; /* "id|type|data\n" per event */
    int n;
    int stop_after; /* 0: never */
};

static int record(void *ud, const struct sbx_cli_sse_event *ev)
{
    struct seen *s = ud;
    size_t len = strlen(s->log);
    assert_int_equal(strlen(ev->data), ev->data_len);
    snprintf(s->log + len, sizeof(s->log) - len, "%s|%s|%s\n", ev->id, ev->type, ev->data);
    s->n++;
    return s->stop_after && s->n >= s->stop_after ? -1 : 0;
}

/* Feed text in chunks of step bytes (0: at once); returns the log. */
static const char *parse(const char *text, size_t len, size_t step, struct sbx_cli_sse *out)
{
    static struct seen s;
    memset(&s, 0, sizeof(s));
    struct sbx_cli_sse p;
    sbx_cli_sse_init(&p, record, &s);
    sbx_err e = {0};
    if (!step)
        step = len ? len : 1;
    for (size_t i = 0; i < len; i += step)
        assert_int_equal(sbx_cli_sse_feed(&p, text + i, i + step > len ? len - i : step, &e), 0);
    if (out)
        *out = p;
    else
        sbx_cli_sse_free(&p);
    return s.log;
}
#define PARSE_ALL(text, step, out) parse(text, sizeof(text) - 1, step, out)

static const char stream[] = "\xef\xbb\xbf"
                             ": welcome\n"
                             "retry: 250\n"
                             "\n"
                             "id: 1\n"
                             "event: runtime_started\n"
                             "data: {\"a\":1}\n"
                             "\n"
                             ":heartbeat\r\n"
                             "\r\n"
                             "id:2\r\n"
                             "data:line one\r\n"
                             "data:  two with a space\r\n"
                             "data\r\n"
                             "\r\n"
                             "data: no id keeps the last\r"
                             "\r"
                             "id\n"
                             "event: x\n"
                             "data: id reset\n"
                             "unknown: field\n"
                             "\n"
                             "event: no data: not dispatched\n"
                             "\n"
                             "id: 7\n"
                             "data: cut off at the end";

static const char want[] = "1|runtime_started|{\"a\":1}\n"
                           "2|message|line one\n two with a space\n\n"
                           "2|message|no id keeps the last\n"
                           "|x|id reset\n";

static void whole_stream(void **state)
{
    struct sbx_cli_sse p;
    assert_string_equal(PARSE_ALL(stream, 0, &p), want);
    assert_int_equal(p.retry_ms, 250);
    /* "id: 7" belongs to an event cut off: resuming must ask for it again. */
    assert_string_equal(p.last_id, "");
    assert_int_equal(p.events, 4);
    assert_int_equal(p.comments, 2);
    sbx_cli_sse_free(&p);
}

static void every_chunking(void **state)
{
    for (size_t step = 1; step < sizeof(stream); step++)
        assert_string_equal(PARSE_ALL(stream, step, NULL), want);
}

static void line_endings_split_across_chunks(void **state)
{
    /* A CR ending one chunk and the LF starting the next are one line end. */
    static const char crlf[] = "data: a\r\n\r\ndata: b\r\n\r\n";
    for (size_t step = 1; step < sizeof(crlf); step++)
        assert_string_equal(PARSE_ALL(crlf, step, NULL), "|message|a\n|message|b\n");
    static const char cr[] = "data: a\r\rdata: b\r\r";
    for (size_t step = 1; step < sizeof(cr); step++)
        assert_string_equal(PARSE_ALL(cr, step, NULL), "|message|a\n|message|b\n");
}

static void fields_and_values(void **state)
{
    /* Only one leading space is removed; a colon in the value stays. */
    static const char t1[] = "data:   x: y\n\n";
    assert_string_equal(PARSE_ALL(t1, 0, NULL), "|message|  x: y\n");
    /* "data" without colon is an empty line of data; an empty data event is
     * dispatched with "". */
    static const char t2[] = "data\n\n";
    assert_string_equal(PARSE_ALL(t2, 0, NULL), "|message|\n");
    /* Case matters; a field named "Data" is ignored. */
    static const char t3[] = "Data: x\n\nDATA: y\n\n";
    assert_string_equal(PARSE_ALL(t3, 0, NULL), "");
    /* A later event: line wins; the type resets after each event. */
    static const char t4[] = "event: a\nevent: b\ndata: 1\n\ndata: 2\n\n";
    assert_string_equal(PARSE_ALL(t4, 0, NULL), "|b|1\n|message|2\n");
}

static void ids_and_retry(void **state)
{
    struct sbx_cli_sse p;
    /* An id holding NUL is ignored; retry takes digits only. */
    static const char t[] = "id: 5\nretry: 100\n\nid: 6\0x\nretry: 1x\nretry: -1\nretry:\n"
                            "data: d\n\n";
    assert_string_equal(PARSE_ALL(t, 0, &p), "5|message|d\n");
    assert_int_equal(p.retry_ms, 100);
    sbx_cli_sse_free(&p);
    /* The id in force is the last one seen before the dispatch. */
    static const char t2[] = "data: a\nid: 9\n\n";
    assert_string_equal(PARSE_ALL(t2, 0, &p), "9|message|a\n");
    assert_int_equal(p.retry_ms, -1);
    sbx_cli_sse_free(&p);
}

static void reset_keeps_id_and_retry(void **state)
{
    struct seen s = {0};
    struct sbx_cli_sse p;
    sbx_cli_sse_init(&p, record, &s);
    sbx_err e = {0};
    static const char a[] = "retry: 10\nid: 3\ndata: one\n\nid: 4\ndata: half";
    assert_int_equal(sbx_cli_sse_feed(&p, a, sizeof(a) - 1, &e), 0);
    assert_string_equal(p.last_id, "3");
    sbx_cli_sse_reset(&p); /* the connection dropped in the middle of event 4 */
    assert_string_equal(p.last_id, "3");
    assert_int_equal(p.retry_ms, 10);
    static const char b[] = "\xef\xbb\xbf"
                            "data: two\n\nid: 5\n\n";
    assert_int_equal(sbx_cli_sse_feed(&p, b, sizeof(b) - 1, &e), 0);
    assert_string_equal(s.log, "3|message|one\n3|message|two\n");
    /* An event of an id and no data is not dispatched, but moves the id. */
    assert_string_equal(p.last_id, "5");
    sbx_cli_sse_free(&p);
}

static void bom_only_at_start(void **state)
{
    static const char t[] = "data: a\n\n\xef\xbb\xbf"
                            "data: b\n\n";
    /* A BOM after the start is part of a line (a field named BOM+"data"). */
    assert_string_equal(PARSE_ALL(t, 0, NULL), "|message|a\n");
    static const char partial[] = "\xef\xbb"
                                  "data: x\n\n"; /* not a whole BOM: text */
    assert_string_equal(PARSE_ALL(partial, 1, NULL), "");
}

static void callback_stops(void **state)
{
    struct seen s = {.stop_after = 1};
    struct sbx_cli_sse p;
    sbx_cli_sse_init(&p, record, &s);
    sbx_err e = {0};
    static const char t[] = "data: 1\n\ndata: 2\n\n";
    assert_int_equal(sbx_cli_sse_feed(&p, t, sizeof(t) - 1, &e), -1);
    assert_int_equal(e.errnum, ECANCELED);
    assert_int_equal(s.n, 1);
    sbx_cli_sse_free(&p);
}

static void oversized_event(void **state)
{
    struct seen s = {0};
    struct sbx_cli_sse p;
    sbx_cli_sse_init(&p, record, &s);
    sbx_err e = {0};
    size_t chunk = 1 << 20;
    char *buf = malloc(chunk);
    memset(buf, 'x', chunk);
    memcpy(buf, "data: ", 6);
    assert_int_equal(sbx_cli_sse_feed(&p, buf, chunk, &e), 0);
    memset(buf, 'x', chunk);
    int rc = 0;
    for (int i = 0; i < 80 && rc == 0; i++)
        rc = sbx_cli_sse_feed(&p, buf, chunk, &e);
    assert_int_equal(rc, -1);
    assert_int_equal(e.errnum, EMSGSIZE);
    free(buf);
    sbx_cli_sse_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(whole_stream),
        cmocka_unit_test(every_chunking),
        cmocka_unit_test(line_endings_split_across_chunks),
        cmocka_unit_test(fields_and_values),
        cmocka_unit_test(ids_and_retry),
        cmocka_unit_test(reset_keeps_id_and_retry),
        cmocka_unit_test(bom_only_at_start),
        cmocka_unit_test(callback_stops),
        cmocka_unit_test(oversized_event),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
