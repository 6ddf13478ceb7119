#include "api/auth.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct entry {
    sbx_identity id; /* name and tenant, owned */
    uint8_t token[SBX_AUTH_TOKEN_MAX];
    size_t len;
};

struct sbx_auth {
    struct entry *entries;
    size_t n, cap;
    char **public_paths;
    size_t npublic;
};

/* /openapi.json is the same document as in the repository: nothing secret. */
static const char *const default_public[] = {"/healthz", "/readyz", "/openapi.json"};

sbx_auth *sbx_auth_new(void)
{
    sbx_auth *a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    if (sbx_auth_set_public(a, default_public, SBX_ARRAY_LEN(default_public), NULL) < 0) {
        sbx_auth_free(a);
        return NULL;
    }
    return a;
}

static void free_public(sbx_auth *a)
{
    for (size_t i = 0; i < a->npublic; i++)
        free(a->public_paths[i]);
    free(a->public_paths);
    a->public_paths = NULL;
    a->npublic = 0;
}

void sbx_auth_free(sbx_auth *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->n; i++) {
        free((char *)a->entries[i].id.name);
        free((char *)a->entries[i].id.tenant);
        /* The table held secrets: do not leave them in freed memory. */
        explicit_bzero(a->entries[i].token, sizeof(a->entries[i].token));
    }
    free(a->entries);
    free_public(a);
    free(a);
}

size_t sbx_auth_count(const sbx_auth *a)
{
    return a->n;
}

static bool visible_ascii(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x21 || (unsigned char)*s > 0x7e)
            return false;
    return true;
}

/* Constant time in the contents: every byte of both fixed-size buffers is
 * looked at whatever differs first. */
static bool same_token(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    volatile uint8_t diff = 0;
    for (size_t i = 0; i < SBX_AUTH_TOKEN_MAX; i++)
        diff |= a[i] ^ b[i];
    return (diff == 0) & (alen == blen);
}

/* Zero-padded copy; a presented token longer than the buffer keeps its true
 * length so it can never compare equal. */
static void pad(uint8_t out[SBX_AUTH_TOKEN_MAX], const char *s, size_t *len)
{
    size_t n = strlen(s);
    memset(out, 0, SBX_AUTH_TOKEN_MAX);
    memcpy(out, s, n < SBX_AUTH_TOKEN_MAX ? n : SBX_AUTH_TOKEN_MAX);
    *len = n;
}

int sbx_auth_add(sbx_auth *a, const sbx_auth_token *t, sbx_err *err)
{
    if (!t->name || !*t->name || !visible_ascii(t->name))
        return sbx_err_set(err, EINVAL, "token: empty or unprintable name");
    if (!t->token || !*t->token)
        return sbx_err_set(err, EINVAL, "token %s: empty", t->name);
    if (strlen(t->token) > SBX_AUTH_TOKEN_MAX)
        return sbx_err_set(err, EINVAL, "token %s: longer than %d bytes", t->name,
                           SBX_AUTH_TOKEN_MAX);
    if (!visible_ascii(t->token))
        return sbx_err_set(err, EINVAL, "token %s: only visible ASCII characters are allowed",
                           t->name);
    if (t->tenant && (!*t->tenant || !visible_ascii(t->tenant)))
        return sbx_err_set(err, EINVAL, "token %s: bad tenant", t->name);
    struct entry e = {0};
    pad(e.token, t->token, &e.len);
    for (size_t i = 0; i < a->n; i++) {
        if (!strcmp(a->entries[i].id.name, t->name))
            return sbx_err_set(err, EINVAL, "token %s: name used twice", t->name);
        if (same_token(a->entries[i].token, a->entries[i].len, e.token, e.len))
            return sbx_err_set(err, EINVAL, "token %s: same token as %s", t->name,
                               a->entries[i].id.name);
    }
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 8;
        struct entry *grown = realloc(a->entries, cap * sizeof(*grown));
        if (!grown)
            return sbx_err_set(err, ENOMEM, "token %s", t->name);
        a->entries = grown;
        a->cap = cap;
    }
    e.id.name = strdup(t->name);
    e.id.tenant = t->tenant ? strdup(t->tenant) : NULL;
    if (!e.id.name || (t->tenant && !e.id.tenant)) {
        free((char *)e.id.name);
        free((char *)e.id.tenant);
        return sbx_err_set(err, ENOMEM, "token %s", t->name);
    }
    a->entries[a->n++] = e;
    explicit_bzero(&e, sizeof(e));
    return 0;
}

