#include "skills/skills_int.h"

#include <ctype.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "base/log.h"
#include "net/policy.h"
#include "skills/jwt.h"

static const enum sbx_skill_source root_source[4] = {SBX_SKILL_BUILTIN, SBX_SKILL_BUILTIN,
                                                     SBX_SKILL_SHARED, SBX_SKILL_MAPPED};

/* ---- the scan in its helper ---- */

static void scan_start(struct sbx_skills *sk);

static void notify(struct sk_waiter *w, const sbx_err *err)
{
    while (w) {
        struct sk_waiter *next = w->next;
        w->fn(w->ud, err);
        free(w);
        w = next;
    }
}

/* What the scan left out, and what shadows what, for the operator. */
static void log_scan(struct sbx_skills *sk)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(sk->cat, "leftOut"), i, v)
    {
        char a[128], b[300];
        sbx_log(SBX_LOG_WARN, "skill left out source=%s name=%s reason=%s",
                json_string_value(json_object_get(v, "source")),
                sbx_log_safe(json_string_value(json_object_get(v, "name")), a, sizeof(a)),
                sbx_log_safe(json_string_value(json_object_get(v, "reason")), b, sizeof(b)));
    }
    /* per skill, with no clone's overlay */
    struct sbx_clone none = {0};
    json_array_foreach(json_object_get(sk->cat, "skills"), i, v)
    {
        struct sk_resolved r;
        const char *name = json_string_value(json_object_get(v, "name"));
        const char *src = json_string_value(json_object_get(v, "source"));
        json_t *winner = sk_find(sk, &none, name, &r);
        char a[128], b[300];
        if (!winner && r.why[0])
            sbx_log(SBX_LOG_WARN, "skill left out source=%s name=%s reason=%s", src,
                    sbx_log_safe(name, a, sizeof(a)), sbx_log_safe(r.why, b, sizeof(b)));
        else if (winner && winner != v)
            sbx_log(SBX_LOG_WARN, "skill shadowed source=%s name=%s by=%s", src,
                    sbx_log_safe(name, a, sizeof(a)),
                    json_string_value(json_object_get(winner, "source")));
    }
}

static void scan_end(struct sbx_skills *sk)
{
    if (!sk->out_eof || !sk->exited)
        return;
    sbx_err e = {0};
    size_t len = evbuffer_get_length(sk->out);
    json_error_t je;
    json_t *cat = len ? json_loadb((const char *)evbuffer_pullup(sk->out, -1), len, 0, &je) : NULL;
    evbuffer_drain(sk->out, len);
    if (json_is_object(cat)) {
        json_decref(sk->cat);
        sk->cat = cat;
        log_scan(sk);
    } else {
        json_decref(cat);
        sbx_err_set(&e, EIO, "the skills scan failed (its helper gave no catalog)");
        sbx_log(SBX_LOG_ERROR, "%s", e.msg);
        if (!sk->cat)
            sk->cat = json_pack("{s:[], s:[]}", "skills", "leftOut");
    }
    struct sk_waiter *w = sk->waiting;
    sk->waiting = NULL;
    sk->pid = -1;
    if (sk->next_scan) {
        sk->waiting = sk->next_scan;
        sk->next_scan = NULL;
        scan_start(sk);
    }
    notify(w, e.msg[0] ? &e : NULL);
}

static void on_scan_out(evutil_socket_t fd, short what, void *ud)
{
    struct sbx_skills *sk = ud;
    int n = evbuffer_read(sk->out, fd, 65536);
    if (n > 0)
        return;
    event_free(sk->ev_out);
    sk->ev_out = NULL;
    close(sk->out_fd);
    sk->out_fd = -1;
    sk->out_eof = true;
    scan_end(sk);
}

static void on_scan_exit(evutil_socket_t fd, short what, void *ud)
{
    struct sbx_skills *sk = ud;
    int status;
    (void)waitpid(sk->pid, &status, WNOHANG);
    event_free(sk->ev_exit);
    sk->ev_exit = NULL;
    close(sk->pidfd);
    sk->pidfd = -1;
    sk->exited = true;
    scan_end(sk);
}

/* Stop watching the scan's helper; kill it first when it has not exited
 * (a reaped helper's pid may be another process's by now). */
static void scan_stop(struct sbx_skills *sk)
{
    if (sk->pid > 0 && !sk->exited) {
        kill(sk->pid, SIGKILL);
        waitpid(sk->pid, NULL, 0);
    }
    if (sk->ev_out)
        event_free(sk->ev_out);
    if (sk->ev_exit)
        event_free(sk->ev_exit);
    sk->ev_out = sk->ev_exit = NULL;
    if (sk->pidfd >= 0)
        close(sk->pidfd);
    if (sk->out_fd >= 0)
        close(sk->out_fd);
    sk->pidfd = sk->out_fd = -1;
    sk->pid = -1;
}

