/* A small upstream DNS server of the tests' own on 127.0.0.1, built on evdns's
 * server API in the test's loop: it records every question that reaches it,
 * answers from a table of records the test hands it, holds names starting
 * with "hold." unanswered for the test to release or drop, and calls anything
 * else NXDOMAIN. A test with names of its own (refusals, long answers, slow
 * families) says so through a hook asked before the table. Also the loop
 * helpers both DNS tests drive it with.
 *
 * Functions are static inline: each test includes this header and uses only
 * some of them, and an unused inline is no warning. */
#pragma once

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <event2/dns.h>
#include <event2/dns_struct.h>
#include <event2/event.h>

struct upstream_record {
    const char *name;
    int type;
    const char *addr;
};

/* What a hook makes of one question. */
enum upstream_verdict {
    UPSTREAM_TABLE, /* the table answers it: its records, else NXDOMAIN */
    UPSTREAM_HOLD,  /* the whole request stays unanswered, held */
    UPSTREAM_DONE,  /* the hook answered it (records, *rcode or nothing) */
};

/* lower is the question's name in lower case; *rcode is the reply's, NOERROR
 * unless a question has changed it. */
typedef enum upstream_verdict (*upstream_hook)(struct evdns_server_request *req,
                                               const struct evdns_server_question *q,
                                               const char *lower, int *rcode);

#define UPSTREAM_SEEN_MAX 64
#define UPSTREAM_HELD_MAX 8

struct upstream {
    struct evdns_server_port *port;
    uint16_t portno;
    const struct upstream_record *table;
    size_t ntable;
    upstream_hook hook;
    int nseen;
    char seen[UPSTREAM_SEEN_MAX][256];
    int seen_type[UPSTREAM_SEEN_MAX];
    int nheld;
    struct evdns_server_request *held[UPSTREAM_HELD_MAX];
};

static inline void upstream_cb(struct evdns_server_request *req, void *arg)
{
    struct upstream *u = arg;
    int rcode = DNS_ERR_NONE;
    for (int i = 0; i < req->nquestions; i++) {
        const struct evdns_server_question *q = req->questions[i];
        char lower[256];
        size_t n = 0;
        for (; q->name[n] && n < sizeof(lower) - 1; n++)
            lower[n] = (char)(q->name[n] | (q->name[n] >= 'A' && q->name[n] <= 'Z' ? 0x20 : 0));
        lower[n] = '\0';
        if (u->nseen < UPSTREAM_SEEN_MAX) {
            strcpy(u->seen[u->nseen], lower);
            u->seen_type[u->nseen++] = q->type;
        }
        enum upstream_verdict v = UPSTREAM_TABLE;
        if (strncmp(lower, "hold.", 5) == 0)
            v = UPSTREAM_HOLD;
        else if (u->hook)
            v = u->hook(req, q, lower, &rcode);
        if (v == UPSTREAM_HOLD) {
            assert_true(u->nheld < UPSTREAM_HELD_MAX);
            u->held[u->nheld++] = req;
            return;
        }
        if (v == UPSTREAM_DONE)
            continue;
        bool known = false;
        for (size_t k = 0; k < u->ntable; k++) {
            const struct upstream_record *r = &u->table[k];
            if (strcmp(r->name, lower) != 0)
                continue;
            known = true;
            if (r->type != q->type)
                continue;
            unsigned char buf[16];
            if (q->type == EVDNS_TYPE_A) {
                inet_pton(AF_INET, r->addr, buf);
                evdns_server_request_add_a_reply(req, q->name, 1, buf, 60);
            } else {
                inet_pton(AF_INET6, r->addr, buf);
                evdns_server_request_add_aaaa_reply(req, q->name, 1, buf, 60);
            }
        }
        if (!known)
            rcode = DNS_ERR_NOTEXIST;
    }
    evdns_server_request_respond(req, rcode);
}

/* A non-blocking UDP socket bound to a free port on 127.0.0.1. */
static inline int udp_socket(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr = {htonl(INADDR_LOOPBACK)}};
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    socklen_t len = sizeof(sa);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

/* hook may be NULL: the table and "hold." are all there is. */
static inline void upstream_start(struct event_base *base, struct upstream *u,
                                  const struct upstream_record *table, size_t ntable,
                                  upstream_hook hook)
{
    memset(u, 0, sizeof(*u));
    u->table = table;
    u->ntable = ntable;
    u->hook = hook;
    int fd = udp_socket(&u->portno);
    u->port = evdns_add_server_port_with_base(base, fd, 0, upstream_cb, u);
    assert_non_null(u->port);
}

/* Held requests are dropped unanswered: whoever asked is gone by now. */
static inline void upstream_stop(struct upstream *u)
{
    for (int i = 0; i < u->nheld; i++)
        evdns_server_request_drop(u->held[i]);
    u->nheld = 0;
    evdns_close_server_port(u->port);
}

/* How many questions were for exactly name, of type (0: any type). */
static inline int upstream_saw(const struct upstream *u, const char *name, int type)
{
    int n = 0;
    for (int i = 0; i < u->nseen; i++)
        n += strcmp(u->seen[i], name) == 0 && (type == 0 || u->seen_type[i] == type);
    return n;
}

/* Whether any question's name contained needle. */
static inline bool upstream_saw_any(const struct upstream *u, const char *needle)
{
    for (int i = 0; i < u->nseen; i++)
        if (strstr(u->seen[i], needle))
            return true;
    return false;
}

/* ---- the loop ---- */

static inline void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    *(bool *)arg = true;
}

/* Run the loop until *flag is non-zero (flag NULL: for the whole time). */
static inline void run(struct event_base *base, const int *flag, double max_s)
{
    bool expired = false;
    struct event *t = evtimer_new(base, on_deadline, &expired);
    struct timeval tv = {(time_t)max_s, (suseconds_t)((max_s - (double)(time_t)max_s) * 1e6)};
    evtimer_add(t, &tv);
    while (!expired && !(flag && *flag))
        event_base_loop(base, EVLOOP_ONCE);
    event_free(t);
}

/* For event_set_log_callback: evdns's warnings about what the tests send on
 * purpose stay out of their output. */
static inline void quiet(int is_warn, const char *msg) {}
