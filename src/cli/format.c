#include "cli/format.h"

#include <ctype.h>
#include <string.h>
#include <time.h>

#include "base/err.h"

#define MESSAGE_MAX 512
#define COMMAND_MAX 60

static const char *reason(long status)
{
    static const struct {
        long status;
        const char *text;
    } reasons[] = {
        {400, "Bad Request"},
        {401, "Unauthorized"},
        {403, "Forbidden"},
        {404, "Not Found"},
        {405, "Method Not Allowed"},
        {408, "Request Timeout"},
        {409, "Conflict"},
        {413, "Content Too Large"},
        {415, "Unsupported Media Type"},
        {429, "Too Many Requests"},
        {500, "Internal Server Error"},
        {502, "Bad Gateway"},
        {503, "Service Unavailable"},
        {504, "Gateway Timeout"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(reasons); i++)
        if (reasons[i].status == status)
            return reasons[i].text;
    return status >= 500 ? "Server Error" : "Error";
}

/* Up to max bytes of s's first line, control characters as spaces, blanks
 * around it trimmed, "..." when cut. */
static char *one_line(const char *s, size_t len, size_t max)
{
    while (len && isspace((unsigned char)*s)) {
        s++;
        len--;
    }
    size_t n = 0;
    while (n < len && s[n] != '\n' && s[n] != '\r')
        n++;
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    bool cut = n > max;
    if (cut)
        n = max;
    char *out = malloc(n + 4);
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++)
        out[i] = ((unsigned char)s[i] < ' ' || s[i] == 0x7f) ? ' ' : s[i];
    strcpy(out + n, cut ? "..." : "");
    return out;
}

char *sbx_cli_http_error(long status, const char *body, size_t len)
{
    json_t *j = body && len ? json_loadb(body, len, 0, NULL) : NULL;
    json_t *e = json_object_get(j, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    if (!msg && json_is_string(e))
        msg = json_string_value(e); /* {"error":"text"} */
    if (!msg)
        msg = json_string_value(json_object_get(j, "message"));
    char *out = NULL;
    cleanup_free char *text = NULL;
    cleanup_free char *codetext = NULL;
    if (msg) {
        text = one_line(msg, strlen(msg), MESSAGE_MAX);
        codetext = code ? one_line(code, strlen(code), 64) : NULL;
        if (text &&
            asprintf(&out, "%ld %s: %s", status, codetext ? codetext : reason(status), text) < 0)
            out = NULL;
    } else {
        text = body ? one_line(body, len, MESSAGE_MAX) : NULL;
        int n = text && *text ? asprintf(&out, "%ld %s: %s", status, reason(status), text)
                              : asprintf(&out, "%ld %s", status, reason(status));
        if (n < 0)
            out = NULL;
    }
    json_decref(j);
    return out;
}

bool sbx_cli_task_final(const char *status)
{
    static const char *const final[] = {"succeeded", "failed", "canceled", "timeout",
                                        "interrupted"};
    for (size_t i = 0; status && i < SBX_ARRAY_LEN(final); i++)
        if (strcmp(status, final[i]) == 0)
            return true;
    return false;
}

const json_t *sbx_cli_task_result(const json_t *task)
{
    json_t *r = json_object_get(task, "result");
    if (json_is_object(r))
        return r;
    if (json_object_get(task, "exitCode") || json_object_get(task, "stdout"))
        return task;
    return NULL;
}

int sbx_cli_task_exit_code(const json_t *task)
{
    const json_t *r = sbx_cli_task_result(task);
    json_t *ec = json_object_get(r, "exitCode");
    if (json_is_integer(ec) && json_integer_value(ec) >= 0 && json_integer_value(ec) <= 255)
        return (int)json_integer_value(ec);
    const char *st = json_string_value(json_object_get(task, "status"));
    if (st && strcmp(st, "succeeded") == 0)
        return 0;
    if (st && (strcmp(st, "canceled") == 0 || strcmp(st, "timeout") == 0))
        return 124;
    return 1;
}

static bool shell_safe(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("_./=:,@%+-", *s))
            return false;
    return true;
}

static void put_quoted(FILE *f, const char *s)
{
    if (shell_safe(s)) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputs("'\\''", f);
        else if ((unsigned char)*s < ' ' || *s == 0x7f)
            fputc('?', f);
        else
            fputc(*s, f);
    }
    fputc('\'', f);
}

