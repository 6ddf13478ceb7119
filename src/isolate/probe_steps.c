#include "isolate/probe_steps.h"

#include <errno.h>
#include <grp.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "isolate/sandbox.h"

static const char *const step_names[SBX_STEP_COUNT] = {
    [SBX_STEP_CAPS] = "capabilities",
    [SBX_STEP_USERNS] = "user namespace",
    [SBX_STEP_IDMAP] = "id map",
    [SBX_STEP_NAMESPACES] = "other namespaces",
    [SBX_STEP_USER_LIMITS] = "user limits",
    [SBX_STEP_TMPFS] = "mount tmpfs",
    [SBX_STEP_PROCFS] = "mount procfs",
    [SBX_STEP_PIVOT] = "pivot_root",
    [SBX_STEP_CGROUP] = "cgroup write",
    [SBX_STEP_SECCOMP] = "seccomp load",
    [SBX_STEP_LOOP] = "loop device",
};

const char *sbx_step_name(enum sbx_step s)
{
    return (unsigned)s < SBX_STEP_COUNT ? step_names[s] : "?";
}

/* ---- pure parts ---- */

static const struct {
    int bit;
    const char *name;
} cap_names[] = {
    {21, "SYS_ADMIN"},   {7, "SETUID"}, {6, "SETGID"}, {0, "CHOWN"},
    {1, "DAC_OVERRIDE"}, {3, "FOWNER"}, {27, "MKNOD"},
};

void sbx_caps_flags(uint64_t have, uint64_t want, char *buf, size_t len)
{
    size_t n = 0;
    if (len)
        buf[0] = '\0';
    for (size_t i = 0; i < sizeof(cap_names) / sizeof(cap_names[0]); i++) {
        uint64_t bit = 1ull << cap_names[i].bit;
        if (!(want & bit) || (have & bit) || n >= len)
            continue;
        int w = snprintf(buf + n, len - n, "%s--cap-add %s", n ? " " : "", cap_names[i].name);
        n += w > 0 ? (size_t)w : 0;
    }
}

#define UNCONFINED "--security-opt seccomp=unconfined"

void sbx_step_fix(enum sbx_step s, int errnum, bool in_container, char *buf, size_t len)
{
    const char *fix = NULL;
    switch (s) {
    case SBX_STEP_CAPS:
        fix = "run as root with the capabilities named above";
        break;
    case SBX_STEP_USERNS:
    case SBX_STEP_NAMESPACES:
        if (errnum == ENOSPC)
            fix = "raise the user namespace limit: sysctl -w user.max_user_namespaces=10000";
        else if (errnum == EINVAL)
            fix = "a kernel built with CONFIG_USER_NS and the other namespaces is needed";
        else if (in_container)
            fix = "add --cap-add SYS_ADMIN (Docker's default seccomp profile allows unshare "
                  "and mount only with it), or " UNCONFINED;
        else
            fix = "run as root; check kernel.unprivileged_userns_clone and "
                  "user.max_user_namespaces";
        break;
    case SBX_STEP_IDMAP:
        fix = in_container ? "add --cap-add SETUID --cap-add SETGID (needed to map 65536 ids "
                             "into each sandbox's user namespace)"
                           : "run as root: mapping 65536 ids needs CAP_SETUID and CAP_SETGID";
        break;
    case SBX_STEP_USER_LIMITS:
        fix = in_container ? "/proc/sys is read-only in the container: bind a writable "
                             "/proc/sys/user over it before the daemon starts (deploy/docker/"
                             "entrypoint.sh does, from its spare procfs: mount --bind "
                             "/run/sandbox/proc/sys/user /proc/sys/user)"
                           : "make /proc/sys/user writable";
        break;
    case SBX_STEP_TMPFS:
        fix = in_container ? "add --cap-add SYS_ADMIN and " UNCONFINED
                             " (and --security-opt apparmor=unconfined where AppArmor "
                             "confines containers)"
                           : "a mount inside a user namespace was refused: check the LSM "
                             "(AppArmor, SELinux) policy";
        break;
    case SBX_STEP_PROCFS:
        fix = in_container
                  ? "the container's /proc is masked (/proc/kcore, /proc/sys ...), and the kernel "
                    "then refuses a fresh procfs in a user namespace: mount a spare unmasked "
                    "procfs in the container before the daemon starts (deploy/docker/"
                    "entrypoint.sh does: mount -t proc proc /run/sandbox/proc), or add "
                    "--security-opt systempaths=unconfined"
                  : "some /proc path is over-mounted, and the kernel then refuses a fresh procfs "
                    "in a user namespace: mount a spare procfs (mount -t proc proc DIR)";
        break;
    case SBX_STEP_PIVOT:
        fix = in_container ? "add " UNCONFINED " (Docker's default seccomp profile blocks "
                             "pivot_root; podman's allows it)"
                           : "a seccomp filter or LSM of this process blocks pivot_root";
        break;
    case SBX_STEP_CGROUP:
        if (errnum == EROFS)
            fix = in_container ? "the container's cgroup mounts are read-only: remount them "
                                 "read-write before the daemon starts (mount -o remount,rw "
                                 "on each controller but devices; deploy/docker/entrypoint.sh "
                                 "does, with SYS_ADMIN); until then limits fall back to rlimits"
                               : "remount the cgroup hierarchy read-write; until then limits "
                                 "fall back to rlimits";
        else
            fix = "make the daemon's cgroup writable (delegate it); until then limits fall "
                  "back to rlimits";
        break;
    case SBX_STEP_SECCOMP:
        fix = "a kernel with CONFIG_SECCOMP_FILTER is needed";
        break;
    case SBX_STEP_LOOP:
        fix = in_container ? "add --device /dev/loop-control --device-cgroup-rule 'b 7:* rwm' "
                             "--cap-add MKNOD (serve makes the loop nodes it needs): serve keeps "
                             "each workspace's quota on a loop-mounted image"
                           : "load the loop module (modprobe loop): serve keeps each workspace's "
                             "quota on a loop-mounted image";
        break;
    case SBX_STEP_COUNT:
        break;
    }
    snprintf(buf, len, "%s", fix ? fix : "");
}

