#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "net/policy.h"

#define A SBX_VERDICT_ALLOW
#define D SBX_VERDICT_DENY
#define RULES(...) ((const char *const[]){__VA_ARGS__, NULL})

static struct sbx_addr addr(const char *s)
{
    struct sbx_addr a;
    sbx_err e = {0};
    if (sbx_addr_parse(s, &a, &e) < 0)
        fail_msg("test address %s: %s", s, e.msg);
    return a;
}

static struct sbx_policy *mk(const struct sbx_policy_opts *o)
{
    sbx_err e = {0};
    struct sbx_policy *p = sbx_policy_new(o, &e);
    if (!p)
        fail_msg("sbx_policy_new: %s", e.msg);
    return p;
}

static const char *vname(enum sbx_verdict v)
{
    return v == A ? "allow" : "deny";
}

#define CHECK(p, name, a, port, verdict, rule) check_one(p, name, a, port, verdict, rule, __LINE__)
static void check_one(const struct sbx_policy *p, const char *name, const char *a, unsigned port,
                      enum sbx_verdict want, const char *rule, int line)
{
    struct sbx_addr ad = addr(a);
    struct sbx_decision d;
    memset(&d, 0x55, sizeof(d));
    sbx_policy_check(p, name, &ad, (uint16_t)port, &d);
    if (d.verdict != want || strcmp(d.rule, rule) != 0)
        fail_msg("line %d: %s [%s]:%u: got %s '%.128s', want %s '%s'", line, name ? name : "-", a,
                 port, vname(d.verdict), d.rule, vname(want), rule);
}

#define NAME_OK(p, name, want, rule) name_one(p, name, want, rule, __LINE__)
static void name_one(const struct sbx_policy *p, const char *name, bool want, const char *rule,
                     int line)
{
    struct sbx_decision d;
    memset(&d, 0x55, sizeof(d));
    bool got = sbx_policy_name_allowed(p, name, &d);
    if (got != want || (d.verdict == A) != want || strcmp(d.rule, rule) != 0)
        fail_msg("line %d: name %s: got %d '%.128s', want %d '%s'", line, name ? name : "(null)",
                 got, d.rule, want, rule);
}

/* sbx_policy_new must fail and its message contain every one of want[]. */
#define REFUSED(o, ...) refused_one(o, (const char *const[]){__VA_ARGS__, NULL}, __LINE__)
static void refused_one(const struct sbx_policy_opts *o, const char *const *want, int line)
{
    sbx_err e = {0};
    struct sbx_policy *p = sbx_policy_new(o, &e);
    if (p) {
        sbx_policy_free(p);
        fail_msg("line %d: accepted, want an error with '%s'", line, want[0]);
    }
    assert_int_equal(e.errnum, EINVAL);
    for (size_t i = 0; want[i]; i++)
        if (!strstr(e.msg, want[i]))
            fail_msg("line %d: error '%s' lacks '%s'", line, e.msg, want[i]);
}

/* --- addresses ---------------------------------------------------------- */

static void addr_parse_and_str(void **state)
{
    char buf[INET6_ADDRSTRLEN];
    struct sbx_addr a = addr("10.0.0.1");
    assert_int_equal(a.family, AF_INET);
    assert_string_equal(sbx_addr_str(&a, buf, sizeof(buf)), "10.0.0.1");
    a = addr("2001:DB8::1");
    assert_int_equal(a.family, AF_INET6);
    assert_string_equal(sbx_addr_str(&a, buf, sizeof(buf)), "2001:db8::1");
    a = addr("::ffff:169.254.169.254");
    assert_string_equal(sbx_addr_str(&a, buf, sizeof(buf)), "::ffff:169.254.169.254");
    a = addr("64:ff9b::169.254.169.254");
    assert_string_equal(sbx_addr_str(&a, buf, sizeof(buf)), "64:ff9b::a9fe:a9fe");

    const char *bad[] = {"",         "1.2.3",    "1.2.3.4.5",    "256.1.1.1",   "::g",     "[::1]",
                         " 1.2.3.4", "1.2.3.4 ", "fe80::1%eth0", "example.com", "01.2.3.4"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        struct sbx_addr out = {.family = 77};
        sbx_err e = {0};
        assert_int_equal(sbx_addr_parse(bad[i], &out, &e), -1);
        assert_int_equal(out.family, 77);
        assert_int_equal(e.errnum, EINVAL);
        char want[64];
        snprintf(want, sizeof(want), "'%s'", bad[i]);
        assert_non_null(strstr(e.msg, want));
    }
    assert_int_equal(sbx_addr_parse(NULL, &a, NULL), -1);

    struct sbx_addr none = {.family = 0};
    assert_string_equal(sbx_addr_str(&none, buf, sizeof(buf)), "?");
    a = addr("255.255.255.255");
    char small[4];
    assert_string_equal(sbx_addr_str(&a, small, sizeof(small)), "?");
}

/* --- the deny-list ------------------------------------------------------ */

struct range_case {
    const char *label; /* the deny-list entry */
    const char *in[3]; /* first, last, one inside */
    const char *out[2];
};

static void denylist_ranges(const struct range_case *c, size_t n, enum sbx_default def)
{
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){.def = def});
    const char *dflt = def == SBX_DEFAULT_ALLOW ? "default allow" : "default deny";
    enum sbx_verdict dv = def == SBX_DEFAULT_ALLOW ? A : D;
    for (size_t i = 0; i < n; i++) {
        char want[128];
        snprintf(want, sizeof(want), "deny-list %s", c[i].label);
        for (size_t j = 0; j < 3 && c[i].in[j]; j++) {
            CHECK(p, NULL, c[i].in[j], 443, D, want);
            CHECK(p, "example.com", c[i].in[j], 80, D, want);
        }
        for (size_t j = 0; j < 2 && c[i].out[j]; j++)
            CHECK(p, NULL, c[i].out[j], 443, dv, dflt);
    }
    sbx_policy_free(p);
}

static const struct range_case v4_ranges[] = {
    {"0.0.0.0/8", {"0.0.0.0", "0.255.255.255", "0.1.2.3"}, {"1.0.0.0"}},
    {"10.0.0.0/8", {"10.0.0.0", "10.255.255.255", "10.0.0.1"}, {"9.255.255.255", "11.0.0.0"}},
    {"100.64.0.0/10",
     {"100.64.0.0", "100.127.255.255", "100.100.100.200"},
     {"100.63.255.255", "100.128.0.0"}},
    {"127.0.0.0/8",
     {"127.0.0.0", "127.255.255.255", "127.0.0.1"},
     {"126.255.255.255", "128.0.0.0"}},
    {"169.254.0.0/16",
     {"169.254.0.0", "169.254.255.255", "169.254.169.254"},
     {"169.253.255.255", "169.255.0.0"}},
    {"172.16.0.0/12",
     {"172.16.0.0", "172.31.255.255", "172.20.1.1"},
     {"172.15.255.255", "172.32.0.0"}},
    {"192.0.0.0/24", {"192.0.0.0", "192.0.0.255", "192.0.0.8"}, {"191.255.255.255", "192.0.1.0"}},
    {"192.168.0.0/16",
     {"192.168.0.0", "192.168.255.255", "192.168.1.1"},
     {"192.167.255.255", "192.169.0.0"}},
    {"198.18.0.0/15",
     {"198.18.0.0", "198.19.255.255", "198.18.5.5"},
     {"198.17.255.255", "198.20.0.0"}},
    {"224.0.0.0/4", {"224.0.0.0", "239.255.255.255", "224.0.0.251"}, {"223.255.255.255"}},
    {"240.0.0.0/4", {"240.0.0.0", "255.255.255.254", "250.1.1.1"}, {NULL}},
    {"255.255.255.255/32", {"255.255.255.255"}, {NULL}},
};

