/* SOCKS5 (RFC 1928): CONNECT only, method 0x00 (no authentication), IPv4,
 * IPv6 and domain targets. Names are resolved by us, never by the client, so
 * the policy judges the address the connection really goes to. */
#include "net/proto.h"

#include <arpa/inet.h>
#include <string.h>
#include <sys/socket.h>

/* Method selection (2 + 255) and a request (4 + 1 + 255 + 2) both fit, with
 * room for what an eager client sends after its request. */
#define SOCKS5_IN_CAP 1024

enum { ST_GREETING, ST_REQUEST, ST_TARGET };

int sbx_socks5_parse_greeting(const uint8_t *buf, size_t len, bool *no_auth)
{
    *no_auth = false;
    if (len < 1)
        return SBX_PARSE_MORE;
    if (buf[0] != 5)
        return SBX_PARSE_BAD;
    if (len < 2)
        return SBX_PARSE_MORE;
    size_t n = buf[1];
    if (n == 0)
        return SBX_PARSE_BAD;
    if (len < 2 + n)
        return SBX_PARSE_MORE;
    for (size_t i = 0; i < n; i++)
        if (buf[2 + i] == 0x00)
            *no_auth = true;
    return (int)(2 + n);
}

static int bad(struct sbx_socks5_req *out, uint8_t reply, const char *why)
{
    out->reply = reply;
    out->why = why;
    return SBX_PARSE_BAD;
}

/* A name that is really an address literal is taken as the address, so
 * address rules judge it exactly as if it had been sent as one. */
static int take_name(struct sbx_socks5_req *out, const uint8_t *p, size_t n)
{
    if (memchr(p, 0, n))
        return bad(out, SBX_SOCKS5_FAILURE, "NUL in name");
    memcpy(out->name, p, n);
    out->name[n] = 0;
    if (inet_pton(AF_INET, out->name, &out->addr.u.v4) == 1) {
        out->addr.family = AF_INET;
        out->name[0] = 0;
    } else if (inet_pton(AF_INET6, out->name, &out->addr.u.v6) == 1) {
        out->addr.family = AF_INET6;
        out->name[0] = 0;
    } else if (!sbx_dns_name_valid(out->name)) {
        return bad(out, SBX_SOCKS5_HOST_UNREACH, "invalid name");
    }
    return 0;
}

int sbx_socks5_parse_request(const uint8_t *buf, size_t len, struct sbx_socks5_req *out)
{
    memset(out, 0, sizeof(*out));
    if (len < 1)
        return SBX_PARSE_MORE;
    if (buf[0] != 5)
        return bad(out, 0, "bad version");
    if (len < 2)
        return SBX_PARSE_MORE;
    out->cmd = buf[1];
    if (out->cmd != SBX_SOCKS5_CONNECT)
        return bad(out, SBX_SOCKS5_BAD_COMMAND, "unsupported command");
    if (len < 4)
        return SBX_PARSE_MORE;
    out->atyp = buf[3];
    size_t alen;
    switch (out->atyp) {
    case SBX_SOCKS5_ATYP_V4:
        alen = 4;
        break;
    case SBX_SOCKS5_ATYP_V6:
        alen = 16;
        break;
    case SBX_SOCKS5_ATYP_NAME:
        if (len < 5)
            return SBX_PARSE_MORE;
        if (buf[4] == 0)
            return bad(out, SBX_SOCKS5_FAILURE, "empty name");
        alen = 1 + (size_t)buf[4];
        break;
    default:
        return bad(out, SBX_SOCKS5_BAD_ATYP, "bad address type");
    }
    size_t total = 4 + alen + 2;
    if (len < total)
        return SBX_PARSE_MORE;
    const uint8_t *a = buf + 4;
    if (out->atyp == SBX_SOCKS5_ATYP_V4) {
        out->addr.family = AF_INET;
        memcpy(&out->addr.u.v4, a, 4);
    } else if (out->atyp == SBX_SOCKS5_ATYP_V6) {
        out->addr.family = AF_INET6;
        memcpy(&out->addr.u.v6, a, 16);
    } else if (take_name(out, a + 1, alen - 1) < 0) {
        return SBX_PARSE_BAD;
    }
    out->port = (uint16_t)(a[alen] << 8 | a[alen + 1]);
    return (int)total;
}

