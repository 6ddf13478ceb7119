/* Path building shared by the workspace tests: assertions, not error
 * returns, as a path that does not fit is a broken test. */
#pragma once

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>

static inline void pathf(char *out, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void pathf(char *out, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, len, fmt, ap);
    va_end(ap);
    assert_true(n > 0 && (size_t)n < len);
}

/* A host path below dir, for the test's own (trusted) checks; the last four
 * stay valid. */
static inline const char *at(const char *dir, const char *rel)
{
    static char bufs[4][PATH_MAX];
    static int next;
    char *b = bufs[next++ % 4];
    pathf(b, PATH_MAX, "%s/%s", dir, rel);
    return b;
}
