#include "net/egress.h"

#include <arpa/inet.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <libmnl/libmnl.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/dl.h"
#include "base/log.h"
#include "isolate/stage.h"
#include "net/synq.h"

void sbx_egress_env_make(struct sbx_egress_env *e, uint16_t socks_port)
{
    unsigned socks = socks_port ? socks_port : SBX_EGRESS_SOCKS_PORT;
    static const char *const names[SBX_EGRESS_ENV_COUNT] = {
        "ALL_PROXY",   "all_proxy",   "HTTP_PROXY", "http_proxy",
        "HTTPS_PROXY", "https_proxy", "NO_PROXY",   "no_proxy",
    };
    for (int i = 0; i < SBX_EGRESS_ENV_COUNT; i++) {
        if (i < 2)
            snprintf(e->text[i], sizeof(e->text[i]), "%s=socks5h://127.0.0.1:%u", names[i], socks);
        else if (i < 6)
            snprintf(e->text[i], sizeof(e->text[i]), "%s=http://127.0.0.1:%u", names[i],
                     SBX_EGRESS_HTTP_PORT);
        else
            snprintf(e->text[i], sizeof(e->text[i]), "%s=localhost,127.0.0.1", names[i]);
        e->v[i] = e->text[i];
    }
    e->v[SBX_EGRESS_ENV_COUNT] = NULL;
}

int sbx_egress_socks_port_check(unsigned port, sbx_err *err)
{
    if (port == 0 || port > 65535)
        return sbx_err_set(err, EINVAL, "%u is not a port (1-65535)", port);
    if (port == SBX_EGRESS_HTTP_PORT || port == SBX_EGRESS_TRANSPARENT_PORT ||
        port == SBX_EGRESS_DNS_PORT)
        return sbx_err_set(err, EINVAL,
                           "%u is taken by another listener of the egress (%u, %u, %u)", port,
                           SBX_EGRESS_DNS_PORT, SBX_EGRESS_HTTP_PORT, SBX_EGRESS_TRANSPARENT_PORT);
    return 0;
}

size_t sbx_host_addresses(struct sbx_addr *out, size_t max)
{
    struct ifaddrs *ifa = NULL;
    size_t n = 0;
    if (getifaddrs(&ifa) < 0)
        return 0;
    for (struct ifaddrs *i = ifa; i && n < max; i = i->ifa_next) {
        if (!i->ifa_addr)
            continue;
        if (i->ifa_addr->sa_family == AF_INET) {
            out[n].family = AF_INET;
            out[n++].u.v4 = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
        } else if (i->ifa_addr->sa_family == AF_INET6) {
            out[n].family = AF_INET6;
            out[n++].u.v6 = ((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
        }
    }
    freeifaddrs(ifa);
    return n;
}

enum { L_SOCKS, L_HTTP, L_TRANSPARENT4, L_TRANSPARENT6, L_COUNT };

struct sbx_egress {
    struct sbx_conn_ctx ctx;
    struct sbx_dns_answers *answers;
    struct sbx_dns_server *dns;
    struct evconnlistener *listeners[L_COUNT];
    struct sbx_synq *synq;
    int netns_fd; /* the sandbox's, for live updates of its sets */
    /* The helper applying a live update (-1 / NULL: none), and whether the
     * policy changed again while it ran. */
    pid_t upd_pid;
    int upd_pidfd, upd_pipe;
    struct event *upd_ev;
    bool upd_again;
};

/* ---- inside the namespace: loopback, routes, rules, sockets ---- */

/* Sends the request nlh (built in buf) and waits for its acknowledgement;
 * an error names what it asked for. */
static int nl_ask(struct mnl_socket *nl, struct nlmsghdr *nlh, char *buf, size_t len,
                  const char *what, sbx_err *err)
{
    if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
        return sbx_err_at(err, SBX_STAGE_EGRESS, errno, "send: %s", what);
    uint32_t seq = nlh->nlmsg_seq;
    ssize_t n = mnl_socket_recvfrom(nl, buf, len);
    if (n < 0 || mnl_cb_run(buf, (size_t)n, seq, mnl_socket_get_portid(nl), NULL, NULL) < 0)
        return sbx_err_at(err, SBX_STAGE_EGRESS, errno, "%s", what);
    return 0;
}

/* "default dev lo src 127.0.0.1" (and ::1): without a route every connect()
 * fails before nftables could redirect it; the source makes the replies of
 * our listeners come back to loopback. */
static int default_route(struct mnl_socket *nl, int family, sbx_err *err)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = RTM_NEWROUTE;
    nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK;
    nlh->nlmsg_seq = 1;
    struct rtmsg *rtm = mnl_nlmsg_put_extra_header(nlh, sizeof(*rtm));
    rtm->rtm_family = (unsigned char)family;
    rtm->rtm_table = RT_TABLE_MAIN;
    rtm->rtm_protocol = RTPROT_STATIC;
    rtm->rtm_scope = RT_SCOPE_LINK;
    rtm->rtm_type = RTN_UNICAST;
    mnl_attr_put_u32(nlh, RTA_OIF, if_nametoindex("lo"));
    if (family == AF_INET) {
        struct in_addr lo = {htonl(INADDR_LOOPBACK)};
        mnl_attr_put(nlh, RTA_PREFSRC, sizeof(lo), &lo);
    } else {
        mnl_attr_put(nlh, RTA_PREFSRC, sizeof(in6addr_loopback), &in6addr_loopback);
    }
    return nl_ask(nl, nlh, buf, sizeof(buf),
                  family == AF_INET ? "default route via lo (IPv4)" : "default route via lo (IPv6)",
                  err);
}

/* A second IPv4 address on loopback (127.0.0.2/8): glibc's AI_ADDRCONFIG
 * ignores 127.0.0.1 and would otherwise refuse every IPv4 lookup without even
 * asking our DNS. */
static int second_address(struct mnl_socket *nl, sbx_err *err)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = RTM_NEWADDR;
    nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK;
    nlh->nlmsg_seq = 2;
    struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifa));
    ifa->ifa_family = AF_INET;
    ifa->ifa_prefixlen = 8;
    ifa->ifa_scope = RT_SCOPE_HOST;
    ifa->ifa_index = if_nametoindex("lo");
    struct in_addr a = {htonl(0x7f000002)};
    mnl_attr_put(nlh, IFA_LOCAL, sizeof(a), &a);
    mnl_attr_put(nlh, IFA_ADDRESS, sizeof(a), &a);
    return nl_ask(nl, nlh, buf, sizeof(buf), "add 127.0.0.2 to loopback", err);
}

