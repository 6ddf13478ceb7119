/* Name resolution for the egress, on the loop: literal addresses and the
 * policy's static hosts are answered without DNS, every other name goes to the
 * upstream resolvers through evdns.
 *
 * evdns owes every request exactly one callback, deferred to the loop, even
 * after evdns_cancel_request (then with DNS_ERR_CANCEL, or with the real
 * answer when it was already on its way). So a request of ours lives until
 * the last evdns callback it is owed has run; cancelling only forgets the
 * caller. */
#include "net/resolve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <event2/dns.h>
#include <event2/event.h>

/* Per attempt, and attempts per nameserver: a dead upstream fails a lookup
 * in about 4 s, well before an agent's own client gives up. */
#define RESOLVE_TIMEOUT "2"
#define RESOLVE_ATTEMPTS "2"
/* Once the A answer is in, how long AF_UNSPEC still waits for AAAA: some
 * upstreams drop AAAA questions, and IPv4 comes first anyway. */
#define RESOLVE_AAAA_GRACE_US 250000

enum { Q_A, Q_AAAA, Q_N };

struct query {
    struct sbx_resolve_req *req;
    struct evdns_request *handle; /* while evdns owes us its callback */
    bool asked;
    bool done;
    int errnum;
    size_t n;
    struct sbx_addr addrs[SBX_RESOLVE_MAX];
};

struct sbx_resolve_req {
    struct sbx_resolver *r;       /* NULL once the caller is done with it */
    struct sbx_resolve_req *prev; /* in r->live */
    struct sbx_resolve_req *next;
    sbx_resolve_cb cb;
    void *ud;
    int family;
    unsigned owed;       /* evdns callbacks still to come */
    struct event *timer; /* answers without DNS, and the AAAA grace */
    struct query q[Q_N];
};

struct sbx_resolver {
    struct event_base *base;
    struct evdns_base *dns;
    const struct sbx_policy *policy;
    struct sbx_resolve_req *live;
};

/* Letters, digits, '-' and '_' in labels of 1..63, at most 253 in all, one
 * trailing dot allowed: anything else never becomes a DNS question. */
bool sbx_dns_name_valid(const char *name)
{
    size_t len = strlen(name), label = 0;
    if (len > 0 && name[len - 1] == '.')
        len--;
    if (len == 0 || len > 253)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (c == '.') {
            if (label == 0)
                return false;
            label = 0;
            continue;
        }
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '_';
        if (!ok || ++label > 63)
            return false;
    }
    return label > 0;
}

static int errno_of(int dns_err)
{
    switch (dns_err) {
    case DNS_ERR_NOTEXIST:
        return ENOENT;
    case DNS_ERR_NODATA:
        return ENODATA;
    case DNS_ERR_TIMEOUT:
        return ETIMEDOUT;
    case DNS_ERR_SHUTDOWN:
    case DNS_ERR_CANCEL:
        return ECANCELED;
    default: /* SERVFAIL, REFUSED, FORMERR, NOTIMPL, truncated, unknown */
        return EHOSTUNREACH;
    }
}

/* For AF_UNSPEC with neither family answered: NXDOMAIN speaks for the name,
 * a failure means we do not know, and "no address of this family" says least. */
static int rank(int errnum)
{
    return errnum == ENOENT ? 3 : errnum == ENODATA ? 1 : 2;
}

static void unlink_live(struct sbx_resolve_req *req)
{
    struct sbx_resolver *r = req->r;
    if (!r)
        return;
    if (req->prev)
        req->prev->next = req->next;
    else
        r->live = req->next;
    if (req->next)
        req->next->prev = req->prev;
    req->prev = req->next = NULL;
    req->r = NULL;
}

static void req_free(struct sbx_resolve_req *req)
{
    if (req->timer)
        event_free(req->timer);
    free(req);
}

/* The caller is done with req: no callback any more. evdns callbacks still
 * owed keep it alive; the last one frees it. */
static void forget(struct sbx_resolve_req *req)
{
    struct sbx_resolver *r = req->r;
    req->cb = NULL;
    if (req->timer)
        event_del(req->timer);
    for (int i = 0; i < Q_N; i++) {
        struct query *q = &req->q[i];
        if (q->handle && !q->done) {
            /* The callback still comes (DNS_ERR_CANCEL); done keeps us from
             * cancelling twice. */
            q->done = true;
            evdns_cancel_request(r->dns, q->handle);
        }
    }
    unlink_live(req);
    if (req->owed == 0)
        req_free(req);
}

