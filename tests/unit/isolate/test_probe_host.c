/* Host probe: the kernel release parser and the plan composed from what was
 * found (pure, on made-up hosts), then the real probe on this machine, which
 * must find user namespaces and seccomp and leave the calling process as it
 * was. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "isolate/probe_host.h"

/* ---- helpers ---- */

/* A host that offers everything. */
static struct sbx_host_probe good_probe(void)
{
    struct sbx_host_probe p = {
        .kernel = "6.1.0-18-amd64",
        .kver = {6, 1, 0},
        .kver_known = true,
        .root = true,
        .max_user_ns = 1000,
        .seccomp = {true, 0},
        .seccomp_bpf_len = 200,
        .nft_netlink = {true, 0},
        .nf_tables = {true, 0},
        .landlock = {true, 0},
        .landlock_abi = 3,
        .clone3 = {true, 0},
        .pidfd = {true, 0},
    };
    for (int i = 0; i < SBX_NS_COUNT; i++)
        p.ns[i] = (struct sbx_feature){true, 0};
    return p;
}

static struct sbx_cg_host v1_host(void)
{
    struct sbx_cg_host cg = {.mode = SBX_CG_V1};
    for (int c = 0; c < SBX_CGC_COUNT; c++) {
        cg.v1_has[c] = true;
        snprintf(cg.v1_base[c], sizeof(cg.v1_base[c]), "/sys/fs/cgroup/%s/sandboxd",
                 sbx_cg_ctrl_name((enum sbx_cg_ctrl)c));
    }
    return cg;
}

static size_t n_required(const struct sbx_isolation_plan *plan)
{
    size_t n = 0;
    for (size_t i = 0; i < plan->n_warn; i++)
        n += plan->warn[i].required;
    return n;
}

/* The warning containing needle, or NULL. */
static const struct sbx_plan_warning *find_warn(const struct sbx_isolation_plan *plan,
                                                const char *needle)
{
    for (size_t i = 0; i < plan->n_warn; i++)
        if (strstr(plan->warn[i].text, needle))
            return &plan->warn[i];
    return NULL;
}

/* ---- kernel release ---- */

static void kver_parses_releases(void **state)
{
    static const struct {
        const char *release;
        unsigned major, minor, patch;
    } ok[] = {
        {"6.18.44-fc-v657", 6, 18, 44},
        {"5.10.0-23-amd64", 5, 10, 0},
        {"6.1", 6, 1, 0},
        {"4.19.0+", 4, 19, 0},
        {"6.9-rc3", 6, 9, 0},
        {"3.10.0-1160.el7.x86_64", 3, 10, 0},
        {"6.1.", 6, 1, 0},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(ok); i++) {
        struct sbx_kver v;
        sbx_err e = {0};
        assert_int_equal(sbx_kver_parse(ok[i].release, &v, &e), 0);
        assert_int_equal(v.major, ok[i].major);
        assert_int_equal(v.minor, ok[i].minor);
        assert_int_equal(v.patch, ok[i].patch);
    }
}

static void kver_rejects_garbage(void **state)
{
    const char *bad[] = {"", "linux", "6", "6.", "6-rc1", ".1.2", "99999999999.1"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        struct sbx_kver v = {7, 7, 7};
        sbx_err e = {0};
        assert_int_equal(sbx_kver_parse(bad[i], &v, &e), -1);
        assert_true(e.errnum == EINVAL || e.errnum == ERANGE);
        assert_non_null(strstr(e.msg, "kernel release"));
        assert_int_equal(v.major, 7); /* untouched */
    }
    assert_int_equal(sbx_kver_parse(NULL, NULL, NULL), -1);
}

static void kver_compares(void **state)
{
    struct sbx_kver v = {5, 4, 0};
    assert_true(sbx_kver_at_least(&v, 5, 3));
    assert_true(sbx_kver_at_least(&v, 5, 4));
    assert_false(sbx_kver_at_least(&v, 5, 13));
    assert_true(sbx_kver_at_least(&v, 4, 19));
    assert_false(sbx_kver_at_least(&v, 6, 0));
}

/* ---- the plan ---- */

static void plan_full_on_v1(void **state)
{
    struct sbx_host_probe p = good_probe();
    struct sbx_cg_host cg = v1_host();
    struct sbx_isolation_plan plan;
    sbx_isolation_plan_make(&p, &cg, &plan);
    assert_true(plan.full);
    assert_int_equal(plan.n_warn, 0);
    for (int i = 0; i < SBX_NS_COUNT; i++)
        assert_true(plan.ns[i]);
    assert_int_equal(plan.limits, SBX_CG_V1);
    assert_string_equal(sbx_plan_limits_name(plan.limits), "cgroup-v1");
    assert_string_equal(plan.memory_by, "cgroup v1 memory.limit_in_bytes");
    assert_string_equal(plan.pids_by, "cgroup v1 pids.max");
    assert_true(plan.cpu_enforced);
    assert_non_null(strstr(plan.kill_by, "freezer"));
    assert_string_equal(plan.seccomp_profile, "default");
}

