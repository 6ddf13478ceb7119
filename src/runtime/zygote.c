/* Zygotes (pool.zygote): a pooled sandbox of a python or node environment
 * holds the interpreter started ahead (`python3 -c <program>`, `node -e
 * <program>`), with the configured modules loaded, reading its task's
 * command from fd 4 (init passes on the message of
 * sbx_sandbox_send_command). The program then runs the code as the cold
 * interpreter would. One task per zygote; the zygote started with a fixed
 * environment (the daemon's base one: no tenant's or task's key), so no
 * task's secret is in any other's process. A task is given one only when
 * the variables its interpreter reads at start are exactly the zygote's.
 * It enters its working directory again once its command has come: a
 * sandbox pooled for any clone has its workspace attached (mounted over
 * that directory) then.
 *
 * Python: in __main__, sys.argv ["-c", ARGS...], the task's whole
 * environment in os.environ, an uncaught exception printed without the
 * program's own frame and exit status 1, SystemExit as usual.
 *
 * Node: the program is itself run by `node -e`, so the code's module,
 * require, __filename and the builtin globals are node's own for `-e`.
 * process.argv, execArgv and env are the task's; the code is compiled as
 * `[eval]` (wrapped as node wraps code naming `crypto`, when this node
 * does) and run in this context; code that does not compile is handed to
 * a fresh `node -e` (so its error is node's own); the uncaught-exception
 * monitor puts node's frames back in place of the program's in an error
 * that reaches the top (an uncaught exception, an unhandled rejection).
 *
 * What differs from a cold interpreter (docs/configuration.md):
 * /proc/self/cmdline and environ show the zygote's; the modules loaded
 * ahead are in sys.modules (python); the program's frames are in the stack
 * of an error made while the top-level code runs, until it reaches the top
 * (node). */
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
                                   "    os.chdir(os.getcwd())\n"
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

static const char NODE_HEAD[] =
    "/* names crypto: node wraps this program as it wraps a task's code naming it */ {\n"
    "  const fs = require('fs'), vm = require('vm');\n"
    "  const wrap = typeof crypto === 'object' && crypto !== globalThis.crypto;\n"
    "  const own = /^ {4}at \\[eval\\]:\\d+:\\d+$/, tail = new "
    "Error().stack.split('\\n').slice(1);\n"
    "  while (tail.length && own.test(tail[0])) tail.shift();\n"
    "  for (const m of [";
static const char NODE_TAIL[] =
    "]) {\n"
    "    try {\n"
    "      if (require('module').isBuiltin(m)) require(m);\n"
    "    } catch {}\n"
    "  }\n"
    "  const dyn = {filename: '[eval]', importModuleDynamically: "
    "vm.constants?.USE_MAIN_CONTEXT_DEFAULT_LOADER};\n"
    "  if (dyn.importModuleDynamically) {\n"
    "    const w = process.emitWarning;\n"
    "    process.emitWarning = () => {};\n"
    "    try {\n"
    "      new vm.Script('import(\"node:vm\").catch(() => {})', dyn).runInThisContext();\n"
    "    } finally {\n"
    "      process.emitWarning = w;\n"
    "    }\n"
    "  }\n"
    "  const b = Buffer.alloc(65536), c = [];\n"
    "  for (let n = 1; n > 0;) {\n"
    "    try {\n"
    "      n = fs.readSync(4, b);\n"
    "      c.push(Buffer.from(b.subarray(0, n)));\n"
    "    } catch (e) {\n"
    "      if (e.code !== 'EINTR' && e.code !== 'EAGAIN') throw e;\n"
    "    }\n"
    "  }\n"
    "  fs.closeSync(4);\n"
    "  const m = Buffer.concat(c);\n"
    "  if (m.length < 8) process.exit(0);\n"
    "  process.chdir(process.cwd());\n"
    "  const le = require('os').endianness() === 'LE';\n"
    "  const na = le ? m.readUInt32LE(0) : m.readUInt32BE(0);\n"
    "  const ne = le ? m.readUInt32LE(4) : m.readUInt32BE(4);\n"
    "  const s = m.subarray(8).toString().split('\\0'), a = s.slice(0, na);\n"
    "  for (const k of Object.keys(process.env)) delete process.env[k];\n"
    "  for (const kv of s.slice(na, na + ne)) {\n"
    "    const i = kv.indexOf('=');\n"
    "    if (i > 0) process.env[kv.slice(0, i)] = kv.slice(i + 1);\n"
    "  }\n"
    "  process.argv = [process.execPath].concat(a.slice(3));\n"
    "  process.execArgv = a.slice(1, 3);\n"
    "  let code = a[2], script;\n"
    "  if (wrap && /\\bcrypto\\b/.test(code)) code = "
    "`(crypto=>{{${code}}})(require('node:crypto'))`;\n"
    "  try {\n"
    "    script = new vm.Script(code, dyn);\n"
    "  } catch {\n"
    "    const r = require('child_process').spawnSync(process.execPath, a.slice(1), {stdio: "
    "'inherit', argv0: a[0]});\n"
    "    if (r.signal) process.kill(process.pid, r.signal);\n"
    "    process.exit(r.status === null ? 1 : r.status);\n"
    "  }\n"
    "  const vmf = /^ {4}at Script\\.runInThisContext \\(node:vm:\\d+:\\d+\\)$/;\n"
    "  process.on('uncaughtExceptionMonitor', (e) => {\n"
    "    try {\n"
    "      const L = e.stack.split('\\n');\n"
    "      let f = L.length;\n"
    "      while (f > 0 && L[f - 1].startsWith('    at ')) f--;\n"
    "      for (let k = f; k < L.length; k++) {\n"
    "        let j = k + 1;\n"
    "        while (j < L.length && j < k + 3 && own.test(L[j])) j++;\n"
    "        if (!vmf.test(L[k]) || !L.slice(j).every((x, i) => x === tail[i])) continue;\n"
    "        const lim = typeof Error.stackTraceLimit === 'number' ? Error.stackTraceLimit : 10;\n"
    "        e.stack = L.slice(0, k).concat(tail.slice(0, Math.max(0, lim - (k - "
    "f)))).join('\\n');\n"
    "        return;\n"
    "      }\n"
    "    } catch {}\n"
    "  });\n"
    "  /^/.exec('');\n"
    "  script.runInThisContext();\n"
    "}\n";

