/* Cgroups for sandboxes, what every mode shares: names, the small text and
 * file helpers (cgroup_int.h), and the public calls, which pick the mode's
 * code (cgroup_v1.c, cgroup_v2.c). Host detection is cgroup_host.c. Only the
 * sandboxd/ child of the daemon's own cgroup (and, on v2, the own cgroup's
 * subtree_control) is ever written. */
#include "isolate/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>

#include "base/time.h"
#include "isolate/cgroup_int.h"

const char *const cg_ctrl_names[SBX_CGC_COUNT] = {
    [SBX_CGC_MEMORY] = "memory",   [SBX_CGC_PIDS] = "pids",       [SBX_CGC_CPU] = "cpu",
    [SBX_CGC_CPUACCT] = "cpuacct", [SBX_CGC_FREEZER] = "freezer",
};

const char *sbx_cg_mode_name(enum sbx_cg_mode mode)
{
    switch (mode) {
    case SBX_CG_V2:
        return "v2";
    case SBX_CG_V1:
        return "v1";
    case SBX_CG_RLIMIT:
        return "rlimit";
    }
    return "?";
}

const char *sbx_cg_ctrl_name(enum sbx_cg_ctrl c)
{
    return (unsigned)c < SBX_CGC_COUNT ? cg_ctrl_names[c] : "?";
}

/* The kernel gives no event for "freezer settled" or "cgroup released", so
 * those few waits poll, briefly and with a bound. */
void cg_sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* ---- text ---- */

/* Split off the next line of a NUL-terminated buffer in place; NULL at the end. */
char *cg_next_line(char **cursor)
{
    char *line = *cursor;
    if (!line || !*line)
        return NULL;
    char *nl = strchr(line, '\n');
    if (nl) {
        *nl = '\0';
        *cursor = nl + 1;
    } else {
        *cursor = line + strlen(line);
    }
    return line;
}

/* Is `word` one of the items of `list` (separated by any of `seps`)? */
bool cg_list_has(const char *list, const char *word, const char *seps)
{
    size_t wl = strlen(word);
    const char *p = list;
    while (*p) {
        size_t n = strcspn(p, seps);
        if (n == wl && strncmp(p, word, wl) == 0)
            return true;
        p += n;
        if (*p)
            p++;
    }
    return false;
}

/* A decimal number, surrounded by nothing but blanks. */
int cg_parse_u64(const char *s, uint64_t *out)
{
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s < '0' || *s > '9')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    while (*end == ' ' || *end == '\t' || *end == '\n')
        end++;
    if (*end)
        return -1;
    *out = v;
    return 0;
}

/* The value of "key N" in a flat-keyed file (cpu.stat, memory.events, ...). */
int cg_keyed_u64(const char *text, const char *key, uint64_t *out)
{
    size_t kl = strlen(key);
    for (const char *line = text; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (len > kl && strncmp(line, key, kl) == 0 && line[kl] == ' ') {
            char num[32];
            size_t nlen = len - kl - 1;
            if (nlen >= sizeof(num))
                return -1;
            memcpy(num, line + kl + 1, nlen);
            num[nlen] = '\0';
            return cg_parse_u64(num, out);
        }
        line = nl ? nl + 1 : NULL;
    }
    return -1;
}

