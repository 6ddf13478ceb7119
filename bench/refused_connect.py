#!/usr/bin/env python3
"""How long a sandbox's connect() takes to learn that the policy denies the
address (refused by the sandbox's nftables rules, before the redirect), that
a rule the daemon judges at the SYN denies it (net/synq.h), that the allowed
upstream refuses it, against a connect() to an allowed, listening address
(the SYN queue connects upstream first, then the transparent path). Runs in
the isolated network of tests/integration/netlab.py (never the real one), as
root:

    SANDBOXD=build/sandboxd SBX_HELPERS=build/helpers bench/refused_connect.py [N]

Prints the median and 99th percentile over N connects (default 500) each."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import netlab  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 500
PROBE = r"""
import socket, sys, time
def run(host, port, n):
    ts, res = [], None
    for _ in range(n):
        s = socket.socket(); t = time.perf_counter()
        try:
            s.connect((host, port)); res = "ok"
        except OSError as e:
            res = e.strerror
        ts.append(time.perf_counter() - t); s.close()
    ts.sort()
    print("%-22s %-20s median %7.1f us  p99 %8.1f us" % (
        "%s:%d" % (host, port), res, ts[n // 2] * 1e6, ts[n * 99 // 100] * 1e6))
n = int(sys.argv[1])
run("DENIED", 5432, n)   # denied (deny-list 10.0.0.0/8): refused by the nftables sets
run("ALLOWED", 443, n)   # denied by a port rule (--deny ALLOWED:443): judged at the SYN
run("ALLOWED", 81, n)    # allowed, but nothing listens upstream: refused at the SYN
run("ALLOWED", 80, n)    # allowed: connected upstream, then the transparent listener
""".replace("DENIED", netlab.INTERNAL).replace("ALLOWED", netlab.PUBLIC)

with netlab.Lab() as lab:
    ws = netlab.workspace(lab)
    with open(os.path.join(ws, "probe.py"), "w") as f:
        f.write(PROBE)
    r = lab.run(["python3", "/workspace/probe.py", str(N)], "--net", "proxy", "--dns-upstream",
                netlab.DNS, "--cpu", "1", "--timeout", "300",
                "--deny", netlab.PUBLIC + ":443", workspace=ws, timeout=400)
    sys.stdout.write(r.stdout.decode())
    if r.code:
        sys.stderr.write(r.stderr.decode()[-2000:])
        sys.exit(1)
