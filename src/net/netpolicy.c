#include "net/netpolicy.h"

#include <string.h>

int sbx_net_policy_parse(const char *s, enum sbx_net_policy *out, sbx_err *err)
{
    if (s && strcmp(s, "none") == 0)
        *out = SBX_NET_NONE;
    else if (s && strcmp(s, "proxy") == 0)
        *out = SBX_NET_PROXY;
    else if (s && strcmp(s, "host") == 0)
        *out = SBX_NET_HOST;
    else
        return sbx_err_set(err, EINVAL, "unknown network policy '%s' (none, proxy, host)",
                           s ? s : "");
    return 0;
}

const char *sbx_net_policy_name(enum sbx_net_policy p)
{
    return p == SBX_NET_HOST ? "host" : p == SBX_NET_PROXY ? "proxy" : "none";
}
