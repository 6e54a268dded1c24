"""samples/fresh105: a 105th batch of programs as a user writes them, on the theme of time-series forecasting models in JAX (PatchTST with channel independence over a mesh axis, RevIN with time sharded, Informer ProbSparse attention, Autoformer series decomposition and FFT auto-correlation, N-BEATS / N-HiTS stacks with basis expansions and pooling, TCNs with channels and time both sharded, quantile and CRPS losses, multi-horizon decoders with teacher forcing in lax.scan, optax training steps under dp, dp x tp and time sharding), none of them an idiom of samples/fresh .. fresh104, probe, train or wild.
shard_map families:
 1. a PatchTST training step on dp2 x ch4 (channel independence: the
    series' channels over ch, the batch over dp): patches of 8 with stride 4
    after a replication pad of 4 at the end, a shared linear patch embedding
    plus positional embedding, one single-head self-attention layer over the
    patches, a flatten head to the horizon; local MSE, jax.grad, gradients
    pmean'd over (dp, ch) by hand, optax.adam. Bugs: gradients pmean'd over
    ch only, the reported loss psum'd instead of pmean'd.
 2. RevIN + a linear map over time (NLinear-style) on dp2 x sp4 with the
    look-back window over sp: per-series mean and std over the global time
    axis (two passes, psum'd), affine RevIN, the time-to-horizon weight
    passed whole and sliced at the sp offset (row-parallel, psum over sp),
    de-normalisation by the inverse affine and the global std and mean.
    Bugs: the second pass around the local mean, de-normalisation with the
    local block's std, the weight sliced at the dp index.
 3. Informer ProbSparse self-attention on sp4 (queries over sp, keys and
    values all_gather'd): sparsity measure M(q) = max_k - mean_k of the
    scores, the top-u queries of the whole sequence (u = 8 of 32) found by
    an all_gather of M and a threshold at the u-th largest, the others get
    the mean of V over the whole sequence. Bugs: the top-u/4 of the local
    block, the mean of the local values.
 4. Autoformer series decomposition on dp2 x sp4: moving average of kernel
    5 with Autoformer's replication padding at both global ends, halos of 2
    from both neighbours by ppermute, the average by a depthwise
    lax.conv_general_dilated of ones (the baseline by lax.reduce_window).
    Bugs: zero padding at the global ends, the left halo taken from the
    right neighbour, cyclic halos.
 5. Autoformer auto-correlation on dp2 x tp4 (d_model over tp): per-channel
    correlation by rfft / irfft over time, averaged over the channels (psum
    over tp), top-3 delays, softmax weights, time-delay aggregation of V by
    take_along_axis at (t + tau) mod L, row-parallel output projection.
    Bugs: the channel mean of the local channels, the delay applied as
    t - tau, no psum of the output projection.
 6. N-BEATS (trend block with a polynomial basis, seasonality block with a
    Fourier basis, generic block) on dp2 x tp4: each block's FC1 column-
    parallel and FC2 row-parallel (psum over tp), the theta projections and
    bases replicated, doubly residual stacking. Bugs: no psum in the
    seasonality block, psum over dp, FC2's bias added before the psum.
 7. N-HiTS (two blocks with max-pool kernels 4 and 2, coarse forecasts
    linearly interpolated to the horizon) on dp2 x sp4 with the look-back
    window over sp: pooling local, FC1 row-parallel over the pooled time
    (psum over sp), the backcast interpolated to the whole window and sliced
    at the device's offset. Bugs: the backcast sliced at offset 0, no psum.
 8. a TCN on sp4 x tp2 (time over sp, channels over tp): causal dilated
    convolutions (kernel 3, dilations 2 and 4, so the second halo is a whole
    block) by lax.conv_general_dilated on the halo-extended block, input
    channels over tp (psum over tp of the partial convolution), the output
    sliced back to the device's channels for the residual. Bugs: psum over
    sp, the halo from the right neighbour, the channels sliced at offset 0.
 9. a multi-quantile forecaster training step on dp2 x tp4 (8 quantiles, the
    quantile head column-sharded over tp, the quantile levels passed whole
    and sliced at the tp offset), pinball loss, jax.grad, the shared
    layer's gradients psum'd over tp and pmean'd over dp, optax.sgd with
    momentum. Bugs: quantile levels sliced at offset 0, the shared layer's
    gradients not psum'd over tp, the head's gradients psum'd over tp.
10. the fair CRPS of an 8-member ensemble on dp2 x ens4 (members over ens):
    E|X - y| psum'd over ens, the pairwise term against all_gather'd
    members. Bugs: pairs among the local members only, the pair count from
    the local member count, the mean over dp psum'd.
11. a seq2seq GRU decoder in lax.scan on dp4 x tp2 (hidden units over tp):
    teacher forcing for the first 5 of 8 horizons, then its own
    predictions; h all_gather'd each step, the scalar prediction a
    row-parallel psum over tp. Bugs: the partial (pre-psum) prediction fed
    back, h gathered untiled and reshaped without a transpose.
12. a DLinear training step on dp2 x sp4 with check_vma=True: the window
    decomposed by a moving average of 5 (replication pad, halos by
    ppermute), seasonal and trend linear maps over time row-parallel over
    sp, the loss pmean'd over dp inside the differentiated function (JAX
    reduces the gradients), optax.adamw. Bugs: the left halo taken from the
    right neighbour, cyclic halos.
13. RevIN statistics on sp8 by Chan's parallel combination: each device's
    (mean, M2) all_gather'd, M2 = sum M2_i + n * sum (mean_i - mean)^2.
    Bugs: no between-block term, M2 divided by the local count.
14. non-crossing quantiles on dp2 x tp4: quantile k = base + cumsum of
    softplus increments, the increments' head column-sharded over tp, the
    cumulative sum across devices by an all_gather of the block totals and
    an exclusive prefix; pinball loss psum'd over tp, pmean'd over dp.
    Bugs: an inclusive prefix, no prefix.
15. Informer's distilling layer on sp4: Conv1d with circular padding 1 (so
    the cyclic ppermute halos are right here), eval-mode BatchNorm, ELU,
    MaxPool1d(3, stride 2, padding 1) with a left halo of 1 (-inf on
    device 0). Bugs: zero-padded conv ends, a cyclic pooling halo.
16. a teacher-forced LSTM forecaster training step on dp8 (lax.scan,
    jax.grad, gradients pmean'd, optax.chain(clip_by_global_norm, sgd)).
    The series' scales vary 80-fold over the batch, so the devices'
    gradient norms differ. Bugs: each device's gradients clipped by their
    own norm before the pmean, the loss of the local batch returned.
17. a centred moving average whose windows shrink at the series' ends, by
    a global prefix sum on sp4 (local cumsum + exclusive offset from
    all_gather'd block totals, halos of prefix values from both
    neighbours, the grand total on the last device, counts from global
    positions). Bugs: an inclusive offset, counts from local positions.
18. ProbSparse attention as Informer's code writes it on dp2 x tp4 (heads
    over tp): the top-u queries gathered by take_along_axis, their attention
    scattered into the mean of V with .at[].set under vmap (the baseline
    selects with a mask), a row-parallel output projection. Bugs: no psum,
    psum over dp. The same with 8 heads (2 per device); bug: no psum.
19. auto-correlation with time over sp4: all_to_all from time-sharded to
    channel-sharded, FFT over the whole series, channel mean psum'd, top-2
    delays, aggregation, all_to_all back. Bugs: the channel mean of the
    local channels, the aggregation rolled within each device's time block
    (no all_to_all for V or back).
20. PatchTST's flatten head in bf16 on dp2 x tp4 (flattened patch features
    over tp, f32 accumulation, f32 psum). Bugs: partial sums rounded to bf16
    before the psum, no psum.
21. PatchTST forward and loss with one channel per device on ch8 (the
    local channel dimension is 1). Bug: the loss not pmean'd over ch.
GSPMD pairs (correct): the PatchTST training step of family 1 on dp2 x ch4;
PatchTST forward with channels over ch8; Autoformer
decomposition + auto-correlation with time over sp4 and batch over dp2;
an N-BEATS training step with optax.adam on dp2 x tp4; pinball + CRPS on
dp2 x ens4; a teacher-forced GRU decoder in lax.scan on dp8; ProbSparse
attention with time over sp4; Informer's distilling layer on dp2 x sp4; the
LSTM training step of family 16 on dp8.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh105.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh105.py"
C = Corpus("samples/fresh105", SCRIPT, "samples/gen/run_fresh105.sh", sys.argv[1:])
rng, R, I = seeded(105105)
psum, pmean, idx, ppermute = lax.psum, lax.pmean, lax.axis_index, lax.ppermute


def from_left(x, axis, n, cyclic=False):
    perm = [(i, (i + 1) % n) for i in range(n)] if cyclic else [(i, i + 1) for i in range(n - 1)]
    return ppermute(x, axis, perm)


def from_right(x, axis, n, cyclic=False):
    perm = [(i, (i - 1) % n) for i in range(n)] if cyclic else [(i, i - 1) for i in range(1, n)]
    return ppermute(x, axis, perm)


# ---------------------------------------------------------------------------
# 1. PatchTST training step, channel independence over ch.
B1, L1, C1, H1, PL1, ST1, D1 = 4, 32, 8, 8, 8, 4, 16
N1 = (L1 + ST1 - PL1) // ST1 + 1  # 8 patches


def patchtst_fwd(p, x):
    # x: (b, L, c) -> (b, H, c)
    xc = jnp.swapaxes(x, 1, 2)  # (b, c, L)
    xc = jnp.concatenate([xc, jnp.repeat(xc[..., -1:], ST1, -1)], -1)
    win = jnp.arange(N1)[:, None] * ST1 + jnp.arange(PL1)[None, :]
    patches = xc[..., win]  # (b, c, N, PL)
    e = patches @ p["wp"] + p["pos"]
    q, k, v = e @ p["wq"], e @ p["wk"], e @ p["wv"]
    a = jax.nn.softmax(jnp.einsum("bcnd,bcmd->bcnm", q, k) / np.sqrt(D1), -1)
    z = e + jnp.einsum("bcnm,bcmd->bcnd", a, v)
    z = z / jnp.sqrt(jnp.mean(z * z, -1, keepdims=True) + 1e-6)
    out = z.reshape(z.shape[0], z.shape[1], N1 * D1) @ p["head"] + p["hb"]
    return jnp.swapaxes(out, 1, 2)


OPT1 = optax.adam(3e-3)


def patchtst_step(p, s, x, y):
    l, g = jax.value_and_grad(lambda p: jnp.mean(jnp.square(patchtst_fwd(p, x) - y)))(p)
    u, s = OPT1.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def patchtst_fwd_local(p, x):
    # written with explicit slices instead of a gather of windows
    b, L, c = x.shape
    xt = jnp.transpose(x, (0, 2, 1))
    xt = jnp.pad(xt, ((0, 0), (0, 0), (0, ST1)), mode="edge")
    patches = jnp.stack([lax.slice_in_dim(xt, n * ST1, n * ST1 + PL1, axis=2) for n in range(N1)], 2)
    e = jnp.einsum("bcnp,pd->bcnd", patches, p["wp"]) + p["pos"][None, None]
    q = jnp.einsum("bcnd,de->bcne", e, p["wq"])
    k = jnp.einsum("bcnd,de->bcne", e, p["wk"])
    v = jnp.einsum("bcnd,de->bcne", e, p["wv"])
    sc = jnp.einsum("bcne,bcme->bcnm", q, k) * (1.0 / np.sqrt(D1))
    sc = sc - sc.max(-1, keepdims=True)
    w = jnp.exp(sc)
    z = e + jnp.einsum("bcnm,bcme->bcne", w / w.sum(-1, keepdims=True), v)
    z = z * lax.rsqrt(jnp.mean(z * z, -1, keepdims=True) + 1e-6)
    out = jnp.einsum("bcf,fh->bhc", z.reshape(b, c, N1 * D1), p["head"]) + p["hb"][None, :, None]
    return out



def patchtst_body(bug):
    fwd_local = patchtst_fwd_local

    def f(p, s, x, y):
        l, g = jax.value_and_grad(lambda p: jnp.mean(jnp.square(fwd_local(p, x) - y)))(p)
        axes = "ch" if bug == "grads-over-ch-only" else ("dp", "ch")
        g = jax.tree.map(lambda t: pmean(t, axes), g)
        l = psum(l, ("dp", "ch")) if bug == "loss-psum" else pmean(l, ("dp", "ch"))
        u, s = OPT1.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P1 = {"wp": R(PL1, D1, scale=0.3), "pos": R(N1, D1, scale=0.1), "wq": R(D1, D1, scale=0.25),
      "wk": R(D1, D1, scale=0.25), "wv": R(D1, D1, scale=0.25), "head": R(N1 * D1, H1, scale=0.1),
      "hb": R(H1, scale=0.1)}
S1 = OPT1.init(P1)
SP1 = jax.tree.map(lambda _: P(), P1)
SS1 = jax.tree.map(lambda _: P(), S1)
A1 = (P1, S1, R(B1, L1, C1), R(B1, H1, C1))
C.smap("s.patchtst_chan_indep_adam_step.dp2xch4", {"dp": 2, "ch": 4}, patchtst_body,
       (SP1, SS1, P("dp", None, "ch"), P("dp", None, "ch")), (SP1, SS1, P()), patchtst_step, A1,
       bugs=[("grads-over-ch-only", ["wrong-collective-group"]), ("loss-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 2. RevIN + linear over time, look-back window over sp.
B2, L2, C2, H2 = 4, 32, 4, 8
EPS2 = 1e-5


def revin_linear_ref(x, w, b, gamma, beta):
    mu = jnp.mean(x, 1, keepdims=True)
    sd = jnp.sqrt(jnp.var(x, 1, keepdims=True) + EPS2)
    xn = (x - mu) / sd * gamma + beta
    yn = jnp.einsum("blc,lh->bhc", xn, w) + b[None, :, None]
    yn = (yn - beta) / (gamma + EPS2 * EPS2)
    return yn * sd + mu


def revin_linear_sp(bug):
    def f(x, w, b, gamma, beta):
        tl = x.shape[1]
        s1 = psum(jnp.sum(x, 1, keepdims=True), "sp")
        mu = s1 / L2
        mu_loc = jnp.mean(x, 1, keepdims=True)
        centre = mu_loc if bug == "var-local-mean" else mu
        var = psum(jnp.sum(jnp.square(x - centre), 1, keepdims=True), "sp") / L2
        sd = jnp.sqrt(var + EPS2)
        xn = (x - mu) / sd * gamma + beta
        off = idx("dp") * tl if bug == "w-sliced-at-dp" else idx("sp") * tl
        wl = lax.dynamic_slice_in_dim(w, off, tl, 0)
        yn = psum(jnp.einsum("blc,lh->bhc", xn, wl), "sp") + b[None, :, None]
        yn = (yn - beta) / (gamma + EPS2 * EPS2)
        if bug == "denorm-local-std":
            sd = jnp.sqrt(jnp.var(x, 1, keepdims=True) + EPS2)
        return yn * sd + mu
    return f


A2 = (R(B2, L2, C2) * 2 + R(B2, 1, C2) * 3 + np.linspace(-1, 2, L2, dtype=np.float32)[None, :, None],
      R(L2, H2, scale=0.2), R(H2, scale=0.1), 1 + R(C2, scale=0.1), R(C2, scale=0.1))
C.smap("s.revin_nlinear_time_sharded.dp2xsp4", {"dp": 2, "sp": 4}, revin_linear_sp,
       (P("dp", "sp"), P(), P(), P(), P()), P("dp"), revin_linear_ref, A2,
       bugs=[("var-local-mean", ["wrong-operand"]), ("denorm-local-std", ["missing-collective"]),
             ("w-sliced-at-dp", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. Informer ProbSparse self-attention, queries over sp.
B3, T3, NH3, E3, U3 = 2, 32, 2, 8, 8


def probsparse_ref(q, k, v):
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E3)
    m = s.max(-1) - s.mean(-1)  # (b, h, q)
    top = lax.top_k(m, U3)[1]  # (b, h, u)
    sel = jnp.any(top[..., None] == jnp.arange(T3), -2)  # (b, h, q)
    full = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)
    lazy = jnp.broadcast_to(v.mean(1, keepdims=True), full.shape)
    return jnp.where(jnp.swapaxes(sel, 1, 2)[..., None], full, lazy)


def probsparse_sp(bug):
    def f(q, k, v):
        kf = lax.all_gather(k, "sp", axis=1, tiled=True)
        vf = lax.all_gather(v, "sp", axis=1, tiled=True)
        s = jnp.einsum("bqhe,bkhe->bhqk", q, kf) / np.sqrt(E3)
        m = jnp.max(s, -1) - jnp.mean(s, -1)  # local queries
        if bug == "topu-local":
            thr = lax.top_k(m, U3 // 4)[0][..., -1]
        else:
            mall = lax.all_gather(m, "sp", axis=2, tiled=True)
            thr = lax.top_k(mall, U3)[0][..., -1]
        sel = m >= thr[..., None]
        full = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), vf)
        vbar = v.mean(1, keepdims=True) if bug == "vmean-local" else vf.mean(1, keepdims=True)
        return jnp.where(jnp.transpose(sel, (0, 2, 1))[..., None], full, vbar)
    return f


A3 = (R(B3, T3, NH3, E3), R(B3, T3, NH3, E3), R(B3, T3, NH3, E3))
C.smap("s.informer_probsparse_global_topu.sp4", {"sp": 4}, probsparse_sp, (P(None, "sp"),) * 3, P(None, "sp"),
       probsparse_ref, A3,
       bugs=[("topu-local", ["missing-collective"]), ("vmean-local", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 4. Autoformer series decomposition (moving average 5, replication pad).
B4, T4, C4, K4 = 4, 32, 4, 5


def decomp_ref(x):
    r = (K4 - 1) // 2
    xp = jnp.concatenate([jnp.repeat(x[:, :1], r, 1), x, jnp.repeat(x[:, -1:], r, 1)], 1)
    trend = lax.reduce_window(xp, 0.0, lax.add, (1, K4, 1), (1, 1, 1), "VALID") / K4
    return x - trend, trend


def decomp_sp(bug):
    def f(x):
        n, r = 4, (K4 - 1) // 2
        i = idx("sp")
        cyc = bug == "cyclic-halo"
        left = from_right(x[:, -r:], "sp", n, cyc) if bug == "left-from-right" else from_left(x[:, -r:], "sp", n, cyc)
        right = from_right(x[:, :r], "sp", n, cyc)
        if bug != "zero-ends" and not cyc:
            left = jnp.where(i == 0, jnp.repeat(x[:, :1], r, 1), left)
            right = jnp.where(i == n - 1, jnp.repeat(x[:, -1:], r, 1), right)
        xp = jnp.concatenate([left, x, right], 1)
        ker = jnp.ones((K4, 1, x.shape[2]), x.dtype) / K4
        trend = lax.conv_general_dilated(xp, ker, (1,), "VALID", dimension_numbers=("NWC", "WIO", "NWC"),
                                         feature_group_count=x.shape[2])
        return x - trend, trend
    return f


X4 = np.cumsum(R(B4, T4, C4, scale=0.5), 1).astype(np.float32)
C.smap("s.autoformer_decomp_replpad_halo.dp2xsp4", {"dp": 2, "sp": 4}, decomp_sp, (P("dp", "sp"),),
       (P("dp", "sp"), P("dp", "sp")), decomp_ref, (X4,),
       bugs=[("zero-ends", ["wrong-operand"]), ("left-from-right", ["wrong-permutation"]),
             ("cyclic-halo", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 5. Autoformer auto-correlation (FFT), d_model over tp.
B5, L5, D5, TOPK5 = 4, 16, 16, 3


def autocorr_ref(q, k, v, wo):
    qf, kf = jnp.fft.rfft(q, axis=1), jnp.fft.rfft(k, axis=1)
    corr = jnp.fft.irfft(qf * jnp.conj(kf), n=L5, axis=1)  # (b, tau, d)
    mc = corr.mean(-1)
    w, tau = lax.top_k(mc, TOPK5)
    w = jax.nn.softmax(w, -1)
    t = jnp.arange(L5)
    agg = 0.0
    for j in range(TOPK5):
        g = (t[None, :] + tau[:, j:j + 1]) % L5
        agg = agg + w[:, j, None, None] * jnp.take_along_axis(v, g[..., None], 1)
    return agg @ wo


def autocorr_tp(bug):
    def f(q, k, v, wo):
        corr = jnp.fft.irfft(jnp.fft.rfft(q, axis=1) * jnp.conj(jnp.fft.rfft(k, axis=1)), n=L5, axis=1)
        if bug == "chan-mean-local":
            mc = corr.mean(-1)
        else:
            mc = psum(corr.sum(-1), "tp") / D5
        w, tau = lax.top_k(mc, TOPK5)
        w = jax.nn.softmax(w, -1)
        t = jnp.arange(L5)
        sgn = -1 if bug == "delay-sign" else 1
        agg = sum(w[:, j, None, None] * jnp.take_along_axis(v, ((t[None, :] + sgn * tau[:, j:j + 1]) % L5)[..., None], 1)
                  for j in range(TOPK5))
        out = jnp.einsum("bld,de->ble", agg, wo)
        return out if bug == "no-psum-out" else psum(out, "tp")
    return f


t5 = np.arange(L5, dtype=np.float32)
per5 = np.sin(2 * np.pi * t5 / 5)[None, :, None].astype(np.float32)
A5 = (R(B5, L5, D5, scale=0.5) + per5, R(B5, L5, D5, scale=0.5) + per5, R(B5, L5, D5), R(D5, D5, scale=0.3))
C.smap("s.autoformer_autocorr_fft_topk_delays.dp2xtp4", {"dp": 2, "tp": 4}, autocorr_tp,
       (P("dp", None, "tp"),) * 3 + (P("tp", None),), P("dp"), autocorr_ref, A5,
       bugs=[("chan-mean-local", ["missing-all-reduce"]), ("delay-sign", ["wrong-offset"]),
             ("no-psum-out", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 6. N-BEATS interpretable + generic stacks, FC width over tp.
B6, L6, H6, W6 = 4, 16, 8, 32


def nbeats_bases():
    tb, tf = np.arange(L6) / L6, np.arange(L6, L6 + H6) / L6
    trend = (np.stack([tb ** i for i in range(3)]), np.stack([tf ** i for i in range(3)]))

    def four(t):
        return np.stack([np.ones_like(t)] + [f(2 * np.pi * h * t) for h in (1, 2) for f in (np.cos, np.sin)])
    return [tuple(a.astype(np.float32) for a in trend), (four(tb).astype(np.float32), four(tf).astype(np.float32))]


BASES6 = nbeats_bases()


def nbeats_block_out(h, blk, j):
    if j < 2:
        bb, bf = BASES6[j]
        nb = bb.shape[0]
        th = h @ blk["wth"]
        return th[:, :nb] @ bb, th[:, nb:] @ bf
    th = h @ blk["wth"]
    return th[:, :L6], th[:, L6:]


def nbeats_ref(x, blocks):
    fc = 0.0
    for j, blk in enumerate(blocks):
        h = jax.nn.relu(x @ blk["w1"] + blk["b1"])
        h = jax.nn.relu(h @ blk["w2"] + blk["b2"])
        back, fore = nbeats_block_out(h, blk, j)
        x = x - back
        fc = fc + fore
    return fc


def nbeats_tp(bug):
    def f(x, blocks):
        fc = jnp.zeros((x.shape[0], H6), x.dtype)
        for j, blk in enumerate(blocks):
            h = jax.nn.relu(jnp.dot(x, blk["w1"]) + blk["b1"])
            part = jnp.dot(h, blk["w2"])
            if bug == "fc2-bias-in-psum":
                part = part + blk["b2"]
            if bug == "no-psum-seasonality" and j == 1:
                red = part
            elif bug == "psum-over-dp":
                red = psum(part, "dp")
            else:
                red = psum(part, "tp")
            h = jax.nn.relu(red if bug == "fc2-bias-in-psum" else red + blk["b2"])
            back, fore = nbeats_block_out(h, blk, j)
            x = x - back
            fc = fc + fore
        return fc
    return f


def nbeats_params():
    out = []
    for nth in (6, 10, L6 + H6):
        out.append({"w1": R(L6, W6, scale=0.25), "b1": R(W6, scale=0.1), "w2": R(W6, W6, scale=0.2),
                    "b2": R(W6, scale=0.1), "wth": R(W6, nth, scale=0.2)})
    return out


PB6 = nbeats_params()
SPB6 = [{"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp", None), "b2": P(), "wth": P()} for _ in PB6]
C.smap("s.nbeats_trend_season_generic_tp.dp2xtp4", {"dp": 2, "tp": 4}, nbeats_tp, (P("dp"), SPB6), P("dp"),
       nbeats_ref, (R(B6, L6), PB6),
       bugs=[("no-psum-seasonality", ["missing-all-reduce"]), ("psum-over-dp", ["wrong-axis"]),
             ("fc2-bias-in-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. N-HiTS: multi-rate pooling, interpolated coarse forecasts, window over sp.
B7, L7, H7, W7 = 4, 32, 8, 16
POOL7, RATE7 = (4, 2), (4, 2)  # pooling kernels, forecast down-sampling rates


def interp_matrix(n_in, n_out):
    # linear interpolation, align_corners=False (as torch F.interpolate)
    m = np.zeros((n_in, n_out), np.float32)
    for o in range(n_out):
        src = max((o + 0.5) * n_in / n_out - 0.5, 0.0)
        i0 = min(int(np.floor(src)), n_in - 1)
        i1 = min(i0 + 1, n_in - 1)
        a = src - i0
        m[i0, o] += 1 - a
        m[i1, o] += a
    return m


def nhits_ref(x, blocks):
    fc = 0.0
    for kp, r, blk in zip(POOL7, RATE7, blocks):
        pooled = lax.reduce_window(x, -jnp.inf, lax.max, (1, kp), (1, kp), "VALID")
        h = jax.nn.relu(pooled @ blk["w1"] + blk["b1"])
        h = jax.nn.relu(h @ blk["w2"] + blk["b2"])
        nb = L7 // r
        th = h @ blk["wth"]
        x = x - th[:, :nb] @ interp_matrix(nb, L7)
        fc = fc + th[:, nb:] @ interp_matrix(H7 // r, H7)
    return fc


def nhits_sp(bug):
    def f(x, blocks):
        tl = x.shape[1]
        fc = 0.0
        for kp, r, blk in zip(POOL7, RATE7, blocks):
            pooled = x.reshape(x.shape[0], tl // kp, kp).max(-1)
            part = pooled @ blk["w1"]
            h = jax.nn.relu((part if bug == "no-psum" else psum(part, "sp")) + blk["b1"])
            h = jax.nn.relu(h @ blk["w2"] + blk["b2"])
            nb = L7 // r
            th = h @ blk["wth"]
            back = th[:, :nb] @ interp_matrix(nb, L7)
            off = 0 if bug == "backcast-offset0" else idx("sp") * tl
            x = x - lax.dynamic_slice_in_dim(back, off, tl, 1)
            fc = fc + th[:, nb:] @ interp_matrix(H7 // r, H7)
        return fc
    return f


PB7 = [{"w1": R(L7 // kp, W7, scale=0.3), "b1": R(W7, scale=0.1), "w2": R(W7, W7, scale=0.25),
        "b2": R(W7, scale=0.1), "wth": R(W7, L7 // r + H7 // r, scale=0.3)} for kp, r in zip(POOL7, RATE7)]
SPB7 = [{"w1": P("sp", None), "b1": P(), "w2": P(), "b2": P(), "wth": P()} for _ in PB7]
C.smap("s.nhits_multirate_pool_interp.dp2xsp4", {"dp": 2, "sp": 4}, nhits_sp, (P("dp", "sp"), SPB7), P("dp"),
       nhits_ref, (R(B7, L7), PB7),
       bugs=[("backcast-offset0", ["wrong-offset"]), ("no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 8. TCN with time over sp and channels over tp.
B8, T8, C8, K8, DIL8 = 2, 32, 8, 3, (2, 4)


def tcn2d_ref(x, ws, bs):
    for w, b, d in zip(ws, bs, DIL8):
        y = lax.conv_general_dilated(x, w, (1,), [(d * (K8 - 1), 0)], rhs_dilation=(d,),
                                     dimension_numbers=("NWC", "WIO", "NWC"))
        x = x + jnp.tanh(y + b)
    return x


def tcn2d_body(bug):
    def f(x, ws, bs):
        n, cl = 4, x.shape[2]
        for w, b, d in zip(ws, bs, DIL8):
            h = d * (K8 - 1)
            src = x[:, -h:]
            halo = from_right(src, "sp", n) if bug == "halo-from-right" else from_left(src, "sp", n)
            ext = jnp.concatenate([halo, x], 1)
            part = lax.conv_general_dilated(ext, w, (1,), "VALID", rhs_dilation=(d,),
                                            dimension_numbers=("NWC", "WIO", "NWC"))
            y = psum(part, "sp" if bug == "psum-over-sp" else "tp") + b
            off = 0 if bug == "chan-offset0" else idx("tp") * cl
            x = x + jnp.tanh(lax.dynamic_slice_in_dim(y, off, cl, 2))
        return x
    return f


WS8 = [R(K8, C8, C8, scale=0.3) for _ in DIL8]
BS8 = [R(C8, scale=0.1) for _ in DIL8]
C.smap("s.tcn_time_sp_channels_tp_conv.sp4xtp2", {"sp": 4, "tp": 2}, tcn2d_body,
       (P(None, "sp", "tp"), [P(None, "tp", None)] * 2, [P()] * 2), P(None, "sp", "tp"), tcn2d_ref,
       (R(B8, T8, C8), WS8, BS8),
       bugs=[("psum-over-sp", ["wrong-axis"]), ("halo-from-right", ["wrong-permutation"]),
             ("chan-offset0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 9. multi-quantile forecaster, quantile head over tp, pinball loss, sgd momentum.
B9, F9, DH9, H9, Q9 = 8, 12, 16, 4, 8
TAUS9 = (np.arange(1, Q9 + 1) / (Q9 + 1)).astype(np.float32)
OPT9 = optax.sgd(0.05, momentum=0.9)


def pinball(pred, y, tau):
    d = y - pred
    return jnp.maximum(tau * d, (tau - 1) * d)


def quant_fwd(p, x):
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    return jnp.einsum("bd,dhq->bhq", h, p["wq"])


def quant_step(p, s, x, y, taus):
    l, g = jax.value_and_grad(lambda p: jnp.mean(pinball(quant_fwd(p, x), y[..., None], taus)))(p)
    u, s = OPT9.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def quant_body(bug):
    def f(p, s, x, y, taus):
        ql = p["wq"].shape[2]
        off = 0 if bug == "taus-offset0" else idx("tp") * ql
        tl = lax.dynamic_slice_in_dim(taus, off, ql)

        def loss(p):
            return jnp.sum(pinball(quant_fwd(p, x), y[..., None], tl)) / (x.shape[0] * H9 * Q9)
        l, g = jax.value_and_grad(loss)(p)
        l = pmean(psum(l, "tp"), "dp")
        g = dict(g)
        for k in ("w1", "b1"):
            g[k] = pmean(g[k] if bug == "shared-no-tp-psum" else psum(g[k], "tp"), "dp")
        g["wq"] = pmean(psum(g["wq"], "tp") if bug == "head-psum-tp" else g["wq"], "dp")
        u, s = OPT9.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P9 = {"w1": R(F9, DH9, scale=0.3), "b1": R(DH9, scale=0.1), "wq": R(DH9, H9, Q9, scale=0.3)}
S9 = OPT9.init(P9)
SP9 = {"w1": P(), "b1": P(), "wq": P(None, None, "tp")}
SS9 = state_specs(S9, SP9)
C.smap("s.quantile_head_tp_pinball_sgd.dp2xtp4", {"dp": 2, "tp": 4}, quant_body,
       (SP9, SS9, P("dp"), P("dp"), P()), (SP9, SS9, P()), quant_step, (P9, S9, R(B9, F9), R(B9, H9), TAUS9),
       bugs=[("taus-offset0", ["wrong-offset"]), ("shared-no-tp-psum", ["missing-all-reduce"]),
             ("head-psum-tp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 10. fair CRPS of an ensemble, members over ens.
M10, B10, H10 = 8, 4, 8


def crps_ref(xs, y):
    t1 = jnp.mean(jnp.abs(xs - y[None]), 0)
    t2 = jnp.sum(jnp.abs(xs[:, None] - xs[None, :]), (0, 1)) / (2 * M10 * (M10 - 1))
    c = t1 - t2
    return c, jnp.mean(c)


def crps_body(bug):
    def f(xs, y):
        ml = xs.shape[0]
        t1 = psum(jnp.sum(jnp.abs(xs - y[None]), 0), "ens") / M10
        others = xs if bug == "pairs-local" else lax.all_gather(xs, "ens", axis=0, tiled=True)
        pair = psum(jnp.sum(jnp.abs(xs[:, None] - others[None, :]), (0, 1)), "ens")
        m = ml if bug == "pair-count-local" else M10
        c = t1 - pair / (2 * m * (m - 1))
        red = psum if bug == "mean-psum-dp" else pmean
        return c, red(jnp.mean(c), "dp")
    return f


C.smap("s.ensemble_fair_crps_members_sharded.dp2xens4", {"dp": 2, "ens": 4}, crps_body,
       (P("ens", "dp"), P("dp")), (P("dp"), P()), crps_ref, (R(M10, B10, H10), R(B10, H10)),
       bugs=[("pairs-local", ["missing-collective"]), ("pair-count-local", ["wrong-scale"]),
             ("mean-psum-dp", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 11. seq2seq GRU decoder, teacher forcing then free running, hidden over tp.
B11, L11, T11, HD11, TF11 = 8, 12, 8, 16, 5


def gru_cell(u, hfull, hloc, p):
    # u: (b,), gates for the hidden units p covers
    gx = u[:, None, None] * p["wx"][None]  # (b, 3, h)
    gh = jnp.einsum("bk,gkh->bgh", hfull, p["wh"]) + p["bh"]
    z = jax.nn.sigmoid(gx[:, 0] + gh[:, 0])
    r = jax.nn.sigmoid(gx[:, 1] + gh[:, 1])
    nn_ = jnp.tanh(gx[:, 2] + r * gh[:, 2])
    return (1 - z) * nn_ + z * hloc


def s2s_ref(ctx, y, p):
    h0 = jnp.tanh(ctx @ p["we"])
    ys = jnp.swapaxes(y, 0, 1)  # (T, b)
    prev_true = jnp.concatenate([ctx[None, :, -1], ys[:-1]], 0)

    def step(c, xs):
        h, yhat_prev = c
        t, ytrue_prev = xs
        u = jnp.where(t < TF11, ytrue_prev, yhat_prev)
        h = gru_cell(u, h, h, p)
        yhat = h @ p["wo"] + p["bo"]
        return (h, yhat), yhat
    _, out = lax.scan(step, (h0, jnp.zeros(ctx.shape[0])), (jnp.arange(T11), prev_true))
    return jnp.swapaxes(out, 0, 1)


def s2s_tp(bug):
    def f(ctx, y, p):
        hl = jnp.tanh(ctx @ p["we"])
        b = ctx.shape[0]

        def gather(h):
            if bug == "gather-untiled-no-transpose":
                return lax.all_gather(h, "tp", axis=0).reshape(b, HD11)
            return lax.all_gather(h, "tp", axis=1, tiled=True)
        outs = []
        yhat = jnp.zeros(b)
        for t in range(T11):
            ytrue_prev = ctx[:, -1] if t == 0 else y[:, t - 1]
            u = ytrue_prev if t < TF11 else yhat
            hl = gru_cell(u, gather(hl), hl, p)
            part = hl @ p["wo"]
            yhat = psum(part, "tp") + p["bo"]
            outs.append(yhat)
            if bug == "feed-partial-pred":
                yhat = part + p["bo"]
        return jnp.stack(outs, 1)
    return f


P11 = {"we": R(L11, HD11, scale=0.3), "wx": R(3, HD11, scale=0.5), "wh": R(3, HD11, HD11, scale=0.25),
       "bh": R(3, HD11, scale=0.1), "wo": R(HD11, scale=0.4), "bo": R(scale=0.1)}
SP11 = {"we": P(None, "tp"), "wx": P(None, "tp"), "wh": P(None, None, "tp"), "bh": P(None, "tp"), "wo": P("tp"),
        "bo": P()}
C.smap("s.seq2seq_gru_teacher_forcing_scan_tp.dp4xtp2", {"dp": 4, "tp": 2}, s2s_tp, (P("dp"), P("dp"), SP11),
       P("dp"), s2s_ref, (R(B11, L11), R(B11, T11), P11),
       bugs=[("feed-partial-pred", ["missing-all-reduce"]), ("gather-untiled-no-transpose", ["wrong-layout"])])

# ---------------------------------------------------------------------------
# 12. DLinear training step, window over sp, check_vma=True, adamw.
B12, L12, C12, H12, K12 = 4, 32, 2, 8, 5
OPT12 = optax.adamw(1e-2, weight_decay=0.05)


def dlinear_fwd(p, x):
    s, t = decomp_k(x)
    return jnp.einsum("blc,lh->bhc", s, p["ws"]) + jnp.einsum("blc,lh->bhc", t, p["wt"]) + p["b"][None, :, None]


def decomp_k(x):
    r = (K12 - 1) // 2
    xp = jnp.pad(x, ((0, 0), (r, r), (0, 0)), mode="edge")
    trend = sum(xp[:, j:j + x.shape[1]] for j in range(K12)) / K12
    return x - trend, trend


def dlinear_step(p, s, x, y):
    l, g = jax.value_and_grad(lambda p: jnp.mean(jnp.square(dlinear_fwd(p, x) - y)))(p)
    u, s = OPT12.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def dlinear_body(bug):
    def f(p, s, x, y):
        n, r, i = 4, (K12 - 1) // 2, idx("sp")
        cyc = bug == "cyclic-halo"
        if bug == "left-halo-from-right":
            left = from_right(x[:, -r:], "sp", n)
        else:
            left = from_left(x[:, -r:], "sp", n, cyc)
        right = from_right(x[:, :r], "sp", n, cyc)
        if not cyc:
            left = jnp.where(i == 0, jnp.broadcast_to(x[:, :1], left.shape), left)
            right = jnp.where(i == n - 1, jnp.broadcast_to(x[:, -1:], right.shape), right)
        xp = jnp.concatenate([left, x, right], 1)
        trend = jnp.mean(jnp.stack([xp[:, j:j + x.shape[1]] for j in range(K12)]), 0)
        seas = x - trend

        def loss(p):
            pred = psum(jnp.einsum("blc,lh->bhc", seas, p["ws"]) + jnp.einsum("blc,lh->bhc", trend, p["wt"]), "sp")
            pred = pred + p["b"][None, :, None]
            return pmean(jnp.mean(jnp.square(pred - y)), "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT12.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P12 = {"ws": R(L12, H12, scale=0.1), "wt": R(L12, H12, scale=0.1), "b": R(H12, scale=0.1)}
S12 = OPT12.init(P12)
SP12 = {"ws": P("sp", None), "wt": P("sp", None), "b": P()}
SS12 = state_specs(S12, SP12)
X12 = np.cumsum(R(B12, L12 + H12, C12, scale=0.4), 1).astype(np.float32)
C.smap("s.dlinear_decomp_train_vma_adamw.dp2xsp4", {"dp": 2, "sp": 4}, dlinear_body,
       (SP12, SS12, P("dp", "sp"), P("dp")), (SP12, SS12, P()), dlinear_step,
       (P12, S12, X12[:, :L12], X12[:, L12:]), check_vma=True,
       bugs=[("left-halo-from-right", ["wrong-permutation"]), ("cyclic-halo", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 13. RevIN statistics by Chan's parallel combination of (mean, M2) over sp8.
B13, T13, C13 = 2, 32, 3


def revin_stats_ref(x, g, b):
    mu = x.mean(1, keepdims=True)
    sd = jnp.sqrt(jnp.mean(jnp.square(x - mu), 1, keepdims=True) + 1e-5)
    return (x - mu) / sd * g + b, mu[:, 0], sd[:, 0]


def revin_chan_sp(bug):
    def f(x, g, b):
        n = x.shape[1]
        m_i = x.mean(1)  # (b, c)
        m2_i = jnp.sum(jnp.square(x - m_i[:, None]), 1)
        ms = lax.all_gather(m_i, "sp")  # (8, b, c)
        m2s = lax.all_gather(m2_i, "sp")
        mu = ms.mean(0)
        m2 = m2s.sum(0)
        if bug != "no-between-term":
            m2 = m2 + n * jnp.sum(jnp.square(ms - mu[None]), 0)
        cnt = n if bug == "count-local" else n * 8
        sd = jnp.sqrt(m2 / cnt + 1e-5)
        return (x - mu[:, None]) / sd[:, None] * g + b, mu, sd
    return f


X13 = (R(B13, T13, C13) + np.linspace(-3, 3, T13, dtype=np.float32)[None, :, None]).astype(np.float32)
C.smap("s.revin_chan_parallel_variance.sp8", {"sp": 8}, revin_chan_sp, (P(None, "sp"), P(), P()),
       (P(None, "sp"), P(), P()), revin_stats_ref, (X13, 1 + R(C13, scale=0.1), R(C13, scale=0.1)),
       bugs=[("no-between-term", ["wrong-operand"]), ("count-local", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 14. non-crossing quantiles: cumulative softplus increments, quantiles over tp.
B14, F14, Q14 = 8, 6, 8
TAUS14 = ((np.arange(Q14) + 0.5) / Q14).astype(np.float32)


def noncross_ref(x, w0, wd, y, taus):
    base = x @ w0
    q = base[:, None] + jnp.cumsum(jax.nn.softplus(x @ wd), -1)
    return q, jnp.mean(pinball(q, y[:, None], taus))


def noncross_tp(bug):
    def f(x, w0, wd, y, taus):
        inc = jax.nn.softplus(jnp.dot(x, wd))  # (b, q_local)
        loc = jnp.cumsum(inc, -1)
        tot = lax.all_gather(loc[:, -1], "tp")  # (4, b)
        me = idx("tp")
        keep = (jnp.arange(4) <= me) if bug == "inclusive-prefix" else (jnp.arange(4) < me)
        off = jnp.sum(jnp.where(keep[:, None], tot, 0.0), 0)
        if bug == "no-prefix":
            off = jnp.zeros_like(off)
        q = jnp.dot(x, w0)[:, None] + off[:, None] + loc
        ql = q.shape[1]
        tl = lax.dynamic_slice_in_dim(taus, me * ql, ql)
        l = psum(jnp.sum(pinball(q, y[:, None], tl)), "tp")
        return q, pmean(l, "dp") / (x.shape[0] * Q14)
    return f


C.smap("s.noncrossing_quantiles_cumsum_prefix.dp2xtp4", {"dp": 2, "tp": 4}, noncross_tp,
       (P("dp"), P(), P(None, "tp"), P("dp"), P()), (P("dp", "tp"), P()), noncross_ref,
       (R(B14, F14), R(F14, scale=0.5), R(F14, Q14, scale=0.5), R(B14) * 2, TAUS14),
       bugs=[("inclusive-prefix", ["wrong-offset"]), ("no-prefix", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 15. Informer distilling layer: circular conv, eval BatchNorm, ELU, maxpool(3, 2, 1).
B15, T15, D15 = 2, 32, 8


def distil_ref(x, w, bn_s, bn_b):
    xp = jnp.concatenate([x[:, -1:], x, x[:, :1]], 1)  # circular padding 1
    y = lax.conv_general_dilated(xp, w, (1,), "VALID", dimension_numbers=("NWC", "WIO", "NWC"))
    y = jax.nn.elu(y * bn_s + bn_b)
    return lax.reduce_window(y, -jnp.inf, lax.max, (1, 3, 1), (1, 2, 1), [(0, 0), (1, 1), (0, 0)])


def distil_sp(bug):
    def f(x, w, bn_s, bn_b):
        n = 4
        cyc = bug != "conv-zero-pad"
        left = from_left(x[:, -1:], "sp", n, cyclic=cyc)
        right = from_right(x[:, :1], "sp", n, cyclic=cyc)
        xp = jnp.concatenate([left, x, right], 1)
        y = sum(jnp.einsum("btc,cd->btd", xp[:, j:j + x.shape[1]], w[j]) for j in range(3))
        y = jax.nn.elu(y * bn_s + bn_b)
        prev = from_left(y[:, -1:], "sp", n, cyclic=(bug == "pool-halo-cyclic"))
        if bug != "pool-halo-cyclic":
            prev = jnp.where(idx("sp") == 0, -jnp.inf, prev)
        yp = jnp.concatenate([prev, y], 1)  # window of output j: yp[2j : 2j + 3]
        tl = y.shape[1]
        return jnp.max(jnp.stack([yp[:, k:k + tl:2] for k in range(3)]), 0)
    return f


C.smap("s.informer_distil_circular_conv_maxpool.sp4", {"sp": 4}, distil_sp, (P(None, "sp"), P(), P(), P()),
       P(None, "sp"), distil_ref, (R(B15, T15, D15), R(3, D15, D15, scale=0.3), 1 + R(D15, scale=0.1),
                                   R(D15, scale=0.1)),
       bugs=[("conv-zero-pad", ["wrong-permutation"]), ("pool-halo-cyclic", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 16. teacher-forced LSTM forecaster training step on dp8, global-norm clipping.
B16, T16, HD16 = 16, 8, 8
OPT16 = optax.chain(optax.clip_by_global_norm(0.1), optax.sgd(0.5))


def lstm_loss(p, x0, y):
    b = x0.shape[0]
    inp = jnp.concatenate([x0[:, None], y[:, :-1]], 1)  # teacher forcing: y_{t-1}

    def step(c, u):
        h, cc = c
        g = u[:, None] * p["wx"] + h @ p["wh"] + p["b"]
        i, fg, o, z = jnp.split(g, 4, -1)
        cc = jax.nn.sigmoid(fg) * cc + jax.nn.sigmoid(i) * jnp.tanh(z)
        h = jax.nn.sigmoid(o) * jnp.tanh(cc)
        return (h, cc), h @ p["wo"]
    _, out = lax.scan(step, (jnp.zeros((b, HD16)), jnp.zeros((b, HD16))), inp.T)
    return jnp.mean(jnp.square(out.T - y))


def lstm_step(p, s, x0, y):
    l, g = jax.value_and_grad(lstm_loss)(p, x0, y)
    u, s = OPT16.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def lstm_body(bug):
    def f(p, s, x0, y):
        l, g = jax.value_and_grad(lstm_loss)(p, x0, y)
        if bug == "clip-before-pmean":
            g, _ = optax.clip_by_global_norm(0.1).update(g, optax.EmptyState())
        g = pmean(g, "dp")
        u, s = OPT16.update(g, s, p)
        return optax.apply_updates(p, u), s, (l if bug == "loss-local" else pmean(l, "dp"))
    return f


P16 = {"wx": R(4 * HD16, scale=0.5), "wh": R(HD16, 4 * HD16, scale=0.3), "b": R(4 * HD16, scale=0.1),
       "wo": R(HD16, scale=0.5)}
S16 = OPT16.init(P16)
C.smap("s.lstm_teacher_forcing_clip_sgd.dp8", {"dp": 8}, lstm_body,
       (jax.tree.map(lambda _: P(), P16), jax.tree.map(lambda _: P(), S16), P("dp"), P("dp")),
       (jax.tree.map(lambda _: P(), P16), jax.tree.map(lambda _: P(), S16), P()), lstm_step,
       (P16, S16, R(B16), R(B16, T16) * np.geomspace(0.05, 4.0, B16, dtype=np.float32)[:, None]),
       bugs=[("clip-before-pmean", ["wrong-op"]), ("loss-local", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 17. moving average with shrinking edge windows by a global prefix sum over sp4.
B17, T17, C17, R17 = 2, 32, 4, 2


def edge_ma_ref(x):
    s = jnp.concatenate([jnp.zeros_like(x[:, :1]), jnp.cumsum(x, 1)], 1)  # s[t] = sum x[:t]
    t = jnp.arange(T17)
    hi = jnp.minimum(t + R17 + 1, T17)
    lo = jnp.maximum(t - R17, 0)
    tr = (s[:, hi] - s[:, lo]) / (hi - lo)[None, :, None]
    return x - tr, tr


def edge_ma_sp(bug):
    def f(x):
        n, tl = 4, x.shape[1]
        me = idx("sp")
        loc = jnp.cumsum(x, 1)
        tots = lax.all_gather(loc[:, -1], "sp")  # (n, b, c)
        keep = (jnp.arange(n) <= me) if bug == "inclusive-offset" else (jnp.arange(n) < me)
        sg = loc + jnp.sum(jnp.where(keep[:, None, None], tots, 0.0), 0)[:, None]  # inclusive global prefix
        # exclusive prefix at the block's positions t - R - 1 .. and t + R: halos of prefix values
        lh = from_left(sg[:, -(R17 + 1):], "sp", n)  # zeros on device 0 = empty prefix
        grand = jnp.sum(tots, 0)[:, None]
        rh = from_right(sg[:, :R17], "sp", n)
        rh = jnp.where(me == n - 1, jnp.broadcast_to(grand, rh.shape), rh)
        ext = jnp.concatenate([lh, sg, rh], 1)  # ext[j] = inclusive prefix at global me*tl - R - 1 + j
        t = (0 if bug == "count-local-pos" else me * tl) + jnp.arange(tl)
        hi = jnp.minimum(t + R17 + 1, T17)
        lo = jnp.maximum(t - R17, 0)
        tr = (ext[:, 2 * R17 + 1:] - ext[:, :tl]) / (hi - lo)[None, :, None]
        return x - tr, tr
    return f


C.smap("s.edge_shrinking_ma_global_prefix.sp4", {"sp": 4}, edge_ma_sp, (P(None, "sp"),),
       (P(None, "sp"), P(None, "sp")), edge_ma_ref, (R(B17, T17, C17),),
       bugs=[("inclusive-offset", ["wrong-offset"]), ("count-local-pos", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 18. ProbSparse attention as Informer's code writes it: heads over tp, the
#     top-u queries' attention scattered into the mean of V by .at[].set.
B18, T18, NH18, E18, D18, U18 = 4, 16, 4, 8, 8, 4


def probsparse_heads_ref(q, k, v, wo):
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E18)
    m = s.max(-1) - s.mean(-1)
    top = lax.top_k(m, U18)[1]
    sel = jnp.any(top[..., None] == jnp.arange(T18), -2)
    full = jnp.einsum("bhqk,bkhe->bhqe", jax.nn.softmax(s, -1), v)
    out = jnp.where(sel[..., None], full, v.mean(1)[:, :, None, :])
    return jnp.einsum("bhte,hed->btd", out, wo)


def probsparse_heads_tp(bug):
    def f(q, k, v, wo):
        qh, kh, vh = (jnp.transpose(a, (0, 2, 1, 3)) for a in (q, k, v))  # (b, h, t, e)
        s = qh @ jnp.swapaxes(kh, -1, -2) / np.sqrt(E18)
        m = jnp.max(s, -1) - jnp.mean(s, -1)
        _, top = lax.top_k(m, U18)  # (b, h, u)
        qr = jnp.take_along_axis(qh, top[..., None], 2)  # (b, h, u, e)
        a = jax.nn.softmax(qr @ jnp.swapaxes(kh, -1, -2) / np.sqrt(E18), -1) @ vh
        lazy = jnp.broadcast_to(vh.mean(2, keepdims=True), vh.shape)
        out = jax.vmap(jax.vmap(lambda o, i, x: o.at[i].set(x)))(lazy, top, a)
        y = jnp.einsum("bhte,hed->btd", out, wo)
        if bug == "no-psum":
            return y
        return psum(y, "dp" if bug == "psum-over-dp" else "tp")
    return f


A18 = (R(B18, T18, NH18, E18), R(B18, T18, NH18, E18), R(B18, T18, NH18, E18), R(NH18, E18, D18, scale=0.3))
C.smap("s.informer_probsparse_scatter_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, probsparse_heads_tp,
       (P("dp", None, "tp"),) * 3 + (P("tp"),), P("dp"), probsparse_heads_ref, A18,
       bugs=[("no-psum", ["missing-all-reduce"]), ("psum-over-dp", ["wrong-axis"])])
A18b = (R(B18, T18, 8, E18), R(B18, T18, 8, E18), R(B18, T18, 8, E18), R(8, E18, D18, scale=0.3))
C.smap("s.informer_probsparse_scatter_2heads_per_dev.dp2xtp4", {"dp": 2, "tp": 4}, probsparse_heads_tp,
       (P("dp", None, "tp"),) * 3 + (P("tp"),), P("dp"), probsparse_heads_ref, A18b,
       bugs=[("no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 19. auto-correlation with time over sp4: all_to_all to channels, FFT over the
#     whole series, top-k delays, aggregation, all_to_all back to time.
B19, L19, D19, TOPK19 = 2, 16, 8, 2


def autocorr_time_ref(q, k, v):
    corr = jnp.fft.irfft(jnp.fft.rfft(q, axis=1) * jnp.conj(jnp.fft.rfft(k, axis=1)), n=L19, axis=1)
    w, tau = lax.top_k(corr.mean(-1), TOPK19)
    w = jax.nn.softmax(w, -1)
    out = 0.0
    for j in range(TOPK19):
        out = out + w[:, j, None, None] * jax.vmap(lambda a, t: jnp.roll(a, -t, 0))(v, tau[:, j])
    return out


def autocorr_time_sp(bug):
    def f(q, k, v):
        to_ch = lambda a: lax.all_to_all(a, "sp", 2, 1, tiled=True)  # (b, L, D/4)
        qc, kc = to_ch(q), to_ch(k)
        vc = v if bug == "roll-local-block" else to_ch(v)
        corr = jnp.fft.irfft(jnp.fft.rfft(qc, axis=1) * jnp.conj(jnp.fft.rfft(kc, axis=1)), n=L19, axis=1)
        mc = corr.mean(-1) if bug == "chan-mean-local" else psum(corr.sum(-1), "sp") / D19
        w, tau = lax.top_k(mc, TOPK19)
        w = jax.nn.softmax(w, -1)
        n = vc.shape[1]
        out = 0.0
        for j in range(TOPK19):
            g = (jnp.arange(n)[None, :] + tau[:, j:j + 1]) % n
            out = out + w[:, j, None, None] * jnp.take_along_axis(vc, g[..., None], 1)
        if bug == "roll-local-block":
            return out
        return lax.all_to_all(out, "sp", 1, 2, tiled=True)
    return f


per19 = np.cos(2 * np.pi * np.arange(L19) / 4)[None, :, None].astype(np.float32)
A19 = (R(B19, L19, D19, scale=0.5) + per19, R(B19, L19, D19, scale=0.5) + per19, R(B19, L19, D19))
C.smap("s.autocorr_time_sharded_alltoall_fft.sp4", {"sp": 4}, autocorr_time_sp, (P(None, "sp"),) * 3,
       P(None, "sp"), autocorr_time_ref, A19,
       bugs=[("chan-mean-local", ["missing-all-reduce"]), ("roll-local-block", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 20. PatchTST flatten head in bf16, flattened patch features over tp, f32 psum.
BC20, F20, H20 = 8, 64, 8


def flat_head_ref(z, w, b):
    return jnp.dot(z, w, preferred_element_type=jnp.float32) + b


def flat_head_tp(bug):
    def f(z, w, b):
        part = jnp.dot(z, w, preferred_element_type=jnp.float32)
        if bug == "psum-bf16":
            red = psum(part.astype(jnp.bfloat16), "tp").astype(jnp.float32)
        elif bug == "no-psum":
            red = part
        else:
            red = psum(part, "tp")
        return red + b
    return f


C.smap("s.patchtst_flatten_head_bf16_tp.dp2xtp4", {"dp": 2, "tp": 4}, flat_head_tp,
       (P("dp", "tp"), P("tp", None), P()), P("dp"), flat_head_ref,
       (R(BC20, F20, dt=jnp.bfloat16), R(F20, H20, scale=0.3, dt=jnp.bfloat16), R(H20, scale=0.1)),
       bugs=[("psum-bf16", ["wrong-dtype"]), ("no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 21. PatchTST forward + loss with one channel per device (ch8).
def patchtst_loss_ref(p, x, y):
    pred = patchtst_fwd(p, x)
    return pred, jnp.mean(jnp.square(pred - y))


def patchtst_ch8(bug):
    def f(p, x, y):
        pred = patchtst_fwd_local(p, x)
        l = jnp.mean(jnp.square(pred - y))
        return pred, (l if bug == "loss-no-pmean" else pmean(l, "ch"))
    return f


C.smap("s.patchtst_one_channel_per_device.ch8", {"ch": 8}, patchtst_ch8, (SP1, P(None, None, "ch"), P(None, None, "ch")),
       (P(None, None, "ch"), P()), patchtst_loss_ref, (P1, R(B1, L1, C1), R(B1, H1, C1)),
       bugs=[("loss-no-pmean", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# GSPMD pairs (correct).
C.gspmd("g.patchtst_forward_channels.ch8", {"ch": 8}, (SP1, P(None, None, "ch")), P(None, None, "ch"),
        patchtst_fwd, (P1, R(B1, L1, C1)))


def decomp_autocorr(x, wq, wk, wv, wo):
    seas, trend = decomp_ref(x)
    q, k, v = seas @ wq, seas @ wk, seas @ wv
    qf, kf = jnp.fft.rfft(q, axis=1), jnp.fft.rfft(k, axis=1)
    mc = jnp.fft.irfft(qf * jnp.conj(kf), n=x.shape[1], axis=1).mean(-1)
    w, tau = lax.top_k(mc, 2)
    w = jax.nn.softmax(w, -1)
    g = (jnp.arange(x.shape[1])[None, :, None] + tau[:, None, :]) % x.shape[1]  # (b, t, k)
    vv = jnp.take_along_axis(v[:, :, None, :], g[..., None], 1)  # (b, t, k, d)
    agg = jnp.einsum("bk,btkd->btd", w, vv)
    return agg @ wo + trend @ jnp.eye(x.shape[2], wo.shape[1])


C.gspmd("g.autoformer_decomp_autocorr.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"), P(), P(), P(), P()),
        P("dp", "sp"), decomp_autocorr,
        (X4, R(C4, 8, scale=0.4), R(C4, 8, scale=0.4), R(C4, 8, scale=0.4), R(8, C4, scale=0.4)))

OPT_G6 = optax.adam(1e-3)


def nbeats_step(p, s, x, y):
    l, g = jax.value_and_grad(lambda p: jnp.mean(jnp.abs(nbeats_ref(x, p) - y)))(p)
    u, s = OPT_G6.update(g, s, p)
    return optax.apply_updates(p, u), s, l


SG6 = OPT_G6.init(PB6)
SSG6 = (SG6[0]._replace(count=P(), mu=SPB6, nu=SPB6),) + tuple(SG6[1:])
C.gspmd("g.nbeats_train_step_adam.dp2xtp4", {"dp": 2, "tp": 4}, (SPB6, SSG6, P("dp"), P("dp")),
        (SPB6, SSG6, P()), nbeats_step, (PB6, SG6, R(B6, L6), R(B6, H6)))


def pinball_crps(qpred, xs, y, taus):
    pin = jnp.mean(pinball(qpred, y[..., None], taus))
    c, cm = crps_ref(xs, y)
    return pin, c, cm


C.gspmd("g.pinball_and_crps.dp2xens4", {"dp": 2, "ens": 4}, (P("dp", None, "ens"), P("ens", "dp"), P("dp"), P("ens")),
        (P(), P("dp"), P()), pinball_crps, (R(B10, H10, Q9), R(M10, B10, H10), R(B10, H10), TAUS9))

C.gspmd("g.seq2seq_gru_teacher_forcing_scan.dp8", {"dp": 8}, (P("dp"), P("dp"), jax.tree.map(lambda _: P(), P11)),
        P("dp"), s2s_ref, (R(B11 * 2, L11), R(B11 * 2, T11), P11))

C.gspmd("g.informer_probsparse.sp4", {"sp": 4}, (P(None, "sp"),) * 3, P(None, "sp"), probsparse_ref,
        (R(B3, T3, NH3, E3), R(B3, T3, NH3, E3), R(B3, T3, NH3, E3)))

C.gspmd("g.informer_distil_layer.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"), P(), P(), P()), P("dp", "sp"),
        distil_ref, (R(4, T15, D15), R(3, D15, D15, scale=0.3), 1 + R(D15, scale=0.1), R(D15, scale=0.1)))

C.gspmd("g.lstm_teacher_forcing_clip_sgd.dp8", {"dp": 8},
        (jax.tree.map(lambda _: P(), P16), jax.tree.map(lambda _: P(), S16), P("dp"), P("dp")),
        (jax.tree.map(lambda _: P(), P16), jax.tree.map(lambda _: P(), S16), P()), lstm_step,
        (P16, S16, R(B16), R(B16, T16)))

C.gspmd("g.patchtst_train_step_adam.dp2xch4", {"dp": 2, "ch": 4},
        (SP1, SS1, P("dp", None, "ch"), P("dp", None, "ch")), (SP1, SS1, P()), patchtst_step, A1)

C.finish()
