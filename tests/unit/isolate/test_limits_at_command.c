/* A pooled sandbox without cgroups (spec.limits_at_command): its init is
 * started with no memory or process limit and takes the task's from its
 * command. Real sandboxes (root, rlimit mode forced): a command that carries
 * the limits runs under exactly them; one without them is refused as a
 * setup error, never run unlimited. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "isolate/sandbox.h"
#include "isolate/seccomp.h"

#define MIB (1ULL << 20)

static struct sbx_cg_host host;
static struct sbx_sandbox_fds fds = {-1, -1};
static char ws[] = "/tmp/sbx-lac-XXXXXX";

static void fail_with(const char *what, const sbx_err *e)
{
    fail_msg("%s: %s: %s", what, e->stage, e->msg);
}

static int setup(void **state)
{
    (void)state;
    sbx_err e = {0};
    if (sbx_cg_host_detect(true, &host, &e) < 0)
        fail_with("rlimit mode", &e);
    if ((fds.init_exe = sbx_init_exe_open(&e)) < 0 ||
        (fds.seccomp = sbx_seccomp_compile_fd(SBX_SECCOMP_DEFAULT, &e)) < 0)
        fail_with("init and seccomp", &e);
    if (!mkdtemp(ws))
        fail_msg("mkdtemp");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    rmdir(ws);
    close(fds.init_exe);
    close(fds.seccomp);
    return 0;
}

/* A pooled sandbox waiting for its command (no limits of its own yet). */
static void spawn_pooled(struct sbx_sandbox *sb, const char *name)
{
    struct sbx_spec spec = {.workspace = ws,
                            .uid = SBX_RUNNER_ID,
                            .gid = SBX_RUNNER_ID,
                            /* between the test daemons' clones (their first
                             * few hundred ranges) and their pools' (60,000 on) */
                            .host_id_base = (uint32_t)(20000 + getpid() % 20000) * SBX_ID_RANGE,
                            .cg_host = &host,
                            .cg_limits = {.memory_bytes = 512 * MIB, .pids = 200},
                            .tmp_size_bytes = 16 * MIB,
                            .nofile = 1024,
                            .name = name,
                            .join_pidfd = -1,
                            .pooled = true,
                            .limits_at_command = true};
    sbx_err e = {0};
    if (sbx_sandbox_spawn(&spec, sb, &e) < 0 || sbx_sandbox_send_fds(sb, &fds, &e) < 0)
        fail_with("spawn", &e);
}

static void next_msg(struct sbx_sandbox *sb, struct sbx_init_msg *m)
{
    ssize_t n;
    while ((n = recv(sb->sync_fd, m, sizeof(*m), 0)) < 0 && errno == EINTR)
        ;
    assert_int_equal(n, sizeof(*m));
}

static void release(struct sbx_sandbox *sb)
{
    sbx_sandbox_kill(sb);
    sbx_sandbox_release(sb, NULL);
}

static void the_commands_limits_are_the_tasks(void **state)
{
    (void)state;
    struct sbx_sandbox sb;
    char name[64];
    snprintf(name, sizeof(name), "unit-lac-%d-a", (int)getpid());
    spawn_pooled(&sb, name);
    char *argv[] = {"/bin/sh", "-c",
                    "grep -E '^Max (data size|address space|processes)' /proc/self/limits", NULL};
    char *envp[] = {"PATH=/usr/bin:/bin", NULL};
    struct sbx_cg_limits lim = {.memory_bytes = 48 * MIB, .pids = 17};
    sbx_err e = {0};
    if (sbx_sandbox_send_command_fds(&sb, argv, envp, &lim, NULL, 0, &e) < 0)
        fail_with("command", &e);
    struct sbx_init_msg m;
    next_msg(&sb, &m);
    assert_int_equal(m.kind, SBX_MSG_STARTED);
    char out[4096] = "";
    size_t got = 0;
    ssize_t n;
    while (got < sizeof(out) - 1 && (n = read(sb.stdout_fd, out + got, sizeof(out) - 1 - got)) > 0)
        got += (size_t)n;
    next_msg(&sb, &m);
    assert_int_equal(m.kind, SBX_MSG_EXITED);
    assert_int_equal(m.wstatus, 0);
    char data[32], as[32];
    snprintf(data, sizeof(data), "%llu", 48 * MIB);
    snprintf(as, sizeof(as), "%llu", 48 * MIB + SBX_RLIMIT_AS_HEADROOM);
    assert_non_null(strstr(out, data));
    assert_non_null(strstr(out, as));
    assert_non_null(strstr(out, "Max processes             17"));
    release(&sb);
}

static void a_command_without_limits_is_refused(void **state)
{
    (void)state;
    struct sbx_sandbox sb;
    char name[64];
    snprintf(name, sizeof(name), "unit-lac-%d-b", (int)getpid());
    spawn_pooled(&sb, name);
    char *argv[] = {"/bin/true", NULL};
    char *envp[] = {"PATH=/usr/bin:/bin", NULL};
    sbx_err e = {0};
    if (sbx_sandbox_send_command_fds(&sb, argv, envp, NULL, NULL, 0, &e) < 0)
        fail_with("command", &e);
    struct sbx_init_msg m;
    next_msg(&sb, &m);
    assert_int_equal(m.kind, SBX_MSG_SETUP_ERROR);
    m.text[sizeof(m.text) - 1] = '\0';
    assert_non_null(strstr(m.text, "carries no limits"));
    release(&sb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_commands_limits_are_the_tasks),
        cmocka_unit_test(a_command_without_limits_is_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
