/* The configuration of `sandboxd serve`: one precedence chain,
 *
 *     built-in defaults < YAML file (--config) < CLAW_* environment < flags,
 *
 * built by one call, sbx_config_load(). An unknown key or a bad value from any
 * source is an error at start that names the key where it was written:
 *
 *     config.yaml:12:3: sandbox.memory_limit: '12x' has an unknown size suffix ...
 *     CLAW_MEMORY_LIMIT_MB: 'lots' is not a number
 *     --listen: port '99999' is out of range [0, 65535]
 *
 * The loader never reads the process's own environment (envp is a parameter)
 * and never prints. docs/configuration.md is the operator's version of this.
 *
 * YAML schema (OpenSandbox-style sections of seed 004, plus network, tenants,
 * retention). Every key is optional; an unknown key at any depth is an error.
 * Sizes: "256m", "1G", "100MiB", plain bytes. Durations: "300", "30s", "5m",
 * "2h", "7d", "500ms". CPU: cores ("0.25", "2") or percent of one core ("25%").
 * Lists of CIDRs, ports, keys: a YAML list or one comma-separated string.
 *
 *   server:
 *     listen: ":8080"          # CLAW_LISTEN_ADDR, --listen; "HOST:PORT", ":PORT",
 *                              # "[::1]:PORT", "unix:/run/sandboxd.sock"
 *                              # (`address` is the seed's name for it)
 *     state_dir: /var/lib/sandbox              # --state-dir
 *     workspace_root: <state_dir>/workspaces   # CLAW_WORKSPACE, --workspace-root
 *     control_dir: <state_dir>/control         # CLAW_CONTROL_DIR, --control-dir
 *     snapshot_dir: <state_dir>/snapshots      # workspace snapshots' store
 *     runtime_id: rt-1                         # CLAW_RUNTIME_ID (unset: the daemon's choice)
 *     log_level: info                          # --log-level: error|warn|info|debug
 *     max_concurrent: 32       # --max-concurrent; tasks running at once (seed: max_workers)
 *     queue_size: 1024         # tasks waiting, all tenants together (0: no queue)
 *     queue_per_tenant: 64     # one tenant's share of the queue (429 beyond it)
 *     max_connections: 512     # HTTP clients at once
 *     max_body: 16m            # largest JSON request body (413 beyond it)
 *     header_timeout: 10s      # a client must send its headers within this
 *     connection_idle_timeout: 60s
 *     metrics_tenant_label: false  # GET /metrics: a tenant label on task counters
 *     max_connections_per_address: 64  # one client address's share (429 beyond)
 *     body_timeout: 30s        # a body must arrive within this, plus 1 s per body_min_rate
 *     body_min_rate: 1k        # bytes a second
 *     max_requests_per_token: 0   # requests in progress; 0: max_connections / 4
 *     max_requests_per_tenant: 0  # the same, per tenant
 *     max_streams_per_token: 32   # open event streams
 *     max_streams_per_tenant: 32
 *     keep_alive: true         # false: one request per connection
 *     idempotency_ttl: 24h     # how long an Idempotency-Key names its task
 *     default_clone:           # the clone of a request that names none
 *       tenant_code: default   # CLAW_TENANT_CODE
 *       clone_key: ~           # CLAW_CLONE_KEY (unset: no cloneKey level)
 *       clone_id: default      # CLAW_CLONE_ID
 *     tokens:                  # CLAW_API_TOKEN, --token: operator tokens
 *       - {name: ops, token: "<secret>"}                 # operator: may do everything
 *       - {name: acme-bot, token: "<secret>", tenant: acme}  # bound to one tenant
 *   sandbox:                   # what a task gets when it asks for nothing
 *     default_timeout: 300s    # (also `timeout`) the task's wall-clock limit
 *     memory_limit: 256m       # CLAW_MEMORY_LIMIT_MB, --memory
 *     pids_limit: 32           # CLAW_MAX_PROCESSES, --pids
 *     cpu_limit: 0.25          # CLAW_CPU_LIMIT (percent: 25), --cpu (cores)
 *     file_size_limit: 100m    # largest file a task may write
 *     output_limit: 10m        # stdout and stderr kept, each
 *     tmp_size: 64m            # size of /tmp and the home directory
 *     max:                     # the most a request may ask for (same keys)
 *       timeout: 1800s
 *       memory_limit: 2g
 *       pids_limit: 256
 *       cpu_limit: 2
 *       file_size_limit: 1g
 *       output_limit: 64m
 *       tmp_size: 1g
 *     workspace_quota: 1g      # per clone
 *     workspace_quota_mode: auto # auto|loop|project|monitor: how it is enforced
 *     workspace_idle_unmount: 300s # an image unused this long is unmounted (loop mode)
 *     cgroup_parent: sandboxd  # the sandboxes' parent cgroup, beneath the daemon's own
 *     cgroup_mode: auto        # auto|rlimit: rlimit forces the no-cgroup fallback
 *     max_clones_per_tenant: 1000
 *     idle_timeout: 600s       # CLAW_IDLE_TIMEOUT_SEC: a session idle this long is stopped
 *     network_policy: proxy    # none|proxy|host (seed's `bridge` = proxy);
 *                              # CLAW_ENABLE_SANDBOX_NET true = proxy, false = none; --net
 *     mount_sandbox: true      # CLAW_ENABLE_MOUNT_SANDBOX
 *     read_only_rootfs: true   # the seed's key; only true is possible
 *     seccomp_profile: default # default|strict
 *     runner_uid: 10001        # CLAW_RUNNER_UID: the task's uid inside the sandbox
 *     runner_gid: 10001        # CLAW_RUNNER_GID
 *     host_id_base: 100000     # host id of the first clone's range (65536 ids each)
 *     task_env_keys: [UR_BASE_URL]  # CLAW_TASK_ENV_KEYS: the daemon's variables
 *                              # injected into every tenant's tasks
 *   network:                   # the egress of `proxy` sandboxes
 *     default: allow           # allow (public internet minus the deny-list) | deny
 *     allow: ["api.example.com:443", "*.pypi.org"]   # rules of net/policy.h
 *     deny: ["*.internal.example"]
 *     hosts: {db.local: 10.1.2.3}                     # static names
 *     dns: {upstream: ["1.1.1.1", "[2606:4700::1111]:53"]}  # unset: /etc/resolv.conf
 *     proxy_port: 1080                      # CLAW_SANDBOX_PROXY_PORT
 *     allowed_cidrs: [172.17.0.1/32]        # CLAW_SANDBOX_ALLOWED_CIDRS
 *     allowed_ports: [19091]                # CLAW_SANDBOX_ALLOWED_PORTS
 *     allowed_internal_targets: ["10.0.0.5:5432"]  # CLAW_ALLOWED_INTERNAL_TARGETS
 *     blocked_cidrs: [203.0.113.0/24]       # CLAW_SANDBOX_BLOCKED_CIDRS
 *     limits:
 *       max_connections: 256   # per sandbox, at once
 *       total_connections: 4096  # all sandboxes together
 *       max_bytes: 0           # per sandbox, both ways (0: unlimited)
 *       idle_timeout: 300s
 *       connect_timeout: 10s
 *   tenants:                   # per tenant code
 *     acme:
 *       env_keys: [OPENAI_API_KEY]   # more of the daemon's variables, for acme only
 *       env: {OPENAI_BASE_URL: "https://llm.acme.example/v1"}   # fixed values
 *   retention:
 *     max_age: 7d              # tasks, outputs and events older than this are pruned
 *     max_tasks: 10000         # and beyond this many tasks
 *     events_per_session: 10000  # events kept per session (then events_lost)
 *     snapshots: 10              # workspace snapshots kept per workspace (0: no bound)
 *     snapshot_max_age: 30d      # pruned at the next snapshot once older (0: no bound)
 *     snapshot_max_bytes: 100m   # distinct contents of one workspace's snapshots
 *   environments:              # name -> environment; built in: python, node, shell
 *     python:                  # (a list of {name: ..., ...} as in seed 004 works too)
 *       language: python       # python|node|shell; a new one without it takes
 *                              # it from its name ("python-3.9" is python)
 *       command: [python3, -c] # argv prefix; the code is the last argument
 *       aliases: [python3, python-3.9]
 *       rootfs: /srv/rootfs/py39     # its /usr, /bin, /lib* (unset: the host's)
 *       working_dir: /workspace
 *       network_policy: proxy        # unset: sandbox.network_policy
 *       seccomp_profile: strict      # unset: sandbox.seccomp_profile
 *       memory_limit: 512m           # any sandbox limit key; unset: sandbox's
 *       enabled: true                # false removes it (also a built-in one)
 *   pool:                      # warm sandboxes (exec/pool.h)
 *     enabled: false
 *     size: 0                  # (seed: max_idle) warm sandboxes kept ready
 *     max_active: 0            # 0: server.max_concurrent
 *     idle_timeout: 5m
 *     environments: [python]   # unset: every environment
 *     spawner: true            # sandboxes made by a small process forked at start
 *     zygote: false            # python/node started ahead in pooled code sandboxes
 *     zygote_imports: [json]   # modules python imports ahead
 *     zygote_node_requires: [http]   # builtin modules node loads ahead
 *
 * Lists and precedence: a source that sets a list replaces the whole list of
 * lower sources. Operator tokens are one such list (server.tokens entries
 * without tenant < CLAW_API_TOKEN < --token); tenant-bound tokens come only from
 * YAML and are kept whatever the higher sources say.
 *
 * Empty CLAW_* variables count as unset (the original's behaviour); an unknown
 * CLAW_* variable is an error, except the original's variables that mean
 * nothing here (listed in ignored_env, for the daemon to log). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/log.h"
#include "isolate/sandbox.h"
#include "net/netpolicy.h"
#include "net/policy.h"
#include "runtime/settings.h"

/* Where the API listens. */
struct sbx_listen {
    char *text;       /* as written, for messages */
    bool unix_socket; /* "unix:PATH" */
    char *host;       /* TCP: an address or a name, NULL for every address */
    uint16_t port;    /* TCP: 0 lets the kernel choose */
    char *path;       /* unix: absolute */
};