static void plan_v1_without_cpu_or_freezer(void **state)
{
    struct sbx_host_probe p = good_probe();
    struct sbx_cg_host cg = v1_host();
    cg.v1_has[SBX_CGC_CPU] = cg.v1_has[SBX_CGC_FREEZER] = false;
    struct sbx_isolation_plan plan;
    sbx_isolation_plan_make(&p, &cg, &plan);
    assert_true(plan.full); /* degraded, said so, but nothing required is missing */
    assert_false(plan.cpu_enforced);
    assert_null(plan.cpu_by);
    assert_null(strstr(plan.kill_by, "freezer,"));
    const struct sbx_plan_warning *w = find_warn(&plan, "cpu controller");
    assert_non_null(w);
    assert_false(w->required);
    assert_non_null(strstr(w->text, "NOT enforced"));
    assert_non_null(find_warn(&plan, "freezer"));
    assert_int_equal(n_required(&plan), 0);
}

static void plan_rlimit_fallback(void **state)
{
    struct sbx_host_probe p = good_probe();
    struct sbx_cg_host cg = {.mode = SBX_CG_RLIMIT, .why = "v1 memory: mkdir: Permission denied"};
    struct sbx_isolation_plan plan;
    sbx_isolation_plan_make(&p, &cg, &plan);
    assert_true(plan.full);
    assert_string_equal(sbx_plan_limits_name(plan.limits), "rlimit");
    assert_string_equal(plan.memory_by, "RLIMIT_DATA + RLIMIT_AS + memory watch");
    assert_string_equal(plan.pids_by, "RLIMIT_NPROC");
    assert_false(plan.cpu_enforced);
    const struct sbx_plan_warning *w = find_warn(&plan, "no writable cgroup");
    assert_non_null(w);
    assert_false(w->required);
    assert_non_null(strstr(w->text, "Permission denied")); /* the why is passed on */
    assert_non_null(strstr(w->text, "CPU share is NOT enforced"));
}

static void plan_v2(void **state)
{
    struct sbx_host_probe p = good_probe();
    struct sbx_cg_host cg = {.mode = SBX_CG_V2, .v2_base = "/sys/fs/cgroup/x/sandboxd"};
    struct sbx_isolation_plan plan;
    sbx_isolation_plan_make(&p, &cg, &plan);
    assert_true(plan.full);
    assert_int_equal(plan.n_warn, 0);
    assert_string_equal(sbx_plan_limits_name(plan.limits), "cgroup-v2");
    assert_string_equal(plan.memory_by, "cgroup v2 memory.max");
    assert_string_equal(plan.cpu_by, "cgroup v2 cpu.max");
    assert_true(plan.cpu_enforced);
}

static void plan_missing_userns_and_seccomp(void **state)
{
    struct sbx_host_probe p = good_probe();
    p.ns[SBX_NS_USER] = (struct sbx_feature){false, ENOSPC};
    p.max_user_ns = 0;
    p.seccomp = (struct sbx_feature){false, EINVAL};
    struct sbx_cg_host cg = v1_host();
    struct sbx_isolation_plan plan;
    sbx_isolation_plan_make(&p, &cg, &plan);
    assert_false(plan.full);
    assert_false(plan.ns[SBX_NS_USER]);
    assert_true(plan.ns[SBX_NS_PID]);
    assert_null(plan.seccomp_profile);
    const struct sbx_plan_warning *w = find_warn(&plan, "user namespaces unavailable");
    assert_non_null(w);
    assert_true(w->required);
    assert_non_null(strstr(w->text, "ENOSPC"));
    assert_non_null(strstr(w->text, "max_user_namespaces is 0"));
    w = find_warn(&plan, "seccomp");
    assert_non_null(w);
    assert_true(w->required);
    assert_int_equal(n_required(&plan), 2);
}

static void plan_groups_namespaces_failing_alike(void **state)
{
    struct sbx_host_probe p = good_probe();
    for (int i = 0; i < SBX_NS_COUNT; i++)
        p.ns[i] = (struct sbx_feature){false, EPERM};
    p.ns[SBX_NS_CGROUP] = (struct sbx_feature){false, EINVAL};
    struct sbx_cg_host cg = v1_host();
    struct sbx_isolation_plan plan;
    sbx_isolation_plan_make(&p, &cg, &plan);
    assert_false(plan.full);
    assert_int_equal(n_required(&plan), 2);
    const struct sbx_plan_warning *w =
        find_warn(&plan, "user, pid, mount, net, ipc, uts namespaces unavailable (EPERM");
    assert_non_null(w);
    assert_non_null(find_warn(&plan, "cgroup namespaces unavailable (EINVAL"));
}

