#include "exec/pool.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/hex.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/strv.h"
#include "base/time.h"
#include "exec/pool_int.h"
#include "isolate/spawner.h"
#include "isolate/stage.h"

/* A discarded sandbox whose cgroup is not removable yet is retried from the
 * pool's timer for at most this long, then left (swept at the next start). */
#define DYING_BOUND_MS 2000
#define TICK_MS 500

struct pool_entry {
    struct pool_entry *prev, *next;
    char *key; /* the spec but its command, as text */
    dev_t dev; /* the workspace it was built on */
    ino_t ino;
    char *workspace, *rootfs, *name;
    struct sbx_mount mounts[SBX_MOUNTS_MAX];
    char *mount_text[2 * SBX_MOUNTS_MAX];
    char **zygote_argv, **zygote_envp;
    char *net_rules_arg; /* its egress's nftables rules (the policy's sets) */
    void *net;           /* ready: its egress, under the placeholder (net_start) */
    /* Taken for any clone: its task's sets begun at take, while the spawner
     * attaches (net_sets' job), or its egress could not be bound then. */
    void *job;
    bool unbound;
    struct sbx_spec spec;
    struct sbx_sandbox_fds fds;
    struct sbx_sandbox sb;
    bool ready;
    bool orphan; /* discarded while building: its sandbox is buried as it comes */
    int slot;    /* pooled for any clone: its host id range; -1: for one clone */
    bool any;    /* for any clone (a template has no slot) */
    int64_t since_ms;
    void *waiter; /* building: its place in the spawner's queue */
};

static const struct sbx_metric m_takes = {
    .name = "sandbox_pool_tasks_total",
    .help = "Tasks the warm pool could serve, by result: \"hit\" (a sandbox built ahead) or "
            "\"miss\" (built for the task).",
    .kind = SBX_METRIC_COUNTER,
    .labels = {"result"}};
static const struct sbx_metric m_sessions = {
    .name = "sandbox_pool_sessions_total",
    .help = "Live sessions' holders the warm pool could serve, by result: \"hit\" (a sandbox "
            "built ahead, attached) or \"miss\" (built for the session).",
    .kind = SBX_METRIC_COUNTER,
    .labels = {"result"}};
static const struct sbx_metric m_idle = {.name = "sandbox_pool_idle",
                                         .help = "Sandboxes of the warm pool ready for a task.",
                                         .kind = SBX_METRIC_GAUGE};
static const struct sbx_metric m_mem = {
    .name = "sandbox_pool_memory_bytes",
    .help = "Memory held by the warm pool's ready sandboxes (their cgroups' usage, summed).",
    .kind = SBX_METRIC_GAUGE};

/* A description's number of sandboxes to hold (refill). */
struct pool_target {
    struct pool_target *next;
    char *key;
    uint64_t want;
    struct pool_entry *tmpl; /* its description, for refills between takes */
    int64_t last_ms;         /* its last take */
};

struct dying {
    struct sbx_sandbox sb;
    int slot; /* given back once sb is all gone; -1 none */
    int64_t deadline_ms;
};

/* Filesystems (st_dev) a workspace idmap failed on: pooled per clone. */
#define NO_IDMAP_MAX 16

static struct {
    struct sbx_pool_config cfg;
    struct event_base *base;
    struct event *tick;
    struct pool_entry *head, *tail; /* oldest first */
    struct pool_target *targets;
    struct event *kick; /* refills after a task's end or an arrival */
    struct dying *dying;
    size_t n_dying, cap_dying;
    uint64_t running;
    struct sbx_pool_stats st;
    unsigned long long seq;
    uint8_t *slot_used; /* cfg.ids_ranges of them: 1 in use (or left to a stuck sandbox) */
    dev_t no_idmap[NO_IDMAP_MAX];
    size_t n_no_idmap;
    /* Sessions' holders whose attach the spawner has not answered yet, and
     * the last answer: no refill is asked meanwhile nor for HOLDER_QUIET_MS
     * after (the spawner answers in turn: a burst of starts, together or
     * one after the other, would wait behind the builds its own takes
     * asked). */
    uint64_t holders_attaching;
    int64_t holder_ms;
} P;

#define HOLDER_QUIET_MS 20

/* ---- the pool's host id ranges ---- */

static int slot_get(void)
{
    for (uint32_t i = 0; P.slot_used && i < P.cfg.ids_ranges; i++)
        if (!P.slot_used[i]) {
            P.slot_used[i] = 1;
            return (int)i;
        }
    return -1;
}

void exec_pool_slot_put(int slot)
{
    if (slot >= 0 && P.slot_used && (uint32_t)slot < P.cfg.ids_ranges)
        P.slot_used[slot] = 0;
}

static uint32_t slot_base(int slot)
{
    return P.cfg.ids_first + (uint32_t)slot * SBX_ID_RANGE;
}

void sbx_pool_stats(struct sbx_pool_stats *out)
{
    *out = P.st;
    out->idle = out->building = 0;
    for (struct pool_entry *pe = P.head; pe; pe = pe->next)
        *(pe->ready ? &out->idle : &out->building) += 1;
}

uint64_t sbx_pool_memory(uint64_t *counted)
{
    uint64_t sum = 0, n = 0;
    for (struct pool_entry *pe = P.head; pe; pe = pe->next) {
        struct sbx_cg_stats cs = {0};
        if (pe->ready && sbx_cgroup_stats(&pe->sb.cg, &cs, NULL) == 0 && cs.have_mem)
            sum += cs.mem_bytes, n++;
    }
    *counted = n;
    return sum;
}
static void kick(void);

void exec_pool_task_count(int delta)
{
    P.running = delta < 0 && P.running == 0 ? 0 : P.running + (uint64_t)(int64_t)delta;
    if (delta < 0)
        kick(); /* below max_active again */
}

static void unlink_entry(struct pool_entry *pe)
{
    *(pe->prev ? &pe->prev->next : &P.head) = pe->next;
    *(pe->next ? &pe->next->prev : &P.tail) = pe->prev;
    pe->prev = pe->next = NULL;
}

static void link_tail(struct pool_entry *pe)
{
    *(P.tail ? &P.tail->next : &P.head) = pe;
    pe->prev = P.tail;
    P.tail = pe;
}

static void free_entry(struct pool_entry *pe)
{
    free(pe->key);
    free(pe->workspace);
    free(pe->rootfs);
    free(pe->name);
    free(pe->net_rules_arg);
    for (size_t i = 0; i < SBX_ARRAY_LEN(pe->mount_text); i++)
        free(pe->mount_text[i]);
    sbx_strv_free(pe->zygote_argv);
    sbx_strv_free(pe->zygote_envp);
    free(pe);
}

