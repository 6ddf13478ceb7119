#include "api/json.h"

#include <stdlib.h>
#include <string.h>

#include "base/json.h"

/* Longest key quoted back in an error message. */
#define KEY_QUOTE_MAX 64

json_t *sbx_json_parse_object(const char *buf, size_t len, bool empty_ok, sbx_err *err)
{
    size_t i = 0;
    while (i < len && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r' || buf[i] == '\n'))
        i++;
    if (i == len) {
        if (empty_ok)
            return json_object();
        sbx_err_set(err, EINVAL, "body:1:1: a JSON object is required");
        return NULL;
    }
    json_error_t je;
    json_t *v = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!v) {
        sbx_err_set(err, EINVAL, "body:%d:%d: %s", je.line, je.column, je.text);
        return NULL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        sbx_err_set(err, EINVAL, "body:1:1: a JSON object is required");
        return NULL;
    }
    return v;
}

/* Length of the longest prefix of s, at most max bytes, that does not end
 * inside a UTF-8 sequence (jansson keys are valid UTF-8). */
static int quote_len(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n <= max)
        return (int)n;
    while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
        max--;
    return (int)max;
}

static bool allowed_key(const char *key, const char *const *allowed)
{
    for (; *allowed; allowed++)
        if (!strcmp(*allowed, key))
            return true;
    return false;
}

int sbx_json_check_fields(const json_t *obj, const char *where, const char *const *allowed,
                          sbx_err *err)
{
    if (!json_is_object(obj))
        return sbx_err_set(err, EINVAL, "%s: an object is required", where ? where : "body");
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)obj, key, value)
    {
        if (allowed_key(key, allowed))
            continue;
        int n = quote_len(key, KEY_QUOTE_MAX);
        const char *more = key[n] ? "…" : "";
        if (where)
            return sbx_err_set(err, EINVAL, "unknown field \"%s.%.*s%s\"", where, n, key, more);
        return sbx_err_set(err, EINVAL, "unknown field \"%.*s%s\"", n, key, more);
    }
    return 0;
}

/* Messages quote what a client sent and may have been cut mid-character:
 * keep them valid UTF-8 so the error body can always be encoded. */
static char *clean_utf8(const char *s)
{
    size_t len = strlen(s);
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t n = sbx_utf8_seq((const unsigned char *)s + i, len - i);
        if (n == 0) {
            out[o++] = '?';
            i++;
            continue;
        }
        memcpy(out + o, s + i, n);
        o += n;
        i += n;
    }
    out[o] = '\0';
    return out;
}

json_t *sbx_json_error_body(const char *code, const char *message)
{
    cleanup_free char *clean = clean_utf8(message ? message : "");
    if (!clean)
        return NULL;
    return json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", clean);
}

json_t *sbx_json_session(const json_t *body)
{
    json_t *s = json_object_get(body, "sessionID");
    return s ? s : json_object_get(body, "sessionId");
}
