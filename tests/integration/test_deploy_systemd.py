"""deploy/systemd/sandboxd.service: systemd-analyze verify accepts it (and
catches a broken copy), its offline security score stays at the level it was
hardened to, the options that would break a sandbox stay out, and the daemon
run with the unit's capability bounding set and no_new_privs still runs tasks
(network none and proxy, a workspace on its quota image). systemd-analyze
comes with Debian's systemd package (scripts/deps.sh); no running systemd is
needed."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from sbxtest import EXTENDED, SANDBOXD, ServeDaemon, Suite, check  # noqa: E402

S = Suite("deploy_systemd")
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
UNIT = os.path.join(ROOT, "deploy", "systemd", "sandboxd.service")
ANALYZE = shutil.which("systemd-analyze") or "/usr/bin/systemd-analyze"
TMP = tempfile.mkdtemp(prefix="sbx-systemd-")
# The exposure score (0-100, lower is better) the unit was hardened to: 60.
THRESHOLD = 62


def settings(text):
    """[(section, key, value)] of a unit's text, in order (keys repeat)."""
    out, section = [], None
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        m = re.fullmatch(r"\[(\w+)\]", line)
        if m:
            section = m.group(1)
            continue
        key, _, value = line.partition("=")
        out.append((section, key.strip(), value.strip()))
    return out


with open(UNIT) as f:
    TEXT = f.read()
SET = settings(TEXT)


def value(key):
    vals = [v for s, k, v in SET if s == "Service" and k == key]
    return vals[-1] if vals else None


def unit_copy(text, name="sandboxd.service"):
    """The unit with ExecStart on this build's sandboxd (verify checks that
    the program exists), in a directory of its own."""
    d = tempfile.mkdtemp(dir=TMP)
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text.replace("/usr/local/bin/sandboxd", os.path.abspath(SANDBOXD)))
    return path


def verify(path):
    p = subprocess.run([ANALYZE, "verify", "--man=no", path], capture_output=True, text=True,
                       timeout=60)
    return p.returncode, (p.stdout + p.stderr).strip()


def verify_accepts_the_unit():
    check(os.access(ANALYZE, os.X_OK), "systemd-analyze installed (scripts/deps.sh: systemd)")
    rc, out = verify(unit_copy(TEXT))
    check(rc == 0 and out == "", "systemd-analyze verify: clean", (rc, out))


def verify_catches_a_broken_unit():
    """verify exits 0 on an unknown key or a bad value (it ignores the line),
    so any word of it is a failure: a broken copy must say something."""
    for bad, why in (("Delegate=yes", "Delegat=yes"), ("KillMode=mixed", "KillMode=gently"),
                     ("ProtectSystem=strict", "ProtectSystem=sometimes")):
        check(bad in TEXT, "the unit has " + bad)
        rc, out = verify(unit_copy(TEXT.replace(bad, why, 1)))
        check(rc != 0 or out != "", "a unit with %s is reported" % why, (rc, out))
    rc, out = verify(unit_copy(TEXT.replace("/usr/local/bin/sandboxd", "/nonexistent/sandboxd")))
    check(rc != 0 or out != "", "a missing program is reported", (rc, out))


def security_score_holds():
    path = unit_copy(TEXT)
    p = subprocess.run([ANALYZE, "security", "--offline=yes", "--no-pager",
                        "--threshold=%d" % THRESHOLD, path], capture_output=True, text=True,
                       timeout=60)
    last = (p.stdout.strip().splitlines() or [""])[-1]
    print("  " + last)
    check(p.returncode == 0, "exposure at most %d/100" % THRESHOLD, (p.returncode, last))
    # The same unit without its hardening scores worse: the check can fail.
    bare = "\n".join(line for line in TEXT.splitlines()
                     if not re.match(r"(Protect|Private|Restrict|Capability|NoNew|Device|"
                                     r"SystemCall|UMask)", line))
    p = subprocess.run([ANALYZE, "security", "--offline=yes", "--no-pager",
                        "--threshold=%d" % THRESHOLD, unit_copy(bare)], capture_output=True,
                       text=True, timeout=60)
    check(p.returncode != 0, "an unhardened copy is above the threshold", p.stdout[-300:])


