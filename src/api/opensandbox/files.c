/* execd's files API for one OpenSandbox sandbox, under
 * /v1/sandboxes/{id}/proxy/44772: paths as the sandbox sees them, which
 * reach its workspace (/workspace inside; a relative path is relative to
 * it), resolved by workspace/files.c inside the clone's workspace: never a
 * path of the host, never out through a symlink. */
#include "api/opensandbox/os_int.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/http_internal.h"
#include "api/mhd.h"
#include "base/parse.h"
#include "workspace/files.h"
#include "workspace/path.h"

#define EXECD "/v1/sandboxes/{id}/proxy/" OS_EXECD_PORT
#define MOUNT "/workspace"
#define META_MAX (64u << 10)    /* an upload's metadata part */
#define REPLACE_MAX (16u << 20) /* a file /files/replace rewrites */
#define WALK_DEPTH_MAX 32       /* of a search or a deep listing */
#define WALK_RESULTS_MAX 10000  /* entries one search or listing returns */

static json_t *shown(const char *rel)
{
    char buf[SBX_WS_PATH_MAX + 16];
    snprintf(buf, sizeof(buf), MOUNT "%s%s", rel[0] ? "/" : "", rel);
    return sbx_json_text(buf, strlen(buf));
}

/* 0644 as the API writes it: 644. */
static int mode_digits(unsigned m)
{
    return (int)(((m >> 9) & 7) * 1000 + ((m >> 6) & 7) * 100 + ((m >> 3) & 7) * 10 + (m & 7));
}

static json_t *info_json(const char *rel, const struct sbx_ws_stat *st)
{
    json_t *t = sbx_json_time((int64_t)st->mtime.tv_sec * 1000 + st->mtime.tv_nsec / 1000000);
    return json_pack("{s:o, s:s, s:I, s:i, s:O, s:o}", "path", shown(rel), "type",
                     sbx_ws_type_name(st->type), "size", (json_int_t)st->size, "mode",
                     mode_digits(st->mode), "created_at", t, "modified_at", t);
}

/* The sandbox's workspace for a file route (an fd the caller closes), or -1
 * with the answer given. */
static int box_ws(sbx_http_request *req, struct os_state *os, struct os_box **bp, uid_t *uid,
                  gid_t *gid)
{
    /* A paused sandbox's files are there too (its processes are what stop). */
    struct os_box *b = os_box_get(req, os, true);
    if (!b)
        return -1;
    if (!os_box_live(b) || strcmp(b->state, "Failed") == 0) {
        sbx_http_respond_error(req, SBX_HTTP_CONFLICT, "sandbox %s is %s", b->id, b->state);
        return -1;
    }
    int ws;
    sbx_err e = {0};
    uid_t u;
    gid_t g;
    if (sbx_runtime_workspace(os->api->rt, &b->clone, &ws, uid ? uid : &u, gid ? gid : &g, &e) <
        0) {
        sbx_http_respond_err(req, &e);
        return -1;
    }
    if (bp)
        *bp = b;
    return ws;
}

/* The end of a route: ws closed; 200 with out, or e's error (out dropped). */
static void answer(sbx_http_request *req, int ws, json_t *out, const sbx_err *e)
{
    close(ws);
    if (e->errnum) {
        json_decref(out);
        sbx_http_respond_err(req, e);
    } else {
        sbx_http_respond_json(req, 200, out);
    }
}

/* box_ws with the request's JSON body (an object) in *body. */
static int box_ws_json(sbx_http_request *req, struct os_state *os, uid_t *uid, gid_t *gid,
                       json_t **body)
{
    int ws = box_ws(req, os, NULL, uid, gid);
    if (ws >= 0 && !(*body = sbx_http_req_json(req, NULL))) {
        close(ws);
        return -1;
    }
    return ws;
}

