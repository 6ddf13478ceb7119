/* sandboxd run [options] -- COMMAND [ARGS...]: one command in a fresh sandbox,
 * stdio relayed, exit code passed on (128+N when killed by signal N, 124 on
 * timeout, 125 when the sandbox could not be set up). */
#include <event2/event.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/parse.h"
#include "daemon/cmd.h"
#include "daemon/config.h"
#include "exec/env.h"
#include "exec/task.h"
#include "net/egress.h"
#include "net/netpolicy.h"
#include "runtime/flow.h"

#define EXIT_SETUP 125
#define MAX_TIMEOUT_S (24.0 * 3600)
#define MAX_ENV 256
#define MAX_RULES 256

extern char **environ;

struct run_opts {
    struct sbx_cg_limits lim;
    double timeout_s;
    uint64_t file_size, output_limit, tmp_size, host_id_base, uid, gid;
    const char *workspace;
    enum sbx_net_policy net;
    enum sbx_seccomp_profile seccomp;
    const char *report;
    bool force_rlimit;
    const char *env[MAX_ENV];
    size_t n_env;
    /* egress (proxy policy); each list NULL-terminated */
    const char *allow[MAX_RULES + 1], *deny[MAX_RULES + 1], *hosts[MAX_RULES + 1];
    const char *dns[MAX_RULES + 1];
    size_t n_allow, n_deny, n_hosts, n_dns;
    enum sbx_default net_default;
    uint64_t socks_port;
    /* the original's comma-separated lists (CLAW_*), NULL when unset */
    const char *allowed_cidrs, *allowed_ports, *allowed_internal_targets, *blocked_cidrs;
};

struct run_state {
    json_t *flows;
    enum sbx_seccomp_profile seccomp;
    struct sbx_sandbox_fds fds;
    struct event_base *base;
    struct sbx_task *task;
    const struct sbx_egress_opts *egress_opts; /* proxy policy, else NULL */
    struct sbx_egress *egress;
    bool done;
};

static void run_usage(FILE *f)
{
    fprintf(f,
            "usage: sandboxd run [options] -- COMMAND [ARGS...]\n"
            "  --memory SIZE        memory limit (default 256M)\n"
            "  --pids N             process limit (default 32)\n"
            "  --cpu CORES          CPU share in cores (default 0.25)\n"
            "  --timeout SECONDS    wall-clock limit, fractions allowed (default 300)\n"
            "  --file-size SIZE     largest file the task may write (default 100M)\n"
            "  --output-limit SIZE  stdout and stderr kept, each (default 10M)\n"
            "  --workspace DIR      bound read-write at /workspace (default: a temporary one)\n"
            "  --net none|proxy|host  network policy (default proxy, or none when\n"
            "                       CLAW_ENABLE_SANDBOX_NET=false): none is loopback only,\n"
            "                       proxy egress through the daemon's policy, host the host's\n"
            "                       network namespace (trusted code only: it also shares the\n"
            "                       host's abstract unix sockets: dbus, X11, container shims)\n"
            "  --proxy-port N       the SOCKS5 port inside the sandbox (default 1080, or\n"
            "                       CLAW_SANDBOX_PROXY_PORT)\n"
            "  --allow RULE, --deny RULE  egress rules (repeatable): name, *.suffix,\n"
            "                       CIDR or address, each with an optional :port, or :port\n"
            "  --default allow|deny what the egress does with the rest (default allow:\n"
            "                       public internet, minus the deny-list)\n"
            "  --add-host NAME=ADDRESS  a static name for the egress (repeatable)\n"
            "  --dns-upstream IP[:PORT] resolvers for the egress (default: /etc/resolv.conf)\n"
            "  --env KEY=VALUE      add to the task's environment (repeatable)\n"
            "  --uid N, --gid N     ids of the task inside the sandbox (default 10001)\n"
            "  --host-id-base N     host id the sandbox's id 0 maps to (default %u)\n"
            "  --seccomp default|strict\n"
            "  --cgroup auto|rlimit force the rlimit fallback with 'rlimit'\n"
            "  --report FILE        write the outcome as JSON to FILE ('-': stderr)\n",
            SBX_DEFAULT_HOST_ID_BASE);
}