static void scan_start(struct sbx_skills *sk)
{
    struct sbx_catalog_root roots[4];
    for (int i = 0; i < 4; i++)
        roots[i] = (struct sbx_catalog_root){sk->roots[i], root_source[i]};
    sbx_err e = {0};
    sk->out_eof = sk->exited = false;
    if (sbx_catalog_scan_start(roots, 4, sk->max_bytes, &sk->pid, &sk->pidfd, &sk->out_fd, &e) ==
            0 &&
        evutil_make_socket_nonblocking(sk->out_fd) == 0 &&
        (sk->ev_out = event_new(sk->base, sk->out_fd, EV_READ | EV_PERSIST, on_scan_out, sk)) &&
        (sk->ev_exit = event_new(sk->base, sk->pidfd, EV_READ, on_scan_exit, sk)) &&
        event_add(sk->ev_out, NULL) == 0 && event_add(sk->ev_exit, NULL) == 0)
        return;
    if (!e.msg[0])
        sbx_err_set(&e, ENOMEM, "skills scan");
    sbx_log(SBX_LOG_ERROR, "skills: %s", e.msg);
    scan_stop(sk);
    if (!sk->cat)
        sk->cat = json_pack("{s:[], s:[]}", "skills", "leftOut");
    struct sk_waiter *w = sk->waiting;
    sk->waiting = NULL;
    notify(w, &e);
}

static int add_waiter(struct sk_waiter **list, sbx_skills_done_fn fn, void *ud, sbx_err *err)
{
    struct sk_waiter *w = calloc(1, sizeof(*w));
    if (!w)
        return sbx_err_set(err, ENOMEM, "skills");
    w->fn = fn, w->ud = ud;
    struct sk_waiter **p = list;
    while (*p)
        p = &(*p)->next;
    *p = w;
    return 0;
}

int sbx_skills_reload(struct sbx_skills *sk, sbx_skills_done_fn fn, void *ud, sbx_err *err)
{
    if (sk->pid > 0) /* what is on disk now may be newer than what it reads */
        return add_waiter(&sk->next_scan, fn, ud, err);
    if (add_waiter(&sk->waiting, fn, ud, err) < 0)
        return -1;
    scan_start(sk);
    return 0;
}

int sbx_skills_when_loaded(struct sbx_skills *sk, sbx_skills_done_fn fn, void *ud)
{
    if (sk->cat)
        return 1;
    sbx_err e = {0};
    return add_waiter(&sk->waiting, fn, ud, &e) < 0 ? -1 : 0;
}

static void drop_waiters(struct sk_waiter **list, void *ud)
{
    for (struct sk_waiter **p = list; *p;) {
        if ((*p)->ud == ud) {
            struct sk_waiter *w = *p;
            *p = w->next;
            free(w);
        } else {
            p = &(*p)->next;
        }
    }
}

struct sk_activation {
    struct sbx_skills *sk;
    struct sbx_clone clone;
    char name[65], version[65];
    sbx_skills_activated_fn fn;
    void *ud;
    struct sk_activation *next;
};

void sbx_skills_unwait(struct sbx_skills *sk, void *ud)
{
    drop_waiters(&sk->waiting, ud);
    drop_waiters(&sk->next_scan, ud);
    for (struct sk_activation *a = sk->acts; a; a = a->next)
        if (a->ud == ud)
            a->fn = NULL; /* it goes on; nobody is told */
}

/* ---- the clone's view ---- */

/* <control>/<tenant>/[<key>/]<id>/skills-state/<source>/<name>/current */
static void overlay_path(const struct sbx_skills *sk, const struct sbx_clone *c, const char *source,
                         const char *name, char *out, size_t len)
{
    if (c->key[0])
        snprintf(out, len, "%s/%s/%s/%s/skills-state/%s/%s/current", sk->control_dir, c->tenant,
                 c->key, c->id, source, name);
    else
        snprintf(out, len, "%s/%s/%s/skills-state/%s/%s/current", sk->control_dir, c->tenant, c->id,
                 source, name);
}

/* The overlay's version name (trimmed), "" when there is none. A few bytes
 * of one small file of the daemon's own control directory. */
