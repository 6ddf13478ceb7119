/* The transparent listener: nftables in the sandbox's namespace redirect
 * every TCP connection that would leave it to us; SO_ORIGINAL_DST (or its
 * IPv6 twin) tells where it was going. The domain is only what our own DNS
 * answered for that address, never what the bytes claim (SNI, Host). A
 * denial or a failed connect resets the connection, as a firewall would. */
#include "net/proto.h"
#include "net/synq.h"

#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6/ip6_tables.h>
#include <string.h>
#include <sys/socket.h>

int sbx_transparent_orig_dst_sockopt(int fd, struct sbx_addr *addr, uint16_t *port)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        return -1;
    memset(addr, 0, sizeof(*addr));
    if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 sin6;
        len = sizeof(sin6);
        if (getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &sin6, &len) == 0) {
            addr->family = AF_INET6;
            addr->u.v6 = sin6.sin6_addr;
            *port = ntohs(sin6.sin6_port);
            return 0;
        }
        /* An IPv4 connection on a dual-stack socket is tracked as IPv4. */
    }
    struct sockaddr_in sin;
    len = sizeof(sin);
    if (getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &sin, &len) < 0)
        return -1;
    addr->family = AF_INET;
    addr->u.v4 = sin.sin_addr;
    *port = ntohs(sin.sin_port);
    return 0;
}

sbx_orig_dst_fn sbx_transparent_orig_dst = sbx_transparent_orig_dst_sockopt;

/* The client's end as the sandbox's SYN carried it. */
static int peer_of(int fd, struct sbx_addr *addr, uint16_t *port)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getpeername(fd, (struct sockaddr *)&ss, &len) < 0)
        return -1;
    memset(addr, 0, sizeof(*addr));
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)&ss;
        addr->family = AF_INET;
        addr->u.v4 = sin->sin_addr;
        *port = ntohs(sin->sin_port);
        return 0;
    }
    const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&ss;
    addr->family = AF_INET6;
    addr->u.v6 = sin6->sin6_addr;
    *port = ntohs(sin6->sin6_port);
    if (IN6_IS_ADDR_V4MAPPED(&addr->u.v6)) { /* an IPv4 client on a dual-stack socket */
        addr->family = AF_INET;
        memcpy(&addr->u.v4, &addr->u.v6.s6_addr[12], 4);
    }
    return 0;
}

static const struct sbx_conn_ops transparent_ops = {
    .via = SBX_VIA_TRANSPARENT,
    .proto = "transparent",
    .reset_on_refusal = true,
};

void sbx_transparent_accept(struct sbx_conn_ctx *c, int fd)
{
    struct sbx_addr addr;
    uint16_t port = 0;
    bool known = sbx_transparent_orig_dst(fd, &addr, &port) == 0;
    int errnum = errno;
    struct sbx_conn *conn = sbx_conn_new(c, fd, &transparent_ops, 0, known ? &addr : NULL, port);
    if (!conn)
        return;
    if (!known) {
        sbx_conn_fail(conn, "original destination: %s", sbx_errno_name(errnum));
        return;
    }
    const char *name = c->answers ? sbx_dns_answers_lookup(c->answers, &addr) : NULL;
    /* Connected already for its SYN (net/synq.h): the SYN queue judged it. */
    char rule[128];
    struct sbx_addr src;
    uint16_t sport;
    int ufd = c->synq && peer_of(fd, &src, &sport) == 0
                  ? sbx_synq_take(c->synq, &src, sport, &addr, port, rule, sizeof(rule))
                  : -1;
    /* An alias our DNS gave for the host's loopback: its real address. */
    struct sbx_addr real;
    if (name && sbx_dns_answers_real(c->answers, &addr, &real))
        addr = real;
    if (ufd >= 0)
        sbx_conn_target_connected(conn, name, &addr, port, ufd, rule);
    else
        sbx_conn_target(conn, name, &addr, port);
}