int cg_join(char *out, size_t len, const char *dir, const char *name)
{
    int n = snprintf(out, len, "%s/%s", dir, name);
    return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

/* ---- files ---- */

/* A callee's error handed on to the caller's err (which may be NULL). */
int cg_pass_err(sbx_err *err, const sbx_err *e)
{
    if (err)
        *err = *e;
    return -1;
}

/* Read a whole (small, pseudo-)file into a NUL-terminated buffer the caller
 * frees. */
int cg_read_text(const char *path, char **out, sbx_err *err)
{
    cleanup_fd int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sbx_err_set(err, errno, "read %s", path);
    size_t cap = 4096, len = 0;
    cleanup_free char *buf = malloc(cap);
    if (!buf)
        return sbx_err_set(err, ENOMEM, "read %s", path);
    for (;;) {
        if (len + 1 >= cap) {
            if (cap >= CG_READ_MAX)
                return sbx_err_set(err, EFBIG, "read %s", path);
            char *bigger = realloc(buf, cap * 2);
            if (!bigger)
                return sbx_err_set(err, ENOMEM, "read %s", path);
            buf = bigger;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sbx_err_set(err, errno, "read %s", path);
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    *out = sbx_steal_pointer(&buf);
    return 0;
}

int cg_read(const char *dir, const char *file, char **out, sbx_err *err)
{
    char path[PATH_MAX];
    if (cg_join(path, sizeof(path), dir, file) < 0)
        return sbx_err_set(err, ENAMETOOLONG, "cgroup %s in %s", file, dir);
    return cg_read_text(path, out, err);
}

int cg_read_u64(const char *dir, const char *file, uint64_t *out)
{
    cleanup_free char *text = NULL;
    if (cg_read(dir, file, &text, NULL) < 0)
        return -1;
    return cg_parse_u64(text, out);
}

static bool on_cgroupfs(const char *dir)
{
    struct statfs sfs;
    if (statfs(dir, &sfs) < 0)
        return true;
    return sfs.f_type == CGROUP_SUPER_MAGIC || sfs.f_type == CGROUP2_SUPER_MAGIC;
}

/* Write value to dir/file in one write(2), as cgroupfs wants. On cgroupfs the
 * interface files always exist (a missing one means the controller is absent,
 * and O_CREAT would turn that ENOENT into EACCES), so they are opened without
 * O_CREAT. Outside cgroupfs (the unit tests' fake hierarchies, where mkdir
 * makes empty directories) a missing required file is created, so the same
 * code runs against them. */
int cg_write(const char *dir, const char *file, const char *value, enum cg_file kind, sbx_err *err)
{
    char path[PATH_MAX];
    if (cg_join(path, sizeof(path), dir, file) < 0)
        return sbx_err_set(err, ENAMETOOLONG, "cgroup %s in %s", file, dir);
    cleanup_fd int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && kind == CG_REQUIRED && !on_cgroupfs(dir))
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return sbx_err_set(err, errno, "cgroup %s in %s", file, dir);
    size_t len = strlen(value);
    ssize_t n;
    do {
        n = write(fd, value, len);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return sbx_err_set(err, errno, "cgroup %s in %s", file, dir);
    if ((size_t)n != len)
        return sbx_err_set(err, EIO, "cgroup %s in %s: short write", file, dir);
    return 0;
}

int cg_write_u64(const char *dir, const char *file, uint64_t v, sbx_err *err)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%" PRIu64, v);
    return cg_write(dir, file, buf, CG_REQUIRED, err);
}

bool cg_exists(const char *dir, const char *file)
{
    char path[PATH_MAX];
    return cg_join(path, sizeof(path), dir, file) == 0 && access(path, F_OK) == 0;
}

/* ---- names ---- */

static bool name_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

int cg_check_name(const char *name, sbx_err *err)
{
    if (!name)
        return sbx_err_set(err, EINVAL, "cgroup name missing");
    size_t n = strlen(name);
    if (n == 0 || n > SBX_CG_NAME_MAX)
        return sbx_err_set(err, EINVAL, "cgroup name: length %zu not in 1..%d", n, SBX_CG_NAME_MAX);
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return sbx_err_set(err, EINVAL, "cgroup name \"%s\" is not a directory name", name);
    for (size_t i = 0; i < n; i++)
        if (!name_char_ok(name[i]))
            return sbx_err_set(err, EINVAL, "cgroup name: bad character at %zu", i);
    return 0;
}

int sbx_cg_child_path(const char *base, const char *name, char *out, size_t len, sbx_err *err)
{
    if (!base || !*base || !out || len == 0)
        return sbx_err_set(err, EINVAL, "cgroup child path: missing base or buffer");
    if (cg_check_name(name, err) < 0)
        return -1;
    if (cg_join(out, len, base, name) < 0)
        return sbx_err_set(err, ENAMETOOLONG, "cgroup path %s/%s", base, name);
    return 0;
}

/* ---- one sandbox's cgroup ---- */

/* cpu,cpuacct mounted together give two controllers one directory: did an
 * earlier controller already use this path? */
bool cg_v1_earlier(const struct sbx_cgroup *cg, int c, const char *path)
{
    for (int i = 0; i < c; i++)
        if (cg->path[i][0] && strcmp(cg->path[i], path) == 0)
            return true;
    return false;
}

uint64_t cg_cpu_quota_us(double cores)
{
    double q = cores * CG_CPU_PERIOD_US + 0.5;
    return q < CG_CPU_MIN_QUOTA_US ? CG_CPU_MIN_QUOTA_US : (uint64_t)q;
}

int sbx_cgroup_create(const struct sbx_cg_host *host, const char *name,
                      const struct sbx_cg_limits *lim, struct sbx_cgroup *cg, sbx_err *err)
{
    if (!host || !lim || !cg)
        return sbx_err_set(err, EINVAL, "cgroup create: missing argument");
    if (cg_check_name(name, err) < 0)
        return -1;
    if (!(lim->cpu_cores >= 0) || lim->cpu_cores > CG_CPU_MAX_CORES)
        return sbx_err_set(err, EINVAL, "cgroup cpu limit %g out of range", lim->cpu_cores);
    memset(cg, 0, sizeof(*cg));
    cg->mode = host->mode;
    int rc = 0;
    if (host->mode == SBX_CG_V2)
        rc = cg_create_v2(host, name, lim, cg, err);
    else if (host->mode == SBX_CG_V1)
        rc = cg_create_v1(host, name, lim, cg, err);
    if (rc < 0) {
        /* Only what this call made is in cg, so only that is removed. */
        (void)sbx_cgroup_destroy(cg, NULL);
        memset(cg, 0, sizeof(*cg));
        cg->mode = host->mode;
        return -1;
    }
    return 0;
}

int sbx_cgroup_relimit(struct sbx_cgroup *cg, const struct sbx_cg_limits *was,
                       const struct sbx_cg_limits *lim, sbx_err *err)
{
    if (!cg || !was || !lim)
        return sbx_err_set(err, EINVAL, "cgroup relimit: missing argument");
    if (!(lim->cpu_cores >= 0) || lim->cpu_cores > CG_CPU_MAX_CORES)
        return sbx_err_set(err, EINVAL, "cgroup cpu limit %g out of range", lim->cpu_cores);
    if (cg->mode == SBX_CG_V2)
        return cg_relimit_v2(cg, was, lim, err);
    if (cg->mode == SBX_CG_V1)
        return cg_relimit_v1(cg, was, lim, err);
    return sbx_err_set(err, EOPNOTSUPP, "no cgroup: the limits are rlimits, set at the start");
}

int sbx_cgroup_create_sub(const struct sbx_cgroup *parent, const char *name, double cpu_cores,
                          struct sbx_cgroup *join, struct sbx_cgroup *own, sbx_err *err)
{
    if (!parent || !join || !own)
        return sbx_err_set(err, EINVAL, "cgroup create_sub: missing argument");
    if (cg_check_name(name, err) < 0)
        return -1;
    if (!(cpu_cores >= 0) || cpu_cores > CG_CPU_MAX_CORES)
        return sbx_err_set(err, EINVAL, "cgroup cpu limit %g out of range", cpu_cores);
    if (parent->mode == SBX_CG_V1)
        return cg_create_sub_v1(parent, name, cpu_cores, join, own, err);
    if (parent->mode == SBX_CG_V2)
        return cg_create_sub_v2(parent, name, cpu_cores, join, own, err);
    return sbx_err_set(err, EOPNOTSUPP, "a task's own cgroup in a session: no cgroups");
}

/* v2: where a cgroup's processes go (its leaf when split). */
static const char *v2_procs_dir(const struct sbx_cgroup *cg)
{
    return cg->v2_leaf[0] ? cg->v2_leaf : cg->v2_path;
}

int sbx_cgroup_attach(const struct sbx_cgroup *cg, pid_t pid, sbx_err *err)
{
    if (!cg || pid <= 0)
        return sbx_err_set(err, EINVAL, "cgroup attach: bad argument");
    char buf[24];
    snprintf(buf, sizeof(buf), "%d", (int)pid);
    if (cg->mode == SBX_CG_V2 && cg->v2_path[0])
        return cg_write(v2_procs_dir(cg), "cgroup.procs", buf, CG_REQUIRED, err) < 0 ? -1 : 0;
    if (cg->mode != SBX_CG_V1)
        return 0;
    for (int c = 0; c < SBX_CGC_COUNT; c++) {
        if (!cg->path[c][0] || cg_v1_earlier(cg, c, cg->path[c]))
            continue;
        if (cg_write(cg->path[c], "cgroup.procs", buf, CG_REQUIRED, err) < 0)
            return -1;
    }
    return 0;
}

int sbx_cgroup_open_join(const struct sbx_cgroup *cg, int fds[SBX_CGC_COUNT], sbx_err *err)
{
    for (int c = 0; c < SBX_CGC_COUNT; c++)
        fds[c] = -1;
    if (!cg || cg->mode != SBX_CG_V1)
        return 0;
    for (int c = 0; c < SBX_CGC_COUNT; c++) {
        if (!cg->path[c][0] || cg_v1_earlier(cg, c, cg->path[c]))
            continue;
        char path[PATH_MAX];
        if (cg_join(path, sizeof(path), cg->path[c], "tasks") < 0 ||
            (fds[c] = open(path, O_WRONLY | O_CLOEXEC)) < 0) {
            int saved = errno;
            sbx_cgroup_close_join(fds);
            return sbx_err_set(err, saved, "cgroup open %s/tasks", cg->path[c]);
        }
    }
    return 0;
}

int sbx_cgroup_join_self(const int fds[SBX_CGC_COUNT], sbx_err *err)
{
    for (int c = 0; c < SBX_CGC_COUNT; c++)
        if (fds[c] >= 0 && write(fds[c], "0", 1) != 1)
            return sbx_err_set(err, errno, "cgroup join %s", cg_ctrl_names[c]);
    return 0;
}

void sbx_cgroup_close_join(int fds[SBX_CGC_COUNT])
{
    for (int c = 0; c < SBX_CGC_COUNT; c++)
        if (fds[c] >= 0) {
            close(fds[c]);
            fds[c] = -1;
        }
}

int sbx_cgroup_open_dir(const struct sbx_cgroup *cg, sbx_err *err)
{
    if (!cg)
        return sbx_err_set(err, EINVAL, "cgroup open: missing argument");
    if (cg->mode != SBX_CG_V2 || !cg->v2_path[0])
        return sbx_err_set(err, EOPNOTSUPP, "cgroup: no v2 directory to clone into");
    const char *dir = v2_procs_dir(cg);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return sbx_err_set(err, errno, "cgroup open %s", dir);
    return fd;
}

/* ---- freezing, killing ---- */

/* The kernel gives no event for "the freezer settled" or "the cgroup's last
 * task is gone": v1 has none at all (notify_on_release runs a host-wide
 * helper program, not ours to set), and on v2 rmdir can still say EBUSY for a
 * moment after cgroup.events says unpopulated. So each of these is a step
 * that tries once and says EBUSY when it is not there yet; a caller on an
 * event loop asks again from a timer (exec/task.c), and only the bounded
 * synchronous forms below, for error paths and recovery at start, poll. */

int sbx_cgroup_freeze_start(const struct sbx_cgroup *cg, bool frozen, sbx_err *err)
{
    if (!cg)
        return sbx_err_set(err, EINVAL, "cgroup freeze: missing argument");
    if (cg->mode == SBX_CG_V2 && cg->v2_path[0])
        return cg_freeze_v2(cg->v2_path, frozen, err);
    if (cg->mode == SBX_CG_V1 && cg->path[SBX_CGC_FREEZER][0])
        return cg_freeze_v1(cg->path[SBX_CGC_FREEZER], frozen, err);
    return 0;
}

int sbx_cgroup_freeze(const struct sbx_cgroup *cg, bool frozen, sbx_err *err)
{
    int64_t deadline = sbx_mono_ms() + CG_FREEZE_WAIT_MS;
    for (;;) {
        sbx_err e = {0};
        if (sbx_cgroup_freeze_start(cg, frozen, &e) == 0)
            return 0;
        if (e.errnum != EBUSY || sbx_mono_ms() >= deadline)
            return cg_pass_err(err, &e);
        cg_sleep_ms(1);
    }
}

/* SIGKILL every pid in dir/cgroup.procs; *n is the number signalled. */
static int kill_listed(const char *dir, int *signalled, sbx_err *err)
{
    cleanup_free char *procs = NULL;
    if (cg_read(dir, "cgroup.procs", &procs, err) < 0)
        return -1;
    int n = 0;
    char *cursor = procs, *line;
    while ((line = cg_next_line(&cursor))) {
        uint64_t v;
        if (cg_parse_u64(line, &v) < 0 || v <= 1 || v > INT32_MAX || (pid_t)v == getpid())
            continue;
        if (kill((pid_t)v, SIGKILL) == 0 || errno != ESRCH)
            n++;
    }
    *signalled = n;
    return 0;
}

static bool is_empty(const char *dir)
{
    cleanup_free char *procs = NULL;
    if (cg_read(dir, "cgroup.procs", &procs, NULL) < 0)
        return true;
    return strspn(procs, " \n") == strlen(procs);
}

/* Without cgroup.kill: freeze so that no listed task can fork or exit (and its
 * pid be reused) while we go through the list, kill, thaw so the kills land.
 * The freeze is not waited for: what escaped this round is met by the next. */
static int kill_round(const struct sbx_cgroup *cg, const char *dir, sbx_err *err)
{
    /* The usual case after a sandbox's init exited: nothing to freeze for. */
    if (is_empty(dir))
        return 0;
    int n = 0;
    sbx_err e = {0};
    (void)sbx_cgroup_freeze_start(cg, true, NULL);
    int rc = kill_listed(dir, &n, &e);
    (void)sbx_cgroup_freeze_start(cg, false, NULL);
    if (rc < 0)
        return e.errnum == ENOENT ? 0 /* the cgroup is gone */ : cg_pass_err(err, &e);
    if (n == 0)
        return 0;
    return sbx_err_set(err, EBUSY, "cgroup %s: processes left after SIGKILL", dir);
}

int sbx_cgroup_kill_step(const struct sbx_cgroup *cg, sbx_err *err)
{
    if (!cg)
        return sbx_err_set(err, EINVAL, "cgroup kill: missing argument");
    if (cg->mode == SBX_CG_V2 && cg->v2_path[0]) {
        sbx_err e = {0};
        if (cg_write(cg->v2_path, "cgroup.kill", "1", CG_REQUIRED, &e) == 0)
            return 0; /* the kernel kills all, and whatever forks meanwhile */
        if (e.errnum != ENOENT)
            return cg_pass_err(err, &e);
        return kill_round(cg, cg->v2_path, err); /* kernel before 5.14 */
    }
    if (cg->mode != SBX_CG_V1)
        return 0;
    static const enum sbx_cg_ctrl order[] = {SBX_CGC_FREEZER, SBX_CGC_PIDS, SBX_CGC_MEMORY};
    for (size_t i = 0; i < SBX_ARRAY_LEN(order); i++)
        if (cg->path[order[i]][0])
            return kill_round(cg, cg->path[order[i]], err);
    return 0;
}

int sbx_cgroup_kill_all(const struct sbx_cgroup *cg, sbx_err *err)
{
    int64_t deadline = sbx_mono_ms() + CG_KILL_ROUNDS * CG_KILL_WAIT_MS;
    for (;;) {
        sbx_err e = {0};
        if (sbx_cgroup_kill_step(cg, &e) == 0)
            return 0;
        if (e.errnum != EBUSY || sbx_mono_ms() >= deadline)
            return cg_pass_err(err, &e);
        cg_sleep_ms(CG_POLL_MS); /* the kills land asynchronously */
    }
}

/* ---- accounting ---- */

int sbx_cgroup_stats(const struct sbx_cgroup *cg, struct sbx_cg_stats *st, sbx_err *err)
{
    if (!cg || !st)
        return sbx_err_set(err, EINVAL, "cgroup stats: missing argument");
    memset(st, 0, sizeof(*st));
    if (cg->mode == SBX_CG_V2 && cg->v2_path[0])
        cg_stats_v2(cg->v2_path, st);
    else if (cg->mode == SBX_CG_V1)
        cg_stats_v1(cg, st);
    return 0;
}

/* ---- removal ---- */

int sbx_cgroup_adopt(const struct sbx_cg_host *host, const char *name, struct sbx_cgroup *cg,
                     sbx_err *err)
{
    memset(cg, 0, sizeof(*cg));
    cg->mode = host->mode;
    cg->subs = true; /* left by a crash: a session's may have its tasks' below */
    bool found = false;
    struct stat st;
    if (host->mode == SBX_CG_V2) {
        if (sbx_cg_child_path(host->v2_base, name, cg->v2_path, sizeof(cg->v2_path), err) < 0)
            return -1;
        if (stat(cg->v2_path, &st) == 0)
            found = true;
        else
            cg->v2_path[0] = '\0';
    } else if (host->mode == SBX_CG_V1) {
        for (int c = 0; c < SBX_CGC_COUNT; c++) {
            if (!host->v1_has[c])
                continue;
            if (sbx_cg_child_path(host->v1_base[c], name, cg->path[c], sizeof(cg->path[c]), err) <
                0)
                return -1;
            if (stat(cg->path[c], &st) == 0)
                found = true;
            else
                cg->path[c][0] = '\0';
        }
    }
    return found ? 0 : sbx_err_set(err, ENOENT, "no cgroup %s", name);
}

/* Co-mounted controllers (cpu,cpuacct) share one base: visit it once. */
static bool v1_base_earlier(const struct sbx_cg_host *host, int c)
{
    for (int i = 0; i < c; i++)
        if (host->v1_has[i] && strcmp(host->v1_base[i], host->v1_base[c]) == 0)
            return true;
    return false;
}

static void each_in(const char *base, void (*fn)(const char *name, void *ud), void *ud)
{
    DIR *d = base[0] ? opendir(base) : NULL;
    if (!d)
        return;
    for (struct dirent *de; (de = readdir(d));)
        if (de->d_type == DT_DIR && de->d_name[0] != '.')
            fn(de->d_name, ud);
    closedir(d);
}

void sbx_cgroup_each(const struct sbx_cg_host *host, void (*fn)(const char *name, void *ud),
                     void *ud)
{
    if (host->mode == SBX_CG_V2)
        each_in(host->v2_base, fn, ud);
    for (int c = 0; host->mode == SBX_CG_V1 && c < SBX_CGC_COUNT; c++)
        if (host->v1_has[c] && !v1_base_earlier(host, c))
            each_in(host->v1_base[c], fn, ud);
}

void sbx_cgroup_each_ends(const struct sbx_cg_host *host, void (*fn)(const char *name, void *ud),
                          void *ud)
{
    if (host->mode == SBX_CG_V2)
        each_in(host->v2_base, fn, ud);
    if (host->mode != SBX_CG_V1)
        return;
    int first = -1, last = -1;
    for (int c = 0; c < SBX_CGC_COUNT; c++)
        if (host->v1_has[c] && !v1_base_earlier(host, c))
            last = first < 0 ? (first = c) : c;
    if (first >= 0)
        each_in(host->v1_base[first], fn, ud);
    if (last > first)
        each_in(host->v1_base[last], fn, ud);
}

/* The empty cgroups below dir (a session's tasks' own): removed; a busy one
 * stays and makes dir's own rmdir fail with EBUSY, which is what is said. */
static void rmdir_children(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *de; (de = readdir(d));)
        if (de->d_type == DT_DIR && strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            (void)unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
    closedir(d);
}

int sbx_cgroup_remove(struct sbx_cgroup *cg, sbx_err *err)
{
    if (!cg)
        return sbx_err_set(err, EINVAL, "cgroup remove: missing argument");
    int rc = 0;
    if (cg->mode == SBX_CG_V1 && cg->subs)
        for (int c = 0; c < SBX_CGC_COUNT; c++)
            if (cg->path[c][0] && !cg_v1_earlier(cg, c, cg->path[c]))
                rmdir_children(cg->path[c]);
    if (cg->v2_path[0] && (cg->subs || cg->v2_leaf[0]))
        rmdir_children(cg->v2_path); /* its leaf, its tasks' own */
    if (cg->v2_path[0]) {
        if (rmdir(cg->v2_path) == 0 || errno == ENOENT)
            cg->v2_path[0] = cg->v2_leaf[0] = '\0';
        else
            rc = sbx_err_set(err, errno, "cgroup rmdir %s", cg->v2_path);
    }
    for (int c = 0; c < SBX_CGC_COUNT; c++) {
        if (!cg->path[c][0])
            continue;
        if (rmdir(cg->path[c]) < 0 && errno != ENOENT) {
            /* The first failure is the one said. */
            rc = rc < 0 ? rc : sbx_err_set(err, errno, "cgroup rmdir %s", cg->path[c]);
            continue;
        }
        for (int d = c + 1; d < SBX_CGC_COUNT; d++)
            if (strcmp(cg->path[d], cg->path[c]) == 0)
                cg->path[d][0] = '\0';
        cg->path[c][0] = '\0';
    }
    return rc;
}

/* A cgroup whose last task just died can stay busy for a moment. */
int sbx_cgroup_destroy(struct sbx_cgroup *cg, sbx_err *err)
{
    int64_t deadline = sbx_mono_ms() + CG_RMDIR_WAIT_MS;
    for (;;) {
        sbx_err e = {0};
        if (sbx_cgroup_remove(cg, &e) == 0)
            return 0;
        if (e.errnum != EBUSY || sbx_mono_ms() >= deadline)
            return cg_pass_err(err, &e);
        cg_sleep_ms(CG_RMDIR_POLL_MS);
    }
}
