#include "base/digest.h"

#include <openssl/err.h>
#include <openssl/sha.h>

int sbx_sha256(const void *data, size_t len, uint8_t md[SBX_SHA256_SIZE], sbx_err *err)
{
    if (SHA256(data, len, md))
        return 0;
    /* libcrypto's reason (its error queue), emptied so it is not read again
     * by the next failure's caller. */
    const char *why = ERR_reason_error_string(ERR_peek_last_error());
    ERR_clear_error();
    return sbx_err_set(err, EIO, "sha256: %s", why ? why : "libcrypto failed");
}

int sbx_sha256_hex(const void *data, size_t len, char hex[SBX_SHA256_HEX_SIZE], sbx_err *err)
{
    static const char digits[] = "0123456789abcdef";
    uint8_t md[SBX_SHA256_SIZE];
    if (sbx_sha256(data, len, md, err) < 0)
        return -1;
    for (size_t i = 0; i < sizeof(md); i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[2 * sizeof(md)] = '\0';
    return 0;
}
