/* Workspace files, for real: each test gets a fresh temporary tree
 *   <base>/root/t1/k1/c1/work   the workspace (made by sbx_ws_ensure)
 *   <base>/outside/             a "host" directory with a secret, which no
 *                               operation may ever read, write or delete
 * and runs as root, so a failed confinement would really reach the host.
 * The attacks are SECURITY.md probe 22 (and the symlink-race escape class). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "path_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "workspace/files.h"

#define UID 123456
#define GID 123457
#define SECRET "host secret\n"

struct fx {
    char base[PATH_MAX];
    char root[PATH_MAX];
    char ws[PATH_MAX];
    char outside[PATH_MAX];
    int ws_fd;
};

/* ---- helpers ---- */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

static const char *slurp(const char *path)
{
    static char buf[4096];
    FILE *f = fopen(path, "r");
    if (!f)
        return "<missing>";
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Names in a host directory, sorted, joined by ","; "<missing>" if none. */
static const char *names(const char *dir)
{
    static char out[4096];
    struct dirent **v;
    int n = scandir(dir, &v, NULL, alphasort);
    if (n < 0)
        return "<missing>";
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (strcmp(v[i]->d_name, ".") && strcmp(v[i]->d_name, "..")) {
            if (out[0])
                strcat(out, ",");
            strcat(out, v[i]->d_name);
        }
        free(v[i]);
    }
    free(v);
    return out;
}

static void mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    pathf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        assert_true(mkdir(buf, 0755) == 0 || errno == EEXIST);
        *p = '/';
    }
    assert_true(mkdir(buf, 0755) == 0 || errno == EEXIST);
}

/* A parsed user path (a few live at once). */
static const struct sbx_ws_path *P(const char *s)
{
    static struct sbx_ws_path v[4];
    static int next;
    struct sbx_ws_path *p = &v[next++ % 4];
    sbx_err err = {0};
    if (sbx_ws_path_parse(s, strlen(s), p, &err) < 0)
        fail_msg("path \"%s\": %s", s, err.msg);
    return p;
}

static int upload(struct fx *f, const char *path, const char *text, sbx_err *err)
{
    struct sbx_ws_upload up;
    if (sbx_ws_upload_begin(f->ws_fd, P(path), UID, GID, &up, err) < 0)
        return -1;
    if (sbx_ws_upload_write(&up, text, strlen(text), err) < 0) {
        sbx_ws_upload_abort(&up);
        return -1;
    }
    return sbx_ws_upload_commit(&up, err);
}

