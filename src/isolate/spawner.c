#include "isolate/spawner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"
#include "base/metrics.h"

/* The largest request (the spec's strings: argv, envp, paths); a larger one
 * is made in-process. */
#define REQ_MAX (4u << 20)
/* The spawner answers within a clone's time; past this it is taken for
 * stuck, stopped, and the sandbox made in-process. */
#define REPLY_TIMEOUT_MS 10000
#define MAGIC_REQ 0x73627871u    /* "sbxq" */
#define MAGIC_REP 0x73627872u    /* "sbxr" */
#define MAGIC_ATTACH 0x73627861u /* "sbxa": sbx_attach_open's request */
/* A sandbox's fds in a reply: pidfd, sync, stdin, stdout, stderr, then its
 * network namespace when it has one of its own. */
#define N_FDS 5
#define N_FDS_MAX 6
/* The most fds of any reply: an attach's, the workspace and every mount. */
#define FDS_IN_REPLY_MAX SBX_FDS_PASS_MAX
_Static_assert(FDS_IN_REPLY_MAX >= N_FDS_MAX, "a sandbox's fds fit in any reply");

enum {
    F_ARGV = 1 << 0,
    F_ENVP = 1 << 1,
    F_WORKSPACE = 1 << 2,
    F_NAME = 1 << 3,
    F_NET_ARG = 1 << 4,
    F_CG_HOST = 1 << 5,
    F_HOST_NET = 1 << 6,
    F_SESSION = 1 << 7,
    F_HOST_VIEW = 1 << 8,
    F_HIDDEN = 1 << 9,
    F_ROOTFS = 1 << 10,
    F_WRITABLE_ROOT = 1 << 11,
    F_POOLED = 1 << 12,
    F_ATTACH_LATER = 1 << 13,
};

/* A spec by value; its strings follow as NUL-terminated text, in the order
 * argv, envp, workspace, name, net_rules_arg, rootfs, mounts (host, inside,
 * root when the mount has one), hidden. */
struct req_head {
    uint32_t magic, flags;
    uint32_t uid, gid, host_id_base;
    uint32_t argc, envc, n_mounts, n_hidden;
    uint32_t mount_root, mount_writable; /* bit i: mount i has a root, is writable */
    uint32_t mount_file;                 /* bit i: mount i's mount point is a file */
    /* The spawner is a fork of this very image: a function's address is the
     * same on both sides. */
    int (*net_rules)(const char *arg, sbx_err *err);
    struct sbx_cg_limits cg_limits;
    uint64_t file_size_bytes, tmp_size_bytes, nofile;
    struct sbx_cg_host cg_host;
};

_Static_assert(SBX_MOUNTS_MAX <= 32, "mount_root and mount_writable are 32-bit sets");

struct reply {
    uint32_t magic;
    int32_t rc;
    sbx_err err;
    int32_t init_pid;
    bool cg_made;
    bool has_netns; /* a sixth fd: its network namespace */
    struct sbx_cgroup cg;
};

static int spawner_fd = -1;
static pid_t spawner_pid = -1;
static char spawner_cg[4096]; /* its cgroup (sbx_spawner_join_cgroup), or "" */
static size_t pending;        /* requests sent, replies not read yet */
static struct sbx_spawner_counts counts;

static const struct sbx_metric m_spawns = {
    .name = "sandbox_spawns_total",
    .help = "Sandboxes made, by where: in the spawner process (\"spawner\") or in the daemon "
            "itself (\"daemon\": a session's task, no spawner, or a fallback).",
    .kind = SBX_METRIC_COUNTER,
    .labels = {"where"}};

/* ---- the request's text ---- */

struct buf {
    char *p;
    size_t len, cap;
};

static int put(struct buf *b, const char *s)
{
    size_t n = strlen(s) + 1;
    if (b->len + n > REQ_MAX)
        return -1;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    return 0;
}

