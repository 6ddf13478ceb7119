/* sandboxd serve: the HTTP API, the task runtime and the store on one loop. */
#include <dirent.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <limits.h>
#include <malloc.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "api/auth.h"
#include "api/routes.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/time.h"
#include "daemon/cmd.h"
#include "daemon/config.h"
#include "daemon/image.h"
#include "daemon/settings.h"
#include "exec/pool.h"
#include "isolate/spawner.h"
#include "net/egress.h"

extern char **environ;

struct model_keys {
    struct sbx_agent_model m;
    char *key; /* m.key, owned */
};

struct serve {
    struct sbx_config cfg;
    struct event_base *base;
    struct sbx_store *store;
    struct sbx_cg_host cg_host;
    struct sbx_cg_totals totals; /* the aggregate caps on the sandboxd/ bases */
    struct sbx_sandbox_fds fds[2];
    struct sbx_policy *policy;
    struct sbx_policy_opts policy_opts;
    struct sbx_addr own[64];
    struct sbx_resolver *resolver;
    struct sbx_runtime *rt;
    struct sbx_skills *skills;
    struct sbx_agent *agent;
    struct model_keys model_key;
    struct model_keys *tenant_keys; /* of cfg.tenant_models */
    sbx_auth *auth;
    sbx_http_server *http;
    struct sbx_api api;
    struct event *prune;
    struct image_job *images; /* the environments' image helpers, one per image */
    char token[65];           /* generated on first start when none is configured */
    /* how workspace quotas are enforced, and why */
    enum sbx_ws_quota_mode wsq;
    char wsq_why[512];
};

static int mkdir_p(const char *path, mode_t mode, sbx_err *err)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
        return sbx_err_set(err, ENAMETOOLONG, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return sbx_err_set(err, errno, "mkdir %s", buf);
        *p = '/';
    }
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
        return sbx_err_set(err, errno, "mkdir %s", buf);
    return 0;
}

/* A secret kept in the state dir: read from path when it holds at least min
 * characters (its first line), else (when make) made from nbytes random
 * bytes as hex and written there (0600). out holds 2 * nbytes + 1 at least. */
static int state_secret(const char *path, char *out, size_t len, size_t nbytes, size_t min,
                        bool make, sbx_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
        ssize_t n = read(fd, out, len - 1);
        close(fd);
        if (n >= 0) {
            out[n] = '\0';
            out[strcspn(out, "\r\n")] = '\0';
            if (strlen(out) >= min)
                return 0;
        }
    }
    if (!make)
        return sbx_err_set(err, EINVAL, "%s: no secret of at least %zu characters", path, min);
    unsigned char rnd[64];
    if (nbytes > sizeof(rnd) || 2 * nbytes + 1 > len)
        return sbx_err_set(err, EINVAL, "secret size");
    if (getrandom(rnd, nbytes, 0) != (ssize_t)nbytes)
        return sbx_err_set(err, errno, "getrandom");
    for (size_t i = 0; i < nbytes; i++)
        snprintf(out + 2 * i, 3, "%02x", rnd[i]);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || write(fd, out, strlen(out)) != (ssize_t)strlen(out)) {
        int saved = errno;
        if (fd >= 0)
            close(fd);
        return sbx_err_set(err, saved, "write %s", path);
    }
    close(fd);
    return 0;
}

/* The token of a newcomer's daemon: made once, kept in the state dir (0600). */
static int first_start_token(struct serve *s, sbx_err *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/api-token", s->cfg.state_dir);
    return state_secret(path, s->token, sizeof(s->token), 24, 32, true, err);
}

/* The secret UR_TOKENs are signed with: the configured one, else the
 * configured file, else <state>/skills-token-secret made on first start
 * (0600, like the API token). */
static int setup_skills(struct serve *s, sbx_err *err)
{
    char path[PATH_MAX], secret[129] = "";
    const char *sec = s->cfg.skills.token_secret;
    if (sec && strlen(sec) < 16)
        return sbx_err_set(err, EINVAL, "skills.token_secret: at least 16 characters");
    if (!sec) {
        if (s->cfg.skills.token_secret_file)
            snprintf(path, sizeof(path), "%s", s->cfg.skills.token_secret_file);
        else
            snprintf(path, sizeof(path), "%s/skills-token-secret", s->cfg.state_dir);
        if (state_secret(path, secret, sizeof(secret), 32, 16, !s->cfg.skills.token_secret_file,
                         err) < 0)
            return -1;
        sec = secret;
    }
    struct sbx_skills_settings ss = {.builtin_root = s->cfg.skills.builtin_root,
                                     .common_root = s->cfg.skills.common_root,
                                     .shared_root = s->cfg.skills.shared_root,
                                     .mapped_root = s->cfg.skills.mapped_root,
                                     .control_dir = s->cfg.control_dir,
                                     .state_dir = s->cfg.state_dir,
                                     .max_bytes = s->cfg.skills.max_bytes,
                                     .ur_base_url = s->cfg.skills.ur_base_url,
                                     .token_secret = sec,
                                     .token_secret_len = strlen(sec),
                                     .token_audience = s->cfg.skills.token_audience,
                                     .token_ttl_s = s->cfg.skills.token_ttl_s};
    s->skills = sbx_skills_new(s->base, s->rt, &ss, err);
    memset(secret, 0, sizeof(secret));
    if (!s->skills)
        return -1;
    sbx_runtime_set_clone_mounts(s->rt, sbx_skills_clone_mounts, s->skills);
    return 0;
}

