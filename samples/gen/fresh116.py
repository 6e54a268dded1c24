"""samples/fresh116: a 116th batch of programs as a user writes them, on the theme of vector quantisation and discrete bottlenecks in JAX (cosine-similarity codebooks, SimVQ projected codebooks with the feature dim over tp, multi-head EMA codebooks, residual VQ with one stage per device, FSQ with straight-through gradients, Gumbel-softmax with per-device keys, lookup-free quantisation with a full code softmax, product-quantisation k-means, top-2 soft codes over a sharded codebook, a VQ-VAE training step with optax + EMA codebook, masked usage metrics), none of them an idiom of samples/fresh .. fresh26, probe, train or wild (nor of fresh84, the earlier VQ batch).
shard_map families:
 1. ViT-VQGAN cosine-similarity lookup, codebook rows over tp4, batch over
    dp2: l2-normalised codes and inputs, local argmax and max, all_gather
    over tp of (max, global index), the winning rank by argmax over the
    gathered maxima, the code vector psum'd from the winning rank only;
    commitment loss pmean'd over dp. Bugs: local index without the shard
    offset, winning rank by argmin, every rank's local best psum'd (no
    owner mask).
 2. SimVQ projected codebook: codebook = basis @ W with W's output columns
    (the feature dim) over tp4, inputs' features over tp4, batch over dp2:
    partial squared distances psum'd over tp, argmin, the local columns of
    the code, a codebook loss psum'd over tp and pmean'd over dp. Bugs:
    distances from the local columns only, only the cross term psum'd (the
    code norms local), the loss mean over the local feature count.
 3. multi-head VQ with per-head EMA codebooks, heads over tp2, batch over
    dp4: per-head one-hot counts and sums psum'd over dp, EMA decay, Laplace
    smoothing of the cluster sizes, new codebook. Bugs: counts psum'd over tp
    instead of dp, smoothing total psum'd over dp again, decay and 1-decay
    swapped.
 4. residual VQ with one stage per device on a 4-device "st" axis (dp2 x
    st4): each device holds one stage's codebook; stage s's quantisation is
    psum'd from the device with index s, the residual updated on every
    device; codes and a per-stage commitment loss. Bugs: stage mask
    reversed (3 - s), unmasked psum (all stages' quantisations of the
    same residual summed), commitment loss not pmean'd over dp.
 5. FSQ (levels 5,4,3) with straight-through rounding, encoder / decoder
    replicated, batch over dp4: value_and_grad of the reconstruction loss
    in the body, grads pmean'd; code histogram psum'd over dp and the
    perplexity. Bugs: grads psum'd, perplexity of the local histogram
    pmean'd, round without straight-through.
 6. Gumbel-softmax quantiser with per-device keys (fold_in of the dp index)
    on dp4 x tp2, the codebook's feature columns over tp: hard
    straight-through one-hot times the local columns, KL of the batch-mean
    soft assignment to uniform pmean'd. Bugs: key folded with the tp index,
    key folded with the linear device id, KL of local means psum'd.
 7. lookup-free quantisation with a full softmax over the 64 codes of
    {-1,1}^6, dims over tp2 and batch over dp4: partial code logits psum'd
    over tp, per-sample entropy minus entropy of the global batch mean;
    sign with straight-through; index from bits times 2^(global dim),
    psum'd. Bugs: batch mean local, bit weights at local dims, logits not
    psum'd.
 8. product quantisation k-means (3 Lloyd iterations in a fori_loop), data
    rows over dp4, subspaces over tp2: assignment, sums and counts psum'd
    over dp, empty clusters kept; distortion psum'd over tp and pmean'd over
    dp. Bugs: counts local (sums psum'd), pmean of local means, distortion
    not psum'd over tp.
 9. top-2 soft codes over a codebook whose rows are over tp4, tokens over
    sp2: local lax.top_k of negative distances, all_gather of (values,
    global indices, code vectors), global top_k, softmax-weighted code
    mix. Bugs: indices without offset, mix from the local top-2 vectors.
10. VQ-VAE training step with optax.adamw for encoder / decoder and an EMA
    codebook, batch over dp2 and tokens over sp2 (check_vma=False): jax.grad
    of the local loss, grads pmean'd over (dp, sp), counts / sums psum'd.
    Bugs: grads pmean'd over dp only, EMA sums local, loss psum'd.
11. masked codebook usage metrics on dp2 x sp4 (padding mask passed in):
    usage histogram of valid tokens psum'd, perplexity, dead-code fraction,
    mean quantisation error over valid tokens. Bugs: histogram psum'd over
    sp only, error divided by all tokens, dead fraction from local counts.
12. codebook + commitment loss gradients with codebook rows over tp4 and
    batch over dp2 (check_vma=True): global nearest code by pmin of the
    distance then pmin of the global index among ties, the code vector
    psum'd from its owner, value_and_grad in the body (the dp-invariant
    codebook's gradient is summed over dp by the transpose of the implicit
    pvary). Bugs: the loss normalised by the local batch, the codebook
    gradient psum'd over dp again (a first draft's correct body did this,
    and was twice the baseline: moved here as a bug), the commitment term
    without stop_gradient on q.
13. bf16 nearest code with codebook rows over tp8, pmin of the bf16
    distance then of the global index among ties, bf16 code vector psum'd
    from its owner. Bugs: the index without the offset, the code vector
    from rank 0's all_gather'd pick.
GSPMD pairs (jax.jit with in/out shardings): 14. cosine VQ with codebook
rows over tp and batch over dp; 15. FSQ loss gradient under dp4; 16.
multi-head EMA update with heads over tp, batch over dp; 17. PQ k-means
with data over dp and subspaces over tp; 18. the VQ-VAE + EMA training step
of 10. with the batch over dp.
Numerics: every correct pair agrees with its baseline at rounding level
(max_abs_diff <= 6e-7, several exactly 0); every bug variant differs
clearly (smallest: total-psummed-over-dp, 1.2e-3, as the Laplace eps is
1e-3). Exported with scalify_jax.export_pair; every pair is also run by JAX
on seeded inputs and its manifest entry records the largest difference
from the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh116.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402,F401

SCRIPT = "samples/gen/fresh116.py"
C = Corpus("samples/fresh116", SCRIPT, "samples/gen/run_fresh116.sh", sys.argv[1:])
rng, R, I = seeded(11616)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
sg = lax.stop_gradient


def l2n(x, eps=1e-6):
    return x / jnp.sqrt(jnp.sum(x * x, -1, keepdims=True) + eps)


def sqd(z, cb):
    """squared distances (n, k) of rows z (n, d) to codes cb (k, d)."""
    return jnp.sum(z * z, -1, keepdims=True) - 2.0 * z @ cb.T + jnp.sum(cb * cb, -1)[None]


# ---------------------------------------------------------------------------
# 1. cosine-similarity VQ (ViT-VQGAN), codebook rows over tp4, batch over dp2
B1, D1, K1 = 8, 8, 16


def cos_vq(z, cb):
    zn, cn = l2n(z), l2n(cb)
    sim = zn @ cn.T
    i = jnp.argmax(sim, -1)
    q = cn[i]
    commit = jnp.mean(jnp.square(zn - sg(q)))
    return i, zn + sg(q - zn), commit


def cos_vq_tp(bug):
    def f(z, cb):
        kl = cb.shape[0]
        me = idx("tp")
        zn, cn = l2n(z), l2n(cb)
        sim = zn @ cn.T
        li = jnp.argmax(sim, -1)
        lm = jnp.max(sim, -1)
        gi = li if bug == "no-offset" else li + me * kl
        allm = lax.all_gather(lm, "tp")  # (tp, n)
        alli = lax.all_gather(gi, "tp")
        w = jnp.argmin(allm, 0) if bug == "winner-by-argmin" else jnp.argmax(allm, 0)
        i = jnp.take_along_axis(alli, w[None], 0)[0]
        mine = cn[li]
        if bug == "no-owner-mask":
            q = psum(mine, "tp")
        else:
            q = psum(jnp.where((w == me)[:, None], mine, 0.0), "tp")
        commit = pmean(jnp.mean(jnp.square(zn - sg(q))), "dp")
        return i, zn + sg(q - zn), commit
    return f


Z1, CB1 = R(B1, D1), R(K1, D1)
C.smap("s.cosine_vq_gather_winner.dp2xtp4", {"dp": 2, "tp": 4}, cos_vq_tp, (P("dp"), P("tp")),
       (P("dp"), P("dp"), P()), cos_vq, (Z1, CB1),
       bugs=[("no-offset", ["wrong-offset"]), ("winner-by-argmin", ["wrong-collective-op"]),
             ("no-owner-mask", ["missing-mask"])])

# ---------------------------------------------------------------------------
# 2. SimVQ: codebook = basis @ W, W's output columns over tp4
B2, L2, D2, K2 = 8, 6, 16, 12


def simvq(z, basis, w):
    cb = basis @ w
    d = sqd(z, cb)
    i = jnp.argmin(d, -1)
    q = cb[i]
    loss = jnp.mean(jnp.square(q - sg(z)))
    return i, z + sg(q - z), loss


def simvq_tp(bug):
    def f(z, basis, w):
        cb = basis @ w  # (k, d/tp)
        cross = -2.0 * z @ cb.T
        zz = jnp.sum(z * z, -1, keepdims=True)
        cc = jnp.sum(cb * cb, -1)[None]
        if bug == "distance-local":
            d = zz + cross + cc
        elif bug == "cross-term-only-psummed":
            d = psum(zz + cross, "tp") + cc
        else:
            d = psum(zz + cross + cc, "tp")
        i = jnp.argmin(d, -1)
        q = cb[i]
        se = jnp.sum(jnp.square(q - sg(z)))
        if bug == "loss-local-dim-count":
            loss = pmean(psum(se, "tp") / (z.shape[0] * z.shape[1]), "dp")
        else:
            loss = pmean(psum(se, "tp") / (z.shape[0] * z.shape[1] * 4), "dp")
        return i, z + sg(q - z), loss
    return f


C.smap("s.simvq_projected_codebook_feature_tp.dp2xtp4", {"dp": 2, "tp": 4}, simvq_tp,
       (P("dp", "tp"), P(), P(None, "tp")), (P("dp"), P("dp", "tp"), P()), simvq,
       (R(B2, D2), R(K2, L2), R(L2, D2, scale=0.5)),
       bugs=[("distance-local", ["missing-collective"]), ("cross-term-only-psummed", ["missing-collective"]),
             ("loss-local-dim-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 3. multi-head VQ, per-head EMA codebooks, heads over tp2, batch over dp4
B3, H3, D3, K3 = 16, 4, 4, 8
DECAY, EPS = 0.9, 1e-3


def mh_ema(z, cb, n, s):
    d = jnp.einsum("bhd,hkd->bhk", z, cb)
    d = jnp.sum(z * z, -1)[..., None] - 2 * d + jnp.sum(cb * cb, -1)[None]
    oh = jax.nn.one_hot(jnp.argmin(d, -1), K3)  # (b, h, k)
    cnt = oh.sum(0)
    sums = jnp.einsum("bhk,bhd->hkd", oh, z)
    n = DECAY * n + (1 - DECAY) * cnt
    s = DECAY * s + (1 - DECAY) * sums
    tot = n.sum(-1, keepdims=True)
    ns = (n + EPS) / (tot + K3 * EPS) * tot
    return s / ns[..., None], n, s


def mh_ema_sh(bug):
    def f(z, cb, n, s):
        d = jnp.einsum("bhd,hkd->bhk", z, cb)
        d = jnp.sum(z * z, -1)[..., None] - 2 * d + jnp.sum(cb * cb, -1)[None]
        oh = jax.nn.one_hot(jnp.argmin(d, -1), K3)
        ax = "tp" if bug == "counts-over-tp" else "dp"
        cnt = psum(oh.sum(0), ax)
        sums = psum(jnp.einsum("bhk,bhd->hkd", oh, z), "dp")
        if bug == "decay-swapped":
            n = (1 - DECAY) * n + DECAY * cnt
        else:
            n = DECAY * n + (1 - DECAY) * cnt
        s = DECAY * s + (1 - DECAY) * sums
        tot = n.sum(-1, keepdims=True)
        if bug == "total-psummed-over-dp":
            tot = psum(tot, "dp")
        ns = (n + EPS) / (tot + K3 * EPS) * tot
        return s / ns[..., None], n, s
    return f


N3 = np.abs(R(H3, K3)) + 0.5
C.smap("s.multihead_ema_codebooks.dp4xtp2", {"dp": 4, "tp": 2}, mh_ema_sh,
       (P("dp", "tp"), P("tp"), P("tp"), P("tp")), (P("tp"), P("tp"), P("tp")), mh_ema,
       (R(B3, H3, D3), R(H3, K3, D3), N3, R(H3, K3, D3) * N3[..., None]),
       bugs=[("counts-over-tp", ["wrong-axis"]), ("total-psummed-over-dp", ["wrong-scale"]),
             ("decay-swapped", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 4. residual VQ, one stage per device on "st" (dp2 x st4)
B4, D4, K4, S4 = 8, 6, 8, 4


def nearest(r, cb):
    i = jnp.argmin(sqd(r, cb), -1)
    return i, cb[i]


def rvq(x, cbs):
    r = x
    codes, loss = [], 0.0
    for s in range(S4):
        i, q = nearest(r, cbs[s])
        loss = loss + jnp.mean(jnp.square(r - q))
        codes.append(i)
        r = r - q
    return x - r, jnp.stack(codes, 1), loss


def rvq_st(bug):
    def f(x, cb):
        me = idx("st")
        cb = cb[0]
        r = x
        codes, loss = [], 0.0
        for s in range(S4):
            i, q = nearest(r, cb)
            own = me == (S4 - 1 - s if bug == "stage-mask-reversed" else s)
            if bug == "unmasked-psum":
                q = psum(q, "st")
            else:
                q = psum(jnp.where(own, q, 0.0), "st")
            i = psum(jnp.where(own, i, 0), "st")
            loss = loss + jnp.mean(jnp.square(r - q))
            codes.append(i)
            r = r - q
        if bug != "loss-not-pmeaned":
            loss = pmean(loss, "dp")
        return x - r, jnp.stack(codes, 1), loss
    return f


C.smap("s.rvq_stage_per_device.dp2xst4", {"dp": 2, "st": 4}, rvq_st, (P("dp"), P("st")), (P("dp"), P("dp"), P()),
       rvq, (R(B4, D4), R(S4, K4, D4) * np.array([1.0, 0.5, 0.25, 0.125], np.float32)[:, None, None]),
       bugs=[("stage-mask-reversed", ["wrong-offset"]), ("unmasked-psum", ["missing-mask"]),
             ("loss-not-pmeaned", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 5. FSQ with straight-through rounding, batch over dp4
LEV = np.array([5, 4, 3])
NC5 = int(np.prod(LEV))


def fsq(z, ste=True):
    eps = 1e-3
    half_l = (LEV - 1) * (1 + eps) / 2
    offset = np.where(LEV % 2 == 0, 0.5, 0.0)
    shift = np.arctanh(offset / half_l)
    b = jnp.tanh(z + shift) * half_l - offset
    r = jnp.round(b)
    q = b + sg(r - b) if ste else r
    hw = LEV // 2
    qn = q / hw
    basis = np.concatenate([[1], np.cumprod(LEV[:-1])])
    code = jnp.sum((jnp.round(qn * hw) + hw) * basis, -1).astype(jnp.int32)
    return qn, code


def fsq_loss(params, x, ste=True):
    z = x @ params["enc"]
    qn, code = fsq(z, ste)
    y = qn @ params["dec"]
    return jnp.mean(jnp.square(y - x)), code


def perplexity(hist):
    p = hist / jnp.sum(hist)
    return jnp.exp(-jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0)))


def fsq_step(params, x):
    (l, code), g = jax.value_and_grad(fsq_loss, has_aux=True)(params, x)
    hist = jnp.sum(jax.nn.one_hot(code, NC5), 0)
    return l, g, perplexity(hist)


def fsq_dp(bug):
    def f(params, x):
        (l, code), g = jax.value_and_grad(fsq_loss, has_aux=True)(params, x, bug != "round-no-ste")
        g = jax.tree.map(lambda a: psum(a, "dp") if bug == "grads-psum" else pmean(a, "dp"), g)
        hist = jnp.sum(jax.nn.one_hot(code, NC5), 0)
        if bug == "perplexity-local":
            ppl = pmean(perplexity(hist), "dp")
        else:
            ppl = perplexity(psum(hist, "dp"))
        return pmean(l, "dp"), g, ppl
    return f


P5 = {"enc": R(12, 3, scale=0.6), "dec": R(3, 12, scale=0.5)}
C.smap("s.fsq_ste_grad_perplexity.dp4", {"dp": 4}, fsq_dp, (P(), P("dp")), (P(), P(), P()), fsq_step,
       (P5, R(32, 12)),
       bugs=[("grads-psum", ["wrong-scale"]), ("perplexity-local", ["wrong-collective-op"]),
             ("round-no-ste", ["wrong-gradient"])])

# ---------------------------------------------------------------------------
# 6. Gumbel-softmax with per-device keys (fold_in of the dp index), dp4 x tp2
B6, DIN6, K6, D6, NDP6 = 16, 8, 8, 8, 4
TAU = 0.7


def gumbel_q(x, w, cb, g):
    logits = x @ w
    y = jax.nn.softmax((logits + g) / TAU, -1)
    hard = jax.nn.one_hot(jnp.argmax(y, -1), K6)
    hard = hard + y - sg(y)
    zq = hard @ cb
    pm = jnp.mean(jax.nn.softmax(logits, -1), 0)
    kl = jnp.sum(pm * jnp.log(pm * K6))
    return zq, kl


def gumbel_ref(x, w, cb, key):
    nb = B6 // NDP6
    g = jnp.concatenate([jax.random.gumbel(jax.random.fold_in(key, i), (nb, K6)) for i in range(NDP6)], 0)
    return gumbel_q(x, w, cb, g)


def gumbel_sh(bug):
    def f(x, w, cb, key):
        if bug == "fold-tp-index":
            k = jax.random.fold_in(key, idx("tp"))
        elif bug == "fold-linear-device-id":
            k = jax.random.fold_in(key, idx("dp") * 2 + idx("tp"))
        else:
            k = jax.random.fold_in(key, idx("dp"))
        g = jax.random.gumbel(k, (x.shape[0], K6))
        logits = x @ w
        y = jax.nn.softmax((logits + g) / TAU, -1)
        hard = jax.nn.one_hot(jnp.argmax(y, -1), K6)
        hard = hard + y - sg(y)
        zq = hard @ cb
        if bug == "kl-of-local-means":
            pm = jnp.mean(jax.nn.softmax(logits, -1), 0)
            kl = psum(jnp.sum(pm * jnp.log(pm * K6)), "dp")
        else:
            pm = pmean(jnp.mean(jax.nn.softmax(logits, -1), 0), "dp")
            kl = jnp.sum(pm * jnp.log(pm * K6))
        return zq, kl
    return f


C.smap("s.gumbel_softmax_per_device_keys.dp4xtp2", {"dp": 4, "tp": 2}, gumbel_sh,
       (P("dp"), P(), P(None, "tp"), P()), (P("dp", "tp"), P()), gumbel_ref,
       (R(B6, DIN6), R(DIN6, K6), R(K6, D6), np.asarray(jax.random.key_data(jax.random.PRNGKey(7)))),
       bugs=[("fold-tp-index", ["wrong-axis"]), ("fold-linear-device-id", ["wrong-offset"]),
             ("kl-of-local-means", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 7. lookup-free quantisation, full softmax over the 64 codes, dims over tp2
B7, D7 = 16, 6
CODES7 = np.array([[(c >> i) & 1 for i in range(D7)] for c in range(2 ** D7)], np.float32) * 2 - 1
INV_T = 2.0


def ent(p):
    return -jnp.sum(p * jnp.log(p + 1e-9), -1)


def lfq(z):
    q = jnp.where(z > 0, 1.0, -1.0)
    q = z + sg(q - z)
    code = jnp.sum((z > 0).astype(jnp.int32) * (2 ** jnp.arange(D7)), -1)
    p = jax.nn.softmax(INV_T * 2.0 * z @ CODES7.T, -1)
    loss = jnp.mean(ent(p)) - ent(jnp.mean(p, 0))
    return q, code, loss


def lfq_sh(bug):
    def f(z):
        dl = z.shape[1]
        off = idx("tp") * dl
        q = jnp.where(z > 0, 1.0, -1.0)
        q = z + sg(q - z)
        dims = jnp.arange(dl) if bug == "bit-weights-local" else off + jnp.arange(dl)
        code = psum(jnp.sum((z > 0).astype(jnp.int32) * (2 ** dims), -1), "tp")
        cl = lax.dynamic_slice_in_dim(jnp.asarray(CODES7), off, dl, 1)
        lg = INV_T * 2.0 * z @ cl.T
        if bug != "logits-not-psummed":
            lg = psum(lg, "tp")
        p = jax.nn.softmax(lg, -1)
        pm = jnp.mean(p, 0) if bug == "batch-mean-local" else pmean(jnp.mean(p, 0), "dp")
        loss = pmean(jnp.mean(ent(p)), "dp") - ent(pm)
        if bug == "batch-mean-local":
            loss = pmean(loss, "dp")
        return q, code, loss
    return f


C.smap("s.lfq_full_code_softmax_entropy.dp4xtp2", {"dp": 4, "tp": 2}, lfq_sh, (P("dp", "tp"),),
       (P("dp", "tp"), P("dp"), P()), lfq, (R(B7, D7, scale=0.7),),
       bugs=[("batch-mean-local", ["missing-collective"]), ("bit-weights-local", ["wrong-offset"]),
             ("logits-not-psummed", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 8. product-quantisation k-means, rows over dp4, subspaces over tp2
N8, M8, DS8, K8, IT8 = 32, 4, 3, 4, 3


def lloyd_step(xs, c):
    """xs (n, m, ds), c (m, k, ds) -> sums (m, k, ds), counts (m, k), min dist (n, m)."""
    d = jnp.sum(jnp.square(xs[:, :, None] - c[None]), -1)  # (n, m, k)
    oh = jax.nn.one_hot(jnp.argmin(d, -1), c.shape[1])
    return jnp.einsum("nmk,nmd->mkd", oh, xs), oh.sum(0), d.min(-1)


def pq_kmeans(x, c):
    xs = x.reshape(x.shape[0], M8, DS8)

    def body(_, c):
        s, n, _d = lloyd_step(xs, c)
        return jnp.where(n[..., None] > 0, s / jnp.maximum(n, 1)[..., None], c)
    c = lax.fori_loop(0, IT8, body, c)
    _, _, dm = lloyd_step(xs, c)
    return c, jnp.mean(jnp.sum(dm, 1))


def pq_kmeans_sh(bug):
    def f(x, c):
        xs = x.reshape(x.shape[0], c.shape[0], DS8)

        def body(_, c):
            s, n, _d = lloyd_step(xs, c)
            if bug == "pmean-of-local-means":
                m = pmean(s / jnp.maximum(n, 1)[..., None], "dp")
                n = psum(n, "dp")
                return jnp.where(n[..., None] > 0, m, c)
            s = psum(s, "dp")
            if bug != "counts-local":
                n = psum(n, "dp")
            return jnp.where(n[..., None] > 0, s / jnp.maximum(n, 1)[..., None], c)
        c = lax.fori_loop(0, IT8, body, c)
        _, _, dm = lloyd_step(xs, c)
        tot = jnp.sum(dm, 1)
        if bug != "distortion-not-psummed-tp":
            tot = psum(tot, "tp")
        return c, pmean(jnp.mean(tot), "dp")
    return f


C.smap("s.pq_kmeans_lloyd_fori.dp4xtp2", {"dp": 4, "tp": 2}, pq_kmeans_sh, (P("dp", "tp"), P("tp")),
       (P("tp"), P()), pq_kmeans, (R(N8, M8 * DS8), R(M8, K8, DS8)),
       bugs=[("counts-local", ["missing-collective"]), ("pmean-of-local-means", ["wrong-collective-op"]),
             ("distortion-not-psummed-tp", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 9. top-2 soft codes over a codebook with rows over tp4, tokens over sp2
B9, T9, D9, K9, TT9 = 2, 8, 6, 16, 0.5


def top2_soft(z, cb):
    d = jnp.sum(jnp.square(z[..., None, :] - cb), -1)  # (b, t, k)
    v, i = lax.top_k(-d, 2)
    w = jax.nn.softmax(v / TT9, -1)
    return i, jnp.einsum("btj,btjd->btd", w, cb[i])


def top2_sh(bug):
    def f(z, cb):
        kl = cb.shape[0]
        d = jnp.sum(jnp.square(z[..., None, :] - cb), -1)
        v, li = lax.top_k(-d, 2)
        vec = cb[li]  # (b, t, 2, d)
        gi = li if bug == "no-offset" else li + idx("tp") * kl
        av = lax.all_gather(v, "tp", axis=2, tiled=True)  # (b, t, 2*tp)
        ai = lax.all_gather(gi, "tp", axis=2, tiled=True)
        avec = lax.all_gather(vec, "tp", axis=2, tiled=True)
        v2, j = lax.top_k(av, 2)
        i = jnp.take_along_axis(ai, j, -1)
        if bug == "vectors-from-local":
            sel = vec
        else:
            sel = jnp.take_along_axis(avec, j[..., None], 2)
        w = jax.nn.softmax(v2 / TT9, -1)
        return i, jnp.einsum("btj,btjd->btd", w, sel)
    return f


C.smap("s.top2_soft_codes_sharded_codebook.sp2xtp4", {"sp": 2, "tp": 4}, top2_sh, (P(None, "sp"), P("tp")),
       (P(None, "sp"), P(None, "sp")), top2_soft, (R(B9, T9, D9), R(K9, D9)),
       bugs=[("no-offset", ["wrong-offset"]), ("vectors-from-local", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 10. VQ-VAE training step: optax.adamw on encoder / decoder, EMA codebook;
#     batch over dp2, tokens over sp2
B10, T10, DIN10, D10, K10, BETA = 4, 8, 10, 4, 8, 0.25
OPT10 = optax.adamw(1e-2, weight_decay=1e-3)


def vq_loss(p, x, cb):
    z = jnp.einsum("btc,cd->btd", x, p["enc"])
    i = jnp.argmin(jnp.sum(jnp.square(z[..., None, :] - cb), -1), -1)
    q = cb[i]
    zq = z + sg(q - z)
    y = jnp.tanh(jnp.einsum("btd,dc->btc", zq, p["dec"]))
    loss = jnp.mean(jnp.square(y - x)) + BETA * jnp.mean(jnp.square(z - sg(q)))
    return loss, (z, i)


def ema_update(cb, n, s, cnt, sums):
    n = DECAY * n + (1 - DECAY) * cnt
    s = DECAY * s + (1 - DECAY) * sums
    tot = n.sum()
    ns = (n + EPS) / (tot + K10 * EPS) * tot
    return s / ns[:, None], n, s


def vq_train(p, st, cb, n, s, x):
    (l, (z, i)), g = jax.value_and_grad(vq_loss, has_aux=True)(p, x, cb)
    u, st = OPT10.update(g, st, p)
    p = optax.apply_updates(p, u)
    oh = jax.nn.one_hot(i, K10).reshape(-1, K10)
    cb, n, s = ema_update(cb, n, s, oh.sum(0), oh.T @ z.reshape(-1, D10))
    return p, st, cb, n, s, l


def vq_train_sh(bug):
    def f(p, st, cb, n, s, x):
        (l, (z, i)), g = jax.value_and_grad(vq_loss, has_aux=True)(p, x, cb)
        g = pmean(g, "dp" if bug == "grads-pmean-dp-only" else ("dp", "sp"))
        u, st = OPT10.update(g, st, p)
        p = optax.apply_updates(p, u)
        oh = jax.nn.one_hot(i, K10).reshape(-1, K10)
        cnt = psum(oh.sum(0), ("dp", "sp"))
        sums = oh.T @ z.reshape(-1, D10)
        if bug != "ema-sums-local":
            sums = psum(sums, ("dp", "sp"))
        cb, n, s = ema_update(cb, n, s, cnt, sums)
        l = psum(l, ("dp", "sp")) if bug == "loss-psum" else pmean(l, ("dp", "sp"))
        return p, st, cb, n, s, l
    return f


P10 = {"enc": R(DIN10, D10, scale=0.5), "dec": R(D10, DIN10, scale=0.5)}
S10 = jax.tree.map(np.asarray, OPT10.init(P10))
N10 = np.abs(R(K10)) + 1.0
CB10 = R(K10, D10)
X10 = R(B10, T10, DIN10)
SPEC_ST10 = jax.tree.map(lambda _: P(), S10)
C.smap("s.vqvae_adamw_ema_step.dp2xsp2", {"dp": 2, "sp": 2}, vq_train_sh,
       ({"enc": P(), "dec": P()}, SPEC_ST10, P(), P(), P(), P("dp", "sp")),
       ({"enc": P(), "dec": P()}, SPEC_ST10, P(), P(), P(), P()), vq_train,
       (P10, S10, CB10, N10, CB10 * N10[:, None], X10),
       bugs=[("grads-pmean-dp-only", ["wrong-axis"]), ("ema-sums-local", ["missing-collective"]),
             ("loss-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 11. masked codebook usage metrics on dp2 x sp4
B11, T11, D11, K11 = 4, 16, 4, 12


def usage(z, cb, mask):
    d = jnp.sum(jnp.square(z[..., None, :] - cb), -1)
    i = jnp.argmin(d, -1)
    m = mask.astype(jnp.float32)
    hist = jnp.einsum("btk,bt->k", jax.nn.one_hot(i, K11), m)
    ppl = perplexity(hist)
    dead = jnp.mean((hist == 0).astype(jnp.float32))
    err = jnp.sum(jnp.min(d, -1) * m) / jnp.sum(m)
    return hist, ppl, dead, err


def usage_sh(bug):
    def f(z, cb, mask):
        d = jnp.sum(jnp.square(z[..., None, :] - cb), -1)
        i = jnp.argmin(d, -1)
        m = mask.astype(jnp.float32)
        lh = jnp.einsum("btk,bt->k", jax.nn.one_hot(i, K11), m)
        hist = psum(lh, "sp" if bug == "hist-psum-sp-only" else ("dp", "sp"))
        ppl = perplexity(hist)
        if bug == "dead-from-local-counts":
            dead = pmean(jnp.mean((lh == 0).astype(jnp.float32)), ("dp", "sp"))
        else:
            dead = jnp.mean((hist == 0).astype(jnp.float32))
        num = psum(jnp.sum(jnp.min(d, -1) * m), ("dp", "sp"))
        den = float(B11 * T11) if bug == "error-over-all-tokens" else psum(jnp.sum(m), ("dp", "sp"))
        return hist, ppl, dead, num / den
    return f


MASK11 = np.ones((B11, T11), bool)
for r_, L_ in enumerate([16, 11, 6, 13]):
    MASK11[r_, L_:] = False
C.smap("s.masked_usage_perplexity_dead.dp2xsp4", {"dp": 2, "sp": 4}, usage_sh,
       (P("dp", "sp"), P(), P("dp", "sp")), (P(), P(), P(), P()), usage,
       (R(B11, T11, D11), R(K11, D11, scale=1.5), MASK11),
       bugs=[("hist-psum-sp-only", ["wrong-axis"]), ("error-over-all-tokens", ["wrong-scale"]),
             ("dead-from-local-counts", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 12. codebook + commitment loss gradients with the codebook rows over tp4,
#     batch over dp2 (check_vma=True): owner-masked code vector psum'd over
#     tp, value_and_grad in the body; the codebook gradient comes back
#     summed over dp by itself (cb is dp-invariant under check_vma).
B12, D12, K12, BETA12 = 8, 6, 16, 0.25


def cb_losses(z, cb):
    i = jnp.argmin(sqd(z, cb), -1)
    q = cb[i]
    return jnp.mean(jnp.sum(jnp.square(sg(z) - q), -1)) + BETA12 * jnp.mean(jnp.sum(jnp.square(z - sg(q)), -1))


def cb_grads(z, cb):
    return jax.value_and_grad(cb_losses, argnums=(0, 1))(z, cb)


def cb_grads_sh(bug):
    def f(z, cb):
        kl, me = cb.shape[0], idx("tp")

        def loss(z, cb):
            d = sqd(z, cb)
            lm = jnp.min(d, -1)
            gm = pmin_(sg(lm))
            li = jnp.argmin(d, -1)
            cand = jnp.where(lm == gm, li + me * kl, K12)
            gi = lax.pmin(cand, "tp")
            own = (gi >= me * kl) & (gi < (me + 1) * kl)
            q = psum(jnp.where(own[:, None], cb[jnp.clip(gi - me * kl, 0, kl - 1)], 0.0), "tp")
            n = z.shape[0] if bug == "local-count-normaliser" else B12
            qc = q if bug == "commit-without-sg" else sg(q)
            return (jnp.sum(jnp.square(sg(z) - q)) + BETA12 * jnp.sum(jnp.square(z - qc))) / n

        l, (gz, gcb) = jax.value_and_grad(loss, argnums=(0, 1))(z, cb)
        # cb is dp-invariant: under check_vma its gradient comes back already summed over dp
        if bug == "cb-grad-psummed-again":
            gcb = psum(gcb, "dp")
        return psum(l, "dp"), (gz, gcb)
    return f


def pmin_(x):
    return lax.pmin(x, "tp")


C.smap("s.codebook_commit_grads_owner_mask.dp2xtp4", {"dp": 2, "tp": 4}, cb_grads_sh, (P("dp"), P("tp")),
       (P(), (P("dp"), P("tp"))), cb_grads, (R(B12, D12), R(K12, D12)), check_vma=True,
       bugs=[("local-count-normaliser", ["wrong-scale"]), ("cb-grad-psummed-again", ["wrong-scale"]),
             ("commit-without-sg", ["wrong-gradient"])])

# ---------------------------------------------------------------------------
# 13. bf16 nearest code by pmin of (distance, then index among ties),
#     codebook rows over tp8, the code vectors in bf16 psum'd from the owner.
B13, D13, K13 = 16, 8, 32


def bf16_vq(z, cb):
    z, cb = z.astype(jnp.bfloat16), cb.astype(jnp.bfloat16)
    d = jnp.sum(jnp.square(z[:, None] - cb[None]), -1)
    i = jnp.argmin(d, -1)
    return i, cb[i]


def bf16_vq_sh(bug):
    def f(z, cb):
        kl, me = cb.shape[0], idx("tp")
        z, cb = z.astype(jnp.bfloat16), cb.astype(jnp.bfloat16)
        d = jnp.sum(jnp.square(z[:, None] - cb[None]), -1)
        li = jnp.argmin(d, -1)
        lm = jnp.min(d, -1)
        gm = lax.pmin(lm, "tp")
        off = 0 if bug == "no-offset" else me * kl
        i = lax.pmin(jnp.where(lm == gm, li + off, K13), "tp")
        if bug == "vector-from-rank0":
            v = lax.all_gather(cb[li], "tp")[0]
        else:
            mine = (i >= me * kl) & (i < me * kl + kl)
            v = psum(jnp.where(mine[:, None], cb[li], jnp.zeros_like(cb[li])), "tp")
        return i, v
    return f


C.smap("s.bf16_pmin_lexicographic_lookup.tp8", {"tp": 8}, bf16_vq_sh, (P(), P("tp")), (P(), P()), bf16_vq,
       (R(B13, D13), R(K13, D13, scale=0.7)),
       bugs=[("no-offset", ["wrong-offset"]), ("vector-from-rank0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# GSPMD pairs
C.gspmd("g.cosine_vq_codebook_rows_tp.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P("tp")), (P("dp"), P("dp"), P()),
        cos_vq, (Z1, CB1))
C.gspmd("g.fsq_loss_grad.dp4", {"dp": 4}, ({"enc": P(), "dec": P()}, P("dp")), (P(), P(), P()), fsq_step,
        (P5, R(32, 12)))
C.gspmd("g.multihead_ema_heads_tp.dp4xtp2", {"dp": 4, "tp": 2}, (P("dp", "tp"), P("tp"), P("tp"), P("tp")),
        (P("tp"), P("tp"), P("tp")), mh_ema, (R(B3, H3, D3), R(H3, K3, D3), N3, R(H3, K3, D3) * N3[..., None]))
C.gspmd("g.pq_kmeans_rows_dp_sub_tp.dp4xtp2", {"dp": 4, "tp": 2}, (P("dp", "tp"), P("tp")), (P("tp"), P()),
        pq_kmeans, (R(N8, M8 * DS8), R(M8, K8, DS8)))
C.gspmd("g.vqvae_adamw_ema_step.dp4", {"dp": 4},
        ({"enc": P(), "dec": P()}, SPEC_ST10, P(), P(), P(), P("dp")),
        ({"enc": P(), "dec": P()}, SPEC_ST10, P(), P(), P(), P()), vq_train,
        (P10, S10, CB10, N10, CB10 * N10[:, None], X10))

C.finish()
