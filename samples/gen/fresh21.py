"""samples/fresh21: a 21st batch of programs as a user writes them, on the
theme of the current JAX sharding APIs beyond a plain shard_map or jit --
explicit-sharding mode (AxisType.Explicit meshes under jax.set_mesh,
sharding in types, einsum / dot / matmul out_sharding, jax.sharding.reshard,
auto_axes / explicit_axes), meshes mixing Explicit and Auto axes, a
jax.shard_map over some axes only inside jit (axis_names=), shard_map
regions inside explicit-mode programs (in_specs inferred from the types),
jax.experimental.custom_partitioning, jax.jit with in / out shardings and
donate_argnums, with_sharding_constraint placed by a MaxText-style logical
rules table, remat'ed lax.scan over stacked layers with sharded carries,
and model code written as Equinox-style (frozen dataclass pytrees with
__call__) and Flax-NNX-style (Params carrying logical axis names, the state
split off) modules by hand -- no library beyond jax and optax is installed.
None of them is an idiom of samples/fresh .. fresh19, probe, train or wild
(fresh9 had an explicit-mode transformer step, GQA and an unreduced
row-parallel matmul, a shard_map over tp inside an explicit program with a
bias-inside-psum / pmean bug, and manual dp over auto tp: here other
programs and regions).
Families whose distributed side is a jit program rather than a bare
shard_map body (1.-9., 16.-19.: explicit mode, partial-manual shard_map,
custom_partitioning, donation) are exported by family() below: the
baseline is the single-device function lowered without a mesh, the
distributed program is jax.jit(make(bug), in_shardings, out_shardings,
donate_argnums) lowered under jax.set_mesh from ShapeDtypeStructs carrying
their NamedShardings, and the relations file is written from the specs, as
for a shard_map pair (kind "shard_map"). Since resharding never changes
values, the bug variants of the explicit-mode programs change the function
itself (a reduction over the wrong axis, a transposed merge, a missing or
misdirected collective inside a shard_map region, a partition callback that
keeps a reduced dim sharded).
shard_map-kind families: 1. an explicit-mode MLP block (LayerNorm,
column-parallel einsum with out_sharding P('dp', None, 'tp'), row-parallel
einsum back to P('dp')); 2. explicit-mode causal multi-head attention with
the heads in the types, reshard to replicated heads before merging them by a
reshape for a fused (H*E, D) output projection; 3. an explicit-mode
classifier step (value_and_grad of a softmax cross-entropy, optax.sgd with
momentum) on dp4 x tp2; 4. an explicit program with a jax.shard_map region
(mesh from jax.set_mesh, in_specs inferred, check_vma=True) doing the
row-parallel half as a psum_scatter along the sequence, then a reshard of
the residual to the sequence sharding and an RMSNorm; 5. an explicit-mode
embedding by auto_axes(jnp.take) scaled by sqrt(d_model), learned positions,
a tied LM head over a vocabulary over tp and its cross-entropy; 6. a mesh
with dp Explicit and tp Auto: a bf16 MLP regression step (f32 accumulation,
f32 master weights, optax.adam) with a with_sharding_constraint on the auto
axis only; 7. a shard_map over sp only inside jit (tp auto): causal
attention with keys / values all_gathered over sp and the heads over tp by
in_shardings and a constraint inside the manual region; 8. expert
parallelism with ep manual and tp auto: top-1 routing, one-hot dispatch to
(expert, slot), all_to_all there and back, the expert FFN's hidden units
over the auto tp; 9. a custom_partitioning RMSNorm (Shardy sharding_rule,
the partition callback asking for the feature dim replicated) on a
feature-sharded input, then a matmul; 10. an Equinox-style Megatron MLP
trained by SGD + momentum under check_vma=True, the up bias replicated and
sliced at the device's offset, the loss pmean'd; 11. a Flax-NNX-style GQA
attention module (8 query / 4 kv heads over tp2) whose shard_map specs and
psum axis come from a logical rules table; 12. a Megatron stack in a lax.scan
over jax.checkpoint'ed layers (nothing_saveable, check_vma=False) with the
carry over dp; 13. Megatron sequence parallelism (all_gather / psum_scatter
along the sequence) inside a remat'ed scan in an AdamW step (check_vma=True,
loss pmean'd over (dp, tp)); 14. a reshard written by hand: rows over sp to
columns over sp by an all_to_all (chunks exchanged, the source axis moved in
front before merging) and a running mean down the columns; 15. symmetrising
a matrix sharded over both axes of a 2 x 2 mesh by one ppermute over the
axis tuple ('x', 'y'); 16. FSDP x TP in explicit mode, a shard_map region
with in_specs inferred, the weights all_gathered over fsdp and the output
psum'd over tp, on dp2 x fsdp2 x tp2; 17. explicit mode, a lax.scan whose
body is a jax.checkpoint'ed shard_map Megatron layer (check_vma=False), the
scanned weights sharded in their types; 18. sync BatchNorm in training mode
with a shard_map over dp only and the features over the auto tp (mean and
E[h^2] pmean'd, the running mean updated); 19. a data-parallel Adam step
with an EMA of the parameters, a shard_map over dp inside a jit with
donate_argnums=(0, 1, 2).
GSPMD pairs (correct; numerics against the same jit on a mesh of the same
axis names of size 1): 20. explicit mode, Equinox-style Blocks stacked into
one pytree and run by a lax.scan over jax.checkpoint'ed blocks in an AdamW
step with the model and optimizer state donated; 21. an NNX-style MLP whose
in_shardings come from the rules table and whose activations are constrained
by logical names, Adam, donation; 22. causal attention on a mesh with dp
Explicit and tp Auto (heads constrained over tp); 23. explicit mode, an LM
loss and its gradients with the embedding gather and the target log-probs
under auto_axes; 24. an auto mesh with a jax.sharding.explicit_axes region
(a gated MLP by einsum out_sharding); 25. explicit-mode Ulysses by reshard
(sequence -> heads -> sequence); 26. FSDP x TP under GSPMD: stacked layers
P(None, 'fsdp', 'tp') in a remat'ed scan (dots_with_no_batch_dims_saveable)
whose carry is constrained in the body, momentum SGD, donation; 27. explicit
mode mixed precision (bf16 einsums with f32 accumulation and out_sharding,
AdamW on f32 masters); 28. explicit mode on a 2 x 4 mesh, jnp.dot /
jnp.matmul with out_sharding, the sharding of a.T following in its type, a
reshard; 29. ZeRO-3 style under GSPMD with every parameter and moment
sharded over the tuple ('dp', 'fsdp'), out_shardings equal to in_shardings
and the state donated.
Not available in the installed JAX (0.12.0.1), so skipped:
jax.sharding.use_mesh (jax.set_mesh is used throughout). Not exported as a
GSPMD pair: custom_partitioning, whose module before partitioning holds a
CustomSPMDPartitioning custom call with a Python object id as its
backend_config (not a single-device program, and not reproducible); it is
family 9 instead, with a plain single-device baseline. Also kept out of the
GSPMD pairs: a shard_map nested in jit, whose module before partitioning is
not a single-device program either (families 7., 8., 18. instead).
Nothing was dropped or changed for its numerics: every correct pair agrees
with its baseline at rounding level (largest 3.8e-6, on outputs of
magnitude up to 40), every bug variant differs clearly (0.015 to 237).
Each family has the bug variants a careless user writes (LayerNorm
statistics over the sequence, a bias after the activation, a softmax over
the queries or the batch, heads merged in (E, H) order, a summed instead of
averaged loss, a psum then a slice at offset 0, a slice of an unreduced
partial, an embedding scaled by sqrt(vocab), positions from 1, a loss summed
over the batch instead of the features, the second layer fed the
pre-activation, query positions without the shard offset, an untiled
all_gather reshaped, a gate softmax over tokens, no return all_to_all, a
partition callback keeping the feature dim sharded, a replicated bias sliced
at offset 0, a loss psum'd where it is pmean'd, a psum over the rules'
batch axis, a residual from the normed input, the psum moved after the scan,
the layers scanned in reverse, a psum_scatter over dp, an all_to_all merged
without moving the source axis, a cumsum before the exchange, a transpose
without the exchange or exchanged over one axis, a weight gathered over tp
instead of fsdp, no psum or the residual inside it, a pmean of local
variances or an unsynchronised variance, gradients not pmean'd, the EMA
decay swapped).
Exported with scalify_jax's pieces (export_pair, or family() / gspmd_x()
below); every pair is also run by JAX on seeded inputs and its manifest
entry records the largest difference from the single-device run
("numerics").
Run from the repository root: bash samples/gen/run_fresh21.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import dataclasses
import os
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P, reshard
from jax.experimental.custom_partitioning import custom_partitioning
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh21.sh)
from fresh_lib import Corpus, seeded, mse, np_tree, state_specs, bug_lines  # noqa: E402
from scalify_jax import before_partitioning, after_partitioning, leaf_names, relations_doc, spec_view  # noqa: E402
from scalify_jax._export import _merge_manifest, _write, broadcast_specs, output_names, versions  # noqa: E402

SCRIPT = "samples/gen/fresh21.py"
OUT = "samples/fresh21"
C = Corpus(OUT, SCRIPT, "samples/gen/run_fresh21.sh", sys.argv[1:])
rng, R, I = seeded(2121)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index
wsc = lax.with_sharding_constraint
EXPL, AUTO = AxisType.Explicit, AxisType.Auto


def bf(a):
    return np.asarray(a, jnp.bfloat16)


# ---------------------------------------------------------------------------
# 0. exporting programs that export_pair does not lower itself: a mesh whose
#    axes are Explicit (or mixed Explicit / Auto), a jax.jit with donation, a
#    shard_map over some axes only. Both sides are lowered by hand from the
#    same pieces export_pair is made of (before_partitioning /
#    after_partitioning / relations_doc), under jax.set_mesh, from
#    ShapeDtypeStructs that carry their NamedShardings (so an explicit mesh
#    puts them in the types).
def mesh_of(axes, types=None):
    n = int(np.prod(list(axes.values())))
    types = tuple(types) if types else (AUTO,) * len(axes)
    return Mesh(np.array(jax.devices()[:n]).reshape(tuple(axes.values())), tuple(axes), axis_types=types)


def unit_mesh(axes, types=None):
    return mesh_of({a: 1 for a in axes}, types)


def is_spec(s):
    return s is None or isinstance(s, P)


def leaf_specs(specs, args):
    """The spec of every leaf of args from a spec prefix tree (same structure as args)."""
    return jax.tree.map(lambda s, a: jax.tree.map(lambda _: P() if s is None else s, a), tuple(specs), tuple(args),
                        is_leaf=is_spec)


def sds(m, specs, args):
    return jax.tree.map(lambda s, a: jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype, sharding=NamedSharding(m, s)),
                        leaf_specs(specs, args), tuple(args), is_leaf=is_spec)


def put(m, specs, args):
    return jax.tree.map(lambda s, a: jax.device_put(a, NamedSharding(m, s)), leaf_specs(specs, args), tuple(args),
                        is_leaf=is_spec)


def named(m, specs):
    return jax.tree.map(lambda s: NamedSharding(m, P() if s is None else s), specs, is_leaf=is_spec)


def write_sides(name, entry, base_lo, dist_lo):
    for side, (text, pb) in (("baseline", before_partitioning(base_lo)), ("distributed", after_partitioning(dist_lo))):
        stem = name + (".baseline" if side == "baseline" else ".dist")
        _write(os.path.join(OUT, stem + ".hlo"), text)
        _write(os.path.join(OUT, stem + ".hlo.pb"), pb)
        entry[side] = {"hlo": stem + ".hlo", "pb": stem + ".hlo.pb"}


def record(name, ref, got, note):
    big = [float(np.max(np.abs(np.asarray(x, np.float64)))) for x in jax.tree.leaves(ref) if np.size(x)]
    from wild import max_abs_diff
    C.extra[name] = {"numerics": {"max_abs_diff": max_abs_diff(ref, got), "max_abs_ref": max(big + [0.0])}}
    if note:
        C.extra[name]["note"] = note


def gspmd_x(name, axes, types, in_specs, out_specs, fn, args, donate=(), note=None):
    """A correct GSPMD pair on a mesh of the given axis types: jax.jit(fn,
    in_shardings, out_shardings, donate_argnums) under jax.set_mesh; the
    numerics run the same jit on a mesh of the same axes of size 1."""
    if not C.wanted(name):
        return
    print("==", name, flush=True)
    m = mesh_of(axes, types)
    with jax.set_mesh(m):
        j = jax.jit(fn, in_shardings=named(m, tuple(in_specs)), out_shardings=named(m, out_specs),
                    donate_argnums=donate, keep_unused=True)
        lo = j.lower(*sds(m, in_specs, args))
        entry = {"name": name, "mesh": dict(axes), "kind": "gspmd"}
        write_sides(name, entry, lo, lo)
        got = j(*put(m, in_specs, args))
    entry.update(relations="auto", expected="verified", generator=dict(versions(), script="scalify_jax"))
    _merge_manifest(OUT, entry)
    u = unit_mesh(axes, types)
    with jax.set_mesh(u):
        ref = jax.jit(fn, in_shardings=named(u, tuple(in_specs)), out_shardings=named(u, out_specs))(
            *put(u, in_specs, args))
    record(name, ref, got, note)


def family(fam, axes, types, make, in_specs, out_specs, fn, args, bugs=(), donate=(), note=None):
    """A hand-parallelised program and its bug variants: make(bug) is a
    function of the global arrays (an explicit-mode program, or one holding a
    jax.shard_map over some axes), run as jax.jit with the specs as in / out
    shardings under jax.set_mesh; the baseline is the single-device fn. Both
    take the same global arguments, so the relations file is written from the
    specs as for a shard_map pair."""
    m = mesh_of(axes, types)
    flat_in = broadcast_specs(tuple(in_specs), tuple(args), "in_specs")
    shapes = [np.shape(a) for a in jax.tree.leaves(tuple(args))]
    in_views = [spec_view(s, shp, dict(axes)) for s, shp in zip(flat_in, shapes)]
    abs_plain = jax.tree.map(lambda a: jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype), tuple(args))
    out_tree = jax.eval_shape(fn, *abs_plain)
    out_views = [spec_view(s, o.shape, dict(axes)) for s, o in
                 zip(broadcast_specs(out_specs, out_tree, "out_specs"), jax.tree.leaves(out_tree))]
    rel = relations_doc(dict(axes), leaf_names(fn, args), in_views, output_names(out_tree), out_views)
    ref = None
    for bug, kinds in [(None, None)] + list(bugs):
        name = fam + (".bug." + bug if bug else "")
        if not C.wanted(name):
            continue
        print("==", name, flush=True)
        base_lo = jax.jit(fn, keep_unused=True).lower(*abs_plain)
        with jax.set_mesh(m):
            j = jax.jit(make(bug), in_shardings=named(m, tuple(in_specs)), out_shardings=named(m, out_specs),
                        donate_argnums=donate, keep_unused=True)
            dist_lo = j.lower(*sds(m, in_specs, args))
            entry = {"name": name, "mesh": dict(axes), "kind": "shard_map"}
            _write(os.path.join(OUT, name + ".relations.json"),
                   __import__("scalify_jax._export", fromlist=["_json_lines"])._json_lines(rel))
            write_sides(name, entry, base_lo, dist_lo)
            got = j(*put(m, in_specs, args))
        entry.update(relations=name + ".relations.json", expected="mismatch" if bug else "verified",
                     generator=dict(versions(), script="scalify_jax"))
        _merge_manifest(OUT, entry)
        if ref is None:
            ref = jax.jit(fn)(*args)
        record(name, ref, got, note)
        if bug:
            C.extra[name]["bug"] = {"id": bug, "kinds": kinds, "locations": bug_lines(make, bug, SCRIPT)}


# ---------------------------------------------------------------------------
# Model code as library users write it, without the libraries: an
# Equinox-style module is a frozen dataclass registered as a pytree with a
# __call__; a Flax-NNX-style module holds Param(value, logical names) and is
# split into (graph, state) for jax.jit; logical names become mesh axes by a
# MaxText-style rules table.
def pytree_dataclass(cls):
    cls = dataclasses.dataclass(frozen=True)(cls)
    return jax.tree_util.register_dataclass(cls)


@pytree_dataclass
class Linear:
    weight: jax.Array
    bias: jax.Array

    def __call__(self, x):
        return x @ self.weight + self.bias


@pytree_dataclass
class MLP:
    up: Linear
    down: Linear

    def __call__(self, x):
        return self.down(jax.nn.gelu(self.up(x)))


RULES = (("batch", "dp"), ("seq", None), ("embed", None), ("mlp", "tp"), ("heads", "tp"), ("kv", None),
         ("vocab", "tp"), ("layers", None))


def logical_to_mesh(names, rules=RULES):
    table = dict(rules)
    return P(*(table.get(n) if n is not None else None for n in names))


def logical_constraint(x, *names, rules=RULES):
    """flax.linen.with_logical_constraint / nnx.with_sharding_constraint by rules."""
    return wsc(x, logical_to_mesh(names, rules))


class Param:
    """An nnx.Param with sharding metadata (the logical axis names)."""

    def __init__(self, value, names):
        self.value, self.names = value, tuple(names)


class Module:
    def params(self):
        return {k: (v.params() if isinstance(v, Module) else v) for k, v in vars(self).items()
                if isinstance(v, (Module, Param))}


def nnx_state(mod):
    return jax.tree.map(lambda p: p.value, mod.params(), is_leaf=lambda x: isinstance(x, Param))


def nnx_specs(mod, rules=RULES):
    return jax.tree.map(lambda p: logical_to_mesh(p.names, rules), mod.params(), is_leaf=lambda x: isinstance(x, Param))


def rms(x, g, eps=1e-6):
    return x * lax.rsqrt(jnp.mean(jnp.square(x), -1, keepdims=True) + eps) * g


def layer_norm(x, g, axis=-1, eps=1e-5):
    mu = jnp.mean(x, axis, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps) * g


def causal(t):
    return np.arange(t)[:, None] >= np.arange(t)[None, :]


B, T, D, F, H, E = 4, 8, 16, 32, 4, 8


# ---------------------------------------------------------------------------
# 1. an explicit-sharding MLP block (AxisType.Explicit mesh, jax.set_mesh):
#    LayerNorm, column-parallel einsum with out_sharding P('dp', None, 'tp'),
#    the bias, gelu, the row-parallel einsum back to out_sharding P('dp')
#    (the partitioner inserts the reduction), the residual.
def mlp_block(x, g, w1, b1, w2):
    return x + jax.nn.gelu(layer_norm(x, g) @ w1 + b1) @ w2


def explicit_mlp(bug):
    def f(x, g, w1, b1, w2):
        h = layer_norm(x, g, axis=1 if bug == "ln-stats-over-seq" else -1)
        u = jnp.einsum("btd,df->btf", h, w1, out_sharding=P("dp", None, "tp"))
        a = jax.nn.gelu(u) + b1 if bug == "bias-after-gelu" else jax.nn.gelu(u + b1)
        y = jnp.einsum("btf,fd->btd", a, w2, out_sharding=P("dp", None, None))
        return x + y
    return f


family("s.explicit_mlp_einsum_out_sharding.dp2xtp4", {"dp": 2, "tp": 4}, (EXPL, EXPL), explicit_mlp,
       (P("dp"), P(), P(None, "tp"), P("tp"), P("tp")), P("dp"), mlp_block,
       (R(B, T, D), 1.0 + R(D, scale=0.1), R(D, F, scale=0.3), R(F, scale=0.2), R(F, D, scale=0.3)),
       bugs=[("ln-stats-over-seq", ["wrong-shard-dim"]), ("bias-after-gelu", ["numerics"])],
       note="explicit-mode mesh (AxisType.Explicit), einsum out_sharding")


# ---------------------------------------------------------------------------
# 2. explicit-mode multi-head attention: q / k / v einsums with the heads in
#    their types (out_sharding P('dp', None, 'tp')), scores P('dp', 'tp'),
#    then the heads resharded to replicated (jax.sharding.reshard) and merged
#    by a reshape for a fused output projection (H*E, D).
def mha(x, wq, wk, wv, wo):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E)
    s = jnp.where(causal(x.shape[1]), s, -1e9)
    o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)
    return o.reshape(x.shape[0], x.shape[1], -1) @ wo


def explicit_mha(bug):
    def f(x, wq, wk, wv, wo):
        q, k, v = (jnp.einsum("btd,dhe->bthe", x, w, out_sharding=P("dp", None, "tp")) for w in (wq, wk, wv))
        s = jnp.einsum("bqhe,bkhe->bhqk", q, k, out_sharding=P("dp", "tp")) / np.sqrt(E)
        s = jnp.where(causal(x.shape[1]), s, -1e9)
        p = jax.nn.softmax(s, -2 if bug == "softmax-over-queries" else -1)
        o = jnp.einsum("bhqk,bkhe->bqhe", p, v, out_sharding=P("dp", None, "tp"))
        o = reshard(o, P("dp"))
        if bug == "merge-heads-eh-order":
            o = jnp.swapaxes(o, 2, 3)
        return jnp.einsum("btc,cd->btd", o.reshape(x.shape[0], x.shape[1], H * E), wo, out_sharding=P("dp"))
    return f


family("s.explicit_mha_reshard_merge_heads.dp2xtp4", {"dp": 2, "tp": 4}, (EXPL, EXPL), explicit_mha,
       (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P()), P("dp"), mha,
       (R(B, T, D), R(D, H, E, scale=0.4), R(D, H, E, scale=0.4), R(D, H, E, scale=0.4), R(H * E, D, scale=0.3)),
       bugs=[("softmax-over-queries", ["wrong-shard-dim"]), ("merge-heads-eh-order", ["wrong-reshape-order"])],
       note="explicit-mode mesh (AxisType.Explicit), reshard before merging heads")


# ---------------------------------------------------------------------------
# 3. an explicit-mode classifier training step: jax.value_and_grad of a
#    softmax cross-entropy, optax.sgd with momentum; batch over dp, hidden
#    units over tp in the parameters' types, activations by out_sharding.
CL_IN, CL_H, CL_K = 16, 32, 8
cl_opt = optax.sgd(0.1, momentum=0.9)


def clf_loss(p, x, y):
    h = jax.nn.relu(x @ p["w1"] + p["b1"])
    logits = h @ p["w2"] + p["b2"]
    return -jnp.mean(jnp.sum(jax.nn.one_hot(y, CL_K) * jax.nn.log_softmax(logits, -1), -1))


def clf_step(p, st, x, y):
    lv, g = jax.value_and_grad(clf_loss)(p, x, y)
    u, st = cl_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


def explicit_clf_step(bug):
    def loss(p, x, y):
        h = jax.nn.relu(jnp.einsum("bi,ih->bh", x, p["w1"], out_sharding=P("dp", "tp")) + p["b1"])
        logits = jnp.einsum("bh,hk->bk", h, p["w2"], out_sharding=P("dp")) + p["b2"]
        logp = jax.nn.log_softmax(logits, 0 if bug == "log-softmax-over-batch" else -1)
        nll = -jnp.sum(jax.nn.one_hot(y, CL_K) * logp, -1)
        return jnp.sum(nll) if bug == "loss-sum-not-mean" else jnp.mean(nll)

    def f(p, st, x, y):
        lv, g = jax.value_and_grad(loss)(p, x, y)
        u, st = cl_opt.update(g, st, p)
        return optax.apply_updates(p, u), st, lv
    return f


cl_p = {"w1": R(CL_IN, CL_H, scale=0.3), "b1": R(CL_H, scale=0.1), "w2": R(CL_H, CL_K, scale=0.3),
        "b2": R(CL_K, scale=0.1)}
cl_ps = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp"), "b2": P()}
cl_st = np_tree(cl_opt.init(cl_p))
family("s.explicit_clf_step_sgd_momentum.dp4xtp2", {"dp": 4, "tp": 2}, (EXPL, EXPL), explicit_clf_step,
       (cl_ps, state_specs(cl_st, cl_ps), P("dp"), P("dp")), (cl_ps, state_specs(cl_st, cl_ps), P()), clf_step,
       (cl_p, cl_st, R(16, CL_IN), I(0, CL_K, 16)),
       bugs=[("log-softmax-over-batch", ["wrong-shard-dim"]), ("loss-sum-not-mean", ["numerics"])],
       note="explicit-mode mesh (AxisType.Explicit), a training step (optax.sgd with momentum)")


# ---------------------------------------------------------------------------
# 4. an explicit-mode program with a jax.shard_map region (its mesh from
#    jax.set_mesh, in_specs inferred from the arguments' types): the
#    column-parallel half in explicit mode, the row-parallel half by hand with
#    a reduce-scatter to a sequence-sharded output (psum_scatter over tp along
#    the sequence, tiled); back in explicit mode the residual is resharded to
#    the sequence sharding and an RMSNorm follows (check_vma=True).
def mlp_rms(x, w1, w2, g):
    return rms(x + jax.nn.gelu(x @ w1) @ w2, g)


def explicit_rs_region(bug):
    def row_parallel(h, w2):
        part = jnp.einsum("btf,fd->btd", h, w2)
        tl = h.shape[1] // 4
        if bug == "psum-slice-at-zero":
            return lax.dynamic_slice_in_dim(psum(part, "tp"), 0, tl, 1)
        if bug == "slice-without-reduce":
            return lax.dynamic_slice_in_dim(part, idx("tp") * tl, tl, 1)
        return lax.psum_scatter(part, "tp", scatter_dimension=1, tiled=True)

    def f(x, w1, w2, g):
        h = jax.nn.gelu(jnp.einsum("btd,df->btf", x, w1, out_sharding=P("dp", None, "tp")))
        y = jax.shard_map(row_parallel, out_specs=P("dp", "tp"))(h, w2)
        return rms(reshard(x, P("dp", "tp")) + y, g)
    return f


family("s.explicit_smap_region_reduce_scatter_seq.dp2xtp4", {"dp": 2, "tp": 4}, (EXPL, EXPL), explicit_rs_region,
       (P("dp"), P(None, "tp"), P("tp"), P()), P("dp", "tp"), mlp_rms,
       (R(B, T, D), R(D, F, scale=0.3), R(F, D, scale=0.3), 1.0 + R(D, scale=0.1)),
       bugs=[("psum-slice-at-zero", ["wrong-offset"]), ("slice-without-reduce", ["missing-all-reduce"])],
       note="explicit-mode mesh (AxisType.Explicit), shard_map region with inferred in_specs")


# ---------------------------------------------------------------------------
# 5. an explicit-mode embedding and tied LM head loss: the lookup by
#    jax.sharding.auto_axes(jnp.take) with out_sharding P('dp') (the gather
#    has no explicit sharding rule), scaled by sqrt(d_model) (Gemma), learned
#    positions, the tied head einsum 'btd,vd->btv' with the vocabulary over
#    tp, log_softmax over the sharded vocabulary, one-hot targets.
EM_V, EM_T = 32, 8


def tied_lm_loss(emb, pos, ids, tgt):
    x = jnp.take(emb, ids, axis=0) * np.sqrt(D) + pos[: ids.shape[1]]
    x = rms(x, 1.0)
    logits = jnp.einsum("btd,vd->btv", x, emb)
    return -jnp.mean(jnp.sum(jax.nn.one_hot(tgt, EM_V) * jax.nn.log_softmax(logits, -1), -1))


def explicit_tied_lm(bug):
    def f(emb, pos, ids, tgt):
        lookup = jax.sharding.auto_axes(lambda t, i: jnp.take(t, i, axis=0), out_sharding=P("dp", None, None))
        scale = np.sqrt(EM_V) if bug == "emb-scale-sqrt-vocab" else np.sqrt(D)
        start = 1 if bug == "pos-from-one" else 0
        x = lookup(emb, ids) * scale + pos[start: start + ids.shape[1]]
        x = rms(x, 1.0)
        logits = jnp.einsum("btd,vd->btv", x, emb, out_sharding=P("dp", None, "tp"))
        return -jnp.mean(jnp.sum(jax.nn.one_hot(tgt, EM_V) * jax.nn.log_softmax(logits, -1), -1))
    return f


family("s.explicit_auto_axes_take_tied_head.dp2xtp4", {"dp": 2, "tp": 4}, (EXPL, EXPL), explicit_tied_lm,
       (P("tp"), P(), P("dp"), P("dp")), P(), tied_lm_loss,
       (R(EM_V, D, scale=0.5), R(EM_T + 2, D, scale=0.5), I(0, EM_V, B, EM_T), I(0, EM_V, B, EM_T)),
       bugs=[("emb-scale-sqrt-vocab", ["numerics"]), ("pos-from-one", ["wrong-offset"])],
       note="explicit-mode mesh (AxisType.Explicit), jax.sharding.auto_axes around jnp.take")


# ---------------------------------------------------------------------------
# 6. a mixed mesh (dp Explicit, tp Auto): the batch sharded in the types,
#    the hidden units left to the partitioner with with_sharding_constraint
#    on the auto axis only; a bf16 MLP regression step (bf16 weights,
#    f32 accumulation by preferred_element_type, f32 loss) with optax.adam
#    on f32 master weights.
mx_opt = optax.adam(0.01)


def mixed_loss_ref(p, x, y):
    w1, w2 = p["w1"].astype(jnp.bfloat16), p["w2"].astype(jnp.bfloat16)
    h = jax.nn.gelu(jnp.einsum("bd,df->bf", x, w1, preferred_element_type=jnp.float32))
    out = jnp.einsum("bf,fd->bd", h.astype(jnp.bfloat16), w2, preferred_element_type=jnp.float32)
    return jnp.mean(jnp.sum(jnp.square(out - y), -1))


def mixed_step_ref(p, st, x, y):
    lv, g = jax.value_and_grad(mixed_loss_ref)(p, x, y)
    u, st = mx_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


def mixed_step(bug):
    def loss(p, x, y):
        w1, w2 = p["w1"].astype(jnp.bfloat16), p["w2"].astype(jnp.bfloat16)
        pre = jnp.einsum("bd,df->bf", x, w1, preferred_element_type=jnp.float32)
        h = wsc(pre if bug == "second-layer-pre-activation" else jax.nn.gelu(pre), P(None, "tp"))
        out = jnp.einsum("bf,fd->bd", h.astype(jnp.bfloat16), w2, preferred_element_type=jnp.float32)
        err = jnp.square(out - y)
        return jnp.mean(jnp.sum(err, 0)) if bug == "sum-over-batch-not-features" else jnp.mean(jnp.sum(err, -1))

    def f(p, st, x, y):
        lv, g = jax.value_and_grad(loss)(p, x, y)
        u, st = mx_opt.update(g, st, p)
        return optax.apply_updates(p, u), st, lv
    return f


mx_p = {"w1": R(D, F, scale=0.3), "w2": R(F, D, scale=0.3)}
mx_ps = {"w1": P(), "w2": P()}
mx_st = np_tree(mx_opt.init(mx_p))
family("s.mixed_explicit_dp_auto_tp_bf16_adam.dp2xtp4", {"dp": 2, "tp": 4}, (EXPL, AUTO), mixed_step,
       (mx_ps, state_specs(mx_st, mx_ps), P("dp"), P("dp")), (mx_ps, state_specs(mx_st, mx_ps), P()), mixed_step_ref,
       (mx_p, mx_st, bf(R(8, D)), R(8, D, scale=0.5)),
       bugs=[("second-layer-pre-activation", ["numerics"]), ("sum-over-batch-not-features", ["wrong-shard-dim"])],
       note="mesh with dp Explicit and tp Auto; with_sharding_constraint on the auto axis")


# ---------------------------------------------------------------------------
# 7. a shard_map over sp only inside jit (axis_names={'sp'}), tp left to the
#    partitioner: causal attention with the sequence over sp (keys and values
#    all_gathered, tiled, the queries' positions at the shard's offset), the
#    heads over the auto axis tp by the weights' in_shardings and a
#    with_sharding_constraint inside the manual region.
def causal_mha(x, wq, wk, wv, wo):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    s = jnp.where(causal(x.shape[1]), jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E), -1e9)
    return jnp.einsum("bqhe,hed->bqd", jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v), wo)


def pm_sp_attn(bug):
    def body(x, wq, wk, wv, wo):
        tl = x.shape[1]
        q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
        q = wsc(q, P(None, None, "tp"))
        if bug == "gather-untiled-axis2":
            k, v = (lax.all_gather(a, "sp", axis=2).reshape(a.shape[0], -1, *a.shape[2:]) for a in (k, v))
        else:
            k, v = (lax.all_gather(a, "sp", axis=1, tiled=True) for a in (k, v))
        qpos = jnp.arange(tl) + (0 if bug == "q-pos-no-offset" else idx("sp") * tl)
        s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E)
        s = jnp.where(qpos[:, None] >= jnp.arange(k.shape[1])[None, :], s, -1e9)
        o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)
        return jnp.einsum("bqhe,hed->bqd", o, wo)

    def f(x, wq, wk, wv, wo):
        return jax.shard_map(body, in_specs=(P(None, "sp"), P(), P(), P(), P()), out_specs=P(None, "sp"),
                             axis_names={"sp"})(x, wq, wk, wv, wo)
    return f


family("s.partial_manual_sp_gather_kv_auto_tp_heads.sp4xtp2", {"sp": 4, "tp": 2}, (AUTO, AUTO), pm_sp_attn,
       (P(None, "sp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P(None, "sp"), causal_mha,
       (R(2, 16, D), R(D, H, E, scale=0.4), R(D, H, E, scale=0.4), R(D, H, E, scale=0.4), R(H, E, D, scale=0.3)),
       bugs=[("q-pos-no-offset", ["wrong-offset"]), ("gather-untiled-axis2", ["wrong-reshape-order"])],
       note="jax.shard_map(axis_names={'sp'}) inside jit, tp auto")


# ---------------------------------------------------------------------------
# 8. expert parallelism with ep manual and tp auto: top-1 routing, tokens
#    dispatched to (expert, slot) by one-hot einsums (capacity = local tokens,
#    nothing dropped), all_to_all over ep there and back, each device's expert
#    FFN with its hidden units over the auto axis tp (weights' in_shardings
#    P('ep', None, 'tp'), a with_sharding_constraint on the hidden).
MO_N, MO_E = 32, 4


def moe_ref(x, wr, w1, w2):
    probs = jax.nn.softmax(x @ wr, -1)
    e, gate = jnp.argmax(probs, -1), jnp.max(probs, -1)
    y = jnp.einsum("nef,efd->ned", jax.nn.gelu(jnp.einsum("nd,edf->nef", x, w1)), w2)
    return gate[:, None] * jnp.take_along_axis(y, e[:, None, None], 1)[:, 0]


def pm_moe(bug):
    def body(x, wr, w1, w2):
        probs = jax.nn.softmax(x @ wr, 0 if bug == "gate-softmax-over-tokens" else -1)
        e, gate = jnp.argmax(probs, -1), jnp.max(probs, -1)
        oh = jax.nn.one_hot(e, MO_E)
        slot = jax.nn.one_hot(jnp.sum((jnp.cumsum(oh, 0) - 1) * oh, -1).astype(jnp.int32), x.shape[0])
        disp = jnp.einsum("ne,nc,nd->ecd", oh, slot, x)
        recv = lax.all_to_all(disp, "ep", 0, 0, tiled=True)
        h = wsc(jax.nn.gelu(jnp.einsum("scd,df->scf", recv, w1[0])), P(None, None, "tp"))
        out = jnp.einsum("scf,fd->scd", h, w2[0])
        back = out if bug == "no-return-all-to-all" else lax.all_to_all(out, "ep", 0, 0, tiled=True)
        return jnp.einsum("ne,nc,ecd->nd", oh, slot, back) * gate[:, None]

    def f(x, wr, w1, w2):
        return jax.shard_map(body, in_specs=(P("ep"), P(), P("ep"), P("ep")), out_specs=P("ep"),
                             axis_names={"ep"})(x, wr, w1, w2)
    return f


family("s.partial_manual_ep_moe_a2a_auto_tp.ep4xtp2", {"ep": 4, "tp": 2}, (AUTO, AUTO), pm_moe,
       (P("ep"), P(), P("ep", None, "tp"), P("ep", "tp")), P("ep"), moe_ref,
       (R(MO_N, D), R(D, MO_E), R(MO_E, D, F, scale=0.3), R(MO_E, F, D, scale=0.3)),
       bugs=[("gate-softmax-over-tokens", ["wrong-shard-dim"]), ("no-return-all-to-all", ["missing-collective"])],
       note="jax.shard_map(axis_names={'ep'}) inside jit, tp auto")


# ---------------------------------------------------------------------------
# 9. jax.experimental.custom_partitioning: an RMSNorm op with a Shardy
#    sharding rule and a partition callback that asks for the feature dim
#    replicated (the input arrives feature-sharded, P('dp', None, 'tp')),
#    followed by a column-parallel matmul.
def make_cp_rms(keep_feature_shard):
    @custom_partitioning
    def cp_rms(x, g):
        return rms(x, g)

    def spec(shape):
        s = tuple(shape.sharding.spec)
        return s + (None,) * (len(shape.shape) - len(s))

    def infer(mesh, arg_shapes, result_shape):
        s = spec(arg_shapes[0])
        return NamedSharding(mesh, P(*s[:-1], s[-1] if keep_feature_shard else None))

    def partition(mesh, arg_shapes, result_shape):
        s = spec(arg_shapes[0])
        last = s[-1] if keep_feature_shard else None
        xs = NamedSharding(mesh, P(*s[:-1], last))
        return mesh, rms, xs, (xs, NamedSharding(mesh, P(last)))

    cp_rms.def_partition(infer_sharding_from_operands=infer, partition=partition,
                         sharding_rule="b t d, d -> b t d")
    return cp_rms


CP_RMS, CP_RMS_KEEP = make_cp_rms(False), make_cp_rms(True)


def rms_matmul(x, g, w):
    return rms(x, g) @ w


def cp_family(bug):
    op = CP_RMS_KEEP if bug == "partition-keeps-feature-shard" else CP_RMS

    def f(x, g, w):
        return op(x, g) @ w
    return f


family("s.custom_partitioning_rmsnorm.dp2xtp4", {"dp": 2, "tp": 4}, (AUTO, AUTO), cp_family,
       (P("dp", None, "tp"), P(), P(None, "tp")), P("dp", None, "tp"), rms_matmul,
       (R(B, T, D), 1.0 + R(D, scale=0.1), R(D, F, scale=0.3)),
       bugs=[("partition-keeps-feature-shard", ["missing-all-reduce"])],
       note="jax.experimental.custom_partitioning with a Shardy sharding_rule")


# ---------------------------------------------------------------------------
# 10. an Equinox-style model (frozen dataclass pytrees with __call__, vmap
#     over the batch) trained with optax.sgd + momentum in a shard_map over
#     dp x tp (check_vma=True): the up projection column-parallel with its
#     bias replicated and sliced at the device's offset, the down projection
#     row-parallel, the loss pmean'd over dp (JAX's vma types sum the
#     replicated parameters' gradients).
eq_opt = optax.sgd(0.05, momentum=0.9)


def eqx_loss(model, x, y):
    return mse(jax.vmap(jax.vmap(model))(x), y)


def eqx_step(model, st, x, y):
    lv, g = jax.value_and_grad(eqx_loss)(model, x, y)
    u, st = eq_opt.update(g, st, model)
    return optax.apply_updates(model, u), st, lv


def eqx_megatron(bug):
    def f(model, st, x, y):
        def loss(m):
            fl = m.up.weight.shape[1]
            off = 0 if bug == "up-bias-slice-at-zero" else idx("tp") * fl
            h = jax.nn.gelu(x @ m.up.weight + lax.dynamic_slice_in_dim(m.up.bias, off, fl))
            out = psum(h @ m.down.weight, "tp") + m.down.bias
            l = mse(out, y)
            return psum(l, "dp") if bug == "loss-psum-not-pmean" else pmean(l, "dp")
        lv, g = jax.value_and_grad(loss)(model)
        u, st = eq_opt.update(g, st, model)
        return optax.apply_updates(model, u), st, lv
    return f


def specs_by_suffix(tree, model, mspecs):
    """A spec for every leaf of tree (an optimizer state): the model leaf's
    spec whose path ends the leaf's path, else P()."""
    flat = {tuple(path): s for path, s in jax.tree_util.tree_flatten_with_path(mspecs, is_leaf=is_spec)[0]}

    def spec(path, leaf):
        for n in range(len(path)):
            if tuple(path[n:]) in flat:
                return flat[tuple(path[n:])]
        return P()
    return jax.tree_util.tree_map_with_path(spec, tree)


