"""The agent runtime end to end: turns on a live session (POST /runtime/turn),
their tool calls run in the session's sandbox, the model loop driven over real
HTTP by a fake OpenAI-compatible server written here (http.server on
loopback, scripted streams), external tools, cancel, one turn at a time, a
daemon killed mid-turn, and the model's key never visible in a sandbox.

Every daemon here runs with --net none (ServeDaemon's default) and talks only
to loopback."""
import atexit
import http.client
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
from sbxtest import ServeDaemon, Suite, check  # noqa: E402

S = Suite("agent")
TOKEN = "op-" + "0123456789abcdef0123456789abc"
KEY = "sk-test-" + os.urandom(12).hex()  # the model key the probe hunts for
SANDBOXCTL = os.environ.get("SANDBOXCTL") or os.path.join(
    os.path.dirname(os.environ.get("SANDBOXD", "build/sandboxd")), "sandboxctl")
_daemons = []


# ---- a fake OpenAI-compatible server ----

class Model:
    """Answers POST /chat/completions from a script: a list of answers, one per
    request, each a dict: {"status", "headers", "events": [chunk dicts or raw
    strings], "delay" (seconds between events), "cut" (stop after n events,
    closing the connection mid-stream), "raw" (a body as is)}. Records every
    request's JSON and headers."""

    def __init__(self):
        self.script = []
        self.requests = []
        self.lock = threading.Lock()
        model = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                try:
                    self.answer()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the daemon dropped the call (a cancel, a budget): expected

            def answer(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                with model.lock:
                    model.requests.append({"path": self.path, "body": body,
                                           "headers": dict(self.headers)})
                    ans = model.script.pop(0) if model.script else {"events": [text_chunk("(no script)"), stop_chunk()]}
                status = ans.get("status", 200)
                if status != 200:
                    data = json.dumps({"error": {"message": "scripted %d" % status}}).encode()
                    self.send_response(status)
                    for k, v in ans.get("headers", {}).items():
                        self.send_header(k, v)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                events = ans.get("events", [])
                for i, ev in enumerate(events):
                    if "cut" in ans and i >= ans["cut"]:
                        # mid-way: no terminating chunk, the connection just closes
                        self.wfile.flush()
                        self.close_connection = True
                        try:
                            self.connection.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
                        return
                    text = ev if isinstance(ev, str) else "data: " + json.dumps(ev) + "\n\n"
                    # split each event in two writes: the parser sees pieces
                    raw = text.encode()
                    for piece in (raw[: len(raw) // 2], raw[len(raw) // 2:]):
                        if piece:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                            self.wfile.flush()
                    if ans.get("delay"):
                        time.sleep(ans["delay"])
                if ans.get("done", True) and "cut" not in ans:
                    d = b"data: [DONE]\n\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(d), d))
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def set(self, *answers):
        with self.lock:
            self.script = list(answers)
            self.requests = []


def chunk(delta=None, finish=None, usage=None):
    c = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "fake",
         "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}
    if usage:
        c["usage"] = usage
    return c


def text_chunk(t):
    return chunk({"content": t})


def stop_chunk(reason="stop"):
    return chunk({}, reason, {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})


def tool_call_chunks(calls, pieces=5):
    """The chunks of tool calls [(id, name, args_text)]: each call's arguments
    split over `pieces` chunks, the calls interleaved by index."""
    out = []
    for i, (cid, name, _) in enumerate(calls):
        out.append(chunk({"tool_calls": [{"index": i, "id": cid, "type": "function",
                                          "function": {"name": name, "arguments": ""}}]}))
    for p in range(pieces):
        for i, (_, _, args) in enumerate(calls):
            n = (len(args) + pieces - 1) // pieces
            part = args[p * n:(p + 1) * n]
            if part:
                out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]}))
    out.append(chunk({}, "tool_calls"))
    return out


MODEL = Model()


# ---- the daemon and its streams ----

class Daemon(ServeDaemon):
    def __init__(self, state_dir, config=None, extra=()):
        super().__init__(state_dir, TOKEN, config=config, extra=extra, registry=_daemons)

    def req(self, method, path, body=None, token=TOKEN, headers=None, timeout=20):
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = "Bearer " + token
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=data, headers=h)
            r = c.getresponse()
            raw = r.read()
            try:
                parsed = json.loads(raw) if raw else None
            except ValueError:
                parsed = raw.decode(errors="replace")
            return r.status, parsed, dict(r.getheaders())
        finally:
            c.close()

    def start_session(self, session, tools=None):
        body = {"sessionID": session}
        if tools is not None:
            body["tools"] = tools
        st, b, _ = self.req("POST", "/runtime/start", body, timeout=30)
        check(st == 200, "session %s started" % session, (st, b))

    def turn(self, session, inp, want=200):
        st, b, _ = self.req("POST", "/runtime/turn", {"sessionID": session, "input": inp})
        check(st == want, "POST /runtime/turn answered %d" % want, (st, b))
        return b


class Stream:
    """A session's event stream read by a thread into a list."""

    def __init__(self, d, session, last_id=0):
        self.events = []
        self.cv = threading.Condition()
        self.c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=120)
        h = {"Authorization": "Bearer " + TOKEN, "Accept": "text/event-stream"}
        if last_id is not None:
            h["Last-Event-ID"] = str(last_id)
        self.c.request("GET", "/runtime/stream?sessionID=" + urllib.parse.quote(session),
                       headers=h)
        self.r = self.c.getresponse()
        check(self.r.status == 200, "stream opened", self.r.status)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        frame = {}
        try:
            while True:
                line = self.r.readline()
                if not line:
                    break
                line = line.decode().rstrip("\r\n")
                if line == "":
                    if "data" in frame:
                        with self.cv:
                            self.events.append(json.loads(frame["data"]))
                            self.cv.notify_all()
                    frame = {}
                    continue
                if line.startswith(":"):
                    continue
                k, _, v = line.partition(":")
                frame[k] = frame.get(k, "") + (v[1:] if v.startswith(" ") else v)
        except (OSError, ValueError, AttributeError):
            pass  # closed by the test (close() while a read was waiting)

    def wait(self, pred, timeout=30, what="events"):
        deadline = time.monotonic() + timeout
        with self.cv:
            while not pred(self.events):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("timed out waiting for %s; got:\n  %s" % (
                        what, "\n  ".join(json.dumps(e)[:300] for e in self.events)))
                self.cv.wait(left)
            return list(self.events)

    def done(self, turn_id, timeout=60):
        evs = self.wait(lambda es: any(e["type"] == "done" and e["data"].get("turnId") == turn_id
                                       for e in es), timeout, "done of " + turn_id)
        return [e for e in evs if e["data"].get("turnId") == turn_id or
                e["type"].startswith("tool_call") or e["type"] == "text_delta"]

    def close(self):
        try:
            self.c.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.c.close()


def of(evs, typ):
    return [e["data"] for e in evs if e["type"] == typ]


