/* Task records: insert, transitions, reads, listings, counts, recovery. */
#include "store/store_int.h"

#include "base/hex.h"
#include "base/time.h"

#include <stdio.h>
#include <string.h>

static const char *const status_names[] = {
    [SBX_TASK_PENDING] = "pending",         [SBX_TASK_RUNNING] = "running",
    [SBX_TASK_SUCCEEDED] = "succeeded",     [SBX_TASK_FAILED] = "failed",
    [SBX_TASK_CANCELED] = "canceled",       [SBX_TASK_TIMEOUT] = "timeout",
    [SBX_TASK_INTERRUPTED] = "interrupted",
};

static bool status_known(enum sbx_task_status s)
{
    return (size_t)s < SBX_ARRAY_LEN(status_names) && status_names[s];
}

const char *sbx_task_status_name(enum sbx_task_status s)
{
    return status_known(s) ? status_names[s] : "unknown";
}

int sbx_task_status_parse(const char *s, enum sbx_task_status *out, sbx_err *err)
{
    for (size_t i = 0; i < SBX_ARRAY_LEN(status_names); i++) {
        if (status_names[i] && s && strcmp(s, status_names[i]) == 0) {
            *out = (enum sbx_task_status)i;
            return 0;
        }
    }
    return sbx_err_set(err, EINVAL, "unknown task status \"%.40s\"", s ? s : "");
}

bool sbx_task_status_final(enum sbx_task_status s)
{
    return s >= SBX_TASK_SUCCEEDED && s <= SBX_TASK_INTERRUPTED;
}

bool sbx_task_transition_legal(enum sbx_task_status from, enum sbx_task_status to)
{
    switch (from) {
    case SBX_TASK_PENDING:
        return to == SBX_TASK_RUNNING || to == SBX_TASK_CANCELED || to == SBX_TASK_INTERRUPTED;
    case SBX_TASK_RUNNING:
        return sbx_task_status_final(to);
    default:
        return false;
    }
}

/* ---- Reading rows --------------------------------------------------------- */

#define TASK_COLUMNS                                                                               \
    "t.id, t.tenant, t.clone_key, t.clone_id, t.session_id, t.command, t.language, t.code,"        \
    " t.backend, t.skill, t.skill_source, t.skill_trust_level, t.skill_version, t.limits,"         \
    " t.sandbox, t.status,"                                                                         \
    " t.created_at, t.started_at, t.ended_at, t.error, t.result,"                                  \
    " coalesce(length(o.stdout), 0), coalesce(length(o.stderr), 0)"
#define TASK_FROM " FROM tasks t LEFT JOIN task_output o ON o.task_id = t.id"

enum {
    COL_ID,
    COL_TENANT,
    COL_CLONE_KEY,
    COL_CLONE_ID,
    COL_SESSION,
    COL_COMMAND,
    COL_LANGUAGE,
    COL_CODE,
    COL_BACKEND,
    COL_SKILL,
    COL_SKILL_SOURCE,
    COL_SKILL_TRUST,
    COL_SKILL_VERSION,
    COL_LIMITS,
    COL_SANDBOX,
    COL_STATUS,
    COL_CREATED,
    COL_STARTED,
    COL_ENDED,
    COL_ERROR,
    COL_RESULT,
    COL_STDOUT_LEN,
    COL_STDERR_LEN,
    COL_STDOUT, /* only in reads with output */
    COL_STDERR,
};

