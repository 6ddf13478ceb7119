"""Live sessions served from the warm pool, attacked as a hostile tenant
would (runtime/sessions.c, exec/pool.c sbx_pool_take_holder, isolate/attach.c,
init's hold order). A daemon with only two pool host id ranges, so a range
not given back (or given back twice) shows at once.

Checked:
- what a session's tasks make in the attached workspace (hard links,
  renames, a fifo, a symlink to a host file; set-id modes, chown and mknod
  refused) is stored with the clone's host ids, never the pool's, and
  another clone's workspace is nowhere to be found;
- a holder's init (which keeps the daemon's sync socket) is out of its
  tasks' reach: no signal, fd, environment, exe or root of it;
- nothing crosses from one session to another, live or ended: /tmp,
  /dev/shm, SysV shared memory, abstract sockets, processes; a task has no
  fd above 2, no daemon variable or token, and starts in /workspace;
- the session's memory and process limits hold though the sandbox it took
  was built for a task with larger ones: a memory bomb ends as oom, a fork
  bomb stops at the cap, the daemon still answers;
- ranges: two pooled sessions live at once have two distinct ranges of the
  pool's region, a third (none ready, no range free) is built cold with the
  clone's, and after stops, stops during the attach, a holder's init killed
  from outside and a burst of starts, both ranges serve again;
- a session outlives the pool's idle timeout (its sandbox is no longer the
  pool's) and its own idle timeout frees its range;
- the daemon stopped (SIGTERM) during a burst of session starts being
  attached, or during a pooled session's task with background and setsid'd
  processes, leaves no process, cgroup or mount;
- pool.sessions far above total_pids and max_active: a burst of starts
  keeps both caps;
- on a loop image (the default quota mode): the clone's ids on the image,
  no idle unmount under the live session, no loop device left;
- (netlab, --net proxy: no packet leaves the machine) a session's own
  network rules end with it: the next session, of another clone or of the
  same one, is judged by the operator's policy from its first command.

Each daemon has a cgroup parent of its own (sbxsa*-PID, removed at the end)."""
import glob
import os
import random
import re
import signal
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import netlab  # noqa: E402
from sbxtest import (ServeDaemon, Suite, check, config_file, own_cgroups,  # noqa: E402
                     rmdir_cgroup, wait_for)

S = Suite("session_pool_attack")
TOKEN = "sessattack-" + "0123456789abcdef0123456789ab"
TMP = tempfile.mkdtemp(prefix="sbx-sess-attack-")
os.chmod(TMP, 0o755)
RANGE = 65536
# The highest base that leaves room for exactly two pool ranges
# (runtime/workspace.c rt_pool_ids: 60000 clone ranges, then the pool's).
BASE = (65536 - 60000 - 3) * RANGE
POOL_FIRST = BASE + 60000 * RANGE
ALL = own_cgroups()
PARENTS = []
MEM_MB = 48
PIDS = 24


class Daemon(ServeDaemon):
    extended_by_default = True
    req_timeout = 60


def in_pool_region(i):
    return POOL_FIRST <= i < POOL_FIRST + 2 * RANGE


def make_daemon(name, pool="  max_idle: 2\n  sessions: 2\n  idle_timeout: 120s\n", extra="",
                base=BASE, total_caps=False, quota="monitor"):
    parent = "sbxsa%s-%d" % (name, os.getpid())
    PARENTS.append(parent)
    text = ("sandbox:\n  network_policy: none\n  workspace_quota_mode: %s\n"
            "  cgroup_parent: %s\n  memory_limit: %dm\n  pids_limit: %d\n  cpu_limit: 0.5\n%s"
            "pool:\n%s" % (quota, parent, MEM_MB, PIDS, extra, pool))
    d = Daemon(os.path.join(TMP, name), TOKEN, config=config_file(TMP, name + ".yaml", text),
               total_caps=total_caps)
    d.host_id_base = base
    d.parent = parent
    return d.start()


def hdr(clone):
    return {"X-Tenant-Code": "sa", "X-Clone-Id": clone}


def pool(d):
    st, b, _ = d.req("GET", "/runtime/status")
    check(st == 200 and "pool" in b, "/runtime/status has pool", b)
    return b["pool"]


