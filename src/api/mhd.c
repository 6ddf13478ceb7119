#include "api/mhd.h"

#include <stdbool.h>
#include <stddef.h>

#include "base/dl.h"

/* The soname of Debian 12's libmicrohttpd12 package. */
#define MHD_SONAME "libmicrohttpd.so.12"

struct sbx_mhd_api sbx_mhd;

static const struct sbx_dl_sym syms[] = {
#define SBX_MHD_SYM(name) {"MHD_" #name, offsetof(struct sbx_mhd_api, name)},
    SBX_MHD_FUNCTIONS(SBX_MHD_SYM)
#undef SBX_MHD_SYM
};

int sbx_mhd_load(sbx_err *err)
{
    static bool loaded;
    if (loaded)
        return 0;
    /* Filled whole or not at all: a library without one of them is not used. */
    struct sbx_mhd_api api;
    sbx_err e = {0};
    if (sbx_dl_load(MHD_SONAME, "libmicrohttpd12", syms, SBX_ARRAY_LEN(syms), &api, &e) < 0)
        return sbx_err_stage(err, "http", e.errnum, "%s", e.msg);
    sbx_mhd = api;
    loaded = true;
    return 0;
}
