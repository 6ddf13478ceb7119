#!/usr/bin/env bash
# The main job: build sandboxd, start the daemon on its embedded defaults
# (state in /var/lib/sandbox, API on :8080, a token generated on first start)
# and show it working through its HTTP API; then one-shot sandboxes with
# `sandboxd run`. Run as root on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
./scripts/build.sh
sbx=build/sandboxd
"$sbx" doctor

log=$(mktemp /tmp/sandboxd-demo-XXXXXX.log)
"$sbx" >"$log" 2>&1 &
daemon=$!
trap 'kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  curl -sf http://127.0.0.1:8080/readyz >/dev/null && break
  sleep 0.1
done
cat "$log"
token=$(cat /var/lib/sandbox/api-token 2>/dev/null || true)
auth=(-H "Authorization: Bearer ${SANDBOX_TOKEN:-$token}")
set -x
curl -s http://127.0.0.1:8080/readyz; echo
curl -s "${auth[@]}" -d '{"command":["sh","-c","id; hostname; ls /; echo hello from $(pwd)"]}' \
  http://127.0.0.1:8080/runtime/exec; echo
curl -s "${auth[@]}" -d '{"language":"python","code":"print(sum(range(10**6)))"}' \
  http://127.0.0.1:8080/runtime/exec; echo
curl -s "${auth[@]}" -d '{"code":"print(6*7)","env":"python","memory_limit":"128m"}' \
  http://127.0.0.1:8080/execute; echo
curl -s "${auth[@]}" "http://127.0.0.1:8080/runtime/tasks?limit=3"; echo
set +x
echo "== one-shot sandboxes with sandboxd run"
"$sbx" run --net none --report - -- /bin/sh -c 'echo isolated: $(id -u) in $(pwd)'
"$sbx" run --net none --timeout 1 --report - -- sleep 10 || echo "exit code $? (timeout)"
