"""samples/fresh39: a 39th batch of programs as a user writes them, on the
theme of embedding models, retrieval and metric learning at scale in JAX /
optax (dual encoders with in-batch negatives over dp, InfoNCE with a learned
temperature, hard-negative mining, ArcFace / CosFace with class-parallel
weights, batch-hard triplets across devices, a MoCo queue sharded over dp,
embedding normalisation over a tp-sharded dim, product quantisation,
Matryoshka losses, SigLIP's chunked sigmoid loss), none of them an idiom of
samples/fresh .. fresh37, probe, train or wild.
shard_map families:
 1. a dual encoder (tanh projection, l2-normalised) with in-batch negatives,
    batch over dp4: the document embeddings all_gather'd (tiled), the labels
    the query's global row (axis_index * local batch + i), CE pmean'd.
    Bugs: labels without the device offset, psum of the per-device means.
 2. a CLIP step with a learned log logit scale (clipped to log 100 after the
    update), batch over dp4, check_vma=False: both sides all_gather'd,
    a per-device symmetric loss summed over the local rows and divided by
    the global batch, jax.value_and_grad of it (the gather's transpose
    brings the other devices' cotangents back), gradients psum'd, optax.adam.
    Bugs: the temperature's gradient not reduced, the temperature's gradient
    pmean'd (a quarter of it).
 3. hard-negative mining over the gathered similarity matrix, dp4: the
    positive column at its global index masked out, lax.top_k (k=3) of the
    rest, a margin ranking loss pmean'd; the hard negatives' global indices
    returned. Bugs: positive masked (and read) at its local index, the top-k
    over the device's own documents only (no gather).
 4. ArcFace (the insightface cos(theta + m) with its threshold fallback)
    with the class weights' columns over tp (dp2 x tp4): column norms local,
    the target's one_hot at label - axis_index * classes per shard (zero on
    the other shards), a class-parallel CE (pmax'd max, psum'd sum of exps,
    psum'd target logit), pmean over dp. Bugs: the one_hot at the label
    modulo the shard size (margin on every shard), the log-sum-exp from the
    local max without pmax, the class offset from the dp index.
 5. a CosFace training step with a hand-written class-parallel backward
    (dp2 x tp4): jax.vjp for the replicated encoder and the column norms,
    d logits = (softmax - one_hot) / global batch, the class weights'
    gradient psum'd over dp, the features' gradient psum'd over tp, the
    encoder's over dp; optax.sgd with momentum. Bugs: features' gradient not
    psum'd over tp, the gradient divided by the local batch, the class
    weights' gradient not reduced over dp.
 6. batch-hard triplet loss across devices (dp4): embeddings and labels
    (mod 4 classes) all_gather'd, hardest positive (self excluded at its
    global index) and hardest negative per local row, mean pmean'd; the
    per-row distances returned. Bugs: self excluded at the local index,
    the hardest negative among the device's own rows, psum of means.
 7. a MoCo step whose queue (64 x 8) is sharded over dp4 (16 rows each):
    queries and keys all_gather'd, the negatives' log-sum-exp across the
    queue shards (pmax, psum), the gathered keys written with
    dynamic_update_slice by the shard owning the global pointer (ptr //
    rows) at ptr % rows, the pointer advanced by the global batch. Bugs:
    the pointer advanced by the local batch, every shard writes at ptr %
    rows, the negatives' sum not psum'd over the shards.
 8. retrieval with the embedding dim over tp (dp2 x tp4): a column-parallel
    projection, l2 norm by psum of the local squares, the bank normalised
    the same way, scores psum'd over tp, lax.top_k (4). Bugs: norm over the
    local hidden shard, pmean of the squares, scores not psum'd.
 9. product quantisation (8 subspaces of 4 dims, 16 codewords; dp2 x tp4):
    the embedding dim over tp (2 subspaces per device), the codebooks
    passed replicated and dynamic_slice'd at the device's subspace offset;
    database codes by argmin, asymmetric distance tables and the distances
    as an einsum with one_hot codes psum'd over tp, reconstruction error
    psum'd. Bugs: codebooks sliced at offset 0, distances not psum'd, the
    slice offset from the dp index.
10. a Matryoshka contrastive loss over nested prefixes 8 / 16 / 32 of a 32-d
    embedding whose dim is over tp (dp2 x tp4): partial dots and squared
    norms all_gather'd over tp and cumsum'd over the device axis (prefix
    k devices), documents all_gather'd over dp, labels offset by the dp
    index. Bugs: every prefix from the local partials, labels without the
    dp offset, the prefixes cumsum'd in reversed device order.
11. a DPR training step (dp4): two 2-layer towers, one hard negative per
    query, candidates = gathered positives ++ gathered hard negatives,
    labels the global row, learned log scale, value_and_grad of the
    per-device loss (sum / global batch), gradients psum'd, clip by global
    norm + optax.adamw. Bugs: labels without offset, gradients pmean'd,
    hard negatives not gathered (local ones only).
12. SigLIP's chunked sigmoid loss (dp4): text chunks passed round the ring
    by ppermute inside a lax.scan, the diagonal positive only in the first
    step (own chunk), learned temperature and bias, the sum psum'd and
    divided by the global batch. Bugs: positives on every chunk, divided by
    the local batch, the ring one step short.
13. a sharded vector index, bank rows over tp8: local lax.top_k, global ids
    by the shard's row offset, values and ids all_gather'd (tiled along the
    candidates) and merged by a second top_k and take_along_axis. Bugs: ids
    without the offset, an untiled all_gather reshaped (candidates of
    different queries mixed).
14. a bf16 dual-encoder step with check_vma=True (dp4): bf16 matmuls with
    f32 accumulation, f32 master weights, jax.grad of the psum'd loss (JAX
    reduces the replicated weights' gradients itself), optax.sgd. Bugs:
    labels without offset, psum of the local means (4x the loss).
15. ArcFace written the Megatron way (dp2 x tp4, check_vma=True): the
    target cosine by take_along_axis at the clipped local index, masked to
    the owning shard and psum'd, the margin applied to it, the target column
    replaced; value_and_grad w.r.t. the class shard; optax.adamw on it.
    Bugs: the clipped target not masked (every shard contributes a column),
    the class offset from the dp index.
16. supervised contrastive (SupCon) loss across devices (dp4): embeddings
    and labels (mod 4) all_gather'd, the self logits knocked out with
    .at[rows, global cols].set, several positives per row averaged. Bugs:
    self knocked out at the local column, the positive count from the
    device's own rows.
17. a cross-batch memory (XBM) with its bank rows over dp4: the global
    batch's keys written at rows (ptr + i) % K (wrapping round), each shard
    scattering the rows it owns by .at[...].set(mode="drop") with foreign
    rows sent out of bounds, InfoNCE against the updated bank with the
    log-sum-exp across shards. Bugs: foreign rows left negative (jnp wraps
    them into the shard's tail), the pointer advanced by the local batch.
GSPMD pairs (jax.jit with in/out shardings): 18. the DPR loss of 11. and its
gradients, batch over dp8; 19. ArcFace loss and gradients with the weight
columns over tp (dp2 x tp4); 20. the Matryoshka loss of 10. with both sides
P('dp', 'tp'); 21. the PQ search of 9. with codebooks over tp on the
subspace dim; 22. the MoCo step of 7. with the queue P('dp') and
dynamic_update_slice at the global pointer; 23. the sharded-index search of
13., bank rows over tp8; 24. the batch-hard triplet loss of 6., dp8.
Left out, as idioms of earlier batches: the plain CLIP / InfoNCE loss with
all-gathered embeddings (fresh, fresh5, fresh32: here with a learned scale's
gradient, hard negatives, nested prefixes), a MoCo queue replicated (fresh3:
here sharded), the logQ-corrected two-tower loss (fresh17), VQ-VAE
codebooks (fresh14: here PQ with ADC).
Integer inputs (labels, the queue pointer) are reduced in the program
(labels % classes, the pointer aligned to the global batch), so that any
integers a checker draws are valid.
Numerics: every correct pair agrees with its baseline at rounding level
(f32: within 2e-5 of values up to ~100; 14., bf16 matmuls: 8e-3, the
per-device bf16 weight-gradient partials rounded before the psum); every
bug variant differs clearly (see "numerics"). One first-draft bug of 15.
(target cosine not psum'd) was replaced because check_vma rejects it at the
P() loss.
Run from the repository root: bash samples/gen/run_fresh39.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh39.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh39.py"
C = Corpus("samples/fresh39", SCRIPT, "samples/gen/run_fresh39.sh", sys.argv[1:])
rng, R, I = seeded(3939)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
ce_int = optax.softmax_cross_entropy_with_integer_labels


def l2n(x, axis=-1, eps=1e-6):
    return x * lax.rsqrt(jnp.sum(x * x, axis, keepdims=True) + eps)


def colnorm(w, eps=1e-6):
    return w * lax.rsqrt(jnp.sum(w * w, 0, keepdims=True) + eps)


def rep(tree):
    return jax.tree.map(lambda _: P(), tree)


# ---------------------------------------------------------------------------
# 1. dual encoder, in-batch negatives over dp4
B1, DIN1, E1 = 16, 12, 8


def enc1(x, w):
    return l2n(jnp.tanh(x @ w))


def dual1(xq, xd, wq, wd):
    q, d = enc1(xq, wq), enc1(xd, wd)
    return jnp.mean(ce_int(q @ d.T / 0.1, jnp.arange(xq.shape[0])))


def dual1_dp(bug):
    def f(xq, xd, wq, wd):
        q, d = enc1(xq, wq), enc1(xd, wd)
        dall = lax.all_gather(d, "dp", tiled=True)
        bl = q.shape[0]
        lab = jnp.arange(bl) if bug == "labels-no-offset" else idx("dp") * bl + jnp.arange(bl)
        loss = jnp.mean(ce_int(q @ dall.T / 0.1, lab))
        if bug == "psum-of-means":
            return psum(loss, "dp")
        return pmean(loss, "dp")
    return f


C.smap("s.dual_encoder_inbatch_gather_labels.dp4", {"dp": 4}, dual1_dp, (P("dp"), P("dp"), P(), P()), P(),
       dual1, (R(B1, DIN1), R(B1, DIN1), R(DIN1, E1, scale=0.4), R(DIN1, E1, scale=0.4)),
       bugs=[("labels-no-offset", ["wrong-offset"]), ("psum-of-means", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 2. CLIP step with a learned log logit scale, value_and_grad per device,
#    gradients psum'd, optax.adam
B2, DI2, DT2, E2 = 16, 10, 6, 8
OPT2 = optax.adam(0.05)


def clip_loss(p, xi, xt):
    i, t = l2n(xi @ p["wi"]), l2n(xt @ p["wt"])
    lg = jnp.exp(p["ls"]) * i @ t.T
    lab = jnp.arange(xi.shape[0])
    return 0.5 * (jnp.mean(ce_int(lg, lab)) + jnp.mean(ce_int(lg.T, lab)))


def clip_step(p, st, xi, xt):
    loss, g = jax.value_and_grad(clip_loss)(p, xi, xt)
    u, st = OPT2.update(g, st, p)
    p = optax.apply_updates(p, u)
    p = dict(p, ls=jnp.clip(p["ls"], 0.0, np.log(100.0)))
    return p, st, loss


def clip_step_dp(bug):
    def f(p, st, xi, xt):
        n, bl = 4, xi.shape[0]

        def local(p):
            i, t = l2n(xi @ p["wi"]), l2n(xt @ p["wt"])
            ia, ta = lax.all_gather(i, "dp", tiled=True), lax.all_gather(t, "dp", tiled=True)
            s = jnp.exp(p["ls"])
            lab = idx("dp") * bl + jnp.arange(bl)
            return 0.5 * (jnp.sum(ce_int(s * i @ ta.T, lab)) + jnp.sum(ce_int(s * t @ ia.T, lab))) / (n * bl)
        loss, g = jax.value_and_grad(local)(p)
        if bug == "temp-grad-not-reduced":
            g = dict(g, wi=psum(g["wi"], "dp"), wt=psum(g["wt"], "dp"))
        elif bug == "temp-grad-pmean":
            g = dict(g, wi=psum(g["wi"], "dp"), wt=psum(g["wt"], "dp"), ls=pmean(g["ls"], "dp"))
        else:
            g = psum(g, "dp")
        u, st = OPT2.update(g, st, p)
        p = optax.apply_updates(p, u)
        p = dict(p, ls=jnp.clip(p["ls"], 0.0, np.log(100.0)))
        return p, st, psum(loss, "dp")
    return f


P2 = {"wi": R(DI2, E2, scale=0.4), "wt": R(DT2, E2, scale=0.4), "ls": np.float32(np.log(1 / 0.07))}
S2 = OPT2.init(P2)
C.smap("s.clip_learned_logit_scale_grad_adam.dp4", {"dp": 4}, clip_step_dp, (rep(P2), rep(S2), P("dp"), P("dp")),
       (rep(P2), rep(S2), P()), clip_step, (P2, S2, R(B2, DI2), R(B2, DT2)),
       bugs=[("temp-grad-not-reduced", ["missing-all-reduce"]), ("temp-grad-pmean", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 3. hard-negative mining over the gathered similarity matrix (dp4)
B3, E3, K3, MARG3 = 16, 8, 3, 0.2


def hardneg(q, d):
    q, d = l2n(q), l2n(d)
    s = q @ d.T
    pos = jnp.diagonal(s)
    hn, hi = lax.top_k(jnp.where(jnp.eye(q.shape[0], dtype=bool), -1e9, s), K3)
    return jnp.mean(jax.nn.relu(MARG3 - pos[:, None] + hn)), hi


def hardneg_dp(bug):
    def f(q, d):
        q, d = l2n(q), l2n(d)
        bl = q.shape[0]
        if bug == "topk-local-docs":
            dall, off = d, 0
        else:
            dall, off = lax.all_gather(d, "dp", tiled=True), idx("dp") * bl
        s = q @ dall.T
        col = jnp.arange(bl) if bug == "positive-local-index" else off + jnp.arange(bl)
        is_pos = col[:, None] == jnp.arange(dall.shape[0])[None, :]
        pos = jnp.sum(jnp.where(is_pos, s, 0.0), -1)
        hn, hi = lax.top_k(jnp.where(is_pos, -1e9, s), K3)
        return pmean(jnp.mean(jax.nn.relu(MARG3 - pos[:, None] + hn)), "dp"), hi
    return f


C.smap("s.hard_negative_topk_global_positive.dp4", {"dp": 4}, hardneg_dp, (P("dp"), P("dp")), (P(), P("dp")),
       hardneg, (R(B3, E3), R(B3, E3)),
       bugs=[("positive-local-index", ["wrong-offset"]), ("topk-local-docs", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 4. ArcFace with class-parallel weights (dp2 x tp4)
B4, D4, C4, S4, M4 = 8, 16, 32, 8.0, 0.3
COSM, SINM = np.cos(M4), np.sin(M4)
TH4, MM4 = np.cos(np.pi - M4), np.sin(np.pi - M4) * M4


def arc_phi(cos):
    sin = jnp.sqrt(jnp.clip(1.0 - cos * cos, 1e-6, 1.0))
    phi = cos * COSM - sin * SINM
    return jnp.where(cos > TH4, phi, cos - MM4)


def arcface(x, w, lab):
    lab = lab % C4
    cos = l2n(x) @ colnorm(w)
    oh = jax.nn.one_hot(lab, C4, dtype=bool)
    lg = S4 * jnp.where(oh, arc_phi(cos), cos)
    return jnp.mean(ce_int(lg, lab))


def arcface_tp(bug):
    def f(x, w, lab):
        lab = lab % C4
        cl = w.shape[1]
        me = idx("dp") if bug == "class-offset-from-dp" else idx("tp")
        cos = l2n(x) @ colnorm(w)
        local = lab % cl if bug == "margin-at-local-label" else lab - me * cl
        oh = jax.nn.one_hot(local, cl, dtype=bool)
        lg = S4 * jnp.where(oh, arc_phi(cos), cos)
        mx = jnp.max(lg, -1) if bug == "lse-local-max" else pmax(jnp.max(lg, -1), "tp")
        lse = jnp.log(psum(jnp.sum(jnp.exp(lg - mx[:, None]), -1), "tp")) + mx
        tgt = psum(jnp.sum(jnp.where(oh, lg, 0.0), -1), "tp")
        return pmean(jnp.mean(lse - tgt), "dp")
    return f


C.smap("s.arcface_class_parallel_ce.dp2xtp4", {"dp": 2, "tp": 4}, arcface_tp, (P("dp"), P(None, "tp"), P("dp")), P(),
       arcface, (R(B4, D4), R(D4, C4), I(0, C4, B4)),
       bugs=[("margin-at-local-label", ["wrong-offset"]), ("lse-local-max", ["missing-collective"]),
             ("class-offset-from-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 5. CosFace training step, hand-written class-parallel backward (dp2 x tp4)
B5, DIN5, D5, C5, S5, M5 = 8, 12, 16, 32, 10.0, 0.35
OPT5 = optax.sgd(0.2, momentum=0.9)


def cos_feat(x, we):
    return l2n(jnp.tanh(x @ we))


def cosface_loss(p, x, lab):
    lab = lab % C5
    cos = cos_feat(x, p["we"]) @ colnorm(p["w"])
    lg = S5 * (cos - M5 * jax.nn.one_hot(lab, C5))
    return jnp.mean(ce_int(lg, lab))


def cosface_step(p, mom, x, lab):
    loss, g = jax.value_and_grad(cosface_loss)(p, x, lab)
    u, mom = OPT5.update(g, mom, p)
    return optax.apply_updates(p, u), mom, loss


def cosface_step_tp(bug):
    def f(p, mom, x, lab):
        lab = lab % C5
        bl, cl = x.shape[0], p["w"].shape[1]
        bg = bl if bug == "grad-local-batch" else 2 * bl
        feat, enc_vjp = jax.vjp(lambda we: cos_feat(x, we), p["we"])
        wn, w_vjp = jax.vjp(colnorm, p["w"])
        oh = jax.nn.one_hot(lab - idx("tp") * cl, cl)
        lg = S5 * (feat @ wn - M5 * oh)
        mx = pmax(lax.stop_gradient(jnp.max(lg, -1)), "tp")
        e = jnp.exp(lg - mx[:, None])
        z = psum(jnp.sum(e, -1), "tp")
        loss = jnp.log(z) + mx - psum(jnp.sum(oh * lg, -1), "tp")
        dcos = S5 * (e / z[:, None] - oh) / bg
        dwn = feat.T @ dcos
        if bug != "class-grad-not-reduced":
            dwn = psum(dwn, "dp")
        dfeat = dcos @ wn.T
        if bug != "feature-grad-not-psummed":
            dfeat = psum(dfeat, "tp")
        (dwe,) = enc_vjp(dfeat)
        (dw,) = w_vjp(dwn)
        g = {"we": psum(dwe, "dp"), "w": dw}
        u, mom = OPT5.update(g, mom, p)
        return optax.apply_updates(p, u), mom, pmean(jnp.mean(loss), "dp")
    return f


P5 = {"we": R(DIN5, D5, scale=0.4), "w": R(D5, C5)}
SPEC5 = {"we": P(), "w": P(None, "tp")}
S5_ = OPT5.init(P5)
SS5 = state_specs(S5_, SPEC5)
C.smap("s.cosface_step_manual_classpar_backward.dp2xtp4", {"dp": 2, "tp": 4}, cosface_step_tp,
       (SPEC5, SS5, P("dp"), P("dp")), (SPEC5, SS5, P()), cosface_step, (P5, S5_, R(B5, DIN5), I(0, C5, B5)),
       bugs=[("feature-grad-not-psummed", ["missing-all-reduce"]), ("grad-local-batch", ["wrong-scale"]),
             ("class-grad-not-reduced", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 6. batch-hard triplet loss across devices (dp4)
B6, E6, NC6, MARG6 = 16, 8, 4, 0.3


def pdist(a, b):
    return jnp.sqrt(jnp.maximum(2.0 - 2.0 * a @ b.T, 0.0) + 1e-12)


def batch_hard(x, lab):
    e, lab = l2n(x), lab % NC6
    d = pdist(e, e)
    same = lab[:, None] == lab[None, :]
    eye = jnp.eye(x.shape[0], dtype=bool)
    hp = jnp.max(jnp.where(same & ~eye, d, 0.0), -1)
    hn = jnp.min(jnp.where(~same, d, 4.0), -1)
    return jnp.mean(jax.nn.relu(hp - hn + MARG6)), hp, hn


def batch_hard_dp(bug):
    def f(x, lab):
        e, lab = l2n(x), lab % NC6
        bl = x.shape[0]
        ea, la = lax.all_gather(e, "dp", tiled=True), lax.all_gather(lab, "dp", tiled=True)
        d = pdist(e, ea)
        same = lab[:, None] == la[None, :]
        me = jnp.arange(bl) if bug == "self-local-index" else idx("dp") * bl + jnp.arange(bl)
        eye = me[:, None] == jnp.arange(ea.shape[0])[None, :]
        hp = jnp.max(jnp.where(same & ~eye, d, 0.0), -1)
        if bug == "negatives-own-rows":
            dd, ss = pdist(e, e), lab[:, None] == lab[None, :]
            hn = jnp.min(jnp.where(~ss, dd, 4.0), -1)
        else:
            hn = jnp.min(jnp.where(~same, d, 4.0), -1)
        loss = jnp.mean(jax.nn.relu(hp - hn + MARG6))
        loss = psum(loss, "dp") if bug == "psum-of-means" else pmean(loss, "dp")
        return loss, hp, hn
    return f


C.smap("s.triplet_batch_hard_gathered.dp4", {"dp": 4}, batch_hard_dp, (P("dp"), P("dp")), (P(), P("dp"), P("dp")),
       batch_hard, (R(B6, E6), I(0, NC6, B6)),
       bugs=[("self-local-index", ["wrong-offset"]), ("negatives-own-rows", ["missing-collective"]),
             ("psum-of-means", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. MoCo step with the queue sharded over dp4, global pointer
B7, E7, K7, T7 = 8, 8, 64, 0.2


def moco_step(q, k, queue, ptr):
    q, k = l2n(q), l2n(k)
    ptr = (ptr % K7) // B7 * B7
    lpos = jnp.sum(q * k, -1, keepdims=True)
    lg = jnp.concatenate([lpos, q @ queue.T], 1) / T7
    loss = jnp.mean(ce_int(lg, jnp.zeros(q.shape[0], jnp.int32)))
    queue = lax.dynamic_update_slice(queue, k, (ptr, 0))
    return loss, queue, (ptr + B7) % K7


def moco_dp(bug):
    def f(q, k, queue, ptr):
        q, k = l2n(q), l2n(k)
        bl, kl = q.shape[0], queue.shape[0]
        ptr = (ptr % K7) // B7 * B7
        qa, ka = lax.all_gather(q, "dp", tiled=True), lax.all_gather(k, "dp", tiled=True)
        lpos = jnp.sum(qa * ka, -1) / T7
        lneg = qa @ queue.T / T7
        m = jnp.maximum(pmax(jnp.max(lneg, -1), "dp"), lpos)
        zn = jnp.sum(jnp.exp(lneg - m[:, None]), -1)
        if bug != "negatives-not-psummed":
            zn = psum(zn, "dp")
        loss = jnp.mean(jnp.log(zn + jnp.exp(lpos - m)) + m - lpos)
        upd = lax.dynamic_update_slice(queue, ka, (ptr % kl, 0))
        if bug == "write-on-every-shard":
            queue = upd
        else:
            queue = jnp.where(idx("dp") == ptr // kl, upd, queue)
        step = bl if bug == "ptr-local-batch" else 4 * bl
        return loss, queue, (ptr + step) % K7
    return f


C.smap("s.moco_queue_sharded_global_pointer.dp4", {"dp": 4}, moco_dp, (P("dp"), P("dp"), P("dp"), P()),
       (P(), P("dp"), P()), moco_step, (R(B7, E7), R(B7, E7), l2n(R(K7, E7)), np.int32(40)),
       bugs=[("ptr-local-batch", ["wrong-scale"]), ("write-on-every-shard", ["wrong-offset"]),
             ("negatives-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 8. retrieval with the embedding dim over tp: norms by psum of squares
B8, DIN8, E8, N8, K8 = 8, 16, 32, 24, 4


def retrieve(x, w, bank):
    e = l2n(x @ w)
    s = e @ l2n(bank).T
    top, ids = lax.top_k(s, K8)
    return e, top, ids


def retrieve_tp(bug):
    def norm(v):
        sq = jnp.sum(v * v, -1, keepdims=True)
        if bug == "norm-pmean":
            sq = pmean(sq, "tp")
        elif bug != "norm-local-shard":
            sq = psum(sq, "tp")
        return v * lax.rsqrt(sq + 1e-6)

    def f(x, w, bank):
        e = norm(x @ w)
        s = e @ norm(bank).T
        if bug != "scores-not-psummed":
            s = psum(s, "tp")
        top, ids = lax.top_k(s, K8)
        return e, top, ids
    return f


C.smap("s.retrieval_norm_over_tp_hidden.dp2xtp4", {"dp": 2, "tp": 4}, retrieve_tp,
       (P("dp"), P(None, "tp"), P(None, "tp")), (P("dp", "tp"), P("dp"), P("dp")), retrieve,
       (R(B8, DIN8), R(DIN8, E8, scale=0.3), R(N8, E8)),
       bugs=[("norm-local-shard", ["missing-all-reduce"]), ("norm-pmean", ["wrong-collective-op"]),
             ("scores-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 9. product quantisation: encode a database, ADC distances (dp2 x tp4)
M9, DS9, KC9, BQ9, N9 = 8, 4, 16, 8, 16


def subv(v, m):
    return v.reshape(v.shape[0], m, DS9)


def pq_parts(q, db, cb, m):
    d2 = jnp.sum(jnp.square(subv(db, m)[:, :, None, :] - cb[None]), -1)  # (N, m, K)
    codes = jnp.argmin(d2, -1)
    oh = jax.nn.one_hot(codes, KC9)
    lut = jnp.sum(jnp.square(subv(q, m)[:, :, None, :] - cb[None]), -1)  # (Bq, m, K)
    dist = jnp.einsum("bmk,nmk->bn", lut, oh)
    err = jnp.sum(jnp.min(d2, -1))
    return codes, dist, err


def pq_search(q, db, cb):
    codes, dist, err = pq_parts(q, db, cb, M9)
    return codes, dist, err / db.shape[0]


def pq_tp(bug):
    def f(q, db, cb):
        ml = q.shape[1] // DS9
        off = 0 if bug == "codebook-offset-zero" else (idx("dp") if bug == "codebook-offset-dp" else idx("tp")) * ml
        cbl = lax.dynamic_slice_in_dim(cb, off, ml, 0)
        codes, dist, err = pq_parts(q, db, cbl, ml)
        if bug != "adc-not-psummed":
            dist = psum(dist, "tp")
        return codes, dist, psum(err, "tp") / db.shape[0]
    return f


C.smap("s.pq_adc_subspaces_over_tp.dp2xtp4", {"dp": 2, "tp": 4}, pq_tp, (P("dp", "tp"), P(None, "tp"), P()),
       (P(None, "tp"), P("dp"), P()), pq_search, (R(BQ9, M9 * DS9), R(N9, M9 * DS9), R(M9, KC9, DS9)),
       bugs=[("codebook-offset-zero", ["wrong-offset"]), ("adc-not-psummed", ["missing-all-reduce"]),
             ("codebook-offset-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 10. Matryoshka contrastive loss over nested prefixes, dim over tp (dp2 x tp4)
B10, E10, T10 = 8, 32, 0.1
DIMS10 = (8, 16, 32)


def matryoshka(q, d):
    ls = []
    for m in DIMS10:
        qm, dm = l2n(q[:, :m]), l2n(d[:, :m])
        ls.append(jnp.mean(ce_int(qm @ dm.T / T10, jnp.arange(q.shape[0]))))
    ls = jnp.stack(ls)
    return jnp.sum(ls), ls


def matryoshka_sm(bug):
    def f(q, d):
        bl, el = q.shape
        da = lax.all_gather(d, "dp", tiled=True)  # (B, el)
        parts = (q @ da.T, jnp.sum(q * q, -1), jnp.sum(da * da, -1))
        if bug == "prefix-local-partials":
            pre = [jnp.stack([x] * 4) for x in parts]
        else:
            g = [lax.all_gather(x, "tp") for x in parts]  # (tp, ...)
            if bug == "prefix-reversed-devices":
                g = [x[::-1] for x in g]
            pre = [jnp.cumsum(x, 0) for x in g]
        lab = jnp.arange(bl) if bug == "labels-no-dp-offset" else idx("dp") * bl + jnp.arange(bl)
        ls = []
        for m in DIMS10:
            k = m // el - 1
            s, qn, dn = (x[k] for x in pre)
            cos = s * lax.rsqrt(qn + 1e-6)[:, None] * lax.rsqrt(dn + 1e-6)[None, :]
            ls.append(jnp.mean(ce_int(cos / T10, lab)))
        ls = pmean(jnp.stack(ls), "dp")
        return jnp.sum(ls), ls
    return f


C.smap("s.matryoshka_prefix_cumsum_over_tp.dp2xtp4", {"dp": 2, "tp": 4}, matryoshka_sm,
       (P("dp", "tp"), P("dp", "tp")), (P(), P()), matryoshka, (R(B10, E10), R(B10, E10)),
       bugs=[("prefix-local-partials", ["missing-collective"]), ("labels-no-dp-offset", ["wrong-offset"]),
             ("prefix-reversed-devices", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 11. DPR training step: hard negatives, clip + adamw (dp4)
B11, DIN11, H11, E11 = 8, 10, 12, 8
OPT11 = optax.chain(optax.clip_by_global_norm(5.0), optax.adamw(1e-2, weight_decay=0.01))


def tower(p, x):
    return l2n(jax.nn.gelu(x @ p["w1"]) @ p["w2"])


def dpr_loss(p, xq, xp, xn):
    q, dp_, dn = tower(p["q"], xq), tower(p["d"], xp), tower(p["d"], xn)
    cand = jnp.concatenate([dp_, dn], 0)
    lg = jnp.exp(p["ls"]) * q @ cand.T
    return jnp.mean(ce_int(lg, jnp.arange(xq.shape[0])))


def dpr_step(p, st, xq, xp, xn):
    loss, g = jax.value_and_grad(dpr_loss)(p, xq, xp, xn)
    u, st = OPT11.update(g, st, p)
    return optax.apply_updates(p, u), st, loss


def dpr_step_dp(bug):
    def f(p, st, xq, xp, xn):
        bl = xq.shape[0]

        def local(p):
            q, dp_, dn = tower(p["q"], xq), tower(p["d"], xp), tower(p["d"], xn)
            pa = lax.all_gather(dp_, "dp", tiled=True)
            na = dn if bug == "hardnegs-not-gathered" else lax.all_gather(dn, "dp", tiled=True)
            lg = jnp.exp(p["ls"]) * q @ jnp.concatenate([pa, na], 0).T
            lab = jnp.arange(bl) if bug == "labels-no-offset" else idx("dp") * bl + jnp.arange(bl)
            return jnp.sum(ce_int(lg, lab)) / (4 * bl)
        loss, g = jax.value_and_grad(local)(p)
        g = pmean(g, "dp") if bug == "grads-pmean" else psum(g, "dp")
        u, st = OPT11.update(g, st, p)
        return optax.apply_updates(p, u), st, psum(loss, "dp")
    return f


def tower_params(din):
    return {"w1": R(din, H11, scale=0.4), "w2": R(H11, E11, scale=0.4)}


P11 = {"q": tower_params(DIN11), "d": tower_params(DIN11), "ls": np.float32(2.0)}
S11 = OPT11.init(P11)
C.smap("s.dpr_hardneg_train_step_adamw.dp4", {"dp": 4}, dpr_step_dp, (rep(P11), rep(S11), P("dp"), P("dp"), P("dp")),
       (rep(P11), rep(S11), P()), dpr_step, (P11, S11, R(B11, DIN11), R(B11, DIN11), R(B11, DIN11)),
       bugs=[("labels-no-offset", ["wrong-offset"]), ("grads-pmean", ["wrong-scale"]),
             ("hardnegs-not-gathered", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 12. SigLIP chunked sigmoid loss, text chunks round the ring (dp4)
B12, E12 = 8, 8


def siglip(zi, zt, t, b):
    zi, zt = l2n(zi), l2n(zt)
    lg = zi @ zt.T * jnp.exp(t) + b
    lab = 2.0 * jnp.eye(zi.shape[0]) - 1.0
    return -jnp.sum(jax.nn.log_sigmoid(lab * lg)) / zi.shape[0]


def siglip_ring(bug):
    def f(zi, zt, t, b):
        zi, zt = l2n(zi), l2n(zt)
        bl, n = zi.shape[0], 4
        steps = n - 1 if bug == "ring-one-short" else n

        def body(carry, s):
            cur, acc = carry
            lg = zi @ cur.T * jnp.exp(t) + b
            pos = (s == 0) | (bug == "positive-every-chunk")
            lab = jnp.where(pos, 2.0 * jnp.eye(bl) - 1.0, -1.0)
            acc = acc - jnp.sum(jax.nn.log_sigmoid(lab * lg))
            cur = lax.ppermute(cur, "dp", [(i, (i + 1) % n) for i in range(n)])
            return (cur, acc), None
        (_, acc), _ = lax.scan(body, (zt, jnp.float32(0.0)), jnp.arange(steps))
        div = bl if bug == "divide-local-batch" else n * bl
        return psum(acc, "dp") / div
    return f


C.smap("s.siglip_sigmoid_ring_scan.dp4", {"dp": 4}, siglip_ring, (P("dp"), P("dp"), P(), P()), P(), siglip,
       (R(B12, E12), R(B12, E12), np.float32(np.log(10.0)), np.float32(-5.0)),
       bugs=[("positive-every-chunk", ["wrong-offset"]), ("divide-local-batch", ["wrong-scale"]),
             ("ring-one-short", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 13. a sharded vector index (bank rows over tp8): local top-k, global ids
#     by the shard's row offset, candidates all_gather'd and merged
B13Q, N13, E13, K13 = 4, 64, 8, 5


def index_search(q, bank):
    s = l2n(q) @ l2n(bank).T
    top, ids = lax.top_k(s, K13)
    return top, ids


def index_search_tp(bug):
    def f(q, bank):
        nl = bank.shape[0]
        s = l2n(q) @ l2n(bank).T
        lt, li = lax.top_k(s, K13)
        gi = li if bug == "ids-without-offset" else li + idx("tp") * nl
        if bug == "gather-untiled-reshape":
            at = lax.all_gather(lt, "tp").reshape(q.shape[0], -1)
            ai = lax.all_gather(gi, "tp").reshape(q.shape[0], -1)
        else:
            at = lax.all_gather(lt, "tp", axis=1, tiled=True)
            ai = lax.all_gather(gi, "tp", axis=1, tiled=True)
        top, pos = lax.top_k(at, K13)
        return top, jnp.take_along_axis(ai, pos, 1)
    return f


C.smap("s.sharded_index_topk_merge.tp8", {"tp": 8}, index_search_tp, (P(), P("tp")), (P(), P()), index_search,
       (R(B13Q, E13), R(N13, E13)),
       bugs=[("ids-without-offset", ["wrong-offset"]), ("gather-untiled-reshape", ["wrong-reshape-order"])])

# ---------------------------------------------------------------------------
# 14. a bf16 dual encoder step with check_vma=True (dp4): bf16 matmuls with
#     f32 accumulation, f32 master weights, jax.grad of the psum'd loss
#     (JAX reduces the replicated weights' gradients), optax.sgd
B14, DIN14, E14 = 16, 12, 8
OPT14 = optax.sgd(0.5)
bf16 = jnp.bfloat16


def enc14(x, w):
    h = jnp.dot(x.astype(bf16), w.astype(bf16), preferred_element_type=jnp.float32)
    return l2n(jnp.tanh(h))


def bf16_loss(p, xq, xd):
    q, d = enc14(xq, p["wq"]), enc14(xd, p["wd"])
    return jnp.mean(ce_int(20.0 * q @ d.T, jnp.arange(xq.shape[0])))


def bf16_step(p, xq, xd):
    loss, g = jax.value_and_grad(bf16_loss)(p, xq, xd)
    u, _ = OPT14.update(g, OPT14.init(p), p)
    return optax.apply_updates(p, u), loss


def bf16_step_dp(bug):
    def f(p, xq, xd):
        bl, n = xq.shape[0], 4

        def loss_fn(p):
            q, d = enc14(xq, p["wq"]), enc14(xd, p["wd"])
            da = lax.all_gather(d, "dp", tiled=True)
            lab = jnp.arange(bl) if bug == "labels-no-offset" else idx("dp") * bl + jnp.arange(bl)
            ce = ce_int(20.0 * q @ da.T, lab)
            return psum(jnp.mean(ce), "dp") if bug == "psum-of-local-means" else psum(jnp.sum(ce), "dp") / (n * bl)
        loss, g = jax.value_and_grad(loss_fn)(p)
        u, _ = OPT14.update(g, OPT14.init(p), p)
        return optax.apply_updates(p, u), loss
    return f


P14 = {"wq": R(DIN14, E14, scale=0.4), "wd": R(DIN14, E14, scale=0.4)}
C.smap("s.bf16_dual_encoder_vma_grad_sgd.dp4", {"dp": 4}, bf16_step_dp, (rep(P14), P("dp"), P("dp")),
       (rep(P14), P()), bf16_step, (P14, R(B14, DIN14), R(B14, DIN14)), check_vma=True,
       bugs=[("labels-no-offset", ["wrong-offset"]), ("psum-of-local-means", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 15. ArcFace the Megatron way (dp2 x tp4, check_vma=True): the target
#     cosine by take_along_axis at the clipped local index, masked to the
#     owning shard and psum'd; the margin applied to it; the target column
#     replaced; value_and_grad w.r.t. the class shard; optax.adamw on it.
OPT15 = optax.adamw(1e-2, weight_decay=1e-3)


def arc2_loss(w, x, lab):
    lab = lab % C4
    cos = l2n(x) @ colnorm(w)
    ct = jnp.take_along_axis(cos, lab[:, None], 1)[:, 0]
    lg = S4 * jnp.where(jnp.arange(C4)[None] == lab[:, None], arc_phi(ct)[:, None], cos)
    return jnp.mean(jax.nn.logsumexp(lg, -1) - S4 * arc_phi(ct))


def arc2_step(w, st, x, lab):
    loss, g = jax.value_and_grad(arc2_loss)(w, x, lab)
    u, st = OPT15.update(g, st, w)
    return optax.apply_updates(w, u), st, loss


def arc2_step_tp(bug):
    def f(w, st, x, lab):
        lab = lab % C4
        cl = w.shape[1]

        def loss_fn(w):
            cos = l2n(x) @ colnorm(w)
            local = lab - (idx("dp") if bug == "class-offset-from-dp" else idx("tp")) * cl
            inr = (local >= 0) & (local < cl)
            ct = jnp.take_along_axis(cos, jnp.clip(local, 0, cl - 1)[:, None], 1)[:, 0]
            if bug != "target-unmasked":
                ct = jnp.where(inr, ct, 0.0)
            ct = psum(ct, "tp")
            lg = S4 * jnp.where(jnp.arange(cl)[None] == local[:, None], arc_phi(ct)[:, None], cos)
            mx = pmax(lax.stop_gradient(jnp.max(lg, -1)), "tp")
            lse = jnp.log(psum(jnp.sum(jnp.exp(lg - mx[:, None]), -1), "tp")) + mx
            return pmean(jnp.mean(lse - S4 * arc_phi(ct)), "dp")
        loss, g = jax.value_and_grad(loss_fn)(w)
        u, st = OPT15.update(g, st, w)
        return optax.apply_updates(w, u), st, loss
    return f


W15 = R(D4, C4)
S15 = OPT15.init(W15)
SS15 = jax.tree.map(lambda a: P(None, "tp") if np.ndim(a) == 2 else P(), S15)
C.smap("s.arcface_megatron_target_gather_adamw.dp2xtp4", {"dp": 2, "tp": 4}, arc2_step_tp,
       (P(None, "tp"), SS15, P("dp"), P("dp")), (P(None, "tp"), SS15, P()), arc2_step,
       (W15, S15, R(B4, D4), I(0, C4, B4)), check_vma=True,
       bugs=[("target-unmasked", ["wrong-offset"]), ("class-offset-from-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 16. supervised contrastive (SupCon) loss across devices (dp4): embeddings
#     and labels (mod 4) all_gather'd, self logits knocked out with
#     .at[rows, global cols].set, several positives per row averaged.
B16, E16, NC16, T16 = 16, 8, 4, 0.1


def supcon(x, lab):
    z, lab = l2n(x), lab % NC16
    n = x.shape[0]
    eye = jnp.eye(n, dtype=bool)
    s = jnp.where(eye, -1e9, z @ z.T / T16)
    logp = s - jax.nn.logsumexp(s, -1, keepdims=True)
    pos = (lab[:, None] == lab[None, :]) & ~eye
    l = -jnp.sum(jnp.where(pos, logp, 0.0), -1) / jnp.maximum(jnp.sum(pos, -1), 1)
    return jnp.mean(l)


def supcon_dp(bug):
    def f(x, lab):
        z, lab = l2n(x), lab % NC16
        bl = x.shape[0]
        za, la = lax.all_gather(z, "dp", tiled=True), lax.all_gather(lab, "dp", tiled=True)
        rows = jnp.arange(bl)
        cols = rows if bug == "self-at-local-index" else idx("dp") * bl + rows
        s = (z @ za.T / T16).at[rows, cols].set(-1e9)
        logp = s - jax.nn.logsumexp(s, -1, keepdims=True)
        self_ = jnp.zeros(s.shape, bool).at[rows, cols].set(True)
        pos = (lab[:, None] == la[None, :]) & ~self_
        if bug == "npos-own-rows":
            npos = jnp.sum(lab[:, None] == lab[None, :], -1) - 1
        else:
            npos = jnp.sum(pos, -1)
        l = -jnp.sum(jnp.where(pos, logp, 0.0), -1) / jnp.maximum(npos, 1)
        return pmean(jnp.mean(l), "dp")
    return f


C.smap("s.supcon_multi_positive_scatter_mask.dp4", {"dp": 4}, supcon_dp, (P("dp"), P("dp")), P(), supcon,
       (R(B16, E16), I(0, NC16, B16)),
       bugs=[("self-at-local-index", ["wrong-offset"]), ("npos-own-rows", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 17. a cross-batch memory (XBM) whose bank rows are over dp4: the global
#     batch's keys enqueued at rows (ptr + i) % K (wrapping round), each
#     shard scattering the rows it owns with .at[...].set(mode="drop")
#     (rows it does not own sent out of bounds), then InfoNCE against the
#     updated bank with the log-sum-exp across shards.
K17, B17, E17, T17 = 32, 8, 8, 0.2


def xbm_step(q, k, bank, ptr):
    q, k = l2n(q), l2n(k)
    ptr = ptr % K17
    bank = bank.at[(ptr + jnp.arange(B17)) % K17].set(k)
    loss = jnp.mean(jax.nn.logsumexp(q @ bank.T / T17, -1) - jnp.sum(q * k, -1) / T17)
    return loss, bank, (ptr + B17) % K17


def xbm_dp(bug):
    def f(q, k, bank, ptr):
        q, k = l2n(q), l2n(k)
        kl, bl = bank.shape[0], q.shape[0]
        ptr = ptr % K17
        qa, ka = lax.all_gather(q, "dp", tiled=True), lax.all_gather(k, "dp", tiled=True)
        local = (ptr + jnp.arange(4 * bl)) % K17 - idx("dp") * kl
        if bug != "negative-rows-wrap":
            local = jnp.where((local >= 0) & (local < kl), local, kl)
        bank = bank.at[local].set(ka, mode="drop")
        lg = qa @ bank.T / T17
        m = pmax(jnp.max(lg, -1), "dp")
        lse = jnp.log(psum(jnp.sum(jnp.exp(lg - m[:, None]), -1), "dp")) + m
        loss = jnp.mean(lse - jnp.sum(qa * ka, -1) / T17)
        step = bl if bug == "ptr-local-batch" else 4 * bl
        return loss, bank, (ptr + step) % K17
    return f


C.smap("s.xbm_bank_scatter_wraparound.dp4", {"dp": 4}, xbm_dp, (P("dp"), P("dp"), P("dp"), P()), (P(), P("dp"), P()),
       xbm_step, (R(B17, E17), R(B17, E17), l2n(R(K17, E17)), np.int32(28)),
       bugs=[("negative-rows-wrap", ["wrong-offset"]), ("ptr-local-batch", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs
# 18. DPR loss and gradients, batch over dp8
B13 = 16
C.gspmd("g.dpr_loss_grad.dp8", {"dp": 8}, (rep(P11), P("dp"), P("dp"), P("dp")), (P(), rep(P11)),
        jax.value_and_grad(dpr_loss), (P11, R(B13, DIN11), R(B13, DIN11), R(B13, DIN11)))

# 19. ArcFace loss and gradients, class columns over tp
C.gspmd("g.arcface_loss_grad_classes_tp.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp"), P("dp")),
        (P(), (P("dp"), P(None, "tp"))), jax.value_and_grad(arcface, (0, 1)),
        (R(B4, D4), R(D4, C4), I(0, C4, B4)))

# 20. Matryoshka loss, both sides P('dp', 'tp')
C.gspmd("g.matryoshka_loss.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P("dp", "tp")), (P(), P()),
        matryoshka, (R(B10, E10), R(B10, E10)))

# 21. PQ search, codebooks over tp on the subspace dim
C.gspmd("g.pq_adc_search_codebooks_tp.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P(None, "tp"), P("tp")),
        (P(None, "tp"), P("dp"), P()), pq_search, (R(BQ9, M9 * DS9), R(N9, M9 * DS9), R(M9, KC9, DS9)))

# 22. MoCo step, queue P('dp'), dynamic_update_slice at the global pointer
C.gspmd("g.moco_queue_update_sharded.dp4", {"dp": 4}, (P("dp"), P("dp"), P("dp"), P()), (P(), P("dp"), P()),
        moco_step, (R(B7, E7), R(B7, E7), l2n(R(K7, E7)), np.int32(24)))

# 23. the sharded-index search of 13. under jit, bank rows over tp8
C.gspmd("g.sharded_index_topk.tp8", {"tp": 8}, (P(), P("tp")), (P(), P()), index_search,
        (R(B13Q, E13), R(N13, E13)))

# 24. the batch-hard triplet loss of 6., batch over dp8
C.gspmd("g.triplet_batch_hard.dp8", {"dp": 8}, (P("dp"), P("dp")), (P(), P("dp"), P("dp")), batch_hard,
        (R(B6, E6), I(0, NC6, B6)))

C.finish()