static int routes(sbx_err *err)
{
    struct mnl_socket *nl = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
    if (!nl || mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
        if (nl)
            mnl_socket_close(nl);
        return sbx_err_at(err, SBX_STAGE_EGRESS, errno, "rtnetlink");
    }
    int rc = second_address(nl, err) < 0 ? -1 : default_route(nl, AF_INET, err);
    /* IPv6 may be disabled on the host: then there is simply no IPv6 path, and
     * IPv6 connections fail at once (ENETUNREACH) instead. */
    if (rc == 0)
        (void)default_route(nl, AF_INET6, NULL);
    mnl_socket_close(nl);
    return rc;
}

/* libnftables, loaded once by the creator of sandboxes (sbx_egress_rules_load)
 * and inherited by its children: only sandboxes in proxy mode need it. */
struct nft_api {
    void *(*ctx_new)(uint32_t flags);
    void (*ctx_free)(void *ctx);
    int (*buffer_error)(void *ctx);
    const char *(*get_error)(void *ctx);
    int (*run)(void *ctx, const char *buf);
};

static struct nft_api nft;

static const struct sbx_dl_sym nft_syms[] = {
    {"nft_ctx_new", offsetof(struct nft_api, ctx_new)},
    {"nft_ctx_free", offsetof(struct nft_api, ctx_free)},
    {"nft_ctx_buffer_error", offsetof(struct nft_api, buffer_error)},
    {"nft_ctx_get_error_buffer", offsetof(struct nft_api, get_error)},
    {"nft_run_cmd_from_buffer", offsetof(struct nft_api, run)},
};

int sbx_egress_rules_load(sbx_err *err)
{
    if (nft.run)
        return 0;
    struct nft_api api; /* nft stays empty unless every function is there */
    sbx_err e = {0};
    if (sbx_dl_load("libnftables.so.1", "libnftables1", nft_syms, SBX_ARRAY_LEN(nft_syms), &api,
                    &e) < 0)
        return sbx_err_at(err, SBX_STAGE_EGRESS, e.errnum, "%s", e.msg);
    nft = api;
    return 0;
}

