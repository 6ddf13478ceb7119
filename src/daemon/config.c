/* The configuration of `sandboxd serve` (schema in config.h, operator's guide
 * in docs/configuration.md).
 *
 * How it is built: defaults, then the YAML document (sections in a fixed
 * order, so environments are judged against the final maxima), then the
 * CLAW_* entries of envp, then the flags; cross-checks and derived values
 * last. Every value of every source goes through one parser per kind
 * (apply()), so "256m" means the same in the file and on a flag; only the
 * original's variables keep their units (CLAW_CPU_LIMIT in percent,
 * CLAW_MEMORY_LIMIT_MB in MiB, CLAW_IDLE_TIMEOUT_SEC in seconds).
 *
 * Decisions (tests/unit/daemon/test_config.c holds them):
 * - Errors name the source: "FILE:LINE:COL: section.key" (the key's position,
 *   or the list item's), "CLAW_NAME", "--flag".
 * - A default limit above its maximum is refused, naming whichever of the two
 *   was configured (the default unless it is the built-in one).
 * - Relative paths: in the file, against the file's directory; in CLAW_* and
 *   flags, against the current directory.
 * - Empty CLAW_* values are unset; in CLAW_* lists blanks around entries and
 *   empty entries are dropped (the original's behaviour), except in
 *   CLAW_API_TOKEN where an empty entry is an error ("a,,b" or "$A,$B" with
 *   B unset would otherwise lose a token silently).
 * - Tokens: 16 to 512 printable characters without blanks or commas; a
 *   secret or a name given twice is an error.
 * - Injected task variables: CLAW_* names are refused (the daemon's settings
 *   and tokens never reach a task); values are taken from envp at load, so
 *   the daemon never reads its environment again.
 * - CLAW_ENABLE_SANDBOX_NET=false means `none`, never `host`: the host's
 *   network is only ever chosen by name.
 * - Seed 004's keys are understood where they mean something here (address,
 *   max_workers, default_timeout, bridge, max_idle, environments as a list,
 *   working_dir, read_only_rootfs: true); its container images, mounts and
 *   custom seccomp tables are refused with the reason, never ignored. */
#include "daemon/config.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <yaml.h>

#include "base/parse.h"
#include "net/egress.h"

#define WHERE_MAX 224
#define KEYPATH_MAX 160
#define MAX_ENVIRONMENTS 64
#define SEGMENT_MAX 64
#define TOKEN_MIN 16
#define TOKEN_MAX 512
#define ENV_KEY_MAX 128
#define DAY (86400.0)

const char sbx_config_usage[] =
    "usage: sandboxd serve [options]\n"
    "  --config FILE          YAML configuration (see docs/configuration.md)\n"
    "  --listen ADDR          HOST:PORT, :PORT or unix:PATH (default :8080; CLAW_LISTEN_ADDR)\n"
    "  --state-dir DIR        store and workspaces (default /var/lib/sandbox)\n"
    "  --workspace-root DIR   clones' workspaces (default STATE/workspaces; CLAW_WORKSPACE)\n"
    "  --control-dir DIR      control directory (default STATE/control; CLAW_CONTROL_DIR)\n"
    "  --token TOKEN          an operator token (repeatable; CLAW_API_TOKEN=a,b)\n"
    "  --max-concurrent N     tasks running at once (default 32)\n"
    "  --log-level LEVEL      error, warn, info or debug (default info)\n"
    "  --net none|proxy|host  default network policy (default proxy)\n"
    "  --memory SIZE          default memory limit of a task (default 256M)\n"
    "  --cpu CORES            default CPU limit, cores or percent (default 0.25)\n"
    "  --pids N               default process limit (default 32)\n"
    "  --timeout DURATION     default wall-clock limit (default 300s)\n"
    "Precedence: defaults < --config file < CLAW_* variables < flags.\n";

/* --- value kinds ---------------------------------------------------------- */

enum kind {
    K_SEGMENT,     /* char *: a tenant/clone/runtime id */
    K_OPT_SEGMENT, /* char *: same, or unset (YAML null) */
    K_PATH,        /* char *: made absolute */
    K_LISTEN,      /* struct sbx_listen */
    K_LOGLEVEL,    /* enum sbx_log_level */
    K_UINT,        /* uint64_t in [min, max] */
    K_U32,         /* uint32_t in [min, max] */
    K_U16,         /* uint16_t in [min, max] */
    K_SIZE,        /* uint64_t bytes, >= min */
    K_SIZE0,       /* same, or 0 */
    K_DURATION,    /* double seconds in (0, max]: "30s", "5m" */
    K_SECONDS,     /* double seconds in (0, max]: a plain number */
    K_BOOL,        /* bool */
    K_TRUE_ONLY,   /* nothing stored: only true is possible */
    K_NETPOL,      /* enum sbx_net_policy */
    K_NETBOOL,     /* enum sbx_net_policy from true/false */
    K_SECCOMP,     /* enum sbx_seccomp_profile */
    K_DEFAULT,     /* enum sbx_default */
    K_CPU,         /* double cores, or "N%" */
    K_CPU_PCT,     /* double cores from percent */
    K_MB,          /* uint64_t bytes from MiB, >= min bytes */
    K_CIDRS,       /* char *: comma list, as the policy takes it */
    K_PORTS,
    K_TARGETS,
    K_BLOCKED,
    K_KEYS, /* struct sbx_strv of variable names */
};

static bool kind_takes_list(enum kind k)
{
    return k == K_CIDRS || k == K_PORTS || k == K_TARGETS || k == K_BLOCKED || k == K_KEYS;
}

/* Limits: the keys of a limits block (sandbox, sandbox.max, an environment). */
enum { LIM_TIMEOUT, LIM_MEMORY, LIM_PIDS, LIM_CPU, LIM_FILE, LIM_OUTPUT, LIM_TMP, N_LIM };

static const struct lim_field {
    const char *key, *alias;
    enum kind kind;
    size_t off;
    uint64_t min, max;
} lim_fields[N_LIM] = {
    [LIM_TIMEOUT] = {"timeout", "default_timeout", K_DURATION,
                     offsetof(struct sbx_limits, timeout_s), 0, 86400},
    [LIM_MEMORY] = {"memory_limit", NULL, K_SIZE, offsetof(struct sbx_limits, memory_bytes),
                    8ull << 20, 0},
    [LIM_PIDS] = {"pids_limit", NULL, K_UINT, offsetof(struct sbx_limits, pids), 1, 1u << 22},
    [LIM_CPU] = {"cpu_limit", NULL, K_CPU, offsetof(struct sbx_limits, cpu_cores), 0, 1024},
    [LIM_FILE] = {"file_size_limit", NULL, K_SIZE, offsetof(struct sbx_limits, file_size_bytes), 1,
                  0},
    [LIM_OUTPUT] = {"output_limit", NULL, K_SIZE, offsetof(struct sbx_limits, output_bytes), 1, 0},
    [LIM_TMP] = {"tmp_size", NULL, K_SIZE, offsetof(struct sbx_limits, tmp_bytes), 1ull << 20, 0},
};

/* Bits of an environment's explicitly set fields, besides the limits. */
#define ENV_SET_NET (1u << N_LIM)
#define ENV_SET_SECCOMP (1u << (N_LIM + 1))

/* One scalar setting and the names it has in each source. */
struct setting {
    const char *section; /* YAML mapping it lives in, NULL: not in YAML */
    const char *key, *alias;
    const char *env; /* CLAW_* */
    enum kind env_kind;
    const char *flag;
    enum kind kind; /* YAML and flag */
    size_t off;     /* in struct sbx_config */
    uint64_t min, max;
    int lim; /* index in lim_fields when it is a default limit, else -1 */
};

#define OFF(f) offsetof(struct sbx_config, f)