static const struct range_case v6_ranges[] = {
    {"::/128", {"::"}, {"1::"}},
    {"::1/128", {"::1"}, {"::1:0:0"}},
    {"::/96", {"::2", "::ffff:ffff", "::a9fe:a9fe"}, {"::1:0:0:0"}},
    {"64:ff9b:1::/48", {"64:ff9b:1::", "64:ff9b:1:ffff:ffff:ffff:ffff:ffff"}, {"64:ff9b:2::"}},
    {"fc00::/7",
     {"fc00::", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fd00:ec2::254"},
     {"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fe00::"}},
    {"fe80::/10", {"fe80::", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fe80::1"}, {"fe7f::1"}},
    {"fec0::/10", {"fec0::", "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fec0::1"}, {NULL}},
    {"ff00::/8", {"ff00::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ff02::1"}, {NULL}},
};

static void denylist_v4(void **state)
{
    denylist_ranges(v4_ranges, SBX_ARRAY_LEN(v4_ranges), SBX_DEFAULT_ALLOW);
    denylist_ranges(v4_ranges, SBX_ARRAY_LEN(v4_ranges), SBX_DEFAULT_DENY);
}

static void denylist_v6(void **state)
{
    denylist_ranges(v6_ranges, SBX_ARRAY_LEN(v6_ranges), SBX_DEFAULT_ALLOW);
    denylist_ranges(v6_ranges, SBX_ARRAY_LEN(v6_ranges), SBX_DEFAULT_DENY);
}

static void public_and_test_nets_allowed(void **state)
{
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_ALLOW});
    const char *pub[] = {"203.0.113.10", "203.0.113.0",  "203.0.113.255",   "192.0.2.1",
                         "198.51.100.1", "8.8.8.8",      "1.1.1.1",         "100.63.0.1",
                         "2001:db8::1",  "2606:4700::1", "2001:4860::8888", "fe00::"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(pub); i++) {
        CHECK(p, NULL, pub[i], 443, A, "default allow");
        CHECK(p, "www.example.com", pub[i], 80, A, "default allow");
    }
    sbx_policy_free(p);
}

static void embedded_ipv4(void **state)
{
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_ALLOW});
    static const struct {
        const char *a, *rule;
    } denied[] = {
        {"::ffff:169.254.169.254", "deny-list 169.254.0.0/16 (embedded in ::ffff:169.254.169.254)"},
        {"64:ff9b::a9fe:a9fe", "deny-list 169.254.0.0/16 (embedded in 64:ff9b::a9fe:a9fe)"},
        {"2002:a9fe:a9fe::", "deny-list 169.254.0.0/16 (embedded in 2002:a9fe:a9fe::)"},
        {"2002:a9fe:a9fe:1:2:3:4:5",
         "deny-list 169.254.0.0/16 (embedded in 2002:a9fe:a9fe:1:2:3:4:5)"},
        {"::ffff:0:a9fe:a9fe", "deny-list 169.254.0.0/16 (embedded in ::ffff:0:a9fe:a9fe)"},
        {"::ffff:10.0.0.1", "deny-list 10.0.0.0/8 (embedded in ::ffff:10.0.0.1)"},
        {"::ffff:127.0.0.1", "deny-list 127.0.0.0/8 (embedded in ::ffff:127.0.0.1)"},
        {"::ffff:0.0.0.0", "deny-list 0.0.0.0/8 (embedded in ::ffff:0.0.0.0)"},
        {"64:ff9b::6464:64c8", "deny-list 100.64.0.0/10 (embedded in 64:ff9b::6464:64c8)"},
        {"64:ff9b::c0a8:101", "deny-list 192.168.0.0/16 (embedded in 64:ff9b::c0a8:101)"},
        {"2002:7f00:1::", "deny-list 127.0.0.0/8 (embedded in 2002:7f00:1::)"},
        {"2002:ac10:1::", "deny-list 172.16.0.0/12 (embedded in 2002:ac10:1::)"},
        {"::ffff:255.255.255.255",
         "deny-list 255.255.255.255/32 (embedded in ::ffff:255.255.255.255)"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(denied); i++)
        CHECK(p, NULL, denied[i].a, 80, D, denied[i].rule);
    const char *allowed[] = {"64:ff9b::cb00:710a", "::ffff:203.0.113.10", "2002:cb00:710a::1",
                             "::ffff:8.8.8.8",     "64:ff9b::808:808",    "2003:a9fe:a9fe::"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(allowed); i++)
        CHECK(p, NULL, allowed[i], 80, A, "default allow");
    sbx_policy_free(p);

    /* Rules and lists match the embedded address too. */
    p = mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_DENY,
                                     .allow = RULES("203.0.113.10:443"),
                                     .deny = RULES("198.51.100.0/24")});
    CHECK(p, NULL, "64:ff9b::cb00:710a", 443, A,
          "allow 203.0.113.10:443 (embedded in 64:ff9b::cb00:710a)");
    CHECK(p, NULL, "::ffff:203.0.113.10", 443, A,
          "allow 203.0.113.10:443 (embedded in ::ffff:203.0.113.10)");
    CHECK(p, NULL, "203.0.113.10", 443, A, "allow 203.0.113.10:443");
    CHECK(p, NULL, "64:ff9b::cb00:710a", 80, D, "default deny");
    CHECK(p, NULL, "64:ff9b::cb00:710b", 443, D, "default deny");
    CHECK(p, NULL, "2002:c633:6401::", 443, D,
          "deny 198.51.100.0/24 (embedded in 2002:c633:6401::)");
    sbx_policy_free(p);
}

/* --- own and metadata addresses ----------------------------------------- */

