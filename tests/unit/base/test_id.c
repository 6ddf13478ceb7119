#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "base/id.h"

#define MANY 10000

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = ms * 1000000};
    nanosleep(&ts, NULL);
}

/* RFC 9562, appendix A.6: 2022-02-22 19:22:22 UTC, rand_a 0xCC3,
 * rand_b 0x18C4DC0C0C07398F. */
static void rfc_test_vector(void **state)
{
    const uint8_t rnd[10] = {0x0c, 0xc3, 0x18, 0xc4, 0xdc, 0x0c, 0x0c, 0x07, 0x39, 0x8f};
    uint8_t id[16];
    char text[SBX_ID_SIZE];

    sbx_id_v7(0x017F22E279B0ull, rnd, id);
    sbx_id_format(id, text);
    assert_string_equal(text, "017f22e2-79b0-7cc3-98c4-dc0c0c07398f");
    assert_int_equal(sbx_id_time_ms(id), 0x017F22E279B0ull);

    /* Version and variant bits win over whatever the randomness says. */
    const uint8_t ones[10] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    sbx_id_v7(0, ones, id);
    sbx_id_format(id, text);
    assert_string_equal(text, "00000000-0000-7fff-bfff-ffffffffffff");
}

static void format_of_fresh_ids(void **state)
{
    for (int i = 0; i < 1000; i++) {
        char id[SBX_ID_SIZE];
        uint8_t raw[16];
        sbx_err e = {0};
        uint64_t before = now_ms();
        assert_int_equal(sbx_id_new(id, &e), 0);
        uint64_t after = now_ms();

        assert_int_equal(strlen(id), SBX_ID_LEN);
        for (size_t p = 0; p < SBX_ID_LEN; p++) {
            if (p == 8 || p == 13 || p == 18 || p == 23)
                assert_int_equal(id[p], '-');
            else
                assert_non_null(strchr("0123456789abcdef", id[p]));
        }
        assert_int_equal(id[14], '7');           /* version nibble */
        assert_non_null(strchr("89ab", id[19])); /* variant 10xx */
        assert_int_equal(sbx_id_parse(id, raw), 0);
        assert_int_equal(raw[6] >> 4, 7);
        assert_int_equal(raw[8] >> 6, 2);
        assert_in_range(sbx_id_time_ms(raw), before, after);
    }
}

static int cmp_id(const void *a, const void *b)
{
    return strcmp(a, b);
}

static void unique_over_many(void **state)
{
    char(*ids)[SBX_ID_SIZE] = calloc(MANY, SBX_ID_SIZE);
    assert_non_null(ids);
    for (int i = 0; i < MANY; i++)
        assert_int_equal(sbx_id_new(ids[i], NULL), 0);
    qsort(ids, MANY, SBX_ID_SIZE, cmp_id);
    for (int i = 1; i < MANY; i++)
        assert_true(strcmp(ids[i - 1], ids[i]) < 0); /* strictly: no two equal */
    free(ids);
}

static void ordered_across_milliseconds(void **state)
{
    char prev[SBX_ID_SIZE], next[SBX_ID_SIZE];
    assert_int_equal(sbx_id_new(prev, NULL), 0);
    for (int i = 0; i < 20; i++) {
        sleep_ms(2);
        assert_int_equal(sbx_id_new(next, NULL), 0);
        assert_true(strcmp(prev, next) < 0);
        memcpy(prev, next, sizeof(prev));
    }
}

/* Back to back, many land in one millisecond: still in the order made. */
static void ordered_within_a_millisecond(void **state)
{
    char prev[SBX_ID_SIZE], next[SBX_ID_SIZE];
    assert_int_equal(sbx_id_new(prev, NULL), 0);
    for (int i = 0; i < MANY; i++) {
        assert_int_equal(sbx_id_new(next, NULL), 0);
        assert_true(strcmp(prev, next) < 0);
        assert_int_equal(next[14], '7'); /* still a version 7 id */
        assert_true(strchr("89ab", next[19]) != NULL);
        memcpy(prev, next, sizeof(prev));
    }
}

static void parse_rejects_non_uuids(void **state)
{
    uint8_t raw[16];
    const char *bad[] = {
        "",
        "017f22e2-79b0-7cc3-98c4-dc0c0c07398",   /* short */
        "017f22e2-79b0-7cc3-98c4-dc0c0c07398f0", /* long */
        "017f22e2x79b0-7cc3-98c4-dc0c0c07398f",  /* dash */
        "017f22e2-79b0-7cc3-98c4-dc0c0c07398g",  /* hex */
        "017f22e279b07cc398c4dc0c0c07398f",      /* no dashes */
        "../../etc/passwd",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(sbx_id_parse(bad[i], raw), -1);
        assert_false(sbx_id_valid(bad[i]));
    }
    assert_false(sbx_id_valid(NULL));

    char text[SBX_ID_SIZE];
    assert_int_equal(sbx_id_parse("017F22E2-79B0-7CC3-98C4-DC0C0C07398F", raw), 0);
    sbx_id_format(raw, text);
    assert_string_equal(text, "017f22e2-79b0-7cc3-98c4-dc0c0c07398f");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rfc_test_vector),
        cmocka_unit_test(format_of_fresh_ids),
        cmocka_unit_test(unique_over_many),
        cmocka_unit_test(ordered_across_milliseconds),
        cmocka_unit_test(ordered_within_a_millisecond),
        cmocka_unit_test(parse_rejects_non_uuids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
