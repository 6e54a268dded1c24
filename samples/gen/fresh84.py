"""samples/fresh84: an 84th batch of programs as a user writes them, on the theme of vector quantisation and discrete latent models under sharding in current JAX / optax, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. nearest code with the codebook's rows over tp4 and the batch over dp2:
    squared distances to the local codes, a local argmin and min, the
    global min by pmin, the global index as the pmin of (local index + the
    shard's offset) where the local min is the global one; the code vector
    as a one-hot of the local rows times the local codebook, psum'd over
    tp. Bugs: the index without the shard's offset, the code vectors not
    psum'd, pmax of the distances instead of pmin.
 2. VQ-VAE loss and gradients, batch over dp4, encoder / codebook / decoder
    replicated: straight-through estimator z + sg(q - z), reconstruction +
    codebook ||sg(z) - q||^2 + beta commitment ||z - sg(q)||^2, value_and_grad
    in the body, loss and grads pmean'd. Bugs: the straight-through on the
    wrong side (q + sg(z - q): the decoder sees z), grads psum'd, the
    commitment term without the stop_gradient on q.
 3. EMA codebook update with one-hot cluster counts and sums over a dp4
    batch (psum'd), Laplace smoothing of the cluster sizes. Bugs: counts
    from the local batch only, the decay applied twice, sums pmean'd.
 4. EMA codebook update by scatter-add on dp2 x tp4: codebook, EMA sizes
    and sums over tp, batch over dp; the global index from the sharded
    nearest code, scatter-add (mode drop) at index - offset, psum over dp,
    Laplace smoothing (eps 0.5, so that the total matters) with the total
    size psum'd over tp. Bugs: the
    scatter at the global index, the smoothing total from the local
    shard, counts psum'd over tp instead of dp.
 5. residual VQ (3 stages) with each stage's codebook rows over tp4,
    residual carried, commitment loss and its gradient w.r.t. the input
    (through the straight-through sum). Bugs: the residual not carried
    (every stage quantises x), the stage index without the shard offset.
 6. finite scalar quantisation on dp2 x tp4: the projection's output
    dims over tp (2 per device, per-dim levels 8,8,6,6,5,5,5,5 sliced at
    the rank's offset), bounded tanh with the half-level shift, round with
    the straight-through trick, code index as a mixed-radix sum psum'd over
    tp, gradient of a linear loss w.r.t. the projection (psum over dp).
    Bugs: the mixed-radix basis sliced at 0, the levels sliced at 0, a
    plain round (no straight-through; zero gradient).
 7. product quantisation with the 4 sub-vectors over tp4: per-subspace
    argmin codes, the distortion psum'd, asymmetric-distance search of 4
    queries against the coded database (lookup tables per subspace, psum).
    Bugs: distortion not psum'd, the ADC distances pmean'd.
 8. codebook usage statistics over a dp8 batch: usage fractions from
    psum'd counts, perplexity exp(-sum p log p), soft perplexity from the
    mean of softmax(-distance) over the global batch. Bugs: perplexity of
    the local usage pmean'd, counts divided by the local batch size, the
    soft mean psum'd without dividing by dp.
 9. dead-code restarts over a dp4 batch: codes used fewer than 1 time
    (psum'd counts) replaced by batch samples at given global indices (an
    all_gather'd batch). Bugs: local counts, samples taken from the local
    batch.
10. Gumbel-softmax quantiser on dp2 x tp4 with the noise passed in, the
    logits' code dim over tp: softmax with pmax / psum, soft code vector
    psum'd over tp, hard straight-through code vector at the global argmax,
    KL to the uniform prior. Bugs: the softmax denominator local, KL with
    log of the local code count, the hard index without the offset.
11. a VQ-VAE training step on dp2 x tp4 (check_vma=True): codebook rows over
    tp, encoder / decoder replicated, batch over dp; sharded nearest code,
    straight-through, codebook + commitment losses, loss pmean'd over dp,
    jax.grad, optax.adam applied shard-wise. Bugs: the index without the
    offset, the codebook loss without the stop_gradient on z.
12. nearest code by an all_gather of every rank's (local min, global index)
    and an argmin over ranks (no pmin), codebook over tp8, bf16 code vectors
    out. Bugs: the index without the offset, argmax over ranks.
13. ZeRO-style EMA update on dp4: one-hot counts and sums psum_scatter'd (each
    dp rank owns 4 codes), the update of the owned codes, all_gather'd back.
    Bugs: the owned EMA-sum slice at offset 0, the smoothing total from the
    owned codes only.
14. codebook sharded on both dims (codes over tp2, features over sp4), the
    inputs' features over sp4: partial distances psum'd over sp, local
    argmin, pmin over tp. Bugs: distances not psum'd over sp, the code
    offset from the sp index.
15. lookup-free quantisation (MAGVIT-2 style) on dp2 x tp4: sign with the
    straight-through trick, the code as bits times 2^(global dim) psum'd over
    tp, per-sample entropy and the entropy of the global-batch mean of the
    factorised (pairs of dims) code distribution. Bugs: bit weights without
    the dim offset, the batch mean local.
16. residual VQ as a lax.scan over 4 stacked codebooks (codes over tp2, batch
    over dp4), the residual the scan carry. Bugs: the index without the
    offset, the residual added instead of subtracted.
17. strided code ownership: the codebook passed as (K/tp, tp, D) with its
    middle dim over tp4, so rank r owns codes j*tp + r. Bug: a block offset.
18. FSQ decode of replicated code indices into dims over tp4: (index //
    basis) % levels at the rank's dims. Bugs: the basis at offset 0, the
    half width as levels / 2 in float.
19. a jax.custom_vjp straight-through quantiser (backward 0.5 * g) in a
    regression loss over dp4, the loss as psum of sums over the psum'd
    count. Bug: each rank divides by its local count.
20. dead-code restarts with codes over tp2 and batch over dp4: each tp rank
    refreshes its own dead codes from the dp-gathered batch. Bug: counts
    not psum'd over dp.
21. Gumbel-max sampling with the uniform noise passed in (-log(-log u) in
    the body) and the temperature an input, codes over tp8; perplexity of
    the batch-mean soft assignment via jax.scipy.special.entr. Bug: the
    temperature squared.
22. commitment error per code and code usage with one packed all-reduce
    (counts, per-code error sums, total error and count concatenated, padded,
    psum_scatter + all_gather over dp4). Bug: the split swapped.
23. EMA update with optax.incremental_update, codes over tp and batch over dp
    (dp2 x tp4). Bug: the step size the decay.
24. nearest code by similarity with the owner the lowest rank holding the
    global max (pmin of axis_index) and index / code vector broadcast by a
    masked psum; the codebook duplicates codes across ranks so ties occur.
    Bug: the highest rank as owner (known miss: only ties show it).
25. residual VQ with quantiser dropout (active stages per row passed in),
    codebooks over tp4, batch over dp2. Bug: stages counted inclusively.
26. VQ-VAE step with global-norm clipping and SGD with momentum, codebook rows
    over tp (check_vma=False; the codebook gradient written by hand as the
    local one-hot times the code-loss gradient, psum'd over dp), the global
    norm with the codebook leaf psum'd over tp. Bug: optax.clip_by_global_norm
    applied shard-wise (the codebook's local norm; a small but clear
    difference, 1e-4 against 1e-6 rounding, as the encoder / decoder
    gradients dominate the norm).
GSPMD pairs (jax.jit with in/out shardings): nearest code + quantised
vectors, codebook over tp4 and batch over dp2; the EMA update of 3. on dp8;
residual VQ with straight-through gradients w.r.t. input and codebooks,
codebooks over tp4; FSQ + decoder loss gradient on dp2 x tp4; the training
step of 11. with shardings; Gumbel-softmax with passed-in noise, codes over
tp8; cosine-similarity VQ with codes over tp4; a Lloyd k-means step by
segment_sum on dp8; PQ encode / decode with sub-codebooks over tp4 and batch
over dp2; dead-code restarts on dp8; codebook perplexity on dp8; RVQ by
lax.scan on dp2 x tp4; FSQ decode with dims over tp4; Gumbel straight-through
gradients on dp2 x tp4.
Numerics: every correct pair agrees with its baseline at rounding level;
every bug variant differs (see "numerics").
Run from the repository root: bash samples/gen/run_fresh84.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh84.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh84.py"
C = Corpus("samples/fresh84", SCRIPT, "samples/gen/run_fresh84.sh", sys.argv[1:])
rng, R, I = seeded(8484)
psum, pmax, pmin, pmean, idx = lax.psum, lax.pmax, lax.pmin, lax.pmean, lax.axis_index
sg = lax.stop_gradient
BIG = np.int32(1 << 20)


def sqdist(z, cb):
    return jnp.sum(z * z, -1, keepdims=True) - 2.0 * z @ cb.T + jnp.sum(cb * cb, -1)[None]


def nearest(z, cb):
    return jnp.argmin(sqdist(z, cb), -1)


def nearest_tp(z, cb_l, axis, bug=None):
    """Global index of the nearest code when cb_l is this rank's rows."""
    kl = cb_l.shape[0]
    d = sg(sqdist(z, cb_l))  # an index: no gradient (pmin has none)
    li, lm = jnp.argmin(d, -1), jnp.min(d, -1)
    gm = pmax(lm, axis) if bug == "pmax-distance" else pmin(lm, axis)
    off = 0 if bug == "no-offset" else idx(axis) * kl
    cand = jnp.where(lm == gm, li + off, BIG)
    return pmin(cand, axis)


