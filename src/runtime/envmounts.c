/* An environment's mounts for one task: the source templates filled in,
 * the directories made beneath their mount root when missing (never
 * following a symlink), the binds handed to the sandbox. */
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/runtime_int.h"

/* A value put into a path: one plain segment. */
static bool segment_ok(const char *s)
{
    return s[0] && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 && !strchr(s, '/') &&
           strlen(s) <= 128;
}

/* The template with its placeholders filled in, or NULL (err set). */
static char *expand(const struct rt_task *t, const char *tmpl, sbx_err *err)
{
    const char *vars[][2] = {{"{{.TaskID}}", t->id},
                             {"{{.TenantCode}}", t->clone.tenant},
                             {"{{.CloneID}}", t->clone.id},
                             {"{{.SessionID}}", t->session}};
    char out[PATH_MAX];
    size_t n = 0;
    for (const char *p = tmpl; *p;) {
        size_t j = 0;
        while (j < SBX_ARRAY_LEN(vars) && strncmp(p, vars[j][0], strlen(vars[j][0])) != 0)
            j++;
        const char *piece = j < SBX_ARRAY_LEN(vars) ? vars[j][1] : NULL;
        size_t len = piece ? strlen(piece) : 1;
        if (piece && !segment_ok(piece)) {
            sbx_err_set(err, EINVAL, "mount source %s: '%.80s' is not a path segment", tmpl, piece);
            return NULL;
        }
        if (n + len >= sizeof(out)) {
            sbx_err_set(err, ENAMETOOLONG, "mount source %s", tmpl);
            return NULL;
        }
        memcpy(out + n, piece ? piece : p, len);
        n += len;
        p += piece ? strlen(vars[j][0]) : 1;
    }
    out[n] = '\0';
    char *s = strdup(out);
    if (!s)
        sbx_err_set(err, ENOMEM, "mount source");
    return s;
}

/* Each directory of rel beneath root, made when missing (0755; the last
 * one, when writable, given to the runner's host ids); no symlink is
 * followed and nothing leaves root. */
static int make_beneath(const char *root, const char *rel, bool writable, uid_t uid, gid_t gid,
                        sbx_err *err)
{
    int dir = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return sbx_err_set(err, errno, "mount root %s", root);
    char buf[PATH_MAX];
    snprintf(buf, sizeof(buf), "%s", rel);
    for (char *seg = buf, *next; seg && *seg; seg = next) {
        next = strchr(seg, '/');
        if (next)
            *next++ = '\0';
        struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW,
                               .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
                                          RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
        bool made = false;
        int sub = (int)syscall(SYS_openat2, dir, seg, &how, sizeof(how));
        if (sub < 0 && errno == ENOENT) {
            if (mkdirat(dir, seg, 0755) < 0 && errno != EEXIST) {
                int saved = errno;
                close(dir);
                return sbx_err_set(err, saved, "mount source %s/%s", root, rel);
            }
            made = true;
            sub = (int)syscall(SYS_openat2, dir, seg, &how, sizeof(how));
        }
        int saved = errno;
        close(dir);
        bool odd = saved == ELOOP || saved == EXDEV || saved == ENOTDIR;
        if (sub < 0)
            return sbx_err_set(err, odd ? EACCES : saved, "mount source %s/%s: %s", root, rel,
                               odd ? "a symlink, a non-directory or another filesystem on the way"
                                   : "cannot be opened");
        dir = sub;
        if (made && !next && writable && fchownat(dir, "", uid, gid, AT_EMPTY_PATH) < 0) {
            saved = errno;
            close(dir);
            return sbx_err_set(err, saved, "mount source %s/%s: chown", root, rel);
        }
    }
    close(dir);
    return 0;
}

int rt_env_mounts(struct rt_task *t, uint32_t host_base, struct sbx_mount *out, size_t room,
                  size_t *n, sbx_err *err)
{
    const struct sbx_environment *env = t->envc;
    const struct sbx_runtime_settings *set = &t->rt->settings;
    *n = 0;
    if (!env || !env->n_mounts)
        return 0;
    if (env->n_mounts > room)
        return sbx_err_set(err, E2BIG, "environment %s: %zu mounts, room for %zu", env->name,
                           env->n_mounts, room);
    for (size_t i = 0; i < env->n_mounts; i++) {
        const struct sbx_env_mount *m = &env->mounts[i];
        free(t->env_mount_src[i]);
        if (!(t->env_mount_src[i] = expand(t, m->source, err)))
            return -1;
        if (make_beneath(m->root, t->env_mount_src[i], m->writable, host_base + set->runner_uid,
                         host_base + set->runner_gid, err) < 0)
            return -1;
        out[i] = (struct sbx_mount){.host = t->env_mount_src[i],
                                    .inside = m->target,
                                    .root = m->root,
                                    .writable = m->writable};
    }
    *n = env->n_mounts;
    return 0;
}