/* The whole file through the download API, or NULL with err. */
static const char *download(struct fx *f, const char *path, sbx_err *err)
{
    static char buf[8192];
    struct sbx_ws_download dl;
    if (sbx_ws_download_open(f->ws_fd, P(path), &dl, err) < 0)
        return NULL;
    size_t n = 0;
    for (;;) {
        ssize_t r = sbx_ws_download_read(&dl, buf + n, sizeof(buf) - 1 - n, err);
        if (r < 0) {
            sbx_ws_download_close(&dl);
            return NULL;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    sbx_ws_download_close(&dl);
    buf[n] = '\0';
    return buf;
}

static void expect_errno(int rc, const sbx_err *err, int errnum)
{
    assert_int_equal(rc, -1);
    if (err->errnum != errnum)
        fail_msg("expected %s, got %s: %s", sbx_errno_name(errnum), sbx_errno_name(err->errnum),
                 err->msg);
}

/* The outside directory still holds exactly its secret (and keep/inner). */
static void outside_untouched(struct fx *f)
{
    assert_string_equal(names(f->outside), "keep,secret");
    assert_string_equal(slurp(at(f->outside, "secret")), SECRET);
    assert_string_equal(names(at(f->outside, "keep")), "inner");
    struct stat st;
    assert_int_equal(stat(at(f->outside, "secret"), &st), 0);
    assert_int_equal(st.st_uid, 0);
    assert_int_equal(st.st_mode & 07777, 0600);
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    remove(path);
    return 0;
}

static int setup(void **state)
{
    /* Ownership and mounts need root: without it each test says it skipped. */
    *state = NULL;
    if (geteuid() != 0)
        return 0;
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    pathf(f->base, sizeof(f->base), "/tmp/sbx-wsfiles-XXXXXX");
    assert_non_null(mkdtemp(f->base));
    pathf(f->root, sizeof(f->root), "%s/root", f->base);
    pathf(f->outside, sizeof(f->outside), "%s/outside", f->base);
    pathf(f->ws, sizeof(f->ws), "%s/t1/k1/c1/work", f->root);
    assert_int_equal(mkdir(f->root, 0755), 0);
    assert_int_equal(mkdir(f->outside, 0755), 0);
    write_file(at(f->outside, "secret"), SECRET);
    assert_int_equal(chmod(at(f->outside, "secret"), 0600), 0);
    assert_int_equal(mkdir(at(f->outside, "keep"), 0755), 0);
    write_file(at(f->outside, "keep/inner"), "inner\n");
    sbx_err err = {0};
    f->ws_fd = -1;
    if (sbx_ws_ensure(f->root, "t1", "k1", "c1", UID, GID, &f->ws_fd, &err) < 0)
        fail_msg("ensure: %s", err.msg);
    *state = f;
    return 0;
}

static struct fx *fixture(void **state)
{
    if (!*state)
        skip();
    return *state;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    if (!f)
        return 0;
    if (f->ws_fd >= 0)
        close(f->ws_fd);
    nftw(f->base, rm_cb, 32, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

/* ---- workspace creation ---- */

static void check_dir(const char *path, unsigned mode, uid_t uid, gid_t gid)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        fail_msg("%s: missing", path);
    assert_true(S_ISDIR(st.st_mode));
    if ((st.st_mode & 07777) != mode || st.st_uid != uid || st.st_gid != gid)
        fail_msg("%s: mode %o owner %u:%u", path, st.st_mode & 07777, st.st_uid, st.st_gid);
}

static void test_ensure(void **state)
{
    struct fx *f = fixture(state);
    check_dir(at(f->root, "t1"), 0750, 0, 0);
    check_dir(at(f->root, "t1/k1"), 0750, 0, 0);
    check_dir(at(f->root, "t1/k1/c1"), 0750, 0, 0);
    check_dir(f->ws, 0700, UID, GID);
    /* ws_fd is an O_PATH fd of work. */
    struct stat a, b;
    assert_int_equal(fstat(f->ws_fd, &a), 0);
    assert_int_equal(stat(f->ws, &b), 0);
    assert_true(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
    assert_int_equal(fcntl(f->ws_fd, F_GETFL) & O_PATH, O_PATH);

    /* Again: same directory; an owner gone wrong is put right; modes are
     * exact whatever the umask. */
    assert_int_equal(chown(f->ws, 0, 0), 0);
    mode_t old = umask(077);
    int fd = -1;
    sbx_err err = {0};
    assert_int_equal(sbx_ws_ensure(f->root, "t1", "k1", "c1", UID, GID, &fd, &err), 0);
    close(fd);
    check_dir(f->ws, 0700, UID, GID);
    /* Without a cloneKey. */
    assert_int_equal(sbx_ws_ensure(f->root, "t1", NULL, "c2", UID + 1, GID + 1, &fd, &err), 0);
    close(fd);
    umask(old);
    check_dir(at(f->root, "t1/c2"), 0750, 0, 0);
    check_dir(at(f->root, "t1/c2/work"), 0700, UID + 1, GID + 1);
    assert_string_equal(names(at(f->root, "t1")), "c2,k1");
}

static void test_ensure_refuses(void **state)
{
    struct fx *f = fixture(state);
    sbx_err err = {0};
    int fd = -1;
    /* A symlink planted at a step is never followed. */
    assert_int_equal(symlink(f->outside, at(f->root, "evil")), 0);
    expect_errno(sbx_ws_ensure(f->root, "evil", NULL, "c1", UID, GID, &fd, &err), &err, ELOOP);
    assert_int_equal(mkdir(at(f->root, "t2"), 0750), 0);
    assert_int_equal(mkdir(at(f->root, "t2/c1"), 0750), 0);
    assert_int_equal(symlink(f->outside, at(f->root, "t2/c1/work")), 0);
    expect_errno(sbx_ws_ensure(f->root, "t2", NULL, "c1", UID, GID, &fd, &err), &err, ELOOP);
    /* A file where a directory should be. */
    write_file(at(f->root, "t3"), "");
    expect_errno(sbx_ws_ensure(f->root, "t3", NULL, "c1", UID, GID, &fd, &err), &err, ENOTDIR);
    /* Bad segments, a missing root. */
    expect_errno(sbx_ws_ensure(f->root, "t1", "..", "c1", UID, GID, &fd, &err), &err, EINVAL);
    assert_string_equal(err.msg, "cloneKey \"..\": not a valid name");
    expect_errno(sbx_ws_ensure(f->root, "t1", "k1", "a/b", UID, GID, &fd, &err), &err, EINVAL);
    expect_errno(sbx_ws_ensure(at(f->base, "nope"), "t1", "k1", "c1", UID, GID, &fd, &err), &err,
                 ENOENT);
    assert_int_equal(fd, -1);
    outside_untouched(f);
}

/* ---- probe 22: paths and planted symlinks ---- */

static void test_dotdot_and_absolute(void **state)
{
    struct fx *f = fixture(state);
    const char *dots[] = {"..", "../x", "a/../../x", "/..", "../../../../etc/passwd"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(dots); i++) {
        struct sbx_ws_path p;
        sbx_err err = {0};
        expect_errno(sbx_ws_path_parse(dots[i], strlen(dots[i]), &p, &err), &err, EINVAL);
    }
    /* "/etc/passwd" is the workspace's etc/passwd, not the host's. */
    sbx_err err = {0};
    assert_null(download(f, "/etc/passwd", &err));
    assert_int_equal(err.errnum, ENOENT);
    struct sbx_ws_stat st;
    expect_errno(sbx_ws_stat(f->ws_fd, P("/etc/passwd"), true, &st, &err), &err, ENOENT);
    assert_int_equal(mkdir(at(f->ws, "etc"), 0755), 0);
    write_file(at(f->ws, "etc/passwd"), "in the workspace\n");
    const char *got = download(f, "/etc/passwd", &err);
    assert_non_null(got);
    assert_string_equal(got, "in the workspace\n");
    /* An upload to an absolute path lands in the workspace too. */
    assert_int_equal(upload(f, "/etc/hostname", "ws", &err), 0);
    assert_string_equal(slurp(at(f->ws, "etc/hostname")), "ws");
}

static void test_symlink_to_host_file(void **state)
{
    struct fx *f = fixture(state);
    sbx_err err = {0};
    struct sbx_ws_stat st;
    assert_int_equal(symlink("/etc/passwd", at(f->ws, "link")), 0);
    assert_int_equal(symlink(at(f->outside, "secret"), at(f->ws, "abs")), 0);
    assert_int_equal(symlink("../../../../../../../../outside/secret", at(f->ws, "rel")), 0);
    assert_int_equal(symlink("../../../../../../../../../..", at(f->ws, "up")), 0);
    const char *links[] = {"link", "abs", "rel"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(links); i++) {
        assert_null(download(f, links[i], &err));
        assert_int_equal(err.errnum, ENOENT);
        expect_errno(sbx_ws_stat(f->ws_fd, P(links[i]), true, &st, &err), &err, ENOENT);
        assert_int_equal(sbx_ws_stat(f->ws_fd, P(links[i]), false, &st, &err), 0);
        assert_int_equal(st.type, SBX_WS_SYMLINK);
    }
    /* Through a directory symlink that climbs: clamped at the workspace root. */
    assert_null(download(f, "up/etc/passwd", &err));
    assert_int_equal(err.errnum, ENOENT);
    char via_up[PATH_MAX];
    pathf(via_up, sizeof(via_up), "up%s", at(f->outside, "secret"));
    assert_null(download(f, via_up, &err));
    assert_int_equal(err.errnum, ENOENT);
    /* The in-root target, once it exists, is what the link gives. */
    assert_int_equal(mkdir(at(f->ws, "etc"), 0755), 0);
    write_file(at(f->ws, "etc/passwd"), "inside\n");
    assert_string_equal(download(f, "link", &err), "inside\n");
    assert_string_equal(download(f, "up/etc/passwd", &err), "inside\n");
    outside_untouched(f);
}

static void test_symlink_dotdot_write(void **state)
{
    struct fx *f = fixture(state);
    sbx_err err = {0};
    const char *parent_before = strdup(names(at(f->root, "t1/k1/c1")));
    const char *base_before = strdup(names(f->base));
    assert_int_equal(symlink("../../", at(f->ws, "up")), 0);
    assert_int_equal(symlink(f->base, at(f->ws, "abs")), 0);
    assert_int_equal(upload(f, "up/evil", "x", &err), 0);
    assert_int_equal(upload(f, "up/up/up/evil2", "y", &err), 0);
    /* abs dangles inside the workspace: like mkdir -p, no parent is made
     * through a dangling symlink. */
    expect_errno(upload(f, "abs/evil3", "z", &err), &err, ENOENT);
    mkdir_p(at(f->ws, f->base + 1));
    assert_int_equal(upload(f, "abs/evil3", "z", &err), 0);
    assert_int_equal(upload(f, "abs/outside/secret", "overwritten?", &err), 0);
    /* All of it landed inside the workspace. */
    assert_string_equal(slurp(at(f->ws, "evil")), "x");
    assert_string_equal(slurp(at(f->ws, "evil2")), "y");
    assert_string_equal(slurp(at(f->ws, at(f->base + 1, "evil3"))), "z");
    assert_string_equal(slurp(at(f->ws, at(f->base + 1, "outside/secret"))), "overwritten?");
    /* And nothing outside it. */
    assert_string_equal(names(at(f->root, "t1/k1/c1")), parent_before);
    assert_string_equal(names(f->base), base_before);
    assert_string_equal(names(f->root), "t1");
    outside_untouched(f);
    free((void *)parent_before);
    free((void *)base_before);
}

static void test_symlink_final_component(void **state)
{
    struct fx *f = fixture(state);
    sbx_err err = {0};
    assert_int_equal(symlink(at(f->outside, "secret"), at(f->ws, "target")), 0);
    assert_int_equal(symlink("../../../../../outside/victim", at(f->ws, "dangling")), 0);
    assert_int_equal(symlink(at(f->outside, "victim2"), at(f->ws, "dangling2")), 0);
    assert_int_equal(upload(f, "target", "new", &err), 0);
    assert_int_equal(upload(f, "dangling", "new", &err), 0);
    assert_int_equal(upload(f, "dangling2", "new", &err), 0);
    /* The links were replaced, never written through. */
    const char *names_[] = {"target", "dangling", "dangling2"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(names_); i++) {
        struct stat st;
        assert_int_equal(lstat(at(f->ws, names_[i]), &st), 0);
        assert_true(S_ISREG(st.st_mode));
        assert_string_equal(slurp(at(f->ws, names_[i])), "new");
    }
    outside_untouched(f);
}

static void test_dir_symlink_swapped_mid_path(void **state)
{
    struct fx *f = fixture(state);
    sbx_err err = {0};
    assert_int_equal(mkdir(at(f->ws, "a"), 0755), 0);
    assert_int_equal(mkdir(at(f->ws, "a/b"), 0755), 0);
    struct sbx_ws_upload up;
    assert_int_equal(sbx_ws_upload_begin(f->ws_fd, P("a/b/f"), UID, GID, &up, &err), 0);
    /* The task swaps a for a symlink to the host between begin and commit. */
    assert_int_equal(rename(at(f->ws, "a"), at(f->ws, "a.old")), 0);
    assert_int_equal(symlink(f->outside, at(f->ws, "a")), 0);
    assert_int_equal(sbx_ws_upload_write(&up, "data", 4, &err), 0);
    assert_int_equal(sbx_ws_upload_commit(&up, &err), 0);
    assert_string_equal(slurp(at(f->ws, "a.old/b/f")), "data");
    assert_string_equal(names(at(f->ws, "a.old/b")), "f");
    /* Every later operation through the swapped link stays inside. */
    assert_null(download(f, "a/secret", &err));
    assert_int_equal(err.errnum, ENOENT);
    struct sbx_ws_listing l;
    expect_errno(sbx_ws_list(f->ws_fd, P("a"), 0, &l, &err), &err, ENOENT);
    expect_errno(upload(f, "a/secret", "pwned", &err), &err, ENOENT);
    expect_errno(upload(f, "a/keep/new", "pwned", &err), &err, ENOENT);
    expect_errno(sbx_ws_delete(f->ws_fd, P("a/secret"), &err), &err, ENOENT);
    expect_errno(sbx_ws_delete(f->ws_fd, P("a/keep"), &err), &err, ENOENT);
    outside_untouched(f);
    /* And the link itself is what a delete of it removes. */
    assert_int_equal(sbx_ws_delete(f->ws_fd, P("a"), &err), 0);
    assert_false(exists(at(f->ws, "a")));
    outside_untouched(f);
}

/* The race itself: a child swaps a real directory and a symlink to the host
 * (atomically, RENAME_EXCHANGE) as fast as it can, while every operation runs
 * through that name again and again. Whatever each one returns, nothing
 * outside the workspace is ever read, written or deleted. */
static void test_symlink_race(void **state)
{
    struct fx *f = fixture(state);
    assert_int_equal(mkdir(at(f->ws, "a"), 0755), 0);
    assert_int_equal(mkdir(at(f->ws, "a/b"), 0755), 0);
    assert_int_equal(symlink(f->outside, at(f->ws, "s")), 0);
    pid_t parent = getpid();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* Never outlive the test, even one that fails mid-loop. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
            _exit(1);
        for (;;)
            renameat2(AT_FDCWD, at(f->ws, "a"), AT_FDCWD, at(f->ws, "s"), RENAME_EXCHANGE);
    }
    /* No assert while the child runs: results are checked after it is gone. */
    unsigned ok = 0, wrong = 0;
    for (int i = 0; i < 2000; i++) {
        sbx_err err = {0};
        struct sbx_ws_listing l;
        const char *got;
        ok += upload(f, "a/b/f", "race", &err) == 0;
        ok += upload(f, "a/secret", "race", &err) == 0;
        ok += upload(f, "a/keep/inner", "race", &err) == 0;
        if ((got = download(f, "a/secret", &err)) && strcmp(got, "race") != 0)
            wrong++;
        if ((got = download(f, "a/keep/inner", &err)) && strcmp(got, "race") != 0)
            wrong++;
        if (sbx_ws_list(f->ws_fd, P("a/keep"), 0, &l, &err) == 0)
            sbx_ws_listing_free(&l);
        ok += sbx_ws_delete(f->ws_fd, P("a/keep"), &err) == 0;
        ok += sbx_ws_delete(f->ws_fd, P("a/b"), &err) == 0;
    }
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    assert_int_equal(wrong, 0); /* a download never gave the host's content */
    assert_true(ok > 0);        /* the race did let operations through, inside */
    outside_untouched(f);
}

/* Reached only if a download blocked on the FIFO: fail loudly, at once. */
static void on_alarm(int sig)
{
    static const char msg[] = "test_fifo_and_socket_refused: blocked opening a FIFO\n";
    (void)sig;
    ssize_t n = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)n;
    _exit(99);
}

static void test_fifo_and_socket_refused(void **state)
{
    struct fx *f = fixture(state);
    sbx_err err = {0};
    assert_int_equal(mkfifo(at(f->ws, "fifo"), 0644), 0);
    assert_int_equal(symlink("fifo", at(f->ws, "fifolink")), 0);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(s >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    pathf(sa.sun_path, sizeof(sa.sun_path), "%s", at(f->ws, "sock"));
    assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);

    /* Were the FIFO opened for a blocking read, the alarm ends the test. */
    struct sigaction sa_new = {.sa_handler = on_alarm}, sa_old;
    assert_int_equal(sigaction(SIGALRM, &sa_new, &sa_old), 0);
    alarm(5);
    const char *paths[] = {"fifo", "fifolink", "sock"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(paths); i++) {
        assert_null(download(f, paths[i], &err));
        if (err.errnum != EINVAL)
            fail_msg("%s: %s: %s", paths[i], sbx_errno_name(err.errnum), err.msg);
    }
    struct sbx_ws_listing l;
    expect_errno(sbx_ws_list(f->ws_fd, P("fifo"), 0, &l, &err), &err, ENOTDIR);
    alarm(0);
    sigaction(SIGALRM, &sa_old, NULL);
    close(s);

    struct sbx_ws_stat st;
    assert_int_equal(sbx_ws_stat(f->ws_fd, P("fifo"), true, &st, &err), 0);
    assert_int_equal(st.type, SBX_WS_OTHER);
    /* Deleting them is fine. */
    assert_int_equal(sbx_ws_delete(f->ws_fd, P("fifo"), &err), 0);
    assert_int_equal(sbx_ws_delete(f->ws_fd, P("sock"), &err), 0);
    assert_string_equal(names(f->ws), "fifolink");
}

/* In a child with its own mount namespace: a real /proc and a tmpfs mounted
 * inside the workspace. Magic links and mount crossings are refused. Returns
 * a failure code for the parent to report. */
static int mount_child(struct fx *f)
{
    sbx_err err = {0};
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return 10;
    if (mkdir(at(f->ws, "proc"), 0755) < 0 || mount("proc", at(f->ws, "proc"), "proc", 0, NULL) < 0)
        return 11;
    if (mkdir(at(f->ws, "mnt"), 0755) < 0 || mount("tmpfs", at(f->ws, "mnt"), "tmpfs", 0, NULL) < 0)
        return 12;
    write_file(at(f->ws, "mnt/x"), "on another filesystem");
    /* The fd from before unshare lives in the parent's mounts: reopen. */
    f->ws_fd = open(f->ws, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (f->ws_fd < 0)
        return 14;
    if (symlink("/proc/self/root", at(f->ws, "magic")) < 0)
        return 13;
    char fdlink[64];
    snprintf(fdlink, sizeof(fdlink), "proc/self/fd/%d", f->ws_fd);
    const char *refused[] = {"proc/self/root/etc/passwd", "proc/self/cwd", "magic/etc/passwd",
                             fdlink, "mnt/x"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(refused); i++) {
        if (download(f, refused[i], &err) != NULL)
            return 20 + (int)i;
        if (err.errnum != EXDEV && err.errnum != ELOOP) {
            fprintf(stderr, "%s: %s %s\n", refused[i], sbx_errno_name(err.errnum), err.msg);
            return 30 + (int)i;
        }
    }
    struct sbx_ws_upload up;
    if (sbx_ws_upload_begin(f->ws_fd, P("mnt/y"), UID, GID, &up, &err) == 0 || err.errnum != EXDEV)
        return 40;
    /* Delete does not descend into a mount either, and leaves its content. */
    if (sbx_ws_delete(f->ws_fd, P("mnt/x"), &err) == 0 || err.errnum != EXDEV)
        return 41;
    if (mkdir(at(f->ws, "tree"), 0755) < 0 || mkdir(at(f->ws, "tree/m"), 0755) < 0 ||
        mount("tmpfs", at(f->ws, "tree/m"), "tmpfs", 0, NULL) < 0)
        return 42;
    write_file(at(f->ws, "tree/m/keep"), "keep");
    if (sbx_ws_delete(f->ws_fd, P("tree"), &err) == 0 || err.errnum != EXDEV)
        return 43;
    if (strcmp(slurp(at(f->ws, "tree/m/keep")), "keep") != 0)
        return 44;
    if (strcmp(slurp(at(f->ws, "mnt/x")), "on another filesystem") != 0)
        return 45;
    return 0;
}

static void test_proc_magic_links_and_mounts(void **state)
{
    struct fx *f = fixture(state);
    sbx_err err = {0};
    /* Without a /proc in the workspace, magic-link targets are plain in-root paths. */
    assert_int_equal(symlink("/proc/self/root", at(f->ws, "p")), 0);
    char fdlink[64];
    pathf(fdlink, sizeof(fdlink), "/proc/self/fd/%d", f->ws_fd);
    assert_int_equal(symlink(fdlink, at(f->ws, "fd")), 0);
    assert_null(download(f, "p/etc/passwd", &err));
    assert_int_equal(err.errnum, ENOENT);
    assert_null(download(f, "fd/x", &err));
    assert_int_equal(err.errnum, ENOENT);

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(mount_child(f));
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0)
        fail_msg("mount child failed at step %d", WEXITSTATUS(status));
    outside_untouched(f);
}

/* ---- upload ---- */

static void check_owned(const char *path, unsigned mode)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        fail_msg("%s: missing", path);
    if ((st.st_mode & 07777) != mode || st.st_uid != UID || st.st_gid != GID)
        fail_msg("%s: mode %o owner %u:%u", path, st.st_mode & 07777, st.st_uid, st.st_gid);
}

static void test_upload_commit(void **state)
{
    struct fx *f = fixture(state);
    sbx_err err = {0};
    mode_t old = umask(077);
    assert_int_equal(upload(f, "d1/d2/f.txt", "hello", &err), 0);
    umask(old);
    assert_string_equal(slurp(at(f->ws, "d1/d2/f.txt")), "hello");
    check_owned(at(f->ws, "d1"), 0755);
    check_owned(at(f->ws, "d1/d2"), 0755);
    check_owned(at(f->ws, "d1/d2/f.txt"), 0644);
    assert_string_equal(names(at(f->ws, "d1/d2")), "f.txt");
    /* Replaced whole, atomically. */
    assert_int_equal(upload(f, "/d1//d2/./f.txt", "bye", &err), 0);
    assert_string_equal(slurp(at(f->ws, "d1/d2/f.txt")), "bye");
    assert_string_equal(names(at(f->ws, "d1/d2")), "f.txt");
    /* An existing parent made by someone else keeps its owner and mode. */
    assert_int_equal(mkdir(at(f->ws, "mine"), 0700), 0);
    assert_int_equal(upload(f, "mine/x", "1", &err), 0);
    struct stat st;
    assert_int_equal(stat(at(f->ws, "mine"), &st), 0);
    assert_true(st.st_uid == 0 && (st.st_mode & 07777) == 0700);
    /* An empty file. */
    assert_int_equal(upload(f, "empty", "", &err), 0);
    assert_int_equal(stat(at(f->ws, "empty"), &st), 0);
    assert_int_equal(st.st_size, 0);

    /* Refused targets. */
    struct sbx_ws_upload up;
    expect_errno(sbx_ws_upload_begin(f->ws_fd, P("d1"), UID, GID, &up, &err), &err, EISDIR);
    assert_false(up.active);
    expect_errno(sbx_ws_upload_begin(f->ws_fd, P("new/"), UID, GID, &up, &err), &err, EISDIR);
    expect_errno(sbx_ws_upload_begin(f->ws_fd, P("/"), UID, GID, &up, &err), &err, EISDIR);
    expect_errno(sbx_ws_upload_begin(f->ws_fd, P("d1/d2/f.txt/x"), UID, GID, &up, &err), &err,
                 ENOTDIR);
    expect_errno(sbx_ws_upload_begin(f->ws_fd, P("d1/d2/f.txt/x/y"), UID, GID, &up, &err), &err,
                 ENOTDIR);
    assert_false(exists(at(f->ws, "new")));
    /* Writing to an inactive upload is an error, not a crash. */
    expect_errno(sbx_ws_upload_write(&up, "x", 1, &err), &err, EBADF);
    expect_errno(sbx_ws_upload_commit(&up, &err), &err, EBADF);
    assert_string_equal(names(f->ws), "d1,empty,mine");
}

static void test_upload_abort(void **state)
{
    struct fx *f = fixture(state);
    sbx_err err = {0};
    struct sbx_ws_upload up;
    /* A zeroed struct aborts as a no-op. */
    memset(&up, 0, sizeof(up));
    sbx_ws_upload_abort(&up);

    assert_int_equal(sbx_ws_upload_begin(f->ws_fd, P("n1/n2/n3/f"), UID, GID, &up, &err), 0);
    assert_true(up.active);
    assert_true(exists(at(f->ws, "n1/n2/n3")));
    assert_int_equal(sbx_ws_upload_write(&up, "partial", 7, &err), 0);
    sbx_ws_upload_abort(&up);
    assert_false(up.active);
    sbx_ws_upload_abort(&up); /* twice is fine */
    assert_string_equal(names(f->ws), "");

    /* Parents that existed before stay; only the file goes. */
    assert_int_equal(mkdir(at(f->ws, "d"), 0755), 0);
    assert_int_equal(sbx_ws_upload_begin(f->ws_fd, P("d/e/f"), UID, GID, &up, &err), 0);
    assert_int_equal(sbx_ws_upload_write(&up, "partial", 7, &err), 0);
    /* Something else appears in the created parent meanwhile: kept. */
    write_file(at(f->ws, "d/e/other"), "other");
    sbx_ws_upload_abort(&up);
    assert_string_equal(names(at(f->ws, "d/e")), "other");

    /* An old file is untouched by an aborted replacement. */
    write_file(at(f->ws, "d/old"), "old");
    assert_int_equal(sbx_ws_upload_begin(f->ws_fd, P("d/old"), UID, GID, &up, &err), 0);
    assert_int_equal(sbx_ws_upload_write(&up, "new!", 4, &err), 0);
    sbx_ws_upload_abort(&up);
    assert_string_equal(slurp(at(f->ws, "d/old")), "old");
    assert_string_equal(names(at(f->ws, "d")), "e,old");

    /* A commit that fails (a directory appeared at the target) aborts. */
    assert_int_equal(sbx_ws_upload_begin(f->ws_fd, P("late/x"), UID, GID, &up, &err), 0);
    assert_int_equal(mkdir(at(f->ws, "late/x"), 0755), 0);
    write_file(at(f->ws, "late/x/y"), "y");
    assert_int_equal(sbx_ws_upload_write(&up, "data", 4, &err), 0);
    assert_int_equal(sbx_ws_upload_commit(&up, &err), -1);
    assert_true(err.errnum == EISDIR || err.errnum == ENOTEMPTY || err.errnum == EEXIST);
    assert_false(up.active);
    assert_string_equal(names(at(f->ws, "late")), "x");
    assert_string_equal(names(at(f->ws, "late/x")), "y");
}

/* ---- stat, list, download ---- */

static void test_stat(void **state)
{
    struct fx *f = fixture(state);
    sbx_err err = {0};
    write_file(at(f->ws, "f"), "12345");
    assert_int_equal(chmod(at(f->ws, "f"), 0640), 0);
    struct timespec times[2] = {{1000, 0}, {1700000000, 123456789}};
    assert_int_equal(utimensat(AT_FDCWD, at(f->ws, "f"), times, 0), 0);
    struct sbx_ws_stat st;
    assert_int_equal(sbx_ws_stat(f->ws_fd, P("/f"), true, &st, &err), 0);
    assert_int_equal(st.type, SBX_WS_FILE);
    assert_int_equal(st.size, 5);
    assert_int_equal(st.mode, 0640);
    assert_int_equal(st.mtime.tv_sec, 1700000000);
    assert_int_equal(st.mtime.tv_nsec, 123456789);
    assert_string_equal(sbx_ws_type_name(st.type), "file");
    assert_int_equal(sbx_ws_stat(f->ws_fd, P("/"), true, &st, &err), 0);
    assert_int_equal(st.type, SBX_WS_DIR);
    assert_int_equal(st.mode, 0700);
    assert_string_equal(sbx_ws_type_name(st.type), "dir");
    expect_errno(sbx_ws_stat(f->ws_fd, P("f/"), true, &st, &err), &err, ENOTDIR);
    expect_errno(sbx_ws_stat(f->ws_fd, P("f/x"), true, &st, &err), &err, ENOTDIR);
    expect_errno(sbx_ws_stat(f->ws_fd, P("nope"), true, &st, &err), &err, ENOENT);
    assert_non_null(strstr(err.msg, "\"/nope\""));
    /* A symlink loop is ELOOP, not a hang. */
    assert_int_equal(symlink("loop2", at(f->ws, "loop1")), 0);
    assert_int_equal(symlink("loop1", at(f->ws, "loop2")), 0);
    expect_errno(sbx_ws_stat(f->ws_fd, P("loop1"), true, &st, &err), &err, ELOOP);
    assert_string_equal(sbx_ws_type_name(SBX_WS_SYMLINK), "symlink");
    assert_string_equal(sbx_ws_type_name(SBX_WS_OTHER), "other");
}

static void test_list(void **state)
{
    struct fx *f = fixture(state);
    sbx_err err = {0};
    assert_int_equal(mkdir(at(f->ws, "l"), 0755), 0);
    write_file(at(f->ws, "l/b"), "abc");
    write_file(at(f->ws, "l/a"), "0123456789");
    assert_int_equal(chmod(at(f->ws, "l/a"), 0604), 0);
    assert_int_equal(mkdir(at(f->ws, "l/c"), 0711), 0);
    assert_int_equal(symlink("/etc/passwd", at(f->ws, "l/d")), 0);
    assert_int_equal(symlink("/l", at(f->ws, "ll")), 0);

    struct sbx_ws_listing l;
    assert_int_equal(sbx_ws_list(f->ws_fd, P("l"), 0, &l, &err), 0);
    assert_int_equal(l.n, 4);
    assert_false(l.truncated);
    assert_string_equal(l.entries[0].name, "a");
    assert_int_equal(l.entries[0].st.type, SBX_WS_FILE);
    assert_int_equal(l.entries[0].st.size, 10);
    assert_int_equal(l.entries[0].st.mode, 0604);
    assert_true(l.entries[0].st.mtime.tv_sec > 0);
    assert_string_equal(l.entries[1].name, "b");
    assert_int_equal(l.entries[1].st.size, 3);
    assert_string_equal(l.entries[2].name, "c");
    assert_int_equal(l.entries[2].st.type, SBX_WS_DIR);
    assert_int_equal(l.entries[2].st.mode, 0711);
    /* The symlink itself, not /etc/passwd (or anything else) behind it. */
    assert_string_equal(l.entries[3].name, "d");
    assert_int_equal(l.entries[3].st.type, SBX_WS_SYMLINK);
    assert_int_equal(l.entries[3].st.size, strlen("/etc/passwd"));
    sbx_ws_listing_free(&l);

    /* Bounded. */
    assert_int_equal(sbx_ws_list(f->ws_fd, P("l/"), 2, &l, &err), 0);
    assert_int_equal(l.n, 2);
    assert_true(l.truncated);
    sbx_ws_listing_free(&l);
    /* A symlink to a directory is followed inside the workspace. */
    assert_int_equal(sbx_ws_list(f->ws_fd, P("ll"), 0, &l, &err), 0);
    assert_int_equal(l.n, 4);
    sbx_ws_listing_free(&l);
    /* The root. */
    assert_int_equal(sbx_ws_list(f->ws_fd, P("/"), 0, &l, &err), 0);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.entries[0].name, "l");
    assert_string_equal(l.entries[1].name, "ll");
    sbx_ws_listing_free(&l);
    /* An empty directory. */
    assert_int_equal(sbx_ws_list(f->ws_fd, P("l/c"), 0, &l, &err), 0);
    assert_int_equal(l.n, 0);
    assert_null(l.entries);
    sbx_ws_listing_free(&l);
    expect_errno(sbx_ws_list(f->ws_fd, P("l/a"), 0, &l, &err), &err, ENOTDIR);
    expect_errno(sbx_ws_list(f->ws_fd, P("nope"), 0, &l, &err), &err, ENOENT);
    /* A link to the host's /etc lists the workspace's (missing) etc. */
    expect_errno(sbx_ws_list(f->ws_fd, P("l/d"), 0, &l, &err), &err, ENOENT);
}

