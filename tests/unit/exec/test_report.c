#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "exec/report.h"

static void report_fields(void **state)
{
    struct sbx_report r = {
        .outcome = SBX_OUTCOME_TIMEOUT,
        .exit_code = 124,
        .wall_s = 1.5,
        .cpu_s = 0.25,
        .peak_memory_bytes = 1234567,
        .stdout_bytes = 50000000,
        .stdout_truncated = true,
        .limits = {.memory_bytes = 256u << 20,
                   .pids = 32,
                   .cpu_cores = 0.25,
                   .cpu_enforced = false,
                   .timeout_s = 1.5,
                   .file_size_bytes = 100u << 20,
                   .output_limit_bytes = 10u << 20},
        .cgroup_mode = SBX_CG_RLIMIT,
    };
    strcpy(r.message, "timed out \"quoted\"");
    char *s = sbx_report_to_json(&r);
    assert_non_null(s);
    json_error_t je;
    json_t *o = json_loads(s, 0, &je);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "outcome")), "timeout");
    assert_int_equal(json_integer_value(json_object_get(o, "exitCode")), 124);
    assert_true(json_real_value(json_object_get(o, "wallSeconds")) == 1.5);
    assert_int_equal(json_integer_value(json_object_get(o, "peakMemoryBytes")), 1234567);
    assert_int_equal(json_integer_value(json_object_get(o, "stdoutBytes")), 50000000);
    assert_true(json_is_true(json_object_get(o, "stdoutTruncated")));
    assert_true(json_is_false(json_object_get(o, "stderrTruncated")));
    assert_true(json_is_false(json_object_get(o, "oomKilled")));
    assert_string_equal(json_string_value(json_object_get(o, "cgroupMode")), "rlimit");
    assert_string_equal(json_string_value(json_object_get(o, "message")), "timed out \"quoted\"");
    json_t *l = json_object_get(o, "limits");
    assert_int_equal(json_integer_value(json_object_get(l, "pids")), 32);
    assert_true(json_is_false(json_object_get(l, "cpuEnforced")));
    assert_string_equal(json_string_value(json_object_get(l, "enforcedBy")), "rlimit");
    assert_string_equal(json_string_value(json_object_get(l, "memoryEnforced")), "partial");
    assert_null(json_object_get(o, "warning"));
    json_decref(o);
    free(s);
}

/* A release error after the task is said, beside the outcome. */
static void report_warning(void **state)
{
    struct sbx_report r = {.outcome = SBX_OUTCOME_EXITED};
    strcpy(r.warning, "release: cgroup rmdir /x: Device or resource busy (EBUSY)");
    json_t *o = sbx_report_json(&r);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "warning")), r.warning);
    assert_string_equal(json_string_value(json_object_get(o, "outcome")), "exited");
    json_decref(o);
}

static void outcome_names(void **state)
{
    assert_string_equal(sbx_outcome_name(SBX_OUTCOME_EXITED), "exited");
    assert_string_equal(sbx_outcome_name(SBX_OUTCOME_SIGNALED), "signaled");
    assert_string_equal(sbx_outcome_name(SBX_OUTCOME_OOM), "oom");
    assert_string_equal(sbx_outcome_name(SBX_OUTCOME_SETUP_ERROR), "setup_error");
    assert_string_equal(sbx_outcome_name(SBX_OUTCOME_CANCELED), "canceled");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(report_fields),
        cmocka_unit_test(report_warning),
        cmocka_unit_test(outcome_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
