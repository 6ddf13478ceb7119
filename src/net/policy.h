/* The one egress policy engine. Every connection, however it arrived (SOCKS5,
 * HTTP proxy, transparent), and every DNS question meets it. Pure logic: no
 * sockets, no syscalls, unit-tested. */
#pragma once

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* An address of either family, in network byte order. */
struct sbx_addr {
    int family; /* AF_INET or AF_INET6 */
    union {
        struct in_addr v4;
        struct in6_addr v6;
    } u;
};

/* "10.0.0.1", "::1" -> addr; -1 with err naming the text otherwise. */
int sbx_addr_parse(const char *s, struct sbx_addr *out, sbx_err *err);
/* Text form into buf (INET6_ADDRSTRLEN is enough). */
const char *sbx_addr_str(const struct sbx_addr *a, char *buf, size_t len);
/* Same family, same address. */
bool sbx_addr_eq(const struct sbx_addr *a, const struct sbx_addr *b);

enum sbx_default { SBX_DEFAULT_ALLOW = 0, SBX_DEFAULT_DENY = 1 };

/* One rule, as written by an operator or on `run --allow/--deny`:
 *   "api.example.com", "*.example.com", "api.example.com:443", "*.example.com:443"
 *   "10.1.2.0/24", "10.1.2.3", "10.1.2.0/24:5432", "[2001:db8::]/32:443", "[::1]:80"
 *   ":443" (any host on that port)
 * "*.suffix" matches every name below suffix, not suffix itself. Names are
 * compared case-insensitively, a trailing dot ignored. */
struct sbx_rule;

struct sbx_policy;

struct sbx_policy_opts {
    enum sbx_default def;     /* allow: public internet minus the deny-list */
    const char *const *allow; /* rules (NULL-terminated, may be NULL) */
    const char *const *deny;  /* rules added to the deny-list */
    /* The original's settings (comma-separated lists, may be NULL):
     * CLAW_SANDBOX_ALLOWED_CIDRS + CLAW_SANDBOX_ALLOWED_PORTS open internal
     * CIDRs (on those ports, all ports when empty), CLAW_ALLOWED_INTERNAL_TARGETS
     * opens host:port pairs, CLAW_SANDBOX_BLOCKED_CIDRS adds to the deny-list. */
    const char *allowed_cidrs;
    const char *allowed_ports;
    const char *allowed_internal_targets;
    const char *blocked_cidrs;
    /* Static host entries "name=address" (NULL-terminated, may be NULL). */
    const char *const *hosts;
    /* The daemon host's own addresses: always denied (unless opened above). */
    const struct sbx_addr *own_addrs;
    size_t n_own_addrs;
};

/* Build a policy; -1 with err naming the bad rule or setting. */
struct sbx_policy *sbx_policy_new(const struct sbx_policy_opts *o, sbx_err *err);
void sbx_policy_free(struct sbx_policy *p);

enum sbx_verdict { SBX_VERDICT_ALLOW = 0, SBX_VERDICT_DENY = 1 };

struct sbx_decision {
    enum sbx_verdict verdict;
    /* Which rule decided, for the agent and the audit log: "allow *.example.com:443",
     * "deny-list 169.254.0.0/16", "default deny", "own address 10.0.0.5", ... */
    char rule[128];
};

/* May a DNS name be answered at all? True when some allow rule names it (or a
 * suffix of it), or the default is allow and no deny rule names it. The
 * address check comes later, at connect. */
bool sbx_policy_name_allowed(const struct sbx_policy *p, const char *name, struct sbx_decision *d);

/* The connection check, on the resolved address of every connection.
 * name is the domain the sandbox asked for (SOCKS5 with a name, HTTP proxy
 * Host, or the name our DNS answered with this address for a transparent
 * connection), or NULL when only the address is known. A domain rule applies
 * only when name is given. Order: explicit allows of internal targets (the
 * original's precedence: internal targets, then allowed CIDRs/ports), then the
 * deny-list (with IPv4 embedded in IPv6 judged by the IPv4 address: ::ffff:0:0/96,
 * 64:ff9b::/96, 2002::/16) and deny rules, then allow rules, then the default. */
void sbx_policy_check(const struct sbx_policy *p, const char *name, const struct sbx_addr *addr,
                      uint16_t port, struct sbx_decision *d);

/* The address part of p as nftables set definitions (deny4, deny6, open4,
 * open6; text the caller frees) for the sandbox's rules (net/egress.c): a
 * connection to a denied address is refused at connect() instead of being
 * accepted by the transparent listener and then reset. deny: the metadata
 * services and the host's own addresses always; the deny-list, the blocked
 * CIDRs and address deny rules on every port unless a target by a name only
 * our DNS resolves may open one of them. open (let through to the listener,
 * which still decides): allowed CIDRs, address allow rules, internal targets
 * by address or by static host name. */
int sbx_policy_nft_sets(const struct sbx_policy *p, char **out, sbx_err *err);

/* Whether some port of addr (reached as name, NULL: by address) is allowed. */
bool sbx_policy_opens_some_port(const struct sbx_policy *p, const char *name,
                                const struct sbx_addr *addr);

/* A static host entry for name, if any (for DNS answers and SOCKS5/HTTP names). */
bool sbx_policy_static_host(const struct sbx_policy *p, const char *name, struct sbx_addr *out);
