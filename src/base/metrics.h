/* The daemon's metrics, in one small registry rendered in the Prometheus
 * text format (GET /metrics). Each layer declares the metrics of what it
 * sees (`static const struct sbx_metric`) and counts where the event
 * happens: the runtime its tasks and queue, the egress its connections and
 * DNS answers, the HTTP server its requests. Gauges that are a state rather
 * than an event (queue depth, running tasks, live sessions) are set by a
 * collector called just before each render.
 *
 * The registry is process-wide, the one exception to "no mutable globals":
 * a metric belongs to the process that is scraped, wherever in the layers
 * it is counted, and threading a registry pointer through every layer's
 * calls would add an argument to dozens of functions for no gain. Like the
 * rest of the daemon, it is used from the loop's one thread only.
 *
 * Series are created on first use; labels take the values given, in the
 * order of the metric's label names, NULL leaving that label out (the
 * tenant label is given only where the operator turned it on, see
 * sbx_metrics_tenant). Out of memory, a value is dropped, never fatal. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define SBX_METRIC_MAX_LABELS 4

enum sbx_metric_kind { SBX_METRIC_COUNTER, SBX_METRIC_GAUGE, SBX_METRIC_HISTOGRAM };

struct sbx_metric {
    const char *name; /* "sandbox_tasks_finished_total" */
    const char *help;
    enum sbx_metric_kind kind;
    const char *labels[SBX_METRIC_MAX_LABELS + 1]; /* names, NULL-terminated */
    const double *buckets;                         /* histograms: upper bounds, ascending */
    unsigned nbuckets;
};

/* The label values follow v, one per label name of m (const char *). */
void sbx_metric_add(const struct sbx_metric *m, double v, ...);
void sbx_metric_set(const struct sbx_metric *m, double v, ...);
void sbx_metric_observe(const struct sbx_metric *m, double v, ...);
/* List m even before its first value (a metric without labels shows 0). */
void sbx_metric_declare(const struct sbx_metric *m);

/* Called before each render, in registration order, to set gauges. */
typedef void (*sbx_metrics_collect_fn)(void *ud);
void sbx_metrics_collector(sbx_metrics_collect_fn fn, void *ud);
void sbx_metrics_collector_remove(sbx_metrics_collect_fn fn, void *ud);

/* Whether metrics carry a tenant label (the operator's choice: one series
 * per tenant can be many). */
void sbx_metrics_set_tenant_label(bool on);
/* tenant when the tenant label is on, else NULL (the label left out). */
const char *sbx_metrics_tenant(const char *tenant);

/* The exposition (text format 0.0.4), with the process's resident memory
 * and open fds; the caller frees. NULL when out of memory. */
char *sbx_metrics_render(size_t *len);
/* Forget every series and collector (a daemon's teardown, unit tests). */
void sbx_metrics_reset(void);