static void own_addresses(void **state)
{
    struct sbx_addr own[] = {addr("10.0.0.5"), addr("198.51.100.7"), addr("2001:db8::5")};
    struct sbx_policy_opts o = {
        .def = SBX_DEFAULT_ALLOW,
        .allow = RULES("api.example.com", "10.0.0.0/8", "198.51.100.0/24", "10.0.0.5:22"),
        .own_addrs = own,
        .n_own_addrs = SBX_ARRAY_LEN(own)};
    struct sbx_policy *p = mk(&o);
    CHECK(p, NULL, "198.51.100.7", 443, D, "own address 198.51.100.7");
    CHECK(p, "api.example.com", "198.51.100.7", 443, D, "own address 198.51.100.7");
    CHECK(p, NULL, "198.51.100.8", 443, A, "allow 198.51.100.0/24");
    CHECK(p, NULL, "::ffff:198.51.100.7", 443, D,
          "own address 198.51.100.7 (embedded in ::ffff:198.51.100.7)");
    CHECK(p, NULL, "64:ff9b::c633:6407", 443, D,
          "own address 198.51.100.7 (embedded in 64:ff9b::c633:6407)");
    CHECK(p, NULL, "2001:db8::5", 443, D, "own address 2001:db8::5");
    CHECK(p, NULL, "2001:db8::6", 443, A, "default allow");
    /* Named before the deny-list range that holds it; only an exact rule opens it. */
    CHECK(p, NULL, "10.0.0.5", 443, D, "own address 10.0.0.5");
    CHECK(p, NULL, "10.0.0.5", 22, A, "allow 10.0.0.5:22");
    CHECK(p, NULL, "10.0.0.6", 443, A, "allow 10.0.0.0/8");
    sbx_policy_free(p);

    /* The CLAW_* settings: an exact CIDR or target by address opens, a wider
     * CIDR or a target by name does not. */
    o = (struct sbx_policy_opts){.def = SBX_DEFAULT_ALLOW,
                                 .allowed_cidrs = "10.0.0.0/8, 198.51.100.7/32",
                                 .allowed_internal_targets = "self.test:8080, 10.0.0.5:9090",
                                 .own_addrs = own,
                                 .n_own_addrs = SBX_ARRAY_LEN(own)};
    p = mk(&o);
    CHECK(p, NULL, "10.0.0.5", 443, D, "own address 10.0.0.5");
    CHECK(p, "self.test", "10.0.0.5", 8080, D, "own address 10.0.0.5");
    CHECK(p, NULL, "10.0.0.5", 9090, A, "allowed internal target 10.0.0.5:9090");
    CHECK(p, "self.test", "10.0.0.9", 8080, A, "allowed internal target self.test:8080");
    CHECK(p, NULL, "10.0.0.9", 8080, A, "allowed cidr 10.0.0.0/8");
    CHECK(p, NULL, "198.51.100.7", 443, A, "allowed cidr 198.51.100.7/32");
    sbx_policy_free(p);

    o.own_addrs = NULL;
    REFUSED(&o, "own addresses");
    struct sbx_addr bad[] = {{.family = 0}};
    o.own_addrs = bad;
    o.n_own_addrs = 1;
    REFUSED(&o, "own address 0");
}

static void metadata_needs_exact_rule(void **state)
{
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){
        .def = SBX_DEFAULT_ALLOW,
        .allow = RULES("169.254.0.0/16", "0.0.0.0/0:8000", "fd00::/8", "::ffff:0:0/96", "2002::/16",
                       "100.100.100.0/24", "metadata.example.com"),
        .allowed_cidrs = "100.64.0.0/10"});
    CHECK(p, NULL, "169.254.1.1", 80, A, "allow 169.254.0.0/16");
    CHECK(p, NULL, "169.254.169.254", 80, D, "deny-list 169.254.0.0/16");
    CHECK(p, NULL, "169.254.169.254", 8000, D, "deny-list 169.254.0.0/16");
    CHECK(p, "metadata.example.com", "169.254.169.254", 80, D, "deny-list 169.254.0.0/16");
    CHECK(p, NULL, "::ffff:169.254.169.254", 80, D,
          "deny-list 169.254.0.0/16 (embedded in ::ffff:169.254.169.254)");
    CHECK(p, NULL, "2002:a9fe:a9fe::", 80, D,
          "deny-list 169.254.0.0/16 (embedded in 2002:a9fe:a9fe::)");
    CHECK(p, NULL, "100.64.0.1", 80, A, "allowed cidr 100.64.0.0/10");
    CHECK(p, NULL, "100.100.100.200", 80, D, "deny-list 100.64.0.0/10");
    CHECK(p, NULL, "fd00::1", 80, A, "allow fd00::/8");
    CHECK(p, NULL, "fd00:ec2::254", 80, D, "deny-list fc00::/7");
    CHECK(p, NULL, "10.9.9.9", 8000, A, "allow 0.0.0.0/0:8000");
    sbx_policy_free(p);

    p = mk(&(struct sbx_policy_opts){
        .def = SBX_DEFAULT_DENY,
        .allow = RULES("169.254.169.254:80", "fd00:ec2::254", "[fd00:ec2::254]/128:443"),
        .allowed_cidrs = "100.100.100.200/32"});
    CHECK(p, NULL, "169.254.169.254", 80, A, "allow 169.254.169.254:80");
    CHECK(p, NULL, "169.254.169.254", 81, D, "deny-list 169.254.0.0/16");
    CHECK(p, NULL, "::ffff:169.254.169.254", 80, A,
          "allow 169.254.169.254:80 (embedded in ::ffff:169.254.169.254)");
    CHECK(p, NULL, "fd00:ec2::254", 22, A, "allow fd00:ec2::254");
    CHECK(p, NULL, "100.100.100.200", 22, A, "allowed cidr 100.100.100.200/32");
    sbx_policy_free(p);
}

/* --- allow rules -------------------------------------------------------- */

static void default_allow_and_deny(void **state)
{
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_ALLOW});
    CHECK(p, NULL, "203.0.113.10", 443, A, "default allow");
    CHECK(p, "example.com", "203.0.113.10", 1, A, "default allow");
    CHECK(p, NULL, "203.0.113.10", 65535, A, "default allow");
    sbx_policy_free(p);
    p = mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_DENY});
    CHECK(p, NULL, "203.0.113.10", 443, D, "default deny");
    CHECK(p, "example.com", "203.0.113.10", 443, D, "default deny");
    CHECK(p, NULL, "2001:db8::1", 443, D, "default deny");
    sbx_policy_free(p);
}

static void domain_exact_and_suffix(void **state)
{
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){
        .def = SBX_DEFAULT_DENY, .allow = RULES("api.example.com", "*.Example.ORG.")});
    CHECK(p, "api.example.com", "203.0.113.10", 443, A, "allow api.example.com");
    CHECK(p, "API.Example.COM.", "203.0.113.10", 443, A, "allow api.example.com");
    CHECK(p, "api.example.com", "2001:db8::1", 80, A, "allow api.example.com");
    CHECK(p, "www.api.example.com", "203.0.113.10", 443, D, "default deny");
    CHECK(p, "example.com", "203.0.113.10", 443, D, "default deny");
    CHECK(p, "xapi.example.com", "203.0.113.10", 443, D, "default deny");
    CHECK(p, "api.example.com.evil", "203.0.113.10", 443, D, "default deny");
    CHECK(p, "example.org", "203.0.113.10", 443, D, "default deny");
    CHECK(p, "example.org.", "203.0.113.10", 443, D, "default deny");
    CHECK(p, "a.example.org", "203.0.113.10", 443, A, "allow *.example.org");
    CHECK(p, "A.B.EXAMPLE.ORG.", "203.0.113.10", 443, A, "allow *.example.org");
    CHECK(p, "badexample.org", "203.0.113.10", 443, D, "default deny");
    CHECK(p, "example.org.a", "203.0.113.10", 443, D, "default deny");
    /* Domain rules need the name. */
    CHECK(p, NULL, "203.0.113.10", 443, D, "default deny");
    CHECK(p, "", "203.0.113.10", 443, D, "default deny");
    sbx_policy_free(p);
}

static void domain_rule_with_port(void **state)
{
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){
        .def = SBX_DEFAULT_DENY,
        .allow = RULES("api.example.com:443", "*.example.net:8443", "api.example.com:8080")});
    CHECK(p, "api.example.com", "203.0.113.10", 443, A, "allow api.example.com:443");
    CHECK(p, "api.example.com", "203.0.113.10", 8080, A, "allow api.example.com:8080");
    CHECK(p, "api.example.com", "203.0.113.10", 80, D, "default deny");
    CHECK(p, "x.example.net", "203.0.113.10", 8443, A, "allow *.example.net:8443");
    CHECK(p, "x.example.net", "203.0.113.10", 443, D, "default deny");
    CHECK(p, "example.net", "203.0.113.10", 8443, D, "default deny");
    sbx_policy_free(p);
}

