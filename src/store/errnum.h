/* SQLite's result codes as errnos, for the whole store (the connection and
 * the migrations alike). Not for use outside src/store/. */
#pragma once

#include <sqlite3.h>

/* The errno that rc stands for: SQLITE_FULL -> ENOSPC, SQLITE_IOERR -> EIO
 * or the system's ENOSPC, constraint -> EEXIST / EINVAL, busy -> EBUSY, …
 * db (may be NULL) gives the system errno behind an I/O error. */
int store_errnum(sqlite3 *db, int rc);
