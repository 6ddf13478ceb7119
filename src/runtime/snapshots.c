/* Workspace snapshots: each operation (create, diff, rollback, delete) runs
 * in a helper process forked from the daemon, watched by its pidfd; the
 * helper writes its answer as JSON to a memfd and exits. The loop never
 * hashes, copies or walks a tree. See runtime.h for the consistency rule
 * and docs/snapshots.md for the user's side. */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/time.h"
#include "runtime/runtime_int.h"
#include "workspace/files.h"
#include "workspace/path.h"
#include "workspace/quota_mode.h"
#include "workspace/snapstore.h"

#define DIFF_LIST_MAX 10000        /* paths listed per kind in a diff */
#define DIFF_FILE_MAX (1u << 20)   /* a side of a text diff */
#define DIFF_TEXT_MAX (256u << 10) /* the text diff returned */
#define RESULT_MAX (64u << 20)     /* a helper's answer */

struct rt_snapjob {
    struct sbx_runtime *rt;
    struct sbx_clone clone;
    enum sbx_snapshot_op op;
    char *message, *path;
    char id[SBX_SHA256_HEX_SIZE], against[SBX_SHA256_HEX_SIZE];
    char from_clone[SBX_SEGMENT_MAX + 1]; /* rollback from another clone, or "" */
    sbx_snapshot_done_fn done;
    void *ud;
    bool started, waiting_ws;
    char *ws_dir;
    uid_t uid;
    gid_t gid;
    int64_t now_ms;
    int64_t start_ms; /* sbx_mono_ms() at the helper's start */
    pid_t pid;
    int pidfd, out_fd;
    struct event *ev;
    struct rt_snapjob *next;
};

static bool same_clone(const struct sbx_clone *a, const char *tenant, const char *key,
                       const char *id)
{
    return !strcmp(a->tenant, tenant) && !strcmp(a->key, key) && !strcmp(a->id, id);
}

static bool exclusive(enum sbx_snapshot_op op)
{
    return op == SBX_SNAPSHOT_CREATE || op == SBX_SNAPSHOT_ROLLBACK;
}

int rt_snapshot_busy(struct sbx_runtime *rt, const struct sbx_clone *c, sbx_err *err)
{
    for (struct rt_snapjob *j = rt->snapjobs; j; j = j->next)
        if (exclusive(j->op) && same_clone(&j->clone, c->tenant, c->key, c->id))
            return sbx_err_set(err, EBUSY, "a %s of this workspace is under way: try again",
                               j->op == SBX_SNAPSHOT_CREATE ? "snapshot" : "rollback");
    return 0;
}

bool rt_snapshot_any(const struct sbx_runtime *rt, const struct sbx_clone *c)
{
    for (const struct rt_snapjob *j = rt->snapjobs; j; j = j->next)
        if (same_clone(&j->clone, c->tenant, c->key, c->id))
            return true;
    return false;
}

/* Whether the clone has anything that may write to its workspace. The
 * session called frozen (or NULL), once its cgroup is seen frozen, does not
 * count, nor do the tasks that name it (they run, or will, inside it). */
static int clone_quiet(struct sbx_runtime *rt, const struct sbx_clone *c, const char *frozen,
                       sbx_err *err)
{
    struct rt_session *fx = frozen ? rt_find_session(rt, c, frozen) : NULL;
    if (frozen) {
        /* Asking to freeze a frozen cgroup again is how it is seen frozen. */
        sbx_err fe = {0};
        if (!fx || !fx->ready || sbx_cgroup_freeze_start(&fx->sb.cg, true, &fe) < 0)
            return sbx_err_set(err, EBUSY, "the session %s is not frozen: %s", frozen,
                               fx ? fe.msg : "there is no such live session");
    }
    for (struct rt_task *t = rt->active; t; t = t->all_next)
        if (same_clone(&t->clone, c->tenant, c->key, c->id) &&
            !(fx && strcmp(t->session, fx->name) == 0))
            return sbx_err_set(err, EBUSY,
                               "the workspace has tasks queued or running (task %s): wait for "
                               "them or cancel them first",
                               t->id);
    for (struct rt_session *x = rt->sessions; x; x = x->next)
        if (x != fx && same_clone(c, x->tenant, x->clone_key, x->clone_id))
            return sbx_err_set(err, EBUSY, "the workspace has a live session (%s): stop it first",
                               x->name);
    return 0;
}

