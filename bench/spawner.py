#!/usr/bin/env python3
"""The exec path side by side, interleaved (issue 10's goals): four
`sandboxd serve` daemons run at once, one with the sandbox spawner
(`pool.spawner: true`, the default) and the pool off, one without either,
one with the spawner and the warm pool at its defaults (`pool.enabled: true`,
`max_idle: 2` per description growing with demand up to `max_total: 32`:
every task after a clone's first takes a sandbox built ahead), and one with
the pool and zygotes (`pool.zygote: true`: python3 or node started ahead in
each pooled python or node sandbox), and each round runs, in turn:

  - a local one-shot `bwrap --unshare-all` of /bin/true (the binds of
    bench/startup.sh), and a bare `/usr/bin/python3 -c 'print(1)'` (the
    interpreter the sandbox runs, not whichever python3 is first in PATH);
  - `POST /runtime/exec {"command":["/bin/true"]}` on each daemon (one
    keep-alive connection per daemon);
  - `POST /runtime/exec {"language":"python","code":"print(1)"}` on each;
  - a bare `/usr/bin/node -e 0` (PATH, HOME and LANG only in its
    environment, as a task's), and `POST /runtime/exec
    {"language":"node","code":"0"}` on the spawner-on (cold), pool and
    zygote daemons.

Then N new clones, interleaved, on two more daemons whose workspaces are
plain directories (`workspace_quota_mode: monitor`: no loop image per
clone, which would take N loop devices of the shared machine), one with the
spawner only and one with the pool and zygotes: the first task of a clone
never seen before (a fresh X-Clone-Id each time: its workspace is made,
then its task runs), `/bin/true` and python print(1) on each, and
`/bin/true` for a clone seen before (the attach without the clone's
creation). The pool
serves them with sandboxes pooled for any clone, the clone's workspace
attached as an idmapped mount.

Then the daemons' and the spawner's VmRSS (idle, and after the rounds), the
CPU time of each daemon's own process per task, and, per daemon, C clients
for S seconds (bench/api_load.c: tasks/s, p50, p99), alternated (S = 0:
none). The
machine's load average is printed with each part: it is shared.

Needs root, bwrap, gcc. Usage: bench/spawner.py [ROUNDS] [CLIENTS] [SECONDS]
[NEW_CLONES] (SANDBOXD=path picks the binary; SBX_BENCH_NET=proxy runs every
daemon with `--net proxy`: each sandbox gets its egress, pooled ones ahead; the
tasks make no connection, so nothing leaves the machine). Prints a markdown
report."""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import benchlib
from benchlib import load

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
CLIENTS = int(sys.argv[2]) if len(sys.argv) > 2 else 32
SECONDS = int(sys.argv[3]) if len(sys.argv) > 3 else 8
NET = os.environ.get("SBX_BENCH_NET", "none")
if NET not in ("none", "proxy"):
    raise SystemExit("SBX_BENCH_NET: none or proxy, not %r" % NET)
NEW_CLONES = int(sys.argv[4]) if len(sys.argv) > 4 else 100
TMP = tempfile.mkdtemp(prefix="sbx-spawner-bench-")
WB = os.path.join(TMP, "bwrap-ws")
os.makedirs(WB, mode=0o755)
BWRAP = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
         "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
         "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
         "--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache", "--proc", "/proc",
         "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/home/runner",
         "--bind", WB, "/workspace", "--chdir", "/workspace", "--uid", "10001",
         "--gid", "10001", "--new-session"]


# bare node with an environment like a task's: a NODE_EXTRA_CA_CERTS in the
# caller's (this machine has one) makes node load a CA bundle at start
BARE_ENV = {"PATH": "/usr/bin:/bin", "HOME": TMP, "LANG": "C.UTF-8"}


DAEMONS = []  # every daemon started, stopped at the end whatever happens


class Daemon(benchlib.Daemon):
    def __init__(self, name, spawner, pool=False, zygote=False, monitor=False):
        cfg = ("server:\n  queue_size: 4096\n  queue_per_tenant: 4096\n"
               "pool:\n  spawner: %s\n" % ("true" if spawner else "false"))
        # the pool is on by default: its defaults, or off
        cfg += "  enabled: %s\n" % ("true" if pool else "false")
        if pool:
            cfg += "  idle_timeout: 10m\n"
        if zygote:
            cfg += "  zygote: true\n"
        if monitor:
            cfg += "sandbox:\n  workspace_quota_mode: monitor\n"
        super().__init__(os.path.join(TMP, name), config=cfg,
                         args=("--net", NET, "--max-concurrent", "32"), ready_timeout=20)
        DAEMONS.append(self)

    def rss_kib(self, pid=None):
        return benchlib.status_kb(pid or self.proc.pid, "VmRSS")

    def spawner_rss_kib(self):
        sp = self.spawner()
        return self.rss_kib(sp) if sp else 0

    def cpu_s(self):
        return benchlib.cpu_s(self.proc.pid)[0]


