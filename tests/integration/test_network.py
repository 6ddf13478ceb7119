#!/usr/bin/env python3
"""The egress end to end: real clients inside real `sandboxd run --net proxy`
sandboxes against the servers of netlab.py's isolated network (never the real
one: sandboxd runs inside the lab's daemon namespace, which has no route out).

Clients: curl through SOCKS5 (socks5h, and ALL_PROXY), curl through the HTTP
proxy (absolute-form and CONNECT, plain and TLS), Python's urllib (HTTP_PROXY),
Node's built-in fetch (ignores proxy variables: the transparent path), and a raw
connect() in C (build/helpers/netprobe). Policies: default allow with the
deny-list, default deny with name and port rules, internal CIDR allows, the
CLAW_* settings, static hosts. After every denial the lab's listeners prove
that nothing arrived, and the lab's DNS that refused names were never
forwarded."""
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import netlab  # noqa: E402
import sbxtest  # noqa: E402
from netlab import DAEMON, DNS, INTERNAL, INTERNAL_172, INTERNAL_192, METADATA, PUBLIC  # noqa: E402
from sbxtest import Suite, check  # noqa: E402

PROXY = ("--net", "proxy", "--dns-upstream", DNS)
NP = "/workspace/netprobe"


def setup_or_exit():
    for need in (sbxtest.SANDBOXD, os.path.join(sbxtest.HELPERS, "netprobe")):
        if not os.access(need, os.X_OK):
            print("FAIL setup: %s is missing (build first)" % need)
            print("network: 0 passed, 1 failed")
            sys.exit(1)
    import subprocess
    helptext = subprocess.run([sbxtest.SANDBOXD, "run", "--help"], capture_output=True,
                              text=True).stdout
    if "proxy" not in helptext or "--dns-upstream" not in helptext:
        print("FAIL setup: %s run has no --net proxy / --dns-upstream yet" % sbxtest.SANDBOXD)
        print("network: 0 passed, 1 failed")
        sys.exit(1)


setup_or_exit()
suite = Suite("network")
lab = netlab.Lab().__enter__()
WS = netlab.workspace(lab)
print("network: lab %s, IPv6 %s, TLS %s; sandboxd %s" %
      (lab.tag, lab.ipv6, bool(lab.cert), sbxtest.SANDBOXD))
sys.stdout.flush()


def text(b):
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else (b or "")


def sbx(script, *opts, env=None, timeout=90, policy=PROXY):
    """sh -c SCRIPT in a proxy-mode sandbox inside the lab; checks it ran to its end."""
    e = os.environ.copy()
    for k in list(e):
        if k.startswith("CLAW_"):
            del e[k]
    e.update(env or {})
    res = lab.run(["sh", "-c", script], *policy, *opts, workspace=WS, env=e, timeout=timeout)
    check(b"Sanitizer" not in res.stderr, "sandboxd's sanitizers reported an error:\n%s" %
          text(res.stderr)[-3000:])
    check(res.report is not None and "outcome" in res.report, "sandboxd wrote no report", res)
    check(res.report["outcome"] == "exited",
          "the task did not exit normally: outcome %r" % res.report["outcome"], res)
    return res


def flows(res, **match):
    out = []
    for f in (res.report.get("network") or {}).get("flows") or []:
        if all((f.get(k) in v) if isinstance(v, (tuple, set, list)) else f.get(k) == v
               for k, v in match.items()):
            out.append(f)
    return out


def one(items, what, res=None):
    check(len(items) >= 1, "no %s" % what, res)
    return items[0]


def lines(res, kind):
    return [f for f in netlab.facts(res.stdout) if f["kind"] == kind]


def served(body, srv, addr, port, path=None):
    """The lab server's own line: 'netlab SRV ADDR:PORT METHOD TARGET ...'."""
    want = "netlab %s %s:%d " % (srv, addr, port)
    return want in body and (path is None or path in body)


def nothing_arrived(since, what, **match):
    got = [e for e in lab.arrivals(since=since) if all(e.get(k) == v for k, v in match.items())]
    check(not got, "%s: the lab's servers saw %r" % (what, got[:5]))


def accepts(since, **match):
    return lab.events(since=since, ev="accept", **match)


