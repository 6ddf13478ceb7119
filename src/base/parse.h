/* Pure parsers for option values. Each returns 0 on success and -1 with err
 * naming the bad value otherwise; nothing is written to *out on failure. */
#pragma once

#include <stdint.h>

#include "base/err.h"

/* "256M", "1g", "100k", "4096" (bytes); suffixes k/m/g/t, binary, either case,
 * optional trailing "b"/"B" ("256MB", "1GiB"). Zero is refused. */
int sbx_parse_size(const char *s, uint64_t *out, sbx_err *err);
/* "300", "0.5": seconds, > 0 and at most max_s. */
int sbx_parse_seconds(const char *s, double max_s, double *out, sbx_err *err);
/* "0.25", "2": cores, > 0 and at most max_cores. */
int sbx_parse_cpu(const char *s, double max_cores, double *out, sbx_err *err);
/* Decimal integer in [min, max]. */
int sbx_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out, sbx_err *err);
/* Environment assignment "KEY=VALUE" with KEY in [A-Za-z_][A-Za-z0-9_]*. */
int sbx_parse_env_assignment(const char *s, sbx_err *err);
/* A field of /proc/self/mountinfo (a mount point) in place, with the
 * kernel's octal escapes of space, tab, newline and backslash undone. */
void sbx_mountinfo_unescape(char *s);
/* The value of one hex digit (either case), or -1. */
int sbx_hex_digit(char c);