/* An API token. The daemon compares `token` in constant time and names the
 * caller by `name` in the audit log (never by the token). */
struct sbx_token {
    char *name;   /* YAML name; "CLAW_API_TOKEN#2" or "--token#1" for the others */
    char *token;  /* the secret: 16 to 512 printable characters, no blank or comma */
    char *tenant; /* NULL: an operator token; else bound to this tenant */
};

/* Where the agent's model is: base_url and name, its key read from the
 * variable key_env of the daemon's environment or from key_file (NULL:
 * unset; the daemon's defaults are OPENAI_BASE_URL, OPENAI_MODEL and
 * OPENAI_API_KEY). */
struct sbx_model_conf {
    char *base_url, *name, *key_env, *key_file;
};
struct sbx_tenant_model {
    char *code;
    struct sbx_model_conf model;
};

struct sbx_config {
    char *config_path; /* the YAML file read, NULL when none */
    bool help;         /* --help was given: nothing else was loaded */
    enum sbx_log_level log_level;

    /* server */
    struct sbx_listen listen;
    char *state_dir;      /* absolute, like every path here */
    char *workspace_root; /* <root>/<tenant>/[<cloneKey>/]<cloneId>/work */
    char *control_dir;
    char *snapshot_dir; /* workspace snapshots' store */
    char *runtime_id;   /* NULL: the daemon picks one */
    char *tenant_code;  /* the default clone of requests that name none */
    char *clone_key;    /* NULL: none */
    char *clone_id;
    struct sbx_token *tokens; /* none: the daemon generates one on first start */
    size_t n_tokens;
    uint64_t max_concurrent;
    uint64_t queue_size;
    uint64_t queue_per_tenant; /* <= queue_size */
    uint64_t max_connections;
    uint64_t max_body_bytes;
    double header_timeout_s;
    double connection_idle_timeout_s;
    bool metrics_tenant_label;    /* a series per tenant: the operator's choice */
    uint64_t store_reserve_bytes; /* kept beside the database for its writes on a full disk */
    uint64_t disk_reserve_bytes;  /* of the state dir's filesystem, never promised to images */
    uint64_t max_connections_per_address; /* 0: the server's default */
    double body_timeout_s;
    uint64_t body_min_rate;          /* bytes a second */
    uint64_t max_requests_per_token; /* 0: a quarter of max_connections */
    uint64_t max_requests_per_tenant;
    uint64_t max_streams_per_token;
    uint64_t max_streams_per_tenant;
    bool keep_alive;
    double idempotency_ttl_s; /* Idempotency-Key kept this long */