eq_model = MLP(Linear(R(D, F, scale=0.3), R(F, scale=0.1)), Linear(R(F, D, scale=0.3), R(D, scale=0.1)))
eq_ms = MLP(Linear(P(None, "tp"), P()), Linear(P("tp"), P()))
eq_st = np_tree(eq_opt.init(eq_model))
eq_ss = specs_by_suffix(eq_st, eq_model, eq_ms)
C.smap("s.eqx_style_megatron_mlp_sgd.dp2xtp4", {"dp": 2, "tp": 4}, eqx_megatron,
       (eq_ms, eq_ss, P("dp"), P("dp")), (eq_ms, eq_ss, P()), eqx_step, (eq_model, eq_st, R(B, T, D), R(B, T, D)),
       bugs=[("up-bias-slice-at-zero", ["wrong-offset"]), ("loss-psum-not-pmean", ["wrong-collective-op"])],
       check_vma=True)


# ---------------------------------------------------------------------------
# 11. a Flax-NNX-style attention module (Params carrying logical axis names,
#     the state split off for the transform) whose shard_map specs come from
#     a MaxText-style rules table: pre-RMSNorm, GQA with 8 query and 4 kv
#     heads over tp2 (each device repeats its own two kv heads), causal
#     softmax, the output projection reduced over the rules' 'heads' axis.
GQ_H, GQ_K = 8, 4


