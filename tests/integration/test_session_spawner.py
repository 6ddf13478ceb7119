"""A live session's holder (the sandbox its tasks join) is made by the
spawner, like a task's, without the daemon waiting for it: on cgroup v1 it is
then counted against `sandbox.total_pids` at its clone (a process moved into
a cgroup is never checked against pids.max), so sessions cannot take the
sandboxes' parent past its process cap; a start the cap refuses gets a clear
error and the daemon goes on. `sandbox.cgroup_parent` names that parent: here
one of the test's own (`sbxsess-PID`, beside the shared `sandboxd/`, whose
cap other daemons of this machine set), removed at the end; a bad name is
refused at start, naming the key. These daemons have no warm pool: their
holders are all built cold (holders from the pool, within the same cap:
test_session_pool.py).

A real daemon on loopback (--net proxy: each session has its network
namespace and egress listeners; nothing connects anywhere), its own state
directory."""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from sbxtest import (EXTENDED, SANDBOXD, ServeDaemon, Suite, check, own_cgroups,  # noqa: E402
                     rmdir_cgroup)

S = Suite("session_spawner")
TOKEN = "op-" + "0123456789abcdef0123456789abc"
TMP = tempfile.mkdtemp(prefix="sbx-sesspawn-")
PARENT = "sbxsess-%d" % os.getpid()
PARENT2 = "sbxsess2-%d" % os.getpid()
TOTAL_PIDS = 8  # the spawner is one of them: at most 7 holders


# The daemon makes its parent in every v1 hierarchy (all removed at the
# end); the test looks at memory's and pids'.
ALL = own_cgroups()
OWN = {c: ALL[c] for c in ("memory", "pids")}
BASE = {c: os.path.join(d, PARENT) for c, d in OWN.items()}
CFG = os.path.join(TMP, "config.yaml")
with open(CFG, "w") as f:
    f.write("sandbox:\n  workspace_quota: 16m\n  cgroup_parent: %s\n  total_pids: %d\n"
            "  total_memory: 0\n  total_cpu: 0\n  pids_limit: 4\npool:\n  enabled: false\n"
            % (PARENT, TOTAL_PIDS))
D = ServeDaemon(os.path.join(TMP, "state"), TOKEN, config=CFG, net="proxy",
                total_caps=True).start()


def req(method, path, body=None, clone="c0"):
    return D.req(method, path, body, headers=dict(EXTENDED, **{"X-Tenant-Code": "t",
                                                                "X-Clone-Id": clone}))


def read(ctrl, name):
    with open(os.path.join(BASE[ctrl], name)) as f:
        return f.read().strip()


def spawner():
    _, b, _ = req("GET", "/runtime/status")
    return (b or {}).get("spawner") or {}


def sessions_below(ctrl):
    return sorted(e for e in os.listdir(BASE[ctrl]) if e.startswith("session-"))


def forks_refused():
    """pids.events "max" of the parent and every cgroup beneath it (the
    kernel counts a refused fork where the forking process is)."""
    n = 0
    for d, _, _ in os.walk(BASE["pids"]):
        try:
            with open(os.path.join(d, "pids.events")) as f:
                n += int(dict(l.split() for l in f.read().splitlines()).get("max", 0))
        except OSError:
            pass
    return n


@S.case
def sandboxes_live_beneath_the_named_parent():
    check(read("pids", "pids.max") == str(TOTAL_PIDS), "total_pids on our parent",
          read("pids", "pids.max"))
    st, b, _ = req("POST", "/runtime/start", {"sessionID": "first"})
    check(st == 200, "a session starts", (st, b))
    for ctrl in BASE:
        check(len(sessions_below(ctrl)) == 1, "its cgroup beneath %s/%s" % (ctrl, PARENT),
              sessions_below(ctrl))
    st, b, _ = req("POST", "/runtime/exec", {"sessionID": "first", "command": ["true"]})
    check(st == 200 and b.get("exitCode") == 0, "a task runs in it", (st, b))
    st, b, _ = req("POST", "/runtime/stop", {"sessionID": "first"})
    check(st == 200, "stopped", (st, b))


@S.case
def holders_are_made_by_the_spawner():
    before = spawner()
    check(before.get("running"), "the spawner runs", before)
    for i in range(3):
        st, b, _ = req("POST", "/runtime/start", {"sessionID": "s%d" % i}, clone="c%d" % i)
        check(st == 200, "session %d starts" % i, (st, b))
    after = spawner()
    check(after.get("made", 0) - before.get("made", 0) == 3, "three holders from the spawner",
          (before, after))
    check(after.get("madeInDaemon") == before.get("madeInDaemon"),
          "none made in the daemon", (before, after))
    for i in range(3):
        req("POST", "/runtime/stop", {"sessionID": "s%d" % i}, clone="c%d" % i)