static void cidr_and_port_rules(void **state)
{
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){
        .def = SBX_DEFAULT_DENY,
        .allow = RULES("203.0.113.0/24:443", ":8080", "198.51.100.9", "[2001:db8::]/32:443",
                       "[2001:db8:1::1]:80", "2001:db8:2::/48")});
    CHECK(p, NULL, "203.0.113.10", 443, A, "allow 203.0.113.0/24:443");
    CHECK(p, "any.example.com", "203.0.113.255", 443, A, "allow 203.0.113.0/24:443");
    CHECK(p, NULL, "203.0.113.10", 80, D, "default deny");
    CHECK(p, NULL, "203.0.114.1", 443, D, "default deny");
    CHECK(p, NULL, "198.51.100.1", 8080, A, "allow :8080");
    CHECK(p, "x.example.com", "2001:db8:9::1", 8080, A, "allow :8080");
    CHECK(p, NULL, "198.51.100.1", 443, D, "default deny");
    CHECK(p, NULL, "198.51.100.9", 1, A, "allow 198.51.100.9");
    CHECK(p, NULL, "198.51.100.10", 1, D, "default deny");
    /* A port rule opens no deny-listed address. */
    CHECK(p, NULL, "10.0.0.1", 8080, D, "deny-list 10.0.0.0/8");
    CHECK(p, NULL, "2001:db8::1", 443, A, "allow [2001:db8::]/32:443");
    CHECK(p, NULL, "2001:db8:1::1", 80, A, "allow [2001:db8:1::1]:80");
    CHECK(p, NULL, "2001:db8:2:ffff::1", 22, A, "allow 2001:db8:2::/48");
    CHECK(p, NULL, "2001:db9::1", 443, D, "default deny");
    sbx_policy_free(p);
}

static void rule_text_canonical(void **state)
{
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){
        .def = SBX_DEFAULT_DENY,
        .allow = RULES("API.Example.COM.:443", "10.1.2.5/24", "[2001:DB8::]/32:443", "[::1]:80",
                       "203.0.113.7/32", ":00080", "under_score.example.com")});
    CHECK(p, "api.example.com", "203.0.113.10", 443, A, "allow api.example.com:443");
    CHECK(p, NULL, "10.1.2.200", 22, A, "allow 10.1.2.0/24");
    CHECK(p, NULL, "2001:db8::1", 443, A, "allow [2001:db8::]/32:443");
    CHECK(p, NULL, "::1", 80, A, "allow [::1]:80");
    CHECK(p, NULL, "203.0.113.7", 22, A, "allow 203.0.113.7/32");
    CHECK(p, NULL, "203.0.113.8", 80, A, "allow :80");
    CHECK(p, "under_score.example.com", "203.0.113.8", 22, A, "allow under_score.example.com");
    sbx_policy_free(p);
}

/* --- precedence --------------------------------------------------------- */

static void internal_targets_first(void **state)
{
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){
        .def = SBX_DEFAULT_DENY,
        .deny = RULES("10.0.0.7", ":8080", "*.internal"),
        .allowed_internal_targets = "10.0.0.7:8080,db.internal:5432, [fd00::7]:443",
        .blocked_cidrs = "10.0.0.0/24"});
    CHECK(p, NULL, "10.0.0.7", 8080, A, "allowed internal target 10.0.0.7:8080");
    CHECK(p, NULL, "::ffff:10.0.0.7", 8080, A,
          "allowed internal target 10.0.0.7:8080 (embedded in ::ffff:10.0.0.7)");
    CHECK(p, NULL, "10.0.0.7", 8081, D, "deny 10.0.0.7");
    CHECK(p, NULL, "10.0.0.8", 8080, D, "deny :8080");
    CHECK(p, NULL, "10.0.0.8", 22, D, "blocked cidr 10.0.0.0/24");
    CHECK(p, "db.internal", "10.0.0.9", 5432, A, "allowed internal target db.internal:5432");
    CHECK(p, "DB.Internal.", "10.1.0.9", 5432, A, "allowed internal target db.internal:5432");
    CHECK(p, "db.internal", "10.0.0.9", 5433, D, "deny *.internal");
    CHECK(p, NULL, "10.0.0.9", 5432, D, "blocked cidr 10.0.0.0/24");
    CHECK(p, "other.internal", "10.0.0.9", 5432, D, "deny *.internal");
    CHECK(p, NULL, "fd00::7", 443, A, "allowed internal target [fd00::7]:443");
    CHECK(p, NULL, "fd00::7", 80, D, "deny-list fc00::/7");
    sbx_policy_free(p);
}

static void allowed_cidrs_and_ports(void **state)
{
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){
        .def = SBX_DEFAULT_DENY, .deny = RULES("10.1.2.3"), .allowed_cidrs = "10.1.0.0/16"});
    CHECK(p, NULL, "10.1.2.3", 22, A, "allowed cidr 10.1.0.0/16");
    CHECK(p, NULL, "10.1.255.255", 65535, A, "allowed cidr 10.1.0.0/16");
    CHECK(p, NULL, "10.2.0.1", 22, D, "deny-list 10.0.0.0/8");
    sbx_policy_free(p);

    p = mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_ALLOW,
                                     .allowed_cidrs = "10.1.0.0/16, fd00:1::/32",
                                     .allowed_ports = "5432, 6379"});
    CHECK(p, NULL, "10.1.2.3", 5432, A, "allowed cidr 10.1.0.0/16");
    CHECK(p, NULL, "10.1.2.3", 6379, A, "allowed cidr 10.1.0.0/16");
    CHECK(p, NULL, "10.1.2.3", 22, D, "deny-list 10.0.0.0/8");
    CHECK(p, NULL, "fd00:1::5", 5432, A, "allowed cidr fd00:1::/32");
    CHECK(p, NULL, "fd00:2::5", 5432, D, "deny-list fc00::/7");
    /* The ports qualify the CIDRs; they open nothing else. */
    CHECK(p, NULL, "10.2.0.1", 5432, D, "deny-list 10.0.0.0/8");
    CHECK(p, NULL, "203.0.113.10", 22, A, "default allow");
    sbx_policy_free(p);

    p = mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_DENY, .allowed_ports = "443"});
    CHECK(p, NULL, "203.0.113.10", 443, D, "default deny");
    CHECK(p, NULL, "10.0.0.1", 443, D, "deny-list 10.0.0.0/8");
    sbx_policy_free(p);
}

static void domain_allow_never_opens_denylist(void **state)
{
    for (int def = SBX_DEFAULT_ALLOW; def <= SBX_DEFAULT_DENY; def++) {
        struct sbx_policy *p = mk(&(struct sbx_policy_opts){
            .def = (enum sbx_default)def,
            .allow = RULES("internal.example.com", "*.example.com:443", ":443")});
        CHECK(p, "internal.example.com", "10.0.0.1", 443, D, "deny-list 10.0.0.0/8");
        CHECK(p, "x.example.com", "10.0.0.1", 443, D, "deny-list 10.0.0.0/8");
        CHECK(p, "x.example.com", "169.254.169.254", 443, D, "deny-list 169.254.0.0/16");
        CHECK(p, "x.example.com", "::1", 443, D, "deny-list ::1/128");
        CHECK(p, "x.example.com", "64:ff9b::a9fe:a9fe", 443, D,
              "deny-list 169.254.0.0/16 (embedded in 64:ff9b::a9fe:a9fe)");
        CHECK(p, "internal.example.com", "203.0.113.10", 80, A, "allow internal.example.com");
        sbx_policy_free(p);
    }
}

