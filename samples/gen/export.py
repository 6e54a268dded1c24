"""Exports the sample corpus: baseline / distributed HLO pairs, relations files,
tiny-config inputs and outputs, and samples/manifest.json.

Run from the repository root through samples/gen/run.sh (which sets XLA_FLAGS before jax
is imported and loads this file under its repo-relative name, so HLO source paths are relative).

    export.py [--only SUBSTRING ...] [--no-numerics]
"""
import functools
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

assert "--xla_force_host_platform_device_count=64" in os.environ.get("XLA_FLAGS", ""), \
    "run through samples/gen/run.sh (XLA_FLAGS must be set before jax is imported)"

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

GEN = "samples/gen"
OUT = "samples"
from scalify_jax import after_partitioning, before_partitioning, make_mesh, relations_doc, spec_view
GZIP_OVER = 200 * 1024


def load(name):
    """Import samples/gen/<name>.py with a repo-relative code filename."""
    path = os.path.join(GEN, name + ".py")
    mod = types.ModuleType(name)
    mod.__file__ = path
    sys.modules[name] = mod
    exec(compile(open(path).read(), path, "exec"), mod.__dict__)
    return mod


M = load("models")
PL = load("parallel")
B = load("bugs")

ARGS = sys.argv[1:]
ONLY = [ARGS[i + 1] for i, a in enumerate(ARGS) if a == "--only"]
NUMERICS = "--no-numerics" not in ARGS

MANIFEST = []
WRITTEN = set()


# ----------------------------------------------------------------------------- files