def settle(d, n=2, timeout=30):
    """n ready, nothing building, the counts still."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        p = pool(d)
        now = (p["sessionHits"], p["sessionMisses"], p["built"], p["discarded"])
        if p["idle"] >= n and not p["building"] and now == last:
            return p
        last = now
        time.sleep(0.1)
    raise AssertionError("the pool did not settle with %d ready: %r\n%s" % (
        n, pool(d), "\n".join(line for line in d.output(whole=True).splitlines()
                              if "pool" in line or "left" in line or "warn" in line)[-4000:]))


def start(d, clone, name="s"):
    st, b, _ = d.req("POST", "/runtime/start", {"sessionID": name}, headers=hdr(clone))
    check(st == 200, "session %s of %s started" % (name, clone), (st, b))
    return b


def stop(d, clone, name="s"):
    return d.req("POST", "/runtime/stop", {"sessionID": name}, headers=hdr(clone))[0]


def hit_start(d, clone, name="s"):
    """A session served from the pool (checked by the counter)."""
    settle(d, 1)
    before = pool(d)["sessionHits"]
    start(d, clone, name)
    check(pool(d)["sessionHits"] == before + 1, "%s served from the pool" % clone, pool(d))


def run(d, clone, command, name="s", ok=True, timeout=40):
    st, b, _ = d.req("POST", "/runtime/exec",
                     {"sessionID": name, "command": command, "timeoutSeconds": timeout},
                     headers=hdr(clone), timeout=timeout + 30)
    check(st == 200, "exec in session %s of %s answers" % (name, clone), (st, b))
    if ok:
        check(b.get("exitCode") == 0, "ran in session %s of %s" % (name, clone), b)
    return b


def sh(d, clone, script, name="s"):
    return run(d, clone, ["/bin/sh", "-c", script], name)["stdout"]


def host_range(d, clone, name="s"):
    """The host uid a session's tasks run under (its uid_map's first line)."""
    return int(sh(d, clone, "cat /proc/self/uid_map", name).split()[1])


def cg(d, ctrl, name=""):
    return os.path.join(ALL[ctrl], d.parent, name)


def children(path):
    return sorted(e for e in os.listdir(path) if os.path.isdir(os.path.join(path, e))) \
        if os.path.isdir(path) else []


def cgname(d, clone, name="s"):
    # the session's sandbox: the log's last start of it
    found = re.findall(r"session started tenant=sa session=%s sandbox=(\S+)" % name,
                       d.output(whole=True))
    check(found, "the session's sandbox in the log", d.output())
    return found[-1]


def read(path, f):
    with open(os.path.join(path, f)) as fh:
        return fh.read().strip()


def live_ranges(d):
    """Host uid of every process beneath the daemon's cgroup parent (ready
    sandboxes' inits, holders, tasks), by its sandbox's cgroup."""
    out = {}
    base = cg(d, "pids")
    for c in children(base):
        try:
            procs = read(os.path.join(base, c), "cgroup.procs").split()
        except FileNotFoundError:  # removed since listed: no process in it
            continue
        for p in procs:
            try:
                with open("/proc/%s/uid_map" % p) as f:
                    out.setdefault(c, set()).add(int(f.read().split()[1]))
            except (OSError, IndexError):
                pass
    return out


def distinct_ranges(d, what):
    rs = live_ranges(d)
    seen = {}
    for c, ids in rs.items():
        check(len(ids) == 1, "one range in sandbox %s" % c, rs)
        u = next(iter(ids))
        check(u not in seen, "%s: sandboxes %s and %s share host range %d"
              % (what, seen.get(u), c, u), rs)
        seen[u] = c
    return rs


D = make_daemon("d")


@S.case
def files_made_in_a_pooled_session_are_the_clones():
    start(D, "prime")  # the description's first session: a miss
    run(D, "prime", ["/bin/sh", "-c", "echo s > /workspace/prime-secret"])
    stop(D, "prime")
    hit_start(D, "files")
    check(in_pool_region(host_range(D, "files")), "its tasks run under a pool range",
          host_range(D, "files"))
    script = r"""
