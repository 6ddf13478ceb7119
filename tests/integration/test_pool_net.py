"""The warm pool serving proxy-network tasks (exec/pool.h, runtime/egress.c),
inside netlab's isolated network (no packet leaves the machine): a pooled
sandbox is built with its egress ready (network namespace, nftables rules,
listeners, SYN queue) under a placeholder policy that denies everything, and
the task's own policy (allow and deny lists, port rules, default, its flows'
tenant) is bound when it is taken, before its command runs.

Checked, each against a daemon without the pool, same request, same lab: what
connects and what is refused (by address, by name, by port, the deny-list,
the daemon's own address), DNS through the egress, the proxies, a task's own
deny rule after a task that allowed more (nothing of an earlier binding
leaks), the audit records naming the task's tenant, the connection limit; and
that these tasks were served from the pool.

Rules by address (IPv4 and IPv6 addresses and CIDRs, allowed and denied):
every pooled sandbox is built with the placeholder's nftables address sets,
and a task whose sets differ has them made its own (one transaction, by a
helper in the sandbox's namespace) before its command is sent: such tasks
are hits, the sets read from inside the sandbox while the task runs are a
cold sandbox's, the task's first connection already sees them, another
tenant's earlier rules are never there, and a swap that fails (the
sandbox's table removed beforehand) fails closed: the sandbox is discarded
and the task built cold, with the same result."""
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import netlab  # noqa: E402
from netlab import (DAEMON, DNS, INTERNAL, INTERNAL_172, METADATA, PUBLIC,  # noqa: E402
                    PUBLIC6, ULA)
from sbxtest import Suite, check  # noqa: E402

S = Suite("pool_net")
lab = netlab.Lab().__enter__()
TMP = tempfile.mkdtemp(prefix="sbx-pool-net-")
TOKEN = "poolnet-" + "0123456789abcdef0123456789ab"


class Daemon(netlab.LabDaemon):
    def __init__(self, name, pool):
        super().__init__(lab, os.path.join(TMP, name), TOKEN,
                         "network:\n  limits:\n    max_connections: 2\n"
                         "  dns:\n    upstream: [\"%s\"]\n"
                         "pool:\n  enabled: %s\n  max_idle: 3\n  idle_timeout: 120s\n"
                         % (DNS, "true" if pool else "false"))

    def req(self, method, path, body=None, tenant="pn", clone="c1"):
        return self.request(method, path, body, {"X-Tenant-Code": tenant, "X-Clone-Id": clone})

    def pool(self):
        st, b = self.req("GET", "/runtime/status")
        check(st == 200 and "pool" in b, "status has pool", b)
        return b["pool"]


POOL = Daemon("pool", True)
COLD = Daemon("cold", False)


def probe(d, targets, network=None, tenant="pn", clone="c1", extra=None):
    body = {"command": ["python3", "-c", netlab.CONNECT_PROBE] + targets, "timeoutSeconds": 40}
    if network is not None:
        body["network"] = network
    body.update(extra or {})
    st, b = d.req("POST", "/runtime/exec", body, tenant, clone)
    check(st == 200 and b.get("exitCode") == 0, "the probe ran", (st, b))
    # the lab's answer names the server and the address it was reached at; the
    # time each took is left out, pool and cold are compared by what they got
    return {arg: res for arg, (res, _) in netlab.probe_results(b["stdout"]).items()}, b


def wait_idle(d, timeout=30):
    deadline = time.monotonic() + timeout
    while d.pool()["idle"] < 1 or d.pool()["building"]:
        check(time.monotonic() < deadline, "a pooled sandbox ready", d.pool())
        time.sleep(0.05)


def pooled_probe(targets, network=None, tenant="pn", clone="c1", extra=None):
    """Run from the pool (whatever its rules: rules by address too are bound
    at take)."""
    wait_idle(POOL)
    before = POOL.pool()["hits"]
    got, b = probe(POOL, targets, network, tenant, clone, extra)
    check(POOL.pool()["hits"] == before + 1, "served from the pool", POOL.pool())
    return got, b


