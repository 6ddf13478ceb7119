#include "cli/args.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "base/parse.h"
#include "cli/target.h"

/* Which commands an option applies to. */
#define C(x) (1u << SBX_CLI_##x)
#define ALL_CMDS (~0u)
#define EXEC_RUN (C(EXEC) | C(RUN))
#define SNAPSHOT_CMDS                                                                              \
    (C(SNAPSHOT_CREATE) | C(SNAPSHOT_LIST) | C(SNAPSHOT_DIFF) | C(SNAPSHOT_ROLLBACK) |             \
     C(SNAPSHOT_RM))

enum opt_id {
    O_URL,
    O_TOKEN,
    O_TENANT,
    O_CLONE_KEY,
    O_CLONE_ID,
    O_JSON,
    O_HELP,
    O_VERSION,
    O_TIMEOUT,
    O_ENV,
    O_MEMORY,
    O_PIDS,
    O_CPU,
    O_SESSION,
    O_DETACH,
    O_LANGUAGE,
    O_CODE,
    O_STATUS,
    O_LIMIT,
    O_CURSOR,
    O_ALL,
    O_OUTPUT,
    O_LAST_ID,
    O_ALLOW,
    O_DENY,
    O_DEFAULT,
    O_MESSAGE,
    O_AGAINST,
    O_SERVER,
    O_COUNT
};

struct opt {
    const char *name; /* long, without "--" */
    char short_name;  /* 0: none */
    bool has_arg;
    unsigned cmds;
};

static const struct opt opts[O_COUNT] = {
    [O_URL] = {"url", 0, true, ALL_CMDS},
    [O_TOKEN] = {"token", 0, true, ALL_CMDS},
    [O_TENANT] = {"tenant", 0, true, ALL_CMDS},
    [O_CLONE_KEY] = {"clone-key", 0, true, ALL_CMDS},
    [O_CLONE_ID] = {"clone-id", 0, true, ALL_CMDS},
    [O_JSON] = {"json", 0, false,
                C(STATUS) | EXEC_RUN | C(TASKS_LIST) | C(TASKS_GET) | C(TASKS_CANCEL) |
                    C(TASKS_WAIT) | C(FILES_LS) | C(FILES_PUT) | C(STREAM) | C(SESSION_START) |
                    C(SESSION_STOP) | C(TASKS_NETWORK) | C(SESSION_NETWORK) | SNAPSHOT_CMDS |
                    C(CHAT) | C(TURN) | C(TURN_CANCEL)},
    [O_HELP] = {"help", 'h', false, ALL_CMDS},
    [O_VERSION] = {"version", 0, false, ALL_CMDS},
    [O_TIMEOUT] = {"timeout", 0, true, EXEC_RUN},
    [O_ENV] = {"env", 'e', true, EXEC_RUN},
    [O_MEMORY] = {"memory", 0, true, EXEC_RUN},
    [O_PIDS] = {"pids", 0, true, EXEC_RUN},
    [O_CPU] = {"cpu", 0, true, EXEC_RUN},
    [O_SESSION] = {"session", 0, true, EXEC_RUN | C(STREAM)},
    [O_DETACH] = {"detach", 'd', false, EXEC_RUN},
    [O_LANGUAGE] = {"language", 'l', true, C(RUN)},
    [O_CODE] = {"code", 'c', true, C(RUN)},
    [O_STATUS] = {"status", 0, true, C(TASKS_LIST)},
    [O_LIMIT] = {"limit", 0, true, C(TASKS_LIST)},
    [O_CURSOR] = {"cursor", 0, true, C(TASKS_LIST)},
    [O_ALL] = {"all", 0, false, C(TASKS_LIST)},
    [O_OUTPUT] = {"output", 'o', true, C(FILES_GET)},
    [O_LAST_ID] = {"last-event-id", 0, true, C(STREAM)},
    [O_ALLOW] = {"allow", 0, true, C(TASKS_NETWORK) | C(SESSION_NETWORK)},
    [O_DENY] = {"deny", 0, true, C(TASKS_NETWORK) | C(SESSION_NETWORK)},
    [O_DEFAULT] = {"default", 0, true, C(TASKS_NETWORK) | C(SESSION_NETWORK)},
    [O_MESSAGE] = {"message", 'm', true, C(SNAPSHOT_CREATE)},
    [O_AGAINST] = {"against", 0, true, C(SNAPSHOT_DIFF)},
    /* seed 004's spelling of --url */
    [O_SERVER] = {"server", 0, true, ALL_CMDS},
};

