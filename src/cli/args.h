/* sandboxctl's command line, parsed without side effects: no environment
 * reads (the caller passes SANDBOX_* in), no printing, no globals (getopt's
 * are avoided), so every bad option is unit-tested by name. Strings point into
 * argv or into the environment values given; nothing is allocated. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define SANDBOXCTL_VERSION "0.1.0"
#define SBX_CLI_DEFAULT_URL "http://127.0.0.1:8080"
/* Where sandboxd serve keeps the token it generates (its default state dir). */
#define SBX_CLI_DEFAULT_TOKEN_FILE "/var/lib/sandbox/api-token"
#define SBX_CLI_MAX_ENV 256
#define SBX_CLI_MAX_TIMEOUT_S (24.0 * 3600)
#define SBX_CLI_MAX_LIMIT 10000
#define SBX_CLI_MAX_RULES 256

enum sbx_cli_cmd {
    SBX_CLI_HELP,
    SBX_CLI_VERSION,
    SBX_CLI_STATUS,
    SBX_CLI_EXEC,
    SBX_CLI_RUN,
    SBX_CLI_TASKS_LIST,
    SBX_CLI_TASKS_GET,
    SBX_CLI_TASKS_CANCEL,
    SBX_CLI_TASKS_WAIT,
    SBX_CLI_FILES_GET,
    SBX_CLI_FILES_PUT,
    SBX_CLI_FILES_LS,
    SBX_CLI_FILES_RM,
    SBX_CLI_STREAM,
    SBX_CLI_SESSION_START,
    SBX_CLI_SESSION_STOP,
    SBX_CLI_TASKS_NETWORK,
    SBX_CLI_SESSION_NETWORK,
    SBX_CLI_SNAPSHOT_CREATE,
    SBX_CLI_SNAPSHOT_LIST,
    SBX_CLI_SNAPSHOT_DIFF,
    SBX_CLI_SNAPSHOT_ROLLBACK,
    SBX_CLI_SNAPSHOT_RM,
    SBX_CLI_MCP,
    SBX_CLI_CHAT,
    SBX_CLI_TURN,
    SBX_CLI_TURN_CANCEL,
};

/* Defaults from the environment (each may be NULL or ""). */
struct sbx_cli_env {
    const char *url;       /* SANDBOX_URL */
    const char *token;     /* SANDBOX_TOKEN */
    const char *tenant;    /* SANDBOX_TENANT */
    const char *clone_key; /* SANDBOX_CLONE_KEY */
    const char *clone_id;  /* SANDBOX_CLONE_ID */
};

struct sbx_cli_args {
    enum sbx_cli_cmd cmd;
    /* global */
    const char *url;                                   /* never NULL after a successful parse */
    const char *token, *tenant, *clone_key, *clone_id; /* NULL: not sent */
    bool json;
    /* exec, run */
    char **command; /* exec: argv after "--" (or from the first operand) */
    size_t n_command;
    const char *env[SBX_CLI_MAX_ENV]; /* "KEY=VALUE", checked */
    size_t n_env;
    double timeout_s; /* 0: not sent */
    uint64_t memory_mb, pids;
    double cpu;
    const char *session; /* exec, run, stream: --session; session start|stop: the ID */
    bool detach;         /* exec, run: POST /runtime/tasks, print the id */
    const char *language;
    const char *code;      /* run -c */
    const char *code_file; /* run FILE ("-": stdin) */
    bool request_stdin;    /* run without language, code or file: seed 004's JSON on stdin */
    /* tasks */
    const char *status; /* list filter */
    uint64_t limit;     /* 0: not sent */
    const char *cursor;
    bool all;
    const char *task_id;
    /* files */
    const char *path;   /* in the workspace */
    const char *local;  /* put: source ("-": stdin) */
    const char *output; /* get -o */
    /* tasks network, session network: the new egress rules */
    const char *allow[SBX_CLI_MAX_RULES], *deny[SBX_CLI_MAX_RULES];
    size_t n_allow, n_deny;
    const char *net_default; /* "allow" | "deny", NULL: not sent */
    /* snapshot: its id (diff, rollback, rm), create's message, diff's
     * --against (NULL: the workspace now) and file (path, NULL: none);
     * message is also chat's (NULL: read from stdin) */
    const char *snapshot_id, *message, *against;
    /* stream */
    const char *last_event_id;
    /* chat SESSION [MESSAGE], turn SESSION INPUT, turn cancel ID (task_id) */
    const char *input;      /* turn: JSON, "-" reads stdin */
    const char *help_topic; /* HELP: the command asked about, or NULL */
};

/* Parse argv (argv[0] is the program). On success fills *a and returns 0; on a
 * usage error returns -1 with err->msg naming the option and the value
 * ("--timeout: 'x' is not a number of seconds"). */
int sbx_cli_parse_args(int argc, char **argv, const struct sbx_cli_env *env, struct sbx_cli_args *a,
                       sbx_err *err);

/* Task statuses a list may filter on. */
bool sbx_cli_known_status(const char *s);
