#include "base/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

json_t *sbx_json_time(int64_t ms)
{
    if (ms <= 0)
        return json_null();
    char buf[40];
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&s, &tm);
    size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, sizeof(buf) - n, ".%03dZ", (int)(ms % 1000));
    return json_string(buf);
}

size_t sbx_utf8_seq(const unsigned char *p, size_t left)
{
    size_t n;
    unsigned cp;
    if (p[0] < 0x80)
        return 1;
    if ((p[0] & 0xe0) == 0xc0)
        n = 2, cp = p[0] & 0x1f;
    else if ((p[0] & 0xf0) == 0xe0)
        n = 3, cp = p[0] & 0x0f;
    else if ((p[0] & 0xf8) == 0xf0)
        n = 4, cp = p[0] & 0x07;
    else
        return 0;
    if (n > left)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    static const unsigned min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

json_t *sbx_json_text(const char *buf, size_t len)
{
    json_t *s = json_stringn(buf ? buf : "", buf ? len : 0);
    if (s)
        return s;
    /* Not UTF-8 (or holds NUL): keep what is valid, mark the rest. */
    char *out = malloc(len * 3 + 1);
    if (!out)
        return json_string("");
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)buf;
    for (size_t i = 0; i < len;) {
        size_t n = p[i] ? sbx_utf8_seq(p + i, len - i) : 0;
        if (n) {
            memcpy(out + o, p + i, n), o += n, i += n;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3), o += 3, i++;
        }
    }
    s = json_stringn(out, o);
    free(out);
    return s ? s : json_string("");
}
