#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/router.h"

static int t_list, t_get, t_cancel, t_stats, t_post;

static sbx_router *make(void)
{
    sbx_router *r = sbx_router_new();
    assert_non_null(r);
    sbx_err e = {0};
    assert_int_equal(sbx_router_add(r, "GET", "/runtime/tasks", &t_list, &e), 0);
    assert_int_equal(sbx_router_add(r, "POST", "/runtime/tasks", &t_post, &e), 0);
    assert_int_equal(sbx_router_add(r, "GET", "/runtime/tasks/{id}", &t_get, &e), 0);
    assert_int_equal(sbx_router_add(r, "POST", "/runtime/tasks/{id}/cancel", &t_cancel, &e), 0);
    assert_int_equal(sbx_router_add(r, "GET", "/runtime/tasks/stats", &t_stats, &e), 0);
    return r;
}

static void literal_and_params(void **state)
{
    sbx_router *r = make();
    sbx_route_match m;
    assert_int_equal(sbx_router_match(r, "GET", "/runtime/tasks", &m, NULL, 0), SBX_ROUTE_FOUND);
    assert_ptr_equal(m.target, &t_list);
    sbx_route_match_clear(&m);
    assert_int_equal(sbx_router_match(r, "GET", "/runtime/tasks/abc-123", &m, NULL, 0),
                     SBX_ROUTE_FOUND);
    assert_ptr_equal(m.target, &t_get);
    assert_string_equal(sbx_route_param(&m, "id"), "abc-123");
    assert_null(sbx_route_param(&m, "other"));
    sbx_route_match_clear(&m);
    assert_int_equal(sbx_router_match(r, "POST", "/runtime/tasks/x9/cancel", &m, NULL, 0),
                     SBX_ROUTE_FOUND);
    assert_ptr_equal(m.target, &t_cancel);
    assert_string_equal(sbx_route_param(&m, "id"), "x9");
    sbx_route_match_clear(&m);
    /* The literal route wins over the placeholder, whatever the order. */
    assert_int_equal(sbx_router_match(r, "GET", "/runtime/tasks/stats", &m, NULL, 0),
                     SBX_ROUTE_FOUND);
    assert_ptr_equal(m.target, &t_stats);
    sbx_route_match_clear(&m);
    sbx_router_free(r);
}

static void not_found_and_bad_method(void **state)
{
    sbx_router *r = make();
    sbx_route_match m;
    char allow[64];
    const char *missing[] = {"/",
                             "/runtime",
                             "/runtime/tasks/",
                             "/runtime/tasks//cancel",
                             "/runtime/tasks/a/b",
                             "runtime/tasks",
                             ""};
    for (size_t i = 0; i < SBX_ARRAY_LEN(missing); i++)
        assert_int_equal(sbx_router_match(r, "GET", missing[i], &m, allow, sizeof(allow)),
                         SBX_ROUTE_NOT_FOUND);
    assert_int_equal(sbx_router_match(r, "DELETE", "/runtime/tasks", &m, allow, sizeof(allow)),
                     SBX_ROUTE_BAD_METHOD);
    assert_string_equal(allow, "GET, HEAD, POST");
    assert_int_equal(
        sbx_router_match(r, "GET", "/runtime/tasks/1/cancel", &m, allow, sizeof(allow)),
        SBX_ROUTE_BAD_METHOD);
    assert_string_equal(allow, "POST");
    /* HEAD falls back to GET. */
    assert_int_equal(sbx_router_match(r, "HEAD", "/runtime/tasks/7", &m, NULL, 0), SBX_ROUTE_FOUND);
    assert_ptr_equal(m.target, &t_get);
    sbx_route_match_clear(&m);
    sbx_router_free(r);
}

static void bad_patterns(void **state)
{
    sbx_router *r = sbx_router_new();
    sbx_err e = {0};
    const char *bad[] = {"runtime",      "/a/{}",    "/a/{id",  "/a/x{id}",
                         "/a/{id}/{id}", "/a/{i-d}", "/a/{id}x"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        assert_int_equal(sbx_router_add(r, "GET", bad[i], &t_get, &e), -1);
        assert_int_equal(e.errnum, EINVAL);
    }
    assert_int_equal(sbx_router_add(r, "get", "/a", &t_get, &e), -1);
    assert_int_equal(sbx_router_add(r, "GET", "/a/{id}", &t_get, &e), 0);
    assert_int_equal(sbx_router_add(r, "GET", "/a/{other}", &t_get, &e), -1);
    assert_int_equal(e.errnum, EEXIST);
    assert_int_equal(sbx_router_add(r, "PUT", "/a/{other}", &t_get, &e), 0);
    sbx_route_match m;
    assert_int_equal(sbx_router_match(r, "PUT", "/a/q", &m, NULL, 0), SBX_ROUTE_FOUND);
    assert_string_equal(sbx_route_param(&m, "other"), "q");
    sbx_route_match_clear(&m);
    sbx_router_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(literal_and_params),
        cmocka_unit_test(not_found_and_bad_method),
        cmocka_unit_test(bad_patterns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
