/* What the runtime is configured with: its limits and maxima, environments,
 * tenants, network limits, queue sizes and ids. The runtime owns this type;
 * the daemon fills it from its configuration (daemon/settings.c), tests
 * fill it by hand. Strings and arrays are borrowed: whoever fills the
 * settings keeps them alive as long as the runtime. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/strv.h"
#include "isolate/sandbox.h"
#include "net/netpolicy.h"
#include "workspace/quota_mode.h"

enum sbx_language { SBX_LANG_PYTHON = 0, SBX_LANG_NODE, SBX_LANG_SHELL };
const char *sbx_language_name(enum sbx_language l); /* "python", "node", "shell" */

/* Limits of one task. In the settings' limits and max and in every
 * environment all fields are set (> 0). */
struct sbx_limits {
    double timeout_s;
    uint64_t memory_bytes;
    uint64_t pids;
    double cpu_cores;
    uint64_t file_size_bytes;
    uint64_t output_bytes; /* per stream */
    uint64_t tmp_bytes;    /* /tmp and the home directory */
};

struct sbx_tenant_conf {
    char *code;
    struct sbx_strv env_keys; /* names of the daemon's variables to inject */
    /* What this tenant's tasks get on top of the settings' task_env,
     * "KEY=VALUE": the env_keys present in the daemon's environment, then
     * the fixed `env` values. */
    struct sbx_strv env;
};

/* A host directory bound into an environment's tasks (seed 004's
 * `mounts:`). source is relative to root (one of sandbox.mount_roots) and
 * may hold {{.TaskID}}, {{.TenantCode}}, {{.CloneID}}, {{.SessionID}}; it is
 * made per task when missing and resolved beneath root without following
 * any symlink. */
struct sbx_env_mount {
    char *root;   /* absolute, the operator's mount root it lies under */
    char *source; /* relative to root, a template */
    char *target; /* absolute, inside the sandbox */
    bool writable;
};
#define SBX_ENV_MOUNTS_MAX 4

struct sbx_environment {
    char *name;
    enum sbx_language language;
    struct sbx_strv command; /* argv prefix, n >= 1; the code is appended */
    struct sbx_strv aliases; /* other names a request may use */
    /* Its root directory (usr/, bin/, lib*, etc/); NULL: the host's system
     * directories. For an image, set by the daemon once it is unpacked. */
    char *rootfs;
    char *working_dir; /* absolute, inside the sandbox */
    enum sbx_net_policy net;
    enum sbx_seccomp_profile seccomp;
    struct sbx_limits limits; /* defaults of a task in it, within the maxima */
    bool writable_root;       /* read_only_rootfs: false */
    struct sbx_env_mount mounts[SBX_ENV_MOUNTS_MAX];
    size_t n_mounts;
    /* An operator's seccomp table, stacked on the default profile, and its
     * compiled programs (the daemon compiles it at start; -1: none yet). */
    struct sbx_seccomp_table *seccomp_table;
    int seccomp_fd;
    /* An OCI image (a layout directory or a docker/podman save archive):
     * its path, its digest once known, and why it is not usable (NULL
     * while it is unpacked or once it is ready: rootfs says which). */
    char *image;
    char image_digest[80];
    char *image_error;
};

/* The egress proxy of `proxy` sandboxes: the port a sandbox reaches it on
 * and what it lets through. The configuration fills it (network.proxy_port,
 * network.limits) and the runtime takes it whole. */
struct sbx_egress_settings {
    uint16_t proxy_port;
    uint64_t max_connections;   /* per sandbox */
    uint64_t total_connections; /* all sandboxes */
    uint64_t max_bytes;         /* per sandbox; 0: unlimited */
    double idle_timeout_s;
    double connect_timeout_s;
};

