#!/usr/bin/env bash
# Start-up cost of one sandbox, side by side in one run: `sandboxd run` against
# bubblewrap with equivalent binds and against the bare command, for /bin/true
# and `python3 -c pass`. Needs root, hyperfine and bwrap (scripts/deps.sh).
# Usage: bench/startup.sh [RUNS]   (results in bench/results/startup.md)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-200}
sbx=${SANDBOXD:-build/sandboxd}
ws=$(mktemp -d /tmp/sbx-bench-XXXXXX)
out=bench/results
mkdir -p "$out"
trap 'rm -rf "$ws"' EXIT

bwrap_cmd="bwrap --unshare-all --die-with-parent --ro-bind /usr /usr \
 --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
 --symlink usr/sbin /sbin --ro-bind /etc/ld.so.cache /etc/ld.so.cache \
 --proc /proc --dev /dev --tmpfs /tmp --tmpfs /home/runner --bind $ws /workspace \
 --chdir /workspace --uid 10001 --gid 10001 --new-session"

for what in "/bin/true" "python3 -c pass"; do
  name=$(echo "$what" | tr -c 'a-z0-9\n' '_')
  hyperfine -N --warmup 20 --runs "$runs" --export-markdown "$out/startup-$name.md" \
    --command-name "bare: $what" "$what" \
    --command-name "bwrap: $what" "$bwrap_cmd $what" \
    --command-name "sandboxd run: $what" "$sbx run --workspace $ws -- $what"
done
cat "$out"/startup-*.md > "$out/startup.md"
echo "written $out/startup.md"
