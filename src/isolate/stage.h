/* The setup stages of a sandbox, one enum shared by the parent (sandbox.c),
 * the cloned child (sandbox.c, rootfs.c), init and the task (init/main.c),
 * and the egress the parent builds (net/egress.c). Their order across the
 * processes is written once, in isolate/sandbox.h. A stage's name is what
 * users read at the head of a setup error ("workspace: open /x: No such file
 * or directory (ENOENT)"): the names stay as they are. */
#pragma once

#include "base/err.h"

/* X(ENUM, "name"), in setup order. */
#define SBX_STAGES(X)                                                                              \
    /* parent */                                                                                   \
    X(INIT_BINARY, "init binary")                                                                  \
    X(WORKSPACE, "workspace")                                                                      \
    X(CGROUP, "cgroup")                                                                            \
    X(SPAWN, "spawn")                                                                              \
    X(CLONE, "clone")                                                                              \
    X(USER_NS, "user namespace")                                                                   \
    X(EGRESS, "egress")                                                                            \
    X(ATTACH, "attach")                                                                            \
    /* child */                                                                                    \
    X(SETUP, "setup")                                                                              \
    X(PDEATHSIG, "pdeathsig")                                                                      \
    X(HOSTNAME, "hostname")                                                                        \
    X(LOOPBACK, "loopback")                                                                        \
    X(MAKE_PRIVATE, "make / private")                                                              \
    X(MKDIR, "mkdir")                                                                              \
    X(MOUNT_TMPFS, "mount tmpfs")                                                                  \
    X(BIND_MOUNT, "bind mount")                                                                    \
    X(REMOUNT, "remount")                                                                          \
    X(READLINK, "readlink")                                                                        \
    X(SYMLINK, "symlink")                                                                          \
    X(CREATE_MOUNT_POINT, "create mount point")                                                    \
    X(WRITE_ETC, "write /etc")                                                                     \
    X(COPY_ETC, "copy /etc")                                                                       \
    X(CREATE_DEVICE_NODE, "create device node")                                                    \
    X(MOUNT_DEVPTS, "mount devpts")                                                                \
    X(MOUNT_PROC, "mount /proc")                                                                   \
    X(PIVOT_ROOT, "pivot_root")                                                                    \
    X(DETACH_OLD_ROOT, "detach old root")                                                          \
    X(REMOUNT_RO, "remount / read-only")                                                           \
    X(CHDIR_WORKSPACE, "chdir /workspace")                                                         \
    X(USER_LIMITS, "user limits")                                                                  \
    X(CGROUP_NS, "cgroup namespace")                                                               \
    X(SESSION, "session")                                                                          \
    X(FDS, "fds")                                                                                  \
    X(EXEC_INIT, "exec init")                                                                      \
    /* init and the task */                                                                        \
    X(INIT, "init")                                                                                \
    X(FORK_TASK, "fork task")                                                                      \
    X(TASK, "task")                                                                                \
    X(RLIMIT, "rlimit")                                                                            \
    X(CREDENTIALS, "credentials")                                                                  \
    X(CAPABILITIES, "capabilities")                                                                \
    X(NO_NEW_PRIVS, "no_new_privs")                                                                \
    X(SECCOMP, "seccomp")                                                                          \
    X(EXEC, "exec")

#define SBX_STAGE_ENUM(e, name) SBX_STAGE_##e,
enum sbx_stage { SBX_STAGES(SBX_STAGE_ENUM) SBX_STAGE_COUNT };
#undef SBX_STAGE_ENUM

/* The stage's name ("mount /proc"); "setup" for a value out of range. */
const char *sbx_stage_name(enum sbx_stage s);

/* sbx_err_stage with the stage named by the enum. */
#define sbx_err_at(err, stage, errnum, ...)                                                        \
    sbx_err_stage((err), sbx_stage_name(stage), (errnum), __VA_ARGS__)