def tcp_denied(f):
    """A transparent connection refused as promised: reset (or refused)."""
    if f.get("connect") in ("ECONNREFUSED", "ECONNRESET"):
        return True
    return f.get("connect") == "ok" and f.get("recv") == "0" and (
        f.get("end") == "ECONNRESET" or f.get("sent") in ("ECONNRESET", "EPIPE"))


def tcp_ok(f, srv, addr, port):
    return f.get("connect") == "ok" and f.get("first", "").startswith("HTTP/1.1 200") and \
        served(f.get("body", ""), srv, addr, port)


# --- environment ---------------------------------------------------------------------

@suite.case
def proxy_mode_environment_resolv_conf_and_only_loopback():
    res = sbx("env; echo ---; cat /etc/resolv.conf; echo ---; cat /proc/net/dev")
    env, resolv, dev = text(res.stdout).split("---\n")
    for kv in ("ALL_PROXY=socks5h://127.0.0.1:1080", "all_proxy=socks5h://127.0.0.1:1080",
               "HTTP_PROXY=http://127.0.0.1:3128", "http_proxy=http://127.0.0.1:3128",
               "HTTPS_PROXY=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128",
               "NO_PROXY=localhost,127.0.0.1", "no_proxy=localhost,127.0.0.1"):
        check(kv in env.splitlines(), "%s not in the task's environment" % kv, res)
    check([l.split() for l in resolv.splitlines() if l.startswith("nameserver")] ==
          [["nameserver", "127.0.0.1"]], "resolv.conf inside: %r" % resolv, res)
    ifaces = [l.split(":")[0].strip() for l in dev.splitlines()[2:]]
    check(ifaces == ["lo"], "interfaces inside: %r" % ifaces, res)
    check(res.report.get("network", {}).get("policy") == "proxy",
          "report's network.policy: %r" % res.report.get("network"), res)


@suite.case
def claw_enable_sandbox_net_chooses_the_default_policy():
    res = sbx("cat /proc/net/dev", policy=("--dns-upstream", DNS),
              env={"CLAW_ENABLE_SANDBOX_NET": "true"})
    check(res.report["network"]["policy"] == "proxy", "true -> %r" % res.report["network"], res)
    res = sbx(NP + " tcp %s 80" % PUBLIC, policy=(), env={"CLAW_ENABLE_SANDBOX_NET": "false"})
    check(res.report["network"]["policy"] == "none", "false -> %r" % res.report["network"], res)
    f = one(lines(res, "tcp"), "tcp line", res)
    check(f["connect"] == "ENETUNREACH", "raw connect under none: %r" % f, res)


# --- the four ways out ---------------------------------------------------------------

@suite.case
def curl_through_socks5h_and_all_proxy():
    mark = lab.mark()
    res = sbx("curl -sS --max-time 10 --socks5-hostname 127.0.0.1:1080 http://public.test/socks;"
              " env -u http_proxy -u HTTP_PROXY curl -sS --max-time 10 http://public.test/allproxy")
    out = text(res.stdout)
    check(served(out, "pub", PUBLIC, 80, "GET /socks"), "curl --socks5-hostname: %r" % out, res)
    check(served(out, "pub", PUBLIC, 80, "GET /allproxy"), "curl via ALL_PROXY: %r" % out, res)
    acc = accepts(mark, srv="pub", local=PUBLIC, lport=80)
    check(len(acc) == 2 and all(e["peer"] == DAEMON for e in acc),
          "the public server saw %r (expected 2 connections from the daemon)" % acc)
    fl = flows(res, via="socks5", name="public.test", verdict="allow")
    check(len(fl) == 2, "socks5 flows: %r" % res.report["network"]["flows"], res)
    for f in fl:
        check(f["address"] == PUBLIC and f["port"] == 80 and f["bytesOut"] > 0 and
              f["bytesIn"] > 0 and f["durationSeconds"] >= 0, "flow %r" % f, res)
    # socks5h: the daemon resolved the name (our upstream saw it from the daemon).
    q = lab.dns_queries(since=mark, name="public.test")
    check(q and all(e["peer"] == DAEMON for e in q), "lab DNS saw %r" % q)


