/* Cgroups for sandboxes: find the hierarchies (pure parsing of mountinfo and
 * /proc/self/cgroup), prepare the "sandboxd/" bases, then create, fill, freeze,
 * kill, measure and remove one cgroup per sandbox. Only the sandboxd/ child of
 * the daemon's own cgroup (and, on v2, the own cgroup's subtree_control) is
 * ever written. */
#include "isolate/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>

#define CG_BASE_NAME "sandboxd"
#define CG_V2_ENABLE "+memory +pids +cpu"
#define CG_CPU_PERIOD_US 100000
#define CG_CPU_MIN_QUOTA_US 1000 /* the kernel refuses less than 1 ms */
#define CG_CPU_MAX_CORES 65536.0
#define CG_READ_MAX (16u << 20)
#define CG_FREEZE_WAIT_MS 100
#define CG_RMDIR_WAIT_MS 1000
#define CG_RMDIR_POLL_MS 10
#define CG_KILL_ROUNDS 10
#define CG_KILL_WAIT_MS 50
#define CG_POLL_MS 2
#define MI_FIELDS_MAX 64

static const char *const ctrl_names[SBX_CGC_COUNT] = {
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
    return (unsigned)c < SBX_CGC_COUNT ? ctrl_names[c] : "?";
}

/* ---- time ---- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The kernel gives no event for "freezer settled" or "cgroup released", so
 * those few waits poll, briefly and with a bound. */
static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* ---- text ---- */

/* Split off the next line of a NUL-terminated buffer in place; NULL at the end. */
static char *next_line(char **cursor)
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
static bool list_has(const char *list, const char *word, const char *seps)
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
static int parse_u64(const char *s, uint64_t *out)
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
static int keyed_u64(const char *text, const char *key, uint64_t *out)
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
            return parse_u64(num, out);
        }
        line = nl ? nl + 1 : NULL;
    }
    return -1;
}

static int join(char *out, size_t len, const char *dir, const char *name)
{
    int n = snprintf(out, len, "%s/%s", dir, name);
    return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

/* ---- files ---- */

/* A callee's error handed on to the caller's err (which may be NULL). */
static int pass_err(sbx_err *err, const sbx_err *e)
{
    if (err)
        *err = *e;
    return -1;
}

/* Read a whole (small, pseudo-)file into a NUL-terminated buffer the caller
 * frees. */
static int read_text(const char *path, char **out, sbx_err *err)
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

static int cg_read(const char *dir, const char *file, char **out, sbx_err *err)
{
    char path[PATH_MAX];
    if (join(path, sizeof(path), dir, file) < 0)
        return sbx_err_set(err, ENAMETOOLONG, "cgroup %s in %s", file, dir);
    return read_text(path, out, err);
}

static int cg_read_u64(const char *dir, const char *file, uint64_t *out)
{
    cleanup_free char *text = NULL;
    if (cg_read(dir, file, &text, NULL) < 0)
        return -1;
    return parse_u64(text, out);
}

static bool on_cgroupfs(const char *dir)
{
    struct statfs sfs;
    if (statfs(dir, &sfs) < 0)
        return true;
    return sfs.f_type == CGROUP_SUPER_MAGIC || sfs.f_type == CGROUP2_SUPER_MAGIC;
}

enum cg_file { CG_REQUIRED, CG_OPTIONAL };

/* Write value to dir/file in one write(2), as cgroupfs wants. On cgroupfs the
 * interface files always exist (a missing one means the controller is absent,
 * and O_CREAT would turn that ENOENT into EACCES), so they are opened without
 * O_CREAT. Outside cgroupfs (the unit tests' fake hierarchies, where mkdir
 * makes empty directories) a missing required file is created, so the same
 * code runs against them. */
static int cg_write(const char *dir, const char *file, const char *value, enum cg_file kind,
                    sbx_err *err)
{
    char path[PATH_MAX];
    if (join(path, sizeof(path), dir, file) < 0)
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

static int cg_write_u64(const char *dir, const char *file, uint64_t v, sbx_err *err)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%" PRIu64, v);
    return cg_write(dir, file, buf, CG_REQUIRED, err);
}

static bool cg_exists(const char *dir, const char *file)
{
    char path[PATH_MAX];
    return join(path, sizeof(path), dir, file) == 0 && access(path, F_OK) == 0;
}

/* ---- names ---- */

static bool name_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

static int check_name(const char *name, sbx_err *err)
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
    if (check_name(name, err) < 0)
        return -1;
    if (join(out, len, base, name) < 0)
        return sbx_err_set(err, ENAMETOOLONG, "cgroup path %s/%s", base, name);
    return 0;
}

