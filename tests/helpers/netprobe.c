/* netprobe: the network clients and attacks that tests/integration/test_network.py
 * and tests/security/test_net_probes.py run inside sandboxes (in the lab of
 * tests/integration/netlab.py; never against a real network).
 *
 *   netprobe COMMAND [ARGS...]
 *
 * It judges nothing: every attempt prints one line of facts, "key=value" pairs
 * (values with spaces in double quotes, shell-style), which the Python side
 * parses and judges (a transparent connection that was reset, a SOCKS reply
 * code, an HTTP status). Exit status 0, or 2 on a usage error.
 *
 *   tcp HOST PORT ...           raw connect() (the transparent path), HTTP GET
 *                               (Host: $NETPROBE_HOST when set, else HOST)
 *   socks HOST PORT ...         SOCKS5 CONNECT via 127.0.0.1:1080 (names: ATYP 3)
 *   connect HOST PORT ...       HTTP CONNECT via 127.0.0.1:3128, then GET inside
 *   get HOST PORT ...           absolute-form GET via 127.0.0.1:3128
 *   udp HOST PORT ...           sendto, connect+send, then wait for a reply
 *   sockets                     raw, packet and ICMP sockets
 *   dns NAME TYPE ...           one question to 127.0.0.1:53 (TYPE: A, AAAA, TXT, ...)
 *   dns-junk [CASE...]          malformed DNS packets to 127.0.0.1:53
 *   netconfig                   nftables and routing changes through netlink
 *   socks-junk                  malformed and truncated SOCKS5 exchanges
 *   http-junk                   malformed HTTP proxy requests
 *
 * HOST is a numeric IPv4 or IPv6 address (an IPv6 one may carry %IFNAME) for
 * tcp and udp; socks, connect and get also take names. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include "helper_util.h"

#define SOCKS_PORT 1080
#define HTTP_PORT 3128
#define IO_TIMEOUT_MS 4000
#define MAXBUF (256 * 1024)

/* Printable, shell-quotable excerpt of data: the first line, at most 160 bytes. */
static const char *excerpt(const char *data, size_t n)
{
    static char out[400];
    size_t o = 0;
    out[o++] = '"';
    for (size_t i = 0; i < n && i < 160 && data[i] != '\r' && data[i] != '\n'; i++) {
        unsigned char c = (unsigned char)data[i];
        if (c == '"' || c == '\\' || c == '$' || c == '`')
            out[o++] = '\\', out[o++] = (char)c;
        else
            out[o++] = (c >= 0x20 && c < 0x7f) ? (char)c : '.';
    }
    out[o++] = '"';
    out[o] = '\0';
    return out;
}

static const char *hex(const unsigned char *d, size_t n)
{
    static char out[80];
    size_t o = 0;
    for (size_t i = 0; i < n && i < 32; i++)
        o += (size_t)snprintf(out + o, sizeof(out) - o, "%02x", d[i]);
    if (n == 0)
        snprintf(out, sizeof(out), "-");
    return out;
}

/* --- addresses and connections ----------------------------------------------- */

struct target {
    struct sockaddr_storage ss;
    socklen_t len;
};

/* Numeric HOST (v4, v6, v6%ifname) and PORT into t; false if not numeric. */
static bool numeric(const char *host, int port, struct target *t)
{
    memset(t, 0, sizeof(*t));
    struct sockaddr_in *a4 = (struct sockaddr_in *)&t->ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&t->ss;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        t->len = sizeof(*a4);
        return true;
    }
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", host);
    char *pct = strchr(buf, '%');
    if (pct)
        *pct++ = '\0';
    if (inet_pton(AF_INET6, buf, &a6->sin6_addr) != 1)
        return false;
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)port);
    if (pct)
        a6->sin6_scope_id = if_nametoindex(pct);
    t->len = sizeof(*a6);
    return true;
}

static void timeouts(int fd, int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Connects with a timeout; returns the fd, or -1 with errno. */
static int connect_to(const struct target *t, int ms)
{
    int fd = socket(t->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (const struct sockaddr *)&t->ss, t->len) < 0) {
        if (errno != EINPROGRESS) {
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int r = poll(&p, 1, ms);
        int err = 0;
        socklen_t el = sizeof(err);
        if (r == 0)
            err = ETIMEDOUT;
        else if (r < 0)
            err = errno;
        else
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err) {
            close(fd);
            errno = err;
            return -1;
        }
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    timeouts(fd, IO_TIMEOUT_MS);
    return fd;
}

static int connect_local(int port)
{
    struct target t;
    numeric("127.0.0.1", port, &t);
    return connect_to(&t, IO_TIMEOUT_MS);
}

/* Sends all of buf; returns the count sent, or -1 with errno. */
static ssize_t send_all(int fd, const void *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = send(fd, (const char *)buf + done, n - done, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        done += (size_t)k;
    }
    return (ssize_t)done;
}

/* Reads until EOF, an error, a timeout or `cap` bytes; the reason into end. */
static size_t recv_until_end(int fd, char *buf, size_t cap, const char **end)
{
    size_t got = 0;
    *end = "EOF";
    while (got < cap) {
        ssize_t k = recv(fd, buf + got, cap - got, 0);
        if (k == 0)
            return got;
        if (k < 0) {
            if (errno == EINTR)
                continue;
            *end = (errno == EAGAIN || errno == EWOULDBLOCK) ? "timeout" : ename(errno);
            return got;
        }
        got += (size_t)k;
    }
    *end = "full";
    return got;
}

/* Reads exactly n bytes; false with end set otherwise. */
static bool recv_exact(int fd, void *buf, size_t n, const char **end)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = recv(fd, (char *)buf + got, n - got, 0);
        if (k == 0) {
            *end = "EOF";
            return false;
        }
        if (k < 0) {
            if (errno == EINTR)
                continue;
            *end = (errno == EAGAIN || errno == EWOULDBLOCK) ? "timeout" : ename(errno);
            return false;
        }
        got += (size_t)k;
    }
    return true;
}

