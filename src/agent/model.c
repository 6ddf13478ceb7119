/* The model loop: chat completions streamed over HTTP by libcurl's multi
 * interface, driven by the daemon's libevent loop (curl_multi_socket_action
 * from socket and timer events: nothing here waits). The answer's text goes
 * out as text_delta events as it comes; its tool calls run (agent.c) and the
 * model is asked again, until it stops or a budget ends. 429, 5xx and a
 * failed connection are retried with backoff (Retry-After honoured) within
 * the turn's time budget. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "agent/agent_int.h"
#include "base/log.h"
#include "base/time.h"

/* ---- libcurl on the loop ---- */

static void check_done(struct sbx_agent *a);

static void on_socket_event(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_agent *a = arg;
    int flags = (what & EV_READ ? CURL_CSELECT_IN : 0) | (what & EV_WRITE ? CURL_CSELECT_OUT : 0);
    int running;
    curl_multi_socket_action(a->multi, fd, flags, &running);
    check_done(a);
}

static void on_curl_timer(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_agent *a = arg;
    int running;
    curl_multi_socket_action(a->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(a);
}

static int socket_cb(CURL *e, curl_socket_t s, int what, void *userp, void *socketp)
{
    struct sbx_agent *a = userp;
    struct event *ev = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (ev)
            event_free(ev);
        curl_multi_assign(a->multi, s, NULL);
        return 0;
    }
    short kind = (short)((what & CURL_POLL_IN ? EV_READ : 0) |
                         (what & CURL_POLL_OUT ? EV_WRITE : 0) | EV_PERSIST);
    if (ev) {
        event_del(ev);
        event_assign(ev, a->o.base, s, kind, on_socket_event, a);
    } else {
        ev = event_new(a->o.base, s, kind, on_socket_event, a);
        if (!ev)
            return -1;
        curl_multi_assign(a->multi, s, ev);
    }
    return event_add(ev, NULL);
}

static int timer_cb(CURLM *m, long ms, void *userp)
{
    struct sbx_agent *a = userp;
    if (ms < 0)
        return evtimer_del(a->curl_timer);
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    return evtimer_add(a->curl_timer, &tv);
}

/* The multi handle, made at the first model request: libcurl is loaded then
 * (base/curl_dl.h), so a daemon whose agent is never asked maps none of its
 * libraries. */
