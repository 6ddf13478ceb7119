"""The warm pool (exec/pool.h): sandboxes built ahead by the spawner for a
clone that ran a task, each taken by one task only. Checked: hits and misses
counted (/runtime/status, /metrics, the log), a pooled sandbox is never
reused (a file a task leaves in /tmp is not there for the next; another pid
namespace), two clones still run under different host uids, a task with
other limits or a network is built as before, pooled tasks give the same
results as cold ones (exit code, streams, stdin, timeout, limits, oom, a
missing command), idle sandboxes are dropped after idle_timeout, and bad
pool settings are refused at start naming the key.

Pooled for any clone (the clone's workspace attached at take time as an
idmapped mount): a clone's first task is a hit, what it writes belongs to
the clone's own host uid on disk and is there for the clone's next cold
task, two clones' live pooled tasks run under different host uids, none of
them a clone's, and on a filesystem that cannot be idmapped (ramfs) the task
is built cold with the same result, that clone pooled per clone after."""
import os
import subprocess
import sys
import re
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sbxtest import SANDBOXD, ServeDaemon, Suite, check, config_file  # noqa: E402

S = Suite("pool")
TOKEN = "pool-" + "0123456789abcdef0123456789ab"
TMP = tempfile.mkdtemp(prefix="sbx-pool-")


class Daemon(ServeDaemon):
    extended_by_default = True
    req_timeout = 30


def config(name, text):
    return config_file(TMP, name, text)


POOL = ("sandbox:\n  network_policy: none\n"
        "pool:\n  enabled: true\n  max_idle: 4\n  idle_timeout: %s\n")
ON = Daemon(os.path.join(TMP, "on"), TOKEN, config=config("on.yaml", POOL % "60s")).start()
COLD = Daemon(os.path.join(TMP, "cold"), TOKEN,
              config=config("cold.yaml", "sandbox:\n  network_policy: none\n"
                                          "pool:\n  enabled: false\n")).start()


def pool_status(d):
    st, b, _ = d.req("GET", "/runtime/status")
    check(st == 200 and "pool" in b, "/runtime/status has pool", b)
    return b["pool"]


