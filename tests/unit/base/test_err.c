#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "base/time.h"

static void wrap_adds_context_and_keeps_errno_and_stage(void **state)
{
    sbx_err e = {0};
    assert_int_equal(sbx_err_stage(&e, "mount", EACCES, "bind /workspace"), -1);
    assert_int_equal(sbx_err_wrap(&e, "session %s", "s1"), -1);
    assert_string_equal(e.msg, "session s1: bind /workspace");
    assert_int_equal(e.errnum, EACCES);
    assert_string_equal(e.stage, "mount");
    char buf[512];
    assert_string_equal(sbx_err_format(&e, buf, sizeof(buf)),
                        "mount: session s1: bind /workspace: Permission denied (EACCES)");
}

static void wrap_of_an_empty_message_is_the_context(void **state)
{
    sbx_err e = {0};
    sbx_err_wrap(&e, "cgroup");
    assert_string_equal(e.msg, "cgroup");
    assert_int_equal(sbx_err_wrap(NULL, "x"), -1);
}

static void wrap_cuts_to_fit(void **state)
{
    sbx_err e = {0};
    char long_msg[SBX_ERR_MSG_MAX];
    memset(long_msg, 'a', sizeof(long_msg) - 1);
    long_msg[sizeof(long_msg) - 1] = '\0';
    sbx_err_set(&e, 0, "%s", long_msg);
    sbx_err_wrap(&e, "ctx");
    assert_int_equal(strlen(e.msg), SBX_ERR_MSG_MAX - 1);
    assert_memory_equal(e.msg, "ctx: aaa", 8);
}

static void clocks_move_forward(void **state)
{
    int64_t wall = sbx_now_ms(), mono = sbx_mono_ms();
    assert_true(wall > 1700000000000); /* after 2023 */
    assert_true(sbx_mono_ms() >= mono);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(wrap_adds_context_and_keeps_errno_and_stage),
        cmocka_unit_test(wrap_of_an_empty_message_is_the_context),
        cmocka_unit_test(wrap_cuts_to_fit),
        cmocka_unit_test(clocks_move_forward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
