/* helper_util.h: what the sandbox helper programs (probe, netprobe) share.
 *
 * tests/CMakeLists.txt builds every .c file in this folder as a static program
 * of its own, so the shared code lives here as static inline functions rather
 * than in a library: each helper stays one translation unit, and one that uses
 * only part of this file builds without unused-function warnings (the helpers
 * build with -Werror).
 *
 * The netlink requests are built here once so that probe (which expects the
 * kernel to refuse them) and netprobe (which reports what the kernel answered)
 * send the very same bytes. */
#ifndef SBX_TESTS_HELPER_UTIL_H
#define SBX_TESTS_HELPER_UTIL_H

/* strerrorname_np needs _GNU_SOURCE, and it only takes effect when defined
 * before the first system header: the including file has to do it. */
#ifndef _GNU_SOURCE
#error "define _GNU_SOURCE before any #include"
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

/* The errno's symbolic name ("EPERM"): what the helpers print and the Python
 * side matches on, the same whatever the libc's message texts. */
static inline const char *ename(int e)
{
    const char *n = strerrorname_np(e);
    return n ? n : "E?";
}

/* --- netlink requests -------------------------------------------------------- */

/* Room for the largest request the helpers send (an nftables batch). A
 * zero-initialised buffer ({.len = 0}) also leaves every padding byte zero. */
struct nlbuf {
    char data[2048];
    size_t len;
};

/* Appends a message with a fixed body; its header, for nl_attr. */
static inline struct nlmsghdr *nl_add(struct nlbuf *b, uint16_t type, uint16_t flags,
                                      const void *body, size_t blen)
{
    struct nlmsghdr *h = (struct nlmsghdr *)(b->data + b->len);
    memset(h, 0, NLMSG_SPACE(blen));
    h->nlmsg_len = (uint32_t)NLMSG_LENGTH(blen);
    h->nlmsg_type = type;
    h->nlmsg_flags = flags;
    h->nlmsg_seq = (uint32_t)(b->len + 1);
    memcpy(NLMSG_DATA(h), body, blen);
    b->len += NLMSG_SPACE(blen);
    return h;
}

/* Appends an attribute to h, the last message in b. */
static inline void nl_attr(struct nlbuf *b, struct nlmsghdr *h, uint16_t type, const void *v,
                           size_t n)
{
    struct rtattr *a = (struct rtattr *)(b->data + b->len);
    a->rta_type = type;
    a->rta_len = (unsigned short)RTA_LENGTH(n);
    memcpy(RTA_DATA(a), v, n);
    memset((char *)RTA_DATA(a) + n, 0, RTA_SPACE(n) - RTA_LENGTH(n));
    h->nlmsg_len += (uint32_t)RTA_SPACE(n);
    b->len += RTA_SPACE(n);
}

/* Opens a netlink socket of proto and sends b to the kernel; the socket, or -1
 * with errno. Replies wait at most 2 s, so a kernel that never acks cannot hang
 * a helper (and with it the test's sandbox run). */
static inline int nl_send(int proto, const struct nlbuf *b)
{
    int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, proto);
    if (s < 0)
        return -1;
    struct timeval tv = {.tv_sec = 2};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    if (sendto(s, b->data, b->len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
        int e = errno;
        close(s);
        errno = e;
        return -1;
    }
    return s;
}

/* An nftables batch of one table message (msg: NFT_MSG_NEWTABLE, ...) for
 * family; table NULL leaves the name out (a DELTABLE then means every table). */
static inline void nft_table_batch(struct nlbuf *b, uint16_t msg, int family, const char *table,
                                   uint16_t flags)
{
    struct nfgenmsg batch = {
        .nfgen_family = AF_UNSPEC, .version = NFNETLINK_V0, .res_id = htons(NFNL_SUBSYS_NFTABLES)};
    nl_add(b, NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, &batch, sizeof(batch));
    struct nfgenmsg tbl = {.nfgen_family = (uint8_t)family, .version = NFNETLINK_V0};
    struct nlmsghdr *h = nl_add(b, (NFNL_SUBSYS_NFTABLES << 8) | msg,
                                NLM_F_REQUEST | NLM_F_ACK | flags, &tbl, sizeof(tbl));
    if (table)
        nl_attr(b, h, NFTA_TABLE_NAME, table, strlen(table) + 1);
    nl_add(b, NFNL_MSG_BATCH_END, NLM_F_REQUEST, &batch, sizeof(batch));
}

/* A route message (RTM_NEWROUTE, RTM_DELROUTE) for dst/dst_len via lo in the
 * main table; dst_len 0 is the default route. */
static inline void rtm_route_msg(struct nlbuf *b, uint16_t type, uint16_t flags, uint32_t dst,
                                 int dst_len)
{
    struct rtmsg rt = {.rtm_family = AF_INET,
                       .rtm_dst_len = (unsigned char)dst_len,
                       .rtm_table = RT_TABLE_MAIN,
                       .rtm_protocol = RTPROT_BOOT,
                       .rtm_scope = RT_SCOPE_LINK,
                       .rtm_type = RTN_UNICAST};
    struct nlmsghdr *h = nl_add(b, type, NLM_F_REQUEST | NLM_F_ACK | flags, &rt, sizeof(rt));
    struct in_addr a = {htonl(dst)};
    int oif = (int)if_nametoindex("lo");
    if (dst_len)
        nl_attr(b, h, RTA_DST, &a, sizeof(a));
    nl_attr(b, h, RTA_OIF, &oif, sizeof(oif));
}

/* An RTM_NEWLINK that takes lo down. */
static inline void rtm_link_down_msg(struct nlbuf *b)
{
    struct ifinfomsg ii = {.ifi_family = AF_UNSPEC,
                           .ifi_index = (int)if_nametoindex("lo"),
                           .ifi_flags = 0,
                           .ifi_change = IFF_UP};
    nl_add(b, RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, &ii, sizeof(ii));
}

#endif
