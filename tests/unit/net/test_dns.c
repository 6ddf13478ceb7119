/* The sandbox's DNS endpoint, for real on 127.0.0.1: a UDP socket stands in
 * for the sandbox's :53, a small upstream server of our own records every
 * question that reaches it, and clients are an evdns base and hand-built
 * packets. Nothing leaves this machine. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/dns_struct.h>
#include <event2/event.h>

#include "net/dns.h"

#include "fake_upstream.h"

#define TYPE_MX 15
#define TYPE_TXT 16
#define TYPE_ANY 255
#define CLASS_CH 3

/* ---- the fake upstream ---- */

static const struct upstream_record table[] = {
    {"allowed.test", EVDNS_TYPE_A, "203.0.113.10"},   {"www.ok.test", EVDNS_TYPE_A, "203.0.113.20"},
    {"www.ok.test", EVDNS_TYPE_AAAA, "2001:db8::20"}, {"two.ok.test", EVDNS_TYPE_A, "203.0.113.31"},
    {"two.ok.test", EVDNS_TYPE_A, "203.0.113.32"},    {"fine.test", EVDNS_TYPE_A, "203.0.113.40"},
};

/* ---- the loop ---- */

/* ---- fixture ---- */

#define FLOWS_MAX 16

struct env {
    struct event_base *base;
    struct upstream up;
    struct sbx_policy *policy;
    struct sbx_resolver *r;
    struct sbx_dns_answers *answers;
    struct sbx_dns_server *dns;
    int dns_fd;
    uint16_t dns_port;
    struct evdns_base *client;
    int nflows;
    struct sbx_flow flows[FLOWS_MAX];
};

static void on_flow(void *ud, const struct sbx_flow *f)
{
    struct env *e = ud;
    if (e->nflows < FLOWS_MAX)
        e->flows[e->nflows] = *f;
    e->nflows++;
}

static void start(struct env *e, const struct sbx_policy_opts *o)
{
    e->base = event_base_new();
    upstream_start(e->base, &e->up, table, sizeof(table) / sizeof(table[0]), NULL);
    sbx_err err = {0};
    e->policy = sbx_policy_new(o, &err);
    assert_non_null(e->policy);
    char ns[32];
    snprintf(ns, sizeof(ns), "127.0.0.1:%u", e->up.portno);
    const char *upstream[] = {ns, NULL};
    e->r = sbx_resolver_new(e->base, e->policy, upstream, &err);
    assert_non_null(e->r);
    e->answers = sbx_dns_answers_new(64);
    assert_non_null(e->answers);
    e->dns_fd = udp_socket(&e->dns_port);
    e->dns = sbx_dns_server_new(e->base, e->dns_fd, e->policy, e->r, e->answers, on_flow, e, &err);
    assert_non_null(e->dns);

    e->client = evdns_base_new(e->base, 0);
    snprintf(ns, sizeof(ns), "127.0.0.1:%u", e->dns_port);
    assert_int_equal(evdns_base_nameserver_ip_add(e->client, ns), 0);
    /* A refusal marks the server down: no probes of ours, please. */
    evdns_base_set_option(e->client, "initial-probe-timeout:", "3600");
    evdns_base_set_option(e->client, "timeout:", "5");
    evdns_base_set_option(e->client, "attempts:", "1");
}

/* Default deny; a few names allowed; one static host on an opened address. */
static int setup_deny(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    const char *allow[] = {"allowed.test", "*.ok.test", NULL};
    const char *hosts[] = {"static.test=10.9.8.7", NULL};
    struct sbx_policy_opts o = {
        .def = SBX_DEFAULT_DENY, .allow = allow, .hosts = hosts, .allowed_cidrs = "10.9.8.0/24"};
    start(e, &o);
    *state = e;
    return 0;
}

