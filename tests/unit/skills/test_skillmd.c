/* SKILL.md front matter: OpenClaw's format, our sandbox: key, and every kind
 * of malformed block refused with a reason (never a crash). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "skills/skillmd.h"

static json_t *parse(const char *text, sbx_err *e)
{
    memset(e, 0, sizeof(*e));
    return sbx_skillmd_parse(text, strlen(text), e);
}

static void openclaw_fields(void **state)
{
    (void)state;
    sbx_err e;
    json_t *o = parse("---\nname: gh\ndescription: GitHub CLI\nhomepage: https://cli.github.com\n"
                      "user-invocable: false\nmetadata: {\"openclaw\": {\"requires\": "
                      "{\"bins\": [\"gh\"], \"anyBins\": [\"a\", \"b\"], \"env\": [\"GH_TOKEN\"], "
                      "\"config\": [\"x.y\"]}, \"primaryEnv\": \"GH_TOKEN\", \"os\": "
                      "[\"linux\"]}}\n---\n# Body\ntext\n",
                      &e);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "name")), "gh");
    assert_string_equal(json_string_value(json_object_get(o, "description")), "GitHub CLI");
    assert_string_equal(json_string_value(json_object_get(o, "homepage")),
                        "https://cli.github.com");
    assert_true(json_is_false(json_object_get(o, "userInvocable")));
    json_t *oc = json_object_get(o, "openclaw");
    assert_string_equal(json_string_value(json_object_get(oc, "primaryEnv")), "GH_TOKEN");
    json_t *bins = json_object_get(json_object_get(oc, "requires"), "bins");
    assert_int_equal(json_array_size(bins), 1);
    assert_string_equal(json_string_value(json_object_get(o, "body")), "# Body\ntext\n");
    json_decref(o);
}

static void metadata_as_json_string_and_old_names(void **state)
{
    (void)state;
    sbx_err e;
    json_t *o =
        parse("---\nname: a\ndescription: b\nmetadata: '{\"clawdbot\":{\"os\":[\"linux\"]}}'"
              "\n---\n",
              &e);
    assert_non_null(o);
    json_t *os = json_object_get(json_object_get(o, "openclaw"), "os");
    assert_string_equal(json_string_value(json_array_get(os, 0)), "linux");
    json_decref(o);
}

static void sandbox_key(void **state)
{
    (void)state;
    sbx_err e;
    json_t *o = parse("\xef\xbb\xbf---\r\nname: w\r\ndescription: d\r\nsandbox:\r\n  network: "
                      "[api.example.com, \"1.2.3.4:443\"]\r\n  limits: {memory: 64m, pids: 16, "
                      "cpu: 0.5, timeout: 30s}\r\n---\r\n",
                      &e);
    assert_non_null(o);
    json_t *sb = json_object_get(o, "sandbox");
    assert_int_equal(json_array_size(json_object_get(sb, "network")), 2);
    json_t *l = json_object_get(sb, "limits");
    assert_int_equal(json_integer_value(json_object_get(l, "memoryBytes")), 64 << 20);
    assert_int_equal(json_integer_value(json_object_get(l, "pids")), 16);
    assert_true(json_number_value(json_object_get(l, "cpu")) == 0.5);
    assert_true(json_number_value(json_object_get(l, "timeoutSeconds")) == 30);
    json_decref(o);
}

static void malformed_blocks_with_reason(void **state)
{
    (void)state;
    static const struct {
        const char *text, *reason;
    } bad[] = {
        {"# no front matter\n", "no front matter"},
        {"---\nname: a\ndescription: b\n", "no closing ---"},
        {"---\nname: [a\ndescription: b\n---\n", "SKILL.md line"},
        {"---\ndescription: b\n---\n", "name is required"},
        {"---\nname: a\n---\n", "description is required"},
        {"---\nname: a\ndescription: \"\"\n---\n", "description is required"},
        {"---\n- a\n- b\n---\n", "must be a mapping"},
        {"---\nname: a\ndescription: b\nuser-invocable: maybe\n---\n", "user-invocable"},
        {"---\nname: a\ndescription: b\nsandbox: [x]\n---\n", "sandbox must be a mapping"},
        {"---\nname: a\ndescription: b\nsandbox: {nets: []}\n---\n", "sandbox.nets"},
        {"---\nname: a\ndescription: b\nsandbox: {network: [\"a b\"]}\n---\n", "network[0]"},
        {"---\nname: a\ndescription: b\nsandbox: {limits: {memory: lots}}\n---\n", "limits.memory"},
        {"---\nname: a\ndescription: b\nsandbox: {limits: {disk: 1}}\n---\n", "limits.disk"},
        {"---\nname: a\ndescription: b\nmetadata: {openclaw: {requires: {bins: x}}}\n---\n",
         "requires.bins"},
        {"---\n? [a, b]\n: c\nname: a\ndescription: b\n---\n", "a key must be a plain string"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sbx_err e;
        json_t *o = parse(bad[i].text, &e);
        if (o)
            fail_msg("accepted: %s", bad[i].text);
        assert_int_equal(e.errnum, EINVAL);
        if (!strstr(e.msg, bad[i].reason))
            fail_msg("'%s' does not say '%s'", e.msg, bad[i].reason);
    }
}

static void deep_nesting_refused(void **state)
{
    (void)state;
    char text[4096] = "---\nname: a\ndescription: b\nx: ";
    for (int i = 0; i < 100; i++)
        strcat(text, "[");
    for (int i = 0; i < 100; i++)
        strcat(text, "]");
    strcat(text, "\n---\n");
    sbx_err e;
    assert_null(parse(text, &e));
    assert_non_null(strstr(e.msg, "nested too deep"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(openclaw_fields),
        cmocka_unit_test(metadata_as_json_string_and_old_names),
        cmocka_unit_test(sandbox_key),
        cmocka_unit_test(malformed_blocks_with_reason),
        cmocka_unit_test(deep_nesting_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
