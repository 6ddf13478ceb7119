/* The egress handlers against real sockets on 127.0.0.1 and [::1] only:
 * upstream servers (echo, a tiny HTTP server, a sink that counts what reaches
 * it) run on the test's loop; each client is a thread with blocking sockets
 * driving one end of a socketpair or a TCP connection while the loop runs.
 * Nothing ever connects beyond loopback: every denied target here is a
 * loopback address the policy refuses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "net/proto.h"
#include "net/proxy.h"

#define MIB (1024 * 1024)
#define MAX_FLOWS 64

struct fx {
    struct event_base *base;
    struct evconnlistener *echo, *echo6, *http, *sink, *front;
    uint16_t echo_port, echo6_port, http_port, sink_port, refused_port, front_port;
    int sink_accepts;
    char http_head[8192];
    size_t http_head_len;
    struct sbx_policy *policy;
    struct sbx_resolver *resolver;
    struct sbx_dns_answers *answers;
    struct sbx_conn_ctx ctx;
    void (*front_accept)(struct sbx_conn_ctx *, int);
    struct sbx_flow flows[MAX_FLOWS];
    int nflows;
    struct bufferevent *served[MAX_FLOWS]; /* the servers' live connections */
};

static void served_add(struct fx *f, struct bufferevent *bev)
{
    for (size_t i = 0; i < MAX_FLOWS; i++) {
        if (!f->served[i]) {
            f->served[i] = bev;
            return;
        }
    }
    fail_msg("too many server connections");
}

static void served_free(struct fx *f, struct bufferevent *bev)
{
    for (size_t i = 0; i < MAX_FLOWS; i++)
        if (f->served[i] == bev)
            f->served[i] = NULL;
    bufferevent_free(bev);
}

/* ---- upstream servers on the loop ---------------------------------------- */

static void echo_read(struct bufferevent *bev, void *arg)
{
    bufferevent_write_buffer(bev, bufferevent_get_input(bev));
}

static void close_when_flushed(struct bufferevent *bev, void *arg)
{
    if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
        served_free(arg, bev);
}

static void echo_event(struct bufferevent *bev, short what, void *arg)
{
    if (what & BEV_EVENT_EOF) {
        if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
            served_free(arg, bev);
        else
            bufferevent_setcb(bev, NULL, close_when_flushed, echo_event, arg);
        return;
    }
    if (what & BEV_EVENT_ERROR)
        served_free(arg, bev);
}

static void echo_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len,
                        void *arg)
{
    struct bufferevent *bev =
        bufferevent_socket_new(evconnlistener_get_base(l), fd, BEV_OPT_CLOSE_ON_FREE);
    served_add(arg, bev);
    bufferevent_setcb(bev, echo_read, NULL, echo_event, arg);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
}

static void http_read(struct bufferevent *bev, void *arg)
{
    struct fx *f = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
    if (end.pos < 0)
        return;
    size_t n = (size_t)end.pos + 4;
    if (n >= sizeof(f->http_head))
        n = sizeof(f->http_head) - 1;
    evbuffer_remove(in, f->http_head, n);
    f->http_head[n] = 0;
    f->http_head_len = n;
    static const char resp[] =
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";
    bufferevent_write(bev, resp, sizeof(resp) - 1);
    bufferevent_setcb(bev, NULL, close_when_flushed, echo_event, arg);
}

static void http_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len,
                        void *arg)
{
    struct bufferevent *bev =
        bufferevent_socket_new(evconnlistener_get_base(l), fd, BEV_OPT_CLOSE_ON_FREE);
    served_add(arg, bev);
    bufferevent_setcb(bev, http_read, NULL, echo_event, arg);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
}

static void sink_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len,
                        void *arg)
{
    struct fx *f = arg;
    f->sink_accepts++;
    close(fd);
}

/* A TCP front door: what the egress's own listeners do in the daemon. */
static void front_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len,
                         void *arg)
{
    struct fx *f = arg;
    f->front_accept(&f->ctx, fd);
}

static struct evconnlistener *listen_on(struct fx *f, int family, evconnlistener_cb cb,
                                        uint16_t *port)
{
    struct sockaddr_storage ss = {0};
    socklen_t sl;
    if (family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
        sin->sin_family = AF_INET;
        sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sl = sizeof(*sin);
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
        sin6->sin6_family = AF_INET6;
        sin6->sin6_addr = in6addr_loopback;
        sl = sizeof(*sin6);
    }
    struct evconnlistener *l =
        evconnlistener_new_bind(f->base, cb, f, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 64,
                                (struct sockaddr *)&ss, (int)sl);
    if (!l)
        return NULL;
    sl = sizeof(ss);
    getsockname(evconnlistener_get_fd(l), (struct sockaddr *)&ss, &sl);
    *port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                    : ((struct sockaddr_in6 *)&ss)->sin6_port);
    return l;
}

