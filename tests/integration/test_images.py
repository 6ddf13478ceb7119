"""Environments from OCI images (issue 10): an OCI layout directory and a
`docker save` archive, both packed here (tarfile, hashlib, json) from
busybox-static, unpacked by the daemon's helper into its content-addressed
cache once; whiteouts (plain and opaque) and hard links; hostile layers
(`..`, a write through a symlink, absolute names, device nodes, a huge
entry, a hard link out of the root) refused or neutralised. Real daemons on
loopback with --net none, in temporary directories."""
import atexit
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from ocitest import docker_save, ent, oci_layout, tar_bytes  # noqa: E402
from sbxtest import EXTENDED, SANDBOXD, ServeDaemon, Suite, check  # noqa: E402

S = Suite("images")
TOKEN = "op-" + "0123456789abcdef0123456789abc"
_daemons = []
TMP = tempfile.mkdtemp(prefix="sbx-images-")
os.chmod(TMP, 0o755)
HOSTDIR = os.path.join(TMP, "host-target")  # what hostile layers aim at
os.makedirs(HOSTDIR)


@atexit.register
def _cleanup():
    for d in _daemons:
        try:
            d.stop()
        except Exception:  # noqa: BLE001 - a daemon that failed to start
            pass
    shutil.rmtree(TMP, ignore_errors=True)


def busybox_layer():
    with open("/bin/busybox", "rb") as f:
        bb = f.read()
    e = [ent("bin", "dir"), ent("bin/busybox", data=bb, mode=0o755)]
    e += [ent("bin/" + a, "sym", target="busybox") for a in ("sh", "ls", "cat", "echo", "test")]
    e += [ent("usr", "dir"), ent("usr/share", "dir"),
          ent("usr/share/marker", data=b"from-the-image\n"),
          ent("usr/share/old", data=b"lower\n"),
          ent("usr/share/opq", "dir"), ent("usr/share/opq/a", data=b"a\n"),
          ent("etc", "dir"), ent("etc/os-release", data=b"ID=image-test\n"),
          ent("usr/bin", "dir"), ent("usr/bin/suid", data=b"x", mode=0o4755)]
    return tar_bytes(e)


def upper_layer():
    return tar_bytes([ent("usr/share/.wh.old", data=b""),
                      ent("usr/share/opq/.wh..wh..opq", data=b""),
                      ent("usr/share/opq/b", data=b"b\n"),
                      ent("usr/share/linked", "hard", target="usr/share/marker")])


BASE = busybox_layer()
OCI = os.path.join(TMP, "oci")
OCI_DIGEST = oci_layout(OCI, [BASE, upper_layer()])
OCITAR = os.path.join(TMP, "oci-archive.tar")  # docker save (25+), podman --format oci-archive
with tarfile.open(OCITAR, "w") as _t:
    for _n in sorted(os.listdir(OCI)):
        _t.add(os.path.join(OCI, _n), arcname=_n)
SAVE = os.path.join(TMP, "save.tar")
SAVE_DIGEST = docker_save(SAVE, [BASE, upper_layer()])

HOSTILE = {
    "dotdot": [ent("../escaped", data=b"x")],
    "through_symlink": [ent("evil", "sym", target=HOSTDIR), ent("evil/pwned", data=b"x")],
    "absolute": [ent(HOSTDIR + "/abs", data=b"x")],
    "device": [ent("dev", "dir"), ent("dev/null", "chr"), ent("ok", data=b"ok\n")],
    "huge": [ent("big", "huge", size=100 << 30)],
    "hardlink_out": [ent("h", "hard", target="../../../../etc/passwd")],
    "hardlink_abs": [ent("h", "hard", target="/etc/passwd")],
}
HOSTILE_PATHS = {}
for name, entries in HOSTILE.items():
    p = os.path.join(TMP, "hostile-" + name)
    oci_layout(p, [BASE, tar_bytes(entries)], gz=(name != "huge"))
    HOSTILE_PATHS[name] = p

envs = "".join("  h_%s:\n    language: shell\n    image: %s\n" % (n, p)
               for n, p in HOSTILE_PATHS.items())
CONFIG = """
environments:
  oci:
    language: shell
    image: %s
  saved:
    language: shell
    image: %s
    read_only_rootfs: false
  ocitar:
    language: shell
    image: %s
%s""" % (OCI, SAVE, OCITAR, envs)
STATE = os.path.join(TMP, "state")
with open(os.path.join(TMP, "c.yaml"), "w") as f:
    f.write(CONFIG)
D = ServeDaemon(STATE, TOKEN, config=os.path.join(TMP, "c.yaml"), registry=_daemons)
D.start()


def env_status(d, timeout=60):
    """The status's environments by name once no image is being unpacked."""
    deadline = time.monotonic() + timeout
    while True:
        st, b, _ = d.req("GET", "/runtime/status", headers=EXTENDED)
        envs = {e["name"]: e for e in b.get("environments", [])} if st == 200 else {}
        if envs and all(e.get("imageState") != "unpacking" for e in envs.values()):
            return envs
        if time.monotonic() > deadline:
            raise AssertionError("images still unpacking: %r" % (b,))
        time.sleep(0.1)


ENVS = env_status(D)


def execute(env, code):
    return D.req("POST", "/execute", {"code": code, "env": env}, headers=EXTENDED, timeout=60)


