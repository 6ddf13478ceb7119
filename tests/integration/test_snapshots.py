"""Workspace snapshots end to end: a real daemon on loopback, real HTTP, real
files in the clones' workspaces (written directly on the host, as root, the
way a task's files land there): round trips of every file type, rollback
against planted symlinks, refusals while tasks run, a full store, retention,
clone isolation, bad input, and the loop answering during a large snapshot."""
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from sbxtest import EXTENDED, ServeDaemon, Suite, check  # noqa: E402

S = Suite("snapshots")
TOKEN = "op-" + "0123456789abcdef0123456789abc"
ACME_TOKEN = "acme-" + "fedcba9876543210fedcba98765"
TEST_TIMEOUT = 120
TMP = tempfile.mkdtemp(prefix="sbx-snap-")
_daemons = []
_mounts = []


class Daemon(ServeDaemon):
    def __init__(self, state_dir, config=None, extra=()):
        super().__init__(state_dir, TOKEN, config=config, extra=extra, registry=_daemons)

    def req(self, method, path, body=None, token=TOKEN, headers=None, timeout=60):
        """sbxtest's request with this file's token and our answers on the
        original's routes (EXTENDED)."""
        return super().req(method, path, body, token=token, headers={**EXTENDED, **(headers or {})},
                           timeout=timeout)

    def workspace(self, clone="default", tenant="default"):
        """The clone's workspace on the host, mounted (a file request mounts it)."""
        q = "tenantCode=%s&cloneId=%s" % (tenant, clone)
        st, b, _ = self.req("PUT", "/runtime/files?path=.keep&" + q, body=b"")
        check(st == 201, "workspace made", (st, b))
        return os.path.join(self.state, "workspaces", tenant, clone, "work")

    def snap(self, message="", clone="default", tenant="default", want=(200, 201)):
        st, b, _ = self.req("POST", "/workspace/snapshots",
                            {"message": message, "cloneId": clone, "tenantCode": tenant})
        check(st in want, "snapshot answered %s" % (want,), (st, b))
        return b

    def rollback(self, sid, clone="default", tenant="default"):
        return self.req("POST", "/workspace/rollback",
                        {"snapshotId": sid, "cloneId": clone, "tenantCode": tenant})

    def listing(self, clone="default", tenant="default"):
        st, b, _ = self.req("GET", "/workspace/snapshots?cloneId=%s&tenantCode=%s"
                            % (clone, tenant))
        check(st == 200, "list answered", (st, b))
        return b


def stop_all():
    for d in _daemons:
        try:
            d.stop()
        except Exception:  # noqa: BLE001
            pass


def cleanup():
    stop_all()
    for m in _mounts:
        subprocess.run(["umount", "-l", m], check=False)
    shutil.rmtree(TMP, True)


def _alarm(signum, frame):
    raise TimeoutError("test case exceeded %ss" % TEST_TIMEOUT)


signal.signal(signal.SIGALRM, _alarm)


def case(fn):
    def wrapped():
        signal.alarm(TEST_TIMEOUT)
        try:
            fn()
        finally:
            signal.alarm(0)
    wrapped.__name__ = fn.__name__
    return S.case(wrapped)