def arrived(mark):
    """What reached the lab's servers: (kind, server address, port) and DNS names."""
    return sorted(set((e.get("ev"), e.get("local") or e.get("name"), e.get("lport"), e.get("type"))
                      for e in lab.arrivals(since=mark)))


TARGETS = ["%s,80" % PUBLIC, "%s,5432" % INTERNAL, "%s,80" % METADATA, "%s,80" % DAEMON,
           "public.test,443", "dns:www.public.test,0", "dns:private.test,0", "dns:nosuch.test,0"]

POLICIES = [
    ("the operator's default", None),
    ("a deny rule on the public server", {"deny": [PUBLIC]}),
    ("default deny, one name allowed", {"default": "deny", "allow": ["public.test"]}),
    ("default deny, one port allowed", {"default": "deny", "allow": [":443"]}),
    ("an internal address allowed", {"allow": [INTERNAL + ":5432"]}),
    ("a name denied", {"deny": ["www.public.test", "public.test"]}),
]


@S.case
def proxy_tasks_are_served_from_the_pool_as_cold():
    probe(POOL, ["%s,80" % PUBLIC])  # the clone's first task: a miss, refills
    for what, net in POLICIES:
        mark = lab.mark()
        got1, b1 = pooled_probe(TARGETS, net)
        saw1 = arrived(mark)
        mark = lab.mark()
        got2, b2 = probe(COLD, TARGETS, net)
        saw2 = arrived(mark)
        check(got1 == got2, what + ": the same from the pool and cold", (got1, got2))
        check(saw1 == saw2, what + ": as many connections reached the lab", (saw1, saw2))
        if net is None:
            check(got1["%s,80" % PUBLIC].startswith("ok"), "the public server answers", got1)
        check(not got1["%s,80" % METADATA].startswith("ok") and
              not got1["%s,80" % DAEMON].startswith("ok"),
              what + ": metadata and the daemon's own address refused", got1)


@S.case
def an_earlier_binding_leaves_nothing_behind():
    # A task allowed the internal server; the next, from the pool, denies the
    # public one: neither rule crosses.
    probe(POOL, ["%s,80" % PUBLIC], clone="c2")
    got, _ = pooled_probe(["%s,5432" % INTERNAL], {"allow": [INTERNAL + ":5432"]}, clone="c2")
    check(got["%s,5432" % INTERNAL].startswith("ok"), "the first task reached its server", got)
    mark = lab.mark()
    got, _ = pooled_probe(["%s,5432" % INTERNAL, "%s,80" % PUBLIC], {"deny": [PUBLIC]},
                          clone="c2")
    check(not got["%s,5432" % INTERNAL].startswith("ok") and
          not got["%s,80" % PUBLIC].startswith("ok"),
          "the next task has its own rules only", got)
    check(not lab.arrivals(since=mark), "nothing reached the lab", lab.arrivals(since=mark))


def audit(d, task_id):
    db = sqlite3.connect("file:%s?mode=ro" % os.path.join(d.dir, "state", "sandboxd.db"),
                         uri=True, timeout=10)
    try:
        return [(a, json.loads(x)) for a, x in db.execute(
            "SELECT action, detail FROM audit WHERE target = ? AND action LIKE 'egress%'",
            (task_id,))]
    finally:
        db.close()


