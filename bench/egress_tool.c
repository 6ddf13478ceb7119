/* egress_tool: the server and the client of bench/egress.sh (never run against
 * anything but the lab of tests/integration/netlab.py: the bench builds it,
 * runs the server on a lab host and the client inside sandboxes or in the lab's
 * daemon namespace). Built static, so the same binary runs everywhere.
 *
 *   egress_tool serve ADDR PORT
 *       Iterative TCP server. Per connection: reads one line "N\n", sends N
 *       zero bytes as fast as the socket takes them (send() from a 1 MiB
 *       buffer), closes. Prints "ready" once listening; dies with its parent.
 *
 *   egress_tool relay ADDR PORT TARGET TPORT
 *       The least a relay can do, as a reference for the sandbox's: iterative;
 *       per connection it connects to TARGET:TPORT, copies the request line
 *       up, then moves the reply down with blocking splice(2) through one
 *       64 KiB pipe (sandboxd's relay splices too, through the same pipe size,
 *       but non-blocking, from its event loop, both ways at once), then
 *       closes both. Prints "ready"; dies with its parent.
 *
 *   egress_tool get direct|socks HOST PORT BYTES [PAUSE_MS]
 *       One download of BYTES: connect (direct: plain connect(), which in a
 *       proxy-mode sandbox is the transparent path; socks: SOCKS5 CONNECT via
 *       127.0.0.1:1080 with an IPv4 address, no DNS), send "BYTES\n", recv()
 *       into a 256 KiB buffer until EOF. Prints "begin", then after PAUSE_MS
 *       the transfer, then "result bytes=... seconds=... mibps=...", then
 *       sleeps PAUSE_MS again (so an observer can sample the relay's CPU
 *       time around the transfer alone).
 *
 *   egress_tool setup direct|socks HOST PORT COUNT [REPLY_BYTES [PAUSE_MS]]
 *       COUNT sequential connections, each: connect (+ SOCKS5 greeting and
 *       request, two round trips, as curl does), send "REPLY_BYTES\n" (default
 *       64), read the reply to EOF, close. Prints "begin", waits PAUSE_MS,
 *       then connects, and at the end prints "result count=... median_us=...
 *       mean_us=... p10_us=... p90_us=... min_us=... max_us=...".
 *
 * Any failure prints "error what=... errno=..." and exits 1. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define SEND_BUF (1 << 20)
#define RECV_BUF (256 << 10)
#define IO_TIMEOUT_S 30

static char zeros[SEND_BUF];
static char rbuf[RECV_BUF];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
    printf("error what=%s errno=%d (%s)\n", what, errno, strerror(errno));
    fflush(stdout);
    exit(1);
}

static void timeouts(int fd)
{
    struct timeval tv = {.tv_sec = IO_TIMEOUT_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static struct sockaddr_in addr_of(const char *host, const char *port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        errno = EINVAL;
        die("address");
    }
    return sa;
}

static int read_full(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, (char *)buf + got, n - got, 0);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/* ---- server ---------------------------------------------------------------- */

static void serve_one(int c)
{
    char line[64];
    size_t n = 0;
    timeouts(c);
    while (n < sizeof(line) - 1) {
        ssize_t r = recv(c, line + n, 1, 0);
        if (r <= 0)
            return;
        if (line[n] == '\n')
            break;
        n++;
    }
    line[n] = 0;
    unsigned long long left = strtoull(line, NULL, 10);
    while (left > 0) {
        size_t k = left < SEND_BUF ? (size_t)left : SEND_BUF;
        ssize_t w = send(c, zeros, k, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        left -= (unsigned long long)w;
    }
    shutdown(c, SHUT_WR);
}

static int serve(const char *host, const char *port)
{
    pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        return 1;
    struct sockaddr_in sa = addr_of(host, port);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(s, 512) < 0)
        die("listen");
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            die("accept");
        }
        serve_one(c);
        close(c);
    }
}

static void relay_one(int c, const struct sockaddr_in *target)
{
    char line[64];
    size_t n = 0;
    timeouts(c);
    while (n < sizeof(line)) {
        ssize_t r = recv(c, line + n, 1, 0);
        if (r <= 0)
            return;
        if (line[n++] == '\n')
            break;
    }
    int u = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (u < 0)
        return;
    setsockopt(u, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    timeouts(u);
    int p[2];
    if (connect(u, (const struct sockaddr *)target, sizeof(*target)) < 0 ||
        send(u, line, n, MSG_NOSIGNAL) != (ssize_t)n || pipe2(p, O_CLOEXEC) < 0) {
        close(u);
        return;
    }
    for (;;) {
        ssize_t k = splice(u, NULL, p[1], NULL, 65536, SPLICE_F_MOVE);
        if (k <= 0)
            break;
        while (k > 0) {
            ssize_t w = splice(p[0], NULL, c, NULL, (size_t)k, SPLICE_F_MOVE);
            if (w <= 0)
                goto out;
            k -= w;
        }
    }
    shutdown(c, SHUT_WR);
out:
    close(p[0]);
    close(p[1]);
    close(u);
}

static int relay(const char *host, const char *port, const char *thost, const char *tport)
{
    pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        return 1;
    struct sockaddr_in sa = addr_of(host, port), target = addr_of(thost, tport);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(s, 512) < 0)
        die("listen");
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            die("accept");
        }
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        relay_one(c, &target);
        close(c);
    }
}

