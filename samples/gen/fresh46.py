"""samples/fresh46: a 46th batch of programs as a user writes them, on the
theme of normalisation layers and residual block architectures under tensor
and sequence parallelism in current JAX / optax, none of them an idiom of
samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. a GPT-J / PaLM parallel block (x + attn(ln(x)) + mlp(ln(x))) with heads
    and the MLP hidden dim over tp, ONE psum of the summed attention and
    MLP partials, the residual and the MLP output bias added after it;
    batch over dp (dp2 x tp4). Bugs: residual added inside the psum
    (counted tp times), the bias inside the psum, only the MLP partial
    all-reduced.
 2. QK-norm (LayerNorm over the head dim, a shared gain per head dim) with
    the heads over tp (tp4, 2 heads per rank), output projection psum'd.
    Bugs: statistics over the (local) heads axis, statistics over the
    flattened local heads x head-dim (OLMo style on the shard only).
 3. RMSNorm with the normalised dim over tp (tp4): the mean square from a
    psum of local squared sums / D, the gain passed replicated and sliced
    at the rank's offset with dynamic_slice_in_dim; tiny activations
    (scale 1e-3) so that eps matters. Bugs: statistics of the local shard,
    the gain's first block on every rank, eps outside the sqrt.
 4. post-LN MLP block with the residual stream's hidden dim over tp: the up
    projection row-parallel (psum), the down projection column-parallel
    (local hidden block), LayerNorm with one-pass statistics (one psum of
    the stacked [sum, sum of squares], var = E[x^2] - mu^2). Bugs: variance
    about the local mean, the up projection not psum'd.
 5. sandwich norm (Gemma-2 style pre- and post-RMSNorm around attention),
    heads over tp (tp4): the post norm after the psum. Bugs: post norm
    applied to the partial sums before the psum, the residual inside the
    psum.
 6. DeepNorm post-LN MLP block under Megatron sequence parallelism (tp4):
    all_gather of the sequence, column/row-parallel MLP, psum_scatter back,
    LN(alpha * x + f(x)) with alpha = (2N)^(1/4) on the sequence block.
    Bugs: alpha on the sublayer instead of the residual, the scaled
    residual added before the reduce-scatter.
 7. ScaleNorm (g * x / max(||x||, eps)) with the sequence over sp and the
    hidden dim over tp (sp2 x tp4), a scalar gain, then a row-parallel
    projection; value_and_grad of an MSE inside the body (check_vma=True),
    loss pmean'd over sp. Bugs: the norm's squares psum'd over (sp, tp),
    the norm of the local shard.
 8. GroupNorm, channels-last, 8 groups of 4 channels over tp4 (whole groups
    per rank, so no collective is needed), gain and bias passed replicated
    and sliced. Bugs: the local channels split into 8 groups (not 8 / tp),
    the gain's first block, LayerNorm over the local channels.
 9. GroupNorm with 2 groups over tp4 (each group spans 2 ranks): per-rank
    [sum, sum of squares] all_gather'd and the rank pair's entries summed.
    Bugs: psum over all of tp (both groups merged), pairs formed as
    rank % 2.
10. a LayerScale (CaiT) ViT MLP block training step, dp2 x tp4,
    check_vma=True: gamma applied to the partial sums before the psum
    (linear, so correct), loss pmean'd over dp, jax.grad, optax.sgd with
    momentum. Bugs: loss not pmean'd over dp inside the grad (replicated
    gradients summed over dp, twice as large; only the reported loss
    averaged), gamma's gradient psum'd over tp again by hand.
11. a 3-layer scan of ReZero-style gated residual blocks
    x + tanh(alpha_l) * psum(mlp_l(rms(x, g_l))) with stacked layer weights
    over tp4. Bugs: the residual inside the psum, every layer using the
    first layer's gain.
12. mixture-of-depths routed residuals with the hidden dim over tp4 and
    batch over dp2: router logits psum'd, top-k tokens per row processed by
    the MLP, gated by sigmoid(router) and scattered back; the rest pass
    through. Bugs: top-k of the local partial router logits, unrouted
    tokens zeroed.
13. an RMSNorm + head training step with the hidden dim over tp
    (dp2 x tp4, check_vma=True), the mean square as a pmean of local means
    (equal shards: correct), optax.adamw. Bugs: psum of local means (tp
    times too large), the sharded gain's gradient psum'd over tp.
14. the parallel block of 1. with the residual and the bias folded into
    the one psum, added by tp rank 0 only (jnp.where on axis_index). Bugs:
    rank 0 of the dp axis (every tp rank of dp rank 0 adds it, those of
    dp rank 1 none), the residual dropped (only the bias added).
15. the parallel block of 1. with the residual pre-divided by tp and added
    on every rank inside the reduction, the MLP with lax.dot_general, the
    all-reduce as psum_scatter (hidden dim) + all_gather. Bugs: residual
    divided by 2 (dp) not 4, the all_gather along the sequence then
    reshaped.
16. LayerNorm with the hidden dim over tp, two-pass statistics as pmean's
    of local means, the replicated gain and bias cut by
    reshape(tp, -1)[rank]; inputs with a per-token offset. Bugs: the gain
    cut strided (reshape(-1, tp)[:, rank]), the mean not subtracted.
17. pre-LN attention with Ulysses sequence parallelism (sp4): the RMSNorm
    on the sequence block, all_to_all to heads, causal attention over the
    whole sequence, all_to_all back. Bug: the residual taken from the
    normalised input.
18. as 17., back by hand: the heads all_gather'd (the whole sequence), then
    the rank's sequence block by reshape and index. Bug: block 3 - rank.
    (A first draft took the block first and gathered the heads after --
    wrong, as its numerics showed; fixed.)
19. RMSNorm (baseline x / sqrt) written as x * rsqrt, the mean square a
    pmean of einsum'd local sums, gain sharded with x, a row-parallel
    projection (dp2 x tp4). Bugs: pmean over dp, projection not psum'd.
20. mixture-of-depths with the sequence over sp4: router logits
    all_gather'd, the k-th largest as threshold, tokens with r >= kth
    processed (the baseline: top_k indices and a scatter-add). Bugs: the
    threshold from the local logits, a strict threshold (drops the k-th).
21. LayerScale after a column-parallel projection (gamma sharded with
    the output's hidden dim), all_gather'd after the scale. Bugs: the
    local gamma tiled over the gathered output, an untiled gather along a
    new leading axis reshaped to the output.
22. LayerNorm on a 2-D mesh (sequence over row2, hidden over col4) and a
    projection contracting the hidden dim. Bugs: mean psum'd over row,
    projection psum'd over (row, col).
23. the DeepNorm block of 6. with alpha * x (whole sequence) / tp folded
    into the reduce-scatter. Bugs: not divided by tp, added on rank 0 only
    but still divided. (A first-draft bug, scattering over the hidden dim
    and all_to_all'ing back, turned out correct: it is now family 23b.)
23b. as 6., the reduce-scatter over the hidden dim then an all_to_all
    (split sequence, concatenate hidden) back to the sequence block, the
    residual added on tp rank 0 only. Bug: rank 1 adds it, doubled.
24. the sandwich block of 5. with the partials reduced as pmean * tp and
    the post norm's gain all_gather'd from a tp-sharded vector. Bugs: the
    partials scaled by tp but not reduced, the local gain tiled. (A
    first-draft bug, the pmean not rescaled, is hidden by the post norm's
    scale invariance -- it changes only the eps term, 8e-6 -- dropped.)
25. the GroupNorm of 9. with the group statistics as one psum over tp of
    the stats masked to each group's ranks, the rank's group picked after.
    Bugs: group of rank = rank % 2, the first group's stats everywhere.
26. a bf16 pre-RMSNorm SiLU MLP block with the hidden dim
    over tp (dp2 x tp4): f32 statistics psum'd, the normalised input
    all_gather'd, the partials reduce-scattered in bf16. Bugs: statistics
    of the local shard, the residual added before the reduce-scatter.
27. a 2-layer post-LN stack under Megatron sequence parallelism as a
    training step (lax.scan over stacked layers, jax.checkpoint, jax.grad
    inside the body with check_vma=True, optax.adamw). Bug: psum and the
    first sequence block taken on every rank.
28. a ScaleNorm + row-parallel head loss, hidden over tp, batch over dp
    (check_vma=False): the loss, equal on every tp rank after the head's
    psum, pmean'd over (dp, tp) to be safe. Bugs: psum over (dp, tp) / dp
    (tp times too large), pmean over tp only (the dp-local loss).
GSPMD pairs (jax.jit with in/out shardings): 29. the parallel block of 1.
(dp2 x tp4); 30. the post-LN block of 4. with the hidden dim sharded;
31. the DeepNorm block of 6. as a training step (jax.grad, optax.sgd) with
sequence-sharding constraints; 32. the GroupNorm of 9. (channels over tp4);
33. QK-norm attention of 2. with its gradient (heads over tp4); 34. a bf16
sandwich-norm block with f32 statistics (tp4); 35. the mixture-of-depths
block of 12. (dp2 x tp4); 36. the ScaleNorm value_and_grad of 7.
(sp2 x tp4); 37. the RMSNorm + row-parallel projection of 19. (dp2 x tp4);
38. the column-parallel LayerScale block of 21. (tp4).
Numerics: every correct pair agrees with its baseline at rounding level
(f32: within 1e-6 relative; the bf16 block of 26. within one bf16 ulp,
0.03 at 6.9); every bug variant differs clearly (see "numerics").
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh46.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P, NamedSharding
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh46.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh46.py"
C = Corpus("samples/fresh46", SCRIPT, "samples/gen/run_fresh46.sh", sys.argv[1:])
rng, R, I = seeded(4646)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index


def layernorm(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = jnp.square(x - mu).mean(-1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps) * g + b


def rmsnorm(x, g, eps=1e-6):
    return x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * g


def causal_attn(q, k, v):
    t = q.shape[1]
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e30)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


B, T, D, H, E, F = 4, 8, 32, 8, 4, 64

# ---------------------------------------------------------------------------
# 1. GPT-J / PaLM parallel block, one all-reduce.


def par_block(x, g, b, wq, wk, wv, wo, w1, w2, b2):
    h = layernorm(x, g, b)
    q, k, v = (jnp.einsum("btd,dhe->bthe", h, w) for w in (wq, wk, wv))
    a = jnp.einsum("bthe,hed->btd", causal_attn(q, k, v), wo)
    m = jax.nn.gelu(h @ w1) @ w2 + b2
    return x + a + m


def par_block_tp(bug):
    def f(x, g, b, wq, wk, wv, wo, w1, w2, b2):
        h = layernorm(x, g, b)
        q, k, v = (jnp.einsum("btd,dhe->bthe", h, w) for w in (wq, wk, wv))
        a = jnp.einsum("bthe,hed->btd", causal_attn(q, k, v), wo)
        m = jax.nn.gelu(h @ w1) @ w2
        if bug == "residual-inside-psum":
            return psum(x + a + m, "tp") + b2
        if bug == "bias-inside-psum":
            return x + psum(a + m + b2, "tp")
        if bug == "attn-partial-not-reduced":
            return x + a + psum(m, "tp") + b2
        return x + psum(a + m, "tp") + b2
    return f


PB_ARGS = (R(B, T, D), 1.0 + R(D, scale=0.1), R(D, scale=0.1), R(D, H, E, scale=0.2), R(D, H, E, scale=0.2),
           R(D, H, E, scale=0.2), R(H, E, D, scale=0.2), R(D, F, scale=0.2), R(F, D, scale=0.2), R(D, scale=0.1))
PB_SPECS = (P("dp"), P(), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P(None, "tp"), P("tp"), P())
C.smap("s.parallel_attn_mlp_block_one_allreduce.dp2xtp4", {"dp": 2, "tp": 4}, par_block_tp, PB_SPECS, P("dp"),
       par_block, PB_ARGS,
       bugs=[("residual-inside-psum", ["wrong-scale"]), ("bias-inside-psum", ["wrong-scale"]),
             ("attn-partial-not-reduced", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 2. QK-norm (LayerNorm over the head dim) with heads over tp.


def qk_ln(x, g, axis=-1, eps=1e-6):
    mu = jnp.mean(x, axis, keepdims=True)
    var = jnp.var(x, axis, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * g


def qknorm_attn(x, wq, wk, wv, wo, gq, gk):
    q = qk_ln(jnp.einsum("btd,dhe->bthe", x, wq), gq)
    k = qk_ln(jnp.einsum("btd,dhe->bthe", x, wk), gk)
    v = jnp.einsum("btd,dhe->bthe", x, wv)
    return jnp.einsum("bthe,hed->btd", causal_attn(q, k, v), wo)


def qknorm_tp(bug):
    def norm(y, g):
        if bug == "stats-over-heads-axis":
            return qk_ln(y, g, axis=-2)
        if bug == "stats-over-local-heads-flat":
            b_, t_, h_, e_ = y.shape
            return qk_ln(y.reshape(b_, t_, h_ * e_), jnp.tile(g, h_)).reshape(y.shape)
        return qk_ln(y, g)

    def f(x, wq, wk, wv, wo, gq, gk):
        q = norm(jnp.einsum("btd,dhe->bthe", x, wq), gq)
        k = norm(jnp.einsum("btd,dhe->bthe", x, wk), gk)
        v = jnp.einsum("btd,dhe->bthe", x, wv)
        return psum(jnp.einsum("bthe,hed->btd", causal_attn(q, k, v), wo), "tp")
    return f


QK_ARGS = (R(2, T, D), R(D, H, E, scale=0.4), R(D, H, E, scale=0.4), R(D, H, E, scale=0.4), R(H, E, D, scale=0.3),
           1.0 + R(E, scale=0.2), 1.0 + R(E, scale=0.2))
QK_SPECS = (P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P(), P())
C.smap("s.qk_layernorm_heads_over_tp.tp4", {"tp": 4}, qknorm_tp, QK_SPECS, P(), qknorm_attn, QK_ARGS,
       bugs=[("stats-over-heads-axis", ["wrong-axis"]), ("stats-over-local-heads-flat", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 3. RMSNorm with the normalised dim over tp, replicated gain sliced on device.


def rms_sharded(bug):
    def f(x, g):
        dl = x.shape[-1]
        ss = jnp.sum(x * x, -1, keepdims=True)
        ms = ss / dl if bug == "local-stats" else psum(ss, "tp") / (dl * 4)
        off = 0 if bug == "gain-not-sliced" else idx("tp") * dl
        gl = lax.dynamic_slice_in_dim(g, off, dl)
        if bug == "eps-outside-sqrt":
            return x / (jnp.sqrt(ms) + 1e-6) * gl
        return x / jnp.sqrt(ms + 1e-6) * gl
    return f


C.smap("s.rmsnorm_hidden_over_tp_gain_sliced.tp4", {"tp": 4}, rms_sharded, (P(None, None, "tp"), P()),
       P(None, None, "tp"), rmsnorm, (R(B, T, D, scale=1e-3), 1.0 + R(D, scale=0.3)),
       bugs=[("local-stats", ["missing-all-reduce"]), ("gain-not-sliced", ["wrong-offset"]),
             ("eps-outside-sqrt", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 4. post-LN MLP block, residual stream's hidden dim over tp, one-pass stats.


def postln_block(x, w1, w2, g, b):
    return layernorm(x + jax.nn.gelu(x @ w1) @ w2, g, b)


def postln_tp(bug):
    def f(x, w1, w2, g, b):
        pre = x @ w1
        h = jax.nn.gelu(pre if bug == "up-proj-not-psummed" else psum(pre, "tp"))
        y = x + h @ w2
        n = y.shape[-1] * 4
        if bug == "var-about-local-mean":
            mu = psum(y.sum(-1, keepdims=True), "tp") / n
            var = psum(jnp.square(y - y.mean(-1, keepdims=True)).sum(-1, keepdims=True), "tp") / n
        else:
            s = psum(jnp.stack([y.sum(-1), (y * y).sum(-1)]), "tp") / n
            mu, var = s[0][..., None], (s[1] - s[0] * s[0])[..., None]
        return (y - mu) * lax.rsqrt(var + 1e-5) * g + b
    return f


C.smap("s.postln_mlp_hidden_sharded_onepass_stats.tp4", {"tp": 4}, postln_tp,
       (P(None, None, "tp"), P("tp"), P(None, "tp"), P("tp"), P("tp")), P(None, None, "tp"), postln_block,
       (R(B, T, D), R(D, F, scale=0.2), R(F, D, scale=0.2), 1.0 + R(D, scale=0.1), R(D, scale=0.1)),
       bugs=[("var-about-local-mean", ["wrong-reduction"]), ("up-proj-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 5. sandwich norm around attention (pre- and post-RMSNorm), heads over tp.


def sandwich(x, g1, g2, wq, wk, wv, wo):
    h = rmsnorm(x, g1)
    q, k, v = (jnp.einsum("btd,dhe->bthe", h, w) for w in (wq, wk, wv))
    return x + rmsnorm(jnp.einsum("bthe,hed->btd", causal_attn(q, k, v), wo), g2)


def sandwich_tp(bug):
    def f(x, g1, g2, wq, wk, wv, wo):
        h = rmsnorm(x, g1)
        q, k, v = (jnp.einsum("btd,dhe->bthe", h, w) for w in (wq, wk, wv))
        o = jnp.einsum("bthe,hed->btd", causal_attn(q, k, v), wo)
        if bug == "post-norm-before-psum":
            return x + psum(rmsnorm(o, g2), "tp")
        if bug == "residual-inside-psum":
            return rmsnorm(psum(o, "tp"), g2) + psum(x, "tp")
        return x + rmsnorm(psum(o, "tp"), g2)
    return f


SW_ARGS = (R(B, T, D), 1.0 + R(D, scale=0.1), 1.0 + R(D, scale=0.1), R(D, H, E, scale=0.3), R(D, H, E, scale=0.3),
           R(D, H, E, scale=0.3), R(H, E, D, scale=0.3))
C.smap("s.sandwich_norm_attention_heads_tp.tp4", {"tp": 4}, sandwich_tp,
       (P(), P(), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P(), sandwich, SW_ARGS,
       bugs=[("post-norm-before-psum", ["wrong-order"]), ("residual-inside-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 6. DeepNorm post-LN block under Megatron sequence parallelism.
NLAYERS = 6
ALPHA = (2 * NLAYERS) ** 0.25


def deepnorm(x, w1, w2, g, b):
    return layernorm(ALPHA * x + jax.nn.gelu(x @ w1) @ w2, g, b)


def deepnorm_sp(bug):
    def f(x, w1, w2, g, b):
        xf = lax.all_gather(x, "tp", axis=1, tiled=True)
        part = jax.nn.gelu(xf @ w1) @ w2
        if bug == "residual-before-reduce-scatter":
            y = lax.psum_scatter(ALPHA * xf + part, "tp", scatter_dimension=1, tiled=True)
        else:
            fo = lax.psum_scatter(part, "tp", scatter_dimension=1, tiled=True)
            y = x + ALPHA * fo if bug == "alpha-on-sublayer" else ALPHA * x + fo
        return layernorm(y, g, b)
    return f


DN_ARGS = (R(B, T, D), R(D, F, scale=0.2), R(F, D, scale=0.2), 1.0 + R(D, scale=0.1), R(D, scale=0.1))
C.smap("s.deepnorm_postln_megatron_sp.tp4", {"tp": 4}, deepnorm_sp,
       (P(None, "tp"), P(None, "tp"), P("tp"), P(), P()), P(None, "tp"), deepnorm, DN_ARGS,
       bugs=[("alpha-on-sublayer", ["wrong-scale"]), ("residual-before-reduce-scatter", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. ScaleNorm, sequence over sp and hidden over tp, value_and_grad inside.


def scalenorm(x, g, eps=1e-5):
    return g * x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


def sn_loss(g, w, x, y):
    return jnp.mean(jnp.square(scalenorm(x, g) @ w - y))


def sn_ref(g, w, x, y):
    return jax.value_and_grad(sn_loss, argnums=(0, 1))(g, w, x, y)


def sn_tp(bug):
    def f(g, w, x, y):
        def loss(g, w):
            sq = jnp.sum(x * x, -1, keepdims=True)
            if bug == "norm-psum-over-sp-and-tp":
                sq = psum(sq, ("sp", "tp"))
            elif bug != "local-norm":
                sq = psum(sq, "tp")
            z = g * x / jnp.maximum(jnp.sqrt(sq), 1e-5)
            out = psum(z @ w, "tp")
            return pmean(jnp.mean(jnp.square(out - y)), "sp")
        return jax.value_and_grad(loss, argnums=(0, 1))(g, w)
    return f


SN_ARGS = (jnp.float32(np.sqrt(D)), R(D, 16, scale=0.3), R(B, T, D), R(B, T, 16))
C.smap("s.scalenorm_sp_tp_value_and_grad.sp2xtp4", {"sp": 2, "tp": 4}, sn_tp,
       (P(), P("tp"), P(None, "sp", "tp"), P(None, "sp")), (P(), (P(), P("tp"))), sn_ref, SN_ARGS,
       bugs=[("norm-psum-over-sp-and-tp", ["wrong-axis"]), ("local-norm", ["missing-all-reduce"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 8. / 9. GroupNorm with channels over tp.
CH = 32


def groupnorm(x, g, b, groups, eps=1e-5):
    n, s, c = x.shape
    xg = x.reshape(n, s, groups, c // groups)
    mu = xg.mean((1, 3), keepdims=True)
    var = xg.var((1, 3), keepdims=True)
    return ((xg - mu) / jnp.sqrt(var + eps)).reshape(x.shape) * g + b


def gn_local(bug):
    def f(x, g, b):
        cl = x.shape[-1]
        off = 0 if bug == "gain-not-sliced" else idx("tp") * cl
        gl, bl = lax.dynamic_slice_in_dim(g, off, cl), lax.dynamic_slice_in_dim(b, idx("tp") * cl, cl)
        if bug == "layernorm-over-local-channels":
            return groupnorm(x, gl, bl, 1)
        return groupnorm(x, gl, bl, 8 if bug == "groups-not-divided" else 8 // 4)
    return f


GN_ARGS = (R(2, 16, CH) + 0.5, 1.0 + R(CH, scale=0.3), R(CH, scale=0.3))
C.smap("s.groupnorm_whole_groups_per_rank.tp4", {"tp": 4}, gn_local, (P(None, None, "tp"), P(), P()),
       P(None, None, "tp"), lambda x, g, b: groupnorm(x, g, b, 8), GN_ARGS,
       bugs=[("groups-not-divided", ["wrong-shape"]), ("gain-not-sliced", ["wrong-offset"]),
             ("layernorm-over-local-channels", ["wrong-axis"])])


def gn_span(bug):
    def f(x, g, b):
        cnt = x.shape[1] * x.shape[2] * 2  # elements of a group (2 ranks)
        st = jnp.stack([x.sum((1, 2)), (x * x).sum((1, 2))])  # (2, n)
        if bug == "psum-all-tp":
            tot = psum(st, "tp")
            cnt = cnt * 2
        else:
            allst = lax.all_gather(st, "tp")  # (4, 2, n)
            me = idx("tp")
            pair = (me % 2 + jnp.arange(2) * 2) if bug == "pairs-by-rank-mod-2" else (me // 2 * 2 + jnp.arange(2))
            tot = allst[pair].sum(0)
        mu = (tot[0] / cnt)[:, None, None]
        var = (tot[1] / cnt)[:, None, None] - mu * mu
        return (x - mu) * lax.rsqrt(var + 1e-5) * g + b
    return f


GN2_ARGS = (R(2, 16, CH) * np.repeat(np.array([1.0, 3.0, 0.5, 2.0], np.float32), 8) + 0.3,
            1.0 + R(CH, scale=0.3), R(CH, scale=0.3))
C.smap("s.groupnorm_group_spans_two_ranks.tp4", {"tp": 4}, gn_span, (P(None, None, "tp"), P("tp"), P("tp")),
       P(None, None, "tp"), lambda x, g, b: groupnorm(x, g, b, 2), GN2_ARGS,
       bugs=[("psum-all-tp", ["wrong-axis"]), ("pairs-by-rank-mod-2", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 10. LayerScale ViT MLP block training step (dp2 x tp4, check_vma=True).
OPT_LS = optax.sgd(0.05, momentum=0.9)
LS_SPEC = {"g": P(), "b": P(), "w1": P(None, "tp"), "w2": P("tp"), "gamma": P(), "head": P()}


def ls_fwd(p, x, reduce=lambda y: y, scale_partial=False):
    h = layernorm(x, p["g"], p["b"])
    m = jax.nn.gelu(h @ p["w1"]) @ p["w2"]
    y = x + (reduce(p["gamma"] * m) if scale_partial else p["gamma"] * reduce(m))
    return jnp.mean(y, 1) @ p["head"]


def ls_step(p, s, x, lbl):
    def loss(p):
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(ls_fwd(p, x), lbl))
    l, gr = jax.value_and_grad(loss)(p)
    u, s = OPT_LS.update(gr, s, p)
    return optax.apply_updates(p, u), s, l


def ls_step_tp(bug):
    def f(p, s, x, lbl):
        def loss(p):
            lg = ls_fwd(p, x, lambda y: psum(y, "tp"), scale_partial=True)
            l = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, lbl))
            return l if bug == "loss-not-pmean-dp" else pmean(l, "dp")
        l, gr = jax.value_and_grad(loss)(p)
        if bug == "loss-not-pmean-dp":
            l = pmean(l, "dp")  # only the reported loss averaged
        if bug == "gamma-grad-psummed-again":
            gr = dict(gr, gamma=psum(gr["gamma"], "tp"))
        u, s = OPT_LS.update(gr, s, p)
        return optax.apply_updates(p, u), s, l
    return f


LS_P = {"g": 1.0 + R(D, scale=0.1), "b": R(D, scale=0.1), "w1": R(D, F, scale=0.2), "w2": R(F, D, scale=0.2),
        "gamma": np.full((D,), 0.1, np.float32) + R(D, scale=0.02), "head": R(D, 10, scale=0.3)}
LS_S = OPT_LS.init(LS_P)
LS_SS = state_specs(LS_S, LS_SPEC)
C.smap("s.layerscale_vit_mlp_train_sgdm.dp2xtp4", {"dp": 2, "tp": 4}, ls_step_tp,
       (LS_SPEC, LS_SS, P("dp"), P("dp")), (LS_SPEC, LS_SS, P()), ls_step,
       (LS_P, LS_S, R(B, T, D), I(0, 10, B)),
       bugs=[("loss-not-pmean-dp", ["missing-all-reduce"]), ("gamma-grad-psummed-again", ["wrong-scale"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 11. scan over ReZero-style gated residual blocks, stacked weights over tp.
NL = 3


def rezero_stack(x, g, w1, w2, alpha):
    def layer(x, p):
        gl, a, b_, al = p
        return x + jnp.tanh(al) * (jax.nn.gelu(rmsnorm(x, gl) @ a) @ b_), None
    return lax.scan(layer, x, (g, w1, w2, alpha))[0]


def rezero_tp(bug):
    def f(x, g, w1, w2, alpha):
        def layer(carry, p):
            x, i = carry
            gl, a, b_, al = p
            if bug == "first-layer-gain-everywhere":
                gl = g[0]
            part = jax.nn.gelu(rmsnorm(x, gl) @ a) @ b_
            if bug == "residual-inside-psum":
                return (psum(x + jnp.tanh(al) * part, "tp"), i + 1), None
            return (x + jnp.tanh(al) * psum(part, "tp"), i + 1), None
        return lax.scan(layer, (x, 0), (g, w1, w2, alpha))[0][0]
    return f


C.smap("s.rezero_gated_residual_scan.tp4", {"tp": 4}, rezero_tp, (P(), P(), P(None, None, "tp"), P(None, "tp"), P()),
       P(), rezero_stack,
       (R(B, T, D), 1.0 + R(NL, D, scale=0.4), R(NL, D, F, scale=0.2), R(NL, F, D, scale=0.2),
        np.array([0.3, -0.5, 0.8], np.float32)),
       bugs=[("residual-inside-psum", ["wrong-scale"]), ("first-layer-gain-everywhere", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 12. mixture-of-depths routed residuals, hidden over tp, batch over dp.
KSEL = 4


def mod_block(x, wr, w1, w2):
    r = x @ wr  # (b, t)
    _, sel = lax.top_k(r, KSEL)
    xs = jnp.take_along_axis(x, sel[..., None], 1)
    rs = jnp.take_along_axis(r, sel, 1)
    out = jax.nn.gelu(xs @ w1) @ w2 * jax.nn.sigmoid(rs)[..., None]
    bi = jnp.arange(x.shape[0])[:, None]
    return x.at[bi, sel].add(out)


def mod_tp(bug):
    def f(x, wr, w1, w2):
        r_part = x @ wr
        r = r_part if bug == "router-local-logits" else psum(r_part, "tp")
        _, sel = lax.top_k(r, KSEL)
        xs = jnp.take_along_axis(x, sel[..., None], 1)
        rs = jnp.take_along_axis(psum(r_part, "tp"), sel, 1)
        hid = jax.nn.gelu(psum(xs @ w1, "tp"))
        out = hid @ w2 * jax.nn.sigmoid(rs)[..., None]
        bi = jnp.arange(x.shape[0])[:, None]
        base = jnp.zeros_like(x) if bug == "unrouted-tokens-zeroed" else x
        return base.at[bi, sel].add(out)
    return f


C.smap("s.mixture_of_depths_routed_residual.dp2xtp4", {"dp": 2, "tp": 4}, mod_tp,
       (P("dp", None, "tp"), P("tp"), P("tp"), P(None, "tp")), P("dp", None, "tp"), mod_block,
       (R(B, T, D), R(D, scale=0.5), R(D, F, scale=0.2), R(F, D, scale=0.2)),
       bugs=[("router-local-logits", ["missing-all-reduce"]), ("unrouted-tokens-zeroed", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 13. RMSNorm + head training step, hidden over tp, pmean of local means.
OPT13 = optax.adamw(3e-3, weight_decay=0.01)
SP13 = {"g": P("tp"), "w": P("tp")}


def step13(p, s, x, y):
    def loss(p):
        return jnp.mean(jnp.square(rmsnorm(x, p["g"]) @ p["w"] - y))
    l, gr = jax.value_and_grad(loss)(p)
    u, s = OPT13.update(gr, s, p)
    return optax.apply_updates(p, u), s, l


def step13_tp(bug):
    def f(p, s, x, y):
        def loss(p):
            lm = jnp.mean(x * x, -1, keepdims=True)
            ms = psum(lm, "tp") if bug == "psum-of-local-means" else pmean(lm, "tp")
            z = x * lax.rsqrt(ms + 1e-6) * p["g"]
            l = jnp.mean(jnp.square(psum(z @ p["w"], "tp") - y))
            return pmean(l, "dp")
        l, gr = jax.value_and_grad(loss)(p)
        if bug == "gain-grad-psummed-over-tp":
            gr = dict(gr, g=psum(gr["g"], "tp"))
        u, s = OPT13.update(gr, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P13 = {"g": 1.0 + R(D, scale=0.2), "w": R(D, 8, scale=0.3)}
S13 = OPT13.init(P13)
SS13 = state_specs(S13, SP13)
C.smap("s.rmsnorm_head_train_adamw_pmean_stats.dp2xtp4", {"dp": 2, "tp": 4}, step13_tp,
       (SP13, SS13, P("dp", None, "tp"), P("dp")), (SP13, SS13, P()), step13,
       (P13, S13, R(B, T, D), R(B, T, 8)),
       bugs=[("psum-of-local-means", ["wrong-collective-op"]), ("gain-grad-psummed-over-tp", ["wrong-collective-op"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 14. the parallel block of 1. with the residual and bias folded into the
#     single all-reduce, added by tp rank 0 only (the Megatron bias trick).


def par_block_rank0(bug):
    def f(x, g, b, wq, wk, wv, wo, w1, w2, b2):
        h = layernorm(x, g, b)
        q, k, v = (jnp.einsum("btd,dhe->bthe", h, w) for w in (wq, wk, wv))
        a = jnp.einsum("bthe,hed->btd", causal_attn(q, k, v), wo)
        m = jax.nn.gelu(h @ w1) @ w2
        who = idx("dp") if bug == "rank0-of-dp-axis" else idx("tp")
        extra = x + b2 if bug != "bias-only-residual-dropped" else b2
        return psum(a + m + jnp.where(who == 0, extra, 0.0), "tp")
    return f


C.smap("s.parallel_block_residual_folded_rank0.dp2xtp4", {"dp": 2, "tp": 4}, par_block_rank0, PB_SPECS, P("dp"),
       par_block, PB_ARGS,
       bugs=[("rank0-of-dp-axis", ["wrong-axis"]), ("bias-only-residual-dropped", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 15. the parallel block of 1. with the residual pre-divided by tp and
#     folded into the all-reduce (x / tp on every rank), MLP written with
#     lax.dot_general, one psum_scatter + all_gather instead of the psum.


def par_block_div(bug):
    def f(x, g, b, wq, wk, wv, wo, w1, w2, b2):
        h = layernorm(x, g, b)
        q, k, v = (jnp.einsum("btd,dhe->bthe", h, w) for w in (wq, wk, wv))
        a = jnp.einsum("bthe,hed->btd", causal_attn(q, k, v), wo)
        up = lax.dot_general(h, w1, (((2,), (0,)), ((), ())))
        m = lax.dot_general(jax.nn.gelu(up), w2, (((2,), (0,)), ((), ())))
        frac = 2 if bug == "residual-divided-by-dp" else 4
        tot = a + m + x / frac
        rs = lax.psum_scatter(tot, "tp", scatter_dimension=2, tiled=True)
        if bug == "gather-wrong-dim":
            red = lax.all_gather(rs, "tp", axis=1, tiled=True).reshape(tot.shape)
        else:
            red = lax.all_gather(rs, "tp", axis=2, tiled=True)
        return red + b2
    return f


C.smap("s.parallel_block_residual_div_tp_rs_ag.dp2xtp4", {"dp": 2, "tp": 4}, par_block_div, PB_SPECS, P("dp"),
       par_block, PB_ARGS,
       bugs=[("residual-divided-by-dp", ["wrong-scale"]), ("gather-wrong-dim", ["wrong-layout"])])

# ---------------------------------------------------------------------------
# 16. LayerNorm with the hidden dim over tp, two-pass statistics as pmean's
#     of local means (equal shards), the replicated gain and bias cut to
#     the rank's block as g.reshape(tp, -1)[rank]. Inputs with a mean
#     offset per token.


def ln_pmean(bug):
    def f(x, g, b):
        r = idx("tp")
        gl, bl = g.reshape(4, -1)[r], b.reshape(4, -1)[r]
        if bug == "gain-strided-slice":
            gl = g.reshape(-1, 4)[:, r]
        mu = pmean(x.mean(-1, keepdims=True), "tp")
        if bug == "mean-not-subtracted":
            mu = jnp.zeros_like(mu)
        var = pmean(jnp.square(x - mu).mean(-1, keepdims=True), "tp")
        return (x - mu) * lax.rsqrt(var + 1e-5) * gl + bl
    return f


C.smap("s.layernorm_hidden_tp_pmean_two_pass.tp4", {"tp": 4}, ln_pmean, (P(None, None, "tp"), P(), P()),
       P(None, None, "tp"), layernorm, (R(B, T, D) + R(B, T, 1, scale=2.0), 1.0 + R(D, scale=0.3), R(D, scale=0.3)),
       bugs=[("gain-strided-slice", ["wrong-offset"]), ("mean-not-subtracted", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 17. a pre-LN attention block with Ulysses sequence parallelism (sp4): the
#     norm on the sequence block, all_to_all to heads, full-sequence causal
#     attention on the local heads, all_to_all back, residual on the block.


def preln_attn(x, g, wq, wk, wv, wo):
    h = rmsnorm(x, g)
    q, k, v = (jnp.einsum("btd,dhe->bthe", h, w) for w in (wq, wk, wv))
    return x + jnp.einsum("bthe,hed->btd", causal_attn(q, k, v), wo)


def ulysses(bug):
    def f(x, g, wq, wk, wv, wo):
        h = rmsnorm(x, g)
        q, k, v = (jnp.einsum("btd,dhe->bthe", h, w) for w in (wq, wk, wv))
        q, k, v = (lax.all_to_all(a, "sp", 2, 1, tiled=True) for a in (q, k, v))  # heads split, seq gathered
        o = causal_attn(q, k, v)
        o = lax.all_to_all(o, "sp", 1, 2, tiled=True)
        base = h if bug == "residual-from-normed" else x
        return base + jnp.einsum("bthe,hed->btd", o, wo)
    return f


C.smap("s.preln_ulysses_a2a_attention.sp4", {"sp": 4}, ulysses, (P(None, "sp"), P(), P(), P(), P(), P()),
       P(None, "sp"), preln_attn,
       (R(2, 16, D), 1.0 + R(D, scale=0.2), R(D, H, E, scale=0.3), R(D, H, E, scale=0.3), R(D, H, E, scale=0.3),
        R(H, E, D, scale=0.3)),
       bugs=[("residual-from-normed", ["wrong-value"])])


def ulysses_blk(bug):
    """As 17., back by hand: the heads all_gather'd, then the rank's
    sequence block by a reshape and an index."""
    def f(x, g, wq, wk, wv, wo):
        h = rmsnorm(x, g)
        q, k, v = (jnp.einsum("btd,dhe->bthe", h, w) for w in (wq, wk, wv))
        q, k, v = (lax.all_to_all(a, "sp", 2, 1, tiled=True) for a in (q, k, v))
        o = causal_attn(q, k, v)
        o = lax.all_gather(o, "sp", axis=2, tiled=True)  # (b, T, H, e): every head, whole sequence
        blk = o.reshape(o.shape[0], 4, -1, *o.shape[2:])
        me = 3 - idx("sp") if bug == "back-block-reversed" else idx("sp")
        o = blk[:, me]
        return x + jnp.einsum("bthe,hed->btd", o, wo)
    return f


C.smap("s.preln_ulysses_back_by_block_gather.sp4", {"sp": 4}, ulysses_blk,
       (P(None, "sp"), P(), P(), P(), P(), P()), P(None, "sp"), preln_attn,
       (R(2, 16, D), 1.0 + R(D, scale=0.2), R(D, H, E, scale=0.3), R(D, H, E, scale=0.3), R(D, H, E, scale=0.3),
        R(H, E, D, scale=0.3)),
       bugs=[("back-block-reversed", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 19. RMSNorm (baseline x / sqrt(.)) written on device as x * rsqrt(.), the
#     mean square a pmean of einsum'd local sums times 1 / local size, the
#     gain sharded with x, then a row-parallel projection (dp2 x tp4).


def rms_proj(x, g, w):
    return rmsnorm(x, g) @ w


def rms_proj_tp(bug):
    def f(x, g, w):
        ss = jnp.einsum("btd,btd->bt", x, x) * (1.0 / x.shape[-1])
        ms = pmean(ss, "dp" if bug == "pmean-over-dp" else "tp")
        y = x * lax.rsqrt(ms + 1e-6)[..., None] * g
        out = y @ w
        return out if bug == "projection-not-psummed" else psum(out, "tp")
    return f


C.smap("s.rmsnorm_rsqrt_einsum_rowparallel.dp2xtp4", {"dp": 2, "tp": 4}, rms_proj_tp,
       (P("dp", None, "tp"), P("tp"), P("tp")), P("dp"), rms_proj, (R(B, T, D), 1.0 + R(D, scale=0.2), R(D, 16, scale=0.3)),
       bugs=[("pmean-over-dp", ["wrong-axis"]), ("projection-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 20. mixture-of-depths over a sequence split over sp4: the router logits
#     all_gather'd, the k-th largest as a threshold, a local mask r >= kth
#     (the baseline picks the top-k by index and scatters).
K20 = 6


def mod_seq(x, wr, w1, w2):
    r = x @ wr
    _, sel = lax.top_k(r, K20)
    bi = jnp.arange(x.shape[0])[:, None]
    xs = x[bi, sel]
    out = jax.nn.gelu(xs @ w1) @ w2 * jax.nn.sigmoid(r[bi, sel])[..., None]
    return x.at[bi, sel].add(out)


def mod_seq_sp(bug):
    def f(x, wr, w1, w2):
        r = x @ wr  # (b, t_local)
        if bug == "threshold-from-local-logits":
            kth = lax.top_k(r, K20 // 4 + 1)[0][:, -1]
        else:
            kth = lax.top_k(lax.all_gather(r, "sp", axis=1, tiled=True), K20)[0][:, -1]
        keep = (r > kth[:, None]) if bug == "strict-threshold" else (r >= kth[:, None])
        upd = jax.nn.gelu(x @ w1) @ w2 * jax.nn.sigmoid(r)[..., None]
        return x + jnp.where(keep[..., None], upd, 0.0)
    return f


C.smap("s.mod_threshold_routing_seq_sp.sp4", {"sp": 4}, mod_seq_sp, (P(None, "sp"), P(), P(), P()), P(None, "sp"),
       mod_seq, (R(2, 16, D), R(D, scale=0.5), R(D, F, scale=0.2), R(F, D, scale=0.2)),
       bugs=[("threshold-from-local-logits", ["missing-collective"]), ("strict-threshold", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 21. LayerScale with a column-parallel output projection: the residual
#     stream replicated, the MLP output's hidden dim over tp, gamma
#     sharded with it, all_gather'd after the scale.


def ls_col(x, g, b, w1, w2, gamma):
    return x + gamma * (jax.nn.gelu(layernorm(x, g, b) @ w1) @ w2)


def ls_col_tp(bug):
    def f(x, g, b, w1, w2, gamma):
        m = jax.nn.gelu(layernorm(x, g, b) @ w1) @ w2  # (b, t, D / tp)
        if bug == "gamma-tiled-after-gather":
            return x + jnp.tile(gamma, 4) * lax.all_gather(m, "tp", axis=2, tiled=True)
        if bug == "gather-untiled-reshaped":
            return x + lax.all_gather(gamma * m, "tp", axis=0, tiled=False).reshape(x.shape)
        return x + lax.all_gather(gamma * m, "tp", axis=2, tiled=True)
    return f


C.smap("s.layerscale_colparallel_gamma_sharded.tp4", {"tp": 4}, ls_col_tp,
       (P(), P(), P(), P(), P(None, "tp"), P("tp")), P(), ls_col,
       (R(B, T, D), 1.0 + R(D, scale=0.1), R(D, scale=0.1), R(D, F, scale=0.2), R(F, D, scale=0.2),
        0.1 + R(D, scale=0.05)),
       bugs=[("gamma-tiled-after-gather", ["wrong-offset"]), ("gather-untiled-reshaped", ["wrong-layout"])])

# ---------------------------------------------------------------------------
# 22. LayerNorm on a 2-D mesh (sequence over row2, hidden over col4), then
#     a projection contracting the sharded hidden dim.


def ln_proj(x, g, b, w):
    return layernorm(x, g, b) @ w


def ln2d(bug):
    def f(x, g, b, w):
        n = x.shape[-1] * 4
        mu = psum(x.sum(-1, keepdims=True), "row" if bug == "mean-psum-over-row" else "col") / n
        var = psum(jnp.square(x - mu).sum(-1, keepdims=True), "col") / n
        y = ((x - mu) * lax.rsqrt(var + 1e-5) * g + b) @ w
        return psum(y, ("row", "col") if bug == "proj-psum-over-both" else "col")
    return f


C.smap("s.layernorm_2d_mesh_row_col.row2xcol4", {"row": 2, "col": 4}, ln2d,
       (P(None, "row", "col"), P("col"), P("col"), P("col")), P(None, "row"), ln_proj,
       (R(B, T, D) + 0.5, 1.0 + R(D, scale=0.2), R(D, scale=0.2), R(D, 16, scale=0.3)),
       bugs=[("mean-psum-over-row", ["wrong-axis"]), ("proj-psum-over-both", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 23. the DeepNorm block of 6. with the scaled residual folded into the
#     reduce-scatter, pre-divided by tp (alpha * x_full / tp on every rank).


def deepnorm_fold(bug):
    def f(x, w1, w2, g, b):
        xf = lax.all_gather(x, "tp", axis=1, tiled=True)
        part = jax.nn.gelu(xf @ w1) @ w2
        if bug == "residual-rank0-only-but-divided":
            res = jnp.where(idx("tp") == 0, ALPHA * xf / 4, 0.0)
        else:
            res = ALPHA * xf / (1 if bug == "residual-not-divided" else 4)
        y = lax.psum_scatter(part + res, "tp", scatter_dimension=1, tiled=True)
        return layernorm(y, g, b)
    return f


C.smap("s.deepnorm_residual_folded_reduce_scatter.tp4", {"tp": 4}, deepnorm_fold,
       (P(None, "tp"), P(None, "tp"), P("tp"), P(), P()), P(None, "tp"), deepnorm, DN_ARGS,
       bugs=[("residual-not-divided", ["wrong-scale"]), ("residual-rank0-only-but-divided", ["wrong-scale"])])


def deepnorm_rs_hidden(bug):
    """As 6., the reduce-scatter over the hidden dim, then an all_to_all
    (split the sequence, concatenate the hidden dim) to the sequence block;
    the residual folded in on rank 0 only."""
    def f(x, w1, w2, g, b):
        xf = lax.all_gather(x, "tp", axis=1, tiled=True)
        part = jax.nn.gelu(xf @ w1) @ w2
        who = idx("tp") == (1 if bug == "rank1-adds-but-scaled-twice" else 0)
        res = jnp.where(who, ALPHA * xf * (2 if bug == "rank1-adds-but-scaled-twice" else 1), 0.0)
        y = lax.psum_scatter(part + res, "tp", scatter_dimension=2, tiled=True)  # (b, T, D / tp)
        y = lax.all_to_all(y, "tp", 1, 2, tiled=True)  # (b, T / tp, D)
        return layernorm(y, g, b)
    return f


C.smap("s.deepnorm_rs_hidden_then_a2a.tp4", {"tp": 4}, deepnorm_rs_hidden,
       (P(None, "tp"), P(None, "tp"), P("tp"), P(), P()), P(None, "tp"), deepnorm, DN_ARGS,
       bugs=[("rank1-adds-but-scaled-twice", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 24. the sandwich block of 5. with the attention partials reduced as
#     pmean(o) * tp, the post norm's gain all_gather'd from a tp-sharded
#     vector.


def sandwich_pmean(bug):
    def f(x, g1, g2, wq, wk, wv, wo):
        h = rmsnorm(x, g1)
        q, k, v = (jnp.einsum("btd,dhe->bthe", h, w) for w in (wq, wk, wv))
        o = jnp.einsum("bthe,hed->btd", causal_attn(q, k, v), wo)
        o = o * 4 if bug == "partials-scaled-not-reduced" else pmean(o, "tp") * 4
        g2f = jnp.tile(g2, 4) if bug == "gain-tiled-not-gathered" else lax.all_gather(g2, "tp", tiled=True)
        return x + rmsnorm(o, g2f)
    return f


C.smap("s.sandwich_norm_pmean_times_tp_gain_gathered.tp4", {"tp": 4}, sandwich_pmean,
       (P(), P(), P("tp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P(), sandwich, SW_ARGS,
       bugs=[("partials-scaled-not-reduced", ["missing-all-reduce"]), ("gain-tiled-not-gathered", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 25. GroupNorm with 2 groups over tp4 (as 9.), the group statistics as a
#     psum over tp of [sum, sum of squares] masked to each group's ranks,
#     the rank's own group picked after.


def gn_masked(bug):
    def f(x, g, b):
        me = idx("tp")
        st = jnp.stack([x.sum((1, 2)), (x * x).sum((1, 2))])  # (2, n)
        grp = me % 2 if bug == "group-of-rank-mod-2" else me // 2
        tot = psum(jnp.stack([jnp.where(grp == j, st, 0.0) for j in range(2)]), "tp")  # (group, 2, n)
        mine = tot[0] if bug == "first-group-stats" else tot[grp]
        cnt = x.shape[1] * x.shape[2] * 2
        mu = (mine[0] / cnt)[:, None, None]
        var = (mine[1] / cnt)[:, None, None] - mu * mu
        return (x - mu) * lax.rsqrt(var + 1e-5) * g + b
    return f


C.smap("s.groupnorm_span_masked_psum.tp4", {"tp": 4}, gn_masked, (P(None, None, "tp"), P("tp"), P("tp")),
       P(None, None, "tp"), lambda x, g, b: groupnorm(x, g, b, 2), GN2_ARGS,
       bugs=[("group-of-rank-mod-2", ["wrong-offset"]), ("first-group-stats", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 26. a bf16 pre-RMSNorm MLP block with the hidden dim over tp (dp2 x tp4):
#     bf16 activations and weights, the norm's statistics in f32 (the
#     squares psum'd in f32), the down projection's partials psum'd in bf16.


def bf16_block(x, g, w1, w2):
    x32 = x.astype(jnp.float32)
    h = (x32 * lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-6)).astype(jnp.bfloat16) * g
    return x + jax.nn.silu(h @ w1) @ w2


def bf16_block_tp(bug):
    def f(x, g, w1, w2):
        x32 = x.astype(jnp.float32)
        ss = jnp.sum(x32 * x32, -1, keepdims=True)
        if bug != "stats-local-shard":
            ss = psum(ss, "tp")
        h = (x32 * lax.rsqrt(ss / D + 1e-6)).astype(jnp.bfloat16) * g
        hf = lax.all_gather(h, "tp", axis=2, tiled=True)
        part = jax.nn.silu(hf @ w1) @ w2  # (b, t, D) partial over tp
        out = lax.psum_scatter(part, "tp", scatter_dimension=2, tiled=True)
        if bug == "residual-before-reduce-scatter":
            return lax.psum_scatter(part + lax.all_gather(x, "tp", axis=2, tiled=True), "tp", scatter_dimension=2,
                                    tiled=True)
        return x + out
    return f


C.smap("s.bf16_rmsnorm_mlp_hidden_tp_f32_stats.dp2xtp4", {"dp": 2, "tp": 4}, bf16_block_tp,
       (P("dp", None, "tp"), P("tp"), P(None, "tp"), P("tp")), P("dp", None, "tp"), bf16_block,
       (R(B, T, D, dt=jnp.bfloat16), (1.0 + R(D, scale=0.2)).astype(jnp.bfloat16), R(D, F, scale=0.2, dt=jnp.bfloat16),
        R(F, D, scale=0.2, dt=jnp.bfloat16)),
       bugs=[("stats-local-shard", ["missing-all-reduce"]), ("residual-before-reduce-scatter", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 27. a 2-layer post-LN stack under Megatron sequence parallelism as a
#     training step: lax.scan over stacked layers with jax.checkpoint,
#     jax.grad inside the body (check_vma=True), gains replicated, optax
#     adamw; loss pmean'd over the sequence blocks.
OPT27 = optax.adamw(1e-2, weight_decay=0.05)
SP27 = {"w1": P(None, None, "tp"), "w2": P(None, "tp"), "g": P(), "b": P()}


def step27(p, s, x, y):
    def loss(p):
        def body(h, lp):
            return layernorm(h + jax.nn.gelu(h @ lp["w1"]) @ lp["w2"], lp["g"], lp["b"]), None
        h, _ = lax.scan(jax.checkpoint(body), x, p)
        return jnp.mean(jnp.square(h - y))
    l, gr = jax.value_and_grad(loss)(p)
    u, s = OPT27.update(gr, s, p)
    return optax.apply_updates(p, u), s, l


def step27_sp(bug):
    def f(p, s, x, y):
        def loss(p):
            def body(h, lp):
                hf = lax.all_gather(h, "tp", axis=1, tiled=True)
                part = jax.nn.gelu(hf @ lp["w1"]) @ lp["w2"]
                if bug == "psum-then-own-block-at-0":
                    o = lax.dynamic_slice_in_dim(psum(part, "tp"), 0, h.shape[1], 1)
                else:
                    o = lax.psum_scatter(part, "tp", scatter_dimension=1, tiled=True)
                z = h + o
                return layernorm(z, lp["g"], lp["b"]), None
            h, _ = lax.scan(jax.checkpoint(body), x, p)
            return pmean(jnp.mean(jnp.square(h - y)), "tp")
        l, gr = jax.value_and_grad(loss)(p)
        u, s = OPT27.update(gr, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P27 = {"w1": R(2, D, F, scale=0.2), "w2": R(2, F, D, scale=0.2), "g": 1.0 + R(2, D, scale=0.1),
       "b": R(2, D, scale=0.1)}
S27 = OPT27.init(P27)
SS27 = state_specs(S27, SP27)
C.smap("s.postln_stack_scan_remat_sp_train_adamw.tp4", {"tp": 4}, step27_sp,
       (SP27, SS27, P(None, "tp"), P(None, "tp")), (SP27, SS27, P()), step27, (P27, S27, R(B, T, D), R(B, T, D)),
       bugs=[("psum-then-own-block-at-0", ["wrong-offset"])], check_vma=True)

# ---------------------------------------------------------------------------
# 28. a ScaleNorm + row-parallel head loss with the hidden dim over tp and
#     batch over dp (check_vma=False): the loss, already equal on every tp
#     rank after the head's psum, pmean'd over (dp, tp) "to be safe", and
#     the squared-norm statistics psum'd over tp.


def sn_head_loss(x, g, w, y):
    return jnp.mean(jnp.square(scalenorm(x, g) @ w - y))


def sn_head_tp(bug):
    def f(x, g, w, y):
        sq = psum(jnp.sum(x * x, -1, keepdims=True), "tp")
        z = g * x / jnp.maximum(jnp.sqrt(sq), 1e-5)
        out = psum(z @ w, "tp")
        l = jnp.mean(jnp.square(out - y))
        if bug == "psum-over-both-axes":
            return psum(l, ("dp", "tp")) / 2
        if bug == "pmean-over-tp-only":
            return pmean(l, "tp")
        return pmean(l, ("dp", "tp"))
    return f


C.smap("s.scalenorm_head_loss_pmean_all_axes.dp2xtp4", {"dp": 2, "tp": 4}, sn_head_tp,
       (P("dp", None, "tp"), P(), P("tp"), P("dp")), P(), sn_head_loss,
       (R(B, T, D), jnp.float32(np.sqrt(D)), R(D, 8, scale=0.3), R(B, T, 8)),
       bugs=[("psum-over-both-axes", ["wrong-scale"]), ("pmean-over-tp-only", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
C.gspmd("g.parallel_attn_mlp_block.dp2xtp4", {"dp": 2, "tp": 4}, PB_SPECS, P("dp"), par_block, PB_ARGS)

C.gspmd("g.postln_mlp_hidden_sharded.tp4", {"tp": 4},
        (P(None, None, "tp"), P("tp"), P(None, "tp"), P("tp"), P("tp")), P(None, None, "tp"), postln_block,
        (R(B, T, D), R(D, F, scale=0.2), R(F, D, scale=0.2), 1.0 + R(D, scale=0.1), R(D, scale=0.1)))

M16 = make_mesh({"tp": 4})


def deepnorm_step(p, x, y):
    def loss(p):
        h = x
        for _ in range(2):
            h = lax.with_sharding_constraint(h, NamedSharding(M16, P(None, "tp")))
            h = deepnorm(h, p["w1"], p["w2"], p["g"], p["b"])
        return jnp.mean(jnp.square(h - y))
    l, gr = jax.value_and_grad(loss)(p)
    u, _ = optax.sgd(0.1).update(gr, optax.sgd(0.1).init(p), p)
    return optax.apply_updates(p, u), l


DNP = {"w1": R(D, F, scale=0.2), "w2": R(F, D, scale=0.2) / ALPHA, "g": 1.0 + R(D, scale=0.1), "b": R(D, scale=0.1)}
DNS = {"w1": P(None, "tp"), "w2": P("tp"), "g": P(), "b": P()}
C.gspmd("g.deepnorm_sp_train_sgd.tp4", {"tp": 4}, (DNS, P(None, "tp"), P(None, "tp")), (DNS, P()), deepnorm_step,
        (DNP, R(B, T, D), R(B, T, D)))

C.gspmd("g.groupnorm_groups_span_ranks.tp4", {"tp": 4}, (P(None, None, "tp"), P("tp"), P("tp")), P(None, None, "tp"),
        lambda x, g, b: groupnorm(x, g, b, 2), GN2_ARGS)


def qk_grad(x, wq, wk, wv, wo, gq, gk):
    return jax.grad(lambda *a: jnp.sum(jnp.square(qknorm_attn(*a))), argnums=(1, 5, 6))(x, wq, wk, wv, wo, gq, gk)


C.gspmd("g.qk_layernorm_grad_heads_tp.tp4", {"tp": 4}, QK_SPECS, (P(None, "tp"), P(), P()), qk_grad, QK_ARGS)


def sandwich_bf16(x, g1, g2, wq, wk, wv, wo):
    def rms32(y, g):
        y32 = y.astype(jnp.float32)
        return (y32 * lax.rsqrt(jnp.mean(y32 * y32, -1, keepdims=True) + 1e-6) * g).astype(jnp.bfloat16)
    h = rms32(x, g1)
    q, k, v = (jnp.einsum("btd,dhe->bthe", h, w.astype(jnp.bfloat16)) for w in (wq, wk, wv))
    o = jnp.einsum("bthe,hed->btd", causal_attn(q, k, v), wo.astype(jnp.bfloat16))
    return (x.astype(jnp.float32) + rms32(o, g2).astype(jnp.float32)).astype(jnp.bfloat16)


C.gspmd("g.sandwich_norm_bf16_f32_stats.tp4", {"tp": 4},
        (P(), P(), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P(), sandwich_bf16,
        (SW_ARGS[0].astype(jnp.bfloat16),) + SW_ARGS[1:])

C.gspmd("g.mixture_of_depths_routed.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", None, "tp"), P("tp"), P("tp"), P(None, "tp")),
        P("dp", None, "tp"), mod_block, (R(B, T, D), R(D, scale=0.5), R(D, F, scale=0.2), R(F, D, scale=0.2)))

C.gspmd("g.scalenorm_value_and_grad.sp2xtp4", {"sp": 2, "tp": 4},
        (P(), P("tp"), P(None, "sp", "tp"), P(None, "sp")), (P(), (P(), P("tp"))), sn_ref, SN_ARGS)

C.gspmd("g.rmsnorm_rowparallel.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", None, "tp"), P("tp"), P("tp")), P("dp"),
        rms_proj, (R(B, T, D), 1.0 + R(D, scale=0.2), R(D, 16, scale=0.3)))

C.gspmd("g.layerscale_colparallel.tp4", {"tp": 4}, (P(), P(), P(), P(), P(None, "tp"), P("tp")), P(), ls_col,
        (R(B, T, D), 1.0 + R(D, scale=0.1), R(D, scale=0.1), R(D, F, scale=0.2), R(F, D, scale=0.2),
         0.1 + R(D, scale=0.05)))

C.finish()
