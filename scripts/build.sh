#!/usr/bin/env bash
# Build into build/ (release) and, with --asan, also build-asan/ (ASan + UBSan).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
if [[ "${1:-}" == "--asan" ]]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSBX_SANITIZE=ON >/dev/null
  cmake --build build-asan -j"$(nproc)"
fi
