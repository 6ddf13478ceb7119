"""What the SDK tests share: the daemon they drive (operator and tenant
tokens, an egress with a test host, a small workspace quota, the repository's
builtin skills and a shared root with a versioned skill made here) and a loopback
TCP relay in front of it that drops event-stream connections in the middle of
a frame, so a test can check that a client resumes losing nothing."""
import atexit
import os
import re
import shutil
import socket
import tempfile
import threading

from sbxtest import ServeDaemon

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOKEN = "op-" + "sdk0123456789abcdef0123456789"     # 32 chars, operator
ACME_TOKEN = "acme-" + "sdkfedcba9876543210fedcba98"  # 32 chars, tenant acme
assert len(TOKEN) == 32 and len(ACME_TOKEN) == 32

CONFIG = """\
server:
  tokens:
    - name: acme-agent
      token: "%s"
      tenant: acme
sandbox:
  workspace_quota: 64m
network:
  hosts:
    svc.test: 203.0.113.10
skills:
  builtin_root: %s
  shared_root: %%(shared)s
  mapped_root: %%(mapped)s
  common_root: %%(common)s
""" % (ACME_TOKEN, os.path.join(REPO, "skills", "builtin"))

# The shared skill the tests activate: versions v1 (current) and v2, each
# with one action, greet, that prints its version and its arguments.
SHARED_SKILL = "sdkhello"


def make_skill_roots(tmp):
    roots = {k: os.path.join(tmp, "skills", k) for k in ("shared", "mapped", "common")}
    for d in roots.values():
        os.makedirs(d)
    for v in ("v1", "v2"):
        d = os.path.join(roots["shared"], SHARED_SKILL, "versions", v)
        os.makedirs(os.path.join(d, "scripts"))
        with open(os.path.join(d, "SKILL.md"), "w") as f:
            f.write("---\nname: %s\ndescription: greets, %s\n---\n# %s\n"
                    % (SHARED_SKILL, v, SHARED_SKILL))
        with open(os.path.join(d, "scripts", "greet.sh"), "w") as f:
            f.write('echo "%s %s $*"\n' % (SHARED_SKILL, v))
    with open(os.path.join(roots["shared"], SHARED_SKILL, "current"), "w") as f:
        f.write("v1\n")
    # readable by a sandbox's user all the way down
    for base, dirs, files in os.walk(os.path.join(tmp, "skills")):
        os.chmod(base, 0o755)
        for n in files:
            os.chmod(os.path.join(base, n), 0o644)
    os.chmod(tmp, 0o755)
    return roots


class SdkDaemon(ServeDaemon):
    """A daemon whose sandboxes get the egress (--net proxy), so a session's
    network can be changed; the test host svc.test resolves only inside."""

    def __init__(self, tmp, registry=None):
        cfg = os.path.join(tmp, "sdk.yaml")
        with open(cfg, "w") as f:
            f.write(CONFIG % make_skill_roots(tmp))
        super().__init__(os.path.join(tmp, "state"), TOKEN, config=cfg,
                         extra=["--net", "proxy"], registry=registry)

    def req(self, method, path, body=None, token=None, timeout=5):
        # Only /readyz while starting (no token needed).
        import http.client
        import json
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path)
            r = c.getresponse()
            data = r.read()
            return r.status, json.loads(data) if data else None, dict(r.getheaders())
        finally:
            c.close()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port


def scratch(prefix):
    """A temporary folder and a list of daemons, both gone at exit (the
    daemons stopped with SIGTERM, kill -9 only if that fails)."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    daemons = []

    def cleanup():
        for d in daemons:
            try:
                d.stop()
            except Exception:  # noqa: BLE001
                d.kill9()
        shutil.rmtree(tmp, True)
    atexit.register(cleanup)
    return tmp, daemons


class CutRelay:
    """127.0.0.1:<port> -> the daemon. The first `cuts` event-stream
    connections (GET /runtime/stream) are dropped, both ways, once at least
    `after` bytes of their answer went through, a few bytes into an event's
    data line: the client holds half a frame when it is cut. cut_now() drops
    every open connection at once."""

    def __init__(self, target_port, after=900, cuts=3):
        self.target = target_port
        self.after = after
        self.cuts_left = cuts
        self.cut_count = 0  # stream connections dropped mid-frame
        self.stream_opens = 0
        self.heads = []  # the head of every request that went through
        self.resumed_from = []  # the Last-Event-ID of each stream request
        self.lock = threading.Lock()
        self.conns = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(32)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def close(self):
        self.closed = True
        self.sock.close()
        self.cut_now()

    def cut_now(self):
        with self.lock:
            conns, self.conns = self.conns, []
        for pair in conns:
            _drop(pair)

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, client):
        client.settimeout(60)
        try:
            up = socket.create_connection(("127.0.0.1", self.target), timeout=10)
        except OSError:
            client.close()
            return
        up.settimeout(None)
        client.settimeout(None)
        pair = (client, up)
        with self.lock:
            self.conns.append(pair)
        state = {"cut": None}
        threading.Thread(target=self._requests, args=(pair, state), daemon=True).start()
        self._answers(pair, state)

    def _requests(self, pair, state):
        client, up = pair
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    up.shutdown(socket.SHUT_WR)
                    return
                if state["cut"] is None and re.match(rb"[A-Z]+ /", data):
                    head = data.split(b"\r\n\r\n")[0].decode(errors="replace")
                    with self.lock:
                        self.heads.append(head)
                if state["cut"] is None and data.startswith(b"GET /runtime/stream"):
                    m = re.search(r"(?im)^Last-Event-ID: *(\d+)", head)
                    with self.lock:
                        self.resumed_from.append(int(m.group(1)) if m else None)
                        self.stream_opens += 1
                        if self.cuts_left > 0:
                            self.cuts_left -= 1
                            state["cut"] = True
                up.sendall(data)
        except OSError:
            pass

    def _answers(self, pair, state):
        client, up = pair
        sent = 0
        try:
            while True:
                data = up.recv(65536)
                if not data:
                    client.shutdown(socket.SHUT_WR)
                    return
                if state["cut"] and sent + len(data) >= self.after:
                    at = data.find(b"\ndata: ", max(0, self.after - sent))
                    if at >= 0:
                        client.sendall(data[:at + 12])
                        with self.lock:
                            self.cut_count += 1
                        _drop(pair)
                        return
                client.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            with self.lock:
                if pair in self.conns:
                    self.conns.remove(pair)


def _drop(pair):
    for s in pair:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()