/* "host" or "[v6]" for Host headers and CONNECT. */
static const char *authority(const char *host, int port)
{
    static char out[300];
    if (strchr(host, ':'))
        snprintf(out, sizeof(out), "[%s]:%d", host, port);
    else
        snprintf(out, sizeof(out), "%s:%d", host, port);
    return out;
}

static char *buf_alloc(void)
{
    char *b = malloc(MAXBUF);
    if (!b) {
        perror("malloc");
        exit(3);
    }
    return b;
}

/* Sends an HTTP GET on fd and prints sent/recv/end/first (the response's status line). */
static void get_and_print(int fd, const char *host, int port, const char *path)
{
    char req[600];
    int n =
        snprintf(req, sizeof(req),
                 "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: netprobe\r\nConnection: close\r\n\r\n",
                 path, authority(host, port));
    ssize_t s = send_all(fd, req, (size_t)n);
    char *buf = buf_alloc();
    const char *end = "-";
    size_t got = 0;
    if (s >= 0)
        got = recv_until_end(fd, buf, MAXBUF, &end);
    const char *body = memmem(buf, got, "\r\n\r\n", 4);
    printf(" sent=%s recv=%zu end=%s first=%s", s < 0 ? ename(errno) : "ok", got, end,
           excerpt(buf, got));
    printf(" body=%s\n", body ? excerpt(body + 4, got - (size_t)(body + 4 - buf)) : "\"\"");
    free(buf);
}

/* --- tcp: raw connect (the transparent path) --------------------------------- */

static int cmd_tcp(int argc, char **argv)
{
    if (argc % 2)
        return 2;
    for (int i = 0; i < argc; i += 2) {
        struct target t;
        int port = atoi(argv[i + 1]);
        printf("tcp target=%s port=%d", argv[i], port);
        if (!numeric(argv[i], port, &t)) {
            printf(" connect=EINVAL\n");
            continue;
        }
        int fd = connect_to(&t, IO_TIMEOUT_MS);
        if (fd < 0) {
            printf(" connect=%s\n", ename(errno));
            continue;
        }
        printf(" connect=ok");
        /* NETPROBE_HOST: the Host header to claim (a forged name). */
        const char *claim = getenv("NETPROBE_HOST");
        get_and_print(fd, claim && *claim ? claim : argv[i], port, "/netprobe");
        close(fd);
    }
    return 0;
}

/* --- socks ------------------------------------------------------------------- */

/* SOCKS5 request for host:port into req; its length. */
static size_t socks_request(unsigned char *req, int cmd, const char *host, int port)
{
    size_t n = 0;
    req[n++] = 5;
    req[n++] = (unsigned char)cmd;
    req[n++] = 0;
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1) {
        req[n++] = 1;
        memcpy(req + n, &a4, 4);
        n += 4;
    } else if (inet_pton(AF_INET6, host, &a6) == 1) {
        req[n++] = 4;
        memcpy(req + n, &a6, 16);
        n += 16;
    } else {
        size_t l = strlen(host);
        if (l > 255)
            l = 255;
        req[n++] = 3;
        req[n++] = (unsigned char)l;
        memcpy(req + n, host, l);
        n += l;
    }
    req[n++] = (unsigned char)(port >> 8);
    req[n++] = (unsigned char)port;
    return n;
}

/* Reads a SOCKS5 reply (whole, with its bound address); the REP code or -1. */
static int socks_reply(int fd, const char **end)
{
    unsigned char h[4], rest[262];
    if (!recv_exact(fd, h, 4, end))
        return -1;
    size_t more = 2;
    if (h[3] == 1)
        more += 4;
    else if (h[3] == 4)
        more += 16;
    else if (h[3] == 3) {
        if (!recv_exact(fd, rest, 1, end))
            return -1;
        more += rest[0];
    }
    if (!recv_exact(fd, rest, more, end))
        return -1;
    return h[1];
}

