"""Images and roots the environment tests and bench/environments.py build:
tar layers, OCI image layouts and `docker save` archives (tarfile, hashlib,
json), and a busybox-static root directory."""
import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile

BUSYBOX = "/bin/busybox"


def busybox_tree(root):
    """A root with bin/ (busybox and its applets), usr/, etc/ and a marker."""
    os.makedirs(os.path.join(root, "bin"))
    os.makedirs(os.path.join(root, "usr", "share"))
    os.makedirs(os.path.join(root, "etc"))
    shutil.copy(BUSYBOX, os.path.join(root, "bin", "busybox"))
    os.chmod(os.path.join(root, "bin", "busybox"), 0o755)
    for a in ("sh", "ls", "cat", "echo", "test", "mkdir", "touch", "rm", "id"):
        os.symlink("busybox", os.path.join(root, "bin", a))
    with open(os.path.join(root, "usr", "share", "marker"), "w") as f:
        f.write("from-the-environment\n")
    with open(os.path.join(root, "etc", "os-release"), "w") as f:
        f.write("ID=bbx-test\n")
    for d, _, files in os.walk(root):
        os.chmod(d, 0o755)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def tar_bytes(entries):
    """entries: (TarInfo, data or None) in order -> an uncompressed tar."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for ti, data in entries:
            if data is not None:
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
            else:
                t.addfile(ti)
    return buf.getvalue()


def ent(name, kind="file", data=b"", mode=0o644, target=None, size=None):
    ti = tarfile.TarInfo(name)
    ti.mode = mode
    ti.mtime = 1700000000
    if kind == "dir":
        ti.type, ti.mode = tarfile.DIRTYPE, 0o755
        return ti, None
    if kind == "sym":
        ti.type, ti.linkname = tarfile.SYMTYPE, target
        return ti, None
    if kind == "hard":
        ti.type, ti.linkname = tarfile.LNKTYPE, target
        return ti, None
    if kind == "chr":
        ti.type, ti.devmajor, ti.devminor = tarfile.CHRTYPE, 1, 3
        return ti, None
    if kind == "huge":
        ti.size = size
        return ti, None
    return ti, data


def oci_layout(path, layers, gz=True):
    """An OCI image layout directory of these layers; returns the manifest digest."""
    blobs = os.path.join(path, "blobs", "sha256")
    os.makedirs(blobs)

    def put(b):
        h = sha(b)
        with open(os.path.join(blobs, h), "wb") as f:
            f.write(b)
        return "sha256:" + h, len(b)
    descs, diff_ids = [], []
    for layer in layers:
        diff_ids.append("sha256:" + sha(layer))
        blob = gzip.compress(layer, mtime=0) if gz else layer
        d, n = put(blob)
        descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar" +
                      ("+gzip" if gz else ""), "digest": d, "size": n})
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
    cd, cn = put(config)
    manifest = json.dumps({"schemaVersion": 2,
                           "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": cd, "size": cn},
                           "layers": descs}).encode()
    md, mn = put(manifest)
    with open(os.path.join(path, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md,
             "size": mn, "platform": {"architecture": "amd64", "os": "linux"}}]}, f)
    with open(os.path.join(path, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    return md


def docker_save(path, layers):
    """A `docker save` archive (the format before Docker 25); returns the image id."""
    members, names = [], []
    for layer in layers:
        h = sha(layer)
        members += [ent(h, "dir"), ent(h + "/layer.tar", data=layer)]
        names.append(h + "/layer.tar")
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {
        "type": "layers", "diff_ids": ["sha256:" + sha(x) for x in layers]}}).encode()
    cid = sha(config)
    members.append(ent(cid + ".json", data=config))
    members.append(ent("manifest.json", data=json.dumps(
        [{"Config": cid + ".json", "RepoTags": ["bbx:test"], "Layers": names}]).encode()))
    with open(path, "wb") as f:
        f.write(tar_bytes(members))
    return "sha256:" + cid
