#!/usr/bin/env python3
"""Exec latency in a live session against one-shot tasks, and how often the
session's CPU quota throttled, for one or more sandboxd binaries run side by
side (interleaved rounds, so that the machine's load is shared alike).

Each binary gets a daemon of its own (temporary state directory, a free
loopback port, --net none). Per round and binary: R execs of CMD in the
session `bench`, then R one-shot execs of CMD. At the end, the session's
cgroup's cpu.stat (nr_periods, nr_throttled) is read (v1: it counts its
tasks' own cgroups too: a parent's quota throttles its subtree).

  bench/session_exec.py [--rounds 5] [--per 20] [--cmd 'python3 -c pass']
                        build/sandboxd [/work/main/build/sandboxd ...]
"""
import argparse
import glob
import os
import re
import shlex
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import sbxtest  # noqa: E402

TOKEN = "op-" + "0123456789abcdef0123456789abc"
EXT = {"X-Sandbox-Extended": "1"}


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per", type=int, default=20)
    ap.add_argument("--cmd", default="python3 -c pass")
    ap.add_argument("binaries", nargs="+")
    a = ap.parse_args()
    cmd = shlex.split(a.cmd)
    ds, dirs = [], []
    for b in a.binaries:
        sbxtest.SANDBOXD = os.path.abspath(b)
        st = tempfile.mkdtemp(prefix="sbx-sessbench-")
        dirs.append(st)
        d = sbxtest.ServeDaemon(st, TOKEN).start(timeout=30)
        s, body, _ = d.req("POST", "/runtime/start", {"sessionID": "bench"}, headers=EXT)
        assert s == 200, (s, body)
        ds.append(d)
    lat = {b: {"session": [], "oneshot": []} for b in a.binaries}
    try:
        for _ in range(a.rounds):
            for b, d in zip(a.binaries, ds):
                for kind in ("session", "oneshot"):
                    for _ in range(a.per):
                        body = {"command": cmd}
                        if kind == "session":
                            body["sessionID"] = "bench"
                        t0 = time.monotonic()
                        s, r, _ = d.req("POST", "/runtime/exec", body, headers=EXT)
                        lat[b][kind].append((time.monotonic() - t0) * 1e3)
                        assert s == 200 and r["exitCode"] == 0, (s, r)
        print("load average %.1f %.1f %.1f; %d x %d execs of %r per kind" % (
            os.getloadavg() + (a.rounds, a.per, a.cmd)))
        for b, d in zip(a.binaries, ds):
            m = re.search(r"sandbox=(session-[0-9a-f-]+)", d.output(whole=True))
            thr = ""
            for path in glob.glob("/sys/fs/cgroup/cpu*/sandboxd/%s/cpu.stat" % m.group(1)):
                st = dict(line.split() for line in open(path))
                thr = "throttled in %s of %s periods" % (st["nr_throttled"], st["nr_periods"])
            for kind in ("session", "oneshot"):
                xs = lat[b][kind]
                print("%-32s %-8s p50 %6.1f ms  p90 %6.1f  p99 %6.1f  max %6.1f  %s" % (
                    b, kind, pct(xs, 50), pct(xs, 90), pct(xs, 99), max(xs),
                    thr if kind == "session" else ""))
    finally:
        for d in ds:
            d.stop()
        for st in dirs:
            shutil.rmtree(st, ignore_errors=True)


if __name__ == "__main__":
    main()
