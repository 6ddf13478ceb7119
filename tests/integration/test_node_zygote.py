"""Node zygotes (runtime/zygote.c, pool.zygote): a pooled sandbox of the
node environment holds `node -e <program>` started ahead, which reads its
task's command from fd 4 and runs the code as `node -e CODE` would.
Checked against a daemon without a pool, task by task: streams, exit code,
uncaught exceptions (the same stack: node's frames, not the program's),
process.exit, syntax errors, stdin, argv/execArgv/env (replaced, not
merged), require/module, timers and async code, unhandled rejections,
builtin requires and `crypto`, dynamic import, identity, timeout and OOM.
Also: a zygote serves one task and holds no other task's secret, a task
with its own NODE_* variables gets no zygote (and they are honoured), the
builtin modules of pool.zygote_node_requires are loaded ahead, and a bad
name there is refused at start naming the key."""
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sbxtest import SANDBOXD, ServeDaemon, Suite, check, config_file  # noqa: E402

S = Suite("node_zygote")
TOKEN = "nzyg-" + "0123456789abcdef0123456789ab"
TMP = tempfile.mkdtemp(prefix="sbx-nzyg-")


class Daemon(ServeDaemon):
    extended_by_default = True
    req_timeout = 30


def config(name, text):
    return config_file(TMP, name, text)


ZY = Daemon(os.path.join(TMP, "zygote"), TOKEN, config=config(
    "zygote.yaml", "sandbox:\n  network_policy: none\n"
    "pool:\n  enabled: true\n  max_idle: 4\n  idle_timeout: 60s\n  zygote: true\n"
    "  zygote_node_requires: [http, zlib]\n")).start()
COLD = Daemon(os.path.join(TMP, "cold"), TOKEN,
              config=config("cold.yaml", "sandbox:\n  network_policy: none\n")).start()


def pool_status(d):
    st, b, _ = d.req("GET", "/runtime/status")
    check(st == 200 and "pool" in b, "/runtime/status has pool", b)
    return b["pool"]


