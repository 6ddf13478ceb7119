#!/usr/bin/env bash
# The soak run of bench/reliability.py (read its docstring): a real
# `sandboxd serve` on loopback (--net none, its own temporary state dir and a
# free port), our own clients, bounded in count and time. Needs root.
#
#   bench/soak.sh [options of bench/reliability.py soak]
#
# Results: bench/results/soak.json; exits non-zero when a check failed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) != 0 ]]; then
  echo "bench/soak.sh: needs root (sandboxes, cgroups, mounts)" >&2
  exit 1
fi
mkdir -p bench/results
exec python3 bench/reliability.py soak --sandboxd "${SANDBOXD:-build/sandboxd}" \
  --json bench/results/soak.json "$@"
