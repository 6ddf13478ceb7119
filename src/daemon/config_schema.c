/* The key table of the configuration: every scalar setting with its YAML
 * section and key (and the seed's alias), its CLAW_* variable and its flag,
 * the kind of value each takes and its bounds; and the keys of a limits
 * block. Adding a setting is adding a line here (and its field). */
#include <stdio.h>
#include <string.h>

#include "daemon/config_int.h"

const struct lim_field cfg_lim_fields[N_LIM] = {
    [LIM_TIMEOUT] = {"timeout", "default_timeout", K_DURATION,
                     offsetof(struct sbx_limits, timeout_s), 0, 86400, "300s", "1800s"},
    [LIM_MEMORY] = {"memory_limit", NULL, K_SIZE, offsetof(struct sbx_limits, memory_bytes),
                    8ull << 20, 0, "256m", "2g"},
    [LIM_PIDS] = {"pids_limit", NULL, K_UINT, offsetof(struct sbx_limits, pids), 1, 1u << 22, "32",
                  "256"},
    [LIM_CPU] = {"cpu_limit", NULL, K_CPU, offsetof(struct sbx_limits, cpu_cores), 0, 1024, "0.25",
                 "2"},
    [LIM_FILE] = {"file_size_limit", NULL, K_SIZE, offsetof(struct sbx_limits, file_size_bytes), 1,
                  0, "100m", "1g"},
    /* (the store keeps each stream up to max.output_limit: at most 512m) */
    [LIM_OUTPUT] = {"output_limit", NULL, K_SIZE, offsetof(struct sbx_limits, output_bytes), 1,
                    512ull << 20, "10m", "64m"},
    [LIM_TMP] = {"tmp_size", NULL, K_SIZE, offsetof(struct sbx_limits, tmp_bytes), 1ull << 20, 0,
                 "64m", "1g"},
};

#define OFF(f) offsetof(struct sbx_config, f)

