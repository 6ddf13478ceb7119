/* The sandbox's DNS endpoint: evdns's server port on the UDP socket the
 * egress bound to 127.0.0.1:53 inside the sandbox's namespace.
 *
 * A question is answered only when it is of class IN, type A or AAAA, for a
 * well-formed name the policy allows; anything else is refused at once and
 * nothing of it leaves the daemon: no DNS tunnel, no exfiltration through
 * long labels or TXT. Allowed names go through the resolver (static hosts,
 * then upstream). A request is answered as a whole: if any of its questions
 * is refused, all are (real stub resolvers send one question anyway). Every
 * question is reported as one flow, except under a flood (see pace()). */
#include "net/dns.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/dns_struct.h>
#include <event2/event.h>

#include "base/metrics.h"
#include "base/time.h"

#define DNS_TTL 60
/* More questions than this in one request are refused without a lookup:
 * one packet must not fan out into hundreds of upstream queries. */
#define DNS_MAX_QUESTIONS 4
/* Questions waiting for the resolver, per sandbox: past that, SERVFAIL at
 * once (a flood of names must not grow the daemon without bound). */
#define DNS_MAX_INFLIGHT 256
/* Requests handled per loop iteration; see pace(). */
#define DNS_BURST 256
/* Without EDNS0 a UDP answer must fit in 512 bytes; evdns would truncate
 * and set TC, and a client would retry over TCP, which we do not serve. So
 * we send fewer addresses instead. */
#define DNS_UDP_MAX 512
#define DNS_HEADER 12
#define DNS_RR_FIXED 12 /* compressed owner name, type, class, TTL, length */
/* RA in the header's flags. (libevent calls this bit EVDNS_FLAGS_RD.) */
#define DNS_FLAG_RA 0x0080

struct question {
    struct pending *p;
    const struct evdns_server_question *q; /* owned by the evdns request */
    struct sbx_resolve_req *rr;            /* while the resolver works */
    char name[256];                        /* for the flow */
    struct sbx_decision d;
    int errnum;
    size_t n;
    struct sbx_addr addrs[SBX_RESOLVE_MAX];
};

/* A request waiting for the resolver. */
struct pending {
    struct sbx_dns_server *s;
    struct pending *prev;
    struct pending *next;
    struct evdns_server_request *req;
    double start; /* CLOCK_REALTIME */
    double start_mono;
    int left; /* questions still resolving */
    int nq;
    struct question qs[];
};

struct sbx_dns_server {
    struct evdns_server_port *port;
    int fd;
    const struct sbx_policy *policy;
    struct sbx_resolver *resolver;
    struct sbx_dns_answers *answers;
    sbx_flow_cb on_flow;
    void *ud;
    struct pending *pending;
    int inflight;         /* questions in pending */
    unsigned burst;       /* requests in this loop iteration */
    bool plugged;         /* the drop-all filter is on the socket */
    struct event *unplug; /* end of the iteration: burst over */
};

/* Same rule as the resolver's: letters, digits, '-', '_', labels of 1..63,
 * at most 253 in all. evdns hands us label bytes as they came (dots and
 * all), so this is where odd bytes stop. */

