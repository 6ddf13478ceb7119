/* The resolver against a small upstream DNS server of our own on 127.0.0.1
 * (evdns's server API on a second socket of the same loop): nothing leaves
 * this machine. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/dns_struct.h>
#include <event2/event.h>

#include "net/resolve.h"

#include "fake_upstream.h"

/* ---- the fake upstream ---- */

static const struct upstream_record table[] = {
    {"one.test", EVDNS_TYPE_A, "203.0.113.10"},     {"two.test", EVDNS_TYPE_A, "203.0.113.20"},
    {"two.test", EVDNS_TYPE_A, "203.0.113.21"},     {"dual.test", EVDNS_TYPE_A, "203.0.113.30"},
    {"dual.test", EVDNS_TYPE_AAAA, "2001:db8::30"}, {"six.test", EVDNS_TYPE_AAAA, "2001:db8::6"},
    {"slow6.test", EVDNS_TYPE_A, "203.0.113.60"},
};

#define MANY 20

/* slow6.test's AAAA is never answered (its A is), "refused.test" gets
 * REFUSED, many.test has MANY addresses and no AAAA; the rest is the table's. */
static enum upstream_verdict resolve_names(struct evdns_server_request *req,
                                           const struct evdns_server_question *q, const char *lower,
                                           int *rcode)
{
    if (strcmp(lower, "slow6.test") == 0 && q->type == EVDNS_TYPE_AAAA)
        return UPSTREAM_HOLD;
    if (strcmp(lower, "refused.test") == 0) {
        *rcode = DNS_ERR_REFUSED;
        return UPSTREAM_DONE;
    }
    if (strcmp(lower, "many.test") == 0) {
        for (int k = 0; q->type == EVDNS_TYPE_A && k < MANY; k++) {
            uint32_t a = htonl(0xcb007100u + (uint32_t)k); /* 203.0.113.k */
            evdns_server_request_add_a_reply(req, q->name, 1, &a, 60);
        }
        return UPSTREAM_DONE;
    }
    return UPSTREAM_TABLE;
}

/* ---- the loop ---- */

struct result {
    int calls;
    int errnum;
    size_t n;
    struct sbx_addr addrs[SBX_RESOLVE_MAX];
};

static void on_result(void *ud, int errnum, const struct sbx_addr *addrs, size_t n)
{
    struct result *res = ud;
    res->calls++;
    res->errnum = errnum;
    res->n = n;
    assert_true(n <= SBX_RESOLVE_MAX);
    assert_true((n == 0) == (errnum != 0));
    if (n)
        memcpy(res->addrs, addrs, n * sizeof(*addrs));
}

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *str(const struct sbx_addr *a)
{
    static char buf[4][INET6_ADDRSTRLEN];
    static int i;
    i = (i + 1) % 4;
    return inet_ntop(a->family, &a->u, buf[i], sizeof(buf[i]));
}

/* ---- fixture ---- */

struct env {
    struct event_base *base;
    struct upstream up;
    struct sbx_policy *policy;
    struct sbx_resolver *r;
};

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    e->base = event_base_new();
    upstream_start(e->base, &e->up, table, sizeof(table) / sizeof(table[0]), resolve_names);
    const char *hosts[] = {"db.internal=10.1.2.3", "v6.internal=fd00::7", NULL};
    struct sbx_policy_opts o = {.def = SBX_DEFAULT_ALLOW, .hosts = hosts};
    sbx_err err = {0};
    e->policy = sbx_policy_new(&o, &err);
    assert_non_null(e->policy);
    char ns[32];
    snprintf(ns, sizeof(ns), "127.0.0.1:%u", e->up.portno);
    const char *upstream[] = {ns, NULL};
    e->r = sbx_resolver_new(e->base, e->policy, upstream, &err);
    assert_non_null(e->r);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    sbx_resolver_free(e->r);
    upstream_stop(&e->up);
    /* Let the callbacks evdns still owes run, so nothing is left behind. */
    event_base_loop(e->base, EVLOOP_NONBLOCK);
    sbx_policy_free(e->policy);
    event_base_free(e->base);
    free(e);
    return 0;
}