static void arm_tick(void)
{
    struct timeval tv = {.tv_sec = TICK_MS / 1000, .tv_usec = (TICK_MS % 1000) * 1000};
    if (P.tick && !evtimer_pending(P.tick, NULL))
        evtimer_add(P.tick, &tv);
}

/* Killed now, released from the timer (never waited for on the loop); its
 * host id range (slot) is given back once it is all gone. */
static void bury(struct sbx_sandbox *sb, int slot)
{
    sbx_sandbox_kill(sb);
    if (P.n_dying == P.cap_dying) {
        size_t cap = P.cap_dying ? 2 * P.cap_dying : 8;
        struct dying *d = realloc(P.dying, cap * sizeof(*d));
        if (!d) {
            sbx_sandbox_abandon(sb); /* the range stays taken */
            return;
        }
        P.dying = d, P.cap_dying = cap;
    }
    P.dying[P.n_dying++] =
        (struct dying){.sb = *sb, .slot = slot, .deadline_ms = sbx_mono_ms() + DYING_BOUND_MS};
    arm_tick();
}

void exec_pool_bury(struct sbx_sandbox *sb)
{
    bury(sb, -1);
}

/* An entry ends unused: its sandbox (if any) is killed, its answer (if
 * awaited) will be. */
static void discard(struct pool_entry *pe)
{
    unlink_entry(pe);
    if (pe->net)
        P.cfg.net_drop(P.cfg.net_ctx, pe->net);
    if (pe->ready) {
        bury(&pe->sb, pe->slot);
        P.st.discarded++;
    } else if (pe->waiter && pe->slot >= 0) {
        pe->orphan = true; /* its range is given back once its sandbox is gone */
        return;
    } else if (pe->waiter) {
        exec_spawner_detach(pe->waiter);
    }
    free_entry(pe);
}

static void target_shrink(const char *key);
static void target_free(struct pool_target *t);
static void on_kick(evutil_socket_t fd, short what, void *arg);
static void targets_sweep_if(bool (*drop)(const struct pool_target *t, const void *arg),
                             const void *arg);
static void targets_sweep(void);

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what, (void)arg;
    int64_t now = sbx_mono_ms();
    for (struct pool_entry *pe = P.head, *next; pe; pe = next) {
        next = pe->next;
        if (pe->ready && now - pe->since_ms >= (int64_t)(P.cfg.idle_timeout_s * 1000)) {
            target_shrink(pe->key);
            discard(pe);
        }
    }
    targets_sweep();
    for (size_t i = 0; i < P.n_dying;) {
        struct dying *d = &P.dying[i];
        sbx_err e = {0};
        int rc = sbx_sandbox_release_step(&d->sb, &e);
        if (rc < 0 && e.errnum == EBUSY && now < d->deadline_ms) {
            i++;
            continue;
        }
        if (rc < 0) {
            if (e.errnum == EBUSY)
                sbx_sandbox_abandon(&d->sb);
            sbx_log(SBX_LOG_WARN, "pool: a discarded sandbox was not all removed: %s%s", e.msg,
                    d->slot >= 0 ? " (its host id range is not used again)" : "");
        } else {
            exec_pool_slot_put(d->slot);
        }
        P.dying[i] = P.dying[--P.n_dying];
    }
    if (P.head || P.n_dying)
        arm_tick();
}

static void collect(void *ud)
{
    (void)ud;
    struct sbx_pool_stats st;
    sbx_pool_stats(&st);
    sbx_metric_set(&m_idle, (double)st.idle);
    uint64_t counted;
    sbx_metric_set(&m_mem, (double)sbx_pool_memory(&counted));
}

void sbx_pool_configure(struct event_base *base, const struct sbx_pool_config *c)
{
    if (c->enabled && !P.cfg.enabled) {
        sbx_metric_declare(&m_takes);
        sbx_metric_declare(&m_sessions);
        sbx_metrics_collector(collect, NULL);
        sbx_log(SBX_LOG_INFO, "pool: on, max_idle=%llu max_active=%llu idle_timeout=%gs%s",
                (unsigned long long)c->max_idle, (unsigned long long)c->max_active,
                c->idle_timeout_s, sbx_spawner_fd() < 0 ? " (no spawner: nothing is pooled)" : "");
    }
    if (c->ids_ranges != P.cfg.ids_ranges) {
        free(P.slot_used);
        P.slot_used = c->ids_ranges ? calloc(c->ids_ranges, 1) : NULL;
    }
    P.cfg = *c;
    if (!P.slot_used)
        P.cfg.ids_ranges = 0;
    P.base = base;
    if (!P.tick)
        P.tick = evtimer_new(base, on_tick, NULL);
    if (!P.kick)
        P.kick = evtimer_new(base, on_kick, NULL);
    if (!P.tick || !P.kick)
        P.cfg.enabled = false;
}

/* How long the shutdown waits for the spawner's answers still due. */
#define DRAIN_BOUND_MS 3000

void sbx_pool_shutdown(void)
{
    exec_spawner_drain(DRAIN_BOUND_MS);
    while (P.head) {
        struct pool_entry *pe = P.head;
        if (!pe->ready && pe->waiter) { /* its answer must not find it */
            unlink_entry(pe);
            exec_spawner_detach(pe->waiter);
            free_entry(pe);
            continue;
        }
        discard(pe);
    }
    for (struct pool_target *t = P.targets, *next; t; t = next) {
        next = t->next;
        target_free(t);
    }
    P.targets = NULL;
    if (P.kick)
        event_free(P.kick);
    P.kick = NULL;
    for (size_t i = 0; i < P.n_dying; i++)
        sbx_sandbox_release(&P.dying[i].sb, NULL);
    P.n_dying = 0;
    free(P.dying);
    P.dying = NULL;
    P.cap_dying = 0;
    if (P.tick)
        event_free(P.tick);
    P.tick = NULL;
    if (P.cfg.enabled)
        sbx_metrics_collector_remove(collect, NULL);
    P.cfg.enabled = false;
    free(P.slot_used);
    P.slot_used = NULL;
    P.cfg.ids_ranges = 0;
}

/* path is dir or beneath it (dir's trailing slashes aside). */
static bool under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    return path && strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

