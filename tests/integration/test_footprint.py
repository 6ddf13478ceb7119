"""What an idle `sandboxd serve` holds (issue 10: an idle daemon under 10 MB;
docs/performance.md, "The daemon's memory"). Checked: neither the daemon on
its embedded defaults nor its spawner maps libcurl, libarchive or the
libraries behind them (TLS, Kerberos, LDAP, SSH, ICU, libxml2)
before they are used; the executable links neither and exports no libcrypto
symbol (a shared library needing libcrypto beside the static one made the
linker export all of it); and, in a build without sanitizers, the idle
daemon's VmRSS stays under a generous 14 MiB (about 8 MiB measured by
bench/rss.py; resident memory does not depend on the machine's load, so the
bound cannot be flaky). libcurl's and libarchive's loading when needed is
exercised by test_agent (the model calls) and test_images (the unpacking)."""
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sbxtest import SANDBOXD, ServeDaemon, Suite, check  # noqa: E402

S = Suite("footprint")
TOKEN = "foot-" + "0123456789abcdef0123456789ab"
TMP = tempfile.mkdtemp(prefix="sbx-footprint-")
# (libstdc++, which ICU pulls in, is not among them: ASan's runtime maps it.)
LAZY = ("libcurl", "libarchive", "libssl", "libcrypto.so", "libgssapi", "libkrb5", "libldap",
        "libssh2", "libnghttp2", "libxml2", "libicu")

# The embedded defaults: no configuration file, no --net.
D = ServeDaemon(os.path.join(TMP, "state"), TOKEN, net=None).start()


def mapped(pid):
    with open("/proc/%d/maps" % pid) as f:
        return {os.path.basename(line.split()[5]) for line in f if len(line.split()) > 5}


def spawner(pid):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            for k in f.read().split():
                try:
                    with open("/proc/%s/comm" % k) as c:
                        if c.read().strip() == "sandboxd-spawn":
                            return int(k)
                except OSError:
                    pass
        time.sleep(0.05)
    return None


def status_kb(pid, key):
    with open("/proc/%d/status" % pid) as f:
        return [int(x.split()[1]) for x in f if x.startswith(key + ":")][0]


@S.case
def the_idle_daemon_maps_no_library_it_loads_on_demand():
    time.sleep(1)
    libs = mapped(D.proc.pid)
    check(any(x.startswith("libc.so") for x in libs), "the maps are read", sorted(libs))
    check(any(x.startswith("libmicrohttpd") for x in libs), "the HTTP server's library is in",
          sorted(libs))
    bad = sorted(x for x in libs if x.startswith(LAZY))
    check(not bad, "no libcurl, libarchive or what they pull in, idle", bad)
    sp = spawner(D.proc.pid)
    check(sp is not None, "the spawner runs")
    bad = sorted(x for x in mapped(sp) if x.startswith(LAZY))
    check(not bad, "nor in the spawner", bad)


@S.case
def nor_after_tasks():
    for _ in range(3):
        st, b, _ = D.req("POST", "/runtime/exec", {"command": ["/bin/true"]}, token=TOKEN,
                         timeout=60)
        check(st == 200 and b.get("exitCode") == 0, "a task runs", (st, b))
    bad = sorted(x for x in mapped(D.proc.pid) if x.startswith(LAZY))
    check(not bad, "no libcurl, libarchive or what they pull in after tasks", bad)


@S.case
def the_executable_links_and_exports_little():
    p = subprocess.run(["readelf", "-dW", "--dyn-syms", SANDBOXD], capture_output=True,
                       text=True, timeout=60)
    check(p.returncode == 0, "readelf reads it", p.stderr)
    needed = [x.split("[")[1].rstrip("]") for x in p.stdout.splitlines() if "(NEEDED)" in x]
    check(needed and not [x for x in needed if x.startswith(LAZY)],
          "neither libcurl nor libarchive is linked", needed)
    exported = [x.split()[-1] for x in p.stdout.splitlines()
                if len(x.split()) >= 8 and x.split()[6] not in ("UND", "Ndx")
                and x.split()[0].rstrip(":").isdigit()]
    crypto = [x for x in exported if x.startswith(("EVP_", "ASN1_", "X509", "OPENSSL_", "CRYPTO_",
                                                   "SHA256"))]
    check(not crypto, "no libcrypto symbol is exported", (len(exported), crypto[:10]))


@S.case
def the_idle_daemon_stays_small():
    libs = mapped(D.proc.pid)
    sanitized = any(x.startswith(("libasan", "libubsan")) for x in libs)
    rss = status_kb(D.proc.pid, "VmRSS")
    if sanitized:
        # ASan's shadow memory and runtime: no bound means anything there.
        check(rss > 0, "VmRSS read (sanitized build: no bound)", rss)
    else:
        check(rss < 14 * 1024, "idle VmRSS under 14 MiB (about 8 measured)", rss)


D.stop()
S.finish()
