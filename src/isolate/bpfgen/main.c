/* sbx-bpfgen DEFAULT STRICT: writes the compiled programs of the two seccomp
 * profiles, as sbx_seccomp_compile_fd makes them, to the two files. Run at
 * build time; sandboxd embeds the files (isolate/seccomp_blob.S), so a
 * one-shot `sandboxd run` installs its filter without compiling it with
 * libseccomp at every start (sbx_seccomp_prebuilt_fd). A unit test checks
 * the embedded programs against a compilation on the machine that runs it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "isolate/seccomp.h"

static int write_profile(enum sbx_seccomp_profile p, const char *path)
{
    sbx_err e = {0};
    char msg[512];
    int fd = sbx_seccomp_compile_fd(p, &e);
    if (fd < 0) {
        fprintf(stderr, "sbx-bpfgen: %s: %s\n", sbx_seccomp_profile_name(p),
                sbx_err_format(&e, msg, sizeof(msg)));
        return -1;
    }
    int out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        fprintf(stderr, "sbx-bpfgen: %s: %s\n", path, strerror(errno));
        close(fd);
        return -1;
    }
    char buf[4096];
    ssize_t n;
    off_t at = 0;
    int rc = 0;
    while ((n = pread(fd, buf, sizeof(buf), at)) > 0) {
        if (write(out, buf, (size_t)n) != n) {
            rc = -1;
            break;
        }
        at += n;
    }
    if (n < 0 || close(out) < 0)
        rc = -1;
    if (rc < 0)
        fprintf(stderr, "sbx-bpfgen: writing %s: %s\n", path, strerror(errno));
    close(fd);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: sbx-bpfgen DEFAULT_FILE STRICT_FILE\n");
        return 2;
    }
    if (write_profile(SBX_SECCOMP_DEFAULT, argv[1]) < 0 ||
        write_profile(SBX_SECCOMP_STRICT, argv[2]) < 0)
        return 1;
    return 0;
}
