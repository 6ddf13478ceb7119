/* The schema, as a list of steps keyed by PRAGMA user_version. A step is
 * never edited once released: a change is a new step. */
#include "store/migrate.h"

#include "store/errnum.h"
#include "store/store.h" /* SBX_STORE_SCHEMA_VERSION */

#include <stdio.h>
#include <string.h>

/* "SBXD": marks the file as ours, so a stray database is not taken over. */
#define STORE_APPLICATION_ID 0x53425844

static const char schema_v1[] =
    /* Tasks. Outputs live in their own table so that reading, listing or
     * updating a task never touches megabytes of blob. */
    "CREATE TABLE tasks ("
    " id TEXT PRIMARY KEY NOT NULL,"
    " tenant TEXT NOT NULL,"
    " clone_key TEXT NOT NULL DEFAULT '',"
    " clone_id TEXT NOT NULL DEFAULT '',"
    " session_id TEXT NOT NULL DEFAULT '',"
    " command TEXT NOT NULL CONSTRAINT command_is_a_json_array"
    "  CHECK (json_valid(command) AND json_type(command) = 'array'),"
    " language TEXT,"
    " code TEXT,"
    " backend TEXT NOT NULL DEFAULT 'sandbox',"
    " skill TEXT NOT NULL DEFAULT '',"
    " skill_source TEXT NOT NULL DEFAULT '',"
    " skill_trust_level TEXT NOT NULL DEFAULT '',"
    " limits TEXT CONSTRAINT limits_is_json CHECK (limits IS NULL OR json_valid(limits)),"
    " sandbox TEXT NOT NULL DEFAULT '',"
    " status TEXT NOT NULL CONSTRAINT status_is_known CHECK (status IN"
    "  ('pending','running','succeeded','failed','canceled','timeout','interrupted')),"
    " created_at INTEGER NOT NULL,"
    " started_at INTEGER NOT NULL DEFAULT 0,"
    " ended_at INTEGER NOT NULL DEFAULT 0,"
    " error TEXT NOT NULL DEFAULT '',"
    " result TEXT CONSTRAINT result_is_json CHECK (result IS NULL OR json_valid(result))"
    ");"
    "CREATE INDEX tasks_by_time ON tasks (created_at, id);"
    "CREATE INDEX tasks_by_tenant ON tasks (tenant, created_at, id);"
    "CREATE INDEX tasks_by_session ON tasks (session_id, created_at, id);"
    "CREATE INDEX tasks_by_status ON tasks (status, created_at, id);"
    "CREATE INDEX tasks_by_end ON tasks (ended_at) WHERE ended_at > 0;"
    "CREATE TABLE task_output ("
    " task_id TEXT PRIMARY KEY NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,"
    " stdout BLOB NOT NULL DEFAULT x'',"
    " stderr BLOB NOT NULL DEFAULT x''"
    ");"
    /* Event streams: the per-session counter and the kept events. */
    "CREATE TABLE event_streams ("
    " session_id TEXT PRIMARY KEY NOT NULL,"
    " last_id INTEGER NOT NULL,"
    " last_time INTEGER NOT NULL"
    ");"
    "CREATE INDEX event_streams_by_time ON event_streams (last_time);"
    "CREATE TABLE events ("
    " session_id TEXT NOT NULL REFERENCES event_streams (session_id) ON DELETE CASCADE,"
    " id INTEGER NOT NULL,"
    " type TEXT NOT NULL,"
    " time INTEGER NOT NULL,"
    " data TEXT NOT NULL CONSTRAINT data_is_json CHECK (json_valid(data)),"
    " PRIMARY KEY (session_id, id)"
    ");"
    /* Host id ranges of the clones: [host_id_base, host_id_base + host_id_count). */
    "CREATE TABLE clones ("
    " tenant TEXT NOT NULL,"
    " clone_key TEXT NOT NULL,"
    " clone_id TEXT NOT NULL,"
    " host_id_base INTEGER NOT NULL UNIQUE,"
    " host_id_count INTEGER NOT NULL CHECK (host_id_count > 0),"
    " created_at INTEGER NOT NULL,"
    " PRIMARY KEY (tenant, clone_key, clone_id)"
    ");"
    /* The audit log, append-only. */
    "CREATE TABLE audit ("
    " seq INTEGER PRIMARY KEY,"
    " time INTEGER NOT NULL,"
    " identity TEXT NOT NULL,"
    " action TEXT NOT NULL,"
    " target TEXT NOT NULL DEFAULT '',"
    " detail TEXT CONSTRAINT detail_is_json CHECK (detail IS NULL OR json_valid(detail))"
    ");"
    "CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit"
    " BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;"
    "CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit"
    " BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;";