@suite.case
def the_socks5_port_is_configurable():
    # CLAW_SANDBOX_PROXY_PORT (the original's setting) and --proxy-port, which
    # wins: the listener and the proxy variables follow; 1080 is then closed.
    script = ("echo \"$ALL_PROXY\"; "
              "curl -sS --max-time 10 --socks5-hostname 127.0.0.1:%d http://public.test/port; "
              "curl -sS --max-time 5 --socks5-hostname 127.0.0.1:1080 http://public.test/no "
              ">/dev/null 2>&1 || echo closed")
    for env, opts, port in (({"CLAW_SANDBOX_PROXY_PORT": "1081"}, (), 1081),
                            ({"CLAW_SANDBOX_PROXY_PORT": "1081"}, ("--proxy-port", "9050"), 9050)):
        res = sbx(script % port, *opts, env=env)
        out = text(res.stdout)
        check(out.startswith("socks5h://127.0.0.1:%d\n" % port), "ALL_PROXY: %r" % out, res)
        check(served(out, "pub", PUBLIC, 80, "GET /port"), "curl on port %d: %r" % (port, out),
              res)
        check(out.endswith("closed\n"), "1080 is not listening: %r" % out, res)
    for bad in ("3128", "53", "0", "70000", "socks"):
        res = lab.run(["true"], *PROXY, "--proxy-port", bad, workspace=WS)
        check(res.code == 125 and b"--proxy-port" in res.stderr, "--proxy-port %s: %r" %
              (bad, res.stderr), res)


@suite.case
def curl_through_the_http_proxy_absolute_form_and_connect():
    mark = lab.mark()
    res = sbx("curl -sS --max-time 10 http://public.test/absolute; "
              "curl -sS --max-time 10 -p -x http://127.0.0.1:3128 http://public.test:443/tunnel")
    out = text(res.stdout)
    check(served(out, "pub", PUBLIC, 80, "/absolute"), "absolute-form: %r" % out, res)
    check(served(out, "pub", PUBLIC, 443, "GET /tunnel"), "CONNECT tunnel: %r" % out, res)
    fl = flows(res, via="http", verdict="allow")
    check(len(fl) == 2 and {f["port"] for f in fl} == {80, 443} and
          all(f["name"] == "public.test" and f["address"] == PUBLIC and f["bytesIn"] > 0
              for f in fl), "http flows: %r" % res.report["network"]["flows"], res)
    check(len(accepts(mark, srv="pub", local=PUBLIC)) == 2, "public server connections")


@suite.case
def curl_https_through_connect_with_tls_end_to_end():
    check(lab.cert, "the lab has no TLS certificate")
    res = sbx("curl -sS --max-time 10 --cacert /workspace/lab-ca.pem https://public.test/tls")
    out = text(res.stdout)
    check(served(out, "pub", PUBLIC, 443, "GET /tls"), "https via https_proxy: %r" % out, res)
    f = one(flows(res, via="http", port=443, verdict="allow"), "CONNECT flow", res)
    check(f["bytesIn"] > 500 and f["bytesOut"] > 200, "TLS bytes counted: %r" % f, res)


@suite.case
def python_urllib_honours_http_proxy():
    script = ("import urllib.request, ssl\n"
              "print(urllib.request.urlopen('http://public.test/urllib', timeout=10)"
              ".read().decode())\n"
              "ctx = ssl.create_default_context(cafile='/workspace/lab-ca.pem')\n"
              "print(urllib.request.urlopen('https://public.test/urllib-tls', timeout=10,"
              " context=ctx).read().decode())\n")
    with open(os.path.join(WS, "urllib_client.py"), "w") as f:
        f.write(script)
    res = sbx("python3 /workspace/urllib_client.py")
    out = text(res.stdout)
    check(served(out, "pub", PUBLIC, 80, "/urllib"), "urllib http: %r" % out, res)
    one(flows(res, via="http", port=80, name="public.test", verdict="allow"), "http flow", res)
    check(served(out, "pub", PUBLIC, 443, "GET /urllib-tls"), "urllib https: %r" % out, res)


@suite.case
def node_fetch_ignores_proxies_and_is_served_transparently():
    mark = lab.mark()
    js = ("fetch('http://public.test/node').then(r => r.text())"
          ".then(t => process.stdout.write(t))"
          ".catch(e => { console.error(String(e), e.cause); process.exit(1); })")
    with open(os.path.join(WS, "fetch.js"), "w") as f:
        f.write(js)
    res = sbx("node /workspace/fetch.js", "--memory", "512M", "--pids", "64")
    out = text(res.stdout)
    check(res.report["exitCode"] == 0, "node fetch failed", res)
    check("GET /node" in out and ("netlab pub %s:80" % PUBLIC in out or
                                  "netlab pub %s:80" % netlab.PUBLIC6 in out),
          "node fetch: %r" % out, res)
    f = one(flows(res, via="transparent", verdict="allow"), "transparent flow", res)
    check(f["port"] == 80 and f["bytesIn"] > 0 and f["bytesOut"] > 0, "flow %r" % f, res)
    check(f["name"] == "public.test",
          "the transparent flow was not matched to the name our DNS answered: %r" % f, res)
    check(not flows(res, via=("socks5", "http")), "node went through a proxy endpoint", res)
    check(accepts(mark, srv="pub", lport=80), "the public server saw nothing")


