#!/usr/bin/env bash
# What `sandboxctl exec -- true` costs a user, side by side in one run
# against a running daemon (--net none, loopback): sandboxctl itself, curl(1)
# sending the same POST /runtime/exec (the libcurl start-up sandboxctl paid
# before it spoke plain HTTP to http:// and unix: targets), and, when
# OLD_SANDBOXCTL names an earlier build, that one; then the start-up alone
# (`--help`: no request). Needs root and hyperfine (scripts/deps.sh).
# Usage: bench/ctl_exec.sh [RUNS]   (results in bench/results/ctl_exec.md)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-300}
sbx=${SANDBOXD:-build/sandboxd}
ctl=${SANDBOXCTL:-build/sandboxctl}
old=${OLD_SANDBOXCTL:-}
state=$(mktemp -d /tmp/sbx-bench-ctl-XXXXXX)
log=$state/log
out=bench/results
mkdir -p "$out"
token=bench-ctl-exec-token-0123456789
"$sbx" serve --listen 127.0.0.1:0 --state-dir "$state/s" --token "$token" --net none \
  --total-memory 0 --total-cpu 0 --total-pids 0 >"$log" 2>&1 &
pid=$!
trap 'kill -TERM $pid; wait $pid || true; rm -rf "$state"' EXIT
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$log")
  [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break
  sleep 0.1
done
url=http://127.0.0.1:$port
export SANDBOX_URL=$url SANDBOX_TOKEN=$token
body='{"command":["true"]}'
cmds=(--command-name "sandboxctl exec" "$ctl exec -- true"
      --command-name "curl POST /runtime/exec" \
      "curl -sf -o /dev/null -H 'Authorization: Bearer $token' -H 'Content-Type: application/json' -d '$body' $url/runtime/exec")
starts=(--command-name "sandboxctl --help" "$ctl --help")
if [[ -n $old ]]; then
  cmds+=(--command-name "old sandboxctl exec" "$old exec -- true")
  starts+=(--command-name "old sandboxctl --help" "$old --help")
fi
hyperfine -N --warmup 20 --runs "$runs" --export-json "$state/exec.json" "${cmds[@]}" >/dev/null
hyperfine -N --warmup 20 --runs "$runs" --export-json "$state/start.json" "${starts[@]}" >/dev/null
python3 - "$state/exec.json" "$state/start.json" "$runs" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" \
  > "$out/ctl_exec.md" <<'PY'
import json, sys
print("%s runs each, %s cores, load average %s\n" % (sys.argv[3], sys.argv[4], sys.argv[5]))
print("| command | median ms | mean ms | min ms | user ms | system ms |")
print("|---|---|---|---|---|---|")
for f in sys.argv[1:3]:
    for r in json.load(open(f))["results"]:
        print("| %s | %.2f | %.2f | %.2f | %.2f | %.2f |" % (
            r["command"], r["median"] * 1e3, r["mean"] * 1e3, r["min"] * 1e3,
            r["user"] * 1e3, r["system"] * 1e3))
PY
cat "$out/ctl_exec.md"
