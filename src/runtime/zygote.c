/* Python zygotes (pool.zygote): a pooled sandbox of a python environment
 * holds `python3 -c <program>` started ahead, with the configured modules
 * imported, reading its task's command from fd 4 (init passes on the
 * message of sbx_sandbox_send_command). The program then runs the code as
 * `python3 -c CODE ARGS...` would: in __main__, sys.argv ["-c", ARGS...],
 * the task's whole environment in os.environ, an uncaught exception
 * printed without the program's own frame and exit status 1, SystemExit as
 * usual. One task per zygote; the zygote started with a fixed environment
 * (the daemon's base one: no tenant's or task's key), so no task's secret
 * is in any other's process. It enters /workspace once its command has
 * come: a sandbox pooled for any clone has its workspace attached then.
 *
 * What differs from a cold python (docs/configuration.md): the startup
 * settings come from the zygote's environment, so a task is given one only
 * when its own PYTHON*, LD_*, LC_*, LANG, PATH and HOME are exactly the
 * zygote's; /proc/self/cmdline and environ show the zygote's; the modules
 * imported ahead are in sys.modules (not bound in __main__). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strv.h"
#include "runtime/runtime_int.h"

static const char PROGRAM_HEAD[] = "def _z(mods=(";
static const char PROGRAM_TAIL[] = ")):\n"
                                   "    import os, sys\n"
                                   "    for m in mods:\n"
                                   "        try:\n"
                                   "            __import__(m)\n"
                                   "        except Exception:\n"
                                   "            pass\n"
                                   "    b = bytearray()\n"
                                   "    while True:\n"
                                   "        c = os.read(4, 65536)\n"
                                   "        if not c:\n"
                                   "            break\n"
                                   "        b += c\n"
                                   "    os.close(4)\n"
                                   "    if len(b) < 8:\n"
                                   "        os._exit(0)\n"
                                   "    os.chdir('/workspace')\n"
                                   "    sys.path_importer_cache.clear()\n"
                                   "    n = int.from_bytes(b[0:4], sys.byteorder)\n"
                                   "    k = int.from_bytes(b[4:8], sys.byteorder)\n"
                                   "    s = bytes(b[8:]).split(b'\\0')\n"
                                   "    a = [os.fsdecode(x) for x in s[:n]]\n"
                                   "    os.environ.clear()\n"
                                   "    for x in s[n:n + k]:\n"
                                   "        key, _, v = x.partition(b'=')\n"
                                   "        os.environb[key] = v\n"
                                   "    sys.argv = ['-c'] + a[3:]\n"
                                   "    g = sys.modules['__main__'].__dict__\n"
                                   "    del g['_z']\n"
                                   "    try:\n"
                                   "        exec(compile(a[2], '<string>', 'exec'), g)\n"
                                   "    except SystemExit:\n"
                                   "        raise\n"
                                   "    except BaseException as e:\n"
                                   "        t = e.__traceback__.tb_next\n"
                                   "        e.__traceback__ = t\n"
                                   "        sys.excepthook(type(e), e, t)\n"
                                   "        sys.exit(1)\n"
                                   "_z()\n";

static char *make_program(const struct sbx_strv *mods)
{
    size_t len = sizeof(PROGRAM_HEAD) + sizeof(PROGRAM_TAIL);
    for (size_t i = 0; i < mods->n; i++)
        len += strlen(mods->v[i]) + 4; /* 'm', */
    char *p = malloc(len), *at = p;
    if (!p)
        return NULL;
    at += sprintf(at, "%s", PROGRAM_HEAD);
    /* names checked at start: letters, digits and _ only */
    for (size_t i = 0; i < mods->n; i++)
        at += sprintf(at, "'%s',", mods->v[i]);
    sprintf(at, "%s", PROGRAM_TAIL);
    return p;
}

/* The variables read at interpreter start (and the program lookup). */
static bool startup_var(const char *kv)
{
    static const char *const prefixes[] = {"PYTHON", "LD_", "LC_", "LANG=", "PATH=", "HOME="};
    for (size_t i = 0; i < SBX_ARRAY_LEN(prefixes); i++)
        if (strncmp(kv, prefixes[i], strlen(prefixes[i])) == 0)
            return true;
    return false;
}

static bool has(char *const *v, const char *kv)
{
    for (size_t i = 0; v && v[i]; i++)
        if (strcmp(v[i], kv) == 0)
            return true;
    return false;
}

/* Each startup variable of one is in the other, the same. */
static bool same_startup(char *const *a, char *const *b)
{
    for (int pass = 0; pass < 2; pass++) {
        char *const *x = pass ? b : a, *const *y = pass ? a : b;
        for (size_t i = 0; x && x[i]; i++)
            if (startup_var(x[i]) && !has(y, x[i]))
                return false;
    }
    return true;
}

int rt_zygote_for(struct sbx_runtime *rt, const struct rt_task *t, const struct sbx_environment *ev,
                  char *argv[4], char ***envp)
{
    const struct sbx_runtime_settings *set = &rt->settings;
    if (!set->pool.zygote || !ev || ev->command.n != 2 || strcmp(ev->command.v[1], "-c") != 0 ||
        !strstr(ev->command.v[0], "python") || !t->argv || !t->argv[0] || !t->argv[1] ||
        !t->argv[2])
        return 0;
    sbx_err e = {0};
    if (!rt->zygote_env && !(rt->zygote_env = rt_task_env(set, SBX_NET_NONE, NULL, NULL, &e)))
        return 0;
    if (!rt->zygote_code && !(rt->zygote_code = make_program(&set->pool.zygote_imports)))
        return 0;
    if (!same_startup(t->env, rt->zygote_env))
        return 0;
    argv[0] = ev->command.v[0];
    argv[1] = ev->command.v[1];
    argv[2] = rt->zygote_code;
    argv[3] = NULL;
    *envp = rt->zygote_env;
    return 1;
}

void rt_zygote_free(struct sbx_runtime *rt)
{
    sbx_strv_free(rt->zygote_env);
    free(rt->zygote_code);
    rt->zygote_env = NULL;
    rt->zygote_code = NULL;
}
