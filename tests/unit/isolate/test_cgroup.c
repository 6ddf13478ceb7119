/* Cgroup layer: the parsers on texts modelled on real hosts, the v2 and v1
 * file logic against fake hierarchies in a temporary directory, and (as root,
 * on a cgroup host) the whole life of a real sandbox cgroup. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "isolate/cgroup.h"

/* ---- helpers ---- */

/* snprintf for test paths, where a cut-short result just fails the test. */
static void pathf(char *out, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void pathf(char *out, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, len, fmt, ap);
    va_end(ap);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* The file's content, or "<missing>" when it cannot be read. */
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

static const char *slurp_at(const char *dir, const char *file)
{
    char path[PATH_MAX];
    pathf(path, sizeof(path), "%s/%s", dir, file);
    return slurp(path);
}

static void mkdir_p(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void mkdir_p(const char *fmt, ...)
{
    char path[PATH_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* rm -r for the temporary trees (plain directories, never cgroupfs). */
static void rm_tree(const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        unlink(path);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char sub[PATH_MAX];
        pathf(sub, sizeof(sub), "%s/%s", path, de->d_name);
        rm_tree(sub);
    }
    closedir(d);
    rmdir(path);
}

/* Empty a directory of its files (a fake cgroup's "interface files"). */
static void rm_files(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_type == DT_REG) {
            char p[PATH_MAX];
            pathf(p, sizeof(p), "%s/%s", dir, de->d_name);
            unlink(p);
        }
    closedir(d);
}

static int tmp_setup(void **state)
{
    char *tmp = strdup("/tmp/sbx-cgtest-XXXXXX");
    if (!tmp || !mkdtemp(tmp))
        return -1;
    *state = tmp;
    return 0;
}

static int tmp_teardown(void **state)
{
    rm_tree(*state);
    free(*state);
    return 0;
}

/* ---- parsing ---- */

#define HASH "7758f82666a90e59162d8d2406eb61b2"

/* This machine's layout: separate cpu and cpuacct mounts, memory nested. */
static const char hybrid_cgroup[] = "9:name=systemd:/\n"
                                    "8:pids:/\n"
                                    "7:blkio:/\n"
                                    "6:freezer:/\n"
                                    "5:devices:/\n"
                                    "4:memory:/process_api/" HASH "\n"
                                    "3:cpuset:/\n"
                                    "2:cpuacct:/\n"
                                    "1:cpu:/\n"
                                    "0::/\n";

static void hybrid_mountinfo(char *buf, size_t len, const char *unified)
{
    pathf(buf, len,
          "22 1 0:20 / / rw,relatime - ext4 /dev/vda rw\n"
          "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
          "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
          "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
          "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
          "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
          "36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
          "37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n"
          "38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio\n"
          "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
          "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
          "41 31 0:38 / %s rw,relatime - cgroup2 cgroup2 rw\n",
          unified);
}

static void test_parse_v1_hybrid(void **state)
{
    /* The unified mount points at a directory whose cgroup.controllers lists
     * only hugetlb, as on this machine. */
    const char *tmp = *state;
    char ctrl[PATH_MAX], mi[4096];
    pathf(ctrl, sizeof(ctrl), "%s/cgroup.controllers", tmp);
    write_file(ctrl, "hugetlb\n");
    hybrid_mountinfo(mi, sizeof(mi), tmp);

    struct sbx_cg_host host;
    sbx_err err = {0};
    assert_int_equal(sbx_cg_host_parse(mi, hybrid_cgroup, &host, &err), 0);
    assert_int_equal(host.mode, SBX_CG_V1);
    assert_string_equal(sbx_cg_mode_name(host.mode), "v1");
    assert_string_equal(host.v1_base[SBX_CGC_MEMORY],
                        "/sys/fs/cgroup/memory/process_api/" HASH "/sandboxd");
    assert_string_equal(host.v1_base[SBX_CGC_PIDS], "/sys/fs/cgroup/pids/sandboxd");
    assert_string_equal(host.v1_base[SBX_CGC_CPU], "/sys/fs/cgroup/cpu/sandboxd");
    assert_string_equal(host.v1_base[SBX_CGC_CPUACCT], "/sys/fs/cgroup/cpuacct/sandboxd");
    assert_string_equal(host.v1_base[SBX_CGC_FREEZER], "/sys/fs/cgroup/freezer/sandboxd");
    for (int c = 0; c < SBX_CGC_COUNT; c++)
        assert_true(host.v1_has[c]);
    assert_string_equal(host.v2_base, "");
    assert_string_equal(host.why, "");
}

/* A systemd host: cpu,cpuacct on one mount (with optional fields), a memory
 * mount whose root is a sub-cgroup, an escaped space in a mount point, no
 * freezer. */
static void test_parse_v1_combined_cpu(void **state)
{
    const char *mi =
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        "25 22 0:22 / /sys/fs/cgroup ro,nosuid shared:4 - tmpfs tmpfs ro,mode=755\n"
        "28 25 0:25 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:9 - "
        "cgroup cgroup rw,cpu,cpuacct\n"
        "29 25 0:26 /system.slice /sys/fs/cgroup/memory rw,nosuid shared:10 - cgroup cgroup "
        "rw,memory\n"
        "30 25 0:27 / /sys/fs/cgroup/my\\040pids rw,nosuid shared:11 master:3 - cgroup cgroup "
        "rw,pids\n"
        "31 25 0:28 / /sys/fs/cgroup/net_cls,net_prio rw shared:12 - cgroup cgroup "
        "rw,net_cls,net_prio\n";
    const char *pc = "5:pids:/system.slice/sbx.service\n"
                     "4:net_cls,net_prio:/\n"
                     "3:memory:/system.slice/sbx.service\n"
                     "2:cpu,cpuacct:/system.slice/sbx.service\n"
                     "1:name=systemd:/system.slice/sbx.service\n";
    struct sbx_cg_host host;
    assert_int_equal(sbx_cg_host_parse(mi, pc, &host, NULL), 0);
    assert_int_equal(host.mode, SBX_CG_V1);
    assert_string_equal(host.v1_base[SBX_CGC_MEMORY], "/sys/fs/cgroup/memory/sbx.service/sandboxd");
    assert_string_equal(host.v1_base[SBX_CGC_PIDS],
                        "/sys/fs/cgroup/my pids/system.slice/sbx.service/sandboxd");
    assert_string_equal(host.v1_base[SBX_CGC_CPU],
                        "/sys/fs/cgroup/cpu,cpuacct/system.slice/sbx.service/sandboxd");
    assert_string_equal(host.v1_base[SBX_CGC_CPUACCT], host.v1_base[SBX_CGC_CPU]);
    assert_true(host.v1_has[SBX_CGC_MEMORY] && host.v1_has[SBX_CGC_PIDS]);
    assert_true(host.v1_has[SBX_CGC_CPU] && host.v1_has[SBX_CGC_CPUACCT]);
    assert_false(host.v1_has[SBX_CGC_FREEZER]);
    assert_string_equal(host.v1_base[SBX_CGC_FREEZER], "");
    assert_non_null(strstr(host.why, "freezer"));
    (void)state;
}

/* Our memory cgroup outside what the mount shows (another cgroup namespace,
 * "/.."), and no pids mount: neither usable, so rlimit. */
static void test_parse_unreachable(void **state)
{
    const char *mi = "35 31 0:32 /kubepods /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
                     "36 31 0:33 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
    const char *pc = "4:memory:/other/x\n1:cpu:/../x\n3:pids:/\n";
    struct sbx_cg_host host;
    assert_int_equal(sbx_cg_host_parse(mi, pc, &host, NULL), 0);
    assert_int_equal(host.mode, SBX_CG_RLIMIT);
    assert_false(host.v1_has[SBX_CGC_MEMORY]);
    assert_false(host.v1_has[SBX_CGC_CPU]);
    assert_false(host.v1_has[SBX_CGC_PIDS]);
    assert_non_null(strstr(host.why, "memory"));
    assert_non_null(strstr(host.why, "pids"));
    assert_int_equal(sbx_cg_host_parse(NULL, pc, &host, NULL), -1);
    (void)state;
}

/* ---- v2 against a fake hierarchy ---- */

/* tmp/svc is "our" cgroup in a cgroup2 mount at tmp; returns the file paths. */
static void fake_v2(const char *tmp, const char *controllers, char *mi_path, char *pc_path)
{
    char buf[PATH_MAX * 2];
    mkdir_p("%s/svc", tmp);
    pathf(buf, sizeof(buf), "%s/svc/cgroup.controllers", tmp);
    write_file(buf, controllers);
    pathf(buf, sizeof(buf), "%s/svc/cgroup.subtree_control", tmp);
    write_file(buf, "");
    pathf(buf, sizeof(buf), "%s/svc/cgroup.procs", tmp);
    write_file(buf, "");

    pathf(mi_path, PATH_MAX, "%s/mountinfo", tmp);
    pathf(buf, sizeof(buf),
          "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
          "30 23 0:26 / %s rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
          "rw,nsdelegate,memory_recursiveprot\n",
          tmp);
    write_file(mi_path, buf);
    pathf(pc_path, PATH_MAX, "%s/cgroup", tmp);
    write_file(pc_path, "0::/svc\n");
}

static void test_v2_fake_tree(void **state)
{
    const char *tmp = *state;
    char mi[PATH_MAX], pc[PATH_MAX], path[PATH_MAX], svc[PATH_MAX], base[PATH_MAX];
    fake_v2(tmp, "cpuset cpu io memory pids\n", mi, pc);
    pathf(svc, sizeof(svc), "%s/svc", tmp);
    pathf(base, sizeof(base), "%s/svc/sandboxd", tmp);

    struct sbx_cg_host host;
    sbx_err err = {0};
    assert_int_equal(sbx_cg_host_detect_at(mi, pc, false, &host, &err), 0);
    assert_int_equal(host.mode, SBX_CG_V2);
    assert_string_equal(host.v2_base, base);
    assert_false(host.v1_has[SBX_CGC_MEMORY]);
    assert_string_equal(slurp_at(svc, "cgroup.subtree_control"), "+memory +pids +cpu");
    assert_string_equal(slurp_at(base, "cgroup.subtree_control"), "+memory +pids +cpu");

    struct sbx_cg_limits lim = {.memory_bytes = 256ull << 20, .pids = 16, .cpu_cores = 0.25};
    struct sbx_cgroup cg;
    assert_int_equal(sbx_cgroup_create(&host, "box1", &lim, &cg, &err), 0);
    char dir[PATH_MAX];
    pathf(dir, sizeof(dir), "%s/box1", base);
    assert_int_equal(cg.mode, SBX_CG_V2);
    assert_string_equal(cg.v2_path, dir);
    assert_true(cg.cpu_enforced);
    assert_string_equal(slurp_at(dir, "memory.max"), "268435456");
    assert_string_equal(slurp_at(dir, "pids.max"), "16");
    assert_string_equal(slurp_at(dir, "cpu.max"), "25000 100000");
    /* Optional files are never made up outside cgroupfs. */
    pathf(path, sizeof(path), "%s/memory.swap.max", dir);
    assert_false(exists(path));

    /* The same name again: EEXIST, and the existing cgroup stays. */
    struct sbx_cgroup dup;
    assert_int_equal(sbx_cgroup_create(&host, "box1", &lim, &dup, &err), -1);
    assert_int_equal(err.errnum, EEXIST);
    assert_string_equal(dup.v2_path, "");
    assert_string_equal(slurp_at(dir, "pids.max"), "16");

    int fd = sbx_cgroup_open_dir(&cg, &err);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    close(fd);

    assert_int_equal(sbx_cgroup_attach(&cg, 4242, &err), 0);
    assert_string_equal(slurp_at(dir, "cgroup.procs"), "4242");
    assert_int_equal(sbx_cgroup_freeze(&cg, true, &err), 0);
    assert_string_equal(slurp_at(dir, "cgroup.freeze"), "1");
    assert_int_equal(sbx_cgroup_freeze(&cg, false, &err), 0);
    assert_string_equal(slurp_at(dir, "cgroup.freeze"), "0");

    pathf(path, sizeof(path), "%s/cpu.stat", dir);
    write_file(path, "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\n");
    pathf(path, sizeof(path), "%s/memory.peak", dir);
    write_file(path, "5000000\n");
    pathf(path, sizeof(path), "%s/memory.events", dir);
    write_file(path, "low 0\nhigh 0\nmax 7\noom 2\noom_kill 1\noom_group_kill 0\n");
    struct sbx_cg_stats s;
    assert_int_equal(sbx_cgroup_stats(&cg, &s, &err), 0);
    assert_true(s.have_cpu && s.have_mem);
    assert_int_equal(s.cpu_usec, 1234567);
    assert_int_equal(s.peak_mem_bytes, 5000000);
    assert_int_equal(s.oom_kills, 1);
    /* Before memory.peak: memory.current. */
    pathf(path, sizeof(path), "%s/memory.peak", dir);
    unlink(path);
    pathf(path, sizeof(path), "%s/memory.current", dir);
    write_file(path, "4096\n");
    assert_int_equal(sbx_cgroup_stats(&cg, &s, &err), 0);
    assert_int_equal(s.peak_mem_bytes, 4096);

    assert_int_equal(sbx_cgroup_kill_all(&cg, &err), 0);
    assert_string_equal(slurp_at(dir, "cgroup.kill"), "1");
    /* One step, as the loop's release takes it: cgroup.kill is the whole kill. */
    assert_int_equal(sbx_cgroup_kill_step(&cg, &err), 0);
    /* One removal try, never waiting: what is left stays in cg. */
    assert_int_equal(sbx_cgroup_remove(&cg, &err), -1);
    assert_int_equal(err.errnum, ENOTEMPTY);
    assert_string_equal(cg.v2_path, dir);

    /* A plain directory with files is not removable: destroy says so and keeps
     * the path for another try; once empty it goes, and again is a no-op. */
    assert_int_equal(sbx_cgroup_destroy(&cg, &err), -1);
    assert_int_equal(err.errnum, ENOTEMPTY);
    assert_string_equal(cg.v2_path, dir);
    rm_files(dir);
    assert_int_equal(sbx_cgroup_destroy(&cg, &err), 0);
    assert_false(exists(dir));
    assert_string_equal(cg.v2_path, "");
    assert_int_equal(sbx_cgroup_destroy(&cg, &err), 0);
    assert_true(exists(base));
}

/* A daemon that starts in its leaf (a restart in place) finds the base beside
 * it, not below it. */
static void test_v2_started_in_its_leaf(void **state)
{
    const char *tmp = *state;
    char mi[PATH_MAX], pc[PATH_MAX], base[PATH_MAX];
    fake_v2(tmp, "cpu memory pids\n", mi, pc);
    write_file(pc, "0::/svc/sandboxd.daemon\n");
    mkdir_p("%s/svc/sandboxd.daemon", tmp);
    struct sbx_cg_host host;
    sbx_err err = {0};
    assert_int_equal(sbx_cg_host_detect_at(mi, pc, false, &host, &err), 0);
    assert_int_equal(host.mode, SBX_CG_V2);
    pathf(base, sizeof(base), "%s/svc/sandboxd", tmp);
    assert_string_equal(host.v2_base, base);
}

/* v2, a session: split into its init/ leaf (where its processes go) and its
 * tasks' own cgroups, each with the session's CPU quota; only with
 * cgroup.kill; the removal takes the children with it. */
static void test_v2_session_split(void **state)
{
    const char *tmp = *state;
    char mi[PATH_MAX], pc[PATH_MAX], path[PATH_MAX], sess[PATH_MAX], leaf[PATH_MAX],
        task[PATH_MAX];
    fake_v2(tmp, "cpu memory pids\n", mi, pc);
    struct sbx_cg_host host;
    sbx_err err = {0};
    assert_int_equal(sbx_cg_host_detect_at(mi, pc, false, &host, &err), 0);
    assert_int_equal(host.mode, SBX_CG_V2);
    assert_false(host.v2_kill); /* a fake base has no cgroup.kill */
    struct sbx_cg_limits lim = {.memory_bytes = 64ull << 20, .pids = 8};
    struct sbx_cgroup cg, join, own;
    assert_int_equal(sbx_cgroup_create(&host, "s1", &lim, &cg, &err), 0);
    pathf(sess, sizeof(sess), "%s/s1", host.v2_base);
    pathf(leaf, sizeof(leaf), "%s/init", sess);
    pathf(task, sizeof(task), "%s/task-a", sess);

    /* Not split: no task cgroup below it; nor without cgroup.kill. */
    assert_int_equal(sbx_cgroup_create_sub(&cg, "task-a", 0.5, &join, &own, &err), -1);
    assert_int_equal(err.errnum, EOPNOTSUPP);
    assert_int_equal(sbx_cgroup_split(&cg, &err), -1);
    assert_int_equal(err.errnum, EOPNOTSUPP);
    assert_false(exists(leaf));

    pathf(path, sizeof(path), "%s/cgroup.kill", sess);
    write_file(path, "");
    /* A live one (a pooled sandbox's init taken for a session): its
     * process goes to the leaf before the controllers are handed down. */
    pathf(path, sizeof(path), "%s/cgroup.procs", sess);
    write_file(path, "777\n");
    assert_int_equal(sbx_cgroup_split(&cg, &err), 0);
    assert_string_equal(cg.v2_leaf, leaf);
    assert_true(cg.subs);
    assert_string_equal(slurp_at(leaf, "cgroup.procs"), "777");
    assert_string_equal(slurp_at(sess, "cgroup.subtree_control"), "+memory +pids +cpu");
    /* Its processes go to the leaf, by clone and by attach. */
    int fd = sbx_cgroup_open_dir(&cg, &err);
    struct stat a, b;
    assert_true(fd >= 0);
    assert_int_equal(fstat(fd, &a), 0);
    assert_int_equal(stat(leaf, &b), 0);
    assert_true(a.st_ino == b.st_ino);
    close(fd);
    assert_int_equal(sbx_cgroup_attach(&cg, 4242, &err), 0);
    assert_string_equal(slurp_at(leaf, "cgroup.procs"), "4242");

    assert_int_equal(sbx_cgroup_create_sub(&cg, "task-a", 0.5, &join, &own, &err), 0);
    assert_string_equal(own.v2_path, task);
    assert_string_equal(join.v2_path, task);
    assert_true(own.task_own && join.task_own && join.cpu_enforced);
    assert_string_equal(slurp_at(task, "cpu.max"), "50000 100000");
    /* Limits and freezing stay the session's, for its whole subtree. */
    assert_string_equal(slurp_at(sess, "memory.max"), "67108864");
    assert_int_equal(sbx_cgroup_freeze(&cg, true, &err), 0);
    assert_string_equal(slurp_at(sess, "cgroup.freeze"), "1");

    /* The removal: the task's own, then the session with its leaf. */
    rm_files(task);
    assert_int_equal(sbx_cgroup_remove(&own, &err), 0);
    assert_false(exists(task));
    assert_int_equal(sbx_cgroup_create_sub(&cg, "task-b", 0, &join, &own, &err), 0);
    assert_false(join.cpu_enforced);
    rm_files(leaf);
    rm_files(own.v2_path);
    rm_files(sess);
    assert_int_equal(sbx_cgroup_remove(&cg, &err), 0);
    assert_false(exists(sess));
    assert_string_equal(cg.v2_leaf, "");
}

/* v2 with a controller missing and no v1: not v2, and why names the file. */
static void test_v2_controllers_missing(void **state)
{
    const char *tmp = *state;
    char mi[PATH_MAX], pc[PATH_MAX], base[PATH_MAX];
    fake_v2(tmp, "cpuset io memory\n", mi, pc);
    pathf(base, sizeof(base), "%s/svc/sandboxd", tmp);

    struct sbx_cg_host host;
    assert_int_equal(sbx_cg_host_detect_at(mi, pc, false, &host, NULL), 0);
    assert_int_equal(host.mode, SBX_CG_RLIMIT);
    assert_string_equal(host.v2_base, "");
    assert_non_null(strstr(host.why, "cgroup.controllers lacks pids,cpu"));
    assert_false(exists(base));
}

/* Enabling controllers fails (here: subtree_control is not writable at all):
 * fall back to v1 when the host has it. */
static void test_v2_enable_fails_falls_back(void **state)
{
    const char *tmp = *state;
    char mi[PATH_MAX], pc[PATH_MAX], path[PATH_MAX], text[PATH_MAX * 4];
    fake_v2(tmp, "cpu memory pids\n", mi, pc);
    pathf(path, sizeof(path), "%s/svc/cgroup.subtree_control", tmp);
    unlink(path);
    mkdir_p("%s", path);

    /* Without v1: rlimit. */
    struct sbx_cg_host host;
    assert_int_equal(sbx_cg_host_detect_at(mi, pc, false, &host, NULL), 0);
    assert_int_equal(host.mode, SBX_CG_RLIMIT);
    assert_non_null(strstr(host.why, "cgroup.subtree_control"));

    /* With v1 memory and pids hierarchies (fake ones too): v1, why keeps the v2 story. */
    mkdir_p("%s/v1/memory", tmp);
    mkdir_p("%s/v1/pids", tmp);
    pathf(text, sizeof(text),
          "30 23 0:26 / %s rw - cgroup2 cgroup2 rw\n"
          "31 23 0:27 / %s/v1/memory rw - cgroup cgroup rw,memory\n"
          "32 23 0:28 / %s/v1/pids rw - cgroup cgroup rw,pids\n",
          tmp, tmp, tmp);
    write_file(mi, text);
    write_file(pc, "2:memory:/\n1:pids:/\n0::/svc\n");
    assert_int_equal(sbx_cg_host_detect_at(mi, pc, false, &host, NULL), 0);
    assert_int_equal(host.mode, SBX_CG_V1);
    assert_string_equal(host.v2_base, "");
    assert_non_null(strstr(host.why, "cgroup.subtree_control"));
    assert_non_null(strstr(host.why, "no v1 freezer hierarchy"));
    pathf(path, sizeof(path), "%s/v1/memory/sandboxd", tmp);
    assert_string_equal(host.v1_base[SBX_CGC_MEMORY], path);
    assert_true(exists(path));
}

/* ---- v1 against a fake hierarchy ---- */

static void fake_v1(const char *tmp, char *mi_path, char *pc_path)
{
    char text[PATH_MAX * 4];
    mkdir_p("%s/memory/daemon", tmp);
    mkdir_p("%s/pids", tmp);
    mkdir_p("%s/cpu,cpuacct", tmp);
    pathf(mi_path, PATH_MAX, "%s/mountinfo", tmp);
    pathf(text, sizeof(text),
          "31 23 0:27 / %s/memory rw - cgroup cgroup rw,memory\n"
          "32 23 0:28 / %s/pids rw - cgroup cgroup rw,pids\n"
          "33 23 0:29 / %s/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n",
          tmp, tmp, tmp);
    write_file(mi_path, text);
    pathf(pc_path, PATH_MAX, "%s/cgroup", tmp);
    write_file(pc_path, "3:cpu,cpuacct:/\n2:memory:/daemon\n1:pids:/\n");
}

static void test_v1_fake_tree(void **state)
{
    const char *tmp = *state;
    char mi[PATH_MAX], pc[PATH_MAX], mem[PATH_MAX], pids[PATH_MAX], cpu[PATH_MAX];
    fake_v1(tmp, mi, pc);
    pathf(mem, sizeof(mem), "%s/memory/daemon/sandboxd/t1", tmp);
    pathf(pids, sizeof(pids), "%s/pids/sandboxd/t1", tmp);
    pathf(cpu, sizeof(cpu), "%s/cpu,cpuacct/sandboxd/t1", tmp);

    struct sbx_cg_host host;
    sbx_err err = {0};
    assert_int_equal(sbx_cg_host_detect_at(mi, pc, false, &host, &err), 0);
    assert_int_equal(host.mode, SBX_CG_V1);
    assert_true(host.v1_has[SBX_CGC_CPU] && host.v1_has[SBX_CGC_CPUACCT]);
    assert_false(host.v1_has[SBX_CGC_FREEZER]);

    struct sbx_cg_limits lim = {.memory_bytes = 1 << 20, .pids = 3, .cpu_cores = 1.5};
    struct sbx_cgroup cg;
    assert_int_equal(sbx_cgroup_create(&host, "t1", &lim, &cg, &err), 0);
    assert_string_equal(cg.path[SBX_CGC_MEMORY], mem);
    assert_string_equal(cg.path[SBX_CGC_PIDS], pids);
    assert_string_equal(cg.path[SBX_CGC_CPU], cpu);
    assert_string_equal(cg.path[SBX_CGC_CPUACCT], cpu);
    assert_string_equal(cg.path[SBX_CGC_FREEZER], "");
    assert_true(cg.cpu_enforced);
    assert_string_equal(slurp_at(mem, "memory.limit_in_bytes"), "1048576");
    assert_string_equal(slurp_at(pids, "pids.max"), "3");
    assert_string_equal(slurp_at(cpu, "cpu.cfs_period_us"), "100000");
    assert_string_equal(slurp_at(cpu, "cpu.cfs_quota_us"), "150000");

    /* Every distinct directory gets the pid, the shared cpu,cpuacct one once. */
    assert_int_equal(sbx_cgroup_attach(&cg, 777, &err), 0);
    assert_string_equal(slurp_at(mem, "cgroup.procs"), "777");
    assert_string_equal(slurp_at(pids, "cgroup.procs"), "777");
    assert_string_equal(slurp_at(cpu, "cgroup.procs"), "777");
    /* No freezer: freezing is a successful no-op. */
    assert_int_equal(sbx_cgroup_freeze(&cg, true, &err), 0);

    char path[PATH_MAX];
    pathf(path, sizeof(path), "%s/cpuacct.usage", cpu);
    write_file(path, "2500000\n");
    pathf(path, sizeof(path), "%s/memory.max_usage_in_bytes", mem);
    write_file(path, "65536\n");
    pathf(path, sizeof(path), "%s/memory.oom_control", mem);
    write_file(path, "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
    struct sbx_cg_stats s;
    assert_int_equal(sbx_cgroup_stats(&cg, &s, &err), 0);
    assert_true(s.have_cpu && s.have_mem);
    assert_int_equal(s.cpu_usec, 2500);
    assert_int_equal(s.peak_mem_bytes, 65536);
    assert_int_equal(s.oom_kills, 3);

    rm_files(mem);
    rm_files(pids);
    rm_files(cpu);
    assert_int_equal(sbx_cgroup_destroy(&cg, &err), 0);
    assert_false(exists(mem) || exists(pids) || exists(cpu));
    for (int c = 0; c < SBX_CGC_COUNT; c++)
        assert_string_equal(cg.path[c], "");
}

/* Limits rewritten on a live cgroup (a pooled sandbox at take time): only
 * those that change, memsw never below the memory limit on the way up or
 * down, "no limit" as the kernel spells it; rlimit mode refuses. */
static void test_v1_relimit(void **state)
{
    const char *tmp = *state;
    char mi[PATH_MAX], pc[PATH_MAX], mem[PATH_MAX], pids[PATH_MAX], cpu[PATH_MAX], p[PATH_MAX];
    fake_v1(tmp, mi, pc);
    pathf(mem, sizeof(mem), "%s/memory/daemon/sandboxd/r1", tmp);
    pathf(pids, sizeof(pids), "%s/pids/sandboxd/r1", tmp);
    pathf(cpu, sizeof(cpu), "%s/cpu,cpuacct/sandboxd/r1", tmp);
    struct sbx_cg_host host;
    sbx_err err = {0};
    assert_int_equal(sbx_cg_host_detect_at(mi, pc, false, &host, &err), 0);
    struct sbx_cg_limits a = {.memory_bytes = 1 << 20, .pids = 3, .cpu_cores = 1.5};
    struct sbx_cgroup cg;
    assert_int_equal(sbx_cgroup_create(&host, "r1", &a, &cg, &err), 0);
    pathf(p, sizeof(p), "%s/memory.memsw.limit_in_bytes", mem);
    write_file(p, "1048576"); /* swap accounting on */

    struct sbx_cg_limits b = {.memory_bytes = 4 << 20, .pids = 3, .cpu_cores = 0.5};
    pathf(p, sizeof(p), "%s/pids.max", pids);
    write_file(p, "untouched");
    assert_int_equal(sbx_cgroup_relimit(&cg, &a, &b, &err), 0);
    assert_string_equal(slurp_at(mem, "memory.limit_in_bytes"), "4194304");
    assert_string_equal(slurp_at(mem, "memory.memsw.limit_in_bytes"), "4194304");
    assert_string_equal(slurp_at(pids, "pids.max"), "untouched"); /* the same: not written */
    assert_string_equal(slurp_at(cpu, "cpu.cfs_quota_us"), "50000");
    assert_true(cg.cpu_enforced);

    struct sbx_cg_limits c = {.memory_bytes = 0, .pids = 0, .cpu_cores = 0};
    assert_int_equal(sbx_cgroup_relimit(&cg, &b, &c, &err), 0);
    assert_string_equal(slurp_at(mem, "memory.limit_in_bytes"), "-1");
    assert_string_equal(slurp_at(mem, "memory.memsw.limit_in_bytes"), "-1");
    assert_string_equal(slurp_at(pids, "pids.max"), "max");
    assert_string_equal(slurp_at(cpu, "cpu.cfs_quota_us"), "-1");
    assert_false(cg.cpu_enforced);

    struct sbx_cg_limits bad = {.cpu_cores = -1};
    assert_int_equal(sbx_cgroup_relimit(&cg, &c, &bad, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    struct sbx_cgroup none = {.mode = SBX_CG_RLIMIT};
    assert_int_equal(sbx_cgroup_relimit(&none, &c, &b, &err), -1);
    assert_int_equal(err.errnum, EOPNOTSUPP);

    rm_files(mem);
    rm_files(pids);
    rm_files(cpu);
    assert_int_equal(sbx_cgroup_destroy(&cg, &err), 0);
}

/* A failure half-way removes what was made, and only that. */
static void test_v1_create_cleans_up(void **state)
{
    const char *tmp = *state;
    char mi[PATH_MAX], pc[PATH_MAX], path[PATH_MAX];
    fake_v1(tmp, mi, pc);
    struct sbx_cg_host host;
    assert_int_equal(sbx_cg_host_detect_at(mi, pc, false, &host, NULL), 0);
    assert_int_equal(host.mode, SBX_CG_V1);
    /* Someone else's "t2" in the cpu hierarchy, made after memory and pids. */
    mkdir_p("%s/cpu,cpuacct/sandboxd/t2", tmp);

    struct sbx_cg_limits lim = {.memory_bytes = 1 << 20, .pids = 3};
    struct sbx_cgroup cg;
    sbx_err err = {0};
    assert_int_equal(sbx_cgroup_create(&host, "t2", &lim, &cg, &err), -1);
    assert_int_equal(err.errnum, EEXIST);
    assert_non_null(strstr(err.msg, "cpu,cpuacct/sandboxd/t2"));
    pathf(path, sizeof(path), "%s/memory/daemon/sandboxd/t2", tmp);
    assert_false(exists(path));
    pathf(path, sizeof(path), "%s/pids/sandboxd/t2", tmp);
    assert_false(exists(path));
    pathf(path, sizeof(path), "%s/cpu,cpuacct/sandboxd/t2", tmp);
    assert_true(exists(path));
    for (int c = 0; c < SBX_CGC_COUNT; c++)
        assert_string_equal(cg.path[c], "");
}

/* ---- rlimit ---- */

/* The aggregate caps land on the sandboxd/ base itself and are read back. */
static void test_totals_v2_and_v1(void **state)
{
    const char *tmp = *state;
    char mi[PATH_MAX], pc[PATH_MAX], base[PATH_MAX], sub[PATH_MAX];
    struct sbx_cg_host host;
    sbx_err err = {0};
    struct sbx_cg_totals t;
    struct sbx_cg_limits want = {.memory_bytes = 3ull << 30, .pids = 512, .cpu_cores = 2};

    pathf(sub, sizeof(sub), "%s/v2", tmp);
    mkdir_p("%s", sub);
    fake_v2(sub, "cpu memory pids\n", mi, pc);
    assert_int_equal(sbx_cg_host_detect_at(mi, pc, false, &host, &err), 0);
    assert_int_equal(host.mode, SBX_CG_V2);
    sbx_cg_host_set_totals(&host, &want, &t);
    pathf(base, sizeof(base), "%s/svc/sandboxd", sub);
    assert_true(t.memory_ok && t.pids_ok && t.cpu_ok);
    assert_string_equal(t.why, "");
    assert_string_equal(slurp_at(base, "memory.max"), "3221225472");
    assert_string_equal(slurp_at(base, "pids.max"), "512");
    assert_string_equal(slurp_at(base, "cpu.max"), "200000 100000");
    assert_int_equal(t.now.memory_bytes, 3ull << 30);
    assert_int_equal(t.now.pids, 512);
    assert_true(t.now.cpu_cores == 2);
    /* none wanted: nothing written, what is there is read back */
    struct sbx_cg_limits none = {0};
    sbx_cg_host_set_totals(&host, &none, &t);
    assert_false(t.memory_ok || t.pids_ok || t.cpu_ok);
    assert_int_equal(t.now.pids, 512);

    pathf(sub, sizeof(sub), "%s/v1", tmp);
    mkdir_p("%s", sub);
    fake_v1(sub, mi, pc);
    assert_int_equal(sbx_cg_host_detect_at(mi, pc, false, &host, &err), 0);
    assert_int_equal(host.mode, SBX_CG_V1);
    sbx_cg_host_set_totals(&host, &want, &t);
    assert_true(t.memory_ok && t.pids_ok && t.cpu_ok);
    pathf(base, sizeof(base), "%s/memory/daemon/sandboxd", sub);
    assert_string_equal(slurp_at(base, "memory.limit_in_bytes"), "3221225472");
    pathf(base, sizeof(base), "%s/pids/sandboxd", sub);
    assert_string_equal(slurp_at(base, "pids.max"), "512");
    pathf(base, sizeof(base), "%s/cpu,cpuacct/sandboxd", sub);
    assert_string_equal(slurp_at(base, "cpu.cfs_quota_us"), "200000");
    assert_string_equal(slurp_at(base, "cpu.cfs_period_us"), "100000");
    assert_true(t.now.cpu_cores == 2 && t.now.pids == 512 && t.now.memory_bytes == 3ull << 30);

    /* rlimit mode: none can be, said so */
    struct sbx_cg_host rl = {.mode = SBX_CG_RLIMIT};
    snprintf(rl.why, sizeof(rl.why), "no writable hierarchy");
    sbx_cg_host_set_totals(&rl, &want, &t);
    assert_false(t.memory_ok || t.pids_ok || t.cpu_ok);
    assert_non_null(strstr(t.why, "no writable cgroups"));
}

/* At the stop the bases get back what they held: only the files that were
 * written, and only while they still hold what was written. */
static void test_totals_restored(void **state)
{
    const char *tmp = *state;
    char mi[PATH_MAX], pc[PATH_MAX], mem[PATH_MAX], pids[PATH_MAX], cpu[PATH_MAX], f[PATH_MAX];
    struct sbx_cg_host host;
    sbx_err err = {0};
    struct sbx_cg_totals t;
    struct sbx_cg_limits want = {.memory_bytes = 3ull << 30, .pids = 512, .cpu_cores = 2};
    fake_v1(tmp, mi, pc);
    assert_int_equal(sbx_cg_host_detect_at(mi, pc, false, &host, &err), 0);
    pathf(mem, sizeof(mem), "%s/memory/daemon/sandboxd", tmp);
    pathf(pids, sizeof(pids), "%s/pids/sandboxd", tmp);
    pathf(cpu, sizeof(cpu), "%s/cpu,cpuacct/sandboxd", tmp);
    mkdir_p("%s", mem);
    mkdir_p("%s", pids);
    mkdir_p("%s", cpu);
    pathf(f, sizeof(f), "%s/memory.limit_in_bytes", mem);
    write_file(f, "9223372036854771712\n");
    pathf(f, sizeof(f), "%s/pids.max", pids);
    write_file(f, "max\n");
    pathf(f, sizeof(f), "%s/cpu.cfs_quota_us", cpu);
    write_file(f, "-1\n");
    pathf(f, sizeof(f), "%s/cpu.cfs_period_us", cpu);
    write_file(f, "100000\n");

    sbx_cg_host_set_totals(&host, &want, &t);
    assert_true(t.memory_ok && t.pids_ok && t.cpu_ok);
    assert_int_equal(t.n_saved, 4);
    assert_string_equal(slurp_at(pids, "pids.max"), "512");
    /* someone else's value since: kept */
    pathf(f, sizeof(f), "%s/memory.limit_in_bytes", mem);
    write_file(f, "1073741824");
    /* restored: pids and the quota; the period held 100000 before and after */
    assert_int_equal(sbx_cg_host_restore_totals(&t, &err), 2);
    assert_string_equal(slurp_at(pids, "pids.max"), "max");
    assert_string_equal(slurp_at(cpu, "cpu.cfs_quota_us"), "-1");
    assert_string_equal(slurp_at(cpu, "cpu.cfs_period_us"), "100000");
    assert_string_equal(slurp_at(mem, "memory.limit_in_bytes"), "1073741824");
    /* once only */
    assert_int_equal(t.n_saved, 0);
    assert_int_equal(sbx_cg_host_restore_totals(&t, &err), 0);

    /* none wanted: nothing written, nothing to give back */
    struct sbx_cg_limits none = {0};
    sbx_cg_host_set_totals(&host, &none, &t);
    assert_int_equal(t.n_saved, 0);
    assert_int_equal(sbx_cg_host_restore_totals(&t, &err), 0);
    assert_string_equal(slurp_at(pids, "pids.max"), "max");
}

static void test_force_rlimit(void **state)
{
    struct sbx_cg_host host;
    assert_int_equal(sbx_cg_host_detect(true, &host, NULL), 0);
    assert_int_equal(host.mode, SBX_CG_RLIMIT);
    assert_string_equal(sbx_cg_mode_name(host.mode), "rlimit");
    assert_non_null(strstr(host.why, "forced"));
    assert_false(host.v1_has[SBX_CGC_MEMORY]);
    assert_string_equal(host.v2_base, "");

    /* Unreadable inputs are a reason, not an error. */
    assert_int_equal(
        sbx_cg_host_detect_at("/nonexistent/mountinfo", "/nonexistent/cgroup", false, &host, NULL),
        0);
    assert_int_equal(host.mode, SBX_CG_RLIMIT);
    assert_non_null(strstr(host.why, "/nonexistent/mountinfo"));
    (void)state;
}

static void test_rlimit_cgroup(void **state)
{
    struct sbx_cg_host host;
    assert_int_equal(sbx_cg_host_detect(true, &host, NULL), 0);
    struct sbx_cg_limits lim = {.memory_bytes = 1 << 20, .pids = 4, .cpu_cores = 1};
    struct sbx_cgroup cg;
    sbx_err err = {0};
    assert_int_equal(sbx_cgroup_create(&host, "../x", &lim, &cg, &err), -1);
    assert_int_equal(sbx_cgroup_create(&host, "box", &lim, &cg, &err), 0);
    assert_int_equal(cg.mode, SBX_CG_RLIMIT);
    assert_false(cg.cpu_enforced);
    assert_int_equal(sbx_cgroup_attach(&cg, getpid(), &err), 0);
    assert_int_equal(sbx_cgroup_open_dir(&cg, &err), -1);
    assert_int_equal(sbx_cgroup_freeze(&cg, true, &err), 0);
    assert_int_equal(sbx_cgroup_freeze_start(&cg, true, &err), 0);
    assert_int_equal(sbx_cgroup_kill_all(&cg, &err), 0);
    assert_int_equal(sbx_cgroup_kill_step(&cg, &err), 0);
    assert_int_equal(sbx_cgroup_remove(&cg, &err), 0);
    struct sbx_cg_stats s;
    assert_int_equal(sbx_cgroup_stats(&cg, &s, &err), 0);
    assert_false(s.have_cpu || s.have_mem);
    assert_int_equal(sbx_cgroup_destroy(&cg, &err), 0);
    (void)state;
}

static void test_child_path(void **state)
{
    char out[PATH_MAX];
    sbx_err err = {0};
    assert_int_equal(sbx_cg_child_path("/b", "task-1_A.b", out, sizeof(out), &err), 0);
    assert_string_equal(out, "/b/task-1_A.b");
    const char *bad[] = {"", ".", "..", "a/b", "/", "a b", "a\nb", "ä", "a*", "a:b"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        assert_int_equal(sbx_cg_child_path("/b", bad[i], out, sizeof(out), &err), -1);
        assert_int_equal(err.errnum, EINVAL);
    }
    char long_name[SBX_CG_NAME_MAX + 2];
    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[SBX_CG_NAME_MAX + 1] = '\0';
    assert_int_equal(sbx_cg_child_path("/b", long_name, out, sizeof(out), &err), -1);
    long_name[SBX_CG_NAME_MAX] = '\0';
    assert_int_equal(sbx_cg_child_path("/b", long_name, out, sizeof(out), &err), 0);
    assert_int_equal(sbx_cg_child_path("/b", "x", out, 4, &err), -1);
    assert_int_equal(err.errnum, ENAMETOOLONG);
    assert_int_equal(sbx_cg_child_path("", "x", out, sizeof(out), &err), -1);
    assert_int_equal(sbx_cg_child_path("/b", NULL, out, sizeof(out), &err), -1);
    (void)state;
}

/* ---- for real ---- */

struct real {
    struct sbx_cgroup cg;
    pid_t child;
};

static int real_setup(void **state)
{
    struct real *r = calloc(1, sizeof(*r));
    if (!r)
        return -1;
    r->child = -1;
    *state = r;
    return 0;
}

static int real_teardown(void **state)
{
    struct real *r = *state;
    if (r->child > 0) {
        sbx_cgroup_freeze(&r->cg, false, NULL);
        kill(r->child, SIGKILL);
        waitpid(r->child, NULL, 0);
    }
    sbx_cgroup_destroy(&r->cg, NULL);
    free(r);
    return 0;
}

/* The path of controller ctrl (or v2 when ctrl is "") in /proc/pid/cgroup. */
static const char *proc_cgroup_of(pid_t pid, const char *ctrl)
{
    static char out[PATH_MAX];
    char path[64];
    pathf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
    const char *text = slurp(path);
    out[0] = '\0';
    for (const char *line = text; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char l[PATH_MAX];
        pathf(l, sizeof(l), "%.*s", (int)len, line);
        char *c1 = strchr(l, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2) {
            *c2 = '\0';
            bool match = ctrl[0] ? false : c1[1] == '\0';
            for (char *save = NULL, *t = strtok_r(c1 + 1, ",", &save); ctrl[0] && t;
                 t = strtok_r(NULL, ",", &save))
                match = match || strcmp(t, ctrl) == 0;
            if (match) {
                pathf(out, sizeof(out), "%s", c2 + 1);
                return out;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return out;
}

/* Does this process's /proc/self/cgroup name controller ctrl in a v1 line? */
static bool self_has_v1(const char *ctrl)
{
    return proc_cgroup_of(getpid(), ctrl)[0] != '\0';
}

/* waitpid with a deadline, so that a kill that does not land fails the test
 * instead of hanging it. */
static pid_t wait_child(pid_t pid, int *status, int ms)
{
    for (int waited = 0; waited <= ms; waited += 10) {
        pid_t got = waitpid(pid, status, WNOHANG);
        if (got != 0)
            return got;
        struct timespec ts = {.tv_nsec = 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static void test_real_cgroup(void **state)
{
    struct real *r = *state;
    if (geteuid() != 0)
        skip();
    struct sbx_cg_host host;
    sbx_err err = {0};
    assert_int_equal(sbx_cg_host_detect(false, &host, &err), 0);
    bool v1_host = self_has_v1("memory") && self_has_v1("pids");
    if (v1_host) {
        assert_int_equal(host.mode, SBX_CG_V1);
        for (int c = 0; c < SBX_CGC_COUNT; c++)
            assert_int_equal(host.v1_has[c], self_has_v1(sbx_cg_ctrl_name(c)));
    }
    if (host.mode == SBX_CG_RLIMIT)
        skip(); /* no cgroups here to exercise */

    char name[64];
    pathf(name, sizeof(name), "unittest-%d", (int)getpid());
    struct sbx_cg_limits lim = {.memory_bytes = 64ull << 20, .pids = 8, .cpu_cores = 0.5};
    assert_int_equal(sbx_cgroup_create(&host, name, &lim, &r->cg, &err), 0);
    struct sbx_cgroup *cg = &r->cg;
    char suffix[96];
    pathf(suffix, sizeof(suffix), "/sandboxd/%s", name);

    if (host.mode == SBX_CG_V1) {
        const char *mem = cg->path[SBX_CGC_MEMORY];
        assert_string_equal(slurp_at(mem, "memory.limit_in_bytes"), "67108864\n");
        if (strcmp(slurp_at(mem, "memory.memsw.limit_in_bytes"), "<missing>") != 0)
            assert_string_equal(slurp_at(mem, "memory.memsw.limit_in_bytes"), "67108864\n");
        assert_string_equal(slurp_at(cg->path[SBX_CGC_PIDS], "pids.max"), "8\n");
        if (host.v1_has[SBX_CGC_CPU]) {
            assert_true(cg->cpu_enforced);
            assert_string_equal(slurp_at(cg->path[SBX_CGC_CPU], "cpu.cfs_quota_us"), "50000\n");
            assert_string_equal(slurp_at(cg->path[SBX_CGC_CPU], "cpu.cfs_period_us"), "100000\n");
        }
    } else {
        assert_string_equal(slurp_at(cg->v2_path, "memory.max"), "67108864\n");
        assert_string_equal(slurp_at(cg->v2_path, "pids.max"), "8\n");
        assert_string_equal(slurp_at(cg->v2_path, "cpu.max"), "50000 100000\n");
    }

    r->child = fork();
    assert_true(r->child >= 0);
    if (r->child == 0) {
        for (;;)
            pause();
    }
    assert_int_equal(sbx_cgroup_attach(cg, r->child, &err), 0);
    if (host.mode == SBX_CG_V1) {
        assert_true(ends_with(proc_cgroup_of(r->child, "memory"), suffix));
        assert_true(ends_with(proc_cgroup_of(r->child, "pids"), suffix));
        assert_false(ends_with(proc_cgroup_of(getpid(), "memory"), suffix));
    } else {
        assert_true(ends_with(proc_cgroup_of(r->child, ""), suffix));
    }

    const char *fz = cg->path[SBX_CGC_FREEZER];
    assert_int_equal(sbx_cgroup_freeze(cg, true, &err), 0);
    if (host.mode == SBX_CG_V1 && fz[0])
        assert_string_equal(slurp_at(fz, "freezer.state"), "FROZEN\n");
    assert_int_equal(sbx_cgroup_freeze(cg, false, &err), 0);
    if (host.mode == SBX_CG_V1 && fz[0])
        assert_string_equal(slurp_at(fz, "freezer.state"), "THAWED\n");

    /* Killed while frozen, as kill_all does it. */
    assert_int_equal(sbx_cgroup_freeze(cg, true, &err), 0);
    assert_int_equal(sbx_cgroup_kill_all(cg, &err), 0);
    int status = 0;
    assert_int_equal(wait_child(r->child, &status, 5000), r->child);
    r->child = -1;
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);

    struct sbx_cg_stats s;
    assert_int_equal(sbx_cgroup_stats(cg, &s, &err), 0);
    assert_true(s.have_cpu);
    assert_true(s.have_mem);

    char dirs[SBX_CGC_COUNT + 1][SBX_CG_PATH_MAX];
    memcpy(dirs, cg->path, sizeof(cg->path));
    memcpy(dirs[SBX_CGC_COUNT], cg->v2_path, sizeof(cg->v2_path));
    assert_int_equal(sbx_cgroup_destroy(cg, &err), 0);
    for (int i = 0; i <= SBX_CGC_COUNT; i++)
        if (dirs[i][0])
            assert_false(exists(dirs[i]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_parse_v1_hybrid, tmp_setup, tmp_teardown),
        cmocka_unit_test(test_parse_v1_combined_cpu),
        cmocka_unit_test(test_parse_unreachable),
        cmocka_unit_test_setup_teardown(test_v2_fake_tree, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_v2_session_split, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_v2_started_in_its_leaf, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_v2_controllers_missing, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_v2_enable_fails_falls_back, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_v1_fake_tree, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_v1_relimit, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_v1_create_cleans_up, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_totals_v2_and_v1, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_totals_restored, tmp_setup, tmp_teardown),
        cmocka_unit_test(test_force_rlimit),
        cmocka_unit_test(test_rlimit_cgroup),
        cmocka_unit_test(test_child_path),
        cmocka_unit_test_setup_teardown(test_real_cgroup, real_setup, real_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
