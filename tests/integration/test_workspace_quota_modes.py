"""The workspace quota's modes (sandbox.workspace_quota_mode: auto, loop,
project, monitor): chosen at start like the cgroup modes, reported in the
extended /runtime/status and the start line, and enforced.

Real daemons on loopback (--net none) with their own temporary state
directories. "No loop devices" (a container without them) is made for the
daemon alone: it runs in a mount namespace of its own where /dev/null is
bound over /dev/loop-control (LOOP_CTL_GET_FREE then fails as it does
without the device)."""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from sbxtest import EXTENDED, SANDBOXD, ServeDaemon, Suite, check  # noqa: E402

S = Suite("workspace_quota_modes")
TOKEN = "op-" + "0123456789abcdef0123456789abc"
_daemons = []
_dirs = []

# The daemon alone without loop devices.
NO_LOOP = ["unshare", "-m", "--propagation", "private", "sh", "-c",
           'mount --bind /dev/null /dev/loop-control && exec "$0" "$@"']


def tmpdir():
    d = tempfile.mkdtemp(prefix="sbx-wsq-")
    _dirs.append(d)
    return d


def daemon(mode=None, quota="16m", prefix=(), root=None, more=""):
    state = tmpdir()
    cfg = os.path.join(state, "config.yaml")
    with open(cfg, "w") as f:
        f.write("sandbox:\n  workspace_quota: %s\n" % quota)
        if mode:
            f.write("  workspace_quota_mode: %s\n" % mode)
        f.write(more)
        if root:
            f.write("server:\n  workspace_root: %s\n" % root)
    return ServeDaemon(state, TOKEN, config=cfg, registry=_daemons, prefix=prefix)


def status(d):
    st, b, _ = d.req("GET", "/runtime/status", headers=EXTENDED)
    check(st == 200 and isinstance(b, dict), "extended status", (st, b))
    return b.get("workspaceQuota")


def exec_(d, cmd, timeout=30):
    return d.req("POST", "/runtime/exec", {"command": cmd, "timeoutSeconds": timeout},
                 headers=EXTENDED, timeout=timeout + 20)


def case(fn):
    return S.case(fn)


@case
def auto_without_loop_devices_is_monitor_and_serves():
    """The container case: no loop devices, a kernel without project quotas
    (this one): serve starts, says monitor, and tasks run."""
    d = daemon(prefix=NO_LOOP).start(timeout=30)
    try:
        q = status(d)
        check(q and q["mode"] == "monitor" and q["enforcement"] == "monitor (weaker)",
              "auto without loop devices: monitor, reported as weaker", q)
        check("no loop devices" in q["why"], "why names the missing loop devices", q)
        check("workspace quota monitor" in d.output(whole=True), "the start line says it",
              d.output())
        st, b, _ = exec_(d, ["/bin/sh", "-c", "echo hi > f && cat f"])
        check(st == 200 and b["exitCode"] == 0 and b["stdout"] == "hi\n", "a task runs", (st, b))
        out = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True,
                             text=True).stdout
        check(d.state not in out, "no workspace image mounted", out)
    finally:
        check(d.stop() == 0, "stops with 0")


@case
def doctor_reports_the_modes():
    import json
    for prefix, want in (([], "loop"), (NO_LOOP, "monitor")):
        r = subprocess.run(prefix + [SANDBOXD, "doctor", "--json"], capture_output=True,
                           text=True, timeout=60)
        q = json.loads(r.stdout)["workspaceQuota"]
        check(q["auto"] == want and q["loop"]["available"] == (want == "loop"),
              "doctor: auto picks " + want, q)
        check(q["kernelEnforced"] == (want == "loop"), "kernel-enforced or not", q)
    r = subprocess.run(NO_LOOP + [SANDBOXD, "doctor"], capture_output=True, text=True,
                       timeout=60)
    check("auto picks:          monitor (weaker" in r.stdout, "the text says monitor, weaker",
          r.stdout)


@case
def loop_asked_for_without_loop_devices_refuses_to_start():
    d = daemon(mode="loop", prefix=NO_LOOP)
    try:
        d.start(timeout=20)
    except AssertionError as e:
        msg = str(e)
        check("workspace_quota_mode loop" in msg and "no loop devices" in msg,
              "refused, naming the mode and why", msg)
    else:
        d.stop()
        raise AssertionError("serve started in loop mode without loop devices")