def wait_idle(d, n=1, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = pool_status(d)
        if p["idle"] >= n and not p["building"]:  # the one a task needs may be building
            return p
        time.sleep(0.05)
    raise AssertionError("no idle pooled sandbox after %ss: %r" % (timeout, pool_status(d)))


def run(d, body, clone="c1"):
    a = {"X-Tenant-Code": "pool", "X-Clone-Id": clone}
    st, b, _ = d.req("POST", "/runtime/exec", body, headers=a, timeout=60)
    check(st == 200, "exec answers 200", (st, b))
    return b


def hit(d, body, clone="c1"):
    """body run in a pooled sandbox (checked by the hit counter)."""
    wait_idle(d)
    before = pool_status(d)["hits"]
    b = run(d, body, clone)
    check(pool_status(d)["hits"] == before + 1, "served from the pool", (body, pool_status(d)))
    return b


@S.case
def hits_and_misses_are_counted():
    p0 = pool_status(ON)
    check(p0["enabled"] is True and p0["hits"] == 0, "pool on, nothing served yet", p0)
    b = run(ON, {"command": ["true"]}, "hm")
    check(b["exitCode"] == 0, "first task of a clone runs", b)
    p1 = pool_status(ON)
    check(p1["misses"] == p0["misses"] + 1 and p1["hits"] == 0, "its first task is a miss", p1)
    wait_idle(ON)
    b = run(ON, {"command": ["true"]}, "hm")
    p2 = pool_status(ON)
    check(b["exitCode"] == 0 and p2["hits"] == 1, "the next is a hit", p2)
    st, text, _ = ON.req("GET", "/metrics")
    check('sandbox_pool_tasks_total{result="hit"} 1' in text, "/metrics counts the hit",
          [x for x in text.splitlines() if "pool" in x])
    check('sandbox_pool_tasks_total{result="miss"}' in text, "/metrics counts misses")
    log = ON.wait_output(lambda t: "pool: hit" in t)
    check("pool: hit" in log and "pool: miss" in log, "the log says hit and miss")


@S.case
def a_sandbox_is_never_reused():
    run(ON, {"command": ["true"]}, "reuse")
    b1 = hit(ON, {"command": ["/bin/sh", "-c",
                              "echo secret > /tmp/left; readlink /proc/self/ns/pid; echo $$"]},
             "reuse")
    b2 = hit(ON, {"command": ["/bin/sh", "-c",
                              "cat /tmp/left 2>&1; readlink /proc/self/ns/pid; ls /tmp | wc -l"]},
             "reuse")
    check(b1["exitCode"] == 0 and b2["exitCode"] == 0, "both ran", (b1, b2))
    ns1 = b1["stdout"].split()[0]
    lines = b2["stdout"].split("\n")
    check("secret" not in b2["stdout"] and "No such file" in b2["stdout"],
          "task 1's /tmp file is absent in task 2", b2)
    check(ns1 != lines[1], "another pid namespace", (ns1, lines))


@S.case
def clones_keep_their_own_host_uids():
    seen = {}
    for clone in ("u1", "u2"):
        run(ON, {"command": ["true"]}, clone)
        b = hit(ON, {"command": ["/bin/sh", "-c", "echo x > /workspace/f; id -u"]}, clone)
        check(b["exitCode"] == 0 and b["stdout"].strip() == "10001", "runner inside", b)
        seen[clone] = os.stat(os.path.join(ON.state, "workspaces", "pool", clone, "work",
                                           "f")).st_uid
    check(seen["u1"] != seen["u2"], "each clone's file belongs to its own host uid", seen)


@S.case
def other_limits_are_a_hit_and_a_network_is_another_sandbox():
    run(ON, {"command": ["true"]}, "lim")
    wait_idle(ON)
    p0 = pool_status(ON)
    b = run(ON, {"command": ["true"], "memoryMB": 100, "pids": 50, "cpu": 0.5}, "lim")
    p1 = pool_status(ON)
    check(b["exitCode"] == 0 and p1["hits"] == p0["hits"] + 1 and p1["misses"] == p0["misses"],
          "other limits: a hit (they are written at take time)", (p0, p1))
    net = {"command": ["true"], "network": {"policy": "proxy"}}
    b = run(ON, net, "lim")
    p2 = pool_status(ON)
    check(b["exitCode"] == 0 and p2["hits"] == p1["hits"] and p2["misses"] == p1["misses"] + 1,
          "a proxy network: another sandbox (its egress made ahead), a miss", (p1, p2))
    b = hit(ON, net, "lim")
    check(b["exitCode"] == 0, "the next proxy task is a hit", b)


def essentials(b):
    r = b.get("report") or {}
    return (b.get("exitCode"), b.get("status"), b.get("stdout"), b.get("stderr"),
            r.get("outcome"), r.get("oomKilled"), r.get("signal"))


def own_cgroups(pid):
    own = {}
    with open("/proc/%d/cgroup" % pid) as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            for c in ctrls.split(","):
                own[c] = path.rstrip("/")
    return own


LIMIT_FILES = (("memory", ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes",
                           "memory.kmem.tcp.limit_in_bytes")),
               ("pids", ("pids.max",)),
               ("cpu", ("cpu.cfs_quota_us", "cpu.cfs_period_us")))


def limit_files(d, name):
    """What the limit files of this daemon's sandbox cgroup `name` hold (v1)."""
    own = own_cgroups(d.proc.pid)
    out = {}
    for ctrl, files in LIMIT_FILES:
        mounts = [m for m in os.listdir("/sys/fs/cgroup") if ctrl in m.split(",")]
        check(len(mounts) == 1, "one %s hierarchy" % ctrl, mounts)
        dirpath = "/sys/fs/cgroup/%s%s/sandboxd/%s" % (mounts[0], own.get(ctrl, ""), name)
        for fn in files:
            path = os.path.join(dirpath, fn)
            if os.path.exists(path):
                with open(path) as f:
                    out[fn] = f.read().strip()
    return out


def limits_while_running(d, body, clone, pooled):
    """The limit files of the sandbox running body (a task that sleeps)."""
    mark = len(d.output(whole=True))
    box = {}
    th = threading.Thread(target=lambda: box.update(b=run(d, body, clone)))
    th.start()
    pat = (r"pool: hit(?: \(any clone\))? for=\S+ sandbox=(\S+)" if pooled
           else r"task started id=\S+ tenant=\S+ session=\S+ sandbox=(\S+)")
    log = d.wait_output(lambda t: re.search(pat, t[mark:]), timeout=20)
    m = re.search(pat, log[mark:])
    check(m, "the sandbox's name in the log", log[mark:])
    time.sleep(0.3)
    files = limit_files(d, m.group(1))
    th.join(60)
    return files, box.get("b")