@S.case
def oci_layout_is_the_tasks_root():
    e = ENVS["oci"]
    check(e["imageState"] == "ready" and e["digest"] == OCI_DIGEST, "ready, with its digest", e)
    st, b, _ = execute("oci", "cat /usr/share/marker /etc/os-release; "
                       "test -e /usr/bin/python3 && echo HOST-USR; ls /usr/share /usr/share/opq; "
                       "cat /usr/share/linked")
    check(st == 200 and b["return_code"] == 0, "ran", b)
    out = b["stdout"]
    check("from-the-image" in out and "ID=image-test" in out, "the image's files", b)
    check("HOST-USR" not in out, "not the host's /usr", b)
    check("old" not in out.split(), "a whiteout removed the lower layer's file", b)
    check("b" in out.split() and "a" not in out.split(), "an opaque directory", b)
    check(out.count("from-the-image") == 2, "the hard link inside", b)


@S.case
def docker_save_archive():
    e = ENVS["saved"]
    check(e["imageState"] == "ready" and e["digest"] == SAVE_DIGEST, "ready, with its id", e)
    st, b, _ = execute("saved", "cat /usr/share/marker; echo w > /usr/w && cat /usr/w")
    check(st == 200 and "from-the-image" in b["stdout"] and "w" in b["stdout"].split(),
          "ran, writable overlay", b)


@S.case
def oci_layout_in_an_archive():
    e = ENVS["ocitar"]
    check(e["imageState"] == "ready" and e["digest"] == OCI_DIGEST, "the same image", e)
    st, b, _ = execute("ocitar", "cat /usr/share/marker")
    check(st == 200 and b["stdout"] == "from-the-image\n", "ran", b)


@S.case
def cache_is_content_addressed_and_set_ids_dropped():
    root = os.path.join(STATE, "images", OCI_DIGEST[7:])
    check(os.path.isdir(root), "cached under its digest", os.listdir(os.path.join(STATE, "images")))
    st = os.stat(os.path.join(root, "usr", "bin", "suid"))
    check(not st.st_mode & 0o6000, "set-id bits dropped", oct(st.st_mode))
    check(st.st_uid == os.getuid(), "owned by the daemon's user", st.st_uid)


@S.case
def hostile_layers():
    for n in ("dotdot", "huge", "hardlink_out"):
        e = ENVS["h_" + n]
        check(e["imageState"] == "failed" and e.get("imageError"), n + " refused", e)
        st, b, _ = execute("h_" + n, "echo RAN")
        check(st != 200 and "image" in b["error"]["message"], n + ": no task runs", b)
    check(os.listdir(HOSTDIR) == [], "nothing written on the host", os.listdir(HOSTDIR))
    check(not os.path.exists(os.path.join(TMP, "escaped")), "no .. escape")
    # neutralised: the symlink is replaced (libarchive unlinks it rather
    # than write through it), an absolute name lands inside, a device node
    # is left out
    e = ENVS["h_through_symlink"]
    if e["imageState"] == "ready":
        root = os.path.join(STATE, "images", e["digest"][7:])
        check(not os.path.islink(os.path.join(root, "evil")) and
              os.path.isfile(os.path.join(root, "evil", "pwned")), "written inside the root")
    check(os.listdir(HOSTDIR) == [], "nothing written through the symlink", os.listdir(HOSTDIR))
    e = ENVS["h_absolute"]
    check(e["imageState"] == "ready", "absolute names made relative", e)
    root = os.path.join(STATE, "images", e["digest"][7:])
    check(os.path.isfile(root + HOSTDIR + "/abs"), "inside the root", root)
    e = ENVS["h_device"]
    check(e["imageState"] == "ready", "device node image usable", e)
    root = os.path.join(STATE, "images", e["digest"][7:])
    check(not os.path.exists(os.path.join(root, "dev", "null")) and
          os.path.isfile(os.path.join(root, "ok")), "the device node left out")
    e = ENVS["h_hardlink_abs"]
    root = os.path.join(STATE, "images", e.get("digest", "sha256:")[7:])
    check(e["imageState"] == "failed" or not os.path.samefile(os.path.join(root, "h"),
                                                              "/etc/passwd"),
          "an absolute hard link never reaches the host's file", e)


@S.case
def unpacked_once():
    root = os.path.join(STATE, "images", OCI_DIGEST[7:])
    before = os.stat(root).st_ino
    D.stop()
    D.start()
    envs = env_status(D)
    check(envs["oci"]["imageState"] == "ready", "ready again", envs["oci"])
    check(os.stat(root).st_ino == before, "the cache was kept, not unpacked again")


@S.case
def doctor_lists_images():
    cfg = os.path.join(TMP, "doctor.yaml")
    with open(cfg, "w") as f:
        f.write("server:\n  state_dir: %s\n%s" % (STATE, CONFIG))
    p = subprocess.run([SANDBOXD, "doctor", "--json", "--config", cfg], capture_output=True,
                       text=True, timeout=60)
    envs = {e["name"]: e for e in json.loads(p.stdout)["environments"]}
    check(envs["oci"]["digest"] == OCI_DIGEST and envs["oci"]["unpacked"] is True, "oci",
          envs["oci"])
    check(envs["saved"]["digest"] == SAVE_DIGEST and envs["saved"]["readOnlyRootfs"] is False,
          "saved", envs["saved"])
    p = subprocess.run([SANDBOXD, "doctor", "--config", cfg], capture_output=True, text=True,
                       timeout=60)
    check(("image %s: %s (unpacked)" % (OCI, OCI_DIGEST)) in p.stdout, "text", p.stdout[-1500:])


S.finish()