/* v2: the audit log gets a retention of its own. It stays append-only: no
 * record is ever changed, and only the oldest go (retention deletes from the
 * oldest end: sbx_store_prune_audit). */
static const char schema_v2[] =
    "DROP TRIGGER audit_no_delete;"
    "CREATE TRIGGER audit_oldest_first BEFORE DELETE ON audit"
    " WHEN old.seq > (SELECT min(seq) FROM audit)"
    " BEGIN SELECT RAISE(ABORT, 'the audit log loses only its oldest records'); END;";

/* v3: Idempotency-Key on task creation: the task a (tenant, key) made, with a
 * digest of its request; gone with its task. */
static const char schema_v3[] =
    "CREATE TABLE idempotency_keys ("
    " tenant TEXT NOT NULL,"
    " key TEXT NOT NULL,"
    " request_digest TEXT NOT NULL,"
    " task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,"
    " created_at INTEGER NOT NULL,"
    " PRIMARY KEY (tenant, key)"
    ");"
    "CREATE INDEX idempotency_keys_by_time ON idempotency_keys (created_at);"
    "CREATE INDEX idempotency_keys_by_task ON idempotency_keys (task_id);";

/* v4: the agent's conversations (src/agent): each session's messages in order,
 * its turns (a turn still 'running' at a start was interrupted by the
 * daemon's end), the tools it declared. A step of its own: other steps may
 * come before it at a merge, it only needs schema_v1. */
static const char schema_v4[] =
    "CREATE TABLE agent_messages ("
    " conversation TEXT NOT NULL,"
    " seq INTEGER NOT NULL,"
    " message TEXT NOT NULL CONSTRAINT message_is_json CHECK (json_valid(message)),"
    " created_at INTEGER NOT NULL,"
    " PRIMARY KEY (conversation, seq)"
    ");"
    "CREATE TABLE agent_turns ("
    " id TEXT PRIMARY KEY NOT NULL,"
    " conversation TEXT NOT NULL,"
    " tenant TEXT NOT NULL,"
    " session_id TEXT NOT NULL,"
    " status TEXT NOT NULL CONSTRAINT turn_status_is_known CHECK (status IN"
    "  ('running','ended','interrupted')),"
    " stop_reason TEXT NOT NULL DEFAULT '',"
    " started_at INTEGER NOT NULL,"
    " ended_at INTEGER NOT NULL DEFAULT 0"
    ");"
    "CREATE INDEX agent_turns_running ON agent_turns (status) WHERE status = 'running';"
    "CREATE TABLE agent_tools ("
    " conversation TEXT PRIMARY KEY NOT NULL,"
    " tools TEXT NOT NULL CONSTRAINT tools_is_json CHECK (json_valid(tools))"
    ");";

/* v5: the version of a skill task's skill (the active one when it ran). */
static const char schema_v5[] =
    "ALTER TABLE tasks ADD COLUMN skill_version TEXT NOT NULL DEFAULT '';";

/* v6: records of the OpenSandbox API (src/api/opensandbox): its sandboxes
 * and its snapshots, one JSON document each, so that they outlive a restart
 * of the daemon. */
static const char schema_v6[] =
    "CREATE TABLE api_records ("
    " kind TEXT NOT NULL,"
    " id TEXT NOT NULL,"
    " tenant TEXT NOT NULL,"
    " record TEXT NOT NULL CONSTRAINT record_is_json CHECK (json_valid(record)),"
    " updated_at INTEGER NOT NULL,"
    " PRIMARY KEY (kind, id)"
    ");";

const struct store_migration store_migrations[] = {
    {1, schema_v1}, {2, schema_v2}, {3, schema_v3}, {4, schema_v4}, {5, schema_v5}, {6, schema_v6},
};
const size_t store_n_migrations = SBX_ARRAY_LEN(store_migrations);

