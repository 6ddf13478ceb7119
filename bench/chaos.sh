#!/usr/bin/env bash
# The chaos run of bench/reliability.py (read its docstring): a real
# `sandboxd serve` on loopback (--net none, its own temporary state dir and a
# free port), our own clients, bounded in count and time. Needs root.
#
#   bench/chaos.sh [options of bench/reliability.py chaos]
#
# Results: bench/results/chaos.json; exits non-zero when a check failed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) != 0 ]]; then
  echo "bench/chaos.sh: needs root (sandboxes, cgroups, mounts)" >&2
  exit 1
fi
mkdir -p bench/results
exec python3 bench/reliability.py chaos --sandboxd "${SANDBOXD:-build/sandboxd}" \
  --json bench/results/chaos.json "$@"
