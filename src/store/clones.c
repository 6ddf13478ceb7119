/* Host uid/gid ranges of the clones, so that no two clones ever share a host
 * id. Ranges are recorded once and never move: files in a clone's workspace
 * are owned by its ids. */
#include "store/store_int.h"

#include "base/time.h"

#include <stdio.h>

static const char sql_get[] = "SELECT host_id_base FROM clones"
                              " WHERE tenant = ?1 AND clone_key = ?2 AND clone_id = ?3";
/* The first id above every recorded range. */
static const char sql_top[] = "SELECT max(host_id_base + host_id_count) FROM clones";
/* The recorded range with the highest base below end: since ranges never
 * overlap, it is the only one that can overlap [start, end). */
static const char sql_overlap[] =
    "SELECT host_id_base + host_id_count FROM clones WHERE host_id_base < ?1"
    " ORDER BY host_id_base DESC LIMIT 1";
static const char sql_insert[] =
    "INSERT INTO clones (tenant, clone_key, clone_id, host_id_base, host_id_count, created_at)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

struct clone_ctx {
    const char *tenant, *clone_key, *clone_id;
    uint64_t first, stride, max;
    uint32_t base;
};

/* The clone's three names as parameters 1-3 of s. */
static int bind_clone(sqlite3_stmt *s, const struct clone_ctx *c)
{
    int rc = store_bind_text(s, 1, c->tenant);
    if (rc == SQLITE_OK)
        rc = store_bind_text(s, 2, c->clone_key);
    if (rc == SQLITE_OK)
        rc = store_bind_text(s, 3, c->clone_id);
    return rc;
}

static int lookup(struct sbx_store *st, struct clone_ctx *c, bool *found, sbx_err *err)
{
    cleanup_stmt sqlite3_stmt *s = store_stmt(st, STMT_CLONE_GET, sql_get, err);
    if (!s)
        return -1;
    int rc = bind_clone(s, c);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return store_fail(st, err, rc, "read the host ids of clone %s/%s/%s", c->tenant,
                          c->clone_key, c->clone_id);
    *found = rc == SQLITE_ROW;
    if (*found)
        c->base = (uint32_t)sqlite3_column_int64(s, 0);
    return 0;
}

/* One integer (or -1 for NULL / no row) from a cached statement with an
 * optional parameter. */
static int query_end(struct sbx_store *st, enum store_stmt id, const char *sql, int64_t param,
                     int64_t *v, sbx_err *err)
{
    cleanup_stmt sqlite3_stmt *s = store_stmt(st, id, sql, err);
    if (!s)
        return -1;
    int rc = param >= 0 ? sqlite3_bind_int64(s, 1, param) : SQLITE_OK;
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return store_fail(st, err, rc, "read the clones' host id ranges");
    *v = rc == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL ? sqlite3_column_int64(s, 0)
                                                                      : -1;
    return 0;
}

/* The first slot at or after which [first + n * stride, …) clears end. */
static uint64_t slot_after(const struct clone_ctx *c, int64_t end)
{
    if (end <= (int64_t)c->first)
        return 0;
    return ((uint64_t)end - c->first + c->stride - 1) / c->stride;
}

/* The lowest free slot: just above every range when there is room (the usual
 * case, one query), else the first hole, jumping over each range in the
 * way. */
static int find_free(struct sbx_store *st, struct clone_ctx *c, uint64_t *slot, sbx_err *err)
{
    int64_t top;
    if (query_end(st, STMT_CLONE_TOP, sql_top, -1, &top, err) < 0)
        return -1;
    uint64_t n = slot_after(c, top);
    if (n < c->max) {
        *slot = n;
        return 0;
    }
    for (n = 0; n < c->max;) {
        uint64_t start = c->first + n * c->stride;
        int64_t end;
        if (query_end(st, STMT_CLONE_OVERLAP, sql_overlap, (int64_t)(start + c->stride), &end,
                      err) < 0)
            return -1;
        if (end <= (int64_t)start) {
            *slot = n;
            return 0;
        }
        uint64_t next = slot_after(c, end);
        n = next > n ? next : n + 1;
    }
    return sbx_err_set(err, ERANGE, "store: clone %s/%s/%s: all %llu host id ranges are taken",
                       c->tenant, c->clone_key, c->clone_id, (unsigned long long)c->max);
}

static int clone_in_txn(struct sbx_store *st, void *vctx, sbx_err *err)
{
    struct clone_ctx *c = vctx;
    bool found = false;
    uint64_t slot = 0;

    if (lookup(st, c, &found, err) < 0)
        return -1;
    if (found)
        return 0;
    if (find_free(st, c, &slot, err) < 0)
        return -1;
    c->base = (uint32_t)(c->first + slot * c->stride);

    cleanup_stmt sqlite3_stmt *s = store_stmt(st, STMT_CLONE_INSERT, sql_insert, err);
    if (!s)
        return -1;
    int rc = bind_clone(s, c);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(s, 4, c->base);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(s, 5, (int64_t)c->stride);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(s, 6, sbx_now_ms());
    char what[256];
    snprintf(what, sizeof(what), "record the host ids of clone %s/%s/%s", c->tenant, c->clone_key,
             c->clone_id);
    if (rc != SQLITE_OK)
        return store_fail(st, err, rc, "%s", what);
    return store_exec(st, s, err, what);
}

int sbx_store_clone_base(struct sbx_store *st, const char *tenant, const char *clone_key,
                         const char *clone_id, uint32_t first_base, uint32_t stride,
                         uint32_t max_clones, uint32_t *base, sbx_err *err)
{
    if (store_enter(st, err) < 0)
        return -1;
    if (!tenant || !tenant[0])
        return sbx_err_set(err, EINVAL, "store: clone host ids: no tenant");
    if (!stride || !max_clones)
        return sbx_err_set(err, EINVAL, "store: clone host ids: stride and count must be > 0");
    /* The last range must end below (uid_t)-1, which means "no id". */
    uint64_t end = first_base + (uint64_t)max_clones * stride;
    if (end > UINT32_MAX)
        return sbx_err_set(err, EINVAL,
                           "store: clone host ids: %u + %u x %u ids do not fit in 32 bits",
                           first_base, max_clones, stride);
    struct clone_ctx c = {
        .tenant = tenant,
        .clone_key = clone_key ? clone_key : "",
        .clone_id = clone_id ? clone_id : "",
        .first = first_base,
        .stride = stride,
        .max = max_clones,
    };
    if (store_txn(st, clone_in_txn, &c, err) < 0)
        return -1;
    *base = c.base;
    return 0;
}

static const char sql_count[] = "SELECT count(*) FROM clones WHERE tenant = ?1";

int sbx_store_clone_count(struct sbx_store *st, const char *tenant, uint64_t *n, sbx_err *err)
{
    cleanup_stmt sqlite3_stmt *s = store_stmt(st, STMT_CLONE_COUNT, sql_count, err);
    if (!s)
        return -1;
    int rc = store_bind_text(s, 1, tenant);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    if (rc != SQLITE_ROW)
        return store_fail(st, err, rc, "count the clones of tenant %s", tenant);
    *n = (uint64_t)sqlite3_column_int64(s, 0);
    return 0;
}

int sbx_store_clone_known(struct sbx_store *st, const char *tenant, const char *clone_key,
                          const char *clone_id, bool *known, sbx_err *err)
{
    struct clone_ctx c = {.tenant = tenant, .clone_key = clone_key, .clone_id = clone_id};
    return lookup(st, &c, known, err);
}