@S.case
def limits_written_at_take_are_in_force_as_cold():
    run(ON, {"command": ["true"]}, "lt")
    sleeper = {"command": ["sleep", "2"], "memoryMB": 96, "pids": 33, "cpu": 0.3}
    for lim in (sleeper, dict(sleeper, memoryMB=700, pids=200, cpu=1.5)):
        wait_idle(ON)
        before = pool_status(ON)["hits"]
        f1, b1 = limits_while_running(ON, lim, "lt", True)
        check(pool_status(ON)["hits"] == before + 1, "served from the pool", pool_status(ON))
        f2, b2 = limits_while_running(COLD, lim, "lt", False)
        check(b1["exitCode"] == 0 and b2["exitCode"] == 0, "both ran", (b1, b2))
        check(f1 == f2 and f1.get("pids.max") == str(lim["pids"] + 1) and  # init is one more
              f1.get("memory.limit_in_bytes") == str(lim["memoryMB"] << 20) and
              f1.get("cpu.cfs_quota_us") == str(int(lim["cpu"] * 100000)),
              "the task's limits in its cgroup, as cold", (f1, f2))
    # In force: a pids cap and an OOM at a limit other than the pooled one.
    for name, body in (
            ("pids cap", {"command": ["/bin/sh", "-c",
                                      "for i in $(seq 60); do sleep 5 & done 2>&1 | "
                                      "grep -c 'fork\\|Resource' ; wait"],
                          "pids": 20, "timeoutSeconds": 20}),
            ("oom at 48 MB", {"command": ["python3", "-c",
                                          "b=[]\nwhile True: b.append(bytearray(4<<20))"],
                              "memoryMB": 48, "timeoutSeconds": 30}),
            ("cpu quota", {"command": ["true"], "cpu": 0.25})):
        b1 = hit(ON, body, "lt")
        b2 = run(COLD, body, "lt")
        check(essentials(b1) == essentials(b2) and
              b1["report"]["limits"] == b2["report"]["limits"],
              name + ": the same from the pool and cold (the report's limits too)",
              (essentials(b1), essentials(b2), b1["report"]["limits"], b2["report"]["limits"]))
        if name == "oom at 48 MB":
            check(b1["report"]["outcome"] == "oom" and
                  b1["report"]["limits"]["memoryBytes"] == 48 << 20,
                  "killed at the task's own limit", b1["report"])


CASES = [
    ("exit code and both streams",
     {"command": ["/bin/sh", "-c", "echo out; echo err >&2; exit 7"]}),
    ("stdin relayed", {"command": ["cat"], "stdin": "fed\n"}),
    ("environment and PATH", {"command": ["sh", "-c", "echo $FOO; printenv PATH"],
                              "env": {"FOO": "bar baz"}}),
    ("empty and odd arguments", {"command": ["printf", "[%s]", "", "a b", "\u00e9"]}),
    ("timeout", {"command": ["sleep", "30"], "timeoutSeconds": 1}),
    ("no such command", {"command": ["/no/such/program"]}),
    ("identity inside", {"command": ["/bin/sh", "-c",
                                     "id -u; id -g; hostname; cat /proc/1/comm; pwd"]}),
    ("fds, capabilities, seccomp, id map", {"command": ["/bin/sh", "-c",
     "ls /proc/self/fd; grep -E '^(Cap|NoNewPrivs|Seccomp)' /proc/self/status; "
     "cat /proc/self/uid_map | wc -l; ls /proc/1/fd"]}),
    ("pids limit", {"command": ["/bin/sh", "-c", "for i in $(seq 200); do sleep 5 & done; wait"],
                    "timeoutSeconds": 20}),
    ("oom", {"command": ["python3", "-c", "b=[]\nwhile True: b.append(bytearray(8<<20))"],
             "timeoutSeconds": 30}),
    ("the workspace and binds as seen inside", {"command": ["/bin/sh", "-c",
     "pwd; stat -c '%u %g %a %F' /workspace /run/sandbox /run/sandbox/skill.sock "
     "/opt/sandbox/bin/claw-skill; echo x > w; stat -c '%u %g %s' w; rm w; "
     "touch /run/sandbox/y 2>&1 | sed 's/.*: //'; ls -A /workspace"]}),
]


