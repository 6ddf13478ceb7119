#include "skills/scan.h"

#include <dirent.h>
#include <fcntl.h>
#include <regex.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"

/* The original's seven patterns first, then what they miss. */
const struct sbx_skill_pattern sbx_skill_patterns[] = {
    {"curl[[:space:]]+.*\\$\\{?[[:alnum:]_]*(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|API)",
     SBX_SCAN_DANGEROUS, "curl command interpolating secret environment variable", 0},
    {"wget[[:space:]]+.*\\$\\{?[[:alnum:]_]*(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|API)",
     SBX_SCAN_DANGEROUS, "wget command interpolating secret environment variable", 0},
    {"printenv|env[[:space:]]*\\|", SBX_SCAN_CAUTION, "dumps environment variables", 0},
    {"ignore[[:space:]]+([[:alnum:]_]+[[:space:]]+)*(previous|all|above|prior)[[:space:]]+"
     "instructions",
     SBX_SCAN_DANGEROUS, "prompt injection instruction", 1},
    {"rm[[:space:]]+-rf[[:space:]]+/", SBX_SCAN_DANGEROUS, "recursive delete from root", 0},
    {"chmod[[:space:]]+777", SBX_SCAN_CAUTION, "world-writable permissions", 0},
    {">[[:space:]]*/etc/", SBX_SCAN_DANGEROUS, "overwrites system configuration file", 0},
    /* beyond the original */
    {"/proc/[^[:space:]]*/environ", SBX_SCAN_DANGEROUS, "reads a process's environment", 0},
    {"base64[[:space:]]+(-d|--decode|-D)[^|]*\\|[[:space:]]*(sudo[[:space:]]+)?(ba|z|da|k)?sh\\b",
     SBX_SCAN_DANGEROUS, "decodes and runs hidden shell code", 0},
    {"(curl|wget)[[:space:]][^|]*\\|[[:space:]]*(sudo[[:space:]]+)?(ba|z|da|k)?sh\\b",
     SBX_SCAN_DANGEROUS, "pipes a download into a shell", 0},
    {"/dev/(tcp|udp)/", SBX_SCAN_DANGEROUS, "reverse shell (/dev/tcp)", 0},
    {"\\b(nc|ncat|netcat)[[:space:]](.*[[:space:]])?-[[:alpha:]]*[ec]([[:space:]]|$)",
     SBX_SCAN_DANGEROUS, "reverse shell (netcat -e)", 0},
    {"socat[[:space:]].*exec:", SBX_SCAN_DANGEROUS, "reverse shell (socat exec)", 1},
    {"(ba|z|da)?sh[[:space:]]+-i[[:space:]]*[<>]&", SBX_SCAN_DANGEROUS,
     "reverse shell (interactive shell on a socket)", 0},
    {"(>|tee[[:space:]]|cp[[:space:]]|mv[[:space:]]|ln[[:space:]]).*(~|\\$HOME|\\$\\{HOME\\}|/"
     "root|/home/[^/[:space:]]+)/"
     "\\.ssh/",
     SBX_SCAN_DANGEROUS, "writes to ~/.ssh", 0},
    {"authorized_keys", SBX_SCAN_DANGEROUS, "touches ssh authorized_keys", 0},
};
const size_t sbx_skill_patterns_len = SBX_ARRAY_LEN(sbx_skill_patterns);

const char *sbx_scan_verdict_name(enum sbx_scan_verdict v)
{
    return v == SBX_SCAN_DANGEROUS ? "dangerous" : v == SBX_SCAN_CAUTION ? "caution" : "safe";
}

static regex_t compiled[SBX_ARRAY_LEN(sbx_skill_patterns)];
static bool compiled_ok[SBX_ARRAY_LEN(sbx_skill_patterns)];
static bool compiled_done;

static void compile_all(void)
{
    if (compiled_done)
        return;
    for (size_t i = 0; i < SBX_ARRAY_LEN(sbx_skill_patterns); i++)
        compiled_ok[i] =
            regcomp(&compiled[i], sbx_skill_patterns[i].regex,
                    REG_EXTENDED | REG_NOSUB | (sbx_skill_patterns[i].icase ? REG_ICASE : 0)) == 0;
    compiled_done = true;
}

enum sbx_scan_verdict sbx_skill_scan_line(const char *line, int *which)
{
    compile_all();
    enum sbx_scan_verdict v = SBX_SCAN_SAFE;
    *which = -1;
    for (size_t i = 0; i < SBX_ARRAY_LEN(sbx_skill_patterns); i++) {
        if (!compiled_ok[i] || regexec(&compiled[i], line, 0, NULL, 0) != 0)
            continue;
        if (sbx_skill_patterns[i].verdict == SBX_SCAN_DANGEROUS) {
            *which = (int)i;
            return SBX_SCAN_DANGEROUS;
        }
        if (v == SBX_SCAN_SAFE) {
            v = sbx_skill_patterns[i].verdict;
            *which = (int)i;
        }
    }
    return v;
}

