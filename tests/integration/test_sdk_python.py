"""The Python SDK (sdk/python) against a real daemon: exec and code, tasks
with paging and cancel, files (a multi-MB file streamed both ways), sessions
and their network, the event stream resumed after connections dropped
mid-frame, skills (catalog, activation of a shared skill's version, skill
tasks), agent turns of tool calls followed to their done and canceled, errors
as exceptions carrying the API's code, and the package installed with pip
from its folder."""
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.join(HERE, "..", "..", "sdk", "python")
sys.path.insert(0, HERE)
sys.path.insert(0, SDK)  # the PYTHONPATH way: no install needed
from sbxtest import Suite, check  # noqa: E402
from sdkutil import (ACME_TOKEN, SHARED_SKILL, TOKEN, CutRelay, SdkDaemon,  # noqa: E402
                     scratch)

import sandbox_sdk as sdk  # noqa: E402
from sandbox_sdk import Sandbox  # noqa: E402

S = Suite("sdk-python")
TMP, _daemons = scratch("sbx-sdk-py-")
D = SdkDaemon(TMP, registry=_daemons)
try:
    D.start()
except Exception as e:  # noqa: BLE001
    print("FAIL start: %s" % e)
    sys.exit(1)
SBX = Sandbox(D.url, TOKEN, timeout=30)
ACME = Sandbox(D.url, ACME_TOKEN, tenant="acme", clone_id="py")


def raises(exc_type, fn, *a, **kw):
    try:
        fn(*a, **kw)
    except exc_type as e:
        return e
    except Exception as e:  # noqa: BLE001
        raise AssertionError("expected %s, got %r" % (exc_type.__name__, e))
    raise AssertionError("expected %s, nothing raised" % exc_type.__name__)


@S.case
def exec_argv_shell_stdin_env():
    r = SBX.exec(["python3", "-c", "print(6*7)"])
    check(isinstance(r, sdk.ExecResult) and r.exit_code == 0 and r.stdout == "42\n", "argv", r)
    # the extended answer (the SDK always asks for it): task id, status, report
    check(r.task_id and r.status == "succeeded" and r.report and r.report.outcome == "exited",
          "extended keys", r.raw)
    check(r.report.limits and r.report.limits.pids, "the report's limits typed", r.report)
    t = SBX.tasks.get(r.task_id)
    check(t.id == r.task_id and t.result and t.result.stdout == "42\n", "exec made a task", t)
    r = SBX.exec("echo $GREETING; cat; exit 3", env={"GREETING": "hi"}, stdin="in\n")
    check(r.exit_code == 3 and r.stdout == "hi\nin\n" and not r.ok, "shell string, env, stdin",
          r)
    r = ACME.exec(["/bin/sh", "-c", "pwd"])
    check(r.exit_code == 0 and r.stdout == "/workspace\n", "a tenant token for its clone", r)


@S.case
def run_code_languages():
    for lang, code in (("python", "import sys; print(6*7); print('e', file=sys.stderr)"),
                       ("node", "console.log(6*7); console.error('e')"),
                       ("shell", "echo $((6*7)); echo e >&2")):
        r = SBX.run_code(code, language=lang)
        check(r.exit_code == 0 and r.stdout == "42\n" and r.stderr == "e\n", lang, r)
    r = SBX.run_code("import time; time.sleep(5)", timeout_seconds=0.5)
    check(r.status == "timeout" and r.exit_code == 124, "timeoutSeconds", r)


