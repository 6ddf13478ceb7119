"""deploy/docker for real: the base images made from the Debian archive
(debootstrap + docker import, the tarball cached in /var/cache/sandbox-tests),
our image built with `docker build --network none`, then in containers with
the minimum options of docs/deployment.md: doctor (and what it says when an
option is missing), `run` (--net none, --net proxy, the rlimit fallback with
cgroups read-only), an oom, `serve` with an API smoke through a port published
on 127.0.0.1, SIGTERM (exit 0, loop devices released), compose up / smoke /
restart (state kept) / down, and podman.

Never off this machine: `--network none` wherever no port is needed; the
bridges of serve and compose drop every packet leaving them
(DOCKER-USER -i BR ! -o BR -j DROP, removed afterwards), their ports are
published on 127.0.0.1 only; nothing is pulled. dockerd is started here when
none runs, and only that one is stopped (by its pid). Every container, image,
network and rule made here is removed; the base tarballs stay cached."""
import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from sbxtest import Suite, check  # noqa: E402

S = Suite("deploy-docker")
DOCKER = "/usr/bin/docker" if os.path.exists("/usr/bin/docker") else shutil.which("docker")
RUN_ID = str(os.getpid())
TAG = f"sandbox-test-{RUN_ID}:dev"
TOKEN = "deploy-test-token-0123456789"
CAPS_RUN = ["--cap-drop", "ALL", "--cap-add", "SYS_ADMIN", "--cap-add", "SETUID",
            "--cap-add", "SETGID", "--cap-add", "CHOWN"]
CAPS_SERVE = CAPS_RUN + ["--cap-add", "DAC_OVERRIDE", "--cap-add", "FOWNER",
                         "--cap-add", "MKNOD",
                         "--device", "/dev/loop-control",
                         "--device-cgroup-rule", "b 7:* rwm"]
UNCONFINED = ["--security-opt", "seccomp=unconfined"]
TMP = tempfile.mkdtemp(prefix="sbx-deploy-")
made = {"containers": [], "images": [], "networks": [], "rules": [], "podman_images": [],
        "compose": []}
dockerd = None


def _cleanup_at_exit():
    cleanup()


atexit.register(_cleanup_at_exit)


