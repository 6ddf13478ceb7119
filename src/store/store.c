#include "store/store_int.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

#include "base/log.h"
#include "base/time.h"

#define DEFAULT_BUSY_TIMEOUT_MS 50
#define DEFAULT_EVENT_BOUND 10000
/* The WAL is truncated back to this size after a checkpoint. */
#define WAL_SIZE_LIMIT (64 << 20)

int store_fail(struct sbx_store *st, sbx_err *err, int rc, const char *fmt, ...)
{
    char what[160];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    /* sqlite3_errmsg() describes the last call on the connection, which may be
     * a later reset: prefer the message of rc itself when they disagree. */
    const char *msg = st && st->db && sqlite3_extended_errcode(st->db) == rc
                          ? sqlite3_errmsg(st->db)
                          : sqlite3_errstr(rc);
    int errnum = store_errnum(st ? st->db : NULL, rc);
    /* What says the file cannot be written (as opposed to a refused value):
     * the store is not healthy until a write succeeds again. */
    int primary = rc & 0xff;
    if (st && (primary == SQLITE_FULL || primary == SQLITE_IOERR || primary == SQLITE_READONLY ||
               primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB)) {
        st->write_errnum = errnum;
        snprintf(st->write_error, sizeof(st->write_error), "%s: %s", what, msg);
    }
    return sbx_err_set(err, errnum, "store: %s: %s", what, msg);
}

sqlite3_stmt *store_prepare(struct sbx_store *st, sqlite3_stmt **slot, const char *sql,
                            sbx_err *err)
{
    if (*slot)
        return *slot;
    int rc = sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT, slot, NULL);
    if (rc != SQLITE_OK) {
        *slot = NULL;
        store_fail(st, err, rc, "prepare \"%.60s\"", sql);
        return NULL;
    }
    return *slot;
}

sqlite3_stmt *store_stmt(struct sbx_store *st, enum store_stmt id, const char *sql, sbx_err *err)
{
    return store_prepare(st, &st->stmts[id], sql, err);
}

int store_enter(struct sbx_store *st, sbx_err *err)
{
    if (st->in_callback)
        return sbx_err_set(err, EBUSY, "store: called from inside one of its own callbacks");
    return 0;
}

int store_bind_text(sqlite3_stmt *s, int idx, const char *v)
{
    return v ? sqlite3_bind_text(s, idx, v, -1, SQLITE_STATIC) : sqlite3_bind_null(s, idx);
}

int store_bind_blob(sqlite3_stmt *s, int idx, const void *v, size_t len)
{
    if (!v)
        return sqlite3_bind_null(s, idx);
    return sqlite3_bind_blob64(s, idx, v, len, SQLITE_STATIC);
}

static int step_all(sqlite3_stmt *s)
{
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW)
        ;
    return rc;
}

int store_exec(struct sbx_store *st, sqlite3_stmt *s, sbx_err *err, const char *what)
{
    bool writes = !sqlite3_stmt_readonly(s);
    int rc = step_all(s);
    /* A write of its own (outside a transaction) that met a full disk gets
     * the reserve's room and one more try; inside one, store_txn retries. */
    if (writes && rc != SQLITE_DONE && store_errnum(st->db, rc) == ENOSPC &&
        sqlite3_get_autocommit(st->db) && store_reserve_spend(st)) {
        sqlite3_reset(s);
        rc = step_all(s);
    }
    if (rc != SQLITE_DONE)
        return store_fail(st, err, rc, "%s", what);
    if (writes && sqlite3_get_autocommit(st->db))
        st->write_errnum = 0;
    return 0;
}

static int simple(struct sbx_store *st, enum store_stmt id, const char *sql, sbx_err *err)
{
    cleanup_stmt sqlite3_stmt *s = store_stmt(st, id, sql, err);
    if (!s)
        return -1;
    return store_exec(st, s, err, sql);
}

static void rollback(struct sbx_store *st)
{
    /* After SQLITE_FULL or an I/O error SQLite may already have rolled the
     * transaction back itself; only an open one is ended here. */
    if (!sqlite3_get_autocommit(st->db))
        simple(st, STMT_ROLLBACK, "ROLLBACK", NULL);
}

