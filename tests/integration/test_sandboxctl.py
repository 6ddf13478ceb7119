"""sandboxctl against a fake daemon: a small threaded HTTP server that serves
canned answers for each route and records every request, so each case checks
what the client sends (method, path, query, headers, body) and what it makes
of the answer (output, exit status)."""
import hashlib
import http.client
import http.server
import json
import os
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
from sbxtest import EXTENDED, SANDBOXD, ServeDaemon, Suite, check  # noqa: E402

CTL = os.environ.get("SANDBOXCTL") or os.path.join(os.path.dirname(SANDBOXD), "sandboxctl")
S = Suite("sandboxctl")
MiB = 1 << 20


class Request:
    def __init__(self, method, target, headers, body, body_len, sha256):
        u = urllib.parse.urlsplit(target)
        self.method = method
        self.target = target
        self.path = u.path
        self.query = urllib.parse.parse_qs(u.query, keep_blank_values=True)
        self.headers = {k.lower(): v for k, v in headers.items()}
        self.body = body  # None when larger than 1 MiB
        self.body_len = body_len
        self.sha256 = sha256

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "%s %s %r body=%r" % (self.method, self.target, self.headers,
                                     (self.body or b"")[:200])


class Answer:
    """status, headers, and a body: bytes (a dict or list is sent as JSON), or
    stream: chunks written one by one (an event stream: no length, connection
    closed at the end; a chunk that is a float is a pause, in seconds)."""

    def __init__(self, status=200, body=b"", ctype="application/json", headers=None,
                 stream=None):
        self.status = status
        self.stream = stream
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        self.body = body
        self.ctype = ctype
        self.headers = headers or {}


def error(status, code, message):
    return Answer(status, {"error": {"code": code, "message": message}})


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def address_string(self):
        return "client"

    def read_body(self):
        h = hashlib.sha256()
        kept, total = [], 0

        fake = self.server.fake
        paused = False

        def take(data):
            nonlocal total, paused
            h.update(data)
            total += len(data)
            if fake.pause_after and total >= fake.pause_after and not paused:
                paused = True  # the client is mid-upload: let the test look at it
                time.sleep(fake.pause_s)
            if total <= MiB:
                kept.append(data)

        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                while size:
                    data = self.rfile.read(min(size, 65536))
                    size -= len(data)
                    take(data)
                self.rfile.readline()
        else:
            left = int(self.headers.get("Content-Length") or 0)
            while left:
                data = self.rfile.read(min(left, 65536))
                if not data:
                    break
                left -= len(data)
                take(data)
        return (b"".join(kept) if total <= MiB else None), total, h.hexdigest()

    def serve(self):
        body, n, digest = self.read_body()
        req = Request(self.command, self.path, dict(self.headers), body, n, digest)
        fake = self.server.fake
        with fake.lock:
            fake.requests.append(req)
        ans = fake.handler(req)
        self.send_response(ans.status)
        for k, v in ans.headers.items():
            self.send_header(k, v)
        if ans.ctype and ans.status != 204:
            self.send_header("Content-Type", ans.ctype)
        if ans.stream is not None:  # ended by closing
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            try:
                for chunk in ans.stream:
                    if isinstance(chunk, float):
                        time.sleep(chunk)
                        continue
                    self.wfile.write(chunk.encode() if isinstance(chunk, str) else chunk)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
            return
        if ans.status != 204:
            self.send_header("Content-Length", str(len(ans.body)))
        self.end_headers()
        if ans.status != 204:
            view = memoryview(ans.body)
            for i in range(0, len(view), 1 << 16):
                self.wfile.write(view[i:i + (1 << 16)])

    do_GET = do_POST = do_PUT = do_DELETE = serve


class UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class Fake:
    def __init__(self, unix_path=None):
        self.requests = []
        self.lock = threading.Lock()
        self.pause_after = 0  # bytes of a request body, then a pause of pause_s
        self.pause_s = 0.0
        self.handler = lambda req: error(404, "not_found", "no route %s" % req.path)
        if unix_path:
            self.httpd = UnixServer(unix_path, Handler)
            self.url = "unix:" + unix_path
        else:
            self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            self.httpd.daemon_threads = True
            self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.httpd.fake = self
        self.httpd.handle_error = self.quiet_error
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    @staticmethod
    def quiet_error(request, client_address):
        """A client that hangs up early is part of some cases; anything else
        is printed."""
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            socketserver.BaseServer.handle_error(None, request, client_address)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def base_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOX_")}
    # No token read from a local daemon's file unless a case asks for it.
    env["SANDBOX_TOKEN_FILE"] = "/nonexistent/sandbox-test-token"
    for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
              "all_proxy"):
        env.pop(k, None)
    return env


def ctl(fake, *args, stdin=None, env=None, url=True, timeout=60):
    argv = [CTL] + (["--url", fake.url] if url and fake else []) + list(args)
    p = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout,
                       env=env if env is not None else base_env())
    p.out = p.stdout.decode(errors="replace")
    p.err = p.stderr.decode(errors="replace")
    return p


