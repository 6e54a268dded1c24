"""samples/fresh42: a 42nd batch of programs as a user writes them, on the theme of cross-device prefix and order statistics in current JAX (scans, products, log-sum-exp prefixes, ranks, sorting, quantiles, histograms, argmax with device offsets, Welford / Chan merges and running statistics), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. discounted returns with episode ends (G_t = r_t + gamma (1 - d_t)
    G_{t+1}), time over sp4: a local reverse lax.scan carrying the return
    and the suffix product of the discounts, the blocks' first values and
    products all_gather'd, the blocks' start returns composed from the last
    block back in Python, the carry of block me+1. Bugs: the carry of the
    own block (inclusive), the carry scaled by gamma ** (steps to block end)
    ignoring the episode ends.
 2. survival curves of a discrete-time hazard model S_t = prod (1 - h_s),
    batch over dp2, time over sp4: the exclusive prefix product of block
    totals relayed by a chain of n - 1 non-cyclic ppermutes; expected
    lifetime sum_t S_t psum'd. Bugs: one round short (the last block misses
    the first block's product), each device forwarding its own total only,
    the lifetime not psum'd.
 3. lax.cumlogsumexp along time over sp4 (batch over dp2): block totals
    exchanged by a psum of one-hot masked vectors, the exclusive log-sum-exp
    of earlier blocks combined by logaddexp. Bugs: totals psum'd over dp
    (the wrong axis), an inclusive prefix, the carry added instead of
    log-add-exp'd.
 4. evolution strategies with centered-rank fitness shaping, population over
    dp8: fitness all_gather'd, ranks as counts of smaller fitnesses (the
    baseline: argsort of argsort), the ES gradient psum'd. Bugs: ranks
    within the device's population, ranks normalised by the local
    population size, the gradient pmean'd.
 5. keypoint peaks on heatmaps with H over r2 and W over c4: local flat
    argmax turned into global (row, column) with both device offsets, the
    global maximum by pmax over ('r', 'c'), the first flat index by a masked
    pmin. Bugs: the flat index built with the local row stride, no column
    offset, the maximum pmax'd over r only.
 6. CLIP-style pooling at the end-of-text token (argmax of the token ids),
    batch over dp2 and sequence over sp4: pmax of the local maxima, pmin of
    the global positions that reach it (first occurrence, ties in the
    token ids), the row picked by a one-hot einsum psum'd. Bugs: positions
    without the device offset, the local argmax rows psum'd unmasked, ties
    resolved to the last occurrence (pmax of positions).
 7. online hard-example mining: the mean of the top-k per-example losses of
    a logistic model over the global batch (dp4) and its gradient by
    jax.value_and_grad of the masked local sum, the threshold the k-th
    largest of the all_gather'd losses. Bugs: threshold from the local
    top-k, the (k+1)-th largest as threshold, the gradient pmean'd.
 8. RunningMeanStd (OpenAI baselines) updated from a masked batch over dp4:
    per-device (count, mean, M2) all_gather'd and folded by Chan's parallel
    formula, merged into the running (mean, var, count), observations
    normalised and clipped. Bugs: the Chan merge without the mean-shift
    term, the device's batch count in the running merge, the mean of the
    device means.
 9. a global sort by merge ranks, data over sp4: local jnp.sort, sorted
    chunks all_gather'd, each element's global rank as its local index plus
    searchsorted counts in the other chunks (side='right' before, 'left'
    after), scattered and sliced back; the median of the two middle values.
    Bugs: the local index left out of the rank, the median one off, every
    device taking the first block.
10. histogram equalisation of an int32 image with rows over sp4: a one-hot
    histogram of 16 levels psum'd, its inclusive cdf, cdf_min, the lookup
    table applied locally. Bugs: the local histogram, an exclusive cdf, the
    local pixel count in the normaliser.
11. AutoClip-style clipping at a quantile of per-example gradient norms
    (dp8): the quantile found by 32 bisection steps in a lax.fori_loop whose
    counts are psum'd and whose bounds are pmin / pmax'd, then a psum'd mean
    of the clipped rows. Bugs: counts not psum'd, the target count from the
    local batch size.
12. a training step of a BatchNorm MLP with the batch over dp4 under
    check_vma=True: batch mean by pmean, the variance by the two-pass
    psum of squared deviations from the global mean, running mean and
    unbiased running variance carried, optax.sgd with momentum. Bugs: the
    variance as the pmean of the local variances (no mean-shift term), the
    unbiased correction with the local count, the loss psum'd.
13. masked mean / variance of activations, batch over dp2 and features over
    tp4, merged by psum of counts, weighted sums and M2 + n (mu - mean)^2.
    Bugs: no mean-shift term, the merge psum'd over tp (the wrong axis).
14. a running peak (lax.cummax) along time over sp4 with the drawdown: the
    maxima of earlier blocks from an all_gather of block maxima masked with
    -inf. Bugs: an inclusive prefix, the mask filled with 0 (inputs mostly
    negative, so the first block's running peak shows it).
GSPMD pairs (jax.jit with in/out shardings): 13. drawdown x - cummax and
a cumprod along time over sp4; 14. jnp.quantile and jnp.sort along a batch
over dp8; 15. lax.top_k and argmax over a vocabulary over tp4 (dp2 x tp4);
16. the BatchNorm MLP step of 12. with the batch over dp4 (running stats,
optax.sgd momentum); 17. the discounted returns of 1. as a reverse
lax.scan over a time axis sharded sp4; 18. the histogram equalisation of
10. with rows over sp4; 19. the keypoint argmax of 5. on an r2 x c4 mesh.
Left out, as idioms of earlier batches: cumsum continued by all_gather of
counts or a Hillis-Steele scan (fresh7, fresh9, fresh11, fresh13: here
products, reverse discounted scans and log-sum-exp prefixes), distributed
top-k of a vocabulary (fresh13, fresh16: here a loss threshold with its
gradient), argmax with ties on a dp x tp mesh (fresh13: here a 2-D flat
index with two offsets, and end-of-text pooling), sync BatchNorm by pmean of
mean and mean square (fresh, fresh14: here a two-pass variance and
Welford / Chan merges), a VQ codebook over tp (fresh14).
Numerics (see the manifest): every correct pair agrees with its baseline at
rounding level (f32 within 7.2e-7, the GSPMD cumprod within 7.6e-5 of
outputs up to 224; integer, sorted, ranked and histogram outputs exactly);
every bug variant differs clearly on the seeded inputs. Nothing was dropped.
Run from the repository root: bash samples/gen/run_fresh42.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh42.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

SCRIPT = "samples/gen/fresh42.py"
C = Corpus("samples/fresh42", SCRIPT, "samples/gen/run_fresh42.sh", sys.argv[1:])
rng, R, I = seeded(4242)
psum, pmax, pmin, pmean, idx = lax.psum, lax.pmax, lax.pmin, lax.pmean, lax.axis_index
f32 = jnp.float32
NEG = -1e30

# ---------------------------------------------------------------------------
# 1. discounted returns with episode ends, time over sp4.
GAMMA = 0.95


def returns_ref(r, d):
    g = GAMMA * (1.0 - d)

    def step(c, x):
        c = x[0] + x[1] * c
        return c, c
    _, G = lax.scan(step, jnp.zeros(r.shape[0]), (r.T, g.T), reverse=True)
    return G.T


def returns_sp(bug):
    def f(r, d):
        n, (b, tl) = 4, r.shape
        me = idx("sp")
        g = GAMMA * (1.0 - d)

        def step(c, x):
            G, pr = c
            G, pr = x[0] + x[1] * G, x[1] * pr
            return (G, pr), (G, pr)
        _, (Gl, Pl) = lax.scan(step, (jnp.zeros(b), jnp.ones(b)), (r.T, g.T), reverse=True)
        Gl, Pl = Gl.T, Pl.T
        a, m = lax.all_gather(Gl[:, 0], "sp"), lax.all_gather(Pl[:, 0], "sp")  # (n, b)
        starts, nxt = [], jnp.zeros(b)
        for j in reversed(range(n)):
            nxt = a[j] + m[j] * nxt
            starts.insert(0, nxt)
        starts = jnp.stack(starts + [jnp.zeros(b)])  # (n + 1, b): block j's first return
        carry = starts[me] if bug == "carry-own-block" else starts[me + 1]
        if bug == "gamma-power-ignores-dones":
            scale = jnp.broadcast_to(GAMMA ** (tl - jnp.arange(tl)).astype(f32), (b, tl))
        else:
            scale = Pl
        return Gl + scale * carry[:, None]
    return f


def dones(b, t, p=0.15):
    return (rng.random((b, t)) < p).astype(np.float32)


C.smap("s.discounted_returns_episode_ends.sp4", {"sp": 4}, returns_sp, (P(None, "sp"), P(None, "sp")),
       P(None, "sp"), returns_ref, (R(3, 32), dones(3, 32)),
       bugs=[("carry-own-block", ["wrong-offset"]), ("gamma-power-ignores-dones", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 2. survival curves S_t = prod_{s<=t} (1 - h_s), batch over dp2, time over
#    sp4, the exclusive prefix product relayed by a ppermute chain.


def survival_ref(z):
    S = jnp.cumprod(1.0 - jax.nn.sigmoid(z), axis=1)
    return S, jnp.sum(S, 1)


def survival_sp(bug):
    def f(z):
        n = 4
        me = idx("sp")
        s = jnp.cumprod(1.0 - jax.nn.sigmoid(z), axis=1)
        tot = s[:, -1]
        carry = jnp.ones_like(tot)
        for _ in range(n - 2 if bug == "one-round-short" else n - 1):
            send = tot if bug == "forward-own-total-only" else carry * tot
            carry = jnp.where(me == 0, 1.0, lax.ppermute(send, "sp", [(i, i + 1) for i in range(n - 1)]))
        S = s * carry[:, None]
        life = jnp.sum(S, 1)
        if bug != "lifetime-not-summed":
            life = psum(life, "sp")
        return S, life
    return f


C.smap("s.survival_cumprod_ppermute_chain.dp2xsp4", {"dp": 2, "sp": 4}, survival_sp, (P("dp", "sp"),),
       (P("dp", "sp"), P("dp")), survival_ref, (R(4, 16, scale=0.5) - 2.0,),
       bugs=[("one-round-short", ["wrong-offset"]), ("forward-own-total-only", ["wrong-collective-op"]),
             ("lifetime-not-summed", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 3. lax.cumlogsumexp along time over sp4 (batch over dp2), block totals by a
#    psum of one-hot masked vectors.


def clse_ref(x):
    return lax.cumlogsumexp(x, axis=1)


def clse_sp(bug):
    def f(x):
        n = 4
        me = idx("sp")
        loc = lax.cumlogsumexp(x, axis=1)
        tot = loc[:, -1]
        ax = "dp" if bug == "totals-over-dp" else "sp"
        allt = psum(jnp.where((jnp.arange(n) == idx(ax))[:, None], tot[None, :], 0.0), ax)  # (n, b)
        before = (jnp.arange(n) <= me) if bug == "inclusive-prefix" else (jnp.arange(n) < me)
        excl = jax.nn.logsumexp(jnp.where(before[:, None], allt, NEG), axis=0)
        if bug == "carry-added":
            return loc + jnp.where(me == 0, 0.0, excl)[:, None]
        return jnp.logaddexp(loc, excl[:, None])
    return f


C.smap("s.cumlogsumexp_onehot_psum_totals.dp2xsp4", {"dp": 2, "sp": 4}, clse_sp, (P("dp", "sp"),),
       P("dp", "sp"), clse_ref, (R(4, 32, scale=2.0),),
       bugs=[("totals-over-dp", ["wrong-axis"]), ("inclusive-prefix", ["wrong-offset"]),
             ("carry-added", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 4. evolution strategies with centered ranks, population over dp8.
SIG, NPOP, DES = 0.1, 32, 8


def es_fitness(theta, eps, tgt):
    return -jnp.sum(jnp.square(theta + SIG * eps - tgt), -1)


def es_ref(theta, eps, tgt):
    fit = es_fitness(theta, eps, tgt)
    ranks = jnp.argsort(jnp.argsort(fit)).astype(f32)
    shaped = ranks / (NPOP - 1) - 0.5
    return shaped @ eps / (NPOP * SIG), shaped


def es_dp(bug):
    def f(theta, eps, tgt):
        fit = es_fitness(theta, eps, tgt)
        allf = fit if bug == "local-ranks" else lax.all_gather(fit, "dp", tiled=True)
        ranks = jnp.sum(allf[None, :] < fit[:, None], 1).astype(f32)
        npop = fit.shape[0] if bug == "local-population-size" else NPOP
        shaped = ranks / (npop - 1) - 0.5
        g = shaped @ eps / (NPOP * SIG)
        g = pmean(g, "dp") if bug == "gradient-pmean" else psum(g, "dp")
        return g, shaped
    return f


C.smap("s.es_centered_ranks_gradient.dp8", {"dp": 8}, es_dp, (P(), P("dp"), P()), (P(), P("dp")), es_ref,
       (R(DES), R(NPOP, DES), R(DES)),
       bugs=[("local-ranks", ["missing-collective"]), ("local-population-size", ["wrong-scale"]),
             ("gradient-pmean", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 5. keypoint peaks on heatmaps, H over r2, W over c4.
HH, WW = 8, 16


def peaks_ref(hm):
    b, k = hm.shape[:2]
    flat = hm.reshape(b, k, -1)
    i = jnp.argmax(flat, -1)
    return jnp.stack([i // WW, i % WW], -1).astype(jnp.int32), jnp.max(flat, -1)


def peaks_2d(bug):
    def f(hm):
        b, k, hl, wl = hm.shape
        flat = hm.reshape(b, k, -1)
        li = jnp.argmax(flat, -1)
        lv = jnp.max(flat, -1)
        gy = li // wl + idx("r") * hl
        gx = li % wl + (0 if bug == "no-column-offset" else idx("c") * wl)
        gflat = gy * (wl if bug == "local-row-stride" else WW) + gx
        vax = "r" if bug == "max-over-r-only" else ("r", "c")
        gv = pmax(lv, vax)
        gi = pmin(jnp.where(lv == gv, gflat, 2 ** 30), ("r", "c"))
        return jnp.stack([gi // WW, gi % WW], -1).astype(jnp.int32), gv
    return f


C.smap("s.keypoint_argmax_two_offsets.r2xc4", {"r": 2, "c": 4}, peaks_2d, (P(None, None, "r", "c"),),
       (P(), P()), peaks_ref, (R(2, 3, HH, WW),),
       bugs=[("local-row-stride", ["wrong-offset"]), ("no-column-offset", ["wrong-offset"]),
             ("max-over-r-only", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 6. CLIP-style pooling at argmax(token ids), batch over dp2, sequence over sp4.


def eot_ref(x, tok, w):
    i = jnp.argmax(tok, -1)
    return x[jnp.arange(x.shape[0]), i] @ w


def eot_sp(bug):
    def f(x, tok, w):
        b, tl = tok.shape
        me = idx("sp")
        lm, la = jnp.max(tok, 1), jnp.argmax(tok, 1)
        gpos = la if bug == "no-device-offset" else la + me * tl
        gm = pmax(lm, "sp")
        if bug == "ties-last-occurrence":
            gi = pmax(jnp.where(lm == gm, gpos, -1), "sp")
        else:
            gi = pmin(jnp.where(lm == gm, gpos, 2 ** 30), "sp")
        if bug == "unmasked-row-gather":
            pooled = psum(x[jnp.arange(b), la], "sp")
        else:
            pick = (jnp.arange(tl)[None, :] == (gi - me * tl)[:, None]).astype(x.dtype)
            pooled = psum(jnp.einsum("bt,btd->bd", pick, x), "sp")
        return pooled @ w
    return f


C.smap("s.eot_pooling_argmax_tokens.dp2xsp4", {"dp": 2, "sp": 4}, eot_sp,
       (P("dp", "sp"), P("dp", "sp"), P()), P("dp"), eot_ref,
       (R(4, 16, 8), I(0, 12, 4, 16), R(8, 6)),
       bugs=[("no-device-offset", ["wrong-offset"]), ("unmasked-row-gather", ["wrong-offset"]),
             ("ties-last-occurrence", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 7. online hard-example mining, batch over dp4.
KH = 6


def ohem_ref(w, X, y):
    def loss(w):
        return jnp.mean(lax.top_k(optax.sigmoid_binary_cross_entropy(X @ w, y), KH)[0])
    return jax.value_and_grad(loss)(w)


def ohem_dp(bug):
    def f(w, X, y):
        def per(w):
            return optax.sigmoid_binary_cross_entropy(X @ w, y)
        l = per(w)
        if bug == "threshold-local-topk":
            thr = lax.top_k(l, KH)[0][-1]
        else:
            allv = lax.all_gather(l, "dp", tiled=True)
            thr = lax.top_k(allv, KH + 1 if bug == "kth-off-by-one" else KH)[0][-1]
        mask = (l >= thr).astype(f32)
        val, g = jax.value_and_grad(lambda w: jnp.sum(mask * per(w)) / KH)(w)
        return psum(val, "dp"), (pmean(g, "dp") if bug == "gradient-pmean" else psum(g, "dp"))
    return f


C.smap("s.ohem_topk_loss_threshold_grad.dp4", {"dp": 4}, ohem_dp, (P(), P("dp"), P("dp")), (P(), P()),
       ohem_ref, (R(8), R(32, 8), (rng.random(32) < 0.5).astype(np.float32)),
       bugs=[("threshold-local-topk", ["missing-collective"]), ("kth-off-by-one", ["wrong-offset"]),
             ("gradient-pmean", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 8. RunningMeanStd from a masked batch over dp4, Chan's parallel merge.


def masked_moments(x, valid):
    w = valid.astype(f32)[:, None]
    n = jnp.sum(valid.astype(f32))
    mu = jnp.sum(w * x, 0) / jnp.maximum(n, 1.0)
    return n, mu, jnp.sum(w * jnp.square(x - mu), 0)


def rms_merge(mean, var, count, bmean, bvar, bcount):
    delta, tot = bmean - mean, count + bcount
    m2 = var * count + bvar * bcount + jnp.square(delta) * count * bcount / tot
    return mean + delta * bcount / tot, m2 / tot, tot


def rms_normalise(obs, mean, var):
    return jnp.clip((obs - mean) / jnp.sqrt(var + 1e-8), -5.0, 5.0)


def rms_ref(obs, valid, mean, var, count):
    n, mu, m2 = masked_moments(obs, valid)
    nm, nv, nc = rms_merge(mean, var, count, mu, m2 / jnp.maximum(n, 1.0), n)
    return nm, nv, nc, rms_normalise(obs, nm, nv)


def rms_dp(bug):
    def f(obs, valid, mean, var, count):
        n, mu, m2 = masked_moments(obs, valid)
        ns, mus, m2s = (lax.all_gather(a, "dp") for a in (n, mu, m2))
        N, MU, M2 = ns[0], mus[0], m2s[0]
        for j in range(1, 4):
            tot = N + ns[j]
            d = mus[j] - MU
            MU = MU + d * ns[j] / jnp.maximum(tot, 1.0)
            M2 = M2 + m2s[j]
            if bug != "no-mean-shift-term":
                M2 = M2 + jnp.square(d) * N * ns[j] / jnp.maximum(tot, 1.0)
            N = tot
        if bug == "mean-of-device-means":
            MU = jnp.mean(mus, 0)
        bc = n if bug == "local-batch-count" else N
        nm, nv, nc = rms_merge(mean, var, count, MU, M2 / jnp.maximum(N, 1.0), bc)
        return nm, nv, nc, rms_normalise(obs, nm, nv)
    return f


C.smap("s.running_mean_std_chan_merge.dp4", {"dp": 4}, rms_dp, (P("dp"), P("dp"), P(), P(), P()),
       (P(), P(), P(), P("dp")), rms_ref,
       (R(32, 6, scale=2.0) + 1.0, rng.random(32) < 0.7, R(6, scale=0.3), 1.0 + np.abs(R(6)),
        np.float32(100.0)),
       bugs=[("no-mean-shift-term", ["wrong-scale"]), ("local-batch-count", ["missing-collective"]),
             ("mean-of-device-means", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 9. a global sort by merge ranks, data over sp4.
NS = 32


def sort_ref(x):
    s = jnp.sort(x)
    return s, 0.5 * (s[NS // 2 - 1] + s[NS // 2])


def sort_sp(bug):
    def f(x):
        n, m = 4, x.shape[0]
        me = idx("sp")
        loc = jnp.sort(x)
        chunks = lax.all_gather(loc, "sp")  # (n, m)
        rank = jnp.zeros(m, jnp.int32) if bug == "no-local-index" else jnp.arange(m, dtype=jnp.int32)
        for j in range(n):
            before = jnp.searchsorted(chunks[j], loc, side="right").astype(jnp.int32)
            after = jnp.searchsorted(chunks[j], loc, side="left").astype(jnp.int32)
            rank = rank + jnp.where(j < me, before, jnp.where(j > me, after, 0))
        full = jnp.zeros(n * m, x.dtype).at[lax.all_gather(rank, "sp", tiled=True)].set(
            lax.all_gather(loc, "sp", tiled=True))
        mine = lax.dynamic_slice(full, ((0 if bug == "slice-at-zero" else me * m),), (m,))
        lo = NS // 2 if bug == "median-off-by-one" else NS // 2 - 1
        return mine, 0.5 * (full[lo] + full[lo + 1])
    return f


C.smap("s.merge_rank_sort_median.sp4", {"sp": 4}, sort_sp, (P("sp"),), (P("sp"), P()), sort_ref, (R(NS),),
       bugs=[("no-local-index", ["wrong-offset"]), ("median-off-by-one", ["wrong-offset"]),
             ("slice-at-zero", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 10. histogram equalisation, rows over sp4.
LV = 16


def equalise(img, hist, npix):
    cdf = jnp.cumsum(hist)
    cmin = jnp.min(jnp.where(hist > 0, cdf, npix))
    lut = jnp.round((cdf - cmin).astype(f32) / jnp.maximum(npix - cmin, 1).astype(f32) * (LV - 1))
    return jnp.take(lut, jnp.clip(img, 0, LV - 1))


def heq_ref(img):
    hist = jnp.sum(img.reshape(-1)[:, None] == jnp.arange(LV), 0).astype(jnp.int32)
    return equalise(img, hist, img.size), hist


def heq_sp(bug):
    def f(img):
        hist = jnp.sum(img.reshape(-1)[:, None] == jnp.arange(LV), 0).astype(jnp.int32)
        if bug != "local-histogram":
            hist = psum(hist, "sp")
        npix = img.size if bug == "local-pixel-count" else img.size * 4
        if bug == "exclusive-cdf":
            cdf = jnp.cumsum(hist) - hist
            cmin = jnp.min(jnp.where(hist > 0, cdf, npix))
            lut = jnp.round((cdf - cmin).astype(f32) / jnp.maximum(npix - cmin, 1).astype(f32) * (LV - 1))
            return jnp.take(lut, jnp.clip(img, 0, LV - 1)), hist
        return equalise(img, hist, npix), hist
    return f


C.smap("s.histogram_equalisation_rows.sp4", {"sp": 4}, heq_sp, (P("sp"),), (P("sp"), P()), heq_ref,
       (np.minimum(I(0, 6, 16, 12) + I(0, 6, 16, 12), LV - 1).astype(np.int32),),
       bugs=[("local-histogram", ["missing-collective"]), ("exclusive-cdf", ["wrong-offset"]),
             ("local-pixel-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 11. AutoClip-style clipping at a quantile of per-example norms found by
#     bisection, batch over dp8.
QC, NB = 0.8, 32


def bisect_quantile(v, k, count, lo, hi, iters=32):
    def body(_, c):
        lo, hi = c
        mid = 0.5 * (lo + hi)
        ok = count(v <= mid) >= k
        return jnp.where(ok, lo, mid), jnp.where(ok, mid, hi)
    return lax.fori_loop(0, iters, body, (lo, hi))[1]


def autoclip_ref(g):
    nr = jnp.sqrt(jnp.sum(g * g, 1))
    thr = bisect_quantile(nr, np.ceil(QC * NB), lambda m: jnp.sum(m.astype(f32)), jnp.min(nr), jnp.max(nr))
    scale = jnp.minimum(1.0, thr / jnp.maximum(nr, 1e-12))
    return jnp.mean(g * scale[:, None], 0), thr


def autoclip_dp(bug):
    def f(g):
        nr = jnp.sqrt(jnp.sum(g * g, 1))
        if bug == "counts-not-psummed":
            def count(m):
                return jnp.sum(m.astype(f32))
        else:
            def count(m):
                return psum(jnp.sum(m.astype(f32)), "dp")
        total = nr.shape[0] if bug == "target-from-local-batch" else NB
        thr = bisect_quantile(nr, np.ceil(QC * total), count, pmin(jnp.min(nr), "dp"), pmax(jnp.max(nr), "dp"))
        scale = jnp.minimum(1.0, thr / jnp.maximum(nr, 1e-12))
        return psum(jnp.sum(g * scale[:, None], 0), "dp") / NB, thr
    return f


C.smap("s.autoclip_quantile_bisection.dp8", {"dp": 8}, autoclip_dp, (P("dp"),), (P(), P()), autoclip_ref,
       (R(NB, 5) * (1.0 + 3.0 * rng.random((NB, 1))).astype(np.float32),),
       bugs=[("counts-not-psummed", ["missing-collective"]), ("target-from-local-batch", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 12. BatchNorm MLP training step, batch over dp4, check_vma=True.
OPT12 = optax.sgd(0.05, momentum=0.9)
MOM = 0.9


def bn_mlp(p, h, mu, var):
    hn = (h - mu) * lax.rsqrt(var + 1e-5) * p["g"] + p["b"]
    return jax.nn.relu(hn) @ p["w2"]


def bn_step_ref(p, st, os_, x, y):
    n = x.shape[0]

    def loss(p):
        h = x @ p["w1"]
        mu, var = jnp.mean(h, 0), jnp.var(h, 0)
        return jnp.mean(jnp.square(bn_mlp(p, h, mu, var) - y)), (mu, var)
    (l, (mu, var)), g = jax.value_and_grad(loss, has_aux=True)(p)
    st = {"mean": MOM * st["mean"] + (1 - MOM) * mu, "var": MOM * st["var"] + (1 - MOM) * var * n / (n - 1)}
    upd, os_ = OPT12.update(g, os_, p)
    return optax.apply_updates(p, upd), st, os_, l


def bn_step_dp(bug):
    def f(p, st, os_, x, y):
        nl = x.shape[0]
        n = nl * 4

        def loss(p):
            h = x @ p["w1"]
            mu = pmean(jnp.mean(h, 0), "dp")
            if bug == "pmean-of-local-variances":
                var = pmean(jnp.var(h, 0), "dp")
            else:
                var = psum(jnp.sum(jnp.square(h - mu), 0), "dp") / n
            l = jnp.mean(jnp.square(bn_mlp(p, h, mu, var) - y))
            return (psum(l, "dp") if bug == "loss-psum" else pmean(l, "dp")), (mu, var)
        (l, (mu, var)), g = jax.value_and_grad(loss, has_aux=True)(p)
        nn = nl if bug == "unbiased-with-local-count" else n
        st = {"mean": MOM * st["mean"] + (1 - MOM) * mu, "var": MOM * st["var"] + (1 - MOM) * var * nn / (nn - 1)}
        upd, os_ = OPT12.update(g, os_, p)
        return optax.apply_updates(p, upd), st, os_, l
    return f


D12, H12 = 6, 8
P12 = {"w1": R(D12, H12, scale=0.4), "g": 1.0 + R(H12, scale=0.1), "b": R(H12, scale=0.1), "w2": R(H12, 3, scale=0.4)}
ST12 = {"mean": np.zeros(H12, np.float32), "var": np.ones(H12, np.float32)}
OS12 = jax.tree.map(lambda a: np.asarray(a) + R(*np.shape(a), scale=0.01), OPT12.init(P12))
rep = lambda t: jax.tree.map(lambda _: P(), t)  # noqa: E731
C.smap("s.batchnorm_two_pass_variance_step.dp4", {"dp": 4}, bn_step_dp,
       (rep(P12), rep(ST12), rep(OS12), P("dp"), P("dp")), (rep(P12), rep(ST12), rep(OS12), P()), bn_step_ref,
       (P12, ST12, OS12, R(32, D12) * 2.0 + 0.5, R(32, 3)), check_vma=True,
       bugs=[("pmean-of-local-variances", ["wrong-scale"]), ("unbiased-with-local-count", ["wrong-scale"]),
             ("loss-psum", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 13. masked mean / variance of activations with the batch over dp2 and the
#     features over tp4, merged by psum of counts, weighted sums and
#     M2 + n (mu - mean)^2 (the psum form of Chan's formula).


def masked_meanvar_ref(h, valid):
    n, mu, m2 = masked_moments(h, valid)
    return mu, m2 / jnp.maximum(n, 1.0)


def masked_meanvar_sm(bug):
    def f(h, valid):
        n, mu, m2 = masked_moments(h, valid)
        ax = "tp" if bug == "merged-over-tp" else "dp"
        ntot = psum(n, ax)
        mean = psum(n * mu, ax) / jnp.maximum(ntot, 1.0)
        shift = 0.0 if bug == "no-mean-shift-term" else n * jnp.square(mu - mean)
        return mean, psum(m2 + shift, ax) / jnp.maximum(ntot, 1.0)
    return f


C.smap("s.masked_meanvar_psum_chan.dp2xtp4", {"dp": 2, "tp": 4}, masked_meanvar_sm, (P("dp", "tp"), P("dp")),
       (P("tp"), P("tp")), masked_meanvar_ref, (R(16, 8) * 1.5 + R(1, 8) * 2.0, rng.random(16) < 0.6),
       bugs=[("no-mean-shift-term", ["wrong-scale"]), ("merged-over-tp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 14. running maximum along time over sp4: local lax.cummax, the maxima of
#     earlier blocks from an all_gather of block maxima masked with -inf,
#     drawdown from the running peak.


def peak_ref(x):
    run = lax.cummax(x, axis=1)
    return run, x - run


def peak_sp(bug):
    def f(x):
        n = 4
        me = idx("sp")
        loc = lax.cummax(x, axis=1)
        tops = lax.all_gather(loc[:, -1], "sp")  # (n, b)
        before = (jnp.arange(n) <= me) if bug == "inclusive-prefix" else (jnp.arange(n) < me)
        fill = 0.0 if bug == "fill-zero" else -jnp.inf
        carry = jnp.max(jnp.where(before[:, None], tops, fill), 0)
        run = jnp.maximum(loc, carry[:, None])
        return run, x - run
    return f


C.smap("s.running_peak_drawdown_cummax.sp4", {"sp": 4}, peak_sp, (P(None, "sp"),), (P(None, "sp"), P(None, "sp")),
       peak_ref, (R(4, 32) - 1.0,),
       bugs=[("inclusive-prefix", ["wrong-offset"]), ("fill-zero", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.


def drawdown(x):
    return x - lax.cummax(x, axis=1), jnp.cumprod(1.0 + 0.05 * x, axis=1)


C.gspmd("g.drawdown_cummax_cumprod.sp4", {"sp": 4}, (P(None, "sp"),), (P(None, "sp"), P(None, "sp")), drawdown,
        (jnp.cumsum(R(4, 32), 1),))


def quantiles(x):
    return jnp.quantile(x, jnp.array([0.1, 0.5, 0.9]), axis=0), jnp.sort(x, axis=0)


C.gspmd("g.quantile_and_sort_batch.dp8", {"dp": 8}, (P("dp"),), (P(), P("dp")), quantiles, (R(64, 4),))


def topk_vocab(logits):
    v, i = lax.top_k(logits, 5)
    return v, i, jnp.argmax(logits, -1).astype(jnp.int32)


C.gspmd("g.topk_argmax_vocab.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"),), (P("dp"), P("dp"), P("dp")),
        topk_vocab, (R(8, 64),))

C.gspmd("g.batchnorm_step_running_stats.dp4", {"dp": 4}, (rep(P12), rep(ST12), rep(OS12), P("dp"), P("dp")),
        (rep(P12), rep(ST12), rep(OS12), P()), bn_step_ref,
        (P12, ST12, OS12, R(32, D12) * 2.0 + 0.5, R(32, 3)))

C.gspmd("g.discounted_returns_reverse_scan.sp4", {"sp": 4}, (P(None, "sp"), P(None, "sp")), P(None, "sp"),
        returns_ref, (R(3, 32), dones(3, 32)))

C.gspmd("g.histogram_equalisation.sp4", {"sp": 4}, (P("sp"),), (P("sp"), P()), heq_ref,
        (np.minimum(I(0, 6, 16, 12) + I(0, 6, 16, 12), LV - 1).astype(np.int32),))

C.gspmd("g.keypoint_argmax.r2xc4", {"r": 2, "c": 4}, (P(None, None, "r", "c"),), (P(), P()), peaks_ref,
        (R(2, 3, HH, WW),))

C.finish()
