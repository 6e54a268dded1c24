"""samples/fresh9: a ninth batch of programs as a user writes them, on the
theme of the current JAX's sharding APIs and parallelism schedules, none of
them an idiom of samples/fresh .. fresh8, probe, train or wild: a GPipe
schedule of micro-batches over pipeline stages (ppermute in a fori_loop,
jax.grad through it) inside a jax.shard_map that makes only the pp axis
manual (dp left to the partitioner), a circular (interleaved) pipeline with
two layers per stage and the ring closed, a dropless MoE dispatch by
sorting tokens per expert with group sizes and all_to_all there and back,
ZeRO-3 over a two-axis data mesh (all_gather and psum_scatter tiled over the
tuple ('dp', 'fsdp')), split-KV decoding attention whose softmax is
stabilised by a pmax across the key shards, gradient accumulation in a
fori_loop with the weights and the accumulator lax.pcast to varying under
check_vma=True, optax.MultiSteps in a data-parallel shard_map, causal
attention over a sequence gathered within node groups (all_gather with
axis_index_groups), Muon with the momentum all-gathered for the
Newton-Schulz iteration on FSDP row shards, manual data parallelism (a
shard_map over dp only) over automatic tensor parallelism, a shard_map over
tp inside an explicit-mode program, a cumulative sum over rows sharded over
the tuple ('tp', 'dp') (opposite to the mesh order), Ulysses attention with
all_to_all over a tuple of axes, ZeRO-3, Ulysses and an all_gather again
over tuples listed opposite to the mesh order; under GSPMD an Adam step on
a mesh whose devices are not in iota order, the same pipeline as a vmap over
stages with jnp.roll as the shift, and a circular one, an explicit-sharding-
mode (AxisType.Explicit) transformer block step with einsum out_sharding,
jax.typeof and reshard and optax.chain(clip_by_global_norm, masked AdamW),
explicit-mode grouped-query attention, an explicit-mode row-parallel matmul
left unreduced in its type (P(..., unreduced={'tp'})) then resharded,
optax.contrib.muon on a dp x fsdp x tp mesh, optax.contrib.
schedule_free_adamw with its eval parameters, optax.MultiSteps over
micro-batches in a lax.scan, clip + masked weight decay + Adam on a 4-axis
mesh, ademamix over a vocabulary-sharded embedding, rows over a reversed
axis tuple, and a dm-haiku transformer LM step (requirements-fresh9.txt:
dm-haiku beside jax 0.12, not changing it).
Dropped: jax.lax.ragged_all_to_all (it lowers, but XLA:CPU cannot compile
it: "HLO opcode `ragged-all-to-all` is not supported by XLA:CPU
ThunkEmitter"), so the MoE family uses padded per-expert slots and
all_to_all; jax.lax.pvary and all_gather_invariant (not in jax 0.12: pcast
instead); a bf16 pmean inside a shard_map over dp only (XLA:CPU aborts).
Each shard_map family has the bug variants a careless parallelisation makes.
Exported with scalify_jax.export_pair (the partial-manual shard_map pairs and
the explicit-mode GSPMD pairs by export_partial below, from the same pieces,
so that the arguments' types carry their shardings); every pair is also run
by JAX on seeded inputs and its manifest entry records the largest
difference from the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh9.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import os
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh9.sh)
from fresh_lib import Corpus, seeded, shardings, put, bug_lines, mse, np_tree, state_specs  # noqa: E402
from scalify_jax._export import (make_mesh, mesh_axes, abstract, leaf_names, output_names,  # noqa: E402
                                 broadcast_specs, spec_view, relations_doc, _json_lines, _write,
                                 _merge_manifest, before_partitioning, after_partitioning, versions)

SCRIPT = "samples/gen/fresh9.py"
C = Corpus("samples/fresh9", SCRIPT, "samples/gen/run_fresh9.sh", sys.argv[1:])
rng, R, I = seeded(9191)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index


def typed(m, abs_args, in_sh):
    """The abstract arguments with their shardings: on an explicit-mode mesh
    the sharding is part of the type the program is traced with."""
    return jax.tree.map(lambda s, a: jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(m, s)), a),
        tuple(in_sh), abs_args, is_leaf=lambda x: x is None or isinstance(x, P))


def export_partial(name, mesh, fn, dist, args, in_sh, out_sh, expected, gspmd=False):
    """A pair whose distributed program is jax.jit(dist) with in / out
    shardings, dist calling jax.shard_map over some mesh axes only; the
    baseline is fn on one device. The relations file is written from the
    jit's shardings (the global views), as export_pair does for shard_map.
    gspmd: an explicit-mode GSPMD pair instead (fn is dist, traced with the
    shardings in the argument types; the baseline is that module before
    partitioning, relations "auto"), which export_pair cannot make (its
    abstract arguments carry no sharding)."""
    m = make_mesh(mesh)
    axes = mesh_axes(m)
    args = tuple(args)
    abs_args = abstract(args)
    if gspmd:
        lo = jax.jit(fn, in_shardings=shardings(m, tuple(in_sh)),
                     out_shardings=shardings(m, out_sh)).lower(*typed(m, abs_args, in_sh))
        entry = {"name": name, "mesh": axes, "kind": "gspmd"}
        for side, (text, pb) in (("baseline", before_partitioning(lo)), ("distributed", after_partitioning(lo))):
            stem = name + (".baseline" if side == "baseline" else ".dist")
            _write(os.path.join(C.out, stem + ".hlo"), text)
            _write(os.path.join(C.out, stem + ".hlo.pb"), pb)
            entry[side] = {"hlo": stem + ".hlo", "pb": stem + ".hlo.pb"}
        entry.update(relations="auto", expected=expected, generator=dict(versions(), script="scalify_jax"))
        _merge_manifest(C.out, entry)
        return
    shapes = [a.shape for a in jax.tree.leaves(abs_args)]
    in_views = [spec_view(s, shp, axes) for s, shp in zip(broadcast_specs(tuple(in_sh), abs_args, "in"), shapes)]
    out_tree = jax.eval_shape(fn, *abs_args)
    out_views = [spec_view(s, o.shape, axes)
                 for s, o in zip(broadcast_specs(out_sh, out_tree, "out"), jax.tree.leaves(out_tree))]
    base_lo = jax.jit(fn, keep_unused=True).lower(*abs_args)
    dist_lo = jax.jit(dist, keep_unused=True, in_shardings=shardings(m, tuple(in_sh)),
                      out_shardings=shardings(m, out_sh)).lower(*typed(m, abs_args, in_sh))
    out = C.out
    rel = name + ".relations.json"
    _write(os.path.join(out, rel), _json_lines(relations_doc(axes, leaf_names(fn, args), in_views,
                                                             output_names(out_tree), out_views)))
    entry = {"name": name, "mesh": axes, "kind": "shard_map"}
    for side, (text, pb) in (("baseline", before_partitioning(base_lo)), ("distributed", after_partitioning(dist_lo))):
        stem = name + (".baseline" if side == "baseline" else ".dist")
        _write(os.path.join(out, stem + ".hlo"), text)
        _write(os.path.join(out, stem + ".hlo.pb"), pb)
        entry[side] = {"hlo": stem + ".hlo", "pb": stem + ".hlo.pb"}
    entry["relations"] = rel
    entry["expected"] = expected
    entry["generator"] = dict(versions(), script="scalify_jax")
    _merge_manifest(out, entry)


def partial_smap(family, mesh, make, in_sh, out_sh, fn, args, bugs=(), note=None):
    """A family whose distributed program is make(bug)(mesh) -> a function
    for jax.jit (a shard_map over some axes inside); in_sh / out_sh the
    jit's shardings. make(None) is the correct program."""
    for bug, kinds in [(None, None)] + list(bugs):
        name = family + (".bug." + bug if bug else "")
        if not C.wanted(name):
            continue
        print("==", name, flush=True)
        m = make_mesh(mesh)
        dist = make(bug)(m)
        export_partial(name, mesh, fn, dist, args, in_sh, out_sh, "mismatch" if bug else "verified")
        d = jax.jit(dist, in_shardings=shardings(m, tuple(in_sh)), out_shardings=shardings(m, out_sh))
        C.record(name, fn, args, lambda: d(*put(m, args, in_sh)), note)
        if bug:
            C.extra[name]["bug"] = {"id": bug, "kinds": kinds, "locations": bug_lines(make, bug, SCRIPT)}


