#include "api/http_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/json.h"

#define PRODUCER_BLOCK (64u << 10)

static int answer_error(sbx_http_request *req, unsigned status, const char *code, const char *fmt,
                        va_list ap) __attribute__((format(printf, 4, 0)));

/* ---------------------------------------------------------------------- */
/* Answers                                                                 */

static bool header_name_ok(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c <= 0x20 || c >= 0x7f || strchr("()<>@,;:\\\"/[]?={}", c))
            return false;
    }
    return true;
}

static bool header_value_ok(const char *s)
{
    return !strpbrk(s, "\r\n");
}

int sbx_http_add_header(sbx_http_request *req, const char *name, const char *value)
{
    if (req->answered || !header_name_ok(name) || !header_value_ok(value))
        return -1;
    struct resp_header *h = calloc(1, sizeof(*h));
    if (!h || !(h->name = strdup(name)) || !(h->value = strdup(value))) {
        if (h)
            free(h->name);
        free(h);
        return -1;
    }
    struct resp_header **tail = &req->hdrs;
    while (*tail)
        tail = &(*tail)->next;
    *tail = h;
    return 0;
}

void sbx_http__free_headers(sbx_http_request *req)
{
    while (req->hdrs) {
        struct resp_header *h = req->hdrs;
        req->hdrs = h->next;
        free(h->name);
        free(h->value);
        free(h);
    }
}

/* Hand the pending answer to MHD; only from the access handler (or while
 * the connection is parked). */
enum MHD_Result sbx_http__flush(sbx_http_request *req)
{
    if (!req->resp)
        return MHD_YES;
    enum MHD_Result r = sbx_mhd.queue_response(req->conn, req->resp_status, req->resp);
    sbx_mhd.destroy_response(req->resp);
    req->resp = NULL;
    if (r != MHD_YES)
        return MHD_NO;
    req->queued = true;
    return MHD_YES;
}

int sbx_http__answer(sbx_http_request *req, unsigned status, struct MHD_Response *resp)
{
    if (!resp)
        return -1;
    if (req->answered || req->gone) {
        sbx_mhd.destroy_response(resp);
        return -1;
    }
    for (struct resp_header *h = req->hdrs; h; h = h->next)
        sbx_mhd.add_response_header(resp, h->name, h->value);
    sbx_http__free_headers(req);
    sbx_mhd.add_response_header(resp, "X-Content-Type-Options", "nosniff");
    if (req->srv->cfg.no_keep_alive && status != MHD_HTTP_SWITCHING_PROTOCOLS)
        sbx_mhd.add_response_header(resp, "Connection", "close");
    req->answered = true;
    req->resp = resp;
    req->resp_status = status;
    if (req->cc && req->cc->relay)
        sbx_http__relay_answered(req->cc->relay, status);
    if (req->body_paused) {
        /* MHD takes no answer before the body is in: drop the rest of it,
         * the answer goes out at the end (see discard_max). */
        req->mode = BODY_DISCARD;
        req->body_paused = false;
        sbx_http__resume(req);
    } else if (req->suspended) {
        /* MHD takes an answer for a parked connection at any time. */
        if (sbx_http__flush(req) != MHD_YES)
            req->gone = true; /* the access handler will close it */
        sbx_http__resume(req);
    }
    /* Otherwise we are inside one of MHD's callbacks, or the body is still
     * arriving: the access handler hands it over at its next call. */
    return 0;
}

static struct MHD_Response *buffer_response(char *buf, size_t len)
{
    struct MHD_Response *r = sbx_mhd.create_response_from_buffer_with_free_callback(len, buf, free);
    if (!r)
        free(buf);
    return r;
}

/* Out of memory while answering: still say something. */
void sbx_http__answer_oom(sbx_http_request *req)
{
    static const char body[] =
        "{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}\n";
    struct MHD_Response *r =
        sbx_mhd.create_response_from_buffer(sizeof(body) - 1, (void *)body, MHD_RESPMEM_PERSISTENT);
    if (r) {
        sbx_mhd.add_response_header(r, "Content-Type", "application/json");
        sbx_http__answer(req, MHD_HTTP_INTERNAL_SERVER_ERROR, r);
    } else {
        sbx_http__client_gone(req); /* nothing can be said: close the connection */
    }
}