static size_t count_strv(char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

/* What of spec the request carries (the strings of it in the text). */
static uint32_t spec_flags(const struct sbx_spec *spec)
{
    return (spec->argv ? F_ARGV : 0) | (spec->envp ? F_ENVP : 0) |
           (spec->workspace ? F_WORKSPACE : 0) | (spec->name ? F_NAME : 0) |
           (spec->net_rules_arg ? F_NET_ARG : 0) | (spec->cg_host ? F_CG_HOST : 0) |
           (spec->host_net ? F_HOST_NET : 0) | (spec->session ? F_SESSION : 0) |
           (spec->host_view ? F_HOST_VIEW : 0) | (spec->host_view_hidden ? F_HIDDEN : 0) |
           (spec->rootfs ? F_ROOTFS : 0) | (spec->writable_root ? F_WRITABLE_ROOT : 0) |
           (spec->pooled ? F_POOLED : 0) | (spec->attach_later ? F_ATTACH_LATER : 0);
}

static int put_strv(struct buf *b, const char *const *v, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (put(b, v[i]) < 0)
            return -1;
    return 0;
}

static int encode(const struct sbx_spec *spec, struct req_head *h, struct buf *b)
{
    *h = (struct req_head){.magic = MAGIC_REQ,
                           .flags = spec_flags(spec),
                           .uid = spec->uid,
                           .gid = spec->gid,
                           .host_id_base = spec->host_id_base,
                           .n_mounts = (uint32_t)spec->n_mounts,
                           .net_rules = spec->net_rules,
                           .cg_limits = spec->cg_limits,
                           .file_size_bytes = spec->file_size_bytes,
                           .tmp_size_bytes = spec->tmp_size_bytes,
                           .nofile = spec->nofile};
    if (spec->cg_host)
        h->cg_host = *spec->cg_host;
    h->argc = (uint32_t)count_strv(spec->argv);
    h->envc = (uint32_t)count_strv(spec->envp);
    h->n_hidden = (uint32_t)count_strv((char *const *)spec->host_view_hidden);
    if (spec->n_mounts > SBX_MOUNTS_MAX)
        return -1;
    if (put_strv(b, (const char *const *)spec->argv, h->argc) < 0 ||
        put_strv(b, (const char *const *)spec->envp, h->envc) < 0)
        return -1;
    const char *one[] = {spec->workspace, spec->name, spec->net_rules_arg, spec->rootfs};
    for (size_t i = 0; i < SBX_ARRAY_LEN(one); i++)
        if (one[i] && put(b, one[i]) < 0)
            return -1;
    for (size_t i = 0; i < spec->n_mounts; i++) {
        const struct sbx_mount *m = &spec->mounts[i];
        h->mount_root |= m->root ? 1u << i : 0;
        h->mount_writable |= m->writable ? 1u << i : 0;
        h->mount_file |= m->file ? 1u << i : 0;
        if (put(b, m->host) < 0 || put(b, m->inside) < 0 || (m->root && put(b, m->root) < 0))
            return -1;
    }
    return put_strv(b, spec->host_view_hidden, h->n_hidden);
}

/* ---- the spawner's side ---- */

/* The spec decoded in place: its strings point into text. */
struct decoded {
    struct sbx_spec spec;
    struct sbx_cg_host cg_host;
    struct sbx_mount mounts[SBX_MOUNTS_MAX];
    char **argv, **envp;
    const char **hidden;
};

static const char *take(const char **p, const char *end)
{
    const char *s = *p;
    const char *nul = s < end ? memchr(s, '\0', (size_t)(end - s)) : NULL;
    if (!nul)
        return NULL;
    *p = nul + 1;
    return s;
}

static char **take_strv(const char **p, const char *end, uint32_t n, bool present)
{
    if (!present)
        return NULL;
    if (n > REQ_MAX / 2)
        return NULL;
    char **v = calloc((size_t)n + 1, sizeof(*v));
    for (uint32_t i = 0; v && i < n; i++)
        if (!(v[i] = (char *)take(p, end))) {
            free(v);
            return NULL;
        }
    return v;
}

static int decode(const char *msg, size_t len, struct decoded *d)
{
    struct req_head h;
    if (len < sizeof(h))
        return -1;
    memcpy(&h, msg, sizeof(h));
    if (h.magic != MAGIC_REQ || h.n_mounts > SBX_MOUNTS_MAX)
        return -1;
    const char *p = msg + sizeof(h), *end = msg + len;
    d->cg_host = h.cg_host;
    d->argv = take_strv(&p, end, h.argc, h.flags & F_ARGV);
    d->envp = take_strv(&p, end, h.envc, h.flags & F_ENVP);
    if (((h.flags & F_ARGV) && !d->argv) || ((h.flags & F_ENVP) && !d->envp))
        return -1;
    struct sbx_spec *s = &d->spec;
    *s = (struct sbx_spec){.argv = d->argv,
                           .envp = d->envp,
                           .uid = h.uid,
                           .gid = h.gid,
                           .host_id_base = h.host_id_base,
                           .host_net = h.flags & F_HOST_NET,
                           .net_rules = h.net_rules,
                           /* Our fds: 0-3 and a request's few (spawner_main). */
                           .net_rules_inline = true,
                           .cg_host = (h.flags & F_CG_HOST) ? &d->cg_host : NULL,
                           .cg_limits = h.cg_limits,
                           .file_size_bytes = h.file_size_bytes,
                           .tmp_size_bytes = h.tmp_size_bytes,
                           .nofile = h.nofile,
                           .session = h.flags & F_SESSION,
                           .host_view = h.flags & F_HOST_VIEW,
                           .writable_root = h.flags & F_WRITABLE_ROOT,
                           .pooled = h.flags & F_POOLED,
                           .attach_later = h.flags & F_ATTACH_LATER,
                           .join_pidfd = -1,
                           .mounts = d->mounts,
                           .n_mounts = h.n_mounts};
    if (((h.flags & F_WORKSPACE) && !(s->workspace = take(&p, end))) ||
        ((h.flags & F_NAME) && !(s->name = take(&p, end))) ||
        ((h.flags & F_NET_ARG) && !(s->net_rules_arg = take(&p, end))) ||
        ((h.flags & F_ROOTFS) && !(s->rootfs = take(&p, end))))
        return -1;
    for (uint32_t i = 0; i < h.n_mounts; i++) {
        struct sbx_mount *m = &d->mounts[i];
        m->writable = h.mount_writable & (1u << i);
        m->file = h.mount_file & (1u << i);
        if (!(m->host = take(&p, end)) || !(m->inside = take(&p, end)) ||
            ((h.mount_root & (1u << i)) && !(m->root = take(&p, end))))
            return -1;
    }
    if (h.flags & F_HIDDEN) {
        if (!(d->hidden = (const char **)take_strv(&p, end, h.n_hidden, true)))
            return -1;
        s->host_view_hidden = d->hidden;
    }
    return p == end ? 0 : -1;
}

static int send_reply(int sock, const struct reply *r, const int *fds, size_t nfds)
{
    ssize_t n = sbx_send_with_fds(sock, r, sizeof(*r), fds, fds ? nfds : 0, MSG_NOSIGNAL);
    return n == (ssize_t)sizeof(*r) ? 0 : -1;
}

/* spec's net_rules prepared here, once (sandbox.h): libnftables is loaded
 * by the spawner, not again by every sandbox's rules process. */
static int net_prepare(const struct sbx_spec *spec, sbx_err *err)
{
    static bool ready;
    if (!spec->net_rules || ready)
        return 0;
    if (spec->net_rules(NULL, err) < 0)
        return -1;
    ready = true;
    return 0;
}

/* One request: the sandbox made here, its fds handed over and closed. */
static void serve_one(int sock, const char *msg, size_t len, struct reply *r)
{
    struct decoded d = {0};
    *r = (struct reply){.magic = MAGIC_REP};
    struct sbx_sandbox sb;
    if (decode(msg, len, &d) < 0) {
        r->rc = -1;
        sbx_err_set(&r->err, EPROTO, "spawner: malformed request");
        (void)send_reply(sock, r, NULL, 0);
    } else if (net_prepare(&d.spec, &r->err) < 0 || sbx_sandbox_spawn(&d.spec, &sb, &r->err) < 0) {
        r->rc = -1;
        (void)send_reply(sock, r, NULL, 0);
    } else {
        r->init_pid = sb.init_pid;
        r->cg_made = sb.cg_made;
        r->cg = sb.cg;
        r->has_netns = sb.netns_fd >= 0;
        int fds[N_FDS_MAX] = {sb.pidfd,     sb.sync_fd,   sb.stdin_fd,
                              sb.stdout_fd, sb.stderr_fd, sb.netns_fd};
        if (send_reply(sock, r, fds, r->has_netns ? N_FDS_MAX : N_FDS) < 0) {
            /* Nobody holds the sandbox: it goes. */
            sbx_sandbox_kill(&sb);
            sbx_sandbox_release(&sb, NULL);
        } else {
            sbx_sandbox_abandon(&sb); /* the cgroup is the daemon's now */
        }
    }
    free(d.argv);
    free(d.envp);
    free(d.hidden);
}

/* An attach request: its head, then the workspace and each mount's host
 * path as NUL-terminated text. */
struct attach_head {
    uint32_t magic;
    uint32_t from_base, to_base, uid, gid;
    uint32_t n_mounts, mount_writable;
};

static void serve_attach(int sock, const char *msg, size_t len, struct reply *r)
{
    struct attach_head h;
    struct sbx_mount mounts[SBX_MOUNTS_MAX] = {0};
    const char *p = msg + sizeof(h), *end = msg + len, *ws = NULL;
    int fds[SBX_MOUNTS_MAX + 1];
    *r = (struct reply){.magic = MAGIC_REP};
    memcpy(&h, msg, sizeof(h));
    bool ok = h.n_mounts <= SBX_MOUNTS_MAX && (ws = take(&p, end));
    for (uint32_t i = 0; ok && i < h.n_mounts; i++) {
        mounts[i].writable = h.mount_writable & (1u << i);
        ok = (mounts[i].host = take(&p, end)) != NULL;
    }
    if (!ok || p != end) {
        r->rc = -1;
        sbx_err_set(&r->err, EPROTO, "spawner: malformed attach request");
        (void)send_reply(sock, r, NULL, 0);
        return;
    }
    struct sbx_attach a = {.workspace = ws,
                           .from_base = h.from_base,
                           .to_base = h.to_base,
                           .uid = h.uid,
                           .gid = h.gid,
                           .mounts = mounts,
                           .n_mounts = h.n_mounts};
    if (sbx_attach_open(&a, fds, &r->err) < 0) {
        r->rc = -1;
        (void)send_reply(sock, r, NULL, 0);
        return;
    }
    (void)send_reply(sock, r, fds, h.n_mounts + 1);
    for (uint32_t i = 0; i <= h.n_mounts; i++)
        close(fds[i]);
}

static void on_sigchld(int sig)
{
    (void)sig;
}

static __attribute__((noreturn)) void spawner_main(int sock, pid_t daemon)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != daemon)
        _exit(0);
    prctl(PR_SET_NAME, "sandboxd-spawn");
    /* Each sandbox's init is our child: reaped here when SIGCHLD says so
     * (the daemon learns of its end from the pidfd, readable for a zombie
     * too). SIGCHLD is blocked but while we wait for a request, so none is
     * missed; not SIG_IGN, which init would inherit across its exec. */
    sigset_t chld, waiting;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &waiting);
    sigdelset(&waiting, SIGCHLD);
    struct sigaction sa = {.sa_handler = on_sigchld};
    sigaction(SIGCHLD, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* Only stdio (for a sanitizer's report) and the socket, as fd 3. */
    if (sock != 3 && dup3(sock, 3, O_CLOEXEC) < 0)
        _exit(125);
    if (syscall(SYS_close_range, 4, ~0U, 0) < 0)
        _exit(125);
    char *msg = malloc(REQ_MAX);
    struct reply *r = malloc(sizeof(*r));
    if (!msg || !r)
        _exit(125);
    for (;;) {
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        struct pollfd pfd = {.fd = 3, .events = POLLIN};
        if (ppoll(&pfd, 1, NULL, &waiting) < 0) {
            if (errno == EINTR)
                continue;
            _exit(125);
        }
        ssize_t n;
        while ((n = recv(3, msg, REQ_MAX, MSG_DONTWAIT)) < 0 && errno == EINTR)
            ;
        if (n < 0 && errno == EAGAIN)
            continue;
        if (n <= 0)
            _exit(0); /* the daemon is gone or done */
        uint32_t magic = 0;
        if ((size_t)n >= sizeof(struct attach_head))
            memcpy(&magic, msg, sizeof(magic));
        if (magic == MAGIC_ATTACH)
            serve_attach(3, msg, (size_t)n, r);
        else
            serve_one(3, msg, (size_t)n, r);
    }
}

int sbx_spawner_start(sbx_err *err)
{
    if (spawner_fd >= 0)
        return 0;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return sbx_err_set(err, errno, "spawner: socketpair");
    /* A request carries the spec's strings: room for REQ_MAX (beyond
     * wmem_max for root only; a larger one goes in-process). */
    int sz = (int)REQ_MAX + 65536;
    if (setsockopt(sv[0], SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) < 0)
        (void)setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    pid_t daemon = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int saved = errno;
        close(sv[0]);
        close(sv[1]);
        return sbx_err_set(err, saved, "spawner: fork");
    }
    if (pid == 0) {
        close(sv[0]);
        spawner_main(sv[1], daemon);
    }
    close(sv[1]);
    spawner_fd = sv[0];
    spawner_pid = pid;
    sbx_metric_declare(&m_spawns);
    return 0;
}

