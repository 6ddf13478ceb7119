/* sandboxd doctor [--json]: what the host offers (cgroups, namespaces, seccomp,
 * nftables, landlock, clone3, pidfds) and the isolation `sandboxd run` will
 * therefore apply. Exit 0 when full isolation is possible, 1 when something
 * required is missing (the warnings say what), 2 for a bad option. */
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/cmd.h"
#include "daemon/doctor_envs.h"
#include "isolate/probe_host.h"
#include "isolate/probe_steps.h"
#include "workspace/quota_mode.h"

#define KEY_WIDTH 20

/* The workspace quota modes serve could take here. */
struct wsq_probe {
    char root[PATH_MAX]; /* the default workspace root, or its nearest existing parent */
    bool loop, project;
    char loop_why[160], project_why[240];
    enum sbx_ws_quota_mode automatic;
};

struct doctor {
    struct sbx_host_probe probe;
    struct sbx_cg_host cg;
    struct sbx_isolation_plan plan;
    struct sbx_steps steps;
    json_t *envs; /* --config: its environments (doctor_envs.c) */
    struct wsq_probe wsq;
};

static void doctor_usage(FILE *f)
{
    fprintf(f, "usage: sandboxd doctor [--json] [--config FILE]\n"
               "  --json  one JSON object instead of text\n"
               "  --config FILE  also its environments' images (digest, unpacked), roots,\n"
               "                 seccomp tables and mounts\n"
               "Exit 0 when full isolation is possible, 1 when something required is missing.\n");
}

/* ---- text ---- */

__attribute__((format(printf, 2, 3))) static void line(const char *key, const char *fmt, ...)
{
    char k[64];
    snprintf(k, sizeof(k), "%s:", key);
    printf("  %-*s ", KEY_WIDTH, k);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
}

static const char *yes_no(bool b)
{
    return b ? "yes" : "no";
}

/* "no (EPERM: Operation not permitted)" into buf. */
static const char *no_because(int errnum, char *buf, size_t len)
{
    if (errnum)
        snprintf(buf, len, "no (%s: %s)", sbx_errno_name(errnum), strerror(errnum));
    else
        snprintf(buf, len, "no");
    return buf;
}

static void text_cgroup(const struct sbx_cg_host *cg)
{
    line("cgroup mode", "%s", sbx_cg_mode_name(cg->mode));
    if (cg->mode == SBX_CG_V2)
        line("cgroup base", "%s", cg->v2_base);
    for (int c = 0; cg->mode == SBX_CG_V1 && c < SBX_CGC_COUNT; c++) {
        char key[32];
        snprintf(key, sizeof(key), "cgroup %s", sbx_cg_ctrl_name((enum sbx_cg_ctrl)c));
        if (cg->v1_has[c])
            line(key, "yes  %s", cg->v1_base[c]);
        else
            line(key, "no");
    }
    if (cg->mode == SBX_CG_RLIMIT)
        line("cgroup controllers", "none writable");
    if (cg->why[0])
        line("cgroup why", "%s", cg->why);
    /* The aggregate caps a serving daemon keeps on its sandboxd/ parent
     * (sandbox.total_memory, total_cpu, total_pids). */
    if (cg->mode != SBX_CG_RLIMIT) {
        struct sbx_cg_limits now;
        sbx_cg_host_read_totals(cg, &now);
        char mem[32] = "none", cpu[32] = "none", pids[32] = "none";
        if (now.memory_bytes)
            snprintf(mem, sizeof(mem), "%llu MiB", (unsigned long long)(now.memory_bytes >> 20));
        if (now.cpu_cores > 0)
            snprintf(cpu, sizeof(cpu), "%g cores", now.cpu_cores);
        if (now.pids)
            snprintf(pids, sizeof(pids), "%llu", (unsigned long long)now.pids);
        line("aggregate caps",
             "memory %s, cpu %s, processes %s (sandboxd/ now; serve sets "
             "sandbox.total_*, default 3 GiB, 2 cores, 512)",
             mem, cpu, pids);
    }
}

