#include "isolate/init/memwatch.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

/* Distinct memfds of one sample: held by several fds or processes, each is
 * counted once. Past this many, each further one is counted as new. */
#define SEEN_MAX 256

struct sample {
    uint64_t bytes;
    ino_t seen[SEEN_MAX];
    size_t nseen;
};

static uint64_t kb_field(const char *buf, const char *name)
{
    const char *p = strstr(buf, name);
    return p ? strtoull(p + strlen(name), NULL, 10) * 1024 : 0;
}

/* The process's share of the anonymous and shared memory it maps
 * (Pss_Anon + Pss_Shmem of its smaps_rollup). Pages of mapped files are
 * left out: the binaries and libraries of /usr are the host's page cache,
 * which a cgroup would not charge to the sandbox either. */
static uint64_t process_pss(int dirfd)
{
    int fd = openat(dirfd, "smaps_rollup", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[1024];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return kb_field(buf, "\nPss_Anon:") + kb_field(buf, "\nPss_Shmem:");
}

static bool seen_before(struct sample *s, ino_t ino)
{
    for (size_t i = 0; i < s->nseen; i++)
        if (s->seen[i] == ino)
            return true;
    if (s->nseen < SEEN_MAX)
        s->seen[s->nseen++] = ino;
    return false;
}

/* memfds held by the process's fds, by the space they take. */
static void process_memfds(struct sample *s, int dirfd)
{
    int fdd = openat(dirfd, "fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fdd < 0)
        return;
    DIR *d = fdopendir(fdd);
    if (!d) {
        close(fdd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        char target[32];
        ssize_t n = readlinkat(fdd, de->d_name, target, sizeof(target) - 1);
        if (n < 7 || memcmp(target, "/memfd:", 7) != 0)
            continue;
        struct stat st;
        if (fstatat(fdd, de->d_name, &st, 0) == 0 && !seen_before(s, st.st_ino))
            s->bytes += (uint64_t)st.st_blocks * 512;
    }
    closedir(d);
}

static void processes(struct sample *s)
{
    DIR *proc = opendir("/proc");
    if (!proc)
        return;
    struct dirent *de;
    while ((de = readdir(proc))) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        int pfd = openat(dirfd(proc), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (pfd < 0)
            continue;
        s->bytes += process_pss(pfd);
        process_memfds(s, pfd);
        close(pfd);
    }
    closedir(proc);
}

/* Used space of the sandbox's tmpfs mounts, each mount once. */
static void tmpfs_used(struct sample *s)
{
    static const char *const mounts[] = {"/tmp", "/home/runner", "/dev/shm"};
    dev_t devs[3];
    size_t ndevs = 0;
    for (size_t i = 0; i < 3; i++) {
        struct stat st;
        struct statfs fs;
        if (stat(mounts[i], &st) < 0 || statfs(mounts[i], &fs) < 0)
            continue;
        bool dup = false;
        for (size_t k = 0; k < ndevs; k++)
            dup = dup || devs[k] == st.st_dev;
        if (dup)
            continue;
        devs[ndevs++] = st.st_dev;
        s->bytes += (uint64_t)(fs.f_blocks - fs.f_bfree) * (uint64_t)fs.f_bsize;
    }
}

/* SysV segments of the sandbox's IPC namespace: the "rss" column. */
static void sysv_shm(struct sample *s)
{
    FILE *f = fopen("/proc/sysvipc/shm", "re");
    if (!f)
        return;
    char line[512];
    if (!fgets(line, sizeof(line), f)) {
        fclose(f);
        return;
    }
    while (fgets(line, sizeof(line), f)) {
        unsigned long long col[16];
        int n =
            sscanf(line,
                   "%llu %llu %llo %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu "
                   "%llu %llu %llu",
                   &col[0], &col[1], &col[2], &col[3], &col[4], &col[5], &col[6], &col[7], &col[8],
                   &col[9], &col[10], &col[11], &col[12], &col[13], &col[14], &col[15]);
        if (n >= 15)
            s->bytes += col[14];
    }
    fclose(f);
}

/* Bytes queued on the TCP sockets of the sandbox's own network namespace
 * (tx_queue + rx_queue; a listening socket's columns are counts, skipped). */
static void tcp_queues(struct sample *s, const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    char line[512];
    if (fgets(line, sizeof(line), f))
        while (fgets(line, sizeof(line), f)) {
            unsigned state;
            unsigned long long tx, rx;
            if (sscanf(line, "%*s %*s %*s %x %llx:%llx", &state, &tx, &rx) == 3 && state != 0x0A)
                s->bytes += tx + rx;
        }
    fclose(f);
}

/* TCP sockets in use in the network namespace (/proc/net/sockstat: cheap,
 * unlike /proc/net/tcp); -1 when unreadable. */
static long tcp_in_use(void)
{
    FILE *f = fopen("/proc/net/sockstat", "re");
    if (!f)
        return -1;
    char line[256];
    long n = -1;
    while (n < 0 && fgets(line, sizeof(line), f))
        if (sscanf(line, "TCP: inuse %ld", &n) != 1)
            n = -1;
    fclose(f);
    return n;
}

/* The TCP queues, re-read only while the sandbox has sockets beyond those
 * it started with (the egress's listeners) and then every other sample:
 * /proc/net/tcp walks the whole host's connection table, which costs
 * milliseconds on a busy host, whatever the namespace holds. */
static uint64_t tcp_sample(void)
{
    static long baseline = -1;
    static uint64_t last;
    static unsigned tick;
    long n = tcp_in_use();
    if (baseline < 0)
        baseline = n;
    if (n >= 0 && n <= baseline)
        return last = 0;
    if (tick++ % 2 == 0) {
        struct sample t = {0};
        tcp_queues(&t, "/proc/net/tcp");
        tcp_queues(&t, "/proc/net/tcp6");
        last = t.bytes;
    }
    return last;
}

bool sbx_memwatch_task_running(void)
{
    DIR *proc = opendir("/proc");
    if (!proc)
        return false;
    bool found = false;
    struct dirent *de;
    while (!found && (de = readdir(proc))) {
        if (de->d_name[0] < '2' || de->d_name[0] > '9') {
            if (de->d_name[0] != '1' || !de->d_name[1])
                continue; /* not a pid, or pid 1 (us) */
        }
        char path[sizeof(de->d_name) + 8], buf[512];
        snprintf(path, sizeof(path), "%s/stat", de->d_name);
        int fd = openat(dirfd(proc), path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        const char *end = strrchr(buf, ')');
        long ppid = -1;
        found = end && sscanf(end + 1, " %*c %ld", &ppid) == 1 && ppid == 0;
    }
    closedir(proc);
    return found;
}

uint64_t sbx_memwatch_sample(bool tcp)
{
    static struct sample s; /* init is single-threaded; no stack for 2 KiB */
    s.bytes = 0;
    s.nseen = 0;
    processes(&s);
    tmpfs_used(&s);
    sysv_shm(&s);
    if (tcp)
        s.bytes += tcp_sample();
    return s.bytes;
}
