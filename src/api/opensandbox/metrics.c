/* execd's /metrics and /metrics/watch for one OpenSandbox sandbox: what its
 * session's cgroup uses, against its limits (the sandbox's "system"). */
#include "api/opensandbox/os_int.h"

#include <stdlib.h>
#include <unistd.h>

#include "api/http_internal.h"
#include "base/time.h"

#define EXECD "/v1/sandboxes/{id}/proxy/" OS_EXECD_PORT
#define WATCH_MS 1000

struct os_watch {
    struct os_box *box;
    sbx_sse *sse;
    struct event *ev;
    struct os_watch *next;
};

/* {cpu_count, cpu_used_pct, mem_total_mib, mem_used_mib, timestamp}: cpu
 * use since the previous sample, as a share of the sandbox's cores. */
static json_t *metrics(struct os_box *b, sbx_err *err)
{
    struct sbx_cg_stats st = {0};
    struct sbx_cg_limits lim = {0};
    if (sbx_runtime_session_stats(b->os->api->rt, &b->clone, b->id, &st, &lim, err) < 0)
        return NULL;
    int64_t now = sbx_now_ms();
    double cores = lim.cpu_cores > 0 ? lim.cpu_cores : (double)sysconf(_SC_NPROCESSORS_ONLN);
    if (!b->cpu_at) {
        b->cpu_at = b->created_at;
        b->cpu_usec_at = 0;
    }
    if (st.have_cpu && now - b->cpu_at >= 10 && st.cpu_usec >= b->cpu_usec_at) {
        b->cpu_pct =
            (double)(st.cpu_usec - b->cpu_usec_at) / 10.0 / ((double)(now - b->cpu_at) * cores);
        b->cpu_at = now;
        b->cpu_usec_at = st.cpu_usec;
    }
    double total = lim.memory_bytes
                       ? (double)lim.memory_bytes
                       : (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    return json_pack("{s:f, s:f, s:f, s:f, s:I}", "cpu_count", cores, "cpu_used_pct",
                     b->cpu_pct > 100 ? 100.0 : b->cpu_pct, "mem_total_mib", total / 1048576.0,
                     "mem_used_mib", (double)st.mem_bytes / 1048576.0, "timestamp",
                     (json_int_t)now);
}

static void h_execd_metrics(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, false);
    if (!b)
        return;
    sbx_err e = {0};
    json_t *m = metrics(b, &e);
    if (!m)
        sbx_http_respond_err(req, &e);
    else
        sbx_http_respond_json(req, 200, m);
}

static void watch_free(struct os_watch *w)
{
    for (struct os_watch **p = &w->box->watches; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    event_free(w->ev);
    free(w);
}

static void watch_closed(sbx_sse *sse, void *ud)
{
    watch_free(ud); /* the client left */
}

static void on_watch(evutil_socket_t fd, short what, void *arg)
{
    struct os_watch *w = arg;
    json_t *m = metrics(w->box, NULL);
    /* A client too slow for one line a second loses its stream. */
    if (!m || sbx_sse_send_json(w->sse, NULL, NULL, m, NULL) < 0) {
        json_decref(m);
        sbx_sse_close(w->sse);
        watch_free(w);
        return;
    }
    json_decref(m);
    struct timeval tv = {.tv_sec = WATCH_MS / 1000};
    event_add(w->ev, &tv);
}

static void h_execd_metrics_watch(sbx_http_request *req, void *ud)
{
    struct os_box *b = os_box_get(req, ud, false);
    if (!b)
        return;
    struct os_watch *w = calloc(1, sizeof(*w));
    if (!w || !(w->ev = evtimer_new(req->srv->base, on_watch, w))) {
        free(w);
        sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
        return;
    }
    w->box = b;
    w->next = b->watches;
    b->watches = w;
    sbx_sse_opts o = {.on_close = watch_closed, .ud = w};
    if (!(w->sse = sbx_http_respond_sse(req, &o))) {
        watch_free(w);
        return;
    }
    on_watch(-1, 0, w);
}

void os_watches_free(struct os_box *b)
{
    while (b->watches) {
        sbx_sse_close(b->watches->sse);
        watch_free(b->watches);
    }
}

int os_metrics_routes(sbx_http_server *srv, struct os_state *os, sbx_err *err)
{
    if (sbx_http_route(srv, "GET", EXECD "/metrics", h_execd_metrics, os, 0, err) < 0)
        return -1;
    return sbx_http_route(srv, "GET", EXECD "/metrics/watch", h_execd_metrics_watch, os, 0, err);
}
