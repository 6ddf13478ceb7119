#include "exec/task.h"

#include <event2/buffer.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/time.h"
#include "exec/pool_int.h"
#include "isolate/spawner.h"

#define READ_CHUNK 65536
/* Relayed stdin kept in memory before we stop reading the caller's fd. */
#define STDIN_HIGH_WATER (1 << 20)
/* The sandbox's release after its task: the kernel gives no event for a
 * cgroup that is empty and removable (v1 has none; see isolate/cgroup.c), so
 * it is tried again from a timer every RELEASE_RETRY_MS, for at most
 * RELEASE_BOUND_MS (as long as the synchronous removal used to poll); past
 * that the cgroup is left and the report's warning says so. */
#define RELEASE_RETRY_MS 10
#define RELEASE_BOUND_MS 1000

struct sbx_task;
struct stream {
    struct sbx_task *task;
    int idx; /* 0 stdout, 1 stderr */
    struct event *ev;
    struct evbuffer *kept;
    uint64_t total;
    bool truncated;
    bool eof;
};

struct sbx_task {
    struct sbx_task_opts o;
    struct event_base *base;
    struct sbx_sandbox sb;
    struct stream out[2]; /* stdout, stderr */
    struct event *ev_sync, *ev_exit, *ev_timer, *ev_stdin_w, *ev_stdin_r, *ev_release;
    struct evbuffer *stdin_buf;
    bool stdin_src_eof, stdin_pollable;
    bool init_gone, timed_out, canceled, finished;
    bool released;            /* the sandbox is gone (or given up on) */
    int64_t release_deadline; /* sbx_mono_ms() */
    bool draining;            /* init is gone: reading what is left in the pipes */
    struct sbx_init_msg exited, setup_error, exec_error;
    bool have_exited, have_setup_error, have_exec_error;
    struct waiter *spawning; /* its sandbox (or its attach) is asked of the spawner */
    struct sets_wait *sets;  /* its pooled sandbox's address sets are being made its own */
    int pool_slot;           /* a pooled sandbox's host id range (exec/pool.c), -1 none */
    /* The spec's binds and rules text, copied: a pooled take's attach and
     * its cold fallback outlive the caller's (rt_task_start's) copies. */
    struct sbx_mount mounts[SBX_MOUNTS_MAX];
    char *net_rules_arg;
    struct timespec t0;
    struct sbx_report report;
    /* A session's task shares the session's memory cgroup: its OOM kills
     * when the task started (join_oom: counted), so a SIGKILL of the task
     * while they rose is reported as the OOM killer's. */
    struct sbx_cgroup join_cg;
    uint64_t join_oom0;
    bool join_oom;
};

static double since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* What init reported, in the words of sbx_err_format. */
static void describe_msg(char *buf, size_t len, const struct sbx_init_msg *m)
{
    sbx_err e = {.errnum = m->errnum};
    snprintf(e.stage, sizeof(e.stage), "%s", m->stage);
    snprintf(e.msg, sizeof(e.msg), "%s", m->text);
    sbx_err_format(&e, buf, len);
}