const struct setting cfg_settings[] = {
    /* server */
    {"server", "listen", "address", "CLAW_LISTEN_ADDR", K_LISTEN, "--listen", K_LISTEN, OFF(listen),
     0, 0, -1},
    {"server", "state_dir", NULL, NULL, 0, "--state-dir", K_PATH, OFF(state_dir), 0, 0, -1},
    {"server", "workspace_root", NULL, "CLAW_WORKSPACE", K_PATH, "--workspace-root", K_PATH,
     OFF(workspace_root), 0, 0, -1},
    {"server", "snapshot_dir", NULL, NULL, 0, NULL, K_PATH, OFF(snapshot_dir), 0, 0, -1},
    {"server", "control_dir", NULL, "CLAW_CONTROL_DIR", K_PATH, "--control-dir", K_PATH,
     OFF(control_dir), 0, 0, -1},
    {"server", "runtime_id", NULL, "CLAW_RUNTIME_ID", K_OPT_SEGMENT, NULL, K_OPT_SEGMENT,
     OFF(runtime_id), 0, 0, -1},
    {"server", "log_level", NULL, NULL, 0, "--log-level", K_LOGLEVEL, OFF(log_level), 0, 0, -1},
    {"server", "max_concurrent", "max_workers", NULL, 0, "--max-concurrent", K_UINT,
     OFF(max_concurrent), 1, 4096, -1},
    {"server", "queue_size", NULL, NULL, 0, NULL, K_UINT, OFF(queue_size), 0, 1000000, -1},
    {"server", "queue_per_tenant", NULL, NULL, 0, NULL, K_UINT, OFF(queue_per_tenant), 0, 1000000,
     -1},
    {"server", "max_connections", NULL, NULL, 0, NULL, K_UINT, OFF(max_connections), 1, 1000000,
     -1},
    {"server", "max_body", NULL, NULL, 0, NULL, K_SIZE, OFF(max_body_bytes), 1024, 0, -1},
    {"server", "header_timeout", NULL, NULL, 0, NULL, K_DURATION, OFF(header_timeout_s), 0, 3600,
     -1},
    {"server", "connection_idle_timeout", NULL, NULL, 0, NULL, K_DURATION,
     OFF(connection_idle_timeout_s), 0, 86400, -1},
    {"server", "metrics_tenant_label", NULL, NULL, 0, NULL, K_BOOL, OFF(metrics_tenant_label), 0, 0,
     -1},
    {"server", "store_reserve", NULL, NULL, 0, NULL, K_SIZE0, OFF(store_reserve_bytes), 0,
     1ull << 32, -1},
    {"server", "disk_reserve", NULL, NULL, 0, NULL, K_SIZE0, OFF(disk_reserve_bytes), 0, 0, -1},
    {"server", "max_connections_per_address", NULL, NULL, 0, NULL, K_UINT,
     OFF(max_connections_per_address), 1, 1000000, -1},
    {"server", "body_timeout", NULL, NULL, 0, NULL, K_DURATION, OFF(body_timeout_s), 1, 86400, -1},
    {"server", "body_min_rate", NULL, NULL, 0, NULL, K_SIZE, OFF(body_min_rate), 1, 0, -1},
    {"server", "max_requests_per_token", NULL, NULL, 0, NULL, K_UINT, OFF(max_requests_per_token),
     0, 1000000, -1},
    {"server", "max_requests_per_tenant", NULL, NULL, 0, NULL, K_UINT, OFF(max_requests_per_tenant),
     0, 1000000, -1},
    {"server", "max_streams_per_token", NULL, NULL, 0, NULL, K_UINT, OFF(max_streams_per_token), 1,
     1000000, -1},
    {"server", "max_streams_per_tenant", NULL, NULL, 0, NULL, K_UINT, OFF(max_streams_per_tenant),
     1, 1000000, -1},
    {"server", "keep_alive", NULL, NULL, 0, NULL, K_BOOL, OFF(keep_alive), 0, 0, -1},
    {"server", "idempotency_ttl", NULL, NULL, 0, NULL, K_DURATION, OFF(idempotency_ttl_s), 1,
     30 * 86400, -1},
    {"server.default_clone", "tenant_code", NULL, "CLAW_TENANT_CODE", K_SEGMENT, NULL, K_SEGMENT,
     OFF(tenant_code), 0, 0, -1},
    {"server.default_clone", "clone_key", NULL, "CLAW_CLONE_KEY", K_OPT_SEGMENT, NULL,
     K_OPT_SEGMENT, OFF(clone_key), 0, 0, -1},
    {"server.default_clone", "clone_id", NULL, "CLAW_CLONE_ID", K_SEGMENT, NULL, K_SEGMENT,
     OFF(clone_id), 0, 0, -1},
    /* sandbox: the limits' YAML keys are lim_fields; these are their other names */
    {NULL, "timeout", NULL, NULL, 0, "--timeout", K_DURATION, OFF(limits.timeout_s), 0, 86400,
     LIM_TIMEOUT},
    {NULL, "memory_limit", NULL, "CLAW_MEMORY_LIMIT_MB", K_MB, "--memory", K_SIZE,
     OFF(limits.memory_bytes), 8ull << 20, 1ull << 44, LIM_MEMORY},
    {NULL, "pids_limit", NULL, "CLAW_MAX_PROCESSES", K_UINT, "--pids", K_UINT, OFF(limits.pids), 1,
     1u << 22, LIM_PIDS},
    {NULL, "cpu_limit", NULL, "CLAW_CPU_LIMIT", K_CPU_PCT, "--cpu", K_CPU, OFF(limits.cpu_cores), 0,
     1024, LIM_CPU},
    {"sandbox", "workspace_quota", NULL, NULL, 0, NULL, K_SIZE, OFF(workspace_quota_bytes),
     1ull << 20, 0, -1},
    {"sandbox", "workspace_quota_mode", NULL, NULL, 0, NULL, K_WSQUOTA, OFF(workspace_quota_mode),
     0, 0, -1},
    {"sandbox", "workspace_idle_unmount", NULL, NULL, 0, NULL, K_DURATION,
     OFF(workspace_idle_unmount_s), 0, 30 * 86400, -1},
    {"sandbox", "total_memory", NULL, NULL, 0, "--total-memory", K_SIZE0, OFF(total_memory_bytes),
     8ull << 20, 0, -1},
    {"sandbox", "total_pids", NULL, NULL, 0, "--total-pids", K_UINT, OFF(total_pids), 0, 1u << 22,
     -1},
    {"sandbox", "cgroup_parent", NULL, NULL, 0, NULL, K_SEGMENT, OFF(cgroup_parent), 0, 0, -1},
    {"sandbox", "cgroup_mode", NULL, NULL, 0, NULL, K_CGMODE, OFF(cgroup_rlimit), 0, 0, -1},
    {"sandbox", "total_cpu", NULL, NULL, 0, "--total-cpu", K_CPU0, OFF(total_cpu_cores), 0, 1024,
     -1},
    {"sandbox", "max_clones_per_tenant", NULL, NULL, 0, NULL, K_UINT, OFF(max_clones_per_tenant), 1,
     60000, -1},
    {"sandbox", "idle_timeout", NULL, "CLAW_IDLE_TIMEOUT_SEC", K_SECONDS, NULL, K_DURATION,
     OFF(idle_timeout_s), 0, 30 * 86400, -1},
    {"sandbox", "network_policy", NULL, "CLAW_ENABLE_SANDBOX_NET", K_NETBOOL, "--net", K_NETPOL,
     OFF(net), 0, 0, -1},
    {"sandbox", "mount_sandbox", NULL, "CLAW_ENABLE_MOUNT_SANDBOX", K_BOOL, NULL, K_BOOL,
     OFF(mount_sandbox), 0, 0, -1},
    {"sandbox", "read_only_rootfs", NULL, NULL, 0, NULL, K_BOOL, OFF(read_only_rootfs), 0, 0, -1},
    {"sandbox", "seccomp_profile", NULL, NULL, 0, NULL, K_SECCOMP, OFF(seccomp), 0, 0, -1},
    {"sandbox", "runner_uid", NULL, "CLAW_RUNNER_UID", K_U32, NULL, K_U32, OFF(runner_uid), 1,
     SBX_ID_RANGE - 2, -1},
    {"sandbox", "runner_gid", NULL, "CLAW_RUNNER_GID", K_U32, NULL, K_U32, OFF(runner_gid), 1,
     SBX_ID_RANGE - 2, -1},
    {"sandbox", "host_id_base", NULL, NULL, 0, "--host-id-base", K_U32, OFF(host_id_base),
     SBX_ID_RANGE, UINT32_MAX - SBX_ID_RANGE, -1},
    {"sandbox", "task_env_keys", NULL, "CLAW_TASK_ENV_KEYS", K_KEYS, NULL, K_KEYS,
     OFF(task_env_keys), 0, 0, -1},
    /* network */
    {"network", "default", NULL, NULL, 0, NULL, K_DEFAULT, OFF(network.def), 0, 0, -1},
    {"network", "proxy_port", NULL, "CLAW_SANDBOX_PROXY_PORT", K_U16, NULL, K_U16,
     OFF(network.limits.proxy_port), 1, 65535, -1},
    {"network", "allowed_cidrs", NULL, "CLAW_SANDBOX_ALLOWED_CIDRS", K_CIDRS, NULL, K_CIDRS,
     OFF(network.allowed_cidrs), 0, 0, -1},
    {"network", "allowed_ports", NULL, "CLAW_SANDBOX_ALLOWED_PORTS", K_PORTS, NULL, K_PORTS,
     OFF(network.allowed_ports), 0, 0, -1},
    {"network", "allowed_internal_targets", NULL, "CLAW_ALLOWED_INTERNAL_TARGETS", K_TARGETS, NULL,
     K_TARGETS, OFF(network.allowed_internal_targets), 0, 0, -1},
    {"network", "blocked_cidrs", NULL, "CLAW_SANDBOX_BLOCKED_CIDRS", K_BLOCKED, NULL, K_BLOCKED,
     OFF(network.blocked_cidrs), 0, 0, -1},
    {"network.limits", "max_connections", NULL, NULL, 0, NULL, K_UINT,
     OFF(network.limits.max_connections), 1, 65536, -1},
    {"network.limits", "total_connections", NULL, NULL, 0, NULL, K_UINT,
     OFF(network.limits.total_connections), 1, 1000000, -1},
    {"network.limits", "max_bytes", NULL, NULL, 0, NULL, K_SIZE0, OFF(network.limits.max_bytes), 1,
     0, -1},
    {"network.limits", "idle_timeout", NULL, NULL, 0, NULL, K_DURATION,
     OFF(network.limits.idle_timeout_s), 0, 86400, -1},
    {"network.limits", "connect_timeout", NULL, NULL, 0, NULL, K_DURATION,
     OFF(network.limits.connect_timeout_s), 0, 300, -1},
    /* retention */
    {"retention", "max_age", NULL, NULL, 0, NULL, K_DURATION, OFF(retention.max_age_s), 0,
     3650 * 86400ull, -1},
    {"retention", "max_tasks", NULL, NULL, 0, NULL, K_UINT, OFF(retention.max_tasks), 1, 1000000000,
     -1},
    {"retention", "events_per_session", NULL, NULL, 0, NULL, K_UINT,
     OFF(retention.events_per_session), 1, 1000000000, -1},
    {"retention", "snapshots", NULL, NULL, 0, NULL, K_UINT, OFF(retention.snapshots), 0, 100000,
     -1},
    {"retention", "snapshot_max_age", NULL, NULL, 0, NULL, K_DURATION,
     OFF(retention.snapshot_max_age_s), 0, 3650 * 86400ull, -1},
    {"retention", "snapshot_max_bytes", NULL, NULL, 0, NULL, K_SIZE0,
     OFF(retention.snapshot_max_bytes), 1, 0, -1},
    {"retention", "audit_max_age", NULL, NULL, 0, NULL, K_DURATION, OFF(retention.audit_max_age_s),
     0, 10 * 365 * 86400.0, -1},
    {"retention", "audit_max_records", NULL, NULL, 0, NULL, K_UINT,
     OFF(retention.audit_max_records), 0, 1000000000, -1},
    /* skills */
    {"skills", "builtin_root", NULL, NULL, 0, NULL, K_PATH, OFF(skills.builtin_root), 0, 0, -1},
    {"skills", "common_root", NULL, "CLAW_SKILL_STORE_COMMON_ROOT", K_PATH, NULL, K_PATH,
     OFF(skills.common_root), 0, 0, -1},
    {"skills", "shared_root", NULL, "CLAW_SKILL_STORE_SHARED_ROOT", K_PATH, NULL, K_PATH,
     OFF(skills.shared_root), 0, 0, -1},
    {"skills", "mapped_root", NULL, "CLAW_SKILL_STORE_MAPPED_ROOT", K_PATH, NULL, K_PATH,
     OFF(skills.mapped_root), 0, 0, -1},
    {"skills", "max_size", NULL, NULL, 0, NULL, K_SIZE, OFF(skills.max_bytes), 1024, 0, -1},
    {"skills", "ur_base_url", NULL, "UR_BASE_URL", K_TEXT, NULL, K_TEXT, OFF(skills.ur_base_url), 0,
     0, -1},
    {"skills", "token_secret", NULL, NULL, 0, NULL, K_TEXT, OFF(skills.token_secret), 0, 0, -1},
    {"skills", "token_secret_file", NULL, NULL, 0, NULL, K_PATH, OFF(skills.token_secret_file), 0,
     0, -1},
    {"skills", "token_audience", NULL, NULL, 0, NULL, K_TEXT, OFF(skills.token_audience), 0, 0, -1},
    {"skills", "token_ttl", NULL, NULL, 0, NULL, K_DURATION, OFF(skills.token_ttl_s), 0, 3600, -1},
    /* model: the agent's (docs/agent.md) */
    {"model", "base_url", NULL, NULL, 0, NULL, K_TEXT, OFF(model.base_url), 0, 0, -1},
    {"model", "name", NULL, NULL, 0, NULL, K_TEXT, OFF(model.name), 0, 0, -1},
    {"model", "key_env", NULL, NULL, 0, NULL, K_TEXT, OFF(model.key_env), 0, 0, -1},
    {"model", "key_file", NULL, NULL, 0, NULL, K_PATH, OFF(model.key_file), 0, 0, -1},
    {"model", "tool_output_limit", NULL, NULL, 0, NULL, K_SIZE, OFF(agent.tool_output_limit), 256,
     0, -1},
    {"model", "max_steps", NULL, NULL, 0, NULL, K_UINT, OFF(agent.max_steps), 1, 10000, -1},
    {"model", "max_tokens", NULL, NULL, 0, NULL, K_UINT, OFF(agent.max_tokens), 0, 1ull << 40, -1},
    {"model", "max_retries", NULL, NULL, 0, NULL, K_UINT, OFF(agent.max_retries), 0, 100, -1},
    {"model", "turn_timeout", NULL, NULL, 0, NULL, K_DURATION, OFF(agent.turn_timeout_s), 0,
     7 * 86400, -1},
    {"model", "stall_timeout", NULL, NULL, 0, NULL, K_DURATION, OFF(agent.stall_timeout_s), 0,
     86400, -1},
    /* pool */
    {"pool", "enabled", NULL, NULL, 0, NULL, K_BOOL, OFF(pool.enabled), 0, 0, -1},
    {"pool", "size", "max_idle", NULL, 0, NULL, K_UINT, OFF(pool.size), 0, 1024, -1},
    {"pool", "max_total", NULL, NULL, 0, NULL, K_UINT, OFF(pool.max_total), 0, 1024, -1},
    {"pool", "max_active", NULL, NULL, 0, NULL, K_UINT, OFF(pool.max_active), 0, 4096, -1},
    {"pool", "sessions", NULL, NULL, 0, NULL, K_UINT, OFF(pool.sessions), 0, 1024, -1},
    {"pool", "idle_timeout", NULL, NULL, 0, NULL, K_DURATION, OFF(pool.idle_timeout_s), 0, 86400,
     -1},
    {"pool", "spawner", NULL, NULL, 0, NULL, K_BOOL, OFF(pool.spawner), 0, 0, -1},
    {"pool", "zygote", NULL, NULL, 0, NULL, K_BOOL, OFF(pool.zygote), 0, 0, -1},
    {"pool", "zygote_imports", NULL, NULL, 0, NULL, K_KEYS, OFF(pool.zygote_imports), 0, 0, -1},
    {"pool", "zygote_node_requires", NULL, NULL, 0, NULL, K_KEYS, OFF(pool.zygote_node_requires), 0,
     0, -1},
};
const size_t cfg_n_settings = SBX_ARRAY_LEN(cfg_settings);