static const char *store_dir(const struct sbx_runtime *rt, char *buf, size_t len)
{
    if (rt->settings.snapshots.dir)
        return rt->settings.snapshots.dir;
    snprintf(buf, len, "%s/snapshots", rt->settings.state_dir);
    return buf;
}

/* ---- the helper process ---- */

/* The wall clock in ns, as file times are. */
static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static json_t *entry_json(const char *id, int64_t ts, const char *message,
                          const struct sbx_snap_manifest *m)
{
    uint64_t files, bytes;
    sbx_snap_totals(m, &files, &bytes);
    return json_pack("{s:s, s:I, s:s, s:I, s:I}", "id", id, "timestamp", (json_int_t)ts, "message",
                     message ? message : "", "fileCount", (json_int_t)files, "size",
                     (json_int_t)bytes);
}

static json_t *index_find(json_t *index, const char *id, size_t *at)
{
    json_t *list = json_object_get(index, "snapshots"), *s;
    size_t i;
    json_array_foreach(list, i, s)
    {
        if (json_is_string(json_object_get(s, "id")) &&
            !strcmp(json_string_value(json_object_get(s, "id")), id)) {
            if (at)
                *at = i;
            return s;
        }
    }
    return NULL;
}

/* Retention after a new snapshot; the dropped ids into pruned. */
static int retain(struct sbx_snap_store *st, json_t *index, const struct sbx_snapshot_settings *set,
                  int64_t now_ms, json_t *pruned, sbx_err *err)
{
    json_t *list = json_object_get(index, "snapshots");
    size_t n = json_array_size(list);
    const char *current = json_string_value(json_object_get(index, "current"));
    struct sbx_snap_manifest *m = calloc(n + 1, sizeof(*m));
    struct sbx_snap_keep *k = calloc(n + 1, sizeof(*k));
    int rc = m && k ? 0 : sbx_err_set(err, ENOMEM, "retention");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        json_t *s = json_array_get(list, i);
        const char *id = json_string_value(json_object_get(s, "id"));
        rc = sbx_snap_manifest_read(st->clone_fd, id ? id : "", &m[i], err);
        k[i] = (struct sbx_snap_keep){
            .timestamp_ms = (int64_t)json_integer_value(json_object_get(s, "timestamp")),
            .current = current && id && !strcmp(id, current),
            .man = &m[i]};
    }
    struct sbx_snap_limits lim = {set->keep, (int64_t)(set->max_age_s * 1000), set->max_bytes};
    uint64_t kept;
    if (rc == 0)
        rc = sbx_snap_retain(k, n, &lim, now_ms, &kept, err);
    for (size_t i = n; rc == 0 && i-- > 0;)
        if (k[i].drop) {
            json_t *s = json_array_get(list, i);
            const char *id = json_string_value(json_object_get(s, "id"));
            json_array_append_new(pruned, json_string(id));
            sbx_snap_manifest_remove(st->clone_fd, id);
            json_array_remove(list, i);
        }
    for (size_t i = 0; m && i < n; i++)
        sbx_snap_free(&m[i]);
    free(m);
    free(k);
    return rc;
}