static bool target_under(const struct pool_target *t, const void *arg)
{
    return t->tmpl && under(t->tmpl->workspace, arg);
}

void sbx_pool_forget_workspace(const char *dir)
{
    targets_sweep_if(target_under, dir); /* no refill on it either */
    for (struct pool_entry *pe = P.head, *next; pe; pe = next) {
        next = pe->next;
        if (under(pe->workspace, dir))
            discard(pe);
    }
}

/* Its network: none of its own (policy none), or an egress the pool can
 * start ahead and the task bind at take (proxy); never the host's. */
static bool net_poolable(const struct sbx_task_opts *o, bool holder)
{
    const struct sbx_spec *s = &o->spec;
    if (s->host_net)
        return false;
    if (!s->net_rules && !o->on_spawn)
        return true;
    return s->net_rules && s->net_rules_arg && (o->on_spawn || holder) && o->on_take &&
           P.cfg.net_start && P.cfg.net_drop;
}

/* A task the pool can serve: the caller's environment is pooled, and the
 * sandbox needs nothing made per task but what is bound at take (its
 * limits, its egress's policy): no bind of the environment's, no session.
 * The clone's own binds are part of the key. A session's holder (holder):
 * the same with no command. */
static bool eligible(const struct sbx_task_opts *o, bool holder)
{
    const struct sbx_spec *s = &o->spec;
    for (size_t i = 0; i < s->n_mounts; i++)
        if (s->mounts[i].root) /* an environment's: may name the task ({{.TaskID}}) */
            return false;
    bool command = holder ? !s->argv && !o->zygote_argv : s->argv && s->argv[0];
    return P.cfg.enabled && (P.cfg.max_idle || (holder && P.cfg.session_idle)) && o->poolable &&
           sbx_spawner_fd() >= 0 && command && !s->pooled && net_poolable(o, holder) &&
           s->n_mounts <= SBX_MOUNTS_MAX && !s->session && s->join_pidfd < 0 && !s->host_view &&
           s->workspace && s->name && o->fds.init_exe >= 0 && o->fds.seccomp >= 0;
}

/* Limits a pooled sandbox cannot take at take time stay in its key.
 * With cgroups, memory, pids and cpu are rewritten on the live cgroup
 * (live_limits); without them they are init's rlimits and memory watch,
 * fixed at its start. The file size and descriptor rlimits and the tmpfs
 * size are set at the start too (they come from the configuration, not
 * from a request). */
static bool limits_live(const struct sbx_spec *s)
{
    return s->cg_host && s->cg_host->mode != SBX_CG_RLIMIT;
}

/* Without cgroups, a pooled sandbox with no zygote takes the task's memory
 * and process rlimits (and its memory watch) with the command
 * (spec.limits_at_command): init has set none before. A zygote's are set
 * when it starts, so they stay in the key; so does the size of the tmpfs
 * mounts, which a memory limit below it bounds (key_fixed_limits). */
static bool limits_by_command(const struct sbx_task_opts *o)
{
    return o->spec.cg_host && o->spec.cg_host->mode == SBX_CG_RLIMIT && !o->zygote_argv;
}

static void key_fixed_limits(const struct sbx_task_opts *o, char *out, size_t len)
{
    const struct sbx_spec *s = &o->spec;
    const struct sbx_cg_limits *l = &s->cg_limits;
    /* the tmpfs as mounted: without cgroups, no larger than the memory limit */
    uint64_t tmp = sbx_sandbox_tmp_size(s, s->cg_host ? s->cg_host->mode : SBX_CG_V1);
    int n = snprintf(out, len, "%llu %llu %llu", (unsigned long long)s->file_size_bytes,
                     (unsigned long long)tmp, (unsigned long long)s->nofile);
    if (!limits_live(s) && !limits_by_command(o) && n > 0 && (size_t)n < len)
        snprintf(out + n, len - (size_t)n, " %llu %llu %.17g", (unsigned long long)l->memory_bytes,
                 (unsigned long long)l->pids, l->cpu_cores);
}

/* The limits a pooled sandbox's command carries (NULL: none). */
static const struct sbx_cg_limits *command_limits(const struct pool_entry *pe,
                                                  const struct sbx_spec *s)
{
    return pe->spec.limits_at_command ? &s->cg_limits : NULL;
}

/* The task's cgroup limits on the pooled sandbox pe, before its command. */
static int live_limits(struct pool_entry *pe, const struct sbx_spec *s, sbx_err *err)
{
    const struct sbx_cg_limits *was = &pe->spec.cg_limits, *lim = &s->cg_limits;
    if (!limits_live(s) || (was->memory_bytes == lim->memory_bytes && was->pids == lim->pids &&
                            was->cpu_cores == lim->cpu_cores))
        return 0;
    if (sbx_sandbox_relimit(&pe->sb, was, lim, err) < 0)
        return -1;
    pe->spec.cg_limits = *lim;
    return 0;
}

/* A task's address sets are made its own at take (net_sets) when the
 * sandbox it takes was built with others. */
static bool sets_at_take(void)
{
    return P.cfg.net_sets && P.cfg.net_sets_fd && P.cfg.net_sets_end && P.cfg.net_sets_abort;
}

/* pe was built with the nftables rules o's task would have (no swap). */
static bool same_rules(const struct pool_entry *pe, const struct sbx_task_opts *o)
{
    return !o->spec.net_rules_arg || !pe->net_rules_arg ||
           strcmp(o->spec.net_rules_arg, pe->net_rules_arg) == 0;
}

static char *spec_key(const struct sbx_task_opts *o)
{
    const struct sbx_spec *s = &o->spec;
    char *k, *binds = NULL;
    size_t blen = 0;
    FILE *f = open_memstream(&binds, &blen);
    if (!f)
        return NULL;
    for (size_t i = 0; i < s->n_mounts; i++)
        fprintf(f, "%s%c%s%c%d%c", s->mounts[i].host, 0, s->mounts[i].inside, 0,
                (int)s->mounts[i].writable, 0);
    char *const *zv[2] = {o->zygote_argv, o->zygote_envp};
    for (int l = 0; l < 2; l++) {
        fprintf(f, "%c", 1);
        for (size_t i = 0; zv[l] && zv[l][i]; i++)
            fprintf(f, "%s%c", zv[l][i], 0);
    }
    if (fclose(f) != 0)
        return NULL;
    /* NULs separate the binds' text: hex it into the key */
    cleanup_free char *hex = malloc(2 * blen + 1);
    if (!hex) {
        free(binds);
        return NULL;
    }
    sbx_hex_encode(binds, blen, hex);
    hex[2 * blen] = '\0';
    free(binds);
    char fixed[128];
    key_fixed_limits(o, fixed, sizeof(fixed));
    /* An egress: its policy is bound at take, its address sets made the
     * task's then (sets_at_take); otherwise they are made with the sandbox
     * and its rules are part of the key. */
    const char *rules = s->net_rules && !sets_at_take() ? s->net_rules_arg : "";
    if (asprintf(&k, "%s\n%u %u %u\n%s\n%d %s\n%p %d %d\n%s\n%d %zu\n%s", s->workspace,
                 (unsigned)s->host_id_base, (unsigned)s->uid, (unsigned)s->gid,
                 s->rootfs ? s->rootfs : "", (int)s->writable_root, fixed, (const void *)s->cg_host,
                 o->fds.init_exe, o->fds.seccomp, hex, s->net_rules != NULL, strlen(rules),
                 rules) < 0)
        return NULL;
    return k;
}

