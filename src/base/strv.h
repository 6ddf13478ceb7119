/* String vectors: NULL-terminated arrays of strings. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* A NULL-terminated array of owned strings (v is NULL when n == 0). */
struct sbx_strv {
    char **v;
    size_t n;
};
/* Whether s holds str. */
bool sbx_strv_has(const struct sbx_strv *s, const char *str);

/* The number of strings of a NULL-terminated v (0 for NULL). */
size_t sbx_strv_len(const char *const *v);
/* A copy of v (NULL: empty) with extra_slots more NULL slots before the
 * terminating NULL, for the caller to fill; NULL when out of memory. Free it
 * with sbx_strv_free. */
char **sbx_strv_dup(const char *const *v, size_t extra_slots);
/* Free v and its strings (v may be NULL). */
void sbx_strv_free(char **v);
