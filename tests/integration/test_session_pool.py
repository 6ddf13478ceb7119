"""Live sessions' holders served from the warm pool (exec/pool.h
sbx_pool_take_holder, runtime/sessions.c): a ready sandbox pooled for any
clone gets the session's clone attached (its workspace idmapped), the
session's limits and egress policy bound, and init holds the session instead
of running a command. Checked against a daemon without the pool, same
requests, same lab (netlab: no packet leaves the machine):

- a session is served from the pool (counted, logged, in /metrics);
- its workspace is the clone's on disk (what it writes is stored with the
  clone's host ids, uid 10001 inside);
- its cgroup's limits and each task's own cgroup with the CPU quota, as cold
  (also when the sandbox taken was built for tasks, with other limits);
- its egress judges as cold, at the start and after POST /runtime/network;
- its end frees its sandbox (cgroup, processes), which is never served
  again, and a later session sees nothing of it;
- the pool's sandboxes and the sessions they serve stay within
  sandbox.total_pids.

Each daemon has a cgroup parent of its own (sbxsp*-PID, removed at the
end), so the cgroups looked at are only its own."""
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import netlab  # noqa: E402
from netlab import DAEMON, DNS, INTERNAL, METADATA, PUBLIC  # noqa: E402
from sbxtest import Suite, check, own_cgroups, rmdir_cgroup, wait_for  # noqa: E402

S = Suite("session_pool")
lab = netlab.Lab().__enter__()
TMP = tempfile.mkdtemp(prefix="sbx-sesspool-")
os.chmod(TMP, 0o755)
TOKEN = "sesspool-" + "0123456789abcdef0123456"
ALL = own_cgroups()
PARENTS = []

TARGETS = ["%s,80" % PUBLIC, "%s,5432" % INTERNAL, "%s,80" % METADATA, "%s,80" % DAEMON,
           "public.test,443", "dns:www.public.test,0", "dns:private.test,0", "dns:nosuch.test,0"]


class Daemon(netlab.LabDaemon):
    """sandboxd serve in the lab (--net proxy), on a unix socket, its
    sandboxes beneath a cgroup parent of its own."""

    def __init__(self, name, pool_yaml, total_pids=0):
        self.parent = "sbxsp%s-%d" % (name, os.getpid())
        PARENTS.append(self.parent)
        super().__init__(lab, os.path.join(TMP, name), TOKEN,
                         "sandbox:\n  workspace_quota: 16m\n  cpu_limit: 0.5\n"
                         "  cgroup_parent: %s\n  total_memory: 0\n  total_cpu: 0\n"
                         "  total_pids: %d\nnetwork:\n  dns:\n    upstream: [\"%s\"]\n%s"
                         % (self.parent, total_pids, DNS, pool_yaml), args=())

    def req(self, method, path, body=None, clone="c1", raw=False):
        return self.request(method, path, body, {"X-Tenant-Code": "sp", "X-Clone-Id": clone},
                            raw=raw)

    def pool(self):
        st, b = self.req("GET", "/runtime/status")
        check(st == 200 and "pool" in b, "status has pool", b)
        return b["pool"]

    def wait_ready(self, n=1, timeout=30):
        deadline = time.monotonic() + timeout
        while self.pool()["idle"] < n or self.pool()["building"]:
            check(time.monotonic() < deadline, "%d pooled sandboxes ready" % n, self.pool())
            time.sleep(0.05)

    def start(self, clone, name="s"):
        st, b = self.req("POST", "/runtime/start", {"sessionID": name}, clone=clone)
        check(st == 200, "session %s of %s started" % (name, clone), (st, b))
        return b["status"]["workspace"]

    def stop_session(self, clone, name="s"):
        st, b = self.req("POST", "/runtime/stop", {"sessionID": name}, clone=clone)
        check(st == 200, "session %s of %s stopped" % (name, clone), (st, b))

    def exec(self, clone, command, name="s", network=None):
        body = {"sessionID": name, "command": command, "timeoutSeconds": 40}
        st, b = self.req("POST", "/runtime/exec", body, clone=clone)
        check(st == 200 and b.get("exitCode") == 0, "ran in session %s of %s" % (name, clone),
              (st, b))
        return b["stdout"]

    def cgname(self, clone, name="s"):
        """The session's sandbox (its cgroup's name), from the log's last
        start of it (the clone's id is in its workspace's path, not the line)."""
        found = re.findall(r"session started tenant=sp session=%s sandbox=(\S+)" % name,
                           self.output())
        check(found, "the session's sandbox in the log", self.output()[-2000:])
        return found[-1]

    def cg(self, ctrl, cgname=""):
        return os.path.join(ALL[ctrl], self.parent, cgname)