static const struct setting settings[] = {
    /* server */
    {"server", "listen", "address", "CLAW_LISTEN_ADDR", K_LISTEN, "--listen", K_LISTEN, OFF(listen),
     0, 0, -1},
    {"server", "state_dir", NULL, NULL, 0, "--state-dir", K_PATH, OFF(state_dir), 0, 0, -1},
    {"server", "workspace_root", NULL, "CLAW_WORKSPACE", K_PATH, "--workspace-root", K_PATH,
     OFF(workspace_root), 0, 0, -1},
    {"server", "control_dir", NULL, "CLAW_CONTROL_DIR", K_PATH, "--control-dir", K_PATH,
     OFF(control_dir), 0, 0, -1},
    {"server", "runtime_id", NULL, "CLAW_RUNTIME_ID", K_OPT_SEGMENT, NULL, K_OPT_SEGMENT,
     OFF(runtime_id), 0, 0, -1},
    {"server", "log_level", NULL, NULL, 0, "--log-level", K_LOGLEVEL, OFF(log_level), 0, 0, -1},
    {"server", "max_concurrent", "max_workers", NULL, 0, "--max-concurrent", K_UINT,
     OFF(max_concurrent), 1, 4096, -1},
    {"server", "queue_size", NULL, NULL, 0, NULL, K_UINT, OFF(queue_size), 0, 1000000, -1},
    {"server", "queue_per_tenant", NULL, NULL, 0, NULL, K_UINT, OFF(queue_per_tenant), 0, 1000000,
     -1},
    {"server", "max_connections", NULL, NULL, 0, NULL, K_UINT, OFF(max_connections), 1, 1000000,
     -1},
    {"server", "max_body", NULL, NULL, 0, NULL, K_SIZE, OFF(max_body_bytes), 1024, 0, -1},
    {"server", "header_timeout", NULL, NULL, 0, NULL, K_DURATION, OFF(header_timeout_s), 0, 3600,
     -1},
    {"server", "connection_idle_timeout", NULL, NULL, 0, NULL, K_DURATION,
     OFF(connection_idle_timeout_s), 0, 86400, -1},
    {"server.default_clone", "tenant_code", NULL, "CLAW_TENANT_CODE", K_SEGMENT, NULL, K_SEGMENT,
     OFF(tenant_code), 0, 0, -1},
    {"server.default_clone", "clone_key", NULL, "CLAW_CLONE_KEY", K_OPT_SEGMENT, NULL,
     K_OPT_SEGMENT, OFF(clone_key), 0, 0, -1},
    {"server.default_clone", "clone_id", NULL, "CLAW_CLONE_ID", K_SEGMENT, NULL, K_SEGMENT,
     OFF(clone_id), 0, 0, -1},
    /* sandbox: the limits' YAML keys are lim_fields; these are their other names */
    {NULL, "timeout", NULL, NULL, 0, "--timeout", K_DURATION, OFF(limits.timeout_s), 0, 86400,
     LIM_TIMEOUT},
    {NULL, "memory_limit", NULL, "CLAW_MEMORY_LIMIT_MB", K_MB, "--memory", K_SIZE,
     OFF(limits.memory_bytes), 8ull << 20, 1ull << 44, LIM_MEMORY},
    {NULL, "pids_limit", NULL, "CLAW_MAX_PROCESSES", K_UINT, "--pids", K_UINT, OFF(limits.pids), 1,
     1u << 22, LIM_PIDS},
    {NULL, "cpu_limit", NULL, "CLAW_CPU_LIMIT", K_CPU_PCT, "--cpu", K_CPU, OFF(limits.cpu_cores), 0,
     1024, LIM_CPU},
    {"sandbox", "workspace_quota", NULL, NULL, 0, NULL, K_SIZE, OFF(workspace_quota_bytes),
     1ull << 20, 0, -1},
    {"sandbox", "max_clones_per_tenant", NULL, NULL, 0, NULL, K_UINT, OFF(max_clones_per_tenant), 1,
     60000, -1},
    {"sandbox", "idle_timeout", NULL, "CLAW_IDLE_TIMEOUT_SEC", K_SECONDS, NULL, K_DURATION,
     OFF(idle_timeout_s), 0, 30 * 86400, -1},
    {"sandbox", "network_policy", NULL, "CLAW_ENABLE_SANDBOX_NET", K_NETBOOL, "--net", K_NETPOL,
     OFF(net), 0, 0, -1},
    {"sandbox", "mount_sandbox", NULL, "CLAW_ENABLE_MOUNT_SANDBOX", K_BOOL, NULL, K_BOOL,
     OFF(mount_sandbox), 0, 0, -1},
    {"sandbox", "read_only_rootfs", NULL, NULL, 0, NULL, K_TRUE_ONLY, 0, 0, 0, -1},
    {"sandbox", "seccomp_profile", NULL, NULL, 0, NULL, K_SECCOMP, OFF(seccomp), 0, 0, -1},
    {"sandbox", "runner_uid", NULL, "CLAW_RUNNER_UID", K_U32, NULL, K_U32, OFF(runner_uid), 1,
     SBX_ID_RANGE - 2, -1},
    {"sandbox", "runner_gid", NULL, "CLAW_RUNNER_GID", K_U32, NULL, K_U32, OFF(runner_gid), 1,
     SBX_ID_RANGE - 2, -1},
    {"sandbox", "host_id_base", NULL, NULL, 0, NULL, K_U32, OFF(host_id_base), SBX_ID_RANGE,
     UINT32_MAX - SBX_ID_RANGE, -1},
    {"sandbox", "task_env_keys", NULL, "CLAW_TASK_ENV_KEYS", K_KEYS, NULL, K_KEYS,
     OFF(task_env_keys), 0, 0, -1},
    /* network */
    {"network", "default", NULL, NULL, 0, NULL, K_DEFAULT, OFF(network.def), 0, 0, -1},
    {"network", "proxy_port", NULL, "CLAW_SANDBOX_PROXY_PORT", K_U16, NULL, K_U16,
     OFF(network.proxy_port), 1, 65535, -1},
    {"network", "allowed_cidrs", NULL, "CLAW_SANDBOX_ALLOWED_CIDRS", K_CIDRS, NULL, K_CIDRS,
     OFF(network.allowed_cidrs), 0, 0, -1},
    {"network", "allowed_ports", NULL, "CLAW_SANDBOX_ALLOWED_PORTS", K_PORTS, NULL, K_PORTS,
     OFF(network.allowed_ports), 0, 0, -1},
    {"network", "allowed_internal_targets", NULL, "CLAW_ALLOWED_INTERNAL_TARGETS", K_TARGETS, NULL,
     K_TARGETS, OFF(network.allowed_internal_targets), 0, 0, -1},
    {"network", "blocked_cidrs", NULL, "CLAW_SANDBOX_BLOCKED_CIDRS", K_BLOCKED, NULL, K_BLOCKED,
     OFF(network.blocked_cidrs), 0, 0, -1},
    {"network.limits", "max_connections", NULL, NULL, 0, NULL, K_UINT, OFF(network.max_connections),
     1, 65536, -1},
    {"network.limits", "total_connections", NULL, NULL, 0, NULL, K_UINT,
     OFF(network.total_connections), 1, 1000000, -1},
    {"network.limits", "max_bytes", NULL, NULL, 0, NULL, K_SIZE0, OFF(network.max_bytes), 1, 0, -1},
    {"network.limits", "idle_timeout", NULL, NULL, 0, NULL, K_DURATION, OFF(network.idle_timeout_s),
     0, 86400, -1},
    {"network.limits", "connect_timeout", NULL, NULL, 0, NULL, K_DURATION,
     OFF(network.connect_timeout_s), 0, 300, -1},
    /* retention */
    {"retention", "max_age", NULL, NULL, 0, NULL, K_DURATION, OFF(retention.max_age_s), 0,
     3650 * 86400ull, -1},
    {"retention", "max_tasks", NULL, NULL, 0, NULL, K_UINT, OFF(retention.max_tasks), 1, 1000000000,
     -1},
    {"retention", "events_per_session", NULL, NULL, 0, NULL, K_UINT,
     OFF(retention.events_per_session), 1, 1000000000, -1},
    /* pool */
    {"pool", "enabled", NULL, NULL, 0, NULL, K_BOOL, OFF(pool.enabled), 0, 0, -1},
    {"pool", "size", "max_idle", NULL, 0, NULL, K_UINT, OFF(pool.size), 0, 1024, -1},
    {"pool", "max_active", NULL, NULL, 0, NULL, K_UINT, OFF(pool.max_active), 0, 4096, -1},
    {"pool", "idle_timeout", NULL, NULL, 0, NULL, K_DURATION, OFF(pool.idle_timeout_s), 0, 86400,
     -1},
};

/* The original's variables that mean nothing to this daemon: accepted so its
 * deployments start, reported in ignored_env. */
static const char *const ignored_vars[] = {
    "CLAW_AGENT_ID",
    "CLAW_SESSION_ID",
    "CLAW_WORKSPACE_HOST_PATH",
    "CLAW_AISVR_BASE_URL",
    "CLAW_AISVR_TOKEN",
    "CLAW_SKILL_STORE_COMMON_ROOT",
    "CLAW_SKILL_STORE_SHARED_ROOT",
    "CLAW_SKILL_STORE_MAPPED_ROOT",
    "CLAW_RUNTIME_SKILL_COMMON_ROOT",
    "CLAW_RUNTIME_SKILL_SHARED_ROOT",
    "CLAW_RUNTIME_SKILL_MAPPED_ROOT",
};

/* --- the loader ----------------------------------------------------------- */

struct loader {
    struct sbx_config *c;
    sbx_err *err;
    const char *file; /* --config as given, for messages */
    char *file_dir;   /* its directory, absolute */
    char *cwd;        /* fetched when a relative path needs it */
    bool in_file;     /* relative paths against file_dir */
    yaml_document_t *doc;
    char lim_origin[N_LIM][WHERE_MAX]; /* who set each default limit ("" built-in) */
    char max_origin[N_LIM][WHERE_MAX];
    unsigned env_set[MAX_ENVIRONMENTS]; /* per environment: fields set explicitly */
    bool env_disabled[MAX_ENVIRONMENTS];
};

static int fail(struct loader *L, const char *where, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(struct loader *L, const char *where, int errnum, const char *fmt, ...)
{
    char msg[SBX_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return sbx_err_set(L->err, errnum, "%s: %s", where, msg);
}

static int oom(struct loader *L)
{
    return sbx_err_set(L->err, ENOMEM, "configuration: out of memory");
}

/* --- small helpers ---------------------------------------------------------- */

static void free_secret(char *s)
{
    if (s) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

static void strv_clear(struct sbx_strv *s, bool secret)
{
    for (size_t i = 0; i < s->n; i++)
        secret ? free_secret(s->v[i]) : free(s->v[i]);
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

static int strv_push_len(struct sbx_strv *s, const char *str, size_t len)
{
    char **v = realloc(s->v, (s->n + 2) * sizeof(*v));
    if (!v)
        return -1;
    s->v = v;
    if (!(v[s->n] = strndup(str, len)))
        return -1;
    v[++s->n] = NULL;
    return 0;
}

static int strv_push(struct sbx_strv *s, const char *str)
{
    return strv_push_len(s, str, strlen(str));
}

static bool strv_has(const struct sbx_strv *s, const char *str)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], str) == 0)
            return true;
    return false;
}

static int set_str(char **dst, const char *src)
{
    char *copy = NULL;
    if (src && !(copy = strdup(src)))
        return -1;
    free(*dst);
    *dst = copy;
    return 0;
}

static const char *env_get(char **envp, const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 0; envp && envp[i]; i++)
        if (strncmp(envp[i], name, len) == 0 && envp[i][len] == '=')
            return envp[i] + len + 1;
    return NULL;
}

static bool is_blank(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

static bool has_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return true;
    return false;
}

/* A path segment of the workspace tree: tenant, cloneKey, cloneId, runtime id. */
static bool segment_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SEGMENT_MAX || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '.' && *s != '_' && *s != '-')
            return false;
    return true;
}

static const char *env_key_problem(const char *s)
{
    if (!*s)
        return "is empty";
    if (strlen(s) > ENV_KEY_MAX)
        return "is too long";
    if (!isalpha((unsigned char)*s) && *s != '_')
        return "must start with a letter or _";
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_')
            return "may only hold letters, digits and _";
    if (strncmp(s, "CLAW_", 5) == 0)
        return "is one of the daemon's own CLAW_* settings, never passed to tasks";
    return NULL;
}

static const char *token_problem(const char *s)
{
    size_t n = strlen(s);
    if (n == 0)
        return "is empty";
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f || *p == ',')
            return "may only hold printable characters, without blanks or commas";
    if (n < TOKEN_MIN)
        return "is too short (at least 16 characters)";
    if (n > TOKEN_MAX)
        return "is too long (at most 512 characters)";
    return NULL;
}

static bool token_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("._-@:", *s))
            return false;
    return true;
}

static void fmt_size(uint64_t v, char *buf, size_t len)
{
    if (v && v % (1ull << 30) == 0)
        snprintf(buf, len, "%lluG", (unsigned long long)(v >> 30));
    else if (v && v % (1ull << 20) == 0)
        snprintf(buf, len, "%lluM", (unsigned long long)(v >> 20));
    else if (v && v % 1024 == 0)
        snprintf(buf, len, "%lluK", (unsigned long long)(v >> 10));
    else
        snprintf(buf, len, "%llu bytes", (unsigned long long)v);
}

/* --- value parsers ------------------------------------------------------------ */

static int parse_bool(const char *s, bool *out, sbx_err *e)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0)
            return *out = true, 0;
        if (strcasecmp(s, no[i]) == 0)
            return *out = false, 0;
    }
    return sbx_err_set(e, EINVAL, "'%s' is not true or false", s);
}

/* A decimal number made of digits and at most one dot, then *end. */
static int parse_decimal(const char *s, double *out, const char **end)
{
    const char *p = s;
    bool digit = false, dot = false;
    for (; isdigit((unsigned char)*p) || (*p == '.' && !dot); p++) {
        if (*p == '.')
            dot = true;
        else
            digit = true;
    }
    if (!digit || (size_t)(p - s) > 40)
        return -1;
    char num[48];
    memcpy(num, s, (size_t)(p - s));
    num[p - s] = '\0';
    *out = strtod(num, NULL);
    *end = p;
    return isfinite(*out) ? 0 : -1;
}

/* "300", "30s", "1.5h", "5m", "7d", "500ms" -> seconds in (0, max]. */
static int parse_duration(const char *s, double max, double *out, sbx_err *e)
{
    static const struct {
        const char *unit;
        double mult;
    } units[] = {{"", 1}, {"s", 1}, {"ms", 0.001}, {"m", 60}, {"h", 3600}, {"d", DAY}};
    double v;
    const char *unit;
    if (parse_decimal(s, &v, &unit) == 0)
        for (size_t i = 0; i < SBX_ARRAY_LEN(units); i++)
            if (strcmp(unit, units[i].unit) == 0) {
                v *= units[i].mult;
                if (v <= 0 || v > max)
                    return sbx_err_set(e, ERANGE, "'%s' is out of range (0, %gs]", s, max);
                *out = v;
                return 0;
            }
    return sbx_err_set(e, EINVAL, "'%s' is not a duration (e.g. 300, 30s, 5m, 2h, 7d)", s);
}

