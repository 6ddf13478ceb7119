/* The agent's conversations: messages, turns, declared tools (store.h). Few
 * and small statements, prepared per call. */
#include "store/store_int.h"

#include "base/time.h"

#include <stdlib.h>
#include <string.h>

int sbx_store_message_append(struct sbx_store *st, const char *conversation, const char *message,
                             sbx_err *err)
{
    const char *v[] = {conversation, message};
    return store_run(st,
                     "INSERT INTO agent_messages (conversation, seq, message, created_at)"
                     " VALUES (?1, (SELECT coalesce(max(seq), 0) + 1 FROM agent_messages"
                     " WHERE conversation = ?1), ?2, ?9)",
                     v, 2, "append a message to a conversation", err);
}

int sbx_store_messages(struct sbx_store *st, const char *conversation,
                       int (*fn)(void *ud, const char *message), void *ud, sbx_err *err)
{
    if (store_enter(st, err) < 0)
        return -1;
    store_cleanup_final sqlite3_stmt *s = store_prep(
        st, "SELECT message FROM agent_messages WHERE conversation = ?1 ORDER BY seq", err);
    if (!s)
        return -1;
    int rc = store_bind_text(s, 1, conversation);
    while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (fn(ud, (const char *)sqlite3_column_text(s, 0)) != 0)
            return 0;
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_DONE)
        return store_fail(st, err, rc, "read a conversation");
    return 0;
}

int sbx_store_conv_tools_set(struct sbx_store *st, const char *conversation, const char *tools,
                             sbx_err *err)
{
    const char *v[] = {conversation, tools};
    return store_run(st,
                     "INSERT INTO agent_tools (conversation, tools) VALUES (?1, ?2)"
                     " ON CONFLICT (conversation) DO UPDATE SET tools = excluded.tools",
                     v, 2, "record a conversation's tools", err);
}

int sbx_store_conv_tools_get(struct sbx_store *st, const char *conversation, char **tools,
                             sbx_err *err)
{
    *tools = NULL;
    if (store_enter(st, err) < 0)
        return -1;
    store_cleanup_final sqlite3_stmt *s =
        store_prep(st, "SELECT tools FROM agent_tools WHERE conversation = ?1", err);
    if (!s)
        return -1;
    int rc = store_bind_text(s, 1, conversation);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    if (rc == SQLITE_ROW && !(*tools = strdup((const char *)sqlite3_column_text(s, 0))))
        return sbx_err_set(err, ENOMEM, "tools");
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return store_fail(st, err, rc, "read a conversation's tools");
    return 0;
}

int sbx_store_turn_begin(struct sbx_store *st, const char *id, const char *conversation,
                         const char *tenant, const char *session, sbx_err *err)
{
    const char *v[] = {id, conversation, tenant, session};
    return store_run(st,
                     "INSERT INTO agent_turns (id, conversation, tenant, session_id, status,"
                     " started_at) VALUES (?1, ?2, ?3, ?4, 'running', ?9)",
                     v, 4, "record a turn", err);
}

int sbx_store_turn_end(struct sbx_store *st, const char *id, const char *stop, sbx_err *err)
{
    const char *v[] = {id, stop};
    return store_run(st,
                     "UPDATE agent_turns SET status = 'ended', stop_reason = ?2, ended_at = ?9"
                     " WHERE id = ?1",
                     v, 2, "record a turn's end", err);
}

int sbx_store_turns_interrupted(struct sbx_store *st,
                                void (*fn)(void *ud, const char *id, const char *conversation,
                                           const char *tenant, const char *session),
                                void *ud, sbx_err *err)
{
    if (store_enter(st, err) < 0)
        return -1;
    /* Marked first: a crash while telling them does not tell them twice. */
    store_cleanup_final sqlite3_stmt *s =
        store_prep(st,
                   "UPDATE agent_turns SET status = 'interrupted', stop_reason = 'interrupted',"
                   " ended_at = ?1 WHERE status = 'running'"
                   " RETURNING id, conversation, tenant, session_id, started_at",
                   err);
    if (!s)
        return -1;
    struct row {
        char *id, *conv, *tenant, *session;
        int64_t at;
    } *rows = NULL;
    size_t n = 0;
    int rc = sqlite3_bind_int64(s, 1, sbx_now_ms());
    while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct row *r = realloc(rows, (n + 1) * sizeof(*rows));
        if (!r)
            break;
        rows = r;
        rows[n] = (struct row){strdup((const char *)sqlite3_column_text(s, 0)),
                               strdup((const char *)sqlite3_column_text(s, 1)),
                               strdup((const char *)sqlite3_column_text(s, 2)),
                               strdup((const char *)sqlite3_column_text(s, 3)),
                               sqlite3_column_int64(s, 4)};
        n++;
        rc = SQLITE_OK;
    }
    int ret = rc == SQLITE_DONE ? 0 : store_fail(st, err, rc, "mark interrupted turns");
    sqlite3_finalize(s);
    s = NULL;
    /* In the order they began (RETURNING gives no order). */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && rows[j].at < rows[j - 1].at; j--) {
            struct row t = rows[j];
            rows[j] = rows[j - 1];
            rows[j - 1] = t;
        }
    for (size_t i = 0; i < n; i++) {
        if (ret == 0 && rows[i].id && rows[i].conv && rows[i].tenant && rows[i].session)
            fn(ud, rows[i].id, rows[i].conv, rows[i].tenant, rows[i].session);
        free(rows[i].id), free(rows[i].conv), free(rows[i].tenant), free(rows[i].session);
    }
    free(rows);
    return ret;
}

/* Conversations pruned per call: their messages and turns go together. */
#define PRUNE_CONVERSATIONS_BATCH 100

int store_prune_conversations(struct sbx_store *st, int64_t older_than, bool *more, sbx_err *err)
{
    /* Whole conversations whose newest turn began before older_than and none
     * of whose turns is running: never half a conversation. */
    static const char sql[] =
        "CREATE TEMP TABLE IF NOT EXISTS prune_conv (c TEXT PRIMARY KEY);"
        "DELETE FROM prune_conv;"
        "INSERT INTO prune_conv SELECT conversation FROM agent_turns GROUP BY conversation"
        " HAVING max(started_at) < ?1 AND sum(status = 'running') = 0 LIMIT ?2;"
        "DELETE FROM agent_messages WHERE conversation IN (SELECT c FROM prune_conv);"
        "DELETE FROM agent_turns WHERE conversation IN (SELECT c FROM prune_conv);"
        "DELETE FROM agent_tools WHERE conversation IN (SELECT c FROM prune_conv);";
    const char *next = sql;
    int64_t picked = 0;
    while (next && *next) {
        sqlite3_stmt *s = NULL;
        int rc = sqlite3_prepare_v2(st->db, next, -1, &s, &next);
        if (rc != SQLITE_OK) {
            sqlite3_finalize(s);
            return store_fail(st, err, rc, "prune conversations");
        }
        if (!s)
            break;
        if (sqlite3_bind_parameter_count(s) >= 2) {
            sqlite3_bind_int64(s, 1, older_than);
            sqlite3_bind_int64(s, 2, PRUNE_CONVERSATIONS_BATCH);
        }
        rc = sqlite3_step(s);
        if (rc == SQLITE_DONE && sqlite3_bind_parameter_count(s) >= 2)
            picked = sqlite3_changes64(st->db);
        sqlite3_finalize(s);
        if (rc != SQLITE_DONE)
            return store_fail(st, err, rc, "prune conversations");
    }
    if (picked >= PRUNE_CONVERSATIONS_BATCH)
        *more = true;
    return 0;
}