static int run_txn(struct sbx_store *st, enum store_stmt begin, const char *begin_sql,
                   int (*fn)(struct sbx_store *st, void *ctx, sbx_err *err), void *ctx,
                   sbx_err *err)
{
    if (simple(st, begin, begin_sql, err) < 0)
        return -1;
    int r = fn(st, ctx, err);
    if (r < 0) {
        rollback(st);
        return -1;
    }
    if (simple(st, STMT_COMMIT, "COMMIT", err) < 0) {
        rollback(st);
        return -1;
    }
    if (begin == STMT_BEGIN)
        st->write_errnum = 0;
    return r;
}

int store_txn(struct sbx_store *st, int (*fn)(struct sbx_store *st, void *ctx, sbx_err *err),
              void *ctx, sbx_err *err)
{
    sbx_err local = {0};
    sbx_err *e = err ? err : &local;
    int r = run_txn(st, STMT_BEGIN, "BEGIN IMMEDIATE", fn, ctx, e);
    /* A full disk: the reserve's room for one more try (fn's effects were
     * rolled back). */
    if (r < 0 && e->errnum == ENOSPC && store_reserve_spend(st))
        r = run_txn(st, STMT_BEGIN, "BEGIN IMMEDIATE", fn, ctx, e);
    return r;
}

/* ---- The reserve and the store's health ----------------------------------- */

/* How often a spent reserve is made again, at most. */
#define RESERVE_RETRY_MS 1000
/* Below this much free space on its filesystem the store is not healthy: a
 * write needs room for its WAL frames. */
#define STORE_MIN_FREE (1u << 20)

static int reserve_make(struct sbx_store *st, sbx_err *err)
{
    if (!st->reserve_size || st->reserve_whole)
        return 0;
    st->reserve_tried = sbx_mono_ms();
    cleanup_fd int fd =
        open(st->reserve_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
    if (fd < 0)
        return sbx_err_set(err, errno, "store: reserve %s", st->reserve_path);
    int rc = posix_fallocate(fd, 0, (off_t)st->reserve_size);
    if (rc != 0) {
        /* Nothing half made stays to take the room a write needs. */
        (void)!ftruncate(fd, 0);
        return sbx_err_set(err, rc, "store: cannot make its reserve of %llu bytes (%s)",
                           (unsigned long long)st->reserve_size, st->reserve_path);
    }
    st->reserve_whole = true;
    return 0;
}

bool store_reserve_spend(struct sbx_store *st)
{
    if (!st->reserve_whole)
        return false;
    st->reserve_whole = false;
    if (truncate(st->reserve_path, 0) < 0)
        return false;
    sbx_log(SBX_LOG_WARN,
            "store: the disk is full: its reserve of %llu bytes is given up "
            "(made again once there is room)",
            (unsigned long long)st->reserve_size);
    return true;
}

int sbx_store_health(struct sbx_store *st, sbx_err *err)
{
    if (st->reserve_size && !st->reserve_whole &&
        sbx_mono_ms() - st->reserve_tried >= RESERVE_RETRY_MS) {
        sbx_err e = {0};
        if (reserve_make(st, &e) == 0 && st->write_errnum == ENOSPC)
            st->write_errnum = 0; /* room again: the next write may tell otherwise */
    }
    if (st->reserve_size && !st->reserve_whole)
        return sbx_err_set(err, ENOSPC,
                           "store: the disk is full (the store's reserve of %llu bytes cannot be "
                           "made)",
                           (unsigned long long)st->reserve_size);
    if (st->write_errnum)
        return sbx_err_set(err, st->write_errnum, "store: writes fail: %s", st->write_error);
    struct statvfs vfs;
    if (statvfs(st->path, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < STORE_MIN_FREE)
        return sbx_err_set(err, ENOSPC, "store: the disk is full (%llu bytes free)",
                           (unsigned long long)vfs.f_bavail * vfs.f_frsize);
    return 0;
}

bool sbx_store_shrink_when_idle(struct sbx_store *st, int64_t idle_ms)
{
    int64_t n = sqlite3_total_changes64(st->db), now = sbx_mono_ms();
    if (n != st->changes || !st->changed_ms) {
        st->changes = n;
        st->changed_ms = now;
        st->shrunk = false;
        return false;
    }
    if (st->shrunk || now - st->changed_ms < idle_ms)
        return false;
    sqlite3_db_release_memory(st->db);
    st->shrunk = true;
    return true;
}

uint64_t sbx_store_output_max(const struct sbx_store *st)
{
    return st->output_max;
}

int store_read_txn(struct sbx_store *st, int (*fn)(struct sbx_store *st, void *ctx, sbx_err *err),
                   void *ctx, sbx_err *err)
{
    return run_txn(st, STMT_BEGIN_READ, "BEGIN DEFERRED", fn, ctx, err);
}

/* Create the file ourselves, mode 0600, so that neither it nor its -wal and
 * -shm files (SQLite gives them the database's mode) are ever readable by
 * others: task output may hold secrets. */
static int create_private(const char *path, sbx_err *err)
{
    cleanup_fd int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return sbx_err_set(err, errno, "store: open %s", path);
    return 0;
}

/* A pragma whose single result (if any) is checked against want. */
static int pragma(struct sbx_store *st, const char *sql, const char *want, sbx_err *err)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    if (rc != SQLITE_OK)
        return store_fail(st, err, rc, "%s", sql);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW && want) {
        const char *got = (const char *)sqlite3_column_text(s, 0);
        if (!got || strcmp(got, want) != 0) {
            sbx_err_set(err, ENOTSUP, "store: %s: %s: got \"%s\", want \"%s\"", st->path, sql,
                        got ? got : "", want);
            sqlite3_finalize(s);
            return -1;
        }
    } else if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        sqlite3_finalize(s);
        return store_fail(st, err, rc, "%s", sql);
    }
    sqlite3_finalize(s);
    return 0;
}