int sbx_auth_add_list(sbx_auth *a, const char *csv, const char *prefix, sbx_err *err)
{
    cleanup_free char *copy = strdup(csv);
    if (!copy)
        return sbx_err_set(err, ENOMEM, "token list");
    unsigned index = 0;
    char *save = NULL;
    int rc = 0;
    /* strtok_r would skip empty items silently; walk commas by hand. */
    for (char *item = copy; item && rc == 0; item = save) {
        char *comma = strchr(item, ',');
        save = comma ? comma + 1 : NULL;
        if (comma)
            *comma = '\0';
        while (*item == ' ' || *item == '\t')
            item++;
        char *end = item + strlen(item);
        while (end > item && (end[-1] == ' ' || end[-1] == '\t'))
            *--end = '\0';
        index++;
        char name[64];
        snprintf(name, sizeof(name), "%s-%u", prefix, index);
        if (!*item)
            rc = sbx_err_set(err, EINVAL, "token list: item %u is empty", index);
        else
            rc = sbx_auth_add(a, &(sbx_auth_token){.name = name, .token = item}, err);
    }
    explicit_bzero(copy, strlen(csv));
    return rc;
}

int sbx_auth_set_public(sbx_auth *a, const char *const *paths, size_t n, sbx_err *err)
{
    char **copy = calloc(n ? n : 1, sizeof(*copy));
    if (!copy)
        return sbx_err_set(err, ENOMEM, "public paths");
    for (size_t i = 0; i < n; i++) {
        if (!paths[i] || paths[i][0] != '/' || !(copy[i] = strdup(paths[i]))) {
            int e = paths[i] && paths[i][0] == '/' ? ENOMEM : EINVAL;
            for (size_t j = 0; j < i; j++)
                free(copy[j]);
            free(copy);
            return sbx_err_set(err, e, "public path %s", paths[i] ? paths[i] : "(null)");
        }
    }
    free_public(a);
    a->public_paths = copy;
    a->npublic = n;
    return 0;
}

bool sbx_auth_is_public(const sbx_auth *a, const char *path)
{
    for (size_t i = 0; i < a->npublic; i++)
        if (!strcmp(a->public_paths[i], path))
            return true;
    return false;
}

const char *sbx_auth_presented(const char *authorization, const char *x_claw_token)
{
    if (authorization && !strncasecmp(authorization, "Bearer", 6) &&
        (authorization[6] == ' ' || authorization[6] == '\t')) {
        const char *t = authorization + 6;
        while (*t == ' ' || *t == '\t')
            t++;
        if (*t)
            return t;
    }
    if (x_claw_token && *x_claw_token)
        return x_claw_token;
    return NULL;
}

sbx_auth_result sbx_auth_check(const sbx_auth *a, const char *authorization,
                               const char *x_claw_token, const sbx_identity **who)
{
    *who = NULL;
    const char *presented = sbx_auth_presented(authorization, x_claw_token);
    if (!presented)
        return SBX_AUTH_MISSING;
    uint8_t buf[SBX_AUTH_TOKEN_MAX];
    size_t len;
    pad(buf, presented, &len);
    /* Every entry is compared, whichever matches, so the time taken does not
     * tell which token (if any) was close. */
    const sbx_identity *found = NULL;
    for (size_t i = 0; i < a->n; i++) {
        bool same = same_token(a->entries[i].token, a->entries[i].len, buf, len);
        if (same && !found)
            found = &a->entries[i].id;
    }
    explicit_bzero(buf, sizeof(buf));
    *who = found;
    return found ? SBX_AUTH_OK : SBX_AUTH_INVALID;
}
