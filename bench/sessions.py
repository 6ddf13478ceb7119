#!/usr/bin/env python3
"""Sessions: one `sandboxd serve` holding N live `proxy` sessions over M
clones (issue 10's density goal: 1,000 sessions of 200+ clones, < 1 MiB each,
100 started in < 0.2 s).

The daemon is this script's own: a temporary state directory, a parent
cgroup of its own (`sandbox.cgroup_parent: sbxbench-PID`, beside the shared
`sandboxd/`, so the process cap other daemons of the machine set on
`sandboxd/` neither limits it nor is taken by it; `total_pids` is set on its
own parent, so the v1 pids cap counts every sandbox at its clone; with
--join, for a daemon without that key, the daemon runs in cgroups
sbxbench-PID of this script and its `sandboxd/` is beneath them), a unix
socket for its API, and it runs inside a netlab network namespace
(tests/integration/netlab.py): no packet of any session can leave the
machine; the egress check connects to the lab's "public" host.

Before anything, the host-wide limits are read (processes, threads, open
files, inotify, conntrack, local ports, memory, namespaces) and the run is
refused when it would take more than a quarter of what is left of one. The
script changes no host-wide setting (nothing to restore).

Steps, each printed with the load average:
  0. M clones made by a file upload (their workspaces, no sandbox); then
     --churn sessions started and stopped (a daemon that has run a while:
     memory freed and reused), before the memory is counted;
  1. 100 sessions started one by one (one client, kept-alive connection);
  2. 100 sessions started concurrently (--clients client threads), on
     other clones;  (1 and 2 alternate in --rounds rounds, on fresh clones)
  3. the rest up to N, concurrently; `/healthz` probed every 5 ms meanwhile;
  4. memory per live session: the daemon's RSS growth, the spawner's RSS,
     the PSS of the sessions' processes, what their cgroups are charged
     (memory.usage_in_bytes of the parent, kernel memory included), and
     /proc/meminfo deltas (Slab, SUnreclaim, KernelStack, PageTables,
     Percpu; host-wide, so other work of the machine shows there too);
     descriptors of the daemon per session;
  5. `/healthz` latency for --hold seconds while holding them;
  6. in the last session started: a task runs, and its egress reaches the
     lab's public host (an HTTP GET through the sandbox's transparent path,
     seen by the lab's server);
  7. SIGTERM: the stop's duration; then nothing is left: no process, no
     cgroup beneath the parent, no mount of the state directory; the parent
     cgroups are removed.

  bench/sessions.py [--sessions 1000] [--clones 200] [--clients 32]
                    [--rounds 1] [--churn 50] [--quota-mode monitor] [--sandboxd PATH]
                    [--join] [--json FILE]
"""
import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
os.environ.setdefault("SANDBOXD", os.path.join(HERE, "..", "build", "sandboxd"))
import netlab  # noqa: E402
import sbxtest  # noqa: E402

TOKEN = "op-" + "0123456789abcdef0123456789abc"
TENANT = "dense"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))] if xs else float("nan")


def summary(xs):
    return {"n": len(xs), "p50": pct(xs, 50), "p99": pct(xs, 99), "max": max(xs) if xs else 0}


def load():
    return "%.2f %.2f %.2f" % os.getloadavg()


def read(path, default=None):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def meminfo():
    out = {}
    for line in (read("/proc/meminfo") or "").splitlines():
        k, v = line.split(":", 1)
        out[k] = int(v.split()[0])
    return out


# ---- the host's limits ----------------------------------------------------------------

