#!/usr/bin/env bash
# API round trip: `POST /runtime/exec {"command":["/bin/true"]}` against a real
# `sandboxd serve` on loopback (--net none, --max-concurrent 32, its own state
# dir and a free port), measured by bench/api_load.c (built here): C closed-loop
# clients, one keep-alive connection each, every answer checked (200, task
# "succeeded"); a failed answer is an error, never a latency.
#
#   0. the HTTP floor: `GET /healthz`, one client, N sequential requests;
#   1. one client, N sequential requests (after 20 uncounted): p50/p99, tasks/s;
#   2. 32 clients for S seconds (after 2 s uncounted): tasks/s, p50/p99;
#   3. the daemon's VmRSS and VmHWM (/proc/PID/status): idle (ready, before any
#      request), after phase 1, at the end of phase 2; and the CPU time of the
#      daemon and of its children (the sandboxes) per task in phases 1 and 2.
#
# The machine is shared: before each phase the bench waits (up to --quiet-wait
# seconds) until the machine is idle and reports the load it saw.
# --perf adds, after the measured phases, N sequential requests and a 32-client
# run of 10 s under `perf record -a -g` (system-wide: much of the work is in
# processes the daemon forks and in kernel workers), summarised by
# bench/api_perf.py, and N sequential requests under `perf trace -s -p DAEMON`
# (the daemon's syscalls): bench/results/api-perf.txt.
#
# Needs root, gcc, curl, python3 (scripts/deps.sh); --perf also needs perf
# (Debian: linux-perf). Usage: bench/api.sh [--requests N] [--duration S] [--clients C]
#                                 [--quiet-wait S] [--perf]
# Results: bench/results/api.md (and api.json). SANDBOXD=path picks the binary;
# BENCH_YAML adds lines to the daemon's configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) != 0 ]]; then
  echo "bench/api.sh: needs root (sandboxes, cgroups)" >&2
  exit 1
fi
requests=500 duration=15 clients=32 quiet_wait=120 perf=0
while (($#)); do
  case $1 in
    --requests) requests=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --quiet-wait) quiet_wait=$2; shift 2 ;;
    --perf) perf=1; shift ;;
    *) echo "usage: bench/api.sh [--requests N] [--duration S] [--clients C] [--quiet-wait S] [--perf]" >&2
       exit 2 ;;
  esac
done
sbx=${SANDBOXD:-build/sandboxd}
out=bench/results
mkdir -p "$out"
tmp=$(mktemp -d /tmp/sbx-api-bench-XXXXXX)
state="$tmp/state"
pid=
cleanup() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

gcc -O2 -Wall -Wextra -pthread -o "$tmp/api_load" bench/api_load.c
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')   # 32 characters
# The queue is never needed by a closed loop of <= max-concurrent clients; it is
# made large anyway so that a 429 can never be what is measured.
cat > "$tmp/config.yaml" <<EOF
server:
  queue_size: 4096
  queue_per_tenant: 4096
EOF
# More YAML for the daemon (e.g. "pool: {spawner: false}" to compare).
[[ -n ${BENCH_YAML:-} ]] && printf '%s\n' "$BENCH_YAML" >>"$tmp/config.yaml"

# Busy cores of the whole machine over the next second.
busy() {
  python3 - <<'PY'
import time
def snap():
    v = list(map(int, open("/proc/stat").readline().split()[1:9]))
    return sum(v), v[3] + v[4] + v[7]
t0, i0 = snap(); time.sleep(1); t1, i1 = snap()
import os
print("%.2f" % (os.cpu_count() * (1 - (i1 - i0) / max(1, t1 - t0))))
PY
}
# Wait until the machine is idle (< 0.25 busy cores), at most --quiet-wait s.
quiet() {
  local b start=$SECONDS
  while :; do
    b=$(busy)
    if python3 -c "import sys; sys.exit(0 if $b < 0.25 else 1)" || ((SECONDS - start >= quiet_wait)); then
      echo "$b"
      return
    fi
  done
}
mem() { awk '/^VmRSS|^VmHWM/ {printf "%s%s", sep, $2; sep=" "} END {print ""}' "/proc/$pid/status"; }
# utime stime cutime cstime of the daemon, in clock ticks.
cpu() { awk '{print $14, $15, $16, $17}' "/proc/$pid/stat"; }

"$sbx" serve --config "$tmp/config.yaml" --listen "127.0.0.1:$port" --state-dir "$state" \
  --token "$token" --net none --max-concurrent 32 --log-level warn >"$tmp/daemon.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$tmp/daemon.log" >&2; exit 1; }
  sleep 0.1
done
curl -sf "http://127.0.0.1:$port/readyz" >/dev/null || { echo "daemon not ready" >&2; cat "$tmp/daemon.log" >&2; exit 1; }
sleep 1
mem_idle=$(mem)
load=(--port "$port" --token "$token" --expect '"exitCode":0,')

