"""A bounded HTTP fuzz run against a real daemon (issue 17): malformed
methods, paths, versions, headers, bodies, chunking, lies in Content-Length
and huge query strings, each on its own connection (some pipelined after a
good request, some sent on a kept-alive connection after the answer to a good
request, some chunked bodies beginning with kilobytes of good chunks). Asserts:
the daemon never crashes, every connection is answered or closed within 5 s,
every answer has one head, no answer is an HTML page, and every error answer is
our JSON {"error":{"code","message"}}.

SBX_FUZZ_SECONDS sets the run's length (default 30), SBX_FUZZ_SEED its seed
(printed, to replay a failure). Loopback only."""
import json
import os
import random
import re
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from sbxtest import ServeDaemon, Suite, check  # noqa: E402

S = Suite("http_fuzz")
TOKEN = "op-" + "0123456789abcdef0123456789abc"
SECONDS = float(os.environ.get("SBX_FUZZ_SECONDS", "30"))
SEED = int(os.environ.get("SBX_FUZZ_SEED", str(int(time.time()))))
HANG = 5.0
_daemons = []


class Daemon(ServeDaemon):
    def __init__(self, state_dir, config=None):
        super().__init__(state_dir, TOKEN, config=config, registry=_daemons)

    def req(self, method, path, body=None, token=None, timeout=5):
        st, body, _ = exchange(self.port, ("%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                                           % (method, path)).encode(), timeout)
        return st, body, {}


def exchange(port, data, timeout=HANG, sock=None):
    """Send data, half-close, read until the server closes. Returns (first
    status or None, parsed first body or None, raw bytes). sock: an open
    connection to use."""
    s = sock or socket.create_connection(("127.0.0.1", port), timeout=timeout)
    out = b""
    t0 = time.monotonic()
    try:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may answer and close before all is sent
        while time.monotonic() - t0 < timeout:
            try:
                b = s.recv(65536)
            except socket.timeout:
                break
            except OSError:
                break
            if not b:
                break
            out += b
    finally:
        s.close()
    st = None
    parsed = None
    m = re.match(rb"HTTP/1\.[01] (\d{3}) ", out)
    if m:
        st = int(m.group(1))
        body = out.partition(b"\r\n\r\n")[2]
        try:
            parsed = json.loads(body.split(b"\nHTTP/1.")[0]) if body else None
        except (ValueError, RecursionError):  # a deep echo is not this test's business
            parsed = None
    return st, parsed, out


GOOD = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def exchange_later(port, data, timeout=HANG):
    """A good request and its whole answer first, then data on the same
    kept-alive connection (as exchange). Returns what came after the first
    answer, like exchange; status None when the first answer did not come."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    first = b""
    try:
        s.sendall(GOOD)
        while True:
            b = s.recv(65536)
            if not b:
                s.close()
                return None, None, b"(no answer to the first, good request) " + first
            first += b
            head, sep, body = first.partition(b"\r\n\r\n")
            m = re.search(rb"(?im)^content-length: *(\d+)", head)
            if sep and m and len(body) >= int(m.group(1)):
                break
    except OSError:
        s.close()
        raise
    return exchange(port, data, timeout, sock=s)


def answers(out):
    """Split raw bytes into [(status, head, body)] (Content-Length framing;
    chunked bodies are taken whole)."""
    res = []
    while out:
        m = re.match(rb"HTTP/1\.[01] (\d{3}) [^\r\n]*\r\n", out)
        if not m:
            res.append((None, out[:200], b""))
            break
        head, _, rest = out.partition(b"\r\n\r\n")
        cl = re.search(rb"(?im)^content-length: *(\d+)", head)
        if cl:
            n = int(cl.group(1))
            body, out = rest[:n], rest[n:]
        else:
            body, out = rest, b""
        res.append((int(m.group(1)), head, body))
    return res


def gen(r, pipelined=True):
    """One random request: bytes, and whether a head is expected back."""
    methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "GE T", "", "G\x00T",
               "X" * 40, "post", "BREW"]
    paths = ["/healthz", "/readyz", "/runtime/status", "/runtime/tasks", "/runtime/exec",
             "/runtime/tasks/nope", "/runtime/files?path=a.txt", "/runtime/stream?sessionID=s",
             "/execute", "/", "*", "http://x/healthz", "/%00", "/a%2", "/../../etc/passwd",
             "/runtime/files?path=../../x", "/" + "a" * r.choice([10, 5000, 9000]),
             "/healthz?" + "&".join("p%d=%d" % (i, i) for i in range(r.choice([5, 99, 101, 700]))),
             "/healthz?" + "x" * 3000, "/\xff\xfe", "/runtime/tasks?limit=-1"]
    versions = ["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.9", "HTTP/1", "HTTP/1.1 extra",
                "", "http/1.1", "HTTP/01.1"]
    method = r.choice(methods)
    path = r.choice(paths)
    version = r.choices(versions, weights=[12, 3, 1, 1, 1, 1, 1, 1, 1])[0]
    line = "%s %s %s" % (method, path, version) if r.random() < 0.95 else r.choice(
        ["", "GET", "GET /healthz", "\x01\x02\x03"])
    headers = []
    if r.random() < 0.85:
        headers.append("Host: x")
    if r.random() < 0.1:
        headers.append("Host: y")
    auth = r.random()
    if auth < 0.3:
        headers.append("Authorization: Bearer " + TOKEN)
    elif auth < 0.4:
        headers.append("Authorization: Bearer wrong")
    elif auth < 0.45:
        headers.append("Authorization: " + "B" * 9000)
    bodies = [b"", b"{}", b'{"command":["nope-no-such-binary"]}', b"{", b"[1,2", b"\x00\xff" * 8,
              b'{"command":' + b"[" * 2000 + b"]" * 2000 + b"}", b"null", b'{"a":"\\ud800"}',
              b"x" * r.choice([10, 70000])]
    body = r.choice(bodies)
    framing = r.random()
    if framing < 0.4:
        headers.append("Content-Length: %d" % len(body))
    elif framing < 0.5:
        headers.append("Content-Length: %d" % max(0, len(body) - r.randint(1, 5)))
    elif framing < 0.55:
        headers.append("Content-Length: %d" % (len(body) + r.randint(1, 100)))
    elif framing < 0.6:
        headers.append("Content-Length: " + r.choice(["-5", "abc", "1e3", "", "99999999999999999999",
                                                      "5, 5", " 2 "]))
    elif framing < 0.7:
        headers.append("Transfer-Encoding: chunked")
        body = (b"%x\r\n" % len(body) + body + b"\r\n" if body else b"") + b"0\r\n\r\n"
        # deep: after 8 to 24 KiB of good chunks (the gate sees the first 8 KiB)
        deep = (b"400\r\n" + b" " * 0x400 + b"\r\n") * r.randint(8, 24) if r.random() < 0.4 else b""
        if r.random() < 0.4:  # malformed chunking
            body = r.choice([b"zz\r\n{}\r\n0\r\n\r\n", b"2\r\n{}}}\r\n0\r\n\r\n",
                             b"fffffffffffffffffff\r\n{}\r\n0\r\n\r\n", b"2 \r\n{}\r\n0\r\n\r\n",
                             b"2\n{}\n0\n\n", b"-2\r\n{}\r\n0\r\n\r\n", b"2\r\n{}",
                             b"0\r\nX-Trailer: 1\r\n\r\n", b"2;ext=1\r\n{}\r\n0\r\n\r\n"])
        body = deep + body
    elif framing < 0.75:
        headers.append("Transfer-Encoding: " + r.choice(["gzip, chunked", "chunked, chunked",
                                                         "identity", "chunked;x=1", "CHUNKED"]))
        body = b"2\r\n{}\r\n0\r\n\r\n"
    elif framing < 0.78:
        headers += ["Content-Length: 2", "Transfer-Encoding: chunked"]
    if r.random() < 0.1:
        headers.append(r.choice(["X-Bad : 1", " folded", "X-A:\x01", "NoColon", ":empty",
                                 "X-Big: " + "h" * r.choice([100, 9000, 40000]),
                                 "Expect: 100-continue", "Expect: teapot", "Connection: upgrade",
                                 "Upgrade: websocket", "Last-Event-ID: 99999999999999999999999",
                                 "X-Tenant-Code: ../x"]))
    if r.random() < 0.05:
        headers += ["X-N%d: v" % i for i in range(r.choice([50, 120]))]
    eol = "\r\n" if r.random() < 0.95 else "\n"
    data = (line + eol + eol.join(headers) + eol + eol).encode("latin-1") + body
    if pipelined and r.random() < 0.1:  # pipelined after a good request
        data = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + data
    if r.random() < 0.03:
        data = bytes(r.getrandbits(8) for _ in range(r.choice([1, 20, 300])))
    return data


def html(head, body):
    return b"text/html" in head.lower() or b"<html" in body[:200].lower()


def fuzz(seconds, keep_alive, pipelined, later=False):
    d = tempfile.mkdtemp(prefix="sbx-fuzz-")
    cfg = os.path.join(d, "config.yaml")
    with open(cfg, "w") as f:
        f.write("server:\n  header_timeout: 2s\n  body_timeout: 2s\n  max_body: 64k\n"
                "  keep_alive: %s\n" % ("true" if keep_alive else "false"))
    dm = Daemon(os.path.join(d, "state"), config=cfg).start()
    r = random.Random(SEED)
    print("seed %d, %.0f s, keep_alive %s" % (SEED, seconds, keep_alive))
    n = errors = 0
    bad = []
    t_end = time.monotonic() + seconds
    try:
        while time.monotonic() < t_end and len(bad) < 5:
            data = gen(r, pipelined)
            t0 = time.monotonic()
            if later and r.random() < 0.5:
                st, _, out = exchange_later(dm.port, data)
            else:
                st, _, out = exchange(dm.port, data)
            took = time.monotonic() - t0
            n += 1
            if took >= HANG:
                bad.append(("hang %.1fs" % took, data[:300]))
                continue
            if dm.proc.poll() is not None:
                bad.append(("daemon exited %r" % dm.proc.returncode, data[:300]))
                break
            for status, head, body in answers(out):
                if status is None:
                    bad.append(("not an HTTP answer", out[:300], data[:300]))
                    break
                if html(head, body):
                    bad.append(("an HTML page", out[:400], data[:300]))
                    break
                if status >= 400:
                    errors += 1
                    try:
                        e = json.loads(body)["error"]
                        ok = isinstance(e["code"], str) and isinstance(e["message"], str)
                    except (ValueError, KeyError, TypeError, RecursionError):
                        ok = False
                    if not ok:
                        bad.append(("error not our JSON", out[:400], data[:300]))
                        break
        print("%d requests, %d error answers checked" % (n, errors))
        check(not bad, "every answer well framed and every error JSON (seed %d)" % SEED, bad)
        check(dm.proc.poll() is None, "the daemon is alive", dm.output())
        st, b, _ = dm.req("GET", "/healthz")
        check(st == 200, "and answers", (st, b))
        check(n > 50, "the run made requests", n)
    finally:
        dm.stop()
    log = dm.output(whole=True)
    check("ERROR: AddressSanitizer" not in log and "runtime error:" not in log,
          "no sanitizer report", log[-2000:])


@S.case
def fuzz_with_keep_alive():
    """Each connection carries one request, or more pipelined in the same
    send: every head is checked at the gate."""
    fuzz(SECONDS * 2 / 3, keep_alive=True, pipelined=True)


@S.case
def fuzz_without_keep_alive_pipelined():
    """keep_alive: false: requests pipelined after a good one are never
    parsed (the connection closes after the first answer)."""
    fuzz(SECONDS / 3, keep_alive=False, pipelined=True)


@S.case
def fuzz_later_requests_and_deep_chunks():
    """Issue 17.6: half the requests come on a kept-alive connection after
    the answer to a good one, and chunked bodies often begin with up to 24 KiB
    of good chunks: each is checked as it streams (they got libmicrohttpd's
    HTML page before)."""
    fuzz(SECONDS / 3, keep_alive=True, pipelined=True, later=True)


if __name__ == "__main__":
    S.finish()