/* The task's egress policy on pe's egress (the task's from now on), before
 * its command is sent; when the task's nftables rules are not those pe was
 * built with, its address sets are made the task's: *job (the command
 * waits for its end, exec_pool_sets_done). */
static int bind_net(struct pool_entry *pe, const struct sbx_task_opts *o, void **job, sbx_err *err)
{
    *job = NULL;
    if (!pe->net)
        return 0;
    void *net = sbx_steal_pointer(&pe->net);
    if (o->on_take(o->ud, net, err) < 0)
        return -1;
    if (same_rules(pe, o))
        return 0;
    if (!sets_at_take()) /* cannot happen: such rules are in the key */
        return sbx_err_set(err, EINVAL, "a pooled sandbox with other address sets");
    *job = P.cfg.net_sets(P.cfg.net_ctx, net, err);
    return *job ? 0 : -1;
}

/* Still waiting for its command: init alive, nothing said on the socket
 * (a setup error would be there). */
static bool still_fresh(const struct pool_entry *pe)
{
    struct pollfd p = {.fd = pe->sb.pidfd, .events = POLLIN};
    char c;
    return poll(&p, 1, 0) == 0 && recv(pe->sb.sync_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) < 0 &&
           errno == EAGAIN;
}

/* A cgroup name of the runtime's kind ("task-<tag>-"), unique here. */
static char *pool_name(const char *task_name)
{
    const char *d1 = strchr(task_name, '-'), *d2 = d1 ? strchr(d1 + 1, '-') : NULL;
    char *n;
    if (!d2 || asprintf(&n, "%.*spool-%llu", (int)(d2 - task_name + 1), task_name, ++P.seq) < 0)
        return NULL;
    return n;
}

/* A new entry for key, o's description (its own copies), not asked yet:
 * for o's clone, or (any) for any clone, with mount points only (their
 * kinds in files, or in o's mounts when files is NULL: a template's). */
static struct pool_entry *make_entry(const struct sbx_task_opts *o, const char *key,
                                     const struct stat *ws, bool any, const bool *files)
{
    struct pool_entry *pe = calloc(1, sizeof(*pe));
    if (!pe)
        return NULL;
    pe->slot = -1;
    pe->any = any;
    pe->key = strdup(key);
    pe->workspace = any ? NULL : strdup(o->spec.workspace);
    pe->rootfs = o->spec.rootfs ? strdup(o->spec.rootfs) : NULL;
    pe->name = pool_name(o->spec.name);
    if (!pe->key || (!any && !pe->workspace) || (o->spec.rootfs && !pe->rootfs) || !pe->name) {
        free_entry(pe);
        return NULL;
    }
    pe->dev = ws->st_dev, pe->ino = ws->st_ino;
    pe->fds = o->fds;
    pe->spec = o->spec;
    pe->spec.argv = pe->spec.envp = NULL;
    if (o->zygote_argv) {
        pe->zygote_argv = sbx_strv_dup((const char *const *)o->zygote_argv, 0);
        pe->zygote_envp = sbx_strv_dup((const char *const *)o->zygote_envp, 0);
        if (!pe->zygote_argv || !pe->zygote_envp) {
            free_entry(pe);
            return NULL;
        }
        pe->spec.argv = pe->zygote_argv;
        pe->spec.envp = pe->zygote_envp;
    }
    pe->spec.pooled = true;
    pe->spec.limits_at_command = limits_by_command(o);
    pe->spec.workspace = pe->workspace;
    pe->spec.rootfs = pe->rootfs;
    pe->spec.name = pe->name;
    if (any) { /* nothing of the clone: its own range (ask_one), mount points only */
        pe->spec.attach_later = true;
        pe->spec.host_id_base = 0;
    }
    for (size_t i = 0; i < o->spec.n_mounts; i++) {
        const struct sbx_mount *m = &o->spec.mounts[i];
        if (!(pe->mount_text[2 * i] = strdup(any ? "" : m->host)) ||
            !(pe->mount_text[2 * i + 1] = strdup(m->inside))) {
            free_entry(pe);
            return NULL;
        }
        pe->mounts[i] = (struct sbx_mount){.host = pe->mount_text[2 * i],
                                           .inside = pe->mount_text[2 * i + 1],
                                           .writable = m->writable,
                                           .file = any && (files ? files[i] : m->file)};
    }
    pe->spec.mounts = pe->mounts;
    pe->spec.net_rules_arg = NULL;
    if (o->spec.net_rules) {
        if (!(pe->net_rules_arg = strdup(o->spec.net_rules_arg))) {
            free_entry(pe);
            return NULL;
        }
        pe->spec.net_rules_arg = pe->net_rules_arg;
    }
    pe->spec.host_view_hidden = NULL;
    return pe;
}

/* What a task of pe's description would ask (pe's strings: pe outlives it). */
static void entry_opts(const struct pool_entry *pe, struct sbx_task_opts *o, struct stat *ws)
{
    *o = (struct sbx_task_opts){.spec = pe->spec,
                                .fds = pe->fds,
                                .zygote_argv = pe->zygote_argv,
                                .zygote_envp = pe->zygote_envp};
    ws->st_dev = pe->dev, ws->st_ino = pe->ino;
}

