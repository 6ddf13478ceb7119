/* Lower-case hex, the one spelling of bytes in ids, cursors and quoted
 * messages. */
#pragma once

#include <stddef.h>

/* The n bytes at in as 2 * n lower-case hex digits at out, most significant
 * nibble first, no terminator (callers write them inside a larger text).
 * Returns out + 2 * n. */
char *sbx_hex_encode(const void *in, size_t n, char *out);
