/* Loading compiled seccomp programs: no libseccomp here, so the init binary
 * (built static against musl) can carry it. */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "isolate/seccomp.h"
#include "isolate/stage.h"

int sbx_seccomp_progs_read(int fd, struct sbx_seccomp_progs *out, sbx_err *err)
{
    struct stat st;
    *out = (struct sbx_seccomp_progs){0};
    if (fstat(fd, &st) < 0)
        return sbx_err_at(err, SBX_STAGE_SECCOMP, errno, "stat BPF fd");
    if (st.st_size <= 0 || st.st_size > (1 << 20))
        return sbx_err_at(err, SBX_STAGE_SECCOMP, EINVAL, "BPF fd has a bad size");
    out->buf = malloc((size_t)st.st_size);
    if (!out->buf)
        return sbx_err_at(err, SBX_STAGE_SECCOMP, ENOMEM, "BPF buffer");
    out->len = (size_t)st.st_size;
    for (size_t done = 0; done < out->len;) {
        ssize_t n = pread(fd, (char *)out->buf + done, out->len - done, (off_t)done);
        if (n <= 0) {
            sbx_seccomp_progs_free(out);
            return sbx_err_at(err, SBX_STAGE_SECCOMP, n < 0 ? errno : EIO, "read BPF fd");
        }
        done += (size_t)n;
    }
    return 0;
}

int sbx_seccomp_progs_load(const struct sbx_seccomp_progs *p, sbx_err *err)
{
    const char *at = p->buf, *end = at + p->len;
    if (!p->buf || p->len == 0)
        return sbx_err_at(err, SBX_STAGE_SECCOMP, EINVAL, "no BPF program");
    while (at < end) {
        uint32_t count;
        if ((size_t)(end - at) < sizeof(count))
            return sbx_err_at(err, SBX_STAGE_SECCOMP, EINVAL, "truncated BPF header");
        memcpy(&count, at, sizeof(count));
        at += sizeof(count);
        size_t bytes = (size_t)count * sizeof(struct sock_filter);
        if (count == 0 || count > BPF_MAXINSNS || (size_t)(end - at) < bytes)
            return sbx_err_at(err, SBX_STAGE_SECCOMP, EINVAL, "truncated BPF program");
        struct sock_fprog prog = {.len = (unsigned short)count,
                                  .filter = (struct sock_filter *)(uintptr_t)at};
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
            return sbx_err_at(err, SBX_STAGE_SECCOMP, errno, "install BPF program");
        at += bytes;
    }
    return 0;
}

int sbx_seccomp_deny_memfd(sbx_err *err)
{
#if defined(__x86_64__)
#define SBX_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SBX_AUDIT_ARCH AUDIT_ARCH_AARCH64
#else
#error "no audit arch for this architecture"
#endif
    /* Another architecture's calls are the profile's (it kills them). */
    struct sock_filter insns[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SBX_AUDIT_ARCH, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_memfd_create, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = (unsigned short)(sizeof(insns) / sizeof(insns[0])),
                              .filter = insns};
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
        return sbx_err_at(err, SBX_STAGE_SECCOMP, errno, "install the memfd_create filter");
    return 0;
}

void sbx_seccomp_progs_free(struct sbx_seccomp_progs *p)
{
    free(p->buf);
    *p = (struct sbx_seccomp_progs){0};
}
