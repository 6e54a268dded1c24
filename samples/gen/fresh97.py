"""samples/fresh97: a 97th batch of programs as a user writes them, on the
theme of normalisation layers under tensor, sequence and data parallelism in
training (statistics from the batch and their gradients) and evaluation
(running statistics), none of them an idiom of samples/fresh .. fresh26,
probe, train or wild (nor of fresh46, the earlier normalisation batch: no
parallel block, no sandwich norm, no GroupNorm over tp alone, no ScaleNorm).
shard_map families:
 1. LayerNorm with the hidden dim over tp (dp2 x tp4), statistics by a
    Welford / Chan merge: each rank's (mean, M2) all_gather'd and folded
    rank by rank with running counts. Bugs: the count not accumulated
    (every merge weighs the left side as one shard), the delta^2 term
    dropped (only within-shard spread), the variance as M2 / local width.
 2. a peri-LN MLP block (OLMo-2 / Gemma-3 "peri" placement: LayerNorm on the
    input, RMSNorm on the sublayer output, both inside the residual) with the
    residual stream's hidden dim over tp4: one-pass input statistics (psum
    of stacked [sum, sum of squares]), the normalised input all_gather'd,
    column/row-parallel MLP, psum_scatter back to the hidden shard, the
    output RMSNorm's sum of squares psum'd. Bugs: the output norm's sum of
    squares not psum'd, the partial sums sliced instead of reduce-scattered,
    the input E[x^2] divided by the local width (a first draft divided the
    mean instead: E[x^2] - mu^2 went negative and the output NaN; changed).
 3. per-head QK-RMSNorm with per-head gains (H, E) passed replicated and
    sliced at the rank's first head (heads over tp4, 2 per rank), output
    projection psum'd; written with einsum. Bugs: gains sliced at the rank
    index (not rank * heads per rank), the key norm given the query gains.
 4. a Dynamic Tanh (DyT, gamma * tanh(alpha x) + beta) + row-parallel head
    training step, dp2 x tp4, check_vma=True, jax.value_and_grad inside the
    body, optax.sgd with momentum; the scalar alpha replicated, gamma / beta
    over tp. Bugs: the loss psum'd over dp (not pmean), alpha's gradient
    psum'd over tp by hand (already complete).
 5. PowerNorm (training: per-feature quadratic mean over batch and time,
    running quadratic mean updated with momentum), batch over dp2 and the
    features over tp4. Bugs: statistics of the local batch, pmean over
    (dp, tp), psum over dp.
 6. SyncBatchNorm on NHWC activations, batch over dp4: one-pass global
    statistics (psum of [sum, sum of squares]), the running mean and the
    unbiased running variance (n / (n - 1)) updated with momentum 0.1.
    Bugs: Bessel's factor with the local count, running statistics from the
    local batch, the variance about the local mean.
 7. ghost BatchNorm (virtual batches of 2 rows, statistics per virtual
    batch -- per device and unsynchronised on purpose), batch over dp4.
    Bugs: statistics pmean'd over dp, virtual batches formed strided.
 8. BatchNorm in evaluation (running statistics) on features over tp4 and
    the batch over dp2, the running statistics and affine passed replicated
    and sliced at the rank's offset, then a row-parallel head. Bugs: slices
    at offset 0, batch statistics (train mode) of the local shard, the head
    not psum'd.
 9. a SyncBN MLP training step, dp4, check_vma=True: two-pass batch
    statistics as pmean's inside the differentiated loss (their gradients
    flow across devices), running statistics updated, optax.sgd momentum.
    Bugs: per-device statistics with only the running statistics pmean'd,
    the variance as a pmean of local variances (about local means).
10. weight normalisation (w = g v / ||v||_col) of a row-parallel weight (v's
    input rows over tp4), value_and_grad of an MSE (check_vma=True). Bugs:
    column norms of the local rows, norms per input row.
11. spectral normalisation of a weight sharded over its input columns (tp4):
    two power iterations in lax.fori_loop (v = normalize(W^T u) with the
    squares psum'd, u = normalize(psum(W v))), sigma = u . W v. Bugs: v's
    norm from the local shard, W v not psum'd.
12. two-pass LayerNorm with hidden over tp (dp2 x tp4) and its gradients
    (value_and_grad of sum(LN(x) * r) w.r.t. x, g, b inside the body,
    check_vma=True). Bugs: the mean divided by the local width, eps after
    the sqrt, the second pass's sum of squares not psum'd.
13. padding-masked instance norm over time with the time axis over sp4
    (per-row counts of right padding; valid t < T - pad):
    masked (count, mean, M2) per device merged by a recursive-doubling
    butterfly of ppermutes (xor 1, xor 2) with Chan's formula; counts differ
    per device and some are 0 (safe division). Bugs: an equal-weight merge
    (wrong counts), the count not updated after the first merge, partner
    xor 1 twice.
14. GroupNorm on NHWC images with the height over sp2 and the channels over
    tp4 (8 groups of 2 channels: whole groups per tp rank, the statistics
    psum'd over sp only). Bugs: psum over (sp, tp), no psum over sp, groups
    formed strided within the local channels.
15. a bf16 pre-LN SiLU MLP block with LayerScale (sp2 x tp4: sequence
    over sp, residual hidden dim over tp): f32 two-pass statistics psum'd
    over tp, the normalised input all_gather'd, column/row-parallel MLP,
    psum_scatter back, gamma applied to the hidden shard. Bugs: statistics
    psum'd over (sp, tp) (mixing tokens of different sequence blocks),
    the local gamma tiled and applied before the reduce-scatter.
GSPMD pairs (jax.jit with in/out shardings): 16. the SyncBN training step
of 9. (dp8); 17. the LayerNorm gradients of 12. (dp2 x tp4); 18. the
spectral normalisation of 11. (tp4); 19. the GroupNorm of 14.
(sp2 x tp4); 20. the peri-LN block of 2. (tp4); 21. PowerNorm of 5.
(dp2 x tp4); 22. the DyT training step of 4. (dp2 x tp4); 23. the bf16
LayerScale block of 15. (sp2 x tp4).
Numerics: every correct pair agrees with its baseline at rounding level
(f32: within 2e-7 relative; the bf16 block of 15. and 23. within one bf16
ulp, 0.03 at 5.3); every bug variant differs clearly (see "numerics"; the
smallest, 6.'s Bessel factor with the local count, by 0.013 in the running
variance). 13.'s padding is given as right-padding counts so that the
valid region reaches every device on most inputs (with lengths, small
lengths leave the last devices empty and hide the xor-1-twice bug).
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh97.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh97.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh97.py"
C = Corpus("samples/fresh97", SCRIPT, "samples/gen/run_fresh97.sh", sys.argv[1:])
rng, R, I = seeded(9797)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index


def layernorm(x, g, b, eps=1e-5):
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps) * g + b


def rmsnorm(x, g, eps=1e-6):
    return x / jnp.sqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * g


# ---------------------------------------------------------------------------
# 1. LayerNorm, hidden over tp, Welford / Chan merge of all_gather'd stats.

def ln_welford(bug):
    def f(x, g, b):
        dl = x.shape[-1]
        m = jnp.mean(x, -1)
        m2 = jnp.sum(jnp.square(x - m[..., None]), -1)
        ms, m2s = lax.all_gather(m, "tp"), lax.all_gather(m2, "tp")
        n, mean, M2 = float(dl), ms[0], m2s[0]
        for r in range(1, 4):
            nb = float(dl)
            tot = n + nb
            d = ms[r] - mean
            mean = mean + d * (nb / tot)
            if bug == "no-delta-term":
                M2 = M2 + m2s[r]
            else:
                M2 = M2 + m2s[r] + d * d * (n * nb / tot)
            if bug != "count-not-accumulated":
                n = tot
        var = M2 / dl if bug == "var-over-local-width" else M2 / (4 * dl)
        y = (x - mean[..., None]) * lax.rsqrt(var[..., None] + 1e-5)
        return y * g + b
    return f


X1 = R(4, 8, 32) + R(4, 8, 1) * 2.0  # a per-token offset: the mean matters
C.smap("s.layernorm_welford_chan_merge_allgather.dp2xtp4", {"dp": 2, "tp": 4}, ln_welford,
       (P("dp", None, "tp"), P("tp"), P("tp")), P("dp", None, "tp"), layernorm,
       (X1, 1.0 + R(32, scale=0.2), R(32, scale=0.2)),
       bugs=[("count-not-accumulated", ["wrong-scale"]), ("no-delta-term", ["missing-term"]),
             ("var-over-local-width", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 2. peri-LN MLP block, residual hidden over tp.


def periln(x, gi, bi, w1, w2, go):
    h = layernorm(x, gi, bi)
    z = jax.nn.gelu(h @ w1) @ w2
    return x + rmsnorm(z, go)


def periln_tp(bug):
    def f(x, gi, bi, w1, w2, go):
        dl = x.shape[-1]
        D = dl * 4
        s = psum(jnp.stack([x.sum(-1), (x * x).sum(-1)]), "tp")
        mu = s[0] / D
        var = s[1] / (dl if bug == "in-sumsq-over-local-width" else D) - mu * mu
        h = (x - mu[..., None]) * lax.rsqrt(var[..., None] + 1e-5) * gi + bi
        hf = lax.all_gather(h, "tp", axis=2, tiled=True)
        zp = jax.nn.gelu(hf @ w1) @ w2  # (b, t, D) partial sums
        if bug == "slice-not-reduce-scatter":
            z = lax.dynamic_slice_in_dim(zp, idx("tp") * dl, dl, axis=2)
        else:
            z = lax.psum_scatter(zp, "tp", scatter_dimension=2, tiled=True)
        ss = jnp.sum(z * z, -1, keepdims=True)
        ms = ss / dl if bug == "out-sumsq-not-psummed" else psum(ss, "tp") / D
        return x + z / jnp.sqrt(ms + 1e-6) * go
    return f


PL_SPECS = (P(None, None, "tp"), P("tp"), P("tp"), P(None, "tp"), P("tp", None), P("tp"))
PL_ARGS = (R(2, 8, 16) + 0.5, 1.0 + R(16, scale=0.2), R(16, scale=0.2), R(16, 32, scale=0.3),
           R(32, 16, scale=0.3), 1.0 + R(16, scale=0.2))
C.smap("s.periln_mlp_hidden_tp_rs.tp4", {"tp": 4}, periln_tp, PL_SPECS, P(None, None, "tp"), periln, PL_ARGS,
       bugs=[("out-sumsq-not-psummed", ["missing-all-reduce"]), ("slice-not-reduce-scatter", ["missing-all-reduce"]),
             ("in-sumsq-over-local-width", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 3. per-head QK-RMSNorm, per-head gains sliced at the rank's first head.

NH, HE = 8, 4


def qk_attn(x, wq, wk, wv, wo, gq, gk):
    b, t, _ = x.shape
    q = rmsnorm((x @ wq).reshape(b, t, NH, HE), gq)
    k = rmsnorm((x @ wk).reshape(b, t, NH, HE), gk)
    v = (x @ wv).reshape(b, t, NH, HE)
    a = jax.nn.softmax(jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(HE), -1)
    o = jnp.einsum("bhqk,bkhe->bqhe", a, v).reshape(b, t, NH * HE)
    return o @ wo


def qk_tp(bug):
    def f(x, wq, wk, wv, wo, gq, gk):
        hl = wq.shape[1] // HE
        off = idx("tp") if bug == "gain-offset-rank" else idx("tp") * hl
        gql = lax.dynamic_slice_in_dim(gq, off, hl, 0)
        gkl = gql if bug == "k-uses-q-gain" else lax.dynamic_slice_in_dim(gk, off, hl, 0)
        q = jnp.einsum("btd,dhe->bthe", x, wq.reshape(-1, hl, HE))
        k = jnp.einsum("btd,dhe->bthe", x, wk.reshape(-1, hl, HE))
        v = jnp.einsum("btd,dhe->bthe", x, wv.reshape(-1, hl, HE))
        q = q * lax.rsqrt(jnp.mean(q * q, -1, keepdims=True) + 1e-6) * gql
        k = k * lax.rsqrt(jnp.mean(k * k, -1, keepdims=True) + 1e-6) * gkl
        s = jnp.einsum("bqhe,bkhe->bhqk", q, k) * (1.0 / np.sqrt(HE))
        o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)
        return psum(jnp.einsum("bqhe,hed->bqd", o, wo.reshape(hl, HE, -1)), "tp")
    return f


QK_ARGS = (R(2, 8, 16), R(16, 32, scale=0.4), R(16, 32, scale=0.4), R(16, 32, scale=0.4), R(32, 16, scale=0.3),
           1.0 + R(NH, HE, scale=0.5), 1.0 + R(NH, HE, scale=0.5))
C.smap("s.qk_rmsnorm_per_head_gains_heads_tp.tp4", {"tp": 4}, qk_tp,
       (P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp", None), P(), P()), P(), qk_attn, QK_ARGS,
       bugs=[("gain-offset-rank", ["wrong-offset"]), ("k-uses-q-gain", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 4. DyT + row-parallel head training step, optax.sgd momentum.

OPT4 = optax.sgd(0.1, momentum=0.9)
SP4 = {"alpha": P(), "gamma": P("tp"), "beta": P("tp"), "w": P("tp", None)}


def dyt(x, p):
    return p["gamma"] * jnp.tanh(p["alpha"] * x) + p["beta"]


def dyt_step(p, s, x, y):
    def loss(p):
        return jnp.mean(jnp.square(dyt(x, p) @ p["w"] - y))
    l, gr = jax.value_and_grad(loss)(p)
    u, s = OPT4.update(gr, s, p)
    return optax.apply_updates(p, u), s, l


def dyt_tp(bug):
    def f(p, s, x, y):
        def loss(p):
            out = psum(dyt(x, p) @ p["w"], "tp")
            l = jnp.mean(jnp.square(out - y))
            return psum(l, "dp") if bug == "loss-psum-over-dp" else pmean(l, "dp")
        l, gr = jax.value_and_grad(loss)(p)
        if bug == "alpha-grad-psummed-over-tp":
            gr = dict(gr, alpha=psum(gr["alpha"], "tp"))
        u, s = OPT4.update(gr, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P4 = {"alpha": jnp.float32(0.7), "gamma": 1.0 + R(16, scale=0.2), "beta": R(16, scale=0.1),
      "w": R(16, 8, scale=0.3)}
S4 = OPT4.init(P4)
SS4 = state_specs(S4, SP4)
DYT_ARGS = (P4, S4, R(8, 4, 16, scale=1.5), R(8, 4, 8))
C.smap("s.dyt_rowparallel_head_train_sgdm.dp2xtp4", {"dp": 2, "tp": 4}, dyt_tp,
       (SP4, SS4, P("dp", None, "tp"), P("dp")), (SP4, SS4, P()), dyt_step, DYT_ARGS,
       bugs=[("loss-psum-over-dp", ["wrong-collective-op"]), ("alpha-grad-psummed-over-tp", ["wrong-collective-op"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 5. PowerNorm (training), batch over dp, features over tp.


def powernorm(x, run, g, b):
    psi2 = jnp.mean(x * x, (0, 1))
    return x * lax.rsqrt(psi2 + 1e-5) * g + b, 0.9 * run + 0.1 * psi2


def powernorm_tp(bug):
    def f(x, run, g, b):
        lq = jnp.mean(jnp.square(x), axis=(0, 1))
        if bug == "local-batch-stats":
            psi2 = lq
        elif bug == "pmean-over-dp-and-tp":
            psi2 = pmean(lq, ("dp", "tp"))
        elif bug == "psum-over-dp":
            psi2 = psum(lq, "dp")
        else:
            psi2 = pmean(lq, "dp")
        return x * lax.rsqrt(psi2 + 1e-5) * g + b, 0.9 * run + 0.1 * psi2
    return f


PN_ARGS = (R(4, 6, 16) * (0.5 + np.abs(R(16))), np.abs(1.0 + R(16, scale=0.2)), 1.0 + R(16, scale=0.2), R(16, scale=0.1))
C.smap("s.powernorm_train_running_qmean.dp2xtp4", {"dp": 2, "tp": 4}, powernorm_tp,
       (P("dp", None, "tp"), P("tp"), P("tp"), P("tp")), (P("dp", None, "tp"), P("tp")), powernorm, PN_ARGS,
       bugs=[("local-batch-stats", ["missing-all-reduce"]), ("pmean-over-dp-and-tp", ["wrong-collective-group"]),
             ("psum-over-dp", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 6. SyncBatchNorm NHWC, batch over dp4, running stats with Bessel's factor.


def syncbn(x, rm, rv, g, b, mom=0.1):
    n = x.shape[0] * x.shape[1] * x.shape[2]
    mu = jnp.mean(x, (0, 1, 2))
    var = jnp.var(x, (0, 1, 2))
    y = (x - mu) / jnp.sqrt(var + 1e-5) * g + b
    return y, (1 - mom) * rm + mom * mu, (1 - mom) * rv + mom * var * (n / (n - 1))


def syncbn_dp(bug):
    def f(x, rm, rv, g, b):
        nl = x.shape[0] * x.shape[1] * x.shape[2]
        n = nl * 4
        s = psum(jnp.stack([x.sum((0, 1, 2)), (x * x).sum((0, 1, 2))]), "dp")
        mu = s[0] / n
        if bug == "var-about-local-mean":
            lm = x.mean((0, 1, 2))
            var = psum(jnp.square(x - lm).sum((0, 1, 2)), "dp") / n
        else:
            var = s[1] / n - mu * mu
        y = (x - mu) * lax.rsqrt(var + 1e-5) * g + b
        rmu, rvar = mu, var
        if bug == "running-from-local-stats":
            rmu, rvar = x.mean((0, 1, 2)), x.var((0, 1, 2))
        nb = nl if bug == "bessel-local-count" else n
        return y, 0.9 * rm + 0.1 * rmu, 0.9 * rv + 0.1 * rvar * (nb / (nb - 1))
    return f


SB_ARGS = (R(8, 3, 3, 8) * 1.5 + R(1, 1, 1, 8), R(8, scale=0.1), 1.0 + np.abs(R(8, scale=0.1)), 1.0 + R(8, scale=0.2),
           R(8, scale=0.1))
C.smap("s.syncbn_nhwc_running_unbiased.dp4", {"dp": 4}, syncbn_dp, (P("dp"), P(), P(), P(), P()), (P("dp"), P(), P()),
       syncbn, SB_ARGS,
       bugs=[("bessel-local-count", ["wrong-scale"]), ("running-from-local-stats", ["missing-all-reduce"]),
             ("var-about-local-mean", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 7. ghost BatchNorm: per-virtual-batch statistics, unsynchronised on purpose.


def ghost_bn(x, g, b, vb=2):
    xg = x.reshape(-1, vb, x.shape[-1])
    mu = xg.mean(1, keepdims=True)
    var = jnp.square(xg - mu).mean(1, keepdims=True)
    return ((xg - mu) * lax.rsqrt(var + 1e-5)).reshape(x.shape) * g + b


def ghost_dp(bug):
    def f(x, g, b):
        c = x.shape[-1]
        if bug == "ghosts-strided":
            xg = x.reshape(2, -1, c).transpose(1, 0, 2)
        else:
            xg = x.reshape(-1, 2, c)
        mu = xg.mean(1, keepdims=True)
        if bug == "synced-stats":
            mu = pmean(mu, "dp")
        var = jnp.square(xg - mu).mean(1, keepdims=True)
        if bug == "synced-stats":
            var = pmean(var, "dp")
        y = (xg - mu) * lax.rsqrt(var + 1e-5)
        if bug == "ghosts-strided":
            y = y.transpose(1, 0, 2)
        return y.reshape(x.shape) * g + b
    return f


C.smap("s.ghost_batchnorm_per_device_on_purpose.dp4", {"dp": 4}, ghost_dp, (P("dp"), P(), P()), P("dp"), ghost_bn,
       (R(16, 8) + R(16, 1), 1.0 + R(8, scale=0.2), R(8, scale=0.1)),
       bugs=[("synced-stats", ["wrong-reduction"]), ("ghosts-strided", ["wrong-reshape-order"])])

# ---------------------------------------------------------------------------
# 8. BatchNorm in evaluation (running statistics), features over tp, head psum'd.


def bn_eval_head(x, rm, rv, g, b, w):
    return ((x - rm) * lax.rsqrt(rv + 1e-5) * g + b) @ w


def bn_eval_tp(bug):
    def f(x, rm, rv, g, b, w):
        cl = x.shape[-1]
        off = 0 if bug == "slice-offset-zero" else idx("tp") * cl
        rml, rvl, gl, bl = (lax.dynamic_slice_in_dim(v, off, cl) for v in (rm, rv, g, b))
        if bug == "batch-stats-in-eval":
            rml, rvl = x.mean(0), x.var(0)
        z = ((x - rml) * lax.rsqrt(rvl + 1e-5) * gl + bl) @ w
        return z if bug == "head-not-psummed" else psum(z, "tp")
    return f


C.smap("s.bn_eval_running_stats_sliced_head.dp2xtp4", {"dp": 2, "tp": 4}, bn_eval_tp,
       (P("dp", "tp"), P(), P(), P(), P(), P("tp", None)), P("dp"), bn_eval_head,
       (R(8, 16) * 2.0 + 1.0, R(16, scale=0.5), np.abs(R(16)) + 0.5, 1.0 + R(16, scale=0.2), R(16, scale=0.1),
        R(16, 4, scale=0.3)),
       bugs=[("slice-offset-zero", ["wrong-offset"]), ("batch-stats-in-eval", ["wrong-value"]),
             ("head-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 9. SyncBN MLP training step, dp4, statistics' gradients across devices.

OPT9 = optax.sgd(0.05, momentum=0.9)


def bn_mlp_step(p, st, s, x, y):
    def loss(p):
        h = x @ p["w1"]
        mu = h.mean(0)
        var = jnp.square(h - mu).mean(0)
        hn = (h - mu) * lax.rsqrt(var + 1e-5) * p["g"] + p["b"]
        return jnp.mean(jnp.square(jax.nn.relu(hn) @ p["w2"] - y)), (mu, var)
    (l, (mu, var)), gr = jax.value_and_grad(loss, has_aux=True)(p)
    n = x.shape[0]
    st = {"mean": 0.9 * st["mean"] + 0.1 * mu, "var": 0.9 * st["var"] + 0.1 * var * n / (n - 1)}
    u, s = OPT9.update(gr, s, p)
    return optax.apply_updates(p, u), st, s, l


def bn_mlp_dp(bug, axis="dp", ndev=4):
    def f(p, st, s, x, y):
        def loss(p):
            h = x @ p["w1"]
            lmu = h.mean(0)
            mu = lmu if bug == "local-stats-running-pmeaned" else pmean(lmu, axis)
            if bug == "var-pmean-of-local-var":
                var = pmean(jnp.square(h - lmu).mean(0), axis)
            elif bug == "local-stats-running-pmeaned":
                var = jnp.square(h - lmu).mean(0)
            else:
                var = pmean(jnp.square(h - mu).mean(0), axis)
            hn = (h - mu) * lax.rsqrt(var + 1e-5) * p["g"] + p["b"]
            l = pmean(jnp.mean(jnp.square(jax.nn.relu(hn) @ p["w2"] - y)), axis)
            return l, (mu, var)
        (l, (mu, var)), gr = jax.value_and_grad(loss, has_aux=True)(p)
        if bug == "local-stats-running-pmeaned":
            mu, var = pmean(mu, axis), pmean(var, axis)
        n = x.shape[0] * ndev
        st = {"mean": 0.9 * st["mean"] + 0.1 * mu, "var": 0.9 * st["var"] + 0.1 * var * n / (n - 1)}
        u, s = OPT9.update(gr, s, p)
        return optax.apply_updates(p, u), st, s, l
    return f


P9 = {"w1": R(6, 12, scale=0.5), "g": 1.0 + R(12, scale=0.2), "b": R(12, scale=0.1), "w2": R(12, 3, scale=0.4)}
ST9 = {"mean": np.zeros(12, np.float32), "var": np.ones(12, np.float32)}
S9 = OPT9.init(P9)
X9 = R(16, 6) + np.repeat(R(4, 6), 4, 0)  # each device's rows share an offset: local != global stats
BN9_ARGS = (P9, ST9, S9, X9, R(16, 3))
BN9_IN = (P(), P(), P(), P("dp"), P("dp"))
C.smap("s.syncbn_mlp_train_stats_grad_sgdm.dp4", {"dp": 4}, bn_mlp_dp, BN9_IN, (P(), P(), P(), P()), bn_mlp_step,
       BN9_ARGS, bugs=[("local-stats-running-pmeaned", ["missing-all-reduce"]),
                       ("var-pmean-of-local-var", ["wrong-reduction"])], check_vma=True)

# ---------------------------------------------------------------------------
# 10. weight normalisation of a row-parallel weight, value_and_grad.


def wn_loss_grad(v, g, x, y):
    def loss(v, g):
        w = g * v / jnp.sqrt(jnp.sum(v * v, 0, keepdims=True))
        return jnp.mean(jnp.square(x @ w - y))
    return jax.value_and_grad(loss, argnums=(0, 1))(v, g)


def wn_tp(bug):
    def f(v, g, x, y):
        def loss(v, g):
            if bug == "norm-per-input-row":
                nrm = jnp.sqrt(jnp.sum(v * v, 1, keepdims=True))
            elif bug == "local-column-norm":
                nrm = jnp.sqrt(jnp.sum(v * v, 0, keepdims=True))
            else:
                nrm = jnp.sqrt(psum(jnp.sum(v * v, 0, keepdims=True), "tp"))
            out = psum(jnp.dot(x, g * v / nrm), "tp")
            return jnp.mean(jnp.square(out - y))
        return jax.value_and_grad(loss, argnums=(0, 1))(v, g)
    return f


C.smap("s.weightnorm_rowparallel_value_and_grad.tp4", {"tp": 4}, wn_tp, (P("tp", None), P(), P(None, "tp"), P()),
       (P(), (P("tp", None), P())), wn_loss_grad,
       (R(16, 8), 1.0 + R(8, scale=0.3), R(10, 16), R(10, 8)),
       bugs=[("local-column-norm", ["missing-all-reduce"]), ("norm-per-input-row", ["wrong-axis"])], check_vma=True)

# ---------------------------------------------------------------------------
# 11. spectral normalisation, W sharded over its input columns, power iteration.


def l2n(v, eps=1e-12):
    return v / jnp.maximum(jnp.linalg.norm(v), eps)


def spectral(w, u):
    def it(_, c):
        u, v = c
        v = l2n(w.T @ u)
        return l2n(w @ v), v
    u, v = lax.fori_loop(0, 2, it, (u, jnp.zeros(w.shape[1], w.dtype)))
    sigma = jnp.dot(u, w @ v)
    return w / sigma, u, sigma


def spectral_tp(bug):
    def f(w, u):
        def it(_, c):
            u, v = c
            v = w.T @ u
            sq = jnp.sum(v * v)
            nv = jnp.sqrt(sq if bug == "v-norm-local" else psum(sq, "tp"))
            v = v / jnp.maximum(nv, 1e-12)
            wv = w @ v if bug == "wv-not-psummed" else psum(w @ v, "tp")
            return wv / jnp.maximum(jnp.sqrt(jnp.sum(wv * wv)), 1e-12), v
        u, v = lax.fori_loop(0, 2, it, (u, jnp.zeros(w.shape[1], w.dtype)))
        sigma = jnp.dot(u, psum(w @ v, "tp"))
        return w / sigma, u, sigma
    return f


C.smap("s.spectral_norm_power_iter_cols_tp.tp4", {"tp": 4}, spectral_tp, (P(None, "tp"), P()),
       (P(None, "tp"), P(), P()), spectral, (R(16, 32), l2n(R(16))),
       bugs=[("v-norm-local", ["missing-all-reduce"]), ("wv-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 12. two-pass LayerNorm gradients, hidden over tp.


def ln_grads(x, g, b, r):
    return jax.value_and_grad(lambda x, g, b: jnp.sum(layernorm(x, g, b) * r), argnums=(0, 1, 2))(x, g, b)


def ln2_tp(bug):
    def f(x, g, b, r):
        def L(x, g, b):
            dl = x.shape[-1]
            D = dl * 4
            mu = psum(jnp.einsum("btd->bt", x), "tp")[..., None] / (dl if bug == "mean-over-local-width" else D)
            c = x - mu
            sq = jnp.sum(c * c, -1, keepdims=True)
            var = (sq if bug == "sumsq-not-psummed" else psum(sq, "tp")) / D
            if bug == "eps-after-sqrt":
                y = c / (jnp.sqrt(var) + 1e-5)
            else:
                y = c / jnp.sqrt(var + 1e-5)
            return psum(jnp.sum((y * g + b) * r), ("dp", "tp"))
        return jax.value_and_grad(L, argnums=(0, 1, 2))(x, g, b)
    return f


LN12_SPECS = (P("dp", None, "tp"), P("tp"), P("tp"), P("dp", None, "tp"))
LN12_ARGS = (R(4, 6, 32, scale=0.05) + R(4, 6, 1, scale=0.1), 1.0 + R(32, scale=0.2), R(32, scale=0.1), R(4, 6, 32))
C.smap("s.layernorm_two_pass_grads_hidden_tp.dp2xtp4", {"dp": 2, "tp": 4}, ln2_tp, LN12_SPECS,
       (P(), (P("dp", None, "tp"), P("tp"), P("tp"))), ln_grads, LN12_ARGS,
       bugs=[("mean-over-local-width", ["wrong-scale"]), ("eps-after-sqrt", ["wrong-scale"]),
             ("sumsq-not-psummed", ["missing-all-reduce"])], check_vma=True)

# ---------------------------------------------------------------------------
# 13. length-masked instance norm over time, butterfly Welford merge over sp.


def masked_inorm(x, pads):
    m = (jnp.arange(x.shape[1])[None, :] < x.shape[1] - pads[:, None])[..., None]
    n = jnp.sum(m, 1, keepdims=True).astype(x.dtype)
    mean = jnp.sum(jnp.where(m, x, 0), 1, keepdims=True) / n
    var = jnp.sum(jnp.where(m, jnp.square(x - mean), 0), 1, keepdims=True) / n
    return jnp.where(m, (x - mean) * lax.rsqrt(var + 1e-5), 0.0)


def masked_inorm_sp(bug):
    def f(x, pads):
        tl = x.shape[1]
        t = idx("sp") * tl + jnp.arange(tl)
        m = (t[None, :] < tl * 4 - pads[:, None])[..., None]
        n = jnp.sum(m, 1, keepdims=True).astype(x.dtype)
        mean = jnp.sum(jnp.where(m, x, 0), 1, keepdims=True) / jnp.maximum(n, 1.0)
        M2 = jnp.sum(jnp.where(m, jnp.square(x - mean), 0), 1, keepdims=True)
        for s in (1, 2):
            sx = 1 if bug == "partner-xor1-twice" else s
            nb, mb, M2b = lax.ppermute((n, mean, M2), "sp", [(i, i ^ sx) for i in range(4)])
            tot = n + nb
            d = mb - mean
            if bug == "equal-weight-merge":
                mean, M2 = mean + 0.5 * d, M2 + M2b + d * d * tot / 4
            else:
                mean = mean + d * nb / jnp.maximum(tot, 1.0)
                M2 = M2 + M2b + d * d * n * nb / jnp.maximum(tot, 1.0)
            if not (bug == "count-not-updated" and s == 1):
                n = tot
        var = M2 / n
        return jnp.where(m, (x - mean) * lax.rsqrt(var + 1e-5), 0.0)
    return f


C.smap("s.masked_instnorm_time_sp_butterfly_welford.sp4", {"sp": 4}, masked_inorm_sp, (P(None, "sp"), P()),
       P(None, "sp"), masked_inorm, (R(2, 32, 4) + np.linspace(0, 3, 32)[None, :, None].astype(np.float32),
                                     np.array([5, 19], np.int32)),
       bugs=[("equal-weight-merge", ["wrong-scale"]), ("count-not-updated", ["wrong-scale"]),
             ("partner-xor1-twice", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 14. GroupNorm NHWC, height over sp, channels over tp (whole groups per rank).


def groupnorm_nhwc(x, g, b, G=8):
    B, H, W, Cc = x.shape
    xg = x.reshape(B, H, W, G, Cc // G)
    mu = xg.mean((1, 2, 4), keepdims=True)
    var = xg.var((1, 2, 4), keepdims=True)
    return ((xg - mu) / jnp.sqrt(var + 1e-5)).reshape(x.shape) * g + b


def gn_sp_tp(bug):
    def f(x, g, b):
        B, Hl, W, cl = x.shape
        gl = cl // 2
        if bug == "groups-strided":
            xg = x.reshape(B, Hl, W, 2, gl).transpose(0, 1, 2, 4, 3)
        else:
            xg = x.reshape(B, Hl, W, gl, 2)
        st = jnp.stack([xg.sum((1, 2, 4)), (xg * xg).sum((1, 2, 4))])
        if bug == "psum-over-sp-and-tp":
            st = psum(st, ("sp", "tp"))
        elif bug != "no-psum-over-sp":
            st = psum(st, "sp")
        n = W * 2 * (Hl if bug == "no-psum-over-sp" else Hl * 2)
        mu = (st[0] / n)[:, None, None, :, None]
        var = (st[1] / n)[:, None, None, :, None] - mu * mu
        y = (xg - mu) * lax.rsqrt(var + 1e-5)
        if bug == "groups-strided":
            y = y.transpose(0, 1, 2, 4, 3)
        return y.reshape(x.shape) * g + b
    return f


GN_ARGS = (R(2, 8, 4, 16) + R(1, 8, 1, 16, scale=0.7) + R(1, 1, 1, 16), 1.0 + R(16, scale=0.2), R(16, scale=0.1))
C.smap("s.groupnorm_nhwc_height_sp_channels_tp.sp2xtp4", {"sp": 2, "tp": 4}, gn_sp_tp,
       (P(None, "sp", None, "tp"), P("tp"), P("tp")), P(None, "sp", None, "tp"), groupnorm_nhwc, GN_ARGS,
       bugs=[("psum-over-sp-and-tp", ["wrong-collective-group"]), ("no-psum-over-sp", ["missing-all-reduce"]),
             ("groups-strided", ["wrong-reshape-order"])])

# ---------------------------------------------------------------------------
# 15. bf16 pre-LN MLP block with LayerScale, sequence over sp, hidden over tp.


def preln_ls(x, g, b, w1, w2, ls):
    xf = x.astype(jnp.float32)
    mu = xf.mean(-1, keepdims=True)
    var = jnp.square(xf - mu).mean(-1, keepdims=True)
    h = ((xf - mu) * lax.rsqrt(var + 1e-5) * g + b).astype(jnp.bfloat16)
    z = jax.nn.silu(h @ w1) @ w2
    return x + ls.astype(jnp.bfloat16) * z


def preln_ls_sptp(bug):
    def f(x, g, b, w1, w2, ls):
        D = x.shape[-1] * 4
        xf = x.astype(jnp.float32)
        red = ("sp", "tp") if bug == "stats-psum-over-sp-too" else "tp"
        mu = psum(xf.sum(-1, keepdims=True), red) / D
        var = psum(jnp.square(xf - mu).sum(-1, keepdims=True), red) / D
        h = ((xf - mu) * lax.rsqrt(var + 1e-5) * g + b).astype(jnp.bfloat16)
        hf = lax.all_gather(h, "tp", axis=2, tiled=True)
        zp = jax.nn.silu(hf @ w1) @ w2
        if bug == "gamma-tiled-before-rs":
            z = lax.psum_scatter(jnp.tile(ls, 4).astype(jnp.bfloat16) * zp, "tp", scatter_dimension=2, tiled=True)
            return x + z
        z = lax.psum_scatter(zp, "tp", scatter_dimension=2, tiled=True)
        return x + ls.astype(jnp.bfloat16) * z
    return f


LS_SPECS = (P(None, "sp", "tp"), P("tp"), P("tp"), P(None, "tp"), P("tp", None), P("tp"))
LS_ARGS = ((R(2, 8, 32) + R(2, 8, 1)).astype(jnp.bfloat16), 1.0 + R(32, scale=0.2), R(32, scale=0.1),
           R(32, 64, scale=0.2).astype(jnp.bfloat16), R(64, 32, scale=0.2).astype(jnp.bfloat16),
           np.abs(R(32, scale=0.5)) + 0.1)
C.smap("s.bf16_preln_layerscale_mlp_sp_tp.sp2xtp4", {"sp": 2, "tp": 4}, preln_ls_sptp, LS_SPECS, P(None, "sp", "tp"),
       preln_ls, LS_ARGS, bugs=[("stats-psum-over-sp-too", ["wrong-collective-group"]),
                                ("gamma-tiled-before-rs", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.

P15 = {"w1": R(6, 12, scale=0.5), "g": 1.0 + R(12, scale=0.2), "b": R(12, scale=0.1), "w2": R(12, 3, scale=0.4)}
C.gspmd("g.syncbn_mlp_train_sgdm.dp8", {"dp": 8}, (P(), P(), P(), P("dp"), P("dp")), (P(), P(), P(), P()),
        bn_mlp_step, (P15, ST9, OPT9.init(P15), R(16, 6) + np.repeat(R(8, 6), 2, 0), R(16, 3)))

C.gspmd("g.layernorm_grads_hidden_tp.dp2xtp4", {"dp": 2, "tp": 4}, LN12_SPECS,
        (P(), (P("dp", None, "tp"), P("tp"), P("tp"))), ln_grads, LN12_ARGS)

C.gspmd("g.spectral_norm_cols_tp.tp4", {"tp": 4}, (P(None, "tp"), P()), (P(None, "tp"), P(), P()), spectral,
        (R(16, 32), l2n(R(16))))

C.gspmd("g.groupnorm_nhwc_sp_tp.sp2xtp4", {"sp": 2, "tp": 4}, (P(None, "sp", None, "tp"), P("tp"), P("tp")),
        P(None, "sp", None, "tp"), groupnorm_nhwc, GN_ARGS)

C.gspmd("g.periln_mlp_hidden_tp.tp4", {"tp": 4}, PL_SPECS, P(None, None, "tp"), periln, PL_ARGS)

C.gspmd("g.powernorm_train.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", None, "tp"), P("tp"), P("tp"), P("tp")),
        (P("dp", None, "tp"), P("tp")), powernorm, PN_ARGS)

C.gspmd("g.dyt_head_train_sgdm.dp2xtp4", {"dp": 2, "tp": 4}, (SP4, SS4, P("dp", None, "tp"), P("dp")),
        (SP4, SS4, P()), dyt_step, DYT_ARGS)

C.gspmd("g.bf16_preln_layerscale_mlp.sp2xtp4", {"sp": 2, "tp": 4}, LS_SPECS, P(None, "sp", "tp"), preln_ls, LS_ARGS)

C.finish()
