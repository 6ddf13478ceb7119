/* One rule: parsed from what an operator writes, written back for a
 * decision, matched against a connection. Names in rules: letters, digits,
 * '-' (not at either end of a label) and '_'; a numeric last label is
 * refused (a mistyped address such as "10.1.2"). A CIDR with host bits set
 * is accepted and masked. */
#include "net/policy_int.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#define LABEL_MAX_LEN 63

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
const char *policy_port_parse(const char *s, uint16_t *out)
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

static const char *parse_prefix(const char *s, struct policy_cidr *c)
{
    unsigned long v;
    if (!parse_decimal(s, 3, &v))
        return "bad prefix length";
    if (v > policy_addr_bits(c->net.family))
        return c->net.family == AF_INET ? "prefix out of range (0-32)"
                                        : "prefix out of range (0-128)";
    c->prefix = (unsigned)v;
    policy_mask_host_bits(&c->net, c->prefix);
    return NULL;
}

/* A name as an operator writes it: "api.example.com", "example.com.", and
 * with wildcard_ok "*.example.com" (suffix set). Lower-cased into out. */
const char *policy_name_parse(const char *s, bool wildcard_ok, char *out, bool *suffix)
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
    if (len > POLICY_NAME_MAX - (*suffix ? 2 : 0))
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
        const char *why = policy_name_parse(host, true, r->name, &suffix);
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
    return port ? policy_port_parse(port, &r->port) : NULL;
}

const char *policy_rule_parse(const char *s, struct sbx_rule *out)
{
    struct sbx_rule r = {0};
    char buf[POLICY_RULE_MAX + 1];
    size_t len = strlen(s);
    if (len == 0)
        return "empty rule";
    if (len > POLICY_RULE_MAX)
        return "too long";
    memcpy(buf, s, len + 1);

    const char *why;
    char *colon = strchr(buf, ':');
    bool ipv6 = colon && strchr(colon + 1, ':');
    if (buf[0] == ':' && !ipv6) {
        r.kind = RULE_PORT;
        why = policy_port_parse(buf + 1, &r.port);
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
            why = policy_port_parse(colon + 1, &r.port);
    }
    if (why)
        return why;
    *out = r;
    return NULL;
}

const char *policy_rule_str(const struct sbx_rule *r, char *buf, size_t len)
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

/* A name as the sandbox asked for it: lower-cased, one trailing dot dropped;
 * false for a name no resolver would take. */
bool policy_name_normalize(const char *s, char *out)
{
    size_t len = strlen(s);
    if (len && s[len - 1] == '.')
        len--;
    if (len == 0 || len > POLICY_NAME_MAX)
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

bool policy_name_matches(const struct sbx_rule *r, const char *name)
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
bool policy_port_matches(uint16_t rule_port, uint16_t port, bool allowing)
{
    return rule_port == 0 || rule_port == port || (allowing && port == 0);
}

/* Does r hold this connection? *m is set to the form of the address it
 * matched (NULL for a name or port rule). */
bool policy_rule_matches(const struct sbx_rule *r, const char *name, const struct policy_target *t,
                         uint16_t port, bool allowing, const struct sbx_addr **m)
{
    *m = NULL;
    if (!policy_port_matches(r->port, port, allowing))
        return false;
    switch (r->kind) {
    case RULE_PORT:
        return true;
    case RULE_NAME:
    case RULE_SUFFIX:
        return policy_name_matches(r, name);
    case RULE_ADDR:
        *m = allowing ? policy_cidr_opens(&r->cidr, t) : policy_cidr_match(&r->cidr, t);
        return *m != NULL;
    }
    return false;
}