static void explicit_cidr_allow_opens_denylist(void **state)
{
    struct sbx_policy *p =
        mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_ALLOW, .allow = RULES("10.1.2.0/24:5432")});
    CHECK(p, NULL, "10.1.2.3", 5432, A, "allow 10.1.2.0/24:5432");
    CHECK(p, "db.example.com", "10.1.2.3", 5432, A, "allow 10.1.2.0/24:5432");
    CHECK(p, NULL, "10.1.2.3", 5433, D, "deny-list 10.0.0.0/8");
    CHECK(p, NULL, "10.1.2.3", 22, D, "deny-list 10.0.0.0/8");
    CHECK(p, NULL, "10.1.3.1", 5432, D, "deny-list 10.0.0.0/8");
    CHECK(p, NULL, "203.0.113.10", 22, A, "default allow");
    sbx_policy_free(p);
}

static void deny_rules_beat_allow_rules(void **state)
{
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){
        .def = SBX_DEFAULT_DENY,
        .allow = RULES("203.0.113.0/24", "10.1.2.0/24", "*.example.com", "evil.com"),
        .deny = RULES("203.0.113.66", "10.1.2.9", "bad.example.com", "evil.com:25")});
    CHECK(p, NULL, "203.0.113.66", 443, D, "deny 203.0.113.66");
    CHECK(p, NULL, "203.0.113.10", 443, A, "allow 203.0.113.0/24");
    CHECK(p, NULL, "10.1.2.9", 443, D, "deny 10.1.2.9");
    CHECK(p, NULL, "10.1.2.8", 443, A, "allow 10.1.2.0/24");
    CHECK(p, "bad.example.com", "198.51.100.1", 443, D, "deny bad.example.com");
    CHECK(p, "good.example.com", "198.51.100.1", 443, A, "allow *.example.com");
    CHECK(p, "evil.com", "198.51.100.1", 25, D, "deny evil.com:25");
    CHECK(p, "evil.com", "198.51.100.1", 443, A, "allow evil.com");
    sbx_policy_free(p);

    p = mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_ALLOW,
                                     .deny = RULES("*.evil.com", ":25", "[2001:db8::]/32:22")});
    CHECK(p, "x.evil.com", "203.0.113.10", 443, D, "deny *.evil.com");
    CHECK(p, "X.EVIL.COM.", "203.0.113.10", 443, D, "deny *.evil.com");
    CHECK(p, "evil.com", "203.0.113.10", 443, A, "default allow");
    CHECK(p, NULL, "203.0.113.10", 443, A, "default allow");
    CHECK(p, NULL, "203.0.113.10", 25, D, "deny :25");
    CHECK(p, NULL, "2001:db8::1", 22, D, "deny [2001:db8::]/32:22");
    CHECK(p, NULL, "2001:db8::1", 23, A, "default allow");
    sbx_policy_free(p);
}

static void blocked_cidrs(void **state)
{
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){
        .def = SBX_DEFAULT_ALLOW,
        .allow = RULES("203.0.113.10", "2001:db8::1"),
        .blocked_cidrs = " 203.0.113.0/25 ,2001:db8::/32,[2001:db9::]/32"});
    CHECK(p, NULL, "203.0.113.10", 443, D, "blocked cidr 203.0.113.0/25");
    CHECK(p, NULL, "203.0.113.127", 443, D, "blocked cidr 203.0.113.0/25");
    CHECK(p, NULL, "203.0.113.128", 443, A, "default allow");
    CHECK(p, NULL, "2001:db8::1", 443, D, "blocked cidr 2001:db8::/32");
    CHECK(p, NULL, "2001:db9::1", 443, D, "blocked cidr 2001:db9::/32");
    CHECK(p, NULL, "2001:dba::1", 443, A, "default allow");
    CHECK(p, NULL, "::ffff:203.0.113.10", 443, D,
          "blocked cidr 203.0.113.0/25 (embedded in ::ffff:203.0.113.10)");
    sbx_policy_free(p);
}

/* --- names -------------------------------------------------------------- */

static void name_allowed_default_allow(void **state)
{
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){
        .def = SBX_DEFAULT_ALLOW,
        .allow = RULES("both.com"),
        .deny = RULES("*.evil.com", "bad.com:25", "both.com", "10.0.0.0/8", ":53")});
    NAME_OK(p, "example.com", true, "default allow");
    NAME_OK(p, "Example.COM.", true, "default allow");
    NAME_OK(p, "x.evil.com", false, "deny *.evil.com");
    NAME_OK(p, "a.b.EVIL.com.", false, "deny *.evil.com");
    NAME_OK(p, "evil.com", true, "default allow");
    NAME_OK(p, "bad.com", true, "default allow");
    NAME_OK(p, "both.com", false, "deny both.com");
    const char *invalid[] = {"", ".", "a..b", ".a", "a b", "a\tb", "a..", "caf\xc3\xa9.com", NULL};
    for (size_t i = 0; i < SBX_ARRAY_LEN(invalid); i++)
        NAME_OK(p, invalid[i], false, "invalid name");
    char long_name[300];
    memset(long_name, 'a', sizeof(long_name));
    for (size_t i = 50; i < 254; i += 50)
        long_name[i] = '.';
    long_name[254] = '\0';
    NAME_OK(p, long_name, false, "invalid name");
    long_name[253] = '\0';
    NAME_OK(p, long_name, true, "default allow");
    long_name[253] = '.';
    NAME_OK(p, long_name, true, "default allow");
    sbx_policy_free(p);
}

static void name_allowed_default_deny(void **state)
{
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_DENY});
    NAME_OK(p, "example.com", false, "default deny");
    sbx_policy_free(p);

    p = mk(&(struct sbx_policy_opts){
        .def = SBX_DEFAULT_DENY,
        .allow = RULES("203.0.113.0/24", "api.example.com:443", "*.example.org"),
        .deny = RULES("bad.example.org"),
        .allowed_internal_targets = "db.internal:5432",
        .allowed_cidrs = "10.0.0.0/8"});
    NAME_OK(p, "api.example.com", true, "allow api.example.com:443");
    NAME_OK(p, "API.example.com.", true, "allow api.example.com:443");
    NAME_OK(p, "www.api.example.com", false, "default deny");
    NAME_OK(p, "x.example.org", true, "allow *.example.org");
    NAME_OK(p, "example.org", false, "default deny");
    NAME_OK(p, "bad.example.org", false, "deny bad.example.org");
    NAME_OK(p, "db.internal", true, "allowed internal target db.internal:5432");
    NAME_OK(p, "other.internal", false, "default deny");
    /* Address rules open no name: resolving every name would be a DNS tunnel. */
    NAME_OK(p, "public.example.net", false, "default deny");
    sbx_policy_free(p);

    p = mk(&(struct sbx_policy_opts){
        .def = SBX_DEFAULT_DENY, .allow = RULES(":443"), .deny = RULES("*.evil.com")});
    NAME_OK(p, "anything.example.net", true, "allow :443");
    NAME_OK(p, "x.evil.com", false, "deny *.evil.com");
    sbx_policy_free(p);
}