static int cmd_socks(int argc, char **argv)
{
    if (argc % 2)
        return 2;
    for (int i = 0; i < argc; i += 2) {
        int port = atoi(argv[i + 1]);
        printf("socks target=%s port=%d", argv[i], port);
        int fd = connect_local(SOCKS_PORT);
        if (fd < 0) {
            printf(" proxy=%s\n", ename(errno));
            continue;
        }
        unsigned char greet[3] = {5, 1, 0}, g[2];
        const char *end = "-";
        if (send_all(fd, greet, 3) < 0 || !recv_exact(fd, g, 2, &end)) {
            printf(" greet=%s\n", end);
            close(fd);
            continue;
        }
        printf(" greet=%02x", g[1]);
        unsigned char req[300];
        size_t n = socks_request(req, 1, argv[i], port);
        if (send_all(fd, req, n) < 0) {
            printf(" reply=%s\n", ename(errno));
            close(fd);
            continue;
        }
        int rep = socks_reply(fd, &end);
        if (rep < 0) {
            printf(" reply=%s\n", end);
            close(fd);
            continue;
        }
        printf(" reply=%02x", rep);
        if (rep == 0) {
            get_and_print(fd, argv[i], port, "/netprobe-socks");
        } else {
            char tail[64];
            const char *e2;
            size_t k = recv_until_end(fd, tail, sizeof(tail), &e2);
            printf(" after=%zu end=%s\n", k, e2);
        }
        close(fd);
    }
    return 0;
}

/* --- HTTP proxy: CONNECT and absolute-form GET -------------------------------- */

/* Reads a response head (to the blank line) and, for a non-2xx, its body;
 * prints status= and body=. Returns the status or -1. */
static int http_response(int fd, bool tunnel)
{
    char *buf = buf_alloc();
    size_t got = 0;
    const char *end = "EOF";
    char *blank = NULL;
    while (!blank && got < MAXBUF - 1) {
        ssize_t k = recv(fd, buf + got, MAXBUF - 1 - got, 0);
        if (k <= 0) {
            if (k < 0)
                end = (errno == EAGAIN) ? "timeout" : ename(errno);
            break;
        }
        got += (size_t)k;
        blank = memmem(buf, got, "\r\n\r\n", 4);
    }
    int status = -1;
    if (got >= 12 && strncmp(buf, "HTTP/1.", 7) == 0)
        status = atoi(buf + 9);
    if (status < 0) {
        printf(" status=%s first=%s\n", got ? "garbage" : end, excerpt(buf, got));
        free(buf);
        return -1;
    }
    printf(" status=%d", status);
    if (!tunnel || status != 200) {
        if (blank && (status < 200 || status >= 300 || !tunnel)) {
            const char *e2;
            got += recv_until_end(fd, buf + got, MAXBUF - 1 - got, &e2);
            blank = memmem(buf, got, "\r\n\r\n", 4);
        }
        size_t off = blank ? (size_t)(blank + 4 - buf) : got;
        printf(" bodylen=%zu body=%s\n", got - off, excerpt(buf + off, got - off));
    }
    free(buf);
    return status;
}

static int cmd_connect(int argc, char **argv)
{
    if (argc % 2)
        return 2;
    for (int i = 0; i < argc; i += 2) {
        int port = atoi(argv[i + 1]);
        printf("connect target=%s port=%d", argv[i], port);
        int fd = connect_local(HTTP_PORT);
        if (fd < 0) {
            printf(" proxy=%s\n", ename(errno));
            continue;
        }
        char req[600];
        const char *auth = authority(argv[i], port);
        int n = snprintf(req, sizeof(req), "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", auth, auth);
        if (send_all(fd, req, (size_t)n) < 0) {
            printf(" status=%s\n", ename(errno));
            close(fd);
            continue;
        }
        if (http_response(fd, true) == 200)
            get_and_print(fd, argv[i], port, "/netprobe-connect");
        close(fd);
    }
    return 0;
}

static int cmd_get(int argc, char **argv)
{
    if (argc % 2)
        return 2;
    for (int i = 0; i < argc; i += 2) {
        int port = atoi(argv[i + 1]);
        printf("get target=%s port=%d", argv[i], port);
        int fd = connect_local(HTTP_PORT);
        if (fd < 0) {
            printf(" proxy=%s\n", ename(errno));
            continue;
        }
        char req[700];
        const char *auth = authority(argv[i], port);
        int n =
            snprintf(req, sizeof(req),
                     "GET http://%s/netprobe-get HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
                     auth, auth);
        if (send_all(fd, req, (size_t)n) < 0)
            printf(" status=%s\n", ename(errno));
        else
            http_response(fd, false);
        close(fd);
    }
    return 0;
}

/* --- udp, raw and packet sockets --------------------------------------------- */