static int model_multi(struct sbx_agent *a, sbx_err *err)
{
    if (a->multi)
        return 0;
    if (sbx_curl_load(err) < 0)
        return -1;
    if (!(a->multi = curl_multi_init()) ||
        !(a->curl_timer = evtimer_new(a->o.base, on_curl_timer, a))) {
        ag_model_fini(a);
        return sbx_err_set(err, ENOMEM, "the model's HTTP client");
    }
    curl_multi_setopt(a->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(a->multi, CURLMOPT_SOCKETDATA, a);
    curl_multi_setopt(a->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(a->multi, CURLMOPT_TIMERDATA, a);
    return 0;
}

void ag_model_fini(struct sbx_agent *a)
{
    if (a->multi)
        curl_multi_cleanup(a->multi);
    if (a->curl_timer)
        event_free(a->curl_timer);
    a->multi = NULL;
    a->curl_timer = NULL;
}

static void http_free(struct sbx_agent *a, struct ag_http *h)
{
    if (!h)
        return;
    if (h->easy) {
        curl_multi_remove_handle(a->multi, h->easy);
        curl_easy_cleanup(h->easy);
    }
    curl_slist_free_all(h->headers);
    free(h->body);
    sbx_sse_free(&h->sse);
    sbx_chat_stream_free(&h->chat);
    free(h);
}

void ag_model_abort(struct ag_turn *t)
{
    http_free(t->a, t->http);
    t->http = NULL;
    if (t->ev_retry)
        event_del(t->ev_retry);
}

/* ---- one model call ---- */

static void on_text(void *ud, const char *text, size_t len)
{
    struct ag_http *h = ud;
    ag_emit(h->turn, "text_delta",
            json_pack("{s:s, s:o}", "turnId", h->turn->id, "text", sbx_json_text(text, len)));
}

static int on_event(void *ud, const char *data, size_t len)
{
    struct ag_http *h = ud;
    struct ag_turn *t = h->turn;
    /* The model at work keeps the session from idling out. */
    sbx_runtime_session_touch(t->a->o.rt, &t->clone, t->session);
    if (sbx_chat_stream_data(&h->chat, data, len, on_text, h) < 0) {
        h->bad = true;
        return -1;
    }
    return 0;
}

static size_t on_body(char *buf, size_t size, size_t n, void *ud)
{
    struct ag_http *h = ud;
    size_t len = size * n;
    if (!h->status)
        curl_easy_getinfo(h->easy, CURLINFO_RESPONSE_CODE, &h->status);
    if (h->status != 200) { /* keep the start of an error's body for the message */
        size_t room = sizeof(h->errbody) - 1 - h->errbody_len;
        size_t k = len < room ? len : room;
        memcpy(h->errbody + h->errbody_len, buf, k);
        h->errbody_len += k;
        h->errbody[h->errbody_len] = '\0';
        return len;
    }
    if (sbx_sse_feed(&h->sse, buf, len, on_event, h) < 0) {
        if (!h->bad) {
            h->bad = true;
            snprintf(h->chat.error, sizeof(h->chat.error),
                     "model sent an event larger than %u bytes", SBX_SSE_EVENT_MAX);
        }
        return CURL_WRITEFUNC_ERROR;
    }
    return len;
}

static size_t on_header(char *buf, size_t size, size_t n, void *ud)
{
    struct ag_http *h = ud;
    size_t len = size * n;
    static const char name[] = "retry-after:";
    if (len > sizeof(name) - 1 && strncasecmp(buf, name, sizeof(name) - 1) == 0) {
        char v[64];
        size_t k =
            len - (sizeof(name) - 1) < sizeof(v) - 1 ? len - (sizeof(name) - 1) : sizeof(v) - 1;
        memcpy(v, buf + sizeof(name) - 1, k);
        v[k] = '\0';
        char *end;
        double s = strtod(v, &end);
        while (*end == ' ' || *end == '\t')
            end++;
        if (end != v && (*end == '\r' || *end == '\n' || !*end) && isfinite(s) && s >= 0) {
            h->retry_after_s = s;
        } else { /* an HTTP date */
            time_t at = curl_getdate(v, NULL), now = time(NULL);
            if (at != -1)
                h->retry_after_s = at > now ? (double)(at - now) : 0;
        }
    }
    return len;
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    ag_model_step(arg);
}

/* The request's body: the conversation and the tools. */
static char *request_body(struct ag_turn *t)
{
    json_t *b = json_pack("{s:s, s:O, s:o, s:b, s:{s:b}}", "model", t->m.name, "messages",
                          t->conv->messages, "tools", ag_tools_for_model(t), "stream", 1,
                          "stream_options", "include_usage", 1);
    char *s = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    return s;
}

static int request_start(struct ag_turn *t, sbx_err *err)
{
    struct sbx_agent *a = t->a;
    struct ag_http *h = calloc(1, sizeof(*h));
    if (!h)
        return sbx_err_set(err, ENOMEM, "model request");
    if (model_multi(a, err) < 0) {
        free(h);
        return -1;
    }
    h->turn = t;
    h->retry_after_s = -1;
    char url[2048], auth[1200];
    size_t bl = strlen(t->m.base_url);
    snprintf(url, sizeof(url), "%.*s/chat/completions",
             (int)(bl && t->m.base_url[bl - 1] == '/' ? bl - 1 : bl), t->m.base_url);
    h->body = request_body(t);
    h->easy = curl_easy_init();
    struct curl_slist *l = curl_slist_append(NULL, "Content-Type: application/json");
    if (l)
        h->headers = l;
    if (l && (l = curl_slist_append(h->headers, "Accept: text/event-stream")))
        h->headers = l;
    /* No "Expect: 100-continue" round trip before the body. */
    if (l && (l = curl_slist_append(h->headers, "Expect:")))
        h->headers = l;
    if (l && t->m.key && *t->m.key) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", t->m.key);
        if ((l = curl_slist_append(h->headers, auth)))
            h->headers = l;
        explicit_bzero(auth, sizeof(auth));
    }
    if (!h->body || !h->easy || !l) {
        http_free(a, h);
        return sbx_err_set(err, ENOMEM, "model request");
    }
    CURL *e = h->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h->headers);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, h->body);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, h);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, h);
    curl_easy_setopt(e, CURLOPT_PRIVATE, h);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, h->curl_error);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 30000L);
    /* No overall timeout here: the turn's time budget (its timer) ends it. */

    /* A stream silent this long is cut (a slow one is fine). */
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)a->o.stall_timeout_s);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "sandboxd-agent");
    /* The daemon's own proxy variables do not apply to the model. */
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
    if (curl_multi_add_handle(a->multi, e) != CURLM_OK) {
        http_free(a, h);
        return sbx_err_set(err, EIO, "model request not started");
    }
    t->http = h;
    return 0;
}