static void build_report(struct sbx_task *t)
{
    struct sbx_report *r = &t->report;
    struct sbx_cg_stats st = {0};
    /* A session's task shares its cgroup, its own usage comes from rusage;
     * unless the cgroup it joined is its own (v2: sbx_cgroup_create_sub). */
    if (!t->sb.joined || t->sb.cg.task_own) {
        sbx_cgroup_stats(&t->sb.cg, &st, NULL);
    } else if (t->join_oom) {
        struct sbx_cg_stats js = {0};
        sbx_cgroup_stats(&t->join_cg, &js, NULL);
        st.oom_kills = js.oom_kills > t->join_oom0;
    }
    r->wall_s = since(&t->t0);
    r->cgroup_mode = t->sb.cg.mode;
    r->limits.cpu_enforced = t->sb.cg.cpu_enforced;
    r->cpu_s = st.have_cpu ? (double)st.cpu_usec / 1e6
                           : (double)(t->exited.utime_us + t->exited.stime_us) / 1e6;
    /* Without cgroups: the largest sum init's memory watch saw, or the
     * largest process when that is more (it ran between two samples). */
    uint64_t maxrss = (uint64_t)t->exited.maxrss_kb * 1024,
             watched = (uint64_t)t->exited.mem_peak_bytes;
    r->peak_memory_bytes = st.have_mem ? st.peak_mem_bytes : maxrss > watched ? maxrss : watched;
    r->oom_killed = st.oom_kills > 0 || t->exited.mem_killed;
    r->stdout_bytes = t->out[0].total, r->stdout_truncated = t->out[0].truncated;
    r->stderr_bytes = t->out[1].total, r->stderr_truncated = t->out[1].truncated;

    int ws = t->exited.wstatus;
    if (t->have_setup_error) {
        r->outcome = SBX_OUTCOME_SETUP_ERROR, r->exit_code = 125;
        describe_msg(r->message, sizeof(r->message), &t->setup_error);
    } else if (t->timed_out) {
        r->outcome = SBX_OUTCOME_TIMEOUT, r->exit_code = 124;
        snprintf(r->message, sizeof(r->message), "timed out after %gs; every process killed",
                 t->o.timeout_s);
    } else if (t->canceled) {
        r->outcome = SBX_OUTCOME_CANCELED, r->exit_code = 124;
        snprintf(r->message, sizeof(r->message), "canceled; every process killed");
    } else if (t->have_exited && WIFSIGNALED(ws)) {
        r->signal = WTERMSIG(ws), r->exit_code = 128 + r->signal;
        r->outcome = r->signal == SIGKILL && r->oom_killed ? SBX_OUTCOME_OOM : SBX_OUTCOME_SIGNALED;
        if (r->outcome == SBX_OUTCOME_OOM && t->exited.mem_killed)
            snprintf(r->message, sizeof(r->message),
                     "killed by the memory watch: the sandbox held %llu bytes, over the "
                     "%llu-byte memory limit",
                     (unsigned long long)t->exited.mem_peak_bytes,
                     (unsigned long long)r->limits.memory_bytes);
        else if (r->outcome == SBX_OUTCOME_OOM)
            snprintf(r->message, sizeof(r->message),
                     "killed by the OOM killer at the %llu-byte "
                     "memory limit",
                     (unsigned long long)r->limits.memory_bytes);
        else
            snprintf(r->message, sizeof(r->message), "killed by signal %d (%s)", r->signal,
                     strsignal(r->signal));
    } else if (t->have_exited) {
        r->outcome = SBX_OUTCOME_EXITED, r->exit_code = WEXITSTATUS(ws);
        if (t->have_exec_error)
            describe_msg(r->message, sizeof(r->message), &t->exec_error);
    } else if (r->oom_killed) {
        r->outcome = SBX_OUTCOME_OOM, r->exit_code = 137, r->signal = SIGKILL;
        snprintf(r->message, sizeof(r->message), "the sandbox was killed by the OOM killer");
    } else {
        r->outcome = SBX_OUTCOME_SETUP_ERROR, r->exit_code = 125;
        snprintf(r->message, sizeof(r->message), "sandbox init ended before the task did");
    }
}

static void on_stream(evutil_socket_t fd, short what, void *arg);
static void release_try(struct sbx_task *t);

/* Everything is over when init is gone: its pidfd is readable only once
 * every process of its pid namespace is dead (a session's task: when its
 * sub-init is). What is in the output pipes now is read and the rest is not
 * waited for, since the pipes' write ends may live on elsewhere: in what a
 * session's task left running in the background, or in any process the
 * task handed them to over a unix socket (SCM_RIGHTS), which could
 * otherwise keep the task "running" past its timeout and its cancel. */
static void maybe_finish(struct sbx_task *t)
{
    if (t->finished || !t->init_gone)
        return;
    t->draining = true;
    for (int i = 0; i < 2; i++)
        for (int rounds = 0; rounds < 16 && !t->out[i].eof; rounds++)
            on_stream(event_get_fd(t->out[i].ev), EV_READ, &t->out[i]);
    for (int i = 0; i < 2; i++)
        if (!t->out[i].eof)
            event_del(t->out[i].ev);
    t->out[0].eof = t->out[1].eof = true;
    t->finished = true;
    event_del(t->ev_timer);
    event_del(t->ev_sync);
    /* Drain the last messages init sent before exiting. */
    struct sbx_init_msg m;
    while (recv(t->sb.sync_fd, &m, sizeof(m), MSG_DONTWAIT) == (ssize_t)sizeof(m)) {
        if (m.kind == SBX_MSG_EXITED)
            t->exited = m, t->have_exited = true;
        else if (m.kind == SBX_MSG_SETUP_ERROR)
            t->setup_error = m, t->have_setup_error = true;
        else if (m.kind == SBX_MSG_EXEC_ERROR)
            t->exec_error = m, t->have_exec_error = true;
    }
    build_report(t);
    t->release_deadline = sbx_mono_ms() + RELEASE_BOUND_MS;
    release_try(t);
}

