#!/usr/bin/env python3
"""SECURITY.md's in-sandbox probes (tests/helpers/probe.c) run by a real
`sandboxd serve` with its default pool, each task served by a sandbox pooled
for any clone: built ahead under a host id range of the pool's, the clone's
workspace attached at take as an idmapped mount, its limits rewritten at take.
test_probes.py runs the same probes through `sandboxd run`, which never takes
a pooled sandbox; this runs them where the attach, the moved mounts and the
limits written late could open what a cold sandbox keeps shut.

Checked per probe: the probe's verdict (exit 0, no ESCAPED/FAILED line), that
the task was an any-clone hit, and from the host: the fork bomb seen at most
at the pid limit given at take, the memory bomb ended as oom at the memory
limit given at take, daemonized grandchildren killed at the timeout, no
process of the pool's ranges left, no fd of the attach reaching the task."""
import os
import shutil
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import sbxtest  # noqa: E402
from sbxtest import ServeDaemon, Suite, check, pids_of_uid  # noqa: E402

S = Suite("pool_probes")
RUNNER = 10001
RANGE = 65536
# The highest base that leaves two pool ranges (runtime/workspace.c
# rt_pool_ids): the pooled sandboxes' host uids are known here.
BASE = (65536 - 60000 - 3) * RANGE
POOL_UIDS = [BASE + 60000 * RANGE + i * RANGE + RUNNER for i in range(2)]
TOKEN = "poolprobes-" + "0123456789abcdef0123456789ab"
TMP = tempfile.mkdtemp(prefix="sbx-pool-probes-")
PROBE = os.path.join(sbxtest.HELPERS, "probe")
check(os.access(PROBE, os.X_OK), "the probe helper is built", PROBE)


class Daemon(ServeDaemon):
    extended_by_default = True
    req_timeout = 60


CONF = os.path.join(TMP, "c.yaml")
with open(CONF, "w") as f:
    f.write("sandbox:\n  network_policy: none\n  workspace_quota_mode: monitor\n")
D = Daemon(os.path.join(TMP, "d"), TOKEN, config=CONF)
D.host_id_base = BASE
D.start()
COLD_CONF = os.path.join(TMP, "cold.yaml")
with open(COLD_CONF, "w") as f:
    f.write("sandbox:\n  network_policy: none\n  workspace_quota_mode: monitor\n"
            "pool:\n  enabled: false\n")
COLD = Daemon(os.path.join(TMP, "cold"), TOKEN, config=COLD_CONF).start()
H = {"X-Tenant-Code": "pp", "X-Clone-Id": "c1"}


def status():
    st, b, _ = D.req("GET", "/runtime/status")
    check(st == 200, "status", b)
    return b["pool"]


