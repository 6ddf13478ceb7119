#include "workspace/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

/* User paths: symlinks are followed, but only inside the workspace; magic
 * links (/proc/self/root…) and mount crossings are refused. */
#define RESOLVE_USER (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)
/* One component below a directory we already hold: no symlink at all. */
#define RESOLVE_STEP                                                                               \
    (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)

#define DIR_MODE 0755       /* parents an upload creates */
#define FILE_MODE 0644      /* uploaded files */
#define RM_DEPTH_MAX 64     /* directory fds a delete holds at once */
#define RM_PASSES_MAX 65536 /* read passes over one directory */
#define RM_BUF 4096

/* openat2, retried on EAGAIN (the kernel's answer when a concurrent rename
 * might have let ".." resolution race) and EINTR. O_CLOEXEC always. */
static int sys_openat2(int dirfd, const char *path, uint64_t flags, uint64_t mode, uint64_t resolve)
{
    struct open_how how = {.flags = flags | O_CLOEXEC, .mode = mode, .resolve = resolve};
    for (int tries = 0; tries < 32; tries++) {
        int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
        if (fd >= 0 || (errno != EAGAIN && errno != EINTR))
            return fd;
    }
    return -1;
}

/* A user path resolved inside the workspace; "" is the workspace itself. */
static int ws_open(int ws_fd, const char *rel, int flags)
{
    return sys_openat2(ws_fd, rel[0] ? rel : ".", (uint64_t)flags, 0, RESOLVE_USER);
}

int sbx_ws_openat(int ws_fd, const char *rel, int flags, bool no_symlinks)
{
    return sys_openat2(ws_fd, rel[0] ? rel : ".", (uint64_t)flags, 0,
                       RESOLVE_USER | (no_symlinks ? RESOLVE_NO_SYMLINKS : 0));
}

/* "/rel" quoted for a message: the path as the user sees it. */
static const char *shown(const char *rel, char *buf, size_t len)
{
    char full[SBX_WS_PATH_MAX + 2];
    int n = snprintf(full, sizeof(full), "/%s", rel);
    return sbx_ws_quote(full, (size_t)n < sizeof(full) ? (size_t)n : sizeof(full) - 1, buf, len);
}

static int fail_path(sbx_err *err, int errnum, const char *what, const char *rel)
{
    char q[128];
    return sbx_err_set(err, errnum, "%s \"%s\"", what, shown(rel, q, sizeof(q)));
}

static int fail_openat2(sbx_err *err, const char *what, const char *rel)
{
    if (errno == ENOSYS)
        return sbx_err_set(err, ENOSYS, "%s: openat2 is not available (Linux 5.6 or later)", what);
    return fail_path(err, errno, what, rel);
}

/* ---- workspace creation ---- */

/* One directory below dirfd: created when missing (mode, and owned by
 * uid:gid when own), opened without following any symlink. */
