/* The schema's migrations, on a bare SQLite connection: what the store opens
 * runs them before anything else touches the file. Not for use outside
 * src/store/ (tests excepted). */
#pragma once

#include <sqlite3.h>
#include <stddef.h>

#include "base/err.h"

struct store_migration {
    int version; /* the user_version once applied; steps in increasing order */
    const char *sql;
};
/* Bring db from its PRAGMA user_version to the last step's version, all
 * pending steps in one transaction. A version above the last step is ENOTSUP;
 * a file with tables but no version of ours is EINVAL. path names the file in
 * messages. */
int store_migrate(sqlite3 *db, const char *path, const struct store_migration *steps,
                  size_t n_steps, sbx_err *err);
/* The store's own steps. */
extern const struct store_migration store_migrations[];
extern const size_t store_n_migrations;