/* ---- client ---------------------------------------------------------------- */

/* A connected socket to HOST:PORT, directly or through SOCKS5. */
static int open_conn(int socks, const struct sockaddr_in *target)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die("socket");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    timeouts(fd);
    struct sockaddr_in via = *target;
    if (socks) {
        via.sin_port = htons(1080);
        inet_pton(AF_INET, "127.0.0.1", &via.sin_addr);
    }
    if (connect(fd, (struct sockaddr *)&via, sizeof(via)) < 0)
        die("connect");
    if (!socks)
        return fd;
    static const unsigned char greeting[] = {5, 1, 0};
    unsigned char rep[10];
    if (send(fd, greeting, sizeof(greeting), MSG_NOSIGNAL) != sizeof(greeting))
        die("socks greeting");
    if (read_full(fd, rep, 2) < 0 || rep[0] != 5 || rep[1] != 0) {
        errno = EPROTO;
        die("socks method");
    }
    unsigned char req[10] = {5, 1, 0, 1};
    memcpy(req + 4, &target->sin_addr, 4);
    memcpy(req + 8, &target->sin_port, 2);
    if (send(fd, req, sizeof(req), MSG_NOSIGNAL) != sizeof(req))
        die("socks request");
    if (read_full(fd, rep, 10) < 0 || rep[1] != 0) {
        errno = rep[1] == 2 ? EACCES : EPROTO;
        die("socks reply");
    }
    return fd;
}

/* Ask for n bytes and read them to EOF; the bytes received. */
static unsigned long long fetch(int fd, unsigned long long n)
{
    char line[32];
    int len = snprintf(line, sizeof(line), "%llu\n", n);
    if (send(fd, line, (size_t)len, MSG_NOSIGNAL) != len)
        die("send request");
    unsigned long long got = 0;
    for (;;) {
        ssize_t r = recv(fd, rbuf, sizeof(rbuf), 0);
        if (r == 0)
            break;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            die("recv");
        }
        got += (unsigned long long)r;
    }
    return got;
}

static int get(int socks, const char *host, const char *port, const char *bytes, int pause_ms)
{
    struct sockaddr_in target = addr_of(host, port);
    unsigned long long n = strtoull(bytes, NULL, 10);
    printf("begin\n");
    fflush(stdout);
    usleep((useconds_t)pause_ms * 1000);
    double t0 = now();
    int fd = open_conn(socks, &target);
    unsigned long long got = fetch(fd, n);
    double dt = now() - t0;
    close(fd);
    printf("result bytes=%llu seconds=%.6f mibps=%.1f\n", got, dt, (double)got / dt / 1048576.0);
    fflush(stdout);
    usleep((useconds_t)pause_ms * 1000);
    if (got != n) {
        errno = EPROTO;
        die("short transfer");
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int setup(int socks, const char *host, const char *port, const char *count,
                 const char *reply, int pause_ms)
{
    struct sockaddr_in target = addr_of(host, port);
    int n = atoi(count);
    unsigned long long want = reply ? strtoull(reply, NULL, 10) : 64;
    if (n < 1)
        n = 1;
    double *us = calloc((size_t)n, sizeof(*us));
    if (!us)
        die("calloc");
    double sum = 0;
    printf("begin\n");
    fflush(stdout);
    usleep((useconds_t)pause_ms * 1000);
    for (int i = 0; i < n; i++) {
        double t0 = now();
        int fd = open_conn(socks, &target);
        unsigned long long got = fetch(fd, want);
        close(fd);
        us[i] = (now() - t0) * 1e6;
        sum += us[i];
        if (got != want) {
            errno = EPROTO;
            die("short reply");
        }
    }
    qsort(us, (size_t)n, sizeof(*us), cmp_double);
    printf("result count=%d median_us=%.1f mean_us=%.1f p10_us=%.1f p90_us=%.1f min_us=%.1f "
           "max_us=%.1f\n",
           n, n % 2 ? us[n / 2] : (us[n / 2 - 1] + us[n / 2]) / 2, sum / n, us[n / 10],
           us[(n * 9) / 10], us[0], us[n - 1]);
    free(us);
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: egress_tool serve ADDR PORT\n"
                    "       egress_tool relay ADDR PORT TARGET TPORT\n"
                    "       egress_tool get direct|socks HOST PORT BYTES [PAUSE_MS]\n"
                    "       egress_tool setup direct|socks HOST PORT COUNT [REPLY_BYTES "
                    "[PAUSE_MS]]\n");
    return 2;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc == 4 && strcmp(argv[1], "serve") == 0)
        return serve(argv[2], argv[3]);
    if (argc == 6 && strcmp(argv[1], "relay") == 0)
        return relay(argv[2], argv[3], argv[4], argv[5]);
    if (argc < 6 || (strcmp(argv[2], "direct") != 0 && strcmp(argv[2], "socks") != 0))
        return usage();
    int socks = strcmp(argv[2], "socks") == 0;
    if (strcmp(argv[1], "get") == 0)
        return get(socks, argv[3], argv[4], argv[5], argc > 6 ? atoi(argv[6]) : 0);
    if (strcmp(argv[1], "setup") == 0)
        return setup(socks, argv[3], argv[4], argv[5], argc > 6 ? argv[6] : NULL,
                     argc > 7 ? atoi(argv[7]) : 0);
    return usage();
}
