/* What sandboxctl prints and sends: error answers, exit statuses, command
 * lines, event lines, tables, and the exec/run request body. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cli/format.h"
#include "cli/request.h"

static void error_answers(void **state)
{
    static const struct {
        long status;
        const char *body, *want;
    } cases[] = {
        {404, "{\"error\":{\"code\":\"not_found\",\"message\":\"no task abc\"}}",
         "404 not_found: no task abc"},
        {400, "{\"error\":{\"code\":\"bad_request\",\"message\":\"line 1\\nline 2\"}}",
         "400 bad_request: line 1"},
        {429, "{\"error\":{\"message\":\"queue full\"}}", "429 Too Many Requests: queue full"},
        {500, "{\"error\":\"plain\"}", "500 Internal Server Error: plain"},
        {401, "{\"message\":\"who are you\"}", "401 Unauthorized: who are you"},
        {502, "<html>bad\tgateway</html>\n<body>", "502 Bad Gateway: <html>bad gateway</html>"},
        {503, "", "503 Service Unavailable"},
        {418, "   \n", "418 Error"},
        {599, "{\"error\":{\"code\":\"x\"}}", "599 Server Error: {\"error\":{\"code\":\"x\"}}"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *m = sbx_cli_http_error(cases[i].status, cases[i].body, strlen(cases[i].body));
        assert_non_null(m);
        assert_string_equal(m, cases[i].want);
        free(m);
    }
    char *m = sbx_cli_http_error(404, NULL, 0);
    assert_string_equal(m, "404 Not Found");
    free(m);
    /* A long message is cut, control characters never reach the terminal. */
    char body[2000];
    int n = snprintf(body, sizeof(body), "{\"error\":{\"code\":\"c\\u001b\",\"message\":\"");
    memset(body + n, 'm', 1000);
    strcpy(body + n + 1000, "\"}}");
    m = sbx_cli_http_error(400, body, strlen(body));
    assert_non_null(strstr(m, "400 c : mmm"));
    assert_true(strlen(m) < 600);
    assert_non_null(strstr(m, "..."));
    free(m);
}

static json_t *J(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, JSON_ALLOW_NUL, &je);
    if (!j)
        fail_msg("bad test JSON: %s", je.text);
    return j;
}