def turn_events(evs, turn_id):
    """The events from turn_started of turn_id to its done."""
    out, on = [], False
    for e in evs:
        if e["type"] == "turn_started" and e["data"].get("turnId") == turn_id:
            on = True
        if on:
            out.append(e)
        if on and e["type"] == "done" and e["data"].get("turnId") == turn_id:
            break
    return out


TMP = tempfile.mkdtemp(prefix="sbx-agent-")


def stop_all():
    for d in list(_daemons):
        d.stop()
    MODEL.srv.shutdown()


atexit.register(lambda: (stop_all(), shutil.rmtree(TMP, True)))

os.environ["OPENAI_BASE_URL"] = "http://127.0.0.1:%d/v1" % MODEL.port
os.environ["OPENAI_MODEL"] = "fake-model"
os.environ["OPENAI_API_KEY"] = KEY
CFG = os.path.join(TMP, "agent.yaml")
with open(CFG, "w") as f:
    f.write("model:\n  tool_output_limit: 4k\n  max_steps: 6\n  turn_timeout: 60s\n"
            "tenants:\n"
            "  acme:\n"
            "    model:\n"
            "      base_url: http://127.0.0.1:%d/acme/v1\n"
            "      name: acme-model\n"
            "      key_env: ACME_MODEL_KEY\n"
            "  beta:\n"
            "    model:\n"
            "      key_file: %s\n" % (MODEL.port, os.path.join(TMP, "beta.key")))
with open(os.path.join(TMP, "beta.key"), "w") as f:
    f.write("beta-key-from-file\n")
os.chmod(os.path.join(TMP, "beta.key"), 0o600)
os.environ["ACME_MODEL_KEY"] = "acme-key-" + os.urandom(6).hex()
# Skills for the skill tool: the repo's builtin root and a shared root made here.
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHARED = os.path.join(TMP, "skills-shared")
os.chmod(TMP, 0o755)
for name, script, text in (
        ("greeter", "greet.sh", 'echo "hello $* from $SKILL_NAME/$SKILL_ACTION"\n'
                                'echo note >&2\necho mark > /tmp/skill-mark\n'),
        ("danger", "clean.sh", "rm -rf /\n")):
    os.makedirs(os.path.join(SHARED, name, "scripts"))
    with open(os.path.join(SHARED, name, "SKILL.md"), "w") as f:
        f.write("---\nname: %s\ndescription: a test skill\n---\n# %s\n" % (name, name))
    with open(os.path.join(SHARED, name, "scripts", script), "w") as f:
        f.write(text)
with open(CFG, "a") as f:
    f.write("skills:\n  builtin_root: %s\n  shared_root: %s\n"
            % (os.path.join(REPO, "skills", "builtin"), SHARED))

D = Daemon(os.path.join(TMP, "state"), config=CFG)
D.start()


def run_turn(session, inp, timeout=60):
    """One turn on a fresh stream: its events from turn_started to done."""
    st = Stream(D, session, last_id=None)
    try:
        b = D.turn(session, inp)
        tid = b["turnId"]
        evs = st.wait(lambda es: any(e["type"] == "done" and e["data"].get("turnId") == tid
                                     for e in es), timeout, "done of " + tid)
        return tid, turn_events(evs, tid)
    finally:
        st.close()


# ---- turns of tool calls, no model ----

@S.case
def tools_are_published_with_schemas():
    st, b, _ = D.req("GET", "/runtime/tools")
    check(st == 200, "GET /runtime/tools", (st, b))
    names = [t["name"] for t in b["tools"]]
    check(names == ["exec", "python", "node", "read_file", "write_file", "list_files", "skill"],
          "the built-in tools", names)
    sk = b["tools"][6]["parameters"]
    check(sk["required"] == ["name", "action"] and sk["properties"]["args"]["type"] == "array",
          "skill {name, action, args}", sk)
    for t in b["tools"]:
        check(t["parameters"]["type"] == "object" and t["description"], "a schema", t)
    ex = b["tools"][0]["parameters"]
    check(ex["required"] == ["command"] and "oneOf" in ex["properties"]["command"],
          "exec's command is a string or an argv", ex)


@S.case
def tool_calls_run_in_order_in_the_session():
    D.start_session("tc")
    # A file a first task leaves in /tmp is seen by the next: the session's sandbox.
    calls = [
        {"id": "c1", "name": "exec", "arguments": json.dumps({"command": "echo hi; echo oops >&2; echo kept > /tmp/k"})},
        {"id": "c2", "name": "exec", "arguments": {"command": ["/bin/sh", "-c", "cat /tmp/k; exit 3"]}},
        {"id": "c3", "name": "write_file", "arguments": {"path": "notes/a.txt", "content": "hello file"}},
        {"id": "c4", "name": "read_file", "arguments": {"path": "notes/a.txt"}},
        {"id": "c5", "name": "list_files", "arguments": {"path": "notes"}},
        {"id": "c6", "name": "python", "arguments": {"code": "print(6*7)"}},
        {"id": "c7", "name": "node", "arguments": {"code": "console.log(6*7+1)"}},
        {"id": "c8", "name": "exec", "arguments": "{\"command\": \"echo x\""},  # bad JSON
        {"id": "c9", "name": "no_such_tool", "arguments": {}},
        {"id": "c10", "name": "read_file", "arguments": {"path": "../../../etc/passwd"}},
        {"id": "c11", "name": "exec", "arguments": {"command": 42}},
    ]
    tid, evs = run_turn("tc", {"type": "tool_calls", "calls": calls})
    starts = of(evs, "tool_call_start")
    ends = {e["callId"]: e for e in of(evs, "tool_call_end")}
    check([s["callId"] for s in starts] == ["c%d" % i for i in range(1, 12)],
          "every call started, in order", starts)
    check(starts[0]["name"] == "exec" and starts[0]["arguments"] ==
          calls[0]["arguments"], "tool_call_start carries the arguments as given", starts[0])
    # in order: each call ends before the next starts
    seq = [(e["type"], e["data"]["callId"]) for e in evs if e["type"] in ("tool_call_start", "tool_call_end")]
    check(seq == [x for i in range(1, 12) for x in (("tool_call_start", "c%d" % i),
                                                    ("tool_call_end", "c%d" % i))],
          "one call at a time", seq)
    outs = [o for o in of(evs, "tool_call_output") if o["callId"] == "c1"]
    check(any(o["stream"] == "stdout" and "hi" in o["text"] for o in outs) and
          any(o["stream"] == "stderr" and "oops" in o["text"] for o in outs),
          "tool_call_output {callId, stream, text}", outs)
    check(ends["c1"]["exitCode"] == 0 and ends["c1"]["outcome"] == "exited" and
          "hi" in ends["c1"]["result"] and "[stderr]" in ends["c1"]["result"] and
          "wallSeconds" in ends["c1"]["usage"], "c1's end", ends["c1"])
    check(ends["c2"]["exitCode"] == 3 and "kept" in ends["c2"]["result"],
          "c2 ran in the same sandbox (argv form) and exited 3", ends["c2"])
    check(ends["c3"]["outcome"] == "exited" and "10 bytes" in ends["c3"]["result"], "write_file", ends["c3"])
    check(ends["c4"]["result"] == "hello file", "read_file", ends["c4"])
    check("a.txt" in ends["c5"]["result"], "list_files", ends["c5"])
    check(ends["c6"]["result"].strip() == "42", "python", ends["c6"])
    check(ends["c7"]["result"].strip() == "43", "node", ends["c7"])
    for c in ("c8", "c9", "c11"):
        check(ends[c]["outcome"] == "tool_error" and ends[c]["result"].startswith("error:"),
              "%s is a tool error" % c, ends[c])
    check("JSON" in ends["c8"]["result"], "bad JSON named", ends["c8"])
    check("unknown tool 'no_such_tool'" in ends["c9"]["result"], "unknown tool named", ends["c9"])
    check(ends["c10"]["outcome"] == "tool_error" or "root:" not in ends["c10"]["result"],
          "read_file stays in the workspace", ends["c10"])
    done = of(evs, "done")[-1]
    check(done == {"turnId": tid, "stopReason": "completed"}, "done {turnId}", done)
    # the file is really in the clone's workspace: the files API sees it
    st, b, _ = D.req("GET", "/runtime/files?path=notes/a.txt")
    check(st == 200 and b == "hello file", "write_file wrote the workspace", (st, b))