/* One sandbox asked of the spawner for key (o's description): 1 asked. */
static int ask_one(const struct sbx_task_opts *o, const char *key, const struct stat *ws, bool any)
{
    int slot = any ? slot_get() : -1;
    if (any && slot < 0)
        return 0;
    struct pool_entry *pe = make_entry(o, key, ws, any, NULL);
    if (!pe) {
        exec_pool_slot_put(slot);
        return 0;
    }
    if (any) /* a host id range of its own, never a clone's */
        pe->slot = slot, pe->spec.host_id_base = slot_base(slot);
    if (exec_spawner_ask_for_pool(P.base, &pe->spec, pe, &pe->waiter) != 1) {
        exec_pool_slot_put(slot);
        free_entry(pe);
        return 0;
    }
    link_tail(pe);
    return 1;
}

/* How many sandboxes may be in the spawner's hands at once: the spare CPU a
 * refill may take (one per core, at least 2), so refills keep up with many
 * clients without taking the machine from the tasks. */
static uint64_t in_flight_cap(void)
{
    static long n;
    if (!n)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 2 ? (uint64_t)n : 2;
}

/* The description's target: 1 after its first task, max_idle from its
 * second, one more at each task that found none ready (a description in
 * demand), at most max_total; one less at each idle one timed out. */
static struct pool_target *target_of(const char *key, bool make)
{
    for (struct pool_target *t = P.targets; t; t = t->next)
        if (strcmp(t->key, key) == 0)
            return t;
    struct pool_target *t = make ? calloc(1, sizeof(*t)) : NULL;
    if (t && !(t->key = strdup(key))) {
        free(t);
        return NULL;
    }
    if (t) {
        t->want = P.cfg.max_idle;
        t->next = P.targets;
        P.targets = t;
    }
    return t;
}

/* An idle sandbox of key timed out: the description wants one fewer. */
static void target_shrink(const char *key)
{
    struct pool_target *t = target_of(key, false);
    if (t && t->want > P.cfg.max_idle)
        t->want--;
}

static void target_free(struct pool_target *t)
{
    if (t->tmpl)
        free_entry(t->tmpl);
    free(t->key);
    free(t);
}

/* Forget the targets (and their descriptions) that match drop, or with no
 * take for idle_timeout and no sandbox (clones gone quiet). */
static void targets_sweep_if(bool (*drop)(const struct pool_target *t, const void *arg),
                             const void *arg)
{
    int64_t now = sbx_mono_ms();
    for (struct pool_target **tp = &P.targets; *tp;) {
        struct pool_target *t = *tp;
        bool held = false;
        for (struct pool_entry *pe = P.head; pe && !held; pe = pe->next)
            held = strcmp(pe->key, t->key) == 0;
        if ((drop && drop(t, arg)) ||
            (!drop && !held && now - t->last_ms >= (int64_t)(P.cfg.idle_timeout_s * 1000))) {
            *tp = t->next;
            target_free(t);
        } else {
            tp = &t->next;
        }
    }
}

static void targets_sweep(void)
{
    targets_sweep_if(NULL, NULL);
}

/* The description's sandboxes topped up to its target, several asked at
 * once, within max_total (an idle sandbox of another description gives
 * way, the least recently made first), the in-flight cap and max_active
 * (running tasks and the pool's sandboxes together: a refill never waits
 * for the tasks to drop, which under many clients they never do). */
static void kick_in(int64_t ms);

static void top_up(struct pool_target *t)
{
    if (!P.cfg.enabled || !t->tmpl || P.holders_attaching)
        return;
    int64_t quiet = P.holder_ms + HOLDER_QUIET_MS - sbx_mono_ms();
    if (quiet > 0) {
        kick_in(quiet);
        return;
    }
    uint64_t mine = 0, building = 0, total = 0;
    for (struct pool_entry *pe = P.head; pe; pe = pe->next) {
        mine += strcmp(pe->key, t->key) == 0;
        building += !pe->ready;
        total++;
    }
    /* max_active bounds the live sandboxes: running tasks' and the pool's */
    uint64_t room =
        P.cfg.max_active
            ? P.cfg.max_active > P.running + total ? P.cfg.max_active - P.running - total : 0
            : UINT64_MAX;
    struct sbx_task_opts o;
    struct stat ws;
    entry_opts(t->tmpl, &o, &ws);
    while (mine < t->want && building < in_flight_cap() && room) {
        if (total >= P.cfg.max_total) {
            struct pool_entry *old = P.head;
            while (old && (!old->ready || strcmp(old->key, t->key) == 0))
                old = old->next;
            if (!old)
                return;
            discard(old);
            total--;
        }
        if (!ask_one(&o, t->key, &ws, t->tmpl->any))
            return;
        mine++, building++, total++, room--;
    }
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what, (void)arg;
    for (struct pool_target *t = P.targets; t; t = t->next)
        top_up(t);
}

/* Refills soon, from the loop (not from inside a task's or an entry's
 * callback). */
static void kick_in(int64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    if (P.kick && P.targets && !evtimer_pending(P.kick, NULL))
        evtimer_add(P.kick, &tv);
}

static void kick(void)
{
    kick_in(0);
}

/* After a take (hit or miss): the description's target, then its top-up.
 * missed: the task found none ready. */
static void refill(const struct sbx_task_opts *o, const char *key, const struct stat *ws,
                   bool missed, bool any, const bool *files, bool holder)
{
    bool known = target_of(key, false) != NULL;
    struct pool_target *t = target_of(key, true);
    if (!t || (!t->tmpl && !(t->tmpl = make_entry(o, key, ws, any, files))))
        return;
    t->last_ms = sbx_mono_ms();
    /* refills get the rules of the latest take: a description used with
     * one set of rules by address takes its sandboxes without a swap */
    char *rules =
        o->spec.net_rules && !same_rules(t->tmpl, o) ? strdup(o->spec.net_rules_arg) : NULL;
    if (rules) {
        free(t->tmpl->net_rules_arg);
        t->tmpl->net_rules_arg = rules;
        t->tmpl->spec.net_rules_arg = rules;
    }
    /* a description seen once gets one sandbox: most one-off clones never
     * come back; from its second task on, max_idle */
    if (!known)
        t->want = P.cfg.max_idle < 1 ? P.cfg.max_idle : 1;
    else if (t->want < P.cfg.max_idle)
        t->want = P.cfg.max_idle;
    if (missed && known && t->want < P.cfg.max_total)
        t->want++;
    if (holder && t->want < P.cfg.session_idle) /* the operator's floor for sessions */
        t->want = P.cfg.session_idle;
    top_up(t);
}

