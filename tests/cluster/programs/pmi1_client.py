#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# PMI-1 client over $PMI_FD for tests/cluster/test_mpi_pmix.bash (srun --mpi=pmi2 in a container):
# init, put "rank-R@HOST", barrier, get every peer's value. Speaks the PMI-1 wire protocol
# (lines of key=value) that Slurm's mpi/pmi2 plugin also serves. Prints
#   pmi rank R/N host H peers ok|BAD
# and exits non-zero on a protocol error or a wrong value.
import os, socket, sys

def talk(sock, line):
    sock.sendall((line + "\n").encode())
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            sys.exit("pmi1_client: PMI server closed the connection after: " + line)
        buf += chunk
    reply = dict(kv.split("=", 1) for kv in buf.decode().split() if "=" in kv)
    if reply.get("rc", "0") != "0":
        sys.exit("pmi1_client: '%s' failed: %s" % (line, buf.decode().strip()))
    return reply

def main():
    fd = int(os.environ["PMI_FD"])
    rank, size = int(os.environ["PMI_RANK"]), int(os.environ["PMI_SIZE"])
    sock = socket.socket(fileno=fd)
    talk(sock, "cmd=init pmi_version=1 pmi_subversion=1")
    kvs = talk(sock, "cmd=get_my_kvsname")["kvsname"]
    host = socket.gethostname()
    talk(sock, "cmd=put kvsname=%s key=ep%d value=rank-%d@%s" % (kvs, rank, rank, host))
    talk(sock, "cmd=barrier_in")
    ok = all(talk(sock, "cmd=get kvsname=%s key=ep%d" % (kvs, r)).get("value", "").startswith(
        "rank-%d@" % r) for r in range(size))
    talk(sock, "cmd=finalize")
    print("pmi rank %d/%d host %s peers %s" % (rank, size, host, "ok" if ok else "BAD"), flush=True)
    return 0 if ok else 1

sys.exit(main())
