#include "workspace/snapstore.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "workspace/files.h"
#include "workspace/path.h"

#define DEPTH_MAX 256
#define SKILLS "skills"
#define TMP_PREFIX ".sbx-restore-"

/* ---- the store's directories ---- */

static int open_dir(int at, const char *name, bool create, sbx_err *err)
{
    if (create && mkdirat(at, name, 0700) < 0 && errno != EEXIST)
        return sbx_err_set(err, errno, "snapshot store: mkdir %s", name);
    int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return sbx_err_set(err, errno, "snapshot store: open %s", name);
    return fd;
}

void sbx_snap_store_close(struct sbx_snap_store *s)
{
    int *fds[] = {&s->tenant_fd, &s->blobs_fd, &s->clone_fd};
    for (size_t i = 0; i < SBX_ARRAY_LEN(fds); i++) {
        if (*fds[i] >= 0)
            close(*fds[i]);
        *fds[i] = -1;
    }
}

int sbx_snap_store_open(const char *dir, const char *tenant, const char *key, const char *id,
                        bool create, struct sbx_snap_store *s, sbx_err *err)
{
    *s = (struct sbx_snap_store){-1, -1, -1};
    if (create && mkdir(dir, 0700) < 0 && errno != EEXIST)
        return sbx_err_set(err, errno, "snapshot store: mkdir %s", dir);
    cleanup_fd int root = open_dir(AT_FDCWD, dir, false, err);
    if (root < 0)
        return -1;
    char clone[SBX_WS_SEGMENT_MAX * 2 + 2];
    char name[SBX_SHA256_HEX_SIZE];
    int n = snprintf(clone, sizeof(clone), "%s/%s", key ? key : "", id);
    if (sbx_sha256_hex(clone, (size_t)n, name, err) < 0)
        return -1;
    cleanup_fd int clones = -1, cdir = -1;
    if ((s->tenant_fd = open_dir(root, tenant, create, err)) < 0 ||
        (s->blobs_fd = open_dir(s->tenant_fd, "blobs", create, err)) < 0 ||
        (clones = open_dir(s->tenant_fd, "clones", create, err)) < 0 ||
        (s->clone_fd = open_dir(clones, name, create, err)) < 0 ||
        (cdir = open_dir(s->clone_fd, "manifests", create, err)) < 0) {
        sbx_snap_store_close(s);
        return -1;
    }
    return 0;
}

/* ---- blobs ---- */

static void blob_name(const char *hash, char out[SBX_SHA256_HEX_SIZE + 1])
{
    snprintf(out, SBX_SHA256_HEX_SIZE + 1, "%.2s/%s", hash, hash + 2);
}

