"""samples/fresh108: a 108th batch of programs as a user writes them, on the
theme of the current JAX's (0.12) sharding APIs as users combine them --
jax.jit with in_shardings / out_shardings and lax.with_sharding_constraint in
the middle of a model (inside lax.scan / fori_loop / while_loop bodies and
under jax.grad), jax.shard_map nested in jit with only some mesh axes manual
(axis_names=), jax.grad outside such a region, two shard_map regions in one
jit with a jax.device_put to a new sharding between them, explicit-axes
meshes (jax.make_mesh(axis_types=Explicit), einsum out_sharding,
jax.sharding.reshard, a shard_map region inside), NamedSharding with
PartitionSpec tuples of several axes on one dim (also opposite to the mesh
order), uneven shapes padded by GSPMD, jax.vmap with spmd_axis_name and vmap
axis names beside mesh axes, jax.experimental.custom_partitioning with
collectives inside the partition's lower_fn (it works on CPU) -- none of them
an idiom of samples/fresh .. fresh26, probe, train or wild (fresh9 and
fresh21 had explicit mode, partial-manual shard_map and a custom_partitioning
RMSNorm whose partition only asked for a replicated feature dim: here other
programs, regions and partition rules).
shard_map families (bugs in brackets; 3., 4., 6., 8., 10., 13., 14. are jit
programs holding shard_map regions or custom_partitioning ops, exported by
family() below with the single-device function as baseline):
 1. a residual MLP stack in lax.fori_loop over stacked weights, hidden over
    tp, the row-parallel psum inside the loop, batch over dp [bias inside the
    psum, psum over dp, pmean for psum];
 2. LayerNorm over a hidden dim sharded over tp (sequence over sp), two-pass
    statistics by psum, in a lax.scan over stacked gains / biases [mean and
    variance divided by the local width, statistics psum'd over sp, the
    variance from local deviations only];
 3. causal ring attention, sp manual and tp auto (heads constrained inside
    the region), k / v passed around by ppermute in a fori_loop, online
    softmax, the carries pcast to varying [ring sent the other way while the
    mask assumes the forward ring, query positions without the shard offset];
 4. dp manual inside jit with tp auto: value_and_grad inside the region
    (with_sharding_constraint on the hidden under jax.grad), gradients
    pmean'd, optax.sgd + momentum outside under GSPMD [gradients psum'd,
    gradients not synchronised];
 5. an ensemble of MLPs, members over the mesh axis ens and a jax.vmap
    axis_name 'm' over the two local members, batch over dp, the ensemble
    mean by pmean over 'm' then 'ens', the disagreement [mean over dp
    instead of ens, psum over the vmap axis];
 6. custom_partitioning LayerNorm whose partition keeps the incoming
    sharding and psums the statistics over the feature axis it finds in it
    [local statistics, the mean divided by the local width];
 7. a two-layer MLP on x2 x y4 with shards over the tuple ('x', 'y'): a
    row-parallel psum over the tuple and an FSDP all_gather over it
    [psum over x only, all_gather over ('y', 'x')];
 8. two shard_map stages in one jit (a TP MLP block on the batch over dp,
    then a mean-pooled classifier with the sequence over tp) and a
    jax.device_put to P('dp', 'tp') between them [residual inside the psum,
    pooled sum divided by the local length];
 9. a 1-D conv stack (kernel 3, SAME) with time over sp, halos by ppermute
    with zeros at the ends, LayerNorm over channels [halos wrapping around
    the ring, halos from the wrong neighbours];
10. an explicit-axes mesh with a shard_map region doing Ulysses attention
    (all_to_all to heads over sp, the output projection on the device's
    heads at their row offset, psum_scatter back to the sequence) [all_to_all
    and psum_scatter over dp, rows of wo at offset 0];
11. FSDP on fsdp8: stacked weights row-sharded, all_gathered per layer in a
    lax.scan, jax.grad through the gathers (reduce-scatter by transposition),
    SGD on the shards [gradient not divided by the device count, gradient
    shards pmean'd together];
12. an attention block's training step, heads over tp and batch over dp
    (check_vma=True), bf16 operands with f32 accumulation, the loss pmean'd
    over dp inside the differentiated function, SGD [gradients pmean'd over
    tp, loss not pmean'd so the implicit cotangent psum doubles the grads];
13. jax.value_and_grad outside a jit-nested shard_map with only tp manual
    (dp auto), a Megatron MLP with its bias after the psum, optax.adam
    [bias inside the psum, pmean for psum];
14. custom_partitioning vocabulary-parallel cross-entropy (pmax of the row
    maxima, psum of exp, the target logit picked at the shard's vocabulary
    offset and psum'd) after a constrained (dp, tp) logits matmul [target
    offset 0, local maxima only];
15. ZeRO-2 on dp8: gradients accumulated over four micro-batches in a
    fori_loop, psum_scatter'd once, the SGD update on the device's row shard,
    all_gather back [accumulator not averaged, shard updated at offset 0].
GSPMD pairs (correct; numerics against the same jit on a mesh of the same
axes of size 1): 16. a stacked MLP in lax.scan with with_sharding_constraint
on the carry and the hidden, value_and_grad, optax.adamw; 17. power
iteration in fori_loop with the iterate constrained to ('x', 'y'); 18. a
batch of 10 over dp4 and a hidden of 15 over tp2 by constraints (jit
arguments must divide, so they arrive replicated); 19. jax.vmap(
spmd_axis_name='ens') over four classifiers' SGD steps; 20. a conv net with
the batch over ('dp', 'sp') and channels over tp; 21. an attention block
with jax.device_put to a new NamedSharding inside jit between the attention
and the MLP; 22. explicit axes: einsum out_sharding and reshard of the
residual to the sequence; 23. explicit axes: a softmax regression step with
the batch over ('dp', 'sp'), Nesterov SGD; 24. a sequence of 10 over sp4 and
6 heads over tp2 with a length mask, queries and scores constrained; 25. an
Elman RNN in fori_loop with the hidden constrained each step, optax.adam;
26. the batch over the reversed tuple ('tp', 'dp'), the output's features
over ('dp', 'tp'); 27. Newton-Schulz in a while_loop with the iterate
constrained each step; 28. explicit axes: reshard of the carry inside a
lax.scan under value_and_grad; 29. out_shardings moving replicated
parameters and their optax.rmsprop state to FSDP rows over ('dp', 'tp').
Not kept: a shard_map region whose tp psum is dropped with check_vma=True
(JAX rejects it at trace time: the output is varying over tp but out_specs
replicate it), replaced by a pmean-for-psum bug; one-pass (E[x^2] - E[x]^2)
LayerNorm statistics (the bug variants went NaN); uneven jit arguments (JAX
requires in_shardings to divide the shape). The first version of family 12
pmean'd the gradients after a local loss under check_vma=True, which is a
real bug (the cotangent of the dp-invariant weights is already psum'd): the
checker reported it and the program was fixed.
Exported with scalify_jax's pieces (export_pair through Corpus.smap, or
family() / gspmd_x() below); every pair is also run by JAX on seeded inputs
and its manifest entry records the largest difference from the single-device
run ("numerics").
Run from the repository root: bash samples/gen/run_fresh108.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import os
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P, reshard
from jax.experimental.custom_partitioning import custom_partitioning
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh108.sh)
from fresh_lib import Corpus, seeded, mse, np_tree, state_specs, bug_lines  # noqa: E402
from scalify_jax import before_partitioning, after_partitioning, leaf_names, relations_doc, spec_view  # noqa: E402
from scalify_jax._export import _merge_manifest, _write, _json_lines, broadcast_specs, output_names, versions  # noqa: E402

SCRIPT = "samples/gen/fresh108.py"
OUT = "samples/fresh108"
C = Corpus(OUT, SCRIPT, "samples/gen/run_fresh108.sh", sys.argv[1:])
rng, R, I = seeded(108108)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index
wsc = lax.with_sharding_constraint
EXPL, AUTO = AxisType.Explicit, AxisType.Auto
B, T, D, F, H, E, L = 8, 16, 16, 32, 4, 4, 3


# ---------------------------------------------------------------------------
# 0. exporting jit programs that hold shard_map regions over some axes, a
#    custom_partitioning op or an explicit mesh: both sides lowered by hand
#    from scalify_jax's pieces under jax.set_mesh, from ShapeDtypeStructs
#    carrying their NamedShardings.
def mesh_of(axes, types=None):
    types = tuple(types) if types else (AUTO,) * len(axes)
    return jax.make_mesh(tuple(axes.values()), tuple(axes), axis_types=types)


def unit_mesh(axes, types=None):
    types = tuple(types) if types else (AUTO,) * len(axes)
    return Mesh(np.array(jax.devices()[:1]).reshape((1,) * len(axes)), tuple(axes), axis_types=types)


def is_spec(s):
    return s is None or isinstance(s, P)


def leaf_specs(specs, args):
    return jax.tree.map(lambda s, a: jax.tree.map(lambda _: P() if s is None else s, a), tuple(specs), tuple(args),
                        is_leaf=is_spec)


def sds(m, specs, args):
    return jax.tree.map(lambda s, a: jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype,
                                                          sharding=NamedSharding(m, s)),
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
    from wild import max_abs_diff
    big = [float(np.max(np.abs(np.asarray(x, np.float64)))) for x in jax.tree.leaves(ref) if np.size(x)]
    C.extra[name] = {"numerics": {"max_abs_diff": max_abs_diff(ref, got), "max_abs_ref": max(big + [0.0])}}
    if note:
        C.extra[name]["note"] = note


def gspmd_x(name, axes, types, in_specs, out_specs, fn, args, note=None):
    """A correct GSPMD pair: jax.jit(fn, in_shardings, out_shardings) under
    jax.set_mesh on a mesh of the given axis types; numerics against the same
    jit on a mesh of the same axes of size 1."""
    if not C.wanted(name):
        return
    print("==", name, flush=True)
    m = mesh_of(axes, types)
    with jax.set_mesh(m):
        j = jax.jit(fn, in_shardings=named(m, tuple(in_specs)), out_shardings=named(m, out_specs), keep_unused=True)
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


def family(fam, axes, types, make, in_specs, out_specs, fn, args, bugs=(), note=None):
    """make(bug): a function of the global arrays holding shard_map regions
    (some axes manual) or custom_partitioning ops, run as jax.jit with the
    specs as in / out shardings under jax.set_mesh; the baseline is the
    single-device fn; relations from the specs (kind shard_map)."""
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
                        keep_unused=True)
            dist_lo = j.lower(*sds(m, in_specs, args))
            entry = {"name": name, "mesh": dict(axes), "kind": "shard_map"}
            _write(os.path.join(OUT, name + ".relations.json"), _json_lines(rel))
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


def layer_norm(x, g, b, eps=1e-5):
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps) * g + b


# ===========================================================================
# shard_map families
# ---------------------------------------------------------------------------
# 1. a residual MLP stack run by lax.fori_loop over stacked layer weights,
#    hidden units over tp (column-parallel up, row-parallel down with the
#    psum inside the loop body), the batch over dp.
def fori_mlp_ref(x, w1, b1, w2, b2):
    def layer(l, h):
        u = jax.nn.gelu(h @ w1[l] + b1[l])
        return h + u @ w2[l] + b2[l]
    return lax.fori_loop(0, w1.shape[0], layer, x)


def fori_mlp_tp(bug):
    def body(x, w1, b1, w2, b2):
        def layer(l, h):
            u = jax.nn.gelu(jnp.dot(h, w1[l]) + b1[l])
            if bug == "bias-inside-psum":
                return h + psum(jnp.dot(u, w2[l]) + b2[l], "tp")
            if bug == "psum-over-dp":
                return h + psum(jnp.dot(u, w2[l]), "dp") + b2[l]
            if bug == "pmean-not-psum":
                return h + pmean(jnp.dot(u, w2[l]), "tp") + b2[l]
            return h + psum(jnp.dot(u, w2[l]), "tp") + b2[l]
        return lax.fori_loop(0, w1.shape[0], layer, x)
    return body


C.smap("s.fori_stacked_residual_mlp_rowpar_psum.dp2xtp4", {"dp": 2, "tp": 4}, fori_mlp_tp,
       (P("dp"), P(None, None, "tp"), P(None, "tp"), P(None, "tp", None), P()), P("dp"), fori_mlp_ref,
       (R(B, D), R(L, D, F, scale=0.25), R(L, F, scale=0.1), R(L, F, D, scale=0.2), R(L, D, scale=0.1)),
       bugs=[("bias-inside-psum", ["wrong-scale"]), ("psum-over-dp", ["wrong-collective-group"]),
             ("pmean-not-psum", ["wrong-collective-op"])])


# ---------------------------------------------------------------------------
# 2. LayerNorm over a hidden dim sharded over tp with the sequence over sp,
#    statistics as psum'd sums (two passes: the mean, then the squared
#    deviations from it), applied in a
#    lax.scan over two stacked (gain, bias) pairs with a tanh in between.
def ln_scan_ref(x, gs, bs):
    def step(h, gb):
        return jnp.tanh(layer_norm(h, gb[0], gb[1])), None
    return lax.scan(step, x, (gs, bs))[0]


def ln_scan_tp(bug):
    def body(x, gs, bs):
        n = x.shape[-1] * (1 if bug == "divide-by-local-width" else lax.axis_size("tp"))

        def step(h, gb):
            s1 = jnp.sum(h, -1, keepdims=True)
            s1 = psum(s1, "sp" if bug == "stats-over-sp" else "tp")
            mu = s1 / n
            s2 = jnp.sum(jnp.square(h - mu), -1, keepdims=True)
            if bug == "variance-local":
                var = s2 / x.shape[-1]
            else:
                var = psum(s2, "sp" if bug == "stats-over-sp" else "tp") / n
            return jnp.tanh((h - mu) * lax.rsqrt(var + 1e-5) * gb[0] + gb[1]), None
        return lax.scan(step, x, (gs, bs))[0]
    return body


C.smap("s.layernorm_hidden_tp_two_pass_stats_scan.sp2xtp4", {"sp": 2, "tp": 4}, ln_scan_tp,
       (P("sp", "tp"), P(None, "tp"), P(None, "tp")), P("sp", "tp"), ln_scan_ref,
       (R(T, D, scale=2.0) + 0.5, 1.0 + R(2, D, scale=0.2), R(2, D, scale=0.2)),
       bugs=[("divide-by-local-width", ["wrong-scale"]), ("stats-over-sp", ["wrong-collective-group"]),
             ("variance-local", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 3. causal ring attention inside jit with only sp manual (axis_names={'sp'}),
#    the heads over the auto axis tp: keys / values passed around the ring by
#    ppermute in a fori_loop, online softmax, the causal mask from the source
#    block index.
def causal_attn(q, k, v):
    t = q.shape[1]
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e30)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def ring_attn(bug):
    def body(q, k, v):
        n = lax.axis_size("sp")
        me = idx("sp")
        tl = q.shape[1]
        fwd = [(i, (i + 1) % n) for i in range(n)]
        if bug == "ring-reversed":
            fwd = [(i, (i - 1) % n) for i in range(n)]
        q = wsc(q, P(None, None, "tp"))
        qpos = (0 if bug == "query-pos-local" else me * tl) + jnp.arange(tl)
        scale = 1.0 / np.sqrt(q.shape[-1])

        def step(i, c):
            kk, vv, m, l, acc = c
            src = (me - i) % n
            kpos = src * tl + jnp.arange(tl)
            s = jnp.einsum("bqhe,bkhe->bhqk", q, kk) * scale
            s = jnp.where(qpos[:, None] >= kpos[None, :], s, -1e30)
            mn = jnp.maximum(m, s.max(-1))
            p = jnp.exp(s - mn[..., None])
            corr = jnp.exp(m - mn)
            l = l * corr + p.sum(-1)
            acc = acc * corr[..., None] + jnp.einsum("bhqk,bkhe->bhqe", p, vv)
            kk, vv = lax.ppermute(kk, "sp", fwd), lax.ppermute(vv, "sp", fwd)
            return kk, vv, mn, l, acc
        b, _, h, e = q.shape
        init = (k, v) + tuple(lax.pcast(a, ("sp",), to="varying") for a in
                              (jnp.full((b, h, tl), -1e30), jnp.zeros((b, h, tl)), jnp.zeros((b, h, tl, e))))
        _, _, m, l, acc = lax.fori_loop(0, n, step, init)
        return jnp.transpose(acc / l[..., None], (0, 2, 1, 3))

    def f(q, k, v):
        return jax.shard_map(body, in_specs=P(None, "sp"), out_specs=P(None, "sp"), axis_names={"sp"})(q, k, v)
    return f


family("s.partial_manual_ring_causal_attention_auto_tp.sp4xtp2", {"sp": 4, "tp": 2}, None, ring_attn,
       (P(None, "sp", "tp"),) * 3, P(None, "sp", "tp"), causal_attn,
       (R(2, T, H, E), R(2, T, H, E), R(2, T, H, E)),
       bugs=[("ring-reversed", ["wrong-permutation"]), ("query-pos-local", ["wrong-offset"])],
       note="jax.shard_map(axis_names={'sp'}) inside jit, tp auto, ppermute ring in fori_loop")


# ---------------------------------------------------------------------------
# 4. a data-parallel training step with dp manual inside jit and tp auto: the
#    gradient taken inside the shard_map body (with_sharding_constraint on the
#    hidden over tp under jax.grad), gradients pmean'd over dp, the optax SGD
#    + momentum update outside the manual region (GSPMD).
sgd_m = optax.sgd(0.05, momentum=0.9)


def mlp_loss(p, x, y):
    h = jax.nn.relu(x @ p["w1"] + p["b1"])
    return mse(h @ p["w2"], y)


def dp_step_ref(p, st, x, y):
    lv, g = jax.value_and_grad(mlp_loss)(p, x, y)
    u, st = sgd_m.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


def dp_manual_step(bug):
    def body(p, x, y):
        def loss(p):
            h = wsc(jax.nn.relu(x @ p["w1"] + p["b1"]), P(None, "tp"))
            return mse(h @ p["w2"], y)
        lv, g = jax.value_and_grad(loss)(p)
        if bug == "grads-psum":
            g = psum(g, "dp")
        elif bug == "grads-not-synced":
            pass
        else:
            g = pmean(g, "dp")
        return pmean(lv, "dp"), g

    def f(p, st, x, y):
        lv, g = jax.shard_map(body, in_specs=(P(), P("dp"), P("dp")), out_specs=(P(), P()),
                              axis_names={"dp"}, check_vma=False)(p, x, y)
        u, st = sgd_m.update(g, st, p)
        return optax.apply_updates(p, u), st, lv
    return f


dps_p = {"w1": R(D, F, scale=0.3), "b1": R(F, scale=0.1), "w2": R(F, D, scale=0.3)}
dps_ps = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp")}
dps_st = jax.tree.map(lambda a: (a + 0.01).astype(a.dtype), np_tree(sgd_m.init(dps_p)))
family("s.partial_manual_dp_grad_inside_sgd_momentum_outside.dp4xtp2", {"dp": 4, "tp": 2}, None, dp_manual_step,
       (dps_ps, state_specs(dps_st, dps_ps), P("dp"), P("dp")), (dps_ps, state_specs(dps_st, dps_ps), P()),
       dp_step_ref, (dps_p, dps_st, R(16, D), R(16, D, scale=0.5)),
       bugs=[("grads-psum", ["wrong-collective-op"]), ("grads-not-synced", ["missing-all-reduce"])],
       note="jax.shard_map(axis_names={'dp'}) inside jit, tp auto, optax update under GSPMD")


# ---------------------------------------------------------------------------
# 5. an ensemble of MLPs: members over the mesh axis ens (two per device, a
#    jax.vmap with axis_name='m' over them), the batch over dp; the ensemble
#    mean by pmean over the vmap axis and the mesh axis, the disagreement as
#    the mean squared deviation from it.
def ens_ref(w1, w2, x):
    y = jnp.einsum("mbf,mfd->mbd", jax.nn.tanh(jnp.einsum("bd,mdf->mbf", x, w1)), w2)
    mu = y.mean(0)
    return mu, jnp.mean(jnp.square(y - mu), 0)


def ens_vmap(bug):
    def body(w1, w2, x):
        def member(a, b):
            y = jnp.tanh(x @ a) @ b
            if bug == "mean-over-dp":
                mu = pmean(pmean(y, "m"), "dp")
            elif bug == "psum-vmap-axis":
                mu = pmean(psum(y, "m"), "ens")
            else:
                mu = pmean(pmean(y, "m"), "ens")
            dev = pmean(pmean(jnp.square(y - mu), "m"), "ens")
            return mu, dev
        mu, dev = jax.vmap(member, axis_name="m")(w1, w2)
        return mu[0], dev[0]
    return body


C.smap("s.vmap_axis_name_ensemble_mean_over_mesh.ens4xdp2", {"ens": 4, "dp": 2}, ens_vmap,
       (P("ens"), P("ens"), P("dp")), (P("dp"), P("dp")), ens_ref,
       (R(8, D, F, scale=0.3), R(8, F, D, scale=0.3), R(B, D)),
       bugs=[("mean-over-dp", ["wrong-collective-group"]), ("psum-vmap-axis", ["wrong-scale"])])


# ---------------------------------------------------------------------------
# 6. jax.experimental.custom_partitioning: a LayerNorm op whose partition
#    callback keeps the incoming sharding (features over tp included) and
#    computes the statistics with psum over the feature axis the mesh names,
#    then a projection by a replicated weight.
def make_cp_ln(bug):
    def ln_core(x):
        return layer_norm(x, 1.0, 0.0)

    @custom_partitioning
    def cp_ln(x):
        return ln_core(x)

    def infer(mesh, arg_shapes, result_shape):
        return arg_shapes[0].sharding

    def partition(mesh, arg_shapes, result_shape):
        sh = arg_shapes[0].sharding
        spec = tuple(sh.spec) + (None,) * (len(arg_shapes[0].shape) - len(sh.spec))
        ax = spec[-1]
        n = arg_shapes[0].shape[-1]

        def lower(x):
            if ax is None:
                return ln_core(x)
            if bug == "local-statistics":
                return ln_core(x)
            s1 = psum(jnp.sum(x, -1, keepdims=True), ax)
            mu = s1 / (x.shape[-1] if bug == "sum-over-local-width" else n)
            var = psum(jnp.sum(jnp.square(x - mu), -1, keepdims=True), ax) / n
            return (x - mu) * lax.rsqrt(var + 1e-5)
        return mesh, lower, sh, (sh,)

    cp_ln.def_partition(infer_sharding_from_operands=infer, partition=partition, sharding_rule="b d -> b d")
    return cp_ln


def cp_ln_ref(x, g, w):
    return jnp.tanh(layer_norm(x, g, 0.0) @ w)


def cp_ln_family(bug):
    op = make_cp_ln(bug)

    def f(x, g, w):
        return jnp.tanh((op(x) * g) @ w)
    return f


family("s.custom_partitioning_layernorm_psum_in_partition.dp2xtp4", {"dp": 2, "tp": 4}, None, cp_ln_family,
       (P("dp", "tp"), P("tp"), P()), P("dp"), cp_ln_ref,
       (R(16, D, scale=1.5) + 0.3, 1.0 + R(D, scale=0.2), R(D, 8, scale=0.3)),
       bugs=[("local-statistics", ["missing-all-reduce"]), ("sum-over-local-width", ["wrong-scale"])],
       note="jax.experimental.custom_partitioning, collectives inside the partition's lower_fn")


# ---------------------------------------------------------------------------
# 7. a two-layer MLP on a 2 x 4 mesh whose shards follow the axis tuple
#    ('x', 'y') on one dim: the input features and the first weight's rows
#    over ('x', 'y') (row-parallel, psum over the tuple), the second weight
#    stored row-sharded over ('x', 'y') and all_gathered (FSDP style).
def tuple_mlp_ref(x, w1, w2):
    return jax.nn.silu(x @ w1) @ w2


def tuple_mlp(bug):
    def body(x, w1, w2):
        h = psum(x @ w1, "x" if bug == "psum-x-only" else ("x", "y"))
        w2f = lax.all_gather(w2, ("y", "x") if bug == "gather-yx-order" else ("x", "y"), axis=0, tiled=True)
        return jax.nn.silu(h) @ w2f
    return body


C.smap("s.axis_tuple_rowpar_and_fsdp_gather.x2y4", {"x": 2, "y": 4}, tuple_mlp,
       (P(None, ("x", "y")), P(("x", "y")), P(("x", "y"))), P(), tuple_mlp_ref,
       (R(B, D), R(D, F, scale=0.3), R(F, D, scale=0.3)),
       bugs=[("psum-x-only", ["wrong-collective-group"]), ("gather-yx-order", ["wrong-permutation"])])


# ---------------------------------------------------------------------------
# 8. two shard_map stages in one jit with a jax.device_put to a new sharding
#    between them: a tensor-parallel MLP block on the batch over dp, then the
#    activations moved to the sequence over tp for a mean-pooled classifier
#    whose pooling psums over tp.
def two_stage_ref(x, w1, w2, wc):
    y = x + jax.nn.gelu(x @ w1) @ w2
    return jax.nn.log_softmax(y.mean(1) @ wc, -1)


def two_stage(bug):
    def stage1(x, w1, w2):
        u = jax.nn.gelu(jnp.einsum("btd,df->btf", x, w1))
        if bug == "residual-inside-psum":
            return psum(jnp.einsum("btf,fd->btd", u, w2) + x, "tp")
        return x + psum(jnp.einsum("btf,fd->btd", u, w2), "tp")

    def stage2(y, wc):
        t_loc = y.shape[1]
        pooled = psum(y.sum(1), "tp") / (t_loc if bug == "pool-local-length" else t_loc * lax.axis_size("tp"))
        return jax.nn.log_softmax(pooled @ wc, -1)

    def f(x, w1, w2, wc):
        m = jax.sharding.get_abstract_mesh()
        y = jax.shard_map(stage1, in_specs=(P("dp"), P(None, "tp"), P("tp")), out_specs=P("dp"))(x, w1, w2)
        y = jax.device_put(y, NamedSharding(m, P("dp", "tp")))
        return jax.shard_map(stage2, in_specs=(P("dp", "tp"), P()), out_specs=P("dp"))(y, wc)
    return f


family("s.two_shard_map_stages_device_put_between.dp2xtp4", {"dp": 2, "tp": 4}, None, two_stage,
       (P("dp"), P(None, "tp"), P("tp"), P()), P("dp"), two_stage_ref,
       (R(4, T, D), R(D, F, scale=0.3), R(F, D, scale=0.3), R(D, 6, scale=0.5)),
       bugs=[("residual-inside-psum", ["wrong-scale"]), ("pool-local-length", ["wrong-scale"])],
       note="two jax.shard_map regions in one jit, jax.device_put to P('dp', 'tp') between them")


# ---------------------------------------------------------------------------
# 9. a 1-D convolution stack (kernel 3, SAME zero padding) with the time axis
#    over sp: halos of one step from both neighbours by ppermute (zeros at
#    the ends), lax.conv_general_dilated on the padded block, a channel
#    LayerNorm, twice.
def conv_ref(x, k1, k2, g):
    def conv(h, k):
        return lax.conv_general_dilated(h, k, (1,), [(1, 1)], dimension_numbers=("NWC", "WIO", "NWC"))
    h = layer_norm(jax.nn.relu(conv(x, k1)), g, 0.0)
    return layer_norm(jax.nn.relu(conv(h, k2)), g, 0.0)


def conv_halo(bug):
    def body(x, k1, k2, g):
        n = lax.axis_size("sp")

        def halo_conv(h, k):
            if bug == "halo-wraps-around":
                right = [(i, (i + 1) % n) for i in range(n)]
                left = [(i, (i - 1) % n) for i in range(n)]
            else:
                right = [(i, i + 1) for i in range(n - 1)]
                left = [(i + 1, i) for i in range(n - 1)]
            from_left = lax.ppermute(h[:, -1:], "sp", right)
            from_right = lax.ppermute(h[:, :1], "sp", left)
            if bug == "halos-swapped":
                from_left, from_right = from_right, from_left
            hp = jnp.concatenate([from_left, h, from_right], 1)
            return lax.conv_general_dilated(hp, k, (1,), [(0, 0)], dimension_numbers=("NWC", "WIO", "NWC"))
        h = layer_norm(jax.nn.relu(halo_conv(x, k1)), g, 0.0)
        return layer_norm(jax.nn.relu(halo_conv(h, k2)), g, 0.0)
    return body


C.smap("s.conv1d_time_sp_halo_ppermute_layernorm.dp2xsp4", {"dp": 2, "sp": 4}, conv_halo,
       (P("dp", "sp"), P(), P(), P()), P("dp", "sp"), conv_ref,
       (R(4, T, 8), R(3, 8, 8, scale=0.4), R(3, 8, 8, scale=0.4), 1.0 + R(8, scale=0.1)),
       bugs=[("halo-wraps-around", ["wrong-permutation"]), ("halos-swapped", ["wrong-permutation"])])


# ---------------------------------------------------------------------------
# 10. an explicit-axes mesh (jax.make_mesh(axis_types=Explicit)) with a
#     shard_map region doing Ulysses attention: q, k, v sequence-sharded over
#     sp, all_to_all to heads over sp, full attention, the output projection
#     applied to the device's heads (rows of wo at the head offset) and
#     psum_scatter'd back to the sequence layout; a residual outside.
HU = 8


def ulysses_ref(x, wq, wk, wv, wo):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E)
    o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)
    return x + jnp.einsum("bqhe,hed->bqd", o, wo)


def ulysses_explicit(bug):
    def body(x, wq, wk, wv, wo):
        q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
        ax = "dp" if bug == "a2a-over-dp" else "sp"
        q, k, v = (lax.all_to_all(a, ax, 2, 1, tiled=True) for a in (q, k, v))
        s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E)
        o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)
        hl = o.shape[2]
        off = 0 if bug == "wo-rows-at-zero" else lax.axis_index(ax) * hl
        part = jnp.einsum("bqhe,hed->bqd", o, lax.dynamic_slice_in_dim(wo, off, hl, 0))
        return lax.psum_scatter(part, ax, scatter_dimension=1, tiled=True)

    def f(x, wq, wk, wv, wo):
        y = jax.shard_map(body, in_specs=(P("dp", "sp"), P(), P(), P(), P()), out_specs=P("dp", "sp"))(
            x, wq, wk, wv, wo)
        return x + y
    return f


family("s.explicit_mesh_ulysses_region_psum_scatter_out.dp2xsp4", {"dp": 2, "sp": 4}, (EXPL, EXPL),
       ulysses_explicit, (P("dp", "sp"), P(), P(), P(), P()), P("dp", "sp"), ulysses_ref,
       (R(4, T, D), R(D, HU, E, scale=0.4), R(D, HU, E, scale=0.4), R(D, HU, E, scale=0.4), R(HU, E, D, scale=0.3)),
       bugs=[("a2a-over-dp", ["wrong-collective-group"]), ("wo-rows-at-zero", ["wrong-offset"])],
       note="explicit mesh (AxisType.Explicit), shard_map region with all_to_all and psum_scatter")


# ---------------------------------------------------------------------------
# 11. FSDP over 8 devices: stacked layer weights with their rows sharded,
#     all_gathered per layer inside a lax.scan, the loss's gradient taken
#     through the gathers (whose transpose reduce-scatters), a plain SGD step
#     on the shards, the batch over the same axis.
def fsdp_loss_ref(ws, x, y):
    h = lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)[0]
    return mse(h, y)


def fsdp_step_ref(ws, x, y):
    lv, g = jax.value_and_grad(fsdp_loss_ref)(ws, x, y)
    return ws - 0.5 * g, lv


def fsdp_scan(bug):
    def body(ws, x, y):
        n = lax.axis_size("fsdp")

        def loss(ws):
            def layer(h, w):
                return jnp.tanh(h @ lax.all_gather(w, "fsdp", axis=0, tiled=True)), None
            return mse(lax.scan(layer, x, ws)[0], y)
        lv, g = jax.value_and_grad(loss)(ws)
        if bug == "grad-not-divided":
            pass
        elif bug == "grad-pmean-shards":
            g = pmean(g, "fsdp")
        else:
            g = g / n
        return ws - 0.5 * g, pmean(lv, "fsdp")
    return body


C.smap("s.fsdp_scan_gather_per_layer_grad_reduce_scatter.fsdp8", {"fsdp": 8}, fsdp_scan,
       (P(None, "fsdp"), P("fsdp"), P("fsdp")), (P(None, "fsdp"), P()), fsdp_step_ref,
       (R(L, D, D, scale=0.35), R(16, D), R(16, D, scale=0.5)),
       bugs=[("grad-not-divided", ["wrong-scale"]), ("grad-pmean-shards", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 12. an attention block's training step with the heads over tp and the batch
#     over dp (all manual, check_vma=True so that jax.grad transposes the
#     output psum correctly), bf16 operands with f32 accumulation in the
#     projections; the loss pmean'd over dp inside the differentiated
#     function, so that the gradients of the dp-invariant weights come out
#     averaged (check_vma's implicit psum of the cotangent), an SGD step.
def attn_block(p, x):
    c = lambda a: a.astype(jnp.bfloat16)
    q, k, v = (jnp.einsum("btd,dhe->bthe", c(x), c(p[n]), preferred_element_type=jnp.float32)
               for n in ("wq", "wk", "wv"))
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E)
    o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)
    return jnp.einsum("bqhe,hed->bqd", c(o), c(p["wo"]), preferred_element_type=jnp.float32)


def attn_step_ref(p, x, y):
    lv, g = jax.value_and_grad(lambda p: mse(x + attn_block(p, x), y))(p)
    return jax.tree.map(lambda a, b: a - 0.5 * b, p, g), lv


def attn_step_tp(bug):
    def body(p, x, y):
        def loss(p):
            lv = mse(x + psum(attn_block(p, x), "tp"), y)
            return lv if bug == "loss-not-pmeaned-over-dp" else pmean(lv, "dp")
        lv, g = jax.value_and_grad(loss)(p)
        if bug == "grads-pmean-over-tp":
            g = jax.tree.map(lambda a: pmean(a, "tp"), g)
        if bug == "loss-not-pmeaned-over-dp":
            lv = pmean(lv, "dp")
        return jax.tree.map(lambda a, b: a - 0.5 * b, p, g), lv
    return body


at_p = {"wq": R(D, H, E, scale=0.4), "wk": R(D, H, E, scale=0.4), "wv": R(D, H, E, scale=0.4),
        "wo": R(H, E, D, scale=0.3)}
at_ps = {"wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"), "wo": P("tp")}
C.smap("s.bf16_heads_tp_attention_grad_through_psum_sgd.dp2xtp4", {"dp": 2, "tp": 4}, attn_step_tp,
       (at_ps, P("dp"), P("dp")), (at_ps, P()), attn_step_ref, (at_p, R(4, 8, D), R(4, 8, D, scale=0.5)),
       bugs=[("grads-pmean-over-tp", ["wrong-collective-group"]),
             ("loss-not-pmeaned-over-dp", ["wrong-scale"])], check_vma=True)


# ---------------------------------------------------------------------------
# 13. jax.grad outside a jit-nested shard_map that makes only tp manual (dp
#     left to GSPMD): a Megatron MLP with its bias added after the psum, the
#     loss and an Adam update computed by the partitioner around it.
adam_mt = optax.adam(3e-2)


def mt_mlp(p, x):
    return x + jax.nn.gelu(x @ p["w1"]) @ p["w2"] + p["b2"]


def mt_step_ref(p, st, x, y):
    lv, g = jax.value_and_grad(lambda p: mse(mt_mlp(p, x), y))(p)
    u, st = adam_mt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


def mt_grad_outside(bug):
    def body(p, x):
        part = jax.nn.gelu(x @ p["w1"]) @ p["w2"]
        if bug == "bias-inside-psum":
            return x + psum(part + p["b2"], "tp")
        if bug == "pmean-not-psum":
            return x + pmean(part, "tp") + p["b2"]
        return x + psum(part, "tp") + p["b2"]

    def f(p, st, x, y):
        def loss(p):
            out = jax.shard_map(body, in_specs=({"w1": P(None, "tp"), "w2": P("tp"), "b2": P()}, P()),
                                out_specs=P(), axis_names={"tp"})(p, x)
            return mse(out, y)
        lv, g = jax.value_and_grad(loss)(p)
        u, st = adam_mt.update(g, st, p)
        return optax.apply_updates(p, u), st, lv
    return f


mt_p = {"w1": R(D, F, scale=0.3), "w2": R(F, D, scale=0.3), "b2": R(D, scale=0.1)}
mt_ps = {"w1": P(None, "tp"), "w2": P("tp"), "b2": P()}
mt_st = jax.tree.map(lambda a: (np.abs(a) + 0.01).astype(a.dtype) if a.dtype.kind == "f" else a,
                     np_tree(adam_mt.init(mt_p)))
family("s.grad_outside_partial_manual_tp_megatron_mlp_adam.dp2xtp4", {"dp": 2, "tp": 4}, None, mt_grad_outside,
       (mt_ps, state_specs(mt_st, mt_ps), P("dp"), P("dp")), (mt_ps, state_specs(mt_st, mt_ps), P()), mt_step_ref,
       (mt_p, mt_st, R(B, D), R(B, D, scale=0.5)),
       bugs=[("bias-inside-psum", ["wrong-scale"]), ("pmean-not-psum", ["wrong-collective-op"])],
       note="jax.value_and_grad around jax.shard_map(axis_names={'tp'}) inside jit, dp auto, optax.adam")

# ---------------------------------------------------------------------------
# 14. jax.experimental.custom_partitioning: a vocabulary-parallel
#     cross-entropy op (logits (N, V) with V over tp) whose partition's
#     lower_fn stabilises by a pmax of the row maxima, sums exp by psum and
#     picks the target logit at the shard's vocabulary offset.
def make_cp_xent(bug):
    def xent_core(logits, tgt):
        lse = jax.nn.logsumexp(logits, -1)
        return lse - jnp.take_along_axis(logits, tgt[:, None], -1)[:, 0]

    @custom_partitioning
    def cp_xent(logits, tgt):
        return xent_core(logits, tgt)

    def rows(sh):
        return (tuple(sh.spec) + (None,))[0]

    def infer(mesh, arg_shapes, result_shape):
        return NamedSharding(mesh, P(rows(arg_shapes[0].sharding)))

    def partition(mesh, arg_shapes, result_shape):
        sh = arg_shapes[0].sharding
        spec = tuple(sh.spec) + (None,) * (2 - len(sh.spec))
        ax = spec[1]
        out = NamedSharding(mesh, P(spec[0]))
        tsh = NamedSharding(mesh, P(spec[0]))

        def lower(logits, tgt):
            if ax is None:
                return xent_core(logits, tgt)
            vl = logits.shape[1]
            m = lax.stop_gradient(logits.max(-1))
            if bug != "local-max-only":
                m = lax.pmax(m, ax)
            se = psum(jnp.sum(jnp.exp(logits - m[:, None]), -1), ax)
            off = 0 if bug == "target-offset-zero" else idx(ax) * vl
            loc = tgt - off
            hit = (loc >= 0) & (loc < vl)
            picked = jnp.take_along_axis(logits, jnp.clip(loc, 0, vl - 1)[:, None], -1)[:, 0]
            return jnp.log(se) + m - psum(jnp.where(hit, picked, 0.0), ax)
        return mesh, lower, out, (sh, tsh)

    cp_xent.def_partition(infer_sharding_from_operands=infer, partition=partition, sharding_rule="n v, n -> n")
    return cp_xent


def xent_ref(h, w, tgt):
    logits = h @ w
    return jnp.mean(jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, tgt[:, None], -1)[:, 0])


def cp_xent_family(bug):
    op = make_cp_xent(bug)

    def f(h, w, tgt):
        logits = wsc(h @ w, P("dp", "tp"))
        return jnp.mean(op(logits, tgt))
    return f


family("s.custom_partitioning_vocab_parallel_xent_pmax_psum.dp2xtp4", {"dp": 2, "tp": 4}, None, cp_xent_family,
       (P("dp"), P(None, "tp"), P("dp")), P(), xent_ref,
       (R(16, D), R(D, 32, scale=1.5), I(0, 32, 16)),
       bugs=[("target-offset-zero", ["wrong-offset"]), ("local-max-only", ["missing-all-reduce"])],
       note="jax.experimental.custom_partitioning, pmax / psum / axis_index inside the partition's lower_fn")


# ---------------------------------------------------------------------------
# 15. ZeRO-2 by hand on dp8: gradients of a linear-softmax classifier
#     accumulated over four micro-batches in a fori_loop, reduce-scattered
#     once (psum_scatter over dp, tiled), the SGD update applied to the
#     device's row shard of the weight, the weight all_gathered back.
def zero2_ref(w, x, yoh):
    def loss(w):
        return -jnp.mean(jnp.sum(yoh * jax.nn.log_softmax(x @ w), -1))
    lv, g = jax.value_and_grad(loss)(w)
    return w - 0.5 * g, lv


def zero2(bug):
    def body(w, x, yoh):
        nmb = 4
        xs, ys = x.reshape(nmb, -1, x.shape[-1]), yoh.reshape(nmb, -1, yoh.shape[-1])

        def loss(w, xm, ym):
            return -jnp.mean(jnp.sum(ym * jax.nn.log_softmax(xm @ w), -1))

        def mb(i, c):
            ga, la = c
            lv, g = jax.value_and_grad(loss)(w, xs[i], ys[i])
            return ga + g, la + lv
        ga, la = lax.fori_loop(0, nmb, mb, (jnp.zeros_like(w), jnp.zeros(())))
        if bug != "accum-not-averaged":
            ga, la = ga / nmb, la / nmb
        gs = lax.psum_scatter(ga, "dp", scatter_dimension=0, tiled=True) / lax.axis_size("dp")
        rows = gs.shape[0]
        off = 0 if bug == "shard-at-offset-zero" else idx("dp") * rows
        ws = lax.dynamic_slice_in_dim(w, off, rows, 0) - 0.5 * gs
        return lax.all_gather(ws, "dp", axis=0, tiled=True), pmean(la, "dp")
    return body


C.smap("s.zero2_fori_microbatch_accum_reduce_scatter_update_gather.dp8", {"dp": 8}, zero2,
       (P(), P("dp"), P("dp")), (P(), P()), zero2_ref,
       (R(D, 8, scale=0.3), R(64, D), np.eye(8, dtype=np.float32)[I(0, 8, 64)]),
       bugs=[("accum-not-averaged", ["wrong-scale"]), ("shard-at-offset-zero", ["wrong-offset"])])


# ===========================================================================
# GSPMD pairs (correct)
# ---------------------------------------------------------------------------
# 16. a stacked-layer MLP in lax.scan with with_sharding_constraint on the
#     carry and the hidden inside the body, value_and_grad, optax.adamw.
adamw = optax.adamw(1e-2, weight_decay=0.1)


def scan_wsc_loss(p, x, y):
    def layer(h, w):
        u = wsc(jax.nn.gelu(h @ w["up"]), P("dp", "tp"))
        return wsc(h + u @ w["down"], P("dp", None)), None
    h = lax.scan(layer, x, p)[0]
    return mse(h, y)


def scan_wsc_step(p, st, x, y):
    lv, g = jax.value_and_grad(scan_wsc_loss)(p, x, y)
    u, st = adamw.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


sw_p = {"up": R(L, D, F, scale=0.25), "down": R(L, F, D, scale=0.2)}
sw_ps = {"up": P(None, None, "tp"), "down": P(None, "tp")}
sw_st = np_tree(adamw.init(sw_p))
gspmd_x("g.scan_wsc_carry_and_hidden_grad_adamw.dp2xtp4", {"dp": 2, "tp": 4}, None,
        (sw_ps, state_specs(sw_st, sw_ps), P("dp"), P("dp")), (sw_ps, state_specs(sw_st, sw_ps), P()),
        scan_wsc_step, (sw_p, sw_st, R(B, D), R(B, D, scale=0.5)))


# ---------------------------------------------------------------------------
# 17. power iteration in lax.fori_loop on a matrix sharded over both axes,
#     the iterate constrained to the axis tuple ('x', 'y') every step.
def power_iter(a, v0):
    def step(_, v):
        w = wsc(a @ v, P(("x", "y")))
        return w / jnp.linalg.norm(w)
    v = lax.fori_loop(0, 12, step, v0)
    return v, v @ (a @ v)


sym = R(32, 32, scale=0.3)
gspmd_x("g.fori_power_iteration_wsc_axis_tuple.x4y2", {"x": 4, "y": 2}, None, (P("x", "y"), P()), (P(("x", "y")), P()),
        power_iter, (sym + sym.T + np.diag(np.linspace(0, 3, 32)).astype(np.float32), R(32)))


# ---------------------------------------------------------------------------
# 18. uneven shapes padded by GSPMD: a batch of 10 over dp4 and a hidden of
#     15 over tp2 by with_sharding_constraint (jit arguments must divide
#     evenly, so the arguments arrive replicated), LayerNorm + MLP.
def uneven_mlp(x, g, w1, w2):
    x = wsc(x, P("dp"))
    h = jax.nn.gelu(layer_norm(x, g, 0.0) @ w1)
    return wsc(h, P("dp", "tp")) @ w2


gspmd_x("g.uneven_batch10_hidden15_padded.dp4xtp2", {"dp": 4, "tp": 2}, None, (P(), P(), P(), P()),
        P(), uneven_mlp, (R(10, 12), 1.0 + R(12, scale=0.1), R(12, 15, scale=0.3), R(15, 6, scale=0.3)))


# ---------------------------------------------------------------------------
# 19. jax.vmap with spmd_axis_name: four independently trained linear
#     classifiers (members over the mesh axis ens) each taking an SGD step on
#     the shared batch over dp.
def member_step(w, x, yoh):
    def loss(w):
        return -jnp.mean(jnp.sum(yoh * jax.nn.log_softmax(x @ w), -1))
    lv, g = jax.value_and_grad(loss)(w)
    return w - 0.5 * g, lv


def ensemble_step(ws, x, yoh):
    return jax.vmap(member_step, in_axes=(0, None, None), spmd_axis_name="ens")(ws, x, yoh)


gspmd_x("g.vmap_spmd_axis_name_ensemble_sgd.ens4xdp2", {"ens": 4, "dp": 2}, None, (P("ens"), P("dp"), P("dp")),
        (P("ens"), P("ens")), ensemble_step,
        (R(4, D, 6, scale=0.3), R(16, D), np.eye(6, dtype=np.float32)[I(0, 6, 16)]))


# ---------------------------------------------------------------------------
# 20. a small conv net, the batch over the axis tuple ('dp', 'sp') and the
#     output channels over tp, global average pool and a dense head.
def convnet(x, k1, k2, wd):
    dn = ("NHWC", "HWIO", "NHWC")
    h = jax.nn.relu(lax.conv_general_dilated(x, k1, (1, 1), "SAME", dimension_numbers=dn))
    h = wsc(h, P(("dp", "sp"), None, None, "tp"))
    h = jax.nn.relu(lax.conv_general_dilated(h, k2, (2, 2), "SAME", dimension_numbers=dn))
    return h.mean((1, 2)) @ wd


gspmd_x("g.convnet_batch_axis_tuple_channels_tp.dp2sp2tp2", {"dp": 2, "sp": 2, "tp": 2}, None,
        (P(("dp", "sp")), P(None, None, None, "tp"), P(None, None, "tp"), P()), P(("dp", "sp")), convnet,
        (R(8, 8, 8, 3), R(3, 3, 3, 8, scale=0.3), R(3, 3, 8, 8, scale=0.2), R(8, 5, scale=0.4)))


# ---------------------------------------------------------------------------
# 21. an attention block with jax.device_put to a new sharding between the
#     stages inside jit: the heads over tp for attention, then the sequence
#     over tp for the LayerNorm and MLP.
def attn_mlp_stages(x, wq, wk, wv, wo, g, w1, w2):
    m = jax.sharding.get_abstract_mesh()
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    q = jax.device_put(q, NamedSharding(m, P("dp", None, "tp")))
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E)
    o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)
    y = x + jnp.einsum("bqhe,hed->bqd", o, wo)
    y = jax.device_put(y, NamedSharding(m, P("dp", "tp")))
    return y + jax.nn.gelu(layer_norm(y, g, 0.0) @ w1) @ w2


gspmd_x("g.device_put_between_attention_and_mlp_stages.dp2xtp4", {"dp": 2, "tp": 4}, None,
        (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P(), P(), P()), P("dp", "tp"),
        attn_mlp_stages,
        (R(4, T, D), R(D, H, E, scale=0.4), R(D, H, E, scale=0.4), R(D, H, E, scale=0.4), R(H, E, D, scale=0.3),
         1.0 + R(D, scale=0.1), R(D, F, scale=0.3), R(F, D, scale=0.3)),
        note="jax.device_put(x, NamedSharding) inside jit")


# ---------------------------------------------------------------------------
# 22. explicit axes (jax.make_mesh(..., axis_types=Explicit)): LayerNorm,
#     an einsum with out_sharding to the hidden over tp, reshard of the
#     result to the sequence over tp before a second LayerNorm.
def explicit_ln_mlp(x, g, w1, w2):
    h = layer_norm(x, g, 0.0)
    u = jax.nn.gelu(jnp.einsum("btd,df->btf", h, w1, out_sharding=P("dp", None, "tp")))
    y = x + jnp.einsum("btf,fd->btd", u, w2, out_sharding=P("dp"))
    y = reshard(y, P("dp", "tp"))
    return layer_norm(y, g, 0.0)


gspmd_x("g.explicit_axes_einsum_out_sharding_reshard_seq.dp2xtp4", {"dp": 2, "tp": 4}, (EXPL, EXPL),
        (P("dp"), P(), P(None, "tp"), P("tp")), P("dp", "tp"), explicit_ln_mlp,
        (R(4, T, D), 1.0 + R(D, scale=0.1), R(D, F, scale=0.3), R(F, D, scale=0.3)),
        note="explicit mesh (AxisType.Explicit)")


# ---------------------------------------------------------------------------
# 23. explicit axes, a softmax-regression training step with the batch over
#     the axis tuple ('dp', 'sp'), optax.sgd with Nesterov momentum.
nest = optax.sgd(0.2, momentum=0.8, nesterov=True)


def explicit_clf_step(p, st, x, yoh):
    def loss(p):
        logits = x @ p["w"] + p["b"]
        return -jnp.mean(jnp.sum(yoh * jax.nn.log_softmax(logits), -1))
    lv, g = jax.value_and_grad(loss)(p)
    u, st = nest.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


ec_p = {"w": R(D, 6, scale=0.3), "b": R(6, scale=0.1)}
ec_st = jax.tree.map(lambda a: (a + 0.02).astype(a.dtype), np_tree(nest.init(ec_p)))
ec_ps = {"w": P(), "b": P()}
gspmd_x("g.explicit_axes_tuple_batch_nesterov_sgd.dp2sp2tp2", {"dp": 2, "sp": 2, "tp": 2}, (EXPL,) * 3,
        (ec_ps, state_specs(ec_st, ec_ps), P(("dp", "sp")), P(("dp", "sp"))), (ec_ps, state_specs(ec_st, ec_ps), P()),
        explicit_clf_step, (ec_p, ec_st, R(16, D), np.eye(6, dtype=np.float32)[I(0, 6, 16)]),
        note="explicit mesh (AxisType.Explicit)")


# ---------------------------------------------------------------------------
# 24. uneven sequence: 10 tokens over sp4, 6 heads over tp2, attention with
#     the queries and scores constrained to the uneven sequence sharding,
#     a padding mask from the lengths.
def uneven_attn(q, k, v, lens):
    q = wsc(q, P(None, "sp", "tp"))
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    s = wsc(s, P(None, "tp", "sp"))
    keep = jnp.arange(k.shape[1])[None, :] < lens[:, None]
    s = jnp.where(keep[:, None, None, :], s, -1e9)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


gspmd_x("g.uneven_seq10_heads6_attention_len_mask.sp4xtp2", {"sp": 4, "tp": 2}, None,
        (P(None, None, "tp"), P(None, None, "tp"), P(None, None, "tp"), P()), P(None, None, "tp"), uneven_attn,
        (R(2, 10, 6, E), R(2, 10, 6, E), R(2, 10, 6, E), np.array([7, 10], np.int32)))


# ---------------------------------------------------------------------------
# 25. an Elman RNN in lax.fori_loop with the hidden state constrained every
#     step, its loss's gradient and an optax.adam step.
adam = optax.adam(1e-2)


def rnn_loss(p, xs, y):
    def step(t, h):
        return wsc(jnp.tanh(xs[:, t] @ p["wx"] + h @ p["wh"]), P("dp", "tp"))
    h = lax.fori_loop(0, xs.shape[1], step, jnp.zeros((xs.shape[0], p["wh"].shape[0])))
    return mse(h @ p["wo"], y)


def rnn_step(p, st, xs, y):
    lv, g = jax.value_and_grad(rnn_loss)(p, xs, y)
    u, st = adam.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


rn_p = {"wx": R(8, D, scale=0.3), "wh": R(D, D, scale=0.2), "wo": R(D, 4, scale=0.3)}
rn_ps = {"wx": P(None, "tp"), "wh": P(None, "tp"), "wo": P("tp")}
rn_st = np_tree(adam.init(rn_p))
gspmd_x("g.fori_rnn_hidden_wsc_grad_adam.dp4xtp2", {"dp": 4, "tp": 2}, None,
        (rn_ps, state_specs(rn_st, rn_ps), P("dp"), P("dp")), (rn_ps, state_specs(rn_st, rn_ps), P()),
        rnn_step, (rn_p, rn_st, R(8, 6, 8), R(8, 4, scale=0.5)))

# ---------------------------------------------------------------------------
# 26. the batch over the axis tuple ('tp', 'dp') (opposite to the mesh
#     order), LayerNorm + MLP, the output's features over ('dp', 'tp').
def tuple_rev_mlp(x, g, w1, w2):
    h = jax.nn.relu(layer_norm(x, g, 0.0) @ w1)
    return wsc(h, P(("tp", "dp"), None)) @ w2


gspmd_x("g.batch_over_reversed_axis_tuple_out_features_tuple.dp2xtp4", {"dp": 2, "tp": 4}, None,
        (P(("tp", "dp")), P(), P(), P()), P(None, ("dp", "tp")), tuple_rev_mlp,
        (R(16, D), 1.0 + R(D, scale=0.1), R(D, F, scale=0.3), R(F, 16, scale=0.3)))


# ---------------------------------------------------------------------------
# 27. Newton-Schulz orthogonalisation in a lax.while_loop with a counter,
#     the iterate constrained to rows over x and columns over y each step.
def newton_schulz(g):
    x = g / (jnp.linalg.norm(g) + 1e-7)

    def cond(c):
        return c[0] < 5

    def body(c):
        i, x = c
        a = x @ x.T
        x = wsc(1.5 * x - 0.5 * a @ x, P("x", "y"))
        return i + 1, x
    return lax.while_loop(cond, body, (0, x))[1]


gspmd_x("g.while_loop_newton_schulz_wsc_each_step.x2y4", {"x": 2, "y": 4}, None, (P("x", "y"),), P("x", "y"),
        newton_schulz, (R(16, 32),))

# ---------------------------------------------------------------------------
# 28. explicit axes: a lax.scan over stacked layers whose body reshards the
#     carry between the batch layout and the batch x feature layout, under
#     jax.value_and_grad, plain SGD.
def explicit_scan_loss(ws, x, y):
    def layer(h, w):
        u = jnp.tanh(jnp.einsum("bd,de->be", h, w, out_sharding=P("dp", "tp")))
        return reshard(u, P("dp", None)), None
    return mse(lax.scan(layer, x, ws)[0], y)


def explicit_scan_step(ws, x, y):
    lv, g = jax.value_and_grad(explicit_scan_loss)(ws, x, y)
    return ws - 0.3 * g, lv


gspmd_x("g.explicit_axes_scan_reshard_carry_grad_sgd.dp2xtp4", {"dp": 2, "tp": 4}, (EXPL, EXPL),
        (P(None, None, "tp"), P("dp"), P("dp")), (P(None, None, "tp"), P()), explicit_scan_step,
        (R(L, D, D, scale=0.35), R(B, D), R(B, D, scale=0.5)), note="explicit mesh (AxisType.Explicit)")


# ---------------------------------------------------------------------------
# 29. a training step whose out_shardings move the parameters to a new
#     layout (replicated in, FSDP rows over the tuple ('dp', 'tp') out) and
#     an optax.rmsprop state that follows them.
rmsp = optax.rmsprop(1e-2, decay=0.9)


def relayout_step(p, st, x, y):
    lv, g = jax.value_and_grad(lambda p: mse(jax.nn.softplus(x @ p["a"]) @ p["b"], y))(p)
    u, st = rmsp.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


rl_p = {"a": R(D, F, scale=0.3), "b": R(F, D, scale=0.3)}
rl_st = np_tree(rmsp.init(rl_p))
rl_in = {"a": P(), "b": P()}
rl_out = {"a": P(("dp", "tp")), "b": P(("dp", "tp"))}
gspmd_x("g.out_shardings_relayout_params_rmsprop.dp2xtp4", {"dp": 2, "tp": 4}, None,
        (rl_in, state_specs(rl_st, rl_in), P("dp"), P("dp")), (rl_out, state_specs(rl_st, rl_out), P()),
        relayout_step, (rl_p, rl_st, R(B, D), R(B, D, scale=0.5)))

# ---------------------------------------------------------------------------
C.finish()
