#include <event2/event.h>
#include <stdio.h>
#include <string.h>

#include "daemon/cmd.h"

#define SBX_VERSION "0.1.0"

static void usage(FILE *f)
{
    fprintf(f, "usage: sandboxd [serve] [--config FILE] [--listen ADDR] [--state-dir DIR] ...\n"
               "       sandboxd run [options] -- COMMAND [ARGS...]\n"
               "       sandboxd doctor [--json]\n"
               "       sandboxd version\n"
               "Run 'sandboxd run --help' for the run options.\n");
}

/* libevent and evdns report recoverable trouble (a DNS upstream timing out,
 * a peer resetting) as warnings on stderr, where they would mix with the task's
 * relayed output; only errors are worth a line. */
static void event_log(int severity, const char *msg)
{
    if (severity >= EVENT_LOG_ERR)
        fprintf(stderr, "sandboxd: libevent: %s\n", msg);
}

int main(int argc, char **argv)
{
    event_set_log_callback(event_log);
    /* serve is the default, as for the original daemon. */
    if (argc < 2 || argv[1][0] == '-') {
        if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
            usage(stdout);
            return 0;
        }
        return sbx_cmd_serve(argc, argv);
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "serve") == 0)
        return sbx_cmd_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "run") == 0)
        return sbx_cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "doctor") == 0)
        return sbx_cmd_doctor(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("sandboxd %s\n", SBX_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "sandboxd: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
