"""Exports the training-step corpus: baseline / distributed HLO pairs of the
shard_map training programs in samples/gen/train.py, their relations files and
samples/train/manifest.json (paths relative to samples/train/).

Run from the repository root through samples/gen/run_train.sh (which sets XLA_FLAGS
before jax is imported and loads this file under its repo-relative name, so HLO
source paths are relative).

    train_export.py [--only SUBSTRING ...] [--no-numerics]
"""
import ast
import gzip
import importlib.metadata
import io
import json
import os
import re
import shutil
import struct
import sys
import types

assert "--xla_force_host_platform_device_count=8" in os.environ.get("XLA_FLAGS", ""), \
    "run through samples/gen/run_train.sh (XLA_FLAGS must be set before jax is imported)"

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

jax.config.update("jax_enable_compilation_cache", False)

GEN = "samples/gen"
OUT = "samples/train"
DUMP = os.path.join(GEN, ".dump-train")
GZIP_OVER = 200 * 1024
WRITTEN = set()
from scalify_jax import (after_partitioning, before_partitioning, leaf_names,  # noqa: E402
                         make_mesh, relations_doc, spec_view)  # python/, on run_train.sh's path

HELPERS = ("load", "write_bytes", "dumps", "write_json", "save_hlo", "relations", "want")


def export_helpers(names):
    """Define here the named top-level functions of samples/gen/export.py (compiled
    at their own lines), bound to this module's GEN, OUT, DUMP and WRITTEN. export.py
    itself exports the main corpus when run, so it is not imported."""
    path = os.path.join(GEN, "export.py")
    tree = ast.parse(open(path).read(), path)
    tree.body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert len(tree.body) == len(names), [n.name for n in tree.body]
    exec(compile(tree, path, "exec"), globals())


export_helpers(HELPERS)
T = load("train")

ARGS = sys.argv[1:]
ONLY = [ARGS[i + 1] for i, a in enumerate(ARGS) if a == "--only"]
NUMERICS = "--no-numerics" not in ARGS

MANIFEST = []
BASELINES = {}


def leaf_specs(specs, args):
    """One PartitionSpec per leaf of args (specs may be a pytree prefix)."""
    is_p = lambda s: isinstance(s, P) or s is None
    full = jax.tree.map(lambda sp, sub: jax.tree.map(lambda _: sp, sub), specs, args,
                        is_leaf=is_p)
    return jax.tree_util.tree_leaves(full, is_leaf=is_p)


def key_names(path):
    return [str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path]


def out_names(prog, args):
    """One name per output leaf: the pytree path under the step's output names,
    e.g. `params.w1`, `loss`."""
    shapes = jax.eval_shape(prog.baseline, *args)
    if not isinstance(shapes, tuple):
        shapes = (shapes,)
    return [".".join([prog.outputs[path[0].idx]] + key_names(path[1:]))
            for path, _ in jax.tree_util.tree_flatten_with_path(shapes)[0]]


# (in_names, the parameter names, is scalify_jax.leaf_names now; these blank
# lines keep every line below where the committed samples record it.)








def carried_lines(text):
    """The (file, line) pairs an HLO text carries as the source of some
    instruction: the innermost frame of its stack_frame_id (or its
    source_file/source_line), as a checker resolves it."""
    section, names, locs, frames = None, {}, {}, {}
    for raw in text.splitlines():
        s = raw.strip()
        if s in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            section = s
            continue
        m = re.match(r"(\d+) (.*)$", s) if section and s else None
        if not m:
            section = None
        elif section == "FileNames":
            names[int(m[1])] = json.loads(m[2])
        elif section in ("FileLocations", "StackFrames"):
            kv = dict(f.split("=", 1) for f in m[2].strip("{}").split())
            if section == "FileLocations":
                locs[int(m[1])] = (names[int(kv["file_name_id"])], int(kv["line"]))
            else:
                frames[int(m[1])] = locs[int(kv["file_location_id"])]
    out = set()
    for m in re.finditer(r'source_file="([^"]*)" source_line=(\d+)', text):
        out.add((m[1], int(m[2])))
    for m in re.finditer(r'stack_frame_id=(\d+)', text):
        if int(m[1]) in frames:
            out.add(frames[int(m[1])])
    return out