/* Default allow, one domain denied. */
static int setup_allow(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    const char *deny[] = {"*.evil.test", NULL};
    struct sbx_policy_opts o = {.def = SBX_DEFAULT_ALLOW, .deny = deny};
    start(e, &o);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    evdns_base_free(e->client, 0);
    if (e->dns)
        sbx_dns_server_free(e->dns);
    sbx_resolver_free(e->r);
    upstream_stop(&e->up);
    event_base_loop(e->base, EVLOOP_NONBLOCK);
    sbx_dns_answers_free(e->answers);
    sbx_policy_free(e->policy);
    event_base_free(e->base);
    free(e);
    return 0;
}

/* ---- an evdns client ---- */

struct reply {
    int calls;
    int result; /* DNS_ERR_* */
    int count;
    unsigned char addrs[16 * 16]; /* packed, as evdns gives them */
};

static void on_reply(int result, char type, int count, int ttl, void *addresses, void *arg)
{
    struct reply *r = arg;
    r->calls++;
    r->result = result;
    r->count = count < 16 ? count : 16;
    if (result == DNS_ERR_NONE)
        memcpy(r->addrs, addresses, (size_t)r->count * (type == DNS_IPv4_A ? 4 : 16));
}

static void ask(struct env *e, const char *name, int type, struct reply *r)
{
    memset(r, 0, sizeof(*r));
    struct evdns_request *req =
        type == EVDNS_TYPE_A
            ? evdns_base_resolve_ipv4(e->client, name, DNS_QUERY_NO_SEARCH, on_reply, r)
            : evdns_base_resolve_ipv6(e->client, name, DNS_QUERY_NO_SEARCH, on_reply, r);
    assert_non_null(req);
    run(e->base, &r->calls, 10);
    assert_int_equal(r->calls, 1);
}

static const char *v4(const struct reply *r, int i)
{
    static char buf[INET_ADDRSTRLEN];
    return inet_ntop(AF_INET, r->addrs + 4 * i, buf, sizeof(buf));
}

static const char *addr_str(const struct sbx_addr *a)
{
    static char buf[INET6_ADDRSTRLEN];
    return inet_ntop(a->family, &a->u, buf, sizeof(buf));
}

/* ---- hand-built packets ---- */

struct rawq {
    const char *name; /* labels separated by '.', bytes as they are */
    int type;
    int class;
};

static size_t build(uint8_t *buf, uint16_t id, const struct rawq *qs, int nq)
{
    size_t j = 0;
    const uint16_t hdr[6] = {id, 0x0100, (uint16_t)nq, 0, 0, 0};
    for (int i = 0; i < 6; i++) {
        buf[j++] = (uint8_t)(hdr[i] >> 8);
        buf[j++] = (uint8_t)hdr[i];
    }
    for (int i = 0; i < nq; i++) {
        const char *s = qs[i].name;
        while (*s) {
            const char *dot = strchr(s, '.');
            size_t len = dot ? (size_t)(dot - s) : strlen(s);
            buf[j++] = (uint8_t)len;
            memcpy(buf + j, s, len);
            j += len;
            s += len + (dot ? 1 : 0);
        }
        buf[j++] = 0;
        buf[j++] = (uint8_t)(qs[i].type >> 8);
        buf[j++] = (uint8_t)qs[i].type;
        buf[j++] = (uint8_t)(qs[i].class >> 8);
        buf[j++] = (uint8_t)qs[i].class;
    }
    return j;
}

struct raw {
    int fd;
    int got;
    uint8_t reply[1500];
    ssize_t len;
};

static void on_raw(evutil_socket_t fd, short what, void *arg)
{
    struct raw *r = arg;
    r->len = recv(fd, r->reply, sizeof(r->reply), 0);
    if (r->len > 0)
        r->got = 1;
}

