/* The daemon's durable state: one SQLite file (WAL, synchronous=NORMAL,
 * foreign keys on) holding tasks and their output, per-session event streams,
 * the clones' host id ranges and the audit log.
 *
 * Made for a single-threaded daemon: one connection, no locks, prepared
 * statements cached in the store, every call short (a few statements, at most
 * one small transaction). A call that writes either happens whole or not at
 * all: on any failure its transaction is rolled back and the store stays
 * usable. A full disk is errnum ENOSPC, an I/O error EIO, both with a message
 * naming what was being written ("insert task <id>: database or disk is
 * full"); reads keep working.
 *
 * Conventions: every function that can fail returns -1 and fills err (see
 * base/err.h); times are milliseconds since the Unix epoch (int64_t); JSON
 * arguments are text, checked by SQLite's json_valid() (EINVAL when not).
 * Callbacks (events, audit) must not call back into the same store: such a
 * call fails with EBUSY. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/id.h"

struct sbx_store;

/* ---- Open / close ------------------------------------------------------ */

/* The schema version this build writes. A file with a higher
 * PRAGMA user_version (written by a newer sandboxd) is refused with ENOTSUP,
 * never opened and never downgraded. */
#define SBX_STORE_SCHEMA_VERSION 6

struct sbx_store_options {
    uint32_t busy_timeout_ms; /* 0: 50 ms */
    uint32_t event_bound;     /* events kept per session; 0: 10000 */
    /* Each stream of a task's output is kept up to this size (the largest
     * output limit a task can have); 0: SBX_STORE_OUTPUT_MAX; at most
     * SBX_STORE_OUTPUT_LIMIT. */
    uint64_t output_max;
    /* A file of this size is kept beside the database ("<path>.reserve") and
     * given up when a write finds the disk full, so that the write (a task's
     * end) still succeeds; made again once there is room. 0: none. */
    uint64_t reserve_bytes;
};

/* Open (creating it, mode 0600, when missing) the store at path, switch it to
 * WAL and apply the pending schema migrations in one transaction. opts may be
 * NULL. A file of another program (tables but no version of ours, or another
 * application_id) is refused with EINVAL. */
int sbx_store_open(const char *path, const struct sbx_store_options *opts, struct sbx_store **out,
                   sbx_err *err);
/* Finalize the statements and close the connection. NULL is a no-op. */
void sbx_store_close(struct sbx_store *st);
/* Whether the store can write: -1 (ENOSPC, EIO, EROFS…, with the reason)
 * while its last write failed and none has succeeded since, its reserve is
 * spent and cannot be made again (tried at most once a second), or its
 * filesystem has less than 1 MiB free. For readiness. */
int sbx_store_health(struct sbx_store *st, sbx_err *err);
/* Give back the memory a load grew: when nothing was written through the
 * store for idle_ms, free SQLite's cached pages (sqlite3_db_release_memory;
 * its page cache grows to cache_size, 2 MB, under load and stays there), once
 * per idle period. Cheap to call often (the daemon's 1-s timer). True when it
 * released now. */
bool sbx_store_shrink_when_idle(struct sbx_store *st, int64_t idle_ms);
/* The store's output_max. */
uint64_t sbx_store_output_max(const struct sbx_store *st);
/* PRAGMA user_version of the open file. */
int sbx_store_schema_version(struct sbx_store *st, int *version, sbx_err *err);
/* PRAGMA integrity_check (quick_check when quick): 0 when "ok", else EIO with
 * SQLite's first complaint. */
int sbx_store_check(struct sbx_store *st, bool quick, sbx_err *err);

/* ---- Tasks -------------------------------------------------------------- */

/* pending -> running | canceled | interrupted
 * running -> succeeded | failed | canceled | timeout | interrupted
 * The last five are final. Stored as their names. */