/* "pid mount net ipc uts cgroup", then any missing with why. */
static const char *other_namespaces(const struct sbx_host_probe *p, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int pass = 0; pass < 2; pass++)
        for (int i = SBX_NS_USER + 1; i < SBX_NS_COUNT && n < len; i++) {
            const struct sbx_feature *f = &p->ns[i];
            if (f->ok != (pass == 0))
                continue;
            const char *name = sbx_ns_name((enum sbx_ns)i);
            int w = f->ok ? snprintf(buf + n, len - n, "%s%s", n ? " " : "", name)
                          : snprintf(buf + n, len - n, "%s%s: no (%s)", n ? "; " : "", name,
                                     f->errnum ? sbx_errno_name(f->errnum) : "not found");
            n += w > 0 ? (size_t)w : 0;
        }
    return buf[0] ? buf : "none";
}

static void text_host(const struct doctor *d)
{
    const struct sbx_host_probe *p = &d->probe;
    char buf[160], max[48] = "";
    printf("Host\n");
    line("kernel", "%s", p->kernel[0] ? p->kernel : "unknown");
    line("root", "%s", yes_no(p->root));
    text_cgroup(&d->cg);
    if (p->max_user_ns >= 0)
        snprintf(max, sizeof(max), " (max %ld)", p->max_user_ns);
    line("user namespaces", "%s%s",
         p->ns[SBX_NS_USER].ok ? "yes" : no_because(p->ns[SBX_NS_USER].errnum, buf, sizeof(buf)),
         max);
    line("other namespaces", "%s", other_namespaces(p, buf, sizeof(buf)));
    if (p->seccomp.ok && p->seccomp_bpf_len >= 0)
        line("seccomp", "yes, filter mode (default profile: %d BPF instructions)",
             p->seccomp_bpf_len);
    else if (p->seccomp.ok)
        line("seccomp", "yes, filter mode (default profile does not compile)");
    else
        line("seccomp", "%s", no_because(p->seccomp.errnum, buf, sizeof(buf)));
    if (p->nf_tables.ok)
        line("nftables", "yes (netfilter netlink, nf_tables answers)");
    else if (p->nft_netlink.ok)
        line("nftables", "netlink only, nf_tables %s",
             no_because(p->nf_tables.errnum, buf, sizeof(buf)));
    else
        line("nftables", "%s", no_because(p->nft_netlink.errnum, buf, sizeof(buf)));
    if (p->landlock.ok)
        line("landlock", "yes, ABI %d", p->landlock_abi);
    else
        line("landlock", "%s", no_because(p->landlock.errnum, buf, sizeof(buf)));
    line("clone3", "%s", p->clone3.ok ? "yes" : no_because(p->clone3.errnum, buf, sizeof(buf)));
    line("pidfd", "%s", p->pidfd.ok ? "yes" : no_because(p->pidfd.errnum, buf, sizeof(buf)));
}

/* What `--net host` gives away besides the network: abstract unix sockets
 * live in the network namespace (CVE-2020-15257 reached containerd's shim
 * through one). */
#define NET_HOST_SHARES                                                                            \
    "shares the host's network namespace, its abstract unix sockets included (dbus, X11, "         \
    "container shims): trusted code only"

static const char *step_state(const struct sbx_step_result *r, char *buf, size_t len)
{
    if (r->state == SBX_STEP_OK)
        return "ok";
    if (r->state == SBX_STEP_NOT_TRIED)
        return "not tried (an earlier step failed)";
    return no_because(r->errnum, buf, len);
}

/* Each step tried for real, and the fix of each that failed. */
static void text_steps(const struct sbx_steps *st)
{
    char buf[160];
    printf("\nSteps tried%s\n", st->in_container ? " (in a container)" : "");
    for (int i = 0; i < SBX_STEP_COUNT; i++) {
        const struct sbx_step_result *r = &st->step[i];
        line(sbx_step_name((enum sbx_step)i), "%s  %s", step_state(r, buf, sizeof(buf)), r->detail);
        if (r->state == SBX_STEP_FAILED && r->fix[0])
            line("  fix", "%s", r->fix);
    }
}

