/* libarchive, reached through a table filled by dlopen() when the first
 * image is read (daemon/image.c).
 *
 * Debian's libarchive links libxml2 (and with it ICU and the C++ runtime),
 * nettle, ACLs and five compression libraries. Linked normally they were
 * loaded and relocated at every start of the `sandboxd` binary, and so at
 * every one-shot `sandboxd run`, which reads no image. Include this instead
 * of <archive.h>: the archive_* calls below then go through the pointers
 * sbx_archive_load filled. */
#pragma once

#include <archive.h>
#include <archive_entry.h>

#include "base/err.h"

/* Every function of the library image.c calls. */
#define SBX_ARCHIVE_FUNCTIONS(X)                                                                   \
    X(error_string)                                                                                \
    X(read_new)                                                                                    \
    X(read_free)                                                                                   \
    X(read_support_filter_all)                                                                     \
    X(read_support_format_tar)                                                                     \
    X(read_open)                                                                                   \
    X(read_open_fd)                                                                                \
    X(read_open_filename)                                                                          \
    X(read_next_header)                                                                            \
    X(read_data)                                                                                   \
    X(read_data_block)                                                                             \
    X(write_disk_new)                                                                              \
    X(write_disk_set_options)                                                                      \
    X(write_header)                                                                                \
    X(write_data_block)                                                                            \
    X(write_finish_entry)                                                                          \
    X(write_close)                                                                                 \
    X(write_free)                                                                                  \
    X(entry_filetype)                                                                              \
    X(entry_hardlink)                                                                              \
    X(entry_pathname)                                                                              \
    X(entry_perm)                                                                                  \
    X(entry_size)                                                                                  \
    X(entry_size_is_set)                                                                           \
    X(entry_set_gid)                                                                               \
    X(entry_set_hardlink)                                                                          \
    X(entry_set_pathname)                                                                          \
    X(entry_set_perm)                                                                              \
    X(entry_set_uid)

struct sbx_archive_api {
#define SBX_ARCHIVE_POINTER(name) __typeof__(archive_##name) *name;
    SBX_ARCHIVE_FUNCTIONS(SBX_ARCHIVE_POINTER)
#undef SBX_ARCHIVE_POINTER
};

/* Filled by sbx_archive_load(); read-only afterwards. */
extern struct sbx_archive_api sbx_archive;

/* Loads the library once (later calls return at once). An error names the
 * library and what the dynamic loader said. */
int sbx_archive_load(sbx_err *err);

#ifndef SBX_ARCHIVE_DL_SELF
#define archive_error_string (*sbx_archive.error_string)
#define archive_read_new (*sbx_archive.read_new)
#define archive_read_free (*sbx_archive.read_free)
#define archive_read_support_filter_all (*sbx_archive.read_support_filter_all)
#define archive_read_support_format_tar (*sbx_archive.read_support_format_tar)
#define archive_read_open (*sbx_archive.read_open)
#define archive_read_open_fd (*sbx_archive.read_open_fd)
#define archive_read_open_filename (*sbx_archive.read_open_filename)
#define archive_read_next_header (*sbx_archive.read_next_header)
#define archive_read_data (*sbx_archive.read_data)
#define archive_read_data_block (*sbx_archive.read_data_block)
#define archive_write_disk_new (*sbx_archive.write_disk_new)
#define archive_write_disk_set_options (*sbx_archive.write_disk_set_options)
#define archive_write_header (*sbx_archive.write_header)
#define archive_write_data_block (*sbx_archive.write_data_block)
#define archive_write_finish_entry (*sbx_archive.write_finish_entry)
#define archive_write_close (*sbx_archive.write_close)
#define archive_write_free (*sbx_archive.write_free)
#define archive_entry_filetype (*sbx_archive.entry_filetype)
#define archive_entry_hardlink (*sbx_archive.entry_hardlink)
#define archive_entry_pathname (*sbx_archive.entry_pathname)
#define archive_entry_perm (*sbx_archive.entry_perm)
#define archive_entry_size (*sbx_archive.entry_size)
#define archive_entry_size_is_set (*sbx_archive.entry_size_is_set)
#define archive_entry_set_gid (*sbx_archive.entry_set_gid)
#define archive_entry_set_hardlink (*sbx_archive.entry_set_hardlink)
#define archive_entry_set_pathname (*sbx_archive.entry_set_pathname)
#define archive_entry_set_perm (*sbx_archive.entry_set_perm)
#define archive_entry_set_uid (*sbx_archive.entry_set_uid)
#endif