/* ---- host detection: parsing ---- */

struct own_paths {
    const char *v1[SBX_CGC_COUNT];
    const char *v2;
};

__attribute__((format(printf, 2, 3))) static void why_add(struct sbx_cg_host *host, const char *fmt,
                                                          ...)
{
    size_t used = strlen(host->why);
    if (used && used + 2 < sizeof(host->why)) {
        memcpy(host->why + used, "; ", 3);
        used += 2;
    }
    if (used + 1 >= sizeof(host->why))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(host->why + used, sizeof(host->why) - used, fmt, ap);
    va_end(ap);
}

/* Reasons are for people: cutting a long one short is fine. */
__attribute__((format(printf, 3, 4))) static void why_set(char *why, size_t len, const char *fmt,
                                                          ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
}

/* "N:ctrl1,ctrl2:/path" for v1 hierarchies, "0::/path" for the unified one. */
static void parse_proc_cgroup(char *text, struct own_paths *own)
{
    char *cursor = text, *line;
    while ((line = next_line(&cursor))) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        const char *ctrls = c1 + 1, *path = c2 + 1;
        if (*ctrls == '\0') {
            if (!own->v2)
                own->v2 = path;
            continue;
        }
        for (int c = 0; c < SBX_CGC_COUNT; c++)
            if (!own->v1[c] && list_has(ctrls, ctrl_names[c], ","))
                own->v1[c] = path;
    }
}

static bool has_dotdot(const char *path)
{
    for (const char *p = path; (p = strstr(p, "..")); p += 2)
        if ((p == path || p[-1] == '/') && (p[2] == '\0' || p[2] == '/'))
            return true;
    return false;
}

/* <mountpoint>/<own cgroup relative to the mount's root>. A mount that shows
 * only part of the hierarchy (bind mounts, cgroup namespaces) serves only the
 * cgroups below its root; "/.." paths are cgroups outside our namespace. */
