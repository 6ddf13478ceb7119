#!/usr/bin/env bash
# Debian 12's kernel and a busybox initramfs for tests/vm/run.py, in a cache
# folder (default /var/cache/sandbox-tests/vm) that is reused when present and
# made when not: the kernel package comes from the Debian archive with
# `apt-get download` (it is unpacked, never installed), busybox from the
# busybox-static package already on the host. Prints the cache folder.
set -euo pipefail
cache=${SBX_VM_CACHE:-/var/cache/sandbox-tests/vm}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [[ ! -e $cache/kernel/.done ]]; then
  rm -rf "$cache/kernel" "$cache/dl"
  mkdir -p "$cache/dl"
  # linux-image-amd64 is a metapackage: its one dependency is the real image.
  real=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')
  [[ -n $real ]] || { echo "kernel.sh: no linux-image-* behind linux-image-amd64" >&2; exit 1; }
  (cd "$cache/dl" && apt-get download -q "$real" >&2)
  dpkg-deb -x "$cache"/dl/"$real"_*.deb "$cache/kernel"
  rm -rf "$cache/dl"
  touch "$cache/kernel/.done"
fi
kver=$(ls "$cache/kernel/lib/modules" | head -n1)
# The initramfs is remade when its init or the kernel changed (cheap: ~1 s).
stamp=$(cat "$here/initramfs-init" "$0" | sha256sum | cut -c1-16)-$kver
if [[ ! -e $cache/initramfs-$stamp.cpio.gz ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp"/{bin,dev,proc,sys,newroot,lib/modules/"$kver"}
  cp /bin/busybox "$tmp/bin/busybox"
  for a in sh mount umount mkdir insmod modprobe depmod switch_root poweroff sleep cat echo \
           ln ls; do ln -s busybox "$tmp/bin/$a"; done
  cp "$here/initramfs-init" "$tmp/init"
  chmod 755 "$tmp/init"
  # virtio-pci and 9p over it: what the root filesystem needs; the rest of
  # the modules are reached over 9p once the host's / is mounted.
  m=$cache/kernel/lib/modules/$kver/kernel
  for k in drivers/virtio/virtio.ko drivers/virtio/virtio_ring.ko \
           drivers/virtio/virtio_pci_legacy_dev.ko drivers/virtio/virtio_pci_modern_dev.ko \
           drivers/virtio/virtio_pci.ko fs/netfs/netfs.ko fs/fscache/fscache.ko net/9p/9pnet.ko \
           net/9p/9pnet_virtio.ko fs/9p/9p.ko fs/overlayfs/overlay.ko; do
    cp "$m/$k" "$tmp/lib/modules/$kver/"
  done
  echo "$kver" >"$tmp/kver"
  rm -f "$cache"/initramfs-*.cpio.gz
  (cd "$tmp" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) \
    >"$cache/initramfs-$stamp.cpio.gz.tmp"
  mv "$cache/initramfs-$stamp.cpio.gz.tmp" "$cache/initramfs-$stamp.cpio.gz"
fi
# modules.dep for the guest's modprobe (busybox depmod, run on the host).
if [[ ! -e $cache/kernel/lib/modules/$kver/modules.dep ]]; then
  busybox depmod -b "$cache/kernel" "$kver"
fi
echo "$cache"
