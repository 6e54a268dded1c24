"""samples/fresh92: a 92nd batch of programs as a user writes them, on the theme of the breadth of less common XLA operations inside realistic sharded ML programs in current JAX (FFTs, dense linear algebra, sorting and top-k, unique / bincount, cond / switch / while on global quantities, associative scans, random bits from fold_in of the device index, special functions, bit-level ops, pad modes, dynamic slices, gather / scatter modes, reduce_window pooling, grouped convolutions, batched dot_general with preferred_element_type), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families (bugs in brackets):
 1. a 1-D Fourier neural operator layer: rfft along the (local) grid, 5
    retained modes times complex weights, irfft, plus a pointwise linear;
    input channels over tp4 (the contraction psum'd), batch over dp2.
    [the psum over dp instead of tp, only the pointwise branch psum'd].
 2. FNet token mixing Re(FFT2) with the sequence over sp4, as a pencil
    decomposition: FFT along the hidden dim, all_to_all to make the sequence
    local, FFT along it, real part, all_to_all back; residual + LayerNorm.
    [the sequence FFT done on the local block (no transposes), the real part
    taken after the hidden-dim FFT].
 3. a Glow-style flow step (ActNorm, invertible 1x1 conv with slogdet,
    affine coupling with a sigmoid scale and log_sigmoid log-det), batch over
    dp2 and positions over sp4; bits per dimension. [the per-position
    constants times the local number of positions, the per-sample sums not
    psum'd over sp].
 4. Gaussian-process regression with the training rows over dp4: kernel rows
    against all_gather'd inputs, noise on the global diagonal, the full
    kernel all_gather'd, cholesky / cho_solve / triangular_solve, negative
    log marginal likelihood, predictive mean and variance at test points.
    [the noise added again after the gather, targets centred by the local
    mean]. (A first draft's bug, the noise at the local diagonal (offset
    0), made the kernel indefinite and the cholesky NaN; replaced.)
 5. a pooling CNN with the image height over sp4: depthwise 3x3 conv
    (conv_general_dilated, feature_group_count=C) on a block with one-row
    halos by ppermute, max pooling by lax.reduce_window, pointwise conv,
    global average pooling by a psum. [cyclic halos (the image wraps), the
    halos from the wrong neighbours].
 6. top-1 routing with expert capacity, tokens over dp4: lax.top_k of the
    router probabilities, position within the expert as a local exclusive
    cumsum plus the counts (bincount(length=E)) of earlier devices by
    all_gather; dropped tokens past capacity; psum'd load. [no prefix from
    earlier devices, an inclusive prefix, the load not psum'd].
 7. a quantile (pinball) loss with sorted (non-crossing) quantiles,
    normalised by the global median absolute residual (jnp.sort of the
    all_gather'd residuals) and ranks by jnp.searchsorted, batch over dp4.
    [the median of the local block, tau and 1 - tau swapped].
 8. token statistics over dp2 x sp4: bincount(length=V) psum'd over both
    axes, the vocabulary present by jnp.nonzero(size=V) of the global counts
    (the baseline uses jnp.unique(size=V)), the 3 most frequent by top_k.
    [counts psum'd over sp only, the present set from the local block].
 9. a regression step with gradient clipping by lax.cond on the global
    gradient norm and a learning rate chosen by lax.switch on the global
    loss, batch over dp4. [the cond on the local gradient's norm, the switch
    on the local loss].
10. a top-k magnitude threshold by bisection in a lax.while_loop that stops
    when exactly k entries pass (the count psum'd), vector over dp4.
    [the count taken locally, k / 4 entries per device].
11. a gated linear recurrence h_t = a_t h_{t-1} + b_t with the time over sp4
    by lax.associative_scan in the block plus a carry from the earlier
    blocks' summaries (jnp.cumprod of the gates), and a drawdown of the
    cumulative sum against lax.cummax with the earlier blocks' maxima.
    [the carry from the later blocks, the carry not scaled by the gate
    products, cummax without the earlier maxima].
12. dropout with per-device keys, jax.random.fold_in(key, axis_index), in an
    MLP with the batch over dp4 (the baseline folds in the block index of
    each row block). [one key on every device, fold_in of index + 1].
13. a negative-binomial count model (gammaln, its digamma gradient,
    softplus by log1p, clipped log-means), cells over dp2 and genes over tp4,
    loss and gradients by jax.value_and_grad in the body. [the weight
    gradient psum'd over tp, the mean over the local number of cells].
14. int8 weight quantisation with a global absmax scale (pmax), columns over
    tp4: round / clip, the product with an activation, fp8-like
    reduce_precision, phases by atan2 of column pairs, the squared
    quantisation error (integer_pow) and the bit count (bitcast_convert_type +
    population_count) psum'd. [the scale from the local absmax, the bit
    count not psum'd].
15. FIR smoothing of a signal padded in jnp.pad mode "reflect", the time
    over sp4, two-sample halos by ppermute and the reflection made by the
    edge devices. [jnp.pad reflect of every block, halos swapped].
16. the same filter on a periodic signal (pad mode "wrap") and on a signal
    padded in mode "edge", time over sp4, and a phase index by jnp.remainder
    of the global position. [non-cyclic halos for the periodic signal, the
    edge pad taken from the cyclic halo, the phase from the local index].
17. a decode step writing a KV cache by lax.dynamic_update_slice at a traced
    position, the cache's sequence over sp4, attention over positions <= pos
    merged by pmax / psum. [the write without the device offset, the mask on
    local positions].
18. a vocabulary-parallel embedding (tp4) with jnp.take(mode="fill") and its
    gradient by .at[].add(mode="drop"), batch over dp2. [take with
    mode="clip", scatter with mode="clip", the table gradient psum'd over
    tp].
19. ZCA whitening with jnp.linalg.eigh of the psum'd covariance and the
    log-determinant, batch over dp4. [the covariance of the local block,
    the mean of the local block].
20. bf16 multi-head attention by lax.dot_general with batch dims and
    preferred_element_type=float32, heads over tp4, batch over dp2, output
    projection psum'd. [no psum, psum over dp].
21. a 2-D FNO layer as a pencil decomposition with the image height over
    sp4: rfft along the width (4 modes kept), all_to_all so that each device
    holds one width mode and the whole height, fft along the height, the
    rank's mode weights by lax.dynamic_slice_in_dim at axis_index, ifft,
    all_to_all back, pad, irfft (the baseline uses rfft2 / irfft2).
    [weights sliced at offset 0, fft (divided by H) in place of ifft].
22. a censored (Tobit) regression (erfc for the censored likelihood,
    probabilities clipped by nextafter) with a Gamma variational posterior
    per feature (digamma, gammaln KL) and log1mexp by expm1, features over
    tp4 (the linear predictor psum'd), batch over dp2. [the linear predictor
    not psum'd, the likelihood sum psum'd over tp as well].
GSPMD pairs (correct only): 21. the FNO layer of 1. (dp2 x tp4); 22. FNet
fft2 with the sequence over sp4; 23. the GP of 4. with its rows over dp4;
24. the pooling CNN of 5. with the height over sp4; 25. the quantile loss
of 7. over dp4; 26. orthogonal Procrustes by jnp.linalg.svd plus ZCA by
eigh, rows over dp4; 27. the embedding of 18. written with take(mode=
"fill") / .at[].add(mode="drop"); 28. the recurrence and drawdown of 11.
with the time over sp4; 29. the negative-binomial gradients of 13.;
30. batched least squares by jnp.linalg.qr + solve_triangular and
slogdet, the batch over dp4; 31. the 2-D FNO of 21. by rfft2 / irfft2 with
channels over tp4 and batch over dp2; 32. the Tobit / Gamma-VI loss of 22.;
33. lax.top_k, jnp.unique(size=16), searchsorted and argsort of a vector
sharded over dp4; 34. avg pooling by lax.reduce_window (padded, strided) and
jnp.pad in modes reflect / edge / wrap of an image with its height over
sp4.
Numerics: every correct pair agrees with its baseline at rounding level;
every bug variant differs clearly (see "numerics").
Run from the repository root: bash samples/gen/run_fresh92.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh92.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

SCRIPT = "samples/gen/fresh92.py"
C = Corpus("samples/fresh92", SCRIPT, "samples/gen/run_fresh92.sh", sys.argv[1:])
rng, R, I = seeded(9292)
psum, pmean, pmax, idx = lax.psum, lax.pmean, lax.pmax, lax.axis_index
NEG = -1e30

# ---------------------------------------------------------------------------
# 1. FNO layer, channels over tp4, batch over dp2
B1, N1, C1, M1 = 4, 16, 8, 5


def spectral(x, Wr, Wi):
    xf = jnp.fft.rfft(x, axis=1)[:, :M1]
    yf = jnp.einsum("bmi,mio->bmo", xf, Wr + 1j * Wi)
    return jnp.fft.irfft(yf, n=x.shape[1], axis=1)


def fno_ref(x, Wr, Wi, Wp, b):
    return jax.nn.gelu(spectral(x, Wr, Wi) + x @ Wp + b)


def fno(bug):
    def f(x, Wr, Wi, Wp, b):
        if bug == "pointwise-only-psum":
            y = spectral(x, Wr, Wi) + psum(x @ Wp, "tp")
        else:
            y = psum(spectral(x, Wr, Wi) + x @ Wp, "dp" if bug == "psum-over-dp" else "tp")
        return jax.nn.gelu(y + b)
    return f


FNO_IN = (P("dp", None, "tp"), P(None, "tp", None), P(None, "tp", None), P("tp", None), P())
FNO_ARGS = (R(B1, N1, C1), R(M1, C1, C1, scale=0.3), R(M1, C1, C1, scale=0.3), R(C1, C1, scale=0.3), R(C1, scale=0.1))
C.smap("s.fno1d_spectral_conv_channels.dp2xtp4", {"dp": 2, "tp": 4}, fno, FNO_IN, P("dp"), fno_ref, FNO_ARGS,
       bugs=[("psum-over-dp", ["wrong-axis"]), ("pointwise-only-psum", ["missing-reduction"])])

# ---------------------------------------------------------------------------
# 2. FNet mixing, pencil decomposition over sp4
B2, T2, D2 = 2, 16, 8


def ln(x, g):
    m = jnp.mean(x, -1, keepdims=True)
    v = jnp.mean(jnp.square(x - m), -1, keepdims=True)
    return (x - m) * lax.rsqrt(v + 1e-5) * g


def fnet_ref(x, g):
    return ln(x + jnp.real(jnp.fft.fft2(x, axes=(1, 2))), g)


def fnet(bug):
    def f(x, g):
        h = jnp.fft.fft(x, axis=2)
        if bug == "real-after-hidden-fft":
            h = jnp.real(h).astype(jnp.complex64)
        if bug == "seq-fft-local":
            m = jnp.real(jnp.fft.fft(h, axis=1))
        else:
            h = lax.all_to_all(h, "sp", 2, 1, tiled=True)  # (b, T, D/4)
            m = jnp.real(jnp.fft.fft(h, axis=1))
            m = lax.all_to_all(m, "sp", 1, 2, tiled=True)  # (b, T/4, D)
        return ln(x + m, g)
    return f


C.smap("s.fnet_fft2_pencil_alltoall.sp4", {"sp": 4}, fnet, (P(None, "sp"), P()), P(None, "sp"), fnet_ref,
       (R(B2, T2, D2), 1.0 + R(D2, scale=0.1)),
       bugs=[("seq-fft-local", ["missing-communication"]), ("real-after-hidden-fft", ["wrong-op"])])

# ---------------------------------------------------------------------------
# 3. Glow-style flow step, batch over dp2, positions over sp4
B3, T3, C3 = 4, 8, 4


def flow_parts(x, la, ba, W, A, Bc):
    z = (x + ba) * jnp.exp(la)
    z = jnp.einsum("btc,cd->btd", z, W)
    z1, z2 = z[..., :2], z[..., 2:]
    h = jnp.tanh(z1 @ A) @ Bc
    pre, t = h[..., :2] + 2.0, h[..., 2:]
    z2 = z2 * jax.nn.sigmoid(pre) + t
    z = jnp.concatenate([z1, z2], -1)
    per_pos = jnp.sum(jax.nn.log_sigmoid(pre), -1) + jnp.sum(-0.5 * z * z - 0.5 * np.log(2 * np.pi), -1)
    const = jnp.sum(la) + jnp.linalg.slogdet(W)[1]
    return z, per_pos, const


def flow_ref(x, la, ba, W, A, Bc):
    z, per_pos, const = flow_parts(x, la, ba, W, A, Bc)
    ll = jnp.sum(per_pos, 1) + T3 * const
    return z, -jnp.mean(ll) / (T3 * C3 * np.log(2.0))


def flow(bug):
    def f(x, la, ba, W, A, Bc):
        z, per_pos, const = flow_parts(x, la, ba, W, A, Bc)
        s = jnp.sum(per_pos, 1)
        if bug != "sample-sum-not-psummed":
            s = psum(s, "sp")
        ll = s + (x.shape[1] if bug == "logdet-local-positions" else T3) * const
        return z, -psum(jnp.sum(ll), "dp") / B3 / (T3 * C3 * np.log(2.0))
    return f


W3 = (np.linalg.qr(R(C3, C3))[0] * 1.3).astype(np.float32)
FLOW_ARGS = (R(B3, T3, C3), R(C3, scale=0.2), R(C3, scale=0.2), W3, R(2, 8, scale=0.5), R(8, 4, scale=0.5))
C.smap("s.glow_step_slogdet_bpd.dp2xsp4", {"dp": 2, "sp": 4}, flow, (P("dp", "sp"), P(), P(), P(), P(), P()),
       (P("dp", "sp"), P()), flow_ref, FLOW_ARGS,
       bugs=[("logdet-local-positions", ["wrong-scale"]), ("sample-sum-not-psummed", ["missing-reduction"])])

# ---------------------------------------------------------------------------
# 4. Gaussian process regression, training rows over dp4
N4, D4, S4 = 16, 3, 5


def rbf(A, B, ls, sf):
    d2 = jnp.sum(jnp.square(A[:, None] - B[None]), -1)
    return sf * sf * jnp.exp(-0.5 * d2 / (ls * ls))


def gp_solve(K, yc, Ks, sf, ym):
    L = jnp.linalg.cholesky(K)
    alpha = jax.scipy.linalg.cho_solve((L, True), yc)
    nll = 0.5 * yc @ alpha + jnp.sum(jnp.log(jnp.diag(L))) + 0.5 * K.shape[0] * np.log(2 * np.pi)
    mu = Ks @ alpha + ym
    v = lax.linalg.triangular_solve(L, Ks.T, left_side=True, lower=True)
    var = sf * sf - jnp.sum(v * v, 0)
    return nll, mu, var


def gp_ref(X, y, Xs, th):
    ls, sf, sn = jnp.exp(th)
    ym = jnp.mean(y)
    K = rbf(X, X, ls, sf) + (sn * sn + 1e-4) * jnp.eye(X.shape[0])
    return gp_solve(K, y - ym, rbf(Xs, X, ls, sf), sf, ym)


def gp(bug):
    def f(X, y, Xs, th):
        ls, sf, sn = jnp.exp(th)
        n = X.shape[0]
        Xa = lax.all_gather(X, "dp", tiled=True)
        rows = idx("dp") * n + jnp.arange(n)
        Kl = rbf(X, Xa, ls, sf) + (sn * sn + 1e-4) * (rows[:, None] == jnp.arange(N4)[None]).astype(X.dtype)
        K = lax.all_gather(Kl, "dp", tiled=True)
        if bug == "noise-added-twice":
            K = K + sn * sn * jnp.eye(N4)
        ym = jnp.mean(y) if bug == "targets-local-mean" else psum(jnp.sum(y), "dp") / N4
        yc = lax.all_gather(y - ym, "dp", tiled=True)
        return gp_solve(K, yc, rbf(Xs, Xa, ls, sf), sf, ym)
    return f


GP_ARGS = (R(N4, D4), R(N4) + 1.5, R(S4, D4), np.log(np.array([1.2, 1.0, 0.4], np.float32)))
C.smap("s.gp_cholesky_rows_allgather.dp4", {"dp": 4}, gp, (P("dp"), P("dp"), P(), P()), (P(), P(), P()), gp_ref,
       GP_ARGS, bugs=[("noise-added-twice", ["wrong-scale"]), ("targets-local-mean", ["missing-reduction"])])

# ---------------------------------------------------------------------------
# 5. pooling CNN, height over sp4
B5, H5, W5, C5, F5, K5 = 2, 16, 8, 4, 6, 3
DN = ("NHWC", "HWIO", "NHWC")


def cnn_tail(y, pw):
    y = jax.nn.relu(y)
    y = lax.reduce_window(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    return jax.nn.relu(jnp.einsum("bhwc,cf->bhwf", y, pw))


def cnn_ref(x, dw, pw, hd):
    y = lax.conv_general_dilated(x, dw, (1, 1), "SAME", dimension_numbers=DN, feature_group_count=C5)
    y = cnn_tail(y, pw)
    return jnp.mean(y, (1, 2)) @ hd


def cnn(bug):
    def f(x, dw, pw, hd):
        n = 4
        down = [(i, i + 1) for i in range(n - 1)]
        up = [(i + 1, i) for i in range(n - 1)]
        if bug == "cyclic-halos":
            down, up = down + [(n - 1, 0)], up + [(0, n - 1)]
        if bug == "halos-swapped":
            down, up = up, down
        top = lax.ppermute(x[:, -1:], "sp", down)  # last row of the block above
        bot = lax.ppermute(x[:, :1], "sp", up)  # first row of the block below
        xp = jnp.concatenate([top, x, bot], 1)
        y = lax.conv_general_dilated(xp, dw, (1, 1), ((0, 0), (1, 1)), dimension_numbers=DN, feature_group_count=C5)
        y = cnn_tail(y, pw)
        g = psum(jnp.sum(y, (1, 2)), "sp") / ((H5 // 2) * (W5 // 2))
        return g @ hd
    return f


CNN_ARGS = (R(B5, H5, W5, C5), R(3, 3, 1, C5, scale=0.5), R(C5, F5, scale=0.5), R(F5, K5))
C.smap("s.dwconv_maxpool_cnn_height.sp4", {"sp": 4}, cnn, (P(None, "sp"), P(), P(), P()), P(), cnn_ref, CNN_ARGS,
       bugs=[("cyclic-halos", ["wrong-permutation"]), ("halos-swapped", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 6. top-1 routing with capacity, tokens over dp4
T6, D6, E6, CAP6 = 32, 8, 4, 6


def expert_out(x, We, gate, e, pos):
    keep = (pos < CAP6).astype(x.dtype)
    return jnp.einsum("td,tdf->tf", x, We[e]) * (gate * keep)[:, None]


def route_ref(x, Wr, We):
    gate, e = lax.top_k(jax.nn.softmax(x @ Wr, -1), 1)
    gate, e = gate[:, 0], e[:, 0]
    oh = jax.nn.one_hot(e, E6, dtype=jnp.int32)
    pos = jnp.sum((jnp.cumsum(oh, 0) - oh) * oh, 1)
    return expert_out(x, We, gate, e, pos), jnp.bincount(e, length=E6)


def route(bug):
    def f(x, Wr, We):
        gate, e = lax.top_k(jax.nn.softmax(x @ Wr, -1), 1)
        gate, e = gate[:, 0], e[:, 0]
        oh = jax.nn.one_hot(e, E6, dtype=jnp.int32)
        cnt = jnp.bincount(e, length=E6)
        allc = lax.all_gather(cnt, "dp")  # (4, E)
        me = idx("dp")
        earlier = jnp.arange(4) <= me if bug == "inclusive-prefix" else jnp.arange(4) < me
        prefix = jnp.sum(jnp.where(earlier[:, None], allc, 0), 0)
        if bug == "no-device-prefix":
            prefix = jnp.zeros_like(prefix)
        pos = jnp.sum((jnp.cumsum(oh, 0) - oh) * oh, 1) + prefix[e]
        load = cnt if bug == "load-not-psummed" else psum(cnt, "dp")
        return expert_out(x, We, gate, e, pos), load
    return f


C.smap("s.topk_router_capacity_prefix.dp4", {"dp": 4}, route, (P("dp"), P(), P()), (P("dp"), P()), route_ref,
       (R(T6, D6), R(D6, E6), R(E6, D6, D6, scale=0.4)),
       bugs=[("no-device-prefix", ["wrong-offset"]), ("inclusive-prefix", ["wrong-offset"]),
             ("load-not-psummed", ["missing-reduction"])])

# ---------------------------------------------------------------------------
# 7. quantile loss normalised by the global MAD, batch over dp4
N7 = 32
TAU = jnp.array([0.1, 0.5, 0.9], jnp.float32)


def pinball(pred, y, tau):
    r = y[:, None] - jnp.sort(pred, axis=1)
    return jnp.maximum(tau * r, (tau - 1.0) * r)


def mad_of(srt):
    n = srt.shape[0]
    return 0.5 * (srt[n // 2 - 1] + srt[n // 2])


def q_ref(pred, y):
    pin = pinball(pred, y, TAU)
    res = jnp.abs(y - jnp.sort(pred, axis=1)[:, 1])
    srt = jnp.sort(res)
    return jnp.mean(pin) / mad_of(srt), jnp.searchsorted(srt, res)


def qloss(bug):
    def f(pred, y):
        pin = pinball(pred, y, 1.0 - TAU if bug == "tau-swapped" else TAU)
        res = jnp.abs(y - jnp.sort(pred, axis=1)[:, 1])
        allr = lax.all_gather(res, "dp", tiled=True)
        srt = jnp.sort(allr)
        mad = mad_of(jnp.sort(res)) if bug == "mad-of-local-block" else mad_of(srt)
        return psum(jnp.sum(pin), "dp") / (N7 * 3) / mad, jnp.searchsorted(srt, res)
    return f


Q_ARGS = (R(N7, 3), R(N7) * np.linspace(0.2, 3.0, N7).astype(np.float32))
C.smap("s.pinball_loss_global_mad_rank.dp4", {"dp": 4}, qloss, (P("dp"), P("dp")), (P(), P("dp")), q_ref, Q_ARGS,
       bugs=[("mad-of-local-block", ["missing-communication"]), ("tau-swapped", ["wrong-op"])])

# ---------------------------------------------------------------------------
# 8. token statistics over dp2 x sp4
B8, T8, V8 = 4, 16, 24


def stats_ref(ids):
    counts = jnp.bincount(ids.ravel(), length=V8)
    present = jnp.unique(ids, size=V8, fill_value=-1)
    return counts, present, lax.top_k(counts, 3)[1]


def stats(bug):
    def f(ids):
        local = jnp.bincount(ids.ravel(), length=V8)
        counts = psum(local, "sp" if bug == "psum-sp-only" else ("dp", "sp"))
        if bug == "present-from-local-block":
            present = jnp.nonzero(local, size=V8, fill_value=-1)[0]
        else:
            present = jnp.nonzero(counts, size=V8, fill_value=-1)[0]
        return counts, present.astype(ids.dtype), lax.top_k(counts, 3)[1]
    return f


IDS8 = np.minimum(rng.geometric(0.12, (B8, T8)) - 1, 19).astype(np.int32)
C.smap("s.token_bincount_unique_topk.dp2xsp4", {"dp": 2, "sp": 4}, stats, (P("dp", "sp"),), (P(), P(), P()),
       stats_ref, (IDS8,),
       bugs=[("psum-sp-only", ["missing-reduction"]), ("present-from-local-block", ["missing-communication"])])

# ---------------------------------------------------------------------------
# 9. clipped regression step, lax.cond / lax.switch on global quantities, dp4
N9, D9, CLIP9, LR9 = 32, 6, 1.3, 0.1


def lr_branch(i, w, g):
    return lax.switch(i, [lambda: w - LR9 * g, lambda: w - 0.5 * LR9 * g, lambda: w - 0.1 * jnp.sign(g)])


def clip_cond(g, n):
    return lax.cond(n > CLIP9, lambda g: g * (CLIP9 / n), lambda g: g, g)


def level(loss):
    return (loss > 1.0).astype(jnp.int32) + (loss > 4.0).astype(jnp.int32)


def reg_ref(w, X, y):
    r = X @ w - y
    loss = jnp.mean(r * r)
    g = 2.0 * X.T @ r / N9
    n = jnp.linalg.norm(g)
    return lr_branch(level(loss), w, clip_cond(g, n)), loss, n


def reg(bug):
    def f(w, X, y):
        r = X @ w - y
        gl = 2.0 * X.T @ r
        g = psum(gl, "dp") / N9
        loss = psum(jnp.sum(r * r), "dp") / N9
        n = jnp.linalg.norm(g)
        nc = jnp.linalg.norm(gl / X.shape[0]) if bug == "cond-on-local-norm" else n
        lc = jnp.mean(r * r) if bug == "switch-on-local-loss" else loss
        return lr_branch(level(lc), w, clip_cond(g, nc)), loss, n
    return f


X9 = R(N9, D9)
W9 = R(D9, scale=0.5)
Y9 = X9 @ (W9 + 0.3) + R(N9) * np.repeat(np.array([0.3, 0.8, 1.2, 2.0], np.float32), 8)
C.smap("s.clip_cond_lr_switch_step.dp4", {"dp": 4}, reg, (P(), P("dp"), P("dp")), (P(), P(), P()), reg_ref,
       (W9, X9, Y9), bugs=[("cond-on-local-norm", ["missing-reduction"]), ("switch-on-local-loss", ["missing-reduction"])])

# ---------------------------------------------------------------------------
# 10. top-k magnitude threshold by bisection in a while_loop, dp4
N10, K10 = 64, 12


def bisect(a, count, hi):
    def cond(s):
        lo, hi, thr, c, it = s
        return (c != K10) & (it < 60)

    def body(s):
        lo, hi, thr, c, it = s
        mid = 0.5 * (lo + hi)
        c = count(a > mid)
        lo = jnp.where(c > K10, mid, lo)
        hi = jnp.where(c > K10, hi, mid)
        return lo, hi, mid, c, it + 1
    s = (jnp.float32(0), hi, jnp.float32(0), jnp.int32(-1), jnp.int32(0))
    return lax.while_loop(cond, body, s)[2]


def topk_ref(g):
    a = jnp.abs(g)
    thr = bisect(a, lambda m: jnp.sum(m.astype(jnp.int32)), jnp.max(a))
    return jnp.where(a > thr, g, 0.0), thr


def topk_thr(bug):
    def f(g):
        a = jnp.abs(g)
        if bug == "count-local":
            count = lambda m: jnp.sum(m.astype(jnp.int32))  # noqa: E731
        elif bug == "k-over-4-per-device":
            count = lambda m: 4 * jnp.sum(m.astype(jnp.int32))  # noqa: E731
        else:
            count = lambda m: psum(jnp.sum(m.astype(jnp.int32)), "dp")  # noqa: E731
        thr = bisect(a, count, pmax(jnp.max(a), "dp"))
        return jnp.where(a > thr, g, 0.0), thr
    return f


G10 = R(N10) * np.repeat(np.array([0.5, 2.0, 1.0, 0.8], np.float32), 16)
C.smap("s.topk_threshold_bisection_while.dp4", {"dp": 4}, topk_thr, (P("dp"),), (P("dp"), P()), topk_ref, (G10,),
       bugs=[("count-local", ["missing-reduction"]), ("k-over-4-per-device", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 11. gated linear recurrence and drawdown, time over sp4
B11, T11 = 2, 32


def combine(l, r):
    return l[0] * r[0], r[0] * l[1] + r[1]


def scan_ref(a, b):
    h = lax.associative_scan(combine, (a, b), axis=1)[1]
    price = jnp.cumsum(b, 1)
    return h, price - lax.cummax(price, axis=1)


def scan_sp(bug):
    def f(a, b):
        n, me = 4, idx("sp")
        h = lax.associative_scan(combine, (a, b), axis=1)[1]
        Acum = jnp.cumprod(a, 1)
        As, Hs = lax.all_gather(Acum[:, -1], "sp"), lax.all_gather(h[:, -1], "sp")  # (n, b)
        c = jnp.zeros_like(h[:, 0])
        for j in range(n):
            use = (j > me) if bug == "carry-from-later-blocks" else (j < me)
            c = jnp.where(use, As[j] * c + Hs[j], c)
        h = h + (c[:, None] if bug == "carry-not-scaled" else Acum * c[:, None])
        cs = jnp.cumsum(b, 1)
        tot = lax.all_gather(cs[:, -1], "sp")
        price = cs + jnp.sum(jnp.where((jnp.arange(n) < me)[:, None], tot, 0.0), 0)[:, None]
        m = lax.cummax(price, axis=1)
        if bug != "cummax-local":
            maxes = lax.all_gather(m[:, -1], "sp")
            m = jnp.maximum(m, jnp.max(jnp.where((jnp.arange(n) < me)[:, None], maxes, -jnp.inf), 0)[:, None])
        return h, price - m
    return f


A11 = (0.6 + 0.4 * jax.nn.sigmoid(R(B11, T11))).astype(np.float32)
B11v = (R(B11, T11) + 0.15).astype(np.float32)
C.smap("s.assoc_scan_recurrence_drawdown.sp4", {"sp": 4}, scan_sp, (P(None, "sp"), P(None, "sp")),
       (P(None, "sp"), P(None, "sp")), scan_ref, (np.asarray(A11), B11v),
       bugs=[("carry-from-later-blocks", ["wrong-permutation"]), ("carry-not-scaled", ["wrong-op"]),
             ("cummax-local", ["missing-communication"])])

# ---------------------------------------------------------------------------
# 12. dropout with fold_in(key, axis_index), batch over dp4
B12, D12, F12, O12 = 8, 16, 32, 4


def drop_block(key, i, x, W1, W2):
    h = jax.nn.relu(x @ W1)
    keep = jax.random.bernoulli(jax.random.fold_in(key, i), 0.8, h.shape)
    return jnp.where(keep, h / 0.8, 0.0) @ W2


def drop_ref(kd, x, W1, W2):
    key = jax.random.wrap_key_data(kd)
    xb = x.reshape(4, B12 // 4, D12)
    out = jax.vmap(lambda i, xb: drop_block(key, i, xb, W1, W2))(jnp.arange(4), xb).reshape(B12, O12)
    return out, jnp.mean(out * out)


def drop(bug):
    def f(kd, x, W1, W2):
        key = jax.random.wrap_key_data(kd)
        i = {"same-key-every-device": 0, "fold-in-index-plus-one": idx("dp") + 1}.get(bug, idx("dp"))
        out = drop_block(key, i, x, W1, W2)
        return out, psum(jnp.sum(out * out), "dp") / (B12 * O12)
    return f


KD12 = np.asarray(jax.random.key_data(jax.random.key(12)))
C.smap("s.dropout_foldin_axis_index_mlp.dp4", {"dp": 4}, drop, (P(), P("dp"), P(), P()), (P("dp"), P()), drop_ref,
       (KD12, R(B12, D12), R(D12, F12, scale=0.3), R(F12, O12, scale=0.3)),
       bugs=[("same-key-every-device", ["wrong-offset"]), ("fold-in-index-plus-one", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 13. negative-binomial count model, cells over dp2, genes over tp4
N13, D13, G13 = 8, 5, 16


def softplus(r):
    return jnp.log1p(jnp.exp(-jnp.abs(r))) + jnp.maximum(r, 0.0)


def nb_nll(W, r, X, Y, n):
    mu = jnp.exp(jnp.clip(X @ W, -6.0, 6.0))
    th = softplus(r)
    gl = jax.scipy.special.gammaln
    ll = (gl(Y + th) - gl(th) - gl(Y + 1.0) + th * (jnp.log(th) - jnp.log(th + mu))
          + Y * (jnp.log(mu) - jnp.log(th + mu)))
    return -jnp.sum(ll) / n


def nb_ref(W, r, X, Y):
    l, (gW, gr) = jax.value_and_grad(nb_nll, (0, 1))(W, r, X, Y, N13)
    return l, gW, gr


def nb(bug):
    def f(W, r, X, Y):
        n = X.shape[0] if bug == "mean-over-local-cells" else N13
        l, (gW, gr) = jax.value_and_grad(nb_nll, (0, 1))(W, r, X, Y, n)
        return psum(l, ("dp", "tp")), psum(gW, "tp" if bug == "weight-grad-psum-tp" else "dp"), psum(gr, "dp")
    return f


NB_ARGS = (R(D13, G13, scale=0.4), R(G13), R(N13, D13), I(0, 12, N13, G13).astype(np.float32))
C.smap("s.negbinom_gammaln_grad.dp2xtp4", {"dp": 2, "tp": 4}, nb, (P(None, "tp"), P("tp"), P("dp"), P("dp", "tp")),
       (P(), P(None, "tp"), P("tp")), nb_ref, NB_ARGS,
       bugs=[("weight-grad-psum-tp", ["wrong-axis"]), ("mean-over-local-cells", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 14. int8 weight quantisation with a global scale, columns over tp4
D14, F14, B14 = 16, 32, 4


def quant_parts(W, x, amax):
    s = amax / 127.0
    q = jnp.clip(jnp.round(W / s), -127, 127).astype(jnp.int8)
    Wd = q.astype(jnp.float32) * s
    y = lax.reduce_precision(x @ Wd, exponent_bits=4, mantissa_bits=3)
    ang = jnp.arctan2(y[:, 1::2], y[:, 0::2])
    err = jnp.sum(lax.integer_pow(W - Wd, 2))
    bits = jnp.sum(lax.population_count(lax.bitcast_convert_type(W, jnp.int32)))
    return q, y, ang, err, bits


def quant_ref(W, x):
    return quant_parts(W, x, jnp.max(jnp.abs(W)))


def quant(bug):
    def f(W, x):
        amax = jnp.max(jnp.abs(W))
        if bug != "scale-local-absmax":
            amax = pmax(amax, "tp")
        q, y, ang, err, bits = quant_parts(W, x, amax)
        return q, y, ang, psum(err, "tp"), (bits if bug == "bitcount-not-psummed" else psum(bits, "tp"))
    return f


W14 = R(D14, F14) * np.repeat(np.array([0.5, 1.0, 2.0, 0.7], np.float32), 8)[None]
C.smap("s.int8_quant_fp8_popcount.tp4", {"tp": 4}, quant, (P(None, "tp"), P()),
       (P(None, "tp"), P(None, "tp"), P(None, "tp"), P(), P()), quant_ref, (W14.astype(np.float32), R(B14, D14)),
       bugs=[("scale-local-absmax", ["missing-reduction"]), ("bitcount-not-psummed", ["missing-reduction"])])

# ---------------------------------------------------------------------------
# 15. FIR smoothing with reflect padding, time over sp4
B15, T15 = 2, 32
TAPS = np.array([0.1, 0.2, 0.4, 0.2, 0.1], np.float32)


def fir(xp, taps, t):
    return sum(taps[k] * xp[:, k:k + t] for k in range(5))


def refl_ref(x, taps):
    return fir(jnp.pad(x, ((0, 0), (2, 2)), mode="reflect"), taps, T15)


def halos(x, n, cyclic=False, swap=False):
    down = [(i, i + 1) for i in range(n - 1)] + ([(n - 1, 0)] if cyclic else [])
    up = [(i + 1, i) for i in range(n - 1)] + ([(0, n - 1)] if cyclic else [])
    if swap:
        down, up = up, down
    return lax.ppermute(x[:, -2:], "sp", down), lax.ppermute(x[:, :2], "sp", up)


def refl(bug):
    def f(x, taps):
        t = x.shape[1]
        if bug == "pad-reflect-each-block":
            return fir(jnp.pad(x, ((0, 0), (2, 2)), mode="reflect"), taps, t)
        me = idx("sp")
        left, right = halos(x, 4, swap=(bug == "halos-swapped"))
        left = jnp.where(me == 0, x[:, 2:0:-1], left)
        right = jnp.where(me == 3, x[:, -2:-4:-1], right)
        return fir(jnp.concatenate([left, x, right], 1), taps, t)
    return f


C.smap("s.fir_reflect_pad_halos.sp4", {"sp": 4}, refl, (P(None, "sp"), P()), P(None, "sp"), refl_ref,
       (R(B15, T15), TAPS), bugs=[("pad-reflect-each-block", ["missing-communication"]),
                                 ("halos-swapped", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 16. wrap and edge padding, phase by remainder of the global position, sp4
PERIOD = 6


def wrap_ref(x, z, taps):
    yw = fir(jnp.pad(x, ((0, 0), (2, 2)), mode="wrap"), taps, T15)
    ye = fir(jnp.pad(z, ((0, 0), (2, 2)), mode="edge"), taps, T15)
    ph = jnp.remainder(jnp.arange(T15), PERIOD).astype(jnp.float32)
    return yw + 0.1 * ph, ye


def wrap(bug):
    def f(x, z, taps):
        t, me = x.shape[1], idx("sp")
        lw, rw = halos(x, 4, cyclic=(bug != "wrap-noncyclic"))
        yw = fir(jnp.concatenate([lw, x, rw], 1), taps, t)
        le, re = halos(z, 4, cyclic=(bug == "edge-from-cyclic-halo"))
        if bug != "edge-from-cyclic-halo":
            le = jnp.where(me == 0, jnp.repeat(z[:, :1], 2, 1), le)
            re = jnp.where(me == 3, jnp.repeat(z[:, -1:], 2, 1), re)
        ye = fir(jnp.concatenate([le, z, re], 1), taps, t)
        pos = jnp.arange(t) if bug == "phase-local-index" else me * t + jnp.arange(t)
        return yw + 0.1 * jnp.remainder(pos, PERIOD).astype(jnp.float32), ye
    return f


C.smap("s.fir_wrap_edge_pad_phase.sp4", {"sp": 4}, wrap, (P(None, "sp"), P(None, "sp"), P()),
       (P(None, "sp"), P(None, "sp")), wrap_ref, (R(B15, T15), R(B15, T15) + 2.0, TAPS),
       bugs=[("wrap-noncyclic", ["wrong-permutation"]), ("edge-from-cyclic-halo", ["wrong-permutation"]),
             ("phase-local-index", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 17. KV cache write by dynamic_update_slice at a traced position, sp4
B17, S17, D17 = 2, 16, 8


def kv_ref(K, V, kn, vn, q, pos):
    K = lax.dynamic_update_slice(K, kn[:, None], (0, pos, 0))
    V = lax.dynamic_update_slice(V, vn[:, None], (0, pos, 0))
    s = jnp.einsum("bd,bsd->bs", q, K) / np.sqrt(D17)
    s = jnp.where(jnp.arange(S17) <= pos, s, NEG)
    return K, V, jnp.einsum("bs,bsd->bd", jax.nn.softmax(s, -1), V)


def kv(bug):
    def f(K, V, kn, vn, q, pos):
        sl, me = K.shape[1], idx("sp")
        if bug == "write-without-offset":
            K = lax.dynamic_update_slice(K, kn[:, None], (0, pos, 0))
            V = lax.dynamic_update_slice(V, vn[:, None], (0, pos, 0))
        else:
            lp = pos - me * sl
            inb = (lp >= 0) & (lp < sl)
            at = jnp.clip(lp, 0, sl - 1)
            K = jnp.where(inb, lax.dynamic_update_slice(K, kn[:, None], (0, at, 0)), K)
            V = jnp.where(inb, lax.dynamic_update_slice(V, vn[:, None], (0, at, 0)), V)
        gpos = jnp.arange(sl) if bug == "mask-local-positions" else me * sl + jnp.arange(sl)
        s = jnp.einsum("bd,bsd->bs", q, K) / np.sqrt(D17)
        s = jnp.where(gpos <= pos, s, NEG)
        m = pmax(jnp.max(s, -1, keepdims=True), "sp")
        e = jnp.exp(s - m)
        return K, V, psum(jnp.einsum("bs,bsd->bd", e, V), "sp") / psum(jnp.sum(e, -1, keepdims=True), "sp")
    return f


C.smap("s.kvcache_dus_traced_pos.sp4", {"sp": 4}, kv, (P(None, "sp"), P(None, "sp"), P(), P(), P(), P()),
       (P(None, "sp"), P(None, "sp"), P()), kv_ref,
       (R(B17, S17, D17), R(B17, S17, D17), R(B17, D17), R(B17, D17), R(B17, D17), np.int32(9)),
       bugs=[("write-without-offset", ["wrong-offset"]), ("mask-local-positions", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 18. vocabulary-parallel embedding with gather / scatter modes, dp2 x tp4
V18, D18, B18, T18 = 32, 8, 4, 6


def emb_ref(table, ids, G):
    return table[ids], jnp.zeros_like(table).at[ids].add(G)


def emb(bug):
    def f(table, ids, G):
        vl = table.shape[0]
        local = ids - idx("tp") * vl
        li = jnp.where((local >= 0) & (local < vl), local, vl)
        e = jnp.take(table, li, axis=0, mode="clip" if bug == "take-clip" else "fill", fill_value=0)
        gt = jnp.zeros_like(table).at[li].add(G, mode="clip" if bug == "scatter-clip" else "drop")
        return psum(e, "tp"), psum(gt, "tp" if bug == "table-grad-psum-tp" else "dp")
    return f


C.smap("s.vocab_parallel_take_fill_scatter_drop.dp2xtp4", {"dp": 2, "tp": 4}, emb, (P("tp"), P("dp"), P("dp")),
       (P("dp"), P("tp")), emb_ref, (R(V18, D18), I(0, V18, B18, T18), R(B18, T18, D18)),
       bugs=[("take-clip", ["wrong-op"]), ("scatter-clip", ["wrong-op"]), ("table-grad-psum-tp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 19. ZCA whitening by eigh of the global covariance, dp4
N19, D19 = 32, 6


def zca_from(Xc, cov):
    l, V = jnp.linalg.eigh(cov)
    Wz = (V * lax.rsqrt(l + 1e-5)) @ V.T
    return Xc @ Wz, jnp.sum(jnp.log(l))


def zca_ref(X):
    Xc = X - jnp.mean(X, 0)
    return zca_from(Xc, Xc.T @ Xc / N19)


def zca(bug):
    def f(X):
        mu = jnp.mean(X, 0) if bug == "mean-of-local-block" else pmean(jnp.mean(X, 0), "dp")
        Xc = X - mu
        cov = Xc.T @ Xc / X.shape[0] if bug == "cov-of-local-block" else psum(Xc.T @ Xc, "dp") / N19
        return zca_from(Xc, cov)
    return f


X19 = (R(N19, D19) @ R(D19, D19, scale=0.6) + np.repeat(np.arange(4, dtype=np.float32), 8)[:, None] * 0.7)
C.smap("s.zca_whitening_eigh_cov.dp4", {"dp": 4}, zca, (P("dp"),), (P("dp"), P()), zca_ref, (X19.astype(np.float32),),
       bugs=[("cov-of-local-block", ["missing-reduction"]), ("mean-of-local-block", ["missing-reduction"])])

# ---------------------------------------------------------------------------
# 20. bf16 attention by dot_general with batch dims, heads over tp4, dp2
B20, H20, T20, E20, D20 = 2, 8, 8, 4, 16
bf = jnp.bfloat16


def mha_heads(q, k, v, Wo):
    s = lax.dot_general(q, k, (((3,), (3,)), ((0, 1), (0, 1))), preferred_element_type=jnp.float32) / 2.0
    p = jax.nn.softmax(s, -1).astype(bf)
    o = lax.dot_general(p, v, (((3,), (2,)), ((0, 1), (0, 1))), preferred_element_type=jnp.float32)
    return jnp.einsum("bhte,hed->btd", o.astype(bf), Wo, preferred_element_type=jnp.float32)


def mha(bug):
    def f(q, k, v, Wo):
        y = mha_heads(q, k, v, Wo)
        return y if bug == "no-psum" else psum(y, "dp" if bug == "psum-over-dp" else "tp")
    return f


MHA_ARGS = (R(B20, H20, T20, E20, dt=bf), R(B20, H20, T20, E20, dt=bf), R(B20, H20, T20, E20, dt=bf),
            R(H20, E20, D20, scale=0.5, dt=bf))
C.smap("s.bf16_dot_general_batch_heads.dp2xtp4", {"dp": 2, "tp": 4}, mha, (P("dp", "tp"),) * 3 + (P("tp"),), P("dp"),
       mha_heads, MHA_ARGS, bugs=[("no-psum", ["missing-reduction"]), ("psum-over-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 21. 2-D FNO layer with a pencil decomposition, image height over sp4
B21, H21, W21, C21, KW21 = 2, 8, 16, 4, 4
KH_ROWS = (0, 1, H21 - 2, H21 - 1)


def fno2_ref(x, Wr, Wi):
    X = jnp.fft.rfft2(x, axes=(1, 2))  # (b, H, W/2+1, c)
    sel = jnp.concatenate([X[:, :2, :KW21], X[:, -2:, :KW21]], 1)  # (b, 4, KW, c)
    o = jnp.einsum("bhwi,hwio->bhwo", sel, Wr + 1j * Wi)
    full = jnp.zeros((x.shape[0], H21, W21 // 2 + 1, C21), o.dtype)
    full = full.at[:, :2, :KW21].set(o[:, :2]).at[:, -2:, :KW21].set(o[:, 2:])
    return x + jnp.fft.irfft2(full, s=(H21, W21), axes=(1, 2))


def fno2(bug):
    def f(x, Wr, Wi):
        b = x.shape[0]
        h = jnp.fft.rfft(x, axis=2)[:, :, :KW21]  # (b, H/4, KW, c)
        h = lax.all_to_all(h, "sp", 2, 1, tiled=True)  # (b, H, KW/4, c): one W mode per device
        h = jnp.fft.fft(h, axis=1)
        sel = jnp.concatenate([h[:, :2], h[:, -2:]], 1)  # (b, 4, 1, c)
        kw = 0 if bug == "weight-mode-offset-0" else idx("sp")
        w = lax.dynamic_slice_in_dim(Wr + 1j * Wi, kw, 1, axis=1)  # (4, 1, c, c)
        o = jnp.einsum("bhwi,hwio->bhwo", sel, w)
        full = jnp.concatenate([o[:, :2], jnp.zeros((b, H21 - 4) + o.shape[2:], o.dtype), o[:, 2:]], 1)
        g = jnp.fft.fft(full, axis=1) / H21 if bug == "forward-fft-for-inverse" else jnp.fft.ifft(full, axis=1)
        g = lax.all_to_all(g, "sp", 1, 2, tiled=True)  # (b, H/4, KW, c)
        g = jnp.pad(g, ((0, 0), (0, 0), (0, W21 // 2 + 1 - KW21), (0, 0)))
        return x + jnp.fft.irfft(g, n=W21, axis=2)
    return f


FNO2_ARGS = (R(B21, H21, W21, C21), R(4, KW21, C21, C21, scale=0.4), R(4, KW21, C21, C21, scale=0.4))
C.smap("s.fno2d_pencil_rfft_modes_dynslice.sp4", {"sp": 4}, fno2, (P(None, "sp"), P(), P()), P(None, "sp"), fno2_ref,
       FNO2_ARGS, bugs=[("weight-mode-offset-0", ["wrong-offset"]), ("forward-fft-for-inverse", ["wrong-op"])])

# ---------------------------------------------------------------------------
# 22. a censored (Tobit) regression with erfc, a Gamma variational posterior
#     (digamma, lgamma), log1mexp by expm1 and probabilities clipped by
#     nextafter; features over tp4 (linear psum'd), batch over dp2
N22, D22 = 8, 16


def tobit_parts(z, y, s, a, b):
    sig = jax.nn.softplus(s)
    u = (y - z) / sig
    cens = y <= 0.0
    lp_obs = -0.5 * u * u - jnp.log(sig) - 0.5 * np.log(2 * np.pi)
    pc = 0.5 * jax.scipy.special.erfc(z / (sig * np.sqrt(2.0)))  # P(y* <= 0)
    pc = jnp.clip(pc, jnp.nextafter(jnp.float32(0), jnp.float32(1)), jnp.nextafter(jnp.float32(1), jnp.float32(0)))
    lp = jnp.where(cens, jnp.log(pc), lp_obs)
    elog = jax.scipy.special.digamma(a) - jnp.log(b)
    kl = (a - 1.0) * jax.scipy.special.digamma(a) - jax.scipy.special.gammaln(a) + jnp.log(b) - a + a / b
    l1me = jnp.log(-jnp.expm1(-jax.nn.softplus(b)))
    return lp, elog, kl, l1me


def tobit_ref(x, y, w, s, a, b):
    lp, elog, kl, l1me = tobit_parts(x @ w, y, s, a, b)
    return -jnp.mean(lp) + jnp.sum(kl) / N22, elog, l1me


def tobit(bug):
    def f(x, y, w, s, a, b):
        z = x @ w
        if bug != "linear-not-psummed":
            z = psum(z, "tp")
        lp, elog, kl, l1me = tobit_parts(z, y, s, a, b)
        nll = -psum(jnp.sum(lp), ("dp", "tp") if bug == "nll-psum-over-tp-too" else "dp") / N22
        return nll + psum(jnp.sum(kl), "tp") / N22, elog, l1me
    return f


Y22 = (R(N22) * 1.5 + 0.3).astype(np.float32)
TOBIT_ARGS = (R(N22, D22), Y22, R(D22, scale=0.3), np.float32(0.2), 1.0 + np.abs(R(D22)), 0.5 + np.abs(R(D22)))
C.smap("s.tobit_erfc_gamma_digamma_vi.dp2xtp4", {"dp": 2, "tp": 4}, tobit,
       (P("dp", "tp"), P("dp"), P("tp"), P(), P("tp"), P("tp")), (P(), P("tp"), P("tp")), tobit_ref, TOBIT_ARGS,
       bugs=[("linear-not-psummed", ["missing-reduction"]), ("nll-psum-over-tp-too", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# GSPMD pairs (correct only)
C.gspmd("g.fno1d_layer.dp2xtp4", {"dp": 2, "tp": 4}, FNO_IN, P("dp"), fno_ref, FNO_ARGS)
C.gspmd("g.fnet_fft2_seq.sp4", {"sp": 4}, (P(None, "sp"), P()), P(None, "sp"), fnet_ref,
        (R(B2, T2, D2), 1.0 + R(D2, scale=0.1)))
C.gspmd("g.gp_nll_predict_rows.dp4", {"dp": 4}, (P("dp"), P("dp"), P(), P()), (P(), P(), P()), gp_ref, GP_ARGS)
C.gspmd("g.dwconv_maxpool_cnn_height.sp4", {"sp": 4}, (P(None, "sp"), P(), P(), P()), P(), cnn_ref, CNN_ARGS)
C.gspmd("g.pinball_global_mad.dp4", {"dp": 4}, (P("dp"), P("dp")), (P(), P("dp")), q_ref, Q_ARGS)


def procrustes_zca(A, B):
    U, _, Vt = jnp.linalg.svd(A.T @ B)
    Rm = U @ Vt
    Z, ld = zca_ref(A @ Rm)
    return Rm, Z, ld


C.gspmd("g.procrustes_svd_zca_eigh.dp4", {"dp": 4}, (P("dp"), P("dp")), (P(), P("dp"), P()), procrustes_zca,
        (X19.astype(np.float32), (X19 @ np.linalg.qr(R(D19, D19))[0] + 0.05 * R(N19, D19)).astype(np.float32)))


def emb_modes(table, ids, G):
    e = jnp.take(table, ids, axis=0, mode="fill", fill_value=0)
    return e, jnp.zeros_like(table).at[ids].add(G, mode="drop")


C.gspmd("g.embedding_take_fill_scatter_drop.dp2xtp4", {"dp": 2, "tp": 4}, (P("tp"), P("dp"), P("dp")),
        (P("dp"), P("tp")), emb_modes, (R(V18, D18), I(0, V18, B18, T18), R(B18, T18, D18)))
C.gspmd("g.assoc_scan_recurrence_drawdown.sp4", {"sp": 4}, (P(None, "sp"), P(None, "sp")),
        (P(None, "sp"), P(None, "sp")), scan_ref, (np.asarray(A11), B11v))
C.gspmd("g.negbinom_gammaln_grad.dp2xtp4", {"dp": 2, "tp": 4}, (P(None, "tp"), P("tp"), P("dp"), P("dp", "tp")),
        (P(), P(None, "tp"), P("tp")), nb_ref, NB_ARGS)


def batched_lstsq(A, b):
    Q, Rr = jnp.linalg.qr(A)
    x = jax.scipy.linalg.solve_triangular(Rr, jnp.einsum("nij,ni->nj", Q, b)[..., None], lower=False)[..., 0]
    sgn, ld = jnp.linalg.slogdet(jnp.einsum("nji,njk->nik", A, A))
    return x, sgn * ld, jnp.sum(jnp.square(jnp.einsum("nij,nj->ni", A, x) - b))


C.gspmd("g.batched_qr_lstsq_slogdet.dp4", {"dp": 4}, (P("dp"), P("dp")), (P("dp"), P("dp"), P()), batched_lstsq,
        (R(8, 10, 3), R(8, 10)))

C.gspmd("g.fno2d_rfft2_irfft2_channels.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", None, None, "tp"), P(), P()),
        P("dp", None, None, "tp"), fno2_ref, FNO2_ARGS)
C.gspmd("g.tobit_erfc_gamma_digamma_vi.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P("dp"), P("tp"), P(), P("tp"),
        P("tp")), (P(), P("tp"), P("tp")), tobit_ref, TOBIT_ARGS)


def topk_unique_search(v, q):
    """Top-8 scores, the distinct values of a rounded copy (size 16) and the
    positions of queries in the sorted scores, scores sharded."""
    top, at = lax.top_k(v, 8)
    u = jnp.unique(jnp.round(v * 2.0) / 2.0, size=16, fill_value=99.0)
    return top, at, u, jnp.searchsorted(jnp.sort(v), q), jnp.argsort(v)[:5]


C.gspmd("g.topk_unique_searchsorted_argsort.dp4", {"dp": 4}, (P("dp"), P()), (P(), P(), P(), P(), P()),
        topk_unique_search, (R(32), R(6)))


def avgpool_pad_modes(x):
    a = lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0))) / 9.0
    r = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="reflect")
    e = jnp.pad(x, ((0, 0), (2, 2), (0, 0), (0, 0)), mode="edge")
    w = jnp.pad(x, ((0, 0), (0, 0), (3, 3), (0, 0)), mode="wrap")
    return a, r[:, ::2] - r[:, 1::2][:, :9], jnp.sum(e, 1), w.mean(2)


C.gspmd("g.avgpool_reduce_window_pad_modes.sp4", {"sp": 4}, (P(None, "sp"),), (P(None, "sp"), P(), P(), P(None, "sp")),
        avgpool_pad_modes, (R(2, 16, 8, 3),))

C.finish()
