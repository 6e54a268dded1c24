"""Exports samples/torchxla/: GSPMD pairs written by PyTorch/XLA (torch_xla SPMD on
8 CPU devices), a 2-layer MLP forward pass and an SGD training step, sharded with
torch_xla.distributed.spmd.mark_sharding on a Mesh(data=2, model=4); the training
step also on Mesh(data=8) and on Mesh(model=8).

Run from the repository root through samples/gen/run_torchxla.sh (it sets PJRT_DEVICE,
CPU_NUM_DEVICES and XLA_FLAGS, with the dump directory, before torch_xla is imported).

    torchxla.py

Each program runs once in one process: torch_xla traces it lazily, and torch_xla.sync()
compiles one module (SyncTensorsGraph.N) with num_partitions=8. XLA dumps that module
as torch_xla handed it over (before_optimizations: parameters annotated by
mark_sharding, outputs left to propagation) and right after the spmd-partitioning
pass; those are the baseline and the distributed module of the pair. The numerics
compare the fetched outputs with the same program run by eager PyTorch on the CPU
from the same initial values.
"""
import gzip
import importlib.metadata
import json
import os
import shutil

DUMP = os.environ.get("TORCHXLA_DUMP", "")
assert DUMP and f"--xla_dump_to={DUMP}" in os.environ.get("XLA_FLAGS", "") and \
    os.environ.get("CPU_NUM_DEVICES") == "8", \
    "run through samples/gen/run_torchxla.sh (the environment must be set before torch_xla loads)"

import numpy as np
import torch
import torch_xla
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr

OUT = "samples/torchxla"
GZIP_OVER = 200 * 1024
D_IN, HIDDEN, D_OUT, BATCH, LR = 16, 64, 8, 8, 0.1


def version(dist):
    return importlib.metadata.version(dist)


# ----------------------------------------------------------------------------- model

class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(D_IN, HIDDEN)
        self.fc2 = torch.nn.Linear(HIDDEN, D_OUT)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def init(seed):
    """Model (CPU) and inputs, deterministic per seed."""
    torch.manual_seed(seed)
    model = MLP()
    x = torch.randn(BATCH, D_IN)
    target = torch.randn(BATCH, D_OUT)
    return model, x, target


def shard_megatron(model, x, target, mesh):
    """Data parallel over 'data', Megatron tensor parallel over 'model': fc1 split by
    output features (column parallel), fc2 by input features (row parallel). An axis
    the mesh lacks leaves that dimension whole (a tensor with none: replicated)."""
    def mark(t, *spec):
        xs.mark_sharding(t, mesh, tuple(a if a in mesh.axis_names else None for a in spec))
    mark(model.fc1.weight, "model", None)
    mark(model.fc1.bias, "model")
    mark(model.fc2.weight, None, "model")
    mark(x, "data", None)
    if target is not None:
        mark(target, "data", None)


def fwd(model, x, target):
    with torch.no_grad():
        return [model(x)]


def train(model, x, target):
    """One SGD step on the mean squared error; returns the loss and the new parameters."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    loss = torch.nn.functional.mse_loss(model(x), target)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return [loss.detach()] + [p.detach() for p in model.parameters()]


PROGRAMS = [
    # name, step function, uses target, mesh (axis -> size, major to minor)
    ("mlp.fwd.dpxtp.data2xmodel4", fwd, False, {"data": 2, "model": 4}),
    ("mlp.train.dpxtp.data2xmodel4", train, True, {"data": 2, "model": 4}),
    # the training step with one kind of parallelism each: every output replicated
    # (dp), every parameter output sharded (tp)
    ("mlp.train.dp.data8", train, True, {"data": 8}),
    ("mlp.train.tp.model8", train, True, {"model": 8}),
]


# ----------------------------------------------------------------------------- files

def put_pair(rel_base, text, pb):
    """Write a module's text and HloProto under samples/torchxla/ (each gzipped, with
    no name and mtime 0, when over GZIP_OVER); returns the manifest's paths."""
    paths = {}
    for key, rel, data in (("hlo", rel_base + ".hlo", text), ("pb", rel_base + ".hlo.pb", pb)):
        if len(data) > GZIP_OVER:
            data, rel = gzip.compress(data, compresslevel=9, mtime=0), rel + ".gz"
        os.makedirs(os.path.dirname(os.path.join(OUT, rel)), exist_ok=True)
        with open(os.path.join(OUT, rel), "wb") as f:
            f.write(data)
        paths[key] = rel
    return paths


def dumped(files, stage):
    """(text, HloProto bytes) of the one SyncTensorsGraph module dumped at `stage`
    (a file-name suffix before .txt / .hlo.pb) among `files`."""
    picked = {}
    for f in files:
        if ".SyncTensorsGraph." not in f:
            continue
        for ext in (".txt", ".hlo.pb"):
            if f.endswith(stage + ext):
                assert ext not in picked, sorted(files)
                picked[ext] = os.path.join(DUMP, f)
    assert len(picked) == 2, (stage, sorted(files))
    with open(picked[".txt"], "rb") as f:
        text = f.read()
    with open(picked[".hlo.pb"], "rb") as f:
        pb = f.read()
    return text, pb


# ----------------------------------------------------------------------------- export

def max_abs_diff(ref, got):
    worst = 0.0
    for a, b in zip(ref, got, strict=True):
        if a.shape != b.shape:
            return None
        worst = max(worst, float((a.double() - b.double()).abs().max()))
    return worst if np.isfinite(worst) else str(worst)


def export(name, step, uses_target, axes):
    print("==", name, flush=True)
    mesh = xs.Mesh(np.arange(8), tuple(axes.values()), tuple(axes))
    model, x, target = init(0)
    ref_model, ref_x, ref_target = init(0)
    ref = [t.detach() for t in step(ref_model, ref_x, ref_target)]

    dev = torch_xla.device()
    model = model.to(dev)
    x, target = x.to(dev), (target.to(dev) if uses_target else None)
    shard_megatron(model, x, target, mesh)
    before = set(os.listdir(DUMP))
    outs = step(model, x, target)
    torch_xla.sync()
    new = set(os.listdir(DUMP)) - before
    base_text, base_pb = dumped(new, ".before_optimizations")
    dist_text, dist_pb = dumped(new, ".after_spmd-partitioning.before_pipeline-end")
    got = [t.cpu() for t in outs]

    rel = f"mlp/{name}"
    return {"name": name, "kind": "gspmd", "config": "mlp", "mesh": dict(axes),
            "library": {"name": "torch-xla", "version": version("torch-xla")},
            "baseline": put_pair(rel + ".baseline", base_text, base_pb),
            "distributed": put_pair(rel + ".dist", dist_text, dist_pb),
            "relations": "auto", "expected": "verified",
            "note": "torch_xla SPMD, PJRT CPU with 8 devices; numerics against eager "
                    "PyTorch on the CPU",
            "numerics": {"max_abs_diff": max_abs_diff(ref, got)}}


def main():
    xr.use_spmd()
    assert xr.global_runtime_device_count() == 8, xr.global_runtime_device_count()
    shutil.rmtree(os.path.join(OUT, "mlp"), ignore_errors=True)
    pairs = [export(*prog) for prog in PROGRAMS]
    doc = {"scalify_manifest": 1,
           "generator": {"torch": torch.__version__, "torch-xla": version("torch-xla"),
                         "script": "samples/gen/run_torchxla.sh"},
           "pairs": sorted(pairs, key=lambda e: e["name"])}
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        f.write(json.dumps(doc, indent=1) + "\n")
    print(f"{len(pairs)} pairs written")


if __name__ == "__main__":
    main()
