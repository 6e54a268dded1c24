"""samples/fresh29: a 29th batch of programs as a user writes them, on the theme of awkward shapes and gradient plumbing in sharded programs, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
Uneven shapes: the shard_map bodies get arrays padded by hand to a multiple
of the axis size (the data loader's padding, garbage in the padded rows,
columns or tokens) and mask the padding out of means, softmaxes and losses;
the GSPMD pairs leave dimensions not divisible by the mesh axis to XLA
(10 rows over 4 devices, vocabulary 50 over tp4, sequence 30 over sp4,
hidden 36 over tp8, 30 codes over tp4). Gradient plumbing: custom_vjp and
custom_jvp rules with collectives inside shard_map bodies, straight-through
estimators, clipping in the backward pass, jax.checkpoint policies,
stop_gradient placements, value_and_grad with has_aux, jax.vjp.
shard_map families:
 1. a classifier loss and its gradient (value_and_grad, check_vma=True) on
    a batch of 10 rows padded to 12 over dp4: the valid rows picked by
    global row id (axis_index * rows + local id) < 10, the mean as
    psum / psum. Bugs: padding rows counted in the denominator, the mask
    from local row ids (every local row valid), the padding assumed at the
    front of the batch.
 2. label-smoothed cross-entropy over a vocabulary of 50 padded to 52
    (13 columns per tp rank, dp2 x tp4), the padded columns masked to
    -1e30 before the pmax / psum log-sum-exp and left out of the smoothing
    mean; the target by a masked one_hot; value and gradient in the
    hidden states (check_vma=True). Bugs: padded columns in the
    log-sum-exp, smoothing mean over the padded vocabulary, every rank
    masking its last columns as the last rank must.
 3. bidirectional attention over a sequence of 30 padded to 32 (sp4): keys
    and values all_gather'd, padded keys masked by global position,
    padded query rows zeroed. Bugs: padded keys attended, query padding
    found from local positions.
 4. ragged batch (per-row valid lengths) with batch over dp and sequence
    over sp: masked mean pooling (psum of sums over psum of counts,
    counts at least 1) and a linear head. Bugs: the length mask from local
    positions, the pmean of per-device means, the full length as
    denominator.
 5. Megatron's f / g operators written as custom_vjp (f: identity forward,
    psum backward; g: psum forward, identity backward) around a
    column/row-parallel MLP; the loss and its gradients in (x, w1, w2) by
    jax.value_and_grad inside the body (check_vma=False). Bugs: f's
    backward without the psum, g's backward psum'ing again.
 6. a fake-quantised linear layer (int4 weights) trained with a clipped
    straight-through estimator (custom_vjp: the gradient passes where
    |w/s| <= 7), data over dp4, gradients psum'd by hand, one SGD step.
    Bugs: the estimator's mask inverted (gradient only where clipped),
    the gradients not reduced, jnp.round without an estimator.
 7. a custom_vjp that clips the cotangent of a batch-sharded activation
    by its global norm in the backward pass (norm psum'd over dp), inside
    a two-layer regression with the loss a global mean and the weight
    gradients psum'd by hand. Bugs: the backward's norm local (no psum),
    psum'd twice.
 8. a custom_vjp softmax cross-entropy over vocab-sharded logits
    (dp2 x tp4): forward with pmax / psum and the target by the rank's
    vocab offset, residuals the probabilities and the one-hot, backward
    (p - onehot) * g; gradients in the hidden states psum'd over tp and in
    the head over dp by hand. Bugs: backward psum'ing the logit
    cotangent over tp, one-hot without the vocab offset, hidden-state
    gradient not psum'd.
 9. RMSNorm over a tp-sharded hidden dimension as a custom_jvp (its rule
    psums the tangent's dot with x), then a gain and a SiLU; the body
    returns jax.jvp of it. Bugs: the rule's mean(x * dx) local, the
    rule's tangent of the gain term dropped.
10. three residual tensor-parallel MLP layers scanned under jax.checkpoint
    with a save_only_these_names policy (checkpoint_name on the
    row-parallel psum), loss and gradients by value_and_grad
    (check_vma=True). Bugs: stop_gradient on the residual stream (no
    gradient to earlier layers), the row-parallel output pmean'd.
11. VQ-VAE with the codebook sharded over tp4: the nearest code by a pmin
    of local minima, the chosen code psum'd from its owner, the
    straight-through z + stop_gradient(z_q - z), the codebook and
    commitment losses with stop_gradient on opposite sides; gradients in
    encoder, decoder and codebook (check_vma=True). Bugs: the
    straight-through on the wrong branch, the commitment stop_gradient
    swapped, winners from local minima (no pmin).
12. jax.value_and_grad(has_aux=True) of a token loss on a ragged batch
    (per-row lengths, batch over dp4, check_vma=True), aux the accuracy
    and the token count through psums. Bugs: accuracy as the pmean of
    per-device accuracies, the loss summing padded tokens.
13. jax.vjp of a tensor-parallel block inside the body (check_vma=False):
    column-parallel up projection, row-parallel down projection psum'd,
    the output and the pulled-back cotangents returned, the input's
    cotangent psum'd by hand. Bugs: the input's cotangent not psum'd,
    the weights' cotangents psum'd.
14. a chunked prefix sum along the sequence (sp4, 6 tokens a device):
    the block zero-padded by hand to a multiple of the chunk size, a
    lax.scan over chunks, the padding sliced off, the devices' totals
    all_gather'd into an exclusive prefix. Bugs: the padding sliced from
    the front, the padding put at the front.
15. last-token pooling of a right-padded ragged batch, sequence over sp4:
    the token at len - 1 (clamped) picked by its owner device with a
    masked one-hot and psum'd. Bugs: the length used as the index, the
    owner test on local indices.
16. domain-adversarial training under FSDP (dp4, check_vma=True): weights
    all_gather'd inside a jax.checkpoint (dots_with_no_batch_dims_saveable),
    a gradient-reversal custom_vjp before the domain head, the losses
    pmean'd over dp; value_and_grad. Bugs: the reversal dropped (plain
    identity), the loss psum'd instead of pmean'd.
GSPMD pairs (jax.jit with in/out shardings, shapes not divisible by the
axis): 17. a classifier's loss and gradient, 10 rows over dp4; 18.
label-smoothed cross-entropy with vocabulary 50 over tp4 (dp2 x tp4) and
its gradient; 19. bidirectional attention with sequence 30 over sp4; 20.
an SGD step of a fake-quantised two-layer MLP (straight-through
custom_vjp, jax.checkpoint) with hidden 36 over tp8; 21. ragged mean
pooling with 6 rows over dp4 and 30 tokens over sp2; 22. a VQ step with
30 codes over tp4 (value_and_grad, straight-through).
Numerics: every correct pair agrees with its baseline at rounding level;
every bug variant differs clearly (see "numerics").
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh29.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
from functools import partial
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
from jax.ad_checkpoint import checkpoint_name
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh29.sh)
from fresh_lib import Corpus, seeded  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402

SCRIPT = "samples/gen/fresh29.py"
C = Corpus("samples/fresh29", SCRIPT, "samples/gen/run_fresh29.sh", sys.argv[1:])
rng, R, I = seeded(2929)
psum, pmax, pmin, pmean, idx = lax.psum, lax.pmax, lax.pmin, lax.pmean, lax.axis_index
NEG = -1e30

# ---------------------------------------------------------------------------
# 1. 10 rows padded to 12, rows over dp4 (3 per device).
N1, NP1, D1, K1 = 10, 12, 16, 6


def rows_loss(x, w, y):
    def loss(w):
        lg = x[:N1] @ w
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, y[:N1]))
    return jax.value_and_grad(loss)(w)


def rows_loss_dp(bug):
    def f(x, w, y):
        rl = x.shape[0]
        lid = jnp.arange(rl)
        gid = idx("dp") * rl + lid
        if bug == "mask-from-local-row-ids":
            valid = lid < N1
        elif bug == "padding-assumed-at-front":
            valid = gid >= NP1 - N1
        else:
            valid = gid < N1
        valid = valid.astype(jnp.float32)

        def loss(w):
            ce = optax.softmax_cross_entropy_with_integer_labels(x @ w, y)
            den = psum(jnp.float32(rl), "dp") if bug == "padding-in-denominator" else psum(valid.sum(), "dp")
            return psum(jnp.sum(ce * valid), "dp") / den
        return jax.value_and_grad(loss)(w)
    return f


C.smap("s.padded_rows_masked_ce_grad.dp4", {"dp": 4}, rows_loss_dp, (P("dp"), P(), P("dp")), (P(), P()), rows_loss,
       (R(NP1, D1), R(D1, K1, scale=0.5), I(0, K1, NP1)),
       bugs=[("padding-in-denominator", ["wrong-scale"]), ("mask-from-local-row-ids", ["wrong-offset"]),
             ("padding-assumed-at-front", ["wrong-offset"])], check_vma=True)

# ---------------------------------------------------------------------------
# 2. vocabulary 50 padded to 52 (13 per tp rank), label smoothing.
V2, VP2, D2, EPS2 = 50, 52, 16, 0.3


def smooth_ce(h, w, y):
    def loss(h):
        lg = h @ w[:, :V2]
        lse = jax.nn.logsumexp(lg, -1)
        tgt = jnp.sum(lg * jax.nn.one_hot(y, V2), -1)
        return jnp.mean(lse - (1 - EPS2) * tgt - EPS2 * jnp.mean(lg, -1))
    return jax.value_and_grad(loss)(h)


def smooth_ce_tp(bug):
    def f(h, w, y):
        vl, tp = w.shape[1], 4
        col = idx("tp") * vl + jnp.arange(vl)
        if bug == "every-rank-masks-last-cols":
            valid = jnp.arange(vl) < vl - (tp * vl - V2)
        else:
            valid = col < V2

        def loss(h):
            lg = h @ w
            lgm = lg if bug == "pad-cols-in-logsumexp" else jnp.where(valid, lg, NEG)
            m = pmax(lax.stop_gradient(lgm.max(-1)), "tp")
            lse = jnp.log(psum(jnp.exp(lgm - m[:, None]).sum(-1), "tp")) + m
            oh = jnp.where(valid, jax.nn.one_hot(y - idx("tp") * vl, vl), 0.0)
            tgt = psum(jnp.sum(lg * oh, -1), "tp")
            if bug == "smoothing-over-padded-vocab":
                smooth = psum(lg.sum(-1), "tp") / VP2
            else:
                smooth = psum(jnp.where(valid, lg, 0.0).sum(-1), "tp") / V2
            tok = lse - (1 - EPS2) * tgt - EPS2 * smooth
            return psum(jnp.sum(tok), "dp") / (h.shape[0] * 2)
        return jax.value_and_grad(loss)(h)
    return f


C.smap("s.vocab50_padded_smoothed_ce.dp2xtp4", {"dp": 2, "tp": 4}, smooth_ce_tp, (P("dp"), P(None, "tp"), P("dp")),
       (P(), P("dp")), smooth_ce, (R(8, D2), R(D2, VP2, scale=0.5), I(0, V2, 8)),
       bugs=[("pad-cols-in-logsumexp", ["wrong-offset"]), ("smoothing-over-padded-vocab", ["wrong-scale"]),
             ("every-rank-masks-last-cols", ["wrong-offset"])], check_vma=True)

# ---------------------------------------------------------------------------
# 3. sequence 30 padded to 32 over sp4: bidirectional attention.
L3, LP3, H3, E3 = 30, 32, 2, 8


def attn(q, k, v, ok=None):
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) * (q.shape[-1] ** -0.5)
    if ok is not None:
        s = jnp.where(ok, s, NEG)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def enc_attn(q, k, v):
    o = attn(q[:, :L3], k[:, :L3], v[:, :L3])
    return jnp.pad(o, ((0, 0), (0, LP3 - L3), (0, 0), (0, 0)))


def enc_attn_sp(bug):
    def f(q, k, v):
        tl = q.shape[1]
        kk = lax.all_gather(k, "sp", axis=1, tiled=True)
        vv = lax.all_gather(v, "sp", axis=1, tiled=True)
        kpos = jnp.arange(kk.shape[1])
        ok = None if bug == "pad-keys-attended" else (kpos < L3)[None, None, None, :]
        o = attn(q, kk, vv, ok)
        qpos = jnp.arange(tl) if bug == "query-pad-from-local-pos" else idx("sp") * tl + jnp.arange(tl)
        return jnp.where((qpos < L3)[None, :, None, None], o, 0.0)
    return f


C.smap("s.seq30_padded_encoder_attn.sp4", {"sp": 4}, enc_attn_sp, (P(None, "sp"),) * 3, P(None, "sp"), enc_attn,
       (R(2, LP3, H3, E3), R(2, LP3, H3, E3), R(2, LP3, H3, E3)),
       bugs=[("pad-keys-attended", ["wrong-offset"]), ("query-pad-from-local-pos", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 4. ragged batch, masked mean pooling, batch over dp, sequence over sp.
T4, D4, K4 = 16, 8, 5


def pool_head(x, lens, w):
    ok = (jnp.arange(x.shape[1])[None, :] < lens[:, None]).astype(x.dtype)
    cnt = jnp.maximum(ok.sum(1, keepdims=True), 1.0)
    return (jnp.einsum("btd,bt->bd", x, ok) / cnt) @ w


def pool_head_sp(bug):
    def f(x, lens, w):
        tl = x.shape[1]
        t = jnp.arange(tl) if bug == "mask-local-positions" else idx("sp") * tl + jnp.arange(tl)
        ok = (t[None, :] < lens[:, None]).astype(x.dtype)
        s = jnp.einsum("btd,bt->bd", x, ok)
        if bug == "pmean-of-local-means":
            pooled = pmean(s / jnp.maximum(ok.sum(1, keepdims=True), 1.0), "sp")
        elif bug == "full-length-denominator":
            pooled = psum(s, "sp") / T4
        else:
            pooled = psum(s, "sp") / jnp.maximum(psum(ok.sum(1, keepdims=True), "sp"), 1.0)
        return pooled @ w
    return f


C.smap("s.ragged_meanpool_head.dp2xsp4", {"dp": 2, "sp": 4}, pool_head_sp, (P("dp", "sp"), P("dp"), P()), P("dp"),
       pool_head, (R(4, T4, D4), np.array([16, 3, 9, 6], np.int32), R(D4, K4)),
       bugs=[("mask-local-positions", ["wrong-offset"]), ("pmean-of-local-means", ["wrong-collective-op"]),
             ("full-length-denominator", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 5. Megatron f / g as custom_vjp around a column / row parallel MLP.
D5, F5 = 8, 32


def mlp5(x, w1, w2, t):
    def loss(x, w1, w2):
        y = jax.nn.gelu(x @ w1) @ w2
        return jnp.mean(jnp.square(y - t))
    return jax.value_and_grad(loss, (0, 1, 2))(x, w1, w2)


def mlp5_tp(bug):
    @jax.custom_vjp
    def f_op(x):
        return x

    def f_fwd(x):
        return x, None

    def f_bwd(_, g):
        return (g if bug == "f-bwd-no-psum" else psum(g, "tp"),)
    f_op.defvjp(f_fwd, f_bwd)

    @jax.custom_vjp
    def g_op(x):
        return psum(x, "tp")

    def g_fwd(x):
        return psum(x, "tp"), None

    def g_bwd(_, g):
        return (psum(g, "tp") if bug == "g-bwd-psums-again" else g,)
    g_op.defvjp(g_fwd, g_bwd)

    def body(x, w1, w2, t):
        def loss(x, w1, w2):
            y = g_op(jax.nn.gelu(f_op(x) @ w1) @ w2)
            return jnp.mean(jnp.square(y - t))
        return jax.value_and_grad(loss, (0, 1, 2))(x, w1, w2)
    return body


C.smap("s.megatron_fg_custom_vjp_mlp.tp4", {"tp": 4}, mlp5_tp, (P(), P(None, "tp"), P("tp"), P()),
       (P(), (P(), P(None, "tp"), P("tp"))), mlp5, (R(6, D5), R(D5, F5, scale=0.4), R(F5, D5, scale=0.4), R(6, D5)),
       bugs=[("f-bwd-no-psum", ["missing-all-reduce"]), ("g-bwd-psums-again", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 6. fake-quantised linear with a clipped straight-through estimator, dp4.
S6, Q6, LR6 = 0.2, 7.0, 2.0


def make_fq(ste_bug=None):
    @jax.custom_vjp
    def fq(w):
        return jnp.round(jnp.clip(w / S6, -Q6, Q6)) * S6

    def fwd(w):
        return fq(w), w

    def bwd(w, g):
        inside = jnp.abs(w / S6) <= Q6
        return (jnp.where(~inside if ste_bug else inside, g, 0.0),)
    fq.defvjp(fwd, bwd)
    return fq


FQ = make_fq()


def qstep(w, b, x, y):
    def loss(w, b):
        return jnp.mean(jnp.square(jnp.tanh(x @ FQ(w) + b) - y))
    l, (gw, gb) = jax.value_and_grad(loss, (0, 1))(w, b)
    return w - LR6 * gw, b - LR6 * gb, l


def qstep_dp(bug):
    fq = make_fq(bug == "ste-mask-inverted")
    if bug == "round-without-ste":
        def fq(w):
            return jnp.round(jnp.clip(w / S6, -Q6, Q6)) * S6

    def f(w, b, x, y):
        n = x.shape[0] * 4 * y.shape[1]

        def loss(w, b):
            return jnp.sum(jnp.square(jnp.tanh(x @ fq(w) + b) - y)) / n
        l, (gw, gb) = jax.value_and_grad(loss, (0, 1))(w, b)
        if bug != "grads-not-reduced":
            gw, gb = psum(gw, "dp"), psum(gb, "dp")
        return w - LR6 * gw, b - LR6 * gb, psum(l, "dp")
    return f


C.smap("s.int4_ste_linear_sgd.dp4", {"dp": 4}, qstep_dp, (P(), P(), P("dp"), P("dp")), (P(), P(), P()), qstep,
       (R(12, 8, scale=0.8), R(8, scale=0.1), R(16, 12), R(16, 8, scale=0.5)),
       bugs=[("ste-mask-inverted", ["wrong-offset"]), ("grads-not-reduced", ["missing-all-reduce"]),
             ("round-without-ste", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. backward-pass clipping of a batch-sharded activation's cotangent by
#    its global norm (custom_vjp).
CLIP7 = 0.05


def make_clip(axis=None, bug=None):
    @jax.custom_vjp
    def clipg(h):
        return h

    def fwd(h):
        return h, None

    def bwd(_, g):
        sq = jnp.sum(jnp.square(g))
        if axis is not None and bug != "bwd-norm-local":
            sq = psum(sq, axis)
            if bug == "bwd-norm-psummed-twice":
                sq = psum(sq, axis)
        return (g * jnp.minimum(1.0, CLIP7 / jnp.sqrt(sq)),)
    clipg.defvjp(fwd, bwd)
    return clipg


def reg7(x, w1, w2, y):
    cl = make_clip()

    def loss(w1, w2):
        h = cl(x @ w1)
        return jnp.mean(jnp.square(jnp.tanh(h) @ w2 - y))
    return jax.value_and_grad(loss, (0, 1))(w1, w2)


def reg7_dp(bug):
    cl = make_clip("dp", bug)

    def f(x, w1, w2, y):
        n = x.shape[0] * 4 * y.shape[1]

        def loss(w1, w2):
            h = cl(x @ w1)
            return jnp.sum(jnp.square(jnp.tanh(h) @ w2 - y)) / n
        l, (g1, g2) = jax.value_and_grad(loss, (0, 1))(w1, w2)
        return psum(l, "dp"), (psum(g1, "dp"), psum(g2, "dp"))
    return f


C.smap("s.cotangent_global_norm_clip_custom_vjp.dp4", {"dp": 4}, reg7_dp, (P("dp"), P(), P(), P("dp")),
       (P(), (P(), P())), reg7, (R(16, 8), R(8, 12, scale=0.5), R(12, 4, scale=0.5), R(16, 4)),
       bugs=[("bwd-norm-local", ["missing-all-reduce"]), ("bwd-norm-psummed-twice", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 8. custom_vjp softmax cross-entropy on vocab-sharded logits (dp2 x tp4).
V8, D8 = 48, 16


def ce8(h, w, y):
    def loss(h, w):
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(h @ w, y))
    return jax.value_and_grad(loss, (0, 1))(h, w)


def ce8_tp(bug):
    @jax.custom_vjp
    def xent(lg, y):
        return xent_fwd(lg, y)[0]

    def xent_fwd(lg, y):
        vl = lg.shape[-1]
        m = pmax(lg.max(-1), "tp")
        e = jnp.exp(lg - m[:, None])
        z = psum(e.sum(-1), "tp")
        off = 0 if bug == "onehot-without-offset" else idx("tp") * vl
        oh = jax.nn.one_hot(y - off, vl)
        tgt = psum(jnp.sum(lg * oh, -1), "tp")
        return jnp.log(z) + m - tgt, (e / z[:, None], oh)

    def xent_bwd(res, g):
        p, oh = res
        d = (p - oh) * g[:, None]
        if bug == "bwd-psums-logit-cotangent":
            d = psum(d, "tp")
        return d, None
    xent.defvjp(xent_fwd, xent_bwd)

    def f(h, w, y):
        n = h.shape[0] * 2

        def loss(h, w):
            return jnp.sum(xent(h @ w, y)) / n
        l, (gh, gw) = jax.value_and_grad(loss, (0, 1))(h, w)
        if bug != "hidden-grad-not-psummed":
            gh = psum(gh, "tp")
        return psum(l, "dp"), (gh, psum(gw, "dp"))
    return f


C.smap("s.custom_vjp_vocab_parallel_xent.dp2xtp4", {"dp": 2, "tp": 4}, ce8_tp, (P("dp"), P(None, "tp"), P("dp")),
       (P(), (P("dp"), P(None, "tp"))), ce8, (R(8, D8), R(D8, V8, scale=0.5), I(0, V8, 8)),
       bugs=[("bwd-psums-logit-cotangent", ["wrong-collective-op"]), ("onehot-without-offset", ["wrong-offset"]),
             ("hidden-grad-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 9. RMSNorm over a tp-sharded hidden dim as a custom_jvp, jax.jvp of it.
D9, EPS9 = 32, 1e-5


def make_rms(axis=None, nd=D9, bug=None):
    red = (lambda a: psum(a, axis)) if axis else (lambda a: a)

    @jax.custom_jvp
    def rmsn(x, g):
        r = lax.rsqrt(red(jnp.sum(x * x, -1, keepdims=True)) / nd + EPS9)
        return x * r * g

    @rmsn.defjvp
    def rmsn_jvp(primals, tangents):
        x, g = primals
        dx, dg = tangents
        r = lax.rsqrt(red(jnp.sum(x * x, -1, keepdims=True)) / nd + EPS9)
        xd = jnp.sum(x * dx, -1, keepdims=True)
        xd = xd if bug == "rule-mean-local" else red(xd)
        dy = (dx * r - x * r ** 3 * xd / nd) * g
        if bug != "rule-drops-gain-tangent":
            dy = dy + x * r * dg
        return x * r * g, dy
    return rmsn


RMS9 = make_rms()


def rms_jvp(x, g, dx, dg):
    return jax.jvp(lambda x, g: jax.nn.silu(RMS9(x, g)), (x, g), (dx, dg))


def rms_jvp_tp(bug):
    rm = make_rms("tp", D9, bug)

    def f(x, g, dx, dg):
        return jax.jvp(lambda x, g: jax.nn.silu(rm(x, g)), (x, g), (dx, dg))
    return f


C.smap("s.custom_jvp_rmsnorm_sharded_hidden.tp4", {"tp": 4}, rms_jvp_tp, (P(None, "tp"), P("tp")) * 2,
       (P(None, "tp"), P(None, "tp")), rms_jvp, (R(6, D9), 1.0 + R(D9, scale=0.2), R(6, D9), R(D9)),
       bugs=[("rule-mean-local", ["missing-all-reduce"]), ("rule-drops-gain-tangent", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 10. three residual TP MLP layers scanned under jax.checkpoint with a
#     save_only_these_names policy.
D10, F10, NL10 = 8, 16, 3
POL10 = jax.checkpoint_policies.save_only_these_names("mlp_out")


def stack10(x, w1, w2, y):
    def loss(w1, w2):
        @partial(jax.checkpoint, policy=POL10)
        def layer(h, w):
            a, b = w
            return h + checkpoint_name(jnp.tanh(h @ a) @ b, "mlp_out"), None
        h, _ = lax.scan(layer, x, (w1, w2))
        return jnp.mean(jnp.square(h - y))
    return jax.value_and_grad(loss, (0, 1))(w1, w2)


def stack10_tp(bug):
    def f(x, w1, w2, y):
        def loss(w1, w2):
            @partial(jax.checkpoint, policy=POL10)
            def layer(h, w):
                a, b = w
                part = jnp.tanh(h @ a) @ b
                out = pmean(part, "tp") if bug == "row-parallel-pmean" else psum(part, "tp")
                res = lax.stop_gradient(h) if bug == "stop-gradient-on-residual" else h
                return res + checkpoint_name(out, "mlp_out"), None
            h, _ = lax.scan(layer, x, (w1, w2))
            return jnp.mean(jnp.square(h - y))
        return jax.value_and_grad(loss, (0, 1))(w1, w2)
    return f


C.smap("s.remat_scan_tp_mlp_save_names.tp4", {"tp": 4}, stack10_tp, (P(), P(None, None, "tp"), P(None, "tp"), P()),
       (P(), (P(None, None, "tp"), P(None, "tp"))), stack10,
       (R(6, D10), R(NL10, D10, F10, scale=0.4), R(NL10, F10, D10, scale=0.4), R(6, D10)),
       bugs=[("stop-gradient-on-residual", ["wrong-scale"]), ("row-parallel-pmean", ["wrong-collective-op"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 11. VQ-VAE, codebook over tp4, straight-through estimator.
D11, Z11, K11, BETA = 12, 4, 32, 0.25


def vq(x, we, wd, cb):
    def loss(we, wd, cb):
        z = x @ we
        d = jnp.sum(jnp.square(z[:, None, :] - cb[None]), -1)
        zq = cb[jnp.argmin(d, -1)]
        st = z + lax.stop_gradient(zq - z)
        rec = jnp.mean(jnp.square(st @ wd - x))
        return rec + jnp.mean(jnp.square(lax.stop_gradient(z) - zq)) + BETA * jnp.mean(
            jnp.square(z - lax.stop_gradient(zq)))
    return jax.value_and_grad(loss, (0, 1, 2))(we, wd, cb)


def vq_tp(bug):
    def f(x, we, wd, cb):
        def loss(we, wd, cb):
            z = x @ we
            d = jnp.sum(jnp.square(z[:, None, :] - cb[None]), -1)
            dl = lax.stop_gradient(d.min(-1))
            win = dl <= (dl if bug == "winner-from-local-min" else pmin(dl, "tp"))
            zq = psum(jnp.where(win[:, None], cb[jnp.argmin(d, -1)], 0.0), "tp")
            if bug == "st-wrong-branch":
                st = zq + lax.stop_gradient(z - zq)
            else:
                st = z + lax.stop_gradient(zq - z)
            rec = jnp.mean(jnp.square(st @ wd - x))
            if bug == "commit-stop-gradient-swapped":
                commit = BETA * jnp.mean(jnp.square(lax.stop_gradient(z) - zq))
            else:
                commit = BETA * jnp.mean(jnp.square(z - lax.stop_gradient(zq)))
            return rec + jnp.mean(jnp.square(lax.stop_gradient(z) - zq)) + commit
        return jax.value_and_grad(loss, (0, 1, 2))(we, wd, cb)
    return f


C.smap("s.vq_codebook_tp_straight_through.tp4", {"tp": 4}, vq_tp, (P(), P(), P(), P("tp")),
       (P(), (P(), P(), P("tp"))), vq, (R(10, D11), R(D11, Z11, scale=0.4), R(Z11, D11, scale=0.4), R(K11, Z11)),
       bugs=[("st-wrong-branch", ["wrong-offset"]), ("commit-stop-gradient-swapped", ["wrong-scale"]),
             ("winner-from-local-min", ["missing-all-reduce"])], check_vma=True)

# ---------------------------------------------------------------------------
# 12. value_and_grad(has_aux=True) of a token loss on a ragged batch.
V12, D12, T12 = 12, 8, 6


def tok_loss(emb, w, tok, tgt, lens):
    def loss(emb, w):
        ok = (jnp.arange(T12)[None, :] < lens[:, None]).astype(jnp.float32)
        lg = jnp.tanh(emb[tok]) @ w
        ce = optax.softmax_cross_entropy_with_integer_labels(lg, tgt)
        n = jnp.maximum(ok.sum(), 1.0)
        acc = jnp.sum((jnp.argmax(lg, -1) == tgt) * ok) / n
        return jnp.sum(ce * ok) / n, {"acc": acc, "ntok": ok.sum()}
    return jax.value_and_grad(loss, (0, 1), has_aux=True)(emb, w)


def tok_loss_dp(bug):
    def f(emb, w, tok, tgt, lens):
        def loss(emb, w):
            ok = (jnp.arange(T12)[None, :] < lens[:, None]).astype(jnp.float32)
            lg = jnp.tanh(emb[tok]) @ w
            ce = optax.softmax_cross_entropy_with_integer_labels(lg, tgt)
            n = jnp.maximum(psum(ok.sum(), "dp"), 1.0)
            hits = jnp.sum((jnp.argmax(lg, -1) == tgt) * ok)
            if bug == "acc-pmean-of-local":
                acc = pmean(hits / jnp.maximum(ok.sum(), 1.0), "dp")
            else:
                acc = psum(hits, "dp") / n
            num = jnp.sum(ce) if bug == "loss-sums-padded-tokens" else jnp.sum(ce * ok)
            return psum(num, "dp") / n, {"acc": acc, "ntok": psum(ok.sum(), "dp")}
        return jax.value_and_grad(loss, (0, 1), has_aux=True)(emb, w)
    return f


C.smap("s.value_and_grad_has_aux_ragged_tokens.dp4", {"dp": 4}, tok_loss_dp, (P(), P(), P("dp"), P("dp"), P("dp")),
       ((P(), {"acc": P(), "ntok": P()}), (P(), P())), tok_loss,
       (R(V12, D12), R(D12, V12, scale=0.6), I(0, V12, 8, T12), I(0, V12, 8, T12),
        np.array([6, 2, 4, 1, 5, 3, 6, 2], np.int32)),
       bugs=[("acc-pmean-of-local", ["wrong-collective-op"]), ("loss-sums-padded-tokens", ["wrong-offset"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 13. jax.vjp of a TP block inside the body (check_vma=False).
D13, F13 = 8, 24


def blk13(x, w1, w2):
    return x + jax.nn.relu(x @ w1) @ w2


def vjp13(x, w1, w2, ct):
    y, pull = jax.vjp(blk13, x, w1, w2)
    return y, pull(ct)


def vjp13_tp(bug):
    def f(x, w1, w2, ct):
        def local(x, w1, w2):
            return jax.nn.relu(x @ w1) @ w2
        part, pull = jax.vjp(local, x, w1, w2)
        y = x + psum(part, "tp")
        dx, d1, d2 = pull(ct)
        if bug != "input-cotangent-not-psummed":
            dx = psum(dx, "tp")
        if bug == "weight-cotangents-psummed":
            d1, d2 = psum(d1, "tp"), psum(d2, "tp")
        return y, (dx + ct, d1, d2)
    return f


C.smap("s.jax_vjp_tp_block_manual_psum.tp4", {"tp": 4}, vjp13_tp, (P(), P(None, "tp"), P("tp"), P()),
       (P(), (P(), P(None, "tp"), P("tp"))), vjp13, (R(5, D13), R(D13, F13, scale=0.4), R(F13, D13, scale=0.4), R(5, D13)),
       bugs=[("input-cotangent-not-psummed", ["missing-all-reduce"]), ("weight-cotangents-psummed", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 14. a chunked prefix sum along the sequence (sp4, 6 tokens per device):
#     the block zero-padded by hand to a multiple of the chunk (4), a
#     lax.scan over chunks carrying the running total, the padding sliced
#     off the end, and the exclusive prefix of the devices' totals
#     (all_gather'd) added.
CH14 = 4


def prefix_sum(x):
    return jnp.cumsum(x, 1)


def chunked_cumsum_sp(bug):
    def f(x):
        b, tl, d = x.shape
        npad = -tl % CH14
        front = bug == "padded-at-front"
        xp = jnp.pad(x, ((0, 0), (npad, 0) if front else (0, npad), (0, 0)))
        chunks = jnp.moveaxis(xp.reshape(b, -1, CH14, d), 1, 0)

        def step(c, blk):
            y = c[:, None] + jnp.cumsum(blk, 1)
            return y[:, -1], y
        tot, ys = lax.scan(step, jnp.zeros((b, d), x.dtype), chunks)
        y = jnp.moveaxis(ys, 0, 1).reshape(b, -1, d)
        y = y[:, -tl:] if bug == "padding-sliced-from-front" else y[:, :tl]
        if front:
            y = y[:, :tl]
        allt = lax.all_gather(tot, "sp")  # (n, b, d)
        me = idx("sp")
        return y + jnp.sum(jnp.where((jnp.arange(4) < me)[:, None, None], allt, 0.0), 0)[:, None]
    return f


C.smap("s.chunked_cumsum_local_pad.sp4", {"sp": 4}, chunked_cumsum_sp, (P(None, "sp"),), P(None, "sp"), prefix_sum,
       (R(2, 24, 4),),
       bugs=[("padding-sliced-from-front", ["wrong-offset"]), ("padded-at-front", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 15. last-token pooling of a right-padded ragged batch, sequence over sp4:
#     the token at min(len, T) - 1 (clamped at 0) taken by its owner device
#     (a masked one-hot contraction) and psum'd, then a projection.
T15, D15 = 16, 8


def last_tok(h, lens, w):
    i = jnp.clip(lens - 1, 0, T15 - 1)
    return jnp.take_along_axis(h, i[:, None, None], 1)[:, 0] @ w


def last_tok_sp(bug):
    def f(h, lens, w):
        tl = h.shape[1]
        i = jnp.clip(lens if bug == "index-is-length" else lens - 1, 0, T15 - 1)
        off = 0 if bug == "owner-from-local-index" else idx("sp") * tl
        sel = jax.nn.one_hot(i - off, tl, dtype=h.dtype)
        return psum(jnp.einsum("btd,bt->bd", h, sel), "sp") @ w
    return f


C.smap("s.last_token_pool_ragged.sp4", {"sp": 4}, last_tok_sp, (P(None, "sp"), P(), P()), P(), last_tok,
       (R(5, T15, D15), np.array([16, 1, 7, 12, 4], np.int32), R(D15, 3)),
       bugs=[("index-is-length", ["wrong-offset"]), ("owner-from-local-index", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 16. domain-adversarial training under FSDP (dp4, check_vma=True): the
#     feature and head weights sharded over dp on their first dim and
#     all_gather'd inside a jax.checkpoint (dots_with_no_batch_dims_saveable)
#     so the backward re-gathers and the transpose reduce-scatters the
#     gradients; a gradient-reversal custom_vjp (identity forward, -lambda
#     times the cotangent backward) in front of the domain head; the two
#     losses pmean'd over dp.
D16, F16, LAM = 8, 16, 0.7


@jax.custom_vjp
def grad_reverse(x):
    return x


grad_reverse.defvjp(lambda x: (x, None), lambda _, g: (-LAM * g,))


def dann_loss(wf, wc, wd, x, y, dom, gather=lambda w: w, red=lambda l: l, reverse=grad_reverse):
    @partial(jax.checkpoint, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)
    def feats(wf, x):
        return jnp.tanh(x @ gather(wf))
    h = feats(wf, x)
    task = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(h @ gather(wc), y))
    adv = jnp.mean(optax.sigmoid_binary_cross_entropy(reverse(h) @ gather(wd), dom))
    return red(task + adv)


def dann(wf, wc, wd, x, y, dom):
    return jax.value_and_grad(dann_loss, (0, 1, 2))(wf, wc, wd, x, y, dom)


def dann_dp(bug):
    def f(wf, wc, wd, x, y, dom):
        def gather(w):
            return lax.all_gather(w, "dp", axis=0, tiled=True)
        red = (lambda l: psum(l, "dp")) if bug == "loss-psummed" else (lambda l: pmean(l, "dp"))
        rev = (lambda h: h) if bug == "reversal-dropped" else grad_reverse
        return jax.value_and_grad(dann_loss, (0, 1, 2))(wf, wc, wd, x, y, dom, gather, red, rev)
    return f


C.smap("s.dann_grad_reversal_fsdp_remat.dp4", {"dp": 4}, dann_dp, (P("dp"), P("dp"), P("dp"), P("dp"), P("dp"), P("dp")),
       (P(), (P("dp"), P("dp"), P("dp"))), dann,
       (R(D16, F16, scale=0.4), R(F16, 4, scale=0.4), R(F16, 1, scale=0.4), R(12, D16), I(0, 4, 12),
        (rng.random((12, 1)) < 0.5).astype(np.float32)),
       bugs=[("reversal-dropped", ["wrong-scale"]), ("loss-psummed", ["wrong-collective-op"])], check_vma=True)

# ---------------------------------------------------------------------------
# GSPMD pairs. jax.jit rejects an argument sharding that does not divide its
# dimension, so the arguments come in replicated (or evenly sharded and
# sliced) and with_sharding_constraint puts the uneven sharding on the
# activations and weights inside; XLA pads the shards.


def wsc(m, x, *spec):
    return lax.with_sharding_constraint(x, NamedSharding(m, P(*spec)))


# 17. 10 rows over dp4: classifier loss and gradient.
M14 = make_mesh({"dp": 4})


def rows10(x, w, y):
    x = wsc(M14, x, "dp")

    def loss(w):
        lg = wsc(M14, jnp.tanh(x @ w), "dp")
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, y))
    return jax.value_and_grad(loss)(w)


C.gspmd("g.rows10_ce_grad.dp4", {"dp": 4}, (P(), P(), P()), (P(), P()), rows10,
        (R(10, D1), R(D1, K1, scale=0.5), I(0, K1, 10)))

# 18. vocabulary 50 over tp4 (dp2 x tp4), label-smoothed CE and its gradient.
M15 = make_mesh({"dp": 2, "tp": 4})


def smooth_ce50(h, w, y):
    w = wsc(M15, w, None, "tp")

    def loss(h, w):
        lg = wsc(M15, h @ w, "dp", "tp")
        return jnp.mean(optax.softmax_cross_entropy(lg, optax.smooth_labels(jax.nn.one_hot(y, V2), EPS2)))
    return jax.value_and_grad(loss, (0, 1))(h, w)


C.gspmd("g.vocab50_smoothed_ce_grad.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(), P("dp")),
        (P(), (P("dp"), P())), smooth_ce50, (R(6, D2), R(D2, V2, scale=0.5), I(0, V2, 6)))

# 19. sequence 30 (a loader's 32 sliced) over sp4, bidirectional attention
#     with an output projection.
M16 = make_mesh({"sp": 4})


def enc30(q, k, v, wo):
    q, k, v = (wsc(M16, a[:, :L3], None, "sp") for a in (q, k, v))
    o = wsc(M16, attn(q, k, v), None, "sp")
    return jnp.einsum("bqhe,hed->bqd", o, wo)


C.gspmd("g.seq30_encoder_attn.sp4", {"sp": 4}, (P(None, "sp"),) * 3 + (P(),), P(), enc30,
        (R(2, LP3, H3, E3), R(2, LP3, H3, E3), R(2, LP3, H3, E3), R(H3, E3, 8, scale=0.4)))

# 20. SGD step of a fake-quantised MLP (STE custom_vjp, jax.checkpoint),
#     hidden 36 over tp8.
M17 = make_mesh({"tp": 8})


def qmlp_step(w1, w2, x, y):
    def loss(w1, w2):
        w1, w2 = wsc(M17, w1, None, "tp"), wsc(M17, w2, "tp")

        def blk(x, w1, w2):
            return jax.nn.gelu(wsc(M17, x @ FQ(w1), None, "tp")) @ FQ(w2)
        blk = jax.checkpoint(blk, policy=jax.checkpoint_policies.nothing_saveable)
        return jnp.mean(jnp.square(blk(x, w1, w2) - y))
    l, (g1, g2) = jax.value_and_grad(loss, (0, 1))(w1, w2)
    return w1 - LR6 * g1, w2 - LR6 * g2, l


C.gspmd("g.int4_ste_mlp_remat_hidden36.tp8", {"tp": 8}, (P(), P(), P(), P()), (P(), P(), P()),
        qmlp_step, (R(8, 36, scale=0.8), R(36, 8, scale=0.8), R(6, 8), R(6, 8)))

# 21. ragged mean pooling, 6 rows over dp4, 30 tokens over sp2.
M18 = make_mesh({"dp": 4, "sp": 2})


def pool18(x, lens, w):
    return pool_head(wsc(M18, x, "dp", "sp"), wsc(M18, lens, "dp"), w)


C.gspmd("g.ragged_meanpool_rows6_seq30.dp4xsp2", {"dp": 4, "sp": 2}, (P(), P(), P()), P(),
        pool18, (R(6, 30, D4), np.array([30, 1, 17, 8, 29, 12], np.int32), R(D4, K4)))

# 22. VQ step with 30 codes over tp4.
M19 = make_mesh({"tp": 4})


def vq30(x, we, wd, cb):
    return vq(x, we, wd, wsc(M19, cb, "tp"))


C.gspmd("g.vq_codes30_straight_through.tp4", {"tp": 4}, (P(), P(), P(), P()), (P(), (P(), P(), P())), vq30,
        (R(10, D11), R(D11, Z11, scale=0.4), R(Z11, D11, scale=0.4), R(30, Z11)))

C.finish()
