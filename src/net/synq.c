#include "net/synq.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nf_tables_compat.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <linux/netfilter/xt_NFQUEUE.h>
#include <netinet/ip.h>
#include <netinet/ip6.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/time.h"
#include "isolate/stage.h"
#include "net/proto.h"
#include "net/resolve.h"

#define QUEUE_NUM 0

/* ---- in the rules process: the rule ---- */

static struct nlmsghdr *nfnl_header(char *buf, uint16_t type, uint16_t flags, uint32_t seq,
                                    uint8_t family, uint16_t res_id)
{
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = type;
    nlh->nlmsg_flags = NLM_F_REQUEST | flags;
    nlh->nlmsg_seq = seq;
    struct nfgenmsg *g = mnl_nlmsg_put_extra_header(nlh, sizeof(*g));
    g->nfgen_family = family;
    g->version = NFNETLINK_V0;
    g->res_id = htons(res_id);
    return nlh;
}

/* One nf_tables transaction: append to inet sandbox's chain syn_queue the
 * rule `xt target NFQUEUE --queue-num 0` (no bypass: without a reader the
 * kernel drops). nft's text has no way to write an xtables target, so the
 * message is built here. */
int sbx_synq_rule(sbx_err *err)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    uint32_t seq = 1;
    struct mnl_nlmsg_batch *b = mnl_nlmsg_batch_start(buf, sizeof(buf));
    nfnl_header(mnl_nlmsg_batch_current(b), NFNL_MSG_BATCH_BEGIN, 0, seq++, AF_UNSPEC,
                NFNL_SUBSYS_NFTABLES);
    mnl_nlmsg_batch_next(b);
    uint32_t rule_seq = seq;
    struct nlmsghdr *nlh =
        nfnl_header(mnl_nlmsg_batch_current(b), (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWRULE,
                    NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK, seq++, NFPROTO_INET, 0);
    mnl_attr_put_strz(nlh, NFTA_RULE_TABLE, "sandbox");
    mnl_attr_put_strz(nlh, NFTA_RULE_CHAIN, "syn_queue");
    struct nlattr *exprs = mnl_attr_nest_start(nlh, NFTA_RULE_EXPRESSIONS);
    struct nlattr *elem = mnl_attr_nest_start(nlh, NFTA_LIST_ELEM);
    mnl_attr_put_strz(nlh, NFTA_EXPR_NAME, "target");
    struct nlattr *data = mnl_attr_nest_start(nlh, NFTA_EXPR_DATA);
    mnl_attr_put_strz(nlh, NFTA_TARGET_NAME, "NFQUEUE");
    mnl_attr_put_u32(nlh, NFTA_TARGET_REV, htonl(3));
    struct xt_NFQ_info_v3 info = {.queuenum = QUEUE_NUM, .queues_total = 1, .flags = 0};
    mnl_attr_put(nlh, NFTA_TARGET_INFO, sizeof(info), &info);
    mnl_attr_nest_end(nlh, data);
    mnl_attr_nest_end(nlh, elem);
    mnl_attr_nest_end(nlh, exprs);
    mnl_nlmsg_batch_next(b);
    nfnl_header(mnl_nlmsg_batch_current(b), NFNL_MSG_BATCH_END, 0, seq++, AF_UNSPEC,
                NFNL_SUBSYS_NFTABLES);
    mnl_nlmsg_batch_next(b);

    struct mnl_socket *nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
    int rc = -1;
    if (!nl || mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
        sbx_err_at(err, SBX_STAGE_EGRESS, errno, "nfnetlink");
        goto out;
    }
    if (mnl_socket_sendto(nl, mnl_nlmsg_batch_head(b), mnl_nlmsg_batch_size(b)) < 0) {
        sbx_err_at(err, SBX_STAGE_EGRESS, errno, "send the SYN queue rule");
        goto out;
    }
    ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
    if (n < 0 || mnl_cb_run(buf, (size_t)n, rule_seq, mnl_socket_get_portid(nl), NULL, NULL) < 0) {
        sbx_err_at(err, SBX_STAGE_EGRESS, errno,
                   "the SYN queue rule (xtables NFQUEUE target through nft_compat)");
        goto out;
    }
    rc = 0;
out:
    mnl_nlmsg_batch_stop(b);
    if (nl)
        mnl_socket_close(nl);
    return rc;
}

