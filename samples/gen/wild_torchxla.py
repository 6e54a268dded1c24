"""PyTorch/XLA SPMD pairs for samples/wild/: a small causal LM from torch.nn modules
(Embedding, TransformerEncoder of TransformerEncoderLayer, LayerNorm, Linear) on
XLA CPU devices with torch_xla.distributed.spmd.mark_sharding (Megatron split on
'model', batch on 'data'); forward (no grad) and a training step (cross-entropy,
backward, torch.optim.AdamW). torch_xla hands the traced graph to XLA's GSPMD
partitioner: the baseline is XLA's `before_optimizations` dump of that graph (it
carries the mark_sharding annotations), the distributed program the module after
`spmd-partitioning`. Numerics: the same step in eager PyTorch on CPU.

Run through samples/gen/run_wild.sh (its own virtualenv); each program runs in a
child process with its own dump folder and device count.

    wild_torchxla.py [--only SUBSTR ...]
"""
import copy
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wild_files as F  # noqa: E402

DUMP = "samples/gen/.dump-wild-torchxla"
V, D, H, FFN, LAYERS, B, S = 128, 64, 8, 128, 2, 8, 16
# name -> (mesh axes, train)
PROGRAMS = {}
for _tag, _mesh in (("dpxtp.data2xmodel4", {"data": 2, "model": 4}), ("tp.model4", {"model": 4}),
                    ("dp.data8", {"data": 8})):
    for _train in (False, True):
        PROGRAMS[f"torchxla.lm.{'train' if _train else 'fwd'}.{_tag}"] = (_mesh, _train)


def build_model():
    import torch
    import torch.nn as nn

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(V, D)
            layer = nn.TransformerEncoderLayer(D, H, FFN, dropout=0.0, batch_first=True,
                                               norm_first=True)
            self.layers = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(D)
            self.head = nn.Linear(D, V, bias=False)

        def forward(self, tokens):
            mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1],
                                                                  device=tokens.device)
            x = self.layers(self.embed(tokens), mask=mask, is_causal=True)
            return self.head(self.norm(x))

    torch.manual_seed(0)
    return LM()


def step(model, tokens, targets, train):
    import torch
    if not train:
        with torch.no_grad():
            return [model(tokens)]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    loss.backward()
    opt.step()
    return [loss.detach()] + [p.detach() for p in model.parameters()]


def child(name, out):
    """Run one program: eager CPU reference, then SPMD on the XLA CPU devices."""
    import numpy as np
    import torch
    import torch_xla
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr
    mesh_axes, train = PROGRAMS[name]
    # the XLA device first: autograd sizes its per-device queues at the first backward
    xr.use_spmd()
    dev = torch_xla.device()
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, V, (B, S), generator=g)
    targets = torch.randint(0, V, (B, S), generator=g)
    model = build_model()
    cpu_model = copy.deepcopy(model)

    n = int(np.prod(list(mesh_axes.values())))
    assert xr.global_runtime_device_count() == n
    mesh = xs.Mesh(np.arange(n), tuple(mesh_axes.values()), tuple(mesh_axes))
    m = model.to(dev)
    tp = "model" if "model" in mesh_axes else None
    if tp:
        for pname, p in m.named_parameters():
            if pname.endswith(("embed.weight", "head.weight", "in_proj_weight", "linear1.weight")):
                xs.mark_sharding(p, mesh, (tp, None))
            elif pname.endswith(("in_proj_bias", "linear1.bias")):
                xs.mark_sharding(p, mesh, (tp,))
            elif pname.endswith(("out_proj.weight", "linear2.weight")):
                xs.mark_sharding(p, mesh, (None, tp))
    tx, ty = tokens.to(dev), targets.to(dev)
    if "data" in mesh_axes:
        xs.mark_sharding(tx, mesh, ("data", None))
        xs.mark_sharding(ty, mesh, ("data", None))
    got = step(m, tx, ty, train)
    torch_xla.sync()
    ref = step(cpu_model, tokens, targets, train)
    diff = max(float((a.cpu() - b).abs().max()) for a, b in zip(got, ref))
    with open(out, "w") as f:
        json.dump({"max_abs_diff": diff, "torch": torch.__version__,
                   "torch_xla": torch_xla.__version__}, f)


def biggest_module(d, stage):
    """The dump file prefix (module_NNNN.<name>.) of the largest module at `stage`
    (a step may also compile small transfer graphs)."""
    cands = [f for f in os.listdir(d) if stage in f and f.endswith(".txt")]
    best = max(cands, key=lambda f: os.path.getsize(os.path.join(d, f)))
    return ".".join(best.split(".")[:3]) + "."


def export(name):
    print("==", name, flush=True)
    mesh_axes, _ = PROGRAMS[name]
    d = os.path.abspath(os.path.join(DUMP, name))
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(int(
        __import__("math").prod(mesh_axes.values()))),
        XLA_FLAGS=f"--xla_dump_to={d} --xla_dump_hlo_pass_re=spmd-partitioning "
                  "--xla_dump_hlo_as_text --xla_dump_hlo_as_proto")
    subprocess.run([sys.executable, __file__, "--child", name, os.path.join(d, "numerics.json")],
                   env=env, check=True)
    prefix = biggest_module(d, "after_spmd-partitioning")
    with open(os.path.join(d, "numerics.json")) as f:
        num = json.load(f)
    rel = f"torchxla/{name}"
    entry = {"name": name, "kind": "gspmd", "config": "torchxla", "mesh": mesh_axes,
             "library": {"name": "torch-xla", "version": num["torch_xla"]},
             "baseline": F.put_pair(rel + ".baseline", *F.from_dump(d, "before_optimizations", prefix)),
             "distributed": F.put_pair(rel + ".dist", *F.from_dump(d, "after_spmd-partitioning", prefix)),
             "relations": "auto", "expected": "verified",
             "note": f"torch {num['torch']}; GSPMD partitioner (sharding propagation), "
                     "baseline = XLA's before_optimizations dump",
             "numerics": {"max_abs_diff": num["max_abs_diff"]}}
    shutil.rmtree(d, ignore_errors=True)
    return entry, num


def main():
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3])
        return
    args = sys.argv[1:]
    only = [args[i + 1] for i, a in enumerate(args) if a == "--only"]
    if not only:
        shutil.rmtree(os.path.join(F.OUT, "torchxla"), ignore_errors=True)
    entries, libs = [], {}
    for name in PROGRAMS:
        if not only or any(o in name for o in only):
            e, num = export(name)
            entries.append(e)
            libs = {"torch": num["torch"]}
    n = F.write_manifest(entries, {"torchxla"}, only, libs)
    print(f"{len(entries)} pairs written, manifest has {n}")


if __name__ == "__main__":
    main()
