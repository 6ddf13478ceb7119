/* One error convention for the whole code base: a function that can fail takes
 * an sbx_err *, returns a negative value and fills errnum, the stage it was in
 * and a message naming the object ("cgroup memory.limit_in_bytes"). Library
 * layers never print; the caller decides what to do with the error. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#define SBX_ERR_STAGE_MAX 40
#define SBX_ERR_MSG_MAX 256

typedef struct sbx_err {
    int errnum;                    /* errno value, 0 when not from a syscall */
    char stage[SBX_ERR_STAGE_MAX]; /* setup stage, "" when not applicable */
    char msg[SBX_ERR_MSG_MAX];
} sbx_err;

/* Fill err (which may be NULL) and return -1. */
int sbx_err_set(sbx_err *err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same, also recording the setup stage. */
int sbx_err_stage(sbx_err *err, const char *stage, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Add context on the way up: err->msg becomes "<context>: <old msg>"
 * (errnum and stage kept; cut to fit). err may be NULL. Returns -1. */
int sbx_err_wrap(sbx_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "stage: message: strerror" into buf. */
const char *sbx_err_format(const sbx_err *err, char *buf, size_t len);
/* Short symbolic errno name ("EACCES"), or "E?" when unknown. */
const char *sbx_errno_name(int errnum);

static inline void sbx_freep(void *p)
{
    free(*(void **)p);
}
static inline void sbx_closep(int *fd)
{
    if (*fd >= 0) {
        int saved = errno;
        close(*fd);
        errno = saved;
    }
}
#define cleanup_free __attribute__((cleanup(sbx_freep)))
#define cleanup_fd __attribute__((cleanup(sbx_closep)))

/* Hand ownership on: returns the pointer and leaves NULL behind. */
static inline void *sbx_steal_pointer(void *pp)
{
    void **p = pp;
    void *v = *p;
    *p = NULL;
    return v;
}
static inline int sbx_steal_fd(int *fd)
{
    int v = *fd;
    *fd = -1;
    return v;
}
#define SBX_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
