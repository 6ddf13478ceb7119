/* libFuzzer target: the sandbox's DNS endpoint, driven for real. Each input
 * is one datagram sent from a client socket to the endpoint on 127.0.0.1,
 * through the short-packet socket filter the endpoint attaches (libevent
 * 2.1.12 crashes on what it drops); the loop runs until the reply is in (or
 * a few idle rounds). Beyond "no crash", every reply is held to the
 * contract: a whole header, the query's ID, QR set, only A/AAAA records, and
 * those only for names the policy allows, with the addresses we gave for
 * them. A stub upstream on loopback answers the allowed names without a
 * static host at once (a closed port would leave each such lookup to a 4 s
 * timeout and its reply to a later input), and it asserts that no refused
 * name ever reaches it. Nothing leaves this machine. */
#include <arpa/inet.h>
#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/dns_struct.h>
#include <event2/event.h>

#include "net/dns.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define STATIC_A "203.0.113.10"    /* allowed.test */
#define STATIC_AAAA "2001:db8::20" /* x.ok.test */
/* The stub answers every other *.ok.test with this many addresses of the
 * family asked for: enough that long names meet the endpoint's 512-byte cap. */
#define STUB_ADDRS 16
/* Idle loop rounds before we stop waiting for a reply: the upstream path
 * needs a handful, all on loopback. */
#define ROUNDS 16

static struct {
    struct event_base *base;
    struct sbx_policy *policy;
    struct sbx_resolver *resolver;
    struct sbx_dns_answers *answers;
    struct sbx_dns_server *dns;
    struct evdns_server_port *stub;
    int client;
} g;

/* ---- the oracle: what the policy below allows, written out again ---- */

static void lower(const char *name, char *out, size_t len)
{
    size_t n = 0;
    for (; name[n] && n < len - 1; n++)
        out[n] = name[n] >= 'A' && name[n] <= 'Z' ? (char)(name[n] + 32) : name[n];
    if (n > 0 && out[n - 1] == '.')
        n--;
    out[n] = '\0';
}

/* "allowed.test" and anything below "ok.test", for a well-formed name. */
static bool oracle_allowed(const char *name)
{
    char l[256];
    lower(name, l, sizeof(l));
    if (!sbx_dns_name_valid(l))
        return false;
    size_t n = strlen(l);
    return strcmp(l, "allowed.test") == 0 || (n > 8 && strcmp(l + n - 8, ".ok.test") == 0);
}

static void stub_addr(int type, int k, unsigned char *out)
{
    char text[64];
    if (type == EVDNS_TYPE_A)
        snprintf(text, sizeof(text), "198.51.100.%d", k + 1);
    else
        snprintf(text, sizeof(text), "2001:db8:1::%x", k + 1);
    inet_pton(type == EVDNS_TYPE_A ? AF_INET : AF_INET6, text, out);
}

/* May name carry this record? Only an allowed name, and only the address it
 * has: its static host, else one the stub gave. */
static bool oracle_record(const char *name, int type, const unsigned char *rdata, size_t rdlen)
{
    char l[256];
    lower(name, l, sizeof(l));
    if (!oracle_allowed(l))
        return false;
    if (type != EVDNS_TYPE_A && type != EVDNS_TYPE_AAAA)
        return false;
    if (rdlen != (type == EVDNS_TYPE_A ? 4u : 16u))
        return false;
    unsigned char want[16];
    if (strcmp(l, "allowed.test") == 0 || strcmp(l, "x.ok.test") == 0) {
        bool v4 = strcmp(l, "allowed.test") == 0;
        if (v4 != (type == EVDNS_TYPE_A))
            return false; /* a static host has one family only */
        inet_pton(v4 ? AF_INET : AF_INET6, v4 ? STATIC_A : STATIC_AAAA, want);
        return memcmp(rdata, want, rdlen) == 0;
    }
    for (int k = 0; k < STUB_ADDRS; k++) {
        stub_addr(type, k, want);
        if (memcmp(rdata, want, rdlen) == 0)
            return true;
    }
    return false;
}

/* ---- the stub upstream ---- */

static void stub_cb(struct evdns_server_request *req, void *arg)
{
    for (int i = 0; i < req->nquestions; i++) {
        const struct evdns_server_question *q = req->questions[i];
        /* Nothing of a refused question leaves the daemon. */
        assert(oracle_allowed(q->name));
        assert(q->type == EVDNS_TYPE_A || q->type == EVDNS_TYPE_AAAA);
        char l[256];
        lower(q->name, l, sizeof(l));
        /* Static hosts are answered without asking. */
        assert(strcmp(l, "allowed.test") != 0 && strcmp(l, "x.ok.test") != 0);
        for (int k = 0; k < STUB_ADDRS; k++) {
            unsigned char a[16];
            stub_addr(q->type, k, a);
            if (q->type == EVDNS_TYPE_A)
                evdns_server_request_add_a_reply(req, q->name, 1, a, 60);
            else
                evdns_server_request_add_aaaa_reply(req, q->name, 1, a, 60);
        }
    }
    if (evdns_server_request_respond(req, DNS_ERR_NONE) < 0)
        evdns_server_request_drop(req);
}

/* ---- setup, once ---- */

/* Setup must work; unlike the checks, it is no assert (NDEBUG would drop it). */
static void must(bool ok, const char *what)
{
    if (!ok) {
        perror(what);
        abort();
    }
}

static int udp_bound(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    must(fd > 0, "socket"); /* evdns closes only fds > 0 */
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr = {htonl(INADDR_LOOPBACK)}};
    must(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "bind");
    socklen_t len = sizeof(sa);
    must(getsockname(fd, (struct sockaddr *)&sa, &len) == 0, "getsockname");
    *port = ntohs(sa.sin_port);
    return fd;
}