static void read_overlay(const char *path, char *out, size_t len)
{
    out[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return;
    ssize_t n = read(fd, out, len - 1);
    close(fd);
    if (n <= 0) {
        out[0] = '\0';
        return;
    }
    out[n] = '\0';
    size_t a = 0, b = (size_t)n;
    while (a < b && isspace((unsigned char)out[a]))
        a++;
    while (b > a && isspace((unsigned char)out[b - 1]))
        b--;
    memmove(out, out + a, b - a);
    out[b - a] = '\0';
}

static json_t *find_version(json_t *skill, const char *v)
{
    size_t i;
    json_t *ver;
    json_array_foreach(json_object_get(skill, "versions"), i,
                       ver) if (strcmp(json_string_value(json_object_get(ver, "name")), v) ==
                                0) return ver;
    return NULL;
}

/* Active: the clone's overlay (not for builtin skills), else the skill's
 * current, else the highest. 0 with r filled, -1 with r->why. */
static int resolve(struct sbx_skills *sk, const struct sbx_clone *c, json_t *skill,
                   struct sk_resolved *r)
{
    char ov[128];
    *r = (struct sk_resolved){.skill = skill};
    json_t *versions = json_object_get(skill, "versions");
    const char *src = json_string_value(json_object_get(skill, "source"));
    const char *name = json_string_value(json_object_get(skill, "name"));
    if (json_array_size(versions) == 0) {
        snprintf(r->why, sizeof(r->why), "no version with a SKILL.md");
        return -1;
    }
    if (json_is_true(json_object_get(skill, "flat"))) {
        r->ver = json_array_get(versions, 0);
        r->version = "";
    } else {
        char path[PATH_MAX];
        ov[0] = '\0';
        if (strcmp(src, "builtin") != 0 && c->tenant[0]) {
            overlay_path(sk, c, src, name, path, sizeof(path));
            read_overlay(path, ov, sizeof(ov));
        }
        const char *cur = json_string_value(json_object_get(skill, "current"));
        const char *want = ov[0] ? ov : cur && cur[0] ? cur : NULL;
        r->ver = want ? find_version(skill, want)
                      : json_array_get(versions, json_array_size(versions) - 1);
        if (!r->ver) {
            snprintf(r->why, sizeof(r->why), "its %s names version '%.64s', which it does not have",
                     ov[0] ? "overlay" : "current file", want);
            return -1;
        }
        r->version = json_string_value(json_object_get(r->ver, "name"));
    }
    if (json_array_size(json_object_get(r->ver, "actions")) == 0) {
        snprintf(r->why, sizeof(r->why), "no actions (no scripts/<action>.{sh,py,js})");
        return -1;
    }
    return 0;
}

/* builtin (its root, then the common store) < shared; mapped never shadows. */
json_t *sk_find(struct sbx_skills *sk, const struct sbx_clone *c, const char *name,
                struct sk_resolved *out)
{
    json_t *winner = NULL;
    struct sk_resolved r;
    out->why[0] = '\0';
    static const char *const order[] = {"builtin", "shared", "mapped"};
    for (int o = 0; o < 3; o++) {
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(sk->cat, "skills"), i, s)
        {
            if (strcmp(json_string_value(json_object_get(s, "name")), name) != 0 ||
                strcmp(json_string_value(json_object_get(s, "source")), order[o]) != 0)
                continue;
            if (resolve(sk, c, s, &r) < 0) {
                if (!winner)
                    memcpy(out->why, r.why, sizeof(r.why));
                continue;
            }
            if (winner && (o == 2 || o == 0))
                continue; /* mapped never shadows; the first builtin root wins */
            winner = s;
            *out = r;
        }
    }
    return winner;
}

bool sk_enabled(const struct sk_resolved *r, const char **reason)
{
    const char *blocked = json_string_value(json_object_get(r->ver, "blockedReason"));
    const char *verdict = json_string_value(json_object_get(r->ver, "scanVerdict"));
    if (blocked && blocked[0]) {
        *reason = blocked;
        return false;
    }
    /* never runnable without a verdict that allows it, whatever else is missing */
    if (!verdict || (strcmp(verdict, "safe") != 0 && strcmp(verdict, "caution") != 0)) {
        *reason = "dangerous (the scan gave no reason)";
        return false;
    }
    const char *md = json_string_value(json_object_get(r->ver, "mdError"));
    if (md && md[0]) {
        *reason = md;
        return false;
    }
    *reason = "";
    return true;
}

static void set_text(json_t *o, const char *key, const char *v)
{
    if (v && v[0])
        json_object_set_new(o, key, json_string(v));
}

