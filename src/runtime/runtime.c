/* The runtime itself: made and freed with the daemon, and its counts. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/pool.h"
#include "base/digest.h"
#include "runtime/runtime_int.h"
#include "workspace/quota.h"

void sbx_runtime_counts(const struct sbx_runtime *rt, unsigned *running, unsigned *queued)
{
    *running = rt->running;
    *queued = rt->queued + rt->preparing;
}

void sbx_runtime_tenant_counts(const struct sbx_runtime *rt, const char *tenant, unsigned *running,
                               unsigned *queued)
{
    *running = *queued = 0;
    for (const struct rt_task *t = rt->active; t; t = t->all_next)
        if (strcmp(t->clone.tenant, tenant) == 0)
            (*(t->t ? running : queued))++;
}

const struct sbx_runtime_settings *sbx_runtime_settings(const struct sbx_runtime *rt)
{
    return &rt->settings;
}

const char *sbx_runtime_default_session(const struct sbx_runtime *rt)
{
    return rt->default_session;
}

int sbx_runtime_cg_tag(const char *state_dir, char tag[SBX_RUNTIME_CG_TAG_SIZE], sbx_err *err)
{
    char real[PATH_MAX], hex[SBX_SHA256_HEX_SIZE];
    const char *dir = state_dir ? state_dir : ".";
    /* (a directory not made yet is named as given) */
    if (realpath(dir, real))
        dir = real;
    if (sbx_sha256_hex(dir, strlen(dir), hex, err) < 0)
        return -1;
    snprintf(tag, SBX_RUNTIME_CG_TAG_SIZE, "%.*s", SBX_RUNTIME_CG_TAG_SIZE - 1, hex);
    return 0;
}

bool sbx_runtime_cg_is_ours(const char *name, const char *tag)
{
    static const char *const kinds[] = {"task-", "session-"};
    size_t n = strlen(tag);
    for (size_t i = 0; i < SBX_ARRAY_LEN(kinds); i++) {
        size_t k = strlen(kinds[i]);
        if (strncmp(name, kinds[i], k) == 0 && strncmp(name + k, tag, n) == 0 && name[k + n] == '-')
            return true;
    }
    return false;
}

struct sbx_runtime *sbx_runtime_new(const struct sbx_runtime_opts *o, sbx_err *err)
{
    struct sbx_runtime *rt = calloc(1, sizeof(*rt));
    if (!rt) {
        sbx_err_set(err, ENOMEM, "runtime");
        return NULL;
    }
    rt->o = *o;
    rt->settings = *o->settings;
    rt->o.settings = &rt->settings;
    snprintf(rt->default_session, sizeof(rt->default_session), "%s",
             rt->settings.runtime_id ? rt->settings.runtime_id : "default");
    if (sbx_runtime_cg_tag(rt->settings.state_dir, rt->cg_tag, err) < 0) {
        free(rt);
        return NULL;
    }
    if (rt_monitor_init(rt, err) < 0 || rt_idle_unmount_init(rt, err) < 0) {
        rt_monitor_fini(rt);
        rt_idle_unmount_fini(rt);
        free(rt);
        return NULL;
    }
    rt_metrics_init(rt);
    const struct sbx_pool_settings *ps = &rt->settings.pool;
    uint32_t n_ids = 0, ids_first = rt_pool_ids(&rt->settings, &n_ids);
    sbx_pool_configure(o->base, &(struct sbx_pool_config){
                                    .enabled = ps->enabled,
                                    .max_idle = ps->size,
                                    .max_total = ps->max_total,
                                    .max_active = ps->max_active
                                                      ? ps->max_active
                                                      : rt->settings.max_concurrent + ps->max_total,
                                    .idle_timeout_s = ps->idle_timeout_s,
                                    .net_start = rt_pool_egress_start,
                                    .net_drop = rt_pool_egress_drop,
                                    .net_ctx = rt,
                                    .net_sets = rt_pool_egress_sets,
                                    .net_sets_fd = rt_pool_sets_fd,
                                    .net_sets_end = rt_pool_sets_end,
                                    .net_sets_abort = rt_pool_sets_abort,
                                    .ids_first = ids_first,
                                    .ids_ranges = n_ids,
                                    .session_idle = ps->sessions});
    return rt;
}

void sbx_runtime_cancel_all(struct sbx_runtime *rt, const char *why)
{
    while (rt && rt->active) {
        struct rt_task *t = rt->active;
        if (t->t) {
            /* Kill it now and record it; the engine's callbacks are not awaited. */
            sbx_task_cancel(t->t);
            rt->running--;
        } else {
            rt_unqueue(rt, t);
        }
        rt_finish(t, SBX_TASK_CANCELED, why, NULL, NULL, 0, NULL, 0, 124);
    }
}

void sbx_runtime_free(struct sbx_runtime *rt)
{
    if (!rt)
        return;
    sbx_pool_shutdown();                                  /* its sandboxes hold workspaces */
    sbx_policy_free(sbx_steal_pointer(&rt->pool_policy)); /* after its egresses */
    rt_zygote_free(rt);
    rt_snapshots_free(rt); /* before the workspaces are unmounted */
    rt_metrics_fini(rt);
    while (rt->sessions)
        rt_session_free(rt->sessions);
    rt_clones_free(rt);
    rt_releases_finish(rt);
    while (rt->formats)
        rt_format_free(rt->formats);
    rt_monitor_fini(rt);
    rt_idle_unmount_fini(rt);
    for (struct mounted_ws *m = rt->mounted, *next; m; m = next) {
        next = m->next;
        free(m->path);
        free(m);
    }
    /* Those of an earlier run that crashed too. */
    sbx_ws_quota_release_all(rt->settings.workspace_root);
    sbx_runtime_cancel_all(rt, "the daemon stopped");
    free(rt);
}

void rt_waiters_notify(struct rt_waiter *w, const sbx_err *err)
{
    while (w) {
        struct rt_waiter *next = w->next;
        w->fn(w->ud, err);
        free(w);
        w = next;
    }
}

void rt_waiters_drop(struct rt_waiter **list, void *ud)
{
    while (*list)
        if ((*list)->ud == ud) {
            struct rt_waiter *w = *list;
            *list = w->next;
            free(w);
        } else {
            list = &(*list)->next;
        }
}

void sbx_runtime_set_clone_mounts(struct sbx_runtime *rt, sbx_clone_mounts_fn fn, void *ud)
{
    rt->clone_mounts = fn;
    rt->clone_mounts_ud = ud;
}