static void resolve(struct env *e, const char *name, int family, struct result *res)
{
    memset(res, 0, sizeof(*res));
    assert_non_null(sbx_resolve(e->r, name, family, on_result, res));
    /* Never from inside sbx_resolve. */
    assert_int_equal(res->calls, 0);
    run(e->base, &res->calls, 10);
    assert_int_equal(res->calls, 1);
}

/* ---- tests ---- */

static void a_record(void **state)
{
    struct env *e = *state;
    struct result res;
    resolve(e, "one.test", AF_INET, &res);
    assert_int_equal(res.errnum, 0);
    assert_int_equal(res.n, 1);
    assert_string_equal(str(&res.addrs[0]), "203.0.113.10");
    assert_int_equal(upstream_saw(&e->up, "one.test", EVDNS_TYPE_A), 1);
    assert_int_equal(upstream_saw(&e->up, "one.test", EVDNS_TYPE_AAAA), 0);
    /* Absolute names: a trailing dot is the same name, no search list. */
    resolve(e, "One.Test.", AF_INET, &res);
    assert_int_equal(res.n, 1);
    assert_int_equal(e->up.nseen, 2);
}

static void several_addresses_in_order(void **state)
{
    struct env *e = *state;
    struct result res;
    resolve(e, "two.test", AF_INET, &res);
    assert_int_equal(res.n, 2);
    assert_string_equal(str(&res.addrs[0]), "203.0.113.20");
    assert_string_equal(str(&res.addrs[1]), "203.0.113.21");
}

static void at_most_resolve_max(void **state)
{
    struct env *e = *state;
    struct result res;
    resolve(e, "many.test", AF_UNSPEC, &res);
    assert_int_equal(res.errnum, 0);
    assert_int_equal(res.n, SBX_RESOLVE_MAX);
    assert_string_equal(str(&res.addrs[0]), "203.0.113.0");
}

static void aaaa_record(void **state)
{
    struct env *e = *state;
    struct result res;
    resolve(e, "six.test", AF_INET6, &res);
    assert_int_equal(res.errnum, 0);
    assert_int_equal(res.n, 1);
    assert_int_equal(res.addrs[0].family, AF_INET6);
    assert_string_equal(str(&res.addrs[0]), "2001:db8::6");
    assert_int_equal(upstream_saw(&e->up, "six.test", EVDNS_TYPE_A), 0);
}

static void unspec_ipv4_first(void **state)
{
    struct env *e = *state;
    struct result res;
    resolve(e, "dual.test", AF_UNSPEC, &res);
    assert_int_equal(res.n, 2);
    assert_string_equal(str(&res.addrs[0]), "203.0.113.30");
    assert_string_equal(str(&res.addrs[1]), "2001:db8::30");
    assert_int_equal(upstream_saw(&e->up, "dual.test", EVDNS_TYPE_A), 1);
    assert_int_equal(upstream_saw(&e->up, "dual.test", EVDNS_TYPE_AAAA), 1);
    /* Only one family exists: that one, no error. */
    resolve(e, "six.test", AF_UNSPEC, &res);
    assert_int_equal(res.n, 1);
    assert_string_equal(str(&res.addrs[0]), "2001:db8::6");
    resolve(e, "one.test", AF_UNSPEC, &res);
    assert_int_equal(res.n, 1);
    assert_string_equal(str(&res.addrs[0]), "203.0.113.10");
}

static void unspec_does_not_wait_for_a_lost_aaaa(void **state)
{
    struct env *e = *state;
    struct result res;
    double t0 = mono();
    resolve(e, "slow6.test", AF_UNSPEC, &res);
    assert_int_equal(res.n, 1);
    assert_string_equal(str(&res.addrs[0]), "203.0.113.60");
    assert_true(mono() - t0 < 1.5);
    assert_int_equal(upstream_saw(&e->up, "slow6.test", EVDNS_TYPE_AAAA), 1);
}

static void nodata_and_nxdomain(void **state)
{
    struct env *e = *state;
    struct result res;
    resolve(e, "one.test", AF_INET6, &res);
    assert_int_equal(res.errnum, ENODATA);
    resolve(e, "nope.test", AF_INET, &res);
    assert_int_equal(res.errnum, ENOENT);
    assert_int_equal(res.n, 0);
    resolve(e, "nope.test", AF_UNSPEC, &res);
    assert_int_equal(res.errnum, ENOENT);
}