def local_onehot(gi, kl, axis):
    return (gi[:, None] == idx(axis) * kl + jnp.arange(kl)[None]).astype(jnp.float32)


# 1. nearest code, codebook over tp, batch over dp
K1, D1 = 16, 8


def vq_lookup(z, cb):
    i = nearest(z, cb)
    return cb[i], i


def vq_tp(bug):
    def f(z, cb):
        gi = nearest_tp(z, cb, "tp", bug)
        q = local_onehot(gi, cb.shape[0], "tp") @ cb
        return (q if bug == "q-not-psummed" else psum(q, "tp")), gi
    return f


C.smap("s.vq_nearest_code_sharded_codebook.dp2xtp4", {"dp": 2, "tp": 4}, vq_tp, (P("dp"), P("tp")),
       (P("dp"), P("dp")), vq_lookup, (R(16, D1), R(K1, D1)),
       bugs=[("no-offset", ["wrong-offset"]), ("q-not-psummed", ["missing-all-reduce"]),
             ("pmax-distance", ["wrong-collective-op"])])

# 2. VQ-VAE loss and grads, batch over dp
BETA = 0.25


def vqvae_loss(p, x, bug=None):
    z = x @ p["enc"]
    q = p["cb"][nearest(sg(z), p["cb"])]
    zst = q + sg(z - q) if bug == "st-wrong-side" else z + sg(q - z)
    rec = zst @ p["dec"]
    commit = jnp.mean(jnp.square(z - q)) if bug == "commit-no-sg" else jnp.mean(jnp.square(z - sg(q)))
    return jnp.mean(jnp.square(rec - x)) + jnp.mean(jnp.square(sg(z) - q)) + BETA * commit


def vqvae_dp(bug):
    def f(p, x):
        l, g = jax.value_and_grad(vqvae_loss)(p, x, bug)
        red = psum if bug == "grads-psum" else pmean
        return pmean(l, "dp"), jax.tree.map(lambda a: red(a, "dp"), g)
    return f


P2 = {"enc": R(12, 8, scale=0.4), "cb": R(16, 8), "dec": R(8, 12, scale=0.4)}
C.smap("s.vqvae_straight_through_loss_grads.dp4", {"dp": 4}, vqvae_dp, (P(), P("dp")), (P(), P()),
       lambda p, x: jax.value_and_grad(vqvae_loss)(p, x), (P2, R(32, 12)),
       bugs=[("st-wrong-side", ["wrong-value"]), ("grads-psum", ["wrong-scale"]),
             ("commit-no-sg", ["wrong-value"])])

# 3. EMA codebook update by one-hot over a dp batch
DEC, EPS = 0.9, 1e-5


def ema_update(z, cb, n, m, eps=EPS):
    oh = jax.nn.one_hot(nearest(z, cb), cb.shape[0], dtype=z.dtype)
    cnt, s = oh.sum(0), oh.T @ z
    n2 = DEC * n + (1 - DEC) * cnt
    m2 = DEC * m + (1 - DEC) * s
    tot = n2.sum()
    ns = (n2 + eps) / (tot + cb.shape[0] * eps) * tot
    return m2 / ns[:, None], n2, m2


def ema_dp(bug):
    def f(z, cb, n, m):
        oh = jax.nn.one_hot(nearest(z, cb), cb.shape[0], dtype=z.dtype)
        cnt = oh.sum(0) if bug == "counts-local" else psum(oh.sum(0), "dp")
        s = pmean(oh.T @ z, "dp") if bug == "sums-pmean" else psum(oh.T @ z, "dp")
        n2 = DEC * n + (1 - DEC) * cnt
        if bug == "decay-twice":
            n2 = DEC * n2 + (1 - DEC) * cnt
        m2 = DEC * m + (1 - DEC) * s
        tot = n2.sum()
        ns = (n2 + EPS) / (tot + cb.shape[0] * EPS) * tot
        return m2 / ns[:, None], n2, m2
    return f


CB3 = R(16, 8)
N3 = (1.0 + rng.uniform(0, 2, 16)).astype(np.float32)
M3 = CB3 * N3[:, None]
C.smap("s.ema_codebook_onehot_laplace.dp4", {"dp": 4}, ema_dp, (P("dp"), P(), P(), P()), (P(), P(), P()),
       ema_update, (R(64, 8), CB3, N3, M3),
       bugs=[("counts-local", ["missing-all-reduce"]), ("decay-twice", ["wrong-value"]),
             ("sums-pmean", ["wrong-scale"])])

# 4. EMA update by scatter-add, codebook over tp, batch over dp


def ema_scatter_2d(bug):
    def f(z, cb, n, m):
        kl = cb.shape[0]
        gi = nearest_tp(z, cb, "tp")
        li = gi if bug == "scatter-global-index" else gi - idx("tp") * kl
        li = jnp.where((li >= 0) & (li < kl), li, kl)
        ax = "tp" if bug == "counts-psum-tp" else "dp"
        cnt = psum(jnp.zeros(kl, z.dtype).at[li].add(1.0, mode="drop"), ax)
        s = psum(jnp.zeros((kl, z.shape[1]), z.dtype).at[li].add(z, mode="drop"), "dp")
        n2 = DEC * n + (1 - DEC) * cnt
        m2 = DEC * m + (1 - DEC) * s
        tot = n2.sum() if bug == "total-local" else psum(n2.sum(), "tp")
        ns = (n2 + EPS4) / (tot + 16 * EPS4) * tot
        return m2 / ns[:, None], n2, m2
    return f


EPS4 = 0.5  # a strong Laplace prior: small clusters pulled toward the mean size


C.smap("s.ema_codebook_scatter_add_sharded.dp2xtp4", {"dp": 2, "tp": 4}, ema_scatter_2d,
       (P("dp"), P("tp"), P("tp"), P("tp")), (P("tp"), P("tp"), P("tp")),
       lambda z, cb, n, m: ema_update(z, cb, n, m, EPS4), (R(32, 8), CB3, N3, M3),
       bugs=[("scatter-global-index", ["wrong-offset"]), ("total-local", ["missing-all-reduce"]),
             ("counts-psum-tp", ["wrong-axis"])])

