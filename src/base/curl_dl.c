#define SBX_CURL_DL_SELF 1
#include "base/curl_dl.h"

#include <errno.h>
#include <stddef.h>

#include "base/dl.h"

struct sbx_curl_fns sbx_curl;

static bool loaded;

static const struct sbx_dl_sym syms[] = {
#define SYM(f)                                                                                     \
    {                                                                                              \
        "curl_" #f, offsetof(struct sbx_curl_fns, f)                                               \
    }
    SYM(global_init),   SYM(global_cleanup), SYM(version),          SYM(easy_init),
    SYM(easy_cleanup),  SYM(easy_reset),     SYM(easy_setopt),      SYM(easy_getinfo),
    SYM(easy_perform),  SYM(easy_strerror),  SYM(slist_append),     SYM(slist_free_all),
    SYM(multi_init),    SYM(multi_cleanup),  SYM(multi_add_handle), SYM(multi_remove_handle),
    SYM(multi_perform), SYM(multi_poll),     SYM(multi_info_read),  SYM(multi_socket_action),
    SYM(multi_assign),  SYM(multi_setopt),   SYM(getdate),
#undef SYM
};

int sbx_curl_load(sbx_err *err)
{
    if (loaded)
        return 0;
    if (sbx_dl_load("libcurl.so.4", "libcurl4", syms, sizeof(syms) / sizeof(syms[0]), &sbx_curl,
                    err) < 0)
        return -1;
    if (sbx_curl.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return sbx_err_set(err, EIO, "libcurl failed to start");
    loaded = true;
    return 0;
}

void sbx_curl_unload(void)
{
    if (loaded)
        sbx_curl.global_cleanup();
    loaded = false;
}
