#include "api/router.h"

#include <stdlib.h>
#include <string.h>

struct segment {
    char *text; /* literal text, or the placeholder's name */
    bool param;
};

struct route {
    char *method;
    char *pattern;
    struct segment segs[SBX_ROUTE_MAX_SEGMENTS];
    unsigned nsegs;
    unsigned nliteral;
    void *target;
};

struct sbx_router {
    struct route *routes;
    size_t n, cap;
};

sbx_router *sbx_router_new(void)
{
    return calloc(1, sizeof(sbx_router));
}

static void route_clear(struct route *rt)
{
    for (unsigned i = 0; i < rt->nsegs; i++)
        free(rt->segs[i].text);
    free(rt->method);
    free(rt->pattern);
}

void sbx_router_free(sbx_router *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        route_clear(&r->routes[i]);
    free(r->routes);
    free(r);
}

/* Split an absolute path in place into its segments ("/" is one empty
 * segment). Returns the count, or -1 when there are too many. */
static int split(char *path, char **segs)
{
    int n = 0;
    char *p = path + 1;
    for (;;) {
        if (n == SBX_ROUTE_MAX_SEGMENTS)
            return -1;
        segs[n++] = p;
        char *slash = strchr(p, '/');
        if (!slash)
            return n;
        *slash = '\0';
        p = slash + 1;
    }
}

static bool valid_name(const char *s, size_t len)
{
    if (len == 0 || len > 32)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return false;
    }
    return true;
}

static bool valid_method(const char *m)
{
    if (!*m || strlen(m) > 16)
        return false;
    for (; *m; m++)
        if (*m < 'A' || *m > 'Z')
            return false;
    return true;
}

static int parse_pattern(struct route *rt, const char *pattern, sbx_err *err)
{
    if (pattern[0] != '/')
        return sbx_err_set(err, EINVAL, "route %s: not an absolute path", pattern);
    cleanup_free char *copy = strdup(pattern);
    if (!copy)
        return sbx_err_set(err, ENOMEM, "route %s", pattern);
    char *segs[SBX_ROUTE_MAX_SEGMENTS];
    int n = split(copy, segs);
    if (n < 0)
        return sbx_err_set(err, EINVAL, "route %s: too many segments", pattern);
    unsigned nparams = 0;
    for (int i = 0; i < n; i++) {
        const char *s = segs[i];
        size_t len = strlen(s);
        bool param = len >= 2 && s[0] == '{' && s[len - 1] == '}';
        if (param) {
            s++;
            len -= 2;
            if (!valid_name(s, len))
                return sbx_err_set(err, EINVAL, "route %s: bad placeholder name", pattern);
            for (unsigned j = 0; j < rt->nsegs; j++)
                if (rt->segs[j].param && strlen(rt->segs[j].text) == len &&
                    !memcmp(rt->segs[j].text, s, len))
                    return sbx_err_set(err, EINVAL, "route %s: placeholder {%.*s} repeated",
                                       pattern, (int)len, s);
            if (++nparams > SBX_ROUTE_MAX_PARAMS)
                return sbx_err_set(err, EINVAL, "route %s: too many placeholders", pattern);
        } else if (strchr(s, '{') || strchr(s, '}')) {
            return sbx_err_set(err, EINVAL, "route %s: a placeholder must be a whole segment",
                               pattern);
        }
        rt->segs[rt->nsegs].text = strndup(s, len);
        if (!rt->segs[rt->nsegs].text)
            return sbx_err_set(err, ENOMEM, "route %s", pattern);
        rt->segs[rt->nsegs].param = param;
        rt->nsegs++;
        if (!param)
            rt->nliteral++;
    }
    return 0;
}

/* Same shape: literal segments equal, placeholders in the same places. */
static bool same_pattern(const struct route *a, const struct route *b)
{
    if (a->nsegs != b->nsegs)
        return false;
    for (unsigned i = 0; i < a->nsegs; i++) {
        if (a->segs[i].param != b->segs[i].param)
            return false;
        if (!a->segs[i].param && strcmp(a->segs[i].text, b->segs[i].text))
            return false;
    }
    return true;
}

int sbx_router_add(sbx_router *r, const char *method, const char *pattern, void *target,
                   sbx_err *err)
{
    if (!method || !pattern || !valid_method(method))
        return sbx_err_set(err, EINVAL, "route %s %s: bad method", method ? method : "(null)",
                           pattern ? pattern : "(null)");
    struct route rt = {.target = target};
    if (parse_pattern(&rt, pattern, err) < 0) {
        route_clear(&rt);
        return -1;
    }
    for (size_t i = 0; i < r->n; i++) {
        if (!strcmp(r->routes[i].method, method) && same_pattern(&r->routes[i], &rt)) {
            route_clear(&rt);
            return sbx_err_set(err, EEXIST, "route %s %s: already registered as %s", method,
                               pattern, r->routes[i].pattern);
        }
    }
    rt.method = strdup(method);
    rt.pattern = strdup(pattern);
    if (!rt.method || !rt.pattern) {
        route_clear(&rt);
        return sbx_err_set(err, ENOMEM, "route %s %s", method, pattern);
    }
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        struct route *grown = realloc(r->routes, cap * sizeof(*grown));
        if (!grown) {
            route_clear(&rt);
            return sbx_err_set(err, ENOMEM, "route %s %s", method, pattern);
        }
        r->routes = grown;
        r->cap = cap;
    }
    r->routes[r->n++] = rt;
    return 0;
}