def run_ms(argv, env=None):
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
    return (time.perf_counter() - t0) * 1000


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def new_clones(true_body, py_body):
    """The first task of NEW_CLONES clones never seen before, interleaved."""
    on = Daemon("new-clones-spawner", True, monitor=True)
    zyg = Daemon("new-clones-pool", True, pool=True, zygote=True, monitor=True)
    series = {k: [] for k in ("new clone: HTTP /bin/true, pool off (spawner on)",
                              "new clone: HTTP /bin/true, pool on",
                              "new clone: HTTP python print(1), pool off (spawner on)",
                              "new clone: HTTP python print(1), pool + zygote on",
                              "known clone: HTTP /bin/true, pool off (spawner on)",
                              "known clone: HTTP /bin/true, pool on")}
    names = list(series)
    runs = [(names[0], on, true_body), (names[1], zyg, true_body), (names[2], on, py_body),
            (names[3], zyg, py_body), (names[4], on, true_body), (names[5], zyg, true_body)]
    for i in range(5):  # warm-up (each daemon's first task is a miss), uncounted
        for name, d, body in runs:
            d.exec(body, clone="warm%d" % i)
    z0 = zyg.pool()
    l0 = load()
    for i in range(NEW_CLONES):
        order = runs[i % len(runs):] + runs[:i % len(runs)]
        for name, d, body in order:
            new = name.startswith("new")  # else the clone of the warm-up's first round
            series[name].append(d.exec(body, clone="nc%d-%d" % (i, names.index(name))
                                       if new else "warm0"))
    z1 = zyg.pool()
    print("## First task of a new clone (%d clones each, interleaved)\n" % NEW_CLONES)
    print("Load average before / after: %s / %s.\n" % (l0, load()))
    print("| what | p50 ms | p90 ms | p99 ms | mean ms |")
    print("|---|---|---|---|---|")
    for name, v in series.items():
        print("| %s | %.2f | %.2f | %.2f | %.2f |" % (name, pct(v, 50), pct(v, 90), pct(v, 99),
                                                   statistics.mean(v)))
    print("\nServed by sandboxes pooled for any clone: %d of %d tasks, %d of them "
          "by a zygote; misses %d.\n" % (
              z1.get("anyCloneHits", 0) - z0.get("anyCloneHits", 0), 3 * NEW_CLONES,
              z1.get("zygoteHits", 0) - z0.get("zygoteHits", 0),
              z1.get("misses", 0) - z0.get("misses", 0)))
    on.stop()
    zyg.stop()