static int configure(struct sbx_store *st, const struct sbx_store_options *opts, sbx_err *err)
{
    uint32_t busy = opts && opts->busy_timeout_ms ? opts->busy_timeout_ms : DEFAULT_BUSY_TIMEOUT_MS;
    char sql[64];

    /* No extensions, no attached files, no writable schema. The schema stays
     * trusted (SQLite's default): our CHECK constraints use json_valid(),
     * which SQLite 3.40 does not yet flag as innocuous, and the file is the
     * daemon's own, mode 0600. */
    sqlite3_db_config(st->db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
    sqlite3_db_config(st->db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, NULL);
    sqlite3_limit(st->db, SQLITE_LIMIT_ATTACHED, 0);
    sqlite3_busy_timeout(st->db, (int)(busy > 60000 ? 60000 : busy));

    snprintf(sql, sizeof(sql), "PRAGMA journal_size_limit = %d", WAL_SIZE_LIMIT);
    if (pragma(st, "PRAGMA journal_mode = WAL", "wal", err) < 0 ||
        pragma(st, "PRAGMA synchronous = NORMAL", NULL, err) < 0 ||
        pragma(st, "PRAGMA foreign_keys = ON", NULL, err) < 0 ||
        pragma(st, "PRAGMA foreign_keys", "1", err) < 0 ||
        pragma(st, "PRAGMA temp_store = MEMORY", NULL, err) < 0 || pragma(st, sql, NULL, err) < 0)
        return -1;
    return 0;
}

int sbx_store_open(const char *path, const struct sbx_store_options *opts, struct sbx_store **out,
                   sbx_err *err)
{
    struct sbx_store *st = calloc(1, sizeof(*st));
    if (!st)
        return sbx_err_set(err, ENOMEM, "store: allocate");
    st->event_bound = opts && opts->event_bound ? opts->event_bound : DEFAULT_EVENT_BOUND;
    st->output_max = opts && opts->output_max ? opts->output_max : SBX_STORE_OUTPUT_MAX;
    st->reserve_size = opts ? opts->reserve_bytes : 0;
    st->path = strdup(path);
    if (!st->path || asprintf(&st->reserve_path, "%s.reserve", path) < 0) {
        free(st->path);
        free(st);
        return sbx_err_set(err, ENOMEM, "store: allocate");
    }
    if (st->output_max > SBX_STORE_OUTPUT_LIMIT) {
        sbx_err_set(err, EINVAL, "store: outputs of %llu bytes are over SQLite's bound (%llu)",
                    (unsigned long long)st->output_max, (unsigned long long)SBX_STORE_OUTPUT_LIMIT);
        goto fail;
    }
    if (create_private(path, err) < 0 || reserve_make(st, err) < 0)
        goto fail;

    int rc = sqlite3_open_v2(path, &st->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW |
                                 SQLITE_OPEN_EXRESCODE,
                             NULL);
    if (rc != SQLITE_OK) {
        store_fail(st, err, rc, "open %s", path);
        goto fail;
    }
    if (configure(st, opts, err) < 0 ||
        store_migrate(st->db, path, store_migrations, store_n_migrations, err) < 0)
        goto fail;
    *out = st;
    return 0;
fail:
    sbx_store_close(st);
    return -1;
}

void sbx_store_close(struct sbx_store *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < STMT__COUNT; i++)
        sqlite3_finalize(st->stmts[i]);
    for (size_t i = 0; i < STORE_LIST_VARIANTS; i++)
        sqlite3_finalize(st->list_stmts[i]);
    sqlite3_close_v2(st->db);
    free(st->path);
    free(st->reserve_path);
    free(st);
}