void exec_pool_arrived(struct pool_entry *pe, int rc, struct sbx_sandbox *sb)
{
    pe->waiter = NULL;
    if (pe->orphan) { /* discarded while it was made */
        if (rc == 1)
            bury(sb, pe->slot);
        else
            exec_pool_slot_put(pe->slot);
        free_entry(pe);
        return;
    }
    sbx_err e = {0};
    /* its egress first, as a cold task's (on_spawn), while its root is built */
    if (rc == 1 &&
        ((pe->spec.net_rules && !(pe->net = P.cfg.net_start(P.cfg.net_ctx, sb->netns_fd, &e))) ||
         sbx_sandbox_send_fds(sb, &pe->fds, &e) < 0)) {
        if (pe->net)
            P.cfg.net_drop(P.cfg.net_ctx, sbx_steal_pointer(&pe->net));
        bury(sb, pe->slot);
        pe->slot = -1;
        rc = -1;
    }
    if (rc != 1) {
        sbx_log(SBX_LOG_WARN, "pool: a sandbox for the pool was not made%s%s", e.msg[0] ? ": " : "",
                e.msg);
        unlink_entry(pe);
        exec_pool_slot_put(pe->slot);
        free_entry(pe);
        return;
    }
    pe->sb = *sb;
    pe->ready = true;
    pe->since_ms = sbx_mono_ms();
    P.st.built++;
    arm_tick();
    kick(); /* one fewer in flight */
}

/* ---- pooled for any clone ---- */

static bool no_idmap(dev_t dev)
{
    for (size_t i = 0; i < P.n_no_idmap; i++)
        if (P.no_idmap[i] == dev)
            return true;
    return false;
}

/* o's task may take a sandbox pooled for any clone: the pool has ranges of
 * its own, the workspace's filesystem has not failed an idmap, every bind is
 * an absolute host path (the clone's) outside /workspace; files gets each
 * bind's kind. */
static bool any_clone_ok(const struct sbx_task_opts *o, const struct stat *ws, bool *files)
{
    if (!P.cfg.ids_ranges || no_idmap(ws->st_dev))
        return false;
    for (size_t i = 0; i < o->spec.n_mounts; i++) {
        const struct sbx_mount *m = &o->spec.mounts[i];
        struct stat st;
        if (m->root || strncmp(m->inside, "/workspace", 10) == 0 || stat(m->host, &st) < 0)
            return false;
        files[i] = !S_ISDIR(st.st_mode);
    }
    return true;
}

/* The key of a sandbox pooled for any clone: spec_key's without the clone
 * (workspace, host ids, the binds' sources; their kinds instead). */
static char *any_clone_key(const struct sbx_task_opts *o, const bool *files)
{
    struct sbx_task_opts k = *o;
    struct sbx_mount mounts[SBX_MOUNTS_MAX];
    for (size_t i = 0; i < o->spec.n_mounts; i++) {
        mounts[i] = o->spec.mounts[i];
        mounts[i].host = files[i] ? "file" : "dir";
    }
    k.spec.mounts = mounts;
    k.spec.workspace = "any clone";
    k.spec.host_id_base = 0;
    return spec_key(&k);
}

/* pe taken for t: its clone's mounts asked of the spawner, and meanwhile its
 * egress bound and its address sets begun (the command waits for both): 1,
 * or 0 (the spawner cannot be asked: pe stays). */
static int take_attach(struct event_base *base, const struct sbx_task_opts *o,
                       struct pool_entry *pe, struct sbx_task *t, struct pool_holder *h)
{
    struct sbx_attach a = {.workspace = o->spec.workspace,
                           .from_base = o->spec.host_id_base,
                           .to_base = slot_base(pe->slot),
                           .uid = o->spec.uid,
                           .gid = o->spec.gid,
                           .mounts = o->spec.mounts,
                           .n_mounts = o->spec.n_mounts};
    if (exec_spawner_ask_attach(base, &a, pe, t, h) != 1)
        return 0;
    unlink_entry(pe);
    sbx_err e = {0};
    if (bind_net(pe, o, &pe->job, &e) < 0) { /* exec_pool_attached fails closed */
        pe->unbound = true;
        sbx_log(SBX_LOG_INFO, "pool: a taken sandbox's egress was not bound: %s", e.msg);
    }
    return 1;
}

/* An idle one for key is taken for t or h (one built with the task's own
 * rules first: no swap; a session's holder only such a one, its start does
 * not wait for address sets), and the clone's mounts are asked of the
 * spawner: 1, or 0 (none idle, or the spawner cannot be asked). */
static int take_any_clone(struct event_base *base, const struct sbx_task_opts *o, const char *key,
                          struct sbx_task *t, struct pool_holder *h)
{
    for (int pass = 0; pass < (h ? 1 : 2); pass++)
        for (struct pool_entry *pe = P.head, *next; pe; pe = next) {
            next = pe->next;
            if (!pe->ready || pe->slot < 0 || strcmp(pe->key, key) != 0 ||
                same_rules(pe, o) == (pass == 1))
                continue;
            if (!still_fresh(pe)) {
                discard(pe);
                continue;
            }
            return take_attach(base, o, pe, t, h);
        }
    return 0;
}

/* A take's result, counted for tasks or (holder) for sessions' holders. */
static void count_take(const struct sbx_task_opts *o, bool got, bool zygote, bool any,
                       const char *made_as, bool holder)
{
    if (holder) {
        *(got ? &P.st.session_hits : &P.st.session_misses) += 1;
    } else {
        P.st.zygote_hits += got && zygote;
        P.st.any_clone_hits += got && any;
        *(got ? &P.st.hits : &P.st.misses) += 1;
    }
    sbx_metric_add(holder ? &m_sessions : &m_takes, 1, got ? "hit" : "miss");
    sbx_log(SBX_LOG_INFO, "pool: %s%s%s for=%s sandbox=%s",
            got ? zygote ? "hit (zygote)" : "hit" : "miss", got && any ? " (any clone)" : "",
            holder ? " (session)" : "", o->spec.name, got ? made_as : o->spec.name);
}

/* The spawner could not attach o's clone: said in the log; a filesystem
 * that cannot be idmapped is pooled per clone from now on (for a task's
 * clone, not a session's holder, its next sandbox asked now). */
