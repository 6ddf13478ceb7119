/* JSON request bodies and error bodies (jansson). Pure: no I/O. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "base/err.h"

/* Parse a request body as one JSON object. Duplicate keys and NUL
 * characters in strings are refused. An empty (or all-whitespace) body is
 * an empty object when empty_ok, an error otherwise. On error NULL, with
 * err->msg "body:LINE:COLUMN: what" (errnum EINVAL). The caller owns the
 * returned reference. */
json_t *sbx_json_parse_object(const char *buf, size_t len, bool empty_ok, sbx_err *err);

/* Refuse any key of obj not in allowed (a NULL-terminated list):
 * err->msg names it, prefixed by where ("capabilities.add") when where is
 * not NULL. Keys are checked in document order; the first unknown one is
 * reported. EINVAL also when obj is not an object. */
int sbx_json_check_fields(const json_t *obj, const char *where, const char *const *allowed,
                          sbx_err *err);

/* {"error":{"code":code,"message":message}}; NULL when out of memory. */
json_t *sbx_json_error_body(const char *code, const char *message);

/* The session a request body names: "sessionID", else its other spelling
 * "sessionId" (both are accepted everywhere); NULL when it names none. A
 * borrowed reference. */
json_t *sbx_json_session(const json_t *body);
