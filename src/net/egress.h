/* One sandbox's egress in `proxy` mode. Its network namespace has no interface
 * out; the daemon puts into it, from its own loop: loopback with default routes
 * through it, nftables rules that redirect every TCP connection leaving
 * loopback to a transparent listener and drop every other packet that is not
 * for loopback, and listeners for SOCKS5 (127.0.0.1:1080), the HTTP proxy
 * (127.0.0.1:3128), transparent connections (127.0.0.1 and [::1]:15001) and
 * DNS (127.0.0.1:53). Sockets keep the namespace they were made in, so the
 * daemon serves them without ever letting the sandbox out. */
#pragma once

#include <event2/event.h>
#include <sys/types.h>

#include "net/dns.h"
#include "net/proxy.h"

#define SBX_EGRESS_SOCKS_PORT 1080
#define SBX_EGRESS_HTTP_PORT 3128
#define SBX_EGRESS_TRANSPARENT_PORT 15001
#define SBX_EGRESS_DNS_PORT 53

/* The addresses of the calling process's network namespace (the host's),
 * which the policy always denies: at most max, returns how many. */
size_t sbx_host_addresses(struct sbx_addr *out, size_t max);

/* What a task in proxy mode finds in its environment: the proxy variables
 * naming the SOCKS5 port (0: SBX_EGRESS_SOCKS_PORT) and the HTTP proxy. */
#define SBX_EGRESS_ENV_COUNT 8
struct sbx_egress_env {
    char text[SBX_EGRESS_ENV_COUNT][64];
    const char *v[SBX_EGRESS_ENV_COUNT + 1]; /* NULL-terminated, into text */
};
void sbx_egress_env_make(struct sbx_egress_env *e, uint16_t socks_port);

/* Whether port can be the SOCKS5 port: 1-65535 and not one of the egress's
 * other listeners (HTTP proxy, transparent, DNS); else EINVAL with a message
 * that begins with the port ("3128 is taken by ..."). */
int sbx_egress_socks_port_check(unsigned port, sbx_err *err);

struct sbx_egress_opts {
    struct event_base *base;
    uint16_t socks_port; /* 0: SBX_EGRESS_SOCKS_PORT */
    const struct sbx_policy *policy;
    struct sbx_resolver *resolver;
    struct sbx_egress_limits limits;
    sbx_flow_cb on_flow;
    void *ud;
};

struct sbx_egress;

/* The nftables rules of a proxy sandbox under policy p (a connection to an
 * address p denies is refused at connect, everything else not to loopback is
 * redirected to the transparent listener, the rest dropped), as the text
 * sbx_egress_rules applies; the caller frees it. */
char *sbx_egress_rules_text(const struct sbx_policy *p, sbx_err *err);
/* Apply rules (sbx_egress_rules_text) in the caller's network namespace,
 * after its routes (127.0.0.2 on loopback, which must be up; the default
 * routes via loopback that the redirect needs): for
 * sbx_spec.net_rules. libnftables waits with select(), so this must run in a
 * process whose fds are all below FD_SETSIZE (the sandbox's setup gives it
 * one), never in the daemon. rules NULL: sbx_egress_rules_load only (in a
 * creator: sbx_spec.net_rules). */
int sbx_egress_rules(const char *rules, sbx_err *err);
/* Load libnftables (once) in the creator, so its sandboxes inherit it: before
 * a spawn whose spec has net_rules. */
int sbx_egress_rules_load(sbx_err *err);

/* Build it all inside the namespace netns_fd (a sandbox's sbx_sandbox.netns_fd):
 * loopback, routes and the listening sockets; the rules are the sandbox's.
 * The calling thread returns to its own namespace before this returns. */
struct sbx_egress *sbx_egress_start(const struct sbx_egress_opts *o, int netns_fd, sbx_err *err);
/* A TCP connection to 127.0.0.1:port inside the network namespace netns_fd
 * (a sandbox's): a non-blocking socket made in that namespace (the calling
 * thread goes back to its own at once), its connect under way (or refused:
 * -1 with ECONNREFUSED). */
int sbx_netns_connect_loopback(int netns_fd, uint16_t port, sbx_err *err);
/* Judge new connections and DNS questions by another policy, at once. The
 * caller keeps the old policy alive until the egress is freed (connections
 * being set up may still hold it). */
void sbx_egress_set_policy(struct sbx_egress *eg, const struct sbx_policy *policy);
/* An egress started ahead of its task (the warm pool, exec/pool.h) under a
 * placeholder policy that denies everything, bound to its task before the
 * task's command runs: every connection begun meanwhile is closed (it
 * reports its flow to the placeholder's on_flow), then new connections, DNS
 * questions and held SYNs are judged by policy and reported to on_flow(ud).
 * The nftables address sets are not changed here: when the sandbox was
 * built with other sets than policy's, sbx_egress_sets_start makes them
 * policy's before the command is sent. The caller keeps policy alive until
 * the egress is freed. */
void sbx_egress_bind(struct sbx_egress *eg, const struct sbx_policy *policy, sbx_flow_cb on_flow,
                     void *ud);
/* The sandbox's nftables address sets made its policy's (the bound one),
 * as a live update does (a helper process in its network namespace, one
 * transaction: all of the new sets or none), for a command that must not
 * run before: a handle, or NULL (err; nothing started). Live updates asked
 * meanwhile wait for it. Its fd is readable once it answered (or ended);
 * sbx_egress_sets_end then says 0 (the sets are policy's) or -1 (they may
 * not be: the sandbox must not run the task), and frees it;
 * sbx_egress_sets_abort kills it and frees it. The egress freed first
 * kills the helper: its end is then -1. */
struct sbx_egress_sets;
struct sbx_egress_sets *sbx_egress_sets_start(struct sbx_egress *eg, sbx_err *err);
int sbx_egress_sets_fd(const struct sbx_egress_sets *s);
int sbx_egress_sets_end(struct sbx_egress_sets *s, sbx_err *err);
void sbx_egress_sets_abort(struct sbx_egress_sets *s);
/* Close the listeners and every live connection (each reports its flow). */
void sbx_egress_free(struct sbx_egress *eg);