@S.case
def tool_output_fed_back_is_capped():
    D.start_session("cap")
    tid, evs = run_turn("cap", {"type": "tool_calls", "calls": [
        {"id": "big", "name": "exec", "arguments": {"command": "head -c 10000 /dev/zero | tr '\\0' a"}}]})
    end = of(evs, "tool_call_end")[0]
    check(end["truncated"] is True and end["result"].startswith("a" * 4096) and
          "[output cut: 4096 of 10000 bytes shown]" in end["result"],
          "the result is cut at tool_output_limit (4k) and says so", end["result"][-80:])
    streamed = "".join(o["text"] for o in of(evs, "tool_call_output"))
    check(len(streamed) == 10000, "the stream has the whole output", len(streamed))


@S.case
def parallel_calls_run_together():
    D.start_session("par")
    calls = [{"id": "p%d" % i, "name": "exec", "arguments": {"command": "sleep 1; echo %d" % i}}
             for i in range(3)]
    tid, evs = run_turn("par", {"type": "tool_calls", "parallel": True, "calls": calls})
    kinds = [e["type"] for e in evs if e["type"] in ("tool_call_start", "tool_call_end")]
    check(kinds[:3] == ["tool_call_start"] * 3, "all started before any ended", kinds)
    ends = {e["callId"]: e for e in of(evs, "tool_call_end")}
    check(all(ends["p%d" % i]["result"].strip() == str(i) for i in range(3)), "each its own", ends)


@S.case
def one_turn_at_a_time_and_cancel_kills_the_tool():
    D.start_session("busy")
    st = Stream(D, "busy", last_id=None)
    try:
        b = D.turn("busy", {"type": "tool_calls", "calls": [
            {"id": "long", "name": "exec", "arguments": {"command": "echo started; sleep 60"}}]})
        tid = b["turnId"]
        st.wait(lambda es: any(e["type"] == "tool_call_output" for e in es), 30, "output")
        s2, b2, _ = D.req("POST", "/runtime/turn", {"sessionID": "busy", "input": {
            "type": "tool_calls", "calls": [{"id": "x", "name": "exec", "arguments": {"command": "true"}}]}})
        check(s2 == 409 and b2["error"]["code"] == "conflict" and tid in b2["error"]["message"],
              "a second turn is refused (409)", (s2, b2))
        t0 = time.monotonic()
        s3, b3, _ = D.req("POST", "/runtime/turn/%s/cancel" % tid)
        check(s3 == 200, "cancel accepted", (s3, b3))
        evs = st.wait(lambda es: any(e["type"] == "done" for e in es), 30, "done")
        took = time.monotonic() - t0
        end = of(evs, "tool_call_end")[0]
        check(end["outcome"] == "canceled", "the tool was killed", end)
        check(of(evs, "done")[0] == {"turnId": tid, "stopReason": "canceled"}, "done canceled",
              of(evs, "done"))
        check(took < 30, "canceled well before the sleep's end (%.1fs)" % took)
        s4, b4, _ = D.req("POST", "/runtime/turn/%s/cancel" % tid)
        check(s4 == 404, "an ended turn cannot be canceled", (s4, b4))
        # the session takes turns again
        tid2, evs2 = run_turn("busy", {"type": "tool_calls", "calls": [
            {"id": "after", "name": "exec", "arguments": {"command": "echo again"}}]})
        check(of(evs2, "tool_call_end")[0]["result"].strip() == "again", "next turn runs", evs2)
    finally:
        st.close()


@S.case
def bad_turns_are_refused_clearly():
    cases = [
        ({"sessionID": "nosuch", "input": {"type": "tool_calls", "calls": []}}, 404),
        ({"input": {"type": "tool_calls", "calls": []}}, 400),
        ({"sessionID": "tc"}, 400),
        ({"sessionID": "tc", "input": {"type": "dance"}}, 400),
        ({"sessionID": "tc", "input": {"type": "tool_calls", "calls": "x"}}, 400),
        ({"sessionID": "tc", "input": {"type": "tool_calls", "calls": [1]}}, 400),
        ({"sessionID": "tc", "input": {"type": "user_message"}}, 400),
        ({"sessionID": "tc", "input": {"type": "tool_result", "callId": "zz", "output": "x"}}, 404),
    ]
    for body, want in cases:
        st, b, _ = D.req("POST", "/runtime/turn", body)
        check(st == want and isinstance(b, dict) and b["error"]["message"],
              "%s -> %d" % (json.dumps(body), want), (st, b))
    st, b, _ = D.req("POST", "/runtime/turn", b"{not json")
    check(st == 400, "bad JSON body -> 400", (st, b))
    st, b, _ = D.req("POST", "/runtime/turn/nope/cancel")
    check(st == 404, "unknown turn -> 404", (st, b))
    check(D.proc.poll() is None, "the daemon is alive")


# ---- the model loop, over HTTP to the fake model ----

