#!/usr/bin/env bash
# Build the libFuzzer targets (tests/fuzz, clang) and run each one for a
# bounded time from its seed corpus: ./scripts/fuzz.sh [SECONDS_EACH] [TARGET...]
# (default 25 s each, every target: twelve, so about 5 minutes in all). A crash, leak or assertion fails the run
# and leaves the input in build-fuzz/artifacts/. The seeds are copied first:
# libFuzzer adds what it finds to the corpus it is given.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-25}
shift || true
cmake -S tests/fuzz -B build-fuzz -DCMAKE_C_COMPILER=clang >/dev/null
cmake --build build-fuzz -j2 >/dev/null
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(socks5 httpproxy dns http_request http_server task_request policy_rules config_yaml
           skillmd model_stream mcp opensandbox)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p build-fuzz/artifacts
status=0
for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  if [[ -d tests/fuzz/corpus/$t ]]; then cp tests/fuzz/corpus/$t/* "$work/$t/"; fi
  if ./build-fuzz/fuzz_$t -max_total_time="$secs" -max_len=20000 -timeout=10 \
      -artifact_prefix=build-fuzz/artifacts/$t- "$work/$t" >"$work/$t.log" 2>&1; then
    echo "fuzz_$t: ok, $(grep -E '^Done' "$work/$t.log")"
  else
    echo "fuzz_$t: FAILED"; tail -40 "$work/$t.log"; status=1
  fi
done
exit $status
