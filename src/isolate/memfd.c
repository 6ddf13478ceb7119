#include "isolate/memfd.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

int sbx_memfd_sealed(const char *name, const void *data, size_t len, enum sbx_stage stage,
                     sbx_err *err)
{
    cleanup_fd int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return sbx_err_at(err, stage, errno, "memfd_create");
    for (size_t done = 0; done < len;) {
        ssize_t n = write(fd, (const char *)data + done, len - done);
        if (n <= 0)
            return sbx_err_at(err, stage, n < 0 ? errno : EIO, "write memfd");
        done += (size_t)n;
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
        return sbx_err_at(err, stage, errno, "seal memfd");
    return sbx_steal_fd(&fd);
}