@S.case
def skill_tool_runs_the_skill_as_its_own_task():
    D.start_session("sk")
    st, b, _ = D.req("GET", "/runtime/skills")  # the first scan has ended
    check(st == 200 and {"greeter", "danger"} <= {s["name"] for s in b}, "the test's skills", b)
    calls = [
        {"id": "s1", "name": "skill", "arguments": {"name": "greeter", "action": "greet",
                                                    "args": ["a", "b c"]}},
        {"id": "s2", "name": "exec", "arguments": {
            "command": "test -e /tmp/skill-mark && echo joined || echo apart; test -e /skill || echo no-skill"}},
        {"id": "s3", "name": "skill", "arguments": {"name": "nope", "action": "greet"}},
        {"id": "s4", "name": "skill", "arguments": {"name": "danger", "action": "clean"}},
        {"id": "s5", "name": "skill", "arguments": {"name": "../greeter", "action": "greet"}},
        {"id": "s6", "name": "skill", "arguments": {"name": "greeter", "action": "nope"}},
        {"id": "s7", "name": "skill", "arguments": {"name": "greeter", "action": "greet", "args": "a"}},
        {"id": "s8", "name": "skill", "arguments": {"name": "greeter"}},
        {"id": "s9", "name": "exec", "arguments": {"command": ["/bin/sh", SHARED + "/greeter/scripts/greet.sh"]}},
        {"id": "s10", "name": "python", "arguments": {"code": "open('%s/danger/scripts/clean.sh')" % SHARED}},
    ]
    tid, evs = run_turn("sk", {"type": "tool_calls", "calls": calls})
    ends = {e["callId"]: e for e in of(evs, "tool_call_end")}
    check(sorted(ends) == sorted(c["id"] for c in calls), "every call ended", ends)
    s1 = ends["s1"]
    check(s1["exitCode"] == 0 and s1["outcome"] == "exited" and
          s1["result"].startswith("hello a b c from greeter/greet\n") and "[stderr]\nnote" in s1["result"]
          and "wallSeconds" in s1["usage"], "the skill's output is the result", s1)
    outs = [o for o in of(evs, "tool_call_output") if o["callId"] == "s1"]
    check(any(o["stream"] == "stdout" and "hello a b c" in o["text"] for o in outs),
          "its output streamed as tool_call_output", outs)
    check(ends["s2"]["result"] == "apart\nno-skill\n",
          "the skill ran in a sandbox of its own, not the session's", ends["s2"])
    for c, want in (("s3", "unsupported skill: nope"), ("s4", "skill blocked: dangerous pattern"),
                    ("s5", "unsupported skill: ../greeter"),
                    ("s6", "unsupported skill action: greeter/nope"),
                    ("s7", "args must be an array of strings"),
                    ("s8", "name and action must be strings")):
        check(ends[c]["outcome"] == "tool_error" and ends[c]["result"].startswith("error: skill: ")
              and want in ends[c]["result"], "%s: a tool error naming why" % c, ends[c])
    for c in ("s9", "s10"):
        check(ends[c]["outcome"] == "tool_error" and
              "direct external skill path execution is blocked" in ends[c]["result"],
              "%s: a skill's path is not run directly (as for /runtime/exec)" % c, ends[c])
    check(of(evs, "done")[-1] == {"turnId": tid, "stopReason": "completed"}, "the turn ended",
          of(evs, "done"))


def user_turn(session, text, timeout=60):
    return run_turn(session, {"type": "user_message", "text": text}, timeout)


@S.case
def plain_text_streams_as_text_deltas():
    D.start_session("m1")
    MODEL.set({"events": [text_chunk("Hel"), text_chunk("lo, "), text_chunk("world"), stop_chunk()]})
    tid, evs = user_turn("m1", "say hello")
    deltas = of(evs, "text_delta")
    check("".join(d["text"] for d in deltas) == "Hello, world" and len(deltas) == 3,
          "the text as three deltas", deltas)
    done = of(evs, "done")[-1]
    check(done["stopReason"] == "stop" and done["usage"]["totalTokens"] == 15 and
          done["usage"]["steps"] == 1, "done {stopReason, usage}", done)
    check(not of(evs, "runtime_error"), "no error", evs)
    r = MODEL.requests[0]
    check(r["path"] == "/v1/chat/completions", "chat completions", r["path"])
    check(r["headers"].get("Authorization") == "Bearer " + KEY, "the key is sent to the model",
          r["headers"])
    b = r["body"]
    check(b["model"] == "fake-model" and b["stream"] is True, "model and stream: true", b)
    check(b["messages"][-1] == {"role": "user", "content": "say hello"}, "the user's text",
          b["messages"])
    names = [t["function"]["name"] for t in b["tools"]]
    check(names[:6] == ["exec", "python", "node", "read_file", "write_file", "list_files"] and
          all(t["type"] == "function" and t["function"]["parameters"]["type"] == "object"
              for t in b["tools"]), "the tool schemas are offered", b["tools"])


@S.case
def split_and_parallel_tool_calls_run_and_are_fed_back():
    D.start_session("m2")
    args1 = json.dumps({"command": "echo one-$((20+22))"})
    args2 = json.dumps({"code": "print('two')"})
    MODEL.set({"events": [text_chunk("Let me run.")] +
               tool_call_chunks([("call_a", "exec", args1), ("call_b", "python", args2)], pieces=7)},
              {"events": [text_chunk("All done."), stop_chunk()]})
    tid, evs = user_turn("m2", "run two things")
    starts = of(evs, "tool_call_start")
    check([(s["callId"], s["name"]) for s in starts] == [("call_a", "exec"), ("call_b", "python")],
          "both calls, each with its whole name", starts)
    check(json.loads(starts[0]["arguments"]) == json.loads(args1),
          "arguments joined from 7 pieces", starts[0])
    ends = {e["callId"]: e for e in of(evs, "tool_call_end")}
    check(ends["call_a"]["result"].strip() == "one-42" and ends["call_b"]["result"].strip() == "two",
          "both ran in the sandbox", ends)
    check(len(MODEL.requests) == 2, "the model was asked again", len(MODEL.requests))
    msgs = MODEL.requests[1]["body"]["messages"]
    a = [m for m in msgs if m["role"] == "assistant"][-1]
    check([c["id"] for c in a["tool_calls"]] == ["call_a", "call_b"] and
          a["tool_calls"][0]["function"]["arguments"] == args1 and a["content"] == "Let me run.",
          "the assistant's calls are in the history", a)
    tools = [m for m in msgs if m["role"] == "tool"]
    check([(m["tool_call_id"], m["content"].strip()) for m in tools] ==
          [("call_a", "one-42"), ("call_b", "two")], "the results fed back", tools)
    check(of(evs, "done")[-1]["stopReason"] == "stop" and
          "".join(d["text"] for d in of(evs, "text_delta")) == "Let me run.All done.",
          "then the model's final text", evs[-3:])


@S.case
def malformed_arguments_and_unknown_tools_are_fed_back_as_errors():
    D.start_session("m3")
    MODEL.set({"events": tool_call_chunks([("bad", "exec", '{"command": "echo x"'),
                                            ("unk", "frobnicate", "{}")])},
              {"events": [text_chunk("ok"), stop_chunk()]})
    tid, evs = user_turn("m3", "break things")
    ends = {e["callId"]: e for e in of(evs, "tool_call_end")}
    check(ends["bad"]["outcome"] == "tool_error" and "JSON" in ends["bad"]["result"],
          "bad JSON: a tool error", ends["bad"])
    check(ends["unk"]["outcome"] == "tool_error" and "unknown tool 'frobnicate'" in ends["unk"]["result"],
          "unknown tool: a tool error", ends["unk"])
    tools = [m for m in MODEL.requests[1]["body"]["messages"] if m["role"] == "tool"]
    check(len(tools) == 2 and all(m["content"].startswith("error:") for m in tools),
          "the errors fed back to the model", tools)
    check(of(evs, "done")[-1]["stopReason"] == "stop", "the turn went on", of(evs, "done"))