/* What a zygote of each language runs, and the variables its interpreter
 * reads at start (and the program lookup): a task is given a zygote only
 * when its own are exactly the zygote's. */
static const char *const PY_STARTUP[] = {"PYTHON", "LD_", "LC_", "LANG=", "PATH=", "HOME=", NULL};
/* NODE_OPTIONS, NODE_PATH (and HOME's module folders), NODE_ICU_DATA...;
 * libuv's, OpenSSL's and ICU's settings; the time zone */
static const char *const NODE_STARTUP[] = {"NODE_", "UV_", "OPENSSL_", "SSL_CERT_", "LD_", "LC_",
                                           "LANG=", "TZ=", "PATH=",    "HOME=",     NULL};
static const struct {
    const char *interp, *flag; /* the environment's command[0] (runs()), its command[1] */
    const char *head, *tail;   /* the program, around its module names */
    const char *const *startup;
} LANGS[] = {
    {"python", "-c", PROGRAM_HEAD, PROGRAM_TAIL, PY_STARTUP},
    {"node", "-e", NODE_HEAD, NODE_TAIL, NODE_STARTUP},
};

static char *make_program(const char *head, const char *tail, const struct sbx_strv *mods)
{
    size_t len = strlen(head) + strlen(tail) + 1;
    for (size_t i = 0; i < mods->n; i++)
        len += strlen(mods->v[i]) + 3; /* 'm', */
    char *p = malloc(len), *at = p;
    if (!p)
        return NULL;
    at += sprintf(at, "%s", head);
    /* names checked at start: letters, digits and _ only */
    for (size_t i = 0; i < mods->n; i++)
        at += sprintf(at, "'%s',", mods->v[i]);
    sprintf(at, "%s", tail);
    return p;
}

static bool startup_var(const char *kv, const char *const *prefixes)
{
    for (size_t i = 0; prefixes[i]; i++)
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
static bool same_startup(char *const *a, char *const *b, const char *const *prefixes)
{
    for (int pass = 0; pass < 2; pass++) {
        char *const *x = pass ? b : a, *const *y = pass ? a : b;
        for (size_t i = 0; x && x[i]; i++)
            if (startup_var(x[i], prefixes) && !has(y, x[i]))
                return false;
    }
    return true;
}

/* The command's last component is the interpreter's name, perhaps with a
 * version ("python3.11", "nodejs"), not a wrapper that only mentions it. */
static bool runs(const char *cmd, const char *interp)
{
    const char *b = strrchr(cmd, '/');
    b = b ? b + 1 : cmd;
    if (strncmp(b, interp, strlen(interp)) != 0)
        return false;
    b += strlen(interp);
    return strcmp(b, "js") == 0 || strspn(b, "0123456789.") == strlen(b);
}

int rt_zygote_for(struct sbx_runtime *rt, const struct rt_task *t, const struct sbx_environment *ev,
                  char *argv[4], char ***envp)
{
    const struct sbx_runtime_settings *set = &rt->settings;
    if (!set->pool.zygote || !ev || ev->command.n != 2 || !t->argv || !t->argv[0] || !t->argv[1] ||
        !t->argv[2])
        return 0;
    size_t l = 0;
    while (l < SBX_ARRAY_LEN(LANGS) && (strcmp(ev->command.v[1], LANGS[l].flag) != 0 ||
                                        !runs(ev->command.v[0], LANGS[l].interp)))
        l++;
    if (l == SBX_ARRAY_LEN(LANGS))
        return 0;
    sbx_err e = {0};
    if (!rt->zygote_env && !(rt->zygote_env = rt_task_env(set, SBX_NET_NONE, NULL, NULL, &e)))
        return 0;
    const struct sbx_strv *mods = l ? &set->pool.zygote_node_requires : &set->pool.zygote_imports;
    if (!rt->zygote_code[l] &&
        !(rt->zygote_code[l] = make_program(LANGS[l].head, LANGS[l].tail, mods)))
        return 0;
    if (!same_startup(t->env, rt->zygote_env, LANGS[l].startup))
        return 0;
    argv[0] = ev->command.v[0];
    argv[1] = ev->command.v[1];
    argv[2] = rt->zygote_code[l];
    argv[3] = NULL;
    *envp = rt->zygote_env;
    return 1;
}

void rt_zygote_free(struct sbx_runtime *rt)
{
    sbx_strv_free(rt->zygote_env);
    rt->zygote_env = NULL;
    for (size_t l = 0; l < SBX_ARRAY_LEN(rt->zygote_code); l++) {
        free(rt->zygote_code[l]);
        rt->zygote_code[l] = NULL;
    }
}
