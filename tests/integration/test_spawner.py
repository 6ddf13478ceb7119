"""The sandbox spawner (isolate/spawner.h): `sandboxd serve` forks one small
process at start that makes every one-shot sandbox and session holder and
hands their fds back. Checked: the process exists (and not with
`pool.spawner: false`), sandboxes really come from it (their init is its
child, /metrics counts them), a task's results are the same whether the
spawner or the daemon made its sandbox (exit code, stdout/stderr, timeout,
oom, a setup error), sessions and their tasks work, two clones' tasks run
under different host uids, a spawner that dies is replaced by in-process
creation (logged, nothing lost), and the spawner ends with the daemon."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sbxtest import SANDBOXD, ServeDaemon, Suite, check, config_file  # noqa: E402

S = Suite("spawner")
TOKEN = "spawn-" + "0123456789abcdef0123456789"
TMP = tempfile.mkdtemp(prefix="sbx-spawner-")


class Daemon(ServeDaemon):
    extended_by_default = True
    req_timeout = 30


def config(name, text):
    return config_file(TMP, name, text)


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


def spawner_of(d):
    return [p for p in children(d.proc.pid) if comm(p) == "sandboxd-spawn"]


def gone(pid, timeout=10):
    """Waits until pid has exited (a zombie or reaped): its fds are closed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except OSError:
            return
        time.sleep(0.02)
    raise AssertionError("process %d still alive after %ss" % (pid, timeout))


def metric(d, where):
    st, text, _ = d.req("GET", "/metrics")
    check(st == 200, "/metrics answers", st)
    for line in text.splitlines():
        if line.startswith('sandbox_spawns_total{where="%s"}' % where):
            return float(line.split()[-1])
    return 0.0


# The spawner's own path, one sandbox per task (its children, its lost
# requests): the warm pool (on by default, tests/integration/test_pool.py)
# would hold sandboxes of the spawner's and serve tasks without asking it.
NOPOOL = config("on.yaml", "pool:\n  enabled: false\n")
ON = Daemon(os.path.join(TMP, "on"), TOKEN, config=NOPOOL).start()
OFF = Daemon(os.path.join(TMP, "off"), TOKEN,
             config=config("off.yaml", "pool:\n  spawner: false\n  enabled: false\n")).start()

# The same tasks on both daemons: the answers' parts that do not vary.
CASES = [
    ("exit code and both streams",
     {"command": ["/bin/sh", "-c", "echo out; echo err >&2; exit 7"]}),
    ("stdin relayed", {"command": ["cat"], "stdin": "fed\n"}),
    ("timeout", {"command": ["sleep", "30"], "timeoutSeconds": 1}),
    ("oom", {"command": ["python3", "-c", "b=[]\nwhile True: b.append(bytearray(8<<20))"],
             "memoryMB": 64, "timeoutSeconds": 30}),
    ("no such command", {"command": ["/no/such/program"]}),
    ("identity inside", {"command": ["/bin/sh", "-c", "id -u; id -g; hostname; cat /proc/1/comm"]}),
    # Nothing more crosses into the sandbox from the spawner than from the
    # daemon: the same fds, capabilities, seccomp, one id map line.
    ("fds, capabilities, seccomp, id map", {"command": ["/bin/sh", "-c",
     "ls /proc/self/fd; grep -E '^(Cap|NoNewPrivs|Seccomp)' /proc/self/status; "
     "wc -l < /proc/self/uid_map; ls /proc/1/fd"]}),
]


def essentials(b):
    r = b.get("report") or {}
    return (b.get("exitCode"), b.get("status"), b.get("stdout"), b.get("stderr"),
            r.get("outcome"), r.get("oomKilled"), r.get("signal"))


@S.case
def the_spawner_runs_only_when_configured():
    check(len(spawner_of(ON)) == 1, "one sandboxd-spawn child by default", children(ON.proc.pid))
    check(spawner_of(OFF) == [], "none with pool.spawner: false",
          [(p, comm(p)) for p in children(OFF.proc.pid)])


