/* libFuzzer target: what the daemon does with a request's head before any
 * handler runs, and the header parsers handlers share. The request comes
 * as text (fuzz_input.h); libmicrohttpd's own HTTP parsing is not ours and
 * is not driven here. Each of our steps meets the input as the server
 * would give it:
 * - the URL's %-decoding (our MHD unescape callback): the decoded length is
 *   the input's less two bytes per escape, and a %00 is always noticed;
 * - routing on the daemon's real route table (sbx_api_routes): a match has a
 *   target, a wrong method names the methods allowed, the {id} of a match
 *   is a non-empty segment without '/';
 * - authentication (Authorization: Bearer / X-Claw-Token): accepted exactly
 *   when the presented token is one of the table's, with its identity;
 * - Content-Length and Last-Event-ID: a value accepted is the decimal
 *   number the text says. */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>

#include "api/routes.h"
#include "api/sse.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sbx_http_server *srv;
static sbx_auth *auth;
static struct sbx_api api;
static const char *const tokens[] = {"operator-token-0123456789", "tenant-token-abcdef"};

static void setup(void)
{
    sbx_err e = {0};
    struct event_base *base = event_base_new();
    sbx_http_config cfg = {.listen = "unix:/nonexistent"};
    assert(base && sbx_http_server_new(base, &cfg, &srv, &e) == 0);
    assert(sbx_api_routes(srv, &api, &e) == 0);
    auth = sbx_auth_new();
    assert(auth);
    assert(sbx_auth_add(auth, &(sbx_auth_token){.name = "op", .token = tokens[0]}, &e) == 0);
    assert(sbx_auth_add(auth, &(sbx_auth_token){.name = "t1", .token = tokens[1], .tenant = "t1"},
                        &e) == 0);
}

static void check_unescape(const char *text)
{
    size_t in = strlen(text);
    char *s = strdup(text);
    assert(s);
    bool nul;
    size_t out = sbx_http__unescape(s, &nul);
    assert(out <= in && (in - out) % 2 == 0);
    assert(nul ? strlen(s) < out : strlen(s) == out);
    free(s);
}

static void check_route(const char *method, const char *raw_path)
{
    char *path = strdup(raw_path);
    assert(path);
    bool nul;
    sbx_http__unescape(path, &nul);
    if (!nul) {
        sbx_route_match m = {0};
        char allow[128] = "";
        sbx_route_result r = sbx_router_match(srv->router, method, path, &m, allow, sizeof(allow));
        if (r == SBX_ROUTE_FOUND) {
            assert(m.target);
            const char *id = sbx_route_param(&m, "id");
            if (id)
                assert(*id && !strchr(id, '/'));
        } else if (r == SBX_ROUTE_BAD_METHOD) {
            assert(allow[0]);
        }
        sbx_route_match_clear(&m);
    }
    free(path);
}

static void check_auth(const sbx_http_request *req)
{
    const char *authz = sbx_http_req_header(req, "Authorization");
    const char *xct = sbx_http_req_header(req, "X-Claw-Token");
    const sbx_identity *who = NULL;
    sbx_auth_result r = sbx_auth_check(auth, authz, xct, &who);
    const char *presented = sbx_auth_presented(authz, xct);
    int expect = -1;
    for (int i = 0; presented && i < 2; i++)
        if (!strcmp(presented, tokens[i]))
            expect = i;
    if (!presented)
        assert(r == SBX_AUTH_MISSING && !who);
    else if (expect < 0)
        assert(r == SBX_AUTH_INVALID && !who);
    else
        assert(r == SBX_AUTH_OK && who && !strcmp(who->name, expect ? "t1" : "op") &&
               (expect ? who->tenant && !strcmp(who->tenant, "t1") : !who->tenant));
}

/* A number accepted from text: text is its decimal form, give or take
 * leading zeros (and, for Content-Length, what strtoull skips first). */
static void check_number(const char *text, unsigned long long n, bool lenient)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%llu", n);
    const char *t = text;
    if (lenient) {
        while (*t == ' ' || (*t >= '\t' && *t <= '\r'))
            t++;
        if (*t == '+' || *t == '-')
            t++;
    }
    while (t[0] == '0' && t[1])
        t++;
    if (lenient && text != t && strchr(text, '-'))
        return; /* strtoull negates: "-1" is ULLONG_MAX */
    assert(!strcmp(t, buf));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!srv)
        setup();
    struct fz_request fz;
    if (fz_parse(&fz, data, size)) {
        sbx_http_request req;
        fz_request_init(&req, &fz, NULL);
        check_unescape(fz.path);
        check_route(fz.method, fz.path);
        check_auth(&req);
        unsigned long long n;
        const char *cl = sbx_http_req_header(&req, "Content-Length");
        if (cl && sbx_http__content_length(cl, &n))
            check_number(cl, n, true);
        uint64_t after;
        sbx_err e = {0};
        const char *last = sbx_http_req_header(&req, "Last-Event-ID");
        if (sbx_sse_last_event_id(last, &after, &e) == 0) {
            if (last && *last)
                check_number(last, after, false);
            else
                assert(after == 0);
        } else {
            assert(e.msg[0]);
        }
    }
    fz_free(&fz);
    return 0;
}