/* The sandbox's rules: a connection to an address the policy denies by
 * address is refused at connect() (a TCP reset before the redirect, so the
 * caller sees ECONNREFUSED at once, as behind the original's firewall),
 * every other TCP connection is redirected to the transparent listener, and
 * nothing but loopback leaves. sets: the policy's address sets
 * (sbx_policy_nft_sets). The caller frees the text. */
static char *nft_rules_text(const char *sets)
{
    static const char head[] = "table inet sandbox {\n";
    static const char chains[] =
        /* sbx_synq_rule() appends the NFQUEUE target here. */
        "  chain syn_queue {\n"
        "  }\n"
        "  chain syn_out {\n"
        "    tcp flags & (fin | syn | rst | ack) == syn jump syn_queue\n"
        "  }\n"
        "  chain refuse_out {\n"
        "    type filter hook output priority -150; policy accept;\n"
        "    ip daddr 127.0.0.0/8 accept\n"
        "    ip6 daddr ::1 accept\n"
        "    ip daddr " SBX_DNS_ALIAS_TEXT " goto syn_out\n"
        "    ip daddr @open4 goto syn_out\n"
        "    ip6 daddr @open6 goto syn_out\n"
        "    meta l4proto tcp ip daddr @deny4 reject with tcp reset\n"
        "    meta l4proto tcp ip6 daddr @deny6 reject with tcp reset\n"
        "    goto syn_out\n"
        "  }\n"
        /* A SYN the SYN queue refused (net/synq.h) comes back marked. */
        "  chain refuse_marked {\n"
        "    type filter hook output priority -140; policy accept;\n"
        "    meta mark " SBX_SYNQ_REJECT_MARK_TEXT " meta l4proto tcp reject with tcp reset\n"
        "  }\n"
        "  chain nat_out {\n"
        "    type nat hook output priority -100; policy accept;\n"
        "    ip daddr 127.0.0.0/8 return\n"
        "    ip6 daddr ::1 return\n"
        "    meta l4proto tcp redirect to :15001\n"
        "  }\n"
        "  chain filter_out {\n"
        "    type filter hook output priority 0; policy drop;\n"
        "    ip daddr 127.0.0.0/8 accept\n"
        "    ip6 daddr ::1 accept\n"
        "  }\n"
        "}\n";
    char *text = NULL;
    return asprintf(&text, "%s%s%s", head, sets, chains) < 0 ? NULL : text;
}

char *sbx_egress_rules_text(const struct sbx_policy *p, sbx_err *err)
{
    cleanup_free char *sets = NULL;
    if (sbx_policy_nft_sets(p, &sets, err) < 0)
        return NULL;
    char *text = nft_rules_text(sets);
    if (!text)
        sbx_err_at(err, SBX_STAGE_EGRESS, ENOMEM, "nftables rules");
    return text;
}

/* The live update of the sets alone: one transaction that empties them and
 * adds the new policy's elements. */
static char *sets_update_text(const struct sbx_policy *p, sbx_err *err)
{
    cleanup_free char *sets = NULL;
    if (sbx_policy_nft_sets(p, &sets, err) < 0)
        return NULL;
    char *text = NULL;
    if (asprintf(&text,
                 "flush set inet sandbox deny4\nflush set inet sandbox deny6\n"
                 "flush set inet sandbox open4\nflush set inet sandbox open6\n"
                 "table inet sandbox {\n%s}\n",
                 sets) < 0) {
        sbx_err_at(err, SBX_STAGE_EGRESS, ENOMEM, "nftables sets");
        return NULL;
    }
    return text;
}

static int nft_apply(const char *rules, sbx_err *err)
{
    if (sbx_egress_rules_load(err) < 0)
        return -1;
    void *ctx = nft.ctx_new(0);
    if (!ctx)
        return sbx_err_at(err, SBX_STAGE_EGRESS, ENOMEM, "nft context");
    nft.buffer_error(ctx);
    int rc = nft.run(ctx, rules);
    if (rc != 0)
        sbx_err_at(err, SBX_STAGE_EGRESS, EPERM, "nftables rules: %s", nft.get_error(ctx));
    nft.ctx_free(ctx);
    return rc != 0 ? -1 : 0;
}

int sbx_egress_rules(const char *rules, sbx_err *err)
{
    if (!rules)
        return sbx_egress_rules_load(err);
    return routes(err) < 0 || nft_apply(rules, err) < 0 ? -1 : sbx_synq_rule(err);
}

