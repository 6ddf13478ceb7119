/* The per-session event streams: each event stored first, then pushed to the
 * live subscribers of its stream; a subscriber that fell behind catches up
 * from the store. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/time.h"
#include "runtime/runtime_int.h"

static void push(struct sbx_subscriber *s, uint64_t id, const char *type, const char *json)
{
    if (s->behind || id <= s->last_id)
        return;
    if (s->send(s->ud, id, type, json) < 0) {
        s->behind = true;
        return;
    }
    s->last_id = id;
}

/* The store's name of a tenant's session: segments never hold ':'. */
static void stream_key(char *out, size_t len, const char *tenant, const char *session)
{
    snprintf(out, len, "%s:%s", tenant, session);
}

int sbx_runtime_emit(struct sbx_runtime *rt, const char *tenant, const char *session,
                     const char *type, json_t *data, sbx_err *err)
{
    int64_t t = sbx_now_ms();
    char key[2 * SBX_SEGMENT_MAX + 2];
    stream_key(key, sizeof(key), tenant, session);
    json_t *body = json_pack("{s:s, s:o, s:s, s:o}", "type", type, "time", sbx_json_time(t),
                             "sessionId", session, "data", data ? data : json_object());
    char *text = body ? json_dumps(json_object_get(body, "data"), JSON_COMPACT) : NULL;
    uint64_t id = 0;
    int rc = -1;
    if (!text)
        sbx_err_set(err, ENOMEM, "event");
    else if (sbx_store_event_append(rt->o.store, key, type, t, text, &id, err) == 0) {
        json_object_set_new(body, "id", json_integer((json_int_t)id));
        char *full = json_dumps(body, JSON_COMPACT);
        for (struct sbx_subscriber *s = rt->subs; full && s; s = s->next)
            if (strcmp(s->key, key) == 0)
                push(s, id, type, full);
        free(full);
        rc = 0;
    }
    free(text);
    json_decref(body);
    return rc;
}

void rt_emit(struct sbx_runtime *rt, const char *tenant, const char *session, const char *type,
             json_t *data)
{
    sbx_err e = {0};
    if (sbx_runtime_emit(rt, tenant, session, type, data, &e) == 0)
        return;
    char tenant_s[128], session_s[128], msg[600], why[300];
    sbx_log(SBX_LOG_WARN, "event lost tenant=%s session=%s type=%s error=%s",
            sbx_log_safe(tenant, tenant_s, sizeof(tenant_s)),
            sbx_log_safe(session, session_s, sizeof(session_s)), type,
            sbx_log_safe(sbx_err_format(&e, msg, sizeof(msg)), why, sizeof(why)));
}

struct replay_ctx {
    struct sbx_subscriber *s;
};

static int replay_one(void *ctx, const struct sbx_store_event *ev)
{
    struct sbx_subscriber *s = ((struct replay_ctx *)ctx)->s;
    json_error_t je;
    json_t *data = json_loads(ev->data, 0, &je);
    json_t *body = json_pack("{s:I, s:s, s:o, s:s, s:o}", "id", (json_int_t)ev->id, "type",
                             ev->type, "time", sbx_json_time(ev->time), "sessionId", s->session,
                             "data", data ? data : json_object());
    char *full = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    int rc = 0;
    if (!full || s->send(s->ud, ev->id, ev->type, full) < 0)
        rc = 1; /* full again: stop, resume later */
    else
        s->last_id = ev->id;
    free(full);
    return rc;
}

/* Send what the store holds after s->last_id; leaves s->behind set when the
 * client's buffer filled up again. */
