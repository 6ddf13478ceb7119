/* Live sessions from the runtime's side: a stop returns at once (the session
 * is gone for the API, its name free again) while its sandbox is released
 * from the loop afterwards, cgroup and all. Real sandboxes. */
#include <dirent.h>
#include <limits.h>

#include "rt_fixture.h"

static const struct sbx_clone acme_default = {.tenant = "acme", .id = "default"};

/* The base directory sandbox cgroups are made in, or NULL without cgroups. */
static const char *cg_base(const struct fx *fx)
{
    if (fx->cg_host.mode == SBX_CG_V2)
        return fx->cg_host.v2_base;
    if (fx->cg_host.mode == SBX_CG_V1)
        for (int i = 0; i < SBX_CGC_COUNT; i++)
            if (fx->cg_host.v1_has[i])
                return fx->cg_host.v1_base[i];
    return NULL;
}

/* Whether pid is a child of this process. */
static bool ours(long pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    bool yes = false;
    if (f && fgets(buf, sizeof(buf), f)) {
        const char *end = strrchr(buf, ')');
        long ppid = 0;
        yes = end && sscanf(end + 1, " %*c %ld", &ppid) == 1 && ppid == (long)getpid();
    }
    if (f)
        fclose(f);
    return yes;
}

/* Whether the cgroup dir holds a process of ours (a session's init). */
static bool holds_ours(const char *dir)
{
    char path[PATH_MAX + 340];
    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    FILE *f = fopen(path, "r");
    bool yes = false;
    for (long pid; f && !yes && fscanf(f, "%ld", &pid) == 1;)
        yes = ours(pid);
    if (f)
        fclose(f);
    return yes;
}

/* How many session cgroups of this process's sessions exist now: the live
 * ones (other daemons on the machine may have theirs beside them), and the
 * ones named in seen[] (learnt while live, up to 4), still there or not. */
static char seen[4][PATH_MAX + 300];

static unsigned session_cgroups(const struct fx *fx)
{
    const char *base = cg_base(fx);
    DIR *d = base ? opendir(base) : NULL;
    unsigned n = 0;
    if (!d)
        return 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (strncmp(de->d_name, "session-", 8) != 0)
            continue;
        char dir[PATH_MAX + 300];
        snprintf(dir, sizeof(dir), "%s/%s", base, de->d_name);
        bool known = false;
        for (int i = 0; i < 4 && !known; i++)
            known = strcmp(seen[i], dir) == 0;
        if (!known && holds_ours(dir))
            for (int i = 0; i < 4 && !known; i++)
                if (!seen[i][0])
                    known = snprintf(seen[i], sizeof(seen[i]), "%s", dir) > 0;
        n += known;
    }
    closedir(d);
    return n;
}

struct ready {
    bool called;
    bool ok;
};

static void on_ready(void *ud, const sbx_err *err)
{
    struct ready *r = ud;
    r->called = true;
    r->ok = err == NULL;
}

static void start(struct fx *fx, const char *name)
{
    struct sbx_clone c = {.tenant = "acme", .id = "default"};
    struct ready r = {0};
    sbx_err e = {0};
    int rc = sbx_runtime_session_start(fx->rt, &c, name, on_ready, &r, &e);
    if (rc < 0)
        fx_fail("session start", &e);
    assert_int_equal(rc, 0);
    while (!r.called && !fx->timed_out)
        event_base_loop(fx->base, EVLOOP_ONCE);
    assert_false(fx->timed_out);
    assert_true(r.ok);
}

/* Run the loop until no session cgroup is left (at most about 3 s). */
static void until_released(struct fx *fx)
{
    for (int i = 0; i < 300 && session_cgroups(fx) > 0; i++) {
        struct timeval tv = {.tv_usec = 10000};
        event_base_loopexit(fx->base, &tv);
        event_base_dispatch(fx->base);
    }
    assert_int_equal(session_cgroups(fx), 0);
}

