/* What the policy denies before any allow rule: the built-in deny-list
 * (private, loopback, link-local, multicast, reserved, and the IPv6 ranges
 * that carry or stand for them), the metadata services and the daemon
 * host's own addresses. The last two are protected: opened only by an entry
 * naming exactly that one address. */
#include "net/policy_int.h"

#include <stdio.h>

/* The original's deny-list, then what it missed. A more specific entry comes
 * before the range holding it, so the decision names it. */
static const char *const denylist_text[] = {
    "0.0.0.0/8",          "10.0.0.0/8",   "100.64.0.0/10",  "127.0.0.0/8",   "169.254.0.0/16",
    "172.16.0.0/12",      "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4",
    "255.255.255.255/32", "240.0.0.0/4",  "::/128",         "::1/128",       "::/96",
    "64:ff9b:1::/48",     "fc00::/7",     "fe80::/10",      "fec0::/10",     "ff00::/8",
};
_Static_assert(SBX_ARRAY_LEN(denylist_text) == POLICY_N_DENYLIST, "deny-list size");

static const char *const metadata_text[] = {"169.254.169.254", "100.100.100.200", "fd00:ec2::254"};
_Static_assert(SBX_ARRAY_LEN(metadata_text) == POLICY_N_METADATA, "metadata list size");

int policy_denylist_init(struct policy_denylist *dl, sbx_err *err)
{
    for (size_t i = 0; i < POLICY_N_DENYLIST; i++) {
        struct sbx_rule r;
        if (policy_rule_parse(denylist_text[i], &r))
            return sbx_err_set(err, EINVAL, "deny-list entry '%s'", denylist_text[i]);
        dl->ranges[i] = r.cidr;
    }
    for (size_t i = 0; i < POLICY_N_METADATA; i++)
        if (sbx_addr_parse(metadata_text[i], &dl->metadata[i], err) < 0)
            return -1;
    return 0;
}

int policy_denylist_own(struct policy_denylist *dl, const struct sbx_addr *own, size_t n,
                        sbx_err *err)
{
    if (!n)
        return 0;
    if (!own)
        return sbx_err_set(err, EINVAL, "own addresses: none given for %zu", n);
    dl->own = calloc(n, sizeof(*dl->own));
    if (!dl->own)
        return sbx_err_set(err, ENOMEM, "own addresses");
    for (size_t i = 0; i < n; i++) {
        if (!policy_family_ok(own[i].family))
            return sbx_err_set(err, EINVAL, "own address %zu: family %d is not IP", i,
                               own[i].family);
        dl->own[i] = own[i];
    }
    dl->n_own = n;
    return 0;
}

void policy_denylist_free(struct policy_denylist *dl)
{
    free(dl->own);
    dl->own = NULL;
    dl->n_own = 0;
}

static bool in_list(const struct sbx_addr *list, size_t n, const struct sbx_addr *a)
{
    for (size_t i = 0; i < n; i++)
        if (sbx_addr_eq(&list[i], a))
            return true;
    return false;
}

static bool is_protected(const struct policy_denylist *dl, const struct sbx_addr *a)
{
    return in_list(dl->own, dl->n_own, a) || in_list(dl->metadata, POLICY_N_METADATA, a);
}

bool policy_protected(const struct policy_denylist *dl, const struct policy_target *t)
{
    return is_protected(dl, t->a) || (t->has_e && is_protected(dl, &t->e));
}

bool policy_denylisted(const struct policy_denylist *dl, const struct policy_target *t,
                       const struct sbx_addr **m, char *why, size_t len)
{
    char a[INET6_ADDRSTRLEN];
    *m = NULL;
    if (in_list(dl->own, dl->n_own, t->a))
        *m = t->a;
    else if (t->has_e && in_list(dl->own, dl->n_own, &t->e))
        *m = &t->e;
    if (*m) {
        snprintf(why, len, "own address %s", sbx_addr_str(*m, a, sizeof(a)));
        return true;
    }
    for (size_t i = 0; i < POLICY_N_DENYLIST; i++) {
        *m = policy_cidr_match(&dl->ranges[i], t);
        if (*m) {
            snprintf(why, len, "deny-list %s", denylist_text[i]);
            return true;
        }
    }
    return false;
}
