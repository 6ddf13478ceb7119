#include "cli/sse.h"

#include <string.h>

void sbx_cli_sse_init(struct sbx_cli_sse *p, sbx_cli_sse_fn on_event, void *ud)
{
    *p = (struct sbx_cli_sse){.on_event = on_event, .ud = ud, .retry_ms = -1};
}

void sbx_cli_sse_free(struct sbx_cli_sse *p)
{
    free(p->line.p);
    free(p->data.p);
    free(p->type.p);
    p->line = p->data = p->type = (struct sbx_cli_sse_buf){0};
}

void sbx_cli_sse_reset(struct sbx_cli_sse *p)
{
    p->line.len = p->data.len = p->type.len = 0;
    memcpy(p->id_buf, p->last_id, sizeof(p->id_buf));
    p->cr = false;
    p->started = false;
}

static int buf_add(struct sbx_cli_sse_buf *b, const char *s, size_t n, sbx_err *err)
{
    if (b->len + n + 1 > SBX_CLI_SSE_MAX_EVENT)
        return sbx_err_set(err, EMSGSIZE, "event stream: an event is larger than %u bytes",
                           SBX_CLI_SSE_MAX_EVENT);
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q)
            return sbx_err_set(err, ENOMEM, "event stream buffer");
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

static int dispatch(struct sbx_cli_sse *p, sbx_err *err)
{
    bool have = p->data.len > 0;
    size_t dlen = p->data.len;
    if (have) {
        dlen--; /* the '\n' every data line appended */
        p->data.p[dlen] = '\0';
    }
    memcpy(p->last_id, p->id_buf, sizeof(p->last_id));
    const char *type = p->type.len ? p->type.p : "message";
    int rc = 0;
    if (have) {
        struct sbx_cli_sse_event ev = {p->last_id, type, p->data.p, dlen};
        p->events++;
        if (p->on_event(p->ud, &ev) < 0)
            rc = sbx_err_set(err, ECANCELED, "event stream: stopped");
    }
    p->data.len = 0;
    p->type.len = 0;
    return rc;
}

static bool all_digits(const char *s, size_t n)
{
    if (n == 0 || n > 9) /* more than 9 digits: no sane delay, and no overflow */
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

static int field(struct sbx_cli_sse *p, const char *line, size_t len, sbx_err *err)
{
    if (len == 0)
        return dispatch(p, err);
    if (line[0] == ':') {
        p->comments++;
        return 0;
    }
    const char *colon = memchr(line, ':', len);
    size_t nlen = colon ? (size_t)(colon - line) : len;
    const char *v = colon ? colon + 1 : line + len;
    size_t vlen = (size_t)(line + len - v);
    if (vlen && *v == ' ') {
        v++;
        vlen--;
    }
    if (nlen == 4 && memcmp(line, "data", 4) == 0) {
        if (buf_add(&p->data, v, vlen, err) < 0 || buf_add(&p->data, "\n", 1, err) < 0)
            return -1;
    } else if (nlen == 5 && memcmp(line, "event", 5) == 0) {
        p->type.len = 0;
        if (buf_add(&p->type, v, vlen, err) < 0)
            return -1;
    } else if (nlen == 2 && memcmp(line, "id", 2) == 0) {
        if (!memchr(v, '\0', vlen) && vlen < sizeof(p->id_buf)) {
            memcpy(p->id_buf, v, vlen);
            p->id_buf[vlen] = '\0';
        }
    } else if (nlen == 5 && memcmp(line, "retry", 5) == 0) {
        if (all_digits(v, vlen)) {
            long ms = 0;
            for (size_t i = 0; i < vlen; i++)
                ms = ms * 10 + (v[i] - '0');
            p->retry_ms = ms;
        }
    }
    /* any other field is ignored */
    return 0;
}

int sbx_cli_sse_feed(struct sbx_cli_sse *p, const char *buf, size_t len, sbx_err *err)
{
    size_t i = 0;
    if (!p->started && len) {
        /* The BOM may itself be split across chunks: hold back a prefix of it. */
        static const char bom[] = "\xef\xbb\xbf";
        size_t have = p->line.len;
        while (i < len && have + i < 3 && buf[i] == bom[have + i])
            i++;
        if (have + i < 3 && i == len) {
            if (buf_add(&p->line, buf, len, err) < 0)
                return -1;
            return 0;
        }
        p->started = true;
        if (have + i == 3) {
            p->line.len = 0; /* the whole BOM: drop it */
        } else {
            i = 0; /* not a BOM: the held bytes are text */
        }
    }
    while (i < len) {
        char c = buf[i];
        if (p->cr && c == '\n') { /* the LF of a CRLF split from its CR */
            p->cr = false;
            i++;
            continue;
        }
        p->cr = false;
        const char *end = memchr(buf + i, '\n', len - i);
        const char *cr = memchr(buf + i, '\r', end ? (size_t)(end - (buf + i)) : len - i);
        if (cr)
            end = cr;
        if (!end)
            return buf_add(&p->line, buf + i, len - i, err);
        size_t n = (size_t)(end - (buf + i));
        int rc;
        if (p->line.len) {
            if (buf_add(&p->line, buf + i, n, err) < 0)
                return -1;
            rc = field(p, p->line.p, p->line.len, err);
            p->line.len = 0;
        } else {
            rc = field(p, buf + i, n, err);
        }
        if (rc < 0)
            return -1;
        i += n + 1;
        if (*end == '\r')
            p->cr = true;
    }
    return 0;
}
