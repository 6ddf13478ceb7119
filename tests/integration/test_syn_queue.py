#!/usr/bin/env python3
"""A proxy sandbox's connect() sees what it would see without a proxy, because
the daemon judges each SYN and connects upstream before the sandbox's
connection is accepted (net/synq.h). In netlab's isolated network only
(sandboxd runs in the lab's daemon namespace: nothing can leave the machine):
- an allowed, listening upstream: connected, bytes go both ways;
- an allowed upstream that refuses (no listener on the port): connect() fails
  with ECONNREFUSED, never accepted then reset;
- an allowed upstream that does not answer (the lab drops its SYNs): connect()
  times out, never refused nor reset;
- denied by the deny-list, by an IPv4-mapped or NAT64 IPv6 address, by a
  default-deny policy or by a port rule: refused at connect, at once, and
  nothing reaches the lab;
- a live session's rule changed through POST /runtime/network applies to its
  next connect(), also when the change opens an address the sandbox's
  nftables sets refused."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import netlab  # noqa: E402
from netlab import DNS, INTERNAL, NAT64_METADATA, PUBLIC, PUBLIC6  # noqa: E402
from sbxtest import Suite, check  # noqa: E402

PROXY = ("--net", "proxy", "--dns-upstream", DNS)
BLACKHOLE_PORT = 9      # the lab's pub namespace drops SYNs to this port
REFUSING_PORT = 81      # nothing listens there: the lab answers with a reset
suite = Suite("syn_queue")
lab = netlab.Lab().__enter__()
WS = netlab.workspace(lab)
lab.sh("pub", "nft", "add table inet sbxblackhole; "
       "add chain inet sbxblackhole in { type filter hook input priority 0; }; "
       "add rule inet sbxblackhole in tcp dport %d drop" % BLACKHOLE_PORT)

# netlab's connect probe, as a file of the workspace: "host,port[,timeout]"
# targets, results keyed by them (netlab.CONNECT_PROBE).
with open(os.path.join(WS, "synprobe.py"), "w") as f:
    f.write(netlab.CONNECT_PROBE)


def probe(*targets, opts=(), timeout=90):
    res = lab.run(["python3", "/workspace/synprobe.py"] + list(targets), *PROXY, *opts,
                  workspace=WS, timeout=timeout)
    check(res.report is not None and res.report.get("outcome") == "exited",
          "the probe did not run to its end", res)
    return netlab.probe_results(res.stdout), res


def lab_saw(mark, port, local=None):
    return [e for e in lab.events(since=mark, event="accept")
            if e.get("lport") == port and (local is None or e.get("local") == local)]


@suite.case
def allowed_and_listening_connects_and_relays():
    targets = ["%s,80" % PUBLIC] + (["%s,80" % PUBLIC6] if lab.ipv6 else [])
    got, res = probe(*targets)
    for host in [PUBLIC] + ([PUBLIC6] if lab.ipv6 else []):
        r = got.get("%s,80" % host)
        check(r and r[0].startswith("ok netlab pub %s:80 GET /probe" % host),
              "%s:80 reached through the transparent path" % host, res)
    flows = [f for f in (res.report or {}).get("network", {}).get("flows", []) if f.get("port") == 80]
    check(flows and all(f.get("verdict") == "allow" for f in flows),
          "the flow is reported as allowed", res.report)


@suite.case
def refusing_upstream_is_refused_at_connect():
    mark = lab.mark()
    targets = ["%s,%d" % (PUBLIC, REFUSING_PORT)]
    if lab.ipv6:
        targets.append("%s,%d" % (PUBLIC6, REFUSING_PORT))
    got, res = probe(*targets)
    for host in [PUBLIC] + ([PUBLIC6] if lab.ipv6 else []):
        r = got.get("%s,%d" % (host, REFUSING_PORT))
        check(r and r[0] == "ECONNREFUSED", "%s:%d: connect() refused, not accepted then reset"
              % (host, REFUSING_PORT), res)
        check(r and r[1] < 3, "refused promptly (%.3fs)" % (r[1] if r else -1))
    check(not lab_saw(mark, REFUSING_PORT), "nothing listened there")
    flows = [f for f in (res.report or {}).get("network", {}).get("flows", []) if f.get("port") == REFUSING_PORT]
    check(flows and all("ECONNREFUSED" in f.get("rule", "") for f in flows),
          "the flow says why", res.report)


@suite.case
def unreachable_upstream_times_out():
    target = "%s,%d,3" % (PUBLIC, BLACKHOLE_PORT)
    got, res = probe(target)
    r = got.get(target)
    check(r and r[0] == "timeout", "connect() times out as without a proxy (not reset, not "
          "refused)", res)
    check(r and r[1] >= 2.5, "after the client's own timeout (%.3fs)" % (r[1] if r else -1))


@suite.case
def denied_destinations_are_refused_at_once():
    cases = [
        # (what, probe target, run options)
        ("deny-list", "%s,5432" % INTERNAL, ()),
        ("IPv4-mapped deny-list", "::ffff:%s,5432" % INTERNAL, ()),
        ("port rule", "%s,443" % PUBLIC, ("--deny", "%s:443" % PUBLIC)),
        ("default deny", "%s,8080" % PUBLIC, ("--default", "deny", "--allow", "%s:80" % PUBLIC)),
        ("a deny rule by address", "%s,80" % PUBLIC, ("--deny", PUBLIC)),
    ]
    if lab.ipv6:
        cases.append(("NAT64 metadata", "%s,80" % NAT64_METADATA, ()))
    for what, target, opts in cases:
        mark = lab.mark()
        host, port = target.split(",")[0], int(target.split(",")[1])
        # An allowed target in the same run shows the policy let the rest through.
        ok_target = "%s,80" % PUBLIC
        got, res = probe(target, *([] if PUBLIC in target and port == 80 else [ok_target]),
                         opts=opts)
        r = got.get(target)
        check(r and r[0] == "ECONNREFUSED", "%s: %s refused at connect" % (what, target), res)
        check(r and r[1] < 1, "%s: at once (%.3fs)" % (what, r[1] if r else -1))
        if not (PUBLIC in target and port == 80):
            ok = got.get(ok_target)
            check(ok and ok[0].startswith("ok "), "%s: the allowed target still works" % what,
                  res)
        local = host.replace("::ffff:", "")
        check(not lab_saw(mark, port, local), "%s: nothing reached the lab" % what)



@suite.case
def live_rule_change_applies_to_new_connects():
    tmp = tempfile.mkdtemp(prefix="sbx-synq-live-")
    sock = os.path.join(tmp, "api.sock")
    token = "synq-live-" + "0123456789abcdef0123456"
    cfg = os.path.join(tmp, "net.yaml")
    with open(cfg, "w") as f:
        f.write("network:\n  limits:\n    max_connections: 3\n  dns:\n    upstream: [\"%s\"]\n" % DNS)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CLAW_") and not k.startswith("SANDBOX_")}
    log = open(os.path.join(tmp, "log"), "w+")
    p = subprocess.Popen(lab.sandboxd_argv("serve", "--listen", "unix:" + sock, "--state-dir",
                                           os.path.join(tmp, "state"), "--token", token,
                                           "--config", cfg, "--net", "proxy",
                                           "--total-memory", "0", "--total-cpu", "0",
                                           "--total-pids", "0"),
                         env=env, stdout=log, stderr=subprocess.STDOUT)

    def req(method, path, body=None):
        c = netlab.UnixHTTP(sock)
        h = {"Authorization": "Bearer " + token, "X-Sandbox-Extended": "1"}
        if body is not None:
            h["Content-Type"] = "application/json"
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, json.loads(data) if data else None

    def connect(*targets):
        st, b = req("POST", "/runtime/exec", {"sessionID": "live", "timeoutSeconds": 30,
                                              "command": ["python3", "-c", netlab.CONNECT_PROBE] +
                                              list(targets)})
        check(st == 200, "exec in the session", (st, b))
        return netlab.probe_results(b["stdout"]), b

    def until(target, want, what):
        # The daemon judges the next SYN by the new rules at once; the sandbox's
        # own nftables sets follow from a helper within moments.
        deadline = time.monotonic() + 10
        while True:
            got, b = connect(target)
            r = got.get(target)
            if (r and r[0].startswith(want)) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        check(r and r[0].startswith(want), what, b)
        return r

    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(sock) and time.monotonic() < deadline:
            check(p.poll() is None, "serve exited: %s" % open(log.name).read()[-2000:])
            time.sleep(0.05)
        st, b = req("POST", "/runtime/start", {"sessionID": "live"})
        check(st == 200, "session started", (st, b))
        pub, internal = "%s,80" % PUBLIC, "%s,5432" % INTERNAL
        got, b = connect(pub, internal)
        check(got.get(pub, ("",))[0].startswith("ok "), "public allowed at first", b)
        check(got.get(internal, ("",))[0] == "ECONNREFUSED", "internal refused at first",
              b)
        # Narrowing: a deny rule on an address allowed so far.
        st, b = req("POST", "/runtime/network", {"sessionID": "live", "deny": [PUBLIC]})
        check(st == 200, "denied live", (st, b))
        got, b = connect(pub)
        r = got.get(pub)
        check(r and r[0] == "ECONNREFUSED" and r[1] < 1,
              "the next connect to the newly denied address is refused at once", b)
        # Widening: an address of the deny-list, which the sandbox's nftables
        # sets refuse on their own, opened live.
        st, b = req("POST", "/runtime/network", {"sessionID": "live", "allow": [INTERNAL]})
        check(st == 200, "opened live", (st, b))
        until(internal, "ok netlab priv %s:5432" % INTERNAL,
              "the opened deny-list address is reached")
        got, b = connect(pub)
        check(got.get(pub, ("",))[0].startswith("ok "),
              "each change replaces the previous rules: public allowed again", b)
        # And back: refused at connect again.
        st, b = req("POST", "/runtime/network", {"sessionID": "live", "deny": []})
        check(st == 200, "rules reset live", (st, b))
        r = until(internal, "ECONNREFUSED", "refused again after the reset")
        check(r[1] < 1, "at once (%.3fs)" % r[1])
        # The sandbox's connection limit (network.limits.max_connections: 3) refuses
        # the fourth at connect, not after accepting it.
        hold = ("import errno, socket\nheld = []\nfor i in range(4):\n"
                "    s = socket.socket(); s.settimeout(5)\n"
                "    try:\n        s.connect((%r, 22)); held.append(s); print(i, 'ok')\n"
                "    except OSError as e:\n        print(i, errno.errorcode.get(e.errno))\n"
                "    if len(held) == 3:\n        s2 = held[0]; s2.sendall(b'x' * 16)\n"
                "        s2.recv(16)\n" % PUBLIC)
        st, b = req("POST", "/runtime/exec", {"sessionID": "live", "timeoutSeconds": 30,
                                              "command": ["python3", "-c", hold]})
        check(st == 200 and b["stdout"] == "0 ok\n1 ok\n2 ok\n3 ECONNREFUSED\n",
              "three held, the fourth refused at connect", b)
    finally:
        p.terminate()
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.seek(0)
        text = log.read()
        check("live update of the sandbox's nftables sets failed" not in text,
              "the live updates applied", text[-2000:])
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


lab.__exit__(None, None, None)
shutil.rmtree(WS, ignore_errors=True)
suite.finish()
