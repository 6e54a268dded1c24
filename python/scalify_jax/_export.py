"""export_pair and the pieces it is made of (see the package docstring).

Facts this relies on (XLA pass dumps, as samples/README.md describes them):
compiling with --xla_dump_hlo_pass_re=spmd-partitioning writes the module
right after the partitioner as '*after_spmd-partitioning*.txt' and '.hlo.pb'
(an HloProto); the protobuf keeps the partitioner's parameter and result
shardings, which `scalify check --auto-relations` reads. A persistent
compilation cache hit skips the passes and writes no dump, so the cache is
turned off while exporting.
"""
import contextlib
import importlib.metadata
import inspect
import json
import os
import shutil
import tempfile

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

MANIFEST = "manifest.json"


class ExportError(Exception):
    """A pair that cannot be exported as asked; the message says why."""


def versions():
    """The JAX and jaxlib versions that write the files."""
    try:
        jaxlib = importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        jaxlib = getattr(getattr(jax, "lib", None), "__version__", "unknown")
    return {"jax": jax.__version__, "jaxlib": jaxlib}


def _reset_cache():
    # JAX decides once per process whether the persistent cache is used; the
    # decision is taken again only after a reset (jax._src: no public API).
    try:
        from jax._src import compilation_cache
        compilation_cache.reset_cache()
    except (ImportError, AttributeError):
        pass


@contextlib.contextmanager
def no_compilation_cache():
    """Turn JAX's persistent compilation cache off for the duration: a cache
    hit compiles nothing, so XLA runs no pass and dumps nothing (the cache
    key leaves the dump options out)."""
    name = "jax_enable_compilation_cache"
    try:
        old = getattr(jax.config, name)
    except AttributeError:
        yield
        return
    jax.config.update(name, False)
    _reset_cache()
    try:
        yield
    finally:
        jax.config.update(name, old)
        _reset_cache()


def after_partitioning(lowered):
    """(text, HloProto bytes) of `lowered`'s module right after the SPMD
    partitioner, before fusion: compiled with a pass dump in a fresh folder
    (removed afterwards), the compilation cache off."""
    d = tempfile.mkdtemp(prefix="scalify-jax-dump-")
    try:
        with no_compilation_cache():
            lowered.compile(compiler_options={
                "xla_dump_to": d, "xla_dump_hlo_pass_re": "spmd-partitioning",
                "xla_dump_hlo_as_text": True, "xla_dump_hlo_as_proto": True,
                "xla_dump_large_constants": True})
        files = sorted(os.listdir(d))
        picked = {}
        for ext in (".txt", ".hlo.pb"):
            found = [f for f in files if "after_spmd-partitioning" in f and f.endswith(ext)]
            if len(found) != 1:
                raise ExportError(
                    "expected one '*after_spmd-partitioning*%s' file in XLA's pass dump, found %d "
                    "(files: %s); was the program partitioned (a mesh of more than one device)?"
                    % (ext, len(found), ", ".join(files) or "none"))
            picked[ext] = os.path.join(d, found[0])
        with open(picked[".txt"]) as f:
            text = f.read()
        with open(picked[".hlo.pb"], "rb") as f:
            pb = f.read()
        return text, pb
    finally:
        shutil.rmtree(d, ignore_errors=True)


def before_partitioning(lowered):
    """(text, bare HloModuleProto bytes) of the lowered module, with source
    locations."""
    text = lowered.as_text(dialect="hlo", debug_info=True)
    pb = lowered.compiler_ir("hlo").as_serialized_hlo_module_proto()
    return text, pb


def make_mesh(mesh):
    """A Mesh, or {axis: size} (major to minor) over the first devices."""
    if isinstance(mesh, Mesh):
        return mesh
    if not isinstance(mesh, dict) or not mesh:
        raise ExportError("mesh must be a jax.sharding.Mesh or a dict of axis name to size")
    n = 1
    for size in mesh.values():
        n *= int(size)
    devs = jax.devices()
    if len(devs) < n:
        raise ExportError(
            "the mesh %s needs %d devices, JAX has %d; on CPU set "
            "XLA_FLAGS=--xla_force_host_platform_device_count=%d before jax is imported "
            "(python -m scalify_jax --devices %d does)" % (mesh, n, len(devs), n, n))
    import numpy as np
    return Mesh(np.array(devs[:n]).reshape(tuple(int(s) for s in mesh.values())), tuple(mesh))


def mesh_axes(mesh):
    return {str(k): int(v) for k, v in mesh.shape.items()}


def _is_spec(x):
    return x is None or isinstance(x, (P, NamedSharding))


def _spec_of(x):
    if isinstance(x, NamedSharding):
        return x.spec
    return P() if x is None else x


