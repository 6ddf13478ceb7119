/* Addresses of either family, CIDRs, and the IPv4 address an IPv6 address
 * carries (mapped, translated, NAT64, 6to4): every address rule, list and
 * entry matches either form. inet_pton/inet_ntop are the only libc calls
 * that know about networks. */
#include "net/policy_int.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

bool policy_family_ok(int family)
{
    return family == AF_INET || family == AF_INET6;
}

unsigned policy_addr_bits(int family)
{
    return family == AF_INET ? 32 : 128;
}

static const uint8_t *addr_bytes(const struct sbx_addr *a)
{
    return a->family == AF_INET ? (const uint8_t *)&a->u.v4 : a->u.v6.s6_addr;
}

bool sbx_addr_eq(const struct sbx_addr *a, const struct sbx_addr *b)
{
    return a->family == b->family &&
           memcmp(addr_bytes(a), addr_bytes(b), policy_addr_bits(a->family) / 8) == 0;
}

void policy_mask_host_bits(struct sbx_addr *a, unsigned prefix)
{
    uint8_t *b = a->family == AF_INET ? (uint8_t *)&a->u.v4 : a->u.v6.s6_addr;
    for (unsigned i = 0; i < policy_addr_bits(a->family) / 8; i++) {
        if (prefix >= 8 * (i + 1))
            continue;
        unsigned keep = prefix > 8 * i ? prefix - 8 * i : 0;
        b[i] &= (uint8_t)(0xff00 >> keep);
    }
}

static bool cidr_contains(const struct policy_cidr *c, const struct sbx_addr *a)
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

static bool cidr_is_host(const struct policy_cidr *c)
{
    return c->prefix == policy_addr_bits(c->net.family);
}

const char *policy_cidr_str(const struct policy_cidr *c, char *buf, size_t len)
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
    if (!a || !policy_family_ok(a->family) || !inet_ntop(a->family, &a->u, buf, (socklen_t)len))
        snprintf(buf, len, "?");
    return buf;
}

void policy_target_init(struct policy_target *t, const struct sbx_addr *a)
{
    t->a = a;
    t->has_e = embedded_v4(a, &t->e);
    t->protected = false;
}

/* Which form of the target c holds (the address itself first), or NULL. */
const struct sbx_addr *policy_cidr_match(const struct policy_cidr *c, const struct policy_target *t)
{
    if (cidr_contains(c, t->a))
        return t->a;
    if (t->has_e && cidr_contains(c, &t->e))
        return &t->e;
    return NULL;
}

/* Same, for an entry that opens the target: a protected address only for an
 * entry naming exactly that address. */
const struct sbx_addr *policy_cidr_opens(const struct policy_cidr *c, const struct policy_target *t)
{
    const struct sbx_addr *m = policy_cidr_match(c, t);
    return m && (!t->protected || cidr_is_host(c)) ? m : NULL;
}
