#include "isolate/probe_host.h"

#include <ctype.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "isolate/sandbox.h"
#include "isolate/seccomp.h"

/* New syscalls share one number on every architecture but alpha. */
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif
#ifndef LANDLOCK_CREATE_RULESET_VERSION
#define LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#endif

/* ---- pure parts ---- */

int sbx_kver_parse(const char *release, struct sbx_kver *v, sbx_err *err)
{
    if (!release || !v)
        return sbx_err_set(err, EINVAL, "kernel release: missing argument");
    unsigned n[3] = {0, 0, 0};
    int got = 0;
    const char *s = release;
    while (got < 3 && isdigit((unsigned char)*s)) {
        unsigned long x = 0;
        for (; isdigit((unsigned char)*s); s++) {
            x = x * 10 + (unsigned long)(*s - '0');
            if (x > 1000000)
                return sbx_err_set(err, ERANGE, "kernel release '%s': number too large", release);
        }
        n[got++] = (unsigned)x;
        if (*s != '.')
            break;
        s++;
    }
    if (got < 2)
        return sbx_err_set(err, EINVAL, "kernel release '%s' is not major.minor[.patch]", release);
    *v = (struct sbx_kver){n[0], n[1], n[2]};
    return 0;
}

bool sbx_kver_at_least(const struct sbx_kver *v, unsigned major, unsigned minor)
{
    return v->major > major || (v->major == major && v->minor >= minor);
}

static const char *const ns_names[SBX_NS_COUNT] = {
    [SBX_NS_USER] = "user", [SBX_NS_PID] = "pid", [SBX_NS_MOUNT] = "mount",   [SBX_NS_NET] = "net",
    [SBX_NS_IPC] = "ipc",   [SBX_NS_UTS] = "uts", [SBX_NS_CGROUP] = "cgroup",
};

const char *sbx_ns_name(enum sbx_ns ns)
{
    return (unsigned)ns < SBX_NS_COUNT ? ns_names[ns] : "?";
}

const char *sbx_plan_limits_name(enum sbx_cg_mode mode)
{
    switch (mode) {
    case SBX_CG_V2:
        return "cgroup-v2";
    case SBX_CG_V1:
        return "cgroup-v1";
    case SBX_CG_RLIMIT:
        return "rlimit";
    }
    return "?";
}

__attribute__((format(printf, 3, 4))) static void warn(struct sbx_isolation_plan *plan,
                                                       bool required, const char *fmt, ...)
{
    if (required)
        plan->full = false;
    if (plan->n_warn == SBX_PLAN_WARN_MAX)
        return;
    struct sbx_plan_warning *w = &plan->warn[plan->n_warn++];
    w->required = required;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->text, sizeof(w->text), fmt, ap);
    va_end(ap);
}

/* "EPERM: Operation not permitted", or "not found" when no errno was given. */
static const char *reason(int errnum, char *buf, size_t len)
{
    if (!errnum)
        return "not found";
    snprintf(buf, len, "%s: %s", sbx_errno_name(errnum), strerror(errnum));
    return buf;
}

/* "; needs Linux 5.3+, this is 5.2" when the kernel is known to be older. */
static const char *needs(const struct sbx_host_probe *p, unsigned major, unsigned minor, char *buf,
                         size_t len)
{
    buf[0] = '\0';
    if (p->kver_known && !sbx_kver_at_least(&p->kver, major, minor))
        snprintf(buf, len, "; needs Linux %u.%u+, this is %u.%u", major, minor, p->kver.major,
                 p->kver.minor);
    return buf;
}

/* One warning per cause: namespaces failing alike are named together. */
static void plan_namespaces(const struct sbx_host_probe *p, struct sbx_isolation_plan *plan)
{
    bool told[SBX_NS_COUNT] = {false};
    char r[128];
    for (int i = 0; i < SBX_NS_COUNT; i++) {
        plan->ns[i] = p->ns[i].ok;
        if (p->ns[i].ok || told[i])
            continue;
        char names[96] = "";
        for (int j = i; j < SBX_NS_COUNT; j++)
            if (!p->ns[j].ok && p->ns[j].errnum == p->ns[i].errnum) {
                told[j] = true;
                size_t n = strlen(names);
                snprintf(names + n, sizeof(names) - n, "%s%s", n ? ", " : "",
                         sbx_ns_name((enum sbx_ns)j));
            }
        bool no_userns = i == SBX_NS_USER && p->max_user_ns == 0;
        warn(plan, true, "%s namespaces unavailable (%s%s): run cannot create sandboxes", names,
             reason(p->ns[i].errnum, r, sizeof(r)),
             no_userns ? "; user.max_user_namespaces is 0" : "");
    }
}

