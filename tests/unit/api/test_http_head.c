/* The gate's check of a request head (sbx_http_head_check): what passes,
 * what is refused and with which status. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/http_internal.h"

static const struct sbx_http_head_limits lim = {
    .max_head = 8192, .max_target = 4096, .max_params = 100, .max_headers = 100};

static int check(const char *text, struct sbx_http_head *h)
{
    return sbx_http_head_check(text, strlen(text), &lim, h);
}

static void passes(void **state)
{
    static const char *const ok[] = {
        "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /healthz HTTP/1.0\r\n\r\n",
        "\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /a?b=1&c=2 HTTP/1.1\nHost: x\n\n",
        "POST /runtime/tasks HTTP/1.1\r\nHost: x\r\nContent-Length:  12\r\n\r\n",
        "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nX-Empty:\r\nX-Utf8: \xc3\xa9\t1\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        struct sbx_http_head h;
        if (check(ok[i], &h) != 0)
            fail_msg("refused: %s (%u %s)", ok[i], h.status, h.msg);
        assert_int_equal(h.head_len, strlen(ok[i]));
    }
    struct sbx_http_head h;
    assert_int_equal(check("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n", &h), 0);
    assert_true(h.has_length && h.content_length == 12 && !h.chunked && h.http11);
}

static void refused(void **state)
{
    static const struct {
        const char *text;
        unsigned status;
    } bad[] = {
        {"GET /healthz HTTP/1.1\r\n\r\n", 400},
        {"GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
        {"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", 400},
        {"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\n", 400},
        {"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 2 \r\n\r\n", 400},
        {"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", 400},
        {"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n", 400},
        {"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 400},
        {"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 400},
        {"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n",
         400},
        {"POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"GET /x HTTP/2.0\r\nHost: x\r\n\r\n", 505},
        {"GET /x HTTP/1.2\r\nHost: x\r\n\r\n", 505},
        {"GET /x http/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET /x\r\nHost: x\r\n\r\n", 400},
        {"GET  /x HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET x HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"G(T /x HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET /x HTTP/1.1\r\nHost : x\r\n\r\n", 400},
        {"GET /x HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400},
        {"GET /x HTTP/1.1\r\nHost: x\r\nX: a\x01"
         "b\r\n\r\n",
         400},
        {"GET /x HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n", 400},
        {"GET /x HTTP/1.1\r\nHost: x\r\n", 400},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct sbx_http_head h;
        if (check(bad[i].text, &h) == 0)
            fail_msg("passed: %s", bad[i].text);
        if (h.status != bad[i].status)
            fail_msg("%s: %u, not %u (%s)", bad[i].text, h.status, bad[i].status, h.msg);
        assert_non_null(h.code);
        assert_true(h.msg[0]);
    }
}

static void sizes(void **state)
{
    char buf[12000];
    struct sbx_http_head h;
    /* 101 query parameters: 414 */
    int n = snprintf(buf, sizeof(buf), "GET /x?p=0");
    for (int i = 1; i <= 100; i++)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "&p=%d", i);
    snprintf(buf + n, sizeof(buf) - (size_t)n, " HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_int_equal(check(buf, &h), -1);
    assert_int_equal(h.status, 414);
    /* a target over 4 KiB: 414 */
    n = snprintf(buf, sizeof(buf), "GET /");
    memset(buf + n, 'a', 5000);
    snprintf(buf + n + 5000, sizeof(buf) - (size_t)n - 5000, " HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_int_equal(check(buf, &h), -1);
    assert_int_equal(h.status, 414);
    /* 101 headers: 431 */
    n = snprintf(buf, sizeof(buf), "GET / HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i < 100; i++)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "X-%d: v\r\n", i);
    snprintf(buf + n, sizeof(buf) - (size_t)n, "\r\n");
    assert_int_equal(check(buf, &h), -1);
    assert_int_equal(h.status, 431);
    /* a NUL byte anywhere: 400 */
    static const char nul[] = "GET / HTTP/1.1\r\nHost: x\0y\r\n\r\n";
    assert_int_equal(sbx_http_head_check(nul, sizeof(nul) - 1, &lim, &h), -1);
    assert_int_equal(h.status, 400);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(passes),
        cmocka_unit_test(refused),
        cmocka_unit_test(sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
