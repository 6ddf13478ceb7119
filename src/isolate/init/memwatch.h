/* The memory watch of a sandbox without cgroups (rlimit mode), run by its
 * init: RLIMIT_DATA holds each process's private heap only, so init adds up
 * what the whole pid namespace holds, from /proc, every SBX_MEMWATCH_MS, and
 * kills every process in it when the sum is over the limit. In a session,
 * each task's sub-init watches while its task runs, and the session's pid 1
 * between tasks.
 *
 * What is counted, per sample:
 * - each process's proportional share of the anonymous and shared memory
 *   it maps (Pss_Anon + Pss_Shmem of /proc/PID/smaps_rollup): its private
 *   pages, its share of pages mapped by several processes (shared anonymous
 *   memory, mapped memfds and tmpfs files, attached SysV segments); not the
 *   files it maps (the host's page cache of /usr, as a cgroup would not
 *   charge it either);
 * - shared memory held without being mapped: the space used on the
 *   sandbox's tmpfs mounts (/tmp, /home/runner, /dev/shm), memfds held by
 *   a file descriptor (each once), and SysV segments (/proc/sysvipc/shm);
 * - the payload queued on the TCP sockets of the sandbox's own network
 *   namespace (send and receive queues of /proc/net/tcp and tcp6), while
 *   it has sockets beyond those it started with, every other sample: socket
 *   buffers are kernel memory that no rlimit bounds.
 * Shared memory both mapped and held is counted twice: the sum errs towards
 * the limit, never past it. What it cannot see: memory allocated and freed
 * between two samples (a burst shorter than the interval), memfds in flight
 * in a unix socket (SCM_RIGHTS, held by no process: which is why
 * memfd_create is refused in rlimit mode, see sbx_seccomp_deny_memfd), and
 * other kernel
 * memory: page tables, pipe and unix socket buffers, and the overhead of
 * each TCP packet beyond its payload. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#define SBX_MEMWATCH_MS 50

/* Bytes held by the pid namespace of the caller, as above; with tcp, plus
 * the bytes queued on the TCP sockets of its network namespace (only when
 * the sandbox has a network namespace of its own, not with --net host). */
uint64_t sbx_memwatch_sample(bool tcp);

/* Whether a task of the session runs: a process of the namespace other
 * than pid 1 whose parent is outside it (a task's sub-init, started by the
 * daemon's join helper). */
bool sbx_memwatch_task_running(void);
