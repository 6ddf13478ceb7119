/* The SYN queue of a proxy sandbox: a connection the sandbox starts to an
 * address outside it is held at its first packet (the SYN), before the
 * transparent redirect, while the daemon judges it and connects upstream.
 * Only then does the SYN go on:
 *   - the policy denies it: the SYN is marked and the sandbox's rules answer
 *     it with a reset (connect() fails with ECONNREFUSED at once);
 *   - the upstream refuses (or fails at once): the same;
 *   - the upstream does not answer: the SYN is dropped (the client times out,
 *     as it would without a proxy);
 *   - connected: the SYN is accepted, reaches the transparent listener, and
 *     the connection it accepts relays over the upstream socket already open.
 * The kernel's NFQUEUE holds the packets (its netlink socket is made inside
 * the sandbox's network namespace, queue 0 of that namespace); the rule that
 * queues them is an xtables NFQUEUE target (nft_compat), since kernels
 * without nft_queue have it too. Without a reader the kernel drops queued
 * SYNs: the queue fails closed. Internal to net/ (egress.c, transparent.c). */
#pragma once

#include <stdint.h>

#include "base/err.h"
#include "net/policy.h"

struct sbx_conn_ctx;
struct sbx_synq;

/* The mark a refused SYN carries back into the sandbox's rules (egress.c's
 * chain refuse_marked answers it with a reset). */
#define SBX_SYNQ_REJECT_MARK 0x53425851u
#define SBX_SYNQ_REJECT_MARK_TEXT "0x53425851"
/* At most this many connections waiting on their upstream per sandbox (and
 * the kernel queue's length); a SYN beyond it is dropped (the client's
 * retransmission tries again). */
#define SBX_SYNQ_MAX 256
/* A held SYN is dropped after this long (its retransmission is held in its
 * place while the upstream connect goes on, up to the connect timeout). */
#define SBX_SYNQ_HOLD_S 2.0
/* An upstream connected for a SYN the listener never accepted is closed
 * after this long. */
#define SBX_SYNQ_UNUSED_S 10.0

/* In the rules process, inside the sandbox's namespace, after the rules
 * text (chain syn_queue exists): append the NFQUEUE target to syn_queue. */
int sbx_synq_rule(sbx_err *err);
/* Inside the sandbox's namespace: the queue's netlink socket, bound to
 * queue 0 (non-blocking, close-on-exec). */
int sbx_synq_open(sbx_err *err);
/* Serve the queue on ctx's loop (fd is taken, also on failure). */
struct sbx_synq *sbx_synq_new(struct sbx_conn_ctx *ctx, int fd, sbx_err *err);
/* The transparent listener accepted src:sport -> dst:dport: the upstream fd
 * connected for its SYN (the caller owns it) and the rule that allowed it,
 * or -1 when there is none (judge and connect as usual). */
int sbx_synq_take(struct sbx_synq *q, const struct sbx_addr *src, uint16_t sport,
                  const struct sbx_addr *dst, uint16_t dport, char *rule, size_t rule_len);
void sbx_synq_free(struct sbx_synq *q);
