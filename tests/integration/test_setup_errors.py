"""A task whose sandbox cannot be set up ends `failed` with the setup's
message on every surface: the task record, the event stream, /runtime/exec,
seed 004's /execute, sandboxctl. The daemon runs in a mount namespace of its
own where /proc/sys is read-only, as in a container: every sandbox's setup
then fails at a step of its own (its new /proc, which the kernel refuses while
the daemon's /proc is partly covered; the message names /proc/sys), the
host's /proc/sys untouched."""
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from sbxtest import EXTENDED, SANDBOXD, ServeDaemon, Suite, check  # noqa: E402

S = Suite("setup_errors")
TOKEN = "setup-errors-token-0123456789"
SANDBOXCTL = os.path.join(os.path.dirname(SANDBOXD), "sandboxctl")
TMP = tempfile.mkdtemp(prefix="sbx-setup-")
# unshare(1) from util-linux: a private mount namespace, /proc/sys read-only in it.
PREFIX = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
          'mount --bind -o ro /proc/sys /proc/sys && exec "$@"', "sh"]
D = ServeDaemon(os.path.join(TMP, "state"), TOKEN, prefix=PREFIX)


def wait_ended(tid, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        st, b, _ = D.req("GET", "/runtime/tasks/" + tid, headers=EXTENDED)
        if st != 200 or b["status"] not in ("pending", "running") or \
                time.monotonic() > deadline:
            return st, b
        time.sleep(0.05)


def check_setup_failure(b, what):
    check(b["status"] == "failed", what + ": failed, not left pending", b)
    check(b["error"] and "/proc/sys" in b["error"], what + ": the setup's message", b)
    check(b["result"]["report"]["outcome"] == "setup_error"
          and b["result"]["exitCode"] == 125, what + ": outcome setup_error, 125", b)


def stream_finished(session, tid, timeout=10):
    """The exec_finished event of task tid, replayed from the start."""
    c = http.client.HTTPConnection("127.0.0.1", D.port, timeout=timeout)
    try:
        c.request("GET", "/runtime/stream?sessionID=" + session,
                  headers={"Authorization": "Bearer " + TOKEN, "Last-Event-ID": "0",
                           "Accept": "text/event-stream", **EXTENDED})
        r = c.getresponse()
        check(r.status == 200, "stream opened", r.status)
        event, deadline = None, time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = r.fp.readline().decode()
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event == "exec_finished":
                data = json.loads(line.split(":", 1)[1])
                if tid in json.dumps(data):
                    return data
        raise AssertionError("no exec_finished for %s" % tid)
    finally:
        c.close()


def queued_task_fails_with_the_setup_message():
    st, b, _ = D.req("POST", "/runtime/tasks", {"command": ["/bin/true"], "sessionId": "s1"},
                     headers=EXTENDED)
    check(st == 202, "accepted", (st, b))
    st, b = wait_ended(b["id"])
    check(st == 200, "GET", (st, b))
    check_setup_failure(b, "GET /runtime/tasks/{id}")
    ev = stream_finished("s1", b["id"])
    ev = ev.get("data", {})
    check(ev.get("status") == "failed" and "/proc/sys" in ev.get("error", ""),
          "exec_finished carries the failure and its message", ev)


def exec_answers_the_setup_message():
    st, b, _ = D.req("POST", "/runtime/exec", {"command": ["/bin/true"]}, headers=EXTENDED)
    check(st == 200 and b["status"] == "failed" and "/proc/sys" in b["error"]
          and b["exitCode"] == 125, "/runtime/exec: failed, 125, the message", (st, b))


def execute_answers_the_setup_message():
    """Seed 004's four keys alone would say 125 with nothing else."""
    st, b, _ = D.req("POST", "/execute", {"code": "print(1)", "env": "python"})
    check(st == 200 and b["return_code"] == 125, "/execute: 125", (st, b))
    check("/proc/sys" in b.get("error", ""), "/execute names the setup failure", b)


def sandboxctl_prints_the_setup_message():
    p = subprocess.run([SANDBOXCTL, "--url", "http://127.0.0.1:%d" % D.port, "--token", TOKEN,
                        "exec", "--", "true"], capture_output=True, text=True, timeout=30)
    check(p.returncode == 125 and "/proc/sys" in p.stderr, "sandboxctl exec: 125, the message",
          (p.returncode, p.stdout, p.stderr))


def nothing_left_pending():
    st, b, _ = D.req("GET", "/runtime/tasks?status=pending", headers=EXTENDED)
    check(st == 200, "list", (st, b))
    check(b["tasks"] == [], "no task pending", b)
    st, b, _ = D.req("GET", "/runtime/tasks?status=failed", headers=EXTENDED)
    check(st == 200 and len(b["tasks"]) >= 3, "the tasks above all failed", (st, b))


try:
    D.start()
    for fn in (queued_task_fails_with_the_setup_message, exec_answers_the_setup_message,
               execute_answers_the_setup_message, sandboxctl_prints_the_setup_message,
               nothing_left_pending):
        S.case(fn)
finally:
    D.stop()
    shutil.rmtree(TMP, True)
S.finish()
