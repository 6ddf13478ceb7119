#!/usr/bin/env python3
"""Density: how many live sessions one `sandboxd serve` holds, what each
costs, how fast they start, and whether making clones stalls the loop.

One daemon of this script (its own temporary state directory, a free
loopback port, `--net proxy` by default: every session has its network
namespace and its egress listeners; nothing connects anywhere). Then:

  1. clones: sessions on C new clones (one each, 8 client threads), while a
     probe thread sends `GET /healthz` on a kept-alive connection every 5 ms:
     the loop's stalls while clones' workspaces are made (format, loop
     device, mount) show in its latencies;
  2. more: S more sessions per clone (on existing clones), 100 of them timed
     as a batch;
  3. memory: the daemon's RSS, and the PSS of every process of every
     session (their init, the egress helpers), divided by the sessions;
  4. one exec in a session and one one-shot, for the record;
then stops the daemon (SIGTERM) and removes its state.

  bench/density.py [--clones 200] [--per-clone 5] [--net proxy] [--quota 16m]
                   [--mode auto] [--json FILE]
"""
import argparse
import glob
import http.client
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
os.environ.setdefault("SANDBOXD", os.path.join(HERE, "..", "build", "sandboxd"))
from sbxtest import EXTENDED, ServeDaemon  # noqa: E402

TOKEN = "op-" + "0123456789abcdef0123456789abc"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))] if xs else float("nan")


def summary(xs):
    return {"n": len(xs), "p50": pct(xs, 50), "p99": pct(xs, 99), "max": max(xs) if xs else 0}


class Probe(threading.Thread):
    """GET /healthz every 5 ms on one kept-alive connection: latencies (ms)."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.lat, self.stop_ = port, [], threading.Event()

    def run(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        while not self.stop_.is_set():
            t0 = time.monotonic()
            c.request("GET", "/healthz")
            c.getresponse().read()
            self.lat.append((time.monotonic() - t0) * 1e3)
            time.sleep(0.005)
        c.close()


def start_session(port, clone, name):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    h = {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json",
         "X-Tenant-Code": "dense", "X-Clone-Id": clone}
    t0 = time.monotonic()
    c.request("POST", "/runtime/start", body=json.dumps({"sessionID": name}), headers=h)
    r = c.getresponse()
    body = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError("start %s/%s: %d %s" % (clone, name, r.status, body[:300]))
    return (time.monotonic() - t0) * 1e3


def parallel(port, pairs, threads=8, fn=None):
    """Start the sessions of pairs (clone, name) from threads clients: the
    wall time (s) and each start's latency (ms)."""
    lat, errors, lock, it = [], [], threading.Lock(), iter(list(pairs))

    def worker():
        while True:
            with lock:
                p = next(it, None)
            if p is None:
                return
            try:
                ms = (fn or start_session)(port, *p)
                with lock:
                    lat.append(ms)
            except Exception as e:  # noqa: BLE001 - counted and shown
                with lock:
                    errors.append(str(e))

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.monotonic() - t0, lat, errors