/* Lower case, no trailing dot: the form rules and the audit use. */
static void canonical(const char *name, char *out, size_t len)
{
    size_t n = 0;
    for (; name[n] && n < len - 1; n++) {
        char c = name[n];
        out[n] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    if (n > 0 && out[n - 1] == '.')
        n--;
    out[n] = '\0';
}

static const char *type_name(int type)
{
    switch (type) {
    case EVDNS_TYPE_NS:
        return "NS";
    case EVDNS_TYPE_CNAME:
        return "CNAME";
    case EVDNS_TYPE_SOA:
        return "SOA";
    case EVDNS_TYPE_PTR:
        return "PTR";
    case EVDNS_TYPE_MX:
        return "MX";
    case EVDNS_TYPE_TXT:
        return "TXT";
    case 33:
        return "SRV";
    case 65:
        return "HTTPS";
    case 255:
        return "ANY";
    default:
        return NULL;
    }
}

/* May this question be answered? d says why not (or which rule allows). */
static bool admit(const struct sbx_dns_server *s, const struct evdns_server_question *q,
                  struct sbx_decision *d)
{
    d->verdict = SBX_VERDICT_DENY;
    d->rule[0] = '\0';
    if (q->dns_question_class != EVDNS_CLASS_INET) {
        snprintf(d->rule, sizeof(d->rule), "dns: class %d refused", q->dns_question_class);
        return false;
    }
    if (q->type != EVDNS_TYPE_A && q->type != EVDNS_TYPE_AAAA) {
        const char *t = type_name(q->type);
        if (t)
            snprintf(d->rule, sizeof(d->rule), "dns: type %s refused", t);
        else
            snprintf(d->rule, sizeof(d->rule), "dns: type %d refused", q->type);
        return false;
    }
    if (!sbx_dns_name_valid(q->name)) {
        snprintf(d->rule, sizeof(d->rule), "dns: malformed name");
        return false;
    }
    return sbx_policy_name_allowed(s->policy, q->name, d);
}

/* The name for the flow: only if it is one, since a refused question's
 * bytes are whatever the sandbox sent. */
static void flow_name(const char *name, char *out, size_t len)
{
    if (sbx_dns_name_valid(name))
        canonical(name, out, len);
    else
        snprintf(out, len, "(malformed)");
}

static const struct sbx_metric m_answers = {
    .name = "sandbox_dns_answers_total",
    .help = "DNS questions of the sandboxes answered (allowed by the policy and looked up).",
    .kind = SBX_METRIC_COUNTER};
static const struct sbx_metric m_refusals = {
    .name = "sandbox_dns_refusals_total",
    .help = "DNS questions of the sandboxes refused (by the policy, or malformed, or too many).",
    .kind = SBX_METRIC_COUNTER};

/* Each question's end: counted, and its flow reported. */
static void report(const struct sbx_dns_server *s, const char *name, const struct sbx_decision *d,
                   const struct sbx_addr *addr, double start, double duration)
{
    sbx_metric_add(d->verdict == SBX_VERDICT_DENY ? &m_refusals : &m_answers, 1);
    if (!s->on_flow)
        return;
    struct sbx_flow f = {.start = start,
                         .duration_s = duration,
                         .via = SBX_VIA_DNS,
                         .port = 53,
                         .verdict = d->verdict};
    snprintf(f.name, sizeof(f.name), "%s", name);
    if (addr)
        f.addr = *addr;
    snprintf(f.rule, sizeof(f.rule), "%s", d->rule);
    s->on_flow(s->ud, &f);
}

static void respond(struct evdns_server_request *req, int rcode)
{
    /* Keep RD as asked, add RA: we do recurse for the sandbox. */
    evdns_server_request_set_flags(req, DNS_FLAG_RA);
    /* libevent 2.1 returns -1 without freeing req when the reply could not
     * be built or sendto() said EAGAIN; it keeps req only when it queued
     * the reply itself (returns 1). */
    if (evdns_server_request_respond(req, rcode) < 0)
        evdns_server_request_drop(req);
}

static void refuse_all(struct sbx_dns_server *s, struct evdns_server_request *req,
                       struct sbx_decision *ds, int rcode, const char *why)
{
    double start = sbx_now_ms() / 1e3;
    for (int i = 0; i < req->nquestions; i++) {
        if (ds[i].verdict == SBX_VERDICT_ALLOW) {
            ds[i].verdict = SBX_VERDICT_DENY;
            snprintf(ds[i].rule, sizeof(ds[i].rule), "%s", why);
        }
        char name[256];
        flow_name(req->questions[i]->name, name, sizeof(name));
        report(s, name, &ds[i], NULL, start, 0);
    }
    respond(req, rcode);
}

static void unlink_pending(struct pending *p)
{
    struct sbx_dns_server *s = p->s;
    if (p->prev)
        p->prev->next = p->next;
    else
        s->pending = p->next;
    if (p->next)
        p->next->prev = p->prev;
    p->prev = p->next = NULL;
}

/* Wire size of a name in the question section, at most. A trailing dot
 * counts as a two-byte root: evdns's name compression also records the
 * empty name, so a second question ending in a dot gets a pointer to the
 * first one's root (two bytes) instead of its own (one). */
static size_t wire_len(const char *name)
{
    size_t len = strlen(name);
    return len == 0 ? 1 : len + 2;
}

/* A loopback address the policy opens for name (on some port). */
static bool host_loopback(const struct sbx_dns_server *s, const char *name,
                          const struct sbx_addr *a)
{
    static const struct in6_addr lo6 = IN6ADDR_LOOPBACK_INIT;
    bool lo = a->family == AF_INET ? (ntohl(a->u.v4.s_addr) >> 24) == 127
                                   : memcmp(&a->u.v6, &lo6, sizeof(lo6)) == 0;
    return lo && s->policy && sbx_policy_opens_some_port(s->policy, name, a);
}

/* All questions resolved: one reply, the answers recorded, one flow each. */
static void complete(struct pending *p)
{
    struct sbx_dns_server *s = p->s;
    struct evdns_server_request *req = p->req;
    long room = DNS_UDP_MAX - DNS_HEADER;
    for (int i = 0; i < p->nq; i++)
        room -= (long)wire_len(p->qs[i].q->name) + 4;
    int rcode = DNS_ERR_NONE;
    for (int i = 0; i < p->nq; i++) {
        struct question *qn = &p->qs[i];
        const char *name = qn->q->name;
        if (qn->errnum == ENOENT && rcode == DNS_ERR_NONE)
            rcode = DNS_ERR_NOTEXIST;
        else if (qn->errnum && qn->errnum != ENOENT && qn->errnum != ENODATA)
            rcode = DNS_ERR_SERVERFAILED;
        for (size_t k = 0; k < qn->n; k++) {
            const struct sbx_addr *a = &qn->addrs[k];
            /* The resolver answers in the family asked for, but be sure. */
            bool v4 = a->family == AF_INET;
            if (v4 != (qn->q->type == EVDNS_TYPE_A))
                continue;
            /* The host's loopback, opened by the policy: the sandbox's own
             * loopback is another, so the answer is an alias the transparent
             * listener maps back (IPv4 only: no AAAA for it). */
            struct sbx_addr alias;
            if (host_loopback(s, name, a)) {
                if (!v4 || !s->answers)
                    continue;
                sbx_dns_answers_alias(s->answers, name, a, &alias);
                a = &alias;
            }
            long rr = DNS_RR_FIXED + (v4 ? 4 : 16);
            if (rr > room)
                break;
            /* One record per address: add_*_reply with n > 1 makes a single
             * record with several addresses in it, which libc rejects. */
            int rc = v4 ? evdns_server_request_add_a_reply(req, name, 1, &a->u.v4, DNS_TTL)
                        : evdns_server_request_add_aaaa_reply(req, name, 1, &a->u.v6, DNS_TTL);
            if (rc < 0)
                break;
            room -= rr;
            if (s->answers && a != &alias)
                sbx_dns_answers_add(s->answers, qn->name, a);
        }
    }
    /* p keeps what the flows need; req and its questions go with the reply. */
    unlink_pending(p);
    s->inflight -= p->nq;
    respond(req, rcode);
    double duration = sbx_mono_ms() / 1e3 - p->start_mono;
    for (int i = 0; i < p->nq; i++) {
        struct question *qn = &p->qs[i];
        report(s, qn->name, &qn->d, qn->n > 0 ? &qn->addrs[0] : NULL, p->start, duration);
    }
    free(p);
}

static void on_resolved(void *ud, int errnum, const struct sbx_addr *addrs, size_t n)
{
    struct question *qn = ud;
    struct pending *p = qn->p;
    qn->rr = NULL;
    qn->errnum = errnum;
    qn->n = n < SBX_RESOLVE_MAX ? n : SBX_RESOLVE_MAX;
    if (qn->n)
        memcpy(qn->addrs, addrs, qn->n * sizeof(*addrs));
    if (--p->left == 0)
        complete(p);
}

static const struct sock_filter drop_all[] = {BPF_STMT(BPF_RET | BPF_K, 0)};

/* libevent 2.1.12's DNS server crashes on a datagram shorter than a DNS
 * header (any sandbox could send one): the kernel drops those for us. The
 * filter may see the 8-byte UDP header too; 20 bytes also covers that, and
 * no useful query is shorter (header + root name + type + class = 17). A
 * socket has one such filter, so this is also what unplugging puts back:
 * detaching the drop-all one would leave the socket open to the crash. */
static const struct sock_filter drop_short[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_LEN, 0),
    BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 20, 0, 1),
    BPF_STMT(BPF_RET | BPF_K, 0xffff),
    BPF_STMT(BPF_RET | BPF_K, 0),
};