static void upstream_refusal_is_unreachable(void **state)
{
    struct env *e = *state;
    struct result res;
    resolve(e, "refused.test", AF_INET, &res);
    assert_int_equal(res.errnum, EHOSTUNREACH);
}

static void silent_upstream_times_out(void **state)
{
    struct env *e = *state;
    /* A socket nobody reads: every question to it is lost. */
    uint16_t port;
    int fd = udp_socket(&port);
    char ns[32];
    snprintf(ns, sizeof(ns), "127.0.0.1:%u", port);
    const char *upstream[] = {ns, NULL};
    sbx_err err = {0};
    struct sbx_resolver *r = sbx_resolver_new(e->base, e->policy, upstream, &err);
    assert_non_null(r);
    struct result res = {0};
    double t0 = mono();
    assert_non_null(sbx_resolve(r, "one.test", AF_INET, on_result, &res));
    run(e->base, &res.calls, 15);
    double took = mono() - t0;
    assert_int_equal(res.calls, 1);
    assert_int_equal(res.errnum, ETIMEDOUT);
    /* 2 attempts of 2 s each. */
    assert_true(took > 3.5 && took < 6);
    sbx_resolver_free(r);
    close(fd);
}

static void literals_without_dns(void **state)
{
    struct env *e = *state;
    struct result res;
    resolve(e, "192.0.2.1", AF_UNSPEC, &res);
    assert_int_equal(res.n, 1);
    assert_int_equal(res.addrs[0].family, AF_INET);
    assert_string_equal(str(&res.addrs[0]), "192.0.2.1");
    resolve(e, "2001:db8::1", AF_INET6, &res);
    assert_int_equal(res.n, 1);
    assert_string_equal(str(&res.addrs[0]), "2001:db8::1");
    resolve(e, "::ffff:169.254.169.254", AF_UNSPEC, &res);
    assert_int_equal(res.addrs[0].family, AF_INET6);
    resolve(e, "192.0.2.1", AF_INET6, &res);
    assert_int_equal(res.errnum, ENODATA);
    assert_int_equal(e->up.nseen, 0);
}

static void static_hosts_without_dns(void **state)
{
    struct env *e = *state;
    struct result res;
    resolve(e, "db.internal", AF_INET, &res);
    assert_int_equal(res.n, 1);
    assert_string_equal(str(&res.addrs[0]), "10.1.2.3");
    resolve(e, "v6.internal", AF_UNSPEC, &res);
    assert_int_equal(res.n, 1);
    assert_string_equal(str(&res.addrs[0]), "fd00::7");
    resolve(e, "v6.internal", AF_INET, &res);
    assert_int_equal(res.errnum, ENODATA);
    assert_int_equal(e->up.nseen, 0);
}

static void malformed_names_never_asked(void **state)
{
    struct env *e = *state;
    const char *bad[] = {"",
                         ".",
                         "a..b",
                         ".lead.test",
                         "sp ace.test",
                         "semi;colon.test",
                         "x.test..",
                         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.test"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct result res;
        resolve(e, bad[i], AF_UNSPEC, &res);
        assert_int_equal(res.errnum, EINVAL);
    }
    char longname[300];
    memset(longname, 0, sizeof(longname));
    for (int i = 0; i < 64; i++)
        strcat(longname, "abc.");
    strcat(longname, "test");
    struct result res;
    resolve(e, longname, AF_INET, &res);
    assert_int_equal(res.errnum, EINVAL);
    assert_int_equal(e->up.nseen, 0);
}

/* The edges of the one name check the resolver, the DNS server and the
 * egress handlers share: 253 characters, the trailing dot not counted. */