@S.case
def tasks_submit_list_paging_get_cancel():
    c = SBX.for_clone(tenant="pager", clone_id="c1")
    ids = [c.tasks.submit(["/bin/sh", "-c", "echo %d" % i]).id for i in range(7)]
    check(len(set(ids)) == 7, "seven tasks", ids)
    done = [c.tasks.wait(i, timeout=60) for i in ids]
    check(all(t.status == "succeeded" and t.result.stdout == "%d\n" % n
              for n, t in enumerate(done)), "each ran", done)
    page = c.tasks.list(limit=3)
    check(isinstance(page, sdk.TaskPage) and len(page.tasks) == 3 and page.next_cursor,
          "a page of 3 with a cursor", page)
    seen, cursor, pages = [], None, 0
    while True:
        page = c.tasks.list(limit=3, cursor=cursor)
        seen += [t.id for t in page.tasks]
        pages += 1
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    check(sorted(seen) == sorted(ids) and len(seen) == 7 and pages >= 3,
          "cursor paging gives each task once", (seen, ids, pages))
    check([t.id for t in c.tasks.iter(page_size=2)] == seen, "iter follows the cursors")
    check(seen == list(reversed(ids)), "newest first", (seen, ids))
    check(all(t.tenant_code == "pager" for t in c.tasks.iter()), "the clone's tasks only")
    failed = c.tasks.submit("exit 1")
    c.tasks.wait(failed.id, timeout=60)
    check([t.id for t in c.tasks.list(status="failed").tasks] == [failed.id], "status filter")
    long = c.tasks.submit(["sleep", "30"])
    check(long.status in ("pending", "running") and not long.done, "submitted at once", long)
    got = c.tasks.cancel(long.id)
    check(got.id == long.id, "cancel answers the task", got)
    end = c.tasks.wait(long.id, timeout=30)
    check(end.status == "canceled", "canceled", end)
    e = raises(sdk.Conflict, c.tasks.cancel, long.id)
    check(e.status == 409 and e.code == "conflict", "cancel of an ended task: 409", vars(e))
    e = raises(sdk.NotFound, c.tasks.get, "nosuchtask")
    check(e.status == 404 and e.code == "not_found" and "nosuchtask" in e.message,
          "unknown task: 404", vars(e))
    slow = c.tasks.submit(["sleep", "5"])
    e = raises(sdk.TaskTimeout, c.tasks.wait, slow.id, timeout=0.3)
    c.tasks.cancel(slow.id)


@S.case
def files_round_trip_streamed():
    f = SBX.for_clone(tenant="files", clone_id="c1")
    check(f.files.put("hello.txt", "hé\n").size == 4, "text put")
    check(f.files.get("hello.txt") == "hé\n".encode(), "text get")
    check(f.files.get_text("hello.txt") == "hé\n", "get_text")
    f.exec("mkdir -p data")
    # 12 MiB from a file object: streamed with its length...
    blob = os.urandom(12 << 20)
    src = os.path.join(TMP, "blob.bin")
    with open(src, "wb") as out:
        out.write(blob)
    with open(src, "rb") as fobj:
        up = f.files.put("data/blob.bin", fobj)
    check(up.size == len(blob), "12 MiB uploaded", up)
    r = f.exec(["sha256sum", "data/blob.bin"])
    check(r.stdout.split()[0] == hashlib.sha256(blob).hexdigest(), "same bytes inside", r)
    # ...and from a stream of unknown length (chunked)
    class Pipe(io.RawIOBase):
        def __init__(self, data):
            self.buf = io.BytesIO(data)

        def readable(self):
            return True

        def readinto(self, b):
            n = self.buf.readinto(memoryview(b)[:50000])
            return n
    part = blob[: 3 << 20]
    check(f.files.put("data/chunked.bin", Pipe(part)).size == len(part), "chunked upload")
    dest = os.path.join(TMP, "back.bin")
    n = f.files.download("data/blob.bin", dest)
    with open(dest, "rb") as got:
        check(n == len(blob) and got.read() == blob, "12 MiB downloaded to a file")
    check(f.files.get("data/chunked.bin") == part, "chunked upload read back")
    f.files.put_file("data/copy.bin", src)
    ls = f.files.list("data")
    names = {e.name: e for e in ls.entries}
    check(isinstance(ls, sdk.Listing) and set(names) == {"blob.bin", "chunked.bin", "copy.bin"},
          "listing", ls)
    check(names["blob.bin"].type == "file" and names["blob.bin"].size == len(blob), "entry", ls)
    check("hello.txt" in {e.name for e in f.files.list().entries}, "the workspace's root")
    e = raises(sdk.SandboxError, f.files.get, "data")
    f.files.delete("data/copy.bin")
    e = raises(sdk.NotFound, f.files.get, "data/copy.bin")
    check(e.code == "not_found", "deleted", vars(e))
    e = raises(sdk.BadRequest, f.files.get, "../etc/passwd")
    check(e.status == 400 and e.code == "bad_request", "a path outside: 400", vars(e))
    e = raises(sdk.TooLarge, f.files.put, "big.bin", b"\0" * (65 << 20))
    check(e.status == 413 and e.code == "too_large", "over the quota: 413", vars(e))


