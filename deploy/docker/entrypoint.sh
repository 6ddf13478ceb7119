#!/bin/sh
# The image's entrypoint: make the container able to build sandboxes, then
# exec sandboxd (a first argument that is a sandboxd command or an option goes
# to sandboxd; anything else is run as it is).
#
# 1. A spare procfs, unmasked, at /run/sandbox/proc (a directory only root can
#    enter). Docker and podman mask paths of the container's /proc (kcore,
#    sysrq-trigger, ...); the kernel then refuses a fresh procfs in the user
#    namespace of each sandbox, unless some procfs of the mount namespace is
#    fully visible. Needs CAP_SYS_ADMIN (which run needs anyway). Compose has
#    no `systempaths=unconfined`; this works for compose and docker run alike.
#    Its sys/user is bound over the read-only /proc/sys/user: each sandbox
#    writes the limits of its own user namespace there. (The container's root
#    could mount a procfs itself with these capabilities: nothing is given to
#    it that it did not have; tasks never see either, their root is pivoted.)
# 2. The container's cgroup v1 controllers that sandboxd uses (memory, pids,
#    cpu, cpuacct, freezer), read-only as the engine mounts them, remounted
#    read-write (this mount only: `remount,bind`), so limits are held by
#    cgroups rather than rlimits. Never `devices`: writing there could open
#    host devices. cgroup v2: the same for /sys/fs/cgroup.
#    SANDBOX_CGROUP_RW=0 leaves them read-only (limits then fall back to rlimits).
set -eu
say() { echo "sandbox-entrypoint: $*" >&2; }

if [ "$(id -u)" = 0 ]; then
  mkdir -p /run/sandbox
  chmod 0700 /run/sandbox
  mkdir -p /run/sandbox/proc
  if ! grep -q ' /run/sandbox/proc proc ' /proc/self/mountinfo; then
    mount -t proc -o nosuid,nodev,noexec proc /run/sandbox/proc 2>/dev/null ||
      say "no spare procfs (needs CAP_SYS_ADMIN): sandboxes will fail; 'sandboxd doctor' names the fix"
  fi
  # Each sandbox bounds its own user namespace through /proc/sys/user (the
  # values are per namespace): the engine's /proc/sys is read-only.
  if [ ! -w /proc/sys/user/max_user_namespaces ] && [ -d /run/sandbox/proc/sys/user ]; then
    mount --bind /run/sandbox/proc/sys/user /proc/sys/user 2>/dev/null ||
      say "cannot make /proc/sys/user writable: sandboxes will fail; 'sandboxd doctor' names the fix"
  fi
  if [ "${SANDBOX_CGROUP_RW:-1}" != 0 ]; then
    # mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - FSTYPE SOURCE SUPEROPTIONS
    failed=""
    for mp in $(awk '{ for (i = 7; $i != "-"; i++);
                       if ($(i+1) == "cgroup2" && $6 ~ /(^|,)ro(,|$)/) print $5;
                       if ($(i+1) == "cgroup" && $6 ~ /(^|,)ro(,|$)/ && $(i+3) !~ /(^|,)devices(,|$)/ &&
                           $(i+3) ~ /(^|,)(memory|pids|cpu|cpuacct|freezer)(,|$)/) print $5 }' \
                /proc/self/mountinfo); do
      mount -o remount,bind,rw "$mp" 2>/dev/null || failed="$failed $mp"
    done
    if [ -n "$failed" ]; then
      say "cannot remount$failed read-write (needs CAP_SYS_ADMIN): limits fall back to rlimits"
    fi
  fi
fi

case "${1:-serve}" in
  serve | run | doctor | -*) exec sandboxd "$@" ;;
  *) exec "$@" ;;
esac
