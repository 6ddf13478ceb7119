#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/json.h"

static void parse_ok_and_empty(void **state)
{
    sbx_err e = {0};
    const char *text = " {\"a\": 1, \"b\": [true]}\n";
    json_t *v = sbx_json_parse_object(text, strlen(text), false, &e);
    assert_non_null(v);
    assert_int_equal(json_integer_value(json_object_get(v, "a")), 1);
    json_decref(v);
    v = sbx_json_parse_object(" \r\n", 3, true, &e);
    assert_non_null(v);
    assert_int_equal(json_object_size(v), 0);
    json_decref(v);
    assert_null(sbx_json_parse_object("", 0, false, &e));
    assert_string_equal(e.msg, "body:1:1: a JSON object is required");
}

static void errors_with_position(void **state)
{
    sbx_err e = {0};
    const char *text = "{\"command\": [\"ls\",]}";
    assert_null(sbx_json_parse_object(text, strlen(text), false, &e));
    assert_int_equal(e.errnum, EINVAL);
    assert_true(strncmp(e.msg, "body:1:", 7) == 0);
    const char *two = "{\n  \"a\": 1,\n  \"b\": tru\n}";
    assert_null(sbx_json_parse_object(two, strlen(two), false, &e));
    assert_true(strncmp(e.msg, "body:3:", 7) == 0);
    const char *dup = "{\"a\":1,\"a\":2}";
    assert_null(sbx_json_parse_object(dup, strlen(dup), false, &e));
    assert_non_null(strstr(e.msg, "duplicate"));
    assert_null(sbx_json_parse_object("[1,2]", 5, false, &e));
    assert_non_null(strstr(e.msg, "object"));
    const char *nul = "{\"a\":\"x\\u0000y\"}";
    assert_null(sbx_json_parse_object(nul, strlen(nul), false, &e));
    /* Embedded raw NUL: the length is what was received, not strlen. */
    const char raw[] = "{\"a\":1}\0{";
    assert_null(sbx_json_parse_object(raw, sizeof(raw) - 1, false, &e));
}

static void unknown_fields(void **state)
{
    static const char *const allowed[] = {"command", "timeoutSeconds", NULL};
    sbx_err e = {0};
    json_t *v = json_pack("{s:[s],s:i}", "command", "ls", "timeoutSeconds", 5);
    assert_int_equal(sbx_json_check_fields(v, NULL, allowed, &e), 0);
    json_object_set_new(v, "timeoutSecond", json_integer(1));
    assert_int_equal(sbx_json_check_fields(v, NULL, allowed, &e), -1);
    assert_string_equal(e.msg, "unknown field \"timeoutSecond\"");
    assert_int_equal(sbx_json_check_fields(v, "capabilities", allowed, &e), -1);
    assert_string_equal(e.msg, "unknown field \"capabilities.timeoutSecond\"");
    json_decref(v);
    char key[200];
    memset(key, 'k', sizeof(key) - 1);
    key[sizeof(key) - 1] = '\0';
    v = json_object();
    json_object_set_new(v, key, json_null());
    assert_int_equal(sbx_json_check_fields(v, NULL, allowed, &e), -1);
    assert_true(strlen(e.msg) < 120);
    json_decref(v);
    v = json_array();
    assert_int_equal(sbx_json_check_fields(v, NULL, allowed, &e), -1);
    json_decref(v);
}

static void error_body(void **state)
{
    json_t *b = sbx_json_error_body("bad_request", "cut \xe4\xb8");
    assert_non_null(b);
    char *s = json_dumps(b, JSON_COMPACT);
    assert_string_equal(s, "{\"error\":{\"code\":\"bad_request\",\"message\":\"cut ??\"}}");
    free(s);
    json_decref(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parse_ok_and_empty),
        cmocka_unit_test(errors_with_position),
        cmocka_unit_test(unknown_fields),
        cmocka_unit_test(error_body),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
