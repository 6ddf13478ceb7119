#!/bin/sh
# Run at image build time: every library sandboxd and sandboxctl need is
# present, the linked ones (ldd) and the ones sandboxd loads with dlopen (the
# HTTP server, nftables, libcurl and libarchive: ldd cannot see those), each
# loaded by the dynamic linker with all it needs. Exit 1 naming what is missing.
set -u
status=0
if ldd /usr/local/bin/sandboxd /usr/local/bin/sandboxctl | grep 'not found' >&2; then
  status=1
fi
for lib in libmicrohttpd.so.12 libnftables.so.1 libcurl.so.4 libarchive.so.13; do
  path=$(ldconfig -p | awk -v l="$lib" '$1 == l { print $NF; exit }')
  if [ -z "$path" ]; then
    echo "check-libs: $lib (loaded with dlopen) is missing" >&2
    status=1
  elif /lib64/ld-linux-x86-64.so.2 --list "$path" | grep 'not found' >&2; then
    echo "check-libs: $lib lacks a library of its own" >&2
    status=1
  fi
done
for tool in mkfs.ext4 mount; do
  command -v "$tool" >/dev/null || { echo "check-libs: $tool is missing" >&2; status=1; }
done
exit $status
