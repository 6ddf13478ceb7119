#define SBX_ARCHIVE_DL_SELF 1
#include "daemon/archive_dl.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>

/* The soname of Debian 12's libarchive13 package. */
#define ARCHIVE_SONAME "libarchive.so.13"

struct sbx_archive_api sbx_archive;

int sbx_archive_load(sbx_err *err)
{
    static bool loaded;
    if (loaded)
        return 0;
    void *h = dlopen(ARCHIVE_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return sbx_err_set(err, ENOENT, "dlopen %s: %s (install libarchive13)", ARCHIVE_SONAME,
                           dlerror());
    struct sbx_archive_api api;
#define SBX_ARCHIVE_RESOLVE(name)                                                                  \
    if (!(*(void **)&api.name = dlsym(h, "archive_" #name))) {                                     \
        dlclose(h);                                                                                \
        return sbx_err_set(err, ENOSYS, "%s lacks archive_%s", ARCHIVE_SONAME, #name);             \
    }
    SBX_ARCHIVE_FUNCTIONS(SBX_ARCHIVE_RESOLVE)
#undef SBX_ARCHIVE_RESOLVE
    sbx_archive = api;
    loaded = true;
    return 0; /* the handle stays loaded for the life of the process */
}
