"""The daemon on a cgroup v2-only host (run inside the VM of tests/vm/run.py,
which boots with cgroup_no_v1=all): each daemon is alone in a cgroup of its
own, as a systemd unit's is (sbxtest's SBX_DAEMON_CGROUPS), and must still
run its sandboxes in v2 mode. Checked in the cgroup files themselves: a
task's memory.max, pids.max and cpu.max, an OOM kill seen as `oom`, a pids
limit that stops forks, a cancel that leaves no process, the sandboxd/
parent's aggregate caps, a session's cgroup and `sandboxd doctor`."""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from sbxtest import (DAEMON_CGROUPS, EXTENDED, SANDBOXD, ServeDaemon, Suite,  # noqa: E402
                     check, join_cgroup, rmdir_cgroup_tree, wait_for)

S = Suite("vm_cgroup_v2")
with open("/proc/self/mountinfo") as f:
    MOUNTS = f.read()
check(" - cgroup " not in MOUNTS and DAEMON_CGROUPS,
      "a cgroup v2-only host, with SBX_DAEMON_CGROUPS set (tests/vm/run.py)", MOUNTS)

WAIT = 20  # seconds: a VM under TCG is slow
TOKEN = "v2-" + "0123456789abcdef0123456789abc"
TMP = tempfile.mkdtemp(prefix="sbx-v2-")
CFG = os.path.join(TMP, "config.yaml")
with open(CFG, "w") as f:
    f.write("sandbox:\n  workspace_quota: 16m\n  total_memory: 1g\n  total_pids: 300\n"
            "  total_cpu: 1.5\n")
D = ServeDaemon(os.path.join(TMP, "state"), TOKEN, config=CFG, total_caps=True).start()
BASE = os.path.join(D.cgroup, "sandboxd")


def read(path, name):
    with open(os.path.join(path, name)) as f:
        return f.read().strip()


def keyed(path, name):
    return dict(line.split() for line in read(path, name).splitlines())


def submit(body):
    st, t, _ = D.req("POST", "/runtime/tasks", body, headers=EXTENDED)
    check(st == 202, "task queued", (st, t))
    return t["id"]


def task(tid):
    return D.req("GET", "/runtime/tasks/" + tid, headers=EXTENDED)[1]


def finished(tid, timeout=60):
    check(wait_for(lambda: task(tid)["status"] not in ("pending", "running"), timeout),
          "the task ended in time", task(tid))
    return task(tid)


def task_cgroups():
    return [d for d in glob.glob(os.path.join(BASE, "*")) if os.path.isdir(d)]


def cmdline(pid):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def cgroup_with(marker):
    """The cgroup below sandboxd/ (or a session's there) of the process whose
    command line holds marker (beside it are the idle sandboxes of the pool,
    each in a cgroup of its own), once there is one."""
    found = []

    def look():
        dirs = task_cgroups() + [os.path.join(d, e) for d in task_cgroups() for e in
                                 os.listdir(d) if os.path.isdir(os.path.join(d, e))]
        found[:] = [d for d in dirs if any(
            marker in cmdline(p) for p in read(d, "cgroup.procs").split())]
        return found
    check(wait_for(look, WAIT), "a cgroup below sandboxd/ holds the task", marker)
    return found[0]


@S.case
def the_daemon_runs_in_v2_mode():
    st, b, _ = D.req("GET", "/runtime/status", headers=EXTENDED)
    check(st == 200 and b["totals"]["cgroups"] == "v2", "status says cgroup v2", (st, b))
    check(read(D.cgroup, "cgroup.procs") == "",
          "the daemon left its own cgroup for a leaf, so its children get controllers",
          read(D.cgroup, "cgroup.procs"))
    sub = read(BASE, "cgroup.subtree_control").split()
    check({"memory", "pids", "cpu"} <= set(sub), "sandboxd/ gives its children the controllers",
          sub)


@S.case
def aggregate_caps_on_the_parent():
    st, b, _ = D.req("GET", "/runtime/status", headers=EXTENDED)
    h = b["totals"]["holds"]
    check(h == {"memory": True, "pids": True, "cpu": True}, "every cap holds", b["totals"])
    check(read(BASE, "memory.max") == str(1 << 30) and read(BASE, "pids.max") == "300" and
          read(BASE, "cpu.max") == "150000 100000", "the caps in sandboxd/",
          [read(BASE, n) for n in ("memory.max", "pids.max", "cpu.max")])


