#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static __attribute__((format(printf, 4, 0))) int vset(sbx_err *err, const char *stage, int errnum,
                                                      const char *fmt, va_list ap)
{
    if (!err)
        return -1;
    err->errnum = errnum;
    snprintf(err->stage, sizeof(err->stage), "%s", stage ? stage : "");
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    return -1;
}

int sbx_err_set(sbx_err *err, int errnum, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(err, NULL, errnum, fmt, ap);
    va_end(ap);
    return -1;
}

int sbx_err_stage(sbx_err *err, const char *stage, int errnum, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(err, stage, errnum, fmt, ap);
    va_end(ap);
    return -1;
}

int sbx_err_wrap(sbx_err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char old[SBX_ERR_MSG_MAX];
    memcpy(old, err->msg, sizeof(old));
    old[sizeof(old) - 1] = '\0';
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    size_t at = n < 0 ? 0 : (size_t)n < sizeof(err->msg) ? (size_t)n : sizeof(err->msg) - 1;
    if (old[0] && at < sizeof(err->msg) - 1) {
        /* "<context>: <old>", cut at the buffer's end */
        size_t room = sizeof(err->msg) - at;
        size_t w = 0;
        for (const char *p = ": "; *p && w + 1 < room; p++)
            err->msg[at + w++] = *p;
        for (const char *p = old; *p && w + 1 < room; p++)
            err->msg[at + w++] = *p;
        err->msg[at + w] = '\0';
    }
    return -1;
}

/* A table, not strerrorname_np(): init is built against musl, which lacks it.
 * ENOTSUP is EOPNOTSUPP on Linux, EAGAIN EWOULDBLOCK: the first name wins. */
const char *sbx_errno_name(int errnum)
{
    static const struct {
        int num;
        const char *name;
    } names[] = {
        {EPERM, "EPERM"},
        {ENOENT, "ENOENT"},
        {ESRCH, "ESRCH"},
        {EINTR, "EINTR"},
        {EIO, "EIO"},
        {E2BIG, "E2BIG"},
        {ENOEXEC, "ENOEXEC"},
        {EBADF, "EBADF"},
        {ECHILD, "ECHILD"},
        {EAGAIN, "EAGAIN"},
        {ENOMEM, "ENOMEM"},
        {EACCES, "EACCES"},
        {EFAULT, "EFAULT"},
        {EBUSY, "EBUSY"},
        {EEXIST, "EEXIST"},
        {EXDEV, "EXDEV"},
        {ENOTDIR, "ENOTDIR"},
        {EISDIR, "EISDIR"},
        {EINVAL, "EINVAL"},
        {EMFILE, "EMFILE"},
        {ENOSPC, "ENOSPC"},
        {EROFS, "EROFS"},
        {EFBIG, "EFBIG"},
        {ENOSYS, "ENOSYS"},
        {ELOOP, "ELOOP"},
        {ENAMETOOLONG, "ENAMETOOLONG"},
        {EOVERFLOW, "EOVERFLOW"},
        {EDQUOT, "EDQUOT"},
        {ENOTSUP, "ENOTSUP"},
        {ERANGE, "ERANGE"},
        {ENXIO, "ENXIO"},
        {ENODEV, "ENODEV"},
        {ENFILE, "ENFILE"},
        {ENOTTY, "ENOTTY"},
        {ETXTBSY, "ETXTBSY"},
        {ESPIPE, "ESPIPE"},
        {EMLINK, "EMLINK"},
        {EPIPE, "EPIPE"},
        {EDOM, "EDOM"},
        {EDEADLK, "EDEADLK"},
        {ENOLCK, "ENOLCK"},
        {ENOTEMPTY, "ENOTEMPTY"},
        {ENODATA, "ENODATA"},
        {ETIME, "ETIME"},
        {EPROTO, "EPROTO"},
        {EBADMSG, "EBADMSG"},
        {EILSEQ, "EILSEQ"},
        {ENOTSOCK, "ENOTSOCK"},
        {EDESTADDRREQ, "EDESTADDRREQ"},
        {EMSGSIZE, "EMSGSIZE"},
        {EPROTOTYPE, "EPROTOTYPE"},
        {ENOPROTOOPT, "ENOPROTOOPT"},
        {EPROTONOSUPPORT, "EPROTONOSUPPORT"},
        {ESOCKTNOSUPPORT, "ESOCKTNOSUPPORT"},
        {EPFNOSUPPORT, "EPFNOSUPPORT"},
        {EAFNOSUPPORT, "EAFNOSUPPORT"},
        {EADDRINUSE, "EADDRINUSE"},
        {EADDRNOTAVAIL, "EADDRNOTAVAIL"},
        {ENETDOWN, "ENETDOWN"},
        {ENETUNREACH, "ENETUNREACH"},
        {ENETRESET, "ENETRESET"},
        {ECONNABORTED, "ECONNABORTED"},
        {ECONNRESET, "ECONNRESET"},
        {ENOBUFS, "ENOBUFS"},
        {EISCONN, "EISCONN"},
        {ENOTCONN, "ENOTCONN"},
        {ESHUTDOWN, "ESHUTDOWN"},
        {ETOOMANYREFS, "ETOOMANYREFS"},
        {ETIMEDOUT, "ETIMEDOUT"},
        {ECONNREFUSED, "ECONNREFUSED"},
        {EHOSTDOWN, "EHOSTDOWN"},
        {EHOSTUNREACH, "EHOSTUNREACH"},
        {EALREADY, "EALREADY"},
        {EINPROGRESS, "EINPROGRESS"},
        {ESTALE, "ESTALE"},
        {ECANCELED, "ECANCELED"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(names); i++)
        if (names[i].num == errnum)
            return names[i].name;
    return "E?";
}

const char *sbx_err_format(const sbx_err *err, char *buf, size_t len)
{
    const char *stage = err->stage[0] ? err->stage : NULL;
    if (err->errnum)
        snprintf(buf, len, "%s%s%s: %s (%s)", stage ? stage : "", stage ? ": " : "", err->msg,
                 strerror(err->errnum), sbx_errno_name(err->errnum));
    else
        snprintf(buf, len, "%s%s%s", stage ? stage : "", stage ? ": " : "", err->msg);
    return buf;
}
