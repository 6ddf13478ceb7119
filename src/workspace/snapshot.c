#include "workspace/snapshot.h"

#include "base/parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER "sbx-manifest 1\n"

int sbx_snap_add(struct sbx_snap_manifest *m, const char *path, enum sbx_snap_type type,
                 unsigned mode, uint64_t size, const char *hash, const char *target, sbx_err *err)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        struct sbx_snap_entry *e = realloc(m->e, cap * sizeof(*e));
        if (!e)
            return sbx_err_set(err, ENOMEM, "manifest");
        m->e = e;
        m->cap = cap;
    }
    struct sbx_snap_entry *e = &m->e[m->n];
    *e = (struct sbx_snap_entry){.type = type, .mode = mode & 07777, .size = size};
    if (hash)
        snprintf(e->hash, sizeof(e->hash), "%s", hash);
    e->path = strdup(path);
    e->target = target ? strdup(target) : NULL;
    if (!e->path || (target && !e->target)) {
        free(e->path);
        free(e->target);
        return sbx_err_set(err, ENOMEM, "manifest");
    }
    m->n++;
    return 0;
}

static int by_path(const void *a, const void *b)
{
    return strcmp(((const struct sbx_snap_entry *)a)->path,
                  ((const struct sbx_snap_entry *)b)->path);
}

void sbx_snap_sort(struct sbx_snap_manifest *m)
{
    if (m->n > 1)
        qsort(m->e, m->n, sizeof(*m->e), by_path);
}

void sbx_snap_free(struct sbx_snap_manifest *m)
{
    for (size_t i = 0; i < m->n; i++) {
        free(m->e[i].path);
        free(m->e[i].target);
    }
    free(m->e);
    *m = (struct sbx_snap_manifest){0};
}

const struct sbx_snap_entry *sbx_snap_find(const struct sbx_snap_manifest *m, const char *path)
{
    struct sbx_snap_entry key = {.path = (char *)path};
    return m->n ? bsearch(&key, m->e, m->n, sizeof(*m->e), by_path) : NULL;
}

static bool must_escape(unsigned char c)
{
    return c <= 0x20 || c == 0x7f || c == '%';
}

void sbx_snap_escape(const char *s, char *out)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (must_escape(*p)) {
            *out++ = '%';
            *out++ = hex[*p >> 4];
            *out++ = hex[*p & 15];
        } else {
            *out++ = (char)*p;
        }
    }
    *out = '\0';
}

bool sbx_snap_unescape(char *s)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        if (*p != '%') {
            if (must_escape((unsigned char)*p))
                return false;
            *o++ = *p;
            continue;
        }
        int hi = sbx_hex_digit(p[1]), lo = hi < 0 ? -1 : sbx_hex_digit(p[2]);
        if (lo < 0 || (hi == 0 && lo == 0))
            return false;
        *o++ = (char)(hi << 4 | lo);
        p += 2;
    }
    *o = '\0';
    return true;
}

int sbx_snap_format(struct sbx_snap_manifest *m, char **out, size_t *len, sbx_err *err)
{
    sbx_snap_sort(m);
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (!f)
        return sbx_err_set(err, ENOMEM, "manifest");
    fputs(HEADER, f);
    for (size_t i = 0; i < m->n; i++) {
        const struct sbx_snap_entry *e = &m->e[i];
        char *p = malloc(3 * strlen(e->path) + 1);
        char *t = e->target ? malloc(3 * strlen(e->target) + 1) : NULL;
        if (!p || (e->target && !t)) {
            free(p);
            free(t);
            fclose(f);
            free(buf);
            return sbx_err_set(err, ENOMEM, "manifest");
        }
        sbx_snap_escape(e->path, p);
        if (t)
            sbx_snap_escape(e->target, t);
        fprintf(f, "%c %04o %llu %s %s%s%s\n", (char)e->type, e->mode, (unsigned long long)e->size,
                e->hash[0] ? e->hash : "-", p, t ? " " : "", t ? t : "");
        free(p);
        free(t);
    }
    if (fclose(f) != 0) {
        free(buf);
        return sbx_err_set(err, ENOMEM, "manifest");
    }
    *out = buf;
    *len = size;
    return 0;
}

