/* Doctor's steps: the --cap-add flags for missing capabilities, the fix for
 * each step's failure, and failed steps turned into plan warnings (pure, on
 * made-up results). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "isolate/probe_steps.h"

static void caps_flags_name_only_the_missing(void **state)
{
    (void)state;
    char buf[256];
    sbx_caps_flags(SBX_CAPS_SERVE, SBX_CAPS_SERVE, buf, sizeof(buf));
    assert_string_equal(buf, "");
    sbx_caps_flags(0, SBX_CAPS_RUN, buf, sizeof(buf));
    assert_string_equal(buf, "--cap-add SYS_ADMIN --cap-add SETUID --cap-add SETGID "
                             "--cap-add CHOWN");
    sbx_caps_flags(SBX_CAPS_RUN, SBX_CAPS_SERVE, buf, sizeof(buf));
    assert_string_equal(buf, "--cap-add DAC_OVERRIDE --cap-add FOWNER --cap-add MKNOD");
    /* Serve does not need SYS_PTRACE (bit 19): never asked for, never suggested. */
    assert_false(SBX_CAPS_SERVE & (1ull << 19));
    sbx_caps_flags(0, UINT64_MAX, buf, sizeof(buf));
    assert_null(strstr(buf, "PTRACE"));
    sbx_caps_flags(0, SBX_CAPS_RUN, buf, 10); /* cut, still terminated */
    assert_int_equal(strlen(buf), 9);
}

static void fixes_name_the_flag(void **state)
{
    (void)state;
    char buf[SBX_STEP_FIX_LEN];
    sbx_step_fix(SBX_STEP_PIVOT, EPERM, true, buf, sizeof(buf));
    assert_non_null(strstr(buf, "--security-opt seccomp=unconfined"));
    sbx_step_fix(SBX_STEP_USERNS, EPERM, true, buf, sizeof(buf));
    assert_non_null(strstr(buf, "--cap-add SYS_ADMIN"));
    sbx_step_fix(SBX_STEP_USERNS, ENOSPC, true, buf, sizeof(buf));
    assert_non_null(strstr(buf, "user.max_user_namespaces"));
    sbx_step_fix(SBX_STEP_IDMAP, EPERM, true, buf, sizeof(buf));
    assert_non_null(strstr(buf, "--cap-add SETUID --cap-add SETGID"));
    sbx_step_fix(SBX_STEP_PROCFS, EPERM, true, buf, sizeof(buf));
    assert_non_null(strstr(buf, "systempaths=unconfined"));
    sbx_step_fix(SBX_STEP_CGROUP, EROFS, true, buf, sizeof(buf));
    assert_non_null(strstr(buf, "remount"));
    sbx_step_fix(SBX_STEP_LOOP, ENOENT, true, buf, sizeof(buf));
    assert_non_null(strstr(buf, "--device /dev/loop-control"));
    sbx_step_fix(SBX_STEP_LOOP, ENOENT, false, buf, sizeof(buf));
    assert_non_null(strstr(buf, "modprobe loop"));
    for (int s = 0; s < SBX_STEP_COUNT; s++) {
        sbx_step_fix((enum sbx_step)s, EPERM, s % 2, buf, sizeof(buf));
        assert_true(buf[0] != '\0');
        assert_string_not_equal(sbx_step_name((enum sbx_step)s), "?");
    }
    assert_string_equal(sbx_step_name(SBX_STEP_COUNT), "?");
}

static void failed_steps_become_warnings(void **state)
{
    (void)state;
    struct sbx_steps st = {.in_container = true};
    struct sbx_isolation_plan plan = {.full = true};
    sbx_steps_to_plan(&st, &plan); /* all OK (zero) */
    assert_true(plan.full);
    assert_int_equal(plan.n_warn, 0);

    st.step[SBX_STEP_LOOP] = (struct sbx_step_result){
        .state = SBX_STEP_FAILED, .errnum = ENOENT, .required = false, .fix = "add loop"};
    sbx_steps_to_plan(&st, &plan);
    assert_true(plan.full); /* serve's loop devices do not make run less isolated */
    assert_int_equal(plan.n_warn, 1);
    assert_false(plan.warn[0].required);

    st.step[SBX_STEP_PIVOT] = (struct sbx_step_result){.state = SBX_STEP_FAILED,
                                                       .errnum = EPERM,
                                                       .required = true,
                                                       .detail = "pivot_root into the new root",
                                                       .fix = "add seccomp=unconfined"};
    st.step[SBX_STEP_SECCOMP] =
        (struct sbx_step_result){.state = SBX_STEP_FAILED, .required = true}; /* told by probe */
    plan = (struct sbx_isolation_plan){.full = true};
    sbx_steps_to_plan(&st, &plan);
    assert_false(plan.full);
    assert_int_equal(plan.n_warn, 2);
    assert_true(plan.warn[0].required);
    assert_string_equal(plan.warn[0].text, "pivot_root failed (EPERM): pivot_root into the new "
                                           "root. Fix: add seccomp=unconfined");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(caps_flags_name_only_the_missing),
        cmocka_unit_test(fixes_name_the_flag),
        cmocka_unit_test(failed_steps_become_warnings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