@S.case
def the_model_calls_a_skill():
    D.start_session("m4")
    args = json.dumps({"name": "greeter", "action": "greet", "args": ["model"]})
    MODEL.set({"events": tool_call_chunks([("call_s", "skill", args),
                                            ("call_u", "skill", '{"name": "ghost", "action": "x"}')])},
              {"events": [text_chunk("greeted"), stop_chunk()]})
    tid, evs = user_turn("m4", "greet me")
    offered = [t["function"] for t in MODEL.requests[0]["body"]["tools"]]
    check(any(f["name"] == "skill" and f["parameters"]["required"] == ["name", "action"]
              for f in offered), "the skill tool is offered to the model", offered)
    ends = {e["callId"]: e for e in of(evs, "tool_call_end")}
    check(ends["call_s"]["exitCode"] == 0 and
          ends["call_s"]["result"].startswith("hello model from greeter/greet"),
          "the model's skill call ran", ends["call_s"])
    check(ends["call_u"]["outcome"] == "tool_error" and
          "unsupported skill: ghost" in ends["call_u"]["result"], "an unknown skill: a tool error",
          ends["call_u"])
    tools = {m["tool_call_id"]: m["content"] for m in MODEL.requests[1]["body"]["messages"]
             if m["role"] == "tool"}
    check(tools["call_s"].startswith("hello model from greeter/greet") and
          tools["call_u"].startswith("error: skill: unsupported skill: ghost"),
          "both fed back to the model", tools)
    check(of(evs, "done")[-1]["stopReason"] == "stop", "the turn went on to the end", of(evs, "done"))


@S.case
def malformed_stream_is_a_runtime_error():
    D.start_session("m4")
    MODEL.set({"events": [text_chunk("a"), "data: {not json\n\n"]})
    tid, evs = user_turn("m4", "x")
    err = of(evs, "runtime_error")
    check(len(err) == 1 and err[0]["reason"] == "model_bad_output" and "JSON" in err[0]["message"],
          "runtime_error {reason: model_bad_output}", err)
    check(of(evs, "done")[-1]["stopReason"] == "error", "then done", of(evs, "done"))


@S.case
def slow_stream_arrives_piece_by_piece():
    D.start_session("m5")
    MODEL.set({"events": [text_chunk("s%d " % i) for i in range(5)] + [stop_chunk()], "delay": 0.3})
    st = Stream(D, "m5", last_id=None)
    try:
        tid = D.turn("m5", {"type": "user_message", "text": "slowly"})["turnId"]
        st.wait(lambda es: any(e["type"] == "text_delta" for e in es), 10, "a first delta")
        check(not any(e["type"] == "done" for e in st.events),
              "the first text is out before the stream ends", st.events)
        evs = st.wait(lambda es: any(e["type"] == "done" for e in es), 30, "done")
        check("".join(d["text"] for d in of(evs, "text_delta")) == "s0 s1 s2 s3 s4 ",
              "all of it", of(evs, "text_delta"))
    finally:
        st.close()


@S.case
def server_errors_and_429_are_retried_honouring_retry_after():
    D.start_session("m6")
    MODEL.set({"status": 500}, {"status": 429, "headers": {"Retry-After": "2"}},
              {"events": [text_chunk("finally"), stop_chunk()]})
    t0 = time.monotonic()
    tid, evs = user_turn("m6", "retry")
    check(len(MODEL.requests) == 3, "three requests", len(MODEL.requests))
    retries = of(evs, "model_retry")
    check([r["attempt"] for r in retries] == [1, 2] and retries[1]["afterSeconds"] == 2,
          "model_retry events, the second after Retry-After", retries)
    check(time.monotonic() - t0 >= 1.9, "Retry-After: 2 was waited for")
    check(of(evs, "done")[-1]["stopReason"] == "stop" and
          of(evs, "text_delta")[0]["text"] == "finally", "then the answer", evs)


@S.case
def retry_after_as_an_http_date():
    import email.utils
    D.start_session("m6d")
    MODEL.set({"status": 503, "headers": {"Retry-After": email.utils.formatdate(time.time() + 3, usegmt=True)}},
              {"events": [text_chunk("later"), stop_chunk()]})
    t0 = time.monotonic()
    tid, evs = user_turn("m6d", "date")
    r = of(evs, "model_retry")
    check(len(r) == 1 and 1 <= r[0]["afterSeconds"] <= 3, "the date's delay", r)
    check(time.monotonic() - t0 >= 1, "waited for it")
    check(of(evs, "done")[-1]["stopReason"] == "stop", "then the answer", evs)


@S.case
def retries_end_within_the_budget():
    D.start_session("m6b")
    MODEL.set(*[{"status": 503}] * 10)
    tid, evs = user_turn("m6b", "never")
    err = of(evs, "runtime_error")
    check(len(err) == 1 and err[0]["reason"] == "model_http_error" and "503" in err[0]["message"],
          "runtime_error after the retries", err)
    check(len(MODEL.requests) == 5, "1 + max_retries (4) requests", len(MODEL.requests))
    MODEL.set({"status": 401})
    tid, evs = user_turn("m6b", "bad key")
    check(len(MODEL.requests) == 1 and of(evs, "runtime_error")[0]["reason"] == "model_http_error",
          "401 is not retried", (len(MODEL.requests), evs))


@S.case
def stream_cut_mid_way_is_a_runtime_error():
    D.start_session("m7")
    MODEL.set({"events": [text_chunk("half "), text_chunk("of it"), text_chunk("never")], "cut": 2})
    tid, evs = user_turn("m7", "cut")
    err = of(evs, "runtime_error")
    check(len(err) == 1 and err[0]["reason"] == "model_stream_incomplete",
          "runtime_error {reason: model_stream_incomplete}", err)
    check(of(evs, "done")[-1]["stopReason"] == "error", "done follows", of(evs, "done"))


@S.case
def step_budget_ends_a_looping_model():
    D.start_session("m8")
    MODEL.set(*[{"events": tool_call_chunks([("s%d" % i, "exec", '{"command":"true"}')])}
                for i in range(10)])
    tid, evs = user_turn("m8", "loop forever")
    err = of(evs, "runtime_error")
    check(len(err) == 1 and err[0]["reason"] == "step_budget", "step_budget", err)
    check(len(MODEL.requests) == 6, "max_steps (6) model calls", len(MODEL.requests))
    check(of(evs, "done")[-1]["usage"]["steps"] == 6, "done says 6 steps", of(evs, "done"))


@S.case
def the_conversation_goes_on_across_turns():
    D.start_session("m9")
    MODEL.set({"events": [text_chunk("first answer"), stop_chunk()]})
    user_turn("m9", "first question")
    MODEL.set({"events": [text_chunk("second answer"), stop_chunk()]})
    user_turn("m9", "second question")
    msgs = MODEL.requests[0]["body"]["messages"]
    check([(m["role"], m["content"]) for m in msgs] == [
        ("user", "first question"), ("assistant", "first answer"), ("user", "second question")],
        "the history is sent", msgs)


