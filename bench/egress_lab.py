#!/usr/bin/env python3
"""The measuring half of bench/egress.sh (run that, not this): relay throughput
and connection set-up cost of the proxy egress, side by side with the same
transfer made directly, all inside the isolated network of
tests/integration/netlab.py (never the real one: sandboxd and the direct client
run in the lab's daemon namespace, which has no route out).

    egress_lab.py TOOL RESULTS_DIR [--bytes N] [--reps R] [--conns C] [--quiet-wait S] [--perf]

TOOL is bench/egress_tool.c built static. Paths measured:
  direct veth      the client in the daemon namespace, the server on the lab's
                   "public" host 203.0.113.10 (one veth hop): the same route the
                   relay's upstream leg takes, without a sandbox;
  direct loopback  client and server both in the daemon namespace on 127.0.0.1;
  minimal relay    no sandbox: the client in the daemon namespace connects to
                   egress_tool's own relay on 127.0.0.1:9001 there, which
                   splices from 203.0.113.10 (the same extra TCP hop as the
                   egress, with the least a relay can do: the reference for what
                   the hop itself costs);
  transparent      the client inside `sandboxd run --net proxy`, a plain
                   connect() to 203.0.113.10 (nftables redirects it to the
                   run process's transparent listener, which relays);
  socks5           the same client through SOCKS5 127.0.0.1:1080 (IPv4 target).
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import netlab  # noqa: E402
import sbxtest  # noqa: E402

PORT = 9000
RELAY_PORT = 9001  # egress_tool relay in the daemon namespace -> PUBLIC:PORT
GiB = 1 << 30
MiB = 1 << 20

LIVE = []  # processes to end on the way out, whatever happens


def parse(line):
    words = line.split()
    return {k: v for k, _, v in (w.partition("=") for w in words[1:])}


def cpu_ns(pid):
    """CPU time of every thread of pid, in ns (schedstat), and (utime, stime) in s."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
            total += int(f.read().split()[0])
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    hz = os.sysconf("SC_CLK_TCK")
    return total, int(fields[11]) / hz, int(fields[12]) / hz