static void attach_failed(const struct sbx_task_opts *o, const sbx_err *e, bool holder)
{
    struct stat ws;
    char msg[400];
    if (strcmp(e->stage, sbx_stage_name(SBX_STAGE_ATTACH)) == 0 &&
        strncmp(e->msg, "idmap ", 6) == 0 && stat(o->spec.workspace, &ws) == 0 &&
        !no_idmap(ws.st_dev) && P.n_no_idmap < NO_IDMAP_MAX) {
        P.no_idmap[P.n_no_idmap++] = ws.st_dev;
        sbx_log(SBX_LOG_WARN,
                "pool: workspaces on this filesystem cannot be idmapped (%s): their sandboxes "
                "are pooled per clone",
                sbx_err_format(e, msg, sizeof(msg)));
        cleanup_free char *key = holder ? NULL : spec_key(o); /* this clone's next task */
        bool files[SBX_MOUNTS_MAX] = {false};
        if (key)
            refill(o, key, &ws, false, false, files, false);
    } else {
        sbx_log(SBX_LOG_WARN, "pool: a workspace was not attached: %s",
                sbx_err_format(e, msg, sizeof(msg)));
    }
}

/* A session's holder on v2 with cgroup.kill: its tasks get cgroups of their
 * own below its, as a cold holder's (sbx_sandbox's creation splits that
 * one before its init is in it; this one's init moves to the leaf). */
static int holder_split(struct pool_entry *pe, const struct sbx_spec *s, sbx_err *err)
{
    if (pe->sb.cg.mode != SBX_CG_V2 || !s->cg_host || !s->cg_host->v2_kill)
        return 0;
    return sbx_cgroup_split(&pe->sb.cg, err);
}

/* exec_pool_attached's, for a task t or (holder) a session's holder (no
 * command: the order to hold; never an address-set swap, see
 * take_any_clone); made_as gets the sandbox's name. */
static int attach_serve(struct pool_entry *pe, struct sbx_task *t, const struct sbx_task_opts *o,
                        int rc, int *fds, size_t n, const sbx_err *e, struct sbx_sandbox *sb,
                        int *slot, bool holder, char *made_as, size_t made_len)
{
    sbx_err se = {0};
    void *job = sbx_steal_pointer(&pe->job); /* begun at take */
    if (pe->unbound)
        sbx_err_set(&se, EIO, "its egress was not bound");
    /* the task's limits and egress policy (bound at take), then its command
     * with its mounts (after its address sets, when they are being made the
     * task's) */
    int sent =
        rc == 1 && o && !se.msg[0] && still_fresh(pe) && live_limits(pe, &o->spec, &se) == 0 &&
        (!holder || holder_split(pe, &o->spec, &se) == 0) &&
        (job || bind_net(pe, o, &job, &se) == 0) &&
        (job || sbx_sandbox_send_command_fds(&pe->sb, o->spec.argv, o->spec.envp,
                                             command_limits(pe, &o->spec), fds, n, &se) == 0);
    if (sent && job && holder) { /* never: take_any_clone gave it its own rules */
        sent = 0;
        sbx_err_set(&se, EPROTO, "a session's holder cannot wait for address sets");
    }
    if (sent && job) {
        if (exec_task_wait_sets(t, pe, job, fds, n) == 0)
            return 2;
        return exec_pool_sets_done(pe, NULL, job, fds, n, NULL, NULL);
    }
    if (job) /* not sent: the sets no longer matter */
        P.cfg.net_sets_abort(job);
    for (size_t i = 0; rc == 1 && i < n; i++)
        close(fds[i]);
    if (sent) {
        *sb = pe->sb;
        *slot = pe->slot;
        snprintf(made_as, made_len, "%s", pe->name);
        count_take(o, true, pe->zygote_argv != NULL, true, pe->name, holder);
        free_entry(pe);
        return 1;
    }
    if (rc == -1 && o)
        attach_failed(o, e, holder);
    if (o)
        count_take(o, false, false, true, NULL, holder);
    if (rc == -2 || !still_fresh(pe) || se.msg[0] || !pe->net != !pe->spec.net_rules) {
        /* the spawner is gone, the sandbox died, or its limits, egress or
         * command were not taken (its egress may be the task's): it goes */
        if (pe->net)
            P.cfg.net_drop(P.cfg.net_ctx, sbx_steal_pointer(&pe->net));
        bury(&pe->sb, pe->slot);
        P.st.discarded++;
        free_entry(pe);
        return 0;
    }
    /* untouched (init still waits): back in the pool */
    link_tail(pe);
    return 0;
}

/* A ready sandbox of key, pooled for o's clone (one built with the task's
 * own rules first: no swap), taken for t: 1 its command is sent (*sb; its
 * name in made_as, SBX_CG_NAME_MAX + 1 bytes), 2 it waits for its address
 * sets (exec_task_wait_sets), 0 none. */
static int take_own_clone(const struct sbx_task_opts *o, const char *key, const struct stat *ws,
                          struct sbx_task *t, struct sbx_sandbox *sb, char *made_as, bool *zygote)
{
    for (int pass = 0; pass < 2; pass++)
        for (struct pool_entry *pe = P.head, *next; pe; pe = next) {
            next = pe->next;
            if (!pe->ready || strcmp(pe->key, key) != 0 || same_rules(pe, o) == (pass == 1))
                continue;
            sbx_err e = {0};
            void *job = NULL;
            /* A workspace made again at the same path, a sandbox that died
             * idle: never served. */
            if (pe->dev != ws->st_dev || pe->ino != ws->st_ino || !still_fresh(pe) ||
                live_limits(pe, &o->spec, &e) < 0 || bind_net(pe, o, &job, &e) < 0 ||
                (!job &&
                 sbx_sandbox_send_command_fds(&pe->sb, o->spec.argv, o->spec.envp,
                                              command_limits(pe, &o->spec), NULL, 0, &e) < 0)) {
                if (e.msg[0])
                    sbx_log(SBX_LOG_INFO, "pool: a ready sandbox could not serve: %s", e.msg);
                discard(pe);
                continue;
            }
            unlink_entry(pe);
            if (job) /* its command waits for its address sets */
                return exec_task_wait_sets(t, pe, job, NULL, 0) == 0
                           ? 2
                           : exec_pool_sets_done(pe, NULL, job, NULL, 0, NULL, NULL);
            *sb = pe->sb;
            snprintf(made_as, SBX_CG_NAME_MAX + 1, "%s", pe->name);
            *zygote = pe->zygote_argv != NULL;
            free_entry(pe);
            return 1;
        }
    return 0;
}

int exec_pool_attached(struct pool_entry *pe, struct sbx_task *t, const struct sbx_task_opts *o,
                       int rc, int *fds, size_t n, const sbx_err *e, struct sbx_sandbox *sb,
                       int *slot)
{
    char made_as[SBX_CG_NAME_MAX + 1];
    return attach_serve(pe, t, o, rc, fds, n, e, sb, slot, false, made_as, sizeof(made_as));
}