bool sbx_spawner_running(void)
{
    return spawner_fd >= 0;
}

void sbx_spawner_stop(void)
{
    if (spawner_fd < 0)
        return;
    close(spawner_fd);
    spawner_fd = -1;
    pending = 0;
    int status;
    while (waitpid(spawner_pid, &status, 0) < 0 && errno == EINTR)
        ;
    spawner_pid = -1;
    if (spawner_cg[0] && rmdir(spawner_cg) < 0 && errno != ENOENT)
        sbx_log(SBX_LOG_WARN, "spawner cgroup %s not removed: %s", spawner_cg, strerror(errno));
    spawner_cg[0] = '\0';
}

int sbx_spawner_join_cgroup(const char *parent, sbx_err *err)
{
    if (spawner_fd < 0 || !parent || spawner_cg[0])
        return 0;
    char dir[sizeof(spawner_cg)], procs[sizeof(spawner_cg) + 16], pid[24];
    if (snprintf(dir, sizeof(dir), "%s/spawner-%d", parent, (int)spawner_pid) >= (int)sizeof(dir))
        return sbx_err_set(err, ENAMETOOLONG, "spawner cgroup beneath %s", parent);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return sbx_err_set(err, errno, "spawner cgroup %s", dir);
    snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
    int n = snprintf(pid, sizeof(pid), "%d", (int)spawner_pid);
    int fd = open(procs, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, pid, (size_t)n) != n) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        rmdir(dir);
        return sbx_err_set(err, e, "move the spawner into %s", dir);
    }
    close(fd);
    memcpy(spawner_cg, dir, sizeof(dir));
    return 0;
}