static int setup_auth(struct serve *s, sbx_err *err)
{
    s->auth = sbx_auth_new();
    if (!s->auth)
        return sbx_err_set(err, ENOMEM, "auth");
    for (size_t i = 0; i < s->cfg.n_tokens; i++) {
        sbx_auth_token t = {.name = s->cfg.tokens[i].name,
                            .token = s->cfg.tokens[i].token,
                            .tenant = s->cfg.tokens[i].tenant};
        if (sbx_auth_add(s->auth, &t, err) < 0)
            return -1;
    }
    if (s->cfg.n_tokens == 0) {
        if (first_start_token(s, err) < 0)
            return -1;
        sbx_auth_token t = {.name = "generated", .token = s->token};
        if (sbx_auth_add(s->auth, &t, err) < 0)
            return -1;
    }
    return 0;
}

/* The aggregate caps in an extended /runtime/status: as configured, as the
 * sandboxd/ parent cgroup holds them now, and whether each holds. */
static void status_totals(void *ud, json_t *status, bool reads)
{
    struct serve *s = ud;
    struct sbx_cg_limits now;
    sbx_cg_host_read_totals(&s->cg_host, &now);
    const struct sbx_cg_totals *t = &s->totals;
    json_object_set_new(
        status, "totals",
        json_pack("{s:s, s:{s:I, s:I, s:f}, s:{s:I, s:I, s:f}, s:{s:b, s:b, s:b}, s:s}", "cgroups",
                  sbx_cg_mode_name(s->cg_host.mode), "configured", "memoryBytes",
                  (json_int_t)t->want.memory_bytes, "pids", (json_int_t)t->want.pids, "cpu",
                  t->want.cpu_cores, "enforced", "memoryBytes", (json_int_t)now.memory_bytes,
                  "pids", (json_int_t)now.pids, "cpu", now.cpu_cores, "holds", "memory",
                  t->memory_ok, "pids", t->pids_ok, "cpu", t->cpu_ok, "why", t->why));
    /* the environments with a root of their own */
    json_t *envs = json_array();
    for (size_t i = 0; i < s->cfg.n_environments; i++) {
        const struct sbx_environment *env = &s->cfg.environments[i];
        if (!env->image && !env->rootfs && !env->writable_root && !env->n_mounts &&
            !env->seccomp_table)
            continue;
        json_t *o = json_pack("{s:s, s:b, s:i, s:b}", "name", env->name, "readOnlyRootfs",
                              !env->writable_root, "mounts", (int)env->n_mounts, "seccompTable",
                              env->seccomp_table != NULL);
        if (env->rootfs)
            json_object_set_new(o, "rootfs", json_string(env->rootfs));
        if (env->image) {
            json_object_set_new(o, "image", json_string(env->image));
            json_object_set_new(o, "imageState",
                                json_string(env->rootfs        ? "ready"
                                            : env->image_error ? "failed"
                                                               : "unpacking"));
            if (env->image_digest[0])
                json_object_set_new(o, "digest", json_string(env->image_digest));
            if (env->image_error)
                json_object_set_new(o, "imageError", json_string(env->image_error));
        }
        json_array_append_new(envs, o);
    }
    json_object_set_new(status, "environments", envs);
    json_object_set_new(status, "workspaceQuota",
                        json_pack("{s:s, s:I, s:s, s:s}", "mode", sbx_ws_quota_mode_name(s->wsq),
                                  "bytes", (json_int_t)s->cfg.workspace_quota_bytes, "enforcement",
                                  sbx_ws_quota_mode_kernel(s->wsq) ? "kernel" : "monitor (weaker)",
                                  "why", s->wsq_why));
    struct sbx_spawner_counts sc;
    sbx_spawner_counts(&sc);
    json_object_set_new(status, "spawner",
                        json_pack("{s:b, s:b, s:I, s:I, s:I, s:I}", "enabled", s->cfg.pool.spawner,
                                  "running", sbx_spawner_running(), "pending",
                                  (json_int_t)sbx_spawner_pending(), "made", (json_int_t)sc.remote,
                                  "madeInDaemon", (json_int_t)sc.local, "fallbacks",
                                  (json_int_t)sc.fallbacks));
    struct sbx_pool_stats ps;
    sbx_pool_stats(&ps);
    json_object_set_new(status, "pool",
                        json_pack("{s:b, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "enabled",
                                  s->cfg.pool.enabled, "zygote", s->cfg.pool.zygote, "idle",
                                  (json_int_t)ps.idle, "building", (json_int_t)ps.building, "hits",
                                  (json_int_t)ps.hits, "zygoteHits", (json_int_t)ps.zygote_hits,
                                  "misses", (json_int_t)ps.misses, "built", (json_int_t)ps.built,
                                  "discarded", (json_int_t)ps.discarded));
    json_t *pool = json_object_get(status, "pool");
    if (reads) {
        uint64_t counted, mem = sbx_pool_memory(&counted);
        json_object_set_new(pool, "memoryBytes",
                            counted ? json_integer((json_int_t)mem) : json_null());
        json_object_set_new(pool, "memoryPerSandboxBytes",
                            counted ? json_integer((json_int_t)(mem / counted)) : json_null());
    }
    json_object_set_new(pool, "anyCloneHits", json_integer((json_int_t)ps.any_clone_hits));
    json_object_set_new(pool, "sessionHits", json_integer((json_int_t)ps.session_hits));
    json_object_set_new(pool, "sessionMisses", json_integer((json_int_t)ps.session_misses));
}

