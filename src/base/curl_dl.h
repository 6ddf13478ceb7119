/* libcurl, loaded only when it is needed. In sandboxctl: an https:// target,
 * `sandboxctl mcp` (curl's multi interface); plain http:// and unix: targets
 * go through cli/plain.c, so a one-shot `sandboxctl exec` loads neither
 * libcurl nor its thirty-odd libraries (TLS, LDAP, SSH, Kerberos...), whose
 * loading and constructors cost more than the rest of the command. In
 * sandboxd: the agent's first model request (agent/model.c), so an idle
 * daemon maps none of them (about 8 MiB of its RSS, and linking libcurl made
 * libssl.so bind to the executable's static libcrypto, which then exported
 * all of it: docs/performance.md). Include this instead of <curl/curl.h>:
 * the curl_* calls below then go through the pointers sbx_curl_load filled. */
#pragma once

#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>
#include <stdbool.h>

#include "base/err.h"

struct sbx_curl_fns {
    __typeof__(curl_global_init) *global_init;
    __typeof__(curl_global_cleanup) *global_cleanup;
    __typeof__(curl_version) *version;
    __typeof__(curl_easy_init) *easy_init;
    __typeof__(curl_easy_cleanup) *easy_cleanup;
    __typeof__(curl_easy_reset) *easy_reset;
    __typeof__(curl_easy_setopt) *easy_setopt;
    __typeof__(curl_easy_getinfo) *easy_getinfo;
    __typeof__(curl_easy_perform) *easy_perform;
    __typeof__(curl_easy_strerror) *easy_strerror;
    __typeof__(curl_slist_append) *slist_append;
    __typeof__(curl_slist_free_all) *slist_free_all;
    __typeof__(curl_multi_init) *multi_init;
    __typeof__(curl_multi_cleanup) *multi_cleanup;
    __typeof__(curl_multi_add_handle) *multi_add_handle;
    __typeof__(curl_multi_remove_handle) *multi_remove_handle;
    __typeof__(curl_multi_perform) *multi_perform;
    __typeof__(curl_multi_poll) *multi_poll;
    __typeof__(curl_multi_info_read) *multi_info_read;
    __typeof__(curl_multi_socket_action) *multi_socket_action;
    __typeof__(curl_multi_assign) *multi_assign;
    __typeof__(curl_multi_setopt) *multi_setopt;
    __typeof__(curl_getdate) *getdate;
};
extern struct sbx_curl_fns sbx_curl;

/* dlopen libcurl and curl_global_init it, once; -1 with err when it is not
 * installed or too old (curl_multi_poll: 7.66). */
int sbx_curl_load(sbx_err *err);
/* curl_global_cleanup, when it was loaded. */
void sbx_curl_unload(void);

#ifndef SBX_CURL_DL_SELF
#define curl_global_init (*sbx_curl.global_init)
#define curl_global_cleanup (*sbx_curl.global_cleanup)
#define curl_version (*sbx_curl.version)
#define curl_easy_init (*sbx_curl.easy_init)
#define curl_easy_cleanup (*sbx_curl.easy_cleanup)
#define curl_easy_reset (*sbx_curl.easy_reset)
#undef curl_easy_setopt /* curl.h's own pass-through macros */
#undef curl_easy_getinfo
#undef curl_share_setopt
#undef curl_multi_setopt
#define curl_easy_setopt (*sbx_curl.easy_setopt)
#define curl_easy_getinfo (*sbx_curl.easy_getinfo)
#define curl_easy_perform (*sbx_curl.easy_perform)
#define curl_easy_strerror (*sbx_curl.easy_strerror)
#define curl_slist_append (*sbx_curl.slist_append)
#define curl_slist_free_all (*sbx_curl.slist_free_all)
#define curl_multi_init (*sbx_curl.multi_init)
#define curl_multi_cleanup (*sbx_curl.multi_cleanup)
#define curl_multi_add_handle (*sbx_curl.multi_add_handle)
#define curl_multi_remove_handle (*sbx_curl.multi_remove_handle)
#define curl_multi_perform (*sbx_curl.multi_perform)
#define curl_multi_poll (*sbx_curl.multi_poll)
#define curl_multi_info_read (*sbx_curl.multi_info_read)
#define curl_multi_socket_action (*sbx_curl.multi_socket_action)
#define curl_multi_assign (*sbx_curl.multi_assign)
#define curl_multi_setopt (*sbx_curl.multi_setopt)
#define curl_getdate (*sbx_curl.getdate)
#endif