/* Text columns and where each lands in the record. */
static const struct {
    int col;
    size_t off;
} text_fields[] = {
    {COL_TENANT, offsetof(struct sbx_store_task, tenant)},
    {COL_CLONE_KEY, offsetof(struct sbx_store_task, clone_key)},
    {COL_CLONE_ID, offsetof(struct sbx_store_task, clone_id)},
    {COL_SESSION, offsetof(struct sbx_store_task, session_id)},
    {COL_COMMAND, offsetof(struct sbx_store_task, command)},
    {COL_LANGUAGE, offsetof(struct sbx_store_task, language)},
    {COL_CODE, offsetof(struct sbx_store_task, code)},
    {COL_BACKEND, offsetof(struct sbx_store_task, backend)},
    {COL_SKILL, offsetof(struct sbx_store_task, skill)},
    {COL_SKILL_SOURCE, offsetof(struct sbx_store_task, skill_source)},
    {COL_SKILL_TRUST, offsetof(struct sbx_store_task, skill_trust_level)},
    {COL_SKILL_VERSION, offsetof(struct sbx_store_task, skill_version)},
    {COL_LIMITS, offsetof(struct sbx_store_task, limits)},
    {COL_SANDBOX, offsetof(struct sbx_store_task, sandbox)},
    {COL_ERROR, offsetof(struct sbx_store_task, error)},
    {COL_RESULT, offsetof(struct sbx_store_task, result)},
};

/* Bytes a column takes in the record (with its NUL), 0 for SQL NULL. */
static size_t col_size(sqlite3_stmt *s, int col, bool blob)
{
    if (sqlite3_column_type(s, col) == SQLITE_NULL)
        return 0;
    if (blob)
        sqlite3_column_blob(s, col);
    else
        sqlite3_column_text(s, col);
    return (size_t)sqlite3_column_bytes(s, col) + 1;
}

static const char *col_copy(sqlite3_stmt *s, int col, bool blob, char **p)
{
    if (sqlite3_column_type(s, col) == SQLITE_NULL)
        return NULL;
    const void *v = blob ? sqlite3_column_blob(s, col) : sqlite3_column_text(s, col);
    size_t n = (size_t)sqlite3_column_bytes(s, col);
    char *dst = *p;
    if (n)
        memcpy(dst, v, n);
    dst[n] = '\0';
    *p += n + 1;
    return dst;
}

/* The current row as one allocation: the record, then its strings. */
static struct sbx_store_task *task_from_row(sqlite3_stmt *s, bool with_output, sbx_err *err)
{
    size_t need = sizeof(struct sbx_store_task);
    for (size_t i = 0; i < SBX_ARRAY_LEN(text_fields); i++)
        need += col_size(s, text_fields[i].col, false);
    if (with_output)
        need += col_size(s, COL_STDOUT, true) + col_size(s, COL_STDERR, true);

    struct sbx_store_task *t = calloc(1, need);
    if (!t) {
        sbx_err_set(err, ENOMEM, "store: task record of %zu bytes", need);
        return NULL;
    }
    char *p = (char *)(t + 1);
    for (size_t i = 0; i < SBX_ARRAY_LEN(text_fields); i++)
        *(const char **)((char *)t + text_fields[i].off) =
            col_copy(s, text_fields[i].col, false, &p);
    if (with_output) {
        t->stdout_data = col_copy(s, COL_STDOUT, true, &p);
        t->stderr_data = col_copy(s, COL_STDERR, true, &p);
    }
    snprintf(t->id, sizeof(t->id), "%s", (const char *)sqlite3_column_text(s, COL_ID));
    if (sbx_task_status_parse((const char *)sqlite3_column_text(s, COL_STATUS), &t->status, NULL) <
        0)
        t->status = 0; /* cannot happen: the schema checks it */
    t->created_at = sqlite3_column_int64(s, COL_CREATED);
    t->started_at = sqlite3_column_int64(s, COL_STARTED);
    t->ended_at = sqlite3_column_int64(s, COL_ENDED);
    t->stdout_len = (size_t)sqlite3_column_int64(s, COL_STDOUT_LEN);
    t->stderr_len = (size_t)sqlite3_column_int64(s, COL_STDERR_LEN);
    return t;
}

void sbx_store_task_free(struct sbx_store_task *t)
{
    free(t);
}

/* ---- Insert --------------------------------------------------------------- */

static const char sql_insert[] =
    "INSERT INTO tasks (id, tenant, clone_key, clone_id, session_id, command, language, code,"
    " backend, skill, skill_source, skill_trust_level, skill_version, limits, sandbox, status,"
    " created_at)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, 'pending', ?16)";

