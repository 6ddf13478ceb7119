/* chat SESSION [MESSAGE] | turn SESSION INPUT | turn cancel TURN_ID: a turn
 * of the agent (POST /runtime/turn), then its events from the session's
 * stream, replayed from the stream's start so none is missed, printed from
 * the turn's turn_started to its done. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmd.h"
#include "cli/sse.h"
#include "cli/target.h"

struct follow {
    struct sbx_cli_sse sse;
    const struct sbx_cli_args *a;
    const char *turn_id;
    bool on;                /* between its turn_started and its done */
    bool at_line;           /* the last thing printed ended a line */
    bool ended;             /* its done came */
    bool failed;            /* a runtime_error, or done with an error stop */
    const char *after_call; /* a tool_result: print from that call's end */
    char stop[32];
};

static void text_out(struct follow *f, const char *s, size_t n)
{
    fwrite(s, 1, n, stdout);
    if (n)
        f->at_line = s[n - 1] == '\n';
}

static void line_start(struct follow *f)
{
    if (!f->at_line)
        putchar('\n');
    f->at_line = true;
}

static void print_event(struct follow *f, const char *type, json_t *d)
{
    if (strcmp(type, "text_delta") == 0) {
        json_t *t = json_object_get(d, "text");
        text_out(f, json_string_value(t) ? json_string_value(t) : "", json_string_length(t));
    } else if (strcmp(type, "tool_call_start") == 0) {
        json_t *args = json_object_get(d, "arguments");
        char *text = json_is_string(args) ? strdup(json_string_value(args))
                                          : json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY);
        line_start(f);
        printf("-> %s %s%s\n", json_string_value(json_object_get(d, "name")), text ? text : "",
               json_is_true(json_object_get(d, "external")) ? " (external)" : "");
        free(text);
        if (json_is_true(json_object_get(d, "external"))) {
            printf("   answer it with: sandboxctl turn %s '{\"type\":\"tool_result\",\"callId\":"
                   "\"%s\",\"output\":\"...\"}'\n",
                   f->a->session, json_string_value(json_object_get(d, "callId")));
        }
    } else if (strcmp(type, "tool_call_output") == 0) {
        json_t *t = json_object_get(d, "text");
        text_out(f, json_string_value(t) ? json_string_value(t) : "", json_string_length(t));
    } else if (strcmp(type, "tool_call_end") == 0) {
        line_start(f);
        json_t *code = json_object_get(d, "exitCode");
        const char *outcome = json_string_value(json_object_get(d, "outcome"));
        if (json_is_integer(code))
            printf("<- %s: exit %lld (%s)\n", json_string_value(json_object_get(d, "callId")),
                   (long long)json_integer_value(code), outcome ? outcome : "?");
        else
            printf("<- %s: %s: %s\n", json_string_value(json_object_get(d, "callId")),
                   outcome ? outcome : "?", json_string_value(json_object_get(d, "result")));
    } else if (strcmp(type, "runtime_error") == 0) {
        line_start(f);
        fflush(stdout);
        fprintf(stderr, "sandboxctl: %s: %s\n", json_string_value(json_object_get(d, "reason")),
                json_string_value(json_object_get(d, "message")));
        f->failed = true;
    }
}

static int on_event(void *ud, const struct sbx_cli_sse_event *ev)
{
    struct follow *f = ud;
    json_t *body = json_loadb(ev->data, ev->data_len, 0, NULL);
    json_t *d = json_object_get(body, "data");
    const char *type = ev->type ? ev->type : json_string_value(json_object_get(body, "type"));
    const char *turn = json_string_value(json_object_get(d, "turnId"));
    bool mine = turn && strcmp(turn, f->turn_id) == 0;
    const char *call = json_string_value(json_object_get(d, "callId"));
    if (type && strcmp(type, "turn_started") == 0 && mine && !f->after_call)
        f->on = true;
    if (type && f->after_call && strcmp(type, "tool_call_end") == 0 && call &&
        strcmp(call, f->after_call) == 0)
        f->on = true;
    if (f->on && type) {
        if (f->a->json) {
            fwrite(ev->data, 1, ev->data_len, stdout);
            putchar('\n');
        } else {
            print_event(f, type, d);
        }
        if (strcmp(type, "done") == 0 && mine) {
            const char *stop = json_string_value(json_object_get(d, "stopReason"));
            snprintf(f->stop, sizeof(f->stop), "%s", stop ? stop : "");
            f->ended = true;
        }
    }
    json_decref(body);
    fflush(stdout);
    /* Stop reading at its end (an external call is answered from elsewhere:
     * the turn goes on, and so does this). */
    return f->ended ? -1 : 0;
}

static int feed(void *ud, const char *buf, size_t len, sbx_err *err)
{
    struct follow *f = ud;
    if (sbx_cli_sse_feed(&f->sse, buf, len, err) < 0) {
        if (f->ended)
            sbx_err_set(err, ECANCELED, "done");
        return -1;
    }
    return 0;
}

/* stdin whole, for a message or an input given as '-'. */
static char *read_stdin(void)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len - 1, stdin)) > 0) {
        len += n;
        if (cap - len < 2) {
            char *b = cap < (64u << 20) ? realloc(buf, cap *= 2) : NULL;
            if (!b) {
                free(buf);
                return NULL;
            }
            buf = b;
        }
    }
    if (buf)
        buf[len] = '\0';
    return buf;
}

