#include "daemon/image.h"

#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/digest.h"
#include "daemon/archive_dl.h"

#define MEMBER_MAX (4u << 20) /* index.json, a manifest, a config */
#define NAME_MAX_LEN 4096

/* Where an image's members are read from: a layout directory (dirfd >= 0)
 * or an archive read again for each member. */
struct src {
    const char *path;
    int dirfd;
};

static int openat_beneath(int dirfd, const char *name, int flags)
{
    struct open_how how = {.flags = (uint64_t)flags | O_CLOEXEC,
                           .resolve =
                               RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    return (int)syscall(SYS_openat2, dirfd, name, &how, sizeof(how));
}

/* A member name as the image gives it: "./" and leading '/' dropped; 0 and
 * "" for the root itself; -1 when a component is "..". */
static int clean_name(const char *in, char *out, size_t len)
{
    while (*in == '/' || (in[0] == '.' && (in[1] == '/' || in[1] == '\0')))
        in += in[0] == '.' && in[1] == '/' ? 2 : 1;
    if (strlen(in) >= len)
        return -1;
    snprintf(out, len, "%s", in);
    size_t n = strlen(out);
    while (n && out[n - 1] == '/')
        out[--n] = '\0';
    for (const char *p = out; *p;) {
        const char *q = strchrnul(p, '/');
        if (q - p == 2 && p[0] == '.' && p[1] == '.')
            return -1;
        p = *q ? q + 1 : q;
    }
    return out[0] ? 1 : 0;
}

static struct archive *reader_new(void)
{
    struct archive *a = archive_read_new();
    if (a) {
        archive_read_support_format_tar(a);
        archive_read_support_filter_all(a);
    }
    return a;
}

/* The outer archive positioned at member name's data, or NULL. */
static struct archive *outer_at(const struct src *s, const char *name, sbx_err *err)
{
    struct archive *a = reader_new();
    struct archive_entry *e;
    char clean[NAME_MAX_LEN];
    if (!a) {
        sbx_err_set(err, ENOMEM, "libarchive");
        return NULL;
    }
    if (archive_read_open_filename(a, s->path, 64 << 10) != ARCHIVE_OK) {
        sbx_err_set(err, EINVAL, "%s: %s", s->path, archive_error_string(a));
        archive_read_free(a);
        return NULL;
    }
    int r;
    while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK)
        if (clean_name(archive_entry_pathname(e), clean, sizeof(clean)) > 0 &&
            strcmp(clean, name) == 0 && archive_entry_filetype(e) == AE_IFREG)
            return a;
    if (r == ARCHIVE_EOF)
        sbx_err_set(err, ENOENT, "%s: no member %s", s->path, name);
    else
        sbx_err_set(err, EINVAL, "%s: %s", s->path, archive_error_string(a));
    archive_read_free(a);
    return NULL;
}

/* A small member (a JSON file) into *out, NUL-terminated. */
static int read_member(const struct src *s, const char *name, char **out, size_t *len, sbx_err *err)
{
    char *buf = malloc(MEMBER_MAX + 1);
    if (!buf)
        return sbx_err_set(err, ENOMEM, "%s", name);
    ssize_t n = 0;
    if (s->dirfd >= 0) {
        int fd = openat_beneath(s->dirfd, name, O_RDONLY);
        if (fd < 0) {
            free(buf);
            return sbx_err_set(err, errno, "%s/%s", s->path, name);
        }
        for (ssize_t r; n <= MEMBER_MAX && (r = read(fd, buf + n, MEMBER_MAX + 1 - (size_t)n)) > 0;)
            n += r;
        close(fd);
    } else {
        struct archive *a = outer_at(s, name, err);
        if (!a) {
            free(buf);
            return -1;
        }
        for (la_ssize_t r; n <= MEMBER_MAX &&
                           (r = archive_read_data(a, buf + n, MEMBER_MAX + 1 - (size_t)n)) > 0;)
            n += r;
        archive_read_free(a);
    }
    if (n > MEMBER_MAX) {
        free(buf);
        return sbx_err_set(err, EFBIG, "%s: %s is larger than %u bytes", s->path, name, MEMBER_MAX);
    }
    buf[n] = '\0';
    *out = buf;
    *len = (size_t)n;
    return 0;
}

static bool hex64(const char *h)
{
    if (strlen(h) != 64)
        return false;
    for (; *h; h++)
        if (!((*h >= '0' && *h <= '9') || (*h >= 'a' && *h <= 'f')))
            return false;
    return true;
}

