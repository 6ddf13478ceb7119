#include "runtime/runtime.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "exec/env.h"
#include "net/egress.h"
#include "workspace/files.h"
#include "workspace/quota.h"
#include "workspace/path.h"

#define COALESCE_BYTES 65536
#define COALESCE_MS 50
#define OUTPUT_PIECE (32 * 1024)
#define CLONE_ID_STRIDE 65536u
#define MAX_CLONES 60000u
/* The longest a session start waits for its sandbox to be set up. */
#define SESSION_START_MS 10000
static const struct timeval session_start_limit = {.tv_sec = SESSION_START_MS / 1000,
                                                   .tv_usec = (SESSION_START_MS % 1000) * 1000};

struct rt_task;

/* One tenant's queue, in the round-robin ring of tenants with waiting tasks. */
struct rt_tenant {
    char code[SBX_SEGMENT_MAX + 1];
    struct rt_task *head, *tail;
    unsigned queued;
    struct rt_tenant *next;
};

struct rt_task {
    struct sbx_runtime *rt;
    char id[SBX_ID_SIZE];
    struct sbx_clone clone;
    char session[SBX_SEGMENT_MAX + 1];
    char **argv;
    char **env;
    char *stdin_data;
    size_t stdin_len;
    struct sbx_cg_limits lim;
    double timeout_s;
    uint64_t output_limit, file_size, tmp_size;
    enum sbx_net_policy net;
    enum sbx_seccomp_profile seccomp;
    char *workspace;
    char name[48]; /* the sandbox's cgroup name */
    struct sbx_task *t;
    struct rt_session *in_session;  /* running inside this live session */
    struct sbx_policy *own_policy;  /* when the request changed the egress policy */
    struct retired_policy *retired; /* replaced while running, freed at the end */
    struct sbx_egress_opts egress;
    struct sbx_egress *eg; /* proxy policy, not in a session: the task's own */
    sbx_runtime_done_fn done;
    void *ud;
    struct evbuffer *pending[2];
    struct event *flush;
    struct rt_task *next;     /* in its tenant's queue */
    struct rt_task *all_next; /* in the list of active tasks */
};

/* A start request waiting for its session to be ready. */
struct session_waiter {
    sbx_session_ready_fn fn;
    void *ud;
    struct session_waiter *next;
};

struct retired_policy {
    struct sbx_policy *p;
    struct retired_policy *next;
};

/* A live session: one sandbox whose init holds its namespaces; every task
 * naming the session runs inside it, and what a task leaves (files in /tmp,
 * background processes) is there for the next, until stop or idleness. */
struct rt_session {
    struct sbx_runtime *rt;
    char tenant[SBX_SEGMENT_MAX + 1];
    char name[SBX_SEGMENT_MAX + 1];
    char clone_id[SBX_SEGMENT_MAX + 1];
    char cgname[48];
    char *workspace;
    char **env;
    struct sbx_sandbox sb;
    struct sbx_egress *egress;
    struct sbx_egress_opts egress_opts;
    struct event *ev_exit, *ev_idle;
    struct event *ev_ready; /* init's first message, while not ready */
    bool ready;             /* its pid 1 holds the namespaces: tasks may join */
    struct session_waiter *waiters;
    unsigned tasks;
    struct sbx_policy *own_policy;  /* set through the API, or NULL */
    struct retired_policy *retired; /* replaced ones, freed with the session */
    struct rt_session *next;
};

struct mounted_ws {
    char *path;
    struct mounted_ws *next;
};

struct sbx_runtime {
    struct sbx_runtime_opts o;
    char default_session[SBX_SEGMENT_MAX + 1];
    struct rt_tenant *ring; /* tenants with queued tasks */
    unsigned queued, running;
    struct rt_task *active;     /* queued and running */
    unsigned egress_conns;      /* live egress connections of all sandboxes */
    struct mounted_ws *mounted; /* workspace images this daemon mounted */
    struct rt_session *sessions;
    struct sbx_subscriber *subs;
};

static struct rt_session *find_session(struct sbx_runtime *rt, const char *tenant,
                                       const char *name);
static void session_touch(struct rt_session *x);
static struct sbx_policy *task_policy(struct sbx_runtime *rt, const struct sbx_task_request *req,
                                      sbx_err *err);
static char **task_env(const struct sbx_config *cfg, enum sbx_net_policy net, const char *tenant,
                       const char *const *req, sbx_err *err);

/* A task's or a session's own policy and the ones it replaced. */
static void policies_free(struct sbx_policy *own, struct retired_policy *retired)
{
    sbx_policy_free(own);
    for (struct retired_policy *r = retired, *next; r; r = next) {
        next = r->next;
        sbx_policy_free(r->p);
        free(r);
    }
}

/* A live egress's new rules (req's, on top of the operator's): they become
 * *own; the policy they replace is kept in *retired until its owner is freed,
 * as connections being set up may still use it. */
static int policy_replace(struct sbx_runtime *rt, struct sbx_egress *eg,
                          const struct sbx_task_request *req, struct sbx_policy **own,
                          struct retired_policy **retired, sbx_err *err)
{
    struct sbx_policy *p = task_policy(rt, req, err);
    struct retired_policy *r = p ? calloc(1, sizeof(*r)) : NULL;
    if (!r) {
        sbx_policy_free(p);
        return p ? sbx_err_set(err, ENOMEM, "policy") : -1;
    }
    sbx_egress_set_policy(eg, p);
    *r = (struct retired_policy){.p = *own, .next = *retired};
    *retired = r;
    *own = p;
    return 0;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

json_t *sbx_json_time(int64_t ms)
{
    if (ms <= 0)
        return json_null();
    char buf[40];
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&s, &tm);
    size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, sizeof(buf) - n, ".%03dZ", (int)(ms % 1000));
    return json_string(buf);
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0. */
static size_t utf8_seq(const unsigned char *p, size_t left)
{
    size_t n;
    unsigned cp;
    if (p[0] < 0x80)
        return 1;
    if ((p[0] & 0xe0) == 0xc0)
        n = 2, cp = p[0] & 0x1f;
    else if ((p[0] & 0xf0) == 0xe0)
        n = 3, cp = p[0] & 0x0f;
    else if ((p[0] & 0xf8) == 0xf0)
        n = 4, cp = p[0] & 0x07;
    else
        return 0;
    if (n > left)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    static const unsigned min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

json_t *sbx_json_text(const char *buf, size_t len)
{
    json_t *s = json_stringn(buf ? buf : "", buf ? len : 0);
    if (s)
        return s;
    /* Not UTF-8 (or holds NUL): keep what is valid, mark the rest. */
    char *out = malloc(len * 3 + 1);
    if (!out)
        return json_string("");
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)buf;
    for (size_t i = 0; i < len;) {
        size_t n = p[i] ? utf8_seq(p + i, len - i) : 0;
        if (n) {
            memcpy(out + o, p + i, n), o += n, i += n;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3), o += 3, i++;
        }
    }
    s = json_stringn(out, o);
    free(out);
    return s ? s : json_string("");
}

/* ---- events ---- */

static void push(struct sbx_subscriber *s, uint64_t id, const char *type, const char *json)
{
    if (s->behind || id <= s->last_id)
        return;
    if (s->send(s->ud, id, type, json) < 0) {
        s->behind = true;
        return;
    }
    s->last_id = id;
}