def sh(cmd, timeout=300, check_rc=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check_rc and p.returncode != 0:
        raise AssertionError(f"{cmd!r} exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def docker(*args, timeout=300, check_rc=True, **kw):
    return sh([DOCKER, *args], timeout=timeout, check_rc=check_rc, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(port, method, path, body=None, timeout=20):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Authorization": f"Bearer {TOKEN}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def wait_ready(port, timeout=60):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            st, body = http(port, "GET", "/readyz", timeout=2)
            if st == 200:
                return body
            last = (st, body)
        except OSError as e:
            last = e
        time.sleep(0.3)
    raise AssertionError(f"not ready on 127.0.0.1:{port} in {timeout}s: {last!r}")


def closed_bridge(name):
    """A rule that drops whatever would leave bridge `name` (in place before
    the bridge exists), removed at the end."""
    rule = ["DOCKER-USER", "-i", name, "!", "-o", name, "-j", "DROP"]
    sh(["iptables", "-I", *rule])
    made["rules"].append(rule)


# ---- the engine and the images ----

def start_dockerd():
    global dockerd
    if docker("info", timeout=30, check_rc=False).returncode == 0:
        return
    log = open(os.path.join(TMP, "dockerd.log"), "w")
    dockerd = subprocess.Popen(["dockerd", "--pidfile", os.path.join(TMP, "dockerd.pid")],
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if docker("info", timeout=30, check_rc=False).returncode == 0:
            return
        check(dockerd.poll() is None, "dockerd started", open(log.name).read()[-2000:])
        time.sleep(0.5)
    raise AssertionError("dockerd not answering in 60 s")


def base_image(kind):
    existed = docker("image", "inspect", f"sandbox{'-build' if kind == 'build' else ''}"
                     "-base:bookworm", check_rc=False).returncode == 0
    name = sh([os.path.join(ROOT, "deploy/docker/base-image.sh"), kind], timeout=1200).stdout.strip()
    if not existed:
        made["images"].append(name)
    return name


timings = {}


@S.case
def image_builds_without_a_registry():
    for tool in ("dockerd", "docker-compose", "podman", "debootstrap", "iptables"):
        check(shutil.which(tool) or os.path.exists(f"/usr/sbin/{tool}"), f"{tool} installed "
              "(scripts/deps.sh)")
    check(DOCKER, "docker installed (scripts/deps.sh)")
    start_dockerd()
    t0 = time.monotonic()
    runtime, build = base_image("runtime"), base_image("build")
    timings["bases"] = time.monotonic() - t0
    t0 = time.monotonic()
    check((runtime, build) == ("sandbox-base:bookworm", "sandbox-build-base:bookworm"),
          "the Dockerfile's default bases", (runtime, build))
    # The documented command (docker build -t sandbox:dev .) in the
    # repository's root, with our tag and no network.
    made["images"].insert(0, TAG)
    docker("build", "--network", "none", "--build-arg", f"BUILD_ID={RUN_ID}", "-t", TAG, ".",
           cwd=ROOT, timeout=1200)
    timings["build"] = time.monotonic() - t0
    ep = json.loads(docker("image", "inspect", TAG).stdout)[0]["Config"]
    check(ep["Entrypoint"] == ["/usr/local/bin/sandbox-entrypoint"], "entrypoint", ep)
    check("8080/tcp" in ep["ExposedPorts"], "port 8080", ep)
    # The build-time check of the libraries is real: in a copy of the image
    # without libmicrohttpd (loaded with dlopen, so ldd cannot see it) it fails.
    p = docker("run", "--rm", "--network", "none", "--entrypoint", "sh", TAG, "-c",
               "rm -f /usr/lib/x86_64-linux-gnu/libmicrohttpd.so.12* && ldconfig && "
               "sh /usr/local/lib/sandbox/check-libs.sh", check_rc=False)
    check(p.returncode != 0 and "libmicrohttpd.so.12" in p.stderr, "missing library caught", p)


def crun(*args, opts=(), timeout=120, check_rc=False):
    """One container, removed after, with no network."""
    return docker("run", "--rm", "--network", "none", *opts, TAG, *args, timeout=timeout,
                  check_rc=check_rc)


# ---- doctor ----

@S.case
def doctor_in_container_tells_the_truth():
    p = crun("doctor", "--json", opts=CAPS_RUN + UNCONFINED)
    check(p.returncode == 0, "full isolation with the minimum", p)
    d = json.loads(p.stdout)
    st = {s["step"]: s for s in d["steps"]}
    check(d["inContainer"] is True, "knows it is in a container", d)
    for name in ("user namespace", "id map", "other namespaces", "user limits", "mount tmpfs",
                 "mount procfs", "pivot_root", "cgroup write", "seccomp load"):
        check(st[name]["state"] == "ok", f"{name} ok", st[name])
    check(st["loop device"]["state"] == "failed" and "--device /dev/loop-control"
          in st["loop device"]["fix"], "no loop devices for run: said, with the flag", st)
    # Docker's own seccomp profile: pivot_root refused, and doctor says which option.
    p = crun("doctor", "--json", opts=CAPS_RUN)
    check(p.returncode == 1, "not full under Docker's default seccomp profile", p)
    st = {s["step"]: s for s in json.loads(p.stdout)["steps"]}
    check(st["pivot_root"]["state"] == "failed" and
          "--security-opt seccomp=unconfined" in st["pivot_root"]["fix"], "pivot_root + fix", st)
    # No SYS_ADMIN: the first namespace is refused, the fix names the capability.
    p = crun("doctor", opts=["--cap-drop", "ALL", "--cap-add", "SETUID", "--cap-add", "SETGID"]
             + UNCONFINED)
    check(p.returncode == 1 and "full isolation NOT possible" in p.stdout, "verdict", p)
    check("--cap-add SYS_ADMIN" in p.stdout and "user namespace:" in p.stdout, "fix named", p)
    # Docker's masked /proc without the entrypoint's spare procfs.
    p = crun("-c", "exec sandboxd doctor --json",
             opts=CAPS_RUN + UNCONFINED + ["--entrypoint", "sh"])
    check(p.returncode == 1, "not full with the masked /proc", p)
    st = {s["step"]: s for s in json.loads(p.stdout)["steps"]}
    check(st["user limits"]["state"] == "failed" and "/proc/sys/user" in st["user limits"]["fix"],
          "read-only /proc/sys/user found", st["user limits"])
    check(st["mount procfs"]["state"] == "failed" and
          "systempaths=unconfined" in st["mount procfs"]["fix"], "masked /proc found", st)


# ---- run ----

def report_of(p):
    return json.loads(p.stderr.strip().splitlines()[-1])


@S.case
def run_none_and_proxy():
    p = crun("run", "--net", "none", "--report", "-", "--", "sh", "-c",
             "id -u; python3 -c 'print(6*7)'; cat /proc/1/cmdline | tr -d '\\0'; echo",
             opts=CAPS_RUN + UNCONFINED)
    check(p.returncode == 0, "exit 0", p)
    out = p.stdout.split("\n")
    check(out[0] == "10001" and out[1] == "42", "runs as the runner, python present", p.stdout)
    rep = report_of(p)
    check(rep["outcome"] == "exited" and rep["limits"]["enforcedBy"] == "cgroup" and
          rep["cgroupMode"] == "v1", "cgroups held (entrypoint remounted them)", rep)
    p = crun("run", "--net", "proxy", "--report", "-", "--", "sh", "-c", "echo $ALL_PROXY",
             opts=CAPS_RUN + UNCONFINED)
    check(p.returncode == 0 and p.stdout.startswith("socks5h://127.0.0.1:1080"), "proxy", p)
    check(report_of(p)["network"]["policy"] == "proxy", "policy proxy", p.stderr)


@S.case
def run_rlimit_fallback_with_cgroups_read_only():
    opts = CAPS_RUN + UNCONFINED + ["-e", "SANDBOX_CGROUP_RW=0"]
    p = crun("run", "--net", "none", "--pids", "8", "--report", "-", "--", "sh", "-c",
             "echo ok", opts=opts)
    check(p.returncode == 0 and p.stdout == "ok\n", "runs", p)
    rep = report_of(p)
    check(rep["limits"]["enforcedBy"] == "rlimit" and rep["cgroupMode"] == "rlimit",
          "rlimit mode", rep)
    p = crun("doctor", "--json", opts=opts)
    d = json.loads(p.stdout)
    st = {s["step"]: s for s in d["steps"]}["cgroup write"]
    check(st["state"] == "failed" and st["error"].startswith("EROFS") and "remount" in st["fix"],
          "doctor: read-only cgroups, the remount named", st)
    check(d["isolation"]["limits"] == "rlimit", "plan says rlimit", d["isolation"])


@S.case
def oom_is_reported():
    p = crun("run", "--net", "none", "--memory", "48M", "--report", "-", "--", "python3", "-c",
             "b = [bytearray(1 << 20) for _ in range(400)]", opts=CAPS_RUN + UNCONFINED)
    rep = report_of(p)
    check(rep["oomKilled"] is True and p.returncode == 137, "killed by the oom, reported", rep)


# ---- serve ----

def loops_backed_by(directory):
    """Loop devices whose backing file is one of the files under directory
    (matched by device and inode: the container's paths differ from ours)."""
    ids = set()
    for dirpath, _, files in os.walk(directory):
        for f in files:
            st = os.stat(os.path.join(dirpath, f))
            ids.add((st.st_dev, st.st_ino))
    found = []
    for dev in os.listdir("/sys/block"):
        if not dev.startswith("loop"):
            continue
        try:
            with open(f"/sys/block/{dev}/loop/backing_file"):
                pass
        except OSError:
            continue
        p = subprocess.run(["losetup", "-O", "BACK-MAJ:MIN,BACK-INO", "-n", f"/dev/{dev}"],
                           capture_output=True, text=True, timeout=10)
        for line in p.stdout.splitlines():
            majmin, ino = line.split()
            maj, mnr = (int(x) for x in majmin.split(":"))
            if (os.makedev(maj, mnr), int(ino)) in ids:
                found.append(dev)
    return found


@S.case
def serve_api_smoke_and_sigterm():
    bridge, net = f"sbxt{RUN_ID}", f"sbxt-{RUN_ID}"
    closed_bridge(bridge)
    docker("network", "create", "-o", f"com.docker.network.bridge.name={bridge}", net)
    made["networks"].append(net)
    ws, state = os.path.join(TMP, "serve-ws"), os.path.join(TMP, "serve-state")
    os.makedirs(ws), os.makedirs(state)
    name = f"sbxt-serve-{RUN_ID}"
    made["containers"].append(name)
    docker("run", "-d", "--name", name, "--network", net, "-p", "127.0.0.1::8080",
           *CAPS_SERVE, *UNCONFINED, "-e", f"CLAW_API_TOKEN={TOKEN}",
           "-e", "CLAW_TENANT_CODE=t1", "-e", "CLAW_CLONE_KEY=clone-a", "-e", "CLAW_CLONE_ID=c1",
           "-e", "CLAW_ENABLE_SANDBOX_NET=true",
           "-v", f"{ws}:/workspace", "-v", f"{state}:/var/lib/sandbox", TAG)
    port = int(docker("port", name, "8080").stdout.split(":")[-1])
    wait_ready(port)
    st, body = http(port, "POST", "/runtime/exec",
                    {"command": ["sh", "-c", "echo from-sandbox > task.txt; pwd; "
                                             "test -e /runtime/control && echo control-visible; true"]})
    check(st == 200 and body["exitCode"] == 0 and body["stdout"].startswith("/workspace\n"),
          "exec through the published port", body)
    check("control" not in body["stdout"], "control directory not visible to the task", body)
    # The egress without SYS_PTRACE: the daemon (pid 1) lacks it, and a dozen
    # proxy tasks in a row each get their egress (its netns opened in time).
    p = docker("exec", name, "grep", "^CapEff:", "/proc/1/status")
    eff = int(p.stdout.split()[1], 16)
    check(not eff & (1 << 19) and eff & (1 << 21), "the daemon runs without SYS_PTRACE", p.stdout)
    for i in range(12):
        st, body = http(port, "POST", "/runtime/exec",
                        {"command": ["sh", "-c", "echo proxy=${HTTP_PROXY:-none}"]})
        check(st == 200 and body["exitCode"] == 0 and
              body["stdout"].startswith("proxy=http://"), f"proxy task {i}: its egress", body)
    # The seed's layout: <root>/<tenant>/<cloneKey>/<cloneId>/work. The clone's
    # files live in its workspace image (the quota), mounted there inside the
    # container: the host directory is its mount point.
    check(os.path.isdir(os.path.join(ws, "t1", "clone-a", "c1", "work")), "clone directory",
          list(os.walk(ws)))
    p = docker("exec", name, "cat", "/workspace/t1/clone-a/c1/work/task.txt")
    check(p.stdout == "from-sandbox\n", "the task's file in the clone's workspace", p)
    st, body = http(port, "GET", "/runtime/status")
    check(st == 200, "status", body)
    loops = loops_backed_by(state)
    check(loops, "the workspace is on a loop device", os.listdir(state))
    docker("kill", "-s", "TERM", name)
    rc = docker("wait", name, timeout=60).stdout.strip()
    check(rc == "0", "SIGTERM: exit 0", docker("logs", name, check_rc=False).stderr[-2000:])
    deadline = time.monotonic() + 10
    while loops_backed_by(state) and time.monotonic() < deadline:
        time.sleep(0.2)
    check(not loops_backed_by(state), "loop devices released", loops)


# ---- compose ----

def compose(*args, env_file, project, timeout=600):
    t0 = time.monotonic()
    try:
        return sh(["docker-compose", "-p", project, "--env-file", env_file, *args],
              cwd=os.path.join(ROOT, "deploy", "docker"), timeout=timeout)
    finally:
        print(f"  docker-compose {args[0]}: {time.monotonic() - t0:.1f}s")


@S.case
def compose_up_restart_down():
    project, bridge, net = f"sbxc{RUN_ID}", f"sbxc{RUN_ID}", f"sbxc-net-{RUN_ID}"
    port = free_port()
    d = os.path.join(TMP, "compose")
    dirs = {k: os.path.join(d, k) for k in ("workspace", "control", "skills-state",
                                            "skills-mapped", "skills-shared")}
    for p in dirs.values():
        os.makedirs(p)
    env = open(os.path.join(ROOT, "deploy/docker/.env.example")).read()
    env += "".join(f"{k}={v}\n" for k, v in {
        "CLAW_API_TOKEN": TOKEN, "SANDBOX_IMAGE": TAG, "SANDBOX_PORT": port,
        "SANDBOX_DOCKER_NETWORK": net, "SANDBOX_BRIDGE": bridge,
        "SANDBOX_WORKSPACE_DIR": dirs["workspace"], "SANDBOX_CONTROL_DIR": dirs["control"],
        "SANDBOX_STATE_DIR": dirs["skills-state"],
        "SANDBOX_MAPPED_SKILLS_DIR": dirs["skills-mapped"],
        "SANDBOX_SHARED_SKILLS_DIR": dirs["skills-shared"],
        "SANDBOX_BUILD_ID": RUN_ID}.items())
    env_file = os.path.join(d, ".env")
    open(env_file, "w").write(env)
    closed_bridge(bridge)
    made["compose"].append((env_file, project))
    # The image is the one built above (SANDBOX_IMAGE): compose v1's own build
    # context misses the layer cache of `docker build` and would compile again.
    compose("up", "-d", env_file=env_file, project=project)
    ps = compose("ps", env_file=env_file, project=project).stdout
    check("Up" in ps, "compose ps: up", ps)
    wait_ready(port)
    st, body = http(port, "POST", "/runtime/exec", {"command": ["sh", "-c", "echo kept > k.txt"]})
    check(st == 200 and body["exitCode"] == 0, "exec", body)
    st, body = http(port, "POST", "/runtime/tasks", {"command": ["sh", "-c", "echo a task"]})
    check(st in (200, 201, 202) and body.get("id"), "task accepted", body)
    tid = body["id"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        st, t = http(port, "GET", f"/runtime/tasks/{tid}")
        if t.get("status") in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.3)
    check(t.get("status") == "succeeded", "task succeeded", t)
    nets = json.loads(docker("inspect", f"{project}_sandbox_1").stdout)[0]["NetworkSettings"][
        "Networks"]
    check(list(nets) == [net], "only on its own network", list(nets))
    compose("restart", env_file=env_file, project=project)
    wait_ready(port)
    st, t = http(port, "GET", f"/runtime/tasks/{tid}")
    check(st == 200 and t.get("status") == "succeeded", "the task's record kept across restart", t)
    st, body = http(port, "POST", "/runtime/exec", {"command": ["cat", "k.txt"]})
    check(st == 200 and body["stdout"] == "kept\n", "the workspace kept across restart", body)
    compose("down", "-v", "--remove-orphans", env_file=env_file, project=project)
    made["compose"].remove((env_file, project))
    check(docker("network", "inspect", net, check_rc=False).returncode != 0,
          "its network removed by down")


# ---- podman ----

@S.case
def podman_runs_it():
    save = subprocess.Popen([DOCKER, "save", TAG], stdout=subprocess.PIPE)
    load = sh(["podman", "load"], stdin=save.stdout, timeout=300)
    save.stdout.close()
    check(save.wait(timeout=60) == 0, "docker save")
    loaded = [l.split(":", 1)[1].strip() for l in load.stdout.splitlines()
              if l.startswith("Loaded image")]
    check(loaded, "podman loaded the image", load.stdout)
    loaded = loaded[0].split(",")[0].strip()
    made["podman_images"].append(loaded)
    pod = ["podman", "--cgroup-manager", "cgroupfs", "--events-backend", "file"]
    # Explicit limits: podman's own (1048576 open files, 4194304 processes)
    # are above what a host whose root lacks CAP_SYS_RESOURCE may set.
    # podman's seccomp profile allows pivot_root: no seccomp option needed.
    p = sh([*pod, "run", "--rm", "--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096", *CAPS_RUN, loaded, "run", "--net", "none",
            "--report", "-", "--", "sh", "-c", "echo in-podman"], timeout=120, check_rc=False)
    check(p.returncode == 0 and p.stdout == "in-podman\n", "run under podman", p)
    check(json.loads(p.stderr.strip().splitlines()[-1])["outcome"] == "exited", "report", p)


# ---- clean-up: only what this test made ----

def cleanup():
    for env_file, project in made["compose"]:
        subprocess.run(["docker-compose", "-p", project, "--env-file", env_file, "down", "-v",
                        "--remove-orphans"], cwd=os.path.join(ROOT, "deploy", "docker"),
                       capture_output=True, timeout=120)
    for c in made["containers"]:
        docker("rm", "-f", c, check_rc=False, timeout=60)
    for n in made["networks"]:
        docker("network", "rm", n, check_rc=False, timeout=60)
    for img in made["podman_images"]:
        subprocess.run(["podman", "rmi", "-f", img], capture_output=True, timeout=120)
    for img in made["images"]:
        docker("rmi", img, check_rc=False, timeout=120)
    # the untagged build stages of this run's builds (ours and compose's)
    docker("image", "prune", "-f", "--filter", f"label=org.sandbox.build-id={RUN_ID}",
           check_rc=False, timeout=120)
    for rule in made["rules"]:
        subprocess.run(["iptables", "-D", *rule], capture_output=True, timeout=30)
    if dockerd is not None:
        dockerd.send_signal(signal.SIGTERM)
        try:
            dockerd.wait(timeout=60)
        except subprocess.TimeoutExpired:
            dockerd.kill()
            dockerd.wait()
    shutil.rmtree(TMP, ignore_errors=True)



S.finish()