static void text_plan(const struct sbx_isolation_plan *plan)
{
    char ns[128] = "";
    for (int i = 0; i < SBX_NS_COUNT; i++)
        if (plan->ns[i]) {
            strcat(ns, ns[0] ? " " : "");
            strcat(ns, sbx_ns_name((enum sbx_ns)i));
        }
    printf("\nIsolation sandboxd run will apply\n");
    line("namespaces", "%s%s", ns[0] ? ns : "none",
         plan->ns[SBX_NS_NET] ? " (net: loopback only, unless --net host)" : "");
    line("limits", "%s", sbx_plan_limits_name(plan->limits));
    line("memory", "%s%s", plan->memory_by,
         plan->limits == SBX_CG_RLIMIT
             ? " (partial: the sandbox's sum is sampled every 50 ms, so a burst can run past "
               "the limit until the next sample; socket buffers and other kernel memory are "
               "not counted)"
             : "");
    line("processes", "%s", plan->pids_by);
    line("cpu share", "%s", plan->cpu_by ? plan->cpu_by : "NOT enforced");
    line("kill", "%s", plan->kill_by);
    line("--net host", "%s", NET_HOST_SHARES);
    line("seccomp", "%s",
         plan->seccomp_profile ? "default profile (--seccomp strict available)" : "NONE");
    printf("\nWarnings\n");
    if (!plan->n_warn)
        printf("  none\n");
    for (size_t i = 0; i < plan->n_warn; i++)
        printf("  - %s%s\n", plan->warn[i].required ? "REQUIRED: " : "", plan->warn[i].text);
    printf("\nResult: %s\n",
           plan->full ? "full isolation available" : "full isolation NOT possible on this host");
}

/* ---- the workspace quota (serve's sandbox.workspace_quota_mode) ---- */

static void wsq_probe(struct wsq_probe *w)
{
    const char *env = getenv("CLAW_WORKSPACE");
    snprintf(w->root, sizeof(w->root), "%s",
             env && env[0] == '/' ? env : "/var/lib/sandbox/workspaces");
    struct stat st;
    for (char *slash; stat(w->root, &st) < 0 && (slash = strrchr(w->root, '/'));)
        slash == w->root ? (void)(w->root[1] = '\0') : (void)(*slash = '\0');
    w->loop = sbx_ws_quota_loop_usable(w->loop_why, sizeof(w->loop_why));
    w->project = sbx_ws_quota_project_usable(w->root, w->project_why, sizeof(w->project_why));
    w->automatic = w->loop ? SBX_WSQ_LOOP : w->project ? SBX_WSQ_PROJECT : SBX_WSQ_MONITOR;
}

static void text_wsq(const struct wsq_probe *w)
{
    printf("\nWorkspace quota (serve: sandbox.workspace_quota_mode)\n");
    line("loop", "%s (%s)", yes_no(w->loop), w->loop_why);
    line("project", "%s (%s, on %s)", yes_no(w->project), w->project_why, w->root);
    line("auto picks", "%s%s", sbx_ws_quota_mode_name(w->automatic),
         sbx_ws_quota_mode_kernel(w->automatic)
             ? ""
             : " (weaker: the daemon measures workspaces and stops writers over the quota)");
}

static json_t *wsq_json(const struct wsq_probe *w)
{
    return json_pack("{s:{s:b, s:s}, s:{s:b, s:s, s:s}, s:s, s:b}", "loop", "available", w->loop,
                     "why", w->loop_why, "project", "available", w->project, "why", w->project_why,
                     "root", w->root, "auto", sbx_ws_quota_mode_name(w->automatic),
                     "kernelEnforced", sbx_ws_quota_mode_kernel(w->automatic));
}

/* ---- JSON ---- */

static json_t *feature_json(struct sbx_feature f)
{
    json_t *o = json_object();
    json_object_set_new(o, "available", json_boolean(f.ok));
    if (!f.ok && f.errnum) {
        char buf[128];
        snprintf(buf, sizeof(buf), "%s: %s", sbx_errno_name(f.errnum), strerror(f.errnum));
        json_object_set_new(o, "error", json_string(buf));
    }
    return o;
}