static int cmd_udp(int argc, char **argv)
{
    if (argc % 2)
        return 2;
    for (int i = 0; i < argc; i += 2) {
        struct target t;
        int port = atoi(argv[i + 1]);
        printf("udp target=%s port=%d", argv[i], port);
        if (!numeric(argv[i], port, &t)) {
            printf(" socket=EINVAL\n");
            continue;
        }
        int fd = socket(t.ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            printf(" socket=%s\n", ename(errno));
            continue;
        }
        static const char msg[] = "netprobe-udp";
        ssize_t k = sendto(fd, msg, sizeof(msg) - 1, 0, (struct sockaddr *)&t.ss, t.len);
        printf(" socket=ok sendto=%s", k < 0 ? ename(errno) : "ok");
        int c = connect(fd, (struct sockaddr *)&t.ss, t.len);
        printf(" connect=%s", c < 0 ? ename(errno) : "ok");
        if (c == 0) {
            k = send(fd, msg, sizeof(msg) - 1, 0);
            printf(" send=%s", k < 0 ? ename(errno) : "ok");
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        char reply[256];
        if (poll(&p, 1, 300) > 0) {
            k = recv(fd, reply, sizeof(reply), MSG_DONTWAIT);
            printf(" reply=%s\n", k < 0 ? ename(errno) : "data");
        } else {
            printf(" reply=none\n");
        }
        close(fd);
    }
    return 0;
}

static int cmd_sockets(int argc, char **argv)
{
    static const struct {
        int family, type, proto;
        const char *name;
    } socks[] = {
        {AF_INET, SOCK_RAW, IPPROTO_RAW, "AF_INET/SOCK_RAW/IPPROTO_RAW"},
        {AF_INET, SOCK_RAW, IPPROTO_ICMP, "AF_INET/SOCK_RAW/IPPROTO_ICMP"},
        {AF_INET, SOCK_RAW, IPPROTO_UDP, "AF_INET/SOCK_RAW/IPPROTO_UDP"},
        {AF_INET, SOCK_RAW, IPPROTO_TCP, "AF_INET/SOCK_RAW/IPPROTO_TCP"},
        {AF_INET6, SOCK_RAW, IPPROTO_ICMPV6, "AF_INET6/SOCK_RAW/IPPROTO_ICMPV6"},
        {AF_INET6, SOCK_RAW, IPPROTO_RAW, "AF_INET6/SOCK_RAW/IPPROTO_RAW"},
        {AF_PACKET, SOCK_RAW, 0x0300 /* htons(ETH_P_ALL) */, "AF_PACKET/SOCK_RAW/ETH_P_ALL"},
        {AF_PACKET, SOCK_DGRAM, 0x0008 /* htons(ETH_P_IP) */, "AF_PACKET/SOCK_DGRAM/ETH_P_IP"},
        {AF_INET, SOCK_PACKET, 0x0300, "AF_INET/SOCK_PACKET"},
    };
    for (size_t i = 0; i < sizeof(socks) / sizeof(socks[0]); i++) {
        int fd = socket(socks[i].family, socks[i].type | SOCK_CLOEXEC, socks[i].proto);
        printf("socket what=%s result=%s\n", socks[i].name, fd < 0 ? ename(errno) : "ok");
        if (fd >= 0)
            close(fd);
    }
    /* ICMP echo ("ping") sockets: may exist (ping_group_range), must not reach out. */
    static const char *targets[] = {"203.0.113.10", "10.0.0.1", "169.254.169.254"};
    for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) {
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_ICMP);
        printf("ping target=%s socket=%s", targets[i], fd < 0 ? ename(errno) : "ok");
        if (fd >= 0) {
            struct target t;
            numeric(targets[i], 0, &t);
            unsigned char echo[16] = {8, 0, 0, 0, 0, 1, 0, 1};
            ssize_t k = sendto(fd, echo, sizeof(echo), 0, (struct sockaddr *)&t.ss, t.len);
            printf(" sendto=%s", k < 0 ? ename(errno) : "ok");
            struct pollfd p = {.fd = fd, .events = POLLIN};
            printf(" reply=%s", poll(&p, 1, 500) > 0 ? "data" : "none");
            close(fd);
        }
        printf("\n");
    }
    return 0;
}

/* --- dns --------------------------------------------------------------------- */

static const struct {
    const char *name;
    int type;
} qtypes[] = {{"A", 1},   {"NS", 2},   {"CNAME", 5}, {"SOA", 6},  {"NULL", 10},  {"PTR", 12},
              {"MX", 15}, {"TXT", 16}, {"AAAA", 28}, {"SRV", 33}, {"HTTPS", 65}, {"ANY", 255}};

static int qtype_of(const char *s)
{
    for (size_t i = 0; i < sizeof(qtypes) / sizeof(qtypes[0]); i++)
        if (strcasecmp(s, qtypes[i].name) == 0)
            return qtypes[i].type;
    return atoi(s);
}

static const char *rcode_name(int r)
{
    static const char *names[] = {"NOERROR",  "FORMERR", "SERVFAIL",
                                  "NXDOMAIN", "NOTIMP",  "REFUSED"};
    static char other[16];
    if (r >= 0 && r < 6)
        return names[r];
    snprintf(other, sizeof(other), "RCODE%d", r);
    return other;
}

/* Sends pkt to 127.0.0.1:53 and waits for an answer with the same id; its
 * length, or -1 with *why set. */
