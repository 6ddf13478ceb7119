#!/usr/bin/env python3
"""Soak and chaos runs of `sandboxd serve` (bench/soak.sh, bench/chaos.sh).

Our own clients (threads, http.client, one request at a time each) on loopback
against daemons of this script, each with its own temporary state directory
and a free port, `--net none`: nothing here connects anywhere else. Every run
is bounded in count and in time and stops by itself.

  soak:  N tasks from M clients with mixed outcomes (succeeded, failed,
         timeout, canceled, output, sync exec); then every task must have its
         expected final status, and nothing may have leaked: fds, RSS, cgroups,
         mounts, loop devices, processes; the store's integrity_check ok.
  chaos: rounds of load, each ended by a random fault at a random moment:
         kill -9 (then a restart), SIGSTOP for a while (then SIGCONT), or
         SIGTERM (then a restart), until K kill -9s were done; then a
         disk-full phase on a small filesystem (a tmpfs state directory in a
         mount namespace of its own). After each restart: every task accepted
         before is final or runs in the new daemon (none stuck), none lost;
         and at the end nothing leaked and integrity_check is ok.

Prints a summary and writes it as JSON (--json FILE)."""
import argparse
import hashlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

FINAL = {"succeeded", "failed", "timeout", "canceled", "interrupted"}
TOKEN = "op-" + "0123456789abcdef0123456789abc"


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


class Daemon:
    def __init__(self, sbx, state, config=None, wrapper=None):
        self.sbx, self.state, self.config, self.wrapper = sbx, state, config, wrapper
        self.proc = None
        self.port = None
        self.logf = None

    def start(self, timeout=30):
        args = ([self.wrapper] if self.wrapper else [self.sbx]) + [
            "serve", "--listen", "127.0.0.1:0", "--state-dir", self.state,
            "--token", TOKEN, "--net", "none"]
        if self.config:
            args += ["--config", self.config]
        self.logf = tempfile.TemporaryFile(prefix="sbx-rel-log-")
        env = {k: v for k, v in os.environ.items() if not k.startswith("CLAW_")}
        self.proc = subprocess.Popen(args, stdout=self.logf, stderr=subprocess.STDOUT, env=env)
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError("daemon exited: " + self.output())
            m = re.search(r"listening on 127\.0\.0\.1:(\d+) ", self.output())
            if m:
                self.port = int(m.group(1))
                try:
                    st, _ = self.req("GET", "/readyz", token=None, timeout=2)
                    if st == 200:
                        return time.monotonic() - t0
                except OSError:
                    pass
            time.sleep(0.02)
        raise RuntimeError("daemon not ready: " + self.output())

    def output(self):
        fd = self.logf.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def req(self, method, path, body=None, token=TOKEN, headers=None, timeout=30):
        h = dict(headers or {})
        if token:
            h["Authorization"] = "Bearer " + token
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=data, headers=h)
            r = c.getresponse()
            raw = r.read()
            try:
                return r.status, json.loads(raw) if raw else None
            except ValueError:
                return r.status, raw.decode(errors="replace")
        finally:
            c.close()

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError("daemon ignored signal %d for %ss" % (sig, timeout))
        return self.proc.returncode if self.proc else None


# ---- what a daemon holds, for the leak checks ----

def cg_tag(state):
    return hashlib.sha256(os.path.realpath(state).encode()).hexdigest()[:12]


def our_cgroups(state):
    """Every cgroup directory named with this state directory's tag, in any
    hierarchy's "sandboxd/" base of this process's cgroups."""
    tag = cg_tag(state)
    found = []
    with open("/proc/self/cgroup") as f:
        lines = f.read().splitlines()
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        for name in ([c.replace("name=", "") for c in ctrls.split(",")] if ctrls
                     else ["unified", ""]):
            base = os.path.normpath("/sys/fs/cgroup/%s/%s/sandboxd" % (name, path))
            try:
                found += [os.path.join(base, n) for n in os.listdir(base)
                          if n.startswith(("task-%s-" % tag, "session-%s-" % tag))]
            except OSError:
                pass
    return sorted(set(found))