TASK = {"id": "0190aaaa-bbbb", "command": ["sh", "-c", "echo hi"], "backend": "sandbox",
        "status": "succeeded", "createdAt": "2025-01-02T03:04:05Z",
        "startedAt": "2025-01-02T03:04:05Z", "endedAt": "2025-01-02T03:04:06Z", "error": "",
        "result": {"exitCode": 0, "stdout": "hi\n", "stderr": "", "outcome": "exited",
                   "startedAt": "2025-01-02T03:04:05Z", "endedAt": "2025-01-02T03:04:06Z"}}


@S.case
def status_sends_identity_and_prints():
    with Fake() as f:
        status = {"runtimeId": "rt-1", "tenantCode": "acme", "cloneId": "c1", "cloneKey": "k1",
                  "sessionId": "s1", "workspace": "/ws", "status": "ready"}
        f.handler = lambda req: Answer(200, status)
        p = ctl(f, "--token", "tok-123", "--tenant", "acme", "--clone-key", "k1",
                "--clone-id", "c1", "status")
        check(p.returncode == 0, "exit 0", p)
        r = f.requests[-1]
        check(r.method == "GET" and r.path == "/runtime/status", "GET /runtime/status", r)
        check(r.headers.get("authorization") == "Bearer tok-123", "bearer token", r)
        check(r.headers.get("x-tenant-code") == "acme" and r.headers.get("x-clone-key") == "k1"
              and r.headers.get("x-clone-id") == "c1", "clone headers", r)
        check(r.headers.get("user-agent", "").startswith("sandboxctl/"), "user agent", r)
        lines = p.out.splitlines()
        check("runtimeId:  rt-1" in lines and "status:     ready" in lines, "text", p.out)
        check(len({len(l) - len(l.split(":", 1)[1].lstrip()) for l in lines}) == 1,
              "values aligned", p.out)
        p = ctl(f, "status", "--json")
        check(p.returncode == 0 and json.loads(p.out) == status, "raw JSON", p.out)
        r = f.requests[-1]
        check("authorization" not in r.headers and "x-tenant-code" not in r.headers,
              "nothing sent unasked", r)


@S.case
def environment_supplies_url_and_token():
    with Fake() as f:
        f.handler = lambda req: Answer(200, {"status": "ready"})
        env = base_env()
        env.update(SANDBOX_URL=f.url, SANDBOX_TOKEN="env-tok", SANDBOX_TENANT="t9")
        p = ctl(None, "status", env=env)
        check(p.returncode == 0, "exit 0", p)
        r = f.requests[-1]
        check(r.headers.get("authorization") == "Bearer env-tok", "token from env", r)
        check(r.headers.get("x-tenant-code") == "t9", "tenant from env", r)
        p = ctl(None, "--token", "flag-tok", "status", env=env)
        check(f.requests[-1].headers.get("authorization") == "Bearer flag-tok", "flag wins",
              f.requests[-1])


@S.case
def exec_mirrors_exit_code_3():
    with Fake() as f:
        f.handler = lambda req: Answer(200, {"exitCode": 3, "stdout": "out line\n",
                                             "stderr": "err line\n", "startedAt": "a",
                                             "endedAt": "b"})
        p = ctl(f, "exec", "--timeout", "5", "--env", "A=1", "-e", "B=two words", "--",
                "sh", "-c", "echo out; exit 3")
        check(p.returncode == 3, "exit 3", p)
        check(p.out == "out line\n" and p.err == "err line\n", "stdout and stderr relayed", p)
        r = f.requests[-1]
        check(r.method == "POST" and r.path == "/runtime/exec", "POST /runtime/exec", r)
        check(r.headers.get("content-type") == "application/json", "JSON body", r)
        check(r.json() == {"command": ["sh", "-c", "echo out; exit 3"],
                           "env": {"A": "1", "B": "two words"}, "timeoutSeconds": 5},
              "the body", r)
        # --json: the answer as it came, still the task's exit status.
        p = ctl(f, "--json", "exec", "false")
        check(p.returncode == 3 and json.loads(p.out)["exitCode"] == 3, "raw, exit 3", p)
        check(f.requests[-1].json() == {"command": ["false"]}, "bare command", f.requests[-1])


@S.case
def exec_reports_timeout_and_truncation():
    with Fake() as f:
        # sandboxd's shape: the engine's report nested.
        f.handler = lambda req: Answer(200, {
            "taskId": "t1", "exitCode": 124, "stdout": "partial", "stderr": "",
            "status": "timeout", "error": "wall-clock limit of 1s reached",
            "report": {"outcome": "timeout", "exitCode": 124,
                       "message": "wall-clock limit of 1s reached", "stdoutTruncated": True,
                       "stdoutBytes": 20000000}})
        p = ctl(f, "exec", "--timeout", "1", "--session", "sess-1", "--memory", "64M", "--pids",
                "8", "--cpu", "0.5", "--", "sleep", "9")
        check(p.returncode == 124, "exit 124", p)
        check(p.out == "partial", "what was kept", p)
        check("task timeout: wall-clock limit of 1s reached" in p.err, "outcome said", p.err)
        check("stdout was cut" in p.err and "20000000" in p.err, "truncation said", p.err)
        check(p.err.count("wall-clock") == 1, "said once", p.err)
        check(f.requests[-1].json() == {"command": ["sleep", "9"], "timeoutSeconds": 1,
                                        "memoryMB": 64, "pids": 8, "cpu": 0.5,
                                        "sessionID": "sess-1"}, "limits sent", f.requests[-1])
        # The original's flat shape with the report merged in.
        f.handler = lambda req: Answer(200, {
            "exitCode": 137, "stdout": "", "stderr": "", "outcome": "oom",
            "message": "memory limit of 64 MiB reached"})
        p = ctl(f, "exec", "--", "hog")
        check(p.returncode == 137 and "task oom: memory limit of 64 MiB reached" in p.err,
              "flat report", p)