/* The spawner failed to answer: it is stopped for good (a late answer would
 * be taken for the next request's) and sandboxes are made here from now on. */
static void spawner_lost(const char *why)
{
    sbx_log(SBX_LOG_ERROR, "the sandbox spawner %s: sandboxes are made in the daemon from now on",
            why);
    if (spawner_pid > 0)
        kill(spawner_pid, SIGKILL);
    sbx_spawner_stop();
}

static void count_remote(void)
{
    counts.remote++;
    sbx_metric_add(&m_spawns, 1, "spawner");
}

int sbx_spawn_local(const struct sbx_spec *spec, struct sbx_sandbox *sb, sbx_err *err)
{
    counts.local++;
    sbx_metric_add(&m_spawns, 1, "daemon");
    return sbx_sandbox_spawn(spec, sb, err);
}

int sbx_spawner_fd(void)
{
    return spawner_fd;
}

size_t sbx_spawner_pending(void)
{
    return pending;
}

/* A request (its head, then its text) without waiting: 1 sent, its reply to
 * come; 0 not, the caller makes it in-process. */
static int send_request(const void *head, size_t head_len, const struct buf *b)
{
    struct iovec iov[2] = {{.iov_base = (void *)head, .iov_len = head_len},
                           {.iov_base = b->p, .iov_len = b->len}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = b->len ? 2 : 1};
    ssize_t n;
    while ((n = sendmsg(spawner_fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT)) < 0 && errno == EINTR)
        ;
    if (n < 0) {
        /* Too large, or the socket's buffer is full of requests: this one is
         * made in-process. Anything else: the spawner is gone. */
        if (errno != EMSGSIZE && errno != ENOBUFS && errno != EAGAIN && !pending)
            spawner_lost("is gone");
        return 0;
    }
    pending++;
    return 1;
}

