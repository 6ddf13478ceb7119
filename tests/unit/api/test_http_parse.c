/* The pure parsers of a request's head, as the server and the fuzz target
 * tests/fuzz/fuzz_http_request.c drive them: the URL's %-decoding,
 * Content-Length and Last-Event-ID. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "api/http_internal.h"
#include "api/sse.h"

static void decode(const char *in, const char *want, size_t want_len, bool want_nul)
{
    char buf[64];
    snprintf(buf, sizeof(buf), "%s", in);
    bool nul = !want_nul;
    size_t n = sbx_http__unescape(buf, &nul);
    assert_int_equal(n, want_len);
    assert_int_equal(nul, want_nul);
    assert_memory_equal(buf, want, want_len);
    assert_int_equal(buf[n], '\0');
}

static void unescape_decodes_and_notes_nul(void **state)
{
    decode("/runtime/files", "/runtime/files", 14, false);
    decode("a%41b%2fc", "aAb/c", 5, false);
    decode("%7e%7E", "~~", 2, false);
    /* Not an escape: kept as it is. */
    decode("%", "%", 1, false);
    decode("%4", "%4", 2, false);
    decode("%G1%1", "%G1%1", 5, false);
    /* A NUL is decoded and noticed: the request is refused. */
    decode("a%00/../b", "a\0/../b", 7, true);
    decode("%00", "\0", 1, true);
    /* Decoded once: "%2541" is "%41", not "A". */
    decode("%2541", "%41", 3, false);
}

static void content_length_is_a_decimal_count(void **state)
{
    unsigned long long n = 1;
    assert_true(sbx_http__content_length("0", &n));
    assert_int_equal(n, 0);
    assert_true(sbx_http__content_length("1048576", &n));
    assert_int_equal(n, 1048576);
    assert_false(sbx_http__content_length("", &n));
    assert_false(sbx_http__content_length("12x", &n));
    assert_false(sbx_http__content_length("0x10", &n));
    assert_false(sbx_http__content_length("99999999999999999999999", &n));
}

static void last_event_id_is_a_decimal_id(void **state)
{
    uint64_t after = 7;
    sbx_err e = {0};
    assert_int_equal(sbx_sse_last_event_id(NULL, &after, &e), 0);
    assert_int_equal(after, 0);
    after = 7;
    assert_int_equal(sbx_sse_last_event_id("", &after, &e), 0);
    assert_int_equal(after, 0);
    assert_int_equal(sbx_sse_last_event_id("42", &after, &e), 0);
    assert_int_equal(after, 42);
    assert_int_equal(sbx_sse_last_event_id("18446744073709551615", &after, &e), 0);
    assert_true(after == UINT64_MAX);
    static const char *const bad[] = {"abc", "-1", " 1", "+1", "1 ", "18446744073709551616", "4x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        e = (sbx_err){0};
        assert_int_equal(sbx_sse_last_event_id(bad[i], &after, &e), -1);
        assert_true(e.msg[0] != '\0');
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unescape_decodes_and_notes_nul),
        cmocka_unit_test(content_length_is_a_decimal_count),
        cmocka_unit_test(last_event_id_is_a_decimal_id),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