static const char *const statuses[] = {"pending",  "running", "succeeded",  "failed",
                                       "canceled", "timeout", "interrupted"};

bool sbx_cli_known_status(const char *s)
{
    for (size_t i = 0; i < SBX_ARRAY_LEN(statuses); i++)
        if (strcmp(s, statuses[i]) == 0)
            return true;
    return false;
}

#define MAX_WORDS 8

struct parse_state {
    struct sbx_cli_args *a;
    const char *seen[O_COUNT]; /* the option as typed, for messages */
    const char *words[MAX_WORDS];
    size_t n_words;
    sbx_err *err;
};

/* A name the daemon takes as a path segment: [A-Za-z0-9._-]{1,64}, not "." or "..". */
static int check_segment(const char *opt, const char *v, sbx_err *err)
{
    size_t n = strlen(v);
    if (n == 0)
        return sbx_err_set(err, EINVAL, "%s: empty value", opt);
    if (n > 64)
        return sbx_err_set(err, EINVAL, "%s: '%s' is longer than 64 bytes", opt, v);
    if (strcmp(v, ".") == 0 || strcmp(v, "..") == 0)
        return sbx_err_set(err, EINVAL, "%s: '%s' is not a valid name", opt, v);
    for (const char *p = v; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-')
            return sbx_err_set(err, EINVAL, "%s: '%s' has a character outside [A-Za-z0-9._-]", opt,
                               v);
    return 0;
}

static bool printable(const char *v)
{
    for (const char *p = v; *p; p++)
        if ((unsigned char)*p < ' ' || *p == 0x7f)
            return false;
    return true;
}

static int check_text(const char *opt, const char *v, sbx_err *err)
{
    if (!*v)
        return sbx_err_set(err, EINVAL, "%s: empty value", opt);
    if (!printable(v))
        return sbx_err_set(err, EINVAL, "%s: value holds a control character", opt);
    return 0;
}

/* A snapshot id: 64 lower-case hex digits. */
static int check_snapshot_id(const char *what, const char *v, sbx_err *err)
{
    size_t n = 0;
    for (; v[n]; n++)
        if (!isdigit((unsigned char)v[n]) && !(v[n] >= 'a' && v[n] <= 'f'))
            break;
    if (v[n] || n != 64)
        return sbx_err_set(err, EINVAL,
                           "%s: '%.80s' is not a snapshot id (64 lower-case hex digits)", what, v);
    return 0;
}

static int opt_bad(const char *opt, const sbx_err *e, sbx_err *err)
{
    return sbx_err_set(err, e->errnum, "%s: %s", opt, e->msg);
}

static int set_value(struct parse_state *st, enum opt_id id, const char *name, const char *v)
{
    struct sbx_cli_args *a = st->a;
    sbx_err *err = st->err;
    sbx_err e = {0};
    switch (id) {
    case O_URL:
    case O_SERVER: {
        struct sbx_cli_target t;
        if (sbx_cli_target_parse(v, &t, &e) < 0)
            return opt_bad(name, &e, err);
        sbx_cli_target_clear(&t);
        a->url = v;
        return 0;
    }
    case O_TOKEN:
        /* Never echo a token: it would land in terminals and logs. */
        if (!*v)
            return sbx_err_set(err, EINVAL, "%s: empty value", name);
        for (const char *p = v; *p; p++)
            if ((unsigned char)*p <= ' ' || *p == 0x7f)
                return sbx_err_set(err, EINVAL, "%s: the token holds a blank or control character",
                                   name);
        a->token = v;
        return 0;
    case O_TENANT:
    case O_CLONE_KEY:
    case O_CLONE_ID:
    case O_SESSION:
    case O_LANGUAGE:
        if (check_segment(name, v, err) < 0)
            return -1;
        if (id == O_TENANT)
            a->tenant = v;
        else if (id == O_CLONE_KEY)
            a->clone_key = v;
        else if (id == O_CLONE_ID)
            a->clone_id = v;
        else if (id == O_SESSION)
            a->session = v;
        else
            a->language = v;
        return 0;
    case O_TIMEOUT:
        if (sbx_parse_seconds(v, SBX_CLI_MAX_TIMEOUT_S, &a->timeout_s, &e) < 0)
            return opt_bad(name, &e, err);
        return 0;
    case O_ALLOW:
    case O_DENY: {
        bool allow = id == O_ALLOW;
        size_t *n = allow ? &a->n_allow : &a->n_deny;
        if (!*v || !printable(v))
            return sbx_err_set(err, EINVAL, "%s: '%s' is not a rule", name, v);
        if (*n == SBX_CLI_MAX_RULES)
            return sbx_err_set(err, E2BIG, "%s: too many (at most %d)", name, SBX_CLI_MAX_RULES);
        (allow ? a->allow : a->deny)[(*n)++] = v;
        return 0;
    }
    case O_MESSAGE:
        a->message = v;
        return 0;
    case O_AGAINST:
        if (strcmp(v, "current") != 0 && check_snapshot_id(name, v, err) < 0)
            return -1;
        a->against = strcmp(v, "current") ? v : NULL;
        return 0;
    case O_DEFAULT:
        if (strcmp(v, "allow") != 0 && strcmp(v, "deny") != 0)
            return sbx_err_set(err, EINVAL, "%s: '%s' is not allow or deny", name, v);
        a->net_default = v;
        return 0;
    case O_ENV:
        if (sbx_parse_env_assignment(v, &e) < 0)
            return opt_bad(name, &e, err);
        if (a->n_env == SBX_CLI_MAX_ENV)
            return sbx_err_set(err, E2BIG, "%s: too many (at most %d)", name, SBX_CLI_MAX_ENV);
        a->env[a->n_env++] = v;
        return 0;
    case O_MEMORY: {
        uint64_t bytes;
        if (sbx_parse_size(v, &bytes, &e) < 0)
            return opt_bad(name, &e, err);
        a->memory_mb = (bytes + (1u << 20) - 1) >> 20; /* the API counts MB: round up */
        return 0;
    }
    case O_PIDS:
        if (sbx_parse_uint(v, 1, 1u << 22, &a->pids, &e) < 0)
            return opt_bad(name, &e, err);
        return 0;
    case O_CPU:
        if (sbx_parse_cpu(v, 1024, &a->cpu, &e) < 0)
            return opt_bad(name, &e, err);
        return 0;
    case O_CODE:
        if (!*v)
            return sbx_err_set(err, EINVAL, "%s: empty code", name);
        a->code = v;
        return 0;
    case O_STATUS:
        if (!sbx_cli_known_status(v))
            return sbx_err_set(err, EINVAL,
                               "%s: unknown status '%s' (pending, running, succeeded, failed, "
                               "canceled, timeout, interrupted)",
                               name, v);
        a->status = v;
        return 0;
    case O_LIMIT:
        if (sbx_parse_uint(v, 1, SBX_CLI_MAX_LIMIT, &a->limit, &e) < 0)
            return opt_bad(name, &e, err);
        return 0;
    case O_CURSOR:
        if (check_text(name, v, err) < 0)
            return -1;
        a->cursor = v;
        return 0;
    case O_OUTPUT:
        if (!*v)
            return sbx_err_set(err, EINVAL, "%s: empty file name", name);
        a->output = v;
        return 0;
    case O_LAST_ID: {
        uint64_t n;
        if (sbx_parse_uint(v, 0, INT64_MAX, &n, &e) < 0)
            return opt_bad(name, &e, err);
        a->last_event_id = v;
        return 0;
    }
    default:
        return sbx_err_set(err, EINVAL, "%s: unexpected value", name);
    }
}

static void set_flag(struct sbx_cli_args *a, enum opt_id id)
{
    switch (id) {
    case O_JSON:
        a->json = true;
        break;
    case O_DETACH:
        a->detach = true;
        break;
    case O_ALL:
        a->all = true;
        break;
    default:
        break;
    }
}

/* Find the option arg names; *inline_value gets what follows '=' (long) or
 * the rest of a short option ("-ofile"). -1 when unknown. */
static int lookup(const char *arg, const char **inline_value, char *name, size_t name_len)
{
    *inline_value = NULL;
    if (arg[1] == '-') {
        const char *eq = strchr(arg, '=');
        size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
        snprintf(name, name_len, "%.*s", (int)n, arg);
        for (int i = 0; i < O_COUNT; i++)
            if (strlen(opts[i].name) == n - 2 && strncmp(arg + 2, opts[i].name, n - 2) == 0) {
                *inline_value = eq ? eq + 1 : NULL;
                return i;
            }
        return -1;
    }
    snprintf(name, name_len, "-%c", arg[1]);
    for (int i = 0; i < O_COUNT; i++)
        if (opts[i].short_name && opts[i].short_name == arg[1]) {
            if (arg[2])
                *inline_value = arg + 2;
            return i;
        }
    return -1;
}

/* One option at argv[*i]; may consume the next argument as its value. */
static int take_option(struct parse_state *st, int argc, char **argv, int *i)
{
    const char *arg = argv[*i];
    char name[64];
    const char *value;
    int id = lookup(arg, &value, name, sizeof(name));
    if (id < 0)
        return sbx_err_set(st->err, EINVAL, "unknown option '%s'", name);
    const struct opt *o = &opts[id];
    if (!o->has_arg) {
        if (value)
            return sbx_err_set(st->err, EINVAL, "%s takes no value", name);
        set_flag(st->a, id);
    } else {
        if (!value) {
            if (*i + 1 >= argc)
                return sbx_err_set(st->err, EINVAL, "%s needs a value", name);
            value = argv[++*i];
        }
        if (set_value(st, id, name, value) < 0)
            return -1;
    }
    st->seen[id] = o->name;
    return 0;
}

static int resolve(struct parse_state *st, sbx_err *err);

static int env_defaults(struct sbx_cli_args *a, const struct sbx_cli_env *env, sbx_err *err)
{
    static const struct {
        const char *var;
        enum opt_id id;
    } map[] = {{"SANDBOX_URL", O_URL},
               {"SANDBOX_TOKEN", O_TOKEN},
               {"SANDBOX_TENANT", O_TENANT},
               {"SANDBOX_CLONE_KEY", O_CLONE_KEY},
               {"SANDBOX_CLONE_ID", O_CLONE_ID}};
    const char *vals[] = {env ? env->url : NULL, env ? env->token : NULL, env ? env->tenant : NULL,
                          env ? env->clone_key : NULL, env ? env->clone_id : NULL};
    struct parse_state st = {.a = a, .err = err};
    for (size_t i = 0; i < SBX_ARRAY_LEN(map); i++)
        if (vals[i] && *vals[i] && set_value(&st, map[i].id, map[i].var, vals[i]) < 0)
            return -1;
    if (!a->url)
        a->url = SBX_CLI_DEFAULT_URL;
    return 0;
}

int sbx_cli_parse_args(int argc, char **argv, const struct sbx_cli_env *env, struct sbx_cli_args *a,
                       sbx_err *err)
{
    *a = (struct sbx_cli_args){0};
    a->cmd = (enum sbx_cli_cmd) - 1;
    /* The environment first, so a flag given on the command line wins. */
    if (env_defaults(a, env, err) < 0)
        return -1;
    struct parse_state st = {.a = a, .err = err};
    bool help = false, version = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--") == 0) {
            if (st.n_words > 0 && strcmp(st.words[0], "exec") == 0) {
                a->command = argv + i + 1;
                a->n_command = (size_t)(argc - i - 1);
                break;
            }
            for (i++; i < argc; i++) {
                if (st.n_words == MAX_WORDS)
                    return sbx_err_set(err, E2BIG, "unexpected argument '%s'", argv[i]);
                st.words[st.n_words++] = argv[i];
            }
            break;
        }
        if (arg[0] == '-' && arg[1]) {
            if (take_option(&st, argc, argv, &i) < 0)
                return -1;
            help |= st.seen[O_HELP] != NULL;
            version |= st.seen[O_VERSION] != NULL;
            continue;
        }
        /* exec: the first operand starts the command, whose own options
         * ("ls -l") are not ours. */
        if (st.n_words == 1 && strcmp(st.words[0], "exec") == 0) {
            a->command = argv + i;
            a->n_command = (size_t)(argc - i);
            break;
        }
        if (st.n_words == MAX_WORDS)
            return sbx_err_set(err, E2BIG, "unexpected argument '%s'", arg);
        st.words[st.n_words++] = arg;
    }
    if (help) {
        a->cmd = SBX_CLI_HELP;
        a->help_topic = st.n_words ? st.words[0] : NULL;
        return 0;
    }
    if (version) {
        a->cmd = SBX_CLI_VERSION;
        return 0;
    }
    return resolve(&st, err);
}