@S.case
def pooled_tasks_give_the_same_results_as_cold_ones():
    run(ON, {"command": ["true"]}, "same")
    any0 = pool_status(ON)["anyCloneHits"]
    for name, body in CASES:
        b1 = hit(ON, body, "same")
        b2 = run(COLD, body, "same")
        if os.environ.get("POOL_SHOW"):
            print(name, essentials(b1))
        check(essentials(b1) == essentials(b2), name + ": the same from the pool and cold",
              (essentials(b1), essentials(b2)))
    check(pool_status(ON)["anyCloneHits"] == any0 + len(CASES),
          "each from a sandbox pooled for any clone", pool_status(ON))


def ws_dir(d, clone):
    return os.path.join(d.state, "workspaces", "pool", clone, "work")


def host_base(uid_map_line):
    """The host id a sandbox's id 0 is (its /proc/self/uid_map line)."""
    inside, outside, count = uid_map_line.split()
    check(inside == "0" and count == "65536", "one range mapped", uid_map_line)
    return int(outside)


CLONE_REGION = 60000 * 65536  # the clones' ranges: host_id_base + this many ids


@S.case
def a_new_clones_first_task_is_a_hit_and_writes_as_the_clone():
    run(ON, {"command": ["true"]}, "prime")
    wait_idle(ON)
    p0 = pool_status(ON)
    b = run(ON, {"command": ["/bin/sh", "-c",
                             "echo fresh > /workspace/new.txt; mkdir /workspace/d; "
                             "stat -c '%u %g' /workspace/new.txt; cat /proc/self/uid_map"]},
            "fresh")
    p1 = pool_status(ON)
    check(b["exitCode"] == 0, "ran", b)
    check(p1["hits"] == p0["hits"] + 1 and p1["anyCloneHits"] == p0["anyCloneHits"] + 1,
          "the clone's first task is a hit (pooled for any clone)", (p0, p1))
    lines = b["stdout"].split("\n")
    check(lines[0] == "10001 10001", "its file is the runner's inside", lines)
    base = host_base(lines[1])
    check(base >= ON.host_id_base + CLONE_REGION, "the sandbox's host ids are the pool's, "
          "above every clone's range", (base, ON.host_id_base))
    root = os.stat(ws_dir(ON, "fresh"))
    for name in ("new.txt", "d"):
        st = os.stat(os.path.join(ws_dir(ON, "fresh"), name))
        check((st.st_uid, st.st_gid) == (root.st_uid, root.st_gid) and
              st.st_uid < ON.host_id_base + CLONE_REGION and st.st_uid != base + 10001,
              name + ": on disk it belongs to the clone's own host uid", (st, root, base))
    # the clone's next task, cold (a command too long for a pooled sandbox's
    # message, 2 x 70 KiB of arguments): the file is there, its own
    m0 = pool_status(ON)["misses"]
    b = run(ON, {"command": ["/bin/sh", "-c",
                             "cat new.txt; stat -c '%u' new.txt; cat /proc/self/uid_map",
                             "sh", "x" * 70000, "y" * 70000]}, "fresh")
    check(pool_status(ON)["misses"] == m0 + 1, "the next task is built cold", b)
    lines = b["stdout"].split("\n")
    check(b["exitCode"] == 0 and lines[0] == "fresh" and lines[1] == "10001",
          "the next cold task sees it as its own", b)
    check(host_base(lines[2]) + 10001 == root.st_uid, "the cold task runs as the clone's uid",
          (lines, root.st_uid))