json_t *sk_info(const struct sk_resolved *r)
{
    const char *reason;
    bool on = sk_enabled(r, &reason);
    json_t *o = json_pack("{s:O}", "name", json_object_get(r->skill, "name"));
    set_text(o, "source", json_string_value(json_object_get(r->skill, "source")));
    set_text(o, "trustLevel", json_string_value(json_object_get(r->skill, "trustLevel")));
    set_text(o, "rootDir", json_string_value(json_object_get(r->skill, "rootDir")));
    set_text(o, "activeDir", json_string_value(json_object_get(r->ver, "dir")));
    json_t *actions = json_object_get(r->ver, "actions");
    if (json_array_size(actions))
        json_object_set(o, "actions", actions);
    set_text(o, "version", r->version);
    if (!json_is_true(json_object_get(r->skill, "flat"))) {
        json_t *names = json_array();
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(r->skill, "versions"), i, v)
            json_array_append(names, json_object_get(v, "name"));
        json_object_set_new(o, "versions", names);
    }
    json_object_set_new(o, "enabled", json_boolean(on));
    set_text(o, "scanVerdict", json_string_value(json_object_get(r->ver, "scanVerdict")));
    set_text(o, "blockedReason", reason);
    return o;
}

void sbx_skills_extend(struct sbx_skills *sk, const struct sbx_clone *c, json_t *info)
{
    struct sk_resolved r;
    const char *name = json_string_value(json_object_get(info, "name"));
    if (!name || !sk_find(sk, c, name, &r))
        return;
    json_t *md = json_object_get(r.ver, "md"), *oc = json_object_get(md, "openclaw");
    json_t *req = json_object_get(oc, "requires");
    static const char *const texts[] = {"description", "homepage"};
    for (size_t i = 0; md && i < SBX_ARRAY_LEN(texts); i++)
        if (json_object_get(md, texts[i]))
            json_object_set(info, texts[i], json_object_get(md, texts[i]));
    if (md) {
        json_t *ui = json_object_get(md, "userInvocable");
        json_object_set_new(info, "userInvocable", json_boolean(!ui || json_is_true(ui)));
    }
    if (json_is_string(json_object_get(oc, "primaryEnv")))
        json_object_set(info, "primaryEnv", json_object_get(oc, "primaryEnv"));
    json_t *reqs = json_object();
    static const char *const lists[] = {"bins", "anyBins", "env", "config"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(lists); i++) {
        json_t *l = json_object_get(req, lists[i]);
        json_object_set_new(reqs, lists[i], json_is_array(l) ? json_copy(l) : json_array());
    }
    json_t *os = json_object_get(oc, "os");
    json_object_set_new(reqs, "os", json_is_array(os) ? json_copy(os) : json_array());
    json_object_set_new(info, "requirements", reqs);
    json_t *inst = json_object_get(oc, "install");
    json_object_set_new(info, "install", json_is_array(inst) ? json_copy(inst) : json_array());
    if (json_object_get(md, "sandbox"))
        json_object_set(info, "sandbox", json_object_get(md, "sandbox"));
    const char *caution = json_string_value(json_object_get(r.ver, "caution"));
    if (caution)
        json_object_set_new(info, "caution", json_string(caution));
    /* the skills of that name this one hides (precedence) */
    json_t *hidden = json_array();
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(sk->cat, "skills"), i, s)
    {
        if (s != r.skill && strcmp(json_string_value(json_object_get(s, "name")), name) == 0)
            json_array_append_new(hidden,
                                  json_pack("{s:O, s:O}", "source", json_object_get(s, "source"),
                                            "rootDir", json_object_get(s, "rootDir")));
    }
    if (json_array_size(hidden))
        json_object_set_new(info, "shadows", hidden);
    else
        json_decref(hidden);
}

json_t *sbx_skills_list(struct sbx_skills *sk, const struct sbx_clone *c)
{
    json_t *out = json_array();
    const char **names = NULL;
    size_t n = 0;
    json_t *all = json_object_get(sk->cat, "skills");
    names = calloc(json_array_size(all) + 1, sizeof(*names));
    size_t i;
    json_t *s;
    json_array_foreach(all, i, s)
    {
        const char *name = json_string_value(json_object_get(s, "name"));
        bool seen = false;
        for (size_t k = 0; names && k < n && !seen; k++)
            seen = strcmp(names[k], name) == 0;
        if (!seen && names)
            names[n++] = name;
    }
    /* sorted by name (the scan sorts within a root only) */
    for (size_t a = 1; a < n; a++)
        for (size_t b = a; b > 0 && strcmp(names[b - 1], names[b]) > 0; b--) {
            const char *t = names[b];
            names[b] = names[b - 1];
            names[b - 1] = t;
        }
    for (size_t k = 0; k < n; k++) {
        struct sk_resolved r;
        if (sk_find(sk, c, names[k], &r))
            json_array_append_new(out, sk_info(&r));
    }
    free(names);
    return out;
}

static int name_check(const char *what, const char *s, size_t len, sbx_err *err)
{
    if (!sbx_skill_name_ok(s, len))
        return sbx_err_set(err, EINVAL,
                           "invalid %s: 1 to 64 letters, digits, '.', '_' or '-', not starting "
                           "with '.' or '-'",
                           what);
    return 0;
}

