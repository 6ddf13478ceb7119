"""Environments with roots of their own (issue 10): `rootfs: DIR`, OCI
images unpacked by the daemon, `read_only_rootfs: false`, `mounts:` under
`sandbox.mount_roots`, and seed 004's seccomp tables stacked on the default
profile. Real daemons on loopback with --net none; every tree and image is
made here, in temporary directories (busybox-static is the environment)."""
import atexit
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from ocitest import busybox_tree  # noqa: E402
from sbxtest import EXTENDED, ServeDaemon, Suite, check  # noqa: E402

S = Suite("environments")
TOKEN = "op-" + "0123456789abcdef0123456789abc"
_daemons = []
TMP = tempfile.mkdtemp(prefix="sbx-envs-")
os.chmod(TMP, 0o755)


def execute(d, env, code, **kw):
    body = {"code": code, "env": env}
    body.update(kw)
    return d.req("POST", "/execute", body, headers=EXTENDED, timeout=60)


def daemon(config_text, name):
    state = os.path.join(TMP, "state-" + name)
    cfg = os.path.join(TMP, name + ".yaml")
    with open(cfg, "w") as f:
        f.write(config_text)
    return ServeDaemon(state, TOKEN, config=cfg, registry=_daemons)


ROOTFS = os.path.join(TMP, "rootfs")
busybox_tree(ROOTFS)
MROOT = os.path.join(TMP, "mroot")
os.makedirs(os.path.join(MROOT, "ro"))
os.chmod(MROOT, 0o755)
with open(os.path.join(MROOT, "ro", "hello"), "w") as f:
    f.write("read-only data\n")
os.symlink("/etc", os.path.join(MROOT, "link"))

CONFIG = """
sandbox:
  mount_roots: [%(mroot)s]
environments:
  bbx:
    language: shell
    rootfs: %(rootfs)s
  bbxw:
    language: shell
    rootfs: %(rootfs)s
    read_only_rootfs: false
  hostw:
    language: shell
    read_only_rootfs: false
  mnt:
    language: shell
    mounts:
      - source: "%(mroot)s/t/{{.TenantCode}}/{{.CloneID}}/{{.SessionID}}/{{.TaskID}}"
        target: /data
        writable: true
      - source: %(mroot)s/ro
        target: /ro
  esc:
    language: shell
    mounts:
      - source: %(mroot)s/link/{{.TaskID}}
        target: /data
  sc:
    language: shell
    seccomp_profile:
      default_action: SCMP_ACT_ALLOW
      syscalls:
        - names: [mkdir, mkdirat]
          action: SCMP_ACT_ERRNO
  scio:
    language: python
    seccomp_profile:
      default_action: SCMP_ACT_ALLOW
      syscalls:
        - names: [io_uring_setup, mkdir]
          action: SCMP_ACT_ALLOW
""" % {"rootfs": ROOTFS, "mroot": MROOT}

D = daemon(CONFIG, "main")


@atexit.register
def _cleanup():
    for d in _daemons:
        try:
            d.stop()
        except Exception:  # noqa: BLE001 - a daemon that failed to start
            pass
    shutil.rmtree(TMP, ignore_errors=True)


D.start()


@S.case
def rootfs_dir_is_the_tasks_root():
    st, b, _ = execute(D, "bbx", "cat /usr/share/marker; cat /etc/os-release; "
                       "test -e /usr/bin/python3 && echo HOST-USR; ls /bin | head -3")
    check(st == 200 and b["return_code"] == 0, "task ran", b)
    check("from-the-environment" in b["stdout"], "sees the environment's /usr", b)
    check("ID=bbx-test" in b["stdout"], "its /etc entries", b)
    check("HOST-USR" not in b["stdout"], "not the host's /usr", b)


@S.case
def read_only_rootfs_by_default():
    st, b, _ = execute(D, "bbx", "echo x > /usr/x && echo WROTE")
    check(st == 200 and "WROTE" not in b["stdout"] and b["return_code"] != 0,
          "/usr is read-only", b)


@S.case
def writable_rootfs_is_an_overlay_discarded_with_the_sandbox():
    st, b, _ = execute(D, "bbxw", "echo hi > /usr/written && cat /usr/written; "
                       "cat /usr/share/marker")
    check(st == 200 and b["return_code"] == 0 and "hi" in b["stdout"] and
          "from-the-environment" in b["stdout"], "a write to /usr succeeds", b)
    check(not os.path.exists(os.path.join(ROOTFS, "usr", "written")),
          "the environment's tree is untouched")
    st, b, _ = execute(D, "bbxw", "test -e /usr/written && echo STILL || echo GONE")
    check(st == 200 and "GONE" in b["stdout"], "gone in the next task", b)
    st, b, _ = execute(D, "hostw", "echo hi > /usr/written2 && echo OK; ls /usr/bin | head -1")
    check(st == 200 and "OK" in b["stdout"], "over the host's /usr too", b)
    check(not os.path.exists("/usr/written2"), "the host's /usr untouched")


