/* claw-skill (also sandbox-skill): run a skill from inside a sandbox.
 *
 *     claw-skill <skill> <action> [args...]
 *     claw-skill list
 *     claw-skill <skill> --help
 *
 * A small static program (musl) that the daemon binds into every sandbox.
 * It asks the daemon, over the clone's socket at /run/sandbox/skill.sock,
 * to run the skill as a task of its own in a sandbox of the skill's tier,
 * passes its stdin (until end of file, when stdin is not a terminal),
 * relays the skill's stdout and stderr and exits with the skill's code:
 * 1 when the skill is blocked, 2 for a usage error (as the original tool).
 * The frames are described in src/skills/broker.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define SOCKET_PATH "/run/sandbox/skill.sock"

/* All of len bytes out (writing) or in; -1 on an error or an early end. */
static int xfer(int fd, void *buf, size_t len, int writing)
{
    char *p = buf;
    while (len) {
        ssize_t n = writing ? write(fd, p, len) : read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t len)
{
    return xfer(fd, (void *)buf, len, 1);
}

static int read_all(int fd, void *buf, size_t len)
{
    return xfer(fd, buf, len, 0);
}

static int send_frame(int fd, char type, const void *data, size_t len)
{
    unsigned char h[5] = {(unsigned char)type};
    uint32_t n = htonl((uint32_t)len);
    memcpy(h + 1, &n, 4);
    return write_all(fd, h, 5) < 0 || (len && write_all(fd, data, len) < 0) ? -1 : 0;
}

/* The arguments as a JSON array of strings. */
static char *args_json(int argc, char **argv, size_t *len)
{
    size_t cap = 3;
    for (int i = 1; i < argc; i++)
        cap += 6 * strlen(argv[i]) + 3;
    char *out = malloc(cap), *p = out;
    if (!out)
        return NULL;
    *p++ = '[';
    for (int i = 1; i < argc; i++) {
        if (i > 1)
            *p++ = ',';
        *p++ = '"';
        for (const unsigned char *s = (const unsigned char *)argv[i]; *s; s++) {
            if (*s == '"' || *s == '\\') {
                *p++ = '\\';
                *p++ = (char)*s;
            } else if (*s < 0x20) {
                p += sprintf(p, "\\u%04x", *s);
            } else {
                *p++ = (char)*s;
            }
        }
        *p++ = '"';
    }
    *p++ = ']';
    *len = (size_t)(p - out);
    return out;
}

static int is_help(const char *s)
{
    return strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0 || strcmp(s, "help") == 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", SOCKET_PATH);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        fprintf(stderr, "claw-skill: cannot reach the daemon at %s: %s\n", SOCKET_PATH,
                strerror(errno));
        return 1;
    }
    size_t len;
    char *args = args_json(argc, argv, &len);
    if (!args || send_frame(fd, 'a', args, len) < 0) {
        fprintf(stderr, "claw-skill: cannot send the request: %s\n", strerror(errno));
        return 1;
    }
    free(args);
    /* stdin goes to the skill when one is run and stdin is not a terminal */
    if (argc >= 3 && !is_help(argv[2]) && !isatty(0)) {
        char buf[65536];
        for (;;) {
            ssize_t n = read(0, buf, sizeof(buf));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            if (send_frame(fd, 'i', buf, (size_t)n) < 0)
                break; /* the daemon answered early (an error): read it below */
        }
    }
    (void)send_frame(fd, 'I', NULL, 0);
    char *buf = malloc(1u << 20);
    if (!buf)
        return 1;
    for (;;) {
        unsigned char h[5];
        uint32_t n;
        if (read_all(fd, h, 5) < 0)
            break;
        memcpy(&n, h + 1, 4);
        n = ntohl(n);
        if (n > (1u << 20) || read_all(fd, buf, n) < 0)
            break;
        if (h[0] == 'o')
            (void)write_all(1, buf, n);
        else if (h[0] == 'e')
            (void)write_all(2, buf, n);
        else if (h[0] == 'x' && n == 4) {
            uint32_t code;
            memcpy(&code, buf, 4);
            return (int)(ntohl(code) & 0xff);
        }
    }
    fprintf(stderr, "claw-skill: the daemon closed the connection without an exit code\n");
    return 1;
}