@S.case
def cancel_during_a_model_tool_call():
    D.start_session("m10")
    MODEL.set({"events": tool_call_chunks([("slp", "exec", '{"command":"echo go; sleep 60"}')])})
    st = Stream(D, "m10", last_id=None)
    try:
        tid = D.turn("m10", {"type": "user_message", "text": "sleep"})["turnId"]
        st.wait(lambda es: any(e["type"] == "tool_call_output" for e in es), 30, "output")
        s, b, _ = D.req("POST", "/runtime/turn/%s/cancel" % tid)
        check(s == 200, "cancel", (s, b))
        evs = st.wait(lambda es: any(e["type"] == "done" for e in es), 30, "done")
        check(of(evs, "tool_call_end")[0]["outcome"] == "canceled" and
              of(evs, "done")[0]["stopReason"] == "canceled", "killed, done canceled", evs)
        check(len(MODEL.requests) == 1, "the model is not asked again", len(MODEL.requests))
    finally:
        st.close()


@S.case
def a_tenant_has_its_own_model():
    for tenant in ("acme", "beta"):
        h = {"X-Tenant-Code": tenant}
        st, b, _ = D.req("POST", "/runtime/start", {"sessionID": "own"}, headers=h, timeout=30)
        check(st == 200, "started", (st, b))
        MODEL.set({"events": [text_chunk("hi " + tenant), stop_chunk()]})
        st, b, _ = D.req("POST", "/runtime/turn", {"sessionID": "own", "input": {
            "type": "user_message", "text": "hello"}}, headers=h)
        check(st == 200, "turn", (st, b))
        deadline = time.monotonic() + 20
        while not MODEL.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        r = MODEL.requests[0]
        if tenant == "acme":
            check(r["path"] == "/acme/v1/chat/completions" and r["body"]["model"] == "acme-model"
                  and r["headers"]["Authorization"] == "Bearer " + os.environ["ACME_MODEL_KEY"],
                  "acme's model, name and key", r)
        else:
            # no base_url nor name of its own: the default's, with the key from its file
            check(r["path"] == "/v1/chat/completions" and r["body"]["model"] == "fake-model" and
                  r["headers"]["Authorization"] == "Bearer beta-key-from-file",
                  "beta: the default model, its own key", r)
        time.sleep(0.3)


# ---- external tools ----

LOOKUP = {"name": "lookup", "description": "Look a word up (the caller's own tool).",
          "parameters": {"type": "object", "properties": {"word": {"type": "string"}},
                         "required": ["word"]}, "external": True}


@S.case
def external_tool_round_trip_with_the_model():
    D.start_session("x1", tools=[LOOKUP])
    MODEL.set({"events": tool_call_chunks([("ext1", "lookup", '{"word":"sandbox"}')])},
              {"events": [text_chunk("The answer is 42."), stop_chunk()]})
    st = Stream(D, "x1", last_id=None)
    try:
        tid = D.turn("x1", {"type": "user_message", "text": "look it up"})["turnId"]
        evs = st.wait(lambda es: any(e["type"] == "tool_call_start" for e in es), 30, "start")
        s0 = of(evs, "tool_call_start")[0]
        check(s0["external"] is True and s0["name"] == "lookup" and s0["callId"] == "ext1",
              "tool_call_start {external: true}", s0)
        offered = [t["function"]["name"] for t in MODEL.requests[0]["body"]["tools"]]
        check("lookup" in offered, "the external tool is offered to the model", offered)
        time.sleep(0.3)
        check(not any(e["type"] == "done" for e in st.events), "the turn waits", st.events)
        b = D.turn("x1", {"type": "tool_result", "callId": "ext1", "output": "42"})
        check(b["turnId"] == tid, "the tool_result belongs to the waiting turn", b)
        evs = st.wait(lambda es: any(e["type"] == "done" for e in es), 30, "done")
        check(of(evs, "tool_call_end")[0]["result"] == "42", "the result", evs)
        tools = [m for m in MODEL.requests[1]["body"]["messages"] if m["role"] == "tool"]
        check(tools == [{"role": "tool", "tool_call_id": "ext1", "content": "42"}],
              "fed back to the model", tools)
        check(of(evs, "text_delta")[-1]["text"] == "The answer is 42.", "the model went on", evs)
    finally:
        st.close()


@S.case
def external_tool_in_a_tool_calls_turn_and_bad_declarations():
    D.start_session("x2", tools=[LOOKUP])
    st = Stream(D, "x2", last_id=None)
    try:
        tid = D.turn("x2", {"type": "tool_calls", "calls": [
            {"id": "e1", "name": "lookup", "arguments": {"word": "a"}},
            {"id": "e2", "name": "exec", "arguments": {"command": "echo after"}}]})["turnId"]
        st.wait(lambda es: any(e["type"] == "tool_call_start" for e in es), 30, "start")
        D.turn("x2", {"type": "tool_calls", "calls": []}, want=409)
        D.turn("x2", {"type": "tool_result", "callId": "e1", "output": {"found": True}})
        evs = st.wait(lambda es: any(e["type"] == "done" for e in es), 30, "done")
        ends = of(evs, "tool_call_end")
        check([e["callId"] for e in ends] == ["e1", "e2"] and ends[0]["result"] == '{"found":true}'
              and ends[1]["result"].strip() == "after", "in order, after the result", ends)
    finally:
        st.close()
    for tools, what in (([{"name": "exec", "external": True}], "built-in"),
                        ([{"name": "x y", "external": True}], "name"),
                        ([{"name": "ok"}], "external"),
                        ("nope", "array")):
        s, b, _ = D.req("POST", "/runtime/start", {"sessionID": "x3", "tools": tools})
        check(s == 400 and what in b["error"]["message"], "bad tools refused (%s)" % what, (s, b))


# ---- the model's key never reaches a sandbox ----

