/* Messages with fds (SCM_RIGHTS) on a unix socket, both ways: the daemon,
 * the spawner, a sandbox's child and its init (built with musl from the same
 * file: CMakeLists.txt, SBX_INIT_SOURCES) all pass fds through these two. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "isolate/sandbox.h"

/* Room for the most fds one message carries either way. */
union fd_cmsg {
    char buf[CMSG_SPACE(SBX_FDS_PASS_MAX * sizeof(int))];
    struct cmsghdr align;
};

ssize_t sbx_send_with_fds(int sock, const void *buf, size_t len, const int *fds, size_t nfds,
                          int flags)
{
    union fd_cmsg u = {0};
    if (nfds > SBX_FDS_PASS_MAX)
        return errno = E2BIG, -1;
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds) {
        mh.msg_control = u.buf, mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
        memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
    }
    ssize_t n;
    while ((n = sendmsg(sock, &mh, flags)) < 0 && errno == EINTR)
        ;
    return n;
}

ssize_t sbx_recv_with_fds(int sock, void *buf, size_t len, int *fds, size_t max, size_t *nfds,
                          int flags)
{
    union fd_cmsg u;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    *nfds = 0;
    ssize_t n;
    while ((n = recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
        ;
    if (n < 0)
        return -1;
    /* MSG_CTRUNC: the kernel dropped fds that did not fit in u (it closes
     * them); past max, we drop them ourselves. */
    bool cut = (mh.msg_flags & MSG_CTRUNC) != 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
            if (*nfds < max) {
                fds[(*nfds)++] = fd;
            } else {
                close(fd);
                cut = true;
            }
        }
    }
    if (cut) {
        for (size_t i = 0; i < *nfds; i++)
            close(fds[i]);
        *nfds = 0;
        return errno = EPROTO, -1;
    }
    return n;
}
