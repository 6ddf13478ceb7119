#include "base/hex.h"

char *sbx_hex_encode(const void *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *p = in;
    for (size_t i = 0; i < n; i++) {
        *out++ = digits[p[i] >> 4];
        *out++ = digits[p[i] & 0x0f];
    }
    return out;
}