def wait_idle(d, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pool_status(d)["idle"] >= 1:
            return
        time.sleep(0.05)
    raise AssertionError("no idle pooled sandbox after %ss: %r" % (timeout, pool_status(d)))


def node(d, code, clone="n", env=None, timeout=None):
    body = {"language": "node", "code": code, "stdin": "fed\n"}
    if env:
        body["env"] = env
    if timeout:
        body["timeoutSeconds"] = timeout
    a = {"X-Tenant-Code": "nzyg", "X-Clone-Id": clone}
    st, b, _ = d.req("POST", "/runtime/exec", body, headers=a, timeout=60)
    check(st == 200, "exec answers 200", (st, b))
    return b


def zygote_hit(code, clone="n", **kw):
    wait_idle(ZY)
    before = pool_status(ZY)["zygoteHits"]
    b = node(ZY, code, clone, **kw)
    check(pool_status(ZY)["zygoteHits"] == before + 1, "run by a zygote", (code, pool_status(ZY)))
    return b


def essentials(b):
    r = b.get("report") or {}
    return (b.get("exitCode"), b.get("status"), b.get("stdout"), b.get("stderr"),
            r.get("outcome"), r.get("oomKilled"), r.get("signal"))


DEEP = "function f(n) { if (!n) throw new Error('deep'); f(n - 1); }\nf(%d);"
NODE_CASES = [
    ("print", "console.log(1, 'a', {b: [2]})"),
    ("the workspace as cwd: a relative write lands in the clone's attached workspace",
     "const fs = require('fs'); fs.writeFileSync('n.txt', 'w');"
     " console.log(process.cwd(), fs.readFileSync('/workspace/n.txt', 'utf8'),"
     " fs.statSync('n.txt').uid, fs.readdirSync('.').includes('n.txt'))"),
    ("uncaught exception (node's stack, no program frame)", "throw new Error('x')"),
    ("exception 3 calls deep", DEEP % 3),
    ("exception 8 calls deep (the stack limit cuts inside)", DEEP % 8),
    ("exception 20 calls deep", DEEP % 20),
    ("a thrown non-error", "throw 42"),
    ("process.exit(n)", "console.log('bye'); process.exit(3)"),
    ("syntax error", "x = ("),
    ("stdin", "let s = ''; process.stdin.on('data', d => s += d)"
              ".on('end', () => console.log(JSON.stringify(s)))"),
    ("argv, execArgv, require.main, module",
     "console.log(JSON.stringify([process.argv, process.execArgv, process.argv0, "
     "require.main === undefined, module.id, module.filename, module.paths, "
     "module.children.length, Object.keys(require.cache), __filename, typeof __dirname, "
     "process.title]))"),
    ("environment replaced, not merged",
     "console.log(JSON.stringify(process.env))"),
    ("the same globals", "console.log(JSON.stringify(Object.keys(globalThis)), "
                         "typeof fs, typeof http, process.listenerCount('exit'))"),
    ("timers and async code keep it alive",
     "setTimeout(() => { console.log('later'); process.exitCode = 4; }, 300);\n"
     "(async () => { await new Promise(r => setImmediate(r)); console.log('async'); })();"),
    ("unhandled rejection", "Promise.reject(new Error('r'))"),
    ("async function throwing before its first await",
     "(async () => { throw new TypeError('a'); })()"),
    ("an error made at the top, thrown later",
     "const e = new RangeError('kept'); setTimeout(() => { throw e; }, 10)"),
    ("builtin modules and the crypto identifier",
     "console.log(require('zlib').gzipSync('a').length > 0, "
     "crypto.createHash('sha1').update('a').digest('hex'), typeof globalThis.crypto.subtle)"),
    ("dynamic import", "import('node:path').then(m => console.log(m.sep, typeof m.join))"),
    ("identity", "console.log(process.getuid(), process.getgid(), process.cwd(), "
                 "require('fs').readFileSync('/proc/1/comm', 'utf8').trim())"),
    ("stderr and exitCode", "console.error('e'); process.exitCode = 5"),
    ("timeout", "setInterval(() => {}, 1000)"),
    ("oom", "const a = []; for (;;) a.push(Buffer.alloc(8 << 20, 1))"),
]


@S.case
def zygote_tasks_give_the_same_results_as_cold_node():
    node(ZY, "0")
    for name, code in NODE_CASES:
        t = 2 if name == "timeout" else 30 if name == "oom" else None
        kw = {"env": {"FOO": "bar"}, "timeout": t}
        b1 = zygote_hit(code, **kw)
        b2 = node(COLD, code, **kw)
        if os.environ.get("POOL_SHOW"):
            print(name, essentials(b1))
        check(essentials(b1) == essentials(b2), name + ": the same from a zygote and cold",
              (essentials(b1), essentials(b2)))
    b = node(COLD, "throw new Error('x')")
    check("at [eval]:1:7" in b["stderr"] and "node:internal/main/eval_string" in b["stderr"] and
          "Script.runInThisContext" not in b["stderr"], "the stack compared is node's own", b)


@S.case
def a_zygote_serves_one_task_and_sees_no_other_tasks_secrets():
    node(ZY, "0", "ns")
    b1 = zygote_hit("globalThis.LEFT = 1; console.log(process.pid, "
                    "require('fs').readlinkSync('/proc/self/ns/pid'), process.env.SECRET)",
                    "ns", env={"SECRET": "s3cr3t"})
    b2 = zygote_hit("const fs = require('fs'); console.log(typeof LEFT, "
                    "fs.readlinkSync('/proc/self/ns/pid'), 'SECRET' in process.env, "
                    "fs.readFileSync('/proc/self/environ', 'latin1').includes('s3cr3t'))", "ns")
    check(b1["exitCode"] == 0 and b2["exitCode"] == 0, "both ran", (b1, b2))
    f1, f2 = b1["stdout"].split(), b2["stdout"].split()
    check(f1[2] == "s3cr3t", "task 1 had its secret", b1)
    check(f2[0] == "undefined" and f2[2] == "false" and f2[3] == "false",
          "nothing of task 1 in task 2 (globals, environment)", (b1, b2))
    check(f2[1] != f1[1], "another pid namespace", (f1, f2))


@S.case
def node_variables_of_its_own_mean_no_zygote():
    node(ZY, "0", "nv")
    wait_idle(ZY)
    p0 = pool_status(ZY)
    b = node(ZY, "console.log(process.title)", "nv", env={"NODE_OPTIONS": "--title=mine"})
    p1 = pool_status(ZY)
    check(b["exitCode"] == 0 and b["stdout"] == "mine\n", "NODE_OPTIONS honoured", b)
    check(p1["zygoteHits"] == p0["zygoteHits"], "not run by a zygote", (p0, p1))


@S.case
def node_requires_are_loaded_ahead():
    node(ZY, "0", "nr")
    b = zygote_hit("console.log(process.moduleLoadList.includes('NativeModule http'), "
                   "process.moduleLoadList.includes('NativeModule zlib'))", "nr")
    check(b["exitCode"] == 0 and b["stdout"] == "true true\n", "http and zlib loaded ahead", b)
    b = node(COLD, "console.log(process.moduleLoadList.includes('NativeModule http'))", "nr")
    check(b["stdout"] == "false\n", "a cold node has not loaded http", b)


@S.case
def bad_zygote_node_requires_are_refused():
    path = config("bad.yaml", "pool:\n  zygote_node_requires: ['http; x']\n")
    p = subprocess.run([SANDBOXD, "serve", "--config", path, "--listen", "127.0.0.1:0",
                        "--state-dir", os.path.join(TMP, "bad")], capture_output=True,
                       text=True, timeout=30)
    check(p.returncode == 2 and "pool.zygote_node_requires" in p.stderr, "refused naming the key",
          (p.returncode, p.stderr))


ZY.stop()
COLD.stop()
S.finish()