enum sbx_task_status {
    SBX_TASK_PENDING = 1, /* 0 stays free for "any" in filters */
    SBX_TASK_RUNNING,
    SBX_TASK_SUCCEEDED,
    SBX_TASK_FAILED,
    SBX_TASK_CANCELED,
    SBX_TASK_TIMEOUT,
    SBX_TASK_INTERRUPTED,
};
/* "pending", …; "unknown" for a value out of range. */
const char *sbx_task_status_name(enum sbx_task_status s);
/* The status named s; -1 (errnum EINVAL, naming s) when there is none. */
int sbx_task_status_parse(const char *s, enum sbx_task_status *out, sbx_err *err);
bool sbx_task_status_final(enum sbx_task_status s);
bool sbx_task_transition_legal(enum sbx_task_status from, enum sbx_task_status to);

/* Each stream of a task's output is kept up to the store's output_max (by
 * default this); the caller caps it, the store refuses more (EFBIG). */
#define SBX_STORE_OUTPUT_MAX (10u << 20)
/* The most output_max can be: well under SQLite's largest value (1e9 bytes). */
#define SBX_STORE_OUTPUT_LIMIT (512ull << 20)

/* One task's record. For insert, the caller owns every string; strings left
 * NULL are stored as "" (or as absent for language, code, limits, result).
 * A record returned by the store is one allocation, strings and outputs
 * included: release it with sbx_store_task_free(). The request's environment
 * is deliberately not part of the record (it may carry secrets). */
struct sbx_store_task {
    char id[SBX_ID_SIZE]; /* UUIDv7; insert makes one when empty */
    const char *tenant;   /* required */
    const char *clone_key;
    const char *clone_id;
    const char *session_id; /* "" when the task had a one-shot sandbox */
    const char *command;    /* JSON array text; NULL stored as "[]" */
    const char *language;   /* with code: the task was given as code */
    const char *code;
    const char *backend; /* NULL stored as "sandbox" */
    const char *skill;
    const char *skill_source;
    const char *skill_trust_level;
    const char *skill_version; /* "" for a flat skill, or not a skill task */
    const char *limits;        /* JSON object text of the applied limits, or NULL */
    const char *sandbox;       /* the engine's sandbox (cgroup) name, "" until known */
    enum sbx_task_status status;
    int64_t created_at; /* insert: 0 means now */
    int64_t started_at; /* 0 until running */
    int64_t ended_at;   /* 0 until final */
    const char *error;  /* "" when none */
    const char *result; /* JSON text of the engine's report, or NULL */
    /* Outputs: present in records read with SBX_STORE_WITH_OUTPUT (NUL
     * terminated for convenience, the length excludes it); the lengths are
     * always filled. Ignored by insert. */
    const void *stdout_data;
    size_t stdout_len;
    const void *stderr_data;
    size_t stderr_len;
};

/* Record a new task, status pending (t->status, started_at, ended_at, error,
 * result and outputs are ignored). Fills t->id when it is empty, else it must
 * be a UUID not yet used (EEXIST). */
int sbx_store_task_insert(struct sbx_store *st, struct sbx_store_task *t, sbx_err *err);

/* A transition of one task. at is started_at for running, ended_at for a
 * final status (0: now). NULL fields leave what is stored. */
struct sbx_store_transition {
    enum sbx_task_status to;
    int64_t at;
    const char *sandbox; /* usually given with running */
    const char *error;
    const char *result; /* JSON text */
    const void *stdout_data;
    size_t stdout_len;
    const void *stderr_data;
    size_t stderr_len;
};
/* Apply tr to task id, atomically with the check of its current status.
 * ENOENT when there is no such task; EINVAL naming both states when the
 * transition is not legal (e.g. "succeeded -> running"); EFBIG when an output
 * is over SBX_STORE_OUTPUT_MAX. */
int sbx_store_task_transition(struct sbx_store *st, const char *id,
                              const struct sbx_store_transition *tr, sbx_err *err);

#define SBX_STORE_WITH_OUTPUT 1u