/* One release step; on_done once the sandbox is gone or given up on. Never
 * waits: a cgroup not removable yet is asked again from ev_release. */
static void release_try(struct sbx_task *t)
{
    sbx_err e = {0};
    if (sbx_sandbox_release_step(&t->sb, &e) < 0) {
        if (e.errnum == EBUSY && sbx_mono_ms() < t->release_deadline) {
            struct timeval tv = {.tv_usec = RELEASE_RETRY_MS * 1000};
            if (event_add(t->ev_release, &tv) == 0)
                return;
        }
        sbx_sandbox_abandon(&t->sb);
        sbx_err_wrap(&e, "release");
        sbx_err_format(&e, t->report.warning, sizeof(t->report.warning));
        t->pool_slot = -1; /* something may live on under its ids: never used again */
    }
    exec_pool_slot_put(t->pool_slot);
    t->pool_slot = -1;
    t->released = true;
    if (t->o.on_done)
        t->o.on_done(t->o.ud, t);
}

static void on_release(evutil_socket_t fd, short what, void *arg)
{
    release_try(arg);
}

static void on_sync(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_task *t = arg;
    struct sbx_init_msg m;
    ssize_t n = recv(fd, &m, sizeof(m), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        event_del(t->ev_sync);
        return;
    }
    if (n != (ssize_t)sizeof(m))
        return;
    switch (m.kind) {
    case SBX_MSG_EXITED:
        t->exited = m, t->have_exited = true;
        break;
    case SBX_MSG_SETUP_ERROR:
        t->setup_error = m, t->have_setup_error = true;
        break;
    case SBX_MSG_EXEC_ERROR:
        t->exec_error = m, t->have_exec_error = true;
        break;
    default:
        break;
    }
}

static void on_exit_ev(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_task *t = arg;
    t->init_gone = true;
    maybe_finish(t);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_task *t = arg;
    t->timed_out = true;
    sbx_sandbox_kill(&t->sb);
}

static void on_stream(evutil_socket_t fd, short what, void *arg)
{
    struct stream *s = arg;
    struct sbx_task *t = s->task;
    int idx = s->idx;
    char buf[READ_CHUNK];
    for (int rounds = 0; rounds < 16; rounds++) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n <= 0) {
            s->eof = true;
            event_del(s->ev);
            if (!t->draining)
                maybe_finish(t);
            return;
        }
        uint64_t room = s->total < t->o.output_limit ? t->o.output_limit - s->total : 0;
        size_t keep = (uint64_t)n < room ? (size_t)n : (size_t)room;
        s->total += (uint64_t)n;
        if (keep < (size_t)n)
            s->truncated = true;
        if (keep) {
            evbuffer_add(s->kept, buf, keep);
            if (t->o.on_output)
                t->o.on_output(t->o.ud, idx == 0 ? SBX_STDOUT : SBX_STDERR, buf, keep);
        }
    }
}

static void close_stdin(struct sbx_task *t)
{
    if (t->ev_stdin_w)
        event_del(t->ev_stdin_w);
    if (t->ev_stdin_r)
        event_del(t->ev_stdin_r);
    if (t->sb.stdin_fd >= 0) {
        close(t->sb.stdin_fd);
        t->sb.stdin_fd = -1;
    }
}

/* Pull from the caller's fd into the buffer; for a regular file (which
 * cannot be polled) this is done whenever the pipe has room. */
static void fill_stdin(struct sbx_task *t)
{
    char buf[READ_CHUNK];
    ssize_t n = read(t->o.stdin_fd, buf, sizeof(buf));
    if (n > 0)
        evbuffer_add(t->stdin_buf, buf, (size_t)n);
    else if (n == 0 || (errno != EAGAIN && errno != EINTR))
        t->stdin_src_eof = true;
}

