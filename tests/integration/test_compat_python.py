"""The original's fourteen SDK calls (and healthz) against a real daemon,
through a strict Python client (tests/compat/python/strict_client.py) that
builds every answer with Type(**json): one key more or less than the
original's fails the call. Also the original's runtime state machine as its
clients see it: created until the first start, stop refuses tasks (400
"runtime stopped"), the stream's events in the original's order and body."""
import json
import os
import queue
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "compat", "python"))
from sbxtest import ServeDaemon, Suite, check  # noqa: E402
import strict_client as sc  # noqa: E402

# The skills routes are built on another branch. Until they are merged a
# route the daemon does not have (the router's own 404, "no route for") is
# accepted for the four skill calls; set this to False to require them.
SKILL_ROUTES_MAY_BE_ABSENT = False

S = Suite("compat_python")
TOKEN = "compat-" + "0123456789abcdef012345678"
TMP = tempfile.mkdtemp(prefix="sbx-compat-py-")


Daemon = ServeDaemon


# The builtin skills as the install ships them (skills/builtin: ur-api).
CFG = os.path.join(TMP, "cfg.yaml")
with open(CFG, "w") as f:
    f.write("skills:\n  builtin_root: %s\n" % os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "skills", "builtin"))
D = Daemon(os.path.join(TMP, "state"), TOKEN, config=CFG).start()
C = sc.StrictClient("http://127.0.0.1:%d" % D.port, token=TOKEN)