/* The task id. With tenant non-NULL, another tenant's task is ENOENT (exactly
 * as a missing one: its existence is not revealed). flags: 0 or
 * SBX_STORE_WITH_OUTPUT. */
int sbx_store_task_get(struct sbx_store *st, const char *id, const char *tenant, unsigned flags,
                       struct sbx_store_task **out, sbx_err *err);
void sbx_store_task_free(struct sbx_store_task *t);

#define SBX_STORE_LIST_MAX 500
#define SBX_STORE_CURSOR_SIZE 64 /* 48 hex digits and the NUL, with room */

/* Filters of a listing; NULL / 0 fields do not filter. */
struct sbx_store_task_filter {
    const char *tenant;
    const char *clone_key;
    const char *clone_id;
    const char *session_id;
    enum sbx_task_status status; /* 0: any */
    unsigned limit;              /* 1..SBX_STORE_LIST_MAX */
    const char *cursor;          /* NULL or "": first page; else a next_cursor */
};
struct sbx_store_task_page {
    struct sbx_store_task **tasks; /* n records, newest first, no outputs */
    size_t n;
    char next_cursor[SBX_STORE_CURSOR_SIZE]; /* "" on the last page */
};
/* One page of tasks, newest first (created_at, then id, descending). The
 * cursor is opaque (hex of the last row's created_at and id): paging with it
 * neither repeats nor skips a task, whatever is inserted meanwhile. A cursor
 * that is not one of ours is EINVAL. Release with sbx_store_task_page_free. */
int sbx_store_task_list(struct sbx_store *st, const struct sbx_store_task_filter *f,
                        struct sbx_store_task_page *page, sbx_err *err);
void sbx_store_task_page_free(struct sbx_store_task_page *page);

struct sbx_store_task_counts {
    uint64_t pending;
    uint64_t running;
};
/* Unfinished tasks of tenant (NULL: of all tenants). */
int sbx_store_task_count_active(struct sbx_store *st, const char *tenant,
                                struct sbx_store_task_counts *out, sbx_err *err);

/* ---- Crash recovery ----------------------------------------------------- */

struct sbx_store_recovery {
    size_t interrupted; /* tasks marked interrupted */
    /* Distinct sandbox names recorded on the tasks that were running: what
     * the daemon should kill and clean up. */
    char **sandboxes;
    size_t n_sandboxes;
};
/* At start-up: mark every pending or running task interrupted, ended at
 * now_ms, with error "daemon restarted", in one transaction. */
int sbx_store_recover(struct sbx_store *st, int64_t now_ms, struct sbx_store_recovery *out,
                      sbx_err *err);
void sbx_store_recovery_free(struct sbx_store_recovery *r);

/* ---- Events ------------------------------------------------------------- */

/* Each session has its own stream of events with ids 1, 2, 3, …: the counter
 * is kept in the store and advanced in the same transaction as the insert,
 * so ids never repeat or go back, across restarts too. Each session keeps its
 * newest event_bound events (sbx_store_options); older ones are deleted as
 * new ones arrive. */
struct sbx_store_event {
    const char *session_id;
    uint64_t id;
    const char *type;
    int64_t time;
    const char *data; /* JSON text */
};

/* Append an event (data NULL: "{}") and return its id in *id. */
int sbx_store_event_append(struct sbx_store *st, const char *session_id, const char *type,
                           int64_t time, const char *data, uint64_t *id, sbx_err *err);

/* Where a session's stream stands. oldest: the smallest id that can still be
 * replayed, i.e. the oldest kept event, or last + 1 when none is kept; last:
 * the newest id given (0 for a session never seen). A client that has seen up
 * to after_id has lost events [after_id + 1, oldest - 1] when
 * after_id + 1 < oldest: the daemon says so (events_lost {from, to}) before
 * replaying. */
