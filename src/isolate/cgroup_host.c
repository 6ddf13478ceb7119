/* Cgroups: what the host offers. Pure parsing of mountinfo and
 * /proc/self/cgroup, then preparing the "sandboxd/" bases. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "isolate/cgroup.h"
#include "isolate/cgroup_int.h"

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
char cg_base_name[65] = "sandboxd";

int sbx_cg_set_base_name(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n >= sizeof(cg_base_name) || strchr(name, '/') || strcmp(name, ".") == 0 ||
        strcmp(name, "..") == 0) {
        errno = EINVAL;
        return -1;
    }
    memcpy(cg_base_name, name, n + 1);
    return 0;
}

const char *sbx_cg_base_name(void)
{
    return cg_base_name;
}

static void parse_proc_cgroup(char *text, struct own_paths *own)
{
    char *cursor = text, *line;
    while ((line = cg_next_line(&cursor))) {
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
            if (!own->v1[c] && cg_list_has(ctrls, cg_ctrl_names[c], ","))
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
    while ((line = cg_next_line(&cursor))) {
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
            if (host->v1_has[c] || !cg_list_has(super, cg_ctrl_names[c], ","))
                continue;
            if (own_dir(f[3], f[4], own->v1[c], dir, sizeof(dir)) == 0 &&
                cg_join(host->v1_base[c], sizeof(host->v1_base[c]), dir, cg_base_name) == 0)
                host->v1_has[c] = true;
        }
    }
}

/* "<base>.daemon": the leaf beside the sandboxd/ base a daemon moves to on
 * v2 (v2_leave_own). */
static void leaf_name(char *out, size_t len)
{
    snprintf(out, len, "%s.daemon", cg_base_name);
}

/* A daemon started in that leaf (a restart in place; systemd's
 * DelegateSubgroup=) has the leaf's parent as its own cgroup, where its
 * sandboxd/ base is. */