@S.case
def run_sends_language_and_code():
    with Fake() as f:
        f.handler = lambda req: Answer(200, {"exitCode": 0, "stdout": "2\n", "stderr": ""})
        p = ctl(f, "run", "--language", "python", "-c", "print(1+1)")
        check(p.returncode == 0 and p.out == "2\n", "output", p)
        check(f.requests[-1].json() == {"language": "python", "code": "print(1+1)"}, "body",
              f.requests[-1])
        with tempfile.NamedTemporaryFile("w", suffix=".js", delete=False) as src:
            src.write("console.log('é')\n")
        try:
            p = ctl(f, "run", "-l", "node", src.name)
            check(p.returncode == 0, "exit 0", p)
            check(f.requests[-1].json() == {"language": "node", "code": "console.log('é')\n"},
                  "file read", f.requests[-1])
        finally:
            os.unlink(src.name)
        p = ctl(f, "run", "-l", "shell", "-", stdin=b"echo from stdin\n")
        check(f.requests[-1].json()["code"] == "echo from stdin\n", "stdin read", f.requests[-1])
        p = ctl(f, "run", "-l", "python", "/nonexistent/x.py")
        check(p.returncode == 1 and "/nonexistent/x.py" in p.err, "missing file named", p)


@S.case
def detach_queues_a_task():
    with Fake() as f:
        f.handler = lambda req: Answer(201, dict(TASK, status="pending", result=None))
        p = ctl(f, "exec", "--detach", "--", "sleep", "1")
        check(p.returncode == 0 and p.out == TASK["id"] + "\n", "prints the id", p)
        r = f.requests[-1]
        check(r.method == "POST" and r.path == "/runtime/tasks", "POST /runtime/tasks", r)
        check(r.json() == {"command": ["sleep", "1"]}, "body", r)


@S.case
def error_json_becomes_the_message():
    with Fake() as f:
        f.handler = lambda req: error(404, "not_found", "no task nope")
        p = ctl(f, "tasks", "get", "nope")
        check(p.returncode == 1, "exit 1", p)
        check(p.err.strip() == "sandboxctl: 404 not_found: no task nope", "the message", p.err)
        check(p.out == "", "nothing on stdout", p)
        f.handler = lambda req: error(429, "queue_full", "tenant acme: queue share full")
        p = ctl(f, "exec", "--", "true")
        check(p.returncode == 1 and
              "sandboxctl: 429 queue_full: tenant acme: queue share full" in p.err, "429", p)
        f.handler = lambda req: Answer(502, "<html>Bad gateway</html>", ctype="text/html")
        p = ctl(f, "status")
        check(p.returncode == 1 and "502 Bad Gateway: <html>Bad gateway</html>" in p.err,
              "non-JSON error", p)
        f.handler = lambda req: Answer(200, "not json", ctype="text/plain")
        p = ctl(f, "status")
        check(p.returncode == 1 and "not JSON" in p.err, "non-JSON answer", p)


@S.case
def usage_errors_exit_2_and_send_nothing():
    with Fake() as f:
        cases = [(["exec", "--timeout", "abc", "--", "true"], "--timeout"),
                 (["exec", "--env", "1=x", "--", "true"], "--env"),
                 (["tasks", "list", "--status", "bogus"], "bogus"),
                 (["tasks", "list", "--limit", "0"], "--limit"),
                 (["--tenant", "../x", "status"], "--tenant"),
                 (["--frobnicate", "status"], "--frobnicate"),
                 (["stream", "--session"], "--session"),
                 (["files", "put", "x"], "files"),
                 (["nope"], "nope")]
        for args, word in cases:
            p = ctl(f, *args)
            check(p.returncode == 2, "exit 2 for %s" % args, p)
            check(word in p.err, "names %s" % word, p.err)
        p = ctl(None, "--url", "ftp://h", "status")
        check(p.returncode == 2 and "--url" in p.err and "ftp://h" in p.err, "bad url", p)
        check(f.requests == [], "no request sent", f.requests)
        p = ctl(None, "--help")
        check(p.returncode == 0 and "tasks wait" in p.out, "help", p)