static void plan_required(const struct sbx_host_probe *p, struct sbx_isolation_plan *plan)
{
    char r[128], k[64];
    if (!p->root)
        warn(plan, true,
             "not running as root: run maps %u host ids into each sandbox's user namespace, "
             "which needs root",
             SBX_ID_RANGE);
    plan_namespaces(p, plan);
    if (!p->seccomp.ok)
        warn(plan, true, "seccomp filters unavailable (%s): run cannot load its syscall filter",
             reason(p->seccomp.errnum, r, sizeof(r)));
    else if (p->seccomp_bpf_len < 0)
        warn(plan, true, "the default seccomp profile does not compile on this host (%s)",
             p->seccomp_why[0] ? p->seccomp_why : "no reason given");
    if (!p->clone3.ok)
        warn(plan, true, "clone3 unavailable (%s%s): run creates every sandbox with clone3",
             reason(p->clone3.errnum, r, sizeof(r)), needs(p, 5, 3, k, sizeof(k)));
    if (!p->pidfd.ok)
        warn(plan, true, "pidfds unavailable (%s%s): run supervises every sandbox through one",
             reason(p->pidfd.errnum, r, sizeof(r)), needs(p, 5, 4, k, sizeof(k)));
}

static void plan_limits(const struct sbx_cg_host *cg, struct sbx_isolation_plan *plan)
{
    plan->limits = cg->mode;
    switch (cg->mode) {
    case SBX_CG_V2:
        plan->memory_by = "cgroup v2 memory.max";
        plan->pids_by = "cgroup v2 pids.max";
        plan->cpu_by = "cgroup v2 cpu.max";
        plan->kill_by = "cgroup.freeze, then SIGKILL of the sandbox's init";
        break;
    case SBX_CG_V1: {
        const bool *has = cg->v1_has;
        plan->memory_by = "cgroup v1 memory.limit_in_bytes";
        plan->pids_by = "cgroup v1 pids.max";
        plan->cpu_by = has[SBX_CGC_CPU] ? "cgroup v1 cpu.cfs_quota_us" : NULL;
        plan->kill_by = has[SBX_CGC_FREEZER] ? "v1 freezer, then SIGKILL of the sandbox's init"
                                             : "SIGKILL of the sandbox's init (no freezer)";
        if (!has[SBX_CGC_CPU])
            warn(plan, false, "no writable v1 cpu controller: the CPU share is NOT enforced");
        if (!has[SBX_CGC_CPUACCT])
            warn(plan, false,
                 "no writable v1 cpuacct controller: CPU time comes from rusage, not the cgroup");
        if (!has[SBX_CGC_FREEZER])
            warn(plan, false,
                 "no writable v1 freezer: a sandbox is killed through its init without being "
                 "frozen first");
        break;
    }
    case SBX_CG_RLIMIT:
        plan->memory_by = "RLIMIT_DATA + RLIMIT_AS + memory watch";
        plan->pids_by = "RLIMIT_NPROC";
        plan->cpu_by = NULL;
        plan->kill_by = "SIGKILL of the sandbox's init (no freezer)";
        warn(plan, false,
             "no writable cgroup (%s): memory is held by RLIMIT_DATA and RLIMIT_AS per process "
             "and by a watch over the sandbox's sum every 50 ms, processes by RLIMIT_NPROC, "
             "and the CPU share is NOT enforced",
             cg->why[0] ? cg->why : "no reason given");
        break;
    }
    plan->cpu_enforced = plan->cpu_by != NULL;
}

static void plan_optional(const struct sbx_host_probe *p, struct sbx_isolation_plan *plan)
{
    char r[128], k[64];
    if (!p->nft_netlink.ok)
        warn(plan, false,
             "nftables unavailable (netfilter netlink: %s): a proxy network policy could not "
             "redirect connections (--net none and host are unaffected)",
             reason(p->nft_netlink.errnum, r, sizeof(r)));
    else if (!p->nf_tables.ok)
        warn(plan, false,
             "nf_tables unavailable (%s): a proxy network policy could not redirect "
             "connections (--net none and host are unaffected)",
             reason(p->nf_tables.errnum, r, sizeof(r)));
    if (!p->landlock.ok)
        warn(plan, false, "landlock unavailable (%s%s): not used by run, nothing is lost",
             reason(p->landlock.errnum, r, sizeof(r)), needs(p, 5, 13, k, sizeof(k)));
}

