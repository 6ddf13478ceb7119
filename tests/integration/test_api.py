"""End-to-end tests of `sandboxd serve`: a real daemon on loopback, driven over
real HTTP (http.client) as a client of the original's API would drive it.

Each run starts its daemons with their own temporary state dirs and free ports,
waits for /readyz, and always stops them with SIGTERM at the end (kill -9 only
in the crash test)."""
import atexit
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
from sbxtest import EXTENDED, pids_of_uid, ServeDaemon, Suite, check  # noqa: E402

S = Suite("api")
TOKEN = "op-" + "0123456789abcdef0123456789abc"         # 32 chars, operator
ACME_TOKEN = "acme-" + "fedcba9876543210fedcba98765"   # 32 chars, tenant acme
TEST_TIMEOUT = 60  # seconds, per test case
assert len(TOKEN) == 32 and len(ACME_TOKEN) == 32

_daemons = []


class Daemon(ServeDaemon):
    """One `sandboxd serve` subprocess on a free loopback port."""

    def __init__(self, state_dir, config=None, extra=()):
        super().__init__(state_dir, TOKEN, config=config, extra=extra, registry=_daemons)

    # -- HTTP --

    def conn(self, timeout=20):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def req(self, method, path, body=None, token=TOKEN, headers=None, timeout=20,
            header_name="Authorization"):
        """One request; returns (status, parsed JSON or text, headers): our
        answers, every body typed as JSON, the token in header_name."""
        return super().req(method, path, body, token=token, headers=headers, timeout=timeout,
                           extended=True, auth=header_name, typed=True)

    def task(self, tid, **kw):
        return self.req("GET", "/runtime/tasks/" + tid, **kw)

    def submit(self, body, headers=None, token=TOKEN):
        st, b, _ = self.req("POST", "/runtime/tasks", body, headers=headers, token=token)
        check(st == 202 and isinstance(b, dict) and b.get("id"), "task accepted (202)", (st, b))
        return b["id"]

    def wait_status(self, tid, want, timeout=15, headers=None, token=TOKEN):
        """Poll until the task's status is in want (a set); returns the task."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            st, b, _ = self.task(tid, headers=headers, token=token)
            last = (st, b)
            if st == 200 and b.get("status") in want:
                return b
            time.sleep(0.05)
        raise AssertionError("task %s not %s in %ss: %r" % (tid, want, timeout, last))


FINAL = {"succeeded", "failed", "canceled", "timeout", "interrupted"}


def stop_all():
    for d in _daemons:
        try:
            d.stop()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass




class TestTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise TestTimeout("test case exceeded %ss" % TEST_TIMEOUT)


signal.signal(signal.SIGALRM, _alarm)


def settles(cond, timeout=10):
    """Polls cond() until it holds (True) or timeout seconds pass (False): for
    what the kernel finishes shortly after the API has answered (SIGKILLed
    processes exiting, cgroups released)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def case(fn):
    """S.case with a per-test timeout."""
    def wrapped():
        signal.alarm(TEST_TIMEOUT)
        try:
            fn()
        finally:
            signal.alarm(0)
    wrapped.__name__ = fn.__name__
    return S.case(wrapped)


POOL_REGION = 60000 * 65536  # the pool's host id ranges start this far above host_id_base


def task_uids(d, uid):
    """A task of the clone whose runner is host uid `uid`, in daemon d, runs
    as that uid, or (in a sandbox the warm pool built for any clone) as the
    runner of one of the pool's own host id ranges."""
    lo = d.host_id_base + POOL_REGION
    return lambda u: u == uid or (lo <= u < lo + 1024 * 65536 and u % 65536 == uid % 65536)


