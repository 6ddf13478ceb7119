/* The aggregate caps on the "sandboxd/" bases (cgroup.h, sbx_cg_totals). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "isolate/cgroup.h"
#include "isolate/cgroup_int.h"

/* Above this a v1 memory.limit_in_bytes means "no limit" (the kernel's
 * PAGE_COUNTER_MAX rounded). */
#define V1_MEMORY_UNLIMITED (1ull << 62)

void sbx_cg_host_read_totals(const struct sbx_cg_host *host, struct sbx_cg_limits *now)
{
    *now = (struct sbx_cg_limits){0};
    uint64_t v;
    if (host->mode == SBX_CG_V2) {
        const char *b = host->v2_base;
        if (cg_read_u64(b, "memory.max", &v) == 0)
            now->memory_bytes = v;
        if (cg_read_u64(b, "pids.max", &v) == 0)
            now->pids = v;
        cleanup_free char *cpu = NULL;
        uint64_t quota, period;
        if (cg_read(b, "cpu.max", &cpu, NULL) == 0 &&
            sscanf(cpu, "%" SCNu64 " %" SCNu64, &quota, &period) == 2 && period)
            now->cpu_cores = (double)quota / (double)period;
    } else if (host->mode == SBX_CG_V1) {
        if (host->v1_has[SBX_CGC_MEMORY] &&
            cg_read_u64(host->v1_base[SBX_CGC_MEMORY], "memory.limit_in_bytes", &v) == 0 &&
            v < V1_MEMORY_UNLIMITED)
            now->memory_bytes = v;
        if (host->v1_has[SBX_CGC_PIDS] &&
            cg_read_u64(host->v1_base[SBX_CGC_PIDS], "pids.max", &v) == 0)
            now->pids = v;
        cleanup_free char *q = NULL;
        uint64_t period;
        long long quota;
        const char *cpu = host->v1_base[SBX_CGC_CPU];
        if (host->v1_has[SBX_CGC_CPU] && cg_read(cpu, "cpu.cfs_quota_us", &q, NULL) == 0 &&
            sscanf(q, "%lld", &quota) == 1 && quota > 0 &&
            cg_read_u64(cpu, "cpu.cfs_period_us", &period) == 0 && period)
            now->cpu_cores = (double)quota / (double)period;
    }
}

/* One cap: ok, or why not into out (the first failure only). */
static void note(struct sbx_cg_totals *out, bool *ok, int rc, const char *what, const sbx_err *e)
{
    *ok = rc == 0;
    if (rc < 0 && !out->why[0])
        snprintf(out->why, sizeof(out->why), "%s: %.200s", what, e->msg);
}

/* A file's text without its trailing newline ("" when unreadable). */
static void read_line(const char *path, char *out, size_t len)
{
    cleanup_free char *text = NULL;
    out[0] = '\0';
    if (cg_read_text(path, &text, NULL) < 0)
        return;
    snprintf(out, len, "%s", text);
    out[strcspn(out, "\n")] = '\0';
}

/* Write one cap, keeping what the file held before (when it could be read:
 * a value unknown is never "restored"). */
static int cap_write(struct sbx_cg_totals *out, const char *dir, const char *file,
                     const char *value, sbx_err *err)
{
    char path[PATH_MAX], before[64];
    if (cg_join(path, sizeof(path), dir, file) < 0)
        return sbx_err_set(err, ENAMETOOLONG, "cgroup %s in %s", file, dir);
    read_line(path, before, sizeof(before));
    if (cg_write(dir, file, value, CG_REQUIRED, err) < 0)
        return -1;
    if (before[0] && out->n_saved < SBX_CG_SAVED_MAX) {
        struct sbx_cg_saved *v = &out->saved[out->n_saved++];
        snprintf(v->dir, sizeof(v->dir), "%s", dir);
        v->file = file;
        snprintf(v->before, sizeof(v->before), "%s", before);
        read_line(path, v->wrote, sizeof(v->wrote));
    }
    return 0;
}

