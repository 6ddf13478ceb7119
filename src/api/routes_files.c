#include "api/routes_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/parse.h"
#include "workspace/files.h"
#include "workspace/path.h"

/* ---- workspace files: /runtime/files ---- */

/* What a file route works on: the clone's workspace (an fd the route closes)
 * with its owner, and the parsed ?path=. */
struct file_target {
    int ws;
    uid_t uid;
    gid_t gid;
    struct sbx_ws_path p;
};

/* A file request parked while its clone's first workspace image is being
 * formatted (off the loop): handled again once it is. An upload's body is
 * paused meanwhile (its sink takes nothing yet). */
struct ws_wait {
    sbx_http_request *req;
    struct sbx_api *api;
    sbx_http_handler fn;
    bool upload;
    bool ended; /* the upload's (empty) body is all in already */
};

static void put_ready(struct ws_wait *w);

static void ws_ready(void *ud, const sbx_err *err)
{
    struct ws_wait *w = ud;
    if (err)
        sbx_http_respond_err(w->req, err);
    else if (w->upload)
        put_ready(w);
    else
        w->fn(w->req, w->api); /* the workspace is had at once now */
    free(w);
}

static void ws_cancel(sbx_http_request *req, void *ud)
{
    struct ws_wait *w = ud;
    sbx_runtime_workspace_unwait(w->api->rt, w);
    free(w);
}

static ssize_t wait_chunk(sbx_http_request *req, const char *data, size_t len, void *ud)
{
    return 0; /* paused until the workspace is ready */
}

static void wait_end(sbx_http_request *req, void *ud)
{
    struct ws_wait *w = ud;
    w->ended = true;
    sbx_http_req_defer(req, NULL, NULL);
}

/* 1 when c's workspace can be had now; 0 when the request is parked until it
 * can (fn is called for it again then), or answered (-1). */
static int ws_wait(sbx_http_request *req, struct sbx_api *api, const struct sbx_clone *c,
                   sbx_http_handler fn)
{
    sbx_err e = {0};
    struct ws_wait *w = calloc(1, sizeof(*w));
    if (!w) {
        sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
        return -1;
    }
    *w = (struct ws_wait){.req = req, .api = api, .fn = fn, .upload = fn == h_file_put};
    int rc = sbx_runtime_workspace_when_ready(api->rt, c, ws_ready, w, &e);
    if (rc == 0 && w->upload) {
        sbx_http_body_sink sink = {
            .chunk = wait_chunk, .end = wait_end, .cancel = ws_cancel, .ud = w};
        sbx_http_req_stream_body(req, &sink);
        return 0;
    }
    if (rc == 0) {
        sbx_http_req_defer(req, ws_cancel, w);
        return 0;
    }
    free(w);
    if (rc < 0)
        sbx_http_respond_err(req, &e);
    return rc;
}

/* Fills t (1); or parks the request until the workspace is ready, fn then
 * called for it again, or answers it (both <= 0). */
static int file_target(sbx_http_request *req, struct sbx_api *api, struct file_target *t,
                       sbx_http_handler fn)
{
    t->ws = -1;
    struct sbx_clone c;
    sbx_err e = {0};
    const char *path = sbx_http_req_query(req, "path");
    if (api_request_clone(req, api, NULL, &c, &e) < 0) {
        sbx_http_respond_err(req, &e);
        return -1;
    }
    if (!path) {
        sbx_http_respond_error(req, SBX_HTTP_BAD_REQUEST, "the path query parameter is required");
        return -1;
    }
    if (sbx_ws_path_parse(path, strlen(path), &t->p, &e) < 0) {
        sbx_http_respond_err(req, &e);
        return -1;
    }
    int rc = ws_wait(req, api, &c, fn);
    if (rc <= 0)
        return rc;
    if (sbx_runtime_workspace(api->rt, &c, &t->ws, &t->uid, &t->gid, &e) < 0) {
        sbx_http_respond_err(req, &e);
        return -1;
    }
    return 1;
}

void h_file_get(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    struct file_target t;
    if (file_target(req, api, &t, h_file_get) <= 0)
        return;
    sbx_err e = {0};
    struct sbx_ws_stat st;
    if (sbx_ws_stat(t.ws, &t.p, true, &st, &e) < 0) {
        sbx_http_respond_err(req, &e);
    } else if (st.type == SBX_WS_DIR) {
        struct sbx_ws_listing l = {0};
        if (sbx_ws_list(t.ws, &t.p, 0, &l, &e) < 0) {
            sbx_http_respond_err(req, &e);
        } else {
            json_t *arr = json_array();
            for (size_t i = 0; i < l.n; i++)
                json_array_append_new(
                    arr, json_pack("{s:o, s:s, s:I, s:i, s:o}", "name",
                                   sbx_json_text(l.entries[i].name, strlen(l.entries[i].name)),
                                   "type", sbx_ws_type_name(l.entries[i].st.type), "size",
                                   (json_int_t)l.entries[i].st.size, "mode",
                                   (int)l.entries[i].st.mode, "mtime",
                                   sbx_json_time((int64_t)l.entries[i].st.mtime.tv_sec * 1000 +
                                                 l.entries[i].st.mtime.tv_nsec / 1000000)));
            sbx_http_respond_json(req, 200,
                                  json_pack("{s:o, s:o, s:b}", "path",
                                            sbx_json_text(t.p.rel, strlen(t.p.rel)), "entries", arr,
                                            "truncated", l.truncated));
            sbx_ws_listing_free(&l);
        }
    } else {
        struct sbx_ws_download dl;
        if (sbx_ws_download_open(t.ws, &t.p, &dl, &e) < 0) {
            sbx_http_respond_err(req, &e);
        } else {
            int fd = dl.fd;
            dl.fd = -1;
            sbx_http_respond_file(req, 200, "application/octet-stream", fd, 0, dl.st.size);
        }
    }
    close(t.ws);
}

