#!/usr/bin/env python3
"""What binding at take costs a pooled task (docs/configuration.md, "The warm
pool"): `proxy` tasks with rules by address, the same each time (refills are
built with the rules of the latest take: no swap) or new each time (the
taken sandbox's nftables sets made the task's before its command: a helper
in its namespace, one transaction), against a pooled `proxy` task with none
and the same task built cold (pool off, spawner on); and, without cgroups
(`sandbox.cgroup_mode: rlimit`), a task with other memory and process limits
than the pooled sandbox's (sent with its command) against the same built
cold. Each task is `/bin/true` over HTTP (a unix socket), one daemon per
kind, the rounds interleaved. Runs in the isolated network of
tests/integration/netlab.py (nothing leaves the machine), as root:

    SANDBOXD=build/sandboxd SBX_HELPERS=build/helpers bench/pool_bind.py [ROUNDS]

Prints p50 and p90 (ms) per kind and each pool's hits and misses."""
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import netlab  # noqa: E402

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 40
TOKEN = "poolbind-" + "0123456789abcdef0123456789ab"
TMP = tempfile.mkdtemp(prefix="sbx-pool-bind-")


class Daemon(netlab.LabDaemon):
    def __init__(self, lab, name, config, net):
        super().__init__(lab, os.path.join(TMP, name), TOKEN, config, net)

    def req(self, method, path, body=None):
        return self.request(method, path, body, {"X-Tenant-Code": "bench", "X-Clone-Id": "c1"})

    def pool(self):
        return self.req("GET", "/runtime/status")[1]["pool"]

    def idle(self):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            p = self.pool()
            if p["idle"] >= 1 and not p["building"]:
                return
            time.sleep(0.02)

    def timed(self, body):
        t = time.perf_counter()
        st, b = self.req("POST", "/runtime/exec", body)
        ms = (time.perf_counter() - t) * 1000
        if st != 200 or b.get("exitCode") != 0:
            sys.exit("task failed: %r %r" % (st, b))
        return ms



def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


POOL = "pool:\n  enabled: %s\n  max_idle: 2\n  idle_timeout: 120s\n"
RLIMIT = "sandbox:\n  cgroup_mode: rlimit\n"
ADDR = {"command": ["true"], "network": {"allow": [netlab.INTERNAL + ":5432"],
                                         "deny": [netlab.PUBLIC]}}
PLAIN = {"command": ["true"]}

with netlab.Lab() as lab:
    dns = "network:\n  dns:\n    upstream: [\"%s\"]\n" % netlab.DNS
    ds = {"plain": Daemon(lab, "plain", dns + POOL % "true", "proxy"),
          "same": Daemon(lab, "same", dns + POOL % "true", "proxy"),
          "new": Daemon(lab, "new", dns + POOL % "true", "proxy"),
          "cold": Daemon(lab, "cold", dns + POOL % "false", "proxy"),
          "rl_pool": Daemon(lab, "rlpool", RLIMIT + POOL % "true", "none"),
          "rl_cold": Daemon(lab, "rlcold", RLIMIT + POOL % "false", "none")}
    kinds = [("proxy, no rule by address, pooled", "plain", PLAIN, True),
             ("proxy, the same rules by address, pooled", "same", ADDR, True),
             ("proxy, new rules by address, pooled (swap)", "new", None, True),
             ("proxy, rules by address, cold", "cold", ADDR, False),
             ("rlimit mode, other limits, pooled", "rl_pool", None, True),
             ("rlimit mode, other limits, cold", "rl_cold", None, False)]
    for d in ds.values():  # each description's first task
        d.timed(PLAIN)
    times = {k[0]: [] for k in kinds}
    for r in range(ROUNDS):
        order = kinds[r % len(kinds):] + kinds[:r % len(kinds)]
        for name, d, body, pooled in order:
            if body is None and d == "new":  # a deny rule of its own each round
                body = {"command": ["true"], "network": {
                    "allow": [netlab.INTERNAL + ":5432"], "deny": ["203.0.113.%d" % (20 + r)]}}
            elif body is None:  # other limits each round
                body = {"command": ["true"], "memoryMB": 64 + 8 * (r % 16), "pids": 20 + r % 30}
            if pooled:
                ds[d].idle()
            times[name].append(ds[d].timed(body))
    print("%d rounds, load average %s" % (ROUNDS, open("/proc/loadavg").read().split()[:3]))
    for name, _, _, _ in kinds:
        print("%-50s p50 %7.2f ms  p90 %7.2f ms" % (name, pct(times[name], 0.5),
                                                     pct(times[name], 0.9)))
    for key in ("plain", "same", "new", "rl_pool"):
        p = ds[key].pool()
        print("%s: hits %d, misses %d, discarded %d" % (key, p["hits"], p["misses"],
                                                        p["discarded"]))
    for d in ds.values():
        d.stop()
shutil.rmtree(TMP, ignore_errors=True)
