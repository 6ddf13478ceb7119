#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "exec/env.h"

static size_t count(char **env)
{
    size_t n = 0;
    while (env[n])
        n++;
    return n;
}

static void base_only_never_inherits(void **state)
{
    setenv("SBX_SECRET_TOKEN", "hunter2", 1);
    sbx_err e = {0};
    char **env = sbx_env_build(NULL, 0, &e);
    assert_non_null(env);
    assert_int_equal(count(env), 7);
    assert_string_equal(sbx_env_get(env, "HOME"), "/home/runner");
    assert_string_equal(sbx_env_get(env, "USER"), "runner");
    assert_string_equal(sbx_env_get(env, "TMPDIR"), "/tmp");
    assert_non_null(strstr(sbx_env_get(env, "PATH"), "/usr/bin"));
    assert_null(sbx_env_get(env, "SBX_SECRET_TOKEN"));
    for (size_t i = 0; env[i]; i++)
        assert_null(strstr(env[i], "hunter2"));
    sbx_env_free(env);
}

static void extra_added_and_overrides(void **state)
{
    const char *extra[] = {"FOO=bar", "HOME=/workspace", "FOO=baz", "EMPTY="};
    sbx_err e = {0};
    char **env = sbx_env_build(extra, 4, &e);
    assert_non_null(env);
    assert_int_equal(count(env), 9);
    assert_string_equal(sbx_env_get(env, "FOO"), "baz");
    assert_string_equal(sbx_env_get(env, "HOME"), "/workspace");
    assert_string_equal(sbx_env_get(env, "EMPTY"), "");
    assert_null(sbx_env_get(env, "FO"));
    sbx_env_free(env);
}

static void bad_entries_refused(void **state)
{
    const char *bad[] = {"NOEQUALS", "=x", "1X=2", "A B=1", "A.B=1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sbx_err e = {0};
        assert_null(sbx_env_build(&bad[i], 1, &e));
        assert_non_null(strstr(e.msg, bad[i]));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(base_only_never_inherits),
        cmocka_unit_test(extra_added_and_overrides),
        cmocka_unit_test(bad_entries_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