static void on_stdin_writable(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_task *t = arg;
    if (t->o.stdin_fd >= 0 && !t->stdin_pollable && !t->stdin_src_eof &&
        evbuffer_get_length(t->stdin_buf) == 0)
        fill_stdin(t);
    if (evbuffer_get_length(t->stdin_buf) > 0) {
        int n = evbuffer_write(t->stdin_buf, fd);
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
            close_stdin(t); /* the task closed its stdin: fine */
            return;
        }
    }
    if (evbuffer_get_length(t->stdin_buf) == 0) {
        if (t->stdin_src_eof || t->o.stdin_fd < 0) {
            close_stdin(t);
            return;
        }
        if (t->stdin_pollable) {
            event_del(t->ev_stdin_w);
            event_add(t->ev_stdin_r, NULL);
        }
    }
}

static void on_stdin_readable(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_task *t = arg;
    fill_stdin(t);
    event_add(t->ev_stdin_w, NULL);
    if (t->stdin_src_eof || evbuffer_get_length(t->stdin_buf) > STDIN_HIGH_WATER)
        event_del(t->ev_stdin_r);
}

static int setup_stdin(struct sbx_task *t, sbx_err *err)
{
    set_nonblock(t->sb.stdin_fd);
    t->stdin_buf = evbuffer_new();
    t->ev_stdin_w = event_new(t->base, t->sb.stdin_fd, EV_WRITE | EV_PERSIST, on_stdin_writable, t);
    if (!t->stdin_buf || !t->ev_stdin_w)
        return sbx_err_set(err, ENOMEM, "stdin relay");
    if (t->o.stdin_data && t->o.stdin_len)
        evbuffer_add(t->stdin_buf, t->o.stdin_data, t->o.stdin_len);
    if (t->o.stdin_fd < 0) {
        t->stdin_src_eof = true;
        if (evbuffer_get_length(t->stdin_buf) == 0) {
            close_stdin(t);
            return 0;
        }
        return event_add(t->ev_stdin_w, NULL);
    }
    /* epoll refuses regular files and devices like /dev/null: those never
     * block, so they are read whenever the pipe has room. */
    struct stat st;
    if (fstat(t->o.stdin_fd, &st) < 0)
        return sbx_err_set(err, errno, "stdin");
    t->stdin_pollable = S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || isatty(t->o.stdin_fd);
    if (!t->stdin_pollable)
        return event_add(t->ev_stdin_w, NULL);
    t->ev_stdin_r = event_new(t->base, t->o.stdin_fd, EV_READ | EV_PERSIST, on_stdin_readable, t);
    if (!t->ev_stdin_r)
        return sbx_err_set(err, ENOMEM, "stdin relay");
    return event_add(t->ev_stdin_r, NULL);
}

/* Its sandbox killed and released now (bounded, off the normal path); a
 * pooled sandbox's host id range is given back once nothing is left. */
static void kill_release_now(struct sbx_task *t)
{
    sbx_sandbox_kill(&t->sb);
    if (sbx_sandbox_release(&t->sb, NULL) == 0)
        exec_pool_slot_put(t->pool_slot);
    t->pool_slot = -1;
}

/* The caller's work on the new sandbox and its watch: on failure the
 * sandbox is gone, t is not freed, and err says why. */
static int start_watch(struct sbx_task *t, bool pooled, sbx_err *err)
{
    const struct sbx_task_opts *o = &t->o;
    struct event_base *base = t->base;
    /* The caller's work on the new sandbox (an egress) runs while the child
     * builds its root, ready before the task starts. A pooled sandbox has
     * its fds and its command already. */
    if (!pooled && ((o->on_spawn && o->on_spawn(o->ud, t->sb.netns_fd, err) < 0) ||
                    ((t->o.fds.init_exe < 0 || t->o.fds.seccomp < 0) &&
                     (!o->prepare || o->prepare(o->ud, &t->o.fds, err) < 0)) ||
                    sbx_sandbox_send_fds(&t->sb, &t->o.fds, err) < 0)) {
        kill_release_now(t);
        return -1;
    }
    set_nonblock(t->sb.stdout_fd);
    set_nonblock(t->sb.stderr_fd);
    int out_fds[2] = {t->sb.stdout_fd, t->sb.stderr_fd};
    for (int i = 0; i < 2; i++) {
        t->out[i].task = t, t->out[i].idx = i;
        t->out[i].kept = evbuffer_new();
        t->out[i].ev = event_new(base, out_fds[i], EV_READ | EV_PERSIST, on_stream, &t->out[i]);
    }
    t->ev_sync = event_new(base, t->sb.sync_fd, EV_READ | EV_PERSIST, on_sync, t);
    t->ev_exit = event_new(base, t->sb.pidfd, EV_READ, on_exit_ev, t);
    t->ev_timer = evtimer_new(base, on_timeout, t);
    t->ev_release = evtimer_new(base, on_release, t);
    /* From the task's start (its sandbox may have been asked of the spawner
     * a while ago), on the monotonic clock. */
    double secs = o->timeout_s > 0 ? o->timeout_s - since(&t->t0) : 365.0 * 86400;
    if (secs < 0)
        secs = 0;
    struct timeval tv = {.tv_sec = (time_t)secs,
                         .tv_usec = (suseconds_t)((secs - floor(secs)) * 1e6)};
    if (!t->out[0].kept || !t->out[1].kept || !t->out[0].ev || !t->out[1].ev || !t->ev_sync ||
        !t->ev_exit || !t->ev_timer || !t->ev_release || event_add(t->out[0].ev, NULL) < 0 ||
        event_add(t->out[1].ev, NULL) < 0 || event_add(t->ev_sync, NULL) < 0 ||
        event_add(t->ev_exit, NULL) < 0 || event_add(t->ev_timer, &tv) < 0 ||
        setup_stdin(t, err) < 0) {
        if (!err || !err->msg[0])
            sbx_err_set(err, ENOMEM, "task events");
        kill_release_now(t);
        return -1;
    }
    return 0;
}