static void exit_codes(void **state)
{
    static const struct {
        const char *task;
        int want;
    } cases[] = {
        {"{\"exitCode\":3,\"stdout\":\"\"}", 3},
        {"{\"status\":\"failed\",\"result\":{\"exitCode\":7}}", 7},
        {"{\"status\":\"succeeded\",\"result\":{\"exitCode\":0}}", 0},
        {"{\"status\":\"succeeded\"}", 0},
        {"{\"status\":\"canceled\"}", 124},
        {"{\"status\":\"timeout\",\"result\":null}", 124},
        {"{\"status\":\"interrupted\"}", 1},
        {"{\"status\":\"failed\",\"result\":{\"exitCode\":-1}}", 1},
        {"{\"status\":\"failed\",\"result\":{\"exitCode\":256}}", 1},
        {"{\"status\":\"failed\",\"result\":{\"exitCode\":\"3\"}}", 1},
        {"{}", 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *t = J(cases[i].task);
        if (sbx_cli_task_exit_code(t) != cases[i].want)
            fail_msg("%s: %d, not %d", cases[i].task, sbx_cli_task_exit_code(t), cases[i].want);
        json_decref(t);
    }
    assert_true(sbx_cli_task_final("succeeded"));
    assert_true(sbx_cli_task_final("interrupted"));
    assert_true(sbx_cli_task_final("timeout"));
    assert_false(sbx_cli_task_final("running"));
    assert_false(sbx_cli_task_final("pending"));
    assert_false(sbx_cli_task_final(NULL));
}

static void command_lines(void **state)
{
    static const struct {
        const char *task, *want;
    } cases[] = {
        {"{\"command\":[\"ls\",\"-l\",\"/tmp\"]}", "ls -l /tmp"},
        {"{\"command\":[\"sh\",\"-c\",\"echo 'hi' there\",\"\"]}",
         "sh -c 'echo '\\''hi'\\'' there' ''"},
        {"{\"command\":[\"a\\nb\"]}", "'a?b'"},
        {"{\"command\":\"python3 x.py\"}", "python3 x.py"},
        {"{\"command\":[],\"language\":\"python\",\"code\":\"print(1)\\nprint(2)\"}",
         "[python] print(1)"},
        {"{\"skill\":\"pdf\"}", "[skill] pdf"},
        {"{}", "-"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *t = J(cases[i].task);
        char *s = sbx_cli_command_line(t);
        assert_string_equal(s, cases[i].want);
        free(s);
        json_decref(t);
    }
}

static void event_lines(void **state)
{
    const char *body = "{\"id\":12,\"type\":\"exec_finished\",\"time\":\"t\",\"sessionId\":\"s\","
                       "\"data\":{\"taskId\":\"t1\",\"exitCode\":3,\"ok\":false,\"x\":null,"
                       "\"skill\":\"\",\"command\":[\"ls\"]}}";
    char *s = sbx_cli_event_line("11", "other", body, strlen(body), 200);
    assert_string_equal(s, "12 exec_finished taskId=\"t1\" exitCode=3 ok=false command=[\"ls\"]");
    free(s);
    /* The SSE id and type when the body has none; newlines escaped. */
    const char *d = "{\"data\":{\"stream\":\"stdout\",\"data\":\"a\\nb\"}}";
    s = sbx_cli_event_line("5", "tool_call_output", d, strlen(d), 200);
    assert_string_equal(s, "5 tool_call_output stream=\"stdout\" data=\"a\\nb\"");
    free(s);
    /* Not JSON: the first line of the text. */
    s = sbx_cli_event_line("", "", "plain text\nmore", 16, 200);
    assert_string_equal(s, "- message plain text");
    free(s);
    /* Any other JSON: dumped. */
    s = sbx_cli_event_line("1", "ping", "[1,2]", 5, 200);
    assert_string_equal(s, "1 ping [1,2]");
    free(s);
    /* Cut to the bound, on a UTF-8 boundary. */
    char big[600];
    int n = snprintf(big, sizeof(big), "{\"data\":{\"text\":\"");
    for (int i = 0; i < 150; i++)
        n += snprintf(big + n, sizeof(big) - (size_t)n, "\xc3\xa9");
    snprintf(big + n, sizeof(big) - (size_t)n, "\"}}");
    s = sbx_cli_event_line("1", "x", big, strlen(big), 40);
    assert_true(strlen(s) <= strlen("1 x ") + 40);
    assert_non_null(strstr(s, "..."));
    const char *dots = strstr(s, "...");
    assert_true(((unsigned char)dots[-1] & 0xc0) != 0xc0); /* no half character */
    free(s);
}

static char *capture(void (*fn)(FILE *, const json_t *), const json_t *v)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fn(f, v);
    fclose(f);
    return buf;
}

static void printed_views(void **state)
{
    json_t *o = J("{\"runtimeId\":\"r1\",\"status\":\"ready\",\"n\":2,\"obj\":{\"a\":1}}");
    char *s = capture(sbx_cli_print_object, o);
    assert_string_equal(s, "runtimeId: r1\n"
                           "status:    ready\n"
                           "n:         2\n"
                           "obj:       {\"a\":1}\n");
    free(s);
    json_decref(o);

    json_t *t = J("{\"id\":\"t1\",\"command\":[\"echo\",\"hi there\"],\"status\":\"succeeded\","
                  "\"result\":{\"exitCode\":0,\"stdout\":\"hi there\\n\",\"outcome\":\"exited\"}}");
    s = capture(sbx_cli_print_task, t);
    assert_non_null(strstr(s, "id:              t1\n"));
    assert_non_null(strstr(s, "command:         echo 'hi there'\n"));
    assert_non_null(strstr(s, "result.exitCode: 0\n"));
    assert_non_null(strstr(s, "result.stdout:   9 bytes\n"));
    assert_non_null(strstr(s, "result.outcome:  exited\n"));
    free(s);
    json_decref(t);

    json_t *list =
        J("[{\"id\":\"task-1\",\"status\":\"running\",\"createdAt\":\"2025-01-01T00:00:00Z\","
          "\"command\":[\"sleep\",\"9\"]},"
          "{\"id\":\"t2\",\"status\":\"failed\",\"result\":{\"exitCode\":3},"
          "\"command\":[\"x\"]}]");
    s = capture(sbx_cli_print_task_table, list);
    assert_non_null(strstr(s, "ID      STATUS       EXIT  CREATED"));
    assert_non_null(strstr(s, "task-1  running         -  2025-01-01T00:00:00Z      sleep 9\n"));
    assert_non_null(strstr(s, "t2      failed          3"));
    free(s);
    json_decref(list);

    json_t *entries = J("[{\"name\":\"a.txt\",\"type\":\"file\",\"size\":12,\"mode\":420,"
                        "\"mtime\":0},{\"name\":\"sub\",\"type\":\"dir\",\"size\":4096,"
                        "\"mode\":\"0755\",\"mtime\":\"2025-02-03T04:05:06Z\"}]");
    s = capture(sbx_cli_print_entries, entries);
    assert_string_equal(s, "0644   file               12  1970-01-01T00:00:00Z      a.txt\n"
                           "0755   dir              4096  2025-02-03T04:05:06Z      sub/\n");
    free(s);
    json_decref(entries);
}

static void exec_bodies(void **state)
{
    char *cmd[] = {"sh", "-c", "exit 3"};
    struct sbx_cli_args a = {.cmd = SBX_CLI_EXEC, .command = cmd, .n_command = 3};
    a.env[a.n_env++] = "A=1";
    a.env[a.n_env++] = "B=x=y";
    a.env[a.n_env++] = "A=2";
    a.timeout_s = 5;
    a.memory_mb = 300;
    a.pids = 8;
    a.cpu = 0.5;
    a.session = "s1";
    sbx_err e = {0};
    json_t *b = sbx_cli_exec_body(&a, NULL, 0, &e);
    char *s = json_dumps(b, JSON_COMPACT);
    assert_string_equal(s, "{\"command\":[\"sh\",\"-c\",\"exit 3\"],\"env\":{\"A\":\"2\",\"B\":"
                           "\"x=y\"},\"timeoutSeconds\":5,\"memoryMB\":300,\"pids\":8,"
                           "\"cpu\":0.5,\"sessionID\":\"s1\"}");
    free(s);
    json_decref(b);

    struct sbx_cli_args r = {.cmd = SBX_CLI_RUN, .language = "python", .timeout_s = 1.5};
    b = sbx_cli_exec_body(&r, "print(1)\n", 9, &e);
    s = json_dumps(b, JSON_COMPACT);
    assert_string_equal(
        s, "{\"language\":\"python\",\"code\":\"print(1)\\n\",\"timeoutSeconds\":1.5}");
    free(s);
    json_decref(b);

    /* JSON cannot carry bytes that are not UTF-8: the argument is named. */
    char *badcmd[] = {"echo", "\xff"};
    struct sbx_cli_args x = {.cmd = SBX_CLI_EXEC, .command = badcmd, .n_command = 2};
    assert_null(sbx_cli_exec_body(&x, NULL, 0, &e));
    assert_non_null(strstr(e.msg, "argument 2"));
    r.code_file = "prog.py";
    assert_null(sbx_cli_exec_body(&r, "\xc3", 1, &e));
    assert_non_null(strstr(e.msg, "prog.py"));
}

static void network_bodies(void **state)
{
    struct sbx_cli_args a = {.cmd = SBX_CLI_TASKS_NETWORK, .task_id = "t1"};
    a.allow[a.n_allow++] = "*.example.com";
    a.deny[a.n_deny++] = "10.0.0.0/8";
    a.deny[a.n_deny++] = ":25";
    a.net_default = "deny";
    sbx_err e = {0};
    json_t *b = sbx_cli_network_body(&a, &e);
    char *s = json_dumps(b, JSON_COMPACT);
    assert_string_equal(s, "{\"default\":\"deny\",\"allow\":[\"*.example.com\"],"
                           "\"deny\":[\"10.0.0.0/8\",\":25\"]}");
    free(s);
    json_decref(b);
    /* A session's names it; no rules at all: back to the operator's. */
    struct sbx_cli_args x = {.cmd = SBX_CLI_SESSION_NETWORK, .session = "s1"};
    b = sbx_cli_network_body(&x, &e);
    s = json_dumps(b, JSON_COMPACT);
    assert_string_equal(s, "{\"sessionID\":\"s1\"}");
    free(s);
    json_decref(b);
    x.deny[x.n_deny++] = "\xff";
    assert_null(sbx_cli_network_body(&x, &e));
    assert_non_null(strstr(e.msg, "--deny: rule 1"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(error_answers),  cmocka_unit_test(exit_codes),
        cmocka_unit_test(command_lines),  cmocka_unit_test(event_lines),
        cmocka_unit_test(printed_views),  cmocka_unit_test(exec_bodies),
        cmocka_unit_test(network_bodies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
