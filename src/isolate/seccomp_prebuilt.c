/* The seccomp profiles compiled at build time (isolate/bpfgen/), apart from
 * seccomp.c so that the generator, which links seccomp.c, needs no blob. */
#include <errno.h>

#include "isolate/memfd.h"
#include "isolate/seccomp.h"

/* Linked in by seccomp_blob.S. */
extern const unsigned char sbx_seccomp_blob_default[], sbx_seccomp_blob_default_end[];
extern const unsigned char sbx_seccomp_blob_strict[], sbx_seccomp_blob_strict_end[];

int sbx_seccomp_prebuilt_fd(enum sbx_seccomp_profile p, sbx_err *err)
{
    const unsigned char *blob, *end;
    switch (p) {
    case SBX_SECCOMP_DEFAULT:
        blob = sbx_seccomp_blob_default, end = sbx_seccomp_blob_default_end;
        break;
    case SBX_SECCOMP_STRICT:
        blob = sbx_seccomp_blob_strict, end = sbx_seccomp_blob_strict_end;
        break;
    default:
        return sbx_err_at(err, SBX_STAGE_SECCOMP, EINVAL, "unknown seccomp profile %d", (int)p);
    }
    return sbx_memfd_sealed("seccomp-bpf", blob, (size_t)(end - blob), SBX_STAGE_SECCOMP, err);
}