/* ---- sandboxes asked of the spawner (isolate/spawner.h) ----
 * Its answers come in the order of the requests: one waiter each, in a
 * list; a task freed while it waits leaves its waiter empty, and the
 * sandbox that comes for it is killed. The loop never waits for a clone. */
struct waiter {
    struct sbx_task *t;
    struct pool_entry *pe;      /* a sandbox for the pool (exec/pool.c), or taken for t */
    bool attach;                /* not a sandbox: pe's mounts for t's clone, nfds of them */
    struct pool_holder *holder; /* ... for a session's holder instead of t */
    size_t nfds;
    sbx_spawned_fn fn; /* another caller's (sbx_spawn_async) */
    void *ud;
    struct waiter *next;
};
static struct waiter *waiting_head, *waiting_tail;
static struct event *ev_spawner;

/* The task ends as a setup error without a sandbox (or with one that is
 * gone already): the report, then the caller's on_done. */
static void spawn_failed(struct sbx_task *t, const sbx_err *e)
{
    /* A task canceled meanwhile ends canceled, whatever became of its sandbox. */
    t->have_setup_error = !t->canceled;
    t->setup_error = (struct sbx_init_msg){.kind = SBX_MSG_SETUP_ERROR, .errnum = e->errnum};
    snprintf(t->setup_error.stage, sizeof(t->setup_error.stage), "%s",
             e->stage[0] ? e->stage : sbx_stage_name(SBX_STAGE_SPAWN));
    snprintf(t->setup_error.text, sizeof(t->setup_error.text), "%s", e->msg);
    t->finished = t->released = true;
    build_report(t);
    if (t->o.on_done)
        t->o.on_done(t->o.ud, t);
}

/* t's sandbox is here: watched, or ended as a setup error when that fails;
 * a task canceled meanwhile is killed now. */
static void watch_or_fail(struct sbx_task *t, bool pooled)
{
    sbx_err e = {0};
    if (start_watch(t, pooled, &e) < 0)
        spawn_failed(t, &e);
    else if (t->canceled)
        sbx_sandbox_kill(&t->sb);
}

static struct waiter *waiter_pop(void)
{
    struct waiter *w = waiting_head;
    if (w && !(waiting_head = w->next))
        waiting_tail = NULL;
    return w;
}

static void start_cold(struct sbx_task *t);

/* A pooled sandbox taken for t whose command waits for its address sets
 * (exec_pool_sets_done): the job, and the attach's mounts to send with it. */
struct sets_wait {
    struct pool_entry *pe;
    void *job;
    struct event *ev;
    int fds[SBX_FDS_PASS_MAX];
    size_t nfds;
};

/* A helper that has not answered by then is killed: the task is built cold. */
#define SETS_WAIT_S 10

static void on_sets(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    struct sbx_task *t = arg;
    struct sets_wait *w = sbx_steal_pointer(&t->sets);
    event_free(w->ev);
    int slot = -1;
    bool late = what & EV_TIMEOUT;
    if (late)
        sbx_log(SBX_LOG_WARN,
                "pool: a pooled sandbox's address sets took over %ds: it is "
                "discarded, the task built cold",
                SETS_WAIT_S);
    int rc = exec_pool_sets_done(w->pe, t->canceled || late ? NULL : &t->o, w->job, w->fds, w->nfds,
                                 &t->sb, &slot);
    free(w);
    if (t->canceled) /* never run: the sandbox is gone */
        spawn_failed(t, &(sbx_err){.msg = "canceled"});
    else if (rc == 1) {
        t->pool_slot = slot;
        watch_or_fail(t, true);
    } else {
        start_cold(t);
    }
}

