#!/usr/bin/env python3
"""Many-client throughput of `POST /runtime/exec {"command":["/bin/true"]}`,
and where the whole machine's CPU goes per task (issue 10's 1,000 tasks/s).

Daemons run at once, one per (binary, network policy): each LABEL=PATH given
(default: build/sandboxd) with `--net none` and with `--net proxy`. Then, for
R rounds, each daemon in turn gets C closed-loop clients for S seconds
(bench/api_load.c, built here), so that what is compared is interleaved in
one run. For each run it prints:

  - tasks/s, p50, p99 (api_load: every answer checked, 200 and "exitCode":0);
  - the load average before the run;
  - CPU per task, ms, from the deltas over the run of
      * the daemon's own utime+stime (/proc/PID/stat),
      * the spawner's own utime+stime,
      * the spawner's reaped children (cutime+cstime: every sandbox's init,
        and through it the task's processes),
      * every kernel thread (kworkers: network namespaces are torn down in a
        workqueue, cgroups freed from one; ksoftirqd, rcu): the machine's,
        so other work on the machine shows there too, but far less;
      * the whole machine's busy time (/proc/stat: user+nice+system+irq+
        softirq+steal), which on a shared machine holds everyone else's
        work too: read it next to the load average.

With --floor, each round also runs bench/ns_floor.c (built here) for S
seconds: 2 workers cloning a child with the sandbox's namespaces that execs
/bin/true, no daemon: what the kernel alone costs per task; then the same
without the network namespace (--no-net) and without any (--no-ns). Its
rows give the workers' and their children's CPU in the "sandboxes" column.

Needs root, gcc. Usage:
  bench/throughput.py [--rounds R] [--clients C] [--seconds S]
                      [--nets none,proxy] [--yaml LINE] [--floor] [LABEL=PATH ...]
Prints a markdown report."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import benchlib
from benchlib import HZ, load


PF_KTHREAD = 0x00200000


def kthreads_cpu():
    """utime+stime of every kernel thread (kworkers: e.g. the network
    namespaces' teardown; ksoftirqd; rcu), in seconds."""
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                v = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(v[6]) & PF_KTHREAD:
            total += int(v[11]) + int(v[12])
    return total / HZ


def machine_busy():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / HZ


class Daemon(benchlib.Daemon):
    def __init__(self, tmp, label, path, net, yaml):
        super().__init__(os.path.join(tmp, label + "-" + net), path,
                         "server:\n  queue_size: 4096\n  queue_per_tenant: 4096\n" +
                         "".join(line + "\n" for line in yaml),
                         ("--net", net, "--max-concurrent", "32"), name="%s/%s" % (label, net))

    def snap(self):
        sp = self.spawner()
        d = benchlib.cpu_s(self.proc.pid)
        s = benchlib.cpu_s(sp) if sp else (0.0, 0.0)
        return {"daemon": d[0], "spawner": s[0], "sandboxes": s[1] + d[1],
                "kthreads": kthreads_cpu(), "machine": machine_busy()}


def run(d, loader, clients, seconds):
    la = load()
    before = d.snap()
    t0 = time.monotonic()
    r = benchlib.api_load(loader, d.port, clients, seconds, 1)
    wall = time.monotonic() - t0
    after = d.snap()
    n = r.get("answered") or 1
    cpu = {k: (after[k] - before[k]) * 1000.0 / n for k in before}
    return {"load": la, "rps": r["per_s"], "p50": r["p50_ms"], "p99": r["p99_ms"],
            "errors": r.get("errors", 0), "n": n, "wall": wall, "cpu": cpu}


def floor_row(floor, seconds, variant=""):
    la = load()
    k0 = kthreads_cpu()
    out = subprocess.run([floor, "--seconds", str(seconds)] + ([variant] if variant else []),
                         capture_output=True, text=True, timeout=seconds + 60, check=True)
    k1 = kthreads_cpu()
    r = json.loads(out.stdout)
    return ("| kernel floor (ns_floor%s) | %s | %.1f | | | | | %.2f | %.2f | %.2f |"
            % (" " + variant if variant else "", la, r["per_s"], r["cpu_ms_per_task_own"],
               (k1 - k0) * 1000 / r["tasks"], r["cpu_ms_per_task_machine"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--nets", default="none,proxy")
    ap.add_argument("--yaml", action="append", default=[])
    ap.add_argument("--floor", action="store_true")
    ap.add_argument("binaries", nargs="*")
    a = ap.parse_args()
    bins = []
    for b in a.binaries or ["new=" + benchlib.SANDBOXD]:
        label, _, path = b.partition("=")
        bins.append((label, os.path.abspath(path)))
    tmp = tempfile.mkdtemp(prefix="sbx-thru-bench-")
    loader = benchlib.build(tmp, "api_load.c", "-pthread")
    floor = benchlib.build(tmp, "ns_floor.c") if a.floor else None
    daemons = []
    try:
        for label, path in bins:
            for net in a.nets.split(","):
                daemons.append(Daemon(tmp, label, path, net, a.yaml))
        print("`bench/throughput.py %s`, %s UTC\n"
              % (" ".join(sys.argv[1:]), time.strftime("%Y-%m-%d %H:%M", time.gmtime())))
        print("| daemon | load | tasks/s | p50 ms | p99 ms | CPU ms/task: daemon | spawner "
              "| sandboxes | kthreads | machine |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for rnd in range(a.rounds):
            order = daemons if rnd % 2 == 0 else list(reversed(daemons))
            if a.floor:
                for variant in ("", "--no-net", "--no-ns"):
                    print(floor_row(floor, a.seconds, variant), flush=True)
            for d in order:
                r = run(d, loader, a.clients, a.seconds)
                c = r["cpu"]
                print("| %s | %s | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f |%s"
                      % (d.name, r["load"], r["rps"], r["p50"], r["p99"], c["daemon"],
                         c["spawner"], c["sandboxes"], c["kthreads"], c["machine"],
                         " %d errors" % r["errors"] if r["errors"] else ""), flush=True)
    finally:
        for d in daemons:
            d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