static int catch_up(struct sbx_runtime *rt, struct sbx_subscriber *s, sbx_err *err)
{
    struct sbx_store_event_range range;
    struct replay_ctx ctx = {s};
    s->behind = false;
    if (sbx_store_events_since(rt->o.store, s->key, s->last_id, 1, NULL, NULL, &range, err) < 0)
        return -1;
    uint64_t from, to;
    if (sbx_store_events_lost(&range, s->last_id, &from, &to) == 0) {
        /* Its id is that of the last event lost: a client resuming after
         * it is not told again. */
        json_t *body =
            json_pack("{s:I, s:s, s:o, s:s, s:{s:I, s:I}}", "id", (json_int_t)to, "type",
                      "events_lost", "time", sbx_json_time(sbx_now_ms()), "sessionId", s->session,
                      "data", "from", (json_int_t)from, "to", (json_int_t)to);
        char *full = body ? json_dumps(body, JSON_COMPACT) : NULL;
        json_decref(body);
        int sent = full ? s->send(s->ud, to, "events_lost", full) : -1;
        free(full);
        if (sent < 0) {
            s->behind = true;
            return 0;
        }
        s->last_id = to;
    } else if (s->last_id > range.last) {
        /* Beyond the stream's end: it was pruned and began again (ids
         * restart), or the id was never ours. Say so, with id 0 (a client
         * that resumes after it starts from the beginning), then replay
         * the stream from its start. */
        json_t *body = json_pack("{s:I, s:s, s:o, s:s, s:{s:I, s:I, s:s}}", "id", (json_int_t)0,
                                 "type", "stream_reset", "time", sbx_json_time(sbx_now_ms()),
                                 "sessionId", s->session, "data", "lastEventId",
                                 (json_int_t)s->last_id, "last", (json_int_t)range.last, "reason",
                                 "Last-Event-ID is beyond the stream's last event: the stream "
                                 "began again; it is replayed from its start");
        char *full = body ? json_dumps(body, JSON_COMPACT) : NULL;
        json_decref(body);
        int sent = full ? s->send(s->ud, 0, "stream_reset", full) : -1;
        free(full);
        s->last_id = 0;
        if (sent < 0) {
            s->behind = true;
            return 0;
        }
    }
    for (;;) {
        uint64_t before = s->last_id;
        int rc = sbx_store_events_since(rt->o.store, s->key, s->last_id, 500, replay_one, &ctx,
                                        NULL, err);
        if (rc < 0)
            return -1;
        if (rc > 0) {
            s->behind = true;
            return 0;
        }
        if (s->last_id == before)
            return 0;
    }
}

int sbx_runtime_subscribe(struct sbx_runtime *rt, struct sbx_subscriber *s, sbx_err *err)
{
    stream_key(s->key, sizeof(s->key), s->tenant, s->session);
    if (s->live_only) {
        /* From the newest event stored on: nothing of before is replayed. */
        struct sbx_store_event_range range;
        if (sbx_store_events_since(rt->o.store, s->key, UINT64_MAX, 1, NULL, NULL, &range, err) < 0)
            return -1;
        s->last_id = range.last;
        s->next = rt->subs;
        rt->subs = s;
        return 0;
    }
    if (catch_up(rt, s, err) < 0)
        return -1;
    s->next = rt->subs;
    rt->subs = s;
    return 0;
}

int sbx_runtime_subscribe_live(struct sbx_runtime *rt, struct sbx_subscriber *s, sbx_err *err)
{
    struct sbx_store_event_range range;
    stream_key(s->key, sizeof(s->key), s->tenant, s->session);
    if (sbx_store_events_since(rt->o.store, s->key, 0, 1, NULL, NULL, &range, err) < 0)
        return -1;
    s->last_id = range.last;
    s->behind = false;
    s->next = rt->subs;
    rt->subs = s;
    return 0;
}

void sbx_runtime_resume(struct sbx_runtime *rt, struct sbx_subscriber *s)
{
    if (s->behind)
        catch_up(rt, s, NULL);
}

void sbx_runtime_unsubscribe(struct sbx_runtime *rt, struct sbx_subscriber *s)
{
    for (struct sbx_subscriber **p = &rt->subs; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            return;
        }
}
