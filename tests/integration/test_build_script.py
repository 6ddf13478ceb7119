"""scripts/build.sh on a copy of the checkout that carries its build/ folder:
the copy's CMake cache names the old path (CMake refuses it), so the script
must notice and configure that folder afresh (issue 17, item 10). Only
configures (--configure-only): a full build here would take minutes."""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from sbxtest import Suite, check  # noqa: E402

S = Suite("build_script")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TMP = tempfile.mkdtemp(prefix="sbx-build-copy-")


def copy_sources(dst):
    """What configuring needs: the top CMakeLists.txt and the folders."""
    os.makedirs(dst)
    shutil.copy2(os.path.join(ROOT, "CMakeLists.txt"), dst)
    skip = shutil.ignore_patterns("build", "build-*", "__pycache__", "node_modules")
    for d in ("scripts", "src", "tests", "bench", "docs"):
        if os.path.isdir(os.path.join(ROOT, d)):
            shutil.copytree(os.path.join(ROOT, d), os.path.join(dst, d), ignore=skip,
                            symlinks=True)


def build_sh(where):
    return subprocess.run([os.path.join(where, "scripts", "build.sh"), "--configure-only"],
                          capture_output=True, text=True, timeout=300)


@S.case
def a_copied_checkout_with_its_build_folder_configures():
    first = os.path.join(TMP, "first")
    copy_sources(first)
    r = build_sh(first)
    check(r.returncode == 0, "the first checkout configures", r.stderr[-2000:])
    second = os.path.join(TMP, "second")
    shutil.copytree(first, second, symlinks=True)
    r = build_sh(second)
    check(r.returncode == 0, "the copy (with build/) configures too", r.stderr[-2000:])
    check("configuring it afresh" in r.stderr, "... saying why it started build/ afresh",
          r.stderr[-2000:])
    with open(os.path.join(second, "build", "CMakeCache.txt")) as f:
        cache = f.read()
    check("CMAKE_CACHEFILE_DIR:INTERNAL=%s/build\n" % os.path.realpath(second) in cache,
          "the copy's cache names the copy")
    # Nothing to do the next time.
    r = build_sh(second)
    check(r.returncode == 0 and "afresh" not in r.stderr, "a second run keeps the folder",
          r.stderr[-2000:])


try:
    S.finish()
finally:
    shutil.rmtree(TMP, ignore_errors=True)