static const char *or_empty(const char *s)
{
    return s ? s : "";
}

int sbx_store_task_insert(struct sbx_store *st, struct sbx_store_task *t, sbx_err *err)
{
    uint8_t raw[16];

    if (store_enter(st, err) < 0)
        return -1;
    if (!t->tenant || !t->tenant[0])
        return sbx_err_set(err, EINVAL, "store: insert task: no tenant");
    if (!t->id[0]) {
        if (sbx_id_new(t->id, err) < 0)
            return -1;
    } else if (sbx_id_parse(t->id, raw) < 0) {
        return sbx_err_set(err, EINVAL, "store: insert task: id \"%.40s\" is not a UUID", t->id);
    } else {
        sbx_id_format(raw, t->id); /* canonical lower case */
    }
    if (!t->created_at)
        t->created_at = sbx_now_ms();

    cleanup_stmt sqlite3_stmt *s = store_stmt(st, STMT_TASK_INSERT, sql_insert, err);
    if (!s)
        return -1;
    const char *text[] = {
        t->id,
        t->tenant,
        or_empty(t->clone_key),
        or_empty(t->clone_id),
        or_empty(t->session_id),
        t->command ? t->command : "[]",
        t->language,
        t->code,
        t->backend ? t->backend : "sandbox",
        or_empty(t->skill),
        or_empty(t->skill_source),
        or_empty(t->skill_trust_level),
        or_empty(t->skill_version),
        t->limits,
        or_empty(t->sandbox),
    };
    int rc = SQLITE_OK;
    for (size_t i = 0; i < SBX_ARRAY_LEN(text) && rc == SQLITE_OK; i++)
        rc = store_bind_text(s, (int)i + 1, text[i]);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(s, (int)SBX_ARRAY_LEN(text) + 1, t->created_at);
    if (rc != SQLITE_OK)
        return store_fail(st, err, rc, "insert task %s", t->id);
    char what[64];
    snprintf(what, sizeof(what), "insert task %s", t->id);
    if (store_exec(st, s, err, what) < 0)
        return -1;
    t->status = SBX_TASK_PENDING;
    t->started_at = t->ended_at = 0;
    return 0;
}

/* ---- Transitions ---------------------------------------------------------- */

static const char sql_status[] = "SELECT status FROM tasks WHERE id = ?1";
static const char sql_transition[] =
    "UPDATE tasks SET status = ?2,"
    " started_at = CASE WHEN ?2 = 'running' THEN ?3 ELSE started_at END,"
    " ended_at = CASE WHEN ?2 = 'running' THEN ended_at ELSE ?3 END,"
    " sandbox = coalesce(?4, sandbox), error = coalesce(?5, error),"
    " result = coalesce(?6, result)"
    " WHERE id = ?1";
static const char sql_output[] =
    "INSERT INTO task_output (task_id, stdout, stderr)"
    " VALUES (?1, coalesce(?2, x''), coalesce(?3, x''))"
    " ON CONFLICT (task_id) DO UPDATE SET stdout = coalesce(?2, stdout),"
    " stderr = coalesce(?3, stderr)";

struct transition_ctx {
    const char *id;
    const struct sbx_store_transition *tr;
};

static int read_status(struct sbx_store *st, const char *id, enum sbx_task_status *out,
                       sbx_err *err)
{
    cleanup_stmt sqlite3_stmt *s = store_stmt(st, STMT_TASK_STATUS, sql_status, err);
    if (!s)
        return -1;
    int rc = store_bind_text(s, 1, id);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    if (rc == SQLITE_DONE)
        return sbx_err_set(err, ENOENT, "store: task %s: no such task", id);
    if (rc != SQLITE_ROW)
        return store_fail(st, err, rc, "read task %s", id);
    return sbx_task_status_parse((const char *)sqlite3_column_text(s, 0), out, err);
}

