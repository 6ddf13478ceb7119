/* The event streams: stored, pushed to live subscribers, replayed; a
 * subscriber resuming from an id that aged out (the store keeps five per
 * session here) hears events_lost {from, to} first. */
#include <jansson.h>

#include "rt_fixture.h"

struct got {
    unsigned n;
    uint64_t id[32];
    char type[32][32];
    json_t *body[32];
    int full_after; /* send fails once this many were taken (-1: never) */
};

static int on_send(void *ud, uint64_t id, const char *type, const char *json)
{
    struct got *g = ud;
    if (g->full_after >= 0 && g->n >= (unsigned)g->full_after)
        return -1;
    assert_true(g->n < 32);
    g->id[g->n] = id;
    snprintf(g->type[g->n], sizeof(g->type[0]), "%s", type);
    json_error_t je;
    g->body[g->n] = json_loads(json, 0, &je);
    assert_non_null(g->body[g->n]);
    g->n++;
    return 0;
}

static void got_free(struct got *g)
{
    for (unsigned i = 0; i < g->n; i++)
        json_decref(g->body[i]);
}

static void emit(struct fx *fx, const char *session, int i)
{
    sbx_err e = {0};
    if (sbx_runtime_emit(fx->rt, "acme", session, "note", json_pack("{s:i}", "i", i), &e) < 0)
        fx_fail("emit", &e);
}

static void subscriber(struct sbx_subscriber *s, struct got *g, const char *session, uint64_t after)
{
    *s = (struct sbx_subscriber){.last_id = after, .send = on_send, .ud = g};
    snprintf(s->tenant, sizeof(s->tenant), "acme");
    snprintf(s->session, sizeof(s->session), "%s", session);
}

static void test_events_lost_first(void **state)
{
    struct fx *fx = *state;
    fx_start(fx);
    for (int i = 1; i <= 12; i++)
        emit(fx, "s1", i); /* ids 1..12; 8..12 kept */
    struct got g = {.full_after = -1};
    struct sbx_subscriber s;
    subscriber(&s, &g, "s1", 2);
    sbx_err e = {0};
    if (sbx_runtime_subscribe(fx->rt, &s, &e) < 0)
        fx_fail("subscribe", &e);
    assert_int_equal(g.n, 6);
    assert_string_equal(g.type[0], "events_lost");
    json_t *d = json_object_get(g.body[0], "data");
    assert_int_equal(json_integer_value(json_object_get(d, "from")), 3);
    assert_int_equal(json_integer_value(json_object_get(d, "to")), 7);
    assert_string_equal(json_string_value(json_object_get(g.body[0], "sessionId")), "s1");
    for (unsigned i = 1; i < 6; i++) {
        assert_int_equal(g.id[i], 7 + i);
        assert_string_equal(g.type[i], "note");
        d = json_object_get(g.body[i], "data");
        assert_int_equal(json_integer_value(json_object_get(d, "i")), 7 + i);
    }
    /* Then live. */
    emit(fx, "s1", 13);
    assert_int_equal(g.n, 7);
    assert_int_equal(g.id[6], 13);
    sbx_runtime_unsubscribe(fx->rt, &s);
    got_free(&g);
}

/* A subscriber that has seen everything kept gets no events_lost; another
 * tenant's stream of the same name is not its. */
static void test_nothing_lost(void **state)
{
    struct fx *fx = *state;
    fx_start(fx);
    for (int i = 1; i <= 3; i++)
        emit(fx, "s1", i);
    sbx_err e = {0};
    if (sbx_runtime_emit(fx->rt, "other", "s1", "note", NULL, &e) < 0)
        fx_fail("emit", &e);
    struct got g = {.full_after = -1};
    struct sbx_subscriber s;
    subscriber(&s, &g, "s1", 0);
    if (sbx_runtime_subscribe(fx->rt, &s, &e) < 0)
        fx_fail("subscribe", &e);
    assert_int_equal(g.n, 3);
    for (unsigned i = 0; i < 3; i++)
        assert_string_equal(g.type[i], "note");
    sbx_runtime_unsubscribe(fx->rt, &s);
    got_free(&g);
}

/* A full client buffer stops the pushing; resume catches up from the store,
 * with events_lost when what it missed aged out meanwhile. */
static void test_resume_after_full(void **state)
{
    struct fx *fx = *state;
    fx_start(fx);
    struct got g = {.full_after = 1};
    struct sbx_subscriber s;
    subscriber(&s, &g, "s1", 0);
    sbx_err e = {0};
    if (sbx_runtime_subscribe(fx->rt, &s, &e) < 0)
        fx_fail("subscribe", &e);
    for (int i = 1; i <= 10; i++)
        emit(fx, "s1", i); /* 1 taken, then full; 6..10 kept */
    assert_int_equal(g.n, 1);
    assert_true(s.behind);
    g.full_after = -1;
    sbx_runtime_resume(fx->rt, &s);
    assert_false(s.behind);
    assert_int_equal(g.n, 7);
    assert_string_equal(g.type[1], "events_lost");
    json_t *d = json_object_get(g.body[1], "data");
    assert_int_equal(json_integer_value(json_object_get(d, "from")), 2);
    assert_int_equal(json_integer_value(json_object_get(d, "to")), 5);
    assert_int_equal(g.id[2], 6);
    assert_int_equal(g.id[6], 10);
    sbx_runtime_unsubscribe(fx->rt, &s);
    got_free(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_events_lost_first, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_nothing_lost, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_resume_after_full, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