/* Send the questions, wait for the reply: its rcode, or -1 for none. */
static int raw_ask_wait(struct env *e, const struct rawq *qs, int nq, int *ancount, double wait)
{
    uint8_t pkt[1500];
    size_t len = build(pkt, 0x4242, qs, nq);
    struct raw r = {.fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)};
    assert_true(r.fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(e->dns_port),
                             .sin_addr = {htonl(INADDR_LOOPBACK)}};
    assert_int_equal(connect(r.fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(send(r.fd, pkt, len, 0), (ssize_t)len);
    struct event *ev = event_new(e->base, r.fd, EV_READ | EV_PERSIST, on_raw, &r);
    event_add(ev, NULL);
    run(e->base, &r.got, wait);
    event_free(ev);
    close(r.fd);
    if (!r.got)
        return -1;
    assert_true(r.len >= 12);
    assert_int_equal(r.reply[0], 0x42);
    assert_int_equal(r.reply[1], 0x42);
    assert_true(r.reply[2] & 0x80); /* a response */
    assert_true(r.reply[2] & 0x01); /* RD kept */
    assert_true(r.reply[3] & 0x80); /* RA: we recurse */
    if (ancount)
        *ancount = r.reply[6] << 8 | r.reply[7];
    return r.reply[3] & 0x0f;
}

static int raw_ask(struct env *e, const struct rawq *qs, int nq, int *ancount)
{
    return raw_ask_wait(e, qs, nq, ancount, 5);
}

/* ---- tests ---- */

static void allowed_name_answered_and_recorded(void **state)
{
    struct env *e = *state;
    struct reply r;
    ask(e, "allowed.test", EVDNS_TYPE_A, &r);
    assert_int_equal(r.result, DNS_ERR_NONE);
    assert_int_equal(r.count, 1);
    assert_string_equal(v4(&r, 0), "203.0.113.10");
    assert_true(upstream_saw_any(&e->up, "allowed.test"));

    struct sbx_addr a = {.family = AF_INET};
    inet_pton(AF_INET, "203.0.113.10", &a.u.v4);
    assert_string_equal(sbx_dns_answers_lookup(e->answers, &a), "allowed.test");

    assert_int_equal(e->nflows, 1);
    const struct sbx_flow *f = &e->flows[0];
    assert_int_equal(f->via, SBX_VIA_DNS);
    assert_string_equal(f->name, "allowed.test");
    assert_int_equal(f->port, 53);
    assert_int_equal(f->verdict, SBX_VERDICT_ALLOW);
    assert_non_null(strstr(f->rule, "allowed.test"));
    assert_int_equal(f->addr.family, AF_INET);
    assert_string_equal(addr_str(&f->addr), "203.0.113.10");
    assert_true(f->start > 1e9);
    assert_true(f->duration_s >= 0 && f->duration_s < 5);
}

static void wildcard_and_aaaa(void **state)
{
    struct env *e = *state;
    struct reply r;
    ask(e, "WWW.ok.test", EVDNS_TYPE_AAAA, &r);
    assert_int_equal(r.result, DNS_ERR_NONE);
    assert_int_equal(r.count, 1);
    char buf[INET6_ADDRSTRLEN];
    assert_string_equal(inet_ntop(AF_INET6, r.addrs, buf, sizeof(buf)), "2001:db8::20");
    struct sbx_addr a = {.family = AF_INET6};
    inet_pton(AF_INET6, "2001:db8::20", &a.u.v6);
    assert_string_equal(sbx_dns_answers_lookup(e->answers, &a), "www.ok.test");
    assert_int_equal(e->nflows, 1);
    assert_string_equal(e->flows[0].name, "www.ok.test");
    assert_int_equal(e->flows[0].addr.family, AF_INET6);
}

static void one_record_per_address(void **state)
{
    struct env *e = *state;
    int an = 0;
    struct rawq q = {"two.ok.test", EVDNS_TYPE_A, EVDNS_CLASS_INET};
    assert_int_equal(raw_ask(e, &q, 1, &an), DNS_ERR_NONE);
    assert_int_equal(an, 2);
    struct reply r;
    ask(e, "two.ok.test", EVDNS_TYPE_A, &r);
    assert_int_equal(r.count, 2);
    assert_string_equal(v4(&r, 0), "203.0.113.31");
    assert_string_equal(v4(&r, 1), "203.0.113.32");
}

static void denied_name_refused_not_forwarded(void **state)
{
    struct env *e = *state;
    struct reply r;
    ask(e, "blocked.test", EVDNS_TYPE_A, &r);
    assert_int_equal(r.result, DNS_ERR_REFUSED);
    /* "ok.test" itself is not below *.ok.test */
    ask(e, "ok.test", EVDNS_TYPE_A, &r);
    assert_int_equal(r.result, DNS_ERR_REFUSED);
    assert_int_equal(e->up.nseen, 0);
    assert_int_equal(e->nflows, 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(e->flows[i].verdict, SBX_VERDICT_DENY);
        assert_int_equal(e->flows[i].addr.family, 0);
        assert_int_equal(e->flows[i].port, 53);
        assert_true(e->flows[i].rule[0] != '\0');
    }
    assert_string_equal(e->flows[0].name, "blocked.test");
    assert_string_equal(e->flows[1].name, "ok.test");
}

static void other_types_and_classes_refused(void **state)
{
    struct env *e = *state;
    const struct rawq qs[] = {
        {"allowed.test", TYPE_TXT, EVDNS_CLASS_INET},
        {"allowed.test", TYPE_MX, EVDNS_CLASS_INET},
        {"allowed.test", TYPE_ANY, EVDNS_CLASS_INET},
        {"allowed.test", EVDNS_TYPE_PTR, EVDNS_CLASS_INET},
        {"allowed.test", EVDNS_TYPE_A, CLASS_CH},
    };
    const char *why[] = {"TXT", "MX", "ANY", "PTR", "class 3"};
    for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
        assert_int_equal(raw_ask(e, &qs[i], 1, NULL), DNS_ERR_REFUSED);
        assert_int_equal(e->nflows, (int)i + 1);
        assert_int_equal(e->flows[i].verdict, SBX_VERDICT_DENY);
        assert_string_equal(e->flows[i].name, "allowed.test");
        assert_non_null(strstr(e->flows[i].rule, why[i]));
    }
    assert_int_equal(e->up.nseen, 0);
}

