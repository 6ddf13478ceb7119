/* Workspace quotas, for real: each test gets a fresh temporary tree
 *   <base>/images/             the images directory
 *   <base>/state/              stands for the daemon's state directory
 *   <base>/root/t1/k1/cN/work  clone workspaces (made by sbx_ws_ensure)
 * and runs as root with real loop devices, mkfs.ext4 and mounts. There is no
 * skip: without /dev/loop-control or mkfs.ext4 the tests fail. Teardown
 * unmounts every workspace and removes the tree even after a failure. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "path_util.h"

#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "workspace/files.h"
#include "workspace/quota.h"

#define UID 123456
#define GID 123457
#define MiB (1024ull * 1024)
#define SIZE (64 * MiB)
#define NCLONES 3

struct fx {
    char base[PATH_MAX];
    char images[PATH_MAX];
    char state[PATH_MAX];
    char root[PATH_MAX];
    char ws[NCLONES][PATH_MAX];
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    strcpy(f->base, "/tmp/sbx-quota-XXXXXX");
    assert_non_null(mkdtemp(f->base));
    pathf(f->images, sizeof(f->images), "%s/images", f->base);
    pathf(f->state, sizeof(f->state), "%s/state", f->base);
    pathf(f->root, sizeof(f->root), "%s/root", f->base);
    assert_int_equal(mkdir(f->images, 0700), 0);
    assert_int_equal(mkdir(f->state, 0700), 0);
    assert_int_equal(mkdir(f->root, 0755), 0);
    for (int i = 0; i < NCLONES; i++) {
        char id[8];
        snprintf(id, sizeof(id), "c%d", i + 1);
        sbx_err err = {0};
        int fd = -1;
        assert_int_equal(sbx_ws_ensure(f->root, "t1", "k1", id, UID, GID, &fd, &err), 0);
        close(fd);
        pathf(f->ws[i], sizeof(f->ws[i]), "%s/t1/k1/%s/work", f->root, id);
    }
    *state = f;
    return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    for (int i = 0; i < NCLONES; i++)
        while (umount2(f->ws[i], MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
            ;
    nftw(f->base, rm_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    free(f);
    return 0;
}

static void ensure_ok(const char *images, const char *ws)
{
    sbx_err err = {0};
    int rc = sbx_ws_quota_ensure(images, ws, SIZE, UID, GID, &err);
    if (rc < 0) {
        char buf[512];
        fail_msg("ensure \"%s\": %s", ws, sbx_err_format(&err, buf, sizeof(buf)));
    }
}

static bool is_mount(const char *ws, dev_t *dev)
{
    struct stat a, b;
    assert_int_equal(stat(ws, &a), 0);
    assert_int_equal(stat(at(ws, ".."), &b), 0);
    if (dev)
        *dev = a.st_dev;
    return a.st_dev != b.st_dev;
}

/* Lines of /proc/self/mountinfo whose mount point is path (no escapes in
 * our paths): more than one would mean stacked mounts. */
static int mount_count(const char *path)
{
    FILE *fp = fopen("/proc/self/mountinfo", "re");
    assert_non_null(fp);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof(line), fp)) {
        char mp[PATH_MAX];
        if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1 && strcmp(mp, path) == 0)
            n++;
    }
    fclose(fp);
    return n;
}

static void image_path(const struct fx *f, const char *ws, char *out, size_t len)
{
    char name[SBX_WS_QUOTA_NAME_MAX + 1];
    assert_int_equal(sbx_ws_quota_image_name(ws, name, NULL), 0);
    pathf(out, len, "%s/%s", f->images, name);
}

/* Write up to max bytes to <dir>/<name> as uid:gid from a child (setresuid,
 * as a task would), 1 MiB at a time, fsync at the end. Returns the errno
 * that stopped it (0: all written) and the bytes written. */
static int fill_as(const char *dir, const char *name, uid_t uid, gid_t gid, uint64_t max,
                   uint64_t *written)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        struct {
            int err;
            uint64_t n;
        } r = {0, 0};
        /* The directory is opened as root (the test tree's parents are not
         * the clone's to traverse, as /workspace's are not on the host). */
        int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 ||
            setresuid(uid, uid, uid) < 0)
            r.err = errno ? errno : EPERM;
        int fd = r.err ? -1 : openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (!r.err && fd < 0)
            r.err = errno;
        static char buf[1 << 20];
        memset(buf, 'x', sizeof(buf));
        while (!r.err && r.n < max) {
            size_t want = max - r.n < sizeof(buf) ? (size_t)(max - r.n) : sizeof(buf);
            ssize_t w = write(fd, buf, want);
            if (w < 0) {
                r.err = errno;
                break;
            }
            r.n += (uint64_t)w;
        }
        if (!r.err && fsync(fd) < 0)
            r.err = errno;
        if (write(p[1], &r, sizeof(r)) != (ssize_t)sizeof(r))
            _exit(2);
        _exit(0);
    }
    close(p[1]);
    struct {
        int err;
        uint64_t n;
    } r = {-1, 0};
    assert_int_equal(read(p[0], &r, sizeof(r)), (ssize_t)sizeof(r));
    close(p[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    *written = r.n;
    return r.err;
}

static void write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    assert_int_equal(fsync(fd), 0);
    close(fd);
}

