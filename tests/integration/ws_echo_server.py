"""A WebSocket server with a hand-written handshake (stdlib only), run inside
an OpenSandbox sandbox by test_opensandbox.py on its own loopback:
127.0.0.1:PORT. It greets each client with a text frame, answers a text
frame with its text reversed and a binary frame with the same bytes, and a
close frame with a close frame."""
import base64
import hashlib
import socket
import struct
import sys
import threading

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def recv_exact(c, n):
    b = b""
    while len(b) < n:
        d = c.recv(n - len(b))
        if not d:
            raise EOFError
        b += d
    return b


def send(c, op, data):
    n = len(data)
    if n < 126:
        size = bytes([n])
    elif n < 65536:
        size = bytes([126]) + struct.pack(">H", n)
    else:
        size = bytes([127]) + struct.pack(">Q", n)
    c.sendall(bytes([0x80 | op]) + size + data)


def serve(c):
    head = b""
    while b"\r\n\r\n" not in head:
        d = c.recv(4096)
        if not d:
            return
        head += d
    lines = head.split(b"\r\n\r\n")[0].decode().split("\r\n")
    h = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    accept = base64.b64encode(hashlib.sha1((h["sec-websocket-key"] + GUID).encode())
                              .digest()).decode()
    c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\nX-Path: %s\r\n\r\n"
               % (accept, lines[0].split()[1])).encode())
    send(c, 1, b"hello from inside")
    try:
        while True:
            b0, b1 = recv_exact(c, 2)
            op, n = b0 & 15, b1 & 127
            if n == 126:
                n = struct.unpack(">H", recv_exact(c, 2))[0]
            elif n == 127:
                n = struct.unpack(">Q", recv_exact(c, 8))[0]
            mask = recv_exact(c, 4) if b1 & 128 else b"\0\0\0\0"
            raw = recv_exact(c, n)
            data = (int.from_bytes(raw, "big") ^
                    int.from_bytes((mask * (n // 4 + 1))[:n], "big")).to_bytes(n, "big")
            if op == 8:
                send(c, 8, data)
                break
            send(c, op, data[::-1] if op == 1 else data)
    except EOFError:
        pass
    c.close()


s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
while True:
    conn, _ = s.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