def host_limits(n):
    """What the run needs against what the host has left; (rows, refusals)."""
    rows, bad = [], []

    def want(name, used, limit, need, share=4):
        left = limit - used
        rows.append("%-28s used %-9d limit %-9d need ~%d" % (name, used, limit, need))
        if need > left / share:
            bad.append("%s: ~%d needed, %d left of %d" % (name, need, left, limit))

    tasks = int(read("/proc/loadavg").split()[3].split("/")[1])
    want("processes (pid_max)", tasks, int(read("/proc/sys/kernel/pid_max")), 3 * n + 64)
    want("threads (threads-max)", tasks, int(read("/proc/sys/kernel/threads-max")), 3 * n + 64)
    fnr = read("/proc/sys/fs/file-nr").split()
    want("open files (file-max)", int(fnr[0]), int(fnr[2]), 24 * n + 2048)
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # the daemon's own limit (it raises its soft one to it), not the host's
    want("daemon RLIMIT_NOFILE (hard)", 0, hard, 15 * n + 1024, share=1.1)
    mem = meminfo()
    want("memory (MemAvailable, KiB)", 0, mem["MemAvailable"], 2048 * n)
    for ns in ("net", "mnt", "pid", "user", "ipc", "uts", "cgroup"):
        lim = read("/proc/sys/user/max_%s_namespaces" % ns)
        if lim:
            want("%s namespaces (per user)" % ns, 0, int(lim), n + 16)
    ct = read("/proc/sys/net/netfilter/nf_conntrack_count")
    if ct:
        want("nf_conntrack", int(ct), int(read("/proc/sys/net/netfilter/nf_conntrack_max")), 64)
    lo, hi = map(int, read("/proc/sys/net/ipv4/ip_local_port_range").split())
    want("local ports", 0, hi - lo + 1, 64)
    ino = read("/proc/sys/fs/inotify/max_user_instances")
    rows.append("%-28s limit %s (sessions take none)" % ("inotify instances", ino.strip()))
    return rows, bad


# ---- cgroups --------------------------------------------------------------------------

def cg_children(d):
    try:
        return [e.path for e in os.scandir(d) if e.is_dir()]
    except OSError:
        return []


def cg_tree_procs(d):
    n = len((read(os.path.join(d, "cgroup.procs")) or "").split())
    for k in cg_children(d):
        n += cg_tree_procs(k)
    return n


# ---- processes ------------------------------------------------------------------------

def children_map():
    kids = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            s = read("/proc/%s/stat" % p)
            if s:
                try:
                    kids.setdefault(int(s.rsplit(")", 1)[1].split()[1]), []).append(int(p))
                except (ValueError, IndexError):
                    pass
    return kids


def descendants(pid, kids):
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def status_kib(pid, key):
    for line in (read("/proc/%d/status" % pid) or "").splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def pss_kib(pid):
    for line in (read("/proc/%d/smaps_rollup" % pid) or "").splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def rss_by_kind(pid):
    """The RSS (KiB) of pid's [heap], its other anonymous mappings, and its
    file mappings (/proc/PID/smaps)."""
    out, kind = {"heap": 0, "anon": 0, "file": 0}, None
    for line in (read("/proc/%d/smaps" % pid) or "").splitlines():
        f = line.split()
        if f and "-" in f[0] and not f[0].endswith(":"):
            name = f[5] if len(f) > 5 else ""
            kind = "heap" if name == "[heap]" else "file" if name.startswith("/") else "anon"
        elif f and f[0] == "Rss:" and kind:
            out[kind] += int(f[1])
    return out


def cpu_ms(pid):
    """utime + stime of pid (ms), 0 when it is gone."""
    st = read("/proc/%d/stat" % pid) if pid else None
    if not st:
        return 0.0
    f = st.rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")


def comm(pid):
    return (read("/proc/%d/comm" % pid) or "").strip()


# ---- the API --------------------------------------------------------------------------

class Client:
    """One kept-alive connection to the daemon's unix socket."""

    def __init__(self, sock):
        self.sock, self.c = sock, None

    def req(self, method, path, body=None, clone=None, timeout=120):
        h = {"Authorization": "Bearer " + TOKEN, "X-Sandbox-Extended": "1"}
        if clone:
            h.update({"X-Tenant-Code": TENANT, "X-Clone-Id": clone})
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        for attempt in (0, 1):
            if self.c is None:
                self.c = netlab.UnixHTTP(self.sock, timeout=timeout)
            try:
                self.c.request(method, path, body=data, headers=h)
                r = self.c.getresponse()
                raw = r.read()
                break
            except (http.client.HTTPException, OSError):
                self.c.close()
                self.c = None
                if attempt:
                    raise
        try:
            return r.status, json.loads(raw) if raw else None
        except ValueError:
            return r.status, raw.decode(errors="replace")

    def close(self):
        if self.c:
            self.c.close()


def start_session(cl, clone, name):
    t0 = time.monotonic()
    st, b = cl.req("POST", "/runtime/start", {"sessionID": name}, clone=clone)
    if st != 200:
        raise RuntimeError("start %s/%s: %d %s" % (clone, name, st, str(b)[:300]))
    return (time.monotonic() - t0) * 1e3