def spec_view(spec, shape=None, axes=None):
    """The relations view of a PartitionSpec: P(None, 'tp') is 'shard(1,tp)',
    P(('dp', 'tp')) 'shard(0,(dp,tp))', P() 'dup'. With the global shape and
    the mesh axes, checks that each sharded dimension divides evenly."""
    terms = []
    for d, a in enumerate(tuple(_spec_of(spec))):
        if a is None:
            continue
        names = tuple(a) if isinstance(a, (tuple, list)) else (a,)
        if not names:
            continue
        for nm in names:
            if not isinstance(nm, str):
                raise ExportError("partition spec %s: entry %r is not a mesh axis name" % (spec, nm))
            if axes is not None and nm not in axes:
                raise ExportError("partition spec %s names axis %r, not in the mesh %s" % (spec, nm, axes))
        if shape is not None:
            if d >= len(shape):
                raise ExportError("partition spec %s has more entries than the value's rank %d"
                                  % (spec, len(shape)))
            parts = 1
            for nm in names:
                parts *= axes[nm] if axes else 1
            if shape[d] % parts:
                raise ExportError("partition spec %s: dimension %d (%d) does not divide into %d parts"
                                  % (spec, d, shape[d], parts))
        terms.append("shard(%d,%s)" % (d, names[0] if len(names) == 1 else "(" + ",".join(names) + ")"))
    return " ".join(terms) if terms else "dup"


def _key_name(k):
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def leaf_names(fn, args):
    """One name per leaf of the argument tuple, in JAX's flattened order (HLO
    parameter order): the argument's name from fn's signature, then the
    pytree path (dict keys sorted, as JAX flattens them): 'params.layers.0.wq'."""
    try:
        top = [p for p in inspect.signature(fn).parameters]
    except (TypeError, ValueError):
        top = []
    names = []
    for path, _ in jax.tree_util.tree_flatten_with_path(tuple(args))[0]:
        i = int(getattr(path[0], "idx", 0))
        head = top[i] if i < len(top) else "arg%d" % i
        names.append(".".join([head] + [_key_name(k) for k in path[1:]]))
    return names


def output_names(out_tree):
    """One name per output leaf: 'result' for a single array, else the path."""
    leaves = jax.tree_util.tree_flatten_with_path(out_tree)[0]
    if len(leaves) == 1 and not leaves[0][0]:
        return ["result"]
    return [".".join(_key_name(k) for k in path) or "result" for path, _ in leaves]


def broadcast_specs(prefix, tree, what):
    """The spec of every leaf of tree, from a spec pytree that is a prefix of
    it (as shard_map and jit accept them), in flattened order."""
    out = []

    def visit(spec, sub):
        out.extend([_spec_of(spec)] * len(jax.tree_util.tree_leaves(sub)))

    try:
        jax.tree_util.tree_map(visit, prefix, tree, is_leaf=_is_spec)
    except (ValueError, TypeError) as e:
        raise ExportError("%s does not match the structure of the values: %s" % (what, e)) from None
    return out


def _prefix(specs):
    """Specs for the argument tuple: one spec stands for every argument (a
    PartitionSpec is a tuple itself, so it is not taken apart)."""
    return specs if _is_spec(specs) else tuple(specs)


def abstract(args):
    """Global shapes only: a ShapeDtypeStruct per leaf (no device arrays)."""
    return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), tuple(args))


def relations_doc(axes, names, in_views, out_names_, out_views):
    """The relations document (a dict, scalify_relations 1): mesh `axes`
    ({name: size}, major to minor, devices in iota order), one input entry per
    parameter (names[i], in_views[i], e.g. from spec_view) and one output
    entry per result (out_names_[i], out_views[i]), numbered in order."""
    return {
        "scalify_relations": 1,
        "mesh": dict(axes),
        "device_order": "iota",
        "inputs": [{"param": i, "name": n, "view": v} for i, (n, v) in enumerate(zip(names, in_views))],
        "outputs": [{"output": i, "name": n, "view": v} for i, (n, v) in enumerate(zip(out_names_, out_views))],
    }


def _json_lines(doc):
    """JSON with one line per list entry (readable diffs)."""
    parts = []
    for k, v in doc.items():
        if isinstance(v, list) and v:
            body = ",\n".join("  " + json.dumps(e) for e in v)
            parts.append(" %s: [\n%s\n ]" % (json.dumps(k), body))
        else:
            parts.append(" %s: %s" % (json.dumps(k), json.dumps(v)))
    return "{\n" + ",\n".join(parts) + "\n}\n"


def _shard_map(f, mesh, in_specs, out_specs, check_vma):
    sm = getattr(jax, "shard_map", None)
    if sm is not None:
        return sm(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=check_vma)
    from jax.experimental.shard_map import shard_map  # older JAX
    return shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_rep=check_vma)


def _write(path, data):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def _merge_manifest(out_dir, entry):
    path = os.path.join(out_dir, MANIFEST)
    pairs = []
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
        if old.get("scalify_manifest") != 1:
            raise ExportError("%s is not a scalify manifest (version 1)" % path)
        pairs = [p for p in old.get("pairs", []) if p.get("name") != entry["name"]]
    pairs.append(entry)
    pairs.sort(key=lambda p: p["name"])
    doc = {"scalify_manifest": 1, "generator": dict(versions(), script="scalify_jax"), "pairs": pairs}
    _write(path, _json_lines(doc))
    return path


