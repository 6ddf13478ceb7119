/* Protocol upgrades (WebSocket): a 101 answer handed to libmicrohttpd as an
 * upgrade response; once its head is sent, libmicrohttpd gives the client's
 * socket to the caller, who moves the bytes until it closes the upgrade.
 * The server keeps a list of the open ones, so that a stopping server ends
 * them before libmicrohttpd stops (it must not stop with one open). */
#include "api/http_internal.h"

#include <stdlib.h>

struct sbx_http_upgrade {
    sbx_http_server *srv;
    sbx_http_request *req;                 /* until it ends */
    struct MHD_UpgradeResponseHandle *urh; /* NULL until the head is sent */
    sbx_http_upgrade_fn fn;
    void (*stop)(void *ud);
    void *ud;
    bool closed;
    struct sbx_http_upgrade *prev, *next;
};

static void unlink_up(struct sbx_http_upgrade *up)
{
    if (up->prev)
        up->prev->next = up->next;
    else if (up->srv->upgrades == up)
        up->srv->upgrades = up->next;
    if (up->next)
        up->next->prev = up->prev;
    up->prev = up->next = NULL;
}

static void on_upgrade(void *cls, struct MHD_Connection *conn, void *req_cls, const char *extra_in,
                       size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
    struct sbx_http_upgrade *up = cls;
    up->urh = urh;
    up->next = up->srv->upgrades;
    if (up->next)
        up->next->prev = up;
    up->srv->upgrades = up;
    if (up->req && up->req->cc && up->req->cc->relay)
        sbx_http__relay_tunnel(up->req->cc->relay); /* the 101 is out */
    up->fn(up->ud, sock, extra_in, extra_in_size, up);
}

int sbx_http_respond_upgrade(sbx_http_request *req, sbx_http_upgrade_fn fn, void (*stop)(void *ud),
                             void *ud)
{
    struct sbx_http_upgrade *up = calloc(1, sizeof(*up));
    if (!up) {
        sbx_http__answer_oom(req);
        return -1;
    }
    *up = (struct sbx_http_upgrade){.srv = req->srv, .req = req, .fn = fn, .stop = stop, .ud = ud};
    struct MHD_Response *r = sbx_mhd.create_response_for_upgrade(on_upgrade, up);
    if (!r) {
        free(up);
        sbx_http__answer_oom(req);
        return -1;
    }
    /* Freed with the response when the connection never got upgraded. */
    if (sbx_http__answer(req, MHD_HTTP_SWITCHING_PROTOCOLS, r) < 0) {
        free(up);
        return -1;
    }
    req->upgrade = up;
    return 0;
}

void sbx_http_upgrade_close(struct sbx_http_upgrade *up)
{
    if (!up || up->closed)
        return;
    up->closed = true;
    unlink_up(up);
    if (up->req)
        up->req->upgrade = NULL;
    sbx_http_server *srv = up->srv;
    sbx_mhd.upgrade_action(up->urh, MHD_UPGRADE_ACTION_CLOSE);
    free(up);
    sbx_http__kick(srv); /* libmicrohttpd closes it at its next run */
}

void sbx_http__upgrade_forget(struct sbx_http_upgrade *up)
{
    /* The request ends: an upgrade that never started is freed here; one
     * under way belongs to its caller until it closes it. */
    if (!up)
        return;
    if (!up->urh) { /* the connection ended first: fn is never called */
        up->stop(up->ud);
        free(up);
    } else
        up->req = NULL;
}

void sbx_http__upgrades_stop(sbx_http_server *srv)
{
    while (srv->upgrades) {
        struct sbx_http_upgrade *up = srv->upgrades;
        up->stop(up->ud);        /* closes it (sbx_http_upgrade_close) */
        if (srv->upgrades == up) /* it did not: closed here */
            sbx_http_upgrade_close(up);
    }
}