# 5. residual VQ, 3 stages, codebooks over tp


def rvq(x, cbs):
    def loss(x):
        r, qs, codes, l = x, 0.0, [], 0.0
        for s in range(cbs.shape[0]):
            i = nearest(sg(r), cbs[s])
            q = cbs[s][i]
            l = l + jnp.mean(jnp.square(r - sg(q)))
            r = r - sg(q)
            qs = qs + q
            codes.append(i)
        xst = x + sg(qs - x)
        return l + 0.1 * jnp.sum(xst), (qs, jnp.stack(codes, 1))
    (l, (qs, codes)), g = jax.value_and_grad(loss, has_aux=True)(x)
    return qs, codes, l, g


def rvq_tp(bug):
    def f(x, cbs):
        def loss(x):
            r, qs, codes, l = x, 0.0, [], 0.0
            for s in range(cbs.shape[0]):
                src = x if bug == "residual-not-carried" else r
                gi = nearest_tp(sg(src), cbs[s], "tp", "no-offset" if bug == "stage-index-no-offset" else None)
                q = psum(local_onehot(gi, cbs.shape[1], "tp") @ cbs[s], "tp")
                l = l + jnp.mean(jnp.square(r - sg(q)))
                r = r - sg(q)
                qs = qs + q
                codes.append(gi)
            xst = x + sg(qs - x)
            return l + 0.1 * jnp.sum(xst), (qs, jnp.stack(codes, 1))
        (l, (qs, codes)), g = jax.value_and_grad(loss, has_aux=True)(x)
        return qs, codes, l, g
    return f


CBS5 = np.stack([R(16, 8), R(16, 8, scale=0.5), R(16, 8, scale=0.25)])
C.smap("s.residual_vq_three_stages_sharded.tp4", {"tp": 4}, rvq_tp, (P(), P(None, "tp")), (P(), P(), P(), P()),
       rvq, (R(16, 8), CBS5),
       bugs=[("residual-not-carried", ["wrong-value"]), ("stage-index-no-offset", ["wrong-offset"])])

# 6. FSQ, output dims over tp
LEV = np.array([8, 8, 6, 6, 5, 5, 5, 5], np.int32)
BASIS = np.concatenate([[1], np.cumprod(LEV[:-1])]).astype(np.int32)


