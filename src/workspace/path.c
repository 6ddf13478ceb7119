#include "workspace/path.h"

#include <stdio.h>
#include <string.h>

#include "base/hex.h"

/* Room for a quoted value in a message: the message buffer is 256 bytes. */
#define QUOTE_MAX 96

static size_t quoted_len(unsigned char c)
{
    if (c == '"' || c == '\\')
        return 2;
    return c >= 0x20 && c < 0x7f ? 1 : 4;
}

const char *sbx_ws_quote(const char *s, size_t len, char *out, size_t out_len)
{
    size_t total = 0;
    for (size_t i = 0; i < len; i++)
        total += quoted_len((unsigned char)s[i]);
    bool cut = total >= out_len;
    /* When it does not all fit, keep room for "..." and the terminator. */
    size_t room = cut ? out_len - 4 : total;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        size_t n = quoted_len(c);
        if (o + n > room)
            break;
        if (n == 1) {
            out[o] = (char)c;
        } else if (n == 2) {
            out[o] = '\\';
            out[o + 1] = (char)c;
        } else {
            out[o] = '\\';
            out[o + 1] = 'x';
            sbx_hex_encode(&c, 1, out + o + 2);
        }
        o += n;
    }
    if (cut) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
    return out;
}

static bool segment_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

int sbx_ws_segment_check(const char *field, const char *value, size_t len, sbx_err *err)
{
    char q[QUOTE_MAX];
    if (!value || len == 0)
        return sbx_err_set(err, EINVAL, "%s is empty", field);
    sbx_ws_quote(value, len, q, sizeof(q));
    if (len > SBX_WS_SEGMENT_MAX)
        return sbx_err_set(err, EINVAL, "%s \"%s\": longer than %d bytes", field, q,
                           SBX_WS_SEGMENT_MAX);
    if ((len == 1 && value[0] == '.') || (len == 2 && value[0] == '.' && value[1] == '.'))
        return sbx_err_set(err, EINVAL, "%s \"%s\": not a valid name", field, q);
    for (size_t i = 0; i < len; i++)
        if (!segment_char((unsigned char)value[i]))
            return sbx_err_set(err, EINVAL,
                               "%s \"%s\": only letters, digits, '.', '_' and '-' are allowed",
                               field, q);
    return 0;
}

int sbx_ws_clone_check(const char *tenant, const char *key, const char *id, sbx_err *err)
{
    bool has_key = key && key[0];
    if (sbx_ws_segment_check("tenantCode", tenant, tenant ? strlen(tenant) : 0, err) < 0 ||
        (has_key && sbx_ws_segment_check("cloneKey", key, strlen(key), err) < 0) ||
        sbx_ws_segment_check("cloneId", id, id ? strlen(id) : 0, err) < 0)
        return -1;
    if (has_key && strcmp(id, "work") == 0)
        return sbx_err_set(err, EINVAL,
                           "cloneId \"work\" is reserved when a cloneKey is given (its "
                           "workspace would lie inside that of clone \"%s\" without a key)",
                           key);
    return 0;
}

char *sbx_ws_dir(const char *root, const char *tenant, const char *key, const char *id,
                 sbx_err *err)
{
    if (!root || root[0] != '/') {
        sbx_err_set(err, EINVAL, "workspace root \"%s\": not an absolute path", root ? root : "");
        return NULL;
    }
    bool has_key = key && key[0];
    if (sbx_ws_clone_check(tenant, key, id, err) < 0)
        return NULL;
    size_t root_len = strlen(root);
    while (root_len > 1 && root[root_len - 1] == '/')
        root_len--;
    if (root_len == 1) /* "/" itself: no double slash after it */
        root_len = 0;
    char *out = NULL;
    int n = has_key ? asprintf(&out, "%.*s/%s/%s/%s/work", (int)root_len, root, tenant, key, id)
                    : asprintf(&out, "%.*s/%s/%s/work", (int)root_len, root, tenant, id);
    if (n < 0) {
        sbx_err_set(err, ENOMEM, "workspace directory");
        return NULL;
    }
    return out;
}

int sbx_ws_path_parse(const char *path, size_t len, struct sbx_ws_path *out, sbx_err *err)
{
    char q[QUOTE_MAX];
    if (!path || len == 0)
        return sbx_err_set(err, EINVAL, "path is empty");
    sbx_ws_quote(path, len, q, sizeof(q));
    if (len > SBX_WS_PATH_MAX)
        return sbx_err_set(err, ENAMETOOLONG, "path \"%s\": longer than %d bytes", q,
                           SBX_WS_PATH_MAX);
    if (memchr(path, '\0', len))
        return sbx_err_set(err, EINVAL, "path \"%s\": contains a NUL byte", q);

    /* Build into a local buffer so out is untouched on failure. */
    char rel[SBX_WS_PATH_MAX + 1];
    size_t o = 0;
    size_t i = 0;
    while (i < len) {
        while (i < len && path[i] == '/')
            i++;
        size_t start = i;
        while (i < len && path[i] != '/')
            i++;
        size_t clen = i - start;
        const char *c = path + start;
        if (clen == 0 || (clen == 1 && c[0] == '.'))
            continue;
        if (clen == 2 && c[0] == '.' && c[1] == '.')
            return sbx_err_set(err, EINVAL, "path \"%s\": \"..\" is not allowed", q);
        if (clen > SBX_WS_NAME_MAX)
            return sbx_err_set(err, ENAMETOOLONG,
                               "path \"%s\": a component is longer than %d bytes", q,
                               SBX_WS_NAME_MAX);
        if (o > 0)
            rel[o++] = '/';
        memcpy(rel + o, c, clen);
        o += clen;
    }
    rel[o] = '\0';

    /* "a/" and "a/." name a directory; "/" and "." are the root, a directory anyway. */
    bool dir = path[len - 1] == '/' || (len >= 2 && path[len - 1] == '.' && path[len - 2] == '/');
    memcpy(out->rel, rel, o + 1);
    out->len = o;
    out->dir = dir && o > 0;
    return 0;
}

const char *sbx_ws_path_base(const struct sbx_ws_path *p)
{
    const char *slash = strrchr(p->rel, '/');
    return slash ? slash + 1 : p->rel;
}