class GQAttention(Module):
    def __init__(self):
        self.norm = Param(1.0 + R(D, scale=0.1), ("embed",))
        self.wq = Param(R(D, GQ_H, E, scale=0.4), ("embed", "heads", "kv"))
        self.wk = Param(R(D, GQ_K, E, scale=0.4), ("embed", "heads", "kv"))
        self.wv = Param(R(D, GQ_K, E, scale=0.4), ("embed", "heads", "kv"))
        self.wo = Param(R(GQ_H, E, D, scale=0.3), ("heads", "kv", "embed"))


def gqa_apply(state, x, reduce=None, residual_from_norm=False):
    h = rms(x, state["norm"])
    q = jnp.einsum("btd,dhe->bthe", h, state["wq"])
    k, v = (jnp.repeat(jnp.einsum("btd,dhe->bthe", h, state[w]), GQ_H // GQ_K, 2) for w in ("wk", "wv"))
    s = jnp.where(causal(x.shape[1]), jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E), -1e9)
    o = jnp.einsum("bqhe,hed->bqd", jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v), state["wo"])
    if reduce is not None:
        o = reduce(o)
    return (h if residual_from_norm else x) + o


gq_mod = GQAttention()
gq_rules = (("batch", "dp"), ("heads", "tp"), ("embed", None), ("kv", None))
MESH_AXIS = dict(gq_rules)