def mounts_under(path, pid="self"):
    real = os.path.realpath(path)
    with open("/proc/%s/mountinfo" % pid) as f:
        return [l.split()[4] for l in f if l.split()[4].startswith(real + "/")]


def loops_of(path):
    real = os.path.realpath(path)
    n = []
    for dev in os.listdir("/sys/block"):
        try:
            with open("/sys/block/%s/loop/backing_file" % dev) as f:
                if f.read().strip().startswith(real + "/"):
                    n.append(dev)
        except OSError:
            pass
    return n


def settled(fn, timeout=10):
    """fn()'s value once it is empty (an unmount frees its loop device a
    moment later, asynchronously), or its last value after timeout."""
    t0 = time.monotonic()
    while True:
        v = fn()
        if not v or time.monotonic() - t0 > timeout:
            return v
        time.sleep(0.1)


def after_stop(state, code):
    return {"cgroups": len(settled(lambda: our_cgroups(state))),
            "mounts": len(settled(lambda: mounts_under(state))),
            "loops": len(settled(lambda: loops_of(state))), "daemon_exit": code}


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for t in os.listdir("/proc/%d/task" % p):
                with open("/proc/%d/task/%s/children" % (p, t)) as f:
                    kids = [int(x) for x in f.read().split()]
                out += kids
                todo += kids
        except OSError:
            pass
    return out