/* A deny rule naming a static host wins over the entry. */
static void deny_rule_beats_static_host(void **state)
{
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_ALLOW,
                                                        .hosts = RULES("svc.test=203.0.113.10"),
                                                        .deny = RULES("svc.test")});
    struct sbx_decision d;
    assert_false(sbx_policy_name_allowed(p, "svc.test", &d));
    assert_string_equal(d.rule, "deny svc.test");
    sbx_policy_free(p);
    p = mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_ALLOW,
                                     .hosts = RULES("svc.test=203.0.113.10")});
    assert_true(sbx_policy_name_allowed(p, "svc.test", &d));
    sbx_policy_free(p);
}

static void static_hosts(void **state)
{
    const char *const *hosts =
        RULES("db.test=10.0.0.9", "Web.Test.=203.0.113.10", "v6.test=2001:db8::10",
              "dup.test=192.0.2.1", "dup.test=192.0.2.2", "loop_back=127.0.0.1");
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_ALLOW, .hosts = hosts});
    struct sbx_addr a;
    char buf[INET6_ADDRSTRLEN];
    assert_true(sbx_policy_static_host(p, "DB.TEST.", &a));
    assert_string_equal(sbx_addr_str(&a, buf, sizeof(buf)), "10.0.0.9");
    assert_true(sbx_policy_static_host(p, "web.test", &a));
    assert_string_equal(sbx_addr_str(&a, buf, sizeof(buf)), "203.0.113.10");
    assert_true(sbx_policy_static_host(p, "v6.test", &a));
    assert_string_equal(sbx_addr_str(&a, buf, sizeof(buf)), "2001:db8::10");
    assert_true(sbx_policy_static_host(p, "dup.test", &a));
    assert_string_equal(sbx_addr_str(&a, buf, sizeof(buf)), "192.0.2.2");
    assert_true(sbx_policy_static_host(p, "loop_back", NULL));
    assert_false(sbx_policy_static_host(p, "x.db.test", &a));
    assert_false(sbx_policy_static_host(p, "test", &a));
    assert_false(sbx_policy_static_host(p, "", &a));
    assert_false(sbx_policy_static_host(p, NULL, &a));
    NAME_OK(p, "db.test", false, "deny-list 10.0.0.0/8");
    NAME_OK(p, "web.test", true, "default allow");
    NAME_OK(p, "loop_back", false, "deny-list 127.0.0.0/8");
    sbx_policy_free(p);

    p = mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_DENY, .hosts = hosts});
    NAME_OK(p, "web.test", false, "default deny");
    assert_false(sbx_policy_static_host(p, "nothing.test", &a));
    sbx_policy_free(p);

    p = mk(&(struct sbx_policy_opts){
        .def = SBX_DEFAULT_DENY,
        .hosts = hosts,
        .allow = RULES("203.0.113.10:443", "10.0.0.9:5432", "v6.test"),
        .deny = RULES("dup.test", "loop_back:80", "web.test:25", "203.0.113.10:22"),
        .allowed_internal_targets = "loop_back:8080"});
    NAME_OK(p, "web.test", true, "allow 203.0.113.10:443");
    NAME_OK(p, "db.test", true, "allow 10.0.0.9:5432");
    NAME_OK(p, "v6.test", true, "allow v6.test");
    NAME_OK(p, "dup.test", false, "deny dup.test");
    NAME_OK(p, "loop_back", true, "allowed internal target loop_back:8080");
    sbx_policy_free(p);

    p = mk(&(struct sbx_policy_opts){
        .def = SBX_DEFAULT_ALLOW, .hosts = hosts, .allowed_internal_targets = "10.0.0.9:5432"});
    NAME_OK(p, "db.test", true, "allowed internal target 10.0.0.9:5432");
    sbx_policy_free(p);

    static const struct {
        const char *entry, *why;
    } bad[] = {
        {"noequals", "not name=address"},
        {"=1.2.3.4", "empty name"},
        {"a..b=1.2.3.4", "empty label"},
        {"x=1.2.3", "bad address"},
        {"x=", "bad address"},
        {"*.x=1.2.3.4", "no wildcard"},
        {"x=[::1]", "bad address"},
        {"x y=1.2.3.4", "bad character"},
        {"x=1.2.3.4 ", "bad address"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        char named[128];
        snprintf(named, sizeof(named), "host entry '%s'", bad[i].entry);
        REFUSED(&((struct sbx_policy_opts){.hosts = (const char *const[]){bad[i].entry, NULL}}),
                named, bad[i].why);
    }
}

/* --- refusals ----------------------------------------------------------- */

static void bad_rules_refused(void **state)
{
    char label64[80], name254[300], suffix253[300];
    memset(label64, 'a', 64);
    strcpy(label64 + 64, ".com");
    memset(name254, 'a', 254);
    for (size_t i = 60; i < 254; i += 60)
        name254[i] = '.';
    name254[254] = '\0';
    strcpy(suffix253, "*.");
    memcpy(suffix253 + 2, name254 + 1, 252); /* "*." and 252: one too many */
    suffix253[254] = '\0';
    static const struct {
        const char *rule, *why;
    } fixed[] = {
        {"", "empty rule"},
        {"x..y", "empty label"},
        {".example.com", "empty label"},
        {"example.com..", "empty label"},
        {"exa mple.com", "bad character"},
        {"exa$mple.com", "bad character"},
        {"ex\xc3\xa4mple.com", "bad character"},
        {"-a.com", "starts with '-'"},
        {"a-.com", "ends with '-'"},
        {"*.", "empty name after '*.'"},
        {"*", "only allowed as a leading '*.'"},
        {"*example.com", "only allowed as a leading '*.'"},
        {"a.*.com", "only allowed as a leading '*.'"},
        {"*.*.com", "only allowed as a leading '*.'"},
        {"**.com", "only allowed as a leading '*.'"},
        {"example.com*", "only allowed as a leading '*.'"},
        {"example.123", "numeric top-level label"},
        {"10.0.0.0/33", "prefix out of range (0-32)"},
        {"10.0.0.0/", "bad prefix"},
        {"10.0.0.0/-1", "bad prefix"},
        {"10.0.0.0/8/8", "bad prefix"},
        {"10.0.0.0/1000", "bad prefix"},
        {"[2001:db8::]/129", "prefix out of range (0-128)"},
        {"2001:db8::/129", "prefix out of range (0-128)"},
        {"example.com:0", "port out of range"},
        {":0", "port out of range"},
        {":65536", "port out of range"},
        {"10.0.0.1:99999", "port out of range"},
        {":", "missing port"},
        {"example.com:", "missing port"},
        {"example.com:http", "bad port"},
        {":+80", "bad port"},
        {": 80", "bad port"},
        {":123456", "bad port"},
        {"10.0.0.256", "bad IPv4 address"},
        {"10.1.2", "bad IPv4 address"},
        {"1.2.3.4.5", "bad IPv4 address"},
        {"example.com/24", "bad IPv4 address"},
        {"/24", "bad IPv4 address"},
        {"[::1", "missing ']'"},
        {"[::1]x", "unexpected text after ']'"},
        {"[10.0.0.1]:80", "bad IPv6 address"},
        {"[]", "bad IPv6 address"},
        {"[::1]:", "missing port"},
        {"[::1]:0", "port out of range"},
        {"[::1]/64:", "missing port"},
        {"api.example.com:443:1", "bad IPv6 address"},
        {"fe80::1%eth0", "bad IPv6 address"},
        {"2001:db8::1:99999", "bad IPv6 address"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(fixed) + 3; i++) {
        const char *rule = i < SBX_ARRAY_LEN(fixed)        ? fixed[i].rule
                           : i == SBX_ARRAY_LEN(fixed)     ? label64
                           : i == SBX_ARRAY_LEN(fixed) + 1 ? name254
                                                           : suffix253;
        const char *why = i < SBX_ARRAY_LEN(fixed)    ? fixed[i].why
                          : i == SBX_ARRAY_LEN(fixed) ? "label longer than 63 characters"
                                                      : "name longer than 253 characters";
        char named[128];
        snprintf(named, sizeof(named), "rule '%.40s", rule);
        const char *const rules[] = {rule, NULL};
        const char *const ok[] = {"example.com", rule, NULL};
        REFUSED(&((struct sbx_policy_opts){.allow = rules}), named, why);
        REFUSED(&((struct sbx_policy_opts){.deny = rules}), named, why);
        REFUSED(&((struct sbx_policy_opts){.allow = ok}), named, why);
    }
    /* The longest names that are fine. */
    name254[253] = '\0';
    suffix253[253] = '\0';
    label64[0] = '.';
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){
        .allow = (const char *const[]){name254, suffix253, label64 + 1, NULL}});
    sbx_policy_free(p);

    char too_long[400];
    memset(too_long, 'a', sizeof(too_long) - 1);
    too_long[sizeof(too_long) - 1] = '\0';
    REFUSED(&((struct sbx_policy_opts){.allow = (const char *const[]){too_long, NULL}}),
            "rule 'aaa", "too long");
    REFUSED(&((struct sbx_policy_opts){.def = (enum sbx_default)7}), "bad options");
    assert_null(sbx_policy_new(NULL, NULL));
}