static int bound_socket(int family, int type, uint16_t port, sbx_err *err)
{
    cleanup_fd int fd = socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return sbx_err_at(err, SBX_STAGE_EGRESS, errno, "socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    /* The sandbox's own setup brings its loopback up (and its routes, with
     * its rules: sbx_egress_rules), maybe after this bind: loopback's
     * addresses need not exist yet. */
    setsockopt(fd, SOL_IP, IP_FREEBIND, &one, sizeof(one));
    int rc;
    if (family == AF_INET) {
        struct sockaddr_in sa = {
            .sin_family = AF_INET, .sin_port = htons(port), .sin_addr = {htonl(INADDR_LOOPBACK)}};
        rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    } else {
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        struct sockaddr_in6 sa = {
            .sin6_family = AF_INET6, .sin6_port = htons(port), .sin6_addr = in6addr_loopback};
        rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    }
    if (rc < 0 || (type == SOCK_STREAM && listen(fd, 128) < 0))
        return sbx_err_at(err, SBX_STAGE_EGRESS, errno, "bind %s port %u",
                          family == AF_INET ? "127.0.0.1" : "[::1]", port);
    return sbx_steal_fd(&fd);
}

struct ns_sockets {
    int stream[L_COUNT];
    int dns;
    int synq;
};

/* Everything of ours that must happen inside the sandbox's namespace (its
 * nftables rules were applied by the sandbox's own setup: sbx_egress_rules). */
static int inside(struct ns_sockets *s, uint16_t socks_port, sbx_err *err)
{
    const struct {
        int family;
        uint16_t port;
    } want[L_COUNT] = {
        [L_SOCKS] = {AF_INET, socks_port ? socks_port : SBX_EGRESS_SOCKS_PORT},
        [L_HTTP] = {AF_INET, SBX_EGRESS_HTTP_PORT},
        [L_TRANSPARENT4] = {AF_INET, SBX_EGRESS_TRANSPARENT_PORT},
        [L_TRANSPARENT6] = {AF_INET6, SBX_EGRESS_TRANSPARENT_PORT},
    };
    /* Sockets only: loopback, its second address and the default routes are
     * the sandbox's own setup's (sbx_egress_rules, off the loop), since each
     * takes the kernel's one rtnl lock, which every network namespace made or
     * torn down on the host holds too: the loop waited up to 61 ms on it
     * with 1,000 sessions starting. */
    for (int i = 0; i < L_COUNT; i++) {
        sbx_err e6 = {0};
        bool v6 = want[i].family == AF_INET6;
        s->stream[i] = bound_socket(want[i].family, SOCK_STREAM, want[i].port, v6 ? &e6 : err);
        /* No IPv6 in the namespace: no IPv6 transparent path is needed. */
        if (s->stream[i] < 0 && !v6)
            return -1;
    }
    s->dns = bound_socket(AF_INET, SOCK_DGRAM, SBX_EGRESS_DNS_PORT, err);
    if (s->dns < 0)
        return -1; /* the DNS endpoint filters it (net/dns.c) */
    s->synq = sbx_synq_open(err);
    return s->synq < 0 ? -1 : 0;
}

static int in_namespace(int netns_fd, struct ns_sockets *s, uint16_t socks_port, sbx_err *err)
{
    cleanup_fd int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (self < 0)
        return sbx_err_at(err, SBX_STAGE_EGRESS, errno, "open own network namespace");
    if (setns(netns_fd, CLONE_NEWNET) < 0)
        return sbx_err_at(err, SBX_STAGE_EGRESS, errno, "enter the sandbox's network namespace");
    int rc = inside(s, socks_port, err);
    /* Back home whatever happened: upstream connections are made from here. */
    if (setns(self, CLONE_NEWNET) < 0)
        abort();
    return rc;
}

/* ---- on the loop ---- */

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len,
                      void *arg)
{
    struct sbx_egress *eg = arg;
    if (l == eg->listeners[L_SOCKS])
        sbx_socks5_accept(&eg->ctx, fd);
    else if (l == eg->listeners[L_HTTP])
        sbx_httpproxy_accept(&eg->ctx, fd);
    else
        sbx_transparent_accept(&eg->ctx, fd);
}