json_t *sbx_skills_get(struct sbx_skills *sk, const struct sbx_clone *c, const char *name,
                       size_t len, sbx_err *err)
{
    if (name_check("skill name", name, len, err) < 0)
        return NULL;
    struct sk_resolved r;
    if (!sk_find(sk, c, name, &r)) {
        sbx_err_set(err, ENOENT, "skill not found: %s", name);
        return NULL;
    }
    return sk_info(&r);
}

/* ---- activation ---- */

static void act_next(struct sbx_skills *sk);

static void act_finish(struct sk_activation *a, json_t *skill, const sbx_err *err)
{
    struct sbx_skills *sk = a->sk;
    sk->acts = a->next;
    if (a->fn)
        a->fn(a->ud, skill, err);
    free(a);
    if (sk->acts && !sk->stopping)
        act_next(sk);
}

static int write_overlay(const char *path, const char *text, sbx_err *err)
{
    char dir[PATH_MAX], tmp[PATH_MAX + 16];
    snprintf(dir, sizeof(dir), "%s", path);
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return sbx_err_set(err, errno, "skills state directory");
            *p = '/';
        }
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return sbx_err_set(err, errno, "skills state");
    size_t len = strlen(text);
    /* no trailing newline, as the original */
    if (write(fd, text, len) != (ssize_t)len || fsync(fd) < 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return sbx_err_set(err, e ? e : EIO, "skills state");
    }
    close(fd);
    if (rename(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        return sbx_err_set(err, e, "skills state");
    }
    return 0;
}

static void on_act_scanned(void *ud, const sbx_err *scan_err)
{
    struct sbx_skills *sk = ud;
    struct sk_activation *a = sk->acts;
    sbx_err e = {0};
    struct sk_resolved r;
    if (scan_err)
        return act_finish(a, NULL, scan_err);
    /* the skill, in any tier, even when its active version is not runnable */
    json_t *skill = NULL;
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(sk->cat, "skills"), i, s)
    {
        if (strcmp(json_string_value(json_object_get(s, "name")), a->name) != 0)
            continue;
        const char *src = json_string_value(json_object_get(s, "source"));
        if (strcmp(src, "builtin") == 0) {
            sbx_err_set(&e, ENOTSUP, "builtin skill cannot be activated: %s", a->name);
            return act_finish(a, NULL, &e);
        }
        if (!skill || strcmp(src, "shared") == 0)
            skill = s; /* shared before mapped */
    }
    if (!skill) {
        sbx_err_set(&e, EINVAL, "skill not found: %s", a->name);
        return act_finish(a, NULL, &e);
    }
    json_t *ver = find_version(skill, a->version);
    if (json_is_true(json_object_get(skill, "flat")) || !ver) {
        sbx_err_set(&e, EINVAL, "version not found: %s", a->version);
        return act_finish(a, NULL, &e);
    }
    const char *reason = json_string_value(json_object_get(ver, "blockedReason"));
    if (!reason || !reason[0])
        reason = json_string_value(json_object_get(ver, "mdError"));
    if (reason && reason[0]) {
        sbx_err_set(&e, EINVAL, "skill version blocked: %s", reason);
        return act_finish(a, NULL, &e);
    }
    const char *src = json_string_value(json_object_get(skill, "source"));
    char path[PATH_MAX], old[128];
    overlay_path(sk, &a->clone, src, a->name, path, sizeof(path));
    read_overlay(path, old, sizeof(old));
    bool had = access(path, F_OK) == 0;
    if (write_overlay(path, a->version, &e) < 0)
        return act_finish(a, NULL, &e);
    /* the catalog as the next run sees it */
    json_t *now = sk_find(sk, &a->clone, a->name, &r);
    const char *why;
    if (now != skill || !r.version || strcmp(r.version, a->version) != 0 || !sk_enabled(&r, &why)) {
        sbx_err rb = {0};
        if (had ? write_overlay(path, old, &rb) : unlink(path))
            sbx_log(SBX_LOG_ERROR, "skills: rollback of %s failed", a->name);
        sbx_err_set(&e, EINVAL, "activated skill is not runnable: %s", a->name);
        return act_finish(a, NULL, &e);
    }
    char who[128];
    sbx_log(SBX_LOG_INFO, "skill activated name=%s version=%s tenant=%s", a->name, a->version,
            sbx_log_safe(a->clone.tenant, who, sizeof(who)));
    json_t *info = sk_info(&r);
    act_finish(a, info, NULL);
    json_decref(info);
}

static void act_next(struct sbx_skills *sk)
{
    sbx_err e = {0};
    if (sbx_skills_reload(sk, on_act_scanned, sk, &e) < 0)
        act_finish(sk->acts, NULL, &e);
}