def proc_status(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def snapshot(d):
    pid = d.proc.pid
    return {"fds": len(os.listdir("/proc/%d/fd" % pid)), "rss_kb": proc_status(pid, "VmRSS"),
            "cgroups": len(our_cgroups(d.state)), "children": len(descendants(pid))}


def integrity(state):
    db = sqlite3.connect(os.path.join(state, "sandboxd.db"), timeout=30)
    try:
        return db.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        db.close()


# ---- the clients ----

# kind: (weight, request body, expected final status)
KINDS = [
    ("ok", 50, {"command": ["/bin/true"]}, "succeeded"),
    ("output", 15, {"command": ["/bin/sh", "-c", "seq 1 2000"]}, "succeeded"),
    ("fail", 15, {"command": ["/bin/sh", "-c", "exit 3"]}, "failed"),
    ("timeout", 3, {"command": ["sleep", "30"], "timeoutSeconds": 0.5}, "timeout"),
    ("cancel", 5, {"command": ["sleep", "30"]}, "canceled"),
    ("exec", 12, {"command": ["/bin/echo", "hi"]}, "succeeded"),
]


def pick(rng):
    total = sum(k[1] for k in KINDS)
    x = rng.uniform(0, total)
    for k in KINDS:
        x -= k[1]
        if x <= 0:
            return k
    return KINDS[0]


class Load:
    """M clients submitting until `total` tasks are accepted, `deadline`
    passes or stop() is called. Records every accepted task's id and the
    status it should end with."""

    def __init__(self, d, clients, total, deadline, seed, tenants=4):
        self.d, self.total, self.deadline = d, total, deadline
        self.tasks = {}  # id -> (kind, expected)
        self.busy = 0
        self.errors = []
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.threads = [threading.Thread(target=self.client, args=(i, seed + i, tenants),
                                         daemon=True) for i in range(clients)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def stop(self):
        self.halt.set()
        for t in self.threads:
            t.join(120)

    def wait(self):
        for t in self.threads:
            t.join()

    def client(self, i, seed, tenants):
        rng = random.Random(seed)
        h = {"X-Tenant-Code": "soak%d" % (i % tenants)}
        while not self.halt.is_set() and time.monotonic() < self.deadline:
            with self.lock:
                if len(self.tasks) >= self.total:
                    return
            name, _, body, want = pick(rng)
            try:
                if name == "exec":
                    st, b = self.d.req("POST", "/runtime/exec", body, headers=h, timeout=120)
                    tid = b.get("taskId") if st == 200 and isinstance(b, dict) else None
                else:
                    st, b = self.d.req("POST", "/runtime/tasks", body, headers=h)
                    tid = b.get("id") if st == 202 and isinstance(b, dict) else None
                if tid:
                    with self.lock:
                        self.tasks[tid] = (name, want)
                    if name == "cancel":
                        time.sleep(rng.uniform(0, 0.2))
                        self.d.req("POST", "/runtime/tasks/%s/cancel" % tid, headers=h)
                elif st == 429:
                    with self.lock:
                        self.busy += 1
                    time.sleep(0.02)
                else:
                    with self.lock:
                        self.errors.append((st, str(b)[:200]))
                    time.sleep(0.05)
            except (OSError, http.client.HTTPException) as e:
                if self.halt.is_set():
                    return
                with self.lock:
                    self.errors.append(("conn", repr(e)[:200]))
                time.sleep(0.1)


def statuses(d, ids, timeout=300):
    """The final status of each id, polling until all are final (or timeout)."""
    left = set(ids)
    got = {}
    t0 = time.monotonic()
    while left and time.monotonic() - t0 < timeout:
        for tid in list(left):
            st, b = d.req("GET", "/runtime/tasks/" + tid)
            if st == 200 and b.get("status") in FINAL:
                got[tid] = b["status"]
                left.discard(tid)
            elif st == 404:
                got[tid] = "LOST"
                left.discard(tid)
        if left:
            time.sleep(0.5)
    for tid in left:
        got[tid] = "STUCK"
    return got


# ---- soak ----

def soak(a, tmp):
    state = os.path.join(tmp, "state")
    cfg = os.path.join(tmp, "soak.yaml")
    with open(cfg, "w") as f:
        f.write("server:\n  max_concurrent: %d\n  queue_size: 256\n  queue_per_tenant: 128\n"
                "sandbox:\n  workspace_quota: 32m\nretention:\n  max_tasks: %d\n"
                % (a.concurrency, a.tasks * 2))
    d = Daemon(a.sandboxd, state, cfg)
    ready = d.start()
    base = snapshot(d)
    log("soak: daemon ready in %.2fs, %s" % (ready, base))
    t0 = time.monotonic()
    load = Load(d, a.clients, a.tasks, t0 + a.max_seconds, a.seed).start()
    samples = []
    while any(t.is_alive() for t in load.threads):
        time.sleep(5)
        s = snapshot(d)
        s["t"] = round(time.monotonic() - t0, 1)
        s["accepted"] = len(load.tasks)
        samples.append(s)
        log("soak: %s" % s)
    load.wait()
    took = time.monotonic() - t0
    got = statuses(d, list(load.tasks))
    settled = time.monotonic() - t0
    time.sleep(2)
    end = snapshot(d)
    wrong = {tid: (load.tasks[tid], s) for tid, s in got.items() if s != load.tasks[tid][1]}
    # a cancel may come after its task ended, a timeout task may be canceled: not losses
    lost = [t for t, s in got.items() if s in ("LOST", "STUCK")]
    mism = {t: v for t, v in wrong.items() if v[1] not in ("LOST", "STUCK")
            and not (v[0][0] == "cancel" and v[1] in ("succeeded", "failed"))}
    mounts_live = len(mounts_under(state, d.proc.pid))
    code = d.stop()
    after = after_stop(state, code)
    res = {
        "mode": "soak", "tasks": len(load.tasks), "clients": a.clients,
        "concurrency": a.concurrency, "submit_seconds": round(took, 1),
        "settle_seconds": round(settled, 1), "tasks_per_s": round(len(load.tasks) / settled, 1),
        "busy_429": load.busy, "client_errors": load.errors[:5], "n_client_errors":
        len(load.errors), "lost_or_stuck": len(lost), "unexpected_status": len(mism),
        "unexpected_examples": list(mism.items())[:5],
        "by_status": {s: list(got.values()).count(s) for s in set(got.values())},
        "start": base, "end_live": end, "mounts_live": mounts_live, "after_stop": after,
        "rss_kb_max": max([s["rss_kb"] for s in samples] + [end["rss_kb"]]),
        "integrity_check": integrity(state),
    }
    # RSS: what the first samples settled at (allocator pools warm) against
    # the end; a leak of even 100 bytes a task would show over 10,000 tasks.
    settled_rss = min([smp["rss_kb"] for smp in samples[1:3]] or [end["rss_kb"]])
    res["rss_kb_growth_after_warmup"] = end["rss_kb"] - settled_rss
    ok = (not lost and not mism and not load.errors and res["integrity_check"] == "ok"
          and res["rss_kb_growth_after_warmup"] <= 4096
          and end["cgroups"] == 0 and end["children"] == 0 and end["fds"] <= base["fds"] + 8
          and after == {"cgroups": 0, "mounts": 0, "loops": 0, "daemon_exit": 0}
          and len(load.tasks) >= a.tasks)
    res["ok"] = ok
    return res


# ---- chaos ----

def chaos(a, tmp):
    rng = random.Random(a.seed)
    state = os.path.join(tmp, "state")
    cfg = os.path.join(tmp, "chaos.yaml")
    with open(cfg, "w") as f:
        f.write("server:\n  max_concurrent: %d\n  queue_size: 256\n"
                "sandbox:\n  workspace_quota: 32m\nretention:\n  max_tasks: 100000\n"
                % a.concurrency)
    d = Daemon(a.sandboxd, state, cfg)
    d.start()
    accepted = {}
    faults = {"kill9": 0, "sigstop": 0, "sigterm": 0}
    restarts = []
    problems = []
    t_end = time.monotonic() + a.max_seconds
    rnd = 0
    while faults["kill9"] < a.crashes and time.monotonic() < t_end:
        rnd += 1
        load = Load(d, a.clients, 10 ** 9, time.monotonic() + 60, a.seed + rnd * 100).start()
        time.sleep(rng.uniform(0.5, 3.0))
        fault = rng.choice(["kill9", "kill9", "sigstop", "sigterm"])
        faults[fault] += 1
        old_pid = d.proc.pid
        if fault == "sigstop":
            os.kill(old_pid, signal.SIGSTOP)
            time.sleep(rng.uniform(0.5, 3.0))
            os.kill(old_pid, signal.SIGCONT)
            time.sleep(0.5)
            load.stop()
            accepted.update(load.tasks)
            st, b = d.req("GET", "/readyz", token=None)
            if st != 200:
                problems.append("round %d: not ready after SIGCONT: %s" % (rnd, b))
            continue
        kids = descendants(old_pid)
        if fault == "kill9":
            d.proc.kill()
            d.proc.wait()
        else:
            code = d.stop(signal.SIGTERM)
            if code != 0:
                problems.append("round %d: SIGTERM exit %r" % (rnd, code))
        load.stop()
        accepted.update(load.tasks)
        # what the old daemon ran dies with it (parent-death signal)
        deadline = time.monotonic() + 10
        while [k for k in kids if os.path.exists("/proc/%d" % k)] and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        left = [k for k in kids if os.path.exists("/proc/%d" % k)]
        if left:
            problems.append("round %d: %d processes of the old daemon left" % (rnd, len(left)))
        ready = d.start()
        restarts.append(round(ready, 3))
        if our_cgroups(state):
            time.sleep(1)
            if our_cgroups(state):
                problems.append("round %d: cgroups left after the restart: %d"
                                % (rnd, len(our_cgroups(state))))
        got = statuses(d, list(load.tasks), timeout=120)
        bad = {t: s for t, s in got.items() if s in ("LOST", "STUCK")}
        if bad:
            problems.append("round %d: %d tasks lost or stuck" % (rnd, len(bad)))
        log("chaos: round %d %s: %d tasks, restart ready in %.3fs%s" % (
            rnd, fault, len(load.tasks), ready, "" if not bad else " BAD %d" % len(bad)))
    got = statuses(d, list(accepted), timeout=300)
    bad = [t for t, s in got.items() if s in ("LOST", "STUCK")]
    end = snapshot(d)
    code = d.stop()
    after = after_stop(state, code)
    res = {"mode": "chaos", "rounds": rnd, "faults": faults, "tasks": len(accepted),
           "restart_ready_s_max": max(restarts) if restarts else None,
           "restart_ready_s": restarts,
           "by_status": {s: list(got.values()).count(s) for s in set(got.values())},
           "lost_or_stuck": len(bad), "problems": problems, "end_live": end,
           "after_stop": after, "integrity_check": integrity(state)}
    if a.disk_full:
        res["disk_full"] = disk_full(a, tmp)
    res["ok"] = (not bad and not problems and res["integrity_check"] == "ok"
                 and after == {"cgroups": 0, "mounts": 0, "loops": 0, "daemon_exit": 0}
                 and end["cgroups"] == 0 and faults["kill9"] >= a.crashes
                 and (not a.disk_full or res["disk_full"]["ok"]))
    return res


def disk_full(a, tmp):
    """Load on a daemon whose state directory is a 64 MiB tmpfs; it is filled
    to the last block mid-load, then emptied."""
    state = os.path.join(tmp, "small")
    os.makedirs(state)
    wrapper = os.path.join(tmp, "small-serve.sh")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nexec unshare -m --propagation private /bin/sh -c "
                "'mount -t tmpfs -o size=64m,mode=0700 sbx-bench-small \"$0\" && exec \"$@\"' "
                "'%s' '%s' \"$@\"\n" % (state, os.path.abspath(a.sandboxd)))
    os.chmod(wrapper, 0o755)
    cfg = os.path.join(tmp, "small.yaml")
    with open(cfg, "w") as f:
        f.write("server:\n  max_concurrent: %d\n  store_reserve: 4m\n  disk_reserve: 8m\n"
                "sandbox:\n  workspace_quota: 16m\n" % a.concurrency)
    d = Daemon(a.sandboxd, state, cfg, wrapper)
    d.start()
    root = "/proc/%d/root%s" % (d.proc.pid, os.path.realpath(state))
    load = Load(d, a.clients, 10 ** 9, time.monotonic() + 60, a.seed + 7, tenants=2).start()
    time.sleep(2)
    filler = os.path.join(root, "filler")
    with open(filler, "ab", buffering=0) as f:
        for chunk in (1 << 20, 4096):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError:
                pass
    time.sleep(2)
    st_full, b_full = d.req("GET", "/readyz", token=None)
    os.unlink(filler)
    time.sleep(2)
    load.stop()
    st_after, _ = d.req("GET", "/readyz", token=None)
    got = statuses(d, list(load.tasks), timeout=120)
    bad = [t for t, s in got.items() if s in ("LOST", "STUCK")]
    res = {"tasks": len(load.tasks), "busy_or_507": load.busy + len(load.errors),
           "readyz_while_full": st_full, "readyz_after": st_after, "lost_or_stuck": len(bad),
           "by_status": {s: list(got.values()).count(s) for s in set(got.values())}}
    pid = d.proc.pid
    res["mounts_live"] = len(mounts_under(state, pid))
    code = d.stop()
    res["daemon_exit"] = code
    res["loops_after"] = len(settled(lambda: loops_of(state)))
    res["ok"] = (not bad and st_full == 503 and st_after == 200 and code == 0
                 and res["loops_after"] == 0)
    return res


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["soak", "chaos"])
    p.add_argument("--tasks", type=int, default=10000)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--crashes", type=int, default=10)
    p.add_argument("--max-seconds", type=float, default=1800)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--disk-full", action="store_true")
    p.add_argument("--sandboxd", default=os.environ.get("SANDBOXD", "build/sandboxd"))
    p.add_argument("--json")
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="sbx-%s-" % a.mode)
    try:
        res = soak(a, tmp) if a.mode == "soak" else chaos(a, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = json.dumps(res, indent=1, default=str)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    print("%s: %s" % (a.mode, "ok" if res["ok"] else "FAILED"))
    sys.exit(0 if res["ok"] else 1)


if __name__ == "__main__":
    main()