int sbx_snap_blob_open(int blobs_fd, const char *hash, sbx_err *err)
{
    char name[SBX_SHA256_HEX_SIZE + 1];
    blob_name(hash, name);
    int fd = openat(blobs_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return sbx_err_set(err, errno == ENOENT ? EIO : errno, "snapshot store: content %.12s %s",
                           hash, errno == ENOENT ? "is missing" : "cannot be read");
    return fd;
}

/* Copy size bytes from in (offset 0) to out. */
static int copy_fd(int in, int out, uint64_t size, sbx_err *err)
{
    loff_t off = 0;
    bool plain = false;
    static char buf[256 << 10];
    while ((uint64_t)off < size) {
        size_t want =
            size - (uint64_t)off > (1u << 30) ? (1u << 30) : (size_t)(size - (uint64_t)off);
        ssize_t n;
        if (!plain) {
            n = copy_file_range(in, &off, out, NULL, want, 0);
            if (n < 0 &&
                (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
                plain = true;
                continue;
            }
        } else {
            n = pread(in, buf, want < sizeof(buf) ? want : sizeof(buf), off);
            if (n > 0) {
                for (ssize_t w = 0; w < n;) {
                    ssize_t k = write(out, buf + w, (size_t)(n - w));
                    if (k < 0 && errno == EINTR)
                        continue;
                    if (k < 0)
                        return sbx_err_set(err, errno, "write");
                    w += k;
                }
                off += n;
            }
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sbx_err_set(err, errno, "copy");
        if (n == 0)
            return sbx_err_set(err, EIO, "copy: the file shrank while it was copied");
    }
    return 0;
}

/* Put the content of fd (size bytes, hash) in the store unless it is there. */
static int blob_put(int blobs_fd, const char *hash, int fd, uint64_t size, sbx_err *err)
{
    char name[SBX_SHA256_HEX_SIZE + 1], sub[3] = {hash[0], hash[1], 0};
    blob_name(hash, name);
    struct stat st;
    if (fstatat(blobs_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
        return 0;
    if (mkdirat(blobs_fd, sub, 0700) < 0 && errno != EEXIST)
        return sbx_err_set(err, errno, "snapshot store: mkdir");
    static unsigned seq;
    char tmp[64];
    snprintf(tmp, sizeof(tmp), "%s/.tmp-%d-%u", sub, (int)getpid(), seq++);
    cleanup_fd int out =
        openat(blobs_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400);
    if (out < 0)
        return sbx_err_set(err, errno, "snapshot store: create");
    if (copy_fd(fd, out, size, err) < 0 || renameat(blobs_fd, tmp, blobs_fd, name) < 0) {
        if (!err->errnum)
            sbx_err_set(err, errno, "snapshot store: rename");
        unlinkat(blobs_fd, tmp, 0);
        return sbx_err_wrap(err, "snapshot store");
    }
    return 0;
}

/* ---- reading a workspace ---- */

struct link_seen {
    dev_t dev;
    ino_t ino;
    size_t idx; /* its first entry */
};

struct scan {
    int blobs_fd;
    bool hash;
    const struct sbx_snap_manifest *cache;
    dev_t dev;
    struct sbx_snap_manifest *m;
    uint64_t skipped;
    struct link_seen *links;
    size_t nlinks, cap;
    char path[SBX_WS_PATH_MAX + 1];
    sbx_err *err;
};

static int64_t ns(struct timespec t)
{
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int add_file(struct scan *s, const struct stat *st, uint64_t size, const char *hash)
{
    if (sbx_snap_add(s->m, s->path, SBX_SNAP_FILE, st->st_mode, size, hash, NULL, s->err) < 0)
        return -1;
    struct sbx_snap_entry *e = &s->m->e[s->m->n - 1];
    e->ino = st->st_ino;
    e->nlink = (uint32_t)st->st_nlink;
    e->mtime_ns = ns(st->st_mtim);
    e->ctime_ns = ns(st->st_ctim);
    return 0;
}

static int note_link(struct scan *s, const struct stat *st);

/* The cache's hash of the file (st as it is now), or NULL. */
static const char *cached(const struct scan *s, const struct stat *st)
{
    const struct sbx_snap_entry *c = s->cache ? sbx_snap_find(s->cache, s->path) : NULL;
    if (!c || c->ino != st->st_ino || c->size != (uint64_t)st->st_size ||
        c->mtime_ns != ns(st->st_mtim) || c->ctime_ns != ns(st->st_ctim) || !c->hash[0])
        return NULL;
    return c->hash;
}

static bool blob_exists(int blobs_fd, const char *hash, uint64_t size)
{
    char name[SBX_SHA256_HEX_SIZE + 1];
    blob_name(hash, name);
    struct stat st;
    return fstatat(blobs_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && (uint64_t)st.st_size == size;
}

static int scan_file(struct scan *s, int dfd, const char *name, const struct stat *st)
{
    if (st->st_nlink > 1)
        for (size_t i = 0; i < s->nlinks; i++)
            if (s->links[i].ino == st->st_ino && s->links[i].dev == st->st_dev) {
                const struct sbx_snap_entry *f = &s->m->e[s->links[i].idx];
                char hash[SBX_SHA256_HEX_SIZE];
                memcpy(hash, f->hash, sizeof(hash)); /* add may move f */
                return add_file(s, st, f->size, hash);
            }
    const char *known = cached(s, st);
    if (known && (s->blobs_fd < 0 || blob_exists(s->blobs_fd, known, (uint64_t)st->st_size)))
        return add_file(s, st, (uint64_t)st->st_size, known) < 0 ? -1 : note_link(s, st);
    if (!s->hash && !known)
        return add_file(s, st, (uint64_t)st->st_size, NULL) < 0 ? -1 : note_link(s, st);
    cleanup_fd int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat now;
    if (fd < 0 || fstat(fd, &now) < 0)
        return sbx_err_set(s->err, errno, "read %s", s->path);
    if (!S_ISREG(now.st_mode) || now.st_ino != st->st_ino)
        return sbx_err_set(s->err, EBUSY, "%s changed while the snapshot was taken", s->path);
    char hash[SBX_SHA256_HEX_SIZE];
    uint64_t size;
    if (sbx_sha256_fd_hex(fd, hash, &size, s->err) < 0)
        return sbx_err_wrap(s->err, "read %s", s->path);
    if (s->blobs_fd >= 0 && blob_put(s->blobs_fd, hash, fd, size, s->err) < 0)
        return -1;
    if (add_file(s, st, size, hash) < 0)
        return -1;
    return note_link(s, st);
}

/* A file with other links: remembered, for them to take its hash. */
static int note_link(struct scan *s, const struct stat *st)
{
    if (st->st_nlink > 1) {
        if (s->nlinks == s->cap) {
            size_t cap = s->cap ? 2 * s->cap : 16;
            struct link_seen *l = realloc(s->links, cap * sizeof(*l));
            if (!l)
                return sbx_err_set(s->err, ENOMEM, "snapshot");
            s->links = l;
            s->cap = cap;
        }
        s->links[s->nlinks++] = (struct link_seen){st->st_dev, st->st_ino, s->m->n - 1};
    }
    return 0;
}

static int scan_dir(struct scan *s, int dfd, size_t len, unsigned depth)
{
    if (depth > DEPTH_MAX)
        return sbx_err_set(s->err, ENAMETOOLONG, "%s: more than %d levels deep", s->path,
                           DEPTH_MAX);
    int dup_fd = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        if (dup_fd >= 0)
            close(dup_fd);
        return sbx_err_set(s->err, errno, "list %s", len ? s->path : "/");
    }
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (errno = 0, de = readdir(d))) {
        const char *name = de->d_name;
        if (!strcmp(name, ".") || !strcmp(name, "..") || (depth == 0 && !strcmp(name, SKILLS)))
            continue;
        size_t nl = strlen(name);
        if (len + (len ? 1 : 0) + nl > SBX_WS_PATH_MAX) {
            rc = sbx_err_set(s->err, ENAMETOOLONG, "a path in %s is too long", s->path);
            break;
        }
        size_t at = len;
        if (len)
            s->path[at++] = '/';
        memcpy(s->path + at, name, nl + 1);
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            rc = sbx_err_set(s->err, errno, "stat %s", s->path);
        } else if (S_ISDIR(st.st_mode)) {
            if (st.st_dev != s->dev) {
                s->skipped++; /* another filesystem mounted inside */
            } else {
                int cfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (cfd < 0)
                    rc = sbx_err_set(s->err, errno, "open %s", s->path);
                else if ((rc = sbx_snap_add(s->m, s->path, SBX_SNAP_DIR, st.st_mode, 0, NULL, NULL,
                                            s->err)) == 0)
                    rc = scan_dir(s, cfd, at + nl, depth + 1);
                if (cfd >= 0)
                    close(cfd);
            }
        } else if (S_ISLNK(st.st_mode)) {
            char target[PATH_MAX];
            ssize_t n = readlinkat(dfd, name, target, sizeof(target) - 1);
            if (n < 0) {
                rc = sbx_err_set(s->err, errno, "readlink %s", s->path);
            } else {
                target[n] = '\0';
                rc = sbx_snap_add(s->m, s->path, SBX_SNAP_SYMLINK, 0777, (uint64_t)n, NULL, target,
                                  s->err);
            }
        } else if (S_ISREG(st.st_mode)) {
            rc = scan_file(s, dfd, name, &st);
        } else {
            s->skipped++;
        }
        s->path[len] = '\0';
    }
    if (rc == 0 && errno)
        rc = sbx_err_set(s->err, errno, "list %s", len ? s->path : "/");
    closedir(d);
    return rc;
}

/* After sorting: of each set of hard links, the first path stays a file,
 * the others become links to it. */
static int mark_links(struct sbx_snap_manifest *m, sbx_err *err)
{
    for (size_t i = 0; i < m->n; i++) {
        struct sbx_snap_entry *e = &m->e[i];
        if (e->type != SBX_SNAP_FILE || e->nlink < 2)
            continue;
        for (size_t j = 0; j < i; j++) {
            const struct sbx_snap_entry *f = &m->e[j];
            if (f->type == SBX_SNAP_FILE && f->nlink > 1 && f->ino == e->ino) {
                if (!(e->target = strdup(f->path)))
                    return sbx_err_set(err, ENOMEM, "snapshot");
                e->type = SBX_SNAP_LINK;
                break;
            }
        }
    }
    return 0;
}

int sbx_snap_scan(int ws_fd, const struct sbx_snap_scan_opts *o, struct sbx_snap_manifest *m,
                  uint64_t *skipped, sbx_err *err)
{
    int blobs_fd = o->blobs_fd;
    *m = (struct sbx_snap_manifest){0};
    cleanup_fd int root = sbx_ws_openat(ws_fd, "", O_RDONLY | O_DIRECTORY, true);
    struct stat st;
    if (root < 0 || fstat(root, &st) < 0)
        return sbx_err_set(err, errno, "open the workspace");
    struct scan s = {.blobs_fd = blobs_fd,
                     .hash = o->hash,
                     .cache = o->cache,
                     .dev = st.st_dev,
                     .m = m,
                     .err = err};
    int rc = scan_dir(&s, root, 0, 0);
    free(s.links);
    if (rc == 0) {
        sbx_snap_sort(m);
        rc = mark_links(m, err);
    }
    if (rc == 0 && blobs_fd >= 0 && syncfs(blobs_fd) < 0)
        rc = sbx_err_set(err, errno, "snapshot store: sync");
    if (rc < 0) {
        sbx_snap_free(m);
        return -1;
    }
    if (skipped)
        *skipped = s.skipped;
    return 0;
}

/* ---- writing a workspace ---- */

/* An entry's parent directory, opened inside the workspace with no symlink
 * on the way; *base its last component. The last parent opened is kept in
 * *cache (path and fd), as a restore goes through a directory at a time. */
struct parent_cache {
    char path[SBX_WS_PATH_MAX + 1];
    int fd;
};

static int open_parent(int ws_fd, const char *path, const char **base, struct parent_cache *c,
                       sbx_err *err)
{
    const char *slash = strrchr(path, '/');
    size_t plen = slash ? (size_t)(slash - path) : 0;
    *base = slash ? slash + 1 : path;
    if (c->fd >= 0 && strlen(c->path) == plen && memcmp(c->path, path, plen) == 0)
        return c->fd;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    memcpy(c->path, path, plen);
    c->path[plen] = '\0';
    c->fd = sbx_ws_openat(ws_fd, c->path, O_PATH | O_DIRECTORY, true);
    if (c->fd < 0)
        return sbx_err_set(err, errno == ELOOP ? ELOOP : errno, "restore: parent of %s", path);
    return c->fd;
}

static int delete_path(int ws_fd, const char *path, sbx_err *err)
{
    struct sbx_ws_path p;
    if (sbx_ws_path_parse(path, strlen(path), &p, err) < 0)
        return -1;
    return sbx_ws_delete(ws_fd, &p, err);
}

/* Whether path lies inside the directory dir ("a" holds "a/b"). */
static bool inside(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return n && strncmp(path, dir, n) == 0 && path[n] == '/';
}

static unsigned restored_mode(unsigned mode)
{
    return mode & 01777; /* the workspace is nosuid anyway: no set-id bits */
}

/* Whether the file at path holds the content of e already. */
static bool same_content(int ws_fd, const struct sbx_snap_entry *cur,
                         const struct sbx_snap_entry *e)
{
    if (cur->type != SBX_SNAP_FILE || cur->nlink > 1 || cur->size != e->size)
        return false;
    cleanup_fd int fd = sbx_ws_openat(ws_fd, cur->path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, true);
    char hash[SBX_SHA256_HEX_SIZE];
    return fd >= 0 && sbx_sha256_fd_hex(fd, hash, NULL, NULL) == 0 && strcmp(hash, e->hash) == 0;
}

static int tmp_name(char *out, size_t len)
{
    static unsigned seq;
    return snprintf(out, len, TMP_PREFIX "%d-%u", (int)getpid(), seq++);
}

/* Where an entry is written: its parent (from the cache) and a temporary
 * name beside it, renamed over the entry by land(). */
static int put_begin(int ws_fd, const char *path, struct parent_cache *pc, const char **base,
                     char tmp[64], sbx_err *err)
{
    int dfd = open_parent(ws_fd, path, base, pc, err);
    if (dfd >= 0)
        tmp_name(tmp, 64);
    return dfd;
}

/* ok: rename tmp over base; else (or when that fails) remove tmp, -1. */
static int land(int dfd, const char *tmp, const char *base, const char *path, bool ok, sbx_err *err)
{
    if (ok && renameat(dfd, tmp, dfd, base) == 0)
        return 0;
    if (ok || !err->errnum)
        sbx_err_set(err, errno, "restore %s", path);
    int saved = err->errnum;
    unlinkat(dfd, tmp, 0);
    err->errnum = saved;
    return -1;
}

static int put_file(int ws_fd, int blobs_fd, const struct sbx_snap_entry *e, uid_t uid, gid_t gid,
                    struct parent_cache *pc, sbx_err *err)
{
    const char *base;
    char tmp[64];
    int dfd = put_begin(ws_fd, e->path, pc, &base, tmp, err);
    if (dfd < 0)
        return -1;
    cleanup_fd int in = sbx_snap_blob_open(blobs_fd, e->hash, err);
    if (in < 0)
        return -1;
    cleanup_fd int out =
        openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out < 0)
        return sbx_err_set(err, errno, "restore %s", e->path);
    bool ok = copy_fd(in, out, e->size, err) == 0;
    if (ok && (fchown(out, uid, gid) < 0 || fchmod(out, restored_mode(e->mode)) < 0)) {
        sbx_err_set(err, errno, "restore %s", e->path);
        ok = false;
    }
    return land(dfd, tmp, base, e->path, ok, err);
}

static int put_symlink(int ws_fd, const struct sbx_snap_entry *e, uid_t uid, gid_t gid,
                       struct parent_cache *pc, sbx_err *err)
{
    const char *base;
    char tmp[64];
    int dfd = put_begin(ws_fd, e->path, pc, &base, tmp, err);
    if (dfd < 0)
        return -1;
    if (symlinkat(e->target, dfd, tmp) < 0)
        return sbx_err_set(err, errno, "restore %s", e->path);
    bool ok = fchownat(dfd, tmp, uid, gid, AT_SYMLINK_NOFOLLOW) == 0;
    if (!ok)
        sbx_err_set(err, errno, "restore %s", e->path);
    return land(dfd, tmp, base, e->path, ok, err);
}

static int put_link(int ws_fd, const struct sbx_snap_entry *e, struct parent_cache *pc,
                    sbx_err *err)
{
    struct parent_cache first = {.fd = -1};
    const char *fbase, *base;
    char tmp[64];
    int ffd = open_parent(ws_fd, e->target, &fbase, &first, err);
    int dfd = ffd < 0 ? -1 : put_begin(ws_fd, e->path, pc, &base, tmp, err);
    int rc = -1;
    if (dfd >= 0 && linkat(ffd, fbase, dfd, tmp, 0) < 0)
        sbx_err_set(err, errno, "restore %s", e->path);
    else if (dfd >= 0)
        rc = land(dfd, tmp, base, e->path, true, err);
    if (first.fd >= 0)
        close(first.fd);
    return rc;
}

static int put_dir(int ws_fd, const struct sbx_snap_entry *e, bool exists, uid_t uid, gid_t gid,
                   struct parent_cache *pc, sbx_err *err)
{
    const char *base;
    int dfd = open_parent(ws_fd, e->path, &base, pc, err);
    if (dfd < 0)
        return -1;
    if (!exists && mkdirat(dfd, base, 0700) < 0)
        return sbx_err_set(err, errno, "restore %s", e->path);
    cleanup_fd int fd = openat(dfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fchown(fd, uid, gid) < 0 || fchmod(fd, restored_mode(e->mode)) < 0)
        return sbx_err_set(err, errno, "restore %s", e->path);
    return 0;
}

/* Mode and owner of a file kept as it is. */
static int fix_file(int ws_fd, const struct sbx_snap_entry *e, uid_t uid, gid_t gid, sbx_err *err)
{
    cleanup_fd int fd = sbx_ws_openat(ws_fd, e->path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, true);
    if (fd < 0 || fchown(fd, uid, gid) < 0 || fchmod(fd, restored_mode(e->mode)) < 0)
        return sbx_err_set(err, errno, "restore %s", e->path);
    return 0;
}

/* What the restore does with each entry of the target. */
enum action { KEEP_FILE, WRITE_FILE, MAKE_DIR, KEEP_DIR, MAKE_SYMLINK, KEEP_SYMLINK, MAKE_LINK };

/* Bytes a file takes on disk, near enough (whole 4 KiB blocks). */
static uint64_t on_disk(uint64_t size)
{
    return (size + 4095) & ~(uint64_t)4095;
}

/* Decide, and check that it can be done, before anything changes: the
 * restore deletes first, then writes each file beside the one it replaces
 * (rename), so the room needed is played through in that order. */
static int plan(int ws_fd, int blobs_fd, const struct sbx_snap_manifest *cur,
                const struct sbx_snap_manifest *m, enum action *act, sbx_err *err)
{
    for (size_t i = 0; i < m->n; i++) {
        const struct sbx_snap_entry *e = &m->e[i], *c = sbx_snap_find(cur, e->path);
        switch (e->type) {
        case SBX_SNAP_DIR:
            act[i] = c && c->type == SBX_SNAP_DIR ? KEEP_DIR : MAKE_DIR;
            break;
        case SBX_SNAP_SYMLINK:
            act[i] = c && c->type == SBX_SNAP_SYMLINK && strcmp(c->target, e->target) == 0
                         ? KEEP_SYMLINK
                         : MAKE_SYMLINK;
            break;
        case SBX_SNAP_LINK:
            act[i] = MAKE_LINK;
            break;
        case SBX_SNAP_FILE:
            act[i] = c && same_content(ws_fd, c, e) ? KEEP_FILE : WRITE_FILE;
            if (act[i] == WRITE_FILE) {
                struct stat st;
                char name[SBX_SHA256_HEX_SIZE + 1];
                blob_name(e->hash, name);
                if (fstatat(blobs_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                    (uint64_t)st.st_size != e->size)
                    return sbx_err_set(err, EIO, "snapshot store: the content of %s is missing",
                                       e->path);
            }
            break;
        }
    }
    struct statvfs vfs;
    if (fstatvfs(ws_fd, &vfs) < 0)
        return sbx_err_set(err, errno, "restore: statvfs");
    int64_t room = (int64_t)((uint64_t)vfs.f_bavail * vfs.f_frsize);
    /* Deleted first: what the target does not have as a file. */
    for (size_t i = 0; i < cur->n; i++) {
        const struct sbx_snap_entry *c = &cur->e[i], *e = sbx_snap_find(m, c->path);
        if (c->type == SBX_SNAP_FILE && c->nlink < 2 && (!e || e->type != SBX_SNAP_FILE))
            room += (int64_t)on_disk(c->size);
    }
    int64_t least = room;
    for (size_t i = 0; i < m->n; i++) {
        if (act[i] != WRITE_FILE)
            continue;
        const struct sbx_snap_entry *c = sbx_snap_find(cur, m->e[i].path);
        room -= (int64_t)on_disk(m->e[i].size);
        if (room < least)
            least = room;
        if (c && c->type == SBX_SNAP_FILE && c->nlink < 2)
            room += (int64_t)on_disk(c->size);
    }
    if (least < 0)
        return sbx_err_set(err, ENOSPC,
                           "the workspace is %lld bytes short of room to restore the snapshot "
                           "(nothing was changed)",
                           (long long)-least);
    return 0;
}

int sbx_snap_restore(int ws_fd, int blobs_fd, const struct sbx_snap_manifest *m,
                     const struct sbx_snap_manifest *cache, uid_t uid, gid_t gid, sbx_err *err)
{
    struct sbx_snap_manifest cur;
    struct sbx_snap_scan_opts o = {.blobs_fd = -1, .hash = false, .cache = cache};
    if (sbx_snap_scan(ws_fd, &o, &cur, NULL, err) < 0)
        return sbx_err_wrap(err, "restore: read the workspace");
    enum action *act = calloc(m->n ? m->n : 1, sizeof(*act));
    int rc = act ? plan(ws_fd, blobs_fd, &cur, m, act, err) : sbx_err_set(err, ENOMEM, "restore");
    /* What the target does not have, or has as another kind, goes first. */
    const char *gone = "";
    for (size_t i = 0; rc == 0 && i < cur.n; i++) {
        const struct sbx_snap_entry *c = &cur.e[i], *e = sbx_snap_find(m, c->path);
        if (inside(c->path, gone))
            continue;
        bool c_file = c->type == SBX_SNAP_FILE || c->type == SBX_SNAP_LINK;
        bool e_file = e && (e->type == SBX_SNAP_FILE || e->type == SBX_SNAP_LINK);
        if (e && (e->type == c->type || (e_file && c_file)))
            continue;
        rc = delete_path(ws_fd, c->path, err);
        if (rc < 0 && err->errnum == ENOENT) /* inside a directory deleted already */
            rc = 0;
        if (c->type == SBX_SNAP_DIR)
            gone = c->path;
    }
    struct parent_cache pc = {.fd = -1};
    for (size_t i = 0; rc == 0 && i < m->n; i++) {
        const struct sbx_snap_entry *e = &m->e[i];
        const char *base;
        switch (act[i]) {
        case KEEP_DIR:
        case MAKE_DIR:
            rc = put_dir(ws_fd, e, act[i] == KEEP_DIR, uid, gid, &pc, err);
            break;
        case KEEP_FILE:
            rc = fix_file(ws_fd, e, uid, gid, err);
            break;
        case WRITE_FILE:
            rc = put_file(ws_fd, blobs_fd, e, uid, gid, &pc, err);
            break;
        case MAKE_SYMLINK:
            rc = put_symlink(ws_fd, e, uid, gid, &pc, err);
            break;
        case KEEP_SYMLINK:
            if (open_parent(ws_fd, e->path, &base, &pc, err) < 0 ||
                fchownat(pc.fd, base, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
                rc = err->errnum ? -1 : sbx_err_set(err, errno, "restore %s", e->path);
            break;
        case MAKE_LINK:
            rc = put_link(ws_fd, e, &pc, err);
            break;
        }
    }
    if (pc.fd >= 0)
        close(pc.fd);
    free(act);
    sbx_snap_free(&cur);
    return rc;
}

/* ---- the index and the manifests ---- */

int sbx_snap_index_read(int clone_fd, json_t **out, sbx_err *err)
{
    cleanup_fd int fd = openat(clone_fd, "index.json", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        *out = json_pack("{s:n, s:[]}", "current", "snapshots");
        return *out ? 0 : sbx_err_set(err, ENOMEM, "snapshot index");
    }
    if (fd < 0)
        return sbx_err_set(err, errno, "snapshot index");
    json_error_t je;
    FILE *f = fdopen(fd, "r");
    if (!f)
        return sbx_err_set(err, errno, "snapshot index");
    fd = -1;
    *out = json_loadf(f, 0, &je);
    fclose(f);
    if (!*out || !json_is_object(*out) || !json_is_array(json_object_get(*out, "snapshots"))) {
        json_decref(*out);
        *out = NULL;
        return sbx_err_set(err, EIO, "snapshot index: %s", je.text);
    }
    return 0;
}

static int write_whole(int dir_fd, const char *name, const char *data, size_t len, sbx_err *err)
{
    char tmp[NAME_MAX + 1];
    snprintf(tmp, sizeof(tmp), ".%.200s.tmp", name);
    cleanup_fd int fd =
        openat(dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return sbx_err_set(err, errno, "snapshot store: %s", name);
    for (size_t w = 0; w < len;) {
        ssize_t n = write(fd, data + w, len - w);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int saved = errno;
            unlinkat(dir_fd, tmp, 0);
            return sbx_err_set(err, saved, "snapshot store: %s", name);
        }
        w += (size_t)n;
    }
    if (fdatasync(fd) < 0 || renameat(dir_fd, tmp, dir_fd, name) < 0) {
        int saved = errno;
        unlinkat(dir_fd, tmp, 0);
        return sbx_err_set(err, saved, "snapshot store: %s", name);
    }
    return 0;
}

int sbx_snap_index_write(int clone_fd, json_t *index, sbx_err *err)
{
    cleanup_free char *text = json_dumps(index, JSON_COMPACT);
    if (!text)
        return sbx_err_set(err, ENOMEM, "snapshot index");
    return write_whole(clone_fd, "index.json", text, strlen(text), err);
}

int sbx_snap_manifest_read(int clone_fd, const char *id, struct sbx_snap_manifest *m, sbx_err *err)
{
    *m = (struct sbx_snap_manifest){0};
    if (!sbx_snap_id_valid(id))
        return sbx_err_set(err, EINVAL, "a snapshot id is 64 lower-case hex digits");
    char name[SBX_SHA256_HEX_SIZE + 16];
    snprintf(name, sizeof(name), "manifests/%s", id);
    cleanup_fd int fd = openat(clone_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return sbx_err_set(err, ENOENT, "no snapshot %s", id);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return sbx_err_set(err, errno, "snapshot %s", id);
    cleanup_free char *text = malloc((size_t)st.st_size + 1);
    if (!text)
        return sbx_err_set(err, ENOMEM, "snapshot %s", id);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, text + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return sbx_err_set(err, n < 0 ? errno : EIO, "snapshot %s", id);
        got += (size_t)n;
    }
    if (sbx_snap_parse(text, got, m, err) < 0)
        return sbx_err_wrap(err, "snapshot %s", id);
    return 0;
}

int sbx_snap_manifest_write(int clone_fd, const char *id, const char *text, size_t len,
                            sbx_err *err)
{
    cleanup_fd int dir = open_dir(clone_fd, "manifests", true, err);
    if (dir < 0)
        return -1;
    return write_whole(dir, id, text, len, err);
}

void sbx_snap_manifest_remove(int clone_fd, const char *id)
{
    char name[SBX_SHA256_HEX_SIZE + 16];
    snprintf(name, sizeof(name), "manifests/%s", id);
    unlinkat(clone_fd, name, 0);
}

/* ---- the stat cache ---- */

#define CACHE_HEADER "sbx-statcache 1\n"
#define CACHE_SETTLED_NS (2 * 1000000000ll)

void sbx_snap_cache_read(int clone_fd, struct sbx_snap_manifest *cache)
{
    *cache = (struct sbx_snap_manifest){0};
    FILE *f = NULL;
    int fd = openat(clone_fd, "statcache", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || !(f = fdopen(fd, "r"))) {
        if (fd >= 0)
            close(fd);
        return;
    }
    char *line = NULL;
    size_t cap = 0;
    bool ok = getline(&line, &cap, f) > 0 && !strcmp(line, CACHE_HEADER);
    while (ok && getline(&line, &cap, f) > 0) {
        unsigned long long ino, size;
        long long mt, ct;
        char hash[SBX_SHA256_HEX_SIZE], *path = malloc(strlen(line) + 1);
        ok = path &&
             sscanf(line, "%llu %llu %lld %lld %64s %s", &ino, &size, &mt, &ct, hash, path) == 6 &&
             sbx_snap_id_valid(hash);
        if (ok)
            ok = sbx_snap_unescape(path) &&
                 sbx_snap_add(cache, path, SBX_SNAP_FILE, 0, size, hash, NULL, NULL) == 0;
        if (ok) {
            struct sbx_snap_entry *e = &cache->e[cache->n - 1];
            e->ino = ino;
            e->mtime_ns = mt;
            e->ctime_ns = ct;
        }
        free(path);
    }
    free(line);
    fclose(f);
    if (!ok)
        sbx_snap_free(cache);
    sbx_snap_sort(cache);
}

int sbx_snap_cache_write(int clone_fd, const struct sbx_snap_manifest *m, int64_t scan_start_ns,
                         sbx_err *err)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (!f)
        return sbx_err_set(err, ENOMEM, "stat cache");
    fputs(CACHE_HEADER, f);
    for (size_t i = 0; i < m->n; i++) {
        const struct sbx_snap_entry *e = &m->e[i];
        if ((e->type != SBX_SNAP_FILE && e->type != SBX_SNAP_LINK) || !e->hash[0] ||
            e->mtime_ns > scan_start_ns - CACHE_SETTLED_NS ||
            e->ctime_ns > scan_start_ns - CACHE_SETTLED_NS)
            continue;
        char *p = malloc(3 * strlen(e->path) + 1);
        if (!p) {
            fclose(f);
            free(buf);
            return sbx_err_set(err, ENOMEM, "stat cache");
        }
        sbx_snap_escape(e->path, p);
        fprintf(f, "%llu %llu %lld %lld %s %s\n", (unsigned long long)e->ino,
                (unsigned long long)e->size, (long long)e->mtime_ns, (long long)e->ctime_ns,
                e->hash, p);
        free(p);
    }
    if (fclose(f) != 0) {
        free(buf);
        return sbx_err_set(err, ENOMEM, "stat cache");
    }
    int rc = write_whole(clone_fd, "statcache", buf, size, err);
    free(buf);
    return rc;
}

/* ---- collecting blobs ---- */

struct hashes {
    char (*h)[SBX_SHA256_HEX_SIZE];
    size_t n, cap;
};

static int hashes_add(struct hashes *s, const char *h, sbx_err *err)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        void *p = realloc(s->h, cap * sizeof(*s->h));
        if (!p)
            return sbx_err_set(err, ENOMEM, "snapshot store");
        s->h = p;
        s->cap = cap;
    }
    memcpy(s->h[s->n++], h, SBX_SHA256_HEX_SIZE);
    return 0;
}

static int hash_cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* Every hash that a manifest of a clone of the tenant names. */
static int referenced(int tenant_fd, struct hashes *refs, sbx_err *err)
{
    cleanup_fd int clones = open_dir(tenant_fd, "clones", true, err);
    if (clones < 0)
        return -1;
    DIR *d = fdopendir(fcntl(clones, F_DUPFD_CLOEXEC, 0));
    if (!d)
        return sbx_err_set(err, errno, "snapshot store: clones");
    int rc = 0;
    for (struct dirent *de; rc == 0 && (de = readdir(d));) {
        if (de->d_name[0] == '.')
            continue;
        char path[NAME_MAX + 16];
        snprintf(path, sizeof(path), "%s/manifests", de->d_name);
        int mfd = openat(clones, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (mfd < 0)
            continue;
        DIR *md = fdopendir(mfd);
        for (struct dirent *me; rc == 0 && md && (me = readdir(md));) {
            if (!sbx_snap_id_valid(me->d_name))
                continue;
            int cfd = openat(clones, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            struct sbx_snap_manifest m;
            rc = cfd < 0 ? sbx_err_set(err, errno, "snapshot store")
                         : sbx_snap_manifest_read(cfd, me->d_name, &m, err);
            if (cfd >= 0)
                close(cfd);
            for (size_t i = 0; rc == 0 && i < m.n; i++)
                if (m.e[i].type == SBX_SNAP_FILE)
                    rc = hashes_add(refs, m.e[i].hash, err);
            if (rc == 0)
                sbx_snap_free(&m);
        }
        if (md)
            closedir(md);
        else
            close(mfd);
    }
    closedir(d);
    if (rc == 0 && refs->n)
        qsort(refs->h, refs->n, sizeof(*refs->h), hash_cmp);
    return rc;
}

int sbx_snap_gc(int tenant_fd, int blobs_fd, uint64_t *removed, uint64_t *freed, sbx_err *err)
{
    struct hashes refs = {0};
    uint64_t nrem = 0, nfreed = 0;
    int rc = referenced(tenant_fd, &refs, err);
    DIR *d = rc == 0 ? fdopendir(fcntl(blobs_fd, F_DUPFD_CLOEXEC, 0)) : NULL;
    if (rc == 0 && !d)
        rc = sbx_err_set(err, errno, "snapshot store: blobs");
    for (struct dirent *de; rc == 0 && (de = readdir(d));) {
        if (strlen(de->d_name) != 2)
            continue;
        int sfd = openat(blobs_fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *sd = sfd >= 0 ? fdopendir(sfd) : NULL;
        if (!sd) {
            if (sfd >= 0)
                close(sfd);
            continue;
        }
        for (struct dirent *be; (be = readdir(sd));) {
            char h[2 * NAME_MAX + 2];
            snprintf(h, sizeof(h), "%.2s%s", de->d_name, be->d_name);
            bool tmp = strncmp(be->d_name, ".tmp-", 5) == 0;
            if (!tmp && (!sbx_snap_id_valid(h) ||
                         (refs.n && bsearch(h, refs.h, refs.n, sizeof(*refs.h), hash_cmp))))
                continue;
            struct stat st;
            if (fstatat(dirfd(sd), be->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                unlinkat(dirfd(sd), be->d_name, 0) == 0) {
                nrem++;
                nfreed += (uint64_t)st.st_size;
            }
        }
        closedir(sd);
    }
    if (d)
        closedir(d);
    free(refs.h);
    if (removed)
        *removed = nrem;
    if (freed)
        *freed = nfreed;
    return rc;
}