void sbx_isolation_plan_make(const struct sbx_host_probe *p, const struct sbx_cg_host *cg,
                             struct sbx_isolation_plan *plan)
{
    memset(plan, 0, sizeof(*plan));
    plan->full = true;
    plan_required(p, plan);
    plan->seccomp_profile = p->seccomp.ok && p->seccomp_bpf_len >= 0 ? "default" : NULL;
    plan_limits(cg, plan);
    plan_optional(p, plan);
}

/* ---- trying things on the live system ---- */

static struct sbx_feature feature(bool ok, int errnum)
{
    return (struct sbx_feature){ok, ok ? 0 : errnum};
}

static size_t read_full(int fd, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    return got;
}

/* Run fn in a forked child and bring back the len bytes it fills in at out:
 * trying a namespace or a seccomp filter changes a process for good. Returns 0,
 * or the errno that kept the child from answering. */
static int in_child(void (*fn)(void *out), void *out, size_t len)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
        return errno;
    pid_t pid = fork();
    if (pid < 0) {
        int saved = errno;
        close(fds[0]), close(fds[1]);
        return saved;
    }
    if (pid == 0) {
        close(fds[0]);
        fn(out);
        /* The pipe holds far more than our few bytes: this never blocks. */
        _exit(write(fds[1], out, len) == (ssize_t)len ? 0 : 1);
    }
    close(fds[1]);
    size_t got = read_full(fds[0], out, len);
    close(fds[0]);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    return got == len ? 0 : ECHILD;
}

static struct sbx_feature try_unshare(int flags)
{
    int rc = unshare(flags);
    return feature(rc == 0, errno);
}

static void try_namespaces(void *out)
{
    static const int flags[SBX_NS_COUNT] = {
        [SBX_NS_USER] = CLONE_NEWUSER,     [SBX_NS_PID] = CLONE_NEWPID,
        [SBX_NS_MOUNT] = CLONE_NEWNS,      [SBX_NS_NET] = CLONE_NEWNET,
        [SBX_NS_IPC] = CLONE_NEWIPC,       [SBX_NS_UTS] = CLONE_NEWUTS,
        [SBX_NS_CGROUP] = CLONE_NEWCGROUP,
    };
    struct sbx_feature *ns = out;
    for (int i = 0; i < SBX_NS_COUNT; i++)
        ns[i] = try_unshare(flags[i]);
}

struct seccomp_try {
    int bpf_fd; /* the compiled default profile, -1 when it did not compile */
    struct sbx_feature result;
};

/* Load what run loads (the default profile, through the same prctl), or a
 * one-instruction allow-all filter when the profile did not compile, so the
 * kernel's part is still known. */
static void try_seccomp(void *out)
{
    struct seccomp_try *t = out;
    struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog prog = {.len = 1, .filter = &allow};
    struct sbx_seccomp_progs progs = {0};
    sbx_err e = {0};
    if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        t->result = feature(false, errno);
        return;
    }
    if (t->bpf_fd >= 0) {
        if (sbx_seccomp_progs_read(t->bpf_fd, &progs, &e) < 0 ||
            sbx_seccomp_progs_load(&progs, &e) < 0) {
            t->result = feature(false, e.errnum);
            return;
        }
    } else if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0) {
        t->result = feature(false, errno);
        return;
    }
    /* 2 is SECCOMP_MODE_FILTER: the filter is really on. */
    t->result = feature(prctl(PR_GET_SECCOMP, 0, 0, 0, 0) == 2, EINVAL);
}

struct nft_answer {
    struct sbx_feature netlink, tables;
};

