/* The audit log: who did what to what, append-only. */
#include "store/store_int.h"

#include "base/time.h"

#define AUDIT_SINCE_MAX 10000

static const char sql_insert[] = "INSERT INTO audit (time, identity, action, target, detail)"
                                 " VALUES (?1, ?2, ?3, ?4, ?5)";
static const char sql_since[] = "SELECT seq, time, identity, action, target, detail FROM audit"
                                " WHERE seq > ?1 ORDER BY seq LIMIT ?2";

int sbx_store_audit_append(struct sbx_store *st, const struct sbx_store_audit *rec, sbx_err *err)
{
    if (store_enter(st, err) < 0)
        return -1;
    if (!rec->identity || !rec->identity[0] || !rec->action || !rec->action[0])
        return sbx_err_set(err, EINVAL, "store: audit record without identity or action");
    cleanup_stmt sqlite3_stmt *s = store_stmt(st, STMT_AUDIT_INSERT, sql_insert, err);
    if (!s)
        return -1;
    int rc = sqlite3_bind_int64(s, 1, rec->time ? rec->time : sbx_now_ms());
    if (rc == SQLITE_OK)
        rc = store_bind_text(s, 2, rec->identity);
    if (rc == SQLITE_OK)
        rc = store_bind_text(s, 3, rec->action);
    if (rc == SQLITE_OK)
        rc = store_bind_text(s, 4, rec->target ? rec->target : "");
    if (rc == SQLITE_OK)
        rc = store_bind_text(s, 5, rec->detail);
    if (rc != SQLITE_OK)
        return store_fail(st, err, rc, "audit %s", rec->action);
    return store_exec(st, s, err, "append to the audit log");
}

int sbx_store_audit_since(struct sbx_store *st, int64_t after_seq, unsigned limit,
                          sbx_store_audit_fn fn, void *ctx, sbx_err *err)
{
    if (store_enter(st, err) < 0)
        return -1;
    if (limit < 1 || limit > AUDIT_SINCE_MAX)
        return sbx_err_set(err, EINVAL, "store: audit limit %u is not within 1..%d", limit,
                           AUDIT_SINCE_MAX);
    cleanup_stmt sqlite3_stmt *s = store_stmt(st, STMT_AUDIT_SINCE, sql_since, err);
    if (!s)
        return -1;
    int rc = sqlite3_bind_int64(s, 1, after_seq);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int(s, 2, (int)limit);
    if (rc != SQLITE_OK)
        return store_fail(st, err, rc, "read the audit log");
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct sbx_store_audit rec = {
            .seq = sqlite3_column_int64(s, 0),
            .time = sqlite3_column_int64(s, 1),
            .identity = (const char *)sqlite3_column_text(s, 2),
            .action = (const char *)sqlite3_column_text(s, 3),
            .target = (const char *)sqlite3_column_text(s, 4),
            .detail = (const char *)sqlite3_column_text(s, 5),
        };
        st->in_callback = true;
        int r = fn(ctx, &rec);
        st->in_callback = false;
        if (r)
            return r;
    }
    if (rc != SQLITE_DONE)
        return store_fail(st, err, rc, "read the audit log");
    return 0;
}