/* ---- environments' images: unpacked once by a helper child each ---- */

struct image_job {
    struct sbx_environment *env;
    pid_t pid;
    int pidfd, rd;
    struct event *ev;
};

/* The helper's body: the image into the cache, one line back on fd. */
static __attribute__((noreturn)) void image_helper(const char *image, const char *cache, int fd)
{
    char digest[SBX_IMAGE_DIGEST_MAX] = "", rootfs[PATH_MAX], line[PATH_MAX + 256];
    sbx_err e = {0};
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (sbx_image_prepare(image, cache, digest, rootfs, sizeof(rootfs), &e) == 0)
        snprintf(line, sizeof(line), "ok %s %s\n", digest, rootfs);
    else
        snprintf(line, sizeof(line), "error %s %s\n", digest[0] ? digest : "-", e.msg);
    _exit(write(fd, line, strlen(line)) == (ssize_t)strlen(line) ? 0 : 1);
}

static void image_job_close(struct image_job *j)
{
    if (j->ev)
        event_free(j->ev);
    if (j->pidfd >= 0) {
        syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0);
        close(j->pidfd);
    }
    if (j->pid > 0)
        waitpid(j->pid, NULL, 0); /* killed or gone: at once */
    if (j->rd >= 0)
        close(j->rd);
    *j = (struct image_job){.pidfd = -1, .rd = -1};
}