static int bad(const char *opt, const sbx_err *e)
{
    fprintf(stderr, "sandboxd run: %s: %s\n", opt, e->msg);
    return -1;
}

/* The SOCKS5 port of the egress inside the sandbox: any but the egress's
 * other listeners (3128 HTTP proxy, 15001 transparent, 53 DNS). */
static int socks_port(const char *s, uint64_t *out, sbx_err *e)
{
    if (sbx_parse_uint(s, 1, 65535, out, e) < 0)
        return -1;
    return sbx_egress_socks_port_check((unsigned)*out, e);
}

/* The index of COMMAND in argv, 0 when --help was given (the usage is
 * printed), or -1 after a message. */
static int parse_run_opts(int argc, char **argv, struct run_opts *o)
{
    enum {
        O_MEM = 1,
        O_PIDS,
        O_CPU,
        O_TIMEOUT,
        O_FSIZE,
        O_OUT,
        O_WS,
        O_NET,
        O_PROXY_PORT,
        O_ENV,
        O_UID,
        O_GID,
        O_BASE,
        O_SECCOMP,
        O_REPORT,
        O_CGROUP,
        O_HELP,
        O_ALLOW,
        O_DENY,
        O_DEFAULT,
        O_ADDHOST,
        O_DNS
    };
    static const struct option longopts[] = {
        {"memory", required_argument, NULL, O_MEM},
        {"pids", required_argument, NULL, O_PIDS},
        {"cpu", required_argument, NULL, O_CPU},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"file-size", required_argument, NULL, O_FSIZE},
        {"output-limit", required_argument, NULL, O_OUT},
        {"workspace", required_argument, NULL, O_WS},
        {"net", required_argument, NULL, O_NET},
        {"proxy-port", required_argument, NULL, O_PROXY_PORT},
        {"env", required_argument, NULL, O_ENV},
        {"uid", required_argument, NULL, O_UID},
        {"gid", required_argument, NULL, O_GID},
        {"host-id-base", required_argument, NULL, O_BASE},
        {"seccomp", required_argument, NULL, O_SECCOMP},
        {"report", required_argument, NULL, O_REPORT},
        {"cgroup", required_argument, NULL, O_CGROUP},
        {"help", no_argument, NULL, O_HELP},
        {"allow", required_argument, NULL, O_ALLOW},
        {"deny", required_argument, NULL, O_DENY},
        {"default", required_argument, NULL, O_DEFAULT},
        {"add-host", required_argument, NULL, O_ADDHOST},
        {"dns-upstream", required_argument, NULL, O_DNS},
        {0},
    };
    sbx_err e = {0};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
        const char *name = optind > 1 ? argv[optind - 1] : "?";
        switch (c) {
        case O_MEM:
            if (sbx_parse_size(optarg, &o->lim.memory_bytes, &e) < 0)
                return bad("--memory", &e);
            if (o->lim.memory_bytes < (8u << 20))
                return bad("--memory", &(sbx_err){ERANGE, "", "must be at least 8M"});
            break;
        case O_PIDS:
            if (sbx_parse_uint(optarg, 1, 1 << 22, &o->lim.pids, &e) < 0)
                return bad("--pids", &e);
            break;
        case O_CPU:
            if (sbx_parse_cpu(optarg, 1024, &o->lim.cpu_cores, &e) < 0)
                return bad("--cpu", &e);
            break;
        case O_TIMEOUT:
            if (sbx_parse_seconds(optarg, MAX_TIMEOUT_S, &o->timeout_s, &e) < 0)
                return bad("--timeout", &e);
            break;
        case O_FSIZE:
            if (sbx_parse_size(optarg, &o->file_size, &e) < 0)
                return bad("--file-size", &e);
            break;
        case O_OUT:
            if (sbx_parse_size(optarg, &o->output_limit, &e) < 0)
                return bad("--output-limit", &e);
            break;
        case O_WS:
            o->workspace = optarg;
            break;
        case O_NET:
            if (sbx_net_policy_parse(optarg, &o->net, &e) < 0)
                return bad("--net", &e);
            break;
        case O_PROXY_PORT:
            if (socks_port(optarg, &o->socks_port, &e) < 0)
                return bad("--proxy-port", &e);
            break;
        case O_ENV:
            if (sbx_parse_env_assignment(optarg, &e) < 0)
                return bad("--env", &e);
            if (o->n_env == MAX_ENV)
                return bad("--env", &(sbx_err){E2BIG, "", "too many (at most 256)"});
            o->env[o->n_env++] = optarg;
            break;
        case O_UID:
        case O_GID:
            if (sbx_parse_uint(optarg, 1, SBX_ID_RANGE - 2, c == O_UID ? &o->uid : &o->gid, &e) < 0)
                return bad(c == O_UID ? "--uid" : "--gid", &e);
            break;
        case O_BASE:
            if (sbx_parse_uint(optarg, SBX_ID_RANGE, UINT32_MAX - SBX_ID_RANGE, &o->host_id_base,
                               &e) < 0)
                return bad("--host-id-base", &e);
            break;
        case O_SECCOMP:
            if (sbx_seccomp_profile_parse(optarg, &o->seccomp, &e) < 0)
                return bad("--seccomp", &e);
            break;
        case O_REPORT:
            o->report = optarg;
            break;
        case O_CGROUP:
            if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "rlimit") != 0)
                return bad("--cgroup", &(sbx_err){EINVAL, "", "must be auto or rlimit"});
            o->force_rlimit = strcmp(optarg, "rlimit") == 0;
            break;
        case O_HELP:
            run_usage(stdout);
            return 0;
        case O_ALLOW:
        case O_DENY:
        case O_ADDHOST:
        case O_DNS: {
            const char **list = c == O_ALLOW     ? o->allow
                                : c == O_DENY    ? o->deny
                                : c == O_ADDHOST ? o->hosts
                                                 : o->dns;
            size_t *n = c == O_ALLOW     ? &o->n_allow
                        : c == O_DENY    ? &o->n_deny
                        : c == O_ADDHOST ? &o->n_hosts
                                         : &o->n_dns;
            if (*n == MAX_RULES)
                return bad(name, &(sbx_err){E2BIG, "", "too many (at most 256)"});
            list[(*n)++] = optarg;
            break;
        }
        case O_DEFAULT:
            if (strcmp(optarg, "allow") != 0 && strcmp(optarg, "deny") != 0)
                return bad("--default", &(sbx_err){EINVAL, "", "must be allow or deny"});
            o->net_default = strcmp(optarg, "deny") == 0 ? SBX_DEFAULT_DENY : SBX_DEFAULT_ALLOW;
            break;
        default:
            fprintf(stderr, "sandboxd run: unknown or incomplete option '%s'\n", name);
            return -1;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "sandboxd run: no command given (sandboxd run [options] -- COMMAND)\n");
        return -1;
    }
    return optind;
}

