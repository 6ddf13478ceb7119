#!/usr/bin/env python3
"""Boots Debian 12's kernel in qemu with a cgroup v2-only hierarchy
(cgroup_no_v1=all) and runs a job there: by default the daemon's cgroup v2
tests (tests/vm/job.sh), with the sandboxd and helpers of the build under
test. The guest's root is this machine's / read-only over virtio-9p (under a
tmpfs overlay); it has no network device (-nic none); its output and exit
code come back through a 9p share in a temporary folder.

KVM is used when /dev/kvm answers (nested virtualisation), qemu's TCG
otherwise; the log says which.

Usage: run.py [--timeout S] [job.sh]    (SANDBOXD and SBX_HELPERS as ctest sets)"""
import fcntl
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def kvm_usable():
    """Can this process make a KVM virtual machine (not just open /dev/kvm)?"""
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if fcntl.ioctl(fd, 0xAE00) != 12:  # KVM_GET_API_VERSION
            return False
        vm = fcntl.ioctl(fd, 0xAE01, 0)  # KVM_CREATE_VM
        os.close(vm)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def wait_console(path, proc, seconds):
    """Has the kernel printed its banner to the console file in time?"""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with open(path, errors="replace") as f:
                if "Linux version" in f.read(4096):
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def stop(proc):
    """Our qemu, by its pid."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def main():
    args = sys.argv[1:]
    timeout = 900
    if args[:1] == ["--timeout"]:
        timeout = int(args[1])
        args = args[2:]
    job = args[0] if args else os.path.join(HERE, "job.sh")
    sandboxd = os.path.abspath(os.environ.get("SANDBOXD") or
                               os.path.join(ROOT, "build", "sandboxd"))
    helpers = os.path.abspath(os.environ.get("SBX_HELPERS") or
                              os.path.join(os.path.dirname(sandboxd), "helpers"))
    cache = subprocess.run([os.path.join(HERE, "kernel.sh")], check=True, text=True,
                           stdout=subprocess.PIPE, timeout=600).stdout.strip()
    kdir = os.path.join(cache, "kernel")
    kver = os.listdir(os.path.join(kdir, "lib", "modules"))[0]
    initrd = [f for f in os.listdir(cache) if f.startswith("initramfs-") and f.endswith(".gz")][0]
    out = tempfile.mkdtemp(prefix="sbx-vm-")
    qemu = None
    try:
        with open(os.path.join(out, "job.sh"), "w") as f:
            f.write("export SANDBOXD=%s SBX_HELPERS=%s SBX_SRC=%s SBX_VM_ACCEL=%s\n" % (
                shlex.quote(sandboxd), shlex.quote(helpers), shlex.quote(ROOT),
                "see-log"))
            if os.environ.get("SBX_VM_TESTS"):
                f.write("export SBX_VM_TESTS=%s\n" % shlex.quote(os.environ["SBX_VM_TESTS"]))
            with open(job) as j:  # (the guest's /tmp is its own)
                f.write(j.read())
        console = os.path.join(out, "console.log")
        share = "security_model=passthrough,multidevs=remap"
        cmd = ["qemu-system-x86_64", "-nodefaults", "-display", "none", "-no-reboot",
               "-machine", "q35", "-m", "3072", "-smp", str(min(os.cpu_count() or 1, 4)),
               "-nic", "none", "-serial", "file:" + console,
               "-kernel", os.path.join(kdir, "boot", "vmlinuz-" + kver),
               "-initrd", os.path.join(cache, initrd),
               "-append", "console=ttyS0 cgroup_no_v1=all panic=-1 loglevel=4 "
                          "sbx_guest=" + os.path.join(HERE, "guest.sh"),
               "-virtfs", "local,path=/,mount_tag=hostroot,readonly=on," + share,
               "-virtfs", "local,path=%s,mount_tag=out,%s" % (out, share),
               "-virtfs", "local,path=%s,mount_tag=modules,readonly=on,%s" % (
                   os.path.join(kdir, "lib", "modules", kver), share)]
        t0 = time.monotonic()
        qemu, accel = None, "TCG (no /dev/kvm that makes VMs)"
        if kvm_usable():
            # /dev/kvm may make VMs whose CPUs never run (nested virtualisation
            # that does not work): a kernel that says nothing in 10 s is given
            # up for TCG.
            qemu = subprocess.Popen(cmd + ["-accel", "kvm", "-cpu", "host"],
                                    stdin=subprocess.DEVNULL)
            if wait_console(console, qemu, 10):
                accel = "KVM"
            else:
                stop(qemu)
                qemu, accel = None, "TCG (KVM booted nothing in 10 s)"
                os.unlink(console)
        if qemu is None:
            qemu = subprocess.Popen(cmd + ["-accel", "tcg", "-cpu", "max"],
                                    stdin=subprocess.DEVNULL)
        print("vm: qemu (pid %d) with %s, kernel %s, timeout %ds" % (qemu.pid, accel, kver,
                                                                    timeout), flush=True)
        try:
            qemu.wait(timeout=max(1, timeout - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            print("vm: timed out after %ds: killing qemu (pid %d)" % (timeout, qemu.pid))
            stop(qemu)
        print("vm: qemu ended (%s) after %.0fs" % (qemu.returncode, time.monotonic() - t0))
        log = os.path.join(out, "log")
        if os.path.exists(log):
            with open(log, errors="replace") as f:
                sys.stdout.write(f.read())
        else:
            with open(console, errors="replace") as f:
                sys.stdout.write("vm: no job log; the console:\n" + f.read()[-20000:])
        rc_path = os.path.join(out, "rc")
        if not os.path.exists(rc_path):
            print("vm: the job did not finish")
            return 1
        with open(rc_path) as f:
            rc = int(f.read().strip() or "1")
        print("vm: job exit code %d" % rc)
        return rc
    finally:
        if qemu and qemu.poll() is None:
            os.kill(qemu.pid, signal.SIGKILL)
            qemu.wait()
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