static json_t *do_create(struct rt_snapjob *j, int ws, struct sbx_snap_store *st, json_t *index,
                         sbx_err *err)
{
    const struct sbx_snapshot_settings *set = &j->rt->settings.snapshots;
    struct sbx_snap_manifest m, cache;
    uint64_t skipped = 0;
    int64_t start = now_ns();
    sbx_snap_cache_read(st->clone_fd, &cache);
    struct sbx_snap_scan_opts o = {.blobs_fd = st->blobs_fd, .hash = true, .cache = &cache};
    int rc = sbx_snap_scan(ws, &o, &m, &skipped, err);
    sbx_snap_free(&cache);
    if (rc < 0)
        return NULL;
    sbx_snap_cache_write(st->clone_fd, &m, start, NULL); /* only a cache */
    cleanup_free char *text = NULL;
    size_t len;
    char id[SBX_SHA256_HEX_SIZE];
    json_t *res = NULL, *pruned = json_array();
    if (sbx_snap_format(&m, &text, &len, err) < 0 || sbx_snap_id(text, len, id, err) < 0)
        goto out;
    json_t *old = index_find(index, id, NULL);
    if (old) { /* the same contents as a snapshot kept: nothing added */
        json_object_set_new(index, "current", json_string(id));
        if (sbx_snap_index_write(st->clone_fd, index, err) == 0)
            res = json_pack("{s:O, s:b, s:O, s:I}", "snapshot", old, "created", 0, "pruned", pruned,
                            "skipped", (json_int_t)skipped);
        goto out;
    }
    const struct sbx_snap_manifest *one = &m;
    uint64_t bytes;
    if (sbx_snap_unique_bytes(&one, 1, &bytes, err) < 0)
        goto out;
    if (set->max_bytes && bytes > set->max_bytes) {
        sbx_err_set(err, EFBIG,
                    "the workspace's contents take %llu bytes, more than the %llu a workspace's "
                    "snapshots may take (retention.snapshot_max_bytes)",
                    (unsigned long long)bytes, (unsigned long long)set->max_bytes);
        goto out;
    }
    json_t *entry = entry_json(id, j->now_ms, j->message, &m);
    if (sbx_snap_manifest_write(st->clone_fd, id, text, len, err) < 0) {
        json_decref(entry);
        goto out;
    }
    json_array_append(json_object_get(index, "snapshots"), entry);
    json_object_set_new(index, "current", json_string(id));
    if (retain(st, index, set, j->now_ms, pruned, err) < 0 ||
        sbx_snap_index_write(st->clone_fd, index, err) < 0) {
        sbx_snap_manifest_remove(st->clone_fd, id);
        json_decref(entry);
        goto out;
    }
    res = json_pack("{s:o, s:b, s:O, s:I}", "snapshot", entry, "created", 1, "pruned", pruned,
                    "skipped", (json_int_t)skipped);
out:
    json_decref(pruned);
    sbx_snap_free(&m);
    return res;
}

static const char *type_name(enum sbx_snap_type t)
{
    return t == SBX_SNAP_DIR ? "dir" : t == SBX_SNAP_SYMLINK ? "symlink" : "file";
}

struct diff_out {
    json_t *lists[3];
    bool truncated;
};

static int diff_one(void *ud, enum sbx_snap_change change, const struct sbx_snap_entry *old,
                    const struct sbx_snap_entry *new_)
{
    struct diff_out *d = ud;
    json_t *list = d->lists[change];
    if (json_array_size(list) >= DIFF_LIST_MAX) {
        d->truncated = true;
        return 0;
    }
    const struct sbx_snap_entry *e = new_ ? new_ : old;
    json_t *o = json_pack("{s:o, s:s, s:I}", "path", sbx_json_text(e->path, strlen(e->path)),
                          "type", type_name(e->type), "size", (json_int_t)e->size);
    if (old && new_)
        json_object_set_new(o, "oldSize", json_integer((json_int_t)old->size));
    json_array_append_new(list, o);
    return 0;
}

/* One side of a text diff as an fd: a blob, the workspace's file, or
 * /dev/null when the path is not a regular file there. */
static int diff_side(const struct sbx_snap_entry *e, bool live, int ws, int blobs_fd, sbx_err *err)
{
    if (!e || (e->type != SBX_SNAP_FILE && e->type != SBX_SNAP_LINK))
        return open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (e->size > DIFF_FILE_MAX)
        return sbx_err_set(err, EFBIG, "%s is larger than %u bytes: no text diff", e->path,
                           DIFF_FILE_MAX);
    if (!live)
        return sbx_snap_blob_open(blobs_fd, e->hash, err);
    int fd = sbx_ws_openat(ws, e->path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, true);
    return fd < 0 ? sbx_err_set(err, errno, "open %s", e->path) : fd;
}