def gspmd_explicit(name, mesh, in_sh, out_sh, fn, args, note, ref_fn=None):
    """C.gspmd for an explicit-mode mesh (run inside jax.set_mesh(mesh));
    ref_fn: the same math for the single-device run of the numerics when fn
    itself needs sharded arguments."""
    if not C.wanted(name):
        return
    print("==", name, flush=True)
    export_partial(name, mesh, fn, fn, args, in_sh, out_sh, "verified", gspmd=True)
    j = jax.jit(fn, in_shardings=shardings(mesh, tuple(in_sh)), out_shardings=shardings(mesh, out_sh))
    C.record(name, ref_fn or fn, args, lambda: j(*put(mesh, args, in_sh)), note)


# ---------------------------------------------------------------------------
# 1. a GPipe schedule: PP_S stages of one tanh layer each, PP_M micro-
#    batches; tick t of PP_M + PP_S - 1, stage s works on micro-batch t - s,
#    stage 0 reads the input, the others what the previous stage sent
#    (ppermute), the last stage collects the outputs. The loss is psum'd from
#    the last stage; value_and_grad outside the shard_map, which makes only
#    'pp' manual: the batch stays sharded over dp by the partitioner.
PP_S, PP_M, PP_MB, PP_D = 4, 4, 4, 16


def seq_layers_loss(ws, bs, x, y):
    h = x
    for s in range(PP_S):
        h = jnp.tanh(h @ ws[s] + bs[s])
    return mse(h, y)


def seq_layers_step(ws, bs, x, y):
    return jax.value_and_grad(seq_layers_loss, (0, 1))(ws, bs, x, y)


def gpipe_pp(bug):
    fwd = [(i, i + 1) for i in range(PP_S - 1)]
    if bug == "perm-backward":
        fwd = [(i + 1, i) for i in range(PP_S - 1)]

    def stage(w, b, xs, ys):
        s = idx("pp")

        def tick(t, carry):
            state, outs = carry
            inp = jnp.where(s == 0, xs[jnp.minimum(t, PP_M - 1)], state)
            out = jnp.tanh(inp @ w[0] + b[0])
            k = t - (PP_S if bug == "collect-off-by-one" else PP_S - 1)
            put_k = outs.at[jnp.clip(k, 0, PP_M - 1)].set(out)
            outs = jnp.where((s == PP_S - 1) & (k >= 0), put_k, outs)
            return lax.ppermute(out, "pp", fwd), outs
        _, outs = lax.fori_loop(0, PP_M + PP_S - 1, tick,
                                (jnp.zeros_like(xs[0]), jnp.zeros_like(xs)))
        part = jnp.where(s == PP_S - 1, jnp.sum(jnp.square(outs - ys)), 0.0)
        if bug == "loss-no-psum":
            return part / ys.size
        return psum(part, "pp") / ys.size

    def make(m):
        def loss(ws, bs, x, y):
            xs, ys = x.reshape(PP_M, PP_MB, PP_D), y.reshape(PP_M, PP_MB, PP_D)
            return jax.shard_map(stage, mesh=m, in_specs=(P("pp"), P("pp"), P(), P()), out_specs=P(),
                                 axis_names={"pp"}, check_vma=False)(ws, bs, xs, ys)
        return lambda ws, bs, x, y: jax.value_and_grad(loss, (0, 1))(ws, bs, x, y)
    return make


