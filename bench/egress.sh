#!/usr/bin/env bash
# Egress relay cost, side by side in one run: a 1 GiB download from a lab host
# (203.0.113.10) to a client inside `sandboxd run --net proxy`, through the
# transparent path and through SOCKS5, against the same download made directly
# from the daemon namespace (over the same veth, and over loopback) and through
# a minimal splice relay of our own (the same extra hop without a sandbox); then
# the set-up cost of N sequential short connections on each path.
#
# Everything runs inside network namespaces made by tests/integration/netlab.py
# (its Lab: a daemon namespace with no route out, lab hosts joined by veth), so
# no packet can leave the machine. The lab, its servers, our servers and every
# sandbox are removed on exit, also on failure or Ctrl-C.
#
# Client, server and minimal relay are bench/egress_tool.c, built static here:
# recv() into a 256 KiB buffer / send() from a 1 MiB buffer, the same binary on
# every path. The machine is shared: before each measurement the bench waits
# (up to --quiet-wait seconds) for it to be idle, and reports the load it saw.
#
# Needs root. Usage: bench/egress.sh [--bytes N] [--reps R] [--conns C] [--quiet-wait S] [--perf]
#   (defaults: 1 GiB, 3 runs, 500 connections, 120 s; --perf adds, after the
#   measured runs, one transfer and one set-up run per proxied path with perf
#   recording the run process: bench/results/egress-perf-*.txt)
# Results: bench/results/egress.md (and egress.json). SANDBOXD=path picks the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) != 0 ]]; then
  echo "bench/egress.sh: needs root (network namespaces, sandboxes)" >&2
  exit 1
fi
# The results name the repository's HEAD only for the default binary.
[[ -n ${SANDBOXD:-} ]] && export EGRESS_SANDBOXD_GIVEN=1
export SANDBOXD=${SANDBOXD:-$PWD/build/sandboxd}
tmp=$(mktemp -d /tmp/sbx-egress-bench-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -static -Wall -Wextra -o "$tmp/egress_tool" bench/egress_tool.c
python3 bench/egress_lab.py "$tmp/egress_tool" bench/results "$@"
