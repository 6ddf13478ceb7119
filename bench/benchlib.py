"""What the benches share (bench/rss.py, bench/throughput.py,
bench/spawner.py): a `sandboxd serve` started on a free port and stopped,
its API over one keep-alive connection, the machine's load average, and
what /proc tells of a process (memory, CPU time, the daemon's spawner).
Imported from the bench's own folder: `import benchlib`."""
import http.client
import json
import os
import socket
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TOKEN = "bench-" + "0123456789abcdef0123456789"
HZ = os.sysconf("SC_CLK_TCK")
SANDBOXD = os.environ.get("SANDBOXD") or os.path.join(ROOT, "build", "sandboxd")


def load():
    """The machine's 1-minute load average, as /proc/loadavg writes it."""
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


def status_kb(pid, key):
    """A KiB figure of /proc/PID/status (VmRSS, VmHWM), 0 when absent."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def cpu_s(pid):
    """(own utime+stime, reaped children's cutime+cstime) of pid in seconds;
    (0, 0) when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            v = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return (0.0, 0.0)
    return ((int(v[11]) + int(v[12])) / HZ, (int(v[13]) + int(v[14])) / HZ)


def children(pid):
    kids = []
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                kids += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return kids


def spawner_of(pid):
    """The daemon's sandbox spawner (`sandboxd-spawn`), None without one."""
    for k in children(pid):
        if comm(k) == "sandboxd-spawn":
            return k
    return None


def build(tmp, source, *flags):
    """bench/SOURCE (a C file) compiled with gcc -O2 into tmp; its path."""
    out = os.path.join(tmp, os.path.splitext(source)[0])
    subprocess.run(["gcc", "-O2", *flags, "-o", out, os.path.join(HERE, source)], check=True)
    return out


def api_load(loader, port, clients, seconds, warmup, timeout=None):
    """bench/api_load.c (built by build()) against a daemon: C closed-loop
    clients of POST /runtime/exec /bin/true for S seconds, every answer
    checked; its JSON (per_s, p50_ms, p99_ms, answered, errors)."""
    out = subprocess.run(
        [loader, "--port", str(port), "--token", TOKEN, "--clients", str(clients),
         "--duration", str(seconds), "--warmup", str(warmup), "--expect", '"exitCode":0,'],
        capture_output=True, text=True, timeout=timeout or seconds + 120)
    if out.returncode != 0:
        raise SystemExit("api_load failed on port %d: %s %s" % (port, out.stdout, out.stderr))
    return json.loads(out.stdout)


class Daemon:
    """`BINARY serve` on 127.0.0.1, a free port, with its state in STATE (made
    here), STATE.yaml holding config when given (None: no configuration
    file), STATE.log its output, args added to its command line. Ready when
    constructed (GET /readyz); stopped, also when it never got ready."""

    def __init__(self, state, binary=SANDBOXD, config=None, args=(), name=None,
                 ready_timeout=30):
        self.name = name or os.path.basename(state)
        self.binary = os.path.realpath(binary)
        self.state = state
        os.makedirs(state)
        self.port = free_port()
        argv = [self.binary, "serve", "--listen", "127.0.0.1:%d" % self.port, "--state-dir",
                state, "--token", TOKEN, "--log-level", "warn"]
        if config is not None:
            with open(state + ".yaml", "w") as f:
                f.write(config)
            argv += ["--config", state + ".yaml"]
        self.log = open(state + ".log", "w")
        self.proc = subprocess.Popen(argv + list(args), stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/readyz")
                if c.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.05)
        else:
            self.stop()
            raise SystemExit("%s: daemon not ready (%s)" % (self.name, self.log.name))
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def req(self, method, path, body=None, headers=None):
        """(status, body bytes) over the keep-alive connection."""
        h = {"Authorization": "Bearer " + TOKEN}
        h.update(headers or {})
        data = json.dumps(body) if body is not None else None
        if data:
            h["Content-Type"] = "application/json"
        for attempt in (0, 1):
            try:
                self.conn.request(method, path, body=data, headers=h)
                r = self.conn.getresponse()
                return r.status, r.read()
            except (http.client.RemoteDisconnected, ConnectionError):
                # the server closes a keep-alive connection idle for long
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                if attempt:
                    raise

    def exec(self, body, clone=None):
        """POST /runtime/exec body (for clone, if given), which must exit 0;
        the milliseconds it took."""
        t0 = time.perf_counter()
        st, out = self.req("POST", "/runtime/exec", body, {"X-Clone-Id": clone} if clone else None)
        dt = (time.perf_counter() - t0) * 1000
        if st != 200 or b'"exitCode":0,' not in out:
            raise SystemExit("%s: bad answer %d %r" % (self.name, st, out[:300]))
        return dt

    def pool(self):
        """The pool's part of the extended GET /runtime/status ({} without)."""
        st, out = self.req("GET", "/runtime/status", headers={"X-Sandbox-Extended": "1"})
        return json.loads(out).get("pool", {}) if st == 200 else {}

    def spawner(self):
        return spawner_of(self.proc.pid)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
