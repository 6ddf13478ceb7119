/* sandboxctl's command line: every command, every option form, and every bad
 * option or value refused with its name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cli/args.h"

#define MAX_ARGS 32

/* Parse a NULL-terminated list of arguments (after the program name). */
static int parse_env(const struct sbx_cli_env *env, struct sbx_cli_args *a, sbx_err *e, ...)
{
    static char *argv[MAX_ARGS];
    int argc = 0;
    argv[argc++] = "sandboxctl";
    va_list ap;
    va_start(ap, e);
    for (char *s; (s = va_arg(ap, char *)) != NULL;)
        argv[argc++] = s;
    va_end(ap);
    argv[argc] = NULL;
    *e = (sbx_err){0};
    return sbx_cli_parse_args(argc, argv, env, a, e);
}
#define PARSE(a, e, ...) parse_env(NULL, a, e, __VA_ARGS__, (char *)NULL)

static void status_with_defaults(void **state)
{
    struct sbx_cli_args a;
    sbx_err e;
    assert_int_equal(PARSE(&a, &e, "status"), 0);
    assert_int_equal(a.cmd, SBX_CLI_STATUS);
    assert_string_equal(a.url, SBX_CLI_DEFAULT_URL);
    assert_null(a.token);
    assert_null(a.tenant);
    assert_false(a.json);
    assert_int_equal(PARSE(&a, &e, "--json", "status"), 0);
    assert_true(a.json);
    assert_int_equal(PARSE(&a, &e, "status", "--json"), 0); /* options anywhere */
    assert_true(a.json);
}

static void environment_then_flags(void **state)
{
    struct sbx_cli_env env = {"unix:/run/s.sock", "tok1", "acme", "k1", "c1"};
    struct sbx_cli_args a;
    sbx_err e;
    assert_int_equal(parse_env(&env, &a, &e, "status", (char *)NULL), 0);
    assert_string_equal(a.url, "unix:/run/s.sock");
    assert_string_equal(a.token, "tok1");
    assert_string_equal(a.tenant, "acme");
    assert_string_equal(a.clone_key, "k1");
    assert_string_equal(a.clone_id, "c1");
    assert_int_equal(parse_env(&env, &a, &e, "--url", "http://h:1", "--token=tok2", "--tenant",
                               "t2", "--clone-key", "k2", "--clone-id=c2", "status", (char *)NULL),
                     0);
    assert_string_equal(a.url, "http://h:1");
    assert_string_equal(a.token, "tok2");
    assert_string_equal(a.tenant, "t2");
    assert_string_equal(a.clone_key, "k2");
    assert_string_equal(a.clone_id, "c2");
    /* Empty variables are unset. */
    struct sbx_cli_env empty = {"", "", "", "", ""};
    assert_int_equal(parse_env(&empty, &a, &e, "status", (char *)NULL), 0);
    assert_string_equal(a.url, SBX_CLI_DEFAULT_URL);
    assert_null(a.token);
}

static void bad_environment_is_named(void **state)
{
    struct sbx_cli_args a;
    sbx_err e;
    struct sbx_cli_env env = {.url = "gopher://x"};
    assert_int_equal(parse_env(&env, &a, &e, "status", (char *)NULL), -1);
    assert_non_null(strstr(e.msg, "SANDBOX_URL"));
    assert_non_null(strstr(e.msg, "gopher://x"));
    env = (struct sbx_cli_env){.tenant = "a/b"};
    assert_int_equal(parse_env(&env, &a, &e, "status", (char *)NULL), -1);
    assert_non_null(strstr(e.msg, "SANDBOX_TENANT"));
    env = (struct sbx_cli_env){.token = "se cret"};
    assert_int_equal(parse_env(&env, &a, &e, "status", (char *)NULL), -1);
    assert_non_null(strstr(e.msg, "SANDBOX_TOKEN"));
    assert_null(strstr(e.msg, "se cret")); /* a token is never echoed */
}

