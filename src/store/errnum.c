#include "store/errnum.h"

#include <errno.h>

int store_errnum(sqlite3 *db, int rc)
{
    int sys = db ? sqlite3_system_errno(db) : 0;

    switch (rc & 0xff) {
    case SQLITE_FULL:
        return ENOSPC;
    case SQLITE_IOERR:
        /* A failed write that the kernel refused for space (fallocate, the
         * shared-memory file) comes back as an I/O error. */
        return sys == ENOSPC || sys == EDQUOT ? ENOSPC : EIO;
    case SQLITE_CANTOPEN:
        return sys ? sys : EIO;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return EBUSY;
    case SQLITE_NOMEM:
        return ENOMEM;
    case SQLITE_READONLY:
        return EROFS;
    case SQLITE_PERM:
    case SQLITE_AUTH:
        return EACCES;
    case SQLITE_TOOBIG:
        return EFBIG;
    case SQLITE_RANGE:
    case SQLITE_MISMATCH:
    case SQLITE_MISUSE:
        return EINVAL;
    case SQLITE_CONSTRAINT:
        switch (rc) {
        case SQLITE_CONSTRAINT_PRIMARYKEY:
        case SQLITE_CONSTRAINT_UNIQUE:
            return EEXIST;
        case SQLITE_CONSTRAINT_TRIGGER:
            return EPERM;
        default:
            return EINVAL;
        }
    default: /* CORRUPT, NOTADB, PROTOCOL, … */
        return EIO;
    }
}
