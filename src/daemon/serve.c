/* sandboxd serve: the HTTP API, the task runtime and the store on one loop. */
#include <dirent.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/auth.h"
#include "api/routes.h"
#include "base/time.h"
#include "daemon/cmd.h"
#include "daemon/config.h"
#include "daemon/settings.h"
#include "net/egress.h"

extern char **environ;

struct serve {
    struct sbx_config cfg;
    struct event_base *base;
    struct sbx_store *store;
    struct sbx_cg_host cg_host;
    struct sbx_sandbox_fds fds[2];
    struct sbx_policy *policy;
    struct sbx_policy_opts policy_opts;
    struct sbx_addr own[64];
    struct sbx_resolver *resolver;
    struct sbx_runtime *rt;
    sbx_auth *auth;
    sbx_http_server *http;
    struct sbx_api api;
    struct event *prune;
    char token[65]; /* generated on first start when none is configured */
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

/* The token of a newcomer's daemon: made once, kept in the state dir (0600). */
static int first_start_token(struct serve *s, sbx_err *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/api-token", s->cfg.state_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
        ssize_t n = read(fd, s->token, sizeof(s->token) - 1);
        close(fd);
        if (n >= 32) {
            s->token[n] = '\0';
            s->token[strcspn(s->token, "\r\n")] = '\0';
            return 0;
        }
    }
    unsigned char rnd[24];
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        return sbx_err_set(err, errno, "getrandom");
    for (size_t i = 0; i < sizeof(rnd); i++)
        snprintf(s->token + 2 * i, 3, "%02x", rnd[i]);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || write(fd, s->token, strlen(s->token)) != (ssize_t)strlen(s->token)) {
        int saved = errno;
        if (fd >= 0)
            close(fd);
        return sbx_err_set(err, saved, "write %s", path);
    }
    close(fd);
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