static int own_dir(const char *mroot, const char *mpoint, const char *own, char *out, size_t len)
{
    if (!own || own[0] != '/' || has_dotdot(own) || mroot[0] != '/' || has_dotdot(mroot))
        return -1;
    const char *rel = own;
    if (strcmp(mroot, "/") != 0) {
        size_t n = strlen(mroot);
        if (strncmp(own, mroot, n) != 0 || (own[n] != '\0' && own[n] != '/'))
            return -1;
        rel = own + n;
    }
    if (strcmp(rel, "/") == 0)
        rel = "";
    int n = snprintf(out, len, "%s%s", mpoint, rel);
    return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

static bool is_octal(char c)
{
    return c >= '0' && c <= '7';
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape_octal(char *s)
{
    char *w = s;
    for (char *r = s; *r;) {
        if (r[0] == '\\' && is_octal(r[1]) && is_octal(r[2]) && is_octal(r[3])) {
            *w++ = (char)(((r[1] - '0') << 6) | ((r[2] - '0') << 3) | (r[3] - '0'));
            r += 4;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
}

/* mountinfo: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE
 * SOURCE SUPEROPTS". A v1 mount serves every controller named in its super
 * options ("rw,cpu,cpuacct"); the first mount that reaches our own cgroup wins. */
static void parse_mountinfo(char *text, const struct own_paths *own, struct sbx_cg_host *host,
                            char *v2_own, size_t v2_len)
{
    char *cursor = text, *line;
    while ((line = next_line(&cursor))) {
        char *f[MI_FIELDS_MAX], *save = NULL;
        size_t nf = 0;
        for (char *t = strtok_r(line, " ", &save); t && nf < MI_FIELDS_MAX;
             t = strtok_r(NULL, " ", &save))
            f[nf++] = t;
        size_t sep = 6;
        while (sep < nf && strcmp(f[sep], "-") != 0)
            sep++;
        if (sep + 3 >= nf)
            continue;
        const char *fstype = f[sep + 1], *super = f[sep + 3];
        bool v1 = strcmp(fstype, "cgroup") == 0, v2 = strcmp(fstype, "cgroup2") == 0;
        if (!v1 && !v2)
            continue;
        unescape_octal(f[3]);
        unescape_octal(f[4]);
        char dir[PATH_MAX];
        if (v2) {
            if (!v2_own[0] && own_dir(f[3], f[4], own->v2, dir, sizeof(dir)) == 0)
                snprintf(v2_own, v2_len, "%s", dir);
            continue;
        }
        for (int c = 0; c < SBX_CGC_COUNT; c++) {
            if (host->v1_has[c] || !list_has(super, ctrl_names[c], ","))
                continue;
            if (own_dir(f[3], f[4], own->v1[c], dir, sizeof(dir)) == 0 &&
                join(host->v1_base[c], sizeof(host->v1_base[c]), dir, CG_BASE_NAME) == 0)
                host->v1_has[c] = true;
        }
    }
}

/* Does the unified own cgroup offer memory, pids and cpu? If not, say why. */
static bool v2_usable(const char *own, char *why, size_t len)
{
    sbx_err e = {0};
    cleanup_free char *ctrls = NULL;
    if (cg_read(own, "cgroup.controllers", &ctrls, &e) < 0) {
        why_set(why, len, "v2: %s: %s", e.msg, strerror(e.errnum));
        return false;
    }
    static const char *const need[] = {"memory", "pids", "cpu"};
    char missing[64] = "";
    for (size_t i = 0; i < SBX_ARRAY_LEN(need); i++)
        if (!list_has(ctrls, need[i], " \n"))
            snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), "%s%s",
                     missing[0] ? "," : "", need[i]);
    if (!missing[0])
        return true;
    why_set(why, len, "v2: %s/cgroup.controllers lacks %s", own, missing);
    return false;
}

static void clear_v1(struct sbx_cg_host *host)
{
    memset(host->v1_base, 0, sizeof(host->v1_base));
    memset(host->v1_has, 0, sizeof(host->v1_has));
}

/* Settle on v1 (memory and pids present) or rlimit, with why. The v2 reason is
 * kept for rlimit, and for v1 too when v2 was tried and given up. */
static void settle_v1_or_rlimit(struct sbx_cg_host *host, const char *v2_why, bool v2_tried)
{
    bool v1 = host->v1_has[SBX_CGC_MEMORY] && host->v1_has[SBX_CGC_PIDS];
    host->mode = v1 ? SBX_CG_V1 : SBX_CG_RLIMIT;
    host->v2_base[0] = '\0';
    host->why[0] = '\0';
    if (v2_why[0] && (!v1 || v2_tried))
        why_add(host, "%s", v2_why);
    for (int c = 0; c < SBX_CGC_COUNT; c++) {
        bool needed = c == SBX_CGC_MEMORY || c == SBX_CGC_PIDS;
        if (!host->v1_has[c] && (v1 || needed))
            why_add(host, "no v1 %s hierarchy", ctrl_names[c]);
    }
}

int sbx_cg_host_parse(const char *mountinfo, const char *proc_cgroup, struct sbx_cg_host *host,
                      sbx_err *err)
{
    if (!mountinfo || !proc_cgroup || !host)
        return sbx_err_set(err, EINVAL, "cgroup parse: missing argument");
    memset(host, 0, sizeof(*host));
    cleanup_free char *mi = strdup(mountinfo);
    cleanup_free char *pc = strdup(proc_cgroup);
    if (!mi || !pc)
        return sbx_err_set(err, ENOMEM, "cgroup parse");

    struct own_paths own = {0};
    parse_proc_cgroup(pc, &own);
    char v2_own[PATH_MAX] = "";
    parse_mountinfo(mi, &own, host, v2_own, sizeof(v2_own));

    char v2_why[sizeof(host->why)] = "";
    if (!v2_own[0])
        why_set(v2_why, sizeof(v2_why), "v2: no cgroup2 mount reaching our cgroup");
    else if (v2_usable(v2_own, v2_why, sizeof(v2_why)) &&
             join(host->v2_base, sizeof(host->v2_base), v2_own, CG_BASE_NAME) == 0) {
        host->mode = SBX_CG_V2;
        return 0;
    }
    settle_v1_or_rlimit(host, v2_why, false);
    return 0;
}

/* ---- host detection: preparing the bases ---- */

/* mkdir the base (it may exist) and prove we can make cgroups in it. */
/* A base we just made is writable by proof; an existing one is checked with
 * access(), which also sees a read-only mount. No probe directory: this runs
 * at the start of every `sandboxd run`. */
static int ensure_writable(const char *base, sbx_err *err)
{
    if (mkdir(base, 0755) == 0)
        return 0;
    if (errno != EEXIST)
        return sbx_err_set(err, errno, "mkdir %s", base);
    if (access(base, W_OK) < 0)
        return sbx_err_set(err, errno, "cgroup %s not writable", base);
    return 0;
}

/* Enable memory, pids and cpu for dir's children, unless they already are. */
static int v2_enable(const char *dir, char *why, size_t len)
{
    cleanup_free char *cur = NULL;
    if (cg_read(dir, "cgroup.subtree_control", &cur, NULL) == 0 && list_has(cur, "memory", " \n") &&
        list_has(cur, "pids", " \n") && list_has(cur, "cpu", " \n"))
        return 0;
    sbx_err e = {0};
    if (cg_write(dir, "cgroup.subtree_control", CG_V2_ENABLE, CG_REQUIRED, &e) == 0)
        return 0;
    if (e.errnum == EBUSY)
        why_set(why, len,
                "v2: %s/cgroup.subtree_control: busy: the cgroup has processes of its own "
                "(no internal processes rule)",
                dir);
    else
        why_set(why, len, "v2: %s: %s", e.msg, strerror(e.errnum));
    return -1;
}

static int prepare_v2(struct sbx_cg_host *host, char *why, size_t len)
{
    char own[PATH_MAX];
    snprintf(own, sizeof(own), "%s", host->v2_base);
    char *slash = strrchr(own, '/');
    if (!slash || slash == own) {
        why_set(why, len, "v2: bad base %s", host->v2_base);
        return -1;
    }
    *slash = '\0';
    if (v2_enable(own, why, len) < 0)
        return -1;
    sbx_err e = {0};
    if (ensure_writable(host->v2_base, &e) < 0) {
        why_set(why, len, "v2: %s: %s", e.msg, strerror(e.errnum));
        return -1;
    }
    return v2_enable(host->v2_base, why, len);
}

/* Memory and pids are required; cpu, cpuacct and freezer are dropped (with a
 * note in why) when their base is not writable. */
static int prepare_v1(struct sbx_cg_host *host)
{
    for (int c = 0; c < SBX_CGC_COUNT; c++) {
        if (!host->v1_has[c])
            continue;
        sbx_err e = {0};
        if (ensure_writable(host->v1_base[c], &e) == 0)
            continue;
        if (c == SBX_CGC_MEMORY || c == SBX_CGC_PIDS) {
            host->why[0] = '\0';
            why_add(host, "v1 %s: %s: %s", ctrl_names[c], e.msg, strerror(e.errnum));
            host->mode = SBX_CG_RLIMIT;
            clear_v1(host);
            return -1;
        }
        host->v1_has[c] = false;
        host->v1_base[c][0] = '\0';
        why_add(host, "v1 %s unusable: %s: %s", ctrl_names[c], e.msg, strerror(e.errnum));
    }
    return 0;
}

static void rlimit_because(struct sbx_cg_host *host, const char *what, int errnum)
{
    memset(host, 0, sizeof(*host));
    host->mode = SBX_CG_RLIMIT;
    why_add(host, "%s%s%s", what, errnum ? ": " : "", errnum ? strerror(errnum) : "");
}

int sbx_cg_host_detect_at(const char *mountinfo_path, const char *proc_cgroup_path,
                          bool force_rlimit, struct sbx_cg_host *host, sbx_err *err)
{
    if (!mountinfo_path || !proc_cgroup_path || !host)
        return sbx_err_set(err, EINVAL, "cgroup detect: missing argument");
    if (force_rlimit) {
        rlimit_because(host, "forced", 0);
        return 0;
    }
    cleanup_free char *mi = NULL;
    cleanup_free char *pc = NULL;
    sbx_err e = {0};
    if (read_text(mountinfo_path, &mi, &e) < 0 || read_text(proc_cgroup_path, &pc, &e) < 0) {
        rlimit_because(host, e.msg, e.errnum);
        return 0;
    }
    if (sbx_cg_host_parse(mi, pc, host, err) < 0)
        return -1;

    if (host->mode == SBX_CG_V2) {
        char v2_why[sizeof(host->why)] = "";
        if (prepare_v2(host, v2_why, sizeof(v2_why)) == 0) {
            clear_v1(host);
            return 0;
        }
        settle_v1_or_rlimit(host, v2_why, true);
    }
    if (host->mode == SBX_CG_V1)
        prepare_v1(host);
    if (host->mode != SBX_CG_V1)
        clear_v1(host);
    return 0;
}

int sbx_cg_host_detect(bool force_rlimit, struct sbx_cg_host *host, sbx_err *err)
{
    return sbx_cg_host_detect_at("/proc/self/mountinfo", "/proc/self/cgroup", force_rlimit, host,
                                 err);
}

/* ---- one sandbox's cgroup ---- */

/* cpu,cpuacct mounted together give two controllers one directory: did an
 * earlier controller already use this path? */
static bool v1_earlier(const struct sbx_cgroup *cg, int c, const char *path)
{
    for (int i = 0; i < c; i++)
        if (cg->path[i][0] && strcmp(cg->path[i], path) == 0)
            return true;
    return false;
}

static uint64_t cpu_quota_us(double cores)
{
    double q = cores * CG_CPU_PERIOD_US + 0.5;
    return q < CG_CPU_MIN_QUOTA_US ? CG_CPU_MIN_QUOTA_US : (uint64_t)q;
}

static int limit_memory_v1(const char *dir, uint64_t bytes, sbx_err *err)
{
    if (cg_write_u64(dir, "memory.limit_in_bytes", bytes, err) < 0)
        return -1;
    /* memsw (memory + swap) exists only with swap accounting; without it a
     * sandbox could page out past its limit. It must not be below the memory
     * limit, hence written second. */
    if (cg_exists(dir, "memory.memsw.limit_in_bytes") &&
        cg_write_u64(dir, "memory.memsw.limit_in_bytes", bytes, err) < 0)
        return -1;
    (void)cg_write(dir, "memory.swappiness", "0", CG_OPTIONAL, NULL); /* best effort */
    return 0;
}

static int create_v1(const struct sbx_cg_host *host, const char *name,
                     const struct sbx_cg_limits *lim, struct sbx_cgroup *cg, sbx_err *err)
{
    for (int c = 0; c < SBX_CGC_COUNT; c++) {
        if (!host->v1_has[c])
            continue;
        char path[PATH_MAX];
        if (sbx_cg_child_path(host->v1_base[c], name, path, sizeof(path), err) < 0)
            return -1;
        if (!v1_earlier(cg, c, path) && mkdir(path, 0755) < 0)
            return sbx_err_set(err, errno, "cgroup mkdir %s", path);
        memcpy(cg->path[c], path, sizeof(path));
    }
    const char *mem = cg->path[SBX_CGC_MEMORY], *pids = cg->path[SBX_CGC_PIDS];
    const char *cpu = cg->path[SBX_CGC_CPU];
    if (lim->memory_bytes && mem[0] && limit_memory_v1(mem, lim->memory_bytes, err) < 0)
        return -1;
    if (lim->pids && pids[0] && cg_write_u64(pids, "pids.max", lim->pids, err) < 0)
        return -1;
    if (lim->cpu_cores > 0 && cpu[0]) {
        if (cg_write_u64(cpu, "cpu.cfs_period_us", CG_CPU_PERIOD_US, err) < 0 ||
            cg_write_u64(cpu, "cpu.cfs_quota_us", cpu_quota_us(lim->cpu_cores), err) < 0)
            return -1;
        cg->cpu_enforced = true;
    }
    return 0;
}

static int create_v2(const struct sbx_cg_host *host, const char *name,
                     const struct sbx_cg_limits *lim, struct sbx_cgroup *cg, sbx_err *err)
{
    char path[PATH_MAX];
    if (sbx_cg_child_path(host->v2_base, name, path, sizeof(path), err) < 0)
        return -1;
    if (mkdir(path, 0755) < 0)
        return sbx_err_set(err, errno, "cgroup mkdir %s", path);
    memcpy(cg->v2_path, path, sizeof(path));
    if (lim->memory_bytes) {
        if (cg_write_u64(path, "memory.max", lim->memory_bytes, err) < 0)
            return -1;
        /* No memory.swap.max without swap accounting: then there is no swap to limit. */
        sbx_err e = {0};
        if (cg_write(path, "memory.swap.max", "0", CG_OPTIONAL, &e) < 0 && e.errnum != ENOENT)
            return pass_err(err, &e);
    }
    if (lim->pids && cg_write_u64(path, "pids.max", lim->pids, err) < 0)
        return -1;
    if (lim->cpu_cores > 0) {
        char buf[48];
        snprintf(buf, sizeof(buf), "%" PRIu64 " %d", cpu_quota_us(lim->cpu_cores),
                 CG_CPU_PERIOD_US);
        if (cg_write(path, "cpu.max", buf, CG_REQUIRED, err) < 0)
            return -1;
        cg->cpu_enforced = true;
    }
    return 0;
}

int sbx_cgroup_create(const struct sbx_cg_host *host, const char *name,
                      const struct sbx_cg_limits *lim, struct sbx_cgroup *cg, sbx_err *err)
{
    if (!host || !lim || !cg)
        return sbx_err_set(err, EINVAL, "cgroup create: missing argument");
    if (check_name(name, err) < 0)
        return -1;
    if (!(lim->cpu_cores >= 0) || lim->cpu_cores > CG_CPU_MAX_CORES)
        return sbx_err_set(err, EINVAL, "cgroup cpu limit %g out of range", lim->cpu_cores);
    memset(cg, 0, sizeof(*cg));
    cg->mode = host->mode;
    int rc = 0;
    if (host->mode == SBX_CG_V2)
        rc = create_v2(host, name, lim, cg, err);
    else if (host->mode == SBX_CG_V1)
        rc = create_v1(host, name, lim, cg, err);
    if (rc < 0) {
        /* Only what this call made is in cg, so only that is removed. */
        (void)sbx_cgroup_destroy(cg, NULL);
        memset(cg, 0, sizeof(*cg));
        cg->mode = host->mode;
        return -1;
    }
    return 0;
}

int sbx_cgroup_attach(const struct sbx_cgroup *cg, pid_t pid, sbx_err *err)
{
    if (!cg || pid <= 0)
        return sbx_err_set(err, EINVAL, "cgroup attach: bad argument");
    char buf[24];
    snprintf(buf, sizeof(buf), "%d", (int)pid);
    if (cg->mode == SBX_CG_V2 && cg->v2_path[0])
        return cg_write(cg->v2_path, "cgroup.procs", buf, CG_REQUIRED, err) < 0 ? -1 : 0;
    if (cg->mode != SBX_CG_V1)
        return 0;
    for (int c = 0; c < SBX_CGC_COUNT; c++) {
        if (!cg->path[c][0] || v1_earlier(cg, c, cg->path[c]))
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
        if (!cg->path[c][0] || v1_earlier(cg, c, cg->path[c]))
            continue;
        char path[PATH_MAX];
        if (join(path, sizeof(path), cg->path[c], "tasks") < 0 ||
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
            return sbx_err_set(err, errno, "cgroup join %s", ctrl_names[c]);
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
    int fd = open(cg->v2_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return sbx_err_set(err, errno, "cgroup open %s", cg->v2_path);
    return fd;
}

/* ---- freezing, killing ---- */

static int freeze_v1(const char *dir, bool frozen, sbx_err *err)
{
    if (cg_write(dir, "freezer.state", frozen ? "FROZEN" : "THAWED", CG_REQUIRED, err) < 0)
        return -1;
    if (!frozen)
        return 0;
    /* Tasks stop asynchronously: the state reads FREEZING until all have. */
    int64_t deadline = now_ms() + CG_FREEZE_WAIT_MS;
    for (;;) {
        cleanup_free char *state = NULL;
        if (cg_read(dir, "freezer.state", &state, err) < 0)
            return -1;
        if (strncmp(state, "FROZEN", 6) == 0)
            return 0;
        if (now_ms() >= deadline)
            return sbx_err_set(err, EBUSY, "cgroup freezer.state in %s: not FROZEN in time", dir);
        sleep_ms(1);
    }
}

static int freeze_v2(const char *dir, bool frozen, sbx_err *err)
{
    sbx_err e = {0};
    if (cg_write(dir, "cgroup.freeze", frozen ? "1" : "0", CG_REQUIRED, &e) < 0)
        return e.errnum == ENOENT ? 0 /* kernel before 5.2: no v2 freezer */ : pass_err(err, &e);
    if (!frozen)
        return 0;
    int64_t deadline = now_ms() + CG_FREEZE_WAIT_MS;
    for (;;) {
        cleanup_free char *events = NULL;
        uint64_t v;
        if (cg_read(dir, "cgroup.events", &events, NULL) < 0)
            return 0; /* nothing to wait on */
        if (keyed_u64(events, "frozen", &v) < 0 || v == 1)
            return 0;
        if (now_ms() >= deadline)
            return sbx_err_set(err, EBUSY, "cgroup cgroup.freeze in %s: not frozen in time", dir);
        sleep_ms(1);
    }
}

int sbx_cgroup_freeze(const struct sbx_cgroup *cg, bool frozen, sbx_err *err)
{
    if (!cg)
        return sbx_err_set(err, EINVAL, "cgroup freeze: missing argument");
    if (cg->mode == SBX_CG_V2 && cg->v2_path[0])
        return freeze_v2(cg->v2_path, frozen, err);
    if (cg->mode == SBX_CG_V1 && cg->path[SBX_CGC_FREEZER][0])
        return freeze_v1(cg->path[SBX_CGC_FREEZER], frozen, err);
    return 0;
}

/* SIGKILL every pid in dir/cgroup.procs; *n is the number signalled. */
static int kill_listed(const char *dir, int *signalled, sbx_err *err)
{
    cleanup_free char *procs = NULL;
    if (cg_read(dir, "cgroup.procs", &procs, err) < 0)
        return -1;
    int n = 0;
    char *cursor = procs, *line;
    while ((line = next_line(&cursor))) {
        uint64_t v;
        if (parse_u64(line, &v) < 0 || v <= 1 || v > INT32_MAX || (pid_t)v == getpid())
            continue;
        if (kill((pid_t)v, SIGKILL) == 0 || errno != ESRCH)
            n++;
    }
    *signalled = n;
    return 0;
}

static bool wait_empty(const char *dir, long ms)
{
    int64_t deadline = now_ms() + ms;
    for (;;) {
        cleanup_free char *procs = NULL;
        if (cg_read(dir, "cgroup.procs", &procs, NULL) < 0)
            return true;
        if (strspn(procs, " \n") == strlen(procs))
            return true;
        if (now_ms() >= deadline)
            return false;
        sleep_ms(CG_POLL_MS);
    }
}

/* Without cgroup.kill: freeze so that no listed task can fork or exit (and its
 * pid be reused) while we go through the list, kill, thaw so the kills land. */
static int kill_loop(const struct sbx_cgroup *cg, const char *dir, sbx_err *err)
{
    /* The usual case after a sandbox's init exited: nothing to freeze for. */
    if (wait_empty(dir, 0))
        return 0;
    for (int round = 0; round < CG_KILL_ROUNDS; round++) {
        int n = 0;
        sbx_err e = {0};
        (void)sbx_cgroup_freeze(cg, true, NULL);
        int rc = kill_listed(dir, &n, &e);
        (void)sbx_cgroup_freeze(cg, false, NULL);
        if (rc < 0)
            return e.errnum == ENOENT ? 0 /* the cgroup is gone */ : pass_err(err, &e);
        if (n == 0 || wait_empty(dir, CG_KILL_WAIT_MS))
            return 0;
    }
    return sbx_err_set(err, EBUSY, "cgroup %s: processes left after SIGKILL", dir);
}

int sbx_cgroup_kill_all(const struct sbx_cgroup *cg, sbx_err *err)
{
    if (!cg)
        return sbx_err_set(err, EINVAL, "cgroup kill: missing argument");
    if (cg->mode == SBX_CG_V2 && cg->v2_path[0]) {
        sbx_err e = {0};
        if (cg_write(cg->v2_path, "cgroup.kill", "1", CG_REQUIRED, &e) == 0)
            return 0;
        if (e.errnum != ENOENT)
            return pass_err(err, &e);
        return kill_loop(cg, cg->v2_path, err); /* kernel before 5.14 */
    }
    if (cg->mode != SBX_CG_V1)
        return 0;
    static const enum sbx_cg_ctrl order[] = {SBX_CGC_FREEZER, SBX_CGC_PIDS, SBX_CGC_MEMORY};
    for (size_t i = 0; i < SBX_ARRAY_LEN(order); i++)
        if (cg->path[order[i]][0])
            return kill_loop(cg, cg->path[order[i]], err);
    return 0;
}

/* ---- accounting ---- */

static void stats_v1(const struct sbx_cgroup *cg, struct sbx_cg_stats *st)
{
    const char *acct = cg->path[SBX_CGC_CPUACCT], *mem = cg->path[SBX_CGC_MEMORY];
    uint64_t v;
    if (acct[0] && cg_read_u64(acct, "cpuacct.usage", &v) == 0) {
        st->cpu_usec = v / 1000; /* ns */
        st->have_cpu = true;
    }
    if (mem[0] && cg_read_u64(mem, "memory.max_usage_in_bytes", &v) == 0) {
        st->peak_mem_bytes = v;
        st->have_mem = true;
        cleanup_free char *oom = NULL;
        if (cg_read(mem, "memory.oom_control", &oom, NULL) == 0 &&
            keyed_u64(oom, "oom_kill", &v) == 0) /* absent before 4.13 */
            st->oom_kills = v;
    }
}

static void stats_v2(const char *dir, struct sbx_cg_stats *st)
{
    uint64_t v;
    cleanup_free char *cpu = NULL;
    if (cg_read(dir, "cpu.stat", &cpu, NULL) == 0 && keyed_u64(cpu, "usage_usec", &v) == 0) {
        st->cpu_usec = v;
        st->have_cpu = true;
    }
    /* memory.peak appeared in 5.19; before that the current usage is the best left. */
    if (cg_read_u64(dir, "memory.peak", &v) == 0 || cg_read_u64(dir, "memory.current", &v) == 0) {
        st->peak_mem_bytes = v;
        st->have_mem = true;
    }
    cleanup_free char *events = NULL;
    if (cg_read(dir, "memory.events", &events, NULL) == 0 && keyed_u64(events, "oom_kill", &v) == 0)
        st->oom_kills = v;
}

int sbx_cgroup_stats(const struct sbx_cgroup *cg, struct sbx_cg_stats *st, sbx_err *err)
{
    if (!cg || !st)
        return sbx_err_set(err, EINVAL, "cgroup stats: missing argument");
    memset(st, 0, sizeof(*st));
    if (cg->mode == SBX_CG_V2 && cg->v2_path[0])
        stats_v2(cg->v2_path, st);
    else if (cg->mode == SBX_CG_V1)
        stats_v1(cg, st);
    return 0;
}

/* ---- removal ---- */

/* A cgroup whose last task just died can stay busy for a moment. */
static int rmdir_retry(const char *path, int64_t deadline, sbx_err *err)
{
    for (;;) {
        if (rmdir(path) == 0 || errno == ENOENT)
            return 0;
        if (errno != EBUSY || now_ms() >= deadline)
            return sbx_err_set(err, errno, "cgroup rmdir %s", path);
        sleep_ms(CG_RMDIR_POLL_MS);
    }
}

int sbx_cgroup_adopt(const struct sbx_cg_host *host, const char *name, struct sbx_cgroup *cg,
                     sbx_err *err)
{
    memset(cg, 0, sizeof(*cg));
    cg->mode = host->mode;
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

int sbx_cgroup_remove_empty(struct sbx_cgroup *cg)
{
    int rc = 0;
    if (cg->v2_path[0] && rmdir(cg->v2_path) < 0 && errno != ENOENT)
        rc = -1;
    for (int c = 0; c < SBX_CGC_COUNT; c++)
        if (cg->path[c][0] && !v1_earlier(cg, c, cg->path[c]) && rmdir(cg->path[c]) < 0 &&
            errno != ENOENT)
            rc = -1;
    return rc;
}

int sbx_cgroup_destroy(struct sbx_cgroup *cg, sbx_err *err)
{
    if (!cg)
        return sbx_err_set(err, EINVAL, "cgroup destroy: missing argument");
    int64_t deadline = now_ms() + CG_RMDIR_WAIT_MS;
    int rc = 0;
    if (cg->v2_path[0]) {
        if (rmdir_retry(cg->v2_path, deadline, err) < 0)
            rc = -1;
        else
            cg->v2_path[0] = '\0';
    }
    for (int c = 0; c < SBX_CGC_COUNT; c++) {
        if (!cg->path[c][0])
            continue;
        if (rmdir_retry(cg->path[c], deadline, rc < 0 ? NULL : err) < 0) {
            rc = -1;
            continue;
        }
        for (int d = c + 1; d < SBX_CGC_COUNT; d++)
            if (strcmp(cg->path[d], cg->path[c]) == 0)
                cg->path[d][0] = '\0';
        cg->path[c][0] = '\0';
    }
    return rc;
}
