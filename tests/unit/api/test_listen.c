#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/listen.h"

static void parse_forms(void **state)
{
    sbx_listen_spec s;
    sbx_err e = {0};
    assert_int_equal(sbx_listen_parse(":8080", &s, &e), 0);
    assert_int_equal(s.kind, SBX_LISTEN_TCP);
    assert_string_equal(s.host, "");
    assert_int_equal(s.port, 8080);
    assert_int_equal(sbx_listen_parse("127.0.0.1:0", &s, &e), 0);
    assert_string_equal(s.host, "127.0.0.1");
    assert_int_equal(s.port, 0);
    assert_int_equal(sbx_listen_parse("[::1]:9000", &s, &e), 0);
    assert_string_equal(s.host, "::1");
    assert_int_equal(s.port, 9000);
    assert_int_equal(sbx_listen_parse("localhost:80", &s, &e), 0);
    assert_string_equal(s.host, "localhost");
    assert_int_equal(sbx_listen_parse("unix:/run/sandboxd.sock", &s, &e), 0);
    assert_int_equal(s.kind, SBX_LISTEN_UNIX);
    assert_string_equal(s.path, "/run/sandboxd.sock");
}

static void parse_refused(void **state)
{
    sbx_listen_spec s;
    sbx_err e = {0};
    const char *bad[] = {"",      "8080",          ":",     ":65536",  ":-1",
                         ":80x",  "::1:80",        "[::1]", "[::1]80", "[zz]:80",
                         "unix:", "unix:rel/path", "[]:80", "h: 80"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        assert_int_equal(sbx_listen_parse(bad[i], &s, &e), -1);
        assert_int_not_equal(e.errnum, 0);
    }
    char longpath[200] = "unix:/";
    memset(longpath + 6, 'p', 150);
    assert_int_equal(sbx_listen_parse(longpath, &s, &e), -1);
    assert_int_equal(e.errnum, ENAMETOOLONG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parse_forms),
        cmocka_unit_test(parse_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
