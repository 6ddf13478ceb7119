"""OpenSandbox's own TypeScript SDK (@alibaba-group/opensandbox from npm,
unchanged) drives a real `sandboxd serve` (opensandbox_sdk_test.mjs): create
from an environment, commands streamed with their exit codes, background
commands and their logs, files, metadata and list filters, pause and resume
(a paused sandbox's processes make no progress), snapshots and a sandbox made
from one, a WebSocket server inside reached by Node's WebSocket through its
endpoint, renew, the network policy, expiry and kill. The daemon's sandboxes
get the egress (--net proxy) so the policy is enforced; the only name
resolved is a test host the daemon answers itself, and nothing connects
anywhere (the WebSocket server is on the sandbox's own loopback)."""
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sbxtest import Suite, check, npm_clients  # noqa: E402
from sdkutil import TOKEN, SdkDaemon, scratch  # noqa: E402

S = Suite("opensandbox-sdk")
TMP, _daemons = scratch("sbx-opensandbox-sdk-")
NODE, CLIENTS = npm_clients()


def run_script(domain, key, timeout=240):
    # The script resolves the SDK from a node_modules next to it.
    os.symlink(CLIENTS, os.path.join(TMP, "node_modules"))
    script = os.path.join(TMP, "opensandbox_sdk_test.mjs")
    shutil.copy(os.path.join(HERE, "opensandbox_sdk_test.mjs"), script)
    env = dict(os.environ, DOMAIN=domain, KEY=key, OPENSANDBOX_DISABLE_METRICS="",
               WS_SERVER=os.path.join(HERE, "ws_echo_server.py"))
    return subprocess.run([NODE, script], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=TMP)


D = SdkDaemon(TMP, registry=_daemons)
D.start()


@S.case
def the_sdk_drives_the_daemon_unchanged():
    p = run_script("127.0.0.1:%d" % D.port, TOKEN)
    print(p.stdout, end="")
    check(p.returncode == 0, "the SDK script passes every check", p.stderr[-3000:] + D.output())
    oks = [ln for ln in p.stdout.splitlines() if ln.startswith("ok ")]
    check(len(oks) >= 48, "it ran all its checks", len(oks))
    res = json.loads(p.stdout.rsplit("RESULT ", 1)[1])
    check(res["createToFirstOutputMs"] > 0, "the first output was timed", res)
    print("create to first output: %d ms" % res["createToFirstOutputMs"])

S.finish()