/* Cores ("0.5"), or percent of one core ("25%"). */
static int parse_cpu(const char *s, double max, bool percent_only, double *out, sbx_err *e)
{
    size_t n = strlen(s);
    if (!percent_only && (n == 0 || s[n - 1] != '%'))
        return sbx_parse_cpu(s, max, out, e);
    double v;
    const char *end;
    if (parse_decimal(s, &v, &end) < 0 || strcmp(end, percent_only ? "" : "%") != 0)
        return sbx_err_set(e, EINVAL, "'%s' is not a percentage of one core (e.g. 25)", s);
    if (v <= 0 || v / 100 > max)
        return sbx_err_set(e, ERANGE, "'%s' percent is out of range (0, %g]", s, max * 100);
    *out = v / 100;
    return 0;
}

static int parse_listen(struct loader *L, const char *s, struct sbx_listen *out, sbx_err *e);
static int make_path(struct loader *L, const char *s, char **out, sbx_err *e);

/* "ip", "ip:port", "[v6]:port", "v6". */
static int check_upstream(const char *s, sbx_err *e)
{
    char host[64];
    const char *port = NULL;
    size_t colons = 0;
    for (const char *p = s; *p; p++)
        colons += *p == ':';
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || (close[1] && close[1] != ':'))
            return sbx_err_set(e, EINVAL, "'%s' is not [ADDRESS]:PORT", s);
        snprintf(host, sizeof(host), "%.*s", (int)(close - s - 1), s + 1);
        port = close[1] ? close + 2 : NULL;
    } else if (colons == 1) {
        snprintf(host, sizeof(host), "%.*s", (int)(strchr(s, ':') - s), s);
        port = strchr(s, ':') + 1;
    } else {
        snprintf(host, sizeof(host), "%s", s);
    }
    struct sbx_addr a;
    uint64_t p;
    if (sbx_addr_parse(host, &a, NULL) < 0)
        return sbx_err_set(e, EINVAL, "'%s' is not an IP address (with an optional :PORT)", s);
    if (port && sbx_parse_uint(port, 1, 65535, &p, e) < 0)
        return -1;
    return 0;
}

/* Judge egress rules and lists with the one policy engine, so the file says
 * exactly what a sandbox will get. */
static int check_policy(const struct sbx_policy_opts *o, sbx_err *e)
{
    struct sbx_policy *p = sbx_policy_new(o, e);
    if (!p) {
        /* "CLAW_SANDBOX_ALLOWED_CIDRS entry 'x': why": the caller names the key */
        char *entry = strncmp(e->msg, "CLAW_", 5) == 0 ? strstr(e->msg, "entry ") : NULL;
        if (entry)
            memmove(e->msg, entry, strlen(entry) + 1);
        return -1;
    }
    sbx_policy_free(p);
    return 0;
}

static int check_rule(const char *rule, bool deny, sbx_err *e)
{
    const char *list[] = {rule, NULL};
    struct sbx_policy_opts o = {.def = SBX_DEFAULT_ALLOW};
    if (deny)
        o.deny = list;
    else
        o.allow = list;
    return check_policy(&o, e);
}

/* A comma list of variable names into out (replacing it): blanks trimmed,
 * empty entries and repeats dropped, each name checked. */
static int split_keys(const char *text, struct sbx_strv *out, sbx_err *e)
{
    struct sbx_strv v = {0};
    for (const char *p = text; *p;) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        const char *a = p, *b = end;
        while (a < b && is_blank(*a))
            a++;
        while (b > a && is_blank(b[-1]))
            b--;
        if (b > a) {
            char key[ENV_KEY_MAX + 2];
            snprintf(key, sizeof(key), "%.*s", (int)(b - a), a);
            const char *why = (size_t)(b - a) > ENV_KEY_MAX ? "is too long" : env_key_problem(key);
            if (why) {
                strv_clear(&v, false);
                return sbx_err_set(e, EINVAL, "'%s' %s", key, why);
            }
            if (!strv_has(&v, key) && strv_push(&v, key) < 0) {
                strv_clear(&v, false);
                return sbx_err_set(e, ENOMEM, "out of memory");
            }
        }
        p = *end ? end + 1 : end;
    }
    strv_clear(out, false);
    *out = v;
    return 0;
}

/* Parse text as kind into dst. Errors: e->msg without the key. */
static int parse_kind(struct loader *L, enum kind k, void *dst, uint64_t min, uint64_t max,
                      const char *text, sbx_err *e)
{
    char buf[32];
    uint64_t u;
    double d;
    bool b;
    switch (k) {
    case K_SEGMENT:
    case K_OPT_SEGMENT:
        if (!segment_ok(text))
            return sbx_err_set(e, EINVAL,
                               "'%.80s' must be 1 to 64 of A-Z a-z 0-9 . _ - (not . or ..)", text);
        return set_str(dst, text) < 0 ? sbx_err_set(e, ENOMEM, "out of memory") : 0;
    case K_PATH:
        return make_path(L, text, dst, e);
    case K_LISTEN: {
        struct sbx_listen l = {0};
        if (parse_listen(L, text, &l, e) < 0)
            return -1;
        struct sbx_listen *old = dst;
        free(old->text), free(old->host), free(old->path);
        *old = l;
        return 0;
    }
    case K_LOGLEVEL:
        for (int i = SBX_LOG_ERROR; i <= SBX_LOG_DEBUG; i++)
            if (strcmp(text, sbx_log_level_name(i)) == 0)
                return *(enum sbx_log_level *)dst = i, 0;
        return sbx_err_set(e, EINVAL, "'%s' is not error, warn, info or debug", text);
    case K_UINT:
    case K_U32:
    case K_U16:
        if (sbx_parse_uint(text, min, max, &u, e) < 0)
            return -1;
        if (k == K_UINT)
            *(uint64_t *)dst = u;
        else if (k == K_U32)
            *(uint32_t *)dst = (uint32_t)u;
        else
            *(uint16_t *)dst = (uint16_t)u;
        return 0;
    case K_SIZE0:
        if (strcmp(text, "0") == 0)
            return *(uint64_t *)dst = 0, 0;
        /* fall through */
    case K_SIZE:
        if (sbx_parse_size(text, &u, e) < 0)
            return -1;
        if (u < min) {
            fmt_size(min, buf, sizeof(buf));
            return sbx_err_set(e, ERANGE, "'%s' is below the minimum %s", text, buf);
        }
        return *(uint64_t *)dst = u, 0;
    case K_MB:
        if (sbx_parse_uint(text, min >> 20, max >> 20, &u, e) < 0)
            return -1;
        return *(uint64_t *)dst = u << 20, 0;
    case K_DURATION:
        if (parse_duration(text, (double)max, &d, e) < 0)
            return -1;
        return *(double *)dst = d, 0;
    case K_SECONDS:
        if (sbx_parse_seconds(text, (double)max, &d, e) < 0)
            return -1;
        return *(double *)dst = d, 0;
    case K_CPU:
    case K_CPU_PCT:
        if (parse_cpu(text, (double)max, k == K_CPU_PCT, &d, e) < 0)
            return -1;
        return *(double *)dst = d, 0;
    case K_BOOL:
    case K_TRUE_ONLY:
        if (parse_bool(text, &b, e) < 0)
            return -1;
        if (k == K_TRUE_ONLY && !b)
            return sbx_err_set(e, EINVAL,
                               "only true is possible: a sandbox's root is always read-only "
                               "(tasks write to /workspace and /tmp)");
        if (k == K_BOOL)
            *(bool *)dst = b;
        return 0;
    case K_NETPOL:
        /* seed 004's `bridge` (an isolated network with a way out) is our proxy */
        if (strcmp(text, "bridge") == 0)
            return *(enum sbx_net_policy *)dst = SBX_NET_PROXY, 0;
        return sbx_net_policy_parse(text, dst, e);
    case K_NETBOOL:
        if (parse_bool(text, &b, e) < 0)
            return -1;
        return *(enum sbx_net_policy *)dst = b ? SBX_NET_PROXY : SBX_NET_NONE, 0;
    case K_SECCOMP:
        return sbx_seccomp_profile_parse(text, dst, e);
    case K_DEFAULT:
        if (strcmp(text, "allow") != 0 && strcmp(text, "deny") != 0)
            return sbx_err_set(e, EINVAL, "'%s' is not allow or deny", text);
        return *(enum sbx_default *)dst = text[0] == 'd' ? SBX_DEFAULT_DENY : SBX_DEFAULT_ALLOW, 0;
    case K_CIDRS:
    case K_PORTS:
    case K_TARGETS:
    case K_BLOCKED: {
        struct sbx_policy_opts o = {.def = SBX_DEFAULT_ALLOW};
        *(k == K_CIDRS     ? &o.allowed_cidrs
          : k == K_PORTS   ? &o.allowed_ports
          : k == K_TARGETS ? &o.allowed_internal_targets
                           : &o.blocked_cidrs) = text;
        if (has_control(text))
            return sbx_err_set(e, EINVAL, "holds a control character");
        if (check_policy(&o, e) < 0)
            return -1;
        return set_str(dst, text) < 0 ? sbx_err_set(e, ENOMEM, "out of memory") : 0;
    }
    case K_KEYS:
        return split_keys(text, dst, e);
    }
    return sbx_err_set(e, EINVAL, "internal: unknown kind");
}

static int apply(struct loader *L, enum kind k, void *dst, uint64_t min, uint64_t max,
                 const char *text, const char *where)
{
    sbx_err e = {0};
    if (parse_kind(L, k, dst, min, max, text, &e) < 0)
        return fail(L, where, e.errnum, "%s", e.msg);
    return 0;
}

static int base_dir(struct loader *L, const char **out, sbx_err *e)
{
    if (L->in_file) {
        *out = L->file_dir;
        return 0;
    }
    if (!L->cwd && !(L->cwd = getcwd(NULL, 0)))
        return sbx_err_set(e, errno, "relative path, and the current directory is unknown");
    *out = L->cwd;
    return 0;
}

/* Absolute, without trailing slashes. */
static int make_path(struct loader *L, const char *s, char **out, sbx_err *e)
{
    if (!*s)
        return sbx_err_set(e, EINVAL, "is empty");
    if (has_control(s))
        return sbx_err_set(e, EINVAL, "'%.80s' holds a control character", s);
    const char *base = "";
    if (s[0] != '/' && base_dir(L, &base, e) < 0)
        return -1;
    char *p;
    if (asprintf(&p, "%s%s%s", s[0] == '/' ? "" : base, s[0] == '/' ? "" : "/", s) < 0)
        return sbx_err_set(e, ENOMEM, "out of memory");
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = '\0';
    if (n >= 4096) {
        free(p);
        return sbx_err_set(e, ENAMETOOLONG, "path is too long");
    }
    free(*out);
    *out = p;
    return 0;
}

static bool hostname_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253 || s[0] == '-' || s[0] == '.')
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '.')
            return false;
    return true;
}