/* The store's name of a tenant's session: segments never hold ':'. */
static void stream_key(char *out, size_t len, const char *tenant, const char *session)
{
    snprintf(out, len, "%s:%s", tenant, session);
}

int sbx_runtime_emit(struct sbx_runtime *rt, const char *tenant, const char *session,
                     const char *type, json_t *data, sbx_err *err)
{
    int64_t t = now_ms();
    char key[2 * SBX_SEGMENT_MAX + 2];
    stream_key(key, sizeof(key), tenant, session);
    json_t *body = json_pack("{s:s, s:o, s:s, s:o}", "type", type, "time", sbx_json_time(t),
                             "sessionId", session, "data", data ? data : json_object());
    char *text = body ? json_dumps(json_object_get(body, "data"), JSON_COMPACT) : NULL;
    uint64_t id = 0;
    int rc = -1;
    if (!text)
        sbx_err_set(err, ENOMEM, "event");
    else if (sbx_store_event_append(rt->o.store, key, type, t, text, &id, err) == 0) {
        json_object_set_new(body, "id", json_integer((json_int_t)id));
        char *full = json_dumps(body, JSON_COMPACT);
        for (struct sbx_subscriber *s = rt->subs; full && s; s = s->next)
            if (strcmp(s->key, key) == 0)
                push(s, id, type, full);
        free(full);
        rc = 0;
    }
    free(text);
    json_decref(body);
    return rc;
}

struct replay_ctx {
    struct sbx_subscriber *s;
};

static int replay_one(void *ctx, const struct sbx_store_event *ev)
{
    struct sbx_subscriber *s = ((struct replay_ctx *)ctx)->s;
    json_error_t je;
    json_t *data = json_loads(ev->data, 0, &je);
    json_t *body = json_pack("{s:I, s:s, s:o, s:s, s:o}", "id", (json_int_t)ev->id, "type",
                             ev->type, "time", sbx_json_time(ev->time), "sessionId", s->session,
                             "data", data ? data : json_object());
    char *full = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    int rc = 0;
    if (!full || s->send(s->ud, ev->id, ev->type, full) < 0)
        rc = 1; /* full again: stop, resume later */
    else
        s->last_id = ev->id;
    free(full);
    return rc;
}

/* Send what the store holds after s->last_id; leaves s->behind set when the
 * client's buffer filled up again. */
static int catch_up(struct sbx_runtime *rt, struct sbx_subscriber *s, sbx_err *err)
{
    struct sbx_store_event_range range;
    struct replay_ctx ctx = {s};
    s->behind = false;
    if (sbx_store_events_since(rt->o.store, s->key, s->last_id, 1, NULL, NULL, &range, err) < 0)
        return -1;
    uint64_t from, to;
    if (sbx_store_events_lost(&range, s->last_id, &from, &to) == 0) {
        json_t *body = json_pack("{s:s, s:o, s:s, s:{s:I, s:I}}", "type", "events_lost", "time",
                                 sbx_json_time(now_ms()), "sessionId", s->session, "data", "from",
                                 (json_int_t)from, "to", (json_int_t)to);
        char *full = body ? json_dumps(body, JSON_COMPACT) : NULL;
        json_decref(body);
        int sent = full ? s->send(s->ud, to, "events_lost", full) : -1;
        free(full);
        if (sent < 0) {
            s->behind = true;
            return 0;
        }
        s->last_id = to;
    } else if (s->last_id > range.last) {
        s->last_id = 0; /* the stream was pruned and began again */
    }
    for (;;) {
        uint64_t before = s->last_id;
        int rc = sbx_store_events_since(rt->o.store, s->key, s->last_id, 500, replay_one, &ctx,
                                        NULL, err);
        if (rc < 0)
            return -1;
        if (rc > 0) {
            s->behind = true;
            return 0;
        }
        if (s->last_id == before)
            return 0;
    }
}

int sbx_runtime_subscribe(struct sbx_runtime *rt, struct sbx_subscriber *s, sbx_err *err)
{
    stream_key(s->key, sizeof(s->key), s->tenant, s->session);
    if (catch_up(rt, s, err) < 0)
        return -1;
    s->next = rt->subs;
    rt->subs = s;
    return 0;
}

void sbx_runtime_resume(struct sbx_runtime *rt, struct sbx_subscriber *s)
{
    if (s->behind)
        catch_up(rt, s, NULL);
}

void sbx_runtime_unsubscribe(struct sbx_runtime *rt, struct sbx_subscriber *s)
{
    for (struct sbx_subscriber **p = &rt->subs; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            return;
        }
}

/* ---- tasks ---- */

static json_t *task_event_data(const struct rt_task *rt_t, const char *status)
{
    json_t *cmd = json_array();
    for (size_t i = 0; rt_t->argv && rt_t->argv[i]; i++)
        json_array_append_new(cmd, sbx_json_text(rt_t->argv[i], strlen(rt_t->argv[i])));
    return json_pack("{s:s, s:o, s:s, s:s, s:s, s:s, s:s}", "taskId", rt_t->id, "command", cmd,
                     "status", status, "backend", "sandbox", "skill", "", "skillSource", "",
                     "skillTrustLevel", "");
}

static void flush_output(struct rt_task *t, int idx)
{
    struct evbuffer *b = t->pending[idx];
    size_t len = b ? evbuffer_get_length(b) : 0;
    if (!len)
        return;
    const char *data = (const char *)evbuffer_pullup(b, -1);
    /* Pieces small enough that even JSON's worst case (\u00XX for every
     * byte) fits a client's stream buffer; never cut inside a UTF-8 sequence. */
    for (size_t off = 0; off < len;) {
        size_t cut = len - off < OUTPUT_PIECE ? len - off : OUTPUT_PIECE;
        while (off + cut < len && cut > 4 && ((unsigned char)data[off + cut] & 0xc0) == 0x80)
            cut--;
        json_t *d =
            json_pack("{s:s, s:s, s:o}", "taskId", t->id, "stream", idx == 0 ? "stdout" : "stderr",
                      "data", sbx_json_text(data + off, cut));
        sbx_runtime_emit(t->rt, t->clone.tenant, t->session, "tool_call_output", d, NULL);
        off += cut;
    }
    evbuffer_drain(b, len);
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    struct rt_task *t = arg;
    flush_output(t, 0);
    flush_output(t, 1);
}

static void on_output(void *ud, enum sbx_stream s, const char *buf, size_t n)
{
    struct rt_task *t = ud;
    int idx = s == SBX_STDOUT ? 0 : 1;
    evbuffer_add(t->pending[idx], buf, n);
    if (evbuffer_get_length(t->pending[idx]) >= COALESCE_BYTES)
        flush_output(t, idx);
    else if (!evtimer_pending(t->flush, NULL)) {
        struct timeval tv = {0, COALESCE_MS * 1000};
        evtimer_add(t->flush, &tv);
    }
}

