/* The workspace quota's modes: names, the choice, the measure of a tree and
 * its helper child, and project quotas refused where the filesystem has
 * none. Real files in a temporary directory. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "path_util.h"

#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "workspace/quota_mode.h"

static char base[PATH_MAX];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    (void)state;
    strcpy(base, "/tmp/sbx-wsq-XXXXXX");
    assert_non_null(mkdtemp(base));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* A file of n bytes really written (not sparse). */
static void write_file(const char *path, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    char buf[4096];
    memset(buf, 'x', sizeof(buf));
    for (size_t done = 0; done < n; done += sizeof(buf))
        assert_int_equal(write(fd, buf, sizeof(buf)), (ssize_t)sizeof(buf));
    assert_int_equal(fsync(fd), 0);
    close(fd);
}

static void test_names(void **state)
{
    (void)state;
    enum sbx_ws_quota_mode m;
    sbx_err e = {0};
    const char *all[] = {"auto", "loop", "project", "monitor"};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(sbx_ws_quota_mode_parse(all[i], &m, &e), 0);
        assert_string_equal(sbx_ws_quota_mode_name(m), all[i]);
    }
    assert_int_equal(sbx_ws_quota_mode_parse("Loop", &m, &e), -1);
    assert_int_equal(e.errnum, EINVAL);
    assert_non_null(strstr(e.msg, "'Loop' is not auto, loop, project or monitor"));
    assert_true(sbx_ws_quota_mode_kernel(SBX_WSQ_LOOP));
    assert_true(sbx_ws_quota_mode_kernel(SBX_WSQ_PROJECT));
    assert_false(sbx_ws_quota_mode_kernel(SBX_WSQ_MONITOR));
}

static void test_choose(void **state)
{
    (void)state;
    enum sbx_ws_quota_mode m = SBX_WSQ_AUTO;
    char why[512];
    sbx_err e = {0};
    /* monitor is always possible */
    assert_int_equal(sbx_ws_quota_choose(SBX_WSQ_MONITOR, base, &m, why, sizeof(why), &e), 0);
    assert_int_equal(m, SBX_WSQ_MONITOR);
    /* auto is never auto, and agrees with the probes */
    char lw[160], pw[240];
    bool loop = sbx_ws_quota_loop_usable(lw, sizeof(lw));
    bool proj = sbx_ws_quota_project_usable(base, pw, sizeof(pw));
    assert_int_equal(sbx_ws_quota_choose(SBX_WSQ_AUTO, base, &m, why, sizeof(why), &e), 0);
    assert_int_equal(m, loop ? SBX_WSQ_LOOP : proj ? SBX_WSQ_PROJECT : SBX_WSQ_MONITOR);
    /* a mode asked for that is not usable is an error naming it */
    int rc = sbx_ws_quota_choose(SBX_WSQ_PROJECT, base, &m, why, sizeof(why), &e);
    if (proj) {
        assert_int_equal(rc, 0);
    } else {
        assert_int_equal(rc, -1);
        assert_int_equal(e.errnum, EOPNOTSUPP);
        assert_non_null(strstr(e.msg, "workspace_quota_mode project: "));
    }
    /* a root that does not exist: project is not usable, saying so */
    assert_false(sbx_ws_quota_project_usable("/nonexistent/sbx-root", pw, sizeof(pw)));
    assert_non_null(strstr(pw, "/nonexistent/sbx-root"));
}

static void test_du(void **state)
{
    (void)state;
    char dir[PATH_MAX], sub[PATH_MAX];
    pathf(dir, sizeof(dir), "%s/w", base);
    pathf(sub, sizeof(sub), "%s/w/a/b", base);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(mkdir(at(dir, "a"), 0700), 0);
    assert_int_equal(mkdir(sub, 0700), 0);
    sbx_err e = {0};
    uint64_t empty;
    assert_int_equal(sbx_ws_du(dir, &empty, &e), 0);
    write_file(at(dir, "one"), 1 << 20);
    write_file(at(sub, "two"), 2 << 20);
    /* a symlink out of the tree is not followed */
    assert_int_equal(symlink("/usr", at(dir, "out")), 0);
    uint64_t used;
    assert_int_equal(sbx_ws_du(dir, &used, &e), 0);
    assert_true(used >= empty + (3ull << 20));
    assert_true(used < empty + (3ull << 20) + (256 << 10));
    assert_int_equal(sbx_ws_du(at(base, "missing"), &used, &e), -1);
    assert_int_equal(e.errnum, ENOENT);
}

static void test_measure_child(void **state)
{
    (void)state;
    char a[PATH_MAX], b[PATH_MAX], missing[PATH_MAX];
    pathf(a, sizeof(a), "%s/a", base);
    pathf(b, sizeof(b), "%s/b", base);
    pathf(missing, sizeof(missing), "%s/missing", base);
    assert_int_equal(mkdir(a, 0700), 0);
    assert_int_equal(mkdir(b, 0700), 0);
    write_file(at(a, "f"), 4 << 20);
    write_file(at(b, "f"), 1 << 20);
    const char *dirs[] = {a, missing, b};
    struct sbx_ws_measure m;
    sbx_err e = {0};
    assert_int_equal(sbx_ws_measure_start(dirs, 3, &m, &e), 0);
    assert_true(m.pid > 0 && m.pidfd >= 0);
    /* the pidfd becomes readable when it is done */
    struct pollfd p = {.fd = m.pidfd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 30000), 1);
    uint64_t used[3];
    assert_int_equal(sbx_ws_measure_finish(&m, used, &e), 0);
    assert_true(used[0] >= (4ull << 20) && used[0] < (5ull << 20));
    assert_int_equal(used[1], UINT64_MAX);
    assert_true(used[2] >= (1ull << 20) && used[2] < (2ull << 20));
    assert_int_equal(m.pid, -1);
    /* abort of a running one: killed and reaped */
    assert_int_equal(sbx_ws_measure_start(dirs, 3, &m, &e), 0);
    pid_t pid = m.pid;
    sbx_ws_measure_abort(&m);
    assert_int_equal(m.pid, -1);
    assert_int_equal(kill(pid, 0), -1);
}

static void test_project_refused_without_quotas(void **state)
{
    (void)state;
    char pw[240];
    if (sbx_ws_quota_project_usable(base, pw, sizeof(pw)))
        return; /* a filesystem with project quotas: test_choose covered it */
    char dir[PATH_MAX];
    pathf(dir, sizeof(dir), "%s/p", base);
    assert_int_equal(mkdir(dir, 0700), 0);
    sbx_err e = {0};
    assert_int_equal(sbx_ws_project_ensure(dir, 4242, 16 << 20, &e), -1);
    assert_string_equal(e.stage, "project");
    assert_true(e.errnum != 0);
    assert_int_equal(sbx_ws_project_ensure(at(base, "none"), 4242, 16 << 20, &e), -1);
    assert_int_equal(e.errnum, ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_choose, setup, teardown),
        cmocka_unit_test_setup_teardown(test_du, setup, teardown),
        cmocka_unit_test_setup_teardown(test_measure_child, setup, teardown),
        cmocka_unit_test_setup_teardown(test_project_refused_without_quotas, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
