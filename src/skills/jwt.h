/* UR_TOKEN: a short-lived HS256 JWT minted for each skill task (OpenSSL's
 * HMAC-SHA256; only the encoding is ours). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct sbx_jwt_claims {
    const char *sub; /* the clone */
    const char *tenant;
    const char *aud;
    int64_t iat; /* seconds since the epoch */
    int64_t exp;
};

/* "header.payload.signature", malloc'd; NULL with err. */
char *sbx_jwt_hs256(const struct sbx_jwt_claims *c, const void *secret, size_t secret_len,
                    sbx_err *err);