static bool path_matches(const struct route *rt, char **segs, unsigned n)
{
    if (rt->nsegs != n)
        return false;
    for (unsigned i = 0; i < n; i++) {
        if (rt->segs[i].param ? segs[i][0] == '\0' : strcmp(rt->segs[i].text, segs[i]) != 0)
            return false;
    }
    return true;
}

static void append_method(char *out, size_t len, size_t *used, const char *m)
{
    size_t ml = strlen(m);
    if (*used + ml + 3 > len)
        return;
    if (*used) {
        memcpy(out + *used, ", ", 2);
        *used += 2;
    }
    memcpy(out + *used, m, ml + 1);
    *used += ml;
}

static bool is_usual(const char *m, const char *const *order, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (!strcmp(order[k], m))
            return true;
    return false;
}

/* "GET, HEAD, POST": the usual methods in their usual order, then the rest
 * in registration order; HEAD wherever GET is. */
static void build_allow(const sbx_router *r, char **segs, unsigned n, char *out, size_t len)
{
    static const char *const order[] = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"};
    size_t used = 0;
    out[0] = '\0';
    bool has_get = false;
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->routes[i].method, "GET") && path_matches(&r->routes[i], segs, n))
            has_get = true;
    for (size_t k = 0; k < SBX_ARRAY_LEN(order); k++) {
        bool found = !strcmp(order[k], "HEAD") && has_get;
        for (size_t i = 0; i < r->n && !found; i++)
            found = !strcmp(r->routes[i].method, order[k]) && path_matches(&r->routes[i], segs, n);
        if (found)
            append_method(out, len, &used, order[k]);
    }
    for (size_t i = 0; i < r->n; i++) {
        const char *m = r->routes[i].method;
        if (is_usual(m, order, SBX_ARRAY_LEN(order)) || !path_matches(&r->routes[i], segs, n))
            continue;
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = !strcmp(r->routes[j].method, m) && path_matches(&r->routes[j], segs, n);
        if (!seen)
            append_method(out, len, &used, m);
    }
}

sbx_route_result sbx_router_match(const sbx_router *r, const char *method, const char *path,
                                  sbx_route_match *m, char *allow, size_t allow_len)
{
    memset(m, 0, sizeof(*m));
    if (allow && allow_len)
        allow[0] = '\0';
    if (!path || path[0] != '/' || !method)
        return SBX_ROUTE_NOT_FOUND;
    char *buf = strdup(path);
    if (!buf) {
        errno = ENOMEM;
        return SBX_ROUTE_NOT_FOUND;
    }
    char *segs[SBX_ROUTE_MAX_SEGMENTS];
    int n = split(buf, segs);
    if (n < 0) {
        free(buf);
        return SBX_ROUTE_NOT_FOUND;
    }
    bool head = !strcmp(method, "HEAD");
    const struct route *best = NULL;
    bool best_exact = false, any_path = false;
    for (size_t i = 0; i < r->n; i++) {
        const struct route *rt = &r->routes[i];
        if (!path_matches(rt, segs, (unsigned)n))
            continue;
        any_path = true;
        bool exact = !strcmp(rt->method, method);
        if (!exact && !(head && !strcmp(rt->method, "GET")))
            continue;
        if (!best || rt->nliteral > best->nliteral ||
            (rt->nliteral == best->nliteral && exact && !best_exact)) {
            best = rt;
            best_exact = exact;
        }
    }
    if (!best) {
        if (any_path && allow && allow_len)
            build_allow(r, segs, (unsigned)n, allow, allow_len);
        free(buf);
        return any_path ? SBX_ROUTE_BAD_METHOD : SBX_ROUTE_NOT_FOUND;
    }
    m->target = best->target;
    m->pattern = best->pattern;
    m->buf = buf;
    for (unsigned i = 0; i < best->nsegs; i++) {
        if (!best->segs[i].param)
            continue;
        m->names[m->nparams] = best->segs[i].text;
        m->values[m->nparams] = segs[i];
        m->nparams++;
    }
    return SBX_ROUTE_FOUND;
}

void sbx_router_each(const sbx_router *r, sbx_router_each_fn fn, void *ud)
{
    for (size_t i = 0; i < r->n; i++)
        fn(ud, r->routes[i].method, r->routes[i].pattern);
}

const char *sbx_route_param(const sbx_route_match *m, const char *name)
{
    for (unsigned i = 0; i < m->nparams; i++)
        if (!strcmp(m->names[i], name))
            return m->values[i];
    return NULL;
}

void sbx_route_match_clear(sbx_route_match *m)
{
    free(m->buf);
    memset(m, 0, sizeof(*m));
}