def write_bytes(rel, data):
    """Write data under samples/; gzip (deterministically) when large. Returns the
    path relative to samples/."""
    if len(data) > GZIP_OVER:
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as g:
            g.write(data)
        data, rel = buf.getvalue(), rel + ".gz"
    path = os.path.join(OUT, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    WRITTEN.add(rel)
    return rel


def dumps(obj, indent=0):
    """JSON with one line per leaf-level object (small dicts/lists stay inline)."""
    pad = " " * indent
    if isinstance(obj, dict) and obj and any(isinstance(v, (dict, list)) and len(json.dumps(v)) > 60
                                             for v in obj.values()):
        items = [f'{pad} {json.dumps(k)}: {dumps(v, indent + 1).lstrip()}' for k, v in obj.items()]
        return pad + "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and obj and len(json.dumps(obj)) > 100:
        items = [dumps(v, indent + 1) for v in obj]
        return pad + "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return pad + json.dumps(obj)


def write_json(rel, obj):
    path = os.path.join(OUT, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(dumps(obj) + "\n")
    WRITTEN.add(rel)
    return rel


DTYPE_CODE = {"int32": 4, "float16": 10, "float32": 11, "bfloat16": 16, "bool": 1}


def stf(tensors):
    """Scalify tensor file: see samples/README.md."""
    out = [b"STF1", struct.pack("<I", len(tensors))]
    for name, a in tensors:
        a = np.asarray(a)
        nb = name.encode()
        out.append(struct.pack("<I", len(nb)) + nb)
        out.append(struct.pack("<II", DTYPE_CODE[str(a.dtype)], a.ndim))
        out.append(struct.pack("<%dq" % a.ndim, *a.shape))
        raw = np.ascontiguousarray(a).tobytes()
        out.append(struct.pack("<Q", len(raw)) + raw)
    return b"".join(out)


# ----------------------------------------------------------------------------- HLO
# The modules before and after the partitioner (each pass dump in a temporary
# folder), the mesh and the relations views and document: python/scalify_jax
# (before_partitioning, after_partitioning, make_mesh, spec_view, relations_doc;
# on run.sh's path).

def save_hlo(rel_base, text, pb):
    return {"hlo": write_bytes(rel_base + ".hlo", text.encode()),
            "pb": write_bytes(rel_base + ".hlo.pb", pb)}


def sds_with(tree, specs, mesh):
    return jax.tree.map(lambda s, sp: jax.ShapeDtypeStruct(s.shape, s.dtype,
                                                           sharding=NamedSharding(mesh, sp)),
                        tree, specs, is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct))


def param_names(fn, args):
    """One name per HLO entry parameter: the argument name for a leaf argument,
    the dict key for a leaf of a dict argument (HLO parameter order)."""
    import inspect
    top = list(inspect.signature(fn).parameters)
    names = []
    for path, _ in jax.tree_util.tree_flatten_with_path(tuple(args))[0]:
        keys = [str(k.key) for k in path[1:] if hasattr(k, "key")]
        names.append(".".join(keys) if keys else top[path[0].idx])
    return names


def relations(mesh_axes, names, in_specs_flat, out_specs_flat, out_names=None):
    """The relations document of a shard_map pair, views from the flattened specs."""
    return relations_doc(mesh_axes, names, [spec_view(s) for s in in_specs_flat],
                         out_names or ["result"], [spec_view(s) for s in out_specs_flat])

# Blank lines: they keep every line below where the committed samples record it
# (samples/README.md, Determinism); drop them at the next full regeneration.















































def flat_specs(specs, n):
    leaves = jax.tree_util.tree_leaves(specs, is_leaf=lambda x: isinstance(x, P) or x is None)
    assert len(leaves) == n, (len(leaves), n)
    return leaves


def bug_location(bug_id):
    tag = f"# BUG({bug_id})"
    path = os.path.join(GEN, "parallel.py")
    for i, line in enumerate(open(path), 1):
        if tag in line:
            return {"file": path, "line": i}
    raise KeyError(bug_id)


def want(name):
    return not ONLY or any(o in name for o in ONLY)


# ----------------------------------------------------------------------------- numerics

def to_np(a):
    a = np.asarray(a)
    return a.astype(np.float32) if a.dtype != np.int32 else a


def compare(prog, args, base_out=None):
    """Run the single-device baseline and the shard_map program on the same
    concrete inputs; return max |difference| (None if shapes differ)."""
    if base_out is None:
        base_out = jax.jit(prog.baseline)(*args)
    placed = jax.tree.map(lambda a, sp: jax.device_put(a, NamedSharding(prog.mesh, sp)),
                          tuple(args), tuple(prog.in_specs),
                          is_leaf=lambda x: isinstance(x, P))
    dist_out = jax.jit(prog.smap())(*placed)
    b, d = to_np(base_out), to_np(dist_out)
    if b.shape != d.shape:
        return None, base_out
    diff = float(np.max(np.abs(b - d)))
    return (diff if np.isfinite(diff) else str(diff)), base_out


# ----------------------------------------------------------------------------- pairs

BASELINES = {}   # key -> (files, names)


def plain_baseline(key, fn, abstract, concrete=None, rel_dir=None):
    """Lower the plain single-device function once per key; also write the io file
    (when concrete inputs are given)."""
    if key in BASELINES:
        return BASELINES[key]
    lo = jax.jit(fn).lower(*abstract)
    text, pb = before_partitioning(lo)
    files = save_hlo(f"{rel_dir}/{key}.baseline", text, pb)
    names = param_names(fn, abstract)
    io_rel = None
    if concrete is not None:
        out = jax.jit(fn)(*concrete)
        flat = jax.tree_util.tree_leaves(tuple(concrete))
        ts = [(f"in.{i}.{n}", a) for i, (n, a) in enumerate(zip(names, flat))]
        ts.append(("out.0", out))
        io_rel = write_bytes(f"{rel_dir}/{key}.io.stf", stf(ts))
    BASELINES[key] = (files, names, io_rel)
    return BASELINES[key]


def gspmd_specs(cfg, TP, DP):
    (tok, spec), out = PL.llama_tp_specs(cfg, TP, DP)
    if cfg.model == "moe":
        for k in list(spec):
            if k.endswith("router"):
                spec[k] = P()
    return (tok, spec), P(DP, None, None)


def export_gspmd(cfg_name, mesh_axes, numerics):
    cfg = M.Cfg(cfg_name)
    tag = "x".join(f"{a}{n}" for a, n in mesh_axes.items())
    name = f"{cfg_name}.gspmd.{tag}"
    if not want(name):
        return
    print("==", name, flush=True)
    mesh = make_mesh(mesh_axes)
    DP = "dp" if "dp" in mesh_axes else None
    in_specs, out_spec = gspmd_specs(cfg, "tp", DP)
    shard = lambda sp: NamedSharding(mesh, sp)
    def forward(tokens, params):
        return M.forward(cfg, params, tokens)
    fn = jax.jit(forward,
                 in_shardings=jax.tree.map(shard, in_specs, is_leaf=lambda x: isinstance(x, P)),
                 out_shardings=shard(out_spec))
    tokens, params = M.abstract_inputs(cfg)
    lo = fn.lower(tokens, params)
    rel_dir = cfg_name
    base = save_hlo(f"{rel_dir}/{name}.baseline", *before_partitioning(lo))
    dist = save_hlo(f"{rel_dir}/{name}.dist", *after_partitioning(lo))
    entry = {"name": name, "kind": "gspmd", "config": cfg_name, "mesh": mesh_axes,
             "baseline": base, "distributed": dist, "relations": "auto",
             "expected": "verified"}
    if numerics:
        t, ps = M.random_inputs(cfg)
        b = jax.jit(forward)(t, ps)
        d = fn(t, ps)
        entry["numerics"] = {"max_abs_diff": float(np.max(np.abs(to_np(b) - to_np(d))))}
    MANIFEST.append(entry)


def export_smap(name, cfg_name, prog, mesh_axes, abstract, concrete, base_key,
                bug=None, kinds=None, rel_mesh=None, note=None, in_names=None,
                out_name="logits", probe=None, io=True):
    """io=False: run the numerics on `concrete` but write no io file (inputs too
    large to commit)."""
    if not want(name):
        return
    print("==", name, flush=True)
    rel_dir = cfg_name
    base_files, names, io_rel = plain_baseline(base_key, prog.baseline, abstract,
                                               concrete if io else None, rel_dir)
    if in_names:
        names = in_names
    dist_abs = sds_with(tuple(abstract), tuple(prog.in_specs), prog.mesh)
    lo = jax.jit(prog.smap()).lower(*dist_abs)
    dist = save_hlo(f"{rel_dir}/{name}.dist", *after_partitioning(lo))
    n = len(names)
    ins = flat_specs(prog.in_specs, n)
    outs = [prog.out_specs]
    rel = relations(rel_mesh or mesh_axes, names, ins, outs, [out_name])
    rel_path = write_json(f"{rel_dir}/{name}.relations.json", rel)
    entry = {"name": name, "kind": "shard_map", "config": cfg_name,
             "mesh": mesh_axes, "baseline": base_files, "distributed": dist,
             "relations": rel_path, "expected": "mismatch" if bug else "verified"}
    if io_rel:
        entry["io"] = io_rel
    if bug:
        entry["bug"] = {"id": bug, "kinds": kinds, "locations": [bug_location(bug)]}
    if note:
        entry["note"] = note
    if concrete is not None and NUMERICS:
        diff, _ = compare(prog, concrete)
        entry["numerics"] = {"max_abs_diff": diff}
        if diff is None:
            entry["numerics"]["note"] = "distributed output shape differs from the baseline's"
        if probe is not None:
            what, fn = probe
            pdiff, _ = compare(prog, fn(concrete))
            entry["numerics"]["probe"] = {"inputs": what, "max_abs_diff": pdiff}
    MANIFEST.append(entry)


def scale_out_proj(args):
    """Large row-parallel partial sums: fine in bf16 (max ~3e38), overflow f16 (65504)."""
    t, ps = args
    ps = {k: (v * np.asarray(1e5, v.dtype) if k.endswith((".wo", ".w_down")) else v)
          for k, v in ps.items()}
    return (t, ps)


def tiny_args(cfg):
    t, ps = M.abstract_inputs(cfg)
    ct, cps = M.random_inputs(cfg)
    return (t, ps), (ct, cps)


# ----------------------------------------------------------------------------- corpus

def corpus():
    # ---- a. GSPMD pairs, tiny configs (numerically checked)
    for cfg_name in ("tiny", "tiny-moe"):
        for axes in ({"tp": 2}, {"tp": 4}, {"tp": 8}, {"dp": 2, "tp": 4}):
            export_gspmd(cfg_name, axes, NUMERICS)

    # ---- b. hand-written shard_map pairs and their bug variants (tiny)
    tp4 = {"tp": 4}
    cfg = M.Cfg("tiny")
    ab, co = tiny_args(cfg)
    m = make_mesh(tp4)
    tp_bugs = [
        (None, None),
        ("missing-allreduce", ["missing-all-reduce"]),
        ("embed-missing-allreduce", ["missing-all-reduce"]),
        ("duplicated-allreduce", ["wrong-reduction"]),
        ("pmean-allreduce", ["wrong-reduction", "constant-mismatch"]),
        ("attn-scale-per-shard", ["constant-mismatch"]),
    ]
    for bug, kinds in tp_bugs:
        name = "tiny.megatron_tp.tp4" + (f".bug.{bug}" if bug else "")
        export_smap(name, "tiny", PL.make_llama_tp(cfg, m, bug), tp4, ab, co, "tiny",
                    bug, kinds)
    for bug, kinds in [(None, None), ("sbh-as-bsh", ["layout-mismatch"])]:
        name = "tiny.megatron_tp_sbh.tp4" + (f".bug.{bug}" if bug else "")
        export_smap(name, "tiny", PL.make_llama_tp(cfg, m, bug, sbh=True), tp4, ab, co,
                    "tiny", bug, kinds)
    # 2-D mesh dp x tp
    m2 = make_mesh({"dp": 2, "tp": 4})
    for bug, kinds in [(None, None), ("wrong-mesh-axis", ["wrong-collective-group"])]:
        name = "tiny.megatron_tp.dp2xtp4" + (f".bug.{bug}" if bug else "")
        export_smap(name, "tiny", PL.make_llama_tp(cfg, m2, bug, DP="dp"),
                    {"dp": 2, "tp": 4}, ab, co, "tiny", bug, kinds)
    # wrong replica groups: the same program on a (dp, tpa, tpb) view of the same
    # 8 devices; the all-reduce names only tpb -> groups {0,1},{2,3},...
    m3 = make_mesh({"dp": 2, "tpa": 2, "tpb": 2})
    prog = PL.make_llama_tp(cfg, m3, "wrong-replica-groups", TP=("tpa", "tpb"), DP="dp")
    name = "tiny.megatron_tp.dp2xtp4.bug.wrong-replica-groups"
    if want(name):
        export_smap(name, "tiny", prog, {"dp": 2, "tp": 4}, ab, co, "tiny",
                    "wrong-replica-groups", ["wrong-collective-group"],
                    note="exported on a (dp=2, tpa=2, tpb=2) mesh of the same 8 devices; "
                         "tp = (tpa, tpb) major to minor, so the relations use dp x tp")
        # rewrite the relations with the intended 2-D mesh
        rel = relations({"dp": 2, "tp": 4}, BASELINES["tiny"][1],
                        flat_specs(PL.llama_tp_specs(cfg, "tp", "dp")[0], len(BASELINES["tiny"][1])),
                        [PL.llama_tp_specs(cfg, "tp", "dp")[1]], ["logits"])
        write_json(f"tiny/{name}.relations.json", rel)

    # sequence parallelism
    for bug, kinds in [(None, None), ("allgather-wrong-dim", ["wrong-shard-dim"]),
                       ("reducescatter-no-allgather", ["wrong-shard-dim"])]:
        name = "tiny.megatron_sp.tp4" + (f".bug.{bug}" if bug else "")
        export_smap(name, "tiny", PL.make_llama_sp(cfg, m, bug), tp4, ab, co, "tiny",
                    bug, kinds)
    # Ulysses
    msp = make_mesh({"sp": 4})
    for bug, kinds in [(None, None), ("ulysses-batch1-only", ["layout-mismatch"])]:
        name = "tiny.ulysses.sp4" + (f".bug.{bug}" if bug else "")
        export_smap(name, "tiny", PL.make_llama_ulysses(cfg, msp, bug), {"sp": 4}, ab, co,
                    "tiny", bug, kinds)
    for bug, kinds in [(None, None), ("rope-no-offset", ["constant-mismatch"])]:
        name = "tiny.ulysses_rope_local.sp4" + (f".bug.{bug}" if bug else "")
        export_smap(name, "tiny", PL.make_llama_ulysses(cfg, msp, bug, rope_local=True),
                    {"sp": 4}, ab, co, "tiny", bug, kinds)
    # fp16 all-reduce in a bf16 model
    cfgb = M.Cfg("tiny-bf16")
    abb, cob = tiny_args(cfgb)
    for bug, kinds in [(None, None), ("fp16-allreduce", ["dtype-mismatch"])]:
        name = "tiny-bf16.megatron_tp.tp4" + (f".bug.{bug}" if bug else "")
        export_smap(name, "tiny-bf16", PL.make_llama_tp(cfgb, m, bug), tp4, abb, cob,
                    "tiny-bf16", bug, kinds, probe=("wo and w_down scaled by 1e5", scale_out_proj))
    # q-norm over the sharded head dimension
    cfgq = M.Cfg("tiny-qknorm")
    abq, coq = tiny_args(cfgq)
    for bug, kinds in [(None, None), ("qnorm-sharded-dim", ["missing-all-reduce"])]:
        name = "tiny-qknorm.megatron_tp.tp4" + (f".bug.{bug}" if bug else "")
        export_smap(name, "tiny-qknorm", PL.make_llama_tp(cfgq, m, bug), tp4, abq, coq,
                    "tiny-qknorm", bug, kinds)
    # layers under jax.lax.scan: the tiny config, stacked weights, one while loop
    cfgs = M.Cfg("tiny-scan")
    abs_, cos_ = tiny_args(cfgs)
    for bug, kinds in [(None, None), ("scan-missing-allreduce", ["missing-all-reduce"])]:
        name = "tiny-scan.megatron_tp.tp4" + (f".bug.{bug}" if bug else "")
        export_smap(name, "tiny-scan", PL.make_llama_tp(cfgs, m, bug), tp4, abs_, cos_,
                    "tiny-scan", bug, kinds)
    # KV-cache decode step
    L, B, Sc = cfg.layers, cfg.batch, cfg.seq
    cache_shape = (L, B, Sc, cfg.kv_heads, cfg.head_dim)
    t1 = jax.ShapeDtypeStruct((B, 1), jnp.int32)
    cabs = jax.ShapeDtypeStruct(cache_shape, jnp.float32)
    rng = np.random.default_rng(1)
    dab = (t1, ab[1], cabs, cabs)
    dco = (rng.integers(0, cfg.vocab, (B, 1), dtype=np.int32), co[1],
           rng.standard_normal(cache_shape).astype(np.float32),
           rng.standard_normal(cache_shape).astype(np.float32))
    for bug, kinds in [(None, None), ("kv-cache-offset", ["wrong-shard-dim"])]:
        name = "tiny.decode_tp.tp4" + (f".bug.{bug}" if bug else "")
        export_smap(name, "tiny", PL.make_decode_tp(cfg, m, bug), tp4, dab, dco,
                    "tiny-decode", bug, kinds)
    # GPT-2
    cfgg = M.Cfg("tiny-gpt2")
    abg, cog = tiny_args(cfgg)
    for bug, kinds in [(None, None), ("fused-qkv-layout", ["layout-mismatch"]),
                       ("posemb-unreduced", ["missing-all-reduce"]),
                       ("bias-before-allreduce", ["wrong-reduction"])]:
        name = "tiny-gpt2.megatron_tp.tp4" + (f".bug.{bug}" if bug else "")
        export_smap(name, "tiny-gpt2", PL.make_gpt2_tp(cfgg, m, bug), tp4, abg, cog,
                    "tiny-gpt2", bug, kinds)
    # MoE: expert parallelism and the router gradient
    cfgm = M.Cfg("tiny-moe")
    abm, com = tiny_args(cfgm)
    mep = make_mesh({"ep": 4})
    for bug, kinds in [(None, None), ("expert-order", ["layout-mismatch"])]:
        name = "tiny-moe.expert_parallel.ep4" + (f".bug.{bug}" if bug else "")
        export_smap(name, "tiny-moe", PL.make_moe_ep(cfgm, mep, bug), {"ep": 4}, abm, com,
                    "tiny-moe", bug, kinds)
    for bug, kinds in [(None, None)]:
        name = "tiny-moe.megatron_tp.tp4"
        export_smap(name, "tiny-moe", PL.make_llama_tp(cfgm, m, bug), tp4, abm, com,
                    "tiny-moe", bug, kinds)
    rin = PL.router_step_inputs(cfgm)
    rab = tuple(jax.ShapeDtypeStruct(s, jnp.float32) for _, s in rin)
    rng = np.random.default_rng(2)
    rco = tuple((rng.standard_normal(s) / (np.sqrt(s[-2]) if len(s) == 3 else 1)).astype(np.float32)
                for _, s in rin)
    for bug, kinds in [(None, None), ("router-unsynced", ["missing-all-reduce"])]:
        name = "tiny-moe.router_grad_sp.tp4" + (f".bug.{bug}" if bug else "")
        export_smap(name, "tiny-moe", PL.make_router_step(cfgm, m, bug), tp4, rab, rco,
                    "tiny-moe-router-step", bug, kinds, in_names=[n for n, _ in rin],
                    out_name="router")

    # ---- c. full-size: GSPMD and hand-written, lowered from shapes only
    for cfg_name in ("llama3.1-8b", "llama3.1-70b", "llama3.1-405b",
                     "mixtral-8x7b", "mixtral-8x22b"):
        meshes = [{"tp": 8}]
        if cfg_name == "llama3.1-8b":
            meshes = [{"tp": 2}, {"tp": 4}, {"tp": 8}, {"dp": 2, "tp": 4}]
        for axes in meshes:
            export_gspmd(cfg_name, axes, False)
    full_smap = [
        ("llama3.1-8b", "megatron_tp", {"tp": 8}, None, None),
        ("llama3.1-8b", "megatron_tp", {"tp": 8}, "missing-allreduce", ["missing-all-reduce"]),
        ("llama3.1-8b", "megatron_tp", {"tp": 8}, "fp16-allreduce", ["dtype-mismatch"]),
        ("llama3.1-8b", "megatron_sp", {"tp": 8}, None, None),
        ("llama3.1-70b", "megatron_tp", {"tp": 8}, None, None),
        ("llama3.1-405b", "megatron_tp", {"tp": 8}, None, None),
        ("mixtral-8x7b", "expert_parallel", {"ep": 8}, None, None),
        ("mixtral-8x7b", "expert_parallel", {"ep": 8}, "expert-order", ["layout-mismatch"]),
    ]
    for cfg_name, kind, axes, bug, kinds in full_smap:
        cfgf = M.Cfg(cfg_name)
        meshf = make_mesh(axes)
        make = {"megatron_tp": PL.make_llama_tp, "megatron_sp": PL.make_llama_sp,
                "expert_parallel": PL.make_moe_ep}[kind]
        tag = "x".join(f"{a}{n}" for a, n in axes.items())
        name = f"{cfg_name}.{kind}.{tag}" + (f".bug.{bug}" if bug else "")
        export_smap(name, cfg_name, make(cfgf, meshf, bug), axes,
                    M.abstract_inputs(cfgf), None, cfg_name, bug, kinds)

    # ---- d. device-count scaling: one config, megatron_tp at tp = 2 ... 64 (make bench);
    # run for the numerics, no io file (the weights are ~50 MB)
    cfgx = M.Cfg("llama-scale")
    abx, cox = tiny_args(cfgx)
    for tp in (2, 4, 8, 16, 32, 64):
        axes = {"tp": tp}
        export_smap(f"llama-scale.megatron_tp.tp{tp}", "llama-scale",
                    PL.make_llama_tp(cfgx, make_mesh(axes)), axes, abx, cox,
                    "llama-scale", io=False)

    # ---- e. full size from shapes (8x22B EP, 8B/405B scanned). HLO records module ids and this call's span: add pairs last, keep span
    for cfg_name, kind, make, axes, bug, kinds in (("mixtral-8x22b", "expert_parallel", PL.make_moe_ep, {"ep": 8}, None, None),
                                                   ("llama3.1-8b-scan", "megatron_tp", PL.make_llama_tp, {"tp": 8}, None, None),
                                                   ("llama3.1-405b-scan", "megatron_tp", PL.make_llama_tp, {"tp": 8}, None, None),
                                                   ("mixtral-8x22b", "expert_parallel", PL.make_moe_ep, {"ep": 8}, "expert-order", ["layout-mismatch"])):
        cfgf, tag, export = M.Cfg(cfg_name), "x".join(f"{a}{n}" for a, n in axes.items()), functools.partial(export_smap, bug=bug, kinds=kinds)
        export(f"{cfg_name}.{kind}.{tag}" + (f".bug.{bug}" if bug else ""), cfg_name, make(cfgf, make_mesh(axes), bug), axes,
                    M.abstract_inputs(cfgf), None, cfg_name)


def write_bugs_md(pairs):
    by_bug = {}
    for e in pairs:
        if "bug" in e:
            by_bug.setdefault(e["bug"]["id"], []).append(e)
    out = B.INTRO.format(n_bugs=len(by_bug), n_var=sum(len(v) for v in by_bug.values())).split("\n")
    for bid, info in B.BUGS.items():
        if bid not in by_bug:
            continue
        out += [f"## {bid}: {info['title']}", "",
                f"- Expected finding kinds: {', '.join('`%s`' % k for k in info['kinds'])}",
                f"- Mirrors: {info['ref']}",
                f"- Mistake: {info['what']}", "- Variants:"]
        for e in by_bug[bid]:
            loc = e["bug"]["locations"][0]
            num = e.get("numerics")
            if num is None:
                d = "not run (full size)"
            elif num["max_abs_diff"] is None:
                d = "output shape differs"
            else:
                d = "max |diff| %s" % (num["max_abs_diff"] if isinstance(num["max_abs_diff"], str)
                                         else "%.3g" % num["max_abs_diff"])
            if num and "probe" in num:
                d += "; with %s: %s" % (num["probe"]["inputs"], num["probe"]["max_abs_diff"])
            out.append(f"  - `{e['name']}` (mesh {e['mesh']}) at `{loc['file']}:{loc['line']}` — {d}")
        out.append("")
    path = os.path.join(OUT, "BUGS.md")
    with open(path, "w") as f:
        f.write("\n".join(out))


def main():
    # (each pass dump is made and removed by after_partitioning)
    if not ONLY:  # full run: drop stale outputs of earlier runs
        for name in M.CONFIGS:
            shutil.rmtree(os.path.join(OUT, name), ignore_errors=True)
    corpus()
    mpath = os.path.join(OUT, "manifest.json")
    old = []
    if ONLY and os.path.exists(mpath):
        old = [e for e in json.load(open(mpath))["pairs"]
               if e["name"] not in {m["name"] for m in MANIFEST}]
    pairs = sorted(old + MANIFEST, key=lambda e: e["name"])
    doc = {"scalify_manifest": 1,
           "generator": {"jax": jax.__version__,
                         "jaxlib": importlib.metadata.version("jaxlib"),
                         "script": "samples/gen/run.sh"},
           "pairs": pairs}
    write_json("manifest.json", doc)
    write_bugs_md(pairs)

    print(f"{len(MANIFEST)} pairs written, manifest has {len(pairs)}")


main()
