/* JSON values every layer above renders the same way (jansson). */
#pragma once

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Text as a JSON string, invalid UTF-8 replaced with U+FFFD. */
json_t *sbx_json_text(const char *buf, size_t len);
/* Milliseconds since the epoch as RFC 3339 (null for 0). */
json_t *sbx_json_time(int64_t ms);
