"""OpenSandbox snapshots of a running sandbox (docs/opensandbox.md): a real
`sandboxd serve` on loopback (--net none), one sandbox whose workspace holds
FILES small files (1 MiB in all) and a background loop stamping the time
every 2 ms. Each of RUNS rounds (after 3 uncounted) changes one file, then:
  - snapshot: POST /v1/sandboxes/{id}/snapshots until GET says Ready
    (polled every 2 ms; the client's view, HTTP included);
  - frozen: the longest gap between two of the loop's stamps around it,
    i.e. how long the sandbox's processes were stopped (plus the loop's
    own period), and the same gap over 0.2 s without a snapshot (what the
    machine's load alone gives);
  - from snapshot: POST /v1/sandboxes {snapshotId} until it answers Running
    (the workspace restored into a new clone, then its session started).
Usage: python3 bench/opensandbox_snapshot.py [RUNS] [FILES]
SANDBOXD=path picks the binary. Needs root."""
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SANDBOXD = os.environ.get("SANDBOXD", "build/sandboxd")
TOKEN = "op-bench-" + "0123456789abcdef0123456"
RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
FILES = int(sys.argv[2]) if len(sys.argv) > 2 else 100
tmp = tempfile.mkdtemp(prefix="sbx-ossnapbench-")
cfg = os.path.join(tmp, "cfg.yaml")
with open(cfg, "w") as f:
    f.write("retention:\n  snapshots: 1000\n")
log = open(os.path.join(tmp, "log"), "w+")
proc = subprocess.Popen([SANDBOXD, "serve", "--listen", "127.0.0.1:0", "--state-dir",
                         os.path.join(tmp, "state"), "--token", TOKEN, "--net", "none",
                         "--config", cfg, "--total-memory", "0", "--total-cpu", "0",
                         "--total-pids", "0"], stdout=log, stderr=subprocess.STDOUT)
port = None


def req(method, path, body=None, raw=False):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    h = {"OPEN-SANDBOX-API-KEY": TOKEN}
    if body is not None and not isinstance(body, bytes):
        body = json.dumps(body).encode()
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    if raw:
        return r.status, data
    return r.status, json.loads(data) if data and data[:1] in b"{[" else data


def execd(sid, rest):
    return "/v1/sandboxes/%s/proxy/44772%s" % (sid, rest)


def longest_gap(sid):
    """The longest time (ms) between two stamps of the loop since the file
    was emptied."""
    st, text = req("POST", execd(sid, "/command"), {"command": "cat /tmp/stamps"}, raw=True)
    out = "".join(e.get("text", "") for e in
                  (json.loads(ln[5:]) for ln in text.decode().splitlines()
                   if ln.startswith("data:")) if e["type"] == "stdout")
    ts = [float(x) for x in out.split() if re.fullmatch(r"[0-9.]+", x)]
    return max((b - a for a, b in zip(ts, ts[1:])), default=0) * 1000


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))]


try:
    deadline = time.monotonic() + 20
    while port is None and time.monotonic() < deadline:
        log.seek(0)
        m = re.search(r"listening on 127\.0\.0\.1:(\d+) ", log.read())
        port = int(m.group(1)) if m else None
        time.sleep(0.05)
    st, b = req("POST", "/v1/sandboxes", {"image": {"uri": "python"}, "timeout": 3600})
    assert st == 202, (st, b)
    sid = b["id"]
    script = ("import os\nos.makedirs('/workspace/d', exist_ok=True)\n"
              "for i in range(%d):\n"
              "    open('/workspace/d/f%%d' %% i, 'wb').write(os.urandom(%d))\n"
              % (FILES, (1 << 20) // FILES))
    st, _ = req("POST", execd(sid, "/command"),
                {"command": "python3 -c \"%s\"" % script.replace('"', '\\"')}, raw=True)
    req("POST", execd(sid, "/command"), {"background": True, "command":
        "python3 -c \"import time\nwhile True:\n  open('/tmp/stamps','a').write("
        "'%.6f\\n' % time.monotonic()); time.sleep(0.002)\""}, raw=True)
    snap_ms, frozen_ms, base_ms, from_ms = [], [], [], []
    for i in range(RUNS + 3):
        req("POST", execd(sid, "/command"),
            {"command": "echo %d > /workspace/d/f0" % i}, raw=True)
        req("POST", execd(sid, "/command"), {"command": "tail -c 0 /tmp/stamps; : > /tmp/stamps"},
            raw=True)
        t = time.monotonic()
        st, s = req("POST", "/v1/sandboxes/%s/snapshots" % sid, {})
        assert st == 202, (st, s)
        while s["status"]["state"] == "Creating":
            time.sleep(0.002)
            s = req("GET", "/v1/snapshots/" + s["id"])[1]
        ms = (time.monotonic() - t) * 1000
        assert s["status"]["state"] == "Ready", s
        gap = longest_gap(sid)
        req("POST", execd(sid, "/command"), {"command": ": > /tmp/stamps; sleep 0.2"}, raw=True)
        base = longest_gap(sid)
        t = time.monotonic()
        st, c = req("POST", "/v1/sandboxes", {"snapshotId": s["id"], "timeout": 600})
        fms = (time.monotonic() - t) * 1000
        assert st == 202 and c["status"]["state"] == "Running", (st, c)
        req("DELETE", "/v1/sandboxes/" + c["id"])
        if i >= 3:
            snap_ms.append(ms)
            frozen_ms.append(gap)
            base_ms.append(base)
            from_ms.append(fms)
    print("# bench/opensandbox_snapshot.py %d %d (%s, %d CPUs, load %s)" % (
        RUNS, FILES, time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()), os.cpu_count(),
        " ".join(open("/proc/loadavg").read().split()[:3])))
    print()
    print("| | median ms | p90 | min |")
    print("|---|---|---|---|")
    for name, v in (("snapshot of a running sandbox, POST to Ready", snap_ms),
                    ("longest stop of its processes (stamp gap)", frozen_ms),
                    ("... the same gap over 0.2 s without a snapshot", base_ms),
                    ("sandbox from the snapshot, POST to Running", from_ms)):
        print("| %s | %.1f | %.1f | %.1f |" % (name, statistics.median(v), pct(v, 0.9), min(v)))
finally:
    proc.terminate()
    proc.wait(30)
    with open("/proc/mounts") as f:
        for m in sorted((ln.split()[1] for ln in f if tmp in ln.split()[1]), reverse=True):
            subprocess.run(["umount", m], check=False)
    shutil.rmtree(tmp, True)
