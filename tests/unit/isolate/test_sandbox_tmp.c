/* The size of a sandbox's tmpfs mounts: the configured size, and without
 * cgroups (nothing charges tmpfs pages there) no more than the memory
 * limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "isolate/sandbox.h"

#define MIB (1ULL << 20)

static uint64_t tmp_size(uint64_t tmp, uint64_t mem, enum sbx_cg_mode mode)
{
    struct sbx_spec spec = {.tmp_size_bytes = tmp, .cg_limits = {.memory_bytes = mem}};
    return sbx_sandbox_tmp_size(&spec, mode);
}

static void bounded_by_memory_in_rlimit_mode_only(void **state)
{
    assert_int_equal(tmp_size(64 * MIB, 32 * MIB, SBX_CG_RLIMIT), 32 * MIB);
    assert_int_equal(tmp_size(64 * MIB, 256 * MIB, SBX_CG_RLIMIT), 64 * MIB);
    /* No memory limit: nothing to bound it by. */
    assert_int_equal(tmp_size(64 * MIB, 0, SBX_CG_RLIMIT), 64 * MIB);
    /* The memory controller charges tmpfs pages: the configured size. */
    assert_int_equal(tmp_size(64 * MIB, 32 * MIB, SBX_CG_V1), 64 * MIB);
    assert_int_equal(tmp_size(64 * MIB, 32 * MIB, SBX_CG_V2), 64 * MIB);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bounded_by_memory_in_rlimit_mode_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