static enum MHD_Result query_one(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    struct os_query_all *q = cls;
    if (key && strcmp(key, q->name) == 0 && q->n < SBX_ARRAY_LEN(q->vals))
        q->vals[q->n++] = value ? value : "";
    return MHD_YES;
}

void os_query_values(sbx_http_request *req, struct os_query_all *q)
{
    sbx_mhd.get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, query_one, q);
}

/* ---- info, delete, mkdir, mv, permissions ---- */

static void h_info(sbx_http_request *req, void *ud)
{
    int ws = box_ws(req, ud, NULL, NULL, NULL);
    if (ws < 0)
        return;
    struct os_query_all q = {.name = "path"};
    os_query_values(req, &q);
    json_t *out = json_object();
    sbx_err e = {0};
    for (size_t i = 0; i < q.n && !e.errnum; i++) {
        struct sbx_ws_path p;
        struct sbx_ws_stat st;
        if (os_path(q.vals[i], &p, &e) == 0 && sbx_ws_stat(ws, &p, true, &st, &e) == 0)
            json_object_set_new(out, q.vals[i], info_json(p.rel, &st));
    }
    if (!q.n)
        sbx_err_set(&e, EINVAL, "path is required");
    answer(req, ws, out, &e);
}

static void h_delete(sbx_http_request *req, void *ud)
{
    struct os_box *b;
    int ws = box_ws(req, ud, &b, NULL, NULL);
    if (ws < 0)
        return;
    struct os_query_all q = {.name = "path"};
    os_query_values(req, &q);
    sbx_err e = {0};
    if (!q.n)
        sbx_err_set(&e, EINVAL, "path is required");
    for (size_t i = 0; i < q.n && !e.errnum; i++) {
        struct sbx_ws_path p;
        if (os_path(q.vals[i], &p, &e) == 0) {
            api_audit(req, b->os->api, "opensandbox_file_delete", p.rel);
            sbx_ws_delete(ws, &p, &e);
        }
    }
    close(ws);
    if (e.errnum)
        sbx_http_respond_err(req, &e);
    else
        os_no_content(req);
}

/* {path: {mode, owner, group}}: POST /directories and /files/permissions. */
static void path_modes(sbx_http_request *req, void *ud, bool mkdir)
{
    uid_t uid;
    gid_t gid;
    json_t *body;
    int ws = box_ws_json(req, ud, &uid, &gid, &body);
    if (ws < 0)
        return;
    sbx_err e = {0};
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v)
    {
        struct sbx_ws_path p;
        int mode;
        if (e.errnum || os_mode_entry(k, v, mkdir, &p, &mode, &e) < 0)
            break;
        else if (mkdir)
            sbx_ws_mkdir(ws, &p, (unsigned)mode, uid, gid, &e);
        else if (mode >= 0)
            sbx_ws_chmod(ws, &p, (unsigned)mode, &e);
    }
    json_decref(body);
    close(ws);
    if (e.errnum)
        sbx_http_respond_err(req, &e);
    else
        sbx_http_respond_data(req, 200, NULL, "", 0);
}

static void h_mkdir(sbx_http_request *req, void *ud)
{
    path_modes(req, ud, true);
}

static void h_chmod(sbx_http_request *req, void *ud)
{
    path_modes(req, ud, false);
}

static void h_mv(sbx_http_request *req, void *ud)
{
    uid_t uid;
    gid_t gid;
    int ws = box_ws(req, ud, NULL, &uid, &gid);
    if (ws < 0)
        return;
    size_t len;
    const char *text = sbx_http_req_body(req, &len);
    json_t *body = json_loadb(text, len, 0, NULL);
    sbx_err e = {0};
    if (!json_is_array(body))
        sbx_err_set(&e, EINVAL, "the body must be a list of {src, dest}");
    size_t i;
    json_t *item;
    json_array_foreach(body, i, item)
    {
        struct sbx_ws_path from, to;
        if (e.errnum)
            break;
        if (os_move_entry(item, &from, &to, &e) < 0)
            break;
        sbx_ws_rename(ws, &from, &to, uid, gid, &e);
    }
    json_decref(body);
    close(ws);
    if (e.errnum)
        sbx_http_respond_err(req, &e);
    else
        sbx_http_respond_data(req, 200, NULL, "", 0);
}