/* diff -u of the two sides, at most DIFF_TEXT_MAX bytes of it. */
static json_t *text_diff(const char *path, int a, int b, sbx_err *err)
{
    cleanup_fd int out = memfd_create("sbx-diff", MFD_CLOEXEC);
    if (out < 0)
        return sbx_err_set(err, errno, "diff"), NULL;
    char la[SBX_WS_PATH_MAX + 8], lb[SBX_WS_PATH_MAX + 8];
    snprintf(la, sizeof(la), "a/%s", path);
    snprintf(lb, sizeof(lb), "b/%s", path);
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDWR);
        if (dup2(a, 3) < 0 || dup2(b, 4) < 0 || dup2(out, 1) < 0 || dup2(devnull, 0) < 0 ||
            dup2(devnull, 2) < 0)
            _exit(126);
        syscall(SYS_close_range, 5, ~0U, 0);
        char *argv[] = {"diff", "-u", "--label", la, "--label", lb, "/dev/fd/3", "/dev/fd/4", NULL};
        char *envp[] = {"PATH=/usr/bin:/bin", "LC_ALL=C", NULL};
        execve("/usr/bin/diff", argv, envp);
        execve("/bin/diff", argv, envp);
        _exit(127);
    }
    int status;
    if (pid < 0)
        return sbx_err_set(err, errno, "diff"), NULL;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) > 1)
        return sbx_err_set(err, EIO, "diff failed (status %d)", status), NULL;
    struct stat st;
    fstat(out, &st);
    size_t len = (size_t)st.st_size < DIFF_TEXT_MAX ? (size_t)st.st_size : DIFF_TEXT_MAX;
    cleanup_free char *buf = malloc(len + 1);
    ssize_t n = buf ? pread(out, buf, len, 0) : -1;
    if (n < 0)
        return sbx_err_set(err, errno ? errno : ENOMEM, "diff"), NULL;
    return json_pack("{s:o, s:o, s:b}", "path", sbx_json_text(path, strlen(path)), "diff",
                     sbx_json_text(buf, (size_t)n), "truncated", (size_t)st.st_size > len);
}

static json_t *do_diff(struct rt_snapjob *j, int ws, struct sbx_snap_store *st, sbx_err *err)
{
    struct sbx_snap_manifest a = {0}, b = {0}, cache = {0};
    bool live = !j->against[0];
    json_t *res = NULL;
    struct diff_out d = {{json_array(), json_array(), json_array()}, false};
    if (live)
        sbx_snap_cache_read(st->clone_fd, &cache);
    struct sbx_snap_scan_opts o = {.blobs_fd = -1, .hash = true, .cache = &cache};
    if (sbx_snap_manifest_read(st->clone_fd, j->id, &a, err) < 0 ||
        (live ? sbx_snap_scan(ws, &o, &b, NULL, err)
              : sbx_snap_manifest_read(st->clone_fd, j->against, &b, err)) < 0)
        goto out;
    sbx_snap_diff(&a, &b, diff_one, &d);
    res = json_pack("{s:s, s:s, s:O, s:O, s:O, s:b}", "from", j->id, "to",
                    live ? "current" : j->against, "added", d.lists[SBX_SNAP_ADDED], "modified",
                    d.lists[SBX_SNAP_MODIFIED], "deleted", d.lists[SBX_SNAP_DELETED], "truncated",
                    d.truncated);
    if (j->path) {
        struct sbx_ws_path p;
        json_t *file = NULL;
        if (sbx_ws_path_parse(j->path, strlen(j->path), &p, err) == 0) {
            const struct sbx_snap_entry *ea = sbx_snap_find(&a, p.rel),
                                        *eb = sbx_snap_find(&b, p.rel);
            cleanup_fd int fa = -1, fb = -1;
            if (!ea && !eb)
                sbx_err_set(err, ENOENT, "%s is in neither snapshot", j->path);
            else if ((fa = diff_side(ea, false, ws, st->blobs_fd, err)) >= 0 &&
                     (fb = diff_side(eb, live, ws, st->blobs_fd, err)) >= 0)
                file = text_diff(p.rel, fa, fb, err);
            else if (err->errnum == EFBIG) /* the changes still answer; the text says why not */
                file = json_pack("{s:o, s:n, s:b, s:s}", "path", sbx_json_text(p.rel, p.len),
                                 "diff", "truncated", 1, "reason", err->msg);
        }
        if (!file) {
            json_decref(res);
            res = NULL;
            goto out;
        }
        json_object_set_new(res, "file", file);
    }
out:
    for (int i = 0; i < 3; i++)
        json_decref(d.lists[i]);
    sbx_snap_free(&a);
    sbx_snap_free(&b);
    sbx_snap_free(&cache);
    return res;
}