static void write_all(int fd, const char *buf, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* our reader went away; the task still runs to its end */
        buf += w, n -= (size_t)w;
    }
}

static void relay_output(void *ud, enum sbx_stream s, const char *buf, size_t n)
{
    write_all(s == SBX_STDOUT ? STDOUT_FILENO : STDERR_FILENO, buf, n);
}

/* Called while the child builds its root: the init binary's memfd copy and
 * the seccomp profile, compiled when sandboxd was built (compiling it with
 * libseccomp took ~0.35 ms of CPU at every start). */
static int prepare_fds(void *ud, struct sbx_sandbox_fds *fds, sbx_err *err)
{
    struct run_state *st = ud;
    if ((st->fds.init_exe = sbx_init_exe_open(err)) < 0 ||
        (st->fds.seccomp = sbx_seccomp_prebuilt_fd(st->seccomp, err)) < 0)
        return -1;
    *fds = st->fds;
    return 0;
}

static void record_flow(void *ud, const struct sbx_flow *f)
{
    struct run_state *st = ud;
    json_array_append_new(st->flows, sbx_flow_json(f));
}

/* Proxy policy: the egress in the sandbox's namespace, before its task runs. */
static int start_egress(void *ud, int netns_fd, sbx_err *err)
{
    struct run_state *st = ud;
    st->egress = sbx_egress_start(st->egress_opts, netns_fd, err);
    return st->egress ? 0 : -1;
}

