#!/usr/bin/env python3
"""Where the CPU goes during bench/api.sh's load: reads `perf script -F
comm,pid,period,ip,sym,dso` of a system-wide `perf record -a -g` and prints

  1. the machine's samples by process kind (the daemon's event loop, the
     daemon's forked children before they exec init, init, the task, kernel
     workers, idle, everything else);
  2. the daemon's own samples by what it was doing: the kernel entry (syscall,
     with clone3 split into its namespace, mm and other parts; page faults), or
     the user-space object of the leaf frame (the daemon, SQLite, jansson,
     libmicrohttpd, libevent, libc).

User-space stacks are not walked (the libraries have no frame pointers); kernel
stacks are. With TASKS (the tasks completed while recording), the CPU time of
each line is also given per task. Usage: api_perf.py DAEMON_PID [TASKS] < perf-script
"""
import collections
import sys

daemon = sys.argv[1]
tasks = int(sys.argv[2]) if len(sys.argv) > 2 else 0


def samples(f):
    head, frames = None, []
    for line in f:
        line = line.rstrip("\n")
        if not line.strip():
            if head is not None:
                yield head, frames
            head, frames = None, []
        elif head is None:
            head = line.split()
        else:
            parts = line.split(None, 1)
            rest = parts[1] if len(parts) > 1 else ""
            sym, _, dso = rest.rpartition(" (")
            frames.append((sym.split("+")[0], dso.rstrip(")")))
    if head is not None:
        yield head, frames


def kind(comm, pid):
    if pid == daemon:
        return "daemon (event loop)"
    if comm == "sandboxd":
        return "daemon's children before exec (sandbox set-up)"
    if comm.startswith("memfd:sandbox"):
        return "sandbox init (pid 1 of the sandbox)"
    if comm == "true":
        return "the task (/bin/true)"
    if comm == "api_load":
        return "load generator"
    if comm.startswith("kworker") or comm.startswith("rcu") or comm.startswith("ksoftirqd") \
            or comm.startswith("migration") or comm.startswith("kthreadd"):
        return "kernel threads (" + comm.split("/")[0] + ")"
    if comm == "swapper":
        return "idle"
    return "other processes (not the bench)"


CLONE_PARTS = [("copy_net_ns", "clone3: new network namespace"),
               ("copy_mnt_ns", "clone3: new mount namespace (copy of the mount tree)"),
               ("create_new_namespaces", "clone3: other namespaces"),
               ("dup_mmap", "clone3: copy of the daemon's address space"),
               ("cgroup_can_fork", "clone3: cgroup"),
               ("cgroup_post_fork", "clone3: cgroup")]


def daemon_what(frames):
    names = [s for s, _ in frames]
    if frames and "kernel" in frames[0][1]:
        if "asm_exc_page_fault" in names or "exc_page_fault" in names:
            return "page faults (mostly copy-on-write after fork)"
        if "do_syscall_64" in names:
            entry = names[names.index("do_syscall_64") - 1] if names.index("do_syscall_64") else "?"
            call = entry.replace("__x64_sys_", "").replace("__do_sys_", "").replace("__se_sys_", "")
            if call == "clone3":
                for sym, label in CLONE_PARTS:
                    if sym in names:
                        return label
                return "clone3: rest"
            return "syscall " + call
        return "kernel, other (interrupts, softirq)"
    dso = frames[0][1].rsplit("/", 1)[-1] if frames else "?"
    for key, label in (("sandboxd", "user: sandboxd's own code"), ("libsqlite3", "user: SQLite"),
                       ("libjansson", "user: jansson (JSON)"),
                       ("libmicrohttpd", "user: libmicrohttpd (HTTP)"),
                       ("libevent", "user: libevent"), ("libc.so", "user: libc (malloc, string)")):
        if key in dso:
            return label
    return "user: " + dso


by_kind, by_what = collections.Counter(), collections.Counter()  # CPU ns
total = 0
for head, frames in samples(sys.stdin):
    comm, pid, period = " ".join(head[:-2]), head[-2], int(head[-1])
    total += period
    k = kind(comm, pid)
    by_kind[k] += period
    if k.startswith("daemon (event loop)"):
        by_what[daemon_what(frames)] += period


def table(title, col, counter, whole):
    print(title)
    print("| %s | share | CPU ms%s |" % (col, " per task" if tasks else ""))
    print("|---|---|---|")
    for k, ns in counter.most_common():
        print("| %s | %.1f %% | %.3f |" % (k, 100.0 * ns / whole, ns / 1e6 / (tasks or 1)))


table("# the whole machine (%.1f CPU-s sampled), by process" % (total / 1e9), "process", by_kind,
      total)
d = by_kind["daemon (event loop)"]
print()
table("# the daemon's own %.2f CPU-s, by what it was doing" % (d / 1e9), "daemon", by_what, d)
