/* Message digests, from OpenSSL's libcrypto: SHA-256 for names derived from
 * a path (workspace images) and, later, content hashes and MACs. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define SBX_SHA256_SIZE 32
#define SBX_SHA256_HEX_SIZE (2 * SBX_SHA256_SIZE + 1) /* lower-case hex and '\0' */

/* SHA-256 of len bytes at data into md; -1 with err (EIO) in the unlikely
 * case that libcrypto cannot hash. */
int sbx_sha256(const void *data, size_t len, uint8_t md[SBX_SHA256_SIZE], sbx_err *err);
/* The same as lower-case hex, '\0'-terminated. */
int sbx_sha256_hex(const void *data, size_t len, char hex[SBX_SHA256_HEX_SIZE], sbx_err *err);
/* HMAC-SHA256 (RFC 2104) of len bytes at data under key, into mac: the
 * construction over the same low-level SHA-256 (libcrypto's HMAC() goes
 * through EVP and its providers, the +4 MB below); -1 with err (EIO). */
int sbx_hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
                    uint8_t mac[SBX_SHA256_SIZE], sbx_err *err);
/* SHA-256 of everything read from fd (from its current offset to its end)
 * as lower-case hex; *size gets the bytes read (may be NULL). Reads in
 * 256 KiB chunks: for a helper process, not the event loop. */
int sbx_sha256_fd_hex(int fd, char hex[SBX_SHA256_HEX_SIZE], uint64_t *size, sbx_err *err);