@S.case
def sandboxes_come_from_the_spawner():
    before = metric(ON, "spawner")
    st, b, _ = ON.req("POST", "/runtime/tasks", {"command": ["sleep", "20"],
                                                 "timeoutSeconds": 30})
    check(st in (200, 201, 202), "task submitted", (st, b))
    tid = b.get("taskId") or b.get("id")
    sp = spawner_of(ON)[0]
    deadline = time.monotonic() + 10
    inits = []
    while time.monotonic() < deadline and not inits:
        inits = [p for p in children(sp) if comm(p).startswith("memfd:sandbox")]
        time.sleep(0.05)
    check(inits, "the sandbox's init is the spawner's child",
          [(p, comm(p)) for p in children(sp)])
    check(not [p for p in children(ON.proc.pid) if comm(p).startswith("memfd:sandbox")],
          "and not the daemon's", children(ON.proc.pid))
    st, b, _ = ON.req("POST", "/runtime/tasks/%s/cancel" % tid, {})
    check(st == 200, "canceled", (st, b))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        st, b, _ = ON.req("GET", "/runtime/tasks/" + tid)
        if b.get("status") not in ("pending", "queued", "running"):
            break
        time.sleep(0.05)
    check(b.get("status") == "canceled", "the canceled task ends", b)
    check(metric(ON, "spawner") >= before + 1, "/metrics counts it", metric(ON, "spawner"))
    st, b, _ = ON.req("GET", "/runtime/status")
    sp_status = (b or {}).get("spawner") or {}
    check(st == 200 and sp_status.get("enabled") is True and sp_status.get("running") is True
          and sp_status.get("made", 0) >= 1, "/runtime/status (extended) says so", b)
    st, b, _ = OFF.req("GET", "/runtime/status")
    check(((b or {}).get("spawner") or {}).get("running") is False, "and without one", b)
    st, b, _ = OFF.req("POST", "/runtime/exec", {"command": ["true"]})
    check(st == 200 and b["exitCode"] == 0, "a task without the spawner", b)
    check(metric(OFF, "spawner") == 0 and metric(OFF, "daemon") >= 1,
          "without the spawner the daemon makes them", (metric(OFF, "daemon")))
    # The zombie of the ended init does not stay with the spawner.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and children(sp):
        time.sleep(0.05)
    check(children(sp) == [], "the spawner reaped the sandbox", children(sp))


@S.case
def results_are_the_same_either_way():
    for what, body in CASES:
        st1, b1, _ = ON.req("POST", "/runtime/exec", body)
        st2, b2, _ = OFF.req("POST", "/runtime/exec", body)
        check(st1 == st2 == 200, what + ": both answered", (st1, b1, st2, b2))
        check(essentials(b1) == essentials(b2), what + ": same result",
              (essentials(b1), essentials(b2)))
    st, b, _ = ON.req("POST", "/runtime/exec", CASES[0][1])
    check(b["exitCode"] == 7 and b["stdout"] == "out\n" and b["stderr"] == "err\n",
          "the streams and code themselves", b)
    st, b, _ = ON.req("POST", "/runtime/exec", CASES[2][1])
    check(b["status"] == "timeout" and b["exitCode"] == 124, "timeout itself", b)
    st, b, _ = ON.req("POST", "/runtime/exec", CASES[3][1])
    check(b["report"]["outcome"] == "oom" and b["exitCode"] == 137, "oom itself", b)


@S.case
def sessions_and_their_tasks_work():
    a = {"X-Tenant-Code": "sp", "X-Clone-Id": "c1"}
    st, b, _ = ON.req("POST", "/runtime/start", {"sessionID": "s1"}, headers=a)
    check(st == 200, "session started", (st, b))
    st, b, _ = ON.req("POST", "/runtime/exec", {"sessionID": "s1", "command": [
        "/bin/sh", "-c", "echo kept > /tmp/keep; echo ok"]}, headers=a)
    check(st == 200 and b["stdout"] == "ok\n", "first task of the session", (st, b))
    st, b, _ = ON.req("POST", "/runtime/exec", {"sessionID": "s1", "command": [
        "cat", "/tmp/keep"]}, headers=a)
    check(st == 200 and b["stdout"] == "kept\n", "the next task sees the session's /tmp", b)
    st, b, _ = ON.req("POST", "/runtime/stop", {"sessionID": "s1"}, headers=a)
    check(st == 200, "session stopped", (st, b))


@S.case
def clones_run_under_different_host_uids():
    seen = {}
    for clone in ("u1", "u2"):
        a = {"X-Tenant-Code": "uid", "X-Clone-Id": clone}
        st, b, _ = ON.req("POST", "/runtime/exec", {"command": [
            "/bin/sh", "-c", "echo x > /workspace/f; stat -c %u /workspace/f"]}, headers=a)
        check(st == 200 and b["exitCode"] == 0, "task in clone " + clone, b)
        seen[clone] = os.stat(os.path.join(ON.state, "workspaces", "uid", clone, "work",
                                           "f")).st_uid
    check(seen["u1"] != seen["u2"], "each clone's files belong to its own host uid", seen)


@S.case
def a_dead_spawner_is_replaced_by_the_daemon():
    d = Daemon(os.path.join(TMP, "dead"), TOKEN, config=NOPOOL).start()
    try:
        sp = spawner_of(d)
        check(len(sp) == 1, "a spawner", sp)
        os.kill(sp[0], signal.SIGKILL)
        gone(sp[0])
        for i in range(3):
            st, b, _ = d.req("POST", "/runtime/exec", {"command": ["echo", str(i)]})
            check(st == 200 and b["stdout"] == "%d\n" % i, "task %d after the spawner died" % i,
                  (st, b))
        check("spawner is gone" in d.wait_output(lambda out: "spawner is gone" in out, 5),
              "the log says so", d.output())
        check(metric(d, "daemon") >= 3, "made in the daemon", metric(d, "daemon"))
    finally:
        d.stop()


