/* One parser per kind of value, the same for every source: sizes, durations,
 * CPU, lists, listen addresses, paths, tokens, egress rules. Errors say what
 * is wrong with the value; the caller names where it was written. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/parse.h"
#include "daemon/config_int.h"

/* --- the loader's errors ---------------------------------------------------- */

int cfg_fail(struct loader *L, const char *where, int errnum, const char *fmt, ...)
{
    char msg[SBX_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return sbx_err_set(L->err, errnum, "%s: %s", where, msg);
}

int cfg_oom(struct loader *L)
{
    return sbx_err_set(L->err, ENOMEM, "configuration: out of memory");
}

/* --- small helpers ---------------------------------------------------------- */

void cfg_free_secret(char *s)
{
    if (s) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

void cfg_strv_clear(struct sbx_strv *s, bool secret)
{
    for (size_t i = 0; i < s->n; i++)
        secret ? cfg_free_secret(s->v[i]) : free(s->v[i]);
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

int cfg_strv_push(struct sbx_strv *s, const char *str)
{
    return strv_push_len(s, str, strlen(str));
}

int cfg_set_str(char **dst, const char *src)
{
    char *copy = NULL;
    if (src && !(copy = strdup(src)))
        return -1;
    free(*dst);
    *dst = copy;
    return 0;
}

const char *cfg_env_get(char **envp, const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 0; envp && envp[i]; i++)
        if (strncmp(envp[i], name, len) == 0 && envp[i][len] == '=')
            return envp[i] + len + 1;
    return NULL;
}

bool cfg_is_blank(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

bool cfg_has_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return true;
    return false;
}

/* A path segment of the workspace tree: tenant, cloneKey, cloneId, runtime id. */
bool cfg_segment_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SEGMENT_MAX || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '.' && *s != '_' && *s != '-')
            return false;
    return true;
}

const char *cfg_env_key_problem(const char *s)
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

const char *cfg_token_problem(const char *s)
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

bool cfg_token_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("._-@:", *s))
            return false;
    return true;
}

void cfg_fmt_size(uint64_t v, char *buf, size_t len)
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

/* "ip", "ip:port", "[v6]:port", "v6". */
int cfg_check_upstream(const char *s, sbx_err *e)
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
int cfg_check_policy(const struct sbx_policy_opts *o, sbx_err *e)
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

int cfg_check_rule(const char *rule, bool deny, sbx_err *e)
{
    const char *list[] = {rule, NULL};
    struct sbx_policy_opts o = {.def = SBX_DEFAULT_ALLOW};
    if (deny)
        o.deny = list;
    else
        o.allow = list;
    return cfg_check_policy(&o, e);
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
        while (a < b && cfg_is_blank(*a))
            a++;
        while (b > a && cfg_is_blank(b[-1]))
            b--;
        if (b > a) {
            char key[ENV_KEY_MAX + 2];
            snprintf(key, sizeof(key), "%.*s", (int)(b - a), a);
            const char *why =
                (size_t)(b - a) > ENV_KEY_MAX ? "is too long" : cfg_env_key_problem(key);
            if (why) {
                cfg_strv_clear(&v, false);
                return sbx_err_set(e, EINVAL, "'%s' %s", key, why);
            }
            if (!sbx_strv_has(&v, key) && cfg_strv_push(&v, key) < 0) {
                cfg_strv_clear(&v, false);
                return sbx_err_set(e, ENOMEM, "out of memory");
            }
        }
        p = *end ? end + 1 : end;
    }
    cfg_strv_clear(out, false);
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
    bool b = false;
    switch (k) {
    case K_SEGMENT:
    case K_OPT_SEGMENT:
        if (!cfg_segment_ok(text))
            return sbx_err_set(e, EINVAL,
                               "'%.80s' must be 1 to 64 of A-Z a-z 0-9 . _ - (not . or ..)", text);
        return cfg_set_str(dst, text) < 0 ? sbx_err_set(e, ENOMEM, "out of memory") : 0;
    case K_PATH:
        return cfg_make_path(L, text, dst, e);
    case K_TEXT: {
        size_t n = strlen(text);
        bool ok = n > 0 && n <= 2048;
        for (size_t i = 0; ok && i < n; i++)
            ok = (unsigned char)text[i] >= 0x20 && text[i] != 0x7f;
        if (!ok)
            return sbx_err_set(e, EINVAL, "must be 1 to 2048 printable characters");
        return cfg_set_str(dst, text) < 0 ? sbx_err_set(e, ENOMEM, "out of memory") : 0;
    }
    case K_LISTEN: {
        struct sbx_listen l = {0};
        if (cfg_parse_listen(L, text, &l, e) < 0)
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
            cfg_fmt_size(min, buf, sizeof(buf));
            return sbx_err_set(e, ERANGE, "'%s' is below the minimum %s", text, buf);
        }
        if (max && u > max) { /* (0: no upper bound) */
            cfg_fmt_size(max, buf, sizeof(buf));
            return sbx_err_set(e, ERANGE, "'%s' is above the maximum %s", text, buf);
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
    case K_CPU0:
        if (strcmp(text, "0") == 0)
            return *(double *)dst = 0, 0;
        /* fall through */
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
    case K_CGMODE:
        if (strcmp(text, "auto") != 0 && strcmp(text, "rlimit") != 0)
            return sbx_err_set(e, EINVAL, "'%s' is not auto or rlimit", text);
        return *(bool *)dst = text[0] == 'r', 0;
    case K_WSQUOTA:
        return sbx_ws_quota_mode_parse(text, dst, e);
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
        if (cfg_has_control(text))
            return sbx_err_set(e, EINVAL, "holds a control character");
        if (cfg_check_policy(&o, e) < 0)
            return -1;
        return cfg_set_str(dst, text) < 0 ? sbx_err_set(e, ENOMEM, "out of memory") : 0;
    }
    case K_KEYS:
        return split_keys(text, dst, e);
    }
    return sbx_err_set(e, EINVAL, "internal: unknown kind");
}

int cfg_apply(struct loader *L, enum kind k, void *dst, uint64_t min, uint64_t max,
              const char *text, const char *where)
{
    sbx_err e = {0};
    if (parse_kind(L, k, dst, min, max, text, &e) < 0)
        return cfg_fail(L, where, e.errnum, "%s", e.msg);
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
int cfg_make_path(struct loader *L, const char *s, char **out, sbx_err *e)
{
    if (!*s)
        return sbx_err_set(e, EINVAL, "is empty");
    if (cfg_has_control(s))
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
int cfg_parse_listen(struct loader *L, const char *s, struct sbx_listen *out, sbx_err *e)
{
    struct sbx_listen l = {0};
    if (strncmp(s, "unix:", 5) == 0) {
        if (cfg_make_path(L, s + 5, &l.path, e) < 0)
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