/* ":8080", "0.0.0.0:8080", "[::1]:8080", "localhost:8080", "8080", "unix:PATH". */
static int parse_listen(struct loader *L, const char *s, struct sbx_listen *out, sbx_err *e)
{
    struct sbx_listen l = {0};
    if (strncmp(s, "unix:", 5) == 0) {
        if (make_path(L, s + 5, &l.path, e) < 0)
            return -1;
        if (strlen(l.path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
            free(l.path);
            return sbx_err_set(e, ENAMETOOLONG, "socket path '%.80s' is longer than 107 bytes",
                               s + 5);
        }
        l.unix_socket = true;
    } else {
        char host[256] = "";
        const char *port = s, *colon = strrchr(s, ':');
        if (s[0] == '[') {
            const char *close = strchr(s, ']');
            struct sbx_addr a;
            if (!close || close[1] != ':' || (size_t)(close - s) >= sizeof(host))
                return sbx_err_set(e, EINVAL, "'%.80s' is not [ADDRESS]:PORT", s);
            snprintf(host, sizeof(host), "%.*s", (int)(close - s - 1), s + 1);
            if (sbx_addr_parse(host, &a, NULL) < 0 || a.family != AF_INET6)
                return sbx_err_set(e, EINVAL, "'%s' is not an IPv6 address", host);
            port = close + 2;
        } else if (colon) {
            if (strchr(s, ':') != colon)
                return sbx_err_set(e, EINVAL, "'%.80s': write an IPv6 address as [ADDRESS]:PORT",
                                   s);
            if ((size_t)(colon - s) >= sizeof(host))
                return sbx_err_set(e, EINVAL, "host name in '%.80s' is too long", s);
            snprintf(host, sizeof(host), "%.*s", (int)(colon - s), s);
            if (host[0] && !hostname_ok(host))
                return sbx_err_set(e, EINVAL, "'%.80s' is not a host name or address", host);
            port = colon + 1;
        }
        uint64_t p;
        if (!*port || !isdigit((unsigned char)*port))
            return sbx_err_set(e, EINVAL, "'%.80s' is not HOST:PORT, :PORT or unix:PATH", s);
        if (sbx_parse_uint(port, 0, 65535, &p, e) < 0)
            return -1;
        l.port = (uint16_t)p;
        if (host[0] && !(l.host = strdup(host)))
            return sbx_err_set(e, ENOMEM, "out of memory");
    }
    if (!(l.text = strdup(s))) {
        free(l.host), free(l.path);
        return sbx_err_set(e, ENOMEM, "out of memory");
    }
    *out = l;
    return 0;
}

/* --- environments and tokens ---------------------------------------------------- */

static const struct {
    const char *name;
    const char *command[3];
    const char *aliases[4];
} builtin_envs[] = {
    [SBX_LANG_PYTHON] = {"python", {"python3", "-c"}, {"python3"}},
    [SBX_LANG_NODE] = {"node", {"node", "-e"}, {"nodejs", "javascript", "js"}},
    [SBX_LANG_SHELL] = {"shell", {"/bin/sh", "-c"}, {"sh"}},
};

static int default_command(struct sbx_environment *env)
{
    strv_clear(&env->command, false);
    for (size_t i = 0; builtin_envs[env->language].command[i]; i++)
        if (strv_push(&env->command, builtin_envs[env->language].command[i]) < 0)
            return -1;
    return 0;
}

static void env_free(struct sbx_environment *env)
{
    free(env->name);
    strv_clear(&env->command, false);
    strv_clear(&env->aliases, false);
    free(env->rootfs);
    free(env->working_dir);
    memset(env, 0, sizeof(*env));
}

static struct sbx_environment *env_by_name(struct sbx_config *c, const char *name)
{
    for (size_t i = 0; i < c->n_environments; i++)
        if (strcmp(c->environments[i].name, name) == 0)
            return &c->environments[i];
    return NULL;
}

/* A new environment of that language with its built-in command, or NULL. */
static struct sbx_environment *env_add(struct loader *L, const char *name, enum sbx_language lang)
{
    struct sbx_config *c = L->c;
    if (c->n_environments == MAX_ENVIRONMENTS)
        return NULL;
    struct sbx_environment *v = realloc(c->environments, (c->n_environments + 1) * sizeof(*v));
    if (!v)
        return NULL;
    c->environments = v;
    struct sbx_environment *env = &v[c->n_environments];
    memset(env, 0, sizeof(*env));
    env->language = lang;
    if (!(env->name = strdup(name)) || !(env->working_dir = strdup("/workspace")) ||
        default_command(env) < 0) {
        env_free(env);
        return NULL;
    }
    L->env_set[c->n_environments] = 0;
    L->env_disabled[c->n_environments] = false;
    c->n_environments++;
    return env;
}

static int token_add(struct loader *L, const char *name, const char *token, const char *tenant)
{
    struct sbx_config *c = L->c;
    struct sbx_token *v = realloc(c->tokens, (c->n_tokens + 1) * sizeof(*v));
    if (!v)
        return oom(L);
    c->tokens = v;
    struct sbx_token *t = &v[c->n_tokens];
    *t = (struct sbx_token){0};
    if (!(t->name = strdup(name)) || !(t->token = strdup(token)) ||
        (tenant && !(t->tenant = strdup(tenant)))) {
        free(t->name), free_secret(t->token), free(t->tenant);
        return oom(L);
    }
    c->n_tokens++;
    return 0;
}

/* A higher source names the operator tokens: those of lower sources go. */
static void drop_operator_tokens(struct sbx_config *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n_tokens; i++) {
        if (c->tokens[i].tenant) {
            c->tokens[n++] = c->tokens[i];
            continue;
        }
        free(c->tokens[i].name);
        free_secret(c->tokens[i].token);
    }
    c->n_tokens = n;
}

/* --- defaults --------------------------------------------------------------------- */

static int set_defaults(struct loader *L)
{
    struct sbx_config *c = L->c;
    sbx_err e = {0};
    c->log_level = SBX_LOG_INFO;
    if (parse_listen(L, ":8080", &c->listen, &e) < 0 ||
        !(c->state_dir = strdup("/var/lib/sandbox")) || !(c->tenant_code = strdup("default")) ||
        !(c->clone_id = strdup("default")))
        return oom(L);
    c->max_concurrent = 32;
    c->queue_size = 1024;
    c->queue_per_tenant = 64;
    c->max_connections = 512;
    c->max_body_bytes = 16ull << 20;
    c->header_timeout_s = 10;
    c->connection_idle_timeout_s = 60;

    c->limits = (struct sbx_limits){
        .timeout_s = 300,
        .memory_bytes = 256ull << 20,
        .pids = 32,
        .cpu_cores = 0.25,
        .file_size_bytes = 100ull << 20,
        .output_bytes = 10ull << 20,
        .tmp_bytes = 64ull << 20,
    };
    c->max = (struct sbx_limits){
        .timeout_s = 1800,
        .memory_bytes = 2ull << 30,
        .pids = 256,
        .cpu_cores = 2,
        .file_size_bytes = 1ull << 30,
        .output_bytes = 64ull << 20,
        .tmp_bytes = 1ull << 30,
    };
    c->workspace_quota_bytes = 1ull << 30;
    c->max_clones_per_tenant = 1000;
    c->idle_timeout_s = 600;
    c->net = SBX_NET_PROXY;
    c->mount_sandbox = true;
    c->seccomp = SBX_SECCOMP_DEFAULT;
    c->runner_uid = c->runner_gid = SBX_RUNNER_ID;
    c->host_id_base = SBX_DEFAULT_HOST_ID_BASE;

    c->network.def = SBX_DEFAULT_ALLOW;
    c->network.proxy_port = 1080;
    c->network.max_connections = 256;
    c->network.total_connections = 4096;
    c->network.max_bytes = 0;
    c->network.idle_timeout_s = 300;
    c->network.connect_timeout_s = 10;

    c->retention.max_age_s = 7 * DAY;
    c->retention.max_tasks = 10000;
    c->retention.events_per_session = 10000;

    c->pool.idle_timeout_s = 300;

    for (size_t i = 0; i < SBX_ARRAY_LEN(builtin_envs); i++) {
        struct sbx_environment *env = env_add(L, builtin_envs[i].name, (enum sbx_language)i);
        if (!env)
            return oom(L);
        for (size_t j = 0; builtin_envs[i].aliases[j]; j++)
            if (strv_push(&env->aliases, builtin_envs[i].aliases[j]) < 0)
                return oom(L);
    }
    return 0;
}

/* --- YAML -------------------------------------------------------------------------- */

static yaml_node_t *ynode(struct loader *L, int index)
{
    return yaml_document_get_node(L->doc, index);
}

static void where_node(struct loader *L, const yaml_node_t *n, const char *path, char *buf,
                       size_t len)
{
    snprintf(buf, len, "%s:%zu:%zu: %s", L->file, n->start_mark.line + 1, n->start_mark.column + 1,
             path);
}

static int yfail(struct loader *L, const yaml_node_t *n, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int yfail(struct loader *L, const yaml_node_t *n, const char *path, const char *fmt, ...)
{
    char where[WHERE_MAX], msg[SBX_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    where_node(L, n, path, where, sizeof(where));
    return fail(L, where, EINVAL, "%s", msg);
}

/* "parent.key" and "parent[i]" into a KEYPATH_MAX buffer, "..." when cut. */
static void keypath(char *buf, const char *parent, const char *key)
{
    if (snprintf(buf, KEYPATH_MAX, "%s.%s", parent, key) >= KEYPATH_MAX)
        strcpy(buf + KEYPATH_MAX - 4, "...");
}

static void indexpath(char *buf, const char *parent, size_t i)
{
    if (snprintf(buf, KEYPATH_MAX, "%s[%zu]", parent, i) >= KEYPATH_MAX)
        strcpy(buf + KEYPATH_MAX - 4, "...");
}

static const char *yscalar_text(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

static bool yis_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *s = yscalar_text(n);
    return !*s || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
           strcmp(s, "NULL") == 0;
}

/* The text of a scalar value; refuses null, lists, mappings and NUL bytes. */
static int yscalar(struct loader *L, const yaml_node_t *n, const char *path, const char **out)
{
    if (n->type != YAML_SCALAR_NODE)
        return yfail(L, n, path, "expects a single value, not a %s",
                     n->type == YAML_SEQUENCE_NODE ? "list" : "mapping");
    if (yis_null(n))
        return yfail(L, n, path, "has no value");
    if (strlen(yscalar_text(n)) != n->data.scalar.length)
        return yfail(L, n, path, "holds a NUL byte");
    *out = yscalar_text(n);
    return 0;
}

/* A mapping whose keys are plain, distinct scalars. */
static int ymapping(struct loader *L, const yaml_node_t *n, const char *path)
{
    if (n->type != YAML_MAPPING_NODE)
        return yfail(L, n, path, "expects a mapping (KEY: VALUE)");
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = ynode(L, p->key);
        if (k->type != YAML_SCALAR_NODE || strlen(yscalar_text(k)) != k->data.scalar.length)
            return yfail(L, k, path, "keys must be plain strings");
        for (yaml_node_pair_t *q = n->data.mapping.pairs.start; q < p; q++)
            if (strcmp(yscalar_text(ynode(L, q->key)), yscalar_text(k)) == 0) {
                char kp[KEYPATH_MAX];
                snprintf(kp, sizeof(kp), "%s%s%s", path, *path ? "." : "", yscalar_text(k));
                return yfail(L, k, kp, "given twice (first at line %zu)",
                             ynode(L, q->key)->start_mark.line + 1);
            }
    }
    return 0;
}

static yaml_node_t *ylookup(struct loader *L, const yaml_node_t *map, const char *key,
                            yaml_node_t **keynode)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++)
        if (strcmp(yscalar_text(ynode(L, p->key)), key) == 0) {
            if (keynode)
                *keynode = ynode(L, p->key);
            return ynode(L, p->value);
        }
    return NULL;
}