int exec_task_wait_sets(struct sbx_task *t, struct pool_entry *pe, void *job, const int *fds,
                        size_t n)
{
    struct sets_wait *w = n <= SBX_FDS_PASS_MAX ? calloc(1, sizeof(*w)) : NULL;
    if (w)
        w->ev = event_new(t->base, exec_pool_sets_fd(job), EV_READ, on_sets, t);
    struct timeval tv = {.tv_sec = SETS_WAIT_S};
    if (!w || !w->ev || event_add(w->ev, &tv) < 0) {
        if (w && w->ev)
            event_free(w->ev);
        free(w);
        return -1;
    }
    w->pe = pe, w->job = job, w->nfds = n;
    if (n)
        memcpy(w->fds, fds, n * sizeof(fds[0]));
    t->sets = w;
    return 0;
}

/* The clone's mounts for the pooled sandbox w->pe taken for w->t: it runs
 * there, or (its answer a failure, the sandbox gone) is built cold. */
static void attached(struct waiter *w, int rc, int *fds, const sbx_err *e)
{
    if (w->holder) {
        exec_pool_holder_attached(w->pe, w->holder, rc, fds, w->nfds, e);
        return;
    }
    struct sbx_task *t = w->t;
    if (t)
        t->spawning = NULL;
    if (t && t->canceled) { /* never run: the sandbox goes back untouched */
        exec_pool_attached(w->pe, NULL, NULL, rc, fds, w->nfds, e, NULL, NULL);
        spawn_failed(t, &(sbx_err){.msg = "canceled"});
        return;
    }
    int slot = -1;
    int got = exec_pool_attached(w->pe, t, t ? &t->o : NULL, rc, fds, w->nfds, e, t ? &t->sb : NULL,
                                 &slot);
    if (got == 2) /* on_sets goes on */
        return;
    if (got != 1) {
        if (t)
            start_cold(t);
        return;
    }
    t->pool_slot = slot;
    watch_or_fail(t, true);
}

static void on_spawner(evutil_socket_t fd, short what, void *arg)
{
    while (waiting_head) {
        struct sbx_sandbox sb;
        int fds[SBX_MOUNTS_MAX + 1];
        sbx_err e = {0};
        int rc = waiting_head->attach ? sbx_spawner_reply_attach(fds, waiting_head->nfds, &e)
                                      : sbx_spawner_reply(&sb, &e);
        if (rc == 0)
            return;
        if (rc == -2) { /* every request in flight is lost */
            event_free(ev_spawner);
            ev_spawner = NULL;
            struct waiter *w;
            while ((w = waiter_pop())) {
                struct sbx_task *t = w->t;
                if (w->attach) {
                    attached(w, -2, NULL, &e); /* built cold, in-process */
                    free(w);
                    continue;
                }
                if (w->pe)
                    exec_pool_arrived(w->pe, -2, NULL);
                if (w->fn)
                    w->fn(w->ud, -1, NULL, &e);
                free(w);
                if (t) {
                    t->spawning = NULL;
                    spawn_failed(t, &e);
                }
            }
            return;
        }
        struct waiter *w = waiter_pop();
        if (w->attach) {
            attached(w, rc, fds, &e);
            free(w);
            continue;
        }
        struct sbx_task *t = w->t;
        struct pool_entry *pe = w->pe;
        sbx_spawned_fn fn = w->fn;
        void *ud = w->ud;
        free(w);
        if (pe) {
            exec_pool_arrived(pe, rc, &sb);
            continue;
        }
        if (fn) {
            fn(ud, rc, rc == 1 ? &sb : NULL, &e);
            continue;
        }
        if (!t) {
            /* its task is gone: so is the sandbox (its cgroup removed once
             * empty, from the pool's timer) */
            if (rc == 1)
                exec_pool_bury(&sb);
            continue;
        }
        t->spawning = NULL;
        if (rc == -1) {
            spawn_failed(t, &e);
            continue;
        }
        t->sb = sb;
        watch_or_fail(t, false);
    }
    if (ev_spawner)
        event_del(ev_spawner);
}

