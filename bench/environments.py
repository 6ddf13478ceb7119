#!/usr/bin/env python3
"""What an environment's own root costs per task: POST /execute of `:` (the
shell's no-op), one client, interleaved round-robin over
  shell    the host's /usr (the default),
  rootfs   a busybox-static directory (rootfs: DIR),
  overlay  the same with read_only_rootfs: false (tmpfs overlays),
  image    an OCI layout of it (image:), once unpacked,
  mounts   the host's /usr plus one writable mount made per task,
and how long the daemon's helper took to unpack the image (first status poll
that saw it ready). Everything in a temporary directory; --net none.
Usage: SANDBOXD=build/sandboxd python3 bench/environments.py [ROUNDS]"""
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from ocitest import busybox_tree, ent, oci_layout, tar_bytes  # noqa: E402
from sbxtest import EXTENDED, ServeDaemon  # noqa: E402

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
TOKEN = "bench-" + "0" * 26


def main():
    tmp = tempfile.mkdtemp(prefix="sbx-bench-envs-")
    os.chmod(tmp, 0o755)
    d = None
    try:
        root = os.path.join(tmp, "rootfs")
        busybox_tree(root)
        with open("/bin/busybox", "rb") as f:
            bb = f.read()
        layer = tar_bytes([ent("bin", "dir"), ent("bin/busybox", data=bb, mode=0o755),
                           ent("bin/sh", "sym", target="busybox")])
        oci = os.path.join(tmp, "oci")
        oci_layout(oci, [layer])
        mroot = os.path.join(tmp, "mroot")
        os.makedirs(mroot)
        cfg = os.path.join(tmp, "c.yaml")
        with open(cfg, "w") as f:
            f.write("sandbox:\n  mount_roots: [%s]\nenvironments:\n"
                    "  rootfs: {language: shell, rootfs: %s}\n"
                    "  overlay: {language: shell, rootfs: %s, read_only_rootfs: false}\n"
                    "  image: {language: shell, image: %s}\n"
                    "  mounts:\n    language: shell\n    mounts:\n"
                    "      - {source: \"%s/{{.TaskID}}\", target: /data, writable: true}\n"
                    % (mroot, root, root, oci, mroot))
        d = ServeDaemon(os.path.join(tmp, "state"), TOKEN, config=cfg)
        t0 = time.monotonic()
        d.start()
        while True:
            st, b, _ = d.req("GET", "/runtime/status", headers=EXTENDED)
            e = {x["name"]: x for x in b.get("environments", [])}.get("image", {})
            if e.get("imageState") != "unpacking":
                break
            time.sleep(0.005)
        print("image %s after %.0f ms from the daemon's start (start included)"
              % (e.get("imageState"), (time.monotonic() - t0) * 1000))
        envs = ["shell", "rootfs", "overlay", "image", "mounts"]
        times = {n: [] for n in envs}
        for _ in range(ROUNDS):
            for n in envs:
                s = time.monotonic()
                st, b, _ = d.req("POST", "/execute", {"code": ":", "env": n})
                times[n].append((time.monotonic() - s) * 1000)
                if st != 200 or b.get("return_code") != 0:
                    raise SystemExit("%s: %r %r" % (n, st, b))
        print("load average: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
        print("%-8s %8s %8s %8s   (ms, %d tasks each)" % ("env", "p50", "p90", "p99", ROUNDS))
        for n in envs:
            q = statistics.quantiles(times[n], n=100)
            print("%-8s %8.2f %8.2f %8.2f" % (n, statistics.median(times[n]), q[89], q[98]))
    finally:
        if d:
            d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