def fsq_core(z, lev, st=True):
    levf = lev.astype(jnp.float32)
    half = (levf - 1) * (1 - 1e-3) / 2
    offset = jnp.where(lev % 2 == 0, 0.5, 0.0)
    shift = jnp.arctanh(offset / half)
    b = jnp.tanh(z + shift) * half - offset
    q = b + sg(jnp.round(b) - b) if st else jnp.round(b)
    hw = (lev // 2).astype(jnp.float32)
    return q / hw, (jnp.round(q) + hw).astype(jnp.int32)


def fsq(x, w, t):
    def loss(w):
        zh, dig = fsq_core(x @ w, jnp.asarray(LEV))
        return jnp.sum(zh * t), (zh, jnp.sum(dig * BASIS, -1))
    (l, (zh, code)), g = jax.value_and_grad(loss, has_aux=True)(w)
    return zh, code, g


def fsq_sm(bug):
    def f(x, w, t):
        dl = w.shape[1]
        off = idx("tp") * dl
        lev = lax.dynamic_slice_in_dim(jnp.asarray(LEV), 0 if bug == "levels-offset-0" else off, dl)
        bas = lax.dynamic_slice_in_dim(jnp.asarray(BASIS), 0 if bug == "basis-offset-0" else off, dl)

        def loss(w):
            zh, dig = fsq_core(x @ w, lev, st=bug != "round-no-st")
            return jnp.sum(zh * t), (zh, jnp.sum(dig * bas, -1))
        (l, (zh, code)), g = jax.value_and_grad(loss, has_aux=True)(w)
        return zh, psum(code, "tp"), psum(g, "dp")
    return f


C.smap("s.fsq_levels_over_tp_mixed_radix.dp2xtp4", {"dp": 2, "tp": 4}, fsq_sm,
       (P("dp"), P(None, "tp"), P("dp", "tp")), (P("dp", "tp"), P("dp"), P(None, "tp")),
       fsq, (R(16, 12), R(12, 8, scale=0.6), R(16, 8)),
       bugs=[("basis-offset-0", ["wrong-offset"]), ("levels-offset-0", ["wrong-offset"]),
             ("round-no-st", ["wrong-value"])])

# 7. product quantisation, sub-vectors over tp
MS, KS, DS = 4, 8, 4


def pq(x, cbs, qry):
    xs = x.reshape(x.shape[0], MS, DS)
    d = jnp.einsum("nmd,nmd->nm", xs, xs)[:, :, None] - 2 * jnp.einsum("nmd,mkd->nmk", xs, cbs) \
        + jnp.einsum("mkd,mkd->mk", cbs, cbs)[None]
    codes = jnp.argmin(d, -1)
    rec = jnp.take_along_axis(cbs[None], codes[:, :, None, None], 2)[:, :, 0]
    dist = jnp.sum(jnp.square(xs - rec))
    qs = qry.reshape(qry.shape[0], MS, DS)
    lut = jnp.sum(jnp.square(qs[:, :, None] - cbs[None]), -1)  # (Q, M, K)
    adc = sum(lut[:, m][:, codes[:, m]] for m in range(MS))
    return codes, rec.reshape(x.shape), dist, adc


def pq_tp(bug):
    def f(x, cb, qry):
        cb = cb[0]
        d = sqdist(x, cb)
        code = jnp.argmin(d, -1)
        rec = cb[code]
        dist = jnp.sum(jnp.square(x - rec))
        lut = jnp.sum(jnp.square(qry[:, None] - cb[None]), -1)
        adc = jnp.take(lut, code, axis=1)
        return (code[:, None], rec, dist if bug == "distortion-no-psum" else psum(dist, "tp"),
                pmean(adc, "tp") if bug == "adc-pmean" else psum(adc, "tp"))
    return f


C.smap("s.product_quantisation_subvectors_tp.tp4", {"tp": 4}, pq_tp, (P(None, "tp"), P("tp"), P(None, "tp")),
       (P(None, "tp"), P(None, "tp"), P(), P()), pq, (R(24, 16), R(MS, KS, DS), R(4, 16)),
       bugs=[("distortion-no-psum", ["missing-all-reduce"]), ("adc-pmean", ["wrong-scale"])])

# 8. usage / perplexity over the global batch


def usage(z, cb):
    k = cb.shape[0]
    d = sqdist(z, cb)
    p = jnp.bincount(jnp.argmin(d, -1), length=k) / z.shape[0]
    ppl = jnp.exp(-jnp.sum(p * jnp.log(p + 1e-10)))
    ps = jnp.mean(jax.nn.softmax(-d, -1), 0)
    return p, ppl, jnp.exp(-jnp.sum(ps * jnp.log(ps + 1e-10)))


def usage_dp(bug):
    def f(z, cb):
        k, nl = cb.shape[0], z.shape[0]
        d = sqdist(z, cb)
        cnt = jnp.zeros(k).at[jnp.argmin(d, -1)].add(1.0)
        if bug == "perplexity-local":
            pl = cnt / nl
            ppl = pmean(jnp.exp(-jnp.sum(pl * jnp.log(pl + 1e-10))), "dp")
            p = psum(cnt, "dp") / (nl * 8)
        else:
            p = psum(cnt, "dp") / (nl if bug == "usage-local-n" else nl * 8)
            ppl = jnp.exp(-jnp.sum(p * jnp.log(p + 1e-10)))
        sm = jnp.mean(jax.nn.softmax(-d, -1), 0)
        ps = psum(sm, "dp") if bug == "soft-psum" else psum(sm, "dp") / 8
        return p, ppl, jnp.exp(-jnp.sum(ps * jnp.log(ps + 1e-10)))
    return f


C.smap("s.codebook_usage_perplexity_global.dp8", {"dp": 8}, usage_dp, (P("dp"), P()), (P(), P(), P()),
       usage, (R(64, 8), R(16, 8, scale=0.7)),
       bugs=[("perplexity-local", ["missing-all-reduce"]), ("usage-local-n", ["wrong-scale"]),
             ("soft-psum", ["wrong-scale"])])

# 9. dead-code restarts from batch samples


def restart(z, cb, ridx):
    cnt = jnp.bincount(nearest(z, cb), length=cb.shape[0])
    return jnp.where((cnt < 1)[:, None], z[ridx], cb), cnt


def restart_dp(bug):
    def f(z, cb, ridx):
        oh = jax.nn.one_hot(nearest(z, cb), cb.shape[0], dtype=jnp.int32)
        cnt = oh.sum(0) if bug == "counts-local" else psum(oh.sum(0), "dp")
        if bug == "samples-local-batch":
            samp = z[ridx % z.shape[0]]
        else:
            samp = lax.all_gather(z, "dp", tiled=True)[ridx]
        return jnp.where((cnt < 1)[:, None], samp, cb), cnt
    return f


CB9 = R(16, 8)
CB9[8:] *= 2.5  # far codes: several are never used
C.smap("s.dead_code_restart_from_global_batch.dp4", {"dp": 4}, restart_dp, (P("dp"), P(), P()), (P(), P()),
       restart, (R(32, 8), CB9, I(0, 32, 16)),
       bugs=[("counts-local", ["missing-all-reduce"]), ("samples-local-batch", ["wrong-offset"])])

# 10. Gumbel-softmax quantiser, codes over tp
TAU = 0.7


def gumbel_vq(x, wl, cb, g):
    logits = x @ wl
    y = jax.nn.softmax((logits + g) / TAU, -1)
    soft = y @ cb
    hard = jax.nn.one_hot(jnp.argmax(y, -1), cb.shape[0]) @ cb
    q = jax.nn.softmax(logits, -1)
    kl = jnp.mean(jnp.sum(q * jnp.log(q * cb.shape[0] + 1e-10), -1))
    return soft, hard, kl


def gumbel_tp(bug):
    def f(x, wl, cb, g):
        kl_ = cb.shape[0]
        off = idx("tp") * kl_
        a = (x @ wl + g) / TAU
        e = jnp.exp(a - pmax(jnp.max(a, -1, keepdims=True), "tp"))
        den = jnp.sum(e, -1, keepdims=True)
        y = e / (den if bug == "denominator-local" else psum(den, "tp"))
        soft = psum(y @ cb, "tp")
        ly, li = jnp.max(y, -1), jnp.argmax(y, -1)
        gy = pmax(ly, "tp")
        gi = pmin(jnp.where(ly == gy, li + (0 if bug == "hard-no-offset" else off), BIG), "tp")
        hard = psum((gi[:, None] == off + jnp.arange(kl_)).astype(jnp.float32) @ cb, "tp")
        lg = x @ wl
        el = jnp.exp(lg - pmax(jnp.max(lg, -1, keepdims=True), "tp"))
        q = el / psum(jnp.sum(el, -1, keepdims=True), "tp")
        ktot = kl_ if bug == "kl-local-k" else kl_ * 4
        kl = pmean(psum(jnp.mean(jnp.sum(q * jnp.log(q * ktot + 1e-10), -1)), "tp"), "dp")
        return soft, hard, kl
    return f


GUM = -np.log(-np.log(rng.uniform(1e-6, 1.0, (8, 16)))).astype(np.float32)
C.smap("s.gumbel_softmax_codes_over_tp.dp2xtp4", {"dp": 2, "tp": 4}, gumbel_tp,
       (P("dp"), P(None, "tp"), P("tp"), P("dp", "tp")), (P("dp"), P("dp"), P()),
       gumbel_vq, (R(8, 12), R(12, 16, scale=0.5), R(16, 8), GUM),
       bugs=[("denominator-local", ["missing-all-reduce"]), ("kl-local-k", ["wrong-value"]),
             ("hard-no-offset", ["wrong-offset"])])

# 11. VQ-VAE training step, dp2 x tp4, check_vma=True
OPT = optax.adam(1e-2)
P11 = {"enc": R(12, 8, scale=0.4), "cb": R(16, 8), "dec": R(8, 12, scale=0.4)}
S11 = OPT.init(P11)
SPEC11 = {"enc": P(), "cb": P("tp"), "dec": P()}
SS11 = state_specs(S11, SPEC11)


def vq_loss_full(p, x):
    z = x @ p["enc"]
    q = p["cb"][nearest(sg(z), p["cb"])]
    zst = z + sg(q - z)
    rec = zst @ p["dec"]
    return jnp.mean(jnp.square(rec - x)) + jnp.mean(jnp.square(sg(z) - q)) + BETA * jnp.mean(jnp.square(z - sg(q)))


def step11(p, s, x):
    l, g = jax.value_and_grad(vq_loss_full)(p, x)
    u, s = OPT.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step11_sm(bug):
    def f(p, s, x):
        def loss(p):
            z = x @ p["enc"]
            gi = nearest_tp(sg(z), p["cb"], "tp", "no-offset" if bug == "index-no-offset" else None)
            q = psum(local_onehot(gi, p["cb"].shape[0], "tp") @ p["cb"], "tp")
            zst = z + sg(q - z)
            rec = zst @ p["dec"]
            cbl = jnp.mean(jnp.square(z - q)) if bug == "codebook-loss-no-sg" else jnp.mean(jnp.square(sg(z) - q))
            lo = jnp.mean(jnp.square(rec - x)) + cbl + BETA * jnp.mean(jnp.square(z - sg(q)))
            return pmean(lo, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


C.smap("s.vqvae_train_step_adam_sharded_codebook.dp2xtp4", {"dp": 2, "tp": 4}, step11_sm,
       (SPEC11, SS11, P("dp")), (SPEC11, SS11, P()), step11, (P11, S11, R(16, 12)),
       bugs=[("index-no-offset", ["wrong-offset"]), ("codebook-loss-no-sg", ["wrong-value"])], check_vma=True)

# ---------------------------------------------------------------------------
# GSPMD pairs
C.gspmd("g.vq_lookup_codebook_tp_batch_dp.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P("tp")), (P("dp"), P("dp")),
        vq_lookup, (R(16, D1), R(K1, D1)))

C.gspmd("g.ema_codebook_update.dp8", {"dp": 8}, (P("dp"), P(), P(), P()), (P(), P(), P()),
        ema_update, (R(64, 8), CB3, N3, M3))


def rvq_cb_grad(x, cbs):
    def loss(x, cbs):
        r, qs, l = x, 0.0, 0.0
        for s in range(cbs.shape[0]):
            q = jnp.take(cbs[s], nearest(sg(r), cbs[s]), axis=0)
            l = l + jnp.mean(jnp.square(sg(r) - q)) + BETA * jnp.mean(jnp.square(r - sg(q)))
            r = r - sg(q)
            qs = qs + q
        xst = x + sg(qs - x)
        return l + jnp.mean(jnp.square(xst - 0.5))
    return jax.value_and_grad(loss, argnums=(0, 1))(x, cbs)


C.gspmd("g.residual_vq_straight_through_grads.tp4", {"tp": 4}, (P(), P(None, "tp")), (P(), (P(), P(None, "tp"))),
        rvq_cb_grad, (R(16, 8), CBS5))


def fsq_dec(w, wd, x):
    def loss(w, wd):
        zh, _ = fsq_core(x @ w, jnp.asarray(LEV))
        return jnp.mean(jnp.square(zh @ wd - x))
    return jax.value_and_grad(loss, argnums=(0, 1))(w, wd)


C.gspmd("g.fsq_autoencoder_grads.dp2xtp4", {"dp": 2, "tp": 4}, (P(None, "tp"), P("tp"), P("dp")),
        (P(), (P(None, "tp"), P("tp"))), fsq_dec, (R(12, 8, scale=0.6), R(8, 12, scale=0.4), R(16, 12)))

C.gspmd("g.vqvae_train_step_adam.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC11, SS11, P("dp")), (SPEC11, SS11, P()),
        step11, (P11, S11, R(16, 12)))

GUM8 = -np.log(-np.log(rng.uniform(1e-6, 1.0, (8, 32)))).astype(np.float32)
C.gspmd("g.gumbel_softmax_noise_in.tp8", {"tp": 8}, (P(), P(None, "tp"), P("tp"), P(None, "tp")),
        (P(), P(), P()), gumbel_vq, (R(8, 12), R(12, 32, scale=0.5), R(32, 8), GUM8))

# 12. nearest code by an all_gather of every rank's (min, global index) and an
#     argmin over ranks (no pmin), codebook over tp8, bf16 code vectors out.


def vq_bf16(z, cb):
    i = nearest(z, cb)
    return cb.astype(jnp.bfloat16)[i], i


def vq_gather_sm(bug):
    def f(z, cb):
        kl = cb.shape[0]
        d = sqdist(z, cb)
        lm, li = jnp.min(d, -1), jnp.argmin(d, -1)
        off = 0 if bug == "no-offset" else idx("tp") * kl
        am = lax.all_gather(lm, "tp")  # (8, n)
        ai = lax.all_gather(li + off, "tp")
        r = jnp.argmax(am, 0) if bug == "argmax-over-ranks" else jnp.argmin(am, 0)
        gi = jnp.take_along_axis(ai, r[None], 0)[0]
        q = local_onehot(gi, kl, "tp").astype(jnp.bfloat16) @ cb.astype(jnp.bfloat16)
        return psum(q, "tp"), gi
    return f


C.smap("s.vq_allgather_min_index_bf16.tp8", {"tp": 8}, vq_gather_sm, (P(), P("tp")), (P(), P()),
       vq_bf16, (R(12, 8), R(32, 8)),
       bugs=[("no-offset", ["wrong-offset"]), ("argmax-over-ranks", ["wrong-value"])])

# 13. ZeRO-style EMA update: one-hot sums reduce-scattered over dp (each dp
#     rank owns 16/dp codes), the update on the owned codes, all_gather'd back.


def ema_zero(bug):
    def f(z, cb, n, m):
        k, nd = cb.shape[0], 4
        kl = k // nd
        oh = jax.nn.one_hot(nearest(z, cb), k, dtype=z.dtype)
        cnt = lax.psum_scatter(oh.sum(0), "dp", tiled=True)
        s = lax.psum_scatter(oh.T @ z, "dp", tiled=True)
        me = idx("dp")
        nl = lax.dynamic_slice_in_dim(n, me * kl, kl)
        ml = lax.dynamic_slice_in_dim(m, (0 if bug == "owned-slice-offset-0" else me * kl), kl)
        n2 = DEC * nl + (1 - DEC) * cnt
        m2 = DEC * ml + (1 - DEC) * s
        tot = n2.sum() if bug == "total-owned-only" else psum(n2.sum(), "dp")
        ns = (n2 + EPS4) / (tot + k * EPS4) * tot
        g = lambda a: lax.all_gather(a, "dp", tiled=True)
        return g(m2 / ns[:, None]), g(n2), g(m2)
    return f


C.smap("s.ema_codebook_reduce_scatter_owned_codes.dp4", {"dp": 4}, ema_zero, (P("dp"), P(), P(), P()),
       (P(), P(), P()), lambda z, cb, n, m: ema_update(z, cb, n, m, EPS4), (R(64, 8), CB3, N3, M3),
       bugs=[("owned-slice-offset-0", ["wrong-offset"]), ("total-owned-only", ["missing-all-reduce"])])

# 14. codebook sharded on both dims (codes over tp2, feature dim over sp4),
#     inputs' feature dim over sp4: partial distances psum'd over sp, then
#     the local argmin and the cross-tp pmin.


def vq_2d_q(bug):
    def f(z, cb):
        kl = cb.shape[0]
        part = -2.0 * z @ cb.T + jnp.sum(cb * cb, -1)[None]
        d = part if bug == "distance-not-psummed" else psum(part, "sp")
        lm, li = jnp.min(d, -1), jnp.argmin(d, -1)
        gm = pmin(lm, "tp")
        off = (idx("sp") if bug == "offset-from-sp" else idx("tp")) * kl
        gi = pmin(jnp.where(lm == gm, li + off, BIG), "tp")
        q = psum((gi[:, None] == idx("tp") * kl + jnp.arange(kl)[None]).astype(jnp.float32) @ cb, "tp")
        return q, gi
    return f


C.smap("s.vq_codebook_codes_tp_features_sp.tp2xsp4", {"tp": 2, "sp": 4}, vq_2d_q, (P(None, "sp"), P("tp", "sp")),
       (P(None, "sp"), P()), vq_lookup, (R(16, 16), R(16, 16)),
       bugs=[("distance-not-psummed", ["missing-all-reduce"]), ("offset-from-sp", ["wrong-axis"])])

# 15. lookup-free quantisation (LFQ, MAGVIT-2 style): 8 binary dims over tp4
#     (2 per rank), code index as a sum of bits times 2^(global dim),
#     sign with the straight-through trick, per-sample entropy and the
#     entropy of the global-batch mean over the 2 x 2 sub-code distribution of
#     each rank's dims (factorised), batch over dp2.


def lfq(z):
    q = z + sg(jnp.where(z > 0, 1.0, -1.0) - z)
    code = jnp.sum((z > 0).astype(jnp.int32) * (2 ** jnp.arange(z.shape[1])), -1)
    zz = z.reshape(z.shape[0], -1, 2)  # groups of 2 dims
    cbk = jnp.array([[-1, -1], [1, -1], [-1, 1], [1, 1]], jnp.float32)
    logit = 2.0 * jnp.einsum("ngd,kd->ngk", zz, cbk)
    p = jax.nn.softmax(logit, -1)
    ent_s = jnp.mean(jnp.sum(-p * jax.nn.log_softmax(logit, -1), -1))
    pm = jnp.mean(p, 0)
    ent_b = jnp.sum(-pm * jnp.log(pm + 1e-9))
    return q, code, ent_s - ent_b


def lfq_sm(bug):
    def f(z):
        dl = z.shape[1]
        q = z + sg(jnp.where(z > 0, 1.0, -1.0) - z)
        sh = jnp.arange(dl) + (0 if bug == "bits-no-offset" else idx("tp") * dl)
        code = psum(jnp.sum((z > 0).astype(jnp.int32) * (2 ** sh), -1), "tp")
        zz = z.reshape(z.shape[0], -1, 2)
        cbk = jnp.array([[-1, -1], [1, -1], [-1, 1], [1, 1]], jnp.float32)
        logit = 2.0 * jnp.einsum("ngd,kd->ngk", zz, cbk)
        p = jax.nn.softmax(logit, -1)
        ent_s = jnp.sum(-p * jax.nn.log_softmax(logit, -1), -1).sum(-1).mean(0)
        ent_s = pmean(psum(ent_s, "tp"), "dp") / 4
        pm = jnp.mean(p, 0) if bug == "batch-mean-local" else pmean(jnp.mean(p, 0), "dp")
        ent_b = psum(jnp.sum(-pm * jnp.log(pm + 1e-9)), "tp")
        if bug == "batch-mean-local":
            ent_b = pmean(ent_b, "dp")
        return q, code, ent_s - ent_b
    return f


C.smap("s.lookup_free_quantisation_entropy.dp2xtp4", {"dp": 2, "tp": 4}, lfq_sm, (P("dp", "tp"),),
       (P("dp", "tp"), P("dp"), P()), lfq, (R(16, 8),),
       bugs=[("bits-no-offset", ["wrong-offset"]), ("batch-mean-local", ["missing-all-reduce"])])

# 16. RVQ stages by lax.scan over stacked codebooks, codes over tp2, batch
#     over dp4; the residual is the scan carry.


def rvq_scan_base(x, cbs):
    def stage(r, cb):
        q = cb[nearest(r, cb)]
        return r - q, (q, nearest(r, cb))
    r, (qs, codes) = lax.scan(stage, x, cbs)
    return x - r, codes.T, jnp.mean(jnp.square(r))


def rvq_scan_sm(bug):
    def f(x, cbs):
        def stage(r, cb):
            gi = nearest_tp(r, cb, "tp", "no-offset" if bug == "index-no-offset" else None)
            q = psum(local_onehot(gi, cb.shape[0], "tp") @ cb, "tp")
            return (r + q if bug == "residual-added" else r - q), (q, gi)
        r, (qs, codes) = lax.scan(stage, x, cbs)
        return x - r, codes.T, pmean(jnp.mean(jnp.square(r)), "dp")
    return f


C.smap("s.residual_vq_lax_scan_carry.dp4xtp2", {"dp": 4, "tp": 2}, rvq_scan_sm, (P("dp"), P(None, "tp")),
       (P("dp"), P("dp"), P()), rvq_scan_base, (R(16, 8), np.stack([R(16, 8), R(16, 8, scale=0.6), R(16, 8, scale=0.3),
                                                                     R(16, 8, scale=0.15)])),
       bugs=[("index-no-offset", ["wrong-offset"]), ("residual-added", ["wrong-value"])])

# GSPMD: cosine-similarity VQ (l2-normalised codes, argmax), codes over tp4;
# one Lloyd k-means step on a dp8 batch (the codebook refit by segment_sum).


def cos_vq(z, cb):
    zn = z / jnp.linalg.norm(z, axis=-1, keepdims=True)
    cn = cb / jnp.linalg.norm(cb, axis=-1, keepdims=True)
    i = jnp.argmax(zn @ cn.T, -1)
    return cn[i], i, jnp.mean(1.0 - jnp.sum(zn * cn[i], -1))


C.gspmd("g.cosine_vq_codes_over_tp.tp4", {"tp": 4}, (P(), P("tp")), (P(), P(), P()), cos_vq,
        (R(16, 8), R(32, 8)))


def lloyd(z, cb):
    i = nearest(z, cb)
    s = jax.ops.segment_sum(z, i, cb.shape[0])
    c = jax.ops.segment_sum(jnp.ones(z.shape[0]), i, cb.shape[0])
    return jnp.where((c > 0)[:, None], s / jnp.maximum(c, 1)[:, None], cb), c


C.gspmd("g.kmeans_lloyd_step_segment_sum.dp8", {"dp": 8}, (P("dp"), P()), (P(), P()), lloyd,
        (R(64, 8), R(16, 8)))

# 17. strided code ownership: the codebook passed as (K/tp, tp, D) with its
#     middle dim over tp, so rank r owns codes j*tp + r; global index
#     li * tp + r.


def vq_strided_base(z, cb3):
    cb = cb3.reshape(-1, cb3.shape[-1])
    i = nearest(z, cb)
    return cb[i], i


def vq_strided(bug):
    def f(z, cb3):
        cb, tp = cb3[:, 0], 4
        d = sqdist(z, cb)
        lm, li = jnp.min(d, -1), jnp.argmin(d, -1)
        gm = pmin(lm, "tp")
        r = idx("tp")
        gl = li + r * cb.shape[0] if bug == "block-offset" else li * tp + r
        gi = pmin(jnp.where(lm == gm, gl, BIG), "tp")
        mine = jnp.where(lm == gm, 1.0, 0.0)
        first = gi == gl
        q = psum(jnp.where((first & (mine > 0))[:, None], cb[li], 0.0), "tp")
        return q, gi
    return f


C.smap("s.vq_strided_code_ownership.dp2xtp4", {"dp": 2, "tp": 4}, vq_strided, (P("dp"), P(None, "tp")),
       (P("dp"), P("dp")), vq_strided_base, (R(16, 8), R(4, 4, 8)),
       bugs=[("block-offset", ["wrong-offset"])])

# 18. FSQ decode: code indices (replicated) to vectors, dims over tp4: the
#     rank's digits (index // basis) % levels at its dims' offset.


def fsq_decode(code):
    lev, bas = jnp.asarray(LEV), jnp.asarray(BASIS)
    dig = (code[:, None] // bas) % lev
    hw = lev // 2
    return (dig - hw).astype(jnp.float32) / hw.astype(jnp.float32)


def fsq_decode_sm(bug):
    def f(code):
        dl = 2
        off = idx("tp") * dl
        lev = lax.dynamic_slice_in_dim(jnp.asarray(LEV), off, dl)
        bas = lax.dynamic_slice_in_dim(jnp.asarray(BASIS), 0 if bug == "basis-offset-0" else off, dl)
        dig = (code[:, None] // bas) % lev
        hw = lev // 2
        if bug == "halfwidth-float-levels":
            return (dig - hw).astype(jnp.float32) / (lev.astype(jnp.float32) / 2)
        return (dig - hw).astype(jnp.float32) / hw.astype(jnp.float32)
    return f


C.smap("s.fsq_decode_indices_dims_over_tp.tp4", {"tp": 4}, fsq_decode_sm, (P(),), P(None, "tp"), fsq_decode,
       (I(0, int(np.prod(LEV)), 32),),
       bugs=[("basis-offset-0", ["wrong-offset"]), ("halfwidth-float-levels", ["wrong-value"])])

# 19. a custom_vjp straight-through quantiser (identity backward, scaled by
#     0.5) inside a VQ regression loss over dp4: the loss as psum of sums
#     over psum of counts, the encoder gradient psum'd.


@jax.custom_vjp
def st_quant(z, cb):
    return cb[nearest(z, cb)]


def st_fwd(z, cb):
    return st_quant(z, cb), cb.shape


def st_bwd(shape, g):
    return 0.5 * g, jnp.zeros(shape, g.dtype)


st_quant.defvjp(st_fwd, st_bwd)


def cvjp_loss(w, cb, x, y):
    def l(w):
        return jnp.sum(jnp.square(st_quant(x @ w, cb) - y)) / x.shape[0]
    return jax.value_and_grad(l)(w)


def cvjp_sm(bug):
    def f(w, cb, x, y):
        nglob = psum(x.shape[0], "dp")

        def l(w):
            return jnp.sum(jnp.square(st_quant(x @ w, cb) - y)) / (x.shape[0] if bug == "local-count" else nglob)
        v, g = jax.value_and_grad(l)(w)
        return psum(v, "dp"), psum(g, "dp")
    return f


C.smap("s.custom_vjp_straight_through_quantiser.dp4", {"dp": 4}, cvjp_sm, (P(), P(), P("dp"), P("dp")), (P(), P()),
       cvjp_loss, (R(12, 8, scale=0.4), R(16, 8), R(32, 12), R(32, 8)),
       bugs=[("local-count", ["wrong-scale"])])

# 20. dead-code restart with codes over tp2 and batch over dp4: each tp
#     rank refreshes its own dead codes from the dp-gathered batch at its
#     slice of the sample indices.


def restart_2d(bug):
    def f(z, cb, ridx):
        kl = cb.shape[0]
        gi = nearest_tp(z, cb, "tp")
        li = gi - idx("tp") * kl
        li = jnp.where((li >= 0) & (li < kl), li, kl)
        cnt = jnp.zeros(kl, jnp.int32).at[li].add(1, mode="drop")
        if bug != "counts-not-psummed":
            cnt = psum(cnt, "dp")
        zg = lax.all_gather(z, "dp", tiled=True)
        return jnp.where((cnt < 1)[:, None], zg[ridx], cb), cnt
    return f


C.smap("s.dead_code_restart_codes_over_tp.dp4xtp2", {"dp": 4, "tp": 2}, restart_2d, (P("dp"), P("tp"), P("tp")),
       (P("tp"), P("tp")), restart, (R(32, 8), CB9, I(0, 32, 16)),
       bugs=[("counts-not-psummed", ["missing-all-reduce"])])

# 21. Gumbel-max sampling with the uniform noise passed in (-log(-log u) in
#     the body) and the temperature an input scalar, codes over tp8; the
#     perplexity of the soft assignments' batch mean via entr.
from jax.scipy.special import entr  # noqa: E402


def gumbel_u(x, wl, u, tau):
    a = (x @ wl - jnp.log(-jnp.log(u))) / tau
    y = jax.nn.softmax(a, -1)
    i = jnp.argmax(a, -1)
    return y, i, jnp.exp(jnp.sum(entr(jnp.mean(y, 0))))


def gumbel_u_sm(bug):
    def f(x, wl, u, tau):
        kl = wl.shape[1]
        a = (x @ wl - jnp.log(-jnp.log(u))) / (tau * tau if bug == "tau-squared" else tau)
        mx = pmax(jnp.max(a, -1), "tp")
        e = jnp.exp(a - mx[:, None])
        y = e / psum(jnp.sum(e, -1), "tp")[:, None]
        la, li = jnp.max(a, -1), jnp.argmax(a, -1)
        i = pmin(jnp.where(la == mx, li + idx("tp") * kl, BIG), "tp")
        h = psum(jnp.sum(entr(jnp.mean(y, 0))), "tp")
        return y, i, jnp.exp(h)
    return f


C.smap("s.gumbel_max_uniform_noise_tau_input.tp8", {"tp": 8}, gumbel_u_sm, (P(), P(None, "tp"), P(None, "tp"), P()),
       (P(None, "tp"), P(), P()), gumbel_u,
       (R(8, 12), R(12, 32, scale=0.5), rng.uniform(0.01, 0.99, (8, 32)).astype(np.float32), np.float32(0.8)),
       bugs=[("tau-squared", ["wrong-value"])])

# 22. commitment loss and codebook usage with one packed all-reduce: counts
#     and per-code squared-error sums concatenated into one buffer, psum'd
#     over dp once and split; the reduce written as psum_scatter +
#     all_gather; per-code mean error, commitment loss.


def packed_stats(z, cb):
    i = nearest(z, cb)
    oh = jax.nn.one_hot(i, cb.shape[0])
    err = jnp.sum(jnp.square(z - cb[i]), -1)
    cnt, es = oh.sum(0), oh.T @ err
    return es / jnp.maximum(cnt, 1.0), jnp.sum(err) / z.shape[0], cnt


def packed_sm(bug):
    def f(z, cb):
        k = cb.shape[0]
        i = nearest(z, cb)
        oh = jax.nn.one_hot(i, k)
        err = jnp.sum(jnp.square(z - cb[i]), -1)
        buf = jnp.concatenate([oh.sum(0), oh.T @ err, jnp.sum(err)[None], jnp.full((1,), z.shape[0], jnp.float32)])
        buf = jnp.pad(buf, (0, (-buf.shape[0]) % 4))
        red = lax.all_gather(lax.psum_scatter(buf, "dp", tiled=True), "dp", tiled=True)
        if bug == "split-swapped":
            es, cnt = red[:k], red[k:2 * k]
        else:
            cnt, es = red[:k], red[k:2 * k]
        return es / jnp.maximum(cnt, 1.0), red[2 * k] / red[2 * k + 1], cnt
    return f


C.smap("s.packed_allreduce_counts_and_errors.dp4", {"dp": 4}, packed_sm, (P("dp"), P()), (P(), P(), P()),
       packed_stats, (R(32, 8), R(16, 8)),
       bugs=[("split-swapped", ["wrong-offset"])])

# 23. EMA update with optax.incremental_update on dp2 x tp4, codebook
#     columns (codes) over tp: one-hot of the local code columns at the
#     global index, counts and sums psum'd over dp.


def ema_inc(z, cb, n, m):
    oh = jax.nn.one_hot(nearest(z, cb), cb.shape[0], dtype=z.dtype)
    n2 = optax.incremental_update(oh.sum(0), n, 1 - DEC)
    m2 = optax.incremental_update(oh.T @ z, m, 1 - DEC)
    return m2 / (n2[:, None] + 1e-5), n2, m2


def ema_inc_sm(bug):
    def f(z, cb, n, m):
        gi = nearest_tp(z, cb, "tp")
        oh = local_onehot(gi, cb.shape[0], "tp")
        step = DEC if bug == "step-is-decay" else 1 - DEC
        n2 = optax.incremental_update(psum(oh.sum(0), "dp"), n, step)
        m2 = optax.incremental_update(psum(oh.T @ z, "dp"), m, step)
        return m2 / (n2[:, None] + 1e-5), n2, m2
    return f


C.smap("s.ema_incremental_update_codes_tp.dp2xtp4", {"dp": 2, "tp": 4}, ema_inc_sm,
       (P("dp"), P("tp"), P("tp"), P("tp")), (P("tp"), P("tp"), P("tp")), ema_inc, (R(32, 8), CB3, N3, M3),
       bugs=[("step-is-decay", ["wrong-value"])])

# GSPMD: product-quantisation encode + decode with the sub-codebooks over
# tp4 and the batch over dp2; dead-code restarts on a dp8 batch.


def pq_encdec(x, cbs):
    xs = x.reshape(x.shape[0], MS, DS)
    d = jnp.sum(jnp.square(xs[:, :, None] - cbs[None]), -1)
    codes = jnp.argmin(d, -1)
    rec = jnp.einsum("nmk,mkd->nmd", jax.nn.one_hot(codes, KS), cbs)
    return codes, rec.reshape(x.shape)


C.gspmd("g.pq_encode_decode_subcodebooks_tp.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P("tp")),
        (P("dp", "tp"), P("dp", "tp")), pq_encdec, (R(16, 16), R(MS, KS, DS)))

C.gspmd("g.dead_code_restart.dp8", {"dp": 8}, (P("dp"), P(), P()), (P(), P()), restart,
        (R(32, 8), CB9, I(0, 32, 16)))

# 24. nearest code by similarity (argmax of -distance) with the code owner
#     chosen as the lowest rank holding the global max (pmin of axis_index)
#     and the index broadcast by a masked psum; the codebook has duplicated
#     codes across ranks (codes 0..3 repeated on every rank after the first
#     ... in half the rows) so that ties go to the lowest global index.


def vq_owner_sm(bug):
    def f(z, cb):
        kl = cb.shape[0]
        sim = -sqdist(z, cb)
        ls, li = jnp.max(sim, -1), jnp.argmax(sim, -1)
        gs = pmax(ls, "tp")
        me = idx("tp")
        owner = pmin(jnp.where(ls == gs, me, 99), "tp")
        if bug == "owner-highest-rank":
            owner = pmax(jnp.where(ls == gs, me, -1), "tp")
        gi = psum(jnp.where(me == owner, li + me * kl, 0), "tp")
        q = psum(jnp.where((me == owner)[:, None], cb[li], 0.0), "tp")
        return q, gi
    return f


CB24 = R(16, 8)
CB24[4:8] = CB24[0:4]  # rank 1's codes duplicate rank 0's: ties across ranks
CB24[12:16] = CB24[8:12]
C.smap("s.vq_owner_rank_masked_psum_ties.dp2xtp4", {"dp": 2, "tp": 4}, vq_owner_sm, (P("dp"), P("tp")),
       (P("dp"), P("dp")), vq_lookup, (R(16, 8), CB24),
       bugs=[("owner-highest-rank", ["wrong-value"])])

# 25. RVQ with quantiser dropout: the number of active stages per row
#     passed in (1..3); stages at or after it add nothing and leave the
#     residual; codebooks over tp4, batch over dp2.


def rvq_drop(x, cbs, nq):
    r, out = x, jnp.zeros_like(x)
    for s_ in range(cbs.shape[0]):
        q = cbs[s_][nearest(r, cbs[s_])]
        on = (s_ < nq)[:, None]
        out = out + jnp.where(on, q, 0.0)
        r = r - jnp.where(on, q, 0.0)
    return out, jnp.sum(jnp.square(r)) / x.shape[0]


def rvq_drop_sm(bug):
    def f(x, cbs, nq):
        r, out = x, jnp.zeros_like(x)
        for s_ in range(cbs.shape[0]):
            gi = nearest_tp(r, cbs[s_], "tp")
            q = psum(local_onehot(gi, cbs.shape[1], "tp") @ cbs[s_], "tp")
            on = ((s_ <= nq) if bug == "stage-count-inclusive" else (s_ < nq))[:, None]
            out = out + jnp.where(on, q, 0.0)
            r = r - jnp.where(on, q, 0.0)
        return out, psum(jnp.sum(jnp.square(r)), "dp") / (x.shape[0] * 2)
    return f


C.smap("s.residual_vq_quantiser_dropout.dp2xtp4", {"dp": 2, "tp": 4}, rvq_drop_sm, (P("dp"), P(None, "tp"), P("dp")),
       (P("dp"), P()), rvq_drop, (R(16, 8), CBS5, I(1, 4, 16)),
       bugs=[("stage-count-inclusive", ["wrong-offset"])])

# 26. VQ-VAE step with global-norm clipping and SGD with momentum (not adam,
#     whose first step hides the clip's scale), codebook rows over tp
#     (check_vma=False, the codebook gradient written by hand as the
#     one-hot of the local rows times the code-loss gradient, psum'd over
#     dp; the encoder / decoder gradients by jax.grad and pmean'd), the
#     global norm with the codebook leaf psum'd over tp. Bug: optax's
#     clip_by_global_norm applied shard-wise (the codebook's local norm).
CLIP = 0.1  # small enough that the clip acts (the gradient norm is larger)
OPT26 = optax.chain(optax.clip_by_global_norm(CLIP), optax.sgd(1.0, momentum=0.9))
OPT26_NOCLIP = optax.sgd(1.0, momentum=0.9)
S26 = OPT26.init(P11)
SS26 = state_specs(S26, SPEC11)


def step26(p, s, x):
    l, g = jax.value_and_grad(vq_loss_full)(p, x)
    u, s = OPT26.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step26_sm(bug):
    def f(p, s, x):
        n = x.shape[0] * 2
        z = x @ p["enc"]
        gi = nearest_tp(z, p["cb"], "tp")
        oh = local_onehot(gi, p["cb"].shape[0], "tp")
        q = psum(oh @ p["cb"], "tp")

        def ed_loss(ed):
            zz = x @ ed["enc"]
            rec = (zz + sg(q - zz)) @ ed["dec"]
            return jnp.mean(jnp.square(rec - x)) + BETA * jnp.mean(jnp.square(zz - sg(q)))
        led, ged = jax.value_and_grad(ed_loss)({"enc": p["enc"], "dec": p["dec"]})
        lcb = jnp.sum(jnp.square(z - q)) / (n * z.shape[1])
        l = pmean(led, "dp") + psum(lcb, "dp")
        # d/dq of mean((sg(z) - q)^2) over the global batch, sent to the local rows
        gq = -2.0 * (z - q) / (n * z.shape[1])
        g = {"enc": pmean(ged["enc"], "dp"), "dec": pmean(ged["dec"], "dp"), "cb": psum(oh.T @ gq, "dp")}
        if bug == "optax-clip-shardwise":
            u, s = OPT26.update(g, s, p)
        else:
            sq = jnp.sum(g["enc"] ** 2) + jnp.sum(g["dec"] ** 2) + psum(jnp.sum(g["cb"] ** 2), "tp")
            gn = jnp.sqrt(sq)
            g = jax.tree.map(lambda a: a * jnp.where(gn > CLIP, CLIP / gn, 1.0), g)
            adam_s = s[1]
            u, adam_s = OPT26_NOCLIP.update(g, adam_s, p)
            s = (s[0], adam_s)
        return optax.apply_updates(p, u), s, l
    return f


C.smap("s.vqvae_step_global_norm_clip_codebook_tp.dp2xtp4", {"dp": 2, "tp": 4}, step26_sm,
       (SPEC11, SS26, P("dp")), (SPEC11, SS26, P()), step26, (P11, S26, R(16, 12)),
       bugs=[("optax-clip-shardwise", ["missing-all-reduce"])])

# GSPMD: codebook perplexity on dp8; RVQ by lax.scan with codebooks over
# tp4 and the batch over dp2; FSQ decode of replicated indices into dims
# over tp4; a Gumbel straight-through gradient (noise in) with codes over tp4.
C.gspmd("g.codebook_usage_perplexity.dp8", {"dp": 8}, (P("dp"), P()), (P(), P(), P()), usage,
        (R(64, 8), R(16, 8, scale=0.7)))

C.gspmd("g.residual_vq_lax_scan.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp")), (P("dp"), P("dp"), P()),
        rvq_scan_base, (R(16, 8), np.stack([R(16, 8), R(16, 8, scale=0.6), R(16, 8, scale=0.3)])))

C.gspmd("g.fsq_decode_indices.tp4", {"tp": 4}, (P(),), P(None, "tp"), fsq_decode, (I(0, int(np.prod(LEV)), 32),))


def gumbel_st_grad(wl, cb, x, g, y):
    def loss(wl, cb):
        a = (x @ wl + g) / TAU
        soft = jax.nn.softmax(a, -1)
        hard = jax.nn.one_hot(jnp.argmax(a, -1), cb.shape[0])
        st = hard + soft - sg(soft)
        return jnp.mean(jnp.square(st @ cb - y))
    return jax.value_and_grad(loss, argnums=(0, 1))(wl, cb)


C.gspmd("g.gumbel_straight_through_grads.dp2xtp4", {"dp": 2, "tp": 4},
        (P(None, "tp"), P("tp"), P("dp"), P("dp", "tp"), P("dp")), (P(), (P(None, "tp"), P("tp"))),
        gumbel_st_grad, (R(12, 16, scale=0.5), R(16, 8), R(8, 12), GUM, R(8, 8)))

C.known_miss("s.vq_owner_rank_masked_psum_ties.dp2xtp4.bug.owner-highest-rank",
             "the owner rank only matters when two ranks tie for the row's best code; the generator's codebook has duplicated codes across ranks but the witness draws fresh random codebooks, which never tie")
C.finish()