int sbx_skills_activate(struct sbx_skills *sk, const struct sbx_clone *c, const char *name,
                        size_t name_len, const char *version, size_t version_len,
                        sbx_skills_activated_fn fn, void *ud, sbx_err *err)
{
    if (name_check("skill name", name, name_len, err) < 0)
        return -1;
    if (!version || version_len == 0)
        return sbx_err_set(err, EINVAL, "version is required");
    if (name_check("version", version, version_len, err) < 0)
        return -1;
    struct sk_activation *a = calloc(1, sizeof(*a));
    if (!a)
        return sbx_err_set(err, ENOMEM, "activation");
    *a = (struct sk_activation){.sk = sk, .clone = *c, .fn = fn, .ud = ud};
    snprintf(a->name, sizeof(a->name), "%s", name);
    snprintf(a->version, sizeof(a->version), "%s", version);
    struct sk_activation **p = &sk->acts;
    while (*p)
        p = &(*p)->next;
    *p = a;
    if (sk->acts == a)
        act_next(sk);
    return 0;
}

/* ---- a skill's task ---- */

void sbx_skill_task_free(struct sbx_skill_task *h)
{
    sbx_strv_free(h->argv);
    sbx_strv_free(h->env);
    sbx_strv_free(h->allow);
    for (size_t i = 0; i < SBX_ARRAY_LEN(h->strs); i++)
        free(h->strs[i]);
    memset(h, 0, sizeof(*h));
}

static uint64_t lower_u(uint64_t declared, uint64_t tenant)
{
    return declared && declared < tenant ? declared : tenant;
}

/* argv: the action's script under /skill, with its interpreter by suffix. */
static int skill_argv(const char *file, const char *const *args, struct sbx_skill_task *h)
{
    const char *dot = strrchr(file, '.');
    const char *interp = !dot                      ? NULL
                         : strcmp(dot, ".sh") == 0 ? "/bin/bash"
                         : strcmp(dot, ".js") == 0 ? "node"
                                                   : "python3";
    size_t n_args = args ? sbx_strv_len(args) : 0, k = 0;
    if (!(h->argv = calloc(n_args + 3, sizeof(char *))) ||
        (interp && !(h->argv[k++] = strdup(interp))) ||
        asprintf(&h->argv[k++], "/skill/scripts/%s", file) < 0) {
        if (k)
            h->argv[k - 1] = NULL; /* asprintf leaves it undefined on failure */
        return -1;
    }
    for (size_t i = 0; i < n_args; i++)
        if (!(h->argv[k++] = strdup(args[i])))
            return -1;
    return 0;
}

/* env: the request's, then UR_TOKEN (fresh for this task, an hour at
 * most), UR_BASE_URL and the SKILL_* names. */
static int skill_env(struct sbx_skills *sk, const struct sbx_task_request *req, const char *name,
                     const char *version, const char *action, struct sbx_skill_task *h,
                     sbx_err *err)
{
    int64_t now = (int64_t)time(NULL);
    struct sbx_jwt_claims cl = {.sub = req->clone.id,
                                .tenant = req->clone.tenant,
                                .aud = sk->audience,
                                .iat = now,
                                .exp = now + (int64_t)sk->token_ttl_s};
    char *tok = sbx_jwt_hs256(&cl, sk->secret, sk->secret_len, err);
    if (!tok)
        return -1;
    size_t n_env = req->env ? sbx_strv_len(req->env) : 0, e = 0;
    bool ok = (h->env = calloc(n_env + 8, sizeof(char *))) != NULL;
    for (; ok && e < n_env; e++)
        ok = (h->env[e] = strdup(req->env[e])) != NULL;
    /* each asprintf that fails leaves its slot undefined: cleared below */
    ok = ok && asprintf(&h->env[e++], "UR_TOKEN=%s", tok) >= 0 &&
         (!sk->ur_base_url || asprintf(&h->env[e++], "UR_BASE_URL=%s", sk->ur_base_url) >= 0) &&
         asprintf(&h->env[e++], "SKILL_NAME=%s", name) >= 0 &&
         asprintf(&h->env[e++], "SKILL_VERSION=%s", version) >= 0 &&
         asprintf(&h->env[e++], "SKILL_ACTION=%s", action) >= 0 &&
         (h->env[e++] = strdup("SKILL_DIR=/skill")) != NULL;
    free(tok);
    if (!ok) {
        if (h->env && e)
            h->env[e - 1] = NULL;
        return sbx_err_set(err, ENOMEM, "skill task");
    }
    return 0;
}

/* A community ("mapped") skill: strict seccomp, default-deny egress opened
 * only to the hosts its SKILL.md declares, the lower of its and the tenant's
 * limits. */