@suite.case
def raw_connect_in_c_is_redirected_transparently():
    mark = lab.mark()
    res = sbx(NP + " tcp %s 80 %s 8080" % (PUBLIC, PUBLIC))
    fs = lines(res, "tcp")
    check(len(fs) == 2 and tcp_ok(fs[0], "pub", PUBLIC, 80) and tcp_ok(fs[1], "pub", PUBLIC, 8080),
          "raw connects: %r" % fs, res)
    acc = accepts(mark, srv="pub", local=PUBLIC)
    check(len(acc) == 2 and all(e["peer"] == DAEMON for e in acc),
          "the server saw %r, expected 2 connections from the daemon's address" % acc)
    fl = flows(res, via="transparent", address=PUBLIC, verdict="allow")
    check({f["port"] for f in fl} == {80, 8080} and all(f["bytesIn"] > 0 for f in fl),
          "transparent flows %r" % res.report["network"]["flows"], res)


@suite.case
def raw_connect_over_ipv6_is_redirected_too():
    if not lab.ipv6:
        # The lab fails to start when the host has IPv6 and it cannot set it up.
        check(not netlab.ipv6_available(), "the host has IPv6 but the lab has none")
        print("  (not run: this host has no IPv6, %s)" % netlab.IPV6_SWITCH)
        return
    res = sbx(NP + " tcp %s 80" % netlab.PUBLIC6)
    f = one(lines(res, "tcp"), "tcp line", res)
    check(tcp_ok(f, "pub", netlab.PUBLIC6, 80), "raw IPv6 connect: %r" % f, res)
    one(flows(res, via="transparent", address=netlab.PUBLIC6, verdict="allow"), "v6 flow", res)


@suite.case
def sandbox_loopback_services_stay_local_and_no_proxy_is_honoured():
    mark = lab.mark()
    res = sbx("python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 & "
              "for i in 1 2 3 4 5 6 7 8 9 10; do " + NP + " tcp 127.0.0.1 8000 | "
              "grep -q connect=ok && break; sleep 0.3; done; "
              "curl -sS --max-time 5 -o /dev/null -w 'curl=%{http_code}\\n' http://127.0.0.1:8000/; "
              + NP + " tcp 127.0.0.1 8000; kill %1", "--pids", "64")
    f = lines(res, "tcp")[-1]
    check(f["connect"] == "ok" and f.get("first", "").startswith("HTTP/1.0 200"),
          "the sandbox's own loopback server is unreachable: %r" % f, res)
    check("curl=200" in text(res.stdout), "curl with no_proxy to 127.0.0.1", res)
    check(not flows(res), "loopback traffic went through the egress: %r" % flows(res), res)
    check(not lab.arrivals(since=mark), "loopback traffic reached the lab")


# --- DNS -----------------------------------------------------------------------------

@suite.case
def dns_inside_resolves_allowed_names_through_the_lab_upstream():
    mark = lab.mark()
    res = sbx("getent ahosts public.test; " + NP +
              " dns public.test A public.test AAAA nothing.test A")
    out = text(res.stdout)
    check(PUBLIC in out.split("\n")[0], "getent ahostsv4 public.test: %r" % out, res)
    d = lines(res, "dns")
    check(d[0].get("rcode") == "NOERROR" and d[0].get("addrs") == PUBLIC, "A: %r" % d[0], res)
    if lab.ipv6:
        check(d[1].get("rcode") == "NOERROR" and d[1].get("addrs") == netlab.PUBLIC6,
              "AAAA: %r" % d[1], res)
    check(d[2].get("rcode") == "NXDOMAIN", "unknown name: %r" % d[2], res)
    q = lab.dns_queries(since=mark)
    check({e["name"] for e in q} == {"public.test", "nothing.test"} and
          all(e["peer"] == DAEMON for e in q), "lab DNS saw %r" % q)
    one(flows(res, via="dns", name="public.test"), "dns flow", res)


