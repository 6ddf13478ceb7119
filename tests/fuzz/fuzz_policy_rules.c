/* libFuzzer target: the egress policy's rule parser (net/policy_rules.c)
 * and the policy built from rules, as written by an operator, on
 * `run --allow/--deny`, or by a caller in a task's or session's
 * "network" (each input line is one rule).
 *
 * Beyond "no crash": a rule that parses prints (policy_rule_str) as text
 * that parses again to the same rule, and prints the same; a policy built
 * from the lines (as allow rules, then as deny rules) answers every name
 * and address check with a verdict and the rule that decided; with the
 * lines as deny rules and default deny, nothing is ever allowed. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/policy.h"
#include "net/policy_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_LINES 32

static void roundtrip(const char *text)
{
    struct sbx_rule r, again;
    if (policy_rule_parse(text, &r))
        return;
    char buf[POLICY_NAME_MAX + 80], buf2[sizeof(buf)];
    const char *s = policy_rule_str(&r, buf, sizeof(buf));
    assert(s);
    const char *why = policy_rule_parse(s, &again);
    if (why)
        fprintf(stderr, "'%s' printed as '%s', refused: %s\n", text, s, why);
    assert(!why);
    assert(!strcmp(policy_rule_str(&again, buf2, sizeof(buf2)), s));
    assert(again.kind == r.kind && again.port == r.port);
}

static void checks(const struct sbx_policy *p, const char *const *lines, size_t n, bool never)
{
    static const char *const addrs[] = {"93.184.216.34", "10.0.0.1",       "169.254.169.254",
                                        "2001:db8::1",   "::ffff:1.2.3.4", "127.0.0.1"};
    for (size_t i = 0; i < sizeof(addrs) / sizeof(addrs[0]); i++) {
        struct sbx_addr a;
        sbx_err e = {0};
        assert(sbx_addr_parse(addrs[i], &a, &e) == 0);
        for (size_t k = 0; k <= n; k++) {
            struct sbx_decision d;
            const char *name = k < n ? lines[k] : NULL;
            sbx_policy_check(p, name, &a, (uint16_t)(443 + k), &d);
            assert(d.rule[0]);
            assert(!never || d.verdict == SBX_VERDICT_DENY);
            if (name && sbx_policy_name_allowed(p, name, &d) && never)
                assert(0);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    const char *lines[MAX_LINES + 1];
    size_t n = 0;
    for (char *p = text, *nl; p && n < MAX_LINES; p = nl) {
        nl = strchr(p, '\n');
        if (nl)
            *nl++ = '\0';
        lines[n++] = p;
    }
    lines[n] = NULL;
    for (size_t i = 0; i < n; i++)
        roundtrip(lines[i]);
    sbx_err e = {0};
    struct sbx_policy_opts o = {.def = SBX_DEFAULT_DENY, .allow = lines};
    struct sbx_policy *p = sbx_policy_new(&o, &e);
    if (p) {
        checks(p, lines, n, false);
        sbx_policy_free(p);
    } else {
        assert(e.msg[0]);
    }
    o = (struct sbx_policy_opts){.def = SBX_DEFAULT_DENY, .deny = lines};
    if ((p = sbx_policy_new(&o, &e))) {
        checks(p, lines, n, true);
        sbx_policy_free(p);
    }
    free(text);
    return 0;
}
