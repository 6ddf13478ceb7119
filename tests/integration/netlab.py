#!/usr/bin/env python3
"""netlab: an isolated network for the egress tests (SECURITY.md, "Network tests
never touch the real network").

    with netlab.Lab() as lab:
        res = lab.run(["curl", "-s", "http://public.test/"], "--net", "proxy",
                      "--dns-upstream", netlab.DNS)
        lab.events(since=mark, ...)      # what the lab's servers saw

Topology (every namespace is made here, with a per-run name; nothing is added to
the host's own namespace, and no lab namespace has an interface to it):

      lab "pub" namespace                daemon namespace "d"              lab "priv" namespace
    203.0.113.10   2001:db8::10   <-- 198.51.100.2   192.0.2.2 -->   10.0.0.1  172.16.0.1  192.168.1.1
    198.51.100.53 (DNS, UDP+TCP)      2001:db8:ff::2 fd00:ff::2      169.254.169.254 100.100.100.200
    link 198.51.100.1, 2001:db8:ff::1  127.0.0.1 (listeners too)     198.18.0.1  fd00::1
                                      sandboxd runs here             64:ff9b::a9fe:a9fe  2002:a9fe:a9fe::1
                                                                     link 192.0.2.1, fd00:ff::1

The daemon namespace routes only the lab's prefixes into the two veths and has
no default route, so `ip route get` of any other address fails there, and the
lab namespaces have no route anywhere but back to it: even a wrong sandboxd
cannot send a packet off this machine.

sandboxd runs in the daemon namespace through `nsenter --net=` (not `ip netns
exec`, which remounts /sys and so hides the cgroup hierarchies: sandboxd would
fall back to rlimits).

Every namespace runs one server process (this file, `--serve SPEC`) that logs
each TCP connection, UDP datagram and DNS question as one JSON line; a denial is
proven by the relevant log staying empty. Servers:
  - TCP on 22, 80, 443, 5432, 8080 on every address (wildcard binds; the daemon
    namespace also on 1080, 3128 and 15001, the ports of the sandbox's own
    endpoints, to catch a connection looped back to the daemon's side): plain HTTP
    when the client speaks HTTP (the body names the server, address and port,
    `/big/N` returns N bytes, a POST body is counted), TLS (self-signed, SANs for
    the lab names) when the first byte is a ClientHello, echo otherwise;
  - UDP echo on 123 and 9999 (and 53 in priv and the daemon namespace) on every
    address;
  - the lab's upstream DNS at 198.51.100.53:53 (UDP; TCP 53 there only logs),
    answering A/AAAA from NAMES, NXDOMAIN for other names, NOTIMP for other
    types, and logging every question.

Self-test: `python3 tests/integration/netlab.py` builds the lab, checks every
server from inside the daemon namespace, checks the isolation, tears down."""
import errno
import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import sbxtest  # noqa: E402

# --- the lab's addresses -------------------------------------------------------------
PUBLIC = "203.0.113.10"          # the "public internet" server
PUBLIC6 = "2001:db8::10"
DNS = "198.51.100.53"            # the lab's upstream DNS (pass as --dns-upstream)
PUB_LINK = "198.51.100.1"        # pub's end of the daemon<->pub veth (public too)
DAEMON = "198.51.100.2"          # the daemon namespace's own addresses
DAEMON_PRIV_LINK = "192.0.2.2"
DAEMON6 = "2001:db8:ff::2"
DAEMON6_PRIV_LINK = "fd00:ff::2"
PRIV_LINK = "192.0.2.1"
PUB6_LINK = "2001:db8:ff::1"
PRIV6_LINK = "fd00:ff::1"
INTERNAL = "10.0.0.1"
INTERNAL_172 = "172.16.0.1"
INTERNAL_192 = "192.168.1.1"
METADATA = "169.254.169.254"
ALIBABA_METADATA = "100.100.100.200"
BENCHMARK = "198.18.0.1"
ULA = "fd00::1"
NAT64_METADATA = "64:ff9b::a9fe:a9fe"      # 64:ff9b::/96 + 169.254.169.254
SIXTOFOUR_METADATA = "2002:a9fe:a9fe::1"  # 2002::/16 + 169.254.169.254

TCP_PORTS = (22, 80, 443, 5432, 8080)
# The daemon namespace also listens where the sandbox's own endpoints are, so a
# connection that loops back to "127.0.0.1:1080" on the daemon's side is seen.
DAEMON_TCP_PORTS = TCP_PORTS + (1080, 3128, 15001)
UDP_PORTS = (123, 9999)

PUB_V4 = (PUBLIC, DNS)
PUB_V6 = (PUBLIC6,)
PRIV_V4 = (INTERNAL, INTERNAL_172, INTERNAL_192, METADATA, ALIBABA_METADATA, BENCHMARK)
PRIV_V6 = (ULA, NAT64_METADATA, SIXTOFOUR_METADATA)

# The lab DNS's table: name -> {"A": [...], "AAAA": [...]}.
NAMES = {
    "public.test": {"A": [PUBLIC], "AAAA": [PUBLIC6]},
    "www.public.test": {"A": [PUBLIC]},
    "api.public.test": {"A": [PUBLIC]},
    "other.test": {"A": [PUBLIC]},
    "v4only.test": {"A": [PUBLIC]},
    "rebind.test": {"A": [METADATA]},
    "rebind6.test": {"AAAA": [ULA]},
    "mapped.test": {"AAAA": ["::ffff:" + METADATA]},
    "private.test": {"A": [INTERNAL]},
    "meta.test": {"A": [ALIBABA_METADATA]},
    "daemon.test": {"A": [DAEMON]},
    "loop.test": {"A": ["127.0.0.1"]},
    # As real resolvers answer it (RFC 6761), so a name forwarded upstream means loopback.
    "localhost": {"A": ["127.0.0.1"], "AAAA": ["::1"]},
}