static void exec_forms(void **state)
{
    struct sbx_cli_args a;
    sbx_err e;
    assert_int_equal(PARSE(&a, &e, "exec", "--timeout", "5", "--env", "A=1", "-e", "B=2=3",
                           "--memory", "300M", "--pids", "16", "--cpu", "0.5", "--session", "s1",
                           "--", "sh", "-c", "echo hi"),
                     0);
    assert_int_equal(a.cmd, SBX_CLI_EXEC);
    assert_true(a.timeout_s == 5);
    assert_int_equal(a.n_env, 2);
    assert_string_equal(a.env[0], "A=1");
    assert_string_equal(a.env[1], "B=2=3");
    assert_int_equal(a.memory_mb, 300);
    assert_int_equal(a.pids, 16);
    assert_true(a.cpu == 0.5);
    assert_string_equal(a.session, "s1");
    assert_false(a.detach);
    assert_int_equal(a.n_command, 3);
    assert_string_equal(a.command[0], "sh");
    assert_string_equal(a.command[2], "echo hi");

    /* Without "--": the first operand starts the command, whose options
     * are its own. */
    assert_int_equal(PARSE(&a, &e, "--json", "exec", "-d", "ls", "-l", "--json", "--", "x"), 0);
    assert_true(a.detach);
    assert_int_equal(a.n_command, 5);
    assert_string_equal(a.command[0], "ls");
    assert_string_equal(a.command[2], "--json");
    assert_string_equal(a.command[3], "--");
    /* --memory rounds up to whole MB. */
    assert_int_equal(PARSE(&a, &e, "exec", "--memory=1k", "--", "true"), 0);
    assert_int_equal(a.memory_mb, 1);
    assert_int_equal(PARSE(&a, &e, "exec", "--timeout=0.5", "true"), 0);
    assert_true(a.timeout_s == 0.5);
}

static void run_forms(void **state)
{
    struct sbx_cli_args a;
    sbx_err e;
    assert_int_equal(PARSE(&a, &e, "run", "--language", "python", "-c", "print(1)"), 0);
    assert_int_equal(a.cmd, SBX_CLI_RUN);
    assert_string_equal(a.language, "python");
    assert_string_equal(a.code, "print(1)");
    assert_null(a.code_file);
    assert_int_equal(PARSE(&a, &e, "run", "-l", "node", "app.js", "--timeout", "3"), 0);
    assert_string_equal(a.language, "node");
    assert_string_equal(a.code_file, "app.js");
    assert_true(a.timeout_s == 3);
    assert_int_equal(PARSE(&a, &e, "run", "-lshell", "-cecho hi"), 0); /* attached values */
    assert_string_equal(a.language, "shell");
    assert_string_equal(a.code, "echo hi");
    assert_int_equal(PARSE(&a, &e, "run", "--language=python-3.9", "-"), 0);
    assert_string_equal(a.language, "python-3.9");
    assert_string_equal(a.code_file, "-");
    assert_false(a.request_stdin);
    /* seed 004: the request on stdin, --server for --url */
    assert_int_equal(PARSE(&a, &e, "run", "--server", "http://localhost:8080"), 0);
    assert_int_equal(a.cmd, SBX_CLI_RUN);
    assert_true(a.request_stdin);
    assert_string_equal(a.url, "http://localhost:8080");
    assert_null(a.language);
    assert_int_equal(PARSE(&a, &e, "--url", "http://a:1", "--server", "http://b:2", "status"), 0);
    assert_string_equal(a.url, "http://b:2"); /* the later wins */
}