    /* sandbox */
    struct sbx_limits limits; /* defaults, each <= max */
    struct sbx_limits max;
    uint64_t workspace_quota_bytes;
    enum sbx_ws_quota_mode workspace_quota_mode; /* auto|loop|project|monitor */
    double workspace_idle_unmount_s;             /* an unused image is unmounted */
    /* The aggregate caps over all sandboxes, on the sandboxd/ parent cgroup
     * (0: none); the seed's container of 2 cores, 3 GB, 512 processes. */
    uint64_t total_memory_bytes, total_pids;
    char *cgroup_parent; /* that parent's name beneath the daemon's own cgroup */
    bool cgroup_rlimit;  /* cgroup_mode rlimit: no cgroups, limits by rlimits */
    double total_cpu_cores;
    uint64_t max_clones_per_tenant; /* workspaces (and host id ranges) a tenant may have */
    double idle_timeout_s;          /* of a session */
    enum sbx_net_policy net;
    bool mount_sandbox;
    enum sbx_seccomp_profile seccomp;
    /* sandbox.seccomp_profile given as seed 004's table: the environments
     * that set no profile of their own take it (they borrow it) */
    struct sbx_seccomp_table *seccomp_table;
    /* sandbox.read_only_rootfs: the environments' default (false: each
     * task's system directories are tmpfs overlays) */
    bool read_only_rootfs;
    /* sandbox.mount_roots: the host directories environments' mounts may
     * take their sources from (absolute, no trailing slash) */
    struct sbx_strv mount_roots;
    uint32_t runner_uid, runner_gid;
    uint32_t host_id_base;
    struct sbx_strv task_env_keys;
    struct sbx_strv task_env; /* "KEY=VALUE" of those keys found in envp */