QTYPES = {1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 10: "NULL", 12: "PTR", 15: "MX", 16: "TXT",
          28: "AAAA", 33: "SRV", 65: "HTTPS", 255: "ANY"}


IPV6_SWITCH = "/proc/sys/net/ipv6/conf/all/disable_ipv6"


def ipv6_available():
    """Whether this host has IPv6 at all (the kernel's switch): the one host
    feature whose absence lets the lab go on without its IPv6 cases."""
    try:
        with open(IPV6_SWITCH) as f:
            return f.read().strip() == "0"
    except OSError:
        return False


# =====================================================================================
# The servers (run as `netlab.py --serve SPEC` inside a lab namespace)
# =====================================================================================

class _Log:
    def __init__(self, path, label):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.label = label

    def __call__(self, ev, **kw):
        kw.update(ev=ev, srv=self.label, t=round(time.time(), 6))
        # One write of one line on an O_APPEND fd: lines never interleave.
        os.write(self.fd, (json.dumps(kw, sort_keys=True) + "\n").encode())


def _plain(addr):
    """Host part of a socket address, without a zone and with ::ffff: kept."""
    return addr.split("%")[0]


_HTTP_METHODS = (b"GET ", b"POST ", b"HEAD ", b"PUT ", b"DELETE ", b"OPTIONS ", b"PATCH ")


def _looks_http(buf):
    """True, False, or None (not decidable yet)."""
    for m in _HTTP_METHODS:
        if buf.startswith(m):
            return True
        if m.startswith(buf):
            return None
    return False


def _http_reply(conn, label, local, lport, head, rest, log_extra):
    lines = head.split(b"\r\n")
    try:
        method, target, _ = lines[0].decode("latin-1").split(" ", 2)
    except ValueError:
        method, target = "?", "?"
    headers = {}
    for ln in lines[1:]:
        k, _, v = ln.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    want = int(headers.get("content-length", "0") or 0)
    body_in = len(rest)
    conn.settimeout(10)
    while body_in < want:
        d = conn.recv(min(1 << 20, want - body_in))
        if not d:
            break
        body_in += len(d)
        log_extra["bytesIn"] += len(d)
    log_extra.update(method=method, target=target, host=headers.get("host", ""),
                     bodyIn=body_in)
    m = re.match(r"(?:https?://[^/]*)?/big/(\d+)", target)
    if m and method == "GET":
        n = int(m.group(1))
        hdr = ("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
               "Content-Length: %d\r\nConnection: close\r\n\r\n" % n).encode()
        conn.sendall(hdr)
        log_extra["bytesOut"] += len(hdr)
        chunk = b"x" * 65536
        left = n
        while left:
            k = conn.send(chunk[:min(left, len(chunk))])
            left -= k
            log_extra["bytesOut"] += k
        return
    body = ("netlab %s %s:%d %s %s host=%s received=%d\n" %
            (label, local, lport, method, target, headers.get("host", ""), body_in)).encode()
    resp = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % len(body))
    if method != "HEAD":
        resp += body
    conn.sendall(resp)
    log_extra["bytesOut"] += len(resp)


def _tcp_conn(conn, peer, log, label, tls_ctx):
    local = conn.getsockname()
    info = dict(local=_plain(local[0]), lport=local[1], peer=_plain(peer[0]), pport=peer[1])
    log("accept", proto="tcp", **info)
    extra = dict(bytesIn=0, bytesOut=0, mode="none", end="EOF", tls=False)
    t0 = time.monotonic()
    try:
        conn.settimeout(10)
        first = conn.recv(1, socket.MSG_PEEK)
        if first == b"\x16" and tls_ctx is not None:
            conn = tls_ctx.wrap_socket(conn, server_side=True)
            extra["tls"] = True
        buf = b""
        mode = None
        while True:
            d = conn.recv(65536)
            if not d:
                break
            extra["bytesIn"] += len(d)
            if mode == "echo":
                conn.sendall(d)
                extra["bytesOut"] += len(d)
                continue
            buf += d
            if mode is None:
                h = _looks_http(buf)
                if h is None and len(buf) < 16:
                    continue
                mode = "http" if h else "echo"
                extra["mode"] = mode
                if mode == "echo":
                    conn.sendall(buf)
                    extra["bytesOut"] += len(buf)
                    buf = b""
                    continue
            if b"\r\n\r\n" in buf:
                head, _, rest = buf.partition(b"\r\n\r\n")
                extra["first"] = head.split(b"\r\n")[0][:200].decode("latin-1")
                _http_reply(conn, label, info["local"], info["lport"], head, rest, extra)
                break
            if len(buf) > 1 << 20:
                break
        try:
            conn.shutdown(socket.SHUT_WR)
            conn.settimeout(2)
            while conn.recv(65536):
                pass
        except OSError:
            pass
    except socket.timeout:
        extra["end"] = "timeout"
    except OSError as e:
        extra["end"] = errno.errorcode.get(e.errno, str(e)) if e.errno else type(e).__name__
    finally:
        try:
            conn.close()
        except OSError:
            pass
        log("close", proto="tcp", seconds=round(time.monotonic() - t0, 3), **info, **extra)


def _tcp_listener(sock, log, label, tls_ctx):
    while True:
        conn, peer = sock.accept()
        threading.Thread(target=_tcp_conn, args=(conn, peer, log, label, tls_ctx),
                         daemon=True).start()


def _udp_listener(sock, log, label):
    local = sock.getsockname()
    while True:
        data, peer = sock.recvfrom(65536)
        log("udp", proto="udp", local=_plain(local[0]), lport=local[1], peer=_plain(peer[0]),
            pport=peer[1], len=len(data), data=data[:64].hex())
        try:
            sock.sendto(data, peer)
        except OSError:
            pass