@case
def bad_mode_is_refused_naming_it():
    d = daemon(mode="quotas")
    try:
        d.start(timeout=20)
    except AssertionError as e:
        check("'quotas' is not auto, loop, project or monitor" in str(e), "names the value",
              str(e))
    else:
        d.stop()
        raise AssertionError("serve started with a bad workspace_quota_mode")


@case
def auto_with_loop_devices_is_loop():
    d = daemon().start()
    try:
        q = status(d)
        check(q and q["mode"] == "loop" and q["enforcement"] == "kernel", "loop, kernel", q)
        # The kernel refuses the write past the quota: ENOSPC in the task.
        st, b, _ = exec_(d, ["/bin/sh", "-c",
                             "dd if=/dev/zero of=big bs=1M count=40 2>&1; echo rc=$?"])
        check(st == 200 and "No space left" in b["stdout"], "ENOSPC from its own filesystem",
              (st, b))
    finally:
        check(d.stop() == 0, "stops with 0")


@case
def project_mode_follows_the_kernel():
    """Project quotas on an ext4 workspace root made with -O quota,project
    and mounted with prjquota. This machine's kernel has no quota support
    (CONFIG_QUOTA unset): there the mount itself is refused and serve, asked
    for project, refuses to start naming why; on a kernel with it, the mode
    is taken and the kernel refuses the write past the quota."""
    base = tmpdir()
    img, root = os.path.join(base, "root.img"), os.path.join(base, "root")
    os.mkdir(root)
    subprocess.run(["truncate", "-s", "256M", img], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-O", "quota,project", img], check=True)
    m = subprocess.run(["mount", "-o", "loop,prjquota", img, root], capture_output=True,
                       text=True)
    try:
        d = daemon(mode="project", root=root if m.returncode == 0 else base)
        if m.returncode != 0:
            try:
                d.start(timeout=20)
            except AssertionError as e:
                check("workspace_quota_mode project" in str(e) and "quota" in str(e),
                      "refused, naming why", str(e))
            else:
                d.stop()
                raise AssertionError("project mode taken where the kernel has no quotas")
            return
        d.start()
        try:
            q = status(d)
            check(q["mode"] == "project" and q["enforcement"] == "kernel", "project", q)
            st, b, _ = exec_(d, ["/bin/sh", "-c",
                                 "dd if=/dev/zero of=big bs=1M count=40 2>&1; echo rc=$?"])
            check(st == 200 and "quota exceeded" in b["stdout"].lower(), "EDQUOT", (st, b))
        finally:
            check(d.stop() == 0, "stops with 0")
    finally:
        if m.returncode == 0:
            subprocess.run(["umount", "-l", root])


@case
def monitor_stops_the_writer_and_refuses_work_until_under():
    d = daemon(mode="monitor").start()
    try:
        q = status(d)
        check(q["mode"] == "monitor" and q["bytes"] == 16 << 20, "monitor, 16 MiB", q)
        # A writer that would write 200 MiB, 1 MiB every 50 ms: stopped well
        # before (a measure each second).
        st, b, _ = exec_(d, ["/bin/sh", "-c",
                             "i=0; while [ $i -lt 200 ]; do "
                             "dd if=/dev/zero of=f$i bs=1M count=1 2>/dev/null; "
                             "i=$((i+1)); sleep 0.05; done; echo wrote all"], timeout=60)
        check(st == 200 and b["status"] == "failed" and "over its quota" in b.get("error", ""),
              "the writer is stopped, failed, saying why", (st, b))
        check("wrote all" not in b["stdout"], "it did not write everything", b)
        # Until files are deleted, the clone takes no new task.
        st, b, _ = exec_(d, ["true"])
        check(st == 507 and "over its quota" in b["error"]["message"],
              "a new task while over: 507 naming the quota", (st, b))
        st, ls, _ = d.req("GET", "/runtime/files?path=/", headers=EXTENDED)
        check(st == 200, "the files API still lists", (st, ls))
        names = [e["name"] for e in ls["entries"]]
        check(names, "files listed", ls)
        for n in names:
            st, _, _ = d.req("DELETE", "/runtime/files?path=" + n, headers=EXTENDED)
            check(st in (200, 204), "deleted " + n, st)
        deadline = time.monotonic() + 15
        while True:
            st, b, _ = exec_(d, ["true"])
            if st == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        check(st == 200 and b["exitCode"] == 0, "back under its quota: tasks run again", (st, b))
        check("workspace over quota" in d.output(whole=True), "logged", d.output())
    finally:
        check(d.stop() == 0, "stops with 0")


@case
def monitor_ends_the_sessions_of_a_clone_over_its_quota():
    d = daemon(mode="monitor").start()
    try:
        st, b, _ = d.req("POST", "/runtime/start", {"sessionID": "w"}, headers=EXTENDED)
        check(st == 200, "session started", (st, b))
        # A writer left in the background of the session, then a task that
        # waits: both stopped once the workspace is over.
        st, b, _ = d.req("POST", "/runtime/exec", {"sessionID": "w", "command": [
            "/bin/sh", "-c", "(setsid sh -c 'i=0; while [ $i -lt 200 ]; do "
            "dd if=/dev/zero of=g$i bs=1M count=1 2>/dev/null; i=$((i+1)); sleep 0.05; "
            "done' &); echo started"]}, headers=EXTENDED)
        check(st == 200 and b["stdout"] == "started\n", "background writer", (st, b))
        st, b, _ = d.req("POST", "/runtime/exec", {"sessionID": "w", "command": ["sleep", "30"],
                                                   "timeoutSeconds": 40},
                         headers=EXTENDED, timeout=60)
        check(st == 200 and b["status"] in ("failed", "canceled") and b["exitCode"] != 0,
              "the task in the session is stopped", (st, b))
        st, s, _ = d.req("GET", "/runtime/status?sessionID=w", headers=EXTENDED)
        check(st == 200 and s["sessionLive"] is False, "the session ended", (st, s))
        check("over its quota" in d.output(whole=True), "the reason is logged", d.output())
        st, ls, _ = d.req("GET", "/runtime/files?path=/", headers=EXTENDED)
        n = len(ls["entries"])
        time.sleep(1.5)
        st, ls, _ = d.req("GET", "/runtime/files?path=/", headers=EXTENDED)
        check(len(ls["entries"]) == n and n < 60, "the writer is gone: nothing more written",
              (n, len(ls["entries"])))
    finally:
        check(d.stop() == 0, "stops with 0")


def mounted(path):
    out = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True,
                         text=True).stdout.split()
    return path in out


