#include "daemon/settings.h"

void sbx_settings_from_config(struct sbx_runtime_settings *s, const struct sbx_config *c)
{
    /* Borrowed, not copied: the configuration lives as long as the daemon,
     * longer than the runtime (serve frees it last). */
    *s = (struct sbx_runtime_settings){
        .state_dir = c->state_dir,
        .workspace_root = c->workspace_root,
        .runtime_id = c->runtime_id,
        .control_dir = c->control_dir,
        .tenant_code = c->tenant_code,
        .clone_key = c->clone_key,
        .clone_id = c->clone_id,
        .max_concurrent = c->max_concurrent,
        .queue_size = c->queue_size,
        .queue_per_tenant = c->queue_per_tenant,
        .limits = c->limits,
        .max = c->max,
        .workspace_quota_bytes = c->workspace_quota_bytes,
        .workspace_quota_mode = c->workspace_quota_mode,
        .workspace_idle_unmount_s = c->workspace_idle_unmount_s,
        .disk_reserve_bytes = c->disk_reserve_bytes,
        .max_clones_per_tenant = c->max_clones_per_tenant,
        .idle_timeout_s = c->idle_timeout_s,
        .net = c->net,
        .mount_sandbox = c->mount_sandbox,
        .seccomp = c->seccomp,
        .runner_uid = c->runner_uid,
        .runner_gid = c->runner_gid,
        .host_id_base = c->host_id_base,
        .task_env = c->task_env,
        .network = c->network.limits,
        .environments = c->environments,
        .n_environments = c->n_environments,
        .tenants = c->tenants,
        .n_tenants = c->n_tenants,
        .pool = c->pool,
        .snapshots = {.dir = c->snapshot_dir,
                      .keep = c->retention.snapshots,
                      .max_age_s = c->retention.snapshot_max_age_s,
                      .max_bytes = c->retention.snapshot_max_bytes},
        .host_view_hidden = {c->skills.builtin_root, c->skills.common_root, c->skills.shared_root,
                             c->skills.mapped_root, "/opt/skills", "/opt/skills-store", NULL},
    };
    /* No sandbox asks for more cpu than all of them together may have (v1
     * refuses a cgroup's quota above its parent's). */
    double total = c->total_cpu_cores;
    if (total > 0 && (s->max.cpu_cores == 0 || s->max.cpu_cores > total))
        s->max.cpu_cores = total;
    if (total > 0 && s->limits.cpu_cores > total)
        s->limits.cpu_cores = total;
}