static int attach(int fd, const struct sock_filter *code, size_t len)
{
    struct sock_fprog prog = {.len = (unsigned short)len, .filter = (struct sock_filter *)code};
    return setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog));
}

static void on_unplug(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_dns_server *s = arg;
    s->burst = 0;
    /* Should that fail (no memory), the socket stays deaf: better than
     * open to the crash. */
    if (s->plugged && attach(s->fd, drop_short, SBX_ARRAY_LEN(drop_short)) == 0)
        s->plugged = false;
}

/* evdns reads its socket until EAGAIN, so a sandbox that sends faster than
 * we answer would keep the whole loop in there, every other sandbox
 * starved. So at most DNS_BURST requests per loop iteration: past that,
 * the socket takes no more packets (a drop-all socket filter) until the loop
 * has been round, and what is still queued is dropped unread, without reply
 * or flow. A client retries; a flood stays a flood of one sandbox. */
static bool pace(struct sbx_dns_server *s)
{
    if (s->burst++ == 0)
        event_active(s->unplug, EV_TIMEOUT, 0);
    if (s->burst <= DNS_BURST)
        return true;
    if (!s->plugged)
        s->plugged = attach(s->fd, drop_all, SBX_ARRAY_LEN(drop_all)) == 0;
    return false;
}