@S.case
def sessions_exec_network_stop():
    with SBX.session("s1") as s:
        check(s.id == "s1", "named session", s)
        r = s.exec("echo kept > /tmp/note; sleep 100 >/dev/null 2>&1 & echo started")
        check(r.exit_code == 0, "first task of the session", r)
        r = s.exec(["cat", "/tmp/note"])
        check(r.stdout == "kept\n", "/tmp persists within the session", r)
        t = s.submit(["cat", "/tmp/note"])
        check(SBX.tasks.wait(t.id, timeout=30).result.stdout == "kept\n", "a submitted task too")
    r = SBX.exec(["sh", "-c", "cat /tmp/note 2>&1 || echo gone"])
    check("gone" in r.stdout, "a one-shot sandbox does not see it", r)
    st = SBX.sessions.start()
    check(st.ok and st.status == "ready" and st.session_id, "a generated session id", st)
    # stopping a session leaves the clone's runtime ready; the session is gone
    stopped = SBX.sessions.stop(st.session_id)
    check(stopped.ok and stopped.runtime and stopped.runtime.raw.get("sessionLive") is False,
          "stopped", stopped)
    # network: a name answered before the change is refused after it
    probe = "getent hosts svc.test >/dev/null && echo yes || echo no"
    with SBX.session("web") as s:
        check(s.exec(probe).stdout == "yes\n", "answered before", s)
        e = raises(sdk.BadRequest, s.network, allow=["bad..x"])
        check("bad..x" in e.message, "a bad rule named", vars(e))
        st = s.network(deny=["svc.test"])
        check(st.ok and st.session_id == "web", "changed", st)
        check(s.exec(probe).stdout == "no\n", "refused after the change")
    e = raises(sdk.NotFound, SBX.sessions.network, "nosuch", deny=["x.test"])
    check(e.status == 404, "unknown session", vars(e))


def stream_until_finished(it, task_id):
    events = []
    for ev in it:
        events.append(ev)
        if ev.type == "exec_finished" and ev.data.get("taskId") == task_id:
            break
    return events


