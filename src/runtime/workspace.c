/* The workspace of a clone: its host id range, its directory, its quota
 * image mounted once per daemon run. A clone's first image is formatted off
 * the loop: mkfs.ext4 runs as a child watched by its pidfd, and the clone's
 * tasks wait in the queue until it is done. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/pool.h"
#include "base/log.h"
#include "base/time.h"
#include "runtime/runtime_int.h"
#include "workspace/files.h"
#include "workspace/path.h"
#include "workspace/quota.h"

#define CLONE_ID_STRIDE 65536u
#define MAX_CLONES 60000u

static void images_dir(const struct sbx_runtime *rt, char *out, size_t len)
{
    snprintf(out, len, "%s/workspace-images", rt->settings.state_dir);
}

/* The mode in force: a runtime made without one (the unit tests) has the
 * loop's images, as before there were modes. */
static enum sbx_ws_quota_mode ws_mode(const struct sbx_runtime *rt)
{
    enum sbx_ws_quota_mode m = rt->settings.workspace_quota_mode;
    return m == SBX_WSQ_AUTO ? SBX_WSQ_LOOP : m;
}

static struct mounted_ws *find_mounted(const struct sbx_runtime *rt, const char *dir)
{
    for (struct mounted_ws *m = rt->mounted; m; m = m->next)
        if (strcmp(m->path, dir) == 0)
            return m;
    return NULL;
}

static bool is_mounted(const struct sbx_runtime *rt, const char *dir)
{
    return find_mounted(rt, dir) != NULL;
}

/* monitor: a workspace measured over its quota takes no new work. */
static int over_quota(const struct sbx_runtime *rt, const struct mounted_ws *m, sbx_err *err)
{
    return sbx_err_set(err, ENOSPC,
                       "the workspace of clone %s is over its quota: %llu MiB used of %llu MiB "
                       "(workspace_quota_mode monitor); delete files to go on",
                       m->clone.id, (unsigned long long)(m->used >> 20),
                       (unsigned long long)(rt->settings.workspace_quota_bytes >> 20));
}

static struct rt_format *find_format(struct sbx_runtime *rt, const char *dir)
{
    for (struct rt_format *x = rt->formats; x; x = x->next)
        if (strcmp(x->dir, dir) == 0)
            return x;
    return NULL;
}

void rt_format_unwait(struct rt_task *t)
{
    struct rt_format *x = t->format;
    if (!x)
        return;
    for (struct rt_task **p = &x->waiters; *p; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            break;
        }
    t->next = NULL;
    t->format = NULL;
    t->rt->preparing--;
}

void sbx_runtime_workspace_unwait(struct sbx_runtime *rt, void *ud)
{
    for (struct rt_format *x = rt->formats; x; x = x->next)
        rt_waiters_drop(&x->others, ud);
}

void rt_format_free(struct rt_format *x)
{
    while (x->waiters)
        rt_format_unwait(x->waiters);
    if (x->others) {
        sbx_err e = {0};
        sbx_err_set(&e, ECANCELED, "the daemon stopped before the workspace was made");
        struct rt_waiter *others = x->others;
        x->others = NULL;
        rt_waiters_notify(others, &e);
    }
    for (struct rt_format **p = &x->rt->formats; *p; p = &(*p)->next)
        if (*p == x) {
            *p = x->next;
            break;
        }
    if (x->ev) /* before its pidfd is closed */
        event_free(x->ev);
    sbx_ws_quota_job_abort(&x->f); /* a no-op once finished */
    free(x->dir);
    free(x);
}

/* dir is ready (mounted, given its quota, or watched) for clone c. */
static int remember(struct sbx_runtime *rt, const struct sbx_clone *c, const char *dir, uid_t uid,
                    gid_t gid)
{
    struct mounted_ws *m = calloc(1, sizeof(*m));
    if (!m || !(m->path = strdup(dir))) {
        free(m);
        return -1;
    }
    m->clone = *c;
    m->uid = uid;
    m->gid = gid;
    m->dirty = true;
    m->used_at = sbx_mono_ms();
    m->next = rt->mounted;
    rt->mounted = m;
    return 0;
}

