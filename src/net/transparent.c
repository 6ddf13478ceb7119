/* The transparent listener: nftables in the sandbox's namespace redirect
 * every TCP connection that would leave it to us; SO_ORIGINAL_DST (or its
 * IPv6 twin) tells where it was going. The domain is only what our own DNS
 * answered for that address, never what the bytes claim (SNI, Host). A
 * denial or a failed connect resets the connection, as a firewall would. */
#include "net/proto.h"

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
    /* An alias our DNS gave for the host's loopback: its real address. */
    struct sbx_addr real;
    if (name && sbx_dns_answers_real(c->answers, &addr, &real))
        addr = real;
    sbx_conn_target(conn, name, &addr, port);
}