static void assert_file(const char *path, const char *text)
{
    char buf[256] = "";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    assert_true(n >= 0);
    buf[n] = '\0';
    assert_string_equal(buf, text);
}

/* ---- tests ---- */

static void test_fresh_mount(void **state)
{
    struct fx *f = *state;
    assert_false(is_mount(f->ws[0], NULL));
    double t0 = now_ms();
    ensure_ok(f->images, f->ws[0]);
    double t1 = now_ms();
    assert_true(is_mount(f->ws[0], NULL));
    assert_int_equal(mount_count(f->ws[0]), 1);

    /* Root of the filesystem: the clone's, 0700; no lost+found. */
    struct stat st;
    assert_int_equal(stat(f->ws[0], &st), 0);
    assert_int_equal(st.st_uid, UID);
    assert_int_equal(st.st_gid, GID);
    assert_int_equal(st.st_mode & 07777, 0700);
    assert_int_equal(lstat(at(f->ws[0], "lost+found"), &st), -1);
    assert_int_equal(errno, ENOENT);

    /* nosuid, nodev; the size is the quota (minus ext4's metadata). */
    struct statvfs sv;
    assert_int_equal(statvfs(f->ws[0], &sv), 0);
    assert_true(sv.f_flag & ST_NOSUID);
    assert_true(sv.f_flag & ST_NODEV);
    uint64_t used, total;
    sbx_err err = {0};
    assert_int_equal(sbx_ws_quota_usage(f->ws[0], &used, &total, &err), 0);
    assert_true(total > 52 * MiB && total <= SIZE);
    assert_true(used < 8 * MiB);

    /* A sparse image of the quota's size, only in images_dir. */
    char img[PATH_MAX];
    image_path(f, f->ws[0], img, sizeof(img));
    assert_int_equal(stat(img, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal((uint64_t)st.st_size, SIZE);
    assert_true((uint64_t)st.st_blocks * 512 < 16 * MiB);
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof(tmp), "%s.tmp", img);
    assert_int_equal(stat(tmp, &st), -1);

    /* Timings for the report: mkfs+mount, then a plain remount. */
    assert_int_equal(sbx_ws_quota_release(f->ws[0], &err), 0);
    double t2 = now_ms();
    ensure_ok(f->images, f->ws[0]);
    double t3 = now_ms();
    fprintf(stderr, "# 64 MiB: create+mkfs+mount %.1f ms, attach+mount %.1f ms\n", t1 - t0,
            t3 - t2);
}

static void test_fill_enospc(void **state)
{
    struct fx *f = *state;
    ensure_ok(f->images, f->ws[0]);
    struct statvfs before;
    assert_int_equal(statvfs(f->state, &before), 0);

    uint64_t n = 0;
    int e = fill_as(f->ws[0], "big", UID, GID, 80 * MiB, &n);
    if (e != ENOSPC && e != EDQUOT)
        fail_msg("filling the workspace: %s after %llu bytes", e ? strerror(e) : "no error",
                 (unsigned long long)n);
    assert_true(n < SIZE);
    assert_true(n > 40 * MiB);

    uint64_t used, total;
    sbx_err err = {0};
    assert_int_equal(sbx_ws_quota_usage(f->ws[0], &used, &total, &err), 0);
    assert_true(used + 2 * MiB >= total);

    /* The state directory's filesystem: writable, and the full workspace
     * took from it at most the image's size. */
    uint64_t w = 0;
    assert_int_equal(fill_as(f->state, "db", 0, 0, 4 * MiB, &w), 0);
    assert_int_equal(w, 4 * MiB);
    struct statvfs after;
    assert_int_equal(statvfs(f->state, &after), 0);
    if (after.f_fsid == before.f_fsid && before.f_bavail > after.f_bavail) {
        uint64_t taken = (uint64_t)(before.f_bavail - after.f_bavail) * before.f_frsize;
        assert_true(taken < SIZE + 32 * MiB);
    }
}

static void test_ensure_idempotent(void **state)
{
    struct fx *f = *state;
    ensure_ok(f->images, f->ws[0]);
    dev_t dev1, dev2;
    assert_true(is_mount(f->ws[0], &dev1));
    write_file(at(f->ws[0], "keep"), "kept\n");
    char img[PATH_MAX];
    image_path(f, f->ws[0], img, sizeof(img));
    struct stat i1, i2;
    assert_int_equal(stat(img, &i1), 0);

    /* The owner's mode drifted: the next ensure puts it back. */
    assert_int_equal(chmod(f->ws[0], 0755), 0);
    ensure_ok(f->images, f->ws[0]);
    assert_true(is_mount(f->ws[0], &dev2));
    assert_int_equal(dev1, dev2);
    assert_int_equal(mount_count(f->ws[0]), 1);
    assert_file(at(f->ws[0], "keep"), "kept\n");
    assert_int_equal(stat(img, &i2), 0);
    assert_int_equal(i1.st_ino, i2.st_ino);
    struct stat st;
    assert_int_equal(stat(f->ws[0], &st), 0);
    assert_int_equal(st.st_mode & 07777, 0700);

    /* sbx_ws_ensure still works on a mounted workspace. */
    sbx_err err = {0};
    int fd = -1;
    assert_int_equal(sbx_ws_ensure(f->root, "t1", "k1", "c1", UID, GID, &fd, &err), 0);
    assert_int_equal(fstat(fd, &st), 0);
    close(fd);
    assert_int_equal(st.st_dev, dev1);
}

static void test_release_remount(void **state)
{
    struct fx *f = *state;
    ensure_ok(f->images, f->ws[0]);
    write_file(at(f->ws[0], "keep"), "kept\n");
    char img[PATH_MAX];
    image_path(f, f->ws[0], img, sizeof(img));
    struct stat i1, i2, st;
    assert_int_equal(stat(img, &i1), 0);

    sbx_err err = {0};
    assert_int_equal(sbx_ws_quota_release(f->ws[0], &err), 0);
    assert_false(is_mount(f->ws[0], NULL));
    assert_int_equal(stat(at(f->ws[0], "keep"), &st), -1);
    assert_int_equal(sbx_ws_quota_release(f->ws[0], &err), 0); /* again: no-op */

    /* The image is reused as it is, not reformatted. */
    ensure_ok(f->images, f->ws[0]);
    assert_true(is_mount(f->ws[0], NULL));
    assert_file(at(f->ws[0], "keep"), "kept\n");
    assert_int_equal(stat(img, &i2), 0);
    assert_int_equal(i1.st_ino, i2.st_ino);
    assert_int_equal(mount_count(f->ws[0]), 1);
}

/* Released while a file in it is still open (lazy unmount): the loop device
 * is still attached, and ensure must mount that one again (sharing its
 * superblock), never attach the image a second time. */
static void test_release_busy_remount(void **state)
{
    struct fx *f = *state;
    ensure_ok(f->images, f->ws[0]);
    dev_t dev1, dev2;
    assert_true(is_mount(f->ws[0], &dev1));
    int fd = open(at(f->ws[0], "open"), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    sbx_err err = {0};
    assert_int_equal(sbx_ws_quota_release(f->ws[0], &err), 0);
    assert_false(is_mount(f->ws[0], NULL));

    ensure_ok(f->images, f->ws[0]);
    assert_true(is_mount(f->ws[0], &dev2));
    assert_int_equal(dev1, dev2);
    assert_int_equal(write(fd, "late\n", 5), 5);
    close(fd);
    assert_file(at(f->ws[0], "open"), "late\n");
}

static void test_two_clones(void **state)
{
    struct fx *f = *state;
    ensure_ok(f->images, f->ws[0]);
    ensure_ok(f->images, f->ws[1]);
    dev_t d1, d2;
    assert_true(is_mount(f->ws[0], &d1));
    assert_true(is_mount(f->ws[1], &d2));
    assert_int_not_equal(d1, d2);
    char i1[PATH_MAX], i2[PATH_MAX];
    image_path(f, f->ws[0], i1, sizeof(i1));
    image_path(f, f->ws[1], i2, sizeof(i2));
    assert_string_not_equal(i1, i2);

    uint64_t n = 0;
    int e = fill_as(f->ws[0], "big", UID, GID, 80 * MiB, &n);
    if (e != ENOSPC && e != EDQUOT)
        fail_msg("filling clone 1: %s after %llu bytes", e ? strerror(e) : "no error",
                 (unsigned long long)n);
    assert_int_equal(fill_as(f->ws[1], "small", UID, GID, 16 * MiB, &n), 0);
    assert_int_equal(n, 16 * MiB);
}

static void test_errors(void **state)
{
    struct fx *f = *state;
    char buf[512];

    sbx_err err = {0};
    const char *bad = at(f->base, "no-such-images");
    assert_int_equal(sbx_ws_quota_ensure(bad, f->ws[0], SIZE, UID, GID, &err), -1);
    assert_int_equal(err.errnum, ENOENT);
    assert_non_null(strstr(sbx_err_format(&err, buf, sizeof(buf)), bad));
    assert_false(is_mount(f->ws[0], NULL));

    memset(&err, 0, sizeof(err));
    assert_int_equal(sbx_ws_quota_ensure(f->images, f->ws[0], 16 * MiB - 4096, UID, GID, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    assert_non_null(strstr(err.msg, "16 MiB"));
    assert_false(is_mount(f->ws[0], NULL));

    memset(&err, 0, sizeof(err));
    assert_int_equal(sbx_ws_quota_ensure(f->images, "rel/work", SIZE, UID, GID, &err), -1);
    assert_int_equal(err.errnum, EINVAL);

    /* Something else mounted there: refused, not stacked over. */
    assert_int_equal(mount("tmpfs", f->ws[2], "tmpfs", 0, "size=1m"), 0);
    memset(&err, 0, sizeof(err));
    assert_int_equal(sbx_ws_quota_ensure(f->images, f->ws[2], SIZE, UID, GID, &err), -1);
    assert_int_equal(err.errnum, EBUSY);
    assert_string_equal(err.stage, "mount");
    assert_int_equal(mount_count(f->ws[2]), 1);
    memset(&err, 0, sizeof(err));
    assert_int_equal(sbx_ws_quota_release(f->ws[2], &err), -1);
    assert_int_equal(umount2(f->ws[2], 0), 0);

    /* No image was left behind by the failures. */
    char img[PATH_MAX];
    struct stat st;
    image_path(f, f->ws[0], img, sizeof(img));
    assert_int_equal(stat(img, &st), -1);
}

/* A 1 GiB image (the default quota): sparse, cheap to make. */
static void test_default_size(void **state)
{
    struct fx *f = *state;
    sbx_err err = {0};
    double t0 = now_ms();
    int rc = sbx_ws_quota_ensure(f->images, f->ws[0], 1024 * MiB, UID, GID, &err);
    double t1 = now_ms();
    char buf[512];
    if (rc < 0)
        fail_msg("%s", sbx_err_format(&err, buf, sizeof(buf)));
    uint64_t used, total;
    assert_int_equal(sbx_ws_quota_usage(f->ws[0], &used, &total, &err), 0);
    char img[PATH_MAX];
    struct stat st;
    image_path(f, f->ws[0], img, sizeof(img));
    assert_int_equal(stat(img, &st), 0);
    fprintf(stderr,
            "# 1 GiB: create+mkfs+mount %.1f ms; usable %.1f MiB, used %.1f MiB, image takes "
            "%.1f MiB on the host\n",
            t1 - t0, (double)total / MiB, (double)used / MiB, (double)st.st_blocks * 512 / MiB);
    assert_true(total > 940 * MiB);
    assert_true((uint64_t)st.st_blocks * 512 < 64 * MiB);
}

static void test_image_name(void **state)
{
    (void)state;
    char a[SBX_WS_QUOTA_NAME_MAX + 1], b[SBX_WS_QUOTA_NAME_MAX + 1];
    assert_int_equal(sbx_ws_quota_image_name("", a, NULL), 0);
    /* SHA-256("") */
    assert_string_equal(a, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855.img");
    assert_int_equal(sbx_ws_quota_image_name("abc", a, NULL), 0);
    assert_string_equal(a, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad.img");
    /* FIPS 180-4's two-block message: 56 bytes, the padding needs a second block */
    assert_int_equal(sbx_ws_quota_image_name(
                         "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", a, NULL),
                     0);
    assert_string_equal(a, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1.img");
    /* The name of an existing clone's image, as released versions made it:
     * it must never change, or the clone's workspace is lost. */
    assert_int_equal(
        sbx_ws_quota_image_name("/var/lib/sandboxd/clones/acme/repo-key/c0ffee/work/", a, NULL), 0);
    assert_string_equal(a, "10ba94d318219e20d8c0f2243ea2c8f8736d7a7849b771769c458ae9ab8a5808.img");
    assert_int_equal(sbx_ws_quota_image_name("/r/t/k/c/work", a, NULL), 0);
    assert_int_equal(sbx_ws_quota_image_name("/r/t/k/c/work//", b, NULL), 0);
    assert_string_equal(a, b);
    assert_int_equal(sbx_ws_quota_image_name("/r/t/kc/work", b, NULL), 0);
    assert_string_not_equal(a, b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_image_name),
        cmocka_unit_test_setup_teardown(test_fresh_mount, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fill_enospc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ensure_idempotent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_remount, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_busy_remount, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_clones, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_default_size, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