static void claw_lists(void **state)
{
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){
        .def = SBX_DEFAULT_DENY, .allowed_cidrs = "10.0.0.0/8, 192.168.1.0/24"});
    CHECK(p, NULL, "10.2.3.4", 22, A, "allowed cidr 10.0.0.0/8");
    CHECK(p, NULL, "192.168.1.5", 22, A, "allowed cidr 192.168.1.0/24");
    CHECK(p, NULL, "192.168.2.5", 22, D, "deny-list 192.168.0.0/16");
    sbx_policy_free(p);

    /* Empty strings and empty entries hold nothing. */
    p = mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_ALLOW,
                                     .allowed_cidrs = "",
                                     .allowed_ports = " , ",
                                     .allowed_internal_targets = " ",
                                     .blocked_cidrs = ",,"});
    CHECK(p, NULL, "10.0.0.1", 22, D, "deny-list 10.0.0.0/8");
    CHECK(p, NULL, "203.0.113.10", 22, A, "default allow");
    sbx_policy_free(p);

    p = mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_DENY,
                                     .allowed_cidrs = " ,\t10.1.0.0/16 ,, [fd00::]/16,",
                                     .allowed_ports = "5432,\t6379 ,"});
    CHECK(p, NULL, "10.1.0.1", 6379, A, "allowed cidr 10.1.0.0/16");
    CHECK(p, NULL, "fd00::1", 5432, A, "allowed cidr fd00::/16");
    CHECK(p, NULL, "fd00::1", 22, D, "deny-list fc00::/7");
    sbx_policy_free(p);

    static const struct {
        struct sbx_policy_opts o;
        const char *named, *why;
    } bad[] = {
        {{.allowed_cidrs = "10.0.0.0/8, bogus"},
         "CLAW_SANDBOX_ALLOWED_CIDRS entry 'bogus'",
         "not a CIDR or address"},
        {{.allowed_cidrs = "10.0.0.0/8:80"},
         "CLAW_SANDBOX_ALLOWED_CIDRS entry '10.0.0.0/8:80'",
         "not a CIDR or address"},
        {{.allowed_cidrs = "10.0.0.0/40"},
         "CLAW_SANDBOX_ALLOWED_CIDRS entry '10.0.0.0/40'",
         "prefix out of range"},
        {{.allowed_cidrs = ":443"}, "CLAW_SANDBOX_ALLOWED_CIDRS entry ':443'", "not a CIDR"},
        {{.allowed_cidrs = "10.0.0.0 /8"}, "CLAW_SANDBOX_ALLOWED_CIDRS entry '10.0.0.0 /8'", "bad"},
        {{.allowed_ports = "443, 0"}, "CLAW_SANDBOX_ALLOWED_PORTS entry '0'", "port out of range"},
        {{.allowed_ports = "443,abc"}, "CLAW_SANDBOX_ALLOWED_PORTS entry 'abc'", "bad port"},
        {{.allowed_ports = "8000-8100"},
         "CLAW_SANDBOX_ALLOWED_PORTS entry '8000-8100'",
         "bad port"},
        {{.allowed_ports = "65536"}, "CLAW_SANDBOX_ALLOWED_PORTS entry '65536'", "out of range"},
        {{.allowed_internal_targets = "db:5432, 10.0.0.7"},
         "CLAW_ALLOWED_INTERNAL_TARGETS entry '10.0.0.7'",
         "not host:port"},
        {{.allowed_internal_targets = "db"},
         "CLAW_ALLOWED_INTERNAL_TARGETS entry 'db'",
         "not host:port"},
        {{.allowed_internal_targets = "*.x.com:80"},
         "CLAW_ALLOWED_INTERNAL_TARGETS entry '*.x.com:80'",
         "not host:port"},
        {{.allowed_internal_targets = "10.0.0.0/24:80"},
         "CLAW_ALLOWED_INTERNAL_TARGETS entry '10.0.0.0/24:80'",
         "not host:port"},
        {{.allowed_internal_targets = ":80"},
         "CLAW_ALLOWED_INTERNAL_TARGETS entry ':80'",
         "not host:port"},
        {{.allowed_internal_targets = "db:0"},
         "CLAW_ALLOWED_INTERNAL_TARGETS entry 'db:0'",
         "port out of range"},
        {{.allowed_internal_targets = "::1:80"},
         "CLAW_ALLOWED_INTERNAL_TARGETS entry '::1:80'",
         "not host:port"},
        {{.allowed_internal_targets = "a..b:80"},
         "CLAW_ALLOWED_INTERNAL_TARGETS entry 'a..b:80'",
         "empty label"},
        {{.blocked_cidrs = "1.2.3.4/33"},
         "CLAW_SANDBOX_BLOCKED_CIDRS entry '1.2.3.4/33'",
         "prefix out of range"},
        {{.blocked_cidrs = "example.com"},
         "CLAW_SANDBOX_BLOCKED_CIDRS entry 'example.com'",
         "not a CIDR or address"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++)
        REFUSED(&bad[i].o, bad[i].named, bad[i].why);

    char big[400];
    memset(big, '1', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    REFUSED(&((struct sbx_policy_opts){.blocked_cidrs = big}), "CLAW_SANDBOX_BLOCKED_CIDRS entry",
            "too long");
}

/* --- odd inputs to a check ---------------------------------------------- */

static void check_odd_inputs(void **state)
{
    struct sbx_policy *p =
        mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_ALLOW, .allow = RULES("10.1.2.0/24")});
    struct sbx_decision d;
    struct sbx_addr a = addr("203.0.113.10");
    sbx_policy_check(p, NULL, &a, 0, &d);
    assert_int_equal(d.verdict, D);
    assert_string_equal(d.rule, "port 0");
    a = addr("10.1.2.3");
    sbx_policy_check(p, NULL, &a, 0, &d);
    assert_int_equal(d.verdict, D);
    sbx_policy_check(p, NULL, NULL, 443, &d);
    assert_int_equal(d.verdict, D);
    assert_string_equal(d.rule, "no address");
    struct sbx_addr none = {.family = AF_UNIX};
    sbx_policy_check(p, NULL, &none, 443, &d);
    assert_int_equal(d.verdict, D);
    assert_string_equal(d.rule, "no address");
    CHECK(p, "a b.example.com", "203.0.113.10", 443, D, "invalid name");
    CHECK(p, "a..example.com", "203.0.113.10", 443, D, "invalid name");
    CHECK(p, ".", "203.0.113.10", 443, D, "invalid name");
    CHECK(p, "example.com.", "203.0.113.10", 443, A, "default allow");
    sbx_policy_free(p);
    sbx_policy_free(NULL);
}