static void on_image_done(evutil_socket_t fd, short what, void *ud)
{
    (void)fd, (void)what;
    struct image_job *j = ud;
    struct sbx_environment *env = j->env;
    char buf[PATH_MAX + 256], d[SBX_IMAGE_DIGEST_MAX], safe[600];
    ssize_t n = read(j->rd, buf, sizeof(buf) - 1); /* written whole before it exited */
    buf[n > 0 ? n : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    char *sp = strchr(buf, ' '), *rest = sp ? strchr(sp + 1, ' ') : NULL;
    if (sp && rest && (size_t)(rest - sp - 1) < sizeof(d)) {
        snprintf(d, sizeof(d), "%.*s", (int)(rest - sp - 1), sp + 1);
        if (strcmp(d, "-") != 0)
            snprintf(env->image_digest, sizeof(env->image_digest), "%s", d);
    }
    if (strncmp(buf, "ok ", 3) == 0 && rest)
        env->rootfs = strdup(rest + 1);
    if (!env->rootfs)
        env->image_error = strdup(strncmp(buf, "error ", 6) == 0 && rest
                                      ? rest + 1
                                      : "the unpacking helper ended without an answer");
    if (env->rootfs)
        sbx_log(SBX_LOG_INFO, "environment %s: image %s ready digest=%s", env->name, env->image,
                env->image_digest);
    else
        sbx_log(SBX_LOG_WARN, "environment %s: image refused error=%s", env->name,
                sbx_log_safe(env->image_error ? env->image_error : "out of memory", safe,
                             sizeof(safe)));
    image_job_close(j);
}

/* One helper per environment with an image, watched by its pidfd. */
static int images_start(struct serve *s, sbx_err *err)
{
    char cache[PATH_MAX];
    size_t n = s->cfg.n_environments;
    if (!n || !(s->images = calloc(n, sizeof(*s->images))))
        return n ? sbx_err_set(err, ENOMEM, "image helpers") : 0;
    snprintf(cache, sizeof(cache), "%s/images", s->cfg.state_dir);
    for (size_t i = 0; i < n; i++) {
        struct image_job *j = &s->images[i];
        *j = (struct image_job){.pidfd = -1, .rd = -1};
        struct sbx_environment *env = &s->cfg.environments[i];
        if (!env->image)
            continue;
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
            return sbx_err_set(err, errno, "image helper: pipe");
        pid_t pid = fork();
        if (pid == 0) {
            close(p[0]);
            image_helper(env->image, cache, p[1]);
        }
        close(p[1]);
        j->rd = p[0];
        if (pid < 0)
            return sbx_err_set(err, errno, "image helper: fork");
        j->pid = pid;
        j->env = env;
        if ((j->pidfd = (int)syscall(SYS_pidfd_open, pid, 0)) < 0)
            return sbx_err_set(err, errno, "image helper: pidfd_open");
        if (!(j->ev = event_new(s->base, j->pidfd, EV_READ, on_image_done, j)) ||
            event_add(j->ev, NULL) < 0)
            return sbx_err_set(err, ENOMEM, "image helper: event");
        sbx_log(SBX_LOG_INFO, "environment %s: unpacking image %s", env->name, env->image);
    }
    return 0;
}

/* The aggregate caps over all sandboxes (sandbox.total_*), on the sandboxd/
 * parent cgroup; one that cannot be set is logged, not fatal. */
static void apply_totals(struct serve *s)
{
    struct sbx_cg_limits want = {.memory_bytes = s->cfg.total_memory_bytes,
                                 .pids = s->cfg.total_pids,
                                 .cpu_cores = s->cfg.total_cpu_cores};
    sbx_cg_host_set_totals(&s->cg_host, &want, &s->totals);
    const struct sbx_cg_totals *t = &s->totals;
    bool all = (!want.memory_bytes || t->memory_ok) && (!want.pids || t->pids_ok) &&
               (!want.cpu_cores || t->cpu_ok);
    char why[300];
    sbx_log(all ? SBX_LOG_INFO : SBX_LOG_WARN,
            "aggregate caps memory=%llu pids=%llu cpu=%g held=%s%s%s",
            (unsigned long long)t->now.memory_bytes, (unsigned long long)t->now.pids,
            t->now.cpu_cores, all ? "all" : "not all",
            all ? "" : " why=", all ? "" : sbx_log_safe(t->why, why, sizeof(why)));
    /* v1: sandboxes cloned inside the capped parent (sbx_spawner_join_cgroup) */
    sbx_err e = {0};
    if (want.pids && t->pids_ok && s->cg_host.mode == SBX_CG_V1 &&
        sbx_spawner_join_cgroup(s->cg_host.v1_base[SBX_CGC_PIDS], &e) < 0)
        sbx_log(SBX_LOG_WARN,
                "total_pids: a sandbox's move into its cgroup is not checked "
                "against it error=%s",
                sbx_log_safe(e.msg, why, sizeof(why)));
}

/* At the stop, with every sandbox gone: the shared sandboxd/ bases get back
 * what they held before apply_totals, so the caps do not outlive us. */
static void restore_totals(struct serve *s)
{
    sbx_err e = {0};
    char msg[600], why[300];
    int n = sbx_cg_host_restore_totals(&s->totals, &e);
    if (n < 0)
        sbx_log(SBX_LOG_WARN, "aggregate caps not all restored error=%s",
                sbx_log_safe(sbx_err_format(&e, msg, sizeof(msg)), why, sizeof(why)));
    else if (n > 0)
        sbx_log(SBX_LOG_INFO, "aggregate caps restored files=%d", n);
}

static int setup_engine(struct serve *s, sbx_err *err)
{
    if (sbx_cg_set_base_name(s->cfg.cgroup_parent) < 0)
        return sbx_err_set(err, EINVAL, "sandbox.cgroup_parent %s", s->cfg.cgroup_parent);
    if (sbx_cg_host_detect(s->cfg.cgroup_rlimit, &s->cg_host, err) < 0)
        return -1;
    apply_totals(s);
    for (int p = 0; p < 2; p++) {
        s->fds[p].init_exe = sbx_init_exe_open(err);
        s->fds[p].seccomp = s->fds[p].init_exe < 0 ? -1 : sbx_seccomp_compile_fd(p, err);
        if (s->fds[p].seccomp < 0)
            return -1;
    }
    /* the environments' seccomp tables, each stacked on the default profile */
    for (size_t i = 0; i < s->cfg.n_environments; i++) {
        struct sbx_environment *env = &s->cfg.environments[i];
        if (env->seccomp_table &&
            (env->seccomp_fd = sbx_seccomp_table_compile_fd(env->seccomp_table, err)) < 0)
            return sbx_err_wrap(err, "environment %s: seccomp_profile", env->name);
    }
    struct sbx_policy_opts po = {
        .def = s->cfg.network.def,
        .allow = (const char *const *)s->cfg.network.allow.v,
        .deny = (const char *const *)s->cfg.network.deny.v,
        .hosts = (const char *const *)s->cfg.network.hosts.v,
        .allowed_cidrs = s->cfg.network.allowed_cidrs,
        .allowed_ports = s->cfg.network.allowed_ports,
        .allowed_internal_targets = s->cfg.network.allowed_internal_targets,
        .blocked_cidrs = s->cfg.network.blocked_cidrs,
        .own_addrs = s->own,
        .n_own_addrs = sbx_host_addresses(s->own, SBX_ARRAY_LEN(s->own)),
    };
    s->policy_opts = po;
    if (!(s->policy = sbx_policy_new(&po, err)))
        return -1;
    s->resolver = sbx_resolver_new(
        s->base, s->policy,
        s->cfg.network.dns_upstream.n ? (const char *const *)s->cfg.network.dns_upstream.v : NULL,
        err);
    return s->resolver ? 0 : -1;
}

/* Kill and remove the cgroup name if there is one. */
static bool drop_cgroup(struct serve *s, const char *name)
{
    struct sbx_cgroup cg;
    if (sbx_cgroup_adopt(&s->cg_host, name, &cg, NULL) < 0)
        return false;
    sbx_cgroup_kill_all(&cg, NULL);
    sbx_cgroup_destroy(&cg, NULL);
    return true;
}

struct sweep {
    struct serve *s;
    char tag[SBX_RUNTIME_CG_TAG_SIZE];
    size_t n;
};

static void sweep_ours(const char *name, void *ud)
{
    struct sweep *w = ud;
    if (sbx_runtime_cg_is_ours(name, w->tag) && drop_cgroup(w->s, name))
        w->n++;
}

/* After a crash: tasks that were running are marked interrupted, and what is
 * left of their sandboxes (a cgroup with maybe a process in it) is killed and
 * removed; so is every other cgroup named with this state directory's tag
 * (sessions', a task's not recorded as running yet): none is live before the
 * runtime starts. Other daemons' cgroups beside ours are left alone. */
static void recover(struct serve *s)
{
    struct sbx_store_recovery r = {0};
    sbx_err e = {0};
    if (sbx_store_recover(s->store, sbx_now_ms(), &r, &e) < 0) {
        sbx_log(SBX_LOG_ERROR, "recovery: %s", e.msg);
        return;
    }
    for (size_t i = 0; i < r.n_sandboxes; i++)
        drop_cgroup(s, r.sandboxes[i]);
    struct sweep w = {.s = s};
    if (sbx_runtime_cg_tag(s->cfg.state_dir, w.tag, &e) == 0)
        sbx_cgroup_each(&s->cg_host, sweep_ours, &w);
    if (w.n)
        sbx_log(SBX_LOG_WARN, "recovery: %zu cgroup(s) of an earlier run removed", w.n);
    if (r.interrupted)
        sbx_log(SBX_LOG_WARN, "recovery: %zu unfinished task(s) marked interrupted", r.interrupted);
    sbx_store_recovery_free(&r);
}

/* How long one tick of retention may work, at most (the loop waits as long). */
#define PRUNE_BUDGET_MS 25
/* No store write for this long: the daemon is idle (sbx_store_shrink_when_idle). */
#define IDLE_SHRINK_MS 10000

/* Retention, once a second: finished tasks, their outputs and idle sessions'
 * events older than the configured age (or beyond the newest max_tasks) go,
 * and the audit log's oldest records by its own bounds, in bounded batches
 * for at most PRUNE_BUDGET_MS a tick: thousands of tasks a second, more than
 * the daemon can run, so the bounds hold at its highest task rate. */
static void on_prune(evutil_socket_t fd, short what, void *ud)
{
    struct serve *s = ud;
    const struct sbx_config *cfg = &s->cfg;
    int64_t now = sbx_now_ms(), t0 = sbx_mono_ms();
    int64_t older =
        cfg->retention.max_age_s > 0 ? now - (int64_t)(cfg->retention.max_age_s * 1000) : 0;
    int64_t audit_older = cfg->retention.audit_max_age_s > 0
                              ? now - (int64_t)(cfg->retention.audit_max_age_s * 1000)
                              : 0;
    (void)sbx_store_health(s->store, NULL); /* makes a spent reserve again when it can */
    /* Idle for a while after a load: SQLite's page cache and the free heap
     * go back to the system (the idle daemon's RSS, docs/performance.md). */
    if (sbx_store_shrink_when_idle(s->store, IDLE_SHRINK_MS))
        malloc_trim(0);
    sbx_api_audit_refusals(&s->api);
    bool more = true, audit_more = true;
    while ((more || audit_more) && sbx_mono_ms() - t0 < PRUNE_BUDGET_MS) {
        sbx_err e = {0};
        struct sbx_store_prune_counts c = {0};
        uint64_t n = 0;
        if (more && sbx_store_prune(s->store, older, cfg->retention.max_tasks, &c, &e) < 0) {
            sbx_log(SBX_LOG_WARN, "retention: %s", e.msg);
            return;
        }
        more = more && c.more;
        if (audit_more &&
            sbx_store_prune_audit(s->store, audit_older, cfg->retention.audit_max_records, &n,
                                  &audit_more, &e) < 0) {
            sbx_log(SBX_LOG_WARN, "retention of the audit log: %s", e.msg);
            return;
        }
    }
}

static void on_stop_signal(evutil_socket_t sig, short what, void *ud)
{
    struct serve *s = ud;
    sbx_log(SBX_LOG_INFO, "signal %d: stopping", (int)sig);
    event_base_loopbreak(s->base);
}

/* A model's settings as the agent takes them: the configured ones, else the
 * seed's variables of the daemon's own environment (which no sandbox
 * inherits: a task's environment is a whitelist); the key from its file or
 * its variable. */
/* A tenant's section overrides the default model key by key (fallback: the
 * default model, already resolved; NULL for the default itself). */
static int model_resolve(const struct sbx_model_conf *mc, const struct model_keys *fallback,
                         struct model_keys *out, sbx_err *err)
{
    const char *url = mc->base_url ? mc->base_url
                      : fallback   ? fallback->m.base_url
                                   : getenv("OPENAI_BASE_URL");
    const char *name = mc->name ? mc->name : fallback ? fallback->m.name : getenv("OPENAI_MODEL");
    const char *key_env = mc->key_env ? mc->key_env : "OPENAI_API_KEY";
    out->key = NULL;
    if (fallback && !mc->key_env && !mc->key_file) {
        if (fallback->key && !(out->key = strdup(fallback->key)))
            return sbx_err_set(err, ENOMEM, "model key");
        out->m = (struct sbx_agent_model){.base_url = url, .name = name, .key = out->key};
        return 0;
    }
    if (mc->key_file) {
        char buf[4096];
        int fd = open(mc->key_file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
        int saved = errno;
        if (fd >= 0)
            close(fd);
        if (n < 0)
            return sbx_err_set(err, saved, "model key_file %s", mc->key_file);
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
            n--;
        buf[n] = '\0';
        out->key = strdup(buf);
        explicit_bzero(buf, sizeof(buf));
        if (!out->key)
            return sbx_err_set(err, ENOMEM, "model key");
    } else if (getenv(key_env) && !(out->key = strdup(getenv(key_env)))) {
        return sbx_err_set(err, ENOMEM, "model key");
    }
    out->m = (struct sbx_agent_model){.base_url = url, .name = name, .key = out->key};
    return 0;
}

static const struct sbx_agent_model *tenant_model(void *ud, const char *tenant)
{
    struct serve *s = ud;
    for (size_t i = 0; i < s->cfg.n_tenant_models; i++)
        if (strcmp(s->cfg.tenant_models[i].code, tenant) == 0)
            return &s->tenant_keys[i].m;
    return NULL;
}

static int setup_agent(struct serve *s, sbx_err *err)
{
    size_t n = s->cfg.n_tenant_models;
    if (!(s->tenant_keys = calloc(n + 1, sizeof(*s->tenant_keys))))
        return sbx_err_set(err, ENOMEM, "models");
    if (model_resolve(&s->cfg.model, NULL, &s->model_key, err) < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (model_resolve(&s->cfg.tenant_models[i].model, &s->model_key, &s->tenant_keys[i], err) <
            0)
            return -1;
    struct sbx_agent_opts ao = {.base = s->base,
                                .rt = s->rt,
                                .store = s->store,
                                .skills = s->skills,
                                .model = s->model_key.m,
                                .tenant_model = tenant_model,
                                .tenant_ud = s,
                                .tool_output_limit = s->cfg.agent.tool_output_limit,
                                .max_steps = (unsigned)s->cfg.agent.max_steps,
                                .turn_timeout_s = s->cfg.agent.turn_timeout_s,
                                .max_tokens = s->cfg.agent.max_tokens,
                                .max_retries = (unsigned)s->cfg.agent.max_retries,
                                .stall_timeout_s = s->cfg.agent.stall_timeout_s};
    s->agent = sbx_agent_new(&ao, err);
    return s->agent ? 0 : -1;
}

static void keys_free(struct serve *s)
{
    for (size_t i = 0; s->tenant_keys && i <= s->cfg.n_tenant_models; i++) {
        struct model_keys *k = i < s->cfg.n_tenant_models ? &s->tenant_keys[i] : &s->model_key;
        if (k->key)
            explicit_bzero(k->key, strlen(k->key));
        free(k->key);
    }
    free(s->tenant_keys);
}

static void teardown(struct serve *s)
{
    if (s->prune)
        event_free(s->prune);
    /* Every unfinished task recorded as canceled first, so that an exec
     * waiting for its task is answered (canceled) rather than cut; then the
     * server: its streams and waiting requests let go of the runtime. */
    if (s->rt)
        sbx_runtime_cancel_all(s->rt, "the daemon stopped");
    sbx_http_server_free(s->http);
    sbx_api_close(&s->api);
    sbx_agent_free(s->agent);
    keys_free(s);
    sbx_runtime_free(s->rt);
    restore_totals(s);
    sbx_skills_free(s->skills);
    sbx_auth_free(s->auth);
    sbx_resolver_free(s->resolver);
    sbx_policy_free(s->policy);
    for (size_t i = 0; s->images && i < s->cfg.n_environments; i++)
        image_job_close(&s->images[i]);
    free(s->images);
    for (int p = 0; p < 2; p++) {
        if (s->fds[p].init_exe >= 0)
            close(s->fds[p].init_exe);
        if (s->fds[p].seccomp >= 0)
            close(s->fds[p].seccomp);
    }
    sbx_store_close(s->store);
    if (s->base)
        event_base_free(s->base);
    sbx_config_free(&s->cfg);
    sbx_metrics_reset();
    sbx_spawner_stop();
}

/* An event made by event_new or evsignal_new (NULL when that failed) onto
 * the loop: without it the daemon would not stop on a signal or never prune. */
static int loop_add(struct event *ev, const struct timeval *tv, const char *what, sbx_err *err)
{
    if (!ev || event_add(ev, tv) < 0)
        return sbx_err_set(err, ev ? EINVAL : ENOMEM, "event loop: cannot add %s", what);
    return 0;
}

/* Each HTTP connection holds three descriptors (the client's socket and
 * the pair between the relay and libmicrohttpd, api/http_relay.c), and each
 * live proxy session about 14 (its sandbox's pidfd, sync socket, stdio and
 * network namespace; its egress's listeners, DNS and SYN queue sockets),
 * with no cap of their own: raise the soft RLIMIT_NOFILE to the hard limit
 * (sandboxes get their own, sbx_spec.nofile); say so when the hard limit is
 * below what the connection cap needs. */
static void fd_room(unsigned max_connections)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)max_connections * 3 + 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return;
    rlim_t want = rl.rlim_max; /* (never RLIM_INFINITY: the kernel caps it at nr_open) */
    if (want > rl.rlim_cur) {
        rl.rlim_cur = want;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (want < need)
        sbx_log(SBX_LOG_WARN,
                "RLIMIT_NOFILE is %llu, below the %llu that server.max_connections %u needs "
                "(three descriptors a connection): connections beyond it get 503",
                (unsigned long long)want, (unsigned long long)need, max_connections);
}

int sbx_cmd_serve(int argc, char **argv)
{
    struct serve s = {.fds = {{-1, -1}, {-1, -1}}};
    sbx_err e = {0};
    char msg[600], path[PATH_MAX];
    if (sbx_config_load(&s.cfg, argc, argv, environ, &e) < 0) {
        fprintf(stderr, "sandboxd serve: %s\n", e.msg);
        return 2;
    }
    if (s.cfg.help) {
        fputs(sbx_config_usage, stdout);
        sbx_config_free(&s.cfg);
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    sbx_log_set_level(s.cfg.log_level);
    /* Before the daemon grows: the spawner is a copy of it (isolate/spawner.h). */
    if (s.cfg.pool.spawner && sbx_spawner_start(&e) < 0)
        sbx_log(SBX_LOG_WARN, "no sandbox spawner (%s): sandboxes are made in the daemon", e.msg);
    for (size_t i = 0; i < s.cfg.ignored_env.n; i++)
        sbx_log(SBX_LOG_WARN, "%s is ignored: it means nothing to this daemon",
                s.cfg.ignored_env.v[i]);
    struct event *sigs[2] = {0};
    int rc = 1;
    snprintf(path, sizeof(path), "%s/sandboxd.db", s.cfg.state_dir);
    struct sbx_store_options so = {.event_bound = (uint32_t)s.cfg.retention.events_per_session,
                                   .output_max = s.cfg.max.output_bytes,
                                   .reserve_bytes = s.cfg.store_reserve_bytes};
    if (mkdir_p(s.cfg.state_dir, 0700, &e) < 0 || mkdir_p(s.cfg.workspace_root, 0755, &e) < 0 ||
        !(s.base = event_base_new()) || sbx_store_open(path, &so, &s.store, &e) < 0 ||
        setup_engine(&s, &e) < 0 || setup_auth(&s, &e) < 0) {
        fprintf(stderr, "sandboxd serve: %s\n", sbx_err_format(&e, msg, sizeof(msg)));
        goto out;
    }
    recover(&s);
    struct sbx_runtime_settings rs;
    sbx_settings_from_config(&rs, &s.cfg);
    if (sbx_ws_quota_choose(s.cfg.workspace_quota_mode, s.cfg.workspace_root, &s.wsq, s.wsq_why,
                            sizeof(s.wsq_why), &e) < 0)
        goto fail;
    rs.workspace_quota_mode = s.wsq;
    rs.workspace_quota_why = s.wsq_why;
    sbx_log(sbx_ws_quota_mode_kernel(s.wsq) ? SBX_LOG_INFO : SBX_LOG_WARN,
            "workspace quota mode=%s enforcement=%s why=%s", sbx_ws_quota_mode_name(s.wsq),
            sbx_ws_quota_mode_kernel(s.wsq) ? "kernel" : "monitor", s.wsq_why);
    struct sbx_runtime_opts ro = {.base = s.base,
                                  .store = s.store,
                                  .settings = &rs,
                                  .cg_host = &s.cg_host,
                                  .fds = {s.fds[0], s.fds[1]},
                                  .policy = s.policy,
                                  .policy_opts = &s.policy_opts,
                                  .resolver = s.resolver};
    sbx_metrics_set_tenant_label(s.cfg.metrics_tenant_label);
    static const struct sbx_metric cg_mode = {
        .name = "sandbox_cgroup_mode",
        .help =
            "How tasks' limits are enforced: 1 for the mode this daemon runs in (v2, v1-hybrid, "
            "rlimit).",
        .kind = SBX_METRIC_GAUGE,
        .labels = {"mode"}};
    sbx_metric_set(&cg_mode, 1, sbx_cg_mode_name(s.cg_host.mode));
    if (images_start(&s, &e) < 0 || !(s.rt = sbx_runtime_new(&ro, &e)) || setup_skills(&s, &e) < 0)
        goto fail;
    if (setup_agent(&s, &e) < 0)
        goto fail;
    sbx_http_config hc = {
        .listen = s.cfg.listen.text,
        .auth = s.auth,
        .max_body = s.cfg.max_body_bytes,
        .max_connections = (unsigned)s.cfg.max_connections,
        .idle_timeout_s = (unsigned)s.cfg.connection_idle_timeout_s,
        .header_timeout_s = (unsigned)s.cfg.header_timeout_s,
        .max_per_ip = (unsigned)s.cfg.max_connections_per_address,
        .body_timeout_s = (unsigned)s.cfg.body_timeout_s,
        .body_min_rate =
            (unsigned)(s.cfg.body_min_rate > UINT32_MAX ? UINT32_MAX : s.cfg.body_min_rate),
        .max_requests_per_token = (unsigned)s.cfg.max_requests_per_token,
        .max_requests_per_tenant = (unsigned)s.cfg.max_requests_per_tenant,
        .max_streams_per_token = (unsigned)s.cfg.max_streams_per_token,
        .max_streams_per_tenant = (unsigned)s.cfg.max_streams_per_tenant,
        .no_keep_alive = !s.cfg.keep_alive,
        .sigpipe_ignored = true};
    s.api = (struct sbx_api){.rt = s.rt,
                             .skills = s.skills,
                             .agent = s.agent,
                             .store = s.store,
                             .ready = true,
                             .started_at = (int64_t)time(NULL) * 1000,
                             .idempotency_ttl_s = s.cfg.idempotency_ttl_s,
                             .status_extra = status_totals,
                             .status_extra_ud = &s};
    fd_room(hc.max_connections);
    if (sbx_http_server_new(s.base, &hc, &s.http, &e) < 0 ||
        sbx_api_routes(s.http, &s.api, &e) < 0 || sbx_http_server_listen(s.http, &e) < 0)
        goto fail;
    int stop[] = {SIGTERM, SIGINT};
    struct timeval every = {.tv_sec = 1};
    for (int i = 0; i < 2; i++)
        if (loop_add(sigs[i] = evsignal_new(s.base, stop[i], on_stop_signal, &s), NULL,
                     "the stop signals", &e) < 0)
            goto fail;
    if (loop_add(s.prune = event_new(s.base, -1, EV_PERSIST, on_prune, &s), &every,
                 "the retention timer", &e) < 0)
        goto fail;
    printf("sandboxd: listening on %s (cgroups %s, network %s, workspace quota %s)\n",
           sbx_http_server_address(s.http), sbx_cg_mode_name(s.cg_host.mode),
           sbx_net_policy_name(s.cfg.net), sbx_ws_quota_mode_name(s.wsq));
    if (s.token[0])
        printf("sandboxd: API token (generated, kept in %s/api-token): %s\n", s.cfg.state_dir,
               s.token);
    fflush(stdout);
    on_prune(-1, 0, &s);
    event_base_dispatch(s.base);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "sandboxd serve: %s\n", sbx_err_format(&e, msg, sizeof(msg)));
out:
    for (int i = 0; i < 2; i++)
        if (sigs[i])
            event_free(sigs[i]);
    teardown(&s);
    return rc;
}
