# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""Python bindings of libtrain: spawns 3 ranks with the RANK/WORLD_SIZE bootstrap and checks
allreduce/broadcast/allgather, broadcast_parameters, DistributedOptimizer and checkpoints."""
import os
import socket
import subprocess
import sys
import tempfile

RANK_CODE = r'''
import numpy as np, libtrain, os, sys
libtrain.init()
r, n = libtrain.rank(), libtrain.size()
a = np.full(1001, r + 1, dtype=np.float32)
assert (libtrain.allreduce(a, op="sum") == n * (n + 1) / 2).all()
assert np.allclose(libtrain.allreduce(a), (n + 1) / 2)
assert (libtrain.allreduce(np.array([r], dtype=np.int64), op="max") == n - 1).all()
bf = np.array([0x3f80] * 5, dtype=np.uint16)  # bfloat16 1.0
libtrain.allreduce_(bf, "sum", dtype="bfloat16")
assert (bf == 0x4040).all(), bf  # 3.0
g = libtrain.allgather(np.array([[r, -r]], dtype=np.int32))
assert g.shape == (n, 2) and (g[:, 0] == np.arange(n)).all()
assert libtrain.broadcast(np.array([r * 10.0]), root=n - 1)[0] == (n - 1) * 10
params = {"w": np.full((3, 2), float(r), dtype=np.float32), "b": np.full(4, float(r))}
libtrain.broadcast_parameters(params, root=0)
assert all((p == 0).all() for p in params.values())
opt = libtrain.DistributedOptimizer(libtrain.SGD(params, lr=1.0), fusion_bytes=32)
opt.step([np.full((3, 2), float(r), dtype=np.float32), np.full(4, float(r))])
assert np.allclose(params["w"], -(n - 1) / 2) and np.allclose(params["b"], -(n - 1) / 2)
path = os.environ["CKPT"]
libtrain.save_checkpoint(path, params)
params["w"][...] = 7
assert libtrain.load_checkpoint(path, params) and np.allclose(params["w"], -(n - 1) / 2)
h = libtrain.allreduce_async_(np.ones(10), "sum"); h.wait()
try:
    libtrain.allreduce(np.zeros(3, dtype=np.uint8))
    sys.exit(5)
except ValueError:
    pass
assert abs(libtrain.scaled_lr(0.1, epoch=0) - 0.1) < 1e-12
libtrain.shutdown()
'''


def main():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="libtrain-py-") as tmp:
        procs = []
        for r in range(3):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE="3", MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), LIBTRAIN_TIMEOUT="20", CKPT=os.path.join(tmp, "c.npz"))
            procs.append(subprocess.Popen([sys.executable, "-c", RANK_CODE], env=env))
        codes = [p.wait(timeout=60) for p in procs]
    print("exit codes", codes)
    sys.exit(0 if codes == [0, 0, 0] else 1)


if __name__ == "__main__":
    main()