static void nxdomain_and_nodata_pass_through(void **state)
{
    struct env *e = *state;
    struct reply r;
    ask(e, "nx.ok.test", EVDNS_TYPE_A, &r);
    assert_int_equal(r.result, DNS_ERR_NOTEXIST);
    assert_true(upstream_saw_any(&e->up, "nx.ok.test"));
    assert_int_equal(e->flows[0].verdict, SBX_VERDICT_ALLOW);
    assert_int_equal(e->flows[0].addr.family, 0);
    /* The name has an A record only: AAAA is NOERROR and empty. */
    int an = -1;
    struct rawq q = {"allowed.test", EVDNS_TYPE_AAAA, EVDNS_CLASS_INET};
    assert_int_equal(raw_ask(e, &q, 1, &an), DNS_ERR_NONE);
    assert_int_equal(an, 0);
    ask(e, "allowed.test", EVDNS_TYPE_AAAA, &r);
    assert_int_equal(r.result, DNS_ERR_NODATA);
}

static void static_host_answered_locally(void **state)
{
    struct env *e = *state;
    struct reply r;
    ask(e, "static.test", EVDNS_TYPE_A, &r);
    assert_int_equal(r.result, DNS_ERR_NONE);
    assert_int_equal(r.count, 1);
    assert_string_equal(v4(&r, 0), "10.9.8.7");
    assert_int_equal(e->up.nseen, 0);
    struct sbx_addr a = {.family = AF_INET};
    inet_pton(AF_INET, "10.9.8.7", &a.u.v4);
    assert_string_equal(sbx_dns_answers_lookup(e->answers, &a), "static.test");
    assert_int_equal(e->nflows, 1);
    assert_int_equal(e->flows[0].verdict, SBX_VERDICT_ALLOW);
    assert_string_equal(addr_str(&e->flows[0].addr), "10.9.8.7");
}

