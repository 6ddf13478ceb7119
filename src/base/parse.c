#include "base/parse.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int sbx_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out, sbx_err *err)
{
    if (!s || !*s || !isdigit((unsigned char)*s))
        return sbx_err_set(err, EINVAL, "'%s' is not a number", s ? s : "");
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return sbx_err_set(err, EINVAL, "'%s' is not a number", s);
    if (v < min || v > max)
        return sbx_err_set(err, ERANGE, "'%s' is out of range [%llu, %llu]", s,
                           (unsigned long long)min, (unsigned long long)max);
    *out = v;
    return 0;
}

int sbx_parse_size(const char *s, uint64_t *out, sbx_err *err)
{
    if (!s || !*s || !isdigit((unsigned char)*s))
        return sbx_err_set(err, EINVAL, "'%s' is not a size (e.g. 256M)", s ? s : "");
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return sbx_err_set(err, ERANGE, "size '%s' is too large", s);
    unsigned shift = 0;
    switch (tolower((unsigned char)*end)) {
    case '\0':
        break;
    case 'k':
        shift = 10;
        end++;
        break;
    case 'm':
        shift = 20;
        end++;
        break;
    case 'g':
        shift = 30;
        end++;
        break;
    case 't':
        shift = 40;
        end++;
        break;
    default:
        return sbx_err_set(err, EINVAL, "'%s' has an unknown size suffix (use k, m, g, t)", s);
    }
    if (shift && *end == 'i')
        end++;
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end)
        return sbx_err_set(err, EINVAL, "'%s' is not a size (e.g. 256M)", s);
    if (v == 0)
        return sbx_err_set(err, ERANGE, "size '%s' must be greater than zero", s);
    if (shift && v > (UINT64_MAX >> shift))
        return sbx_err_set(err, ERANGE, "size '%s' is too large", s);
    *out = (uint64_t)v << shift;
    return 0;
}

static int parse_positive(const char *s, double max, const char *what, double *out, sbx_err *err)
{
    if (!s || !*s || !(isdigit((unsigned char)*s) || *s == '.'))
        return sbx_err_set(err, EINVAL, "'%s' is not a number of %s", s ? s : "", what);
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v))
        return sbx_err_set(err, EINVAL, "'%s' is not a number of %s", s, what);
    if (v <= 0 || v > max)
        return sbx_err_set(err, ERANGE, "'%s' %s is out of range (0, %g]", s, what, max);
    *out = v;
    return 0;
}

int sbx_parse_seconds(const char *s, double max_s, double *out, sbx_err *err)
{
    return parse_positive(s, max_s, "seconds", out, err);
}

int sbx_parse_cpu(const char *s, double max_cores, double *out, sbx_err *err)
{
    return parse_positive(s, max_cores, "cores", out, err);
}

int sbx_parse_env_assignment(const char *s, sbx_err *err)
{
    const char *eq = s ? strchr(s, '=') : NULL;
    if (!eq || eq == s)
        return sbx_err_set(err, EINVAL, "'%s' is not KEY=VALUE", s ? s : "");
    if (!(isalpha((unsigned char)s[0]) || s[0] == '_'))
        return sbx_err_set(err, EINVAL, "environment name in '%s' must start with a letter or _",
                           s);
    for (const char *p = s; p < eq; p++)
        if (!(isalnum((unsigned char)*p) || *p == '_'))
            return sbx_err_set(err, EINVAL, "environment name in '%s' has a bad character", s);
    return 0;
}

int sbx_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

void sbx_mountinfo_unescape(char *s)
{
    char *o = s;
    for (char *i = s; *i; i++) {
        if (i[0] == '\\' && i[1] >= '0' && i[1] <= '3' && i[2] >= '0' && i[2] <= '7' &&
            i[3] >= '0' && i[3] <= '7') {
            *o++ = (char)((i[1] - '0') * 64 + (i[2] - '0') * 8 + (i[3] - '0'));
            i += 3;
        } else {
            *o++ = *i;
        }
    }
    *o = '\0';
}
