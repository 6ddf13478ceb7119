/* libmicrohttpd, reached through a table filled by dlopen() when the first
 * HTTP server is made.
 *
 * Debian's libmicrohttpd links GnuTLS, and with it eight more libraries whose
 * constructors run at load (GnuTLS parses its ASN.1 tables there). Linked
 * normally they were loaded at every start of the `sandboxd` binary, and so at
 * every one-shot `sandboxd run`, where they cost about 1.4 ms of a 4.5 ms run;
 * only `serve` needs them. The calls keep the library's names, less the
 * `MHD_` prefix: `sbx_mhd.run(d)` is `MHD_run(d)`. */
#pragma once

#include <microhttpd.h>

#include "base/err.h"

/* Every function of the library the API layer calls. */
#define SBX_MHD_FUNCTIONS(X)                                                                       \
    X(start_daemon)                                                                                \
    X(stop_daemon)                                                                                 \
    X(quiesce_daemon)                                                                              \
    X(run)                                                                                         \
    X(add_connection)                                                                              \
    X(get_timeout)                                                                                 \
    X(get_daemon_info)                                                                             \
    X(get_connection_info)                                                                         \
    X(suspend_connection)                                                                          \
    X(resume_connection)                                                                           \
    X(lookup_connection_value)                                                                     \
    X(lookup_connection_value_n)                                                                   \
    X(queue_response)                                                                              \
    X(create_response_from_buffer)                                                                 \
    X(create_response_from_buffer_with_free_callback)                                              \
    X(create_response_from_callback)                                                               \
    X(create_response_from_fd_at_offset64)                                                         \
    X(add_response_header)                                                                         \
    X(get_connection_values)                                                                       \
    X(create_post_processor)                                                                       \
    X(post_process)                                                                                \
    X(destroy_post_processor)                                                                      \
    X(create_response_for_upgrade)                                                                 \
    X(upgrade_action)                                                                              \
    X(destroy_response)

struct sbx_mhd_api {
#define SBX_MHD_POINTER(name) __typeof__(MHD_##name) *name;
    SBX_MHD_FUNCTIONS(SBX_MHD_POINTER)
#undef SBX_MHD_POINTER
};

/* Filled by sbx_mhd_load(); read-only afterwards. */
extern struct sbx_mhd_api sbx_mhd;

/* Loads the library once (later calls return at once). An error names the
 * library and what the dynamic loader said. */
int sbx_mhd_load(sbx_err *err);
