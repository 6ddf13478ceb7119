/* The log's escaping and level filter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/log.h"

static void safe_escapes_what_could_split_or_forge_a_line(void **state)
{
    char out[64];
    assert_string_equal(sbx_log_safe("/runtime/tasks", out, sizeof(out)), "/runtime/tasks");
    assert_string_equal(sbx_log_safe("a\nb", out, sizeof(out)), "a\\x0ab");
    assert_string_equal(sbx_log_safe("q\"x\\y", out, sizeof(out)), "q\\x22x\\x5cy");
    assert_string_equal(sbx_log_safe("\x1b[31m\xff", out, sizeof(out)), "\\x1b[31m\\xff");
    assert_string_equal(sbx_log_safe(NULL, out, sizeof(out)), "");
    /* no key=value pair can be added to a line either */
    assert_string_equal(sbx_log_safe("x status=200", out, sizeof(out)), "x\\x20status=200");
}

static void safe_cuts_to_fit(void **state)
{
    char out[16];
    const char *r = sbx_log_safe("abcdefghijklmnopqrstuvwxyz", out, sizeof(out));
    assert_true(strlen(r) < sizeof(out));
    assert_string_equal(r, "abcdefghijkl...");
    /* An escape is never cut in half. */
    r = sbx_log_safe("abcdefghij\n\n\n", out, sizeof(out));
    assert_string_equal(r, "abcdefghij...");
    char tiny[4];
    assert_string_equal(sbx_log_safe("abc", tiny, sizeof(tiny)), "");
}

/* Lines above the level are not written; written lines are one line each. */
static void level_filters_and_lines_stay_whole(void **state)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    int saved = dup(2);
    assert_true(dup2(p[1], 2) == 2);
    sbx_log_set_level(SBX_LOG_WARN);
    sbx_log(SBX_LOG_INFO, "hidden %d", 1);
    sbx_log(SBX_LOG_WARN, "shown %d", 2);
    sbx_log(SBX_LOG_ERROR, "%s", "long line: ...................................................");
    sbx_log_set_level(SBX_LOG_INFO);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(p[1]);
    char buf[4096] = {0};
    ssize_t n = read(p[0], buf, sizeof(buf) - 1);
    close(p[0]);
    assert_true(n > 0);
    assert_null(strstr(buf, "hidden"));
    assert_non_null(strstr(buf, "Z warn shown 2\n"));
    assert_non_null(strstr(buf, "Z error long line: "));
    int lines = 0;
    for (char *c = buf; *c; c++)
        lines += *c == '\n';
    assert_int_equal(lines, 2);
    assert_false(sbx_log_enabled(SBX_LOG_DEBUG));
    assert_true(sbx_log_enabled(SBX_LOG_INFO));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(safe_escapes_what_could_split_or_forge_a_line),
        cmocka_unit_test(safe_cuts_to_fit),
        cmocka_unit_test(level_filters_and_lines_stay_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
