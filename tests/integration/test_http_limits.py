"""The HTTP server under load and faults (issue 17 items 1, 5, 6, 7, 9 and
issue 16 item 8): the listener never wedges, slow and idle clients cannot take
every connection, protocol errors are answered with our JSON, one tenant or
token cannot hold the whole API. A real daemon on loopback, raw sockets."""
import http.client
import json
import os
import re
import signal
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from sbxtest import EXTENDED, ServeDaemon, Suite, check  # noqa: E402

S = Suite("http_limits")
TOKEN = "op-" + "0123456789abcdef0123456789abc"
ACME = "acme-" + "fedcba9876543210fedcba98765"
ACME2 = "acm2-" + "00112233445566778899aabbccd"
_daemons = []


class Daemon(ServeDaemon):
    def __init__(self, state_dir, config=None, extra=()):
        super().__init__(state_dir, TOKEN, config=config, extra=extra, registry=_daemons)

    def req(self, method, path, body=None, token=TOKEN, headers=None, timeout=10):
        """sbxtest's request with this file's token and our answers on the
        original's routes (EXTENDED)."""
        return super().req(method, path, body, token=token, headers={**EXTENDED, **(headers or {})},
                           timeout=timeout)

    def sock(self, timeout=5):
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)


def daemon(yaml_text=""):
    d = tempfile.mkdtemp(prefix="sbx-httplim-")
    cfg = os.path.join(d, "config.yaml")
    with open(cfg, "w") as f:
        f.write(yaml_text)
    return Daemon(os.path.join(d, "state"), config=cfg).start()


def read_answer(s, limit=5.0):
    """Everything the server sends until it closes (or limit passes): bytes."""
    s.settimeout(limit)
    out = b""
    deadline = time.monotonic() + limit
    try:
        while time.monotonic() < deadline:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except socket.timeout:
        pass
    except ConnectionResetError:
        pass
    return out


def raw(d, data, limit=5.0, shut=True):
    """Sends data on a new connection; returns (status, json body or None, raw)."""
    s = d.sock(limit)
    try:
        s.sendall(data)
        if shut:
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        out = read_answer(s, limit)
    finally:
        s.close()
    if not out.startswith(b"HTTP/1."):
        return None, None, out
    head, _, body = out.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    return status, parsed, out


def healthz(d, timeout=5):
    st, b, _ = d.req("GET", "/healthz", token=None, timeout=timeout)
    return st == 200


# ---- 17.1: the listener never wedges ----

@S.case
def listener_rearms_after_the_connection_limit():
    d = daemon("server:\n  max_connections: 16\n")
    try:
        for trial in range(20):
            conns = []
            for _ in range(16):
                c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=5)
                c.request("GET", "/healthz")
                r = c.getresponse()
                r.read()
                check(r.status == 200, "trial %d: a keep-alive GET answered" % trial, r.status)
                conns.append(c)
            # All the closes reach the daemon at once (as from a busy loop):
            # stopped while they happen, it sees them in one run.
            if trial % 2 == 0:
                d.proc.send_signal(signal.SIGSTOP)
            for c in conns:
                c.close()
            if trial % 2 == 0:
                time.sleep(0.05)
                d.proc.send_signal(signal.SIGCONT)
            ok = False
            try:
                ok = healthz(d, timeout=5)
            except OSError as e:
                ok = e
            check(ok is True, "trial %d: /healthz answers after 16 keep-alive connections "
                  "closed" % trial, ok)
    finally:
        d.stop()


# ---- 17.6 and 17.7: protocol errors are our JSON, answered at once ----