static void free_strv(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

static void task_free(struct rt_task *t)
{
    if (!t)
        return;
    if (t->t)
        sbx_task_free(t->t);
    sbx_egress_free(t->eg);
    if (t->flush)
        event_free(t->flush);
    for (int i = 0; i < 2; i++)
        if (t->pending[i])
            evbuffer_free(t->pending[i]);
    policies_free(t->own_policy, t->retired);
    free_strv(t->argv);
    sbx_env_free(t->env);
    free(t->stdin_data);
    free(t->workspace);
    free(t);
}

static void unlink_active(struct sbx_runtime *rt, struct rt_task *t)
{
    for (struct rt_task **p = &rt->active; *p; p = &(*p)->all_next)
        if (*p == t) {
            *p = t->all_next;
            return;
        }
}

static enum sbx_task_status final_status(const struct sbx_report *r)
{
    switch (r->outcome) {
    case SBX_OUTCOME_EXITED:
        return r->exit_code == 0 ? SBX_TASK_SUCCEEDED : SBX_TASK_FAILED;
    case SBX_OUTCOME_TIMEOUT:
        return SBX_TASK_TIMEOUT;
    case SBX_OUTCOME_CANCELED:
        return SBX_TASK_CANCELED;
    default:
        return SBX_TASK_FAILED;
    }
}

static void start_next(struct sbx_runtime *rt);

/* Record the end, tell the waiter and the stream, free, start the next. */
static void finish(struct rt_task *t, enum sbx_task_status status, const char *error,
                   const char *result, const char *out, size_t out_len, const char *errout,
                   size_t err_len, int exit_code)
{
    struct sbx_runtime *rt = t->rt;
    /* A task that never ran in a sandbox (canceled while queued or at the
     * daemon's stop, or unable to start) still gets a result with its exit
     * code: 124 for a cancel, 125 for a setup failure. */
    char *made = NULL;
    if (!result) {
        json_t *r = json_pack("{s:s, s:i, s:s}", "outcome",
                              status == SBX_TASK_CANCELED ? "canceled" : "setup_error", "exitCode",
                              exit_code, "message", error ? error : "");
        made = r ? json_dumps(r, JSON_COMPACT) : NULL;
        json_decref(r);
        result = made;
    }
    struct sbx_store_transition tr = {.to = status,
                                      .error = error ? error : "",
                                      .result = result,
                                      .stdout_data = out,
                                      .stdout_len = out_len,
                                      .stderr_data = errout,
                                      .stderr_len = err_len};
    sbx_store_task_transition(rt->o.store, t->id, &tr, NULL);
    json_t *d = task_event_data(t, sbx_task_status_name(status));
    json_object_set_new(d, "exitCode", json_integer(exit_code));
    json_object_set_new(d, "error", json_string(error ? error : ""));
    sbx_runtime_emit(rt, t->clone.tenant, t->session, "exec_finished", d, NULL);
    unlink_active(rt, t);
    if (t->done)
        t->done(t->ud, t->id);
    task_free(t);
    free(made);
}

static void on_task_done(void *ud, struct sbx_task *et)
{
    struct rt_task *t = ud;
    struct sbx_runtime *rt = t->rt;
    /* Every relay closes now and reports its flow before the report is out. */
    sbx_egress_free(sbx_steal_pointer(&t->eg));
    on_flush(-1, 0, t);
    const struct sbx_report *r = sbx_task_report(et);
    char *result = sbx_report_to_json(r);
    size_t out_len, err_len;
    const char *out = sbx_task_output(et, SBX_STDOUT, &out_len);
    const char *errout = sbx_task_output(et, SBX_STDERR, &err_len);
    enum sbx_task_status st = final_status(r);
    if (t->in_session && find_session(rt, t->clone.tenant, t->session) == t->in_session) {
        t->in_session->tasks--;
        session_touch(t->in_session);
    }
    const char *error = st == SBX_TASK_SUCCEEDED ? "" : r->message;
    if (sbx_log_enabled(SBX_LOG_INFO)) {
        char tenant[128], session[128], why[300];
        sbx_log(SBX_LOG_INFO,
                "task ended id=%s tenant=%s session=%s status=%s outcome=%s exit=%d wall=%.3f "
                "cpu=%.3f peak_mem=%llu%s%s",
                t->id, sbx_log_safe(t->clone.tenant, tenant, sizeof(tenant)),
                t->session[0] ? sbx_log_safe(t->session, session, sizeof(session)) : "-",
                sbx_task_status_name(st), sbx_outcome_name(r->outcome), r->exit_code, r->wall_s,
                r->cpu_s, (unsigned long long)r->peak_memory_bytes, error[0] ? " error=" : "",
                error[0] ? sbx_log_safe(error, why, sizeof(why)) : "");
    }
    rt->running--;
    /* The engine's task is freed with ours, after the callbacks. */
    finish(t, st, error, result, out, out_len, errout, err_len, r->exit_code);
    free(result);
    start_next(rt);
}

/* The clone's workspace as a filesystem of its own (its quota image), mounted
 * once per daemon run and remembered for the unmount at stop. */
static int mount_quota(struct sbx_runtime *rt, const char *dir, uid_t uid, gid_t gid, sbx_err *err)
{
    for (struct mounted_ws *m = rt->mounted; m; m = m->next)
        if (strcmp(m->path, dir) == 0)
            return 0;
    char images[PATH_MAX];
    snprintf(images, sizeof(images), "%s/workspace-images", rt->o.cfg->state_dir);
    if (mkdir(images, 0700) < 0 && errno != EEXIST)
        return sbx_err_set(err, errno, "mkdir %s", images);
    if (sbx_ws_quota_ensure(images, dir, rt->o.cfg->workspace_quota_bytes, uid, gid, err) < 0)
        return -1;
    struct mounted_ws *m = calloc(1, sizeof(*m));
    if (!m || !(m->path = strdup(dir))) {
        free(m);
        sbx_ws_quota_release(dir, NULL);
        return sbx_err_set(err, ENOMEM, "workspace");
    }
    m->next = rt->mounted;
    rt->mounted = m;
    return 0;
}

int sbx_runtime_workspace(struct sbx_runtime *rt, const struct sbx_clone *c, int *ws_fd, uid_t *uid,
                          gid_t *gid, sbx_err *err)
{
    const struct sbx_config *cfg = rt->o.cfg;
    uint32_t base;
    int fd = -1;
    /* A tenant cannot take every host id range: new clones stop at its cap. */
    bool known;
    uint64_t n;
    if (sbx_store_clone_known(rt->o.store, c->tenant, c->key, c->id, &known, err) < 0 ||
        (!known && sbx_store_clone_count(rt->o.store, c->tenant, &n, err) < 0))
        return -1;
    if (!known && n >= cfg->max_clones_per_tenant)
        return sbx_err_set(err, EDQUOT, "tenant %s already has %llu clones, the most allowed",
                           c->tenant, (unsigned long long)n);
    if (sbx_store_clone_base(rt->o.store, c->tenant, c->key, c->id, cfg->host_id_base,
                             CLONE_ID_STRIDE, MAX_CLONES, &base, err) < 0)
        return -1;
    *uid = base + cfg->runner_uid;
    *gid = base + cfg->runner_gid;
    if (sbx_ws_ensure(cfg->workspace_root, c->tenant, c->key, c->id, *uid, *gid, &fd, err) < 0)
        return -1;
    close(fd);
    char *dir = sbx_ws_dir(cfg->workspace_root, c->tenant, c->key, c->id, err);
    if (!dir)
        return -1;
    /* The fd of the directory under the mount is stale: open the mount's root. */
    int rc = mount_quota(rt, dir, *uid, *gid, err);
    if (rc == 0 && (*ws_fd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        rc = sbx_err_set(err, errno, "open workspace %s", dir);
    free(dir);
    return rc;
}

/* Every egress flow of a task is an audit record; a denial of a real target
 * (not a malformed handshake) is also a network_denied event on its session. */
static void on_flow(void *ud, const struct sbx_flow *f)
{
    struct rt_task *t = ud;
    char addr[INET6_ADDRSTRLEN] = "";
    if (f->addr.family)
        sbx_addr_str(&f->addr, addr, sizeof(addr));
    bool denied = f->verdict == SBX_VERDICT_DENY;
    json_t *d = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:s, s:s, s:I, s:I, s:f}", "taskId",
                          t->id, "tenantCode", t->clone.tenant, "cloneId", t->clone.id, "via",
                          sbx_flow_via_name(f->via), "name", f->name, "address", addr, "port",
                          f->port, "verdict", denied ? "deny" : "allow", "rule", f->rule,
                          "bytesOut", (json_int_t)f->bytes_out, "bytesIn", (json_int_t)f->bytes_in,
                          "durationSeconds", f->duration_s);
    char *detail = d ? json_dumps(d, JSON_COMPACT) : NULL;
    struct sbx_store_audit rec = {.identity = "egress",
                                  .action = denied ? "egress_denied" : "egress_flow",
                                  .target = t->id,
                                  .detail = detail};
    if (detail)
        sbx_store_audit_append(t->rt->o.store, &rec, NULL);
    free(detail);
    if (d && denied && (f->addr.family || f->name[0]))
        sbx_runtime_emit(t->rt, t->clone.tenant, t->session, "network_denied", json_incref(d),
                         NULL);
    json_decref(d);
}

/* The egress of a sandbox of ours: the configured limits, the shared
 * connection count, flows to on_flow_cb. */
static struct sbx_egress_opts egress_opts(struct sbx_runtime *rt, const struct sbx_policy *policy,
                                          sbx_flow_cb on_flow_cb, void *ud)
{
    const struct sbx_config *cfg = rt->o.cfg;
    return (struct sbx_egress_opts){
        .base = rt->o.base,
        .socks_port = cfg->network.proxy_port,
        .policy = policy,
        .resolver = rt->o.resolver,
        .limits = {.max_conns = (unsigned)cfg->network.max_connections,
                   .max_bytes = cfg->network.max_bytes,
                   .idle_timeout_s = cfg->network.idle_timeout_s,
                   .connect_timeout_s = cfg->network.connect_timeout_s,
                   .total_active = &rt->egress_conns,
                   .max_total = (unsigned)cfg->network.total_connections},
        .on_flow = on_flow_cb,
        .ud = ud};
}

static struct rt_session *find_session(struct sbx_runtime *rt, const char *tenant, const char *name)
{
    for (struct rt_session *x = rt->sessions; x; x = x->next)
        if (strcmp(x->tenant, tenant) == 0 && strcmp(x->name, name) == 0)
            return x;
    return NULL;
}

/* Tell every waiter of x how its start ended (err NULL: ready). */
static void session_notify(struct rt_session *x, const sbx_err *err)
{
    struct session_waiter *w = x->waiters;
    x->waiters = NULL;
    while (w) {
        struct session_waiter *next = w->next;
        w->fn(w->ud, err);
        free(w);
        w = next;
    }
}

static void session_free(struct rt_session *x)
{
    struct sbx_runtime *rt = x->rt;
    if (x->waiters) {
        sbx_err e = {0};
        sbx_err_set(&e, EBUSY, "session %s ended before it was ready", x->name);
        session_notify(x, &e);
    }
    if (x->ev_ready)
        event_free(x->ev_ready);
    /* Its running tasks end as canceled (124), not as a sandbox that broke
     * under them. */
    for (struct rt_task *t = rt->active; t; t = t->all_next)
        if (t->in_session == x && t->t)
            sbx_task_cancel(t->t);
    for (struct rt_session **p = &rt->sessions; *p; p = &(*p)->next)
        if (*p == x) {
            *p = x->next;
            break;
        }
    if (x->ev_exit)
        event_free(x->ev_exit);
    if (x->ev_idle)
        event_free(x->ev_idle);
    sbx_egress_free(x->egress);
    sbx_sandbox_kill(&x->sb);
    sbx_sandbox_release(&x->sb, NULL);
    policies_free(x->own_policy, x->retired);
    sbx_env_free(x->env);
    free(x->workspace);
    free(x);
}

/* The end of a live session for reason: logged and freed; tasks that waited
 * in the queue for it to be set up are looked at again (they run without
 * it). */
static void session_close(struct rt_session *x, const char *reason)
{
    char tenant_s[128], name_s[128];
    sbx_log(SBX_LOG_INFO, "session ended tenant=%s session=%s reason=\"%s\"",
            sbx_log_safe(x->tenant, tenant_s, sizeof(tenant_s)),
            sbx_log_safe(x->name, name_s, sizeof(name_s)), reason);
    struct sbx_runtime *rt = x->rt;
    bool waited = !x->ready;
    session_free(x);
    if (waited)
        start_next(rt);
}

/* An end the session's stream is told of (not asked for through the API). */
static void session_end(struct rt_session *x, const char *reason)
{
    sbx_runtime_emit(x->rt, x->tenant, x->name, "runtime_stopped",
                     json_pack("{s:s, s:s}", "runtimeId", x->name, "reason", reason), NULL);
    session_close(x, reason);
}

static void on_session_exit(evutil_socket_t fd, short what, void *arg)
{
    session_end(arg, "the session's sandbox ended");
}

static void on_session_idle(evutil_socket_t fd, short what, void *arg)
{
    struct rt_session *x = arg;
    if (x->tasks == 0)
        session_end(x, "idle timeout");
}

static void session_touch(struct rt_session *x)
{
    double secs = x->rt->o.cfg->idle_timeout_s;
    if (secs <= 0 || !x->ev_idle)
        return;
    struct timeval tv = {.tv_sec = (time_t)secs,
                         .tv_usec = (suseconds_t)((secs - (double)(time_t)secs) * 1e6)};
    event_add(x->ev_idle, &tv);
}

/* The egress of a session reports its flows on the session's stream. */
static void on_session_flow(void *ud, const struct sbx_flow *f)
{
    struct rt_session *x = ud;
    if (f->verdict != SBX_VERDICT_DENY || (!f->addr.family && !f->name[0]))
        return;
    char addr[INET6_ADDRSTRLEN] = "";
    if (f->addr.family)
        sbx_addr_str(&f->addr, addr, sizeof(addr));
    json_t *d = json_pack("{s:s, s:s, s:s, s:i, s:s}", "via", sbx_flow_via_name(f->via), "name",
                          f->name, "address", addr, "port", f->port, "rule", f->rule);
    sbx_runtime_emit(x->rt, x->tenant, x->name, "network_denied", d, NULL);
}

/* init's first message: STARTED (ready), a set-up error, or nothing in time. */
static void on_session_started(evutil_socket_t fd, short what, void *arg)
{
    struct rt_session *x = arg;
    struct sbx_init_msg m;
    sbx_err e = {0};
    ssize_t n = what & EV_READ ? recv(fd, &m, sizeof(m), MSG_DONTWAIT) : -1;
    if (n < 0 && (errno == EAGAIN || errno == EINTR) && (what & EV_READ)) {
        event_add(x->ev_ready, &session_start_limit);
        return;
    }
    if (n == (ssize_t)sizeof(m) && m.kind == SBX_MSG_STARTED) {
        event_free(x->ev_ready);
        x->ev_ready = NULL;
        x->ready = true;
        char tenant_s[128], name_s[128];
        sbx_log(SBX_LOG_INFO, "session started tenant=%s session=%s sandbox=%s",
                sbx_log_safe(x->tenant, tenant_s, sizeof(tenant_s)),
                sbx_log_safe(x->name, name_s, sizeof(name_s)), x->cgname);
        struct sbx_runtime *rt = x->rt;
        session_touch(x); /* idleness counts from now */
        sbx_runtime_emit(rt, x->tenant, x->name, "runtime_started",
                         json_pack("{s:s, s:s, s:s}", "runtimeId", x->name, "cloneId", x->clone_id,
                                   "tenantCode", x->tenant),
                         NULL);
        session_notify(x, NULL);
        start_next(rt); /* its tasks waited in the queue */
        return;
    }
    if (!(what & EV_READ))
        sbx_err_stage(&e, "session", ETIMEDOUT, "not set up in %d ms", SESSION_START_MS);
    else if (n == (ssize_t)sizeof(m) && m.kind == SBX_MSG_SETUP_ERROR) {
        m.stage[sizeof(m.stage) - 1] = m.text[sizeof(m.text) - 1] = '\0';
        sbx_err_stage(&e, m.stage, m.errnum, "%s", m.text);
    } else
        sbx_err_stage(&e, "session", n < 0 ? errno : EPIPE, "its init ended before it started");
    char tenant_s[128], name_s[128], msg[600], why[300];
    sbx_log(SBX_LOG_WARN, "session failed to start tenant=%s session=%s error=%s",
            sbx_log_safe(x->tenant, tenant_s, sizeof(tenant_s)),
            sbx_log_safe(x->name, name_s, sizeof(name_s)),
            sbx_log_safe(sbx_err_format(&e, msg, sizeof(msg)), why, sizeof(why)));
    struct sbx_runtime *rt = x->rt;
    session_notify(x, &e);
    session_free(x);
    start_next(rt); /* what waited for it runs now, without it */
}

void sbx_runtime_session_unwait(struct sbx_runtime *rt, void *ud)
{
    for (struct rt_session *x = rt->sessions; x; x = x->next)
        for (struct session_waiter **p = &x->waiters; *p;)
            if ((*p)->ud == ud) {
                struct session_waiter *w = *p;
                *p = w->next;
                free(w);
            } else {
                p = &(*p)->next;
            }
}

int sbx_runtime_session_start(struct sbx_runtime *rt, const struct sbx_clone *c, const char *name,
                              sbx_session_ready_fn ready, void *ud, sbx_err *err)
{
    const struct sbx_config *cfg = rt->o.cfg;
    struct rt_session *x = find_session(rt, c->tenant, name);
    if (x && x->ready)
        return 1;
    if (x) { /* being set up: one more waiter */
        struct session_waiter *w = calloc(1, sizeof(*w));
        if (!w)
            return sbx_err_set(err, ENOMEM, "session");
        *w = (struct session_waiter){.fn = ready, .ud = ud, .next = x->waiters};
        x->waiters = w;
        return 0;
    }
    x = calloc(1, sizeof(*x));
    if (!x)
        return sbx_err_set(err, ENOMEM, "session");
    x->rt = rt;
    x->sb.pidfd = x->sb.sync_fd = x->sb.stdin_fd = x->sb.stdout_fd = x->sb.stderr_fd = -1;
    snprintf(x->tenant, sizeof(x->tenant), "%s", c->tenant);
    snprintf(x->name, sizeof(x->name), "%s", name);
    snprintf(x->clone_id, sizeof(x->clone_id), "%s", c->id);
    char id[SBX_ID_SIZE];
    if (sbx_id_new(id, err) < 0) {
        free(x);
        return -1;
    }
    snprintf(x->cgname, sizeof(x->cgname), "session-%.36s", id);
    int ws_fd = -1;
    uid_t uid;
    gid_t gid;
    if (sbx_runtime_workspace(rt, c, &ws_fd, &uid, &gid, err) < 0) {
        free(x);
        return -1;
    }
    close(ws_fd);
    x->workspace = sbx_ws_dir(cfg->workspace_root, c->tenant, c->key, c->id, err);
    x->env = task_env(cfg, cfg->net, c->tenant, NULL, err);
    x->next = rt->sessions;
    rt->sessions = x;
    if (!x->workspace || !x->env)
        goto fail;
    struct sbx_spec spec = {.envp = x->env,
                            .workspace = x->workspace,
                            .uid = cfg->runner_uid,
                            .gid = cfg->runner_gid,
                            .host_id_base = (uint32_t)uid - cfg->runner_uid,
                            .host_net = cfg->net == SBX_NET_HOST,
                            .cg_host = rt->o.cg_host,
                            .cg_limits = {.memory_bytes = cfg->limits.memory_bytes,
                                          .pids = cfg->limits.pids,
                                          .cpu_cores = cfg->limits.cpu_cores},
                            .file_size_bytes = cfg->limits.file_size_bytes,
                            .tmp_size_bytes = cfg->limits.tmp_bytes,
                            .nofile = 1024,
                            .name = x->cgname,
                            .session = true,
                            .host_view = !cfg->mount_sandbox,
                            .join_pidfd = -1};
    if (sbx_sandbox_spawn(&spec, &x->sb, err) < 0)
        goto fail;
    if (cfg->net == SBX_NET_PROXY) {
        x->egress_opts = egress_opts(rt, rt->o.policy, on_session_flow, x);
        if (!(x->egress = sbx_egress_start_in(&x->egress_opts, x->sb.init_pid, err)))
            goto fail;
    }
    if (sbx_sandbox_send_fds(&x->sb, &rt->o.fds[cfg->seccomp], err) < 0)
        goto fail;
    /* Tasks join the session's namespaces: not before its pid 1 has built the
     * root and holds them (a task that joined earlier found a half-made mount
     * namespace). Its STARTED message says so; the loop goes on meanwhile. */
    struct session_waiter *w = calloc(1, sizeof(*w));
    x->ev_exit = event_new(rt->o.base, x->sb.pidfd, EV_READ, on_session_exit, x);
    x->ev_idle = evtimer_new(rt->o.base, on_session_idle, x);
    x->ev_ready = event_new(rt->o.base, x->sb.sync_fd, EV_READ, on_session_started, x);
    if (!w || !x->ev_exit || !x->ev_idle || !x->ev_ready || event_add(x->ev_exit, NULL) < 0 ||
        event_add(x->ev_ready, &session_start_limit) < 0) {
        free(w);
        sbx_err_set(err, ENOMEM, "session events");
        goto fail;
    }
    *w = (struct session_waiter){.fn = ready, .ud = ud};
    x->waiters = w;
    session_touch(x);
    return 0;
fail:
    session_free(x);
    return -1;
}

int sbx_runtime_session_stop(struct sbx_runtime *rt, const char *tenant, const char *name)
{
    struct rt_session *x = find_session(rt, tenant, name);
    if (!x)
        return -1;
    session_close(x, "stopped");
    return 0;
}

int sbx_runtime_session_set_network(struct sbx_runtime *rt, const char *tenant, const char *name,
                                    int net_default, const char *const *allow,
                                    const char *const *deny, sbx_err *err)
{
    struct rt_session *x = find_session(rt, tenant, name);
    if (!x)
        return sbx_err_set(err, ENOENT, "no live session %s", name);
    if (!x->egress)
        return sbx_err_set(err, ENOTSUP, "session %s has no egress (its policy is not proxy)",
                           name);
    struct sbx_task_request req = {.net_default = net_default, .allow = allow, .deny = deny};
    return policy_replace(rt, x->egress, &req, &x->own_policy, &x->retired, err);
}

bool sbx_runtime_session_live(struct sbx_runtime *rt, const char *tenant, const char *name)
{
    return find_session(rt, tenant, name) != NULL;
}

/* Proxy policy: the task's own egress in its sandbox's namespace. */
static int task_egress_start(void *ud, pid_t init_pid, sbx_err *err)
{
    struct rt_task *t = ud;
    t->eg = sbx_egress_start_in(&t->egress, init_pid, err);
    return t->eg ? 0 : -1;
}

static int task_start(struct rt_task *t, sbx_err *err)
{
    struct sbx_runtime *rt = t->rt;
    const struct sbx_config *cfg = rt->o.cfg;
    int ws_fd = -1;
    uid_t uid;
    gid_t gid;
    if (sbx_runtime_workspace(rt, &t->clone, &ws_fd, &uid, &gid, err) < 0)
        return -1;
    close(ws_fd);
    uint32_t base = (uint32_t)uid - cfg->runner_uid;
    if (!(t->workspace =
              sbx_ws_dir(cfg->workspace_root, t->clone.tenant, t->clone.key, t->clone.id, err)))
        return -1;
    snprintf(t->name, sizeof(t->name), "task-%.36s", t->id);
    t->pending[0] = evbuffer_new();
    t->pending[1] = evbuffer_new();
    t->flush = evtimer_new(rt->o.base, on_flush, t);
    if (!t->pending[0] || !t->pending[1] || !t->flush)
        return sbx_err_set(err, ENOMEM, "task buffers");
    t->egress = egress_opts(rt, t->own_policy ? t->own_policy : rt->o.policy, on_flow, t);
    struct sbx_task_opts to = {
        .spec = {.argv = t->argv,
                 .envp = t->env,
                 .workspace = t->workspace,
                 .uid = cfg->runner_uid,
                 .gid = cfg->runner_gid,
                 .host_id_base = base,
                 .host_net = t->net == SBX_NET_HOST,
                 .cg_host = rt->o.cg_host,
                 .cg_limits = t->lim,
                 .file_size_bytes = t->file_size,
                 .tmp_size_bytes = t->tmp_size,
                 .nofile = 1024,
                 .name = t->name,
                 .host_view = !cfg->mount_sandbox,
                 .join_pidfd = -1},
        .fds = rt->o.fds[t->seccomp],
        .timeout_s = t->timeout_s,
        .output_limit = t->output_limit,
        .stdin_data = t->stdin_data,
        .stdin_len = t->stdin_len,
        .stdin_fd = -1,
        .on_spawn = t->net == SBX_NET_PROXY ? task_egress_start : NULL,
        .on_output = on_output,
        .on_done = on_task_done,
        .ud = t,
    };
    /* Inside the live session of that name, if there is one. */
    struct rt_session *x = find_session(rt, t->clone.tenant, t->session);
    if (x) {
        to.spec.join_pidfd = x->sb.pidfd;
        to.spec.join_cg = &x->sb.cg;
        to.spec.workspace = x->workspace;
        to.spec.host_net = cfg->net == SBX_NET_HOST;
        to.on_spawn = NULL; /* the session's egress serves it */
    }
    struct sbx_store_transition tr = {.to = SBX_TASK_RUNNING, .sandbox = t->name};
    if (sbx_store_task_transition(rt->o.store, t->id, &tr, err) < 0)
        return -1;
    t->t = sbx_task_start(rt->o.base, &to, err);
    if (!t->t)
        return -1;
    if (x) {
        t->in_session = x;
        x->tasks++;
        session_touch(x);
    }
    if (sbx_log_enabled(SBX_LOG_INFO)) {
        char tenant[128], session[128];
        sbx_log(SBX_LOG_INFO, "task started id=%s tenant=%s session=%s sandbox=%s", t->id,
                sbx_log_safe(t->clone.tenant, tenant, sizeof(tenant)),
                t->session[0] ? sbx_log_safe(t->session, session, sizeof(session)) : "-",
                x ? x->cgname : t->name);
    }
    sbx_runtime_emit(rt, t->clone.tenant, t->session, "task_running", task_event_data(t, "running"),
                     NULL);
    sbx_runtime_emit(rt, t->clone.tenant, t->session, "exec_started", task_event_data(t, "running"),
                     NULL);
    return 0;
}

/* Round robin over the tenants with waiting tasks: one tenant's burst waits
 * its turn behind everyone else's next task. */
static struct rt_task *dequeue(struct sbx_runtime *rt)
{
    struct rt_tenant *q = rt->ring;
    if (!q)
        return NULL;
    struct rt_task *t = q->head;
    q->head = t->next;
    if (!q->head)
        q->tail = NULL;
    q->queued--;
    rt->queued--;
    /* Move this tenant to the back (or drop it when empty). */
    rt->ring = q->next;
    if (q->queued) {
        q->next = NULL;
        struct rt_tenant **p = &rt->ring;
        while (*p)
            p = &(*p)->next;
        *p = q;
    } else {
        free(q);
    }
    t->next = NULL;
    return t;
}

static struct rt_tenant *tenant_queue(struct sbx_runtime *rt, const char *code, bool create);

/* Into its tenant's queue, at the back or the front (the tenant joins the
 * ring if it is not in it); -1 only when a tenant queue cannot be made. */
static int queue_put(struct sbx_runtime *rt, struct rt_task *t, bool front)
{
    struct rt_tenant *q = tenant_queue(rt, t->clone.tenant, true);
    if (!q)
        return -1;
    if (front) {
        t->next = q->head;
        q->head = t;
        if (!q->tail)
            q->tail = t;
    } else {
        t->next = NULL;
        if (q->tail)
            q->tail->next = t;
        else
            q->head = t;
        q->tail = t;
    }
    q->queued++;
    rt->queued++;
    return 0;
}

static void start_next(struct sbx_runtime *rt)
{
    /* Every queued task is looked at, in the queue's fair order, while there
     * is room; those whose session is still being set up are held aside and
     * go back to the front of their tenants' queues, in their order (the
     * session's readiness, or its end, calls us again). */
    struct rt_task *held = NULL;
    while (rt->running < rt->o.cfg->max_concurrent) {
        struct rt_task *t = dequeue(rt);
        if (!t)
            break;
        struct rt_session *x = find_session(rt, t->clone.tenant, t->session);
        if (x && !x->ready) {
            t->next = held; /* reversed: pushed back to the front below */
            held = t;
            continue;
        }
        sbx_err e = {0};
        char msg[600];
        if (task_start(t, &e) < 0) {
            /* The task could not even start: it failed, with the reason. */
            sbx_err_format(&e, msg, sizeof(msg));
            if (t->t) {
                sbx_task_free(t->t);
                t->t = NULL;
            }
            char why[300];
            sbx_log(SBX_LOG_WARN, "task failed to start id=%s error=%s", t->id,
                    sbx_log_safe(msg, why, sizeof(why)));
            finish(t, SBX_TASK_FAILED, msg, NULL, NULL, 0, NULL, 0, 125);
            continue;
        }
        rt->running++;
    }
    while (held) {
        struct rt_task *t = held;
        held = t->next;
        if (queue_put(rt, t, true) < 0)
            finish(t, SBX_TASK_FAILED, "out of memory", NULL, NULL, 0, NULL, 0, 125);
    }
}

static struct rt_tenant *tenant_queue(struct sbx_runtime *rt, const char *code, bool create)
{
    for (struct rt_tenant *q = rt->ring; q; q = q->next)
        if (strcmp(q->code, code) == 0)
            return q;
    if (!create)
        return NULL;
    struct rt_tenant *q = calloc(1, sizeof(*q));
    if (!q)
        return NULL;
    snprintf(q->code, sizeof(q->code), "%s", code);
    struct rt_tenant **p = &rt->ring;
    while (*p)
        p = &(*p)->next;
    *p = q;
    return q;
}

static char **strv_dup(const char *const *v, size_t extra_slots)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    char **out = calloc(n + extra_slots + 1, sizeof(*out));
    for (size_t i = 0; out && i < n; i++)
        if (!(out[i] = strdup(v[i]))) {
            free_strv(out);
            return NULL;
        }
    return out;
}

