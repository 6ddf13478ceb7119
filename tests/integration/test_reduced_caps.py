"""The daemon with only the capabilities a container or a systemd unit gives
it (SYS_ADMIN, SETUID, SETGID, CHOWN, DAC_OVERRIDE, FOWNER, MKNOD: no
SYS_PTRACE), as root, under `setpriv --bounding-set`. Without SYS_PTRACE the
daemon may not open /proc/PID/ns/net of a sandbox whose init has already
changed its ids (it is no longer dumpable), so the sandbox's network namespace
must be held from before that: every `--net proxy` task and session must get
its egress, whatever the timing. Tasks run a few at a time, each made both by
the spawner and (pool.spawner: false) by the daemon itself."""
import os
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sbxtest import ServeDaemon, Suite, check  # noqa: E402

S = Suite("reduced_caps")
TOKEN = "caps-" + "0123456789abcdef0123456789"
TMP = tempfile.mkdtemp(prefix="sbx-caps-")
CAPS = ("sys_admin", "setuid", "setgid", "chown", "dac_override", "fowner", "mknod")
PREFIX = ["setpriv", "--bounding-set", "-all," + ",".join("+" + c for c in CAPS),
          "--inh-caps", "-all", "--"]
TASKS = 32
PARALLEL = 4


class Daemon(ServeDaemon):
    def __init__(self, name, config_text=None):
        cfg = None
        if config_text:
            cfg = os.path.join(TMP, name + ".yaml")
            with open(cfg, "w") as f:
                f.write(config_text)
        super().__init__(os.path.join(TMP, name), TOKEN, config=cfg, net="proxy",
                         prefix=PREFIX)

    extended_by_default = True
    req_timeout = 90


def cap_eff(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return None


def proxy_tasks(d):
    results = [None] * TASKS

    def worker(k):
        for i in range(k, TASKS, PARALLEL):
            try:
                st, b, _ = d.req("POST", "/runtime/exec", {"command": [
                    "/bin/sh", "-c", "echo t%d; env | grep -c _PROXY=" % i]}, headers={"X-Clone-Id": "c%d" % (i % 3)})
                results[i] = (st, b)
            except OSError as e:
                results[i] = (0, str(e))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(PARALLEL)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    bad = [(i, r) for i, r in enumerate(results)
           if not (r and r[0] == 200 and isinstance(r[1], dict) and r[1].get("exitCode") == 0
                   and r[1].get("stdout") == "t%d\n4\n" % i)]
    check(not bad, "all %d proxy tasks ran with their egress" % TASKS,
          [(i, r[0], r[1] if not isinstance(r[1], dict) else r[1].get("error") or r[1].get("stdout"))
           for i, r in bad[:3]])


def session_with_proxy(d):
    a = {"X-Clone-Id": "s"}
    st, b, _ = d.req("POST", "/runtime/start", {"sessionID": "s1"}, headers=a)
    check(st == 200, "a proxy session started", (st, b))
    st, b, _ = d.req("POST", "/runtime/exec", {"sessionID": "s1", "command": [
        "/bin/sh", "-c", "env | grep -c _PROXY="]},
                     headers=a)
    check(st == 200 and b.get("stdout") == "4\n", "its task ran with the proxy", (st, b))
    st, b, _ = d.req("POST", "/runtime/stop", {"sessionID": "s1"}, headers=a)
    check(st == 200, "the session stopped", (st, b))


def run_with(d):
    d.start(timeout=30)
    try:
        eff = cap_eff(d.proc.pid)
        check(eff is not None and not eff & (1 << 19) and eff & (1 << 21),
              "the daemon runs with SYS_ADMIN and without SYS_PTRACE", hex(eff or 0))
        proxy_tasks(d)
        session_with_proxy(d)
    finally:
        d.stop()


@S.case
def proxy_tasks_from_the_spawner():
    run_with(Daemon("spawner"))


@S.case
def proxy_tasks_made_by_the_daemon():
    run_with(Daemon("local", "pool:\n  spawner: false\n"))


S.finish()