@S.case
def sessions_stopped_while_starting_leave_nothing():
    # A daemon of its own, without a process cap (PARENT2): 20 starts in
    # flight (their holders asked of the spawner, which makes them one after
    # the other), then a stop for each at once. A stopped start answers 409;
    # a holder that comes after its session ended is released like a
    # session's, cgroup and all (it was killed, and its cgroup left behind
    # when still busy at once). Again until some stop came first.
    import threading
    cfg = os.path.join(TMP, "nocap.yaml")
    with open(cfg, "w") as f:
        f.write("sandbox:\n  workspace_quota: 16m\n  cgroup_parent: %s\npool:\n  enabled: false\n"
                % PARENT2)
    d2 = ServeDaemon(os.path.join(TMP, "state2"), TOKEN, config=cfg, net="proxy").start()
    base2 = {c: os.path.join(d, PARENT2) for c, d in OWN.items()}

    def below(c):
        return sorted(e for e in os.listdir(base2[c]) if e.startswith("session-"))

    def r2(path, i):
        return d2.req("POST", path, {"sessionID": "gone%d" % i},
                      headers=dict(EXTENDED, **{"X-Tenant-Code": "t", "X-Clone-Id": "g%d" % i}))

    stopped_first = 0
    try:
        for attempt in range(5):
            got = []
            ts = [threading.Thread(target=lambda i=i: got.append(r2("/runtime/start", i)))
                  for i in range(20)]
            for t in ts:
                t.start()
            time.sleep(0.005)
            for i in range(20):
                r2("/runtime/stop", i)
            for t in ts:
                t.join()
            for st, b, _ in got:
                check(st == 200 or (st == 409 and "before it was ready" in b["error"]["message"]),
                      "a start answers 200, or 409 when stopped first", (st, b))
            stopped_first += sum(1 for st, _, _ in got if st == 409)
            for i in range(20):  # those that were ready first
                r2("/runtime/stop", i)
            deadline = time.monotonic() + 10
            while any(below(c) for c in base2) and time.monotonic() < deadline:
                time.sleep(0.1)
            for c in base2:
                check(not below(c), "no session cgroup left beneath %s/%s" % (c, PARENT2),
                      below(c))
            if stopped_first:
                break
    finally:
        d2.stop()
        for d in ALL.values():
            rmdir_cgroup(os.path.join(d, PARENT2))
    print("  starts stopped before they were ready: %d" % stopped_first)
    check(stopped_first > 0, "some stop came while its session was starting")


@S.case
def sessions_cannot_pass_the_process_cap():
    # Each holder is one process: 12 sessions wanted, room for 7 (the
    # spawner takes one of the 8).
    refused_before = forks_refused()
    ok, refused = [], []
    for i in range(12):
        st, b, _ = req("POST", "/runtime/start", {"sessionID": "cap%d" % i}, clone="d%d" % i)
        (ok if st == 200 else refused).append((i, st, b))
        check(int(read("pids", "pids.current")) <= TOTAL_PIDS, "pids.current within the cap",
              read("pids", "pids.current"))
    print("  sessions started %d, refused %d" % (len(ok), len(refused)))
    check(0 < len(ok) < 12 and refused, "some started, the rest refused", (ok, refused))
    for i, st, b in refused:
        check(st >= 400 and isinstance(b, dict) and b.get("error", {}).get("message"),
              "a refused start has a JSON error", (st, b))
    check(forks_refused() > refused_before, "forks were refused by the cap itself",
          (refused_before, forks_refused()))
    print("  e.g. %d %s" % (refused[0][1], refused[0][2]))
    if os.path.exists(os.path.join(BASE["pids"], "pids.peak")):
        # A holder cloned in the spawner's cgroup moves to its own, both
        # beneath the parent: the kernel charges the new one before it
        # uncharges the old one, so the parent's peak may be one above
        # (the fork itself was checked); never more.
        check(int(read("pids", "pids.peak")) <= TOTAL_PIDS + 1, "the parent's peak within the "
              "cap (+1 of a move)", read("pids", "pids.peak"))
    # the daemon goes on: one stopped, another starts in its place
    i = ok[0][0]
    st, b, _ = req("POST", "/runtime/stop", {"sessionID": "cap%d" % i}, clone="d%d" % i)
    check(st == 200, "one stopped", (st, b))
    deadline = time.monotonic() + 10
    while True:
        st, b, _ = req("POST", "/runtime/start", {"sessionID": "again"}, clone="e0")
        if st == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.1)  # its holder's exit reaches the cgroup moments later
    check(st == 200, "a new session starts once there is room", (st, b))
    st, b, _ = D.req("GET", "/healthz")
    check(st == 200, "the daemon answers", (st, b))


@S.case
def a_bad_parent_name_is_refused():
    for bad in ("../up", "a/b", "."):
        cfg = os.path.join(TMP, "bad.yaml")
        with open(cfg, "w") as f:
            f.write("sandbox:\n  cgroup_parent: \"%s\"\n" % bad)
        p = subprocess.run([SANDBOXD, "serve", "--config", cfg, "--listen", "127.0.0.1:0",
                            "--state-dir", os.path.join(TMP, "bad")], capture_output=True,
                           text=True, timeout=30)
        check(p.returncode != 0 and "sandbox.cgroup_parent" in p.stderr,
              "cgroup_parent %r refused naming the key" % bad, (p.returncode, p.stderr))


def nothing_left_at_the_stop():
    check(D.stop() == 0, "SIGTERM: exit 0", D.output())
    for ctrl in BASE:
        left = [e for e in os.listdir(BASE[ctrl]) if os.path.isdir(os.path.join(BASE[ctrl], e))]
        check(not left, "no cgroup left beneath %s/%s" % (ctrl, PARENT), left)


S.case(nothing_left_at_the_stop)
D.stop()
for d in ALL.values():
    rmdir_cgroup(os.path.join(d, PARENT))
shutil.rmtree(TMP, ignore_errors=True)
S.finish()
