#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/parse.h"

static void sizes_with_suffixes(void **state)
{
    static const struct {
        const char *in;
        uint64_t want;
    } ok[] = {
        {"4096", 4096},          {"1k", 1024},       {"256M", 256ull << 20},
        {"256m", 256ull << 20},  {"1g", 1ull << 30}, {"1GiB", 1ull << 30},
        {"100MB", 100ull << 20}, {"2T", 2ull << 40}, {"10M", 10ull << 20},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 0;
        sbx_err e = {0};
        assert_int_equal(sbx_parse_size(ok[i].in, &v, &e), 0);
        assert_int_equal(v, ok[i].want);
    }
}

static void sizes_refused(void **state)
{
    const char *bad[] = {
        "",    "M",  "-1", "12x", "1.5G", "0", "0M", "99999999999999999999", "20000000000T",
        "1 G", "1Gx"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 7;
        sbx_err e = {0};
        assert_int_equal(sbx_parse_size(bad[i], &v, &e), -1);
        assert_int_equal(v, 7);
        assert_non_null(strstr(e.msg, bad[i]));
    }
    uint64_t v;
    assert_int_equal(sbx_parse_size(NULL, &v, NULL), -1);
}

static void seconds_and_cpu(void **state)
{
    double d = 0;
    sbx_err e = {0};
    assert_int_equal(sbx_parse_seconds("300", 86400, &d, &e), 0);
    assert_true(d == 300);
    assert_int_equal(sbx_parse_seconds("0.5", 86400, &d, &e), 0);
    assert_true(d == 0.5);
    assert_int_equal(sbx_parse_seconds("0", 86400, &d, &e), -1);
    assert_int_equal(sbx_parse_seconds("-1", 86400, &d, &e), -1);
    assert_int_equal(sbx_parse_seconds("nan", 86400, &d, &e), -1);
    assert_int_equal(sbx_parse_seconds("inf", 86400, &d, &e), -1);
    assert_int_equal(sbx_parse_seconds("90000", 86400, &d, &e), -1);
    assert_non_null(strstr(e.msg, "90000"));
    assert_int_equal(sbx_parse_seconds("1s", 86400, &d, &e), -1);
    assert_int_equal(sbx_parse_cpu("0.25", 64, &d, &e), 0);
    assert_true(d == 0.25);
    assert_int_equal(sbx_parse_cpu("abc", 64, &d, &e), -1);
    assert_int_equal(sbx_parse_cpu("65", 64, &d, &e), -1);
}

static void unsigned_ranges(void **state)
{
    uint64_t v = 0;
    sbx_err e = {0};
    assert_int_equal(sbx_parse_uint("32", 1, 100, &v, &e), 0);
    assert_int_equal(v, 32);
    assert_int_equal(sbx_parse_uint("0", 1, 100, &v, &e), -1);
    assert_int_equal(sbx_parse_uint("101", 1, 100, &v, &e), -1);
    assert_int_equal(sbx_parse_uint("+5", 1, 100, &v, &e), -1);
    assert_int_equal(sbx_parse_uint("5a", 1, 100, &v, &e), -1);
    assert_int_equal(sbx_parse_uint("", 1, 100, &v, &e), -1);
}

static void env_assignments(void **state)
{
    sbx_err e = {0};
    assert_int_equal(sbx_parse_env_assignment("A=1", &e), 0);
    assert_int_equal(sbx_parse_env_assignment("_x9=", &e), 0);
    assert_int_equal(sbx_parse_env_assignment("A=b=c", &e), 0);
    assert_int_equal(sbx_parse_env_assignment("=1", &e), -1);
    assert_int_equal(sbx_parse_env_assignment("A", &e), -1);
    assert_int_equal(sbx_parse_env_assignment("9A=1", &e), -1);
    assert_int_equal(sbx_parse_env_assignment("A-B=1", &e), -1);
    assert_non_null(strstr(e.msg, "A-B=1"));
}

static void mountinfo_escapes(void **state)
{
    (void)state;
    char a[] = "/var/tmp/a\\040b\\011c\\012d\\134e";
    sbx_mountinfo_unescape(a);
    assert_string_equal(a, "/var/tmp/a b\tc\nd\\e");
    char b[] = "/x\\4\\999\\04"; /* not escapes: kept as they are */
    sbx_mountinfo_unescape(b);
    assert_string_equal(b, "/x\\4\\999\\04");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sizes_with_suffixes), cmocka_unit_test(sizes_refused),
        cmocka_unit_test(seconds_and_cpu),     cmocka_unit_test(unsigned_ranges),
        cmocka_unit_test(env_assignments),     cmocka_unit_test(mountinfo_escapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
