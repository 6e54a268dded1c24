"""samples/fresh61: a 61st batch of programs as a user writes them, on the
theme of data augmentation and batch construction inside the jitted, sharded
training step in current JAX (mixup / cutmix with partners from the global
batch, crops, flips and cutout from precomputed random inputs or per-example
keys, shuffling by a global permutation, per-channel and batch-norm
statistics over the global batch, label smoothing with mixed labels,
80/10/10 and exact-count token masking, dropout masks that agree across
tensor-parallel shards), none of them an idiom of samples/fresh .. fresh26,
probe, train or wild.
shard_map families:
 1. mixup with soft (label-smoothed) targets inside an SGD step on dp4: the
    permutation and the Beta weights precomputed on the host, the batch and
    labels all_gather'd and the device's slice of the permutation picked by
    a dynamic_slice; the loss's gradient by jax.value_and_grad in the body,
    psum'd over dp; returns the new weights, the loss and the mixed batch.
    Bugs: the partner taken from the local shard (permutation modulo the
    local batch), the weight lam on the own example only (partner term not
    scaled by 1 - lam), the labels left unmixed.
 2. CutMix with the partner "next example of the global batch" (a roll by
    one across device boundaries: the next device's first image by a cyclic
    ppermute), boxes (top, left, height, width) precomputed per example and
    clipped to the 8 x 6 image as timm does, label weights from the pasted
    area. Bugs: the roll wrapping inside the local shard, the ppermute in
    the wrong direction, the box's rows and columns swapped.
 3. random crop (8 x 6 out of 10 x 8, NCHW) and horizontal flip from
    precomputed random inputs: the offsets a replicated global (B, 2) array
    sliced at the device's rows, the flip flags sharded with the batch.
    Bugs: offsets sliced at row 0, the flip on the height axis, the two
    offsets swapped.
 4. crop and flip from per-example keys: one replicated base key folded
    with the global example index (jax.random.fold_in), split into crop and
    flip subkeys, all under a vmap over the local batch. Bugs: the local
    example index (no axis_index offset), the flip on the height axis.
 5. batch shuffling by a global permutation without an all_gather: each
    device builds the one-hot (B, local) selection of its own rows, the
    products psum_scatter'd back into batch blocks (features and per-example
    weights); the baseline is jnp.take. Bugs: the inverse permutation
    (scatter instead of gather), the one-hot without the device's row
    offset, a psum followed by the block at offset 0.
 6. per-channel normalisation of NHWC images over dp2 x sp4 (batch over dp,
    height over sp) with the global mean and variance (sums psum'd over both
    axes, two-pass variance), affine gains; also returns the statistics.
    Bugs: sums psum'd over dp only, the variance as the pmean of the local
    variances (each about its local mean), the mean divided by the local
    element count.
 7. label smoothing with mixed labels (lam * smooth(y_a) + (1 - lam) *
    smooth(y_b)) on vocabulary-parallel logits (classes over tp4, batch
    over dp2): log-sum-exp by pmax / psum, the two target logits picked in
    the device's class range and psum'd, the uniform term from the psum'd
    logit sum. Bugs: lam on the first target only, the smoothing mean over
    the local class count, y_b without the class offset.
 8. BERT 15% masking with 80/10/10 replacement from precomputed global
    random tensors (selection uniforms, kind uniforms, random tokens)
    replicated and sliced by each device at its (row, column) block of the
    (dp2 x sp4)-sharded tokens; special tokens never masked; returns the
    corrupted tokens, the labels (-100 unmasked) and the global masked
    count. Bugs: the column offset from the dp index, the random tokens
    sliced at the origin, the count psum'd over dp only.
 9. dropout in a Megatron MLP (dp2 x tp4) that must agree across the
    tensor-parallel shards: both masks drawn from the step key at the
    global shape (jax.random.bernoulli) and sliced, the hidden mask at the
    device's (row, column) block, the output mask (after the psum over tp)
    at its rows only. Bugs: the hidden mask at column 0, the output mask's
    key folded with the tp index (masks disagree across tp), the output
    mask drawn at the local shape.
10. an MLM loss on dp4 with jax.grad through the body: the embeddings of
    the corrupted tokens, a tied output projection, cross-entropy weighted
    by float mask weights (BERT's masked_lm_weights), divided by the global
    weight sum (psum / psum), the gradients psum'd. Bugs: the mean of
    per-device means, the embedding gradient not psum'd.
11. per-example horizontal flip with the width sharded over sp (dp2 x
    sp4): each device reverses its block and swaps it with the mirror
    device (ppermute i -> n-1-i). Bugs: no exchange, no local reverse, a
    cyclic shift instead of the mirror.
12. a strided batch shuffle (new example i = old example (i % n) * b +
    i // n) by one all_to_all over dp4; the baseline a reshape / swapaxes.
    Bugs: no all_to_all, the rows reversed after it.
13. random crop from precomputed offsets with the height over sp (dp2 x
    sp4): the height all_gather'd, each device cutting only its rows of the
    crop (offset clamped first as the whole-crop dynamic_slice would).
    Bugs: no device row offset, the offset scaled by the input block height.
14. 80/10/10 masking with uniforms and random ids drawn from a key at the
    global shape and sliced at the device's (row, column) block. Bugs: the
    keys folded with the device index, the ids drawn at the local shape.
15. cutout with per-example rectangles, width over sp: the rectangle
    clipped to the whole image and compared with global column indices,
    the per-channel fill. Bugs: local column indices, clipped to the local
    width.
16. exactly K masked tokens per row (the K smallest noise values, ties by
    position, as a double stable argsort gives), sequence over sp: the
    noise all_gather'd, each device ranking its own tokens. Bugs: ranks and
    K within the shard, the noise gathered over dp.
17. bf16 activations normalised with one-pass global statistics (sum and
    sum of squares stacked into one psum over dp x sp, var = E[x^2] -
    E[x]^2; the baseline uses jnp.var). Bugs: the psum over dp only, the
    mean square not subtracted.
18. dropout from precomputed uint32 bits sharded like the tp-sharded
    hidden activation (keep where bits < 0.8 * 2^32). Bugs: the bits
    bitcast to int32 and compared signed, no 1 / keep scale.
19. batch-norm statistics over dp4 with the running averages updated in
    the step (running variance unbiased by n / (n - 1) with the global n).
    Bugs: the unbiasing with the local count, the running mean from the
    local mean.
20. mixup whose randomness is derived in the body from a replicated key:
    one jax.random.beta weight and jax.random.permutation of the global
    batch, partners from the all_gather'd batch. Bugs: the Beta key folded
    with the device index, a permutation of the local batch.
21. masking on a flat packed token stream over dp8 (6 tokens per device,
    sequences of 8): sequence starts (global position % 8 == 0) never
    masked; uniforms and replacement ids host-made, replicated, sliced.
    Bugs: the local position, the slice offset by the sequence length.
GSPMD pairs (jax.jit with in/out shardings, correct): g1. CutMix with boxes
drawn from a key (jax.random.randint) and jnp.roll partners, a linear
classifier's soft-label loss and an optax.sgd (momentum) step, dp4; g2.
crop and flip from per-example fold_in keys under a vmap, dp8; g3. 80/10/10
masking from precomputed uniforms, the tied-embedding MLM loss and an
optax.adamw step, tokens over dp2 x sp4; g4. global-stat channel norm
feeding a linear layer, images over (dp, sp); g5. shuffling by jnp.take of
a global permutation, dp8 in and out; g6. the dropout MLP of 9. with the
hidden activation constrained to (dp, tp); g7. mixup + mixed-label
smoothing, classes over tp, Beta weights and permutation from a key; g8.
per-example flip with the width sharded; g9. the strided shuffle by
reshape / swapaxes; g10. random crop with the height over sp; g11. cutout
with the width over sp; g12. exact-count masking by a double argsort along
the sp-sharded sequence; g13. mixup with Beta weights as an input,
optax.smooth_labels and optax.softmax_cross_entropy, classes over tp; g14.
batch-norm statistics with running averages, dp8; g15. keyed crop + flip
with the height over sp too (dp2 x sp2); g16. the flat-stream masking of
21., dp8.
Randomness is either an input (precomputed uniforms, uint32 bits, offsets,
boxes, permutations, Beta weights) or derived from a raw uint32 key given as
an input (replicated); draws are made at the global shape and sliced, or per
example from fold_in of the global index, so the distributed bits equal the
single-device ones.
Inputs that make the bugs show: the cutmix boxes and cutout rectangles are
clipped in the program (so any integers give a non-empty box); the MLM
selection uniforms are pushed below 0.15 at a quarter of the positions and
the kind uniforms drawn from [0.6, 1) so that the random-token branch is
taken; the key of 14. is one whose draws reach that branch; the MLM loss of
10. uses float weights (with -100 labels, random labels would all be valid,
the per-device counts equal, and the mean of means exact).
A first draft of 13. cut the crop at the unclamped offset plus the device's
row: correct for valid offsets only (out-of-range offsets clamp per device,
not per crop), which the checker's witness showed; the offset is now
clamped first.
Numerics: every correct pair agrees with its baseline at rounding level
(f32 within 1.5e-6, integer and selection outputs exactly); every bug
variant differs clearly (see "numerics").
Run from the repository root: bash samples/gen/run_fresh61.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P, NamedSharding
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh61.sh)
from fresh_lib import Corpus, seeded  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh61.py"
C = Corpus("samples/fresh61", SCRIPT, "samples/gen/run_fresh61.sh", sys.argv[1:])
rng, R, I = seeded(6161)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index


def raw_key(seed):
    return np.asarray(jax.random.key_data(jax.random.key(seed)), np.uint32)


# ---------------------------------------------------------------------------
# 1. mixup with label-smoothed soft targets in an SGD step (dp4)
B1, D1, K1, EPS, LR = 16, 12, 10, 0.1, 0.5


def smooth(t, k, eps=EPS):
    return t * (1 - eps) + eps / k


def mix_loss(w, xm, t):
    return -jnp.sum(t * jax.nn.log_softmax(xm @ w, -1))


def mixup_ref(w, perm, lam, x, y):
    xp, yp = x[perm], y[perm]
    l = lam[:, None]
    xm = l * x + (1 - l) * xp
    t = l * smooth(jax.nn.one_hot(y, K1), K1) + (1 - l) * smooth(jax.nn.one_hot(yp, K1), K1)
    loss, g = jax.value_and_grad(lambda w: mix_loss(w, xm, t) / x.shape[0])(w)
    return w - LR * g, loss, xm


def mixup_dp(bug):
    def f(w, perm, lam, x, y):
        bl = x.shape[0]
        nb = bl * 4
        mine = lax.dynamic_slice_in_dim(perm, idx("dp") * bl, bl)
        if bug == "partner-from-local-shard":
            xp, yp = x[mine % bl], y[mine % bl]
        else:
            xg = lax.all_gather(x, "dp", tiled=True)
            yg = lax.all_gather(y, "dp", tiled=True)
            xp, yp = xg[mine], yg[mine]
        l = lam[:, None]
        if bug == "lam-on-own-term-only":
            xm = l * x + xp
        else:
            xm = l * x + (1 - l) * xp
        ta = smooth(jax.nn.one_hot(y, K1), K1)
        t = ta if bug == "labels-not-mixed" else l * ta + (1 - l) * smooth(jax.nn.one_hot(yp, K1), K1)
        loss, g = jax.value_and_grad(lambda w: mix_loss(w, xm, t) / nb)(w)
        return w - LR * psum(g, "dp"), psum(loss, "dp"), xm
    return f


C.smap("s.mixup_softlabel_sgd_allgather_perm.dp4", {"dp": 4}, mixup_dp,
       (P(), P(), P("dp"), P("dp"), P("dp")), (P(), P(), P("dp")), mixup_ref,
       (R(D1, K1, scale=0.3), rng.permutation(B1).astype(np.int32),
        rng.beta(0.4, 0.4, B1).astype(np.float32), R(B1, D1), I(0, K1, B1)),
       bugs=[("partner-from-local-shard", ["wrong-offset"]), ("lam-on-own-term-only", ["wrong-scale"]),
             ("labels-not-mixed", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 2. CutMix with the next example of the global batch as partner (dp4)
B2, H2, W2, C2, K2 = 8, 8, 6, 3, 5


def box_mask(box, h, w):
    """box (B, 4) = (top, left, height, width), clipped to the image and at
    least one pixel (as timm clips its boxes)."""
    top, left = jnp.clip(box[:, 0:1], 0, h - 1), jnp.clip(box[:, 1:2], 0, w - 1)
    bot, right = top + jnp.clip(box[:, 2:3], 1, h), left + jnp.clip(box[:, 3:4], 1, w)
    r, c = jnp.arange(h), jnp.arange(w)
    rows = (r[None, :] >= top) & (r[None, :] < bot)
    cols = (c[None, :] >= left) & (c[None, :] < right)
    return rows[:, :, None] & cols[:, None, :]  # (B, h, w)


def cutmix_ref(x, box, y):
    xp, yp = jnp.roll(x, -1, 0), jnp.roll(y, -1, 0)
    m = box_mask(box, H2, W2)
    xm = jnp.where(m[..., None], xp, x)
    area = jnp.mean(m.astype(jnp.float32), (1, 2))[:, None]
    return xm, (1 - area) * jax.nn.one_hot(y, K2) + area * jax.nn.one_hot(yp, K2)


def cutmix_dp(bug):
    def f(x, box, y):
        n = 4
        if bug == "roll-within-shard":
            xp, yp = jnp.roll(x, -1, 0), jnp.roll(y, -1, 0)
        else:
            perm = [(i, (i + 1) % n) for i in range(n)] if bug == "ppermute-wrong-direction" \
                else [(i, (i - 1) % n) for i in range(n)]
            xp = jnp.concatenate([x[1:], lax.ppermute(x[:1], "dp", perm)], 0)
            yp = jnp.concatenate([y[1:], lax.ppermute(y[:1], "dp", perm)], 0)
        if bug == "box-rows-cols-swapped":
            m = box_mask(box[:, jnp.array([1, 0, 3, 2])], H2, W2)
        else:
            m = box_mask(box, H2, W2)
        xm = jnp.where(m[..., None], xp, x)
        area = jnp.mean(m.astype(jnp.float32), (1, 2))[:, None]
        return xm, (1 - area) * jax.nn.one_hot(y, K2) + area * jax.nn.one_hot(yp, K2)
    return f


r0 = rng.integers(0, 5, B2)
c0 = rng.integers(0, 4, B2)
BOX2 = np.stack([r0, c0, rng.integers(1, 4, B2), rng.integers(1, 3, B2)], 1).astype(np.int32)
C.smap("s.cutmix_next_example_ppermute.dp4", {"dp": 4}, cutmix_dp, (P("dp"), P("dp"), P("dp")), (P("dp"), P("dp")),
       cutmix_ref, (R(B2, H2, W2, C2), BOX2, I(0, K2, B2)),
       bugs=[("roll-within-shard", ["wrong-permutation"]), ("ppermute-wrong-direction", ["wrong-permutation"]),
             ("box-rows-cols-swapped", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 3. random crop + horizontal flip from precomputed random inputs (dp4, NCHW)
B3, C3, H3, W3, CH, CW = 8, 3, 10, 8, 8, 6


def crop_flip_one(im, off, fl):
    c = lax.dynamic_slice(im, (0, off[0], off[1]), (im.shape[0], CH, CW))
    return jnp.where(fl > 0.5, c[:, :, ::-1], c)


def crop_ref(x, off, fl):
    return jax.vmap(crop_flip_one)(x, off, fl)


def crop_dp(bug):
    def f(x, off, fl):
        bl = x.shape[0]
        start = 0 if bug == "offsets-at-row-0" else idx("dp") * bl
        o = lax.dynamic_slice_in_dim(off, start, bl, 0)
        if bug == "offsets-swapped":
            o = o[:, ::-1]

        def one(im, oo, ff):
            c = lax.dynamic_slice(im, (0, oo[0], oo[1]), (im.shape[0], CH, CW))
            return jnp.where(ff > 0.5, jnp.flip(c, 1) if bug == "flip-height" else jnp.flip(c, 2), c)
        return jax.vmap(one)(x, o, fl)
    return f


C.smap("s.crop_flip_precomputed_offsets.dp4", {"dp": 4}, crop_dp, (P("dp"), P(), P("dp")), P("dp"), crop_ref,
       (R(B3, C3, H3, W3), np.stack([rng.integers(0, 3, B3), rng.integers(0, 3, B3)], 1).astype(np.int32),
        rng.integers(0, 2, B3).astype(np.float32)),
       bugs=[("offsets-at-row-0", ["wrong-offset"]), ("flip-height", ["wrong-axis"]),
             ("offsets-swapped", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 4. crop + flip from per-example keys folded from a replicated base key (dp4)


def keyed_aug(k, im, flip_axis=2):
    kc, kf = jax.random.split(k)
    o = jax.random.randint(kc, (2,), 0, 3)
    c = lax.dynamic_slice(im, (0, o[0], o[1]), (im.shape[0], CH, CW))
    return jnp.where(jax.random.bernoulli(kf, 0.5), jnp.flip(c, flip_axis), c)


def keyed_ref(key, x):
    keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(x.shape[0]))
    return jax.vmap(keyed_aug)(keys, x)


def keyed_dp(bug):
    def f(key, x):
        bl = x.shape[0]
        gi = jnp.arange(bl) if bug == "local-example-index" else idx("dp") * bl + jnp.arange(bl)
        keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(gi)
        return jax.vmap(lambda k, im: keyed_aug(k, im, 1 if bug == "flip-height" else 2))(keys, x)
    return f


C.smap("s.crop_flip_foldin_keys.dp4", {"dp": 4}, keyed_dp, (P(), P("dp")), P("dp"), keyed_ref,
       (raw_key(61), R(B3, C3, H3, W3)),
       bugs=[("local-example-index", ["wrong-offset"]), ("flip-height", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 5. shuffling by a global permutation: one-hot selection + psum_scatter (dp4)
B5, D5 = 16, 6


def shuffle_ref(perm, x, wt):
    return jnp.take(x, perm, axis=0), jnp.take(wt, perm, axis=0)


def shuffle_dp(bug):
    def f(perm, x, wt):
        bl = x.shape[0]
        me = idx("dp")
        if bug == "inverse-permutation":
            mine = lax.dynamic_slice_in_dim(perm, me * bl, bl)
            S = (mine[None, :] == jnp.arange(perm.shape[0])[:, None]).astype(x.dtype)
        else:
            rows = jnp.arange(bl) if bug == "no-row-offset" else me * bl + jnp.arange(bl)
            S = (perm[:, None] == rows[None, :]).astype(x.dtype)  # (B, bl): out row i takes my row j
        cx, cw = S @ x, S @ wt
        if bug == "psum-then-block-0":
            return psum(cx, "dp")[:bl], psum(cw, "dp")[:bl]
        return (lax.psum_scatter(cx, "dp", scatter_dimension=0, tiled=True),
                lax.psum_scatter(cw, "dp", scatter_dimension=0, tiled=True))
    return f


C.smap("s.shuffle_onehot_psum_scatter.dp4", {"dp": 4}, shuffle_dp, (P(), P("dp"), P("dp")), (P("dp"), P("dp")),
       shuffle_ref, (rng.permutation(B5).astype(np.int32), R(B5, D5), rng.uniform(0.5, 1.5, B5).astype(np.float32)),
       bugs=[("inverse-permutation", ["wrong-permutation"]), ("no-row-offset", ["wrong-offset"]),
             ("psum-then-block-0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 6. per-channel normalisation with global statistics, NHWC over dp2 x sp4
B6, H6, W6, C6 = 4, 8, 4, 6


def chnorm_ref(x, g, b):
    mu = jnp.mean(x, (0, 1, 2))
    var = jnp.mean(jnp.square(x - mu), (0, 1, 2))
    return (x - mu) * lax.rsqrt(var + 1e-5) * g + b, mu, var


def chnorm_dp_sp(bug):
    def f(x, g, b):
        axes = ("dp",) if bug == "stats-over-dp-only" else ("dp", "sp")
        nloc = x.shape[0] * x.shape[1] * x.shape[2]
        n = nloc * (2 if bug == "stats-over-dp-only" else 8)
        if bug == "mean-over-local-count":
            n_mu = nloc
        else:
            n_mu = n
        mu = psum(jnp.sum(x, (0, 1, 2)), axes) / n_mu
        if bug == "pmean-of-local-variances":
            var = pmean(jnp.var(x, (0, 1, 2)), ("dp", "sp"))
        else:
            var = psum(jnp.sum(jnp.square(x - mu), (0, 1, 2)), axes) / n
        return (x - mu) * lax.rsqrt(var + 1e-5) * g + b, mu, var
    return f


C.smap("s.channel_norm_global_stats.dp2xsp4", {"dp": 2, "sp": 4}, chnorm_dp_sp, (P("dp", "sp"), P(), P()),
       (P("dp", "sp"), P(), P()), chnorm_ref,
       (R(B6, H6, W6, C6) * np.linspace(0.5, 3, C6).astype(np.float32)
        + np.arange(B6 * H6, dtype=np.float32).reshape(B6, H6, 1, 1) * 0.2,
        R(C6, scale=0.2) + 1, R(C6, scale=0.2)),
       bugs=[("stats-over-dp-only", ["missing-all-reduce"]), ("pmean-of-local-variances", ["wrong-reduction"]),
             ("mean-over-local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. label smoothing with mixed labels on vocabulary-parallel logits (dp2 x tp4)
B7, K7 = 8, 16


def mixsmooth_ref(z, ya, yb, lam):
    lp = jax.nn.log_softmax(z, -1)
    l = lam[:, None]
    t = l * smooth(jax.nn.one_hot(ya, K7), K7) + (1 - l) * smooth(jax.nn.one_hot(yb, K7), K7)
    return jnp.mean(-jnp.sum(t * lp, -1))


def mixsmooth_tp(bug):
    def f(z, ya, yb, lam):
        kl = z.shape[1]
        off = idx("tp") * kl
        m = pmax(jnp.max(lax.stop_gradient(z), -1), "tp")
        lse = jnp.log(psum(jnp.sum(jnp.exp(z - m[:, None]), -1), "tp")) + m
        cls = off + jnp.arange(kl)

        def pick(y, o=cls):
            return psum(jnp.sum(jnp.where(o[None, :] == y[:, None], z, 0.0), -1), "tp")
        pa = pick(ya)
        pb = pick(yb, jnp.arange(kl)) if bug == "yb-without-class-offset" else pick(yb)
        kk = kl if bug == "smoothing-over-local-classes" else K7
        mean_lp = psum(jnp.sum(z, -1), "tp") / kk - lse
        if bug == "lam-on-first-target-only":
            hard = lam * (pa - lse) + (pb - lse)
        else:
            hard = lam * (pa - lse) + (1 - lam) * (pb - lse)
        return pmean(jnp.mean(-((1 - EPS) * hard + EPS * mean_lp)), "dp")
    return f


C.smap("s.mixed_label_smoothing_vocab_parallel.dp2xtp4", {"dp": 2, "tp": 4}, mixsmooth_tp,
       (P("dp", "tp"), P("dp"), P("dp"), P("dp")), P(), mixsmooth_ref,
       (R(B7, K7, scale=2.0), I(0, K7, B7), I(0, K7, B7), rng.beta(0.4, 0.4, B7).astype(np.float32)),
       bugs=[("lam-on-first-target-only", ["wrong-scale"]), ("smoothing-over-local-classes", ["wrong-scale"]),
             ("yb-without-class-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 8. BERT 15% / 80-10-10 masking from precomputed global random tensors,
#    tokens over dp2 x sp4, the random tensors replicated and sliced
B8, T8, V8, MASK = 4, 16, 40, 3


def mlm_mask(tok, us, uk, rt):
    sel = (us < 0.15) & (tok > 3)
    rep = jnp.where(uk < 0.8, MASK, jnp.where(uk < 0.9, rt, tok))
    return jnp.where(sel, rep, tok), jnp.where(sel, tok, -100), jnp.sum(sel.astype(jnp.int32))


def mlm_mask_dp_sp(bug):
    def f(tok, us, uk, rt):
        bl, tl = tok.shape
        r0 = idx("dp") * bl
        c0 = (idx("dp") if bug == "col-offset-from-dp" else idx("sp")) * tl
        cut = lambda a: lax.dynamic_slice(a, (r0, c0), (bl, tl))  # noqa: E731
        rt_l = lax.dynamic_slice(rt, (0, 0), (bl, tl)) if bug == "rand-tokens-at-origin" else cut(rt)
        sel = (cut(us) < 0.15) & (tok > 3)
        rep = jnp.where(cut(uk) < 0.8, MASK, jnp.where(cut(uk) < 0.9, rt_l, tok))
        cnt = jnp.sum(sel.astype(jnp.int32))
        cnt = psum(cnt, "dp") if bug == "count-over-dp-only" else psum(cnt, ("dp", "sp"))
        return jnp.where(sel, rep, tok), jnp.where(sel, tok, -100), cnt
    return f


TOK8 = I(4, V8, B8, T8)
TOK8[:, 0], TOK8[:, -1] = 1, 2  # [CLS] ... [SEP]
US8 = rng.uniform(0, 1, (B8, T8)).astype(np.float32)
US8[rng.uniform(0, 1, (B8, T8)) < 0.25] = 0.05  # more selections than 15% so every block has some
UK8 = rng.uniform(0.6, 1.0, (B8, T8)).astype(np.float32)  # half the selections take the random-token branch
C.smap("s.mlm_801010_precomputed_sliced.dp2xsp4", {"dp": 2, "sp": 4}, mlm_mask_dp_sp,
       (P("dp", "sp"), P(), P(), P()), (P("dp", "sp"), P("dp", "sp"), P()), mlm_mask,
       (TOK8, US8, UK8, I(4, V8, B8, T8)),
       bugs=[("col-offset-from-dp", ["wrong-offset"]), ("rand-tokens-at-origin", ["wrong-offset"]),
             ("count-over-dp-only", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 9. dropout masks in a Megatron MLP that must agree across tp (dp2 x tp4)
B9, D9, F9, KEEP = 8, 16, 32, 0.8


def drop_mlp_ref(key, x, w1, w2):
    k1, k2 = jax.random.split(key)
    h = jax.nn.gelu(x @ w1)
    h = jnp.where(jax.random.bernoulli(k1, KEEP, h.shape), h / KEEP, 0.0)
    y = h @ w2
    y = jnp.where(jax.random.bernoulli(k2, KEEP, y.shape), y / KEEP, 0.0)
    return x + y


def drop_mlp_tp(bug):
    def f(key, x, w1, w2):
        bl, fl = x.shape[0], w1.shape[1]
        r0 = idx("dp") * bl
        c0 = 0 if bug == "hidden-mask-at-col-0" else idx("tp") * fl
        k1, k2 = jax.random.split(key)
        m1 = lax.dynamic_slice(jax.random.bernoulli(k1, KEEP, (B9, F9)), (r0, c0), (bl, fl))
        h = jax.nn.gelu(x @ w1)
        h = jnp.where(m1, h / KEEP, 0.0)
        y = psum(h @ w2, "tp")
        if bug == "output-key-folded-with-tp":
            m2 = lax.dynamic_slice_in_dim(jax.random.bernoulli(jax.random.fold_in(k2, idx("tp")), KEEP, (B9, D9)),
                                          r0, bl, 0)
        elif bug == "output-mask-local-shape":
            m2 = jax.random.bernoulli(k2, KEEP, y.shape)
        else:
            m2 = lax.dynamic_slice_in_dim(jax.random.bernoulli(k2, KEEP, (B9, D9)), r0, bl, 0)
        return x + jnp.where(m2, y / KEEP, 0.0)
    return f


C.smap("s.dropout_megatron_mlp_masks_agree.dp2xtp4", {"dp": 2, "tp": 4}, drop_mlp_tp,
       (P(), P("dp"), P(None, "tp"), P("tp")), P("dp"), drop_mlp_ref,
       (raw_key(9), R(B9, D9), R(D9, F9, scale=0.3), R(F9, D9, scale=0.3)),
       bugs=[("hidden-mask-at-col-0", ["wrong-offset"]), ("output-key-folded-with-tp", ["wrong-value"]),
             ("output-mask-local-shape", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 10. MLM loss at masked positions with jax.grad through the body (dp4); the
#     masked positions as float weights (BERT's masked_lm_weights), the
#     labels at the masked positions as ids
B10, T10, V10, D10 = 8, 6, 24, 8


def mlm_loss(emb, b, tok, lab, wt):
    h = jnp.tanh(emb[tok])
    logits = h @ emb.T + b
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, lab)
    return jnp.sum(wt * ce) / (jnp.sum(wt) + 1e-5)


def mlm_grad_ref(emb, b, tok, lab, wt):
    return jax.value_and_grad(mlm_loss, (0, 1))(emb, b, tok, lab, wt)


def mlm_grad_dp(bug):
    def f(emb, b, tok, lab, wt):
        if bug == "mean-of-local-means":
            l, (ge, gb) = jax.value_and_grad(mlm_loss, (0, 1))(emb, b, tok, lab, wt)
            return pmean(l, "dp"), (pmean(ge, "dp"), pmean(gb, "dp"))
        n = psum(jnp.sum(wt), "dp") + 1e-5

        def local(emb, b):
            h = jnp.tanh(emb[tok])
            ce = optax.softmax_cross_entropy_with_integer_labels(h @ emb.T + b, lab)
            return jnp.sum(wt * ce) / n
        l, (ge, gb) = jax.value_and_grad(local, (0, 1))(emb, b)
        if bug == "embedding-grad-not-psummed":
            return psum(l, "dp"), (ge, psum(gb, "dp"))
        return psum(l, "dp"), (psum(ge, "dp"), psum(gb, "dp"))
    return f


WT10 = (rng.uniform(0, 1, (B10, T10)) < 0.3).astype(np.float32)
WT10[np.arange(B10), rng.integers(0, T10, B10)] = 1.0  # every row has a masked position, some more than others
C.smap("s.mlm_masked_loss_grad_psum.dp4", {"dp": 4}, mlm_grad_dp, (P(), P(), P("dp"), P("dp"), P("dp")),
       (P(), (P(), P())), mlm_grad_ref,
       (R(V10, D10, scale=0.5), R(V10, scale=0.1), I(0, V10, B10, T10), I(0, V10, B10, T10), WT10),
       bugs=[("mean-of-local-means", ["wrong-reduction"]), ("embedding-grad-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 11. horizontal flip per example with the width sharded over sp (dp2 x sp4):
#     the mirror image of block i is block n-1-i reversed, so each device
#     reverses its block and swaps it with the mirror device by ppermute
B11, C11, H11, WD11 = 8, 2, 3, 16


def flip_w_ref(x, fl):
    return jnp.where(fl[:, None, None, None] < 0.5, x[..., ::-1], x)


def flip_w_sp(bug):
    def f(x, fl):
        n = 4
        r = x[..., ::-1] if bug != "no-local-reverse" else x
        if bug == "no-mirror-exchange":
            m = r
        elif bug == "shift-instead-of-mirror":
            m = lax.ppermute(r, "sp", [(i, (i + 1) % n) for i in range(n)])
        else:
            m = lax.ppermute(r, "sp", [(i, n - 1 - i) for i in range(n)])
        return jnp.where(fl[:, None, None, None] < 0.5, m, x)
    return f


C.smap("s.flip_width_sharded_mirror_ppermute.dp2xsp4", {"dp": 2, "sp": 4}, flip_w_sp,
       (P("dp", None, None, "sp"), P("dp")), P("dp", None, None, "sp"), flip_w_ref,
       (R(B11, C11, H11, WD11), rng.uniform(0, 1, B11).astype(np.float32)),
       bugs=[("no-mirror-exchange", ["missing-collective"]), ("no-local-reverse", ["wrong-order"]),
             ("shift-instead-of-mirror", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 12. a strided batch shuffle (example i of the new batch is example
#     (i % n) * b + i // n of the old one, so every device's new block holds
#     one example from each device) by one all_to_all over dp4


def stride_shuffle_ref(x, y):
    n = 4
    sh = lambda a: a.reshape(n, a.shape[0] // n, *a.shape[1:]).swapaxes(0, 1).reshape(a.shape)  # noqa: E731
    return sh(x), sh(y)


def stride_shuffle_dp(bug):
    def f(x, y):
        if bug == "no-all-to-all":
            return x, y
        if bug == "rows-reversed-after":
            a2a = lambda a: lax.all_to_all(a, "dp", 0, 0, tiled=True)[::-1]  # noqa: E731
        else:
            a2a = lambda a: lax.all_to_all(a, "dp", 0, 0, tiled=True)  # noqa: E731
        return a2a(x), a2a(y)
    return f


C.smap("s.stride_shuffle_all_to_all.dp4", {"dp": 4}, stride_shuffle_dp, (P("dp"), P("dp")), (P("dp"), P("dp")),
       stride_shuffle_ref, (R(16, 5), I(0, 10, 16)),
       bugs=[("no-all-to-all", ["missing-collective"]), ("rows-reversed-after", ["wrong-order"])])

# ---------------------------------------------------------------------------
# 13. random crop from precomputed offsets on images whose height is sharded
#     over sp (dp2 x sp4): the crop needs rows of other devices, so the
#     height is all_gather'd and each device cuts only its own block of the
#     crop (rows o + r * 2 .. +2 of the gathered image)
B13, C13, H13, W13, CH13, CW13 = 4, 2, 12, 6, 8, 4


def crop_h_ref(x, off):
    return jax.vmap(lambda im, o: lax.dynamic_slice(im, (0, o[0], o[1]), (C13, CH13, CW13)))(x, off)


def crop_h_sp(bug):
    def f(x, off):
        hl = CH13 // 4  # output rows per device
        full = lax.all_gather(x, "sp", axis=2, tiled=True)
        # clamp the row offset as the single-device dynamic_slice would (the
        # window of the whole crop), since each device slices only its rows
        off = off.at[:, 0].set(jnp.clip(off[:, 0], 0, H13 - CH13))
        if bug == "no-device-row-offset":
            row = 0
        elif bug == "offset-by-input-block-height":
            row = idx("sp") * x.shape[2]
        else:
            row = idx("sp") * hl
        return jax.vmap(lambda im, o: lax.dynamic_slice(im, (0, o[0] + row, o[1]), (C13, hl, CW13)))(full, off)
    return f


C.smap("s.crop_height_sharded_allgather.dp2xsp4", {"dp": 2, "sp": 4}, crop_h_sp,
       (P("dp", None, "sp"), P("dp")), P("dp", None, "sp"), crop_h_ref,
       (R(B13, C13, H13, W13), np.stack([rng.integers(0, 5, B13), rng.integers(0, 3, B13)], 1).astype(np.int32)),
       bugs=[("no-device-row-offset", ["wrong-offset"]), ("offset-by-input-block-height", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 14. 80/10/10 masking with the randomness drawn from a key at the global
#     shape (uniforms and random ids) and sliced at the device's (row,
#     column) block, tokens over dp2 x sp4


def mlm_key_ref(key, tok):
    ks, kk, kr = jax.random.split(key, 3)
    us = jax.random.uniform(ks, tok.shape)
    uk = jax.random.uniform(kk, tok.shape)
    rt = jax.random.randint(kr, tok.shape, 4, V8)
    return mlm_mask(tok, us, uk, rt)


def mlm_key_dp_sp(bug):
    def f(key, tok):
        bl, tl = tok.shape
        ks, kk, kr = jax.random.split(key, 3)
        r0, c0 = idx("dp") * bl, idx("sp") * tl
        if bug == "key-folded-with-device":
            dev = idx("dp") * 4 + idx("sp")
            ks, kk, kr = (jax.random.fold_in(k, dev) for k in (ks, kk, kr))
        cut = lambda a: lax.dynamic_slice(a, (r0, c0), (bl, tl))  # noqa: E731
        shape = (B8, T8)
        us = cut(jax.random.uniform(ks, shape))
        uk = cut(jax.random.uniform(kk, shape))
        if bug == "ids-drawn-at-local-shape":
            rt = jax.random.randint(kr, (bl, tl), 4, V8)
        else:
            rt = cut(jax.random.randint(kr, shape, 4, V8))
        sel = (us < 0.15) & (tok > 3)
        rep = jnp.where(uk < 0.8, MASK, jnp.where(uk < 0.9, rt, tok))
        cnt = psum(jnp.sum(sel.astype(jnp.int32)), ("dp", "sp"))
        return jnp.where(sel, rep, tok), jnp.where(sel, tok, -100), cnt
    return f


C.smap("s.mlm_801010_key_global_draw.dp2xsp4", {"dp": 2, "sp": 4}, mlm_key_dp_sp, (P(), P("dp", "sp")),
       (P("dp", "sp"), P("dp", "sp"), P()), mlm_key_ref, (raw_key(1), TOK8),
       bugs=[("key-folded-with-device", ["wrong-value"]), ("ids-drawn-at-local-shape", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 15. cutout (random erasing) with per-example rectangles, the width sharded
#     over sp (dp2 x sp4): the rectangle is clipped to the whole image and
#     compared with global column indices; the erased pixels get the
#     per-channel fill (the dataset mean)
B15, C15, H15, W15 = 4, 3, 6, 16


def cutout_ref(x, rect, fill):
    m = box_mask(rect, H15, W15)
    return jnp.where(m[:, None], fill[None, :, None, None], x)


def cutout_sp(bug):
    def f(x, rect, fill):
        wl = x.shape[3]
        wclip = wl if bug == "clip-to-local-width" else W15
        top, left = jnp.clip(rect[:, 0:1], 0, H15 - 1), jnp.clip(rect[:, 1:2], 0, wclip - 1)
        bot, right = top + jnp.clip(rect[:, 2:3], 1, H15), left + jnp.clip(rect[:, 3:4], 1, wclip)
        c = jnp.arange(wl) if bug == "local-column-index" else idx("sp") * wl + jnp.arange(wl)
        r = jnp.arange(H15)
        rows = (r[None, :] >= top) & (r[None, :] < bot)
        cols = (c[None, :] >= left) & (c[None, :] < right)
        m = rows[:, :, None] & cols[:, None, :]
        return jnp.where(m[:, None], fill[None, :, None, None], x)
    return f


RECT15 = np.stack([rng.integers(0, 4, B15), rng.integers(0, 14, B15), rng.integers(1, 4, B15),
                   rng.integers(3, 9, B15)], 1).astype(np.int32)
C.smap("s.cutout_width_sharded_global_cols.dp2xsp4", {"dp": 2, "sp": 4}, cutout_sp,
       (P("dp", None, None, "sp"), P("dp"), P()), P("dp", None, None, "sp"), cutout_ref,
       (R(B15, C15, H15, W15), RECT15, np.array([0.485, 0.456, 0.406], np.float32)),
       bugs=[("local-column-index", ["wrong-offset"]), ("clip-to-local-width", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 16. masking exactly K of T tokens per row (the K smallest noise values,
#     ties broken by position, as a stable argsort does) with the sequence
#     over sp and the batch over dp: the noise all_gather'd along the
#     sequence, each device ranks its own tokens against the whole row
B16, T16, K16 = 4, 16, 4


def exact_mask_ref(tok, u):
    rank = jnp.argsort(jnp.argsort(u, axis=1, stable=True), axis=1)
    m = rank < K16
    return jnp.where(m, MASK, tok), m.astype(jnp.int32)


def exact_mask_sp(bug):
    def f(tok, u):
        tl = tok.shape[1]
        if bug == "rank-within-shard":
            ug, gi, gj, k = u, jnp.arange(tl), jnp.arange(tl), K16 // 4
        else:
            ax = "dp" if bug == "gather-over-dp" else "sp"
            ug = lax.all_gather(u, ax, axis=1, tiled=True)
            gi, gj, k = idx("sp") * tl + jnp.arange(tl), jnp.arange(ug.shape[1]), K16
        before = (ug[:, None, :] < u[:, :, None]) | ((ug[:, None, :] == u[:, :, None]) & (gj[None, :] < gi[:, None]))
        m = jnp.sum(before, -1) < k
        return jnp.where(m, MASK, tok), m.astype(jnp.int32)
    return f


C.smap("s.exact_count_mask_global_rank.dp2xsp4", {"dp": 2, "sp": 4}, exact_mask_sp,
       (P("dp", "sp"), P("dp", "sp")), (P("dp", "sp"), P("dp", "sp")), exact_mask_ref,
       (I(4, V8, B16, T16), rng.uniform(0, 1, (B16, T16)).astype(np.float32)),
       bugs=[("rank-within-shard", ["missing-collective"]), ("gather-over-dp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 17. bf16 activations normalised per channel with one-pass global
#     statistics: sum and sum of squares stacked and psum'd in one
#     all-reduce over (dp, sp), var = E[x^2] - E[x]^2 in f32 (the baseline
#     uses jnp.var, two-pass); output in bf16
B17, L17, C17 = 4, 8, 6


def onepass_ref(x, g):
    x32 = x.astype(jnp.float32)
    mu = jnp.mean(x32, (0, 1))
    var = jnp.var(x32, (0, 1))
    return ((x32 - mu) * lax.rsqrt(var + 1e-5)).astype(jnp.bfloat16) * g


def onepass_dp_sp(bug):
    def f(x, g):
        x32 = x.astype(jnp.float32)
        n = x.shape[0] * x.shape[1] * 8
        st = jnp.stack([jnp.sum(x32, (0, 1)), jnp.sum(x32 * x32, (0, 1))])
        st = psum(st, "dp") if bug == "stats-psum-over-dp-only" else psum(st, ("dp", "sp"))
        if bug == "stats-psum-over-dp-only":
            n = n // 4
        mu = st[0] / n
        var = st[1] / n if bug == "no-mean-square-subtracted" else st[1] / n - mu * mu
        return ((x32 - mu) * lax.rsqrt(var + 1e-5)).astype(jnp.bfloat16) * g
    return f


X17 = (R(B17, L17, C17) * np.linspace(0.5, 2, C17) + np.linspace(-2, 2, C17)).astype(jnp.bfloat16)
X17 = np.asarray(X17 + np.arange(B17 * L17).reshape(B17, L17, 1).astype(np.float32) * 0.05).astype(jnp.bfloat16)
C.smap("s.onepass_bf16_channel_stats.dp2xsp4", {"dp": 2, "sp": 4}, onepass_dp_sp, (P("dp", "sp"), P()),
       P("dp", "sp"), onepass_ref, (X17, np.asarray(R(C17, scale=0.2) + 1, jnp.bfloat16)),
       bugs=[("stats-psum-over-dp-only", ["missing-all-reduce"]), ("no-mean-square-subtracted", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 18. dropout from precomputed uint32 random bits (drawn on the host at the
#     global shape, sharded like the activation they mask): the hidden
#     activation of a tp4 MLP over (dp2, tp4), keep where bits < keep * 2^32
B18, D18, F18 = 8, 8, 16
THR = np.uint32(int(KEEP * 2 ** 32))


def bits_drop_ref(x, w1, w2, bits):
    h = jax.nn.relu(x @ w1)
    h = jnp.where(bits < THR, h / KEEP, 0.0)
    return h @ w2


def bits_drop_tp(bug):
    def f(x, w1, w2, bits):
        h = jax.nn.relu(x @ w1)
        if bug == "bits-compared-as-signed":
            keep = lax.bitcast_convert_type(bits, jnp.int32) < jnp.int32(int(THR) - 2 ** 32)
        else:
            keep = bits < THR
        scale = 1.0 if bug == "no-inverted-scale" else 1 / KEEP
        h = jnp.where(keep, h * scale, 0.0)
        return psum(h @ w2, "tp")
    return f


BITS18 = rng.integers(0, 2 ** 32, (B18, F18), dtype=np.uint64).astype(np.uint32)
C.smap("s.dropout_precomputed_uint32_bits.dp2xtp4", {"dp": 2, "tp": 4}, bits_drop_tp,
       (P("dp"), P(None, "tp"), P("tp"), P("dp", "tp")), P("dp"), bits_drop_ref,
       (R(B18, D18), R(D18, F18, scale=0.4), R(F18, D18, scale=0.4), BITS18),
       bugs=[("bits-compared-as-signed", ["wrong-value"]), ("no-inverted-scale", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 19. batch-norm training statistics over dp4 with the running averages
#     updated in the step (momentum 0.9, the running variance unbiased by
#     n / (n - 1) with n the global batch), the normalised batch returned
B19, D19 = 16, 6


def bn_ref(x, rmean, rvar):
    mu, var = jnp.mean(x, 0), jnp.var(x, 0)
    n = x.shape[0]
    y = (x - mu) / jnp.sqrt(var + 1e-5)
    return y, 0.9 * rmean + 0.1 * mu, 0.9 * rvar + 0.1 * var * n / (n - 1)


def bn_dp(bug):
    def f(x, rmean, rvar):
        nl = x.shape[0]
        n = nl * 4
        mu = pmean(jnp.mean(x, 0), "dp")
        var = pmean(jnp.mean(jnp.square(x - mu), 0), "dp")
        y = (x - mu) / jnp.sqrt(var + 1e-5)
        nc = nl if bug == "unbiased-with-local-count" else n
        new_rvar = 0.9 * rvar + 0.1 * var * nc / (nc - 1)
        new_rmean = 0.9 * rmean + 0.1 * (jnp.mean(x, 0) if bug == "running-mean-local" else mu)
        return y, new_rmean, new_rvar
    return f


C.smap("s.batchnorm_running_stats_unbiased.dp4", {"dp": 4}, bn_dp, (P("dp"), P(), P()), (P("dp"), P(), P()), bn_ref,
       (R(B19, D19) + np.arange(B19, dtype=np.float32)[:, None] * 0.3, R(D19, scale=0.1),
        np.abs(R(D19)) + 0.5),
       bugs=[("unbiased-with-local-count", ["wrong-scale"]), ("running-mean-local", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 20. mixup with the randomness derived in the body from a replicated key:
#     one Beta(0.4, 0.4) weight for the whole batch and a permutation of the
#     global batch (jax.random.permutation), the same on every device; the
#     partner rows found in the all_gather'd batch, dp4


def mixup_key_ref(key, x, y1h):
    kl, kp = jax.random.split(key)
    lam = jax.random.beta(kl, 0.4, 0.4)
    perm = jax.random.permutation(kp, x.shape[0])
    return lam * x + (1 - lam) * x[perm], lam * y1h + (1 - lam) * y1h[perm]


def mixup_key_dp(bug):
    def f(key, x, y1h):
        bl = x.shape[0]
        kl, kp = jax.random.split(key)
        if bug == "lam-key-folded-with-device":
            kl = jax.random.fold_in(kl, idx("dp"))
        lam = jax.random.beta(kl, 0.4, 0.4)
        if bug == "local-permutation":
            pl = jax.random.permutation(kp, bl)
            return lam * x + (1 - lam) * x[pl], lam * y1h + (1 - lam) * y1h[pl]
        perm = jax.random.permutation(kp, bl * 4)
        mine = lax.dynamic_slice_in_dim(perm, idx("dp") * bl, bl)
        xg, yg = lax.all_gather(x, "dp", tiled=True), lax.all_gather(y1h, "dp", tiled=True)
        return lam * x + (1 - lam) * xg[mine], lam * y1h + (1 - lam) * yg[mine]
    return f


C.smap("s.mixup_beta_perm_from_key_in_body.dp4", {"dp": 4}, mixup_key_dp, (P(), P("dp"), P("dp")),
       (P("dp"), P("dp")), mixup_key_ref, (raw_key(20), R(16, 6), np.eye(5, dtype=np.float32)[I(0, 5, 16)]),
       bugs=[("lam-key-folded-with-device", ["wrong-value"]), ("local-permutation", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 21. masking on a flat packed token stream sharded over dp8 (6 tokens per
#     device, sequences of 8, so sequence starts fall at different local
#     positions on each device): the first token of every sequence is never
#     masked (global position % 8 == 0); the selection uniforms and the
#     replacement ids are host-made flat arrays, replicated, each device
#     slicing its 6 at its offset
N21, T21 = 48, 8


def flat_mask_ref(tok, us, rt):
    pos = jnp.arange(tok.shape[0])
    sel = (us < 0.3) & (pos % T21 != 0)
    return jnp.where(sel, rt, tok), sel.astype(jnp.float32)


def flat_mask_dp(bug):
    def f(tok, us, rt):
        nl = tok.shape[0]
        off = idx("dp") * (T21 if bug == "offset-by-sequence-length" else nl)
        pos = jnp.arange(nl) if bug == "local-position" else idx("dp") * nl + jnp.arange(nl)
        u, r = lax.dynamic_slice_in_dim(us, off, nl), lax.dynamic_slice_in_dim(rt, off, nl)
        sel = (u < 0.3) & (pos % T21 != 0)
        return jnp.where(sel, r, tok), sel.astype(jnp.float32)
    return f


C.smap("s.flat_stream_mask_sequence_starts.dp8", {"dp": 8}, flat_mask_dp, (P("dp"), P(), P()), (P("dp"), P("dp")),
       flat_mask_ref, (I(4, V8, N21), rng.uniform(0, 1, N21).astype(np.float32), I(4, V8, N21)),
       bugs=[("local-position", ["wrong-offset"]), ("offset-by-sequence-length", ["wrong-offset"])])

# ===========================================================================
# GSPMD pairs (correct)

# g1. CutMix with key-drawn boxes, jnp.roll partner, linear classifier + optax.sgd (dp4)
SGD = optax.sgd(0.1, momentum=0.9)


def cutmix_step(w, mom, key, x, y):
    kr, kc, kh, kw = jax.random.split(key, 4)
    b = x.shape[0]
    r0 = jax.random.randint(kr, (b,), 0, H2 - 2)
    c0 = jax.random.randint(kc, (b,), 0, W2 - 2)
    box = jnp.stack([r0, c0, jax.random.randint(kh, (b,), 1, 4), jax.random.randint(kw, (b,), 1, 3)], 1)
    xm, t = cutmix_ref(x, box, y)

    def loss(w):
        return -jnp.mean(jnp.sum(t * jax.nn.log_softmax(xm.reshape(b, -1) @ w, -1), -1))
    l, g = jax.value_and_grad(loss)(w)
    st = SGD.init(w)
    upd, st = SGD.update(g, (st[0]._replace(trace=mom),) + tuple(st[1:]), w)
    return optax.apply_updates(w, upd), st[0].trace, l


W11 = R(H2 * W2 * C2, K2, scale=0.1)
C.gspmd("g.cutmix_keyed_boxes_roll_sgd.dp4", {"dp": 4}, (P(), P(), P(), P("dp"), P("dp")), (P(), P(), P()),
        cutmix_step, (W11, np.zeros_like(W11), raw_key(11), R(B2, H2, W2, C2), I(0, K2, B2)))

# g2. crop + flip from per-example fold_in keys (dp8)
C.gspmd("g.crop_flip_foldin_keys_vmap.dp8", {"dp": 8}, (P(), P("dp")), P("dp"), keyed_ref,
        (raw_key(12), R(16, C3, H3, W3)))

# g3. masking from precomputed uniforms + tied-embedding MLM loss + optax.adamw (dp2 x sp4)
ADAMW = optax.adamw(1e-2, weight_decay=0.01)


def mlm_adamw_step(params, mu, nu, tok, us, uk, rt):
    ctok, lab, _ = mlm_mask(tok, us, uk, rt)
    wt = (lab >= 0).astype(jnp.float32)
    l, g = jax.value_and_grad(lambda p: mlm_loss(p["emb"], p["b"], ctok, jnp.maximum(lab, 0), wt))(params)
    st = ADAMW.init(params)
    st = (st[0]._replace(mu=mu, nu=nu),) + tuple(st[1:])
    upd, st = ADAMW.update(g, st, params)
    return optax.apply_updates(params, upd), st[0].mu, st[0].nu, l


PAR13 = {"emb": R(V8, D10, scale=0.5), "b": R(V8, scale=0.1)}
Z13 = jax.tree.map(np.zeros_like, PAR13)
PS13 = {"emb": P(), "b": P()}
US13 = US8.copy()
C.gspmd("g.mlm_801010_tied_loss_adamw.dp2xsp4", {"dp": 2, "sp": 4},
        (PS13, PS13, PS13, P("dp", "sp"), P("dp", "sp"), P("dp", "sp"), P("dp", "sp")), (PS13, PS13, PS13, P()),
        mlm_adamw_step, (PAR13, Z13, Z13, TOK8, US13, rng.uniform(0, 1, (B8, T8)).astype(np.float32),
                         I(4, V8, B8, T8)))

# g4. global-stat channel norm feeding a linear layer, images over (dp, sp)


def chnorm_linear(x, g, b, w):
    y, mu, var = chnorm_ref(x, g, b)
    return jnp.einsum("bhwc,cd->bhwd", jax.nn.relu(y), w), mu, var


C.gspmd("g.channel_norm_global_stats_linear.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"), P(), P(), P()),
        (P("dp", "sp"), P(), P()), chnorm_linear,
        (R(B6, H6, W6, C6, scale=2.0) + 1.0, R(C6, scale=0.2) + 1, R(C6, scale=0.2), R(C6, 8, scale=0.4)))

# g5. shuffling by jnp.take of a global permutation (dp8 in and out)
C.gspmd("g.shuffle_take_global_perm.dp8", {"dp": 8}, (P(), P("dp"), P("dp")), (P("dp"), P("dp")), shuffle_ref,
        (rng.permutation(B5).astype(np.int32), R(B5, D5), rng.uniform(0.5, 1.5, B5).astype(np.float32)))

# g6. the dropout MLP of 9. with the hidden activation constrained to (dp, tp)
M16 = make_mesh({"dp": 2, "tp": 4})


def drop_mlp_constrained(key, x, w1, w2):
    k1, k2 = jax.random.split(key)
    h = lax.with_sharding_constraint(jax.nn.gelu(x @ w1), NamedSharding(M16, P("dp", "tp")))
    h = jnp.where(jax.random.bernoulli(k1, KEEP, h.shape), h / KEEP, 0.0)
    y = lax.with_sharding_constraint(h @ w2, NamedSharding(M16, P("dp")))
    y = jnp.where(jax.random.bernoulli(k2, KEEP, y.shape), y / KEEP, 0.0)
    return x + y


C.gspmd("g.dropout_mlp_hidden_constrained.dp2xtp4", M16, (P(), P("dp"), P(None, "tp"), P("tp")), P("dp"),
        drop_mlp_constrained, (raw_key(16), R(B9, D9), R(D9, F9, scale=0.3), R(F9, D9, scale=0.3)))

# g7. mixup + mixed-label smoothing, vocabulary over tp, Beta weights from a key


def mixup_vocab_tp(key, x, y, w):
    kp, kl = jax.random.split(key)
    perm = jax.random.permutation(kp, x.shape[0])
    lam = jax.random.beta(kl, 0.4, 0.4, (x.shape[0],))
    xm = lam[:, None] * x + (1 - lam[:, None]) * x[perm]
    return mixsmooth_ref(xm @ w, y, y[perm], lam)


C.gspmd("g.mixup_beta_key_vocab_tp.dp2xtp4", {"dp": 2, "tp": 4}, (P(), P("dp"), P("dp"), P(None, "tp")), P(),
        mixup_vocab_tp, (raw_key(17), R(B7, D1), I(0, K7, B7), R(D1, K7, scale=0.4)))

# g8. per-example horizontal flip with the width sharded (dp2 x sp4)
C.gspmd("g.flip_width_sharded.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", None, None, "sp"), P("dp")),
        P("dp", None, None, "sp"), flip_w_ref, (R(B11, C11, H11, WD11), rng.uniform(0, 1, B11).astype(np.float32)))

# g9. the strided shuffle by reshape / swapaxes, batch over dp4 in and out
C.gspmd("g.stride_shuffle_reshape.dp4", {"dp": 4}, (P("dp"), P("dp")), (P("dp"), P("dp")), stride_shuffle_ref,
        (R(16, 5), I(0, 10, 16)))

# g10. random crop from precomputed offsets, height over sp (dp2 x sp4)
C.gspmd("g.crop_height_sharded.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", None, "sp"), P("dp")), P("dp", None, "sp"),
        crop_h_ref,
        (R(B13, C13, H13, W13), np.stack([rng.integers(0, 5, B13), rng.integers(0, 3, B13)], 1).astype(np.int32)))

# g11. cutout with the width sharded (dp2 x sp4)
C.gspmd("g.cutout_width_sharded.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", None, None, "sp"), P("dp"), P()),
        P("dp", None, None, "sp"), cutout_ref,
        (R(B15, C15, H15, W15), RECT15, np.array([0.485, 0.456, 0.406], np.float32)))

# g12. exact-count masking by a double argsort along the sp-sharded sequence
C.gspmd("g.exact_count_mask_argsort.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"), P("dp", "sp")),
        (P("dp", "sp"), P("dp", "sp")), exact_mask_ref,
        (I(4, V8, B16, T16), rng.uniform(0, 1, (B16, T16)).astype(np.float32)))

# g13. mixup with Beta weights given as an input, optax.smooth_labels on the
#     mixed one-hot targets and optax.softmax_cross_entropy, classes over tp


def mixup_smooth_optax(lam, perm, x, y1h, w):
    l = lam[:, None]
    xm = l * x + (1 - l) * x[perm]
    t = optax.smooth_labels(l * y1h + (1 - l) * y1h[perm], EPS)
    return jnp.mean(optax.softmax_cross_entropy(xm @ w, t))


C.gspmd("g.mixup_optax_smooth_labels_vocab_tp.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp"), P(), P("dp"), P("dp", "tp"), P(None, "tp")), P(), mixup_smooth_optax,
        (rng.beta(0.4, 0.4, B7).astype(np.float32), rng.permutation(B7).astype(np.int32), R(B7, D1),
         np.eye(K7, dtype=np.float32)[I(0, K7, B7)], R(D1, K7, scale=0.4)))

# g14. the batch-norm statistics of 19. with running averages, batch over dp8
C.gspmd("g.batchnorm_running_stats.dp8", {"dp": 8}, (P("dp"), P(), P()), (P("dp"), P(), P()), bn_ref,
        (R(B19, D19) + np.arange(B19, dtype=np.float32)[:, None] * 0.3, R(D19, scale=0.1), np.abs(R(D19)) + 0.5))

# g15. crop + flip from per-example keys with the images' height over sp too
C.gspmd("g.crop_flip_keys_height_sharded.dp2xsp2", {"dp": 2, "sp": 2}, (P(), P("dp", None, "sp")),
        P("dp"), keyed_ref, (raw_key(25), R(B3, C3, H3, W3)))

# g16. the flat-stream masking of 21., dp8
C.gspmd("g.flat_stream_mask.dp8", {"dp": 8}, (P("dp"), P("dp"), P("dp")), (P("dp"), P("dp")), flat_mask_ref,
        (I(4, V8, N21), rng.uniform(0, 1, N21).astype(np.float32), I(4, V8, N21)))

C.finish()