struct sbx_egress *sbx_egress_start(const struct sbx_egress_opts *o, int netns_fd, sbx_err *err)
{
    struct ns_sockets s = {.stream = {-1, -1, -1, -1}, .dns = -1, .synq = -1};
    struct sbx_egress *eg = calloc(1, sizeof(*eg));
    if (!eg) {
        sbx_err_at(err, SBX_STAGE_EGRESS, ENOMEM, "egress");
        return NULL;
    }
    eg->upd_pid = -1;
    eg->upd_pidfd = eg->upd_pipe = -1;
    if ((eg->netns_fd = fcntl(netns_fd, F_DUPFD_CLOEXEC, 3)) < 0) {
        sbx_err_at(err, SBX_STAGE_EGRESS, errno, "network namespace fd");
        goto fail;
    }
    eg->ctx = (struct sbx_conn_ctx){.base = o->base,
                                    .policy = o->policy,
                                    .resolver = o->resolver,
                                    .limits = o->limits,
                                    .on_flow = o->on_flow,
                                    .ud = o->ud};
    if (!(eg->answers = sbx_dns_answers_new(1024))) {
        sbx_err_at(err, SBX_STAGE_EGRESS, ENOMEM, "dns answers");
        goto fail;
    }
    eg->ctx.answers = eg->answers;
    if (o->socks_port && sbx_egress_socks_port_check(o->socks_port, err) < 0)
        goto fail;
    if (in_namespace(netns_fd, &s, o->socks_port, err) < 0)
        goto fail;
    for (int i = 0; i < L_COUNT; i++) {
        if (s.stream[i] < 0)
            continue;
        eg->listeners[i] = evconnlistener_new(
            o->base, on_accept, eg, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, s.stream[i]);
        if (!eg->listeners[i]) {
            sbx_err_at(err, SBX_STAGE_EGRESS, ENOMEM, "listener");
            goto fail;
        }
        s.stream[i] = -1;
    }
    eg->dns = sbx_dns_server_new(o->base, s.dns, o->policy, o->resolver, eg->answers, o->on_flow,
                                 o->ud, err);
    if (!eg->dns)
        goto fail;
    s.dns = -1;
    if (!(eg->synq = sbx_synq_new(&eg->ctx, sbx_steal_fd(&s.synq), err)))
        goto fail;
    eg->ctx.synq = eg->synq;
    return eg;
fail:
    for (int i = 0; i < L_COUNT; i++)
        if (s.stream[i] >= 0)
            close(s.stream[i]);
    if (s.dns >= 0)
        close(s.dns);
    if (s.synq >= 0)
        close(s.synq);
    sbx_egress_free(eg);
    return NULL;
}

int sbx_netns_connect_loopback(int ns, uint16_t port, sbx_err *err)
{
    cleanup_fd int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (ns < 0)
        return sbx_err_set(err, EBADF, "the sandbox has no network namespace of its own");
    if (self < 0)
        return sbx_err_set(err, errno, "open the network namespaces");
    if (setns(ns, CLONE_NEWNET) < 0)
        return sbx_err_set(err, errno, "enter the sandbox's network namespace");
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int saved = errno;
    /* Back home whatever happened: the socket stays in the sandbox's. */
    if (setns(self, CLONE_NEWNET) < 0)
        abort();
    if (fd < 0)
        return sbx_err_set(err, saved, "socket in the sandbox's network namespace");
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 && errno != EINPROGRESS) {
        saved = errno;
        close(fd);
        return sbx_err_set(err, saved, "connect to port %u in the sandbox", (unsigned)port);
    }
    return fd;
}

/* ---- live updates of the sandbox's sets ----
 * A helper process (never the daemon: libnftables waits with select(), see
 * sbx_egress_rules) enters the sandbox's network namespace and applies the
 * new sets in one transaction; the loop watches its pidfd. One at a time:
 * a change made meanwhile is applied after it, from the newest policy. */

static void rules_update(struct sbx_egress *eg);