static int operands(struct parse_state *st, size_t first, size_t min, size_t max, const char *usage)
{
    size_t n = st->n_words - first;
    if (n < min)
        return sbx_err_set(st->err, EINVAL, "%s: missing argument (usage: %s)", st->words[0],
                           usage);
    if (n > max)
        return sbx_err_set(st->err, EINVAL, "unexpected argument '%s'", st->words[first + max]);
    return 0;
}

static int check_path_operand(struct parse_state *st, const char *what, const char *v)
{
    if (!*v)
        return sbx_err_set(st->err, EINVAL, "%s: empty path", what);
    if (!printable(v))
        return sbx_err_set(st->err, EINVAL, "%s: path holds a control character", what);
    return 0;
}

static int resolve_tasks(struct parse_state *st)
{
    struct sbx_cli_args *a = st->a;
    if (st->n_words < 2)
        return sbx_err_set(st->err, EINVAL,
                           "tasks: missing subcommand (list, get, cancel, wait, network)");
    const char *sub = st->words[1];
    if (strcmp(sub, "list") == 0) {
        a->cmd = SBX_CLI_TASKS_LIST;
        return operands(st, 2, 0, 0, "tasks list [--status S] [--limit N] [--all]");
    }
    if (strcmp(sub, "get") == 0)
        a->cmd = SBX_CLI_TASKS_GET;
    else if (strcmp(sub, "network") == 0)
        a->cmd = SBX_CLI_TASKS_NETWORK;
    else if (strcmp(sub, "cancel") == 0)
        a->cmd = SBX_CLI_TASKS_CANCEL;
    else if (strcmp(sub, "wait") == 0)
        a->cmd = SBX_CLI_TASKS_WAIT;
    else
        return sbx_err_set(st->err, EINVAL,
                           "tasks: unknown subcommand '%s' (list, get, cancel, wait, network)",
                           sub);
    if (operands(st, 2, 1, 1, "tasks get|cancel|wait|network ID") < 0)
        return -1;
    a->task_id = st->words[2];
    return check_text("task id", a->task_id, st->err);
}

