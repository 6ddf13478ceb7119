#include "skills/catalog.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/json.h"
#include "skills/scan.h"
#include "skills/skillmd.h"

#define SKILLMD_MAX (1u << 20)

const char *sbx_skill_source_name(enum sbx_skill_source s)
{
    return s == SBX_SKILL_SHARED ? "shared" : s == SBX_SKILL_MAPPED ? "mapped" : "builtin";
}

const char *sbx_skill_trust_level(enum sbx_skill_source s)
{
    return s == SBX_SKILL_SHARED ? "trusted" : s == SBX_SKILL_MAPPED ? "community" : "builtin";
}

bool sbx_skill_name_ok(const char *s, size_t len)
{
    if (!s || len == 0 || len > 64 || strlen(s) != len || s[0] == '.' || s[0] == '-')
        return false;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
            return false;
    return true;
}

int sbx_version_cmp(const char *a, const char *b)
{
    const char *p = a, *q = b;
    while (*p && *q) {
        if (isdigit((unsigned char)*p) && isdigit((unsigned char)*q)) {
            while (*p == '0' && isdigit((unsigned char)p[1]))
                p++;
            while (*q == '0' && isdigit((unsigned char)q[1]))
                q++;
            size_t np = 0, nq = 0;
            while (isdigit((unsigned char)p[np]))
                np++;
            while (isdigit((unsigned char)q[nq]))
                nq++;
            if (np != nq)
                return np < nq ? -1 : 1;
            int c = memcmp(p, q, np);
            if (c)
                return c < 0 ? -1 : 1;
            p += np, q += nq;
            continue;
        }
        int cp = tolower((unsigned char)*p), cq = tolower((unsigned char)*q);
        if (cp != cq)
            return cp < cq ? -1 : 1;
        p++, q++;
    }
    if (*p || *q)
        return *p ? 1 : -1;
    return strcmp(a, b) < 0 ? -1 : strcmp(a, b) > 0;
}

static int cmp_versions(const void *x, const void *y)
{
    return sbx_version_cmp(*(char *const *)x, *(char *const *)y);
}

static int cmp_str(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* A small regular file's text (not following symlinks), or NULL. */
static char *read_small(int dirfd, const char *name, size_t max, size_t *len)
{
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return NULL;
    struct stat st;
    char *buf = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size <= max &&
        (buf = malloc((size_t)st.st_size + 1))) {
        ssize_t n = read(fd, buf, (size_t)st.st_size);
        if (n < 0) {
            free(buf);
            buf = NULL;
        } else {
            buf[n] = '\0';
            *len = (size_t)n;
        }
    }
    close(fd);
    return buf;
}

/* Actions: the basenames in scripts/ with .sh, .js, .py or no extension,
 * sorted, each once; scripts maps each to its file (.sh before .js before
 * .py before none, as the original). */
static void find_actions(int dirfd, json_t *ver)
{
    json_t *actions = json_array(), *scripts = json_object();
    json_object_set_new(ver, "actions", actions);
    json_object_set_new(ver, "scripts", scripts);
    int fd = openat(dirfd, "scripts", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    static const char *const exts[] = {".sh", ".js", ".py", ""};
    char *names[256];
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < SBX_ARRAY_LEN(names)) {
        struct stat st;
        if (de->d_name[0] == '.' || fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            !S_ISREG(st.st_mode))
            continue;
        char *dot = strrchr(de->d_name, '.');
        size_t base = dot ? (size_t)(dot - de->d_name) : strlen(de->d_name);
        int rank = 3;
        if (dot) {
            rank = -1;
            for (int e = 0; e < 3; e++)
                if (strcmp(dot, exts[e]) == 0)
                    rank = e;
        }
        if (rank < 0 || base == 0)
            continue;
        char *action = strndup(de->d_name, base);
        if (!action || !sbx_skill_name_ok(action, base)) {
            free(action);
            continue;
        }
        json_t *have = json_object_get(scripts, action);
        if (!have) {
            names[n++] = action;
        } else {
            /* keep the better-ranked file */
            const char *h = json_string_value(have), *hd = strrchr(h, '.');
            int hr = 3;
            for (int e = 0; hd && e < 3; e++)
                if (strcmp(hd, exts[e]) == 0)
                    hr = e;
            if (rank >= hr) {
                free(action);
                continue;
            }
        }
        json_object_set_new(scripts, action, json_string(de->d_name));
        if (have)
            free(action);
    }
    closedir(d);
    qsort(names, n, sizeof(names[0]), cmp_str);
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(actions, json_string(names[i]));
        free(names[i]);
    }
}