/* src: the store of the clone whose snapshot it is (st's own, or another
 * clone's of the same tenant: then st's index is left as it is). */
static json_t *do_rollback(struct rt_snapjob *j, int ws, struct sbx_snap_store *st,
                           const struct sbx_snap_store *src, json_t *index, sbx_err *err)
{
    struct sbx_snap_manifest m;
    json_t *src_index = index;
    if (src != st && sbx_snap_index_read(src->clone_fd, &src_index, err) < 0)
        return NULL;
    bool found = index_find(src_index, j->id, NULL) != NULL;
    if (src_index != index)
        json_decref(src_index);
    if (!found)
        return sbx_err_set(err, ENOENT, "no snapshot %s", j->id), NULL;
    if (sbx_snap_manifest_read(src->clone_fd, j->id, &m, err) < 0)
        return NULL;
    struct sbx_snap_manifest cache;
    sbx_snap_cache_read(st->clone_fd, &cache);
    int rc = sbx_snap_restore(ws, st->blobs_fd, &m, &cache, j->uid, j->gid, err);
    sbx_snap_free(&cache);
    sbx_snap_free(&m);
    if (rc < 0)
        return NULL;
    if (src == st) {
        json_object_set_new(index, "current", json_string(j->id));
        if (sbx_snap_index_write(st->clone_fd, index, err) < 0)
            return NULL;
    }
    return json_pack("{s:b}", "success", 1);
}

static json_t *do_delete(struct rt_snapjob *j, struct sbx_snap_store *st, json_t *index,
                         sbx_err *err)
{
    size_t at;
    if (!index_find(index, j->id, &at))
        return sbx_err_set(err, ENOENT, "no snapshot %s", j->id), NULL;
    json_array_remove(json_object_get(index, "snapshots"), at);
    const char *cur = json_string_value(json_object_get(index, "current"));
    if (cur && !strcmp(cur, j->id))
        json_object_set_new(index, "current", json_null());
    if (sbx_snap_index_write(st->clone_fd, index, err) < 0)
        return NULL;
    sbx_snap_manifest_remove(st->clone_fd, j->id);
    return json_pack("{s:b}", "ok", 1);
}