@S.case
def model_key_is_never_visible_in_a_sandbox():
    D.start_session("probe")
    canary = "canary-" + os.urandom(8).hex()
    # The probe looks for the key, and for a canary the test itself wrote to the
    # workspace (so a probe that sees nothing proves it looked). /usr is the
    # host's read-only /usr (9 GB here, never written by the daemon): left out
    # for time; every other visible file is read, and every visible process's
    # environment and command line.
    # The strings go in reversed, so no command line holds them; the patterns
    # are written to /dev/shm, which the search leaves out. The canary is also
    # exported, so reading environments is shown to find what is there.
    probe = (
        "printf '%s\\n' \"$(printf %s \"$RK\" | rev)\" > /dev/shm/k; "
        "printf '%s\\n' \"$(printf %s \"$RC\" | rev)\" > /dev/shm/c; "
        "export CANARY_ENV=\"$(cat /dev/shm/c)\"; "
        "env | grep -c OPENAI_ ; "
        "for p in k c; do "
        "  for f in /proc/self/environ /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do "
        "    grep -laF -f /dev/shm/$p \"$f\" 2>/dev/null | sed \"s|^|$p:|\"; done; "
        "  grep -rlaF -f /dev/shm/$p --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr "
        "    --exclude-dir=shm / 2>/dev/null | sed \"s|^|$p:|\"; "
        "done; "
        "echo probe-done")
    script = "RK=%s RC=%s; %s" % (KEY[::-1], canary[::-1], probe)
    tid, evs = run_turn("probe", {"type": "tool_calls", "calls": [
        {"id": "w", "name": "write_file", "arguments": {"path": "canary.txt", "content": canary}},
        {"id": "p", "name": "exec", "arguments": {"command": ["/bin/sh", "-c", script]}},
        {"id": "py", "name": "python", "arguments": {"code": "import os; print(sorted(k for k in os.environ if 'OPENAI' in k or os.environ[k] == %r[::-1]))" % KEY[::-1]}},
    ]}, timeout=240)
    ends = {e["callId"]: e for e in of(evs, "tool_call_end")}
    out = ends["p"]["result"]
    lines = out.split("\n")
    check("probe-done" in out and lines[0].strip() == "0", "the probe ran; no OPENAI_ variable", out)
    found = [l for l in lines[1:] if l[:2] in ("k:", "c:")]
    check(not [l for l in found if l.startswith("k:")], "the key is nowhere", found)
    check("c:/workspace/canary.txt" in found and "c:/proc/self/environ" in found,
          "the canary was found (the probe does look: files and environments)", found)
    check(ends["py"]["result"].strip() == "[]", "python sees no key either", ends["py"])
    check(KEY not in json.dumps(evs), "no event carries the key")
    # and the model did get it: it is in the daemon, not in the sandbox
    MODEL.set({"events": [text_chunk("k"), stop_chunk()]})
    user_turn("probe", "hi")
    check(MODEL.requests[0]["headers"].get("Authorization") == "Bearer " + KEY,
          "the key is only sent to the model")


# ---- durability: kill -9 mid-turn and restart ----

def sleepers(arg):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    if f.read().split(b"\0")[:2] == [b"sleep", arg.encode()]:
                        out.append(int(d))
            except OSError:
                pass
    return out


@S.case
def kill9_mid_turn_then_restart_keeps_the_history():
    state = os.path.join(TMP, "crash-state")
    d = Daemon(state, config=CFG)
    d.start()
    try:
        d.start_session("dur")
        MODEL.set({"events": [text_chunk("I will sleep.")] +
                   tool_call_chunks([("zz", "exec", '{"command":"echo zz; sleep 61.5"}')])})
        st = Stream(d, "dur", last_id=None)
        tid = d.turn("dur", {"type": "user_message", "text": "remember: the word is plum"})["turnId"]
        st.wait(lambda es: any(e["type"] == "tool_call_output" for e in es), 30, "output")
        st.close()
        d.kill9()
        d.start()
        deadline = time.monotonic() + 5
        while sleepers("61.5") and time.monotonic() < deadline:
            time.sleep(0.05)
        check(sleepers("61.5") == [], "the tool's process did not outlive the daemon",
              sleepers("61.5"))
        st = Stream(d, "dur", last_id=0)
        try:
            evs = st.wait(lambda es: any(e["type"] == "done" and e["data"].get("turnId") == tid
                                         for e in es), 20, "the interrupted turn's end")
        finally:
            st.close()
        mine = [e for e in evs if e["data"].get("turnId") == tid]
        err = [e["data"] for e in mine if e["type"] == "runtime_error"]
        check(err and err[0]["reason"] == "interrupted", "runtime_error {reason: interrupted}", mine)
        check(mine[-1]["type"] == "done" and mine[-1]["data"]["stopReason"] == "interrupted",
              "then done", mine)
        check([e["type"] for e in mine].index("runtime_error") < [e["type"] for e in mine].index("done"),
              "runtime_error before done", mine)
        # the session starts again, with its history
        s1, b1, _ = d.req("POST", "/runtime/turn", {"sessionID": "dur", "input": {
            "type": "user_message", "text": "what was the word?"}})
        check(s1 == 404, "no live session after the restart until it is started", (s1, b1))
        d.start_session("dur")
        MODEL.set({"events": [text_chunk("plum"), stop_chunk()]})
        st = Stream(d, "dur", last_id=None)
        try:
            t2 = d.turn("dur", {"type": "user_message", "text": "what was the word?"})["turnId"]
            st.wait(lambda es: any(e["type"] == "done" and e["data"].get("turnId") == t2
                                   for e in es), 30, "done")
        finally:
            st.close()
        msgs = MODEL.requests[0]["body"]["messages"]
        roles = [(m["role"], m.get("content")) for m in msgs]
        check(roles[0] == ("user", "remember: the word is plum"), "the first message is there", roles)
        a = msgs[1]
        check(a["role"] == "assistant" and a["content"] == "I will sleep." and
              a["tool_calls"][0]["id"] == "zz", "the model's call is there", a)
        check(msgs[2] == {"role": "tool", "tool_call_id": "zz",
                          "content": "error: interrupted (the daemon stopped)"},
              "the interrupted call has a result", msgs[2])
        check(roles[-1] == ("user", "what was the word?"), "then the new message", roles)
    finally:
        d.stop()
        for pid in sleepers("61.5"):
            os.kill(pid, 9)


@S.case
def user_message_without_a_model_is_refused():
    saved = {k: os.environ.pop(k) for k in ("OPENAI_BASE_URL", "OPENAI_MODEL")}
    try:
        d = Daemon(os.path.join(TMP, "nomodel-state"))
        d.start()
    finally:
        os.environ.update(saved)
    try:
        d.start_session("nm")
        s, b, _ = d.req("POST", "/runtime/turn", {"sessionID": "nm", "input": {
            "type": "user_message", "text": "hi"}})
        check(s == 409 and "no model is configured" in b["error"]["message"], "refused, named",
              (s, b))
        tid = d.turn("nm", {"type": "tool_calls", "calls": [
            {"id": "a", "name": "exec", "arguments": {"command": "echo works"}}]})["turnId"]
        check(tid, "tool calls still work without a model")
    finally:
        d.stop()


@S.case
def session_stopped_during_a_turn():
    D.start_session("gone")
    st = Stream(D, "gone", last_id=None)
    try:
        tid = D.turn("gone", {"type": "tool_calls", "calls": [
            {"id": "s1", "name": "exec", "arguments": {"command": "echo on; sleep 30"}},
            {"id": "s2", "name": "exec", "arguments": {"command": "echo never"}}]})["turnId"]
        st.wait(lambda es: any(e["type"] == "tool_call_output" for e in es), 30, "output")
        s, b, _ = D.req("POST", "/runtime/stop", {"sessionID": "gone"})
        check(s == 200, "stopped", (s, b))
        evs = st.wait(lambda es: any(e["type"] == "done" for e in es), 30, "done")
        ends = {e["callId"]: e for e in of(evs, "tool_call_end")}
        check(ends["s1"]["outcome"] == "canceled", "the running call was killed", ends)
        check(ends["s2"]["outcome"] == "tool_error" and "not live" in ends["s2"]["result"],
              "the next one does not run outside the session", ends)
    finally:
        st.close()


