/* stream --session ID: a session's events as lines, resumed with
 * Last-Event-ID after a drop so that nothing is missed. */
#include <stdio.h>
#include <string.h>

#include "cli/cmd.h"
#include "cli/format.h"
#include "cli/sse.h"

#define DEFAULT_RETRY_MS 1000
#define MAX_RETRY_MS 30000
#define MAX_ATTEMPTS 10 /* consecutive reconnections that bring nothing */
#define SUMMARY_MAX 200

struct stream {
    struct sbx_cli_sse sse;
    const struct sbx_cli_args *a;
    bool received; /* events or comments (heartbeats) came on this connection */
    int out_errno; /* writing to stdout failed with this */
};

static int on_event(void *ud, const struct sbx_cli_sse_event *ev)
{
    struct stream *s = ud;
    if (s->a->json) {
        /* One event per line: the body as JSON, re-dumped when it spans lines. */
        json_t *j = json_loadb(ev->data, ev->data_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        if (j) {
            json_dumpf(j, stdout, JSON_COMPACT | JSON_ENCODE_ANY);
            json_decref(j);
        } else {
            for (size_t i = 0; i < ev->data_len; i++)
                putchar(ev->data[i] == '\n' ? ' ' : ev->data[i]);
        }
        putchar('\n');
    } else {
        cleanup_free char *line =
            sbx_cli_event_line(ev->id, ev->type, ev->data, ev->data_len, SUMMARY_MAX);
        if (line)
            puts(line);
    }
    if (fflush(stdout) == 0 && !ferror(stdout))
        return 0;
    s->out_errno = errno ? errno : EIO;
    return -1;
}

static int feed(void *ud, const char *buf, size_t len, sbx_err *err)
{
    struct stream *s = ud;
    uint64_t before = s->sse.events + s->sse.comments;
    int rc = sbx_cli_sse_feed(&s->sse, buf, len, err);
    /* Progress is a whole event or a heartbeat, not bytes: a server that
     * answers junk and hangs up is not reconnected to forever. */
    s->received |= s->sse.events + s->sse.comments != before;
    if (rc < 0) {
        if (s->out_errno) /* on_event could not write */
            sbx_err_set(err, s->out_errno, "stdout: %s", strerror(s->out_errno));
        return -1;
    }
    return 0;
}

static bool transient(long status)
{
    return status == 502 || status == 503 || status == 504;
}

int sbx_cli_cmd_stream(struct sbx_cli_client *c, const struct sbx_cli_args *a)
{
    struct stream s = {.a = a};
    sbx_cli_sse_init(&s.sse, on_event, &s);
    if (a->last_event_id) {
        snprintf(s.sse.last_id, sizeof(s.sse.last_id), "%s", a->last_event_id);
        sbx_cli_sse_reset(&s.sse);
    }
    const char *query[] = {"sessionID", a->session, NULL};
    bool connected = false; /* once: a daemon that never answered is not reconnected to */
    int attempts = 0, rc = 1;
    for (;;) {
        struct sbx_cli_request rq = {.method = "GET",
                                     .path = "/runtime/stream",
                                     .query = query,
                                     .event_stream = true,
                                     .require_type = "text/event-stream",
                                     .last_event_id = s.sse.last_id[0] ? s.sse.last_id : NULL,
                                     .sink = feed,
                                     .sink_ud = &s};
        struct sbx_cli_response rs;
        sbx_err e = {0};
        s.received = false;
        int sent = sbx_cli_send(c, &rq, &rs, &e);
        /* A 2xx came, even when the stream broke afterwards. */
        bool answered = rs.status >= 200 && rs.status < 300;
        connected |= answered;
        if (sent == 0 && rs.status == 204) { /* the server says: no more */
            rc = 0;
        } else if (sent == 0 && rs.wrong_type) {
            fprintf(stderr,
                    "sandboxctl: GET /runtime/stream at %s: the answer is not an event "
                    "stream\n",
                    sbx_cli_client_display(c));
            rc = 1;
        } else if (sent < 0 && s.out_errno) {
            /* Our reader left (the usual end of `stream | head`), or stdout broke. */
            rc = e.errnum == EPIPE ? 0 : sbx_cli_fail(&e);
        } else if (sent < 0 && (e.errnum == EMSGSIZE || e.errnum == ENOMEM)) {
            rc = sbx_cli_fail(&e);
        } else if (!connected || (sent == 0 && !answered && !transient(rs.status))) {
            rc = sent < 0 ? sbx_cli_fail(&e) : sbx_cli_fail_http(&rs);
        } else {
            attempts = s.received ? 0 : attempts + 1;
            if (attempts >= MAX_ATTEMPTS) {
                fprintf(stderr, "sandboxctl: stream: giving up after %d attempts to resume: %s\n",
                        attempts, sent < 0 ? e.msg : "the stream ends at once");
                rc = 1;
            } else {
                sbx_cli_response_clear(&rs);
                long delay = s.sse.retry_ms >= 0 ? s.sse.retry_ms : DEFAULT_RETRY_MS;
                for (int i = 1; i < attempts && delay < MAX_RETRY_MS; i++)
                    delay *= 2;
                sbx_cli_sleep_ms(delay > MAX_RETRY_MS ? MAX_RETRY_MS : delay);
                sbx_cli_sse_reset(&s.sse);
                continue;
            }
        }
        sbx_cli_response_clear(&rs);
        break;
    }
    sbx_cli_sse_free(&s.sse);
    return rc;
}