/* Ask nf_tables for its ruleset generation, the cheapest question it answers. */
static struct sbx_feature nft_getgen(int fd)
{
    struct {
        struct nlmsghdr nh;
        struct nfgenmsg nf;
    } req = {
        .nh = {.nlmsg_len = sizeof(req),
               .nlmsg_type = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETGEN,
               .nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK,
               .nlmsg_seq = 1},
        .nf = {.nfgen_family = AF_UNSPEC, .version = NFNETLINK_V0},
    };
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    struct timeval tv = {.tv_sec = 2};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
        sendto(fd, &req, sizeof(req), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
        return feature(false, errno);
    char buf[8192] __attribute__((aligned(NLMSG_ALIGNTO)));
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0)
        return feature(false, errno);
    size_t left = (size_t)n;
    for (struct nlmsghdr *nh = (struct nlmsghdr *)buf; NLMSG_OK(nh, left);
         nh = NLMSG_NEXT(nh, left)) {
        if (nh->nlmsg_type == ((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN))
            return feature(true, 0);
        if (nh->nlmsg_type == NLMSG_ERROR) {
            const struct nlmsgerr *e = NLMSG_DATA(nh);
            return feature(e->error == 0, -e->error);
        }
    }
    return feature(false, EPROTO);
}

static void try_nftables(void *out)
{
    struct nft_answer *a = out;
    /* A sandbox would ask from its own network namespace, where it holds
     * CAP_NET_ADMIN; without user namespaces, ask from where we are. */
    if (unshare(CLONE_NEWUSER | CLONE_NEWNET) < 0)
        (void)unshare(CLONE_NEWNET);
    cleanup_fd int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
    a->netlink = feature(fd >= 0, errno);
    a->tables = fd >= 0 ? nft_getgen(fd) : feature(false, a->netlink.errnum);
}

/* clone3 with CLONE_PIDFD, then the pidfd calls run makes on a sandbox's init. */
static void probe_clone3_pidfd(struct sbx_host_probe *p)
{
    int child_fd = -1;
    struct clone_args ca = {
        .flags = CLONE_PIDFD,
        .pidfd = (uint64_t)(uintptr_t)&child_fd,
        .exit_signal = SIGCHLD,
    };
    long pid = syscall(SYS_clone3, &ca, sizeof(ca));
    if (pid == 0)
        _exit(0);
    p->clone3 = feature(pid > 0 && child_fd >= 0, pid < 0 ? errno : EINVAL);

    cleanup_fd int self = (int)syscall(SYS_pidfd_open, getpid(), 0);
    bool ok = self >= 0 && syscall(SYS_pidfd_send_signal, self, 0, NULL, 0) == 0;
    int errnum = errno;
    if (pid > 0) {
        bool reaped = false;
        if (child_fd >= 0) {
            siginfo_t si;
            int rc;
            while ((rc = waitid(P_PIDFD, (id_t)child_fd, &si, WEXITED)) < 0 && errno == EINTR)
                ;
            reaped = rc == 0;
            if (!reaped && ok)
                ok = false, errnum = errno;
        }
        while (!reaped && waitpid((pid_t)pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    if (child_fd >= 0)
        close(child_fd);
    p->pidfd = feature(ok, errnum);
}

static long read_long(const char *path)
{
    FILE *f = fopen(path, "re");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

int sbx_host_probe(struct sbx_host_probe *p, sbx_err *err)
{
    if (!p)
        return sbx_err_set(err, EINVAL, "host probe: missing argument");
    memset(p, 0, sizeof(*p));

    struct utsname u;
    if (uname(&u) == 0) {
        snprintf(p->kernel, sizeof(p->kernel), "%s", u.release);
        p->kver_known = sbx_kver_parse(p->kernel, &p->kver, NULL) == 0;
    }
    p->root = geteuid() == 0;

    int rc = in_child(try_namespaces, p->ns, sizeof(p->ns));
    for (int i = 0; rc && i < SBX_NS_COUNT; i++)
        p->ns[i] = feature(false, rc);
    p->max_user_ns = read_long("/proc/sys/user/max_user_namespaces");

    sbx_err se = {0};
    struct seccomp_try sc = {.bpf_fd = sbx_seccomp_compile_fd(SBX_SECCOMP_DEFAULT, &se)};
    p->seccomp_bpf_len = sc.bpf_fd < 0 ? -1 : sbx_seccomp_bpf_len(SBX_SECCOMP_DEFAULT, &se);
    if (p->seccomp_bpf_len < 0)
        sbx_err_format(&se, p->seccomp_why, sizeof(p->seccomp_why));
    rc = in_child(try_seccomp, &sc, sizeof(sc));
    p->seccomp = rc ? feature(false, rc) : sc.result;
    if (sc.bpf_fd >= 0)
        close(sc.bpf_fd);

    struct nft_answer nft;
    if ((rc = in_child(try_nftables, &nft, sizeof(nft))) != 0)
        nft.netlink = nft.tables = feature(false, rc);
    p->nft_netlink = nft.netlink;
    p->nf_tables = nft.tables;

    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    p->landlock = feature(abi > 0, abi < 0 ? errno : EINVAL);
    p->landlock_abi = abi > 0 ? (int)abi : 0;

    probe_clone3_pidfd(p);
    return 0;
}