/* A key and the seed's name for it may not both be given. */
static int yalias_conflict(struct loader *L, const yaml_node_t *map, const char *path,
                           const char *a, const char *b)
{
    yaml_node_t *ka, *kb;
    if (!b || !ylookup(L, map, a, &ka) || !ylookup(L, map, b, &kb))
        return 0;
    return yfail(L, kb, path, "%s and %s are the same setting: give one", a, b);
}

/* Join a list of scalars with commas (for kinds that take either). */
static int yjoin(struct loader *L, const yaml_node_t *n, const char *path, char **out)
{
    size_t len = 1;
    for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top; i++) {
        const char *s;
        if (yscalar(L, ynode(L, *i), path, &s) < 0)
            return -1;
        if (strchr(s, ','))
            return yfail(L, ynode(L, *i), path, "'%.80s': one entry per list item", s);
        len += strlen(s) + 1;
    }
    char *buf = calloc(1, len);
    if (!buf)
        return oom(L);
    for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top; i++) {
        if (i != n->data.sequence.items.start)
            strcat(buf, ",");
        strcat(buf, yscalar_text(ynode(L, *i)));
    }
    *out = buf;
    return 0;
}

/* One value of a setting from the file. */
static int yapply(struct loader *L, enum kind k, void *dst, uint64_t min, uint64_t max,
                  const yaml_node_t *key, const yaml_node_t *val, const char *path, char *where,
                  size_t where_len)
{
    char wbuf[WHERE_MAX];
    if (!where)
        where = wbuf, where_len = sizeof(wbuf);
    where_node(L, key, path, where, where_len);
    if (k == K_OPT_SEGMENT && yis_null(val)) {
        free(*(char **)dst);
        *(char **)dst = NULL;
        return 0;
    }
    if (val->type == YAML_SEQUENCE_NODE && kind_takes_list(k)) {
        cleanup_free char *text = NULL;
        if (yjoin(L, val, path, &text) < 0)
            return -1;
        return apply(L, k, dst, min, max, text, where);
    }
    const char *text;
    if (yscalar(L, val, path, &text) < 0)
        return -1;
    return apply(L, k, dst, min, max, text, where);
}

static const struct setting *find_setting(const char *section, const char *key)
{
    for (size_t i = 0; i < SBX_ARRAY_LEN(settings); i++)
        if (settings[i].section && strcmp(settings[i].section, section) == 0 &&
            (strcmp(settings[i].key, key) == 0 ||
             (settings[i].alias && strcmp(settings[i].alias, key) == 0)))
            return &settings[i];
    return NULL;
}

static int lim_index(const char *key)
{
    for (int i = 0; i < N_LIM; i++)
        if (strcmp(lim_fields[i].key, key) == 0 ||
            (lim_fields[i].alias && strcmp(lim_fields[i].alias, key) == 0))
            return i;
    return -1;
}

static int ylim_aliases(struct loader *L, const yaml_node_t *map, const char *path)
{
    for (int i = 0; i < N_LIM; i++)
        if (yalias_conflict(L, map, path, lim_fields[i].key, lim_fields[i].alias) < 0)
            return -1;
    return 0;
}

/* A key of a limits block into lim, recording where it was set. */
static int ylimit(struct loader *L, int i, struct sbx_limits *lim, const yaml_node_t *key,
                  const yaml_node_t *val, const char *path, char *origin)
{
    const struct lim_field *f = &lim_fields[i];
    return yapply(L, f->kind, (char *)lim + f->off, f->min, f->max, key, val, path, origin,
                  origin ? WHERE_MAX : 0);
}

/* Is a value of field i of lim above the maximum? The text of both if so. */
static bool lim_above(int i, const struct sbx_limits *lim, const struct sbx_limits *max, char *a,
                      char *b, size_t len)
{
    const struct lim_field *f = &lim_fields[i];
    const char *p = (const char *)lim + f->off, *q = (const char *)max + f->off;
    if (f->kind == K_DURATION || f->kind == K_CPU) {
        double x = *(const double *)p, y = *(const double *)q;
        snprintf(a, len, f->kind == K_CPU ? "%g cores" : "%gs", x);
        snprintf(b, len, f->kind == K_CPU ? "%g cores" : "%gs", y);
        return x > y;
    }
    uint64_t x = *(const uint64_t *)p, y = *(const uint64_t *)q;
    if (f->kind == K_SIZE) {
        fmt_size(x, a, len);
        fmt_size(y, b, len);
    } else {
        snprintf(a, len, "%llu", (unsigned long long)x);
        snprintf(b, len, "%llu", (unsigned long long)y);
    }
    return x > y;
}

typedef int (*special_fn)(struct loader *L, const char *key, const yaml_node_t *k,
                          const yaml_node_t *v, const char *path);

/* A mapping of table settings of `section`, other keys left to fn. */
static int ywalk(struct loader *L, const yaml_node_t *map, const char *path, const char *section,
                 special_fn fn)
{
    if (ymapping(L, map, path) < 0)
        return -1;
    for (size_t i = 0; i < SBX_ARRAY_LEN(settings); i++)
        if (settings[i].section && strcmp(settings[i].section, section) == 0 &&
            yalias_conflict(L, map, path, settings[i].key, settings[i].alias) < 0)
            return -1;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = ynode(L, p->key), *v = ynode(L, p->value);
        const char *key = yscalar_text(k);
        char kpath[KEYPATH_MAX];
        keypath(kpath, path, key);
        const struct setting *s = find_setting(section, key);
        int rc = 0;
        if (s)
            rc = yapply(L, s->kind, (char *)L->c + s->off, s->min, s->max, k, v, kpath, NULL, 0);
        else if (fn && (rc = fn(L, key, k, v, kpath)) == 0)
            return yfail(L, k, kpath, "unknown key");
        else if (!fn)
            return yfail(L, k, kpath, "unknown key");
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* server.tokens: [{name, token, tenant?}] */
static int ytokens(struct loader *L, const yaml_node_t *list, const char *path)
{
    if (list->type != YAML_SEQUENCE_NODE)
        return yfail(L, list, path, "expects a list of {name, token, tenant}");
    size_t idx = 0;
    for (yaml_node_item_t *i = list->data.sequence.items.start; i < list->data.sequence.items.top;
         i++, idx++) {
        yaml_node_t *item = ynode(L, *i);
        char ipath[KEYPATH_MAX], kpath[KEYPATH_MAX];
        indexpath(ipath, path, idx);
        if (ymapping(L, item, ipath) < 0)
            return -1;
        const char *f[3] = {NULL, NULL, NULL};
        static const char *const keys[] = {"name", "token", "tenant"};
        for (yaml_node_pair_t *p = item->data.mapping.pairs.start; p < item->data.mapping.pairs.top;
             p++) {
            const char *key = yscalar_text(ynode(L, p->key));
            keypath(kpath, ipath, key);
            size_t j = 0;
            while (j < 3 && strcmp(keys[j], key) != 0)
                j++;
            if (j == 3)
                return yfail(L, ynode(L, p->key), kpath, "unknown key (name, token, tenant)");
            if (j == 2 && yis_null(ynode(L, p->value)))
                continue;
            if (yscalar(L, ynode(L, p->value), kpath, &f[j]) < 0)
                return -1;
            const char *why = j == 0 && !token_name_ok(f[0])
                                  ? "must be 1 to 64 of A-Z a-z 0-9 . _ - @ :"
                              : j == 1 ? token_problem(f[1])
                              : j == 2 && !segment_ok(f[2])
                                  ? "is not a tenant code (1 to 64 of A-Z a-z 0-9 . _ -)"
                                  : NULL;
            if (why)
                return yfail(L, ynode(L, p->key), kpath, "%s", why);
        }
        if (!f[0] || !f[1])
            return yfail(L, item, ipath, "needs %s", !f[0] ? "a name" : "a token");
        if (token_add(L, f[0], f[1], f[2]) < 0)
            return -1;
    }
    return 0;
}

static int yserver_special(struct loader *L, const char *key, const yaml_node_t *k,
                           const yaml_node_t *v, const char *path)
{
    if (strcmp(key, "tokens") == 0)
        return ytokens(L, v, path) < 0 ? -1 : 1;
    if (strcmp(key, "default_clone") == 0)
        return ywalk(L, v, path, "server.default_clone", NULL) < 0 ? -1 : 1;
    return 0;
}

static int ysandbox_special(struct loader *L, const char *key, const yaml_node_t *k,
                            const yaml_node_t *v, const char *path)
{
    int i = lim_index(key);
    if (i >= 0)
        return ylimit(L, i, &L->c->limits, k, v, path, L->lim_origin[i]) < 0 ? -1 : 1;
    if (strcmp(key, "max") != 0)
        return 0;
    if (ymapping(L, v, path) < 0 || ylim_aliases(L, v, path) < 0)
        return -1;
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        yaml_node_t *mk = ynode(L, p->key);
        char kpath[KEYPATH_MAX];
        keypath(kpath, path, yscalar_text(mk));
        int j = lim_index(yscalar_text(mk));
        if (j < 0)
            return yfail(L, mk, kpath, "unknown key");
        if (ylimit(L, j, &L->c->max, mk, ynode(L, p->value), kpath, L->max_origin[j]) < 0)
            return -1;
    }
    return 1;
}

/* A list of scalars, each checked by fn (which fills e), into out (replaced). */
static int ylist(struct loader *L, const yaml_node_t *n, const char *path, struct sbx_strv *out,
                 int (*fn)(const char *s, bool arg, sbx_err *e), bool arg)
{
    if (n->type != YAML_SEQUENCE_NODE)
        return yfail(L, n, path, "expects a list");
    struct sbx_strv v = {0};
    size_t idx = 0;
    for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top;
         i++, idx++) {
        char ipath[KEYPATH_MAX];
        const char *s;
        sbx_err e = {0};
        indexpath(ipath, path, idx);
        if (yscalar(L, ynode(L, *i), ipath, &s) < 0 ||
            (fn && fn(s, arg, &e) < 0 && yfail(L, ynode(L, *i), ipath, "%s", e.msg) < 0)) {
            strv_clear(&v, false);
            return -1;
        }
        if (strv_push(&v, s) < 0) {
            strv_clear(&v, false);
            return oom(L);
        }
    }
    strv_clear(out, false);
    *out = v;
    return 0;
}

static int upstream_fn(const char *s, bool arg, sbx_err *e)
{
    return check_upstream(s, e);
}

static int ydns_special(struct loader *L, const char *key, const yaml_node_t *k,
                        const yaml_node_t *v, const char *path)
{
    if (strcmp(key, "upstream") != 0)
        return 0;
    return ylist(L, v, path, &L->c->network.dns_upstream, upstream_fn, false) < 0 ? -1 : 1;
}

