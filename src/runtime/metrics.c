/* The runtime's metrics: tasks by status and outcome, their durations, the
 * queue (depth, wait), running tasks and live sessions. Counted where the
 * runtime sees each event (tasks.c calls these); the gauges are read from the
 * runtime's state at each render. */
#include "base/metrics.h"
#include "base/time.h"
#include "runtime/runtime_int.h"

/* Seconds: from a fast exec to the longest task timeout. */
static const double duration_buckets[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                          2.5,  5,     10,   30,  60,   300, 1800};
static const double wait_buckets[] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60};

static const struct sbx_metric m_submitted = {.name = "sandbox_tasks_submitted_total",
                                              .help = "Tasks accepted into the queue.",
                                              .kind = SBX_METRIC_COUNTER,
                                              .labels = {"tenant"}};
static const struct sbx_metric m_finished = {.name = "sandbox_tasks_finished_total",
                                             .help = "Tasks ended, by final status and outcome.",
                                             .kind = SBX_METRIC_COUNTER,
                                             .labels = {"status", "outcome", "tenant"}};
static const struct sbx_metric m_duration = {
    .name = "sandbox_task_duration_seconds",
    .help = "Time a task ran, from its start in a sandbox to its end, by final status.",
    .kind = SBX_METRIC_HISTOGRAM,
    .labels = {"status"},
    .buckets = duration_buckets,
    .nbuckets = SBX_ARRAY_LEN(duration_buckets)};
static const struct sbx_metric m_roundtrip = {
    .name = "sandbox_exec_roundtrip_seconds",
    .help = "Time from a task's submission to its result (queue, sandbox set-up, run, record).",
    .kind = SBX_METRIC_HISTOGRAM,
    .labels = {"status"},
    .buckets = duration_buckets,
    .nbuckets = SBX_ARRAY_LEN(duration_buckets)};
static const struct sbx_metric m_wait = {.name = "sandbox_queue_wait_seconds",
                                         .help =
                                             "Time a task waited in the queue before it started.",
                                         .kind = SBX_METRIC_HISTOGRAM,
                                         .labels = {NULL},
                                         .buckets = wait_buckets,
                                         .nbuckets = SBX_ARRAY_LEN(wait_buckets)};
static const struct sbx_metric m_queued = {
    .name = "sandbox_queue_depth", .help = "Tasks waiting in the queue.", .kind = SBX_METRIC_GAUGE};
static const struct sbx_metric m_running = {
    .name = "sandbox_tasks_running", .help = "Tasks running now.", .kind = SBX_METRIC_GAUGE};
static const struct sbx_metric m_sessions = {
    .name = "sandbox_sessions_live", .help = "Live sessions.", .kind = SBX_METRIC_GAUGE};

static void collect(void *ud)
{
    struct sbx_runtime *rt = ud;
    unsigned sessions = 0;
    for (struct rt_session *x = rt->sessions; x; x = x->next)
        sessions++;
    sbx_metric_set(&m_queued, rt->queued);
    sbx_metric_set(&m_running, rt->running);
    sbx_metric_set(&m_sessions, sessions);
}

void rt_metrics_init(struct sbx_runtime *rt)
{
    const struct sbx_metric *all[] = {&m_submitted, &m_finished, &m_duration, &m_roundtrip,
                                      &m_wait,      &m_queued,   &m_running,  &m_sessions};
    for (size_t i = 0; i < SBX_ARRAY_LEN(all); i++)
        sbx_metric_declare(all[i]);
    sbx_metrics_collector(collect, rt);
}

void rt_metrics_fini(struct sbx_runtime *rt)
{
    sbx_metrics_collector_remove(collect, rt);
}

void rt_metrics_submitted(struct rt_task *t)
{
    t->submitted_s = sbx_mono_s();
    sbx_metric_add(&m_submitted, 1, sbx_metrics_tenant(t->clone.tenant));
}

void rt_metrics_started(struct rt_task *t)
{
    t->started_s = sbx_mono_s();
    sbx_metric_observe(&m_wait, t->started_s - t->submitted_s);
}

void rt_metrics_finished(struct rt_task *t, enum sbx_task_status status)
{
    const char *st = sbx_task_status_name(status);
    const char *outcome = t->outcome                    ? t->outcome
                          : status == SBX_TASK_CANCELED ? "canceled"
                                                        : "setup_error";
    double now = sbx_mono_s();
    sbx_metric_add(&m_finished, 1, st, outcome, sbx_metrics_tenant(t->clone.tenant));
    if (t->started_s > 0)
        sbx_metric_observe(&m_duration, now - t->started_s, st);
    sbx_metric_observe(&m_roundtrip, now - t->submitted_s, st);
}
