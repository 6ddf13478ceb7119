"""The HTTP server under load and faults (issue 17 items 1, 5, 6, 7, 9 and
issue 16 item 8): the listener never wedges, slow and idle clients cannot take
every connection, protocol errors are answered with our JSON, one tenant or
token cannot hold the whole API. A real daemon on loopback, raw sockets."""
import http.client
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from sbxtest import ServeDaemon, Suite, check  # noqa: E402

S = Suite("http_limits")
TOKEN = "op-" + "0123456789abcdef0123456789abc"
ACME = "acme-" + "fedcba9876543210fedcba98765"
ACME2 = "acm2-" + "00112233445566778899aabbccd"
_daemons = []


class Daemon(ServeDaemon):
    def __init__(self, state_dir, config=None, extra=()):
        super().__init__(state_dir, TOKEN, config=config, extra=extra, registry=_daemons)

    def req(self, method, path, body=None, token=TOKEN, headers=None, timeout=10):
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = "Bearer " + token
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            try:
                parsed = json.loads(data) if data else None
            except ValueError:
                parsed = data.decode(errors="replace")
            return r.status, parsed, dict(r.getheaders())
        finally:
            c.close()

    def sock(self, timeout=5):
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)


def daemon(yaml_text=""):
    d = tempfile.mkdtemp(prefix="sbx-httplim-")
    cfg = os.path.join(d, "config.yaml")
    with open(cfg, "w") as f:
        f.write(yaml_text)
    return Daemon(os.path.join(d, "state"), config=cfg).start()


def read_answer(s, limit=5.0):
    """Everything the server sends until it closes or goes quiet: bytes."""
    s.settimeout(limit)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
            if b"\r\n\r\n" in out:
                head, _, rest = out.partition(b"\r\n\r\n")
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        if len(rest) >= int(line.split(b":")[1]):
                            return out
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


if __name__ == "__main__":
    S.finish()