@S.case
def a_task_gets_memory_pids_and_cpu_limits():
    tid = submit({"command": ["/bin/sh", "-c", "sleep 30; : limits"], "memoryMB": 96,
                  "pids": 12, "cpu": 0.5, "timeoutSeconds": 60})
    check(wait_for(lambda: task(tid)["status"] == "running", WAIT), "running", task(tid))
    cg = cgroup_with(": limits")  # (a sandbox of the pool, relimited at its take)
    check(read(cg, "memory.max") == str(96 << 20), "memory.max", read(cg, "memory.max"))
    check(read(cg, "pids.max") == "13", "pids.max: the task's 12 and its init",
          read(cg, "pids.max"))
    check(read(cg, "cpu.max") == "50000 100000", "cpu.max: 0.5 CPU", read(cg, "cpu.max"))
    if os.path.exists(os.path.join(cg, "memory.swap.max")):
        check(read(cg, "memory.swap.max") == "0", "no swap", read(cg, "memory.swap.max"))
    st, b, _ = D.req("POST", "/runtime/tasks/%s/cancel" % tid, headers=EXTENDED)
    check(st == 200, "canceled", (st, b))
    t = finished(tid)
    check(t["status"] == "canceled", "status canceled", t)
    check(wait_for(lambda: not os.path.exists(cg), WAIT), "its cgroup is removed", cg)


@S.case
def oom_is_seen_as_oom():
    st, b, _ = D.req("POST", "/runtime/exec", {
        "command": ["python3", "-c", "b = bytearray(400 << 20); print(len(b))"],
        "memoryMB": 64, "timeoutSeconds": 60}, headers=EXTENDED)
    check(st == 200, "200", (st, b))
    r = b["report"]
    check(r["outcome"] == "oom" and r["oomKilled"] is True, "outcome oom", r)
    check(r["cgroupMode"] == "v2" and r["limits"]["memoryEnforced"] == "full",
          "by cgroup v2, in full", r)


FORKS = """
import errno, os, time
kids, err = [], 0
for i in range(30):
    try:
        pid = os.fork()
    except OSError as e:
        err = e.errno
        break
    if pid == 0:
        time.sleep(5)
        os._exit(0)
    kids.append(pid)
print(len(kids), errno.errorcode.get(err, err))
"""


@S.case
def pids_limit_stops_forks():
    st, b, _ = D.req("POST", "/runtime/exec", {"command": ["python3", "-c", FORKS], "pids": 8,
                                               "timeoutSeconds": 60}, headers=EXTENDED)
    check(st == 200 and b["exitCode"] == 0, "ran", (st, b))
    n, err = b["stdout"].split()
    check(int(n) < 8 and err == "EAGAIN", "fork fails with EAGAIN before 8 processes", b)
    check(b["report"]["limits"]["pids"] == 8, "the limit reported", b["report"])


@S.case
def cpu_time_and_peak_memory_are_counted():
    st, b, _ = D.req("POST", "/runtime/exec", {
        "command": ["python3", "-c",
                    "import time\nb = bytearray(48 << 20)\nt = time.time()\n"
                    "while time.time() - t < 0.5: pass"],
        "memoryMB": 256, "timeoutSeconds": 60}, headers=EXTENDED)
    r = b["report"]
    check(st == 200 and r["outcome"] == "exited" and r["exitCode"] == 0, "ran", b)
    check(r["cpuSeconds"] >= 0.3, "cpu.stat's usage", r)
    check(r["peakMemoryBytes"] >= 48 << 20, "memory.peak (or current)", r)


@S.case
def cancel_kills_the_whole_tree():
    tid = submit({"command": ["/bin/sh", "-c",
                              "(setsid sleep 300 &); sleep 300 & sleep 300 & wait; : cancel"],
                  "timeoutSeconds": 120})
    check(wait_for(lambda: task(tid)["status"] == "running", WAIT), "running", task(tid))
    cg = cgroup_with(": cancel")
    check(wait_for(lambda: len(read(cg, "cgroup.procs").split()) >= 4, WAIT),
          "its processes, a double-forked one among them", read(cg, "cgroup.procs"))
    pids = [int(p) for p in read(cg, "cgroup.procs").split()]
    st, b, _ = D.req("POST", "/runtime/tasks/%s/cancel" % tid, headers=EXTENDED)
    check(st == 200, "cancel accepted", (st, b))
    check(finished(tid)["status"] == "canceled", "canceled", task(tid))
    check(wait_for(lambda: not any(os.path.exists("/proc/%d" % p) for p in pids), 10),
          "no process of the tree left", [p for p in pids if os.path.exists("/proc/%d" % p)])
    check(wait_for(lambda: not os.path.exists(cg), WAIT), "its cgroup removed", cg)