@S.case
def connection_failure_names_the_url():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    url = "http://127.0.0.1:%d" % port
    p = ctl(None, "--url", url, "status")
    check(p.returncode == 1 and ("cannot connect to " + url) in p.err, "names the URL", p)
    p = ctl(None, "--url", "unix:/nonexistent/sbx.sock", "tasks", "wait", "x")
    check(p.returncode == 1 and "cannot connect to unix:/nonexistent/sbx.sock" in p.err,
          "names the socket", p)


@S.case
def unix_socket():
    d = tempfile.mkdtemp(prefix="sbxctl-")
    path = os.path.join(d, "api.sock")
    try:
        with Fake(unix_path=path) as f:
            f.handler = lambda req: Answer(200, {"status": "ready"})
            p = ctl(f, "--token", "t", "status")
            check(p.returncode == 0 and "ready" in p.out, "status over the socket", p)
            check(f.requests[-1].headers.get("authorization") == "Bearer t", "token", f.requests)
    finally:
        if os.path.exists(path):
            os.unlink(path)
        os.rmdir(d)


@S.case
def tasks_list_pages_and_filters():
    pages = {"": ([dict(TASK, id="t1")], "c1"), "c1": ([dict(TASK, id="t2")], "c2"),
             "c2": ([dict(TASK, id="t3", status="failed",
                          result={"exitCode": 3})], None)}

    def handler(req):
        cursor = req.query.get("cursor", [""])[0]
        tasks, nxt = pages[cursor]
        body = {"tasks": tasks}
        if nxt:
            body["nextCursor"] = nxt
        return Answer(200, body)

    with Fake() as f:
        f.handler = handler
        p = ctl(f, "tasks", "list", "--status", "succeeded", "--limit", "1")
        check(p.returncode == 0, "exit 0", p)
        r = f.requests[-1]
        check(r.method == "GET" and r.path == "/runtime/tasks", "GET /runtime/tasks", r)
        check(r.query == {"status": ["succeeded"], "limit": ["1"]}, "filters", r)
        check(p.out.splitlines()[0].split() == ["ID", "STATUS", "EXIT", "CREATED", "COMMAND"],
              "header", p.out)
        check("t1" in p.out and "t2" not in p.out, "one page", p.out)
        check("--cursor c1" in p.err, "says there is more", p.err)
        del f.requests[:]
        p = ctl(f, "tasks", "list", "--all", "--limit", "1")
        check(p.returncode == 0, "exit 0", p)
        check([r.query.get("cursor") for r in f.requests] == [None, ["c1"], ["c2"]],
              "follows nextCursor", f.requests)
        rows = p.out.splitlines()[1:]
        check([r.split()[0] for r in rows] == ["t1", "t2", "t3"], "all rows", p.out)
        check(rows[2].split()[1:3] == ["failed", "3"], "exit column", rows)
        p = ctl(f, "tasks", "list", "--all", "--json")
        check([t["id"] for t in json.loads(p.out)["tasks"]] == ["t1", "t2", "t3"],
              "--json --all", p.out)
        # The original's bare array.
        f.handler = lambda req: Answer(200, [TASK])
        p = ctl(f, "tasks", "list")
        check(p.returncode == 0 and TASK["id"] in p.out and "sh -c 'echo hi'" in p.out,
              "bare array", p.out)


@S.case
def tasks_get_and_cancel():
    with Fake() as f:
        f.handler = lambda req: Answer(200, dict(TASK, status="canceled") if
                                       req.path.endswith("/cancel") else TASK)
        p = ctl(f, "tasks", "get", TASK["id"])
        check(p.returncode == 0, "exit 0", p)
        check(f.requests[-1].path == "/runtime/tasks/" + TASK["id"], "path", f.requests[-1])
        check("status:" in p.out and "succeeded" in p.out and "result.exitCode" in p.out and
              "result.stdout:" in p.out and "3 bytes" in p.out, "the record", p.out)
        p = ctl(f, "tasks", "get", TASK["id"], "--json")
        check(json.loads(p.out) == TASK, "raw", p.out)
        p = ctl(f, "tasks", "cancel", "a b/c")
        r = f.requests[-1]
        check(r.method == "POST" and r.target == "/runtime/tasks/a%20b%2Fc/cancel",
              "POST …/cancel, id escaped", r)
        check(p.returncode == 0 and "canceled" in p.out, "says canceled", p)


@S.case
def network_rules_of_a_task_and_a_session():
    with Fake() as f:
        f.handler = lambda req: Answer(200, {"ok": True})
        p = ctl(f, "tasks", "network", "a b", "--deny", "*.evil.test", "--deny", ":25",
                "--allow", "10.1.2.3:443", "--default", "deny")
        r = f.requests[-1]
        check(p.returncode == 0 and p.out == "rules set for task a b\n", "exit 0, said", p)
        check(r.method == "POST" and r.target == "/runtime/tasks/a%20b/network", "path", r)
        check(r.json() == {"default": "deny", "allow": ["10.1.2.3:443"],
                           "deny": ["*.evil.test", ":25"]}, "the rules as given", r)
        p = ctl(f, "session", "network", "s1")
        r = f.requests[-1]
        check(p.returncode == 0 and r.target == "/runtime/network" and
              r.json() == {"sessionID": "s1"}, "no rules: the operator's again", r)
        f.handler = lambda req: error(409, "conflict", "task t9 has no egress")
        p = ctl(f, "tasks", "network", "t9", "--deny", "x.test")
        check(p.returncode == 1 and "no egress" in p.err, "the daemon's refusal", p)
        n = len(f.requests)
        p = ctl(f, "session", "network", "s1", "--default", "sometimes")
        check(p.returncode == 2 and "--default" in p.err and len(f.requests) == n,
              "a bad value is named, nothing sent", p)