static int skill_community(struct sbx_skills *sk, const struct sk_resolved *r,
                           struct sbx_task_request *req, struct sbx_skill_task *h)
{
    const struct sbx_runtime_settings *set = sk->rt ? sbx_runtime_settings(sk->rt) : NULL;
    json_t *sb = json_object_get(json_object_get(r->ver, "md"), "sandbox");
    json_t *hosts = json_object_get(sb, "network"), *lim = json_object_get(sb, "limits");
    req->strict = true;
    req->declared_only = true;
    /* never more network than the daemon's or the request's: none stays none */
    bool none = (set && set->net == SBX_NET_NONE) || req->net == SBX_NET_NONE;
    req->net = none ? SBX_NET_NONE : SBX_NET_PROXY;
    req->net_default = SBX_DEFAULT_DENY;
    if (!(h->allow = calloc(json_array_size(hosts) + 1, sizeof(char *))))
        return -1;
    for (size_t i = 0; i < json_array_size(hosts); i++)
        if (!(h->allow[i] = strdup(json_string_value(json_array_get(hosts, i)))))
            return -1;
    req->allow = (const char *const *)h->allow; /* the caller's deny rules stay */
    if (!set)
        return 0;
    uint64_t mem = lower_u((uint64_t)json_integer_value(json_object_get(lim, "memoryBytes")),
                           req->memory_bytes ? req->memory_bytes : set->limits.memory_bytes);
    uint64_t pids = lower_u((uint64_t)json_integer_value(json_object_get(lim, "pids")),
                            req->pids ? req->pids : set->limits.pids);
    double cpu = json_number_value(json_object_get(lim, "cpu"));
    double tcpu = req->cpu_cores > 0 ? req->cpu_cores : set->limits.cpu_cores;
    double to = json_number_value(json_object_get(lim, "timeoutSeconds"));
    double tto = req->timeout_s > 0 ? req->timeout_s : set->limits.timeout_s;
    req->memory_bytes = mem < (8u << 20) ? (8u << 20) : mem;
    req->pids = pids;
    req->cpu_cores = cpu > 0 && cpu < tcpu ? cpu : tcpu;
    req->timeout_s = to > 0 && to < tto ? to : tto;
    return 0;
}

int sbx_skills_task(struct sbx_skills *sk, const char *name, const char *action,
                    const char *const *args, struct sbx_task_request *req, struct sbx_skill_task *h,
                    sbx_err *err)
{
    memset(h, 0, sizeof(*h));
    struct sk_resolved r;
    if (!sk->cat)
        return sbx_err_set(err, EAGAIN, "the skills catalog is still being scanned: try again");
    if (!sbx_skill_name_ok(name, strlen(name)) || !sk_find(sk, &req->clone, name, &r))
        return sbx_err_set(err, EINVAL, "unsupported skill: %s", name);
    const char *reason;
    if (!sk_enabled(&r, &reason))
        return sbx_err_set(err, EINVAL, "skill blocked: %s", reason);
    json_t *script = sbx_skill_name_ok(action, strlen(action))
                         ? json_object_get(json_object_get(r.ver, "scripts"), action)
                         : NULL;
    if (!script)
        return sbx_err_set(err, EINVAL, "unsupported skill action: %s/%s", name, action);
    const char *src = json_string_value(json_object_get(r.skill, "source"));
    const char *trust = json_string_value(json_object_get(r.skill, "trustLevel"));
    if (skill_argv(json_string_value(script), args, h) < 0 ||
        !(h->strs[0] = strdup(json_string_value(json_object_get(r.ver, "dir")))) ||
        !(h->strs[1] = strdup(src)) || !(h->strs[2] = strdup(trust)) ||
        !(h->strs[3] = strdup(r.version)) || !(h->strs[4] = strdup(name)))
        goto oom;
    h->mount = (struct sbx_mount){.host = h->strs[0], .inside = "/skill"};
    if (skill_env(sk, req, name, r.version, action, h, err) < 0)
        goto fail;
    req->argv = (const char *const *)h->argv;
    req->language = req->code = NULL;
    req->env = (const char *const *)h->env;
    req->mounts = &h->mount;
    req->n_mounts = 1;
    req->skill = h->strs[4];
    req->skill_source = h->strs[1];
    req->skill_trust = h->strs[2];
    req->skill_version = h->strs[3];
    if (strcmp(src, "mapped") == 0 && skill_community(sk, &r, req, h) < 0)
        goto oom;
    return 0;
oom:
    sbx_err_set(err, ENOMEM, "skill task");
fail:
    sbx_skill_task_free(h);
    return -1;
}

/* ---- direct execution of a skill's path ---- */