static int ynetwork_special(struct loader *L, const char *key, const yaml_node_t *k,
                            const yaml_node_t *v, const char *path)
{
    struct sbx_config *c = L->c;
    if (strcmp(key, "allow") == 0 || strcmp(key, "deny") == 0)
        return ylist(L, v, path, key[0] == 'a' ? &c->network.allow : &c->network.deny, check_rule,
                     key[0] == 'd') < 0
                   ? -1
                   : 1;
    if (strcmp(key, "dns") == 0)
        return ywalk(L, v, path, "network.dns", ydns_special) < 0 ? -1 : 1;
    if (strcmp(key, "limits") == 0)
        return ywalk(L, v, path, "network.limits", NULL) < 0 ? -1 : 1;
    if (strcmp(key, "hosts") != 0)
        return 0;
    if (ymapping(L, v, path) < 0)
        return -1;
    struct sbx_strv hosts = {0};
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        yaml_node_t *hk = ynode(L, p->key);
        char kpath[KEYPATH_MAX], *entry = NULL;
        const char *addr;
        sbx_err e = {0};
        keypath(kpath, path, yscalar_text(hk));
        const char *list[] = {NULL, NULL};
        struct sbx_policy_opts o = {.def = SBX_DEFAULT_ALLOW, .hosts = list};
        int rc = yscalar(L, ynode(L, p->value), kpath, &addr);
        if (rc == 0 && asprintf(&entry, "%s=%s", yscalar_text(hk), addr) < 0)
            rc = oom(L), entry = NULL;
        list[0] = entry;
        if (rc == 0 && check_policy(&o, &e) < 0)
            rc = yfail(L, hk, kpath, "%s", e.msg);
        if (rc == 0 && strv_push(&hosts, entry) < 0)
            rc = oom(L);
        free(entry);
        if (rc < 0) {
            strv_clear(&hosts, false);
            return -1;
        }
    }
    strv_clear(&c->network.hosts, false);
    c->network.hosts = hosts;
    return 1;
}

static struct sbx_tenant_conf *tenant_add(struct sbx_config *c, const char *code)
{
    struct sbx_tenant_conf *v = realloc(c->tenants, (c->n_tenants + 1) * sizeof(*v));
    if (!v)
        return NULL;
    c->tenants = v;
    struct sbx_tenant_conf *t = &v[c->n_tenants];
    *t = (struct sbx_tenant_conf){0};
    if (!(t->code = strdup(code)))
        return NULL;
    c->n_tenants++;
    return t;
}

/* tenants: {code: {env_keys: [...], env: {KEY: value}}} */
static int ytenants(struct loader *L, const yaml_node_t *map, const char *path)
{
    if (ymapping(L, map, path) < 0)
        return -1;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = ynode(L, p->key), *body = ynode(L, p->value);
        const char *code = yscalar_text(k);
        char tpath[KEYPATH_MAX];
        keypath(tpath, path, code);
        if (!segment_ok(code))
            return yfail(L, k, tpath, "is not a tenant code (1 to 64 of A-Z a-z 0-9 . _ -)");
        struct sbx_tenant_conf *t = tenant_add(L->c, code);
        if (!t)
            return oom(L);
        if (yis_null(body))
            continue;
        if (ymapping(L, body, tpath) < 0)
            return -1;
        yaml_node_t *kk, *keys = ylookup(L, body, "env_keys", &kk);
        yaml_node_t *env = ylookup(L, body, "env", NULL);
        for (yaml_node_pair_t *q = body->data.mapping.pairs.start; q < body->data.mapping.pairs.top;
             q++) {
            const char *key = yscalar_text(ynode(L, q->key));
            char kpath[KEYPATH_MAX];
            keypath(kpath, tpath, key);
            if (strcmp(key, "env_keys") != 0 && strcmp(key, "env") != 0)
                return yfail(L, ynode(L, q->key), kpath, "unknown key (env_keys, env)");
        }
        if (keys) {
            char kpath[KEYPATH_MAX];
            keypath(kpath, tpath, "env_keys");
            if (yapply(L, K_KEYS, &t->env_keys, 0, 0, kk, keys, kpath, NULL, 0) < 0)
                return -1;
        }
        if (!env)
            continue;
        char epath[KEYPATH_MAX];
        keypath(epath, tpath, "env");
        if (ymapping(L, env, epath) < 0)
            return -1;
        for (yaml_node_pair_t *q = env->data.mapping.pairs.start; q < env->data.mapping.pairs.top;
             q++) {
            yaml_node_t *vk = ynode(L, q->key);
            const char *key = yscalar_text(vk), *val, *why = env_key_problem(key);
            char kpath[KEYPATH_MAX], *kv;
            keypath(kpath, epath, key);
            if (why)
                return yfail(L, vk, kpath, "'%.80s' %s", key, why);
            if (strv_has(&t->env_keys, key))
                return yfail(L, vk, kpath, "is also in env_keys: give one");
            if (yscalar(L, ynode(L, q->value), kpath, &val) < 0)
                return -1;
            if (asprintf(&kv, "%s=%s", key, val) < 0)
                return oom(L);
            int rc = strv_push(&t->env, kv);
            free_secret(kv);
            if (rc < 0)
                return oom(L);
        }
    }
    return 0;
}

/* What an environment's body may hold besides the limit keys. */
static const char *const env_keys[] = {
    "name",           "language",        "command", "aliases",          "rootfs", "working_dir",
    "network_policy", "seccomp_profile", "enabled", "read_only_rootfs", "image",  "mounts"};

static int name_fn(const char *s, bool arg, sbx_err *e)
{
    return segment_ok(s)
               ? 0
               : sbx_err_set(e, EINVAL, "'%.80s' is not a name (1 to 64 of A-Z a-z 0-9 . _ -)", s);
}

static int yenv_body(struct loader *L, const char *name, const yaml_node_t *namek,
                     const yaml_node_t *body, const char *path)
{
    struct sbx_config *c = L->c;
    if (!segment_ok(name))
        return yfail(L, namek, path, "'%.80s' is not a name (1 to 64 of A-Z a-z 0-9 . _ -)", name);
    if (ymapping(L, body, path) < 0 || ylim_aliases(L, body, path) < 0)
        return -1;
    /* language first: a new environment needs it, and it decides the command */
    yaml_node_t *lk, *lang = ylookup(L, body, "language", &lk);
    enum sbx_language language = SBX_LANG_PYTHON;
    if (lang) {
        const char *s;
        char kpath[KEYPATH_MAX];
        keypath(kpath, path, "language");
        if (yscalar(L, lang, kpath, &s) < 0)
            return -1;
        size_t j = 0;
        while (j < SBX_ARRAY_LEN(builtin_envs) && strcmp(builtin_envs[j].name, s) != 0)
            j++;
        if (j == SBX_ARRAY_LEN(builtin_envs))
            return yfail(L, lk, kpath, "'%.80s' is not python, node or shell", s);
        language = (enum sbx_language)j;
    }
    struct sbx_environment *env = env_by_name(c, name);
    if (!env && !lang) {
        /* seed 004 names them "python-3.9", "node-18" and gives no language */
        size_t j = 0;
        while (j < SBX_ARRAY_LEN(builtin_envs) &&
               strncmp(name, builtin_envs[j].name, strlen(builtin_envs[j].name)) != 0)
            j++;
        if (j == SBX_ARRAY_LEN(builtin_envs))
            return yfail(L, namek, path,
                         "a new environment needs a language (python, node, shell)");
        language = (enum sbx_language)j;
    }
    if (!env) {
        if (!(env = env_add(L, name, language)))
            return c->n_environments == MAX_ENVIRONMENTS
                       ? yfail(L, namek, path, "too many environments (at most %d)",
                               MAX_ENVIRONMENTS)
                       : oom(L);
    } else if (lang && env->language != language) {
        env->language = language;
        if (default_command(env) < 0)
            return oom(L);
    }
    size_t ei = (size_t)(env - c->environments);
    for (yaml_node_pair_t *p = body->data.mapping.pairs.start; p < body->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = ynode(L, p->key), *v = ynode(L, p->value);
        const char *key = yscalar_text(k), *s;
        char kpath[KEYPATH_MAX], where[WHERE_MAX];
        keypath(kpath, path, key);
        int li = lim_index(key);
        if (li >= 0) {
            char a[48], b[48];
            if (ylimit(L, li, &env->limits, k, v, kpath, NULL) < 0)
                return -1;
            if (lim_above(li, &env->limits, &c->max, a, b, sizeof(a)))
                return yfail(L, k, kpath, "%s is above the maximum %s (sandbox.max.%s)", a, b,
                             lim_fields[li].key);
            L->env_set[ei] |= 1u << li;
            continue;
        }
        size_t j = 0;
        while (j < SBX_ARRAY_LEN(env_keys) && strcmp(env_keys[j], key) != 0)
            j++;
        if (j == SBX_ARRAY_LEN(env_keys))
            return yfail(L, k, kpath, "unknown key");
        int rc = 0;
        if (strcmp(key, "name") == 0 || strcmp(key, "language") == 0) {
            continue; /* done above */
        } else if (strcmp(key, "command") == 0) {
            if (v->type == YAML_SCALAR_NODE) {
                if ((rc = yscalar(L, v, kpath, &s)) == 0) {
                    strv_clear(&env->command, false);
                    rc = strv_push(&env->command, s) < 0 ? oom(L) : 0;
                }
            } else if ((rc = ylist(L, v, kpath, &env->command, NULL, false)) == 0 &&
                       env->command.n == 0) {
                rc = yfail(L, k, kpath, "is empty");
            }
            for (size_t a = 0; rc == 0 && a < env->command.n; a++)
                if (!env->command.v[a][0])
                    rc = yfail(L, k, kpath, "has an empty argument");
        } else if (strcmp(key, "aliases") == 0) {
            rc = ylist(L, v, kpath, &env->aliases, name_fn, false);
        } else if (strcmp(key, "rootfs") == 0) {
            struct stat st;
            where_node(L, k, kpath, where, sizeof(where));
            if ((rc = yscalar(L, v, kpath, &s)) == 0 &&
                (rc = apply(L, K_PATH, &env->rootfs, 0, 0, s, where)) == 0 &&
                (stat(env->rootfs, &st) < 0 || !S_ISDIR(st.st_mode)))
                rc = fail(L, where, ENOTDIR, "'%.80s' is not a directory", env->rootfs);
        } else if (strcmp(key, "working_dir") == 0) {
            if ((rc = yscalar(L, v, kpath, &s)) == 0) {
                if (s[0] != '/' || strstr(s, "/..") || has_control(s))
                    rc = yfail(L, k, kpath, "'%.80s' is not an absolute path without ..", s);
                else if (set_str(&env->working_dir, s) < 0)
                    rc = oom(L);
            }
        } else if (strcmp(key, "network_policy") == 0) {
            rc = yapply(L, K_NETPOL, &env->net, 0, 0, k, v, kpath, NULL, 0);
            L->env_set[ei] |= ENV_SET_NET;
        } else if (strcmp(key, "seccomp_profile") == 0) {
            if (v->type == YAML_MAPPING_NODE)
                rc = yfail(L, k, kpath,
                           "custom seccomp tables are not supported: use default "
                           "or strict");
            else
                rc = yapply(L, K_SECCOMP, &env->seccomp, 0, 0, k, v, kpath, NULL, 0);
            L->env_set[ei] |= ENV_SET_SECCOMP;
        } else if (strcmp(key, "enabled") == 0) {
            bool on = true;
            rc = yapply(L, K_BOOL, &on, 0, 0, k, v, kpath, NULL, 0);
            L->env_disabled[ei] = !on;
        } else if (strcmp(key, "read_only_rootfs") == 0) {
            rc = yapply(L, K_TRUE_ONLY, NULL, 0, 0, k, v, kpath, NULL, 0);
        } else if (strcmp(key, "image") == 0) {
            rc = yfail(L, k, kpath,
                       "container images are not supported: give rootfs, a "
                       "directory holding the environment's usr/, bin/, lib/");
        } else {
            rc = yfail(L, k, kpath,
                       "extra mounts are not supported: a task sees its clone's "
                       "workspace as /workspace");
        }
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* Every name and alias of the enabled environments names one of them. */
static int yenv_names(struct loader *L, const yaml_node_t *n, const char *path)
{
    struct sbx_config *c = L->c;
    for (size_t i = 0; i < c->n_environments; i++) {
        if (L->env_disabled[i])
            continue;
        const struct sbx_environment *a = &c->environments[i];
        for (size_t j = 0; j < c->n_environments; j++) {
            const struct sbx_environment *b = &c->environments[j];
            if (L->env_disabled[j])
                continue;
            for (size_t k = 0; k < b->aliases.n; k++)
                if (strcmp(b->aliases.v[k], a->name) == 0 ||
                    (i < j && strv_has(&a->aliases, b->aliases.v[k])))
                    return yfail(L, n, path, "alias '%s' of %s also names %s", b->aliases.v[k],
                                 b->name, a->name);
        }
    }
    /* drop the disabled ones */
    size_t m = 0;
    for (size_t i = 0; i < c->n_environments; i++) {
        if (L->env_disabled[i]) {
            env_free(&c->environments[i]);
            continue;
        }
        c->environments[m] = c->environments[i];
        L->env_set[m] = L->env_set[i];
        L->env_disabled[m] = false;
        m++;
    }
    c->n_environments = m;
    return 0;
}

static int yenvironments(struct loader *L, const yaml_node_t *n, const char *path)
{
    if (n->type == YAML_SEQUENCE_NODE) { /* seed 004: a list of {name: ..., ...} */
        size_t idx = 0;
        for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top;
             i++, idx++) {
            yaml_node_t *item = ynode(L, *i), *nk, *nv;
            char ipath[KEYPATH_MAX];
            const char *name;
            indexpath(ipath, path, idx);
            if (ymapping(L, item, ipath) < 0)
                return -1;
            if (!(nv = ylookup(L, item, "name", &nk)))
                return yfail(L, item, ipath, "needs a name");
            if (yscalar(L, nv, ipath, &name) < 0)
                return -1;
            for (yaml_node_item_t *j = n->data.sequence.items.start; j < i; j++)
                if (strcmp(yscalar_text(ylookup(L, ynode(L, *j), "name", NULL)), name) == 0)
                    return yfail(L, nk, ipath, "environment '%s' is given twice", name);
            if (yenv_body(L, name, nk, item, ipath) < 0)
                return -1;
        }
    } else {
        if (ymapping(L, n, path) < 0)
            return -1;
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
             p++) {
            yaml_node_t *k = ynode(L, p->key), *v = ynode(L, p->value), *nk;
            char epath[KEYPATH_MAX];
            keypath(epath, path, yscalar_text(k));
            if (v->type == YAML_MAPPING_NODE && ylookup(L, v, "name", &nk))
                return yfail(L, nk, epath, "the name is the key above");
            if (yenv_body(L, yscalar_text(k), k, v, epath) < 0)
                return -1;
        }
    }
    return yenv_names(L, n, path);
}