static ssize_t dns_exchange(const unsigned char *pkt, size_t n, unsigned char *ans, size_t cap,
                            const char **why)
{
    struct target t;
    numeric("127.0.0.1", 53, &t);
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *why = ename(errno);
        return -1;
    }
    if (sendto(fd, pkt, n, 0, (struct sockaddr *)&t.ss, t.len) < 0) {
        *why = ename(errno);
        close(fd);
        return -1;
    }
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 3000) <= 0) {
            *why = "timeout";
            close(fd);
            return -1;
        }
        ssize_t k = recv(fd, ans, cap, 0);
        if (k < 0) {
            *why = ename(errno);
            close(fd);
            return -1;
        }
        if (n < 2 || k < 2 || memcmp(ans, pkt, 2) == 0) {
            close(fd);
            return k;
        }
    }
}

/* Skips a (possibly compressed) name at ans[i]; the offset after it, or 0. */
static size_t skip_name(const unsigned char *ans, size_t len, size_t i)
{
    while (i < len) {
        unsigned l = ans[i];
        if (l == 0)
            return i + 1;
        if ((l & 0xC0) == 0xC0)
            return i + 2 <= len ? i + 2 : 0;
        i += 1 + l;
    }
    return 0;
}

static int cmd_dns(int argc, char **argv)
{
    if (argc % 2)
        return 2;
    for (int a = 0; a < argc; a += 2) {
        const char *name = argv[a];
        int qt = qtype_of(argv[a + 1]);
        unsigned char q[600], ans[4096];
        size_t n = 0;
        uint16_t id = (uint16_t)(getpid() ^ (a * 7919) ^ time(NULL));
        q[n++] = (unsigned char)(id >> 8);
        q[n++] = (unsigned char)id;
        q[n++] = 0x01; /* RD */
        q[n++] = 0;
        q[n++] = 0, q[n++] = 1; /* QDCOUNT */
        memset(q + n, 0, 6);
        n += 6;
        /* Labels as given (a label may be up to 63 bytes; longer is sent anyway). */
        const char *p = name;
        while (*p && n < sizeof(q) - 80) {
            const char *dot = strchr(p, '.');
            size_t l = dot ? (size_t)(dot - p) : strlen(p);
            if (l > 255)
                l = 255;
            q[n++] = (unsigned char)l;
            memcpy(q + n, p, l);
            n += l;
            p += l;
            if (*p == '.')
                p++;
        }
        q[n++] = 0;
        q[n++] = (unsigned char)(qt >> 8), q[n++] = (unsigned char)qt;
        q[n++] = 0, q[n++] = 1;
        printf("dns name=%s type=%s", excerpt(name, strlen(name)), argv[a + 1]);
        const char *why = "-";
        ssize_t k = dns_exchange(q, n, ans, sizeof(ans), &why);
        if (k < 12) {
            printf(" error=%s\n", k < 0 ? why : "short");
            continue;
        }
        int rcode = ans[3] & 15;
        unsigned an = (unsigned)(ans[6] << 8 | ans[7]);
        printf(" rcode=%s answers=%u addrs=", rcode_name(rcode), an);
        size_t i = skip_name(ans, (size_t)k, 12);
        i = i ? i + 4 : 0;
        bool first = true;
        for (unsigned r = 0; i && r < an && i < (size_t)k; r++) {
            i = skip_name(ans, (size_t)k, i);
            if (!i || i + 10 > (size_t)k)
                break;
            int type = ans[i] << 8 | ans[i + 1];
            size_t rdl = (size_t)(ans[i + 8] << 8 | ans[i + 9]);
            i += 10;
            if (i + rdl > (size_t)k)
                break;
            char txt[INET6_ADDRSTRLEN];
            if ((type == 1 && rdl == 4) || (type == 28 && rdl == 16)) {
                inet_ntop(type == 1 ? AF_INET : AF_INET6, ans + i, txt, sizeof(txt));
                printf("%s%s", first ? "" : ",", txt);
                first = false;
            } else {
                printf("%stype%d", first ? "" : ",", type);
                first = false;
            }
            i += rdl;
        }
        printf("%s\n", first ? "-" : "");
    }
    return 0;
}

static int cmd_dns_junk(int argc, char **argv)
{
    static const struct {
        const char *name;
        const char *pkt;
        size_t len;
    } cases[] = {
        {"empty", "", 0},
        {"short-header", "\x12\x34\x01\x00\x00\x01", 6},
        {"no-question", "\x12\x35\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00", 12},
        {"truncated-label",
         "\x12\x36\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x3f"
         "abc",
         16},
        {"pointer-loop", "\x12\x37\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x0c\x00\x01\x00\x01",
         18},
        {"response-bit",
         "\x12\x38\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00\x06public\x04test\x00"
         "\x00\x01\x00\x01",
         29},
        {"two-questions",
         "\x12\x39\x01\x00\x00\x02\x00\x00\x00\x00\x00\x00\x06public\x04test\x00"
         "\x00\x01\x00\x01\x04"
         "evil\x04test\x00\x00\x10\x00\x01",
         44},
        {"opcode-update",
         "\x12\x3a\x28\x00\x00\x01\x00\x00\x00\x00\x00\x00\x06public\x04test\x00"
         "\x00\x06\x00\x01",
         29},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        bool wanted = argc == 0;
        for (int a = 0; a < argc; a++)
            wanted |= strcmp(argv[a], cases[c].name) == 0;
        if (!wanted)
            continue;
        unsigned char ans[4096];
        const char *why = "-";
        ssize_t k =
            dns_exchange((const unsigned char *)cases[c].pkt, cases[c].len, ans, sizeof(ans), &why);
        printf("dnsjunk case=%s", cases[c].name);
        if (k < 0)
            printf(" reply=%s\n", why);
        else if (k < 4)
            printf(" reply=short\n");
        else
            printf(" reply=%s\n", rcode_name(ans[3] & 15));
    }
    return 0;
}

