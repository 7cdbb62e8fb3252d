#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""Stack one OCI image layout on another, reusing the base's blobs unchanged.

    stack.py layers BASE            print the paths of BASE's layer blobs, bottom first
    stack.py env BASE               print BASE's config Env, one K=V a line
    stack.py stack BASE TOP OUT     write OUT: BASE's layers, then TOP's; BASE's config
                                    (Env, Cmd) with TOP's Env entries added or replacing

Both inputs are single-manifest layouts as oci_pack.py writes them. Reusing the base's
layer blobs (instead of repacking its tree) keeps their digests: the registry and the nodes'
caches hold them once for both images.
"""

import hashlib
import json
import os
import shutil
import sys

REF_NAME = "org.opencontainers.image.ref.name"


def blob_path(layout, digest):
    return os.path.join(layout, "blobs", "sha256", digest.split(":", 1)[1])


def read_image(layout):
    """(manifest descriptor, manifest, config) of a one-image layout."""
    with open(os.path.join(layout, "index.json")) as f:
        desc = json.load(f)["manifests"][0]
    with open(blob_path(layout, desc["digest"])) as f:
        manifest = json.load(f)
    with open(blob_path(layout, manifest["config"]["digest"])) as f:
        config = json.load(f)
    return desc, manifest, config


def write_blob(out, obj, media_type):
    data = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(out, "blobs", "sha256", digest), "wb") as f:
        f.write(data)
    return {"mediaType": media_type, "digest": "sha256:" + digest, "size": len(data)}


def merged_env(base, top):
    """Base's Env with top's entries replacing equal names, new names appended."""
    env = {e.split("=", 1)[0]: e for e in base}
    for e in top:
        env[e.split("=", 1)[0]] = e
    return list(env.values())


def stack(base_dir, top_dir, out):
    base_desc, base_m, base_c = read_image(base_dir)
    _, top_m, top_c = read_image(top_dir)
    os.makedirs(os.path.join(out, "blobs", "sha256"))
    for src, manifest in ((base_dir, base_m), (top_dir, top_m)):
        for layer in manifest["layers"]:
            dst = blob_path(out, layer["digest"])
            if not os.path.exists(dst):
                shutil.copyfile(blob_path(src, layer["digest"]), dst)
    config = dict(base_c)
    config["config"] = dict(base_c.get("config", {}))
    config["config"]["Env"] = merged_env(base_c["config"].get("Env", []), top_c["config"].get("Env", []))
    if "Cmd" in top_c["config"]:
        config["config"]["Cmd"] = top_c["config"]["Cmd"]
    config["rootfs"] = {"type": "layers",
                        "diff_ids": base_c["rootfs"]["diff_ids"] + top_c["rootfs"]["diff_ids"]}
    config["history"] = base_c.get("history", []) + top_c.get("history", [])
    manifest = dict(base_m)
    manifest["config"] = write_blob(out, config, base_m["config"]["mediaType"])
    manifest["layers"] = base_m["layers"] + top_m["layers"]
    desc = write_blob(out, manifest, base_desc["mediaType"])
    desc["annotations"] = {REF_NAME: base_desc.get("annotations", {}).get(REF_NAME, "latest")}
    with open(os.path.join(out, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [desc]}, f, indent=1)


def main(argv):
    if len(argv) == 3 and argv[1] == "layers":
        _, manifest, _ = read_image(argv[2])
        for layer in manifest["layers"]:
            print(blob_path(argv[2], layer["digest"]))
    elif len(argv) == 3 and argv[1] == "env":
        _, _, config = read_image(argv[2])
        for entry in config.get("config", {}).get("Env", []):
            print(entry)
    elif len(argv) == 5 and argv[1] == "stack":
        stack(argv[2], argv[3], argv[4])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