def bug_locations(bug_id, dist_text):
    """The manifest's bug.locations: every line tagged `# BUG(<id>)` that the
    distributed dump carries, and every line tagged `# BUG-SITE(<id>)` (which it
    must carry). A BUG line the dump does not carry (a mistake that emits no
    HLO, e.g. a collective left out) needs a BUG-SITE line: where the value it
    leaves wrong is consumed."""
    path = os.path.join(GEN, "train.py")
    carried = carried_lines(dist_text)
    bug, site = [], []
    for i, line in enumerate(open(path), 1):
        for m in re.finditer(r"# BUG(-SITE)?\(([^)]*)\)", line):
            if bug_id in [t.strip() for t in m[2].split(",")]:
                (site if m[1] else bug).append(i)
    assert bug or site, f"no # BUG({bug_id}) tag in {path}"
    missing = [i for i in site if (path, i) not in carried]
    assert not missing, f"{bug_id}: BUG-SITE lines {missing} carried by no instruction of the dump"
    lines = sorted(set(site) | {i for i in bug if (path, i) in carried})
    assert lines, f"{bug_id}: BUG lines {bug} carried by no instruction of the dump; tag a BUG-SITE"
    return [{"file": path, "line": i} for i in lines]


def place(prog, args):
    specs = leaf_specs(prog.in_specs, args)
    leaves, tree = jax.tree_util.tree_flatten(tuple(args))
    return jax.tree_util.tree_unflatten(
        tree, [jax.device_put(a, NamedSharding(prog.mesh, s)) for a, s in zip(leaves, specs)])


def max_abs_diff(prog):
    """Run the baseline and the shard_map program on the same seeded inputs; the
    largest |difference| over all outputs (None if a shape differs)."""
    base = jax.tree_util.tree_leaves(jax.jit(prog.baseline)(*prog.args))
    dist = jax.tree_util.tree_leaves(jax.jit(prog.smap())(*place(prog, prog.args)))
    worst = 0.0
    for b, d in zip(base, dist):
        b, d = np.asarray(b, np.float64), np.asarray(d, np.float64)
        if b.shape != d.shape:
            return None
        worst = max(worst, float(np.max(np.abs(b - d))) if b.size else 0.0)
    return worst if np.isfinite(worst) else str(worst)


def abstract(args):
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype), args)


def export_pair(name, prog, bug=None, kinds=None, note=None, rel_mesh=None):
    if not want(name):
        return
    print("==", name, flush=True)
    key = prog.family
    ab = abstract(tuple(prog.args))
    if key not in BASELINES:
        lo = jax.jit(prog.baseline).lower(*ab)
        BASELINES[key] = save_hlo(f"{key}.baseline", *before_partitioning(lo))
    specs = leaf_specs(prog.in_specs, ab)
    leaves, tree = jax.tree_util.tree_flatten(ab)
    dist_abs = jax.tree_util.tree_unflatten(
        tree, [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(prog.mesh, s))
               for a, s in zip(leaves, specs)])
    lo = jax.jit(prog.smap()).lower(*dist_abs)
    dist_text, dist_pb = after_partitioning(lo)
    dist = save_hlo(f"{name}.dist", dist_text, dist_pb)
    outs = out_names(prog, ab)
    out_specs = leaf_specs(prog.out_specs, jax.eval_shape(prog.baseline, *ab))
    mesh_axes = rel_mesh or dict(prog.mesh.shape)
    rel = relations(mesh_axes, leaf_names(prog.fn, ab), specs, out_specs, outs)
    rel_path = write_json(f"{name}.relations.json", rel)
    entry = {"name": name, "kind": "shard_map", "config": key, "mesh": dict(prog.mesh.shape),
             "baseline": BASELINES[key], "distributed": dist, "relations": rel_path,
             "expected": "mismatch" if bug else "verified"}
    if bug:
        entry["bug"] = {"id": bug, "kinds": kinds, "locations": bug_locations(bug, dist_text)}
    if note:
        entry["note"] = note
    if NUMERICS:
        diff = max_abs_diff(prog)
        entry["numerics"] = {"max_abs_diff": diff}
        if diff is None:
            entry["numerics"]["note"] = "distributed output shape differs from the baseline's"
    MANIFEST.append(entry)


def pairs(family, tag, make, variants, **kw):
    """Export make(bug) for bug in variants ((None, None) first: the correct pair)."""
    for bug, kinds in variants:
        name = f"{family}.{tag}" + (f".bug.{bug}" if bug else "")
        export_pair(name, make(bug), bug, kinds, **kw)


# ----------------------------------------------------------------------------- corpus

