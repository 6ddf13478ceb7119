#!/usr/bin/env bash
# The chaos run of bench/reliability.py: bench/soak.sh in its chaos mode (read
# both). Results: bench/results/chaos.json.
SBX_RELIABILITY_MODE=chaos exec "$(dirname "$0")/soak.sh" "$@"
