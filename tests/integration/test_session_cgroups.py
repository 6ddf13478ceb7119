"""Each task of a live session has a cgroup of its own (cgroup v1, this
machine; v2 in tests/vm): below the session's, with the session's CPU quota,
so that its tasks do not throttle each other; the session's own cgroup has no
CPU quota then; memory and processes stay the session's. A task's cgroup goes
at its end, or with the session when a background process it left holds it.
On v2 the session's own processes are in its leaf init/, beside its tasks'.

A real daemon on loopback (--net none), its own temporary state directory;
the cgroups looked at are only this daemon's (found by its session's name
in its log)."""
import glob
import os
import re
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from sbxtest import EXTENDED, ServeDaemon, Suite, check, wait_for  # noqa: E402

V2 = not any(" - cgroup " in line for line in open("/proc/self/mountinfo"))

S = Suite("session_cgroups")
TOKEN = "op-" + "0123456789abcdef0123456789abc"
state = tempfile.mkdtemp(prefix="sbx-sesscg-")
cfg = os.path.join(state, "config.yaml")
with open(cfg, "w") as f:
    f.write("sandbox:\n  workspace_quota: 16m\n  cpu_limit: 0.5\n")
D = ServeDaemon(state, TOKEN, config=cfg).start()


def cpu_dir(d, session_cg):
    if V2:  # the daemon's own cgroup: a cgroup of its own (sbxtest, tests/vm)
        ds = glob.glob(os.path.join(d.cgroup or "/sys/fs/cgroup", "sandboxd", session_cg))
    else:
        ds = glob.glob("/sys/fs/cgroup/cpu/sandboxd/" + session_cg) + \
            glob.glob("/sys/fs/cgroup/cpu,cpuacct/sandboxd/" + session_cg)
    check(len(ds) == 1, "the session's cpu cgroup", ds)
    return ds[0]


def children(path):
    """The tasks' cgroups below the session's (on v2 beside its init/)."""
    return sorted(e for e in os.listdir(path) if os.path.isdir(os.path.join(path, e)) and
                  not (V2 and e == "init"))


def read(path, name):
    with open(os.path.join(path, name)) as f:
        return f.read().strip()


def quota(path):
    """The CPU quota of a cgroup: "-1" (none) or "<quota> <period>" in us."""
    if V2:
        q = read(path, "cpu.max")
        return "-1" if q.startswith("max ") else q
    q = read(path, "cpu.cfs_quota_us")
    return q if q == "-1" else q + " " + read(path, "cpu.cfs_period_us")


@S.case
def each_task_has_its_own_quota():
    st, b, _ = D.req("POST", "/runtime/start", {"sessionID": "s"}, headers=EXTENDED)
    check(st == 200, "session started", (st, b))
    st, b, _ = D.req("POST", "/runtime/exec", {"sessionID": "s", "command": ["true"]},
                     headers=EXTENDED)
    check(st == 200 and b["exitCode"] == 0, "a first task", (st, b))
    m = re.search(r"task started id=\S+ tenant=default session=s sandbox=(session-[0-9a-f-]+)",
                  D.output(whole=True))
    check(m, "the session's cgroup name in the log", D.output())
    sess = cpu_dir(D, m.group(1))
    check(quota(sess) == "-1", "the session's own cgroup has no CPU quota", quota(sess))
    if V2:
        check(read(sess, "memory.max") != "max" and read(sess, "pids.max") != "max",
              "its memory and pids limits", (read(sess, "memory.max"), read(sess, "pids.max")))
        check(read(sess, "cgroup.procs") == "" and read(os.path.join(sess, "init"),
                                                        "cgroup.procs") != "",
              "its own processes in its leaf init/", read(sess, "cgroup.procs"))
    # Two tasks at once: a cgroup each, each with the session's 0.5 CPU.
    ids = []
    for _ in range(2):
        st, t, _ = D.req("POST", "/runtime/tasks", {"sessionID": "s", "command": [
            "/bin/sh", "-c", "grep -E '%s' /proc/self/cgroup; sleep 3" % (
                "^0::" if V2 else ":cpu(,cpuacct)?:")]},
            headers=EXTENDED)
        check(st == 202, "queued", (st, t))
        ids.append(t["id"])
    check(wait_for(lambda: len(children(sess)) == 2), "two task cgroups below the session's",
          children(sess))
    kids = children(sess)
    for k in kids:
        check(k.startswith("task-"), "named for the task", k)
        check(quota(os.path.join(sess, k)) == "50000 100000", "its own quota: 0.5 CPU",
              (k, quota(os.path.join(sess, k))))
    outs = []
    for tid in ids:
        deadline = time.monotonic() + 20
        while True:
            st, t, _ = D.req("GET", "/runtime/tasks/" + tid, headers=EXTENDED)
            if t["status"] not in ("pending", "running") or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        check(t["status"] == "succeeded", "the task succeeded", t)
        outs.append(t["result"]["stdout"])
    check(all("/task-" in o for o in outs) and outs[0] != outs[1],
          "each ran in its own cgroup (as it sees it)", outs)
    check(wait_for(lambda: children(sess) == []), "their cgroups are gone at their end",
          children(sess))
    # A background process keeps its task's cgroup until the session ends.
    st, b, _ = D.req("POST", "/runtime/exec", {"sessionID": "s", "command": [
        "/bin/sh", "-c", "(setsid sleep 300 &); echo started"]}, headers=EXTENDED)
    check(st == 200 and b["stdout"] == "started\n", "a task leaving a background process",
          (st, b))
    time.sleep(0.3)
    check(len(children(sess)) == 1, "its cgroup stays while the process lives", children(sess))
    st, b, _ = D.req("POST", "/runtime/stop", {"sessionID": "s"}, headers=EXTENDED)
    check(st == 200, "stopped", (st, b))
    check(wait_for(lambda: not os.path.exists(sess)),
          "the session's cgroup and its tasks' are removed at its end", sess)


try:
    check(D.stop() == 0, "the daemon stops with 0")
finally:
    shutil.rmtree(state, ignore_errors=True)
    S.finish()