def settle(timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = status()
        if p["idle"] >= 1 and not p["building"]:
            return
        time.sleep(0.05)
    raise AssertionError("the pool did not settle: %r" % status())


def exec_(body, d=D):
    st, b, _ = d.req("POST", "/runtime/exec", body, headers=H, timeout=90)
    check(st == 200, "exec answers 200", (st, b))
    return b


# The clone's workspace, then the probe in it (the clone's runner's).
for d in (D, COLD):
    exec_({"command": ["true"]}, d)
    ws = os.path.join(d.state, "workspaces", "pp", "c1", "work")
    shutil.copy(PROBE, os.path.join(ws, "probe"))
    os.chown(os.path.join(ws, "probe"), os.stat(ws).st_uid, os.stat(ws).st_gid)
WS = os.path.join(D.state, "workspaces", "pp", "c1", "work")


class Watch:
    """The most processes of the pool's runner uids seen at once."""

    def __init__(self):
        self.peak, self._stop = 0, threading.Event()
        self._t = threading.Thread(target=self._poll, daemon=True)

    def _poll(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, max(len(pids_of_uid(u)) for u in POOL_UIDS))
            time.sleep(0.02)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def probe(name, *args, **limits):
    settle()
    before = status()["anyCloneHits"]
    body = {"command": ["/workspace/probe", name] + [str(a) for a in args]}
    body.update(limits)
    b = exec_(body)
    check(status()["anyCloneHits"] == before + 1, name + ": an any-clone hit", status())
    deadline = time.monotonic() + 10
    while any(pids_of_uid(u) for u in POOL_UIDS) and time.monotonic() < deadline:
        time.sleep(0.05)
    check(not any(pids_of_uid(u) for u in POOL_UIDS), name + ": no process left",
          [pids_of_uid(u) for u in POOL_UIDS])
    return b


def verdicts(out):
    return sorted(x for x in out.splitlines() if x.startswith(("ESCAPED:", "FAILED:")))


def blocked(b, what, cold=None):
    """Nothing got through; with cold (the same probe in a cold sandbox of
    serve, which binds the clone's socket dir at /run/sandbox, so /run is
    there unlike under `sandboxd run`): nothing more than there."""
    out = b["stdout"]
    if cold is None:
        check(b["exitCode"] == 0, what + ": the probe ended cleanly", b)
        check(not verdicts(out), what + ": nothing got through", b)
    else:
        check(verdicts(out) == verdicts(cold["stdout"]) and b["exitCode"] == cold["exitCode"],
              what + ": pooled as cold", (b, cold))
    check("blocked:" in out or "ok:" in out, what + ": attempts made", b)


@S.case
def in_sandbox_probes_hold_in_pooled_sandboxes():
    for name, args in (("write-system", ()), ("proc-list", (os.getpid(), os.getppid())),
                       ("identity", ()), ("syscalls", ()), ("tiocsti", ()), ("fds", ()),
                       ("raw-sockets", ()), ("netconfig", ()),
                       ("signal-init", (os.getpid(), os.getppid())), ("exe", ()),
                       ("read-host", (D.state, os.path.join(D.state, "sandboxd.db"), CONF)),
                       ("workspace-rw", ("pooled-probe",))):
        cold = exec_({"command": ["/workspace/probe", name] + [str(a) for a in args]}, COLD)
        blocked(probe(name, *args), name, cold if name == "read-host" else None)
    st = os.stat(os.path.join(WS, "probe-owned.txt"))
    check((st.st_uid, st.st_gid) == (os.stat(WS).st_uid, os.stat(WS).st_gid),
          "the probe's workspace file is the clone's", (st.st_uid, os.stat(WS).st_uid))


@S.case
def fork_bomb_capped_at_the_pid_limit_given_at_take():
    with Watch() as w:
        b = probe("forkbomb", 16, pids=16, timeoutSeconds=10)
    blocked(b, "fork bomb")
    check(0 < w.peak <= 16, "the host saw at most 16 processes", w.peak)
    check(b["report"]["limits"]["pids"] == 16, "pids 16 reported", b["report"])


@S.case
def memory_bomb_ends_as_oom_at_the_limit_given_at_take():
    b = probe("membomb", 1024, memoryMB=64, timeoutSeconds=30)
    rep = b["report"]
    check(rep["outcome"] == "oom" and rep["oomKilled"] is True, "oom", rep)
    check(rep["peakMemoryBytes"] <= 64 * (1 << 20) * 1.1, "at 64 MiB", rep)


@S.case
def daemonized_grandchildren_killed_at_the_timeout():
    t0 = time.monotonic()
    with Watch() as w:
        b = probe("daemonize", 3, timeoutSeconds=3)
    check(w.peak >= 4, "the host saw the grandchildren", w.peak)
    check(b["report"]["outcome"] == "timeout" and b["exitCode"] == 124, "timeout", b)
    check("left 3 daemonized grandchildren" in b["stdout"], "it daemonized", b)
    check(time.monotonic() - t0 < 3 + 15, "ended in time")


check(D.stop() == 0, "the daemon exits 0")
COLD.stop()
shutil.rmtree(TMP, ignore_errors=True)
S.finish()
