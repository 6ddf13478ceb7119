/* Per-session event streams: monotonic ids, a bound on what is kept, replay. */
#include "store/store_int.h"

#include <stdio.h>
#include <string.h>

#define SINCE_MAX 10000

/* Advance (or start) the session's counter; the new id comes back. The time
 * only moves forward, so retention never takes a live stream for an idle one
 * because of a late timestamp. */
static const char sql_next_id[] =
    "INSERT INTO event_streams (session_id, last_id, last_time) VALUES (?1, 1, ?2)"
    " ON CONFLICT (session_id) DO UPDATE SET last_id = last_id + 1,"
    " last_time = max(last_time, excluded.last_time)"
    " RETURNING last_id";
static const char sql_insert[] =
    "INSERT INTO events (session_id, id, type, time, data) VALUES (?1, ?2, ?3, ?4, ?5)";
static const char sql_trim[] = "DELETE FROM events WHERE session_id = ?1 AND id <= ?2";
static const char sql_range[] =
    "SELECT s.last_id, (SELECT min(e.id) FROM events e WHERE e.session_id = s.session_id)"
    " FROM event_streams s WHERE s.session_id = ?1";
static const char sql_since[] = "SELECT id, type, time, data FROM events"
                                " WHERE session_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3";

struct append_ctx {
    const char *session;
    const char *type;
    int64_t time;
    const char *data;
    uint64_t id;
};

static int next_id(struct sbx_store *st, struct append_ctx *c, sbx_err *err)
{
    cleanup_stmt sqlite3_stmt *s = store_stmt(st, STMT_EVENT_NEXT_ID, sql_next_id, err);
    if (!s)
        return -1;
    int rc = store_bind_text(s, 1, c->session);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(s, 2, c->time);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    if (rc != SQLITE_ROW)
        return store_fail(st, err, rc, "append event to session %s", c->session);
    c->id = (uint64_t)sqlite3_column_int64(s, 0);
    return store_exec(st, s, err, "append event");
}

static int append_in_txn(struct sbx_store *st, void *vctx, sbx_err *err)
{
    struct append_ctx *c = vctx;
    char what[160];

    if (next_id(st, c, err) < 0)
        return -1;
    snprintf(what, sizeof(what), "append event %llu to session %.64s", (unsigned long long)c->id,
             c->session);

    cleanup_stmt sqlite3_stmt *s = store_stmt(st, STMT_EVENT_INSERT, sql_insert, err);
    if (!s)
        return -1;
    int rc = store_bind_text(s, 1, c->session);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(s, 2, (int64_t)c->id);
    if (rc == SQLITE_OK)
        rc = store_bind_text(s, 3, c->type);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(s, 4, c->time);
    if (rc == SQLITE_OK)
        rc = store_bind_text(s, 5, c->data);
    if (rc != SQLITE_OK)
        return store_fail(st, err, rc, "%s", what);
    if (store_exec(st, s, err, what) < 0)
        return -1;

    if (c->id <= st->event_bound)
        return 0;
    cleanup_stmt sqlite3_stmt *t = store_stmt(st, STMT_EVENT_TRIM, sql_trim, err);
    if (!t)
        return -1;
    rc = store_bind_text(t, 1, c->session);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(t, 2, (int64_t)(c->id - st->event_bound));
    if (rc != SQLITE_OK)
        return store_fail(st, err, rc, "%s", what);
    return store_exec(st, t, err, "trim the events of a session");
}

int sbx_store_event_append(struct sbx_store *st, const char *session_id, const char *type,
                           int64_t time, const char *data, uint64_t *id, sbx_err *err)
{
    if (store_enter(st, err) < 0)
        return -1;
    if (!session_id || !session_id[0])
        return sbx_err_set(err, EINVAL, "store: append event: no session");
    if (!type || !type[0])
        return sbx_err_set(err, EINVAL, "store: append event: no type");
    struct append_ctx c = {
        .session = session_id,
        .type = type,
        .time = time,
        .data = data ? data : "{}",
    };
    if (store_txn(st, append_in_txn, &c, err) < 0)
        return -1;
    *id = c.id;
    return 0;
}

struct since_ctx {
    const char *session;
    uint64_t after;
    unsigned limit;
    sbx_store_event_fn fn;
    void *ctx;
    struct sbx_store_event_range range;
    int stopped; /* the callback's non-zero answer */
};

static int read_range(struct sbx_store *st, struct since_ctx *c, sbx_err *err)
{
    cleanup_stmt sqlite3_stmt *s = store_stmt(st, STMT_EVENT_RANGE, sql_range, err);
    if (!s)
        return -1;
    int rc = store_bind_text(s, 1, c->session);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    c->range.last = 0;
    if (rc == SQLITE_ROW)
        c->range.last = (uint64_t)sqlite3_column_int64(s, 0);
    else if (rc != SQLITE_DONE)
        return store_fail(st, err, rc, "read the events of session %.64s", c->session);
    if (rc == SQLITE_ROW && sqlite3_column_type(s, 1) != SQLITE_NULL)
        c->range.oldest = (uint64_t)sqlite3_column_int64(s, 1);
    else
        c->range.oldest = c->range.last + 1;
    return 0;
}

static int since_in_txn(struct sbx_store *st, void *vctx, sbx_err *err)
{
    struct since_ctx *c = vctx;

    if (read_range(st, c, err) < 0)
        return -1;
    if (!c->fn)
        return 0;
    cleanup_stmt sqlite3_stmt *s = store_stmt(st, STMT_EVENT_SINCE, sql_since, err);
    if (!s)
        return -1;
    int rc = store_bind_text(s, 1, c->session);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(s, 2, c->after > INT64_MAX ? INT64_MAX : (int64_t)c->after);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int(s, 3, (int)c->limit);
    if (rc != SQLITE_OK)
        return store_fail(st, err, rc, "replay session %.64s", c->session);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct sbx_store_event ev = {
            .session_id = c->session,
            .id = (uint64_t)sqlite3_column_int64(s, 0),
            .type = (const char *)sqlite3_column_text(s, 1),
            .time = sqlite3_column_int64(s, 2),
            .data = (const char *)sqlite3_column_text(s, 3),
        };
        st->in_callback = true;
        c->stopped = c->fn(c->ctx, &ev);
        st->in_callback = false;
        if (c->stopped)
            return 0;
    }
    if (rc != SQLITE_DONE)
        return store_fail(st, err, rc, "replay session %.64s", c->session);
    return 0;
}

int sbx_store_events_since(struct sbx_store *st, const char *session_id, uint64_t after_id,
                           unsigned limit, sbx_store_event_fn fn, void *ctx,
                           struct sbx_store_event_range *range, sbx_err *err)
{
    if (store_enter(st, err) < 0)
        return -1;
    if (!session_id || !session_id[0])
        return sbx_err_set(err, EINVAL, "store: replay events: no session");
    if (limit < 1 || limit > SINCE_MAX)
        return sbx_err_set(err, EINVAL, "store: replay limit %u is not within 1..%d", limit,
                           SINCE_MAX);
    struct since_ctx c = {
        .session = session_id,
        .after = after_id,
        .limit = limit,
        .fn = fn,
        .ctx = ctx,
    };
    if (store_read_txn(st, since_in_txn, &c, err) < 0)
        return -1;
    if (range)
        *range = c.range;
    return c.stopped;
}