void sbx_steps_to_plan(const struct sbx_steps *st, struct sbx_isolation_plan *plan)
{
    for (int i = 0; i < SBX_STEP_COUNT; i++) {
        const struct sbx_step_result *r = &st->step[i];
        /* the host probe's own warning already says why seccomp failed */
        if (r->state != SBX_STEP_FAILED || i == SBX_STEP_SECCOMP)
            continue;
        if (r->required)
            plan->full = false;
        if (plan->n_warn == SBX_PLAN_WARN_MAX)
            continue;
        struct sbx_plan_warning *w = &plan->warn[plan->n_warn++];
        w->required = r->required;
        char why[96] = "";
        if (r->errnum)
            snprintf(why, sizeof(why), " (%s)", sbx_errno_name(r->errnum));
        snprintf(w->text, sizeof(w->text), "%s failed%.40s: %.180s. Fix: %.359s", sbx_step_name(i),
                 why, r->detail, r->fix);
    }
}

/* ---- trying things ---- */

struct chain {
    struct {
        int state; /* enum sbx_step_state; NOT_TRIED unless reached */
        int errnum;
    } r[SBX_STEP_COUNT];
};

static void mark(struct chain *c, enum sbx_step s, int rc)
{
    c->r[s].state = rc == 0 ? SBX_STEP_OK : SBX_STEP_FAILED;
    c->r[s].errnum = rc == 0 ? 0 : (errno ? errno : EIO);
}

static int write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    int saved = errno;
    close(fd);
    errno = saved;
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* pid 1 of the new pid namespace: the new root, as the sandbox builds it. */
static void try_mounts(struct chain *c, const char *dir)
{
    char proc[512], old[512];
    snprintf(proc, sizeof(proc), "%s/proc", dir);
    snprintf(old, sizeof(old), "%s/old", dir);
    errno = 0;
    int rc = mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
    if (rc == 0)
        rc = mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755");
    mark(c, SBX_STEP_TMPFS, rc);
    if (rc < 0)
        return;
    if (mkdir(proc, 0555) < 0 || mkdir(old, 0700) < 0) {
        mark(c, SBX_STEP_PROCFS, -1);
        return;
    }
    rc = mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    mark(c, SBX_STEP_PROCFS, rc);
    if (chdir(dir) < 0) {
        mark(c, SBX_STEP_PIVOT, -1);
        return;
    }
    rc = (int)syscall(SYS_pivot_root, ".", "old");
    mark(c, SBX_STEP_PIVOT, rc);
    if (rc == 0)
        (void)umount2("/old", MNT_DETACH);
}