/* ---- listing and search: a bounded walk ---- */

struct walk {
    int ws;
    const char *pattern; /* NULL: every entry */
    unsigned depth;      /* levels below the start, 1: its entries */
    json_t *out;
    sbx_err *err;
};

static int walk(struct walk *w, const struct sbx_ws_path *dir, unsigned level)
{
    struct sbx_ws_listing l = {0};
    if (sbx_ws_list(w->ws, dir, 0, &l, w->err) < 0)
        return -1;
    for (size_t i = 0; i < l.n && json_array_size(w->out) < WALK_RESULTS_MAX; i++) {
        struct sbx_ws_path child;
        char rel[SBX_WS_PATH_MAX + SBX_WS_NAME_MAX + 2];
        int n =
            snprintf(rel, sizeof(rel), "%s%s%s", dir->rel, dir->len ? "/" : "", l.entries[i].name);
        if (n < 0 || (size_t)n > SBX_WS_PATH_MAX ||
            sbx_ws_path_parse(rel, (size_t)n, &child, NULL) < 0)
            continue;
        if (!w->pattern || fnmatch(w->pattern, l.entries[i].name, 0) == 0)
            json_array_append_new(w->out, info_json(child.rel, &l.entries[i].st));
        if (l.entries[i].st.type == SBX_WS_DIR && level + 1 < w->depth)
            walk(w, &child, level + 1); /* an unreadable subdirectory is left out */
    }
    sbx_ws_listing_free(&l);
    return 0;
}

static void walk_route(sbx_http_request *req, void *ud, bool search)
{
    int ws = box_ws(req, ud, NULL, NULL, NULL);
    if (ws < 0)
        return;
    sbx_err e = {0};
    struct sbx_ws_path p;
    struct walk w = {.ws = ws, .out = json_array(), .err = &e, .depth = 1};
    const char *depth = sbx_http_req_query(req, "depth");
    uint64_t d = 1;
    if (search) {
        w.pattern = sbx_http_req_query(req, "pattern");
        w.depth = WALK_DEPTH_MAX;
        if (!w.pattern || !*w.pattern)
            w.pattern = "*";
    } else if (depth && *depth && sbx_parse_uint(depth, 1, WALK_DEPTH_MAX, &d, &e) == 0) {
        w.depth = (unsigned)d;
    }
    if (!e.errnum && os_path(sbx_http_req_query(req, "path"), &p, &e) == 0)
        walk(&w, &p, 0);
    answer(req, ws, w.out, &e);
}

static void h_list(sbx_http_request *req, void *ud)
{
    walk_route(req, ud, false);
}

static void h_search(sbx_http_request *req, void *ud)
{
    walk_route(req, ud, true);
}

/* ---- replace ---- */

/* The whole of a (bounded) file into *out. */
static int read_all(int ws, const struct sbx_ws_path *p, struct evbuffer *out, unsigned *mode,
                    sbx_err *err)
{
    struct sbx_ws_download dl;
    if (sbx_ws_download_open(ws, p, &dl, err) < 0)
        return -1;
    *mode = dl.st.mode;
    if (dl.st.size > REPLACE_MAX) {
        sbx_ws_download_close(&dl);
        return sbx_err_set(err, EFBIG, "%s is larger than %u MiB", p->rel, REPLACE_MAX >> 20);
    }
    char buf[65536];
    ssize_t n;
    while ((n = sbx_ws_download_read(&dl, buf, sizeof(buf), err)) > 0)
        evbuffer_add(out, buf, (size_t)n);
    sbx_ws_download_close(&dl);
    return n < 0 ? -1 : 0;
}

