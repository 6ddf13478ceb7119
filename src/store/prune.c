/* Retention: old tasks (with their output) and idle sessions' events go, in
 * bounded batches so that no call holds the loop for long. */
#include "store/store_int.h"

#include <string.h>

/* Per call; a task may carry 2 x 10 MB of output to free. */
#define PRUNE_TASKS_BATCH 64
#define PRUNE_EVENTS_BATCH 5000
#define PRUNE_STREAMS_BATCH 1000

static const char sql_tasks_age[] =
    "DELETE FROM tasks WHERE id IN (SELECT id FROM tasks"
    " WHERE ended_at > 0 AND ended_at < ?1 AND status NOT IN ('pending', 'running') LIMIT ?2)";
static const char sql_tasks_count[] = "DELETE FROM tasks WHERE id IN (SELECT id FROM tasks"
                                      " WHERE status NOT IN ('pending', 'running')"
                                      " ORDER BY created_at DESC, id DESC LIMIT ?2 OFFSET ?1)";
static const char sql_events[] =
    "DELETE FROM events WHERE rowid IN (SELECT e.rowid FROM event_streams s"
    " JOIN events e ON e.session_id = s.session_id WHERE s.last_time < ?1 LIMIT ?2)";
static const char sql_streams[] =
    "DELETE FROM event_streams WHERE rowid IN (SELECT s.rowid FROM event_streams s"
    " WHERE s.last_time < ?1"
    " AND NOT EXISTS (SELECT 1 FROM events e WHERE e.session_id = s.session_id) LIMIT ?2)";

struct prune_ctx {
    int64_t older_than;
    uint64_t max_tasks;
    struct sbx_store_prune_counts *counts;
};

/* Run a DELETE of at most batch rows; add what it deleted to *n. */
static int delete_batch(struct sbx_store *st, enum store_stmt id, const char *sql, int64_t p1,
                        int64_t batch, uint64_t *n, bool *more, sbx_err *err, const char *what)
{
    cleanup_stmt sqlite3_stmt *s = store_stmt(st, id, sql, err);
    if (!s)
        return -1;
    int rc = sqlite3_bind_int64(s, 1, p1);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(s, 2, batch);
    if (rc != SQLITE_OK)
        return store_fail(st, err, rc, "%s", what);
    if (store_exec(st, s, err, what) < 0)
        return -1;
    int64_t deleted = sqlite3_changes64(st->db);
    *n += (uint64_t)deleted;
    if (deleted >= batch)
        *more = true;
    return 0;
}

static int prune_in_txn(struct sbx_store *st, void *vctx, sbx_err *err)
{
    struct prune_ctx *c = vctx;
    struct sbx_store_prune_counts *n = c->counts;

    if (c->older_than > 0) {
        if (delete_batch(st, STMT_PRUNE_TASKS_AGE, sql_tasks_age, c->older_than, PRUNE_TASKS_BATCH,
                         &n->tasks, &n->more, err, "prune old tasks") < 0)
            return -1;
    }
    if (c->max_tasks > 0) {
        int64_t keep = c->max_tasks > INT64_MAX ? INT64_MAX : (int64_t)c->max_tasks;
        if (delete_batch(st, STMT_PRUNE_TASKS_COUNT, sql_tasks_count, keep, PRUNE_TASKS_BATCH,
                         &n->tasks, &n->more, err, "prune tasks beyond the count") < 0)
            return -1;
    }
    if (c->older_than > 0) {
        if (delete_batch(st, STMT_PRUNE_EVENTS, sql_events, c->older_than, PRUNE_EVENTS_BATCH,
                         &n->events, &n->more, err, "prune idle sessions' events") < 0 ||
            delete_batch(st, STMT_PRUNE_STREAM_DROP, sql_streams, c->older_than,
                         PRUNE_STREAMS_BATCH, &n->sessions, &n->more, err,
                         "prune idle sessions") < 0 ||
            store_prune_conversations(st, c->older_than, &n->more, err) < 0)
            return -1;
    }
    return 0;
}

/* ---- the audit log ---- */

#define PRUNE_AUDIT_BATCH 2000

/* The oldest records, at most a batch: the last seq of those that may go. */
static const char sql_audit_head[] = "SELECT seq, time, (SELECT max(seq) FROM audit) FROM audit"
                                     " ORDER BY seq LIMIT ?1";
static const char sql_audit_delete[] = "DELETE FROM audit WHERE seq <= ?1";

struct audit_ctx {
    int64_t older_than;
    uint64_t max_rows;
    uint64_t *deleted;
    bool *more;
};

static int audit_in_txn(struct sbx_store *st, void *vctx, sbx_err *err)
{
    struct audit_ctx *c = vctx;
    int64_t last = -1;
    int n = 0;
    {
        cleanup_stmt sqlite3_stmt *s = store_stmt(st, STMT_PRUNE_AUDIT_HEAD, sql_audit_head, err);
        if (!s)
            return -1;
        int rc = sqlite3_bind_int64(s, 1, PRUNE_AUDIT_BATCH);
        if (rc != SQLITE_OK)
            return store_fail(st, err, rc, "prune the audit log");
        while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
            int64_t seq = sqlite3_column_int64(s, 0), time = sqlite3_column_int64(s, 1);
            int64_t newest = sqlite3_column_int64(s, 2);
            bool too_many = c->max_rows && (uint64_t)(newest - seq) >= c->max_rows;
            bool too_old = c->older_than > 0 && time < c->older_than;
            if (!too_many && !too_old)
                break;
            last = seq;
            n++;
        }
        if (rc != SQLITE_ROW && rc != SQLITE_DONE)
            return store_fail(st, err, rc, "prune the audit log");
    }
    if (last < 0)
        return 0;
    cleanup_stmt sqlite3_stmt *d = store_stmt(st, STMT_PRUNE_AUDIT, sql_audit_delete, err);
    if (!d)
        return -1;
    int rc = sqlite3_bind_int64(d, 1, last);
    if (rc != SQLITE_OK)
        return store_fail(st, err, rc, "prune the audit log");
    if (store_exec(st, d, err, "prune the audit log") < 0)
        return -1;
    *c->deleted += (uint64_t)sqlite3_changes64(st->db);
    if (n >= PRUNE_AUDIT_BATCH)
        *c->more = true;
    return 0;
}

int sbx_store_prune_audit(struct sbx_store *st, int64_t older_than_ms, uint64_t max_rows,
                          uint64_t *deleted, bool *more, sbx_err *err)
{
    *deleted = 0;
    *more = false;
    if (store_enter(st, err) < 0)
        return -1;
    if (!older_than_ms && !max_rows)
        return 0;
    struct audit_ctx c = {
        .older_than = older_than_ms, .max_rows = max_rows, .deleted = deleted, .more = more};
    return store_txn(st, audit_in_txn, &c, err) < 0 ? -1 : 0;
}

int sbx_store_prune(struct sbx_store *st, int64_t older_than_ms, uint64_t max_tasks,
                    struct sbx_store_prune_counts *counts, sbx_err *err)
{
    memset(counts, 0, sizeof(*counts));
    if (store_enter(st, err) < 0)
        return -1;
    struct prune_ctx c = {.older_than = older_than_ms, .max_tasks = max_tasks, .counts = counts};
    if (store_txn(st, prune_in_txn, &c, err) < 0) {
        memset(counts, 0, sizeof(*counts));
        return -1;
    }
    return 0;
}
