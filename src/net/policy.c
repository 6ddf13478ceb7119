/* The egress policy engine: rules parsed once, then a linear walk per check
 * with no allocation. Pure logic: inet_pton/inet_ntop are the only libc calls
 * that know about networks. This file builds the policy and holds the order
 * of a decision; addresses are policy_addr.c's, one rule policy_rules.c's,
 * the deny-list and the protected addresses policy_deny.c's (policy_int.h).
 *
 * Decisions this file makes (the tests in tests/unit/net/test_policy.c hold
 * them):
 * - Order of a connection check, first match wins:
 *   1. allowed internal targets (CLAW_ALLOWED_INTERNAL_TARGETS, host:port; a
 *      name matches only when the check carries that name);
 *   2. allowed CIDRs (CLAW_SANDBOX_ALLOWED_CIDRS) on the allowed ports
 *      (CLAW_SANDBOX_ALLOWED_PORTS, every port when empty; the ports alone
 *      open nothing);
 *   3. explicit denials: deny rules, then blocked CIDRs
 *      (CLAW_SANDBOX_BLOCKED_CIDRS): an explicit deny beats an allow rule;
 *   4. the host's own addresses, then the built-in deny-list. An allow rule
 *      with an address or CIDR that covers the address (on its port) opens it:
 *      the operator asked for that range by address. A domain allow rule or a
 *      ":port" rule never does: a name that resolves to 169.254.169.254 stays
 *      denied (DNS rebinding);
 *   5. allow rules (domain rules only when the check carries a name);
 *   6. the default.
 * - Protected addresses (the host's own addresses and the metadata services
 *   169.254.169.254, 100.100.100.200, fd00:ec2::254) are opened only by an
 *   entry naming exactly that one address (a /32 or /128, an address rule, an
 *   internal target by address), never by a wider CIDR or by a name.
 * - IPv4 embedded in IPv6 (::ffff:0:0/96, ::ffff:0:0:0/96, 64:ff9b::/96 in
 *   the low 32 bits; 2002::/16 in bits 16..47) is judged as that IPv4 address
 *   too: every address rule, list and entry matches either form. The deny-list
 *   also holds the rest of ::/96 (IPv4-compatible, deprecated), fec0::/10
 *   (site-local, deprecated) and 64:ff9b:1::/48 (local-use NAT64); the
 *   documentation ranges (192.0.2/24, 198.51.100/24, 203.0.113/24,
 *   2001:db8::/32) stay allowed, tests use them as the public internet.
 * - A CIDR with host bits set ("10.1.2.5/24") is accepted and masked, as the
 *   original's Go net.ParseCIDR does.
 * - Names in rules: letters, digits, '-' (not at either end of a label) and
 *   '_' (compose service names); a numeric last label is refused (a mistyped
 *   address such as "10.1.2").
 * - Names in checks are lower-cased and one trailing dot dropped; a name with
 *   spaces, control or non-ASCII bytes, empty labels or over 253 characters is
 *   denied ("invalid name"); "" counts as no name. A check on port 0 is denied.
 * - sbx_policy_name_allowed answers whether a connection to the name could be
 *   allowed on some port: deny domain rules without a port (static host or
 *   not), then a static host, judged by its address, with its name, on any
 *   port; then internal targets by that name, then allow domain rules (port
 *   ignored) and ":port" rules (any host may then be reached, so refusing its
 *   name would protect nothing), then the default. Address allow rules do not
 *   open names under default deny: resolving any name upstream would be a DNS
 *   tunnel.
 * - Static hosts: the last entry for a name wins (flags after config).
 * - Lists (CLAW_*): comma-separated, blanks around entries and empty entries
 *   ignored; ports are single ports 1-65535. */
#include "net/policy.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "net/policy_int.h"

struct host_entry {
    char name[POLICY_NAME_MAX + 1];
    struct sbx_addr addr;
};

struct sbx_policy {
    enum sbx_default def;
    struct sbx_rule *allow, *deny, *targets;
    size_t n_allow, n_deny, n_targets;
    struct policy_cidr *allowed_cidrs, *blocked;
    size_t n_allowed_cidrs, n_blocked;
    uint16_t *allowed_ports;
    size_t n_allowed_ports;
    struct host_entry *hosts;
    size_t n_hosts;
    struct policy_denylist denied;
};