static void own_above_leaf(char *own)
{
    char name[sizeof(cg_base_name) + 8];
    leaf_name(name, sizeof(name));
    char *slash = strrchr(own, '/');
    if (slash && slash != own && strcmp(slash + 1, name) == 0)
        *slash = '\0';
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
        if (!cg_list_has(ctrls, need[i], " \n"))
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
            why_add(host, "no v1 %s hierarchy", cg_ctrl_names[c]);
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
    own_above_leaf(v2_own);

    char v2_why[sizeof(host->why)] = "";
    if (!v2_own[0])
        why_set(v2_why, sizeof(v2_why), "v2: no cgroup2 mount reaching our cgroup");
    else if (v2_usable(v2_own, v2_why, sizeof(v2_why)) &&
             cg_join(host->v2_base, sizeof(host->v2_base), v2_own, cg_base_name) == 0) {
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

/* Enable memory, pids and cpu for dir's children, unless they already are:
 * 0, or the errno of the failure (said in why). */
static int v2_enable(const char *dir, char *why, size_t len)
{
    cleanup_free char *cur = NULL;
    if (cg_read(dir, "cgroup.subtree_control", &cur, NULL) == 0 &&
        cg_list_has(cur, "memory", " \n") && cg_list_has(cur, "pids", " \n") &&
        cg_list_has(cur, "cpu", " \n"))
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
    return e.errnum ? e.errnum : EIO;
}

/* The parent pid of pid (from /proc/<pid>/stat), or -1. */
static pid_t parent_of(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    cleanup_free char *stat = NULL;
    if (cg_read_text(path, &stat, NULL) < 0)
        return -1;
    const char *end = strrchr(stat, ')'); /* the command name may hold anything */
    int ppid;
    if (!end || sscanf(end + 1, " %*c %d", &ppid) != 1)
        return -1;
    return ppid;
}

#define CG_OWN_PROCS_MAX 16 /* us, our spawner, and room: more is not ours alone */

int cg_read_procs(const char *dir, pid_t *pids, size_t max, size_t *n, sbx_err *err)
{
    cleanup_free char *procs = NULL;
    if (cg_read(dir, "cgroup.procs", &procs, err) < 0)
        return -1;
    *n = 0;
    char *cursor = procs, *line;
    while ((line = cg_next_line(&cursor))) {
        uint64_t v;
        if (cg_parse_u64(line, &v) < 0 || v == 0 || v > INT32_MAX)
            continue;
        if (*n == max)
            return sbx_err_set(err, E2BIG, "cgroup %s: more than %zu processes", dir, max);
        pids[(*n)++] = (pid_t)v;
    }
    return 0;
}

/* v2's "no internal processes" rule: a cgroup that holds processes cannot
 * give its children controllers (the root cgroup excepted), and a daemon
 * started as a systemd unit is in its unit's cgroup. When our own cgroup
 * holds nothing but us and the children we forked before (the spawner), we
 * all move into a leaf beside the sandboxd/ base (<base>.daemon), as the
 * owner of a delegated cgroup does; with anyone else in it we stay and say
 * why. */
static int v2_leave_own(const char *own, char *why, size_t len)
{
    pid_t pids[CG_OWN_PROCS_MAX], self = getpid();
    size_t n;
    sbx_err e = {0};
    if (cg_read_procs(own, pids, SBX_ARRAY_LEN(pids), &n, &e) < 0) {
        why_set(why, len, "v2: %s: %s", e.msg, strerror(e.errnum));
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (pids[i] != self && parent_of(pids[i]) != self && kill(pids[i], 0) == 0) {
            why_set(why, len,
                    "v2: %s/cgroup.subtree_control: busy: the cgroup holds process %d, not "
                    "ours (no internal processes rule): run the daemon in a cgroup of its own "
                    "(a systemd unit with Delegate=yes)",
                    own, (int)pids[i]);
            return -1;
        }
    char leaf[PATH_MAX], name[sizeof(cg_base_name) + 8];
    leaf_name(name, sizeof(name));
    if (cg_join(leaf, sizeof(leaf), own, name) < 0 || (mkdir(leaf, 0755) < 0 && errno != EEXIST)) {
        why_set(why, len, "v2: mkdir %s/%s: %s", own, name, strerror(errno));
        return -1;
    }
    /* One that exited since is ESRCH; one forked since stays, and the
     * enabling that follows says EBUSY. */
    for (size_t i = 0; i < n; i++) {
        char pid[24];
        snprintf(pid, sizeof(pid), "%d", (int)pids[i]);
        if (cg_write(leaf, "cgroup.procs", pid, CG_REQUIRED, &e) < 0 && e.errnum != ESRCH) {
            why_set(why, len, "v2: %s: %s", e.msg, strerror(e.errnum));
            return -1;
        }
    }
    return 0;
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
    int busy = v2_enable(own, why, len);
    if (busy && (busy != EBUSY || v2_leave_own(own, why, len) < 0 || v2_enable(own, why, len)))
        return -1;
    sbx_err e = {0};
    if (ensure_writable(host->v2_base, &e) < 0) {
        why_set(why, len, "v2: %s: %s", e.msg, strerror(e.errnum));
        return -1;
    }
    return v2_enable(host->v2_base, why, len) ? -1 : 0;
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
            why_add(host, "v1 %s: %s: %s", cg_ctrl_names[c], e.msg, strerror(e.errnum));
            host->mode = SBX_CG_RLIMIT;
            clear_v1(host);
            return -1;
        }
        host->v1_has[c] = false;
        host->v1_base[c][0] = '\0';
        why_add(host, "v1 %s unusable: %s: %s", cg_ctrl_names[c], e.msg, strerror(e.errnum));
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
    if (cg_read_text(mountinfo_path, &mi, &e) < 0 || cg_read_text(proc_cgroup_path, &pc, &e) < 0) {
        rlimit_because(host, e.msg, e.errnum);
        return 0;
    }
    if (sbx_cg_host_parse(mi, pc, host, err) < 0)
        return -1;

    if (host->mode == SBX_CG_V2) {
        char v2_why[sizeof(host->why)] = "";
        if (prepare_v2(host, v2_why, sizeof(v2_why)) == 0) {
            clear_v1(host);
            host->v2_kill = cg_exists(host->v2_base, "cgroup.kill");
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
