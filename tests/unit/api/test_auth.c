#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/auth.h"

static sbx_auth *make(void)
{
    sbx_auth *a = sbx_auth_new();
    assert_non_null(a);
    sbx_err e = {0};
    assert_int_equal(sbx_auth_add(a, &(sbx_auth_token){"ops", "op-secret-0001", NULL}, &e), 0);
    assert_int_equal(sbx_auth_add(a, &(sbx_auth_token){"acme-ci", "tn-secret-0002", "acme"}, &e),
                     0);
    return a;
}

static void bearer_and_claw_header(void **state)
{
    sbx_auth *a = make();
    const sbx_identity *who;
    assert_int_equal(sbx_auth_check(a, "Bearer op-secret-0001", NULL, &who), SBX_AUTH_OK);
    assert_string_equal(who->name, "ops");
    assert_null(who->tenant);
    assert_int_equal(sbx_auth_check(a, "bearer   tn-secret-0002", NULL, &who), SBX_AUTH_OK);
    assert_string_equal(who->name, "acme-ci");
    assert_string_equal(who->tenant, "acme");
    assert_int_equal(sbx_auth_check(a, NULL, "tn-secret-0002", &who), SBX_AUTH_OK);
    assert_string_equal(who->tenant, "acme");
    /* A Basic credential is not ours: X-Claw-Token still counts. */
    assert_int_equal(sbx_auth_check(a, "Basic b3A6eA==", "op-secret-0001", &who), SBX_AUTH_OK);
    assert_string_equal(who->name, "ops");
    sbx_auth_free(a);
}

static void missing_and_wrong(void **state)
{
    sbx_auth *a = make();
    const sbx_identity *who = (void *)1;
    assert_int_equal(sbx_auth_check(a, NULL, NULL, &who), SBX_AUTH_MISSING);
    assert_null(who);
    assert_int_equal(sbx_auth_check(a, "Bearer", NULL, &who), SBX_AUTH_MISSING);
    assert_int_equal(sbx_auth_check(a, "Bearer ", "", &who), SBX_AUTH_MISSING);
    assert_int_equal(sbx_auth_check(a, "Basic op-secret-0001", NULL, &who), SBX_AUTH_MISSING);
    const char *wrong[] = {"op-secret-000", "op-secret-00011", "OP-SECRET-0001", "op-secret-0002",
                           "x"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(wrong); i++) {
        char h[64];
        snprintf(h, sizeof(h), "Bearer %s", wrong[i]);
        assert_int_equal(sbx_auth_check(a, h, NULL, &who), SBX_AUTH_INVALID);
        assert_null(who);
    }
    /* Longer than any configured token, sharing the first 256 bytes. */
    char longtok[600];
    memset(longtok, 'a', sizeof(longtok) - 1);
    longtok[sizeof(longtok) - 1] = '\0';
    sbx_err e = {0};
    char cfg[SBX_AUTH_TOKEN_MAX + 1];
    memcpy(cfg, longtok, SBX_AUTH_TOKEN_MAX);
    cfg[SBX_AUTH_TOKEN_MAX] = '\0';
    assert_int_equal(sbx_auth_add(a, &(sbx_auth_token){"max", cfg, NULL}, &e), 0);
    assert_int_equal(sbx_auth_check(a, NULL, cfg, &who), SBX_AUTH_OK);
    assert_int_equal(sbx_auth_check(a, NULL, longtok, &who), SBX_AUTH_INVALID);
    sbx_auth_free(a);
}

static void configuration_refused(void **state)
{
    sbx_auth *a = make();
    sbx_err e = {0};
    char big[SBX_AUTH_TOKEN_MAX + 2];
    memset(big, 'b', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    struct {
        sbx_auth_token t;
    } bad[] = {
        {{"", "abc", NULL}},      {{"n", "", NULL}},        {{"n", "has space", NULL}},
        {{"n", big, NULL}},       {{"ops", "other", NULL}}, {{"dup", "op-secret-0001", NULL}},
        {{"n", "tok\x7f", NULL}}, {{"n", "fine", ""}},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        assert_int_equal(sbx_auth_add(a, &bad[i].t, &e), -1);
        assert_int_equal(e.errnum, EINVAL);
    }
    assert_int_equal(sbx_auth_count(a), 2);
    sbx_auth_free(a);
}

static void token_list_and_public_paths(void **state)
{
    sbx_auth *a = sbx_auth_new();
    sbx_err e = {0};
    assert_int_equal(sbx_auth_add_list(a, "alpha-1 , beta-2,gamma-3", "env", &e), 0);
    assert_int_equal(sbx_auth_count(a), 3);
    const sbx_identity *who;
    assert_int_equal(sbx_auth_check(a, "Bearer beta-2", NULL, &who), SBX_AUTH_OK);
    assert_string_equal(who->name, "env-2");
    assert_int_equal(sbx_auth_add_list(a, "x1,,x2", "more", &e), -1);
    assert_non_null(strstr(e.msg, "item 2"));
    assert_true(sbx_auth_is_public(a, "/healthz"));
    assert_true(sbx_auth_is_public(a, "/readyz"));
    assert_true(sbx_auth_is_public(a, "/openapi.json"));
    assert_false(sbx_auth_is_public(a, "/healthz/x"));
    assert_false(sbx_auth_is_public(a, "/runtime/status"));
    const char *only[] = {"/ping"};
    assert_int_equal(sbx_auth_set_public(a, only, 1, &e), 0);
    assert_false(sbx_auth_is_public(a, "/healthz"));
    assert_true(sbx_auth_is_public(a, "/ping"));
    const char *bad[] = {"ping"};
    assert_int_equal(sbx_auth_set_public(a, bad, 1, &e), -1);
    assert_true(sbx_auth_is_public(a, "/ping"));
    sbx_auth_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bearer_and_claw_header),
        cmocka_unit_test(missing_and_wrong),
        cmocka_unit_test(configuration_refused),
        cmocka_unit_test(token_list_and_public_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
