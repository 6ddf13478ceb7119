"""The warm pool without cgroups (sandbox.cgroup_mode: rlimit): a pooled
sandbox's init is started with no memory or process limit and takes the
task's from its command (spec.limits_at_command), so a task with other
limits than the sandbox's description is still a hit (but a memory limit
below sandbox.tmp_size, which bounds the tmpfs mounts made with the
sandbox: that is its own description).

Checked against a daemon without the pool, same requests: the rlimits the
task runs under (/proc/self/limits: data, address space, processes, file
size, descriptors, core), at several limits and at the defaults, an out of
memory by the memory watch at a limit other than the previous task's, a
process cap; and that each was served from the pool (a hit, counted in
/runtime/status)."""
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sbxtest import ServeDaemon, Suite, check, config_file  # noqa: E402

S = Suite("pool_rlimit")
TOKEN = "poolrl-" + "0123456789abcdef0123456789ab"
TMP = tempfile.mkdtemp(prefix="sbx-pool-rlimit-")


class Daemon(ServeDaemon):
    extended_by_default = True
    req_timeout = 30


BASE = ("sandbox:\n  network_policy: none\n  cgroup_mode: rlimit\n"
        "  file_size_limit: 5m\n  tmp_size: 16m\n")
ON = Daemon(os.path.join(TMP, "on"), TOKEN, config=config_file(
    TMP, "on.yaml", BASE + "pool:\n  enabled: true\n  max_idle: 3\n  idle_timeout: 60s\n")).start()
COLD = Daemon(os.path.join(TMP, "cold"), TOKEN, config=config_file(
    TMP, "cold.yaml", BASE + "pool:\n  enabled: false\n")).start()


def pool_status(d):
    st, b, _ = d.req("GET", "/runtime/status")
    check(st == 200 and "pool" in b, "/runtime/status has pool", b)
    return b["pool"]


