/* Cgroups v2: one directory in the unified hierarchy. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/time.h"
#include "isolate/cgroup.h"
#include "isolate/cgroup_int.h"

/* "quota period" for cpu.max: cores of CPU time every period, or no quota. */
static void cpu_max(char *buf, size_t len, double cores)
{
    if (cores > 0)
        snprintf(buf, len, "%" PRIu64 " %d", cg_cpu_quota_us(cores), CG_CPU_PERIOD_US);
    else
        snprintf(buf, len, "max %d", CG_CPU_PERIOD_US);
}

int cg_create_v2(const struct sbx_cg_host *host, const char *name, const struct sbx_cg_limits *lim,
                 struct sbx_cgroup *cg, sbx_err *err)
{
    char path[SBX_CG_PATH_MAX];
    if (sbx_cg_child_path(host->v2_base, name, path, sizeof(path), err) < 0)
        return -1;
    if (mkdir(path, 0755) < 0)
        return sbx_err_set(err, errno, "cgroup mkdir %s", path);
    memcpy(cg->v2_path, path, sizeof(path));
    if (lim->memory_bytes) {
        if (cg_write_u64(path, "memory.max", lim->memory_bytes, err) < 0)
            return -1;
        /* No memory.swap.max without swap accounting: then there is no swap to limit. */
        sbx_err e = {0};
        if (cg_write(path, "memory.swap.max", "0", CG_OPTIONAL, &e) < 0 && e.errnum != ENOENT)
            return cg_pass_err(err, &e);
    }
    if (lim->pids && cg_write_u64(path, "pids.max", lim->pids, err) < 0)
        return -1;
    if (lim->cpu_cores > 0) {
        char buf[48];
        cpu_max(buf, sizeof(buf), lim->cpu_cores);
        if (cg_write(path, "cpu.max", buf, CG_REQUIRED, err) < 0)
            return -1;
        cg->cpu_enforced = true;
    }
    return 0;
}

int cg_relimit_v2(struct sbx_cgroup *cg, const struct sbx_cg_limits *was,
                  const struct sbx_cg_limits *lim, sbx_err *err)
{
    const char *path = cg->v2_path;
    char buf[48];
    if (lim->memory_bytes != was->memory_bytes) {
        snprintf(buf, sizeof(buf), lim->memory_bytes ? "%" PRIu64 : "max", lim->memory_bytes);
        if (cg_write(path, "memory.max", buf, CG_REQUIRED, err) < 0)
            return -1;
        sbx_err e = {0};
        if (lim->memory_bytes && cg_write(path, "memory.swap.max", "0", CG_OPTIONAL, &e) < 0 &&
            e.errnum != ENOENT)
            return cg_pass_err(err, &e);
    }
    if (lim->pids != was->pids) {
        snprintf(buf, sizeof(buf), lim->pids ? "%" PRIu64 : "max", lim->pids);
        if (cg_write(path, "pids.max", buf, CG_REQUIRED, err) < 0)
            return -1;
    }
    if (lim->cpu_cores != was->cpu_cores) {
        cpu_max(buf, sizeof(buf), lim->cpu_cores);
        if (cg_write(path, "cpu.max", buf, CG_REQUIRED, err) < 0)
            return -1;
        cg->cpu_enforced = lim->cpu_cores > 0;
    }
    return 0;
}

int cg_freeze_v2(const char *dir, bool frozen, sbx_err *err)
{
    sbx_err e = {0};
    if (cg_write(dir, "cgroup.freeze", frozen ? "1" : "0", CG_REQUIRED, &e) < 0)
        return e.errnum == ENOENT ? 0 /* kernel before 5.2: no v2 freezer */ : cg_pass_err(err, &e);
    if (!frozen)
        return 0;
    cleanup_free char *events = NULL;
    uint64_t v;
    if (cg_read(dir, "cgroup.events", &events, NULL) < 0)
        return 0; /* nothing to wait on */
    if (cg_keyed_u64(events, "frozen", &v) < 0 || v == 1)
        return 0;
    return sbx_err_set(err, EBUSY, "cgroup cgroup.freeze in %s: not frozen yet", dir);
}

