#include "base/metrics.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct series {
    struct series *next;
    char *labels; /* rendered: a="x",b="y" (may be "") */
    double value; /* counters, gauges; a histogram's sum */
    uint64_t count;
    uint64_t *buckets; /* histograms: per bucket (not cumulative), then +Inf */
};

struct family {
    const struct sbx_metric *m;
    struct series *series; /* in order of their first value */
};

struct collector {
    sbx_metrics_collect_fn fn;
    void *ud;
};

static struct {
    struct family *fam;
    size_t n, cap;
    struct collector *col;
    size_t ncol;
    bool tenant_label;
} reg;

static struct family *family_of(const struct sbx_metric *m)
{
    for (size_t i = 0; i < reg.n; i++)
        if (reg.fam[i].m == m)
            return &reg.fam[i];
    if (reg.n == reg.cap) {
        size_t cap = reg.cap ? reg.cap * 2 : 32;
        struct family *grown = realloc(reg.fam, cap * sizeof(*grown));
        if (!grown)
            return NULL;
        reg.fam = grown;
        reg.cap = cap;
    }
    struct family *f = &reg.fam[reg.n++];
    *f = (struct family){.m = m};
    return f;
}

/* A label value as the text format wants it: \\, \" and \n escaped. */
static void put_escaped(FILE *out, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            fputc('\\', out), fputc(*v, out);
        else if (*v == '\n')
            fputs("\\n", out);
        else
            fputc(*v, out);
    }
}

static char *labels_text(const struct sbx_metric *m, va_list ap)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    if (!out)
        return NULL;
    bool first = true;
    for (unsigned i = 0; i < SBX_METRIC_MAX_LABELS && m->labels[i]; i++) {
        const char *v = va_arg(ap, const char *);
        if (!v)
            continue;
        fprintf(out, "%s%s=\"", first ? "" : ",", m->labels[i]);
        put_escaped(out, v);
        fputc('"', out);
        first = false;
    }
    if (fclose(out) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

static struct series *series_of(const struct sbx_metric *m, va_list ap)
{
    struct family *f = family_of(m);
    char *labels = f ? labels_text(m, ap) : NULL;
    if (!labels)
        return NULL;
    struct series **tail = &f->series;
    for (; *tail; tail = &(*tail)->next)
        if (strcmp((*tail)->labels, labels) == 0) {
            free(labels);
            return *tail;
        }
    struct series *s = calloc(1, sizeof(*s));
    if (s && m->kind == SBX_METRIC_HISTOGRAM &&
        !(s->buckets = calloc(m->nbuckets + 1, sizeof(uint64_t)))) {
        free(s);
        s = NULL;
    }
    if (!s) {
        free(labels);
        return NULL;
    }
    s->labels = labels;
    *tail = s;
    return s;
}

void sbx_metric_add(const struct sbx_metric *m, double v, ...)
{
    va_list ap;
    va_start(ap, v);
    struct series *s = series_of(m, ap);
    va_end(ap);
    if (s)
        s->value += v;
}

void sbx_metric_set(const struct sbx_metric *m, double v, ...)
{
    va_list ap;
    va_start(ap, v);
    struct series *s = series_of(m, ap);
    va_end(ap);
    if (s)
        s->value = v;
}

void sbx_metric_observe(const struct sbx_metric *m, double v, ...)
{
    va_list ap;
    va_start(ap, v);
    struct series *s = series_of(m, ap);
    va_end(ap);
    if (!s || !s->buckets)
        return;
    unsigned b = 0;
    while (b < m->nbuckets && v > m->buckets[b])
        b++;
    s->buckets[b]++;
    s->count++;
    s->value += v;
}

void sbx_metric_declare(const struct sbx_metric *m)
{
    struct family *f = family_of(m);
    if (f && !f->series && !m->labels[0]) {
        /* No labels: one series, shown at 0 from the start. */
        sbx_metric_add(m, 0);
    }
}

void sbx_metrics_collector(sbx_metrics_collect_fn fn, void *ud)
{
    struct collector *grown = realloc(reg.col, (reg.ncol + 1) * sizeof(*grown));
    if (!grown)
        return;
    reg.col = grown;
    reg.col[reg.ncol++] = (struct collector){fn, ud};
}

void sbx_metrics_collector_remove(sbx_metrics_collect_fn fn, void *ud)
{
    for (size_t i = 0; i < reg.ncol; i++)
        if (reg.col[i].fn == fn && reg.col[i].ud == ud) {
            memmove(&reg.col[i], &reg.col[i + 1], (reg.ncol - i - 1) * sizeof(*reg.col));
            reg.ncol--;
            return;
        }
}

void sbx_metrics_set_tenant_label(bool on)
{
    reg.tenant_label = on;
}

const char *sbx_metrics_tenant(const char *tenant)
{
    return reg.tenant_label ? tenant : NULL;
}

static const char *kind_name(enum sbx_metric_kind k)
{
    return k == SBX_METRIC_COUNTER ? "counter" : k == SBX_METRIC_GAUGE ? "gauge" : "histogram";
}

static void put_sample(FILE *out, const char *name, const char *suffix, const char *labels,
                       const char *extra, double v)
{
    bool any = labels[0] || extra;
    fprintf(out, "%s%s%s%s%s%s%s %.17g\n", name, suffix, any ? "{" : "", labels,
            labels[0] && extra ? "," : "", extra ? extra : "", any ? "}" : "", v);
}

static void render_family(FILE *out, const struct family *f)
{
    const struct sbx_metric *m = f->m;
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name, kind_name(m->kind));
    for (const struct series *s = f->series; s; s = s->next) {
        if (m->kind != SBX_METRIC_HISTOGRAM) {
            put_sample(out, m->name, "", s->labels, NULL, s->value);
            continue;
        }
        uint64_t cum = 0;
        char le[64];
        for (unsigned b = 0; b <= m->nbuckets; b++) {
            cum += s->buckets[b];
            if (b < m->nbuckets)
                snprintf(le, sizeof(le), "le=\"%.6g\"", m->buckets[b]);
            else
                snprintf(le, sizeof(le), "le=\"+Inf\"");
            put_sample(out, m->name, "_bucket", s->labels, le, (double)cum);
        }
        put_sample(out, m->name, "_sum", s->labels, NULL, s->value);
        put_sample(out, m->name, "_count", s->labels, NULL, (double)s->count);
    }
}

