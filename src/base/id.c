#include "base/id.h"

#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/hex.h"
#include "base/parse.h"

static int fill_random(uint8_t *buf, size_t len, sbx_err *err)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = getrandom(buf + got, len - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return sbx_err_set(err, errno, "getrandom");
        }
        got += (size_t)n;
    }
    return 0;
}

void sbx_id_v7(uint64_t unix_ms, const uint8_t rnd[10], uint8_t out[16])
{
    for (int i = 0; i < 6; i++)
        out[i] = (uint8_t)(unix_ms >> (40 - 8 * i));
    out[6] = (uint8_t)(0x70 | (rnd[0] & 0x0f)); /* version 7, rand_a */
    out[7] = rnd[1];
    out[8] = (uint8_t)(0x80 | (rnd[2] & 0x3f)); /* variant 10, rand_b */
    memcpy(out + 9, rnd + 3, 7);
}

/* The last stamp given in this process: milliseconds << 12 | the fraction of
 * the millisecond in 1/4096ths (RFC 9562, method 3: rand_a holds the extra
 * clock precision). A stamp never repeats or goes back, even when the clock
 * does: it then counts on from the last one. */
static uint64_t last_stamp;

static uint64_t next_stamp(const struct timespec *ts)
{
    uint64_t ms = (uint64_t)ts->tv_sec * 1000u + (uint64_t)ts->tv_nsec / 1000000u;
    uint64_t frac = (uint64_t)(ts->tv_nsec % 1000000) * 4096u / 1000000u;
    uint64_t want = ms << 12 | frac;
    uint64_t prev = __atomic_load_n(&last_stamp, __ATOMIC_RELAXED), got;
    do
        got = want > prev ? want : prev + 1;
    while (!__atomic_compare_exchange_n(&last_stamp, &prev, got, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED));
    return got;
}

int sbx_id_new(char out[SBX_ID_SIZE], sbx_err *err)
{
    uint8_t rnd[10], id[16];
    struct timespec ts;

    if (fill_random(rnd, sizeof(rnd), err) < 0)
        return -1;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t stamp = next_stamp(&ts);
    rnd[0] = (uint8_t)(stamp >> 8 & 0x0f); /* rand_a: the 12 bits of the fraction */
    rnd[1] = (uint8_t)stamp;
    sbx_id_v7(stamp >> 12, rnd, id);
    sbx_id_format(id, out);
    return 0;
}

/* Byte index at which each group of the text form starts, 8-4-4-4-12. */
static bool dash_at(size_t pos)
{
    return pos == 8 || pos == 13 || pos == 18 || pos == 23;
}

void sbx_id_format(const uint8_t id[16], char out[SBX_ID_SIZE])
{
    char *o = out;
    for (size_t i = 0; i < 16; i++) {
        if (dash_at((size_t)(o - out)))
            *o++ = '-';
        o = sbx_hex_encode(id + i, 1, o);
    }
    *o = '\0';
}

int sbx_id_parse(const char *s, uint8_t out[16])
{
    size_t b = 0;
    if (!s)
        return -1;
    for (size_t pos = 0; pos < SBX_ID_LEN;) {
        if (dash_at(pos)) {
            if (s[pos] != '-')
                return -1;
            pos++;
            continue;
        }
        int hi = sbx_hex_digit(s[pos]), lo = hi < 0 ? -1 : sbx_hex_digit(s[pos + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[b++] = (uint8_t)(hi << 4 | lo);
        pos += 2;
    }
    return s[SBX_ID_LEN] == '\0' ? 0 : -1;
}

bool sbx_id_valid(const char *s)
{
    uint8_t id[16];
    return sbx_id_parse(s, id) == 0;
}

uint64_t sbx_id_time_ms(const uint8_t id[16])
{
    uint64_t ms = 0;
    for (int i = 0; i < 6; i++)
        ms = ms << 8 | id[i];
    return ms;
}
