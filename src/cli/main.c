/* sandboxctl: the client of sandboxd's HTTP API. HTTP only (cli/client.c); exit
 * status 0, the task's own for exec, run and tasks wait, 1 for an error, 2
 * for a usage error naming the bad option or value. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cmd.h"
#include "base/curl_dl.h"

static void usage(FILE *f)
{
    fputs(
        "usage: sandboxctl [global options] COMMAND [options]\n"
        "\n"
        "Commands:\n"
        "  status                          the runtime's status\n"
        "  exec [options] -- CMD [ARGS...] run a command, print its output, exit with its status\n"
        "  run --language L (-c CODE | FILE)  run a program (python, node, shell; FILE '-': "
        "stdin)\n"
        "  run < REQUEST.json              seed 004's request on stdin, {\"code\", \"env\" (an\n"
        "                                  environment's name or alias), \"timeout\",\n"
        "                                  \"memory_limit\", \"pids_limit\"} (POST /execute)\n"
        "  tasks list [--status S] [--limit N] [--cursor C] [--all]\n"
        "  tasks get ID                    one task's record\n"
        "  tasks cancel ID                 cancel a queued or running task\n"
        "  tasks wait ID                   wait for a task to end, print its output, exit with\n"
        "                                  its status\n"
        "  tasks network ID [rules]        a running task's new egress rules, at once\n"
        "  files get PATH [-o FILE]        download a workspace file (to stdout by default)\n"
        "  files put LOCAL PATH            upload LOCAL ('-': stdin) to PATH, parents created\n"
        "  files ls [PATH]                 list a workspace directory\n"
        "  files rm PATH                   remove a workspace file\n"
        "  session start [ID]              start a live session (a sandbox its tasks share:\n"
        "                                  /tmp, processes); prints its id once it is ready\n"
        "  session stop ID                 stop it, killing everything in it\n"
        "  session network ID [rules]      a live session's new egress rules, at once\n"
        "  snapshot create [-m TEXT]       snapshot the workspace (skills/ left out)\n"
        "  snapshot list                   the workspace's snapshots, newest first\n"
        "  snapshot diff ID [--against ID|current] [PATH]\n"
        "                                  what changed since ID (and PATH's unified diff)\n"
        "  snapshot rollback ID            make the workspace what snapshot ID holds\n"
        "  snapshot rm ID                  delete a snapshot\n"
        "  chat SESSION [MESSAGE]          send a message to the model of a live session\n"
        "                                  (stdin without MESSAGE); print its text and tool\n"
        "                                  calls as they come\n"
        "  turn SESSION INPUT              a turn: INPUT is its JSON ({\"type\": ...}), or an\n"
        "                                  array of tool calls [{id, name, arguments}], '-':\n"
        "                                  stdin; prints its events until it is done\n"
        "  turn cancel TURN_ID             cancel a turn (its tools are killed)\n"
        "  stream [--session ID] [--last-event-id N]\n"
        "                                  follow a session's events (default: the daemon's\n"
        "                                  default session), resuming after a drop\n"
        "  mcp                             MCP over stdio for clients that spawn a server:\n"
        "                                  each line a JSON-RPC message, bridged to POST /mcp\n"
        "\n"
        "Options of exec and run:\n"
        "  --timeout SECONDS   wall-clock limit of the task\n"
        "  -e, --env KEY=VALUE add to the task's environment (repeatable)\n"
        "  --memory SIZE, --pids N, --cpu CORES  narrower limits for this task\n"
        "  --session ID        run in that session\n"
        "  -d, --detach        queue the task (POST /runtime/tasks) and print its id\n"
        "\n"
        "Rules of tasks network and session network (each change replaces the last):\n"
        "  --default allow|deny  what the egress does with the rest\n"
        "  --allow RULE, --deny RULE  name, *.suffix, CIDR or address, each with an\n"
        "                      optional :port, or :port (repeatable)\n"
        "\n"
        "Global options:\n"
        "  --url URL           http://HOST:PORT, https://…, unix:/PATH (env SANDBOX_URL,\n"
        "                      default " SBX_CLI_DEFAULT_URL "); --server URL is the same\n"
        "  --token TOKEN       API token, sent as a Bearer token (env SANDBOX_TOKEN: prefer\n"
        "                      it, a command line is visible to other users; else the file\n"
        "                      SANDBOX_TOKEN_FILE, default " SBX_CLI_DEFAULT_TOKEN_FILE ",\n"
        "                      if readable: a local daemon's generated token)\n"
        "  --tenant T, --clone-key K, --clone-id I  the clone to act for (env SANDBOX_TENANT,\n"
        "                      SANDBOX_CLONE_KEY, SANDBOX_CLONE_ID)\n"
        "  --json              the API's JSON instead of text (one event per line for stream)\n"
        "  -h, --help, --version\n"
        "\n"
        "Exit status: the task's for exec, run and tasks wait (124: timed out or canceled);\n"
        "otherwise 0, 1 on an error, 2 on a usage error.\n",
        f);
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static int dispatch(struct sbx_cli_client *c, const struct sbx_cli_args *a)
{
    switch (a->cmd) {
    case SBX_CLI_STATUS:
        return sbx_cli_cmd_status(c, a);
    case SBX_CLI_EXEC:
    case SBX_CLI_RUN:
        return sbx_cli_cmd_exec(c, a);
    case SBX_CLI_TASKS_LIST:
    case SBX_CLI_TASKS_GET:
    case SBX_CLI_TASKS_CANCEL:
    case SBX_CLI_TASKS_WAIT:
        return sbx_cli_cmd_tasks(c, a);
    case SBX_CLI_FILES_GET:
    case SBX_CLI_FILES_PUT:
    case SBX_CLI_FILES_LS:
    case SBX_CLI_FILES_RM:
        return sbx_cli_cmd_files(c, a);
    case SBX_CLI_STREAM:
        return sbx_cli_cmd_stream(c, a);
    case SBX_CLI_SESSION_START:
    case SBX_CLI_SESSION_STOP:
        return sbx_cli_cmd_session(c, a);
    case SBX_CLI_TASKS_NETWORK:
    case SBX_CLI_SESSION_NETWORK:
        return sbx_cli_cmd_network(c, a);
    case SBX_CLI_SNAPSHOT_CREATE:
    case SBX_CLI_SNAPSHOT_LIST:
    case SBX_CLI_SNAPSHOT_DIFF:
    case SBX_CLI_SNAPSHOT_ROLLBACK:
    case SBX_CLI_SNAPSHOT_RM:
        return sbx_cli_cmd_snapshot(c, a);
    case SBX_CLI_MCP:
        return sbx_cli_cmd_mcp(a);
    case SBX_CLI_CHAT:
    case SBX_CLI_TURN:
    case SBX_CLI_TURN_CANCEL:
        return sbx_cli_cmd_turn(c, a);
    default:
        return 2;
    }
}

/* Without a token given, the one a local daemon generated on its first
 * start (sandboxd serve keeps it in its state dir, 0600) when this user may
 * read it: seed 004's `sandboxctl run --server http://localhost:8080` then
 * works as written. SANDBOX_TOKEN_FILE names another file. */