def machine_busy():
    """(busy seconds of all CPUs together, monotonic time) from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal: busy is what ran here
    # (user, nice, system, irq, softirq), not idle, iowait or the hypervisor's steal.
    busy = v[0] + v[1] + v[2] + v[5] + v[6]
    return busy / os.sysconf("SC_CLK_TCK"), time.monotonic()


def wait_quiet(limit_s, threshold=0.15):
    """Wait (at most limit_s) for the machine to be idle: busy CPU below threshold
    cores over half a second (other work on a shared machine skews every figure).
    Returns the busy cores of the last window."""
    deadline = time.monotonic() + limit_s
    while True:
        b0 = machine_busy()
        time.sleep(0.5)
        b1 = machine_busy()
        cores = (b1[0] - b0[0]) / (b1[1] - b0[1])
        if cores < threshold or time.monotonic() > deadline:
            return cores


class Bench:
    def __init__(self, lab, tool, ws, perf_dir=None):
        self.lab = lab
        self.tool = tool
        self.ws = ws
        self.perf_dir = perf_dir
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CLAW_")}

    def server(self, role, addr, port=PORT, relay_to=None):
        cmd = ["serve", addr, str(port)] if relay_to is None else \
            ["relay", addr, str(port), relay_to[0], str(relay_to[1])]
        p = subprocess.Popen(self.lab.nsenter(role) + [self.tool] + cmd,
                             stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        LIVE.append(p)
        line = p.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError("server %s %s:%d did not start: %r" % (role, addr, port, line))
        return p

    def _follow(self, p, args, relay_pid=None, perf_name=None):
        """Read the client's lines; around the transfer ("begin" .. "result") sample
        the machine's CPU and, when relay_pid is given, the relay's (and perf it)."""
        result, m0, m1, r0, r1, perf = None, None, None, None, None, None
        for line in p.stdout:
            if line.startswith("begin"):
                m0 = machine_busy()
                if relay_pid:
                    r0 = cpu_ns(relay_pid)
                    if perf_name and self.perf_dir:
                        perf = subprocess.Popen(
                            ["perf", "record", "-q", "-g", "-p", str(relay_pid), "-o",
                             os.path.join(self.perf_dir, perf_name + ".data")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                        LIVE.append(perf)
            elif line.startswith("result"):
                m1 = machine_busy()
                if relay_pid:
                    r1 = cpu_ns(relay_pid)
                if perf:
                    perf.send_signal(signal.SIGINT)
                    perf.wait(timeout=60)
                result = parse(line)
            elif line.startswith("error"):
                raise RuntimeError("%r: %s" % (args, line.strip()))
        cpu = {}
        if m0 and m1:
            # busy CPU-seconds of the whole machine over the begin..result window
            # (which includes one pause of PAUSE_MS before the transfer)
            cpu["machine_s"] = m1[0] - m0[0]
            cpu["window_s"] = m1[1] - m0[1]
        if r0 and r1:
            cpu.update(relay_ns=r1[0] - r0[0], relay_user=r1[1] - r0[1], relay_sys=r1[2] - r0[2])
        return result, cpu

    # --- direct: the client in the daemon namespace ---------------------------------
    def direct(self, *args):
        p = subprocess.Popen(self.lab.nsenter("d") + [self.tool] + [str(a) for a in args],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, text=True)
        LIVE.append(p)
        result, cpu = self._follow(p, args)
        p.wait(timeout=60)
        if p.returncode != 0 or result is None:
            raise RuntimeError("direct %r failed: %r" % (args, p.stderr.read()))
        return result, cpu

    # --- through a sandbox ----------------------------------------------------------
    def sandboxed(self, args, perf_name=None):
        """Run the client in `sandboxd run --net proxy`; returns (result, CPU, report)."""
        fd, report_path = tempfile.mkstemp(prefix="sbx-egress-report-")
        os.close(fd)
        argv = self.lab.sandboxd_argv(
            "run", "--report", report_path, "--workspace", self.ws, "--net", "proxy",
            "--dns-upstream", netlab.DNS, "--cpu", "2", "--memory", "256M", "--timeout", "240",
            "--", "/workspace/egress_tool", *[str(a) for a in args])
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, text=True, env=self.env)
        LIVE.append(p)
        try:
            # nsenter execs sandboxd: p.pid is the run process, whose loop relays.
            result, cpu = self._follow(p, args, relay_pid=p.pid, perf_name=perf_name)
            p.wait(timeout=60)
            err = p.stderr.read()
            with open(report_path) as f:
                text = f.read()
            report = json.loads(text) if text.strip() else None
        finally:
            os.unlink(report_path)
        if result is None or report is None or report.get("outcome") != "exited" or \
                report.get("exitCode", 0) != 0:
            raise RuntimeError("sandboxed %r failed: result %r report %r stderr %r" %
                               (args, result, report, err[-2000:]))
        return result, cpu, report


def flows_of(report, via):
    return [f for f in (report.get("network") or {}).get("flows") or [] if f.get("via") == via]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tool")
    ap.add_argument("results")
    ap.add_argument("--bytes", type=int, default=GiB)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--conns", type=int, default=500)
    ap.add_argument("--quiet-wait", type=float, default=120, help="seconds to wait at most, "
                    "before each measurement, for the machine to be idle")
    ap.add_argument("--perf", action="store_true", help="afterwards, one more transfer and "
                    "set-up run per proxied path with perf recording the run process "
                    "(bench/results/egress-perf-*.txt; not counted in the figures)")
    a = ap.parse_args()
    if not os.access(sbxtest.SANDBOXD, os.X_OK):
        sys.exit("egress: %s is not built" % sbxtest.SANDBOXD)
    if a.perf and not shutil.which("perf"):
        sys.exit("egress: --perf needs perf (Debian package linux-perf)")
    os.makedirs(a.results, exist_ok=True)

    ws = tempfile.mkdtemp(prefix="sbx-egress-ws-")
    os.chmod(ws, 0o755)
    shutil.copy(a.tool, os.path.join(ws, "egress_tool"))
    os.chmod(os.path.join(ws, "egress_tool"), 0o755)
    perf_dir = tempfile.mkdtemp(prefix="sbx-egress-perf-") if a.perf else None

    thr = {k: [] for k in ("direct veth", "direct loopback", "minimal relay", "transparent",
                           "socks5")}
    cpu = {k: [] for k in thr}
    setup = {k: [] for k in ("direct veth", "minimal relay", "transparent", "socks5")}
    checks = []
    background = []  # busy cores of the machine just before each measurement
    try:
        with netlab.Lab(ipv6=False, tls=False) as lab:
            b = Bench(lab, os.path.abspath(a.tool), ws, perf_dir)
            b.server("pub", netlab.PUBLIC)
            b.server("d", "127.0.0.1")
            b.server("d", "127.0.0.1", RELAY_PORT, relay_to=(netlab.PUBLIC, PORT))
            # Never a packet off the machine: the daemon namespace routes nothing else.
            for probe in ("1.1.1.1", "8.8.8.8"):
                r = lab.ip("d", "route", "get", probe, check=False)
                if r.returncode == 0:
                    raise RuntimeError("the daemon namespace routes %s: %s" % (probe, r.stdout))
            print("egress: lab %s up, sandboxd %s, %d bytes x %d runs, %d connections" %
                  (lab.tag, sbxtest.SANDBOXD, a.bytes, a.reps, a.conns), flush=True)

            for rep in range(a.reps):
                for name, host, port in (("direct veth", netlab.PUBLIC, PORT),
                                         ("direct loopback", "127.0.0.1", PORT),
                                         ("minimal relay", "127.0.0.1", RELAY_PORT)):
                    background.append(wait_quiet(a.quiet_wait))
                    r, c = b.direct("get", "direct", host, port, a.bytes, 200)
                    thr[name].append(float(r["mibps"]))
                    cpu[name].append(c)
                for name, mode, via in (("transparent", "direct", "transparent"),
                                        ("socks5", "socks", "socks5")):
                    background.append(wait_quiet(a.quiet_wait))
                    r, c, report = b.sandboxed(["get", mode, netlab.PUBLIC, PORT, a.bytes, 200])
                    thr[name].append(float(r["mibps"]))
                    cpu[name].append(c)
                    fl = [f for f in flows_of(report, via) if f.get("port") == PORT]
                    if len(fl) != 1 or fl[0]["bytesIn"] != a.bytes or fl[0]["verdict"] != "allow":
                        raise RuntimeError("%s: flow record %r" % (name, fl))
                    checks.append("%s flow: %s" % (name, json.dumps(fl[0], sort_keys=True)))
                print("egress: run %d: %s" % (rep + 1, ", ".join(
                    "%s %.0f MiB/s" % (k, v[-1]) for k, v in thr.items())), flush=True)

            for rep in range(a.reps):
                for name, host, port in (("direct veth", netlab.PUBLIC, PORT),
                                         ("minimal relay", "127.0.0.1", RELAY_PORT)):
                    background.append(wait_quiet(a.quiet_wait))
                    r, _ = b.direct("setup", "direct", host, port, a.conns)
                    setup[name].append(r)
                for name, mode, via in (("transparent", "direct", "transparent"),
                                        ("socks5", "socks", "socks5")):
                    background.append(wait_quiet(a.quiet_wait))
                    r, c, report = b.sandboxed(["setup", mode, netlab.PUBLIC, PORT, a.conns])
                    r["relay_us_per_conn"] = c["relay_ns"] / 1e3 / a.conns if c else None
                    setup[name].append(r)
                    fl = [f for f in flows_of(report, via) if f.get("port") == PORT]
                    if len(fl) != a.conns or any(f["verdict"] != "allow" for f in fl):
                        raise RuntimeError("%s: %d flow records for %d connections" %
                                           (name, len(fl), a.conns))
                print("egress: set-up run %d: %s" % (rep + 1, ", ".join(
                    "%s %s us" % (k, v[-1]["median_us"]) for k, v in setup.items())), flush=True)

            if perf_dir:
                # Extra runs under perf, not counted in the figures.
                for name, mode in (("transparent", "direct"), ("socks5", "socks")):
                    wait_quiet(a.quiet_wait)
                    b.sandboxed(["get", mode, netlab.PUBLIC, PORT, a.bytes, 200],
                                "egress-perf-" + name)
                    wait_quiet(a.quiet_wait)
                    b.sandboxed(["setup", mode, netlab.PUBLIC, PORT, max(a.conns, 5000), 64,
                                 300], "egress-perf-setup-" + name)
                for name in ("transparent", "socks5", "setup-transparent", "setup-socks5"):
                    data = os.path.join(perf_dir, "egress-perf-%s.data" % name)
                    if not os.path.exists(data):
                        continue
                    text = ""
                    for view in ("--no-children", "--children"):
                        out = subprocess.run(
                            ["perf", "report", "-i", data, "--stdio", view, "--sort",
                             "dso,symbol", "--percent-limit", "1.5", "-g", "none"],
                            capture_output=True, text=True)
                        text += "## perf report %s\n%s\n" % (view, "\n".join(
                            l.rstrip() for l in out.stdout.splitlines()
                            if l.strip() and not l.startswith("#")))
                    with open(os.path.join(a.results, "egress-perf-%s.txt" % name), "w") as f:
                        f.write(text)
    finally:
        for p in LIVE:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)
                    p.wait(timeout=10)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    p.kill()
                    p.wait()
        shutil.rmtree(ws, ignore_errors=True)
        if perf_dir:
            shutil.rmtree(perf_dir, ignore_errors=True)

    write(a, thr, cpu, setup, checks, background)


def write(a, thr, cpu, setup, checks, background):
    med = {k: statistics.median(v) for k, v in thr.items()}
    base = med["direct veth"]
    if os.environ.get("EGRESS_SANDBOXD_GIVEN"):
        origin = "given by SANDBOXD"
    else:
        origin = "repository HEAD " + (subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True).stdout.strip() or "?")
        if subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no",
                           "--", "src", "CMakeLists.txt"],
                          capture_output=True, text=True).stdout.strip():
            origin += " with uncommitted changes"
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    out = []
    out.append("Measured %s on %s (%d CPUs, kernel %s); sandboxd %s (built %s; %s).\n" % (
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), model,
        os.cpu_count(), platform.release(), sbxtest.SANDBOXD,
        time.strftime("%Y-%m-%d %H:%M", time.gmtime(os.path.getmtime(sbxtest.SANDBOXD))), origin))
    out.append("Machine load just before each measurement (busy cores over 0.5 s, other work "
               "included): median %.2f, max %.2f (the bench waits up to %.0f s for < 0.15).\n" %
               (statistics.median(background), max(background), a.quiet_wait))
    out.append("Throughput: one download of %d bytes (%.0f MiB) per run, %d runs per path, "
               "median shown; the ratio is against the direct transfer over the same veth.\n" %
               (a.bytes, a.bytes / MiB, len(thr["direct veth"])))
    out.append("| path | MiB/s (median) | runs MiB/s | × direct veth | × direct loopback | "
               "machine CPU-s per GiB | relay CPU-s per GiB (user+sys) |")
    out.append("|---|---|---|---|---|---|---|")
    gib = a.bytes / GiB
    for k, v in thr.items():
        cs = cpu.get(k) or []
        mach = statistics.median(x["machine_s"] for x in cs) / gib if cs else None
        relay = "–"
        if cs and "relay_ns" in cs[0]:
            relay = "%.2f (%.2f+%.2f)" % (
                statistics.median(x["relay_ns"] for x in cs) / 1e9 / gib,
                statistics.median(x["relay_user"] for x in cs) / gib,
                statistics.median(x["relay_sys"] for x in cs) / gib)
        out.append("| %s | %.0f | %s | %.2f | %.2f | %s | %s |" % (
            k, med[k], " / ".join("%.0f" % x for x in v), med[k] / base,
            med[k] / med["direct loopback"], "%.2f" % mach if mach is not None else "–", relay))
    out.append("")
    out.append("machine CPU-s: busy time of all %d CPUs together (/proc/stat) from just before "
               "to the end of the transfer, everything on the machine included; relay CPU-s: "
               "the `sandboxd run` process alone (schedstat; user+sys from its tick counts).\n"
               % os.cpu_count())
    out.append("Connection set-up: %d sequential connections per run (connect, SOCKS5 "
               "handshake where used, a 3-byte request, a 64-byte reply, close), %d runs; "
               "per-connection times in µs, median of the runs' figures.\n" %
               (a.conns, len(setup["direct veth"])))
    out.append("| path | median µs | mean µs | p10 µs | p90 µs | + median vs direct | "
               "relay CPU µs per connection |")
    out.append("|---|---|---|---|---|---|---|")
    m0 = statistics.median(float(r["median_us"]) for r in setup["direct veth"])
    for k, rs in setup.items():
        m = {f: statistics.median(float(r[f]) for r in rs)
             for f in ("median_us", "mean_us", "p10_us", "p90_us")}
        relay = [r["relay_us_per_conn"] for r in rs if r.get("relay_us_per_conn")]
        out.append("| %s | %.0f | %.0f | %.0f | %.0f | %s | %s |" % (
            k, m["median_us"], m["mean_us"], m["p10_us"], m["p90_us"],
            "–" if k == "direct veth" else "+%.0f" % (m["median_us"] - m0),
            "%.0f" % statistics.median(relay) if relay else "–"))
    out.append("")
    md = "\n".join(out)
    with open(os.path.join(a.results, "egress.md"), "w") as f:
        f.write(md)
    with open(os.path.join(a.results, "egress.json"), "w") as f:
        json.dump({"bytes": a.bytes, "throughput_mibps": thr, "relay_cpu": cpu,
                   "setup": setup, "background_cores": background,
                   "flows_checked": checks}, f, indent=1)
    print()
    print(md)


if __name__ == "__main__":
    main()