/* Reap the format's helper (waiting when it still runs), once. */
static int format_finish(struct rt_format *x, sbx_err *err)
{
    if (!x->finished) {
        x->finished = true;
        x->rc = sbx_ws_quota_job_finish(&x->f, &x->err);
    }
    if (x->rc < 0 && err)
        *err = x->err;
    return x->rc;
}

/* mkfs ended: the tasks that waited for it start (in the slots they held),
 * or fail with its error, as do the clone's tasks still queued. */
static struct rt_format *format_start(struct sbx_runtime *rt, const struct sbx_clone *c,
                                      const char *dir, uid_t uid, gid_t gid, bool unmount,
                                      sbx_err *err);

static void on_formatted(evutil_socket_t fd, short what, void *arg)
{
    struct rt_format *x = arg;
    struct sbx_runtime *rt = x->rt;
    struct sbx_clone clone = x->clone;
    char msg[600] = "";
    if (format_finish(x, NULL) < 0) {
        char tenant_s[128], id_s[128], why[300];
        sbx_err_format(&x->err, msg, sizeof(msg));
        sbx_log(SBX_LOG_WARN, "workspace %s tenant=%s clone=%s error=%s",
                x->unmount ? "not unmounted" : "image not made or mounted",
                sbx_log_safe(x->clone.tenant, tenant_s, sizeof(tenant_s)),
                sbx_log_safe(x->clone.id, id_s, sizeof(id_s)), sbx_log_safe(msg, why, sizeof(why)));
        /* An unmount that failed leaves it mounted: its tasks go on there. */
        if (x->unmount &&
            (find_mounted(rt, x->dir) || remember(rt, &clone, x->dir, x->uid, x->gid) == 0))
            msg[0] = '\0';
    } else if (!x->unmount && !find_mounted(rt, x->dir) &&
               remember(rt, &clone, x->dir, x->uid, x->gid) < 0) {
        snprintf(msg, sizeof(msg), "workspace: out of memory");
    }
    struct rt_task *waiters = x->waiters;
    struct rt_waiter *others = x->others;
    sbx_err ferr = x->err;
    bool remount = x->unmount && !msg[0] && others;
    uid_t uid = x->uid;
    gid_t gid = x->gid;
    cleanup_free char *dir = remount ? strdup(x->dir) : NULL;
    x->waiters = NULL;
    x->others = NULL;
    rt_format_free(x);
    /* Unmounted while a session or a file request came for it: they wait
     * for it to be mounted again (tasks start that themselves). */
    struct rt_format *y;
    if (dir && (y = format_start(rt, &clone, dir, uid, gid, false, &ferr))) {
        y->others = others;
        others = NULL;
    } else if (remount) {
        snprintf(msg, sizeof(msg), "workspace not mounted again: %s", ferr.msg);
    }
    for (struct rt_task *t = waiters, *next; t; t = next) {
        next = t->next;
        t->next = NULL;
        t->format = NULL;
        rt->preparing--;
        if (msg[0])
            rt_finish(t, SBX_TASK_FAILED, msg, NULL, NULL, 0, NULL, 0, 125);
        else
            rt_launch(rt, t);
    }
    /* Not retried for them: each would format again and fail alike. */
    if (msg[0])
        rt_fail_queued(rt, &clone, msg);
    rt_waiters_notify(others, msg[0] ? &ferr : NULL);
    rt_start_next(rt);
}

/* A new image is promised only what the filesystem can still give. */
static int room_for_image(const struct sbx_runtime *rt, const char *images, sbx_err *err)
{
    const struct sbx_runtime_settings *set = &rt->settings;
    if (!set->disk_reserve_bytes)
        return 0;
    return sbx_ws_quota_room(images, set->workspace_quota_bytes, set->disk_reserve_bytes, err);
}

