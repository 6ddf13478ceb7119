/* Name resolution for the egress: static host entries of the policy first,
 * then the upstream resolvers through libevent's evdns (never blocking the
 * loop). Also the per-sandbox record of which names our DNS answered with which
 * addresses, so a transparent connection can be matched to a domain rule. */
#pragma once

#include <event2/dns.h>
#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>

#include "net/policy.h"

#define SBX_RESOLVE_MAX 16

struct sbx_resolver;

/* A DNS name we would ask about: labels of 1-63 letters, digits, '-' or '_',
 * at most 253 characters not counting an optional trailing dot. The egress
 * handlers check the names their clients send with it as well. */
bool sbx_dns_name_valid(const char *name);

/* Upstream: nameservers "ip" or "ip:port" (NULL-terminated), or NULL for the
 * host's /etc/resolv.conf. */
struct sbx_resolver *sbx_resolver_new(struct event_base *base, const struct sbx_policy *policy,
                                      const char *const *upstream, sbx_err *err);
void sbx_resolver_free(struct sbx_resolver *r);
struct evdns_base *sbx_resolver_evdns(struct sbx_resolver *r);

/* errnum 0 and n >= 1 addresses on success; otherwise an errno (ENOENT for
 * NXDOMAIN, ETIMEDOUT, EAI-like failures mapped to EHOSTUNREACH). Called
 * exactly once unless cancelled. */
typedef void (*sbx_resolve_cb)(void *ud, int errnum, const struct sbx_addr *addrs, size_t n);
struct sbx_resolve_req;
/* family AF_INET, AF_INET6 or AF_UNSPEC (both, IPv4 first). A literal address
 * is answered at once (still through the callback, from the loop). */
struct sbx_resolve_req *sbx_resolve(struct sbx_resolver *r, const char *name, int family,
                                    sbx_resolve_cb cb, void *ud);
void sbx_resolve_cancel(struct sbx_resolve_req *req);

/* Names our DNS answered to one sandbox, by address (latest answer wins;
 * bounded, oldest evicted). */
struct sbx_dns_answers;
struct sbx_dns_answers *sbx_dns_answers_new(size_t max_entries);
void sbx_dns_answers_free(struct sbx_dns_answers *a);
void sbx_dns_answers_add(struct sbx_dns_answers *a, const char *name, const struct sbx_addr *addr);
/* The name for addr, or NULL. */
const char *sbx_dns_answers_lookup(const struct sbx_dns_answers *a, const struct sbx_addr *addr);

/* Names answered with a loopback address (a static host "svc=127.0.0.1"
 * that the policy opens) would send the sandbox's clients to its own
 * loopback: our DNS answers them with an alias from 198.19.255.0/24
 * (benchmarking space, RFC 2544, never routed), which the sandbox's rules
 * let through to the transparent listener, and the listener maps back to
 * the real address (docs/network.md). */
#define SBX_DNS_ALIAS_NET 0xc613ff00u /* 198.19.255.0, host byte order */
#define SBX_DNS_ALIAS_TEXT "198.19.255.0/24"
/* The alias of (name, real), made (and recorded as an answer) if needed. */
void sbx_dns_answers_alias(struct sbx_dns_answers *a, const char *name, const struct sbx_addr *real,
                           struct sbx_addr *alias);
/* When addr is an alias: the address it stands for. */
bool sbx_dns_answers_real(const struct sbx_dns_answers *a, const struct sbx_addr *addr,
                          struct sbx_addr *real);
