/* Workspace snapshots, pure: the manifest's text and id, parsing what is
 * not one, the difference of two manifests, and retention. */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "workspace/snapshot.h"

#define H1 "1111111111111111111111111111111111111111111111111111111111111111"
#define H2 "2222222222222222222222222222222222222222222222222222222222222222"

static void add(struct sbx_snap_manifest *m, const char *path, enum sbx_snap_type t, unsigned mode,
                uint64_t size, const char *hash, const char *target)
{
    sbx_err err = {0};
    assert_int_equal(sbx_snap_add(m, path, t, mode, size, hash, target, &err), 0);
}

/* A tree with every kind, added out of order as a directory walk would. */
static void sample(struct sbx_snap_manifest *m)
{
    *m = (struct sbx_snap_manifest){0};
    add(m, "src/b.txt", SBX_SNAP_LINK, 0644, 3, H1, "src/a.txt");
    add(m, "src", SBX_SNAP_DIR, 0755, 0, NULL, NULL);
    add(m, "src/a.txt", SBX_SNAP_FILE, 0644, 3, H1, NULL);
    add(m, "run me.sh", SBX_SNAP_FILE, 0755, 5, H2, NULL);
    add(m, "l", SBX_SNAP_SYMLINK, 0777, 9, NULL, "../a b%c");
    add(m, "\xe6\x96\x87", SBX_SNAP_FILE, 0600, 0, H2, NULL);
}

static void test_format_parse_round_trip(void **state)
{
    struct sbx_snap_manifest m, back;
    sample(&m);
    char *text;
    size_t len;
    sbx_err err = {0};
    assert_int_equal(sbx_snap_format(&m, &text, &len, &err), 0);
    /* sorted bytewise, blanks and '%' escaped, UTF-8 as it is */
    const char *want = "sbx-manifest 1\n"
                       "l 0777 9 - l ../a%20b%25c\n"
                       "f 0755 5 " H2 " run%20me.sh\n"
                       "d 0755 0 - src\n"
                       "f 0644 3 " H1 " src/a.txt\n"
                       "h 0644 3 " H1 " src/b.txt src/a.txt\n"
                       "f 0600 0 " H2 " \xe6\x96\x87\n";
    assert_string_equal(text, want);
    assert_int_equal(sbx_snap_parse(text, len, &back, &err), 0);
    assert_int_equal(back.n, m.n);
    for (size_t i = 0; i < m.n; i++) {
        assert_string_equal(back.e[i].path, m.e[i].path);
        assert_int_equal(back.e[i].type, m.e[i].type);
        assert_int_equal(back.e[i].mode, m.e[i].mode);
        assert_int_equal(back.e[i].size, m.e[i].size);
        assert_string_equal(back.e[i].hash, m.e[i].hash);
        if (m.e[i].target)
            assert_string_equal(back.e[i].target, m.e[i].target);
    }
    const struct sbx_snap_entry *l = sbx_snap_find(&back, "l");
    assert_non_null(l);
    assert_string_equal(l->target, "../a b%c");
    assert_null(sbx_snap_find(&back, "nope"));
    /* the id is the text's SHA-256, so equal text is an equal id */
    char id1[SBX_SHA256_HEX_SIZE], id2[SBX_SHA256_HEX_SIZE];
    char *text2;
    size_t len2;
    assert_int_equal(sbx_snap_format(&back, &text2, &len2, &err), 0);
    assert_int_equal(sbx_snap_id(text, len, id1, &err), 0);
    assert_int_equal(sbx_snap_id(text2, len2, id2, &err), 0);
    assert_string_equal(id1, id2);
    assert_true(sbx_snap_id_valid(id1));
    free(text);
    free(text2);
    sbx_snap_free(&m);
    sbx_snap_free(&back);
}

static void test_parse_refuses(void **state)
{
    const char *bad[] = {
        "",
        "sbx-manifest 2\n",
        "sbx-manifest 1\nf 0644 3 " H1 " a",                        /* not ended */
        "sbx-manifest 1\nx 0644 3 - a\n",                           /* kind */
        "sbx-manifest 1\nf 0644 3 - a\n",                           /* a file without hash */
        "sbx-manifest 1\nf 644 3 " H1 " a\n",                       /* mode digits */
        "sbx-manifest 1\nf 0648 3 " H1 " a\n",                      /* not octal */
        "sbx-manifest 1\nf 0644 -3 " H1 " a\n",                     /* size */
        "sbx-manifest 1\nf 0644 3 " H1 "\n",                        /* no path */
        "sbx-manifest 1\nd 0755 0 - b\nd 0755 0 - a\n",             /* order */
        "sbx-manifest 1\nd 0755 0 - a\nd 0755 0 - a\n",             /* duplicate */
        "sbx-manifest 1\nh 0644 3 " H1 " a b\n",                    /* a link to nothing before */
        "sbx-manifest 1\nf 0644 3 " H1 " b\nh 0644 3 " H2 " c b\n", /* to other content */
        "sbx-manifest 1\nd 0755 0 - a%2\n",                         /* a cut escape */
        "sbx-manifest 1\nd 0755 0 - a%00b\n",                       /* NUL */
        "sbx-manifest 1\nl 0777 1 - a\n",                           /* a symlink without target */
        "sbx-manifest 1\nd 0755 0 - a x y z\n",                     /* too many fields */
        "sbx-manifest 1\nf 0644 3 " H1 "A a\n",                     /* hash length */
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        struct sbx_snap_manifest m;
        sbx_err err = {0};
        if (sbx_snap_parse(bad[i], strlen(bad[i]), &m, &err) == 0)
            fail_msg("accepted: %s", bad[i]);
        assert_int_equal(err.errnum, EINVAL);
        assert_null(m.e);
    }
    assert_false(sbx_snap_id_valid("../../etc/passwd"));
    assert_false(sbx_snap_id_valid(H1 "1"));
    assert_false(
        sbx_snap_id_valid("ABCDEF1111111111111111111111111111111111111111111111111111111111"));
    assert_false(sbx_snap_id_valid(NULL));
}

