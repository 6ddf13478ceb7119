/* The egress policy engine: rules parsed once, then a linear walk per check
 * with no allocation. Pure logic: inet_pton/inet_ntop are the only libc calls
 * that know about networks.
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
 *   allowed on some port: internal targets by that name, then deny domain
 *   rules without a port, then allow domain rules (port ignored) and ":port"
 *   rules (any host may then be reached, so refusing its name would protect
 *   nothing), then the default. Address allow rules do not open names under
 *   default deny: resolving any name upstream would be a DNS tunnel. A static
 *   host is judged by its address, with its name, on any port.
 * - Static hosts: the last entry for a name wins (flags after config).
 * - Lists (CLAW_*): comma-separated, blanks around entries and empty entries
 *   ignored; ports are single ports 1-65535. */
#include "net/policy.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define NAME_MAX_LEN 253
#define LABEL_MAX_LEN 63
#define RULE_MAX_LEN 300
#define TEXT_LEN 320

struct cidr {
    struct sbx_addr net; /* host bits cleared */
    unsigned prefix;
};

enum rule_kind { RULE_PORT, RULE_NAME, RULE_SUFFIX, RULE_ADDR };

struct sbx_rule {
    enum rule_kind kind;
    uint16_t port;               /* 0: every port */
    struct cidr cidr;            /* RULE_ADDR */
    bool has_prefix;             /* written "a/len", not a single address */
    char name[NAME_MAX_LEN + 1]; /* lower case; for RULE_SUFFIX without "*." */
};

struct host_entry {
    char name[NAME_MAX_LEN + 1];
    struct sbx_addr addr;
};

/* The original's deny-list, then what it missed. A more specific entry comes
 * before the range holding it, so the decision names it. */
static const char *const denylist_text[] = {
    "0.0.0.0/8",          "10.0.0.0/8",   "100.64.0.0/10",  "127.0.0.0/8",   "169.254.0.0/16",
    "172.16.0.0/12",      "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4",
    "255.255.255.255/32", "240.0.0.0/4",  "::/128",         "::1/128",       "::/96",
    "64:ff9b:1::/48",     "fc00::/7",     "fe80::/10",      "fec0::/10",     "ff00::/8",
};
#define N_DENYLIST (sizeof(denylist_text) / sizeof(denylist_text[0]))

static const char *const metadata_text[] = {"169.254.169.254", "100.100.100.200", "fd00:ec2::254"};
#define N_METADATA (sizeof(metadata_text) / sizeof(metadata_text[0]))

struct sbx_policy {
    enum sbx_default def;
    struct sbx_rule *allow, *deny, *targets;
    size_t n_allow, n_deny, n_targets;
    struct cidr *allowed_cidrs, *blocked;
    size_t n_allowed_cidrs, n_blocked;
    uint16_t *allowed_ports;
    size_t n_allowed_ports;
    struct host_entry *hosts;
    size_t n_hosts;
    struct sbx_addr *own;
    size_t n_own;
    struct cidr denylist[N_DENYLIST];
    struct sbx_addr metadata[N_METADATA];
};

/* --- addresses ---------------------------------------------------------- */

static bool family_ok(int family)
{
    return family == AF_INET || family == AF_INET6;
}

static unsigned addr_bits(int family)
{
    return family == AF_INET ? 32 : 128;
}

static const uint8_t *addr_bytes(const struct sbx_addr *a)
{
    return a->family == AF_INET ? (const uint8_t *)&a->u.v4 : a->u.v6.s6_addr;
}

static bool addr_eq(const struct sbx_addr *a, const struct sbx_addr *b)
{
    return a->family == b->family &&
           memcmp(addr_bytes(a), addr_bytes(b), addr_bits(a->family) / 8) == 0;
}

static void mask_host_bits(struct sbx_addr *a, unsigned prefix)
{
    uint8_t *b = a->family == AF_INET ? (uint8_t *)&a->u.v4 : a->u.v6.s6_addr;
    for (unsigned i = 0; i < addr_bits(a->family) / 8; i++) {
        if (prefix >= 8 * (i + 1))
            continue;
        unsigned keep = prefix > 8 * i ? prefix - 8 * i : 0;
        b[i] &= (uint8_t)(0xff00 >> keep);
    }
}