static int transition_in_txn(struct sbx_store *st, void *vctx, sbx_err *err)
{
    struct transition_ctx *c = vctx;
    const struct sbx_store_transition *tr = c->tr;
    enum sbx_task_status from;
    char what[80];

    if (read_status(st, c->id, &from, err) < 0)
        return -1;
    if (!sbx_task_transition_legal(from, tr->to))
        return sbx_err_set(err, EINVAL, "store: task %s: illegal transition %s -> %s", c->id,
                           sbx_task_status_name(from), sbx_task_status_name(tr->to));

    snprintf(what, sizeof(what), "update task %s to %s", c->id, sbx_task_status_name(tr->to));
    cleanup_stmt sqlite3_stmt *s = store_stmt(st, STMT_TASK_TRANSITION, sql_transition, err);
    if (!s)
        return -1;
    int rc = store_bind_text(s, 1, c->id);
    if (rc == SQLITE_OK)
        rc = store_bind_text(s, 2, sbx_task_status_name(tr->to));
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(s, 3, tr->at ? tr->at : sbx_now_ms());
    if (rc == SQLITE_OK)
        rc = store_bind_text(s, 4, tr->sandbox);
    if (rc == SQLITE_OK)
        rc = store_bind_text(s, 5, tr->error);
    if (rc == SQLITE_OK)
        rc = store_bind_text(s, 6, tr->result);
    if (rc != SQLITE_OK)
        return store_fail(st, err, rc, "%s", what);
    if (store_exec(st, s, err, what) < 0)
        return -1;

    if (!tr->stdout_data && !tr->stderr_data)
        return 0;
    cleanup_stmt sqlite3_stmt *o = store_stmt(st, STMT_TASK_OUTPUT, sql_output, err);
    if (!o)
        return -1;
    rc = store_bind_text(o, 1, c->id);
    if (rc == SQLITE_OK)
        rc = store_bind_blob(o, 2, tr->stdout_data, tr->stdout_len);
    if (rc == SQLITE_OK)
        rc = store_bind_blob(o, 3, tr->stderr_data, tr->stderr_len);
    if (rc != SQLITE_OK)
        return store_fail(st, err, rc, "%s", what);
    snprintf(what, sizeof(what), "store the output of task %s", c->id);
    return store_exec(st, o, err, what);
}

int sbx_store_task_transition(struct sbx_store *st, const char *id,
                              const struct sbx_store_transition *tr, sbx_err *err)
{
    if (store_enter(st, err) < 0)
        return -1;
    if (tr->stdout_len > st->output_max || tr->stderr_len > st->output_max)
        return sbx_err_set(err, EFBIG, "store: task %s: output over %llu bytes", id,
                           (unsigned long long)st->output_max);
    struct transition_ctx c = {.id = id, .tr = tr};
    return store_txn(st, transition_in_txn, &c, err) < 0 ? -1 : 0;
}

/* ---- Get ------------------------------------------------------------------ */

static const char sql_get[] =
    "SELECT " TASK_COLUMNS TASK_FROM " WHERE t.id = ?1 AND (?2 IS NULL OR t.tenant = ?2)";
static const char sql_get_output[] =
    "SELECT " TASK_COLUMNS ", coalesce(o.stdout, x''), coalesce(o.stderr, x'')" TASK_FROM
    " WHERE t.id = ?1 AND (?2 IS NULL OR t.tenant = ?2)";

int sbx_store_task_get(struct sbx_store *st, const char *id, const char *tenant, unsigned flags,
                       struct sbx_store_task **out, sbx_err *err)
{
    bool with_output = flags & SBX_STORE_WITH_OUTPUT;
    char canon[SBX_ID_SIZE];
    uint8_t raw[16];

    if (store_enter(st, err) < 0)
        return -1;
    /* Anything that is not an id names no task: the same answer as a missing
     * one, and as another tenant's. */
    if (sbx_id_parse(id, raw) < 0)
        return sbx_err_set(err, ENOENT, "store: task %.40s: no such task", id ? id : "");
    sbx_id_format(raw, canon);

