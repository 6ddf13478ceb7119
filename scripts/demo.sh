#!/usr/bin/env bash
# The main job: build sandboxd and show a sandbox at work.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
./scripts/build.sh
sbx=build/sandboxd
set -x
"$sbx" doctor
"$sbx" run --report - -- /bin/sh -c 'id; hostname; ls /; echo hello from $(pwd)'
"$sbx" run --memory 64M --timeout 5 --report - -- python3 -c 'print(sum(range(10**6)))'
"$sbx" run --timeout 1 --report - -- sleep 10 || echo "exit code $? (timeout)"
