/* Workspace names, pure: clone segments, derived directories, user paths of
 * the file API and the quoting of values in messages. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "workspace/path.h"

/* ---- segments ---- */

static void test_segment_good(void **state)
{
    const char *good[] = {
        "t1",  "clone-a",
        "c_1", "A.b-C_9",
        "...", ".x",
        "x.",  "-",
        "_",   "0123456789012345678901234567890123456789012345678901234567890123"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(good); i++) {
        sbx_err err = {0};
        int rc = sbx_ws_segment_check("cloneId", good[i], strlen(good[i]), &err);
        if (rc != 0)
            fail_msg("\"%s\" refused: %s", good[i], err.msg);
    }
}

static void test_segment_bad(void **state)
{
    static const struct {
        const char *value;
        size_t len;
        const char *msg; /* expected message */
    } bad[] = {
        {"", 0, "tenantCode is empty"},
        {".", 1, "tenantCode \".\": not a valid name"},
        {"..", 2, "tenantCode \"..\": not a valid name"},
        {"/", 1, "tenantCode \"/\": only letters, digits, '.', '_' and '-' are allowed"},
        {"a/b", 3, "tenantCode \"a/b\": only letters, digits, '.', '_' and '-' are allowed"},
        {"a\0b", 3, "tenantCode \"a\\x00b\": only letters, digits, '.', '_' and '-' are allowed"},
        {"a b", 3, "tenantCode \"a b\": only letters, digits, '.', '_' and '-' are allowed"},
        {"caf\xc3\xa9", 5,
         "tenantCode \"caf\\xc3\\xa9\": only letters, digits, '.', '_' and '-' are allowed"},
        {"50%", 3, "tenantCode \"50%\": only letters, digits, '.', '_' and '-' are allowed"},
        {"a\nb", 3, "tenantCode \"a\\x0ab\": only letters, digits, '.', '_' and '-' are allowed"},
        {"a\"b", 3, "tenantCode \"a\\\"b\": only letters, digits, '.', '_' and '-' are allowed"},
        {"a:b", 3, "tenantCode \"a:b\": only letters, digits, '.', '_' and '-' are allowed"},
        {"a\\b", 3, "tenantCode \"a\\\\b\": only letters, digits, '.', '_' and '-' are allowed"},
        {"0123456789012345678901234567890123456789012345678901234567890123X", 65,
         "tenantCode \"0123456789012345678901234567890123456789012345678901234567890123X\": "
         "longer than 64 bytes"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        sbx_err err = {0};
        assert_int_equal(sbx_ws_segment_check("tenantCode", bad[i].value, bad[i].len, &err), -1);
        assert_int_equal(err.errnum, EINVAL);
        assert_string_equal(err.msg, bad[i].msg);
    }
    sbx_err err = {0};
    assert_int_equal(sbx_ws_segment_check("cloneKey", NULL, 0, &err), -1);
    assert_string_equal(err.msg, "cloneKey is empty");
    /* A NULL err is allowed. */
    assert_int_equal(sbx_ws_segment_check("cloneKey", "..", 2, NULL), -1);
}

/* ---- derived directories ---- */

static void test_dir(void **state)
{
    sbx_err err = {0};
    char *d = sbx_ws_dir("/srv/ws", "t1", "clone-a", "c1", &err);
    assert_non_null(d);
    assert_string_equal(d, "/srv/ws/t1/clone-a/c1/work");
    free(d);
    /* Without a cloneKey (NULL or ""), the original's fallback. */
    d = sbx_ws_dir("/srv/ws", "t1", NULL, "c1", &err);
    assert_string_equal(d, "/srv/ws/t1/c1/work");
    free(d);
    d = sbx_ws_dir("/srv/ws/", "t1", "", "c1", &err);
    assert_string_equal(d, "/srv/ws/t1/c1/work");
    free(d);
    d = sbx_ws_dir("/srv/ws///", "t1", "k", "c1", &err);
    assert_string_equal(d, "/srv/ws/t1/k/c1/work");
    free(d);
    d = sbx_ws_dir("/", "t1", "k", "c1", &err);
    assert_string_equal(d, "/t1/k/c1/work");
    free(d);
}

static void test_dir_bad(void **state)
{
    static const struct {
        const char *root, *tenant, *key, *id, *msg;
    } bad[] = {
        {"/srv", "..", "k", "c1", "tenantCode \"..\": not a valid name"},
        {"/srv", "t1", "..", "c1", "cloneKey \"..\": not a valid name"},
        {"/srv", "t1", "k", "a/b",
         "cloneId \"a/b\": only letters, digits, '.', '_' and '-' are "
         "allowed"},
        {"/srv", "t1", "k", "", "cloneId is empty"},
        {"/srv", NULL, "k", "c1", "tenantCode is empty"},
        {"/srv", "t1", "k", NULL, "cloneId is empty"},
        {"srv", "t1", "k", "c1", "workspace root \"srv\": not an absolute path"},
        {"", "t1", "k", "c1", "workspace root \"\": not an absolute path"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        sbx_err err = {0};
        assert_null(sbx_ws_dir(bad[i].root, bad[i].tenant, bad[i].key, bad[i].id, &err));
        assert_int_equal(err.errnum, EINVAL);
        assert_string_equal(err.msg, bad[i].msg);
    }
}

/* ---- user paths ---- */

/* No clone's directory equals or lies inside another's: over a set of
 * names that includes "work", every accepted pair of clones differs and
 * neither directory is a prefix of the other's. */
static void test_dirs_injective_and_never_nested(void **state)
{
    static const char *const names[] = {"a", "work", "b"};
    enum { N = 3 };
    char *dirs[N * (N + 1)];
    size_t n = 0;
    for (size_t k = 0; k <= N; k++) /* k == N: no key */
        for (size_t i = 0; i < N; i++) {
            sbx_err e = {0};
            char *d = sbx_ws_dir("/r", "t", k < N ? names[k] : NULL, names[i], &e);
            if (k < N && strcmp(names[i], "work") == 0) {
                assert_null(d);
                assert_int_equal(e.errnum, EINVAL);
                assert_non_null(strstr(e.msg, "cloneId \"work\" is reserved"));
                continue;
            }
            assert_non_null(d);
            dirs[n++] = d;
        }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            if (i == j)
                continue;
            size_t li = strlen(dirs[i]);
            bool nested =
                strncmp(dirs[i], dirs[j], li) == 0 && (dirs[j][li] == '\0' || dirs[j][li] == '/');
            assert_false(nested);
        }
    for (size_t i = 0; i < n; i++)
        free(dirs[i]);
    sbx_err e = {0};
    assert_int_equal(sbx_ws_clone_check("t", "", "work", &e), 0);
    assert_int_equal(sbx_ws_clone_check("t", "k", "work", &e), -1);
}

static void test_path_good(void **state)
{
    static const struct {
        const char *in, *rel;
        bool dir;
    } good[] = {
        {"a", "a", false},
        {"/a", "a", false},
        {"a/b/c", "a/b/c", false},
        {"a//b/./c", "a/b/c", false},
        {"/etc/passwd", "etc/passwd", false},
        {"///x///", "x", true},
        {"a/", "a", true},
        {"a/.", "a", true},
        {"./a", "a", false},
        {"/", "", false},
        {".", "", false},
        {"./", "", false},
        {"//", "", false},
        {"...", "...", false},
        {"..a/b..", "..a/b..", false},
        {".hidden/.x", ".hidden/.x", false},
        {"with space/\xc3\xa9t\xc3\xa9", "with space/\xc3\xa9t\xc3\xa9", false},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(good); i++) {
        struct sbx_ws_path p;
        sbx_err err = {0};
        if (sbx_ws_path_parse(good[i].in, strlen(good[i].in), &p, &err) < 0)
            fail_msg("\"%s\" refused: %s", good[i].in, err.msg);
        assert_string_equal(p.rel, good[i].rel);
        assert_int_equal(p.len, strlen(good[i].rel));
        if (p.dir != good[i].dir)
            fail_msg("\"%s\": dir %d", good[i].in, p.dir);
    }
    struct sbx_ws_path p;
    assert_int_equal(sbx_ws_path_parse("a/b/c", 5, &p, NULL), 0);
    assert_string_equal(sbx_ws_path_base(&p), "c");
    assert_int_equal(sbx_ws_path_parse("c", 1, &p, NULL), 0);
    assert_string_equal(sbx_ws_path_base(&p), "c");
}

static void test_path_bad(void **state)
{
    static char long_path[SBX_WS_PATH_MAX + 2];
    memset(long_path, 'a', sizeof(long_path) - 1);
    for (size_t i = 100; i < SBX_WS_PATH_MAX; i += 100)
        long_path[i] = '/';
    static char long_name[SBX_WS_NAME_MAX + 2];
    memset(long_name, 'n', sizeof(long_name) - 1);

    static const struct {
        const char *in;
        size_t len;
        int errnum;
        const char *msg; /* start of the expected message */
    } bad[] = {
        {"", 0, EINVAL, "path is empty"},
        {"..", 2, EINVAL, "path \"..\": \"..\" is not allowed"},
        {"../x", 4, EINVAL, "path \"../x\": \"..\" is not allowed"},
        {"a/../../x", 9, EINVAL, "path \"a/../../x\": \"..\" is not allowed"},
        {"a/..", 4, EINVAL, "path \"a/..\": \"..\" is not allowed"},
        {"/..", 3, EINVAL, "path \"/..\": \"..\" is not allowed"},
        {"a/b/../b", 8, EINVAL, "path \"a/b/../b\""},
        {"a\0b", 3, EINVAL, "path \"a\\x00b\": contains a NUL byte"},
        {"a/\0", 3, EINVAL, "path \"a/\\x00\": contains a NUL byte"},
        {long_path, SBX_WS_PATH_MAX + 1, ENAMETOOLONG, "path \"aaaa"},
        {long_name, SBX_WS_NAME_MAX + 1, ENAMETOOLONG, "path \"nnnn"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        struct sbx_ws_path p = {.rel = "untouched", .len = 9};
        sbx_err err = {0};
        assert_int_equal(sbx_ws_path_parse(bad[i].in, bad[i].len, &p, &err), -1);
        assert_int_equal(err.errnum, bad[i].errnum);
        if (strncmp(err.msg, bad[i].msg, strlen(bad[i].msg)) != 0)
            fail_msg("case %zu: message \"%s\"", i, err.msg);
        assert_string_equal(p.rel, "untouched");
    }
    assert_int_equal(sbx_ws_path_parse(NULL, 0, &(struct sbx_ws_path){0}, NULL), -1);

    /* Exactly at the limits is fine. */
    struct sbx_ws_path p;
    assert_int_equal(sbx_ws_path_parse(long_path, SBX_WS_PATH_MAX, &p, NULL), 0);
    assert_int_equal(sbx_ws_path_parse(long_name, SBX_WS_NAME_MAX, &p, NULL), 0);
    assert_int_equal(p.len, SBX_WS_NAME_MAX);
}

/* ---- quoting ---- */

static void test_quote(void **state)
{
    char buf[16];
    assert_string_equal(sbx_ws_quote("abc", 3, buf, sizeof(buf)), "abc");
    assert_string_equal(sbx_ws_quote("a\x01\"\\", 4, buf, sizeof(buf)), "a\\x01\\\"\\\\");
    assert_string_equal(sbx_ws_quote("", 0, buf, sizeof(buf)), "");
    /* Exactly fits: 15 characters and the terminator. */
    assert_string_equal(sbx_ws_quote("0123456789abcde", 15, buf, sizeof(buf)), "0123456789abcde");
    /* One more: cut with "...", never past the buffer. */
    assert_string_equal(sbx_ws_quote("0123456789abcdef", 16, buf, sizeof(buf)), "0123456789ab...");
    assert_string_equal(sbx_ws_quote("\xff\xff\xff\xff\xff", 5, buf, sizeof(buf)),
                        "\\xff\\xff\\xff...");
    assert_true(strlen(buf) < sizeof(buf));
    char tiny[8];
    assert_string_equal(sbx_ws_quote("\xff\xff", 2, tiny, sizeof(tiny)), "\\xff...");
    assert_string_equal(sbx_ws_quote("\xff", 1, tiny, sizeof(tiny)), "\\xff");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segment_good), cmocka_unit_test(test_segment_bad),
        cmocka_unit_test(test_dir),          cmocka_unit_test(test_dir_bad),
        cmocka_unit_test(test_path_good),    cmocka_unit_test(test_path_bad),
        cmocka_unit_test(test_quote),        cmocka_unit_test(test_dirs_injective_and_never_nested),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