static bool is_hex64(const char *s)
{
    size_t i = 0;
    for (; s[i]; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return i == SBX_SNAP_ID_LEN;
}

bool sbx_snap_id_valid(const char *s)
{
    return s && is_hex64(s);
}

/* One line, split at blanks into at most 6 fields (modified in place). */
static int parse_line(char *line, struct sbx_snap_manifest *m, size_t lineno, sbx_err *err)
{
    char *f[6];
    size_t n = 0;
    for (char *save = NULL, *t = strtok_r(line, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        if (n == SBX_ARRAY_LEN(f))
            return sbx_err_set(err, EINVAL, "manifest line %zu: too many fields", lineno);
        f[n++] = t;
    }
    if (n < 5 || strlen(f[0]) != 1)
        return sbx_err_set(err, EINVAL, "manifest line %zu: too few fields", lineno);
    enum sbx_snap_type type = (enum sbx_snap_type)f[0][0];
    bool has_target = type == SBX_SNAP_SYMLINK || type == SBX_SNAP_LINK;
    bool has_hash = type == SBX_SNAP_FILE || type == SBX_SNAP_LINK;
    if (type != SBX_SNAP_FILE && type != SBX_SNAP_DIR && type != SBX_SNAP_SYMLINK &&
        type != SBX_SNAP_LINK)
        return sbx_err_set(err, EINVAL, "manifest line %zu: unknown kind", lineno);
    char *end;
    unsigned long mode = strtoul(f[1], &end, 8);
    bool bad = *end || strlen(f[1]) != 4;
    unsigned long long size = strtoull(f[2], &end, 10);
    if (*end || bad || f[2][0] == '-' || mode > 07777 || (has_target ? n != 6 : n != 5) ||
        (has_hash ? !is_hex64(f[3]) : strcmp(f[3], "-") != 0) || !sbx_snap_unescape(f[4]) ||
        !f[4][0] || (has_target && (!sbx_snap_unescape(f[5]) || !f[5][0])))
        return sbx_err_set(err, EINVAL, "manifest line %zu: bad field", lineno);
    if (m->n && strcmp(m->e[m->n - 1].path, f[4]) >= 0)
        return sbx_err_set(err, EINVAL, "manifest line %zu: not in order", lineno);
    if (type == SBX_SNAP_LINK) {
        /* The first path of the link sorts before it and is a plain file. */
        struct sbx_snap_manifest before = {.e = m->e, .n = m->n};
        const struct sbx_snap_entry *first = sbx_snap_find(&before, f[5]);
        if (!first || first->type != SBX_SNAP_FILE || strcmp(first->hash, f[3]) != 0)
            return sbx_err_set(err, EINVAL, "manifest line %zu: a link to no earlier file", lineno);
    }
    return sbx_snap_add(m, f[4], type, (unsigned)mode, size, has_hash ? f[3] : NULL,
                        has_target ? f[5] : NULL, err);
}

int sbx_snap_parse(const char *text, size_t len, struct sbx_snap_manifest *m, sbx_err *err)
{
    *m = (struct sbx_snap_manifest){0};
    if (len < strlen(HEADER) || memcmp(text, HEADER, strlen(HEADER)) != 0)
        return sbx_err_set(err, EINVAL, "manifest: no header");
    if (memchr(text, '\0', len))
        return sbx_err_set(err, EINVAL, "manifest: a NUL byte");
    size_t lineno = 1;
    for (size_t pos = strlen(HEADER); pos < len;) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        lineno++;
        if (!nl) {
            sbx_snap_free(m);
            return sbx_err_set(err, EINVAL, "manifest line %zu: not ended", lineno);
        }
        char *line = strndup(text + pos, (size_t)(nl - (text + pos)));
        if (!line) {
            sbx_snap_free(m);
            return sbx_err_set(err, ENOMEM, "manifest");
        }
        int rc = parse_line(line, m, lineno, err);
        free(line);
        if (rc < 0) {
            sbx_snap_free(m);
            return -1;
        }
        pos = (size_t)(nl - text) + 1;
    }
    return 0;
}

int sbx_snap_id(const char *text, size_t len, char id[SBX_SHA256_HEX_SIZE], sbx_err *err)
{
    return sbx_sha256_hex(text, len, id, err);
}

void sbx_snap_totals(const struct sbx_snap_manifest *m, uint64_t *files, uint64_t *bytes)
{
    *files = *bytes = 0;
    for (size_t i = 0; i < m->n; i++)
        if (m->e[i].type != SBX_SNAP_DIR) {
            ++*files;
            *bytes += m->e[i].size;
        }
}

static bool same(const struct sbx_snap_entry *a, const struct sbx_snap_entry *b)
{
    bool fa = a->type == SBX_SNAP_FILE || a->type == SBX_SNAP_LINK;
    bool fb = b->type == SBX_SNAP_FILE || b->type == SBX_SNAP_LINK;
    if (fa && fb)
        return a->mode == b->mode && strcmp(a->hash, b->hash) == 0;
    if (a->type != b->type || a->mode != b->mode)
        return false;
    return a->type != SBX_SNAP_SYMLINK || strcmp(a->target, b->target) == 0;
}

int sbx_snap_diff(const struct sbx_snap_manifest *a, const struct sbx_snap_manifest *b,
                  sbx_snap_diff_fn fn, void *ud)
{
    size_t i = 0, j = 0;
    while (i < a->n || j < b->n) {
        int c = i == a->n ? 1 : j == b->n ? -1 : strcmp(a->e[i].path, b->e[j].path);
        int rc = 0;
        if (c < 0)
            rc = fn(ud, SBX_SNAP_DELETED, &a->e[i++], NULL);
        else if (c > 0)
            rc = fn(ud, SBX_SNAP_ADDED, NULL, &b->e[j++]);
        else if (!same(&a->e[i++], &b->e[j++]))
            rc = fn(ud, SBX_SNAP_MODIFIED, &a->e[i - 1], &b->e[j - 1]);
        if (rc < 0)
            return rc;
    }
    return 0;
}

struct blob_ref {
    const char *hash;
    uint64_t size;
};

static int by_hash(const void *a, const void *b)
{
    return strcmp(((const struct blob_ref *)a)->hash, ((const struct blob_ref *)b)->hash);
}

int sbx_snap_unique_bytes(const struct sbx_snap_manifest *const *m, size_t n, uint64_t *bytes,
                          sbx_err *err)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += m[i]->n;
    *bytes = 0;
    if (!total)
        return 0;
    struct blob_ref *r = malloc(total * sizeof(*r));
    if (!r)
        return sbx_err_set(err, ENOMEM, "retention");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < m[i]->n; j++)
            if (m[i]->e[j].type == SBX_SNAP_FILE)
                r[k++] = (struct blob_ref){m[i]->e[j].hash, m[i]->e[j].size};
    if (k)
        qsort(r, k, sizeof(*r), by_hash);
    for (size_t i = 0; i < k; i++)
        if (i == 0 || strcmp(r[i].hash, r[i - 1].hash) != 0)
            *bytes += r[i].size;
    free(r);
    return 0;
}