static void test_stop_releases_later(void **state)
{
    struct fx *fx = *state;
    fx_start(fx);
    memset(seen, 0, sizeof(seen));
    fx_warm(fx, "acme");
    start(fx, "s1");
    assert_true(sbx_runtime_session_live(fx->rt, &acme_default, "s1"));
    bool cgroups = cg_base(fx) != NULL;
    if (cgroups)
        assert_int_equal(session_cgroups(fx), 1);
    assert_int_equal(sbx_runtime_session_stop(fx->rt, &acme_default, "s1"), 0);
    /* Gone for the API at once; its sandbox is released by the loop's
     * timer steps, never within the stop (so, the loop not having run,
     * its cgroup is still there whether or not its init is dead yet). */
    assert_false(sbx_runtime_session_live(fx->rt, &acme_default, "s1"));
    assert_int_equal(sbx_runtime_session_stop(fx->rt, &acme_default, "s1"), -1);
    if (cgroups)
        assert_int_equal(session_cgroups(fx), 1);
    until_released(fx);
}

static void test_name_free_during_release(void **state)
{
    struct fx *fx = *state;
    fx_start(fx);
    memset(seen, 0, sizeof(seen));
    fx_warm(fx, "acme");
    start(fx, "s1");
    assert_int_equal(sbx_runtime_session_stop(fx->rt, &acme_default, "s1"), 0);
    start(fx, "s1"); /* a new one, while the old one's release goes on */
    assert_true(sbx_runtime_session_live(fx->rt, &acme_default, "s1"));
    assert_int_equal(sbx_runtime_session_stop(fx->rt, &acme_default, "s1"), 0);
    until_released(fx);
}

/* At the runtime's end a release still going on is finished: no cgroup is
 * left behind. */
static void test_free_finishes_release(void **state)
{
    struct fx *fx = *state;
    fx_start(fx);
    memset(seen, 0, sizeof(seen));
    fx_warm(fx, "acme");
    start(fx, "s1");
    start(fx, "s2");
    assert_int_equal(sbx_runtime_session_stop(fx->rt, &acme_default, "s1"), 0);
    sbx_runtime_free(fx->rt); /* s1 being released, s2 live */
    fx->rt = NULL;
    assert_int_equal(session_cgroups(fx), 0);
}

/* A fresh clone's session waits for its first workspace image, formatted
 * off the loop, then starts. */
static void test_start_waits_for_workspace(void **state)
{
    struct fx *fx = *state;
    fx_start(fx);
    memset(seen, 0, sizeof(seen));
    start(fx, "s1");
    assert_true(sbx_runtime_session_live(fx->rt, &acme_default, "s1"));
    assert_int_equal(sbx_runtime_session_stop(fx->rt, &acme_default, "s1"), 0);
    until_released(fx);
}

struct ended {
    bool done;
    enum sbx_task_status status;
    bool session_live; /* when the task's end was told */
    struct fx *fx;
};

static void on_ended(void *ud, const struct sbx_store_task *t)
{
    struct ended *x = ud;
    x->done = true;
    x->status = t->status;
    x->session_live = sbx_runtime_session_live(x->fx->rt, &acme_default, "s1");
}

/* A task of the session waiting in the queue longer than the idle timeout
 * (the one slot is another task's) holds the session: it runs in it, and the
 * session is still live at its end. */