/* dns-flood N: N copies of one question sent as fast as the socket takes
 * them, replies unread: past the endpoint's burst, it plugs its socket. */
static int cmd_dns_flood(int argc, char **argv)
{
    static const unsigned char q[] = "\x43\x21\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
                                     "\x06public\x04test\x00\x00\x01\x00\x01";
    int n = argc > 0 ? atoi(argv[0]) : 2000;
    struct target t;
    numeric("127.0.0.1", 53, &t);
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&t.ss, t.len) < 0) {
        printf("dnsflood error=%s\n", ename(errno));
        return 0;
    }
    int sent = 0;
    for (int i = 0; i < n; i++)
        sent += send(fd, q, sizeof(q) - 1, 0) == (ssize_t)(sizeof(q) - 1);
    close(fd);
    printf("dnsflood sent=%d\n", sent);
    return 0;
}

/* --- netconfig: nftables and routes through netlink --------------------------- */

/* Sends the request; the first error ack's errno, 0 for a positive ack, or the
 * socket call's errno. Returns a name. */
static const char *nl_talk(int proto, struct nlbuf *b)
{
    int s = nl_send(proto, b);
    if (s < 0)
        return ename(errno);
    static char reply[8192];
    for (;;) {
        ssize_t n = recv(s, reply, sizeof(reply), 0);
        if (n < 0) {
            int e = errno;
            close(s);
            return e == EAGAIN ? "timeout" : ename(e);
        }
        for (struct nlmsghdr *h = (struct nlmsghdr *)reply; NLMSG_OK(h, (size_t)n);
             h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_type != NLMSG_ERROR)
                continue;
            struct nlmsgerr *err = NLMSG_DATA(h);
            close(s);
            return err->error == 0 ? "ok" : ename(-err->error);
        }
    }
}

static const char *nft_batch(uint16_t msg, int family, const char *table, uint16_t flags)
{
    struct nlbuf b = {.len = 0};
    nft_table_batch(&b, msg, family, table, flags);
    return nl_talk(NETLINK_NETFILTER, &b);
}

static const char *nft_list_tables(void)
{
    struct nlbuf b = {.len = 0};
    struct nfgenmsg tbl = {.nfgen_family = NFPROTO_UNSPEC, .version = NFNETLINK_V0};
    nl_add(&b, (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETTABLE,
           NLM_F_REQUEST | NLM_F_DUMP | NLM_F_ACK, &tbl, sizeof(tbl));
    int s = nl_send(NETLINK_NETFILTER, &b);
    if (s < 0)
        return ename(errno);
    static char reply[16384];
    int tables = 0;
    for (;;) {
        ssize_t n = recv(s, reply, sizeof(reply), 0);
        if (n <= 0) {
            close(s);
            return n < 0 ? ename(errno) : "EOF";
        }
        for (struct nlmsghdr *h = (struct nlmsghdr *)reply; NLMSG_OK(h, (size_t)n);
             h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_type == NLMSG_DONE) {
                close(s);
                static char out[32];
                snprintf(out, sizeof(out), "ok:%d-tables", tables);
                return out;
            }
            if (h->nlmsg_type == NLMSG_ERROR) {
                struct nlmsgerr *err = NLMSG_DATA(h);
                close(s);
                return err->error == 0 ? "ok" : ename(-err->error);
            }
            tables++;
        }
    }
}

static const char *rtm_route(uint16_t type, uint16_t flags, uint32_t dst, int dst_len)
{
    struct nlbuf b = {.len = 0};
    rtm_route_msg(&b, type, flags, dst, dst_len);
    return nl_talk(NETLINK_ROUTE, &b);
}

static const char *rtm_link_down(void)
{
    struct nlbuf b = {.len = 0};
    rtm_link_down_msg(&b);
    return nl_talk(NETLINK_ROUTE, &b);
}