static void test_download(void **state)
{
    struct fx *f = fixture(state);
    sbx_err err = {0};
    static char data[100000];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (char)('a' + i % 26);
    int fd = open(at(f->ws, "big"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, sizeof(data)), sizeof(data));
    close(fd);

    struct sbx_ws_download dl;
    assert_int_equal(sbx_ws_download_open(f->ws_fd, P("big"), &dl, &err), 0);
    assert_int_equal(dl.st.size, sizeof(data));
    static char got[sizeof(data)];
    size_t n = 0;
    for (;;) {
        ssize_t r = sbx_ws_download_read(&dl, got + n, 4096, &err);
        assert_true(r >= 0);
        if (r == 0)
            break;
        n += (size_t)r;
    }
    assert_int_equal(n, sizeof(data));
    assert_memory_equal(got, data, sizeof(data));
    sbx_ws_download_close(&dl);
    sbx_ws_download_close(&dl);

    /* A file that grows while it is sent: only the size promised at open. */
    write_file(at(f->ws, "grow"), "12345");
    assert_int_equal(sbx_ws_download_open(f->ws_fd, P("grow"), &dl, &err), 0);
    write_file(at(f->ws, "grow"), "1234567890");
    char buf[64];
    assert_int_equal(sbx_ws_download_read(&dl, buf, sizeof(buf), &err), 5);
    assert_int_equal(sbx_ws_download_read(&dl, buf, sizeof(buf), &err), 0);
    sbx_ws_download_close(&dl);
    /* One that shrinks: an error, never a short body passed off as whole. */
    write_file(at(f->ws, "shrink"), "1234567890");
    assert_int_equal(sbx_ws_download_open(f->ws_fd, P("shrink"), &dl, &err), 0);
    assert_int_equal(truncate(at(f->ws, "shrink"), 4), 0);
    assert_int_equal(sbx_ws_download_read(&dl, buf, sizeof(buf), &err), 4);
    assert_int_equal(sbx_ws_download_read(&dl, buf, sizeof(buf), &err), -1);
    assert_int_equal(err.errnum, EIO);
    sbx_ws_download_close(&dl);
    expect_errno(sbx_ws_download_read(&dl, buf, sizeof(buf), &err), &err, EBADF);

    /* Directories are listed, not downloaded. */
    assert_int_equal(mkdir(at(f->ws, "dir"), 0755), 0);
    expect_errno(sbx_ws_download_open(f->ws_fd, P("dir"), &dl, &err), &err, EISDIR);
    assert_int_equal(dl.fd, -1);
    expect_errno(sbx_ws_download_open(f->ws_fd, P("/"), &dl, &err), &err, EISDIR);
    expect_errno(sbx_ws_download_open(f->ws_fd, P("big/"), &dl, &err), &err, ENOTDIR);
    expect_errno(sbx_ws_download_open(f->ws_fd, P("nope"), &dl, &err), &err, ENOENT);
}