@S.case
def two_clones_live_in_pooled_sandboxes_have_different_host_uids():
    # enough sandboxes ready: concurrent tasks that miss each ask for one
    threads = [threading.Thread(target=run, args=(ON, {"command": ["true"]}, "w%d" % i))
               for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wait_idle(ON, 2)
    p0 = pool_status(ON)
    out = {}

    def task(clone):
        out[clone] = run(ON, {"command": ["/bin/sh", "-c", "echo $$ > /workspace/mine; "
                                          "cat /proc/self/uid_map; sleep 1.5"]}, clone)
    threads = [threading.Thread(target=task, args=(c,)) for c in ("live1", "live2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    p1 = pool_status(ON)
    check(p1["anyCloneHits"] == p0["anyCloneHits"] + 2, "both from the pool", (p0, p1))
    bases = [host_base(out[c]["stdout"].strip()) for c in ("live1", "live2")]
    check(bases[0] != bases[1], "two live pooled sandboxes, two host id ranges", bases)
    owners = [os.stat(os.path.join(ws_dir(ON, c), "mine")).st_uid for c in ("live1", "live2")]
    check(owners[0] != owners[1] and not {b + 10001 for b in bases} & set(owners),
          "each file is its clone's, neither a pooled sandbox's", (owners, bases))


OVL = os.path.join(TMP, "ovl")


@S.case
def a_filesystem_that_cannot_be_idmapped_is_built_cold_then_pooled_per_clone():
    # the daemon in a mount namespace of its own, its state dir an overlayfs
    # there (no idmapped mounts of it): nothing is mounted in the host's
    # namespace; its files are seen from the host in the upper directory
    state, upper, work = (os.path.join(OVL, x) for x in ("state", "upper", "work"))
    for x in (state, upper, work, OVL + "/lower"):
        os.makedirs(x, exist_ok=True)
    d = Daemon(state, TOKEN, config=config(
        "ovl.yaml", POOL.replace("none\n", "none\n  workspace_quota_mode: monitor\n", 1)
        % "60s"),
        prefix=["unshare", "-m", "--propagation", "private", "sh", "-c",
                'mount -t overlay overlay -o "lowerdir=$1/lower,upperdir=$1/upper,'
                'workdir=$1/work" "$1/state" && shift && exec "$@"', "sh", OVL]).start()
    try:
        run(d, {"command": ["true"]}, "r1")
        wait_idle(d)
        p0 = pool_status(d)
        body = {"command": ["/bin/sh", "-c", "echo ok > f; stat -c '%u' f; pwd"]}
        b = run(d, body, "r2")
        p1 = pool_status(d)
        check(b["exitCode"] == 0 and b["stdout"] == "10001\n/workspace\n",
              "the task ran, cold, with the same result", b)
        check(p1["hits"] == p0["hits"] and p1["misses"] == p0["misses"] + 1,
              "counted a miss", (p0, p1))
        log = d.wait_output(lambda t: "cannot be idmapped" in t)
        check("cannot be idmapped" in log, "the log says why", log[-2000:])
        ws = os.path.join(upper, "workspaces", "pool", "r2", "work")
        check(os.stat(ws + "/f").st_uid == os.stat(ws).st_uid < d.host_id_base + CLONE_REGION,
              "the file is the clone's", ws)
        deadline = time.monotonic() + 20
        while pool_status(d)["building"] and time.monotonic() < deadline:
            time.sleep(0.05)
        b = run(d, body, "r2")
        p2 = pool_status(d)
        check(b["exitCode"] == 0 and b["stdout"] == "10001\n/workspace\n", "same again", b)
        check(p2["hits"] == p1["hits"] + 1 and p2["anyCloneHits"] == p1["anyCloneHits"],
              "the clone's next task: a hit of a sandbox pooled per clone", (p1, p2))
    finally:
        d.stop()


@S.case
def bad_pool_settings_are_refused_naming_the_key():
    for text, key in (("pool:\n  max_idle: lots\n", "max_idle"),
                      ("pool:\n  enabled: maybe\n", "enabled"),
                      ("pool:\n  idle_timeout: -3s\n", "idle_timeout"),
                      ("pool:\n  max_active: 99999999\n", "max_active"),
                      ("pool:\n  environments: [nosuch]\n", "environments")):
        path = config("bad.yaml", text)
        p = subprocess.run([SANDBOXD, "serve", "--config", path, "--listen", "127.0.0.1:0",
                            "--state-dir", os.path.join(TMP, "bad")], capture_output=True,
                           text=True, timeout=30)
        check(p.returncode == 2 and "pool." + key in p.stderr, "refused naming pool." + key,
              (text, p.returncode, p.stderr))


@S.case
def idle_sandboxes_go_after_idle_timeout():
    d = Daemon(os.path.join(TMP, "short"), TOKEN,
               config=config("short.yaml", POOL % "1s")).start()
    try:
        run(d, {"command": ["true"]}, "idle")
        wait_idle(d)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and pool_status(d)["idle"]:
            time.sleep(0.1)
        p = pool_status(d)
        check(p["idle"] == 0 and p["discarded"] >= 1, "dropped after idle_timeout", p)
        b = run(d, {"command": ["true"]}, "idle")
        check(b["exitCode"] == 0 and pool_status(d)["hits"] == 0, "the next task is cold", b)
    finally:
        d.stop()


@S.case
def on_by_default_growing_with_demand_and_released_at_sigterm():
    d = Daemon(os.path.join(TMP, "default"), TOKEN,
               config=config("default.yaml", "sandbox:\n  network_policy: none\n")).start()
    try:
        p = pool_status(d)
        check(p["enabled"] is True, "the pool is on by default", p)
        run(d, {"command": ["true"]}, "burst")
        hit(d, {"command": ["true"]}, "burst")
        wait_idle(d)
        check(pool_status(d)["idle"] == 2, "two held for a clone's environment (max_idle)",
              pool_status(d))

        def burst(n):
            out = []
            ths = [threading.Thread(target=lambda: out.append(
                run(d, {"command": ["sleep", "1"]}, "burst"))) for _ in range(n)]
            for t in ths:
                t.start()
            for t in ths:
                t.join(60)
            check(len(out) == n and all(b["exitCode"] == 0 for b in out), "all ran", out)

        p0 = pool_status(d)
        burst(8)
        p1 = pool_status(d)
        missed = p1["misses"] - p0["misses"]
        check(missed >= 1, "more clients at once than sandboxes held: misses", (p0, p1))
        # each miss asks for one more: the clone's environment now wants 2 + missed
        want = min(2 + missed, 32)
        p2 = wait_idle(d, want)
        check(p2["idle"] == want, "the pool grew with the demand", (want, p2))
        burst(want)
        p3 = pool_status(d)
        check(p3["hits"] - p2["hits"] == want, "the next burst is served from it", (p2, p3))
        wait_idle(d, want)
        own = own_cgroups(d.proc.pid)
        pids = [m for m in os.listdir("/sys/fs/cgroup") if "pids" in m.split(",")][0]
        base = "/sys/fs/cgroup/%s%s/sandboxd" % (pids, own.get("pids", ""))
        tag = re.search(r"sandbox=(task-[0-9a-f]+-)pool-", d.output()).group(1)
        held = [n for n in os.listdir(base) if n.startswith(tag + "pool-") and
                os.path.exists(os.path.join(base, n, "cgroup.procs")) and
                open(os.path.join(base, n, "cgroup.procs")).read().strip()]
        check(len(held) >= want, "held sandboxes are cgroups of their own, with init in each",
              held)
    finally:
        check(d.stop() == 0, "SIGTERM: a clean exit")
    left = [n for n in held if os.path.exists(os.path.join(base, n))]
    check(not left, "every held sandbox released at SIGTERM", left)


ZY = Daemon(os.path.join(TMP, "zygote"), TOKEN, config=config(
    "zygote.yaml", POOL % "60s" + "  zygote: true\n  zygote_imports: [json, re]\n")).start()

PY_CASES = [
    ("print", "print(1)"),
    ("exception", "1/0"),
    ("SystemExit", "raise SystemExit(3)"),
    ("syntax error", "x=("),
    ("stdin", "import sys; print(sys.stdin.read())"),
    ("argv and __main__", "import sys; print(sys.argv, __name__, sys.path[0] == '')"),
    ("environment", "import os; print(os.environ.get('FOO'), os.environ.get('PATH'))"),
    ("a pre-imported module is not bound", "print(json)"),
    ("identity", "import os; print(os.getuid(), os.getcwd(), open('/proc/1/comm').read())"),
    ("the workspace", "import os; open('z.py', 'w').write('V = 5'); import z; print(z.V, "
     "os.stat('z.py').st_uid, sorted(os.listdir('/workspace'))); os.remove('z.py')"),
    ("stderr and exit", "import sys; sys.stderr.write('e\\n'); sys.exit('bye')"),
    ("timeout", "import time; time.sleep(30)"),
    ("oom", "b=[]\nwhile True: b.append(bytearray(8<<20))"),
]


def py(d, code, clone="z", env=None, timeout=None):
    body = {"language": "python", "code": code, "stdin": "fed"}
    if env:
        body["env"] = env
    if timeout:
        body["timeoutSeconds"] = timeout
    return run(d, body, clone)


def zygote_hit(code, clone="z", env=None, timeout=None):
    wait_idle(ZY)
    before = pool_status(ZY)
    b = py(ZY, code, clone, env, timeout)
    after = pool_status(ZY)
    check(after["zygoteHits"] == before["zygoteHits"] + 1 and
          after["anyCloneHits"] == before["anyCloneHits"] + 1,
          "run by a zygote pooled for any clone", (code, after))
    return b


@S.case
def zygote_tasks_give_the_same_results_as_cold_python():
    py(ZY, "pass")
    for name, code in PY_CASES:
        t = 2 if name == "timeout" else None
        b1 = zygote_hit(code, env={"FOO": "bar"}, timeout=t)
        b2 = py(COLD, code, env={"FOO": "bar"}, timeout=t)
        if os.environ.get("POOL_SHOW"):
            print(name, essentials(b1))
        check(essentials(b1) == essentials(b2), name + ": the same from a zygote and cold",
              (essentials(b1), essentials(b2)))


@S.case
def a_zygote_serves_one_task_and_sees_no_other_tasks_secrets():
    py(ZY, "pass", "zs")
    b1 = zygote_hit("import os, builtins; builtins.LEFT = 1; print(os.getpid(), "
                    "os.readlink('/proc/self/ns/pid'))", "zs", env={"SECRET": "s3cr3t"})
    b2 = zygote_hit("import os, builtins; print(hasattr(builtins, 'LEFT'), "
                    "os.readlink('/proc/self/ns/pid'), 'SECRET' in os.environ, "
                    "b's3cr3t' in open('/proc/self/environ', 'rb').read())", "zs")
    check(b1["exitCode"] == 0 and b2["exitCode"] == 0, "both ran", (b1, b2))
    ns1 = b1["stdout"].split()[1]
    f = b2["stdout"].split()
    check(f[0] == "False" and f[2] == "False" and f[3] == "False",
          "nothing of task 1 in task 2 (globals, environment)", (b1, b2))
    check(f[1] != ns1, "another pid namespace", (ns1, f))


@S.case
def startup_variables_of_its_own_mean_no_zygote():
    py(ZY, "pass", "zv")
    wait_idle(ZY)
    p0 = pool_status(ZY)
    b = py(ZY, "import sys; print(sys.flags.dont_write_bytecode)", "zv",
           env={"PYTHONDONTWRITEBYTECODE": "1"})
    p1 = pool_status(ZY)
    check(b["exitCode"] == 0 and b["stdout"] == "1\n", "PYTHON* honoured", b)
    check(p1["zygoteHits"] == p0["zygoteHits"], "not run by a zygote", (p0, p1))


@S.case
def the_memory_held_by_idle_pooled_sandboxes_is_reported():
    check(pool_status(COLD)["memoryBytes"] is None, "no pool, no memory figure", pool_status(COLD))
    per = {}
    for name, d, body in (("plain", ON, {"command": ["true"]}),
                          ("zygote", ZY, {"language": "python", "code": "pass"})):
        run(d, body, "mem")
        p = wait_idle(d)
        check(p["memoryBytes"] > 0 and 0 < p["memoryPerSandboxBytes"] <= p["memoryBytes"]
              and p["memoryBytes"] < p["idle"] * (256 << 20), name + ": pool memory reported", p)
        per[name] = p["memoryPerSandboxBytes"]
        st, text, _ = d.req("GET", "/metrics")
        line = [x for x in text.splitlines() if x.startswith("sandbox_pool_memory_bytes ")]
        check(st == 200 and len(line) == 1 and float(line[0].split()[1]) > 0,
              name + ": /metrics has sandbox_pool_memory_bytes", line)
    # a python interpreter started ahead holds megabytes; init alone does not
    check(per["zygote"] > per["plain"] + (2 << 20), "a zygote's memory is counted", per)


@S.case
def bad_zygote_imports_are_refused():
    path = config("badz.yaml", "pool:\n  zygote_imports: ['os; import x']\n")
    p = subprocess.run([SANDBOXD, "serve", "--config", path, "--listen", "127.0.0.1:0",
                        "--state-dir", os.path.join(TMP, "badz")], capture_output=True,
                       text=True, timeout=30)
    check(p.returncode == 2 and "pool.zygote_imports" in p.stderr, "refused naming the key",
          (p.returncode, p.stderr))


ON.stop()
COLD.stop()
ZY.stop()
S.finish()
