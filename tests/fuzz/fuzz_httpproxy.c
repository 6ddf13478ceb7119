/* libFuzzer target: the HTTP proxy's request-head parser and rewriter.
 * Beyond "no crash": consumed never exceeds the input; a rejection carries
 * a status; an accepted absolute-form head is rewritten into exactly one
 * well-formed origin-form head that http_parser itself accepts whole (so no
 * input can smuggle a second request or a header past our filter), with
 * no hop-by-hop or Proxy-* header left and "Connection: close" last. */
#include <assert.h>
#include <http_parser.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "net/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char out[SBX_HTTP_OUT_MAX];

struct recheck {
    int fields;
    bool complete;
    bool in_field;
    char field[64];
    size_t field_len;
};

static int re_field(http_parser *p, const char *at, size_t len)
{
    struct recheck *r = p->data;
    if (!r->in_field) {
        r->fields++;
        r->field_len = 0;
        r->in_field = true;
    }
    size_t n =
        len < sizeof(r->field) - 1 - r->field_len ? len : sizeof(r->field) - 1 - r->field_len;
    memcpy(r->field + r->field_len, at, n);
    r->field_len += n;
    r->field[r->field_len] = 0;
    return 0;
}

static int re_value(http_parser *p, const char *at, size_t len)
{
    struct recheck *r = p->data;
    if (r->in_field) {
        r->in_field = false;
        assert(strncasecmp(r->field, "proxy-", 6) != 0);
        assert(strcasecmp(r->field, "keep-alive") != 0);
        assert(strcasecmp(r->field, "upgrade") != 0);
        assert(strcasecmp(r->field, "te") != 0);
    }
    return 0;
}

static int re_complete(http_parser *p)
{
    struct recheck *r = p->data;
    r->complete = true;
    return 0;
}

static void recheck(const char *head, size_t len)
{
    struct recheck r = {0};
    http_parser p;
    http_parser_init(&p, HTTP_REQUEST);
    p.data = &r;
    http_parser_settings s;
    http_parser_settings_init(&s);
    s.on_header_field = re_field;
    s.on_header_value = re_value;
    s.on_headers_complete = re_complete;
    size_t n = http_parser_execute(&p, &s, head, len);
    assert(HTTP_PARSER_ERRNO(&p) == HPE_OK);
    assert(n == len);
    assert(r.complete);
    assert(r.fields >= 2); /* Host and Connection at least */
    assert(p.method != HTTP_CONNECT);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sbx_http_req req;
    int r = sbx_http_parse_head(data, size, &req, out, sizeof(out));
    assert(r >= SBX_PARSE_BAD && r <= (int)size);
    if (r == SBX_PARSE_BAD) {
        assert(req.status == 400 || req.status == 431);
        assert(req.why != NULL);
        return 0;
    }
    if (r == SBX_PARSE_MORE) {
        assert(size < SBX_HTTP_HEAD_MAX);
        return 0;
    }
    assert(req.host[0] != 0);
    assert(req.port != 0);
    /* the same head alone gives the same answer */
    struct sbx_http_req again;
    static char out2[SBX_HTTP_OUT_MAX];
    assert(sbx_http_parse_head(data, (size_t)r, &again, out2, sizeof(out2)) == r);
    if (req.connect)
        return 0;
    assert(req.out_len > 4 && req.out_len <= sizeof(out));
    assert(memcmp(out + req.out_len - 4, "\r\n\r\n", 4) == 0);
    static const char tail[] = "\r\nConnection: close\r\n\r\n";
    assert(memcmp(out + req.out_len - (sizeof(tail) - 1), tail, sizeof(tail) - 1) == 0);
    /* one head: the first empty line is its end */
    char *end = memmem(out, req.out_len, "\r\n\r\n", 4);
    assert(end == out + req.out_len - 4);
    assert(memchr(out, 0, req.out_len) == NULL);
    recheck(out, req.out_len);
    return 0;
}