def what_sandboxd_needs_is_kept():
    check(value("Delegate") == "yes", "Delegate=yes (its sandboxes' cgroups)")
    check(value("KillMode") == "mixed", "KillMode=mixed (SIGTERM to the daemon alone)")
    check(value("Type") == "exec" and value("ExecStart").split()[1] == "serve", "serve")
    for key in ("ProtectKernelTunables", "ProtectControlGroups", "RestrictNamespaces",
                "ProtectHostname", "PrivateDevices", "MemoryDenyWriteExecute",
                "SystemCallFilter", "PrivateNetwork", "LockPersonality", "ProtectProc"):
        check(value(key) in (None, "no", "false"), "%s left out (breaks a sandbox)" % key,
              value(key))
    allowed = [v for s, k, v in SET if k == "DeviceAllow"]
    check("/dev/loop-control rw" in allowed and any(v.startswith("block-loop") for v in allowed),
          "loop devices allowed (workspace quota)", allowed)
    fams = (value("RestrictAddressFamilies") or "").split()
    check("AF_NETLINK" in fams and "AF_VSOCK" not in fams, "netlink kept, no vsock", fams)


def daemon_runs_with_the_units_capabilities():
    """The bounding set and no_new_privs of the unit, applied with setpriv:
    tasks still run, with the egress proxy (nftables in their netns) and a
    workspace on its loop-mounted quota image."""
    caps = value("CapabilityBoundingSet").split()
    check(caps and all(c.startswith("CAP_") for c in caps), "a bounding set", caps)
    check(value("NoNewPrivileges") == "yes", "NoNewPrivileges=yes")
    bset = "-all," + ",".join("+" + c[4:].lower() for c in caps)
    prefix = ["setpriv", "--bounding-set", bset, "--inh-caps", "-all", "--no-new-privs"]
    d = ServeDaemon(os.path.join(TMP, "state"), "systemd-unit-token-0123456789", prefix=prefix,
                    net="proxy")
    d.start()
    try:
        # Proxy a dozen times, without SYS_PTRACE in the bounding set: the
        # egress gets each sandbox's netns whatever the timing (it is opened
        # before the sandbox's init changes its ids).
        for net in ("none",) + ("proxy",) * 12:
            st, b, _ = d.req("POST", "/runtime/exec", {
                "command": ["/bin/sh", "-c", "echo hi > f && cat f && grep NoNewPrivs "
                            "/proc/self/status && echo proxy=${HTTP_PROXY:-none}"],
                "network": {"policy": net}}, headers=EXTENDED)
            check(st == 200 and b["status"] == "succeeded" and b["stdout"].startswith("hi\n"),
                  "a task runs (network %s)" % net, (st, b, d.output()))
            check(("proxy=http://" in b["stdout"]) == (net == "proxy"), "its network", b)
        # A timeout kills the sandbox's processes (other host uids than the daemon's).
        st, b, _ = d.req("POST", "/runtime/exec", {"command": ["/bin/sleep", "30"],
                                                   "timeoutSeconds": 1}, headers=EXTENDED)
        check(st == 200 and b["status"] == "timeout" and b["report"]["wallSeconds"] < 20,
              "a timeout still kills", (st, b))
        with open("/proc/%d/status" % d.proc.pid) as f:
            status = f.read()
        check(re.search(r"NoNewPrivs:\s+1", status), "the daemon has no_new_privs", status)
        bnd = int(re.search(r"CapBnd:\s+([0-9a-f]+)", status).group(1), 16)
        check(bin(bnd).count("1") == len(caps), "the daemon has the unit's %d capabilities"
              % len(caps), hex(bnd))
    finally:
        check(d.stop() == 0, "SIGTERM: exit 0", d.output())


try:
    for fn in (verify_accepts_the_unit, verify_catches_a_broken_unit, security_score_holds,
               what_sandboxd_needs_is_kept, daemon_runs_with_the_units_capabilities):
        S.case(fn)
finally:
    shutil.rmtree(TMP, True)
S.finish()