static int resolve_files(struct parse_state *st)
{
    struct sbx_cli_args *a = st->a;
    if (st->n_words < 2)
        return sbx_err_set(st->err, EINVAL, "files: missing subcommand (get, put, ls, rm)");
    const char *sub = st->words[1];
    if (strcmp(sub, "get") == 0) {
        a->cmd = SBX_CLI_FILES_GET;
        if (operands(st, 2, 1, 1, "files get PATH [-o FILE]") < 0)
            return -1;
        a->path = st->words[2];
    } else if (strcmp(sub, "put") == 0) {
        a->cmd = SBX_CLI_FILES_PUT;
        if (operands(st, 2, 2, 2, "files put LOCAL PATH") < 0)
            return -1;
        a->local = st->words[2];
        a->path = st->words[3];
        if (!*a->local)
            return sbx_err_set(st->err, EINVAL, "files put: empty local file name");
    } else if (strcmp(sub, "ls") == 0) {
        a->cmd = SBX_CLI_FILES_LS;
        if (operands(st, 2, 0, 1, "files ls [PATH]") < 0)
            return -1;
        a->path = st->n_words > 2 ? st->words[2] : "/";
    } else if (strcmp(sub, "rm") == 0) {
        a->cmd = SBX_CLI_FILES_RM;
        if (operands(st, 2, 1, 1, "files rm PATH") < 0)
            return -1;
        a->path = st->words[2];
    } else {
        return sbx_err_set(st->err, EINVAL, "files: unknown subcommand '%s' (get, put, ls, rm)",
                           sub);
    }
    return check_path_operand(st, st->words[0], a->path);
}