char *sbx_cli_command_line(const json_t *task)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    json_t *cmd = json_object_get(task, "command");
    const char *lang = json_string_value(json_object_get(task, "language"));
    const char *skill = json_string_value(json_object_get(task, "skill"));
    if (json_is_array(cmd) && json_array_size(cmd) > 0) {
        size_t i;
        json_t *v;
        json_array_foreach(cmd, i, v)
        {
            if (i)
                fputc(' ', f);
            put_quoted(f, json_is_string(v) ? json_string_value(v) : "?");
        }
    } else if (json_is_string(cmd) && *json_string_value(cmd)) {
        const char *s = json_string_value(cmd);
        cleanup_free char *line = one_line(s, strlen(s), 200);
        fputs(line ? line : "", f);
    } else if (lang && *lang) {
        const char *code = json_string_value(json_object_get(task, "code"));
        cleanup_free char *line = code ? one_line(code, strlen(code), 200) : NULL;
        fprintf(f, "[%s] %s", lang, line ? line : "");
    } else if (skill && *skill) {
        fprintf(f, "[skill] %s", skill);
    } else {
        fputc('-', f);
    }
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

char *sbx_cli_scalar(const json_t *v)
{
    char *out = NULL;
    int n = 0;
    switch (json_typeof(v)) {
    case JSON_STRING:
        return strndup(json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        n = asprintf(&out, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        break;
    case JSON_REAL:
        n = asprintf(&out, "%g", json_real_value(v));
        break;
    case JSON_TRUE:
        return strdup("true");
    case JSON_FALSE:
        return strdup("false");
    case JSON_NULL:
        return strdup("");
    default:
        return NULL;
    }
    return n < 0 ? NULL : out;
}

/* Scalars as text, the rest as compact JSON; NULL only when out of memory. */
static char *value_text(const json_t *v)
{
    if (!v)
        return strdup("");
    char *s = sbx_cli_scalar(v);
    return s ? s : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

/* Compact "k=v k2="s"" of an object's members; strings JSON-quoted, empty
 * ones and nulls left out. */
static void summary(FILE *f, const json_t *data)
{
    if (!json_is_object(data)) {
        cleanup_free char *s = json_dumps(data, JSON_COMPACT | JSON_ENCODE_ANY);
        fputs(s ? s : "", f);
        return;
    }
    const char *k;
    json_t *v;
    bool first = true;
    json_object_foreach((json_t *)data, k, v)
    {
        if (json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0))
            continue; /* "skill":"" and the like say nothing */
        cleanup_free char *s =
            json_is_string(v) ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : value_text(v);
        fprintf(f, "%s%s=%s", first ? "" : " ", k, s ? s : "?");
        first = false;
    }
}

char *sbx_cli_event_line(const char *sse_id, const char *sse_type, const char *data, size_t len,
                         size_t max_len)
{
    json_t *body = json_loadb(data, len, JSON_DECODE_ANY, NULL);
    bool is_body = json_is_object(body) && json_object_get(body, "data");
    cleanup_free char *id =
        is_body && json_object_get(body, "id") ? sbx_cli_scalar(json_object_get(body, "id")) : NULL;
    const char *t = is_body ? json_string_value(json_object_get(body, "type")) : NULL;
    cleanup_free char *type = t ? strdup(t) : NULL;
    char *sum = NULL;
    size_t sum_len = 0;
    FILE *f = open_memstream(&sum, &sum_len);
    if (!f) {
        json_decref(body);
        return NULL;
    }
    if (is_body)
        summary(f, json_object_get(body, "data"));
    else if (body)
        summary(f, body);
    else {
        cleanup_free char *line = one_line(data, len, max_len + 1);
        fputs(line ? line : "", f);
    }
    bool ok = fclose(f) == 0;
    json_decref(body);
    if (!ok) {
        free(sum);
        return NULL;
    }
    for (size_t i = 0; i < sum_len; i++) /* one event, one line */
        if ((unsigned char)sum[i] < ' ')
            sum[i] = ' ';
    if (sum_len > max_len && max_len >= 3) {
        sum_len = max_len - 3;
        /* cut on a character boundary of UTF-8 */
        while (sum_len && ((unsigned char)sum[sum_len] & 0xc0) == 0x80)
            sum_len--;
        strcpy(sum + sum_len, "...");
    }
    const char *show_id = id && *id ? id : sse_id && *sse_id ? sse_id : "-";
    const char *show_type = type && *type ? type : sse_type && *sse_type ? sse_type : "message";
    char *out;
    if (asprintf(&out, "%s %s%s%s", show_id, show_type, *sum ? " " : "", sum) < 0)
        out = NULL;
    free(sum);
    return out;
}

struct kv {
    char *key;
    char *value;
};

static void print_pairs(FILE *f, struct kv *kv, size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        if (strlen(kv[i].key) > w)
            w = strlen(kv[i].key);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%s:%*s %s\n", kv[i].key, (int)(w - strlen(kv[i].key)), "",
                kv[i].value ? kv[i].value : "");
        free(kv[i].key);
        free(kv[i].value);
    }
}

static size_t add_pair(struct kv **kv, size_t n, const char *prefix, const char *key, char *value)
{
    struct kv *grown = realloc(*kv, (n + 1) * sizeof(**kv));
    if (!grown) {
        free(value);
        return n;
    }
    *kv = grown;
    if (asprintf(&grown[n].key, "%s%s", prefix, key) < 0) {
        free(value);
        return n;
    }
    grown[n].value = value;
    return n + 1;
}