static int cap_write_u64(struct sbx_cg_totals *out, const char *dir, const char *file, uint64_t v,
                         sbx_err *err)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%" PRIu64, v);
    return cap_write(out, dir, file, buf, err);
}

int sbx_cg_host_restore_totals(struct sbx_cg_totals *t, sbx_err *err)
{
    int restored = 0, rc = 0;
    while (t->n_saved) {
        const struct sbx_cg_saved *v = &t->saved[--t->n_saved];
        char path[PATH_MAX], now[64];
        if (cg_join(path, sizeof(path), v->dir, v->file) < 0)
            continue;
        read_line(path, now, sizeof(now));
        if (strcmp(now, v->wrote) != 0 || strcmp(now, v->before) == 0)
            continue;
        sbx_err e = {0};
        if (cg_write(v->dir, v->file, v->before, CG_OPTIONAL, &e) == 0)
            restored++;
        else if (rc == 0)
            rc = cg_pass_err(err, &e);
    }
    return rc < 0 ? -1 : restored;
}

void sbx_cg_host_set_totals(const struct sbx_cg_host *host, const struct sbx_cg_limits *want,
                            struct sbx_cg_totals *out)
{
    *out = (struct sbx_cg_totals){.want = *want};
    sbx_err e = {0};
    if (host->mode == SBX_CG_RLIMIT) {
        snprintf(out->why, sizeof(out->why), "no writable cgroups (%.200s)", host->why);
        return;
    }
    char cpu[48];
    snprintf(cpu, sizeof(cpu), "%" PRIu64 " %d", cg_cpu_quota_us(want->cpu_cores),
             CG_CPU_PERIOD_US);
    if (host->mode == SBX_CG_V2) {
        const char *b = host->v2_base;
        if (want->memory_bytes)
            note(out, &out->memory_ok, cap_write_u64(out, b, "memory.max", want->memory_bytes, &e),
                 "memory", &e);
        if (want->pids)
            note(out, &out->pids_ok, cap_write_u64(out, b, "pids.max", want->pids, &e), "pids", &e);
        if (want->cpu_cores > 0)
            note(out, &out->cpu_ok, cap_write(out, b, "cpu.max", cpu, &e), "cpu", &e);
    } else {
        const char *mem = host->v1_has[SBX_CGC_MEMORY] ? host->v1_base[SBX_CGC_MEMORY] : NULL;
        const char *pids = host->v1_has[SBX_CGC_PIDS] ? host->v1_base[SBX_CGC_PIDS] : NULL;
        const char *c = host->v1_has[SBX_CGC_CPU] ? host->v1_base[SBX_CGC_CPU] : NULL;
        if (want->memory_bytes)
            note(out, &out->memory_ok,
                 mem ? cap_write_u64(out, mem, "memory.limit_in_bytes", want->memory_bytes, &e)
                     : sbx_err_set(&e, ENOENT, "no memory hierarchy"),
                 "memory", &e);
        if (want->pids)
            note(out, &out->pids_ok,
                 pids ? cap_write_u64(out, pids, "pids.max", want->pids, &e)
                      : sbx_err_set(&e, ENOENT, "no pids hierarchy"),
                 "pids", &e);
        /* A sandbox's quota may not be above its parent's (v1): the
         * configured maximum per sandbox is kept at or below the total. */
        if (want->cpu_cores > 0)
            note(out, &out->cpu_ok,
                 c ? (cap_write_u64(out, c, "cpu.cfs_period_us", CG_CPU_PERIOD_US, &e) < 0
                          ? -1
                          : cap_write_u64(out, c, "cpu.cfs_quota_us",
                                          cg_cpu_quota_us(want->cpu_cores), &e))
                   : sbx_err_set(&e, ENOENT, "no cpu hierarchy"),
                 "cpu", &e);
    }
    sbx_cg_host_read_totals(host, &out->now);
}