static int cancel(struct sbx_cli_client *c, const struct sbx_cli_args *a)
{
    char path[300];
    snprintf(path, sizeof(path), "/runtime/turn/%s/cancel", a->task_id);
    struct sbx_cli_request rq = {.method = "POST", .path = path, .json = "{}"};
    struct sbx_cli_response rs;
    json_t *ans;
    int rc = sbx_cli_call_json(c, &rq, &rs, &ans);
    if (rc == 0 && a->json)
        rc = sbx_cli_print_raw(&rs);
    else if (rc == 0)
        printf("canceling %s\n", a->task_id);
    json_decref(ans);
    sbx_cli_response_clear(&rs);
    return rc;
}

/* The turn's input: a message, or INPUT as JSON (an array: tool calls). */
static json_t *turn_input(const struct sbx_cli_args *a, sbx_err *err)
{
    cleanup_free char *in = NULL;
    const char *text = a->cmd == SBX_CLI_CHAT ? a->message : a->input;
    if (!text || strcmp(text, "-") == 0) {
        if (!(in = read_stdin())) {
            sbx_err_set(err, ENOMEM, "stdin");
            return NULL;
        }
        text = in;
    }
    if (a->cmd == SBX_CLI_CHAT)
        return json_pack("{s:s, s:s}", "type", "user_message", "text", text);
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j) {
        sbx_err_set(err, EINVAL, "turn: INPUT is not JSON (line %d, column %d: %s)", je.line,
                    je.column, je.text);
        return NULL;
    }
    if (json_is_array(j))
        return json_pack("{s:s, s:o}", "type", "tool_calls", "calls", j);
    if (!json_is_object(j)) {
        json_decref(j);
        sbx_err_set(err, EINVAL, "turn: INPUT must be an object {type, ...} or an array of calls");
        return NULL;
    }
    return j;
}

int sbx_cli_cmd_turn(struct sbx_cli_client *c, const struct sbx_cli_args *a)
{
    if (a->cmd == SBX_CLI_TURN_CANCEL)
        return cancel(c, a);
    sbx_err e = {0};
    json_t *input = turn_input(a, &e);
    if (!input)
        return sbx_cli_fail(&e);
    const char *ty = json_string_value(json_object_get(input, "type"));
    char after_call[256] = "";
    if (ty && strcmp(ty, "tool_result") == 0)
        snprintf(after_call, sizeof(after_call), "%s",
                 json_string_value(json_object_get(input, "callId"))
                     ? json_string_value(json_object_get(input, "callId"))
                     : "");
    json_t *body = json_pack("{s:s, s:o}", "sessionID", a->session, "input", input);
    cleanup_free char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text)
        return sbx_cli_fail(&(sbx_err){ENOMEM, "", "request body"});
    struct sbx_cli_request rq = {.method = "POST", .path = "/runtime/turn", .json = text};
    struct sbx_cli_response rs;
    json_t *ans;
    if (sbx_cli_call_json(c, &rq, &rs, &ans) != 0) {
        sbx_cli_response_clear(&rs);
        return 1;
    }
    char turn_id[128];
    snprintf(turn_id, sizeof(turn_id), "%s",
             json_string_value(json_object_get(ans, "turnId"))
                 ? json_string_value(json_object_get(ans, "turnId"))
                 : "");
    json_decref(ans);
    sbx_cli_response_clear(&rs);
    /* A tool_result goes on the turn that waited: its events are followed
     * from where they are now, which the replay finds too. */
    struct follow f = {.a = a, .turn_id = turn_id, .at_line = true};
    f.after_call = after_call[0] ? after_call : NULL;
    sbx_cli_sse_init(&f.sse, on_event, &f);
    snprintf(f.sse.last_id, sizeof(f.sse.last_id), "0");
    sbx_cli_sse_reset(&f.sse);
    const char *query[] = {"sessionID", a->session, NULL};
    struct sbx_cli_request sq = {.method = "GET",
                                 .path = "/runtime/stream",
                                 .query = query,
                                 .event_stream = true,
                                 .require_type = "text/event-stream",
                                 .last_event_id = "0",
                                 .sink = feed,
                                 .sink_ud = &f};
    int sent = sbx_cli_send(c, &sq, &rs, &e);
    int rc = 0;
    if (!f.ended) {
        rc = sent < 0 ? sbx_cli_fail(&e) : rs.status >= 300 ? sbx_cli_fail_http(&rs) : 1;
        if (rc == 1 && sent == 0 && rs.status < 300)
            fprintf(stderr, "sandboxctl: the stream ended before turn %s did\n", turn_id);
    } else if (!a->json) {
        if (!f.at_line)
            putchar('\n');
        if (f.ended && strcmp(f.stop, "stop") != 0 && strcmp(f.stop, "completed") != 0)
            fprintf(stderr, "sandboxctl: turn %s ended: %s\n", turn_id, f.stop);
    }
    if (f.ended && (f.failed || (strcmp(f.stop, "stop") != 0 && strcmp(f.stop, "completed") != 0 &&
                                 strcmp(f.stop, "length") != 0)))
        rc = 1;
    sbx_cli_response_clear(&rs);
    sbx_cli_sse_free(&f.sse);
    fflush(stdout);
    return rc;
}
