#!/usr/bin/env python3
"""Skills: what the catalog's scan and a skill's run cost, against a real
`sandboxd serve` on loopback (--net none, its own state dir, a free port).

  1. POST /runtime/skills/reload (a fresh scan in the helper) with 100 small
     skills, then with a 10,000-file skill added: N rounds each, median and max;
     meanwhile a client sends GET /healthz back to back: its max latency;
  2. GET /runtime/skills (the clone's view, on the loop): median of N;
  3. POST /runtime/exec of a shared skill's action (`echo`) against the same
     script as a plain command: median and p90 of N each;
  4. inside one task, `claw-skill` N times in a loop: the per-call cost.

Usage: bench/skills.py [--rounds N] [--runs N]   (root; SANDBOXD=path picks the
binary). Prints a markdown table."""
import argparse
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SANDBOXD = os.environ.get("SANDBOXD") or os.path.join(HERE, "..", "build", "sandboxd")
TOKEN = "bench-" + "0123456789abcdef0123456789"


def req(port, method, path, body=None, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Authorization": "Bearer " + TOKEN}
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data) if data else None


def timed(fn, n):
    out = []
    for _ in range(n):
        t0 = time.monotonic()
        fn()
        out.append(time.monotonic() - t0)
    return out


def ms(v):
    return "%.1f ms" % (1000 * v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=30)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sbx-bench-skills-")
    os.chmod(tmp, 0o755)
    shared = os.path.join(tmp, "shared")
    for i in range(100):
        d = os.path.join(shared, "s%03d" % i)
        os.makedirs(os.path.join(d, "scripts"))
        with open(os.path.join(d, "SKILL.md"), "w") as f:
            f.write("---\nname: s%03d\ndescription: bench skill\n---\nbody\n" % i)
        with open(os.path.join(d, "scripts", "echo.sh"), "w") as f:
            f.write('echo "$@"\n')
    cfg = os.path.join(tmp, "cfg.yaml")
    with open(cfg, "w") as f:
        f.write("skills:\n  builtin_root: %s/none\n  shared_root: %s\n  mapped_root: %s/mapped\n"
                % (tmp, shared, tmp))
    log = open(os.path.join(tmp, "log"), "w+")
    p = subprocess.Popen([SANDBOXD, "serve", "--listen", "127.0.0.1:0", "--state-dir",
                          os.path.join(tmp, "state"), "--token", TOKEN, "--net", "none",
                          "--config", cfg], stdout=log, stderr=subprocess.STDOUT)
    rows = []
    try:
        port = None
        for _ in range(200):
            log.seek(0)
            m = re.search(r"listening on 127\.0\.0\.1:(\d+) ", log.read())
            if m:
                port = int(m.group(1))
                break
            time.sleep(0.05)
        req(port, "GET", "/runtime/skills")

        def reloads(label):
            lat, stop = [], threading.Event()

            def poll():
                while not stop.is_set():
                    t0 = time.monotonic()
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                    c.request("GET", "/healthz")
                    c.getresponse().read()
                    c.close()
                    lat.append(time.monotonic() - t0)
            t = threading.Thread(target=poll)
            t.start()
            r = timed(lambda: req(port, "POST", "/runtime/skills/reload"), a.rounds)
            stop.set()
            t.join()
            rows.append(("reload, %s (%d rounds)" % (label, a.rounds),
                         "median %s, max %s; GET /healthz meanwhile: %d, max %s" % (
                             ms(statistics.median(r)), ms(max(r)), len(lat), ms(max(lat)))))
        reloads("100 small skills")
        big = os.path.join(tmp, "mapped", "huge")
        os.makedirs(os.path.join(big, "scripts"))
        with open(os.path.join(big, "SKILL.md"), "w") as f:
            f.write("---\nname: huge\ndescription: many files\n---\n")
        with open(os.path.join(big, "scripts", "run.sh"), "w") as f:
            f.write("echo\n")
        for i in range(100):
            d = os.path.join(big, "data", "%03d" % i)
            os.makedirs(d)
            for j in range(100):
                with open(os.path.join(d, "f%03d" % j), "w") as f:
                    f.write("x\n")
        reloads("plus a 10,000-file skill")
        r = timed(lambda: req(port, "GET", "/runtime/skills"), a.runs)
        rows.append(("GET /runtime/skills, 101 skills (%d)" % a.runs,
                     "median %s" % ms(statistics.median(r))))
        script = os.path.join(shared, "s000", "scripts", "echo.sh")
        r1 = timed(lambda: req(port, "POST", "/runtime/exec",
                               {"skill": "s000", "action": "echo", "args": ["x"]}), a.runs)
        body = {"command": ["/bin/bash", "-c", open(script).read(), "x"]}
        r2 = timed(lambda: req(port, "POST", "/runtime/exec", body), a.runs)
        q = statistics.quantiles
        rows.append(("POST /runtime/exec of a skill's action (%d)" % a.runs,
                     "median %s, p90 %s" % (ms(statistics.median(r1)), ms(q(r1, n=10)[-1]))))
        rows.append(("POST /runtime/exec of the same script as a command (%d)" % a.runs,
                     "median %s, p90 %s" % (ms(statistics.median(r2)), ms(q(r2, n=10)[-1]))))
        loop = ("s=$(date +%%s%%N); for i in $(seq %d); do claw-skill s000 echo x >/dev/null; "
                "done; e=$(date +%%s%%N); echo $(( (e - s) / %d / 1000 ))" % (a.runs, a.runs))
        st, b = req(port, "POST", "/runtime/exec", {"command": ["/bin/sh", "-c", loop],
                                                    "timeoutSeconds": 600})
        rows.append(("claw-skill from inside a task, %d calls in a row" % a.runs,
                     "%s per call" % ms(int(b["stdout"]) / 1e6)))
    finally:
        p.terminate()
        p.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    print("| measure | result |\n|---|---|")
    for k, v in rows:
        print("| %s | %s |" % (k, v))


if __name__ == "__main__":
    main()