@S.case
def tasks_wait_polls_until_final():
    polls = []

    def handler(req):
        polls.append(time.monotonic())
        if len(polls) < 3:
            return Answer(200, dict(TASK, status="running" if polls else "pending", result=None))
        return Answer(200, dict(TASK, status="failed", result={
            "exitCode": 3, "stdout": "done\n", "stderr": "oops\n", "outcome": "exited"}))

    with Fake() as f:
        f.handler = handler
        p = ctl(f, "tasks", "wait", TASK["id"])
        check(p.returncode == 3, "exit 3", p)
        check(len(polls) == 3, "polled until final", polls)
        check(p.out == "done\n" and p.err == "oops\n", "output relayed", p)
        f.handler = lambda req: Answer(200, dict(TASK, status="canceled", result=None))
        p = ctl(f, "tasks", "wait", "x")
        check(p.returncode == 124, "canceled without result: 124", p)


@S.case
def files_get_streams_to_stdout_and_file():
    data = os.urandom(3 * MiB + 17)
    with Fake() as f:
        f.handler = lambda req: (Answer(200, data, ctype="application/octet-stream")
                                 if req.query.get("path") == ["dir/a b.bin"]
                                 else error(404, "not_found", "no such file"))
        p = ctl(f, "files", "get", "dir/a b.bin")
        check(p.returncode == 0 and p.stdout == data, "to stdout", (p.returncode, p.err))
        r = f.requests[-1]
        check(r.method == "GET" and r.path == "/runtime/files", "GET /runtime/files", r)
        d = tempfile.mkdtemp(prefix="sbxctl-")
        try:
            out = os.path.join(d, "copy.bin")
            p = ctl(f, "files", "get", "dir/a b.bin", "-o", out)
            check(p.returncode == 0 and p.out == "", "to a file", p)
            with open(out, "rb") as fh:
                check(fh.read() == data, "same bytes", None)
            missing = os.path.join(d, "missing.bin")
            p = ctl(f, "files", "get", "nope", "-o", missing)
            check(p.returncode == 1 and "404 not_found: no such file" in p.err, "404", p)
            check(os.listdir(d) == ["copy.bin"], "no file left by a failure", os.listdir(d))
        finally:
            for n in os.listdir(d):
                os.unlink(os.path.join(d, n))
            os.rmdir(d)


def run_peak(argv, stdin=None):
    """Run argv; returns (exit status, stdout, stderr, peak RSS in KiB). The
    peak is the process's VmHWM, sampled until it exits (ru_maxrss would
    count the pages of this Python process that forked it)."""
    p = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=base_env())
    peak = 0
    status_file = "/proc/%d/status" % p.pid
    while p.poll() is None:
        try:
            with open(status_file) as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.005)
    return p.returncode, p.stdout.read(), p.stderr.read(), peak


def sanitized():
    with open(CTL, "rb") as fh:
        return b"__asan_init" in fh.read()


@S.case
def files_put_streams_20_mib():
    size = 20 * MiB
    d = tempfile.mkdtemp(prefix="sbxctl-")
    src = os.path.join(d, "big.bin")
    h = hashlib.sha256()
    with open(src, "wb") as fh:
        for _ in range(20):
            chunk = os.urandom(MiB)
            h.update(chunk)
            fh.write(chunk)
    try:
        with Fake() as f:
            f.handler = lambda req: Answer(201, {"path": "up/big.bin", "size": req.body_len})
            f.pause_after, f.pause_s = 18 * MiB, 0.3
            code, out, err, rss = run_peak([CTL, "--url", f.url, "files", "put", src,
                                            "up/big.bin"])
            f.pause_after = 0
            check(code == 0 and out == b"", "exit 0, quiet", (code, out, err))
            r = f.requests[-1]
            check(r.method == "PUT" and r.path == "/runtime/files" and
                  r.query == {"path": ["up/big.bin"]}, "PUT /runtime/files?path=", r)
            check(r.headers.get("content-length") == str(size), "Content-Length sent", r)
            check(r.body_len == size and r.sha256 == h.hexdigest(), "every byte arrived",
                  (r.body_len, r.sha256))
            if not sanitized():
                # Held whole, the file alone would take the peak past 20 MiB.
                check(0 < rss < 20 * 1024, "streamed, not held (peak RSS %d KiB)" % rss, rss)
                print("     peak RSS of a 20 MiB upload: %d KiB" % rss)
            # From stdin: length unknown, chunked.
            cat = subprocess.Popen(["cat", src], stdout=subprocess.PIPE)
            code, out, err, _ = run_peak([CTL, "--url", f.url, "--json", "files", "put", "-",
                                          "up/stdin.bin"], stdin=cat.stdout)
            cat.stdout.close()
            cat.wait()
            r = f.requests[-1]
            check(code == 0 and json.loads(out)["size"] == size, "--json answer", (code, err))
            check(r.headers.get("transfer-encoding") == "chunked", "chunked", r)
            check(r.body_len == size and r.sha256 == h.hexdigest(), "every byte arrived", r)
            f.handler = lambda req: error(413, "too_large", "file over the 100 MB limit")
            p = ctl(f, "files", "put", src, "x")
            check(p.returncode == 1 and "413 too_large: file over the 100 MB limit" in p.err,
                  "413", p)
            p = ctl(f, "files", "put", os.path.join(d, "absent"), "x")
            check(p.returncode == 1 and "absent" in p.err, "missing local file", p)
    finally:
        os.unlink(src)
        os.rmdir(d)


