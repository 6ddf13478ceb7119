/* The kernel's floor for a sandbox per task (issue 10's 1,000 tasks/s on 2
 * cores): W workers, each a loop of clone3(new user, pid, mount, net, ipc,
 * uts and cgroup namespaces: the flags sandboxd's spawner uses) whose child
 * execs /bin/true at once (no mounts, no cgroup, no init), waited with
 * waitpid. No daemon, no HTTP, no store: what is left is what any sandbox
 * per task costs. Prints tasks/s and the CPU per task of the workers and their
 * children (getrusage) and of the whole machine (/proc/stat: this also holds
 * the kernel's workers, e.g. the network namespaces' teardown, and whatever
 * else the machine runs).
 *
 *   ns_floor [--workers W] [--seconds S] [--no-net] [--no-ns]
 *
 * --no-net leaves out CLONE_NEWNET, --no-ns every namespace (a plain fork and
 * exec), to show what each costs. Needs root (or unprivileged user
 * namespaces). Built and run by hand: gcc -O2 -o ns_floor bench/ns_floor.c */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double machine_busy(void)
{
    unsigned long long v[8] = {0};
    FILE *f = fopen("/proc/stat", "r");
    if (!f || fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                     &v[4], &v[5], &v[6], &v[7]) != 8) {
        perror("/proc/stat");
        exit(1);
    }
    fclose(f);
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)sysconf(_SC_CLK_TCK);
}

static long worker(uint64_t flags, double seconds)
{
    static char *const argv[] = {"true", NULL};
    static char *const envp[] = {NULL};
    long n = 0;
    double end = now() + seconds;
    while (now() < end) {
        struct clone_args ca = {.flags = flags, .exit_signal = SIGCHLD};
        long pid = syscall(SYS_clone3, &ca, sizeof(ca));
        if (pid < 0) {
            perror("clone3");
            exit(1);
        }
        if (pid == 0) {
            execve("/bin/true", argv, envp);
            _exit(127);
        }
        int st;
        while (waitpid((pid_t)pid, &st, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "child failed: %d\n", st);
            exit(1);
        }
        n++;
    }
    return n;
}

int main(int argc, char **argv)
{
    int workers = 2;
    double seconds = 5;
    uint64_t flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC |
                     CLONE_NEWUTS | CLONE_NEWCGROUP;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--workers") && i + 1 < argc)
            workers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--no-net"))
            flags &= ~(uint64_t)CLONE_NEWNET;
        else if (!strcmp(argv[i], "--no-ns"))
            flags = 0;
        else {
            fprintf(stderr, "usage: ns_floor [--workers W] [--seconds S] [--no-net] [--no-ns]\n");
            return 2;
        }
    }
    int fds[2];
    if (pipe(fds) < 0)
        return 1;
    double m0 = machine_busy(), t0 = now();
    for (int w = 0; w < workers; w++) {
        pid_t p = fork();
        if (p == 0) {
            long n = worker(flags, seconds);
            if (write(fds[1], &n, sizeof(n)) != sizeof(n))
                _exit(1);
            _exit(0);
        }
    }
    long total = 0;
    for (int w = 0; w < workers; w++) {
        long n = 0;
        if (read(fds[0], &n, sizeof(n)) != sizeof(n))
            return 1;
        total += n;
    }
    while (wait(NULL) > 0)
        ;
    double t1 = now();
    /* The kernel tears network namespaces down later, in a worker: give it
     * a moment so that its work is counted. */
    usleep(500000);
    double m1 = machine_busy();
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    double own = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                 (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    double la[1] = {0};
    getloadavg(la, 1);
    printf("{\"flags\":\"%#llx\",\"workers\":%d,\"tasks\":%ld,\"per_s\":%.1f,"
           "\"cpu_ms_per_task_own\":%.3f,\"cpu_ms_per_task_machine\":%.3f,\"load\":%.2f}\n",
           (unsigned long long)flags, workers, total, (double)total / (t1 - t0),
           own * 1000 / (double)total, (m1 - m0) * 1000 / (double)total, la[0]);
    return 0;
}