_Static_assert(SBX_ARRAY_LEN(store_migrations) == SBX_STORE_SCHEMA_VERSION,
               "one migration step per schema version");

static int db_fail(sqlite3 *db, sbx_err *err, int rc, const char *path, const char *what)
{
    return sbx_err_set(err, store_errnum(db, rc), "store: %s: %s: %s", path, what,
                       sqlite3_errmsg(db));
}

/* The single integer a query returns (0 until it has returned one). */
static int query_int(sqlite3 *db, const char *sql, int64_t *v)
{
    sqlite3_stmt *s = NULL;
    *v = 0;
    int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) {
            *v = sqlite3_column_int64(s, 0);
            rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(s);
    return rc;
}

/* Inside the transaction: check what the file is and apply what is missing. */
static int apply(sqlite3 *db, const char *path, const struct store_migration *steps, size_t n_steps,
                 sbx_err *err)
{
    int64_t version, app_id, tables;
    int latest = n_steps ? steps[n_steps - 1].version : 0;
    int rc;

    if ((rc = query_int(db, "PRAGMA user_version", &version)) != SQLITE_OK ||
        (rc = query_int(db, "PRAGMA application_id", &app_id)) != SQLITE_OK ||
        (rc = query_int(db, "SELECT count(*) FROM sqlite_schema", &tables)) != SQLITE_OK)
        return db_fail(db, err, rc, path, "read the schema version");

    if (app_id != 0 && app_id != STORE_APPLICATION_ID)
        return sbx_err_set(err, EINVAL, "store: %s: not a sandboxd store (application_id %#llx)",
                           path, (unsigned long long)app_id);
    if (version == 0 && tables > 0)
        return sbx_err_set(err, EINVAL,
                           "store: %s: not a sandboxd store (has tables but no schema version)",
                           path);
    if (version > latest)
        return sbx_err_set(err, ENOTSUP,
                           "store: %s: schema version %lld is newer than this sandboxd knows "
                           "(%d): refusing to open it (was it written by a newer release?)",
                           path, (long long)version, latest);

    for (size_t i = 0; i < n_steps; i++) {
        char what[64];
        if (steps[i].version <= version)
            continue;
        snprintf(what, sizeof(what), "migrate to schema version %d", steps[i].version);
        if ((rc = sqlite3_exec(db, steps[i].sql, NULL, NULL, NULL)) != SQLITE_OK)
            return db_fail(db, err, rc, path, what);
        char sql[64];
        snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", steps[i].version);
        if ((rc = sqlite3_exec(db, sql, NULL, NULL, NULL)) != SQLITE_OK)
            return db_fail(db, err, rc, path, what);
    }
    if (app_id == 0) {
        char sql[64];
        snprintf(sql, sizeof(sql), "PRAGMA application_id = %d", STORE_APPLICATION_ID);
        if ((rc = sqlite3_exec(db, sql, NULL, NULL, NULL)) != SQLITE_OK)
            return db_fail(db, err, rc, path, "set the application id");
    }
    return 0;
}

int store_migrate(sqlite3 *db, const char *path, const struct store_migration *steps,
                  size_t n_steps, sbx_err *err)
{
    int64_t version, app_id;
    int latest = n_steps ? steps[n_steps - 1].version : 0;
    int rc;

    /* The common case, an up-to-date file, is decided without a write lock,
     * so a full disk does not stop the daemon from opening its store. */
    if ((rc = query_int(db, "PRAGMA user_version", &version)) != SQLITE_OK ||
        (rc = query_int(db, "PRAGMA application_id", &app_id)) != SQLITE_OK)
        return db_fail(db, err, rc, path, "read the schema version");
    if (version == latest && app_id == STORE_APPLICATION_ID)
        return 0;
    if (version > latest)
        return apply(db, path, steps, n_steps, err); /* refuses it, naming both */

    if ((rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL)) != SQLITE_OK)
        return db_fail(db, err, rc, path, "begin the migration");
    if (apply(db, path, steps, n_steps, err) < 0) {
        if (!sqlite3_get_autocommit(db))
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return -1;
    }
    if ((rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL)) != SQLITE_OK) {
        db_fail(db, err, rc, path, "commit the migration");
        if (!sqlite3_get_autocommit(db))
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return -1;
    }
    return 0;
}