struct seen {
    char text[1024];
};

static int record(void *ud, enum sbx_snap_change change, const struct sbx_snap_entry *old,
                  const struct sbx_snap_entry *new_)
{
    struct seen *s = ud;
    const char *k = change == SBX_SNAP_ADDED ? "+" : change == SBX_SNAP_DELETED ? "-" : "~";
    size_t n = strlen(s->text);
    snprintf(s->text + n, sizeof(s->text) - n, "%s%s ", k, (new_ ? new_ : old)->path);
    return 0;
}

static void test_diff(void **state)
{
    struct sbx_snap_manifest a, b = {0};
    sample(&a);
    sbx_snap_sort(&a);
    add(&b, "src", SBX_SNAP_DIR, 0755, 0, NULL, NULL);
    add(&b, "src/a.txt", SBX_SNAP_FILE, 0644, 3, H1, NULL);
    add(&b, "src/b.txt", SBX_SNAP_FILE, 0644, 3, H1, NULL); /* no longer a link: same */
    add(&b, "run me.sh", SBX_SNAP_FILE, 0644, 5, H2, NULL); /* mode */
    add(&b, "l", SBX_SNAP_SYMLINK, 0777, 1, NULL, "x");     /* target */
    add(&b, "new", SBX_SNAP_FILE, 0644, 1, H1, NULL);
    sbx_snap_sort(&b);
    struct seen s = {""};
    assert_int_equal(sbx_snap_diff(&a, &b, record, &s), 0);
    assert_string_equal(s.text, "~l +new ~run me.sh -\xe6\x96\x87 ");
    s.text[0] = '\0';
    assert_int_equal(sbx_snap_diff(&a, &a, record, &s), 0);
    assert_string_equal(s.text, "");
    sbx_snap_free(&a);
    sbx_snap_free(&b);
}

static void test_totals_and_unique_bytes(void **state)
{
    struct sbx_snap_manifest a, b = {0};
    sample(&a);
    uint64_t files, bytes;
    sbx_snap_totals(&a, &files, &bytes);
    assert_int_equal(files, 5); /* not the directory */
    assert_int_equal(bytes, 3 + 3 + 5 + 9 + 0);
    add(&b, "other", SBX_SNAP_FILE, 0644, 3, H1, NULL);
    const struct sbx_snap_manifest *both[] = {&a, &b};
    sbx_err err = {0};
    assert_int_equal(sbx_snap_unique_bytes(both, 2, &bytes, &err), 0);
    assert_int_equal(bytes, 3 + 5); /* H1 once, H2 once (5 bytes) */
    sbx_snap_free(&a);
    sbx_snap_free(&b);
}

static void test_retention(void **state)
{
    struct sbx_snap_manifest m[5] = {{0}};
    const char *hashes[] = {H1, H2,
                            "3333333333333333333333333333333333333333333333333333333333333333",
                            "4444444444444444444444444444444444444444444444444444444444444444",
                            "5555555555555555555555555555555555555555555555555555555555555555"};
    struct sbx_snap_keep k[5];
    for (int i = 0; i < 5; i++) {
        add(&m[i], "f", SBX_SNAP_FILE, 0644, 100, hashes[i], NULL);
        k[i] = (struct sbx_snap_keep){.timestamp_ms = 1000 * (i + 1), .man = &m[i]};
    }
    sbx_err err = {0};
    uint64_t kept;
    /* count: the oldest go */
    k[4].current = true;
    struct sbx_snap_limits lim = {.max_count = 3};
    assert_int_equal(sbx_snap_retain(k, 5, &lim, 10000, &kept, &err), 0);
    for (int i = 0; i < 5; i++)
        assert_int_equal(k[i].drop, i < 2);
    assert_int_equal(kept, 300);
    /* age, and the current one is never dropped, however old */
    for (int i = 0; i < 5; i++)
        k[i].drop = k[i].current = false;
    k[0].current = true;
    lim = (struct sbx_snap_limits){.max_age_ms = 2500};
    assert_int_equal(sbx_snap_retain(k, 5, &lim, 5500, &kept, &err), 0);
    bool want_age[] = {false, true, false, false, false}; /* 3000 is 2500 old: kept */
    for (int i = 0; i < 5; i++)
        assert_int_equal(k[i].drop, want_age[i]);
    /* bytes of distinct contents */
    for (int i = 0; i < 5; i++)
        k[i].drop = k[i].current = false;
    k[4].current = true;
    lim = (struct sbx_snap_limits){.max_bytes = 250};
    assert_int_equal(sbx_snap_retain(k, 5, &lim, 5500, &kept, &err), 0);
    for (int i = 0; i < 5; i++)
        assert_int_equal(k[i].drop, i < 3);
    assert_int_equal(kept, 200);
    /* the current one alone above the bound: kept all the same */
    for (int i = 0; i < 5; i++)
        k[i].drop = false;
    lim = (struct sbx_snap_limits){.max_bytes = 50};
    assert_int_equal(sbx_snap_retain(k, 5, &lim, 5500, &kept, &err), 0);
    assert_false(k[4].drop);
    assert_int_equal(kept, 100);
    for (int i = 0; i < 5; i++)
        sbx_snap_free(&m[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_parse_round_trip),
        cmocka_unit_test(test_parse_refuses),
        cmocka_unit_test(test_diff),
        cmocka_unit_test(test_totals_and_unique_bytes),
        cmocka_unit_test(test_retention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