static void h_replace(sbx_http_request *req, void *ud)
{
    uid_t uid;
    gid_t gid;
    json_t *body;
    int ws = box_ws_json(req, ud, &uid, &gid, &body);
    if (ws < 0)
        return;
    json_t *out = json_object();
    sbx_err e = {0};
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v)
    {
        const char *old, *new;
        struct sbx_ws_path p;
        if (e.errnum || os_replace_entry(k, v, &p, &old, &new, &e) < 0)
            break;
        struct evbuffer *in = evbuffer_new(), *res = evbuffer_new();
        unsigned mode = 0644;
        long count = 0;
        if (in && res && read_all(ws, &p, in, &mode, &e) == 0) {
            size_t len = evbuffer_get_length(in), olen = strlen(old);
            const char *s = (const char *)evbuffer_pullup(in, -1);
            for (size_t i = 0; i < len;) {
                const char *hit = s ? memmem(s + i, len - i, old, olen) : NULL;
                if (!hit) {
                    evbuffer_add(res, s + i, len - i);
                    break;
                }
                evbuffer_add(res, s + i, (size_t)(hit - (s + i)));
                evbuffer_add(res, new, strlen(new));
                i = (size_t)(hit - s) + olen;
                count++;
            }
            struct sbx_ws_upload up;
            if (count && sbx_ws_upload_begin(ws, &p, uid, gid, &up, &e) == 0) {
                const char *r = (const char *)evbuffer_pullup(res, -1);
                if (sbx_ws_upload_write(&up, r ? r : "", evbuffer_get_length(res), &e) < 0)
                    sbx_ws_upload_abort(&up);
                else if (sbx_ws_upload_commit(&up, &e) == 0)
                    sbx_ws_chmod(ws, &p, mode, &e);
            }
            json_object_set_new(out, k, json_pack("{s:i}", "replacedCount", (int)count));
        }
        if (in)
            evbuffer_free(in);
        if (res)
            evbuffer_free(res);
    }
    json_decref(body);
    answer(req, ws, out, &e);
}

/* ---- download: Range, or offset and limit ---- */

static void h_download(sbx_http_request *req, void *ud)
{
    int ws = box_ws(req, ud, NULL, NULL, NULL);
    if (ws < 0)
        return;
    sbx_err e = {0};
    struct sbx_ws_path p;
    struct sbx_ws_download dl = {.fd = -1};
    if (os_path(sbx_http_req_query(req, "path"), &p, &e) < 0 ||
        sbx_ws_download_open(ws, &p, &dl, &e) < 0) {
        close(ws);
        sbx_http_respond_err(req, &e);
        return;
    }
    close(ws);
    uint64_t size = dl.st.size, from = 0, to = size ? size - 1 : 0;
    bool partial = false;
    const char *range = sbx_http_req_header(req, "Range");
    const char *off = sbx_http_req_query(req, "offset"), *lim = sbx_http_req_query(req, "limit");
    if (range) {
        unsigned long long a = 0, b = 0;
        char extra;
        if (sscanf(range, "bytes=%llu-%llu%c", &a, &b, &extra) == 2 && a <= b)
            from = a, to = b < size ? b : size - 1, partial = true;
        else if (sscanf(range, "bytes=%llu-%c", &a, &extra) == 1 && strchr(range, '-')[1] == '\0')
            from = a, partial = true;
        else if (sscanf(range, "bytes=-%llu%c", &b, &extra) == 1 && b > 0)
            from = b < size ? size - b : 0, partial = true;
        else
            from = UINT64_MAX;
        if (from == UINT64_MAX || from >= size) {
            char cr[48];
            snprintf(cr, sizeof(cr), "bytes */%llu", (unsigned long long)size);
            sbx_http_add_header(req, "Content-Range", cr);
            sbx_ws_download_close(&dl);
            sbx_http_respond_error_status(req, 416, "range_not_satisfiable",
                                          "Range '%.80s' is not within the file's %llu bytes",
                                          range, (unsigned long long)size);
            return;
        }
    } else if (off || lim) {
        uint64_t o = 0, l = UINT64_MAX;
        if ((off && sbx_parse_uint(off, 0, UINT64_MAX, &o, &e) < 0) ||
            (lim && sbx_parse_uint(lim, 1, UINT64_MAX, &l, &e) < 0)) {
            sbx_ws_download_close(&dl);
            sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "offset and limit: %s", e.msg);
            return;
        }
        from = o < size ? o : size;
        to = l < size - from ? from + l - 1 : size - 1;
    }
    uint64_t len = size == 0 || from >= size ? 0 : to - from + 1;
    if (partial) {
        char cr[80];
        snprintf(cr, sizeof(cr), "bytes %llu-%llu/%llu", (unsigned long long)from,
                 (unsigned long long)(from + len - 1), (unsigned long long)size);
        sbx_http_add_header(req, "Content-Range", cr);
    }
    sbx_http_add_header(req, "Accept-Ranges", "bytes");
    int fd = dl.fd;
    dl.fd = -1;
    sbx_http_respond_file(req, partial ? 206 : 200, "application/octet-stream", fd, from, len);
}