def wait_idle(d, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = pool_status(d)
        if p["idle"] >= 1 and not p["building"]:
            return p
        time.sleep(0.05)
    raise AssertionError("no idle pooled sandbox after %ss: %r" % (timeout, pool_status(d)))


def run(d, body, clone="c1"):
    st, b, _ = d.req("POST", "/runtime/exec", body,
                     headers={"X-Tenant-Code": "prl", "X-Clone-Id": clone}, timeout=60)
    check(st == 200, "exec answers 200", (st, b))
    return b


def hit(body, clone="c1"):
    wait_idle(ON)
    before = pool_status(ON)
    b = run(ON, body, clone)
    after = pool_status(ON)
    check(after["hits"] == before["hits"] + 1 and after["misses"] == before["misses"],
          "served from the pool (a hit)", (body, before, after))
    return b


def essentials(b):
    r = b.get("report") or {}
    return (b.get("exitCode"), b.get("stdout"), b.get("stderr"), r.get("outcome"),
            r.get("oomKilled"), r.get("cgroupMode"), r.get("limits"))


LIMITS = ["/bin/sh", "-c",
          "grep -E '^Max (data size|address space|processes|file size|open files|core)' "
          "/proc/self/limits"]


@S.case
def the_first_task_is_a_miss_then_other_limits_are_hits():
    p0 = pool_status(ON)
    b = run(ON, {"command": ["true"], "memoryMB": 200, "pids": 40})
    check(b["exitCode"] == 0 and b["report"]["cgroupMode"] == "rlimit", "rlimit mode", b)
    p1 = pool_status(ON)
    check(p1["misses"] == p0["misses"] + 1, "the description's first task: a miss", (p0, p1))
    for lim in ({"memoryMB": 64, "pids": 20}, {"memoryMB": 900, "pids": 250}, {}):
        hit(dict({"command": ["true"]}, **lim))


@S.case
def the_rlimits_are_a_cold_builds():
    run(ON, {"command": ["true"]}, "lim")
    for lim in ({"memoryMB": 96, "pids": 33}, {"memoryMB": 700, "pids": 200},
                {"memoryMB": 48, "pids": 7}, {}):
        body = dict({"command": LIMITS}, **lim)
        b1 = hit(body, "lim")
        b2 = run(COLD, body, "lim")
        check(b1["exitCode"] == 0 and "Max processes" in b1["stdout"], "limits read", b1)
        check(essentials(b1) == essentials(b2), "%r: the same rlimits pooled and cold" % lim,
              (essentials(b1), essentials(b2)))
        if lim:
            data = [x for x in b1["stdout"].splitlines() if x.startswith("Max data size")][0]
            check(str(lim["memoryMB"] << 20) in data, "the task's own memory limit", data)


@S.case
def a_memory_limit_below_the_tmpfs_size_is_its_own_description():
    # Without cgroups a tmpfs is no larger than the memory limit: mounted
    # with the sandbox, so such a limit is part of the description.
    body = {"command": ["/bin/sh", "-c", "df -k /tmp | tail -1 | awk '{print $2}'"],
            "memoryMB": 12}
    p0 = pool_status(ON)
    b = run(ON, body, "tmp")
    check(pool_status(ON)["misses"] == p0["misses"] + 1, "its first task: a miss", pool_status(ON))
    b1 = hit(body, "tmp")
    b2 = run(COLD, body, "tmp")
    check(essentials(b) == essentials(b1) == essentials(b2) and
          int(b1["stdout"]) == 12 << 10, "/tmp sized by the memory limit, as cold",
          (essentials(b1), essentials(b2)))
    for mem in (16, 300):  # at or above tmp_size: the 16m tmpfs, one description
        body = dict(body, memoryMB=mem)
        b1 = hit(body, "tmp")
        b2 = run(COLD, body, "tmp")
        check(essentials(b1) == essentials(b2) and int(b1["stdout"]) == 16 << 10,
              "/tmp at tmp_size, as cold", (essentials(b1), essentials(b2)))


@S.case
def memory_watch_and_process_cap_as_cold():
    run(ON, {"command": ["true"]}, "force")
    cases = (
        ("oom at 48 MB (shared memory: the watch)",
         {"command": ["python3", "-c",
                      "import mmap\nk=[]\nwhile True:\n"
                      "    m=mmap.mmap(-1, 4<<20, flags=mmap.MAP_SHARED|mmap.MAP_ANONYMOUS)\n"
                      "    m.write(b'x'*(4<<20)); k.append(m)"],
          "memoryMB": 48, "timeoutSeconds": 30}),
        ("data limit at 64 MB",
         {"command": ["python3", "-c",
                      "try:\n    b=bytearray(100<<20)\nexcept MemoryError:\n"
                      "    print('MemoryError')"],
          "memoryMB": 64, "timeoutSeconds": 30}),
        ("a large limit lets it through",
         {"command": ["python3", "-c", "b=bytearray(100<<20); print(len(b))"],
          "memoryMB": 600, "timeoutSeconds": 30}),
        ("process cap",
         {"command": ["python3", "-c",
                      "import os, time\nn = 0\ntry:\n    for i in range(40):\n"
                      "        if os.fork() == 0:\n            time.sleep(3); os._exit(0)\n"
                      "        n += 1\nexcept OSError as e:\n    print(n, e.strerror)"],
          "pids": 10, "timeoutSeconds": 20}),
    )
    for name, body in cases:
        b1 = hit(body, "force")
        b2 = run(COLD, body, "force")
        if os.environ.get("POOL_SHOW"):
            print(name, essentials(b1))
        check(essentials(b1) == essentials(b2), name + ": the same pooled and cold",
              (essentials(b1), essentials(b2)))
        if name.startswith("process"):
            check(b1["stdout"].startswith("9 "), "capped at the task's own 10", b1)
        if name.startswith("oom"):
            check(b1["report"]["outcome"] == "oom", "killed by the watch at its own limit",
                  b1["report"])


SESS_BASE = BASE + "  memory_limit: 48m\n  pids_limit: 12\n"
SON = Daemon(os.path.join(TMP, "son"), TOKEN, config=config_file(
    TMP, "son.yaml", SESS_BASE + "pool:\n  enabled: true\n  max_idle: 2\n  sessions: 2\n"
    "  idle_timeout: 60s\n")).start()
SCOLD = Daemon(os.path.join(TMP, "scold"), TOKEN, config=config_file(
    TMP, "scold.yaml", SESS_BASE + "pool:\n  enabled: false\n")).start()


def session_run(d, clone, body):
    h = {"X-Tenant-Code": "prl", "X-Clone-Id": clone}
    st, b, _ = d.req("POST", "/runtime/start", {"sessionID": "s"}, headers=h, timeout=60)
    check(st == 200, "session started", (st, b))
    st, b, _ = d.req("POST", "/runtime/exec", dict(body, sessionID="s"), headers=h, timeout=60)
    check(st == 200, "session exec answers 200", (st, b))
    d.req("POST", "/runtime/stop", {"sessionID": "s"}, headers=h, timeout=60)
    return b


@S.case
def a_sessions_holder_from_the_pool_takes_the_sessions_limits():
    # The order to hold carries the limits as a command does: the holder's
    # memory watch and the session's process cap are the cold holder's.
    session_run(SON, "warm", {"command": ["true"]})  # the pool learns the description
    hog = {"command": ["python3", "-c",
                       "import mmap\nk=[]\nwhile True:\n"
                       "    m=mmap.mmap(-1, 4<<20, flags=mmap.MAP_SHARED|mmap.MAP_ANONYMOUS)\n"
                       "    m.write(b'x'*(4<<20)); k.append(m)"],
           "timeoutSeconds": 30}
    forks = {"command": ["python3", "-c",
                         "import os, time\nn = 0\ntry:\n    for i in range(40):\n"
                         "        if os.fork() == 0:\n            time.sleep(3); os._exit(0)\n"
                         "        n += 1\nexcept OSError as e:\n    print(n, e.strerror)"],
             "timeoutSeconds": 20}
    for i, body in enumerate((hog, forks, {"command": LIMITS})):
        deadline = time.monotonic() + 20
        while pool_status(SON)["idle"] < 1 or pool_status(SON)["building"]:
            check(time.monotonic() < deadline, "a pooled sandbox ready", pool_status(SON))
            time.sleep(0.05)
        before = pool_status(SON)
        b1 = session_run(SON, "sess%d" % i, body)
        after = pool_status(SON)
        check(after.get("sessionHits", 0) == before.get("sessionHits", 0) + 1,
              "the session's holder came from the pool", (before, after))
        b2 = session_run(SCOLD, "sess%d" % i, body)
        check(essentials(b1) == essentials(b2), "%d: the same in a pooled and a cold session" % i,
              (essentials(b1), essentials(b2)))
        if body is hog:
            check(b1["report"]["outcome"] == "oom", "the holder's watch at 48 MB", b1["report"])


def left_behind_hog(d, clone):
    """A session's task leaves a process that grows past the session's
    memory limit after the task has ended: only the holder's own watch (its
    init's, between tasks) sees it. Answers whether it was killed."""
    h = {"X-Tenant-Code": "prl", "X-Clone-Id": clone}
    st, b, _ = d.req("POST", "/runtime/start", {"sessionID": "s"}, headers=h, timeout=60)
    check(st == 200, "session started", (st, b))
    grow = ("import mmap, os, time\nopen('/tmp/hog.pid','w').write(str(os.getpid()))\n"
            "time.sleep(0.5)\nk=[]\nfor i in range(30):\n"
            "    m=mmap.mmap(-1, 4<<20, flags=mmap.MAP_SHARED|mmap.MAP_ANONYMOUS)\n"
            "    m.write(b'x'*(4<<20)); k.append(m); time.sleep(0.02)\ntime.sleep(60)")
    st, b, _ = d.req("POST", "/runtime/exec",
                     {"sessionID": "s", "command": ["/bin/sh", "-c",
                      "setsid python3 -c \"$0\" >/dev/null 2>&1 </dev/null & sleep 0.2", grow]},
                     headers=h, timeout=60)
    check(st == 200 and b.get("exitCode") == 0, "the task left its process", (st, b))
    time.sleep(3)
    st, b, _ = d.req("POST", "/runtime/exec",
                     {"sessionID": "s", "command": ["/bin/sh", "-c",
                      "kill -0 $(cat /tmp/hog.pid) 2>/dev/null && echo alive || echo gone"]},
                     headers=h, timeout=60)
    check(st == 200, "the session answers", (st, b))
    d.req("POST", "/runtime/stop", {"sessionID": "s"}, headers=h, timeout=60)
    return b.get("stdout", "").strip()


@S.case
def a_pooled_holders_own_watch_kills_what_grows_between_tasks():
    deadline = time.monotonic() + 20
    while pool_status(SON)["idle"] < 1 or pool_status(SON)["building"]:
        check(time.monotonic() < deadline, "a pooled sandbox ready", pool_status(SON))
        time.sleep(0.05)
    before = pool_status(SON)
    pooled = left_behind_hog(SON, "bg1")
    check(pool_status(SON).get("sessionHits", 0) == before.get("sessionHits", 0) + 1,
          "the session's holder came from the pool", (before, pool_status(SON)))
    cold = left_behind_hog(SCOLD, "bg1")
    check(pooled == cold == "gone", "killed by the holder's watch, pooled as cold",
          (pooled, cold))


ON.stop()
COLD.stop()
SON.stop()
SCOLD.stop()
S.finish()
