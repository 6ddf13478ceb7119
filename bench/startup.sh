#!/usr/bin/env bash
# Start-up cost of one sandbox, side by side in one run: `sandboxd run` against
# bubblewrap with equivalent binds and against the bare command, for /bin/true
# and `python3 -c pass`. Needs root, hyperfine and bwrap (scripts/deps.sh).
# bwrap --unshare-all has no network, so sandboxd runs with --net none here
# (the proxy policy's egress set-up is measured by bench/egress.sh).
# Usage: bench/startup.sh [RUNS]   (results in bench/results/startup.md)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-300}
sbx=${SANDBOXD:-build/sandboxd}
# One workspace each: sandboxd hands its workspace to the sandbox's host uid.
ws=$(mktemp -d /tmp/sbx-bench-XXXXXX)
wb=$(mktemp -d /tmp/sbx-bench-bwrap-XXXXXX)
chmod 755 "$wb"
out=bench/results
mkdir -p "$out"
trap 'rm -rf "$ws" "$wb"' EXIT

bwrap_cmd="bwrap --unshare-all --die-with-parent --ro-bind /usr /usr \
 --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
 --symlink usr/sbin /sbin --ro-bind /etc/ld.so.cache /etc/ld.so.cache \
 --proc /proc --dev /dev --tmpfs /tmp --tmpfs /home/runner --bind $wb /workspace \
 --chdir /workspace --uid 10001 --gid 10001 --new-session"

: > "$out/startup.md"
for what in "/bin/true" "/usr/bin/python3 -c pass"; do
  name=$(echo "$what" | tr -c 'a-z0-9\n' '_')
  hyperfine -N --warmup 20 --runs "$runs" --export-json "$out/startup-$name.json" \
    --command-name "bare" "$what" \
    --command-name "bwrap" "$bwrap_cmd $what" \
    --command-name "sandboxd run" "$sbx run --net none --workspace $ws -- $what" >/dev/null
  python3 - "$out/startup-$name.json" "$what" >> "$out/startup.md" <<'PY'
import json, sys
res = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
ms = lambda r: r["median"] * 1000
print("`%s` (%d runs each)\n" % (sys.argv[2], len(res["bare"]["times"])))
print("| command | median ms | mean ms | min ms | max ms |")
print("|---|---|---|---|---|")
for name, r in res.items():
    print("| %s | %.2f | %.2f | %.2f | %.2f |" % (name, ms(r), r["mean"] * 1000,
                                               r["min"] * 1000, r["max"] * 1000))
ratio = ms(res["sandboxd run"]) / ms(res["bwrap"])
print("\nsandboxd run / bwrap (medians): %.2f\n" % ratio)
PY
done
cat "$out/startup.md"
