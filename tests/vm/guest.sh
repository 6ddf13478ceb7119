#!/bin/sh
# PID 1 of the test VM once the host's tree is its root (tests/vm/run.py).
# Reads the job the host wrote to the out share, runs it with a cgroup v2-only
# hierarchy (the kernel was booted with cgroup_no_v1=all), writes its output
# and exit code back to the share and powers the VM off.
out=/run/vm/out
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mkdir -p /dev/pts /dev/shm /dev/mqueue
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t mqueue mqueue /dev/mqueue 2>/dev/null
[ -e /dev/ptmx ] || ln -s pts/ptmx /dev/ptmx
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/run/vm/bin HOME=/root
# What the kernel asks for (veth, loop, nf_tables, ...) comes through busybox's
# modprobe from the guest kernel's own modules.
mkdir -p /run/vm/bin
for a in modprobe lsmod; do ln -s /bin/busybox /run/vm/bin/$a; done
echo /run/vm/bin/modprobe >/proc/sys/kernel/modprobe
hostname sbx-vm
# The loop devices of workspace quotas; the egress's SYN queue (as
# scripts/deps.sh loads them on a host).
for m in loop nfnetlink_queue nft_compat xt_NFQUEUE; do modprobe "$m"; done
ip link set lo up
export PYTHONDONTWRITEBYTECODE=1 LANG=C.UTF-8
{
  echo "vm: kernel $(uname -r); cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
  echo "vm: v1 hierarchies: $(grep -c ' - cgroup ' /proc/self/mountinfo)"
  (. "$out/job.sh")
  echo $? >"$out/rc.tmp"
} 2>&1 | tee "$out/log" >/dev/console
mv "$out/rc.tmp" "$out/rc"
sync
echo o >/proc/sysrq-trigger
sleep 10
