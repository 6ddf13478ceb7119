/* One JSON shape of an egress flow (audit records, events, `run`'s report). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>

#include "runtime/flow.h"

static char *dump(const struct sbx_flow *f)
{
    json_t *j = sbx_flow_json(f);
    assert_non_null(j);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    assert_non_null(s);
    return s;
}

static void test_allowed_flow(void **state)
{
    struct sbx_flow f = {.duration_s = 1.5,
                         .via = SBX_VIA_SOCKS5,
                         .name = "api.example.com",
                         .addr = {.family = AF_INET},
                         .port = 443,
                         .verdict = SBX_VERDICT_ALLOW,
                         .rule = "allow *.example.com:443",
                         .bytes_out = 10,
                         .bytes_in = 20};
    inet_pton(AF_INET, "192.0.2.7", &f.addr.u.v4);
    char *s = dump(&f);
    assert_string_equal(
        s, "{\"via\":\"socks5\",\"name\":\"api.example.com\",\"address\":\"192.0.2.7\","
           "\"port\":443,\"verdict\":\"allow\",\"rule\":\"allow *.example.com:443\","
           "\"bytesOut\":10,\"bytesIn\":20,\"durationSeconds\":1.5}");
    free(s);
}

/* A denied name never resolved: no address. */
static void test_denied_name(void **state)
{
    struct sbx_flow f = {.via = SBX_VIA_DNS,
                         .name = "evil.example",
                         .port = 53,
                         .verdict = SBX_VERDICT_DENY,
                         .rule = "default deny"};
    char *s = dump(&f);
    assert_string_equal(s,
                        "{\"via\":\"dns\",\"name\":\"evil.example\",\"address\":\"\",\"port\":53,"
                        "\"verdict\":\"deny\",\"rule\":\"default deny\",\"bytesOut\":0,"
                        "\"bytesIn\":0,\"durationSeconds\":0.0}");
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allowed_flow),
        cmocka_unit_test(test_denied_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