void ag_model_step(struct ag_turn *t)
{
    if (t->steps >= t->a->o.max_steps) {
        char msg[128];
        snprintf(msg, sizeof(msg), "the model was called %u times, the most one turn may",
                 t->steps);
        ag_turn_end(t, "budget", "step_budget", msg);
        return;
    }
    sbx_err e = {0};
    sbx_runtime_session_touch(t->a->o.rt, &t->clone, t->session);
    if (request_start(t, &e) < 0) {
        char msg[600];
        ag_turn_end(t, "error", "model_unavailable", sbx_err_format(&e, msg, sizeof(msg)));
    }
}

/* Again later, when the attempts and the time budget allow: true when a
 * retry is planned. */
static bool retry_later(struct ag_turn *t, double after_s)
{
    struct sbx_agent *a = t->a;
    if (t->attempts >= a->o.max_retries)
        return false;
    double backoff =
        after_s >= 0 ? after_s : 0.25 * (double)(1u << (t->attempts < 6 ? t->attempts : 6));
    if (sbx_mono_ms() + (int64_t)(backoff * 1000) >= t->deadline)
        return false;
    if (!t->ev_retry && !(t->ev_retry = evtimer_new(a->o.base, on_retry, t)))
        return false;
    struct timeval tv = {.tv_sec = (time_t)backoff,
                         .tv_usec = (suseconds_t)((backoff - floor(backoff)) * 1e6)};
    if (event_add(t->ev_retry, &tv) < 0)
        return false;
    t->attempts++;
    ag_emit(t, "model_retry",
            json_pack("{s:s, s:i, s:f}", "turnId", t->id, "attempt", t->attempts, "afterSeconds",
                      backoff));
    return true;
}

