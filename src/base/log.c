#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/hex.h"

static enum sbx_log_level level = SBX_LOG_INFO;

const char *sbx_log_level_name(enum sbx_log_level l)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    return l <= SBX_LOG_DEBUG ? names[l] : "?";
}

void sbx_log_set_level(enum sbx_log_level l)
{
    level = l;
}

bool sbx_log_enabled(enum sbx_log_level l)
{
    return l <= level;
}

void sbx_log(enum sbx_log_level l, const char *fmt, ...)
{
    if (!sbx_log_enabled(l))
        return;
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    char line[1024];
    int n = (int)strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n += snprintf(line + n, sizeof(line) - (size_t)n, ".%03ldZ %s ", ts.tv_nsec / 1000000,
                  sbx_log_level_name(l));
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2; /* cut: a line stays one line */
    line[len++] = '\n';
    /* One write per line, so lines of concurrent writers do not interleave. */
    fwrite(line, 1, len, stderr);
}

const char *sbx_log_safe(const char *s, char *out, size_t len)
{
    size_t o = 0;
    if (len < 8)
        return len ? (out[0] = '\0', out) : "";
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        bool plain = *p > 0x20 && *p < 0x7f && *p != '\\' && *p != '"';
        if (o + (plain ? 1 : 4) > len - 4) {
            memcpy(out + o, "...", 4);
            return out;
        }
        if (plain) {
            out[o++] = (char)*p;
        } else {
            out[o++] = '\\', out[o++] = 'x';
            o = (size_t)(sbx_hex_encode(p, 1, out + o) - out);
        }
    }
    out[o] = '\0';
    return out;
}