static void exfiltration_through_long_labels_refused(void **state)
{
    struct env *e = *state;
    /* Three 60-character hex labels of "data" under a denied domain. */
    char name[256] = "";
    for (int l = 0; l < 3; l++) {
        for (int i = 0; i < 60; i++) {
            char c[2] = {"0123456789abcdef"[(l * 60 + i * 7) % 16], '\0'};
            strcat(name, c);
        }
        strcat(name, ".");
    }
    strcat(name, "x.evil.test");
    struct reply r;
    ask(e, name, EVDNS_TYPE_A, &r);
    assert_int_equal(r.result, DNS_ERR_REFUSED);
    struct rawq q = {name, TYPE_TXT, EVDNS_CLASS_INET};
    assert_int_equal(raw_ask(e, &q, 1, NULL), DNS_ERR_REFUSED);
    /* Even TXT for a name the policy allows is never forwarded. */
    q.name = "fine.test";
    assert_int_equal(raw_ask(e, &q, 1, NULL), DNS_ERR_REFUSED);
    assert_int_equal(e->up.nseen, 0);
    assert_int_equal(e->nflows, 3);
    assert_int_equal(e->flows[0].verdict, SBX_VERDICT_DENY);
    assert_non_null(strstr(e->flows[0].rule, "evil.test"));
    /* The default-allow policy still answers other names. */
    ask(e, "fine.test", EVDNS_TYPE_A, &r);
    assert_int_equal(r.result, DNS_ERR_NONE);
    assert_true(upstream_saw_any(&e->up, "fine.test"));
    assert_false(upstream_saw_any(&e->up, "evil"));
}

static void malformed_names_refused(void **state)
{
    struct env *e = *state;
    /* Bytes no host name has. */
    const struct rawq qs[] = {
        {"sp ace.test", EVDNS_TYPE_A, EVDNS_CLASS_INET},
        {"semi;colon.test", EVDNS_TYPE_A, EVDNS_CLASS_INET},
    };
    for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++)
        assert_int_equal(raw_ask(e, &qs[i], 1, NULL), DNS_ERR_REFUSED);
    assert_int_equal(e->up.nseen, 0);
    assert_int_equal(e->nflows, 2);
    assert_string_equal(e->flows[0].name, "(malformed)");
    assert_int_equal(e->flows[0].verdict, SBX_VERDICT_DENY);
}

static void several_questions(void **state)
{
    struct env *e = *state;
    /* All allowed: each answered. */
    const struct rawq good[] = {
        {"allowed.test", EVDNS_TYPE_A, EVDNS_CLASS_INET},
        {"www.ok.test", EVDNS_TYPE_A, EVDNS_CLASS_INET},
    };
    int an = 0;
    assert_int_equal(raw_ask(e, good, 2, &an), DNS_ERR_NONE);
    assert_int_equal(an, 2);
    assert_int_equal(e->nflows, 2);
    assert_int_equal(e->up.nseen, 2);
    /* One refused: all refused, nothing forwarded. */
    const struct rawq mixed[] = {
        {"www.ok.test", EVDNS_TYPE_AAAA, EVDNS_CLASS_INET},
        {"blocked.test", EVDNS_TYPE_A, EVDNS_CLASS_INET},
    };
    assert_int_equal(raw_ask(e, mixed, 2, NULL), DNS_ERR_REFUSED);
    assert_int_equal(e->up.nseen, 2);
    assert_int_equal(e->nflows, 4);
    assert_int_equal(e->flows[2].verdict, SBX_VERDICT_DENY);
    assert_int_equal(e->flows[3].verdict, SBX_VERDICT_DENY);
    /* Too many: refused, nothing forwarded. */
    struct rawq many[5];
    for (int i = 0; i < 5; i++)
        many[i] = (struct rawq){"allowed.test", EVDNS_TYPE_A, EVDNS_CLASS_INET};
    assert_int_equal(raw_ask(e, many, 5, NULL), DNS_ERR_REFUSED);
    assert_int_equal(e->up.nseen, 2);
    assert_int_equal(e->nflows, 9);
    /* No question at all: evdns drops the packet before we see it. */
    assert_int_equal(raw_ask_wait(e, NULL, 0, NULL, 0.3), -1);
    assert_int_equal(e->nflows, 9);
}