    cleanup_stmt sqlite3_stmt *s = with_output
                                       ? store_stmt(st, STMT_TASK_GET_OUTPUT, sql_get_output, err)
                                       : store_stmt(st, STMT_TASK_GET, sql_get, err);
    if (!s)
        return -1;
    int rc = store_bind_text(s, 1, canon);
    if (rc == SQLITE_OK)
        rc = store_bind_text(s, 2, tenant);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    if (rc == SQLITE_DONE)
        return sbx_err_set(err, ENOENT, "store: task %s: no such task", canon);
    if (rc != SQLITE_ROW)
        return store_fail(st, err, rc, "read task %s", canon);
    *out = task_from_row(s, with_output, err);
    return *out ? 0 : -1;
}

/* ---- List ----------------------------------------------------------------- */

enum {
    FILTER_TENANT = 1,
    FILTER_CLONE_KEY = 2,
    FILTER_CLONE_ID = 4,
    FILTER_SESSION = 8,
    FILTER_STATUS = 16,
    FILTER_CURSOR = 32,
};
_Static_assert(FILTER_CURSOR * 2 == STORE_LIST_VARIANTS, "one statement per filter set");

/* Parameters keep their numbers in every variant. */
static void list_sql(unsigned mask, char *buf, size_t len)
{
    snprintf(buf, len,
             "SELECT " TASK_COLUMNS TASK_FROM " WHERE 1%s%s%s%s%s%s"
             " ORDER BY t.created_at DESC, t.id DESC LIMIT ?8",
             mask & FILTER_TENANT ? " AND t.tenant = ?1" : "",
             mask & FILTER_CLONE_KEY ? " AND t.clone_key = ?2" : "",
             mask & FILTER_CLONE_ID ? " AND t.clone_id = ?3" : "",
             mask & FILTER_SESSION ? " AND t.session_id = ?4" : "",
             mask & FILTER_STATUS ? " AND t.status = ?5" : "",
             mask & FILTER_CURSOR ? " AND (t.created_at, t.id) < (?6, ?7)" : "");
}

/* Cursor: hex of created_at (8 bytes, big-endian) and the id's 16 bytes. */
static void cursor_encode(int64_t created_at, const char *id, char out[SBX_STORE_CURSOR_SIZE])
{
    uint8_t raw[24];
    for (int i = 0; i < 8; i++)
        raw[i] = (uint8_t)((uint64_t)created_at >> (56 - 8 * i));
    if (sbx_id_parse(id, raw + 8) < 0)
        memset(raw + 8, 0, 16);
    *sbx_hex_encode(raw, sizeof(raw), out) = '\0';
}