PROTOCOL_CASES = [
    # (what, request bytes, expected status)
    ("no Host on HTTP/1.1", b"GET /healthz HTTP/1.1\r\n\r\n", 400),
    ("negative Content-Length",
     b"POST /runtime/tasks HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", 400),
    ("Content-Length twice",
     b"POST /runtime/tasks HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
     b"Content-Length: 3\r\n\r\n{}", 400),
    ("Content-Length with Transfer-Encoding",
     b"POST /runtime/tasks HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("Transfer-Encoding gzip, chunked",
     b"POST /runtime/tasks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
     b"2\r\n{}\r\n0\r\n\r\n", 400),
    ("Transfer-Encoding chunked, chunked",
     b"POST /runtime/tasks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"
     b"2\r\n{}\r\n0\r\n\r\n", 400),
    ("600 query parameters",
     b"GET /healthz?" + b"&".join(b"p%d=1" % i for i in range(600)) + b" HTTP/1.1\r\nHost: x\r\n\r\n",
     414),
    ("a 10 KB target", b"GET /" + b"a" * 10000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    ("40 KB of headers",
     b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"h" * 40000 + b"\r\n\r\n", 431),
    ("HTTP/2.0", b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    ("HTTP/1.7", b"GET /healthz HTTP/1.7\r\nHost: x\r\n\r\n", 505),
    ("no version", b"GET /healthz\r\nHost: x\r\n\r\n", 400),
    ("binary junk", bytes(range(1, 32)) * 4 + b"\r\n\r\n", 400),
    ("a space before the colon", b"GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n", 400),
    ("a folded header", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  2\r\n\r\n", 400),
    ("a NUL in a header", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: \x00\r\n\r\n", 400),
    ("an absolute target", b"GET http://x/healthz HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("a head cut short", b"GET /healthz HTTP/1.1\r\nHost: x\r\n", 400),
    ("a chunk size that is not hex",
     b"POST /runtime/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() +
     b"\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", 400),
    ("a chunk size of 20 hex digits",
     b"POST /runtime/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() +
     b"\r\nTransfer-Encoding: chunked\r\n\r\n" + b"f" * 20 + b"\r\n{}\r\n0\r\n\r\n", 413),
    ("a chunk longer than its size",
     b"POST /runtime/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() +
     b"\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}}}\r\n0\r\n\r\n", 400),
    ("a malformed request pipelined behind a good one",
     b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/9.9\r\nHost: x\r\n\r\n", 505),
    ("a body longer than its Content-Length, the rest not a request",
     b"POST /runtime/tasks HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}garbage\r\n\r\n",
     400),
    ("a body over max_body",
     b"POST /runtime/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() +
     b"\r\nContent-Length: 99999999999\r\n\r\n", 413),
]


STATUS_LINE = re.compile(rb"(?:^|\n)HTTP/1\.[01] \d{3} ")


@S.case
def protocol_errors_are_one_json_answer_each():
    d = daemon()
    try:
        for what, data, want in PROTOCOL_CASES:
            t0 = time.monotonic()
            st, body, out = raw(d, data, limit=5)
            took = time.monotonic() - t0
            check(st == want, "%s: status %s" % (what, want), out[:300])
            check(took < 3, "%s: answered at once" % what, took)
            check(len(STATUS_LINE.findall(out)) == 1, "%s: one status line, one head" % what,
                  out[:600])
            check(isinstance(body, dict) and isinstance(body.get("error"), dict) and
                  body["error"].get("code") and body["error"].get("message"),
                  "%s: a JSON error body" % what, out[:600])
            check(b"content-type: application/json" in out.lower(), "%s: JSON type" % what, out[:300])
        check(healthz(d), "the server still answers")
    finally:
        d.stop()


def read_one_answer(s, limit=5.0):
    """One whole answer on a kept-alive connection (Content-Length framed)."""
    s.settimeout(limit)
    out = b""
    while b"\r\n\r\n" not in out:
        b = s.recv(65536)
        check(b, "an answer", out)
        out += b
    head, _, body = out.partition(b"\r\n\r\n")
    n = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
    while len(body) < n:
        b = s.recv(65536)
        check(b, "the whole body", out)
        body += b
    return head, body


def no_html(what, out):
    check(b"<html" not in out.lower() and b"text/html" not in out.lower(),
          "%s: no HTML page" % what, out[:600])


@S.case
def later_requests_and_deep_chunks_are_checked_too():
    """Issue 17.6: a malformed request sent on a kept-alive connection after
    an earlier answer, and a malformed chunk beyond the first 8 KiB of a
    body, get our JSON error too (they got libmicrohttpd's HTML page)."""
    d = daemon()
    good = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    try:
        for what, data, want in PROTOCOL_CASES:
            s = d.sock(5)
            try:
                s.sendall(good)
                head, body = read_one_answer(s)
                check(head.startswith(b"HTTP/1.1 200"), "%s: the first answer" % what, head)
                time.sleep(0.05)  # the answer is out; the next request comes later
                s.sendall(data)
                try:
                    s.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                out = read_answer(s, 5)
            finally:
                s.close()
            no_html(what, out)
            # a case that pipelines a good request first has its answer first
            heads = list(re.finditer(rb"(?:^|\n)HTTP/1\.1 (\d{3}) ", out))
            statuses = [int(m.group(1)) for m in heads]
            check(statuses and statuses[-1] == want and len(statuses) <= 2,
                  "%s, after an answer: a %d answer last" % (what, want), out[:600])
            last = out[heads[-1].start():]
            _, _, b = last.partition(b"\r\n\r\n")
            try:
                err = json.loads(b)["error"]
            except (ValueError, KeyError, TypeError):
                err = None
            check(isinstance(err, dict) and err.get("code") and err.get("message"),
                  "%s, after an answer: our JSON error" % what, out[:600])
        # deep in a chunked body: 20 KiB of good chunks, then a bad one
        auth = b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
        good_chunks = (b"400\r\n" + b" " * 0x400 + b"\r\n") * 20
        for what, bad, want in (
                ("a size that is not hex", b"zz\r\n{}\r\n0\r\n\r\n", 400),
                ("a chunk longer than its size", b"2\r\n{}}}\r\n0\r\n\r\n", 400),
                ("a size of 20 hex digits", b"f" * 20 + b"\r\n", 413),
                ("a trailer", b"0\r\nX-T: 1\r\n\r\n", 400)):
            for first in (b"", good):
                data = (first + b"POST /runtime/tasks HTTP/1.1\r\nHost: x\r\n" + auth +
                        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                        + good_chunks + bad)
                st, body, out = raw(d, data, limit=5)
                label = "%s after 20 KiB of chunks%s" % (what, " (second request)" if first else "")
                no_html(label, out)
                statuses = [int(m) for m in re.findall(rb"(?:^|\n)HTTP/1\.1 (\d{3}) ", out)]
                check(statuses == ([200] if first else []) + [want],
                      "%s: answered %d in our JSON" % (label, want), out[:800])
                check(out.rstrip().endswith(b"}}") and b'"error"' in out, "%s: JSON" % label,
                      out[-300:])
        # a bad chunk while the client goes on sending (1.6 MB): the answer
        # still reaches it (what it sends is dropped for a moment, no reset)
        s = d.sock(10)
        try:
            s.sendall(b"POST /runtime/tasks HTTP/1.1\r\nHost: x\r\n" + auth +
                      b"Transfer-Encoding: chunked\r\n\r\n" + good_chunks + b"zz\r\n")

            def flood():
                try:
                    for _ in range(400):
                        s.send(b"y" * 4096)
                except OSError:
                    pass
            t = threading.Thread(target=flood, daemon=True)
            t.start()
            out = read_answer(s, 8)
            t.join(10)
        finally:
            s.close()
        check(out.startswith(b"HTTP/1.1 400") and b"malformed chunked body" in out,
              "a bad chunk with more coming: our 400 arrives", out[:400])
        # a good body after all that: the server is fine
        body = json.dumps({"command": ["true"]}).encode()
        st, b, out = raw(d, b"POST /runtime/exec HTTP/1.1\r\nHost: x\r\n" + auth +
                         b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
                         b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n", limit=30,
                         shut=False)
        check(st == 200, "a chunked exec", out[:600])
        # an Upgrade request that is not upgraded (a route without one): what
        # follows on the connection is HTTP again, and checked again
        s = d.sock(5)
        try:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                      b"Connection: Upgrade\r\n\r\n")
            head, _ = read_one_answer(s)
            check(head.startswith(b"HTTP/1.1 200"), "an Upgrade request answered 200", head)
            time.sleep(0.05)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            head, _ = read_one_answer(s)
            check(head.startswith(b"HTTP/1.1 200"), "then a plain request", head)
            time.sleep(0.05)
            s.sendall(b"GET /x HTTP/1.1 junk\r\nHost: x\r\n\r\n")
            s.shutdown(socket.SHUT_WR)
            out = read_answer(s, 5)
        finally:
            s.close()
        no_html("after an Upgrade request answered 200", out)
        check(out.startswith(b"HTTP/1.1 505") and out.rstrip().endswith(b"}}"),
              "an unanswered Upgrade: a later bad request gets our JSON error", out[:800])
    finally:
        d.stop()


@S.case
def valid_requests_pass_the_gate():
    """The head check lets ordinary requests through: HTTP/1.0, leading empty
    lines, keep-alive, pipelining, chunked bodies."""
    d = daemon()
    try:
        st, _, out = raw(d, b"GET /healthz HTTP/1.0\r\n\r\n")
        check(st == 200, "HTTP/1.0 without Host", out[:200])
        st, _, out = raw(d, b"\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        check(st == 200, "a leading empty line", out[:200])
        st, _, out = raw(d, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        check(len(STATUS_LINE.findall(out)) == 2 and out.count(b"HTTP/1.1 200") == 2, "two pipelined requests, two answers", out[:600])
        body = json.dumps({"command": ["true"]}).encode()
        st, b, out = raw(d, b"POST /runtime/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                         TOKEN.encode() + b"\r\nTransfer-Encoding: chunked\r\n"
                         b"Content-Type: application/json\r\nConnection: close\r\n\r\n" +
                         b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n", limit=30, shut=False)
        check(st == 200, "a chunked exec", out[:600])
    finally:
        d.stop()


# ---- 17.5: slow and idle connections ----

def connect_from(d, addr, timeout=5):
    """A connection from the loopback address addr (127.0.0.0/8 all lead here)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((addr, 0))
    s.connect(("127.0.0.1", d.port))
    return s


def healthz_from(d, addr, timeout=5):
    s = connect_from(d, addr, timeout)
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        out = read_answer(s, timeout)
    finally:
        s.close()
    return out.startswith(b"HTTP/1.1 200")


@S.case
def idle_connections_make_room():
    """Idle connections (nothing sent, or kept alive after a request) from 40
    addresses up to the cap: a new client is still served, the idle one
    waiting the longest closed to make room."""
    d = daemon("server:\n  max_connections: 40\n  max_connections_per_address: 4\n")
    held = []
    try:
        for i in range(40):
            s = connect_from(d, "127.0.1.%d" % (i + 1))
            if i % 2:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            held.append(s)
        time.sleep(0.3)
        for i in range(10):
            t0 = time.monotonic()
            check(healthz_from(d, "127.0.2.%d" % (i + 1), timeout=3),
                  "a new client is served while 40 idle connections fill the cap (%d)" % i)
            check(time.monotonic() - t0 < 2.5, "served at once", time.monotonic() - t0)
    finally:
        for s in held:
            s.close()
        d.stop()


@S.case
def per_address_share_and_slow_bodies():
    """Slow bodies (a byte a second) are requests in progress, never made to
    give way; one address holds at most its share (429 beyond, in JSON),
    others are served, and a body too slow is cut after body_timeout."""
    d = daemon("server:\n  max_connections: 32\n  max_connections_per_address: 6\n"
               "  body_timeout: 2s\n  body_min_rate: 1k\n")
    held = []
    stop = threading.Event()
    try:
        head = ("POST /runtime/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{" % TOKEN)
        for a in range(4):
            for i in range(6):
                s = connect_from(d, "127.0.3.%d" % (a + 1))
                s.sendall(head.encode())
                held.append(s)
        # the seventh from one address: refused with our JSON
        s = connect_from(d, "127.0.3.1")
        s.sendall(head.encode())
        out = read_answer(s, 5)
        s.close()
        check(out.startswith(b"HTTP/1.1 429") and b"max_connections_per_address" in out,
              "over its address's share: 429", out[:400])

        def trickle():
            while not stop.is_set():
                for s in held:
                    try:
                        s.send(b" ")
                    except OSError:
                        pass
                stop.wait(1)
        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        check(healthz_from(d, "127.0.4.1"), "another address is served beside 24 slow bodies")
        # body_timeout 2 s + 1 s per KiB: the trickle (~1 byte/s) is cut in a few seconds
        deadline = time.monotonic() + 15
        closed = 0
        while time.monotonic() < deadline and closed < len(held):
            closed = 0
            for s in held:
                s.settimeout(0.05)
                try:
                    if s.recv(4096) == b"":
                        closed += 1
                except socket.timeout:
                    pass
                except OSError:
                    closed += 1
        check(closed == len(held), "every slow body cut within 15 s", (closed, len(held)))
    finally:
        stop.set()
        for s in held:
            s.close()
        d.stop()


# ---- 16.8: one tenant or token cannot hold the whole API ----

# How soon a closed stream's place is back: well below any heartbeat (15 s for
# the session stream and OpenSandbox's, 5 s for MCP's), with room for ASan on
# a loaded machine.
PLACE_BACK_S = 2.0


TENANTS_YAML = """server:
  max_streams_per_tenant: 3
  max_streams_per_token: 5
  max_requests_per_tenant: 6
  tokens:
    - name: acme-agent
      token: "%s"
      tenant: acme
    - name: beta-agent
      token: "%s"
      tenant: beta
""" % (ACME, ACME2)


def open_stream(d, token, tenant=None, timeout=5):
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=timeout)
    h = {"Authorization": "Bearer " + token, "Accept": "text/event-stream"}
    if tenant:
        h["X-Tenant-Code"] = tenant
    c.request("GET", "/runtime/stream?sessionID=s1", headers=h)
    r = c.getresponse()
    if r.status != 200:
        body = r.read()
        c.close()
        return None, r.status, body
    return c, 200, None


@S.case
def streams_per_tenant_and_token():
    d = daemon(TENANTS_YAML)
    streams = []
    try:
        for i in range(3):
            c, st, body = open_stream(d, ACME, tenant="acme")
            check(st == 200, "acme's stream %d" % i, (st, body))
            streams.append(c)
        c, st, body = open_stream(d, ACME, tenant="acme")
        check(st == 429 and b"max_streams_per_tenant" in body, "acme's fourth stream: 429",
              (st, body))
        check(json.loads(body)["error"]["code"] == "too_many_requests", "JSON", body)
        c, st, body = open_stream(d, ACME2, tenant="beta")
        check(st == 200, "another tenant still streams", (st, body))
        streams.append(c)
        check(healthz(d), "the API answers")
        # a closed stream gives its place back at once
        streams.pop(0).close()
        t0 = time.monotonic()
        while True:
            c, st, body = open_stream(d, ACME, tenant="acme")
            if st == 200 or time.monotonic() - t0 > PLACE_BACK_S:
                break
            time.sleep(0.05)
        check(st == 200, "a new acme stream once one is closed", (st, body))
        check(time.monotonic() - t0 < PLACE_BACK_S, "... at once", time.monotonic() - t0)
        streams.append(c)
        # the operator's token, naming a tenant: counted for that tenant
        c, st, body = open_stream(d, TOKEN, tenant="acme")
        check(st == 429, "an operator's stream for a full tenant: 429", (st, body))
        for i in range(5):
            c, st, body = open_stream(d, TOKEN, tenant="t%d" % i)
            check(st == 200, "operator stream %d" % i, (st, body))
            streams.append(c)
        c, st, body = open_stream(d, TOKEN, tenant="t9")
        check(st == 429 and b"max_streams_per_token" in body, "the token's sixth stream: 429",
              (st, body))
    finally:
        for c in streams:
            c.close()
        d.stop()


def stream_socket(d, path="/runtime/stream?sessionID=s1", method="GET", body=b"",
                  headers=""):
    """A raw connection with an event stream open on it (its head read)."""
    s = d.sock(10)
    s.sendall(("%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n%s"
               "Content-Length: %d\r\n\r\n" % (method, path, TOKEN, headers, len(body))).encode()
              + body)
    got = b""
    while b"\r\n\r\n" not in got:
        b = s.recv(1)
        check(b, "the stream's head", got)
        got += b
    check(got.startswith(b"HTTP/1.1 200") and b"text/event-stream" in got, "a stream", got)
    return s


def place_back(d):
    """Seconds until the token's one stream place is free again (a new
    stream opens), or None after 20 s."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < 20:
        c, st, _ = open_stream(d, TOKEN)
        if st == 200:
            took = time.monotonic() - t0
            c.close()
            time.sleep(0.1)
            return took
        time.sleep(0.02)
    return None


def wait_free(d):
    check(place_back(d) is not None, "the place is free before the next try")


@S.case
def closed_streams_free_their_place_at_once():
    """Issue 16.8: however its client ends it, a stream's place is free at
    once (not at its next heartbeat). The reset cases failed before: libevent
    2.1 reports a reset connection as readable and writable, never as closed,
    and the hang-up watch waited for a close only; a client closing with
    data unread (the stream's first comment) resets the connection."""
    d = daemon("server:\n  max_streams_per_token: 1\n")
    try:
        c, st, body = open_stream(d, TOKEN)
        check(st == 200, "the token's one stream", (st, body))
        c2, st, body = open_stream(d, TOKEN)
        check(st == 429 and b"max_streams_per_token" in body, "its second: 429", (st, body))
        c.close()
        wait_free(d)

        def ends(how):
            s = stream_socket(d)
            time.sleep(0.3)  # its first comment comes
            if how == "read, then close":
                check(b"connected" in s.recv(4096), "the first comment read")
                s.close()
            elif how == "close with data unread (a reset)":
                s.close()
            elif how == "a reset (SO_LINGER 0)":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                s.close()
            elif how == "half-close (SHUT_WR)":
                s.shutdown(socket.SHUT_WR)
                return s
            return None

        for how in ("read, then close", "close with data unread (a reset)",
                    "a reset (SO_LINGER 0)", "half-close (SHUT_WR)"):
            for trial in range(3):
                kept = ends(how)
                took = place_back(d)
                check(took is not None and took < PLACE_BACK_S,
                      "%s (%d): the place is back at once" % (how, trial), took)
                if kept:
                    t0 = time.monotonic()
                    read_answer(kept, 5)
                    check(time.monotonic() - t0 < 4.5, "... and its connection closed",
                          time.monotonic() - t0)
                    kept.close()
                if took is None or took >= PLACE_BACK_S:
                    wait_free(d)

        # MCP's event stream of a call whose output floods it: the client
        # stops reading, the buffers fill (the stream is not parked: the
        # server waits to write), then it closes.
        call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "exec", "_meta": {"progressToken": "p"},
            "arguments": {"command": "while :; do echo 0123456789abcdef0123456789; done"}}})
        s = stream_socket(d, "/mcp", "POST", call.encode(),
                          "Content-Type: application/json\r\n"
                          "Accept: application/json, text/event-stream\r\n")
        time.sleep(1.5)
        s.close()
        took = place_back(d)
        check(took is not None and took < PLACE_BACK_S,
              "an MCP stream, full and unread, closed: the place is back at once", took)
        deadline = time.monotonic() + 10
        running = None
        while time.monotonic() < deadline:
            st, b, _ = d.req("GET", "/runtime/tasks?status=running")
            running = b.get("tasks") if st == 200 else b
            if running == []:
                break
            time.sleep(0.1)
        check(running == [], "... and its task ended", running)

        # OpenSandbox's command stream, closed with its first event unread
        st, box, _ = d.req("POST", "/v1/sandboxes", {"image": {"uri": "python"}, "timeout": 600})
        check(st == 202, "an OpenSandbox sandbox", (st, box))
        s = stream_socket(d, "/v1/sandboxes/%s/proxy/44772/command" % box["id"], "POST",
                          b'{"command": "sleep 30"}', "Content-Type: application/json\r\n")
        time.sleep(0.3)
        s.close()
        took = place_back(d)
        check(took is not None and took < PLACE_BACK_S,
              "an OpenSandbox command stream closed: the place is back at once", took)
    finally:
        d.stop()


# ---- 17.9: the stream's edges, an exec at SIGTERM ----

def read_events(r, n, limit=10):
    """The first n events of an open stream: [(id, event, data)]."""
    out, cur = [], {}
    deadline = time.monotonic() + limit
    while len(out) < n and time.monotonic() < deadline:
        line = r.fp.readline()
        if not line:
            break
        line = line.decode().rstrip("\n")
        if line == "":
            if "data" in cur:
                out.append((cur.get("id"), cur.get("event"), json.loads(cur["data"])))
            cur = {}
        elif not line.startswith(":") and ":" in line:
            k, _, v = line.partition(":")
            cur[k] = v[1:] if v.startswith(" ") else v
    return out


@S.case
def last_event_id_beyond_the_end_and_events_lost():
    d = daemon("retention:\n  events_per_session: 2\n")
    try:
        for i in range(3):
            st, b, _ = d.req("POST", "/runtime/exec", {"command": ["true"], "sessionID": "s1"},
                             timeout=60)
            check(st == 200, "exec %d in s1" % i, (st, b))
        d.stop()
        d.start()  # retention runs at the start: s1 keeps its last 2 events
        c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=10)
        c.request("GET", "/runtime/stream?sessionID=s1",
                  headers={"Authorization": "Bearer " + TOKEN, "Last-Event-ID": "1", **EXTENDED})
        r = c.getresponse()
        ev = read_events(r, 1)
        c.close()
        check(ev and ev[0][1] == "events_lost", "events_lost first", ev)
        check(ev[0][2].get("id") == int(ev[0][0]) and ev[0][2]["id"] == ev[0][2]["data"]["to"],
              "events_lost carries its id", ev)
        c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=10)
        c.request("GET", "/runtime/stream?sessionID=s1",
                  headers={"Authorization": "Bearer " + TOKEN, "Last-Event-ID": "999999",
                           **EXTENDED})
        r = c.getresponse()
        ev = read_events(r, 2)
        c.close()
        check(ev and ev[0][1] == "stream_reset" and ev[0][0] == "0", "stream_reset first", ev)
        check(ev[0][2]["data"]["lastEventId"] == 999999 and ev[0][2]["data"]["reason"],
              "it says why", ev)
    finally:
        d.stop()


@S.case
def exec_in_flight_at_sigterm_is_answered_canceled():
    d = daemon()
    answer = {}

    def call():
        try:
            answer["r"] = d.req("POST", "/runtime/exec", {"command": ["sleep", "30"]}, timeout=20)
        except Exception as e:  # noqa: BLE001 - reported below
            answer["e"] = repr(e)
    th = threading.Thread(target=call, daemon=True)
    try:
        th.start()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            st, b, _ = d.req("GET", "/runtime/tasks?status=running")
            if st == 200 and b["tasks"]:
                break
            time.sleep(0.05)
        check(b["tasks"], "the exec's task runs", b)
        d.stop()
        th.join(10)
        r = answer.get("r")
        check(r and r[0] == 200, "the exec was answered", answer)
        check(r[1]["status"] == "canceled" and r[1]["exitCode"] == 124 and
              "stopped" in r[1]["error"], "... as canceled", r)
    finally:
        d.stop()


# ---- 17.9: Idempotency-Key on task creation ----

@S.case
def idempotency_key_returns_the_same_task():
    d = daemon("server:\n  idempotency_ttl: 4s\n")
    try:
        body = {"command": ["echo", "once"]}
        h = {"Idempotency-Key": "k-1"}
        st, a, hd = d.req("POST", "/runtime/tasks", body, headers=h)
        check(st == 202 and a["id"], "created", (st, a))
        check("Idempotent-Replayed" not in hd, "not a replay", hd)
        st, b, hd = d.req("POST", "/runtime/tasks", body, headers=h)
        check(st == 202 and b["id"] == a["id"], "the same key: the same task", (st, a, b))
        check(hd.get("Idempotent-Replayed") == "true", "said to be a replay", hd)
        st, c, _ = d.req("POST", "/runtime/tasks", {"command": ["echo", "other"]}, headers=h)
        check(st == 409 and c["error"]["code"] == "conflict", "the key with another body: 409",
              (st, c))
        st, o, _ = d.req("POST", "/runtime/tasks", body,
                         headers={"Idempotency-Key": "k-1", "X-Tenant-Code": "other"})
        check(st == 202 and o["id"] != a["id"], "another tenant's key is its own", (st, o))
        st, e, _ = d.req("POST", "/runtime/tasks", body, headers={"Idempotency-Key": "x" * 300})
        check(st == 400, "a key over 255 characters: 400", (st, e))
        # exec: the finished task's answer, replayed
        h2 = {"Idempotency-Key": "exec-1"}
        st, x, _ = d.req("POST", "/runtime/exec", body, headers=h2, timeout=60)
        check(st == 200 and x["stdout"] == "once\n", "exec ran", (st, x))
        st, y, hd = d.req("POST", "/runtime/exec", body, headers=h2, timeout=60)
        check(st == 200 and y["taskId"] == x["taskId"] and y["stdout"] == "once\n",
              "exec replayed", (st, x, y))
        # durable: kept in the store across a restart
        d.stop()
        d.start()
        st, b, _ = d.req("POST", "/runtime/tasks", body, headers=h)
        check(st == 202 and b["id"] == a["id"], "the same task after a restart", (st, a, b))
        time.sleep(4.5)
        st, b, _ = d.req("POST", "/runtime/tasks", body, headers=h)
        check(st == 202 and b["id"] != a["id"], "after idempotency_ttl: a new task", (st, a, b))
    finally:
        d.stop()


if __name__ == "__main__":
    S.finish()
