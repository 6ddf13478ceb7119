/* Where sandboxctl sends its requests: an http(s) base URL, or a unix socket
 * ("unix:/run/sandbox.sock") reached with CURLOPT_UNIX_SOCKET_PATH under a
 * placeholder host. Pure string handling, unit-tested alone. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

struct sbx_cli_target {
    char *base;      /* "http://127.0.0.1:8080" or "http://localhost/prefix": no trailing '/' */
    char *unix_path; /* socket path, or NULL for TCP */
    char *display;   /* what messages call it: the URL, or "unix:/path" */
};

/* Accepted: http://host[:port][/prefix], https://…, host:port and :port
 * (http, :port on 127.0.0.1), unix:/path and unix:///path. EINVAL naming
 * the value for anything else (another scheme, a query or fragment, no host,
 * a socket path longer than sun_path). */
int sbx_cli_target_parse(const char *url, struct sbx_cli_target *t, sbx_err *err);
void sbx_cli_target_clear(struct sbx_cli_target *t);

/* Percent-encode s (RFC 3986 unreserved characters kept, and '/' when
 * keep_slash); the caller frees. NULL when out of memory. */
char *sbx_cli_escape(const char *s, bool keep_slash);

/* base + path + "?k=v&…" from query, pairs of key and value ended by a NULL
 * key; a pair whose value is NULL is left out. Values are escaped (slashes
 * kept), path is used as given. The caller frees; NULL when out of memory. */
char *sbx_cli_url(const struct sbx_cli_target *t, const char *path, const char *const *query);

/* "/runtime/tasks/" + escaped id + suffix (may be ""), slashes escaped. */
char *sbx_cli_task_path(const char *id, const char *suffix);
