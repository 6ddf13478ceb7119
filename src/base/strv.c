#include "base/strv.h"

#include <stdlib.h>
#include <string.h>

bool sbx_strv_has(const struct sbx_strv *s, const char *str)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], str) == 0)
            return true;
    return false;
}

size_t sbx_strv_len(const char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

char **sbx_strv_dup(const char *const *v, size_t extra_slots)
{
    size_t n = sbx_strv_len(v);
    char **out = calloc(n + extra_slots + 1, sizeof(*out));
    for (size_t i = 0; out && i < n; i++)
        if (!(out[i] = strdup(v[i]))) {
            sbx_strv_free(out);
            return NULL;
        }
    return out;
}

void sbx_strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}