static void test_waiting_task_holds_the_session(void **state)
{
    struct fx *fx = *state;
    fx->set.idle_timeout_s = 0.3;
    fx_start(fx);
    memset(seen, 0, sizeof(seen));
    fx_warm(fx, "acme");
    start(fx, "s1");
    static const char *const hog[] = {"/bin/sleep", "1.5", NULL};
    static const char *const argv[] = {"/bin/true", NULL};
    struct sbx_task_request r1 = fx_request("acme", hog), r2 = fx_request("acme", argv);
    r2.session = "s1";
    struct ended a = {.fx = fx}, b = {.fx = fx};
    char id[SBX_ID_SIZE];
    sbx_err e = {0};
    if (sbx_runtime_submit(fx->rt, &r1, on_ended, &a, id, &e) < 0 ||
        sbx_runtime_submit(fx->rt, &r2, on_ended, &b, id, &e) < 0)
        fx_fail("submit", &e);
    while (!(a.done && b.done) && !fx->timed_out)
        event_base_loop(fx->base, EVLOOP_ONCE);
    assert_false(fx->timed_out);
    assert_int_equal(a.status, SBX_TASK_SUCCEEDED);
    assert_int_equal(b.status, SBX_TASK_SUCCEEDED);
    assert_true(b.session_live);
    /* and idle once nothing is left: it ends by itself */
    for (int i = 0; i < 300 && sbx_runtime_session_live(fx->rt, &acme_default, "s1"); i++) {
        struct timeval tv = {.tv_usec = 10000};
        event_base_loopexit(fx->base, &tv);
        event_base_dispatch(fx->base);
    }
    assert_false(sbx_runtime_session_live(fx->rt, &acme_default, "s1"));
    until_released(fx);
}

/* Stopped while its workspace is being formatted: its waiter hears it ended,
 * and the format's end does not find it. */
static void test_stop_while_formatting(void **state)
{
    struct fx *fx = *state;
    fx_start(fx);
    memset(seen, 0, sizeof(seen));
    struct sbx_clone c = {.tenant = "acme", .id = "default"};
    struct ready r = {0};
    sbx_err e = {0};
    assert_int_equal(sbx_runtime_session_start(fx->rt, &c, "s1", on_ready, &r, &e), 0);
    assert_int_equal(sbx_runtime_session_stop(fx->rt, &acme_default, "s1"), 0);
    assert_true(r.called);
    assert_false(r.ok);
    struct ready w = {0};
    int rc = sbx_runtime_workspace_when_ready(fx->rt, &c, on_ready, &w, &e);
    assert_true(rc >= 0);
    while (rc == 0 && !w.called && !fx->timed_out)
        event_base_loop(fx->base, EVLOOP_ONCE);
    assert_false(fx->timed_out);
    assert_int_equal(session_cgroups(fx), 0);
}

/* A file request for a new clone: told when its image is made, then the
 * workspace is had at once (and the next request does not wait). */
static void test_files_wait_for_workspace(void **state)
{
    struct fx *fx = *state;
    fx_start(fx);
    memset(seen, 0, sizeof(seen));
    struct sbx_clone c = {.tenant = "acme", .id = "fresh"};
    struct ready r = {0}, gone = {0};
    sbx_err e = {0};
    assert_int_equal(sbx_runtime_workspace_when_ready(fx->rt, &c, on_ready, &r, &e), 0);
    /* One that went away is forgotten. */
    assert_int_equal(sbx_runtime_workspace_when_ready(fx->rt, &c, on_ready, &gone, &e), 0);
    sbx_runtime_workspace_unwait(fx->rt, &gone);
    while (!r.called && !fx->timed_out)
        event_base_loop(fx->base, EVLOOP_ONCE);
    assert_false(fx->timed_out);
    assert_true(r.ok);
    assert_false(gone.called);
    int fd = -1;
    uid_t uid;
    gid_t gid;
    if (sbx_runtime_workspace(fx->rt, &c, &fd, &uid, &gid, &e) < 0)
        fx_fail("workspace", &e);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(sbx_runtime_workspace_when_ready(fx->rt, &c, on_ready, &gone, &e), 1);
    assert_false(gone.called);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stop_releases_later, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_name_free_during_release, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_free_finishes_release, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_start_waits_for_workspace, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_stop_while_formatting, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_files_wait_for_workspace, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_waiting_task_holds_the_session, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