static int ensure_step(int dirfd, const char *name, mode_t mode, bool own, uid_t uid, gid_t gid,
                       sbx_err *err)
{
    bool created = mkdirat(dirfd, name, mode) == 0;
    if (!created && errno != EEXIST)
        return sbx_err_set(err, errno, "workspace: mkdir \"%s\"", name);
    cleanup_fd int fd = sys_openat2(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0,
                                    RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
    if (fd < 0) {
        /* O_DIRECTORY is checked before O_NOFOLLOW: a symlink says ENOTDIR. */
        struct stat st;
        if (errno == ELOOP ||
            (errno == ENOTDIR && fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
             S_ISLNK(st.st_mode)))
            return sbx_err_set(err, ELOOP, "workspace: \"%s\" is a symlink", name);
        return sbx_err_set(err, errno, "workspace: open \"%s\"", name);
    }
    /* mkdir's mode went through the umask: make it exact. */
    if (created && fchmod(fd, mode) < 0)
        return sbx_err_set(err, errno, "workspace: chmod \"%s\"", name);
    if (own) {
        struct stat st;
        if (fstat(fd, &st) < 0)
            return sbx_err_set(err, errno, "workspace: stat \"%s\"", name);
        if ((st.st_uid != uid || st.st_gid != gid) && fchown(fd, uid, gid) < 0)
            return sbx_err_set(err, errno, "workspace: chown \"%s\" to %u:%u", name, (unsigned)uid,
                               (unsigned)gid);
    }
    return sbx_steal_fd(&fd);
}

int sbx_ws_ensure(const char *root, const char *tenant, const char *key, const char *id, uid_t uid,
                  gid_t gid, int *ws_fd, sbx_err *err)
{
    /* Validates every segment (and root) the same way the path is derived. */
    cleanup_free char *dir = sbx_ws_dir(root, tenant, key, id, err);
    if (!dir)
        return -1;
    const char *steps[3];
    size_t n = 0;
    steps[n++] = tenant;
    if (key && key[0])
        steps[n++] = key;
    steps[n++] = id;

    /* The root is the operator's, trusted: opened as configured. */
    cleanup_fd int cur = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (cur < 0)
        return sbx_err_set(err, errno, "workspace root \"%s\"", root);
    for (size_t i = 0; i < n; i++) {
        int next = ensure_step(cur, steps[i], 0750, false, uid, gid, err);
        if (next < 0)
            return -1;
        close(cur);
        cur = next;
    }
    cleanup_fd int work = ensure_step(cur, "work", 0700, true, uid, gid, err);
    if (work < 0)
        return -1;
    int fd = openat(work, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return sbx_err_set(err, errno, "workspace \"%s\"", dir);
    *ws_fd = fd;
    return 0;
}

/* ---- stat and list ---- */

const char *sbx_ws_type_name(enum sbx_ws_type type)
{
    switch (type) {
    case SBX_WS_FILE:
        return "file";
    case SBX_WS_DIR:
        return "dir";
    case SBX_WS_SYMLINK:
        return "symlink";
    case SBX_WS_OTHER:
        break;
    }
    return "other";
}

static void fill_stat(const struct stat *st, struct sbx_ws_stat *out)
{
    out->type = S_ISREG(st->st_mode)   ? SBX_WS_FILE
                : S_ISDIR(st->st_mode) ? SBX_WS_DIR
                : S_ISLNK(st->st_mode) ? SBX_WS_SYMLINK
                                       : SBX_WS_OTHER;
    out->size = st->st_size > 0 ? (uint64_t)st->st_size : 0;
    out->mode = st->st_mode & 07777;
    out->mtime = st->st_mtim;
}

int sbx_ws_stat(int ws_fd, const struct sbx_ws_path *p, bool follow, struct sbx_ws_stat *st,
                sbx_err *err)
{
    int flags = O_PATH | (follow ? 0 : O_NOFOLLOW) | (p->dir ? O_DIRECTORY : 0);
    cleanup_fd int fd = ws_open(ws_fd, p->rel, flags);
    if (fd < 0)
        return fail_openat2(err, "stat", p->rel);
    struct stat s;
    if (fstat(fd, &s) < 0)
        return fail_path(err, errno, "stat", p->rel);
    fill_stat(&s, st);
    return 0;
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const struct sbx_ws_entry *)a)->name, ((const struct sbx_ws_entry *)b)->name);
}

void sbx_ws_listing_free(struct sbx_ws_listing *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->entries[i].name);
    free(l->entries);
    l->entries = NULL;
    l->n = 0;
    l->truncated = false;
}

int sbx_ws_list(int ws_fd, const struct sbx_ws_path *p, size_t max, struct sbx_ws_listing *out,
                sbx_err *err)
{
    if (max == 0)
        max = SBX_WS_LIST_MAX;
    cleanup_fd int fd = ws_open(ws_fd, p->rel, O_RDONLY | O_DIRECTORY | O_NONBLOCK);
    if (fd < 0)
        return fail_openat2(err, "list", p->rel);
    DIR *d = fdopendir(fd);
    if (!d)
        return fail_path(err, errno, "list", p->rel);
    fd = -1; /* the DIR owns it now */

    struct sbx_ws_listing l = {0};
    size_t cap = 0;
    int rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            if (errno)
                rc = fail_path(err, errno, "list", p->rel);
            break;
        }
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (l.n == max) {
            l.truncated = true;
            break;
        }
        struct stat s;
        if (fstatat(dirfd(d), e->d_name, &s, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno == ENOENT) /* removed while we read */
                continue;
            rc = fail_path(err, errno, "list", p->rel);
            break;
        }
        if (l.n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            struct sbx_ws_entry *v = reallocarray(l.entries, ncap, sizeof(*v));
            if (!v) {
                rc = sbx_err_set(err, ENOMEM, "list");
                break;
            }
            l.entries = v;
            cap = ncap;
        }
        char *name = strdup(e->d_name);
        if (!name) {
            rc = sbx_err_set(err, ENOMEM, "list");
            break;
        }
        l.entries[l.n].name = name;
        fill_stat(&s, &l.entries[l.n].st);
        l.n++;
    }
    closedir(d);
    if (rc < 0) {
        sbx_ws_listing_free(&l);
        return -1;
    }
    if (l.n > 1)
        qsort(l.entries, l.n, sizeof(*l.entries), entry_cmp);
    *out = l;
    return 0;
}