static void tasks_forms(void **state)
{
    struct sbx_cli_args a;
    sbx_err e;
    assert_int_equal(PARSE(&a, &e, "tasks", "list", "--status", "running", "--limit", "50",
                           "--cursor", "abc", "--all"),
                     0);
    assert_int_equal(a.cmd, SBX_CLI_TASKS_LIST);
    assert_string_equal(a.status, "running");
    assert_int_equal(a.limit, 50);
    assert_string_equal(a.cursor, "abc");
    assert_true(a.all);
    assert_int_equal(PARSE(&a, &e, "tasks", "get", "0190-ab"), 0);
    assert_int_equal(a.cmd, SBX_CLI_TASKS_GET);
    assert_string_equal(a.task_id, "0190-ab");
    assert_int_equal(PARSE(&a, &e, "tasks", "cancel", "x1"), 0);
    assert_int_equal(a.cmd, SBX_CLI_TASKS_CANCEL);
    assert_int_equal(PARSE(&a, &e, "tasks", "wait", "x1", "--json"), 0);
    assert_int_equal(a.cmd, SBX_CLI_TASKS_WAIT);
    assert_true(a.json);
}

static void session_forms(void **state)
{
    struct sbx_cli_args a;
    sbx_err e;
    assert_int_equal(PARSE(&a, &e, "session", "start"), 0);
    assert_int_equal(a.cmd, SBX_CLI_SESSION_START);
    assert_null(a.session);
    assert_int_equal(PARSE(&a, &e, "session", "start", "agent-7", "--json"), 0);
    assert_string_equal(a.session, "agent-7");
    assert_true(a.json);
    assert_int_equal(PARSE(&a, &e, "session", "stop", "agent-7"), 0);
    assert_int_equal(a.cmd, SBX_CLI_SESSION_STOP);
    assert_int_equal(PARSE(&a, &e, "session", "stop"), -1);
    assert_string_equal(e.msg, "session: missing argument (usage: session stop ID)");
    assert_int_equal(PARSE(&a, &e, "session", "pause", "x"), -1);
    assert_string_equal(e.msg, "session: unknown subcommand 'pause' (start, stop, network)");
    assert_int_equal(PARSE(&a, &e, "session", "start", ".."), -1);
    assert_string_equal(e.msg, "session ID: '..' is not a valid name");
    assert_int_equal(PARSE(&a, &e, "session", "start", "x", "--timeout", "3"), -1);
    assert_string_equal(e.msg, "--timeout does not apply to 'session start'");
}

static void chat_and_turn_forms(void **state)
{
    struct sbx_cli_args a;
    sbx_err e;
    assert_int_equal(PARSE(&a, &e, "chat", "s1", "hello there"), 0);
    assert_int_equal(a.cmd, SBX_CLI_CHAT);
    assert_string_equal(a.session, "s1");
    assert_string_equal(a.message, "hello there");
    assert_int_equal(PARSE(&a, &e, "chat", "s1", "--json"), 0);
    assert_null(a.message); /* from stdin */
    assert_true(a.json);
    assert_int_equal(PARSE(&a, &e, "chat"), -1);
    assert_string_equal(e.msg, "chat: missing argument (usage: chat SESSION [MESSAGE])");
    assert_int_equal(PARSE(&a, &e, "chat", "../x", "hi"), -1);
    assert_string_equal(e.msg, "session ID: '../x' has a character outside [A-Za-z0-9._-]");
    assert_int_equal(PARSE(&a, &e, "turn", "s1", "[{\"name\":\"exec\"}]"), 0);
    assert_int_equal(a.cmd, SBX_CLI_TURN);
    assert_string_equal(a.input, "[{\"name\":\"exec\"}]");
    assert_int_equal(PARSE(&a, &e, "turn", "s1", "-"), 0);
    assert_string_equal(a.input, "-");
    assert_int_equal(PARSE(&a, &e, "turn", "cancel", "0191-abc"), 0);
    assert_int_equal(a.cmd, SBX_CLI_TURN_CANCEL);
    assert_string_equal(a.task_id, "0191-abc");
    /* a session called cancel still takes turns */
    assert_int_equal(PARSE(&a, &e, "turn", "cancel", "{\"type\":\"tool_calls\"}"), 0);
    assert_int_equal(a.cmd, SBX_CLI_TURN);
    assert_string_equal(a.session, "cancel");
    assert_int_equal(PARSE(&a, &e, "turn", "s1"), -1);
    assert_int_equal(PARSE(&a, &e, "chat", "s1", "hi", "--timeout", "3"), -1);
    assert_string_equal(e.msg, "--timeout does not apply to 'chat'");
}

