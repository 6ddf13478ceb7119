/* A sandbox's network policy: which network it gets. isolate/ sees only
 * whether the host's namespace is shared (sbx_spec.host_net); the rest is the
 * egress's (net/egress.h). */
#pragma once

#include <stdbool.h>

#include "base/err.h"

enum sbx_net_policy {
    SBX_NET_NONE = 0,  /* loopback only */
    SBX_NET_HOST = 1,  /* the host's network namespace (explicit opt-in) */
    SBX_NET_PROXY = 2, /* loopback only, plus the daemon's egress inside (net/) */
};

/* "none", "proxy" or "host"; else EINVAL naming the three. */
int sbx_net_policy_parse(const char *s, enum sbx_net_policy *out, sbx_err *err);
const char *sbx_net_policy_name(enum sbx_net_policy p);