static void reap(pid_t pid)
{
    while (pid > 0 && waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
}

/* In the new user namespace: wait for the id map, make the other namespaces,
 * then the new root in a child that is pid 1 of the new pid namespace. */
static void userns_child(struct chain *c, int ready_fd, int go_fd, const char *dir)
{
    errno = 0;
    int rc = unshare(CLONE_NEWUSER);
    mark(c, SBX_STEP_USERNS, rc);
    char b = rc == 0 ? 1 : 0;
    if (write(ready_fd, &b, 1) != 1 || rc < 0)
        _exit(0);
    if (read(go_fd, &b, 1) != 1 || !b)
        _exit(0);
    /* as the sandbox's child does: become the namespace's root (host id base) */
    if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0 || setgroups(0, NULL) < 0) {
        mark(c, SBX_STEP_IDMAP, -1);
        _exit(0);
    }
    errno = 0;
    rc = unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS |
                 CLONE_NEWCGROUP);
    mark(c, SBX_STEP_NAMESPACES, rc);
    if (rc < 0)
        _exit(0);
    /* as the sandbox bounds its own user namespace (a limit of this one only) */
    errno = 0;
    rc = write_file("/proc/sys/user/max_inotify_instances", "16");
    mark(c, SBX_STEP_USER_LIMITS, rc < 0 && errno == ENOENT ? 0 : rc);
    pid_t pid = fork();
    if (pid == 0) {
        try_mounts(c, dir);
        _exit(0);
    }
    reap(pid);
    _exit(0);
}

static void write_idmap(struct chain *c, pid_t pid)
{
    char path[64], map[64];
    snprintf(map, sizeof(map), "0 %u %u\n", SBX_DEFAULT_HOST_ID_BASE, SBX_ID_RANGE);
    snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
    errno = 0;
    int rc = write_file(path, map);
    if (rc == 0) {
        snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
        rc = write_file(path, map);
    }
    mark(c, SBX_STEP_IDMAP, rc);
}

/* The namespace chain in children; c lives in memory shared with them. */
static void try_chain(struct chain *c, const char *dir)
{
    int ready[2], go[2];
    if (pipe2(ready, O_CLOEXEC) < 0)
        return;
    if (pipe2(go, O_CLOEXEC) < 0) {
        close(ready[0]), close(ready[1]);
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(ready[0]), close(go[1]);
        userns_child(c, ready[1], go[0], dir);
        _exit(0);
    }
    close(ready[1]), close(go[0]);
    char b = 0;
    if (pid > 0 && read(ready[0], &b, 1) == 1 && b) {
        write_idmap(c, pid);
        b = c->r[SBX_STEP_IDMAP].state == SBX_STEP_OK;
        if (write(go[1], &b, 1) != 1)
            b = 0;
    }
    close(ready[0]), close(go[1]);
    reap(pid);
}

static uint64_t effective_caps(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    unsigned long long v = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "CapEff: %llx", &v) == 1)
            break;
    if (f)
        fclose(f);
    return v;
}

static void try_caps(struct sbx_steps *st)
{
    struct sbx_step_result *r = &st->step[SBX_STEP_CAPS];
    uint64_t have = effective_caps();
    char run[160], serve[160];
    sbx_caps_flags(have, SBX_CAPS_RUN, run, sizeof(run));
    sbx_caps_flags(have, SBX_CAPS_SERVE & ~SBX_CAPS_RUN, serve, sizeof(serve));
    r->required = run[0] != '\0';
    if (!run[0] && !serve[0]) {
        r->state = SBX_STEP_OK;
        snprintf(r->detail, sizeof(r->detail),
                 "SYS_ADMIN SETUID SETGID CHOWN DAC_OVERRIDE "
                 "FOWNER MKNOD effective");
        return;
    }
    r->state = SBX_STEP_FAILED;
    snprintf(r->detail, sizeof(r->detail), "%s",
             run[0] ? "run (and serve) lack capabilities"
                    : "run has what it needs; serve's workspace images need more");
    if (st->in_container)
        snprintf(r->fix, sizeof(r->fix), "add %s%s%s", run, run[0] && serve[0] ? " " : "", serve);
    else
        snprintf(r->fix, sizeof(r->fix), "run as root (%s%s%s)", run, run[0] && serve[0] ? " " : "",
                 serve);
}

static void try_cgroup(const struct sbx_cg_host *cg, struct sbx_steps *st)
{
    struct sbx_step_result *r = &st->step[SBX_STEP_CGROUP];
    char dir[4200];
    const char *limit = NULL;
    if (cg->mode == SBX_CG_V1 && cg->v1_has[SBX_CGC_MEMORY]) {
        snprintf(dir, sizeof(dir), "%s/doctor-%d", cg->v1_base[SBX_CGC_MEMORY], (int)getpid());
        limit = "memory.limit_in_bytes";
    } else if (cg->mode == SBX_CG_V2) {
        snprintf(dir, sizeof(dir), "%s/doctor-%d", cg->v2_base, (int)getpid());
        limit = "memory.max";
    }
    if (!limit) {
        r->state = SBX_STEP_FAILED;
        r->errnum = strstr(cg->why, strerror(EROFS)) ? EROFS : 0;
        snprintf(r->detail, sizeof(r->detail), "no writable cgroup: %.160s",
                 cg->why[0] ? cg->why : "none found");
        return;
    }
    errno = 0;
    int rc = mkdir(dir, 0755);
    if (rc == 0) {
        char path[4300];
        snprintf(path, sizeof(path), "%s/%s", dir, limit);
        rc = write_file(path, "67108864");
        int saved = errno;
        (void)rmdir(dir);
        errno = saved;
    }
    r->state = rc == 0 ? SBX_STEP_OK : SBX_STEP_FAILED;
    r->errnum = rc == 0 ? 0 : errno;
    snprintf(r->detail, sizeof(r->detail), "%s under %.150s", limit, dir);
}