@S.case
def mounts_made_per_task_under_their_root():
    st, b, _ = execute(D, "mnt", "echo out > /data/f && cat /data/f; cat /ro/hello; "
                       "echo no > /ro/x || echo RO-REFUSED")
    check(st == 200 and "out" in b["stdout"] and "read-only data" in b["stdout"] and
          "RO-REFUSED" in b["stdout"], "writable and read-only mounts", b)
    made = []
    for d, _, files in os.walk(os.path.join(MROOT, "t")):
        made += [os.path.join(d, f) for f in files]
    check(len(made) == 1 and open(made[0]).read() == "out\n", "the per-task directory", made)
    parts = os.path.relpath(made[0], os.path.join(MROOT, "t")).split(os.sep)
    check(parts[:3] == ["default", "default", "default"] and len(parts[3]) >= 32,
          "tenant, clone, session and task id filled in", parts)
    st = os.stat(os.path.dirname(made[0]))
    check(st.st_uid != 0, "the writable directory is the task's host user's", st.st_uid)
    check(not os.path.exists(os.path.join(MROOT, "ro", "x")), "nothing written to /ro")


@S.case
def mount_through_a_symlink_is_refused():
    st, b, _ = execute(D, "esc", "ls /data; echo RAN")
    check(not (st == 200 and b.get("return_code") == 0 and "RAN" in b.get("stdout", "")),
          "no task through the symlink", b)
    check(b.get("return_code") == 125, "a setup failure", b)
    log = D.wait_output(lambda t: "a\\x20symlink" in t)
    check("a\\x20symlink" in log, "the reason is logged", log[-1500:])
    check(not any(n.isalnum() and len(n) > 20 for n in os.listdir("/etc")),
          "nothing made in the host's /etc")


@S.case
def mount_outside_the_roots_refused_at_start():
    bad = daemon("sandbox:\n  mount_roots: [%s]\nenvironments:\n  m2:\n    language: shell\n"
                 "    mounts:\n      - {source: \"/etc/{{.TaskID}}\", target: /data}\n" % MROOT,
                 "badmount")
    try:
        bad.start()
        check(False, "the daemon started")
    except AssertionError as e:
        check("environments.m2.mounts[0].source" in str(e) and "mount_roots" in str(e),
              "the key is named", str(e)[-600:])


@S.case
def seccomp_table_narrows():
    st, b, _ = execute(D, "sc", "mkdir /tmp/d && echo MADE || echo REFUSED; echo still")
    check(st == 200 and "REFUSED" in b["stdout"] and "still" in b["stdout"],
          "mkdir refused by the table", b)
    st, b, _ = execute(D, "shell", "mkdir /tmp/d && echo MADE")
    check(st == 200 and "MADE" in b["stdout"], "other environments unchanged", b)


@S.case
def seccomp_table_cannot_reopen_io_uring():
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "buf = ctypes.create_string_buffer(120)\n"
            "r = libc.syscall(425, 4, buf)\nprint('io_uring', r, ctypes.get_errno())\n")
    st, b, _ = execute(D, "scio", code)
    check(st == 200 and "io_uring -1 1" in b["stdout"], "io_uring_setup still EPERM", b)


@S.case
def unknown_syscall_refused_at_start():
    bad = daemon("environments:\n  s2:\n    language: shell\n    seccomp_profile:\n"
                 "      default_action: SCMP_ACT_ALLOW\n      syscalls:\n"
                 "        - {names: [read, not_a_syscall], action: SCMP_ACT_ERRNO}\n", "badsc")
    try:
        bad.start()
        check(False, "the daemon started")
    except AssertionError as e:
        check("not_a_syscall" in str(e) and "seccomp_profile" in str(e), "named", str(e)[-600:])


@S.case
def refused_inside_a_live_session():
    a = dict(EXTENDED, **{"X-Tenant-Code": "sess", "X-Clone-Id": "c1"})
    st, b, _ = D.req("POST", "/runtime/start", {"sessionID": "live"}, headers=a)
    check(st == 200, "session started", (st, b))
    try:
        st, b, _ = D.req("POST", "/runtime/exec", {"sessionID": "live", "language": "bbx",
                                                   "code": "echo RAN"}, headers=a)
        check(st == 400 and "bbx" in b["error"]["message"] and
              "live" in b["error"]["message"], "refused, naming both", (st, b))
        st, b, _ = D.req("POST", "/runtime/exec", {"sessionID": "live", "language": "shell",
                                                   "code": "echo RAN"}, headers=a)
        check(st == 200 and b["stdout"] == "RAN\n", "a plain environment runs there", (st, b))
    finally:
        D.req("POST", "/runtime/stop", {"sessionID": "live"}, headers=a)


@S.case
def capabilities_add_refused_by_name():
    st, b, _ = D.req("POST", "/execute", {"code": "true", "env": "shell",
                                          "capabilities": {"add": ["NET_ADMIN"]}})
    check(st == 400 and "NET_ADMIN" in b["error"]["message"], "named", b)
    st, b, _ = D.req("POST", "/execute", {"code": "true", "env": "shell",
                                          "capabilities": {"drop": ["ALL"]}})
    check(st == 200, "drop ALL accepted", b)


S.finish()