/* A port nothing listens on: bound, read, closed. */
static uint16_t free_port(int type)
{
    int fd = socket(AF_INET, type, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(fd, (struct sockaddr *)&sin, sizeof(sin));
    socklen_t sl = sizeof(sin);
    getsockname(fd, (struct sockaddr *)&sin, &sl);
    close(fd);
    return ntohs(sin.sin_port);
}

static void on_flow(void *ud, const struct sbx_flow *fl)
{
    struct fx *f = ud;
    if (f->nflows < MAX_FLOWS)
        f->flows[f->nflows] = *fl;
    f->nflows++;
}

static int fx_setup(void **state)
{
    signal(SIGPIPE, SIG_IGN);
    struct fx *f = calloc(1, sizeof(*f));
    f->base = event_base_new();
    f->echo = listen_on(f, AF_INET, echo_accept, &f->echo_port);
    f->echo6 = listen_on(f, AF_INET6, echo_accept, &f->echo6_port);
    f->http = listen_on(f, AF_INET, http_accept, &f->http_port);
    f->sink = listen_on(f, AF_INET, sink_accept, &f->sink_port);
    f->front = listen_on(f, AF_INET, front_accept, &f->front_port);
    f->refused_port = free_port(SOCK_STREAM);
    assert_non_null(f->echo);
    assert_non_null(f->http);
    assert_non_null(f->sink);
    assert_non_null(f->front);

    /* 127.0.0.0/8 is on the deny-list: open exactly our servers. The sink
     * stays closed, so a denial there proves nothing was attempted. */
    char targets[256];
    int n = snprintf(targets, sizeof(targets), "127.0.0.1:%u,127.0.0.1:%u,127.0.0.1:%u",
                     f->echo_port, f->http_port, f->refused_port);
    if (f->echo6) /* without IPv6 only socks5_ipv6 needs it, and says why it skips */
        snprintf(targets + n, sizeof(targets) - (size_t)n, ",[::1]:%u", f->echo6_port);
    const char *hosts[] = {"echo.test=127.0.0.1", "sink.test=127.0.0.1", NULL};
    const char *deny[] = {"blocked.test", NULL};
    struct sbx_policy_opts po = {
        .def = SBX_DEFAULT_ALLOW,
        .allowed_internal_targets = targets,
        .hosts = hosts,
        .deny = deny,
    };
    sbx_err err = {0};
    f->policy = sbx_policy_new(&po, &err);
    assert_non_null(f->policy);
    char up[32];
    snprintf(up, sizeof(up), "127.0.0.1:%u", free_port(SOCK_DGRAM));
    const char *upstream[] = {up, NULL};
    f->resolver = sbx_resolver_new(f->base, f->policy, upstream, &err);
    assert_non_null(f->resolver);
    f->answers = sbx_dns_answers_new(64);
    f->ctx = (struct sbx_conn_ctx){
        .base = f->base,
        .policy = f->policy,
        .resolver = f->resolver,
        .answers = f->answers,
        .limits = {.connect_timeout_s = 3},
        .on_flow = on_flow,
        .ud = f,
    };
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    sbx_conn_ctx_close_all(&f->ctx);
    assert_int_equal(f->ctx.active, 0);
    sbx_transparent_orig_dst = sbx_transparent_orig_dst_sockopt;
    for (size_t i = 0; i < MAX_FLOWS; i++)
        if (f->served[i])
            bufferevent_free(f->served[i]);
    evconnlistener_free(f->echo);
    if (f->echo6)
        evconnlistener_free(f->echo6);
    evconnlistener_free(f->http);
    evconnlistener_free(f->sink);
    evconnlistener_free(f->front);
    sbx_resolver_free(f->resolver);
    sbx_dns_answers_free(f->answers);
    sbx_policy_free(f->policy);
    event_base_free(f->base);
    free(f);
    return 0;
}

/* ---- clients: threads with blocking sockets -------------------------------- */

struct client {
    pthread_t th;
    int fd;
    atomic_bool done, connected;
    void (*script)(struct client *);
    struct fx *f;
    /* the script's results, checked on the main thread */
    int rep;
    uint8_t reply[1024];
    size_t reply_len;
    size_t sent, got;
    bool same, eof, reset;
    uint16_t port;
    const void *arg;
    size_t arg_len;
    size_t xfer_len;
};

static void *client_main(void *arg)
{
    struct client *cl = arg;
    cl->script(cl);
    atomic_store(&cl->done, true);
    return NULL;
}

static int connect_front(struct fx *f)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                              .sin_port = htons(f->front_port)};
    assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    return fd;
}

/* The client's end of a new connection to handler accept: through a real
 * TCP front door when tcp, else a socketpair handed over directly. */
static int open_client(struct fx *f, void (*accept)(struct sbx_conn_ctx *, int), bool tcp)
{
    int fd;
    if (tcp) {
        f->front_accept = accept;
        fd = connect_front(f);
    } else {
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        accept(&f->ctx, sv[1]);
        fd = sv[0];
    }
    struct timeval tv = {.tv_sec = 8};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return fd;
}