/* The decision string always fits, however long the rule. */
static void long_rule_text_truncated(void **state)
{
    char name[254];
    memset(name, 'a', 253);
    for (size_t i = 50; i < 253; i += 50)
        name[i] = '.';
    name[253] = '\0';
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){
        .def = SBX_DEFAULT_DENY, .allow = (const char *const[]){name, NULL}});
    struct sbx_decision d;
    struct sbx_addr a = addr("203.0.113.10");
    sbx_policy_check(p, name, &a, 443, &d);
    assert_int_equal(d.verdict, A);
    assert_int_equal(strlen(d.rule), sizeof(d.rule) - 1);
    assert_memory_equal(d.rule, "allow aaaa", 10);
    sbx_policy_free(p);
}

/* The address part for the sandbox's nftables rules: what is refused at
 * connect, what is let through to the listener. */
static void nft_sets(void **state)
{
    char *t = NULL;
    struct sbx_policy *p =
        mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_ALLOW,
                                     .allow = RULES("192.168.7.0/24:443", "api.test"),
                                     .deny = RULES("203.0.113.0/24", "198.51.100.9:22"),
                                     .allowed_cidrs = "127.0.0.1/32",
                                     .allowed_internal_targets = "10.1.2.3:5432",
                                     .blocked_cidrs = "100.127.0.0/16"});
    assert_int_equal(sbx_policy_nft_sets(p, &t, NULL), 0);
    assert_non_null(strstr(t, "set deny4 {"));
    assert_non_null(strstr(t, "set open6 {"));
    const char *deny4 = strstr(t, "set deny4"), *open4 = strstr(t, "set open4");
    const char *deny6 = strstr(t, "set deny6");
    /* refused: the deny-list, metadata, blocked CIDRs, address deny rules on every port */
    const char *want_deny[] = {"10.0.0.0/8", "169.254.169.254/32", "100.127.0.0/16",
                               "203.0.113.0/24"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(want_deny); i++) {
        const char *at = strstr(deny4, want_deny[i]);
        assert_true(at && at < deny6);
    }
    assert_non_null(strstr(deny6, "fc00::/7"));
    assert_null(strstr(t, "198.51.100.9")); /* a deny rule on one port: the listener's */
    /* let through: allowed CIDRs, address allow rules, internal targets by address */
    assert_non_null(strstr(open4, "127.0.0.1/32"));
    assert_non_null(strstr(open4, "192.168.7.0/24"));
    assert_non_null(strstr(open4, "10.1.2.3/32"));
    free(t);
    sbx_policy_free(p);

    /* A target by a name only DNS resolves may open any private address:
     * only the protected ones are refused at connect then. */
    p = mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_ALLOW,
                                     .allowed_internal_targets = "db.internal:5432"});
    assert_int_equal(sbx_policy_nft_sets(p, &t, NULL), 0);
    assert_null(strstr(t, "10.0.0.0/8"));
    assert_non_null(strstr(t, "169.254.169.254/32"));
    free(t);
    sbx_policy_free(p);
    /* ... unless it is a static host: its address is known */
    p = mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_ALLOW,
                                     .allowed_internal_targets = "db.internal:5432",
                                     .hosts = RULES("db.internal=10.9.9.9")});
    assert_int_equal(sbx_policy_nft_sets(p, &t, NULL), 0);
    assert_non_null(strstr(t, "10.0.0.0/8"));
    assert_non_null(strstr(strstr(t, "set open4"), "10.9.9.9/32"));
    free(t);
    sbx_policy_free(p);
}

/* Whether some port of an address is opened (our DNS's loopback aliases). */
static void opens_some_port(void **state)
{
    struct sbx_addr lo;
    assert_int_equal(sbx_addr_parse("127.0.0.1", &lo, NULL), 0);
    struct sbx_policy *p = mk(&(struct sbx_policy_opts){
        .def = SBX_DEFAULT_ALLOW, .allowed_cidrs = "127.0.0.1/32", .allowed_ports = "8080"});
    assert_true(sbx_policy_opens_some_port(p, "svc", &lo));
    sbx_policy_free(p);
    p = mk(&(struct sbx_policy_opts){.def = SBX_DEFAULT_ALLOW});
    assert_false(sbx_policy_opens_some_port(p, "svc", &lo));
    assert_false(sbx_policy_opens_some_port(p, "bad name!", &lo));
    sbx_policy_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(addr_parse_and_str),
        cmocka_unit_test(denylist_v4),
        cmocka_unit_test(denylist_v6),
        cmocka_unit_test(public_and_test_nets_allowed),
        cmocka_unit_test(embedded_ipv4),
        cmocka_unit_test(own_addresses),
        cmocka_unit_test(metadata_needs_exact_rule),
        cmocka_unit_test(default_allow_and_deny),
        cmocka_unit_test(domain_exact_and_suffix),
        cmocka_unit_test(domain_rule_with_port),
        cmocka_unit_test(cidr_and_port_rules),
        cmocka_unit_test(rule_text_canonical),
        cmocka_unit_test(internal_targets_first),
        cmocka_unit_test(allowed_cidrs_and_ports),
        cmocka_unit_test(domain_allow_never_opens_denylist),
        cmocka_unit_test(explicit_cidr_allow_opens_denylist),
        cmocka_unit_test(deny_rules_beat_allow_rules),
        cmocka_unit_test(blocked_cidrs),
        cmocka_unit_test(name_allowed_default_allow),
        cmocka_unit_test(name_allowed_default_deny),
        cmocka_unit_test(static_hosts),
        cmocka_unit_test(deny_rule_beats_static_host),
        cmocka_unit_test(bad_rules_refused),
        cmocka_unit_test(claw_lists),
        cmocka_unit_test(check_odd_inputs),
        cmocka_unit_test(long_rule_text_truncated),
        cmocka_unit_test(nft_sets),
        cmocka_unit_test(opens_some_port),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
