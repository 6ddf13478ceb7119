"""The package's PEP 517 build backend, standard library only: pip builds the
wheel (a zip of the package, its metadata and RECORD) with nothing to fetch
and nothing else installed, so `pip install ./sdk/python` works offline and
with or without build isolation. Metadata comes from pyproject.toml's
[project] table."""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "sandbox_sdk"


def _project():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        text = f.read().decode()
    try:
        import tomllib
        return tomllib.loads(text)["project"]
    except ImportError:  # Python < 3.11: the simple `key = "value"` lines
        section = re.search(r"^\[project\]\n(.*?)(?=^\[|\Z)", text, re.S | re.M).group(1)
        return dict(re.findall(r'^([\w-]+)\s*=\s*"([^"]*)"', section, re.M))


def _metadata():
    p = _project()
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"],
             "Summary: " + p.get("description", ""),
             "Requires-Python: " + p.get("requires-python", ">=3.9")]
    body = ""
    readme = os.path.join(ROOT, "README.md")
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = "\n" + f.read()
    return p, "\n".join(lines) + "\n" + body


def _dist_name(p):
    return re.sub(r"[-_.]+", "_", p["name"]).lower() + "-" + p["version"]


def _package_files():
    base = os.path.join(ROOT, PACKAGE)
    for name in sorted(os.listdir(base)):
        if name.endswith(".py") or name == "py.typed":
            yield os.path.join(base, name), PACKAGE + "/" + name


class _Wheel:
    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.record = []

    def add(self, arcname, data):
        if isinstance(data, str):
            data = data.encode()
        self.zip.writestr(zipfile.ZipInfo(arcname, (2020, 1, 1, 0, 0, 0)), data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append("%s,sha256=%s,%d" % (arcname, digest, len(data)))

    def finish(self, dist_info):
        rec = dist_info + "/RECORD"
        self.zip.writestr(zipfile.ZipInfo(rec, (2020, 1, 1, 0, 0, 0)),
                          "\n".join(self.record + [rec + ",,"]) + "\n")
        self.zip.close()


def _wheel(wheel_directory, files):
    p, meta = _metadata()
    dist = _dist_name(p)
    name = dist + "-py3-none-any.whl"
    w = _Wheel(os.path.join(wheel_directory, name))
    for arcname, data in files:
        w.add(arcname, data)
    info = dist + ".dist-info"
    w.add(info + "/METADATA", meta)
    w.add(info + "/WHEEL", "Wheel-Version: 1.0\nGenerator: sdk_build\nRoot-Is-Purelib: true\n"
          "Tag: py3-none-any\n")
    w.add(info + "/top_level.txt", PACKAGE + "\n")
    w.finish(info)
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = []
    for path, arcname in _package_files():
        with open(path, "rb") as f:
            files.append((arcname, f.read()))
    return _wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """pip install -e: a .pth file putting this folder on sys.path."""
    return _wheel(wheel_directory, [(PACKAGE + "_editable.pth", ROOT + "\n")])


def build_sdist(sdist_directory, config_settings=None):
    p, meta = _metadata()
    dist = _dist_name(p)
    name = dist + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        paths = ["pyproject.toml", "README.md", "backend/sdk_build.py"]
        paths += [arc for _, arc in _package_files()]
        for rel in paths:
            tar.add(os.path.join(ROOT, rel), dist + "/" + rel)
        data = meta.encode()
        info = tarfile.TarInfo(dist + "/PKG-INFO")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return name
