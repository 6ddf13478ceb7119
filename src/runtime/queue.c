/* The queue: fair between tenants (round robin over the tenants with waiting
 * tasks), bounded overall and per tenant, and the scheduler that starts what
 * it holds while fewer than max_concurrent tasks run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "runtime/runtime_int.h"

/* Round robin over the tenants with waiting tasks: one tenant's burst waits
 * its turn behind everyone else's next task. */
static struct rt_task *dequeue(struct sbx_runtime *rt)
{
    struct rt_tenant *q = rt->ring;
    if (!q)
        return NULL;
    struct rt_task *t = q->head;
    q->head = t->next;
    if (!q->head)
        q->tail = NULL;
    q->queued--;
    rt->queued--;
    /* Move this tenant to the back (or drop it when empty). */
    rt->ring = q->next;
    if (q->queued) {
        q->next = NULL;
        struct rt_tenant **p = &rt->ring;
        while (*p)
            p = &(*p)->next;
        *p = q;
    } else {
        free(q);
    }
    t->next = NULL;
    return t;
}

/* Into its tenant's queue, at the back or the front (the tenant joins the
 * ring if it is not in it); -1 only when a tenant queue cannot be made. */
int rt_queue_put(struct sbx_runtime *rt, struct rt_task *t, bool front)
{
    struct rt_tenant *q = rt_tenant_queue(rt, t->clone.tenant, true);
    if (!q)
        return -1;
    if (front) {
        t->next = q->head;
        q->head = t;
        if (!q->tail)
            q->tail = t;
    } else {
        t->next = NULL;
        if (q->tail)
            q->tail->next = t;
        else
            q->head = t;
        q->tail = t;
    }
    q->queued++;
    rt->queued++;
    return 0;
}

bool rt_launch(struct sbx_runtime *rt, struct rt_task *t)
{
    sbx_err e = {0};
    int ws = rt_task_workspace(t, &e);
    if (ws == 0)
        return false;
    if (ws < 0 || rt_task_start(t, &e) < 0) {
        /* The task could not even start: it failed, with the reason. */
        char msg[600], why[300];
        sbx_err_format(&e, msg, sizeof(msg));
        if (t->t) {
            sbx_task_free(t->t);
            t->t = NULL;
        }
        sbx_log(SBX_LOG_WARN, "task failed to start id=%s error=%s", t->id,
                sbx_log_safe(msg, why, sizeof(why)));
        rt_finish(t, SBX_TASK_FAILED, msg, NULL, NULL, 0, NULL, 0, 125);
        return true;
    }
    rt->running++;
    return true;
}

void rt_start_next(struct sbx_runtime *rt)
{
    /* Every queued task is looked at, in the queue's fair order, while there
     * is room; those whose session is still being set up are held aside and
     * go back to the front of their tenants' queues, in their order (the
     * session's readiness, or its end, calls us again). A task whose clone's
     * workspace image is being formatted keeps its place: it holds a slot
     * until the format's end starts it. */
    struct rt_task *held = NULL;
    while (rt->running + rt->preparing < rt->settings.max_concurrent) {
        struct rt_task *t = dequeue(rt);
        if (!t)
            break;
        struct rt_session *x = rt_find_session(rt, &t->clone, t->session);
        if (x && !x->ready) {
            t->next = held; /* reversed: pushed back to the front below */
            held = t;
            continue;
        }
        rt_launch(rt, t);
    }
    while (held) {
        struct rt_task *t = held;
        held = t->next;
        if (rt_queue_put(rt, t, true) < 0)
            rt_finish(t, SBX_TASK_FAILED, "out of memory", NULL, NULL, 0, NULL, 0, 125);
    }
}

struct rt_tenant *rt_tenant_queue(struct sbx_runtime *rt, const char *code, bool create)
{
    for (struct rt_tenant *q = rt->ring; q; q = q->next)
        if (strcmp(q->code, code) == 0)
            return q;
    if (!create)
        return NULL;
    struct rt_tenant *q = calloc(1, sizeof(*q));
    if (!q)
        return NULL;
    snprintf(q->code, sizeof(q->code), "%s", code);
    struct rt_tenant **p = &rt->ring;
    while (*p)
        p = &(*p)->next;
    *p = q;
    return q;
}

/* Remove a queued task from its tenant's queue. */
void rt_unqueue(struct sbx_runtime *rt, struct rt_task *t)
{
    struct rt_tenant *q = rt_tenant_queue(rt, t->clone.tenant, false);
    if (!q)
        return;
    struct rt_task *prev = NULL;
    for (struct rt_task *c = q->head; c; prev = c, c = c->next) {
        if (c != t)
            continue;
        if (prev)
            prev->next = c->next;
        else
            q->head = c->next;
        if (q->tail == c)
            q->tail = prev;
        q->queued--;
        rt->queued--;
        break;
    }
    if (!q->queued) {
        for (struct rt_tenant **p = &rt->ring; *p; p = &(*p)->next)
            if (*p == q) {
                *p = q->next;
                break;
            }
        free(q);
    }
}

void rt_fail_queued(struct sbx_runtime *rt, const struct sbx_clone *c, const char *error)
{
    for (struct rt_task *t = rt->active, *next; t; t = next) {
        next = t->all_next;
        if (t->t || strcmp(t->clone.tenant, c->tenant) != 0 || strcmp(t->clone.key, c->key) != 0 ||
            strcmp(t->clone.id, c->id) != 0)
            continue;
        rt_unqueue(rt, t);
        rt_finish(t, SBX_TASK_FAILED, error, NULL, NULL, 0, NULL, 0, 125);
    }
}