/* What the snapshots not (yet) dropped take. */
static int kept_bytes_of(const struct sbx_snap_keep *s, size_t n, uint64_t *bytes, sbx_err *err)
{
    const struct sbx_snap_manifest **m = calloc(n ? n : 1, sizeof(*m));
    if (!m)
        return sbx_err_set(err, ENOMEM, "retention");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!s[i].drop)
            m[k++] = s[i].man;
    int rc = sbx_snap_unique_bytes(m, k, bytes, err);
    free(m);
    return rc;
}

int sbx_snap_retain(struct sbx_snap_keep *s, size_t n, const struct sbx_snap_limits *lim,
                    int64_t now_ms, uint64_t *kept_bytes, sbx_err *err)
{
    for (;;) {
        size_t kept = 0, oldest = n;
        for (size_t i = 0; i < n; i++) {
            if (s[i].drop)
                continue;
            kept++;
            if (!s[i].current && (oldest == n || s[i].timestamp_ms < s[oldest].timestamp_ms))
                oldest = i;
        }
        uint64_t bytes;
        if (kept_bytes_of(s, n, &bytes, err) < 0)
            return -1;
        *kept_bytes = bytes;
        if (oldest == n)
            return 0; /* only the current one is left */
        bool over = (lim->max_count && kept > lim->max_count) ||
                    (lim->max_age_ms && now_ms - s[oldest].timestamp_ms > lim->max_age_ms) ||
                    (lim->max_bytes && bytes > lim->max_bytes);
        if (!over)
            return 0;
        s[oldest].drop = true;
    }
}