static bool cidr_contains(const struct cidr *c, const struct sbx_addr *a)
{
    if (c->net.family != a->family)
        return false;
    const uint8_t *n = addr_bytes(&c->net), *x = addr_bytes(a);
    unsigned full = c->prefix / 8, rest = c->prefix % 8;
    if (memcmp(n, x, full) != 0)
        return false;
    if (!rest)
        return true;
    uint8_t mask = (uint8_t)(0xff00 >> rest);
    return (n[full] & mask) == (x[full] & mask);
}

static bool cidr_is_host(const struct cidr *c)
{
    return c->prefix == addr_bits(c->net.family);
}

static const char *cidr_str(const struct cidr *c, char *buf, size_t len)
{
    char a[INET6_ADDRSTRLEN];
    snprintf(buf, len, "%s/%u", sbx_addr_str(&c->net, a, sizeof(a)), c->prefix);
    return buf;
}

/* The IPv4 address an IPv6 address carries, by the prefixes that route it
 * to IPv4: mapped, translated, NAT64 well-known prefix, 6to4. */
static bool embedded_v4(const struct sbx_addr *a, struct sbx_addr *out)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t translated[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0};
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    if (a->family != AF_INET6)
        return false;
    const uint8_t *b = a->u.v6.s6_addr;
    const uint8_t *v4;
    if (!memcmp(b, mapped, 12) || !memcmp(b, translated, 12) || !memcmp(b, nat64, 12))
        v4 = b + 12;
    else if (b[0] == 0x20 && b[1] == 0x02)
        v4 = b + 2;
    else
        return false;
    out->family = AF_INET;
    memcpy(&out->u.v4, v4, 4);
    return true;
}

int sbx_addr_parse(const char *s, struct sbx_addr *out, sbx_err *err)
{
    struct sbx_addr a = {0};
    if (s && inet_pton(AF_INET, s, &a.u.v4) == 1)
        a.family = AF_INET;
    else if (s && inet_pton(AF_INET6, s, &a.u.v6) == 1)
        a.family = AF_INET6;
    else
        return sbx_err_set(err, EINVAL, "'%s' is not an IP address", s ? s : "");
    *out = a;
    return 0;
}

const char *sbx_addr_str(const struct sbx_addr *a, char *buf, size_t len)
{
    if (!len)
        return buf;
    if (!a || !family_ok(a->family) || !inet_ntop(a->family, &a->u, buf, (socklen_t)len))
        snprintf(buf, len, "?");
    return buf;
}

/* --- parsing ------------------------------------------------------------ */

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static char ascii_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static bool name_char(char c)
{
    c = ascii_lower(c);
    return (c >= 'a' && c <= 'z') || is_digit(c) || c == '-' || c == '_';
}

/* Decimal digits only, at most max_digits of them. */
static bool parse_decimal(const char *s, unsigned max_digits, unsigned long *out)
{
    size_t n = strlen(s);
    if (n == 0 || n > max_digits)
        return false;
    unsigned long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_digit(s[i]))
            return false;
        v = v * 10 + (unsigned long)(s[i] - '0');
    }
    *out = v;
    return true;
}

/* Each parser returns NULL on success, else why the text is refused. */
static const char *parse_port(const char *s, uint16_t *out)
{
    unsigned long v;
    if (!*s)
        return "missing port";
    if (!parse_decimal(s, 5, &v))
        return "bad port";
    if (v < 1 || v > 65535)
        return "port out of range (1-65535)";
    *out = (uint16_t)v;
    return NULL;
}

static const char *parse_prefix(const char *s, struct cidr *c)
{
    unsigned long v;
    if (!parse_decimal(s, 3, &v))
        return "bad prefix length";
    if (v > addr_bits(c->net.family))
        return c->net.family == AF_INET ? "prefix out of range (0-32)"
                                        : "prefix out of range (0-128)";
    c->prefix = (unsigned)v;
    mask_host_bits(&c->net, c->prefix);
    return NULL;
}

