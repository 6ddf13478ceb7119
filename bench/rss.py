#!/usr/bin/env python3
"""The daemon's memory (issue 10: idle < 10 MB, with a pool of 8 < 30 MB,
the memory of each pooled sandbox reported). For each binary given
(SANDBOXD, default build/sandboxd; SANDBOXD_BASE adds a second one, e.g.
main's, measured in the same run, each phase of both in turn), three
`sandboxd serve` daemons, one after the other:

  - `defaults`: no configuration file (the embedded defaults, as
    ./scripts/demo.sh runs it; only its listen address, state directory
    and token are given), measured when ready and idle for IDLE seconds,
    then right after N `POST /runtime/exec {"command":["/bin/true"]}` (the
    default network policy, proxy: the egress is set up per task) and
    again 12 s later (the daemon gives back what the load grew after 10 s
    without a store write);
  - `pool`: `pool.enabled: true, max_idle: 8`, idle, then after one task
    on each of 8 clones (8 misses, 8 sandboxes built ahead) and N tasks
    (`network.policy: none`, what the pool serves) round-robin over them;
  - `zygote`: the same with `pool.zygote: true` and python `print(1)`.

Printed for each: VmRSS and VmHWM of the daemon, Pss (smaps_rollup) of the
daemon and of its spawner (`sandboxd-spawn`), the daemon's RSS by mapping
(the executable, libc, other libraries, heap, other anonymous memory), the
pool's ready sandboxes and the memory they hold (`pool.memoryBytes` of the
extended /runtime/status, when the binary reports it). The machine's load
average goes with each row. Needs root. Usage: bench/rss.py [N] [IDLE]"""
import os
import re
import shutil
import sys
import tempfile
import time

import benchlib
from benchlib import load, status_kb

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
IDLE = float(sys.argv[2]) if len(sys.argv) > 2 else 3
TMP = tempfile.mkdtemp(prefix="sbx-rss-bench-")
BINS = [("this", benchlib.SANDBOXD)]
if os.environ.get("SANDBOXD_BASE"):
    BINS.append(("base", os.environ["SANDBOXD_BASE"]))
CLONES = 8
# The daemon gives back SQLite's page cache and its free heap after 10 s
# without a store write (daemon/serve.c, IDLE_SHRINK_MS).
SETTLE = 12


def pss_kb(pid):
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def by_mapping(pid, exe):
    """The RSS (KiB) of pid by what is mapped: the executable, libc (with
    ld.so and libm), other libraries, [heap], other anonymous memory."""
    out = {"exe": 0, "libc": 0, "libs": 0, "heap": 0, "anon": 0}
    name = None
    with open("/proc/%d/smaps" % pid) as f:
        for line in f:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                parts = line.split(None, 5)
                name = parts[5].strip() if len(parts) > 5 else ""
            elif line.startswith("Rss:"):
                kb = int(line.split()[1])
                base = os.path.basename(name)
                if name == exe:
                    k = "exe"
                elif re.match(r"(libc|libm|ld-linux-x86-64)\.so", base):
                    k = "libc"
                elif ".so" in base:
                    k = "libs"
                elif name == "[heap]":
                    k = "heap"
                else:
                    k = "anon"  # anonymous maps, stack, vdso, the store's shm
                out[k] += kb
    return out


class Daemon(benchlib.Daemon):
    def __init__(self, name, binary, config):
        super().__init__(os.path.join(TMP, name), binary, config)

    def wait_idle(self, n, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.pool().get("idle", 0) < n:
            time.sleep(0.1)

    def measure(self, phase):
        pid = self.proc.pid
        sp = self.spawner()
        m = by_mapping(pid, self.binary)
        p = self.pool()
        mem = p.get("memoryBytes")
        return {"daemon": self.name, "phase": phase, "load": load(),
                "rss": status_kb(pid, "VmRSS"), "hwm": status_kb(pid, "VmHWM"),
                "pss": pss_kb(pid), "sp_rss": status_kb(sp, "VmRSS") if sp else None,
                "sp_pss": pss_kb(sp) if sp else None, "map": m,
                "idle": p.get("idle") if p.get("enabled") else None,
                "pool_mem": mem, "per": p.get("memoryPerSandboxBytes")}


POOL = "pool:\n  enabled: true\n  max_idle: 8\n  idle_timeout: 10m\n"
KINDS = [
    ("defaults", None, {"command": ["/bin/true"]}),
    ("pool", POOL, {"command": ["/bin/true"], "network": {"policy": "none"}}),
    ("zygote", POOL + "  zygote: true\n",
     {"language": "python", "code": "print(1)", "network": {"policy": "none"}}),
]


def run_kind(label, binary, kind, config, body):
    d = Daemon("%s-%s" % (kind, label), binary, config)
    rows = []
    try:
        time.sleep(IDLE)
        rows.append(d.measure("idle"))
        if config is None:
            for _ in range(N):
                d.exec(body, "bench")
        else:
            for c in range(CLONES):
                d.exec(body, "c%d" % c)
            d.wait_idle(CLONES)
            for i in range(N):
                d.exec(body, "c%d" % (i % CLONES))
            d.wait_idle(CLONES)
        rows.append(d.measure("after %d tasks" % N))
        time.sleep(SETTLE)
        rows.append(d.measure("then idle %g s" % SETTLE))
    finally:
        d.stop()
    return rows


def mib(kb):
    return "-" if kb is None else "%.1f" % (kb / 1024)


def main():
    if os.geteuid() != 0:
        raise SystemExit("needs root")
    print("# bench/rss.py %d %g (%s)\n" % (N, IDLE, time.strftime("%Y-%m-%d %H:%M UTC",
                                                                   time.gmtime())))
    for label, b in BINS:
        print("- %s: %s" % (label, os.path.realpath(b)))
    print("\n| binary | daemon | phase | load | VmRSS | VmHWM | Pss | exe / libc / libs / heap "
          "/ anon | spawner RSS / Pss | pool ready | pool memory (per sandbox) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for kind, config, body in KINDS:
        for label, b in BINS:
            for r in run_kind(label, b, kind, config, body):
                m = r["map"]
                pm = "-"
                if r["pool_mem"] is not None:
                    pm = "%s MiB (%s)" % (mib(r["pool_mem"] / 1024), mib(r["per"] / 1024))
                print("| %s | %s | %s | %s | %s | %s | %s | %s / %s / %s / %s / %s | %s / %s | %s "
                      "| %s |" % (label, kind, r["phase"], r["load"], mib(r["rss"]), mib(r["hwm"]),
                                  mib(r["pss"]), mib(m["exe"]), mib(m["libc"]), mib(m["libs"]),
                                  mib(m["heap"]), mib(m["anon"]), mib(r["sp_rss"]),
                                  mib(r["sp_pss"]), "-" if r["idle"] is None else r["idle"], pm),
                      flush=True)
    print("\nMiB throughout; exe, libc (with ld.so and libm), libs, heap and anon split the "
          "daemon's VmRSS by mapping.")


try:
    main()
finally:
    shutil.rmtree(TMP, ignore_errors=True)
