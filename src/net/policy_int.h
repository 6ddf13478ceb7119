/* Inside the egress policy engine: the types and helpers its parts share.
 * policy_addr.c: addresses, CIDRs and the IPv4 address an IPv6 one carries;
 * policy_rules.c: one rule parsed, written back and matched;
 * policy_deny.c: the built-in deny-list, the metadata services and the
 * host's own addresses; policy.c: the policy built from its options and the
 * order of a decision. Not for use outside src/net/policy*.c. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/policy.h"

#define POLICY_NAME_MAX 253 /* a DNS name, without the trailing dot */
#define POLICY_RULE_MAX 300 /* a rule or list entry as written */
#define POLICY_TEXT_LEN 320 /* a rule written back, for a decision */

/* ---- addresses (policy_addr.c) ---- */

struct policy_cidr {
    struct sbx_addr net; /* host bits cleared */
    unsigned prefix;
};

/* The address under judgement, and the IPv4 address it may carry. */
struct policy_target {
    const struct sbx_addr *a;
    struct sbx_addr e;
    bool has_e;
    bool protected; /* own or metadata address, either form */
};

bool policy_family_ok(int family);
unsigned policy_addr_bits(int family); /* 32 or 128 */
void policy_mask_host_bits(struct sbx_addr *a, unsigned prefix);
/* "10.0.0.0/8" into buf. */
const char *policy_cidr_str(const struct policy_cidr *c, char *buf, size_t len);
/* t for a, with the IPv4 address it embeds, if any; not protected. */
void policy_target_init(struct policy_target *t, const struct sbx_addr *a);
/* Which form of the target c holds (the address itself first), or NULL. */
const struct sbx_addr *policy_cidr_match(const struct policy_cidr *c,
                                         const struct policy_target *t);
/* Same, for an entry that opens the target: a protected address only for an
 * entry naming exactly that address. */
const struct sbx_addr *policy_cidr_opens(const struct policy_cidr *c,
                                         const struct policy_target *t);

/* ---- rules (policy_rules.c) ---- */

enum rule_kind { RULE_PORT, RULE_NAME, RULE_SUFFIX, RULE_ADDR };

struct sbx_rule {
    enum rule_kind kind;
    uint16_t port;                  /* 0: every port */
    struct policy_cidr cidr;        /* RULE_ADDR */
    bool has_prefix;                /* written "a/len", not a single address */
    char name[POLICY_NAME_MAX + 1]; /* lower case; for RULE_SUFFIX without "*." */
};

/* Each parser returns NULL on success, else why the text is refused. */
const char *policy_rule_parse(const char *s, struct sbx_rule *out);
/* A single port, 1-65535. */
const char *policy_port_parse(const char *s, uint16_t *out);
/* A name as an operator writes it: "api.example.com", "example.com.", and
 * with wildcard_ok "*.example.com" (suffix set). Lower-cased into out
 * (POLICY_NAME_MAX + 1 bytes). */
const char *policy_name_parse(const char *s, bool wildcard_ok, char *out, bool *suffix);
/* The rule as it would be written, for decisions. */
const char *policy_rule_str(const struct sbx_rule *r, char *buf, size_t len);
/* A name as the sandbox asked for it: lower-cased, one trailing dot dropped;
 * false for a name no resolver would take. */
bool policy_name_normalize(const char *s, char *out);
/* A name or suffix rule that holds name (normalized; NULL holds none). */
bool policy_name_matches(const struct sbx_rule *r, const char *name);
/* port 0 is "some port": it meets an allow rule on any port, but a deny rule
 * only when that rule holds every port. */
bool policy_port_matches(uint16_t rule_port, uint16_t port, bool allowing);
/* Does r hold this connection? *m is set to the form of the address it
 * matched (NULL for a name or port rule). */
bool policy_rule_matches(const struct sbx_rule *r, const char *name, const struct policy_target *t,
                         uint16_t port, bool allowing, const struct sbx_addr **m);

/* ---- deny-list (policy_deny.c) ---- */

#define POLICY_N_DENYLIST 20
#define POLICY_N_METADATA 3

/* What is denied whatever the rules say, unless an entry opens it. */
struct policy_denylist {
    struct policy_cidr ranges[POLICY_N_DENYLIST];
    struct sbx_addr metadata[POLICY_N_METADATA];
    struct sbx_addr *own; /* the daemon host's addresses */
    size_t n_own;
};

/* The built-in ranges and the metadata services. */
int policy_denylist_init(struct policy_denylist *dl, sbx_err *err);
/* The host's own addresses (copied). */
int policy_denylist_own(struct policy_denylist *dl, const struct sbx_addr *own, size_t n,
                        sbx_err *err);
void policy_denylist_free(struct policy_denylist *dl);
/* An own or metadata address, in either form of t. */
bool policy_protected(const struct policy_denylist *dl, const struct policy_target *t);
/* Whether t is one of the host's own addresses or on the deny-list: *m is
 * the form matched, why what matched ("own address 10.0.0.5", "deny-list
 * 10.0.0.0/8"). */
bool policy_denylisted(const struct policy_denylist *dl, const struct policy_target *t,
                       const struct sbx_addr **m, char *why, size_t len);