def wait_for(pred, timeout=15):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@case
def idle_images_are_unmounted_and_mounted_again_on_use():
    d = daemon(more="  workspace_idle_unmount: 1s\n").start()
    try:
        ws = os.path.join(d.state, "workspaces", "default", "default", "work")
        st, b, _ = exec_(d, ["/bin/sh", "-c", "echo kept > f"])
        check(st == 200 and b["exitCode"] == 0, "written", (st, b))
        check(mounted(ws), "the image is mounted while used", ws)
        check(wait_for(lambda: not mounted(ws)), "unused for 1 s: unmounted", ws)
        # A task: mounted again, off the loop, and its files are there.
        st, b, _ = exec_(d, ["cat", "f"])
        check(st == 200 and b["stdout"] == "kept\n", "the next task sees its files", (st, b))
        check(mounted(ws), "mounted again", ws)
        check(wait_for(lambda: not mounted(ws)), "unmounted again", ws)
        # The files API after an unmount.
        st, b, _ = d.req("GET", "/runtime/files?path=f", headers=EXTENDED)
        check(st == 200 and b == "kept\n", "the files API mounts it again", (st, b))
        check(wait_for(lambda: not mounted(ws)), "unmounted again", ws)
        # A live session keeps it mounted; a session started after an
        # unmount waits for the mount.
        st, b, _ = d.req("POST", "/runtime/start", {"sessionID": "s"}, headers=EXTENDED)
        check(st == 200, "a session starts on an unmounted image", (st, b))
        time.sleep(2.5)
        check(mounted(ws), "a live session keeps it mounted", ws)
        st, b, _ = d.req("POST", "/runtime/exec", {"sessionID": "s", "command": ["cat", "f"]},
                         headers=EXTENDED)
        check(st == 200 and b["stdout"] == "kept\n", "in the session: its files", (st, b))
        st, b, _ = d.req("POST", "/runtime/stop", {"sessionID": "s"}, headers=EXTENDED)
        check(st == 200, "session stopped", (st, b))
        check(wait_for(lambda: not mounted(ws)), "unmounted once the session ended", ws)
        check("workspace not" not in d.output(whole=True), "no workspace errors logged",
              d.output())
    finally:
        check(d.stop() == 0, "stops with 0")


try:
    pass
finally:
    for d in _daemons:
        try:
            d.stop()
        except Exception:  # noqa: BLE001
            pass
    for p in _dirs:
        shutil.rmtree(p, ignore_errors=True)
    S.finish()
