/* SHA-256 through libcrypto's low-level interface: the EVP interface (which
 * SHA256() is built on in OpenSSL 3) pulls all of libcrypto's providers into
 * the static binary, measured at +4.4 MB, +100 page faults and +0.2-0.5 ms
 * of CPU at every `sandboxd run`, for one hash of a path now and then. The
 * low-level functions are deprecated since OpenSSL 3.0 but kept through 3.x;
 * a libcrypto built without them (OPENSSL_NO_DEPRECATED_3_0) gets SHA256(),
 * which gives the same bytes. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include "base/digest.h"

#include "base/hex.h"

#include <openssl/sha.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int hash(const void *data, size_t len, uint8_t md[SBX_SHA256_SIZE])
{
#ifdef OPENSSL_NO_DEPRECATED_3_0
    return SHA256(data, len, md) ? 1 : 0;
#else
    SHA256_CTX c;
    return SHA256_Init(&c) && SHA256_Update(&c, data, len) && SHA256_Final(md, &c);
#endif
}

int sbx_sha256(const void *data, size_t len, uint8_t md[SBX_SHA256_SIZE], sbx_err *err)
{
    if (!hash(data, len, md))
        return sbx_err_set(err, EIO, "sha256: libcrypto failed");
    return 0;
}

int sbx_sha256_hex(const void *data, size_t len, char hex[SBX_SHA256_HEX_SIZE], sbx_err *err)
{
    uint8_t md[SBX_SHA256_SIZE];
    if (sbx_sha256(data, len, md, err) < 0)
        return -1;
    *sbx_hex_encode(md, sizeof(md), hex) = '\0';
    return 0;
}

int sbx_hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
                    uint8_t mac[SBX_SHA256_SIZE], sbx_err *err)
{
    enum { BLOCK = 64 }; /* SHA-256's block size */
    uint8_t k[BLOCK] = {0}, pad[BLOCK], inner[SBX_SHA256_SIZE];
    if (key_len > BLOCK) {
        if (!hash(key, key_len, k))
            return sbx_err_set(err, EIO, "hmac-sha256: libcrypto failed");
    } else if (key_len) {
        memcpy(k, key, key_len);
    }
    SHA256_CTX c;
    for (int i = 0; i < BLOCK; i++)
        pad[i] = k[i] ^ 0x36;
    bool ok = SHA256_Init(&c) && SHA256_Update(&c, pad, BLOCK) && SHA256_Update(&c, data, len) &&
              SHA256_Final(inner, &c);
    for (int i = 0; i < BLOCK; i++)
        pad[i] = k[i] ^ 0x5c;
    ok = ok && SHA256_Init(&c) && SHA256_Update(&c, pad, BLOCK) &&
         SHA256_Update(&c, inner, sizeof(inner)) && SHA256_Final(mac, &c);
    explicit_bzero(k, sizeof(k));
    explicit_bzero(pad, sizeof(pad));
    explicit_bzero(inner, sizeof(inner));
    explicit_bzero(&c, sizeof(c));
    if (!ok)
        return sbx_err_set(err, EIO, "hmac-sha256: libcrypto failed");
    return 0;
}

int sbx_sha256_fd_hex(int fd, char hex[SBX_SHA256_HEX_SIZE], uint64_t *size, sbx_err *err)
{
    enum { CHUNK = 256 << 10 };
    cleanup_free unsigned char *buf = malloc(CHUNK);
    if (!buf)
        return sbx_err_set(err, ENOMEM, "sha256");
    SHA256_CTX c;
    if (!SHA256_Init(&c))
        return sbx_err_set(err, EIO, "sha256: libcrypto failed");
    uint64_t total = 0;
    for (;;) {
        ssize_t n = read(fd, buf, CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sbx_err_set(err, errno, "read");
        if (n == 0)
            break;
        if (!SHA256_Update(&c, buf, (size_t)n))
            return sbx_err_set(err, EIO, "sha256: libcrypto failed");
        total += (uint64_t)n;
    }
    uint8_t md[SBX_SHA256_SIZE];
    if (!SHA256_Final(md, &c))
        return sbx_err_set(err, EIO, "sha256: libcrypto failed");
    *sbx_hex_encode(md, sizeof(md), hex) = '\0';
    if (size)
        *size = total;
    return 0;
}