static struct rt_format *format_start(struct sbx_runtime *rt, const struct sbx_clone *c,
                                      const char *dir, uid_t uid, gid_t gid, bool unmount,
                                      sbx_err *err)
{
    char images[PATH_MAX];
    images_dir(rt, images, sizeof(images));
    struct rt_format *x = calloc(1, sizeof(*x));
    if (!x || !(x->dir = strdup(dir))) {
        free(x);
        sbx_err_set(err, ENOMEM, "workspace");
        return NULL;
    }
    x->rt = rt;
    x->clone = *c;
    x->unmount = unmount;
    x->uid = uid;
    x->gid = gid;
    x->f.pid = -1;
    if (unmount)
        sbx_pool_forget_workspace(dir);
    x->next = rt->formats;
    rt->formats = x;
    int rc = unmount ? sbx_ws_quota_unmount_start(dir, &x->f, err)
             : !sbx_ws_quota_image_exists(images, dir) && room_for_image(rt, images, err) < 0
                 ? -1
                 : sbx_ws_quota_mount_start(images, dir, rt->settings.workspace_quota_bytes, uid,
                                            gid, &x->f, err);
    if (rc < 0) {
        rt_format_free(x);
        return NULL;
    }
    x->ev = event_new(rt->o.base, x->f.pidfd, EV_READ, on_formatted, x);
    if (!x->ev || event_add(x->ev, NULL) < 0) {
        rt_format_free(x);
        sbx_err_set(err, ENOMEM, "workspace format event");
        return NULL;
    }
    return x;
}

/* The clone's workspace as a filesystem of its own (its quota image), mounted
 * once per daemon run and remembered for the unmount at stop. A format still
 * running is waited for here: the loop's callers ask first (rt_task_workspace,
 * sbx_runtime_workspace_when_ready), so that only a caller off the loop
 * does; its tasks are still started from the loop. */
static int mount_quota(struct sbx_runtime *rt, const struct sbx_clone *c, const char *dir,
                       uid_t uid, gid_t gid, sbx_err *err)
{
    struct mounted_ws *known = find_mounted(rt, dir);
    if (known) {
        known->dirty = true;
        known->used_at = sbx_mono_ms();
        return 0;
    }
    enum sbx_ws_quota_mode mode = ws_mode(rt);
    if (mode == SBX_WSQ_PROJECT &&
        sbx_ws_project_ensure(dir, uid, rt->settings.workspace_quota_bytes, err) < 0)
        return -1;
    if (mode != SBX_WSQ_LOOP)
        goto remember;
    struct rt_format *x = find_format(rt, dir);
    if (x && !x->finished) {
        /* Its pidfd is closed when reaped: not watched any more. The loop
         * still runs on_formatted, for the tasks that wait for it. */
        event_del(x->ev);
        format_finish(x, NULL);
        event_active(x->ev, EV_READ, 0);
    }
    if (x && x->rc < 0 && !x->unmount) {
        if (err)
            *err = x->err;
        return -1;
    }
    char images[PATH_MAX];
    images_dir(rt, images, sizeof(images));
    if (mkdir(images, 0700) < 0 && errno != EEXIST)
        return sbx_err_set(err, errno, "mkdir %s", images);
    if ((!sbx_ws_quota_image_exists(images, dir) && room_for_image(rt, images, err) < 0) ||
        sbx_ws_quota_ensure(images, dir, rt->settings.workspace_quota_bytes, uid, gid, err) < 0)
        return -1;
remember:
    if (remember(rt, c, dir, uid, gid) < 0) {
        if (mode == SBX_WSQ_LOOP)
            sbx_ws_quota_release(dir, NULL);
        return sbx_err_set(err, ENOMEM, "workspace");
    }
    return 0;
}

/* The warm pool's own host id ranges (exec/pool.h): just above the region
 * the clones' ranges are taken from ([host_id_base, + MAX_CLONES ranges),
 * store/clones.c), up to the last id below (uid_t)-1, at most
 * POOL_RANGES_MAX of them. *n 0: no room (a host_id_base that high). */
#define POOL_RANGES_MAX 1024u
uint32_t rt_pool_ids(const struct sbx_runtime_settings *set, uint32_t *n)
{
    uint64_t first = (uint64_t)set->host_id_base + (uint64_t)MAX_CLONES * CLONE_ID_STRIDE;
    uint64_t room = first < UINT32_MAX ? ((uint64_t)UINT32_MAX - first) / SBX_ID_RANGE : 0;
    *n = (uint32_t)(room < POOL_RANGES_MAX ? room : POOL_RANGES_MAX);
    return *n ? (uint32_t)first : 0;
}