@S.case
def time_and_token_budgets():
    cfg = os.path.join(TMP, "budget.yaml")
    with open(cfg, "w") as f:
        f.write("model:\n  turn_timeout: 2s\n  max_tokens: 20\n")
    d = Daemon(os.path.join(TMP, "budget-state"), config=cfg)
    d.start()
    try:
        d.start_session("b")
        MODEL.set({"events": [text_chunk("slow %d " % i) for i in range(8)] + [stop_chunk()],
                   "delay": 0.5})
        st = Stream(d, "b", last_id=None)
        try:
            t0 = time.monotonic()
            tid = d.turn("b", {"type": "user_message", "text": "slow"})["turnId"]
            evs = st.wait(lambda es: any(e["type"] == "done" for e in es), 30, "done")
            check(time.monotonic() - t0 < 10, "ended near its 2 s budget")
            err = of(evs, "runtime_error")
            check(len(err) == 1 and err[0]["reason"] == "time_budget", "time_budget", err)
            check(of(evs, "done")[0] == {"turnId": tid, "stopReason": "budget", "usage":
                                         of(evs, "done")[0]["usage"]}, "done budget", of(evs, "done"))
        finally:
            st.close()
        time.sleep(2.5)  # the slow stream's server thread finishes its script
        MODEL.set({"events": tool_call_chunks([("t1", "exec", '{"command":"true"}')]) +
                   [stop_chunk("tool_calls")]},
                  {"events": tool_call_chunks([("t2", "exec", '{"command":"true"}')]) +
                   [stop_chunk("tool_calls")]},
                  {"events": [text_chunk("x"), stop_chunk()]})
        st = Stream(d, "b", last_id=None)
        try:
            tid = d.turn("b", {"type": "user_message", "text": "tokens"})["turnId"]
            evs = st.wait(lambda es: any(e["type"] == "done" and e["data"]["turnId"] == tid
                                         for e in es), 30, "done")
            evs = turn_events(evs, tid)
            err = of(evs, "runtime_error")
            check(len(err) == 1 and err[0]["reason"] == "token_budget", "token_budget",
                  [(e["type"], e["time"]) for e in evs])
            check(of(evs, "done")[0]["usage"]["totalTokens"] == 30 and len(MODEL.requests) == 2,
                  "after 2 calls of 15 tokens", (of(evs, "done"), len(MODEL.requests)))
        finally:
            st.close()
    finally:
        d.stop()


@S.case
def a_turn_at_work_keeps_its_session_from_idling_out():
    cfg = os.path.join(TMP, "idle.yaml")
    with open(cfg, "w") as f:
        f.write("sandbox:\n  idle_timeout: 2s\n")
    d = Daemon(os.path.join(TMP, "idle-state"), config=cfg)
    d.start()
    try:
        d.start_session("idle")
        # 3.5 s of streaming text, longer than the idle timeout, then a tool call
        MODEL.set({"events": [text_chunk("t%d " % i) for i in range(7)] +
                   tool_call_chunks([("i1", "exec", '{"command":"echo still-here"}')]),
                   "delay": 0.5},
                  {"events": [text_chunk("done"), stop_chunk()]})
        st = Stream(d, "idle", last_id=None)
        try:
            tid = d.turn("idle", {"type": "user_message", "text": "long"})["turnId"]
            evs = st.wait(lambda es: any(e["type"] == "done" for e in es), 30, "done")
        finally:
            st.close()
        end = of(evs, "tool_call_end")
        check(end and end[0]["result"].strip() == "still-here",
              "the session was still there for the tool", end)
        check(of(evs, "done")[0]["stopReason"] == "stop", "the turn ended well", of(evs, "done"))
        time.sleep(3)
        s, b, _ = d.req("POST", "/runtime/turn", {"sessionID": "idle", "input": {
            "type": "tool_calls", "calls": []}})
        check(s == 404, "idle afterwards, the session ends as before", (s, b))
    finally:
        d.stop()


# ---- sandboxctl chat and turn ----

def ctl(*args, stdin=None, timeout=60):
    p = subprocess.run([SANDBOXCTL, "--url", "http://127.0.0.1:%d" % D.port, "--token", TOKEN]
                       + list(args), input=stdin, capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


@S.case
def sandboxctl_chat_and_turn():
    D.start_session("cli")
    MODEL.set({"events": [text_chunk("Checking. ")] +
               tool_call_chunks([("k1", "exec", '{"command":"echo from-the-tool"}')])},
              {"events": [text_chunk("It said "), text_chunk("hello."), stop_chunk()]})
    rc, out, err = ctl("chat", "cli", "what does it say?")
    check(rc == 0, "chat exits 0", (rc, out, err))
    check(out.startswith("Checking. \n-> exec {\"command\": \"echo from-the-tool\"}\n") or
          out.startswith("Checking. \n-> exec {\"command\":\"echo from-the-tool\"}\n"),
          "the text, then the call", out)
    check("from-the-tool\n<- k1: exit 0 (exited)\nIt said hello.\n" in out,
          "the tool's output, its end, the model's text", out)
    # the message from stdin
    MODEL.set({"events": [text_chunk("stdin ok"), stop_chunk()]})
    rc, out, err = ctl("chat", "cli", stdin="from stdin")
    check(rc == 0 and out == "stdin ok\n", "chat reads stdin", (rc, out, err))
    check(MODEL.requests[0]["body"]["messages"][-1]["content"] == "from stdin", "sent",
          MODEL.requests[0]["body"]["messages"][-1])
    # a model error: exit 1, the reason on stderr
    MODEL.set({"status": 400})
    rc, out, err = ctl("chat", "cli", "x")
    check(rc == 1 and "model_http_error" in err, "chat: a runtime_error exits 1", (rc, out, err))
    # tool calls, given as an array
    rc, out, err = ctl("turn", "cli", '[{"id":"t1","name":"exec","arguments":{"command":"echo hi; exit 2"}}]')
    check(rc == 0 and out == '-> exec {"command":"echo hi; exit 2"}\nhi\n<- t1: exit 2 (exited)\n',
          "turn prints the calls", (rc, out, err))
    rc, out, err = ctl("--json", "turn", "cli", '{"type":"tool_calls","calls":[{"id":"t2","name":"nope"}]}')
    lines = [json.loads(l) for l in out.splitlines()]
    check(rc == 0 and [l["type"] for l in lines] == ["turn_started", "tool_call_start", "tool_call_end", "done"],
          "--json: one event per line", (rc, out, err))
    rc, out, err = ctl("turn", "cli", "{not json")
    check(rc == 1 and "INPUT is not JSON" in err, "bad INPUT named", (rc, out, err))
    rc, out, err = ctl("turn", "cancel", "no-such-turn")
    check(rc == 1 and "404" in err, "cancel of no turn", (rc, out, err))
    rc, out, err = ctl("chat")
    check(rc == 2 and "chat SESSION" in err, "usage", (rc, out, err))


# ---- end ----

D.stop()
# Every daemon of this run ended cleanly (under ASan: without a leak).
for d in dict((id(x), x) for x in _daemons).values():
    if d.proc.returncode != 0:
        print("FAIL daemon exit status %r: %s" % (d.proc.returncode, d.output()[-3000:]))
        S.failed += 1
S.finish()
