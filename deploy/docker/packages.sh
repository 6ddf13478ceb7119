#!/bin/sh
# The Debian 12 packages of the image, in one place for the Dockerfile and
# base-image.sh.
#   packages.sh list runtime|build     the names, comma-separated
#   packages.sh install runtime|build  apt-get install those missing (none
#                                      missing: no network is needed)
set -eu
runtime="ca-certificates libarchive13 libcurl4 libjansson4 libmnl0 libnftables1 libmicrohttpd12 e2fsprogs mount python3-minimal curl"
build="build-essential cmake pkg-config libarchive-dev libevent-dev libseccomp-dev libjansson-dev libcmocka-dev libcurl4-openssl-dev musl-tools libnftables-dev libmnl-dev libhttp-parser-dev libmicrohttpd-dev libssl-dev libsqlite3-dev libyaml-dev"
case "${2:-}" in
  runtime) pkgs=$runtime ;;
  build) pkgs=$build ;;
  *) echo "packages.sh: list|install runtime|build" >&2; exit 2 ;;
esac
case "$1" in
  list) echo "$pkgs" | tr ' ' ',' ;;
  install)
    missing=""
    for p in $pkgs; do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
    done
    if [ -n "$missing" ]; then
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq
      # shellcheck disable=SC2086
      apt-get install -y -qq --no-install-recommends $missing
      rm -rf /var/lib/apt/lists/*
    fi
    ;;
  *) echo "packages.sh: list|install runtime|build" >&2; exit 2 ;;
esac