def corpus():
    dp4 = make_mesh({"dp": 4})
    pairs("mlp.dp_sgd", "dp4", lambda bug: T.make_dp_sgd(dp4, bug),
          [(None, None), ("dp-psum-grads", ["wrong-reduction"]),
           ("dp-missing-pmean", ["missing-all-reduce"])])
    dp2d = make_mesh({"dcn": 2, "dp": 4})
    pairs("mlp.dp_sgd", "dcn2xdp4", lambda bug: T.make_dp_sgd(dp2d, bug, DP=("dcn", "dp")),
          [(None, None), ("dp2d-pmean-one-axis", ["wrong-collective-group", "missing-all-reduce"])])
    pairs("mlp.dp_adam", "dp4", lambda bug: T.make_dp_adam(dp4, bug),
          [(None, None), ("adam-psum-grads", ["wrong-reduction"])])
    pairs("mlp.dp_sgd_global", "dp4", lambda bug: T.make_dp_sgd_global(dp4, bug),
          [(None, None), ("global-local-count", ["constant-mismatch", "wrong-reduction"])])
    dp2tp4 = make_mesh({"dp": 2, "tp": 4})
    pairs("mlp.dp_tp", "dp2xtp4", lambda bug: T.make_dp_tp_mlp(dp2tp4, bug),
          [(None, None), ("tp-pmean-wrong-axis", ["wrong-collective-group", "missing-all-reduce"]),
           ("tp-bare-psum", ["wrong-reduction"])])
    pairs("mlp.fsdp", "dp4", lambda bug: T.make_fsdp(dp4, bug),
          [(None, None), ("fsdp-gather-wrong-dim", ["wrong-shard-dim", "layout-mismatch"]),
           ("fsdp-scatter-no-mean", ["wrong-reduction", "constant-mismatch"])])
    pairs("mlp.grad_accum", "dp4", lambda bug: T.make_grad_accum(dp4, bug),
          [(None, None), ("accum-wrong-count", ["constant-mismatch"])])
    pp2 = make_mesh({"pp": 2})
    pairs("mlp.pipeline", "pp2", lambda bug: T.make_pipeline(pp2, bug),
          [(None, None), ("pp-permute-direction", ["wrong-collective-group", "wrong-shard-dim"])])
    cp4 = make_mesh({"cp": 4})
    pairs("attn.ring", "cp4", lambda bug: T.make_ring_attention(cp4, bug),
          [(None, None), ("ring-permute-direction", ["wrong-collective-group", "wrong-shard-dim"]),
           ("ring-no-rescale", ["constant-mismatch", "wrong-reduction"])])
    pairs("lm.dp", "dp4", lambda bug: T.make_lm(dp4, bug),
          [(None, None), ("lm-local-token-count", ["missing-all-reduce", "constant-mismatch"])])
    pairs("lm.dp_tp", "dp2xtp4", lambda bug: T.make_lm(dp2tp4, bug, TP="tp"),
          [(None, None), ("lm-tp-no-copy-grad", ["missing-all-reduce"])])
    pairs("linear.per_example_clip", "dp4", lambda bug: T.make_per_example(dp4), [(None, None)])
    pairs("mlp.dp_sgd_groups", "dp4", lambda bug: T.make_dp_sgd_groups(dp4, bug),
          [(None, None), ("dp-pmean-subgroups", ["wrong-collective-group"])])
    pairs("mlp.grad_accum_unrolled", "dp4", lambda bug: T.make_grad_accum_unrolled(dp4, bug),
          [(None, None), ("accum-unrolled-no-divide", ["constant-mismatch"])])


def main():
    os.makedirs(DUMP, exist_ok=True)
    if not ONLY and os.path.isdir(OUT):  # full run: drop stale outputs (all but README.md)
        for f in os.listdir(OUT):
            if f != "README.md":
                os.remove(os.path.join(OUT, f))
    corpus()
    mpath = os.path.join(OUT, "manifest.json")
    old = []
    if ONLY and os.path.exists(mpath):
        old = [e for e in json.load(open(mpath))["pairs"]
               if e["name"] not in {m["name"] for m in MANIFEST}]
    allp = sorted(old + MANIFEST, key=lambda e: e["name"])
    doc = {"scalify_manifest": 1,
           "generator": {"jax": jax.__version__,
                         "jaxlib": importlib.metadata.version("jaxlib"),
                         "optax": importlib.metadata.version("optax"),
                         "script": "samples/gen/run_train.sh"},
           "pairs": allp}
    write_json("manifest.json", doc)
    shutil.rmtree(DUMP, ignore_errors=True)
    print(f"{len(MANIFEST)} pairs written, manifest has {len(allp)}")


main()
