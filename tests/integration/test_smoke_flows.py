"""The original's smoke scripts (tests/smoke-*.sh of the original service),
rewritten as our own tests: the same requests, in the same order, with the
same expectations, against a real `sandboxd serve` configured through the
original's CLAW_* variables. No X-Sandbox-Extended switch: these are the
original's clients. Flows: http, task (create/get/list/cancel), stream,
sandbox (a private direct connect fails: in netlab's isolated network),
docker-style workspace paths (<workspace>/<tenant>/<cloneKey>/<cloneId>/work,
the control directory)."""
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sbxtest import ServeDaemon, Suite, check  # noqa: E402

S = Suite("smoke_flows")
TOKEN = "smoke-" + "0123456789abcdef0123456789"
TMP = tempfile.mkdtemp(prefix="sbx-smoke-")
_daemons = []


class Daemon(ServeDaemon):
    def req(self, method, path, body=None, token=TOKEN, timeout=20):
        return super().req(method, path, body, token=token, timeout=timeout)


def smoke_daemon(name, **env):
    """A daemon as the smoke scripts start theirs: CLAW_RUNTIME_ID, the clone
    t1/clone-a/c1, CLAW_WORKSPACE and CLAW_CONTROL_DIR in fresh directories."""
    work = tempfile.mkdtemp(prefix="claw-%s-" % name, dir=TMP)
    control = tempfile.mkdtemp(prefix="claw-control-%s-" % name, dir=TMP)
    e = {"CLAW_RUNTIME_ID": "rt-" + name, "CLAW_TENANT_CODE": "t1", "CLAW_CLONE_ID": "c1",
         "CLAW_CLONE_KEY": "clone-a", "CLAW_WORKSPACE": work, "CLAW_CONTROL_DIR": control}
    e.update(env)
    d = Daemon(os.path.join(TMP, name + "-state"), TOKEN, env=e, registry=_daemons).start()
    d.work, d.control = work, control
    return d


def wait_task(d, tid, until, timeout=10):
    """The task once its status is in until (or the timeout passed)."""
    deadline = time.monotonic() + timeout
    while True:
        st, t, _ = d.req("GET", "/runtime/tasks/" + tid)
        if t["status"] in until or time.monotonic() > deadline:
            return t
        time.sleep(0.1)


def exec_(d, command, timeout_seconds):
    return d.req("POST", "/runtime/exec", {"command": command, "timeoutSeconds": timeout_seconds})


@S.case
def smoke_http():
    d = smoke_daemon("smoke")
    try:
        st, b, _ = d.req("GET", "/healthz", token=None)
        check(st == 200 and b == {"ok": True}, "healthz", b)
        st, b, _ = d.req("POST", "/runtime/start")
        check(st == 200 and b["ok"] is True and b["status"]["status"] == "ready"
              and b["status"]["runtimeId"] == "rt-smoke", "start", b)
        st, b, _ = exec_(d, ["/bin/sh", "-lc", "printf smoke-ok"], 2)
        check(st == 200 and b["stdout"] == "smoke-ok" and b["exitCode"] == 0
              and set(b) == {"exitCode", "stdout", "stderr", "startedAt", "endedAt"}, "exec", b)
        st, b, _ = d.req("GET", "/runtime/status")
        check(st == 200 and b["tenantCode"] == "t1" and b["cloneId"] == "c1"
              and b["cloneKey"] == "clone-a" and b["runtimeId"] == "rt-smoke"
              and b["status"] == "ready"
              and b["workspace"] == os.path.join(d.work, "t1", "clone-a", "c1", "work"),
              "status", b)
        # The skills routes are another branch's: until they are merged the
        # router answers 404 for them (the smoke script only prints them).
        for path in ("/runtime/skills", "/runtime/skills/ur-api"):
            st, b, _ = d.req("GET", path)
            check(st in (200, 404), "%s answered" % path, (st, b))
    finally:
        d.stop()


@S.case
def smoke_task():
    d = smoke_daemon("task")
    try:
        d.req("POST", "/runtime/start")
        st, t, _ = d.req("POST", "/runtime/tasks", {
            "command": ["/bin/sh", "-lc", "printf task-state-ok"], "timeoutSeconds": 3})
        check(st == 200 and t["status"] == "pending" and t["id"], "task created", t)
        time.sleep(0.2)
        g = wait_task(d, t["id"], ("succeeded", "failed"))
        check(g["status"] == "succeeded"
              and g["result"]["stdout"] == "task-state-ok", "task get", g)
        st, lst, _ = d.req("GET", "/runtime/tasks")
        check(st == 200 and isinstance(lst, list) and t["id"] in [x["id"] for x in lst],
              "task list: a bare array holding it", lst)
        st, c, _ = d.req("POST", "/runtime/tasks", {
            "command": ["/bin/sh", "-lc", "sleep 10"], "timeoutSeconds": 20})
        time.sleep(0.2)
        st, k, _ = d.req("POST", "/runtime/tasks/%s/cancel" % c["id"])
        check(st == 200 and k["id"] == c["id"], "task cancel", (st, k))
        time.sleep(0.2)
        g = wait_task(d, c["id"], ("canceled",))
        check(g["status"] == "canceled" and g["result"]["exitCode"] == 124,
              "canceled task get", g)
    finally:
        d.stop()


