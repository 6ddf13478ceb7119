/* sandboxctl mcp: MCP over stdio, for clients that spawn a process, bridged
 * to the daemon's Streamable HTTP endpoint (POST /mcp). Each line on stdin
 * is one JSON-RPC message, POSTed as it comes (calls run side by side, so a
 * notifications/cancelled reaches the daemon while its call is running);
 * each message the daemon answers with, a JSON body or the events of a
 * stream (progress, then the result), is written to stdout as one line.
 * Transport failures become JSON-RPC errors of the request that met them.
 * Ends when stdin does, once the calls in flight are answered. Nothing but
 * MCP messages is written to stdout; diagnostics go to stderr. */
#include <errno.h>
#include <stdarg.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli/client.h"
#include "cli/cmd.h"
#include "base/curl_dl.h"
#include "cli/sse.h"
#include "cli/target.h"

#define LINE_MAX_BYTES (64u << 20)
#define BODY_MAX_BYTES (64u << 20)

struct bridge {
    CURLM *multi;
    struct sbx_cli_target target;
    char *url;
    char *auth; /* "Authorization: Bearer …" */
    const struct sbx_cli_args *args;
    char session[128]; /* the Mcp-Session-Id the daemon gave */
    unsigned inflight;
};

struct xfer {
    struct bridge *b;
    CURL *easy;
    struct curl_slist *headers;
    char *request; /* the message sent */
    json_t *id;    /* its id, or NULL for a notification */
    bool sse;      /* the answer is an event stream */
    bool decided;  /* the answer's type looked at */
    char *body;    /* a JSON (or error) answer */
    size_t len;
    bool too_large;
    struct sbx_cli_sse parser;
    char errbuf[CURL_ERROR_SIZE];
};

/* One message, one line, flushed at once: the client reads line by line. */
static void emit(const char *json, size_t len)
{
    json_error_t je;
    json_t *m = json_loadb(json, len, 0, &je);
    char *line = m ? json_dumps(m, JSON_COMPACT) : NULL;
    if (line) {
        fputs(line, stdout);
        fputc('\n', stdout);
        fflush(stdout);
    } else {
        fprintf(stderr, "sandboxctl mcp: the daemon sent a message that is not JSON: %s\n",
                je.text);
    }
    free(line);
    json_decref(m);
}

static void emit_error(const json_t *id, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void emit_error(const json_t *id, const char *fmt, ...)
{
    if (!id)
        return; /* a notification has nobody to tell */
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *m = json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id, "error", "code",
                          -32000, "message", msg);
    char *line = m ? json_dumps(m, JSON_COMPACT) : NULL;
    if (line) {
        puts(line);
        fflush(stdout);
    }
    free(line);
    json_decref(m);
}

static int on_event(void *ud, const struct sbx_cli_sse_event *ev)
{
    if (strcmp(ev->type, "message") == 0 && ev->data_len)
        emit(ev->data, ev->data_len);
    return 0;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    struct xfer *x = ud;
    size_t len = size * n;
    static const char name[] = "mcp-session-id:";
    if (len > sizeof(name) && strncasecmp(p, name, sizeof(name) - 1) == 0) {
        const char *v = p + sizeof(name) - 1;
        size_t vl = len - (sizeof(name) - 1);
        while (vl && (*v == ' ' || *v == '\t'))
            v++, vl--;
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
            vl--;
        if (vl < sizeof(x->b->session))
            snprintf(x->b->session, sizeof(x->b->session), "%.*s", (int)vl, v);
    }
    return len;
}

static size_t on_write(char *p, size_t size, size_t n, void *ud)
{
    struct xfer *x = ud;
    size_t len = size * n;
    if (!x->decided) {
        x->decided = true;
        long status = 0;
        char *ct = NULL;
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(x->easy, CURLINFO_CONTENT_TYPE, &ct);
        x->sse = status / 100 == 2 && ct && strncasecmp(ct, "text/event-stream", 17) == 0;
    }
    if (x->sse) {
        sbx_err e = {0};
        return sbx_cli_sse_feed(&x->parser, p, len, &e) < 0 ? 0 : len;
    }
    if (x->len + len > BODY_MAX_BYTES) {
        x->too_large = true;
        return 0;
    }
    char *grown = realloc(x->body, x->len + len + 1);
    if (!grown)
        return 0;
    memcpy(grown + x->len, p, len);
    x->body = grown;
    x->len += len;
    x->body[x->len] = '\0';
    return len;
}

