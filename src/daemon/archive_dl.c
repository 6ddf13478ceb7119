#define SBX_ARCHIVE_DL_SELF 1
#include "daemon/archive_dl.h"

#include <stdbool.h>
#include <stddef.h>

#include "base/dl.h"

struct sbx_archive_fns sbx_archive;

static bool loaded;

static const struct sbx_dl_sym syms[] = {
#define SYM(f)                                                                                     \
    {                                                                                              \
        "archive_" #f, offsetof(struct sbx_archive_fns, f)                                         \
    }
    SYM(read_new),
    SYM(read_support_format_tar),
    SYM(read_support_filter_all),
    SYM(read_open_filename),
    SYM(read_open_fd),
    SYM(read_open),
    SYM(read_next_header),
    SYM(read_data),
    SYM(read_data_block),
    SYM(read_free),
    SYM(error_string),
    SYM(write_disk_new),
    SYM(write_disk_set_options),
    SYM(write_header),
    SYM(write_data_block),
    SYM(write_finish_entry),
    SYM(write_close),
    SYM(write_free),
    SYM(entry_pathname),
    SYM(entry_set_pathname),
    SYM(entry_filetype),
    SYM(entry_hardlink),
    SYM(entry_set_hardlink),
    SYM(entry_perm),
    SYM(entry_set_perm),
    SYM(entry_set_uid),
    SYM(entry_set_gid),
    SYM(entry_size),
    SYM(entry_size_is_set),
#undef SYM
};

int sbx_archive_load(sbx_err *err)
{
    if (!loaded && sbx_dl_load("libarchive.so.13", "libarchive13", syms,
                               sizeof(syms) / sizeof(syms[0]), &sbx_archive, err) == 0)
        loaded = true;
    return loaded ? 0 : -1;
}