/* "sha256:<hex>" -> "blobs/sha256/<hex>". */
static int blob_name(const char *digest, char *out, size_t len, sbx_err *err)
{
    if (!digest || strncmp(digest, "sha256:", 7) != 0 || !hex64(digest + 7))
        return sbx_err_set(err, EINVAL, "'%.80s' is not a sha256 digest", digest ? digest : "");
    snprintf(out, len, "blobs/sha256/%s", digest + 7);
    return 0;
}

/* The manifest of an index: linux/amd64 first, else the first one. */
static const char *pick_manifest(json_t *index)
{
    json_t *ms = json_object_get(index, "manifests"), *m, *first = NULL;
    size_t i;
    json_array_foreach(ms, i, m)
    {
        json_t *p = json_object_get(m, "platform");
        const char *os = json_string_value(json_object_get(p, "os"));
        const char *arch = json_string_value(json_object_get(p, "architecture"));
        if (!first)
            first = m;
        if (os && arch && strcmp(os, "linux") == 0 && strcmp(arch, "amd64") == 0)
            return json_string_value(json_object_get(m, "digest"));
    }
    return first ? json_string_value(json_object_get(first, "digest")) : NULL;
}

struct manifest {
    char digest[SBX_IMAGE_DIGEST_MAX];
    char **layers; /* member names, NULL-terminated */
};

static void manifest_free(struct manifest *m)
{
    for (size_t i = 0; m->layers && m->layers[i]; i++)
        free(m->layers[i]);
    free(m->layers);
    m->layers = NULL;
}

static int layers_of(const struct src *s, json_t *list, bool blobs, struct manifest *m,
                     sbx_err *err)
{
    if (!json_is_array(list))
        return sbx_err_set(err, EINVAL, "%s: the manifest lists no layers", s->path);
    size_t n = json_array_size(list), i;
    if (!(m->layers = calloc(n + 1, sizeof(char *))))
        return sbx_err_set(err, ENOMEM, "layers");
    json_t *l;
    json_array_foreach(list, i, l)
    {
        char name[NAME_MAX_LEN];
        const char *v =
            blobs ? json_string_value(json_object_get(l, "digest")) : json_string_value(l);
        if (blobs ? blob_name(v, name, sizeof(name), err) < 0
                  : (!v || clean_name(v, name, sizeof(name)) <= 0))
            return blobs ? -1
                         : sbx_err_set(err, EINVAL, "%s: layer %zu has a bad name", s->path, i);
        if (!(m->layers[i] = strdup(name)))
            return sbx_err_set(err, ENOMEM, "layers");
    }
    return 0;
}

/* The image's manifest: an OCI index (a layout, or docker save >= 25,
 * podman save --format oci-archive), else docker's manifest.json. */
static int resolve(const struct src *s, struct manifest *m, bool with_layers, sbx_err *err)
{
    char *text = NULL, name[NAME_MAX_LEN];
    size_t len;
    json_error_t je;
    sbx_err miss = {0};
    if (read_member(s, "index.json", &text, &len, &miss) == 0) {
        json_t *j = json_loadb(text, len, 0, &je);
        free(text);
        const char *d = j ? pick_manifest(j) : NULL;
        for (int depth = 0; depth < 2; depth++) {
            char hex[SBX_SHA256_HEX_SIZE];
            if (blob_name(d, name, sizeof(name), err) < 0 ||
                read_member(s, name, &text, &len, err) < 0) {
                json_decref(j);
                return -1;
            }
            snprintf(m->digest, sizeof(m->digest), "%s", d);
            json_decref(j);
            if (sbx_sha256_hex(text, len, hex, err) < 0 || strcmp(hex, m->digest + 7) != 0) {
                free(text);
                return sbx_err_set(err, EINVAL, "%s: %s does not match its digest", s->path, name);
            }
            j = json_loadb(text, len, 0, &je);
            free(text);
            if (!j)
                return sbx_err_set(err, EINVAL, "%s: %s: %s", s->path, name, je.text);
            if (!json_object_get(j, "manifests"))
                break;
            d = pick_manifest(j); /* an index of manifests: one level more */
        }
        int rc = !with_layers ? 0 : layers_of(s, json_object_get(j, "layers"), true, m, err);
        json_decref(j);
        return rc;
    }
    if (read_member(s, "manifest.json", &text, &len, err) < 0)
        return sbx_err_set(err, EINVAL,
                           "%s: neither an OCI layout nor a docker save archive (no index.json, "
                           "no manifest.json)",
                           s->path);
    json_t *j = json_loadb(text, len, 0, &je);
    free(text);
    json_t *first = json_array_get(j, 0);
    const char *config = json_string_value(json_object_get(first, "Config"));
    char hex[SBX_SHA256_HEX_SIZE];
    int rc = -1;
    if (!config || clean_name(config, name, sizeof(name)) <= 0)
        sbx_err_set(err, EINVAL, "%s: manifest.json names no config", s->path);
    else if (read_member(s, name, &text, &len, err) == 0) {
        rc = sbx_sha256_hex(text, len, hex, err);
        free(text);
        if (rc == 0) {
            snprintf(m->digest, sizeof(m->digest), "sha256:%s", hex);
            rc = !with_layers ? 0 : layers_of(s, json_object_get(first, "Layers"), false, m, err);
        }
    }
    json_decref(j);
    return rc;
}