/* --- building ----------------------------------------------------------- */

static size_t count_strv(const char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

static int add_rules(struct sbx_rule **out, size_t *n, const char *const *texts, sbx_err *err)
{
    size_t count = count_strv(texts);
    if (!count)
        return 0;
    *out = calloc(count, sizeof(**out));
    if (!*out)
        return sbx_err_set(err, ENOMEM, "policy rules");
    for (size_t i = 0; i < count; i++) {
        const char *why = policy_rule_parse(texts[i], &(*out)[i]);
        if (why)
            return sbx_err_set(err, EINVAL, "rule '%.160s': %s", texts[i], why);
    }
    *n = count;
    return 0;
}

typedef const char *(*entry_fn)(struct sbx_policy *p, const char *entry);

static const char *add_cidr(struct policy_cidr *list, size_t *n, const char *entry)
{
    struct sbx_rule r;
    const char *why = policy_rule_parse(entry, &r);
    if (why)
        return why;
    if (r.kind != RULE_ADDR || r.port)
        return "not a CIDR or address";
    list[(*n)++] = r.cidr;
    return NULL;
}

static const char *add_allowed_cidr(struct sbx_policy *p, const char *entry)
{
    return add_cidr(p->allowed_cidrs, &p->n_allowed_cidrs, entry);
}

static const char *add_blocked_cidr(struct sbx_policy *p, const char *entry)
{
    return add_cidr(p->blocked, &p->n_blocked, entry);
}

static const char *add_allowed_port(struct sbx_policy *p, const char *entry)
{
    return policy_port_parse(entry, &p->allowed_ports[p->n_allowed_ports++]);
}

static const char *add_target(struct sbx_policy *p, const char *entry)
{
    struct sbx_rule r;
    const char *why = policy_rule_parse(entry, &r);
    if (why)
        return why;
    bool host = r.kind == RULE_NAME || (r.kind == RULE_ADDR && !r.has_prefix);
    if (!host || !r.port)
        return "not host:port";
    p->targets[p->n_targets++] = r;
    return NULL;
}

/* Entries a comma-separated list may hold at most (at least 1). */
static size_t list_max(const char *list)
{
    size_t n = 1;
    for (const char *c = list; c && *c; c++)
        n += *c == ',';
    return n;
}

/* Calls fn on every entry of a comma-separated list, blanks around entries
 * and empty entries ignored; fn stores the entry where list_max() made room. */
static int add_list(struct sbx_policy *p, const char *setting, const char *list, entry_fn fn,
                    sbx_err *err)
{
    for (const char *s = list; s;) {
        const char *end = strchrnul(s, ',');
        const char *b = s, *e = end;
        while (b < e && (*b == ' ' || *b == '\t'))
            b++;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (e > b) {
            char entry[POLICY_RULE_MAX + 1];
            size_t len = (size_t)(e - b);
            if (len > POLICY_RULE_MAX)
                return sbx_err_set(err, EINVAL, "%s entry '%.40s...': too long", setting, b);
            memcpy(entry, b, len);
            entry[len] = '\0';
            const char *why = fn(p, entry);
            if (why)
                return sbx_err_set(err, EINVAL, "%s entry '%.160s': %s", setting, entry, why);
        }
        s = *end ? end + 1 : NULL;
    }
    return 0;
}

static int add_hosts(struct sbx_policy *p, const char *const *hosts, sbx_err *err)
{
    size_t count = count_strv(hosts);
    if (!count)
        return 0;
    p->hosts = calloc(count, sizeof(*p->hosts));
    if (!p->hosts)
        return sbx_err_set(err, ENOMEM, "static hosts");
    for (size_t i = 0; i < count; i++) {
        char buf[POLICY_RULE_MAX + 1];
        const char *why = NULL, *eq = strchr(hosts[i], '=');
        size_t len = eq ? (size_t)(eq - hosts[i]) : 0;
        bool suffix;
        if (!eq)
            why = "not name=address";
        else if (len > POLICY_RULE_MAX)
            why = "name longer than 253 characters";
        if (!why) {
            memcpy(buf, hosts[i], len);
            buf[len] = '\0';
            why = policy_name_parse(buf, false, p->hosts[i].name, &suffix);
        }
        if (!why && sbx_addr_parse(eq + 1, &p->hosts[i].addr, NULL) < 0)
            why = "bad address";
        if (why)
            return sbx_err_set(err, EINVAL, "host entry '%.160s': %s", hosts[i], why);
    }
    p->n_hosts = count;
    return 0;
}

static void policy_freep(struct sbx_policy **p)
{
    sbx_policy_free(*p);
}

struct sbx_policy *sbx_policy_new(const struct sbx_policy_opts *o, sbx_err *err)
{
    if (!o || (o->def != SBX_DEFAULT_ALLOW && o->def != SBX_DEFAULT_DENY)) {
        sbx_err_set(err, EINVAL, "policy: bad options");
        return NULL;
    }
    __attribute__((cleanup(policy_freep))) struct sbx_policy *p = calloc(1, sizeof(*p));
    if (!p) {
        sbx_err_set(err, ENOMEM, "policy");
        return NULL;
    }
    p->def = o->def;
    if (policy_denylist_init(&p->denied, err) < 0)
        return NULL;

    p->allowed_cidrs = calloc(list_max(o->allowed_cidrs), sizeof(*p->allowed_cidrs));
    p->allowed_ports = calloc(list_max(o->allowed_ports), sizeof(*p->allowed_ports));
    p->targets = calloc(list_max(o->allowed_internal_targets), sizeof(*p->targets));
    p->blocked = calloc(list_max(o->blocked_cidrs), sizeof(*p->blocked));
    if (!p->allowed_cidrs || !p->allowed_ports || !p->targets || !p->blocked) {
        sbx_err_set(err, ENOMEM, "policy lists");
        return NULL;
    }
    if (add_rules(&p->allow, &p->n_allow, o->allow, err) < 0 ||
        add_rules(&p->deny, &p->n_deny, o->deny, err) < 0 ||
        add_list(p, "CLAW_SANDBOX_ALLOWED_CIDRS", o->allowed_cidrs, add_allowed_cidr, err) < 0 ||
        add_list(p, "CLAW_SANDBOX_ALLOWED_PORTS", o->allowed_ports, add_allowed_port, err) < 0 ||
        add_list(p, "CLAW_ALLOWED_INTERNAL_TARGETS", o->allowed_internal_targets, add_target, err) <
            0 ||
        add_list(p, "CLAW_SANDBOX_BLOCKED_CIDRS", o->blocked_cidrs, add_blocked_cidr, err) < 0 ||
        add_hosts(p, o->hosts, err) < 0 ||
        policy_denylist_own(&p->denied, o->own_addrs, o->n_own_addrs, err) < 0)
        return NULL;
    return sbx_steal_pointer(&p);
}

void sbx_policy_free(struct sbx_policy *p)
{
    if (!p)
        return;
    free(p->allow);
    free(p->deny);
    free(p->targets);
    free(p->allowed_cidrs);
    free(p->blocked);
    free(p->allowed_ports);
    free(p->hosts);
    policy_denylist_free(&p->denied);
    free(p);
}

/* --- deciding ----------------------------------------------------------- */

static void target_of(const struct sbx_policy *p, const struct sbx_addr *a, struct policy_target *t)
{
    policy_target_init(t, a);
    t->protected = policy_protected(&p->denied, t);
}

/* Fill d; when m is the embedded IPv4 address, the decision says so. */
static void say(struct sbx_decision *d, enum sbx_verdict v, const struct policy_target *t,
                const struct sbx_addr *m, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void say(struct sbx_decision *d, enum sbx_verdict v, const struct policy_target *t,
                const struct sbx_addr *m, const char *fmt, ...)
{
    va_list ap;
    d->verdict = v;
    va_start(ap, fmt);
    vsnprintf(d->rule, sizeof(d->rule), fmt, ap);
    va_end(ap);
    if (t && m == &t->e) {
        char a[INET6_ADDRSTRLEN];
        size_t used = strlen(d->rule);
        snprintf(d->rule + used, sizeof(d->rule) - used, " (embedded in %s)",
                 sbx_addr_str(t->a, a, sizeof(a)));
    }
}

static void say_rule(struct sbx_decision *d, enum sbx_verdict v, const char *what,
                     const struct sbx_rule *r, const struct policy_target *t,
                     const struct sbx_addr *m)
{
    char text[POLICY_TEXT_LEN];
    say(d, v, t, m, "%s %s", what, policy_rule_str(r, text, sizeof(text)));
}

static void say_default(const struct sbx_policy *p, struct sbx_decision *d)
{
    if (p->def == SBX_DEFAULT_ALLOW)
        say(d, SBX_VERDICT_ALLOW, NULL, NULL, "default allow");
    else
        say(d, SBX_VERDICT_DENY, NULL, NULL, "default deny");
}

/* The first allow rule that opens a deny-listed target on this port. */
static bool allow_rule_opens(const struct sbx_policy *p, const struct policy_target *t,
                             uint16_t port, struct sbx_decision *d)
{
    for (size_t i = 0; i < p->n_allow; i++) {
        const struct sbx_rule *r = &p->allow[i];
        const struct sbx_addr *m;
        if (r->kind == RULE_ADDR && policy_rule_matches(r, NULL, t, port, true, &m)) {
            say_rule(d, SBX_VERDICT_ALLOW, "allow", r, t, m);
            return true;
        }
    }
    return false;
}

static bool opened_by_settings(const struct sbx_policy *p, const char *name,
                               const struct policy_target *t, uint16_t port, struct sbx_decision *d)
{
    char text[POLICY_TEXT_LEN];
    for (size_t i = 0; i < p->n_targets; i++) {
        const struct sbx_rule *r = &p->targets[i];
        /* A target by address names one address exactly; a name does not
         * say which addresses it stands for, so it opens no protected one. */
        const struct sbx_addr *m = r->kind == RULE_ADDR ? policy_cidr_match(&r->cidr, t) : NULL;
        bool hit = r->kind == RULE_ADDR ? m != NULL : policy_name_matches(r, name) && !t->protected;
        if (hit && policy_port_matches(r->port, port, true)) {
            say_rule(d, SBX_VERDICT_ALLOW, "allowed internal target", r, t, m);
            return true;
        }
    }
    bool port_ok = p->n_allowed_ports == 0 || port == 0;
    for (size_t i = 0; i < p->n_allowed_ports && !port_ok; i++)
        port_ok = p->allowed_ports[i] == port;
    for (size_t i = 0; port_ok && i < p->n_allowed_cidrs; i++) {
        const struct sbx_addr *m = policy_cidr_opens(&p->allowed_cidrs[i], t);
        if (m) {
            say(d, SBX_VERDICT_ALLOW, t, m, "allowed cidr %s",
                policy_cidr_str(&p->allowed_cidrs[i], text, sizeof(text)));
            return true;
        }
    }
    return false;
}

static bool denied_explicitly(const struct sbx_policy *p, const char *name,
                              const struct policy_target *t, uint16_t port, struct sbx_decision *d)
{
    char text[POLICY_TEXT_LEN];
    for (size_t i = 0; i < p->n_deny; i++) {
        const struct sbx_addr *m;
        if (policy_rule_matches(&p->deny[i], name, t, port, false, &m)) {
            say_rule(d, SBX_VERDICT_DENY, "deny", &p->deny[i], t, m);
            return true;
        }
    }
    for (size_t i = 0; i < p->n_blocked; i++) {
        const struct sbx_addr *m = policy_cidr_match(&p->blocked[i], t);
        if (m) {
            say(d, SBX_VERDICT_DENY, t, m, "blocked cidr %s",
                policy_cidr_str(&p->blocked[i], text, sizeof(text)));
            return true;
        }
    }
    return false;
}

/* Own addresses and the deny-list; true when the decision is made. */
static bool judged_by_denylist(const struct sbx_policy *p, const struct policy_target *t,
                               uint16_t port, struct sbx_decision *d)
{
    char why[POLICY_TEXT_LEN];
    const struct sbx_addr *m;
    if (!policy_denylisted(&p->denied, t, &m, why, sizeof(why)))
        return false;
    if (!allow_rule_opens(p, t, port, d))
        say(d, SBX_VERDICT_DENY, t, m, "%s", why);
    return true;
}

/* The whole decision; name normalized or NULL, port 0 for "some port". */
static void decide(const struct sbx_policy *p, const char *name, const struct sbx_addr *addr,
                   uint16_t port, struct sbx_decision *d)
{
    struct policy_target t;
    target_of(p, addr, &t);
    if (opened_by_settings(p, name, &t, port, d) || denied_explicitly(p, name, &t, port, d) ||
        judged_by_denylist(p, &t, port, d))
        return;
    for (size_t i = 0; i < p->n_allow; i++) {
        const struct sbx_addr *m;
        if (policy_rule_matches(&p->allow[i], name, &t, port, true, &m)) {
            say_rule(d, SBX_VERDICT_ALLOW, "allow", &p->allow[i], &t, m);
            return;
        }
    }
    say_default(p, d);
}

static const struct host_entry *find_host(const struct sbx_policy *p, const char *name)
{
    for (size_t i = p->n_hosts; i-- > 0;)
        if (strcmp(p->hosts[i].name, name) == 0)
            return &p->hosts[i];
    return NULL;
}

bool sbx_policy_name_allowed(const struct sbx_policy *p, const char *name, struct sbx_decision *d)
{
    char norm[POLICY_NAME_MAX + 1];
    if (!name || !policy_name_normalize(name, norm)) {
        say(d, SBX_VERDICT_DENY, NULL, NULL, "invalid name");
        return false;
    }
    /* An explicit deny of the name wins, static host or not. */
    for (size_t i = 0; i < p->n_deny; i++) {
        if (p->deny[i].port == 0 && policy_name_matches(&p->deny[i], norm)) {
            say_rule(d, SBX_VERDICT_DENY, "deny", &p->deny[i], NULL, NULL);
            return false;
        }
    }
    const struct host_entry *h = find_host(p, norm);
    if (h) {
        decide(p, norm, &h->addr, 0, d);
        return d->verdict == SBX_VERDICT_ALLOW;
    }
    for (size_t i = 0; i < p->n_targets; i++) {
        if (policy_name_matches(&p->targets[i], norm)) {
            say_rule(d, SBX_VERDICT_ALLOW, "allowed internal target", &p->targets[i], NULL, NULL);
            return true;
        }
    }
    for (size_t i = 0; i < p->n_allow; i++) {
        const struct sbx_rule *r = &p->allow[i];
        if (r->kind == RULE_PORT || policy_name_matches(r, norm)) {
            say_rule(d, SBX_VERDICT_ALLOW, "allow", r, NULL, NULL);
            return true;
        }
    }
    say_default(p, d);
    return d->verdict == SBX_VERDICT_ALLOW;
}

void sbx_policy_check(const struct sbx_policy *p, const char *name, const struct sbx_addr *addr,
                      uint16_t port, struct sbx_decision *d)
{
    char norm[POLICY_NAME_MAX + 1];
    if (!addr || !policy_family_ok(addr->family)) {
        say(d, SBX_VERDICT_DENY, NULL, NULL, "no address");
        return;
    }
    if (port == 0) {
        say(d, SBX_VERDICT_DENY, NULL, NULL, "port 0");
        return;
    }
    if (name && !*name)
        name = NULL;
    if (name && !policy_name_normalize(name, norm)) {
        say(d, SBX_VERDICT_DENY, NULL, NULL, "invalid name");
        return;
    }
    decide(p, name ? norm : NULL, addr, port, d);
}

bool sbx_policy_opens_some_port(const struct sbx_policy *p, const char *name,
                                const struct sbx_addr *addr)
{
    char norm[POLICY_NAME_MAX + 1];
    struct sbx_decision d;
    if (!addr || !policy_family_ok(addr->family) || (name && !policy_name_normalize(name, norm)))
        return false;
    decide(p, name ? norm : NULL, addr, 0, &d);
    return d.verdict == SBX_VERDICT_ALLOW;
}

bool sbx_policy_static_host(const struct sbx_policy *p, const char *name, struct sbx_addr *out)
{
    char norm[POLICY_NAME_MAX + 1];
    if (!name || !policy_name_normalize(name, norm))
        return false;
    const struct host_entry *h = find_host(p, norm);
    if (h && out)
        *out = h->addr;
    return h != NULL;
}

/* --- the address part, for nftables ------------------------------------- */

struct nft_sets {
    FILE *f[4]; /* deny4, deny6, open4, open6 */
    char *text[4];
    size_t len[4];
    size_t n[4];
};

static void nft_add(struct nft_sets *s, bool open, const struct policy_cidr *c)
{
    int i = (open ? 2 : 0) + (c->net.family == AF_INET6);
    char buf[POLICY_TEXT_LEN];
    fprintf(s->f[i], "%s%s", s->n[i]++ ? ", " : "", policy_cidr_str(c, buf, sizeof(buf)));
}

static void nft_add_addr(struct nft_sets *s, bool open, const struct sbx_addr *a)
{
    struct policy_cidr c = {.net = *a, .prefix = policy_addr_bits(a->family)};
    nft_add(s, open, &c);
}

int sbx_policy_nft_sets(const struct sbx_policy *p, char **out, sbx_err *err)
{
    static const char *const names[4] = {"deny4", "deny6", "open4", "open6"};
    struct nft_sets s = {0};
    int rc = 0;
    for (int i = 0; i < 4; i++)
        if (!(s.f[i] = open_memstream(&s.text[i], &s.len[i])))
            rc = sbx_err_set(err, ENOMEM, "nftables sets");
    if (rc == 0) {
        /* Opened whatever the deny-list says: by address, on any port (the
         * listener still decides the port). */
        for (size_t i = 0; i < p->n_allowed_cidrs; i++)
            nft_add(&s, true, &p->allowed_cidrs[i]);
        for (size_t i = 0; i < p->n_allow; i++)
            if (p->allow[i].kind == RULE_ADDR)
                nft_add(&s, true, &p->allow[i].cidr);
        bool by_name = false;
        for (size_t i = 0; i < p->n_targets; i++) {
            const struct sbx_rule *r = &p->targets[i];
            if (r->kind == RULE_ADDR) {
                nft_add(&s, true, &r->cidr);
                continue;
            }
            /* A target by name opens what the name is answered with: a static
             * host's address is known now; one our DNS resolves is not. */
            const struct host_entry *h = r->kind == RULE_NAME ? find_host(p, r->name) : NULL;
            if (h)
                nft_add_addr(&s, true, &h->addr);
            else
                by_name = true;
        }
        /* Refused at connect: the protected addresses (never opened by a
         * name) and, unless a target by name may open any of them, the
         * deny-list, the blocked CIDRs and address deny rules on every port. */
        for (size_t i = 0; i < POLICY_N_METADATA; i++)
            nft_add_addr(&s, false, &p->denied.metadata[i]);
        for (size_t i = 0; i < p->denied.n_own; i++)
            nft_add_addr(&s, false, &p->denied.own[i]);
        for (size_t i = 0; !by_name && i < POLICY_N_DENYLIST; i++)
            nft_add(&s, false, &p->denied.ranges[i]);
        for (size_t i = 0; !by_name && i < p->n_blocked; i++)
            nft_add(&s, false, &p->blocked[i]);
        for (size_t i = 0; !by_name && i < p->n_deny; i++)
            if (p->deny[i].kind == RULE_ADDR && p->deny[i].port == 0)
                nft_add(&s, false, &p->deny[i].cidr);
    }
    for (int i = 0; i < 4; i++)
        if (s.f[i] && fclose(s.f[i]) != 0 && rc == 0)
            rc = sbx_err_set(err, ENOMEM, "nftables sets");
    char *text = NULL;
    size_t len = 0;
    FILE *f = rc == 0 ? open_memstream(&text, &len) : NULL;
    if (rc == 0 && !f)
        rc = sbx_err_set(err, ENOMEM, "nftables sets");
    for (int i = 0; f && i < 4; i++) {
        fprintf(f, "  set %s {\n    type %s; flags interval; auto-merge;\n", names[i],
                i % 2 ? "ipv6_addr" : "ipv4_addr");
        if (s.n[i])
            fprintf(f, "    elements = { %s }\n", s.text[i]);
        fprintf(f, "  }\n");
    }
    if (f && fclose(f) != 0 && rc == 0)
        rc = sbx_err_set(err, ENOMEM, "nftables sets");
    for (int i = 0; i < 4; i++)
        free(s.text[i]);
    if (rc < 0) {
        free(text);
        return -1;
    }
    *out = text;
    return 0;
}