def wait_final(tid, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        t = C.get_task(tid)
        if t.status in ("succeeded", "failed", "canceled") or time.monotonic() > deadline:
            return t
        time.sleep(0.05)


@S.case
def health_ready_status_before_start():
    check(C.healthz() == sc.HealthResponse(ok=True), "healthz")
    r = C.readyz()
    check(r.ok is True and r.status == "created", "readyz created until the first start", r)
    st = C.get_status()
    check(st.status == "created" and st.runtimeId and st.cloneId and st.workspace,
          "status payload", st)


@S.case
def start_exec_stop_state_machine():
    r = C.start_runtime()
    check(r.ok and r.status.status == "ready" and r.status.startedAt, "start: ready", r)
    check(C.readyz().status == "ready", "readyz ready")
    res = C.exec(["/bin/sh", "-c", "echo out; echo err >&2; exit 3"])
    check(res.exitCode == 3 and res.stdout == "out\n" and res.stderr == "err\n"
          and res.startedAt and res.endedAt, "exec result", res)
    res = C.exec(["/bin/sh", "-c", 'echo "$GREETING"'], env={"GREETING": "hello"},
                 timeout_seconds=10)
    check(res.stdout == "hello\n", "exec env", res)
    res = C.exec(["sleep", "30"], timeout_seconds=1)
    check(res.exitCode == 124, "a timed-out command: 124", res)


@S.case
def tasks_submit_get_list_cancel():
    t = C.submit_task(["/bin/sh", "-c", "echo task-out"])
    check(t.status == "pending" and t.result is None and t.backend == "sandbox"
          and t.skill == "", "a new task is pending", t)
    done = wait_final(t.id)
    check(done.status == "succeeded" and done.result.exitCode == 0
          and done.result.stdout == "task-out\n", "get: finished with its result", done)
    long = C.submit_task(["sleep", "60"])
    deadline = time.monotonic() + 10
    while C.get_task(long.id).status != "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    c = C.cancel_task(long.id)
    check(c.id == long.id and c.status in ("running", "canceled"), "cancel answers the task", c)
    c = wait_final(long.id)
    check(c.status == "canceled" and c.result.exitCode == 124, "canceled: 124", c)
    tasks = C.list_tasks()
    ids = [x.id for x in tasks]
    check(t.id in ids and long.id in ids, "the list holds both", ids)
    mine = [x for x in tasks if x.id == t.id][0]
    check(mine.result and mine.result.stdout == "task-out\n", "listed with its result", mine)
    try:
        C.get_task("no-such-task")
        check(False, "unknown task: 404")
    except sc.APIError as e:
        check(e.status == 404, "unknown task: 404", e)


@S.case
def stream_events_in_the_original_body_and_order():
    sub = C.subscribe_events()
    got = queue.Queue()

    def reader():
        try:
            for ev in sub.events():
                got.put(ev)
        except Exception as e:  # noqa: BLE001 - handed to the test thread
            got.put(e)
    threading.Thread(target=reader, daemon=True).start()
    try:
        t = C.submit_task(["/bin/sh", "-c", "echo streamed"])
        seen = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                ev = got.get(timeout=1)
            except queue.Empty:
                continue
            if isinstance(ev, Exception):
                raise ev
            if (ev.data or {}).get("taskId") == t.id:
                seen.append(ev)
            if any(e.type == "exec_finished" for e in seen):
                break
        types = [e.type for e in seen if e.type in ("exec_started", "task_running",
                                                     "exec_finished")]
        check(types == ["exec_started", "task_running", "exec_finished"], "order", seen)
        check(seen[0].data["status"] == "pending", "exec_started at submit: pending", seen[0])
        fin = [e for e in seen if e.type == "exec_finished"][0]
        check(fin.data["exitCode"] == 0 and fin.data["status"] == "succeeded"
              and set(fin.data) >= {"taskId", "command", "status", "backend", "skill",
                                    "skillSource", "skillTrustLevel", "exitCode", "error"},
              "exec_finished data", fin)
        # A subscriber without Last-Event-ID got live events only: nothing of
        # the tasks run before it subscribed.
        check(all((e.data or {}).get("taskId") == t.id for e in seen if e.type in types),
              "live only", seen)
        # Stop and start are told on this stream (no sessionID).
        C.stop_runtime()
        C.start_runtime()
        kinds = []
        deadline = time.monotonic() + 10
        while len(kinds) < 2 and time.monotonic() < deadline:
            try:
                ev = got.get(timeout=1)
            except queue.Empty:
                continue
            if isinstance(ev, Exception):
                raise ev
            if ev.type in ("runtime_stopped", "runtime_started"):
                kinds.append(ev)
        check([e.type for e in kinds] == ["runtime_stopped", "runtime_started"],
              "runtime events on the stream", kinds)
        check(kinds[1].data.get("runtimeId") and kinds[1].data.get("cloneId"),
              "runtime_started {runtimeId, cloneId}", kinds[1])
    finally:
        sub.close()


@S.case
def stop_cancels_and_refuses_until_start():
    long = C.submit_task(["sleep", "60"])
    r = C.stop_runtime()
    check(r.ok and r.status.status == "stopped", "stop: stopped", r)
    check(wait_final(long.id).status == "canceled", "stop canceled the running task")
    for call in (lambda: C.exec(["true"]), lambda: C.submit_task(["true"])):
        try:
            call()
            check(False, "refused while stopped")
        except sc.APIError as e:
            check(e.status == 400 and "runtime stopped" in e.body, "400 runtime stopped", e)
    check(C.readyz().status == "stopped", "readyz stopped")
    check(C.start_runtime().status.status == "ready", "started again")
    check(C.exec(["true"]).exitCode == 0, "runs again after the start")


@S.case
def control_directory_with_main_pid():
    # As the original: at a start, <control>/main.pid (0444) holding the
    # daemon's pid, the directory root's and 0555; never inside a sandbox.
    C.start_runtime()
    d = os.path.join(D.state, "control", "default", "default")
    st = os.stat(d)
    check(st.st_uid == 0 and st.st_mode & 0o7777 == 0o555, "root's 0555 directory", oct(st.st_mode))
    pid = os.path.join(d, "main.pid")
    st = os.stat(pid)
    check(st.st_uid == 0 and st.st_mode & 0o7777 == 0o444, "main.pid 0444", oct(st.st_mode))
    with open(pid) as f:
        check(int(f.read()) == D.proc.pid, "the daemon's pid")
    res = C.exec(["/bin/sh", "-c", "ls %s 2>&1; echo $?" % d])
    check(res.stdout.strip().endswith("2") or "No such file" in res.stdout,
          "not visible inside a sandbox", res)


@S.case
def the_switch_header_or_query():
    """Our keys only with X-Sandbox-Extended: 1 or ?extended=1."""
    plain = set(sc.StatusPayload.__dataclass_fields__)
    st, b, _ = D.req("GET", "/runtime/status", token=TOKEN)
    check(st == 200 and set(b) == plain, "no switch: exactly the original's keys", b)
    for path, headers in (("/runtime/status", {"X-Sandbox-Extended": "1"}),
                          ("/runtime/status?extended=1", None)):
        st, b, _ = D.req("GET", path, token=TOKEN, headers=headers)
        check(st == 200 and set(b) > plain and "running" in b and "totals" in b,
              "%s %s: ours too" % (path, headers), b)
    st, b, _ = D.req("GET", "/runtime/status", token=TOKEN, headers={"X-Sandbox-Extended": "0"})
    check(set(b) == plain, "only '1' switches", b)
    st, b, _ = D.req("GET", "/runtime/tasks?extended=1", token=TOKEN)
    check(isinstance(b, dict) and "tasks" in b and "nextCursor" in b, "our page object", b)
    # The stream's body with ?extended=1 (an EventSource cannot set headers).
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", D.port, timeout=20)
    c.request("GET", "/runtime/stream?extended=1", headers={"Authorization": "Bearer " + TOKEN,
                                                            "Last-Event-ID": "0"})
    r = c.getresponse()
    buf = b""
    while b"\ndata: " not in buf:
        buf += r.read1(65536)
    c.sock.shutdown(2)
    c.close()
    line = buf.split(b"\ndata: ", 1)[1].split(b"\n", 1)[0]
    body = json.loads(line)
    check({"id", "type", "time", "sessionId", "data"} <= set(body), "our event body", body)


@S.case
def skill_calls():
    """The four skill calls; a route not there yet is accepted only while
    SKILL_ROUTES_MAY_BE_ABSENT."""
    absent = []

    def attempt(name, fn):
        try:
            return fn()
        except sc.RouteAbsent:
            check(SKILL_ROUTES_MAY_BE_ABSENT, "%s: the route is absent" % name)
            absent.append(name)
            return None
    skills = attempt("list_skills", C.list_skills)
    reloaded = attempt("reload_skills", C.reload_skills)
    if reloaded is not None:
        check(reloaded.ok is True, "reload ok", reloaded)
    if skills:
        one = attempt("get_skill", lambda: C.get_skill(skills[0].name))
        check(one is None or one.name == skills[0].name, "get_skill", one)
    else:
        attempt("get_skill", lambda: C.get_skill("ur-api"))
    try:
        attempt("activate_skill", lambda: C.activate_skill("no-such-skill", "v1"))
        check("activate_skill" in absent, "activating an unknown skill is refused")
    except sc.APIError as e:
        check(e.status == 400, "activating an unknown skill: 400 (the original's)", e)
    print("skill routes absent (accepted for now): %s" % (absent or "none"))


D.stop()
shutil.rmtree(TMP, ignore_errors=True)
S.finish()