static int cmd_netconfig(int argc, char **argv)
{
    printf("nl op=nft-newtable result=%s\n",
           nft_batch(NFT_MSG_NEWTABLE, NFPROTO_INET, "netprobe", NLM_F_CREATE));
    /* A DELTABLE without a name deletes every table of the family (nft flush ruleset). */
    printf("nl op=nft-flush-inet result=%s\n", nft_batch(NFT_MSG_DELTABLE, NFPROTO_INET, NULL, 0));
    printf("nl op=nft-flush-ip result=%s\n", nft_batch(NFT_MSG_DELTABLE, NFPROTO_IPV4, NULL, 0));
    printf("nl op=nft-flush-ip6 result=%s\n", nft_batch(NFT_MSG_DELTABLE, NFPROTO_IPV6, NULL, 0));
    printf("nl op=nft-flush-all result=%s\n", nft_batch(NFT_MSG_DELTABLE, NFPROTO_UNSPEC, NULL, 0));
    printf("nl op=nft-list-tables result=%s\n", nft_list_tables());
    printf("nl op=route-add-10/8 result=%s\n",
           rtm_route(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, 0x0a000000, 8));
    printf("nl op=route-del-default result=%s\n", rtm_route(RTM_DELROUTE, 0, 0, 0));
    printf("nl op=route-replace-default result=%s\n",
           rtm_route(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, 0, 0));
    printf("nl op=link-lo-down result=%s\n", rtm_link_down());
    return 0;
}

/* --- malformed SOCKS5 and HTTP proxy input ------------------------------------ */

/* One exchange: connect to the proxy, send data (in parts with pauses when
 * `slow`), optionally half-close, read what comes back. */
static void junk(const char *tag, const char *name, int port, const void *data, size_t n,
                 bool half_close, int wait_ms)
{
    printf("%s case=%s", tag, name);
    int fd = connect_local(port);
    if (fd < 0) {
        printf(" proxy=%s\n", ename(errno));
        return;
    }
    timeouts(fd, wait_ms);
    ssize_t s = n ? send_all(fd, data, n) : 0;
    if (half_close)
        shutdown(fd, SHUT_WR);
    unsigned char buf[512];
    const char *end;
    size_t got = recv_until_end(fd, (char *)buf, sizeof(buf), &end);
    printf(" sent=%s reply=%s end=%s first=%s\n", s < 0 ? ename(errno) : "ok", hex(buf, got), end,
           excerpt((char *)buf, got));
    close(fd);
}

static int cmd_socks_junk(int argc, char **argv)
{
    unsigned char b[70000];
    junk("socksjunk", "connect-close", SOCKS_PORT, NULL, 0, true, 1000);
    junk("socksjunk", "greet-truncated", SOCKS_PORT, "\x05", 1, true, 1000);
    junk("socksjunk", "greet-nmethods-0", SOCKS_PORT, "\x05\x00", 2, true, 1000);
    junk("socksjunk", "greet-no-acceptable-method", SOCKS_PORT, "\x05\x01\x02", 3, true, 1000);
    junk("socksjunk", "greet-methods-short", SOCKS_PORT, "\x05\x05\x00", 3, true, 1000);
    junk("socksjunk", "socks4-connect", SOCKS_PORT, "\x04\x01\x00\x50\xcb\x00\x71\x0a\x00", 9, true,
         1000);
    junk("socksjunk", "http-to-socks", SOCKS_PORT, "GET / HTTP/1.0\r\n\r\n", 18, true, 1000);
    /* Valid greeting, then broken requests. */
    static const struct {
        const char *name;
        const char *req;
        size_t len;
    } reqs[] = {
        {"request-truncated", "\x05\x01\x00\x03", 4},
        {"request-bad-version", "\x04\x01\x00\x01\xcb\x00\x71\x0a\x00\x50", 10},
        {"request-bind", "\x05\x02\x00\x01\xcb\x00\x71\x0a\x00\x50", 10},
        {"request-udp-associate", "\x05\x03\x00\x01\x00\x00\x00\x00\x00\x00", 10},
        {"request-bad-cmd", "\x05\x09\x00\x01\xcb\x00\x71\x0a\x00\x50", 10},
        {"request-bad-atyp", "\x05\x01\x00\x09\xcb\x00\x71\x0a\x00\x50", 10},
        {"request-domain-len-0", "\x05\x01\x00\x03\x00\x00\x50", 7},
        {"request-domain-len-255-short", "\x05\x01\x00\x03\xffpublic.test", 16},
        {"request-domain-nul", "\x05\x01\x00\x03\x16public.test\x00.evil.test\x00\x50", 29},
        {"request-domain-metadata-ip",
         "\x05\x01\x00\x03\x0f"
         "169.254.169.254\x00\x50",
         22},
        {"request-domain-ipv6-literal", "\x05\x01\x00\x03\x05[::1]\x00\x50", 12},
        {"request-port-0", "\x05\x01\x00\x01\xcb\x00\x71\x0a\x00\x00", 10},
        {"request-ipv6-truncated", "\x05\x01\x00\x04\x20\x01\x0d\xb8", 8},
        {"request-rsv-nonzero", "\x05\x01\x07\x01\xcb\x00\x71\x0a\x00\x50", 10},
    };
    for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
        memcpy(b, "\x05\x01\x00", 3);
        memcpy(b + 3, reqs[i].req, reqs[i].len);
        junk("socksjunk", reqs[i].name, SOCKS_PORT, b, 3 + reqs[i].len, true, 2000);
    }
    /* 64 KiB of noise after a valid greeting, and without one. */
    srand(42);
    for (size_t i = 0; i < sizeof(b); i++)
        b[i] = (unsigned char)rand();
    junk("socksjunk", "noise-64k", SOCKS_PORT, b, sizeof(b), false, 1000);
    memcpy(b, "\x05\x01\x00", 3);
    junk("socksjunk", "greet-then-noise-64k", SOCKS_PORT, b, sizeof(b), false, 1000);
    /* Stalled: a greeting and then nothing, without half-closing (a slowloris). */
    junk("socksjunk", "stalled-after-greeting", SOCKS_PORT, "\x05\x01\x00", 3, false, 1000);
    /* Many half-open connections at once, closed together. */
    int fds[100];
    int open_n = 0;
    for (int i = 0; i < 100; i++) {
        fds[i] = connect_local(SOCKS_PORT);
        if (fds[i] >= 0) {
            open_n++;
            send_all(fds[i], "\x05\x01", 2);
        }
    }
    for (int i = 0; i < 100; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    printf("socksjunk case=100-half-open opened=%d\n", open_n);
    return 0;
}