/* argv from a language and code: the environment's command, then the code. */
static char **code_argv(const struct sbx_config *cfg, const char *language, const char *code,
                        sbx_err *err)
{
    const struct sbx_environment *env = sbx_config_environment(cfg, language);
    if (!env) {
        sbx_err_set(err, EINVAL, "unknown language or environment '%s'", language);
        return NULL;
    }
    char **argv = strv_dup((const char *const *)env->command.v, 1);
    if (argv && !(argv[env->command.n] = strdup(code))) {
        free_strv(argv);
        argv = NULL;
    }
    if (!argv)
        sbx_err_set(err, ENOMEM, "command");
    return argv;
}

/* A task's environment: the fixed base, the operator's injected keys (all
 * tenants, then this tenant's), then the request's own. */
static char **task_env(const struct sbx_config *cfg, enum sbx_net_policy net, const char *tenant,
                       const char *const *req, sbx_err *err)
{
    const struct sbx_tenant_conf *tc = sbx_config_tenant(cfg, tenant);
    struct sbx_egress_env proxy;
    sbx_egress_env_make(&proxy, cfg->network.proxy_port);
    size_t n_proxy = net == SBX_NET_PROXY ? SBX_EGRESS_ENV_COUNT : 0;
    size_t n = n_proxy + cfg->task_env.n + (tc ? tc->env.n : 0);
    for (size_t i = 0; req && req[i]; i++)
        n++;
    const char **all = calloc(n + 1, sizeof(*all));
    if (!all) {
        sbx_err_set(err, ENOMEM, "environment");
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < n_proxy; i++)
        all[k++] = proxy.v[i];
    for (size_t i = 0; i < cfg->task_env.n; i++)
        all[k++] = cfg->task_env.v[i];
    for (size_t i = 0; tc && i < tc->env.n; i++)
        all[k++] = tc->env.v[i];
    for (size_t i = 0; req && req[i]; i++)
        all[k++] = req[i];
    char **env = sbx_env_build(all, k, err);
    free(all);
    return env;
}