static void plan_names_old_kernel_and_root(void **state)
{
    struct sbx_host_probe p = good_probe();
    p.kver = (struct sbx_kver){5, 2, 0};
    p.root = false;
    p.clone3 = (struct sbx_feature){false, ENOSYS};
    p.pidfd = (struct sbx_feature){false, ENOSYS};
    p.landlock = (struct sbx_feature){false, ENOSYS};
    p.landlock_abi = 0;
    struct sbx_cg_host cg = v1_host();
    struct sbx_isolation_plan plan;
    sbx_isolation_plan_make(&p, &cg, &plan);
    assert_false(plan.full);
    assert_non_null(find_warn(&plan, "needs Linux 5.3+, this is 5.2"));
    assert_non_null(find_warn(&plan, "needs Linux 5.4+, this is 5.2"));
    assert_true(find_warn(&plan, "not running as root")->required);
    const struct sbx_plan_warning *w = find_warn(&plan, "landlock");
    assert_non_null(w);
    assert_false(w->required); /* run does not use it */
    assert_int_equal(n_required(&plan), 3);
}

static void plan_nftables_optional(void **state)
{
    struct sbx_host_probe p = good_probe();
    p.nf_tables = (struct sbx_feature){false, EOPNOTSUPP};
    struct sbx_cg_host cg = v1_host();
    struct sbx_isolation_plan plan;
    sbx_isolation_plan_make(&p, &cg, &plan);
    assert_true(plan.full);
    const struct sbx_plan_warning *w = find_warn(&plan, "nf_tables unavailable");
    assert_non_null(w);
    assert_false(w->required);
    assert_non_null(strstr(w->text, strerror(EOPNOTSUPP)));
}

/* ---- this machine ---- */

static void real_probe_on_this_host(void **state)
{
    char userns_before[64] = "", userns_after[64] = "";
    assert_true(readlink("/proc/self/ns/user", userns_before, sizeof(userns_before) - 1) > 0);

    struct sbx_host_probe p;
    sbx_err e = {0};
    assert_int_equal(sbx_host_probe(&p, &e), 0);
    assert_true(p.kernel[0] != '\0');
    assert_true(p.kver_known);
    assert_true(sbx_kver_at_least(&p.kver, 5, 4));
    assert_int_equal(p.root, geteuid() == 0);
    assert_true(p.ns[SBX_NS_USER].ok);
    for (int i = 0; i < SBX_NS_COUNT; i++)
        assert_true(p.ns[i].ok);
    assert_true(p.max_user_ns > 0);
    assert_true(p.seccomp.ok);
    assert_true(p.seccomp_bpf_len > 0);
    assert_true(p.clone3.ok);
    assert_true(p.pidfd.ok);
    assert_true(p.landlock.ok == (p.landlock_abi > 0));

    /* All the trying happened in children, all of them reaped. */
    assert_int_equal(prctl(PR_GET_SECCOMP, 0, 0, 0, 0), 0);
    assert_true(readlink("/proc/self/ns/user", userns_after, sizeof(userns_after) - 1) > 0);
    assert_string_equal(userns_before, userns_after);
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
    assert_int_equal(errno, ECHILD);

    struct sbx_cg_host cg = {.mode = SBX_CG_RLIMIT};
    struct sbx_isolation_plan plan;
    sbx_isolation_plan_make(&p, &cg, &plan);
    assert_string_equal(plan.seccomp_profile, "default");
    assert_true(plan.ns[SBX_NS_USER]);
    assert_int_equal(plan.full, p.root);
}

static void bad_argument(void **state)
{
    sbx_err e = {0};
    assert_int_equal(sbx_host_probe(NULL, &e), -1);
    assert_int_equal(e.errnum, EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kver_parses_releases),
        cmocka_unit_test(kver_rejects_garbage),
        cmocka_unit_test(kver_compares),
        cmocka_unit_test(plan_full_on_v1),
        cmocka_unit_test(plan_v1_without_cpu_or_freezer),
        cmocka_unit_test(plan_rlimit_fallback),
        cmocka_unit_test(plan_v2),
        cmocka_unit_test(plan_missing_userns_and_seccomp),
        cmocka_unit_test(plan_groups_namespaces_failing_alike),
        cmocka_unit_test(plan_names_old_kernel_and_root),
        cmocka_unit_test(plan_nftables_optional),
        cmocka_unit_test(real_probe_on_this_host),
        cmocka_unit_test(bad_argument),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