/* ---- upload: multipart, a metadata part then the file, streamed ---- */

struct upload {
    struct os_box *box;
    int ws;
    uid_t uid;
    gid_t gid;
    struct MHD_PostProcessor *pp;
    struct evbuffer *meta;
    bool begun, had_file;
    int mode;
    struct sbx_ws_path p;
    struct sbx_ws_upload up;
    uint64_t max;
    sbx_err e;
};

static void upload_free(struct upload *u)
{
    if (u->pp)
        sbx_mhd.destroy_post_processor(u->pp);
    sbx_ws_upload_abort(&u->up);
    if (u->meta)
        evbuffer_free(u->meta);
    if (u->ws >= 0)
        close(u->ws);
    free(u);
}

/* The metadata part is in: the file it names is begun. */
static int upload_begin(struct upload *u)
{
    evbuffer_add(u->meta, "", 1);
    int rc =
        os_upload_meta_parse((const char *)evbuffer_pullup(u->meta, -1), &u->p, &u->mode, &u->e);
    evbuffer_drain(u->meta, evbuffer_get_length(u->meta));
    if (rc == 0 && sbx_ws_upload_begin(u->ws, &u->p, u->uid, u->gid, &u->up, &u->e) < 0)
        rc = -1;
    u->begun = rc == 0;
    return rc;
}

static int upload_commit(struct upload *u)
{
    u->begun = false;
    if (sbx_ws_upload_commit(&u->up, &u->e) < 0)
        return -1;
    return u->mode >= 0 ? sbx_ws_chmod(u->ws, &u->p, (unsigned)u->mode, &u->e) : 0;
}

static enum MHD_Result upload_part(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *filename, const char *content_type,
                                   const char *transfer_encoding, const char *data, uint64_t off,
                                   size_t size)
{
    struct upload *u = cls;
    if (key && strcmp(key, "metadata") == 0) {
        if (off == 0 && u->begun && upload_commit(u) < 0)
            return MHD_NO;
        if (evbuffer_get_length(u->meta) + size > META_MAX) {
            sbx_err_set(&u->e, EINVAL, "the metadata part is over %u bytes", META_MAX);
            return MHD_NO;
        }
        evbuffer_add(u->meta, data, size);
        return MHD_YES;
    }
    if (!key || strcmp(key, "file") != 0)
        return MHD_YES; /* other parts are not ours */
    if (off == 0 && !u->begun) {
        if (!evbuffer_get_length(u->meta)) {
            sbx_err_set(&u->e, EINVAL, "the metadata part must come before the file");
            return MHD_NO;
        }
        if (upload_begin(u) < 0)
            return MHD_NO;
        u->had_file = true;
    }
    if (u->up.size + size > u->max) {
        sbx_err_set(&u->e, EFBIG, "the upload is larger than the workspace quota (%llu bytes)",
                    (unsigned long long)u->max);
        return MHD_NO;
    }
    return size && sbx_ws_upload_write(&u->up, data, size, &u->e) < 0 ? MHD_NO : MHD_YES;
}

