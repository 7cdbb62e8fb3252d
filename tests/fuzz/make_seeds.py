#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""Writes the seed corpora of fuzz_squashfs and fuzz_local_archive (tests/fuzz/corpus/): enroot
/etc/environment files and squashfs superblocks; OCI archives (one image, a nested index, two
platforms, gzip) and docker-archives as skopeo writes them, with blobs whose digests match.
Usage: make_seeds.py (from anywhere; rewrites the seeds in place)."""
import gzip
import hashlib
import io
import json
import os
import struct
import tarfile

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    with open(os.path.join(HERE, target, name), "wb") as f:
        f.write(data)


def superblock(major, bytes_used, pad_to):
    sb = bytearray(96)
    sb[0:4] = b"hsqs"
    struct.pack_into("<H", sb, 28, major)
    struct.pack_into("<Q", sb, 40, bytes_used)
    return bytes(sb) + b"\0" * max(0, pad_to - 96)


def squashfs_seeds():
    write("squashfs", "env_enroot", b'export PATH="/usr/local/bin:/usr/bin"\n# comment\n\n'
          b"LANG=C.UTF-8\r\n  HOME='/root'\nX=${HOME}/x\n1BAD=1\nBAD-NAME=2\n=3\nexport \n")
    write("squashfs", "env_quotes", b'A="\nB=\'\'\nC="x\'\nD=a=b\n\tE = 1 \n')
    write("squashfs", "sb_whole", superblock(4, 4096, 4096))
    write("squashfs", "sb_truncated", superblock(4, 1 << 20, 200))
    write("squashfs", "sb_version3", superblock(3, 96, 96))
    write("squashfs", "sb_short", b"hsqs" + b"\0" * 40)


def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tar_of(files, fmt=tarfile.GNU_FORMAT):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as t:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return out.getvalue()


def blob(files, data):
    d = sha(data)
    files.append(("blobs/sha256/" + d[7:], data))
    return {"digest": d, "size": len(data)}


def oci_image(files, arch="amd64"):
    layer = tar_of([("etc/os-release", b"ID=fuzz\n")])
    config = json.dumps({"architecture": arch, "os": "linux",
                         "config": {"Env": ["PATH=/usr/bin"], "Cmd": ["/bin/sh"]},
                         "rootfs": {"type": "layers", "diff_ids": [sha(layer)]}}).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": dict(mediaType="application/vnd.oci.image.config.v1+json", **blob(files, config)),
        "layers": [dict(mediaType="application/vnd.oci.image.layer.v1.tar", **blob(files, layer))],
    }).encode()
    return dict(mediaType="application/vnd.oci.image.manifest.v1+json", **blob(files, manifest),
                platform={"os": "linux", "architecture": arch})


def index(descs):
    return json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                       "manifests": descs}).encode()


def archive_seeds():
    files = [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')]
    one = oci_image(files)
    oci = files + [("index.json", index([one]))]
    write("local_archive", "oci.tar", tar_of(oci))
    write("local_archive", "oci.tar.gz", gzip.compress(tar_of(oci, tarfile.PAX_FORMAT), mtime=0))

    files = [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')]
    inner = index([oci_image(files, "amd64"), oci_image(files, "arm64")])
    nested = dict(mediaType="application/vnd.oci.image.index.v1+json", **blob(files, inner))
    write("local_archive", "oci_nested.tar", tar_of(files + [("index.json", index([nested]))]))

    layer = tar_of([("bin/true", b"\x7fELF")])
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Env": ["A=1"]},
                         "rootfs": {"type": "layers", "diff_ids": [sha(layer)]}}).encode()
    cname = sha(config)[7:] + ".json"
    listing = json.dumps([{"Config": cname, "RepoTags": ["fuzz:latest"],
                           "Layers": ["abc/layer.tar"]}]).encode()
    write("local_archive", "docker.tar",
          tar_of([(cname, config), ("abc/layer.tar", layer), ("manifest.json", listing)]))
    bad = json.dumps([{"Config": "../" + cname, "Layers": ["/abc/layer.tar", 7]}]).encode()
    write("local_archive", "docker_bad_names.tar",
          tar_of([(cname, config), ("abc/layer.tar", layer), ("manifest.json", bad)]))


if __name__ == "__main__":
    squashfs_seeds()
    archive_seeds()