static void on_request(struct evdns_server_request *req, void *arg)
{
    struct sbx_dns_server *s = arg;
    if (!pace(s)) {
        evdns_server_request_drop(req);
        return;
    }
    int nq = req->nquestions;
    if (nq <= 0) {
        respond(req, DNS_ERR_FORMAT);
        return;
    }
    struct sbx_decision *ds = calloc((size_t)nq, sizeof(*ds));
    if (!ds) {
        respond(req, DNS_ERR_SERVERFAILED);
        return;
    }
    bool all = true;
    for (int i = 0; i < nq; i++)
        all &= admit(s, req->questions[i], &ds[i]);
    if (!all || nq > DNS_MAX_QUESTIONS) {
        refuse_all(s, req, ds, DNS_ERR_REFUSED,
                   all ? "dns: too many questions" : "dns: refused with another question");
        free(ds);
        return;
    }
    if (s->inflight + nq > DNS_MAX_INFLIGHT) {
        refuse_all(s, req, ds, DNS_ERR_SERVERFAILED, "dns: too many questions in flight");
        free(ds);
        return;
    }

    struct pending *p = calloc(1, sizeof(*p) + (size_t)nq * sizeof(p->qs[0]));
    if (!p) {
        free(ds);
        respond(req, DNS_ERR_SERVERFAILED);
        return;
    }
    p->s = s;
    p->req = req;
    p->nq = nq;
    p->start = sbx_now_ms() / 1e3;
    p->start_mono = sbx_mono_ms() / 1e3;
    p->next = s->pending;
    if (s->pending)
        s->pending->prev = p;
    s->pending = p;
    s->inflight += nq;
    for (int i = 0; i < nq; i++) {
        p->qs[i].p = p;
        p->qs[i].q = req->questions[i];
        p->qs[i].d = ds[i];
        flow_name(req->questions[i]->name, p->qs[i].name, sizeof(p->qs[i].name));
    }
    free(ds);
    /* The resolver answers from the loop, never from inside sbx_resolve, so
     * p->left is complete before any answer can arrive. */
    for (int i = 0; i < nq; i++) {
        struct question *qn = &p->qs[i];
        int family = qn->q->type == EVDNS_TYPE_A ? AF_INET : AF_INET6;
        qn->rr = sbx_resolve(s->resolver, qn->q->name, family, on_resolved, qn);
        if (qn->rr)
            p->left++;
        else
            qn->errnum = ENOMEM;
    }
    if (p->left == 0)
        complete(p);
}

