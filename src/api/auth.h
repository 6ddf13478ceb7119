/* API tokens. An operator token may do everything; a tenant token is bound
 * to one tenant. A request presents its token as `Authorization: Bearer <t>`
 * or `X-Claw-Token: <t>`; it is compared with every configured token in
 * constant time (fixed-length padded buffers, no early exit), so the answer's
 * timing says nothing about how much of a token was right, nor which one.
 * Pure: no I/O. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

/* Longest token accepted in configuration (and compared in full). */
#define SBX_AUTH_TOKEN_MAX 512

typedef struct sbx_auth sbx_auth;

/* A configured token. name is what audit logs and handlers see (never the
 * token itself); tenant NULL means an operator token. */
typedef struct sbx_auth_token {
    const char *name;
    const char *token;
    const char *tenant;
} sbx_auth_token;

/* Who made a request: valid as long as the sbx_auth it came from. */
typedef struct sbx_identity {
    const char *name;
    const char *tenant; /* NULL: operator */
} sbx_identity;

typedef enum sbx_auth_result {
    SBX_AUTH_OK,
    SBX_AUTH_MISSING, /* no token presented */
    SBX_AUTH_INVALID, /* a token that matches none */
} sbx_auth_result;

/* A table with no tokens whose public paths are /healthz, /readyz and
 * /openapi.json.
 * NULL when out of memory. */
sbx_auth *sbx_auth_new(void);
void sbx_auth_free(sbx_auth *a);

/* Copy t into the table. EINVAL for an empty or overlong token, one with
 * characters outside visible ASCII, an empty or repeated name, or a token
 * already configured under another name. */
int sbx_auth_add(sbx_auth *a, const sbx_auth_token *t, sbx_err *err);
/* "tok1,tok2" (CLAW_API_TOKEN): operator tokens named "<prefix>-1", … ;
 * spaces around commas are ignored, empty items refused. */
int sbx_auth_add_list(sbx_auth *a, const char *csv, const char *prefix, sbx_err *err);
size_t sbx_auth_count(const sbx_auth *a);

/* Replace the paths that need no token (exact match). */
int sbx_auth_set_public(sbx_auth *a, const char *const *paths, size_t n, sbx_err *err);
bool sbx_auth_is_public(const sbx_auth *a, const char *path);

/* The token a request presents: the Bearer credential of authorization when
 * it has that scheme, else x_claw_token. NULL when neither. */
const char *sbx_auth_presented(const char *authorization, const char *x_claw_token);

/* Check the headers of a request; on SBX_AUTH_OK *who is the identity. */
sbx_auth_result sbx_auth_check(const sbx_auth *a, const char *authorization,
                               const char *x_claw_token, const sbx_identity **who);