static void task_done(void *ud, struct sbx_task *t)
{
    struct run_state *st = ud;
    /* Every relay closes now and reports its flow before the report is out. */
    sbx_egress_free(sbx_steal_pointer(&st->egress));
    st->done = true;
    event_base_loopbreak(st->base);
}

static void on_signal(evutil_socket_t sig, short what, void *ud)
{
    struct run_state *st = ud;
    if (st->task)
        sbx_task_cancel(st->task);
}

static int write_report(const char *where, const struct sbx_report *r, enum sbx_net_policy net,
                        json_t *flows)
{
    json_t *obj = sbx_report_json(r);
    if (obj)
        json_object_set_new(
            obj, "network",
            json_pack("{s:s, s:O}", "policy", sbx_net_policy_name(net), "flows", flows));
    char *json = sbx_report_dump(obj);
    if (!json)
        return -1;
    int rc = 0;
    if (strcmp(where, "-") == 0) {
        fprintf(stderr, "%s\n", json);
    } else {
        FILE *f = fopen(where, "we");
        if (!f || fprintf(f, "%s\n", json) < 0 || fclose(f) != 0) {
            fprintf(stderr, "sandboxd run: --report %s: %s\n", where, strerror(errno));
            rc = -1;
        }
    }
    free(json);
    return rc;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    remove(path);
    return 0;
}

/* A process's start time in clock ticks after boot (field 22 of its stat
 * file); 0 when it is gone. With the pid it names one process of this boot. */
static unsigned long long proc_start_time(pid_t pid)
{
    char path[32], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    cleanup_fd int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold anything */
    unsigned long long start = 0;
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    if (p && sscanf(p + 1, "%llu", &start) != 1)
        start = 0;
    return start;
}

/* The inode of our pid namespace: pids and start times mean something only
 * within one. */