/* A name as an operator writes it: "api.example.com", "example.com.", and
 * with wildcard_ok "*.example.com" (suffix set). Lower-cased into out. */
static const char *parse_name(const char *s, bool wildcard_ok, char *out, bool *suffix)
{
    *suffix = false;
    if (s[0] == '*' && s[1] == '.') {
        if (!wildcard_ok)
            return "no wildcard allowed here";
        s += 2;
        *suffix = true;
        if (!*s)
            return "empty name after '*.'";
    }
    size_t len = strlen(s);
    if (len && s[len - 1] == '.')
        len--;
    if (len == 0)
        return "empty name";
    if (len > NAME_MAX_LEN - (*suffix ? 2 : 0))
        return "name longer than 253 characters";
    size_t label = 0;
    bool numeric = true;
    for (size_t i = 0; i <= len; i++) {
        char c = i < len ? s[i] : '.';
        if (c == '.') {
            if (label == 0)
                return "empty label";
            if (s[i - 1] == '-')
                return "label ends with '-'";
            label = 0;
            out[i] = '.';
            continue;
        }
        if (c == '*')
            return "'*' is only allowed as a leading '*.'";
        if (!name_char(c))
            return "bad character in name";
        if (label == 0) {
            if (c == '-')
                return "label starts with '-'";
            numeric = true;
        }
        if (!is_digit(c))
            numeric = false;
        if (++label > LABEL_MAX_LEN)
            return "label longer than 63 characters";
        out[i] = ascii_lower(c);
    }
    if (numeric)
        return "numeric top-level label (a mistyped address?)";
    out[len] = '\0';
    return NULL;
}

static bool digits_and_dots(const char *s)
{
    for (; *s; s++)
        if (!is_digit(*s) && *s != '.')
            return false;
    return true;
}

/* Host part without brackets, port already cut off. */
static const char *parse_host(char *host, struct sbx_rule *r)
{
    char *slash = strchr(host, '/');
    if (slash)
        *slash = '\0';
    r->kind = RULE_ADDR;
    if (inet_pton(AF_INET, host, &r->cidr.net.u.v4) == 1) {
        r->cidr.net.family = AF_INET;
    } else if (slash || digits_and_dots(host)) {
        return "bad IPv4 address";
    } else {
        bool suffix;
        const char *why = parse_name(host, true, r->name, &suffix);
        r->kind = suffix ? RULE_SUFFIX : RULE_NAME;
        return why;
    }
    r->cidr.prefix = 32;
    r->has_prefix = slash != NULL;
    return slash ? parse_prefix(slash + 1, &r->cidr) : NULL;
}

/* "[v6]", "[v6]/len", each with an optional ":port". */
static const char *parse_bracketed(char *s, struct sbx_rule *r)
{
    char *close = strchr(s, ']');
    if (!close)
        return "missing ']'";
    *close = '\0';
    r->kind = RULE_ADDR;
    r->cidr.net.family = AF_INET6;
    r->cidr.prefix = 128;
    if (inet_pton(AF_INET6, s + 1, &r->cidr.net.u.v6) != 1)
        return "bad IPv6 address";
    char *rest = close + 1, *port = NULL;
    if (*rest == '/') {
        char *colon = strchr(rest, ':');
        if (colon) {
            *colon = '\0';
            port = colon + 1;
        }
        r->has_prefix = true;
        const char *why = parse_prefix(rest + 1, &r->cidr);
        if (why)
            return why;
    } else if (*rest == ':') {
        port = rest + 1;
    } else if (*rest) {
        return "unexpected text after ']'";
    }
    return port ? parse_port(port, &r->port) : NULL;
}

