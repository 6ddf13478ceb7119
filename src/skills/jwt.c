#include "skills/jwt.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "base/digest.h"

/* base64url without padding (RFC 7515), appended at out; returns its end. */
static char *b64url(const unsigned char *in, size_t n, char *out)
{
    int len = EVP_EncodeBlock((unsigned char *)out, in, (int)n);
    for (int i = 0; i < len; i++)
        out[i] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
    while (len > 0 && out[len - 1] == '=')
        len--;
    out[len] = '\0';
    return out + len;
}

char *sbx_jwt_hs256(const struct sbx_jwt_claims *c, const void *secret, size_t secret_len,
                    sbx_err *err)
{
    static const char header[] = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";
    json_t *p = json_pack("{s:s, s:s, s:s, s:I, s:I}", "sub", c->sub ? c->sub : "", "tenant",
                          c->tenant ? c->tenant : "", "aud", c->aud ? c->aud : "", "iat",
                          (json_int_t)c->iat, "exp", (json_int_t)c->exp);
    char *payload = p ? json_dumps(p, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(p);
    if (!payload) {
        sbx_err_set(err, ENOMEM, "token");
        return NULL;
    }
    size_t plen = strlen(payload);
    size_t cap = 4 * (sizeof(header) + plen + 32) / 3 + 128;
    char *tok = malloc(cap);
    if (!tok) {
        free(payload);
        sbx_err_set(err, ENOMEM, "token");
        return NULL;
    }
    char *end = b64url((const unsigned char *)header, sizeof(header) - 1, tok);
    *end++ = '.';
    end = b64url((const unsigned char *)payload, plen, end);
    free(payload);
    /* base/digest.h's HMAC, not libcrypto's HMAC(): that one goes through
     * EVP and links all of libcrypto's providers into the daemon. */
    uint8_t mac[SBX_SHA256_SIZE];
    if (sbx_hmac_sha256(secret, secret_len, tok, (size_t)(end - tok), mac, err) < 0) {
        free(tok);
        return NULL;
    }
    *end++ = '.';
    b64url(mac, sizeof(mac), end);
    return tok;
}