def dns_parse_question(pkt):
    """(id, flags, name, qtype, offset after the question) of a query; ValueError."""
    if len(pkt) < 12:
        raise ValueError("short header")
    qid, flags, qd = struct.unpack("!HHH", pkt[:6])
    if qd < 1:
        raise ValueError("no question")
    labels, i = [], 12
    while True:
        if i >= len(pkt):
            raise ValueError("truncated name")
        n = pkt[i]
        i += 1
        if n == 0:
            break
        if n & 0xC0:
            raise ValueError("compressed name in a question")
        if i + n > len(pkt):
            raise ValueError("truncated label")
        labels.append(pkt[i:i + n].decode("latin-1"))
        i += n
    if i + 4 > len(pkt):
        raise ValueError("truncated question")
    qtype, _qclass = struct.unpack("!HH", pkt[i:i + 4])
    return qid, flags, ".".join(labels), qtype, i + 4


def _dns_answer(pkt, table):
    qid, flags, name, qtype, end = dns_parse_question(pkt)
    question = pkt[12:end]
    entry = table.get(name.lower().rstrip("."))
    answers = []
    if entry is None:
        rcode = 3  # NXDOMAIN
    elif qtype in (1, 28):
        rcode = 0
        for a in entry.get("A" if qtype == 1 else "AAAA", []):
            raw = socket.inet_pton(socket.AF_INET if qtype == 1 else socket.AF_INET6, a)
            answers.append(struct.pack("!HHHIH", 0xC00C, qtype, 1, 30, len(raw)) + raw)
    else:
        rcode = 4  # NOTIMP: the lab answers addresses only
    rflags = 0x8000 | (flags & 0x7900) | 0x0400 | 0x0080 | rcode  # QR, opcode+RD, AA, RA
    hdr = struct.pack("!HHHHHH", qid, rflags, 1, len(answers), 0, 0)
    return hdr + question + b"".join(answers), name, qtype, rcode, len(answers)


def _dns_server(sock, log, table):
    local = sock.getsockname()
    while True:
        pkt, peer = sock.recvfrom(65536)
        ev = dict(proto="udp", local=_plain(local[0]), lport=local[1], peer=_plain(peer[0]),
                  pport=peer[1], len=len(pkt))
        try:
            resp, name, qtype, rcode, n = _dns_answer(pkt, table)
        except ValueError as e:
            log("dns", error=str(e), data=pkt[:64].hex(), **ev)
            continue
        # Resolvers randomise the case of names (0x20): logged lower-cased, and as sent.
        log("dns", name=name.lower(), qname=name, qtype=qtype, type=QTYPES.get(qtype, str(qtype)),
            rcode=rcode, answers=n, **ev)
        try:
            sock.sendto(resp, peer)
        except OSError:
            pass


def _bind(kind, host, port):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if fam == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind((host, port))
    if kind == "tcp":
        s.listen(256)
    return s


def serve(spec_path):
    """The server process of one lab namespace."""
    with open(spec_path) as f:
        spec = json.load(f)
    try:  # die with the test process, even when it is SIGKILLed
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != spec["parent"]:
        sys.exit(1)
    log = _Log(spec["log"], spec["label"])
    tls_ctx = None
    if spec.get("cert"):
        import ssl
        tls_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls_ctx.load_cert_chain(spec["cert"], spec["key"])
    threads = []
    for host, port in spec["tcp"]:
        threads.append((_tcp_listener, (_bind("tcp", host, port), log, spec["label"], tls_ctx)))
    for host, port in spec["udp"]:
        threads.append((_udp_listener, (_bind("udp", host, port), log, spec["label"])))
    for host, port in spec["dns"]:
        threads.append((_dns_server, (_bind("udp", host, port), log, spec["table"])))
    for fn, args in threads:
        threading.Thread(target=fn, args=args, daemon=True).start()
    with open(spec["ready"] + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(spec["ready"] + ".tmp", spec["ready"])
    while True:
        time.sleep(3600)


# =====================================================================================
# The lab
# =====================================================================================

def _sh(args, check=True, **kw):
    p = subprocess.run(args, capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(args), p.returncode,
                                                   (p.stderr or p.stdout).strip()))
    return p


def _cleanup_stale():
    """Namespaces left by a lab whose process was SIGKILLed (servers die with it)."""
    try:
        names = os.listdir("/run/netns")
    except OSError:
        return
    for n in names:
        m = re.match(r"(sbxlab(\d+)x\d+)-", n)
        if not m or m.group(1) in Lab.live:
            continue
        # Pids wrap (pid_max is 32768 on our machines): a live pid makes the
        # lab live only if it is still a Python process other than us.
        pid = int(m.group(2))
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                alive = pid != os.getpid() and b"python" in f.read()
        except OSError:
            alive = False
        if not alive:
            _sh(["ip", "netns", "del", n], check=False)


