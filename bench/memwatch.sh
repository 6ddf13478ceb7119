#!/usr/bin/env bash
# CPU time of the rlimit-mode memory watch: the sandbox's init (pid 1 inside)
# samples the sandbox's memory every 50 ms. Runs a sandbox of N sleeping
# processes for SECONDS and reads init's utime + stime from the host.
# Usage: bench/memwatch.sh [N] [SECONDS]   (root; build/sandboxd)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20}
secs=${2:-10}
sandboxd=${SANDBOXD:-build/sandboxd}
script="for i in \$(seq $n); do sleep $((secs + 5)) & done; sleep $((secs + 3))"
"$sandboxd" run --cgroup rlimit --net none --timeout $((secs + 30)) -- sh -c "$script" \
  >/dev/null 2>&1 &
daemon=$!
sleep 2
python3 - "$daemon" "$secs" "$n" <<'PY'
import glob, os, sys, time
daemon, secs, n = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
def kids(p):
    out = []
    for t in glob.glob("/proc/%d/task/*/children" % p):
        out += [int(x) for x in open(t).read().split()]
    return out
todo, init = [daemon], None
while todo:
    p = todo.pop()
    ns = [l for l in open("/proc/%d/status" % p) if l.startswith("NSpid")][0].split()
    if len(ns) > 2 and ns[-1] == "1":
        init = p
    todo += kids(p)
def cpu(p):
    f = open("/proc/%d/stat" % p).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
a, t0 = cpu(init), time.monotonic()
time.sleep(secs)
b, t1 = cpu(init), time.monotonic()
print("memory watch of a sandbox with %d processes: %.2f%% of one core (%.2f s CPU in %.1f s)"
      % (n + 2, 100 * (b - a) / (t1 - t0), b - a, t1 - t0))
PY
wait "$daemon" || true
