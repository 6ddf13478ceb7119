#!/usr/bin/env python3
"""The network behaviour the original's probes check, in netlab's isolated
network (sandboxd runs in the lab's daemon namespace: nothing can leave the
machine):
- a direct connect() from a proxy sandbox to an address the policy denies
  (the deny-list, a blocked CIDR, a metadata service) fails at connect, at
  once (ECONNREFUSED), and nothing reaches the lab's servers; allowed traffic
  keeps its transparent path;
- the original's smoke-sandbox flow through the HTTP API: with
  CLAW_SANDBOX_BLOCKED_CIDRS=10.233.1.0/24, "private target direct connect
  (should fail)";
- an allowed internal target on the host's loopback (--add-host
  svc=127.0.0.1, CLAW_SANDBOX_ALLOWED_CIDRS=127.0.0.1/32) is reached by every
  client style: a raw connect() by name, Node's fetch, curl through the
  proxy."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import netlab  # noqa: E402
import sbxtest  # noqa: E402
from netlab import DNS, INTERNAL, METADATA, PUBLIC  # noqa: E402
from sbxtest import Suite, check  # noqa: E402

PROXY = ("--net", "proxy", "--dns-upstream", DNS)
NP = "/workspace/netprobe"
suite = Suite("network_compat")
lab = netlab.Lab().__enter__()
WS = netlab.workspace(lab)


def sbx(script, *opts, env=None, timeout=90):
    e = {k: v for k, v in os.environ.items() if not k.startswith("CLAW_")}
    e.update(env or {})
    res = lab.run(["sh", "-c", script], *PROXY, *opts, workspace=WS, env=e, timeout=timeout)
    check(res.report is not None and res.report.get("outcome") == "exited",
          "the task did not run to its end", res)
    return res


def arrivals(mark):
    return [e for e in lab.events(since=mark, event="accept")]


@suite.case
def denied_direct_connects_are_refused_at_once():
    mark = lab.mark()
    t0 = time.monotonic()
    res = sbx(NP + " tcp %s 5432 %s 80 10.233.1.2 15432 %s 80" % (INTERNAL, METADATA, PUBLIC),
              env={"CLAW_SANDBOX_BLOCKED_CIDRS": "10.233.1.0/24"})
    took = time.monotonic() - t0
    out = res.stdout.decode()
    for target in ("%s port=5432" % INTERNAL, "%s port=80" % METADATA, "10.233.1.2 port=15432"):
        check("target=%s connect=ECONNREFUSED" % target in out,
              "%s: refused at connect, not accepted then reset" % target, out)
    check("target=%s port=80 connect=ok" % PUBLIC in out and "netlab pub %s:80" % PUBLIC in out,
          "an allowed address keeps the transparent path", out)
    check(took < 30, "at once (the whole run took %.1fs)" % took)
    got = [e for e in arrivals(mark) if e.get("local") != PUBLIC]
    check(not got, "nothing of the denied reached the lab: %r" % got[:3])


@suite.case
def an_opened_private_address_is_not_refused():
    res = sbx(NP + " tcp %s 5432" % INTERNAL, "--allow", INTERNAL)
    out = res.stdout.decode()
    check("connect=ok" in out and "netlab priv %s:5432" % INTERNAL in out, "allowed by rule", out)
    res = sbx(NP + " tcp %s 5432" % INTERNAL, env={"CLAW_SANDBOX_ALLOWED_CIDRS": "10.0.0.0/24"})
    out = res.stdout.decode()
    check("netlab priv %s:5432" % INTERNAL in out, "allowed by CLAW_SANDBOX_ALLOWED_CIDRS", out)



@suite.case
def smoke_sandbox_private_direct_connect_fails():
    # tests/smoke-sandbox.sh of the original, through the HTTP API of a
    # daemon in the lab's daemon namespace (on a unix socket).
    tmp = tempfile.mkdtemp(prefix="sbx-smoke-net-")
    sock = os.path.join(tmp, "api.sock")
    token = "smoke-net-" + "0123456789abcdef0123456"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAW_")}
    env.update(CLAW_RUNTIME_ID="rt-sandbox", CLAW_TENANT_CODE="t1", CLAW_CLONE_ID="c1",
               CLAW_CLONE_KEY="clone-a", CLAW_WORKSPACE=os.path.join(tmp, "work"),
               CLAW_CONTROL_DIR=os.path.join(tmp, "control"), CLAW_ENABLE_SANDBOX_NET="true",
               CLAW_SANDBOX_BLOCKED_CIDRS="10.233.1.0/24")
    cfg = os.path.join(tmp, "net.yaml")
    with open(cfg, "w") as f:
        f.write("network:\n  dns:\n    upstream: [\"%s\"]\n" % DNS)
    log = open(os.path.join(tmp, "log"), "w+")
    p = subprocess.Popen(lab.sandboxd_argv("serve", "--listen", "unix:" + sock, "--state-dir",
                                           os.path.join(tmp, "state"), "--token", token,
                                           "--config", cfg, "--total-memory", "0",
                                           "--total-cpu", "0", "--total-pids", "0"),
                         env=env, stdout=log, stderr=subprocess.STDOUT)

    def req(method, path, body=None):
        c = netlab.UnixHTTP(sock)
        h = {"Authorization": "Bearer " + token}
        if body is not None:
            h["Content-Type"] = "application/json"
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, json.loads(data) if data else None
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(sock) and time.monotonic() < deadline:
            check(p.poll() is None, "serve exited: %s" % open(log.name).read()[-2000:])
            time.sleep(0.05)
        st, b = req("POST", "/runtime/start")
        check(st == 200 and b["status"]["status"] == "ready", "start", (st, b))
        st, b = req("POST", "/runtime/exec", {"command": ["/bin/sh", "-lc", "printf isolated-ok"],
                                              "timeoutSeconds": 3})
        check(st == 200 and b["stdout"] == "isolated-ok", "isolated exec", b)
        script = ("import socket\ns=socket.socket(); s.settimeout(1)\n"
                  "s.connect((\"10.233.1.2\",15432))\n")
        mark = lab.mark()
        st, b = req("POST", "/runtime/exec", {"command": ["/bin/sh", "-lc",
                                                          "python3 - <<'EOF'\n%sEOF" % script],
                                              "timeoutSeconds": 3})
        check(st == 200 and b["exitCode"] != 0 and "ConnectionRefusedError" in b["stderr"],
              "private target direct connect fails (refused)", b)
        check(not arrivals(mark), "nothing reached the lab")
    finally:
        p.terminate()
        p.wait(timeout=20)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


@suite.case
def loopback_internal_target_reached_by_every_client_style():
    with open(os.path.join(WS, "fetch_svc.js"), "w") as f:
        f.write("fetch('http://svc:8080/fetch').then(r => r.text())"
                ".then(t => process.stdout.write('fetch: ' + t))"
                ".catch(e => { console.error(String(e), e.cause); process.exit(1); })\n")
    with open(os.path.join(WS, "raw_svc.py"), "w") as f:
        f.write("import socket\ns = socket.create_connection(('svc', 8080), 5)\n"
                "s.sendall(b'GET /raw HTTP/1.0\\r\\nHost: svc\\r\\n\\r\\n')\n"
                "print('raw:', s.recv(400).decode().splitlines()[-1])\n")
    res = sbx("python3 /workspace/raw_svc.py; node /workspace/fetch_svc.js; "
              "curl -s -m 10 http://svc:8080/curl; getent ahosts svc | head -1",
              "--add-host", "svc=127.0.0.1", "--memory", "512M", "--pids", "64",
              env={"CLAW_SANDBOX_ALLOWED_CIDRS": "127.0.0.1/32"})
    out = res.stdout.decode()
    for path in ("/raw", "/fetch", "/curl"):
        check("netlab d 127.0.0.1:8080 GET %s" % path in out,
              "%s reached the host's loopback service" % path, res)
    check("198.19.255." in out, "the name answered with an alias address", out)
    # Without the allowed CIDR the name is not opened: no alias, refused.
    res = sbx("python3 /workspace/raw_svc.py", "--add-host", "svc=127.0.0.1")
    check("netlab d 127.0.0.1" not in res.stdout.decode(), "not opened: not reached", res)


lab.__exit__(None, None, None)
shutil.rmtree(WS, ignore_errors=True)
suite.finish()