/* ---- delete ---- */

static void test_delete(void **state)
{
    struct fx *f = fixture(state);
    sbx_err err = {0};
    /* A tree with symlinks out of the workspace, absolute and relative, to a
     * directory and a file: the links go, their targets stay. */
    assert_int_equal(mkdir(at(f->ws, "t"), 0755), 0);
    assert_int_equal(mkdir(at(f->ws, "t/sub"), 0755), 0);
    assert_int_equal(mkdir(at(f->ws, "t/sub/empty"), 0755), 0);
    write_file(at(f->ws, "t/sub/f"), "f");
    write_file(at(f->ws, "t/g"), "g");
    assert_int_equal(mkfifo(at(f->ws, "t/fifo"), 0644), 0);
    assert_int_equal(symlink(f->outside, at(f->ws, "t/outdir")), 0);
    assert_int_equal(symlink("../../../../../../outside", at(f->ws, "t/sub/reldir")), 0);
    assert_int_equal(symlink(at(f->outside, "secret"), at(f->ws, "t/outfile")), 0);
    assert_int_equal(sbx_ws_delete(f->ws_fd, P("t"), &err), 0);
    assert_false(exists(at(f->ws, "t")));
    outside_untouched(f);

    /* A symlink to a host directory, by its own name. */
    assert_int_equal(symlink(f->outside, at(f->ws, "sl")), 0);
    assert_int_equal(sbx_ws_delete(f->ws_fd, P("sl"), &err), 0);
    assert_false(exists(at(f->ws, "sl")));
    /* Through a symlinked parent: resolved inside, so nothing to delete. */
    assert_int_equal(symlink(f->outside, at(f->ws, "pl")), 0);
    expect_errno(sbx_ws_delete(f->ws_fd, P("pl/secret"), &err), &err, ENOENT);
    expect_errno(sbx_ws_delete(f->ws_fd, P("pl/keep"), &err), &err, ENOENT);
    outside_untouched(f);

    /* Refusals. */
    expect_errno(sbx_ws_delete(f->ws_fd, P("/"), &err), &err, EINVAL);
    expect_errno(sbx_ws_delete(f->ws_fd, P("."), &err), &err, EINVAL);
    expect_errno(sbx_ws_delete(f->ws_fd, P("nope"), &err), &err, ENOENT);
    expect_errno(sbx_ws_delete(f->ws_fd, P("nope/x"), &err), &err, ENOENT);
    write_file(at(f->ws, "file"), "x");
    expect_errno(sbx_ws_delete(f->ws_fd, P("file/"), &err), &err, ENOTDIR);
    expect_errno(sbx_ws_delete(f->ws_fd, P("pl/"), &err), &err, ENOTDIR);
    assert_int_equal(sbx_ws_delete(f->ws_fd, P("file"), &err), 0);
    assert_int_equal(mkdir(at(f->ws, "dir"), 0755), 0);
    assert_int_equal(sbx_ws_delete(f->ws_fd, P("/dir/"), &err), 0);
    assert_string_equal(names(f->ws), "pl");
    check_dir(f->ws, 0700, UID, GID);
}