    /* network: the egress policy of `proxy` sandboxes (net/policy.h) */
    struct {
        enum sbx_default def;
        struct sbx_strv allow, deny;  /* rules */
        struct sbx_strv hosts;        /* "name=address" */
        struct sbx_strv dns_upstream; /* "ip" or "ip:port"; empty: /etc/resolv.conf */
        /* The original's comma-separated lists, as sbx_policy_opts takes
         * them (NULL when unset). */
        char *allowed_cidrs, *allowed_ports, *allowed_internal_targets, *blocked_cidrs;
        struct sbx_egress_settings limits; /* proxy_port and network.limits */
    } network;

    struct sbx_tenant_conf *tenants;
    size_t n_tenants;

    struct {
        double max_age_s;
        uint64_t max_tasks;
        uint64_t events_per_session;
        uint64_t snapshots; /* per workspace; 0: no bound (and below) */
        double snapshot_max_age_s;
        uint64_t snapshot_max_bytes;
        double audit_max_age_s;     /* 0: no age limit */
        uint64_t audit_max_records; /* 0: no count limit */
    } retention;

    struct sbx_environment *environments; /* enabled ones only, n >= 0 */
    size_t n_environments;

    struct sbx_pool_settings pool;

    /* skills: the tiers' roots and the skill tasks' UR_TOKEN (src/skills) */
    struct {
        char *builtin_root, *common_root, *shared_root, *mapped_root;
        uint64_t max_bytes;
        char *ur_base_url;
        char *token_secret;      /* NULL: token_secret_file */
        char *token_secret_file; /* NULL: <state_dir>/skills-token-secret, made on first start */
        char *token_audience;
        double token_ttl_s;
    } skills;
    /* The model of the agent's turns (a tenant's own under tenants.<code>.model). */
    struct sbx_model_conf model;
    struct sbx_tenant_model *tenant_models;
    size_t n_tenant_models;
    struct {
        uint64_t tool_output_limit, max_steps, max_tokens, max_retries;
        double turn_timeout_s, stall_timeout_s;
    } agent;

    /* The original's CLAW_* variables that were set but mean nothing here
     * (CLAW_AGENT_ID, CLAW_SKILL_STORE_*_ROOT, ...), for the daemon to log. */
    struct sbx_strv ignored_env;
};

/* Fill c from defaults, the YAML file named by --config, envp (the CLAW_*
 * entries of a NULL-terminated "KEY=VALUE" array, may be NULL) and argv
 * (argv[0], the command's name, is skipped; options are long ones, "--name
 * VALUE" or "--name=VALUE"). Returns 0, or -1 with err->msg the complete line
 * to show (source, key, value, reason) and c left empty. With --help, returns
 * 0 with only c->help set. c need not be initialised; free it with
 * sbx_config_free either way. */
int sbx_config_load(struct sbx_config *c, int argc, char **argv, char **envp, sbx_err *err);
/* The defaults < CLAW_* part of that chain, for `sandboxd run`: the built-in
 * defaults, then those CLAW_* entries of envp that a single command takes
 * (CLAW_ENABLE_SANDBOX_NET, CLAW_SANDBOX_PROXY_PORT, CLAW_SANDBOX_ALLOWED_CIDRS,
 * CLAW_SANDBOX_ALLOWED_PORTS, CLAW_ALLOWED_INTERNAL_TARGETS,
 * CLAW_SANDBOX_BLOCKED_CIDRS), each judged as for serve; other CLAW_* entries
 * are left alone and no file is read (run's flags go on top). Returns and
 * frees as sbx_config_load. */
int sbx_config_load_run(struct sbx_config *c, char **envp, sbx_err *err);
/* Free every owned string (secrets zeroed first) and leave c zeroed. */
void sbx_config_free(struct sbx_config *c);

/* The environment called name (its name or one of its aliases), or NULL. */
const struct sbx_environment *sbx_config_environment(const struct sbx_config *c, const char *name);
/* The settings of tenant code, or NULL when it has none of its own. */
const struct sbx_tenant_conf *sbx_config_tenant(const struct sbx_config *c, const char *code);

/* The flags of `sandboxd serve`, for its --help. */
extern const char sbx_config_usage[];