@S.case
def stream_resumes_after_drops_losing_nothing():
    relay = CutRelay(D.port, after=700, cuts=4)
    try:
        via = Sandbox(relay.url, TOKEN)
        script = "for i in $(seq 1 120); do echo line-$i; sleep 0.01; done"
        it = via.stream("sx", last_event_id=0, retry_delay=0.05)
        tid = SBX.tasks.submit(script, session="sx").id
        got = stream_until_finished(it, tid)
        it.close()
        check(relay.cut_count == 4, "the relay dropped 4 streams mid-frame",
              (relay.cut_count, relay.stream_opens))
        ids = [e.id for e in got]
        check(ids == sorted(set(ids)), "ids increasing, none twice", ids)
        # each reopening asked for what followed the last whole event it had
        check(relay.resumed_from[0] == 0 and len(relay.resumed_from) == 5 and
              all(r in ids for r in relay.resumed_from[1:]) and
              relay.resumed_from[1:] == sorted(set(relay.resumed_from[1:])),
              "resumed by Last-Event-ID", (relay.resumed_from, ids))
        out = "".join(e.data["data"] for e in got
                      if e.type == "tool_call_output" and e.data.get("taskId") == tid)
        want = "".join("line-%d\n" % i for i in range(1, 121))
        check(out == want, "every output byte once", out)
        # the same events as an uninterrupted replay, straight from the daemon
        direct = stream_until_finished(SBX.stream("sx", last_event_id=0), tid)
        check([(e.id, e.type, e.data) for e in direct] == [(e.id, e.type, e.data) for e in got],
              "identical to a replay without drops", (len(direct), len(got)))
        check(all(isinstance(e, sdk.Event) and e.session_id == "sx" and e.time for e in got),
              "typed events", got[:2])
        # a live stream (no replay) cut by hand while a task runs
        relay.cuts_left = 0
        it = via.stream("sy", retry_delay=0.05)
        tid = SBX.tasks.submit("sleep 0.5; for i in $(seq 1 40); do echo n-$i; sleep 0.05; done",
                               session="sy").id
        first = next(it)
        seen = [first]
        for ev in it:
            seen.append(ev)
            if ev.type == "tool_call_output" and "n-5\n" in ev.data.get("data", ""):
                relay.cut_now()
                break
        seen += stream_until_finished(it, tid)
        it.close()
        out = "".join(e.data["data"] for e in seen if e.type == "tool_call_output")
        check(out == "".join("n-%d\n" % i for i in range(1, 41)), "nothing lost across the cut",
              out)
        check(len({e.id for e in seen}) == len(seen), "nothing twice")
        check(relay.heads and all(re.search(r"(?im)^X-Sandbox-Extended: 1\r?$", h)
                                  for h in relay.heads),
              "every request asks for the extended answers", relay.heads)
    finally:
        relay.close()
    # no reconnecting: a drop ends the generator with ConnectionFailed
    e = raises(sdk.ConnectionFailed, lambda: next(Sandbox("http://127.0.0.1:1", TOKEN).stream(
        "sz", reconnect=False)))
    e = raises(sdk.ConnectionFailed, lambda: next(Sandbox("http://127.0.0.1:1", TOKEN).stream(
        "sz", max_retries=2, retry_delay=0.01)))


@S.case
def errors_carry_the_api_code():
    bad = Sandbox(D.url, "x" * 32)
    e = raises(sdk.Unauthorized, bad.exec, ["true"])
    check(e.status == 401 and e.code == "unauthorized" and e.message, "bad token", vars(e))
    check(isinstance(e, sdk.SandboxError) and "401" in str(e), "one base class", str(e))
    e = raises(sdk.BadRequest, SBX.run_code, "x", language="cobol")
    check(e.status == 400 and e.code == "bad_request" and "cobol" in e.message, "bad input",
          vars(e))
    e = raises(sdk.BadRequest, SBX.exec, ["true"], memory_mb=1 << 20)
    check("memoryMB" in e.message, "the message names the field", vars(e))
    e = raises(sdk.Forbidden, Sandbox(D.url, ACME_TOKEN, tenant="other").exec, ["true"])
    check(e.status == 403 and e.code == "forbidden", "another tenant", vars(e))
    e = raises(ValueError, SBX.exec, [])
    e = raises(sdk.ConnectionFailed, Sandbox("http://127.0.0.1:1", TOKEN).exec, ["true"])
    check(e.status == 0, "no daemon: ConnectionFailed", vars(e))


