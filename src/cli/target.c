#include "cli/target.h"

#include <stdio.h>
#include <string.h>
#include <sys/un.h>

void sbx_cli_target_clear(struct sbx_cli_target *t)
{
    free(t->base);
    free(t->unix_path);
    free(t->display);
    *t = (struct sbx_cli_target){0};
}

static bool has_ctl(const char *s, bool blank_too)
{
    for (; *s; s++)
        if ((unsigned char)*s < ' ' || *s == 0x7f || (blank_too && *s == ' '))
            return true;
    return false;
}

static int parse_unix(const char *url, struct sbx_cli_target *t, sbx_err *err)
{
    const char *path = url + strlen("unix:");
    if (strncmp(path, "//", 2) == 0)
        path += 2; /* unix:///run/x.sock */
    if (!*path)
        return sbx_err_set(err, EINVAL, "'%s' names no socket path", url);
    if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return sbx_err_set(err, ENAMETOOLONG, "socket path in '%s' is too long", url);
    t->base = strdup("http://localhost");
    t->unix_path = strdup(path);
    if (asprintf(&t->display, "unix:%s", path) < 0)
        t->display = NULL;
    if (!t->base || !t->unix_path || !t->display) {
        sbx_cli_target_clear(t);
        return sbx_err_set(err, ENOMEM, "url");
    }
    return 0;
}

int sbx_cli_target_parse(const char *url, struct sbx_cli_target *t, sbx_err *err)
{
    *t = (struct sbx_cli_target){0};
    if (!url || !*url)
        return sbx_err_set(err, EINVAL, "empty URL");
    bool is_unix = strncmp(url, "unix:", 5) == 0;
    if (has_ctl(url, !is_unix))
        return sbx_err_set(err, EINVAL, "'%s' holds a %s character", url,
                           is_unix ? "control" : "blank or control");
    if (is_unix)
        return parse_unix(url, t, err);

    const char *rest;
    const char *scheme = "http";
    const char *sep = strstr(url, "://");
    if (sep) {
        size_t n = (size_t)(sep - url);
        if (n == 4 && strncasecmp(url, "http", 4) == 0)
            scheme = "http";
        else if (n == 5 && strncasecmp(url, "https", 5) == 0)
            scheme = "https";
        else
            return sbx_err_set(err, EINVAL, "'%s': only http://, https:// and unix: are served",
                               url);
        rest = sep + 3;
    } else {
        rest = url; /* host:port or :port, as CLAW_LISTEN_ADDR writes it */
    }
    if (strpbrk(rest, "?#"))
        return sbx_err_set(err, EINVAL, "'%s': a base URL takes no query or fragment", url);
    size_t hostlen = strcspn(rest, "/");
    if (hostlen == 0)
        return sbx_err_set(err, EINVAL, "'%s' names no host", url);
    const char *host = rest;
    const char *prefix = rest + hostlen;
    size_t plen = strlen(prefix);
    while (plen && prefix[plen - 1] == '/')
        plen--;
    int n;
    if (host[0] == ':') /* ":8080": the daemon's default listen address */
        n = asprintf(&t->base, "%s://127.0.0.1%.*s%.*s", scheme, (int)hostlen, host, (int)plen,
                     prefix);
    else
        n = asprintf(&t->base, "%s://%.*s%.*s", scheme, (int)hostlen, host, (int)plen, prefix);
    if (n < 0) {
        t->base = NULL;
        return sbx_err_set(err, ENOMEM, "url");
    }
    if (!(t->display = strdup(t->base))) {
        sbx_cli_target_clear(t);
        return sbx_err_set(err, ENOMEM, "url");
    }
    return 0;
}

char *sbx_cli_escape(const char *s, bool keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t len = strlen(s);
    char *out = malloc(len * 3 + 1);
    if (!out)
        return NULL;
    char *o = out;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/');
        if (keep) {
            *o++ = (char)c;
        } else {
            *o++ = '%';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    *o = '\0';
    return out;
}

char *sbx_cli_url(const struct sbx_cli_target *t, const char *path, const char *const *query)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    fputs(t->base, f);
    fputs(path, f);
    bool first = true;
    bool ok = true;
    for (size_t i = 0; query && query[i]; i += 2) {
        if (!query[i + 1])
            continue;
        char *k = sbx_cli_escape(query[i], false);
        char *v = sbx_cli_escape(query[i + 1], true);
        if (!k || !v)
            ok = false;
        else
            fprintf(f, "%c%s=%s", first ? '?' : '&', k, v);
        first = false;
        free(k);
        free(v);
    }
    if (fclose(f) != 0 || !ok) {
        free(buf);
        return NULL;
    }
    return buf;
}

char *sbx_cli_task_path(const char *id, const char *suffix)
{
    cleanup_free char *e = sbx_cli_escape(id, false);
    char *out;
    if (!e || asprintf(&out, "/runtime/tasks/%s%s", e, suffix) < 0)
        return NULL;
    return out;
}