static const char *parse_rule(const char *s, struct sbx_rule *out)
{
    struct sbx_rule r = {0};
    char buf[RULE_MAX_LEN + 1];
    size_t len = strlen(s);
    if (len == 0)
        return "empty rule";
    if (len > RULE_MAX_LEN)
        return "too long";
    memcpy(buf, s, len + 1);

    const char *why;
    char *colon = strchr(buf, ':');
    bool ipv6 = colon && strchr(colon + 1, ':');
    if (buf[0] == ':' && !ipv6) {
        r.kind = RULE_PORT;
        why = parse_port(buf + 1, &r.port);
    } else if (buf[0] == '[') {
        why = parse_bracketed(buf, &r);
    } else if (ipv6) {
        /* Two colons or more: an IPv6 address, which takes no port unbracketed. */
        char *slash = strchr(buf, '/');
        if (slash)
            *slash = '\0';
        r.kind = RULE_ADDR;
        r.cidr.net.family = AF_INET6;
        r.cidr.prefix = 128;
        r.has_prefix = slash != NULL;
        if (inet_pton(AF_INET6, buf, &r.cidr.net.u.v6) != 1)
            why = "bad IPv6 address (with a port: [address]:port)";
        else
            why = slash ? parse_prefix(slash + 1, &r.cidr) : NULL;
    } else {
        if (colon)
            *colon = '\0';
        why = parse_host(buf, &r);
        if (!why && colon)
            why = parse_port(colon + 1, &r.port);
    }
    if (why)
        return why;
    *out = r;
    return NULL;
}

static const char *rule_str(const struct sbx_rule *r, char *buf, size_t len)
{
    char a[INET6_ADDRSTRLEN], prefix[8] = "", port[8] = "";
    if (r->port)
        snprintf(port, sizeof(port), ":%u", r->port);
    switch (r->kind) {
    case RULE_PORT:
        snprintf(buf, len, "%s", port);
        break;
    case RULE_NAME:
    case RULE_SUFFIX:
        snprintf(buf, len, "%s%s%s", r->kind == RULE_SUFFIX ? "*." : "", r->name, port);
        break;
    case RULE_ADDR:
        if (r->has_prefix)
            snprintf(prefix, sizeof(prefix), "/%u", r->cidr.prefix);
        sbx_addr_str(&r->cidr.net, a, sizeof(a));
        if (r->cidr.net.family == AF_INET6 && r->port)
            snprintf(buf, len, "[%s]%s%s", a, prefix, port);
        else
            snprintf(buf, len, "%s%s%s", a, prefix, port);
        break;
    }
    return buf;
}

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
        const char *why = parse_rule(texts[i], &(*out)[i]);
        if (why)
            return sbx_err_set(err, EINVAL, "rule '%.160s': %s", texts[i], why);
    }
    *n = count;
    return 0;
}

typedef const char *(*entry_fn)(struct sbx_policy *p, const char *entry);

static const char *add_cidr(struct cidr *list, size_t *n, const char *entry)
{
    struct sbx_rule r;
    const char *why = parse_rule(entry, &r);
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
    return parse_port(entry, &p->allowed_ports[p->n_allowed_ports++]);
}

static const char *add_target(struct sbx_policy *p, const char *entry)
{
    struct sbx_rule r;
    const char *why = parse_rule(entry, &r);
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
            char entry[RULE_MAX_LEN + 1];
            size_t len = (size_t)(e - b);
            if (len > RULE_MAX_LEN)
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
        char buf[RULE_MAX_LEN + 1];
        const char *why = NULL, *eq = strchr(hosts[i], '=');
        size_t len = eq ? (size_t)(eq - hosts[i]) : 0;
        bool suffix;
        if (!eq)
            why = "not name=address";
        else if (len > RULE_MAX_LEN)
            why = "name longer than 253 characters";
        if (!why) {
            memcpy(buf, hosts[i], len);
            buf[len] = '\0';
            why = parse_name(buf, false, p->hosts[i].name, &suffix);
        }
        if (!why && sbx_addr_parse(eq + 1, &p->hosts[i].addr, NULL) < 0)
            why = "bad address";
        if (why)
            return sbx_err_set(err, EINVAL, "host entry '%.160s': %s", hosts[i], why);
    }
    p->n_hosts = count;
    return 0;
}