struct upload {
    struct sbx_ws_upload up;
    uint64_t max;
    sbx_err e;
};

static ssize_t upload_chunk(sbx_http_request *req, const char *data, size_t len, void *ud)
{
    struct upload *u = ud;
    if (u->up.size + len > u->max) {
        sbx_ws_upload_abort(&u->up);
        sbx_http_respond_error(req, SBX_HTTP_TOO_LARGE,
                               "the upload is larger than the workspace quota (%llu bytes)",
                               (unsigned long long)u->max);
        free(u); /* neither end nor cancel follows a refused body */
        return -1;
    }
    if (sbx_ws_upload_write(&u->up, data, len, &u->e) < 0) {
        sbx_ws_upload_abort(&u->up);
        sbx_http_respond_err(req, &u->e);
        free(u); /* neither end nor cancel follows a refused body */
        return -1;
    }
    return (ssize_t)len;
}

static void upload_end(sbx_http_request *req, void *ud)
{
    struct upload *u = ud;
    {
        uint64_t size = u->up.size;
        if (sbx_ws_upload_commit(&u->up, &u->e) < 0)
            sbx_http_respond_err(req, &u->e);
        else
            sbx_http_respond_json(req, 201,
                                  json_pack("{s:b, s:I}", "ok", 1, "size", (json_int_t)size));
    }
    free(u);
}

static void upload_cancel(sbx_http_request *req, void *ud)
{
    struct upload *u = ud;
    sbx_ws_upload_abort(&u->up);
    free(u);
}

/* The upload begun (or NULL: answered, or parked for its workspace). */
static struct upload *put_begin(sbx_http_request *req, struct sbx_api *api)
{
    struct file_target t;
    if (file_target(req, api, &t, h_file_put) <= 0)
        return NULL;
    /* A declared size over the quota is refused before a byte is read. */
    const char *cl = sbx_http_req_header(req, "Content-Length");
    uint64_t declared;
    if (cl && sbx_parse_uint(cl, 0, UINT64_MAX, &declared, NULL) == 0 &&
        declared > api_set(api)->workspace_quota_bytes) {
        close(t.ws);
        sbx_http_respond_error(req, SBX_HTTP_TOO_LARGE,
                               "the upload is larger than the workspace quota (%llu bytes)",
                               (unsigned long long)api_set(api)->workspace_quota_bytes);
        return NULL;
    }
    struct upload *u = calloc(1, sizeof(*u));
    if (!u) {
        close(t.ws);
        sbx_http_respond_error(req, SBX_HTTP_INTERNAL, "out of memory");
        return NULL;
    }
    api_audit(req, api, "file_put", t.p.rel);
    u->max = api_set(api)->workspace_quota_bytes;
    if (sbx_ws_upload_begin(t.ws, &t.p, t.uid, t.gid, &u->up, &u->e) < 0) {
        close(t.ws);
        sbx_http_respond_err(req, &u->e);
        free(u);
        return NULL;
    }
    close(t.ws);
    sbx_http_body_sink sink = {
        .chunk = upload_chunk, .end = upload_end, .cancel = upload_cancel, .ud = u};
    sbx_http_req_stream_body(req, &sink);
    return u;
}

void h_file_put(sbx_http_request *req, void *ud)
{
    (void)put_begin(req, ud);
}

/* The parked upload's workspace is ready: begun now, its body let in (or
 * ended, when all of it was in already). */
static void put_ready(struct ws_wait *w)
{
    struct upload *u = put_begin(w->req, w->api);
    if (u && w->ended)
        upload_end(w->req, u);
    else if (u)
        sbx_http_req_resume_body(w->req);
}

void h_file_delete(sbx_http_request *req, void *ud)
{
    struct sbx_api *api = ud;
    struct file_target t;
    if (file_target(req, api, &t, h_file_delete) <= 0)
        return;
    sbx_err e = {0};
    api_audit(req, api, "file_delete", t.p.rel);
    if (sbx_ws_delete(t.ws, &t.p, &e) < 0)
        sbx_http_respond_err(req, &e);
    else
        sbx_http_respond_json(req, 200, json_pack("{s:b}", "ok", 1));
    close(t.ws);
}
