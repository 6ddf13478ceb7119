#include "exec/report.h"

#include <jansson.h>

const char *sbx_outcome_name(enum sbx_outcome o)
{
    switch (o) {
    case SBX_OUTCOME_EXITED:
        return "exited";
    case SBX_OUTCOME_SIGNALED:
        return "signaled";
    case SBX_OUTCOME_TIMEOUT:
        return "timeout";
    case SBX_OUTCOME_OOM:
        return "oom";
    case SBX_OUTCOME_SETUP_ERROR:
        return "setup_error";
    case SBX_OUTCOME_CANCELED:
        return "canceled";
    }
    return "unknown";
}

void *sbx_report_json(const struct sbx_report *r)
{
    const struct sbx_applied_limits *l = &r->limits;
    bool rlimit = r->cgroup_mode == SBX_CG_RLIMIT;
    /* Without cgroups the memory limit holds only in part: init's memory
     * watch samples the sandbox's sum (isolate/init/memwatch.h), so a burst
     * between samples passes and kernel memory is not counted; the peak is
     * the largest sum it saw (or the largest process, if more). */
    json_t *limits = json_pack(
        "{s:I, s:s, s:I, s:f, s:b, s:f, s:I, s:I, s:s}", "memoryBytes", (json_int_t)l->memory_bytes,
        "memoryEnforced", rlimit ? "partial" : "full", "pids", (json_int_t)l->pids, "cpu",
        l->cpu_cores, "cpuEnforced", l->cpu_enforced, "timeoutSeconds", l->timeout_s,
        "fileSizeBytes", (json_int_t)l->file_size_bytes, "outputLimitBytes",
        (json_int_t)l->output_limit_bytes, "enforcedBy", rlimit ? "rlimit" : "cgroup");
    json_t *o = json_pack("{s:s, s:i, s:i, s:f, s:f, s:I, s:b, s:I, s:I, s:b, s:b, s:o, s:s, s:s}",
                          "outcome", sbx_outcome_name(r->outcome), "exitCode", r->exit_code,
                          "signal", r->signal, "wallSeconds", r->wall_s, "cpuSeconds", r->cpu_s,
                          "peakMemoryBytes", (json_int_t)r->peak_memory_bytes, "oomKilled",
                          r->oom_killed, "stdoutBytes", (json_int_t)r->stdout_bytes, "stderrBytes",
                          (json_int_t)r->stderr_bytes, "stdoutTruncated", r->stdout_truncated,
                          "stderrTruncated", r->stderr_truncated, "limits", limits, "cgroupMode",
                          sbx_cg_mode_name(r->cgroup_mode), "message", r->message);
    if (o && r->warning[0])
        json_object_set_new(o, "warning", json_string(r->warning));
    return o;
}

char *sbx_report_dump(void *json)
{
    if (!json)
        return NULL;
    char *s = json_dumps(json, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(json);
    return s;
}

char *sbx_report_to_json(const struct sbx_report *r)
{
    return sbx_report_dump(sbx_report_json(r));
}
