#!/usr/bin/env bash
# Install the Debian 12 packages sandbox needs to build, test and benchmark.
set -euo pipefail
pkgs=(build-essential cmake pkg-config clang-format libevent-dev libseccomp-dev libjansson-dev
      libcmocka-dev libcurl4-openssl-dev musl-tools libnftables-dev libmnl-dev
      libhttp-parser-dev libmicrohttpd-dev libssl-dev openssl nftables curl libsqlite3-dev
      libyaml-dev python3 nodejs bubblewrap hyperfine iproute2 e2fsprogs golang-go
      clang libclang-rt-dev busybox-static libarchive-dev systemd
      docker.io docker-compose podman debootstrap iptables pmccabe)
# pmccabe: the cyclomatic complexity of functions, to find those to split
# (STYLE.md: functions short enough to read at once).
# busybox-static: the root filesystem tests/integration/test_environments.py
# builds its environments and OCI images from.
# libarchive-dev: sandboxd unpacks environments' OCI images with it.
# docker.io, docker-compose, podman, debootstrap: tests/deploy builds the image of
# deploy/docker from the Debian archive (no registry) and runs it under Docker,
# compose and podman; iptables closes the test bridges to the outside.
# golang-go: the strict Go client of the original's API (tests/compat/go, standard
# library only, built offline by tests/integration/test_compat_go.py).
# clang and its runtime libraries (libFuzzer, ASan, UBSan) for the fuzz
# targets of tests/fuzz, run by scripts/fuzz.sh.
# systemd for systemd-analyze alone (verify, security --offline of
# deploy/systemd/sandboxd.service): the package does not make systemd the init
# (that is systemd-sysv, not installed here) and its scripts start nothing
# where systemd is not running.
# npm for the test clients (scripts/npm-deps.sh); a Node.js that ships its own
# npm (as NodeSource's does) needs no package of it.
command -v npm >/dev/null || pkgs+=(npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The egress's SYN queue (src/net/synq.h) needs nfnetlink_queue and the
# xtables NFQUEUE target through nft_compat. A kernel that builds them as
# modules gets them loaded here; one with them built in (CONFIG_*=y) needs
# nothing, and modprobe's absence is not an error.
if command -v modprobe >/dev/null; then
  for m in nfnetlink_queue nft_compat xt_NFQUEUE; do modprobe -q "$m" || true; done
fi
