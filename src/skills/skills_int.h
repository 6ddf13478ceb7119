/* Shared by skills.c (catalog, views, activation, tasks) and broker.c (the
 * claw-skill sockets); nothing outside src/skills includes this. */
#pragma once

#include <event2/listener.h>
#include <limits.h>

#include "skills/catalog.h"
#include "skills/skills.h"

struct sk_waiter {
    sbx_skills_done_fn fn;
    void *ud;
    struct sk_waiter *next;
};

struct sk_activation;
struct sk_broker_clone;
struct sk_conn;

struct sbx_skills {
    struct event_base *base;
    struct sbx_runtime *rt;
    char *roots[4]; /* builtin, common, shared, mapped */
    char *control_dir, *state_dir, *ur_base_url, *audience;
    unsigned char *secret;
    size_t secret_len;
    uint64_t max_bytes;
    double token_ttl_s;

    json_t *cat; /* the last scan's JSON, NULL until the first ends */
    /* the scan running: its child, its output */
    pid_t pid;
    int pidfd, out_fd;
    struct event *ev_out, *ev_exit;
    struct evbuffer *out;
    bool out_eof, exited;
    struct sk_waiter *waiting;   /* told when the running scan ends */
    struct sk_waiter *next_scan; /* asked for a scan after the running one started */

    struct sk_activation *acts; /* serialised: the head is the one running */

    char bin_path[PATH_MAX]; /* the claw-skill program */
    struct sk_broker_clone *clones;
    struct sk_conn *conns;
    size_t stdin_bytes; /* buffered by all claw-skill requests */
    bool stopping;
};

/* A skill's active version for a clone. */
struct sk_resolved {
    json_t *skill; /* borrowed from sk->cat */
    json_t *ver;
    const char *version;
    char why[256]; /* when left out */
};
/* The skill named so in the clone's catalog (precedence applied), or NULL. */
json_t *sk_find(struct sbx_skills *sk, const struct sbx_clone *c, const char *name,
                struct sk_resolved *r);
bool sk_enabled(const struct sk_resolved *r, const char **reason);
json_t *sk_info(const struct sk_resolved *r);

/* broker.c */
void sk_broker_free(struct sbx_skills *sk);
int sk_broker_init(struct sbx_skills *sk, sbx_err *err);