/* One flat skill or one version: SKILL.md, actions, the guard scan. */
static json_t *scan_version(int dirfd, const char *dir, const char *name, uint64_t max_bytes)
{
    json_t *ver = json_pack("{s:s, s:s}", "name", name, "dir", dir);
    find_actions(dirfd, ver);
    struct sbx_scan_result r;
    sbx_skill_scan(dirfd, max_bytes, &r);
    json_object_set_new(ver, "scanVerdict", json_string(sbx_scan_verdict_name(r.verdict)));
    /* a file name need not be UTF-8: the reason is made valid text */
    const char *why = r.verdict == SBX_SCAN_DANGEROUS ? r.reason : "";
    json_object_set_new(ver, "blockedReason", sbx_json_text(why, strlen(why)));
    if (r.verdict == SBX_SCAN_CAUTION)
        json_object_set_new(ver, "caution", sbx_json_text(r.reason, strlen(r.reason)));
    size_t len = 0;
    static const char missing[] = "SKILL.md: missing, unreadable or over 1 MiB";
    char *md = read_small(dirfd, "SKILL.md", SKILLMD_MAX, &len);
    sbx_err e = {0};
    json_t *parsed = md ? sbx_skillmd_parse(md, len, &e) : NULL;
    if (parsed)
        json_object_set_new(ver, "md", parsed);
    else
        json_object_set_new(ver, "mdError",
                            sbx_json_text(md ? e.msg : missing, strlen(md ? e.msg : missing)));
    free(md);
    return ver;
}

static void left_out(json_t *out, enum sbx_skill_source src, const char *name, const char *why)
{
    json_array_append_new(json_object_get(out, "leftOut"),
                          json_pack("{s:s, s:s, s:s}", "source", sbx_skill_source_name(src), "name",
                                    name, "reason", why));
}