/* ---- inside the namespace: the queue's socket ---- */

static int queue_config(struct mnl_socket *nl, uint32_t seq, sbx_err *err)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = nfnl_header(buf, (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_CONFIG, NLM_F_ACK,
                                       seq, AF_UNSPEC, QUEUE_NUM);
    if (seq == 1) {
        struct nfqnl_msg_config_cmd cmd = {.command = NFQNL_CFG_CMD_BIND};
        mnl_attr_put(nlh, NFQA_CFG_CMD, sizeof(cmd), &cmd);
    } else {
        /* The headers are all we read: IPv6's 40 + TCP's 20, with room. */
        struct nfqnl_msg_config_params p = {.copy_range = htonl(128),
                                            .copy_mode = NFQNL_COPY_PACKET};
        mnl_attr_put(nlh, NFQA_CFG_PARAMS, sizeof(p), &p);
        mnl_attr_put_u32(nlh, NFQA_CFG_QUEUE_MAXLEN, htonl(SBX_SYNQ_MAX));
    }
    if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
        return sbx_err_at(err, SBX_STAGE_EGRESS, errno, "send the SYN queue's configuration");
    ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
    if (n < 0 || mnl_cb_run(buf, (size_t)n, seq, mnl_socket_get_portid(nl), NULL, NULL) < 0)
        return sbx_err_at(err, SBX_STAGE_EGRESS, errno, "bind the SYN queue (nfnetlink_queue)");
    return 0;
}

int sbx_synq_open(sbx_err *err)
{
    struct mnl_socket *nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
    if (!nl || mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
        if (nl)
            mnl_socket_close(nl);
        return sbx_err_at(err, SBX_STAGE_EGRESS, errno, "nfnetlink (SYN queue)");
    }
    if (queue_config(nl, 1, err) < 0 || queue_config(nl, 2, err) < 0) {
        mnl_socket_close(nl);
        return -1;
    }
    int fd = fcntl(mnl_socket_get_fd(nl), F_DUPFD_CLOEXEC, 3);
    int saved = errno;
    mnl_socket_close(nl);
    if (fd < 0)
        return sbx_err_at(err, SBX_STAGE_EGRESS, saved, "SYN queue socket");
    /* Lost messages (a full socket) are SYNs the kernel dropped: the clients
     * send them again; nothing to learn from ENOBUFS. */
    int one = 1;
    setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof(one));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* ---- on the loop ---- */

/* A SYN being judged: made at its first packet, gone once the listener takes
 * its upstream, or at its refusal or timeout. */
struct entry {
    struct entry *next, **pprev; /* q->live */
    struct sbx_synq *q;
    bool held, ready;
    uint32_t id; /* of the held packet */
    struct sbx_addr src, dst, real;
    uint16_t sport, dport;
    int ufd;
    struct event *ev, *timer;
    double held_at, deadline; /* sbx_mono_s() */
    char name[256];
    char rule[128];
    double start; /* for the flow */
};

struct sbx_synq {
    struct sbx_conn_ctx *ctx;
    int fd;
    struct event *ev;
    struct entry *live;
    unsigned n; /* in live, at most SBX_SYNQ_MAX */
};

