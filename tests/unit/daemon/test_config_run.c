/* The configuration of `sandboxd run` (sbx_config_load_run): the defaults of
 * serve's chain and the network variables a single command takes, nothing
 * else of the environment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/config.h"

static int load_run(struct sbx_config *c, char **envp, sbx_err *e)
{
    memset(e, 0, sizeof(*e));
    return sbx_config_load_run(c, envp, e);
}

/* Without variables, run starts from exactly what serve's loader gives. */
static void defaults_are_serves(void **state)
{
    struct sbx_config r, s;
    sbx_err e;
    char *argv[] = {"serve", NULL};
    assert_int_equal(load_run(&r, NULL, &e), 0);
    assert_int_equal(sbx_config_load(&s, 1, argv, NULL, &e), 0);
    assert_memory_equal(&r.limits, &s.limits, sizeof(r.limits));
    assert_int_equal(r.limits.memory_bytes, 256ull << 20);
    assert_int_equal(r.limits.pids, 32);
    assert_true(r.limits.cpu_cores == 0.25);
    assert_true(r.limits.timeout_s == 300);
    assert_int_equal(r.limits.file_size_bytes, 100ull << 20);
    assert_int_equal(r.limits.output_bytes, 10ull << 20);
    assert_int_equal(r.limits.tmp_bytes, 64ull << 20);
    assert_memory_equal(&r.max, &s.max, sizeof(r.max));
    assert_true(r.max.timeout_s == 1800);
    assert_int_equal(r.max.memory_bytes, 2ull << 30);
    assert_int_equal(r.max.pids, 256);
    assert_true(r.max.cpu_cores == 2);
    assert_int_equal(r.max.file_size_bytes, 1ull << 30);
    assert_int_equal(r.max.output_bytes, 64ull << 20);
    assert_int_equal(r.max.tmp_bytes, 1ull << 30);
    assert_int_equal(r.net, SBX_NET_PROXY);
    assert_int_equal(r.net, s.net);
    assert_int_equal(r.seccomp, s.seccomp);
    assert_int_equal(r.runner_uid, SBX_RUNNER_ID);
    assert_int_equal(r.runner_gid, SBX_RUNNER_ID);
    assert_int_equal(r.host_id_base, SBX_DEFAULT_HOST_ID_BASE);
    assert_int_equal(r.network.def, SBX_DEFAULT_ALLOW);
    assert_int_equal(r.network.limits.proxy_port, 1080);
    assert_null(r.network.allowed_cidrs);
    assert_null(r.config_path);
    sbx_config_free(&r);
    sbx_config_free(&s);
}

static void network_variables_taken(void **state)
{
    struct sbx_config c;
    sbx_err e;
    char *env[] = {"CLAW_ENABLE_SANDBOX_NET=false",
                   "CLAW_SANDBOX_PROXY_PORT= 1081 ",
                   "CLAW_SANDBOX_ALLOWED_CIDRS=172.16.0.0/12",
                   "CLAW_SANDBOX_ALLOWED_PORTS=443",
                   "CLAW_ALLOWED_INTERNAL_TARGETS=10.0.0.5:5432",
                   "CLAW_SANDBOX_BLOCKED_CIDRS=203.0.113.0/24",
                   NULL};
    assert_int_equal(load_run(&c, env, &e), 0);
    assert_int_equal(c.net, SBX_NET_NONE);
    assert_int_equal(c.network.limits.proxy_port, 1081);
    assert_string_equal(c.network.allowed_cidrs, "172.16.0.0/12");
    assert_string_equal(c.network.allowed_ports, "443");
    assert_string_equal(c.network.allowed_internal_targets, "10.0.0.5:5432");
    assert_string_equal(c.network.blocked_cidrs, "203.0.113.0/24");
    sbx_config_free(&c);

    char *on[] = {"CLAW_ENABLE_SANDBOX_NET=true", "CLAW_SANDBOX_PROXY_PORT=", NULL};
    assert_int_equal(load_run(&c, on, &e), 0);
    assert_int_equal(c.net, SBX_NET_PROXY);
    assert_int_equal(c.network.limits.proxy_port, 1080); /* empty is unset */
    sbx_config_free(&c);
}

/* serve's variables (and unknown CLAW_* names) mean nothing to run: its
 * options keep their defaults whatever the shell exports. */
static void other_variables_left_alone(void **state)
{
    struct sbx_config c;
    sbx_err e;
    char *env[] = {"CLAW_MEMORY_LIMIT_MB=lots", "CLAW_API_TOKEN=short", "CLAW_NO_SUCH_THING=1",
                   "CLAW_RUNNER_UID=0", NULL};
    assert_int_equal(load_run(&c, env, &e), 0);
    assert_int_equal(c.limits.memory_bytes, 256ull << 20);
    assert_int_equal(c.runner_uid, SBX_RUNNER_ID);
    assert_int_equal(c.n_tokens, 0);
    assert_int_equal(c.ignored_env.n, 0);
    sbx_config_free(&c);
}

static const char *load_run_err(char **envp)
{
    static sbx_err e;
    struct sbx_config c;
    assert_int_equal(load_run(&c, envp, &e), -1);
    assert_null(c.environments); /* left empty */
    sbx_config_free(&c);
    return e.msg;
}

/* A bad value is refused with the message `sandboxd run` has always shown. */
static void bad_values_name_the_variable(void **state)
{
    assert_string_equal(load_run_err((char *[]){"CLAW_ENABLE_SANDBOX_NET=maybe", NULL}),
                        "CLAW_ENABLE_SANDBOX_NET: 'maybe' is not true or false");
    assert_string_equal(load_run_err((char *[]){"CLAW_SANDBOX_PROXY_PORT=99999", NULL}),
                        "CLAW_SANDBOX_PROXY_PORT: '99999' is out of range [1, 65535]");
    assert_string_equal(load_run_err((char *[]){"CLAW_SANDBOX_PROXY_PORT=3128", NULL}),
                        "CLAW_SANDBOX_PROXY_PORT: 3128 is taken by another listener of the "
                        "egress (53, 3128, 15001)");
    const char *m = load_run_err((char *[]){"CLAW_SANDBOX_ALLOWED_CIDRS=bogus", NULL});
    assert_non_null(strstr(m, "CLAW_SANDBOX_ALLOWED_CIDRS: entry 'bogus'"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_are_serves),
        cmocka_unit_test(network_variables_taken),
        cmocka_unit_test(other_variables_left_alone),
        cmocka_unit_test(bad_values_name_the_variable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