static void xfer_free(struct xfer *x)
{
    if (x->easy) {
        curl_multi_remove_handle(x->b->multi, x->easy);
        curl_easy_cleanup(x->easy);
    }
    curl_slist_free_all(x->headers);
    sbx_cli_sse_free(&x->parser);
    json_decref(x->id);
    free(x->request);
    free(x->body);
    free(x);
}

/* POST one message from stdin. */
static void send_line(struct bridge *b, const char *line, size_t len)
{
    json_error_t je;
    json_t *m = json_loadb(line, len, 0, &je);
    if (!m) {
        /* JSON-RPC's parse error, with no id to answer to. */
        json_t *e = json_pack("{s:s, s:n, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", "error", "code",
                              -32700, "message", je.text);
        char *out = e ? json_dumps(e, JSON_COMPACT) : NULL;
        if (out)
            puts(out), fflush(stdout);
        free(out);
        json_decref(e);
        return;
    }
    struct xfer *x = calloc(1, sizeof(*x));
    if (!x) {
        json_decref(m);
        return;
    }
    x->b = b;
    json_t *id = json_object_get(m, "id");
    x->id = id && json_object_get(m, "method") ? json_incref(id) : NULL;
    json_decref(m);
    sbx_cli_sse_init(&x->parser, on_event, x);
    x->request = strndup(line, len);
    bool ok = x->request != NULL;
    const struct sbx_cli_args *a = b->args;
    x->headers = sbx_cli_header(x->headers, &ok, "Authorization", b->auth);
    x->headers = sbx_cli_header(x->headers, &ok, "X-Tenant-Code", a->tenant);
    x->headers = sbx_cli_header(x->headers, &ok, "X-Clone-Key", a->clone_key);
    x->headers = sbx_cli_header(x->headers, &ok, "X-Clone-Id", a->clone_id);
    x->headers =
        sbx_cli_header(x->headers, &ok, "Mcp-Session-Id", b->session[0] ? b->session : NULL);
    x->headers = sbx_cli_header(x->headers, &ok, "Content-Type", "application/json");
    x->headers = sbx_cli_header(x->headers, &ok, "Accept", "application/json, text/event-stream");
    if (!ok || !(x->easy = curl_easy_init())) {
        emit_error(x->id, "out of memory");
        xfer_free(x);
        return;
    }
    CURL *k = x->easy;
    curl_easy_setopt(k, CURLOPT_URL, b->url);
    curl_easy_setopt(k, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(k, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(k, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(k, CURLOPT_USERAGENT, "sandboxctl-mcp/" SANDBOXCTL_VERSION);
    curl_easy_setopt(k, CURLOPT_HTTPHEADER, x->headers);
    curl_easy_setopt(k, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(k, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(k, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(k, CURLOPT_POSTFIELDS, x->request);
    curl_easy_setopt(k, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(k, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(k, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(k, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(k, CURLOPT_PRIVATE, x);
    if (b->target.unix_path) {
        curl_easy_setopt(k, CURLOPT_UNIX_SOCKET_PATH, b->target.unix_path);
        curl_easy_setopt(k, CURLOPT_NOPROXY, "*");
    }
    if (curl_multi_add_handle(b->multi, k) != CURLM_OK) {
        emit_error(x->id, "cannot start a request");
        xfer_free(x);
        return;
    }
    b->inflight++;
}

/* A request's answer is all in: pass it on. */
static void finish(struct bridge *b, CURL *k, CURLcode rc)
{
    struct xfer *x = NULL;
    curl_easy_getinfo(k, CURLINFO_PRIVATE, (char **)&x);
    long status = 0;
    curl_easy_getinfo(k, CURLINFO_RESPONSE_CODE, &status);
    b->inflight--;
    if (rc != CURLE_OK && !x->sse) {
        emit_error(x->id, "%s: %s", b->target.display,
                   x->too_large   ? "the answer is too large"
                   : x->errbuf[0] ? x->errbuf
                                  : curl_easy_strerror(rc));
    } else if (!x->sse && x->len) {
        json_error_t je;
        json_t *m = json_loadb(x->body, x->len, 0, &je);
        json_t *err = json_object_get(json_object_get(m, "error"), "message");
        if (json_object_get(m, "jsonrpc"))
            emit(x->body, x->len); /* a JSON-RPC answer, whatever the status */
        else
            emit_error(x->id, "HTTP %ld from %s: %s", status, b->target.display,
                       json_is_string(err) ? json_string_value(err) : "(no JSON-RPC answer)");
        json_decref(m);
    } else if (!x->sse && status / 100 != 2) {
        emit_error(x->id, "HTTP %ld from %s", status, b->target.display);
    }
    xfer_free(x);
}

/* Lines of stdin, each one message; false at its end. */
static bool read_stdin(struct bridge *b, char **buf, size_t *len, size_t *cap)
{
    if (*cap - *len < 65536) {
        size_t ncap = *cap ? *cap * 2 : 131072;
        char *grown = realloc(*buf, ncap);
        if (!grown)
            return false;
        *buf = grown;
        *cap = ncap;
    }
    ssize_t n = read(STDIN_FILENO, *buf + *len, *cap - *len);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return true;
    if (n <= 0)
        return false;
    *len += (size_t)n;
    size_t start = 0;
    for (char *nl; (nl = memchr(*buf + start, '\n', *len - start));) {
        size_t end = (size_t)(nl - *buf);
        size_t l = end - start;
        if (l && (*buf)[start + l - 1] == '\r')
            l--;
        if (l)
            send_line(b, *buf + start, l);
        start = end + 1;
    }
    memmove(*buf, *buf + start, *len - start);
    *len -= start;
    if (*len > LINE_MAX_BYTES) {
        fprintf(stderr, "sandboxctl mcp: a line of stdin is over %u bytes\n", LINE_MAX_BYTES);
        return false;
    }
    return true;
}

int sbx_cli_cmd_mcp(const struct sbx_cli_args *a)
{
    struct bridge b = {.args = a};
    sbx_err e = {0};
    if (sbx_cli_target_parse(a->url, &b.target, &e) < 0 || sbx_curl_load(&e) < 0) {
        sbx_cli_target_clear(&b.target);
        return sbx_cli_fail(&e);
    }
    int rc = 1;
    b.url = sbx_cli_url(&b.target, "/mcp", NULL);
    if (a->token && asprintf(&b.auth, "Bearer %s", a->token) < 0)
        b.auth = NULL;
    if (!b.url || (a->token && !b.auth) || !(b.multi = curl_multi_init())) {
        fprintf(stderr, "sandboxctl: out of memory\n");
        goto out;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    bool input = true;
    for (;;) {
        int running;
        curl_multi_perform(b.multi, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(b.multi, &left)))
            if (msg->msg == CURLMSG_DONE)
                finish(&b, msg->easy_handle, msg->data.result);
        if (!input && b.inflight == 0)
            break;
        struct curl_waitfd in = {.fd = STDIN_FILENO, .events = CURL_WAIT_POLLIN};
        int n;
        if (curl_multi_poll(b.multi, input ? &in : NULL, input ? 1 : 0, 1000, &n) != CURLM_OK)
            break;
        if (input && in.revents)
            input = read_stdin(&b, &buf, &len, &cap);
    }
    free(buf);
    rc = 0;
out:
    if (b.multi)
        curl_multi_cleanup(b.multi);
    if (b.auth) {
        explicit_bzero(b.auth, strlen(b.auth));
        free(b.auth);
    }
    free(b.url);
    sbx_cli_target_clear(&b.target);
    return rc;
}