static void network_forms(void **state)
{
    struct sbx_cli_args a;
    sbx_err e;
    assert_int_equal(PARSE(&a, &e, "tasks", "network", "t1", "--allow", "*.a.test", "--deny",
                           "10.0.0.0/8", "--deny", ":25", "--default", "deny"),
                     0);
    assert_int_equal(a.cmd, SBX_CLI_TASKS_NETWORK);
    assert_string_equal(a.task_id, "t1");
    assert_int_equal(a.n_allow, 1);
    assert_int_equal(a.n_deny, 2);
    assert_string_equal(a.deny[1], ":25");
    assert_string_equal(a.net_default, "deny");
    assert_int_equal(PARSE(&a, &e, "session", "network", "s1", "--json"), 0);
    assert_int_equal(a.cmd, SBX_CLI_SESSION_NETWORK);
    assert_string_equal(a.session, "s1");
    assert_int_equal(a.n_allow + a.n_deny, 0);
    assert_int_equal(PARSE(&a, &e, "session", "network", "s1", "--default", "maybe"), -1);
    assert_string_equal(e.msg, "--default: 'maybe' is not allow or deny");
    assert_int_equal(PARSE(&a, &e, "tasks", "network", "t1", "--allow", ""), -1);
    assert_string_equal(e.msg, "--allow: '' is not a rule");
    assert_int_equal(PARSE(&a, &e, "exec", "--allow", "x", "--", "true"), -1);
    assert_string_equal(e.msg, "--allow does not apply to 'exec'");
    assert_int_equal(PARSE(&a, &e, "tasks", "network"), -1);
    assert_string_equal(e.msg, "tasks: missing argument (usage: tasks get|cancel|wait|network ID)");
}

static void files_and_stream_forms(void **state)
{
    struct sbx_cli_args a;
    sbx_err e;
    assert_int_equal(PARSE(&a, &e, "files", "get", "dir/a.txt", "-o", "out.txt"), 0);
    assert_int_equal(a.cmd, SBX_CLI_FILES_GET);
    assert_string_equal(a.path, "dir/a.txt");
    assert_string_equal(a.output, "out.txt");
    assert_int_equal(PARSE(&a, &e, "files", "get", "a", "--output=b"), 0);
    assert_string_equal(a.output, "b");
    assert_int_equal(PARSE(&a, &e, "files", "put", "local.bin", "remote/x.bin"), 0);
    assert_int_equal(a.cmd, SBX_CLI_FILES_PUT);
    assert_string_equal(a.local, "local.bin");
    assert_string_equal(a.path, "remote/x.bin");
    assert_int_equal(PARSE(&a, &e, "files", "ls"), 0);
    assert_int_equal(a.cmd, SBX_CLI_FILES_LS);
    assert_string_equal(a.path, "/");
    assert_int_equal(PARSE(&a, &e, "files", "rm", "--", "-odd-name"), 0);
    assert_int_equal(a.cmd, SBX_CLI_FILES_RM);
    assert_string_equal(a.path, "-odd-name");
    assert_int_equal(PARSE(&a, &e, "stream", "--session", "s1", "--json", "--last-event-id", "42"),
                     0);
    assert_int_equal(a.cmd, SBX_CLI_STREAM);
    assert_string_equal(a.session, "s1");
    assert_string_equal(a.last_event_id, "42");
    assert_true(a.json);
    assert_int_equal(PARSE(&a, &e, "stream"), 0); /* the daemon's default session */
    assert_null(a.session);
    assert_int_equal(PARSE(&a, &e, "--url", "unix:/run/s.sock", "--tenant", "acme", "mcp"), 0);
    assert_int_equal(a.cmd, SBX_CLI_MCP);
    assert_string_equal(a.url, "unix:/run/s.sock");
    assert_string_equal(a.tenant, "acme");
}

