/* The durable store against real SQLite files in temporary directories (and,
 * for the disk-full case, a tiny tmpfs mounted for the test). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <unistd.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "store/store.h"
#include "store/store_int.h"

struct fx {
    char dir[64];
    char path[128];
    struct sbx_store *st;
    bool mounted;
};

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(p);
}

static int teardown(void **state);

static int setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    if (!fx)
        return -1;
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/sbx-store-XXXXXX");
    if (!mkdtemp(fx->dir)) {
        free(fx);
        return -1;
    }
    snprintf(fx->path, sizeof(fx->path), "%s/state.db", fx->dir);
    sbx_err e = {0};
    if (sbx_store_open(fx->path, NULL, &fx->st, &e) < 0) {
        char buf[512];
        print_error("%s\n", sbx_err_format(&e, buf, sizeof(buf)));
        teardown((void **)&fx);
        return -1;
    }
    *state = fx;
    return 0;
}

/* Only the directory: the test opens the store itself. */
static int setup_dir(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    if (!fx)
        return -1;
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/sbx-store-XXXXXX");
    if (!mkdtemp(fx->dir)) {
        free(fx);
        return -1;
    }
    snprintf(fx->path, sizeof(fx->path), "%s/state.db", fx->dir);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fx *fx = *state;
    sbx_store_close(fx->st);
    if (fx->mounted)
        umount2(fx->dir, MNT_DETACH);
    nftw(fx->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(fx);
    return 0;
}

static void reopen(struct fx *fx, const struct sbx_store_options *opts)
{
    sbx_err e = {0};
    sbx_store_close(fx->st);
    fx->st = NULL;
    assert_int_equal(sbx_store_open(fx->path, opts, &fx->st, &e), 0);
}

/* ---- Raw access, beside the store ---- */

static int64_t raw_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(db);
    return v;
}

static int raw_exec(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL),
                     SQLITE_OK);
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    sqlite3_close(db);
    return rc;
}

/* ---- Helpers ---- */

static void add_task(struct sbx_store *st, const char *tenant, const char *session, int64_t created,
                     char id[SBX_ID_SIZE])
{
    struct sbx_store_task t = {
        .tenant = tenant,
        .clone_id = "c1",
        .session_id = session,
        .command = "[\"/bin/true\"]",
        .created_at = created,
    };
    sbx_err e = {0};
    assert_int_equal(sbx_store_task_insert(st, &t, &e), 0);
    memcpy(id, t.id, SBX_ID_SIZE);
}

static int move(struct sbx_store *st, const char *id, enum sbx_task_status to, int64_t at,
                sbx_err *e)
{
    struct sbx_store_transition tr = {.to = to, .at = at};
    return sbx_store_task_transition(st, id, &tr, e);
}

static enum sbx_task_status status_of(struct sbx_store *st, const char *id)
{
    struct sbx_store_task *t = NULL;
    sbx_err e = {0};
    assert_int_equal(sbx_store_task_get(st, id, NULL, 0, &t, &e), 0);
    enum sbx_task_status s = t->status;
    sbx_store_task_free(t);
    return s;
}

/* ---- Migrations ---- */