@S.case
def a_timeout_kills_the_tree():
    tid = submit({"command": ["/bin/sh", "-c", "(setsid sleep 300 &); sleep 300; : timeout"],
                  "timeoutSeconds": 3})
    cg = cgroup_with(": timeout")
    t = finished(tid)
    check(t["result"]["report"]["outcome"] == "timeout", "timeout", t)
    check(wait_for(lambda: not os.path.exists(cg), WAIT), "its cgroup removed, the tree with it",
          cg)


def is_session(path):
    """A session's cgroup: split, its init in the leaf init/ (its name is
    the pool's when its sandbox came from the warm pool)."""
    return os.path.isdir(os.path.join(path, "init"))


@S.case
def a_session_has_its_cgroup():
    st, b, _ = D.req("POST", "/runtime/start", {"sessionID": "s"}, headers=EXTENDED)
    check(st == 200, "session started", (st, b))
    st, b, _ = D.req("POST", "/runtime/exec", {"sessionID": "s", "command": [
        "/bin/sh", "-c", "cat /proc/self/cgroup"]}, headers=EXTENDED)
    check(st == 200 and b["exitCode"] == 0, "a task of the session", (st, b))
    check(b["report"]["cgroupMode"] == "v2", "in v2 mode", b["report"])
    sess = [d for d in task_cgroups() if is_session(d)]
    check(len(sess) == 1, "the session's cgroup", task_cgroups())
    check(read(sess[0], "memory.max") != "max" and read(sess[0], "pids.max") != "max",
          "with the session's memory and pids limits",
          (read(sess[0], "memory.max"), read(sess[0], "pids.max")))
    st, b, _ = D.req("POST", "/runtime/stop", {"sessionID": "s"}, headers=EXTENDED)
    check(st == 200, "stopped", (st, b))
    check(wait_for(lambda: not os.path.exists(sess[0]), WAIT), "its cgroup removed at its end",
          sess)


def pool_status():
    return D.req("GET", "/runtime/status", headers=EXTENDED)[1]["pool"]


@S.case
def a_session_from_the_pool_runs_its_tasks():
    """A session whose holder is a ready sandbox of the pool (built before any
    session asked, so its cgroup was not split for tasks of their own): its
    tasks run, each with the session's CPU."""
    hit = None
    for i in range(6):
        before = pool_status()["sessionHits"]
        sid = "pooled%d" % i
        st, b, _ = D.req("POST", "/runtime/start", {"sessionID": sid}, headers=EXTENDED)
        check(st == 200, "session started", (st, b))
        if pool_status()["sessionHits"] > before:
            hit = sid
            break
        check(D.req("POST", "/runtime/stop", {"sessionID": sid}, headers=EXTENDED)[0] == 200,
              "stopped")
        wait_for(lambda: pool_status()["idle"] > 0, WAIT)
    check(hit, "a session served from the pool", pool_status())
    st, b, _ = D.req("POST", "/runtime/exec", {"sessionID": hit, "command": [
        "/bin/sh", "-c", "cat /proc/self/cgroup"]}, headers=EXTENDED)
    check(st == 200 and b["exitCode"] == 0, "a task of the pooled session runs", (st, b))
    check(b["report"]["limits"]["cpuEnforced"] is True, "with a CPU quota", b["report"])
    check(D.req("POST", "/runtime/stop", {"sessionID": hit}, headers=EXTENDED)[0] == 200,
          "stopped")


@S.case
def a_session_task_oom_is_seen_as_oom():
    st, b, _ = D.req("POST", "/runtime/start", {"sessionID": "big"}, headers=EXTENDED)
    check(st == 200, "session started", (st, b))
    st, b, _ = D.req("POST", "/runtime/exec", {"sessionID": "big", "command": [
        "python3", "-c", "b = bytearray(400 << 20)"]}, headers=EXTENDED)
    check(st == 200 and b["report"]["outcome"] == "oom", "outcome oom, in its own cgroup", b)
    st, b, _ = D.req("POST", "/runtime/exec", {"sessionID": "big", "command": ["true"]},
                     headers=EXTENDED)
    check(st == 200 and b["exitCode"] == 0, "the session lives on", b)
    check(D.req("POST", "/runtime/stop", {"sessionID": "big"}, headers=EXTENDED)[0] == 200,
          "stopped")


