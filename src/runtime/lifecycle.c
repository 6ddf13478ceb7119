/* The runtime of a clone, in the original's state machine: created until
 * its first start, ready (busy while tasks of the clone are queued or run),
 * stopped by a stop or after the idle timeout without work. A stopped
 * runtime refuses new tasks ("runtime stopped") until the next start; stop
 * cancels the clone's tasks and ends its live sessions. The clone's own
 * stream (the tenant's default session) hears runtime_started and
 * runtime_stopped. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/time.h"
#include "runtime/runtime_int.h"
#include "workspace/path.h"

enum clone_state { CLONE_CREATED, CLONE_READY, CLONE_STOPPED };

struct rt_clone_rt {
    struct sbx_runtime *rt;
    struct sbx_clone clone;
    enum clone_state state;
    int64_t started_at, last_event_at;
    struct event *ev_idle;
    struct rt_clone_rt *next;
};

static bool same_clone(const struct sbx_clone *a, const struct sbx_clone *b)
{
    return strcmp(a->tenant, b->tenant) == 0 && strcmp(a->key, b->key) == 0 &&
           strcmp(a->id, b->id) == 0;
}

static struct rt_clone_rt *find(struct sbx_runtime *rt, const struct sbx_clone *c)
{
    for (struct rt_clone_rt *x = rt->clones; x; x = x->next)
        if (same_clone(&x->clone, c))
            return x;
    return NULL;
}

static void on_idle(evutil_socket_t fd, short what, void *arg);

/* The record of c, made (created) on first need; NULL only without memory. */
static struct rt_clone_rt *get(struct sbx_runtime *rt, const struct sbx_clone *c)
{
    struct rt_clone_rt *x = find(rt, c);
    if (x)
        return x;
    if (!(x = calloc(1, sizeof(*x))))
        return NULL;
    if (!(x->ev_idle = evtimer_new(rt->o.base, on_idle, x))) {
        free(x);
        return NULL;
    }
    x->rt = rt;
    x->clone = *c;
    x->next = rt->clones;
    rt->clones = x;
    return x;
}

static unsigned active_of(const struct sbx_runtime *rt, const struct sbx_clone *c)
{
    unsigned n = 0;
    for (const struct rt_task *t = rt->active; t; t = t->all_next)
        if (same_clone(&t->clone, c))
            n++;
    return n;
}

/* Ready and without work: the idle timeout counts from now; else it is off. */
static void arm_idle(struct rt_clone_rt *x)
{
    double secs = x->rt->settings.idle_timeout_s;
    event_del(x->ev_idle);
    if (secs <= 0 || x->state != CLONE_READY || active_of(x->rt, &x->clone))
        return;
    struct timeval tv = {.tv_sec = (time_t)secs,
                         .tv_usec = (suseconds_t)((secs - (double)(time_t)secs) * 1e6)};
    if (event_add(x->ev_idle, &tv) < 0)
        sbx_log(SBX_LOG_WARN, "runtime idle timer not armed cloneId=%s", x->clone.id);
}

/* dir and its missing parents (0755). Its parents exist but for a new
 * clone's: one mkdir, the walk only when a parent is missing (each mkdir is
 * a path walk, on the loop). */
static int mkdir_parents(char *dir, sbx_err *err)
{
    if (mkdir(dir, 0755) == 0 || errno == EEXIST)
        return 0;
    if (errno != ENOENT)
        return sbx_err_set(err, errno, "control directory: mkdir %s", dir);
    for (char *p = dir + 1;; p++) {
        bool last = !*p;
        if (*p != '/' && !last)
            continue;
        *p = '\0';
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
            return sbx_err_set(err, errno, "control directory: mkdir %s", dir);
        if (last)
            return 0;
        *p = '/';
    }
}

/* The clone's control directory, as the original keeps it: root's, 0555,
 * holding main.pid (0444, the daemon's pid), rewritten at each start. */
static int control_write(struct sbx_runtime *rt, const struct sbx_clone *c, sbx_err *err)
{
    const char *root = rt->settings.control_dir;
    if (!root || !*root)
        return 0;
    cleanup_free char *dir = sbx_ws_dir(root, c->tenant, c->key, c->id, err);
    if (!dir)
        return -1;
    dir[strlen(dir) - strlen("/work")] = '\0';
    if (mkdir_parents(dir, err) < 0)
        return -1;
    char tmp[PATH_MAX], path[PATH_MAX], pid[24], had[24];
    int n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
    if (snprintf(tmp, sizeof(tmp), "%s/.main.pid.new", dir) >= (int)sizeof(tmp) ||
        snprintf(path, sizeof(path), "%s/main.pid", dir) >= (int)sizeof(path))
        return sbx_err_set(err, ENAMETOOLONG, "control directory %s", dir);
    /* A start again under this daemon: main.pid says so already (root's,
     * 0444, in a directory root's and 0555), nothing is rewritten. */
    struct stat ds, fs;
    int had_fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    ssize_t got = had_fd >= 0 ? read(had_fd, had, sizeof(had)) : -1;
    bool same = got == n && memcmp(had, pid, (size_t)n) == 0 && fstat(had_fd, &fs) == 0 &&
                fs.st_uid == 0 && (fs.st_mode & 07777) == 0444 && stat(dir, &ds) == 0 &&
                ds.st_uid == 0 && ds.st_gid == 0 && (ds.st_mode & 07777) == 0555;
    if (had_fd >= 0)
        close(had_fd);
    if (same)
        return 0;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0444);
    if (fd < 0)
        return sbx_err_set(err, errno, "control directory: %s", tmp);
    bool ok = write(fd, pid, (size_t)n) == n && fchmod(fd, 0444) == 0;
    int saved = errno;
    close(fd);
    if (!ok || rename(tmp, path) < 0) {
        saved = ok ? errno : saved;
        unlink(tmp);
        return sbx_err_set(err, saved, "control directory: %s", path);
    }
    if (chown(dir, 0, 0) < 0 || chmod(dir, 0555) < 0)
        return sbx_err_set(err, errno, "control directory: %s: owner and mode", dir);
    return 0;
}