/* Merge what each family got, IPv4 first, and tell the caller. */
static void finish(struct sbx_resolve_req *req)
{
    struct sbx_addr addrs[SBX_RESOLVE_MAX];
    size_t n = 0;
    int errnum = 0;
    for (int i = 0; i < Q_N; i++) {
        const struct query *q = &req->q[i];
        if (!q->asked)
            continue;
        for (size_t k = 0; k < q->n && n < SBX_RESOLVE_MAX; k++)
            addrs[n++] = q->addrs[k];
        if (q->errnum && (errnum == 0 || rank(q->errnum) > rank(errnum)))
            errnum = q->errnum;
    }
    if (n > 0)
        errnum = 0;
    sbx_resolve_cb cb = req->cb;
    void *ud = req->ud;
    /* Nothing of req is touched after the callback: it may free the resolver. */
    forget(req);
    cb(ud, errnum, n > 0 ? addrs : NULL, n);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_resolve_req *req = arg;
    struct query *v6 = &req->q[Q_AAAA];
    /* The AAAA grace ran out: answer with IPv4 only. */
    if (v6->asked && !v6->done) {
        v6->errnum = ETIMEDOUT;
        v6->n = 0;
    }
    finish(req);
}

static void on_dns(int result, char type, int count, int ttl, void *addresses, void *arg)
{
    struct query *q = arg;
    struct sbx_resolve_req *req = q->req;
    q->handle = NULL; /* evdns frees it after we return */
    req->owed--;
    if (!req->cb) {
        if (req->owed == 0)
            req_free(req);
        return;
    }
    if (q->done) /* cancelled by us (out of memory for its sibling) */
        return;
    q->done = true;
    q->errnum = result == DNS_ERR_NONE ? 0 : errno_of(result);
    if (result == DNS_ERR_NONE && count > 0) {
        for (int k = 0; k < count && q->n < SBX_RESOLVE_MAX; k++) {
            struct sbx_addr *a = &q->addrs[q->n++];
            memset(a, 0, sizeof(*a));
            if (q == &req->q[Q_A]) {
                a->family = AF_INET;
                memcpy(&a->u.v4, (const char *)addresses + 4 * k, 4);
            } else {
                a->family = AF_INET6;
                memcpy(&a->u.v6, (const char *)addresses + 16 * k, 16);
            }
        }
    } else if (result == DNS_ERR_NONE) {
        q->errnum = ENODATA;
    }
    struct query *v4 = &req->q[Q_A], *v6 = &req->q[Q_AAAA];
    if ((!v4->asked || v4->done) && (!v6->asked || v6->done)) {
        finish(req);
    } else if (q == v4 && v4->n > 0 && !evtimer_pending(req->timer, NULL)) {
        struct timeval grace = {0, RESOLVE_AAAA_GRACE_US};
        evtimer_add(req->timer, &grace);
    }
}

static bool ask(struct sbx_resolve_req *req, int which, const char *name)
{
    struct query *q = &req->q[which];
    q->req = req;
    q->asked = true;
    q->handle = which == Q_A
                    ? evdns_base_resolve_ipv4(req->r->dns, name, DNS_QUERY_NO_SEARCH, on_dns, q)
                    : evdns_base_resolve_ipv6(req->r->dns, name, DNS_QUERY_NO_SEARCH, on_dns, q);
    if (!q->handle)
        return false;
    req->owed++;
    return true;
}

/* An answer known without DNS, delivered from the loop all the same. */
static void answer_now(struct sbx_resolve_req *req, int errnum, const struct sbx_addr *addr)
{
    struct query *q = &req->q[Q_A];
    q->asked = q->done = true;
    if (addr && req->family != AF_UNSPEC && addr->family != req->family)
        errnum = ENODATA; /* the name has an address, not of this family */
    else if (addr)
        q->addrs[q->n++] = *addr;
    q->errnum = errnum;
    struct timeval now = {0, 0};
    evtimer_add(req->timer, &now);
}

static bool literal(const char *name, struct sbx_addr *out)
{
    memset(out, 0, sizeof(*out));
    if (inet_pton(AF_INET, name, &out->u.v4) == 1) {
        out->family = AF_INET;
        return true;
    }
    if (inet_pton(AF_INET6, name, &out->u.v6) == 1) {
        out->family = AF_INET6;
        return true;
    }
    return false;
}