void exec_spawner_drain(int64_t ms)
{
    int64_t deadline = sbx_mono_ms() + ms;
    while (waiting_head && ev_spawner && sbx_spawner_fd() >= 0) {
        int64_t left = deadline - sbx_mono_ms();
        struct pollfd p = {.fd = sbx_spawner_fd(), .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return;
        on_spawner(p.fd, EV_READ, NULL);
    }
}

/* Queue a request, spec's or (a set) an attach's: its waiter, or NULL (not
 * asked). */
static struct waiter *ask_spawner(struct event_base *base, const struct sbx_spec *spec,
                                  const struct sbx_attach *a)
{
    if (sbx_spawner_fd() < 0 || (spec && spec->join_pidfd >= 0))
        return NULL;
    if (!ev_spawner &&
        !(ev_spawner = event_new(base, sbx_spawner_fd(), EV_READ | EV_PERSIST, on_spawner, NULL)))
        return NULL;
    struct waiter *w = calloc(1, sizeof(*w));
    if (!w || event_add(ev_spawner, NULL) < 0 ||
        (a ? sbx_spawner_request_attach(a) : sbx_spawner_request(spec)) != 1) {
        free(w);
        if (!waiting_head)
            event_del(ev_spawner);
        return NULL;
    }
    if (waiting_tail)
        waiting_tail->next = w;
    else
        waiting_head = w;
    waiting_tail = w;
    return w;
}

int exec_spawner_ask_for_pool(struct event_base *base, const struct sbx_spec *spec,
                              struct pool_entry *pe, void **waiter)
{
    struct waiter *w = ask_spawner(base, spec, NULL);
    if (!w)
        return 0;
    w->pe = pe;
    *waiter = w;
    return 1;
}

void exec_spawner_detach(void *waiter)
{
    ((struct waiter *)waiter)->pe = NULL;
}

int sbx_spawn_async(struct event_base *base, const struct sbx_spec *spec, sbx_spawned_fn fn,
                    void *ud, void **handle)
{
    struct waiter *w = ask_spawner(base, spec, NULL);
    if (!w)
        return 0;
    w->fn = fn;
    w->ud = ud;
    *handle = w;
    return 1;
}

void sbx_spawn_async_cancel(void *handle, sbx_spawned_fn fn, void *ud)
{
    struct waiter *w = handle;
    w->fn = fn;
    w->ud = ud;
}

/* The attach is queued like a spawn: its answer comes in turn. */
int exec_spawner_ask_attach(struct event_base *base, const struct sbx_attach *a,
                            struct pool_entry *pe, struct sbx_task *t, struct pool_holder *h)
{
    struct waiter *w = ask_spawner(base, NULL, a);
    if (!w)
        return 0;
    w->t = t, w->holder = h, w->pe = pe, w->attach = true, w->nfds = a->n_mounts + 1;
    if (t)
        t->spawning = w;
    return 1;
}
/* 1: asked of the spawner (t waits); 0: make it here. */
static int spawn_remote(struct sbx_task *t)
{
    struct waiter *w = ask_spawner(t->base, &t->o.spec, NULL);
    if (!w)
        return 0;
    w->t = t;
    t->spawning = w;
    return 1;
}

struct sbx_task *sbx_task_start(struct event_base *base, const struct sbx_task_opts *o,
                                sbx_err *err)
{
    struct sbx_task *t = calloc(1, sizeof(*t));
    if (!t) {
        sbx_err_set(err, ENOMEM, "task");
        return NULL;
    }
    t->o = *o;
    t->base = base;
    t->pool_slot = -1;
    if (o->spec.n_mounts && o->spec.n_mounts <= SBX_MOUNTS_MAX) {
        memcpy(t->mounts, o->spec.mounts, o->spec.n_mounts * sizeof(t->mounts[0]));
        t->o.spec.mounts = t->mounts;
    }
    if (o->spec.net_rules_arg &&
        !(t->o.spec.net_rules_arg = t->net_rules_arg = strdup(o->spec.net_rules_arg))) {
        free(t);
        sbx_err_set(err, ENOMEM, "task");
        return NULL;
    }
    t->sb = (struct sbx_sandbox){.init_pid = -1,
                                 .pidfd = -1,
                                 .sync_fd = -1,
                                 .stdin_fd = -1,
                                 .stdout_fd = -1,
                                 .stderr_fd = -1,
                                 .netns_fd = -1};
    struct sbx_applied_limits *l = &t->report.limits;
    l->memory_bytes = o->spec.cg_limits.memory_bytes;
    l->pids = o->spec.cg_limits.pids;
    l->cpu_cores = o->spec.cg_limits.cpu_cores;
    l->timeout_s = o->timeout_s;
    l->file_size_bytes = o->spec.file_size_bytes;
    l->output_limit_bytes = o->output_limit;
    clock_gettime(CLOCK_MONOTONIC, &t->t0);
    if (o->spec.join_pidfd >= 0 && o->spec.join_cg) {
        struct sbx_cg_stats js = {0};
        t->join_cg = *o->spec.join_cg;
        sbx_cgroup_stats(&t->join_cg, &js, NULL);
        t->join_oom0 = js.oom_kills, t->join_oom = js.have_mem;
    }
    exec_pool_task_count(1);
    int pooled = exec_pool_take(base, &t->o, &t->sb, t);
    t->o.zygote_argv = t->o.zygote_envp = NULL; /* the caller's, for the take only */
    if (pooled == 2)
        return t;      /* attached() or on_sets() goes on */
    if (pooled == 1) { /* built ahead, command sent */
        if (start_watch(t, true, err) < 0) {
            t->finished = t->released = true;
            sbx_task_free(t);
            return NULL;
        }
        return t;
    }
    if (spawn_remote(t) == 1)
        return t; /* on_spawner goes on */
    if (sbx_spawn_local(&t->o.spec, &t->sb, err) < 0) {
        exec_pool_task_count(-1);
        free(t->net_rules_arg);
        free(t);
        return NULL;
    }
    if (start_watch(t, false, err) < 0) {
        t->finished = t->released = true;
        sbx_task_free(t);
        return NULL;
    }
    return t;
}

/* After a pooled sandbox's attach failed: built as any other, from the
 * loop (the task started already: a failure ends it as a setup error). */
static void start_cold(struct sbx_task *t)
{
    sbx_err e = {0};
    if (spawn_remote(t) == 1)
        return;
    if (sbx_spawn_local(&t->o.spec, &t->sb, &e) < 0)
        spawn_failed(t, &e);
    else
        watch_or_fail(t, false);
}

void sbx_task_cancel(struct sbx_task *t)
{
    if (t->finished || t->timed_out)
        return;
    t->canceled = true;
    sbx_sandbox_kill(&t->sb);
}

const struct sbx_report *sbx_task_report(const struct sbx_task *t)
{
    return &t->report;
}

const char *sbx_task_output(const struct sbx_task *t, enum sbx_stream s, size_t *len)
{
    struct evbuffer *b = t->out[s == SBX_STDOUT ? 0 : 1].kept;
    if (!b) { /* its sandbox never came (spawn_failed) */
        *len = 0;
        return "";
    }
    *len = evbuffer_get_length(b);
    return (const char *)evbuffer_pullup(b, -1);
}

void sbx_task_free(struct sbx_task *t)
{
    if (!t)
        return;
    exec_pool_task_count(-1);
    if (t->spawning) /* the sandbox that comes for it is killed */
        t->spawning->t = NULL;
    if (t->sets) { /* so is the one whose sets are being made */
        event_free(t->sets->ev);
        exec_pool_sets_done(t->sets->pe, NULL, t->sets->job, t->sets->fds, t->sets->nfds, NULL,
                            NULL);
        free(sbx_steal_pointer(&t->sets));
    }
    /* Off the normal path (the caller gives up on a live task, or on one whose
     * release is still retrying): the bounded synchronous release. */
    if (!t->finished)
        sbx_sandbox_kill(&t->sb);
    if (!t->released && sbx_sandbox_release(&t->sb, NULL) == 0)
        exec_pool_slot_put(t->pool_slot);
    struct event *evs[] = {t->out[0].ev, t->out[1].ev,  t->ev_sync,    t->ev_exit,
                           t->ev_timer,  t->ev_stdin_w, t->ev_stdin_r, t->ev_release};
    for (size_t i = 0; i < SBX_ARRAY_LEN(evs); i++)
        if (evs[i])
            event_free(evs[i]);
    for (int i = 0; i < 2; i++)
        if (t->out[i].kept)
            evbuffer_free(t->out[i].kept);
    if (t->stdin_buf)
        evbuffer_free(t->stdin_buf);
    free(t->net_rules_arg);
    free(t);
}
