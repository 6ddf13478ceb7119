/* Closed-loop HTTP load for bench/api.sh: C clients, each one thread with one
 * keep-alive connection, each sending the same POST and waiting for the whole
 * answer before sending the next. Every answer is checked (status 200 and,
 * with --expect, a substring of the body); a failed one counts as an error,
 * never as a latency.
 *
 *   api_load --port P --token T [--host 127.0.0.1] [--path /runtime/exec]
 *            [--method POST] [--body JSON] [--expect STR] --clients C
 *            (--requests N | --duration S) [--warmup-requests W | --warmup S]
 *
 * --requests N: N requests in all, shared by the clients (sequential for C=1).
 * --duration S: the clients run for S seconds; answers completed after the
 * deadline are not counted. Warm-up requests come first and are not counted.
 * Prints one JSON object: counts, elapsed seconds, requests per second and
 * latency percentiles in milliseconds (nearest rank), and "answered": every ok
 * answer including warm-up and late ones (for CPU per task). --raw FILE writes every
 * counted latency (ms, one a line). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *host = "127.0.0.1", *path = "/runtime/exec", *method = "POST", *token, *expect;
static const char *body = "{\"command\":[\"/bin/true\"]}";
static int port, clients = 1;
static long requests, warmup_requests;
static double duration, warmup_s;
static char *request;
static size_t request_len;

static atomic_long issued;      /* --requests: tickets taken */
static atomic_long warm_issued; /* warm-up tickets taken */
static double t_start, t_deadline, t_warm_end;
static pthread_barrier_t ready;