static int src_open(const char *path, struct src *s, sbx_err *err)
{
    struct stat st;
    s->path = path;
    s->dirfd = -1;
    if (sbx_archive_load(err) < 0) /* dlopen()ed here: daemon/archive_dl.h */
        return -1;
    if (stat(path, &st) < 0)
        return sbx_err_set(err, errno, "image %s", path);
    if (S_ISDIR(st.st_mode) && (s->dirfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
        return sbx_err_set(err, errno, "image %s", path);
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
        return sbx_err_set(err, EINVAL, "image %s is neither a directory nor a file", path);
    return 0;
}

int sbx_image_digest(const char *path, char digest[SBX_IMAGE_DIGEST_MAX], sbx_err *err)
{
    struct src s;
    struct manifest m = {0};
    if (sbx_archive_load(err) < 0 || src_open(path, &s, err) < 0)
        return -1;
    int rc = resolve(&s, &m, false, err);
    if (s.dirfd >= 0)
        close(s.dirfd);
    if (rc == 0)
        snprintf(digest, SBX_IMAGE_DIGEST_MAX, "%s", m.digest);
    manifest_free(&m);
    return rc;
}

/* ---- removing what lower layers made (whiteouts), never through a symlink ---- */

static int rm_tree(int at, const char *name)
{
    struct stat st;
    if (fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode))
        return unlinkat(at, name, 0);
    int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    for (struct dirent *de; (de = readdir(d));)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            rm_tree(dirfd(d), de->d_name);
    closedir(d);
    return unlinkat(at, name, AT_REMOVEDIR);
}

static void clear_dir(int at)
{
    int fd = dup(at);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    for (struct dirent *de; (de = readdir(d));)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            rm_tree(at, de->d_name);
    closedir(d);
}

static void whiteout(int rootfd, const char *clean)
{
    char parent[NAME_MAX_LEN];
    snprintf(parent, sizeof(parent), "%s", clean);
    char *slash = strrchr(parent, '/');
    const char *base = slash ? slash + 1 : parent;
    if (slash)
        *slash = '\0';
    int dir = openat_beneath(rootfd, slash ? parent : ".", O_RDONLY | O_DIRECTORY);
    if (dir < 0)
        return; /* nothing there, or only through a symlink: nothing to remove */
    if (strcmp(base, ".wh..wh..opq") == 0)
        clear_dir(dir);
    else if (strncmp(base, ".wh.", 4) == 0 && base[4] && strcmp(base + 4, ".") &&
             strcmp(base + 4, ".."))
        rm_tree(dir, base + 4);
    close(dir);
}

static bool is_whiteout(const char *clean)
{
    const char *base = strrchr(clean, '/');
    return strncmp(base ? base + 1 : clean, ".wh.", 4) == 0;
}

/* ---- one layer ---- */

struct nested {
    struct archive *outer; /* the archive the layer is a member of, or NULL */
    int fd;                /* the layer's blob in a layout, or -1 */
};

static la_ssize_t nested_read(struct archive *a, void *ud, const void **buf)
{
    (void)a;
    static char chunk[64 << 10];
    struct nested *n = ud;
    *buf = chunk;
    return archive_read_data(n->outer, chunk, sizeof(chunk));
}

/* The layer's archive, opened for reading (*outer: the archive it is in). */
static struct archive *layer_open(const struct src *s, const char *name, struct nested *nest,
                                  sbx_err *err)
{
    struct archive *a = reader_new();
    if (!a) {
        sbx_err_set(err, ENOMEM, "libarchive");
        return NULL;
    }
    int rc;
    nest->outer = NULL;
    nest->fd = -1;
    if (s->dirfd >= 0) {
        if ((nest->fd = openat_beneath(s->dirfd, name, O_RDONLY)) < 0) {
            sbx_err_set(err, errno, "%s/%s", s->path, name);
            archive_read_free(a);
            return NULL;
        }
        rc = archive_read_open_fd(a, nest->fd, 64 << 10); /* closed by layer_close */
    } else {
        if (!(nest->outer = outer_at(s, name, err))) {
            archive_read_free(a);
            return NULL;
        }
        rc = archive_read_open(a, nest, NULL, nested_read, NULL);
    }
    if (rc != ARCHIVE_OK) {
        sbx_err_set(err, EINVAL, "layer %s: %s", name, archive_error_string(a));
        archive_read_free(a);
        if (nest->outer)
            archive_read_free(nest->outer);
        if (nest->fd >= 0)
            close(nest->fd);
        return NULL;
    }
    return a;
}

static void layer_close(struct archive *a, struct nested *nest, const struct src *s)
{
    (void)s;
    archive_read_free(a);
    if (nest->outer)
        archive_read_free(nest->outer);
    if (nest->fd >= 0)
        close(nest->fd);
}

struct budget {
    uint64_t bytes, entries, skipped;
};

static int apply_layer(const struct src *s, const char *name, int rootfd, struct budget *b,
                       sbx_err *err)
{
    struct nested nest;
    struct archive_entry *e;
    char clean[NAME_MAX_LEN], link[NAME_MAX_LEN];
    /* pass 1: the whiteouts, which only remove what lower layers made */
    struct archive *a = layer_open(s, name, &nest, err);
    if (!a)
        return -1;
    int r;
    while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
        int c = clean_name(archive_entry_pathname(e), clean, sizeof(clean));
        if (c < 0) {
            layer_close(a, &nest, s);
            return sbx_err_set(err, EPERM, "layer %s: entry '%.200s' leaves the root (..)", name,
                               archive_entry_pathname(e));
        }
        if (c > 0 && is_whiteout(clean))
            whiteout(rootfd, clean);
    }
    if (r != ARCHIVE_EOF) {
        sbx_err_set(err, EINVAL, "layer %s: %s", name, archive_error_string(a));
        layer_close(a, &nest, s);
        return -1;
    }
    layer_close(a, &nest, s);
    /* pass 2: everything else, written by libarchive beneath the root
     * (the working directory), refusing .., absolute paths and any write
     * through a symlink; no owner restored, no set-id bit */
    if (!(a = layer_open(s, name, &nest, err)))
        return -1;
    struct archive *disk = archive_write_disk_new();
    if (!disk) {
        layer_close(a, &nest, s);
        return sbx_err_set(err, ENOMEM, "libarchive");
    }
    archive_write_disk_set_options(
        disk, ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                  ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS | ARCHIVE_EXTRACT_UNLINK |
                  ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME);
    int rc = 0;
    while (rc == 0 && (r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
        const char *orig = archive_entry_pathname(e);
        int c = clean_name(orig, clean, sizeof(clean));
        if (c == 0 || is_whiteout(clean))
            continue;
        if (++b->entries > SBX_IMAGE_MAX_ENTRIES) {
            rc = sbx_err_set(err, EFBIG, "more than %d entries", SBX_IMAGE_MAX_ENTRIES);
            break;
        }
        mode_t type = archive_entry_filetype(e);
        const char *hl = archive_entry_hardlink(e);
        if (hl) {
            if (clean_name(hl, link, sizeof(link)) <= 0) {
                rc = sbx_err_set(err, EPERM,
                                 "layer %s: hard link '%.200s' to '%.200s' leaves "
                                 "the root",
                                 name, orig, hl);
                break;
            }
            archive_entry_set_hardlink(e, link);
        } else if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
            b->skipped++; /* device nodes, fifos, sockets: left out */
            continue;
        }
        int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
        if (size < 0 || (uint64_t)size > SBX_IMAGE_MAX_BYTES - b->bytes) {
            rc = sbx_err_set(err, EFBIG,
                             "layer %s: entry '%.200s' (%lld bytes) is more than "
                             "the image may hold (%llu bytes in all)",
                             name, orig, (long long)size, (unsigned long long)SBX_IMAGE_MAX_BYTES);
            break;
        }
        archive_entry_set_pathname(e, clean);
        archive_entry_set_perm(e, archive_entry_perm(e) & 01777);
        archive_entry_set_uid(e, 0);
        archive_entry_set_gid(e, 0);
        if (archive_write_header(disk, e) < ARCHIVE_WARN) {
            rc = sbx_err_set(err, EPERM, "layer %s: entry '%.200s' refused: %s", name, orig,
                             archive_error_string(disk));
            break;
        }
        const void *buf;
        size_t len;
        la_int64_t off;
        int dr;
        while ((dr = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK) {
            if ((b->bytes += len) > SBX_IMAGE_MAX_BYTES) {
                rc = sbx_err_set(err, EFBIG, "more than %llu bytes unpacked",
                                 (unsigned long long)SBX_IMAGE_MAX_BYTES);
                break;
            }
            if (archive_write_data_block(disk, buf, len, off) < ARCHIVE_WARN) {
                rc = sbx_err_set(err, EIO, "layer %s: %s: %s", name, clean,
                                 archive_error_string(disk));
                break;
            }
        }
        if (rc == 0 && dr != ARCHIVE_EOF)
            rc = sbx_err_set(err, EINVAL, "layer %s: %s: %s", name, clean, archive_error_string(a));
        if (rc == 0 && archive_write_finish_entry(disk) < ARCHIVE_WARN)
            rc = sbx_err_set(err, EIO, "layer %s: %s: %s", name, clean, archive_error_string(disk));
    }
    if (rc == 0 && r != ARCHIVE_EOF)
        rc = sbx_err_set(err, EINVAL, "layer %s: %s", name, archive_error_string(a));
    if (archive_write_close(disk) != ARCHIVE_OK && rc == 0)
        rc = sbx_err_set(err, EIO, "layer %s: %s", name, archive_error_string(disk));
    archive_write_free(disk);
    layer_close(a, &nest, s);
    return rc;
}

int sbx_image_prepare(const char *path, const char *cache_dir, char digest[SBX_IMAGE_DIGEST_MAX],
                      char *rootfs, size_t len, sbx_err *err)
{
    struct src s;
    struct manifest m = {0};
    char tmp[4096];
    int rc = -1, cwd = -1, rootfd = -1;
    bool made = false;
    if (sbx_archive_load(err) < 0 || src_open(path, &s, err) < 0)
        return -1;
    if (resolve(&s, &m, true, err) < 0)
        goto out;
    snprintf(digest, SBX_IMAGE_DIGEST_MAX, "%s", m.digest);
    if (mkdir(cache_dir, 0700) < 0 && errno != EEXIST) {
        sbx_err_set(err, errno, "%s", cache_dir);
        goto out;
    }
    if (snprintf(rootfs, len, "%s/%s", cache_dir, m.digest + 7) >= (int)len) {
        sbx_err_set(err, ENAMETOOLONG, "%s", cache_dir);
        goto out;
    }
    struct stat st;
    if (lstat(rootfs, &st) == 0 && S_ISDIR(st.st_mode)) {
        rc = 0; /* unpacked before */
        goto out;
    }
    snprintf(tmp, sizeof(tmp), "%s/.tmp-%s-%d", cache_dir, m.digest + 7, (int)getpid());
    if (mkdir(tmp, 0755) < 0 ||
        (made = true, rootfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
        (cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0 || fchdir(rootfd) < 0) {
        sbx_err_set(err, errno, "%s", tmp);
        goto out;
    }
    struct budget b = {0};
    umask(022);
    for (size_t i = 0; m.layers[i]; i++)
        if (apply_layer(&s, m.layers[i], rootfd, &b, err) < 0)
            goto out;
    if (fchmod(rootfd, 0755) < 0 || rename(tmp, rootfs) < 0) {
        if (errno != EEXIST && errno != ENOTEMPTY) {
            sbx_err_set(err, errno, "%s", rootfs);
            goto out;
        }
    } else {
        made = false;
    }
    rc = 0;
out:
    if (cwd >= 0) {
        if (fchdir(cwd) < 0)
            rc = sbx_err_set(err, errno, "back to the working directory");
        close(cwd);
    }
    if (rootfd >= 0)
        close(rootfd);
    if (made) {
        int cd = open(cache_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (cd >= 0) {
            rm_tree(cd, strrchr(tmp, '/') + 1);
            close(cd);
        }
    }
    if (s.dirfd >= 0)
        close(s.dirfd);
    manifest_free(&m);
    return rc;
}