@S.case
def flows_belong_to_the_task_that_took_the_sandbox():
    probe(POOL, ["%s,80" % PUBLIC], tenant="tA", clone="ca")
    _, b = pooled_probe(["%s,80" % PUBLIC, "dns:private.test,0", "www.public.test,80"],
                        {"deny": ["www.public.test"]}, tenant="tA", clone="ca")
    tid = b.get("taskId") or b.get("id")
    check(tid, "the task has an id", b)
    deadline = time.monotonic() + 10
    while len(audit(POOL, tid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    recs = audit(POOL, tid)
    acts = set(a for a, _ in recs)
    check(acts == {"egress_denied", "egress_flow"}, "flows and denials audited", recs)
    check(all(x["tenantCode"] == "tA" and x["cloneId"] == "ca" and x["taskId"] == tid
              for _, x in recs), "under the task's tenant, clone and id", recs)
    check("pool: a connection before any task" not in POOL.output(), "no flow before a task")


@S.case
def a_new_clone_of_another_tenant_gets_its_own_policy_and_audit():
    # The sandbox is pooled for any clone: built from tenant tP's task, taken
    # by the first task of a clone of tenant tQ never seen before. What tQ's
    # task may reach and whose its flows are must be tQ's alone.
    probe(POOL, ["%s,80" % PUBLIC, "www.public.test,80"], tenant="tP", clone="p1")
    wait_idle(POOL)
    p0 = POOL.pool()
    targets = ["%s,80" % PUBLIC, "www.public.test,80", "dns:private.test,0"]
    net = {"deny": ["www.public.test"]}
    got, b = probe(POOL, targets, net, tenant="tQ", clone="q1")
    p1 = POOL.pool()
    check(p1["anyCloneHits"] == p0["anyCloneHits"] + 1 and p1["hits"] == p0["hits"] + 1,
          "the new clone's first task took a sandbox pooled for any clone", (p0, p1))
    cold, _ = probe(COLD, targets, net, tenant="tQ", clone="q1")
    check(got == cold, "the same as cold", (got, cold))
    check(not got["www.public.test,80"].startswith("ok"), "its own deny rule holds", got)
    tid = b.get("taskId") or b.get("id")
    deadline = time.monotonic() + 10
    while len(audit(POOL, tid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    recs = audit(POOL, tid)
    check(set(a for a, _ in recs) == {"egress_denied", "egress_flow"}, "flows audited", recs)
    check(all(x["tenantCode"] == "tQ" and x["cloneId"] == "q1" and x["taskId"] == tid
              for _, x in recs), "under the taker's tenant, clone and id", recs)


@S.case
def a_proxy_task_whose_attach_fails_is_built_cold_with_its_own_rules():
    # The daemon in the lab's network and a mount namespace of its own, its
    # state dir an overlayfs (it cannot be idmapped): a new clone's proxy task
    # takes a sandbox pooled for any clone, its attach fails, and it is built
    # cold later, from the loop, with the rules its request had (the request's
    # own copy of them is long gone by then).
    ovl = os.path.join(TMP, "ovl")
    for x in ("lower", "upper", "work", "state"):
        os.makedirs(os.path.join(ovl, x))
    cfg = os.path.join(ovl, "config.yaml")
    with open(cfg, "w") as f:
        f.write("sandbox:\n  workspace_quota_mode: monitor\n"
                "network:\n  dns:\n    upstream: [\"%s\"]\n"
                "pool:\n  max_idle: 2\n  idle_timeout: 120s\n" % DNS)
    d = Daemon.__new__(Daemon)
    d.dir, d.token = ovl, TOKEN
    d.sock = os.path.join(ovl, "api.sock")
    d.log = open(os.path.join(ovl, "log"), "w+")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CLAW_") and not k.startswith("SANDBOX_")}
    d.proc = subprocess.Popen(
        lab.nsenter("d") + ["unshare", "-m", "--propagation", "private", "sh", "-c",
                            'mount -t overlay overlay -o "lowerdir=$1/lower,upperdir=$1/upper,'
                            'workdir=$1/work" "$1/state" && shift && exec "$@"', "sh", ovl] +
        lab.sandboxd_argv("serve", "--listen", "unix:" + d.sock, "--state-dir",
                          os.path.join(ovl, "state"), "--token", TOKEN, "--config", cfg,
                          "--net", "proxy", "--total-memory", "0", "--total-cpu", "0",
                          "--total-pids", "0")[len(lab.nsenter("d")):],
        env=env, stdout=d.log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(d.sock):
            check(d.proc.poll() is None and time.monotonic() < deadline, "serve started",
                  d.output())
            time.sleep(0.05)
        targets = ["%s,80" % PUBLIC, "www.public.test,80", "dns:private.test,0"]
        net = {"deny": ["www.public.test"]}
        probe(d, ["%s,80" % PUBLIC], net, clone="o1")
        wait_idle(d)
        for i in range(3):
            p0 = d.pool()
            got, b = probe(d, targets, net, clone="o%d" % (i + 2))
            cold, _ = probe(COLD, targets, net, clone="o%d" % (i + 2))
            check(got == cold, "built cold after the failed attach: the same as cold",
                  (got, cold, d.output()[-2000:]))
            check(d.pool()["anyCloneHits"] == p0["anyCloneHits"], "not an any-clone hit",
                  (p0, d.pool()))
        check("cannot be idmapped" in d.output(), "the attach failed", d.output()[-2000:])
    finally:
        check(d.stop(), "exit 0 at SIGTERM, no sanitizer report", d.output()[-3000:])


@S.case
def the_connection_limit_holds_in_a_pooled_sandbox():
    # max_connections 2: three held connections at once, the third refused
    hold = r'''
import socket, time
s = []
res = []
for i in range(3):
    try:
        c = socket.create_connection(("%s", 80), timeout=5)
        c.sendall(b"GET /big/1 HTTP/1.1\r\nHost: lab\r\n\r\n")
        time.sleep(0.3)
        c.settimeout(2)
        res.append("ok" if c.recv(10) else "closed")
        s.append(c)
    except OSError as e:
        res.append("err")
print(" ".join(res))
''' % PUBLIC
    results = []
    for d in (POOL, COLD):
        body = {"command": ["python3", "-c", hold], "timeoutSeconds": 30}
        if d is POOL:
            probe(POOL, ["%s,80" % PUBLIC], clone="cl")
            wait_idle(POOL)
            before = POOL.pool()["hits"]
        st, b = d.req("POST", "/runtime/exec", body, clone="cl")
        check(st == 200, "ran", (st, b))
        if d is POOL:
            check(POOL.pool()["hits"] == before + 1, "served from the pool", POOL.pool())
        results.append(b["stdout"].strip())
    check(results[0] == results[1] == "ok ok err", "the same from the pool and cold", results)


def sandbox_pid(name):
    """A process of the sandbox whose cgroup is `name` (its init)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cgroup" % pid) as f:
                if any(line.rstrip("\n").endswith("/" + name) for line in f):
                    return int(pid)
        except OSError:
            continue
    return None


def nft_sets(pid):
    """The address sets of the sandbox's nftables table, read from the host."""
    p = subprocess.run(["nsenter", "-t", str(pid), "-n", "nft", "-j", "list", "table", "inet",
                        "sandbox"], capture_output=True, text=True, timeout=20)
    check(p.returncode == 0, "the sandbox's table listed", p.stderr)
    sets = {}
    for item in json.loads(p.stdout)["nftables"]:
        if "set" in item:
            elems = item["set"].get("elem", [])
            sets[item["set"]["name"]] = sorted(json.dumps(e, sort_keys=True) for e in elems)
    return sets


HOLD = netlab.CONNECT_PROBE + "\nimport os, time\ntime.sleep(float(os.environ['HOLD']))\n"


def probe_and_sets(d, targets, net, tenant, clone, pooled):
    """The probe's results and the sandbox's address sets, read while it runs."""
    mark = len(d.output())
    box = {}
    body = {"command": ["python3", "-c", HOLD] + targets, "timeoutSeconds": 60,
            "env": {"HOLD": "2"}}
    if net is not None:
        body["network"] = net

    def go():
        box["r"] = d.req("POST", "/runtime/exec", body, tenant, clone)
    th = threading.Thread(target=go)
    th.start()
    pat = (r"pool: hit(?: \(any clone\))? for=\S+ sandbox=(\S+)" if pooled
           else r"task started id=\S+ tenant=\S+ session=\S+ sandbox=(\S+)")
    deadline = time.monotonic() + 30
    m = None
    while not m and time.monotonic() < deadline:
        m = re.search(pat, d.output()[mark:])
        time.sleep(0.05)
    check(m, "the sandbox's name in the log", d.output()[mark:])
    pid = None
    while pid is None and time.monotonic() < deadline:
        pid = sandbox_pid(m.group(1))
        time.sleep(0.05)
    check(pid, "the sandbox's init found", m.group(1))
    sets = nft_sets(pid)
    th.join(60)
    st, b = box["r"]
    check(st == 200 and b.get("exitCode") == 0, "the probe ran", (st, b))
    got = {arg: res for arg, (res, _) in netlab.probe_results(b["stdout"]).items()}
    return got, sets


ADDR_TARGETS = ["%s,5432" % INTERNAL, "%s,80" % INTERNAL_172, "%s,80" % PUBLIC,
                "%s,80" % METADATA]
ADDR_POLICIES = [
    ("an internal address allowed (IPv4)", {"allow": [INTERNAL + ":5432"]}),
    ("an internal CIDR allowed (IPv4)", {"allow": ["172.16.0.0/12"]}),
    ("a public address denied (IPv4)", {"deny": [PUBLIC]}),
    ("a public CIDR denied (IPv4), default deny", {"default": "deny", "deny": ["203.0.113.0/24"],
                                                   "allow": [INTERNAL]}),
]
if lab.ipv6:
    ADDR_TARGETS += ["%s,80" % PUBLIC6, "%s,80" % ULA]
    ADDR_POLICIES += [
        ("an internal address allowed (IPv6)", {"allow": [ULA]}),
        ("a public address denied (IPv6)", {"deny": [PUBLIC6]}),
        ("a public CIDR denied (IPv6), an internal one allowed",
         {"deny": ["2001:db8::/32"], "allow": ["fd00::/64"]}),
    ]


@S.case
def the_lab_has_ipv6():
    check(lab.ipv6, "IPv6 in the lab (this machine has it)")


@S.case
def rules_by_address_are_bound_at_take_as_cold():
    probe(POOL, ["%s,80" % PUBLIC], tenant="ad", clone="a0")
    for what, net in ADDR_POLICIES:
        wait_idle(POOL)
        p0 = POOL.pool()
        mark = lab.mark()
        got1, sets1 = probe_and_sets(POOL, ADDR_TARGETS, net, "ad", "a1", True)
        saw1 = arrived(mark)
        p1 = POOL.pool()
        check(p1["hits"] == p0["hits"] + 1 and p1["misses"] == p0["misses"],
              what + ": a hit", (p0, p1))
        mark = lab.mark()
        got2, sets2 = probe_and_sets(COLD, ADDR_TARGETS, net, "ad", "a1", False)
        saw2 = arrived(mark)
        check(sets1 == sets2, what + ": the sandbox's address sets are a cold one's",
              (sets1, sets2))
        check(got1 == got2, what + ": the same connections pooled and cold", (got1, got2))
        check(saw1 == saw2, what + ": as many reached the lab", (saw1, saw2))
    # The first connection already sees the task's sets: the placeholder's
    # refuse every internal address at connect().
    got, _ = pooled_probe(["%s,5432" % INTERNAL], {"allow": [INTERNAL + ":5432"]}, "ad", "a2")
    check(got["%s,5432" % INTERNAL].startswith("ok"), "the allowed internal server answers", got)


@S.case
def another_tenants_rules_never_leak_into_a_take():
    probe(POOL, ["%s,80" % PUBLIC], tenant="lA", clone="x0")
    wide = {"allow": [INTERNAL, "172.16.0.0/12"] + ([ULA] if lab.ipv6 else [])}
    got, _ = pooled_probe(ADDR_TARGETS, wide, tenant="lA", clone="x1")
    check(got["%s,5432" % INTERNAL].startswith("ok"), "tenant lA reached its internal server", got)
    for net in (None, {"deny": [PUBLIC]}):
        wait_idle(POOL)
        got1, sets1 = probe_and_sets(POOL, ADDR_TARGETS, net, "lB", "y1", True)
        got2, sets2 = probe_and_sets(COLD, ADDR_TARGETS, net, "lB", "y1", False)
        check(sets1 == sets2, "tenant lB's sets are its own (as cold)", (sets1, sets2))
        check(got1 == got2, "tenant lB's connections as cold", (got1, got2))
        check(not got1["%s,5432" % INTERNAL].startswith("ok") and
              not got1["%s,80" % INTERNAL_172].startswith("ok"),
              "nothing lA allowed is open to lB", got1)


@S.case
def a_failed_swap_of_the_sets_fails_closed():
    probe(POOL, ["%s,80" % PUBLIC], tenant="fc", clone="f0")
    wait_idle(POOL)
    names = set(re.findall(r"sandbox=(task-[^\s-]+-pool-)\d+", POOL.output()))
    check(len(names) == 1, "the pool's sandboxes' names", names)
    prefix = names.pop()
    broken = 0
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/cgroup" % pid) as f:
                mine = any("/" + prefix in line for line in f)
        except (OSError, NotADirectoryError):
            continue
        if mine and subprocess.run(["nsenter", "-t", pid, "-n", "nft", "delete", "table", "inet",
                                    "sandbox"], capture_output=True).returncode == 0:
            broken += 1
    check(broken >= 1, "the idle sandboxes' tables removed", broken)
    p0 = POOL.pool()
    net = {"allow": [INTERNAL + ":5432"], "deny": [PUBLIC]}
    mark = lab.mark()
    got1, b = probe(POOL, ADDR_TARGETS, net, "fc", "f1")
    saw1 = arrived(mark)
    p1 = POOL.pool()
    check(p1["misses"] == p0["misses"] + 1 and p1["hits"] == p0["hits"] and
          p1["discarded"] >= p0["discarded"] + 1,
          "a miss: the sandbox discarded, the task built cold", (p0, p1))
    check("address sets were not made the task's" in POOL.output(), "said in the log",
          POOL.output()[-2000:])
    mark = lab.mark()
    got2, _ = probe(COLD, ADDR_TARGETS, net, "fc", "f1")
    check(got1 == got2 and saw1 == arrived(mark), "the same as cold", (got1, got2))
    check(got1["%s,5432" % INTERNAL].startswith("ok") and
          not got1["%s,80" % PUBLIC].startswith("ok"), "with the task's own rules", got1)


@S.case
def session_tasks_stay_unpooled():
    p0 = POOL.pool()
    st, b = POOL.req("POST", "/runtime/start", {"sessionID": "s1"}, clone="cs")
    check(st == 200, "session started", (st, b))
    st, b = POOL.req("POST", "/runtime/exec", {"sessionID": "s1", "command": ["true"]},
                     clone="cs")
    check(st == 200 and b["exitCode"] == 0, "a session task ran", (st, b))
    p1 = POOL.pool()
    check(p1["hits"] == p0["hits"] and p1["misses"] == p0["misses"],
          "not served from the pool nor counted", (p0, p1))
    POOL.req("POST", "/runtime/stop", {"sessionID": "s1"}, clone="cs")


@S.case
def both_daemons_stop_cleanly():
    check(POOL.stop(), "the pool's daemon: exit 0 at SIGTERM, no sanitizer report",
          POOL.output()[-3000:])
    check(COLD.stop(), "the cold daemon too", COLD.output()[-3000:])


POOL.stop()
COLD.stop()
lab.__exit__(None, None, None)
shutil.rmtree(TMP, ignore_errors=True)
S.finish()