@S.case
def skills_list_get_reload_activate_run():
    c = SBX.for_clone(tenant="skl", clone_id="c1")
    cat = {s.name: s for s in c.skills.list()}
    check(isinstance(cat.get("ur-api"), sdk.SkillInfo), "ur-api in the catalog", sorted(cat))
    u = cat["ur-api"]
    check(u.source == "builtin" and u.trust_level == "builtin" and u.enabled and
          u.actions == ["check", "get-self"] and u.scan_verdict, "ur-api is builtin, enabled", u)
    h = c.skills.get(SHARED_SKILL)
    check(h.source == "shared" and h.trust_level == "trusted" and h.versions == ["v1", "v2"] and
          h.version == "v1" and h.active_dir.endswith("/versions/v1") and h.actions == ["greet"],
          "the shared skill made here, v1 current", h)
    check(h.description == "greets, v1" and "description" in h.raw,
          "the extended answer's SKILL.md fields", h.raw)
    reloaded = {s.name for s in c.skills.reload()}
    check({"ur-api", SHARED_SKILL} <= reloaded, "reload answers the fresh catalog", reloaded)
    # a skill action, waited for (exec) and submitted (tasks)
    r = c.skills.exec(SHARED_SKILL, "greet", "a", "b c")
    check(isinstance(r, sdk.ExecResult) and r.exit_code == 0 and
          r.stdout == "%s v1 a b c\n" % SHARED_SKILL, "skills.exec runs v1", r)
    t = c.skills.run(SHARED_SKILL, "greet", "x")
    check(t.skill == SHARED_SKILL and t.skill_source == "shared" and
          t.skill_trust_level == "trusted", "the task names its skill", t)
    t = c.tasks.wait(t.id, timeout=60)
    check(t.status == "succeeded" and t.result.stdout == "%s v1 x\n" % SHARED_SKILL,
          "skills.run ran the action", t)
    # activate v2: the next run prints v2; another clone keeps v1
    a = c.skills.activate(SHARED_SKILL, "v2")
    check(isinstance(a, sdk.SkillInfo) and a.version == "v2" and
          a.active_dir.endswith("/versions/v2"), "activated v2", a)
    r = c.skills.exec(SHARED_SKILL, "greet", "y")
    check(r.stdout == "%s v2 y\n" % SHARED_SKILL, "the next run prints v2", r)
    check(c.skills.get(SHARED_SKILL).version == "v2", "get says v2")
    other = SBX.for_clone(tenant="skl", clone_id="c2")
    check(other.skills.exec(SHARED_SKILL, "greet").stdout == "%s v1 \n" % SHARED_SKILL,
          "the activation is the clone's own")
    # refusals, with the API's code
    e = raises(sdk.BadRequest, c.skills.activate, "nosuchskill", "v1")
    check(e.status == 400 and e.code == "bad_request" and
          "skill not found: nosuchskill" in e.message, "activate unknown: 400", vars(e))
    e = raises(sdk.BadRequest, c.skills.activate, SHARED_SKILL, "v9")
    check(e.code == "bad_request" and "version not found: v9" in e.message,
          "unknown version: 400", vars(e))
    e = raises(sdk.Conflict, c.skills.activate, "ur-api", "v1")
    check(e.status == 409 and e.code == "conflict" and "builtin" in e.message,
          "a builtin skill cannot be activated: 409", vars(e))
    e = raises(sdk.NotFound, c.skills.get, "nosuchskill")
    check(e.status == 404 and e.code == "not_found", "get unknown: 404", vars(e))
    e = raises(sdk.BadRequest, c.skills.run, SHARED_SKILL, "nosuchaction")
    check("unsupported skill action" in e.message, "an unknown action named", vars(e))
    s = sdk.SkillInfo.from_dict({"name": "x", "trustLevel": "trusted", "actions": ["a"],
                                 "future": 1})
    check(s.trust_level == "trusted" and s.actions == ["a"] and s.raw["future"] == 1,
          "SkillInfo typed, unknown keys kept in raw", s)