static void upd_done(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_egress *eg = arg;
    sbx_err got = {0};
    ssize_t n = read(eg->upd_pipe, &got, sizeof(got));
    int status = 0;
    while (waitpid(eg->upd_pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (n == (ssize_t)sizeof(got) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char msg[600];
        got.stage[sizeof(got.stage) - 1] = got.msg[sizeof(got.msg) - 1] = '\0';
        sbx_log(SBX_LOG_WARN, "egress: live update of the sandbox's nftables sets failed: %s",
                n == (ssize_t)sizeof(got) ? sbx_err_format(&got, msg, sizeof(msg))
                                          : "helper ended without applying them");
    }
    event_free(eg->upd_ev);
    eg->upd_ev = NULL;
    close(eg->upd_pidfd);
    close(eg->upd_pipe);
    eg->upd_pidfd = eg->upd_pipe = -1;
    eg->upd_pid = -1;
    if (eg->upd_again) {
        eg->upd_again = false;
        rules_update(eg);
    }
}

static void rules_update(struct sbx_egress *eg)
{
    if (eg->upd_pid > 0) {
        eg->upd_again = true;
        return;
    }
    sbx_err e = {0};
    cleanup_free char *text = sets_update_text(eg->ctx.policy, &e);
    int p[2] = {-1, -1};
    if (!text || sbx_egress_rules_load(&e) < 0 || pipe2(p, O_CLOEXEC) < 0) {
        if (text)
            sbx_err_at(&e, SBX_STAGE_EGRESS, errno, "pipe");
        char msg[600];
        sbx_log(SBX_LOG_WARN, "egress: live update of the sandbox's nftables sets: %s",
                sbx_err_format(&e, msg, sizeof(msg)));
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        /* Into the sandbox's namespace, then only the pipe (as fd 0). */
        int out = p[1];
        if (setns(eg->netns_fd, CLONE_NEWNET) < 0) {
            sbx_err_at(&e, SBX_STAGE_EGRESS, errno, "enter the sandbox's network namespace");
        } else {
            if (dup2(p[1], 0) < 0 || syscall(SYS_close_range, 1, ~0U, 0) < 0)
                _exit(125);
            out = 0;
            if (nft_apply(text, &e) == 0)
                _exit(0);
        }
        (void)!write(out, &e, sizeof(e));
        _exit(1);
    }
    close(p[1]);
    int pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
    struct event *ev = pidfd >= 0 ? event_new(eg->ctx.base, pidfd, EV_READ, upd_done, eg) : NULL;
    if (!ev || event_add(ev, NULL) < 0) {
        sbx_log(SBX_LOG_WARN, "egress: live update of the sandbox's nftables sets: %s",
                pid < 0 ? "fork failed" : "cannot watch its helper");
        if (ev)
            event_free(ev);
        if (pid > 0) {
            kill(pid, SIGKILL);
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
        }
        if (pidfd >= 0)
            close(pidfd);
        close(p[0]);
        return;
    }
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    eg->upd_pid = pid;
    eg->upd_pidfd = pidfd;
    eg->upd_pipe = p[0];
    eg->upd_ev = ev;
}

void sbx_egress_set_policy(struct sbx_egress *eg, const struct sbx_policy *policy)
{
    eg->ctx.policy = policy;
    sbx_dns_server_set_policy(eg->dns, policy);
    rules_update(eg);
}

void sbx_egress_bind(struct sbx_egress *eg, const struct sbx_policy *policy, sbx_flow_cb on_flow,
                     void *ud)
{
    sbx_conn_ctx_close_all(&eg->ctx);
    eg->ctx.policy = policy;
    eg->ctx.on_flow = on_flow;
    eg->ctx.ud = ud;
    sbx_dns_server_set_policy(eg->dns, policy);
    sbx_dns_server_set_flow(eg->dns, on_flow, ud);
}

void sbx_egress_free(struct sbx_egress *eg)
{
    if (!eg)
        return;
    for (int i = 0; i < L_COUNT; i++)
        if (eg->listeners[i])
            evconnlistener_free(eg->listeners[i]);
    if (eg->dns)
        sbx_dns_server_free(eg->dns);
    sbx_synq_free(eg->synq);
    eg->ctx.synq = NULL;
    if (eg->upd_ev) { /* the sandbox is going: its rules go with it */
        event_free(eg->upd_ev);
        kill(eg->upd_pid, SIGKILL);
        while (waitpid(eg->upd_pid, NULL, 0) < 0 && errno == EINTR)
            ;
        close(eg->upd_pidfd);
        close(eg->upd_pipe);
    }
    if (eg->netns_fd >= 0)
        close(eg->netns_fd);
    sbx_conn_ctx_close_all(&eg->ctx);
    sbx_dns_answers_free(eg->answers);
    free(eg);
}
