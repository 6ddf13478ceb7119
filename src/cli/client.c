#include "cli/client.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/client_int.h"
#include "base/curl_dl.h"

struct sbx_cli_client {
    struct sbx_cli_plain *plain; /* http:// and unix: targets, no proxy */
    CURL *curl;                  /* the others (https, a proxy), libcurl loaded for them */
    struct sbx_cli_target target;
    char *auth; /* "Bearer …", or NULL */
    const char *tenant, *clone_key, *clone_id;
    char errbuf[CURL_ERROR_SIZE];
};

struct xfer {
    struct sbx_cli_xfer x;
    struct sbx_cli_client *c;
};

/* libcurl's proxy variables for http:// targets (it leaves unix: sockets
 * alone): a set one sends such requests through libcurl, which honours it. */
static bool proxy_set(void)
{
    static const char *const vars[] = {"http_proxy", "all_proxy", "ALL_PROXY"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return true;
    }
    return false;
}

/* Whether our own socket serves the target: http:// or unix:, no user in
 * the URL, no proxy to go through. */
static bool plain_serves(const struct sbx_cli_target *t)
{
    if (t->unix_path)
        return true;
    if (strncmp(t->base, "http://", 7) != 0 || proxy_set())
        return false;
    const char *auth = t->base + 7;
    return memchr(auth, '@', strcspn(auth, "/")) == NULL;
}

struct sbx_cli_client *sbx_cli_client_new(const struct sbx_cli_args *args, sbx_err *err)
{
    struct sbx_cli_client *c = calloc(1, sizeof(*c));
    if (!c) {
        sbx_err_set(err, ENOMEM, "client");
        return NULL;
    }
    if (sbx_cli_target_parse(args->url, &c->target, err) < 0) {
        free(c);
        return NULL;
    }
    if (args->token && asprintf(&c->auth, "Bearer %s", args->token) < 0) {
        c->auth = NULL;
        sbx_cli_client_free(c);
        sbx_err_set(err, ENOMEM, "client");
        return NULL;
    }
    c->tenant = args->tenant;
    c->clone_key = args->clone_key;
    c->clone_id = args->clone_id;
    if (plain_serves(&c->target)) {
        if (!(c->plain = sbx_cli_plain_new(&c->target))) {
            sbx_cli_client_free(c);
            sbx_err_set(err, ENOMEM, "client");
            return NULL;
        }
        return c;
    }
    if (sbx_curl_load(err) < 0) {
        sbx_cli_client_free(c);
        return NULL;
    }
    if (!(c->curl = curl_easy_init())) {
        sbx_cli_client_free(c);
        sbx_err_set(err, ENOMEM, "curl_easy_init");
        return NULL;
    }
    return c;
}

void sbx_cli_client_free(struct sbx_cli_client *c)
{
    if (!c)
        return;
    sbx_cli_plain_free(c->plain);
    if (c->curl)
        curl_easy_cleanup(c->curl);
    sbx_cli_target_clear(&c->target);
    if (c->auth) {
        explicit_bzero(c->auth, strlen(c->auth));
        free(c->auth);
    }
    free(c);
}

const char *sbx_cli_client_display(const struct sbx_cli_client *c)
{
    return c->target.display;
}

void sbx_cli_response_clear(struct sbx_cli_response *rs)
{
    free(rs->body);
    *rs = (struct sbx_cli_response){0};
}