/* The clone's directory, made, and its host ids. */
static char *workspace_dir(struct sbx_runtime *rt, const struct sbx_clone *c, uid_t *uid,
                           gid_t *gid, sbx_err *err)
{
    const struct sbx_runtime_settings *set = &rt->settings;
    uint32_t base;
    /* A tenant cannot take every host id range: new clones stop at its cap. */
    bool known;
    uint64_t n;
    if (sbx_store_clone_known(rt->o.store, c->tenant, c->key, c->id, &known, err) < 0 ||
        (!known && sbx_store_clone_count(rt->o.store, c->tenant, &n, err) < 0))
        return NULL;
    if (!known && n >= set->max_clones_per_tenant) {
        sbx_err_set(err, EDQUOT, "tenant %s already has %llu clones, the most allowed", c->tenant,
                    (unsigned long long)n);
        return NULL;
    }
    if (sbx_store_clone_base(rt->o.store, c->tenant, c->key, c->id, set->host_id_base,
                             CLONE_ID_STRIDE, MAX_CLONES, &base, err) < 0)
        return NULL;
    *uid = base + set->runner_uid;
    *gid = base + set->runner_gid;
    /* Its fd is of the directory the quota image is then mounted over: not
     * what anyone wants. */
    cleanup_fd int fd = -1;
    if (sbx_ws_ensure(set->workspace_root, c->tenant, c->key, c->id, *uid, *gid, &fd, err) < 0)
        return NULL;
    return sbx_ws_dir(set->workspace_root, c->tenant, c->key, c->id, err);
}

int rt_workspace_room(struct sbx_runtime *rt, const struct sbx_clone *c, sbx_err *err)
{
    const struct sbx_runtime_settings *set = &rt->settings;
    if (!set->disk_reserve_bytes && ws_mode(rt) != SBX_WSQ_MONITOR)
        return 0;
    cleanup_free char *dir = sbx_ws_dir(set->workspace_root, c->tenant, c->key, c->id, err);
    if (!dir)
        return -1;
    if (ws_mode(rt) != SBX_WSQ_LOOP) {
        const struct mounted_ws *m = find_mounted(rt, dir);
        return m && m->over ? over_quota(rt, m, err) : 0;
    }
    char images[PATH_MAX];
    images_dir(rt, images, sizeof(images));
    if (is_mounted(rt, dir) || find_format(rt, dir) || sbx_ws_quota_image_exists(images, dir))
        return 0;
    struct stat st;
    if (stat(images, &st) < 0) /* (none made yet: its parent's filesystem) */
        snprintf(images, sizeof(images), "%s", set->state_dir);
    return room_for_image(rt, images, err);
}

char *rt_workspace(struct sbx_runtime *rt, const struct sbx_clone *c, uid_t *uid, gid_t *gid,
                   sbx_err *err)
{
    cleanup_free char *dir = workspace_dir(rt, c, uid, gid, err);
    if (!dir || mount_quota(rt, c, dir, *uid, *gid, err) < 0)
        return NULL;
    return sbx_steal_pointer(&dir);
}

/* Whether dir's image can be mounted at once: 1 (mounted, or formatted), 0
 * while it is being formatted (*fmt; started here when it was not), -1. */
static int image_ready(struct sbx_runtime *rt, const struct sbx_clone *c, const char *dir,
                       uid_t uid, gid_t gid, struct rt_format **fmt, sbx_err *err)
{
    if (is_mounted(rt, dir) || ws_mode(rt) != SBX_WSQ_LOOP)
        return 1;
    char images[PATH_MAX];
    images_dir(rt, images, sizeof(images));
    struct rt_format *x = find_format(rt, dir);
    if (!x) {
        /* Formatting, attaching and mounting (1-20 ms, more on a busy
         * disk) are the helper's: the loop goes on meanwhile. */
        if (mkdir(images, 0700) < 0 && errno != EEXIST)
            return sbx_err_set(err, errno, "mkdir %s", images);
        if (!(x = format_start(rt, c, dir, uid, gid, false, err)))
            return -1;
    }
    if (x->finished && !x->unmount)
        return 1;
    *fmt = x;
    return 0;
}

