/* The sandbox's DNS endpoint (127.0.0.1:53 inside its namespace), served with
 * evdns's server port on a UDP socket the egress created there. It answers A
 * and AAAA only for names the policy could allow (static hosts, else
 * upstream), records each answer in the sandbox's sbx_dns_answers, and refuses
 * every other name and type without forwarding anything (no DNS tunnels). */
#pragma once

#include "net/flow.h"
#include "net/resolve.h"

struct sbx_dns_server;

struct sbx_dns_server *sbx_dns_server_new(struct event_base *base, int udp_fd,
                                          const struct sbx_policy *policy,
                                          struct sbx_resolver *resolver,
                                          struct sbx_dns_answers *answers, sbx_flow_cb on_flow,
                                          void *ud, sbx_err *err);
/* Judge questions by another policy from now on (the caller keeps the old
 * one alive while lookups it admitted may still be pending). */
void sbx_dns_server_set_policy(struct sbx_dns_server *s, const struct sbx_policy *policy);
/* Its flows go to on_flow(ud) from now on (a pooled egress bound to its task). */
void sbx_dns_server_set_flow(struct sbx_dns_server *s, sbx_flow_cb on_flow, void *ud);
/* Stops serving and closes udp_fd; pending upstream lookups are cancelled. */
void sbx_dns_server_free(struct sbx_dns_server *s);
