"""`sandboxd doctor`: what this host offers and the isolation run applies, as
text and as JSON. The build hosts are cgroup v1 hybrid, run as root, with user
namespaces and seccomp: full isolation, exit 0."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from sbxtest import SANDBOXD, Suite, check  # noqa: E402

S = Suite("doctor")


def doctor(*args):
    return subprocess.run([SANDBOXD, "doctor", *args], capture_output=True, text=True,
                          timeout=60)


@S.case
def json_reports_this_host():
    p = doctor("--json")
    check(p.returncode == 0, "exit 0 (full isolation)", p)
    d = json.loads(p.stdout)  # the whole of stdout is one JSON object
    check(isinstance(d, dict), "an object", d)
    cg = d["cgroup"]
    check(cg["mode"] == "v1", "cgroup v1 hybrid here", cg)
    check(cg["controllers"]["memory"] is True and cg["controllers"]["pids"] is True,
          "memory and pids controllers", cg)
    check(all(b.endswith("/sandboxd") for b in cg["bases"].values()), "bases named sandboxd", cg)
    check(d["userNamespaces"]["available"] is True, "user namespaces", d["userNamespaces"])
    check(d["userNamespaces"]["max"] > 0, "max_user_namespaces", d["userNamespaces"])
    check(d["seccomp"]["available"] is True, "seccomp", d["seccomp"])
    check(d["root"] is True, "run as root", d)
    check(d["kernel"] == os.uname().release, "kernel release", d["kernel"])
    check(d["clone3"] is True and d["pidfd"] is True, "clone3 and pidfd", d)
    check(isinstance(d["landlock"]["available"], bool) and
          (d["landlock"]["abi"] > 0) == d["landlock"]["available"], "landlock", d["landlock"])
    check(isinstance(d["nftables"]["available"], bool), "nftables", d["nftables"])
    iso = d["isolation"]
    check(iso["namespaces"] == ["user", "pid", "mount", "net", "ipc", "uts", "cgroup"],
          "all namespaces", iso)
    check(iso["limits"] == "cgroup-v1", "limits through cgroup v1", iso)
    check(iso["cpuShareEnforced"] is (cg["controllers"]["cpu"] is True), "cpu share", iso)
    check(iso["seccomp"] == "default" and iso["full"] is True, "seccomp default, full", iso)
    check("abstract unix sockets" in iso["netHost"], "what --net host shares is said", iso)
    check(iso["memoryEnforced"] == "full", "memory held by the cgroup in full", iso)
    check(d["missing"] == [], "nothing required missing", d["warnings"])
    check(isinstance(d["warnings"], list), "warnings list", d)


@S.case
def text_is_readable():
    p = doctor()
    check(p.returncode == 0, "exit 0", p)
    out = p.stdout
    check("cgroup mode:" in out and "v1" in out, "mentions the cgroup mode", out)
    check("user namespaces:" in out and "seccomp:" in out, "features listed", out)
    check("Isolation sandboxd run will apply" in out, "the plan", out)
    check("full isolation available" in out, "the verdict", out)
    check("abstract unix sockets" in out, "what --net host shares is said", out)
    # key: value lines, values aligned in one column
    cols = {line.index(":") for line in out.splitlines()
            if line.startswith("  ") and not line.startswith("  -") and ":" in line}
    starts = {len(line) - len(line[line.index(":") + 1:].lstrip())
              for line in out.splitlines()
              if line.startswith("  ") and not line.startswith("  -") and ":" in line}
    check(len(cols) > 1 and len(starts) == 1, "values aligned", out)


@S.case
def unknown_option_exits_2():
    p = doctor("--frobnicate")
    check(p.returncode == 2, "exit 2", p)
    check("--frobnicate" in p.stderr, "names the option", p)
    check(p.stdout == "", "no report", p)
    p = doctor("extra")
    check(p.returncode == 2 and "extra" in p.stderr, "stray argument refused", p)


@S.case
def help_exits_0():
    p = doctor("--help")
    check(p.returncode == 0 and "--json" in p.stdout, "usage", p)


@S.case
def rlimit_host_is_reported_as_degraded():
    """As an unprivileged user no cgroup is writable: limits fall back to
    rlimits, said so, and run needs root, so full isolation is not possible."""
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        SANDBOXD, "doctor", "--json"], capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 1, "exit 1", p)
    d = json.loads(p.stdout)
    check(d["root"] is False, "not root", d)
    check(d["cgroup"]["mode"] == "rlimit" and d["cgroup"]["why"], "rlimit with why", d["cgroup"])
    iso = d["isolation"]
    check(iso["limits"] == "rlimit" and iso["cpuShareEnforced"] is False, "rlimit plan", iso)
    check(iso["memory"] == "RLIMIT_DATA + RLIMIT_AS + memory watch" and iso["processes"] == "RLIMIT_NPROC", "rlimits", iso)
    check(iso["memoryEnforced"] == "partial", "memory held only in part, said so", iso)
    check(any("root" in m for m in d["missing"]), "root named as missing", d["missing"])
    check(any("CPU share is NOT enforced" in w for w in d["warnings"]), "cpu warned", d)


def steps(d):
    return {s["step"]: s for s in d["steps"]}


@S.case
def every_step_tried_and_ok_here():
    d = json.loads(doctor("--json").stdout)
    st = steps(d)
    for name in ("capabilities", "user namespace", "id map", "other namespaces", "mount tmpfs",
                 "mount procfs", "pivot_root", "cgroup write", "seccomp load", "loop device"):
        check(name in st and st[name]["state"] == "ok", f"step {name} ok", st.get(name))
    check(isinstance(d["inContainer"], bool), "inContainer said", d)


@S.case
def masked_proc_is_found_with_its_fix():
    """Docker's masking of /proc paths, made here by one bind mount over a
    /proc file in a private mount namespace: the fresh procfs is refused, and
    doctor says so (not "full isolation available") with the fix; a spare
    unmasked procfs, as deploy/docker/entrypoint.sh mounts, makes it pass."""
    # ... and no other procfs in that namespace (a debootstrap's chroot may
    # have one on the host meanwhile): as in a container.
    masked = ("mount --bind /dev/null /proc/timer_list && "
              "for m in $(awk '{ for (i = 7; $i != \"-\"; i++); "
              "if ($(i+1) == \"proc\" && $5 != \"/proc\") print $5 }' /proc/self/mountinfo); "
              "do umount -l \"$m\"; done")
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        f'{masked} && exec "$0" doctor --json', SANDBOXD],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 1, "exit 1: not full", p)
    d = json.loads(p.stdout)
    st = steps(d)["mount procfs"]
    check(st["state"] == "failed" and st["error"].startswith("EPERM"), "procfs refused", st)
    check("systempaths=unconfined" in st["fix"] and "mount -t proc" in st["fix"], "fix named", st)
    check(steps(d)["pivot_root"]["state"] == "ok", "the steps after it still tried", d["steps"])
    check(d["isolation"]["full"] is False, "plan not full", d["isolation"])
    check(any("mount procfs" in m and "Fix:" in m for m in d["missing"]), "missing names it",
          d["missing"])
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        f'{masked} && d=$(mktemp -d) && mount -t proc proc "$d" && '
                        'exec "$0" doctor', SANDBOXD],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and "full isolation available" in p.stdout, "spare procfs fixes it",
          p)


@S.case
def missing_capabilities_named_with_flags():
    """Without CAP_SETUID and CAP_SETGID (dropped from the bounding set) the
    id map is refused: doctor names the step and the --cap-add flags, and
    the steps that need the map are reported as not tried."""
    p = subprocess.run(["setpriv", "--bounding-set", "-setuid,-setgid", "--inh-caps",
                        "-setuid,-setgid", SANDBOXD, "doctor"],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 1, "exit 1", p)
    out = p.stdout
    check("full isolation NOT possible" in out, "verdict", out)
    check("--cap-add SETUID --cap-add SETGID" in out, "flags named", out)
    check("id map:" in out and "EPERM" in out, "id map step failed", out)
    check("not tried (an earlier step failed)" in out, "later steps not tried", out)


S.finish()
