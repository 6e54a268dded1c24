"""samples/fresh32: a 32nd batch of programs as a user writes them, on the
theme of three-axis meshes (8 CPU devices as 2 x 2 x 2: dp x fsdp x tp,
dp x sp x tp, pp x dp x tp, dp x ep x tp, dp x row x col) and collectives
over subsets and tuples of axes, none of them an idiom of samples/fresh ..
fresh29, probe, train or wild.
shard_map families:
 1. an HSDP (hybrid sharded data parallel) training step of a tensor-
    parallel MLP on dp x fsdp x tp: weights sharded over fsdp on one dim
    and over tp on the other, all_gather'd over fsdp; the backward written
    by hand with jax.vjp of the local half (the cotangent of the tp-psum'd
    output is the same on every tp rank); gradients psum_scatter'd over
    fsdp and psum'd over dp, divided by lax.axis_size(('dp', 'fsdp'));
    optax.adamw applied to the shards; loss pmean'd over ('dp', 'fsdp').
    Bugs: gradients reduced over fsdp only (the dp replicas never
    averaged), gradients psum'd over ('dp', 'tp') (tp ranks hold different
    columns), the reported loss pmean'd over dp only (adamw hides a
    gradient scale, so no scale bug here).
 2. a CLIP-style symmetric contrastive loss with the batch over the tuple
    ('dp', 'fsdp') and the embedding dim over tp: norms psum'd over tp,
    both towers all_gather'd over ('dp', 'fsdp') (tiled), the similarity
    psum'd over tp, targets at the row offset axis_index(('dp', 'fsdp')) *
    local batch. Bugs: the gather over ('fsdp', 'dp') (rows permuted), the
    rank written as i_fsdp * n_dp + i_dp, norms taken on the local slice
    of the embedding dim.
 3. SUMMA on dp x row x col: x (batch over dp, rows over row, contraction
    over col) times a weight sharded (row, col), by two broadcast steps
    (masked psum of the k-th panel of x along col and of the weight along
    row), bias over col, ReLU. Bugs: the weight's panel chosen by the col
    index, the x panel broadcast along row, only the first panel.
 4. sequence x tensor parallel causal attention on dp x sp x tp: batch over
    dp, sequence over sp, heads over tp; keys and values all_gather'd over
    sp, the causal mask offset axis_index('sp') * block, the output
    projection psum'd over tp. Bugs: keys and values gathered over tp
    (same shape), the mask offset from the tp index, the output psum'd over
    ('sp', 'tp').
 5. expert x tensor parallel MoE on dp x ep x tp: tokens over ('dp', 'ep'),
    4 experts over ep (2 each), expert hidden dim over tp; top-1 routing
    with a slot per local token (no drops), all_to_all over ep to the
    experts and back, expert up-projection with a bias (so an empty slot's
    output is not zero), down-projection psum'd over tp, gate-weighted
    combine. Bugs: the all_to_all's over tp, the down-projection not
    psum'd, psum'd over ('ep', 'tp').
 6. a GPipe schedule on pp x dp x tp: two residual MLP stages (weights
    stacked over pp, hidden over tp), four micro-batches over a lax.scan of
    5 ticks, activations ppermute'd stage 0 -> 1, the last stage's outputs
    collected and psum'd over pp. Bugs: the ppermute reversed, outputs
    collected from stage 0, the final psum over ('pp', 'dp').
 7. a running (causal) mean and sinusoidal positions with the sequence over
    the tuple ('sp', 'tp') and the batch over dp: local cumsum plus an
    exclusive prefix of the block totals all_gather'd over ('sp', 'tp'),
    global positions from axis_index(('sp', 'tp')) and lax.axis_size.
    Bugs: the rank written tp-major (i_tp * n_sp + i_sp), the totals
    gathered over ('tp', 'sp'), positions from the sp index only.
 8. a gated depthwise causal conv (kernel 4) with the sequence over sp,
    channels over tp, batch over dp: a 3-token left halo ppermute'd along
    sp only. Bugs: the halo ppermute'd along tp, the halo from the right
    neighbour, a cyclic halo (the first block gets the last block's tail).
 9. batch-norm statistics over ('dp', 'sp') per channel (channels over tp)
    and an amax over all three axes for a per-tensor scale. Bugs: the
    statistics psum'd over ('dp', 'tp'), the amax pmax'd over ('dp', 'sp'),
    the variance divided by the local count.
10. a row-parallel layer whose contraction dim is over the tuple ('fsdp',
    'tp') and batch over dp: the partial product psum_scatter'd over
    ('fsdp', 'tp') along the output features (tiled), the replicated bias
    sliced at the rank axis_index(('fsdp', 'tp')), GELU. Bugs: the scatter
    over ('tp', 'fsdp'), psum over tp only and the block sliced (fsdp
    partials never summed), the bias offset from a tp-major rank.
11. partial-manual shard_maps on an Explicit dp x sp x tp mesh under
    jax.jit (dp left to the partitioner, axis_names={'sp', 'tp'}): an
    up-projection on sequence blocks, jax.sharding.reshard to features over
    ('sp', 'tp'), an RMSNorm whose sum of squares is psum'd over ('sp',
    'tp') with its gain resharded to the same tuple, a down-projection by
    einsum out_sharding. Bugs: the norm psum'd over tp only, the gain
    resharded to P(('tp', 'sp')) (its blocks no longer line up with the
    activations').
12. the same program resharding to other layouts in between (correct only):
    reshard is a layout change, never a change of the function.
13. a training step of sequence x tensor parallel attention (dp x sp x tp,
    check_vma=True, jax.grad through the body and its collectives):
    squared-error loss psum'd over ('dp', 'sp') over the global count,
    optax.sgd with Nesterov momentum on the tp shards. Bugs: the loss over
    the local count, the causal offset from the dp index, keys not
    gathered (each block attends to itself only).
14. soft kNN label smoothing over the global batch (the batch over the
    tuple ('fsdp', 'dp'), not the mesh order; features over tp): both
    gathered over ('fsdp', 'dp'), the own rows masked at the rank
    axis_index(('fsdp', 'dp')). Bugs: gathered in the mesh order, the rank
    in the mesh order.
15. a causal conv (kernel 3) with the sequence over ('sp', 'tp'), the
    halo ppermute'd over the tuple (JAX refuses a ppermute over a tuple
    out of mesh order, so that bug is not written). Bugs: a cyclic
    permutation over the tuple, the halo along sp only.
16. nested shard_maps under jax.jit on an Explicit mesh: an outer one
    over dp (the loss psum'd over dp), an inner one over ('sp', 'tp') (a
    residual tensor-parallel MLP on sequence blocks, its squared error
    psum'd over sp). Bugs: the residual added inside the tp psum, the
    error psum'd over tp instead of sp, the loss pmean'd over dp.
17. a weight stored with rows over ('fsdp', 'dp') and columns over tp,
    the batch over ('dp', 'fsdp'): an untiled all_gather over ('dp',
    'fsdp') transposed back to the storage order (and, a second correct
    pair, a tiled all_gather over ('fsdp', 'dp')); output scaled by an
    amax pmax'd over ('tp', 'fsdp', 'dp'). Bugs: no transpose, a tiled
    gather in the mesh order, the amax without tp.
18. the row-parallel layer of 10. over ('tp', 'fsdp') (psum_scatter,
    axis_index and psum over tuples out of mesh order) with an RMS scale.
    Bugs: the scatter in the mesh order, the mean square without fsdp.
GSPMD pairs (jax.jit with in/out shardings): 19. the HSDP step of 1. with
the batch P(('dp', 'fsdp')) and weights P('fsdp', 'tp') / P('tp', 'fsdp');
20. the contrastive loss of 2. with both towers P(('dp', 'fsdp'), 'tp');
21. a two-layer 2-D tensor parallel MLP with weights P('row', 'col') and
P('col', 'row') and the hidden constrained to P('dp', ('row', 'col'));
22. the MoE of 5. (dense one-hot dispatch) with experts P('ep', None, 'tp')
and tokens P(('dp', 'ep')); 23. the training step of 13. under GSPMD;
24. a chain of with_sharding_constraint between P(('dp', 'sp', 'tp')),
P(None, ('tp', 'dp')) and P('sp', ('tp', 'dp')) around a cumsum and a
softmax; 25. an MLP with the batch over ('fsdp', 'dp') and weights
P('tp', 'fsdp') / P('fsdp', 'tp'); 26. the row-parallel layer of 10. with
its contraction dim over ('tp', 'fsdp').
Not a bug here: a reshard (or a shard_map's in_specs) to another layout only
moves data, so "reshard to the wrong spec" changes nothing the checker
should flag; 12. is that program, expected verified.
Numerics: every correct pair agrees with its baseline at rounding level;
every bug variant differs clearly (see "numerics").
Exported with scalify_jax.export_pair (11. and 12. with its pieces, as the
mesh is Explicit); every pair is also run by JAX on seeded inputs and its
manifest entry records the largest difference from the single-device run
("numerics").
Run from the repository root: bash samples/gen/run_fresh32.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import os
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P, reshard
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh32.sh)
from fresh_lib import Corpus, seeded, state_specs, bug_lines  # noqa: E402
from scalify_jax import make_mesh, before_partitioning, after_partitioning, leaf_names, relations_doc, spec_view  # noqa: E402
from scalify_jax._export import _merge_manifest, _write, _json_lines, broadcast_specs, output_names, versions  # noqa: E402

SCRIPT = "samples/gen/fresh32.py"
OUT = "samples/fresh32"
C = Corpus(OUT, SCRIPT, "samples/gen/run_fresh32.sh", sys.argv[1:])
rng, R, I = seeded(3232)
psum, pmean, pmax, idx = lax.psum, lax.pmean, lax.pmax, lax.axis_index
NEG = -1e30
M_FSDP = {"dp": 2, "fsdp": 2, "tp": 2}
M_SP = {"dp": 2, "sp": 2, "tp": 2}

# ---------------------------------------------------------------------------
# 1. HSDP step of a tensor-parallel MLP, backward by hand.
D1, F1, B1 = 16, 32, 16
OPT1 = optax.adamw(1e-2, weight_decay=0.05)


def mlp1(x, p):
    return jax.nn.gelu(x @ p["w1"]) @ p["w2"]


def hsdp_ref(x, t, p, s):
    loss, g = jax.value_and_grad(lambda p: jnp.mean(jnp.square(mlp1(x, p) - t)))(p)
    u, s = OPT1.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


def hsdp_body(bug):
    def f(x, t, p, s):
        w1 = lax.all_gather(p["w1"], "fsdp", axis=0, tiled=True)  # (D, F/tp)
        w2 = lax.all_gather(p["w2"], "fsdp", axis=1, tiled=True)  # (F/tp, D)
        part, vjp = jax.vjp(lambda a, b: jax.nn.gelu(x @ a) @ b, w1, w2)
        y = psum(part, "tp")
        r = y - t
        loss = pmean(jnp.mean(jnp.square(r)), ("dp", "fsdp"))
        g1, g2 = vjp(2.0 * r / r.size)
        n = lax.axis_size(("dp", "fsdp"))
        g1 = lax.psum_scatter(g1, "fsdp", scatter_dimension=0, tiled=True)
        g2 = lax.psum_scatter(g2, "fsdp", scatter_dimension=1, tiled=True)
        if bug == "loss-pmean-over-dp-only":
            loss = pmean(jnp.mean(jnp.square(r)), "dp")
        if bug == "grads-reduced-over-fsdp-only":
            g = {"w1": g1 / n, "w2": g2 / n}
        elif bug == "grads-psum-dp-and-tp":
            g = {"w1": psum(g1, ("dp", "tp")) / n, "w2": psum(g2, ("dp", "tp")) / n}
        else:
            g = {"w1": psum(g1, "dp") / n, "w2": psum(g2, "dp") / n}
        u, s = OPT1.update(g, s, p)
        return optax.apply_updates(p, u), s, loss
    return f


P1 = {"w1": R(D1, F1, scale=0.3), "w2": R(F1, D1, scale=0.3)}
S1 = OPT1.init(P1)
SPEC1 = {"w1": P("fsdp", "tp"), "w2": P("tp", "fsdp")}
SS1 = state_specs(S1, SPEC1)
X1, T1 = R(B1, D1), R(B1, D1)
C.smap("s.hsdp_tp_mlp_manual_vjp_adamw.dp2xfsdp2xtp2", M_FSDP, hsdp_body,
       (P(("dp", "fsdp")), P(("dp", "fsdp")), SPEC1, SS1), (SPEC1, SS1, P()), hsdp_ref, (X1, T1, P1, S1),
       bugs=[("grads-reduced-over-fsdp-only", ["missing-all-reduce"]),
             ("grads-psum-dp-and-tp", ["wrong-collective-group"]), ("loss-pmean-over-dp-only", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 2. CLIP-style contrastive loss, batch over ('dp', 'fsdp'), embedding over tp.
B2, D2, TEMP = 16, 16, 0.1


def clip_ref(img, txt):
    a = img / jnp.linalg.norm(img, axis=-1, keepdims=True)
    b = txt / jnp.linalg.norm(txt, axis=-1, keepdims=True)
    lg = a @ b.T / TEMP
    lab = jnp.arange(img.shape[0])
    ce = optax.softmax_cross_entropy_with_integer_labels
    return 0.5 * (jnp.mean(ce(lg, lab)) + jnp.mean(ce(lg.T, lab)))


def clip_body(bug):
    def f(img, txt):
        bl = img.shape[0]
        if bug == "norm-local-slice":
            a = img * lax.rsqrt(jnp.sum(img * img, -1, keepdims=True))
            b = txt * lax.rsqrt(jnp.sum(txt * txt, -1, keepdims=True))
        else:
            a = img * lax.rsqrt(psum(jnp.sum(img * img, -1, keepdims=True), "tp"))
            b = txt * lax.rsqrt(psum(jnp.sum(txt * txt, -1, keepdims=True), "tp"))
        order = ("fsdp", "dp") if bug == "gather-fsdp-dp" else ("dp", "fsdp")
        b_all = lax.all_gather(b, order, axis=0, tiled=True)
        a_all = lax.all_gather(a, order, axis=0, tiled=True)
        l_it = psum(a @ b_all.T, "tp") / TEMP
        l_ti = psum(b @ a_all.T, "tp") / TEMP
        if bug == "rank-fsdp-major":
            rank = idx("fsdp") * lax.axis_size("dp") + idx("dp")
        else:
            rank = idx(("dp", "fsdp"))
        lab = rank * bl + jnp.arange(bl)
        ce = optax.softmax_cross_entropy_with_integer_labels
        return 0.5 * pmean(jnp.mean(ce(l_it, lab)) + jnp.mean(ce(l_ti, lab)), ("dp", "fsdp"))
    return f


IMG2 = R(B2, D2)
TXT2 = IMG2 + R(B2, D2, scale=0.7)  # matched pairs are similar: the loss is far from log(B)
C.smap("s.clip_loss_batch_over_dp_fsdp_tuple.dp2xfsdp2xtp2", M_FSDP, clip_body,
       (P(("dp", "fsdp"), "tp"), P(("dp", "fsdp"), "tp")), P(), clip_ref, (IMG2, TXT2),
       bugs=[("gather-fsdp-dp", ["wrong-reshape-order"]), ("rank-fsdp-major", ["wrong-offset"]),
             ("norm-local-slice", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 3. SUMMA on dp x row x col.
M_RC = {"dp": 2, "row": 2, "col": 2}
M3, K3, N3 = 8, 16, 12


def summa_ref(x, w, b):
    return jax.nn.relu(jnp.einsum("bmk,kn->bmn", x, w) + b)


def summa_body(bug):
    def f(x, w, b):
        acc = jnp.zeros(x.shape[:2] + (w.shape[1],), jnp.float32)
        steps = 1 if bug == "first-panel-only" else lax.axis_size("col")
        for k in range(steps):
            if bug == "x-panel-along-row":
                xa = psum(jnp.where(idx("row") == k, x, 0.0), "row")
            else:
                xa = psum(jnp.where(idx("col") == k, x, 0.0), "col")
            wsel = idx("col") if bug == "w-panel-by-col-index" else idx("row")
            wb = psum(jnp.where(wsel == k, w, 0.0), "row")
            acc = acc + jnp.einsum("bmk,kn->bmn", xa, wb)
        return jax.nn.relu(acc + b)
    return f


C.smap("s.summa_broadcast_panels.dp2xrow2xcol2", M_RC, summa_body,
       (P("dp", "row", "col"), P("row", "col"), P("col")), P("dp", "row", "col"), summa_ref,
       (R(2, M3, K3), R(K3, N3, scale=0.3), R(N3, scale=0.3)),
       bugs=[("w-panel-by-col-index", ["wrong-offset"]), ("x-panel-along-row", ["wrong-collective-group"]),
             ("first-panel-only", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 4. sequence x tensor parallel causal attention.
B4, T4, D4, H4, E4 = 2, 8, 8, 4, 4


def attn(q, k, v, ok):
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    s = jnp.where(ok, s, NEG)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def sxt_ref(x, wq, wk, wv, wo):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    o = attn(q, k, v, jnp.tril(jnp.ones((x.shape[1],) * 2, bool)))
    return jnp.einsum("bthe,hed->btd", o, wo)


def sxt_body(bug):
    def f(x, wq, wk, wv, wo):
        tl = x.shape[1]
        q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
        ax = "tp" if bug == "kv-gathered-over-tp" else "sp"
        kk = lax.all_gather(k, ax, axis=1, tiled=True)
        vv = lax.all_gather(v, ax, axis=1, tiled=True)
        me = idx("tp") if bug == "mask-offset-from-tp" else idx("sp")
        qpos = me * tl + jnp.arange(tl)
        ok = qpos[:, None] >= jnp.arange(kk.shape[1])[None, :]
        y = jnp.einsum("bthe,hed->btd", attn(q, kk, vv, ok), wo)
        return psum(y, ("sp", "tp") if bug == "out-psum-sp-tp" else "tp")
    return f


W4 = [R(D4, H4, E4, scale=0.4) for _ in range(3)] + [R(H4, E4, D4, scale=0.4)]
C.smap("s.seq_x_tensor_causal_attention.dp2xsp2xtp2", M_SP, sxt_body,
       (P("dp", "sp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P("dp", "sp"), sxt_ref,
       (R(B4, T4, D4), *W4),
       bugs=[("kv-gathered-over-tp", ["wrong-collective-group"]), ("mask-offset-from-tp", ["wrong-offset"]),
             ("out-psum-sp-tp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 5. expert x tensor parallel MoE, top-1, a slot per local token.
M_EP = {"dp": 2, "ep": 2, "tp": 2}
N5, D5, F5, E5 = 16, 8, 16, 4


def moe_ref(x, wr, w1, b1, w2):
    p = jax.nn.softmax(x @ wr, -1)
    e = jnp.argmax(p, -1)
    g = jnp.max(p, -1)
    h = jax.nn.gelu(jnp.einsum("nd,ndf->nf", x, w1[e]) + b1[e])
    return jnp.einsum("nf,nfd->nd", h, w2[e]) * g[:, None]


def moe_body(bug):
    def f(x, wr, w1, b1, w2):
        p = jax.nn.softmax(x @ wr, -1)
        oh = jax.nn.one_hot(jnp.argmax(p, -1), E5, dtype=x.dtype)  # (n, E)
        g = jnp.max(p, -1)
        disp = jnp.einsum("ne,nd->end", oh, x)  # (E, n, D): slot = local token
        ax = "tp" if bug == "all-to-all-over-tp" else "ep"
        recv = lax.all_to_all(disp, ax, 0, 1, tiled=True)  # (E/ep, ep*n, D)
        h = jax.nn.gelu(jnp.einsum("ecd,edf->ecf", recv, w1) + b1[:, None])
        o = jnp.einsum("ecf,efd->ecd", h, w2)
        if bug == "down-proj-psum-ep-tp":
            o = psum(o, ("ep", "tp"))
        elif bug != "down-proj-not-psummed":
            o = psum(o, "tp")
        back = lax.all_to_all(o, ax, 1, 0, tiled=True)  # (E, n, D)
        return jnp.einsum("ne,end->nd", oh, back) * g[:, None]
    return f


X5 = R(N5, D5)
WR5 = R(D5, E5, scale=1.5)
C.smap("s.moe_expert_x_tensor_alltoall.dp2xep2xtp2", M_EP, moe_body,
       (P(("dp", "ep")), P(), P("ep", None, "tp"), P("ep", "tp"), P("ep", "tp")), P(("dp", "ep")), moe_ref,
       (X5, WR5, R(E5, D5, F5, scale=0.4), R(E5, F5, scale=0.5), R(E5, F5, D5, scale=0.4)),
       bugs=[("all-to-all-over-tp", ["wrong-all-to-all-axis"]), ("down-proj-not-psummed", ["missing-all-reduce"]),
             ("down-proj-psum-ep-tp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 6. GPipe on pp x dp x tp: two residual MLP stages, four micro-batches.
M_PP = {"pp": 2, "dp": 2, "tp": 2}
MB6, B6, D6, F6 = 4, 4, 8, 16


def stage(x, w1, w2):
    return x + jnp.tanh(x @ w1) @ w2


def pipe_ref(x, w1, w2):
    return stage(stage(x, w1[0], w2[0]), w1[1], w2[1])


def pipe_body(bug):
    def f(x, w1, w2):
        s = idx("pp")
        a, b = w1[0], w2[0]
        perm = [(1, 0)] if bug == "ppermute-reversed" else [(0, 1)]
        last = 0 if bug == "collect-from-stage0" else 1

        def tick(carry, t):
            buf, outs = carry
            inp = jnp.where(s == 0, x[jnp.minimum(t, MB6 - 1)], buf)
            out = inp + psum(jnp.tanh(inp @ a) @ b, "tp")
            done = jnp.where((s == last) & (t >= 1), out, outs[jnp.maximum(t - 1, 0)])
            outs = lax.dynamic_update_index_in_dim(outs, done, jnp.maximum(t - 1, 0), 0)
            return (lax.ppermute(out, "pp", perm), outs), None
        (_, outs), _ = lax.scan(tick, (jnp.zeros_like(x[0]), jnp.zeros_like(x)), jnp.arange(MB6 + 1))
        return psum(jnp.where(s == last, outs, 0.0), ("pp", "dp") if bug == "final-psum-pp-dp" else "pp")
    return f


C.smap("s.gpipe_two_stages_scan.pp2xdp2xtp2", M_PP, pipe_body,
       (P(None, "dp"), P("pp", None, "tp"), P("pp", "tp")), P(None, "dp"),
       lambda x, w1, w2: jax.vmap(lambda m: pipe_ref(m, w1, w2))(x),
       (R(MB6, B6, D6), R(2, D6, F6, scale=0.4), R(2, F6, D6, scale=0.4)),
       bugs=[("ppermute-reversed", ["wrong-permutation"]), ("collect-from-stage0", ["wrong-offset"]),
             ("final-psum-pp-dp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 7. running mean + sinusoidal positions, sequence over ('sp', 'tp').
B7, T7, D7 = 2, 16, 8


def sinus(pos, d):
    inv = 1.0 / (100.0 ** (jnp.arange(0, d, 2) / d))
    ang = pos[:, None].astype(jnp.float32) * inv
    return jnp.concatenate([jnp.sin(ang), jnp.cos(ang)], -1)


def runmean_ref(x):
    pos = jnp.arange(x.shape[1])
    return jnp.cumsum(x, 1) / (pos + 1.0)[:, None] + sinus(pos, x.shape[2])


def runmean_body(bug):
    def f(x):
        tl = x.shape[1]
        n = lax.axis_size(("sp", "tp"))
        r = idx("tp") * lax.axis_size("sp") + idx("sp") if bug == "rank-tp-major" else idx(("sp", "tp"))
        loc = jnp.cumsum(x, 1)
        tot = lax.all_gather(loc[:, -1], ("tp", "sp") if bug == "totals-gathered-tp-sp" else ("sp", "tp"))
        prefix = jnp.sum(jnp.where((jnp.arange(n) < r)[:, None, None], tot, 0.0), 0)
        pos = (idx("sp") if bug == "positions-from-sp-only" else r) * tl + jnp.arange(tl)
        return (loc + prefix[:, None]) / (pos + 1.0)[:, None] + sinus(pos, x.shape[2])
    return f


C.smap("s.running_mean_seq_over_sp_tp_tuple.dp2xsp2xtp2", M_SP, runmean_body, (P("dp", ("sp", "tp")),),
       P("dp", ("sp", "tp")), runmean_ref, (1.0 + R(B7, T7, D7),),
       bugs=[("rank-tp-major", ["wrong-offset"]), ("totals-gathered-tp-sp", ["wrong-reshape-order"]),
             ("positions-from-sp-only", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 8. gated depthwise causal conv, halo along sp.
B8, T8, C8, K8 = 2, 16, 8, 4


def conv_ref(x, w, gate):
    xp = jnp.pad(x, ((0, 0), (K8 - 1, 0), (0, 0)))
    y = sum(w[k] * xp[:, K8 - 1 - k:K8 - 1 - k + x.shape[1]] for k in range(K8))
    return y * jax.nn.silu(gate)


def conv_body(bug):
    def f(x, w, gate):
        n = lax.axis_size("sp")
        tail = x[:, -(K8 - 1):]
        if bug == "halo-along-tp":
            halo = lax.ppermute(tail, "tp", [(i, i + 1) for i in range(n - 1)])
        elif bug == "halo-from-right":
            halo = lax.ppermute(x[:, :K8 - 1], "sp", [(i + 1, i) for i in range(n - 1)])
        elif bug == "cyclic-halo":
            halo = lax.ppermute(tail, "sp", [(i, (i + 1) % n) for i in range(n)])
        else:
            halo = lax.ppermute(tail, "sp", [(i, i + 1) for i in range(n - 1)])
        xp = jnp.concatenate([halo, x], 1)
        y = sum(w[k] * xp[:, K8 - 1 - k:K8 - 1 - k + x.shape[1]] for k in range(K8))
        return y * jax.nn.silu(gate)
    return f


C.smap("s.gated_causal_conv_halo_sp.dp2xsp2xtp2", M_SP, conv_body,
       (P("dp", "sp", "tp"), P(None, "tp"), P("dp", "sp", "tp")), P("dp", "sp", "tp"), conv_ref,
       (R(B8, T8, C8), R(K8, C8, scale=0.5), R(B8, T8, C8)),
       bugs=[("halo-along-tp", ["wrong-collective-group"]), ("halo-from-right", ["wrong-permutation"]),
             ("cyclic-halo", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 9. batch-norm statistics over ('dp', 'sp'), amax over all three axes.
B9, T9, C9 = 4, 8, 8


def bn_ref(x, gam, bet):
    mu = jnp.mean(x, (0, 1))
    var = jnp.mean(jnp.square(x - mu), (0, 1))
    y = (x - mu) * lax.rsqrt(var + 1e-5) * gam + bet
    return y / jnp.max(jnp.abs(y))


def bn_body(bug):
    def f(x, gam, bet):
        st = ("dp", "tp") if bug == "stats-over-dp-tp" else ("dp", "sp")
        cnt = x.shape[0] * x.shape[1] * lax.axis_size(("dp", "sp"))
        mu = psum(jnp.sum(x, (0, 1)), st) / cnt
        ss = psum(jnp.sum(jnp.square(x - mu), (0, 1)), st)
        var = ss / (x.shape[0] * x.shape[1]) if bug == "var-local-count" else ss / cnt
        y = (x - mu) * lax.rsqrt(var + 1e-5) * gam + bet
        amax = pmax(jnp.max(jnp.abs(y)), ("dp", "sp") if bug == "amax-without-tp" else ("dp", "sp", "tp"))
        return y / amax
    return f


X9 = R(B9, T9, C9) * (1.0 + np.arange(C9, dtype=np.float32)) + np.arange(C9, dtype=np.float32)
C.smap("s.batchnorm_stats_dp_sp_amax_all.dp2xsp2xtp2", M_SP, bn_body,
       (P("dp", "sp", "tp"), P("tp"), P("tp")), P("dp", "sp", "tp"), bn_ref,
       (X9, 1.0 + R(C9, scale=0.3), R(C9, scale=0.3)),
       bugs=[("stats-over-dp-tp", ["wrong-collective-group"]), ("amax-without-tp", ["wrong-collective-group"]),
             ("var-local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 10. row-parallel layer, contraction over ('fsdp', 'tp'), reduce-scatter over the tuple.
B10, K10, N10 = 8, 16, 16


def rowpar_ref(x, w, b):
    return jax.nn.gelu(x @ w + b)


def rowpar_body(bug):
    def f(x, w, b):
        part = x @ w  # (b, N) partial over the 4 contraction blocks
        nb = N10 // lax.axis_size(("fsdp", "tp"))
        if bug == "reduce-over-tp-only":
            y = lax.dynamic_slice_in_dim(psum(part, "tp"), idx(("fsdp", "tp")) * nb, nb, 1)
        else:
            order = ("tp", "fsdp") if bug == "scatter-tp-fsdp" else ("fsdp", "tp")
            y = lax.psum_scatter(part, order, scatter_dimension=1, tiled=True)
        r = idx("tp") * lax.axis_size("fsdp") + idx("fsdp") if bug == "bias-rank-tp-major" else idx(("fsdp", "tp"))
        return jax.nn.gelu(y + lax.dynamic_slice_in_dim(b, r * nb, nb))
    return f


C.smap("s.rowparallel_contraction_over_fsdp_tp.dp2xfsdp2xtp2", M_FSDP, rowpar_body,
       (P("dp", ("fsdp", "tp")), P(("fsdp", "tp")), P()), P("dp", ("fsdp", "tp")), rowpar_ref,
       (R(B10, K10), R(K10, N10, scale=0.3), R(N10)),
       bugs=[("scatter-tp-fsdp", ["wrong-reshape-order"]), ("reduce-over-tp-only", ["missing-all-reduce"]),
             ("bias-rank-tp-major", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 11. / 12. partial-manual shard_maps and reshard on an Explicit mesh.
EXPL = AxisType.Explicit


def expl_mesh(axes):
    n = int(np.prod(list(axes.values())))
    return Mesh(np.array(jax.devices()[:n]).reshape(tuple(axes.values())), tuple(axes), axis_types=(EXPL,) * len(axes))


def jit_family(fam, axes, make, in_specs, out_specs, fn, args, bugs=(), note=None):
    """make(bug) is a function of the global arrays run as jax.jit with the
    specs as in / out shardings under jax.set_mesh (an Explicit mesh); the
    baseline is the single-device fn; relations from the specs as for a
    shard_map pair."""
    m = expl_mesh(axes)
    args = tuple(args)
    flat_in = broadcast_specs(tuple(in_specs), args, "in_specs")
    shapes = [np.shape(a) for a in jax.tree.leaves(args)]
    in_views = [spec_view(s, shp, dict(axes)) for s, shp in zip(flat_in, shapes)]
    abs_plain = jax.tree.map(lambda a: jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype), args)
    out_tree = jax.eval_shape(fn, *abs_plain)
    out_views = [spec_view(s, o.shape, dict(axes)) for s, o in
                 zip(broadcast_specs(out_specs, out_tree, "out_specs"), jax.tree.leaves(out_tree))]
    rel = relations_doc(dict(axes), leaf_names(fn, args), in_views, output_names(out_tree), out_views)
    named = lambda specs: jax.tree.map(lambda s: NamedSharding(m, s), specs,
                                       is_leaf=lambda s: isinstance(s, P))
    for bug, kinds in [(None, None)] + list(bugs):
        name = fam + (".bug." + bug if bug else "")
        if not C.wanted(name):
            continue
        print("==", name, flush=True)
        base_lo = jax.jit(fn, keep_unused=True).lower(*abs_plain)
        with jax.set_mesh(m):
            j = jax.jit(make(bug), in_shardings=named(tuple(in_specs)), out_shardings=named(out_specs),
                        keep_unused=True)
            sds = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype, sharding=NamedSharding(m, s))
                   for a, s in zip(args, in_specs)]
            dist_lo = j.lower(*sds)
            got = j(*[jax.device_put(a, NamedSharding(m, s)) for a, s in zip(args, in_specs)])
        entry = {"name": name, "mesh": dict(axes), "kind": "shard_map"}
        _write(os.path.join(OUT, name + ".relations.json"), _json_lines(rel))
        for side, (text, pb) in (("baseline", before_partitioning(base_lo)),
                                 ("distributed", after_partitioning(dist_lo))):
            stem = name + (".baseline" if side == "baseline" else ".dist")
            _write(os.path.join(OUT, stem + ".hlo"), text)
            _write(os.path.join(OUT, stem + ".hlo.pb"), pb)
            entry[side] = {"hlo": stem + ".hlo", "pb": stem + ".hlo.pb"}
        entry.update(relations=name + ".relations.json", expected="mismatch" if bug else "verified",
                     generator=dict(versions(), script="scalify_jax"))
        _merge_manifest(OUT, entry)
        C.record(name, fn, args, lambda: got, note)
        if bug:
            C.extra[name]["bug"] = {"id": bug, "kinds": kinds, "locations": bug_lines(make, bug, SCRIPT)}


B11, T11, D11, F11 = 4, 8, 8, 16


def upnorm_ref(x, w1, g, w2):
    h = jax.nn.silu(x @ w1)
    h = h * lax.rsqrt(jnp.mean(jnp.square(h), -1, keepdims=True) + 1e-6) * g
    return h @ w2


def upnorm_prog(bug):
    def prog(x, w1, g, w2):
        up = jax.shard_map(lambda xl, wl: jax.nn.silu(xl @ wl), in_specs=(P(None, "sp"), P(None, "tp")),
                           out_specs=P(None, "sp", "tp"), axis_names={"sp", "tp"})
        h = up(x, w1)
        h = reshard(h, P("dp", None, ("sp", "tp")))
        gspec = P(("tp", "sp")) if bug == "gain-resharded-tp-sp" else P(("sp", "tp"))
        g = reshard(g, gspec)

        def norm(hl, gl):
            ss = psum(jnp.sum(hl * hl, -1, keepdims=True), "tp" if bug == "norm-psum-tp-only" else ("sp", "tp"))
            return hl * lax.rsqrt(ss / F11 + 1e-6) * gl
        h = jax.shard_map(norm, in_specs=(P(None, None, ("sp", "tp")), gspec), out_specs=P(None, None, ("sp", "tp")),
                          axis_names={"sp", "tp"})(h, g)
        return jnp.einsum("btf,fd->btd", h, w2, out_sharding=P("dp", "sp"))
    return prog


ARGS11 = (R(B11, T11, D11), R(D11, F11, scale=0.4), 1.0 + R(F11, scale=0.3), R(F11, D11, scale=0.3))
SPECS11 = (P("dp", "sp"), P(None, "tp"), P(), P(None, None))
jit_family("s.partial_manual_reshard_rmsnorm_sp_tp.dp2xsp2xtp2", M_SP, upnorm_prog, SPECS11, P("dp", "sp"),
           upnorm_ref, ARGS11,
           bugs=[("norm-psum-tp-only", ["wrong-collective-group"]), ("gain-resharded-tp-sp", ["wrong-reshape-order"])])


def upnorm_other_layouts(bug):
    def prog(x, w1, g, w2):
        x = reshard(x, P(None, "sp"))
        h = jax.shard_map(lambda xl, wl: jax.nn.silu(xl @ wl), in_specs=(P(None, "sp"), P(None, "tp")),
                          out_specs=P(None, "sp", "tp"), axis_names={"sp", "tp"})(x, w1)
        h = reshard(h, P("tp", None, "sp"))
        g = reshard(g, P("sp"))

        def norm(hl, gl):
            ss = psum(jnp.sum(hl * hl, -1, keepdims=True), "sp")
            return hl * lax.rsqrt(ss / F11 + 1e-6) * gl
        h = jax.shard_map(norm, in_specs=(P(None, None, "sp"), P("sp")), out_specs=P(None, None, "sp"),
                          axis_names={"sp"})(h, g)
        h = reshard(h, P("dp", "sp", "tp"))
        return jnp.einsum("btf,fd->btd", h, w2, out_sharding=P("dp", "sp"))
    return prog


jit_family("s.partial_manual_reshard_other_layouts.dp2xsp2xtp2", M_SP, upnorm_other_layouts, SPECS11,
           P("dp", "sp"), upnorm_ref, ARGS11)

# ---------------------------------------------------------------------------
# 13. training step of sequence x tensor parallel attention, check_vma=True.
OPT13 = optax.sgd(0.1, momentum=0.9, nesterov=True)


def sxt_loss(p, x, t):
    return jnp.mean(jnp.square(sxt_ref(x, p["wq"], p["wk"], p["wv"], p["wo"]) - t))


def sxt_train_ref(p, s, x, t):
    loss, g = jax.value_and_grad(sxt_loss)(p, x, t)
    u, s = OPT13.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


def sxt_train_body(bug):
    def f(p, s, x, t):
        def loss(p):
            tl = x.shape[1]
            q, k, v = (jnp.einsum("btd,dhe->bthe", x, p[n]) for n in ("wq", "wk", "wv"))
            if bug == "keys-not-gathered":
                kk, vv = k, v
                ok = jnp.tril(jnp.ones((tl, tl), bool))
            else:
                kk = lax.all_gather(k, "sp", axis=1, tiled=True)
                vv = lax.all_gather(v, "sp", axis=1, tiled=True)
                me = idx("dp") if bug == "causal-offset-from-dp" else idx("sp")
                ok = (me * tl + jnp.arange(tl))[:, None] >= jnp.arange(kk.shape[1])[None, :]
            y = psum(jnp.einsum("bthe,hed->btd", attn(q, kk, vv, ok), p["wo"]), "tp")
            se = psum(jnp.sum(jnp.square(y - t)), ("dp", "sp"))
            cnt = t.size if bug == "loss-local-count" else t.size * lax.axis_size(("dp", "sp"))
            return se / cnt
        val, g = jax.value_and_grad(loss)(p)
        u, s = OPT13.update(g, s, p)
        return optax.apply_updates(p, u), s, val
    return f


P13 = {"wq": W4[0], "wk": W4[1], "wv": W4[2], "wo": W4[3]}
S13 = OPT13.init(P13)
SPEC13 = {"wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"), "wo": P("tp")}
SS13 = state_specs(S13, SPEC13)
X13, T13 = R(B4, T4, D4), R(B4, T4, D4)
C.smap("s.seq_x_tensor_attention_train_step_sgd.dp2xsp2xtp2", M_SP, sxt_train_body,
       (SPEC13, SS13, P("dp", "sp"), P("dp", "sp")), (SPEC13, SS13, P()), sxt_train_ref, (P13, S13, X13, T13),
       check_vma=True,
       bugs=[("loss-local-count", ["wrong-scale"]), ("causal-offset-from-dp", ["wrong-offset"]),
             ("keys-not-gathered", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 14. soft kNN label smoothing over the global batch, the batch over the
#     tuple ('fsdp', 'dp') (not the mesh order), features over tp.
B14, D14, C14, TAU14 = 16, 16, 4, 0.5


def knn_ref(e, y):
    sim = e @ e.T / TAU14
    sim = jnp.where(jnp.eye(e.shape[0], dtype=bool), NEG, sim)
    return jax.nn.softmax(sim, -1) @ y


def knn_body(bug):
    def f(e, y):
        bl = e.shape[0]
        order = ("dp", "fsdp") if bug == "gather-mesh-order" else ("fsdp", "dp")
        eg = lax.all_gather(e, order, axis=0, tiled=True)
        yg = lax.all_gather(y, order, axis=0, tiled=True)
        sim = psum(e @ eg.T, "tp") / TAU14
        rank = idx(("dp", "fsdp")) if bug == "rank-mesh-order" else idx(("fsdp", "dp"))
        self_col = rank * bl + jnp.arange(bl)
        sim = jnp.where(jnp.arange(eg.shape[0])[None, :] == self_col[:, None], NEG, sim)
        return jax.nn.softmax(sim, -1) @ yg
    return f


C.smap("s.knn_label_smoothing_batch_fsdp_dp_order.dp2xfsdp2xtp2", M_FSDP, knn_body,
       (P(("fsdp", "dp"), "tp"), P(("fsdp", "dp"))), P(("fsdp", "dp")), knn_ref,
       (R(B14, D14, scale=0.5), R(B14, C14)),
       bugs=[("gather-mesh-order", ["wrong-offset"]), ("rank-mesh-order", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 15. causal conv (kernel 3) with the sequence over the tuple ('sp', 'tp'):
#     the halo ppermute'd over the tuple (ranks 0..3 in ('sp', 'tp') order).


def conv3_ref(x, w):
    xp = jnp.pad(x, ((0, 0), (2, 0), (0, 0)))
    return jnp.tanh(w[0] * xp[:, 2:] + w[1] * xp[:, 1:-1] + w[2] * xp[:, :-2])


def conv3_body(bug):
    def f(x, w):
        n = lax.axis_size(("sp", "tp"))
        if bug == "halo-along-sp-only":
            halo = lax.ppermute(x[:, -2:], "sp", [(0, 1)])
        else:
            perm = [(i, (i + 1) % n) for i in range(n)] if bug == "cyclic-over-tuple" else [(i, i + 1) for i in range(n - 1)]
            halo = lax.ppermute(x[:, -2:], ("sp", "tp"), perm)
        xp = jnp.concatenate([halo, x], 1)
        return jnp.tanh(w[0] * xp[:, 2:] + w[1] * xp[:, 1:-1] + w[2] * xp[:, :-2])
    return f


C.smap("s.causal_conv_seq_over_sp_tp_tuple_ppermute.dp2xsp2xtp2", M_SP, conv3_body,
       (P("dp", ("sp", "tp")), P()), P("dp", ("sp", "tp")), conv3_ref, (R(2, 16, 4), R(3, 4)),
       bugs=[("cyclic-over-tuple", ["wrong-permutation"]), ("halo-along-sp-only", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 16. nested shard_map under jax.jit on an Explicit mesh: an outer one over
#     dp (the loss over the data shards), an inner one over ('sp', 'tp') (a
#     residual tensor-parallel MLP on sequence blocks, the squared error
#     psum'd over sp; the outer body reshards its blocks to sequence over
#     sp first); check_vma=False on both.


def nested_ref(x, w1, w2, t):
    y = x + jax.nn.gelu(x @ w1) @ w2
    return jnp.mean(jnp.square(y - t)), y


def nested_prog(bug):
    def prog(x, w1, w2, t):
        def outer(xo, w1, w2, to):
            def inner(xi, a, b, ti):
                if bug == "residual-inside-tp-psum":
                    y = psum(xi + jax.nn.gelu(xi @ a) @ b, "tp")
                else:
                    y = xi + psum(jax.nn.gelu(xi @ a) @ b, "tp")
                se = psum(jnp.sum(jnp.square(y - ti)), "tp" if bug == "se-psum-over-tp" else "sp")
                return se, y
            xo, to = reshard(xo, P(None, "sp")), reshard(to, P(None, "sp"))
            se, y = jax.shard_map(inner, in_specs=(P(None, "sp"), P(None, "tp"), P("tp"), P(None, "sp")),
                                  out_specs=(P(), P(None, "sp")), axis_names={"sp", "tp"},
                                  check_vma=False)(xo, w1, w2, to)
            tot = (pmean if bug == "loss-pmean-over-dp" else psum)(se, "dp")
            return tot / t.size, y
        return jax.shard_map(outer, in_specs=(P("dp"), P(), P(), P("dp")), out_specs=(P(), P("dp")),
                             axis_names={"dp"}, check_vma=False)(x, w1, w2, t)
    return prog


jit_family("s.nested_shard_map_dp_outer_sp_tp_inner.dp2xsp2xtp2", M_SP, nested_prog,
           (P("dp"), P(None, "tp"), P("tp"), P("dp")), (P(), P("dp")), nested_ref,
           (R(4, 8, 8), R(8, 16, scale=0.4), R(16, 8, scale=0.4), R(4, 8, 8)),
           bugs=[("residual-inside-tp-psum", ["wrong-reduction"]), ("se-psum-over-tp", ["wrong-collective-group"]),
                 ("loss-pmean-over-dp", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 17. a checkpoint layout in the other order: a weight stored with its rows
#     over ('fsdp', 'dp') and its columns over tp, the activations' batch
#     over ('dp', 'fsdp'). Written two correct ways: a tiled all_gather
#     over ('fsdp', 'dp'), or an untiled all_gather over the mesh order
#     ('dp', 'fsdp') whose (dp, fsdp) leading dims are transposed back to
#     the storage order. The output is scaled by its amax, pmax'd over the
#     axes written as ('tp', 'fsdp', 'dp').
B17, K17, N17 = 8, 16, 8


def ckpt_ref(x, w):
    y = jnp.tanh(x @ w)
    return y / jnp.max(jnp.abs(y))


def ckpt_body(bug):
    def f(x, w):
        if bug == "untiled-gather-not-transposed" or bug is None:
            g = lax.all_gather(w, ("dp", "fsdp"))  # (n_dp * n_fsdp, K/4, N/tp) in mesh order
            g = g.reshape((lax.axis_size("dp"), lax.axis_size("fsdp")) + w.shape)
            if bug is None:
                g = jnp.swapaxes(g, 0, 1)  # (fsdp, dp, ...): the storage order
            wf = g.reshape((-1,) + w.shape[1:])
        elif bug == "tiled-gather-mesh-order":
            wf = lax.all_gather(w, ("dp", "fsdp"), axis=0, tiled=True)
        else:
            wf = lax.all_gather(w, ("fsdp", "dp"), axis=0, tiled=True)
        y = jnp.tanh(x @ wf)
        return y / pmax(jnp.max(jnp.abs(y)), ("dp", "fsdp") if bug == "amax-without-tp" else ("tp", "fsdp", "dp"))
    return f


C.smap("s.ckpt_rows_over_fsdp_dp_untiled_gather_transpose.dp2xfsdp2xtp2", M_FSDP, ckpt_body,
       (P(("dp", "fsdp")), P(("fsdp", "dp"), "tp")), P(("dp", "fsdp"), "tp"), ckpt_ref,
       (R(B17, K17), R(K17, N17, scale=0.4)),
       bugs=[("untiled-gather-not-transposed", ["wrong-reshape-order"]),
             ("tiled-gather-mesh-order", ["wrong-reshape-order"]), ("amax-without-tp", ["wrong-collective-group"])])
C.smap("s.ckpt_rows_over_fsdp_dp_tiled_gather.dp2xfsdp2xtp2", M_FSDP, lambda bug: ckpt_body("tiled-fsdp-dp"),
       (P(("dp", "fsdp")), P(("fsdp", "dp"), "tp")), P(("dp", "fsdp"), "tp"), ckpt_ref,
       (R(B17, K17), R(K17, N17, scale=0.4)))

# ---------------------------------------------------------------------------
# 18. the row-parallel layer of 10. with the contraction dim and the output
#     features over ('tp', 'fsdp') (not the mesh order): psum_scatter over
#     ('tp', 'fsdp'), the bias sliced at axis_index(('tp', 'fsdp')), and a
#     psum over ('tp', 'fsdp', 'dp') of the squared output for an RMS scale.


def rowpar2_ref(x, w, b):
    y = jax.nn.gelu(x @ w + b)
    return y * lax.rsqrt(jnp.mean(y * y) + 1e-6)


def rowpar2_body(bug):
    def f(x, w, b):
        order = ("fsdp", "tp") if bug == "scatter-mesh-order" else ("tp", "fsdp")
        y = lax.psum_scatter(x @ w, order, scatter_dimension=1, tiled=True)
        nb = y.shape[1]
        r = idx(("tp", "fsdp"))
        y = jax.nn.gelu(y + lax.dynamic_slice_in_dim(b, r * nb, nb))
        ss = psum(jnp.sum(y * y), ("tp", "dp") if bug == "ms-without-fsdp" else ("tp", "fsdp", "dp"))
        return y * lax.rsqrt(ss / (B10 * N10) + 1e-6)
    return f


C.smap("s.rowparallel_tp_fsdp_order_rms_scale.dp2xfsdp2xtp2", M_FSDP, rowpar2_body,
       (P("dp", ("tp", "fsdp")), P(("tp", "fsdp")), P()), P("dp", ("tp", "fsdp")), rowpar2_ref,
       (R(B10, K10), R(K10, N10, scale=0.3), R(N10)),
       bugs=[("scatter-mesh-order", ["wrong-reshape-order"]), ("ms-without-fsdp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 19. the HSDP step of 1.
C.gspmd("g.hsdp_tp_mlp_adamw_step.dp2xfsdp2xtp2", M_FSDP, (P(("dp", "fsdp")), P(("dp", "fsdp")), SPEC1, SS1),
        (SPEC1, SS1, P()), hsdp_ref, (X1, T1, P1, S1))

# 20. the contrastive loss of 2.
C.gspmd("g.clip_loss_two_axis_batch.dp2xfsdp2xtp2", M_FSDP, (P(("dp", "fsdp"), "tp"), P(("dp", "fsdp"), "tp")),
        P(), clip_ref, (IMG2, TXT2))

# 21. a two-layer 2-D tensor-parallel MLP.
MRC = make_mesh(M_RC)


def mlp2d(x, w1, w2):
    h = jax.nn.gelu(jnp.einsum("bmk,kn->bmn", x, w1))
    h = lax.with_sharding_constraint(h, NamedSharding(MRC, P("dp", ("row", "col"))))
    return jnp.einsum("bmn,nk->bmk", h, w2)


C.gspmd("g.mlp_2d_tensor_parallel.dp2xrow2xcol2", M_RC, (P("dp", "row", "col"), P("row", "col"), P("col", "row")),
        P("dp", "row", "col"), mlp2d, (R(2, M3, K3), R(K3, 24, scale=0.3), R(24, K3, scale=0.3)))


# 22. the MoE of 5., dense one-hot dispatch.
def moe_dense(x, wr, w1, w2):
    p = jax.nn.softmax(x @ wr, -1)
    oh = jax.nn.one_hot(jnp.argmax(p, -1), E5, dtype=x.dtype) * jnp.max(p, -1, keepdims=True)
    h = jax.nn.gelu(jnp.einsum("nd,edf->enf", x, w1))
    return jnp.einsum("ne,enf,efd->nd", oh, h, w2)


C.gspmd("g.moe_dense_dispatch_ep_tp.dp2xep2xtp2", M_EP, (P(("dp", "ep")), P(), P("ep", None, "tp"), P("ep", "tp")),
        P(("dp", "ep")), moe_dense, (X5, WR5, R(E5, D5, F5, scale=0.4), R(E5, F5, D5, scale=0.4)))

# 23. the training step of 13.
C.gspmd("g.seq_x_tensor_attention_train_step.dp2xsp2xtp2", M_SP, (SPEC13, SS13, P("dp", "sp"), P("dp", "sp")),
        (SPEC13, SS13, P()), sxt_train_ref, (P13, S13, X13, T13))

# 24. constraints over tuples of axes in different orders.
MSP = make_mesh(M_SP)


def layouts(x):
    y = jnp.cumsum(x, 0)
    y = lax.with_sharding_constraint(y, NamedSharding(MSP, P(None, ("tp", "dp"))))
    z = jax.nn.softmax(y, 0) * x
    z = lax.with_sharding_constraint(z, NamedSharding(MSP, P("sp", ("tp", "dp"))))
    return z.T @ z


C.gspmd("g.constraint_chain_tuple_orders.dp2xsp2xtp2", M_SP, (P(("dp", "sp", "tp")),), P(None, ("sp", "dp")),
        layouts, (R(16, 8),))

# 25. an MLP with the batch over ('fsdp', 'dp') (not the mesh order) and
#     the weights over (tp, fsdp) / (fsdp, tp).
C.gspmd("g.mlp_batch_fsdp_dp_order.dp2xfsdp2xtp2", M_FSDP, (P(("fsdp", "dp"), "tp"), P("tp", "fsdp"), P("fsdp", "tp")),
        P(("fsdp", "dp"), "tp"), lambda x, w1, w2: jax.nn.gelu(x @ w1) @ w2 + x,
        (R(16, 16), R(16, 32, scale=0.3), R(32, 16, scale=0.3)))

# 26. the row-parallel layer of 10. with its contraction dim over ('tp', 'fsdp').
C.gspmd("g.rowparallel_contraction_tp_fsdp.dp2xfsdp2xtp2", M_FSDP, (P("dp", ("tp", "fsdp")), P(("tp", "fsdp")), P()),
        P("dp", ("tp", "fsdp")), rowpar_ref, (R(B10, K10), R(K10, N10, scale=0.3), R(N10)))

C.finish()