echo "phase 0: GET /healthz, 1 client, $requests sequential requests" >&2
"$tmp/api_load" --port "$port" --token "$token" --method GET --path /healthz --expect '"ok":true' \
  --clients 1 --requests "$requests" --warmup-requests 20 >"$tmp/healthz.json"

echo "phase 1: 1 client, $requests sequential requests" >&2
busy1=$(quiet)
cpus0=$(cpu)
"$tmp/api_load" "${load[@]}" --clients 1 --requests "$requests" --warmup-requests 20 \
  --raw "$tmp/lat1.txt" >"$tmp/seq.json" || true   # errors are counted and reported
cpus1=$(cpu)
mem_seq=$(mem)

echo "phase 2: $clients clients, ${duration} s" >&2
busy2=$(quiet)
cpu0=$(cpu)
stat0="$(date +%s.%N) $(head -1 /proc/stat)"
"$tmp/api_load" "${load[@]}" --clients "$clients" --duration "$duration" --warmup 2 \
  --raw "$tmp/lat32.txt" >"$tmp/par.json" || true
stat1="$(date +%s.%N) $(head -1 /proc/stat)"
cpu1=$(cpu)
mem_load=$(mem)

if ((perf)); then
  : >"$out/api-perf.txt"
  for run in seq par; do
    if [[ $run == seq ]]; then
      what="1 client, $requests sequential requests"
      args=(--clients 1 --requests "$requests")
    else
      what="$clients clients, 10 s"
      args=(--clients "$clients" --duration 10)
    fi
    echo "perf: $what under perf record -a -g" >&2
    quiet >/dev/null
    perf record -a -g -o "$tmp/perf.data" -- "$tmp/api_load" "${load[@]}" "${args[@]}" \
      >"$tmp/perf-run.json" 2>"$tmp/perf-record.log" || true
    n=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ok"])' "$tmp/perf-run.json")
    {
      echo "## perf record -a -g: $what"
      echo
      echo "load: $(cat "$tmp/perf-run.json")"
      echo
      perf script -i "$tmp/perf.data" -F comm,pid,period,ip,sym,dso 2>/dev/null |
        python3 bench/api_perf.py "$pid" "$n"
      echo
    } >>"$out/api-perf.txt"
  done
  echo "perf: 1 client, $requests sequential requests under perf trace -s -p DAEMON" >&2
  quiet >/dev/null
  perf trace -s -p "$pid" -o "$tmp/trace.txt" &
  tracer=$!
  sleep 2
  "$tmp/api_load" "${load[@]}" --clients 1 --requests "$requests" >"$tmp/trace-run.json" || true
  kill -INT "$tracer"
  wait "$tracer" || true
  {
    echo "## perf trace -s -p DAEMON: 1 client, $requests sequential requests (plus 2 s idle)"
    echo
    echo "load: $(cat "$tmp/trace-run.json")"
    echo '```'
    grep -v '^$' "$tmp/trace.txt"
    echo '```'
  } >>"$out/api-perf.txt"
fi

t_term=$(date +%s.%N)
kill -TERM "$pid"
for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
stopped=$(kill -0 "$pid" 2>/dev/null && echo no || python3 -c "import time; print('yes, in %.2f s' % (time.time() - $t_term))")
wait "$pid" 2>/dev/null || true
pid=

python3 - "$tmp" "$out" "$sbx" "$requests" "$clients" "$duration" "$mem_idle" "$mem_seq" \
  "$mem_load" "$cpu0" "$cpu1" "$stat0" "$stat1" "$busy1" "$busy2" "$stopped" \
  "$cpus0" "$cpus1" <<'PY'
import json, os, subprocess, sys, time
(tmp, out, sbx, requests, clients, duration, m_idle, m_seq, m_load, cpu0, cpu1, st0, st1,
 busy1, busy2, stopped, cpus0, cpus1) = sys.argv[1:]
seq = json.load(open(os.path.join(tmp, "seq.json")))
par = json.load(open(os.path.join(tmp, "par.json")))
hz = json.load(open(os.path.join(tmp, "healthz.json")))
tick = os.sysconf("SC_CLK_TCK")
def cpu_delta(a, b):
    a, b = list(map(int, a.split())), list(map(int, b.split()))
    return (b[0] + b[1] - a[0] - a[1]) / tick, (b[2] + b[3] - a[2] - a[3]) / tick
