#include "base/dl.h"

#include <dlfcn.h>
#include <errno.h>

int sbx_dl_load(const char *soname, const char *pkg, const struct sbx_dl_sym *syms, size_t n,
                void *table, sbx_err *err)
{
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return sbx_err_set(err, ENOENT, "%s cannot be loaded (%s): install %s", soname, dlerror(),
                           pkg);
    for (size_t i = 0; i < n; i++) {
        void *f = dlsym(h, syms[i].name);
        if (!f)
            return sbx_err_set(err, ENOENT, "%s has no %s: too old", soname, syms[i].name);
        /* POSIX: a data pointer from dlsym converts to the function's. */
        *(void **)((char *)table + syms[i].off) = f;
    }
    return 0;
}