class Lab:
    """The lab as a context manager; see the module's docstring."""

    _count = 0
    live = set()  # tags of this process's labs that are set up

    def __init__(self, ipv6=None, tls=True, verbose=False):
        Lab._count += 1
        self.tag = "sbxlab%dx%d" % (os.getpid(), Lab._count)
        self.names = {r: "%s-%s" % (self.tag, r) for r in ("d", "pub", "priv")}
        short = "%d%d" % (os.getpid(), Lab._count)
        self.veth = {"d_pub": "v%sdp" % short, "pub": "v%spd" % short,
                     "d_priv": "v%sdv" % short, "priv": "v%svd" % short}
        self.want_ipv6 = ipv6_available() if ipv6 is None else ipv6
        self.ipv6 = False
        self.tls = tls
        self.verbose = verbose
        self.tmp = None
        self.procs = {}
        self.logs = {}
        self.cert = None
        self.made = []

    # --- plumbing -------------------------------------------------------------------
    def nspath(self, role):
        return "/run/netns/" + self.names[role]

    def nsenter(self, role):
        """argv prefix that runs a command in the lab namespace `role` (d, pub, priv)."""
        return ["nsenter", "--net=" + self.nspath(role)]

    def sh(self, role, *args, check=True, **kw):
        return _sh(self.nsenter(role) + list(args), check=check, **kw)

    def ip(self, role, *args, check=True):
        return self.sh(role, "ip", *args, check=check)

    def sysctl(self, role, key, value):
        # /proc/sys/net is per network namespace: written from a process inside it.
        path = "/proc/sys/" + key.replace(".", "/")
        self.sh(role, "sh", "-c", "echo %s > %s" % (value, path))

    # --- setup ----------------------------------------------------------------------
    def __enter__(self):
        # A SIGTERM (a harness's timeout) still tears the lab down; a SIGKILL leaves
        # namespaces that the next lab removes (its servers die with this process).
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
        import atexit
        atexit.register(self._teardown)  # also when a module-level lab meets sys.exit
        try:
            self._setup()
        except BaseException:
            self._teardown()
            raise
        return self

    def __exit__(self, *exc):
        self._teardown()
        return False

    def _setup(self):
        _cleanup_stale()
        Lab.live.add(self.tag)
        self.tmp = tempfile.mkdtemp(prefix=self.tag + "-")
        os.chmod(self.tmp, 0o755)
        for role, name in self.names.items():
            # A name with our pid is ours: what a dead process of that pid left
            # goes first.
            _sh(["ip", "netns", "del", name], check=False)
            _sh(["ip", "netns", "add", name])
            self.made.append(name)
            self.ip(role, "link", "set", "lo", "up")
        self._links()
        # A host with IPv6 gets an IPv6 lab or none: a failed set-up is a failure,
        # never fewer cases. Only a host without IPv6 runs the IPv4 cases alone.
        if self.want_ipv6:
            self._links6()
            self.ipv6 = True
        else:
            print("netlab: this host has no IPv6 (%s is not 0, or absent): "
                  "the IPv6 cases do not run" % IPV6_SWITCH)
        if self.tls:
            self._make_cert()
        self._start_servers()
        self._counters()

    def _links(self):
        v, d = self.veth, "d"
        for far in ("pub", "priv"):
            _sh(["ip", "link", "add", v["d_" + far], "netns", self.names[d], "type", "veth",
                 "peer", "name", v[far], "netns", self.names[far]])
        self.ip(d, "addr", "add", DAEMON + "/30", "dev", v["d_pub"])
        self.ip("pub", "addr", "add", PUB_LINK + "/30", "dev", v["pub"])
        self.ip(d, "addr", "add", DAEMON_PRIV_LINK + "/30", "dev", v["d_priv"])
        self.ip("priv", "addr", "add", PRIV_LINK + "/30", "dev", v["priv"])
        for a in PUB_V4:
            self.ip("pub", "addr", "add", a + "/32", "dev", "lo")
        for a in PRIV_V4:
            self.ip("priv", "addr", "add", a + "/32", "dev", "lo")
        for dev, role in ((v["d_pub"], d), (v["pub"], "pub"), (v["d_priv"], d),
                          (v["priv"], "priv")):
            self.ip(role, "link", "set", dev, "up")
        for dst in ("203.0.113.0/24", DNS + "/32"):
            self.ip(d, "route", "add", dst, "via", PUB_LINK, "dev", v["d_pub"])
        for dst in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16",
                    "100.64.0.0/10", "198.18.0.0/15"):
            self.ip(d, "route", "add", dst, "via", PRIV_LINK, "dev", v["d_priv"])

    def _links6(self):
        v, d = self.veth, "d"
        for role in self.names:
            for k in ("all", "default", "lo"):
                self.sysctl(role, "net.ipv6.conf.%s.disable_ipv6" % k, 0)
        for dev, role in ((v["d_pub"], d), (v["pub"], "pub"), (v["d_priv"], d),
                          (v["priv"], "priv")):
            self.sysctl(role, "net.ipv6.conf.%s.disable_ipv6" % dev, 0)
            self.sysctl(role, "net.ipv6.conf.%s.accept_dad" % dev, 0)
        self.ip(d, "-6", "addr", "add", DAEMON6 + "/64", "dev", v["d_pub"], "nodad")
        self.ip("pub", "-6", "addr", "add", PUB6_LINK + "/64", "dev", v["pub"], "nodad")
        self.ip(d, "-6", "addr", "add", DAEMON6_PRIV_LINK + "/64", "dev", v["d_priv"], "nodad")
        self.ip("priv", "-6", "addr", "add", PRIV6_LINK + "/64", "dev", v["priv"], "nodad")
        for a in PUB_V6:
            self.ip("pub", "-6", "addr", "add", a + "/128", "dev", "lo", "nodad")
        for a in PRIV_V6:
            self.ip("priv", "-6", "addr", "add", a + "/128", "dev", "lo", "nodad")
        self.ip(d, "-6", "route", "add", "2001:db8::/48", "via", PUB6_LINK, "dev", v["d_pub"])
        for dst in ("fd00::/8", "64:ff9b::/96", "2002::/16"):
            self.ip(d, "-6", "route", "add", dst, "via", PRIV6_LINK, "dev", v["d_priv"])

    def _make_cert(self):
        if not shutil.which("openssl"):
            raise RuntimeError("netlab: no openssl command for the lab's TLS certificate "
                               "(scripts/deps.sh installs it)")
        cert, key = os.path.join(self.tmp, "cert.pem"), os.path.join(self.tmp, "key.pem")
        san = ",".join(["DNS:" + n for n in NAMES] + ["DNS:*.public.test", "IP:" + PUBLIC])
        _sh(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
             "/CN=public.test", "-addext", "subjectAltName=" + san, "-keyout", key,
             "-out", cert])
        self.cert = cert
        os.chmod(cert, 0o644)

    def _server_spec(self, role):
        six = self.ipv6
        ports = DAEMON_TCP_PORTS if role == "d" else TCP_PORTS
        tcp = [["0.0.0.0", p] for p in ports] + ([["::", p] for p in ports] if six else [])
        if role == "pub":
            v4, v6 = (PUBLIC, PUB_LINK), PUB_V6 + (PUB6_LINK,)
            udp_ports = UDP_PORTS
        elif role == "priv":
            v4, v6 = PRIV_V4 + (PRIV_LINK,), PRIV_V6 + (PRIV6_LINK,)
            udp_ports = UDP_PORTS + (53,)
        else:
            v4, v6 = ("127.0.0.1", DAEMON, DAEMON_PRIV_LINK), ("::1", DAEMON6, DAEMON6_PRIV_LINK)
            udp_ports = UDP_PORTS + (53,)
        udp = [[a, p] for a in v4 for p in udp_ports]
        if six:
            udp += [[a, p] for a in v6 for p in udp_ports]
        dns = []
        if role == "pub":
            dns = [[DNS, 53]]
            udp += [[DNS, p] for p in UDP_PORTS]
            tcp.append([DNS, 53])
        return dict(label=role, tcp=tcp, udp=udp, dns=dns, table=NAMES,
                    log=os.path.join(self.tmp, role + ".log"),
                    ready=os.path.join(self.tmp, role + ".ready"), parent=os.getpid(),
                    cert=self.cert, key=self.cert and os.path.join(self.tmp, "key.pem"))

    def _start_servers(self):
        for role in self.names:
            spec = self._server_spec(role)
            path = os.path.join(self.tmp, role + ".json")
            with open(path, "w") as f:
                json.dump(spec, f)
            self.logs[role] = spec["log"]
            open(spec["log"], "a").close()
            err = open(os.path.join(self.tmp, role + ".stderr"), "w")
            self.procs[role] = subprocess.Popen(
                self.nsenter(role) + [sys.executable, os.path.abspath(__file__), "--serve", path],
                stdin=subprocess.DEVNULL, stdout=err, stderr=err)
            err.close()
        deadline = time.monotonic() + 15
        for role, p in self.procs.items():
            ready = os.path.join(self.tmp, role + ".ready")
            while not os.path.exists(ready):
                if p.poll() is not None or time.monotonic() > deadline:
                    with open(os.path.join(self.tmp, role + ".stderr")) as f:
                        raise RuntimeError("lab server %s did not start: %s" % (role, f.read()))
                time.sleep(0.02)

    def _counters(self):
        """nftables counters of the TCP SYNs and UDP datagrams that reach the pub and
        priv namespaces from the daemon's (a second witness next to the logs)."""
        for role in ("pub", "priv"):
            rules = ("table inet netlab {\n chain input {\n  type filter hook input priority 0;\n"
                     '  iifname "%s" tcp flags & (syn|ack) == syn counter name tcpsyn\n'
                     '  iifname "%s" meta l4proto udp counter name udpin\n }\n'
                     " counter tcpsyn {}\n counter udpin {}\n}\n") % (self.veth[role], self.veth[role])
            p = self.sh(role, "nft", "-f", "-", input=rules, check=False)
            if p.returncode != 0:
                self.counters_ok = False
                return
        self.counters_ok = True

    def packets(self):
        """{"pub": {"syn": n, "udp": n}, "priv": {...}} seen so far (None without nft)."""
        if not self.counters_ok:
            return None
        out = {}
        for role in ("pub", "priv"):
            p = self.sh(role, "nft", "-j", "list", "counters", "table", "inet", "netlab")
            got = {}
            for item in json.loads(p.stdout)["nftables"]:
                c = item.get("counter")
                if c:
                    got[{"tcpsyn": "syn", "udpin": "udp"}.get(c["name"], c["name"])] = c["packets"]
            out[role] = got
        return out

    # --- teardown -------------------------------------------------------------------
    def _teardown(self):
        for role, p in self.procs.items():
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = {}
        for name in reversed(self.made):
            _sh(["ip", "netns", "del", name], check=False)
        self.made = []
        Lab.live.discard(self.tag)
        if self.tmp and not os.environ.get("NETLAB_KEEP"):
            shutil.rmtree(self.tmp, ignore_errors=True)

    # --- running sandboxd in the daemon namespace -----------------------------------
    def sandboxd_argv(self, *args):
        return self.nsenter("d") + [sbxtest.SANDBOXD] + list(args)

    def run(self, cmd, *opts, workspace=None, stdin=b"", timeout=60, env=None):
        """sbxtest.run, with sandboxd in the daemon namespace."""
        fd, report_path = tempfile.mkstemp(prefix="sbx-report-")
        os.close(fd)
        args = self.sandboxd_argv("run", "--report", report_path)
        if workspace:
            args += ["--workspace", workspace]
        args += list(opts) + ["--"] + list(cmd)
        try:
            p = subprocess.run(args, input=stdin, capture_output=True, timeout=timeout,
                               env=env if env is not None else os.environ.copy())
            with open(report_path) as f:
                text = f.read()
            try:
                report = json.loads(text) if text.strip() else None
            except ValueError:
                report = {"unparsable": text}
        finally:
            os.unlink(report_path)
        return sbxtest.Result(p, report, p.stdout, p.stderr)

    def popen(self, cmd, *opts, workspace=None, report=None, env=None, **kw):
        """sandboxd run in the background (the caller waits and reads `report`)."""
        args = self.sandboxd_argv("run")
        if report:
            args += ["--report", report]
        if workspace:
            args += ["--workspace", workspace]
        args += list(opts) + ["--"] + list(cmd)
        return subprocess.Popen(args, env=env if env is not None else os.environ.copy(), **kw)

    # --- what the servers saw -------------------------------------------------------
    def mark(self):
        """A position in every log; pass to events(since=...)."""
        return {role: os.path.getsize(path) for role, path in self.logs.items()}

    def events(self, since=None, settle=0.2, **match):
        """Log entries (dicts) after `since`, filtered by equality on the given keys
        (a tuple or set value matches any of its members). settle: seconds to wait
        first, for a connection still in flight."""
        if settle:
            time.sleep(settle)
        out = []
        for role, path in self.logs.items():
            with open(path, "rb") as f:
                f.seek((since or {}).get(role, 0))
                data = f.read()
            for line in data.decode("utf-8", "replace").splitlines():
                if not line.strip():
                    continue
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                ok = True
                for k, want in match.items():
                    v = e.get(k)
                    if isinstance(want, (tuple, set, frozenset, list)):
                        ok = v in want
                    else:
                        ok = v == want
                    if not ok:
                        break
                if ok:
                    out.append(e)
        out.sort(key=lambda e: e.get("t", 0))
        return out

    def arrivals(self, since=None, settle=0.2):
        """Every TCP connection and UDP datagram any lab server got (DNS included)."""
        return self.events(since=since, settle=settle, ev=("accept", "udp", "dns"))

    def dns_queries(self, since=None, settle=0.2, **match):
        """Questions the lab's upstream DNS got ("name" lower-cased)."""
        return self.events(since=since, settle=settle, ev="dns", **match)