static int resolve_session(struct parse_state *st)
{
    struct sbx_cli_args *a = st->a;
    if (st->n_words < 2)
        return sbx_err_set(st->err, EINVAL, "session: missing subcommand (start, stop, network)");
    const char *sub = st->words[1];
    if (strcmp(sub, "start") == 0) {
        a->cmd = SBX_CLI_SESSION_START;
        if (operands(st, 2, 0, 1, "session start [ID]") < 0)
            return -1;
    } else if (strcmp(sub, "stop") == 0 || strcmp(sub, "network") == 0) {
        bool stop = strcmp(sub, "stop") == 0;
        a->cmd = stop ? SBX_CLI_SESSION_STOP : SBX_CLI_SESSION_NETWORK;
        if (operands(st, 2, 1, 1, stop ? "session stop ID" : "session network ID [rules]") < 0)
            return -1;
    } else {
        return sbx_err_set(st->err, EINVAL,
                           "session: unknown subcommand '%s' (start, stop, network)", sub);
    }
    /* Without an ID, start asks the daemon to name the session. */
    a->session = st->n_words > 2 ? st->words[2] : NULL;
    return a->session ? check_segment("session ID", a->session, st->err) : 0;
}

static int resolve_snapshot(struct parse_state *st)
{
    struct sbx_cli_args *a = st->a;
    if (st->n_words < 2)
        return sbx_err_set(st->err, EINVAL,
                           "snapshot: missing subcommand (create, list, diff, rollback, rm)");
    const char *sub = st->words[1];
    if (!strcmp(sub, "create") || !strcmp(sub, "list")) {
        a->cmd = !strcmp(sub, "create") ? SBX_CLI_SNAPSHOT_CREATE : SBX_CLI_SNAPSHOT_LIST;
        return operands(st, 2, 0, 0,
                        a->cmd == SBX_CLI_SNAPSHOT_CREATE ? "snapshot create [-m TEXT]"
                                                          : "snapshot list");
    }
    if (!strcmp(sub, "diff")) {
        a->cmd = SBX_CLI_SNAPSHOT_DIFF;
        if (operands(st, 2, 1, 2, "snapshot diff ID [--against ID|current] [PATH]") < 0)
            return -1;
        a->path = st->n_words > 3 ? st->words[3] : NULL;
        if (a->path && check_path_operand(st, "snapshot diff", a->path) < 0)
            return -1;
    } else if (!strcmp(sub, "rollback") || !strcmp(sub, "rm")) {
        bool rm = !strcmp(sub, "rm");
        a->cmd = rm ? SBX_CLI_SNAPSHOT_RM : SBX_CLI_SNAPSHOT_ROLLBACK;
        if (operands(st, 2, 1, 1, rm ? "snapshot rm ID" : "snapshot rollback ID") < 0)
            return -1;
    } else {
        return sbx_err_set(st->err, EINVAL,
                           "snapshot: unknown subcommand '%s' (create, list, diff, rollback, rm)",
                           sub);
    }
    a->snapshot_id = st->words[2];
    return check_snapshot_id("snapshot id", a->snapshot_id, st->err);
}