static size_t strv_len(const char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

/* The operator's rules plus the request's, as one policy of the task. */
static struct sbx_policy *task_policy(struct sbx_runtime *rt, const struct sbx_task_request *req,
                                      sbx_err *err)
{
    struct sbx_policy_opts po = *rt->o.policy_opts;
    const char *const *lists[2][2] = {{po.allow, req->allow}, {po.deny, req->deny}};
    const char **merged[2] = {NULL, NULL};
    struct sbx_policy *p = NULL;
    for (int i = 0; i < 2; i++) {
        size_t a = strv_len(lists[i][0]), b = strv_len(lists[i][1]);
        if (!(merged[i] = calloc(a + b + 1, sizeof(char *)))) {
            sbx_err_set(err, ENOMEM, "policy");
            goto out;
        }
        if (a)
            memcpy(merged[i], lists[i][0], a * sizeof(char *));
        if (b)
            memcpy(merged[i] + a, lists[i][1], b * sizeof(char *));
    }
    po.allow = merged[0];
    po.deny = merged[1];
    if (req->net_default >= 0)
        po.def = (enum sbx_default)req->net_default;
    p = sbx_policy_new(&po, err);
out:
    free(merged[0]);
    free(merged[1]);
    return p;
}

static int bounded(const char *what, double v, double max, sbx_err *err)
{
    if (v < 0 || v > max)
        return sbx_err_set(err, EINVAL, "%s %g is above the maximum %g", what, v, max);
    return 0;
}

int sbx_runtime_submit(struct sbx_runtime *rt, const struct sbx_task_request *req,
                       sbx_runtime_done_fn done, void *ud, char id[SBX_ID_SIZE], sbx_err *err)
{
    const struct sbx_config *cfg = rt->o.cfg;
    struct rt_tenant *q = tenant_queue(rt, req->clone.tenant, false);
    if ((q && q->queued >= cfg->queue_per_tenant) || rt->queued >= cfg->queue_size)
        return sbx_err_set(err, EAGAIN, "the task queue of tenant '%s' is full", req->clone.tenant);
    if (bounded("timeoutSeconds", req->timeout_s, cfg->max.timeout_s, err) < 0 ||
        bounded("memoryMB", (double)req->memory_bytes / (1 << 20),
                (double)cfg->max.memory_bytes / (1 << 20), err) < 0 ||
        bounded("pids", (double)req->pids, (double)cfg->max.pids, err) < 0 ||
        bounded("cpu", req->cpu_cores, cfg->max.cpu_cores, err) < 0)
        return -1;
    struct rt_task *t = calloc(1, sizeof(*t));
    if (!t)
        return sbx_err_set(err, ENOMEM, "task");
    t->rt = rt;
    t->clone = req->clone;
    snprintf(t->session, sizeof(t->session), "%s",
             req->session && *req->session ? req->session : rt->default_session);
    t->argv = req->argv ? strv_dup(req->argv, 0) : code_argv(cfg, req->language, req->code, err);
    /* Code in a language runs with its environment's settings. */
    const struct sbx_environment *envc =
        req->argv ? NULL : sbx_config_environment(cfg, req->language ? req->language : "");
    t->net = req->net >= 0 ? (enum sbx_net_policy)req->net : envc ? envc->net : cfg->net;
    t->env = t->argv ? task_env(cfg, t->net, req->clone.tenant, req->env, err) : NULL;
    if (!t->argv || !t->env || !t->argv[0]) {
        if (t->argv && !t->argv[0])
            sbx_err_set(err, EINVAL, "command is empty");
        task_free(t);
        return -1;
    }
    if (req->stdin_len && !(t->stdin_data = malloc(req->stdin_len))) {
        task_free(t);
        return sbx_err_set(err, ENOMEM, "stdin");
    }
    if (req->stdin_len)
        memcpy(t->stdin_data, req->stdin_data, req->stdin_len);
    t->stdin_len = req->stdin_len;
    const struct sbx_limits *dl = envc ? &envc->limits : &cfg->limits;
    t->timeout_s = req->timeout_s > 0 ? req->timeout_s : dl->timeout_s;
    t->lim.memory_bytes = req->memory_bytes ? req->memory_bytes : dl->memory_bytes;
    t->lim.pids = req->pids ? req->pids : dl->pids;
    t->lim.cpu_cores = req->cpu_cores > 0 ? req->cpu_cores : dl->cpu_cores;
    t->output_limit = dl->output_bytes;
    t->file_size = dl->file_size_bytes;
    t->tmp_size = dl->tmp_bytes;
    t->seccomp = envc ? envc->seccomp : cfg->seccomp;
    if ((req->net_default >= 0 || req->allow || req->deny) &&
        !(t->own_policy = task_policy(rt, req, err))) {
        task_free(t);
        return -1;
    }

    json_t *cmd = json_array();
    for (size_t i = 0; t->argv[i]; i++)
        json_array_append_new(cmd, sbx_json_text(t->argv[i], strlen(t->argv[i])));
    char *cmd_text = json_dumps(cmd, JSON_COMPACT);
    json_decref(cmd);
    char limits[256];
    snprintf(limits, sizeof(limits),
             "{\"timeoutSeconds\":%g,\"memoryBytes\":%llu,\"pids\":%llu,\"cpu\":%g}", t->timeout_s,
             (unsigned long long)t->lim.memory_bytes, (unsigned long long)t->lim.pids,
             t->lim.cpu_cores);
    struct sbx_store_task rec = {.tenant = t->clone.tenant,
                                 .clone_key = t->clone.key,
                                 .clone_id = t->clone.id,
                                 .session_id = t->session,
                                 .command = cmd_text,
                                 .language = req->argv ? NULL : req->language,
                                 .code = req->argv ? NULL : req->code,
                                 .limits = limits};
    int rc = cmd_text ? sbx_store_task_insert(rt->o.store, &rec, err)
                      : sbx_err_set(err, ENOMEM, "command");
    free(cmd_text);
    if (rc < 0 || !(q = tenant_queue(rt, t->clone.tenant, true))) {
        if (rc == 0)
            sbx_err_set(err, ENOMEM, "queue");
        task_free(t);
        return -1;
    }
    memcpy(t->id, rec.id, SBX_ID_SIZE);
    memcpy(id, rec.id, SBX_ID_SIZE);
    t->done = done;
    t->ud = ud;
    (void)queue_put(rt, t, false); /* its tenant's queue exists: cannot fail */
    t->all_next = rt->active;
    rt->active = t;
    start_next(rt);
    return 0;
}

static struct rt_task *find_active(struct sbx_runtime *rt, const char *id)
{
    for (struct rt_task *t = rt->active; t; t = t->all_next)
        if (strcmp(t->id, id) == 0)
            return t;
    return NULL;
}

void sbx_runtime_forget(struct sbx_runtime *rt, const char *id)
{
    struct rt_task *t = find_active(rt, id);
    if (t)
        t->done = NULL, t->ud = NULL;
}

/* Remove a queued task from its tenant's queue. */
static void unqueue(struct sbx_runtime *rt, struct rt_task *t)
{
    struct rt_tenant *q = tenant_queue(rt, t->clone.tenant, false);
    if (!q)
        return;
    struct rt_task *prev = NULL;
    for (struct rt_task *c = q->head; c; prev = c, c = c->next) {
        if (c != t)
            continue;
        if (prev)
            prev->next = c->next;
        else
            q->head = c->next;
        if (q->tail == c)
            q->tail = prev;
        q->queued--;
        rt->queued--;
        break;
    }
    if (!q->queued) {
        for (struct rt_tenant **p = &rt->ring; *p; p = &(*p)->next)
            if (*p == q) {
                *p = q->next;
                break;
            }
        free(q);
    }
}

int sbx_runtime_cancel(struct sbx_runtime *rt, const char *id, sbx_err *err)
{
    struct rt_task *t = find_active(rt, id);
    if (!t)
        return sbx_err_set(err, ENOENT, "task %s is not queued or running", id);
    if (t->t) {
        sbx_task_cancel(t->t); /* on_task_done records it as canceled */
        return 0;
    }
    unqueue(rt, t);
    finish(t, SBX_TASK_CANCELED, "canceled before it started", NULL, NULL, 0, NULL, 0, 124);
    return 0;
}

int sbx_runtime_set_network(struct sbx_runtime *rt, const char *id, int net_default,
                            const char *const *allow, const char *const *deny, sbx_err *err)
{
    struct rt_task *t = find_active(rt, id);
    if (!t || !t->t)
        return sbx_err_set(err, ENOENT, "task %s is not running", id);
    struct sbx_egress *eg = t->eg;
    if (!eg)
        return sbx_err_set(err, ENOTSUP, "task %s has no egress (its policy is not proxy)", id);
    struct sbx_task_request req = {.net_default = net_default, .allow = allow, .deny = deny};
    return policy_replace(rt, eg, &req, &t->own_policy, &t->retired, err);
}

void sbx_runtime_counts(const struct sbx_runtime *rt, unsigned *running, unsigned *queued)
{
    *running = rt->running;
    *queued = rt->queued;
}

void sbx_runtime_tenant_counts(const struct sbx_runtime *rt, const char *tenant, unsigned *running,
                               unsigned *queued)
{
    *running = *queued = 0;
    for (const struct rt_task *t = rt->active; t; t = t->all_next)
        if (strcmp(t->clone.tenant, tenant) == 0)
            (*(t->t ? running : queued))++;
}

const char *sbx_runtime_default_session(const struct sbx_runtime *rt)
{
    return rt->default_session;
}

struct sbx_runtime *sbx_runtime_new(const struct sbx_runtime_opts *o, sbx_err *err)
{
    struct sbx_runtime *rt = calloc(1, sizeof(*rt));
    if (!rt) {
        sbx_err_set(err, ENOMEM, "runtime");
        return NULL;
    }
    rt->o = *o;
    snprintf(rt->default_session, sizeof(rt->default_session), "%s",
             o->cfg->runtime_id ? o->cfg->runtime_id : "default");
    return rt;
}

void sbx_runtime_free(struct sbx_runtime *rt)
{
    if (!rt)
        return;
    while (rt->sessions)
        session_free(rt->sessions);
    for (struct mounted_ws *m = rt->mounted, *next; m; m = next) {
        next = m->next;
        free(m->path);
        free(m);
    }
    /* Those of an earlier run that crashed too. */
    sbx_ws_quota_release_all(rt->o.cfg->workspace_root);
    while (rt->active) {
        struct rt_task *t = rt->active;
        if (t->t) {
            /* Kill it now and record it; the engine's callbacks are not awaited. */
            sbx_task_cancel(t->t);
            rt->running--;
            finish(t, SBX_TASK_CANCELED, "the daemon stopped", NULL, NULL, 0, NULL, 0, 124);
        } else {
            unqueue(rt, t);
            finish(t, SBX_TASK_CANCELED, "the daemon stopped", NULL, NULL, 0, NULL, 0, 124);
        }
    }
    free(rt);
}