static bool names_root(const char *s, const char *root)
{
    size_t n = root ? strlen(root) : 0;
    while (n > 1 && root[n - 1] == '/')
        n--;
    if (n <= 1)
        return false;
    for (const char *p = s; (p = strstr(p, root)); p++)
        if (p[n] == '\0' || p[n] == '/' || p[n] == ' ' || p[n] == '"' || p[n] == '\'')
            return true;
    return false;
}

static bool names_any(const struct sbx_skills *sk, const char *s)
{
    /* the configured roots and the conventional in-sandbox names */
    static const char *const fixed[] = {"/opt/skills/shared", "/opt/skills/mapped",
                                        "/opt/skills-store"};
    for (int i = 1; i < 4; i++)
        if (names_root(s, sk->roots[i]))
            return true;
    for (size_t i = 0; i < SBX_ARRAY_LEN(fixed); i++)
        if (names_root(s, fixed[i]))
            return true;
    return false;
}

int sbx_skills_check_command(const struct sbx_skills *sk, const char *const *argv, const char *code,
                             sbx_err *err)
{
    static const char msg[] = "direct external skill path execution is blocked; use claw-skill";
    size_t joined_len = 0;
    for (size_t i = 0; argv && argv[i]; i++) {
        if (names_any(sk, argv[i]))
            return sbx_err_set(err, EINVAL, msg);
        joined_len += strlen(argv[i]) + 1;
    }
    if (code && names_any(sk, code))
        return sbx_err_set(err, EINVAL, msg);
    /* a path cut across arguments ("/opt/skills" "/mapped/x") */
    char *joined = joined_len ? malloc(joined_len + 1) : NULL;
    if (joined) {
        char *p = joined;
        for (size_t i = 0; argv[i]; i++)
            p += sprintf(p, "%s", argv[i]);
        bool bad = names_any(sk, joined);
        free(joined);
        if (bad)
            return sbx_err_set(err, EINVAL, msg);
    }
    return 0;
}

/* ---- life ---- */

struct sbx_skills *sbx_skills_new(struct event_base *base, struct sbx_runtime *rt,
                                  const struct sbx_skills_settings *s, sbx_err *err)
{
    struct sbx_skills *sk = calloc(1, sizeof(*sk));
    if (!sk) {
        sbx_err_set(err, ENOMEM, "skills");
        return NULL;
    }
    sk->base = base;
    sk->rt = rt;
    sk->pid = -1;
    sk->pidfd = sk->out_fd = -1;
    const char *roots[4] = {s->builtin_root, s->common_root, s->shared_root, s->mapped_root};
    bool ok = (sk->out = evbuffer_new()) != NULL;
    for (int i = 0; i < 4; i++)
        if (roots[i] && roots[i][0] && !(sk->roots[i] = strdup(roots[i])))
            ok = false;
    sk->control_dir = strdup(s->control_dir ? s->control_dir : "/nonexistent");
    sk->state_dir = strdup(s->state_dir ? s->state_dir : "");
    sk->audience = strdup(s->token_audience ? s->token_audience : "ur-api");
    sk->ur_base_url = s->ur_base_url && s->ur_base_url[0] ? strdup(s->ur_base_url) : NULL;
    sk->secret = malloc(s->token_secret_len ? s->token_secret_len : 1);
    sk->secret_len = s->token_secret_len;
    sk->max_bytes = s->max_bytes;
    sk->token_ttl_s = s->token_ttl_s > 0 ? s->token_ttl_s : 3600;
    if (!ok || !sk->control_dir || !sk->state_dir || !sk->audience || !sk->secret ||
        (s->ur_base_url && s->ur_base_url[0] && !sk->ur_base_url)) {
        sbx_err_set(err, ENOMEM, "skills");
        sbx_skills_free(sk);
        return NULL;
    }
    if (s->token_secret_len)
        memcpy(sk->secret, s->token_secret, s->token_secret_len);
    if (sk->state_dir[0] && sk_broker_init(sk, err) < 0) {
        sbx_skills_free(sk);
        return NULL;
    }
    scan_start(sk);
    return sk;
}

void sbx_skills_free(struct sbx_skills *sk)
{
    if (!sk)
        return;
    sk->stopping = true;
    sk_broker_free(sk);
    scan_stop(sk);
    sbx_err e = {0};
    sbx_err_set(&e, ECANCELED, "the daemon is stopping");
    while (sk->acts)
        act_finish(sk->acts, NULL, &e);
    notify(sk->waiting, &e);
    notify(sk->next_scan, &e);
    if (sk->out)
        evbuffer_free(sk->out);
    json_decref(sk->cat);
    for (int i = 0; i < 4; i++)
        free(sk->roots[i]);
    free(sk->control_dir);
    free(sk->state_dir);
    free(sk->audience);
    free(sk->ur_base_url);
    if (sk->secret)
        memset(sk->secret, 0, sk->secret_len);
    free(sk->secret);
    free(sk);
}