static int add_own(struct sbx_policy *p, const struct sbx_addr *own, size_t n, sbx_err *err)
{
    if (!n)
        return 0;
    if (!own)
        return sbx_err_set(err, EINVAL, "own addresses: none given for %zu", n);
    p->own = calloc(n, sizeof(*p->own));
    if (!p->own)
        return sbx_err_set(err, ENOMEM, "own addresses");
    for (size_t i = 0; i < n; i++) {
        if (!family_ok(own[i].family))
            return sbx_err_set(err, EINVAL, "own address %zu: family %d is not IP", i,
                               own[i].family);
        p->own[i] = own[i];
    }
    p->n_own = n;
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
    for (size_t i = 0; i < N_DENYLIST; i++) {
        struct sbx_rule r;
        if (parse_rule(denylist_text[i], &r)) {
            sbx_err_set(err, EINVAL, "deny-list entry '%s'", denylist_text[i]);
            return NULL;
        }
        p->denylist[i] = r.cidr;
    }
    for (size_t i = 0; i < N_METADATA; i++)
        if (sbx_addr_parse(metadata_text[i], &p->metadata[i], err) < 0)
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
        add_hosts(p, o->hosts, err) < 0 || add_own(p, o->own_addrs, o->n_own_addrs, err) < 0)
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
    free(p->own);
    free(p);
}

/* --- deciding ----------------------------------------------------------- */

/* The address under judgement, and the IPv4 address it may carry. */
struct target {
    const struct sbx_addr *a;
    struct sbx_addr e;
    bool has_e;
    bool protected; /* own or metadata address, either form */
};

static bool in_list(const struct sbx_addr *list, size_t n, const struct sbx_addr *a)
{
    for (size_t i = 0; i < n; i++)
        if (addr_eq(&list[i], a))
            return true;
    return false;
}

static bool is_protected(const struct sbx_policy *p, const struct sbx_addr *a)
{
    return in_list(p->own, p->n_own, a) || in_list(p->metadata, N_METADATA, a);
}

static void target_init(const struct sbx_policy *p, const struct sbx_addr *a, struct target *t)
{
    t->a = a;
    t->has_e = embedded_v4(a, &t->e);
    t->protected = is_protected(p, a) || (t->has_e && is_protected(p, &t->e));
}

/* Which form of the target c holds (the address itself first), or NULL. */
static const struct sbx_addr *cidr_match(const struct cidr *c, const struct target *t)
{
    if (cidr_contains(c, t->a))
        return t->a;
    if (t->has_e && cidr_contains(c, &t->e))
        return &t->e;
    return NULL;
}

/* Same, for an entry that opens the target: a protected address only for an
 * entry naming exactly that address. */
static const struct sbx_addr *cidr_opens(const struct cidr *c, const struct target *t)
{
    const struct sbx_addr *m = cidr_match(c, t);
    return m && (!t->protected || cidr_is_host(c)) ? m : NULL;
}

static bool name_matches(const struct sbx_rule *r, const char *name)
{
    if (!name || (r->kind != RULE_NAME && r->kind != RULE_SUFFIX))
        return false;
    if (r->kind == RULE_NAME)
        return strcmp(r->name, name) == 0;
    size_t nl = strlen(name), sl = strlen(r->name);
    return nl > sl + 1 && name[nl - sl - 1] == '.' && strcmp(name + nl - sl, r->name) == 0;
}

/* port 0 is "some port": it meets an allow rule on any port, but a deny rule
 * only when that rule holds every port. */
static bool port_matches(uint16_t rule_port, uint16_t port, bool allowing)
{
    return rule_port == 0 || rule_port == port || (allowing && port == 0);
}

/* Does r hold this connection? *m is set to the form of the address it
 * matched (NULL for a name or port rule). */
static bool rule_matches(const struct sbx_rule *r, const char *name, const struct target *t,
                         uint16_t port, bool allowing, const struct sbx_addr **m)
{
    *m = NULL;
    if (!port_matches(r->port, port, allowing))
        return false;
    switch (r->kind) {
    case RULE_PORT:
        return true;
    case RULE_NAME:
    case RULE_SUFFIX:
        return name_matches(r, name);
    case RULE_ADDR:
        *m = allowing ? cidr_opens(&r->cidr, t) : cidr_match(&r->cidr, t);
        return *m != NULL;
    }
    return false;
}