void sbx_cli_print_object(FILE *f, const json_t *obj)
{
    struct kv *kv = NULL;
    size_t n = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v) n = add_pair(&kv, n, "", k, value_text(v));
    print_pairs(f, kv, n);
    free(kv);
}

static char *bytes_text(const json_t *s)
{
    char *out;
    return asprintf(&out, "%zu bytes", json_string_length(s)) < 0 ? NULL : out;
}

void sbx_cli_print_task(FILE *f, const json_t *task)
{
    struct kv *kv = NULL;
    size_t n = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)task, k, v)
    {
        if (strcmp(k, "result") == 0 && json_is_object(v))
            continue;
        if (strcmp(k, "command") == 0)
            n = add_pair(&kv, n, "", k, sbx_cli_command_line(task));
        else if ((strcmp(k, "stdout") == 0 || strcmp(k, "stderr") == 0) && json_is_string(v))
            n = add_pair(&kv, n, "", k, bytes_text(v));
        else
            n = add_pair(&kv, n, "", k, value_text(v));
    }
    json_t *r = json_object_get(task, "result");
    if (json_is_object(r))
        json_object_foreach(r, k, v)
        {
            if ((strcmp(k, "stdout") == 0 || strcmp(k, "stderr") == 0) && json_is_string(v))
                n = add_pair(&kv, n, "result.", k, bytes_text(v));
            else if (strcmp(k, "report") != 0 || !json_is_object(v))
                n = add_pair(&kv, n, "result.", k, value_text(v));
        }
    /* The engine's report, one line per field. */
    json_t *rep = json_object_get(r, "report");
    if (json_is_object(rep))
        json_object_foreach(rep, k, v) n = add_pair(&kv, n, "report.", k, value_text(v));
    print_pairs(f, kv, n);
    free(kv);
}

void sbx_cli_print_task_table(FILE *f, const json_t *tasks)
{
    int idw = 2;
    size_t i;
    json_t *t;
    json_array_foreach(tasks, i, t)
    {
        const char *id = json_string_value(json_object_get(t, "id"));
        if (id && (int)strlen(id) > idw)
            idw = (int)strlen(id);
    }
    fprintf(f, "%-*s  %-11s  %4s  %-24s  %s\n", idw, "ID", "STATUS", "EXIT", "CREATED", "COMMAND");
    json_array_foreach(tasks, i, t)
    {
        cleanup_free char *id = value_text(json_object_get(t, "id"));
        cleanup_free char *status = value_text(json_object_get(t, "status"));
        cleanup_free char *created = value_text(json_object_get(t, "createdAt"));
        cleanup_free char *cmd = sbx_cli_command_line(t);
        const json_t *r = sbx_cli_task_result(t);
        json_t *ec = json_object_get(r, "exitCode");
        char exit_s[24] = "-";
        if (json_is_integer(ec))
            snprintf(exit_s, sizeof(exit_s), "%" JSON_INTEGER_FORMAT, json_integer_value(ec));
        if (cmd && strlen(cmd) > COMMAND_MAX)
            strcpy(cmd + COMMAND_MAX - 3, "...");
        fprintf(f, "%-*s  %-11s  %4s  %-24s  %s\n", idw, id ? id : "", status ? status : "", exit_s,
                created ? created : "", cmd ? cmd : "");
    }
}

static void mtime_text(const json_t *v, char *buf, size_t len)
{
    if (json_is_number(v)) {
        time_t t = (time_t)json_number_value(v);
        struct tm tm;
        if (gmtime_r(&t, &tm) && strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm))
            return;
    }
    snprintf(buf, len, "%s", json_is_string(v) ? json_string_value(v) : "-");
}

void sbx_cli_print_entries(FILE *f, const json_t *entries)
{
    size_t i;
    json_t *e;
    json_array_foreach(entries, i, e)
    {
        json_t *mode = json_object_get(e, "mode");
        char mode_s[16];
        if (json_is_integer(mode))
            snprintf(mode_s, sizeof(mode_s), "%04llo",
                     (unsigned long long)json_integer_value(mode) & 07777);
        else
            snprintf(mode_s, sizeof(mode_s), "%s",
                     json_is_string(mode) ? json_string_value(mode) : "-");
        cleanup_free char *type = value_text(json_object_get(e, "type"));
        cleanup_free char *size = value_text(json_object_get(e, "size"));
        cleanup_free char *name = value_text(json_object_get(e, "name"));
        char mt[64];
        mtime_text(json_object_get(e, "mtime"), mt, sizeof(mt));
        bool dir = type && strcmp(type, "dir") == 0;
        fprintf(f, "%-5s  %-7s  %12s  %-24s  %s%s\n", mode_s, type ? type : "",
                size && *size ? size : "-", mt, name ? name : "", dir ? "/" : "");
    }
}