def nnx_gqa(bug):
    ax = MESH_AXIS["batch"] if bug == "psum-on-batch-axis" else MESH_AXIS["heads"]

    def f(state, x):
        return gqa_apply(state, x, reduce=lambda o: psum(o, ax),
                         residual_from_norm=bug == "residual-from-normed-input")
    return f


C.smap("s.nnx_style_gqa_logical_rules.dp4xtp2", {"dp": 4, "tp": 2}, nnx_gqa,
       (nnx_specs(gq_mod, gq_rules), logical_to_mesh(("batch",), gq_rules)), logical_to_mesh(("batch",), gq_rules),
       lambda state, x: gqa_apply(state, x), (nnx_state(gq_mod), R(8, T, D)),
       bugs=[("psum-on-batch-axis", ["wrong-collective-group"]), ("residual-from-normed-input", ["numerics"])])


# ---------------------------------------------------------------------------
# 12. layers stacked on a leading dim and run by lax.scan over a remat'ed
#     layer (jax.checkpoint, nothing_saveable), the carry sharded over dp,
#     each layer a Megatron MLP over tp with its psum inside the scan body
#     (check_vma=False, as many scan-over-layers codebases still run).
SC_L = 3


def scan_mlp_stack(x, w1s, w2s, gs):
    def layer(x, p):
        w1, w2, g = p
        return x + jax.nn.gelu(rms(x, g) @ w1) @ w2, None
    return lax.scan(layer, x, (w1s, w2s, gs))[0]