def read(path, name):
    with open(os.path.join(path, name)) as f:
        return f.read().strip()


def children(path):
    return sorted(e for e in os.listdir(path) if os.path.isdir(os.path.join(path, e)))


def probe(d, clone):
    out = d.exec(clone, ["python3", "-c", netlab.CONNECT_PROBE] + TARGETS)
    return {arg: res for arg, (res, _) in netlab.probe_results(out).items()}


POOL = Daemon("pool", "pool:\n  max_idle: 2\n  sessions: 2\n  idle_timeout: 120s\n")
COLD = Daemon("cold", "pool:\n  enabled: false\n")


def pooled_start(clone, name="s"):
    """A session of POOL served from the pool (a first one of its
    description, a miss, is started first when none is ready)."""
    if not POOL.pool()["idle"]:
        POOL.start("warm-" + clone, name)
        POOL.stop_session("warm-" + clone, name)
    POOL.wait_ready()
    before = POOL.pool()
    ws = POOL.start(clone, name)
    after = POOL.pool()
    check(after["sessionHits"] == before["sessionHits"] + 1, "served from the pool",
          (before, after))
    return ws


@S.case
def a_session_is_served_from_the_pool_and_counted():
    p0 = POOL.pool()
    POOL.start("first")
    p1 = POOL.pool()
    check(p1["sessionMisses"] == p0["sessionMisses"] + 1, "the first is a miss", (p0, p1))
    pooled_start("second")
    check(re.search(r"pool: hit \(any clone\) \(session\) for=session-\S+ sandbox=\S+",
                    POOL.output()), "the log says so", POOL.output()[-2000:])
    st, m = POOL.req("GET", "/metrics", raw=True)
    check(st == 200 and 'sandbox_pool_sessions_total{result="hit"}' in m,
          "and /metrics", m[-2000:] if isinstance(m, str) else m)
    p2 = POOL.pool()
    check(p2["hits"] == p0["hits"] and p2["misses"] == p0["misses"],
          "tasks' counts untouched", (p0, p2))
    check(COLD.pool()["sessionHits"] == 0, "never from a daemon without the pool", COLD.pool())
    for c in ("first", "second"):
        POOL.stop_session(c)


def session_facts(d, clone, ws):
    """What a session looks like from inside and from the host."""
    inside = d.exec(clone, ["sh", "-c", "id -u; id -g; echo hi > /workspace/made; "
                            "stat -c '%u %g' /workspace/made"]).split()
    made, root = os.stat(os.path.join(ws, "made")), os.stat(ws)
    cg = d.cgname(clone)
    mem, pids, cpu = d.cg("memory", cg), d.cg("pids", cg), d.cg("cpu", cg)
    facts = {"inside": inside,
             "on disk: the clone's runner owns what it wrote":
                 (made.st_uid, made.st_gid) == (root.st_uid, root.st_gid),
             "memory": read(mem, "memory.limit_in_bytes"),
             "pids": read(pids, "pids.max"),
             "cpu quota": read(cpu, "cpu.cfs_quota_us")}
    # a task of it: its own cgroup below the session's, with the session's CPU
    st, t = d.req("POST", "/runtime/tasks", {"sessionID": "s", "command": ["sleep", "3"]},
                  clone=clone)
    check(st == 202, "a task queued", (st, t))
    check(wait_for(lambda: len(children(cpu)) == 1), "a task cgroup below the session's",
          children(cpu))
    kid = os.path.join(cpu, children(cpu)[0])
    facts["task cgroup"] = (children(cpu)[0].startswith("task-"),
                            read(kid, "cpu.cfs_quota_us"), read(kid, "cpu.cfs_period_us"))
    check(wait_for(lambda: not children(cpu)), "gone at the task's end", children(cpu))
    return facts