int cfg_lim_index(const char *key)
{
    for (int i = 0; i < N_LIM; i++)
        if (strcmp(cfg_lim_fields[i].key, key) == 0 ||
            (cfg_lim_fields[i].alias && strcmp(cfg_lim_fields[i].alias, key) == 0))
            return i;
    return -1;
}

/* Is a value of field i of lim above the maximum? The text of both if so. */
bool cfg_lim_above(int i, const struct sbx_limits *lim, const struct sbx_limits *max, char *a,
                   char *b, size_t len)
{
    const struct lim_field *f = &cfg_lim_fields[i];
    const char *p = (const char *)lim + f->off, *q = (const char *)max + f->off;
    if (f->kind == K_DURATION || f->kind == K_CPU) {
        double x = *(const double *)p, y = *(const double *)q;
        snprintf(a, len, f->kind == K_CPU ? "%g cores" : "%gs", x);
        snprintf(b, len, f->kind == K_CPU ? "%g cores" : "%gs", y);
        return x > y;
    }
    uint64_t x = *(const uint64_t *)p, y = *(const uint64_t *)q;
    if (f->kind == K_SIZE) {
        cfg_fmt_size(x, a, len);
        cfg_fmt_size(y, b, len);
    } else {
        snprintf(a, len, "%llu", (unsigned long long)x);
        snprintf(b, len, "%llu", (unsigned long long)y);
    }
    return x > y;
}