static void upstream_failure_is_servfail(void **state)
{
    struct env *e = *state;
    /* Faster than the resolver's own 2 s x 2. */
    evdns_base_set_option(sbx_resolver_evdns(e->r), "timeout:", "0.2");
    evdns_base_set_option(sbx_resolver_evdns(e->r), "attempts:", "1");
    struct rawq q = {"hold.ok.test", EVDNS_TYPE_A, EVDNS_CLASS_INET};
    assert_int_equal(raw_ask(e, &q, 1, NULL), DNS_ERR_SERVERFAILED);
    assert_int_equal(e->nflows, 1);
    assert_int_equal(e->flows[0].verdict, SBX_VERDICT_ALLOW);
    assert_int_equal(e->flows[0].addr.family, 0);
}

static void free_with_questions_pending(void **state)
{
    struct env *e = *state;
    struct reply r = {0};
    struct evdns_request *h =
        evdns_base_resolve_ipv4(e->client, "hold.ok.test", DNS_QUERY_NO_SEARCH, on_reply, &r);
    assert_non_null(h);
    for (int i = 0; i < 50 && e->up.nheld == 0; i++)
        run(e->base, NULL, 0.02);
    assert_int_equal(e->up.nheld, 1);
    assert_int_equal(e->nflows, 0);
    sbx_dns_server_free(e->dns);
    e->dns = NULL;
    /* The question still has its flow; the fd is closed. */
    assert_int_equal(e->nflows, 1);
    assert_string_equal(e->flows[0].name, "hold.ok.test");
    assert_int_equal(fcntl(e->dns_fd, F_GETFD), -1);
    /* The upstream answers late: nobody is told, nothing breaks. */
    evdns_server_request_respond(e->up.held[0], DNS_ERR_NOTEXIST);
    e->up.nheld = 0;
    run(e->base, NULL, 0.3);
    assert_int_equal(r.calls, 0);
    assert_int_equal(e->nflows, 1);
    /* libevent 2.1 must not free a base with requests in flight. */
    evdns_cancel_request(e->client, h);
    run(e->base, &r.calls, 1);
    assert_int_equal(r.result, DNS_ERR_CANCEL);
}

static void only_udp_sockets(void **state)
{
    struct env *e = *state;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sbx_err err = {0};
    assert_null(sbx_dns_server_new(e->base, fd, e->policy, e->r, e->answers, on_flow, e, &err));
    assert_int_equal(err.errnum, EINVAL);
    /* Still the caller's. */
    assert_int_equal(close(fd), 0);
    memset(&err, 0, sizeof(err));
    assert_null(sbx_dns_server_new(e->base, 9999, e->policy, e->r, e->answers, on_flow, e, &err));
    assert_int_equal(err.errnum, EBADF);
}

/* A blocking socket is made non-blocking: evdns reads until EAGAIN. */
static void blocking_socket_made_nonblocking(void **state)
{
    struct env *e = *state;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(fd >= 0);
    sbx_err err = {0};
    struct sbx_dns_server *s =
        sbx_dns_server_new(e->base, fd, e->policy, e->r, e->answers, on_flow, e, &err);
    assert_non_null(s);
    assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    sbx_dns_server_free(s);
    assert_int_equal(fcntl(fd, F_GETFD), -1);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (*(int *)arg)++;
}

/* A sandbox sending questions as fast as it can must not keep the loop to
 * itself (evdns reads until EAGAIN): everything else still runs. */
