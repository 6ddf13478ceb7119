"""Outcome tests of `sandboxd run`: exit codes, signals, timeouts of whole
trees, oom, output caps, stdin relay, setup and option errors, both cgroup
modes."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from sbxtest import SANDBOXD, Suite, check, pids_of_uid, run  # noqa: E402

S = Suite("outcomes")
BASE = 230000  # a host id range of our own, so leftovers are attributable
RUNNER = BASE + 10001


def both_modes(fn):
    """Run a case in the cgroup mode and in the forced rlimit mode."""
    def cgroup():
        fn()

    def rlimit():
        fn("--cgroup", "rlimit")
    cgroup.__name__ = fn.__name__ + "[cgroup]"
    rlimit.__name__ = fn.__name__ + "[rlimit]"
    S.case(cgroup)
    S.case(rlimit)


@S.case
def exit_code_passes_through():
    r = run(["/bin/sh", "-c", "echo out; echo err >&2; exit 3"])
    check(r.code == 3, "exit code 3", r)
    check(r.stdout == b"out\n" and r.stderr.endswith(b"err\n"), "stdio relayed", r)
    check(r.report["outcome"] == "exited" and r.report["exitCode"] == 3, "report", r)
    check(r.report["stdoutBytes"] == 4 and not r.report["stdoutTruncated"], "byte counts", r)


@S.case
def signal_gives_128_plus_n():
    r = run(["/bin/sh", "-c", "kill -TERM $$"])
    check(r.code == 143, "128+15", r)
    check(r.report["outcome"] == "signaled" and r.report["signal"] == 15, "signaled", r)


@both_modes
def timeout_kills_double_forked_tree(*mode):
    script = ("(setsid sh -c 'sleep 1000 & sleep 1000' &) ; "
              "(sh -c 'sleep 1000 &' &) ; sleep 1000")
    t0 = time.monotonic()
    r = run(["/bin/sh", "-c", script], "--timeout", "0.5", "--host-id-base", str(BASE), *mode)
    took = time.monotonic() - t0
    check(r.code == 124, "exit 124", r)
    check(r.report["outcome"] == "timeout", "outcome timeout", r)
    check(took < 0.5 + 10, "ended promptly (%.2fs)" % took, r)
    check(0.45 <= r.report["wallSeconds"] < 0.5 + 10, "wall time near the timeout", r)
    check(pids_of_uid(RUNNER) == [], "no process of the sandbox left", pids_of_uid(RUNNER))


@S.case
def oom_is_reported():
    code = "b=[]\nwhile True: b.append(bytearray(8<<20))"
    r = run(["python3", "-c", code], "--memory", "64M", "--timeout", "30")
    check(r.report["outcome"] == "oom", "outcome oom", r)
    check(r.report["oomKilled"] is True and r.code == 137, "oomKilled, 137", r)
    check(r.report["peakMemoryBytes"] > 32 << 20, "peak memory measured", r)


@S.case
def memory_limit_in_rlimit_mode():
    code = "b=[]\nwhile True: b.append(bytearray(8<<20))"
    r = run(["python3", "-c", code], "--memory", "64M", "--timeout", "30", "--cgroup", "rlimit")
    check(r.code != 0 and r.report["outcome"] in ("exited", "signaled"), "task ended", r)
    check(b"MemoryError" in r.stderr, "allocation refused", r)
    check(r.report["cgroupMode"] == "rlimit", "mode reported", r)
    check(r.report["limits"]["cpuEnforced"] is False, "cpu share reported as not enforced", r)


@both_modes
def output_is_capped(*mode):
    r = run(["/bin/sh", "-c", "head -c 300000 /dev/zero; head -c 10 /dev/zero >&2"],
            "--output-limit", "100k", *mode)
    check(r.code == 0, "exit 0", r)
    check(len(r.stdout) == 100 * 1024, "stdout capped at 100 KiB (%d)" % len(r.stdout))
    check(r.report["stdoutBytes"] == 300000 and r.report["stdoutTruncated"], "truncation", r)
    check(r.report["stderrBytes"] == 10 and not r.report["stderrTruncated"], "stderr intact", r)


@S.case
def stdin_is_relayed_from_a_pipe_and_a_file():
    r = run(["/bin/sh", "-c", "tr a-z A-Z"], stdin=b"hello sandbox\n")
    check(r.stdout == b"HELLO SANDBOX\n", "pipe stdin", r)
    with tempfile.TemporaryFile() as f:
        f.write(b"x" * 200000)
        f.seek(0)
        p = subprocess.run([SANDBOXD, "run", "--", "wc", "-c"], stdin=f, capture_output=True,
                           timeout=30)
    check(p.stdout.strip() == b"200000", "file stdin", p.stdout)


@S.case
def setup_error_names_stage_and_errno():
    r = run(["/bin/true"], "--workspace", "/nonexistent/ws")
    check(r.code == 125, "exit 125", r)
    check(b"workspace" in r.stderr and b"ENOENT" in r.stderr, "stage and errno named", r)


@S.case
def missing_command_is_127():
    r = run(["/no/such/program"])
    check(r.code == 127, "exit 127", r)
    check("ENOENT" in r.report["message"], "message names the errno", r)


@S.case
def bad_options_are_named():
    cases = [("--memory", "lots"), ("--memory", "1k"), ("--cpu", "0"), ("--timeout", "-1"),
             ("--pids", "0"), ("--net", "internet"), ("--env", "1BAD=x"),
             ("--seccomp", "lax"), ("--uid", "0"), ("--host-id-base", "0"),
             ("--cgroup", "v3"), ("--output-limit", "")]
    for opt, val in cases:
        p = subprocess.run([SANDBOXD, "run", opt, val, "--", "/bin/true"], capture_output=True,
                           timeout=10)
        check(p.returncode == 125, "%s %s refused" % (opt, val), p)
        check(opt.encode() in p.stderr, "%s named in the error" % opt, p.stderr)
    p = subprocess.run([SANDBOXD, "run", "--bogus", "--", "/bin/true"], capture_output=True,
                       timeout=10)
    check(p.returncode == 125 and b"--bogus" in p.stderr, "unknown option named", p.stderr)
    p = subprocess.run([SANDBOXD, "run"], capture_output=True, timeout=10)
    check(p.returncode == 125 and b"no command" in p.stderr, "missing command", p.stderr)


@S.case
def interpreters_run_under_both_profiles():
    for prof in ("default", "strict"):
        r = run(["python3", "-c", "import os,json,subprocess;print(json.dumps(os.getcwd()))"],
                "--seccomp", prof)
        check(r.code == 0 and r.stdout == b'"/workspace"\n', "python3 under " + prof, r)
        r = run(["node", "-e", "console.log(require('os').userInfo().username)"],
                "--seccomp", prof)
        check(r.code == 0 and r.stdout == b"runner\n", "node under " + prof, r)
        r = run(["/bin/sh", "-c", "ls / | sort | head -3; mkdir d && echo x > d/f && cat d/f"],
                "--seccomp", prof)
        check(r.code == 0 and r.stdout.endswith(b"x\n"), "sh under " + prof, r)


@S.case
def env_is_whitelist_plus_flags():
    env = dict(os.environ, SBX_DAEMON_SECRET="s3cr3t")
    base = [b"FOO", b"HOME", b"LANG", b"LOGNAME", b"PATH", b"SHELL", b"TMPDIR", b"USER"]
    proxy = [b"ALL_PROXY", b"HTTPS_PROXY", b"HTTP_PROXY", b"NO_PROXY", b"all_proxy",
             b"http_proxy", b"https_proxy", b"no_proxy"]
    for net, want in (("none", base), ("proxy", base + proxy)):
        r = run(["/usr/bin/env"], "--net", net, "--env", "FOO=bar", env=env)
        keys = sorted(line.split(b"=", 1)[0] for line in r.stdout.splitlines())
        check(keys == sorted(want), "only the whitelist and FOO with --net " + net, r)
        check(b"s3cr3t" not in r.stdout, "no daemon secret", r)


@S.case
def net_policies_without_traffic():
    r = run(["/bin/cat", "/proc/net/dev"], "--net", "none")
    ifaces = [ln.split(b":")[0].strip() for ln in r.stdout.splitlines()[2:]]
    check(ifaces == [b"lo"], "none: only loopback", r)
    r = run(["/bin/cat", "/proc/net/dev"], "--net", "host")
    ifaces = [ln.split(b":")[0].strip() for ln in r.stdout.splitlines()[2:]]
    with open("/proc/net/dev", "rb") as f:
        host = [ln.split(b":")[0].strip() for ln in f.read().splitlines()[2:]]
    check(sorted(ifaces) == sorted(host), "host: the host's interfaces", r)


@S.case
def workspace_persists_and_is_owned_by_the_runner():
    ws = tempfile.mkdtemp(prefix="sbx-ws-")
    try:
        r = run(["/bin/sh", "-c", "echo data > kept"], "--host-id-base", str(BASE), workspace=ws)
        check(r.code == 0, "wrote", r)
        st = os.stat(os.path.join(ws, "kept"))
        check((st.st_uid, st.st_gid) == (RUNNER, RUNNER), "owner is base+10001", st)
        r = run(["/bin/cat", "kept"], "--host-id-base", str(BASE), workspace=ws)
        check(r.stdout == b"data\n", "read back in a second sandbox", r)
    finally:
        shutil.rmtree(ws)


# A v2-only host (tests/vm): one cgroup a sandbox, in the unified hierarchy.
V2_ONLY = not any(" - cgroup " in line for line in open("/proc/self/mountinfo"))
RUN_CGROUPS = 1 if V2_ONLY else 3


def run_cgroup_dirs(pid):
    """The cgroup directories of `sandboxd run` process pid, one per v1
    hierarchy it uses, or its one v2 cgroup (found from its /proc/PID/cgroup;
    the sandbox cgroup is <own cgroup>/sandboxd/run-<pid namespace>-<pid>-<start
    time>; on v2 a run that moved itself to <own>/sandboxd.daemon names that)."""
    dirs = []
    with open("/proc/%d/cgroup" % pid) as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            if V2_ONLY and ctrls == "":
                own = path[:-len("/sandboxd.daemon")] if path.endswith("/sandboxd.daemon") \
                    else path
                base = os.path.join("/sys/fs/cgroup", own.lstrip("/"), "sandboxd")
            elif ctrls in ("memory", "pids", "freezer"):
                base = os.path.join("/sys/fs/cgroup", ctrls, path.lstrip("/"), "sandboxd")
            else:
                continue
            dirs += [os.path.join(base, d) for d in os.listdir(base)
                     if re.fullmatch(r"run-\d+-%d-\d+" % pid, d)] if os.path.isdir(base) else []
    return dirs


@S.case
def a_killed_runs_cgroup_is_removed_by_the_next_run():
    """SIGKILL leaves `run` no chance to remove its cgroup (its sandbox dies
    with it): the next `run` finds the owner gone and removes the leftover,
    while the cgroup of a live `run` is left alone."""
    p = subprocess.Popen([SANDBOXD, "run", "--host-id-base", str(BASE), "--", "/bin/sleep", "100"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        dirs = []
        while len(dirs) < RUN_CGROUPS and time.monotonic() < deadline:
            time.sleep(0.02)
            dirs = run_cgroup_dirs(p.pid)
        check(len(dirs) == RUN_CGROUPS,
              "the live run has its cgroup (v1: memory, pids and freezer)", dirs)
        r = run(["/bin/true"])
        check(r.code == 0, "a second run beside it", r)
        check(all(os.path.isdir(d) for d in dirs), "a live run's cgroup is kept", dirs)
    finally:
        p.kill()
        p.wait()
    check(any(os.path.isdir(d) for d in dirs), "SIGKILL left the cgroup behind", dirs)
    deadline = time.monotonic() + 10
    while pids_of_uid(RUNNER) and time.monotonic() < deadline:
        time.sleep(0.02)
    check(pids_of_uid(RUNNER) == [], "the sandbox died with its run", pids_of_uid(RUNNER))
    # Its age is its directory's ctime: made young again (a chmod to its own
    # mode), as the steps above can take more than 2 s on a slow machine (a VM).
    for d in dirs:
        os.chmod(d, os.stat(d).st_mode & 0o7777)
    r = run(["/bin/true"])
    check(r.code == 0, "a run right after", r)
    check(all(os.path.isdir(d) for d in dirs), "a cgroup younger than 2 s is never judged stale",
          dirs)
    time.sleep(2.5)
    r = run(["/bin/true"])
    check(r.code == 0, "the next run", r)
    check(not any(os.path.isdir(d) for d in dirs), "the leftover is gone",
          [d for d in dirs if os.path.isdir(d)])
    # A name of another pid namespace is never ours to judge.
    other = [re.sub(r"/run-\d+-", "/run-1-", d) for d in dirs]
    for d in other:
        os.mkdir(d)
    try:
        time.sleep(2.5)
        r = run(["/bin/true"])
        check(r.code == 0, "a run beside a foreign name", r)
        check(all(os.path.isdir(d) for d in other), "another namespace's cgroup is kept", other)
    finally:
        for d in other:
            os.rmdir(d)


S.finish()