struct walk {
    uint64_t max_bytes;
    struct sbx_scan_result *r;
    char *line;        /* SBX_SKILL_MAX_LINE + 1 */
    bool stop_reading; /* blocked: keep counting, read nothing more */
};

static __attribute__((format(printf, 2, 3))) void block(struct walk *w, const char *fmt, ...)
{
    w->stop_reading = true;
    if (w->r->verdict == SBX_SCAN_DANGEROUS)
        return;
    w->r->verdict = SBX_SCAN_DANGEROUS;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->r->reason, sizeof(w->r->reason), fmt, ap);
    va_end(ap);
}

static void scan_file(struct walk *w, int dirfd, const char *name, const char *rel)
{
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return block(w, "unreadable file: %s", rel);
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return block(w, "unreadable file: %s", rel);
    }
    size_t len = 0, lineno = 1;
    int c;
    bool over = false;
    for (;;) {
        c = getc_unlocked(f);
        if (c != EOF && c != '\n') {
            if (len >= SBX_SKILL_MAX_LINE) {
                over = true;
                break;
            }
            w->line[len++] = c ? (char)c : ' ';
            continue;
        }
        w->line[len] = '\0';
        int which;
        enum sbx_scan_verdict v = len ? sbx_skill_scan_line(w->line, &which) : SBX_SCAN_SAFE;
        if (v == SBX_SCAN_DANGEROUS) {
            w->r->verdict = SBX_SCAN_DANGEROUS;
            snprintf(w->r->reason, sizeof(w->r->reason), "dangerous pattern in %.300s line %zu: %s",
                     rel, lineno, sbx_skill_patterns[which].what);
            w->stop_reading = true;
            break;
        }
        if (v == SBX_SCAN_CAUTION && w->r->verdict == SBX_SCAN_SAFE) {
            w->r->verdict = SBX_SCAN_CAUTION;
            snprintf(w->r->reason, sizeof(w->r->reason), "caution: %s in %.300s line %zu",
                     sbx_skill_patterns[which].what, rel, lineno);
        }
        if (c == EOF)
            break;
        len = 0;
        lineno++;
    }
    if (over)
        block(w, "line over 64 KiB in %s line %zu", rel, lineno);
    else if (ferror(f))
        block(w, "unreadable file: %s", rel);
    fclose(f);
}

static void walk_dir(struct walk *w, int dirfd, const char *prefix, int depth)
{
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return block(w, "unreadable directory: %s", prefix[0] ? prefix : ".");
    }
    struct dirent *de;
    char rel[1024];
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(rel, sizeof(rel), "%s%s%s", prefix, prefix[0] ? "/" : "", de->d_name);
        struct stat st;
        if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            block(w, "unreadable file: %s", rel);
            continue;
        }
        if (S_ISLNK(st.st_mode)) {
            block(w, "symlink not allowed: %s", rel);
            continue;
        }
        if (st.st_mode & (S_ISUID | S_ISGID) && !S_ISDIR(st.st_mode)) {
            block(w, "setuid or setgid file not allowed: %s", rel);
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            if (st.st_mode & S_ISUID) {
                block(w, "setuid or setgid file not allowed: %s", rel);
                continue;
            }
            if (depth >= 32) {
                block(w, "directories nested too deep: %s", rel);
                continue;
            }
            int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub < 0) {
                block(w, "unreadable directory: %s", rel);
                continue;
            }
            walk_dir(w, sub, rel, depth + 1);
            close(sub);
            continue;
        }
        if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
            block(w, "device file not allowed: %s", rel);
            continue;
        }
        if (!S_ISREG(st.st_mode)) {
            block(w, "fifo or socket not allowed: %s", rel);
            continue;
        }
        w->r->files++;
        w->r->bytes += (uint64_t)st.st_size;
        if (w->r->files > SBX_SKILL_MAX_FILES)
            block(w, "too many files (more than %d)", SBX_SKILL_MAX_FILES);
        else if (w->max_bytes && w->r->bytes > w->max_bytes)
            block(w, "skill over its size bound (at %s)", rel);
        if (!w->stop_reading)
            scan_file(w, dirfd, de->d_name, rel);
    }
    closedir(d);
}

void sbx_skill_scan(int dirfd, uint64_t max_bytes, struct sbx_scan_result *r)
{
    *r = (struct sbx_scan_result){0};
    struct stat st;
    if (fstatat(dirfd, "SKILL.md", &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode)) {
        r->verdict = SBX_SCAN_DANGEROUS;
        snprintf(r->reason, sizeof(r->reason), "missing SKILL.md");
        return;
    }
    struct walk w = {.max_bytes = max_bytes, .r = r, .line = malloc(SBX_SKILL_MAX_LINE + 1)};
    if (!w.line) {
        r->verdict = SBX_SCAN_DANGEROUS;
        snprintf(r->reason, sizeof(r->reason), "out of memory");
        return;
    }
    walk_dir(&w, dirfd, "", 0);
    free(w.line);
}