static int ypool_special(struct loader *L, const char *key, const yaml_node_t *k,
                         const yaml_node_t *v, const char *path)
{
    if (strcmp(key, "environments") != 0)
        return 0;
    struct sbx_strv names = {0};
    if (ylist(L, v, path, &names, name_fn, false) < 0)
        return -1;
    strv_clear(&L->c->pool.environments, false);
    for (size_t i = 0; i < names.n; i++) {
        const struct sbx_environment *env = sbx_config_environment(L->c, names.v[i]);
        int rc = 0;
        if (!env)
            rc = yfail(L, k, path, "'%s' is not an environment", names.v[i]);
        else if (!strv_has(&L->c->pool.environments, env->name) &&
                 strv_push(&L->c->pool.environments, env->name) < 0)
            rc = oom(L);
        if (rc < 0) {
            strv_clear(&names, false);
            return -1;
        }
    }
    strv_clear(&names, false);
    return 1;
}

static int yroot(struct loader *L, const yaml_node_t *root)
{
    static const char *const sections[] = {"server",    "sandbox",      "network", "tenants",
                                           "retention", "environments", "pool"};
    if (root->type != YAML_MAPPING_NODE)
        return yfail(L, root, "(top)",
                     "expects a mapping of sections (server, sandbox, "
                     "network, tenants, retention, environments, pool)");
    if (ymapping(L, root, "") < 0)
        return -1;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = ynode(L, p->key);
        size_t j = 0;
        while (j < SBX_ARRAY_LEN(sections) && strcmp(sections[j], yscalar_text(k)) != 0)
            j++;
        if (j == SBX_ARRAY_LEN(sections))
            return yfail(L, k, yscalar_text(k),
                         "unknown section (server, sandbox, network, "
                         "tenants, retention, environments, pool)");
    }
    /* in this order: environments are judged against the final maxima, the
     * pool against the final environments */
    for (size_t j = 0; j < SBX_ARRAY_LEN(sections); j++) {
        const char *name = sections[j];
        yaml_node_t *n = ylookup(L, root, name, NULL);
        if (!n || yis_null(n))
            continue;
        int rc = 0;
        if (strcmp(name, "server") == 0)
            rc = ywalk(L, n, name, name, yserver_special);
        else if (strcmp(name, "sandbox") == 0) {
            if (n->type == YAML_MAPPING_NODE) {
                yaml_node_t *sk, *sv = ylookup(L, n, "seccomp_profile", &sk);
                if (sv && sv->type == YAML_MAPPING_NODE)
                    return yfail(L, sk, "sandbox.seccomp_profile",
                                 "custom seccomp tables are not supported: use default or "
                                 "strict");
                if (ylim_aliases(L, n, name) < 0)
                    return -1;
            }
            rc = ywalk(L, n, name, name, ysandbox_special);
        } else if (strcmp(name, "network") == 0)
            rc = ywalk(L, n, name, name, ynetwork_special);
        else if (strcmp(name, "tenants") == 0)
            rc = ytenants(L, n, name);
        else if (strcmp(name, "retention") == 0)
            rc = ywalk(L, n, name, name, NULL);
        else if (strcmp(name, "environments") == 0)
            rc = yenvironments(L, n, name);
        else
            rc = ywalk(L, n, name, name, ypool_special);
        if (rc < 0)
            return -1;
    }
    return 0;
}

static int yaml_error(struct loader *L, const yaml_parser_t *p)
{
    if (p->error == YAML_MEMORY_ERROR)
        return oom(L);
    if (p->error == YAML_READER_ERROR)
        return sbx_err_set(L->err, EINVAL, "%s: byte %zu: %s", L->file, p->problem_offset,
                           p->problem ? p->problem : "unreadable");
    char ctx[96] = "";
    if (p->context)
        snprintf(ctx, sizeof(ctx), " (%s at line %zu, column %zu)", p->context,
                 p->context_mark.line + 1, p->context_mark.column + 1);
    return sbx_err_set(L->err, EINVAL, "%s:%zu:%zu: YAML syntax error: %s%s", L->file,
                       p->problem_mark.line + 1, p->problem_mark.column + 1,
                       p->problem ? p->problem : "malformed", ctx);
}

static int load_file(struct loader *L, const char *path)
{
    L->file = path;
    FILE *f = fopen(path, "re");
    struct stat st;
    if (!f)
        return sbx_err_set(L->err, errno, "--config: cannot open '%s': %s", path, strerror(errno));
    if (fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return sbx_err_set(L->err, EINVAL, "--config: '%s' is not a regular file", path);
    }
    /* relative paths in the file are relative to the file */
    sbx_err e = {0};
    cleanup_free char *abs = NULL;
    if (make_path(L, path, &abs, &e) < 0) {
        fclose(f);
        return sbx_err_set(L->err, e.errnum, "--config: %s", e.msg);
    }
    *strrchr(abs, '/') = '\0';
    L->file_dir = strdup(abs[0] ? abs : "/");
    if (!L->file_dir || !(L->c->config_path = strdup(path))) {
        fclose(f);
        return oom(L);
    }

    yaml_parser_t parser;
    yaml_document_t doc, next;
    int rc = -1;
    if (!yaml_parser_initialize(&parser)) {
        fclose(f);
        return oom(L);
    }
    yaml_parser_set_input_file(&parser, f);
    L->in_file = true;
    if (!yaml_parser_load(&parser, &doc)) {
        rc = yaml_error(L, &parser);
        goto out;
    }
    L->doc = &doc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!yaml_parser_load(&parser, &next)) {
        rc = yaml_error(L, &parser);
    } else {
        yaml_node_t *more = yaml_document_get_root_node(&next);
        if (more)
            rc = yfail(L, more, "(document)", "only one YAML document is read");
        else
            rc = root && !yis_null(root) ? yroot(L, root) : 0;
        yaml_document_delete(&next);
    }
    L->in_file = false;
    L->doc = NULL;
    yaml_document_delete(&doc);
out:
    L->in_file = false;
    yaml_parser_delete(&parser);
    fclose(f);
    return rc;
}

/* --- environment variables -------------------------------------------------------- */

static int load_env(struct loader *L, char **envp)
{
    struct sbx_config *c = L->c;
    for (size_t i = 0; i < SBX_ARRAY_LEN(settings); i++) {
        const struct setting *s = &settings[i];
        const char *raw = s->env ? env_get(envp, s->env) : NULL;
        if (!raw)
            continue;
        while (is_blank(*raw))
            raw++;
        size_t n = strlen(raw);
        while (n && is_blank(raw[n - 1]))
            n--;
        if (!n)
            continue; /* empty is unset, as in the original */
        cleanup_free char *v = strndup(raw, n);
        if (!v)
            return oom(L);
        if (apply(L, s->env_kind, (char *)c + s->off, s->min, s->max, v, s->env) < 0)
            return -1;
        if (s->lim >= 0)
            snprintf(L->lim_origin[s->lim], WHERE_MAX, "%s", s->env);
    }

    const char *tokens = env_get(envp, "CLAW_API_TOKEN");
    while (tokens && is_blank(*tokens))
        tokens++;
    if (tokens && *tokens) {
        drop_operator_tokens(c);
        size_t idx = 1;
        for (const char *p = tokens;; idx++) {
            const char *end = strchr(p, ',');
            size_t len = end ? (size_t)(end - p) : strlen(p);
            while (len && is_blank(*p))
                p++, len--;
            while (len && is_blank(p[len - 1]))
                len--;
            char *t = strndup(p, len), name[40];
            if (!t)
                return oom(L);
            const char *why = token_problem(t);
            snprintf(name, sizeof(name), "CLAW_API_TOKEN#%zu", idx);
            int rc = why ? fail(L, "CLAW_API_TOKEN", EINVAL, "entry %zu %s", idx, why)
                         : token_add(L, name, t, NULL);
            free_secret(t);
            if (rc < 0)
                return -1;
            if (!end)
                break;
            p = end + 1;
        }
    }

    /* every CLAW_* variable is ours: a misspelt one must not go unnoticed */
    for (size_t i = 0; envp && envp[i]; i++) {
        const char *eq = strchr(envp[i], '=');
        if (strncmp(envp[i], "CLAW_", 5) != 0 || !eq)
            continue;
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)(eq - envp[i]), envp[i]);
        bool known = strcmp(name, "CLAW_API_TOKEN") == 0;
        for (size_t j = 0; !known && j < SBX_ARRAY_LEN(settings); j++)
            known = settings[j].env && strcmp(settings[j].env, name) == 0;
        if (known)
            continue;
        for (size_t j = 0; !known && j < SBX_ARRAY_LEN(ignored_vars); j++)
            known = strcmp(ignored_vars[j], name) == 0;
        if (!known)
            return fail(L, name, EINVAL,
                        "unknown setting (see docs/configuration.md; no CLAW_* variable is "
                        "passed to tasks)");
        if (!strv_has(&c->ignored_env, name) && strv_push(&c->ignored_env, name) < 0)
            return oom(L);
    }
    return 0;
}

