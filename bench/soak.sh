#!/usr/bin/env bash
# The soak run of bench/reliability.py (read its docstring), or its chaos run
# (bench/chaos.sh, SBX_RELIABILITY_MODE=chaos): a real
# `sandboxd serve` on loopback (--net none, its own temporary state dir and a
# free port), our own clients, bounded in count and time. Needs root.
#
#   bench/soak.sh [options of bench/reliability.py soak]
#   bench/chaos.sh [options of bench/reliability.py chaos]
#
# Results: bench/results/soak.json (chaos.json); exits non-zero when a check
# failed.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${SBX_RELIABILITY_MODE:-soak}
if [[ $(id -u) != 0 ]]; then
  echo "bench/$mode.sh: needs root (sandboxes, cgroups, mounts)" >&2
  exit 1
fi
mkdir -p bench/results
exec python3 bench/reliability.py "$mode" --sandboxd "${SANDBOXD:-build/sandboxd}" \
  --json "bench/results/$mode.json" "$@"