static bool type_matches(const char *ct, const char *want)
{
    size_t n = strlen(want);
    return ct && strncasecmp(ct, want, n) == 0 && (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

static int keep(struct sbx_cli_response *rs, const char *p, size_t n)
{
    char *grown = realloc(rs->body, rs->len + n + 1);
    if (!grown)
        return -1;
    memcpy(grown + rs->len, p, n);
    rs->body = grown;
    rs->len += n;
    rs->body[rs->len] = '\0';
    return 0;
}

bool sbx_cli_xfer_take(struct sbx_cli_xfer *x, const char *ct, const char *p, size_t n)
{
    struct sbx_cli_response *rs = x->rs;
    if (!x->decided) {
        x->decided = true;
        bool ok = rs->status >= 200 && rs->status < 300;
        if (ok && x->rq->require_type && !type_matches(ct, x->rq->require_type)) {
            rs->wrong_type = true;
            return false; /* cut off: the caller does not want this body */
        }
        x->to_sink = ok && x->rq->sink;
    }
    rs->received = true;
    if (x->to_sink) {
        if (x->rq->sink(x->rq->sink_ud, p, n, x->err) < 0) {
            x->sink_failed = true;
            return false;
        }
        return true;
    }
    bool ok = rs->status >= 200 && rs->status < 300;
    size_t max = ok ? SBX_CLI_BODY_MAX : SBX_CLI_ERROR_BODY_MAX;
    size_t take = n;
    if (rs->len + take > max) {
        if (ok) {
            x->too_large = true;
            return false;
        }
        take = max - rs->len; /* an error's first 64 KiB say enough */
        rs->body_cut = true;
    }
    if (take && keep(rs, p, take) < 0) {
        x->too_large = true;
        return false;
    }
    return true;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    size_t n = size * nmemb;
    char *ct = NULL;
    if (!x->x.decided) {
        curl_easy_getinfo(x->c->curl, CURLINFO_RESPONSE_CODE, &x->x.rs->status);
        curl_easy_getinfo(x->c->curl, CURLINFO_CONTENT_TYPE, &ct);
    }
    return sbx_cli_xfer_take(&x->x, ct, p, n) ? n : 0;
}

static size_t on_read(char *buf, size_t size, size_t nmemb, void *ud)
{
    FILE *f = ud;
    size_t n = fread(buf, 1, size * nmemb, f);
    if (n == 0 && ferror(f))
        return CURL_READFUNC_ABORT;
    return n;
}

struct curl_slist *sbx_cli_header(struct curl_slist *h, bool *ok, const char *name, const char *v)
{
    if (!*ok || !v)
        return h;
    char *line;
    if (asprintf(&line, "%s: %s", name, v) < 0) {
        *ok = false;
        return h;
    }
    struct curl_slist *n = curl_slist_append(h, line);
    explicit_bzero(line, strlen(line));
    free(line);
    if (!n)
        *ok = false;
    return n ? n : h;
}

static void add(struct sbx_cli_headers *h, const char *name, const char *v)
{
    if (v && h->n < SBX_CLI_HEADERS_MAX)
        h->name[h->n] = name, h->value[h->n++] = v;
}

static void headers_for(struct sbx_cli_client *c, const struct sbx_cli_request *rq,
                        struct sbx_cli_headers *h)
{
    h->n = 0;
    add(h, "Authorization", c->auth);
    /* Our answers on the original's routes (docs/compatibility.md). */
    add(h, "X-Sandbox-Extended", "1");
    add(h, "X-Tenant-Code", c->tenant);
    add(h, "X-Clone-Key", c->clone_key);
    add(h, "X-Clone-Id", c->clone_id);
    add(h, "Accept", rq->event_stream ? "text/event-stream" : "application/json, */*");
    add(h, "Last-Event-ID", rq->last_event_id);
    if (rq->json)
        add(h, "Content-Type", "application/json");
    else if (rq->upload)
        add(h, "Content-Type", "application/octet-stream");
}

static struct curl_slist *curl_headers(const struct sbx_cli_headers *hs)
{
    bool ok = true;
    struct curl_slist *h = NULL;
    for (size_t i = 0; i < hs->n; i++)
        h = sbx_cli_header(h, &ok, hs->name[i], hs->value[i]);
    if (!ok) {
        curl_slist_free_all(h);
        return NULL;
    }
    return h;
}

static void set_options(struct sbx_cli_client *c, const struct sbx_cli_request *rq, struct xfer *x,
                        const char *url, struct curl_slist *h)
{
    CURL *k = c->curl;
    curl_easy_reset(k); /* the connection cache stays */
    curl_easy_setopt(k, CURLOPT_URL, url);
    curl_easy_setopt(k, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(k, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(k, CURLOPT_ERRORBUFFER, c->errbuf);
    curl_easy_setopt(k, CURLOPT_USERAGENT, "sandboxctl/" SANDBOXCTL_VERSION);
    curl_easy_setopt(k, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(k, CURLOPT_CONNECTTIMEOUT, (long)SBX_CLI_CONNECT_TIMEOUT_S);
    curl_easy_setopt(k, CURLOPT_TCP_KEEPALIVE, 1L);
    /* Never follow a redirect: it would carry the token elsewhere. */
    curl_easy_setopt(k, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(k, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(k, CURLOPT_WRITEDATA, x);
    if (c->target.unix_path) {
        curl_easy_setopt(k, CURLOPT_UNIX_SOCKET_PATH, c->target.unix_path);
        curl_easy_setopt(k, CURLOPT_NOPROXY, "*");
    }
    if (rq->event_stream) {
        curl_easy_setopt(k, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(k, CURLOPT_LOW_SPEED_TIME, (long)SBX_CLI_STREAM_STALL_S);
    }
    if (rq->upload) {
        curl_easy_setopt(k, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(k, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(k, CURLOPT_READDATA, rq->upload);
        if (rq->upload_size >= 0)
            curl_easy_setopt(k, CURLOPT_INFILESIZE_LARGE, (curl_off_t)rq->upload_size);
        if (strcmp(rq->method, "PUT") != 0)
            curl_easy_setopt(k, CURLOPT_CUSTOMREQUEST, rq->method);
    } else if (rq->json || strcmp(rq->method, "POST") == 0) {
        const char *body = rq->json ? rq->json : "";
        curl_easy_setopt(k, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
        curl_easy_setopt(k, CURLOPT_POSTFIELDS, body);
        if (strcmp(rq->method, "POST") != 0)
            curl_easy_setopt(k, CURLOPT_CUSTOMREQUEST, rq->method);
    } else if (strcmp(rq->method, "GET") != 0) {
        curl_easy_setopt(k, CURLOPT_CUSTOMREQUEST, rq->method);
    }
}

static bool no_connection(CURLcode rc)
{
    return rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
           rc == CURLE_COULDNT_RESOLVE_PROXY || rc == CURLE_SSL_CONNECT_ERROR;
}

static int curl_send(struct sbx_cli_client *c, const char *url, const struct sbx_cli_headers *hs,
                     struct xfer *x)
{
    const struct sbx_cli_request *rq = x->x.rq;
    struct sbx_cli_response *rs = x->x.rs;
    sbx_err *err = x->x.err;
    struct curl_slist *h = curl_headers(hs);
    if (!h)
        return sbx_err_set(err, ENOMEM, "request %s", rq->path);
    c->errbuf[0] = '\0';
    set_options(c, rq, x, url, h);
    CURLcode rc = curl_easy_perform(c->curl);
    curl_slist_free_all(h);
    if (rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && rs->wrong_type)) {
        if (!x->x.decided)
            curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &rs->status);
        return 0;
    }
    if (x->x.sink_failed)
        return -1; /* the sink said why */
    const char *why = c->errbuf[0] ? c->errbuf : curl_easy_strerror(rc);
    long os_errno = 0;
    curl_easy_getinfo(c->curl, CURLINFO_OS_ERRNO, &os_errno);
    if (c->target.unix_path && no_connection(rc) && os_errno)
        why = strerror((int)os_errno); /* curl would speak of "localhost port 80" */
    if (x->x.too_large)
        return sbx_err_set(err, EFBIG, "%s %s: the answer is larger than %u MiB", rq->method,
                           rq->path, SBX_CLI_BODY_MAX >> 20);
    if (no_connection(rc))
        return sbx_err_set(err, ECONNREFUSED, "cannot connect to %s: %s", c->target.display, why);
    if (rc == CURLE_OPERATION_TIMEDOUT && !x->x.decided)
        return sbx_err_set(err, ETIMEDOUT, "no answer from %s: %s", c->target.display, why);
    return sbx_err_set(err, EIO, "%s %s at %s: %s", rq->method, rq->path, c->target.display, why);
}

int sbx_cli_send(struct sbx_cli_client *c, const struct sbx_cli_request *rq,
                 struct sbx_cli_response *rs, sbx_err *err)
{
    *rs = (struct sbx_cli_response){0};
    cleanup_free char *url = sbx_cli_url(&c->target, rq->path, rq->query);
    if (!url)
        return sbx_err_set(err, ENOMEM, "request %s", rq->path);
    struct sbx_cli_headers hs;
    headers_for(c, rq, &hs);
    struct xfer x = {.x = {.rq = rq, .rs = rs, .err = err}, .c = c};
    int rc;
    if (c->plain) {
        rc = sbx_cli_plain_send(c->plain, url, &hs, &x.x);
    } else {
        rc = curl_send(c, url, &hs, &x);
    }
    if (rc < 0) {
        /* What was kept of an answer cut short is no answer. */
        free(rs->body);
        rs->body = NULL;
        rs->len = 0;
    }
    return rc;
}
