/* The HTTP server's listening socket: "host:port", ":port" (all
 * interfaces, dual-stack when the host has IPv6), "[v6]:port", or
 * "unix:/path". Port 0 lets the kernel choose (tests). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"

#define SBX_LISTEN_HOST_MAX 256
#define SBX_LISTEN_PATH_MAX 108 /* sun_path */

typedef enum sbx_listen_kind { SBX_LISTEN_TCP, SBX_LISTEN_UNIX } sbx_listen_kind;

typedef struct sbx_listen_spec {
    sbx_listen_kind kind;
    char host[SBX_LISTEN_HOST_MAX]; /* "" = all interfaces */
    uint16_t port;
    char path[SBX_LISTEN_PATH_MAX];
} sbx_listen_spec;

/* A bound, listening, non-blocking, close-on-exec socket. */
typedef struct sbx_listener {
    int fd;
    sbx_listen_spec spec;
    uint16_t port;     /* TCP: the port actually bound */
    char address[320]; /* printable: "127.0.0.1:8080", "[::]:8080", "unix:/run/x.sock" */
    dev_t dev;         /* unix: the socket file we made, to remove only ours */
    ino_t ino;
} sbx_listener;

/* Pure. EINVAL naming spec when it is malformed. */
int sbx_listen_parse(const char *spec, sbx_listen_spec *out, sbx_err *err);

/* Bind and listen. A unix socket is created with mode 0660; a stale socket
 * file at the path (nobody accepting on it) is replaced, a live one is
 * EADDRINUSE, anything that is not a socket is refused (EEXIST). */
int sbx_listen_open(const sbx_listen_spec *spec, sbx_listener *out, sbx_err *err);

/* Remove the unix socket file if it is still the one we made (does not close
 * the fd: the HTTP library owns it once started). */
void sbx_listen_unlink(const sbx_listener *l);