struct sbx_store_event_range {
    uint64_t oldest;
    uint64_t last;
};
/* Returns 0 and the lost range in *from, *to when a client that has seen
 * after_id missed events that are no longer kept; -1 when nothing is lost.
 * (A client whose after_id is beyond last saw a stream that was pruned and
 * has started again, see sbx_store_prune: replay it from the start.) */
static inline int sbx_store_events_lost(const struct sbx_store_event_range *r, uint64_t after_id,
                                        uint64_t *from, uint64_t *to)
{
    if (after_id >= r->oldest - 1) /* oldest >= 1; no overflow on a huge after_id */
        return -1;
    *from = after_id + 1;
    *to = r->oldest - 1;
    return 0;
}

/* Called for each replayed event (valid during the call only); a non-zero
 * return stops the replay and is returned by sbx_store_events_since. */
typedef int (*sbx_store_event_fn)(void *ctx, const struct sbx_store_event *ev);

/* Replay the events of session with id > after_id, in order, at most limit
 * (1..10000) of them, after filling *range (may be NULL) from the same
 * snapshot. fn may be NULL to read the range alone. Returns 0, -1 on error,
 * or the callback's non-zero value. */
int sbx_store_events_since(struct sbx_store *st, const char *session_id, uint64_t after_id,
                           unsigned limit, sbx_store_event_fn fn, void *ctx,
                           struct sbx_store_event_range *range, sbx_err *err);

/* ---- Clones: host id ranges --------------------------------------------- */

/* The host uid/gid base of a clone (the engine's --host-id-base): the one
 * recorded for (tenant, clone_key, clone_id), or else a free
 * first_base + n * stride with n < max_clones (the next above every recorded
 * range; the lowest hole once the top is reached), recorded durably before it
 * is returned. Ranges [base, base + stride) never overlap, even when first_base
 * or stride change between runs (earlier clones keep their ranges). ERANGE
 * when every range is taken; EINVAL when the last range would not fit in
 * 32 bits. */
int sbx_store_clone_base(struct sbx_store *st, const char *tenant, const char *clone_key,
                         const char *clone_id, uint32_t first_base, uint32_t stride,
                         uint32_t max_clones, uint32_t *base, sbx_err *err);
/* How many clones of tenant are recorded. */
int sbx_store_clone_count(struct sbx_store *st, const char *tenant, uint64_t *n, sbx_err *err);
/* Whether (tenant, clone_key, clone_id) is recorded. */
int sbx_store_clone_known(struct sbx_store *st, const char *tenant, const char *clone_key,
                          const char *clone_id, bool *known, sbx_err *err);

/* ---- Audit -------------------------------------------------------------- */

/* One audited action. identity is who acted (a token's name, never the
 * token); target what it acted on ("task/<id>"); detail JSON text or NULL.
 * The table is append-only: SQLite triggers refuse updates and deletes. */
struct sbx_store_audit {
    int64_t seq;  /* filled when read back */
    int64_t time; /* 0: now */
    const char *identity;
    const char *action;
    const char *target;
    const char *detail;
};
int sbx_store_audit_append(struct sbx_store *st, const struct sbx_store_audit *rec, sbx_err *err);
typedef int (*sbx_store_audit_fn)(void *ctx, const struct sbx_store_audit *rec);
/* Records with seq > after_seq, oldest first, at most limit (1..10000). Same
 * return convention as sbx_store_events_since. */
int sbx_store_audit_since(struct sbx_store *st, int64_t after_seq, unsigned limit,
                          sbx_store_audit_fn fn, void *ctx, sbx_err *err);

/* ---- Retention ---------------------------------------------------------- */

/* Rows deleted by one sbx_store_prune call; more is set when a batch limit
 * was reached and another call would delete more. */