static int setup_engine(struct serve *s, sbx_err *err)
{
    if (sbx_cg_host_detect(false, &s->cg_host, err) < 0)
        return -1;
    for (int p = 0; p < 2; p++) {
        s->fds[p].init_exe = sbx_init_exe_open(err);
        s->fds[p].seccomp = s->fds[p].init_exe < 0 ? -1 : sbx_seccomp_compile_fd(p, err);
        if (s->fds[p].seccomp < 0)
            return -1;
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

/* After a crash: tasks that were running are marked interrupted, and what is
 * left of their sandboxes (a cgroup with maybe a process in it) is killed and
 * removed. */
static void recover(struct serve *s)
{
    struct sbx_store_recovery r = {0};
    sbx_err e = {0};
    if (sbx_store_recover(s->store, sbx_now_ms(), &r, &e) < 0) {
        sbx_log(SBX_LOG_ERROR, "recovery: %s", e.msg);
        return;
    }
    for (size_t i = 0; i < r.n_sandboxes; i++) {
        struct sbx_cgroup cg;
        if (sbx_cgroup_adopt(&s->cg_host, r.sandboxes[i], &cg, NULL) == 0) {
            sbx_cgroup_kill_all(&cg, NULL);
            sbx_cgroup_destroy(&cg, NULL);
        }
    }
    if (r.interrupted)
        sbx_log(SBX_LOG_WARN, "recovery: %zu unfinished task(s) marked interrupted", r.interrupted);
    sbx_store_recovery_free(&r);
}

/* Retention: finished tasks, their outputs and idle sessions' events older
 * than the configured age (or beyond the newest max_tasks) go, a bounded batch
 * at a time so the loop never waits long. */
static void on_prune(evutil_socket_t fd, short what, void *ud)
{
    struct serve *s = ud;
    int64_t now = sbx_now_ms();
    int64_t older =
        s->cfg.retention.max_age_s > 0 ? now - (int64_t)(s->cfg.retention.max_age_s * 1000) : 0;
    struct sbx_store_prune_counts c = {0};
    for (int round = 0; round < 8; round++) {
        sbx_err e = {0};
        if (sbx_store_prune(s->store, older, s->cfg.retention.max_tasks, &c, &e) < 0) {
            sbx_log(SBX_LOG_WARN, "retention: %s", e.msg);
            return;
        }
        if (!c.more)
            break;
    }
}

static void on_stop_signal(evutil_socket_t sig, short what, void *ud)
{
    struct serve *s = ud;
    sbx_log(SBX_LOG_INFO, "signal %d: stopping", (int)sig);
    event_base_loopbreak(s->base);
}

static void teardown(struct serve *s)
{
    if (s->prune)
        event_free(s->prune);
    /* The server first: its streams and waiting requests let go of the
     * runtime; then the runtime records every unfinished task as canceled. */
    sbx_http_server_free(s->http);
    sbx_api_close(&s->api);
    sbx_runtime_free(s->rt);
    sbx_auth_free(s->auth);
    sbx_resolver_free(s->resolver);
    sbx_policy_free(s->policy);
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
}

/* An event made by event_new or evsignal_new (NULL when that failed) onto
 * the loop: without it the daemon would not stop on a signal or never prune. */
static int loop_add(struct event *ev, const struct timeval *tv, const char *what, sbx_err *err)
{
    if (!ev || event_add(ev, tv) < 0)
        return sbx_err_set(err, ev ? EINVAL : ENOMEM, "event loop: cannot add %s", what);
    return 0;
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
    for (size_t i = 0; i < s.cfg.ignored_env.n; i++)
        sbx_log(SBX_LOG_WARN, "%s is ignored: it means nothing to this daemon",
                s.cfg.ignored_env.v[i]);
    struct event *sigs[2] = {0};
    int rc = 1;
    snprintf(path, sizeof(path), "%s/sandboxd.db", s.cfg.state_dir);
    struct sbx_store_options so = {.event_bound = (uint32_t)s.cfg.retention.events_per_session};
    if (mkdir_p(s.cfg.state_dir, 0700, &e) < 0 || mkdir_p(s.cfg.workspace_root, 0755, &e) < 0 ||
        !(s.base = event_base_new()) || sbx_store_open(path, &so, &s.store, &e) < 0 ||
        setup_engine(&s, &e) < 0 || setup_auth(&s, &e) < 0) {
        fprintf(stderr, "sandboxd serve: %s\n", sbx_err_format(&e, msg, sizeof(msg)));
        goto out;
    }
    recover(&s);
    struct sbx_runtime_settings rs;
    sbx_settings_from_config(&rs, &s.cfg);
    struct sbx_runtime_opts ro = {.base = s.base,
                                  .store = s.store,
                                  .settings = &rs,
                                  .cg_host = &s.cg_host,
                                  .fds = {s.fds[0], s.fds[1]},
                                  .policy = s.policy,
                                  .policy_opts = &s.policy_opts,
                                  .resolver = s.resolver};
    if (!(s.rt = sbx_runtime_new(&ro, &e)))
        goto fail;
    sbx_http_config hc = {.listen = s.cfg.listen.text,
                          .auth = s.auth,
                          .max_body = s.cfg.max_body_bytes,
                          .max_connections = (unsigned)s.cfg.max_connections,
                          .idle_timeout_s = (unsigned)s.cfg.connection_idle_timeout_s,
                          .header_timeout_s = (unsigned)s.cfg.header_timeout_s,
                          .sigpipe_ignored = true};
    s.api = (struct sbx_api){
        .rt = s.rt, .store = s.store, .ready = true, .started_at = (int64_t)time(NULL) * 1000};
    if (sbx_http_server_new(s.base, &hc, &s.http, &e) < 0 ||
        sbx_api_routes(s.http, &s.api, &e) < 0 || sbx_http_server_listen(s.http, &e) < 0)
        goto fail;
    int stop[] = {SIGTERM, SIGINT};
    struct timeval every = {.tv_sec = 60};
    for (int i = 0; i < 2; i++)
        if (loop_add(sigs[i] = evsignal_new(s.base, stop[i], on_stop_signal, &s), NULL,
                     "the stop signals", &e) < 0)
            goto fail;
    if (loop_add(s.prune = event_new(s.base, -1, EV_PERSIST, on_prune, &s), &every,
                 "the retention timer", &e) < 0)
        goto fail;
    printf("sandboxd: listening on %s (cgroups %s, network %s)\n", sbx_http_server_address(s.http),
           sbx_cg_mode_name(s.cg_host.mode), sbx_net_policy_name(s.cfg.net));
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