static void scan_skill(json_t *out, const struct sbx_catalog_root *root, int rootfd,
                       const char *name, uint64_t max_bytes)
{
    char dir[4096], vdir[4200];
    snprintf(dir, sizeof(dir), "%s/%s", root->path, name);
    int fd = openat(rootfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return left_out(out, root->source, name, "not a directory (or a symlink)");
    json_t *sk = json_pack("{s:s, s:s, s:s, s:s, s:n, s:b, s:[]}", "name", name, "source",
                           sbx_skill_source_name(root->source), "trustLevel",
                           sbx_skill_trust_level(root->source), "rootDir", dir, "current", "flat",
                           0, "versions");
    json_t *versions = json_object_get(sk, "versions");
    struct stat st;
    if (fstatat(fd, "SKILL.md", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
        json_object_set_new(sk, "flat", json_true());
        json_array_append_new(versions, scan_version(fd, dir, "", max_bytes));
    } else {
        int vfd = openat(fd, "versions", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *d = vfd >= 0 ? fdopendir(vfd) : NULL;
        if (!d) {
            if (vfd >= 0)
                close(vfd);
            close(fd);
            json_decref(sk);
            return left_out(out, root->source, name, "no SKILL.md and no versions/");
        }
        char *names[256];
        size_t n = 0;
        struct dirent *de;
        while ((de = readdir(d)) && n < SBX_ARRAY_LEN(names)) {
            if (de->d_name[0] == '.')
                continue;
            if (!sbx_skill_name_ok(de->d_name, strlen(de->d_name))) {
                char why[128];
                snprintf(why, sizeof(why), "version with an unsafe name left out");
                left_out(out, root->source, name, why);
                continue;
            }
            if (fstatat(vfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
                continue;
            names[n++] = strdup(de->d_name);
            if (!names[n - 1])
                n--;
        }
        qsort(names, n, sizeof(names[0]), cmp_versions);
        for (size_t i = 0; i < n; i++) {
            int one = openat(vfd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (one >= 0) {
                if (fstatat(one, "SKILL.md", &st, AT_SYMLINK_NOFOLLOW) == 0) {
                    snprintf(vdir, sizeof(vdir), "%s/versions/%s", dir, names[i]);
                    json_array_append_new(versions, scan_version(one, vdir, names[i], max_bytes));
                }
                close(one);
            }
            free(names[i]);
        }
        closedir(d);
        size_t len;
        char *cur = read_small(fd, "current", 256, &len);
        if (cur) {
            size_t a = 0, b = len;
            while (a < b && isspace((unsigned char)cur[a]))
                a++;
            while (b > a && isspace((unsigned char)cur[b - 1]))
                b--;
            json_object_set_new(sk, "current", json_stringn(cur + a, b - a));
            free(cur);
        }
    }
    close(fd);
    json_array_append_new(json_object_get(out, "skills"), sk);
}

json_t *sbx_catalog_scan(const struct sbx_catalog_root *roots, size_t n, uint64_t max_bytes)
{
    json_t *out = json_pack("{s:[], s:[]}", "skills", "leftOut");
    for (size_t i = 0; out && i < n; i++) {
        if (!roots[i].path || !roots[i].path[0])
            continue;
        int rootfd = open(roots[i].path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = rootfd >= 0 ? fdopendir(dup(rootfd)) : NULL;
        if (!d) {
            if (rootfd >= 0)
                close(rootfd);
            continue; /* a root that does not exist has no skills */
        }
        char *names[4096];
        size_t k = 0;
        struct dirent *de;
        while ((de = readdir(d)) && k < SBX_ARRAY_LEN(names)) {
            if (de->d_name[0] == '.')
                continue;
            if (!sbx_skill_name_ok(de->d_name, strlen(de->d_name))) {
                left_out(out, roots[i].source, "?", "a skill directory with an unsafe name");
                continue;
            }
            if ((names[k] = strdup(de->d_name)))
                k++;
        }
        closedir(d);
        qsort(names, k, sizeof(names[0]), cmp_str);
        for (size_t j = 0; j < k; j++) {
            scan_skill(out, &roots[i], rootfd, names[j], max_bytes);
            free(names[j]);
        }
        close(rootfd);
    }
    return out;
}

int sbx_catalog_scan_start(const struct sbx_catalog_root *roots, size_t n, uint64_t max_bytes,
                           pid_t *pid_out, int *pidfd, int *out_fd, sbx_err *err)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return sbx_err_set(err, errno, "skills scan: pipe");
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        return sbx_err_set(err, e, "skills scan: fork");
    }
    if (pid == 0) {
        /* The helper: nothing of the daemon's loop runs here. */
        signal(SIGPIPE, SIG_DFL);
        close(p[0]);
        json_t *out = sbx_catalog_scan(roots, n, max_bytes);
        char *text = out ? json_dumps(out, JSON_COMPACT) : NULL;
        size_t len = text ? strlen(text) : 0;
        for (size_t done = 0; done < len;) {
            ssize_t w = write(p[1], text + done, len - done);
            if (w <= 0)
                _exit(1);
            done += (size_t)w;
        }
        _exit(text ? 0 : 1);
    }
    close(p[1]);
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0) {
        int e = errno;
        kill(pid, SIGKILL);
        close(p[0]);
        return sbx_err_set(err, e, "skills scan: pidfd_open");
    }
    *pid_out = pid;
    *pidfd = fd;
    *out_fd = p[0];
    return 0;
}
