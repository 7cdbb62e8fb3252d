# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""A training script written the way Horovod's PyTorch examples are (`import horovod.torch as hvd`,
no libtrain in sight), for test_torch_horovod_opt_in.bash: it must run unchanged under
LIBTRAIN_HOROVOD=1. It uses the API surface those examples use and checks what each call gives:
DistributedSampler over hvd.size()/hvd.rank(), SyncBatchNorm, broadcast_parameters and
broadcast_optimizer_state, DistributedOptimizer with fp16 compression, backward_passes_per_step,
gradient_predivide_factor and an LR scheduler, allreduce/broadcast by name, join, and the
capability queries. Prints one line per rank per check; exits non-zero on any failure."""
import argparse
import hashlib

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed

import horovod
import horovod.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--fp16-allreduce", action="store_true")
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()

hvd.init()
torch.manual_seed(1234 + hvd.rank())  # different initial weights: broadcast_parameters must fix them
torch.set_num_threads(1)
r, n = hvd.rank(), hvd.size()
print(f"rank {r}/{n}: horovod {horovod.__version__}, local rank {hvd.local_rank()}/{hvd.local_size()}, "
      f"node {hvd.cross_rank()}/{hvd.cross_size()}, nccl_built {bool(hvd.nccl_built())}", flush=True)
try:
    hvd.mpi_threads_supported()
    raise SystemExit(f"rank {r}: mpi_threads_supported() answered without MPI")
except ValueError:
    pass

# A fixed synthetic task every rank can build alike: 2 classes split by a plane.
gen = torch.Generator().manual_seed(7)
x = torch.randn(2048, 16, generator=gen)
y = (x @ torch.linspace(-1, 1, 16) > 0).long()
dataset = torch.utils.data.TensorDataset(x, y)
sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank())
loader = torch.utils.data.DataLoader(dataset, batch_size=64, sampler=sampler)

model = nn.Sequential(nn.Linear(16, 32), hvd.SyncBatchNorm(32), nn.ReLU(), nn.Linear(32, 2))
optimizer = optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.9)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

try:  # Adasum: libtrain says it cannot, in one line
    hvd.DistributedOptimizer(optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters(),
                             op=hvd.Adasum)
    raise SystemExit(f"rank {r}: op=hvd.Adasum was accepted")
except NotImplementedError as e:
    adasum = str(e)

optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=compression, backward_passes_per_step=2,
                                     op=hvd.Average, gradient_predivide_factor=2.0)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
start = hvd.broadcast(torch.tensor(0 if r == 0 else 99), root_rank=0, name="resume_from_epoch").item()
assert start == 0, f"rank {r}: broadcast gave {start}"


def metric_average(value, name):
    return hvd.allreduce(torch.tensor(value), name=name).item()


losses = []
for epoch in range(start, args.epochs):
    model.train()
    sampler.set_epoch(epoch)
    total, batches = 0.0, 0
    for data, target in loader:
        optimizer.zero_grad()
        for d, t in zip((data[:32], data[32:]), (target[:32], target[32:])):  # two backward passes per step
            loss = F.cross_entropy(model(d), t) / 2
            loss.backward()
            total += loss.item()
        optimizer.step()
        batches += 1
    scheduler.step()
    losses.append(metric_average(total / batches, "avg_loss"))
    if r == 0:
        print(f"epoch {epoch}: average loss {losses[-1]:.4f}, lr {scheduler.get_last_lr()[0]:.4f}", flush=True)

model.eval()
with torch.no_grad():
    accuracy = metric_average((model(x).argmax(1) == y).float().mean().item(), "avg_accuracy")
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.state_dict().values())).hexdigest()
digests = hvd.allgather_object(digest)
last = hvd.join()
assert 0 <= last < n, f"rank {r}: join() returned {last}"
ok = len(set(digests)) == 1 and losses[-1] < losses[0] and accuracy > 0.9
print(f"rank {r}/{n}: {'ok' if ok else 'FAILED'}: weights {'identical' if len(set(digests)) == 1 else 'differ'} "
      f"on {len(digests)} ranks, loss {losses[0]:.3f} -> {losses[-1]:.3f}, accuracy {accuracy:.3f}, "
      f"adasum: {adasum}", flush=True)
raise SystemExit(0 if ok else 1)