@S.case
def files_ls_and_rm():
    listing = {"path": "/", "entries": [
        {"name": "a.txt", "type": "file", "size": 12, "mode": 0o644, "mtime": 0},
        {"name": "src", "type": "dir", "size": 4096, "mode": 0o755,
         "mtime": "2025-02-03T04:05:06Z"}]}

    def handler(req):
        if req.method == "DELETE":
            return Answer(204)
        if req.query["path"] == ["a.txt"]:
            return Answer(200, b"x" * 10 * MiB, ctype="application/octet-stream")
        return Answer(200, listing)

    with Fake() as f:
        f.handler = handler
        p = ctl(f, "files", "ls")
        check(p.returncode == 0, "exit 0", p)
        check(f.requests[-1].query == {"path": ["/"]}, "default path", f.requests[-1])
        lines = p.out.splitlines()
        check(lines[0].split() == ["0644", "file", "12", "1970-01-01T00:00:00Z", "a.txt"] and
              lines[1].split() == ["0755", "dir", "4096", "2025-02-03T04:05:06Z", "src/"],
              "listing", p.out)
        p = ctl(f, "files", "ls", "src", "--json")
        check(json.loads(p.out) == listing, "raw", p.out)
        p = ctl(f, "files", "ls", "a.txt")
        check(p.returncode == 1 and "a.txt is not a directory" in p.err, "a file", p)
        p = ctl(f, "files", "rm", "old/x.log")
        r = f.requests[-1]
        check(p.returncode == 0 and r.method == "DELETE" and r.path == "/runtime/files" and
              r.query == {"path": ["old/x.log"]}, "DELETE", (p, r))


def event(i, typ, data, multiline=False):
    body = {"id": i, "type": typ, "time": "2025-01-01T00:00:0%dZ" % i, "sessionId": "s1",
            "data": data}
    text = json.dumps(body, indent=1 if multiline else None)
    return "id: %d\nevent: %s\n%s\n\n" % (i, typ, "\n".join("data: " + l
                                                            for l in text.split("\n")))


@S.case
def stream_parses_and_resumes():
    conns = []

    def handler(req):
        conns.append(req)
        n = len(conns)
        if n == 1:
            return Answer(200, stream=["retry: 50\n", ": connected\n\n",
                                event(1, "runtime_started", {"runtimeId": "rt"}),
                                event(2, "tool_call_output",
                                      {"taskId": "t1", "stream": "stdout", "data": "a\nb"},
                                      multiline=True),
                                0.05, "id: 3\ndata: {\"cut\":"],  # dropped mid-event
                          ctype="text/event-stream")
        if n == 2:
            return Answer(200, stream=[": hb\n\n", event(3, "exec_finished",
                                                  {"taskId": "t1", "exitCode": 0})],
                          ctype="text/event-stream")
        return Answer(204, ctype=None)  # no more: the client stops

    with Fake() as f:
        f.handler = handler
        p = ctl(f, "stream", "--session", "s1")
        check(p.returncode == 0, "exit 0 after 204", p)
        check(len(conns) == 3, "reconnected twice", conns)
        check(conns[0].query == {"sessionID": ["s1"]} and conns[0].path == "/runtime/stream",
              "GET /runtime/stream?sessionID=", conns[0])
        check(conns[0].headers.get("accept") == "text/event-stream", "Accept", conns[0])
        check("last-event-id" not in conns[0].headers, "no id at first", conns[0])
        check(conns[1].headers.get("last-event-id") == "2", "resumes after 2 (3 was cut)",
              conns[1])
        check(conns[2].headers.get("last-event-id") == "3", "then after 3", conns[2])
        lines = p.out.splitlines()
        check(lines == ['1 runtime_started runtimeId="rt"',
                        '2 tool_call_output taskId="t1" stream="stdout" data="a\\nb"',
                        '3 exec_finished taskId="t1" exitCode=0'], "human lines", p.out)

        del conns[:]
        p = ctl(f, "stream", "--session", "s1", "--json", "--last-event-id", "0")
        check(p.returncode == 0, "exit 0", p)
        check(conns[0].headers.get("last-event-id") == "0", "--last-event-id sent", conns[0])
        evs = [json.loads(l) for l in p.out.splitlines()]
        check([e["id"] for e in evs] == [1, 2, 3], "one JSON event per line", p.out)
        check(evs[1]["data"]["data"] == "a\nb", "multi-line data joined", evs[1])