struct sbx_dns_server *sbx_dns_server_new(struct event_base *base, int udp_fd,
                                          const struct sbx_policy *policy,
                                          struct sbx_resolver *resolver,
                                          struct sbx_dns_answers *answers, sbx_flow_cb on_flow,
                                          void *ud, sbx_err *err)
{
    int type = 0;
    socklen_t len = sizeof(type);
    if (getsockopt(udp_fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0) {
        sbx_err_set(err, errno, "dns endpoint socket");
        return NULL;
    }
    if (type != SOCK_DGRAM) {
        sbx_err_set(err, EINVAL, "dns endpoint socket: not UDP");
        return NULL;
    }
    /* evdns reads until EAGAIN: a blocking socket would stall the loop. */
    int fl = fcntl(udp_fd, F_GETFL);
    if (fl < 0 || fcntl(udp_fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
        fcntl(udp_fd, F_SETFD, FD_CLOEXEC) < 0) {
        sbx_err_set(err, errno, "dns endpoint socket flags");
        return NULL;
    }
    if (attach(udp_fd, drop_short, SBX_ARRAY_LEN(drop_short)) < 0) {
        sbx_err_set(err, errno, "dns endpoint socket filter");
        return NULL;
    }
    struct sbx_dns_server *s = calloc(1, sizeof(*s));
    if (!s) {
        sbx_err_set(err, ENOMEM, "dns endpoint");
        return NULL;
    }
    s->fd = udp_fd;
    s->policy = policy;
    s->resolver = resolver;
    s->answers = answers;
    s->on_flow = on_flow;
    s->ud = ud;
    s->unplug = event_new(base, -1, 0, on_unplug, s);
    if (s->unplug)
        s->port = evdns_add_server_port_with_base(base, udp_fd, 0, on_request, s);
    if (!s->port) {
        sbx_err_set(err, ENOMEM, "dns endpoint: evdns server port");
        if (s->unplug)
            event_free(s->unplug);
        free(s);
        return NULL;
    }
    return s;
}

void sbx_dns_server_free(struct sbx_dns_server *s)
{
    if (!s)
        return;
    /* Lookups in flight are cancelled; their questions still get a flow
     * (allowed, no address) and the sandbox no reply. Dropping the evdns
     * requests first lets the port go (and close the fd) at once. */
    while (s->pending) {
        struct pending *p = s->pending;
        unlink_pending(p);
        double duration = sbx_mono_ms() / 1e3 - p->start_mono;
        for (int i = 0; i < p->nq; i++) {
            struct question *qn = &p->qs[i];
            if (qn->rr)
                sbx_resolve_cancel(qn->rr);
            report(s, qn->name, &qn->d, NULL, p->start, duration);
        }
        evdns_server_request_drop(p->req);
        free(p);
    }
    evdns_close_server_port(s->port);
    event_free(s->unplug);
    /* evdns closes only fds > 0. */
    if (s->fd == 0)
        close(s->fd);
    free(s);
}

void sbx_dns_server_set_policy(struct sbx_dns_server *s, const struct sbx_policy *policy)
{
    s->policy = policy;
}

void sbx_dns_server_set_flow(struct sbx_dns_server *s, sbx_flow_cb on_flow, void *ud)
{
    s->on_flow = on_flow;
    s->ud = ud;
}
