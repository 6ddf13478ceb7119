#!/usr/bin/env python3
"""The cost of a new connection per request (server.keep_alive: false) against
keep-alive: GET /healthz round trips on loopback, one client, N each way.

Usage: SANDBOXD=build/sandboxd python3 bench/http_conn.py [N] (default 3000,
three rounds; prints the median of each).
       SANDBOXD=build/sandboxd python3 bench/http_conn.py exec [N] (default 300):
POST /runtime/exec {"command": ["true"]} round trips on one kept-alive
connection and ten /healthz round trips after each, three rounds (medians);
with SANDBOXD_B=other/sandboxd, the same against both daemons alternately.
       SANDBOXD=build/sandboxd python3 bench/http_conn.py files [MiB] (default 32):
PUT then GET a file of that size through /runtime/files, three rounds (and
alternately with SANDBOXD_B)."""
import os
import socket
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))
from sbxtest import ServeDaemon  # noqa: E402

TOKEN = "op-" + "0123456789abcdef0123456789abc"
REQ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def roundtrip(s):
    s.sendall(REQ)
    out = b""
    while not out.endswith(b"}\n"):
        b = s.recv(4096)
        if not b:
            raise OSError("closed")
        out += b
    return out


class Daemon(ServeDaemon):
    def req(self, method, path, body=None, token=None, timeout=5):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            s.sendall(("%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                       % (method, path)).encode())
            out = b""
            while True:
                b = s.recv(4096)
                if not b:
                    break
                out += b
        finally:
            s.close()
        import json
        return int(out.split()[1]), json.loads(out.partition(b"\r\n\r\n")[2]), {}


def connect(port):
    c = socket.create_connection(("127.0.0.1", port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return c


EXEC = (b'POST /runtime/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ' + TOKEN.encode() +
        b'\r\nContent-Type: application/json\r\nContent-Length: 22\r\n\r\n{"command": ["true"]}\n')


def exec_rt(s):
    s.sendall(EXEC)
    out = b""
    while b'"exitCode"' not in out or not out.endswith(b"}\n"):
        b = s.recv(65536)
        if not b:
            raise OSError("closed")
        out += b


def exec_main(n):
    """Keep-alive exec and /healthz round trips; with SANDBOXD_B, against two
    daemons at once (SANDBOXD and SANDBOXD_B), alternately, so that both see
    the same load."""
    bins = [os.environ.get("SANDBOXD")] + ([os.environ["SANDBOXD_B"]]
                                           if os.environ.get("SANDBOXD_B") else [])
    dms = []
    try:
        for i, b in enumerate(bins):
            d = tempfile.mkdtemp(prefix="sbx-bench-conn-")
            dm = Daemon(os.path.join(d, "state"), TOKEN)
            if b:
                import sbxtest
                sbxtest.SANDBOXD = b
            dms.append(dm.start())
        for _ in range(3):
            socks = [connect(dm.port) for dm in dms]
            ex = [[] for _ in dms]
            hz = [[] for _ in dms]
            for _ in range(n):
                for i, s in enumerate(socks):
                    t = time.perf_counter()
                    exec_rt(s)
                    ex[i].append(time.perf_counter() - t)
                for _ in range(10):
                    for i, s in enumerate(socks):
                        t = time.perf_counter()
                        roundtrip(s)
                        hz[i].append(time.perf_counter() - t)
            for s in socks:
                s.close()
            print("   ".join("%s: exec p50 %.3f ms p90 %.3f, /healthz p50 %.4f ms"
                           % ("AB"[i], statistics.median(ex[i]) * 1e3,
                              sorted(ex[i])[int(n * 0.9)] * 1e3, statistics.median(hz[i]) * 1e3)
                           for i in range(len(dms))))
    finally:
        for dm in dms:
            dm.stop()


def files_main(mib):
    """PUT then GET a file of mib MiB (/runtime/files, one connection each),
    three rounds, against SANDBOXD (and SANDBOXD_B alternately): MB/s."""
    bins = [os.environ.get("SANDBOXD")] + ([os.environ["SANDBOXD_B"]]
                                           if os.environ.get("SANDBOXD_B") else [])
    import http.client
    import sbxtest
    data = os.urandom(1 << 20) * mib
    dms = []
    try:
        for b in bins:
            d = tempfile.mkdtemp(prefix="sbx-bench-conn-")
            if b:
                sbxtest.SANDBOXD = b
            dms.append(Daemon(os.path.join(d, "state"), TOKEN).start())
        h = {"Authorization": "Bearer " + TOKEN}
        for _ in range(3):
            line = []
            for i, dm in enumerate(dms):
                c = http.client.HTTPConnection("127.0.0.1", dm.port, timeout=120)
                t = time.perf_counter()
                c.request("PUT", "/runtime/files?path=big.bin", body=data, headers=h)
                r = c.getresponse()
                r.read()
                up = time.perf_counter() - t
                assert r.status in (200, 201), r.status
                t = time.perf_counter()
                c.request("GET", "/runtime/files?path=big.bin", headers=h)
                r = c.getresponse()
                got = r.read()
                down = time.perf_counter() - t
                assert len(got) == len(data), len(got)
                c.close()
                line.append("%s: upload %.0f MB/s, download %.0f MB/s"
                            % ("AB"[i], len(data) / up / 1e6, len(data) / down / 1e6))
            print("   ".join(line))
    finally:
        for dm in dms:
            dm.stop()


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "files":
        return files_main(int(sys.argv[2]) if len(sys.argv) > 2 else 32)
    if len(sys.argv) > 1 and sys.argv[1] == "exec":
        return exec_main(int(sys.argv[2]) if len(sys.argv) > 2 else 300)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    d = tempfile.mkdtemp(prefix="sbx-bench-conn-")
    dm = Daemon(os.path.join(d, "state"), TOKEN).start()
    try:
        for _ in range(3):
            s = connect(dm.port)
            keep = []
            for _ in range(n):
                t = time.perf_counter()
                roundtrip(s)
                keep.append(time.perf_counter() - t)
            s.close()
            new = []
            for _ in range(n):
                t = time.perf_counter()
                c = connect(dm.port)
                roundtrip(c)
                c.close()
                new.append(time.perf_counter() - t)
            print("keep-alive p50 %.3f ms; a new connection per request p50 %.3f ms"
                  % (statistics.median(keep) * 1e3, statistics.median(new) * 1e3))
    finally:
        dm.stop()


if __name__ == "__main__":
    main()
