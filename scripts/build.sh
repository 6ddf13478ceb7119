#!/usr/bin/env bash
# Build into build/ (Release, as packagers build it: -O3, where gcc warns of
# more than at -O2) and, with --asan, also build-asan/ (ASan + UBSan).
# --configure-only configures the folders and builds nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
asan=0 build=1
for arg in "$@"; do
  case "$arg" in
    --asan) asan=1 ;;
    --configure-only) build=0 ;;
    *) echo "scripts/build.sh: unknown option $arg (--asan, --configure-only)" >&2; exit 2 ;;
  esac
done

# A build folder copied or moved along with the checkout names the old path
# in its CMake cache, and CMake refuses to use it: such a folder is started
# afresh (it holds nothing but what the build makes).
fresh_if_moved() {
  local dir=$1 was
  [[ -f "$dir/CMakeCache.txt" ]] || return 0
  was=$(sed -n 's/^CMAKE_CACHEFILE_DIR:INTERNAL=//p' "$dir/CMakeCache.txt")
  if [[ "$was" != "$(pwd -P)/$dir" ]]; then
    echo "scripts/build.sh: $dir/ was configured in ${was:-another place}: configuring it afresh" >&2
    rm -rf "$dir"
  fi
}

configure_and_build() {
  local dir=$1
  shift
  fresh_if_moved "$dir"
  cmake -S . -B "$dir" "$@" >/dev/null
  if [[ $build -eq 1 ]]; then
    cmake --build "$dir" -j"$(nproc)"
  fi
}

configure_and_build build -DCMAKE_BUILD_TYPE=Release
if [[ $asan -eq 1 ]]; then
  configure_and_build build-asan -DCMAKE_BUILD_TYPE=Debug -DSBX_SANITIZE=ON
fi