static const char *token_from_file(char *buf, size_t len)
{
    const char *path = env("SANDBOX_TOKEN_FILE");
    FILE *f = fopen(path ? path : SBX_CLI_DEFAULT_TOKEN_FILE, "re");
    if (!f)
        return NULL;
    size_t n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    return buf[0] ? buf : NULL;
}

int main(int argc, char **argv)
{
    static char file_token[160];
    const char *token = env("SANDBOX_TOKEN");
    struct sbx_cli_env e = {
        env("SANDBOX_URL"), token ? token : token_from_file(file_token, sizeof(file_token)),
        env("SANDBOX_TENANT"), env("SANDBOX_CLONE_KEY"), env("SANDBOX_CLONE_ID")};
    struct sbx_cli_args a;
    sbx_err err = {0};
    if (sbx_cli_parse_args(argc, argv, &e, &a, &err) < 0) {
        fprintf(stderr, "sandboxctl: %s\nRun 'sandboxctl --help' for usage.\n", err.msg);
        return 2;
    }
    if (a.cmd == SBX_CLI_HELP) {
        usage(stdout);
        return 0;
    }
    if (a.cmd == SBX_CLI_VERSION) {
        /* libcurl serves https:// targets and `mcp` only (base/curl_dl.h). */
        bool curl = sbx_curl_load(&err) == 0;
        printf("sandboxctl %s (%s)\n", SANDBOXCTL_VERSION,
               curl ? curl_version() : "libcurl not found: http:// and unix: targets only");
        sbx_curl_unload();
        return 0;
    }
    /* A reader that goes away (`stream | head`) is an EPIPE we handle, not
     * a signal that kills us mid-message. */
    signal(SIGPIPE, SIG_IGN);
    struct sbx_cli_client *c = sbx_cli_client_new(&a, &err);
    int rc = c ? dispatch(c, &a) : sbx_cli_fail(&err);
    sbx_cli_client_free(c);
    sbx_curl_unload();
    return rc;
}