/* Every question gets one flow; an allowed one only for an allowed name. */
static void on_flow(void *ud, const struct sbx_flow *f)
{
    assert(f->via == SBX_VIA_DNS);
    if (f->verdict == SBX_VERDICT_ALLOW)
        assert(oracle_allowed(f->name));
    assert(memchr(f->name, 0, sizeof(f->name)) != NULL);
}

static void quiet(int is_warn, const char *msg) {}

static void setup(void)
{
    evdns_set_log_fn(quiet);
    g.base = event_base_new();
    must(g.base, "event base");

    uint16_t stub_port;
    int stub_fd = udp_bound(&stub_port);
    g.stub = evdns_add_server_port_with_base(g.base, stub_fd, 0, stub_cb, NULL);
    must(g.stub, "stub upstream");

    static const char *const allow[] = {"allowed.test", "*.ok.test", NULL};
    static const char *const hosts[] = {"allowed.test=" STATIC_A, "x.ok.test=" STATIC_AAAA, NULL};
    struct sbx_policy_opts o = {.def = SBX_DEFAULT_DENY, .allow = allow, .hosts = hosts};
    sbx_err err = {0};
    g.policy = sbx_policy_new(&o, &err);
    must(g.policy, err.msg);
    char ns[32];
    snprintf(ns, sizeof(ns), "127.0.0.1:%u", stub_port);
    const char *upstream[] = {ns, NULL};
    g.resolver = sbx_resolver_new(g.base, g.policy, upstream, &err);
    must(g.resolver, err.msg);
    g.answers = sbx_dns_answers_new(64);
    must(g.answers, "answers");

    uint16_t dns_port;
    int dns_fd = udp_bound(&dns_port);
    g.dns =
        sbx_dns_server_new(g.base, dns_fd, g.policy, g.resolver, g.answers, on_flow, NULL, &err);
    must(g.dns, err.msg);

    g.client = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    must(g.client >= 0, "socket");
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = htons(dns_port), .sin_addr = {htonl(INADDR_LOOPBACK)}};
    must(connect(g.client, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect");
}

/* ---- the reply ---- */

static uint16_t get16(const unsigned char *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

/* A name at *off into out (dotted, no trailing dot); false when malformed.
 * Compression pointers must point backwards, so this ends. */
static bool read_name(const unsigned char *m, size_t len, size_t *off, char *out, size_t cap)
{
    size_t pos = *off, n = 0;
    bool jumped = false;
    for (;;) {
        if (pos >= len)
            return false;
        unsigned char l = m[pos];
        if ((l & 0xc0) == 0xc0) {
            if (pos + 1 >= len)
                return false;
            size_t to = (size_t)(l & 0x3f) << 8 | m[pos + 1];
            if (to >= pos)
                return false;
            if (!jumped)
                *off = pos + 2;
            jumped = true;
            pos = to;
            continue;
        }
        if (l & 0xc0)
            return false;
        pos++;
        if (l == 0)
            break;
        if (pos + l > len || n + l + 2 > cap)
            return false;
        /* Such a label would read as another name than the one answered. */
        if (memchr(m + pos, '.', l) || memchr(m + pos, 0, l))
            return false;
        if (n)
            out[n++] = '.';
        memcpy(out + n, m + pos, l);
        n += l;
        pos += l;
    }
    if (!jumped)
        *off = pos;
    out[n] = '\0';
    return true;
}

/* The contract of every reply; id < 0: a reply left over from an earlier
 * input, whose ID we no longer know. */
static void check_reply(const unsigned char *m, size_t len, int id)
{
    assert(len >= 12);
    if (id >= 0)
        assert(get16(m) == id);
    assert(m[2] & 0x80); /* QR */
    uint16_t qd = get16(m + 4), an = get16(m + 6);
    size_t off = 12;
    char name[1024];
    for (unsigned i = 0; i < qd; i++) {
        /* A refusal echoes whatever evdns parsed (cut at 512 bytes, TC);
         * answers come only with well-formed questions, which read back. */
        if (!read_name(m, len, &off, name, sizeof(name)) || off + 4 > len) {
            assert(an == 0);
            return;
        }
        off += 4;
    }
    /* The endpoint sends fewer addresses rather than a truncated answer
     * (a client would retry over TCP, which it does not serve). */
    assert(an == 0 || !(m[2] & 0x02));
    for (unsigned i = 0; i < an; i++) {
        bool ok = read_name(m, len, &off, name, sizeof(name)) && off + 10 <= len;
        assert(ok);
        int type = get16(m + off), cls = get16(m + off + 2);
        size_t rdlen = get16(m + off + 8);
        off += 10;
        assert(off + rdlen <= len);
        assert(cls == EVDNS_CLASS_INET);
        assert(oracle_record(name, type, m + off, rdlen));
        off += rdlen;
    }
}

/* Whatever the client socket holds: at most one reply per query. */
static int drain(int id)
{
    unsigned char buf[65536];
    int replies = 0;
    for (;;) {
        ssize_t n = recv(g.client, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0)
            return replies;
        check_reply(buf, (size_t)n, replies == 0 ? id : -1);
        replies++;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g.base)
        setup();
    /* Whatever an earlier input left: still held to the contract, bar ID. */
    drain(-1);
    if (send(g.client, data, size, 0) < 0)
        return 0;
    int id = size >= 2 ? get16(data) : -1;
    for (int round = 0; round < ROUNDS; round++) {
        event_base_loop(g.base, EVLOOP_NONBLOCK);
        int got = drain(id);
        assert(got <= 1);
        if (got)
            break;
    }
    return 0;
}
