/* How a task ended, after isolate's meta file: the outcome, usage, truncation
 * and the limits that were really applied. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "isolate/cgroup.h"

enum sbx_outcome {
    SBX_OUTCOME_EXITED,
    SBX_OUTCOME_SIGNALED,
    SBX_OUTCOME_TIMEOUT,
    SBX_OUTCOME_OOM,
    SBX_OUTCOME_SETUP_ERROR,
    SBX_OUTCOME_CANCELED,
};
const char *sbx_outcome_name(enum sbx_outcome o);

struct sbx_applied_limits {
    uint64_t memory_bytes;
    uint64_t pids;
    double cpu_cores;
    bool cpu_enforced;
    double timeout_s;
    uint64_t file_size_bytes;
    uint64_t output_limit_bytes;
};

struct sbx_report {
    enum sbx_outcome outcome;
    int exit_code; /* the task's, or 128+N, 124 timeout/cancel, 125 setup */
    int signal;    /* 0 unless signaled/oom */
    double wall_s;
    double cpu_s;
    uint64_t peak_memory_bytes;
    bool oom_killed;
    uint64_t stdout_bytes, stderr_bytes; /* written by the task, kept or not */
    bool stdout_truncated, stderr_truncated;
    struct sbx_applied_limits limits;
    enum sbx_cg_mode cgroup_mode;
    char message[512];
    /* What went wrong after the task, e.g. its cgroup could not be removed:
     * "" when nothing did. In the JSON as "warning" only when set. */
    char warning[300];
};

/* The documented JSON object (a jansson json_t *, owned by the caller), to
 * which a caller may add sections, e.g. "network". */
void *sbx_report_json(const struct sbx_report *r);
/* Serialise a report object from sbx_report_json() and release it; the caller
 * frees the string. */
char *sbx_report_dump(void *json);
/* Both at once. */
char *sbx_report_to_json(const struct sbx_report *r);
