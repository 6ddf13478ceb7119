/* A session without cgroups (rlimit mode forced): its memory is held by
 * init's memory watch (isolate/init/memwatch.h). While a task of the session
 * runs, that task's sub-init watches and the task ends as oom; between its
 * tasks, the session's pid 1 watches and kills what its background
 * processes hold past the limit, so the next task starts clean. Real
 * sandboxes, 32 MiB limit. */
#include "rt_fixture.h"

#define MIB (1ull << 20)

/* Holds shared anonymous memory, 8 MiB at a time, up to 512 MiB. */
#define HOG                                                                                        \
    "import mmap, time\n"                                                                          \
    "keep = []\n"                                                                                  \
    "for i in range(64):\n"                                                                        \
    "    m = mmap.mmap(-1, 8 << 20, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)\n"                 \
    "    m.write(b'x' * (8 << 20)); keep.append(m)\n"                                              \
    "print('ESCAPED', flush=True)\n"                                                               \
    "time.sleep(30)\n"

static const struct sbx_clone acme = {.tenant = "acme", .id = "default"};

struct ended {
    bool done;
    char result[4096];
    enum sbx_task_status status;
};

static void on_ended(void *ud, const struct sbx_store_task *t)
{
    struct ended *x = ud;
    x->done = true;
    x->status = t->status;
    snprintf(x->result, sizeof(x->result), "%s", t->result ? t->result : "");
}

static void on_ready(void *ud, const sbx_err *err)
{
    *(int *)ud = err ? -1 : 1;
}

static int setup(void **state)
{
    fx_setup(state);
    struct fx *fx = *state;
    sbx_err e = {0};
    if (sbx_cg_host_detect(true, &fx->cg_host, &e) < 0)
        fx_fail("rlimit mode", &e);
    fx->set.limits.memory_bytes = fx->set.max.memory_bytes = 32 * MIB;
    fx->set.limits.timeout_s = fx->set.max.timeout_s = 30;
    fx_start(fx);
    int ready = 0;
    int rc = sbx_runtime_session_start(fx->rt, &acme, "s", on_ready, &ready, &e);
    if (rc < 0)
        fx_fail("session start", &e);
    while (rc == 0 && !ready && !fx->timed_out)
        event_base_loop(fx->base, EVLOOP_ONCE);
    assert_true(rc == 1 || ready == 1);
    return 0;
}

static void run_in_session(struct fx *fx, const char *const *argv, struct ended *x)
{
    struct sbx_task_request r = fx_request("acme", argv);
    r.session = "s";
    char id[SBX_ID_SIZE];
    sbx_err e = {0};
    if (sbx_runtime_submit(fx->rt, &r, on_ended, x, id, &e) < 0)
        fx_fail("submit", &e);
    while (!x->done && !fx->timed_out)
        event_base_loop(fx->base, EVLOOP_ONCE);
    assert_false(fx->timed_out);
}

static void wait_ms(struct fx *fx, long ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    event_base_loopexit(fx->base, &tv);
    event_base_dispatch(fx->base);
}

/* A task of the session that holds too much ends as oom, by the watch. */
static void test_task_in_session_killed_by_the_watch(void **state)
{
    struct fx *fx = *state;
    static const char *const argv[] = {"python3", "-c", HOG, NULL};
    struct ended x = {0};
    run_in_session(fx, argv, &x);
    if (!strstr(x.result, "\"outcome\":\"oom\"") || !strstr(x.result, "memory watch"))
        fail_msg("the hog's task: %s", x.result);
    assert_non_null(strstr(x.result, "\"cgroupMode\":\"rlimit\""));
}

/* What a task left running in the background is killed between tasks once
 * it holds too much; the next task of the session runs and ends normally. */
static void test_background_hog_killed_between_tasks(void **state)
{
    struct fx *fx = *state;
    static const char *const start[] = {
        "sh", "-c", "(sleep 1; exec python3 -c \"$0\") >/dev/null 2>&1 & exit 0", HOG, NULL};
    struct ended first = {0};
    run_in_session(fx, start, &first);
    assert_non_null(strstr(first.result, "\"outcome\":\"exited\""));
    wait_ms(fx, 3000); /* the hog starts after 1 s and is held past 32 MiB at once */
    /* Were the hog still there, this task's watch would find the session
     * over its limit and end it as oom. */
    static const char *const look[] = {"true", NULL};
    struct ended second = {0};
    run_in_session(fx, look, &second);
    if (!strstr(second.result, "\"outcome\":\"exited\""))
        fail_msg("the next task: %s", second.result);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_task_in_session_killed_by_the_watch, setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_background_hog_killed_between_tasks, setup,
                                        fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