@S.case
def turns_tool_calls_and_cancel():
    tools = SBX.tools()
    check(all(isinstance(t, sdk.ToolSpec) for t in tools) and
          [t.name for t in tools][:2] == ["exec", "python"] and
          tools[0].parameters.get("type") == "object", "GET /runtime/tools typed", tools)
    with SBX.session("turns") as s:
        s.exec("echo kept > /tmp/k")
        calls = [sdk.tool_call("exec", {"command": "cat /tmp/k; echo oops >&2; exit 3"},
                               id="c1"),
                 sdk.tool_call("python", {"code": "print(6*7)"}, id="c2")]
        tid = s.tool_calls(calls)
        check(isinstance(tid, str) and tid, "turn() answers the turn id", tid)
        res = s.wait_turn(tid)
        check(isinstance(res, sdk.TurnResult) and res.turn_id == tid and
              res.stop_reason == "completed" and res.error is None, "done completed", res)
        check([c.call_id for c in res.calls] == ["c1", "c2"], "both calls, in order", res.calls)
        c1 = res.call("c1")
        check(isinstance(c1, sdk.ToolCallResult) and c1.name == "exec" and c1.exit_code == 3 and
              c1.outcome == "exited" and "kept" in c1.result and "[stderr]" in c1.result and
              "kept\n" in c1.output and "oops" in c1.output and "wallSeconds" in c1.usage,
              "tool_call_end of the exec call: ran in the session's sandbox", c1)
        check(res.call("c2").result.strip() == "42", "python call", res.call("c2"))
        types = [e.type for e in res.events]
        check(types[0] == "turn_started" and types[-1] == "done" and
              types.count("tool_call_end") == 2, "the turn's events, start to done", types)
        # a turn running sleep 30, canceled
        tid = s.tool_calls([sdk.tool_call("exec", {"command": "echo started; sleep 30"})])
        e = raises(sdk.Conflict, s.tool_calls, [sdk.tool_call("exec", {"command": "true"})])
        check(e.code == "conflict" and tid in e.message, "one turn at a time: 409", vars(e))
        t0 = time.monotonic()
        seen = []
        for ev in s.follow_turn(tid):
            seen.append(ev)
            if ev.type == "tool_call_output" and "started" in ev.data.get("text", ""):
                ans = SBX.cancel_turn(tid)
                check(ans.get("ok") is True and ans.get("turnId") == tid, "cancel accepted", ans)
        res = sdk.TurnResult.from_events(tid, seen)
        check(res.stop_reason == "canceled" and res.calls[0].outcome == "canceled",
              "done canceled, the call killed", res)
        check(time.monotonic() - t0 < 25, "well before the sleep's end")
        e = raises(sdk.NotFound, SBX.cancel_turn, tid)
        check(e.status == 404, "an ended turn: 404", vars(e))
        again = s.run_tool_calls([sdk.tool_call("exec", {"command": "echo again"}, id="a")])
        check(again.call("a").result.strip() == "again", "the session takes turns again", again)
    e = raises(sdk.NotFound, SBX.tool_calls, "nosuchsession", [])
    check(e.status == 404, "no live session: 404", vars(e))
    e = raises(sdk.BadRequest, SBX.turn, "turns", {"type": "bogus"})


@S.case
def typed_results_tolerate_unknown_keys():
    t = sdk.Task.from_dict({"id": "a", "status": "running", "newKey": {"x": 1},
                            "result": None})
    check(t.id == "a" and not t.done and t.result is None and t.raw["newKey"] == {"x": 1},
          "unknown key kept", t)
    st = SBX.status()
    check(isinstance(st, sdk.RuntimeStatus) and st.status in ("ready", "busy"), "status", st)
    check(SBX.health() == {"ok": True}, "health")


@S.case
def pip_installs_from_the_folder():
    # A copy: an in-tree build would leave build files in the repository.
    src = os.path.join(TMP, "sdk-src")
    shutil.copytree(SDK, src, ignore=shutil.ignore_patterns("__pycache__"))
    target = os.path.join(TMP, "site")
    p = subprocess.run([sys.executable, "-m", "pip", "install",
                        "--no-index", "--no-deps", "--disable-pip-version-check",
                        "--target", target, src], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, "pip install offline", p.stdout[-2000:] + p.stderr[-2000:])
    check(os.path.exists(os.path.join(target, "sandbox_sdk", "py.typed")), "py.typed shipped")
    code = ("import sandbox_sdk, sys; s = sandbox_sdk.Sandbox(sys.argv[1], sys.argv[2]);"
            "import importlib.metadata as m; assert m.version('sandbox-sdk') == sandbox_sdk.__version__;"
            "print(sandbox_sdk.__file__); print(s.exec(['echo', 'installed']).stdout, end='')")
    p = subprocess.run([sys.executable, "-c", code, D.url, TOKEN], capture_output=True,
                       text=True, timeout=120, env={"PYTHONPATH": target, "PATH": "/usr/bin:/bin"},
                       cwd=TMP)
    check(p.returncode == 0 and p.stdout.splitlines()[-1] == "installed"
          and p.stdout.startswith(target), "the installed package works", (p.stdout, p.stderr))


S.finish()
