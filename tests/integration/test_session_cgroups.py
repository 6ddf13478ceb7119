"""Each task of a live session has a cgroup of its own (cgroup v1, this
machine): below the session's, with the session's CPU quota, so that its
tasks do not throttle each other; the session's own cgroup has no CPU quota
then; memory and processes stay the session's. A task's cgroup goes at its
end, or with the session when a background process it left holds it.

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
from sbxtest import EXTENDED, ServeDaemon, Suite, check  # noqa: E402

S = Suite("session_cgroups")
TOKEN = "op-" + "0123456789abcdef0123456789abc"
state = tempfile.mkdtemp(prefix="sbx-sesscg-")
cfg = os.path.join(state, "config.yaml")
with open(cfg, "w") as f:
    f.write("sandbox:\n  workspace_quota: 16m\n  cpu_limit: 0.5\n")
D = ServeDaemon(state, TOKEN, config=cfg).start()


def cpu_dir(d, session_cg):
    ds = glob.glob("/sys/fs/cgroup/cpu/sandboxd/" + session_cg) + \
        glob.glob("/sys/fs/cgroup/cpu,cpuacct/sandboxd/" + session_cg)
    check(len(ds) == 1, "the session's cpu cgroup", ds)
    return ds[0]


def children(path):
    return sorted(e for e in os.listdir(path) if os.path.isdir(os.path.join(path, e)))


def read(path, name):
    with open(os.path.join(path, name)) as f:
        return f.read().strip()


def wait_for(pred, timeout=10):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


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
    check(read(sess, "cpu.cfs_quota_us") == "-1", "the session's own cgroup has no CPU quota",
          read(sess, "cpu.cfs_quota_us"))
    # Two tasks at once: a cgroup each, each with the session's 0.5 CPU.
    ids = []
    for _ in range(2):
        st, t, _ = D.req("POST", "/runtime/tasks", {"sessionID": "s", "command": [
            "/bin/sh", "-c", "grep -E ':cpu(,cpuacct)?:' /proc/self/cgroup; sleep 3"]},
            headers=EXTENDED)
        check(st == 202, "queued", (st, t))
        ids.append(t["id"])
    check(wait_for(lambda: len(children(sess)) == 2), "two task cgroups below the session's",
          children(sess))
    kids = children(sess)
    for k in kids:
        check(k.startswith("task-"), "named for the task", k)
        check(read(os.path.join(sess, k), "cpu.cfs_quota_us") == "50000" and
              read(os.path.join(sess, k), "cpu.cfs_period_us") == "100000",
              "its own quota: 0.5 CPU", k)
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
