#include "api/listen.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "base/parse.h"

#define BACKLOG 512

int sbx_listen_parse(const char *spec, sbx_listen_spec *out, sbx_err *err)
{
    sbx_listen_spec s = {0};
    if (!spec || !*spec)
        return sbx_err_set(err, EINVAL, "listen address: empty");
    if (!strncmp(spec, "unix:", 5)) {
        const char *path = spec + 5;
        if (path[0] != '/')
            return sbx_err_set(err, EINVAL, "listen address %s: the path must be absolute", spec);
        if (strlen(path) >= sizeof(s.path))
            return sbx_err_set(err, ENAMETOOLONG, "listen address %s: path longer than %zu bytes",
                               spec, sizeof(s.path) - 1);
        s.kind = SBX_LISTEN_UNIX;
        strcpy(s.path, path);
        *out = s;
        return 0;
    }
    const char *colon;
    if (spec[0] == '[') {
        const char *close = strchr(spec, ']');
        if (!close || close[1] != ':' || close == spec + 1)
            return sbx_err_set(err, EINVAL, "listen address %s: expected [v6-address]:port", spec);
        size_t hl = (size_t)(close - spec - 1);
        if (hl >= sizeof(s.host))
            return sbx_err_set(err, EINVAL, "listen address %s: host too long", spec);
        memcpy(s.host, spec + 1, hl);
        struct in6_addr a6;
        if (inet_pton(AF_INET6, s.host, &a6) != 1)
            return sbx_err_set(err, EINVAL, "listen address %s: bad IPv6 address", spec);
        colon = close + 1;
    } else {
        colon = strrchr(spec, ':');
        if (!colon)
            return sbx_err_set(err, EINVAL, "listen address %s: expected host:port or :port", spec);
        size_t hl = (size_t)(colon - spec);
        if (hl >= sizeof(s.host))
            return sbx_err_set(err, EINVAL, "listen address %s: host too long", spec);
        memcpy(s.host, spec, hl);
        if (strchr(s.host, ':'))
            return sbx_err_set(err, EINVAL, "listen address %s: write IPv6 hosts as [addr]:port",
                               spec);
    }
    uint64_t port;
    sbx_err perr;
    if (sbx_parse_uint(colon + 1, 0, 65535, &port, &perr) < 0)
        return sbx_err_set(err, EINVAL, "listen address %s: bad port", spec);
    s.kind = SBX_LISTEN_TCP;
    s.port = (uint16_t)port;
    *out = s;
    return 0;
}

static int new_socket(int family, int *out, sbx_err *err, const char *what)
{
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return sbx_err_set(err, errno, "listen %s: socket", what);
    *out = fd;
    return 0;
}

static void describe(sbx_listener *l, const struct sockaddr *sa)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        l->port = ntohs(in->sin_port);
        snprintf(l->address, sizeof(l->address), "%s:%u", host, l->port);
    } else {
        const struct sockaddr_in6 *in6 = (const void *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        l->port = ntohs(in6->sin6_port);
        snprintf(l->address, sizeof(l->address), "[%s]:%u", host, l->port);
    }
}

static int bind_tcp(const struct sockaddr *sa, socklen_t len, bool dual, int *out, sbx_err *err,
                    const char *what)
{
    cleanup_fd int fd = -1;
    if (new_socket(sa->sa_family, &fd, err, what) < 0)
        return -1;
    int one = 1, zero = 0;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
        return sbx_err_set(err, errno, "listen %s: SO_REUSEADDR", what);
    if (dual && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) < 0)
        return sbx_err_set(err, errno, "listen %s: IPV6_V6ONLY", what);
    if (bind(fd, sa, len) < 0)
        return sbx_err_set(err, errno, "listen %s: bind", what);
    if (listen(fd, BACKLOG) < 0)
        return sbx_err_set(err, errno, "listen %s: listen", what);
    *out = sbx_steal_fd(&fd);
    return 0;
}