def smap_scan_stack(bug):
    def f(x, w1s, w2s, gs):
        def layer(x, p):
            w1, w2, g = p
            part = jax.nn.gelu(rms(x, g) @ w1) @ w2
            return x + (part if bug == "psum-after-scan" else psum(part, "tp")), None
        layer = jax.checkpoint(layer, policy=jax.checkpoint_policies.nothing_saveable)
        y = lax.scan(layer, x, (w1s, w2s, gs), reverse=bug == "scan-reverse")[0]
        return x + psum(y - x, "tp") if bug == "psum-after-scan" else y
    return f


C.smap("s.scan_remat_megatron_stack_carry_dp.dp2xtp4", {"dp": 2, "tp": 4}, smap_scan_stack,
       (P("dp"), P(None, None, "tp"), P(None, "tp"), P()), P("dp"), scan_mlp_stack,
       (R(B, T, D), R(SC_L, D, F, scale=0.3), R(SC_L, F, D, scale=0.3), 1.0 + R(SC_L, D, scale=0.1)),
       bugs=[("psum-after-scan", ["missing-all-reduce"]), ("scan-reverse", ["wrong-permutation"])])


# ---------------------------------------------------------------------------
# 13. Megatron sequence parallelism inside a remat'ed lax.scan over layers,
#     in an AdamW step (check_vma=True): the carry's sequence over tp, each
#     layer all_gathers the normalised carry along the sequence (tiled),
#     column- then row-parallel matmuls, psum_scatter back to the sequence
#     shards; the loss pmean'd over (dp, tp).
sp_opt = optax.adamw(0.01, weight_decay=0.01)


def sp_stack_loss(p, x, y):
    def layer(x, q):
        w1, w2, g = q
        return x + jax.nn.gelu(rms(x, g) @ w1) @ w2, None
    return mse(lax.scan(layer, x, (p["w1"], p["w2"], p["g"]))[0], y)


