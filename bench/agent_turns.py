#!/usr/bin/env python3
"""Latency of the agent's turns against a real daemon (release build) and a
fake OpenAI-compatible server on loopback (the model answers at once, so what
is measured is the daemon: HTTP, the store, the stream, the sandbox).

  1. a tool_calls turn of one `exec true` in a live session: POST
     /runtime/turn until its done event arrives on the stream;
  2. a user-message turn with one tool round trip: the model asks for `exec
     true`, gets its result, answers text; POST until done;
  3. a model answer of N text deltas: POST until done, deltas per second.

Usage: SANDBOXD=build/sandboxd python3 bench/agent_turns.py [RUNS]"""
import http.client
import http.server
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 100
SANDBOXD = os.environ.get("SANDBOXD", "build/sandboxd")
TOKEN = "bench-" + "0123456789abcdef0123456789"
DELTAS = 2000
script = []


def chunk(delta, finish=None):
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


class Model(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        events = script.pop(0)
        body = "".join("data: %s\n\n" % json.dumps(e) for e in events) + "data: [DONE]\n\n"
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Model)
threading.Thread(target=srv.serve_forever, daemon=True).start()
tmp = tempfile.mkdtemp(prefix="sbx-bench-agent-")
env = dict(os.environ, OPENAI_BASE_URL="http://127.0.0.1:%d/v1" % srv.server_address[1],
           OPENAI_MODEL="bench", OPENAI_API_KEY="bench-key")
log = open(os.path.join(tmp, "log"), "w+")
d = subprocess.Popen([SANDBOXD, "serve", "--listen", "127.0.0.1:0", "--state-dir",
                      os.path.join(tmp, "state"), "--token", TOKEN, "--net", "none"],
                     stdout=log, stderr=subprocess.STDOUT, env=env)
try:
    port = None
    for _ in range(300):
        log.seek(0)
        m = re.search(r"listening on 127\.0\.0\.1:(\d+) ", log.read())
        if m:
            port = int(m.group(1))
            break
        time.sleep(0.05)
    H = {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"}

    def post(path, body):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", path, json.dumps(body), H)
        r = c.getresponse()
        out = json.loads(r.read())
        c.close()
        return r.status, out

    st, _ = post("/runtime/start", {"sessionID": "bench"})
    assert st == 200, st
    sc = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    sc.request("GET", "/runtime/stream?sessionID=bench", headers=dict(H, Accept="text/event-stream"))
    sr = sc.getresponse()

    def until_done(tid):
        n = 0
        while True:
            line = sr.readline().decode()
            if line.startswith("data: "):
                ev = json.loads(line[6:])
                if ev["type"] == "text_delta":
                    n += 1
                if ev["type"] == "done" and ev["data"].get("turnId") == tid:
                    return n

    def turn(inp):
        t0 = time.perf_counter()
        st, b = post("/runtime/turn", {"sessionID": "bench", "input": inp})
        assert st == 200, b
        n = until_done(b["turnId"])
        return time.perf_counter() - t0, n

    def report(name, xs):
        xs = sorted(x * 1000 for x in xs)
        print("%-44s median %7.2f ms  p90 %7.2f ms  min %7.2f ms  (%d runs)" % (
            name, statistics.median(xs), xs[int(len(xs) * 0.9)], xs[0], len(xs)))

    calls = {"type": "tool_calls", "calls": [{"id": "c", "name": "exec",
                                              "arguments": {"command": ["true"]}}]}
    for _ in range(5):
        turn(calls)
    report("tool_calls turn, one exec true", [turn(calls)[0] for _ in range(RUNS)])

    call = chunk({"tool_calls": [{"index": 0, "id": "c", "type": "function", "function": {
        "name": "exec", "arguments": '{"command":["true"]}'}}]}, "tool_calls")
    xs = []
    for _ in range(RUNS):
        script[:] = [[call], [chunk({"content": "ok"}, "stop")]]
        xs.append(turn({"type": "user_message", "text": "go"})[0])
    report("user message, one tool round trip", xs)

    xs, rates = [], []
    for _ in range(max(RUNS // 10, 5)):
        script[:] = [[chunk({"content": "x"}) for _ in range(DELTAS)] + [chunk({}, "stop")]]
        dt, n = turn({"type": "user_message", "text": "talk"})
        assert n == DELTAS, n
        xs.append(dt)
        rates.append(n / dt)
    report("user message, %d text deltas" % DELTAS, xs)
    print("%-44s median %7.0f deltas/s" % ("", statistics.median(rates)))
    sc.close()
finally:
    d.send_signal(signal.SIGTERM)
    d.wait(15)
    srv.shutdown()
    shutil.rmtree(tmp, True)
