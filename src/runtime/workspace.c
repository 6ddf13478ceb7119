/* The workspace of a clone: its host id range, its directory, its quota
 * image mounted once per daemon run. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/runtime_int.h"
#include "workspace/files.h"
#include "workspace/path.h"
#include "workspace/quota.h"

#define CLONE_ID_STRIDE 65536u
#define MAX_CLONES 60000u

/* The clone's workspace as a filesystem of its own (its quota image), mounted
 * once per daemon run and remembered for the unmount at stop. */
static int mount_quota(struct sbx_runtime *rt, const char *dir, uid_t uid, gid_t gid, sbx_err *err)
{
    for (struct mounted_ws *m = rt->mounted; m; m = m->next)
        if (strcmp(m->path, dir) == 0)
            return 0;
    char images[PATH_MAX];
    snprintf(images, sizeof(images), "%s/workspace-images", rt->settings.state_dir);
    if (mkdir(images, 0700) < 0 && errno != EEXIST)
        return sbx_err_set(err, errno, "mkdir %s", images);
    if (sbx_ws_quota_ensure(images, dir, rt->settings.workspace_quota_bytes, uid, gid, err) < 0)
        return -1;
    struct mounted_ws *m = calloc(1, sizeof(*m));
    if (!m || !(m->path = strdup(dir))) {
        free(m);
        sbx_ws_quota_release(dir, NULL);
        return sbx_err_set(err, ENOMEM, "workspace");
    }
    m->next = rt->mounted;
    rt->mounted = m;
    return 0;
}

char *rt_workspace(struct sbx_runtime *rt, const struct sbx_clone *c, uid_t *uid, gid_t *gid,
                   sbx_err *err)
{
    const struct sbx_runtime_settings *set = &rt->settings;
    uint32_t base;
    /* A tenant cannot take every host id range: new clones stop at its cap. */
    bool known;
    uint64_t n;
    if (sbx_store_clone_known(rt->o.store, c->tenant, c->key, c->id, &known, err) < 0 ||
        (!known && sbx_store_clone_count(rt->o.store, c->tenant, &n, err) < 0))
        return NULL;
    if (!known && n >= set->max_clones_per_tenant) {
        sbx_err_set(err, EDQUOT, "tenant %s already has %llu clones, the most allowed", c->tenant,
                    (unsigned long long)n);
        return NULL;
    }
    if (sbx_store_clone_base(rt->o.store, c->tenant, c->key, c->id, set->host_id_base,
                             CLONE_ID_STRIDE, MAX_CLONES, &base, err) < 0)
        return NULL;
    *uid = base + set->runner_uid;
    *gid = base + set->runner_gid;
    /* Its fd is of the directory the quota image is then mounted over: not
     * what anyone wants. */
    cleanup_fd int fd = -1;
    if (sbx_ws_ensure(set->workspace_root, c->tenant, c->key, c->id, *uid, *gid, &fd, err) < 0)
        return NULL;
    cleanup_free char *dir = sbx_ws_dir(set->workspace_root, c->tenant, c->key, c->id, err);
    if (!dir || mount_quota(rt, dir, *uid, *gid, err) < 0)
        return NULL;
    return sbx_steal_pointer(&dir);
}

int sbx_runtime_workspace(struct sbx_runtime *rt, const struct sbx_clone *c, int *ws_fd, uid_t *uid,
                          gid_t *gid, sbx_err *err)
{
    cleanup_free char *dir = rt_workspace(rt, c, uid, gid, err);
    if (!dir)
        return -1;
    /* The mount's root, not the directory under it. */
    if ((*ws_fd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return sbx_err_set(err, errno, "open workspace %s", dir);
    return 0;
}