/* A tree far deeper than the fds a delete may hold, with files at every
 * level: deleted whole, and the workspace around it untouched. */
static void test_delete_deep(void **state)
{
    struct fx *f = fixture(state);
    sbx_err err = {0};
    write_file(at(f->ws, "sibling"), "stay");
    int fd = open(f->ws, O_RDONLY | O_DIRECTORY);
    assert_true(fd >= 0);
    const char *first = "deep";
    for (int i = 0; i < 300; i++) {
        const char *name = i == 0 ? first : "d";
        assert_int_equal(mkdirat(fd, name, 0755), 0);
        int file = openat(fd, "file", O_WRONLY | O_CREAT, 0644);
        assert_true(file >= 0);
        close(file);
        if (i % 50 == 0)
            assert_int_equal(symlinkat(f->outside, fd, "out"), 0);
        int next = openat(fd, name, O_RDONLY | O_DIRECTORY);
        assert_true(next >= 0);
        close(fd);
        fd = next;
    }
    close(fd);
    /* "file" and "out" of level 0 live in the workspace itself. */
    assert_int_equal(unlink(at(f->ws, "file")), 0);
    assert_int_equal(unlink(at(f->ws, "out")), 0);
    assert_int_equal(sbx_ws_delete(f->ws_fd, P("deep"), &err), 0);
    assert_string_equal(names(f->ws), "sibling");
    outside_untouched(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ensure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ensure_refuses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dotdot_and_absolute, setup, teardown),
        cmocka_unit_test_setup_teardown(test_symlink_to_host_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_symlink_dotdot_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_symlink_final_component, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_symlink_swapped_mid_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_symlink_race, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fifo_and_socket_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_proc_magic_links_and_mounts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upload_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upload_abort, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stat, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_download, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete_deep, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