static void verdict(struct sbx_synq *q, uint32_t id, uint32_t v, bool mark)
{
    char buf[256];
    struct nlmsghdr *nlh =
        nfnl_header(buf, (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_VERDICT, 0, 0, AF_UNSPEC, QUEUE_NUM);
    struct nfqnl_msg_verdict_hdr vh = {.verdict = htonl(v), .id = htonl(id)};
    mnl_attr_put(nlh, NFQA_VERDICT_HDR, sizeof(vh), &vh);
    if (mark)
        mnl_attr_put_u32(nlh, NFQA_MARK, htonl(SBX_SYNQ_REJECT_MARK));
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
    /* A verdict the kernel cannot take leaves the packet to its queue's
     * end (dropped with the socket): nothing else to do here. */
    (void)!sendto(q->fd, nlh, nlh->nlmsg_len, MSG_DONTWAIT, (struct sockaddr *)&sa, sizeof(sa));
}

static void refuse_now(struct sbx_synq *q, uint32_t id)
{
    verdict(q, id, NF_ACCEPT, true);
}

static void report(struct sbx_synq *q, const struct entry *en, enum sbx_verdict v, const char *rule)
{
    struct sbx_flow f = {.start = en->start, .via = SBX_VIA_TRANSPARENT, .verdict = v};
    snprintf(f.name, sizeof(f.name), "%s", en->name);
    snprintf(f.rule, sizeof(f.rule), "%s", rule);
    f.addr = en->real;
    f.port = en->dport;
    sbx_conn_report_flow(q->ctx, &f);
}

static void release(struct entry *en)
{
    if (en->held)
        verdict(en->q, en->id, NF_DROP, false);
    if (en->ev)
        event_free(en->ev);
    if (en->timer)
        event_free(en->timer);
    if (en->ufd >= 0)
        close(en->ufd);
    *en->pprev = en->next;
    if (en->next)
        en->next->pprev = en->pprev;
    en->q->n--;
    free(en);
}

static double connect_s(const struct sbx_conn_ctx *ctx)
{
    return ctx->limits.connect_timeout_s > 0 ? ctx->limits.connect_timeout_s : 10.0;
}

static void arm(struct entry *en)
{
    double now = sbx_mono_s(), next = en->deadline;
    if (en->held && en->held_at + SBX_SYNQ_HOLD_S < next)
        next = en->held_at + SBX_SYNQ_HOLD_S;
    double s = next > now ? next - now : 0;
    struct timeval tv = {.tv_sec = (time_t)s,
                         .tv_usec = (suseconds_t)((s - (double)(time_t)s) * 1e6)};
    evtimer_add(en->timer, &tv);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct entry *en = arg;
    double now = sbx_mono_s();
    if (now >= en->deadline) {
        if (!en->ready)
            report(en->q, en, SBX_VERDICT_ALLOW, "connect: ETIMEDOUT");
        release(en); /* a held SYN is dropped: the client times out */
        return;
    }
    if (en->held && now >= en->held_at + SBX_SYNQ_HOLD_S) {
        verdict(en->q, en->id, NF_DROP, false);
        en->held = false;
    }
    arm(en);
}

static void on_upstream(evutil_socket_t fd, short what, void *arg)
{
    struct entry *en = arg;
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(en->ufd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    event_free(en->ev);
    en->ev = NULL;
    if (err == 0) {
        en->ready = true;
        en->deadline = sbx_mono_s() + SBX_SYNQ_UNUSED_S;
        if (en->held) {
            verdict(en->q, en->id, NF_ACCEPT, false);
            en->held = false;
        }
        arm(en);
        return;
    }
    char rule[64];
    snprintf(rule, sizeof(rule), "connect: %s", sbx_errno_name(err));
    report(en->q, en, SBX_VERDICT_ALLOW, rule);
    /* No answer: as without a proxy, the client times out; any other
     * failure (refused, unreachable) is refused at connect. */
    if (en->held && err != ETIMEDOUT) {
        refuse_now(en->q, en->id);
        en->held = false;
    }
    release(en);
}

/* The SYN's addresses and ports from its IP and TCP headers. */
static bool parse_syn(const uint8_t *p, size_t len, struct entry *en)
{
    size_t off;
    if (len >= sizeof(struct iphdr) && (p[0] >> 4) == 4) {
        const struct iphdr *ip = (const void *)p;
        off = (size_t)ip->ihl * 4;
        if (ip->protocol != IPPROTO_TCP || off < sizeof(*ip))
            return false;
        en->src.family = en->dst.family = AF_INET;
        memcpy(&en->src.u.v4, &ip->saddr, 4);
        memcpy(&en->dst.u.v4, &ip->daddr, 4);
    } else if (len >= sizeof(struct ip6_hdr) && (p[0] >> 4) == 6) {
        const struct ip6_hdr *ip6 = (const void *)p;
        /* Our own sandboxes' SYNs carry no extension headers. */
        if (ip6->ip6_nxt != IPPROTO_TCP)
            return false;
        off = sizeof(*ip6);
        en->src.family = en->dst.family = AF_INET6;
        en->src.u.v6 = ip6->ip6_src;
        en->dst.u.v6 = ip6->ip6_dst;
    } else {
        return false;
    }
    if (len < off + 4)
        return false;
    en->sport = (uint16_t)(p[off] << 8 | p[off + 1]);
    en->dport = (uint16_t)(p[off + 2] << 8 | p[off + 3]);
    return true;
}

static struct entry *find(struct sbx_synq *q, const struct sbx_addr *src, uint16_t sport,
                          const struct sbx_addr *dst, uint16_t dport)
{
    for (struct entry *en = q->live; en; en = en->next)
        if (en->sport == sport && en->dport == dport && sbx_addr_eq(&en->src, src) &&
            sbx_addr_eq(&en->dst, dst))
            return en;
    return NULL;
}

/* A new entry (a copy of probe) in q->live, or NULL when q is full. */
static struct entry *add_entry(struct sbx_synq *q, const struct entry *probe)
{
    struct entry *en = q->n < SBX_SYNQ_MAX ? malloc(sizeof(*en)) : NULL;
    if (!en)
        return NULL;
    *en = *probe;
    en->q = q;
    en->ufd = -1;
    en->next = q->live;
    en->pprev = &q->live;
    if (q->live)
        q->live->pprev = &en->next;
    q->live = en;
    q->n++;
    return en;
}

static void on_syn(struct sbx_synq *q, uint32_t id, const uint8_t *p, size_t len)
{
    struct entry probe = {0};
    if (!parse_syn(p, len, &probe)) {
        verdict(q, id, NF_DROP, false);
        return;
    }
    struct entry *en = find(q, &probe.src, probe.sport, &probe.dst, probe.dport);
    if (en) {
        /* A retransmission: it waits in place of the one held before. */
        if (en->held)
            verdict(q, en->id, NF_DROP, false);
        en->held = false;
        if (en->ready) {
            verdict(q, id, NF_ACCEPT, false);
            return;
        }
        en->id = id;
        en->held = true;
        en->held_at = sbx_mono_s();
        arm(en);
        return;
    }
    struct sbx_conn_ctx *ctx = q->ctx;
    probe.start = (double)sbx_now_ms() / 1e3;
    probe.real = probe.dst;
    const char *name = ctx->answers ? sbx_dns_answers_lookup(ctx->answers, &probe.dst) : NULL;
    if (name) {
        snprintf(probe.name, sizeof(probe.name), "%s", name);
        /* An alias our DNS gave for the host's loopback: its real address. */
        (void)sbx_dns_answers_real(ctx->answers, &probe.dst, &probe.real);
    }
    struct sbx_decision d;
    sbx_policy_check(ctx->policy, name, &probe.real, probe.dport, &d);
    /* Over a limit the listener would reset it after accepting it: refused
     * now, before the upstream sees anything. */
    if (d.verdict == SBX_VERDICT_ALLOW && sbx_conn_over_limit(ctx, d.rule, sizeof(d.rule)))
        d.verdict = SBX_VERDICT_DENY;
    if (d.verdict != SBX_VERDICT_ALLOW) {
        refuse_now(q, id);
        report(q, &probe, SBX_VERDICT_DENY, d.rule);
        return;
    }
    if (!(en = add_entry(q, &probe))) {
        verdict(q, id, NF_DROP, false); /* full: the retransmission tries again */
        return;
    }
    snprintf(en->rule, sizeof(en->rule), "%s", d.rule);
    en->timer = evtimer_new(ctx->base, on_timer, en);
    struct sockaddr_storage ss;
    socklen_t sl = sbx_sockaddr_of(&en->real, en->dport, &ss);
    en->ufd = socket(en->real.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int rc = en->ufd < 0 ? -1 : connect(en->ufd, (struct sockaddr *)&ss, sl);
    int err = rc < 0 ? errno : 0;
    if (en->timer && rc < 0 && err == EINPROGRESS) {
        en->ev = event_new(ctx->base, en->ufd, EV_WRITE, on_upstream, en);
        if (en->ev && event_add(en->ev, NULL) == 0) {
            en->id = id;
            en->held = true;
            en->held_at = sbx_mono_s();
            en->deadline = en->held_at + connect_s(ctx);
            arm(en);
            return;
        }
        err = ENOMEM;
    }
    if (en->timer && rc == 0) { /* connected at once (loopback) */
        en->ready = true;
        en->deadline = sbx_mono_s() + SBX_SYNQ_UNUSED_S;
        verdict(q, id, NF_ACCEPT, false);
        arm(en);
        return;
    }
    if (!en->timer)
        err = ENOMEM;
    char rule[64];
    snprintf(rule, sizeof(rule), "connect: %s", sbx_errno_name(err));
    report(q, en, SBX_VERDICT_ALLOW, rule);
    refuse_now(q, id);
    release(en);
}

static int on_message(const struct nlmsghdr *nlh, void *arg)
{
    struct sbx_synq *q = arg;
    if ((nlh->nlmsg_type & 0xff) != NFQNL_MSG_PACKET)
        return MNL_CB_OK;
    const struct nlattr *hdr_a = NULL, *payload = NULL;
    const struct nlattr *a;
    mnl_attr_for_each(a, nlh, sizeof(struct nfgenmsg))
    {
        if (mnl_attr_get_type(a) == NFQA_PACKET_HDR &&
            mnl_attr_get_payload_len(a) >= sizeof(struct nfqnl_msg_packet_hdr))
            hdr_a = a;
        else if (mnl_attr_get_type(a) == NFQA_PAYLOAD)
            payload = a;
    }
    if (!hdr_a)
        return MNL_CB_OK;
    const struct nfqnl_msg_packet_hdr *ph = mnl_attr_get_payload(hdr_a);
    uint32_t id = ntohl(ph->packet_id);
    if (!payload) {
        verdict(q, id, NF_DROP, false);
        return MNL_CB_OK;
    }
    on_syn(q, id, mnl_attr_get_payload(payload), mnl_attr_get_payload_len(payload));
    return MNL_CB_OK;
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_synq *q = arg;
    char buf[8192];
    /* A bounded batch per wake-up: the loop serves the others too. */
    for (int i = 0; i < 64; i++) {
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n <= 0)
            return;
        (void)mnl_cb_run(buf, (size_t)n, 0, 0, on_message, q);
    }
}

struct sbx_synq *sbx_synq_new(struct sbx_conn_ctx *ctx, int fd, sbx_err *err)
{
    struct sbx_synq *q = calloc(1, sizeof(*q));
    if (q) {
        q->ctx = ctx;
        q->fd = fd;
        q->ev = event_new(ctx->base, fd, EV_READ | EV_PERSIST, on_readable, q);
    }
    if (!q || !q->ev || event_add(q->ev, NULL) < 0) {
        if (q && q->ev)
            event_free(q->ev);
        free(q);
        close(fd);
        sbx_err_at(err, SBX_STAGE_EGRESS, ENOMEM, "SYN queue");
        return NULL;
    }
    return q;
}

int sbx_synq_take(struct sbx_synq *q, const struct sbx_addr *src, uint16_t sport,
                  const struct sbx_addr *dst, uint16_t dport, char *rule, size_t rule_len)
{
    struct entry *en = q ? find(q, src, sport, dst, dport) : NULL;
    if (!en || !en->ready)
        return -1;
    int fd = en->ufd;
    en->ufd = -1;
    snprintf(rule, rule_len, "%s", en->rule);
    release(en);
    return fd;
}

void sbx_synq_free(struct sbx_synq *q)
{
    if (!q)
        return;
    while (q->live)
        release(q->live);
    event_free(q->ev);
    close(q->fd); /* the kernel drops what is still queued */
    free(q);
}
