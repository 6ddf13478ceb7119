#!/usr/bin/env python3
"""What MCP and the metrics cost on top of the plain API, against a real
`sandboxd serve` on loopback (--net none, its own state dir, port 0):

  1. POST /runtime/exec {"command":["/bin/true"]}, one keep-alive client, N in
     sequence (after 20 uncounted), alternating with
  2. the same task through MCP: POST /mcp tools/call exec {"argv":["/bin/true"]}
     (alternating, so that both see the same load on a shared machine);
  3. GET /metrics after those (the scrape: render and answer), and its size;
  4. GET /openapi.json.

Every answer is checked (200, the task succeeded). Prints a markdown table of
p50 / p90 / p99 in milliseconds. Needs root. Usage:
  SANDBOXD=build/sandboxd bench/mcp.py [N]"""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 300
SANDBOXD = os.environ.get("SANDBOXD", os.path.join(os.path.dirname(__file__), "..", "build",
                                                   "sandboxd"))
TOKEN = "bench-" + "0123456789abcdef0123456789"
H = {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json",
     "Accept": "application/json, text/event-stream"}


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main():
    state = tempfile.mkdtemp(prefix="sbx-bench-mcp-")
    log = open(os.path.join(state, "log"), "w+")
    d = subprocess.Popen([SANDBOXD, "serve", "--listen", "127.0.0.1:0", "--state-dir",
                          os.path.join(state, "s"), "--token", TOKEN, "--net", "none"],
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        port = None
        for _ in range(200):
            log.seek(0)
            m = re.search(r"listening on 127\.0\.0\.1:(\d+) ", log.read())
            if m:
                port = int(m.group(1))
                break
            time.sleep(0.05)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

        def call(method, path, body=None):
            t0 = time.perf_counter()
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers=H)
            r = c.getresponse()
            data = r.read()
            dt = (time.perf_counter() - t0) * 1e3
            if r.status != 200:
                raise SystemExit("%s %s: %d %s" % (method, path, r.status, data[:300]))
            return dt, data

        rest = {"command": ["/bin/true"]}
        mcp = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "exec", "arguments": {"argv": ["/bin/true"]}}}
        kinds = [("POST /runtime/exec", "/runtime/exec", rest,
                  lambda b: json.loads(b)["status"] == "succeeded"),
                 ("POST /mcp tools/call exec", "/mcp", mcp,
                  lambda b: json.loads(b)["result"]["structuredContent"]["status"] ==
                  "succeeded")]
        times = {k[0]: [] for k in kinds}
        for i in range(N + 20):
            for label, path, body, ok in kinds:
                dt, data = call("POST", path, body)
                if not ok(data):
                    raise SystemExit("%s: %s" % (label, data[:300]))
                if i >= 20:
                    times[label].append(dt)
        rows = [(k[0], times[k[0]]) for k in kinds]
        size = 0
        for label, path in [("GET /metrics", "/metrics"), ("GET /openapi.json", "/openapi.json")]:
            xs = []
            for _ in range(N):
                dt, data = call("GET", path)
                xs.append(dt)
                size = len(data)
            rows.append(("%s (%d bytes)" % (label, size), xs))
        print("| request | n | p50 ms | p90 ms | p99 ms |")
        print("|---|---|---|---|---|")
        for label, xs in rows:
            print("| %s | %d | %.2f | %.2f | %.2f |" % (label, len(xs), pct(xs, 50), pct(xs, 90),
                                                      pct(xs, 99)))
    finally:
        d.send_signal(signal.SIGTERM)
        d.wait(30)
        shutil.rmtree(state, ignore_errors=True)


main()