def export_pair(fn, args, *, mesh, name, out_dir, in_shardings=None, out_shardings=None,
                in_specs=None, out_specs=None, distributed_fn=None, check_vma=False,
                param_names=None, out_names=None, expected=None):
    """Export one pair for `scalify check` and add it to out_dir/manifest.json.

    GSPMD (automatic partitioning): give in_shardings (and optionally
    out_shardings), pytrees of PartitionSpec or NamedSharding matching args.
    The baseline is fn lowered with those annotations (before partitioning),
    the distributed program the same module right after the partitioner;
    relations are "auto" (read from the annotations).

    shard_map (a hand-written per-device program): give distributed_fn, the
    per-device body, with in_specs and out_specs as for jax.shard_map. fn is
    the single-device baseline of the same math. The distributed program is
    jax.jit(jax.shard_map(distributed_fn, ...)) with the specs as its in and
    out shardings; the relations file is written from the specs, parameter
    names from the argument pytree paths (param_names overrides them).

    args: arrays or jax.ShapeDtypeStruct with the global shapes (nothing is
    computed). mesh: a jax.sharding.Mesh or {axis: size}. Returns the manifest
    entry (paths relative to out_dir).
    """
    if (in_shardings is None) == (in_specs is None):
        raise ExportError("give in_shardings (GSPMD) or in_specs (shard_map), not both or neither")
    if in_specs is not None and (distributed_fn is None or out_specs is None):
        raise ExportError("a shard_map pair needs distributed_fn (the per-device body) and out_specs")
    if not name or "/" in name:
        raise ExportError("name must be a non-empty file name (no '/')")
    m = make_mesh(mesh)
    axes = mesh_axes(m)
    args = tuple(args)
    abs_args = abstract(args)
    shapes = [a.shape for a in jax.tree_util.tree_leaves(abs_args)]
    names = list(param_names) if param_names is not None else leaf_names(fn, args)
    if len(names) != len(shapes):
        raise ExportError("%d parameter names for %d parameters" % (len(names), len(shapes)))
    files = {}
    entry = {"name": name, "mesh": axes}
    ns = lambda s: NamedSharding(m, _spec_of(s))
    if in_specs is not None:
        in_views = [spec_view(s, shp, axes) for s, shp in
                    zip(broadcast_specs(_prefix(in_specs), abs_args, "in_specs"), shapes)]
        out_tree = jax.eval_shape(fn, *abs_args)
        out_leaves = jax.tree_util.tree_leaves(out_tree)
        out_views = [spec_view(s, o.shape, axes) for s, o in
                     zip(broadcast_specs(out_specs, out_tree, "out_specs"), out_leaves)]
        onames = list(out_names) if out_names is not None else output_names(out_tree)
        # keep_unused: one entry parameter per argument leaf, as the relations
        # file numbers them (an optimizer state's unused leaves included)
        base_lo = jax.jit(fn, keep_unused=True).lower(*abs_args)
        smap = _shard_map(distributed_fn, m, _prefix(in_specs), out_specs, check_vma)
        dist_fn = jax.jit(smap, keep_unused=True,
                          in_shardings=jax.tree_util.tree_map(ns, _prefix(in_specs), is_leaf=_is_spec),
                          out_shardings=jax.tree_util.tree_map(ns, out_specs, is_leaf=_is_spec))
        dist_lo = dist_fn.lower(*abs_args)
        entry["kind"] = "shard_map"
        rel = name + ".relations.json"
        _write(os.path.join(out_dir, rel), _json_lines(relations_doc(axes, names, in_views, onames, out_views)))
        files["relations"] = rel
    else:
        jit_kw = {"in_shardings": jax.tree_util.tree_map(ns, _prefix(in_shardings), is_leaf=_is_spec)}
        if out_shardings is not None:
            jit_kw["out_shardings"] = jax.tree_util.tree_map(ns, out_shardings, is_leaf=_is_spec)
        base_lo = jax.jit(fn, **jit_kw).lower(*abs_args)
        dist_lo = base_lo
        entry["kind"] = "gspmd"
        files["relations"] = "auto"
    for side, (text, pb) in (("baseline", before_partitioning(base_lo)),
                             ("distributed", after_partitioning(dist_lo))):
        stem = name + (".baseline" if side == "baseline" else ".dist")
        _write(os.path.join(out_dir, stem + ".hlo"), text)
        _write(os.path.join(out_dir, stem + ".hlo.pb"), pb)
        entry[side] = {"hlo": stem + ".hlo", "pb": stem + ".hlo.pb"}
    entry["relations"] = files["relations"]
    if expected is not None:
        entry["expected"] = expected
    entry["generator"] = dict(versions(), script="scalify_jax")
    _merge_manifest(out_dir, entry)
    return entry
