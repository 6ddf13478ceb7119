/* The seccomp profiles applied to every task, as data tables (unit-tested) and
 * a loader. `default` allows everything but the SECURITY.md list; `strict` is an
 * allowlist sufficient for python3, node and sh running ordinary code, stacked
 * on the `default` filter (two filters, so never looser than `default`). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

enum sbx_seccomp_profile {
    SBX_SECCOMP_DEFAULT = 0,
    SBX_SECCOMP_STRICT = 1,
};

/* "default" / "strict" -> profile; -1 with err naming the value otherwise. */
int sbx_seccomp_profile_parse(const char *s, enum sbx_seccomp_profile *out, sbx_err *err);
const char *sbx_seccomp_profile_name(enum sbx_seccomp_profile p);

/* How a listed syscall is answered. */
enum sbx_sc_action {
    SBX_SC_ERRNO_EPERM,
    SBX_SC_ERRNO_ENOSYS,
};

struct sbx_sc_rule {
    const char *name; /* syscall name as libseccomp knows it */
    enum sbx_sc_action action;
};

/* The syscalls denied outright by the default profile (SECURITY.md list). */
extern const struct sbx_sc_rule sbx_seccomp_denied[];
extern const size_t sbx_seccomp_denied_len;
/* The syscalls the strict profile allows (besides the argument-filtered ones). */
extern const char *const sbx_seccomp_strict_allowed[];
extern const size_t sbx_seccomp_strict_allowed_len;

/* Namespace flags whose presence makes clone()/unshare() fail with EPERM. */
extern const unsigned long sbx_seccomp_ns_flags;

/* An operator's table (seed 004's `seccomp_profile: {default_action,
 * syscalls: [{names, action}]}`): compiled as one more filter stacked on
 * the default profile's, so it can only narrow it (the kernel keeps the
 * strictest answer of all filters: io_uring and kin stay refused). */
enum sbx_sc_table_action {
    SBX_SCT_ALLOW = 0,
    SBX_SCT_ERRNO,       /* EPERM */
    SBX_SCT_KILL_THREAD, /* SCMP_ACT_KILL */
    SBX_SCT_KILL_PROCESS,
    SBX_SCT_TRAP,
    SBX_SCT_LOG,
};
struct sbx_sc_table_rule {
    char **names; /* NULL-terminated, libseccomp's names */
    enum sbx_sc_table_action action;
};
struct sbx_seccomp_table {
    enum sbx_sc_table_action default_action;
    struct sbx_sc_table_rule *rules;
    size_t n_rules;
};
/* "SCMP_ACT_ERRNO" (or "errno", any case) -> action; -1 naming it otherwise. */
int sbx_seccomp_action_parse(const char *s, enum sbx_sc_table_action *out, sbx_err *err);
/* 0 when libseccomp knows the syscall on this architecture; -1 naming it. */
int sbx_seccomp_syscall_check(const char *name, sbx_err *err);
void sbx_seccomp_table_free(struct sbx_seccomp_table *t);
/* The default profile's filter, then the table's, in one sealed memfd like
 * sbx_seccomp_compile_fd's. */
int sbx_seccomp_table_compile_fd(const struct sbx_seccomp_table *t, sbx_err *err);

/* Export the profile's BPF program (for tests and `doctor`): returns the
 * number of instructions (summed over the profile's filters), or -1. */
int sbx_seccomp_bpf_len(enum sbx_seccomp_profile p, sbx_err *err);

/* Compile the profile once, in the parent, into a sealed memfd holding its raw
 * BPF programs (each as a uint32 instruction count, then the instructions).
 * Returns the fd (O_CLOEXEC), or -1. Compiling costs about a millisecond, so a
 * process does it once per profile and every sandbox reuses the result. */
int sbx_seccomp_compile_fd(enum sbx_seccomp_profile p, sbx_err *err);
/* The same programs compiled when sandboxd was built (isolate/bpfgen/, the
 * same code and libseccomp), in a sealed memfd like sbx_seccomp_compile_fd's:
 * for a one-shot `sandboxd run`, which would otherwise compile at every
 * start. The unit tests check that both are the same bytes. */
int sbx_seccomp_prebuilt_fd(enum sbx_seccomp_profile p, sbx_err *err);

/* The compiled programs read back from such an fd, for loading after fork. */
struct sbx_seccomp_progs {
    void *buf;
    size_t len;
};
int sbx_seccomp_progs_read(int fd, struct sbx_seccomp_progs *out, sbx_err *err);
/* Install every program in order (NO_NEW_PRIVS must already be set); last
 * step before execve. */
int sbx_seccomp_progs_load(const struct sbx_seccomp_progs *p, sbx_err *err);
/* One more filter, stacked on the profile's in rlimit mode: memfd_create
 * answers ENOSYS. Without cgroups nothing charges a memfd's pages, and one
 * sent over a unix socket and closed is held by no process, out of reach of
 * the memory watch (isolate/init/memwatch.h); the other ways to shared
 * memory are bounded there (tmpfs by its size, SysV segments counted). */
int sbx_seccomp_deny_memfd(sbx_err *err);
void sbx_seccomp_progs_free(struct sbx_seccomp_progs *p);