def host_sleepers(arg, uid=None):
    """(pid, uid, args) of host processes running `sleep <arg>` (optionally of
    uid: a host uid, or a test of one as task_uids makes)."""
    match = uid if callable(uid) else (lambda u: uid is None or u == uid)
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                args = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open("/proc/%s/status" % name) as f:
                u = next(int(x.split()[1]) for x in f if x.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if args == "sleep " + arg and match(u):
            found.append((int(name), u, args))
    return found


def task_cgroups(pid):
    """The cgroup directories (on the host) of process pid that belong to a task."""
    dirs = []
    try:
        with open("/proc/%d/cgroup" % pid) as f:
            lines = f.read().splitlines()
    except OSError:
        return dirs
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        if "task-" not in path:
            continue
        for name in (ctrls.replace("name=", ""), "unified" if not ctrls else None):
            if name and os.path.isdir("/sys/fs/cgroup/%s%s" % (name, path)):
                dirs.append("/sys/fs/cgroup/%s%s" % (name, path))
        if not ctrls and os.path.isdir("/sys/fs/cgroup" + path):
            dirs.append("/sys/fs/cgroup" + path)
    return dirs


def uses_cgroups(d):
    """Whether the daemon said it runs tasks in cgroups (not the rlimit fallback)."""
    return "(cgroups rlimit" not in d.output()


def workspace_uid(state, tenant, clone_id, clone_key=None):
    parts = [state, "workspaces", tenant] + ([clone_key] if clone_key else []) + [clone_id, "work"]
    return os.stat(os.path.join(*parts)).st_uid


def sse_events(resp, want_until=None, quiet=1.0, limit=10.0):
    """Read SSE frames from resp: returns [(id, event, data-json)]. Stops when
    want_until(events) is true and then no more frames arrive within `quiet`
    seconds, or after `limit` seconds."""
    events = []
    frame = {}
    deadline = time.monotonic() + limit
    satisfied_at = None
    sock = resp.fp.raw._sock if hasattr(resp.fp, "raw") else None
    while time.monotonic() < deadline:
        if sock is not None:
            if satisfied_at is not None:
                sock.settimeout(max(0.05, quiet - (time.monotonic() - satisfied_at)))
            else:
                sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            line = resp.readline()
        except (socket.timeout, TimeoutError):
            break
        if not line:
            break
        line = line.decode().rstrip("\r\n")
        if line == "":
            if "data" in frame:
                events.append((frame.get("id"), frame.get("event"), json.loads(frame["data"])))
                if want_until and satisfied_at is None and want_until(events):
                    satisfied_at = time.monotonic()
            frame = {}
            continue
        if line.startswith(":"):
            continue
        k, _, v = line.partition(":")
        v = v[1:] if v.startswith(" ") else v
        frame[k] = frame.get(k, "") + ("\n" if k == "data" and k in frame else "") + v
        if satisfied_at is not None and time.monotonic() - satisfied_at > quiet:
            break
    return events


def open_stream(d, session, last_id=None, token=TOKEN, tenant=None):
    c = d.conn(timeout=10)
    h = {"Authorization": "Bearer " + token, "Accept": "text/event-stream", **EXTENDED}
    if tenant:
        h["X-Tenant-Code"] = tenant
    if last_id is not None:
        h["Last-Event-ID"] = str(last_id)
    c.request("GET", "/runtime/stream?sessionID=" + urllib.parse.quote(session), headers=h)
    r = c.getresponse()
    return c, r


# ---- the daemons of this run ----

TMP = tempfile.mkdtemp(prefix="sbx-api-")


def cleanup():
    stop_all()
    shutil.rmtree(TMP, True)


atexit.register(cleanup)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


MAIN_CFG = write(os.path.join(TMP, "main.yaml"), """\
server:
  tokens:
    - name: acme-agent
      token: "%s"
      tenant: acme
network:
  hosts:
    svc.test: 203.0.113.10
""" % ACME_TOKEN)
QUEUE_CFG = write(os.path.join(TMP, "queue.yaml"), """\
server:
  queue_per_tenant: 2
""")

MAIN = Daemon(os.path.join(TMP, "main-state"), config=MAIN_CFG)
try:
    MAIN.start()
except Exception as e:  # noqa: BLE001
    print("FAIL start: %s" % e)
    stop_all()
    sys.exit(1)
D = MAIN


# ---- health and auth ----

@case
def health_and_ready_need_no_token():
    st, b, _ = D.req("GET", "/healthz", token=None)
    check(st == 200 and b == {"ok": True}, "healthz", (st, b))
    # The status is the runtime's of the request's clone: created until its
    # first start (the original's state machine); the daemon's own readiness
    # is in the extended answer.
    st, b, _ = D.req("GET", "/readyz", token=None, headers={"X-Tenant-Code": "neverstarted"})
    check(st == 200 and b.get("ok") is True and b.get("status") == "created"
          and b.get("daemon") == "ready", "readyz", (st, b))


@case
def token_required_and_checked():
    for path, method in (("/runtime/status", "GET"), ("/runtime/tasks", "GET"),
                         ("/runtime/exec", "POST")):
        body = {"command": ["true"]} if method == "POST" else None
        st, b, h = D.req(method, path, body, token=None)
        check(st == 401, "%s without a token: 401" % path, (st, b))
        check("Bearer" in h.get("WWW-Authenticate", ""), "WWW-Authenticate", h)
        st, b, _ = D.req(method, path, body, token="x" * 32)
        check(st == 401, "%s with a wrong Bearer token: 401" % path, (st, b))
        st, b, _ = D.req(method, path, body, token="x" * 32, header_name="X-Claw-Token")
        check(st == 401, "%s with a wrong X-Claw-Token: 401" % path, (st, b))
    st, b, _ = D.req("GET", "/runtime/status")
    check(st == 200, "Bearer accepted", (st, b))
    st, b, _ = D.req("GET", "/runtime/status", header_name="X-Claw-Token")
    check(st == 200, "X-Claw-Token accepted", (st, b))
    st, b, _ = D.req("GET", "/runtime/status", token=TOKEN[:-1] + "X")
    check(st == 401, "a token differing in its last byte: 401", (st, b))


# ---- synchronous exec ----

@case
def exec_command_mirrors_exit_code():
    st, b, _ = D.req("POST", "/runtime/exec",
                     {"command": ["/bin/sh", "-c", "echo out; echo err >&2; exit 3"]})
    check(st == 200, "200", (st, b))
    check(b["exitCode"] == 3, "exit code 3", b)
    check(b["stdout"] == "out\n" and b["stderr"] == "err\n", "stdout/stderr", b)
    check(b["status"] == "failed", "status failed", b)
    r = b["report"]
    check(r["outcome"] == "exited" and r["exitCode"] == 3, "report outcome", r)
    check(r["stdoutBytes"] == 4 and r["stderrBytes"] == 4 and not r["stdoutTruncated"],
          "report byte counts", r)
    check(b.get("startedAt") and b.get("endedAt") and b.get("taskId"), "times and id", b)
    st, t, _ = D.task(b["taskId"])
    check(st == 200 and t["status"] == "failed" and t["result"]["exitCode"] == 3
          and t["result"]["stdout"] == "out\n", "recorded as a task", (st, t))


@case
def network_per_task_operator_widens_tenant_only_narrows():
    # The daemon under test runs with --net none; an operator may choose proxy
    # for one task (the proxy variables then appear), a tenant token may not
    # choose host or add allow rules, but may narrow.
    st, b, _ = D.req("POST", "/runtime/exec",
                     {"command": ["/bin/sh", "-c", "env | grep -c _PROXY=; tail -n +3 /proc/net/dev"],
                      "network": {"policy": "proxy"}})
    check(st == 200 and b["stdout"].startswith("4\n"), "operator: proxy with its variables", b)
    st, b, _ = D.req("POST", "/runtime/exec",
                     {"command": ["/bin/sh", "-c", "env | grep -c _PROXY= || true"]})
    check(st == 200 and b["stdout"] == "0\n", "default (none): no proxy variables", b)
    a = {"X-Tenant-Code": "acme"}
    for net, what in (({"policy": "host"}, "network.policy host"),
                      ({"allow": ["10.0.0.0/8"]}, "network.allow"),
                      ({"default": "allow"}, "network.default allow")):
        st, b, _ = D.req("POST", "/runtime/exec", {"command": ["true"], "network": net},
                         token=ACME_TOKEN, headers=a)
        check(st == 403 and what in b["error"]["message"], "tenant may not widen: " + what, b)
    st, b, _ = D.req("POST", "/runtime/exec",
                     {"command": ["true"], "network": {"policy": "proxy", "default": "deny",
                                                       "deny": ["*.evil.test"]}},
                     token=ACME_TOKEN, headers=a)
    check(st == 200 and b["exitCode"] == 0, "tenant may narrow", b)
    for net, what in (({"allow": ["bad..rule"]}, "bad..rule"), ({"policy": "vpn"}, "network.policy"),
                      ({"bogus": 1}, "bogus"), ([], "network")):
        st, b, _ = D.req("POST", "/runtime/exec", {"command": ["true"], "network": net})
        check(st == 400 and what in b["error"]["message"], "bad network named: " + what, b)


@case
def stream_survives_output_that_escapes_large():
    # 70 000 control bytes become ~420 KB of JSON: the stream must still carry
    # every event of the task, up to exec_finished.
    c, r = open_stream(D, "ctl", last_id=0)
    try:
        st, b, _ = D.req("POST", "/runtime/exec",
                         {"sessionID": "ctl", "command": ["/bin/sh", "-c",
                                                          "head -c 70000 /dev/zero | tr '\\0' '\\1'"]})
        check(st == 200 and b["exitCode"] == 0, "task ran", b)
        evs = sse_events(r, lambda ev: any(e[1] == "exec_finished" for e in ev), quiet=0.5,
                         limit=10)
    finally:
        c.close()
    types = [e[1] for e in evs]
    check("exec_finished" in types, "exec_finished reached the stream", types)
    got = sum(len(e[2]["data"].get("data", "")) for e in evs if e[1] == "tool_call_output")
    check(got == 70000, "all 70000 bytes of output streamed (%d)" % got, types)


@case
def clones_per_tenant_are_capped():
    cfg = os.path.join(TMP, "cap.yaml")
    with open(cfg, "w") as f:
        f.write("sandbox:\n  workspace_quota: 32m\n  max_clones_per_tenant: 2\n")
    d = Daemon(os.path.join(TMP, "cap-state"), config=cfg).start()
    try:
        for i, want in ((1, 200), (2, 200), (3, 403), (1, 200)):
            st, b, _ = d.req("GET", "/runtime/files?path=/", headers={"X-Tenant-Code": "capped",
                                                                      "X-Clone-Id": "c%d" % i})
            check(st == want, "clone c%d: %d" % (i, want), (st, b))
        st, b, _ = d.req("GET", "/runtime/files?path=/", headers={"X-Tenant-Code": "other",
                                                                  "X-Clone-Id": "c3"})
        check(st == 200, "another tenant is not affected", (st, b))
    finally:
        d.stop()


@case
def first_file_requests_of_a_fresh_clone_wait_for_its_workspace():
    # A clone's first workspace image is formatted off the loop: its first
    # upload, listing or empty upload waits for it (parked), then works.
    up = {"X-Tenant-Code": "freshup", "X-Clone-Id": "c1"}
    st, b, _ = D.req("PUT", "/runtime/files?path=hello", b"hi there", token=TOKEN, headers=up)
    check(st == 201 and b["size"] == 8, "the first upload of a fresh clone", (st, b))
    st, b, _ = D.req("GET", "/runtime/files?path=hello", token=TOKEN, headers=up)
    check(st == 200 and b == "hi there", "what it uploaded", (st, b))
    ls = {"X-Tenant-Code": "freshls", "X-Clone-Id": "c1"}
    st, b, _ = D.req("GET", "/runtime/files?path=/", token=TOKEN, headers=ls)
    check(st == 200 and b["entries"] == [], "the first listing of a fresh clone", (st, b))
    empty = {"X-Tenant-Code": "freshempty", "X-Clone-Id": "c1"}
    st, b, _ = D.req("PUT", "/runtime/files?path=e", b"", token=TOKEN, headers=empty)
    check(st == 201 and b["size"] == 0, "the first, empty, upload of a fresh clone", (st, b))


@case
def network_of_a_running_task_changes_at_once():
    # The name is a static host answered by the sandbox's own DNS: no packet
    # leaves. Allowed at first; denied for the task's next question once the
    # policy is changed while it runs.
    a = {"X-Tenant-Code": "acme"}
    # The task and the test take turns through two files of its workspace:
    # "asked" once its first question is answered, "go" once the policy has
    # changed (no sleep stands in for either).
    for name in ("asked", "go"):
        D.req("DELETE", "/runtime/files?path=" + name, token=ACME_TOKEN, headers=a)
    script = ("getent hosts svc.test >/dev/null && echo first; touch asked; i=0; "
              "while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; "
              "getent hosts svc.test >/dev/null && echo second || echo refused")
    st, t, _ = D.req("POST", "/runtime/tasks", {"command": ["/bin/sh", "-c", script],
                                                "network": {"policy": "proxy"}},
                     token=ACME_TOKEN, headers=a)
    check(st == 202, "task queued", (st, t))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        st, _, _ = D.req("GET", "/runtime/files?path=asked", token=ACME_TOKEN, headers=a)
        if st == 200:
            break
        time.sleep(0.05)
    check(st == 200, "the task asked its first question", st)
    path = "/runtime/tasks/%s/network" % t["id"]
    st, b, _ = D.req("POST", path, {"allow": ["*.test"]}, token=ACME_TOKEN, headers=a)
    check(st == 403, "a tenant token may not widen", (st, b))
    st, b, _ = D.req("POST", path, {"policy": "host"}, token=ACME_TOKEN, headers=a)
    check(st == 400, "the policy itself cannot change while running", (st, b))
    st, b, _ = D.req("POST", path, {"deny": ["svc.test"]}, token=ACME_TOKEN, headers=a)
    check(st == 200, "a tenant token may narrow", (st, b))
    # Each change sets the task's rules (on top of the operator's): it does not
    # add to the previous change.
    st, b, _ = D.req("POST", path, {"deny": ["svc.test", "x.test"]},
                     headers={"X-Tenant-Code": "other"}, token=TOKEN)
    check(st == 200, "operator may act on any task", (st, b))
    st, b, _ = D.req("PUT", "/runtime/files?path=go", b"", token=ACME_TOKEN, headers=a)
    check(st in (200, 201), "go", (st, b))
    done = D.wait_status(t["id"], FINAL, timeout=60)
    out = done["result"]["stdout"]
    check(out == "first\nrefused\n", "allowed before, refused after the change", done)
    st, b, _ = D.req("POST", path, {"deny": ["y"]}, token=ACME_TOKEN, headers=a)
    check(st == 409, "an ended task: 409", (st, b))
    st, b, _ = D.req("POST", "/runtime/tasks/0/network", {"deny": ["y"]})
    check(st == 404, "unknown task: 404", (st, b))
    # Rules given with the task apply from its start.
    look = ["/bin/sh", "-c", "getent hosts svc.test >/dev/null && echo yes || echo no"]
    st, b, _ = D.req("POST", "/runtime/exec", {"command": look, "network": {"policy": "proxy"}},
                     token=ACME_TOKEN, headers=a)
    check(st == 200 and b["stdout"] == "yes\n", "the operator's policy answers the name", b)
    st, b, _ = D.req("POST", "/runtime/exec", {"command": look, "network": {
        "policy": "proxy", "deny": ["svc.test"]}}, token=ACME_TOKEN, headers=a)
    check(st == 200 and b["stdout"] == "no\n", "the task's own deny rule applies", b)


@case
def session_is_a_live_sandbox():
    a = {"X-Tenant-Code": "sess", "X-Clone-Id": "c1"}
    st, b, _ = D.req("POST", "/runtime/start", {"sessionID": "live"}, headers=a)
    check(st == 200, "session started", (st, b))
    st, b, _ = D.req("POST", "/runtime/exec", {"sessionID": "live", "command": [
        "/bin/sh", "-c", "echo kept > /tmp/keep; (setsid sleep 300 &); echo started"]}, headers=a)
    check(st == 200 and b["stdout"] == "started\n", "first task", (st, b))
    st, b, _ = D.req("POST", "/runtime/exec", {"sessionID": "live", "command": [
        "/bin/sh", "-c", "cat /tmp/keep; pgrep -c -x sleep"]}, headers=a)
    check(st == 200 and b["stdout"] == "kept\n1\n",
          "the next task sees /tmp and the background process", (st, b))
    # A task's timeout kills that task, not the session.
    st, b, _ = D.req("POST", "/runtime/exec", {"sessionID": "live", "timeoutSeconds": 1,
                                               "command": ["sleep", "30"]}, headers=a)
    check(st == 200 and b["status"] == "timeout" and b["exitCode"] == 124, "task timeout", b)
    st, b, _ = D.req("POST", "/runtime/exec", {"sessionID": "live", "command": [
        "/bin/sh", "-c", "cat /tmp/keep"]}, headers=a)
    check(st == 200 and b["stdout"] == "kept\n", "the session survives its task's timeout", b)
    # A task without the session gets a one-shot sandbox.
    st, b, _ = D.req("POST", "/runtime/exec", {"command": ["/bin/sh", "-c", "cat /tmp/keep"]},
                     headers=a)
    check(st == 200 and b["exitCode"] == 1, "a one-shot task does not see the session", b)
    # The runner's host uid in the session: the clone's, or (a holder from
    # the warm pool) the pooled sandbox's own range's.
    st, b, _ = D.req("POST", "/runtime/exec", {"sessionID": "live", "command": [
        "cat", "/proc/self/uid_map"]}, headers=a)
    check(st == 200 and b["exitCode"] == 0, "its uid map", (st, b))
    owner = int(b["stdout"].split()[1]) + 10001
    check(any(True for _ in pids_of_uid(owner)), "the session's processes exist on the host")
    st, running, _ = D.req("POST", "/runtime/tasks", {"sessionID": "live", "command": [
        "sleep", "30"]}, headers=a)
    check(st == 202, "a long task in the session", (st, running))
    D.wait_status(running["id"], {"running"}, headers=a)
    st, b, _ = D.req("POST", "/runtime/stop", {"sessionID": "live"}, headers=a)
    check(st == 200, "session stopped", (st, b))
    done = D.wait_status(running["id"], FINAL, headers=a)
    check(done["status"] == "canceled" and done["result"]["exitCode"] == 124,
          "a task running in a stopped session is canceled", done)
    deadline = time.monotonic() + 5
    while pids_of_uid(owner) and time.monotonic() < deadline:
        time.sleep(0.05)
    check(pids_of_uid(owner) == [], "stop killed everything in it", pids_of_uid(owner))


@case
def tasks_sent_while_a_session_starts_run_inside_it():
    # The start is answered once the session's sandbox is set up; what names
    # the session meanwhile waits for it (in the queue), and a start sent
    # twice, or left by its client, changes nothing.
    a = {"X-Tenant-Code": "acme"}
    body = json.dumps({"sessionID": "early"})
    h = {"Authorization": "Bearer " + ACME_TOKEN, "Content-Type": "application/json", **a,
         **EXTENDED}
    first, second, gone = D.conn(), D.conn(), D.conn()
    first.request("POST", "/runtime/start", body=body, headers=h)
    second.request("POST", "/runtime/start", body=body, headers=h)
    gone.request("POST", "/runtime/start", body=body, headers=h)
    gone.close()
    st, t, _ = D.req("POST", "/runtime/tasks", {"sessionID": "early", "command": [
        "/bin/sh", "-c", "echo here > /tmp/mark; cat /tmp/mark"]}, token=ACME_TOKEN, headers=a)
    check(st == 202, "queued", (st, t))
    for c in (first, second):
        r = c.getresponse()
        b = json.loads(r.read())
        check(r.status == 200 and b["status"]["status"] in ("ready", "busy")
              and b["sessionId"] == "early", "start answered once ready", b)
        c.close()
    done = D.wait_status(t["id"], FINAL, token=ACME_TOKEN, headers=a)
    check(done["status"] == "succeeded" and done["result"]["stdout"] == "here\n",
          "the early task ran", done)
    st, b, _ = D.req("POST", "/runtime/exec", {"sessionID": "early", "command": [
        "/bin/cat", "/tmp/mark"]}, token=ACME_TOKEN, headers=a)
    check(st == 200 and b["stdout"] == "here\n", "... inside the session (its /tmp)", b)
    st, b, _ = D.req("POST", "/runtime/stop", {"sessionID": "early"}, token=ACME_TOKEN, headers=a)
    check(st == 200, "stopped", (st, b))
    # Stopped while it starts: its start is refused (409) unless it was ready
    # first, and a task that waited for it does not wait forever: it runs
    # outside it, or inside it until the stop kills it.
    for i in range(3):
        name = "brief%d" % i
        starting = D.conn()
        starting.request("POST", "/runtime/start", body=json.dumps({"sessionID": name}),
                         headers=h)
        st, t, _ = D.req("POST", "/runtime/tasks", {"sessionID": name, "command": ["/bin/true"]},
                         token=ACME_TOKEN, headers=a)
        check(st == 202, "queued", (st, t))
        st, b, _ = D.req("POST", "/runtime/stop", {"sessionID": name}, token=ACME_TOKEN,
                         headers=a)
        check(st == 200, "stopped", (st, b))
        r = starting.getresponse()
        r.read()
        starting.close()
        check(r.status in (200, 409), "the start: ready or refused, %d" % r.status)
        done = D.wait_status(t["id"], FINAL, token=ACME_TOKEN, headers=a)
        check(done["status"] in ("succeeded", "canceled"),
              "the task ran, or was canceled by the stop", done)


@case
def session_idle_timeout_ends_it():
    cfg = os.path.join(TMP, "idle.yaml")
    with open(cfg, "w") as f:
        f.write("sandbox:\n  workspace_quota: 32m\n  idle_timeout: 3s\n")
    d = Daemon(os.path.join(TMP, "idle-state"), config=cfg).start()
    try:
        a = {"X-Tenant-Code": "idle"}
        st, b, _ = d.req("POST", "/runtime/start", {"sessionID": "nap"}, headers=a)
        check(st == 200, "started", (st, b))
        # The task ends only once its background process is `sleep` (no longer
        # the subshell or setsid it starts as): on a busy machine the exec may
        # come later than the next task's look.
        st, b, _ = d.req("POST", "/runtime/exec", {"sessionID": "nap", "command": [
            "/bin/sh", "-c", "(setsid sleep 300 &); i=0; until grep -qx sleep /proc/[0-9]*/comm "
            "2>/dev/null || [ $i -ge 5000 ]; do i=$((i+1)); done; echo x > /tmp/f"]}, headers=a)
        check(st == 200, "task in the session", (st, b))
        # Seen from inside the session (a task of its own, which also renews
        # the idle timer): the background process outlived its task.
        st, b, _ = d.req("POST", "/runtime/exec", {"sessionID": "nap", "command": [
            "/bin/sh", "-c", "grep -lx sleep /proc/[0-9]*/comm"]}, headers=a)
        check(st == 200 and b["exitCode"] == 0, "the background process lives on", b)
        owner = os.stat(os.path.join(d.state, "workspaces", "idle", "default", "work")).st_uid
        deadline = time.monotonic() + 20  # the idle timeout is 3 s; slack for a busy machine
        while pids_of_uid(owner) and time.monotonic() < deadline:
            time.sleep(0.1)
        check(pids_of_uid(owner) == [], "idle session killed", pids_of_uid(owner))
        # The clone's runtime stopped itself too (the original's state
        # machine): new tasks are refused until the next start.
        st, b, _ = d.req("POST", "/runtime/exec", {"sessionID": "nap", "command": [
            "/bin/sh", "-c", "cat /tmp/f"]}, headers=a)
        check(st == 400 and b["error"]["message"] == "runtime stopped", "refused when idle", b)
        st, b, _ = d.req("GET", "/readyz", headers=a)
        check(b.get("status") == "stopped", "readyz says stopped", b)
        st, b, _ = d.req("POST", "/runtime/start", headers=a)
        check(st == 200 and b["status"]["status"] == "ready", "started again", b)
        st, b, _ = d.req("POST", "/runtime/exec", {"sessionID": "nap", "command": [
            "/bin/sh", "-c", "cat /tmp/f"]}, headers=a)
        check(st == 200 and b["exitCode"] == 1, "after the idle end, a fresh sandbox", b)
    finally:
        d.stop()


@case
def mount_sandbox_both_ways():
    # On (the default): nothing of the host but the system directories.
    st, b, _ = D.req("POST", "/runtime/exec", {"command": ["/bin/sh", "-c", "ls -d /host"]})
    check(st == 200 and b["exitCode"] != 0, "mount sandbox on: no /host", b)
    # Off: a wider read-only view of the host's data directories at /host, and
    # still no way to another clone's files or the daemon's state.
    cfg = os.path.join(TMP, "view.yaml")
    with open(cfg, "w") as f:
        f.write("sandbox:\n  workspace_quota: 32m\n  mount_sandbox: false\n")
    d = Daemon(os.path.join(TMP, "view-state"), config=cfg).start()
    try:
        st, b, _ = d.req("POST", "/runtime/exec", {"command": [
            "/bin/sh", "-c", "echo view-secret-a > s"]}, headers={"X-Clone-Id": "a"})
        check(st == 200 and b["exitCode"] == 0, "clone a wrote", b)
        # The search covers the whole view (gigabytes of the host's /var on a
        # cold cache): bounded, and the request given time for it.
        script = ("ls /host/opt; touch /host/opt/x 2>/dev/null && echo WROTE; "
                  "timeout 20 grep -rs view-secret-a /host /tmp /home 2>/dev/null | head -1; "
                  "cat /host/var/lib/sandbox/api-token 2>/dev/null; echo end")
        st, b, _ = d.req("POST", "/runtime/exec", {"command": ["/bin/sh", "-c", script]},
                         headers={"X-Clone-Id": "b"}, timeout=60)
        check(st == 200, "clone b ran", b)
        listed = b["stdout"].split("\n")
        check(sorted(x for x in listed[:-2] if x) == sorted(os.listdir("/opt")),
              "off: the host's /opt is visible", b)
        check("WROTE" not in b["stdout"], "off: the view is read-only", b)
        check("view-secret-a" not in b["stdout"], "off: another clone's file is out of reach", b)
        check(b["stdout"].endswith("end\n") and TOKEN not in b["stdout"],
              "off: no token reached the task", b)
    finally:
        d.stop()


@case
def session_network_changes_at_once():
    # Without an egress (the main daemon runs --net none): 409; unknown: 404.
    a = {"X-Tenant-Code": "acme"}
    st, b, _ = D.req("POST", "/runtime/start", {"sessionID": "nonet"}, token=ACME_TOKEN, headers=a)
    check(st == 200, "started", (st, b))
    st, b, _ = D.req("POST", "/runtime/network", {"sessionID": "nonet", "deny": ["x.test"]},
                     token=ACME_TOKEN, headers=a)
    check(st == 409, "no egress: 409", (st, b))
    st, b, _ = D.req("POST", "/runtime/network", {"sessionID": "nosuch", "deny": ["x.test"]},
                     token=ACME_TOKEN, headers=a)
    check(st == 404, "unknown session: 404", (st, b))
    D.req("POST", "/runtime/stop", {"sessionID": "nonet"}, token=ACME_TOKEN, headers=a)
    # A proxy daemon: a name answered before the change is refused after it.
    cfg = os.path.join(TMP, "snet.yaml")
    with open(cfg, "w") as f:
        f.write("sandbox:\n  workspace_quota: 32m\nnetwork:\n  hosts:\n"
                "    svc.test: 203.0.113.10\n")
    d = Daemon(os.path.join(TMP, "snet-state"), config=cfg, extra=["--net", "proxy"]).start()
    try:
        st, b, _ = d.req("POST", "/runtime/start", {"sessionID": "web"})
        check(st == 200, "proxy session started", (st, b))
        probe = {"sessionID": "web", "command": ["/bin/sh", "-c",
                                                 "getent hosts svc.test >/dev/null && echo yes "
                                                 "|| echo no"]}
        st, b, _ = d.req("POST", "/runtime/exec", probe)
        check(st == 200 and b["stdout"] == "yes\n", "answered before", b)
        st, b, _ = d.req("POST", "/runtime/network", {"sessionID": "web", "allow": ["bad..x"]})
        check(st == 400 and "bad..x" in b["error"]["message"], "bad rule named", (st, b))
        st, b, _ = d.req("POST", "/runtime/network", {"sessionID": "web", "deny": ["svc.test"]})
        check(st == 200, "changed", (st, b))
        st, b, _ = d.req("POST", "/runtime/exec", probe)
        check(st == 200 and b["stdout"] == "no\n", "refused after the change", b)
    finally:
        d.stop()


@case
def exec_language_code():
    cases = [("python", "import sys; print(6*7); print('e', file=sys.stderr)", "42\n", "e\n"),
             ("node", "console.log(6*7); console.error('e')", "42\n", "e\n"),
             ("shell", "echo $((6*7)); echo e >&2", "42\n", "e\n")]
    for lang, code, out, err in cases:
        st, b, _ = D.req("POST", "/runtime/exec", {"language": lang, "code": code})
        check(st == 200 and b["exitCode"] == 0 and b["stdout"] == out and b["stderr"] == err,
              "%s code runs" % lang, (st, b))
    st, b, _ = D.req("POST", "/runtime/exec",
                     {"language": "python", "code": "import sys; print(sys.stdin.read()[::-1])",
                      "stdin": "abc"})
    check(st == 200 and b["stdout"] == "cba\n", "stdin reaches the code", (st, b))
    st, b, _ = D.req("POST", "/runtime/exec", {"language": "cobol", "code": "x"})
    check(st == 400 and "cobol" in json.dumps(b), "unknown language: 400 naming it", (st, b))


@case
def exec_timeout_seconds():
    t0 = time.monotonic()
    st, b, _ = D.req("POST", "/runtime/exec", {"command": ["sleep", "10"], "timeoutSeconds": 1})
    took = time.monotonic() - t0
    check(st == 200, "200", (st, b))
    check(b["status"] == "timeout" and b["exitCode"] == 124, "timeout, exit 124", b)
    check(b["report"]["outcome"] == "timeout", "report outcome timeout", b)
    check(took < 1 + 10, "ended near the timeout (%.1fs)" % took)


@case
def limits_above_maxima_are_400():
    # built-in maxima: timeout 1800 s, memory 2 GiB, pids 256, cpu 2
    for field, value in (("timeoutSeconds", 100000), ("memoryMB", 4096), ("pids", 100000),
                         ("cpu", 64)):
        for path in ("/runtime/exec", "/runtime/tasks"):
            st, b, _ = D.req("POST", path, {"command": ["true"], field: value})
            check(st == 400, "%s %s=%s: 400" % (path, field, value), (st, b))
            check(field in b["error"]["message"], "the error names %s" % field, b)
    st, b, _ = D.req("POST", "/runtime/exec", {"command": ["true"], "memoryMB": 64, "pids": 8,
                                               "cpu": 0.5, "timeoutSeconds": 5})
    check(st == 200 and b["exitCode"] == 0, "limits within the maxima run", (st, b))
    lim = b["report"]["limits"]
    check(lim["memoryBytes"] == 64 << 20 and lim["pids"] == 8 and lim["timeoutSeconds"] == 5,
          "per-request limits applied", lim)


@case
def malformed_json_and_unknown_field():
    st, b, _ = D.req("POST", "/runtime/exec", '{"command": ["true"],\n  "x": }')
    check(st == 400, "malformed JSON: 400", (st, b))
    msg = b["error"]["message"]
    check(":2:" in msg, "the error says where (line 2)", b)
    st, b, _ = D.req("POST", "/runtime/tasks", '{"command": ["true"]')
    check(st == 400 and ":1:" in b["error"]["message"], "truncated JSON: 400 with place", (st, b))
    st, b, _ = D.req("POST", "/runtime/exec", {"command": ["true"], "comand": ["x"]})
    check(st == 400 and "comand" in b["error"]["message"], "unknown field named", (st, b))
    st, b, _ = D.req("POST", "/runtime/tasks", {"command": ["true"], "timeoutSecs": 3})
    check(st == 400 and "timeoutSecs" in b["error"]["message"], "unknown field named", (st, b))
    st, b, _ = D.req("POST", "/runtime/exec", "[1,2]")
    check(st == 400, "a non-object body: 400", (st, b))


# ---- tasks ----

@case
def task_submit_and_poll():
    tid = D.submit({"command": ["/bin/sh", "-c", "sleep 0.3; echo done"]})
    st, b, _ = D.task(tid)
    check(st == 200 and b["status"] in ("pending", "running", "succeeded"), "visible", (st, b))
    t = D.wait_status(tid, FINAL)
    check(t["status"] == "succeeded" and t["result"]["exitCode"] == 0, "succeeded", t)
    check(t["result"]["stdout"] == "done\n", "stdout kept", t)
    check(t["createdAt"] and t["startedAt"] and t["endedAt"], "times", t)
    check(t["backend"] == "sandbox" and t["command"][0] == "/bin/sh", "original fields", t)


@case
def task_list_paging_and_status_filter():
    h = {"X-Tenant-Code": "pager"}
    ids = []
    for i in range(5):
        ids.append(D.submit({"command": ["/bin/sh", "-c", "exit %d" % (1 if i % 2 else 0)]},
                            headers=h))
    for tid in ids:
        D.wait_status(tid, FINAL, headers=h)
    seen, pages, cursor = [], 0, None
    while True:
        q = "/runtime/tasks?limit=2" + ("&cursor=" + urllib.parse.quote(cursor) if cursor else "")
        st, b, _ = D.req("GET", q, headers=h)
        check(st == 200 and isinstance(b, dict), "list page 200", (st, b))
        check(len(b["tasks"]) <= 2, "at most limit tasks", b)
        seen += [t["id"] for t in b["tasks"]]
        pages += 1
        cursor = b.get("nextCursor")
        if not cursor or pages > 5:
            break
    check(len(seen) == len(set(seen)), "no duplicates across pages", seen)
    check(sorted(seen) == sorted(ids), "every task listed, no other", (seen, ids))
    check(pages == 3, "5 tasks at 2 a page: 3 pages (%d)" % pages)
    st, b, _ = D.req("GET", "/runtime/tasks?status=failed&limit=50", headers=h)
    failed = sorted(t["id"] for t in b["tasks"])
    check(st == 200 and failed == sorted(ids[1::2]), "status filter", (failed, ids))
    check(all(t["status"] == "failed" for t in b["tasks"]), "only failed", b)
    seen, cursor = [], None
    for _ in range(4):
        q = "/runtime/tasks?status=succeeded&limit=1" + (
            "&cursor=" + urllib.parse.quote(cursor) if cursor else "")
        st, b, _ = D.req("GET", q, headers=h)
        check(st == 200 and len(b["tasks"]) <= 1, "filtered page", (st, b))
        seen += [t["id"] for t in b["tasks"]]
        cursor = b.get("nextCursor")
        if not cursor:
            break
    check(sorted(seen) == sorted(ids[0::2]), "filtered paging: every succeeded task once",
          (seen, ids))
    st, b, _ = D.req("GET", "/runtime/tasks?status=bogus", headers=h)
    check(st == 400, "unknown status: 400", (st, b))
    st, b, _ = D.req("GET", "/runtime/tasks?limit=0", headers=h)
    check(st == 400, "limit 0: 400", (st, b))


@case
def cancel_running_task_kills_tree():
    h = {"X-Tenant-Code": "cancelt", "X-Clone-Id": "c1"}
    tid = D.submit({"command": ["/bin/sh", "-c", "sleep 30 & sleep 30; wait"]}, headers=h)
    D.wait_status(tid, {"running"}, headers=h)
    uid = task_uids(D, workspace_uid(D.state, "cancelt", "c1"))
    deadline = time.monotonic() + 5
    while len(host_sleepers("30", uid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    check(len(host_sleepers("30", uid)) == 2, "two `sleep 30` run as the clone's task",
          host_sleepers("30"))
    cgs = task_cgroups(host_sleepers("30", uid)[0][0])
    check(cgs or not uses_cgroups(D), "the task has cgroups of its own")
    st, b, _ = D.req("POST", "/runtime/tasks/%s/cancel" % tid, headers=h)
    check(st == 200 and b["id"] == tid, "cancel accepted", (st, b))
    t = D.wait_status(tid, FINAL, timeout=5, headers=h)
    check(t["status"] == "canceled", "final status canceled", t)
    check(t["result"] and t["result"]["exitCode"] == 124, "exit code 124", t)
    check(settles(lambda: host_sleepers("30", uid) == []), "no `sleep 30` of the task left",
          host_sleepers("30"))
    check(settles(lambda: not [c for c in cgs if os.path.exists(c)]),
          "the task's cgroups removed", cgs)
    st, b, _ = D.req("POST", "/runtime/tasks/%s/cancel" % tid, headers=h)
    check(st == 409, "cancel of an ended task: 409", (st, b))


@case
def unknown_task_is_404():
    missing = "01a22800-0000-7000-8000-000000000000"
    st, b, _ = D.task(missing)
    check(st == 404, "GET unknown: 404", (st, b))
    st, b, _ = D.req("POST", "/runtime/tasks/%s/cancel" % missing)
    check(st == 404, "cancel unknown: 404", (st, b))
    st, b, _ = D.task("nonsense")
    check(st == 404, "GET malformed id: 404", (st, b))


# ---- tenancy ----

@case
def clones_have_separate_workspaces():
    a = {"X-Tenant-Code": "tena", "X-Clone-Id": "c1"}
    b_ = {"X-Tenant-Code": "tena", "X-Clone-Id": "c2"}
    st, r, _ = D.req("POST", "/runtime/exec", {"command": [
        "/bin/sh", "-c", "echo secret-of-c1 > /workspace/mine.txt; cat /workspace/mine.txt"]},
        headers=a)
    check(st == 200 and r["exitCode"] == 0 and r["stdout"] == "secret-of-c1\n", "c1 writes",
          (st, r))
    st, r, _ = D.req("POST", "/runtime/exec", {"command": [
        "/bin/sh", "-c", "cat /workspace/mine.txt; ls -A /workspace; echo c2 > /workspace/c2.txt"]},
        headers=b_)
    check(st == 200, "c2 runs", (st, r))
    check("secret-of-c1" not in r["stdout"] and "mine.txt" not in r["stdout"],
          "c1's file is not visible to c2", r)
    check("No such file" in r["stderr"], "c2 sees no mine.txt", r)
    f1 = os.path.join(D.state, "workspaces", "tena", "c1", "work", "mine.txt")
    f2 = os.path.join(D.state, "workspaces", "tena", "c2", "work", "c2.txt")
    check(os.path.exists(f1) and os.path.exists(f2), "files under <state>/workspaces/<t>/<c>/work")
    u1, u2 = os.stat(f1).st_uid, os.stat(f2).st_uid
    check(u1 != u2 and u1 != 0 and u2 != 0, "different host owners (%d, %d)" % (u1, u2))
    # the same clone again sees its file (the workspace persists)
    st, r, _ = D.req("POST", "/runtime/exec", {"command": ["cat", "/workspace/mine.txt"]},
                     headers=a)
    check(st == 200 and r["stdout"] == "secret-of-c1\n", "c1 sees its file again", (st, r))


@case
def invalid_segments_are_400():
    bad = ["..", ".", "a/b", "x" * 65, "%", "a b", ""]
    for header in ("X-Tenant-Code", "X-Clone-Id", "X-Clone-Key"):
        for v in bad:
            if v == "" and header == "X-Clone-Key":
                continue  # an empty clone key means "none"
            st, b, _ = D.req("POST", "/runtime/exec", {"command": ["true"]},
                             headers={header: v})
            check(st == 400, "%s %r: 400" % (header, v), (st, b))
    st, b, _ = D.req("POST", "/runtime/exec", {"command": ["true"], "tenantCode": "../x"})
    check(st == 400, "body tenantCode '../x': 400", (st, b))
    st, b, _ = D.req("GET", "/runtime/status?tenantCode=a%2Fb")
    check(st == 400, "query tenantCode 'a/b': 400", (st, b))
    st, b, _ = D.req("POST", "/runtime/exec", {"command": ["true"]},
                     headers={"X-Tenant-Code": "x" * 64})
    check(st == 200, "64 chars is fine", (st, b))
    check(not os.path.exists(os.path.join(D.state, "x")) and
          not os.path.exists(os.path.join(D.state, "workspaces", "a")),
          "no directory made for a refused name")


@case
def tenant_token_is_confined():
    acme = {"X-Tenant-Code": "acme"}
    other = {"X-Tenant-Code": "globex"}
    st, b, _ = D.req("POST", "/runtime/exec", {"command": ["true"]}, token=ACME_TOKEN,
                     headers=other)
    check(st == 403, "acme token acting for globex: 403", (st, b))
    st, b, _ = D.req("POST", "/runtime/tasks", {"command": ["true"], "tenantCode": "globex"},
                     token=ACME_TOKEN)
    check(st == 403, "acme token, body tenantCode globex: 403", (st, b))
    st, b, _ = D.req("POST", "/runtime/exec", {"command": ["true"]}, token=ACME_TOKEN)
    check(st == 403, "acme token with the default tenant: 403", (st, b))
    mine = D.submit({"command": ["echo", "acme"]}, headers=acme, token=ACME_TOKEN)
    theirs = D.submit({"command": ["echo", "globex"]}, headers=other)
    D.wait_status(mine, FINAL, token=ACME_TOKEN)
    D.wait_status(theirs, FINAL)
    st, b, _ = D.task(theirs, token=ACME_TOKEN)
    check(st == 404, "another tenant's task by id: 404", (st, b))
    st, b, _ = D.req("POST", "/runtime/tasks/%s/cancel" % theirs, token=ACME_TOKEN)
    check(st == 404, "cancel another tenant's task: 404", (st, b))
    for q in ("/runtime/tasks?limit=200", "/runtime/tasks?limit=200&status=succeeded"):
        for hdr in (None, other):
            st, b, _ = D.req("GET", q, token=ACME_TOKEN, headers=hdr)
            check(st in (200, 403), "list", (st, b))
            if st == 200:
                ids = [t["id"] for t in b["tasks"]]
                check(theirs not in ids, "globex's task not in acme's list (%s)" % q, ids)
                check(all(t["tenantCode"] == "acme" for t in b["tasks"]), "only acme's", b)
                if hdr is None:
                    check(mine in ids, "acme's own task listed", ids)
    st, b, _ = D.task(mine, token=ACME_TOKEN)
    check(st == 200 and b["result"]["stdout"] == "acme\n", "own task by id", (st, b))
    st, b, _ = D.req("GET", "/runtime/status", token=ACME_TOKEN, headers=acme)
    check(st == 200 and b["tenantCode"] == "acme", "status of own tenant", (st, b))


# ---- /execute (seed 004) ----

@case
def opensandbox_execute():
    st, b, _ = D.req("POST", "/execute", {
        "code": "import os; print('hi'); raise SystemExit(2)", "env": "python",
        "timeout": 10, "memory_limit": "256m", "pids_limit": 16,
        "capabilities": {"drop": ["ALL"]}})
    check(st == 200, "200", (st, b))
    check(b["stdout"] == "hi\n" and b["return_code"] == 2, "stdout and return_code", b)
    check(isinstance(b["execution_time"], (int, float)) and b["execution_time"] >= 0,
          "execution_time", b)
    check(set(b) >= {"stdout", "stderr", "return_code", "execution_time"}, "fields", b)
    st, b, _ = D.req("POST", "/execute", {"code": "echo $0", "env": "shell"})
    check(st == 200 and b["return_code"] == 0, "env shell", (st, b))
    st, b, _ = D.req("POST", "/execute", {"code": "print(1)", "env": "python",
                                          "capabilities": {"add": ["NET_ADMIN"]}})
    check(st == 400 and "capabilities.add" in b["error"]["message"], "add refused by name",
          (st, b))
    st, b, _ = D.req("POST", "/execute", {"code": "print(1)", "memory_limit": "lots"})
    check(st == 400 and "memory_limit" in b["error"]["message"], "bad memory_limit", (st, b))
    st, b, _ = D.req("POST", "/execute", {"code": "print(1)", "memory_limit": "64g"})
    check(st == 400 and "memory" in b["error"]["message"], "memory above the max", (st, b))



@case
def execute_errors_name_its_own_fields():
    """/execute's limit errors should name /execute's fields, not /runtime's."""
    bad = []
    for body, field in (({"timeout": 100000}, "timeout"), ({"pids_limit": 100000}, "pids_limit"),
                        ({"memory_limit": "64g"}, "memory_limit")):
        body = dict(body, code="print(1)", env="python")
        st, b, _ = D.req("POST", "/execute", body)
        msg = b["error"]["message"] if st == 400 else None
        if st != 400 or not re.search(r"(?<![A-Za-z_])%s(?![A-Za-z_])" % field, msg):
            bad.append("POST /execute %s -> %d %s (want 400 naming %s)"
                       % (json.dumps(body), st, json.dumps(b), field))
    for body, field in (({"timeout": "5"}, "timeout"), ({"pids_limit": -1}, "pids_limit"),
                        ({"timeout": -3}, "timeout")):
        body = dict(body, code="print(1)", env="python")
        st, b, _ = D.req("POST", "/execute", body)
        msg = b["error"]["message"] if st == 400 else ""
        if st != 400 or field not in msg or "above the maximum" in msg:
            bad.append("POST /execute %s -> %d %s (want 400 naming %s, not 'above the maximum')"
                       % (json.dumps(body), st, json.dumps(b), field))
    check(not bad, "/execute field errors:\n  " + "\n  ".join(bad))

# ---- the event stream ----

@case
def stream_filters_by_session_and_replays():
    c, r = open_stream(D, "s1")
    try:
        check(r.status == 200 and "text/event-stream" in r.getheader("Content-Type", ""),
              "SSE answer", (r.status, r.getheaders()))
        other = D.submit({"command": ["/bin/sh", "-c", "echo from-s2"], "sessionID": "s2"})
        tid = D.submit({"command": ["/bin/sh", "-c", "echo from-s1; echo e1 >&2"],
                        "sessionID": "s1"})

        def finished(evs):
            return any(e[1] == "exec_finished" and e[2]["data"].get("taskId") == tid
                       for e in evs)
        evs = sse_events(r, finished, quiet=0.7, limit=10)
    finally:
        c.close()
    D.wait_status(other, FINAL)
    types = [e[1] for e in evs if e[2]["data"].get("taskId") == tid]
    for want in ("task_running", "exec_started", "tool_call_output", "exec_finished"):
        check(want in types, "event %s received" % want, evs)
    check(types.index("task_running") < types.index("exec_finished"), "order", types)
    ids = [int(e[0]) for e in evs]
    check(ids == sorted(ids) and len(set(ids)) == len(ids), "increasing id: lines", ids)
    for eid, typ, body in evs:
        check(set(body) >= {"id", "type", "time", "sessionId", "data"}, "body fields", body)
        check(body["id"] == int(eid) and body["type"] == typ, "id/type match the frame", body)
        check(body["sessionId"] == "s1", "only s1's events", body)
        check(body["data"].get("taskId") != other, "s2's task not in s1's stream", body)
    out = "".join(e[2]["data"]["data"] for e in evs
                  if e[1] == "tool_call_output" and e[2]["data"]["stream"] == "stdout")
    check("from-s1\n" in out, "live stdout in tool_call_output", evs)
    fin = [e for e in evs if e[1] == "exec_finished"][-1][2]["data"]
    check(fin["exitCode"] == 0 and fin["status"] == "succeeded", "exec_finished data", fin)

    # resume: Last-Event-ID N replays exactly what follows N
    n = ids[1]
    want = [i for i in ids if i > n]
    c, r = open_stream(D, "s1", last_id=n)
    try:
        evs2 = sse_events(r, lambda ev: int(ev[-1][0]) >= ids[-1], quiet=0.7, limit=8)
    finally:
        c.close()
    got = [int(e[0]) for e in evs2]
    check(got == want, "replay after %d gives exactly %s" % (n, want), got)
    check([e[2] for e in evs2] == [e[2] for e in evs if int(e[0]) > n],
          "replayed bodies equal the live ones", evs2)

    # a new stream of s2 sees s2's task, not s1's
    c, r = open_stream(D, "s2", last_id=0)
    try:
        evs3 = sse_events(r, lambda ev: any(e[1] == "exec_finished" for e in ev), quiet=0.5,
                          limit=5)
    finally:
        c.close()
    check(evs3 and all(e[2]["sessionId"] == "s2" for e in evs3), "s2 stream is s2's", evs3)
    check(any(e[2]["data"].get("taskId") == other for e in evs3), "s2's task there", evs3)
    check(not any(e[2]["data"].get("taskId") == tid for e in evs3), "s1's task absent", evs3)



@case
def stream_resume_mid_task_loses_nothing():
    script = "for i in $(seq 1 40); do echo line-$i; sleep 0.02; done"
    c, r = open_stream(D, "s3")
    try:
        tid = D.submit({"command": ["/bin/sh", "-c", script], "sessionID": "s3"})
        first = sse_events(r, lambda ev: sum(e[1] == "tool_call_output" for e in ev) >= 2,
                           quiet=0.0, limit=5)
    finally:
        c.close()  # disconnect while the task still runs
    check(first, "some events before the disconnect", first)
    last = int(first[-1][0])
    c, r = open_stream(D, "s3", last_id=last)
    try:
        rest = sse_events(r, lambda ev: any(e[1] == "exec_finished" for e in ev), quiet=0.5,
                          limit=10)
    finally:
        c.close()
    ids = [int(e[0]) for e in first + rest]
    check(ids == list(range(ids[0], ids[0] + len(ids))), "contiguous ids, no gap, no repeat",
          ids)
    out = "".join(e[2]["data"]["data"] for e in first + rest
                  if e[1] == "tool_call_output" and e[2]["data"].get("taskId") == tid)
    want = "".join("line-%d\n" % i for i in range(1, 41))
    check(out == want, "the whole output, once, in order", out)
    check(D.wait_status(tid, FINAL)["status"] == "succeeded", "task succeeded")



def acme_task_ids():
    st, b, _ = D.req("GET", "/runtime/tasks?limit=200", token=ACME_TOKEN)
    return {t["id"] for t in b["tasks"]} if st == 200 else set()


@case
def tenant_token_cannot_read_other_tenants_stream():
    """A tenant token sees nothing of another tenant's sessions."""
    bad = []
    tid = D.submit({"command": ["echo", "globex-secret"], "sessionID": "gx-session"},
                   headers={"X-Tenant-Code": "globex"})
    D.wait_status(tid, FINAL)
    for session in ("gx-session", "default"):
        c, r = open_stream(D, session, last_id=0, token=ACME_TOKEN)
        try:
            if r.status != 200:
                if r.status not in (403, 404):
                    bad.append("stream %s: status %d" % (session, r.status))
                continue
            evs = sse_events(r, lambda ev: True, quiet=0.7, limit=3)
        finally:
            c.close()
        leaked = [e for e in evs if e[2]["data"].get("taskId") and
                  e[2]["data"].get("taskId") not in acme_task_ids()]
        if leaked:
            bad.append("GET /runtime/stream?sessionID=%s (Last-Event-ID: 0) with acme's token: "
                       "200 and %d events of other tenants' tasks, e.g. %s"
                       % (session, len(leaked), json.dumps([e[2] for e in leaked[-2:]])))
    # Sessions are per tenant: acme naming "gx-session" acts on a session of its
    # own by that name; globex's stream must not see it.
    st, b, _ = D.req("POST", "/runtime/stop", {"sessionID": "gx-session"}, token=ACME_TOKEN,
                     headers={"X-Tenant-Code": "acme"})
    c, r = open_stream(D, "gx-session", last_id=0, tenant="globex")
    try:
        evs = sse_events(r, lambda ev: True, quiet=0.7, limit=50) if r.status == 200 else []
    finally:
        c.close()
    if r.status != 200:
        bad.append("globex's own stream: status %d" % r.status)
    if any(e[1] == "runtime_stopped" for e in evs):
        bad.append("POST /runtime/stop with acme's token emitted into globex's session: %s"
                   % json.dumps(b))
    if not any(e[2]["data"].get("taskId") == tid for e in evs):
        bad.append("globex's own stream lacks its task's events")
    check(not bad, "tenant confinement of sessions:\n  " + "\n  ".join(bad))


# ---- the queue ----

@case
def queue_share_gives_429_per_tenant():
    q = Daemon(os.path.join(TMP, "queue-state"), config=QUEUE_CFG,
               extra=["--max-concurrent", "1"]).start()
    try:
        a = {"X-Tenant-Code": "busy"}
        running = q.submit({"command": ["sleep", "30"]}, headers=a)
        q.wait_status(running, {"running"})
        queued = [q.submit({"command": ["sleep", "30"]}, headers=a) for _ in range(2)]
        for tid in queued:
            st, b, _ = q.task(tid)
            check(b["status"] == "pending", "queued behind max-concurrent 1", b)
        st, b, _ = q.req("POST", "/runtime/tasks", {"command": ["sleep", "30"]}, headers=a)
        check(st == 429, "over busy's share of the queue: 429", (st, b))
        st, b, _ = q.req("POST", "/runtime/exec", {"command": ["true"]}, headers=a)
        check(st == 429, "exec over the share: 429 as well", (st, b))
        st, b, _ = q.req("POST", "/runtime/tasks", {"command": ["true"]},
                         headers={"X-Tenant-Code": "calm"})
        check(st == 202, "another tenant still gets 202", (st, b))
        calm = b["id"]
        # Fair between tenants: busy's first queued task started before calm's
        # arrived, so it goes first; calm's goes before busy's second.
        st, b, _ = q.req("POST", "/runtime/tasks/%s/cancel" % running)
        check(st == 200, "cancel the running one", (st, b))
        q.wait_status(queued[0], {"running"}, timeout=10)
        check(q.task(calm)[1]["status"] == "pending" and
              q.task(queued[1])[1]["status"] == "pending", "one running at a time")
        st, b, _ = q.req("POST", "/runtime/tasks/%s/cancel" % queued[0])
        check(st == 200, "cancel busy's first queued task", (st, b))
        t = q.wait_status(calm, FINAL, timeout=10)
        check(t["status"] == "succeeded", "calm's task ran before busy's second", t)
        t2 = q.wait_status(queued[1], {"running"}, timeout=10)
        check(t2["startedAt"] >= t["endedAt"], "busy's second after calm's", (t, t2))
        st, b, _ = q.req("POST", "/runtime/tasks", {"command": ["true"]}, headers=a)
        check(st == 202, "busy has room again", (st, b))
        for tid in [queued[1], b["id"]]:
            q.req("POST", "/runtime/tasks/%s/cancel" % tid)
            t = q.wait_status(tid, FINAL, timeout=10)
            check(t["status"] in ("canceled", "succeeded"), "ended", t)
    finally:
        rc = q.stop()
    check(rc == 0, "queue daemon stopped cleanly (%r)" % rc, q.output())


@case
def log_lines_follow_the_log_level():
    d = Daemon(os.path.join(TMP, "log-state"), extra=["--log-level", "debug"]).start()
    try:
        st, b, _ = d.req("POST", "/runtime/exec", {"command": ["/bin/true"]})
        check(st == 200 and b["exitCode"] == 0, "ran", b)
        tid = b["taskId"]
        st, _, _ = d.req("GET", "/runtime/%0aforged%20line")
        check(st == 404, "unknown route", st)
        log = d.wait_output(lambda text: "status=404" in text)
        check(re.search(r"^\S+Z debug http POST /runtime/exec status=200 ms=\S+ peer=127\.0\.0\.1:",
                        log, re.M), "debug: the request line", log)
        check(re.search(r"^\S+Z info task started id=%s tenant=default " % tid, log, re.M),
              "info: task started", log)
        check(re.search(r"^\S+Z info task ended id=%s .*status=succeeded outcome=exited exit=0 "
                        % tid, log, re.M), "info: task ended", log)
        check("/runtime/\\x0aforged\\x20line status=404" in log and
              not re.search(r"^forged", log, re.M), "a client's path cannot split a line", log)
    finally:
        d.stop()
    d = Daemon(os.path.join(TMP, "log-state"), extra=["--log-level", "warn"]).start()
    try:
        st, b, _ = d.req("POST", "/runtime/exec", {"command": ["/bin/true"]})
        check(st == 200, "ran", b)
        log = d.output(whole=True)
        check(" debug " not in log and " info " not in log, "warn: no info or debug lines", log)
    finally:
        d.stop()


# ---- crash recovery and graceful stop ----

@case
def kill9_then_restart_marks_interrupted():
    state = os.path.join(TMP, "crash-state")
    d = Daemon(state).start()
    h = {"X-Tenant-Code": "crash"}
    uid = None
    try:
        tid = d.submit({"command": ["sleep", "60"]}, headers=h)
        d.wait_status(tid, {"running"})
        uid = task_uids(d, workspace_uid(state, "crash", "default"))
        deadline = time.monotonic() + 5
        while not host_sleepers("60", uid) and time.monotonic() < deadline:
            time.sleep(0.05)
        check(host_sleepers("60", uid), "the task runs as the clone's task", host_sleepers("60"))
        cgs = task_cgroups(host_sleepers("60", uid)[0][0])
        check(cgs or not uses_cgroups(d), "the task has cgroups of its own")
        # kill early in a second, so that a restart within it shows whether the
        # recorded end keeps its milliseconds
        while not 0.1 < time.time() % 1 < 0.3:
            time.sleep(0.01)
        t_kill = time.time()
        d.kill9()
        d.start()
        t = d.wait_status(tid, FINAL, timeout=5)
        check(t["status"] == "interrupted", "interrupted after kill -9", t)
        deadline = time.monotonic() + 3
        while host_sleepers("60", uid) and time.monotonic() < deadline:
            time.sleep(0.05)
        check(host_sleepers("60", uid) == [], "no sandbox process left", host_sleepers("60"))
        check(not [c for c in cgs if os.path.exists(c)], "the task's cgroups removed", cgs)
        st, b, _ = d.req("POST", "/runtime/exec", {"command": ["echo", "alive"]}, headers=h)
        check(st == 200 and b["stdout"] == "alive\n", "the restarted daemon runs tasks", (st, b))
        killed_at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t_kill)) + \
            ".%03dZ" % (int(t_kill * 1000) % 1000)
        check(t["endedAt"] and t["endedAt"] >= t["startedAt"] and t["endedAt"] >= killed_at,
              "the interrupted task's endedAt (%s) is before its startedAt (%s) or the kill "
              "(%s)" % (t["endedAt"], t["startedAt"], killed_at), t)
    finally:
        d.stop()
        for pid, _, _ in (host_sleepers("60", uid) if uid else []):
            os.kill(pid, signal.SIGKILL)  # leave nothing of ours behind, even on failure


@case
def sigterm_cancels_running_task():
    state = os.path.join(TMP, "term-state")
    d = Daemon(state, extra=["--max-concurrent", "2"]).start()
    h = {"X-Tenant-Code": "term"}
    uid = None
    try:
        tid = d.submit({"command": ["sleep", "45"]}, headers=h)
        d.wait_status(tid, {"running"})
        uid = task_uids(d, workspace_uid(state, "term", "default"))
        # a synchronous exec in flight, and a task waiting in the queue
        sync = {}

        def exec_call():
            try:
                sync["answer"] = d.req("POST", "/runtime/exec", {"command": ["sleep", "45"]},
                                       headers=h, timeout=15)
            except Exception as e:  # noqa: BLE001 - a closed connection is an answer too
                sync["error"] = repr(e)
        th = threading.Thread(target=exec_call, daemon=True)
        th.start()
        deadline = time.monotonic() + 5
        while len(host_sleepers("45", uid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        check(len(host_sleepers("45", uid)) == 2, "two tasks running", host_sleepers("45"))
        queued = d.submit({"command": ["sleep", "45"]}, headers=h)
        check(d.task(queued)[1]["status"] == "pending", "third task queued")
        t0 = time.monotonic()
        rc = d.stop(timeout=10)
        check(time.monotonic() - t0 < 10, "stopped promptly")
        check(rc == 0, "exit status 0 on SIGTERM (%r)" % rc, d.output())
        th.join(10)
        check(not th.is_alive(), "the waiting exec client was released", sync)
        check(settles(lambda: host_sleepers("45", uid) == []), "the tasks' processes are gone",
              host_sleepers("45"))
        d.start()
        t = d.task(tid)[1]
        check(t["status"] == "canceled", "recorded canceled", t)
        check("stopped" in t["error"], "the error says the daemon stopped", t)
        check(t["endedAt"] and t["endedAt"] >= t["startedAt"], "endedAt after startedAt", t)
        t = d.task(queued)[1]
        check(t["status"] == "canceled", "the queued task recorded canceled", t)
        st, b, _ = d.req("GET", "/runtime/tasks?status=running", headers=h)
        check(st == 200 and b["tasks"] == [], "nothing left running", (st, b))
        st, b, _ = d.req("GET", "/runtime/tasks?status=pending", headers=h)
        check(st == 200 and b["tasks"] == [], "nothing left pending", (st, b))
        # The original: a cancelled command has exit code 124, as an API cancel gives.
        bad = []
        ans = sync.get("answer")
        if ans and ans[0] == 200 and ans[1].get("exitCode") != 124:
            bad.append("the in-flight POST /runtime/exec was answered %s" % json.dumps(ans[1]))
        if not (t.get("result") or {}).get("exitCode") == 124:
            bad.append("GET /runtime/tasks/%s after the restart: result %s"
                       % (tid, json.dumps(d.task(tid)[1].get("result"))))
        check(not bad, "tasks canceled by SIGTERM carry exit code 124:\n  " + "\n  ".join(bad))
    finally:
        d.stop()
        for pid, _, _ in (host_sleepers("45", uid) if uid else []):
            os.kill(pid, signal.SIGKILL)


# ---- end ----

rc = MAIN.stop()
check_ok = rc == 0
if not check_ok:
    print("FAIL main daemon exit status %r: %s" % (rc, MAIN.output()))
    S.failed += 1
S.finish()