static void flood_does_not_starve_the_loop(void **state)
{
    struct env *e = *state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(10); /* whatever happens to the test */
        uint8_t pkt[512];
        struct rawq q = {"x.blocked.test", EVDNS_TYPE_A, EVDNS_CLASS_INET};
        size_t len = build(pkt, 1, &q, 1);
        int fd = socket(AF_INET, SOCK_DGRAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons(e->dns_port),
                                 .sin_addr = {htonl(INADDR_LOOPBACK)}};
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
            _exit(1);
        for (;;)
            send(fd, pkt, len, 0);
    }
    int ticks = 0;
    struct event *tick = event_new(e->base, -1, EV_PERSIST, on_tick, &ticks);
    struct timeval ten_ms = {0, 10000};
    event_add(tick, &ten_ms);
    usleep(100000);
    struct timeval t0, t1;
    gettimeofday(&t0, NULL);
    run(e->base, NULL, 1);
    gettimeofday(&t1, NULL);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    event_free(tick);
    double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_usec - t0.tv_usec) / 1e6;
    /* Starved, neither the 1 s deadline nor the 10 ms ticks would come in
     * time (until the flooder's alarm). */
    assert_true(took < 3);
    assert_true(ticks >= 20);
    assert_true(e->nflows > 100); /* and the flood was being served */
    /* And once the flood is over, questions are answered again. */
    run(e->base, NULL, 0.1);
    e->nflows = 0;
    struct reply r;
    ask(e, "allowed.test", EVDNS_TYPE_A, &r);
    assert_int_equal(r.result, DNS_ERR_NONE);
}

/* Sends n copies of one datagram to the endpoint from a client socket of its
 * own; every send must go through when must is set. */
static void send_n(const struct env *e, const uint8_t *pkt, size_t len, int n, bool must)
{
    int c = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(e->dns_port),
                             .sin_addr = {htonl(INADDR_LOOPBACK)}};
    assert_int_equal(connect(c, (struct sockaddr *)&sa, sizeof(sa)), 0);
    for (int i = 0; i < n; i++) {
        ssize_t sent = send(c, pkt, len, 0);
        if (must)
            assert_int_equal(sent, (ssize_t)len);
    }
    close(c);
}

/* The same, exactly: one loop iteration serves at most 256 requests (the
 * endpoint's burst), the rest of the queue is dropped unread, and the
 * endpoint listens again right after. */
