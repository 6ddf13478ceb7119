/* Cgroups v1 (hybrid hosts): one directory per controller hierarchy. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/time.h"
#include "isolate/cgroup.h"
#include "isolate/cgroup_int.h"

static int limit_memory_v1(const char *dir, uint64_t bytes, sbx_err *err)
{
    if (cg_write_u64(dir, "memory.limit_in_bytes", bytes, err) < 0)
        return -1;
    /* memsw (memory + swap) exists only with swap accounting; without it a
     * sandbox could page out past its limit. It must not be below the memory
     * limit, hence written second. */
    if (cg_exists(dir, "memory.memsw.limit_in_bytes") &&
        cg_write_u64(dir, "memory.memsw.limit_in_bytes", bytes, err) < 0)
        return -1;
    (void)cg_write(dir, "memory.swappiness", "0", CG_OPTIONAL, NULL); /* best effort */
    /* v1 keeps TCP buffers out of memory.limit_in_bytes: without this one
     * sandbox could hold the host's whole tcp_mem in unread socket queues
     * (every TCP socket on the host stalls there). Capped at the memory
     * limit, the kernel makes the sandbox's senders wait instead. It must be
     * set before the first socket of the cgroup, which it is: nothing has
     * joined yet. (v2 charges socket memory to memory.max by itself.) */
    if (cg_exists(dir, "memory.kmem.tcp.limit_in_bytes") &&
        cg_write_u64(dir, "memory.kmem.tcp.limit_in_bytes", bytes, err) < 0)
        return -1;
    return 0;
}

int cg_create_v1(const struct sbx_cg_host *host, const char *name, const struct sbx_cg_limits *lim,
                 struct sbx_cgroup *cg, sbx_err *err)
{
    for (int c = 0; c < SBX_CGC_COUNT; c++) {
        if (!host->v1_has[c])
            continue;
        char path[SBX_CG_PATH_MAX];
        if (sbx_cg_child_path(host->v1_base[c], name, path, sizeof(path), err) < 0)
            return -1;
        if (!cg_v1_earlier(cg, c, path) && mkdir(path, 0755) < 0)
            return sbx_err_set(err, errno, "cgroup mkdir %s", path);
        memcpy(cg->path[c], path, sizeof(path));
    }
    const char *mem = cg->path[SBX_CGC_MEMORY], *pids = cg->path[SBX_CGC_PIDS];
    const char *cpu = cg->path[SBX_CGC_CPU];
    if (lim->memory_bytes && mem[0] && limit_memory_v1(mem, lim->memory_bytes, err) < 0)
        return -1;
    if (lim->pids && pids[0] && cg_write_u64(pids, "pids.max", lim->pids, err) < 0)
        return -1;
    if (lim->cpu_cores > 0 && cpu[0]) {
        if (cg_write_u64(cpu, "cpu.cfs_period_us", CG_CPU_PERIOD_US, err) < 0 ||
            cg_write_u64(cpu, "cpu.cfs_quota_us", cg_cpu_quota_us(lim->cpu_cores), err) < 0)
            return -1;
        cg->cpu_enforced = true;
    }
    return 0;
}

/* A memory limit changed on a live cgroup: memsw must never be below the
 * limit, so a rise writes memsw first and a fall writes the limit first.
 * bytes 0: unlimited ("-1"). */
static int relimit_memory_v1(const char *dir, uint64_t bytes, sbx_err *err)
{
    char v[32];
    snprintf(v, sizeof(v), bytes ? "%" PRIu64 : "-1", bytes);
    uint64_t cur = 0;
    bool memsw = cg_exists(dir, "memory.memsw.limit_in_bytes");
    bool rise = cg_read_u64(dir, "memory.limit_in_bytes", &cur) < 0 || !bytes || bytes >= cur;
    if (memsw && rise && cg_write(dir, "memory.memsw.limit_in_bytes", v, CG_REQUIRED, err) < 0)
        return -1;
    if (cg_write(dir, "memory.limit_in_bytes", v, CG_REQUIRED, err) < 0)
        return -1;
    if (memsw && !rise && cg_write(dir, "memory.memsw.limit_in_bytes", v, CG_REQUIRED, err) < 0)
        return -1;
    if (bytes)
        (void)cg_write(dir, "memory.swappiness", "0", CG_OPTIONAL, NULL);
    if (cg_exists(dir, "memory.kmem.tcp.limit_in_bytes") &&
        cg_write(dir, "memory.kmem.tcp.limit_in_bytes", v, CG_REQUIRED, err) < 0)
        return -1;
    return 0;
}