static void try_loop(struct sbx_steps *st)
{
    struct sbx_step_result *r = &st->step[SBX_STEP_LOOP];
    errno = 0;
    int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    int n = ctl < 0 ? -1 : ioctl(ctl, LOOP_CTL_GET_FREE);
    int saved = errno;
    if (ctl >= 0)
        close(ctl);
    if (n < 0) {
        r->state = SBX_STEP_FAILED;
        r->errnum = saved ? saved : EIO;
        snprintf(r->detail, sizeof(r->detail), "/dev/loop-control");
        return;
    }
    char path[32];
    snprintf(path, sizeof(path), "/dev/loop%d", n);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    r->state = fd >= 0 ? SBX_STEP_OK : SBX_STEP_FAILED;
    r->errnum = fd >= 0 ? 0 : errno;
    snprintf(r->detail, sizeof(r->detail), "%s", path);
    if (fd >= 0)
        close(fd);
}

static bool in_container(void)
{
    const char *c = getenv("container");
    return access("/.dockerenv", F_OK) == 0 || access("/run/.containerenv", F_OK) == 0 || (c && *c);
}

int sbx_steps_try(const struct sbx_host_probe *p, const struct sbx_cg_host *cg,
                  struct sbx_steps *st, sbx_err *err)
{
    if (!p || !cg || !st)
        return sbx_err_set(err, EINVAL, "steps: missing argument");
    memset(st, 0, sizeof(*st));
    st->in_container = in_container();
    try_caps(st);

    struct chain *c =
        mmap(NULL, sizeof(*c), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (c == MAP_FAILED)
        return sbx_err_set(err, errno, "steps: mmap");
    for (int i = 0; i < SBX_STEP_COUNT; i++)
        c->r[i].state = SBX_STEP_NOT_TRIED;
    char dir[] = "/tmp/sandboxd-doctor-XXXXXX";
    if (mkdtemp(dir) && chmod(dir, 0755) == 0)
        try_chain(c, dir);
    else {
        c->r[SBX_STEP_USERNS].state = SBX_STEP_FAILED;
        c->r[SBX_STEP_USERNS].errnum = errno;
    }
    (void)rmdir(dir);
    static const char *const what[SBX_STEP_COUNT] = {
        [SBX_STEP_USERNS] = "unshare(CLONE_NEWUSER)",
        [SBX_STEP_IDMAP] = "0 100000 65536 into uid_map and gid_map",
        [SBX_STEP_NAMESPACES] = "unshare pid mount net ipc uts cgroup in the user namespace",
        [SBX_STEP_USER_LIMITS] = "/proc/sys/user/max_inotify_instances of the user namespace",
        [SBX_STEP_TMPFS] = "a tmpfs as the new root",
        [SBX_STEP_PROCFS] = "a fresh procfs in the new pid namespace",
        [SBX_STEP_PIVOT] = "pivot_root into the new root",
    };
    for (int i = SBX_STEP_USERNS; i <= SBX_STEP_PIVOT; i++) {
        st->step[i].state = (enum sbx_step_state)c->r[i].state;
        st->step[i].errnum = c->r[i].errnum;
        st->step[i].required = true;
        snprintf(st->step[i].detail, sizeof(st->step[i].detail), "%s", what[i]);
    }
    munmap(c, sizeof(*c));

    try_cgroup(cg, st);
    struct sbx_step_result *sc = &st->step[SBX_STEP_SECCOMP];
    sc->state = p->seccomp.ok ? SBX_STEP_OK : SBX_STEP_FAILED;
    sc->errnum = p->seccomp.errnum;
    sc->required = true;
    snprintf(sc->detail, sizeof(sc->detail), "the default profile, in a child");
    try_loop(st);

    for (int i = 0; i < SBX_STEP_COUNT; i++)
        if (st->step[i].state == SBX_STEP_FAILED && !st->step[i].fix[0])
            sbx_step_fix((enum sbx_step)i, st->step[i].errnum, st->in_container, st->step[i].fix,
                         sizeof(st->step[i].fix));
    return 0;
}