pp_x = R(PP_M * PP_MB, PP_D)
partial_smap("s.gpipe_ticks_grad_pp_manual.dp2xpp4", {"dp": 2, "pp": 4}, gpipe_pp,
             (P("pp"), P("pp"), P("dp"), P("dp")), (P(), (P("pp"), P("pp"))), seq_layers_step,
             (R(PP_S, PP_D, PP_D, scale=0.4), R(PP_S, PP_D, scale=0.1), pp_x, np.tanh(pp_x[:, ::-1]) * 0.5),
             bugs=[("perm-backward", ["wrong-collective-group"]), ("collect-off-by-one", ["wrong-shard-dim"]),
                   ("loss-no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 2. a circular (interleaved) pipeline: CI_R * CI_S layers, layer r*CI_S + s
#    on stage s (weights [CI_R, CI_S, D, D], stage dim over pp), CI_M = CI_S
#    micro-batches; at tick t stage s runs micro-batch (t - s) % CI_S at
#    repeat (t - s) // CI_S, the last stage hands its output back to stage 0
#    for the next repeat (the ring is closed). The loss and the gradients of
#    each stage's layers are taken in the per-device program.
CI_S, CI_R, CI_MB, CI_D = 4, 2, 2, 8
CI_M = CI_S


def circ_seq_step(ws, x, y):
    def loss(ws):
        h = x
        for r in range(CI_R):
            for s in range(CI_S):
                h = jnp.tanh(h @ ws[r, s])
        return jnp.sum(jnp.square(h - y)) / y.size
    return jax.value_and_grad(loss)(ws)


def circular_pp(bug):
    ring = [(i, (i + 1) % CI_S) for i in range(CI_S)]
    if bug == "ring-not-closed":
        ring = [(i, i + 1) for i in range(CI_S - 1)]

    def f(ws, x, y):
        s = idx("pp")
        xs, ys = x.reshape(CI_M, CI_MB, CI_D), y.reshape(CI_M, CI_MB, CI_D)

        def local_loss(ws):
            def tick(t, carry):
                state, outs = carry
                u = t - s
                r, mb = jnp.clip(u // CI_S, 0, CI_R - 1), jnp.mod(u, CI_S)
                if bug == "microbatch-from-tick":
                    mb = jnp.mod(t, CI_S)
                if bug == "repeat-slot-reversed":
                    r = CI_R - 1 - r
                inp = jnp.where((s == 0) & (u < CI_S), xs[mb], state)
                out = jnp.tanh(inp @ ws[r, 0])
                done = (s == CI_S - 1) & (u >= (CI_R - 1) * CI_S) & (u < CI_R * CI_S)
                outs = jnp.where(done, outs.at[mb].set(out), outs)
                return lax.ppermute(out, "pp", ring), outs
            _, outs = lax.fori_loop(0, CI_M + CI_R * CI_S - 1, tick, (jnp.zeros_like(xs[0]), jnp.zeros_like(xs)))
            return jnp.where(s == CI_S - 1, jnp.sum(jnp.square(outs - ys)), 0.0) / ys.size
        lv, g = jax.value_and_grad(local_loss)(ws)
        return psum(lv, "pp"), g
    return f


ci_x = R(CI_M * CI_MB, CI_D)
C.smap("s.circular_pipeline_2rep.pp4", {"pp": CI_S}, circular_pp, (P(None, "pp"), P(), P()), (P(), P(None, "pp")),
       circ_seq_step, (R(CI_R, CI_S, CI_D, CI_D, scale=0.5), ci_x, 0.5 * np.sin(ci_x)),
       bugs=[("ring-not-closed", ["wrong-collective-group"]), ("repeat-slot-reversed", ["wrong-shard-dim"]),
             ("microbatch-from-tick", ["wrong-shard-dim"])])

# ---------------------------------------------------------------------------
# 3. a GSPMD pipeline as libraries write it without shard_map: the stage
#    state [S, mb, D] has its stage dim over pp, every tick all stages run at
#    once (vmap over the stacked stage weights), the shift to the next stage
#    is jnp.roll over the stage dim, stage 0 takes the next micro-batch; the
#    loss and its gradients through lax.scan.
def gpipe_roll_step(ws, bs, x, y):
    m = make_mesh({"dp": 2, "pp": 4})

    def loss(ws, bs):
        xs = x.reshape(PP_M, PP_MB, PP_D)

        def tick(carry, t):
            state, outs = carry
            state = state.at[0].set(xs[jnp.minimum(t, PP_M - 1)])
            state = lax.with_sharding_constraint(state, NamedSharding(m, P("pp")))
            out = jax.vmap(lambda w, b, h: jnp.tanh(h @ w + b))(ws, bs, state)
            k = t - (PP_S - 1)
            outs = jnp.where(k >= 0, outs.at[jnp.clip(k, 0, PP_M - 1)].set(out[PP_S - 1]), outs)
            return (jnp.roll(out, 1, axis=0), outs), None
        (_, outs), _ = lax.scan(tick, (jnp.zeros((PP_S, PP_MB, PP_D)), jnp.zeros_like(xs)),
                                jnp.arange(PP_M + PP_S - 1))
        return mse(outs.reshape(-1, PP_D), y)
    return jax.value_and_grad(loss, (0, 1))(ws, bs)


C.gspmd("g.gpipe_vmap_roll_grad.dp2xpp4", {"dp": 2, "pp": 4}, (P("pp"), P("pp"), P("dp"), P("dp")),
        (P(), (P("pp"), P("pp"))), gpipe_roll_step,
        (R(PP_S, PP_D, PP_D, scale=0.4), R(PP_S, PP_D, scale=0.1), pp_x, np.cos(pp_x) * 0.5))

# ---------------------------------------------------------------------------
# 4. a dropless top-1 MoE layer, one expert per device of ep: each device
#    sorts its tokens by expert (argsort), counts them per expert (group
#    sizes), writes them into per-expert slots of a send buffer [E, T_local,
#    D] at their rank within the group, all_to_all, the expert MLP on the
#    received rows, all_to_all back, unsorts (inverse permutation) and
#    weights by the router's probability.
MO_T, MO_D, MO_H, MO_E = 32, 8, 16, 4


def moe_dense(x, wr, w1, w2):
    p = jax.nn.softmax(x @ wr, -1)
    e = jnp.argmax(p, -1)
    gate = jnp.max(p, -1)
    allout = jnp.einsum("teh,ehd->ted", jax.nn.relu(jnp.einsum("td,edh->teh", x, w1)), w2)
    return gate[:, None] * jnp.take_along_axis(allout, e[:, None, None], 1)[:, 0]


def moe_sorted_ep(bug):
    def f(x, wr, w1, w2):
        tl = x.shape[0]
        p = jax.nn.softmax(x @ wr, -1)
        e = jnp.argmax(p, -1)
        gate = jnp.max(p, -1)
        order = jnp.argsort(e, stable=True)
        es = e[order]
        sizes = jnp.bincount(e, length=MO_E)
        start = jnp.cumsum(sizes) - sizes
        rank = jnp.arange(tl) - (start[e] if bug == "rank-unsorted-offsets" else start[es])
        send = jnp.zeros((MO_E, tl, MO_D)).at[es, rank].set(x[order], mode="drop")
        recv = lax.all_to_all(send, "ep", 0, 0)  # [source device, tl, D]
        y = jax.nn.relu(recv @ w1[0]) @ w2[0]
        back = y if bug == "no-return-all-to-all" else lax.all_to_all(y, "ep", 0, 0)  # [expert, tl, D]
        ys = back.at[es, rank].get(mode="fill", fill_value=0.0)
        if bug == "unsort-by-order":
            y_tok = ys[order]
        else:
            y_tok = ys[jnp.argsort(order)]
        return gate[:, None] * y_tok
    return f


C.smap("s.moe_sorted_groups_a2a.ep4", {"ep": MO_E}, moe_sorted_ep, (P("ep"), P(), P("ep"), P("ep")), P("ep"),
       moe_dense, (R(MO_T, MO_D), R(MO_D, MO_E), R(MO_E, MO_D, MO_H, scale=0.4), R(MO_E, MO_H, MO_D, scale=0.4)),
       bugs=[("rank-unsorted-offsets", ["wrong-shard-dim"]), ("unsort-by-order", ["wrong-shard-dim"]),
             ("no-return-all-to-all", ["wrong-shard-dim"])])

# ---------------------------------------------------------------------------
# 5. ZeRO-3 over a two-axis data mesh: the rows of both weights and the batch
#    sharded over the tuple ('dp', 'fsdp') (8 shards); each device all-
#    gathers the weights over the tuple, takes the gradient of its batch
#    shard, psum_scatter's it over the tuple (tiled) and applies SGD to its
#    own rows. Outputs: the new weight shards and the mean loss.
Z3_B, Z3_D, Z3_H, Z3_LR = 32, 16, 32, 0.2
DF = ("dp", "fsdp")


def z3_loss(w1, w2, x, y):
    return jnp.sum(jnp.square(jnp.tanh(x @ w1) @ w2 - y))


def z3_step(w1, w2, x, y):
    lv, (g1, g2) = jax.value_and_grad(z3_loss, (0, 1))(w1, w2, x, y)
    return w1 - Z3_LR * g1 / Z3_B, w2 - Z3_LR * g2 / Z3_B, lv / Z3_B


def zero3_2axes(bug):
    def f(w1, w2, x, y):
        f1 = lax.all_gather(w1, DF, axis=0, tiled=True)
        f2 = lax.all_gather(w2, DF, axis=0, tiled=True)
        lv, (g1, g2) = jax.value_and_grad(z3_loss, (0, 1))(f1, f2, x, y)
        sc = ("fsdp", "dp") if bug == "scatter-axes-reversed" else DF
        g1 = lax.psum_scatter(g1, sc, scatter_dimension=0, tiled=True)
        g2 = lax.psum_scatter(g2, DF, scatter_dimension=0, tiled=True)
        n = x.shape[0] if bug == "grad-local-batch-mean" else Z3_B
        lv = psum(lv, "fsdp") if bug == "loss-psum-one-axis" else psum(lv, DF)
        return w1 - Z3_LR * g1 / n, w2 - Z3_LR * g2 / n, lv / Z3_B
    return f


C.smap("s.zero3_tuple_axes_sgd.dp2xfsdp4", {"dp": 2, "fsdp": 4}, zero3_2axes, (P(DF), P(DF), P(DF), P(DF)),
       (P(DF), P(DF), P()), z3_step,
       (R(Z3_D, Z3_H, scale=0.3), R(Z3_H, Z3_D, scale=0.3), R(Z3_B, Z3_D), R(Z3_B, Z3_D, scale=0.5)),
       bugs=[("scatter-axes-reversed", ["wrong-collective-group"]), ("grad-local-batch-mean", ["constant-mismatch"]),
             ("loss-psum-one-axis", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 6. split-KV (flash-decoding) attention for one decode step: the KV cache's
#    length over sp, the heads over tp; each device scores the query against
#    its block of the cache (positions past the sequence's length masked),
#    the row max is a pmax over sp, the exponent sums and the weighted values
#    are psum'd.
SK_B, SK_T, SK_H, SK_E = 2, 32, 4, 8


def decode_attn(q, k, v, lens):
    s = jnp.einsum("bhe,bthe->bht", q, k) / np.sqrt(SK_E)
    ok = jnp.arange(SK_T)[None, :] < lens[:, None]
    p = jax.nn.softmax(jnp.where(ok[:, None], s, -1e30), -1)
    return jnp.einsum("bht,bthe->bhe", p, v)


def split_kv(bug):
    def f(q, k, v, lens):
        tl = k.shape[1]
        s = jnp.einsum("bhe,bthe->bht", q, k) / np.sqrt(SK_E)
        pos = jnp.arange(tl) + (0 if bug == "mask-no-block-offset" else idx("sp") * tl)
        ok = (pos[None, :] < lens[:, None])[:, None]
        s = jnp.where(ok, s, -1e30)
        m = jnp.max(s, -1) if bug == "max-local-no-pmax" else pmax(jnp.max(s, -1), "sp")
        p = jnp.where(ok, jnp.exp(s - m[..., None]), 0.0)
        den = jnp.sum(p, -1) if bug == "denominator-no-psum" else psum(jnp.sum(p, -1), "sp")
        return psum(jnp.einsum("bht,bthe->bhe", p, v), "sp") / den[..., None]
    return f


C.smap("s.split_kv_decode_pmax.tp2xsp4", {"tp": 2, "sp": 4}, split_kv,
       (P(None, "tp"), P(None, "sp", "tp"), P(None, "sp", "tp"), P()), P(None, "tp"), decode_attn,
       (R(SK_B, SK_H, SK_E), R(SK_B, SK_T, SK_H, SK_E), R(SK_B, SK_T, SK_H, SK_E), np.array([19, 5], np.int32)),
       bugs=[("mask-no-block-offset", ["wrong-shard-dim"]), ("max-local-no-pmax", ["missing-all-reduce"]),
             ("denominator-no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 7. gradient accumulation over GA_K micro-batches in a lax.fori_loop on a
#    dp x tp mesh (Megatron MLP), check_vma=True: the weights are lax.pcast
#    to varying over dp before jax.grad (so each device gets the gradient of
#    its own shard of the batch, not one psum'd by the vma rules), the
#    accumulator starts as zeros pcast to varying; pmean over dp at the end,
#    then SGD with momentum.
GA_K, GA_B, GA_D, GA_H, GA_LR, GA_MU = 4, 32, 8, 16, 0.1, 0.9


def ga_loss(w1, w2, x, y):
    return mse(jax.nn.gelu(x @ w1) @ w2, y)


def ga_step(w1, w2, m1, m2, x, y):
    xs, ys = x.reshape(GA_K, -1, GA_D), y.reshape(GA_K, -1, GA_D)
    g1, g2 = jnp.zeros_like(w1), jnp.zeros_like(w2)
    for k in range(GA_K):
        a, b = jax.grad(ga_loss, (0, 1))(w1, w2, xs[k], ys[k])
        g1, g2 = g1 + a / GA_K, g2 + b / GA_K
    m1, m2 = GA_MU * m1 + g1, GA_MU * m2 + g2
    return w1 - GA_LR * m1, w2 - GA_LR * m2, m1, m2


def vary(a):
    return lax.pcast(a, "dp", to="varying")


def ga_pcast(bug):
    def f(w1, w2, m1, m2, x, y):
        # the per-device batch is the dp shard; micro-batch k takes rows k of every [K, .] split
        xs, ys = x.reshape(GA_K, -1, GA_D), y.reshape(GA_K, -1, GA_D)

        def loss(w1, w2, x, y):
            return mse(psum(jax.nn.gelu(x @ w1) @ w2, "tp"), y)

        def body(k, acc):
            if bug == "grad-of-invariant-weights":
                a, b = jax.grad(loss, (0, 1))(w1, w2, xs[k], ys[k])  # already psum'd over dp by the vma rules
            else:  # the weights pcast to varying over dp: each device's own gradient
                a, b = jax.grad(loss, (0, 1))(vary(w1), vary(w2), xs[k], ys[k])
            return acc[0] + a / GA_K, acc[1] + b / GA_K
        acc0 = (vary(jnp.zeros_like(w1)), vary(jnp.zeros_like(w2)))
        g1, g2 = lax.fori_loop(0, GA_K - 1 if bug == "last-microbatch-skipped" else GA_K, body, acc0)
        if bug == "psum-not-pmean":
            g1, g2 = psum(g1, "dp"), psum(g2, "dp")
        else:
            g1, g2 = pmean(g1, "dp"), pmean(g2, "dp")
        m1, m2 = GA_MU * m1 + g1, GA_MU * m2 + g2
        return w1 - GA_LR * m1, w2 - GA_LR * m2, m1, m2
    return f


# micro-batch k of the baseline is rows [8k, 8k + 8), of a device its own rows
# [4k, 4k + 4): other groupings, the same mean gradient.
C.smap("s.grad_accum_pcast_vma.dp2xtp4", {"dp": 2, "tp": 4}, ga_pcast,
       (P(None, "tp"), P("tp"), P(None, "tp"), P("tp"), P("dp"), P("dp")),
       (P(None, "tp"), P("tp"), P(None, "tp"), P("tp")), ga_step,
       (R(GA_D, GA_H, scale=0.3), R(GA_H, GA_D, scale=0.3), R(GA_D, GA_H, scale=0.01), R(GA_H, GA_D, scale=0.01),
        R(GA_B, GA_D), R(GA_B, GA_D, scale=0.5)),
       check_vma=True,
       bugs=[("last-microbatch-skipped", ["wrong-shard-dim"]), ("psum-not-pmean", ["wrong-reduction"]),
             ("grad-of-invariant-weights", ["wrong-reduction"])])
# ---------------------------------------------------------------------------
# 8. optax.MultiSteps in a data-parallel shard_map: MS_K micro-batches in a
#    lax.scan, each one's gradient pmean'd over dp and handed to the
#    MultiSteps wrapper (Adam every MS_K-th call, the mean of the gradients
#    accumulated in between); the state goes in and out replicated.
MS_K, MS_B, MS_D, MS_H = 4, 16, 8, 16
ms_opt = optax.MultiSteps(optax.adam(0.05), every_k_schedule=2)


def ms_loss(p, x, y):
    return mse(jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"], y)


def ms_step(p, st, x, y):
    def micro(c, xy):
        p, st = c
        lv, g = jax.value_and_grad(ms_loss)(p, *xy)
        u, st = ms_opt.update(g, st, p)
        return (optax.apply_updates(p, u), st), lv
    (p, st), lv = lax.scan(micro, (p, st), (x, y))
    return p, st, lv


def ms_dp(bug):
    def f(p, st, x, y):
        def micro(c, xy):
            p, st = c
            lv, g = jax.value_and_grad(ms_loss)(p, *xy)
            if bug != "grad-no-pmean" and bug != "pmean-of-updates":
                g = pmean(g, "dp")
            u, st = ms_opt.update(g, st, p)
            if bug == "pmean-of-updates":
                u = pmean(u, "dp")
            return (optax.apply_updates(p, u), st), pmean(lv, "dp")
        (p, st), lv = lax.scan(micro, (p, st), (x, y))
        return p, st, lv
    return f


ms_p = {"w1": R(MS_D, MS_H, scale=0.4), "b1": R(MS_H, scale=0.1), "w2": R(MS_H, MS_D, scale=0.3)}
ms_st = jax.tree.map(np.asarray, ms_opt.init(ms_p))
C.smap("s.multisteps_adam_scan.dp4", {"dp": 4}, ms_dp, (P(), P(), P(None, "dp"), P(None, "dp")), (P(), P(), P()),
       ms_step, (ms_p, ms_st, R(MS_K, MS_B, MS_D), R(MS_K, MS_B, MS_D, scale=0.5)),
       bugs=[("grad-no-pmean", ["missing-all-reduce"]), ("pmean-of-updates", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 9. causal self-attention over a sequence sharded within node groups: one
#    flat mesh axis of 8 devices, two "nodes" of 4 holding one sequence each
#    (rows of [batch * time, D] over the axis); keys and values all-gathered
#    within the node (axis_index_groups), query positions offset by the
#    device's place in its group.
AG_B, AG_T, AG_D, AG_G = 2, 16, 8, 4
AG_GROUPS = [[0, 1, 2, 3], [4, 5, 6, 7]]


def attn_rows(x, wq, wk, wv):
    h = x.reshape(AG_B, AG_T, AG_D)
    q, k, v = h @ wq, h @ wk, h @ wv
    s = jnp.einsum("bqd,bkd->bqk", q, k) / np.sqrt(AG_D)
    causal = jnp.arange(AG_T)[:, None] >= jnp.arange(AG_T)[None, :]
    return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(jnp.where(causal, s, -1e30), -1), v).reshape(-1, AG_D)


def grouped_gather(bug):
    groups = [[0, 2, 4, 6], [1, 3, 5, 7]] if bug == "groups-strided" else AG_GROUPS

    def f(x, wq, wk, wv):
        tl = x.shape[0]
        q = x @ wq
        k = lax.all_gather(x @ wk, "d", axis_index_groups=groups, tiled=True)
        v = lax.all_gather(x @ wv, "d", axis_index_groups=groups, tiled=True)
        me = idx("d") if bug == "causal-offset-flat" else idx("d") % AG_G
        qpos = me * tl + jnp.arange(tl)
        s = jnp.where(qpos[:, None] >= jnp.arange(AG_T)[None, :], q @ k.T / np.sqrt(AG_D), -1e30)
        return jax.nn.softmax(s, -1) @ v
    return f


C.smap("s.node_group_allgather_attn.d8", {"d": 8}, grouped_gather, (P("d"), P(), P(), P()), P("d"), attn_rows,
       (R(AG_B * AG_T, AG_D), R(AG_D, AG_D, scale=0.5), R(AG_D, AG_D, scale=0.5), R(AG_D, AG_D)),
       bugs=[("groups-strided", ["wrong-collective-group"]), ("causal-offset-flat", ["wrong-shard-dim"])])

# ---------------------------------------------------------------------------
# 10. Muon on FSDP row shards: a tanh layer's weight and its momentum have
#     their rows over fsdp, the batch is over (dp, fsdp); the gradient of the
#     all-gathered weight is psum'd, each device updates its rows of the
#     momentum, all-gathers the momentum for the Newton-Schulz
#     orthogonalisation of the Nesterov direction and keeps its rows.
MU_B, MU_D, MU_LR, MU_BETA = 32, 16, 0.05, 0.9


def newton_schulz(g):
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g / (jnp.linalg.norm(g) + 1e-7)
    for _ in range(5):
        s = x @ x.T
        x = a * x + (b * s + c * s @ s) @ x
    return x


def muon_loss(w, x, y):
    return jnp.sum(jnp.square(jnp.tanh(x @ w) - y))


def muon_step(w, mom, x, y):
    lv, g = jax.value_and_grad(muon_loss)(w, x, y)
    g = g / MU_B
    mom = MU_BETA * mom + g
    return w - MU_LR * newton_schulz(MU_BETA * mom + g), mom, lv / MU_B


def muon_fsdp(bug):
    def f(w, mom, x, y):
        rows = w.shape[0]
        wf = lax.all_gather(w, "fsdp", axis=0, tiled=True)
        lv, g = jax.value_and_grad(muon_loss)(wf, x, y)
        g = (psum(g, "dp") if bug == "grad-psum-dp-only" else psum(g, DF)) / MU_B
        mine = lax.dynamic_slice_in_dim(g, idx("fsdp") * rows, rows, 0)
        mom = MU_BETA * mom + mine
        if bug == "ns-on-local-shard":
            upd = newton_schulz(MU_BETA * mom + mine)
        else:
            full = newton_schulz(MU_BETA * lax.all_gather(mom, "fsdp", axis=0, tiled=True) + g)
            upd = lax.dynamic_slice_in_dim(full, idx("fsdp") * rows, rows, 0)
        return w - MU_LR * upd, mom, psum(lv, DF) / MU_B
    return f


C.smap("s.muon_ns_fsdp_rows.dp2xfsdp4", {"dp": 2, "fsdp": 4}, muon_fsdp, (P("fsdp"), P("fsdp"), P(DF), P(DF)),
       (P("fsdp"), P("fsdp"), P()), muon_step,
       (R(MU_D, MU_D, scale=0.3), R(MU_D, MU_D, scale=0.01), R(MU_B, MU_D), R(MU_B, MU_D, scale=0.5)),
       bugs=[("ns-on-local-shard", ["wrong-shard-dim"]), ("grad-psum-dp-only", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# GSPMD pairs. Optimizer states take the shardings of their parameters
# (optax.tree_map_params), their counters replicated.
def layer_norm(x, eps=1e-5):
    m = jnp.mean(x, -1, keepdims=True)
    return (x - m) * lax.rsqrt(jnp.mean(jnp.square(x - m), -1, keepdims=True) + eps)


# 11. explicit sharding mode (AxisType.Explicit, sharding in the types): a
#     pre-LN transformer block's training step, the batch over dp and the
#     heads / hidden units over tp, every einsum with out_sharding, the
#     residual's sharding read from jax.typeof, the output resharded to
#     sequence-sharded before the loss; optax.chain(clip_by_global_norm,
#     adamw with weight decay masked off the 1-D parameters).
EB_B, EB_T, EB_D, EB_H, EB_E, EB_F = 4, 8, 16, 4, 4, 32
EXPLICIT = jax.make_mesh((2, 4), ("dp", "tp"), axis_types=(AxisType.Explicit,) * 2)
eb_opt = optax.chain(optax.clip_by_global_norm(1.0),
                     optax.adamw(1e-2, weight_decay=0.1, mask=lambda p: jax.tree.map(lambda a: a.ndim > 1, p)))


def eb_loss(p, x, y):
    z = layer_norm(x) * p["g1"]
    q = jnp.einsum("btd,dhe->bthe", z, p["wq"], out_sharding=P("dp", None, "tp"))
    k = jnp.einsum("btd,dhe->bthe", z, p["wk"], out_sharding=P("dp", None, "tp"))
    v = jnp.einsum("btd,dhe->bthe", z, p["wv"], out_sharding=P("dp", None, "tp"))
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k, out_sharding=P("dp", "tp")) / np.sqrt(EB_E)
    causal = jnp.arange(EB_T)[:, None] >= jnp.arange(EB_T)[None, :]
    a = jax.nn.softmax(jnp.where(causal, s, -1e30), -1)
    o = jnp.einsum("bhqk,bkhe->bqhe", a, v, out_sharding=P("dp", None, "tp"))
    h = x + jnp.einsum("bqhe,hed->bqd", o, p["wo"], out_sharding=jax.typeof(x).sharding)
    f = jax.nn.gelu(jnp.einsum("btd,df->btf", layer_norm(h) * p["g2"], p["w1"], out_sharding=P("dp", None, "tp")))
    out = h + jnp.einsum("btf,fd->btd", f, p["w2"], out_sharding=P("dp"))
    out = jax.sharding.reshard(out, P("dp", "tp"))
    return mse(out, jax.sharding.reshard(y, P("dp", "tp")))


def eb_step(p, st, x, y):
    lv, g = jax.value_and_grad(eb_loss)(p, x, y)
    u, st = eb_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


eb_p = {"g1": 1.0 + R(EB_D, scale=0.1), "wq": R(EB_D, EB_H, EB_E, scale=0.3), "wk": R(EB_D, EB_H, EB_E, scale=0.3),
        "wv": R(EB_D, EB_H, EB_E, scale=0.3), "wo": R(EB_H, EB_E, EB_D, scale=0.3), "g2": 1.0 + R(EB_D, scale=0.1),
        "w1": R(EB_D, EB_F, scale=0.3), "w2": R(EB_F, EB_D, scale=0.2)}
eb_ps = {"g1": P(), "wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"), "wo": P("tp"), "g2": P(),
         "w1": P(None, "tp"), "w2": P("tp")}
eb_st = np_tree(eb_opt.init(eb_p))
eb_ss = state_specs(eb_st, eb_ps)
with jax.set_mesh(EXPLICIT):
    gspmd_explicit("g.explicit_block_step_clip_adamw.dp2xtp4", EXPLICIT, (eb_ps, eb_ss, P("dp"), P("dp")), (eb_ps, eb_ss, P()),
            eb_step, (eb_p, eb_st, R(EB_B, EB_T, EB_D), R(EB_B, EB_T, EB_D, scale=0.5)),
            note="explicit-mode mesh (AxisType.Explicit)")

# 12. explicit sharding mode: grouped-query attention with rotary positions,
#     8 query heads over tp, 2 key/value heads replicated (2 does not divide
#     over tp = 4) and repeated to the query heads, then resharded onto tp.
GQ_B, GQ_T, GQ_D, GQ_H, GQ_KV, GQ_E = 4, 8, 16, 8, 2, 4


def rope(x):
    half = GQ_E // 2
    ang = jnp.arange(GQ_T)[:, None] * (1.0 / 10000 ** (jnp.arange(half) / half))[None, :]
    c, s = jnp.cos(ang)[None, :, None], jnp.sin(ang)[None, :, None]
    a, b = x[..., :half], x[..., half:]
    return jnp.concatenate([a * c - b * s, a * s + b * c], -1)


def gqa_explicit(x, wq, wk, wv, wo):
    q = rope(jnp.einsum("btd,dhe->bthe", x, wq, out_sharding=P("dp", None, "tp")))
    k = rope(jnp.einsum("btd,dhe->bthe", x, wk, out_sharding=P("dp")))
    v = jnp.einsum("btd,dhe->bthe", x, wv, out_sharding=P("dp"))
    k = jax.sharding.reshard(jnp.repeat(k, GQ_H // GQ_KV, axis=2), P("dp", None, "tp"))
    v = jax.sharding.reshard(jnp.repeat(v, GQ_H // GQ_KV, axis=2), P("dp", None, "tp"))
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k, out_sharding=P("dp", "tp")) / np.sqrt(GQ_E)
    causal = jnp.arange(GQ_T)[:, None] >= jnp.arange(GQ_T)[None, :]
    o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(jnp.where(causal, s, -1e30), -1), v,
                   out_sharding=P("dp", None, "tp"))
    return jnp.einsum("bqhe,hed->bqd", o, wo, out_sharding=P("dp"))


with jax.set_mesh(EXPLICIT):
    gspmd_explicit("g.explicit_gqa_rope_repeat_reshard.dp2xtp4", EXPLICIT, (P("dp"), P(None, "tp"), P(), P(), P("tp")), P("dp"),
            gqa_explicit, (R(GQ_B, GQ_T, GQ_D), R(GQ_D, GQ_H, GQ_E, scale=0.3), R(GQ_D, GQ_KV, GQ_E, scale=0.3),
                           R(GQ_D, GQ_KV, GQ_E, scale=0.3), R(GQ_H, GQ_E, GQ_D, scale=0.3)),
            note="explicit-mode mesh (AxisType.Explicit)")

# 13. optax.contrib.muon (Newton-Schulz on the 2-D weights, Adam on the
#     biases) for an MLP on a dp x fsdp x tp mesh, the batch over (dp, fsdp).
M3 = {"dp": 2, "fsdp": 2, "tp": 2}
mu_opt = optax.contrib.muon(0.02)


def mu3_step(p, st, x, y):
    def loss(p):
        return mse(jax.nn.gelu(x @ p["w1"] + p["b1"]) @ p["w2"], y)
    lv, g = jax.value_and_grad(loss)(p)
    u, st = mu_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


mu_p = {"w1": R(16, 32, scale=0.3), "b1": R(32, scale=0.1), "w2": R(32, 16, scale=0.3)}
mu_ps = {"w1": P("fsdp", "tp"), "b1": P("tp"), "w2": P("tp", "fsdp")}
mu_st = np_tree(mu_opt.init(mu_p))
C.gspmd("g.optax_contrib_muon_mlp.dp2xfsdp2xtp2", M3, (mu_ps, state_specs(mu_st, mu_ps), P(DF), P(DF)),
        (mu_ps, state_specs(mu_st, mu_ps), P()), mu3_step, (mu_p, mu_st, R(16, 16), R(16, 16, scale=0.5)))

# 14. optax.contrib.schedule_free_adamw: two steps from a state whose
#     iterate sequences start at the parameters, then the evaluation
#     parameters (schedule_free_eval_params); dp x tp.
sf_opt = optax.contrib.schedule_free_adamw(0.05, warmup_steps=2, weight_decay=1e-3)


def sf_steps(p, st, x, y):
    def loss(p):
        return mse(jnp.tanh(x @ p["w1"]) @ p["w2"] + p["b2"], y)
    for _ in range(2):
        lv, g = jax.value_and_grad(loss)(p)
        u, st = sf_opt.update(g, st, p)
        p = optax.apply_updates(p, u)
    return p, st, optax.contrib.schedule_free_eval_params(st, p), lv


sf_p = {"w1": R(16, 32, scale=0.3), "w2": R(32, 8, scale=0.3), "b2": R(8, scale=0.1)}
sf_ps = {"w1": P(None, "tp"), "w2": P("tp"), "b2": P()}
sf_st = np_tree(sf_opt.init(sf_p))
C.gspmd("g.schedule_free_adamw_eval.dp2xtp4", {"dp": 2, "tp": 4},
        (sf_ps, state_specs(sf_st, sf_ps), P("dp"), P("dp")),
        (sf_ps, state_specs(sf_st, sf_ps), sf_ps, P()), sf_steps,
        (sf_p, sf_st, R(16, 16), R(16, 8, scale=0.5)))

# 15. optax.MultiSteps(adabelief) over MS_K micro-batches in a lax.scan
#     under GSPMD: the weights' rows over fsdp, the micro-batches' rows over
#     (dp, fsdp).
mg_opt = optax.MultiSteps(optax.adabelief(0.02), every_k_schedule=2)


def mg_step(p, st, x, y):
    def micro(c, xy):
        p, st = c
        lv, g = jax.value_and_grad(ms_loss)(p, *xy)
        u, st = mg_opt.update(g, st, p)
        return (optax.apply_updates(p, u), st), lv
    (p, st), lv = lax.scan(micro, (p, st), (x, y))
    return p, st, jnp.mean(lv)


mg_ps = {"w1": P("fsdp"), "b1": P(), "w2": P("fsdp")}
mg_st = np_tree(mg_opt.init(ms_p))
C.gspmd("g.multisteps_adabelief_scan.dp4xfsdp2", {"dp": 4, "fsdp": 2},
        (mg_ps, state_specs(mg_st, mg_ps), P(None, ("dp", "fsdp")), P(None, ("dp", "fsdp"))),
        (mg_ps, state_specs(mg_st, mg_ps), P()), mg_step,
        (ms_p, mg_st, R(MS_K, MS_B, MS_D), R(MS_K, MS_B, MS_D, scale=0.5)))

# 16. a 4-axis mesh dp x fsdp x tp x sp (2 x 2 x 2 x 1): a sequence MLP block
#     with LayerNorm, the batch over (dp, fsdp), the time over sp, weights
#     over fsdp and tp; optax.chain(clip_by_global_norm, weight decay masked
#     to the matrices, Adam's scaling, the learning rate).
M4 = {"dp": 2, "fsdp": 2, "tp": 2, "sp": 1}
c4_opt = optax.chain(optax.clip_by_global_norm(0.5),
                     optax.add_decayed_weights(0.05, mask=lambda p: {k: k.startswith("w") for k in p}),
                     optax.scale_by_adam(), optax.scale(-0.01))


def c4_step(p, st, x, y):
    def loss(p):
        h = layer_norm(x) * p["g"] + p["b"]
        return mse(x + jax.nn.relu(h @ p["w1"]) @ p["w2"], y)
    lv, g = jax.value_and_grad(loss)(p)
    u, st = c4_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv, optax.global_norm(g)


c4_p = {"g": 1.0 + R(16, scale=0.1), "b": R(16, scale=0.1), "w1": R(16, 32, scale=0.3), "w2": R(32, 16, scale=0.3)}
c4_ps = {"g": P(), "b": P(), "w1": P("fsdp", "tp"), "w2": P("tp", "fsdp")}
c4_st = np_tree(c4_opt.init(c4_p))
C.gspmd("g.clip_masked_wd_adam.dp2xfsdp2xtp2xsp1", M4,
        (c4_ps, state_specs(c4_st, c4_ps), P(DF, "sp"), P(DF, "sp")),
        (c4_ps, state_specs(c4_st, c4_ps), P(), P()), c4_step,
        (c4_p, c4_st, R(8, 4, 16), R(8, 4, 16, scale=0.5)))

# 17. optax.contrib.ademamix (two momenta, the slow one mixed in) for a
#     classifier over a vocabulary-sharded embedding table (mean-pooled
#     tokens, an MLP head), dp x tp.
am_opt = optax.contrib.ademamix(0.01, alpha=5.0)


def am_step(p, st, tok, lab):
    def loss(p):
        e = jnp.mean(p["emb"][tok], 1)
        logits = jax.nn.relu(e @ p["w1"]) @ p["w2"]
        return jnp.mean(jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, lab[:, None], 1)[:, 0])
    lv, g = jax.value_and_grad(loss)(p)
    u, st = am_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


am_p = {"emb": R(64, 16, scale=0.5), "w1": R(16, 32, scale=0.3), "w2": R(32, 5, scale=0.3)}
am_ps = {"emb": P("tp"), "w1": P(None, "tp"), "w2": P("tp")}
am_st = np_tree(am_opt.init(am_p))
C.gspmd("g.ademamix_vocab_sharded_emb.dp2xtp4", {"dp": 2, "tp": 4},
        (am_ps, state_specs(am_st, am_ps), P("dp"), P("dp")), (am_ps, state_specs(am_st, am_ps), P()),
        am_step, (am_p, am_st, I(0, 64, 8, 6), I(0, 5, 8)))

# 18. a dm-haiku transformer LM (hk.Embed, hk.MultiHeadAttention with a
#     causal mask, hk.LayerNorm, an MLP, hk.transform, random init), one SGD
#     step with momentum; parameters sharded by module name: attention
#     projections and the MLP Megatron-style over tp, the embedding over
#     the model dim.
try:
    import haiku as hk
except ImportError:  # run_fresh9.sh installs it (requirements-fresh9.txt)
    hk = None
HK_V, HK_D, HK_H, HK_T, HK_B = 32, 16, 4, 8, 4


def hk_lm(tok):
    x = hk.Embed(HK_V, HK_D, name="embed")(tok)
    mask = jnp.tril(jnp.ones((HK_T, HK_T)))[None, None]
    for i in range(2):
        z = hk.LayerNorm(-1, True, True, name="ln_a%d" % i)(x)
        x = x + hk.MultiHeadAttention(HK_H, HK_D // HK_H, w_init=hk.initializers.VarianceScaling(1.0),
                                      name="attn%d" % i)(z, z, z, mask=mask)
        z = hk.LayerNorm(-1, True, True, name="ln_m%d" % i)(x)
        x = x + hk.Linear(HK_D, name="mlp_out%d" % i)(jax.nn.gelu(hk.Linear(4 * HK_D, name="mlp_in%d" % i)(z)))
    return hk.Linear(HK_V, name="head")(hk.LayerNorm(-1, True, True, name="ln_f")(x))


def hk_spec(mod, name, shape):
    last = mod.split("/")[-1]
    if name == "embeddings":
        return P(None, "tp")
    if last in ("query", "key", "value") or mod.startswith("mlp_in"):
        return P(None, "tp") if name == "w" else P("tp")
    if last == "linear" or mod.startswith("mlp_out"):
        return P("tp", None) if name == "w" else P()
    if mod == "head":
        return P(None, "tp") if name == "w" else P("tp")
    return P()


if hk is not None:
    hk_t = hk.without_apply_rng(hk.transform(hk_lm))
    hk_opt = optax.sgd(0.1, momentum=0.9)

    def hk_step(p, st, tok, lab):
        def loss(p):
            logits = hk_t.apply(p, tok)
            return jnp.mean(jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, lab[..., None], -1)[..., 0])
        lv, g = jax.value_and_grad(loss)(p)
        u, st = hk_opt.update(g, st, p)
        return optax.apply_updates(p, u), st, lv

    hk_tok = I(0, HK_V, HK_B, HK_T)
    hk_p = np_tree(hk_t.init(jax.random.PRNGKey(9), hk_tok))
    hk_ps = {m: {n: hk_spec(m, n, a.shape) for n, a in d.items()} for m, d in hk_p.items()}
    hk_st = np_tree(hk_opt.init(hk_p))
    C.gspmd("g.haiku_transformer_lm_sgd.dp2xtp4", {"dp": 2, "tp": 4},
            (hk_ps, state_specs(hk_st, hk_ps), P("dp"), P("dp")),
            (hk_ps, state_specs(hk_st, hk_ps), P()), hk_step,
            (hk_p, hk_st, hk_tok, np.roll(hk_tok, -1, 1)), note="dm-haiku %s" % hk.__version__)

# ---------------------------------------------------------------------------
# 19. manual data parallelism over automatic tensor parallelism: a
#     shard_map over dp only (tp left to the partitioner: the MLP's weights
#     are sharded over tp by the jit's shardings, the body never names tp),
#     the gradients pmean'd over dp by hand, SGD. (A bug variant pmean'ing
#     the gradients in bf16 is left out: XLA:CPU aborts compiling it,
#     "Invalid binary instruction opcode copy" in ChangeOpDataType.)
MD_B, MD_D, MD_H, MD_LR = 16, 16, 32, 0.1


def md_loss(w1, w2, x, y):
    return mse(jax.nn.gelu(layer_norm(x) @ w1) @ w2, y)


def md_step(w1, w2, x, y):
    lv, (g1, g2) = jax.value_and_grad(md_loss, (0, 1))(w1, w2, x, y)
    return w1 - MD_LR * g1, w2 - MD_LR * g2, lv


def manual_dp(bug):
    def body(w1, w2, x, y):
        lv, (g1, g2) = jax.value_and_grad(md_loss, (0, 1))(w1, w2, x, y)
        if bug == "grad-no-pmean":
            pass
        elif bug == "grad-psum-not-pmean":
            g1, g2 = psum(g1, "dp"), psum(g2, "dp")
        else:
            g1, g2 = pmean(g1, "dp"), pmean(g2, "dp")
        return w1 - MD_LR * g1, w2 - MD_LR * g2, pmean(lv, "dp")

    def make(m):
        return jax.shard_map(body, mesh=m, in_specs=(P(), P(), P("dp"), P("dp")), out_specs=(P(), P(), P()),
                             axis_names={"dp"}, check_vma=False)
    return make


partial_smap("s.manual_dp_auto_tp_sgd.dp2xtp4", {"dp": 2, "tp": 4}, manual_dp,
             (P(None, "tp"), P("tp"), P("dp"), P("dp")), (P(None, "tp"), P("tp"), P()), md_step,
             (R(MD_D, MD_H, scale=0.3), R(MD_H, MD_D, scale=0.3), R(MD_B, MD_D), R(MD_B, MD_D, scale=0.5)),
             bugs=[("grad-no-pmean", ["missing-all-reduce"]), ("grad-psum-not-pmean", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 20. explicit sharding mode with a shard_map over tp inside: an attention
#     block whose heads are computed per tp device (in_specs over tp only,
#     dp stays explicit in the types), the row-parallel output projection
#     psum'd over tp, the output bias added after the psum; the loss and
#     its gradients outside the shard_map.
XS_B, XS_T, XS_D, XS_H, XS_E = 4, 8, 16, 4, 4


def attn_block(x, wq, wk, wv, wo, bo):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(XS_E)
    causal = jnp.arange(XS_T)[:, None] >= jnp.arange(XS_T)[None, :]
    o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(jnp.where(causal, s, -1e30), -1), v)
    return x + jnp.einsum("bqhe,hed->bqd", o, wo) + bo


def xs_step(x, wq, wk, wv, wo, bo, y):
    return jax.value_and_grad(lambda *w: mse(attn_block(x, *w), y), (0, 1, 2, 3, 4))(wq, wk, wv, wo, bo)


def explicit_smap(bug):
    def body(x, wq, wk, wv, wo, bo):
        q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
        s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(XS_E)
        causal = jnp.arange(XS_T)[:, None] >= jnp.arange(XS_T)[None, :]
        o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(jnp.where(causal, s, -1e30), -1), v)
        part = jnp.einsum("bqhe,hed->bqd", o, wo)
        if bug == "bias-inside-psum":
            return x + psum(part + bo, "tp")
        if bug == "pmean-not-psum":
            return x + pmean(part, "tp") + bo
        return x + psum(part, "tp") + bo

    def make(m):
        def step(x, wq, wk, wv, wo, bo, y):
            def loss(*w):
                out = jax.shard_map(body, in_specs=(P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P()),
                                    out_specs=P(), axis_names={"tp"})(x, *w)
                return mse(out, y)
            return jax.value_and_grad(loss, (0, 1, 2, 3, 4))(wq, wk, wv, wo, bo)
        return step
    return make


with jax.set_mesh(EXPLICIT):
    partial_smap("s.explicit_mesh_smap_tp_attn.dp2xtp4", EXPLICIT, explicit_smap,
                 (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P(), P("dp")),
                 (P(), (P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P())), xs_step,
                 (R(XS_B, XS_T, XS_D), R(XS_D, XS_H, XS_E, scale=0.3), R(XS_D, XS_H, XS_E, scale=0.3),
                  R(XS_D, XS_H, XS_E, scale=0.3), R(XS_H, XS_E, XS_D, scale=0.3), R(XS_D, scale=0.5),
                  R(XS_B, XS_T, XS_D, scale=0.5)),
                 bugs=[("bias-inside-psum", ["wrong-reduction"]), ("pmean-not-psum", ["wrong-reduction"])],
                 note="explicit-mode mesh (AxisType.Explicit), shard_map over tp only")

# ---------------------------------------------------------------------------
# 21. explicit sharding mode, unreduced: the row-parallel matmul of an MLP
#     training step leaves its result unreduced over tp in the type
#     (out_sharding=P('dp', None, unreduced={'tp'})), reshard reduces it;
#     SGD on the gradients.
def unreduced_step(w1, w2, x, y, single=False):
    def loss(w1, w2):
        if single:  # the numerics' single-device run
            return mse(jnp.tanh(x @ w1) @ w2, y)
        h = jnp.tanh(jnp.matmul(x, w1, out_sharding=P("dp", "tp")))
        o = jnp.matmul(h, w2, out_sharding=P("dp", None, unreduced={"tp"}))
        return mse(jax.sharding.reshard(o, P("dp", None)), y)
    lv, (g1, g2) = jax.value_and_grad(loss, (0, 1))(w1, w2)
    return w1 - 0.1 * g1, w2 - 0.1 * g2, lv


with jax.set_mesh(EXPLICIT):
    gspmd_explicit("g.explicit_unreduced_rowparallel_sgd.dp2xtp4", EXPLICIT, (P(None, "tp"), P("tp"), P("dp"), P("dp")),
            (P(None, "tp"), P("tp"), P()), unreduced_step,
            (R(16, 32, scale=0.3), R(32, 16, scale=0.3), R(8, 16), R(8, 16, scale=0.5)),
            note="explicit-mode mesh (AxisType.Explicit), unreduced={'tp'}",
            ref_fn=lambda *a: unreduced_step(*a, single=True))

# ---------------------------------------------------------------------------
# 22. a circular pipeline under GSPMD: CI_R repeats of CI_S stages, the
#     stage dim of the weights [R, S, D, D] and of the state over pp, every
#     tick each stage applies the layer of its current repeat (a per-stage
#     index into the repeat dim), jnp.roll hands the outputs on, the last
#     stage's output wraps around to stage 0 for the next repeat.
def circ_roll_step(ws, x, y):
    m = make_mesh({"pp": CI_S})

    def loss(ws):
        xs = x.reshape(CI_M, CI_MB, CI_D)
        stages = jnp.arange(CI_S)

        def tick(carry, t):
            state, outs = carry
            u = t - stages
            r = jnp.clip(u // CI_S, 0, CI_R - 1)
            first = (u >= 0) & (u < CI_S)
            state = state.at[0].set(jnp.where(first[0], xs[jnp.clip(t, 0, CI_M - 1)], state[0]))
            state = lax.with_sharding_constraint(state, NamedSharding(m, P("pp")))
            w = jax.vmap(lambda wr, i: wr[i], in_axes=(1, 0))(ws, r)  # [S, D, D]: stage s's layer at repeat r[s]
            out = jnp.tanh(jnp.einsum("smd,sde->sme", state, w))
            uo = u[CI_S - 1]
            done = (uo >= (CI_R - 1) * CI_S) & (uo < CI_R * CI_S)
            outs = jnp.where(done, outs.at[jnp.mod(uo, CI_S)].set(out[CI_S - 1]), outs)
            return (jnp.roll(out, 1, axis=0), outs), None
        (_, outs), _ = lax.scan(tick, (jnp.zeros((CI_S, CI_MB, CI_D)), jnp.zeros_like(xs)),
                                jnp.arange(CI_M + CI_R * CI_S - 1))
        return jnp.sum(jnp.square(outs.reshape(-1, CI_D) - y)) / y.size
    return jax.value_and_grad(loss)(ws)


C.gspmd("g.circular_vmap_roll_grad.pp4", {"pp": CI_S}, (P(None, "pp"), P(), P()), (P(), P(None, "pp")),
        circ_roll_step, (R(CI_R, CI_S, CI_D, CI_D, scale=0.5), ci_x, 0.5 * np.cos(ci_x)))

# ---------------------------------------------------------------------------
# 23. rows sharded over a tuple of axes in the order opposite to the mesh's
#     (P(('tp', 'dp')): row block tp * 2 + dp): a cumulative sum over the
#     sharded rows plus sinusoidal positions, each device adding the totals
#     of the blocks before its own (all_gather of the block totals over the
#     same tuple, the block index from axis_index of the tuple).
CS_T, CS_D = 32, 8
TD = ("tp", "dp")


def sinus(pos):
    return jnp.sin(pos[:, None] * (0.1 * (1 + jnp.arange(CS_D)))[None, :])


def cumsum_pos(x):
    return jnp.cumsum(x, 0) + sinus(jnp.arange(CS_T))


def cumsum_td(bug):
    def f(x):
        tl = x.shape[0]
        gather = ("dp", "tp") if bug == "gather-mesh-order" else TD
        tot = lax.all_gather(jnp.sum(x, 0), gather)  # [8, D], block order of the tuple
        me = idx("dp") * 4 + idx("tp") if bug == "block-index-mesh-order" else idx(TD)
        before = jnp.sum(jnp.where((jnp.arange(tot.shape[0]) < me)[:, None], tot, 0.0), 0)
        return jnp.cumsum(x, 0) + before + sinus(me * tl + jnp.arange(tl))
    return f


C.smap("s.cumsum_rows_reversed_tuple.dp2xtp4", {"dp": 2, "tp": 4}, cumsum_td, (P(TD),), P(TD), cumsum_pos,
       (R(CS_T, CS_D),),
       bugs=[("gather-mesh-order", ["wrong-collective-group"]), ("block-index-mesh-order", ["wrong-shard-dim"])])


def ln_mlp_cumsum(x, w1, w2):
    h = x + jax.nn.gelu(layer_norm(x) @ w1) @ w2
    return jnp.cumsum(h, 0) / jnp.arange(1, CS_T + 1)[:, None]


C.gspmd("g.reversed_tuple_rows_mlp_cummean.dp2xtp4", {"dp": 2, "tp": 4}, (P(TD), P(), P()), P(TD), ln_mlp_cumsum,
        (R(CS_T, CS_D), R(CS_D, 16, scale=0.4), R(16, CS_D, scale=0.4)))

# ---------------------------------------------------------------------------
# 24. Ulysses attention over a tuple of axes: the sequence sharded over
#     (dp, tp) jointly (8 blocks), all_to_all over the tuple to put whole
#     sequences of one head per device, causal attention, all_to_all back.
UL_T, UL_H, UL_E = 32, 8, 4


def mha_causal(q, k, v):
    s = jnp.einsum("qhe,khe->hqk", q, k) / np.sqrt(UL_E)
    causal = jnp.arange(UL_T)[:, None] >= jnp.arange(UL_T)[None, :]
    return jnp.einsum("hqk,khe->qhe", jax.nn.softmax(jnp.where(causal, s, -1e30), -1), v)


def ulysses_tuple(bug):
    def f(q, k, v):
        q, k, v = (lax.all_to_all(a, DT2, 1, 0, tiled=True) for a in (q, k, v))  # [T, H/8, E]
        o = mha_causal(q, k, v)
        back = ("tp", "dp") if bug == "return-axes-reversed" else DT2
        return lax.all_to_all(o, back, 0, 1, tiled=True)
    return f


DT2 = ("dp", "tp")
C.smap("s.ulysses_a2a_tuple_axes.dp2xtp4", {"dp": 2, "tp": 4}, ulysses_tuple, (P(DT2),) * 3, P(DT2), mha_causal,
       (R(UL_T, UL_H, UL_E), R(UL_T, UL_H, UL_E), R(UL_T, UL_H, UL_E)),
       bugs=[("return-axes-reversed", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 25. the same collectives over a tuple of axes listed opposite to the mesh
#     order, as written when the spec says P(('fsdp', 'dp')) or
#     P(('tp', 'dp')): ZeRO-3 of 5. with every spec and collective over
#     ('fsdp', 'dp'), Ulysses of 24. over ('tp', 'dp'), and the smallest
#     such program, an all_gather of rows sharded over ('tp', 'dp').
FD = ("fsdp", "dp")


def zero3_rev(bug):
    def f(w1, w2, x, y):
        f1 = lax.all_gather(w1, FD, axis=0, tiled=True)
        f2 = lax.all_gather(w2, FD, axis=0, tiled=True)
        lv, (g1, g2) = jax.value_and_grad(z3_loss, (0, 1))(f1, f2, x, y)
        g1 = lax.psum_scatter(g1, FD, scatter_dimension=0, tiled=True)
        g2 = lax.psum_scatter(g2, FD, scatter_dimension=0, tiled=True)
        return w1 - Z3_LR * g1 / Z3_B, w2 - Z3_LR * g2 / Z3_B, psum(lv, FD) / Z3_B
    return f


C.smap("s.zero3_reversed_tuple_sgd.dp2xfsdp4", {"dp": 2, "fsdp": 4}, zero3_rev, (P(FD), P(FD), P(FD), P(FD)),
       (P(FD), P(FD), P()), z3_step,
       (R(Z3_D, Z3_H, scale=0.3), R(Z3_H, Z3_D, scale=0.3), R(Z3_B, Z3_D), R(Z3_B, Z3_D, scale=0.5)))


def ulysses_rev(bug):
    def f(q, k, v):
        q, k, v = (lax.all_to_all(a, TD, 1, 0, tiled=True) for a in (q, k, v))
        return lax.all_to_all(mha_causal(q, k, v), TD, 0, 1, tiled=True)
    return f


C.smap("s.ulysses_a2a_reversed_tuple.dp2xtp4", {"dp": 2, "tp": 4}, ulysses_rev, (P(TD),) * 3, P(TD), mha_causal,
       (R(UL_T, UL_H, UL_E), R(UL_T, UL_H, UL_E), R(UL_T, UL_H, UL_E)))

C.smap("s.allgather_reversed_tuple_min.dp2xtp4", {"dp": 2, "tp": 4},
       lambda bug: (lambda x: lax.all_gather(x * 2.0, TD, tiled=True)), (P(TD),), P(), lambda x: x * 2.0,
       (R(16, 4),))

# ---------------------------------------------------------------------------
# 26. a mesh whose devices are not in iota order (built by hand from a
#     transposed device array, as mesh_utils or a user's own layout makes
#     them): an MLP training step with optax.adam, batch over dp, hidden
#     units over tp (GSPMD; relations from the shardings' device lists).
from jax.sharding import Mesh  # noqa: E402
TMESH = Mesh(np.array(jax.devices()[:8]).reshape(4, 2).T, ("dp", "tp"))
tm_opt = optax.adam(0.02)


def tm_step(p, st, x, y):
    lv, g = jax.value_and_grad(lambda p: mse(jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"], y))(p)
    u, st = tm_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


tm_p = {"w1": R(16, 32, scale=0.3), "b1": R(32, scale=0.1), "w2": R(32, 16, scale=0.3)}
tm_ps = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp")}
tm_st = np_tree(tm_opt.init(tm_p))
C.gspmd("g.transposed_device_mesh_adam.dp2xtp4", TMESH, (tm_ps, state_specs(tm_st, tm_ps), P("dp"), P("dp")),
        (tm_ps, state_specs(tm_st, tm_ps), P()), tm_step, (tm_p, tm_st, R(8, 16), R(8, 16, scale=0.5)),
        note="mesh devices in transposed order (not iota)")

# ---------------------------------------------------------------------------
C.finish()