/* ---- download ---- */

int sbx_ws_download_open(int ws_fd, const struct sbx_ws_path *p, struct sbx_ws_download *dl,
                         sbx_err *err)
{
    dl->fd = -1;
    /* O_NONBLOCK: a FIFO opens at once instead of waiting for a writer, and
     * is then refused below. O_NOCTTY: never adopt a terminal. */
    cleanup_fd int fd = ws_open(ws_fd, p->rel, O_RDONLY | O_NONBLOCK | O_NOCTTY);
    if (fd < 0 && errno == ENXIO) /* a socket */
        return fail_path(err, EINVAL, "not a regular file:", p->rel);
    if (fd < 0)
        return fail_openat2(err, "open", p->rel);
    struct stat s;
    if (fstat(fd, &s) < 0)
        return fail_path(err, errno, "open", p->rel);
    if (S_ISDIR(s.st_mode))
        return fail_path(err, EISDIR, "open", p->rel);
    if (!S_ISREG(s.st_mode))
        return fail_path(err, EINVAL, "not a regular file:", p->rel);
    if (p->dir)
        return fail_path(err, ENOTDIR, "open", p->rel);
    fill_stat(&s, &dl->st);
    dl->offset = 0;
    dl->fd = sbx_steal_fd(&fd);
    return 0;
}

ssize_t sbx_ws_download_read(struct sbx_ws_download *dl, void *buf, size_t len, sbx_err *err)
{
    if (dl->fd < 0)
        return sbx_err_set(err, EBADF, "download: not open");
    if (dl->offset >= dl->st.size || len == 0)
        return 0;
    uint64_t left = dl->st.size - dl->offset;
    size_t want = left < len ? (size_t)left : len;
    ssize_t n;
    do
        n = pread(dl->fd, buf, want, (off_t)dl->offset);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return sbx_err_set(err, errno, "download: read");
    if (n == 0)
        return sbx_err_set(err, EIO, "download: the file shrank to %llu bytes while being read",
                           (unsigned long long)dl->offset);
    dl->offset += (uint64_t)n;
    return n;
}

void sbx_ws_download_close(struct sbx_ws_download *dl)
{
    if (dl->fd >= 0)
        close(dl->fd);
    dl->fd = -1;
}

/* ---- upload ---- */

/* The parent directory of p ("" for a top-level name), created step by step
 * when missing. Each prefix is resolved from the workspace, exactly as a full
 * path would be; a missing component is made with mkdirat in the directory
 * its prefix resolved to, then opened without following anything. */
static int open_parent(int ws_fd, const struct sbx_ws_path *p, uid_t uid, gid_t gid,
                       struct sbx_ws_upload *up, sbx_err *err)
{
    const char *base = sbx_ws_path_base(p);
    size_t plen = base > p->rel ? (size_t)(base - p->rel) - 1 : 0;
    char buf[SBX_WS_PATH_MAX + 1];
    memcpy(buf, p->rel, plen);
    buf[plen] = '\0';

    int fd = ws_open(ws_fd, buf, O_PATH | O_DIRECTORY);
    if (fd >= 0)
        return fd;
    if (errno != ENOENT)
        return fail_openat2(err, "upload: parent", buf);