static void stop(struct rt_clone_rt *x, const char *reason)
{
    struct sbx_runtime *rt = x->rt;
    event_del(x->ev_idle);
    x->state = CLONE_STOPPED;
    x->last_event_at = sbx_now_ms();
    /* Nothing of the clone goes on: its tasks end canceled (a running one
     * once its tree is dead), its live sessions end. */
    for (bool again = true; again;) {
        again = false;
        for (struct rt_task *t = rt->active; t; t = t->all_next)
            if (same_clone(&t->clone, &x->clone) && !t->stopping) {
                t->stopping = true;
                (void)sbx_runtime_cancel(rt, t->id, NULL);
                again = true; /* the list may have changed under us */
                break;
            }
    }
    rt_sessions_end_clone(rt, &x->clone, reason ? reason : "stopped");
    json_t *d = json_pack("{s:s, s:s}", "runtimeId", rt->default_session, "cloneId", x->clone.id);
    if (d && reason)
        json_object_set_new(d, "reason", json_string(reason));
    rt_emit(rt, x->clone.tenant, rt->default_session, "runtime_stopped", d);
}

static void on_idle(evutil_socket_t fd, short what, void *arg)
{
    struct rt_clone_rt *x = arg;
    if (x->state == CLONE_READY && !active_of(x->rt, &x->clone))
        stop(x, "idle_timeout");
}

int sbx_runtime_clone_start(struct sbx_runtime *rt, const struct sbx_clone *c, sbx_err *err)
{
    struct rt_clone_rt *x = get(rt, c);
    if (!x)
        return sbx_err_set(err, ENOMEM, "runtime");
    if (x->state == CLONE_READY) {
        arm_idle(x);
        return 1;
    }
    sbx_err ce = {0};
    if (control_write(rt, c, &ce) < 0) {
        /* The runtime works without it; the operator hears why. */
        char msg[600], why[300];
        sbx_log(SBX_LOG_WARN, "control directory not written cloneId=%s error=%s", c->id,
                sbx_log_safe(sbx_err_format(&ce, msg, sizeof(msg)), why, sizeof(why)));
    }
    x->state = CLONE_READY;
    x->started_at = x->last_event_at = sbx_now_ms();
    rt_emit(rt, c->tenant, rt->default_session, "runtime_started",
            json_pack("{s:s, s:s}", "runtimeId", rt->default_session, "cloneId", c->id));
    arm_idle(x);
    return 0;
}

void sbx_runtime_clone_stop(struct sbx_runtime *rt, const struct sbx_clone *c)
{
    struct rt_clone_rt *x = get(rt, c);
    if (x)
        stop(x, NULL);
    else
        rt_sessions_end_clone(rt, c, "stopped");
}

void sbx_runtime_clone_status(struct sbx_runtime *rt, const struct sbx_clone *c,
                              struct sbx_clone_status *out)
{
    const struct rt_clone_rt *x = find(rt, c);
    unsigned active = active_of(rt, c);
    enum clone_state st = x ? x->state : CLONE_CREATED;
    *out = (struct sbx_clone_status){.status = active && st != CLONE_STOPPED ? "busy"
                                               : st == CLONE_READY           ? "ready"
                                               : st == CLONE_STOPPED         ? "stopped"
                                                                             : "created",
                                     .started_at = x ? x->started_at : 0,
                                     .last_event_at = x ? x->last_event_at : 0,
                                     .active = active};
}

int rt_clone_admit(struct sbx_runtime *rt, const struct sbx_clone *c, sbx_err *err)
{
    const struct rt_clone_rt *x = find(rt, c);
    if (x && x->state == CLONE_STOPPED)
        return sbx_err_set(err, EINVAL, "runtime stopped");
    return 0;
}

void rt_clone_activity(struct sbx_runtime *rt, const struct sbx_clone *c)
{
    struct rt_clone_rt *x = find(rt, c);
    if (!x)
        return;
    x->last_event_at = sbx_now_ms();
    arm_idle(x);
}

void rt_clones_free(struct sbx_runtime *rt)
{
    while (rt->clones) {
        struct rt_clone_rt *x = rt->clones;
        rt->clones = x->next;
        event_free(x->ev_idle);
        free(x);
    }
}
