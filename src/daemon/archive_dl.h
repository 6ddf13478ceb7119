/* libarchive, loaded only by what reads an image (daemon/image.c): the
 * helper child serve forks to unpack one, and doctor. The daemon itself
 * never maps libarchive and the libraries behind it (libxml2 with ICU and
 * libstdc++, five compression libraries, libacl): about 2 MiB of an idle
 * daemon's RSS when it was linked (docs/performance.md). Include this
 * instead of <archive.h> and <archive_entry.h>: the archive_* calls below
 * then go through the pointers sbx_archive_load filled. */
#pragma once

#include <archive.h>
#include <archive_entry.h>

#include "base/err.h"

struct sbx_archive_fns {
    __typeof__(archive_read_new) *read_new;
    __typeof__(archive_read_support_format_tar) *read_support_format_tar;
    __typeof__(archive_read_support_filter_all) *read_support_filter_all;
    __typeof__(archive_read_open_filename) *read_open_filename;
    __typeof__(archive_read_open_fd) *read_open_fd;
    __typeof__(archive_read_open) *read_open;
    __typeof__(archive_read_next_header) *read_next_header;
    __typeof__(archive_read_data) *read_data;
    __typeof__(archive_read_data_block) *read_data_block;
    __typeof__(archive_read_free) *read_free;
    __typeof__(archive_error_string) *error_string;
    __typeof__(archive_write_disk_new) *write_disk_new;
    __typeof__(archive_write_disk_set_options) *write_disk_set_options;
    __typeof__(archive_write_header) *write_header;
    __typeof__(archive_write_data_block) *write_data_block;
    __typeof__(archive_write_finish_entry) *write_finish_entry;
    __typeof__(archive_write_close) *write_close;
    __typeof__(archive_write_free) *write_free;
    __typeof__(archive_entry_pathname) *entry_pathname;
    __typeof__(archive_entry_set_pathname) *entry_set_pathname;
    __typeof__(archive_entry_filetype) *entry_filetype;
    __typeof__(archive_entry_hardlink) *entry_hardlink;
    __typeof__(archive_entry_set_hardlink) *entry_set_hardlink;
    __typeof__(archive_entry_perm) *entry_perm;
    __typeof__(archive_entry_set_perm) *entry_set_perm;
    __typeof__(archive_entry_set_uid) *entry_set_uid;
    __typeof__(archive_entry_set_gid) *entry_set_gid;
    __typeof__(archive_entry_size) *entry_size;
    __typeof__(archive_entry_size_is_set) *entry_size_is_set;
};
extern struct sbx_archive_fns sbx_archive;

/* dlopen libarchive, once; -1 with err when it is not installed. */
int sbx_archive_load(sbx_err *err);

#ifndef SBX_ARCHIVE_DL_SELF
#define archive_read_new (*sbx_archive.read_new)
#define archive_read_support_format_tar (*sbx_archive.read_support_format_tar)
#define archive_read_support_filter_all (*sbx_archive.read_support_filter_all)
#define archive_read_open_filename (*sbx_archive.read_open_filename)
#define archive_read_open_fd (*sbx_archive.read_open_fd)
#define archive_read_open (*sbx_archive.read_open)
#define archive_read_next_header (*sbx_archive.read_next_header)
#define archive_read_data (*sbx_archive.read_data)
#define archive_read_data_block (*sbx_archive.read_data_block)
#define archive_read_free (*sbx_archive.read_free)
#define archive_error_string (*sbx_archive.error_string)
#define archive_write_disk_new (*sbx_archive.write_disk_new)
#define archive_write_disk_set_options (*sbx_archive.write_disk_set_options)
#define archive_write_header (*sbx_archive.write_header)
#define archive_write_data_block (*sbx_archive.write_data_block)
#define archive_write_finish_entry (*sbx_archive.write_finish_entry)
#define archive_write_close (*sbx_archive.write_close)
#define archive_write_free (*sbx_archive.write_free)
#define archive_entry_pathname (*sbx_archive.entry_pathname)
#define archive_entry_set_pathname (*sbx_archive.entry_set_pathname)
#define archive_entry_filetype (*sbx_archive.entry_filetype)
#define archive_entry_hardlink (*sbx_archive.entry_hardlink)
#define archive_entry_set_hardlink (*sbx_archive.entry_set_hardlink)
#define archive_entry_perm (*sbx_archive.entry_perm)
#define archive_entry_set_perm (*sbx_archive.entry_set_perm)
#define archive_entry_set_uid (*sbx_archive.entry_set_uid)
#define archive_entry_set_gid (*sbx_archive.entry_set_gid)
#define archive_entry_size (*sbx_archive.entry_size)
#define archive_entry_size_is_set (*sbx_archive.entry_size_is_set)
#endif