own, children = cpu_delta(cpu0, cpu1)
own_s, children_s = cpu_delta(cpus0, cpus1)
n_seq = seq["answered"]  # the counters also saw the warm-up requests
# user nice system idle iowait irq softirq steal (guest time is already in user)
(w0, s0), (w1, s1) = [(float(s.split()[0]), list(map(int, s.split()[2:10]))) for s in (st0, st1)]
d = [b - a for a, b in zip(s0, s1)]
window = w1 - w0  # warm-up and the late answers included
machine_cpu_s = (sum(d) - d[3] - d[4] - d[7]) / tick
machine_busy = machine_cpu_s / window
steal = d[7] / tick / window
# ... and the answers that came after the deadline: all of them count here.
per_task = lambda s: s / par["answered"] * 1000 if par["answered"] else 0
kb = lambda m: [int(x) for x in m.split()]
mi, ms, ml = kb(m_idle), kb(m_seq), kb(m_load)
mib = lambda k: "%.1f" % (k / 1024)
res = {"date": time.strftime("%Y-%m-%d"), "sandboxd": sbx, "healthz": hz, "sequential": seq,
       "concurrent": par,
       "sequential_cpu_s": {"daemon": own_s, "children": children_s, "requests": n_seq},
       "memory_kib": {"idle": {"VmHWM": mi[0], "VmRSS": mi[1]},
                      "after_sequential": {"VmHWM": ms[0], "VmRSS": ms[1]},
                      "end_of_load": {"VmHWM": ml[0], "VmRSS": ml[1]}},
       "load_cpu_s": {"daemon": own, "children": children, "client": par["cpu_s"], "window_s": window,
                      "machine_busy_cores": machine_busy, "steal_cores": steal},
       "busy_cores_before": {"sequential": float(busy1), "concurrent": float(busy2)},
       "stopped_by_sigterm": stopped}
json.dump(res, open(os.path.join(out, "api.json"), "w"), indent=1)
goal = lambda ok: "met" if ok else "**not met**"
lines = [
    "`POST /runtime/exec {\"command\":[\"/bin/true\"]}` on loopback, `--net none`, "
    "`--max-concurrent 32`, keep-alive connections (%s)\n" % res["date"],
    "| clients | requests (ok / errors) | seconds | tasks/s | p50 ms | p90 ms | p99 ms | max ms |",
    "|---|---|---|---|---|---|---|---|"]
for r, what in ((seq, "1 (sequential)"), (par, str(par["clients"]))):
    lines.append("| %s | %d / %d | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f |" % (
        what, r["ok"], r["errors"], r["elapsed_s"], r["per_s"], r["p50_ms"], r["p90_ms"],
        r["p99_ms"], r["max_ms"]))
lines += ["", "HTTP floor, `GET /healthz`, 1 client, %d requests: p50 %.3f ms, p99 %.3f ms." % (
              hz["ok"], hz["p50_ms"], hz["p99_ms"]),
          "CPU per task with 1 client: daemon %.2f ms, its children %.2f ms." % (
              own_s / n_seq * 1000, children_s / n_seq * 1000)]
lines += ["",
          "| daemon memory | VmRSS MiB | VmHWM MiB |", "|---|---|---|",
          "| idle (ready, no request yet) | %s | %s |" % (mib(mi[1]), mib(mi[0])),
          "| after the sequential run | %s | %s |" % (mib(ms[1]), mib(ms[0])),
          "| end of the %s-client load | %s | %s |" % (par["clients"], mib(ml[1]), mib(ml[0])),
          "",
          "CPU during the %s-client run (%.1f s with the warm-up): daemon %.2f s (%.2f ms/task), "
          "its children (sandbox set-up and tasks) %.2f s (%.2f ms/task), load generator "
          "%.2f s (%.2f ms/task); machine %.2f of %d cores busy (%.2f ms of CPU per task), "
          "%.2f cores stolen by the hypervisor." % (
              par["clients"], window, own, per_task(own), children, per_task(children),
              par["cpu_s"], per_task(par["cpu_s"]), machine_busy, os.cpu_count(),
              per_task(machine_cpu_s), steal),
          "Busy cores before each phase: %s and %s. Stopped by SIGTERM: %s." % (
              busy1, busy2, stopped),
          "",
          "Goal: p50 < 10 ms (1 client: %.2f ms, %s; %s clients: %.2f ms, %s), "
          ">= 150 tasks/s (%s clients: %.1f, %s). With C clients in a closed loop, p50 is about "
          "C / (tasks/s): under 10 ms at %s clients would take %d tasks/s." % (
              seq["p50_ms"], goal(seq["p50_ms"] < 10), par["clients"], par["p50_ms"],
              goal(par["p50_ms"] < 10), par["clients"], par["per_s"], goal(par["per_s"] >= 150),
              par["clients"], par["clients"] * 100)]
for r in (seq, par):
    if r["errors"] or r["warmup_errors"]:
        lines.append("\nErrors with %d clients: %d (warm-up %d), first: %s" % (
            r["clients"], r["errors"], r["warmup_errors"], r["first_error"]))
text = "\n".join(lines) + "\n"
open(os.path.join(out, "api.md"), "w").write(text)
print(text)
PY