int exec_pool_take(struct event_base *base, const struct sbx_task_opts *o, struct sbx_sandbox *sb,
                   struct sbx_task *t)
{
    if (!eligible(o, false))
        return 0;
    struct stat ws;
    bool files[SBX_MOUNTS_MAX] = {false};
    if (stat(o->spec.workspace, &ws) < 0)
        return 0;
    /* a command too long for init's message is built cold (a miss) */
    bool fits = sbx_sandbox_send_command_fits(o->spec.argv, o->spec.envp);
    if (sbx_spawner_fd() >= 0 && fits && any_clone_ok(o, &ws, files)) {
        cleanup_free char *akey = any_clone_key(o, files);
        if (!akey)
            return 0;
        int got = take_any_clone(base, o, akey, t, NULL);
        if (!got)
            count_take(o, false, false, true, NULL, false);
        refill(o, akey, &ws, !got, true, files, false);
        return got ? 2 : 0;
    }
    cleanup_free char *key = spec_key(o);
    if (!key)
        return 0;
    char made_as[SBX_CG_NAME_MAX + 1] = "";
    bool zygote = false;
    int got = fits ? take_own_clone(o, key, &ws, t, sb, made_as, &zygote) : 0;
    if (got != 2) /* a wait for its sets is counted at its end */
        count_take(o, got, zygote, false, made_as, false);
    refill(o, key, &ws, !got, false, files, false);
    return got;
}

int exec_pool_sets_fd(void *job)
{
    return P.cfg.net_sets_fd(job);
}

int exec_pool_sets_done(struct pool_entry *pe, const struct sbx_task_opts *o, void *job, int *fds,
                        size_t n, struct sbx_sandbox *sb, int *slot)
{
    sbx_err e = {0};
    int sent = -1;
    if (!o)
        P.cfg.net_sets_abort(job);
    else if (P.cfg.net_sets_end(job, &e) == 0 && still_fresh(pe))
        sent = sbx_sandbox_send_command_fds(&pe->sb, o->spec.argv, o->spec.envp,
                                            command_limits(pe, &o->spec), fds, n, &e);
    else if (!e.msg[0])
        sbx_err_set(&e, ESRCH, "the sandbox ended while they were set");
    for (size_t i = 0; i < n; i++)
        close(fds[i]);
    if (sent == 0) {
        *sb = pe->sb;
        *slot = pe->slot;
        count_take(o, true, pe->zygote_argv != NULL, pe->any, pe->name, false);
        free_entry(pe);
        return 1;
    }
    if (o) { /* fails closed: this sandbox never runs the task */
        char msg[600];
        sbx_log(SBX_LOG_WARN,
                "pool: a pooled sandbox's address sets were not made the task's (%s): it is "
                "discarded, the task built cold",
                sbx_err_format(&e, msg, sizeof(msg)));
        count_take(o, false, false, pe->any, NULL, false);
    }
    bury(&pe->sb, pe->slot);
    P.st.discarded++;
    free_entry(pe);
    return 0;
}

/* ---- live sessions' holders ---- */

struct pool_holder {
    struct sbx_task_opts o; /* the session's description; its binds and rules copied */
    struct sbx_mount mounts[SBX_MOUNTS_MAX];
    char *net_rules_arg;
    sbx_pool_holder_fn fn; /* NULL: the session is gone */
    void *ud;
};

static void holder_free(struct pool_holder *h)
{
    free(h->net_rules_arg);
    free(h);
}

static struct pool_holder *holder_new(const struct sbx_task_opts *o, sbx_pool_holder_fn fn,
                                      void *ud)
{
    struct pool_holder *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->o = *o, h->fn = fn, h->ud = ud;
    memcpy(h->mounts, o->spec.mounts, o->spec.n_mounts * sizeof(h->mounts[0]));
    h->o.spec.mounts = h->mounts;
    if (o->spec.net_rules_arg &&
        !(h->o.spec.net_rules_arg = h->net_rules_arg = strdup(o->spec.net_rules_arg))) {
        free(h);
        return NULL;
    }
    return h;
}

int sbx_pool_take_holder(struct event_base *base, const struct sbx_task_opts *o,
                         sbx_pool_holder_fn fn, void *ud, void **handle)
{
    struct stat ws;
    bool files[SBX_MOUNTS_MAX] = {false};
    if (!eligible(o, true) || stat(o->spec.workspace, &ws) < 0)
        return 0;
    /* only pooled for any clone: where the workspace cannot be idmapped, a
     * holder is built cold */
    if (!any_clone_ok(o, &ws, files)) {
        count_take(o, false, false, false, NULL, true);
        return 0;
    }
    cleanup_free char *key = any_clone_key(o, files);
    struct pool_holder *h = key ? holder_new(o, fn, ud) : NULL;
    if (!h)
        return 0;
    int got = take_any_clone(base, &h->o, key, NULL, h);
    if (got) {
        P.holders_attaching++;
        *handle = h;
    } else {
        count_take(o, false, false, true, NULL, true);
        holder_free(h);
    }
    refill(o, key, &ws, !got, true, files, true);
    return got;
}

void sbx_pool_holder_cancel(void *handle)
{
    ((struct pool_holder *)handle)->fn = NULL;
}

void exec_pool_holder_attached(struct pool_entry *pe, struct pool_holder *h, int rc, int *fds,
                               size_t n, const sbx_err *e)
{
    if (P.holders_attaching)
        P.holders_attaching--;
    P.holder_ms = sbx_mono_ms();
    struct sbx_sandbox sb;
    int slot = -1;
    char made_as[SBX_CG_NAME_MAX + 1] = "";
    /* the session's limits and egress policy, then the order to hold */
    struct sbx_task_opts *o = h->fn ? &h->o : NULL;
    if (o)
        o->spec.argv = o->spec.envp = NULL;
    int got = attach_serve(pe, NULL, o, rc, fds, n, e, &sb, &slot, true, made_as, sizeof(made_as));
    if (h->fn)
        h->fn(h->ud, got, got ? &sb : NULL, slot, made_as);
    holder_free(h);
    kick(); /* refills go on */
}

void sbx_pool_slot_free(int slot)
{
    exec_pool_slot_put(slot);
    if (slot >= 0)
        kick(); /* a refill that found no range free may go on now */
}
