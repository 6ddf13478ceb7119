#include "net/flow.h"

const char *sbx_flow_via_name(enum sbx_flow_via v)
{
    switch (v) {
    case SBX_VIA_SOCKS5:
        return "socks5";
    case SBX_VIA_HTTP:
        return "http";
    case SBX_VIA_TRANSPARENT:
        return "transparent";
    case SBX_VIA_DNS:
        return "dns";
    }
    return "unknown";
}