/* Warm sandboxes (exec/pool.h). */
struct sbx_pool_settings {
    bool enabled;
    uint64_t size;       /* max_idle: held per description (exec/pool.h) */
    uint64_t max_total;  /* held in all */
    uint64_t max_active; /* 0: max_concurrent */
    /* live sessions' holders held ready (exec/pool.h session_idle); set, it
     * pools them even when environments is set */
    uint64_t sessions;
    double idle_timeout_s;
    struct sbx_strv environments; /* canonical names; empty: all */
    bool spawner; /* make sandboxes in a spawner process forked at start (isolate/spawner.h) */
    /* python and node code tasks of a pooled sandbox: the interpreter
     * started ahead (runtime/zygote.c), these modules loaded in it (node:
     * builtin ones only) */
    bool zygote;
    struct sbx_strv zygote_imports;
    struct sbx_strv zygote_node_requires;
};

/* Workspace snapshots (runtime/snapshots.c): where the store is and what
 * retention keeps per workspace (0: no bound). */
struct sbx_snapshot_settings {
    const char *dir; /* NULL: <state_dir>/snapshots */
    uint64_t keep;
    double max_age_s;
    uint64_t max_bytes;
};

struct sbx_runtime_settings {
    const char *state_dir;      /* the clones' workspace images are under it */
    const char *workspace_root; /* <root>/<tenant>/[<cloneKey>/]<cloneId>/work */
    const char *runtime_id;     /* the default session's name; NULL: "default" */
    /* <control_dir>/<tenant>/[<cloneKey>/]<cloneId>: root's 0555, main.pid
     * (0444) written at each start of the clone's runtime; NULL: none. Never
     * mounted into a sandbox. */
    const char *control_dir;
    /* The default clone of requests that name none (clone_key NULL: none). */
    const char *tenant_code, *clone_key, *clone_id;

    uint64_t max_concurrent;   /* tasks running at once */
    uint64_t queue_size;       /* tasks waiting, all tenants together */
    uint64_t queue_per_tenant; /* one tenant's share of the queue */

    struct sbx_limits limits; /* a task's defaults, each <= max */
    struct sbx_limits max;    /* the most a request may ask for */
    uint64_t workspace_quota_bytes;
    /* How it is enforced (never auto here: serve chose at start) and why. */
    enum sbx_ws_quota_mode workspace_quota_mode;
    const char *workspace_quota_why;
    /* loop mode: a clone's image unused this long is unmounted (and mounted
     * again on its next use); 0: kept mounted until the daemon stops */
    double workspace_idle_unmount_s;
    /* Free space of the state directory's filesystem that workspace images
     * are never promised: a new image is refused (ENOSPC) when the free
     * space, less what the existing images may still grow by, less its own
     * size, would be under it. 0: images are not accounted. */
    uint64_t disk_reserve_bytes;
    uint64_t max_clones_per_tenant;
    double idle_timeout_s; /* of a session; 0: none */
    enum sbx_net_policy net;
    bool mount_sandbox;
    /* Without the mount sandbox: host directories masked in its /host view
     * (the skill trees: a skill runs only as a skill), NULL-terminated. */
    const char *host_view_hidden[8];
    enum sbx_seccomp_profile seccomp;
    uint32_t runner_uid, runner_gid; /* the task's ids inside the sandbox */
    uint32_t host_id_base;           /* host id of the first clone's range */
    struct sbx_strv task_env;        /* "KEY=VALUE" injected into every task */

    struct sbx_egress_settings network;

    const struct sbx_environment *environments;
    size_t n_environments;
    const struct sbx_tenant_conf *tenants;
    size_t n_tenants;

    struct sbx_pool_settings pool;
    struct sbx_snapshot_settings snapshots;
};

/* The environment called name (its name first, then one of its aliases,
 * then, for a name like seed 004's "python-3.9", the environment named
 * before the '-' and a version) in envs[0..n), or NULL. */
const struct sbx_environment *sbx_environment_find(const struct sbx_environment *envs, size_t n,
                                                   const char *name);
/* The tenant of that code in tenants[0..n), or NULL. */
const struct sbx_tenant_conf *sbx_tenant_find(const struct sbx_tenant_conf *tenants, size_t n,
                                              const char *code);
/* The same lookups in the settings. */
const struct sbx_environment *sbx_settings_environment(const struct sbx_runtime_settings *s,
                                                       const char *name);
const struct sbx_tenant_conf *sbx_settings_tenant(const struct sbx_runtime_settings *s,
                                                  const char *code);