/* The process's own gauges, under the names Prometheus clients use. */
static void render_process(FILE *out)
{
    long page = sysconf(_SC_PAGESIZE);
    unsigned long long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "re");
    if (f) {
        if (fscanf(f, "%llu %llu", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    fprintf(out,
            "# HELP process_resident_memory_bytes Resident memory of the daemon.\n"
            "# TYPE process_resident_memory_bytes gauge\n"
            "process_resident_memory_bytes %llu\n",
            resident * (unsigned long long)(page > 0 ? page : 4096));
    long fds = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (e->d_name[0] != '.')
                fds++;
        closedir(d);
        fds--; /* the directory's own fd */
    }
    fprintf(out,
            "# HELP process_open_fds Open file descriptors of the daemon.\n"
            "# TYPE process_open_fds gauge\n"
            "process_open_fds %ld\n",
            fds);
}

char *sbx_metrics_render(size_t *len)
{
    for (size_t i = 0; i < reg.ncol; i++)
        reg.col[i].fn(reg.col[i].ud);
    char *buf = NULL;
    size_t n = 0;
    FILE *out = open_memstream(&buf, &n);
    if (!out)
        return NULL;
    for (size_t i = 0; i < reg.n; i++)
        render_family(out, &reg.fam[i]);
    render_process(out);
    if (fclose(out) != 0) {
        free(buf);
        return NULL;
    }
    if (len)
        *len = n;
    return buf;
}

void sbx_metrics_reset(void)
{
    for (size_t i = 0; i < reg.n; i++) {
        for (struct series *s = reg.fam[i].series, *next; s; s = next) {
            next = s->next;
            free(s->labels);
            free(s->buckets);
            free(s);
        }
    }
    free(reg.fam);
    free(reg.col);
    reg.fam = NULL;
    reg.col = NULL;
    reg.n = reg.cap = reg.ncol = 0;
}