# =====================================================================================
# Helpers for the tests
# =====================================================================================

class UnixHTTP(http.client.HTTPConnection):
    """HTTP to a daemon of the lab's daemon namespace listening on a unix socket
    (`serve --listen unix:PATH`)."""

    def __init__(self, path, timeout=30):
        super().__init__("localhost", timeout=timeout)
        self.path_ = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path_)


class LabDaemon:
    """`sandboxd serve --net NET` in the lab's daemon namespace (no packet of
    its sandboxes leaves the machine), on the unix socket DIR/api.sock, with
    CONFIG (YAML text) and ARGS; its output in DIR/log. Without the
    aggregate caps unless ARGS says otherwise."""

    def __init__(self, lab, dir, token, config, net="proxy",
                 args=("--total-memory", "0", "--total-cpu", "0", "--total-pids", "0")):
        self.dir, self.token = dir, token
        os.makedirs(dir)
        self.sock = os.path.join(dir, "api.sock")
        cfg = os.path.join(dir, "config.yaml")
        with open(cfg, "w") as f:
            f.write(config)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CLAW_", "SANDBOX_"))}
        self.log = open(os.path.join(dir, "log"), "w+")
        self.proc = subprocess.Popen(
            lab.sandboxd_argv("serve", "--listen", "unix:" + self.sock, "--state-dir",
                              os.path.join(dir, "state"), "--token", token, "--config", cfg,
                              "--net", net, *args),
            env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("serve did not start in the lab: " + self.output()[-2000:])
            time.sleep(0.05)

    def output(self):
        with open(self.log.name) as f:
            return f.read()

    def request(self, method, path, body=None, headers=None, timeout=60, raw=False):
        """(status, the JSON answer or its text); raw: always the text."""
        c = UnixHTTP(self.sock, timeout=timeout)
        h = {"Authorization": "Bearer " + self.token, "X-Sandbox-Extended": "1"}
        h.update(headers or {})
        if body is not None:
            h["Content-Type"] = "application/json"
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        if raw:
            return r.status, data.decode(errors="replace")
        try:
            return r.status, json.loads(data) if data else None
        except ValueError:
            return r.status, data.decode(errors="replace")

    def stop(self):
        """SIGTERM: True when it exited 0 with no sanitizer report."""
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        out = self.output()
        return self.proc.returncode == 0 and "Sanitizer" not in out and \
            "runtime error" not in out


def facts(output):
    """netprobe's output as a list of dicts: {"kind": first word, key: value, ...}."""
    import shlex
    if isinstance(output, bytes):
        output = output.decode("utf-8", "replace")
    out = []
    for line in output.splitlines():
        if "=" not in line:
            continue
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        if not words or "=" in words[0]:
            continue
        d = {"kind": words[0], "line": line}
        for w in words[1:]:
            k, sep, v = w.partition("=")
            if sep:
                d[k] = v
        out.append(d)
    return out


# A sandbox's connections to the lab, as `python3 -c CONNECT_PROBE TARGET...`.
# A target is "host,port[,timeout]": a TCP connect() (to a name, after its
# lookup; an IPv6 literal over IPv6), 5 s unless timeout is given, then an HTTP
# request; or "dns:name,0": the name's lookup alone. One line a target:
# "TARGET RESULT SECONDS", RESULT "ok " with the last line of the lab's answer
# (or the address found), timeout, gaierror or the errno's name; SECONDS times
# the connect() (or the lookup) alone. probe_results() reads the lines.
CONNECT_PROBE = r'''
import errno, socket, sys, time
for arg in sys.argv[1:]:
    host, port, *rest = arg.split(",")
    t0 = time.monotonic()
    took = None
    try:
        if host.startswith("dns:"):
            res = "ok " + socket.gethostbyname(host[4:])
        else:
            s = socket.create_connection((host, int(port)), float(rest[0]) if rest else 5)
            took = time.monotonic() - t0
            s.sendall(b"GET /probe HTTP/1.0\r\nHost: lab\r\n\r\n")
            got = b""
            while True:
                d = s.recv(4096)
                if not d:
                    break
                got += d
            res = "ok " + got.decode(errors="replace").strip().splitlines()[-1]
    except socket.timeout:
        res = "timeout"
    except socket.gaierror:
        res = "gaierror"
    except OSError as e:
        res = errno.errorcode.get(e.errno, str(e))
    print("%s %s %.3f" % (arg, res, time.monotonic() - t0 if took is None else took), flush=True)
'''


def probe_results(out):
    """CONNECT_PROBE's output as {target: (result, seconds)}."""
    if isinstance(out, bytes):
        out = out.decode("utf-8", "replace")
    got = {}
    for line in out.splitlines():
        parts = line.split(" ")
        if len(parts) >= 3:
            got[parts[0]] = (" ".join(parts[1:-1]), float(parts[-1]))
    return got


def workspace(lab=None):
    """A temporary workspace with build/helpers/netprobe (and the lab's CA
    certificate as /workspace/lab-ca.pem)."""
    ws = sbxtest.workspace_with_helpers("netprobe")
    if lab is not None and lab.cert:
        shutil.copy(lab.cert, os.path.join(ws, "lab-ca.pem"))
        os.chmod(os.path.join(ws, "lab-ca.pem"), 0o644)
    return ws


# =====================================================================================
# Self-test
# =====================================================================================

def _client_script():
    """Runs inside the daemon namespace: tries every server, prints one JSON result."""
    return r'''
import json, socket, struct, sys
targets = json.loads(sys.argv[1])
out = []
def tcp(host, port):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.create_connection((host, port), timeout=3) as s:
        s.sendall(b"GET /self-test HTTP/1.0\r\nHost: %s\r\n\r\n" % host.encode())
        data = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    return data.decode("latin-1")
def echo(host, port):
    with socket.create_connection((host, port), timeout=3) as s:
        s.sendall(b"\x00\x01netlab-echo-test!")
        s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    return data.hex()
def udp(host, port):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_DGRAM) as s:
        s.settimeout(3)
        s.sendto(b"netlab-udp", (host, port))
        return s.recvfrom(100)[0].decode()
def dns(server, name, qtype):
    q = struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    for l in name.split("."):
        q += bytes([len(l)]) + l.encode()
    q += b"\x00" + struct.pack("!HH", qtype, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(3)
        s.sendto(q, (server, 53))
        r = s.recv(4096)
    rcode = r[3] & 15
    an = struct.unpack("!H", r[6:8])[0]
    addrs, i = [], len(q)
    for _ in range(an):
        t, c, ttl, n = struct.unpack("!HHIH", r[i + 2:i + 12])
        raw = r[i + 12:i + 12 + n]
        addrs.append(socket.inet_ntop(socket.AF_INET if t == 1 else socket.AF_INET6, raw))
        i += 12 + n
    return [rcode, addrs]
for kind, a, b, c in targets:
    try:
        if kind == "tcp": r = tcp(a, b)
        elif kind == "echo": r = echo(a, b)
        elif kind == "udp": r = udp(a, b)
        else: r = dns(a, b, c)
        out.append([kind, a, b, c, "ok", r])
    except Exception as e:
        out.append([kind, a, b, c, "error", repr(e)])
print(json.dumps(out))
'''


def self_test():
    suite = sbxtest.Suite("netlab")
    with Lab(verbose=True) as lab:
        print("netlab: namespaces %s, IPv6 %s, TLS %s, nft counters %s" %
              (", ".join(lab.names.values()), lab.ipv6, bool(lab.cert), lab.counters_ok))

        v4 = [("pub", a) for a in (PUBLIC, PUB_LINK)] + [("priv", a) for a in PRIV_V4] + \
             [("d", a) for a in ("127.0.0.1", DAEMON, DAEMON_PRIV_LINK)]
        v6 = ([("pub", a) for a in PUB_V6] + [("priv", a) for a in PRIV_V6] +
              [("d", a) for a in ("::1", DAEMON6, DAEMON6_PRIV_LINK)]) if lab.ipv6 else []
        targets = [("tcp", a, p, r) for r, a in v4 + v6
                   for p in (DAEMON_TCP_PORTS if r == "d" else TCP_PORTS)]
        targets += [("echo", PUBLIC, 80, "pub"), ("echo", INTERNAL, 5432, "priv")]
        targets += [("udp", a, p, r) for r, a in v4 + v6 for p in UDP_PORTS]
        targets += [("udp", a, 53, r) for r, a in v4 + v6 if r != "pub"]
        targets += [("dns", DNS, "public.test", 1), ("dns", DNS, "PUBLIC.test", 28),
                    ("dns", DNS, "rebind.test", 1), ("dns", DNS, "nothing.test", 1),
                    ("dns", DNS, "public.test", 16)]

        @suite.case
        def every_server_answers_from_the_daemon_namespace():
            mark = lab.mark()
            p = lab.sh("d", sys.executable, "-c", _client_script(), json.dumps(targets),
                       timeout=120)
            results = json.loads(p.stdout)
            bad = [r for r in results if r[4] != "ok"]
            sbxtest.check(not bad, "servers not answering: %r" % bad[:5])
            for kind, a, b, c, _, r in results:
                if kind == "tcp":
                    want = "netlab %s %s:%d GET /self-test" % (c, a, b)
                    sbxtest.check(want in r, "tcp %s:%d answered %r, expected %r" % (a, b, r, want))
                elif kind == "echo":
                    sbxtest.check(r == b"\x00\x01netlab-echo-test!".hex(), "echo %r" % r)
                elif kind == "udp":
                    sbxtest.check(r == "netlab-udp", "udp %s:%d answered %r" % (a, b, r))
            dns = {(r[2], r[3]): r[5] for r in results if r[0] == "dns"}
            sbxtest.check(dns[("public.test", 1)] == [0, [PUBLIC]], "A public.test %r" % dns)
            sbxtest.check(dns[("PUBLIC.test", 28)] == [0, [PUBLIC6]], "AAAA public.test %r" % dns)
            sbxtest.check(dns[("rebind.test", 1)] == [0, [METADATA]], "A rebind.test %r" % dns)
            sbxtest.check(dns[("nothing.test", 1)] == [3, []], "NXDOMAIN %r" % dns)
            sbxtest.check(dns[("public.test", 16)] == [4, []], "TXT -> NOTIMP %r" % dns)
            # Every attempt is in the logs, with the address it reached.
            ev = lab.events(since=mark)
            acc = {(e["srv"], e["local"], e["lport"]) for e in ev if e["ev"] == "accept"}
            for kind, a, b, c in targets:
                if kind == "tcp":
                    sbxtest.check((c, a, b) in acc, "no accept logged for %s %s:%d" % (c, a, b))
            closes = [e for e in ev if e["ev"] == "close" and e.get("mode") == "http"]
            sbxtest.check(closes and all(e["bytesOut"] > 0 for e in closes), "close records")
            udps = {(e["local"], e["lport"]) for e in ev if e["ev"] == "udp"}
            for kind, a, b, c in targets:
                if kind == "udp":
                    sbxtest.check((a, b) in udps, "no udp logged for %s:%d" % (a, b))
            q = [(e["name"], e["type"]) for e in ev if e["ev"] == "dns"]
            sbxtest.check(("public.test", "TXT") in q and ("nothing.test", "A") in q,
                          "dns questions not logged: %r" % q)
            pk = lab.packets()
            if pk is not None:
                sbxtest.check(pk["pub"].get("syn", 0) > 0 and pk["priv"].get("syn", 0) > 0 and
                              pk["priv"].get("udp", 0) > 0, "nft counters %r" % pk)
                print("netlab: counters %r" % pk)

        @suite.case
        def tls_on_443_when_the_client_says_hello():
            sbxtest.check(lab.cert, "the lab has no TLS certificate")
            p = lab.sh("d", "curl", "-sS", "--max-time", "5", "--cacert", lab.cert,
                       "--resolve", "public.test:443:" + PUBLIC, "https://public.test/tls",
                       check=False)
            sbxtest.check(p.returncode == 0 and "netlab pub %s:443 GET /tls" % PUBLIC in p.stdout,
                          "curl https: %r %r" % (p.stdout, p.stderr))

        @suite.case
        def big_responses_and_post_bodies():
            p = lab.sh("d", "curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w",
                       "%{size_download}", "http://%s/big/3000000" % PUBLIC, check=False)
            sbxtest.check(p.stdout.strip() == "3000000", "big: %r %r" % (p.stdout, p.stderr))
            p = lab.sh("d", "curl", "-sS", "--max-time", "10", "--data-binary", "@-",
                       "http://%s/post" % PUBLIC, input="y" * 100000, check=False)
            sbxtest.check("received=100000" in p.stdout, "post: %r %r" % (p.stdout, p.stderr))

        @suite.case
        def daemon_namespace_has_no_way_out():
            for role in lab.names:
                links = json.loads(lab.ip(role, "-j", "link", "show").stdout)
                names = {l["ifname"] for l in links}
                allowed = {"lo"} | {v for k, v in lab.veth.items()
                                    if (role == "d") == k.startswith("d_")}
                sbxtest.check(names <= allowed, "%s has links %r beyond %r" %
                              (role, names, allowed))
                for l in links:
                    if l["ifname"] != "lo":
                        sbxtest.check(l.get("link_type") == "ether" and "link_netnsid" in l,
                                      "%s: %r is not a veth into another namespace" % (role, l))
                for fam in ("-4", "-6"):
                    routes = json.loads(lab.ip(role, fam, "-j", "route", "show", "table",
                                               "all").stdout)
                    for r in routes:
                        sbxtest.check(r.get("dst") != "default",
                                      "%s has a default route: %r" % (role, r))
                        sbxtest.check(r.get("dev") in names,
                                      "%s route through a foreign device: %r" % (role, r))
            for addr in ("1.1.1.1", "8.8.8.8", "192.0.2.77", "100.64.0.1"):
                p = lab.ip("pub", "route", "get", addr, check=False)
                sbxtest.check(p.returncode != 0, "pub has a route to %s: %s" % (addr, p.stdout))
            for addr in ("1.1.1.1", "8.8.8.8", "9.9.9.9", "2606:4700::1111"):
                if ":" in addr and not lab.ipv6:
                    continue
                p = lab.ip("d", "route", "get", addr, check=False)
                sbxtest.check(p.returncode != 0 and "unreachable" in p.stderr.lower(),
                              "daemon namespace routes %s: %s" % (addr, p.stdout))
            # The host's own namespace gained nothing of ours.
            host_links = _sh(["ip", "-o", "link", "show"]).stdout
            for v in lab.veth.values():
                sbxtest.check(v not in host_links, "veth %s in the host namespace" % v)

        @suite.case
        def sandboxd_runs_inside_the_daemon_namespace():
            sbxtest.check(os.access(sbxtest.SANDBOXD, os.X_OK),
                          "%s is not built" % sbxtest.SANDBOXD)
            res = lab.run(["cat", "/proc/net/dev"], "--net", "host")
            sbxtest.check(res.report is not None and res.code == 0,
                          "sandboxd run --net host failed in the lab: %r" % res)
            out = res.stdout.decode()
            sbxtest.check(lab.veth["d_pub"] in out and lab.veth["d_priv"] in out,
                          "--net host inside the lab sees %r" % out)
            sbxtest.check(res.report.get("cgroupMode") != "rlimit" or
                          not os.path.isdir("/sys/fs/cgroup/memory"),
                          "sandboxd in the lab lost its cgroups: %r" % res.report)

        names = list(lab.names.values())
        servers = [p.pid for p in lab.procs.values()]

    @suite.case
    def teardown_leaves_nothing():
        left = [n for n in names if os.path.exists("/run/netns/" + n)]
        sbxtest.check(not left, "namespaces left after teardown: %r" % left)
        alive = [p for p in servers if os.path.exists("/proc/%d" % p)]
        sbxtest.check(not alive, "server processes left: %r" % alive)
    suite.finish()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(sys.argv[2])
    else:
        self_test()