@S.case
def a_pooled_session_is_the_same_as_a_cold_one():
    ws = pooled_start("eq")
    pooled = session_facts(POOL, "eq", ws)
    cold = session_facts(COLD, "eq", COLD.start("eq"))
    print("  pooled %s\n  cold   %s" % (pooled, cold))
    check(pooled["inside"] == ["10001", "10001", "10001", "10001"], "uid 10001 inside", pooled)
    check(pooled == cold, "the same from the pool and cold", (pooled, cold))
    check(pooled["on disk: the clone's runner owns what it wrote"], "stored as the clone's", pooled)
    check(pooled["cpu quota"] == "-1" and pooled["task cgroup"][0] and
          pooled["task cgroup"][1] == str(int(int(pooled["task cgroup"][2]) / 2)),
          "no quota on the session's own, 0.5 CPU on its task's", pooled)
    POOL.stop_session("eq")
    COLD.stop_session("eq")


@S.case
def its_egress_judges_as_cold():
    pooled_start("net")
    COLD.start("net")
    for step in ("at the start", "after POST /runtime/network"):
        got = {d: probe(d, "net") for d in (POOL, COLD)}
        print("  %s: %s" % (step, got[POOL]))
        check(got[POOL] == got[COLD], "the same verdicts %s" % step, got)
        if step == "at the start":
            check(got[POOL]["%s,80" % PUBLIC].startswith("ok"), "the public server reached",
                  got[POOL])
            check(not got[POOL]["%s,80" % METADATA].startswith("ok"), "metadata refused",
                  got[POOL])
            for d in (POOL, COLD):
                st, b = d.req("POST", "/runtime/network", {"sessionID": "s", "deny": [PUBLIC]},
                              clone="net")
                check(st == 200, "the session's rules changed", (st, b))
    check(not got[POOL]["%s,80" % PUBLIC].startswith("ok"), "now denied", got[POOL])
    POOL.stop_session("net")
    COLD.stop_session("net")


@S.case
def a_sandbox_built_for_tasks_takes_the_sessions_limits():
    # Sessions and plain tasks of a clone share a description (the spec but
    # the command and the limits): a daemon whose first take was a task's
    # builds its pooled sandboxes with the task's 0.5 CPU on their own
    # cgroup; a session that takes one has no quota there (its tasks' own
    # cgroups have it), and its memory and process limits are the session's.
    d = Daemon("mix", "pool:\n  max_idle: 2\n  idle_timeout: 120s\n")
    try:
        for i in range(2):
            st, b = d.req("POST", "/runtime/exec", {"command": ["true"]}, clone="t%d" % i)
            check(st == 200 and b["exitCode"] == 0, "a task", (st, b))
        d.wait_ready(2)
        built = [n for n in children(d.cg("cpu")) if "-pool-" in n]
        check(built and all(n.startswith("task-") and
                            read(d.cg("cpu", n), "cpu.cfs_quota_us") == "50000" for n in built),
              "ready sandboxes built for tasks, with the task's quota", built)
        before = d.pool()
        d.start("ts")
        check(d.pool()["sessionHits"] == before["sessionHits"] + 1, "served from the pool",
              (before, d.pool()))
        name = d.cgname("ts")
        check(name in built, "a sandbox built for tasks", (name, built))
        check(read(d.cg("cpu", name), "cpu.cfs_quota_us") == "-1",
              "the session's own cgroup has no CPU quota", read(d.cg("cpu", name),
                                                                "cpu.cfs_quota_us"))
        cold = session_facts(COLD, "ts", COLD.start("ts"))
        got = session_facts(d, "ts", d.start("ts"))
        check(got == cold, "the same as a cold session", (got, cold))
        d.stop_session("ts")
        COLD.stop_session("ts")
    finally:
        check(d.stop(), "the daemon stops cleanly", d.output()[-3000:])


@S.case
def a_session_end_frees_its_sandbox_which_is_never_served_again():
    pooled_start("x1")
    name = POOL.cgname("x1")
    POOL.exec("x1", ["sh", "-c", "echo secret > /tmp/mark; echo mine > /workspace/x1file; "
                     "sleep 300 > /dev/null 2>&1 &"])
    procs = read(POOL.cg("memory", name), "cgroup.procs").split()
    check(len(procs) >= 2, "init and the background sleep in its cgroup", procs)
    POOL.stop_session("x1")
    check(wait_for(lambda: not any(os.path.exists(POOL.cg(c, name)) for c in ("memory", "pids",
                                                                          "cpu"))),
          "its cgroups are gone", name)
    check(all(not os.path.exists("/proc/%s" % p) for p in procs), "its processes are gone", procs)
    seen = set()
    for clone in ("x2", "x1"):
        pooled_start(clone)
        other = POOL.cgname(clone)
        check(other != name and other not in seen, "another sandbox", (name, other))
        seen.add(other)
        out = POOL.exec(clone, ["sh", "-c", "cat /tmp/mark 2>&1; ls /workspace; "
                                "ps -eo comm= | grep -c sleep || true"])
        check("secret" not in out, "nothing of the ended session's /tmp", out)
        check(("x1file" in out) == (clone == "x1"), "only the clone's own workspace", out)
        check(out.strip().splitlines()[-1] == "0", "none of its processes", out)
        POOL.stop_session(clone)
    served = re.findall(r"pool: hit .* sandbox=%s\n" % re.escape(name), POOL.output())
    check(len(served) == 1, "served once, never again", served)


