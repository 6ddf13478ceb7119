#!/usr/bin/env bash
# Workspace snapshots: create, list and rollback of a small workspace against
# the original's targets, and of a 10,000-file / 200 MB one (first snapshot,
# incremental, rollback), with /healthz timed during the large snapshot.
# Needs root (the daemon mounts the workspace images).
# Usage: bench/snapshot.sh [RUNS]   (results in bench/results/snapshot.md)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/results
SANDBOXD=${SANDBOXD:-build/sandboxd} python3 bench/snapshot_bench.py "${1:-20}" |
  tee bench/results/snapshot.md
