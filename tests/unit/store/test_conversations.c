/* The agent's conversations in the store: messages in order, declared tools,
 * turns left running told once as interrupted, across a reopen. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <unistd.h>

#include "store/store.h"

struct seen {
    char text[8][128];
    int n;
};

static int on_message(void *ud, const char *m)
{
    struct seen *s = ud;
    snprintf(s->text[s->n++], sizeof(s->text[0]), "%s", m);
    return 0;
}

static void on_turn(void *ud, const char *id, const char *conv, const char *tenant,
                    const char *session)
{
    struct seen *s = ud;
    snprintf(s->text[s->n++], sizeof(s->text[0]), "%s %s %s %s", id, conv, tenant, session);
}

static void conversations_survive_a_reopen(void **state)
{
    char dir[] = "/tmp/sbx-conv-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/state.db", dir);
    struct sbx_store *st = NULL;
    sbx_err e = {0};
    assert_int_equal(sbx_store_open(path, NULL, &st, &e), 0);
    assert_int_equal(sbx_store_message_append(st, "t:k:c:s", "{\"role\":\"user\"}", &e), 0);
    assert_int_equal(sbx_store_message_append(st, "t:k:c:other", "{\"n\":9}", &e), 0);
    assert_int_equal(sbx_store_message_append(st, "t:k:c:s", "{\"role\":\"assistant\"}", &e), 0);
    assert_int_equal(sbx_store_message_append(st, "t:k:c:s", "not json", &e), -1);
    assert_int_equal(sbx_store_conv_tools_set(st, "t:k:c:s", "[1]", &e), 0);
    assert_int_equal(sbx_store_conv_tools_set(st, "t:k:c:s", "[2]", &e), 0);
    assert_int_equal(sbx_store_turn_begin(st, "turn-1", "t:k:c:s", "t", "s", &e), 0);
    assert_int_equal(sbx_store_turn_begin(st, "turn-2", "t:k:c:s", "t", "s", &e), 0);
    assert_int_equal(sbx_store_turn_end(st, "turn-2", "stop", &e), 0);
    sbx_store_close(st);

    assert_int_equal(sbx_store_open(path, NULL, &st, &e), 0);
    struct seen m = {0};
    assert_int_equal(sbx_store_messages(st, "t:k:c:s", on_message, &m, &e), 0);
    assert_int_equal(m.n, 2);
    assert_string_equal(m.text[0], "{\"role\":\"user\"}");
    assert_string_equal(m.text[1], "{\"role\":\"assistant\"}");
    char *tools = NULL;
    assert_int_equal(sbx_store_conv_tools_get(st, "t:k:c:s", &tools, &e), 0);
    assert_string_equal(tools, "[2]");
    free(tools);
    assert_int_equal(sbx_store_conv_tools_get(st, "none", &tools, &e), 0);
    assert_null(tools);
    struct seen t = {0};
    assert_int_equal(sbx_store_turns_interrupted(st, on_turn, &t, &e), 0);
    assert_int_equal(t.n, 1);
    assert_string_equal(t.text[0], "turn-1 t:k:c:s t s");
    t.n = 0;
    assert_int_equal(sbx_store_turns_interrupted(st, on_turn, &t, &e), 0);
    assert_int_equal(t.n, 0); /* told once */
    /* Retention: the conversation (its turns all ended) goes whole. */
    struct sbx_store_prune_counts pc;
    assert_int_equal(sbx_store_turn_begin(st, "turn-3", "t:k:c:busy", "t", "busy", &e), 0);
    assert_int_equal(sbx_store_message_append(st, "t:k:c:busy", "{}", &e), 0);
    assert_int_equal(sbx_store_prune(st, INT64_MAX, 0, &pc, &e), 0);
    m.n = 0;
    assert_int_equal(sbx_store_messages(st, "t:k:c:s", on_message, &m, &e), 0);
    assert_int_equal(m.n, 0);
    assert_int_equal(sbx_store_conv_tools_get(st, "t:k:c:s", &tools, &e), 0);
    assert_null(tools);
    /* a running turn's conversation stays */
    assert_int_equal(sbx_store_messages(st, "t:k:c:busy", on_message, &m, &e), 0);
    assert_int_equal(m.n, 1);
    sbx_store_close(st);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(conversations_survive_a_reopen),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
