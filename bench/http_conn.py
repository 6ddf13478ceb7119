#!/usr/bin/env python3
"""The cost of a new connection per request (server.keep_alive: false) against
keep-alive: GET /healthz round trips on loopback, one client, N each way.

Usage: SANDBOXD=build/sandboxd python3 bench/http_conn.py [N] (default 3000,
three rounds; prints the median of each).
       SANDBOXD=build/sandboxd python3 bench/http_conn.py exec [N] (default 300):
POST /runtime/exec {"command": ["true"]} round trips on one kept-alive
connection, three rounds, with the /healthz keep-alive median beside."""
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


def exec_main(n):
    d = tempfile.mkdtemp(prefix="sbx-bench-conn-")
    dm = Daemon(os.path.join(d, "state"), TOKEN).start()
    try:
        for _ in range(3):
            s = connect(dm.port)
            times = []
            for _ in range(n):
                t = time.perf_counter()
                s.sendall(EXEC)
                out = b""
                while b'"exitCode"' not in out or not out.endswith(b"}\n"):
                    b = s.recv(65536)
                    if not b:
                        raise OSError("closed")
                    out += b
                times.append(time.perf_counter() - t)
            hz = []
            for _ in range(n * 10):
                t = time.perf_counter()
                roundtrip(s)
                hz.append(time.perf_counter() - t)
            s.close()
            print("keep-alive exec p50 %.3f ms (p90 %.3f); /healthz p50 %.3f ms"
                  % (statistics.median(times) * 1e3, sorted(times)[int(n * 0.9)] * 1e3,
                     statistics.median(hz) * 1e3))
    finally:
        dm.stop()


def main():
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