struct client {
    pthread_t th;
    int fd;
    double *lat;
    size_t n, cap;
    long errors, reconnects;
    long answered; /* every ok answer: warm-up and late ones too */
    char first_error[200];
    char buf[1 << 16];
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int connect_once(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int one = 1;
    if (fd < 0 || inet_pton(AF_INET, host, &a.sin_addr) != 1)
        return -1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void note_error(struct client *c, const char *fmt, const char *what)
{
    c->errors++;
    if (!c->first_error[0])
        snprintf(c->first_error, sizeof(c->first_error), fmt, what);
}

/* One request and its whole answer. 1: ok, 0: answer not ok, -1: I/O error. */
static int one_request(struct client *c)
{
    if (c->fd < 0 && (c->fd = connect_once()) < 0)
        return -1;
    size_t off = 0;
    while (off < request_len) {
        ssize_t w = send(c->fd, request + off, request_len - off, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        off += (size_t)w;
    }
    size_t have = 0, head_len = 0, content_len = 0;
    bool close_after = false;
    for (;;) {
        if (have == sizeof(c->buf) - 1)
            return -1;
        ssize_t r = recv(c->fd, c->buf + have, sizeof(c->buf) - 1 - have, 0);
        if (r <= 0)
            return -1;
        have += (size_t)r;
        c->buf[have] = 0;
        if (!head_len) {
            char *end = strstr(c->buf, "\r\n\r\n");
            if (!end)
                continue;
            head_len = (size_t)(end - c->buf) + 4;
            bool have_len = false;
            for (char *l = strstr(c->buf, "\r\n"); l && l < end; l = strstr(l + 2, "\r\n")) {
                if (!strncasecmp(l + 2, "Content-Length:", 15))
                    content_len = strtoul(l + 17, NULL, 10), have_len = true;
                else if (!strncasecmp(l + 2, "Connection: close", 17))
                    close_after = true;
                else if (!strncasecmp(l + 2, "Transfer-Encoding:", 18))
                    return -1; /* not sent by sandboxd for these routes */
            }
            if (!have_len)
                return -1;
        }
        if (have >= head_len + content_len)
            break;
    }
    int ok = !strncmp(c->buf, "HTTP/1.1 200 ", 13) &&
             (!expect || memmem(c->buf + head_len, content_len, expect, strlen(expect)));
    if (!ok) {
        char *eol = strstr(c->buf, "\r\n");
        if (eol)
            *eol = 0;
        note_error(c, "%.190s", !strncmp(c->buf, "HTTP/1.1 200 ", 13) ? c->buf + head_len : c->buf);
    }
    if (close_after || have != head_len + content_len) {
        close(c->fd);
        c->fd = -1;
    }
    return ok;
}

static int request_retry(struct client *c)
{
    int rc = one_request(c);
    if (rc < 0) {
        /* The server may close an idle keep-alive connection: one retry. */
        if (c->fd >= 0)
            close(c->fd);
        c->fd = -1;
        c->reconnects++;
        rc = one_request(c);
        if (rc < 0) {
            note_error(c, "%s", "I/O error or malformed answer");
            if (c->fd >= 0)
                close(c->fd);
            c->fd = -1;
        }
    }
    return rc;
}

static void *run(void *arg)
{
    struct client *c = arg;
    pthread_barrier_wait(&ready);
    /* Warm-up: uncounted. */
    while (warmup_requests ? atomic_fetch_add(&warm_issued, 1) < warmup_requests
                           : now() < t_warm_end)
        c->answered += request_retry(c) > 0;
    pthread_barrier_wait(&ready); /* warm-up done */
    pthread_barrier_wait(&ready); /* main has set the clock and reset the counts */
    for (;;) {
        if (requests && atomic_fetch_add(&issued, 1) >= requests)
            break;
        double t0 = now();
        if (!requests && t0 >= t_deadline)
            break;
        int rc = request_retry(c);
        double t1 = now();
        c->answered += rc > 0;
        if (!requests && t1 > t_deadline)
            break; /* finished after the deadline: not counted */
        if (rc <= 0)
            continue;
        if (c->n == c->cap) {
            c->cap = c->cap ? c->cap * 2 : 4096;
            c->lat = realloc(c->lat, c->cap * sizeof(*c->lat));
            if (!c->lat)
                abort();
        }
        c->lat[c->n++] = (t1 - t0) * 1000;
    }
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *v, size_t n, double p)
{
    if (!n)
        return 0;
    size_t k = (size_t)(p / 100.0 * (double)n + 0.999999); /* nearest rank */
    return v[k ? k - 1 : 0];
}

int main(int argc, char **argv)
{
    const char *raw = NULL;
    static const struct option opts[] = {{"host", 1, 0, 'h'},     {"port", 1, 0, 'p'},
                                         {"token", 1, 0, 't'},    {"path", 1, 0, 'P'},
                                         {"body", 1, 0, 'b'},     {"expect", 1, 0, 'e'},
                                         {"clients", 1, 0, 'c'},  {"requests", 1, 0, 'n'},
                                         {"duration", 1, 0, 'd'}, {"warmup-requests", 1, 0, 'W'},
                                         {"warmup", 1, 0, 'w'},   {"raw", 1, 0, 'r'},
                                         {"method", 1, 0, 'm'},   {0, 0, 0, 0}};
    for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (o) {
        case 'h':
            host = optarg;
            break;
        case 'p':
            port = atoi(optarg);
            break;
        case 't':
            token = optarg;
            break;
        case 'P':
            path = optarg;
            break;
        case 'b':
            body = optarg;
            break;
        case 'e':
            expect = optarg;
            break;
        case 'c':
            clients = atoi(optarg);
            break;
        case 'n':
            requests = atol(optarg);
            break;
        case 'd':
            duration = atof(optarg);
            break;
        case 'W':
            warmup_requests = atol(optarg);
            break;
        case 'w':
            warmup_s = atof(optarg);
            break;
        case 'r':
            raw = optarg;
            break;
        case 'm':
            method = optarg;
            break;
        default:
            return 2;
        }
    }
    if (!port || !token || clients < 1 || (!requests == !(duration > 0))) {
        fprintf(stderr, "usage: api_load --port P --token T --clients C (--requests N | "
                        "--duration S) [--warmup-requests W | --warmup S] [--host H] [--path P] "
                        "[--method M] [--body JSON] [--expect STR] [--raw FILE]\n");
        return 2;
    }
    int rc = strcmp(method, "GET")
                 ? asprintf(&request,
                            "%s %s HTTP/1.1\r\nHost: %s:%d\r\nAuthorization: Bearer %s\r\n"
                            "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                            method, path, host, port, token, strlen(body), body)
                 : asprintf(&request,
                            "GET %s HTTP/1.1\r\nHost: %s:%d\r\nAuthorization: Bearer %s\r\n\r\n",
                            path, host, port, token);
    if (rc < 0)
        return 1;
    request_len = strlen(request);

    struct client *cs = calloc((size_t)clients, sizeof(*cs));
    pthread_barrier_init(&ready, NULL, (unsigned)clients + 1);
    for (int i = 0; i < clients; i++) {
        cs[i].fd = -1;
        if (pthread_create(&cs[i].th, NULL, run, &cs[i]) != 0)
            return 1;
    }
    t_warm_end = now() + warmup_s;
    pthread_barrier_wait(&ready); /* warm-up starts */
    pthread_barrier_wait(&ready); /* warm-up done */
    long warm_errors = 0;
    for (int i = 0; i < clients; i++)
        warm_errors += cs[i].errors, cs[i].errors = 0, cs[i].first_error[0] = 0;
    t_start = now();
    t_deadline = t_start + duration;
    pthread_barrier_wait(&ready); /* measurement starts */
    for (int i = 0; i < clients; i++)
        pthread_join(cs[i].th, NULL);
    double elapsed = requests ? now() - t_start : duration;

    size_t n = 0;
    long errors = 0, reconnects = 0, answered = 0;
    const char *first_error = "";
    for (int i = 0; i < clients; i++) {
        n += cs[i].n;
        errors += cs[i].errors;
        reconnects += cs[i].reconnects;
        answered += cs[i].answered;
        if (!*first_error && cs[i].first_error[0])
            first_error = cs[i].first_error;
    }
    double *all = malloc((n ? n : 1) * sizeof(*all)), sum = 0;
    size_t k = 0;
    for (int i = 0; i < clients; i++)
        for (size_t j = 0; j < cs[i].n; j++)
            sum += all[k++] = cs[i].lat[j];
    qsort(all, n, sizeof(*all), cmp);
    if (raw) {
        FILE *f = fopen(raw, "w");
        for (size_t j = 0; f && j < n; j++)
            fprintf(f, "%.3f\n", all[j]);
        if (f)
            fclose(f);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double self_cpu =
        ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    printf("{\"clients\":%d,\"cpu_s\":%.3f,\"ok\":%zu,\"errors\":%ld,\"warmup_errors\":%ld,"
           "\"reconnects\":%ld,\"answered\":%ld,"
           "\"elapsed_s\":%.3f,\"per_s\":%.1f,\"mean_ms\":%.3f,\"min_ms\":%.3f,\"p50_ms\":%.3f,"
           "\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,\"first_error\":\"",
           clients, self_cpu, n, errors, warm_errors, reconnects, answered, elapsed,
           (double)n / elapsed, n ? sum / (double)n : 0, n ? all[0] : 0, pct(all, n, 50),
           pct(all, n, 90), pct(all, n, 99), n ? all[n - 1] : 0);
    for (const char *p = first_error; *p; p++)
        printf(*p == '"' || *p == '\\' ? "\\%c" : (unsigned char)*p < 0x20 ? "?" : "%c", *p);
    printf("\"}\n");
    return errors ? 3 : 0;
}
