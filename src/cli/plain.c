/* HTTP/1.1 over a socket of our own, for http:// and unix: targets: what
 * sandboxctl sends most, without loading libcurl (base/curl_dl.h). The
 * answer's grammar (status line, headers, chunked or sized or closed
 * bodies) is http_parser's; here are only the socket, the request's head
 * and body, and the same outcomes as the libcurl transport. */
#include <errno.h>
#include <fcntl.h>
#include <http_parser.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cli/client_int.h"

struct sbx_cli_plain {
    const struct sbx_cli_target *t;
    int fd; /* kept alive between requests; -1: none */
};

struct sbx_cli_plain *sbx_cli_plain_new(const struct sbx_cli_target *t)
{
    struct sbx_cli_plain *p = calloc(1, sizeof(*p));
    if (p)
        p->t = t, p->fd = -1;
    return p;
}

static void drop(struct sbx_cli_plain *p)
{
    if (p->fd >= 0)
        close(p->fd);
    p->fd = -1;
}

void sbx_cli_plain_free(struct sbx_cli_plain *p)
{
    if (p)
        drop(p);
    free(p);
}

/* A kept connection the server has closed (or said something unasked on:
 * readable before we asked) is not used again. */
static bool still_open(int fd)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    return poll(&pf, 1, 0) == 0;
}

/* Connect with a bound: -1 with errno. */
static int connect_within(int fd, const struct sockaddr *a, socklen_t len)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -1;
    if (connect(fd, a, len) < 0) {
        if (errno != EINPROGRESS)
            return -1;
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int n;
        while ((n = poll(&pf, 1, SBX_CLI_CONNECT_TIMEOUT_S * 1000)) < 0 && errno == EINTR)
            ;
        if (n == 0)
            return errno = ETIMEDOUT, -1;
        int e = 0;
        socklen_t el = sizeof(e);
        if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0)
            return -1;
        if (e)
            return errno = e, -1;
    }
    return fcntl(fd, F_SETFL, fl);
}

static int open_unix(const char *path, sbx_err *err, const char *display)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path); /* length checked by target.c */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect_within(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return sbx_err_set(err, ECONNREFUSED, "cannot connect to %s: %s", display, strerror(e));
    }
    return fd;
}