@suite.case
def getaddrinfo_af_inet_with_ai_addrconfig_resolves():
    # glibc's AI_ADDRCONFIG asks for an IPv4 address other than 127.0.0.1 on some
    # interface before it asks DNS for A records (getent ahostsv4, and every
    # program that passes AF_INET with AI_ADDRCONFIG).
    res = sbx("getent ahostsv4 public.test; echo rc=$?; "
              "python3 -c 'import socket; print(socket.getaddrinfo(\"public.test\", 80, "
              "socket.AF_INET, socket.SOCK_STREAM, 0, socket.AI_ADDRCONFIG)[0][4][0])'")
    out = text(res.stdout)
    check(out.startswith(PUBLIC) and "rc=0" in out and out.rstrip().endswith(PUBLIC),
          "getaddrinfo(AF_INET, AI_ADDRCONFIG) of public.test inside: %r %r" %
          (out, text(res.stderr)[-300:]), res)


@suite.case
def default_deny_allow_name_refuses_other_names_unforwarded():
    mark = lab.mark()
    res = sbx(NP + " tcp %s 80; " % PUBLIC +          # no name known yet: denied
              "getent ahosts public.test; " +         # our DNS answers it ...
              NP + " tcp %s 80; " % PUBLIC +          # ... so now it is public.test
              NP + " dns other.test A www.public.test A; " +
              NP + " socks public.test 80 other.test 80 %s 80; " % PUBLIC +
              NP + " get public.test 80 other.test 80",
              "--default", "deny", "--allow", "public.test")
    t = lines(res, "tcp")
    check(tcp_denied(t[0]), "raw connect to an address no allowed name answered: %r" % t[0], res)
    check(tcp_ok(t[1], "pub", PUBLIC, 80), "raw connect after our DNS answered public.test: %r" %
          t[1], res)
    d = lines(res, "dns")
    check(all(x.get("rcode") == "REFUSED" for x in d), "denied names answered: %r" % d, res)
    s = lines(res, "socks")
    check(s[0].get("reply") == "00" and served(s[0].get("body", ""), "pub", PUBLIC, 80),
          "socks public.test: %r" % s[0], res)
    check(s[1].get("reply") == "02" and s[2].get("reply") == "02",
          "socks to a denied name / bare address: %r" % s[1:], res)
    g = lines(res, "get")
    check(g[0].get("status") == "200" and g[1].get("status") == "403" and
          g[1].get("body", "").startswith("sandbox egress denied: "), "http get: %r" % g, res)
    names = {e["name"] for e in lab.dns_queries(since=mark)}
    check(names <= {"public.test"}, "refused names were forwarded upstream: %r" % names)
    # public.test: the transparent connect after getent, socks, get = 3 connections.
    acc = accepts(mark, srv="pub")
    check(len(acc) == 3, "the public server saw %d connections, expected 3: %r" % (len(acc), acc))
    check(flows(res, verdict="deny", name="other.test"), "no deny flow for other.test", res)


@suite.case
def default_deny_port_rule_opens_only_that_port():
    mark = lab.mark()
    res = sbx(NP + " socks public.test 80 public.test 443; " +
              NP + " connect public.test 80 public.test 443",
              "--default", "deny", "--allow", "public.test:80")
    s, c = lines(res, "socks"), lines(res, "connect")
    check(s[0].get("reply") == "00" and s[1].get("reply") == "02", "socks: %r" % s, res)
    check(c[0].get("status") == "200" and c[1].get("status") == "403", "CONNECT: %r" % c, res)
    check(c[1].get("body", "").startswith("sandbox egress denied: "), "403 body %r" % c[1], res)
    check(not accepts(mark, lport=443), "port 443 was reached")
    check(len(accepts(mark, srv="pub", lport=80)) == 2, "port 80 connections")