static void send_reply(struct sbx_conn *c, uint8_t rep)
{
    const uint8_t r[10] = {5, rep, 0, SBX_SOCKS5_ATYP_V4};
    sbx_conn_reply(c, r, sizeof(r));
}

static void socks5_data(struct sbx_conn *c)
{
    if (!sbx_conn_fill(c, "handshake"))
        return;
    size_t len;
    const uint8_t *buf = sbx_conn_data(c, &len);
    if (sbx_conn_stage(c) == ST_GREETING) {
        bool no_auth;
        int r = sbx_socks5_parse_greeting(buf, len, &no_auth);
        if (r == SBX_PARSE_MORE)
            return;
        if (r == SBX_PARSE_BAD || !no_auth) {
            if (buf[0] == 5)
                sbx_conn_reply(c, "\x05\xff", 2);
            sbx_conn_fail(c, r == SBX_PARSE_BAD
                                 ? (buf[0] == 5 ? "no methods offered" : "bad version")
                                 : "no acceptable method (only 0x00)");
            return;
        }
        if (sbx_conn_reply(c, "\x05\x00", 2) < 0) {
            sbx_conn_fail(c, "client does not read");
            return;
        }
        sbx_conn_consume(c, (size_t)r);
        sbx_conn_set_stage(c, ST_REQUEST);
        buf = sbx_conn_data(c, &len);
    }
    struct sbx_socks5_req req;
    int r = sbx_socks5_parse_request(buf, len, &req);
    if (r == SBX_PARSE_MORE)
        return;
    if (r == SBX_PARSE_BAD) {
        if (req.reply)
            send_reply(c, req.reply);
        sbx_conn_fail(c, "%s", req.why);
        return;
    }
    sbx_conn_consume(c, (size_t)r);
    sbx_conn_set_stage(c, ST_TARGET);
    sbx_conn_target(c, req.name[0] ? req.name : NULL, req.addr.family ? &req.addr : NULL, req.port);
}

static void socks5_denied(struct sbx_conn *c, const char *rule, bool by_limit)
{
    if (by_limit)
        /* Nothing read yet: the only refusal method selection can carry. */
        sbx_conn_reply(c, "\x05\xff", 2);
    else
        send_reply(c, SBX_SOCKS5_NOT_ALLOWED);
}

static void socks5_failed(struct sbx_conn *c, int errnum, const char *what)
{
    if (sbx_conn_stage(c) != ST_TARGET)
        return; /* a handshake timeout: no request to answer */
    uint8_t rep;
    if (strcmp(what, "resolve") == 0)
        rep = SBX_SOCKS5_HOST_UNREACH;
    else if (errnum == ECONNREFUSED)
        rep = SBX_SOCKS5_REFUSED;
    else if (errnum == ENETUNREACH)
        rep = SBX_SOCKS5_NET_UNREACH;
    else if (errnum == EHOSTUNREACH || errnum == ETIMEDOUT)
        rep = SBX_SOCKS5_HOST_UNREACH;
    else
        rep = SBX_SOCKS5_FAILURE;
    send_reply(c, rep);
}

static void socks5_connected(struct sbx_conn *c)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    uint8_t r[22] = {5, SBX_SOCKS5_OK, 0, SBX_SOCKS5_ATYP_V4};
    size_t n = 10;
    if (getsockname(sbx_conn_upstream_fd(c), (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            const struct sockaddr_in *sin = (const struct sockaddr_in *)&ss;
            memcpy(r + 4, &sin->sin_addr, 4);
            memcpy(r + 8, &sin->sin_port, 2);
        } else if (ss.ss_family == AF_INET6) {
            const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&ss;
            r[3] = SBX_SOCKS5_ATYP_V6;
            memcpy(r + 4, &sin6->sin6_addr, 16);
            memcpy(r + 20, &sin6->sin6_port, 2);
            n = 22;
        }
    }
    sbx_conn_queue_client(c, r, n);
}

static const struct sbx_conn_ops socks5_ops = {
    .via = SBX_VIA_SOCKS5,
    .proto = "socks5",
    .on_client_data = socks5_data,
    .on_denied = socks5_denied,
    .on_failed = socks5_failed,
    .on_connected = socks5_connected,
};

void sbx_socks5_accept(struct sbx_conn_ctx *c, int fd)
{
    sbx_conn_new(c, fd, &socks5_ops, SOCKS5_IN_CAP, NULL, 0);
}