@S.case
def sessions_stopped_while_being_attached_leave_nothing():
    # 12 starts at once, each stopped at once: a stop may come while its
    # pooled sandbox is being attached (the sandbox then goes back to the
    # pool untouched, or is discarded). Afterwards only the pool's own
    # sandboxes are left beneath the parent, and it still serves.
    import threading
    POOL.wait_ready(2)
    got = []
    ts = [threading.Thread(target=lambda i=i: got.append(
        POOL.req("POST", "/runtime/start", {"sessionID": "g"}, clone="g%d" % i)))
        for i in range(12)]
    for t in ts:
        t.start()
    time.sleep(0.002)
    for i in range(12):
        POOL.req("POST", "/runtime/stop", {"sessionID": "g"}, clone="g%d" % i)
    for t in ts:
        t.join()
    for st, b in got:
        check(st == 200 or (st == 409 and "before it was ready" in b["error"]["message"]),
              "a start answers 200, or 409 when stopped first", (st, b))
    print("  starts stopped before they were ready: %d" % sum(st == 409 for st, _ in got))
    for i in range(12):
        POOL.req("POST", "/runtime/stop", {"sessionID": "g"}, clone="g%d" % i)

    def only_the_pools():
        p = POOL.pool()
        return all(len(children(POOL.cg(c))) == p["idle"] + p["building"]
                   for c in ("memory", "pids", "cpu"))
    check(wait_for(only_the_pools), "only the pool's sandboxes left",
          (POOL.pool(), children(POOL.cg("memory"))))
    pooled_start("g-after")
    POOL.stop_session("g-after")


@S.case
def pooled_sessions_stay_within_total_pids():
    # Each holder and each ready sandbox is a process beneath the parent:
    # the pool's and the sessions' together never pass the cap.
    cap = 10
    d = Daemon("cap", "pool:\n  max_idle: 2\n  sessions: 3\n  idle_timeout: 120s\n",
               total_pids=cap)
    try:
        ok, refused = [], []
        for i in range(14):
            if i == 1:
                d.wait_ready()
            st, b = d.req("POST", "/runtime/start", {"sessionID": "s"}, clone="p%d" % i)
            (ok if st == 200 else refused).append((i, st, b))
            cur = int(read(d.cg("pids"), "pids.current"))
            check(cur <= cap, "pids.current within the cap", cur)
        hits = d.pool()["sessionHits"]
        print("  sessions started %d (%d from the pool), refused %d"
              % (len(ok), hits, len(refused)))
        check(ok and refused and hits > 0, "some from the pool, some refused", (ok, refused))
        for i, st, b in refused:
            check(st >= 400 and b.get("error", {}).get("message"), "a JSON error", (st, b))
        for i, _, _ in ok:
            d.req("POST", "/runtime/stop", {"sessionID": "s"}, clone="p%d" % i)
    finally:
        check(d.stop(), "the capped daemon stops cleanly", d.output()[-3000:])


@S.case
def both_daemons_stop_cleanly_and_leave_nothing():
    for d in (POOL, COLD):
        check(d.stop(), "exit 0 at SIGTERM, no sanitizer report", d.output()[-3000:])
        for c in ("memory", "pids", "cpu"):
            left = children(d.cg(c)) if os.path.isdir(d.cg(c)) else []
            check(not left, "nothing left beneath %s/%s" % (c, d.parent), left)


POOL.stop()
COLD.stop()
for parent in PARENTS:
    for base in ALL.values():
        rmdir_cgroup(os.path.join(base, parent))
lab.__exit__(None, None, None)
shutil.rmtree(TMP, ignore_errors=True)
S.finish()
