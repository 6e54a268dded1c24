"""Exports samples/wild/: GSPMD pairs of models built with maintained libraries
(Flax Linen, Flax NNX, keras-hub, Equinox, MaxText), forward passes and training
steps, sharded by each library's own partitioning machinery (PyTorch/XLA pairs come
from wild_torchxla.py).

Run from the repository root through samples/gen/run_wild.sh (it sets XLA_FLAGS before
jax is imported and loads this file under its repo-relative name).

    wild.py [--only SUBSTRING ...] [--no-numerics]

A family module (wild_<family>.py) defines PROGRAMS, a list of Prog: a name, the
library and its version, the mesh, inputs(), and make(mesh) -> (fn, in_shardings,
out_shardings, context). The pair is jax.jit(fn, in_shardings, out_shardings) lowered
on the mesh; the numerics run the same make() on a mesh of the same axis names, each
of size 1 (one device), against the sharded program on the same inputs.
"""
import importlib.metadata
import os
import shutil
import sys
import types

assert "--xla_force_host_platform_device_count=8" in os.environ.get("XLA_FLAGS", ""), \
    "run through samples/gen/run_wild.sh (XLA_FLAGS must be set before jax is imported)"

import jax
import numpy as np
from scalify_jax import after_partitioning, before_partitioning, make_mesh  # python/

jax.config.update("jax_enable_compilation_cache", False)
# Library frames in HLO metadata: "flax/linen/attention.py", not the virtualenv's path.
jax.config.update("jax_hlo_source_file_canonicalization_regex", r"^.*/site-packages/")

GEN = "samples/gen"
# (each pass dump is made and removed by scalify_jax.after_partitioning)
# WILD_FAMILIES=a,b exports only those families (run_wild.sh runs maxtext in its own
# virtualenv); the manifest keeps the other families' pairs.
FAMILIES = tuple("wild_" + f for f in os.environ.get(
    "WILD_FAMILIES", "linen,nnx,keras,eqx,maxtext").split(","))

ARGS = sys.argv[1:]
ONLY = [ARGS[i + 1] for i, a in enumerate(ARGS) if a == "--only"]
NUMERICS = "--no-numerics" not in ARGS


def load(name, shared=None):
    """Import samples/gen/<name>.py under its repo-relative file name; `shared`
    names are put in its globals first."""
    path = os.path.join(GEN, name + ".py")
    mod = types.ModuleType(name)
    mod.__file__ = path
    mod.__dict__.update(shared or {})
    sys.modules[name] = mod
    exec(compile(open(path).read(), path, "exec"), mod.__dict__)
    return mod


F = load("wild_files")


class Prog:
    """One exported program. make(mesh) returns (fn, in_shardings, out_shardings,
    context): context() is entered around lowering and running (mesh, axis rules)."""

    def __init__(self, name, library, mesh, inputs, make, note=None):
        self.name, self.library, self.mesh_axes = name, library, dict(mesh)
        self.inputs, self.make, self.note = inputs, make, note


def version(dist):
    return importlib.metadata.version(dist)


def mesh_of(axes, unit=False):
    """Mesh over the first N CPU devices (iota order); unit=True: every axis size 1."""
    return make_mesh({a: 1 if unit else n for a, n in axes.items()})




# Blank lines: they keep every line below where the committed samples record it
# (samples/README.md, Determinism); drop them at the next full regeneration.












# ----------------------------------------------------------------------------- numerics

def place(tree, shardings):
    return jax.tree.map(lambda a, s: jax.device_put(a, s), tree, shardings)


def max_abs_diff(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    if len(la) != len(lb):
        return None
    worst = 0.0
    for x, y in zip(la, lb):
        x, y = (np.asarray(jax.random.key_data(v) if jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key)
                           else v, np.float64) for v in (x, y))
        if x.shape != y.shape:
            return None
        if x.size:
            # equal values (NaN where both are NaN, the same infinity) differ
            # by 0; a NaN on one side only makes the difference NaN, which
            # max(0.0, nan) would have dropped (a NaN-producing bug recorded
            # as equal to its baseline)
            same = (x == y) | (np.isnan(x) & np.isnan(y))
            with np.errstate(invalid="ignore"):
                m = float(np.max(np.where(same, 0.0, np.abs(x - y))))
            worst = float("nan") if np.isnan(m) or np.isnan(worst) else max(worst, m)
    return worst if np.isfinite(worst) else str(worst)


def run(prog, mesh, args):
    fn, ins, outs, ctx = prog.make(mesh)
    with ctx():
        jf = jax.jit(fn, in_shardings=ins, out_shardings=outs)
        return jax.device_get(jf(*place(args, ins)))


# ----------------------------------------------------------------------------- export

def export(prog, family):
    print("==", prog.name, flush=True)
    mesh = mesh_of(prog.mesh_axes)
    args = prog.inputs()
    fn, ins, outs, ctx = prog.make(mesh)
    with ctx():
        lo = jax.jit(fn, in_shardings=ins, out_shardings=outs).lower(*place(args, ins))
        base_text, base_pb = before_partitioning(lo)
        dist_text, dist_pb = after_partitioning(lo)

    rel = f"{family}/{prog.name}"
    lib, ver = prog.library
    entry = {"name": prog.name, "kind": "gspmd", "config": family, "mesh": prog.mesh_axes,
             "library": {"name": lib, "version": ver},
             "baseline": F.put_pair(rel + ".baseline", base_text, base_pb),
             "distributed": F.put_pair(rel + ".dist", dist_text, dist_pb),
             "relations": "auto", "expected": "verified"}
    if prog.note:
        entry["note"] = prog.note
    if NUMERICS:
        ref = run(prog, mesh_of(prog.mesh_axes, unit=True), args)
        got = run(prog, mesh, args)
        entry["numerics"] = {"max_abs_diff": max_abs_diff(ref, got)}
    return entry


def want(name):
    return not ONLY or any(o in name for o in ONLY)


def main():

    entries, done = [], set()
    for fam in FAMILIES:
        mod = load(fam, {"Prog": Prog, "version": version, "mesh_of": mesh_of})
        short = fam[len("wild_"):]
        done.add(short)
        if not ONLY:
            shutil.rmtree(os.path.join(F.OUT, short), ignore_errors=True)
        for prog in mod.PROGRAMS:
            if want(prog.name):
                entries.append(export(prog, short))
    n = F.write_manifest(entries, done, ONLY, {"jax": jax.__version__, "jaxlib": version("jaxlib")})

    print(f"{len(entries)} pairs written, manifest has {n}")


if __name__ == "__main__":
    main()