struct sbx_store_prune_counts {
    uint64_t tasks; /* with their outputs */
    uint64_t events;
    uint64_t sessions; /* streams whose counters were dropped */
    bool more;
};
/* Delete final tasks that ended before older_than_ms (a point in time, e.g.
 * now - retention; 0: no age limit) or
 * are not among the newest max_tasks final tasks (0: no count limit), and
 * the events (and counters) of sessions whose last event is older than
 * older_than_ms, and the agent's conversations whose newest turn began
 * before older_than_ms (none running). Unfinished tasks are never deleted. Each call deletes a
 * bounded batch so it stays short: call again while counts->more. A session
 * whose counter was dropped starts again at id 1 if it is ever reused. */
int sbx_store_prune(struct sbx_store *st, int64_t older_than_ms, uint64_t max_tasks,
                    struct sbx_store_prune_counts *counts, sbx_err *err);
/* The audit log's retention: its oldest records go while they are older than
 * older_than_ms (0: no age limit) or beyond the newest max_rows (0: no count
 * limit), a bounded batch a call; *deleted is how many, *more whether
 * another call would delete more. */
int sbx_store_prune_audit(struct sbx_store *st, int64_t older_than_ms, uint64_t max_rows,
                          uint64_t *deleted, bool *more, sbx_err *err);

/* ---- Idempotency keys (Idempotency-Key on task creation) ---- */

/* The task key named for tenant, if recorded at or after not_before (ms):
 * 1 and its id and request digest; 0 when there is none. */
int sbx_store_idem_get(struct sbx_store *st, const char *tenant, const char *key,
                       int64_t not_before, char *task_id, size_t id_size, char *digest,
                       size_t digest_size, sbx_err *err);
/* Records (tenant, key) -> task_id with the request's digest at now, and
 * forgets every key recorded before not_before. */
int sbx_store_idem_put(struct sbx_store *st, const char *tenant, const char *key,
                       const char *digest, const char *task_id, int64_t now, int64_t not_before,
                       sbx_err *err);

/* ---- Records of an API surface (schema v6) ------------------------------- */

/* One JSON document (record, text) per (kind, id), of one tenant: written
 * whole (put replaces), deleted, and read back at a start (fn returns 0 to
 * go on; it may not use the store). */
int sbx_store_record_put(struct sbx_store *st, const char *kind, const char *id, const char *tenant,
                         const char *record, sbx_err *err);
int sbx_store_record_delete(struct sbx_store *st, const char *kind, const char *id, sbx_err *err);
int sbx_store_records(struct sbx_store *st, const char *kind,
                      int (*fn)(void *ud, const char *id, const char *tenant, const char *record),
                      void *ud, sbx_err *err);

/* ---- The agent's conversations ------------------------------------------ */

/* A conversation is named by its clone and session ("tenant:key:id:session");
 * its messages are JSON text, kept in the order appended. */
int sbx_store_message_append(struct sbx_store *st, const char *conversation, const char *message,
                             sbx_err *err);
/* Each message of the conversation, oldest first; fn returns 0 to go on. */
int sbx_store_messages(struct sbx_store *st, const char *conversation,
                       int (*fn)(void *ud, const char *message), void *ud, sbx_err *err);
/* The tools a conversation declared (JSON array text), or none: *tools
 * NULL. The caller frees *tools. */
int sbx_store_conv_tools_set(struct sbx_store *st, const char *conversation, const char *tools,
                             sbx_err *err);
int sbx_store_conv_tools_get(struct sbx_store *st, const char *conversation, char **tools,
                             sbx_err *err);
/* A turn begins (running) and ends (with its stop reason). */
int sbx_store_turn_begin(struct sbx_store *st, const char *id, const char *conversation,
                         const char *tenant, const char *session, sbx_err *err);
int sbx_store_turn_end(struct sbx_store *st, const char *id, const char *stop, sbx_err *err);
/* The turns a previous run left running: each is marked interrupted, then
 * told to fn (in the order they began). */
int sbx_store_turns_interrupted(struct sbx_store *st,
                                void (*fn)(void *ud, const char *id, const char *conversation,
                                           const char *tenant, const char *session),
                                void *ud, sbx_err *err);