static json_t *helper_run(struct rt_snapjob *j, sbx_err *err)
{
    char buf[PATH_MAX];
    struct sbx_snap_store st, src = {.tenant_fd = -1, .blobs_fd = -1, .clone_fd = -1};
    cleanup_fd int ws = -1;
    json_t *index = NULL, *res = NULL;
    const char *dir = store_dir(j->rt, buf, sizeof(buf));
    if (sbx_snap_store_open(dir, j->clone.tenant, j->clone.key, j->clone.id, true, &st, err) < 0)
        return NULL;
    if (j->from_clone[0] && sbx_snap_store_open(dir, j->clone.tenant, j->clone.key, j->from_clone,
                                                false, &src, err) < 0) {
        sbx_snap_store_close(&src);
        sbx_snap_store_close(&st);
        if (err->errnum == ENOENT)
            sbx_err_set(err, ENOENT, "no snapshot %s", j->id);
        return NULL;
    }
    if (j->ws_dir && (ws = open(j->ws_dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        sbx_err_set(err, errno, "open the workspace");
    else if (sbx_snap_index_read(st.clone_fd, &index, err) == 0) {
        switch (j->op) {
        case SBX_SNAPSHOT_CREATE:
            res = do_create(j, ws, &st, index, err);
            break;
        case SBX_SNAPSHOT_DIFF:
            res = do_diff(j, ws, &st, err);
            break;
        case SBX_SNAPSHOT_ROLLBACK:
            res = do_rollback(j, ws, &st, j->from_clone[0] ? &src : &st, index, err);
            break;
        case SBX_SNAPSHOT_DELETE:
            res = do_delete(j, &st, index, err);
            break;
        }
    }
    /* Contents no snapshot refers to any more (or a failed create's). */
    if (j->op == SBX_SNAPSHOT_CREATE || j->op == SBX_SNAPSHOT_DELETE) {
        uint64_t removed = 0, freed = 0;
        sbx_err gerr = {0};
        if (sbx_snap_gc(st.tenant_fd, st.blobs_fd, &removed, &freed, &gerr) == 0 && res &&
            j->op == SBX_SNAPSHOT_DELETE) {
            json_object_set_new(res, "blobsRemoved", json_integer((json_int_t)removed));
            json_object_set_new(res, "bytesFreed", json_integer((json_int_t)freed));
        }
    }
    json_decref(index);
    if (j->from_clone[0])
        sbx_snap_store_close(&src);
    sbx_snap_store_close(&st);
    return res;
}

/* In the forked child: no loop, no daemon fds but the answer's; a lower
 * priority, so the daemon's loop keeps the CPU it needs. */
static void __attribute__((noreturn)) helper_main(struct rt_snapjob *j, int out, pid_t parent)
{
    /* It dies with the daemon: a restarted daemon must not meet a helper
     * of the last run still writing the tenant's store. */
    sbx_ws_helper_child(out, parent, 10);
    sbx_err e = {0};
    json_t *res = helper_run(j, &e);
    if (!res)
        res = json_pack("{s:{s:i, s:s}}", "error", "errno", e.errnum ? e.errnum : EIO, "message",
                        e.msg);
    int ok = res && json_dumpfd(res, 3, JSON_COMPACT) == 0;
    _exit(ok && !json_object_get(res, "error") ? 0 : 1);
}

/* ---- the loop's side ---- */

static void job_free(struct rt_snapjob *j)
{
    for (struct rt_snapjob **p = &j->rt->snapjobs; *p; p = &(*p)->next)
        if (*p == j) {
            *p = j->next;
            break;
        }
    if (j->waiting_ws)
        sbx_runtime_workspace_unwait(j->rt, j);
    if (j->ev)
        event_free(j->ev);
    if (j->pid > 0) {
        syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0);
        while (waitpid(j->pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    if (j->pidfd >= 0)
        close(j->pidfd);
    if (j->out_fd >= 0)
        close(j->out_fd);
    free(j->message);
    free(j->path);
    free(j->ws_dir);
    free(j);
}

static int start_jobs(struct sbx_runtime *rt, struct rt_snapjob *self, sbx_err *err);

/* Answer and free the job (the caller starts the next ones). */
static void finish(struct rt_snapjob *j, const sbx_err *err, json_t *res)
{
    sbx_snapshot_done_fn done = j->done;
    void *ud = j->ud;
    job_free(j);
    if (done)
        done(ud, err, res);
}

static void on_helper_exit(evutil_socket_t fd, short what, void *arg)
{
    struct rt_snapjob *j = arg;
    int status = 0;
    struct rusage ru = {0};
    while (wait4(j->pid, &status, 0, &ru) < 0 && errno == EINTR)
        ;
    j->pid = -1;
    static const char *const ops[] = {"create", "diff", "rollback", "delete"};
    char tenant_s[128], id_s[128];
    sbx_log(SBX_LOG_INFO, "snapshot %s tenant=%s clone=%s ms=%lld cpu_ms=%lld status=%d",
            ops[j->op], sbx_log_safe(j->clone.tenant, tenant_s, sizeof(tenant_s)),
            sbx_log_safe(j->clone.id, id_s, sizeof(id_s)), (long long)(sbx_mono_ms() - j->start_ms),
            (long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
                (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000,
            status);
    sbx_err e = {0};
    json_t *res = NULL;
    struct stat st;
    if (fstat(j->out_fd, &st) == 0 && st.st_size > 0 && st.st_size < RESULT_MAX) {
        json_error_t je;
        lseek(j->out_fd, 0, SEEK_SET);
        res = json_loadfd(j->out_fd, 0, &je);
    }
    json_t *jerr = json_object_get(res, "error");
    if (!res)
        sbx_err_set(&e, EIO, "the snapshot helper ended without an answer (status %d)", status);
    else if (jerr || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        sbx_err_set(&e, (int)json_integer_value(json_object_get(jerr, "errno")) ?: EIO, "%s",
                    json_string_value(json_object_get(jerr, "message"))
                        ?: "the snapshot helper failed");
    if (e.errnum) {
        char msg[600], why[300];
        sbx_log(SBX_LOG_WARN, "snapshot operation failed tenant=%s error=%s",
                sbx_log_safe(j->clone.tenant, tenant_s, sizeof(tenant_s)),
                sbx_log_safe(sbx_err_format(&e, msg, sizeof(msg)), why, sizeof(why)));
    }
    struct sbx_runtime *rt = j->rt;
    finish(j, e.errnum ? &e : NULL, e.errnum ? NULL : res);
    json_decref(res);
    start_jobs(rt, NULL, NULL);
}

static int helper_start(struct rt_snapjob *j, sbx_err *err)
{
    struct sbx_runtime *rt = j->rt;
    if (j->op != SBX_SNAPSHOT_DELETE) {
        j->ws_dir = rt_workspace(rt, &j->clone, &j->uid, &j->gid, err);
        if (!j->ws_dir)
            return -1;
    }
    if ((j->out_fd = memfd_create("sbx-snapshot", MFD_CLOEXEC)) < 0)
        return sbx_err_set(err, errno, "snapshot helper: memfd");
    j->now_ms = sbx_now_ms();
    j->start_ms = sbx_mono_ms();
    pid_t self = getpid();
    pid_t pid = fork();
    if (pid == 0)
        helper_main(j, j->out_fd, self);
    if (pid < 0)
        return sbx_err_set(err, errno, "snapshot helper: fork");
    j->pid = pid;
    /* Our child, not yet reaped: its pid cannot name another process. */
    j->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (j->pidfd < 0)
        return sbx_err_set(err, errno, "snapshot helper: pidfd_open");
    j->ev = event_new(rt->o.base, j->pidfd, EV_READ, on_helper_exit, j);
    if (!j->ev || event_add(j->ev, NULL) < 0)
        return sbx_err_set(err, ENOMEM, "snapshot helper: event");
    j->started = true;
    return 0;
}

/* Start every job whose tenant has none running (a tenant's share blobs).
 * A job that cannot start is answered, but self (being requested now),
 * which is dropped unanswered: -1 with err. */
static int start_jobs(struct sbx_runtime *rt, struct rt_snapjob *self, sbx_err *err)
{
    for (struct rt_snapjob *j = rt->snapjobs, *next; j; j = next) {
        next = j->next;
        if (j->started || j->waiting_ws)
            continue;
        bool tenant_busy = false;
        for (struct rt_snapjob *o = rt->snapjobs; o; o = o->next)
            if (o->started && !strcmp(o->clone.tenant, j->clone.tenant))
                tenant_busy = true;
        if (tenant_busy)
            continue;
        sbx_err e = {0};
        if (helper_start(j, &e) < 0) {
            if (j == self) {
                if (err)
                    *err = e;
                j->done = NULL;
                job_free(j);
                return -1;
            }
            finish(j, &e, NULL);
            return start_jobs(rt, self, err); /* the list changed under next */
        }
    }
    return 0;
}

static void on_workspace(void *ud, const sbx_err *err)
{
    struct rt_snapjob *j = ud;
    struct sbx_runtime *rt = j->rt;
    j->waiting_ws = false;
    if (err)
        finish(j, err, NULL);
    start_jobs(rt, NULL, NULL);
}

int sbx_runtime_snapshot(struct sbx_runtime *rt, const struct sbx_clone *c,
                         const struct sbx_snapshot_request *r, sbx_snapshot_done_fn done, void *ud,
                         sbx_err *err)
{
    if (r->op != SBX_SNAPSHOT_CREATE && !sbx_snap_id_valid(r->id))
        return sbx_err_set(err, EINVAL, "a snapshot id is 64 lower-case hex digits");
    if (r->op == SBX_SNAPSHOT_DIFF && r->against && !sbx_snap_id_valid(r->against))
        return sbx_err_set(err, EINVAL, "against is \"current\" or a snapshot id");
    for (struct rt_snapjob *j = rt->snapjobs; j; j = j->next)
        if (same_clone(&j->clone, c->tenant, c->key, c->id) &&
            (exclusive(j->op) || exclusive(r->op)))
            return sbx_err_set(err, EBUSY,
                               "another snapshot operation of this workspace is under "
                               "way: try again");
    if ((r->frozen_session && r->op != SBX_SNAPSHOT_CREATE) ||
        (r->from_clone && (r->op != SBX_SNAPSHOT_ROLLBACK || !*r->from_clone ||
                           strlen(r->from_clone) > SBX_SEGMENT_MAX || strchr(r->from_clone, '/') ||
                           r->from_clone[0] == '.')))
        return sbx_err_set(err, EINVAL, "a snapshot request with a bad frozen session or clone");
    if (exclusive(r->op) && clone_quiet(rt, c, r->frozen_session, err) < 0)
        return -1;
    struct rt_snapjob *j = calloc(1, sizeof(*j));
    if (!j)
        return sbx_err_set(err, ENOMEM, "snapshot");
    *j = (struct rt_snapjob){.rt = rt,
                             .clone = *c,
                             .op = r->op,
                             .done = done,
                             .ud = ud,
                             .pid = -1,
                             .pidfd = -1,
                             .out_fd = -1};
    if (r->id)
        snprintf(j->id, sizeof(j->id), "%s", r->id);
    if (r->against)
        snprintf(j->against, sizeof(j->against), "%s", r->against);
    if (r->from_clone)
        snprintf(j->from_clone, sizeof(j->from_clone), "%s", r->from_clone);
    if ((r->message && !(j->message = strdup(r->message))) ||
        (r->path && !(j->path = strdup(r->path)))) {
        free(j->message);
        free(j);
        return sbx_err_set(err, ENOMEM, "snapshot");
    }
    j->next = rt->snapjobs;
    rt->snapjobs = j;
    if (r->op != SBX_SNAPSHOT_DELETE) {
        /* A clone's first workspace image is formatted off the loop too. */
        int rc = sbx_runtime_workspace_when_ready(rt, c, on_workspace, j, err);
        if (rc < 0) {
            j->done = NULL;
            job_free(j);
            return -1;
        }
        j->waiting_ws = rc == 0;
    }
    return start_jobs(rt, j, err);
}

void sbx_runtime_snapshot_forget(struct sbx_runtime *rt, void *ud)
{
    for (struct rt_snapjob *j = rt->snapjobs; j; j = j->next)
        if (j->ud == ud)
            j->done = NULL;
}

int sbx_runtime_snapshot_list(struct sbx_runtime *rt, const struct sbx_clone *c, json_t **out,
                              sbx_err *err)
{
    char buf[PATH_MAX];
    struct sbx_snap_store st;
    sbx_err e = {0};
    /* A list makes nothing: a clone without snapshots has none to show. */
    if (sbx_snap_store_open(store_dir(rt, buf, sizeof(buf)), c->tenant, c->key, c->id, false, &st,
                            &e) < 0) {
        if (e.errnum != ENOENT) {
            if (err)
                *err = e;
            return -1;
        }
        *out = json_pack("{s:n, s:[]}", "current", "snapshots");
        return *out ? 0 : sbx_err_set(err, ENOMEM, "snapshots");
    }
    int rc = sbx_snap_index_read(st.clone_fd, out, err);
    sbx_snap_store_close(&st);
    return rc;
}

void rt_snapshots_free(struct sbx_runtime *rt)
{
    while (rt->snapjobs) {
        struct rt_snapjob *j = rt->snapjobs;
        /* A rollback stopped halfway would leave a workspace that is neither
         * state: it is let finish (the loop is ending anyway). */
        if (j->op == SBX_SNAPSHOT_ROLLBACK && j->pid > 0) {
            while (waitpid(j->pid, NULL, 0) < 0 && errno == EINTR)
                ;
            j->pid = -1;
        }
        sbx_snapshot_done_fn done = j->done;
        void *ud = j->ud;
        job_free(j);
        sbx_err e = {0};
        sbx_err_set(&e, ECANCELED, "the daemon stopped before the snapshot operation ended");
        if (done)
            done(ud, &e, NULL);
    }
}
