/* The daemon's log: one line per event on stderr,
 *   2026-11-29T18:21:29.123Z info task started id=... tenant=acme
 * a UTC timestamp, the level, then the message (free text, then key=value
 * pairs). Lines above the configured level are not written. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

enum sbx_log_level { SBX_LOG_ERROR = 0, SBX_LOG_WARN, SBX_LOG_INFO, SBX_LOG_DEBUG };

const char *sbx_log_level_name(enum sbx_log_level l); /* "error", ... */
void sbx_log_set_level(enum sbx_log_level l);         /* info until set */
bool sbx_log_enabled(enum sbx_log_level l);
void sbx_log(enum sbx_log_level l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s made safe for a log line: bytes outside printable ASCII, the space, the
 * backslash and the double quote as \xNN, cut to fit out (with "..." when
 * cut). A client's path or a tenant's name can neither split a line nor add
 * key=value pairs to it. */
const char *sbx_log_safe(const char *s, char *out, size_t len);