def stop_session(cl, clone, name):
    t0 = time.monotonic()
    st, b = cl.req("POST", "/runtime/stop", {"sessionID": name}, clone=clone)
    if st != 200:
        raise RuntimeError("stop %s/%s: %d %s" % (clone, name, st, str(b)[:300]))
    return (time.monotonic() - t0) * 1e3


def put_file(cl, clone, _name):
    t0 = time.monotonic()
    st, b = cl.req("PUT", "/runtime/files?path=hello", b"hi", clone=clone)
    if st != 201:
        raise RuntimeError("put %s: %d %s" % (clone, st, str(b)[:300]))
    return (time.monotonic() - t0) * 1e3


def parallel(sock, pairs, threads, fn=start_session):
    """fn over pairs from threads clients (each its own kept-alive
    connection, opened before the clock starts): wall time (s), latencies
    (ms), errors."""
    lat, errors, lock, it = [], [], threading.Lock(), iter(list(pairs))
    clients = [Client(sock) for _ in range(threads)]
    for cl in clients:
        cl.req("GET", "/healthz")
    go = threading.Barrier(threads + 1)

    def worker(cl):
        go.wait()
        while True:
            with lock:
                p = next(it, None)
            if p is None:
                return
            try:
                ms = fn(cl, *p)
                with lock:
                    lat.append(ms)
            except Exception as e:  # noqa: BLE001 - counted and shown
                with lock:
                    errors.append(str(e))

    ts = [threading.Thread(target=worker, args=(cl,)) for cl in clients]
    for t in ts:
        t.start()
    go.wait()
    t0 = time.monotonic()
    for t in ts:
        t.join()
    wall = time.monotonic() - t0
    for cl in clients:
        cl.close()
    return wall, lat, errors


def one_by_one(sock, pairs):
    cl = Client(sock)
    cl.req("GET", "/healthz")
    lat, errors = [], []
    t0 = time.monotonic()
    for p in pairs:
        try:
            lat.append(start_session(cl, *p))
        except Exception as e:  # noqa: BLE001
            errors.append(str(e))
    wall = time.monotonic() - t0
    cl.close()
    return wall, lat, errors


class Probe(threading.Thread):
    """GET /healthz every 5 ms on one kept-alive connection: latencies (ms)."""

    def __init__(self, sock):
        super().__init__(daemon=True)
        self.cl, self.lat, self.stop_ = Client(sock), [], threading.Event()

    def run(self):
        while not self.stop_.is_set():
            t0 = time.monotonic()
            self.cl.req("GET", "/healthz", timeout=30)
            self.lat.append((time.monotonic() - t0) * 1e3)
            time.sleep(0.005)
        self.cl.close()

    def finish(self):
        self.stop_.set()
        self.join()
        return self.lat


def metric(cl, name):
    st, m = cl.req("GET", "/metrics")
    for line in (m or "").splitlines() if isinstance(m, str) else []:
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    return None


def pool_status(cl):
    st, b = cl.req("GET", "/runtime/status")
    return (b or {}).get("pool") or {} if isinstance(b, dict) else {}