int cg_relimit_v1(struct sbx_cgroup *cg, const struct sbx_cg_limits *was,
                  const struct sbx_cg_limits *lim, sbx_err *err)
{
    const char *mem = cg->path[SBX_CGC_MEMORY], *pids = cg->path[SBX_CGC_PIDS];
    const char *cpu = cg->path[SBX_CGC_CPU];
    if (lim->memory_bytes != was->memory_bytes && mem[0] &&
        relimit_memory_v1(mem, lim->memory_bytes, err) < 0)
        return -1;
    if (lim->pids != was->pids && pids[0] &&
        (lim->pids ? cg_write_u64(pids, "pids.max", lim->pids, err)
                   : cg_write(pids, "pids.max", "max", CG_REQUIRED, err)) < 0)
        return -1;
    if (lim->cpu_cores != was->cpu_cores && cpu[0]) {
        if (lim->cpu_cores > 0 &&
            (cg_write_u64(cpu, "cpu.cfs_period_us", CG_CPU_PERIOD_US, err) < 0 ||
             cg_write_u64(cpu, "cpu.cfs_quota_us", cg_cpu_quota_us(lim->cpu_cores), err) < 0))
            return -1;
        if (!(lim->cpu_cores > 0) && cg_write(cpu, "cpu.cfs_quota_us", "-1", CG_REQUIRED, err) < 0)
            return -1;
        cg->cpu_enforced = lim->cpu_cores > 0;
    }
    return 0;
}

int cg_create_sub_v1(const struct sbx_cgroup *parent, const char *name, double cpu_cores,
                     struct sbx_cgroup *join, struct sbx_cgroup *own, sbx_err *err)
{
    if (!parent->path[SBX_CGC_CPU][0])
        return sbx_err_set(err, EOPNOTSUPP, "a task's own cgroup in a session: no v1 cpu");
    *join = *parent;
    memset(own, 0, sizeof(*own));
    own->mode = SBX_CG_V1;
    static const int ctrls[] = {SBX_CGC_CPU, SBX_CGC_CPUACCT};
    for (size_t i = 0; i < SBX_ARRAY_LEN(ctrls); i++) {
        int c = ctrls[i];
        if (!parent->path[c][0])
            continue;
        char path[SBX_CG_PATH_MAX];
        if (sbx_cg_child_path(parent->path[c], name, path, sizeof(path), err) < 0)
            goto fail;
        /* cpu and cpuacct are usually one hierarchy: one directory */
        if (!cg_v1_earlier(own, c, path) && mkdir(path, 0755) < 0) {
            sbx_err_set(err, errno, "cgroup mkdir %s", path);
            goto fail;
        }
        memcpy(own->path[c], path, sizeof(path));
        memcpy(join->path[c], path, sizeof(path));
    }
    const char *cpu = own->path[SBX_CGC_CPU];
    join->cpu_enforced = cpu_cores > 0;
    if (cpu_cores > 0 &&
        (cg_write_u64(cpu, "cpu.cfs_period_us", CG_CPU_PERIOD_US, err) < 0 ||
         cg_write_u64(cpu, "cpu.cfs_quota_us", cg_cpu_quota_us(cpu_cores), err) < 0))
        goto fail;
    return 0;
fail:
    (void)sbx_cgroup_remove(own, NULL);
    return -1;
}

int cg_freeze_v1(const char *dir, bool frozen, sbx_err *err)
{
    if (cg_write(dir, "freezer.state", frozen ? "FROZEN" : "THAWED", CG_REQUIRED, err) < 0)
        return -1;
    if (!frozen)
        return 0;
    /* Tasks stop asynchronously: the state reads FREEZING until all have. */
    cleanup_free char *state = NULL;
    if (cg_read(dir, "freezer.state", &state, err) < 0)
        return -1;
    if (strncmp(state, "FROZEN", 6) == 0)
        return 0;
    return sbx_err_set(err, EBUSY, "cgroup freezer.state in %s: not FROZEN yet", dir);
}

void cg_stats_v1(const struct sbx_cgroup *cg, struct sbx_cg_stats *st)
{
    const char *acct = cg->path[SBX_CGC_CPUACCT], *mem = cg->path[SBX_CGC_MEMORY];
    uint64_t v;
    if (acct[0] && cg_read_u64(acct, "cpuacct.usage", &v) == 0) {
        st->cpu_usec = v / 1000; /* ns */
        st->have_cpu = true;
    }
    if (mem[0] && cg_read_u64(mem, "memory.max_usage_in_bytes", &v) == 0) {
        st->peak_mem_bytes = v;
        st->have_mem = true;
        if (cg_read_u64(mem, "memory.usage_in_bytes", &v) == 0)
            st->mem_bytes = v;
        cleanup_free char *oom = NULL;
        if (cg_read(mem, "memory.oom_control", &oom, NULL) == 0 &&
            cg_keyed_u64(oom, "oom_kill", &v) == 0) /* absent before 4.13 */
            st->oom_kills = v;
    }
}
