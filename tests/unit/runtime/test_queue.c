/* The runtime's queue: fair between tenants (one tenant's flood does not
 * starve another's tasks) and bounded per tenant and overall (EAGAIN, the
 * API's 429). Real sandboxes run /bin/true, one at a time. */
#include "rt_fixture.h"

static const char *const true_argv[] = {"/bin/true", NULL};

struct ended {
    struct fx *fx;
    char order[16][SBX_SEGMENT_MAX + 1]; /* tenants, in the order their tasks ended */
};

static void on_done(void *ud, const struct sbx_store_task *t)
{
    struct ended *x = ud;
    assert_int_equal(t->status, SBX_TASK_SUCCEEDED);
    assert_true(x->fx->done < 16);
    snprintf(x->order[x->fx->done++], sizeof(x->order[0]), "%s", t->tenant);
}

static void submit(struct fx *fx, const char *tenant, struct ended *x)
{
    struct sbx_task_request r = fx_request(tenant, true_argv);
    char id[SBX_ID_SIZE];
    sbx_err e = {0};
    if (sbx_runtime_submit(fx->rt, &r, on_done, x, id, &e) < 0)
        fx_fail("submit", &e);
}

/* Tenant "flood" submits five tasks, then "quiet" two: the first of flood's
 * runs at once, then the queue alternates between the two tenants, so
 * quiet's tasks end third and fifth, not after all of flood's. */
static void test_fair_between_tenants(void **state)
{
    struct fx *fx = *state;
    fx_start(fx);
    fx_warm(fx, "flood");
    fx_warm(fx, "quiet");
    struct ended x = {.fx = fx};
    for (int i = 0; i < 5; i++)
        submit(fx, "flood", &x);
    submit(fx, "quiet", &x);
    submit(fx, "quiet", &x);
    unsigned running, queued;
    sbx_runtime_counts(fx->rt, &running, &queued);
    assert_int_equal(running, 1);
    assert_int_equal(queued, 6);
    sbx_runtime_tenant_counts(fx->rt, "quiet", &running, &queued);
    assert_int_equal(running, 0);
    assert_int_equal(queued, 2);
    fx->want = 7;
    fx_run(fx);
    static const char *const want[] = {"flood", "flood", "quiet", "flood",
                                       "quiet", "flood", "flood"};
    for (int i = 0; i < 7; i++)
        assert_string_equal(x.order[i], want[i]);
}

static int submit_rc(struct fx *fx, const char *tenant, sbx_err *e)
{
    struct sbx_task_request r = fx_request(tenant, true_argv);
    char id[SBX_ID_SIZE];
    return sbx_runtime_submit(fx->rt, &r, NULL, NULL, id, e);
}

/* Nothing runs (max_concurrent 0): a tenant's share of the queue fills, then
 * the whole queue; each refusal is EAGAIN and names the tenant. */
static void test_queue_bounds(void **state)
{
    struct fx *fx = *state;
    fx->set.max_concurrent = 0;
    fx->set.queue_per_tenant = 2;
    fx->set.queue_size = 3;
    fx_start(fx);
    sbx_err e = {0};
    assert_int_equal(submit_rc(fx, "a", &e), 0);
    assert_int_equal(submit_rc(fx, "a", &e), 0);
    assert_int_equal(submit_rc(fx, "a", &e), -1);
    assert_int_equal(e.errnum, EAGAIN);
    assert_string_equal(e.msg, "the task queue of tenant 'a' is full");
    /* Another tenant still has its share, until the whole queue is full. */
    assert_int_equal(submit_rc(fx, "b", &e), 0);
    memset(&e, 0, sizeof(e));
    assert_int_equal(submit_rc(fx, "c", &e), -1);
    assert_int_equal(e.errnum, EAGAIN);
    unsigned running, queued;
    sbx_runtime_counts(fx->rt, &running, &queued);
    assert_int_equal(running, 0);
    assert_int_equal(queued, 3);
}

/* A request above the maxima is refused before it is recorded. */
static void test_limits_checked(void **state)
{
    struct fx *fx = *state;
    fx_start(fx);
    struct sbx_task_request r = fx_request("a", true_argv);
    r.pids = fx->set.max.pids + 1;
    sbx_err e = {0};
    assert_int_equal(sbx_runtime_check_limits(&fx->set, &r, NULL, &e), -1);
    assert_int_equal(e.errnum, EINVAL);
    assert_string_equal(e.msg, "pids 33 is above the maximum 32");
    char id[SBX_ID_SIZE];
    memset(&e, 0, sizeof(e));
    assert_int_equal(sbx_runtime_submit(fx->rt, &r, NULL, NULL, id, &e), -1);
    assert_string_equal(e.msg, "pids 33 is above the maximum 32");
    r.pids = 0;
    r.timeout_s = fx->set.max.timeout_s;
    assert_int_equal(sbx_runtime_check_limits(&fx->set, &r, NULL, &e), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fair_between_tenants, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_queue_bounds, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_limits_checked, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
