/* One egress flow, allowed or denied: the audit record. */
#pragma once

#include <stdint.h>

#include "net/policy.h"

enum sbx_flow_via {
    SBX_VIA_SOCKS5,
    SBX_VIA_HTTP,        /* HTTP proxy: CONNECT or absolute-form request */
    SBX_VIA_TRANSPARENT, /* redirected by nftables, target from SO_ORIGINAL_DST */
    SBX_VIA_DNS,         /* a DNS question (port 53, no bytes relayed) */
};
const char *sbx_flow_via_name(enum sbx_flow_via v); /* "socks5", "http", ... */

struct sbx_flow {
    double start;      /* CLOCK_REALTIME seconds */
    double duration_s; /* 0 for a denial */
    enum sbx_flow_via via;
    char name[256];       /* domain asked for, "" when only an address was known */
    struct sbx_addr addr; /* family 0 when never resolved (e.g. a denied name) */
    uint16_t port;
    enum sbx_verdict verdict;
    char rule[128];     /* from sbx_decision, or an error ("connect: ECONNREFUSED") */
    uint64_t bytes_out; /* sandbox -> target */
    uint64_t bytes_in;  /* target -> sandbox */
};

/* Every flow is reported once, when it ends (or at once when denied). */
typedef void (*sbx_flow_cb)(void *ud, const struct sbx_flow *f);