@suite.case
def allow_internal_cidr_with_port_opens_just_that():
    mark = lab.mark()
    res = sbx(NP + " socks %s 80 %s 443 %s 80; " % (INTERNAL, INTERNAL, INTERNAL_172) +
              NP + " tcp %s 80 %s 443" % (INTERNAL, INTERNAL),
              "--allow", "%s/32:80" % INTERNAL)
    s, t = lines(res, "socks"), lines(res, "tcp")
    check(s[0].get("reply") == "00" and served(s[0].get("body", ""), "priv", INTERNAL, 80),
          "socks %s:80 with --allow %s/32:80: %r" % (INTERNAL, INTERNAL, s[0]), res)
    check(s[1].get("reply") == "02" and s[2].get("reply") == "02", "other ports/hosts: %r" % s,
          res)
    check(tcp_ok(t[0], "priv", INTERNAL, 80) and tcp_denied(t[1]), "transparent: %r" % t, res)
    acc = accepts(mark, srv="priv")
    check(sorted((e["local"], e["lport"]) for e in acc) == [(INTERNAL, 80)] * 2,
          "the internal server saw %r" % acc)


@suite.case
def claw_allowed_internal_targets_open_host_port_pairs():
    mark = lab.mark()
    res = sbx(NP + " tcp %s 5432 %s 80; " % (INTERNAL_192, INTERNAL_192) +
              NP + " socks %s 5432 %s 80" % (INTERNAL_192, INTERNAL),
              env={"CLAW_ALLOWED_INTERNAL_TARGETS": "%s:5432" % INTERNAL_192})
    t, s = lines(res, "tcp"), lines(res, "socks")
    check(tcp_ok(t[0], "priv", INTERNAL_192, 5432) and tcp_denied(t[1]), "tcp %r" % t, res)
    check(s[0].get("reply") == "00" and s[1].get("reply") == "02", "socks %r" % s, res)
    acc = accepts(mark, srv="priv")
    check(sorted((e["local"], e["lport"]) for e in acc) == [(INTERNAL_192, 5432)] * 2,
          "the internal server saw %r" % acc)


@suite.case
def claw_allowed_cidrs_and_ports():
    mark = lab.mark()
    res = sbx(NP + " socks %s 443 %s 80 %s 443" % (INTERNAL_172, INTERNAL_172, INTERNAL),
              env={"CLAW_SANDBOX_ALLOWED_CIDRS": "172.16.0.0/12",
                   "CLAW_SANDBOX_ALLOWED_PORTS": "443"})
    s = lines(res, "socks")
    check([x.get("reply") for x in s] == ["00", "02", "02"], "socks %r" % s, res)
    acc = accepts(mark, srv="priv")
    check([(e["local"], e["lport"]) for e in acc] == [(INTERNAL_172, 443)],
          "the internal servers saw %r" % acc)


@suite.case
def claw_blocked_cidrs_add_to_the_deny_list():
    mark = lab.mark()
    res = sbx(NP + " socks public.test 80; " + NP + " tcp %s 80; " % PUBLIC +
              NP + " get public.test 80",
              env={"CLAW_SANDBOX_BLOCKED_CIDRS": "203.0.113.0/24,2001:db8::/48"})
    check(lines(res, "socks")[0].get("reply") == "02", "socks %r" % lines(res, "socks"), res)
    check(tcp_denied(lines(res, "tcp")[0]), "tcp %r" % lines(res, "tcp"), res)
    g = lines(res, "get")[0]
    check(g.get("status") == "403" and "sandbox egress denied: " in g.get("body", ""),
          "get %r" % g, res)
    check(not accepts(mark), "a blocked CIDR was reached: %r" % accepts(mark))


@suite.case
def add_host_names_resolve_inside_without_the_upstream():
    mark = lab.mark()
    res = sbx("getent ahosts svc.lab; " +
              "curl -sS --max-time 10 --socks5-hostname 127.0.0.1:1080 http://svc.lab/static; " +
              NP + " socks db.lab 5432 db.lab 80",
              "--add-host", "svc.lab=%s" % PUBLIC, "--add-host", "db.lab=%s" % INTERNAL,
              "--allow", "%s/32:5432" % INTERNAL)
    out = text(res.stdout)
    check(out.split("\n")[0].startswith(PUBLIC), "getent svc.lab: %r" % out, res)
    check(served(out, "pub", PUBLIC, 80, "GET /static host=svc.lab"), "curl svc.lab: %r" % out,
          res)
    s = lines(res, "socks")
    check(s[0].get("reply") == "00" and served(s[0].get("body", ""), "priv", INTERNAL, 5432) and
          s[1].get("reply") == "02", "socks db.lab: %r" % s, res)
    names = {e["name"] for e in lab.dns_queries(since=mark)}
    check(not names & {"svc.lab", "db.lab"}, "static names were asked upstream: %r" % names)