int sbx_spawner_request(const struct sbx_spec *spec)
{
    if (spawner_fd < 0 || spec->join_pidfd >= 0)
        return 0;
    struct req_head *h = malloc(sizeof(*h));
    struct buf b = {0};
    if (!h || encode(spec, h, &b) < 0) {
        free(h);
        free(b.p);
        counts.fallbacks++;
        return 0;
    }
    int sent = send_request(h, sizeof(*h), &b);
    free(h);
    free(b.p);
    if (!sent)
        counts.fallbacks++;
    return sent;
}

/* A sandbox's reply: its fds, 5 or 6 (recv_reply's want). */
#define WANT_SANDBOX SIZE_MAX

/* One answer without waiting: 1 with r and its fds (want of them when it
 * succeeded; the caller owns them), 0 none yet, -2 the spawner is gone
 * (stopped). */
static int recv_reply(struct reply *r, int *fds, size_t *nfds, size_t want)
{
    ssize_t n =
        sbx_recv_with_fds(spawner_fd, r, sizeof(*r), fds, FDS_IN_REPLY_MAX, nfds, MSG_DONTWAIT);
    if (n < 0 && errno == EAGAIN)
        return 0;
    /* -1 EPROTO: a reply with more fds than any has */
    bool gone = n == 0 || (n < 0 && errno != EPROTO);
    if (n != (ssize_t)sizeof(*r) || r->magic != MAGIC_REP ||
        (r->rc == 0 && *nfds != (want != WANT_SANDBOX ? want
                                 : r->has_netns       ? N_FDS_MAX
                                                      : N_FDS))) {
        for (size_t i = 0; i < *nfds; i++)
            close(fds[i]);
        spawner_lost(gone ? "is gone" : "answered out of turn");
        return -2;
    }
    pending--;
    if (r->rc != 0) {
        for (size_t i = 0; i < *nfds; i++)
            close(fds[i]);
        *nfds = 0;
    }
    return 1;
}

