#!/usr/bin/env bash
# Start-up cost of one sandbox, side by side in one run: `sandboxd run` against
# bubblewrap with equivalent binds and against the bare command, for /bin/true
# and `python3 -c pass`. Needs root, hyperfine and bwrap (scripts/deps.sh).
# bwrap --unshare-all has no network, so sandboxd runs with --net none here
# (the proxy policy's egress set-up is measured by bench/egress.sh).
#
# The commands are interleaved: ROUNDS rounds, each running every command
# RUNS/ROUNDS times (after 2 warm-up runs), so a change of the shared
# machine's load weighs on all of them alike; the figures are over all the
# runs of all rounds. SANDBOXD_BEFORE=PATH adds a second sandboxd binary (an
# older build) to every round. The load average is printed before and after.
#
# Usage: bench/startup.sh [RUNS] [ROUNDS]   (results in bench/results/startup.md)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-300}
rounds=${2:-10}
per=$(((runs + rounds - 1) / rounds))
sbx=${SANDBOXD:-build/sandboxd}
before=${SANDBOXD_BEFORE:-}
# One workspace each: sandboxd hands its workspace to the sandbox's host uid.
ws=$(mktemp -d /tmp/sbx-bench-XXXXXX)
wsb=$(mktemp -d /tmp/sbx-bench-before-XXXXXX)
wb=$(mktemp -d /tmp/sbx-bench-bwrap-XXXXXX)
chmod 755 "$wb"
out=bench/results
mkdir -p "$out"
tmp=$(mktemp -d /tmp/sbx-bench-json-XXXXXX)
trap 'rm -rf "$ws" "$wsb" "$wb" "$tmp"' EXIT

bwrap_cmd="bwrap --unshare-all --die-with-parent --ro-bind /usr /usr \
 --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
 --symlink usr/sbin /sbin --ro-bind /etc/ld.so.cache /etc/ld.so.cache \
 --proc /proc --dev /dev --tmpfs /tmp --tmpfs /home/runner --bind $wb /workspace \
 --chdir /workspace --uid 10001 --gid 10001 --new-session"

: > "$out/startup.md"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/startup.md"
echo >> "$out/startup.md"
for what in "/bin/true" "/usr/bin/python3 -c pass"; do
  name=$(echo "$what" | tr -c 'a-z0-9\n' '_')
  cmds=(--command-name "bare" "$what"
        --command-name "bwrap" "$bwrap_cmd $what"
        --command-name "sandboxd run" "$sbx run --net none --workspace $ws -- $what")
  if [ -n "$before" ]; then
    cmds+=(--command-name "sandboxd run (before)"
           "$before run --net none --workspace $wsb -- $what")
  fi
  for r in $(seq "$rounds"); do
    hyperfine -N --warmup 2 --runs "$per" --export-json "$tmp/$name-$r.json" "${cmds[@]}" \
      >/dev/null 2>&1
  done
  python3 - "$what" "$tmp"/"$name"-*.json >> "$out/startup.md" <<'PY'
import json, statistics, sys
times, cpu = {}, {}
for path in sys.argv[2:]:
    for r in json.load(open(path))["results"]:
        times.setdefault(r["command"], []).extend(r["times"])
        # user + system time of the command and every process it waited for
        cpu.setdefault(r["command"], []).append(r["user"] + r["system"])
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]
n = len(times["bare"])
print("`%s` (%d runs each, %d rounds interleaved)\n" % (sys.argv[1], n, len(sys.argv) - 2))
print("| command | median ms | mean ms | p90 ms | min ms | CPU ms (user+sys, mean) |")
print("|---|---|---|---|---|---|")
for name, t in times.items():
    print("| %s | %.2f | %.2f | %.2f | %.2f | %.2f |" % (name, statistics.median(t) * 1000,
          statistics.mean(t) * 1000, pct(t, 0.9) * 1000, min(t) * 1000,
          statistics.mean(cpu[name]) * 1000))
med = {k: statistics.median(v) for k, v in times.items()}
print("\nsandboxd run / bwrap (medians): %.2f" % (med["sandboxd run"] / med["bwrap"]))
if "sandboxd run (before)" in med:
    print("sandboxd run (before) / bwrap (medians): %.2f"
          % (med["sandboxd run (before)"] / med["bwrap"]))
print()
PY
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/startup.md"
cat "$out/startup.md"