static void name_check_edges(void **state)
{
    (void)state;
    char name[300];
    memset(name, 0, sizeof(name));
    for (int i = 0; i < 3; i++)
        strcat(name,
               "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa."); /* 63 + dot */
    strcat(name, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");  /* 61: 253 */
    assert_int_equal(strlen(name), 253);
    assert_true(sbx_dns_name_valid(name));
    strcat(name, ".");
    assert_true(sbx_dns_name_valid(name));
    strcat(name, ".");
    assert_false(sbx_dns_name_valid(name));
    name[253] = 'a';
    name[254] = '\0';
    assert_false(sbx_dns_name_valid(name));
    assert_true(sbx_dns_name_valid("a-b.c_d.example."));
    assert_false(sbx_dns_name_valid("."));
    assert_false(sbx_dns_name_valid(".a"));
    assert_false(sbx_dns_name_valid("a..b"));
    assert_false(sbx_dns_name_valid("a\x80"
                                    "b"));
}

static void bad_family(void **state)
{
    struct env *e = *state;
    struct result res;
    resolve(e, "one.test", AF_UNIX, &res);
    assert_int_equal(res.errnum, EAFNOSUPPORT);
    assert_int_equal(e->up.nseen, 0);
}

static void cancel_before_answer(void **state)
{
    struct env *e = *state;
    struct result res = {0};
    struct sbx_resolve_req *req = sbx_resolve(e->r, "hold.test", AF_UNSPEC, on_result, &res);
    assert_non_null(req);
    run(e->base, NULL, 0.3);
    assert_int_equal(upstream_saw(&e->up, "hold.test", 0), 2);
    sbx_resolve_cancel(req);
    /* The upstream answers after all: nobody is told. */
    for (int i = 0; i < e->up.nheld; i++)
        evdns_server_request_respond(e->up.held[i], DNS_ERR_NOTEXIST);
    e->up.nheld = 0;
    run(e->base, NULL, 0.5);
    assert_int_equal(res.calls, 0);

    /* Answers known at once are cancelled as well. */
    req = sbx_resolve(e->r, "192.0.2.1", AF_INET, on_result, &res);
    sbx_resolve_cancel(req);
    req = sbx_resolve(e->r, "db.internal", AF_INET, on_result, &res);
    sbx_resolve_cancel(req);
    /* And a lookup cancelled before the loop even sent it. */
    req = sbx_resolve(e->r, "one.test", AF_INET, on_result, &res);
    sbx_resolve_cancel(req);
    sbx_resolve_cancel(NULL);
    run(e->base, NULL, 0.3);
    assert_int_equal(res.calls, 0);
}

static void free_with_lookups_in_flight(void **state)
{
    struct env *e = *state;
    struct result res = {0};
    char ns[32];
    snprintf(ns, sizeof(ns), "127.0.0.1:%u", e->up.portno);
    const char *upstream[] = {ns, NULL};
    sbx_err err = {0};
    struct sbx_resolver *r = sbx_resolver_new(e->base, e->policy, upstream, &err);
    assert_non_null(r);
    assert_non_null(sbx_resolve(r, "hold.test", AF_UNSPEC, on_result, &res));
    assert_non_null(sbx_resolve(r, "192.0.2.1", AF_INET, on_result, &res));
    run(e->base, NULL, 0.2);
    assert_int_equal(res.calls, 1); /* the literal */
    assert_non_null(sbx_resolve(r, "one.test", AF_INET, on_result, &res));
    sbx_resolver_free(r);
    run(e->base, NULL, 0.3);
    assert_int_equal(res.calls, 1);
}

struct freeing {
    struct sbx_resolver *r;
    int calls;
};

static void free_in_callback(void *ud, int errnum, const struct sbx_addr *addrs, size_t n)
{
    struct freeing *f = ud;
    f->calls++;
    sbx_resolver_free(f->r);
}

static void callback_may_free_the_resolver(void **state)
{
    struct env *e = *state;
    char ns[32];
    snprintf(ns, sizeof(ns), "127.0.0.1:%u", e->up.portno);
    const char *upstream[] = {ns, NULL};
    sbx_err err = {0};
    struct freeing f = {.r = sbx_resolver_new(e->base, e->policy, upstream, &err)};
    assert_non_null(f.r);
    /* AAAA lost: the callback runs after the grace, with AAAA still owed. */
    assert_non_null(sbx_resolve(f.r, "slow6.test", AF_UNSPEC, free_in_callback, &f));
    run(e->base, &f.calls, 5);
    assert_int_equal(f.calls, 1);
    run(e->base, NULL, 0.2);
}

static void upstream_configuration(void **state)
{
    struct env *e = *state;
    sbx_err err = {0};
    const char *bad[] = {"not-an-address", NULL};
    assert_null(sbx_resolver_new(e->base, e->policy, bad, &err));
    assert_int_equal(err.errnum, EINVAL);
    assert_non_null(strstr(err.msg, "not-an-address"));
    const char *none[] = {NULL};
    memset(&err, 0, sizeof(err));
    assert_null(sbx_resolver_new(e->base, e->policy, none, &err));
    assert_int_equal(err.errnum, EINVAL);
    /* IPv6 (where the host has it) and port forms; a duplicate is harmless. */
    int v6 = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    const char *forms4[] = {"127.0.0.1:5353", "127.0.0.1", "127.0.0.1:5353", NULL};
    const char *forms6[] = {"127.0.0.1:5353", "[::1]:5353", "::1", "127.0.0.1:5353", NULL};
    struct sbx_resolver *r = sbx_resolver_new(e->base, NULL, v6 >= 0 ? forms6 : forms4, &err);
    assert_non_null(r);
    assert_int_equal(evdns_base_count_nameservers(sbx_resolver_evdns(r)), v6 >= 0 ? 3 : 2);
    sbx_resolver_free(r);
    if (v6 >= 0)
        close(v6);
    /* The host's resolv.conf: read, nothing sent. */
    r = sbx_resolver_new(e->base, e->policy, NULL, &err);
    assert_non_null(r);
    assert_true(evdns_base_count_nameservers(sbx_resolver_evdns(r)) >= 1);
    sbx_resolver_free(r);
}

/* ---- the answers table ---- */

static struct sbx_addr addr(const char *s)
{
    struct sbx_addr a;
    sbx_err err = {0};
    assert_int_equal(sbx_addr_parse(s, &a, &err), 0);
    return a;
}

static void answers_latest_wins(void **state)
{
    struct sbx_dns_answers *a = sbx_dns_answers_new(8);
    struct sbx_addr x = addr("203.0.113.1"), y = addr("2001:db8::1"), z = addr("203.0.113.2");
    assert_null(sbx_dns_answers_lookup(a, &x));
    sbx_dns_answers_add(a, "First.Example.", &x);
    sbx_dns_answers_add(a, "v6.example", &y);
    assert_string_equal(sbx_dns_answers_lookup(a, &x), "first.example");
    assert_string_equal(sbx_dns_answers_lookup(a, &y), "v6.example");
    assert_null(sbx_dns_answers_lookup(a, &z));
    sbx_dns_answers_add(a, "second.example", &x);
    assert_string_equal(sbx_dns_answers_lookup(a, &x), "second.example");
    /* ::ffff:203.0.113.1 is another address to this table. */
    struct sbx_addr mapped = addr("::ffff:203.0.113.1");
    assert_null(sbx_dns_answers_lookup(a, &mapped));
    sbx_dns_answers_free(a);
    sbx_dns_answers_free(NULL);
}

static void answers_bounded_oldest_evicted(void **state)
{
    struct sbx_dns_answers *a = sbx_dns_answers_new(2);
    struct sbx_addr x = addr("203.0.113.1"), y = addr("203.0.113.2"), z = addr("203.0.113.3");
    sbx_dns_answers_add(a, "x.example", &x);
    sbx_dns_answers_add(a, "y.example", &y);
    sbx_dns_answers_add(a, "x2.example", &x); /* refreshes x: y is now the oldest */
    sbx_dns_answers_add(a, "z.example", &z);
    assert_string_equal(sbx_dns_answers_lookup(a, &x), "x2.example");
    assert_null(sbx_dns_answers_lookup(a, &y));
    assert_string_equal(sbx_dns_answers_lookup(a, &z), "z.example");
    for (int i = 0; i < 1000; i++) {
        struct sbx_addr v = x;
        v.u.v4.s_addr = htonl(0x0a000000u + (uint32_t)i);
        sbx_dns_answers_add(a, "flood.example", &v);
    }
    assert_null(sbx_dns_answers_lookup(a, &x));
    sbx_dns_answers_free(a);
}

/* The table grows as names are answered (by doubling, past its first
 * allocation and its later ones), keeps every entry it moved, and still
 * stops at its bound. */
static void answers_grow_to_their_bound(void **state)
{
    struct sbx_dns_answers *a = sbx_dns_answers_new(40);
    struct sbx_addr base = addr("10.1.0.0");
    char name[32];
    for (int i = 0; i < 40; i++) {
        struct sbx_addr v = base;
        v.u.v4.s_addr = htonl(0x0a010000u + (uint32_t)i);
        snprintf(name, sizeof(name), "n%d.example", i);
        sbx_dns_answers_add(a, name, &v);
    }
    for (int i = 0; i < 40; i++) {
        struct sbx_addr v = base;
        v.u.v4.s_addr = htonl(0x0a010000u + (uint32_t)i);
        snprintf(name, sizeof(name), "n%d.example", i);
        assert_string_equal(sbx_dns_answers_lookup(a, &v), name);
    }
    /* the 41st takes the oldest's place */
    struct sbx_addr more = base;
    more.u.v4.s_addr = htonl(0x0a010000u + 40);
    sbx_dns_answers_add(a, "more.example", &more);
    assert_string_equal(sbx_dns_answers_lookup(a, &more), "more.example");
    assert_null(sbx_dns_answers_lookup(a, &base));
    sbx_dns_answers_free(a);
}

/* A loopback answer's alias: from 198.19.255.0/24, the same for the same
 * name, mapped back to the real address; an ordinary answer is no alias. */
static void loopback_aliases(void **state)
{
    struct sbx_dns_answers *a = sbx_dns_answers_new(16);
    struct sbx_addr lo, one, again, other, real, pub;
    char buf[INET6_ADDRSTRLEN];
    assert_int_equal(sbx_addr_parse("127.0.0.1", &lo, NULL), 0);
    assert_int_equal(sbx_addr_parse("203.0.113.10", &pub, NULL), 0);
    sbx_dns_answers_alias(a, "Svc.", &lo, &one);
    assert_string_equal(sbx_addr_str(&one, buf, sizeof(buf)), "198.19.255.1");
    sbx_dns_answers_alias(a, "svc", &lo, &again);
    assert_true(sbx_addr_eq(&one, &again));
    sbx_dns_answers_alias(a, "other", &lo, &other);
    assert_string_equal(sbx_addr_str(&other, buf, sizeof(buf)), "198.19.255.2");
    assert_string_equal(sbx_dns_answers_lookup(a, &one), "svc");
    assert_true(sbx_dns_answers_real(a, &other, &real));
    assert_true(sbx_addr_eq(&real, &lo));
    sbx_dns_answers_add(a, "pub.test", &pub);
    assert_false(sbx_dns_answers_real(a, &pub, &real));
    /* an ordinary answer that takes an alias's address is no alias any more */
    sbx_dns_answers_add(a, "x.test", &one);
    assert_false(sbx_dns_answers_real(a, &one, &real));
    sbx_dns_answers_free(a);
}

int main(void)
{
    evdns_set_log_fn(quiet);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_record, setup, teardown),
        cmocka_unit_test(loopback_aliases),
        cmocka_unit_test_setup_teardown(several_addresses_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(at_most_resolve_max, setup, teardown),
        cmocka_unit_test_setup_teardown(aaaa_record, setup, teardown),
        cmocka_unit_test_setup_teardown(unspec_ipv4_first, setup, teardown),
        cmocka_unit_test_setup_teardown(unspec_does_not_wait_for_a_lost_aaaa, setup, teardown),
        cmocka_unit_test_setup_teardown(nodata_and_nxdomain, setup, teardown),
        cmocka_unit_test_setup_teardown(upstream_refusal_is_unreachable, setup, teardown),
        cmocka_unit_test_setup_teardown(silent_upstream_times_out, setup, teardown),
        cmocka_unit_test_setup_teardown(literals_without_dns, setup, teardown),
        cmocka_unit_test_setup_teardown(static_hosts_without_dns, setup, teardown),
        cmocka_unit_test_setup_teardown(malformed_names_never_asked, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_family, setup, teardown),
        cmocka_unit_test_setup_teardown(cancel_before_answer, setup, teardown),
        cmocka_unit_test_setup_teardown(free_with_lookups_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(callback_may_free_the_resolver, setup, teardown),
        cmocka_unit_test_setup_teardown(upstream_configuration, setup, teardown),
        cmocka_unit_test(name_check_edges),
        cmocka_unit_test(answers_latest_wins),
        cmocka_unit_test(answers_bounded_oldest_evicted),
        cmocka_unit_test(answers_grow_to_their_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