    cleanup_fd int cur = ws_open(ws_fd, "", O_PATH | O_DIRECTORY);
    if (cur < 0)
        return fail_openat2(err, "upload: workspace", "");
    for (size_t i = 0; i < plen;) {
        size_t j = i;
        while (j < plen && buf[j] != '/')
            j++;
        buf[j] = '\0'; /* buf is now the prefix, buf + i its last component */
        int next = ws_open(ws_fd, buf, O_PATH | O_DIRECTORY);
        if (next < 0 && errno == ENOENT) {
            if (mkdirat(cur, buf + i, DIR_MODE) == 0) {
                /* The first directory we made: remember where, for abort. */
                if (up->made_fd < 0) {
                    up->made_fd = fcntl(cur, F_DUPFD_CLOEXEC, 0);
                    memcpy(up->made, p->rel + i, plen - i);
                    up->made[plen - i] = '\0';
                }
                next =
                    sys_openat2(cur, buf + i, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, RESOLVE_STEP);
                if (next >= 0 && (fchown(next, uid, gid) < 0 || fchmod(next, DIR_MODE) < 0)) {
                    int saved = errno;
                    close(next);
                    errno = saved;
                    return fail_path(err, errno, "upload: chown/chmod", buf);
                }
            } else if (errno == EEXIST) { /* made meanwhile, or a dangling symlink */
                next = ws_open(ws_fd, buf, O_PATH | O_DIRECTORY);
            }
        }
        if (next < 0)
            return fail_openat2(err, "upload: create parent", buf);
        if (j < plen)
            buf[j] = '/';
        close(cur);
        cur = next;
        i = j + 1;
    }
    return sbx_steal_fd(&cur);
}

/* A temporary name nobody can predict, so a task cannot squat it. */
static void tmp_name(char *out, size_t len, unsigned attempt)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        r = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^
            attempt;
    }
    snprintf(out, len, ".sbx-upload-%016llx", (unsigned long long)r);
}