struct sbx_resolve_req *sbx_resolve(struct sbx_resolver *r, const char *name, int family,
                                    sbx_resolve_cb cb, void *ud)
{
    struct sbx_resolve_req *req = calloc(1, sizeof(*req));
    if (!req)
        return NULL;
    req->cb = cb;
    req->ud = ud;
    req->family = family;
    req->timer = evtimer_new(r->base, on_timer, req);
    if (!req->timer) {
        free(req);
        return NULL;
    }
    req->r = r;
    req->next = r->live;
    if (r->live)
        r->live->prev = req;
    r->live = req;

    struct sbx_addr addr;
    if (family != AF_INET && family != AF_INET6 && family != AF_UNSPEC)
        answer_now(req, EAFNOSUPPORT, NULL);
    else if (literal(name, &addr))
        answer_now(req, 0, &addr);
    else if (!sbx_dns_name_valid(name))
        answer_now(req, EINVAL, NULL);
    else if (r->policy && sbx_policy_static_host(r->policy, name, &addr))
        answer_now(req, 0, &addr);
    else {
        bool ok = true;
        if (family != AF_INET6)
            ok = ask(req, Q_A, name);
        if (ok && family != AF_INET)
            ok = ask(req, Q_AAAA, name);
        if (!ok) {
            /* Only out of memory once the name is valid: say so from the loop. */
            for (int i = 0; i < Q_N; i++) {
                if (req->q[i].handle) {
                    req->q[i].done = true;
                    evdns_cancel_request(r->dns, req->q[i].handle);
                }
                req->q[i].asked = false;
            }
            answer_now(req, ENOMEM, NULL);
        }
    }
    return req;
}

void sbx_resolve_cancel(struct sbx_resolve_req *req)
{
    if (req && req->cb)
        forget(req);
}

struct sbx_resolver *sbx_resolver_new(struct event_base *base, const struct sbx_policy *policy,
                                      const char *const *upstream, sbx_err *err)
{
    struct sbx_resolver *r = calloc(1, sizeof(*r));
    if (!r) {
        sbx_err_set(err, ENOMEM, "resolver");
        return NULL;
    }
    r->base = base;
    r->policy = policy;
    /* 0: no nameservers, no search list, nothing read yet. */
    r->dns = evdns_base_new(base, 0);
    if (!r->dns) {
        sbx_err_set(err, ENOMEM, "resolver: evdns base");
        goto fail;
    }
    if (upstream) {
        for (size_t i = 0; upstream[i]; i++) {
            errno = 0;
            int rc = evdns_base_nameserver_ip_add(r->dns, upstream[i]);
            if (rc != 0 && rc != 3 /* already there */) {
                sbx_err_set(err,
                            rc == 4 ? EINVAL
                            : errno ? errno
                                    : EIO,
                            "dns upstream \"%s\"", upstream[i]);
                goto fail;
            }
        }
    } else {
        /* Nameservers and options only: we resolve absolute names, so the
         * host's search list and its hosts file have no say. 1 (no file)
         * and 6 (no nameserver in it) leave evdns with 127.0.0.1, as libc. */
        int rc = evdns_base_resolv_conf_parse(r->dns, DNS_OPTION_NAMESERVERS | DNS_OPTION_MISC,
                                              "/etc/resolv.conf");
        if (rc != 0 && rc != 1 && rc != 6) {
            sbx_err_set(err, rc == 4 ? ENOMEM : EIO, "/etc/resolv.conf");
            goto fail;
        }
    }
    if (evdns_base_count_nameservers(r->dns) == 0) {
        sbx_err_set(err, EINVAL, "dns upstream: no nameserver");
        goto fail;
    }
    if (evdns_base_set_option(r->dns, "timeout:", RESOLVE_TIMEOUT) != 0 ||
        evdns_base_set_option(r->dns, "attempts:", RESOLVE_ATTEMPTS) != 0) {
        sbx_err_set(err, EINVAL, "resolver options");
        goto fail;
    }
    evdns_base_search_clear(r->dns);
    return r;
fail:
    if (r->dns)
        evdns_base_free(r->dns, 0);
    free(r);
    return NULL;
}

void sbx_resolver_free(struct sbx_resolver *r)
{
    if (!r)
        return;
    /* Every lookup is cancelled before the base goes: evdns_base_free with
     * requests in flight touches its freed nameservers in libevent 2.1.
     * Their callbacks, still owed, run later on the loop and free them. */
    while (r->live)
        forget(r->live);
    evdns_base_free(r->dns, 0);
    free(r);
}

struct evdns_base *sbx_resolver_evdns(struct sbx_resolver *r)
{
    return r->dns;
}

/* ---- names our DNS answered ---- */

struct answer {
    uint64_t seq; /* 0: free slot */
    struct sbx_addr addr;
    char name[254];
    bool alias; /* addr stands for real (sbx_dns_answers_alias) */
    struct sbx_addr real;
};

struct sbx_dns_answers {
    size_t max;
    size_t cap; /* of e: grows by doubling up to max as names are answered */
    size_t used;
    uint64_t seq;
    unsigned next_alias; /* the last alias host number given */
    struct answer *e;
};