void cg_stats_v2(const char *dir, struct sbx_cg_stats *st)
{
    uint64_t v;
    cleanup_free char *cpu = NULL;
    if (cg_read(dir, "cpu.stat", &cpu, NULL) == 0 && cg_keyed_u64(cpu, "usage_usec", &v) == 0) {
        st->cpu_usec = v;
        st->have_cpu = true;
    }
    /* memory.peak appeared in 5.19; before that the current usage is the best left. */
    if (cg_read_u64(dir, "memory.peak", &v) == 0 || cg_read_u64(dir, "memory.current", &v) == 0) {
        st->peak_mem_bytes = v;
        st->have_mem = true;
    }
    if (cg_read_u64(dir, "memory.current", &v) == 0)
        st->mem_bytes = v;
    cleanup_free char *events = NULL;
    if (cg_read(dir, "memory.events", &events, NULL) == 0 &&
        cg_keyed_u64(events, "oom_kill", &v) == 0)
        st->oom_kills = v;
}

/* a pooled sandbox waiting for its command holds init alone */
#define CG_SPLIT_PROCS_MAX 8

int sbx_cgroup_split(struct sbx_cgroup *cg, sbx_err *err)
{
    if (!cg)
        return sbx_err_set(err, EINVAL, "cgroup split: missing argument");
    if (cg->mode != SBX_CG_V2 || !cg->v2_path[0])
        return sbx_err_set(err, EOPNOTSUPP, "cgroup split: v2 only");
    if (!cg_exists(cg->v2_path, "cgroup.kill"))
        return sbx_err_set(err, EOPNOTSUPP, "cgroup split: no cgroup.kill (kernel before 5.14)");
    char leaf[SBX_CG_PATH_MAX];
    if (sbx_cg_child_path(cg->v2_path, "init", leaf, sizeof(leaf), err) < 0)
        return -1;
    if (mkdir(leaf, 0755) < 0)
        return sbx_err_set(err, errno, "cgroup mkdir %s", leaf);
    memcpy(cg->v2_leaf, leaf, sizeof(leaf));
    cg->subs = true;
    /* A live sandbox's processes (a pooled one's init, taken for a
     * session) go to the leaf first: a cgroup that holds processes gives
     * its children no controller. One that exits meanwhile is ESRCH. */
    pid_t pids[CG_SPLIT_PROCS_MAX];
    size_t n;
    if (cg_read_procs(cg->v2_path, pids, SBX_ARRAY_LEN(pids), &n, err) < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        char pid[24];
        sbx_err e = {0};
        snprintf(pid, sizeof(pid), "%d", (int)pids[i]);
        if (cg_write(leaf, "cgroup.procs", pid, CG_REQUIRED, &e) < 0 && e.errnum != ESRCH) {
            if (err)
                *err = e;
            return -1;
        }
    }
    return cg_write(cg->v2_path, "cgroup.subtree_control", CG_V2_ENABLE, CG_REQUIRED, err) < 0
               ? -1
               : 0;
}

int cg_create_sub_v2(const struct sbx_cgroup *parent, const char *name, double cpu_cores,
                     struct sbx_cgroup *join, struct sbx_cgroup *own, sbx_err *err)
{
    if (!parent->v2_leaf[0])
        return sbx_err_set(err, EOPNOTSUPP, "a task's own cgroup in a session: not split");
    memset(own, 0, sizeof(*own));
    own->mode = SBX_CG_V2;
    char path[SBX_CG_PATH_MAX];
    if (sbx_cg_child_path(parent->v2_path, name, path, sizeof(path), err) < 0)
        return -1;
    if (mkdir(path, 0755) < 0)
        return sbx_err_set(err, errno, "cgroup mkdir %s", path);
    memcpy(own->v2_path, path, sizeof(path));
    if (cpu_cores > 0) {
        char buf[48];
        cpu_max(buf, sizeof(buf), cpu_cores);
        if (cg_write(path, "cpu.max", buf, CG_REQUIRED, err) < 0) {
            (void)sbx_cgroup_remove(own, NULL);
            return -1;
        }
        own->cpu_enforced = true;
    }
    own->task_own = true;
    *join = *own;
    return 0;
}