int sbx_store_schema_version(struct sbx_store *st, int *version, sbx_err *err)
{
    sqlite3_stmt *s = NULL;
    if (store_enter(st, err) < 0)
        return -1;
    int rc = sqlite3_prepare_v2(st->db, "PRAGMA user_version", -1, &s, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        store_fail(st, err, rc, "read the schema version");
        sqlite3_finalize(s);
        return -1;
    }
    *version = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    return 0;
}

int sbx_store_check(struct sbx_store *st, bool quick, sbx_err *err)
{
    const char *sql = quick ? "PRAGMA quick_check(1)" : "PRAGMA integrity_check(1)";
    sqlite3_stmt *s = NULL;
    if (store_enter(st, err) < 0)
        return -1;
    int rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        store_fail(st, err, rc, "%s", sql);
        sqlite3_finalize(s);
        return -1;
    }
    const char *res = (const char *)sqlite3_column_text(s, 0);
    int r = 0;
    if (!res || strcmp(res, "ok") != 0)
        r = sbx_err_set(err, EIO, "store: %s: %s", st->path, res ? res : "no answer");
    sqlite3_finalize(s);
    return r;
}

/* Prepare sql; NULL with err. */
sqlite3_stmt *store_prep(struct sbx_store *st, const char *sql, sbx_err *err)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    if (rc != SQLITE_OK) {
        store_fail(st, err, rc, "prepare");
        sqlite3_finalize(s);
        return NULL;
    }
    return s;
}

void store_finalizep(sqlite3_stmt **s)
{
    sqlite3_finalize(*s);
}

/* Bind the text arguments v[0..n) as ?1..?n and step to the end. */
int store_run(struct sbx_store *st, const char *sql, const char *const *v, int n, const char *what,
              sbx_err *err)
{
    if (store_enter(st, err) < 0)
        return -1;
    store_cleanup_final sqlite3_stmt *s = store_prep(st, sql, err);
    if (!s)
        return -1;
    int rc = SQLITE_OK;
    for (int i = 0; i < n && rc == SQLITE_OK; i++)
        rc = store_bind_text(s, i + 1, v[i]);
    if (rc == SQLITE_OK && strstr(sql, "?9"))
        rc = sqlite3_bind_int64(s, 9, sbx_now_ms());
    if (rc != SQLITE_OK)
        return store_fail(st, err, rc, "%s", what);
    return store_exec(st, s, err, what);
}