int sbx_ws_upload_begin(int ws_fd, const struct sbx_ws_path *p, uid_t uid, gid_t gid,
                        struct sbx_ws_upload *up, sbx_err *err)
{
    *up = (struct sbx_ws_upload){.active = false, .fd = -1, .dir_fd = -1, .made_fd = -1};
    if (p->len == 0 || p->dir)
        return fail_path(err, EISDIR, "upload", p->rel);
    up->dir_fd = open_parent(ws_fd, p, uid, gid, up, err);
    /* From here on, abort undoes whatever was made. */
    up->active = true;
    if (up->dir_fd < 0)
        goto fail;
    const char *name = sbx_ws_path_base(p);
    memcpy(up->name, name, strlen(name) + 1);
    /* Advisory (rename says it again at commit): fail before the body comes. */
    struct stat s;
    if (fstatat(up->dir_fd, name, &s, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(s.st_mode)) {
        fail_path(err, EISDIR, "upload", p->rel);
        goto fail;
    }
    for (unsigned attempt = 0; up->fd < 0; attempt++) {
        tmp_name(up->tmp, sizeof(up->tmp), attempt);
        up->fd = sys_openat2(up->dir_fd, up->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600,
                             RESOLVE_STEP);
        if (up->fd < 0 && (errno != EEXIST || attempt >= 8)) {
            up->tmp[0] = '\0';
            fail_path(err, errno, "upload: create temporary file for", p->rel);
            goto fail;
        }
    }
    /* chown before chmod: chown clears set-id bits, and we want exactly FILE_MODE. */
    if (fchown(up->fd, uid, gid) < 0 || fchmod(up->fd, FILE_MODE) < 0) {
        fail_path(err, errno, "upload: chown/chmod", p->rel);
        goto fail;
    }
    return 0;
fail:
    sbx_ws_upload_abort(up);
    return -1;
}

int sbx_ws_upload_write(struct sbx_ws_upload *up, const void *buf, size_t len, sbx_err *err)
{
    if (!up->active)
        return sbx_err_set(err, EBADF, "upload: not active");
    const char *b = buf;
    while (len > 0) {
        ssize_t n = write(up->fd, b, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return sbx_err_set(err, errno, "upload \"%s\": write after %llu bytes", up->name,
                               (unsigned long long)up->size);
        }
        b += n;
        len -= (size_t)n;
        up->size += (uint64_t)n;
    }
    return 0;
}

int sbx_ws_upload_commit(struct sbx_ws_upload *up, sbx_err *err)
{
    if (!up->active)
        return sbx_err_set(err, EBADF, "upload: not active");
    /* close reports late write errors on some filesystems (NFS, quotas). */
    int rc = close(up->fd);
    up->fd = -1;
    if (rc < 0 && errno != EINTR) {
        int saved = errno;
        sbx_ws_upload_abort(up);
        return sbx_err_set(err, saved, "upload \"%s\": close", up->name);
    }
    /* rename never follows a symlink at the target: it replaces it. */
    if (renameat(up->dir_fd, up->tmp, up->dir_fd, up->name) < 0) {
        int saved = errno;
        sbx_ws_upload_abort(up);
        return sbx_err_set(err, saved, "upload \"%s\": rename into place", up->name);
    }
    close(up->dir_fd);
    up->dir_fd = -1;
    if (up->made_fd >= 0)
        close(up->made_fd);
    up->made_fd = -1;
    up->active = false;
    return 0;
}

/* Remove the chain of parents begin made, deepest first, each through a
 * directory fd opened below made_fd without following anything; stop at the
 * first that is no longer empty (a task put something there meanwhile). */
static void remove_made(struct sbx_ws_upload *up)
{
    size_t len = strlen(up->made);
    while (len > 0) {
        up->made[len] = '\0';
        char *slash = strrchr(up->made, '/');
        const char *last = slash ? slash + 1 : up->made;
        int dfd = up->made_fd;
        if (slash) {
            *slash = '\0';
            dfd = sys_openat2(up->made_fd, up->made, O_PATH | O_DIRECTORY | O_NOFOLLOW, 0,
                              RESOLVE_STEP);
            *slash = '/';
            if (dfd < 0)
                return;
        }
        int rc = unlinkat(dfd, last, AT_REMOVEDIR);
        if (dfd != up->made_fd)
            close(dfd);
        if (rc < 0)
            return;
        len = slash ? (size_t)(slash - up->made) : 0;
    }
}

void sbx_ws_upload_abort(struct sbx_ws_upload *up)
{
    if (!up->active)
        return;
    int saved = errno;
    if (up->fd >= 0)
        close(up->fd);
    if (up->dir_fd >= 0) {
        if (up->tmp[0])
            unlinkat(up->dir_fd, up->tmp, 0);
        close(up->dir_fd);
    }
    if (up->made_fd >= 0) {
        remove_made(up);
        close(up->made_fd);
    }
    up->fd = -1;
    up->dir_fd = -1;
    up->made_fd = -1;
    up->active = false;
    errno = saved;
}

/* ---- delete ---- */

struct rm_ctx {
    int top_fd;      /* the directory being deleted */
    unsigned moved;  /* names given to subtrees moved up to top_fd */
    char *buf;       /* getdents buffers, RM_BUF per level */
    const char *rel; /* the user's path, for messages */
    sbx_err *err;
};

static int rm_fail(struct rm_ctx *c, int errnum, const char *what, const char *name)
{
    char q[128], qn[64];
    return sbx_err_set(c->err, errnum, "delete \"%s\": %s \"%s\"", shown(c->rel, q, sizeof(q)),
                       what, sbx_ws_quote(name, strlen(name), qn, sizeof(qn)));
}

/* A subtree too deep to hold an fd per level is moved up to the top of the
 * tree being deleted (same filesystem, inside it) and emptied from there by a
 * later pass, so any depth is deleted with at most RM_DEPTH_MAX fds. */
static int rm_move_up(struct rm_ctx *c, int dfd, const char *name)
{
    for (int attempt = 0; attempt < 16; attempt++) {
        char to[48];
        snprintf(to, sizeof(to), ".sbx-delete-%u", c->moved++);
        if (renameat2(dfd, name, c->top_fd, to, RENAME_NOREPLACE) == 0)
            return 0;
        if (errno == EINVAL) { /* a filesystem without RENAME_NOREPLACE */
            struct stat st;
            if (fstatat(c->top_fd, to, &st, AT_SYMLINK_NOFOLLOW) == 0)
                continue;
            if (renameat(dfd, name, c->top_fd, to) == 0)
                return 0;
        }
        if (errno != EEXIST)
            return rm_fail(c, errno, "move up", name);
    }
    return rm_fail(c, EEXIST, "move up", name);
}

/* Empty the directory dfd, depth levels below top_fd. Names come from
 * getdents64 on dfd and are single components: unlinkat never follows a
 * symlink, and subdirectories are entered with RESOLVE_STEP (no symlink, no
 * mount crossing). Passes repeat until one finds nothing left. */
static int rm_contents(struct rm_ctx *c, int dfd, unsigned depth)
{
    char *buf = c->buf + (size_t)depth * RM_BUF;
    /* Bounded, so a task adding entries as fast as we remove them cannot keep us here. */
    for (unsigned pass = 0;; pass++) {
        if (pass >= RM_PASSES_MAX)
            return rm_fail(c, EBUSY, "keeps changing:", ".");
        if (lseek(dfd, 0, SEEK_SET) < 0)
            return rm_fail(c, errno, "rewind", ".");
        bool saw = false;
        for (;;) {
            ssize_t n = getdents64(dfd, buf, RM_BUF);
            if (n < 0)
                return rm_fail(c, errno, "read directory", ".");
            if (n == 0)
                break;
            for (ssize_t off = 0; off < n;) {
                struct dirent64 *e = (struct dirent64 *)(buf + off);
                off += e->d_reclen;
                const char *name = e->d_name;
                if (!strcmp(name, ".") || !strcmp(name, ".."))
                    continue;
                saw = true;
                if (e->d_type != DT_DIR && unlinkat(dfd, name, 0) == 0)
                    continue;
                if (e->d_type != DT_DIR && errno != EISDIR) {
                    if (errno == ENOENT)
                        continue;
                    return rm_fail(c, errno, "unlink", name);
                }
                if (depth + 1 >= RM_DEPTH_MAX) {
                    if (rm_move_up(c, dfd, name) < 0)
                        return -1;
                    continue;
                }
                int sub = sys_openat2(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK,
                                      0, RESOLVE_STEP);
                if (sub < 0) {
                    if (errno == ENOENT)
                        continue;
                    /* Swapped for a non-directory since: the next pass unlinks it. */
                    if (errno == ENOTDIR || errno == ELOOP)
                        continue;
                    return rm_fail(c, errno, "open", name);
                }
                int rc = rm_contents(c, sub, depth + 1);
                close(sub);
                if (rc < 0)
                    return -1;
                if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                    return rm_fail(c, errno, "rmdir", name);
            }
        }
        if (!saw)
            return 0;
    }
}

/* The existing directory holding p (O_PATH, resolved as a user path), and
 * p's last component in *name; -1 with errno. */
static int open_dir_of(int ws_fd, const struct sbx_ws_path *p, const char **name)
{
    *name = sbx_ws_path_base(p);
    char parent[SBX_WS_PATH_MAX + 1];
    size_t plen = *name > p->rel ? (size_t)(*name - p->rel) - 1 : 0;
    memcpy(parent, p->rel, plen);
    parent[plen] = '\0';
    return ws_open(ws_fd, parent, O_PATH | O_DIRECTORY);
}

int sbx_ws_delete(int ws_fd, const struct sbx_ws_path *p, sbx_err *err)
{
    if (p->len == 0)
        return sbx_err_set(err, EINVAL, "delete \"/\": the workspace root cannot be deleted");
    const char *name;
    cleanup_fd int dir_fd = open_dir_of(ws_fd, p, &name);
    if (dir_fd < 0)
        return fail_openat2(err, "delete", p->rel);

    struct stat s;
    if (fstatat(dir_fd, name, &s, AT_SYMLINK_NOFOLLOW) < 0)
        return fail_path(err, errno, "delete", p->rel);
    if (p->dir && !S_ISDIR(s.st_mode))
        return fail_path(err, ENOTDIR, "delete", p->rel);

    for (int attempt = 0; attempt < 8; attempt++) {
        if (unlinkat(dir_fd, name, 0) == 0)
            return 0;
        if (errno == ENOENT && attempt > 0) /* gone meanwhile */
            return 0;
        if (errno != EISDIR)
            return fail_path(err, errno, "delete", p->rel);
        cleanup_fd int top = sys_openat2(
            dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK, 0, RESOLVE_STEP);
        if (top < 0) {
            if (errno == ENOTDIR || errno == ELOOP || errno == ENOENT)
                continue; /* swapped meanwhile: unlink it as what it is now */
            return fail_openat2(err, "delete", p->rel);
        }
        cleanup_free char *bufs = malloc((size_t)RM_DEPTH_MAX * RM_BUF);
        if (!bufs)
            return sbx_err_set(err, ENOMEM, "delete");
        struct rm_ctx c = {.top_fd = top, .buf = bufs, .rel = p->rel, .err = err};
        if (rm_contents(&c, top, 0) < 0)
            return -1;
        if (unlinkat(dir_fd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
            return 0;
        if (errno != ENOTEMPTY)
            return fail_path(err, errno, "delete", p->rel);
        /* Something was added meanwhile: go again, a bounded number of times. */
    }
    return fail_path(err, EBUSY, "delete (the tree keeps changing)", p->rel);
}

/* ---- directories, renames, modes ---- */

/* The parent of p, created as an upload's would be; its base name in *base. */
static int parent_made(int ws_fd, const struct sbx_ws_path *p, uid_t uid, gid_t gid,
                       const char **base, sbx_err *err)
{
    struct sbx_ws_upload up = {.fd = -1, .dir_fd = -1, .made_fd = -1};
    int fd = open_parent(ws_fd, p, uid, gid, &up, err);
    if (up.made_fd >= 0)
        close(up.made_fd);
    *base = sbx_ws_path_base(p);
    return fd;
}

int sbx_ws_mkdir(int ws_fd, const struct sbx_ws_path *p, unsigned mode, uid_t uid, gid_t gid,
                 sbx_err *err)
{
    if (p->len == 0)
        return 0; /* the workspace is there */
    const char *base;
    cleanup_fd int dir = parent_made(ws_fd, p, uid, gid, &base, err);
    if (dir < 0)
        return -1;
    if (mkdirat(dir, base, DIR_MODE) < 0) {
        struct stat s;
        if (errno == EEXIST && fstatat(dir, base, &s, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISDIR(s.st_mode))
            return 0;
        return fail_path(err, errno == EEXIST ? EEXIST : errno, "mkdir", p->rel);
    }
    cleanup_fd int fd =
        sys_openat2(dir, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, RESOLVE_STEP);
    if (fd < 0 || fchown(fd, uid, gid) < 0 || fchmod(fd, mode & 07777) < 0)
        return fail_path(err, errno, "mkdir: chown/chmod", p->rel);
    return 0;
}

int sbx_ws_rename(int ws_fd, const struct sbx_ws_path *from, const struct sbx_ws_path *to,
                  uid_t uid, gid_t gid, sbx_err *err)
{
    if (from->len == 0 || to->len == 0)
        return sbx_err_set(err, EINVAL, "rename: the workspace root cannot be moved");
    const char *name, *base;
    cleanup_fd int src = open_dir_of(ws_fd, from, &name);
    if (src < 0)
        return fail_openat2(err, "rename", from->rel);
    cleanup_fd int dst = parent_made(ws_fd, to, uid, gid, &base, err);
    if (dst < 0)
        return -1;
    if (renameat(src, name, dst, base) < 0)
        return fail_path(err, errno, "rename", from->rel);
    return 0;
}

int sbx_ws_chmod(int ws_fd, const struct sbx_ws_path *p, unsigned mode, sbx_err *err)
{
    cleanup_fd int fd = ws_open(ws_fd, p->rel, O_PATH | O_NOFOLLOW);
    if (fd < 0)
        return fail_openat2(err, "chmod", p->rel);
    struct stat s;
    if (fstat(fd, &s) < 0)
        return fail_path(err, errno, "chmod", p->rel);
    if (S_ISLNK(s.st_mode))
        return fail_path(err, EINVAL, "chmod of a symlink", p->rel);
    /* An O_PATH fd takes no fchmod; its /proc link names this very inode
     * (resolved inside the workspace above), never a path looked up again. */
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    if (chmod(proc, mode & 07777) < 0)
        return fail_path(err, errno, "chmod", p->rel);
    return 0;
}