/* One answer, as the callers give it: 1 *rp (theirs to free) and its fds,
 * -1 the spawner could not (err), 0 none yet, -2 the spawner is gone. */
static int answer(struct reply **rp, int *fds, size_t want, sbx_err *err)
{
    if (spawner_fd < 0 || !pending)
        return 0;
    struct reply *r = malloc(sizeof(*r));
    if (!r)
        return 0; /* asked again at the next readiness */
    size_t nfds;
    int got = recv_reply(r, fds, &nfds, want);
    if (got <= 0) {
        free(r);
        return got == 0 ? 0 : (sbx_err_set(err, EPIPE, "the sandbox spawner is gone"), -2);
    }
    if (r->rc != 0) {
        if (err)
            *err = r->err;
        errno = r->err.errnum;
        free(r);
        return -1;
    }
    *rp = r;
    return 1;
}

int sbx_spawner_reply(struct sbx_sandbox *sb, sbx_err *err)
{
    struct reply *r;
    int fds[FDS_IN_REPLY_MAX] = {-1, -1, -1, -1, -1, -1};
    int got = answer(&r, fds, WANT_SANDBOX, err);
    if (got != 1)
        return got;
    *sb = (struct sbx_sandbox){.init_pid = r->init_pid,
                               .pidfd = fds[0],
                               .sync_fd = fds[1],
                               .stdin_fd = fds[2],
                               .stdout_fd = fds[3],
                               .stderr_fd = fds[4],
                               .netns_fd = r->has_netns ? fds[5] : -1,
                               .cg = r->cg,
                               .cg_made = r->cg_made};
    free(r);
    count_remote();
    return 1;
}