/* Fill d; when m is the embedded IPv4 address, the decision says so. */
static void say(struct sbx_decision *d, enum sbx_verdict v, const struct target *t,
                const struct sbx_addr *m, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void say(struct sbx_decision *d, enum sbx_verdict v, const struct target *t,
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
                     const struct sbx_rule *r, const struct target *t, const struct sbx_addr *m)
{
    char text[TEXT_LEN];
    say(d, v, t, m, "%s %s", what, rule_str(r, text, sizeof(text)));
}

static void say_default(const struct sbx_policy *p, struct sbx_decision *d)
{
    if (p->def == SBX_DEFAULT_ALLOW)
        say(d, SBX_VERDICT_ALLOW, NULL, NULL, "default allow");
    else
        say(d, SBX_VERDICT_DENY, NULL, NULL, "default deny");
}

/* The first allow rule that opens a deny-listed target on this port. */
static bool allow_rule_opens(const struct sbx_policy *p, const struct target *t, uint16_t port,
                             struct sbx_decision *d)
{
    for (size_t i = 0; i < p->n_allow; i++) {
        const struct sbx_rule *r = &p->allow[i];
        const struct sbx_addr *m;
        if (r->kind == RULE_ADDR && rule_matches(r, NULL, t, port, true, &m)) {
            say_rule(d, SBX_VERDICT_ALLOW, "allow", r, t, m);
            return true;
        }
    }
    return false;
}

static bool opened_by_settings(const struct sbx_policy *p, const char *name, const struct target *t,
                               uint16_t port, struct sbx_decision *d)
{
    char text[TEXT_LEN];
    for (size_t i = 0; i < p->n_targets; i++) {
        const struct sbx_rule *r = &p->targets[i];
        /* A target by address names one address exactly; a name does not
         * say which addresses it stands for, so it opens no protected one. */
        const struct sbx_addr *m = r->kind == RULE_ADDR ? cidr_match(&r->cidr, t) : NULL;
        bool hit = r->kind == RULE_ADDR ? m != NULL : name_matches(r, name) && !t->protected;
        if (hit && port_matches(r->port, port, true)) {
            say_rule(d, SBX_VERDICT_ALLOW, "allowed internal target", r, t, m);
            return true;
        }
    }
    bool port_ok = p->n_allowed_ports == 0 || port == 0;
    for (size_t i = 0; i < p->n_allowed_ports && !port_ok; i++)
        port_ok = p->allowed_ports[i] == port;
    for (size_t i = 0; port_ok && i < p->n_allowed_cidrs; i++) {
        const struct sbx_addr *m = cidr_opens(&p->allowed_cidrs[i], t);
        if (m) {
            say(d, SBX_VERDICT_ALLOW, t, m, "allowed cidr %s",
                cidr_str(&p->allowed_cidrs[i], text, sizeof(text)));
            return true;
        }
    }
    return false;
}

static bool denied_explicitly(const struct sbx_policy *p, const char *name, const struct target *t,
                              uint16_t port, struct sbx_decision *d)
{
    char text[TEXT_LEN];
    for (size_t i = 0; i < p->n_deny; i++) {
        const struct sbx_addr *m;
        if (rule_matches(&p->deny[i], name, t, port, false, &m)) {
            say_rule(d, SBX_VERDICT_DENY, "deny", &p->deny[i], t, m);
            return true;
        }
    }
    for (size_t i = 0; i < p->n_blocked; i++) {
        const struct sbx_addr *m = cidr_match(&p->blocked[i], t);
        if (m) {
            say(d, SBX_VERDICT_DENY, t, m, "blocked cidr %s",
                cidr_str(&p->blocked[i], text, sizeof(text)));
            return true;
        }
    }
    return false;
}

/* Own addresses and the deny-list; true when the decision is made. */
static bool judged_by_denylist(const struct sbx_policy *p, const struct target *t, uint16_t port,
                               struct sbx_decision *d)
{
    char text[TEXT_LEN];
    const struct sbx_addr *m = NULL;
    if (in_list(p->own, p->n_own, t->a))
        m = t->a;
    else if (t->has_e && in_list(p->own, p->n_own, &t->e))
        m = &t->e;
    if (m) {
        if (!allow_rule_opens(p, t, port, d))
            say(d, SBX_VERDICT_DENY, t, m, "own address %s", sbx_addr_str(m, text, sizeof(text)));
        return true;
    }
    for (size_t i = 0; i < N_DENYLIST; i++) {
        m = cidr_match(&p->denylist[i], t);
        if (m) {
            if (!allow_rule_opens(p, t, port, d))
                say(d, SBX_VERDICT_DENY, t, m, "deny-list %s", denylist_text[i]);
            return true;
        }
    }
    return false;
}

/* The whole decision; name normalized or NULL, port 0 for "some port". */
static void decide(const struct sbx_policy *p, const char *name, const struct sbx_addr *addr,
                   uint16_t port, struct sbx_decision *d)
{
    struct target t;
    target_init(p, addr, &t);
    if (opened_by_settings(p, name, &t, port, d) || denied_explicitly(p, name, &t, port, d) ||
        judged_by_denylist(p, &t, port, d))
        return;
    for (size_t i = 0; i < p->n_allow; i++) {
        const struct sbx_addr *m;
        if (rule_matches(&p->allow[i], name, &t, port, true, &m)) {
            say_rule(d, SBX_VERDICT_ALLOW, "allow", &p->allow[i], &t, m);
            return;
        }
    }
    say_default(p, d);
}

/* A name as the sandbox asked for it: lower-cased, one trailing dot dropped;
 * false for a name no resolver would take. */
static bool name_normalize(const char *s, char *out)
{
    size_t len = strlen(s);
    if (len && s[len - 1] == '.')
        len--;
    if (len == 0 || len > NAME_MAX_LEN)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c >= 0x7f)
            return false;
        if (c == '.' && (i == 0 || s[i - 1] == '.'))
            return false;
        out[i] = ascii_lower((char)c);
    }
    out[len] = '\0';
    return out[len - 1] != '.';
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
    char norm[NAME_MAX_LEN + 1];
    if (!name || !name_normalize(name, norm)) {
        say(d, SBX_VERDICT_DENY, NULL, NULL, "invalid name");
        return false;
    }
    /* An explicit deny of the name wins, static host or not. */
    for (size_t i = 0; i < p->n_deny; i++) {
        if (p->deny[i].port == 0 && name_matches(&p->deny[i], norm)) {
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
        if (name_matches(&p->targets[i], norm)) {
            say_rule(d, SBX_VERDICT_ALLOW, "allowed internal target", &p->targets[i], NULL, NULL);
            return true;
        }
    }
    for (size_t i = 0; i < p->n_deny; i++) {
        if (p->deny[i].port == 0 && name_matches(&p->deny[i], norm)) {
            say_rule(d, SBX_VERDICT_DENY, "deny", &p->deny[i], NULL, NULL);
            return false;
        }
    }
    for (size_t i = 0; i < p->n_allow; i++) {
        const struct sbx_rule *r = &p->allow[i];
        if (r->kind == RULE_PORT || name_matches(r, norm)) {
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
    char norm[NAME_MAX_LEN + 1];
    if (!addr || !family_ok(addr->family)) {
        say(d, SBX_VERDICT_DENY, NULL, NULL, "no address");
        return;
    }
    if (port == 0) {
        say(d, SBX_VERDICT_DENY, NULL, NULL, "port 0");
        return;
    }
    if (name && !*name)
        name = NULL;
    if (name && !name_normalize(name, norm)) {
        say(d, SBX_VERDICT_DENY, NULL, NULL, "invalid name");
        return;
    }
    decide(p, name ? norm : NULL, addr, port, d);
}

bool sbx_policy_static_host(const struct sbx_policy *p, const char *name, struct sbx_addr *out)
{
    char norm[NAME_MAX_LEN + 1];
    if (!name || !name_normalize(name, norm))
        return false;
    const struct host_entry *h = find_host(p, norm);
    if (h && out)
        *out = h->addr;
    return h != NULL;
}