def put_file(port, clone, _name):
    """A clone made by its first file: its workspace (image formatted and
    mounted) and nothing else, no sandbox."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    h = {"Authorization": "Bearer " + TOKEN, "X-Tenant-Code": "files", "X-Clone-Id": clone}
    t0 = time.monotonic()
    c.request("PUT", "/runtime/files?path=hello", body=b"hi", headers=h)
    r = c.getresponse()
    body = r.read()
    c.close()
    if r.status != 201:
        raise RuntimeError("put %s: %d %s" % (clone, r.status, body[:300]))
    return (time.monotonic() - t0) * 1e3


def descendants(pid):
    kids, out = {}, []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/stat" % p) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(p))
            except (OSError, ValueError, IndexError):
                pass
    todo = [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def pss_kib(pid):
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clones", type=int, default=200)
    ap.add_argument("--per-clone", type=int, default=5)
    ap.add_argument("--net", default="proxy")
    ap.add_argument("--quota", default="16m")
    ap.add_argument("--mode", default="auto")
    ap.add_argument("--files-clones", type=int, default=100,
                    help="clones made first by a file upload only (no sandbox)")
    ap.add_argument("--json")
    a = ap.parse_args()
    state = tempfile.mkdtemp(prefix="sbx-density-")
    cfg = os.path.join(state, "config.yaml")
    with open(cfg, "w") as f:
        f.write("server:\n  max_connections: 4096\n"
                "sandbox:\n  workspace_quota: %s\n"
                "  max_clones_per_tenant: 60000\n  idle_timeout: 3600s\n" % a.quota)
        if a.mode != "auto":  # (a daemon from before the modes knows no such key)
            f.write("  workspace_quota_mode: %s\n" % a.mode)
    d = ServeDaemon(state, TOKEN, config=cfg, net=a.net)
    out = {"clones": a.clones, "perClone": a.per_clone, "net": a.net, "quota": a.quota,
           "load": os.getloadavg()}
    try:
        d.start(timeout=30)
        st, s, _ = d.req("GET", "/runtime/status", headers=EXTENDED)
        out["quotaMode"] = (s.get("workspaceQuota") or {}).get("mode")
        probe = Probe(d.port)
        probe.start()
        time.sleep(0.5)
        idle = list(probe.lat)
        wall, lat, err = parallel(d.port, [("f%d" % i, "") for i in range(a.files_clones)],
                                  fn=put_file)
        probe.stop_.set()
        probe.join()
        during = probe.lat[len(idle):]
        out["filesClones"] = {"wallS": wall, "put": summary(lat), "nErrors": len(err),
                              "errors": err[:5], "healthzIdle": summary(idle),
                              "healthzDuring": summary(during)}
        print("clones by a file upload (workspace only): %d in %.2f s; put p50 %.1f p99 %.1f "
              "ms; /healthz during p50 %.2f p99 %.2f max %.1f ms (%d probes; idle max %.1f); "
              "errors %d" % (a.files_clones, wall, pct(lat, 50), pct(lat, 99), pct(during, 50),
                             pct(during, 99), max(during or [0]), len(during), max(idle or [0]),
                             len(err)), flush=True)
        rss0 = rss_kib(d.proc.pid)
        probe = Probe(d.port)
        probe.start()
        time.sleep(0.5)
        idle = list(probe.lat)
        wall, lat, err = parallel(d.port, [("c%d" % i, "s0") for i in range(a.clones)])
        probe.stop_.set()
        probe.join()
        during = probe.lat[len(idle):]
        out["newClones"] = {"wallS": wall, "perS": a.clones / wall, "start": summary(lat),
                            "errors": err[:5], "nErrors": len(err),
                            "healthzIdle": summary(idle), "healthzDuring": summary(during)}
        print("new clones: %d sessions in %.2f s; start p50 %.1f p99 %.1f ms; /healthz "
              "during p50 %.2f p99 %.2f max %.1f ms (idle max %.1f); errors %d" % (
                  a.clones, wall, pct(lat, 50), pct(lat, 99), pct(during, 50),
                  pct(during, 99), max(during or [0]), max(idle or [0]), len(err)), flush=True)
        # 100 sessions on existing clones, timed as a batch
        batch = [("c%d" % (i % a.clones), "s1") for i in range(min(100, a.clones))]
        if a.per_clone > 1:
            wall, lat, err = parallel(d.port, batch)
            out["hundred"] = {"wallS": wall, "start": summary(lat), "nErrors": len(err),
                              "errors": err[:5]}
            print("100 sessions on existing clones: %.3f s (p50 %.1f ms, p99 %.1f ms), "
                  "errors %d" % (wall, pct(lat, 50), pct(lat, 99), len(err)), flush=True)
        rest = [("c%d" % i, "s%d" % k) for k in range(2, a.per_clone) for i in range(a.clones)]
        rest += [("c%d" % i, "s1") for i in range(len(batch), a.clones) if a.per_clone > 1]
        wall, lat, err = parallel(d.port, rest)
        st, s, _ = d.req("GET", "/runtime/status", headers=EXTENDED)
        kids = descendants(d.proc.pid)
        pss = sum(pss_kib(p) for p in kids)
        rss = rss_kib(d.proc.pid)
        st, m, _ = d.req("GET", "/metrics")
        live = None
        for line in (m or "").splitlines():
            if line.startswith("sandbox_sessions_live"):
                live = int(float(line.split()[-1]))
        # What the sessions' cgroups are charged (v1 memory.usage_in_bytes:
        # their processes' pages and the kernel memory charged to them).
        m = re.search(r"sandbox=session-([0-9a-f]+)-", d.output(whole=True))
        charged = 0
        if m:
            for path in glob.glob("/sys/fs/cgroup/memory/**/sandboxd/session-%s-*/"
                                  "memory.usage_in_bytes" % m.group(1), recursive=True):
                try:
                    with open(path) as f:
                        charged += int(f.read())
                except (OSError, ValueError):
                    pass
        out["rest"] = {"wallS": wall, "start": summary(lat), "nErrors": len(err),
                       "errors": err[:5]}
        out["memory"] = {"sessionsLive": live, "processes": len(kids),
                         "daemonRssKiB": rss, "daemonRssAtStartKiB": rss0,
                         "sessionsPssKiB": pss,
                         "perSessionKiB": (pss + rss - rss0) / max(1, live or 1),
                         "cgroupsChargedKiB": charged // 1024,
                         "chargedPerSessionKiB": charged / 1024 / max(1, live or 1)}
        print("live sessions %s, %d processes; daemon RSS %.1f MiB (%.1f at start); "
              "sessions' PSS %.1f MiB; per session %.0f KiB (PSS + daemon growth); "
              "charged to the sessions' memory cgroups %.0f KiB each" % (
                  live, len(kids), rss / 1024, rss0 / 1024, pss / 1024,
                  out["memory"]["perSessionKiB"], out["memory"]["chargedPerSessionKiB"]),
              flush=True)
        ex = []
        for i in range(20):
            t0 = time.monotonic()
            st, b, _ = d.req("POST", "/runtime/exec", {"sessionID": "s0", "command": ["true"]},
                             headers={"X-Tenant-Code": "dense", "X-Clone-Id": "c%d" % i})
            ex.append((time.monotonic() - t0) * 1e3)
        out["execInSession"] = summary(ex)
        print("exec true in a session: p50 %.1f ms, max %.1f ms" % (pct(ex, 50), max(ex)))
    finally:
        t0 = time.monotonic()
        code = d.stop(timeout=300)
        out["stopS"] = time.monotonic() - t0
        print("stopped (%s) in %.1f s" % (code, out["stopS"]))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