def sp_stack_step(p, st, x, y):
    lv, g = jax.value_and_grad(sp_stack_loss)(p, x, y)
    u, st = sp_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


def smap_sp_stack(bug):
    def layer(x, q):
        w1, w2, g = q
        a = rms(x, g)
        if bug == "gather-untiled-axis2":
            a = lax.all_gather(a, "tp", axis=2).reshape(a.shape[0], -1, a.shape[2])
        else:
            a = lax.all_gather(a, "tp", axis=1, tiled=True)
        part = jax.nn.gelu(a @ w1) @ w2
        return x + lax.psum_scatter(part, "dp" if bug == "scatter-over-dp" else "tp", scatter_dimension=1,
                                    tiled=True), None

    def f(p, st, x, y):
        def loss(p):
            body = jax.checkpoint(layer, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)
            return pmean(mse(lax.scan(body, x, (p["w1"], p["w2"], p["g"]))[0], y), ("dp", "tp"))
        lv, g = jax.value_and_grad(loss)(p)
        u, st = sp_opt.update(g, st, p)
        return optax.apply_updates(p, u), st, lv
    return f


sp_p = {"w1": R(SC_L, D, F, scale=0.3), "w2": R(SC_L, F, D, scale=0.3), "g": 1.0 + R(SC_L, D, scale=0.1)}
sp_ps = {"w1": P(None, None, "tp"), "w2": P(None, "tp"), "g": P()}
sp_st = np_tree(sp_opt.init(sp_p))
C.smap("s.seqpar_scan_remat_adamw.dp2xtp2", {"dp": 2, "tp": 2}, smap_sp_stack,
       (sp_ps, state_specs(sp_st, sp_ps), P("dp", "tp"), P("dp", "tp")), (sp_ps, state_specs(sp_st, sp_ps), P()),
       sp_stack_step, (sp_p, sp_st, R(B, T, D), R(B, T, D, scale=0.5)),
       bugs=[("gather-untiled-axis2", ["wrong-reshape-order"]), ("scatter-over-dp", ["wrong-collective-group"])],
       check_vma=True)


# ---------------------------------------------------------------------------
# 14. a reshard written by hand: rows over sp -> columns over sp by an
#     all_to_all (the columns split into per-device chunks, exchanged, the
#     source-device axis moved in front of the local rows before merging),
#     then a running mean down the full columns.
def running_mean_rows(x):
    return jnp.cumsum(x, 0) / jnp.arange(1, x.shape[0] + 1, dtype=x.dtype)[:, None]


