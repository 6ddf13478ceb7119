/* docs/openapi.json (embedded, served by GET /openapi.json) documents every
 * route the daemon's router has, and nothing else: a route added without
 * its documentation, or documentation left after a route is gone, fails
 * here, naming it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>
#include <event2/event.h>
#include <jansson.h>

#include "api/auth.h"
#include "api/http.h"
#include "api/routes.h"

extern const char sbx_openapi_json[], sbx_openapi_json_end[];

struct names {
    char *v[256];
    size_t n;
};

static void add(struct names *s, const char *method, const char *path)
{
    assert_true(s->n < 256);
    assert_true(asprintf(&s->v[s->n++], "%s %s", method, path) > 0);
}

static void on_route(void *ud, const char *method, const char *pattern)
{
    add(ud, method, pattern);
}

static bool has(const struct names *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], name) == 0)
            return true;
    return false;
}

static void clear(struct names *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    s->n = 0;
}

static json_t *document(void)
{
    json_error_t je;
    json_t *doc = json_loadb(sbx_openapi_json, (size_t)(sbx_openapi_json_end - sbx_openapi_json),
                             JSON_REJECT_DUPLICATES, &je);
    if (!doc)
        fail_msg("docs/openapi.json: %d:%d: %s", je.line, je.column, je.text);
    return doc;
}

static void every_route_documented_and_back(void **state)
{
    struct event_base *base = event_base_new();
    sbx_http_config cfg = {.listen = "127.0.0.1:0"};
    sbx_http_server *srv = NULL;
    sbx_err e = {0};
    assert_int_equal(sbx_http_server_new(base, &cfg, &srv, &e), 0);
    struct sbx_api api = {0};
    assert_int_equal(sbx_api_routes(srv, &api, &e), 0);
    struct names routes = {0}, documented = {0};
    sbx_http_server_each_route(srv, on_route, &routes);
    assert_true(routes.n > 10);

    json_t *doc = document();
    static const char *const methods[] = {"get",   "put",  "post",   "delete",
                                          "patch", "head", "options"};
    const char *path;
    json_t *item;
    json_object_foreach(json_object_get(doc, "paths"), path, item)
    {
        for (size_t i = 0; i < sizeof(methods) / sizeof(*methods); i++) {
            json_t *op = json_object_get(item, methods[i]);
            if (!op)
                continue;
            char upper[16];
            size_t k = 0;
            for (; methods[i][k] && k < sizeof(upper) - 1; k++)
                upper[k] = (char)(methods[i][k] - 'a' + 'A');
            upper[k] = '\0';
            add(&documented, upper, path);
            /* Each operation says how it answers, errors included. */
            json_t *responses = json_object_get(op, "responses");
            if (json_object_size(responses) == 0)
                fail_msg("%s %s: no responses documented", upper, path);
            json_t *security = json_object_get(op, "security");
            bool public_route = json_is_array(security) && json_array_size(security) == 0;
            sbx_auth *auth = sbx_auth_new();
            if (public_route != sbx_auth_is_public(auth, path))
                fail_msg("%s %s: documented %s, but the daemon %s a token for it", upper, path,
                         public_route ? "token-free" : "with a token",
                         public_route ? "requires" : "does not require");
            sbx_auth_free(auth);
            if (!public_route && !json_object_get(responses, "401"))
                fail_msg("%s %s: needs a token but documents no 401", upper, path);
        }
    }
    int missing = 0;
    for (size_t i = 0; i < routes.n; i++)
        if (!has(&documented, routes.v[i])) {
            print_error("route not in docs/openapi.json: %s\n", routes.v[i]);
            missing++;
        }
    for (size_t i = 0; i < documented.n; i++)
        if (!has(&routes, documented.v[i])) {
            print_error("docs/openapi.json documents a route the router lacks: %s\n",
                        documented.v[i]);
            missing++;
        }
    assert_int_equal(missing, 0);
    json_decref(doc);
    clear(&routes);
    clear(&documented);
    sbx_api_close(&api); /* what the OpenSandbox routes keep */
    sbx_http_server_free(srv);
    event_base_free(base);
}

static void document_is_openapi_3_1(void **state)
{
    json_t *doc = document();
    assert_string_equal(json_string_value(json_object_get(doc, "openapi")), "3.1.0");
    json_t *err =
        json_object_get(json_object_get(json_object_get(doc, "components"), "schemas"), "Error");
    assert_non_null(err);
    json_decref(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_route_documented_and_back),
        cmocka_unit_test(document_is_openapi_3_1),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
