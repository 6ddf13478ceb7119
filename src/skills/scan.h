/* The guard scan of one skill directory (a flat skill or one version). It
 * reads files, so it runs in the catalog's helper process, never on the
 * daemon's loop.
 *
 * Blocked outright (verdict dangerous): no SKILL.md, any symlink, more than
 * max_files files, a line over 64 KiB, a setuid or setgid bit, a device
 * file, a fifo or socket, a total size over max_bytes, an unreadable file.
 * Then each line meets the pattern table (sbx_skill_patterns): the first
 * dangerous match blocks, a caution match marks the skill caution. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define SBX_SKILL_MAX_FILES 128
#define SBX_SKILL_MAX_LINE (64 * 1024)

enum sbx_scan_verdict { SBX_SCAN_SAFE = 0, SBX_SCAN_CAUTION, SBX_SCAN_DANGEROUS };
const char *sbx_scan_verdict_name(enum sbx_scan_verdict v); /* safe, caution, dangerous */

struct sbx_skill_pattern {
    const char *regex; /* POSIX extended */
    enum sbx_scan_verdict verdict;
    const char *what;
    int icase;
};
extern const struct sbx_skill_pattern sbx_skill_patterns[];
extern const size_t sbx_skill_patterns_len;

struct sbx_scan_result {
    enum sbx_scan_verdict verdict;
    char reason[512]; /* why dangerous ("dangerous pattern in scripts/a.sh line 3: ..."), or what
                         caution matched */
    size_t files;
    uint64_t bytes;
};

/* Scan the directory dirfd (opened by the caller; not closed). */
void sbx_skill_scan(int dirfd, uint64_t max_bytes, struct sbx_scan_result *r);
/* The verdict of one line (NUL-terminated); *which the index of the pattern
 * that decided it, -1 when safe. */
enum sbx_scan_verdict sbx_skill_scan_line(const char *line, int *which);
