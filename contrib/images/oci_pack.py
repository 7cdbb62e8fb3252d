#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""Pack directory trees into an OCI image layout, without Docker.

Each --layer becomes one gzip-compressed tar layer, packed exactly as it is on
disk: files named `.wh.NAME` or `.wh..wh..opq` are written as they are, which is
how an OCI layer expresses a deletion or an opaque directory. The script writes
the blobs, the image config, the manifest and index.json with their sha256
digests and sizes (OCI image-spec v1.0, media types application/vnd.oci.image.*).

    oci_pack.py OUT_DIR TAG --layer ROOT[:only=P,...|:skip=P,...] [--layer ...]
                [--env K=V]... [--cmd JSON] [--entrypoint JSON] [--mtime EPOCH] [--root-owned]

`only=` keeps just the listed subtrees of ROOT (plus their parent directories),
`skip=` leaves them out: together they split one root filesystem into layers.
"""

import argparse
import datetime
import gzip
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
REF_NAME = "org.opencontainers.image.ref.name"


class LayerSpec:
    """One --layer argument: a root directory and an optional path filter."""

    def __init__(self, text):
        root, _, rule = text.partition(":")
        self.root = os.path.abspath(root)
        self.mode, self.paths = None, []
        if rule:
            self.mode, _, paths = rule.partition("=")
            if self.mode not in ("only", "skip") or not paths:
                raise argparse.ArgumentTypeError(f"bad layer filter '{rule}'")
            self.paths = [p.strip("/") for p in paths.split(",")]

    def is_wanted(self, rel):
        """Whether the path `rel` (relative to root) belongs to this layer."""
        inside = any(rel == p or rel.startswith(p + "/") for p in self.paths)
        if self.mode == "skip":
            return not inside
        if self.mode == "only":
            parent = any(p.startswith(rel + "/") for p in self.paths)
            return inside or parent
        return True


class HashingWriter:
    """A write-only file that hashes and counts what passes through it."""

    def __init__(self, sink):
        self.sink, self.sha, self.size = sink, hashlib.sha256(), 0

    def write(self, data):
        self.sha.update(data)
        self.size += len(data)
        return self.sink.write(data)

    def flush(self):
        self.sink.flush()


def walk_sorted(root):
    """Yield paths under root relative to it, parents first, names sorted."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        entries = sorted(dirnames + filenames)
        for name in entries:
            yield name if rel_dir == "." else f"{rel_dir}/{name}"


def normalize(info, args):
    """Drop host user names; optionally fix owners and mtimes (reproducible)."""
    info.uname = info.gname = ""
    if args.root_owned:
        info.uid = info.gid = 0
    if args.mtime is not None:
        info.mtime = args.mtime
    return info


def add_entries(tar, spec, args):
    """Add every wanted path of spec.root; tarfile records repeated inodes as hard links."""
    for rel in walk_sorted(spec.root):
        if not spec.is_wanted(rel):
            continue
        full = os.path.join(spec.root, rel)
        info = tar.gettarinfo(full, arcname=rel)
        if info is None:  # a socket: tar cannot hold it, and no image needs it
            continue
        normalize(info, args)
        if info.isreg():
            with open(full, "rb") as f:
                tar.addfile(info, f)
        elif info.type in (tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE) and not args.keep_devices:
            continue
        else:
            tar.addfile(info)


def gzip_command():
    """pigz if present (parallel), else gzip; -n keeps the output reproducible."""
    tool = shutil.which("pigz") or shutil.which("gzip")
    return [tool, "-n", "-6", "-c"] if tool else None


def write_layer(spec, args, blobs):
    """Pack one layer; return (descriptor, diff_id)."""
    tmp = os.path.join(blobs, "layer.tmp")
    with open(tmp, "wb") as out:
        cmd = gzip_command()
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=out) if cmd else None
        sink = proc.stdin if proc else gzip.GzipFile(fileobj=out, mode="wb", mtime=0)
        raw = HashingWriter(sink)
        with tarfile.open(fileobj=raw, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            add_entries(tar, spec, args)
        sink.close()
        if proc and proc.wait() != 0:
            sys.exit(f"oci_pack: {cmd[0]} failed")
    digest, size = publish_file(tmp, blobs)
    desc = {"mediaType": MEDIA_LAYER, "digest": digest, "size": size}
    return desc, "sha256:" + raw.sha.hexdigest()


def publish_file(path, blobs):
    """Move a file to blobs/sha256/<hex>; return (digest, size)."""
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    size = os.path.getsize(path)
    os.replace(path, os.path.join(blobs, sha.hexdigest()))
    return "sha256:" + sha.hexdigest(), size


def write_json_blob(obj, media_type, blobs):
    """Write obj as canonical JSON into the blob store; return its descriptor."""
    data = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(blobs, digest), "wb") as f:
        f.write(data)
    return {"mediaType": media_type, "digest": "sha256:" + digest, "size": len(data)}


def image_config(args, diff_ids):
    """The OCI image config: platform, runtime defaults, layer diff_ids."""
    when = datetime.datetime.fromtimestamp(args.mtime or 0, datetime.timezone.utc)
    created = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    config = {"Env": args.env}
    if args.cmd:
        config["Cmd"] = json.loads(args.cmd)
    if args.entrypoint:
        config["Entrypoint"] = json.loads(args.entrypoint)
    if args.workdir:
        config["WorkingDir"] = args.workdir
    return {
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created": created, "created_by": "slipway oci_pack.py"} for _ in diff_ids],
    }


def write_layout(out, tag, manifest_desc):
    """oci-layout and index.json, the entry points of an image layout."""
    with open(os.path.join(out, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    manifest_desc = dict(manifest_desc, annotations={REF_NAME: tag})
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [manifest_desc]}, f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="output directory (created; must not exist)")
    p.add_argument("tag", help="tag recorded in index.json, e.g. latest")
    p.add_argument("--layer", action="append", type=LayerSpec, required=True)
    p.add_argument("--env", action="append", default=[], help="K=V for the config's Env")
    p.add_argument("--cmd", help='config Cmd as JSON, e.g. \'["/bin/sh"]\'')
    p.add_argument("--entrypoint", help='config Entrypoint as JSON, e.g. \'["/entrypoint.sh"]\'')
    p.add_argument("--workdir", help="config WorkingDir, e.g. /srv/app")
    p.add_argument("--mtime", type=int, help="set every entry's mtime (reproducible layers)")
    p.add_argument("--root-owned", action="store_true", help="write every entry as uid/gid 0")
    p.add_argument("--keep-devices", action="store_true", help="keep device nodes and FIFOs")
    args = p.parse_args()

    blobs = os.path.join(args.out, "blobs", "sha256")
    os.makedirs(blobs)
    layers, diff_ids = [], []
    for spec in args.layer:
        desc, diff_id = write_layer(spec, args, blobs)
        layers.append(desc)
        diff_ids.append(diff_id)
    config = write_json_blob(image_config(args, diff_ids), MEDIA_CONFIG, blobs)
    manifest = {"schemaVersion": 2, "mediaType": MEDIA_MANIFEST, "config": config, "layers": layers}
    write_layout(args.out, args.tag, write_json_blob(manifest, MEDIA_MANIFEST, blobs))


if __name__ == "__main__":
    main()