cd /workspace
mkdir d sg && touch sg/in && mkdir sg/sub
chmod 2775 sg 2>/dev/null && echo SETGID
chmod u+s sg/in 2>/dev/null && echo SETUID
echo a > f && ln f hard && mv f renamed && mv renamed d/moved && ln d/moved d/hard2
mkfifo fifo && ln -s /etc/shadow shadowlink && ln -s / rootlink
chown 0:0 d/moved 2>/dev/null && echo CHOWNED
chown 10001:0 d/moved 2>/dev/null && echo CHGRP0
python3 -c "import os; os.mknod('cdev', 0o600|0o020000, os.makedev(1, 3))" 2>/dev/null \
  && echo MKNOD
ln /etc/passwd hostlink 2>/dev/null && echo HOSTLINK
(sleep 0.3; echo late > late) &
wait
find / -path /proc -prune -o -path /sys -prune -o -name 'prime-secret*' -print 2>/dev/null
echo done
"""
    try:
        out = sh(D, "files", script)
    finally:
        stop(D, "files")
    for bad in ("SETGID", "SETUID", "CHOWNED", "CHGRP0", "MKNOD", "HOSTLINK", "prime-secret"):
        check(bad not in out, "refused or not found: %s" % bad, out)
    check(out.strip().endswith("done"), "the script ran", out)
    ws = os.path.join(D.state, "workspaces", "sa", "files", "work")
    root = os.lstat(ws)
    check(not in_pool_region(root.st_uid) and root.st_uid >= BASE,
          "the workspace is the clone's", (root.st_uid, root.st_gid))
    seen = {}
    for r, dirs, files in os.walk(ws):
        for n in dirs + files:
            p = os.path.join(r, n)
            st = os.lstat(p)
            seen[os.path.relpath(p, ws)] = (st.st_uid, st.st_gid)
    for must in ("d", "sg", "sg/in", "sg/sub", "hard", "d/moved", "d/hard2", "fifo",
                 "shadowlink", "late"):
        check(must in seen, "made: " + must, sorted(seen))
    setid = [k for k in seen if os.lstat(os.path.join(ws, k)).st_mode & 0o6000]
    check(not setid, "no set-id mode in the workspace (docs/security.md)", setid)
    bad = {k: v for k, v in seen.items() if v != (root.st_uid, root.st_gid)}
    check(not bad, "every file is the clone's runner's, none the pool's", bad)
    # the planted symlink through the files API: never the host's file
    st, b, _ = D.req("GET", "/runtime/files?path=shadowlink", headers=hdr("files"))
    check(st >= 400 or "root:" not in str(b), "the file API does not follow it", (st, b))


def marks(d, clone):
    """What a session's task can see of others: files in /tmp and /dev/shm,
    SysV segments, abstract sockets, processes, its fds, env and cwd."""
    script = r"""
ls -A /tmp /dev/shm | tr '\n' ' '; echo
cat /proc/sysvipc/shm | wc -l
grep -c '@' /proc/net/unix || true
ps -eo comm= | sort | tr '\n' ' '; echo
ls /proc/self/fd | tr '\n' ' '; echo
env | cut -d= -f1 | sort | tr '\n' ' '; echo
pwd
cat /proc/1/environ /proc/1/cmdline 2>/dev/null | tr '\0' ' '; echo
"""
    return sh(d, clone, script).split("\n")


LEAVE = r"""
echo m > /tmp/mark-tmp; echo m > /dev/shm/mark-shm
python3 - <<'EOF'
import ctypes, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
shm = libc.shmget(0x5a5a, 4096, 0o1000 | 0o666)
print("shm", shm)
if os.fork() == 0:
    os.setsid()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind("\0sbx-mark-abstract")
    s.listen(1)
    for fd in (0, 1, 2):
        os.close(fd)
    import time
    time.sleep(300)
