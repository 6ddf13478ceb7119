/* How a clone's workspace quota is enforced, chosen once at start like the
 * cgroup modes (sandbox.workspace_quota_mode):
 *
 *   loop     each clone's workspace is an ext4 image on a loop device
 *            (quota.h): the kernel refuses the write past the quota (ENOSPC);
 *   project  ext4/xfs project quotas on the workspace root's own filesystem:
 *            each clone's directory gets a project id (its host uid) and a
 *            block limit; the kernel refuses the write (EDQUOT). Needs a
 *            kernel with quota support (CONFIG_QUOTA, or CONFIG_XFS_QUOTA)
 *            and the root mounted with project quotas enforced (ext4
 *            `-O quota,project` + `prjquota`, xfs `pquota`);
 *   monitor  nothing in the kernel: the daemon measures each workspace in
 *            use (a helper child walks it, off the loop) and stops the
 *            clone's writers once it is over: weaker, a writer can go past
 *            the quota by what it writes between two measures.
 *
 * auto takes the first that works here, in that order; a mode asked for by
 * name that cannot work is an error at start naming why. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"

enum sbx_ws_quota_mode {
    SBX_WSQ_AUTO,
    SBX_WSQ_LOOP,
    SBX_WSQ_PROJECT,
    SBX_WSQ_MONITOR,
};

const char *sbx_ws_quota_mode_name(enum sbx_ws_quota_mode m);
/* "auto", "loop", "project" or "monitor"; EINVAL naming the value. */
int sbx_ws_quota_mode_parse(const char *s, enum sbx_ws_quota_mode *out, sbx_err *err);
/* Whether the kernel refuses the write past the quota (loop, project). */
bool sbx_ws_quota_mode_kernel(enum sbx_ws_quota_mode m);

/* Whether loop mode works here: /dev/loop-control answers LOOP_CTL_GET_FREE
 * and mkfs.ext4 is installed. false with why. */
bool sbx_ws_quota_loop_usable(char *why, size_t len);
/* Whether root's filesystem enforces project quotas. false with why. */
bool sbx_ws_quota_project_usable(const char *root, char *why, size_t len);

/* The mode to run in for want (auto: the first usable), and why it was
 * chosen (or why the better ones were not). A mode asked for by name that
 * is not usable: -1, EOPNOTSUPP naming why. */
int sbx_ws_quota_choose(enum sbx_ws_quota_mode want, const char *root, enum sbx_ws_quota_mode *mode,
                        char *why, size_t len, sbx_err *err);

/* project: dir (a clone's workspace, on the root's filesystem) gets project
 * id projid with inheritance (its existing files too, the first time) and a
 * block limit of bytes. */
int sbx_ws_project_ensure(const char *dir, uint32_t projid, uint64_t bytes, sbx_err *err);

/* The bytes dir's tree takes on disk (blocks of every file and directory,
 * not following symlinks nor crossing mounts). */
int sbx_ws_du(const char *dir, uint64_t *bytes, sbx_err *err);

/* A helper child of the daemon for slow workspace work (a walk, a format, a
 * mount or an unmount): it runs with default signal dispositions, no fd
 * but out (as its fd 3), dies with the daemon, at a lower priority. Returns
 * 0 in the child, its pid in the parent with *pidfd (readable once it has
 * ended), -1 with err. */
pid_t sbx_ws_helper_fork(int out, int *pidfd, const char *what, sbx_err *err);
/* In a freshly forked helper: default signals, unblocked; it dies with
 * parent (exits 126 if parent is already gone); out becomes fd 3 and every
 * fd above is closed; nice as its priority. */
void sbx_ws_helper_child(int out, pid_t parent, int nice);

/* monitor: measuring several workspaces in a helper child (fork, watched by
 * pidfd, results in a memfd), so that the loop never walks a tree. */
struct sbx_ws_measure {
    pid_t pid; /* -1 when none */
    int pidfd; /* readable once it has ended */
    int out_fd;
    size_t n;
};
int sbx_ws_measure_start(const char *const *dirs, size_t n, struct sbx_ws_measure *m, sbx_err *err);
/* Reap it (waiting if it still runs) and read the sizes: used[i] for
 * dirs[i], UINT64_MAX for one that could not be measured. */
int sbx_ws_measure_finish(struct sbx_ws_measure *m, uint64_t *used, sbx_err *err);
void sbx_ws_measure_abort(struct sbx_ws_measure *m);
