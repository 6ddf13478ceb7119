#!/usr/bin/env bash
# Build into build/ (Release, as packagers build it: -O3, where gcc warns of
# more than at -O2) and, with --asan, also build-asan/ (ASan + UBSan).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
if [[ "${1:-}" == "--asan" ]]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSBX_SANITIZE=ON >/dev/null
  cmake --build build-asan -j"$(nproc)"
fi