int sbx_http_respond_json(sbx_http_request *req, unsigned status, json_t *body)
{
    if (req->answered || req->gone) {
        json_decref(body);
        return -1;
    }
    char *text =
        body ? json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(body);
    size_t len = text ? strlen(text) : 0;
    char *buf = text ? realloc(text, len + 2) : NULL;
    if (!buf) {
        free(text);
        sbx_http__answer_oom(req);
        return -1;
    }
    buf[len++] = '\n';
    buf[len] = '\0';
    struct MHD_Response *r = buffer_response(buf, len);
    if (!r) {
        sbx_http__answer_oom(req);
        return -1;
    }
    sbx_mhd.add_response_header(r, "Content-Type", "application/json");
    sbx_mhd.add_response_header(r, "Cache-Control", "no-store");
    return sbx_http__answer(req, status, r);
}

static const struct {
    unsigned status;
    const char *code;
} errors[] = {
    [SBX_HTTP_BAD_REQUEST] = {400, "bad_request"},
    [SBX_HTTP_UNAUTHORIZED] = {401, "unauthorized"},
    [SBX_HTTP_FORBIDDEN] = {403, "forbidden"},
    [SBX_HTTP_NOT_FOUND] = {404, "not_found"},
    [SBX_HTTP_METHOD_NOT_ALLOWED] = {405, "method_not_allowed"},
    [SBX_HTTP_CONFLICT] = {409, "conflict"},
    [SBX_HTTP_TOO_LARGE] = {413, "too_large"},
    [SBX_HTTP_TOO_MANY_REQUESTS] = {429, "too_many_requests"},
    [SBX_HTTP_INTERNAL] = {500, "internal"},
    [SBX_HTTP_NOT_READY] = {503, "not_ready"},
    [SBX_HTTP_INSUFFICIENT_STORAGE] = {507, "insufficient_storage"},
};

unsigned sbx_http_error_status(sbx_http_error kind)
{
    return (size_t)kind < SBX_ARRAY_LEN(errors) ? errors[kind].status : 500;
}

const char *sbx_http_error_code(sbx_http_error kind)
{
    return (size_t)kind < SBX_ARRAY_LEN(errors) ? errors[kind].code : "internal";
}

/* The API's one errno -> answer mapping. `plain`: the client's own doing,
 * which err->msg names (a bad path, a refused tenant, a full queue or disk):
 * the message stands alone; otherwise strerror() says what failed. */
static const struct {
    int errnum;
    sbx_http_error kind;
    bool plain;
} errno_answers[] = {
    {ENOENT, SBX_HTTP_NOT_FOUND, true},
    {ESRCH, SBX_HTTP_NOT_FOUND, false},
    {EEXIST, SBX_HTTP_CONFLICT, false},
    {EBUSY, SBX_HTTP_CONFLICT, false},
    {ENOTEMPTY, SBX_HTTP_CONFLICT, false},
    {EALREADY, SBX_HTTP_CONFLICT, false},
    /* What the object is cannot do it (a session without an egress). */
    {ENOTSUP, SBX_HTTP_CONFLICT, true},
    {EACCES, SBX_HTTP_FORBIDDEN, true},
    {EPERM, SBX_HTTP_FORBIDDEN, false},
    {EROFS, SBX_HTTP_FORBIDDEN, false},
    /* A count the daemon caps (a tenant's clones); a full workspace is
     * ENOSPC (it is a filesystem of its own), so is a full store. */
    {EDQUOT, SBX_HTTP_FORBIDDEN, true},
    {EINVAL, SBX_HTTP_BAD_REQUEST, true},
    {ENAMETOOLONG, SBX_HTTP_BAD_REQUEST, true},
    {ELOOP, SBX_HTTP_BAD_REQUEST, true},
    {EXDEV, SBX_HTTP_BAD_REQUEST, true},
    {ENOTDIR, SBX_HTTP_BAD_REQUEST, true},
    {EISDIR, SBX_HTTP_BAD_REQUEST, true},
    {EDOM, SBX_HTTP_BAD_REQUEST, false},
    {ERANGE, SBX_HTTP_BAD_REQUEST, false},
    {EILSEQ, SBX_HTTP_BAD_REQUEST, false},
    {EFBIG, SBX_HTTP_TOO_LARGE, false},
    {E2BIG, SBX_HTTP_TOO_LARGE, false},
    {EMSGSIZE, SBX_HTTP_TOO_LARGE, false},
    {EOVERFLOW, SBX_HTTP_TOO_LARGE, false},
    {ENOSPC, SBX_HTTP_INSUFFICIENT_STORAGE, true},
    {EAGAIN, SBX_HTTP_TOO_MANY_REQUESTS, true},
};

static size_t errno_answer(int errnum)
{
    size_t i = 0;
    while (i < SBX_ARRAY_LEN(errno_answers) && errno_answers[i].errnum != errnum)
        i++;
    return i;
}

