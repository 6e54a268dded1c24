"""samples/fresh73: a 73rd batch of programs as a user writes them, on the theme of self-supervised objectives that need statistics of the global batch under data and tensor parallelism in current JAX (VICReg, Barlow Twins, SwAV Sinkhorn-Knopp, DINO centering, CLIP / SigLIP losses with sharded logits, MoCo queues, optax training steps), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. VICReg loss, batch over dp8: invariance MSE as a psum'd sum of squares,
    per-feature mean and unbiased variance over the global batch (psum'd
    sums / (N - 1)), hinge on the std, covariance zc^T zc psum'd over dp,
    off-diagonal squares / D. Bugs: per-device mean (centred by the local
    batch), covariance left un-reduced, biased variance (/ N).
 2. Barlow Twins, batch over dp and features over tp (dp2 x tp4): batch
    norm with psum'd moments, the second view's features all_gather'd over
    tp, the cross-correlation row block (D/tp, D) psum'd over dp, its
    diagonal at the rank's feature offset (take_along_axis), on- and
    off-diagonal terms psum'd over tp. Bugs: diagonal at offset 0, batch
    norm with local moments, correlation divided by the local batch size.
 3. SwAV: Sinkhorn-Knopp codes over the global batch (dp4), the scores
    shifted by the pmax'd global maximum before exp, the total and the
    per-prototype sums psum'd, 3 iterations in lax.fori_loop, swapped
    prediction loss pmean'd. Bugs: per-prototype sums not psum'd, shift
    by the local maximum, loss not averaged over dp.
 4. DINO loss with centering, batch over dp and prototypes over tp (dp2 x
    tp4): teacher softmax of (t - c) / tau_t with pmax / psum over tp,
    student log-softmax over tp, cross-entropy psum'd over both axes, the
    new centre an EMA of the teacher's batch mean psum'd over dp. Bugs:
    centre from the local batch, teacher denominator not psum'd, loss
    psum'd over tp only.
 5. CLIP loss with its gradient (jax.value_and_grad inside the body,
    check_vma=False), batch over dp4: the projections and a learnt logit
    scale replicated, the other modality's normalised embeddings
    all_gather'd (tiled), labels at the global row offset, both directions
    from row blocks, gradients psum'd over dp. Bugs: labels without the
    device offset, the text-to-image logits taken equal to the
    image-to-text ones, gradients not reduced.
 6. CLIP loss with the logits in 2-D blocks (images by rows over dp, texts
    by columns over tp, dp2 x tp4): row log-sum-exp by pmax / psum over
    tp, column log-sum-exp over dp, positives where the global row and
    column indices meet. Bugs: column log-sum-exp over tp, positives
    without the row offset, row maximum not pmax'd.
 7. SigLIP sigmoid loss, batch over dp4, text chunks passed around a
    ppermute ring (unrolled Python loop), positives only on the own chunk.
    Bugs: positives on every chunk, ring one step short, a non-cyclic
    permutation (device 0 receives zeros).
 8. SigLIP training step: projections, log temperature and bias
    replicated, the sigmoid loss by a ppermute ring inside jax.grad
    (check_vma=False), gradients psum'd over dp4, optax.sgd with Nesterov
    momentum. Bugs: gradients pmean'd (scaled by 1/4), gradients not
    reduced.
 9. MoCo v2 InfoNCE with a queue of negatives and the queue update with the
    global batch of keys (all_gather tiled, dynamic_update_slice at the
    pointer), batch over dp4. Bugs: pointer advanced by the local batch,
    each device enqueues its own keys, loss not averaged.
10. VICReg projector training step under dp2 x tp4 (check_vma=True): a
    column-parallel / row-parallel MLP projector, the VICReg loss of 1. on
    its output with psum'd global-batch statistics inside jax.grad (the
    gradients' dp reduction done by the transpose), optax.sgd momentum.
    Bugs: denominators from the local batch size, the gradients psum'd
    over dp again.
11. VICReg variance / covariance terms accumulated over micro-batches in a
    lax.scan (bf16 features, f32 dot accumulation), the raw second moment
    and sum psum_scatter'ed / psum'd over dp4, the covariance row block
    from S - n mu mu^T, diagonal at the rank's offset. Bugs: each micro-batch
    centred by its own mean, the second moment not reduced (own rows
    sliced out of the local sum).
12. CLIP image-to-text loss with the text chunks streamed around a
    ppermute ring (receive from the right) and an online log-sum-exp merge
    (running maximum, rescaled running sum), positives from the own chunk,
    pmean'd (dp4). Bugs: running sum not rescaled, positives from the
    second chunk.
13. Barlow Twins by all_to_all (dp8): batch-sharded views all_to_all'd to
    feature shards holding the full batch, batch norm there with no
    collective, the other view all_gather'd over features, diagonal by
    advanced indexing at the rank's offset. Bugs: batch norm with local
    moments before the all_to_all, the other view not gathered (only the
    diagonal block).
14. DINO multi-crop (2 teacher crops, 4 student crops) with a teacher
    temperature warm-up read from an int32 step, all pairs by one einsum
    and a mask excluding same-view pairs, centre EMA pmean'd (dp8). Bugs:
    same-view pairs kept, centre from the local batch.
15. Sinkhorn-Knopp to a tolerance in lax.while_loop (the stopping test on
    psum'd prototype marginals, equal on every device), codes returned
    with the batch over dp4. Bug: the sample marginals normalised by the
    local batch size. (A "marginals not psum'd" variant was left out: the
    devices would run different trip counts around a collective.)
GSPMD pairs (jax.jit with in/out shardings, correct only): 16. VICReg loss
(dp8); 17. Barlow Twins loss (dp2 x tp4, features over tp); 18. SwAV
loss with Sinkhorn (dp4); 19. DINO loss and centre (dp2 x tp4, prototypes
over tp); 20. CLIP loss and its gradient (dp8); 21. SigLIP sgd training
step (dp4); 22. MoCo loss and queue update (dp4); 23. the DINO multi-crop
loss of 14. (dp8); 24. Sinkhorn to a tolerance (dp4); 25. CLIP
image-to-text loss with the logits constrained to rows over dp4.
Numerics: every correct pair agrees with its baseline at rounding level;
every bug variant differs clearly (see "numerics").
Run from the repository root: bash samples/gen/run_fresh73.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh73.sh)
from fresh_lib import Corpus, seeded  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402

SCRIPT = "samples/gen/fresh73.py"
C = Corpus("samples/fresh73", SCRIPT, "samples/gen/run_fresh73.sh", sys.argv[1:])
rng, R, I = seeded(7373)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index


def l2n(x, eps=1e-6):
    return x * lax.rsqrt(jnp.sum(x * x, -1, keepdims=True) + eps)


# ---------------------------------------------------------------------------
# 1. VICReg, batch over dp8.
N1, D1 = 32, 16


def vicreg(za, zb, lam=25.0, mu=25.0, nu=1.0):
    n, d = za.shape
    inv = jnp.mean(jnp.square(za - zb))

    def terms(z):
        zc = z - z.mean(0)
        std = jnp.sqrt(jnp.sum(zc * zc, 0) / (n - 1) + 1e-4)
        cov = zc.T @ zc / (n - 1)
        off = cov - jnp.diag(jnp.diag(cov))
        return jnp.mean(jax.nn.relu(1.0 - std)), jnp.sum(off ** 2) / d
    va, ca = terms(za)
    vb, cb = terms(zb)
    return lam * inv + mu * (va + vb) / 2 + nu * (ca + cb)


def vicreg_dp(bug):
    def f(za, zb):
        nl, d = za.shape
        n = nl * 8
        inv = psum(jnp.sum(jnp.square(za - zb)), "dp") / (n * d)

        def terms(z):
            m = jnp.mean(z, 0) if bug == "local-mean" else psum(jnp.sum(z, 0), "dp") / n
            zc = z - m
            ss = psum(jnp.sum(zc * zc, 0), "dp")
            var = ss / n if bug == "biased-variance" else ss / (n - 1)
            std = jnp.sqrt(var + 1e-4)
            cov = jnp.einsum("ni,nj->ij", zc, zc)
            if bug != "cov-not-reduced":
                cov = psum(cov, "dp")
            cov = cov / (n - 1)
            off = jnp.sum(cov ** 2) - jnp.sum(jnp.diagonal(cov) ** 2)
            return jnp.mean(jax.nn.relu(1.0 - std)), off / d
        va, ca = terms(za)
        vb, cb = terms(zb)
        return 25.0 * inv + 25.0 * (va + vb) / 2 + (ca + cb)
    return f


Z1a = R(N1, D1, scale=0.8)
Z1b = Z1a + R(N1, D1, scale=0.3)
C.smap("s.vicreg_loss_global_cov.dp8", {"dp": 8}, vicreg_dp, (P("dp"), P("dp")), P(), vicreg, (Z1a, Z1b),
       bugs=[("local-mean", ["missing-all-reduce"]), ("cov-not-reduced", ["missing-all-reduce"]),
             ("biased-variance", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 2. Barlow Twins, batch over dp, features over tp.
N2, D2, LAM2 = 16, 32, 0.05


def barlow(za, zb):
    def bn(z):
        return (z - z.mean(0)) / jnp.sqrt(z.var(0) + 1e-5)
    c = bn(za).T @ bn(zb) / za.shape[0]
    on = jnp.sum((jnp.diag(c) - 1.0) ** 2)
    off = jnp.sum(c ** 2) - jnp.sum(jnp.diag(c) ** 2)
    return on + LAM2 * off


def barlow_2d(bug):
    def f(za, zb):
        nl, dl = za.shape
        n = nl * 2

        def bn(z):
            if bug == "bn-local-moments":
                m = z.mean(0)
                zc = z - m
                v = jnp.mean(zc * zc, 0)
            else:
                m = psum(z.sum(0), "dp") / n
                zc = z - m
                v = psum(jnp.sum(zc * zc, 0), "dp") / n
            return zc * lax.rsqrt(v + 1e-5)
        a, b = bn(za), bn(zb)
        b_all = lax.all_gather(b, "tp", axis=1, tiled=True)          # (nl, D)
        c = psum(a.T @ b_all, "dp") / (nl if bug == "cc-local-batch" else n)   # (dl, D)
        off0 = 0 if bug == "diag-offset-0" else idx("tp") * dl
        diag = jnp.take_along_axis(c, (off0 + jnp.arange(dl))[:, None], axis=1)[:, 0]
        part = jnp.sum((diag - 1.0) ** 2) + LAM2 * (jnp.sum(c ** 2) - jnp.sum(diag ** 2))
        return psum(part, "tp")
    return f


Z2a = R(N2, D2)
Z2b = 0.7 * Z2a + R(N2, D2, scale=0.5)
C.smap("s.barlow_twins_feature_tp.dp2xtp4", {"dp": 2, "tp": 4}, barlow_2d, (P("dp", "tp"), P("dp", "tp")), P(),
       barlow, (Z2a, Z2b),
       bugs=[("diag-offset-0", ["wrong-offset"]), ("bn-local-moments", ["missing-all-reduce"]),
             ("cc-local-batch", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 3. SwAV: Sinkhorn-Knopp over the global batch (dp4).
B3, F3, K3, EPS3, TAU3 = 16, 8, 6, 0.05, 0.1


def sinkhorn(s, iters=3):
    q = jnp.exp((s - jnp.max(s)) / EPS3).T        # (K, B)
    q = q / jnp.sum(q)
    k, b = q.shape
    for _ in range(iters):
        q = q / jnp.sum(q, 1, keepdims=True) / k
        q = q / jnp.sum(q, 0, keepdims=True) / b
    return (q * b).T


def swav(x1, x2, w, protos):
    z1, z2 = l2n(x1 @ w), l2n(x2 @ w)
    cp = l2n(protos.T).T                          # (F, K)
    s1, s2 = z1 @ cp, z2 @ cp
    q1, q2 = sinkhorn(lax.stop_gradient(s1)), sinkhorn(lax.stop_gradient(s2))
    l1 = jnp.sum(q1 * jax.nn.log_softmax(s2 / TAU3, -1), -1)
    l2 = jnp.sum(q2 * jax.nn.log_softmax(s1 / TAU3, -1), -1)
    return -0.5 * jnp.mean(l1 + l2)


def swav_dp(bug):
    def sk(s):
        bl, k = s.shape
        b = bl * 4
        mx = jnp.max(s) if bug == "local-max-shift" else pmax(jnp.max(s), "dp")
        q = jnp.exp((s - mx) / EPS3).T
        q = q / psum(jnp.sum(q), "dp")

        def it(_, q):
            r = jnp.sum(q, 1, keepdims=True)
            if bug != "rows-not-reduced":
                r = psum(r, "dp")
            q = q / r / k
            return q / jnp.sum(q, 0, keepdims=True) / b
        q = lax.fori_loop(0, 3, it, q)
        return (q * b).T

    def f(x1, x2, w, protos):
        z1, z2 = l2n(x1 @ w), l2n(x2 @ w)
        cp = l2n(protos)
        s1, s2 = jnp.dot(z1, cp.T), jnp.dot(z2, cp.T)
        q1, q2 = sk(s1), sk(s2)
        l1 = jnp.sum(q1 * jax.nn.log_softmax(s2 / TAU3, -1), -1)
        l2 = jnp.sum(q2 * jax.nn.log_softmax(s1 / TAU3, -1), -1)
        loss = -0.5 * jnp.mean(l1 + l2)
        return loss if bug == "loss-not-averaged" else pmean(loss, "dp")
    return f


X3 = R(B3, 12)
A3 = (X3, X3 + R(B3, 12, scale=0.4), R(12, F3, scale=0.4), R(K3, F3))


def swav_ref(x1, x2, w, protos):  # protos (K, F) as the body takes them
    return swav(x1, x2, w, protos.T)


C.smap("s.swav_sinkhorn_global_codes.dp4", {"dp": 4}, swav_dp, (P("dp"), P("dp"), P(), P()), P(), swav_ref, A3,
       bugs=[("rows-not-reduced", ["missing-all-reduce"]), ("local-max-shift", ["wrong-collective-op"]),
             ("loss-not-averaged", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 4. DINO loss with centering; batch over dp, prototypes over tp.
B4, K4, TS4, TT4, M4 = 8, 32, 0.1, 0.04, 0.9


def dino(s, t, c):
    pt = jax.nn.softmax((t - c) / TT4, -1)
    ls = jax.nn.log_softmax(s / TS4, -1)
    loss = -jnp.mean(jnp.sum(pt * ls, -1))
    return loss, M4 * c + (1 - M4) * jnp.mean(t, 0)


def dino_2d(bug):
    def f(s, t, c):
        z = (t - c) / TT4
        e = jnp.exp(z - pmax(jnp.max(z, -1, keepdims=True), "tp"))
        den = jnp.sum(e, -1, keepdims=True)
        pt = e / (den if bug == "teacher-den-local" else psum(den, "tp"))
        u = s / TS4
        um = pmax(jnp.max(u, -1, keepdims=True), "tp")
        ls = u - um - jnp.log(psum(jnp.sum(jnp.exp(u - um), -1, keepdims=True), "tp"))
        part = -jnp.sum(pt * ls)
        loss = psum(part, "tp" if bug == "loss-psum-tp-only" else ("dp", "tp")) / B4
        tm = jnp.mean(t, 0) if bug == "center-local-batch" else psum(jnp.sum(t, 0), "dp") / B4
        return loss, M4 * c + (1 - M4) * tm
    return f


A4 = (R(B4, K4, scale=0.5), R(B4, K4, scale=0.1), R(K4, scale=0.05))
C.smap("s.dino_centering_protos_tp.dp2xtp4", {"dp": 2, "tp": 4}, dino_2d, (P("dp", "tp"), P("dp", "tp"), P("tp")),
       (P(), P("tp")), dino, A4,
       bugs=[("center-local-batch", ["missing-all-reduce"]), ("teacher-den-local", ["missing-all-reduce"]),
             ("loss-psum-tp-only", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 5. CLIP loss and gradient, rows over dp4, other side all_gather'd.
B5, DI5, DT5, E5 = 16, 12, 10, 8


def clip_loss(wi, wt, ls, xi, xt):
    zi, zt = l2n(xi @ wi), l2n(xt @ wt)
    lg = jnp.exp(ls) * zi @ zt.T
    lab = jnp.arange(xi.shape[0])
    a = optax.softmax_cross_entropy_with_integer_labels(lg, lab)
    b = optax.softmax_cross_entropy_with_integer_labels(lg.T, lab)
    return (jnp.mean(a) + jnp.mean(b)) / 2


def clip_vg(wi, wt, ls, xi, xt):
    return jax.value_and_grad(clip_loss, (0, 1, 2))(wi, wt, ls, xi, xt)


def clip_rows(bug):
    def local(wi, wt, ls, xi, xt):
        bl = xi.shape[0]
        zi, zt = l2n(xi @ wi), l2n(xt @ wt)
        zi_all = lax.all_gather(zi, "dp", tiled=True)
        zt_all = lax.all_gather(zt, "dp", tiled=True)
        s = jnp.exp(ls)
        li = s * jnp.einsum("id,jd->ij", zi, zt_all)
        lt = li if bug == "t2i-equals-i2t" else s * jnp.einsum("id,jd->ij", zt, zi_all)
        lab = jnp.arange(bl) + (0 if bug == "labels-no-offset" else idx("dp") * bl)
        a = jax.nn.logsumexp(li, -1) - jnp.take_along_axis(li, lab[:, None], 1)[:, 0]
        b = jax.nn.logsumexp(lt, -1) - jnp.take_along_axis(lt, lab[:, None], 1)[:, 0]
        return (jnp.sum(a) + jnp.sum(b)) / (2 * B5)

    def f(wi, wt, ls, xi, xt):
        v, g = jax.value_and_grad(local, (0, 1, 2))(wi, wt, ls, xi, xt)
        if bug != "grads-not-reduced":
            g = psum(g, "dp")
        return psum(v, "dp"), g
    return f


A5 = (R(DI5, E5, scale=0.4), R(DT5, E5, scale=0.4), np.float32(np.log(5.0)), R(B5, DI5), R(B5, DT5))
C.smap("s.clip_loss_grad_allgather_rows.dp4", {"dp": 4}, clip_rows, (P(), P(), P(), P("dp"), P("dp")),
       (P(), (P(), P(), P())), clip_vg, A5,
       bugs=[("labels-no-offset", ["wrong-offset"]), ("t2i-equals-i2t", ["wrong-operand"]),
             ("grads-not-reduced", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 6. CLIP loss with 2-D logit blocks: rows over dp, columns over tp.
B6, E6 = 16, 8


def clip_emb_loss(zi, zt, scale):
    lg = scale * zi @ zt.T
    d = jnp.diagonal(lg)
    return (jnp.sum(jax.nn.logsumexp(lg, 1)) + jnp.sum(jax.nn.logsumexp(lg, 0)) - 2 * jnp.sum(d)) / (2 * lg.shape[0])


def clip_blocks(bug):
    def f(zi, zt, scale):
        br, bc = zi.shape[0], zt.shape[0]
        lg = scale * lax.dot_general(zi, zt, (((1,), (1,)), ((), ())))      # (br, bc)
        rm = jnp.max(lg, 1, keepdims=True)
        if bug != "row-max-local":
            rm = pmax(rm, "tp")
        lse_r = rm[:, 0] + jnp.log(psum(jnp.sum(jnp.exp(lg - rm), 1), "tp"))
        cax = "tp" if bug == "col-lse-over-tp" else "dp"
        cm = pmax(jnp.max(lg, 0, keepdims=True), cax)
        lse_c = cm[0] + jnp.log(psum(jnp.sum(jnp.exp(lg - cm), 0), cax))
        r0 = 0 if bug == "pos-no-row-offset" else idx("dp") * br
        rows = r0 + jnp.arange(br)[:, None]
        cols = idx("tp") * bc + jnp.arange(bc)[None, :]
        pos = psum(jnp.sum(jnp.where(rows == cols, lg, 0.0)), ("dp", "tp"))
        tot = psum(jnp.sum(lse_r), "dp") + psum(jnp.sum(lse_c), "tp") - 2 * pos
        return tot / (2 * B6)
    return f


Z6 = l2n(R(B6, E6))
A6 = (Z6, l2n(Z6 + R(B6, E6, scale=0.5)), np.float32(8.0))
C.smap("s.clip_logit_blocks_rows_dp_cols_tp.dp2xtp4", {"dp": 2, "tp": 4}, clip_blocks, (P("dp"), P("tp"), P()), P(),
       clip_emb_loss, A6,
       bugs=[("col-lse-over-tp", ["wrong-collective-group"]), ("pos-no-row-offset", ["wrong-offset"]),
             ("row-max-local", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 7. SigLIP, text chunks around a ppermute ring (dp4).
B7, E7 = 16, 8


def siglip(zi, zt, t, b):
    lg = jnp.exp(t) * zi @ zt.T + b
    z = 2.0 * jnp.eye(zi.shape[0]) - 1.0
    return -jnp.sum(jax.nn.log_sigmoid(z * lg)) / zi.shape[0]


def siglip_ring(bug):
    def f(zi, zt, t, b):
        n, bl = 4, zi.shape[0]
        ring = [(i, i + 1) for i in range(n - 1)] if bug == "non-cyclic-perm" else [(i, (i + 1) % n) for i in range(n)]
        steps = n - 1 if bug == "ring-one-short" else n
        acc = jnp.zeros((), jnp.float32)
        for k in range(steps):
            lg = jnp.exp(t) * zi @ zt.T + b
            lab = 2.0 * jnp.eye(bl) - 1.0 if (k == 0 or bug == "positives-every-chunk") else -jnp.ones((bl, bl))
            acc = acc - jnp.sum(jax.nn.log_sigmoid(lab * lg))
            if k < steps - 1:
                zt = lax.ppermute(zt, "dp", ring)
        return psum(acc, "dp") / B7
    return f


Z7 = l2n(R(B7, E7))
A7 = (Z7, l2n(Z7 + R(B7, E7, scale=0.6)), np.float32(np.log(10.0)), np.float32(-3.0))
C.smap("s.siglip_ppermute_ring_chunks.dp4", {"dp": 4}, siglip_ring, (P("dp"), P("dp"), P(), P()), P(), siglip, A7,
       bugs=[("positives-every-chunk", ["wrong-value"]), ("ring-one-short", ["missing-collective"]),
             ("non-cyclic-perm", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 8. SigLIP training step: ring loss inside jax.grad, sgd Nesterov momentum.
B8, DI8, DT8, E8 = 16, 12, 10, 8
OPT8 = optax.sgd(0.5, momentum=0.9, nesterov=True)


def siglip_params(p, xi, xt):
    return siglip(l2n(xi @ p["wi"]), l2n(xt @ p["wt"]), p["t"], p["b"])


def siglip_step(p, s, xi, xt):
    v, g = jax.value_and_grad(siglip_params)(p, xi, xt)
    u, s = OPT8.update(g, s, p)
    return optax.apply_updates(p, u), s, v


def siglip_step_dp(bug):
    def local(p, xi, xt):
        n, bl = 4, xi.shape[0]
        zi, zt = l2n(xi @ p["wi"]), l2n(xt @ p["wt"])
        acc = 0.0
        for k in range(n):
            lg = jnp.exp(p["t"]) * zi @ zt.T + p["b"]
            lab = 2.0 * jnp.eye(bl) - 1.0 if k == 0 else -1.0
            acc = acc - jnp.sum(jax.nn.log_sigmoid(lab * lg))
            if k < n - 1:
                zt = lax.ppermute(zt, "dp", [(i, (i + 1) % n) for i in range(n)])
        return acc / B8

    def f(p, s, xi, xt):
        v, g = jax.value_and_grad(local)(p, xi, xt)
        if bug == "grads-pmean":
            g = pmean(g, "dp")
        elif bug != "grads-not-reduced":
            g = psum(g, "dp")
        u, s = OPT8.update(g, s, p)
        return optax.apply_updates(p, u), s, psum(v, "dp")
    return f


P8 = {"wi": R(DI8, E8, scale=0.4), "wt": R(DT8, E8, scale=0.4), "t": np.float32(np.log(10.0)), "b": np.float32(-2.0)}
S8 = jax.tree.map(np.asarray, OPT8.init(P8))
# one momentum trace that is not zero, as after earlier steps
S8 = jax.tree.map(lambda x: x + 0.1 * R(*np.shape(x)) if np.ndim(x) else x + np.float32(0.05), S8)
PS8 = jax.tree.map(lambda _: P(), P8)
SS8 = jax.tree.map(lambda _: P(), S8)
X8 = R(B8, DI8)
C.smap("s.siglip_train_step_ring_sgd.dp4", {"dp": 4}, siglip_step_dp, (PS8, SS8, P("dp"), P("dp")), (PS8, SS8, P()),
       siglip_step, (P8, S8, X8, R(B8, DT8)),
       bugs=[("grads-pmean", ["wrong-scale"]), ("grads-not-reduced", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 9. MoCo v2: InfoNCE against a queue, queue updated with the global keys (dp4).
B9, E9, Q9, T9 = 16, 8, 48, 0.2


def moco(q, k, queue, ptr):
    lpos = jnp.sum(q * k, -1, keepdims=True)
    lneg = q @ queue.T
    lg = jnp.concatenate([lpos, lneg], 1) / T9
    loss = jnp.mean(jax.nn.logsumexp(lg, 1) - lg[:, 0])
    newq = lax.dynamic_update_slice(queue, k, (ptr, 0))
    return loss, newq, (ptr + q.shape[0]) % Q9


def moco_dp(bug):
    def f(q, k, queue, ptr):
        bl = q.shape[0]
        lpos = jnp.einsum("nd,nd->n", q, k)
        lneg = jnp.einsum("nd,qd->nq", q, queue)
        lse = jax.nn.logsumexp(jnp.concatenate([lpos[:, None], lneg], 1) / T9, 1)
        loss = jnp.mean(lse - lpos / T9)
        if bug != "loss-not-averaged":
            loss = pmean(loss, "dp")
        if bug == "enqueue-own-keys":
            newq = lax.dynamic_update_slice(queue, k, (ptr + idx("dp") * bl, 0))
        else:
            newq = lax.dynamic_update_slice(queue, lax.all_gather(k, "dp", tiled=True), (ptr, 0))
        step = bl if bug == "ptr-local-batch" else bl * 4
        return loss, newq, (ptr + step) % Q9
    return f


Q9a = l2n(R(B9, E9))
A9 = (Q9a, l2n(Q9a + R(B9, E9, scale=0.5)), l2n(R(Q9, E9)), np.int32(16))
C.smap("s.moco_queue_global_keys.dp4", {"dp": 4}, moco_dp, (P("dp"), P("dp"), P(), P()), (P(), P(), P()), moco, A9,
       bugs=[("ptr-local-batch", ["wrong-scale"]), ("enqueue-own-keys", ["missing-collective"]),
             ("loss-not-averaged", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 10. VICReg projector training step, dp2 x tp4, check_vma=True.
N10, DIN10, H10, D10 = 16, 8, 16, 8
OPT10 = optax.sgd(0.05, momentum=0.9)


def proj(p, x):
    return jax.nn.relu(x @ p["w1"] + p["b1"]) @ p["w2"]


def vic_step(p, s, xa, xb):
    v, g = jax.value_and_grad(lambda p: vicreg(proj(p, xa), proj(p, xb)))(p)
    u, s = OPT10.update(g, s, p)
    return optax.apply_updates(p, u), s, v


def vic_step_2d(bug):
    def loss(p, xa, xb):
        def pr(x):
            return psum(jax.nn.relu(x @ p["w1"] + p["b1"]) @ p["w2"], "tp")
        za, zb = pr(xa), pr(xb)
        nl, d = za.shape
        n = nl if bug == "n-local-batch" else nl * 2
        inv = psum(jnp.sum(jnp.square(za - zb)), "dp") / (n * d)

        def terms(z):
            zc = z - psum(jnp.sum(z, 0), "dp") / n
            std = jnp.sqrt(psum(jnp.sum(zc * zc, 0), "dp") / (n - 1) + 1e-4)
            cov = psum(zc.T @ zc, "dp") / (n - 1)
            off = cov * (1.0 - jnp.eye(d))
            return jnp.mean(jax.nn.relu(1.0 - std)), jnp.sum(off * off) / d
        va, ca = terms(za)
        vb, cb = terms(zb)
        return 25.0 * inv + 12.5 * (va + vb) + ca + cb

    def f(p, s, xa, xb):
        v, g = jax.value_and_grad(loss)(p, xa, xb)
        if bug == "grads-psum-again":
            g = {k: psum(lax.pcast(x, "dp", to="varying"), "dp") for k, x in g.items()}
        u, s = OPT10.update(g, s, p)
        return optax.apply_updates(p, u), s, v
    return f


P10 = {"w1": R(DIN10, H10, scale=0.5), "b1": R(H10, scale=0.1), "w2": R(H10, D10, scale=0.4)}
S10 = jax.tree.map(np.asarray, OPT10.init(P10))
PS10 = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp")}
SS10 = (optax.TraceState(trace=PS10), optax.EmptyState())
X10 = R(N10, DIN10)
C.smap("s.vicreg_projector_train_step.dp2xtp4", {"dp": 2, "tp": 4}, vic_step_2d, (PS10, SS10, P("dp"), P("dp")),
       (PS10, SS10, P()), vic_step, (P10, S10, X10, X10 + R(N10, DIN10, scale=0.3)), check_vma=True,
       bugs=[("n-local-batch", ["wrong-scale"]), ("grads-psum-again", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 11. VICReg variance / covariance from micro-batch second moments (dp4, bf16).
N11, D11, MB11 = 32, 16, 4


def var_cov_terms(z):
    z = z.astype(jnp.float32)
    n, d = z.shape
    zc = z - z.mean(0)
    cov = zc.T @ zc / (n - 1)
    std = jnp.sqrt(jnp.diag(cov) + 1e-4)
    return jnp.mean(jax.nn.relu(1.0 - std)), (jnp.sum(cov ** 2) - jnp.sum(jnp.diag(cov) ** 2)) / d


def var_cov_scan(bug):
    def f(z):
        nl, d = z.shape
        n = nl * 4
        chunks = z.reshape(MB11, nl // MB11, d)

        def body(c, zc):
            S, s = c
            if bug == "center-per-microbatch":
                zc = zc - jnp.mean(zc.astype(jnp.float32), 0).astype(zc.dtype)
            S = S + lax.dot_general(zc, zc, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)
            s = s + jnp.sum(zc.astype(jnp.float32), 0)
            return (S, s), None
        (S, s), _ = lax.scan(body, (jnp.zeros((d, d), jnp.float32), jnp.zeros((d,), jnp.float32)), chunks)
        r, dl = idx("dp"), d // 4
        if bug == "moment-not-reduced":
            Sr = lax.dynamic_slice_in_dim(S, r * dl, dl, 0)
        else:
            Sr = lax.psum_scatter(S, "dp", scatter_dimension=0, tiled=True)   # (dl, d)
        mu = psum(s, "dp") / n
        mur = lax.dynamic_slice_in_dim(mu, r * dl, dl)
        cov = (Sr - n * mur[:, None] * mu[None, :]) / (n - 1)
        dg = jnp.take_along_axis(cov, (r * dl + jnp.arange(dl))[:, None], 1)[:, 0]
        vt = psum(jnp.sum(jax.nn.relu(1.0 - jnp.sqrt(dg + 1e-4))), "dp") / d
        ct = psum(jnp.sum(cov ** 2) - jnp.sum(dg ** 2), "dp") / d
        return vt, ct
    return f


Z11 = (R(N11, D11, scale=0.9) + 0.5).astype(jnp.bfloat16)
C.smap("s.vicreg_microbatch_moments_scatter.dp4", {"dp": 4}, var_cov_scan, (P("dp"),), (P(), P()), var_cov_terms,
       (Z11,),
       bugs=[("center-per-microbatch", ["wrong-value"]), ("moment-not-reduced", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 12. CLIP image-to-text loss with the text chunks streamed around a ppermute
#     ring and an online (flash-style) log-sum-exp merge (dp4).
B12, E12 = 16, 8


def clip_i2t(zi, zt, scale):
    lg = scale * zi @ zt.T
    return jnp.mean(jax.nn.logsumexp(lg, 1) - jnp.diagonal(lg))


def clip_ring_lse(bug):
    def f(zi, zt, scale):
        n, bl = 4, zi.shape[0]
        m = jnp.full((bl,), -1e30, jnp.float32)
        l = jnp.zeros((bl,), jnp.float32)
        pos = None
        for k in range(n):
            lg = scale * jnp.einsum("id,jd->ij", zi, zt)
            if k == (1 if bug == "pos-from-next-chunk" else 0):
                pos = jnp.diagonal(lg)
            mn = jnp.maximum(m, jnp.max(lg, 1))
            l = (l if bug == "no-rescale" else l * jnp.exp(m - mn)) + jnp.sum(jnp.exp(lg - mn[:, None]), 1)
            m = mn
            if k < n - 1:
                zt = lax.ppermute(zt, "dp", [(i, (i - 1) % n) for i in range(n)])
        return pmean(jnp.mean(m + jnp.log(l) - pos), "dp")
    return f


Z12 = l2n(R(B12, E12))
A12 = (Z12, l2n(Z12 + R(B12, E12, scale=0.7)), np.float32(6.0))
C.smap("s.clip_i2t_online_lse_ring.dp4", {"dp": 4}, clip_ring_lse, (P("dp"), P("dp"), P()), P(), clip_i2t, A12,
       bugs=[("no-rescale", ["wrong-value"]), ("pos-from-next-chunk", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 13. Barlow Twins by all_to_all: batch over dp8 in, features over dp8 after
#     the all_to_all, so the batch norm of the full batch needs no psum.


def barlow_a2a(bug):
    def f(za, zb):
        nl, d = za.shape
        n, dl = nl * 8, d // 8

        def bn(z):
            zc = z - jnp.mean(z, 0)
            return zc / jnp.sqrt(jnp.mean(zc * zc, 0) + 1e-5)
        if bug == "bn-local-before-a2a":
            za, zb = bn(za), bn(zb)
        a = lax.all_to_all(za, "dp", 1, 0, tiled=True)        # (n, dl)
        b = lax.all_to_all(zb, "dp", 1, 0, tiled=True)
        if bug != "bn-local-before-a2a":
            a, b = bn(a), bn(b)
        if bug == "b-not-gathered":
            c = a.T @ b / n
            diag = jnp.diagonal(c)
        else:
            c = a.T @ lax.all_gather(b, "dp", axis=1, tiled=True) / n      # (dl, d)
            diag = c[jnp.arange(dl), idx("dp") * dl + jnp.arange(dl)]
        part = jnp.sum((diag - 1.0) ** 2) + LAM2 * (jnp.sum(c ** 2) - jnp.sum(diag ** 2))
        return psum(part, "dp")
    return f


Z13a = R(32, 16)
Z13b = 0.6 * Z13a + R(32, 16, scale=0.6)
C.smap("s.barlow_twins_all_to_all_features.dp8", {"dp": 8}, barlow_a2a, (P("dp"), P("dp")), P(), barlow,
       (Z13a, Z13b),
       bugs=[("bn-local-before-a2a", ["missing-all-reduce"]), ("b-not-gathered", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 14. DINO multi-crop (2 teacher crops, 4 student crops) with a teacher
#     temperature warm-up read from the step, batch over dp8; the pair
#     mask excludes a student crop matching its teacher crop.
B14, K14, WARM14 = 16, 12, 4


def tau_t(step):
    return jnp.where(step < WARM14, 0.04 + 0.03 * step / WARM14, 0.07)


def dino_mc(s, t, c, step):
    pt = jax.nn.softmax((t - c) / tau_t(step), -1)
    ls = jax.nn.log_softmax(s / 0.1, -1)
    tot, cnt = 0.0, 0
    for i in range(t.shape[0]):
        for v in range(s.shape[0]):
            if v != i:
                tot = tot + jnp.mean(jnp.sum(-pt[i] * ls[v], -1))
                cnt += 1
    return tot / cnt, 0.9 * c + 0.1 * jnp.mean(t, (0, 1))


def dino_mc_dp(bug):
    def f(s, t, c, step):
        bl = s.shape[1]
        pt = jax.nn.softmax((t - c) / tau_t(step.astype(jnp.float32)), -1)
        ls = jax.nn.log_softmax(s / 0.1, -1)
        ce = -jnp.einsum("ibk,vbk->iv", pt, ls)
        mask = jnp.ones((2, 4)) if bug == "same-view-kept" else 1.0 - jnp.eye(2, 4)
        loss = psum(jnp.sum(ce * mask), "dp") / (6 * bl * 8)
        tm = jnp.mean(t, (0, 1))
        if bug != "center-local":
            tm = pmean(tm, "dp")
        return loss, 0.9 * c + 0.1 * tm
    return f


A14 = (R(4, B14, K14, scale=0.6), R(2, B14, K14, scale=0.15), R(K14, scale=0.05), np.int32(2))
C.smap("s.dino_multicrop_temp_warmup.dp8", {"dp": 8}, dino_mc_dp, (P(None, "dp"), P(None, "dp"), P(), P()), (P(), P()),
       dino_mc, A14, bugs=[("same-view-kept", ["wrong-value"]), ("center-local", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 15. Sinkhorn-Knopp run to a tolerance in lax.while_loop, the stopping test
#     on the psum'd prototype marginals (the same on every device), codes
#     returned with the batch over dp4.
B15, K15 = 16, 6


def sk_tol(s, tol=1e-4, maxit=40):
    q = jnp.exp((s - jnp.max(s)) / EPS3).T
    q = q / jnp.sum(q)
    k, b = q.shape

    def cond(c):
        return (c[2] > tol) & (c[1] < maxit)

    def body(c):
        q, it, _ = c
        r = jnp.sum(q, 1, keepdims=True)
        err = jnp.max(jnp.abs(r * k - 1.0))
        q = q / r / k
        q = q / jnp.sum(q, 0, keepdims=True) / b
        return q, it + 1, err
    q, _, _ = lax.while_loop(cond, body, (q, 0, jnp.float32(1e9)))
    return (q * b).T


def sk_tol_dp(bug):
    def f(s, tol=1e-4, maxit=40):
        bl, k = s.shape
        b = bl * 4
        q = jnp.exp((s - pmax(jnp.max(s), "dp")) / EPS3)          # (bl, k), rows = samples
        q = q / psum(jnp.sum(q), "dp")

        def cond(c):
            return jnp.logical_and(c[2] > tol, c[1] < maxit)

        def body(c):
            q, it, _ = c
            r = psum(jnp.sum(q, 0), "dp")
            err = jnp.max(jnp.abs(r * k - 1.0))
            q = q / (r * k)
            q = q / (jnp.sum(q, 1, keepdims=True) * (bl if bug == "local-batch-norm" else b))
            return q, it + 1, err
        q, _, _ = lax.while_loop(cond, body, (q, 0, jnp.float32(1e9)))
        return q * b
    return f


S15 = np.asarray(l2n(R(B15, 8)) @ l2n(R(K15, 8)).T, np.float32)
C.smap("s.sinkhorn_while_tolerance_codes.dp4", {"dp": 4}, sk_tol_dp, (P("dp"),), P("dp"), sk_tol, (S15,),
       bugs=[("local-batch-norm", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
C.gspmd("g.vicreg_loss.dp8", {"dp": 8}, (P("dp"), P("dp")), P(), vicreg, (Z1a, Z1b))
C.gspmd("g.barlow_twins_loss.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P("dp", "tp")), P(), barlow, (Z2a, Z2b))
C.gspmd("g.swav_sinkhorn_loss.dp4", {"dp": 4}, (P("dp"), P("dp"), P(), P()), P(), swav_ref, A3)
C.gspmd("g.dino_loss_center.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P("dp", "tp"), P("tp")), (P(), P("tp")),
        dino, A4)
A16 = (R(DI5, E5, scale=0.4), R(DT5, E5, scale=0.4), np.float32(np.log(5.0)), R(32, DI5), R(32, DT5))
C.gspmd("g.clip_loss_grad.dp8", {"dp": 8}, (P(), P(), P(), P("dp"), P("dp")), (P(), (P(), P(), P())), clip_vg, A16)
C.gspmd("g.siglip_train_step_sgd.dp4", {"dp": 4}, (PS8, SS8, P("dp"), P("dp")), (PS8, SS8, P()), siglip_step,
        (P8, S8, X8, R(B8, DT8)))
C.gspmd("g.moco_loss_queue_update.dp4", {"dp": 4}, (P("dp"), P("dp"), P(), P()), (P(), P(), P()), moco, A9)
C.gspmd("g.dino_multicrop_warmup.dp8", {"dp": 8}, (P(None, "dp"), P(None, "dp"), P(), P()), (P(), P()), dino_mc,
        A14)
C.gspmd("g.sinkhorn_tolerance_codes.dp4", {"dp": 4}, (P("dp"),), P("dp"), sk_tol, (S15,))
M19 = make_mesh({"dp": 4})


def clip_i2t_cons(zi, zt, scale):
    lg = lax.with_sharding_constraint(scale * zi @ zt.T, NamedSharding(M19, P("dp", None)))
    return jnp.mean(jax.nn.logsumexp(lg, 1) - jnp.diagonal(lg))


C.gspmd("g.clip_i2t_rows_constrained.dp4", {"dp": 4}, (P("dp"), P("dp"), P()), P(), clip_i2t_cons, A12)
C.finish()