def smap_rows_to_cols(bug):
    def f(x):
        n = 4
        if bug == "cumsum-before-a2a":
            x = jnp.cumsum(x, 0)
        chunks = x.reshape(x.shape[0], n, x.shape[1] // n)
        got = lax.all_to_all(chunks, "sp", 1, 1)
        if bug != "a2a-no-transpose-before-reshape":
            got = jnp.swapaxes(got, 0, 1)
        cols = got.reshape(-1, x.shape[1] // n)
        if bug == "cumsum-before-a2a":
            return cols / jnp.arange(1, cols.shape[0] + 1, dtype=cols.dtype)[:, None]
        return running_mean_rows(cols)
    return f


C.smap("s.manual_reshard_rows_to_cols_a2a.sp4", {"sp": 4}, smap_rows_to_cols, (P("sp"),), P(None, "sp"),
       running_mean_rows, (R(16, 16),),
       bugs=[("a2a-no-transpose-before-reshape", ["wrong-reshape-order"]), ("cumsum-before-a2a", ["missing-collective"])])


# ---------------------------------------------------------------------------
# 15. symmetrising a matrix sharded over both axes of a 2 x 2 mesh: the
#     transpose's block (i, j) is block (j, i) transposed, fetched by one
#     ppermute over the axis tuple ('x', 'y') (linear index 2 i + j).
def symmetrise(a, s):
    return 0.5 * (a + a.T) * s


def smap_block_transpose(bug):
    def f(a, s):
        if bug == "transpose-without-exchange":
            other = a
        elif bug == "exchange-over-x-only":
            other = lax.ppermute(a, "x", [(0, 1), (1, 0)])
        else:
            other = lax.ppermute(a, ("x", "y"), [(2 * i + j, 2 * j + i) for i in range(2) for j in range(2)])
        return 0.5 * (a + other.T) * s
    return f


C.smap("s.block_transpose_ppermute_axis_tuple.x2y2", {"x": 2, "y": 2}, smap_block_transpose, (P("x", "y"), P()),
       P("x", "y"), symmetrise, (R(16, 16), np.float32(1.5)),
       bugs=[("transpose-without-exchange", ["missing-collective"]), ("exchange-over-x-only", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 16. FSDP x TP in explicit mode with a shard_map region whose in_specs are
#     inferred from the types: the batch over ('dp', 'fsdp'), w1 P('fsdp',
#     'tp'), w2 P('tp', 'fsdp'); the region all_gathers each weight's fsdp
#     shards (tiled) and psums the row-parallel output over tp.
def fsdp_mlp_ref(x, w1, w2):
    return x + jax.nn.gelu(x @ w1) @ w2


def explicit_fsdp(bug):
    def mlp(x, w1, w2):
        w1f = lax.all_gather(w1, "tp" if bug == "gather-w1-over-tp" else "fsdp", axis=0, tiled=True)
        w2f = lax.all_gather(w2, "tp" if bug == "gather-w2-over-tp" else "fsdp", axis=1, tiled=True)
        return psum(jax.nn.gelu(x @ w1f) @ w2f, "tp")

    def f(x, w1, w2):
        return x + jax.shard_map(mlp, out_specs=P(("dp", "fsdp")))(x, w1, w2)
    return f


family("s.explicit_fsdp_tp_smap_inferred_specs.dp2xfsdp2xtp2", {"dp": 2, "fsdp": 2, "tp": 2}, (EXPL,) * 3,
       explicit_fsdp, (P(("dp", "fsdp")), P("fsdp", "tp"), P("tp", "fsdp")), P(("dp", "fsdp")), fsdp_mlp_ref,
       (R(8, D), R(D, F, scale=0.3), R(F, D, scale=0.3)),
       bugs=[("gather-w1-over-tp", ["wrong-collective-group"]), ("gather-w2-over-tp", ["wrong-collective-group"])],
       note="explicit-mode mesh (AxisType.Explicit), shard_map with in_specs inferred from types")


# ---------------------------------------------------------------------------
# 17. explicit mode, a lax.scan over stacked layers whose body is a remat'ed
#     jax.shard_map (a Megatron MLP over tp, check_vma=False); the scanned
#     weights carry P(None, None, 'tp') in their types, the carry P('dp').
def explicit_scan_smap(bug):
    def tp_layer(x, w1, w2, g):
        part = jax.nn.gelu(rms(x, g) @ w1) @ w2
        if bug == "residual-inside-psum":
            return psum(x + part, "tp")
        return x + (part if bug == "no-psum" else psum(part, "tp"))

    def f(x, w1s, w2s, gs):
        layer = jax.checkpoint(jax.shard_map(tp_layer, in_specs=(P("dp"), P(None, "tp"), P("tp"), P()),
                                             out_specs=P("dp"), check_vma=False))
        return lax.scan(lambda x, p: (layer(x, *p), None), x, (w1s, w2s, gs))[0]
    return f


family("s.explicit_scan_remat_smap_layer.dp2xtp4", {"dp": 2, "tp": 4}, (EXPL, EXPL), explicit_scan_smap,
       (P("dp"), P(None, None, "tp"), P(None, "tp"), P()), P("dp"), scan_mlp_stack,
       (R(B, T, D), R(SC_L, D, F, scale=0.3), R(SC_L, F, D, scale=0.3), 1.0 + R(SC_L, D, scale=0.1)),
       bugs=[("no-psum", ["missing-all-reduce"]), ("residual-inside-psum", ["wrong-collective-op"])],
       note="explicit-mode mesh (AxisType.Explicit), scan over a remat'ed shard_map layer")


# ---------------------------------------------------------------------------
# 18. sync BatchNorm (training mode) with dp manual and tp auto: a shard_map
#     over dp only; the hidden features over tp by a with_sharding_constraint
#     and the parameters' in_shardings; batch mean and E[h^2] pmean'd over
#     dp, the biased variance from them, the running mean updated.
def bn_mlp(x, w1, gamma, beta, w2, rm):
    h = x @ w1
    mu, var = jnp.mean(h, 0), jnp.var(h, 0)
    return jax.nn.gelu((h - mu) * lax.rsqrt(var + 1e-5) * gamma + beta) @ w2, 0.9 * rm + 0.1 * mu


def pm_sync_bn(bug):
    def body(x, w1, gamma, beta, w2, rm):
        h = wsc(x @ w1, P(None, "tp"))
        mu = pmean(jnp.mean(h, 0), "dp")
        if bug == "var-pmean-of-local-vars":
            var = pmean(jnp.var(h, 0), "dp")
        elif bug == "var-not-synced":
            var = jnp.mean(jnp.square(h - mu), 0)
        else:
            var = pmean(jnp.mean(jnp.square(h), 0), "dp") - jnp.square(mu)
        out = jax.nn.gelu((h - mu) * lax.rsqrt(var + 1e-5) * gamma + beta) @ w2
        return out, 0.9 * rm + 0.1 * mu

    def f(*a):
        return jax.shard_map(body, in_specs=(P("dp"), P(), P(), P(), P(), P()), out_specs=(P("dp"), P()),
                             axis_names={"dp"})(*a)
    return f


family("s.partial_manual_dp_sync_bn_auto_tp.dp2xtp4", {"dp": 2, "tp": 4}, (AUTO, AUTO), pm_sync_bn,
       (P("dp"), P(None, "tp"), P("tp"), P("tp"), P("tp"), P("tp")), (P("dp"), P("tp")), bn_mlp,
       (R(16, D) + 0.5, R(D, F, scale=0.3), 1.0 + R(F, scale=0.1), R(F, scale=0.1), R(F, D, scale=0.3), R(F, scale=0.1)),
       bugs=[("var-pmean-of-local-vars", ["wrong-collective-op"]), ("var-not-synced", ["missing-all-reduce"])],
       note="jax.shard_map(axis_names={'dp'}) inside jit, tp auto")


# ---------------------------------------------------------------------------
# 19. a data-parallel Adam step with an EMA of the parameters in a
#     shard_map over dp (check_vma=False, gradients pmean'd by hand), jitted
#     with donate_argnums for the parameters, the optimizer state and the EMA.
em_opt = optax.adam(0.01)


def em_loss(p, x, y):
    return mse(jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"], y)


def em_step(p, st, ema, x, y):
    lv, g = jax.value_and_grad(em_loss)(p, x, y)
    u, st = em_opt.update(g, st, p)
    p = optax.apply_updates(p, u)
    return p, st, jax.tree.map(lambda e, q: 0.99 * e + 0.01 * q, ema, p), lv


def smap_em_step(bug):
    def body(p, st, ema, x, y):
        lv, g = jax.value_and_grad(em_loss)(p, x, y)
        if bug != "grad-not-pmeaned":
            g = pmean(g, "dp")
        u, st = em_opt.update(g, st, p)
        p = optax.apply_updates(p, u)
        if bug == "ema-decay-swapped":
            ema = jax.tree.map(lambda e, q: 0.01 * e + 0.99 * q, ema, p)
        else:
            ema = jax.tree.map(lambda e, q: 0.99 * e + 0.01 * q, ema, p)
        return p, st, ema, pmean(lv, "dp")

    def f(p, st, ema, x, y):
        return jax.shard_map(body, in_specs=(P(), P(), P(), P("dp"), P("dp")), out_specs=P(), check_vma=False)(
            p, st, ema, x, y)
    return f


em_p = {"w1": R(D, F, scale=0.3), "b1": R(F, scale=0.1), "w2": R(F, D, scale=0.3)}
em_st = np_tree(em_opt.init(em_p))
family("s.donated_dp_adam_ema_step.dp4", {"dp": 4}, (AUTO,), smap_em_step, (P(), P(), P(), P("dp"), P("dp")), P(),
       em_step, (em_p, em_st, jax.tree.map(lambda a: a + R(*a.shape, scale=0.05), em_p), R(16, D), R(16, D)),
       bugs=[("grad-not-pmeaned", ["missing-all-reduce"]), ("ema-decay-swapped", ["numerics"])], donate=(0, 1, 2),
       note="jax.jit(donate_argnums=(0, 1, 2)) around a shard_map over dp")


# ===========================================================================
# GSPMD pairs (correct programs; jax.jit with in / out shardings under
# jax.set_mesh; the numerics run the same jit on a mesh of size-1 axes).
# ---------------------------------------------------------------------------
# 20. explicit mode: an Equinox-style Block (RMSNorm + MLP with einsum
#     out_sharding) stacked on a leading layer dim (a pytree of stacked
#     leaves), run by lax.scan over jax.checkpoint'ed blocks, in an AdamW
#     step jitted with donate_argnums for the model and the optimizer state.
@pytree_dataclass
class Block:
    g: jax.Array
    w1: jax.Array
    w2: jax.Array

    def __call__(self, x):
        h = jnp.einsum("btd,df->btf", rms(x, self.g), self.w1, out_sharding=P("dp", None, "tp"))
        return x + jnp.einsum("btf,fd->btd", jax.nn.gelu(h), self.w2, out_sharding=P("dp"))


bk_opt = optax.adamw(0.01, weight_decay=0.05)


def stack_loss(blocks, x, y):
    step = jax.checkpoint(lambda x, blk: (blk(x), None))
    return mse(lax.scan(step, x, blocks)[0], y)


def stack_step(blocks, st, x, y):
    lv, g = jax.value_and_grad(stack_loss)(blocks, x, y)
    u, st = bk_opt.update(g, st, blocks)
    return optax.apply_updates(blocks, u), st, lv


bk_blocks = jax.tree.map(lambda *a: np.stack(a), *[Block(1.0 + R(D, scale=0.1), R(D, F, scale=0.3),
                                                         R(F, D, scale=0.3)) for _ in range(SC_L)])
bk_ms = Block(P(), P(None, None, "tp"), P(None, "tp"))
bk_st = np_tree(bk_opt.init(bk_blocks))
bk_ss = specs_by_suffix(bk_st, bk_blocks, bk_ms)
gspmd_x("g.explicit_eqx_stacked_blocks_scan_remat_adamw.dp2xtp4", {"dp": 2, "tp": 4}, (EXPL, EXPL),
        (bk_ms, bk_ss, P("dp"), P("dp")), (bk_ms, bk_ss, P()), stack_step,
        (bk_blocks, bk_st, R(B, T, D), R(B, T, D, scale=0.5)), donate=(0, 1),
        note="explicit-mode mesh (AxisType.Explicit), donate_argnums=(0, 1)")


# ---------------------------------------------------------------------------
# 21. auto mode, Flax-NNX style: a two-layer MLP module whose Params carry
#     logical names, in_shardings from the rules table, activations
#     constrained by logical names (with_logical_constraint), an Adam step
#     jitted with donation.
class NnxMLP(Module):
    def __init__(self):
        self.norm = Param(1.0 + R(D, scale=0.1), ("embed",))
        self.wi = Param(R(D, F, scale=0.3), ("embed", "mlp"))
        self.wo = Param(R(F, D, scale=0.3), ("mlp", "embed"))


nm_opt = optax.adam(0.02)


def nnx_mlp_apply(s, x):
    x = logical_constraint(x, "batch", "seq", "embed")
    h = logical_constraint(jax.nn.silu(rms(x, s["norm"]) @ s["wi"]), "batch", "seq", "mlp")
    return logical_constraint(x + h @ s["wo"], "batch", "seq", "embed")


def nnx_mlp_step(s, st, x, y):
    lv, g = jax.value_and_grad(lambda s: mse(nnx_mlp_apply(s, x), y))(s)
    u, st = nm_opt.update(g, st, s)
    return optax.apply_updates(s, u), st, lv


nm_mod = NnxMLP()
nm_s, nm_ps = nnx_state(nm_mod), nnx_specs(nm_mod)
nm_st = np_tree(nm_opt.init(nm_s))
gspmd_x("g.nnx_logical_rules_constraints_adam.dp2xtp4", {"dp": 2, "tp": 4}, (AUTO, AUTO),
        (nm_ps, state_specs(nm_st, nm_ps), logical_to_mesh(("batch",)), logical_to_mesh(("batch",))),
        (nm_ps, state_specs(nm_st, nm_ps), P()), nnx_mlp_step, (nm_s, nm_st, R(B, T, D), R(B, T, D, scale=0.5)),
        donate=(0, 1), note="logical axis rules -> with_sharding_constraint, donate_argnums=(0, 1)")


# ---------------------------------------------------------------------------
# 22. a mixed mesh (dp Explicit, tp Auto): causal attention with the batch
#     in the types and the heads constrained over the auto tp.
def mixed_attn(x, wq, wk, wv, wo):
    q, k, v = (wsc(jnp.einsum("btd,dhe->bthe", x, w), P(None, None, "tp")) for w in (wq, wk, wv))
    s = jnp.where(causal(x.shape[1]), jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E), -1e9)
    o = wsc(jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v), P(None, None, "tp"))
    return jnp.einsum("bqhe,hed->bqd", o, wo)


gspmd_x("g.mixed_explicit_dp_auto_tp_attention.dp2xtp4", {"dp": 2, "tp": 4}, (EXPL, AUTO),
        (P("dp"), P(), P(), P(), P()), P("dp"), mixed_attn,
        (R(B, T, D), R(D, H, E, scale=0.4), R(D, H, E, scale=0.4), R(D, H, E, scale=0.4), R(H, E, D, scale=0.3)),
        note="mesh with dp Explicit and tp Auto")


# ---------------------------------------------------------------------------
# 23. explicit mode: an LM loss and its gradients, the embedding gather and
#     the target log-probabilities (take_along_axis) under
#     jax.sharding.auto_axes, the head's vocabulary over tp.
def explicit_lm_grads(emb, head, ids, tgt):
    def loss(emb, head):
        x = jax.sharding.auto_axes(lambda t, i: jnp.take(t, i, axis=0), out_sharding=P("dp", None, None))(emb, ids)
        logits = jnp.einsum("btd,dv->btv", rms(x, 1.0), head, out_sharding=P("dp", None, "tp"))
        logp = jax.nn.log_softmax(logits, -1)
        pick = jax.sharding.auto_axes(lambda l, t: jnp.take_along_axis(l, t[..., None], -1)[..., 0],
                                      out_sharding=P("dp", None))
        return -jnp.mean(pick(logp, tgt))
    return jax.value_and_grad(loss, (0, 1))(emb, head)


gspmd_x("g.explicit_auto_axes_gather_lm_grads.dp2xtp4", {"dp": 2, "tp": 4}, (EXPL, EXPL),
        (P(None, "tp"), P(None, "tp"), P("dp"), P("dp")), (P(), (P(None, "tp"), P(None, "tp"))), explicit_lm_grads,
        (R(EM_V, D, scale=0.5), R(D, EM_V, scale=0.4), I(0, EM_V, B, EM_T), I(0, EM_V, B, EM_T)),
        note="explicit-mode mesh (AxisType.Explicit), auto_axes around take / take_along_axis")


# ---------------------------------------------------------------------------
# 24. auto mode with an explicit region: jax.sharding.explicit_axes around a
#     gated MLP written with einsum out_sharding, constraints around it.
def auto_with_explicit_region(x, wg, wu, wd):
    x = wsc(x, P("dp"))

    def glu(x, wg, wu, wd):
        a = jnp.einsum("btd,df->btf", x, wg, out_sharding=P("dp", None, "tp"))
        b = jnp.einsum("btd,df->btf", x, wu, out_sharding=P("dp", None, "tp"))
        return jnp.einsum("btf,fd->btd", jax.nn.silu(a) * b, wd, out_sharding=P("dp"))
    y = jax.sharding.explicit_axes(glu, in_sharding=(P("dp"), P(None, "tp"), P(None, "tp"), P("tp")))(x, wg, wu, wd)
    return wsc(rms(x + y, 1.0), P("dp", "tp"))


gspmd_x("g.auto_mesh_explicit_axes_glu.dp2xtp4", {"dp": 2, "tp": 4}, (AUTO, AUTO),
        (P("dp"), P(None, "tp"), P(None, "tp"), P("tp")), P("dp", "tp"), auto_with_explicit_region,
        (R(B, T, D), R(D, F, scale=0.3), R(D, F, scale=0.3), R(F, D, scale=0.3)),
        note="auto mesh, jax.sharding.explicit_axes region")


# ---------------------------------------------------------------------------
# 25. explicit mode, Ulysses by reshard: q / k / v from a sequence-sharded
#     input, resharded to heads over sp for full-sequence causal attention,
#     the output resharded back to the sequence before the projection.
def explicit_ulysses(x, wq, wk, wv, wo):
    q, k, v = (reshard(jnp.einsum("btd,dhe->bthe", x, w, out_sharding=P("dp", "sp")), P("dp", None, "sp"))
               for w in (wq, wk, wv))
    s = jnp.where(causal(x.shape[1]), jnp.einsum("bqhe,bkhe->bhqk", q, k, out_sharding=P("dp", "sp")) / np.sqrt(E),
                  -1e9)
    o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v, out_sharding=P("dp", None, "sp"))
    return jnp.einsum("bqhe,hed->bqd", reshard(o, P("dp", "sp")), wo, out_sharding=P("dp", "sp"))


gspmd_x("g.explicit_reshard_ulysses_causal.dp2xsp4", {"dp": 2, "sp": 4}, (EXPL, EXPL),
        (P("dp", "sp"), P(), P(), P(), P()), P("dp", "sp"), explicit_ulysses,
        (R(B, 16, D), R(D, H, E, scale=0.4), R(D, H, E, scale=0.4), R(D, H, E, scale=0.4), R(H, E, D, scale=0.3)),
        note="explicit-mode mesh (AxisType.Explicit), reshard sequence <-> heads")


# ---------------------------------------------------------------------------
# 26. auto mode FSDP x TP: stacked layers P(None, 'fsdp', 'tp') in a lax.scan
#     over remat'ed layers (dots_with_no_batch_dims_saveable) whose carry is
#     constrained to the batch over fsdp in the body; momentum SGD, donation.
fs_opt = optax.sgd(0.1, momentum=0.9)


def fsdp_scan_loss(p, x, y):
    def layer(x, q):
        w1, w2, g = q
        x = wsc(x, P("fsdp"))
        h = wsc(jax.nn.gelu(rms(x, g) @ w1), P("fsdp", None, "tp"))
        return x + h @ w2, None
    layer = jax.checkpoint(layer, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)
    return mse(lax.scan(layer, x, (p["w1"], p["w2"], p["g"]))[0], y)


def fsdp_scan_step(p, st, x, y):
    lv, g = jax.value_and_grad(fsdp_scan_loss)(p, x, y)
    u, st = fs_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


fs_ps = {"w1": P(None, "fsdp", "tp"), "w2": P(None, "tp", "fsdp"), "g": P()}
fs_st = np_tree(fs_opt.init(sp_p))
gspmd_x("g.fsdp_tp_scan_remat_carry_constraint_sgd.fsdp4xtp2", {"fsdp": 4, "tp": 2}, (AUTO, AUTO),
        (fs_ps, state_specs(fs_st, fs_ps), P("fsdp"), P("fsdp")), (fs_ps, state_specs(fs_st, fs_ps), P()),
        fsdp_scan_step, (sp_p, fs_st, R(8, T, D), R(8, T, D, scale=0.5)), donate=(0, 1),
        note="donate_argnums=(0, 1)")


# ---------------------------------------------------------------------------
# 27. explicit mode, mixed precision: f32 master weights cast to bf16, bf16
#     einsums with f32 accumulation (preferred_element_type) and
#     out_sharding, an f32 loss, AdamW on the masters.
mp_opt = optax.adamw(0.01)


def bf16_master_loss(p, x, y):
    w1, w2 = p["w1"].astype(jnp.bfloat16), p["w2"].astype(jnp.bfloat16)
    h = jnp.einsum("bd,df->bf", x.astype(jnp.bfloat16), w1, preferred_element_type=jnp.float32,
                   out_sharding=P("dp", "tp"))
    out = jnp.einsum("bf,fd->bd", jax.nn.relu(h).astype(jnp.bfloat16), w2, preferred_element_type=jnp.float32,
                     out_sharding=P("dp"))
    return mse(out, y)


def bf16_master_step(p, st, x, y):
    lv, g = jax.value_and_grad(bf16_master_loss)(p, x, y)
    u, st = mp_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


mp_p = {"w1": R(D, F, scale=0.3), "w2": R(F, D, scale=0.3)}
mp_ps = {"w1": P(None, "tp"), "w2": P("tp")}
mp_st = np_tree(mp_opt.init(mp_p))
gspmd_x("g.explicit_bf16_compute_f32_master_adamw.dp4xtp2", {"dp": 4, "tp": 2}, (EXPL, EXPL),
        (mp_ps, state_specs(mp_st, mp_ps), P("dp"), P("dp")), (mp_ps, state_specs(mp_st, mp_ps), P()),
        bf16_master_step, (mp_p, mp_st, R(16, D), R(16, D, scale=0.5)),
        note="explicit-mode mesh (AxisType.Explicit), bf16 compute")


# ---------------------------------------------------------------------------
# 28. explicit mode on a 2 x 4 mesh: a Gram matrix and a projection by
#     jnp.dot / jnp.matmul with out_sharding, the transpose's sharding
#     following in its type (a.T is P('y', 'x')), a reshard before the
#     elementwise combination.
def explicit_gram(a, b):
    g = jnp.dot(a.T, a, out_sharding=P("y", None))
    proj = jnp.matmul(a, b, out_sharding=P("x", "y"))
    c = jnp.matmul(proj.T, a, out_sharding=P(None, "y"))
    return reshard(g, P(None, "y")) / a.shape[0] + 0.1 * c


gspmd_x("g.explicit_dot_matmul_transpose_types.x2y4", {"x": 2, "y": 4}, (EXPL, EXPL), (P("x", "y"), P("y", None)),
        P(None, "y"), explicit_gram, (R(16, 8), R(8, 8, scale=0.5)),
        note="explicit-mode mesh (AxisType.Explicit), jnp.dot / matmul out_sharding")


# ---------------------------------------------------------------------------
# 29. auto mode, ZeRO-3 style under GSPMD: every parameter and Adam moment
#     sharded on its first dim over the tuple ('dp', 'fsdp'), the batch over
#     the same tuple, activations constrained to it, out_shardings equal to
#     in_shardings and the state donated.
z_opt = optax.adam(0.01)
z_p = {"w1": R(D, F, scale=0.3), "b1": R(F, scale=0.1), "w2": R(F, D, scale=0.3), "b2": R(D, scale=0.1)}
z_ps = {k: P(("dp", "fsdp")) for k in z_p}
z_ps["b2"] = P()


def zero3_step(p, st, x, y):
    def loss(p):
        h = wsc(jax.nn.gelu(x @ p["w1"] + p["b1"]), P(("dp", "fsdp")))
        return mse(h @ p["w2"] + p["b2"], y)
    lv, g = jax.value_and_grad(loss)(p)
    u, st = z_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


z_st = np_tree(z_opt.init(z_p))
gspmd_x("g.zero3_tuple_axis_adam_donated.dp2xfsdp4", {"dp": 2, "fsdp": 4}, (AUTO, AUTO),
        (z_ps, state_specs(z_st, z_ps), P(("dp", "fsdp")), P(("dp", "fsdp"))), (z_ps, state_specs(z_st, z_ps), P()),
        zero3_step, (z_p, z_st, R(16, D), R(16, D, scale=0.5)), donate=(0, 1), note="donate_argnums=(0, 1)")

# ---------------------------------------------------------------------------
C.finish()