sbx_http_error sbx_http_error_for_errno(int errnum)
{
    size_t i = errno_answer(errnum);
    return i < SBX_ARRAY_LEN(errno_answers) ? errno_answers[i].kind : SBX_HTTP_INTERNAL;
}

static int answer_error(sbx_http_request *req, unsigned status, const char *code, const char *fmt,
                        va_list ap)
{
    if (req->answered || req->gone)
        return -1;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    json_t *body = sbx_json_error_body(code, msg);
    if (!body) {
        sbx_http__answer_oom(req);
        return -1;
    }
    /* After an error the connection is not reused: what follows on it may
     * be the rest of a body the client misframed, not a request. */
    if (!req->srv->cfg.no_keep_alive)
        sbx_http_add_header(req, "Connection", "close");
    return sbx_http_respond_json(req, status, body);
}

int sbx_http_respond_error(sbx_http_request *req, sbx_http_error kind, const char *fmt, ...)
{
    if (kind == SBX_HTTP_UNAUTHORIZED)
        sbx_http_add_header(req, "WWW-Authenticate", "Bearer realm=\"sandboxd\"");
    va_list ap;
    va_start(ap, fmt);
    int rc = answer_error(req, sbx_http_error_status(kind), sbx_http_error_code(kind), fmt, ap);
    va_end(ap);
    return rc;
}

int sbx_http_respond_error_status(sbx_http_request *req, unsigned status, const char *code,
                                  const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = answer_error(req, status, code, fmt, ap);
    va_end(ap);
    return rc;
}

int sbx_http_respond_err(sbx_http_request *req, const sbx_err *err)
{
    size_t i = errno_answer(err->errnum);
    if (i == SBX_ARRAY_LEN(errno_answers))
        return err->errnum ? sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "%s: %s", err->msg,
                                                    strerror(err->errnum))
                           : sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "%s", err->msg);
    if (errno_answers[i].plain)
        return sbx_http_respond_error(req, errno_answers[i].kind, "%s", err->msg);
    return sbx_http_respond_error(req, errno_answers[i].kind, "%s: %s", err->msg,
                                  strerror(err->errnum));
}

/* Answer with r, of content_type (may be NULL); r NULL: out of memory. */
static int answer_typed(sbx_http_request *req, unsigned status, const char *content_type,
                        struct MHD_Response *r)
{
    if (!r) {
        sbx_http__answer_oom(req);
        return -1;
    }
    if (content_type)
        sbx_mhd.add_response_header(r, "Content-Type", content_type);
    return sbx_http__answer(req, status, r);
}

int sbx_http_respond_data(sbx_http_request *req, unsigned status, const char *content_type,
                          const void *data, size_t len)
{
    if (req->answered || req->gone)
        return -1;
    char *copy = malloc(len ? len : 1);
    if (copy)
        memcpy(copy, data, len);
    return answer_typed(req, status, content_type, copy ? buffer_response(copy, len) : NULL);
}

int sbx_http_respond_file(sbx_http_request *req, unsigned status, const char *content_type, int fd,
                          uint64_t offset, uint64_t size)
{
    if (req->answered || req->gone) {
        close(fd);
        return -1;
    }
    struct MHD_Response *r = sbx_mhd.create_response_from_fd_at_offset64(size, fd, offset);
    if (!r)
        close(fd);
    return answer_typed(req, status, content_type, r);
}

struct producer {
    sbx_http_producer fn;
    void *ud;
    void (*ud_free)(void *ud);
};

static ssize_t produce(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct producer *p = cls;
    ssize_t n = p->fn(p->ud, pos, buf, max);
    if (n > 0)
        return n > (ssize_t)max ? MHD_CONTENT_READER_END_WITH_ERROR : n;
    return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void producer_free(void *cls)
{
    struct producer *p = cls;
    if (p->ud_free)
        p->ud_free(p->ud);
    free(p);
}

int sbx_http_respond_stream(sbx_http_request *req, unsigned status, const char *content_type,
                            uint64_t size, sbx_http_producer fn, void *ud,
                            void (*ud_free)(void *ud))
{
    struct producer *p = NULL;
    if (req->answered || req->gone || !(p = malloc(sizeof(*p)))) {
        if (ud_free)
            ud_free(ud);
        if (!req->answered && !req->gone)
            sbx_http__answer_oom(req);
        return -1;
    }
    *p = (struct producer){fn, ud, ud_free};
    uint64_t total = size == SBX_HTTP_SIZE_UNKNOWN ? MHD_SIZE_UNKNOWN : size;
    struct MHD_Response *r =
        sbx_mhd.create_response_from_callback(total, PRODUCER_BLOCK, produce, p, producer_free);
    if (!r)
        producer_free(p);
    return answer_typed(req, status, content_type, r);
}