@S.case
def smoke_stream():
    d = smoke_daemon("stream")
    try:
        # curl -Ns /runtime/stream in the background, then start and a task.
        c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=20)
        c.request("GET", "/runtime/stream", headers={"Authorization": "Bearer " + TOKEN})
        r = c.getresponse()
        frames = []

        def reader():
            buf = b""
            try:
                while True:
                    chunk = r.read1(65536)
                    if not chunk:
                        return
                    buf += chunk
                    while b"\n\n" in buf:
                        frame, buf = buf.split(b"\n\n", 1)
                        frames.append(frame.decode())
            except (OSError, ValueError, AttributeError, http.client.HTTPException):
                return  # closed under it by the test (http.client is not thread-safe)
        threading.Thread(target=reader, daemon=True).start()
        time.sleep(0.2)
        d.req("POST", "/runtime/start")
        st, t, _ = d.req("POST", "/runtime/tasks", {
            "command": ["/bin/sh", "-c", "echo streamed"], "timeoutSeconds": 10})
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any("exec_finished" in f for f in frames):
            time.sleep(0.05)
        c.sock.shutdown(2)
        c.close()
        events = []
        for f in frames:
            lines = dict(l.split(": ", 1) for l in f.splitlines() if ": " in l and
                         not l.startswith(":"))
            if "data" in lines:
                body = json.loads(lines["data"])
                check(set(body) == {"type", "time", "data"} and body["type"] == lines["event"],
                      "the original's frame and body", f)
                events.append(body)
        types = [e["type"] for e in events]
        check(types[:1] == ["runtime_started"], "runtime_started first", types)
        mine = [e["type"] for e in events if e["data"].get("taskId") == t["id"]]
        check([x for x in mine if x != "tool_call_output"] ==
              ["exec_started", "task_running", "exec_finished"], "task events in order", mine)
    finally:
        d.stop()


@S.case
def smoke_docker_workspace_paths():
    d = smoke_daemon("docker", CLAW_ENABLE_MOUNT_SANDBOX="true")
    try:
        st, b, _ = d.req("GET", "/healthz", token=None)
        check(st == 200, "healthz")
        st, b, _ = d.req("POST", "/runtime/start")
        check(st == 200, "start", b)
        st, b, _ = d.req("GET", "/runtime/status")
        effective = os.path.join(d.work, "t1", "clone-a", "c1", "work")
        check(b["workspace"] == effective, "the effective workspace", b)
        # control dir perms: root's 0555, main.pid 0444 (per clone here)
        ctl = os.path.join(d.control, "t1", "clone-a", "c1")
        for p, mode in ((ctl, 0o555), (os.path.join(ctl, "main.pid"), 0o444)):
            s = os.stat(p)
            check(s.st_uid == 0 and s.st_gid == 0 and s.st_mode & 0o7777 == mode,
                  "%s root %o" % (p, mode), oct(s.st_mode))
        st, b, _ = exec_(d, ["/bin/sh", "-lc",
                             "printf task-ok > /workspace/task.txt && cat /workspace/task.txt"], 3)
        check(st == 200 and b["stdout"] == "task-ok", "task workspace write", b)
        # control dir hidden in the mount sandbox
        st, b, _ = exec_(d, ["/bin/sh", "-lc", "ls -ld %s" % ctl], 3)
        check(b["exitCode"] != 0, "control dir hidden", b)
        # the host clone workspace path holds the task's file
        f = os.path.join(effective, "task.txt")
        check(os.path.isfile(f), "task file under %s" % f)
        with open(f) as fh:
            check(fh.read() == "task-ok", "its content")
        # Not 10001 on the host: each clone has its own host uid (see
        # docs/compatibility.md); inside the sandbox it is 10001.
        s = os.stat(f)
        check(s.st_uid not in (0, 10001), "a host uid of the clone's own", s.st_uid)
        st, b, _ = exec_(d, ["/bin/sh", "-lc", "stat -c '%u %g' /workspace/task.txt"], 3)
        check(b["stdout"].strip() == "10001 10001", "10001 inside", b)
        # control file delete blocked; control process kill blocked
        st, b, _ = exec_(d, ["/bin/sh", "-lc", "rm %s/main.pid" % ctl], 3)
        check(b["exitCode"] != 0 and os.path.exists(os.path.join(ctl, "main.pid")),
              "control file delete blocked", b)
        st, b, _ = exec_(d, ["/bin/sh", "-lc", "kill -KILL %d" % d.proc.pid], 3)
        check(d.proc.poll() is None, "the daemon survived", b)
        st, b, _ = d.req("GET", "/healthz", token=None)
        check(st == 200 and b == {"ok": True}, "healthz after attacks", b)
    finally:
        d.stop()


for dd in _daemons:
    if dd.proc and dd.proc.poll() is None:
        dd.stop()
shutil.rmtree(TMP, ignore_errors=True)
S.finish()
