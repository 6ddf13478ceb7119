/* Inside the store: the connection, the statement cache and the helpers that
 * every part of it (tasks, events, clones, audit, retention) shares. Not for
 * use outside src/store/ (tests excepted). */
#pragma once

#include <sqlite3.h>

#include "store/errnum.h"
#include "store/migrate.h"
#include "store/store.h"

/* One slot per cached statement; each part keeps its SQL next to its code
 * and names its slot here. */
enum store_stmt {
    STMT_BEGIN,
    STMT_BEGIN_READ,
    STMT_COMMIT,
    STMT_ROLLBACK,
    STMT_TASK_INSERT,
    STMT_TASK_TRANSITION,
    STMT_TASK_STATUS,
    STMT_TASK_OUTPUT,
    STMT_TASK_GET,
    STMT_TASK_GET_OUTPUT,
    STMT_TASK_COUNT,
    STMT_TASK_COUNT_ALL,
    STMT_RECOVER_SANDBOXES,
    STMT_RECOVER,
    STMT_EVENT_NEXT_ID,
    STMT_EVENT_INSERT,
    STMT_EVENT_TRIM,
    STMT_EVENT_RANGE,
    STMT_EVENT_SINCE,
    STMT_CLONE_GET,
    STMT_CLONE_TOP,
    STMT_CLONE_OVERLAP,
    STMT_CLONE_INSERT,
    STMT_CLONE_COUNT,
    STMT_AUDIT_INSERT,
    STMT_AUDIT_SINCE,
    STMT_PRUNE_TASKS_AGE,
    STMT_PRUNE_TASKS_COUNT,
    STMT_PRUNE_EVENTS,
    STMT_PRUNE_STREAM_DROP,
    STMT_PRUNE_AUDIT_HEAD,
    STMT_PRUNE_AUDIT,
    STMT_IDEM_GET,
    STMT_IDEM_PUT,
    STMT_IDEM_EXPIRE,
    STMT__COUNT
};

/* Task listings: one statement per combination of filters, so each can use
 * its index. */
#define STORE_LIST_VARIANTS 64

struct sbx_store {
    sqlite3 *db;
    char *path;
    uint32_t event_bound;
    uint64_t output_max;   /* per stream of a task's output */
    uint64_t reserve_size; /* 0: no reserve file */
    char *reserve_path;    /* "<path>.reserve" */
    bool reserve_whole;    /* made to its full size, not spent since */
    int64_t reserve_tried; /* sbx_mono_ms() of the last try to make it */
    int write_errnum;      /* of the last failed write, 0 once one succeeds */
    char write_error[SBX_ERR_MSG_MAX];
    bool in_callback;   /* a caller's callback is running: no re-entry */
    int64_t changes;    /* sqlite3_total_changes64 when last looked at */
    int64_t changed_ms; /* sbx_mono_ms() when it last moved */
    bool shrunk;        /* the cache was released since then */
    sqlite3_stmt *stmts[STMT__COUNT];
    sqlite3_stmt *list_stmts[STORE_LIST_VARIANTS];
};

/* Fill err with "<what>: <SQLite's message>" and the errno that rc stands
 * for (store_errnum); returns -1. */
int store_fail(struct sbx_store *st, sbx_err *err, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The cached statement of slot id, prepared from sql on first use; NULL with
 * err when it cannot be prepared. Reset it after use (cleanup_stmt). */
sqlite3_stmt *store_stmt(struct sbx_store *st, enum store_stmt id, const char *sql, sbx_err *err);
/* Prepare once into *slot. */
sqlite3_stmt *store_prepare(struct sbx_store *st, sqlite3_stmt **slot, const char *sql,
                            sbx_err *err);

static inline void store_resetp(sqlite3_stmt **s)
{
    if (*s) {
        sqlite3_reset(*s);
        sqlite3_clear_bindings(*s);
    }
}
/* A statement handle reset (locks released, bindings cleared) at scope end. */
#define cleanup_stmt __attribute__((cleanup(store_resetp)))

/* A write failed for want of space: give up the reserve file (true when there
 * was one to give, so that the write is worth a second try). */
bool store_reserve_spend(struct sbx_store *st);

/* Fails with EBUSY when called from inside one of the store's callbacks. */
int store_enter(struct sbx_store *st, sbx_err *err);

/* Run fn in a BEGIN IMMEDIATE transaction: committed when fn returns >= 0,
 * rolled back when fn or the commit fails. Returns fn's value or -1. */
int store_txn(struct sbx_store *st, int (*fn)(struct sbx_store *st, void *ctx, sbx_err *err),
              void *ctx, sbx_err *err);
/* The same in a read transaction (a consistent snapshot, never a write). */
int store_read_txn(struct sbx_store *st, int (*fn)(struct sbx_store *st, void *ctx, sbx_err *err),
                   void *ctx, sbx_err *err);

/* Bind text (NULL binds NULL) / a blob (NULL binds NULL); SQLite's result. */
int store_bind_text(sqlite3_stmt *s, int idx, const char *v);
/* A statement prepared per call (few and rare ones), finalized at scope end
 * (store_cleanup_final); NULL with err. */
sqlite3_stmt *store_prep(struct sbx_store *st, const char *sql, sbx_err *err);
void store_finalizep(sqlite3_stmt **s);
#define store_cleanup_final __attribute__((cleanup(store_finalizep)))
/* Bind the text arguments v[0..n) as ?1..?n (and the time now in ms as ?9
 * when sql has it) and step to the end. */
int store_run(struct sbx_store *st, const char *sql, const char *const *v, int n, const char *what,
              sbx_err *err);
int store_bind_blob(sqlite3_stmt *s, int idx, const void *v, size_t len);

/* Step a statement that returns no row (or whose rows are ignored): 0, or -1
 * with err naming what. */
int store_exec(struct sbx_store *st, sqlite3_stmt *s, sbx_err *err, const char *what);

/* conversations.c: the agent's conversations idle since before older_than
 * (retention, inside prune's transaction); *more when the batch was full. */
int store_prune_conversations(struct sbx_store *st, int64_t older_than, bool *more, sbx_err *err);