@S.case
def stream_errors():
    with Fake() as f:
        f.handler = lambda req: error(404, "not_found", "no session nope")
        p = ctl(f, "stream", "--session", "nope")
        check(p.returncode == 1 and "404 not_found: no session nope" in p.err, "404", p)
        f.handler = lambda req: error(401, "unauthorized", "token required")
        p = ctl(f, "stream", "--session", "s")
        check(p.returncode == 1 and "401 unauthorized" in p.err and len(f.requests) == 2,
              "no retry on 401", p)

        # A reader that leaves ends the stream quietly.
        def forever(req):
            return Answer(200, stream=[event(i, "tick", {"n": i}) for i in range(1, 2000)],
                          ctype="text/event-stream")
        f.handler = forever
        p = subprocess.run("%s --url %s stream --session s | head -2" % (CTL, f.url),
                           shell=True, capture_output=True, timeout=60, env=base_env())
        check(p.stdout.decode().splitlines() == ["1 tick n=1", "2 tick n=2"], "head", p)
        check(p.stderr == b"", "no complaint", p)


class RealDaemon(ServeDaemon):
    """A real `sandboxd serve` for the end-to-end cases (--net none)."""

    def req(self, method, path, body=None, token=None, timeout=20):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=dict(EXTENDED))
            r = c.getresponse()
            data = r.read()
            return r.status, json.loads(data) if data else None, dict(r.getheaders())
        finally:
            c.close()


@S.case
def sessions_end_to_end_with_a_real_daemon():
    token = "ctl-e2e-" + "0123456789abcdef0123"
    state = tempfile.mkdtemp(prefix="sbx-ctl-")
    d = RealDaemon(os.path.join(state, "s"), token).start()
    try:
        env = dict(base_env(), SANDBOX_URL="http://127.0.0.1:%d" % d.port, SANDBOX_TOKEN=token)
        p = ctl(None, "session", "start", "s1", env=env)
        check(p.returncode == 0 and p.out == "s1\n", "session start prints its id", p)
        p = ctl(None, "exec", "--session", "s1", "--", "sh", "-c", "echo kept > /tmp/f", env=env)
        check(p.returncode == 0, "a task in the session", p)
        p = ctl(None, "exec", "--session", "s1", "--", "cat", "/tmp/f", env=env)
        check(p.returncode == 0 and p.out == "kept\n", "the next task sees its /tmp", p)
        p = ctl(None, "session", "start", env=env)
        check(p.returncode == 0 and len(p.out.strip()) == 36, "an unnamed session gets an id", p)
        p = ctl(None, "session", "network", "s1", "--deny", "x.test", env=env)
        check(p.returncode == 1 and "no egress" in p.err,
              "rules for a session without an egress (--net none): refused, said", p)
        p = ctl(None, "--json", "session", "stop", "s1", env=env)
        check(p.returncode == 0 and json.loads(p.out)["ok"] is True
              and json.loads(p.out)["sessionId"] == "s1", "stop --json", p)
        p = ctl(None, "exec", "--session", "s1", "--", "cat", "/tmp/f", env=env)
        check(p.returncode == 1, "after the stop, a fresh sandbox: no /tmp/f", p)
        p = ctl(None, "session", "start", "a/b", env=env)
        check(p.returncode == 2 and "'a/b'" in p.err, "a bad id is named", p)
    finally:
        d.stop()
        shutil.rmtree(state, ignore_errors=True)


@S.case
def sends_the_extended_switch():
    # Our answers on the original's routes (docs/compatibility.md): sandboxctl
    # always asks for them.
    with Fake() as f:
        f.handler = lambda req: Answer(200, {"ok": True, "status": "ready"})
        p = ctl(f, "--token", "t", "status")
        check(p.returncode == 0, "exit 0", p)
        check(f.requests[-1].headers.get("x-sandbox-extended") == "1", "the switch sent",
              f.requests[-1])


