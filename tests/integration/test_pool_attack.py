"""The warm pool serving any clone, attacked (exec/pool.c, isolate/attach.c):
a daemon with only two pool host id ranges, so one range not given back
shows at once as a miss.

Checked: whatever a task does to make files in its attached workspace
(mkdir, a setgid directory, a hard link, rename, chown to itself, a fifo, a
symlink, a file made by a background process) they are stored with the
clone's host ids, never the pool's; many clones' first tasks, tasks
canceled or timed out around their attach, and tasks whose command fails
all give their range back (the next new clone's first task is still an
any-clone hit); the spawner holds no more fds after many attaches than its
bounded user namespace cache; and after the daemon's stop in the middle of
a burst of takes no process, cgroup or mount of it is left."""
import glob
import os
import re
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sbxtest import ServeDaemon, Suite, check, config_file  # noqa: E402

S = Suite("pool_attack")
TOKEN = "attack-" + "0123456789abcdef0123456789ab"
TMP = tempfile.mkdtemp(prefix="sbx-pool-attack-")
RANGE = 65536
# The highest base that leaves room for exactly two pool ranges
# (runtime/workspace.c rt_pool_ids: 60000 clone ranges, then the pool's).
BASE = (65536 - 60000 - 3) * RANGE
POOL_FIRST = BASE + 60000 * RANGE


class Daemon(ServeDaemon):
    extended_by_default = True
    req_timeout = 30


def config(name, text):
    return config_file(TMP, name, text)


CONF = ("sandbox:\n  network_policy: none\n  workspace_quota_mode: monitor\n"
        "pool:\n  max_idle: 2\n  idle_timeout: 60s\n")
D = Daemon(os.path.join(TMP, "d"), TOKEN, config=config("d.yaml", CONF))
D.host_id_base = BASE
D.start()


def status(d=D):
    st, b, _ = d.req("GET", "/runtime/status")
    check(st == 200 and "pool" in b, "/runtime/status has pool", b)
    return b["pool"]


def settle(d=D, timeout=30):
    """Nothing building, no task running, at least one idle (both ranges
    free again once every task is released)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        p = status(d)
        # counts that moved meanwhile: a take still being answered
        now = (p["hits"], p["misses"], p["built"])
        if p["idle"] >= 1 and not p["building"] and now == last:
            return p
        last = now
        time.sleep(0.1)
    raise AssertionError("the pool did not settle in %ss: %r" % (timeout, status(d)))


def hdr(clone):
    return {"X-Tenant-Code": "atk", "X-Clone-Id": clone}


def run(body, clone, d=D):
    st, b, _ = d.req("POST", "/runtime/exec", body, headers=hdr(clone), timeout=60)
    check(st == 200, "exec answers 200", (st, b))
    return b


def any_hit(body, clone):
    """body run as an any-clone hit (checked by the counter)."""
    settle()
    before = status()["anyCloneHits"]
    b = run(body, clone)
    check(status()["anyCloneHits"] == before + 1, "an any-clone hit for " + clone,
          (body, status(), b))
    return b


def host_ids(path):
    st = os.lstat(path)
    return st.st_uid, st.st_gid


def workspace(clone):
    ws = os.path.join(D.state, "workspaces", "atk", clone, "work")
    check(os.path.isdir(ws), "the clone's workspace dir", ws)
    return ws


def in_pool_region(i):
    return POOL_FIRST <= i < POOL_FIRST + 2 * RANGE


@S.case
def every_way_of_making_a_file_stores_the_clones_ids():
    # the first task (a hit: the pool is primed by a task of another clone)
    run({"command": ["true"]}, "prime")
    script = r"""
