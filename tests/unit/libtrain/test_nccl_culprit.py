# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""Who failed, on NCCL, through the Python module (what libtrain.torch's CUDA tensors use): the
world's NCCL communicator (NcclCommunicator.world()) is given the world's CPU communicator, so
when a rank dies the others' NCCL error names it. 3 ranks with the RANK/WORLD_SIZE bootstrap on
the NCCL/CUDA stand-in (standin_nccl.c, standin_cudart.c; host memory as device memory). Usage:
test_nccl_culprit.py STANDIN_DIR. Exits 77 (skipped) when libtrain was built without NCCL."""
import os
import socket
import subprocess
import sys
import tempfile

RANK_CODE = r'''
import os, sys, numpy as np, libtrain, libtrain._libtrain as core
libtrain.init()
r = libtrain.rank()
nccl = core.NcclCommunicator.world()
a = np.full(100, r + 1, dtype=np.float32)
nccl.allreduce(a.ctypes.data, a.size, "float32", "sum"); nccl.synchronize()
assert (a == 6).all(), a
if r == 2:
    os._exit(9)  # dies
try:
    nccl.allreduce(a.ctypes.data, a.size, "float32", "sum"); nccl.synchronize()
except libtrain.PeerError as e:
    print(f"rank {r}: {e}", flush=True)
    sys.exit(0 if "rank 2 on node " in str(e) and "died" in str(e) else 3)
sys.exit(4)
'''


def main():
    import libtrain._libtrain as core
    if not core.nccl_available():
        print("SKIP: libtrain built without NCCL")
        sys.exit(77)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="libtrain-nccl-py-") as tmp:
        procs = []
        for r in range(3):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE="3", MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), LIBTRAIN_TIMEOUT="5", STANDIN_NCCL_DIR=tmp,
                       STANDIN_CUDA_DEVICES="3", LD_LIBRARY_PATH=sys.argv[1])
            procs.append(subprocess.Popen([sys.executable, "-c", RANK_CODE], env=env))
        codes = [p.wait(timeout=60) for p in procs]
    print("exit codes", codes)
    sys.exit(0 if codes == [0, 0, 9] else 1)


if __name__ == "__main__":
    main()
