#!/usr/bin/env bash
# Make the Debian 12 base images the Dockerfile builds on, without any
# registry: debootstrap (minbase) from the Debian archive, then `docker import`.
#
#   deploy/docker/base-image.sh [--podman] [--cache DIR] runtime|build
#
# runtime: sandbox-base:bookworm, the libraries sandboxd and sandboxctl load
#          (libmicrohttpd, libnftables, libcurl, libarchive with dlopen), mkfs.ext4 for the
#          workspace images, mount for the entrypoint, python3 and curl for tasks.
# build:   sandbox-build-base:bookworm, what compiling sandboxd needs.
# The root tarball is kept in DIR (default /var/cache/sandbox-tests/docker), so
# a later call only imports it (seconds); it is made again when missing. The
# image is not made again when it exists. Prints the image's name.
set -euo pipefail
cache=/var/cache/sandbox-tests/docker
engine=docker
while (($#)); do
  case "$1" in
    --cache) cache=$2; shift 2 ;;
    --podman) engine=podman; shift ;;
    runtime|build) kind=$1; shift ;;
    *) echo "base-image.sh: unknown argument '$1' (runtime|build, --cache DIR, --podman)" >&2; exit 2 ;;
  esac
done
[[ -n ${kind:-} ]] || { echo "base-image.sh: say runtime or build" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
pkgs=$(sh "$here/packages.sh" list "$kind")
if [[ $kind == runtime ]]; then image=sandbox-base:bookworm; else image=sandbox-build-base:bookworm; fi
# The package list is part of the tarball's name: a changed list makes a new one.
sum=$(printf '%s' "$pkgs" | sha256sum | cut -c1-12)
tarball=$cache/$kind-bookworm-$sum.tar
if "$engine" image inspect "$image" >/dev/null 2>&1 &&
   [[ $("$engine" image inspect -f '{{index .Config.Labels "org.sandbox.packages"}}' "$image" 2>/dev/null) == "$sum" ]]; then
  echo "$image"
  exit 0
fi
mkdir -p "$cache"
if [[ ! -s $tarball ]]; then
  command -v debootstrap >/dev/null || { echo "base-image.sh: debootstrap is not installed" >&2; exit 1; }
  mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
  root=$(mktemp -d "$cache/root-XXXXXX")
  trap 'rm -rf "$root"' EXIT
  mkdir -p "$cache/debs"
  echo "base-image.sh: debootstrap $kind ($mirror), once" >&2
  debootstrap --variant=minbase --include="$pkgs" --cache-dir="$cache/debs" bookworm "$root" "$mirror" >&2
  # What an image needs neither keeps nor leaks: apt's lists and caches.
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" --numeric-owner -cf "$tarball.part" .
  mv "$tarball.part" "$tarball"
  # tarballs of this kind for another package list are stale now
  find "$cache" -maxdepth 1 -name "$kind-bookworm-*.tar" ! -name "${tarball##*/}" -delete
  rm -rf "$root"
  trap - EXIT
fi
"$engine" import --change "LABEL org.sandbox.packages=$sum" --change 'CMD ["/bin/bash"]' \
  "$tarball" "$image" >/dev/null
echo "$image"