static void help_and_version(void **state)
{
    struct sbx_cli_args a;
    sbx_err e;
    assert_int_equal(PARSE(&a, &e, "--help"), 0);
    assert_int_equal(a.cmd, SBX_CLI_HELP);
    assert_int_equal(PARSE(&a, &e, "exec", "-h"), 0); /* before the command's operands */
    assert_int_equal(a.cmd, SBX_CLI_HELP);
    assert_string_equal(a.help_topic, "exec");
    assert_int_equal(PARSE(&a, &e, "help", "tasks"), 0);
    assert_int_equal(a.cmd, SBX_CLI_HELP);
    assert_string_equal(a.help_topic, "tasks");
    assert_int_equal(PARSE(&a, &e, "--version"), 0);
    assert_int_equal(a.cmd, SBX_CLI_VERSION);
    assert_int_equal(PARSE(&a, &e, "version"), 0);
    assert_int_equal(a.cmd, SBX_CLI_VERSION);
    /* Help wins over errors in the rest of the line. */
    assert_int_equal(PARSE(&a, &e, "exec", "--help", "--limit", "3"), 0);
    assert_int_equal(a.cmd, SBX_CLI_HELP);
}

/* Each bad line, and words its message must hold (the option, the value). */
static const struct {
    const char *argv[8];
    const char *want[2];
} bad[] = {
    {{"exec", "--timeout", "abc", "--", "true"}, {"--timeout", "'abc'"}},
    {{"exec", "--timeout", "0", "--", "true"}, {"--timeout", "'0'"}},
    {{"exec", "--timeout", "100000", "--", "true"}, {"--timeout", "100000"}},
    {{"exec", "--timeout"}, {"--timeout", "needs a value"}},
    {{"exec", "--env", "NOEQ", "--", "true"}, {"--env", "NOEQ"}},
    {{"exec", "-e", "1A=b", "--", "true"}, {"-e", "1A=b"}},
    {{"exec", "--memory", "12x", "--", "true"}, {"--memory", "12x"}},
    {{"exec", "--pids", "0", "--", "true"}, {"--pids", "'0'"}},
    {{"exec", "--cpu", "-1", "--", "true"}, {"--cpu", "'-1'"}},
    {{"exec", "--session", "../x", "--", "true"}, {"--session", "../x"}},
    {{"exec", "--detach=yes", "--", "true"}, {"--detach", "no value"}},
    {{"exec", "--limit", "3", "--", "true"}, {"--limit", "'exec'"}},
    {{"exec"}, {"exec", "missing command"}},
    {{"exec", "--"}, {"exec", "missing command"}},
    {{"--tenant", "a/b", "status"}, {"--tenant", "a/b"}},
    {{"--tenant", "..", "status"}, {"--tenant", ".."}},
    {{"--clone-key", "", "status"}, {"--clone-key", "empty"}},
    {{"--clone-id", "x-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
      "status"},
     {"--clone-id", "64"}},
    {{"--url", "ftp://x", "status"}, {"--url", "ftp://x"}},
    {{"--url", "unix:", "status"}, {"--url", "unix:"}},
    {{"--url", "http://", "status"}, {"--url", "http://"}},
    {{"--url", "http://h/?q=1", "status"}, {"--url", "query"}},
    {{"--token", "", "status"}, {"--token", "empty"}},
    {{"--json=1", "status"}, {"--json", "no value"}},
    {{"--frobnicate", "status"}, {"--frobnicate", "unknown option"}},
    {{"--frob=1", "status"}, {"'--frob'", "unknown option"}},
    {{"-z", "status"}, {"-z", "unknown option"}},
    {{"status", "extra"}, {"extra", "unexpected"}},
    {{"frobnicate"}, {"frobnicate", "unknown command"}},
    {{"--json"}, {"no command", NULL}},
    {{"run", "-c", "x"}, {"--language", "required"}},
    {{"run", "--timeout", "3"}, {"--timeout", "request on stdin"}},
    {{"run", "-d"}, {"--detach", "request on stdin"}},
    {{"--server", "ftp://x", "status"}, {"--server", "ftp://x"}},
    {{"run", "-l", "python"}, {"-c CODE", "neither"}},
    {{"run", "-l", "python", "-c", "x", "f.py"}, {"both", NULL}},
    {{"run", "-l", "py thon", "-c", "x"}, {"-l", "py thon"}},
    {{"run", "--language", "python", "-c", ""}, {"-c", "empty"}},
    {{"run", "-l", "python", "a.py", "b.py"}, {"b.py", "unexpected"}},
    {{"tasks"}, {"tasks", "missing subcommand"}},
    {{"tasks", "show", "x"}, {"show", "unknown subcommand"}},
    {{"tasks", "get"}, {"tasks", "missing argument"}},
    {{"tasks", "get", "a", "b"}, {"'b'", "unexpected"}},
    {{"tasks", "list", "--status", "bogus"}, {"--status", "bogus"}},
    {{"tasks", "list", "--limit", "0"}, {"--limit", "'0'"}},
    {{"tasks", "list", "--limit", "10001"}, {"--limit", "10001"}},
    {{"tasks", "list", "--cursor", ""}, {"--cursor", "empty"}},
    {{"tasks", "get", "x", "--all"}, {"--all", "tasks get"}},
    {{"tasks", "list", "-o", "f"}, {"--output", "tasks list"}},
    {{"files"}, {"files", "missing subcommand"}},
    {{"files", "cat", "x"}, {"cat", "unknown subcommand"}},
    {{"files", "get"}, {"files", "missing argument"}},
    {{"files", "get", "a", "-o", ""}, {"-o", "empty"}},
    {{"files", "get", ""}, {"files", "empty path"}},
    {{"files", "put", "only-one"}, {"files", "missing argument"}},
    {{"files", "put", "", "x"}, {"local", "empty"}},
    {{"files", "rm", "a", "b"}, {"'b'", "unexpected"}},
    {{"files", "ls", "--json", "a", "b"}, {"'b'", "unexpected"}},
    {{"files", "rm", "x", "--json"}, {"--json", "files rm"}},
    {{"stream", "s1"}, {"'s1'", "unexpected"}},
    {{"stream", "--session", "s", "--last-event-id", "x1"}, {"--last-event-id", "x1"}},
    {{"stream", "--session", "s", "--timeout", "3"}, {"--timeout", "stream"}},
    {{"status", "--session", "s"}, {"--session", "status"}},
    {{"mcp", "extra"}, {"'extra'", "unexpected"}},
    {{"mcp", "--json"}, {"--json", "mcp"}},
};

