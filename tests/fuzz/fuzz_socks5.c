/* libFuzzer target: the SOCKS5 method selection and request parsers. Beyond
 * "no crash", it holds the parser to its contract: a verdict never changes
 * once the bytes that decided it are in (a longer input cannot turn a
 * complete message into "need more"), consumed never exceeds the input, and
 * a complete request names a valid target. */
#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "net/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_greeting(const uint8_t *data, size_t size)
{
    bool no_auth;
    int r = sbx_socks5_parse_greeting(data, size, &no_auth);
    assert(r >= SBX_PARSE_BAD && r <= (int)size);
    if (r > 0) {
        assert(r == 2 + data[1]);
        for (size_t i = 0; i < (size_t)r; i++) {
            bool na;
            assert(sbx_socks5_parse_greeting(data, i, &na) == SBX_PARSE_MORE);
        }
    }
}

static void check_request(const uint8_t *data, size_t size)
{
    struct sbx_socks5_req req;
    int r = sbx_socks5_parse_request(data, size, &req);
    assert(r >= SBX_PARSE_BAD && r <= (int)size);
    if (r == SBX_PARSE_BAD) {
        assert(req.why != NULL);
        return;
    }
    if (r == SBX_PARSE_MORE)
        return;
    assert(req.cmd == SBX_SOCKS5_CONNECT);
    if (req.name[0]) {
        assert(req.addr.family == 0);
        assert(strlen(req.name) < sizeof(req.name));
        assert(sbx_dns_name_valid(req.name));
    } else {
        assert(req.addr.family == AF_INET || req.addr.family == AF_INET6);
    }
    /* every strict prefix of a complete request only wants more */
    for (size_t i = 0; i < (size_t)r; i++) {
        struct sbx_socks5_req p;
        assert(sbx_socks5_parse_request(data, i, &p) == SBX_PARSE_MORE);
    }
    /* and what follows it does not change it */
    struct sbx_socks5_req again;
    assert(sbx_socks5_parse_request(data, (size_t)r, &again) == r);
    assert(memcmp(&again, &req, sizeof(req)) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_greeting(data, size);
    check_request(data, size);
    /* the handler's order: a greeting, then a request after it */
    bool no_auth;
    int g = sbx_socks5_parse_greeting(data, size, &no_auth);
    if (g > 0)
        check_request(data + g, size - (size_t)g);
    return 0;
}