static int open_tcp(const sbx_listen_spec *spec, sbx_listener *l, sbx_err *err)
{
    char what[SBX_LISTEN_HOST_MAX + 16];
    snprintf(what, sizeof(what), "%s:%u", spec->host, spec->port);
    if (!spec->host[0]) {
        /* All interfaces: one dual-stack socket, or IPv4 alone on a host
         * without IPv6. */
        struct sockaddr_in6 any6 = {
            .sin6_family = AF_INET6, .sin6_port = htons(spec->port), .sin6_addr = IN6ADDR_ANY_INIT};
        sbx_err e6 = {0};
        if (bind_tcp((void *)&any6, sizeof(any6), true, &l->fd, &e6, what) == 0)
            return 0;
        if (e6.errnum != EAFNOSUPPORT) {
            if (err)
                *err = e6;
            return -1;
        }
        struct sockaddr_in any4 = {.sin_family = AF_INET,
                                   .sin_port = htons(spec->port),
                                   .sin_addr.s_addr = htonl(INADDR_ANY)};
        return bind_tcp((void *)&any4, sizeof(any4), false, &l->fd, err, what);
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV | AI_ADDRCONFIG};
    char port[8];
    snprintf(port, sizeof(port), "%u", spec->port);
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(spec->host, port, &hints, &res);
    if (rc != 0)
        return sbx_err_set(err, rc == EAI_SYSTEM ? errno : ENOENT, "listen %s: %s", what,
                           gai_strerror(rc));
    rc = -1;
    for (struct addrinfo *ai = res; ai && rc < 0; ai = ai->ai_next)
        rc = bind_tcp(ai->ai_addr, ai->ai_addrlen, false, &l->fd, err, what);
    freeaddrinfo(res);
    return rc;
}

/* A socket file nobody accepts on is left over from a process that died:
 * replace it. One that answers belongs to a live daemon: refuse. */
static int clear_stale(const char *path, const struct sockaddr_un *sun, sbx_err *err)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : sbx_err_set(err, errno, "listen unix:%s: stat", path);
    if (!S_ISSOCK(st.st_mode))
        return sbx_err_set(err, EEXIST, "listen unix:%s: exists and is not a socket", path);
    cleanup_fd int probe = -1;
    if (new_socket(AF_UNIX, &probe, err, path) < 0)
        return -1;
    /* Non-blocking connect on a unix socket answers at once: refused when
     * nobody listens, success or EAGAIN (backlog full) when someone does. */
    if (connect(probe, (const void *)sun, sizeof(*sun)) == 0 || errno == EAGAIN)
        return sbx_err_set(err, EADDRINUSE, "listen unix:%s: another process is listening", path);
    if (errno != ECONNREFUSED)
        return sbx_err_set(err, errno, "listen unix:%s: probing the old socket", path);
    if (unlink(path) < 0 && errno != ENOENT)
        return sbx_err_set(err, errno, "listen unix:%s: removing the stale socket", path);
    return 0;
}

static int open_unix(const sbx_listen_spec *spec, sbx_listener *l, sbx_err *err)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    memcpy(sun.sun_path, spec->path, strlen(spec->path) + 1);
    if (clear_stale(spec->path, &sun, err) < 0)
        return -1;
    cleanup_fd int fd = -1;
    if (new_socket(AF_UNIX, &fd, err, spec->path) < 0)
        return -1;
    /* The daemon is single-threaded, so narrowing the umask around bind()
     * cannot race: the file never exists with wider permissions. */
    mode_t old = umask(0117);
    int rc = bind(fd, (const void *)&sun, sizeof(sun));
    int bind_errno = errno;
    umask(old);
    if (rc < 0)
        return sbx_err_set(err, bind_errno, "listen unix:%s: bind", spec->path);
    struct stat st;
    if (chmod(spec->path, 0660) < 0 || stat(spec->path, &st) < 0) {
        int e = errno;
        unlink(spec->path);
        return sbx_err_set(err, e, "listen unix:%s: chmod", spec->path);
    }
    if (listen(fd, BACKLOG) < 0) {
        int e = errno;
        unlink(spec->path);
        return sbx_err_set(err, e, "listen unix:%s: listen", spec->path);
    }
    l->dev = st.st_dev;
    l->ino = st.st_ino;
    l->fd = sbx_steal_fd(&fd);
    snprintf(l->address, sizeof(l->address), "unix:%s", spec->path);
    return 0;
}

int sbx_listen_open(const sbx_listen_spec *spec, sbx_listener *out, sbx_err *err)
{
    sbx_listener l = {.fd = -1, .spec = *spec};
    if (spec->kind == SBX_LISTEN_UNIX) {
        if (open_unix(spec, &l, err) < 0)
            return -1;
    } else {
        if (open_tcp(spec, &l, err) < 0)
            return -1;
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        if (getsockname(l.fd, (void *)&ss, &len) < 0) {
            int e = errno;
            close(l.fd);
            return sbx_err_set(err, e, "listen %s: getsockname", spec->host);
        }
        describe(&l, (const void *)&ss);
    }
    *out = l;
    return 0;
}

void sbx_listen_unlink(const sbx_listener *l)
{
    if (l->spec.kind != SBX_LISTEN_UNIX)
        return;
    struct stat st;
    if (lstat(l->spec.path, &st) == 0 && st.st_dev == l->dev && st.st_ino == l->ino)
        unlink(l->spec.path);
}