static void bad_lines_name_the_option(void **state)
{
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *argv[MAX_ARGS] = {"sandboxctl"};
        int argc = 1;
        for (size_t k = 0; k < 8 && bad[i].argv[k]; k++)
            argv[argc++] = (char *)bad[i].argv[k];
        struct sbx_cli_args a;
        sbx_err e = {0};
        int rc = sbx_cli_parse_args(argc, argv, NULL, &a, &e);
        if (rc != -1)
            fail_msg("case %zu (%s %s) was accepted", i, bad[i].argv[0], bad[i].argv[1]);
        for (int w = 0; w < 2; w++)
            if (bad[i].want[w] && !strstr(e.msg, bad[i].want[w]))
                fail_msg("case %zu: '%s' not in '%s'", i, bad[i].want[w], e.msg);
    }
}

static void token_never_echoed(void **state)
{
    struct sbx_cli_args a;
    sbx_err e;
    assert_int_equal(PARSE(&a, &e, "--token", "abc\ndef", "status"), -1);
    assert_non_null(strstr(e.msg, "--token"));
    assert_null(strstr(e.msg, "abc"));
}

static void statuses(void **state)
{
    assert_true(sbx_cli_known_status("pending"));
    assert_true(sbx_cli_known_status("interrupted"));
    assert_true(sbx_cli_known_status("timeout"));
    assert_false(sbx_cli_known_status("done"));
    assert_false(sbx_cli_known_status(""));
}