int rt_task_workspace(struct rt_task *t, sbx_err *err)
{
    struct sbx_runtime *rt = t->rt;
    if (t->workspace)
        return 1;
    uid_t uid;
    gid_t gid;
    cleanup_free char *dir = workspace_dir(rt, &t->clone, &uid, &gid, err);
    if (!dir)
        return -1;
    struct rt_format *x;
    int rc = image_ready(rt, &t->clone, dir, uid, gid, &x, err);
    if (rc <= 0) {
        if (rc == 0) {
            t->format = x;
            t->next = x->waiters;
            x->waiters = t;
            rt->preparing++;
        }
        return rc;
    }
    /* Formatted: attaching and mounting takes a millisecond. */
    if (mount_quota(rt, &t->clone, dir, uid, gid, err) < 0)
        return -1;
    const struct mounted_ws *m = find_mounted(rt, dir);
    if (m && m->over)
        return over_quota(rt, m, err);
    t->workspace = sbx_steal_pointer(&dir);
    t->ws_uid = uid;
    return 1;
}

int sbx_runtime_workspace(struct sbx_runtime *rt, const struct sbx_clone *c, int *ws_fd, uid_t *uid,
                          gid_t *gid, sbx_err *err)
{
    if (rt_snapshot_busy(rt, c, err) < 0)
        return -1;
    cleanup_free char *dir = rt_workspace(rt, c, uid, gid, err);
    if (!dir)
        return -1;
    /* The mount's root, not the directory under it. */
    if ((*ws_fd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return sbx_err_set(err, errno, "open workspace %s", dir);
    return 0;
}

int sbx_runtime_workspace_when_ready(struct sbx_runtime *rt, const struct sbx_clone *c,
                                     sbx_workspace_ready_fn fn, void *ud, sbx_err *err)
{
    uid_t uid;
    gid_t gid;
    cleanup_free char *dir = workspace_dir(rt, c, &uid, &gid, err);
    if (!dir)
        return -1;
    struct rt_format *x;
    int rc = image_ready(rt, c, dir, uid, gid, &x, err);
    if (rc != 0)
        return rc;
    struct rt_waiter *w = calloc(1, sizeof(*w));
    if (!w)
        return sbx_err_set(err, ENOMEM, "workspace");
    *w = (struct rt_waiter){.fn = fn, .ud = ud, .next = x->others};
    x->others = w;
    return 0;
}

/* ---- monitor mode: measuring workspaces, stopping writers ---- */

#define MONITOR_EVERY_MS 1000

static bool same_clone(const struct sbx_clone *a, const struct sbx_clone *b)
{
    return strcmp(a->tenant, b->tenant) == 0 && strcmp(a->key, b->key) == 0 &&
           strcmp(a->id, b->id) == 0;
}

/* Whether something of clone c can write to its workspace now. */
static bool clone_busy(const struct sbx_runtime *rt, const struct sbx_clone *c)
{
    for (const struct rt_task *t = rt->active; t; t = t->all_next)
        if (t->t && same_clone(&t->clone, c))
            return true;
    for (const struct rt_session *x = rt->sessions; x; x = x->next)
        if (strcmp(x->tenant, c->tenant) == 0 && strcmp(x->clone_key, c->key) == 0 &&
            strcmp(x->clone_id, c->id) == 0)
            return true;
    return false;
}

/* The clone's running tasks end failed with why, its live sessions end. */
static void stop_writers(struct sbx_runtime *rt, const struct mounted_ws *m)
{
    char why[300];
    snprintf(why, sizeof(why),
             "the workspace went over its quota: %llu MiB used of %llu MiB "
             "(workspace_quota_mode monitor): the clone's writers were stopped",
             (unsigned long long)(m->used >> 20),
             (unsigned long long)(rt->settings.workspace_quota_bytes >> 20));
    for (bool again = true; again;) {
        again = false;
        for (struct rt_task *t = rt->active; t; t = t->all_next)
            if (t->t && !t->kill_reason && same_clone(&t->clone, &m->clone)) {
                t->kill_reason = strdup(why);
                sbx_task_cancel(t->t); /* its end is recorded as failed, with why */
                again = true;          /* the list may have changed under us */
                break;
            }
    }
    struct sbx_clone c = m->clone;
    rt_sessions_end_clone(rt, &c, why);
}

static void on_measured(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct sbx_runtime *rt = arg;
    size_t n = rt->measure.n;
    uint64_t *used = calloc(n ? n : 1, sizeof(*used));
    sbx_err e = {0};
    event_free(rt->ev_measured); /* before the pidfd is closed */
    rt->ev_measured = NULL;
    if (!used) {
        sbx_ws_measure_abort(&rt->measure);
    } else if (sbx_ws_measure_finish(&rt->measure, used, &e) < 0) {
        char msg[400];
        sbx_log(SBX_LOG_WARN, "workspace measure failed error=%s",
                sbx_err_format(&e, msg, sizeof(msg)));
    } else {
        uint64_t quota = rt->settings.workspace_quota_bytes;
        for (size_t i = 0; i < n; i++) {
            struct mounted_ws *m = rt->measuring[i];
            if (used[i] == UINT64_MAX)
                continue;
            bool was = m->over;
            m->used = used[i];
            m->over = used[i] > quota;
            if (m->over != was) {
                char tenant[128], id[128];
                sbx_log(m->over ? SBX_LOG_WARN : SBX_LOG_INFO,
                        "workspace %s quota tenant=%s clone=%s used=%llu quota=%llu",
                        m->over ? "over" : "back under",
                        sbx_log_safe(m->clone.tenant, tenant, sizeof(tenant)),
                        sbx_log_safe(m->clone.id, id, sizeof(id)), (unsigned long long)m->used,
                        (unsigned long long)quota);
            }
            if (m->over)
                stop_writers(rt, m);
        }
    }
    free(used);
    free(rt->measuring);
    rt->measuring = NULL;
}

/* Each second: the workspaces used since the last measure, those with
 * something running in them and those over their quota are measured by a
 * helper child (a walk of a tree never runs on the loop); one at a time. */
static void on_monitor(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct sbx_runtime *rt = arg;
    if (rt->ev_measured)
        return;
    size_t n = 0;
    for (struct mounted_ws *m = rt->mounted; m; m = m->next)
        n += m->dirty || m->over || clone_busy(rt, &m->clone);
    if (!n)
        return;
    const char **dirs = calloc(n, sizeof(*dirs));
    rt->measuring = calloc(n, sizeof(*rt->measuring));
    if (!dirs || !rt->measuring) {
        free(dirs);
        free(rt->measuring);
        rt->measuring = NULL;
        return;
    }
    size_t i = 0;
    for (struct mounted_ws *m = rt->mounted; m && i < n; m = m->next)
        if (m->dirty || m->over || clone_busy(rt, &m->clone)) {
            dirs[i] = m->path;
            rt->measuring[i++] = m;
        }
    sbx_err e = {0};
    int rc = sbx_ws_measure_start(dirs, i, &rt->measure, &e);
    free(dirs);
    if (rc == 0) {
        rt->ev_measured = event_new(rt->o.base, rt->measure.pidfd, EV_READ, on_measured, rt);
        if (rt->ev_measured && event_add(rt->ev_measured, NULL) == 0) {
            for (size_t k = 0; k < i; k++)
                rt->measuring[k]->dirty = false;
            return;
        }
        if (rt->ev_measured)
            event_free(rt->ev_measured);
        rt->ev_measured = NULL;
        sbx_ws_measure_abort(&rt->measure);
        sbx_err_set(&e, ENOMEM, "workspace measure event");
    }
    char msg[400];
    sbx_log(SBX_LOG_WARN, "workspace measure not started error=%s",
            sbx_err_format(&e, msg, sizeof(msg)));
    free(rt->measuring);
    rt->measuring = NULL;
}

int rt_monitor_init(struct sbx_runtime *rt, sbx_err *err)
{
    rt->measure.pid = -1;
    if (ws_mode(rt) != SBX_WSQ_MONITOR)
        return 0;
    struct timeval every = {.tv_sec = MONITOR_EVERY_MS / 1000,
                            .tv_usec = (MONITOR_EVERY_MS % 1000) * 1000};
    rt->ev_monitor = event_new(rt->o.base, -1, EV_PERSIST, on_monitor, rt);
    if (!rt->ev_monitor || event_add(rt->ev_monitor, &every) < 0) {
        if (rt->ev_monitor)
            event_free(rt->ev_monitor);
        rt->ev_monitor = NULL;
        return sbx_err_set(err, ENOMEM, "workspace monitor timer");
    }
    return 0;
}

void rt_monitor_fini(struct sbx_runtime *rt)
{
    if (rt->ev_measured)
        event_free(rt->ev_measured);
    rt->ev_measured = NULL;
    sbx_ws_measure_abort(&rt->measure);
    if (rt->ev_monitor)
        event_free(rt->ev_monitor);
    rt->ev_monitor = NULL;
    free(rt->measuring);
    rt->measuring = NULL;
}

/* ---- loop mode: idle images unmounted ---- */

/* Each mounted clone costs every new sandbox (the kernel copies the mount
 * table into each new mount namespace: ~1.1 ms per sandbox at 210 clones
 * measured), so an image nobody used for workspace_idle_unmount is
 * unmounted by a helper child; its next use mounts it again (the same way
 * as the first, off the loop), which its tasks do not see. Nothing is
 * unmounted under a running task, a live session or a snapshot operation. */
static void on_idle_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct sbx_runtime *rt = arg;
    int64_t now = sbx_mono_ms(), idle_ms = (int64_t)(rt->settings.workspace_idle_unmount_s * 1e3);
    for (struct mounted_ws **p = &rt->mounted; *p;) {
        struct mounted_ws *m = *p;
        if (now - m->used_at < idle_ms || clone_busy(rt, &m->clone) ||
            rt_snapshot_any(rt, &m->clone) || find_format(rt, m->path)) {
            p = &m->next;
            continue;
        }
        *p = m->next;
        sbx_err e = {0};
        if (!format_start(rt, &m->clone, m->path, m->uid, m->gid, true, &e)) {
            char msg[400];
            sbx_log(SBX_LOG_WARN, "idle workspace not unmounted error=%s",
                    sbx_err_format(&e, msg, sizeof(msg)));
            m->used_at = now; /* tried again after another idle period */
            m->next = *p;
            *p = m;
            p = &m->next;
            continue;
        }
        free(m->path);
        free(m);
    }
}

int rt_idle_unmount_init(struct sbx_runtime *rt, sbx_err *err)
{
    double idle = rt->settings.workspace_idle_unmount_s;
    if (ws_mode(rt) != SBX_WSQ_LOOP || idle <= 0)
        return 0;
    /* Looked at four times per idle period, at most every 30 s. */
    double every = idle / 4 < 0.25 ? 0.25 : idle / 4 > 30 ? 30 : idle / 4;
    struct timeval tv = {.tv_sec = (time_t)every,
                         .tv_usec = (suseconds_t)((every - (double)(time_t)every) * 1e6)};
    rt->ev_idle_ws = event_new(rt->o.base, -1, EV_PERSIST, on_idle_sweep, rt);
    if (!rt->ev_idle_ws || event_add(rt->ev_idle_ws, &tv) < 0) {
        if (rt->ev_idle_ws)
            event_free(rt->ev_idle_ws);
        rt->ev_idle_ws = NULL;
        return sbx_err_set(err, ENOMEM, "workspace idle timer");
    }
    return 0;
}

void rt_idle_unmount_fini(struct sbx_runtime *rt)
{
    if (rt->ev_idle_ws)
        event_free(rt->ev_idle_ws);
    rt->ev_idle_ws = NULL;
}
