#!/usr/bin/env bash
# Every test, as root: unit, integration and security probes, first on the
# release build, then on the ASan + UBSan build.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) -ne 0 ]]; then
  echo "scripts/test.sh: run as root (namespaces, cgroups and id mapping need it)" >&2
  exit 1
fi
./scripts/deps.sh
./scripts/build.sh --asan
./scripts/npm-deps.sh >/dev/null
# The tests' daemons run without aggregate caps (sbxtest: --total-* 0) and
# share the sandboxd/ parent cgroups with any daemon run before (the demo's
# defaults cap it at 512 pids and 2 cores; a daemon gives them back at its
# stop, but not one that was killed): start from none.
for f in /sys/fs/cgroup/pids/sandboxd/pids.max /sys/fs/cgroup/pids/*/sandboxd/pids.max; do
  if [[ -w $f ]]; then echo max >"$f"; fi
done
for f in /sys/fs/cgroup/cpu/sandboxd/cpu.cfs_quota_us /sys/fs/cgroup/cpu/*/sandboxd/cpu.cfs_quota_us; do
  if [[ -w $f ]]; then echo -1 >"$f"; fi
done
status=0
for dir in build build-asan; do
  echo "== ctest in $dir"
  ctest --test-dir "$dir" --output-on-failure --timeout 600 || status=1
done
echo "== fuzz targets, 25 s each"
./scripts/fuzz.sh 25 || status=1
exit $status