/* chat SESSION [MESSAGE] | turn SESSION INPUT | turn cancel TURN_ID */
static int resolve_turn(struct parse_state *st, bool chat)
{
    struct sbx_cli_args *a = st->a;
    if (chat) {
        a->cmd = SBX_CLI_CHAT;
        if (operands(st, 1, 1, 2, "chat SESSION [MESSAGE]") < 0)
            return -1;
        a->message = st->n_words > 2 ? st->words[2] : NULL;
    } else if (st->n_words == 3 && strcmp(st->words[1], "cancel") == 0 &&
               !strchr("{[-", st->words[2][0])) {
        a->cmd = SBX_CLI_TURN_CANCEL;
        a->task_id = st->words[2];
        return check_text("turn id", a->task_id, st->err);
    } else {
        a->cmd = SBX_CLI_TURN;
        if (operands(st, 1, 2, 2, "turn SESSION INPUT|CALLS|- or turn cancel TURN_ID") < 0)
            return -1;
        a->input = st->words[2];
    }
    a->session = st->words[1];
    return check_segment("session ID", a->session, st->err);
}

/* The command from the operands, then the options checked against it. */
static int resolve(struct parse_state *st, sbx_err *err)
{
    struct sbx_cli_args *a = st->a;
    if (st->n_words == 0)
        return sbx_err_set(err, EINVAL, "no command given");
    const char *w = st->words[0];
    if (strcmp(w, "help") == 0) {
        a->cmd = SBX_CLI_HELP;
        a->help_topic = st->n_words > 1 ? st->words[1] : NULL;
        return 0;
    } else if (strcmp(w, "version") == 0) {
        a->cmd = SBX_CLI_VERSION;
        return 0;
    } else if (strcmp(w, "status") == 0) {
        a->cmd = SBX_CLI_STATUS;
        if (operands(st, 1, 0, 0, "status") < 0)
            return -1;
    } else if (strcmp(w, "exec") == 0) {
        a->cmd = SBX_CLI_EXEC;
        if (a->n_command == 0)
            return sbx_err_set(err, EINVAL,
                               "exec: missing command (usage: exec [options] -- "
                               "COMMAND [ARGS...])");
    } else if (strcmp(w, "run") == 0) {
        a->cmd = SBX_CLI_RUN;
        if (operands(st, 1, 0, 1, "run --language L (-c CODE | FILE)") < 0)
            return -1;
        if (st->n_words > 1)
            a->code_file = st->words[1];
        if (!a->language && !a->code && !a->code_file) {
            /* seed 004: `echo '{"code": ..., "env": "python-3.9"}' | sandboxctl run` */
            static const enum opt_id own[] = {O_TIMEOUT, O_ENV,     O_MEMORY, O_PIDS,
                                              O_CPU,     O_SESSION, O_DETACH};
            for (size_t i = 0; i < SBX_ARRAY_LEN(own); i++)
                if (st->seen[own[i]])
                    return sbx_err_set(err, EINVAL,
                                       "run: --%s does not apply to a request on stdin (give "
                                       "its settings in the JSON: timeout, memory_limit, "
                                       "pids_limit)",
                                       st->seen[own[i]]);
            a->request_stdin = true;
        } else if (!a->language) {
            return sbx_err_set(err, EINVAL, "run: --language is required (python, node, shell)");
        } else if (!a->code == !a->code_file) {
            return sbx_err_set(err, EINVAL, "run: give either -c CODE or FILE, not %s",
                               a->code ? "both" : "neither");
        }
        if (a->code_file && !*a->code_file)
            return sbx_err_set(err, EINVAL, "run: empty file name");
    } else if (strcmp(w, "tasks") == 0) {
        if (resolve_tasks(st) < 0)
            return -1;
    } else if (strcmp(w, "files") == 0) {
        if (resolve_files(st) < 0)
            return -1;
    } else if (strcmp(w, "session") == 0) {
        if (resolve_session(st) < 0)
            return -1;
    } else if (strcmp(w, "snapshot") == 0) {
        if (resolve_snapshot(st) < 0)
            return -1;
    } else if (strcmp(w, "mcp") == 0) {
        a->cmd = SBX_CLI_MCP;
        if (operands(st, 1, 0, 0, "mcp") < 0)
            return -1;
    } else if (strcmp(w, "chat") == 0 || strcmp(w, "turn") == 0) {
        if (resolve_turn(st, strcmp(w, "chat") == 0) < 0)
            return -1;
    } else if (strcmp(w, "stream") == 0) {
        a->cmd = SBX_CLI_STREAM;
        /* Without --session: the daemon's default session. */
        if (operands(st, 1, 0, 0, "stream [--session ID]") < 0)
            return -1;
    } else {
        return sbx_err_set(err, EINVAL, "unknown command '%s'", w);
    }
    bool two_words = !strcmp(w, "tasks") || !strcmp(w, "files") || !strcmp(w, "session") ||
                     !strcmp(w, "snapshot");
    for (int i = 0; i < O_COUNT; i++)
        if (st->seen[i] && !(opts[i].cmds & (1u << a->cmd)))
            return sbx_err_set(err, EINVAL, "--%s does not apply to '%s%s%s'", st->seen[i], w,
                               two_words ? " " : "", two_words ? st->words[1] : "");
    return 0;
}