static void start(struct client *cl, struct fx *f, int fd, void (*script)(struct client *))
{
    cl->f = f;
    cl->fd = fd;
    cl->script = script;
    atomic_init(&cl->done, false);
    atomic_init(&cl->connected, false);
    assert_int_equal(pthread_create(&cl->th, NULL, client_main, cl), 0);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void tick(evutil_socket_t fd, short what, void *arg) {}

/* Run the loop until the client is done (then its socket is closed, as a
 * finished client would) and want flows were reported. */
static void run_until(struct fx *f, struct client *cl, int want_flows)
{
    struct event *t = event_new(f->base, -1, EV_PERSIST, tick, NULL);
    struct timeval tv = {.tv_usec = 5000};
    event_add(t, &tv);
    double end = now_s() + 20;
    bool joined = !cl;
    while (now_s() < end) {
        if (!joined && atomic_load(&cl->done)) {
            pthread_join(cl->th, NULL);
            close(cl->fd);
            joined = true;
        }
        if (joined && f->nflows >= want_flows)
            break;
        event_base_loop(f->base, EVLOOP_ONCE);
    }
    event_free(t);
    assert_true(joined);
    assert_true(f->nflows >= want_flows);
}

static void run_for(struct fx *f, double s)
{
    struct event *t = event_new(f->base, -1, EV_PERSIST, tick, NULL);
    struct timeval tv = {.tv_usec = 5000};
    event_add(t, &tv);
    double end = now_s() + s;
    while (now_s() < end)
        event_base_loop(f->base, EVLOOP_ONCE);
    event_free(t);
}

static ssize_t readn(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r <= 0)
            return got ? (ssize_t)got : r;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* 0, or the errno that stopped it. */
static int writen(int fd, const void *buf, size_t n)
{
    size_t off = 0;
    while (off < n) {
        ssize_t w = send(fd, (const char *)buf + off, n - off, MSG_NOSIGNAL);
        if (w <= 0)
            return w < 0 ? errno : EIO;
        off += (size_t)w;
    }
    return 0;
}

/* After the handler closed: EOF (true), or a reset noted in cl->reset. */
static bool wait_closed(struct client *cl)
{
    char b[256];
    for (;;) {
        ssize_t r = read(cl->fd, b, sizeof(b));
        if (r == 0)
            return true;
        if (r < 0) {
            cl->reset = errno == ECONNRESET;
            return cl->reset;
        }
    }
}

/* Send payload, read the echo, both at once (the relay pushes back). */
static void xfer(struct client *cl, size_t n)
{
    uint8_t *out = malloc(n), *in = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        out[i] = (uint8_t)(i * 7 + i / 251);
    size_t sent = 0, got = 0;
    bool shut = false;
    for (;;) {
        struct pollfd p = {.fd = cl->fd, .events = POLLIN | (sent < n ? POLLOUT : 0)};
        if (poll(&p, 1, 8000) <= 0)
            break;
        if ((p.revents & POLLOUT) && sent < n) {
            ssize_t w = send(cl->fd, out + sent, n - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w > 0)
                sent += (size_t)w;
        }
        if (sent == n && !shut) {
            shutdown(cl->fd, SHUT_WR);
            shut = true;
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t r = recv(cl->fd, in + got, n + 1 - got, MSG_DONTWAIT);
            if (r == 0) {
                cl->eof = true;
                break;
            }
            if (r < 0 && errno != EAGAIN)
                break;
            if (r > 0)
                got += (size_t)r;
        }
    }
    cl->sent = sent;
    cl->got = got;
    cl->same = got == n && memcmp(in, out, n) == 0;
    free(out);
    free(in);
}

/* ---- SOCKS5 ---------------------------------------------------------------- */

static size_t socks_request(uint8_t *b, uint8_t atyp, const void *addr, size_t alen, uint16_t port)
{
    size_t n = 0;
    b[n++] = 5;
    b[n++] = 1;
    b[n++] = 0;
    b[n++] = atyp;
    if (atyp == SBX_SOCKS5_ATYP_NAME)
        b[n++] = (uint8_t)alen;
    memcpy(b + n, addr, alen);
    n += alen;
    b[n++] = (uint8_t)(port >> 8);
    b[n++] = (uint8_t)port;
    return n;
}

/* Greeting + CONNECT; cl->rep is the reply code (-1: none). */
static int socks_connect(struct client *cl, uint8_t atyp, const void *addr, size_t alen,
                         uint16_t port)
{
    uint8_t b[300];
    writen(cl->fd, "\x05\x01\x00", 3);
    if (readn(cl->fd, b, 2) != 2 || b[0] != 5 || b[1] != 0)
        return cl->rep = -1;
    size_t n = socks_request(b, atyp, addr, alen, port);
    writen(cl->fd, b, n);
    if (readn(cl->fd, b, 4) != 4)
        return cl->rep = -1;
    cl->rep = b[1];
    size_t rest = b[3] == SBX_SOCKS5_ATYP_V6 ? 18 : 6;
    readn(cl->fd, b + 4, rest);
    return cl->rep;
}

static void script_socks_v4_xfer(struct client *cl)
{
    struct in_addr a = {htonl(INADDR_LOOPBACK)};
    if (socks_connect(cl, SBX_SOCKS5_ATYP_V4, &a, 4, cl->port) == 0)
        xfer(cl, cl->arg_len);
}

static void check_allowed(const struct sbx_flow *fl, enum sbx_flow_via via, uint16_t port,
                          uint64_t bytes)
{
    assert_int_equal(fl->verdict, SBX_VERDICT_ALLOW);
    assert_int_equal(fl->via, via);
    assert_int_equal(fl->port, port);
    assert_int_equal(fl->bytes_out, bytes);
    assert_int_equal(fl->bytes_in, bytes);
    assert_non_null(strstr(fl->rule, "allowed internal target"));
    assert_true(fl->duration_s >= 0);
    assert_true(fl->start > 1e9);
}

static void relay_4mib(void **state, bool tcp)
{
    struct fx *f = *state;
    struct client cl = {.port = f->echo_port, .arg_len = 4 * MIB};
    start(&cl, f, open_client(f, sbx_socks5_accept, tcp), script_socks_v4_xfer);
    run_until(f, &cl, 1);
    assert_int_equal(cl.rep, 0);
    assert_int_equal(cl.sent, 4 * MIB);
    assert_true(cl.same);
    assert_true(cl.eof);
    assert_int_equal(f->nflows, 1);
    check_allowed(&f->flows[0], SBX_VIA_SOCKS5, f->echo_port, 4 * MIB);
    assert_int_equal(f->flows[0].addr.family, AF_INET);
    assert_string_equal(f->flows[0].name, "");
    assert_int_equal(f->ctx.active, 0);
    assert_true(f->ctx.bytes_total >= 8 * MIB);
}

static void socks5_relay_4mib_tcp(void **state)
{
    relay_4mib(state, true);
}

static void socks5_relay_4mib_socketpair(void **state)
{
    relay_4mib(state, false);
}

static void script_socks_name(struct client *cl)
{
    const char *name = cl->arg;
    if (socks_connect(cl, SBX_SOCKS5_ATYP_NAME, name, strlen(name), cl->port) == 0)
        xfer(cl, cl->arg_len);
    else
        wait_closed(cl);
}

static void socks5_by_name(void **state)
{
    struct fx *f = *state;
    struct client cl = {.port = f->echo_port, .arg = "echo.test", .arg_len = 1000};
    start(&cl, f, open_client(f, sbx_socks5_accept, true), script_socks_name);
    run_until(f, &cl, 1);
    assert_int_equal(cl.rep, 0);
    assert_true(cl.same);
    check_allowed(&f->flows[0], SBX_VIA_SOCKS5, f->echo_port, 1000);
    assert_string_equal(f->flows[0].name, "echo.test");
    char buf[64];
    assert_string_equal(sbx_addr_str(&f->flows[0].addr, buf, sizeof(buf)), "127.0.0.1");
}

static void script_socks_v6(struct client *cl)
{
    if (socks_connect(cl, SBX_SOCKS5_ATYP_V6, &in6addr_loopback, 16, cl->port) == 0)
        xfer(cl, cl->arg_len);
}

/* The host feature the IPv6 case needs, or NULL when the host has it: the
 * case is skipped only for a missing feature, never for a setup that failed. */
static const char *ipv6_missing(void)
{
    FILE *fp = fopen("/proc/sys/net/ipv6/conf/all/disable_ipv6", "r");
    int disabled = 0;
    if (fp) {
        if (fscanf(fp, "%d", &disabled) != 1)
            disabled = 0;
        fclose(fp);
    }
    if (disabled == 1)
        return "IPv6 (net.ipv6.conf.all.disable_ipv6 = 1)";
    if (access("/proc/net/if_inet6", F_OK) != 0)
        return "IPv6 (no /proc/net/if_inet6)";
    return NULL;
}

static void socks5_ipv6(void **state)
{
    struct fx *f = *state;
    const char *missing = ipv6_missing();
    if (missing) {
        print_message("skipped: the host lacks %s\n", missing);
        skip();
    }
    assert_non_null(f->echo6); /* the host has IPv6: [::1] must take a listener */
    struct client cl = {.port = f->echo6_port, .arg_len = 70000};
    start(&cl, f, open_client(f, sbx_socks5_accept, false), script_socks_v6);
    run_until(f, &cl, 1);
    assert_int_equal(cl.rep, 0);
    assert_true(cl.same);
    check_allowed(&f->flows[0], SBX_VIA_SOCKS5, f->echo6_port, 70000);
    assert_int_equal(f->flows[0].addr.family, AF_INET6);
}

static void script_socks_v4_then_close(struct client *cl)
{
    const struct in_addr *a = cl->arg;
    socks_connect(cl, SBX_SOCKS5_ATYP_V4, a, 4, cl->port);
    wait_closed(cl);
}

static void socks5_denied(void **state)
{
    struct fx *f = *state;
    struct in_addr a = {htonl(INADDR_LOOPBACK)};
    struct client cl = {.port = f->sink_port, .arg = &a};
    start(&cl, f, open_client(f, sbx_socks5_accept, true), script_socks_v4_then_close);
    run_until(f, &cl, 1);
    assert_int_equal(cl.rep, SBX_SOCKS5_NOT_ALLOWED);
    assert_int_equal(f->flows[0].verdict, SBX_VERDICT_DENY);
    assert_string_equal(f->flows[0].rule, "deny-list 127.0.0.0/8");
    assert_int_equal(f->flows[0].addr.family, AF_INET);
    assert_int_equal(f->flows[0].port, f->sink_port);
    assert_true(f->flows[0].duration_s == 0);
    assert_int_equal(f->sink_accepts, 0);
    assert_int_equal(f->ctx.active, 0);
}

static void socks5_denied_name(void **state)
{
    struct fx *f = *state;
    struct client cl = {.port = 443, .arg = "blocked.test"};
    start(&cl, f, open_client(f, sbx_socks5_accept, false), script_socks_name);
    run_until(f, &cl, 1);
    assert_int_equal(cl.rep, SBX_SOCKS5_NOT_ALLOWED);
    assert_int_equal(f->flows[0].verdict, SBX_VERDICT_DENY);
    assert_string_equal(f->flows[0].name, "blocked.test");
    assert_int_equal(f->flows[0].addr.family, 0);
    assert_non_null(strstr(f->flows[0].rule, "blocked.test"));
}

/* A name that resolves (static host) to a denied address: refused at
 * connect, whatever the name (DNS rebinding). */
static void socks5_name_to_denied_address(void **state)
{
    struct fx *f = *state;
    struct client cl = {.port = f->sink_port, .arg = "sink.test"};
    start(&cl, f, open_client(f, sbx_socks5_accept, false), script_socks_name);
    run_until(f, &cl, 1);
    assert_int_equal(cl.rep, SBX_SOCKS5_NOT_ALLOWED);
    assert_int_equal(f->flows[0].verdict, SBX_VERDICT_DENY);
    assert_string_equal(f->flows[0].rule, "deny-list 127.0.0.0/8");
    assert_int_equal(f->sink_accepts, 0);
}

static void socks5_connect_refused(void **state)
{
    struct fx *f = *state;
    struct in_addr a = {htonl(INADDR_LOOPBACK)};
    struct client cl = {.port = f->refused_port, .arg = &a};
    start(&cl, f, open_client(f, sbx_socks5_accept, false), script_socks_v4_then_close);
    run_until(f, &cl, 1);
    assert_int_equal(cl.rep, SBX_SOCKS5_REFUSED);
    assert_int_equal(f->flows[0].verdict, SBX_VERDICT_ALLOW);
    assert_string_equal(f->flows[0].rule, "connect: ECONNREFUSED");
    assert_int_equal(f->flows[0].bytes_out, 0);
}

static void socks5_resolve_failure(void **state)
{
    struct fx *f = *state;
    f->ctx.limits.connect_timeout_s = 1;
    struct client cl = {.port = 80, .arg = "nowhere.test"};
    start(&cl, f, open_client(f, sbx_socks5_accept, false), script_socks_name);
    run_until(f, &cl, 1);
    assert_int_equal(cl.rep, SBX_SOCKS5_HOST_UNREACH);
    assert_int_equal(f->flows[0].verdict, SBX_VERDICT_ALLOW);
    assert_non_null(strstr(f->flows[0].rule, "resolve: "));
    assert_int_equal(f->flows[0].addr.family, 0);
}

static void read_all(struct client *cl)
{
    size_t n = 0;
    for (;;) {
        ssize_t r = read(cl->fd, cl->reply + n, sizeof(cl->reply) - n);
        if (r <= 0) {
            cl->eof = r == 0;
            cl->reset = r < 0 && errno == ECONNRESET;
            break;
        }
        n += (size_t)r;
    }
    cl->reply_len = n;
}

/* Raw bytes, then read everything until the handler closes. */
static void script_raw(struct client *cl)
{
    int e = writen(cl->fd, cl->arg, cl->arg_len);
    read_all(cl);
    if (e == ECONNRESET || e == EPIPE) /* the reset came first */
        cl->reset = true;
}

/* Raw bytes, then close our side: the handshake is cut short. */
static void script_raw_then_close(struct client *cl)
{
    writen(cl->fd, cl->arg, cl->arg_len);
    shutdown(cl->fd, SHUT_WR);
    read_all(cl);
}

static void socks5_malformed(void **state)
{
    struct fx *f = *state;
    static const struct {
        const char *bytes;
        size_t len;
        bool cut; /* the client closes after sending */
        const char *reply;
        size_t reply_len;
        const char *rule;
    } cases[] = {
        {"\x04\x01\x00\x50\x7f\x00\x00\x01\x00", 9, false, "", 0, "socks5: bad version"},
        {"\x05\x00", 2, false, "\x05\xff", 2, "socks5: no methods offered"},
        {"\x05\x01\x02", 3, false, "\x05\xff", 2, "socks5: no acceptable method (only 0x00)"},
        {"\x05\x01\x00\x05\x01\x00\x09\x01\x02", 9, false,
         "\x05\x00\x05\x08\x00\x01\x00\x00\x00\x00\x00\x00", 12, "socks5: bad address type"},
        {"\x05\x01\x00\x05\x02\x00\x01\x7f\x00\x00\x01\x00\x50", 13, false,
         "\x05\x00\x05\x07\x00\x01\x00\x00\x00\x00\x00\x00", 12, "socks5: unsupported command"},
        {"\x05\x01\x00\x04\x01\x00\x01\x7f\x00\x00\x01\x00\x50", 13, false, "\x05\x00", 2,
         "socks5: bad version"},
        {"\x05\x01\x00\x05\x01\x00\x03", 7, true, "\x05\x00", 2,
         "socks5: client closed during handshake"},
        {"\x05\x01\x00\x05\x01\x00\x03\x20gar", 11, true, "\x05\x00", 2,
         "socks5: client closed during handshake"},
        {"\x05\x01\x00\x05\x01\x00\x03\x00\x00\x50", 10, false,
         "\x05\x00\x05\x01\x00\x01\x00\x00\x00\x00\x00\x00", 12, "socks5: empty name"},
        {"\x05\x01\x00\x05\x01\x00\x03\x03\x61\x00\x62\x00\x50", 13, false,
         "\x05\x00\x05\x01\x00\x01\x00\x00\x00\x00\x00\x00", 12, "socks5: NUL in name"},
        {"GET / HTTP/1.1\r\n\r\n", 18, false, "", 0, "socks5: bad version"},
        {"", 0, true, "", 0, "socks5: client closed during handshake"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(cases); i++) {
        f->nflows = 0;
        struct client cl = {.arg = cases[i].bytes, .arg_len = cases[i].len};
        start(&cl, f, open_client(f, sbx_socks5_accept, i % 2 == 0),
              cases[i].cut ? script_raw_then_close : script_raw);
        run_until(f, &cl, 1);
        assert_true(cl.eof || cl.reset);
        if (!cases[i].cut) {
            assert_int_equal(cl.reply_len, cases[i].reply_len);
            assert_memory_equal(cl.reply, cases[i].reply, cases[i].reply_len);
        }
        assert_int_equal(f->nflows, 1);
        assert_int_equal(f->flows[0].verdict, SBX_VERDICT_DENY);
        assert_string_equal(f->flows[0].rule, cases[i].rule);
        assert_int_equal(f->ctx.active, 0);
    }
    /* and the handler still serves */
    f->nflows = 0;
    struct client cl = {.port = f->echo_port, .arg_len = 100};
    start(&cl, f, open_client(f, sbx_socks5_accept, false), script_socks_v4_xfer);
    run_until(f, &cl, 1);
    assert_true(cl.same);
}

/* The pure parser: every strict prefix of a good request wants more. */
static void socks5_parser_prefixes(void **state)
{
    uint8_t b[300];
    size_t n = socks_request(b, SBX_SOCKS5_ATYP_NAME, "example.com", 11, 443);
    struct sbx_socks5_req r;
    for (size_t i = 0; i < n; i++)
        assert_int_equal(sbx_socks5_parse_request(b, i, &r), SBX_PARSE_MORE);
    assert_int_equal(sbx_socks5_parse_request(b, n, &r), (int)n);
    assert_string_equal(r.name, "example.com");
    assert_int_equal(r.port, 443);
    n = socks_request(b, SBX_SOCKS5_ATYP_NAME, "10.1.2.3", 8, 80);
    assert_int_equal(sbx_socks5_parse_request(b, n, &r), (int)n);
    assert_string_equal(r.name, "");
    assert_int_equal(r.addr.family, AF_INET);
    n = socks_request(b, SBX_SOCKS5_ATYP_NAME, "bad name", 8, 80);
    assert_int_equal(sbx_socks5_parse_request(b, n, &r), SBX_PARSE_BAD);
    assert_int_equal(r.reply, SBX_SOCKS5_HOST_UNREACH);
    bool no_auth;
    assert_int_equal(sbx_socks5_parse_greeting((const uint8_t *)"\x05\x02\x02\x00", 4, &no_auth),
                     4);
    assert_true(no_auth);
    assert_int_equal(sbx_socks5_parse_greeting((const uint8_t *)"\x05\x02\x02", 3, &no_auth),
                     SBX_PARSE_MORE);
}

/* ---- HTTP proxy ------------------------------------------------------------ */

static void script_http(struct client *cl)
{
    writen(cl->fd, cl->arg, cl->arg_len);
    if (cl->xfer_len) { /* CONNECT: read the 200 head, then echo */
        static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
        ssize_t r = readn(cl->fd, cl->reply, sizeof(ok) - 1);
        cl->reply_len = r > 0 ? (size_t)r : 0;
        if (cl->reply_len == sizeof(ok) - 1 && memcmp(cl->reply, ok, sizeof(ok) - 1) == 0) {
            xfer(cl, cl->xfer_len);
            return;
        }
    }
    read_all(cl);
}

static void http_connect_allowed(void **state)
{
    struct fx *f = *state;
    char req[128];
    int n = snprintf(req, sizeof(req), "CONNECT 127.0.0.1:%u HTTP/1.1\r\nHost: x\r\n\r\n",
                     f->echo_port);
    struct client cl = {.arg = req, .arg_len = (size_t)n, .xfer_len = 300000};
    start(&cl, f, open_client(f, sbx_httpproxy_accept, true), script_http);
    run_until(f, &cl, 1);
    assert_true(cl.same);
    check_allowed(&f->flows[0], SBX_VIA_HTTP, f->echo_port, 300000);
}

static void http_connect_denied(void **state)
{
    struct fx *f = *state;
    char req[128];
    int n = snprintf(req, sizeof(req), "CONNECT 127.0.0.2:%u HTTP/1.1\r\n\r\n", f->sink_port);
    struct client cl = {.arg = req, .arg_len = (size_t)n};
    start(&cl, f, open_client(f, sbx_httpproxy_accept, true), script_http);
    run_until(f, &cl, 1);
    cl.reply[cl.reply_len] = 0;
    assert_non_null(strstr((char *)cl.reply, "HTTP/1.1 403 Forbidden\r\n"));
    assert_non_null(strstr((char *)cl.reply, "Connection: close\r\n"));
    assert_non_null(
        strstr((char *)cl.reply, "\r\n\r\nsandbox egress denied: deny-list 127.0.0.0/8\n"));
    assert_int_equal(f->flows[0].verdict, SBX_VERDICT_DENY);
    assert_int_equal(f->flows[0].via, SBX_VIA_HTTP);
    assert_string_equal(f->flows[0].rule, "deny-list 127.0.0.0/8");
    assert_int_equal(f->sink_accepts, 0);
}

static void http_absolute_get(void **state)
{
    struct fx *f = *state;
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "GET http://echo.test:%u/path/x?q=1#frag HTTP/1.1\r\n"
                     "Host: elsewhere.example\r\n"
                     "Proxy-Authorization: Basic Zm9vOmJhcg==\r\n"
                     "Proxy-Connection: keep-alive\r\n"
                     "Connection: keep-alive, X-Hop\r\n"
                     "X-Hop: 1\r\n"
                     "Keep-Alive: 300\r\n"
                     "User-Agent: test\r\n"
                     "X-Keep: 2\r\n\r\n",
                     f->http_port);
    struct client cl = {.arg = req, .arg_len = (size_t)n};
    start(&cl, f, open_client(f, sbx_httpproxy_accept, false), script_http);
    run_until(f, &cl, 1);
    char want[256];
    snprintf(want, sizeof(want),
             "GET /path/x?q=1 HTTP/1.1\r\nHost: echo.test:%u\r\nUser-Agent: test\r\n"
             "X-Keep: 2\r\nConnection: close\r\n\r\n",
             f->http_port);
    assert_string_equal(f->http_head, want);
    cl.reply[cl.reply_len] = 0;
    assert_string_equal((char *)cl.reply,
                        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
    assert_int_equal(f->flows[0].verdict, SBX_VERDICT_ALLOW);
    assert_string_equal(f->flows[0].name, "echo.test");
    assert_int_equal(f->flows[0].bytes_out, strlen(want));
    assert_int_equal(f->flows[0].bytes_in, cl.reply_len);
}

static void http_bad_requests(void **state)
{
    struct fx *f = *state;
    static char big[SBX_HTTP_HEAD_MAX + 100];
    memcpy(big, "GET http://echo.test/ HTTP/1.1\r\nX: ", 35);
    memset(big + 35, 'a', sizeof(big) - 35);
    static const struct {
        const char *req;
        size_t len;
        const char *status;
        const char *rule;
    } cases[] = {
        {"BLAH\r\n\r\n", 8, "HTTP/1.1 400 ", "http: 400 "},
        {"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 27, "HTTP/1.1 400 ", "http: 400 a proxy needs"},
        {"GET https://a.test/ HTTP/1.1\r\n\r\n", 32, "HTTP/1.1 400 ", "http: 400 only http"},
        {"CONNECT a.test HTTP/1.1\r\n\r\n", 27, "HTTP/1.1 400 ", "http: 400 CONNECT needs"},
        {"GET http://bad_host!/ HTTP/1.1\r\n\r\n", 34, "HTTP/1.1 400 ", "http: 400 "},
        {big, sizeof(big), "HTTP/1.1 431 ", "http: 431 request head too large"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(cases); i++) {
        f->nflows = 0;
        struct client cl = {.arg = cases[i].req, .arg_len = cases[i].len};
        start(&cl, f, open_client(f, sbx_httpproxy_accept, i % 2 == 1), script_http);
        run_until(f, &cl, 1);
        cl.reply[cl.reply_len < sizeof(cl.reply) ? cl.reply_len : sizeof(cl.reply) - 1] = 0;
        assert_memory_equal(cl.reply, cases[i].status, strlen(cases[i].status));
        assert_int_equal(f->flows[0].verdict, SBX_VERDICT_DENY);
        assert_memory_equal(f->flows[0].rule, cases[i].rule, strlen(cases[i].rule));
        assert_int_equal(f->ctx.active, 0);
    }
}

static void http_parser_rewrite(void **state)
{
    static char out[SBX_HTTP_OUT_MAX];
    struct sbx_http_req r;
    const char *h = "POST http://[::1]:8080?x=1 HTTP/1.0\n"
                    "Content-Length: 3\n"
                    "Upgrade: h2c\n"
                    "Proxy-Foo: bar\n\nabc";
    int n = sbx_http_parse_head((const uint8_t *)h, strlen(h), &r, out, sizeof(out));
    assert_int_equal(n, (int)strlen(h) - 3);
    assert_false(r.connect);
    assert_string_equal(r.host, "::1");
    assert_int_equal(r.port, 8080);
    out[r.out_len] = 0;
    assert_string_equal(out, "POST /?x=1 HTTP/1.0\r\nHost: [::1]:8080\r\nContent-Length: 3\r\n"
                             "Connection: close\r\n\r\n");
    for (size_t i = 0; i + 3 < strlen(h); i++)
        assert_int_equal(sbx_http_parse_head((const uint8_t *)h, i, &r, out, sizeof(out)),
                         SBX_PARSE_MORE);
    h = "CONNECT [2001:db8::1]:443 HTTP/1.1\r\n\r\n";
    assert_int_equal(sbx_http_parse_head((const uint8_t *)h, strlen(h), &r, out, sizeof(out)),
                     (int)strlen(h));
    assert_true(r.connect);
    assert_string_equal(r.host, "2001:db8::1");
    assert_int_equal(r.port, 443);
}

/* ---- transparent ------------------------------------------------------------- */

static struct sbx_addr fake_dst;
static uint16_t fake_port;

static int fake_orig_dst(int fd, struct sbx_addr *addr, uint16_t *port)
{
    *addr = fake_dst;
    *port = fake_port;
    return 0;
}

static void script_xfer(struct client *cl)
{
    xfer(cl, cl->arg_len);
}

static void transparent_allowed(void **state)
{
    struct fx *f = *state;
    sbx_transparent_orig_dst = fake_orig_dst;
    sbx_err err;
    assert_int_equal(sbx_addr_parse("127.0.0.1", &fake_dst, &err), 0);
    fake_port = f->echo_port;
    sbx_dns_answers_add(f->answers, "echo.test", &fake_dst);
    struct client cl = {.arg_len = 2 * MIB};
    start(&cl, f, open_client(f, sbx_transparent_accept, true), script_xfer);
    run_until(f, &cl, 1);
    assert_true(cl.same);
    check_allowed(&f->flows[0], SBX_VIA_TRANSPARENT, f->echo_port, 2 * MIB);
    assert_string_equal(f->flows[0].name, "echo.test");
}

static void transparent_denied_resets(void **state)
{
    struct fx *f = *state;
    sbx_transparent_orig_dst = fake_orig_dst;
    sbx_err err;
    assert_int_equal(sbx_addr_parse("127.0.0.1", &fake_dst, &err), 0);
    fake_port = f->sink_port;
    struct client cl = {.arg = "x", .arg_len = 1};
    start(&cl, f, open_client(f, sbx_transparent_accept, true), script_raw);
    run_until(f, &cl, 1);
    assert_true(cl.reset);
    assert_int_equal(f->flows[0].verdict, SBX_VERDICT_DENY);
    assert_int_equal(f->flows[0].via, SBX_VIA_TRANSPARENT);
    assert_string_equal(f->flows[0].rule, "deny-list 127.0.0.0/8");
    assert_string_equal(f->flows[0].name, "");
    assert_int_equal(f->sink_accepts, 0);
    assert_int_equal(f->ctx.active, 0);
}

static void transparent_real_sockopt_fails(void **state)
{
    /* No nftables redirect: SO_ORIGINAL_DST has nothing to say. */
    struct fx *f = *state;
    struct client cl = {.arg = "x", .arg_len = 1};
    start(&cl, f, open_client(f, sbx_transparent_accept, true), script_raw);
    run_until(f, &cl, 1);
    assert_int_equal(f->flows[0].verdict, SBX_VERDICT_DENY);
    assert_memory_equal(f->flows[0].rule, "transparent: original destination: ", 35);
}

/* ---- limits and shutdown ------------------------------------------------------ */

static void script_idle(struct client *cl)
{
    struct in_addr a = {htonl(INADDR_LOOPBACK)};
    if (socks_connect(cl, SBX_SOCKS5_ATYP_V4, &a, 4, cl->port) == 0) {
        atomic_store(&cl->connected, true);
        wait_closed(cl);
    }
}

static void limit_idle_timeout(void **state)
{
    struct fx *f = *state;
    f->ctx.limits.idle_timeout_s = 0.3;
    struct client cl = {.port = f->echo_port};
    double t0 = now_s();
    start(&cl, f, open_client(f, sbx_socks5_accept, false), script_idle);
    run_until(f, &cl, 1);
    assert_int_equal(cl.rep, 0);
    assert_true(now_s() - t0 >= 0.25);
    assert_string_equal(f->flows[0].rule, "idle timeout");
    assert_int_equal(f->flows[0].verdict, SBX_VERDICT_ALLOW);
}

static void limit_max_bytes(void **state)
{
    struct fx *f = *state;
    f->ctx.limits.max_bytes = 1000;
    struct client cl = {.port = f->echo_port, .arg_len = 5000};
    start(&cl, f, open_client(f, sbx_socks5_accept, false), script_socks_v4_xfer);
    run_until(f, &cl, 1);
    assert_false(cl.same);
    assert_true(cl.got <= 1000);
    assert_string_equal(f->flows[0].rule, "limit: max_bytes 1000");
    assert_true(f->flows[0].bytes_out + f->flows[0].bytes_in <= 1000);
    /* the budget is spent: the next connection is refused at once */
    f->nflows = 0;
    struct client cl2 = {.arg = "\x05\x01\x00", .arg_len = 3};
    start(&cl2, f, open_client(f, sbx_socks5_accept, false), script_raw);
    run_until(f, &cl2, 1);
    assert_int_equal(cl2.reply_len, 2);
    assert_memory_equal(cl2.reply, "\x05\xff", 2);
    assert_string_equal(f->flows[0].rule, "limit: max_bytes 1000");
}

/* The cap over all sandboxes: a counter shared by their contexts. */
static void limit_total_over_sandboxes(void **state)
{
    struct fx *f = *state;
    unsigned total = 5; /* four connections of other sandboxes, and this one's */
    f->ctx.limits.total_active = &total;
    f->ctx.limits.max_total = 6;
    int hs_fd = open_client(f, sbx_httpproxy_accept, false);
    run_for(f, 0.05);
    assert_int_equal(total, 6);
    struct client cl = {.arg = "CONNECT a.test:443 HTTP/1.1\r\n\r\n", .arg_len = 31};
    start(&cl, f, open_client(f, sbx_httpproxy_accept, true), script_raw);
    run_until(f, &cl, 1);
    cl.reply[cl.reply_len] = 0;
    assert_non_null(strstr((char *)cl.reply, "HTTP/1.1 503 "));
    assert_string_equal(f->flows[0].rule, "limit: total connections 6");
    sbx_conn_ctx_close_all(&f->ctx);
    assert_int_equal(total, 5); /* this sandbox's connection is counted out */
    close(hs_fd);
    f->ctx.limits.total_active = NULL;
}

static void limit_max_conns_and_close_all(void **state)
{
    struct fx *f = *state;
    f->ctx.limits.max_conns = 3;
    /* two relaying, one still in its handshake */
    struct client idle[2] = {{.port = f->echo_port}, {.port = f->echo_port}};
    for (int i = 0; i < 2; i++) {
        start(&idle[i], f, open_client(f, sbx_socks5_accept, i == 0), script_idle);
        double end = now_s() + 5;
        while (now_s() < end && !atomic_load(&idle[i].connected))
            event_base_loop(f->base, EVLOOP_NONBLOCK);
        assert_true(atomic_load(&idle[i].connected));
    }
    int hs_fd = open_client(f, sbx_httpproxy_accept, false);
    run_for(f, 0.05);
    assert_int_equal(f->ctx.active, 3);
    /* a fourth is refused in its protocol's terms */
    struct client cl = {.arg = "CONNECT a.test:443 HTTP/1.1\r\n\r\n", .arg_len = 31};
    start(&cl, f, open_client(f, sbx_httpproxy_accept, true), script_raw);
    run_until(f, &cl, 1);
    cl.reply[cl.reply_len] = 0;
    assert_non_null(strstr((char *)cl.reply, "HTTP/1.1 503 "));
    assert_non_null(strstr((char *)cl.reply, "limit: max_conns 3"));
    assert_int_equal(f->nflows, 1);
    assert_string_equal(f->flows[0].rule, "limit: max_conns 3");
    assert_int_equal(f->flows[0].verdict, SBX_VERDICT_DENY);

    sbx_conn_ctx_close_all(&f->ctx);
    assert_int_equal(f->ctx.active, 0);
    assert_null(f->ctx.live);
    assert_int_equal(f->nflows, 4);
    int allowed = 0;
    for (int i = 1; i < 4; i++) {
        if (f->flows[i].verdict == SBX_VERDICT_ALLOW) {
            allowed++;
            assert_non_null(strstr(f->flows[i].rule, "allowed internal target"));
        } else {
            assert_int_equal(f->flows[i].via, SBX_VIA_HTTP);
            assert_string_equal(f->flows[i].rule, "closed: egress shut down");
        }
    }
    assert_int_equal(allowed, 2);
    for (int i = 0; i < 2; i++) /* each client sees its end */
        run_until(f, &idle[i], 4);
    close(hs_fd);
}

static void handshake_timeout(void **state)
{
    struct fx *f = *state;
    f->ctx.limits.connect_timeout_s = 0.3;
    struct client cl = {.arg = "\x05\x01", .arg_len = 2};
    start(&cl, f, open_client(f, sbx_socks5_accept, true), script_raw);
    run_until(f, &cl, 1);
    assert_true(cl.eof);
    assert_int_equal(cl.reply_len, 0);
    assert_string_equal(f->flows[0].rule, "socks5: handshake timeout");
    f->nflows = 0;
    struct client cl2 = {.arg = "GET http://a.test/ HTTP/1.1\r\n", .arg_len = 29};
    start(&cl2, f, open_client(f, sbx_httpproxy_accept, false), script_raw);
    run_until(f, &cl2, 1);
    cl2.reply[cl2.reply_len] = 0;
    assert_non_null(strstr((char *)cl2.reply, "HTTP/1.1 408 "));
    assert_string_equal(f->flows[0].rule, "http: handshake timeout");
    assert_int_equal(f->ctx.active, 0);
}

static void via_names(void **state)
{
    assert_string_equal(sbx_flow_via_name(SBX_VIA_SOCKS5), "socks5");
    assert_string_equal(sbx_flow_via_name(SBX_VIA_HTTP), "http");
    assert_string_equal(sbx_flow_via_name(SBX_VIA_TRANSPARENT), "transparent");
    assert_string_equal(sbx_flow_via_name(SBX_VIA_DNS), "dns");
    assert_true(sbx_dns_name_valid("a-b.c_d.example."));
    assert_false(sbx_dns_name_valid("a..b"));
    assert_false(sbx_dns_name_valid(""));
    assert_false(sbx_dns_name_valid("a b"));
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

/* A network namespace of our own with loopback up, when we may make one: the
 * host's may track connections (a container runtime's NAT rules load
 * conntrack), and SO_ORIGINAL_DST then answers for any connection, which
 * transparent_real_sockopt_fails must not see. */
static void own_network(void)
{
    if (unshare(CLONE_NEWNET) < 0)
        return;
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr = {0};
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    if (s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        (void)ioctl(s, SIOCSIFFLAGS, &ifr);
    }
    if (s >= 0)
        close(s);
}

int main(void)
{
    own_network();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(via_names),
        cmocka_unit_test(socks5_parser_prefixes),
        cmocka_unit_test(http_parser_rewrite),
        T(socks5_relay_4mib_tcp),
        T(socks5_relay_4mib_socketpair),
        T(socks5_by_name),
        T(socks5_ipv6),
        T(socks5_denied),
        T(socks5_denied_name),
        T(socks5_name_to_denied_address),
        T(socks5_connect_refused),
        T(socks5_resolve_failure),
        T(socks5_malformed),
        T(http_connect_allowed),
        T(http_connect_denied),
        T(http_absolute_get),
        T(http_bad_requests),
        T(transparent_allowed),
        T(transparent_denied_resets),
        T(transparent_real_sockopt_fails),
        T(handshake_timeout),
        T(limit_idle_timeout),
        T(limit_max_bytes),
        T(limit_max_conns_and_close_all),
        T(limit_total_over_sandboxes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
