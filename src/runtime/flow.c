#include "runtime/flow.h"

#include <arpa/inet.h>

json_t *sbx_flow_json(const struct sbx_flow *f)
{
    char addr[INET6_ADDRSTRLEN] = "";
    if (f->addr.family)
        sbx_addr_str(&f->addr, addr, sizeof(addr));
    return json_pack("{s:s, s:s, s:s, s:i, s:s, s:s, s:I, s:I, s:f}", "via",
                     sbx_flow_via_name(f->via), "name", f->name, "address", addr, "port", f->port,
                     "verdict", f->verdict == SBX_VERDICT_DENY ? "deny" : "allow", "rule", f->rule,
                     "bytesOut", (json_int_t)f->bytes_out, "bytesIn", (json_int_t)f->bytes_in,
                     "durationSeconds", f->duration_s);
}