/* host is "name", "name:port", "[v6]" or "[v6]:port" (port 80 by default). */
static int open_tcp(const char *host, sbx_err *err, const char *display)
{
    char name[256], port[8] = "80";
    const char *colon;
    if (host[0] == '[') {
        const char *close_b = strchr(host, ']');
        if (!close_b || (size_t)(close_b - host - 1) >= sizeof(name))
            return sbx_err_set(err, EINVAL, "'%s': a bad host", display);
        snprintf(name, sizeof(name), "%.*s", (int)(close_b - host - 1), host + 1);
        colon = close_b[1] == ':' ? close_b + 1 : NULL;
    } else {
        colon = strrchr(host, ':');
        size_t n = colon ? (size_t)(colon - host) : strlen(host);
        if (n >= sizeof(name))
            return sbx_err_set(err, EINVAL, "'%s': a bad host", display);
        snprintf(name, sizeof(name), "%.*s", (int)n, host);
    }
    if (colon && colon[1])
        snprintf(port, sizeof(port), "%.7s", colon + 1);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG}, *res;
    int g = getaddrinfo(name, port, &hints, &res);
    if (g != 0)
        return sbx_err_set(err, ECONNREFUSED, "cannot connect to %s: %s", display,
                           g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
    int fd = -1, e = ECONNREFUSED;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect_within(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        e = errno;
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return sbx_err_set(err, ECONNREFUSED, "cannot connect to %s: %s", display, strerror(e));
    int one = 1; /* a request's head and body leave at once, as curl sends them */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    return fd;
}

static int send_all(int fd, const char *buf, size_t len)
{
    while (len) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The request's head (and a JSON body with it): NULL when out of memory or
 * a header value would break the head (a line break in a token). */
static char *head_for(const char *method, const char *target, const char *host,
                      const struct sbx_cli_headers *h, const struct sbx_cli_request *rq,
                      size_t *len, sbx_err *err)
{
    char *buf = NULL;
    size_t cap = 0;
    FILE *f = open_memstream(&buf, &cap);
    if (!f) {
        sbx_err_set(err, ENOMEM, "request");
        return NULL;
    }
    fprintf(f, "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: sandboxctl/" SANDBOXCTL_VERSION "\r\n",
            method, target, host);
    bool bad = false;
    for (size_t i = 0; i < h->n; i++) {
        bad |= strpbrk(h->value[i], "\r\n") != NULL;
        fprintf(f, "%s: %s\r\n", h->name[i], h->value[i]);
    }
    const char *body = NULL;
    if (rq->upload && rq->upload_size >= 0)
        fprintf(f, "Content-Length: %" PRId64 "\r\n", rq->upload_size);
    else if (rq->upload)
        fputs("Transfer-Encoding: chunked\r\n", f);
    else if (rq->json || strcmp(rq->method, "POST") == 0)
        body = rq->json ? rq->json : "", fprintf(f, "Content-Length: %zu\r\n", strlen(body));
    fputs("\r\n", f);
    if (body)
        fputs(body, f);
    if (fclose(f) != 0 || bad) {
        if (buf)
            explicit_bzero(buf, cap);
        free(buf);
        if (bad)
            sbx_err_set(err, EINVAL, "a header value holds a line break");
        else
            sbx_err_set(err, ENOMEM, "request");
        return NULL;
    }
    *len = cap;
    return buf;
}

/* The upload from its FILE: sized (it must hold that much, no more), or
 * in chunks. -1: errno (EIO when the file could not be read, or its size
 * changed). */
static int send_upload(int fd, const struct sbx_cli_request *rq)
{
    char buf[65536 + 16];
    bool chunked = rq->upload_size < 0;
    uint64_t total = 0;
    for (;;) {
        size_t n = fread(buf + 10, 1, 65536, rq->upload);
        if (n == 0 && ferror(rq->upload))
            return errno = EIO, -1;
        total += n;
        if (!chunked && total > (uint64_t)rq->upload_size)
            return errno = EIO, -1;
        if (chunked) {
            char size[12];
            int k = snprintf(size, sizeof(size), "%zx\r\n", n);
            memcpy(buf + 10 - k, size, (size_t)k);
            memcpy(buf + 10 + n, "\r\n", 2);
            if (send_all(fd, buf + 10 - k, (size_t)k + n + 2) < 0)
                return -1;
        } else if (n && send_all(fd, buf + 10, n) < 0) {
            return -1;
        }
        if (n == 0 && !chunked && total != (uint64_t)rq->upload_size)
            return errno = EIO, -1;
        if (n == 0) /* chunked: "0\r\n\r\n" went above */
            return 0;
    }
}

struct answer {
    struct sbx_cli_xfer *x;
    char field[32];  /* the header being read (cut: only Content-Type matters) */
    char ctype[128]; /* Content-Type */
    bool in_value;   /* the last piece was of a value */
    bool complete;
};

/* A field or a value may come in pieces (split across reads). */
static void append(char *dst, size_t cap, const char *at, size_t len)
{
    size_t have = strlen(dst);
    snprintf(dst + have, cap - have, "%.*s", (int)len, at);
}

static int on_field(http_parser *hp, const char *at, size_t len)
{
    struct answer *a = hp->data;
    if (a->in_value)
        a->field[0] = '\0', a->in_value = false;
    append(a->field, sizeof(a->field), at, len);
    return 0;
}

static int on_value(http_parser *hp, const char *at, size_t len)
{
    struct answer *a = hp->data;
    bool ctype = strcasecmp(a->field, "content-type") == 0;
    if (ctype && !a->in_value)
        a->ctype[0] = '\0';
    a->in_value = true;
    if (ctype)
        append(a->ctype, sizeof(a->ctype), at, len);
    return 0;
}

static int on_headers(http_parser *hp)
{
    struct answer *a = hp->data;
    a->x->rs->status = hp->status_code;
    return 0;
}

static int on_body(http_parser *hp, const char *at, size_t len)
{
    struct answer *a = hp->data;
    return sbx_cli_xfer_take(a->x, a->ctype[0] ? a->ctype : NULL, at, len) ? 0 : -1;
}

static int on_complete(http_parser *hp)
{
    struct answer *a = hp->data;
    a->complete = true;
    http_parser_pause(hp, 1); /* nothing after the answer is ours to read */
    return 0;
}

static const http_parser_settings parse_cb = {.on_header_field = on_field,
                                              .on_header_value = on_value,
                                              .on_headers_complete = on_headers,
                                              .on_body = on_body,
                                              .on_message_complete = on_complete};

/* Read and parse the answer. 0: complete (or cut off on purpose: the xfer
 * says); -1: why in *why (errno-like), got: bytes received. */
static int read_answer(int fd, struct sbx_cli_xfer *x, struct answer *a, http_parser *hp, int *why,
                       size_t *got)
{
    char buf[65536];
    int timeout = x->rq->event_stream ? SBX_CLI_STREAM_STALL_S * 1000 : -1;
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = poll(&pf, 1, timeout);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            return *why = ETIMEDOUT, -1;
        ssize_t n = r < 0 ? -1 : recv(fd, buf, sizeof(buf), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return *why = errno, -1;
        *got += (size_t)n;
        size_t used = http_parser_execute(hp, &parse_cb, buf, (size_t)n);
        if (a->complete)
            return 0;
        if (x->rs->wrong_type || x->sink_failed || x->too_large)
            return 0;
        if (n == 0 || used != (size_t)n || HTTP_PARSER_ERRNO(hp) != HPE_OK)
            return *why = n == 0 ? ECONNRESET : EPROTO, -1;
    }
}

int sbx_cli_plain_send(struct sbx_cli_plain *p, const char *url, const struct sbx_cli_headers *h,
                       struct sbx_cli_xfer *x)
{
    const struct sbx_cli_request *rq = x->rq;
    const char *display = p->t->display;
    /* url: "http://" authority target */
    const char *auth = url + strlen("http://");
    size_t alen = strcspn(auth, "/");
    char host[300];
    snprintf(host, sizeof(host), "%.*s", (int)alen, auth);
    const char *target = auth[alen] ? auth + alen : "/";
    size_t head_len;
    char *head = head_for(rq->method, target, host, h, rq, &head_len, x->err);
    if (!head)
        return -1;
    int rc = -1, why = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        bool reused = p->fd >= 0 && still_open(p->fd);
        if (!reused) {
            drop(p);
            p->fd = p->t->unix_path ? open_unix(p->t->unix_path, x->err, display)
                                    : open_tcp(host, x->err, display);
            if (p->fd < 0)
                break;
        }
        http_parser hp;
        struct answer a = {.x = x};
        http_parser_init(&hp, HTTP_RESPONSE);
        hp.data = &a;
        size_t got = 0;
        why = 0;
        if (send_all(p->fd, head, head_len) < 0 || (rq->upload && send_upload(p->fd, rq) < 0))
            why = errno;
        if (!why && read_answer(p->fd, x, &a, &hp, &why, &got) == 0) {
            rc = 0;
            if (!a.complete || !http_should_keep_alive(&hp))
                drop(p);
            if (!x->decided)
                x->rs->status = hp.status_code;
            if (x->sink_failed || x->too_large)
                rc = -1;
            break;
        }
        drop(p);
        /* A kept connection the server closed meanwhile: once more on a new
         * one, when nothing of the answer came and the body can be sent
         * again. */
        if (!(reused && got == 0 && !rq->upload && (why == ECONNRESET || why == EPIPE)))
            break;
    }
    explicit_bzero(head, head_len);
    free(head);
    if (rc == 0 || x->sink_failed)
        return rc;
    if (x->too_large)
        return sbx_err_set(x->err, EFBIG, "%s %s: the answer is larger than %u MiB", rq->method,
                           rq->path, SBX_CLI_BODY_MAX >> 20);
    if (!why)
        return -1; /* no connection: open_* said why */
    if (why == ETIMEDOUT && !x->decided)
        return sbx_err_set(x->err, ETIMEDOUT, "no answer from %s: nothing for %d s", display,
                           SBX_CLI_STREAM_STALL_S);
    return sbx_err_set(x->err, EIO, "%s %s at %s: %s", rq->method, rq->path, display,
                       why == ETIMEDOUT ? "nothing received for 90 s"
                       : why == EPROTO  ? "the answer is not HTTP"
                                        : strerror(why));
}
