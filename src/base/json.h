/* JSON values every layer above renders the same way (jansson). */
#pragma once

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence at p (1..4, at most left bytes), or 0
 * (a bad lead or continuation byte, an overlong form, a surrogate, above
 * U+10FFFF). */
size_t sbx_utf8_seq(const unsigned char *p, size_t left);
/* Text as a JSON string, invalid UTF-8 replaced with U+FFFD. */
json_t *sbx_json_text(const char *buf, size_t len);
/* Milliseconds since the epoch as RFC 3339 (null for 0). */
json_t *sbx_json_time(int64_t ms);
