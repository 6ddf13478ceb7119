#include "api/mhd.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>

/* The soname of Debian 12's libmicrohttpd12 package. */
#define MHD_SONAME "libmicrohttpd.so.12"

struct sbx_mhd_api sbx_mhd;

int sbx_mhd_load(sbx_err *err)
{
    static bool loaded;
    if (loaded)
        return 0;
    void *h = dlopen(MHD_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return sbx_err_stage(err, "http", ENOENT, "dlopen %s: %s", MHD_SONAME, dlerror());
    struct sbx_mhd_api api;
#define SBX_MHD_RESOLVE(name)                                                                      \
    if (!(*(void **)&api.name = dlsym(h, "MHD_" #name))) {                                         \
        dlclose(h);                                                                                \
        return sbx_err_stage(err, "http", ENOSYS, "%s lacks MHD_%s", MHD_SONAME, #name);           \
    }
    SBX_MHD_FUNCTIONS(SBX_MHD_RESOLVE)
#undef SBX_MHD_RESOLVE
    sbx_mhd = api;
    loaded = true;
    return 0; /* the handle stays loaded for the life of the process */
}