def wait_task(d, tid, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        st, b, _ = d.req("GET", "/runtime/tasks/" + tid)
        if b.get("status") not in ("pending", "queued", "running") or time.monotonic() > deadline:
            return b
        time.sleep(0.05)


def submit(d, command):
    st, b, _ = d.req("POST", "/runtime/tasks", {"command": command, "timeoutSeconds": 30})
    check(st in (200, 201, 202), "task submitted", (st, b))
    return b.get("taskId") or b.get("id")


@S.case
def the_loop_does_not_wait_for_the_spawner():
    """A stopped spawner holds its requests; the daemon keeps answering, a
    task canceled while its sandbox is being made ends canceled (the
    sandbox that comes later is killed), and when the spawner dies with
    requests in flight their tasks fail as setup errors; later ones are
    made in the daemon."""
    d = Daemon(os.path.join(TMP, "stop"), TOKEN, config=NOPOOL).start()
    try:
        sp = spawner_of(d)[0]
        os.kill(sp, signal.SIGSTOP)
        try:
            waiting = submit(d, ["echo", "late"])
            canceled = submit(d, ["sleep", "30"])
            t0 = time.monotonic()
            st, b, _ = d.req("GET", "/healthz")
            check(st == 200 and time.monotonic() - t0 < 5, "the daemon answers meanwhile", b)
            st, b, _ = d.req("POST", "/runtime/tasks/%s/cancel" % canceled, {})
            check(st == 200, "cancel accepted while the sandbox is being made", (st, b))
            t_timed = time.monotonic()
            st, b, _ = d.req("POST", "/runtime/tasks", {"command": ["sleep", "30"],
                                                        "timeoutSeconds": 3})
            timed = b.get("taskId") or b.get("id")
            time.sleep(4)
            held = time.monotonic() - t_timed
        finally:
            os.kill(sp, signal.SIGCONT)
        b = wait_task(d, waiting)
        check(b.get("status") == "succeeded" and (b.get("result") or {}).get("stdout") == "late\n",
              "the held task runs once the spawner goes on", b)
        b = wait_task(d, canceled)
        check(b.get("status") == "canceled", "the canceled one ends canceled", b)
        b = wait_task(d, timed)
        wall = ((b.get("result") or {}).get("report") or {}).get("wallSeconds", 99)
        # Counted from its sandbox's arrival it would end 3 s after the
        # spawner goes on (>= held + 3); from its start, at once.
        check(b.get("status") == "timeout" and wall < held + 2.5,
              "a timeout counts from the task's start, not from its sandbox's (%.2fs, the "
              "spawner held %.2fs)" % (wall, held), b)
        os.kill(sp, signal.SIGSTOP)
        lost = submit(d, ["echo", "lost"])
        lost_canceled = submit(d, ["echo", "lost too"])
        st, b, _ = d.req("POST", "/runtime/tasks/%s/cancel" % lost_canceled, {})
        check(st == 200, "cancel accepted", (st, b))
        time.sleep(0.3)
        os.kill(sp, signal.SIGKILL)
        b = wait_task(d, lost_canceled)
        check(b.get("status") == "canceled", "a canceled one ends canceled all the same", b)
        b = wait_task(d, lost)
        check(b.get("status") == "failed" and (b.get("result") or {}).get("exitCode") == 125 and
              "spawner" in json.dumps(b), "a request in flight fails as a setup error", b)
        st, b, _ = d.req("POST", "/runtime/exec", {"command": ["echo", "after"]})
        check(st == 200 and b["stdout"] == "after\n", "the next task is made in the daemon", b)
    finally:
        d.stop()


@S.case
def the_spawner_ends_with_the_daemon():
    d = Daemon(os.path.join(TMP, "end"), TOKEN, config=NOPOOL).start()
    sp = spawner_of(d)
    check(len(sp) == 1, "a spawner", sp)
    d.stop()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and os.path.exists("/proc/%d" % sp[0]):
        time.sleep(0.05)
    check(not os.path.exists("/proc/%d" % sp[0]), "the spawner is gone after SIGTERM")
    # ... and when the daemon is killed outright (its death signal).
    d = Daemon(os.path.join(TMP, "end9"), TOKEN, config=NOPOOL).start()
    sp = spawner_of(d)
    d.kill9()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and os.path.exists("/proc/%d" % sp[0]):
        time.sleep(0.05)
    check(not os.path.exists("/proc/%d" % sp[0]), "the spawner is gone after SIGKILL")


@S.case
def a_bad_spawner_setting_is_refused_at_start():
    bad = config("bad.yaml", "pool:\n  spawner: maybe\n")
    r = subprocess.run([SANDBOXD, "serve", "--config", bad, "--listen", "127.0.0.1:0",
                        "--state-dir", os.path.join(TMP, "bad")], capture_output=True,
                       text=True, timeout=30)
    check(r.returncode == 2 and "pool.spawner" in r.stderr and "maybe" in r.stderr,
          "exit 2 naming the key and the value", (r.returncode, r.stderr))


ON.stop()
OFF.stop()
S.finish()