static unsigned long long pid_ns_ino(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

/* A cgroup younger than this is never judged stale: its owner may be between
 * its mkdir and its join (and a clock or namespace quirk should not cost a
 * live run its cgroup). */
#define STALE_MIN_AGE_S 2

struct sweep {
    const struct sbx_cg_host *host;
    unsigned long long ns;
    time_t now;
};

/* The cgroup of a `run` killed before it could remove it (SIGKILL is the one
 * signal it cannot act on): named run-<pid namespace>-<pid>-<start time>, it
 * is stale when that process is gone from our own pid namespace. Its sandbox
 * died with it (parent-death signal), so the directories are empty and are
 * removed; one that still holds a process is left alone (nothing is killed
 * here), as is every name of another pid namespace, of another form, or too
 * young. Without this, a later run given the same pid (they wrap at pid_max)
 * found its name taken. The cgroups of `serve` (task-, session-) are that
 * daemon's to recover. */
static void sweep_stale_run(const char *name, void *ud)
{
    const struct sweep *w = ud;
    int pid = 0, len = 0;
    unsigned long long ns = 0, start = 0;
    if (sscanf(name, "run-%llu-%d-%llu%n", &ns, &pid, &start, &len) != 3 || name[len] != '\0' ||
        ns != w->ns || pid <= 0 || proc_start_time(pid) == start)
        return;
    struct sbx_cgroup cg;
    if (sbx_cgroup_adopt(w->host, name, &cg, NULL) < 0)
        return;
    for (int c = 0; c < SBX_CGC_COUNT; c++) {
        struct stat st;
        const char *dir = cg.mode == SBX_CG_V2 ? cg.v2_path : cg.path[c];
        if (dir[0] && stat(dir, &st) == 0 && w->now - st.st_ctime < STALE_MIN_AGE_S)
            return;
        if (cg.mode == SBX_CG_V2)
            break;
    }
    (void)sbx_cgroup_remove(&cg, NULL);
}

/* Before the flags: what a task of `serve` gets when it asks for nothing, and
 * the network settings of run's environment (sbx_config_load_run). The
 * config's strings live as long as it. */
static void run_defaults(const struct sbx_config *c, struct run_opts *o)
{
    o->lim = (struct sbx_cg_limits){.memory_bytes = c->limits.memory_bytes,
                                    .pids = c->limits.pids,
                                    .cpu_cores = c->limits.cpu_cores};
    o->timeout_s = c->limits.timeout_s;
    o->file_size = c->limits.file_size_bytes;
    o->output_limit = c->limits.output_bytes;
    o->tmp_size = c->limits.tmp_bytes;
    o->host_id_base = c->host_id_base;
    o->uid = c->runner_uid;
    o->gid = c->runner_gid;
    o->net = c->net;
    o->seccomp = c->seccomp;
    o->net_default = c->network.def;
    o->socks_port = c->network.limits.proxy_port;
    o->allowed_cidrs = c->network.allowed_cidrs;
    o->allowed_ports = c->network.allowed_ports;
    o->allowed_internal_targets = c->network.allowed_internal_targets;
    o->blocked_cidrs = c->network.blocked_cidrs;
}

int sbx_cmd_run(int argc, char **argv)
{
    /* (filled or zeroed by the load: freed on every way out) */
    __attribute__((cleanup(sbx_config_free))) struct sbx_config cfg;
    sbx_err e = {0};
    if (sbx_config_load_run(&cfg, environ, &e) < 0) {
        fprintf(stderr, "sandboxd run: %s\n", e.msg);
        return EXIT_SETUP;
    }
    struct run_opts o = {0};
    run_defaults(&cfg, &o);
    int cmd_at = parse_run_opts(argc, argv, &o);
    if (cmd_at <= 0)
        return cmd_at < 0 ? EXIT_SETUP : 0;

    char msg[600];
    int rc = EXIT_SETUP;
    char tmp_ws[] = "/tmp/sandbox-ws-XXXXXX";
    const char *workspace = o.workspace;
    if (!workspace && !(workspace = mkdtemp(tmp_ws))) {
        fprintf(stderr, "sandboxd run: temporary workspace: %s\n", strerror(errno));
        return EXIT_SETUP;
    }
    /* The proxy variables first, so the caller's --env may override them. */
    const char *extra[MAX_ENV + 16];
    size_t n_extra = 0;
    struct sbx_egress_env proxy;
    sbx_egress_env_make(&proxy, (uint16_t)o.socks_port);
    for (size_t i = 0; o.net == SBX_NET_PROXY && proxy.v[i]; i++)
        extra[n_extra++] = proxy.v[i];
    for (size_t i = 0; i < o.n_env; i++)
        extra[n_extra++] = o.env[i];
    char **env = sbx_env_build(extra, n_extra, &e);
    struct sbx_cg_host cg_host;
    struct run_state st = {.seccomp = o.seccomp, .fds = {-1, -1}, .flows = json_array()};
    struct sbx_policy *policy = NULL;
    struct sbx_resolver *resolver = NULL;
    struct sbx_egress_opts egress = {0};
    char *rules = NULL; /* the nftables rules of the sandbox's egress */
    struct event *sigs[3] = {0};
    char name[64];
    struct sweep sweep = {.ns = pid_ns_ino(), .now = time(NULL)};
    snprintf(name, sizeof(name), "run-%llu-%d-%llu", sweep.ns, (int)getpid(),
             proc_start_time(getpid()));
    signal(SIGPIPE, SIG_IGN);

    if (!env || sbx_cg_host_detect(o.force_rlimit, &cg_host, &e) < 0 ||
        !(st.base = event_base_new())) {
        fprintf(stderr, "sandboxd run: %s\n", sbx_err_format(&e, msg, sizeof(msg)));
        goto out;
    }
    sweep.host = &cg_host;
    sbx_cgroup_each_ends(&cg_host, sweep_stale_run, &sweep);
    if (o.net == SBX_NET_PROXY) {
        struct sbx_addr own[64];
        struct sbx_policy_opts po = {
            .def = o.net_default,
            .allow = o.allow,
            .deny = o.deny,
            .hosts = o.hosts,
            .allowed_cidrs = o.allowed_cidrs,
            .allowed_ports = o.allowed_ports,
            .allowed_internal_targets = o.allowed_internal_targets,
            .blocked_cidrs = o.blocked_cidrs,
            .own_addrs = own,
            .n_own_addrs = sbx_host_addresses(own, SBX_ARRAY_LEN(own)),
        };
        if (!(policy = sbx_policy_new(&po, &e)) ||
            !(resolver = sbx_resolver_new(st.base, policy, o.n_dns ? o.dns : NULL, &e)) ||
            sbx_egress_rules_load(&e) < 0 || !(rules = sbx_egress_rules_text(policy, &e))) {
            fprintf(stderr, "sandboxd run: egress policy: %s\n",
                    sbx_err_format(&e, msg, sizeof(msg)));
            goto out;
        }
        egress = (struct sbx_egress_opts){.base = st.base,
                                          .socks_port = (uint16_t)o.socks_port,
                                          .policy = policy,
                                          .resolver = resolver,
                                          .on_flow = record_flow,
                                          .ud = &st};
        st.egress_opts = &egress;
    }
    struct sbx_task_opts to = {
        .spec =
            {
                .argv = argv + cmd_at,
                .envp = env,
                .workspace = workspace,
                .uid = (uid_t)o.uid,
                .gid = (gid_t)o.gid,
                .host_id_base = (uint32_t)o.host_id_base,
                .host_net = o.net == SBX_NET_HOST,
                .net_rules = o.net == SBX_NET_PROXY ? sbx_egress_rules : NULL,
                .net_rules_arg = rules,
                .cg_host = &cg_host,
                .cg_limits = o.lim,
                .file_size_bytes = o.file_size,
                .tmp_size_bytes = o.tmp_size,
                .nofile = 1024,
                .name = name,
                .join_pidfd = -1,
            },
        .fds = {-1, -1},
        .prepare = prepare_fds,
        .timeout_s = o.timeout_s,
        .output_limit = o.output_limit,
        .stdin_fd = STDIN_FILENO,
        .on_spawn = o.net == SBX_NET_PROXY ? start_egress : NULL,
        .on_output = relay_output,
        .on_done = task_done,
        .ud = &st,
    };
    int signals[] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++)
        if (!(sigs[i] = evsignal_new(st.base, signals[i], on_signal, &st)) ||
            event_add(sigs[i], NULL) < 0) {
            fprintf(stderr, "sandboxd run: the event loop cannot watch signal %d\n", signals[i]);
            goto out;
        }
    st.task = sbx_task_start(st.base, &to, &e);
    if (!st.task) {
        fprintf(stderr, "sandboxd run: %s\n", sbx_err_format(&e, msg, sizeof(msg)));
        goto out;
    }
    while (!st.done && event_base_loop(st.base, 0) == 0)
        ;
    const struct sbx_report *r = sbx_task_report(st.task);
    if (r->outcome == SBX_OUTCOME_SETUP_ERROR)
        fprintf(stderr, "sandboxd run: sandbox setup failed: %s\n", r->message);
    if (o.report)
        write_report(o.report, r, o.net, st.flows);
    rc = r->exit_code;

out:
    if (st.task)
        sbx_task_free(st.task);
    sbx_egress_free(st.egress);
    for (int i = 0; i < 3; i++)
        if (sigs[i])
            event_free(sigs[i]);
    sbx_resolver_free(resolver);
    free(rules);
    sbx_policy_free(policy);
    json_decref(st.flows);
    if (st.base)
        event_base_free(st.base);
    if (st.fds.init_exe >= 0)
        close(st.fds.init_exe);
    if (st.fds.seccomp >= 0)
        close(st.fds.seccomp);
    sbx_env_free(env);
    if (!o.workspace)
        nftw(tmp_ws, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    return rc;
}