/* A few thousand entries at most per sandbox: a linear scan costs less than
 * the DNS round trip or the connect it serves. */
#define ANSWERS_DEFAULT 4096
/* The first allocation: most sandboxes ask for a few names, and every live
 * session has a table (at 1024 entries of ~300 bytes, made up front, a
 * heap that reused memory paid 300 KiB of it per session). */
#define ANSWERS_FIRST 8

struct sbx_dns_answers *sbx_dns_answers_new(size_t max_entries)
{
    struct sbx_dns_answers *a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    a->max = max_entries ? max_entries : ANSWERS_DEFAULT;
    return a;
}

/* Room for one more entry: 0, or -1 (at max, or out of memory). */
static int grow(struct sbx_dns_answers *a)
{
    if (a->used < a->cap)
        return 0;
    if (a->cap >= a->max)
        return -1;
    size_t cap = a->cap ? a->cap * 2 : ANSWERS_FIRST;
    if (cap > a->max)
        cap = a->max;
    struct answer *e = realloc(a->e, cap * sizeof(*e));
    if (!e)
        return -1;
    a->e = e;
    a->cap = cap;
    return 0;
}

void sbx_dns_answers_free(struct sbx_dns_answers *a)
{
    if (!a)
        return;
    free(a->e);
    free(a);
}

static struct answer *find(const struct sbx_dns_answers *a, const struct sbx_addr *addr)
{
    for (size_t i = 0; i < a->used; i++)
        if (sbx_addr_eq(&a->e[i].addr, addr))
            return &a->e[i];
    return NULL;
}

void sbx_dns_answers_add(struct sbx_dns_answers *a, const char *name, const struct sbx_addr *addr)
{
    if (addr->family != AF_INET && addr->family != AF_INET6)
        return;
    struct answer *e = find(a, addr);
    if (!e && grow(a) == 0) {
        e = &a->e[a->used++];
    } else if (!e) {
        if (!a->used)
            return;   /* no memory for even one: the name is not remembered */
        e = &a->e[0]; /* full: the oldest answer goes */
        for (size_t i = 1; i < a->used; i++)
            if (a->e[i].seq < e->seq)
                e = &a->e[i];
    }
    e->seq = ++a->seq;
    e->alias = false;
    memset(&e->addr, 0, sizeof(e->addr));
    e->addr.family = addr->family;
    if (addr->family == AF_INET)
        e->addr.u.v4 = addr->u.v4;
    else
        e->addr.u.v6 = addr->u.v6;
    /* Stored as policy rules compare names: lower case, no trailing dot. */
    size_t n = 0;
    for (; name[n] && n < sizeof(e->name) - 1; n++) {
        char c = name[n];
        e->name[n] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    if (n > 0 && e->name[n - 1] == '.')
        n--;
    e->name[n] = '\0';
}

const char *sbx_dns_answers_lookup(const struct sbx_dns_answers *a, const struct sbx_addr *addr)
{
    const struct answer *e = find(a, addr);
    return e ? e->name : NULL;
}

void sbx_dns_answers_alias(struct sbx_dns_answers *a, const char *name, const struct sbx_addr *real,
                           struct sbx_addr *alias)
{
    char norm[sizeof(a->e[0].name)];
    snprintf(norm, sizeof(norm), "%s", name);
    for (char *c = norm; *c; c++)
        *c = *c >= 'A' && *c <= 'Z' ? (char)(*c - 'A' + 'a') : *c;
    size_t n = strlen(norm);
    if (n > 0 && norm[n - 1] == '.')
        norm[n - 1] = '\0';
    for (size_t i = 0; i < a->used; i++)
        if (a->e[i].alias && strcmp(a->e[i].name, norm) == 0 && sbx_addr_eq(&a->e[i].real, real)) {
            *alias = a->e[i].addr;
            return;
        }
    /* 198.19.255.1 - .254, given in turn: the 255th name takes the first's. */
    a->next_alias = a->next_alias % 254 + 1;
    *alias = (struct sbx_addr){.family = AF_INET};
    alias->u.v4.s_addr = htonl(SBX_DNS_ALIAS_NET | a->next_alias);
    sbx_dns_answers_add(a, norm, alias);
    struct answer *e = find(a, alias);
    if (e) {
        e->alias = true;
        e->real = *real;
    }
}

bool sbx_dns_answers_real(const struct sbx_dns_answers *a, const struct sbx_addr *addr,
                          struct sbx_addr *real)
{
    const struct answer *e = find(a, addr);
    if (!e || !e->alias)
        return false;
    *real = e->real;
    return true;
}