# --- the report and the relay --------------------------------------------------------

@suite.case
def report_flows_count_bytes_both_ways_and_name_the_rule():
    mark = lab.mark()
    res = sbx("curl -sS --max-time 20 --socks5-hostname 127.0.0.1:1080 -o /dev/null "
              "-w 'got=%{size_download}\\n' http://public.test/big/3000000; "
              "head -c 200000 /dev/zero | curl -sS --max-time 20 -H 'Expect:' --data-binary @- "
              "http://public.test/upload; " +
              NP + " socks %s 80; " % METADATA + NP + " get %s 80" % METADATA)
    out = text(res.stdout)
    check("got=3000000" in out and "received=200000" in out, "transfers: %r" % out, res)
    big = one(flows(res, via="socks5", verdict="allow"), "socks flow", res)
    check(big["bytesIn"] >= 3000000 and big["bytesOut"] > 0 and big["durationSeconds"] > 0,
          "download flow %r" % big, res)
    up = one(flows(res, via="http", verdict="allow"), "http flow", res)
    check(up["bytesOut"] >= 200000, "upload flow %r" % up, res)
    denied = flows(res, verdict="deny", address=METADATA)
    check(len(denied) == 2 and {f["via"] for f in denied} == {"socks5", "http"},
          "deny flows %r" % res.report["network"]["flows"], res)
    for f in denied:
        check(f["rule"] and f["bytesOut"] == 0 and f["bytesIn"] == 0 and f["port"] == 80,
              "deny flow %r" % f, res)
    g = lines(res, "get")[0]
    check(g.get("body") == "sandbox egress denied: " + denied[0]["rule"] or
          g.get("body") == "sandbox egress denied: " + denied[1]["rule"],
          "403 body %r does not name the flow's rule %r" % (g.get("body"), denied), res)
    nothing_arrived(mark, "metadata", srv="priv")


@suite.case
def twenty_concurrent_clients_are_served():
    res = sbx("seq 1 20 | xargs -P 10 -I{} curl -sS --max-time 20 http://public.test/c{}",
              "--pids", "64")
    out = text(res.stdout)
    got = sorted(int(l.split("GET /c")[1].split()[0]) for l in out.splitlines() if "GET /c" in l)
    check(got == list(range(1, 21)), "concurrent requests answered: %r" % got, res)
    check(len(flows(res, via="http", verdict="allow")) == 20, "20 flows", res)


@suite.case
def large_transfer_through_the_relay():
    t0 = time.monotonic()
    res = sbx("curl -sS --max-time 60 -o /dev/null -w 'got=%{size_download}\\n' "
              "http://public.test/big/64000000", timeout=90)
    check("got=64000000" in text(res.stdout), "64 MB download: %r" % text(res.stdout), res)
    f = one(flows(res, via="http", verdict="allow"), "flow", res)
    check(f["bytesIn"] >= 64000000, "bytesIn %r" % f, res)
    print("  64 MB through the HTTP proxy in %.2fs" % (time.monotonic() - t0))


@suite.case
def denied_names_and_addresses_reach_nobody():
    mark = lab.mark()
    res = sbx("curl -sS --max-time 10 --socks5-hostname 127.0.0.1:1080 http://rebind.test/; "
              "echo curl-socks=$?; "
              "curl -sS --max-time 10 -o /dev/null -w 'http=%%{http_code}\\n' "
              "http://%s/latest/meta-data/; " % METADATA +
              "curl -sS --max-time 10 -p -x http://127.0.0.1:3128 http://%s:80/; "
              "echo curl-connect=$?; " % DAEMON +
              NP + " tcp %s 80 %s 80" % (INTERNAL, METADATA))
    out = text(res.stdout) + text(res.stderr)
    check("curl-socks=97" in out, "curl through SOCKS to rebind.test: %r" % out, res)
    check("http=403" in out, "curl absolute-form to metadata: %r" % out, res)
    check("curl-connect=56" in out, "curl CONNECT to the daemon's address: %r" % out, res)
    for f in lines(res, "tcp"):
        check(tcp_denied(f), "transparent %r" % f, res)
    acc = [e for e in lab.events(since=mark) if e["ev"] in ("accept", "udp")]
    check(not acc, "denied targets were reached: %r" % acc)


try:
    suite.finish()
finally:
    lab.__exit__(None, None, None)
    shutil.rmtree(WS, ignore_errors=True)