/* Lower-case hex only: our cursors never hold anything else. */
static int nibble(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

static int cursor_decode(const char *c, int64_t *created_at, char id[SBX_ID_SIZE], sbx_err *err)
{
    uint8_t raw[24];
    if (strlen(c) != 2 * sizeof(raw))
        return sbx_err_set(err, EINVAL, "store: invalid cursor");
    for (size_t i = 0; i < sizeof(raw); i++) {
        int hi = nibble(c[2 * i]), lo = nibble(c[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return sbx_err_set(err, EINVAL, "store: invalid cursor");
        raw[i] = (uint8_t)(hi << 4 | lo);
    }
    uint64_t t = 0;
    for (int i = 0; i < 8; i++)
        t = t << 8 | raw[i];
    *created_at = (int64_t)t;
    sbx_id_format(raw + 8, id);
    return 0;
}

void sbx_store_task_page_free(struct sbx_store_task_page *page)
{
    if (!page)
        return;
    for (size_t i = 0; i < page->n; i++)
        free(page->tasks[i]);
    free(page->tasks);
    page->tasks = NULL;
    page->n = 0;
}

static int list_bind(sqlite3_stmt *s, const struct sbx_store_task_filter *f, unsigned mask,
                     int64_t cur_time, const char *cur_id)
{
    int rc = SQLITE_OK;
    if (mask & FILTER_TENANT)
        rc = store_bind_text(s, 1, f->tenant);
    if (rc == SQLITE_OK && (mask & FILTER_CLONE_KEY))
        rc = store_bind_text(s, 2, f->clone_key);
    if (rc == SQLITE_OK && (mask & FILTER_CLONE_ID))
        rc = store_bind_text(s, 3, f->clone_id);
    if (rc == SQLITE_OK && (mask & FILTER_SESSION))
        rc = store_bind_text(s, 4, f->session_id);
    if (rc == SQLITE_OK && (mask & FILTER_STATUS))
        rc = store_bind_text(s, 5, sbx_task_status_name(f->status));
    if (rc == SQLITE_OK && (mask & FILTER_CURSOR)) {
        rc = sqlite3_bind_int64(s, 6, cur_time);
        if (rc == SQLITE_OK)
            rc = store_bind_text(s, 7, cur_id);
    }
    /* One more than asked: whether there is a next page. */
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(s, 8, (int64_t)f->limit + 1);
    return rc;
}

int sbx_store_task_list(struct sbx_store *st, const struct sbx_store_task_filter *f,
                        struct sbx_store_task_page *page, sbx_err *err)
{
    unsigned mask = 0;
    int64_t cur_time = 0;
    char cur_id[SBX_ID_SIZE] = "";

    memset(page, 0, sizeof(*page));
    if (store_enter(st, err) < 0)
        return -1;
    if (f->limit < 1 || f->limit > SBX_STORE_LIST_MAX)
        return sbx_err_set(err, EINVAL, "store: list limit %u is not within 1..%d", f->limit,
                           SBX_STORE_LIST_MAX);
    if (f->status && !status_known(f->status))
        return sbx_err_set(err, EINVAL, "store: list: unknown status %d", (int)f->status);
    if (f->cursor && f->cursor[0]) {
        if (cursor_decode(f->cursor, &cur_time, cur_id, err) < 0)
            return -1;
        mask |= FILTER_CURSOR;
    }
    mask |= (f->tenant ? FILTER_TENANT : 0) | (f->clone_key ? FILTER_CLONE_KEY : 0) |
            (f->clone_id ? FILTER_CLONE_ID : 0) | (f->session_id ? FILTER_SESSION : 0) |
            (f->status ? FILTER_STATUS : 0);

    char sql[1024];
    list_sql(mask, sql, sizeof(sql));
    cleanup_stmt sqlite3_stmt *s = store_prepare(st, &st->list_stmts[mask], sql, err);
    if (!s)
        return -1;
    int rc = list_bind(s, f, mask, cur_time, cur_id);
    if (rc != SQLITE_OK)
        return store_fail(st, err, rc, "list tasks");

    page->tasks = calloc(f->limit, sizeof(*page->tasks));
    if (!page->tasks)
        return sbx_err_set(err, ENOMEM, "store: list tasks");
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (page->n == f->limit) {
            const struct sbx_store_task *last = page->tasks[page->n - 1];
            cursor_encode(last->created_at, last->id, page->next_cursor);
            break;
        }
        page->tasks[page->n] = task_from_row(s, false, err);
        if (!page->tasks[page->n])
            goto fail;
        page->n++;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        store_fail(st, err, rc, "list tasks");
        goto fail;
    }
    return 0;
fail:
    sbx_store_task_page_free(page);
    return -1;
}

/* ---- Counts --------------------------------------------------------------- */

static const char sql_count[] = "SELECT status, count(*) FROM tasks"
                                " WHERE status IN ('pending', 'running') AND tenant = ?1"
                                " GROUP BY status";
static const char sql_count_all[] = "SELECT status, count(*) FROM tasks"
                                    " WHERE status IN ('pending', 'running') GROUP BY status";

int sbx_store_task_count_active(struct sbx_store *st, const char *tenant,
                                struct sbx_store_task_counts *out, sbx_err *err)
{
    memset(out, 0, sizeof(*out));
    if (store_enter(st, err) < 0)
        return -1;
    cleanup_stmt sqlite3_stmt *s = tenant ? store_stmt(st, STMT_TASK_COUNT, sql_count, err)
                                          : store_stmt(st, STMT_TASK_COUNT_ALL, sql_count_all, err);
    if (!s)
        return -1;
    int rc = tenant ? store_bind_text(s, 1, tenant) : SQLITE_OK;
    if (rc != SQLITE_OK)
        return store_fail(st, err, rc, "count tasks");
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *status = (const char *)sqlite3_column_text(s, 0);
        uint64_t n = (uint64_t)sqlite3_column_int64(s, 1);
        if (strcmp(status, "pending") == 0)
            out->pending = n;
        else
            out->running = n;
    }
    if (rc != SQLITE_DONE)
        return store_fail(st, err, rc, "count tasks");
    return 0;
}

/* ---- Recovery ------------------------------------------------------------- */

static const char sql_recover_sandboxes[] =
    "SELECT DISTINCT sandbox FROM tasks WHERE status = 'running' AND sandbox <> ''"
    " ORDER BY sandbox";
static const char sql_recover[] =
    "UPDATE tasks SET status = 'interrupted', ended_at = ?1, error = 'daemon restarted'"
    " WHERE status IN ('pending', 'running')";

struct recover_ctx {
    int64_t now;
    struct sbx_store_recovery *out;
};

static int collect_sandboxes(struct sbx_store *st, struct sbx_store_recovery *r, sbx_err *err)
{
    cleanup_stmt sqlite3_stmt *s =
        store_stmt(st, STMT_RECOVER_SANDBOXES, sql_recover_sandboxes, err);
    if (!s)
        return -1;
    int rc;
    size_t cap = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (r->n_sandboxes == cap) {
            size_t ncap = cap ? 2 * cap : 8;
            char **v = realloc(r->sandboxes, ncap * sizeof(*v));
            if (!v)
                return sbx_err_set(err, ENOMEM, "store: recover");
            r->sandboxes = v;
            cap = ncap;
        }
        r->sandboxes[r->n_sandboxes] = strdup((const char *)sqlite3_column_text(s, 0));
        if (!r->sandboxes[r->n_sandboxes])
            return sbx_err_set(err, ENOMEM, "store: recover");
        r->n_sandboxes++;
    }
    if (rc != SQLITE_DONE)
        return store_fail(st, err, rc, "recover: read running tasks");
    return 0;
}