static json_t *cgroup_json(const struct sbx_cg_host *cg)
{
    json_t *o = json_object(), *ctrl = json_object(), *bases = json_object();
    json_object_set_new(o, "mode", json_string(sbx_cg_mode_name(cg->mode)));
    for (int c = 0; c < SBX_CGC_COUNT; c++) {
        const char *name = sbx_cg_ctrl_name((enum sbx_cg_ctrl)c);
        /* v2 gives all five: cpu.stat stands for cpuacct, cgroup.freeze for freezer. */
        bool has = cg->mode == SBX_CG_V2 || (cg->mode == SBX_CG_V1 && cg->v1_has[c]);
        json_object_set_new(ctrl, name, json_boolean(has));
        if (cg->mode == SBX_CG_V1 && cg->v1_has[c])
            json_object_set_new(bases, name, json_string(cg->v1_base[c]));
    }
    json_object_set_new(o, "controllers", ctrl);
    json_object_set_new(o, "bases", bases);
    json_object_set_new(o, "v2Base",
                        cg->mode == SBX_CG_V2 ? json_string(cg->v2_base) : json_null());
    json_object_set_new(o, "why", json_string(cg->why));
    struct sbx_cg_limits now;
    sbx_cg_host_read_totals(cg, &now);
    json_object_set_new(o, "totals",
                        json_pack("{s:I, s:f, s:I}", "memoryBytes", (json_int_t)now.memory_bytes,
                                  "cpu", now.cpu_cores, "pids", (json_int_t)now.pids));
    return o;
}

static json_t *plan_json(const struct sbx_isolation_plan *plan)
{
    json_t *o = json_object(), *ns = json_array();
    for (int i = 0; i < SBX_NS_COUNT; i++)
        if (plan->ns[i])
            json_array_append_new(ns, json_string(sbx_ns_name((enum sbx_ns)i)));
    json_object_set_new(o, "namespaces", ns);
    json_object_set_new(o, "limits", json_string(sbx_plan_limits_name(plan->limits)));
    json_object_set_new(o, "memory", json_string(plan->memory_by));
    json_object_set_new(o, "memoryEnforced",
                        json_string(plan->limits == SBX_CG_RLIMIT ? "partial" : "full"));
    json_object_set_new(o, "processes", json_string(plan->pids_by));
    json_object_set_new(o, "cpu", plan->cpu_by ? json_string(plan->cpu_by) : json_null());
    json_object_set_new(o, "cpuShareEnforced", json_boolean(plan->cpu_enforced));
    json_object_set_new(o, "kill", json_string(plan->kill_by));
    json_object_set_new(o, "netHost", json_string(NET_HOST_SHARES));
    json_object_set_new(o, "seccomp",
                        plan->seccomp_profile ? json_string(plan->seccomp_profile) : json_null());
    json_object_set_new(o, "full", json_boolean(plan->full));
    return o;
}

