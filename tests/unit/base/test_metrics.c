#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/metrics.h"

static const struct sbx_metric m_req = {.name = "t_requests_total",
                                        .help = "Requests.",
                                        .kind = SBX_METRIC_COUNTER,
                                        .labels = {"route", "status"}};
static const struct sbx_metric m_plain = {
    .name = "t_plain_total", .help = "Plain.", .kind = SBX_METRIC_COUNTER};
static const struct sbx_metric m_gauge = {
    .name = "t_depth", .help = "Depth.", .kind = SBX_METRIC_GAUGE};
static const double buckets[] = {0.1, 1, 10};
static const struct sbx_metric m_hist = {.name = "t_seconds",
                                         .help = "Durations.",
                                         .kind = SBX_METRIC_HISTOGRAM,
                                         .labels = {"status"},
                                         .buckets = buckets,
                                         .nbuckets = 3};
static const struct sbx_metric m_tenant = {.name = "t_tasks_total",
                                           .help = "Tasks.",
                                           .kind = SBX_METRIC_COUNTER,
                                           .labels = {"status", "tenant"}};

static int teardown(void **state)
{
    sbx_metrics_reset();
    sbx_metrics_set_tenant_label(false);
    return 0;
}

static void contains(const char *text, const char *want)
{
    if (!strstr(text, want))
        fail_msg("missing %s in:\n%s", want, text);
}

static void counters_with_labels(void **state)
{
    sbx_metric_add(&m_req, 1, "/a", "200");
    sbx_metric_add(&m_req, 2, "/a", "200");
    sbx_metric_add(&m_req, 1, "/b \"x\"\\\n", "404");
    sbx_metric_declare(&m_plain);
    char *t = sbx_metrics_render(NULL);
    assert_non_null(t);
    contains(t, "# HELP t_requests_total Requests.\n# TYPE t_requests_total counter\n");
    contains(t, "t_requests_total{route=\"/a\",status=\"200\"} 3\n");
    contains(t, "t_requests_total{route=\"/b \\\"x\\\"\\\\\\n\",status=\"404\"} 1\n");
    contains(t, "t_plain_total 0\n");
    contains(t, "# TYPE process_open_fds gauge\n");
    contains(t, "process_resident_memory_bytes ");
    free(t);
}

static void histogram_is_cumulative(void **state)
{
    sbx_metric_observe(&m_hist, 0.05, "ok");
    sbx_metric_observe(&m_hist, 0.5, "ok");
    sbx_metric_observe(&m_hist, 100, "ok");
    char *t = sbx_metrics_render(NULL);
    contains(t, "# TYPE t_seconds histogram\n");
    contains(t, "t_seconds_bucket{status=\"ok\",le=\"0.1\"} 1\n");
    contains(t, "t_seconds_bucket{status=\"ok\",le=\"1\"} 2\n");
    contains(t, "t_seconds_bucket{status=\"ok\",le=\"10\"} 2\n");
    contains(t, "t_seconds_bucket{status=\"ok\",le=\"+Inf\"} 3\n");
    contains(t, "t_seconds_sum{status=\"ok\"} 100.55");
    contains(t, "t_seconds_count{status=\"ok\"} 3\n");
    free(t);
}

static void tenant_label_only_when_on(void **state)
{
    sbx_metric_add(&m_tenant, 1, "ok", sbx_metrics_tenant("acme"));
    sbx_metrics_set_tenant_label(true);
    sbx_metric_add(&m_tenant, 1, "ok", sbx_metrics_tenant("acme"));
    char *t = sbx_metrics_render(NULL);
    contains(t, "t_tasks_total{status=\"ok\"} 1\n");
    contains(t, "t_tasks_total{status=\"ok\",tenant=\"acme\"} 1\n");
    free(t);
}

static void set_depth(void *ud)
{
    sbx_metric_set(&m_gauge, *(int *)ud);
}

static void collectors_run_at_render(void **state)
{
    int depth = 7;
    sbx_metrics_collector(set_depth, &depth);
    char *t = sbx_metrics_render(NULL);
    contains(t, "t_depth 7\n");
    free(t);
    depth = 3;
    t = sbx_metrics_render(NULL);
    contains(t, "t_depth 3\n");
    free(t);
    sbx_metrics_collector_remove(set_depth, &depth);
    depth = 9;
    t = sbx_metrics_render(NULL);
    contains(t, "t_depth 3\n");
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(counters_with_labels, teardown),
        cmocka_unit_test_teardown(histogram_is_cumulative, teardown),
        cmocka_unit_test_teardown(tenant_label_only_when_on, teardown),
        cmocka_unit_test_teardown(collectors_run_at_render, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