#define SID "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void snapshot_forms(void **state)
{
    struct sbx_cli_args a;
    sbx_err e;
    assert_int_equal(PARSE(&a, &e, "snapshot", "create", "-m", "before"), 0);
    assert_int_equal(a.cmd, SBX_CLI_SNAPSHOT_CREATE);
    assert_string_equal(a.message, "before");
    assert_int_equal(PARSE(&a, &e, "snapshot", "list", "--json"), 0);
    assert_int_equal(a.cmd, SBX_CLI_SNAPSHOT_LIST);
    assert_true(a.json);
    assert_int_equal(PARSE(&a, &e, "snapshot", "diff", SID, "src/a.py", "--against", SID), 0);
    assert_int_equal(a.cmd, SBX_CLI_SNAPSHOT_DIFF);
    assert_string_equal(a.snapshot_id, SID);
    assert_string_equal(a.against, SID);
    assert_string_equal(a.path, "src/a.py");
    assert_int_equal(PARSE(&a, &e, "snapshot", "diff", SID, "--against", "current"), 0);
    assert_null(a.against);
    assert_null(a.path);
    assert_int_equal(PARSE(&a, &e, "snapshot", "rollback", SID), 0);
    assert_int_equal(a.cmd, SBX_CLI_SNAPSHOT_ROLLBACK);
    assert_int_equal(PARSE(&a, &e, "snapshot", "rm", SID), 0);
    assert_int_equal(a.cmd, SBX_CLI_SNAPSHOT_RM);
    /* refused, each naming what is wrong */
    assert_int_equal(PARSE(&a, &e, "snapshot"), -1);
    assert_non_null(strstr(e.msg, "missing subcommand"));
    assert_int_equal(PARSE(&a, &e, "snapshot", "rollback", "../etc"), -1);
    assert_non_null(strstr(e.msg, "not a snapshot id"));
    assert_int_equal(PARSE(&a, &e, "snapshot", "rm", "ABCDEF"), -1);
    assert_int_equal(PARSE(&a, &e, "snapshot", "diff", SID, "--against", "x"), -1);
    assert_non_null(strstr(e.msg, "--against"));
    assert_int_equal(PARSE(&a, &e, "snapshot", "create", "extra"), -1);
    assert_int_equal(PARSE(&a, &e, "snapshot", "list", "-m", "x"), -1);
    assert_non_null(strstr(e.msg, "does not apply to 'snapshot list'"));
    assert_int_equal(PARSE(&a, &e, "snapshot", "undo", SID), -1);
    assert_non_null(strstr(e.msg, "unknown subcommand 'undo'"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(status_with_defaults),
        cmocka_unit_test(environment_then_flags),
        cmocka_unit_test(bad_environment_is_named),
        cmocka_unit_test(exec_forms),
        cmocka_unit_test(run_forms),
        cmocka_unit_test(tasks_forms),
        cmocka_unit_test(session_forms),
        cmocka_unit_test(chat_and_turn_forms),
        cmocka_unit_test(network_forms),
        cmocka_unit_test(files_and_stream_forms),
        cmocka_unit_test(help_and_version),
        cmocka_unit_test(bad_lines_name_the_option),
        cmocka_unit_test(token_never_echoed),
        cmocka_unit_test(statuses),
        cmocka_unit_test(snapshot_forms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
