/* The flags of `sandboxd serve`: long options, "--name VALUE" or
 * "--name=VALUE", read first (for --config) and applied last. */
#include <stdio.h>
#include <string.h>

#include "daemon/config_int.h"

const char sbx_config_usage[] =
    "usage: sandboxd serve [options]\n"
    "  --config FILE          YAML configuration (see docs/configuration.md)\n"
    "  --listen ADDR          HOST:PORT, :PORT or unix:PATH (default :8080; CLAW_LISTEN_ADDR)\n"
    "  --state-dir DIR        store and workspaces (default /var/lib/sandbox)\n"
    "  --workspace-root DIR   clones' workspaces (default STATE/workspaces; CLAW_WORKSPACE)\n"
    "  --control-dir DIR      control directory (default STATE/control; CLAW_CONTROL_DIR)\n"
    "  --token TOKEN          an operator token (repeatable; CLAW_API_TOKEN=a,b)\n"
    "  --max-concurrent N     tasks running at once (default 32)\n"
    "  --log-level LEVEL      error, warn, info or debug (default info)\n"
    "  --net none|proxy|host  default network policy (default proxy)\n"
    "  --memory SIZE          default memory limit of a task (default 256M)\n"
    "  --cpu CORES            default CPU limit, cores or percent (default 0.25)\n"
    "  --pids N               default process limit (default 32)\n"
    "  --timeout DURATION     default wall-clock limit (default 300s)\n"
    "  --host-id-base N       first host id of the clones' ranges (default 100000)\n"
    "  --total-memory SIZE, --total-cpu CORES, --total-pids N\n"
    "                         caps over all sandboxes together, on the sandboxd/ parent\n"
    "                         cgroup (default 3G, 2, 512; 0: none)\n"
    "Precedence: defaults < --config file < CLAW_* variables < flags.\n";

int cfg_parse_flags(struct loader *L, int argc, char **argv, struct flag *out, size_t *n,
                    const char **config)
{
    *n = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--") == 0) {
            if (i + 1 < argc)
                return cfg_fail(L, argv[i + 1], EINVAL,
                                "unexpected argument (serve takes options)");
            break;
        }
        if (arg[0] == '-' && arg[1] != '-')
            return cfg_fail(L, arg, EINVAL, "unknown option (options are long: see --help)");
        if (arg[0] != '-')
            return cfg_fail(L, arg, EINVAL, "unexpected argument (serve takes options)");
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        struct flag f = {0};
        for (size_t j = 0; j < cfg_n_settings && !f.name; j++)
            if (cfg_settings[j].flag && strlen(cfg_settings[j].flag) == len &&
                strncmp(cfg_settings[j].flag, arg, len) == 0)
                f.s = &cfg_settings[j], f.name = cfg_settings[j].flag;
        if (!f.name && len == 8 && strncmp(arg, "--config", 8) == 0)
            f.name = "--config";
        if (!f.name && len == 7 && strncmp(arg, "--token", 7) == 0)
            f.name = "--token";
        if (!f.name) {
            char name[64];
            snprintf(name, sizeof(name), "%.*s", (int)(len < 60 ? len : 60), arg);
            return cfg_fail(L, name, EINVAL, "unknown option (see --help)");
        }
        if (eq)
            f.value = eq + 1;
        else if (i + 1 < argc)
            f.value = argv[++i];
        else
            return cfg_fail(L, f.name, EINVAL, "needs a value");
        if (strcmp(f.name, "--config") == 0) {
            if (*config)
                return cfg_fail(L, f.name, EINVAL, "given twice");
            if (!*f.value)
                return cfg_fail(L, f.name, EINVAL, "is empty");
            *config = f.value;
        }
        out[(*n)++] = f;
    }
    return 0;
}

int cfg_apply_flags(struct loader *L, const struct flag *flags, size_t n)
{
    size_t tokens = 0;
    for (size_t i = 0; i < n; i++) {
        const struct flag *f = &flags[i];
        if (strcmp(f->name, "--config") == 0)
            continue;
        if (strcmp(f->name, "--token") == 0) {
            char name[32];
            const char *why = cfg_token_problem(f->value);
            if (why)
                return cfg_fail(L, "--token", EINVAL, "%s", why);
            if (tokens++ == 0)
                cfg_drop_operator_tokens(L->c);
            snprintf(name, sizeof(name), "--token#%zu", tokens);
            if (cfg_token_add(L, name, f->value, NULL) < 0)
                return -1;
            continue;
        }
        const struct setting *s = f->s;
        if (cfg_apply(L, s->kind, (char *)L->c + s->off, s->min, s->max, f->value, f->name) < 0)
            return -1;
        if (s->lim >= 0)
            snprintf(L->lim_origin[s->lim], WHERE_MAX, "%s", f->name);
    }
    return 0;
}
