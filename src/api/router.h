/* The router: (method, path pattern) → target. A pattern is a literal path
 * whose segments may be `{name}` placeholders that match one non-empty
 * segment ("/runtime/tasks/{id}/cancel"). Pure: no I/O, unit-tested alone. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

#define SBX_ROUTE_MAX_PARAMS 8
#define SBX_ROUTE_MAX_SEGMENTS 32

typedef struct sbx_router sbx_router;

typedef enum sbx_route_result {
    SBX_ROUTE_FOUND,
    SBX_ROUTE_NOT_FOUND,  /* no pattern matches the path */
    SBX_ROUTE_BAD_METHOD, /* a pattern matches, but not with this method */
} sbx_route_result;

/* A match owns a copy of the path; param values point into it. */
typedef struct sbx_route_match {
    void *target;
    const char *pattern; /* the route's, as registered (valid while the router is) */
    unsigned nparams;
    const char *names[SBX_ROUTE_MAX_PARAMS];
    const char *values[SBX_ROUTE_MAX_PARAMS];
    char *buf;
} sbx_route_match;

/* NULL when out of memory. */
sbx_router *sbx_router_new(void);
void sbx_router_free(sbx_router *r);

/* Register target for method + pattern. EINVAL for a malformed pattern (not
 * absolute, `{}` not a whole segment, a bad or repeated name, too many
 * placeholders), EEXIST when the same method and pattern are already taken. */
int sbx_router_add(sbx_router *r, const char *method, const char *pattern, void *target,
                   sbx_err *err);

/* Find the target for method + path. A pattern with more literal segments
 * wins over one with placeholders; HEAD falls back to GET. On
 * SBX_ROUTE_BAD_METHOD, allow (if not NULL) receives the methods the path
 * does take ("GET, HEAD, POST"). On SBX_ROUTE_FOUND, m must be cleared with
 * sbx_route_match_clear(); on any other result m holds nothing. Returns
 * SBX_ROUTE_NOT_FOUND also when out of memory (m->target NULL, errno ENOMEM). */
sbx_route_result sbx_router_match(const sbx_router *r, const char *method, const char *path,
                                  sbx_route_match *m, char *allow, size_t allow_len);

/* Call fn for every route, in registration order. */
typedef void (*sbx_router_each_fn)(void *ud, const char *method, const char *pattern);
void sbx_router_each(const sbx_router *r, sbx_router_each_fn fn, void *ud);

/* Value of placeholder name, or NULL. */
const char *sbx_route_param(const sbx_route_match *m, const char *name);
void sbx_route_match_clear(sbx_route_match *m);
