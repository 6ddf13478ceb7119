/* A runtime as the daemon makes it, for the runtime's tests: a real SQLite
 * store and workspaces in a temporary directory, a real event loop, real
 * sandboxes (cgroups beneath this process's own, the network none). The
 * settings are filled by hand, as the daemon's configuration would. */
#pragma once

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <event2/event.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "net/policy.h"
#include "runtime/runtime.h"
#include "workspace/quota.h"

/* The longest a test waits for its tasks, well within ctest's 60 s. */
#define FX_DEADLINE_S 40

struct fx {
    char dir[64];
    char ws_root[128];
    struct event_base *base;
    struct sbx_store *store;
    struct sbx_cg_host cg_host;
    struct sbx_sandbox_fds fds[2];
    struct sbx_policy_opts policy_opts;
    struct sbx_runtime_settings set;
    struct sbx_runtime *rt;
    struct event *deadline;
    bool timed_out;
    unsigned done, want; /* tasks ended (done callbacks), and how many to wait for */
};

static inline int fx_rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(p);
}

static inline void fx_fail(const char *what, const sbx_err *e)
{
    char buf[600];
    fail_msg("%s: %s", what, sbx_err_format(e, buf, sizeof(buf)));
}

/* Everything but the runtime, which fx_start makes once the test has
 * adjusted fx->set. */
static inline int fx_setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    sbx_log_set_level(SBX_LOG_WARN); /* the tasks' start and end lines: noise here */
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/sbx-runtime-XXXXXX");
    assert_non_null(mkdtemp(fx->dir));
    snprintf(fx->ws_root, sizeof(fx->ws_root), "%s/workspaces", fx->dir);
    assert_int_equal(mkdir(fx->ws_root, 0755), 0);
    char db[128];
    snprintf(db, sizeof(db), "%s/sandboxd.db", fx->dir);
    sbx_err e = {0};
    struct sbx_store_options so = {.event_bound = 5};
    fx->base = event_base_new();
    assert_non_null(fx->base);
    if (sbx_store_open(db, &so, &fx->store, &e) < 0 ||
        sbx_cg_host_detect(false, &fx->cg_host, &e) < 0)
        fx_fail("setup", &e);
    for (int p = 0; p < 2; p++) {
        fx->fds[p].init_exe = sbx_init_exe_open(&e);
        fx->fds[p].seccomp = fx->fds[p].init_exe < 0 ? -1 : sbx_seccomp_compile_fd(p, &e);
        if (fx->fds[p].seccomp < 0)
            fx_fail("engine fds", &e);
    }
    const struct sbx_limits lim = {.timeout_s = 20,
                                   .memory_bytes = 256ull << 20,
                                   .pids = 32,
                                   .cpu_cores = 1,
                                   .file_size_bytes = 16ull << 20,
                                   .output_bytes = 1ull << 20,
                                   .tmp_bytes = 16ull << 20};
    fx->set = (struct sbx_runtime_settings){.state_dir = fx->dir,
                                            .workspace_root = fx->ws_root,
                                            .runtime_id = "rt-test",
                                            .max_concurrent = 1,
                                            .queue_size = 16,
                                            .queue_per_tenant = 8,
                                            .limits = lim,
                                            .max = lim,
                                            .workspace_quota_bytes = SBX_WS_QUOTA_MIN,
                                            .max_clones_per_tenant = 4,
                                            .net = SBX_NET_NONE,
                                            .mount_sandbox = true,
                                            .seccomp = SBX_SECCOMP_DEFAULT,
                                            .runner_uid = 10001,
                                            .runner_gid = 10001,
                                            .host_id_base = 100000};
    *state = fx;
    return 0;
}

static inline void on_deadline(evutil_socket_t fd, short what, void *ud)
{
    struct fx *fx = ud;
    fx->timed_out = true;
    event_base_loopbreak(fx->base);
}

static inline void fx_start(struct fx *fx)
{
    sbx_err e = {0};
    struct sbx_runtime_opts o = {.base = fx->base,
                                 .store = fx->store,
                                 .settings = &fx->set,
                                 .cg_host = &fx->cg_host,
                                 .fds = {fx->fds[0], fx->fds[1]},
                                 .policy_opts = &fx->policy_opts};
    if (!(fx->rt = sbx_runtime_new(&o, &e)))
        fx_fail("runtime", &e);
    fx->deadline = evtimer_new(fx->base, on_deadline, fx);
    assert_non_null(fx->deadline);
    struct timeval tv = {.tv_sec = FX_DEADLINE_S};
    evtimer_add(fx->deadline, &tv);
}

/* Run the loop until fx->want tasks have ended. */
static inline void fx_run(struct fx *fx)
{
    while (fx->done < fx->want && !fx->timed_out)
        event_base_loop(fx->base, EVLOOP_ONCE);
    assert_false(fx->timed_out);
}

static inline int fx_teardown(void **state)
{
    struct fx *fx = *state;
    sbx_runtime_free(fx->rt); /* unmounts the workspace images too */
    if (fx->deadline)
        event_free(fx->deadline);
    for (int p = 0; p < 2; p++) {
        if (fx->fds[p].init_exe >= 0)
            close(fx->fds[p].init_exe);
        if (fx->fds[p].seccomp >= 0)
            close(fx->fds[p].seccomp);
    }
    sbx_store_close(fx->store);
    event_base_free(fx->base);
    sbx_ws_quota_release_all(fx->ws_root);
    nftw(fx->dir, fx_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(fx);
    return 0;
}

/* A task of a tenant's clone running argv. */
static inline struct sbx_task_request fx_request(const char *tenant, const char *const *argv)
{
    struct sbx_task_request r = {.argv = argv, .net = -1, .net_default = -1};
    snprintf(r.clone.tenant, sizeof(r.clone.tenant), "%s", tenant);
    snprintf(r.clone.id, sizeof(r.clone.id), "default");
    return r;
}

/* The task's record in the store (the caller frees it). */
static inline struct sbx_store_task *fx_stored(struct fx *fx, const char *id)
{
    struct sbx_store_task *t = NULL;
    sbx_err e = {0};
    if (sbx_store_task_get(fx->store, id, NULL, SBX_STORE_WITH_OUTPUT, &t, &e) < 0)
        fx_fail("task get", &e);
    return t;
}

static inline void fx_warmed(void *ud, const struct sbx_store_task *t)
{
    *(bool *)ud = true;
}

/* Run one task in tenant's clone, so that its workspace image exists (a
 * clone's first task waits for its mkfs). */
static inline void fx_warm(struct fx *fx, const char *tenant)
{
    static const char *const argv[] = {"/bin/true", NULL};
    struct sbx_task_request r = fx_request(tenant, argv);
    char id[SBX_ID_SIZE];
    sbx_err e = {0};
    bool ended = false;
    if (sbx_runtime_submit(fx->rt, &r, fx_warmed, &ended, id, &e) < 0)
        fx_fail("submit", &e);
    while (!ended && !fx->timed_out)
        event_base_loop(fx->base, EVLOOP_ONCE);
    assert_false(fx->timed_out);
}
