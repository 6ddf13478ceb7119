/* Records of an API surface that must outlive the daemon (schema v6): one
 * JSON document per (kind, id), of one tenant. The OpenSandbox API keeps its
 * sandboxes ("os_sandbox") and snapshots ("os_snapshot") here (store.h). */
#include "store/store_int.h"

int sbx_store_record_put(struct sbx_store *st, const char *kind, const char *id, const char *tenant,
                         const char *record, sbx_err *err)
{
    const char *v[] = {kind, id, tenant, record};
    return store_run(st,
                     "INSERT OR REPLACE INTO api_records (kind, id, tenant, record, updated_at)"
                     " VALUES (?1, ?2, ?3, ?4, ?9)",
                     v, 4, "record an API record", err);
}

int sbx_store_record_delete(struct sbx_store *st, const char *kind, const char *id, sbx_err *err)
{
    const char *v[] = {kind, id};
    return store_run(st, "DELETE FROM api_records WHERE kind = ?1 AND id = ?2", v, 2,
                     "delete an API record", err);
}

int sbx_store_records(struct sbx_store *st, const char *kind,
                      int (*fn)(void *ud, const char *id, const char *tenant, const char *record),
                      void *ud, sbx_err *err)
{
    if (store_enter(st, err) < 0)
        return -1;
    store_cleanup_final sqlite3_stmt *s = store_prep(
        st, "SELECT id, tenant, record FROM api_records WHERE kind = ?1 ORDER BY updated_at, id",
        err);
    if (!s)
        return -1;
    int rc = store_bind_text(s, 1, kind);
    st->in_callback = true;
    while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (fn(ud, (const char *)sqlite3_column_text(s, 0), (const char *)sqlite3_column_text(s, 1),
               (const char *)sqlite3_column_text(s, 2)) != 0) {
            st->in_callback = false;
            return 0;
        }
        rc = SQLITE_OK;
    }
    st->in_callback = false;
    if (rc != SQLITE_DONE)
        return store_fail(st, err, rc, "read the API records");
    return 0;
}
