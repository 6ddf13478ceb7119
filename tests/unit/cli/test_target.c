/* Where sandboxctl connects: http(s) base URLs, host:port shorthands, unix
 * sockets; and the URLs it builds from them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cli/target.h"

static void http_forms(void **state)
{
    static const struct {
        const char *in, *base;
    } ok[] = {
        {"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
        {"http://h:1/", "http://h:1"},
        {"HTTP://h", "http://h"},
        {"https://api.example.com/sandbox//", "https://api.example.com/sandbox"},
        {"http://[::1]:8080", "http://[::1]:8080"},
        {"localhost:9000", "http://localhost:9000"},
        {":8080", "http://127.0.0.1:8080"},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        struct sbx_cli_target t;
        sbx_err e = {0};
        assert_int_equal(sbx_cli_target_parse(ok[i].in, &t, &e), 0);
        assert_string_equal(t.base, ok[i].base);
        assert_string_equal(t.display, ok[i].base);
        assert_null(t.unix_path);
        sbx_cli_target_clear(&t);
    }
}

static void unix_forms(void **state)
{
    struct sbx_cli_target t;
    sbx_err e = {0};
    assert_int_equal(sbx_cli_target_parse("unix:/run/sandbox.sock", &t, &e), 0);
    assert_string_equal(t.unix_path, "/run/sandbox.sock");
    assert_string_equal(t.base, "http://localhost");
    assert_string_equal(t.display, "unix:/run/sandbox.sock");
    sbx_cli_target_clear(&t);
    assert_int_equal(sbx_cli_target_parse("unix:///run/x y.sock", &t, &e), 0);
    assert_string_equal(t.unix_path, "/run/x y.sock");
    assert_string_equal(t.display, "unix:/run/x y.sock");
    sbx_cli_target_clear(&t);
    assert_int_equal(sbx_cli_target_parse("unix:rel.sock", &t, &e), 0);
    assert_string_equal(t.unix_path, "rel.sock");
    sbx_cli_target_clear(&t);
}

static void refused(void **state)
{
    char longpath[200] = "unix:/";
    memset(longpath + 6, 'a', 150);
    longpath[156] = '\0';
    const char *bad[] = {"",           "ftp://h",    "http://", "http:///x", "http://h?x=1",
                         "http://h#f", "http://a b", "unix:",   "unix://",   longpath,
                         "unix:/x\n",  "file:///etc"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct sbx_cli_target t = {0};
        sbx_err e = {0};
        if (sbx_cli_target_parse(bad[i], &t, &e) != -1)
            fail_msg("'%s' accepted", bad[i]);
        assert_null(t.base);
        assert_true(e.msg[0] != '\0');
    }
    struct sbx_cli_target t;
    sbx_err e = {0};
    assert_int_equal(sbx_cli_target_parse("gopher://h", &t, &e), -1);
    assert_non_null(strstr(e.msg, "gopher://h"));
}

static void escaping(void **state)
{
    char *s = sbx_cli_escape("a b/c?d&e=f+g%h~i.j_k-l", true);
    assert_string_equal(s, "a%20b/c%3Fd%26e%3Df%2Bg%25h~i.j_k-l");
    free(s);
    s = sbx_cli_escape("a/b", false);
    assert_string_equal(s, "a%2Fb");
    free(s);
    s = sbx_cli_escape("\xc3\xa9\n", true); /* UTF-8 and control bytes */
    assert_string_equal(s, "%C3%A9%0A");
    free(s);
    s = sbx_cli_escape("", true);
    assert_string_equal(s, "");
    free(s);
}

static void urls(void **state)
{
    struct sbx_cli_target t;
    sbx_err e = {0};
    assert_int_equal(sbx_cli_target_parse("http://h:1/pre/", &t, &e), 0);
    char *u = sbx_cli_url(&t, "/runtime/status", NULL);
    assert_string_equal(u, "http://h:1/pre/runtime/status");
    free(u);
    const char *q[] = {"status", "running", "limit", NULL, "cursor", "a b&c", NULL};
    u = sbx_cli_url(&t, "/runtime/tasks", q);
    assert_string_equal(u, "http://h:1/pre/runtime/tasks?status=running&cursor=a%20b%26c");
    free(u);
    const char *q2[] = {"limit", NULL, "path", "dir/a b.txt", NULL};
    u = sbx_cli_url(&t, "/runtime/files", q2);
    assert_string_equal(u, "http://h:1/pre/runtime/files?path=dir/a%20b.txt");
    free(u);
    sbx_cli_target_clear(&t);

    assert_int_equal(sbx_cli_target_parse("unix:/s", &t, &e), 0);
    u = sbx_cli_url(&t, "/healthz", NULL);
    assert_string_equal(u, "http://localhost/healthz");
    free(u);
    sbx_cli_target_clear(&t);

    u = sbx_cli_task_path("a/../b c", "/cancel");
    assert_string_equal(u, "/runtime/tasks/a%2F..%2Fb%20c/cancel");
    free(u);
    u = sbx_cli_task_path("0190abc", "");
    assert_string_equal(u, "/runtime/tasks/0190abc");
    free(u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(http_forms), cmocka_unit_test(unix_forms), cmocka_unit_test(refused),
        cmocka_unit_test(escaping),   cmocka_unit_test(urls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
