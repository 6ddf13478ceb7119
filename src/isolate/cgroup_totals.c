/* The aggregate caps on the "sandboxd/" bases (cgroup.h, sbx_cg_totals). */
#include <inttypes.h>
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
            note(out, &out->memory_ok, cg_write_u64(b, "memory.max", want->memory_bytes, &e),
                 "memory", &e);
        if (want->pids)
            note(out, &out->pids_ok, cg_write_u64(b, "pids.max", want->pids, &e), "pids", &e);
        if (want->cpu_cores > 0)
            note(out, &out->cpu_ok, cg_write(b, "cpu.max", cpu, CG_REQUIRED, &e), "cpu", &e);
    } else {
        const char *mem = host->v1_has[SBX_CGC_MEMORY] ? host->v1_base[SBX_CGC_MEMORY] : NULL;
        const char *pids = host->v1_has[SBX_CGC_PIDS] ? host->v1_base[SBX_CGC_PIDS] : NULL;
        const char *c = host->v1_has[SBX_CGC_CPU] ? host->v1_base[SBX_CGC_CPU] : NULL;
        if (want->memory_bytes)
            note(out, &out->memory_ok,
                 mem ? cg_write_u64(mem, "memory.limit_in_bytes", want->memory_bytes, &e)
                     : sbx_err_set(&e, ENOENT, "no memory hierarchy"),
                 "memory", &e);
        if (want->pids)
            note(out, &out->pids_ok,
                 pids ? cg_write_u64(pids, "pids.max", want->pids, &e)
                      : sbx_err_set(&e, ENOENT, "no pids hierarchy"),
                 "pids", &e);
        /* A sandbox's quota may not be above its parent's (v1): the
         * configured maximum per sandbox is kept at or below the total. */
        if (want->cpu_cores > 0)
            note(out, &out->cpu_ok,
                 c ? (cg_write_u64(c, "cpu.cfs_period_us", CG_CPU_PERIOD_US, &e) < 0
                          ? -1
                          : cg_write_u64(c, "cpu.cfs_quota_us", cg_cpu_quota_us(want->cpu_cores),
                                         &e))
                   : sbx_err_set(&e, ENOENT, "no cpu hierarchy"),
                 "cpu", &e);
    }
    sbx_cg_host_read_totals(host, &out->now);
}