static void burst_per_iteration_bounded(void **state)
{
    struct env *e = *state;
    int big = 4 << 20;
    bool forced = setsockopt(e->dns_fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)) == 0;
    if (!forced)
        setsockopt(e->dns_fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    uint8_t pkt[512];
    struct rawq q = {"x.blocked.test", EVDNS_TYPE_A, EVDNS_CLASS_INET};
    send_n(e, pkt, build(pkt, 7, &q, 1), 600, true);
    event_base_loop(e->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    if (forced)
        assert_int_equal(e->nflows, 256);
    else
        assert_true(e->nflows <= 256);
    int an = 0;
    struct rawq ok = {"allowed.test", EVDNS_TYPE_A, EVDNS_CLASS_INET};
    assert_int_equal(raw_ask(e, &ok, 1, &an), DNS_ERR_NONE);
    assert_int_equal(an, 1);
}

/* libevent 2.1.12's server crashes on a datagram shorter than a DNS header:
 * the endpoint's socket filter drops those, from the start and also after a
 * flood has plugged and unplugged the socket (one filter per socket: the
 * unplug must put the short-packet one back, not leave none). */
static void send_short(const struct env *e)
{
    static const uint8_t runt[] = {0x12, 0x34, 0x01, 0x00};
    send_n(e, runt, sizeof(runt), 3, true);
}

static void short_packets_dropped_before_and_after_a_flood(void **state)
{
    struct env *e = *state;
    struct rawq ok = {"allowed.test", EVDNS_TYPE_A, EVDNS_CLASS_INET};
    int an = 0;
    send_short(e);
    run(e->base, NULL, 0.05); /* a runt reaching evdns would crash us here */
    assert_int_equal(raw_ask(e, &ok, 1, &an), DNS_ERR_NONE);

    uint8_t pkt[512];
    struct rawq q = {"x.blocked.test", EVDNS_TYPE_A, EVDNS_CLASS_INET};
    send_n(e, pkt, build(pkt, 7, &q, 1), 600, false); /* past the burst: plugged */
    event_base_loop(e->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    run(e->base, NULL, 0.05); /* and unplugged */
    send_short(e);
    run(e->base, NULL, 0.05);
    assert_int_equal(raw_ask(e, &ok, 1, &an), DNS_ERR_NONE);
    assert_int_equal(an, 1);
}

static int counted;
static void count_flow(void *ud, const struct sbx_flow *f)
{
    counted++;
}

/* Questions waiting for the upstream are bounded per sandbox. */
static void questions_in_flight_bounded(void **state)
{
    struct env *e = *state;
    uint16_t silent_port, port;
    int silent = udp_socket(&silent_port);
    char ns[32];
    snprintf(ns, sizeof(ns), "127.0.0.1:%u", silent_port);
    const char *upstream[] = {ns, NULL};
    sbx_err err = {0};
    struct sbx_resolver *r = sbx_resolver_new(e->base, e->policy, upstream, &err);
    assert_non_null(r);
    int fd = udp_socket(&port);
    counted = 0;
    struct sbx_dns_server *s =
        sbx_dns_server_new(e->base, fd, e->policy, r, e->answers, count_flow, NULL, &err);
    assert_non_null(s);

    int c = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr = {htonl(INADDR_LOOPBACK)}};
    assert_int_equal(connect(c, (struct sockaddr *)&sa, sizeof(sa)), 0);
    /* In batches, so that none is lost in the socket's queue. */
    for (int i = 0; i < 260; i++) {
        char name[64];
        snprintf(name, sizeof(name), "q%d.ok.test", i);
        struct rawq q = {name, EVDNS_TYPE_A, EVDNS_CLASS_INET};
        uint8_t pkt[512];
        size_t len = build(pkt, (uint16_t)i, &q, 1);
        assert_int_equal(send(c, pkt, len, 0), (ssize_t)len);
        if (i % 50 == 49 || i == 259)
            run(e->base, NULL, 0.1);
    }
    int servfail = 0;
    uint8_t reply[512];
    while (recv(c, reply, sizeof(reply), 0) >= 12)
        servfail += (reply[3] & 0x0f) == DNS_ERR_SERVERFAILED;
    assert_int_equal(servfail, 260 - 256);
    assert_int_equal(counted, 260 - 256);
    /* Freeing the endpoint reports the ones still waiting. */
    sbx_dns_server_free(s);
    assert_int_equal(counted, 260);
    sbx_resolver_free(r);
    close(c);
    close(silent);
}

int main(void)
{
    evdns_set_log_fn(quiet);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(allowed_name_answered_and_recorded, setup_deny, teardown),
        cmocka_unit_test_setup_teardown(wildcard_and_aaaa, setup_deny, teardown),
        cmocka_unit_test_setup_teardown(one_record_per_address, setup_deny, teardown),
        cmocka_unit_test_setup_teardown(denied_name_refused_not_forwarded, setup_deny, teardown),
        cmocka_unit_test_setup_teardown(other_types_and_classes_refused, setup_deny, teardown),
        cmocka_unit_test_setup_teardown(nxdomain_and_nodata_pass_through, setup_deny, teardown),
        cmocka_unit_test_setup_teardown(static_host_answered_locally, setup_deny, teardown),
        cmocka_unit_test_setup_teardown(exfiltration_through_long_labels_refused, setup_allow,
                                        teardown),
        cmocka_unit_test_setup_teardown(malformed_names_refused, setup_deny, teardown),
        cmocka_unit_test_setup_teardown(several_questions, setup_deny, teardown),
        cmocka_unit_test_setup_teardown(upstream_failure_is_servfail, setup_deny, teardown),
        cmocka_unit_test_setup_teardown(free_with_questions_pending, setup_deny, teardown),
        cmocka_unit_test_setup_teardown(only_udp_sockets, setup_deny, teardown),
        cmocka_unit_test_setup_teardown(blocking_socket_made_nonblocking, setup_deny, teardown),
        cmocka_unit_test_setup_teardown(flood_does_not_starve_the_loop, setup_deny, teardown),
        cmocka_unit_test_setup_teardown(short_packets_dropped_before_and_after_a_flood, setup_deny,
                                        teardown),
        cmocka_unit_test_setup_teardown(burst_per_iteration_bounded, setup_deny, teardown),
        cmocka_unit_test_setup_teardown(questions_in_flight_bounded, setup_deny, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