def main():
    print("Network policy of every daemon: %s.\n" % NET)
    on, off = Daemon("spawner-on", True), Daemon("spawner-off", False)
    pool = Daemon("pool-on", True, pool=True)
    zyg = Daemon("zygote-on", True, pool=True, zygote=True)
    time.sleep(1)
    rss_idle = {"on": on.rss_kib(), "off": off.rss_kib(), "pool": pool.rss_kib(),
                "spawner": on.spawner_rss_kib()}
    true_body = {"command": ["/bin/true"]}
    py_body = {"language": "python", "code": "print(1)"}
    node_body = {"language": "node", "code": "0"}
    series = {k: [] for k in ("bwrap /bin/true", "HTTP /bin/true, spawner on",
                              "HTTP /bin/true, spawner off", "bare python3 -c print(1)",
                              "HTTP python print(1), spawner on",
                              "HTTP python print(1), spawner off",
                              "HTTP /bin/true, pool on", "HTTP python print(1), pool on",
                              "HTTP python print(1), pool + zygote on",
                              "bare node -e 0", "HTTP node 0, spawner on",
                              "HTTP node 0, pool on", "HTTP node 0, pool + zygote on")}
    steps = [
        ("bwrap /bin/true", lambda: run_ms(BWRAP + ["/bin/true"])),
        ("HTTP /bin/true, spawner on", lambda: on.exec(true_body)),
        ("HTTP /bin/true, spawner off", lambda: off.exec(true_body)),
        ("bare python3 -c print(1)", lambda: run_ms(["/usr/bin/python3", "-c", "print(1)"])),
        ("HTTP python print(1), spawner on", lambda: on.exec(py_body)),
        ("HTTP python print(1), spawner off", lambda: off.exec(py_body)),
        ("HTTP /bin/true, pool on", lambda: pool.exec(true_body)),
        ("HTTP python print(1), pool on", lambda: pool.exec(py_body)),
        ("HTTP python print(1), pool + zygote on", lambda: zyg.exec(py_body)),
        ("bare node -e 0", lambda: run_ms(["/usr/bin/node", "-e", "0"], BARE_ENV)),
        ("HTTP node 0, spawner on", lambda: on.exec(node_body)),
        ("HTTP node 0, pool on", lambda: pool.exec(node_body)),
        ("HTTP node 0, pool + zygote on", lambda: zyg.exec(node_body)),
    ]
    for _ in range(10):  # warm-up, uncounted
        for _, fn in steps:
            fn()
    load0 = load()
    cpu0 = {"on": on.cpu_s(), "off": off.cpu_s(), "pool": pool.cpu_s()}
    for i in range(ROUNDS):
        order = steps[i % len(steps):] + steps[:i % len(steps)]
        for name, fn in order:
            series[name].append(fn())
    cpu1 = {"on": on.cpu_s(), "off": off.cpu_s(), "pool": pool.cpu_s()}
    load1 = load()
    rss_after = {"on": on.rss_kib(), "off": off.rss_kib(), "pool": pool.rss_kib(),
                 "spawner": on.spawner_rss_kib()}
    print("## Side by side, interleaved (%d rounds, %s)\n" % (ROUNDS, time.strftime("%Y-%m-%d %H:%M")))
    print("Load average before / after: %s / %s (2 cores, shared machine).\n" % (load0, load1))
    print("| what | p50 ms | p90 ms | p99 ms | mean ms |")
    print("|---|---|---|---|---|")
    for name, v in series.items():
        print("| %s | %.2f | %.2f | %.2f | %.2f |" % (name, pct(v, 50), pct(v, 90), pct(v, 99),
                                                   statistics.mean(v)))
    med = {k: pct(v, 50) for k, v in series.items()}
    print("\nRatios of p50: HTTP /bin/true / bwrap: spawner on %.2f, off %.2f, pool on %.2f "
          "(goal <= 0.5); HTTP python / bare python3: on %.2f, off %.2f, pool on %.2f, "
          "pool + zygote on %.2f (goal <= 1.0).\n" % (
              med["HTTP /bin/true, spawner on"] / med["bwrap /bin/true"],
              med["HTTP /bin/true, spawner off"] / med["bwrap /bin/true"],
              med["HTTP /bin/true, pool on"] / med["bwrap /bin/true"],
              med["HTTP python print(1), spawner on"] / med["bare python3 -c print(1)"],
              med["HTTP python print(1), spawner off"] / med["bare python3 -c print(1)"],
              med["HTTP python print(1), pool on"] / med["bare python3 -c print(1)"],
              med["HTTP python print(1), pool + zygote on"] / med["bare python3 -c print(1)"]))
    print("HTTP node 0 / bare node -e 0: spawner on %.2f, pool on %.2f, pool + zygote on %.2f.\n"
          % (med["HTTP node 0, spawner on"] / med["bare node -e 0"],
             med["HTTP node 0, pool on"] / med["bare node -e 0"],
             med["HTTP node 0, pool + zygote on"] / med["bare node -e 0"]))
    print("Pool after the rounds: %s; with zygotes: %s.\n" % (json.dumps(pool.pool()),
                                                            json.dumps(zyg.pool())))
    # each daemon's tasks: /bin/true and python, and node on "on" and "pool"
    n = {"on": 3 * ROUNDS, "off": 2 * ROUNDS, "pool": 3 * ROUNDS}
    print("Daemon process CPU per task (its own utime+stime, not its children's): spawner on "
          "%.2f ms, off %.2f ms, pool on %.2f ms.\n" % (
              (cpu1["on"] - cpu0["on"]) / n["on"] * 1000,
              (cpu1["off"] - cpu0["off"]) / n["off"] * 1000,
              (cpu1["pool"] - cpu0["pool"]) / n["pool"] * 1000))
    print("| memory (VmRSS KiB) | daemon, spawner on | its spawner | daemon, spawner off | "
          "daemon, pool on |")
    print("|---|---|---|---|---|")
    print("| idle | %d | %d | %d | %d |" % (rss_idle["on"], rss_idle["spawner"], rss_idle["off"],
                                           rss_idle["pool"]))
    print("| after the rounds | %d | %d | %d | %d |\n" % (
        rss_after["on"], rss_after["spawner"], rss_after["off"], rss_after["pool"]))
    new_clones(true_body, py_body)
    # Throughput, alternated: off, on, off, on.
    if not SECONDS:
        for d in (on, off, pool, zyg):
            d.stop()
        return
    load_bin = benchlib.build(TMP, "api_load.c", "-pthread")
    print("| %d clients, %d s | load avg before | tasks/s | p50 ms | p99 ms | errors | "
          "pool hits / misses |" % (CLIENTS, SECONDS))
    print("|---|---|---|---|---|---|---|")
    for d in (off, on, pool, off, on, pool):
        l0 = load()
        p0 = d.pool() if d is pool else None
        res = benchlib.api_load(load_bin, d.port, CLIENTS, SECONDS, 2)
        p1 = d.pool() if d is pool else None
        hm = "%d / %d" % (p1["hits"] - p0["hits"], p1["misses"] - p0["misses"]) if p0 else ""
        print("| %s | %s | %.1f | %.2f | %.2f | %d | %s |" % (
            d.name, l0, res["per_s"], res["p50_ms"], res["p99_ms"], res["errors"], hm))
    print("\nPool after the load: %s." % json.dumps(pool.pool()))
    on.stop()
    off.stop()
    pool.stop()
    zyg.stop()


try:
    main()
finally:
    for dm in DAEMONS:  # before the state dirs go: their images are unmounted
        dm.stop()
    shutil.rmtree(TMP, ignore_errors=True)