def frozen(path):
    return keyed(path, "cgroup.events")["frozen"] == "1"


@S.case
def pause_freezes_the_whole_session():
    """OpenSandbox's pause: cgroup.freeze on the session's cgroup, which takes
    in its leaf init/ and its tasks' cgroups."""
    before = {d for d in task_cgroups() if is_session(d)}  # a pooled one is not yet
    st, b, _ = D.req("POST", "/v1/sandboxes", {"image": {"uri": "python"}, "timeout": 600})
    check(st == 202, "created", (st, b))
    sid = b["id"]

    def new():
        return [d for d in task_cgroups() if is_session(d) and d not in before]
    check(wait_for(lambda: len(new()) == 1, 10), "its session's cgroup", task_cgroups())
    new = new()
    sess = new[0]
    check(D.req("POST", "/v1/sandboxes/%s/pause" % sid)[0] == 202, "paused")
    check(wait_for(lambda: frozen(sess) and frozen(os.path.join(sess, "init")), 10),
          "the session's cgroup and its init/ frozen", read(sess, "cgroup.events"))
    check(D.req("POST", "/v1/sandboxes/%s/resume" % sid)[0] == 202, "resumed")
    check(wait_for(lambda: not frozen(sess), 10), "thawed", read(sess, "cgroup.events"))
    check(D.req("DELETE", "/v1/sandboxes/" + sid)[0] == 204, "deleted")
    check(wait_for(lambda: not os.path.exists(sess), WAIT), "its cgroup removed", sess)


@S.case
def a_crash_leaves_nothing_after_the_restart():
    """kill -9 with a live session and a task in it: the daemon restarted in
    its leaf (as systemd's DelegateSubgroup= would start it; its own cgroup
    now hands controllers down and takes no process) finds its base beside it
    and removes what the crash left, the session's split cgroup included."""
    st, b, _ = D.req("POST", "/runtime/start", {"sessionID": "crash"}, headers=EXTENDED)
    check(st == 200, "session started", (st, b))
    submit({"sessionID": "crash", "command": ["/bin/sh", "-c", "sleep 300; : crash"]})
    cg = cgroup_with(": crash")
    sess = os.path.dirname(cg)
    check(is_session(sess), "a task's cgroup in its session's", cg)
    D.kill9()
    check(os.path.isdir(sess), "the crash left the session's cgroup", sess)
    D.cgroup = os.path.join(D.cgroup, "sandboxd.daemon")
    D.start()
    st, b, _ = D.req("GET", "/runtime/status", headers=EXTENDED)
    check(b["totals"]["cgroups"] == "v2", "v2 again", b["totals"])
    check(wait_for(lambda: not os.path.exists(sess), WAIT), "the leftovers removed", sess)
    check("sandboxd.daemon" not in os.listdir(D.cgroup), "no leaf below the leaf",
          os.listdir(D.cgroup))
    st, b, _ = D.req("POST", "/runtime/exec", {"command": ["true"]}, headers=EXTENDED)
    check(st == 200 and b["exitCode"] == 0 and b["report"]["cgroupMode"] == "v2",
          "a task after the restart", b)


@S.case
def doctor_alone_in_its_cgroup_says_v2():
    cg = tempfile.mkdtemp(prefix="doctor-", dir=DAEMON_CGROUPS)
    try:
        p = subprocess.run([SANDBOXD, "doctor"], capture_output=True, text=True, timeout=120,
                           preexec_fn=join_cgroup(cg))
        check(re.search(r"cgroup mode:\s+v2\n", p.stdout), "doctor: cgroup mode v2", p.stdout)
        check(re.search(r"limits:\s+cgroup-v2\n", p.stdout), "doctor: limits by cgroup v2",
              p.stdout)
    finally:
        rmdir_cgroup_tree(cg)


try:
    check(D.stop() == 0, "the daemon stops with 0")
finally:
    shutil.rmtree(TMP, ignore_errors=True)
    S.finish()