static void migrations_fresh(void **state)
{
    struct fx *fx = *state;
    sbx_err e = {0};
    int v = 0;
    struct stat sb;

    assert_int_equal(sbx_store_schema_version(fx->st, &v, &e), 0);
    assert_int_equal(v, SBX_STORE_SCHEMA_VERSION);
    assert_int_equal(raw_int(fx->path, "PRAGMA user_version"), SBX_STORE_SCHEMA_VERSION);
    assert_int_equal(raw_int(fx->path, "SELECT count(*) FROM sqlite_schema WHERE type = 'table'"
                                       " AND name IN ('tasks', 'task_output', 'event_streams',"
                                       " 'events', 'clones', 'audit')"),
                     6);
    assert_int_equal(raw_int(fx->path, "SELECT journal_mode = 'wal' FROM pragma_journal_mode"), 1);
    assert_int_equal(stat(fx->path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_int_equal(sbx_store_check(fx->st, false, &e), 0);
}

static void migrations_reopen_idempotent(void **state)
{
    struct fx *fx = *state;
    char id[SBX_ID_SIZE];
    sbx_err e = {0};
    int v = 0;

    add_task(fx->st, "t1", "", 1000, id);
    int64_t objects = raw_int(fx->path, "SELECT count(*) FROM sqlite_schema");
    for (int i = 0; i < 3; i++)
        reopen(fx, NULL);
    assert_int_equal(sbx_store_schema_version(fx->st, &v, &e), 0);
    assert_int_equal(v, SBX_STORE_SCHEMA_VERSION);
    assert_int_equal(raw_int(fx->path, "SELECT count(*) FROM sqlite_schema"), objects);
    assert_int_equal(status_of(fx->st, id), SBX_TASK_PENDING);
}

static void migrations_future_version_refused(void **state)
{
    struct fx *fx = *state;
    struct sbx_store *st = NULL;
    sbx_err e = {0};

    sbx_store_close(fx->st);
    fx->st = NULL;
    assert_int_equal(raw_exec(fx->path, "PRAGMA user_version = 99"), SQLITE_OK);
    assert_int_equal(sbx_store_open(fx->path, NULL, &st, &e), -1);
    assert_null(st);
    assert_int_equal(e.errnum, ENOTSUP);
    assert_non_null(strstr(e.msg, "99"));
    assert_non_null(strstr(e.msg, "newer"));
    /* Refused, not downgraded. */
    assert_int_equal(raw_int(fx->path, "PRAGMA user_version"), 99);
}

static void foreign_database_refused(void **state)
{
    struct fx *fx = *state;
    struct sbx_store *st = NULL;
    sbx_err e = {0};

    assert_int_equal(raw_exec(fx->path, "CREATE TABLE theirs (x)"), SQLITE_OK);
    assert_int_equal(sbx_store_open(fx->path, NULL, &st, &e), -1);
    assert_int_equal(e.errnum, EINVAL);
    assert_non_null(strstr(e.msg, "not a sandboxd store"));
    assert_int_equal(raw_int(fx->path, "SELECT count(*) FROM sqlite_schema"), 1);
}

/* All pending steps go in one transaction: a failing step leaves nothing of
 * the earlier ones; fixed, both apply and the version follows. */
static void migration_steps_are_atomic(void **state)
{
    struct fx *fx = *state;
    sqlite3 *db = NULL;
    sbx_err e = {0};
    const struct store_migration broken[] = {
        {1, "CREATE TABLE a (x);"},
        {2, "CREATE TABLE b (x); THIS IS NOT SQL;"},
    };
    const struct store_migration good[] = {
        {1, "CREATE TABLE a (x);"},
        {2, "CREATE TABLE b (x);"},
    };

    assert_int_equal(sqlite3_open(fx->path, &db), SQLITE_OK);
    assert_int_equal(store_migrate(db, fx->path, broken, 2, &e), -1);
    assert_non_null(strstr(e.msg, "migrate to schema version 2"));
    assert_int_equal(raw_int(fx->path, "PRAGMA user_version"), 0);
    assert_int_equal(raw_int(fx->path, "SELECT count(*) FROM sqlite_schema"), 0);

    assert_int_equal(store_migrate(db, fx->path, good, 1, &e), 0);
    assert_int_equal(raw_int(fx->path, "PRAGMA user_version"), 1);
    assert_int_equal(store_migrate(db, fx->path, good, 2, &e), 0);
    assert_int_equal(raw_int(fx->path, "PRAGMA user_version"), 2);
    assert_int_equal(raw_int(fx->path, "SELECT count(*) FROM sqlite_schema"), 2);
    assert_int_equal(store_migrate(db, fx->path, good, 2, &e), 0);  /* nothing to do */
    assert_int_equal(store_migrate(db, fx->path, good, 1, &e), -1); /* 2 is the future */
    assert_int_equal(e.errnum, ENOTSUP);
    sqlite3_close(db);
}

/* ---- Tasks ---- */

static void task_insert_get(void **state)
{
    struct fx *fx = *state;
    struct sbx_store_task *got = NULL;
    sbx_err e = {0};
    struct sbx_store_task t = {
        .tenant = "acme",
        .clone_key = "k",
        .clone_id = "c",
        .session_id = "s1",
        .command = "[\"python3\",\"-c\",\"print(1)\"]",
        .language = "python",
        .code = "print(1)",
        .skill = "pdf",
        .skill_source = "shared",
        .skill_trust_level = "trusted",
        .limits = "{\"memoryMB\":256}",
        .created_at = 1700000000123,
    };

    assert_int_equal(sbx_store_task_insert(fx->st, &t, &e), 0);
    assert_true(sbx_id_valid(t.id));
    assert_int_equal(t.id[14], '7');
    assert_int_equal(sbx_store_task_get(fx->st, t.id, NULL, 0, &got, &e), 0);
    assert_string_equal(got->id, t.id);
    assert_string_equal(got->tenant, "acme");
    assert_string_equal(got->clone_key, "k");
    assert_string_equal(got->clone_id, "c");
    assert_string_equal(got->session_id, "s1");
    assert_string_equal(got->command, t.command);
    assert_string_equal(got->language, "python");
    assert_string_equal(got->code, "print(1)");
    assert_string_equal(got->backend, "sandbox");
    assert_string_equal(got->skill, "pdf");
    assert_string_equal(got->skill_source, "shared");
    assert_string_equal(got->skill_trust_level, "trusted");
    assert_string_equal(got->limits, "{\"memoryMB\":256}");
    assert_string_equal(got->sandbox, "");
    assert_string_equal(got->error, "");
    assert_null(got->result);
    assert_int_equal(got->status, SBX_TASK_PENDING);
    assert_int_equal(got->created_at, 1700000000123);
    assert_int_equal(got->started_at, 0);
    assert_int_equal(got->ended_at, 0);
    assert_int_equal(got->stdout_len, 0);
    assert_null(got->stdout_data);
    sbx_store_task_free(got);

    /* Given as a command only: no language, no code. */
    struct sbx_store_task plain = {.tenant = "acme", .command = "[\"ls\"]"};
    assert_int_equal(sbx_store_task_insert(fx->st, &plain, &e), 0);
    assert_int_equal(sbx_store_task_get(fx->st, plain.id, NULL, 0, &got, &e), 0);
    assert_null(got->language);
    assert_null(got->code);
    assert_null(got->limits);
    assert_string_equal(got->session_id, "");
    assert_true(got->created_at > 1700000000000); /* now */
    sbx_store_task_free(got);

    /* The same id twice, a command that is not a JSON array, no tenant. */
    struct sbx_store_task dup = {.tenant = "acme"};
    memcpy(dup.id, t.id, sizeof(dup.id));
    assert_int_equal(sbx_store_task_insert(fx->st, &dup, &e), -1);
    assert_int_equal(e.errnum, EEXIST);
    struct sbx_store_task bad = {.tenant = "acme", .command = "{\"not\":\"an array\"}"};
    assert_int_equal(sbx_store_task_insert(fx->st, &bad, &e), -1);
    assert_int_equal(e.errnum, EINVAL);
    assert_non_null(strstr(e.msg, "command_is_a_json_array"));
    struct sbx_store_task anon = {.command = "[]"};
    assert_int_equal(sbx_store_task_insert(fx->st, &anon, &e), -1);
    assert_int_equal(e.errnum, EINVAL);
    assert_int_equal(raw_int(fx->path, "SELECT count(*) FROM tasks"), 2);
}

static void task_legal_transitions(void **state)
{
    struct fx *fx = *state;
    char id[SBX_ID_SIZE];
    struct sbx_store_task *got = NULL;
    sbx_err e = {0};
    static const char out[] = "hello\n";
    static const char errout[] = {'w', 0, 'x'}; /* binary safe */

    add_task(fx->st, "t1", "", 1000, id);
    struct sbx_store_transition run = {.to = SBX_TASK_RUNNING, .at = 2000, .sandbox = "sbx-1"};
    assert_int_equal(sbx_store_task_transition(fx->st, id, &run, &e), 0);
    struct sbx_store_transition done = {
        .to = SBX_TASK_SUCCEEDED,
        .at = 3000,
        .result = "{\"exitCode\":0,\"outcome\":\"exited\"}",
        .stdout_data = out,
        .stdout_len = strlen(out),
        .stderr_data = errout,
        .stderr_len = sizeof(errout),
    };
    assert_int_equal(sbx_store_task_transition(fx->st, id, &done, &e), 0);

    assert_int_equal(sbx_store_task_get(fx->st, id, NULL, SBX_STORE_WITH_OUTPUT, &got, &e), 0);
    assert_int_equal(got->status, SBX_TASK_SUCCEEDED);
    assert_int_equal(got->started_at, 2000);
    assert_int_equal(got->ended_at, 3000);
    assert_string_equal(got->sandbox, "sbx-1");
    assert_string_equal(got->result, done.result);
    assert_int_equal(got->stdout_len, strlen(out));
    assert_memory_equal(got->stdout_data, out, strlen(out));
    assert_int_equal(got->stderr_len, sizeof(errout));
    assert_memory_equal(got->stderr_data, errout, sizeof(errout));
    sbx_store_task_free(got);
    /* Without output: the lengths only. */
    assert_int_equal(sbx_store_task_get(fx->st, id, NULL, 0, &got, &e), 0);
    assert_null(got->stdout_data);
    assert_int_equal(got->stdout_len, strlen(out));
    sbx_store_task_free(got);

    /* Every other legal edge. */
    const enum sbx_task_status from_pending[] = {SBX_TASK_CANCELED, SBX_TASK_INTERRUPTED};
    for (size_t i = 0; i < 2; i++) {
        add_task(fx->st, "t1", "", 1000, id);
        assert_int_equal(move(fx->st, id, from_pending[i], 1500, &e), 0);
        assert_int_equal(status_of(fx->st, id), from_pending[i]);
    }
    const enum sbx_task_status from_running[] = {SBX_TASK_FAILED, SBX_TASK_CANCELED,
                                                 SBX_TASK_TIMEOUT, SBX_TASK_INTERRUPTED};
    for (size_t i = 0; i < 4; i++) {
        add_task(fx->st, "t1", "", 1000, id);
        assert_int_equal(move(fx->st, id, SBX_TASK_RUNNING, 1500, &e), 0);
        struct sbx_store_transition tr = {.to = from_running[i], .at = 1600, .error = "boom"};
        assert_int_equal(sbx_store_task_transition(fx->st, id, &tr, &e), 0);
        assert_int_equal(sbx_store_task_get(fx->st, id, NULL, 0, &got, &e), 0);
        assert_int_equal(got->status, from_running[i]);
        assert_string_equal(got->error, "boom");
        assert_int_equal(got->ended_at, 1600);
        sbx_store_task_free(got);
    }
}

static void task_illegal_transitions(void **state)
{
    struct fx *fx = *state;
    char id[SBX_ID_SIZE];
    sbx_err e = {0};

    /* The whole matrix of the pure check. */
    for (int from = SBX_TASK_PENDING; from <= SBX_TASK_INTERRUPTED; from++) {
        for (int to = SBX_TASK_PENDING; to <= SBX_TASK_INTERRUPTED; to++) {
            bool want =
                (from == SBX_TASK_PENDING && (to == SBX_TASK_RUNNING || to == SBX_TASK_CANCELED ||
                                              to == SBX_TASK_INTERRUPTED)) ||
                (from == SBX_TASK_RUNNING && to >= SBX_TASK_SUCCEEDED);
            assert_int_equal(sbx_task_transition_legal(from, to), want);
        }
    }

    add_task(fx->st, "t1", "", 1000, id);
    assert_int_equal(move(fx->st, id, SBX_TASK_SUCCEEDED, 2000, &e), -1);
    assert_int_equal(e.errnum, EINVAL);
    assert_non_null(strstr(e.msg, "pending -> succeeded"));
    assert_int_equal(status_of(fx->st, id), SBX_TASK_PENDING);

    assert_int_equal(move(fx->st, id, SBX_TASK_RUNNING, 2000, &e), 0);
    assert_int_equal(move(fx->st, id, SBX_TASK_RUNNING, 2001, &e), -1);
    assert_non_null(strstr(e.msg, "running -> running"));
    assert_int_equal(move(fx->st, id, SBX_TASK_PENDING, 2001, &e), -1);
    assert_int_equal(move(fx->st, id, SBX_TASK_FAILED, 3000, &e), 0);
    assert_int_equal(move(fx->st, id, SBX_TASK_RUNNING, 4000, &e), -1);
    assert_int_equal(e.errnum, EINVAL);
    assert_non_null(strstr(e.msg, "failed -> running"));
    assert_int_equal(move(fx->st, id, SBX_TASK_SUCCEEDED, 4000, &e), -1);
    assert_non_null(strstr(e.msg, "failed -> succeeded"));

    /* Refused means unchanged, outputs included. */
    struct sbx_store_task *got = NULL;
    assert_int_equal(sbx_store_task_get(fx->st, id, NULL, 0, &got, &e), 0);
    assert_int_equal(got->status, SBX_TASK_FAILED);
    assert_int_equal(got->ended_at, 3000);
    sbx_store_task_free(got);

    char other[SBX_ID_SIZE];
    assert_int_equal(sbx_id_new(other, NULL), 0);
    assert_int_equal(move(fx->st, other, SBX_TASK_RUNNING, 1, &e), -1);
    assert_int_equal(e.errnum, ENOENT);

    /* Output over the cap. */
    add_task(fx->st, "t1", "", 1000, id);
    assert_int_equal(move(fx->st, id, SBX_TASK_RUNNING, 2000, &e), 0);
    struct sbx_store_transition big = {
        .to = SBX_TASK_SUCCEEDED, .stdout_data = "x", .stdout_len = SBX_STORE_OUTPUT_MAX + 1};
    assert_int_equal(sbx_store_task_transition(fx->st, id, &big, &e), -1);
    assert_int_equal(e.errnum, EFBIG);
    assert_int_equal(status_of(fx->st, id), SBX_TASK_RUNNING);
}

static void task_tenant_restriction(void **state)
{
    struct fx *fx = *state;
    char id[SBX_ID_SIZE], missing[SBX_ID_SIZE];
    struct sbx_store_task *got = NULL;
    sbx_err e = {0}, e2 = {0};

    add_task(fx->st, "acme", "", 1000, id);
    assert_int_equal(sbx_store_task_get(fx->st, id, "acme", 0, &got, &e), 0);
    sbx_store_task_free(got);
    got = NULL;
    assert_int_equal(sbx_store_task_get(fx->st, id, NULL, 0, &got, &e), 0);
    sbx_store_task_free(got);
    got = NULL;

    assert_int_equal(sbx_store_task_get(fx->st, id, "globex", 0, &got, &e), -1);
    assert_null(got);
    assert_int_equal(e.errnum, ENOENT);
    /* Exactly the answer for a task that does not exist. */
    assert_int_equal(sbx_id_new(missing, NULL), 0);
    assert_int_equal(sbx_store_task_get(fx->st, missing, "globex", 0, &got, &e2), -1);
    assert_int_equal(e2.errnum, ENOENT);
    assert_int_equal(sbx_store_task_get(fx->st, "../../x", NULL, 0, &got, &e2), -1);
    assert_int_equal(e2.errnum, ENOENT);

    /* Listing is restricted the same way. */
    struct sbx_store_task_page page;
    struct sbx_store_task_filter f = {.tenant = "globex", .limit = 10};
    assert_int_equal(sbx_store_task_list(fx->st, &f, &page, &e), 0);
    assert_int_equal(page.n, 0);
    sbx_store_task_page_free(&page);
}

static void task_list_paging(void **state)
{
    struct fx *fx = *state;
    enum { N = 25 };
    char ids[N][SBX_ID_SIZE], other[SBX_ID_SIZE];
    bool seen[N] = {false};
    sbx_err e = {0};

    /* Pairs share a millisecond, so the id breaks ties. */
    for (int i = 0; i < N; i++)
        add_task(fx->st, "acme", i % 2 ? "s1" : "s2", 1000 + i / 2, ids[i]);
    add_task(fx->st, "globex", "", 5000, other);

    char cursor[SBX_STORE_CURSOR_SIZE] = "";
    size_t sizes[4] = {0};
    int pages = 0, total = 0;
    int64_t prev_time = INT64_MAX;
    char prev_id[SBX_ID_SIZE] = "~";
    do {
        struct sbx_store_task_page p;
        struct sbx_store_task_filter f = {.tenant = "acme", .limit = 10, .cursor = cursor};
        assert_int_equal(sbx_store_task_list(fx->st, &f, &p, &e), 0);
        assert_true(pages < 4);
        sizes[pages++] = p.n;
        for (size_t j = 0; j < p.n; j++) {
            const struct sbx_store_task *t = p.tasks[j];
            /* Newest first, strictly. */
            assert_true(t->created_at < prev_time ||
                        (t->created_at == prev_time && strcmp(t->id, prev_id) < 0));
            prev_time = t->created_at;
            memcpy(prev_id, t->id, SBX_ID_SIZE);
            int k = -1;
            for (int i = 0; i < N; i++)
                if (strcmp(ids[i], t->id) == 0)
                    k = i;
            assert_true(k >= 0);
            assert_false(seen[k]);
            seen[k] = true;
            total++;
        }
        memcpy(cursor, p.next_cursor, sizeof(cursor));
        sbx_store_task_page_free(&p);
    } while (cursor[0]);
    assert_int_equal(pages, 3);
    assert_int_equal(sizes[0], 10);
    assert_int_equal(sizes[1], 10);
    assert_int_equal(sizes[2], 5);
    assert_int_equal(total, N);

    /* Status filter: three of them running. */
    for (int i = 3; i < 6; i++)
        assert_int_equal(move(fx->st, ids[i], SBX_TASK_RUNNING, 2000, &e), 0);
    struct sbx_store_task_page p;
    struct sbx_store_task_filter f = {.tenant = "acme", .status = SBX_TASK_RUNNING, .limit = 2};
    assert_int_equal(sbx_store_task_list(fx->st, &f, &p, &e), 0);
    assert_int_equal(p.n, 2);
    assert_true(p.next_cursor[0]);
    assert_int_equal(p.tasks[0]->status, SBX_TASK_RUNNING);
    assert_int_equal(p.tasks[1]->status, SBX_TASK_RUNNING);
    f.cursor = p.next_cursor;
    struct sbx_store_task_page p2;
    assert_int_equal(sbx_store_task_list(fx->st, &f, &p2, &e), 0);
    assert_int_equal(p2.n, 1);
    assert_int_equal(p2.tasks[0]->status, SBX_TASK_RUNNING);
    assert_string_equal(p2.next_cursor, "");
    sbx_store_task_page_free(&p);
    sbx_store_task_page_free(&p2);

    /* Session filter, and all tenants. */
    struct sbx_store_task_filter fs = {.session_id = "s1", .limit = 500};
    assert_int_equal(sbx_store_task_list(fx->st, &fs, &p, &e), 0);
    assert_int_equal(p.n, N / 2);
    for (size_t j = 0; j < p.n; j++)
        assert_string_equal(p.tasks[j]->session_id, "s1");
    sbx_store_task_page_free(&p);
    struct sbx_store_task_filter fa = {.limit = 500};
    assert_int_equal(sbx_store_task_list(fx->st, &fa, &p, &e), 0);
    assert_int_equal(p.n, N + 1);
    assert_string_equal(p.tasks[0]->tenant, "globex");
    sbx_store_task_page_free(&p);

    /* Bad limits and cursors. */
    struct sbx_store_task_filter bad = {.limit = 0};
    assert_int_equal(sbx_store_task_list(fx->st, &bad, &p, &e), -1);
    assert_int_equal(e.errnum, EINVAL);
    bad.limit = SBX_STORE_LIST_MAX + 1;
    assert_int_equal(sbx_store_task_list(fx->st, &bad, &p, &e), -1);
    bad.limit = 10;
    bad.cursor = "not-a-cursor";
    assert_int_equal(sbx_store_task_list(fx->st, &bad, &p, &e), -1);
    assert_int_equal(e.errnum, EINVAL);
    bad.cursor = "zz0000000000000000000000000000000000000000000000";
    assert_int_equal(sbx_store_task_list(fx->st, &bad, &p, &e), -1);
}

static void task_active_counts(void **state)
{
    struct fx *fx = *state;
    char id[SBX_ID_SIZE];
    struct sbx_store_task_counts c;
    sbx_err e = {0};

    for (int i = 0; i < 3; i++)
        add_task(fx->st, "acme", "", 1000, id); /* pending */
    assert_int_equal(move(fx->st, id, SBX_TASK_RUNNING, 2000, &e), 0);
    add_task(fx->st, "acme", "", 1000, id);
    assert_int_equal(move(fx->st, id, SBX_TASK_CANCELED, 2000, &e), 0);
    add_task(fx->st, "globex", "", 1000, id);
    assert_int_equal(move(fx->st, id, SBX_TASK_RUNNING, 2000, &e), 0);

    assert_int_equal(sbx_store_task_count_active(fx->st, "acme", &c, &e), 0);
    assert_int_equal(c.pending, 2);
    assert_int_equal(c.running, 1);
    assert_int_equal(sbx_store_task_count_active(fx->st, "globex", &c, &e), 0);
    assert_int_equal(c.pending, 0);
    assert_int_equal(c.running, 1);
    assert_int_equal(sbx_store_task_count_active(fx->st, NULL, &c, &e), 0);
    assert_int_equal(c.pending, 2);
    assert_int_equal(c.running, 2);
    assert_int_equal(sbx_store_task_count_active(fx->st, "nobody", &c, &e), 0);
    assert_int_equal(c.pending + c.running, 0);
}

/* ---- Recovery ---- */

static void recover_marks_unfinished(void **state)
{
    struct fx *fx = *state;
    char pending[SBX_ID_SIZE], run1[SBX_ID_SIZE], run2[SBX_ID_SIZE], run3[SBX_ID_SIZE],
        done[SBX_ID_SIZE];
    struct sbx_store_recovery r;
    sbx_err e = {0};

    add_task(fx->st, "acme", "", 1000, pending);
    add_task(fx->st, "acme", "s", 1000, run1);
    add_task(fx->st, "acme", "s", 1000, run2);
    add_task(fx->st, "acme", "", 1000, run3);
    add_task(fx->st, "acme", "", 1000, done);
    struct sbx_store_transition in_session = {
        .to = SBX_TASK_RUNNING, .at = 2000, .sandbox = "sess-s"};
    struct sbx_store_transition one_shot = {
        .to = SBX_TASK_RUNNING, .at = 2000, .sandbox = "task-3"};
    assert_int_equal(sbx_store_task_transition(fx->st, run1, &in_session, &e), 0);
    assert_int_equal(sbx_store_task_transition(fx->st, run2, &in_session, &e), 0);
    assert_int_equal(sbx_store_task_transition(fx->st, run3, &one_shot, &e), 0);
    assert_int_equal(sbx_store_task_transition(fx->st, done, &one_shot, &e), 0);
    struct sbx_store_transition ok = {.to = SBX_TASK_SUCCEEDED, .at = 3000, .error = ""};
    assert_int_equal(sbx_store_task_transition(fx->st, done, &ok, &e), 0);

    reopen(fx, NULL); /* as after a crash */
    assert_int_equal(sbx_store_recover(fx->st, 9000, &r, &e), 0);
    assert_int_equal(r.interrupted, 4);
    assert_int_equal(r.n_sandboxes, 2); /* distinct, running tasks only */
    assert_string_equal(r.sandboxes[0], "sess-s");
    assert_string_equal(r.sandboxes[1], "task-3");
    sbx_store_recovery_free(&r);

    const char *ids[] = {pending, run1, run2, run3};
    for (size_t i = 0; i < 4; i++) {
        struct sbx_store_task *t = NULL;
        assert_int_equal(sbx_store_task_get(fx->st, ids[i], NULL, 0, &t, &e), 0);
        assert_int_equal(t->status, SBX_TASK_INTERRUPTED);
        assert_string_equal(t->error, "daemon restarted");
        assert_int_equal(t->ended_at, 9000);
        assert_int_equal(t->started_at, i == 0 ? 0 : 2000);
        sbx_store_task_free(t);
    }
    struct sbx_store_task *t = NULL;
    assert_int_equal(sbx_store_task_get(fx->st, done, NULL, 0, &t, &e), 0);
    assert_int_equal(t->status, SBX_TASK_SUCCEEDED);
    assert_int_equal(t->ended_at, 3000);
    assert_string_equal(t->error, "");
    sbx_store_task_free(t);

    assert_int_equal(sbx_store_recover(fx->st, 9500, &r, &e), 0);
    assert_int_equal(r.interrupted, 0);
    assert_int_equal(r.n_sandboxes, 0);
    sbx_store_recovery_free(&r);
}

/* ---- Events ---- */

struct collected {
    uint64_t ids[64];
    char types[64][16];
    size_t n;
    size_t stop_after; /* 0: never */
    struct sbx_store *st;
    int reentry_errnum;
};

static int collect(void *ctx, const struct sbx_store_event *ev)
{
    struct collected *c = ctx;
    c->ids[c->n] = ev->id;
    snprintf(c->types[c->n], sizeof(c->types[0]), "%s", ev->type);
    c->n++;
    if (c->st) {
        uint64_t id;
        sbx_err e = {0};
        if (sbx_store_event_append(c->st, "A", "nested", 0, NULL, &id, &e) < 0)
            c->reentry_errnum = e.errnum;
    }
    return c->stop_after && c->n == c->stop_after ? 42 : 0;
}

static uint64_t append(struct sbx_store *st, const char *session, const char *type, int64_t t)
{
    uint64_t id = 0;
    sbx_err e = {0};
    assert_int_equal(sbx_store_event_append(st, session, type, t, "{\"k\":1}", &id, &e), 0);
    return id;
}

static void events_ids_per_session(void **state)
{
    struct fx *fx = *state;
    sbx_err e = {0};
    uint64_t id;

    assert_int_equal(append(fx->st, "A", "runtime_started", 1), 1);
    assert_int_equal(append(fx->st, "A", "exec_started", 2), 2);
    assert_int_equal(append(fx->st, "B", "runtime_started", 3), 1);
    assert_int_equal(append(fx->st, "A", "exec_finished", 4), 3);
    assert_int_equal(append(fx->st, "B", "exec_started", 5), 2);
    reopen(fx, NULL); /* the counters are durable */
    assert_int_equal(append(fx->st, "A", "runtime_stopped", 6), 4);
    assert_int_equal(append(fx->st, "C", "runtime_started", 7), 1);

    assert_int_equal(sbx_store_event_append(fx->st, "A", "x", 8, "not json", &id, &e), -1);
    assert_int_equal(e.errnum, EINVAL);
    assert_int_equal(sbx_store_event_append(fx->st, "", "x", 8, NULL, &id, &e), -1);
    assert_int_equal(sbx_store_event_append(fx->st, "A", "", 8, NULL, &id, &e), -1);
    /* A refused append used no id. */
    assert_int_equal(append(fx->st, "A", "text_delta", 9), 5);
}

static void events_since_order_and_limit(void **state)
{
    struct fx *fx = *state;
    struct sbx_store_event_range range;
    sbx_err e = {0};

    for (int i = 1; i <= 10; i++) {
        char type[16];
        snprintf(type, sizeof(type), "t%d", i);
        append(fx->st, "A", type, i);
        append(fx->st, "B", "other", i);
    }
    struct collected c = {0};
    assert_int_equal(sbx_store_events_since(fx->st, "A", 3, 4, collect, &c, &range, &e), 0);
    assert_int_equal(c.n, 4);
    for (size_t i = 0; i < 4; i++) {
        char type[16];
        snprintf(type, sizeof(type), "t%zu", i + 4);
        assert_int_equal(c.ids[i], i + 4);
        assert_string_equal(c.types[i], type);
    }
    assert_int_equal(range.oldest, 1);
    assert_int_equal(range.last, 10);

    memset(&c, 0, sizeof(c));
    assert_int_equal(sbx_store_events_since(fx->st, "A", 0, 100, collect, &c, &range, &e), 0);
    assert_int_equal(c.n, 10);
    for (size_t i = 0; i < 10; i++)
        assert_int_equal(c.ids[i], i + 1);

    /* Stopped by the callback: its value comes back. */
    memset(&c, 0, sizeof(c));
    c.stop_after = 2;
    assert_int_equal(sbx_store_events_since(fx->st, "A", 0, 100, collect, &c, NULL, &e), 42);
    assert_int_equal(c.n, 2);

    /* Caught up, and a session never seen. */
    memset(&c, 0, sizeof(c));
    assert_int_equal(sbx_store_events_since(fx->st, "A", 10, 100, collect, &c, &range, &e), 0);
    assert_int_equal(c.n, 0);
    assert_int_equal(sbx_store_events_since(fx->st, "nope", 0, 100, collect, &c, &range, &e), 0);
    assert_int_equal(c.n, 0);
    assert_int_equal(range.last, 0);
    assert_int_equal(range.oldest, 1);
    uint64_t from, to;
    assert_int_equal(sbx_store_events_lost(&range, 0, &from, &to), -1);

    /* The callback may not call back into the store. */
    memset(&c, 0, sizeof(c));
    c.st = fx->st;
    assert_int_equal(sbx_store_events_since(fx->st, "A", 8, 100, collect, &c, NULL, &e), 0);
    assert_int_equal(c.n, 2);
    assert_int_equal(c.reentry_errnum, EBUSY);
    assert_int_equal(append(fx->st, "A", "after", 11), 11); /* and the store still works */

    assert_int_equal(sbx_store_events_since(fx->st, "A", 0, 0, collect, &c, NULL, &e), -1);
    assert_int_equal(e.errnum, EINVAL);
}

static void events_bound_and_gap(void **state)
{
    struct fx *fx = *state;
    struct sbx_store_options opts = {.event_bound = 5};
    struct sbx_store_event_range range;
    struct collected c = {0};
    uint64_t from = 0, to = 0;
    sbx_err e = {0};

    reopen(fx, &opts);
    for (int i = 1; i <= 12; i++)
        assert_int_equal(append(fx->st, "A", "chunk", i), (uint64_t)i);
    append(fx->st, "B", "chunk", 1);
    assert_int_equal(raw_int(fx->path, "SELECT count(*) FROM events WHERE session_id = 'A'"), 5);
    assert_int_equal(raw_int(fx->path, "SELECT min(id) FROM events WHERE session_id = 'A'"), 8);

    /* A client that saw up to 2 lost 3..7, then gets 8..12. */
    assert_int_equal(sbx_store_events_since(fx->st, "A", 2, 100, collect, &c, &range, &e), 0);
    assert_int_equal(range.oldest, 8);
    assert_int_equal(range.last, 12);
    assert_int_equal(sbx_store_events_lost(&range, 2, &from, &to), 0);
    assert_int_equal(from, 3);
    assert_int_equal(to, 7);
    assert_int_equal(c.n, 5);
    assert_int_equal(c.ids[0], 8);
    assert_int_equal(c.ids[4], 12);

    /* Exactly at the edge, and past it: nothing lost. */
    assert_int_equal(sbx_store_events_lost(&range, 7, &from, &to), -1);
    assert_int_equal(sbx_store_events_lost(&range, 10, &from, &to), -1);
    assert_int_equal(sbx_store_events_lost(&range, UINT64_MAX, &from, &to), -1);
    /* From the very start: 1..7 lost. */
    assert_int_equal(sbx_store_events_lost(&range, 0, &from, &to), 0);
    assert_int_equal(from, 1);
    assert_int_equal(to, 7);

    /* B is untouched by A's bound. */
    assert_int_equal(sbx_store_events_since(fx->st, "B", 0, 100, NULL, NULL, &range, &e), 0);
    assert_int_equal(range.oldest, 1);
    assert_int_equal(range.last, 1);
}

/* ---- Clones ---- */

static uint32_t clone_base(struct sbx_store *st, const char *tenant, const char *id, uint32_t first,
                           uint32_t stride, uint32_t max)
{
    uint32_t base = 0;
    sbx_err e = {0};
    assert_int_equal(sbx_store_clone_base(st, tenant, "k", id, first, stride, max, &base, &e), 0);
    return base;
}

static void clone_bases_stable_and_unique(void **state)
{
    struct fx *fx = *state;
    uint32_t base = 0;
    sbx_err e = {0};

    assert_int_equal(clone_base(fx->st, "acme", "c1", 100000, 65536, 4), 100000);
    assert_int_equal(clone_base(fx->st, "acme", "c2", 100000, 65536, 4), 165536);
    assert_int_equal(clone_base(fx->st, "globex", "c1", 100000, 65536, 4), 231072);
    assert_int_equal(clone_base(fx->st, "acme", "c1", 100000, 65536, 4), 100000);
    reopen(fx, NULL);
    assert_int_equal(clone_base(fx->st, "acme", "c2", 100000, 65536, 4), 165536);
    assert_int_equal(clone_base(fx->st, "acme", "c3", 100000, 65536, 4), 296608);
    /* All four taken. */
    assert_int_equal(sbx_store_clone_base(fx->st, "acme", "k", "c5", 100000, 65536, 4, &base, &e),
                     -1);
    assert_int_equal(e.errnum, ERANGE);
    /* A known clone still gets its range, whatever the parameters now. */
    assert_int_equal(clone_base(fx->st, "globex", "c1", 0, 1, 1), 231072);

    /* A new stride never overlaps the ranges already given. */
    uint32_t b = clone_base(fx->st, "acme", "c6", 100000, 1000, 1000);
    assert_true(b >= 362144);
    assert_int_equal((b - 100000) % 1000, 0);
    /* A hole below the first base is found when there is no room above. */
    assert_int_equal(clone_base(fx->st, "acme", "c7", 0, 50000, 3), 0);
    assert_int_equal(clone_base(fx->st, "acme", "c8", 0, 50000, 3), 50000);
    assert_int_equal(sbx_store_clone_base(fx->st, "acme", "k", "c9", 0, 50000, 3, &base, &e), -1);
    assert_int_equal(e.errnum, ERANGE);
    assert_int_equal(raw_int(fx->path, "SELECT count(*) FROM clones a JOIN clones b"
                                       " ON a.rowid < b.rowid"
                                       " AND a.host_id_base < b.host_id_base + b.host_id_count"
                                       " AND b.host_id_base < a.host_id_base + a.host_id_count"),
                     0);

    /* Ranges that would run past 32 bits. */
    assert_int_equal(
        sbx_store_clone_base(fx->st, "acme", "k", "cx", 4000000000u, 65536, 10000, &base, &e), -1);
    assert_int_equal(e.errnum, EINVAL);
}

/* ---- Audit ---- */

struct audit_seen {
    int64_t seq[8];
    char action[8][16];
    size_t n;
};

static int audit_collect(void *ctx, const struct sbx_store_audit *rec)
{
    struct audit_seen *a = ctx;
    a->seq[a->n] = rec->seq;
    snprintf(a->action[a->n], sizeof(a->action[0]), "%s", rec->action);
    a->n++;
    return 0;
}

static void audit_append_only(void **state)
{
    struct fx *fx = *state;
    struct audit_seen a = {0};
    sbx_err e = {0};
    const char *actions[] = {"task.create", "task.cancel", "files.put"};

    for (size_t i = 0; i < 3; i++) {
        struct sbx_store_audit rec = {.time = 1000 + (int64_t)i,
                                      .identity = "ops-token",
                                      .action = actions[i],
                                      .target = "task/1",
                                      .detail = "{\"tenant\":\"acme\"}"};
        assert_int_equal(sbx_store_audit_append(fx->st, &rec, &e), 0);
    }
    assert_int_equal(sbx_store_audit_since(fx->st, 0, 100, audit_collect, &a, &e), 0);
    assert_int_equal(a.n, 3);
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(a.action[i], actions[i]);
    assert_true(a.seq[0] < a.seq[1] && a.seq[1] < a.seq[2]);
    memset(&a, 0, sizeof(a));
    assert_int_equal(sbx_store_audit_since(fx->st, 1, 1, audit_collect, &a, &e), 0);
    assert_int_equal(a.n, 1);
    assert_string_equal(a.action[0], "task.cancel");

    assert_int_equal(raw_exec(fx->path, "UPDATE audit SET identity = 'someone else'"),
                     SQLITE_CONSTRAINT);
    assert_int_equal(
        raw_exec(fx->path, "DELETE FROM audit WHERE seq = (SELECT max(seq) FROM audit)"),
        SQLITE_CONSTRAINT);
    assert_int_equal(raw_int(fx->path, "SELECT count(*) FROM audit WHERE identity='ops-token'"), 3);

    struct sbx_store_audit anon = {.action = "x"};
    assert_int_equal(sbx_store_audit_append(fx->st, &anon, &e), -1);
    assert_int_equal(e.errnum, EINVAL);
}

/* ---- Retention ---- */

static void finish(struct sbx_store *st, const char *id, int64_t ended)
{
    sbx_err e = {0};
    struct sbx_store_transition run = {.to = SBX_TASK_RUNNING, .at = ended - 1};
    struct sbx_store_transition done = {
        .to = SBX_TASK_SUCCEEDED, .at = ended, .stdout_data = "out", .stdout_len = 3};
    assert_int_equal(sbx_store_task_transition(st, id, &run, &e), 0);
    assert_int_equal(sbx_store_task_transition(st, id, &done, &e), 0);
}

static void prune_by_age_and_count(void **state)
{
    struct fx *fx = *state;
    char old[3][SBX_ID_SIZE], young[5][SBX_ID_SIZE], active[SBX_ID_SIZE];
    struct sbx_store_prune_counts n;
    sbx_err e = {0};

    for (int i = 0; i < 3; i++) {
        add_task(fx->st, "acme", "", 100 + i, old[i]);
        finish(fx->st, old[i], 200 + i);
    }
    for (int i = 0; i < 5; i++) {
        add_task(fx->st, "acme", "", 1000 + i, young[i]);
        finish(fx->st, young[i], 2000 + i);
    }
    add_task(fx->st, "acme", "", 50, active); /* oldest of all, but pending */
    append(fx->st, "idle", "x", 100);
    append(fx->st, "idle", "y", 150);
    append(fx->st, "live", "x", 100);
    append(fx->st, "live", "y", 5000);

    /* Age: the three old ones and the idle session go. */
    assert_int_equal(sbx_store_prune(fx->st, 1000, 0, &n, &e), 0);
    assert_int_equal(n.tasks, 3);
    assert_int_equal(n.events, 2);
    assert_int_equal(n.sessions, 1);
    assert_false(n.more);
    for (int i = 0; i < 3; i++) {
        struct sbx_store_task *t = NULL;
        assert_int_equal(sbx_store_task_get(fx->st, old[i], NULL, 0, &t, &e), -1);
        assert_int_equal(e.errnum, ENOENT);
    }
    assert_int_equal(status_of(fx->st, active), SBX_TASK_PENDING);
    assert_int_equal(raw_int(fx->path, "SELECT count(*) FROM task_output"), 5); /* cascaded */
    struct sbx_store_event_range range;
    assert_int_equal(sbx_store_events_since(fx->st, "live", 0, 10, NULL, NULL, &range, &e), 0);
    assert_int_equal(range.oldest, 1);
    assert_int_equal(range.last, 2);
    assert_int_equal(sbx_store_events_since(fx->st, "idle", 0, 10, NULL, NULL, &range, &e), 0);
    assert_int_equal(range.last, 0);

    /* Count: keep the newest two finished tasks; the pending one stays. */
    assert_int_equal(sbx_store_prune(fx->st, 0, 2, &n, &e), 0);
    assert_int_equal(n.tasks, 3);
    assert_int_equal(raw_int(fx->path, "SELECT count(*) FROM tasks"), 3);
    assert_int_equal(status_of(fx->st, young[4]), SBX_TASK_SUCCEEDED);
    assert_int_equal(status_of(fx->st, young[3]), SBX_TASK_SUCCEEDED);
    assert_int_equal(status_of(fx->st, active), SBX_TASK_PENDING);
    assert_int_equal(raw_int(fx->path, "SELECT count(*) FROM task_output"), 2);

    /* Nothing left to do. */
    assert_int_equal(sbx_store_prune(fx->st, 1000, 2, &n, &e), 0);
    assert_int_equal(n.tasks + n.events + n.sessions, 0);
}

static void prune_in_batches(void **state)
{
    struct fx *fx = *state;
    struct sbx_store_prune_counts n;
    char id[SBX_ID_SIZE];
    sbx_err e = {0};
    uint64_t total = 0;
    int calls = 0;

    for (int i = 0; i < 100; i++) {
        add_task(fx->st, "acme", "", 100 + i, id);
        finish(fx->st, id, 200 + i);
    }
    do {
        assert_int_equal(sbx_store_prune(fx->st, 1000, 0, &n, &e), 0);
        total += n.tasks;
        calls++;
    } while (n.more);
    assert_int_equal(total, 100);
    assert_true(calls >= 2);
    assert_int_equal(raw_int(fx->path, "SELECT count(*) FROM tasks"), 0);
}

/* ---- A full disk ---- */

/* The audit log's retention: oldest first, by count and by age, in batches. */
static void audit_retention(void **state)
{
    struct fx *fx = *state;
    sbx_err e = {0};
    for (int i = 0; i < 5000; i++) {
        struct sbx_store_audit rec = {
            .time = 1000 + i, .identity = "ops", .action = "task_submit", .target = "t"};
        assert_int_equal(sbx_store_audit_append(fx->st, &rec, &e), 0);
    }
    uint64_t n = 0, total = 0;
    bool more = true;
    while (more) {
        assert_int_equal(sbx_store_prune_audit(fx->st, 0, 1000, &n, &more, &e), 0);
        total += n;
    }
    assert_int_equal(total, 4000);
    assert_int_equal(raw_int(fx->path, "SELECT count(*) FROM audit"), 1000);
    assert_int_equal(raw_int(fx->path, "SELECT min(time) FROM audit"), 5000);
    /* by age: everything before time 5500 goes */
    assert_int_equal(sbx_store_prune_audit(fx->st, 5500, 0, &n, &more, &e), 0);
    assert_int_equal(n, 500);
    assert_false(more);
    assert_int_equal(raw_int(fx->path, "SELECT min(time) FROM audit"), 5500);
    /* nothing to do, no bounds: no change */
    assert_int_equal(sbx_store_prune_audit(fx->st, 0, 0, &n, &more, &e), 0);
    assert_int_equal(n, 0);
    /* still append-only for anything but the oldest */
    assert_int_equal(raw_exec(fx->path, "DELETE FROM audit WHERE time = 5700"), SQLITE_CONSTRAINT);
}

/* A full disk: the reserve file is given up for the write that needs room,
 * the store says it is not healthy, and is again once there is room. */
static void reserve_spent_on_a_full_disk(void **state)
{
    struct fx *fx = *state;
    sbx_err e = {0};
    assert_int_equal(mount("tmpfs", fx->dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=2m,mode=0700"),
                     0);
    fx->mounted = true;
    struct sbx_store_options o = {.reserve_bytes = 256 << 10};
    assert_int_equal(sbx_store_open(fx->path, &o, &fx->st, &e), 0);
    assert_int_equal(sbx_store_health(fx->st, &e), 0);
    char filler[PATH_MAX];
    snprintf(filler, sizeof(filler), "%s/filler", fx->dir);
    int fd = open(filler, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    static char chunk[4096];
    while (write(fd, chunk, sizeof(chunk)) == (ssize_t)sizeof(chunk))
        ;
    close(fd);
    /* A task's insert and its end still find room: the reserve's. */
    char id[SBX_ID_SIZE];
    add_task(fx->st, "acme", "", 0, id);
    assert_int_equal(move(fx->st, id, SBX_TASK_RUNNING, 0, &e), 0);
    assert_int_equal(move(fx->st, id, SBX_TASK_SUCCEEDED, 0, &e), 0);
    assert_int_equal(status_of(fx->st, id), SBX_TASK_SUCCEEDED);
    assert_int_equal(sbx_store_health(fx->st, &e), -1);
    assert_int_equal(e.errnum, ENOSPC);
    /* Room again: the reserve is made again (tried at most once a second). */
    assert_int_equal(unlink(filler), 0);
    usleep(1100 * 1000);
    assert_int_equal(sbx_store_health(fx->st, &e), 0);
    assert_int_equal(sbx_store_check(fx->st, false, &e), 0);
}

static void disk_full_keeps_store_consistent(void **state)
{
    struct fx *fx = *state;
    enum { MAX_TASKS = 1000 };
    static char ids[MAX_TASKS][SBX_ID_SIZE];
    static char code[8192];
    sbx_err e = {0};
    int n = 0;

    assert_int_equal(mount("tmpfs", fx->dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=512k,mode=0700"),
                     0);
    fx->mounted = true;
    assert_int_equal(sbx_store_open(fx->path, NULL, &fx->st, &e), 0);

    memset(code, 'x', sizeof(code) - 1);
    for (;;) {
        assert_true(n < MAX_TASKS); /* a 512 KiB file system must fill up */
        struct sbx_store_task t = {.tenant = "acme", .command = "[]", .code = code};
        if (sbx_store_task_insert(fx->st, &t, &e) < 0)
            break;
        memcpy(ids[n++], t.id, SBX_ID_SIZE);
    }
    char buf[512];
    print_message("after %d tasks: %s\n", n, sbx_err_format(&e, buf, sizeof(buf)));
    assert_int_equal(e.errnum, ENOSPC);
    assert_non_null(strstr(e.msg, "insert task"));
    assert_true(n > 5);

    /* Still usable: reads work, the failed insert left nothing, and other
     * writes fail the same clear way. */
    for (int i = 0; i < n; i++)
        assert_int_equal(status_of(fx->st, ids[i]), SBX_TASK_PENDING);
    assert_int_equal(raw_int(fx->path, "SELECT count(*) FROM tasks"), n);
    uint64_t evid;
    if (sbx_store_event_append(fx->st, "A", "x", 1, NULL, &evid, &e) < 0)
        assert_true(e.errnum == ENOSPC || e.errnum == EIO);
    /* A transition is one transaction: its output does not fit, so its
     * status change does not happen either. */
    static char big[1 << 20];
    struct sbx_store_transition cancel = {
        .to = SBX_TASK_CANCELED, .stdout_data = big, .stdout_len = sizeof(big)};
    assert_int_equal(sbx_store_task_transition(fx->st, ids[0], &cancel, &e), -1);
    assert_int_equal(e.errnum, ENOSPC);
    assert_int_equal(status_of(fx->st, ids[0]), SBX_TASK_PENDING);
    assert_int_equal(raw_int(fx->path, "SELECT count(*) FROM task_output"), 0);
    assert_int_equal(sbx_store_check(fx->st, false, &e), 0);

    /* Reopens on the full disk, everything intact. */
    reopen(fx, NULL);
    for (int i = 0; i < n; i++)
        assert_int_equal(status_of(fx->st, ids[i]), SBX_TASK_PENDING);
    assert_int_equal(sbx_store_check(fx->st, false, &e), 0);
    assert_int_equal(raw_int(fx->path, "SELECT integrity_check = 'ok' FROM pragma_integrity_check"),
                     1);

    /* With room again, writes succeed. */
    assert_int_equal(mount(NULL, fx->dir, NULL, MS_REMOUNT | MS_NOSUID | MS_NODEV, "size=8m"), 0);
    char id[SBX_ID_SIZE];
    add_task(fx->st, "acme", "", 0, id);
    assert_int_equal(move(fx->st, ids[0], SBX_TASK_RUNNING, 0, &e), 0);
    assert_int_equal(sbx_store_check(fx->st, false, &e), 0);
    sbx_store_close(fx->st);
    fx->st = NULL;
}

static int record_collect(void *ud, const char *id, const char *tenant, const char *record)
{
    char *all = ud;
    size_t n = strlen(all);
    snprintf(all + n, 512 - n, "%s/%s=%s;", tenant, id, record);
    return 0;
}

/* API records (schema v6): put replaces, kinds are apart, a delete is
 * gone after a reopen, what is not JSON is refused. */
static void api_records(void **state)
{
    struct fx *fx = *state;
    sbx_err e = {0};
    assert_int_equal(sbx_store_record_put(fx->st, "box", "a", "t1", "{\"s\":1}", &e), 0);
    assert_int_equal(sbx_store_record_put(fx->st, "box", "b", "t2", "{\"s\":2}", &e), 0);
    assert_int_equal(sbx_store_record_put(fx->st, "snap", "a", "t1", "[]", &e), 0);
    assert_int_equal(sbx_store_record_put(fx->st, "box", "a", "t1", "{\"s\":3}", &e), 0);
    assert_int_equal(sbx_store_record_put(fx->st, "box", "c", "t1", "not json", &e), -1);
    assert_int_equal(sbx_store_record_delete(fx->st, "box", "b", &e), 0);
    reopen(fx, NULL);
    char all[512] = "";
    assert_int_equal(sbx_store_records(fx->st, "box", record_collect, all, &e), 0);
    assert_string_equal(all, "t1/a={\"s\":3};");
    all[0] = '\0';
    assert_int_equal(sbx_store_records(fx->st, "snap", record_collect, all, &e), 0);
    assert_string_equal(all, "t1/a=[];");
}

/* Idle after writes: the page cache is released once, and only once the
 * writes stopped for the given time; a write starts a new idle period. */
static void shrink_when_idle(void **state)
{
    struct fx *fx = *state;
    char id[SBX_ID_SIZE];
    for (int i = 0; i < 200; i++)
        add_task(fx->st, "t1", NULL, 1000 + i, id);
    int cur = 0, hi = 0;
    assert_int_equal(sqlite3_db_status(fx->st->db, SQLITE_DBSTATUS_CACHE_USED, &cur, &hi, 0),
                     SQLITE_OK);
    assert_true(cur > 0);
    assert_false(sbx_store_shrink_when_idle(fx->st, 0));     /* writes seen now */
    assert_false(sbx_store_shrink_when_idle(fx->st, 60000)); /* not idle for a minute */
    assert_true(sbx_store_shrink_when_idle(fx->st, 0));
    int after = 0;
    assert_int_equal(sqlite3_db_status(fx->st->db, SQLITE_DBSTATUS_CACHE_USED, &after, &hi, 0),
                     SQLITE_OK);
    assert_true(after < cur);
    assert_false(sbx_store_shrink_when_idle(fx->st, 0)); /* once per idle period */
    add_task(fx->st, "t1", NULL, 5000, id);
    assert_false(sbx_store_shrink_when_idle(fx->st, 0));
    assert_true(sbx_store_shrink_when_idle(fx->st, 0));
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
#define D(f) cmocka_unit_test_setup_teardown(f, setup_dir, teardown)
    const struct CMUnitTest tests[] = {
        T(migrations_fresh),
        T(migrations_reopen_idempotent),
        T(migrations_future_version_refused),
        D(foreign_database_refused),
        D(migration_steps_are_atomic),
        T(task_insert_get),
        T(task_legal_transitions),
        T(task_illegal_transitions),
        T(task_tenant_restriction),
        T(task_list_paging),
        T(task_active_counts),
        T(recover_marks_unfinished),
        T(events_ids_per_session),
        T(events_since_order_and_limit),
        T(events_bound_and_gap),
        T(clone_bases_stable_and_unique),
        T(audit_append_only),
        T(audit_retention),
        D(reserve_spent_on_a_full_disk),
        T(prune_by_age_and_count),
        T(prune_in_batches),
        D(disk_full_keeps_store_consistent),
        T(api_records),
        T(shrink_when_idle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
