/* The input shape shared by the API's fuzz targets: an HTTP request as
 * text, split the way libmicrohttpd hands it to us.
 *
 *   METHOD /path?query
 *   Name: value        (header lines, up to the first empty line)
 *
 *   body
 *
 * A header's name is looked up case-insensitively, as MHD does; the fake
 * MHD lookups below answer from this table, so the daemon's own accessors
 * (sbx_http_req_header, sbx_http_req_query) run unchanged. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/http_internal.h"

#define FZ_MAX_FIELDS 64

struct fz_field {
    const char *name, *value;
};

struct fz_request {
    char *text; /* the input, NUL-terminated, cut in place */
    const char *method, *target, *path, *query;
    struct fz_field headers[FZ_MAX_FIELDS], args[FZ_MAX_FIELDS];
    size_t nheaders, nargs;
    const char *body;
    size_t body_len;
};

static const char *fz_line(char **p)
{
    char *s = *p, *nl = strchr(s, '\n');
    if (nl) {
        *nl = '\0';
        *p = nl + 1;
        if (nl > s && nl[-1] == '\r')
            nl[-1] = '\0';
    } else {
        *p = s + strlen(s);
    }
    return s;
}

/* Cut the input into fz; false when it is not a request at all. The query
 * is split on '&' and '=' and each part %-decoded by the daemon's own
 * decoder, as MHD (with our unescape callback) does. */
static bool fz_parse(struct fz_request *fz, const uint8_t *data, size_t size)
{
    memset(fz, 0, sizeof(*fz));
    fz->text = malloc(size + 1);
    if (!fz->text)
        return false;
    memcpy(fz->text, data, size);
    fz->text[size] = '\0';
    char *p = fz->text;
    char *first = (char *)fz_line(&p);
    char *sp = strchr(first, ' ');
    if (!sp)
        return false;
    *sp = '\0';
    fz->method = first;
    fz->target = sp + 1;
    char *q = strchr(sp + 1, '?');
    if (q) {
        *q = '\0';
        fz->query = q + 1;
    }
    fz->path = sp + 1;
    while (*p && fz->nheaders < FZ_MAX_FIELDS) {
        char *line = (char *)fz_line(&p);
        if (!*line)
            break;
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        *colon = '\0';
        const char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        fz->headers[fz->nheaders++] = (struct fz_field){line, v};
    }
    fz->body = p;
    fz->body_len = size - (size_t)(p - fz->text);
    if (fz->body_len > strlen(p))
        fz->body_len = strlen(p); /* a NUL inside: the rest is cut (jansson would refuse it) */
    for (char *a = (char *)fz->query, *next; a && *a && fz->nargs < FZ_MAX_FIELDS; a = next) {
        next = strchr(a, '&');
        if (next)
            *next++ = '\0';
        char *eq = strchr(a, '=');
        if (eq)
            *eq++ = '\0';
        bool nul;
        sbx_http__unescape(a, &nul);
        if (eq)
            sbx_http__unescape(eq, &nul);
        fz->args[fz->nargs++] = (struct fz_field){a, eq};
    }
    return true;
}

static void fz_free(struct fz_request *fz)
{
    free(fz->text);
}

/* ---- the fake MHD lookups: conn is the struct fz_request ---- */

static const struct fz_field *fz_find(const struct fz_field *f, size_t n, const char *name,
                                      bool nocase)
{
    for (size_t i = 0; i < n; i++)
        if (nocase ? !strcasecmp(f[i].name, name) : !strcmp(f[i].name, name))
            return &f[i];
    return NULL;
}

static const char *fz_lookup(struct MHD_Connection *conn, enum MHD_ValueKind kind, const char *key)
{
    const struct fz_request *fz = (const void *)conn;
    const struct fz_field *f = kind == MHD_HEADER_KIND
                                   ? fz_find(fz->headers, fz->nheaders, key, true)
                                   : fz_find(fz->args, fz->nargs, key, false);
    return f ? (f->value ? f->value : "") : NULL;
}

static enum MHD_Result fz_lookup_n(struct MHD_Connection *conn, enum MHD_ValueKind kind,
                                   const char *key, size_t key_size, const char **value,
                                   size_t *value_size)
{
    const struct fz_request *fz = (const void *)conn;
    const struct fz_field *f = kind == MHD_HEADER_KIND
                                   ? fz_find(fz->headers, fz->nheaders, key, true)
                                   : fz_find(fz->args, fz->nargs, key, false);
    if (!f)
        return MHD_NO;
    *value = f->value;
    if (value_size)
        *value_size = f->value ? strlen(f->value) : 0;
    return MHD_YES;
}

/* A request as the server would hand it to a handler. */
static void fz_request_init(sbx_http_request *req, struct fz_request *fz, const sbx_identity *who)
{
    memset(req, 0, sizeof(*req));
    req->conn = (struct MHD_Connection *)fz;
    req->method = fz->method;
    req->path = fz->path;
    req->who = who;
    snprintf(req->peer, sizeof(req->peer), "unix");
    sbx_mhd.lookup_connection_value = fz_lookup;
    sbx_mhd.lookup_connection_value_n = fz_lookup_n;
}
