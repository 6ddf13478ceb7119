/* A library loaded with dlopen when it is first needed, its functions into a
 * table of pointers (base/curl_dl.h, daemon/archive_dl.h): what a process
 * never uses it does not map, relocate or initialise. */
#pragma once

#include <stddef.h>

#include "base/err.h"

/* One function of the table: its name and its pointer's offset in it. */
struct sbx_dl_sym {
    const char *name;
    size_t off;
};

/* dlopen soname (RTLD_LOCAL, never closed: its symbols stay valid until
 * exit) and fill the n pointers of table; -1 with err naming the library,
 * the missing function and the package (pkg) to install. */
int sbx_dl_load(const char *soname, const char *pkg, const struct sbx_dl_sym *syms, size_t n,
                void *table, sbx_err *err);