static int recover_in_txn(struct sbx_store *st, void *vctx, sbx_err *err)
{
    struct recover_ctx *c = vctx;
    if (collect_sandboxes(st, c->out, err) < 0)
        return -1;
    cleanup_stmt sqlite3_stmt *s = store_stmt(st, STMT_RECOVER, sql_recover, err);
    if (!s)
        return -1;
    int rc = sqlite3_bind_int64(s, 1, c->now);
    if (rc != SQLITE_OK)
        return store_fail(st, err, rc, "recover");
    if (store_exec(st, s, err, "recover: mark unfinished tasks interrupted") < 0)
        return -1;
    c->out->interrupted = (size_t)sqlite3_changes64(st->db);
    return 0;
}

void sbx_store_recovery_free(struct sbx_store_recovery *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_sandboxes; i++)
        free(r->sandboxes[i]);
    free(r->sandboxes);
    memset(r, 0, sizeof(*r));
}

int sbx_store_recover(struct sbx_store *st, int64_t now_ms, struct sbx_store_recovery *out,
                      sbx_err *err)
{
    memset(out, 0, sizeof(*out));
    if (store_enter(st, err) < 0)
        return -1;
    struct recover_ctx c = {.now = now_ms, .out = out};
    if (store_txn(st, recover_in_txn, &c, err) < 0) {
        sbx_store_recovery_free(out);
        return -1;
    }
    return 0;
}
