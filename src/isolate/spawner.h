/* Sandboxes made outside the daemon's address space. A daemon forks one small
 * spawner process at start, before it has grown (no store, no loop, no
 * listeners yet), and asks it for each new sandbox over a SOCK_SEQPACKET
 * socket: the spawner runs the parent's steps of sbx_sandbox_spawn (cgroup,
 * channels, clone3, id maps) and answers with the sandbox's pidfd, sync
 * socket and stdio fds (SCM_RIGHTS) and its cgroup. The clone copies the
 * spawner's few pages, not the daemon's heap, so neither side pays a
 * copy-on-write fault storm, and the child inherits no fd of the daemon.
 *
 * The sandbox's init is the spawner's child, not the daemon's: the daemon
 * watches it by its pidfd (readable once init is gone, for any process) and
 * learns its end from init's messages; the spawner ignores SIGCHLD, so the
 * kernel reaps init. The spawner dies with the daemon (PDEATHSIG, and EOF on
 * its socket), and each sandbox with the spawner (its own PDEATHSIG).
 *
 * A spec the spawner cannot carry (a task of a session, which joins
 * namespaces by the daemon's pidfd; a message over the socket's size) and
 * any failure to reach the spawner fall back to sbx_sandbox_spawn in the
 * calling process: the same sandbox, only made here. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"
#include "isolate/sandbox.h"

/* Fork the spawner (once per process; a second call is a no-op). The caller
 * should be small still: the spawner is a copy of it. */
int sbx_spawner_start(sbx_err *err);
/* Close the socket and reap the spawner (it exits at EOF). Blocks briefly:
 * for the daemon's teardown, off the loop. */
void sbx_spawner_stop(void);
bool sbx_spawner_running(void);
/* Move the spawner into a cgroup of its own beneath parent (a v1 pids
 * hierarchy's sandboxd/, where the daemon holds total_pids): the kernel
 * checks pids.max at a fork, never at a move, so a sandbox's init cloned
 * outside and moved in could take the parent past its cap. Cloned by a
 * spawner inside it, init is counted against the cap at its clone, and its
 * move to its own cgroup beneath the same parent changes nothing there. The
 * spawner itself is one of the processes the cap counts. The cgroup goes with
 * sbx_spawner_stop. */
int sbx_spawner_join_cgroup(const char *parent, sbx_err *err);

/* sbx_sandbox_spawn, through the spawner when one runs and can carry spec
 * (waiting for its answer, at most a few seconds; for a caller that cannot
 * take the answer later). */
int sbx_spawn(const struct sbx_spec *spec, struct sbx_sandbox *sb, sbx_err *err);

/* The same in two halves, for a caller on an event loop, which never waits:
 * sbx_spawner_request sends spec (1; its answer comes later, in the order of
 * the requests) or cannot (0: no spawner, a spec it cannot carry, its socket
 * full; make the sandbox with sbx_sandbox_spawn). When sbx_spawner_fd() is
 * readable, sbx_spawner_reply takes one answer without waiting: 1 the
 * sandbox (sb), -1 the spawner could not make it (err), 0 none yet, -2 the
 * spawner is gone (stopped for good: every request in flight is lost). */
int sbx_spawner_fd(void);
size_t sbx_spawner_pending(void);
int sbx_spawner_request(const struct sbx_spec *spec);
int sbx_spawner_reply(struct sbx_sandbox *sb, sbx_err *err);
/* A clone's mounts for a pooled sandbox (sbx_attach_open, run by the
 * spawner), asked and answered in the same order as sandboxes:
 * request_attach 1 sent, 0 not (no spawner, its socket full);
 * reply_attach 1 with the n = 1 + a->n_mounts fds (the caller's), -1 the
 * spawner could not (err), 0 none yet, -2 the spawner is gone. */
int sbx_spawner_request_attach(const struct sbx_attach *a);
int sbx_spawner_reply_attach(int *fds, size_t n, sbx_err *err);
/* A sandbox made the other way, counted (sandbox_spawns_total). */
int sbx_spawn_local(const struct sbx_spec *spec, struct sbx_sandbox *sb, sbx_err *err);

/* How many sandboxes the spawner made, and how many were made in-process
 * while it ran (a session's task, a fallback). */
struct sbx_spawner_counts {
    unsigned long long remote, local, fallbacks;
};
void sbx_spawner_counts(struct sbx_spawner_counts *out);