/* ---- attach: a clone's mounts for a pooled sandbox ---- */

int sbx_spawner_request_attach(const struct sbx_attach *a)
{
    if (spawner_fd < 0 || a->n_mounts > SBX_MOUNTS_MAX)
        return 0;
    struct attach_head h = {.magic = MAGIC_ATTACH,
                            .from_base = a->from_base,
                            .to_base = a->to_base,
                            .uid = a->uid,
                            .gid = a->gid,
                            .n_mounts = (uint32_t)a->n_mounts};
    struct buf b = {0};
    int ok = put(&b, a->workspace) == 0;
    for (size_t i = 0; ok && i < a->n_mounts; i++) {
        h.mount_writable |= a->mounts[i].writable ? 1u << i : 0;
        ok = put(&b, a->mounts[i].host) == 0;
    }
    if (!ok) {
        free(b.p);
        return 0;
    }
    int sent = send_request(&h, sizeof(h), &b);
    free(b.p);
    return sent;
}

int sbx_spawner_reply_attach(int *fds, size_t n, sbx_err *err)
{
    struct reply *r;
    int got_fds[FDS_IN_REPLY_MAX];
    int got = n > FDS_IN_REPLY_MAX ? 0 : answer(&r, got_fds, n, err);
    if (got != 1)
        return got;
    memcpy(fds, got_fds, n * sizeof(int));
    free(r);
    return 1;
}

int sbx_spawn(const struct sbx_spec *spec, struct sbx_sandbox *sb, sbx_err *err)
{
    /* Replies come in order: while a caller's requests are in flight, a
     * synchronous one is made in-process. */
    if (pending || sbx_spawner_request(spec) == 0)
        return sbx_spawn_local(spec, sb, err);
    for (;;) {
        struct pollfd pfd = {.fd = spawner_fd, .events = POLLIN};
        int rc;
        while ((rc = poll(&pfd, 1, REPLY_TIMEOUT_MS)) < 0 && errno == EINTR)
            ;
        if (rc <= 0) {
            counts.fallbacks++;
            spawner_lost("did not answer");
            return sbx_spawn_local(spec, sb, err);
        }
        sbx_err e = {0};
        int got = sbx_spawner_reply(sb, &e);
        if (got == 1)
            return 0;
        if (got == -1)
            return err ? (*err = e, -1) : -1;
        if (got == -2) {
            counts.fallbacks++;
            return sbx_spawn_local(spec, sb, err);
        }
    }
}

void sbx_spawner_counts(struct sbx_spawner_counts *out)
{
    *out = counts;
}