static int cmd_http_junk(int argc, char **argv)
{
    static const struct {
        const char *name;
        const char *req;
    } reqs[] = {
        {"garbage", "\x01\x02\x03\x04 hello\r\n\r\n"},
        {"empty-line", "\r\n\r\n"},
        {"no-target", "GET\r\n\r\n"},
        {"connect-no-port", "CONNECT public.test HTTP/1.1\r\nHost: public.test\r\n\r\n"},
        {"connect-port-99999", "CONNECT public.test:99999 HTTP/1.1\r\n\r\n"},
        {"connect-port-0", "CONNECT 203.0.113.10:0 HTTP/1.1\r\n\r\n"},
        {"connect-bad-v6", "CONNECT [::1:80 HTTP/1.1\r\n\r\n"},
        {"connect-userinfo", "CONNECT evil@169.254.169.254:80 HTTP/1.1\r\n\r\n"},
        {"origin-form", "GET /relative HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n"},
        {"url-metadata-host-public",
         "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: public.test\r\n\r\n"},
        {"url-userinfo-metadata",
         "GET http://public.test@169.254.169.254/ HTTP/1.1\r\nHost: public.test\r\n\r\n"},
        {"url-decimal-metadata", "GET http://2852039166/ HTTP/1.1\r\nHost: 2852039166\r\n\r\n"},
        {"url-ftp", "GET ftp://public.test/ HTTP/1.1\r\n\r\n"},
        {"http09", "GET http://public.test/\r\n\r\n"},
        {"truncated-head", "GET http://public.test/ HTTP/1.1\r\nHost: publ"},
    };
    for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++)
        junk("httpjunk", reqs[i].name, HTTP_PORT, reqs[i].req, strlen(reqs[i].req),
             i == sizeof(reqs) / sizeof(reqs[0]) - 1, 2000);
    /* Huge header block and a request line that never ends. */
    static char big[200000];
    int n = snprintf(big, sizeof(big), "GET http://public.test/ HTTP/1.1\r\nHost: public.test\r\n");
    for (size_t o = (size_t)n; o + 40 < sizeof(big) - 4; o += 32)
        memcpy(big + o, "X-Filler: aaaaaaaaaaaaaaaaaaaa\r\n", 32);
    size_t len = strlen(big);
    memcpy(big + len, "\r\n", 3);
    junk("httpjunk", "header-200k", HTTP_PORT, big, strlen(big), false, 2000);
    memset(big, 'A', sizeof(big));
    memcpy(big, "GET http://", 11);
    junk("httpjunk", "request-line-200k", HTTP_PORT, big, sizeof(big), false, 2000);
    return 0;
}

/* ----------------------------------------------------------------------------- */

static const struct {
    const char *name;
    int (*fn)(int, char **);
} cmds[] = {
    {"tcp", cmd_tcp},
    {"socks", cmd_socks},
    {"connect", cmd_connect},
    {"get", cmd_get},
    {"udp", cmd_udp},
    {"sockets", cmd_sockets},
    {"dns", cmd_dns},
    {"dns-junk", cmd_dns_junk},
    {"dns-flood", cmd_dns_flood},
    {"netconfig", cmd_netconfig},
    {"socks-junk", cmd_socks_junk},
    {"http-junk", cmd_http_junk},
};

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    for (size_t i = 0; argc > 1 && i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        if (strcmp(argv[1], cmds[i].name) != 0)
            continue;
        int rc = cmds[i].fn(argc - 2, argv + 2);
        if (rc == 2)
            break;
        return rc;
    }
    fprintf(stderr, "usage: netprobe tcp|socks|connect|get|udp HOST PORT [HOST PORT...]\n"
                    "       netprobe dns NAME TYPE [NAME TYPE...]\n"
                    "       netprobe sockets|dns-junk|netconfig|socks-junk|http-junk\n");
    return 2;
}
