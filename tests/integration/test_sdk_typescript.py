"""The TypeScript SDK (sdk/typescript): compiled with tsc (the version pinned
in scripts/npm-deps.sh), its shipped .d.ts type-checked from a consumer, and
its ESM package run by Node against a real daemon (sdk_typescript_test.mjs):
exec and code, tasks with paging and cancel, files (a multi-MB file streamed
both ways), sessions and their network, the event stream resumed after
connections dropped mid-frame, skills (catalog, activation, skill tasks), agent
turns of tool calls followed to their done and canceled, errors carrying the
API's code."""
import atexit
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, HERE)
from sbxtest import Suite, check, npm_clients  # noqa: E402
from sdkutil import (ACME_TOKEN, SHARED_SKILL, TOKEN, CutRelay, SdkDaemon,  # noqa: E402
                     scratch)

NODE = "/usr/bin/node"  # Node 20 (the SDK asks for >= 18)
S = Suite("sdk-typescript")
TMP, _daemons = scratch("sbx-sdk-ts-")
PKG = os.path.join(TMP, "node_modules", "@sandbox", "sdk")
_, clients = npm_clients()
TSC = os.path.join(os.path.dirname(os.path.dirname(clients)), "tools", "node_modules", ".bin",
                   "tsc")


def tsc(*args):
    return subprocess.run([NODE, TSC] + list(args), capture_output=True, text=True, timeout=300)


@S.case
def compiles_with_tsc_and_ships_types():
    src = os.path.join(ROOT, "sdk", "typescript")
    p = tsc("-p", src, "--outDir", os.path.join(PKG, "dist"))
    check(p.returncode == 0, "tsc builds the SDK without an error", p.stdout + p.stderr)
    shutil.copy(os.path.join(src, "package.json"), PKG)
    with open(os.path.join(PKG, "package.json")) as f:
        pkg = json.load(f)
    check(pkg["type"] == "module" and not pkg.get("dependencies"), "ESM, no runtime dependency",
          pkg)
    for rel in (pkg["exports"]["."]["import"], pkg["exports"]["."]["types"]):
        check(os.path.exists(os.path.join(PKG, rel)), "shipped: " + rel)
    with open(os.path.join(PKG, "dist", "index.d.ts")) as f:
        dts = f.read()
    for name in ("class Sandbox", "interface ExecResult", "interface SandboxEvent",
                 "class NotFoundError", "stream(session?: string", "interface TurnResult",
                 "interface ToolCallResult", "waitTurn(session: string"):
        check(name in dts, "the .d.ts declares " + name)
    with open(os.path.join(PKG, "dist", "index.js")) as f:
        js = f.read()
    check(re.search(r"^import |require\(", js, re.M) is None, "imports nothing at run time")


@S.case
def types_check_in_a_consumer():
    shutil.copy(os.path.join(HERE, "sdk_typescript_types.ts"), os.path.join(TMP, "consumer.ts"))
    with open(os.path.join(TMP, "tsconfig.json"), "w") as f:
        json.dump({"compilerOptions": {"target": "ES2022", "module": "NodeNext",
                                       "moduleResolution": "NodeNext", "strict": True,
                                       "noEmit": True, "lib": ["ES2022", "DOM",
                                                               "DOM.Iterable"], "types": []},
                   "files": ["consumer.ts"]}, f)
    p = tsc("-p", TMP)
    check(p.returncode == 0, "the consumer type-checks (and each @ts-expect-error is one)",
          p.stdout + p.stderr)
    # the same file with a real mistake fails
    with open(os.path.join(TMP, "consumer.ts"), "a") as f:
        f.write("\nexport const oops: string = new Sandbox().tasks;\n")
    p = tsc("-p", TMP)
    check(p.returncode != 0 and "consumer.ts" in p.stdout, "a type error is caught", p.stdout)


D = SdkDaemon(TMP, registry=_daemons)
D.start()
RELAY = CutRelay(D.port, after=700, cuts=4)
atexit.register(RELAY.close)


@S.case
def node_runs_the_sdk_against_the_daemon():
    check(os.path.exists(os.path.join(PKG, "dist", "index.js")), "built by the first case")
    script = os.path.join(TMP, "sdk_test.mjs")
    shutil.copy(os.path.join(HERE, "sdk_typescript_test.mjs"), script)
    env = {"PATH": "/usr/bin:/bin", "SBX_URL": D.url, "SBX_RELAY": RELAY.url,
           "SBX_TOKEN": TOKEN, "SBX_ACME_TOKEN": ACME_TOKEN, "SBX_TMP": TMP,
           "SBX_SKILL": SHARED_SKILL}
    p = subprocess.run([NODE, script], capture_output=True, text=True, timeout=400, env=env,
                       cwd=TMP)
    print("\n".join("    node: " + line for line in p.stdout.splitlines()))
    check(p.returncode == 0 and re.search(r"sdk-node: \d+ passed, 0 failed", p.stdout),
          "every Node case passed", p.stdout[-4000:] + p.stderr[-3000:])
    check(p.stdout.count("\nok   ") + p.stdout.startswith("ok   ") >= 9, "all nine ran",
          p.stdout)


@S.case
def stream_resumed_through_the_relay():
    check(RELAY.cut_count == 4, "the relay dropped 4 streams mid-frame",
          (RELAY.cut_count, RELAY.resumed_from))
    r = RELAY.resumed_from
    check(r[0] == 0 and len(r) == 5 and r[1:] == sorted(set(r[1:])) and r[1] > 0,
          "each reopening sent the last whole event's id as Last-Event-ID", r)
    check(RELAY.heads and all(re.search(r"(?im)^X-Sandbox-Extended: 1\r?$", h)
                              for h in RELAY.heads),
          "every request asks for the extended answers", RELAY.heads)


S.finish()