EOF
sleep 0.3
grep -c sbx-mark /proc/net/unix
"""


def crossing():
    hit_start(D, "a")
    out = sh(D, "a", LEAVE)
    check(out.strip().endswith("1") and "shm -1" not in out, "session a left its marks", out)
    hit_start(D, "b")
    for when in ("while a lives", "after a ended"):
        m = marks(D, "b")
        print("  b %s: %s" % (when, m))
        check("mark" not in m[0], "no file of a in /tmp or /dev/shm " + when, m)
        check(m[1].strip() == "1", "no SysV segment of a " + when, m)
        check(m[2].strip() == "0", "no abstract socket of a " + when, m)
        check("python3" not in m[3] and "sleep" not in m[3], "no process of a " + when, m)
        check(m[4].split() in (["0", "1", "2", "3"], ["0", "1", "2"]), "fds 0-2 only", m)
        check(not re.search(r"\b(CLAW|SANDBOX)_", m[5]), "no daemon variable " + when, m)
        check(m[6] == "/workspace", "starts in /workspace", m)
        check(TOKEN not in "\n".join(m), "no token anywhere " + when, m)
        if when == "while a lives":
            stop(D, "a")
            stop(D, "b")
            hit_start(D, "b")
    # a itself again: a new sandbox, nothing of its last one but its files
    hit_start(D, "a")
    m = marks(D, "a")
    check("mark" not in m[0] and m[2].strip() == "0" and "python3" not in m[3],
          "a's new session has nothing of its old one", m)


@S.case
def nothing_crosses_between_sessions():
    try:
        crossing()
    finally:
        for c in ("a", "b"):
            stop(D, c)



@S.case
def limits_hold_though_the_sandbox_was_built_for_bigger_ones():
    # A plain task asks more memory and processes than the sessions' default:
    # the ready sandboxes that follow are built with them (a description
    # shares its sandboxes between tasks and sessions).
    d = make_daemon("lim", pool="  max_idle: 2\n  idle_timeout: 120s\n")
    try:
        for i in range(2):
            st, b, _ = d.req("POST", "/runtime/exec",
                             {"command": ["true"], "memoryMB": 256, "pids": 200},
                             headers=hdr("t%d" % i))
            check(st == 200 and b.get("exitCode") == 0, "a big task", (st, b))
        settle(d)
        built = [c for c in children(cg(d, "memory")) if "-pool-" in c]
        check(built and all(int(read(cg(d, "memory", c), "memory.limit_in_bytes")) ==
                            256 << 20 for c in built), "ready ones built with 256 MiB", built)
        hit_start(d, "lim")
        name = cgname(d, "lim")
        check(name in built, "the session took one of them", (name, built))
        mem = int(read(cg(d, "memory", name), "memory.limit_in_bytes"))
        pids = int(read(cg(d, "pids", name), "pids.max"))
        check(mem == MEM_MB << 20 and pids == PIDS + 1, "relimited to the session's",
              (mem, pids))
        b = run(d, "lim", ["python3", "-c", "b = []\nwhile True: b.append(bytearray(1 << 20))"],
                ok=False)
        print("  memory bomb: %s" % b.get("report"))
        check(b["report"]["outcome"] == "oom" and b["report"]["oomKilled"] is True,
              "the memory bomb ends as oom", b)
        bomb = ("import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
                "            time.sleep(5); os._exit(0)\n        n += 1\nexcept OSError:\n"
                "    pass\nprint(n)\n")
        b = run(d, "lim", ["python3", "-c", bomb], ok=False, timeout=30)
        forks = int(b["stdout"].split()[0]) if b["stdout"].split() else -1
        print("  fork bomb: %d forks" % forks)
        check(0 <= forks < PIDS, "the fork bomb stops at the session's cap", b)
        check(int(read(cg(d, "pids", name), "pids.current")) <= PIDS + 1, "pids within the cap")
        check(pool(d)["enabled"], "the daemon still answers")
        run(d, "lim", ["true"])
        stop(d, "lim")
        # A task sent while its session's sandbox is being taken and
        # relimited waits for it (or, sent first, runs in a sandbox of its
        # own): never under the 256 MiB the sandbox was built with.
        for i in range(4):
            settle(d, 1)
            clone = "race%d" % i
            th = threading.Thread(target=start, args=(d, clone))
            th.start()
            time.sleep(0.002 * i)
            b = run(d, clone, ["python3", "-c", "b = []\nwhile True: b.append(bytearray(1 << 20))"],
                    ok=False)
            th.join(60)
            r = b["report"]
            check(r["outcome"] == "oom" and r["peakMemoryBytes"] < 128 << 20,
                  "a task sent during the take ends oom under the session's limit", r)
            stop(d, clone)
    finally:
        d.stop()


@S.case
def both_ranges_come_back_after_every_way_a_session_ends():
    def two_hits(tag):
        settle(D)
        for c in ("r1", "r2"):
            hit_start(D, c + tag, c + tag)
        r = [host_range(D, c + tag, c + tag) for c in ("r1", "r2")]
        check(all(in_pool_region(u) for u in r) and r[0] != r[1],
              "%s: two sessions, two pool ranges" % tag, r)
        distinct_ranges(D, tag)
        return r

    # 1: stopped
    two_hits("stop")
    # a third while both ranges are held: built cold, with the clone's range
    before = pool(D)["sessionMisses"]
    start(D, "r3")
    check(pool(D)["sessionMisses"] == before + 1, "a third is a miss", pool(D))
    u3 = host_range(D, "r3")
    check(not in_pool_region(u3), "built cold under the clone's range", u3)
    distinct_ranges(D, "three live")
    for c in ("r1stop", "r2stop"):
        stop(D, c, c)
    stop(D, "r3")
    # 2: the holder's init killed from outside (the session ends with it)
    two_hits("kill")
    killed = []
    for c in ("r1kill", "r2kill"):
        killed.append(cgname(D, c, c))
        procs = read(cg(D, "pids", killed[-1]), "cgroup.procs").split()
        os.kill(int(procs[0]), signal.SIGKILL)
    check(wait_for(lambda: not any(os.path.exists(cg(D, "pids", n)) for n in killed)),
          "the killed holders' sessions end and their cgroups go", killed)
    # 3: stopped during their attach, a burst of starts beyond the pool
    settle(D)
    res = []
    th = [threading.Thread(target=lambda i=i: res.append(D.req(
        "POST", "/runtime/start", {"sessionID": "s"}, headers=hdr("burst%d" % i))[0]))
        for i in range(8)]
    for t in th:
        t.start()
    time.sleep(0.01)
    for i in range(0, 8, 2):
        stop(D, "burst%d" % i)
    for t in th:
        t.join(60)
    check(all(s in (200, 409) for s in res), "each start answers 200 or 409", res)
    distinct_ranges(D, "burst")
    for i in range(8):
        stop(D, "burst%d" % i)
    two_hits("after")
    for c in ("r1after", "r2after"):
        stop(D, c, c)
    two_hits("again")
    for c in ("r1again", "r2again"):
        stop(D, c, c)


@S.case
def a_session_outlives_the_pools_idle_timeout_and_ends_at_its_own():
    d = make_daemon("idle", pool="  max_idle: 1\n  sessions: 1\n  idle_timeout: 1s\n",
                    extra="  idle_timeout: 5s\n")
    try:
        start(d, "warm")
        stop(d, "warm")
        settle(d, 1)
        hit_start(d, "long")
        name = cgname(d, "long")
        u = host_range(d, "long")
        run(d, "long", ["sleep", "3"])  # past the pool's idle timeout, busy
        check(cgname(d, "long") == name and host_range(d, "long") == u,
              "the same sandbox after the pool's idle timeout", (name, cgname(d, "long")))
        distinct_ranges(d, "after the pool's idle timeout")
        check(wait_for(lambda: not os.path.exists(cg(d, "pids", name)), timeout=20),
              "ended at its own idle timeout, its cgroup gone", name)
        check("session=s reason=\"idle_timeout\"" in d.output(whole=True) or
              "idle_timeout" in d.output(whole=True), "ended as idle", d.output())
        # the pool forgot the quiet description (its idle timeout): a miss
        # builds it again, then both ranges serve (the ended session's too)
        start(d, "warm2")
        stop(d, "warm2")
        hit_start(d, "next")
        check(in_pool_region(host_range(d, "next")), "a pool range again")
        stop(d, "next")
    finally:
        d.stop()


def procs_under(parent):
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/cgroup" % p) as f:
                    if "/%s/" % parent in f.read():
                        out.append(int(p))
            except OSError:
                pass
    return out


@S.case
def sigterm_during_session_attaches_leaves_nothing():
    for n, delay in enumerate((0.003, 0.03, 0.3)):
        d = make_daemon("term%d" % n)
        try:
            start(d, "warm")
            stop(d, "warm")
            settle(d)
            def one(i):
                try:
                    d.req("POST", "/runtime/start", {"sessionID": "s"}, headers=hdr("b%d" % i),
                          timeout=30)
                except Exception:  # noqa: BLE001 - the daemon stops under it
                    pass
            ts = [threading.Thread(target=one, args=(i,)) for i in range(6)]
            for t in ts:
                t.start()
            time.sleep(delay)
            d.proc.send_signal(signal.SIGTERM)
            rc = d.proc.wait(30)
            for t in ts:
                t.join(30)
            out = d.output(whole=True)
            check(rc == 0, "exit 0 at SIGTERM %ss into the burst" % delay, (rc, out[-3000:]))
            check("Sanitizer" not in out and "runtime error" not in out, "no sanitizer report",
                  out[-3000:])
            check(wait_for(lambda: not procs_under(d.parent), timeout=5),
                  "no process left beneath its parent", procs_under(d.parent))
            for c in ("memory", "pids", "cpu"):
                check(not children(cg(d, c)), "no cgroup left in %s/%s" % (c, d.parent),
                      children(cg(d, c)))
            with open("/proc/self/mountinfo") as f:
                left = [line for line in f if d.state in line]
            check(not left, "no mount of its state dir left", left)
        finally:
            d.stop()



@S.case
def caps_hold_with_a_large_pool_sessions_and_a_burst_beyond_it():
    # pool.sessions far above what total_pids and max_active allow: the
    # ready sandboxes never pass max_active, the processes beneath the
    # parent never pass total_pids, a burst of starts beyond the pool gets
    # sessions or JSON errors, and afterwards only the pool's are left.
    cap = 14
    d = make_daemon("caps", pool="  max_idle: 2\n  sessions: 40\n  max_total: 40\n"
                    "  max_active: 4\n  idle_timeout: 120s\n",
                    extra="  total_pids: %d\n  total_memory: 0\n  total_cpu: 0\n" % cap,
                    base=random.randrange(1, 85) * 64 * RANGE, total_caps=True)
    res = []
    try:
        start(d, "warm")
        stop(d, "warm")
        settle(d, 1)
        seen = []

        def watch():
            while len(res) < 12:
                p = pool(d)
                seen.append((p["idle"] + p["building"],
                             int(read(cg(d, "pids"), "pids.current"))))
                time.sleep(0.02)
        w = threading.Thread(target=watch)
        w.start()

        def one(i):
            st, b, _ = d.req("POST", "/runtime/start", {"sessionID": "s"}, headers=hdr("c%d" % i))
            res.append((i, st, b))
        th = [threading.Thread(target=one, args=(i,)) for i in range(12)]
        for t in th:
            t.start()
        for t in th:
            t.join(60)
        w.join(10)
        ok = [i for i, st, _ in res if st == 200]
        print("  started %d of 12, %s; most ready+building %d, most pids %d"
              % (len(ok), pool(d), max(a for a, _ in seen), max(b for _, b in seen)))
        check(all(a <= 4 for a, _ in seen), "the pool within max_active", seen)
        check(all(b <= cap for _, b in seen), "pids within total_pids", seen)
        for i, st, b in res:
            check(st == 200 or (st >= 400 and b.get("error", {}).get("message")),
                  "a session or a JSON error", (st, b))
        check(ok, "some sessions started", res)
        for i in ok:
            # at the cap a task cannot fork: a setup error that says so
            b = run(d, "c%d" % i, ["true"], ok=False)
            check(b["exitCode"] == 0 or (b["report"]["outcome"] == "setup_error" and
                                         "EAGAIN" in b["report"]["message"]),
                  "the task ran or was refused at the cap", b)
            stop(d, "c%d" % i)
        b = run(d, "c%d" % ok[0], ["true"]) if start(d, "c%d" % ok[0]) else None
        stop(d, "c%d" % ok[0])

        def only_the_pools():
            p = pool(d)
            # the spawner's own cgroup aside (it makes them inside the cap)
            left = [c for c in children(cg(d, "pids")) if not c.startswith("spawner-")]
            return len(left) == p["idle"] + p["building"]
        check(wait_for(only_the_pools), "only the pool's sandboxes left",
              (pool(d), children(cg(d, "pids"))))
    finally:
        check(d.stop() == 0, "the capped daemon stops cleanly", d.output())


@S.case
def sigterm_during_a_pooled_sessions_task_leaves_nothing():
    d = make_daemon("termtask")
    try:
        start(d, "warm")
        stop(d, "warm")
        hit_start(d, "busy")
        st, b, _ = d.req("POST", "/runtime/tasks",
                         {"sessionID": "s", "command": ["/bin/sh", "-c",
                                                        "sleep 60 & setsid sleep 60 & "
                                                        "(sleep 60 &) ; sleep 60"]},
                         headers=hdr("busy"))
        check(st == 202, "a long task queued", (st, b))
        name = cgname(d, "busy")
        check(wait_for(lambda: len(read(cg(d, "pids", name), "cgroup.procs").split()) >= 5),
              "its processes run", read(cg(d, "pids", name), "cgroup.procs"))
        rc = d.stop()
        check(rc == 0, "exit 0 at SIGTERM during the task", (rc, d.output()))
        check(wait_for(lambda: not procs_under(d.parent), timeout=5),
              "no process left beneath its parent", procs_under(d.parent))
        for c in ("memory", "pids", "cpu"):
            check(not children(cg(d, c)), "no cgroup left in %s/%s" % (c, d.parent),
                  children(cg(d, c)))
    finally:
        d.stop()


@S.case
def the_holders_init_is_out_of_reach():
    # A pooled holder's init keeps the daemon's sync socket for the
    # session's whole life: its tasks can neither signal it, nor reach its
    # fds, nor read its environment or its exe.
    hit_start(D, "reach")
    try:
        out = sh(D, "reach", "kill -KILL 1 2>/dev/null && echo KILLED; "
                 "kill -STOP 1 2>/dev/null && echo STOPPED; "
                 "ls /proc/1/fd 2>/dev/null | grep -q . && echo FDS; "
                 "cat /proc/1/fd/3 </dev/null >/dev/null 2>&1 && echo SYNC; "
                 "cat /proc/1/environ 2>/dev/null | grep -q . && echo ENVIRON; "
                 "cat /proc/1/exe >/dev/null 2>&1 && echo EXE; "
                 "ls /proc/1/root/ >/dev/null 2>&1 && echo ROOT; echo done")
        for bad in ("KILLED", "STOPPED", "FDS", "SYNC", "ENVIRON", "EXE", "ROOT"):
            check(bad not in out, "refused: " + bad, out)
        check(out.strip().endswith("done"), "the probe ran", out)
        run(D, "reach", ["true"])  # the session still serves
    finally:
        stop(D, "reach")


def loops_of(state):
    out = []
    for f in glob.glob("/sys/block/loop*/loop/backing_file"):
        try:
            with open(f) as fh:
                if fh.read().strip().startswith(state):
                    out.append(f)
        except OSError:
            pass
    return out


@S.case
def a_pooled_session_on_a_loop_image_stores_the_clones_ids_and_leaves_nothing():
    # The default quota mode: each workspace an ext4 image on a loop device,
    # attached idmapped. Files made are the clone's on the image; an idle
    # unmount never takes the image from under the live session; at the
    # daemon's stop no mount or loop device of its state is left.
    d = make_daemon("loop", quota="loop", extra="  workspace_idle_unmount: 1s\n")
    try:
        start(d, "warm")
        stop(d, "warm")
        hit_start(d, "img")
        check(in_pool_region(host_range(d, "img")), "a pool range")
        sh(d, "img", "mkdir -p /workspace/d && echo x > /workspace/d/f && ln /workspace/d/f "
           "/workspace/h")
        time.sleep(2.5)  # past workspace_idle_unmount, the session idle
        out = sh(d, "img", "cat /workspace/d/f; echo y >> /workspace/d/f; cat /workspace/h")
        check(out.split() == ["x", "x", "y"], "the image is still the session's", out)
        ws = os.path.join(d.state, "workspaces", "sa", "img", "work")
        with open("/proc/self/mountinfo") as f:
            check(any(" %s " % ws in line for line in f), "the image is mounted", ws)
        root = os.lstat(ws)
        for rel in ("d", "d/f", "h"):
            st = os.lstat(os.path.join(ws, rel))
            check((st.st_uid, st.st_gid) == (root.st_uid, root.st_gid) and
                  not in_pool_region(st.st_uid), "%s is the clone's on the image" % rel,
                  (st.st_uid, root.st_uid))
        check(loops_of(d.state), "its loop devices while it runs")
        stop(d, "img")
        rc = d.stop()
        check(rc == 0, "exit 0", (rc, d.output()))
        with open("/proc/self/mountinfo") as f:
            left = [line for line in f if d.state in line]
        check(not left, "no mount of its state left", left)
        check(wait_for(lambda: not loops_of(d.state)), "no loop device of its state left",
              loops_of(d.state))
    finally:
        d.stop()


class LabDaemon(netlab.LabDaemon):
    """sandboxd serve --net proxy in a netlab daemon namespace (no packet
    leaves the machine), on a unix socket, with a cgroup parent of its own."""

    def __init__(self, lab, name):
        self.parent = "sbxsa%s-%d" % (name, os.getpid())
        PARENTS.append(self.parent)
        super().__init__(lab, os.path.join(TMP, name), TOKEN,
                         "sandbox:\n  cgroup_parent: %s\n  workspace_quota_mode: monitor\n"
                         "network:\n  dns:\n    upstream: [\"%s\"]\n"
                         "pool:\n  max_idle: 2\n  sessions: 2\n  idle_timeout: 120s\n"
                         % (self.parent, netlab.DNS))

    def req(self, method, path, body=None, headers=None, timeout=60):
        return self.request(method, path, body, headers, timeout) + (None,)


@S.case
def no_sessions_network_rules_reach_the_next():
    # A session's own rules (POST /runtime/network) and its egress end with
    # it: the next session of another clone, and of the same clone and name,
    # each on a sandbox of the pool, gets the operator's policy from its
    # first packet (the first command connects at once).
    targets = ["%s,80" % netlab.PUBLIC, "%s,80" % netlab.METADATA, "dns:www.public.test,0"]

    def probe(d, clone):
        b = run(d, clone, ["python3", "-c", netlab.CONNECT_PROBE] + targets)
        return {k: v[0] for k, v in netlab.probe_results(b["stdout"]).items()}

    lab = netlab.Lab().__enter__()
    d = None
    try:
        d = LabDaemon(lab, "net")
        start(d, "warm")
        stop(d, "warm")
        hit_start(d, "n1")
        first = probe(d, "n1")
        check(first[targets[0]].startswith("ok") and not first[targets[1]].startswith("ok"),
              "public reached, metadata refused from the first command", first)
        st, b, _ = d.req("POST", "/runtime/network", {"sessionID": "s", "deny": [netlab.PUBLIC]},
                         headers=hdr("n1"))
        check(st == 200, "n1's own rule", (st, b))
        check(not probe(d, "n1")[targets[0]].startswith("ok"), "n1 denies public now")
        stop(d, "n1")
        for clone in ("n2", "n1"):
            hit_start(d, clone)
            got = probe(d, clone)
            print("  %s after n1's rule: %s" % (clone, got))
            check(got == first, "%s judges as n1 did before its rule" % clone, (got, first))
            stop(d, clone)
    finally:
        if d:
            check(d.stop(), "the lab daemon stops cleanly", d.output()[-3000:])
        lab.__exit__(None, None, None)


D.stop()
for parent in PARENTS:
    for base in ALL.values():
        rmdir_cgroup(os.path.join(base, parent))
S.finish()
