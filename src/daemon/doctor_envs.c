/* sandboxd doctor --config FILE: the environments of that configuration
 * with a root of their own: each image's digest and whether the daemon's
 * cache (<state>/images/<sha256>) holds it unpacked, each rootfs, the
 * seccomp tables compiled (an unknown syscall is already a load error),
 * the mounts and their roots. */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/cmd.h"
#include "daemon/config.h"
#include "daemon/doctor_envs.h"
#include "daemon/image.h"

extern char **environ;

static json_t *env_json(const struct sbx_config *c, const struct sbx_environment *env)
{
    json_t *o = json_pack("{s:s, s:b, s:i}", "name", env->name, "readOnlyRootfs",
                          !env->writable_root, "mounts", (int)env->n_mounts);
    if (env->rootfs)
        json_object_set_new(o, "rootfs", json_string(env->rootfs));
    if (env->image) {
        char digest[SBX_IMAGE_DIGEST_MAX], dir[PATH_MAX];
        sbx_err e = {0};
        struct stat st;
        json_object_set_new(o, "image", json_string(env->image));
        if (sbx_image_digest(env->image, digest, &e) < 0) {
            json_object_set_new(o, "imageError", json_string(e.msg));
        } else {
            snprintf(dir, sizeof(dir), "%s/images/%s", c->state_dir, digest + 7);
            json_object_set_new(o, "digest", json_string(digest));
            json_object_set_new(o, "unpacked",
                                json_boolean(lstat(dir, &st) == 0 && S_ISDIR(st.st_mode)));
        }
    }
    if (env->seccomp_table) {
        sbx_err e = {0};
        int fd = sbx_seccomp_table_compile_fd(env->seccomp_table, &e);
        json_object_set_new(o, "seccompTable",
                            fd >= 0 ? json_string("compiles, stacked on default")
                                    : json_string(e.msg));
        if (fd >= 0)
            close(fd);
    }
    json_t *m = json_array();
    for (size_t i = 0; i < env->n_mounts; i++)
        json_array_append_new(m, json_pack("{s:s, s:s, s:s, s:b}", "root", env->mounts[i].root,
                                           "source", env->mounts[i].source, "target",
                                           env->mounts[i].target, "writable",
                                           env->mounts[i].writable));
    json_object_set_new(o, "mountList", m);
    return o;
}

json_t *sbx_doctor_environments(const char *config_path, sbx_err *err)
{
    struct sbx_config c;
    char *argv[] = {"doctor", "--config", (char *)config_path, NULL};
    if (sbx_config_load(&c, 3, argv, environ, err) < 0)
        return NULL;
    json_t *a = json_array();
    for (size_t i = 0; i < c.n_environments; i++) {
        const struct sbx_environment *env = &c.environments[i];
        if (env->image || env->rootfs || env->writable_root || env->n_mounts || env->seccomp_table)
            json_array_append_new(a, env_json(&c, env));
    }
    sbx_config_free(&c);
    return a;
}

void sbx_doctor_environments_text(const json_t *envs)
{
    size_t i;
    json_t *e;
    printf("\nEnvironments with a root of their own (--config)\n");
    if (!json_array_size(envs))
        printf("  none\n");
    json_array_foreach(envs, i, e)
    {
        const char *img = json_string_value(json_object_get(e, "image"));
        const char *root = json_string_value(json_object_get(e, "rootfs"));
        const char *d = json_string_value(json_object_get(e, "digest"));
        const char *ie = json_string_value(json_object_get(e, "imageError"));
        const char *sc = json_string_value(json_object_get(e, "seccompTable"));
        printf("  %s:\n", json_string_value(json_object_get(e, "name")));
        if (img)
            printf("    image %s: %s%s\n", img, d ? d : ie,
                   !d                                             ? ""
                   : json_is_true(json_object_get(e, "unpacked")) ? " (unpacked)"
                                                                  : " (not unpacked yet)");
        if (root)
            printf("    rootfs %s\n", root);
        printf("    root %s\n", json_is_true(json_object_get(e, "readOnlyRootfs"))
                                    ? "read-only"
                                    : "writable (tmpfs overlay)");
        if (sc)
            printf("    seccomp table: %s\n", sc);
        size_t j;
        json_t *m;
        json_array_foreach(json_object_get(e, "mountList"), j, m)
            printf("    mount %s/%s -> %s (%s)\n", json_string_value(json_object_get(m, "root")),
                   json_string_value(json_object_get(m, "source")),
                   json_string_value(json_object_get(m, "target")),
                   json_is_true(json_object_get(m, "writable")) ? "writable" : "read-only");
    }
}