def write(path, data, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    os.chmod(path, mode)


def tree(root):
    """Everything under root but skills/: {path: (kind, mode, content|target)}
    and the groups of hard links (paths sharing an inode)."""
    out, inodes = {}, {}
    for dirpath, dirs, files in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel == ".":
            dirs[:] = [x for x in dirs if x != "skills"]
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            r = os.path.normpath(os.path.join(rel, name))
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[r] = ("l", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[r] = ("d", stat.S_IMODE(st.st_mode))
            else:
                with open(p, "rb") as f:
                    out[r] = ("f", stat.S_IMODE(st.st_mode), hashlib.sha256(f.read()).hexdigest())
                if st.st_nlink > 1:
                    inodes.setdefault(st.st_ino, []).append(r)
    links = sorted(sorted(v) for v in inodes.values())
    return out, links


def clear(root):
    for name in os.listdir(root):
        if name in ("skills",):
            continue
        p = os.path.join(root, name)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.unlink(p)


CFG = os.path.join(TMP, "main.yaml")
with open(CFG, "w") as f:
    f.write("""\
server:
  tokens:
    - {name: acme-agent, token: "%s", tenant: acme}
retention:
  snapshots: 4
  snapshot_max_bytes: 0
sandbox:
  workspace_quota: 64m
""" % ACME_TOKEN)

D = Daemon(os.path.join(TMP, "main"), config=CFG)
try:
    D.start()
except Exception as e:  # noqa: BLE001
    print("FAIL start: %s" % e)
    cleanup()
    sys.exit(1)


@case
def round_trip_of_every_file_type():
    ws = D.workspace("rt")
    write(ws + "/plain.txt", "hello\n")
    write(ws + "/bin/run.sh", "#!/bin/sh\necho hi\n", 0o755)
    write(ws + "/empty", b"")
    write(ws + "/a/b/c/deep.txt", "deep\n", 0o600)
    os.chmod(ws + "/a/b", 0o711)
    write(ws + "/\u6587\u4ef6/\u00e9t\u00e9 \U0001F600.md", "unicode\n")
    os.symlink("../plain.txt", ws + "/a/rel-link")
    os.symlink("/etc/passwd", ws + "/abs-link")
    os.symlink("missing", ws + "/dangling")
    os.link(ws + "/plain.txt", ws + "/a/hard.txt")
    write(ws + "/skills/mine/SKILL.md", "v1\n")
    before, links = tree(ws)
    check(links == [[".keep"]] or links == [["a/hard.txt", "plain.txt"]] or links, "links seen")
    s = D.snap("first", clone="rt")
    check(s["created"] is True and len(s["id"]) == 64, "created", s)
    check(s["fileCount"] >= 8 and s["message"] == "first", "counts and message", s)
    check(isinstance(s["timestamp"], str) and s["timestamp"].endswith("Z"), "RFC 3339 time", s)
    # The same contents again: nothing added, the same id.
    again = D.snap("again", clone="rt", want=(200,))
    check(again["created"] is False and again["id"] == s["id"], "identical adds nothing", again)
    # Change everything.
    write(ws + "/plain.txt", "changed\n")
    os.chmod(ws + "/bin/run.sh", 0o644)
    os.unlink(ws + "/a/rel-link")
    write(ws + "/a/rel-link", "now a file\n")
    shutil.rmtree(ws + "/a/b")
    os.unlink(ws + "/dangling")
    os.symlink("elsewhere", ws + "/dangling")
    write(ws + "/new/added.txt", "added\n")
    write(ws + "/skills/mine/SKILL.md", "v2\n")
    st, d, _ = D.req("GET", "/workspace/snapshots/%s/diff?cloneId=rt&path=plain.txt" % s["id"])
    check(st == 200, "diff answered", (st, d))
    paths = lambda k: sorted(x["path"] for x in d[k])  # noqa: E731
    check("new/added.txt" in paths("added") and "new" in paths("added"), "added listed", d)
    check("a/b/c/deep.txt" in paths("deleted"), "deleted listed", d)
    check({"plain.txt", "bin/run.sh", "a/rel-link", "dangling"} <= set(paths("modified")),
          "modified listed", d)
    check(not any(p.startswith("skills") for k in ("added", "modified", "deleted")
                  for p in paths(k)), "skills/ is left out", d)
    check("-hello" in d["file"]["diff"] and "+changed" in d["file"]["diff"], "unified diff", d)
    st, b, _ = D.rollback(s["id"], clone="rt")
    check(st == 200 and b == {"success": True}, "rollback {success: true}", (st, b))
    after, links2 = tree(ws)
    check(after == before, "the tree is back as it was",
          {k: (before.get(k), after.get(k)) for k in set(before) | set(after)
           if before.get(k) != after.get(k)})
    check(["a/hard.txt", "plain.txt"] in links2, "hard links are links again", links2)
    with open(ws + "/skills/mine/SKILL.md") as f:
        check(f.read() == "v2\n", "skills/ untouched by a rollback")
    uid = os.lstat(ws).st_uid
    check(all(os.lstat(os.path.join(ws, p)).st_uid == uid for p in after), "owned by the clone")
    lst = D.listing("rt")
    check(lst["current"] == s["id"] and [x["id"] for x in lst["snapshots"]] == [s["id"]],
          "index shape", lst)
    check(set(lst["snapshots"][0]) == {"id", "timestamp", "message", "fileCount", "size"},
          "the original's keys", lst)


@case
def rollback_never_follows_a_planted_symlink():
    ws = D.workspace("plant")
    host = os.path.join(TMP, "host-dir")
    os.makedirs(host, exist_ok=True)
    write(host + "/secret.txt", "host data\n")
    write(host + "/inner.txt", "host inner\n")
    write(ws + "/sub/inner.txt", "ws inner\n")
    write(ws + "/secret.txt", "ws data\n")
    s = D.snap(clone="plant")
    shutil.rmtree(ws + "/sub")
    os.symlink(host, ws + "/sub")
    os.unlink(ws + "/secret.txt")
    os.symlink(host + "/secret.txt", ws + "/secret.txt")
    st, b, _ = D.rollback(s["id"], clone="plant")
    check(st == 200, "rollback done", (st, b))
    with open(host + "/secret.txt") as f:
        check(f.read() == "host data\n", "the host file was not written through the link")
    with open(host + "/inner.txt") as f:
        check(f.read() == "host inner\n", "the host dir was not written through the link")
    check(sorted(os.listdir(host)) == ["inner.txt", "secret.txt"], "nothing added on the host")
    check(not os.path.islink(ws + "/sub") and os.path.isdir(ws + "/sub"), "sub a dir again")
    check(not os.path.islink(ws + "/secret.txt"), "secret.txt a file again")
    with open(ws + "/sub/inner.txt") as f:
        check(f.read() == "ws inner\n", "its content restored")


@case
def running_tasks_refuse_snapshots_and_rollbacks():
    ws = D.workspace("busy")
    s = D.snap(clone="busy")
    st, t, _ = D.req("POST", "/runtime/tasks", {
        "cloneId": "busy",
        "command": ["sh", "-c", "while :; do echo x >> /workspace/log; sleep 0.05; done"],
        "timeoutSeconds": 60})
    check(st == 202, "task started", (st, t))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not os.path.exists(ws + "/log"):
        time.sleep(0.05)
    check(os.path.exists(ws + "/log"), "the task writes")
    st, b, _ = D.rollback(s["id"], clone="busy")
    check(st == 409 and b["error"]["code"] == "conflict", "rollback refused: 409", (st, b))
    st, b, _ = D.req("POST", "/workspace/snapshots", {"cloneId": "busy"})
    check(st == 409 and "task" in b["error"]["message"], "snapshot refused: 409", (st, b))
    D.req("POST", "/runtime/tasks/%s/cancel" % t["id"])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        st, b, _ = D.rollback(s["id"], clone="busy")
        if st != 409:
            break
        time.sleep(0.1)
    check(st == 200, "rollback once the task ended", (st, b))
    check(not os.path.exists(ws + "/log"), "the log is gone, as at the snapshot")
    # While a rollback runs, the clone's tasks are refused (never raced).
    write(ws + "/big", os.urandom(24 << 20))
    big = D.snap(clone="busy")
    os.unlink(ws + "/big")
    res = {}
    th = threading.Thread(target=lambda: res.setdefault("rb", D.rollback(big["id"], "busy")))
    th.start()
    seen = files = None
    while th.is_alive():
        # Once the rollback is under way (file requests get 409), a task too.
        st, b, _ = D.req("GET", "/runtime/files?path=.keep&cloneId=busy")
        if st == 409:
            files = b
            st, b, _ = D.req("POST", "/runtime/tasks", {"cloneId": "busy", "command": ["true"]})
            seen = (st, b)
            break
        time.sleep(0.002)
    th.join(60)
    check(res["rb"][0] == 200, "the rollback went through", res)
    if files is None:
        print("     (the rollback ended before a request reached it)")
    else:
        check("rollback" in files["error"]["message"], "a file request names the rollback", files)
        check(seen[0] == 409 and "rollback" in seen[1]["error"]["message"],
              "a task of the clone is refused during the rollback", seen)


@case
def second_clone_and_other_tenants_cannot_reach_snapshots():
    ws = D.workspace("owner")
    write(ws + "/mine.txt", "private\n")
    s = D.snap(clone="owner")
    D.workspace("other")
    st, b, _ = D.req("GET", "/workspace/snapshots/%s/diff?cloneId=other" % s["id"])
    check(st == 404, "another clone cannot diff it", (st, b))
    st, b, _ = D.rollback(s["id"], clone="other")
    check(st == 404, "another clone cannot restore it", (st, b))
    check(not os.path.exists(os.path.join(D.state, "workspaces/default/other/work/mine.txt")),
          "nothing of the first clone landed in the second")
    st, b, _ = D.req("DELETE", "/workspace/snapshots/%s?cloneId=other" % s["id"])
    check(st == 404, "another clone cannot delete it", (st, b))
    check(D.listing("other")["snapshots"] == [], "another clone lists none")
    st, b, _ = D.req("GET", "/workspace/snapshots?cloneId=owner&tenantCode=default",
                     token=ACME_TOKEN)
    check(st == 403, "a token of another tenant is refused", (st, b))
    st, b, _ = D.req("GET", "/workspace/snapshots?cloneId=owner&tenantCode=acme",
                     token=ACME_TOKEN)
    check(st == 200 and b["snapshots"] == [], "the same clone id in another tenant is another",
          (st, b))
    st, b, _ = D.req("GET", "/workspace/snapshots?cloneId=owner", token=None)
    check(st == 401, "a token is needed", (st, b))


@case
def bad_ids_and_paths_are_json_errors():
    D.workspace("bad")
    s = D.snap(clone="bad")
    cases = [
        ("GET", "/workspace/snapshots/..%2F..%2Fetc/diff?cloneId=bad", None, (400, 404)),
        ("GET", "/workspace/snapshots/ABC/diff?cloneId=bad", None, (400,)),
        ("GET", "/workspace/snapshots/%s/diff?cloneId=bad" % ("0" * 64), None, (404,)),
        ("GET", "/workspace/snapshots/%s/diff?cloneId=bad&against=x" % s["id"], None, (400,)),
        ("GET", "/workspace/snapshots/%s/diff?cloneId=bad&path=../../etc/passwd" % s["id"],
         None, (400,)),
        ("DELETE", "/workspace/snapshots/%s?cloneId=bad" % ("f" * 63), None, (400,)),
        ("POST", "/workspace/rollback", {"snapshotId": "../../x", "cloneId": "bad"}, (400,)),
        ("POST", "/workspace/rollback", {"snapshotId": "a" * 64, "cloneId": "bad"}, (404,)),
        ("POST", "/workspace/rollback", {"cloneId": "bad"}, (400,)),
        ("POST", "/workspace/snapshots", {"message": 5, "cloneId": "bad"}, (400,)),
        ("POST", "/workspace/snapshots", {"nope": 1, "cloneId": "bad"}, (400,)),
        ("POST", "/workspace/snapshots", "{not json", (400,)),
        ("POST", "/workspace/snapshots", {"cloneId": "../x"}, (400,)),
        ("POST", "/runtime/start", {"snapshotId": "zz", "cloneId": "bad"}, (400,)),
        ("POST", "/runtime/start", {"snapshotId": "a" * 64, "cloneId": "bad"}, (404,)),
        ("POST", "/runtime/stop", {"snapshotId": s["id"], "cloneId": "bad"}, (400,)),
    ]
    for method, path, body, want in cases:
        st, b, _ = D.req(method, path, body)
        check(st in want and isinstance(b, dict) and b["error"]["code"] and b["error"]["message"],
              "%s %s -> %s JSON error" % (method, path, want), (st, b))
    # A text diff is bounded: a side over 1 MiB is said, not sent.
    ws = D.workspace("bad")
    write(ws + "/big.log", "line\n" * (300 << 10))
    big = D.snap(clone="bad")["id"]
    write(ws + "/big.log", "other\n" * (300 << 10))
    st, b, _ = D.req("GET", "/workspace/snapshots/%s/diff?cloneId=bad&path=big.log" % big)
    check(st == 200 and b["file"]["diff"] is None and "1048576" in b["file"]["reason"]
          and [x["path"] for x in b["modified"]] == ["big.log"], "a large file's diff", (st, b))


@case
def retention_keeps_four_and_collects_blobs():
    ws = D.workspace("ret")
    ids = []
    for i in range(6):
        write(ws + "/f.txt", "version %d\n" % i + "x" * 1000)
        ids.append(D.snap("v%d" % i, clone="ret")["id"])
    lst = D.listing("ret")
    check([x["id"] for x in lst["snapshots"]] == ids[::-1][:4], "the newest four, newest first",
          lst)
    check(lst["current"] == ids[-1], "current is the last", lst)
    blobs = os.path.join(D.state, "snapshots", "default", "blobs")
    names = {d + n for d in os.listdir(blobs) for n in os.listdir(os.path.join(blobs, d))}
    old = {hashlib.sha256(("version %d\n" % i + "x" * 1000).encode()).hexdigest() for i in (0, 1)}
    kept = {hashlib.sha256(("version %d\n" % i + "x" * 1000).encode()).hexdigest()
            for i in (2, 3, 4, 5)}
    check(not (old & names), "the pruned snapshots' contents are collected")
    check(kept <= names, "the kept snapshots' contents stay")
    st, b, _ = D.req("DELETE", "/workspace/snapshots/%s?cloneId=ret" % ids[2])
    check(st == 200 and b["ok"] and b["blobsRemoved"] == 1, "delete collects its content",
          (st, b))
    st, b, _ = D.rollback(ids[2], clone="ret")
    check(st == 404, "a deleted snapshot is gone", (st, b))


@case
def age_and_size_bounds():
    cfg = os.path.join(TMP, "age.yaml")
    with open(cfg, "w") as f:
        f.write("retention:\n  snapshot_max_age: 1s\n  snapshot_max_bytes: 1m\n")
    d = Daemon(os.path.join(TMP, "age"), config=cfg).start()
    try:
        ws = d.workspace()
        write(ws + "/a", "a")
        first = d.snap()["id"]
        time.sleep(1.5)
        write(ws + "/a", "b")
        second = d.snap()["id"]
        ids = [x["id"] for x in d.listing()["snapshots"]]
        check(ids == [second] and first not in ids, "older than max_age: pruned", ids)
        write(ws + "/big", os.urandom(2 << 20))
        st, b, _ = d.req("POST", "/workspace/snapshots", {})
        check(st == 413 and "retention.snapshot_max_bytes" in b["error"]["message"],
              "a workspace above max_bytes is refused (413)", (st, b))
        check([x["id"] for x in d.listing()["snapshots"]] == [second], "nothing added")
    finally:
        d.stop()


@case
def full_store_and_full_workspace():
    store = os.path.join(TMP, "small-store")
    os.makedirs(store)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", store], check=True)
    _mounts.append(store)
    cfg = os.path.join(TMP, "full.yaml")
    with open(cfg, "w") as f:
        f.write("server:\n  snapshot_dir: %s\nsandbox:\n  workspace_quota: 32m\n"
                "retention:\n  snapshot_max_bytes: 0\n" % store)
    d = Daemon(os.path.join(TMP, "full"), config=cfg).start()
    try:
        ws = d.workspace()
        write(ws + "/small.txt", "small\n")
        small = d.snap()["id"]
        write(ws + "/big.bin", os.urandom(8 << 20))
        st, b, _ = d.req("POST", "/workspace/snapshots", {})
        check(st == 507 and b["error"]["code"] == "insufficient_storage",
              "a full store is 507", (st, b))
        check([x["id"] for x in d.listing()["snapshots"]] == [small], "the index unchanged")
        used = shutil.disk_usage(store).used
        check(used < 1 << 20, "no partial contents left behind (%d bytes used)" % used)
        # A full workspace: the snapshot is outside its quota, and a rollback
        # that cannot fit (each file is written beside the one it replaces)
        # is refused before anything changes.
        os.unlink(ws + "/big.bin")
        d.req("DELETE", "/workspace/snapshots/%s" % small)
        for name in ("x.bin", "y.bin"):
            write(ws + "/" + name, os.urandom(11 << 20))
        st, b, _ = d.req("POST", "/workspace/snapshots", {})
        check(st == 507, "(the 4 MiB store cannot take them either)", (st, b))
        d.stop()
        with open(cfg, "w") as f:
            f.write("sandbox:\n  workspace_quota: 32m\nretention:\n  snapshot_max_bytes: 0\n")
        d.start()
        first = d.snap()["id"]
        for name in ("x.bin", "y.bin"):
            write(ws + "/" + name, os.urandom(11 << 20))
        before = {n: hashlib.sha256(open(ws + "/" + n, "rb").read()).hexdigest()
                  for n in ("x.bin", "y.bin")}
        st, b, _ = d.rollback(first, clone="default")
        check(st == 507 and "nothing was changed" in b["error"]["message"],
              "a rollback that cannot fit is 507", (st, b))
        after = {n: hashlib.sha256(open(ws + "/" + n, "rb").read()).hexdigest()
                 for n in ("x.bin", "y.bin")}
        check(after == before, "and changed nothing")
        os.unlink(ws + "/y.bin")
        st, b, _ = d.rollback(first, clone="default")
        check(st == 200, "fits once room is made", (st, b))
        # A workspace filled to ENOSPC is still snapshotted: the store is
        # outside its quota.
        fd = os.open(ws + "/fill", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while True:
                os.write(fd, b"\1" * (1 << 20))
        except OSError as e:
            check(e.errno == 28, "the workspace is full (ENOSPC)", e)
        finally:
            os.close(fd)
        full = d.snap(want=(201,))
        check(full["fileCount"] >= 3 and full["size"] > 20 << 20, "all of it", full)
    finally:
        d.stop()


@case
def session_starts_from_a_snapshot():
    ws = D.workspace("sess")
    write(ws + "/state.txt", "at the snapshot\n")
    s = D.snap(clone="sess")
    write(ws + "/state.txt", "later\n")
    st, b, _ = D.req("POST", "/runtime/start", {"cloneId": "sess", "sessionId": "s1",
                                                "snapshotId": s["id"]})
    check(st == 200 and b["ok"], "the session started", (st, b))
    try:
        with open(ws + "/state.txt") as f:
            check(f.read() == "at the snapshot\n", "from the snapshot's workspace")
        st, b, _ = D.req("POST", "/workspace/snapshots", {"cloneId": "sess"})
        check(st == 409 and "session" in b["error"]["message"], "a live session: 409", (st, b))
    finally:
        D.req("POST", "/runtime/stop", {"cloneId": "sess", "sessionId": "s1"})


@case
def the_api_answers_during_a_large_snapshot():
    ws = D.workspace("large")
    chunk = os.urandom(1 << 20)
    for i in range(48):
        write(ws + "/d%d/f%02d.bin" % (i % 8, i), chunk[i:] + chunk[:i])
    res = {}
    t0 = time.monotonic()
    th = threading.Thread(target=lambda: res.setdefault("s", D.snap(clone="large")))
    th.start()
    lat = []
    while th.is_alive():
        t = time.monotonic()
        st, _, _ = D.req("GET", "/healthz", token=None)
        lat.append(time.monotonic() - t)
        check(st == 200, "healthz answers")
        time.sleep(0.01)
    th.join()
    took = time.monotonic() - t0
    check(res["s"]["fileCount"] >= 48, "the snapshot was taken", res)
    print("     snapshot %.2fs; %d /healthz during it, max %.1f ms"
          % (took, len(lat), 1000 * max(lat or [0])))
    check(len(lat) >= 3, "the API answered during the snapshot", lat)
    check(max(lat) < 1.0, "no answer waited a second", lat)


@case
def the_stat_cache_is_not_fooled_by_a_reset_mtime():
    ws = D.workspace("cache")
    write(ws + "/same-size.txt", "aaaa\n")
    old = os.stat(ws + "/same-size.txt")
    time.sleep(2.2)  # older than the cache's 2 s: the snapshot caches it
    first = D.snap(clone="cache")["id"]
    check(D.snap(clone="cache", want=(200,))["id"] == first, "unchanged: the same id")
    with open(ws + "/same-size.txt", "r+b") as f:
        f.write(b"bbbb\n")
    os.utime(ws + "/same-size.txt", ns=(old.st_atime_ns, old.st_mtime_ns))
    check(os.stat(ws + "/same-size.txt").st_mtime_ns == old.st_mtime_ns, "mtime put back")
    second = D.snap(clone="cache", want=(201,))
    check(second["id"] != first, "the new content is seen (ctime moved)", second)
    st, d, _ = D.req("GET", "/workspace/snapshots/%s/diff?cloneId=cache&against=%s"
                     % (first, second["id"]))
    check(st == 200 and [x["path"] for x in d["modified"]] == ["same-size.txt"], "diff", d)


@case
def sandboxctl_snapshot_commands():
    ws = D.workspace("cli")
    ctl = os.path.join(os.path.dirname(os.environ["SANDBOXD"]), "sandboxctl")
    env = dict(os.environ, SANDBOX_URL="http://127.0.0.1:%d" % D.port, SANDBOX_TOKEN=TOKEN,
               SANDBOX_CLONE_ID="cli")

    def run(*args, rc=0):
        p = subprocess.run([ctl, "snapshot"] + list(args), env=env, capture_output=True,
                           text=True, timeout=60)
        check(p.returncode == rc, "sandboxctl snapshot %s exits %d" % (" ".join(args), rc),
              (p.returncode, p.stdout, p.stderr))
        return p.stdout + p.stderr

    write(ws + "/notes.txt", "one\n")
    out = run("create", "-m", "first")
    check(out.startswith("created "), "create prints the id", out)
    sid = out.split()[1]
    check("unchanged " + sid in run("create"), "unchanged the second time")
    write(ws + "/notes.txt", "two\n")
    check(sid[:12] in run("list") and "first" in run("list"), "list shows it")
    out = run("diff", sid, "notes.txt")
    check("~ notes.txt" in out and "-one" in out and "+two" in out, "diff", out)
    check("rolled back" in run("rollback", sid), "rollback")
    with open(ws + "/notes.txt") as f:
        check(f.read() == "one\n", "the workspace is back")
    check("not a snapshot id" in run("rollback", "../etc", rc=2), "a bad id is a usage error")
    check("404" in run("rm", "0" * 64, rc=1), "an unknown id is the daemon's 404")
    check("deleted" in run("rm", sid), "rm")
    check(json.loads(run("list", "--json"))["snapshots"] == [], "none left")


try:
    pass
finally:
    rc = D.stop()
    cleanup()
if rc != 0:
    print("FAIL daemon exit status %r: %s" % (rc, D.output()))
    S.failed += 1
S.finish()