# ---- the run --------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--clones", type=int, default=200)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds of (100 one by one, 100 concurrently) on fresh clones")
    ap.add_argument("--quota", default="16m")
    ap.add_argument("--quota-mode", default="monitor",
                    help="sandbox.workspace_quota_mode (monitor: no loop device per clone)")
    ap.add_argument("--churn", type=int, default=50,
                    help="sessions started and stopped before the count")
    ap.add_argument("--hold", type=float, default=5.0, help="seconds of /healthz while holding")
    ap.add_argument("--sandboxd", default=os.environ["SANDBOXD"])
    ap.add_argument("--join", action="store_true",
                    help="no cgroup_parent key (for a daemon that knows none): the daemon "
                         "runs in cgroups of this script (sbxbench-PID, one per v1 "
                         "hierarchy) and its sandboxd/ parent is beneath them")
    ap.add_argument("--pool-sessions", type=int, default=0,
                    help="pool.sessions: holders kept ready for sessions (pool.max_total raised "
                         "to it); before each timed step the run waits (at most 60 s) until "
                         "the pool holds min(N, 100) ready and reports their memory")
    ap.add_argument("--no-pool", action="store_true", help="pool.enabled: false")
    ap.add_argument("--json")
    a = ap.parse_args()
    sbxtest.SANDBOXD = os.path.abspath(a.sandboxd)
    batch = 100
    need_clones = max(a.clones, 2 * batch * a.rounds)
    if a.sessions < 2 * batch * a.rounds:
        sys.exit("--sessions must be at least %d (the timed batches)" % (2 * batch * a.rounds))

    rows, bad = host_limits(a.sessions)
    print("host limits (load %s):" % load())
    for r in rows:
        print("  " + r)
    if bad:
        sys.exit("refused: too close to a host-wide limit:\n  " + "\n  ".join(bad))

    out = {"sessions": a.sessions, "clones": need_clones, "clients": a.clients,
           "sandboxd": a.sandboxd, "loadStart": os.getloadavg(), "steps": {}}
    parent = "sbxbench-%d" % os.getpid()
    own = sbxtest.own_cgroups()
    tmp = tempfile.mkdtemp(prefix="sbx-sessions-")
    os.chmod(tmp, 0o755)
    sock = os.path.join(tmp, "api.sock")
    cfg = os.path.join(tmp, "config.yaml")
    with open(cfg, "w") as f:
        f.write("server:\n  max_connections: 1024\n  max_connections_per_address: 1024\n"
                "  max_concurrent: 64\n"
                "sandbox:\n  workspace_quota: %s\n  workspace_quota_mode: %s\n"
                "  max_clones_per_tenant: 60000\n  idle_timeout: 3600s\n"
                "  total_memory: 0\n  total_cpu: 0\n" % (a.quota, a.quota_mode))
        if not a.join:
            f.write("  cgroup_parent: %s\n" % parent)
        f.write("  total_pids: %d\n" % (4 * a.sessions + 256))
        f.write("network:\n  dns:\n    upstream: [\"%s\"]\n" % netlab.DNS)
        if a.no_pool:
            f.write("pool:\n  enabled: false\n")
        elif a.pool_sessions:
            f.write("pool:\n  sessions: %d\n  max_total: %d\n"
                    % (a.pool_sessions, max(32, a.pool_sessions + 8)))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CLAW_") and not k.startswith("SANDBOX_")}
    # the sandboxes' parent in each hierarchy, and the directory this run removes
    top = {c: os.path.join(b, parent) for c, b in own.items()}
    sparent = {c: os.path.join(t, "sandboxd") if a.join else t for c, t in top.items()}
    prefix = []
    if a.join:
        for c in ("memory", "pids", "cpu", "cpuacct", "freezer"):
            if c in top and not os.path.isdir(top[c]):
                os.mkdir(top[c])
        dirs = sorted({top[c] for c in ("memory", "pids", "cpu", "cpuacct", "freezer")
                       if c in top})
        prefix = ["/bin/sh", "-c", "for d in %s; do echo $$ > $d/cgroup.procs || exit 1; "
                  "done; exec \"$@\"" % " ".join(dirs), "sh"]
    mem0 = meminfo()
    lab = netlab.Lab().__enter__()
    log = open(os.path.join(tmp, "log"), "w+")
    d = subprocess.Popen(prefix + lab.sandboxd_argv("serve", "--listen", "unix:" + sock, "--state-dir",
                                           os.path.join(tmp, "state"), "--token", TOKEN,
                                           "--config", cfg, "--net", "proxy"),
                         env=env, stdout=log, stderr=subprocess.STDOUT)
    # nsenter execs sandboxd: the same pid
    cl = Client(sock)
    try:
        deadline = time.monotonic() + 30
        while True:
            if d.poll() is not None:
                log.seek(0)
                raise RuntimeError("sandboxd exited %s: %s" % (d.returncode, log.read()[-3000:]))
            try:
                st, b = cl.req("GET", "/readyz", timeout=2)
                if st == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("daemon not ready")
            time.sleep(0.05)
        kids = children_map()
        spawner = [p for p in kids.get(d.pid, []) if comm(p) == "sandboxd-spawn"]
        spawner = spawner[0] if spawner else None
        rss0, spawner0 = status_kib(d.pid, "VmRSS"), spawner and status_kib(spawner, "VmRSS")
        kinds0 = rss_by_kind(d.pid)
        fds0 = len(os.listdir("/proc/%d/fd" % d.pid))
        nofile = [l for l in read("/proc/%d/limits" % d.pid).splitlines()
                  if l.startswith("Max open files")][0].split()[3:5]
        mparent = sparent.get("memory", "")
        charged0 = int(read(os.path.join(mparent, "memory.usage_in_bytes"), "0") or 0)
        print("daemon pid %d, RSS %d KiB, spawner %s RSS %s KiB, %d fds, RLIMIT_NOFILE %s"
              % (d.pid, rss0, spawner, spawner0, fds0, "/".join(nofile)), flush=True)

        # 0. clones by a file upload
        wall, lat, err = parallel(sock, [("c%d" % i, "") for i in range(need_clones)],
                                  8, fn=put_file)
        out["steps"]["clones"] = {"n": need_clones, "wallS": wall, "errors": err[:5],
                                  "nErrors": len(err), "load": load()}
        print("0. %d clones (a file each): %.2f s, errors %d  [load %s]"
              % (need_clones, wall, len(err), load()), flush=True)
        if err:
            print("   " + err[0])
        started = []

        # 0b. churn: sessions started and stopped before the count (a daemon
        # that has run a while: its heap has reused memory)
        if a.churn:
            pairs = [("c%d" % i, "churn") for i in range(min(a.churn, need_clones))]
            parallel(sock, pairs, 8)
            wall, _, err = parallel(sock, pairs, 8, fn=stop_session)
            print("0b. %d sessions started and stopped first, errors %d" % (len(pairs), len(err)),
                  flush=True)
        rss0, spawner0 = status_kib(d.pid, "VmRSS"), spawner and status_kib(spawner, "VmRSS")
        kinds0 = rss_by_kind(d.pid)

        # 1, 2: 100 one by one, 100 concurrently, alternating on fresh clones
        for r in range(a.rounds):
            for kind in ("oneByOne", "concurrent"):
                if a.pool_sessions:
                    want, deadline = min(a.pool_sessions, batch), time.monotonic() + 60
                    while pool_status(cl).get("idle", 0) < want and time.monotonic() < deadline:
                        time.sleep(0.1)
                    ps = pool_status(cl)
                    print("   pool before: %d ready, %.1f MiB (%.0f KiB each)"
                          % (ps.get("idle", 0), (ps.get("memoryBytes") or 0) / 2**20,
                             (ps.get("memoryPerSandboxBytes") or 0) / 1024), flush=True)
                    out["steps"]["pool%s%d" % (kind, r)] = ps
                base = (2 * r + (kind == "concurrent")) * batch
                pairs = [("c%d" % (base + i), "s0") for i in range(batch)]
                c0 = (cpu_ms(d.pid), cpu_ms(spawner))
                if kind == "oneByOne":
                    wall, lat, err = one_by_one(sock, pairs)
                else:
                    wall, lat, err = parallel(sock, pairs, a.clients)
                cpu = (cpu_ms(d.pid) - c0[0], cpu_ms(spawner) - c0[1])
                if os.environ.get("SESSIONS_MARKS"):  # CLOCK_MONOTONIC span (perf record -k mono)
                    print("   span %.6f,%.6f" % (time.monotonic() - wall, time.monotonic()))
                started += pairs
                key = "%s%d" % (kind, r)
                out["steps"][key] = {"wallS": wall, "start": summary(lat), "nErrors": len(err),
                                     "errors": err[:5], "load": load(),
                                     "daemonCpuMs": cpu[0], "spawnerCpuMs": cpu[1]}
                print("%s. 100 sessions %s: %.3f s (start p50 %.1f p99 %.1f max %.1f ms), "
                      "errors %d; CPU daemon %.0f ms, spawner %.0f ms  [load %s]"
                      % ("1" if kind == "oneByOne" else "2",
                         "one by one" if kind == "oneByOne"
                         else "concurrently (%d clients)" % a.clients,
                         wall, pct(lat, 50), pct(lat, 99), max(lat or [0]), len(err),
                         cpu[0], cpu[1], load()), flush=True)
                if err:
                    print("   " + err[0])
                ps = pool_status(cl)
                print("   pool: session hits %s misses %s, idle %s, built %s"
                      % (ps.get("sessionHits"), ps.get("sessionMisses"), ps.get("idle"),
                         ps.get("built")), flush=True)

        # 3. the rest, /healthz probed meanwhile
        rest = []
        k = 0
        while len(started) + len(rest) < a.sessions:
            name = "s%d" % (k // need_clones)
            pair = ("c%d" % (k % need_clones), name)
            if pair not in started:
                rest.append(pair)
            k += 1
        probe = Probe(sock)
        probe.start()
        wall, lat, err = parallel(sock, rest, a.clients)
        during = probe.finish()
        started += [p for p in rest]
        out["steps"]["rest"] = {"n": len(rest), "wallS": wall, "start": summary(lat),
                                "nErrors": len(err), "errors": err[:5],
                                "healthz": summary(during), "load": load()}
        print("3. %d more sessions concurrently: %.2f s (%.0f/s; start p50 %.1f p99 %.1f ms), "
              "errors %d; /healthz meanwhile p50 %.2f p99 %.2f max %.1f ms  [load %s]"
              % (len(rest), wall, len(rest) / wall, pct(lat, 50), pct(lat, 99), len(err),
                 pct(during, 50), pct(during, 99), max(during or [0]), load()), flush=True)
        if err:
            print("   " + err[0])

        # 4. memory
        time.sleep(1)
        live = metric(cl, "sandbox_sessions_live")
        n = max(1, int(live or 0))
        kids = children_map()
        procs = descendants(d.pid, kids)
        spawner_rss = spawner and status_kib(spawner, "VmRSS")
        sess_procs = [p for p in procs if p != spawner]
        pss = sum(pss_kib(p) for p in sess_procs)
        rss = status_kib(d.pid, "VmRSS")
        kinds = rss_by_kind(d.pid)
        growth = {k: kinds[k] - kinds0[k] for k in kinds}
        fds = len(os.listdir("/proc/%d/fd" % d.pid))
        mem1 = meminfo()
        charged = int(read(os.path.join(mparent, "memory.usage_in_bytes"), "0") or 0)
        kmem = int(read(os.path.join(mparent, "memory.kmem.usage_in_bytes"), "0") or 0)
        delta = {k: mem1[k] - mem0[k] for k in ("MemAvailable", "Slab", "SUnreclaim",
                                                 "KernelStack", "PageTables", "Percpu")
                 if k in mem0}
        user = (rss - rss0) + pss + ((spawner_rss or 0) - (spawner0 or 0))
        out["memory"] = {"sessionsLive": live, "processes": len(sess_procs),
                         "daemonRssKiB": rss, "daemonRssAtStartKiB": rss0,
                         "daemonRssGrowthKiB": growth,
                         "spawnerRssKiB": spawner_rss, "sessionsPssKiB": pss,
                         "userPerSessionKiB": user / n,
                         "cgroupChargedKiB": (charged - charged0) // 1024,
                         "cgroupKmemKiB": kmem // 1024,
                         "chargedPerSessionKiB": (charged - charged0) / 1024 / n,
                         "meminfoDeltaKiB": delta,
                         "kernelPerSessionKiB": (delta.get("Slab", 0) +
                                                 delta.get("KernelStack", 0) +
                                                 delta.get("PageTables", 0) +
                                                 delta.get("Percpu", 0)) / n,
                         "availablePerSessionKiB": -delta.get("MemAvailable", 0) / n,
                         "daemonFds": fds, "daemonFdsAtStart": fds0,
                         "fdsPerSession": (fds - fds0) / n, "load": load()}
        mm = out["memory"]
        print("4. live sessions %s, %d processes of theirs; daemon RSS %.1f -> %.1f MiB "
              "(growth: heap %d, other anonymous %d, files %d KiB), "
              "spawner %s KiB, sessions' PSS %.1f MiB: user space %.0f KiB a session; "
              "charged to their cgroups %.0f KiB a session (kmem %d KiB in all); "
              "meminfo: Slab %+d, SUnreclaim %+d, KernelStack %+d, PageTables %+d, Percpu %+d "
              "KiB = %.0f KiB kernel a session; MemAvailable %+d KiB = %.0f KiB a session; "
              "daemon fds %d -> %d (%.1f a session)  [load %s]"
              % (live, len(sess_procs), rss0 / 1024, rss / 1024, growth["heap"],
                 growth["anon"], growth["file"], spawner_rss, pss / 1024,
                 mm["userPerSessionKiB"], mm["chargedPerSessionKiB"], kmem // 1024,
                 delta.get("Slab", 0), delta.get("SUnreclaim", 0), delta.get("KernelStack", 0),
                 delta.get("PageTables", 0), delta.get("Percpu", 0), mm["kernelPerSessionKiB"],
                 delta.get("MemAvailable", 0), mm["availablePerSessionKiB"], fds0, fds,
                 mm["fdsPerSession"], load()), flush=True)

        # 5. /healthz while holding them
        probe = Probe(sock)
        probe.start()
        time.sleep(a.hold)
        held = probe.finish()
        out["healthzHolding"] = summary(held)
        print("5. /healthz holding %s sessions, %.0f s: p50 %.2f p99 %.2f max %.1f ms (%d)  "
              "[load %s]" % (live, a.hold, pct(held, 50), pct(held, 99), max(held or [0]),
                             len(held), load()), flush=True)

        # 6. the last session: a task, and its egress to the lab's public host
        clone, name = started[-1]
        mark = lab.mark()
        t0 = time.monotonic()
        st, b = cl.req("POST", "/runtime/exec", {"sessionID": name, "timeoutSeconds": 60,
                                                 "command": ["sh", "-c", "echo alive $$"]},
                       clone=clone)
        ms = (time.monotonic() - t0) * 1e3
        ok_task = st == 200 and isinstance(b, dict) and "alive" in (b.get("stdout") or "")
        get = ("import urllib.request as u;"
               "print(u.urlopen('http://public.test/sessions-bench', timeout=20).read()[:80])")
        st2, b2 = cl.req("POST", "/runtime/exec", {"sessionID": name, "timeoutSeconds": 60,
                                                   "command": ["python3", "-c", get]},
                         clone=clone)
        seen = lab.events(since=mark, settle=0.5)
        seen = [e for e in seen if "sessions-bench" in json.dumps(e)]
        ok_egress = st2 == 200 and "netlab pub" in (b2.get("stdout") or "") and bool(seen)
        out["lastSession"] = {"clone": clone, "session": name, "taskOk": ok_task,
                              "execMs": ms, "egressOk": ok_egress,
                              "egressStdout": (b2 or {}).get("stdout", "")[:200]
                              if isinstance(b2, dict) else str(b2)[:200],
                              "labSaw": len(seen)}
        print("6. last session %s/%s: task %s (%.1f ms), egress to public.test %s "
              "(the lab's server saw %d request)" % (clone, name, "ran" if ok_task else
                                                     "FAILED %s %s" % (st, str(b)[:200]), ms,
                                                     "ok" if ok_egress else
                                                     "FAILED %s %s" % (st2, str(b2)[:300]),
                                                     len(seen)), flush=True)
    finally:
        cl.close()
        t0 = time.monotonic()
        d.terminate()
        try:
            code = d.wait(timeout=600)
        except subprocess.TimeoutExpired:
            d.kill()
            code = d.wait()
        stop_s = time.monotonic() - t0
        out["stopS"], out["exit"] = stop_s, code
        # 7. nothing left
        time.sleep(0.5)
        left = {}
        for c, pdir in sparent.items():
            if os.path.isdir(pdir):
                left[c] = {"cgroups": [os.path.basename(k) for k in cg_children(pdir)],
                           "procs": cg_tree_procs(pdir)}
        state = os.path.join(tmp, "state")
        mounts = [l for l in read("/proc/self/mountinfo").splitlines() if state in l]
        loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
        loops = [l for l in loops.splitlines() if state in l]
        clean = (not any(v["cgroups"] or v["procs"] for v in left.values()) and not mounts
                 and not loops)
        out["shutdown"] = {"stopS": stop_s, "exit": code, "left": left, "mounts": len(mounts),
                           "loops": len(loops), "clean": clean}
        print("7. stop (SIGTERM): exit %s in %.1f s; left: %s cgroups, %d processes, %d mounts, "
              "%d loop devices: %s  [load %s]"
              % (code, stop_s, sum(len(v["cgroups"]) for v in left.values()),
                 sum(v["procs"] for v in left.values()), len(mounts), len(loops),
                 "clean" if clean else "NOT CLEAN", load()), flush=True)
        if not clean:
            log.seek(0)
            print(log.read()[-2000:])
        # this run's cgroups (the daemon's parent, or ours with --join), when empty
        for c in top:
            for k in cg_children(sparent[c]) + ([sparent[c]] if a.join else []) + [top[c]]:
                try:
                    os.rmdir(k)
                except OSError:
                    pass
        lab.__exit__(None, None, None)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
        if code != 0:
            log.seek(0)
            print(log.read()[-2000:])
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