set -e
cd /workspace
mkdir d sg; chmod 2775 sg 2>/dev/null || true; touch sg/in; mkdir sg/sub
echo a > f; ln f hard; mv f renamed; chown $(id -u):$(id -g) renamed
mkfifo fifo; ln -s renamed link; cp -p renamed copy
mkdir -p deep/a/b/c && echo x > deep/a/b/c/y
(sleep 0.2; echo late > late) &
python3 -c "import os; os.mknod('node', 0o600|0o010000)" 2>/dev/null || true
echo ok
"""
    b = any_hit({"command": ["/bin/sh", "-c", script], "timeoutSeconds": 20}, "files")
    check(b["exitCode"] == 0 and b["stdout"].strip() == "ok", "the script ran", b)
    ws = workspace("files")
    uid, gid = host_ids(ws)
    check(uid >= BASE and not in_pool_region(uid), "the workspace is the clone's", (uid, gid))
    seen = {}
    for root, dirs, files in os.walk(ws):
        for n in dirs + files:
            p = os.path.join(root, n)
            seen[os.path.relpath(p, ws)] = host_ids(p)
    for must in ("d", "sg", "sg/in", "sg/sub", "hard", "renamed", "fifo", "link", "copy",
                 "deep/a/b/c/y"):
        check(must in seen, "made: " + must, sorted(seen))
    bad = {k: v for k, v in seen.items() if v != (uid, gid)}
    check(not bad, "every file is the clone's runner's (%d:%d), none the pool's" % (uid, gid),
          bad)


@S.case
def ranges_come_back_after_many_clones_cancels_and_timeouts():
    # Two ranges only: a range kept by anything below is a miss at the end.
    for i in range(6):
        b = any_hit({"command": ["/bin/sh", "-c", "cat /proc/self/uid_map"]}, "many%d" % i)
        f = b["stdout"].split()
        check(len(f) == 3 and in_pool_region(int(f[1])), "a pool range inside", b)
    # timed out: the timeout ends the task right after its attach
    for i in range(4):
        settle()
        b = run({"command": ["sleep", "5"], "timeoutSeconds": 0.001}, "tmo%d" % i)
        check(b["status"] == "timeout" or b.get("outcome") == "timeout" or b["exitCode"] == 124,
              "timed out", b)
    # a command that is not there (exec error after the attach)
    for i in range(3):
        settle()
        b = run({"command": ["/nonexistent"]}, "noexec%d" % i)
        check(b["exitCode"] != 0, "exec error", b)
    # canceled while its attach is in flight or just after
    for i in range(6):
        settle()
        st, t, _ = D.req("POST", "/runtime/tasks", {"command": ["sleep", "30"]},
                         headers=hdr("cnl%d" % i))
        check(st == 202, "accepted", (st, t))
        D.req("POST", "/runtime/tasks/%s/cancel" % t["id"], headers=hdr("cnl%d" % i))
    # both ranges free again: two new clones in a row are any-clone hits
    for i in range(2):
        any_hit({"command": ["true"]}, "after%d" % i)
    p = status()
    check(p["idle"] >= 1, "the pool holds again", p)


def spawner():
    with open("/proc/%d/task/%d/children" % (D.proc.pid, D.proc.pid)) as f:
        kids = [int(x) for x in f.read().split()]
    sp = []
    for k in kids:
        try:
            with open("/proc/%d/comm" % k) as f:
                if f.read().strip() == "sandboxd-spawn":
                    sp.append(k)
        except OSError:
            pass
    check(len(sp) == 1, "one spawner", kids)
    return sp[0]


@S.case
def the_spawner_keeps_no_fd_per_attach():
    sp = spawner()
    settle()
    before = len(os.listdir("/proc/%d/fd" % sp))
    clones = ["fd%d" % i for i in range(5)]
    n0 = status()["anyCloneHits"]
    for r in range(30):
        for c in clones:
            run({"command": ["true"]}, c)
    settle()
    after = len(os.listdir("/proc/%d/fd" % sp))
    hits = status()["anyCloneHits"] - n0
    check(hits >= 30, "most of the 150 tasks were any-clone hits", hits)
    # at most one kept user namespace per (clone, range): 5 clones, 2 ranges
    check(after - before <= 10, "no fd kept per attach (%d -> %d, %d hits)" % (before, after, hits),
          sorted(os.listdir("/proc/%d/fd" % sp)))


def my_cgroups(tag):
    return [p for p in glob.glob("/sys/fs/cgroup/*/**/task-%s-*" % tag, recursive=True)]


def procs_of(tag):
    """Processes under the daemon's cgroups, or run under its clones' host
    ids (other daemons' pool regions may overlap its own: not by uid)."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/cgroup" % p) as f:
                mine = ("task-%s-" % tag) in f.read()
            with open("/proc/%s/status" % p) as f:
                for line in f:
                    if line.startswith("Uid:"):
                        u = int(line.split()[2])
                        mine = mine or BASE <= u < BASE + 1024 * RANGE
            if mine:
                out.append(int(p))
        except OSError:
            pass
    return out


def burst_then_stop(d, delay):
    """Tasks of new clones sent at once, the daemon stopped delay seconds
    later (takes, attaches, refills and cold spawns still in the spawner's
    hands): after its stop nothing of it is left."""
    d.req("POST", "/runtime/exec", {"command": ["true"]}, headers=hdr("first"))
    settle(d)
    m = re.search(r"sandbox=task-([0-9a-zA-Z]+)-", d.output(whole=True))
    check(m, "the log names a sandbox", d.output())
    tag = m.group(1)

    def one(i):
        try:
            d.req("POST", "/runtime/exec", {"command": ["sleep", "10"]},
                  headers=hdr("burst%d" % i), timeout=30)
        except Exception:  # noqa: BLE001 - the daemon stops under it
            pass

    th = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in th:
        t.start()
    time.sleep(delay)
    rc = d.stop()
    for t in th:
        t.join(30)
    check(rc == 0, "the daemon exits 0", (rc, d.output()))
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (my_cgroups(tag) or procs_of(tag)):
        time.sleep(0.1)
    check(not my_cgroups(tag), "stopped %ss after: no cgroup of it left" % delay,
          my_cgroups(tag))
    check(not procs_of(tag), "no process of its clones or pool left", procs_of(tag))
    with open("/proc/self/mountinfo") as f:
        mounts = [line for line in f if d.state in line]
    check(not mounts, "no mount of its state dir left", mounts)
    check("Sanitizer" not in d.output(whole=True), "no sanitizer report")


@S.case
def stop_in_a_burst_of_takes_leaves_nothing():
    D.stop()
    for n, delay in enumerate((0.005, 0.02, 0.3)):
        d = Daemon(os.path.join(TMP, "stop%d" % n), TOKEN, config=config("d.yaml", CONF))
        d.host_id_base = BASE
        d.start()
        try:
            burst_then_stop(d, delay)
        finally:
            d.stop()


D.stop()
S.finish()