@S.case
def seed_004_run_with_the_request_on_stdin():
    # The seed's command as written: JSON on stdin, --server, the environment
    # by a seed 004 name; the token from a local daemon's token file.
    token = "seed-004-" + "0123456789abcdef01234"
    state = tempfile.mkdtemp(prefix="sbx-ctl-seed-")
    d = RealDaemon(os.path.join(state, "s"), token).start()
    try:
        tf = os.path.join(state, "api-token")
        with open(tf, "w") as f:
            f.write(token + "\n")
        env = dict(base_env(), SANDBOX_TOKEN_FILE=tf)
        server = "http://localhost:%d" % d.port
        p = ctl(None, "run", "--server", server, env=env,
                stdin=b'{"code": "print(\\"Hello from Sandbox!\\")", "env": "python-3.9"}\n')
        check(p.returncode == 0 and p.out == "Hello from Sandbox!\n" and p.err == "",
              "the seed's command", p)
        p = ctl(None, "run", "--server", server, env=env,
                stdin=b'{"code": "import sys; print(\\"e\\", file=sys.stderr); sys.exit(7)",'
                      b' "env": "python", "timeout": 20}')
        check(p.returncode == 7 and p.err == "e\n", "exit status and stderr", p)
        p = ctl(None, "run", "--json", "--server", server, env=env,
                stdin=b'{"code": "print(1)", "env": "python3"}')
        check(p.returncode == 0 and json.loads(p.out)["return_code"] == 0
              and set(json.loads(p.out)) == {"stdout", "stderr", "return_code", "execution_time"},
              "--json: /execute's answer", p)
        p = ctl(None, "run", "--server", server, env=env, stdin=b"print(1)")
        check(p.returncode == 2 and "not a JSON request" in p.err, "not JSON: named", p)
        p = ctl(None, "run", "--server", server, env=env,
                stdin=b'{"code": "1", "env": "cobol-85"}')
        check(p.returncode == 1 and "cobol-85" in p.err, "an unknown environment is named", p)
        p = ctl(None, "run", "--server", server, env=env,
                stdin=b'{"code": "1", "image": "x"}')
        check(p.returncode == 1 and "image" in p.err, "an unknown field is named", p)
        p = ctl(None, "run", "--server", server, env=base_env(),
                stdin=b'{"code": "print(1)"}')
        check(p.returncode == 1 and "401" in p.err, "no token, no file: 401", p)
    finally:
        d.stop()
        shutil.rmtree(state, ignore_errors=True)



@S.case
def plain_http_loads_no_libcurl():
    """http:// and unix: targets are served by sandboxctl's own HTTP/1.1
    (docs/performance.md): libcurl and its thirty-odd libraries are not
    loaded at all, nor linked."""
    p = subprocess.run(["readelf", "-d", CTL], capture_output=True, text=True, timeout=30)
    check(p.returncode == 0 and "NEEDED" in p.stdout and "libcurl" not in p.stdout,
          "sandboxctl does not link libcurl", p.stdout)
    with Fake() as f:
        f.handler = lambda req: Answer(200, {"status": "ready"})
        env = base_env()
        env["LD_DEBUG"] = "files"
        p = ctl(f, "status", env=env)
        check(p.returncode == 0 and "ready" in p.out, "status answered", p)
        check("libcurl" not in p.err and "calling init" in p.err,
              "no libcurl loaded for http://", p.err[-2000:])


@S.case
def https_and_proxies_go_through_libcurl():
    """What our HTTP/1.1 does not do, libcurl does, loaded then: TLS (here
    refused by a plain HTTP server) and a proxy named by http_proxy (the
    fake server acting as one receives the absolute URL)."""
    with Fake() as f:
        f.handler = lambda req: Answer(200, {"status": "ready"})
        env = base_env()
        env["LD_DEBUG"] = "files"
        port = f.url.rsplit(":", 1)[1]
        p = ctl(None, "--url", "https://127.0.0.1:%s" % port, "status", env=env)
        check(p.returncode == 1 and "cannot connect to https://127.0.0.1:%s" % port in p.err,
              "https: libcurl's TLS, refused by a plain server", p)
        check("libcurl.so" in p.err, "libcurl loaded for https", p.err[-2000:])
        env = base_env()
        env["http_proxy"] = f.url
        p = ctl(None, "--url", "http://sandbox.invalid:8080", "status", env=env)
        check(p.returncode == 0 and "ready" in p.out, "through the proxy", p)
        check(f.requests[-1].target == "http://sandbox.invalid:8080/runtime/status",
              "the proxy got the absolute URL", f.requests[-1])


@S.case
def kept_connection_serves_many_requests():
    """tasks wait polls on one kept-alive connection; a server that closes
    it between two requests is met with a new one."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    conns, served = [], []
    body = json.dumps(dict(TASK, status="running")).encode()
    final = json.dumps(TASK).encode()

    def serve():
        n = 0
        while n < 4:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            conns.append(c)
            buf = b""
            while n < 4:
                while b"\r\n\r\n" not in buf:
                    chunk = c.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                if b"\r\n\r\n" not in buf:
                    break
                head, _, buf = buf.partition(b"\r\n\r\n")
                served.append((len(conns), head.split(b"\r\n")[0]))
                n += 1
                b = final if n == 4 else body
                # chunked, as libmicrohttpd sends streams
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
                          % (len(b), b))
                if n == 2:  # the server ends this connection: the client opens another
                    c.close()
                    break
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        p = ctl(None, "--url", "http://127.0.0.1:%d" % port, "tasks", "wait", TASK["id"],
                timeout=60)
        check(p.returncode == 0 and p.out == "hi\n", "waited to the end", p)
        check([c for c, _ in served] == [1, 1, 2, 2],
              "two requests on each connection, a new one after the close", served)
    finally:
        srv.close()
        for c in conns:
            c.close()


S.finish()
