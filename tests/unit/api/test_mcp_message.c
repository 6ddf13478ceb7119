/* api/mcp/message.c: a POST /mcp body classified, tools/call params and the
 * task tools' arguments, with the answers the endpoint gives for each. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/mcp/message.h"

static enum mcp_msg_kind kind_of(const char *text, char *why, size_t len)
{
    struct mcp_msg m;
    enum mcp_msg_kind k = mcp_message_parse(text, strlen(text), &m, why, len);
    json_decref(m.root);
    return k;
}

static void messages(void **state)
{
    char why[300];
    assert_int_equal(kind_of("{\"jsonrpc\":", why, sizeof(why)), MCP_MSG_PARSE_ERROR);
    assert_true(strncmp(why, "parse error: body:1:", 20) == 0);
    assert_int_equal(
        kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"ping\"}", why, sizeof(why)),
        MCP_MSG_PARSE_ERROR); /* duplicate keys */
    assert_int_equal(
        kind_of("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", why, sizeof(why)),
        MCP_MSG_BATCH);
    assert_int_equal(
        kind_of("{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", why, sizeof(why)),
        MCP_MSG_INVALID);
    assert_int_equal(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":7}", why, sizeof(why)),
                     MCP_MSG_INVALID);
    assert_int_equal(
        kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\",\"params\":[]}", why, sizeof(why)),
        MCP_MSG_INVALID);
    /* jansson takes an object or an array only: a bare value is not JSON here. */
    assert_int_equal(kind_of("\"2.0\"", why, sizeof(why)), MCP_MSG_PARSE_ERROR);
    assert_int_equal(
        kind_of("{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"ping\"}", why, sizeof(why)),
        MCP_MSG_INVALID);
    assert_int_equal(
        kind_of("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", why, sizeof(why)),
        MCP_MSG_NOTIFICATION);
    assert_int_equal(kind_of("{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}", why, sizeof(why)),
                     MCP_MSG_NOTIFICATION); /* a response: taken, not answered */
    /* An invalid message keeps a usable id for its error, never another. */
    struct mcp_msg m;
    const char *t = "{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"a\",\"params\":1}";
    assert_int_equal(mcp_message_parse(t, strlen(t), &m, why, sizeof(why)), MCP_MSG_INVALID);
    assert_string_equal(json_string_value(m.id), "x");
    json_decref(m.root);
    t = "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"a\"}";
    assert_int_equal(mcp_message_parse(t, strlen(t), &m, why, sizeof(why)), MCP_MSG_INVALID);
    assert_null(m.id);
    json_decref(m.root);
    t = "{\"method\":\"tools/call\",\"params\":{\"name\":\"exec\"},\"jsonrpc\":\"2.0\",\"id\":0}";
    assert_int_equal(mcp_message_parse(t, strlen(t), &m, why, sizeof(why)), MCP_MSG_REQUEST);
    assert_string_equal(m.method, "tools/call");
    assert_int_equal(json_integer_value(m.id), 0);
    assert_non_null(m.params);
    json_decref(m.root);
}

static bool known(const char *name)
{
    return strcmp(name, "exec") == 0 || strcmp(name, "run_code") == 0;
}

static int call(const char *params, const char **name, json_t **args, json_t **token, char *why)
{
    json_t *p = json_loads(params, 0, NULL);
    int rc = mcp_call_params(p, known, name, args, token, why, 200);
    json_decref(p); /* the outputs are not used past this */
    return rc;
}

static void call_params(void **state)
{
    const char *name;
    json_t *args, *token;
    char why[200];
    assert_int_equal(call("{\"name\":1}", &name, &args, &token, why), -1);
    assert_string_equal(why, "params.name must be a string");
    /* An unknown tool is said before bad arguments. */
    assert_int_equal(call("{\"name\":\"nope\",\"arguments\":[]}", &name, &args, &token, why), -1);
    assert_string_equal(why, "unknown tool 'nope'");
    assert_int_equal(call("{\"name\":\"exec\",\"arguments\":[]}", &name, &args, &token, why), -1);
    assert_string_equal(why, "params.arguments must be an object");
    json_t *p = json_loads("{\"name\":\"exec\",\"arguments\":null,\"_meta\":{\"progressToken\":"
                           "\"t1\"}}",
                           0, NULL);
    assert_int_equal(mcp_call_params(p, known, &name, &args, &token, why, sizeof(why)), 0);
    assert_string_equal(name, "exec");
    assert_null(args);
    assert_string_equal(json_string_value(token), "t1");
    json_decref(p);
    p = json_loads("{\"name\":\"run_code\",\"arguments\":{},\"_meta\":{\"progressToken\":1.5}}", 0,
                   NULL);
    assert_int_equal(mcp_call_params(p, known, &name, &args, &token, why, sizeof(why)), 0);
    assert_true(json_is_object(args));
    assert_null(token); /* neither a string nor an integer */
    json_decref(p);
}

static json_t *body_of(const char *tool, const char *args, sbx_err *e)
{
    json_t *a = json_loads(args, 0, NULL);
    json_t *b = mcp_task_body(tool, a, e);
    json_decref(a);
    return b;
}

static void task_bodies(void **state)
{
    sbx_err e = {0};
    json_t *b = body_of("exec", "{\"command\":\"echo hi\",\"session\":\"s\",\"env\":null}", &e);
    assert_non_null(b);
    char *s = json_dumps(b, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(s, "{\"command\":[\"/bin/sh\",\"-c\",\"echo hi\"],\"sessionID\":\"s\"}");
    free(s);
    json_decref(b);
    b = body_of("exec", "{\"argv\":[\"ls\"],\"timeoutSeconds\":5}", &e);
    s = json_dumps(b, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(s, "{\"command\":[\"ls\"],\"timeoutSeconds\":5}");
    free(s);
    json_decref(b);
    assert_null(body_of("exec", "{\"command\":\"a\",\"argv\":[\"b\"]}", &e));
    assert_non_null(strstr(e.msg, "not both"));
    assert_null(body_of("exec", "{\"argv\":[]}", &e));
    assert_string_equal(e.msg, "argv must be a non-empty list of strings");
    assert_null(body_of("exec", "{\"command\":1}", &e));
    assert_string_equal(e.msg, "command must be a string (a shell command line)");
    assert_null(body_of("exec", "{\"cmd\":\"x\"}", &e));
    assert_string_equal(e.msg, "unknown field \"arguments.cmd\"");
    b = body_of("run_code", "{\"language\":\"python\",\"code\":\"print(1)\",\"stdin\":\"x\"}", &e);
    s = json_dumps(b, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(s, "{\"code\":\"print(1)\",\"language\":\"python\",\"stdin\":\"x\"}");
    free(s);
    json_decref(b);
    assert_null(body_of("run_code", "{\"language\":\"python\"}", &e));
    assert_string_equal(e.msg, "language and code are required, both strings");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(messages),
        cmocka_unit_test(call_params),
        cmocka_unit_test(task_bodies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