/* --- flags ------------------------------------------------------------------------- */

struct flag {
    const struct setting *s; /* NULL for --config and --token */
    const char *name;        /* as the table writes it */
    const char *value;
};

static int parse_flags(struct loader *L, int argc, char **argv, struct flag *out, size_t *n,
                       const char **config)
{
    *n = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--") == 0) {
            if (i + 1 < argc)
                return fail(L, argv[i + 1], EINVAL, "unexpected argument (serve takes options)");
            break;
        }
        if (arg[0] == '-' && arg[1] != '-')
            return fail(L, arg, EINVAL, "unknown option (options are long: see --help)");
        if (arg[0] != '-')
            return fail(L, arg, EINVAL, "unexpected argument (serve takes options)");
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        struct flag f = {0};
        for (size_t j = 0; j < SBX_ARRAY_LEN(settings) && !f.name; j++)
            if (settings[j].flag && strlen(settings[j].flag) == len &&
                strncmp(settings[j].flag, arg, len) == 0)
                f.s = &settings[j], f.name = settings[j].flag;
        if (!f.name && len == 8 && strncmp(arg, "--config", 8) == 0)
            f.name = "--config";
        if (!f.name && len == 7 && strncmp(arg, "--token", 7) == 0)
            f.name = "--token";
        if (!f.name) {
            char name[64];
            snprintf(name, sizeof(name), "%.*s", (int)(len < 60 ? len : 60), arg);
            return fail(L, name, EINVAL, "unknown option (see --help)");
        }
        if (eq)
            f.value = eq + 1;
        else if (i + 1 < argc)
            f.value = argv[++i];
        else
            return fail(L, f.name, EINVAL, "needs a value");
        if (strcmp(f.name, "--config") == 0) {
            if (*config)
                return fail(L, f.name, EINVAL, "given twice");
            if (!*f.value)
                return fail(L, f.name, EINVAL, "is empty");
            *config = f.value;
        }
        out[(*n)++] = f;
    }
    return 0;
}

static int apply_flags(struct loader *L, const struct flag *flags, size_t n)
{
    size_t tokens = 0;
    for (size_t i = 0; i < n; i++) {
        const struct flag *f = &flags[i];
        if (strcmp(f->name, "--config") == 0)
            continue;
        if (strcmp(f->name, "--token") == 0) {
            char name[32];
            const char *why = token_problem(f->value);
            if (why)
                return fail(L, "--token", EINVAL, "%s", why);
            if (tokens++ == 0)
                drop_operator_tokens(L->c);
            snprintf(name, sizeof(name), "--token#%zu", tokens);
            if (token_add(L, name, f->value, NULL) < 0)
                return -1;
            continue;
        }
        const struct setting *s = f->s;
        if (apply(L, s->kind, (char *)L->c + s->off, s->min, s->max, f->value, f->name) < 0)
            return -1;
        if (s->lim >= 0)
            snprintf(L->lim_origin[s->lim], WHERE_MAX, "%s", f->name);
    }
    return 0;
}

/* --- last checks and derived values ------------------------------------------------ */

static int resolve_env(struct loader *L, char **envp, const struct sbx_strv *keys,
                       struct sbx_strv *out)
{
    for (size_t i = 0; i < keys->n; i++) {
        const char *v = env_get(envp, keys->v[i]);
        char *kv;
        if (!v)
            continue; /* an optional key the daemon was not given */
        if (asprintf(&kv, "%s=%s", keys->v[i], v) < 0)
            return oom(L);
        int rc = strv_push(out, kv);
        free_secret(kv);
        if (rc < 0)
            return oom(L);
    }
    return 0;
}

static int finish(struct loader *L, char **envp)
{
    struct sbx_config *c = L->c;
    /* defaults within the maxima */
    for (int i = 0; i < N_LIM; i++) {
        char a[48], b[48];
        if (!lim_above(i, &c->limits, &c->max, a, b, sizeof(a)))
            continue;
        const char *key = lim_fields[i].key;
        char max_where[WHERE_MAX];
        if (L->max_origin[i][0])
            snprintf(max_where, sizeof(max_where), "%s", L->max_origin[i]);
        else
            snprintf(max_where, sizeof(max_where), "built-in sandbox.max.%s", key);
        /* blame the one that was configured: the default unless it is built in */
        if (L->lim_origin[i][0])
            return fail(L, L->lim_origin[i], ERANGE, "%s is above the maximum %s (%s)", a, b,
                        max_where);
        return fail(L, max_where, ERANGE, "%s is below the default %s (built-in sandbox.%s)", b, a,
                    key);
    }
    sbx_err pe = {0};
    if (sbx_egress_socks_port_check(c->network.proxy_port, &pe) < 0)
        return sbx_err_set(L->err, EINVAL, "network.proxy_port (CLAW_SANDBOX_PROXY_PORT) %s",
                           pe.msg);
    if (c->queue_per_tenant > c->queue_size)
        return sbx_err_set(
            L->err, ERANGE, "server.queue_per_tenant (%llu) is above server.queue_size (%llu)",
            (unsigned long long)c->queue_per_tenant, (unsigned long long)c->queue_size);
    /* environments: what they did not set comes from the sandbox's defaults */
    for (size_t i = 0; i < c->n_environments; i++) {
        struct sbx_environment *env = &c->environments[i];
        for (int f = 0; f < N_LIM; f++)
            if (!(L->env_set[i] & (1u << f)))
                memcpy((char *)&env->limits + lim_fields[f].off,
                       (char *)&c->limits + lim_fields[f].off,
                       lim_fields[f].kind == K_DURATION || lim_fields[f].kind == K_CPU
                           ? sizeof(double)
                           : sizeof(uint64_t));
        if (!(L->env_set[i] & ENV_SET_NET))
            env->net = c->net;
        if (!(L->env_set[i] & ENV_SET_SECCOMP))
            env->seccomp = c->seccomp;
    }
    /* tokens: one name and one secret each */
    for (size_t i = 0; i < c->n_tokens; i++)
        for (size_t j = 0; j < i; j++) {
            if (strcmp(c->tokens[i].name, c->tokens[j].name) == 0)
                return sbx_err_set(L->err, EINVAL, "token name '%s' is given twice",
                                   c->tokens[i].name);
            if (strcmp(c->tokens[i].token, c->tokens[j].token) == 0)
                return sbx_err_set(L->err, EINVAL, "%s: the same secret as %s", c->tokens[i].name,
                                   c->tokens[j].name);
        }
    /* derived paths */
    if (!c->workspace_root && asprintf(&c->workspace_root, "%s/workspaces",
                                       strcmp(c->state_dir, "/") ? c->state_dir : "") < 0)
        return c->workspace_root = NULL, oom(L);
    if (!c->control_dir &&
        asprintf(&c->control_dir, "%s/control", strcmp(c->state_dir, "/") ? c->state_dir : "") < 0)
        return c->control_dir = NULL, oom(L);
    /* injected variables: their values now, from the environment we were given */
    if (resolve_env(L, envp, &c->task_env_keys, &c->task_env) < 0)
        return -1;
    for (size_t i = 0; i < c->n_tenants; i++) {
        struct sbx_tenant_conf *t = &c->tenants[i];
        struct sbx_strv fixed = t->env;
        t->env = (struct sbx_strv){0};
        int rc = resolve_env(L, envp, &t->env_keys, &t->env);
        for (size_t j = 0; rc == 0 && j < fixed.n; j++)
            if (strv_push(&t->env, fixed.v[j]) < 0)
                rc = oom(L);
        strv_clear(&fixed, true);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* --- the public surface --------------------------------------------------------------- */

int sbx_config_load(struct sbx_config *c, int argc, char **argv, char **envp, sbx_err *err)
{
    memset(c, 0, sizeof(*c));
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            break;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            c->help = true;
            return 0;
        }
    }
    struct loader *L = calloc(1, sizeof(*L));
    struct flag *flags = calloc((size_t)(argc > 0 ? argc : 1), sizeof(*flags));
    size_t n_flags = 0;
    const char *config = NULL;
    int rc = -1;
    if (!L || !flags) {
        sbx_err_set(err, ENOMEM, "configuration: out of memory");
        goto out;
    }
    L->c = c;
    L->err = err;
    if (parse_flags(L, argc, argv, flags, &n_flags, &config) < 0 || set_defaults(L) < 0)
        goto out;
    if (config && load_file(L, config) < 0)
        goto out;
    if (load_env(L, envp) < 0 || apply_flags(L, flags, n_flags) < 0 || finish(L, envp) < 0)
        goto out;
    rc = 0;
out:
    if (L) {
        free(L->file_dir);
        free(L->cwd);
        free(L);
    }
    free(flags);
    if (rc < 0)
        sbx_config_free(c);
    return rc;
}

void sbx_config_free(struct sbx_config *c)
{
    if (!c)
        return;
    free(c->config_path);
    free(c->listen.text);
    free(c->listen.host);
    free(c->listen.path);
    free(c->state_dir);
    free(c->workspace_root);
    free(c->control_dir);
    free(c->runtime_id);
    free(c->tenant_code);
    free(c->clone_key);
    free(c->clone_id);
    for (size_t i = 0; i < c->n_tokens; i++) {
        free(c->tokens[i].name);
        free_secret(c->tokens[i].token);
        free(c->tokens[i].tenant);
    }
    free(c->tokens);
    strv_clear(&c->task_env_keys, false);
    strv_clear(&c->task_env, true);
    strv_clear(&c->network.allow, false);
    strv_clear(&c->network.deny, false);
    strv_clear(&c->network.hosts, false);
    strv_clear(&c->network.dns_upstream, false);
    free(c->network.allowed_cidrs);
    free(c->network.allowed_ports);
    free(c->network.allowed_internal_targets);
    free(c->network.blocked_cidrs);
    for (size_t i = 0; i < c->n_tenants; i++) {
        free(c->tenants[i].code);
        strv_clear(&c->tenants[i].env_keys, false);
        strv_clear(&c->tenants[i].env, true);
    }
    free(c->tenants);
    for (size_t i = 0; i < c->n_environments; i++)
        env_free(&c->environments[i]);
    free(c->environments);
    strv_clear(&c->pool.environments, false);
    strv_clear(&c->ignored_env, false);
    memset(c, 0, sizeof(*c));
}

const struct sbx_environment *sbx_config_environment(const struct sbx_config *c, const char *name)
{
    return sbx_environment_find(c->environments, c->n_environments, name);
}

const struct sbx_tenant_conf *sbx_config_tenant(const struct sbx_config *c, const char *code)
{
    return sbx_tenant_find(c->tenants, c->n_tenants, code);
}