static void upload_fail(sbx_http_request *req, struct upload *u)
{
    if (u->e.errnum)
        sbx_http_respond_err(req, &u->e);
    else
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "the body is not valid multipart");
    upload_free(u);
}

static ssize_t upload_chunk(sbx_http_request *req, const char *data, size_t len, void *ud)
{
    struct upload *u = ud;
    if (sbx_mhd.post_process(u->pp, data, len) != MHD_YES) {
        upload_fail(req, u);
        return -1;
    }
    return (ssize_t)len;
}

static void upload_end(sbx_http_request *req, void *ud)
{
    struct upload *u = ud;
    enum MHD_Result done = sbx_mhd.destroy_post_processor(u->pp);
    u->pp = NULL;
    /* An empty file part may never reach the iterator: begun here. */
    if (done == MHD_YES && !u->begun && evbuffer_get_length(u->meta) && upload_begin(u) < 0)
        done = MHD_NO;
    if (done != MHD_YES || (u->begun && upload_commit(u) < 0)) {
        upload_fail(req, u);
        return;
    }
    upload_free(u);
    sbx_http_respond_data(req, 200, NULL, "", 0);
}

static void upload_cancel(sbx_http_request *req, void *ud)
{
    upload_free(ud);
}

static void h_upload(sbx_http_request *req, void *ud)
{
    struct os_state *os = ud;
    struct upload *u = calloc(1, sizeof(*u));
    if (!u) {
        sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
        return;
    }
    u->up = (struct sbx_ws_upload){.fd = -1, .dir_fd = -1, .made_fd = -1};
    u->mode = -1;
    u->max = api_set(os->api)->workspace_quota_bytes;
    if ((u->ws = box_ws(req, os, &u->box, &u->uid, &u->gid)) < 0) {
        free(u);
        return;
    }
    if (!(u->meta = evbuffer_new()) ||
        !(u->pp = sbx_mhd.create_post_processor(req->conn, 64 * 1024, upload_part, u))) {
        upload_free(u);
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST,
                               "the body must be multipart/form-data: a metadata part, then file");
        return;
    }
    api_audit(req, os->api, "opensandbox_file_upload", u->box->id);
    sbx_http_body_sink sink = {
        .chunk = upload_chunk, .end = upload_end, .cancel = upload_cancel, .ud = u};
    sbx_http_req_stream_body(req, &sink);
}

int os_files_routes(sbx_http_server *srv, struct os_state *os, sbx_err *err)
{
    static const struct {
        const char *method, *pattern;
        sbx_http_handler fn;
        unsigned flags;
    } routes[] = {
        {"POST", EXECD "/files/upload", h_upload, SBX_HTTP_ROUTE_STREAM_BODY},
        {"GET", EXECD "/files/download", h_download, 0},
        {"GET", EXECD "/files/info", h_info, 0},
        {"DELETE", EXECD "/files", h_delete, 0},
        {"POST", EXECD "/files/mv", h_mv, 0},
        {"POST", EXECD "/files/permissions", h_chmod, 0},
        {"GET", EXECD "/files/search", h_search, 0},
        {"POST", EXECD "/files/replace", h_replace, 0},
        {"POST", EXECD "/directories", h_mkdir, 0},
        {"DELETE", EXECD "/directories", h_delete, 0},
        {"GET", EXECD "/directories/list", h_list, 0},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(routes); i++)
        if (sbx_http_route(srv, routes[i].method, routes[i].pattern, routes[i].fn, os,
                           routes[i].flags, err) < 0)
            return -1;
    return 0;
}