/* The model's answer came whole: its tool calls run, or the turn ends. */
static void answered(struct ag_turn *t, struct ag_http *h)
{
    struct sbx_chat_stream *s = &h->chat;
    t->steps++;
    t->attempts = 0;
    if (s->have_usage) {
        t->prompt_tokens += s->prompt_tokens;
        t->completion_tokens += s->completion_tokens;
        t->total_tokens += s->total_tokens;
    }
    json_t *calls = json_array();
    for (size_t i = 0; i < s->n_tools; i++) {
        struct sbx_chat_tool *k = &s->tools[i];
        if (!k->name && !k->args && !k->id)
            continue; /* an index the model skipped */
        char made[32];
        snprintf(made, sizeof(made), "call_%u_%zu", t->steps, i);
        json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id",
                                               k->id ? k->id : made, "type", "function", "function",
                                               "name", k->name ? k->name : "", "arguments",
                                               k->args ? k->args : ""));
    }
    json_t *msg = json_pack("{s:s, s:o}", "role", "assistant", "content",
                            s->text ? sbx_json_text(s->text, s->text_len) : json_null());
    if (json_array_size(calls))
        json_object_set(msg, "tool_calls", calls);
    ag_conv_append(t, msg);
    char finish[32];
    snprintf(finish, sizeof(finish), "%s", s->finish[0] ? s->finish : "stop");
    http_free(t->a, h);
    t->http = NULL;
    uint64_t max = t->a->o.max_tokens;
    if (max && (uint64_t)t->total_tokens >= max) {
        char m[128];
        snprintf(m, sizeof(m), "the turn used %lld tokens, its budget is %llu",
                 (long long)t->total_tokens, (unsigned long long)max);
        json_decref(calls);
        ag_turn_end(t, "budget", "token_budget", m);
        return;
    }
    if (json_array_size(calls) == 0) {
        json_decref(calls);
        ag_turn_end(t, finish, NULL, NULL);
        return;
    }
    sbx_err e = {0};
    int rc = ag_turn_set_calls(t, calls, &e);
    json_decref(calls);
    if (rc < 0) {
        char m[600];
        ag_turn_end(t, "error", "internal", sbx_err_format(&e, m, sizeof(m)));
        return;
    }
    ag_turn_advance(t);
}

static void transfer_done(struct ag_http *h, CURLcode rc)
{
    struct ag_turn *t = h->turn;
    char msg[800];
    long status = 0;
    curl_easy_getinfo(h->easy, CURLINFO_RESPONSE_CODE, &status);
    char body[sizeof(h->errbody)], cerr[CURL_ERROR_SIZE];
    snprintf(body, sizeof(body), "%s", h->errbody);
    snprintf(cerr, sizeof(cerr), "%s", h->curl_error[0] ? h->curl_error : curl_easy_strerror(rc));
    if (h->bad) {
        snprintf(msg, sizeof(msg), "%s", h->chat.error);
        ag_model_abort(t);
        ag_turn_end(t, "error", "model_bad_output", msg);
        return;
    }
    bool retryable = (rc == CURLE_OK && (status == 429 || status >= 500)) ||
                     rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
                     (rc != CURLE_OK && status == 0 && h->chat.text_len == 0 &&
                      h->chat.n_tools == 0 && rc != CURLE_OPERATION_TIMEDOUT);
    if (rc == CURLE_OK && status == 200 && sbx_chat_stream_complete(&h->chat)) {
        answered(t, h);
        return;
    }
    if (retryable) {
        double after = h->retry_after_s;
        ag_model_abort(t);
        if (retry_later(t, after))
            return;
        if (status)
            snprintf(msg, sizeof(msg), "the model answered HTTP %ld (%u attempts): %s", status,
                     t->attempts + 1, body);
        else
            snprintf(msg, sizeof(msg), "the model could not be reached (%u attempts): %s",
                     t->attempts + 1, cerr);
        ag_turn_end(t, "error", status ? "model_http_error" : "model_unavailable", msg);
        return;
    }
    const char *reason;
    if (rc == CURLE_OPERATION_TIMEDOUT) {
        reason = "model_timeout";
        snprintf(msg, sizeof(msg), "the model's stream stalled or ran out of time: %s", cerr);
    } else if (rc != CURLE_OK || status == 200) {
        reason = "model_stream_incomplete";
        snprintf(msg, sizeof(msg), "the model's stream stopped before its end%s%s",
                 rc != CURLE_OK ? ": " : "", rc != CURLE_OK ? cerr : "");
    } else {
        reason = "model_http_error";
        snprintf(msg, sizeof(msg), "the model answered HTTP %ld: %s", status, body);
    }
    ag_model_abort(t);
    ag_turn_end(t, "error", reason, msg);
}

static void check_done(struct sbx_agent *a)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(a->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        struct ag_http *h = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&h);
        if (h)
            transfer_done(h, m->data.result);
    }
}