static json_t *steps_json(const struct sbx_steps *st)
{
    static const char *const states[] = {"ok", "failed", "not-tried"};
    json_t *a = json_array();
    for (int i = 0; i < SBX_STEP_COUNT; i++) {
        const struct sbx_step_result *r = &st->step[i];
        json_t *o =
            json_pack("{s:s, s:s, s:b, s:s}", "step", sbx_step_name((enum sbx_step)i), "state",
                      states[r->state], "required", r->required, "detail", r->detail);
        if (r->state == SBX_STEP_FAILED) {
            char buf[128] = "";
            if (r->errnum)
                snprintf(buf, sizeof(buf), "%s: %s", sbx_errno_name(r->errnum),
                         strerror(r->errnum));
            json_object_set_new(o, "error", r->errnum ? json_string(buf) : json_null());
            json_object_set_new(o, "fix", json_string(r->fix));
        }
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *doctor_json(const struct doctor *d)
{
    const struct sbx_host_probe *p = &d->probe;
    json_t *o = json_object();
    json_object_set_new(o, "kernel", json_string(p->kernel));
    json_object_set_new(o, "kernelVersion",
                        p->kver_known
                            ? json_pack("{s:i,s:i,s:i}", "major", (int)p->kver.major, "minor",
                                        (int)p->kver.minor, "patch", (int)p->kver.patch)
                            : json_null());
    json_object_set_new(o, "root", json_boolean(p->root));
    json_object_set_new(o, "cgroup", cgroup_json(&d->cg));

    json_t *ns = json_object();
    for (int i = 0; i < SBX_NS_COUNT; i++)
        json_object_set_new(ns, sbx_ns_name((enum sbx_ns)i), json_boolean(p->ns[i].ok));
    json_object_set_new(o, "namespaces", ns);
    json_t *userns = feature_json(p->ns[SBX_NS_USER]);
    json_object_set_new(userns, "max",
                        p->max_user_ns >= 0 ? json_integer(p->max_user_ns) : json_null());
    json_object_set_new(o, "userNamespaces", userns);

    json_t *sc = feature_json(p->seccomp);
    json_object_set_new(sc, "defaultProfileInstructions",
                        p->seccomp_bpf_len >= 0 ? json_integer(p->seccomp_bpf_len) : json_null());
    if (p->seccomp_bpf_len < 0)
        json_object_set_new(sc, "profileError", json_string(p->seccomp_why));
    json_object_set_new(o, "seccomp", sc);
    json_t *nft = feature_json(p->nft_netlink.ok ? p->nf_tables : p->nft_netlink);
    json_object_set_new(nft, "netlink", json_boolean(p->nft_netlink.ok));
    json_object_set_new(o, "nftables", nft);
    json_t *ll = feature_json(p->landlock);
    json_object_set_new(ll, "abi", json_integer(p->landlock_abi));
    json_object_set_new(o, "landlock", ll);
    json_object_set_new(o, "clone3", json_boolean(p->clone3.ok));
    json_object_set_new(o, "pidfd", json_boolean(p->pidfd.ok));

    json_object_set_new(o, "inContainer", json_boolean(d->steps.in_container));
    json_object_set_new(o, "steps", steps_json(&d->steps));
    json_object_set_new(o, "isolation", plan_json(&d->plan));
    json_object_set_new(o, "workspaceQuota", wsq_json(&d->wsq));
    json_t *warnings = json_array(), *missing = json_array();
    for (size_t i = 0; i < d->plan.n_warn; i++) {
        json_array_append_new(warnings, json_string(d->plan.warn[i].text));
        if (d->plan.warn[i].required)
            json_array_append_new(missing, json_string(d->plan.warn[i].text));
    }
    json_object_set_new(o, "warnings", warnings);
    json_object_set_new(o, "missing", missing);
    if (d->envs)
        json_object_set(o, "environments", d->envs);
    return o;
}

static int print_json(const struct doctor *d)
{
    json_t *o = doctor_json(d);
    char *s = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    if (!s) {
        fprintf(stderr, "sandboxd doctor: cannot build the JSON report\n");
        return -1;
    }
    puts(s);
    free(s);
    return 0;
}

/* ---- command ---- */

/* 1 for --json, 0 for text, -1 for --help (done), -2 for a bad argument. */
static int parse_doctor_opts(int argc, char **argv, const char **config)
{
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--config") == 0 && i + 1 < argc) {
            *config = argv[++i];
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            doctor_usage(stdout);
            return -1;
        } else {
            fprintf(stderr, "sandboxd doctor: %s '%s'\n",
                    a[0] == '-' ? "unknown option" : "unexpected argument", a);
            doctor_usage(stderr);
            return -2;
        }
    }
    return json;
}

int sbx_cmd_doctor(int argc, char **argv)
{
    const char *config = NULL;
    int json = parse_doctor_opts(argc, argv, &config);
    if (json < 0)
        return json == -1 ? 0 : 2;

    struct doctor d = {0};
    sbx_err e = {0};
    char msg[600];
    if (config && !(d.envs = sbx_doctor_environments(config, &e))) {
        fprintf(stderr, "sandboxd doctor: %s\n", sbx_err_format(&e, msg, sizeof(msg)));
        return 2;
    }
    if (sbx_host_probe(&d.probe, &e) < 0 || sbx_cg_host_detect(false, &d.cg, &e) < 0 ||
        sbx_steps_try(&d.probe, &d.cg, &d.steps, &e) < 0) {
        fprintf(stderr, "sandboxd doctor: %s\n", sbx_err_format(&e, msg, sizeof(msg)));
        json_decref(d.envs);
        return 1;
    }
    sbx_isolation_plan_make(&d.probe, &d.cg, &d.plan);
    sbx_steps_to_plan(&d.steps, &d.plan);
    int rc = 0;
    wsq_probe(&d.wsq);
    if (json) {
        rc = print_json(&d);
    } else {
        text_host(&d);
        text_steps(&d.steps);
        text_wsq(&d.wsq);
        text_plan(&d.plan);
        if (d.envs)
            sbx_doctor_environments_text(d.envs);
    }
    json_decref(d.envs);
    if (rc < 0)
        return 1;
    fflush(stdout);
    return d.plan.full ? 0 : 1;
}
