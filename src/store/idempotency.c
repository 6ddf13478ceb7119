/* Idempotency keys of task creation: (tenant, key) names the task a POST
 * made, with a digest of the request it came with, for as long as the
 * daemon is told to keep it. A key goes with its task when the task is
 * pruned (ON DELETE CASCADE). */
#include "store/store_int.h"

#include <stdio.h>
#include <string.h>

static const char sql_get[] = "SELECT task_id, request_digest FROM idempotency_keys"
                              " WHERE tenant = ?1 AND key = ?2 AND created_at >= ?3";
static const char sql_put[] =
    "INSERT OR REPLACE INTO idempotency_keys (tenant, key, request_digest, task_id, created_at)"
    " VALUES (?1, ?2, ?3, ?4, ?5)";
static const char sql_expire[] = "DELETE FROM idempotency_keys WHERE created_at < ?1";

int sbx_store_idem_get(struct sbx_store *st, const char *tenant, const char *key,
                       int64_t not_before, char *task_id, size_t id_size, char *digest,
                       size_t digest_size, sbx_err *err)
{
    cleanup_stmt sqlite3_stmt *s = store_stmt(st, STMT_IDEM_GET, sql_get, err);
    if (!s)
        return -1;
    int rc = store_bind_text(s, 1, tenant);
    if (rc == SQLITE_OK)
        rc = store_bind_text(s, 2, key);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(s, 3, not_before);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return store_fail(st, err, rc, "read an idempotency key of tenant %s", tenant);
    if (rc == SQLITE_DONE)
        return 0;
    const char *id = (const char *)sqlite3_column_text(s, 0);
    const char *d = (const char *)sqlite3_column_text(s, 1);
    snprintf(task_id, id_size, "%s", id ? id : "");
    snprintf(digest, digest_size, "%s", d ? d : "");
    return 1;
}

int sbx_store_idem_put(struct sbx_store *st, const char *tenant, const char *key,
                       const char *digest, const char *task_id, int64_t now, int64_t not_before,
                       sbx_err *err)
{
    {
        cleanup_stmt sqlite3_stmt *s = store_stmt(st, STMT_IDEM_EXPIRE, sql_expire, err);
        if (!s)
            return -1;
        int rc = sqlite3_bind_int64(s, 1, not_before);
        if (rc == SQLITE_OK)
            rc = sqlite3_step(s);
        if (rc != SQLITE_DONE)
            return store_fail(st, err, rc, "forget the expired idempotency keys");
    }
    cleanup_stmt sqlite3_stmt *s = store_stmt(st, STMT_IDEM_PUT, sql_put, err);
    if (!s)
        return -1;
    int rc = store_bind_text(s, 1, tenant);
    if (rc == SQLITE_OK)
        rc = store_bind_text(s, 2, key);
    if (rc == SQLITE_OK)
        rc = store_bind_text(s, 3, digest);
    if (rc == SQLITE_OK)
        rc = store_bind_text(s, 4, task_id);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(s, 5, now);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    if (rc != SQLITE_DONE)
        return store_fail(st, err, rc, "record an idempotency key of tenant %s", tenant);
    return 0;
}
