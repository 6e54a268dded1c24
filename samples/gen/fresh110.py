"""samples/fresh110: a 110th batch of programs as a user writes them, on the
theme of on-device data augmentation and preprocessing inside distributed
training steps in current JAX (random resized crops resampled with
jax.image.scale_and_translate, mixup partners fetched by ppermute and
all_to_all, crops and flips by dynamic_slice and lax.cond under lax.map,
SpecAugment and time-shift on sequence-sharded audio, colour jitter with
image means over a sharded height, Chan-merged and ZCA (Newton-Schulz)
whitening statistics over a dp-sharded batch, padding masks from lengths,
per-token fold_in MLM masking, distillation with soft targets), none of them
an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. random resized crop (Inception-style area and log aspect ratio) of
    12 x 12 NHWC images to 8 x 8 by jax.image.scale_and_translate under a
    vmap, the per-example parameters from uniforms of
    jax.random.fold_in(key, global example index), dp4. Bugs: the local
    example index, the height and width scales swapped.
 2. timm-style "elem" mixup with the batch flipped (partner of example i is
    B-1-i): each device reverses its block and swaps it with the mirror
    device (ppermute d -> n-1-d), per-example lam from fold_in keys,
    label-smoothed soft targets, dp4. Bugs: no local reverse, a cyclic
    neighbour instead of the mirror, lam keys from the local index.
 3. mixup whose partner permutation is the block transpose that one
    all_to_all over dp4 realises (partner of (d, c*k+r) is (c, d*k+r)),
    labels exchanged the same way, a linear classifier's soft-target loss,
    gradients psum'd and an optax.adam step in the body. Bugs: no
    all_to_all (self partner), labels not exchanged, gradients not psum'd.
 4. random 8 x 8 crop (lax.dynamic_slice) and horizontal flip (lax.cond)
    per example of 10 x 10 images under lax.map over the local batch,
    keys fold_in(key, axis_index * local batch + i), dp8. Bugs: key folded
    with the axis index only, the cond branches swapped, the flip on the
    height axis.
 5. SpecAugment (one time mask, one frequency mask per example, filled
    with the example's mean) on (B, T, F) features, batch over dp2 and time
    over sp4: mask bounds from fold_in(key, global example), compared with
    global time positions; the fill mean psum'd over sp. Bugs: local time
    positions, the example index without the dp offset, the fill mean over
    the local time block.
 6. brightness then contrast jitter (torchvision order, grey-level mean
    with ITU-R 601 weights) of images with height over sp4 and batch over
    dp2, factors from fold_in keys. Bugs: the mean over the local rows,
    the mean of psum'd sums divided by the local pixel count, the key
    without the dp offset.
 7. input standardisation with global statistics merged by Chan's
    parallel algorithm from all_gather'd (count, mean, M2) triples, then
    affine gains, dp4. Bugs: M2 merged without the between-mean term, the
    variance as the pmean of local variances.
 8. ZCA whitening over a dp4 batch: psum'd mean and covariance, the
    inverse square root by Newton-Schulz iterations on the trace-normalised
    covariance. Bugs: the covariance not psum'd, centring with the local
    mean, the covariance divided by the local count.
 9. padding masks from per-example lengths on tokens with the sequence over
    sp4 (batch over dp2): masked mean pooling of embeddings, a label-
    smoothed classifier loss and its gradient in the head. Bugs: local
    positions, the valid count not psum'd over sp, the gradient pmean'd
    over dp.
10. BERT 15% masking with 80/10/10 replacement where every token's key is
    fold_in(fold_in(key, global row), global position) (nested vmaps),
    special tokens kept, returns corrupted tokens, labels and the global
    count, dp2 x sp4. Bugs: local positions, the row without the dp offset,
    the 80/10 thresholds swapped.
11. random time shift (jnp.roll by a per-example fold_in shift) of audio
    with time over sp4, batch over dp2: the time axis all_gather'd and the
    device's window cut from the doubled sequence. Bugs: the shift's sign,
    the roll within the local block, the key without the dp offset.
12. knowledge distillation with temperature (KL of softened teacher and
    student, times T^2) plus a label-smoothed CE, classes over tp4, batch
    over dp2: softmaxes by pmax / psum over tp. Bugs: the teacher's
    log-sum-exp over the local classes, no T^2, the label without the class
    offset.
13. mosaic: each output image the 2 x 2 grid of the 2x-average-pooled
    examples i, i+1, i+2, i+3 of the global batch (pooled images and labels
    all_gather'd), soft labels 1/4 each, dp4. Bugs: partners within the
    shard, the top-right and bottom-left quadrants swapped, the labels'
    partners from the local index.
14. packed rows from per-row document lengths: segment ids by
    jnp.searchsorted(cumsum, global position, side="right"), positions
    within the document into a position-embedding table, padding zeroed,
    sequence over sp4. Bugs: local positions, side="left".
15. bf16 input whitening with one-pass statistics (sum and sum of squares
    in f32) psum_scatter'd into feature slices, normalised there and
    all_gather'd back, dp4. Bugs: the sum of squares not reduced (the
    device's own slice), the local count.
16. CutMix with the previous example of the global batch (the previous
    device's last image by a cyclic ppermute), boxes from fold_in keys by
    jax.random.randint, lam from the pasted area, bf16 images, dp4. Bugs:
    the ppermute in the wrong direction, the box key's local index.
17. Gaussian noise and random erasing with per-example keys from
    jax.random.split(key, B) sliced at the device's rows, dp4. Bugs: split
    at the local batch size, the keys sliced at row 0.
18. T5-style span masking with the sequence over sp4: an all_to_all to
    whole rows, a span per row from fold_in(key, row), an all_to_all back.
    Bugs: the row index without the device offset, the span end inclusive.
19. standardisation by the shifted-data variance, the shift (the global
    batch's first example) broadcast from device 0 by a masked psum, inputs
    offset by 100, dp4. Bugs: each device shifting by its own first row,
    the sum of squares not reduced.
20. mixup with the "xor" partner i ^ local batch, one pairwise ppermute
    d <-> d ^ 1, dp4. Bugs: a cyclic ppermute, lam and 1 - lam swapped.
21. RandAugment-lite: one of four ops per example by lax.switch (identity,
    flip, invert, solarize) from fold_in keys under a vmap, blended by a
    random magnitude, dp8. Bugs: the local index, the op index off by one.
22. centring and scaling of a bf16 batch by pmean'd bf16 mean and mean
    square (no f32 upcast), dp8. Bugs: the mean not pmean'd, the mean
    square psum'd.
23. random resized crop (square, per-example side) of images with height
    over sp4: the height all_gather'd, the whole crop resampled by
    scale_and_translate, each device keeping its output rows, dp2 x sp4.
    Bugs: the rows at offset 0, the gather over dp.
24. mixup with a global permutation made on device: per-example fold_in
    uniform scores all_gather'd and argsort'ed, partners from the
    all_gather'd batch, dp4. Bugs: the argsort of the local scores, the
    permutation's rows at offset 0.
25. 15% masking of a flat token stream sharded jointly over (dp, sp), the
    position from lax.axis_index(("dp", "sp")), per-token fold_in keys.
    Bugs: axis_index(("sp", "dp")), the sp index only.
GSPMD pairs (jax.jit with in/out shardings, correct): g1. random resized
crop by scale_and_translate, a linear head and an optax.sgd step, dp8; g2.
SpecAugment from fold_in keys, (B, T, F) over dp2 x sp4; g3. ZCA whitening
by Newton-Schulz feeding a linear layer, dp4; g4. per-token fold_in MLM
masking, a tied-embedding MLM loss and an optax.adamw step, tokens over dp2
x sp4; g5. the distillation loss and its gradient, dp2 x tp4; g6. flip
mixup with soft targets and an optax.adam step, dp4; g7. mosaic with
jnp.roll partners and a soft-target loss, dp4; g8. packed rows by
searchsorted, sp4; g9. a key-placed crop upsampled by jax.image.resize plus
normal noise, dp8; g10. BERT masking with bernoulli / uniform / randint drawn
at the global shape, dp2 x sp4; g11. the lax.switch augmentation of 21.
feeding a linear head, dp8; g12. the crop of 23. with height over sp4 and a
mean pool; g13. padding masks, optax.smooth_labels targets and an
optax.lamb step, dp2 x sp4.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh110.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh110.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402,F401

SCRIPT = "samples/gen/fresh110.py"
C = Corpus("samples/fresh110", SCRIPT, "samples/gen/run_fresh110.sh", sys.argv[1:])
rng, R, I = seeded(110110)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index


def raw_key(seed):
    return np.asarray(jax.random.key_data(jax.random.key(seed)), np.uint32)


def smooth_onehot(y, k, eps=0.1):
    return jax.nn.one_hot(y, k) * (1 - eps) + eps / k


# ---------------------------------------------------------------------------
# 1. random resized crop by scale_and_translate (dp4)
B1, H1, O1, C1 = 8, 12, 8, 3


def rrc_params(k):
    u = jax.random.uniform(k, (4,))
    area = 0.35 + 0.65 * u[0]
    logr = jnp.log(3 / 4) + (jnp.log(4 / 3) - jnp.log(3 / 4)) * u[1]
    r = jnp.exp(logr)
    ch = jnp.clip(jnp.sqrt(area * r) * H1, 2.0, H1)
    cw = jnp.clip(jnp.sqrt(area / r) * H1, 2.0, H1)
    top = u[2] * (H1 - ch)
    left = u[3] * (H1 - cw)
    return ch, cw, top, left


def rrc_one(img, k, swap=False):
    ch, cw, top, left = rrc_params(k)
    sh, sw = O1 / ch, O1 / cw
    if swap:
        sh, sw = sw, sh
    scale = jnp.stack([sh, sw])
    trans = jnp.stack([-top * sh, -left * sw])
    return jax.image.scale_and_translate(img, (O1, O1, C1), (0, 1), scale, trans, method="linear")


def rrc_ref(key, x):
    keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(x.shape[0]))
    return jax.vmap(rrc_one)(x, keys)


def rrc_dp(bug):
    def f(key, x):
        bl = x.shape[0]
        gi = jnp.arange(bl) if bug == "local-example-index" else idx("dp") * bl + jnp.arange(bl)
        keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(gi)
        return jax.vmap(lambda im, k: rrc_one(im, k, swap=bug == "hw-scales-swapped"))(x, keys)
    return f


C.smap("s.rrc_scale_translate_foldin.dp4", {"dp": 4}, rrc_dp, (P(), P("dp")), P("dp"), rrc_ref,
       (raw_key(1), rng.uniform(0, 1, (B1, H1, H1, C1)).astype(np.float32)),
       bugs=[("local-example-index", ["wrong-offset"]), ("hw-scales-swapped", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 2. timm "elem" mixup with the flipped batch as partner (dp4)
B2, D2, K2 = 16, 8, 6


def flip_mix_ref(key, x, y):
    lam = jax.vmap(lambda i: jax.random.uniform(jax.random.fold_in(key, i), minval=0.4, maxval=1.0))(
        jnp.arange(x.shape[0]))
    l = lam[:, None]
    xm = l * x + (1 - l) * x[::-1]
    t = l * smooth_onehot(y, K2) + (1 - l) * smooth_onehot(y[::-1], K2)
    return xm, t


def flip_mix_dp(bug):
    def f(key, x, y):
        n, bl = 4, x.shape[0]
        me = idx("dp")
        gi = (jnp.arange(bl) if bug == "lam-local-index" else me * bl + jnp.arange(bl))
        lam = jax.vmap(lambda i: jax.random.uniform(jax.random.fold_in(key, i), minval=0.4, maxval=1.0))(gi)
        perm = [(d, (d + 1) % n) for d in range(n)] if bug == "cyclic-neighbour" else [(d, n - 1 - d) for d in range(n)]
        if bug == "no-local-reverse":
            xs, ys = x, y
        else:
            xs, ys = x[::-1], y[::-1]
        xp = lax.ppermute(xs, "dp", perm)
        yp = lax.ppermute(ys, "dp", perm)
        l = lam[:, None]
        return l * x + (1 - l) * xp, l * smooth_onehot(y, K2) + (1 - l) * smooth_onehot(yp, K2)
    return f


C.smap("s.flip_mixup_elem_mirror_ppermute.dp4", {"dp": 4}, flip_mix_dp, (P(), P("dp"), P("dp")), (P("dp"), P("dp")),
       flip_mix_ref, (raw_key(2), R(B2, D2), I(0, K2, B2)),
       bugs=[("no-local-reverse", ["wrong-permutation"]), ("cyclic-neighbour", ["wrong-permutation"]),
             ("lam-local-index", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. mixup with the all_to_all block-transpose partner, adam step (dp4)
N3, B3, D3, K3 = 4, 16, 8, 5
BL3 = B3 // N3
KK3 = BL3 // N3
PERM3 = np.array([c * BL3 + d * KK3 + r for d in range(N3) for c in range(N3) for r in range(KK3)], np.int32)
OPT3 = optax.adam(1e-2)


def a2a_loss(w, xm, t, nb):
    return -jnp.sum(t * jax.nn.log_softmax(xm @ w, -1)) / nb


def a2a_ref(w, st, lam, x, y):
    xp, yp = x[PERM3], y[PERM3]
    l = lam[:, None]
    xm = l * x + (1 - l) * xp
    t = l * jax.nn.one_hot(y, K3) + (1 - l) * jax.nn.one_hot(yp, K3)
    loss, g = jax.value_and_grad(a2a_loss)(w, xm, t, B3)
    upd, st = OPT3.update(g, st, w)
    return optax.apply_updates(w, upd), st, loss


def a2a_dp(bug):
    def f(w, st, lam, x, y):
        if bug == "no-all-to-all":
            xp, yp = x, y
        else:
            xp = lax.all_to_all(x, "dp", 0, 0, tiled=True)
            yp = y if bug == "labels-not-exchanged" else lax.all_to_all(y, "dp", 0, 0, tiled=True)
        l = lam[:, None]
        xm = l * x + (1 - l) * xp
        t = l * jax.nn.one_hot(y, K3) + (1 - l) * jax.nn.one_hot(yp, K3)
        loss, g = jax.value_and_grad(a2a_loss)(w, xm, t, B3)
        if bug != "grad-not-psummed":
            g = psum(g, "dp")
        upd, st = OPT3.update(g, st, w)
        return optax.apply_updates(w, upd), st, psum(loss, "dp")
    return f


W3 = R(D3, K3, scale=0.3)
ST3 = OPT3.init(jnp.asarray(W3))
C.smap("s.mixup_alltoall_block_transpose_adam.dp4", {"dp": 4}, a2a_dp,
       (P(), jax.tree.map(lambda _: P(), ST3), P("dp"), P("dp"), P("dp")),
       (P(), jax.tree.map(lambda _: P(), ST3), P()), a2a_ref,
       (W3, jax.tree.map(np.asarray, ST3), rng.uniform(0.3, 1.0, B3).astype(np.float32), R(B3, D3),
        I(0, K3, B3)),
       bugs=[("no-all-to-all", ["missing-collective"]), ("labels-not-exchanged", ["wrong-operand"]),
             ("grad-not-psummed", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 4. crop by dynamic_slice and flip by lax.cond under lax.map (dp8)
B4, H4, CR4, C4 = 16, 10, 8, 3


def crop_flip_one(img, k, swap=False, hflip_axis=1):
    k1, k2 = jax.random.split(k)
    off = jax.random.randint(k1, (2,), 0, H4 - CR4 + 1)
    c = lax.dynamic_slice(img, (off[0], off[1], 0), (CR4, CR4, C4))
    flip = jax.random.bernoulli(k2)
    yes = lambda a: jnp.flip(a, hflip_axis)
    no = lambda a: a
    return lax.cond(flip, no, yes, c) if swap else lax.cond(flip, yes, no, c)


def crop_flip_ref(key, x):
    gi = jnp.arange(x.shape[0])
    return lax.map(lambda a: crop_flip_one(a[0], jax.random.fold_in(key, a[1])), (x, gi))


def crop_flip_dp(bug):
    def f(key, x):
        bl = x.shape[0]
        if bug == "key-axis-index-only":
            gi = jnp.full((bl,), idx("dp"))
        else:
            gi = idx("dp") * bl + jnp.arange(bl)
        ax = 0 if bug == "flip-height" else 1
        return lax.map(lambda a: crop_flip_one(a[0], jax.random.fold_in(key, a[1]),
                                               swap=bug == "cond-branches-swapped", hflip_axis=ax), (x, gi))
    return f


C.smap("s.crop_dynslice_flip_cond_laxmap.dp8", {"dp": 8}, crop_flip_dp, (P(), P("dp")), P("dp"), crop_flip_ref,
       (raw_key(4), R(B4, H4, H4, C4)),
       bugs=[("key-axis-index-only", ["wrong-offset"]), ("cond-branches-swapped", ["wrong-operand"]),
             ("flip-height", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 5. SpecAugment on (B, T, F), batch over dp2, time over sp4
B5, T5, F5, TW5, FW5 = 4, 16, 8, 6, 3


def spec_bounds(k):
    k1, k2, k3, k4 = jax.random.split(k, 4)
    tw = jax.random.randint(k1, (), 1, TW5 + 1)
    t0 = jax.random.randint(k2, (), 0, T5 - TW5)
    fw = jax.random.randint(k3, (), 1, FW5 + 1)
    f0 = jax.random.randint(k4, (), 0, F5 - FW5)
    return t0, tw, f0, fw


def spec_one(x, k, tpos, mean):
    t0, tw, f0, fw = spec_bounds(k)
    tm = (tpos >= t0) & (tpos < t0 + tw)
    fpos = jnp.arange(F5)
    fm = (fpos >= f0) & (fpos < f0 + fw)
    return jnp.where(tm[:, None] | fm[None, :], mean, x)


def spec_ref(key, x):
    keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(x.shape[0]))
    means = jnp.mean(x, (1, 2))
    return jax.vmap(lambda a, k, m: spec_one(a, k, jnp.arange(T5), m))(x, keys, means)


def spec_sp(bug):
    def f(key, x):
        bl, tl = x.shape[0], x.shape[1]
        gi = jnp.arange(bl) if bug == "example-no-dp-offset" else idx("dp") * bl + jnp.arange(bl)
        keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(gi)
        if bug == "fill-local-mean":
            means = jnp.mean(x, (1, 2))
        else:
            means = psum(jnp.sum(x, (1, 2)), "sp") / (T5 * F5)
        tpos = jnp.arange(tl) if bug == "local-time-index" else idx("sp") * tl + jnp.arange(tl)
        return jax.vmap(lambda a, k, m: spec_one(a, k, tpos, m))(x, keys, means)
    return f


C.smap("s.specaugment_time_freq_mask_mean_fill.dp2xsp4", {"dp": 2, "sp": 4}, spec_sp,
       (P(), P("dp", "sp")), P("dp", "sp"), spec_ref, (raw_key(5), R(B5, T5, F5) + 2.0),
       bugs=[("local-time-index", ["wrong-offset"]), ("example-no-dp-offset", ["wrong-offset"]),
             ("fill-local-mean", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 6. brightness / contrast jitter, height over sp4, batch over dp2
B6, H6, W6, C6 = 4, 8, 6, 3
GREY = np.array([0.299, 0.587, 0.114], np.float32)


def jitter_factors(k):
    u = jax.random.uniform(k, (2,))
    return 0.7 + 0.6 * u[0], 0.6 + 0.8 * u[1]


def jitter_ref(key, x):
    ks = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(x.shape[0]))
    b, c = jax.vmap(jitter_factors)(ks)
    y = jnp.clip(x * b[:, None, None, None], 0.0, 1.0)
    m = jnp.mean(y @ GREY, (1, 2))[:, None, None, None]
    return jnp.clip((y - m) * c[:, None, None, None] + m, 0.0, 1.0)


def jitter_sp(bug):
    def f(key, x):
        bl, hl = x.shape[0], x.shape[1]
        gi = jnp.arange(bl) if bug == "key-no-dp-offset" else idx("dp") * bl + jnp.arange(bl)
        ks = jax.vmap(lambda i: jax.random.fold_in(key, i))(gi)
        b, c = jax.vmap(jitter_factors)(ks)
        y = jnp.clip(x * b[:, None, None, None], 0.0, 1.0)
        s = jnp.sum(y @ GREY, (1, 2))
        if bug == "mean-local-rows":
            m = s / (hl * W6)
        elif bug == "psum-over-local-count":
            m = psum(s, "sp") / (hl * W6)
        else:
            m = psum(s, "sp") / (H6 * W6)
        m = m[:, None, None, None]
        return jnp.clip((y - m) * c[:, None, None, None] + m, 0.0, 1.0)
    return f


C.smap("s.colour_jitter_contrast_grey_mean.dp2xsp4", {"dp": 2, "sp": 4}, jitter_sp,
       (P(), P("dp", "sp")), P("dp", "sp"), jitter_ref,
       (raw_key(6), rng.uniform(0, 1, (B6, H6, W6, C6)).astype(np.float32)),
       bugs=[("mean-local-rows", ["missing-collective"]), ("psum-over-local-count", ["wrong-scale"]),
             ("key-no-dp-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 7. standardisation with Chan-merged statistics (dp4)
B7, D7 = 16, 6


def std_ref(x, g, b):
    mu = jnp.mean(x, 0)
    var = jnp.var(x, 0)
    return (x - mu) * lax.rsqrt(var + 1e-5) * g + b


def chan_dp(bug):
    def f(x, g, b):
        n = 4
        cnt = jnp.float32(x.shape[0])
        mu = jnp.mean(x, 0)
        m2 = jnp.sum(jnp.square(x - mu), 0)
        if bug == "pmean-local-var":
            var = pmean(m2 / cnt, "dp")
            gmu = pmean(mu, "dp")
        else:
            cs = lax.all_gather(cnt, "dp")
            mus = lax.all_gather(mu, "dp")
            m2s = lax.all_gather(m2, "dp")
            na, ma, sa = cs[0], mus[0], m2s[0]
            for j in range(1, n):
                nb_, mb, sb = cs[j], mus[j], m2s[j]
                delta = mb - ma
                tot = na + nb_
                ma = ma + delta * nb_ / tot
                sa = sa + sb if bug == "m2-without-delta" else sa + sb + jnp.square(delta) * na * nb_ / tot
                na = tot
            gmu, var = ma, sa / na
        return (x - gmu) * lax.rsqrt(var + 1e-5) * g + b
    return f


X7 = R(B7, D7) + np.repeat(np.arange(4, dtype=np.float32), B7 // 4)[:, None] * 1.5
C.smap("s.standardise_chan_merge_allgather.dp4", {"dp": 4}, chan_dp, (P("dp"), P(), P()), P("dp"), std_ref,
       (X7, 1.0 + R(D7, scale=0.2), R(D7, scale=0.2)),
       bugs=[("m2-without-delta", ["wrong-operand"]), ("pmean-local-var", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 8. ZCA whitening by Newton-Schulz (dp4)
B8, D8, NS8 = 32, 4, 8


def ns_isqrt(cov):
    d = cov.shape[0]
    tr = jnp.trace(cov)
    y, z = cov / tr, jnp.eye(d, dtype=cov.dtype)
    for _ in range(NS8):
        t = 0.5 * (3.0 * jnp.eye(d, dtype=cov.dtype) - z @ y)
        y, z = y @ t, t @ z
    return z / jnp.sqrt(tr)


def zca_ref(x):
    mu = jnp.mean(x, 0)
    xc = x - mu
    cov = xc.T @ xc / x.shape[0] + 1e-3 * jnp.eye(x.shape[1])
    return xc @ ns_isqrt(cov)


def zca_dp(bug):
    def f(x):
        bl = x.shape[0]
        if bug == "center-local-mean":
            mu = jnp.mean(x, 0)
        else:
            mu = psum(jnp.sum(x, 0), "dp") / B8
        xc = x - mu
        s = jnp.einsum("bi,bj->ij", xc, xc)
        if bug == "cov-not-psummed":
            cov = s / B8
        elif bug == "cov-local-count":
            cov = psum(s, "dp") / bl
        else:
            cov = psum(s, "dp") / B8
        cov = cov + 1e-3 * jnp.eye(x.shape[1])
        return xc @ ns_isqrt(cov)
    return f


A8 = np.array([[1.0, 0.3, 0.0, 0.0], [0.0, 0.9, 0.2, 0.0], [0.1, 0.0, 0.8, 0.3], [0.0, 0.0, 0.1, 0.7]], np.float32)
X8 = R(B8, D8) @ A8 + np.repeat(np.arange(4, dtype=np.float32), B8 // 4)[:, None] * 0.5
C.smap("s.zca_whiten_newton_schulz.dp4", {"dp": 4}, zca_dp, (P("dp"),), P("dp"), zca_ref, (X8,),
       bugs=[("cov-not-psummed", ["missing-collective"]), ("center-local-mean", ["wrong-operand"]),
             ("cov-local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 9. padding masks from lengths, masked mean pooling, classifier loss (dp2 x sp4)
B9, T9, V9, D9, K9 = 4, 16, 20, 8, 5


def pool_loss(w, pooled, y, nb):
    logits = pooled @ w
    return -jnp.sum(smooth_onehot(y, K9) * jax.nn.log_softmax(logits, -1)) / nb


def pad_ref(w, emb, tok, lens, y):
    m = (jnp.arange(T9)[None, :] < lens[:, None]).astype(jnp.float32)
    e = emb[tok]
    pooled = jnp.sum(e * m[..., None], 1) / jnp.maximum(jnp.sum(m, 1, keepdims=True), 1.0)
    return jax.value_and_grad(pool_loss)(w, pooled, y, B9)


def pad_sp(bug):
    def f(w, emb, tok, lens, y):
        tl = tok.shape[1]
        pos = jnp.arange(tl) if bug == "local-position" else idx("sp") * tl + jnp.arange(tl)
        m = (pos[None, :] < lens[:, None]).astype(jnp.float32)
        e = emb[tok]
        num = psum(jnp.sum(e * m[..., None], 1), "sp")
        cnt = jnp.sum(m, 1, keepdims=True)
        if bug != "count-not-psummed":
            cnt = psum(cnt, "sp")
        pooled = num / jnp.maximum(cnt, 1.0)
        loss, g = jax.value_and_grad(pool_loss)(w, pooled, y, B9)
        if bug == "grad-pmean-dp":
            return psum(loss, "dp"), pmean(g, "dp")
        return psum(loss, "dp"), psum(g, "dp")
    return f


C.smap("s.padding_mask_from_lengths_pool_ce.dp2xsp4", {"dp": 2, "sp": 4}, pad_sp,
       (P(), P(), P("dp", "sp"), P("dp"), P("dp")), (P(), P()), pad_ref,
       (R(D9, K9, scale=0.5), R(V9, D9), I(0, V9, B9, T9), np.array([3, 16, 9, 6], np.int32), I(0, K9, B9)),
       bugs=[("local-position", ["wrong-offset"]), ("count-not-psummed", ["missing-collective"]),
             ("grad-pmean-dp", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 10. per-token fold_in MLM masking, dp2 x sp4
B10, T10, V10, MASK10, NSPEC10 = 4, 16, 30, 3, 4


def tok_corrupt(key, row, pos, tok, swap=False):
    k = jax.random.fold_in(jax.random.fold_in(key, row), pos)
    k1, k2 = jax.random.split(k)
    u = jax.random.uniform(k1, (2,))
    rid = jax.random.randint(k2, (), NSPEC10, V10)
    sel = (u[0] < 0.15) & (tok >= NSPEC10)
    if swap:
        new = jnp.where(u[1] < 0.8, rid, jnp.where(u[1] < 0.9, MASK10, tok))
    else:
        new = jnp.where(u[1] < 0.8, MASK10, jnp.where(u[1] < 0.9, rid, tok))
    return jnp.where(sel, new, tok), jnp.where(sel, tok, -100), sel.astype(jnp.int32)


def grid_corrupt(key, rows, poss, tok, swap=False):
    inner = jax.vmap(lambda p, t, r: tok_corrupt(key, r, p, t, swap), in_axes=(0, 0, None))
    return jax.vmap(lambda r, tr: inner(poss, tr, r))(rows, tok)


def mlm_ref(key, tok):
    c, lab, sel = grid_corrupt(key, jnp.arange(B10), jnp.arange(T10), tok)
    return c, lab, jnp.sum(sel)


def mlm_sp(bug):
    def f(key, tok):
        bl, tl = tok.shape
        rows = jnp.arange(bl) if bug == "row-no-dp-offset" else idx("dp") * bl + jnp.arange(bl)
        poss = jnp.arange(tl) if bug == "local-position" else idx("sp") * tl + jnp.arange(tl)
        c, lab, sel = grid_corrupt(key, rows, poss, tok, swap=bug == "thresholds-swapped")
        return c, lab, psum(jnp.sum(sel), ("dp", "sp"))
    return f


C.smap("s.mlm_801010_per_token_foldin.dp2xsp4", {"dp": 2, "sp": 4}, mlm_sp, (P(), P("dp", "sp")),
       (P("dp", "sp"), P("dp", "sp"), P()), mlm_ref, (raw_key(10), I(0, V10, B10, T10)),
       bugs=[("local-position", ["wrong-offset"]), ("row-no-dp-offset", ["wrong-offset"]),
             ("thresholds-swapped", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 11. random time shift of audio, time over sp4, batch over dp2
B11, T11, F11 = 4, 16, 3


def shift_of(key, i):
    return jax.random.randint(jax.random.fold_in(key, i), (), 0, T11)


def tshift_ref(key, x):
    s = jax.vmap(lambda i: shift_of(key, i))(jnp.arange(x.shape[0]))
    return jax.vmap(lambda a, k: jnp.roll(a, k, axis=0))(x, s)


def tshift_sp(bug):
    def f(key, x):
        bl, tl = x.shape[0], x.shape[1]
        gi = jnp.arange(bl) if bug == "key-no-dp-offset" else idx("dp") * bl + jnp.arange(bl)
        s = jax.vmap(lambda i: shift_of(key, i))(gi)
        if bug == "roll-within-block":
            return jax.vmap(lambda a, k: jnp.roll(a, k, axis=0))(x, s)
        xg = lax.all_gather(x, "sp", axis=1, tiled=True)
        xx = jnp.concatenate([xg, xg], 1)
        start = idx("sp") * tl + s if bug == "shift-sign" else idx("sp") * tl - s
        start = jnp.mod(start, T11)
        return jax.vmap(lambda a, st: lax.dynamic_slice_in_dim(a, st, tl, 0))(xx, start)
    return f


C.smap("s.audio_time_shift_roll_allgather.dp2xsp4", {"dp": 2, "sp": 4}, tshift_sp, (P(), P("dp", "sp")),
       P("dp", "sp"), tshift_ref, (raw_key(11), R(B11, T11, F11)),
       bugs=[("shift-sign", ["wrong-permutation"]), ("roll-within-block", ["missing-collective"]),
             ("key-no-dp-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 12. distillation with temperature plus smoothed CE, classes over tp4, batch dp2
B12, K12, TT, ALPHA, EPS12 = 4, 16, 2.0, 0.7, 0.1


def distill_ref(s, t, y):
    ls = jax.nn.log_softmax(s / TT, -1)
    lt = jax.nn.log_softmax(t / TT, -1)
    kl = jnp.sum(jnp.exp(lt) * (lt - ls), -1) * TT * TT
    ce = -jnp.sum(smooth_onehot(y, K12, EPS12) * jax.nn.log_softmax(s, -1), -1)
    per = ALPHA * kl + (1 - ALPHA) * ce
    return per, jnp.mean(per)


def vp_logsoftmax(z, local=False):
    m = jnp.max(z, -1, keepdims=True) if local else pmax(jnp.max(z, -1, keepdims=True), "tp")
    m = lax.stop_gradient(m)
    se = jnp.sum(jnp.exp(z - m), -1, keepdims=True)
    if not local:
        se = psum(se, "tp")
    return z - m - jnp.log(se)


def distill_tp(bug):
    def f(s, t, y):
        kl_ = s.shape[1]
        ls = vp_logsoftmax(s / TT)
        lt = vp_logsoftmax(t / TT, local=bug == "teacher-lse-local")
        kl = psum(jnp.sum(jnp.exp(lt) * (lt - ls), -1), "tp")
        if bug != "no-T-squared":
            kl = kl * TT * TT
        lo = vp_logsoftmax(s)
        cls = jnp.arange(kl_) if bug == "label-no-class-offset" else idx("tp") * kl_ + jnp.arange(kl_)
        tgt = (cls[None, :] == y[:, None]).astype(jnp.float32) * (1 - EPS12) + EPS12 / K12
        ce = -psum(jnp.sum(tgt * lo, -1), "tp")
        per = ALPHA * kl + (1 - ALPHA) * ce
        return per, psum(jnp.sum(per), "dp") / B12
    return f


C.smap("s.distill_temperature_kl_smoothed_ce.dp2xtp4", {"dp": 2, "tp": 4}, distill_tp,
       (P("dp", "tp"), P("dp", "tp"), P("dp")), (P("dp"), P()), distill_ref,
       (R(B12, K12, scale=2.0), R(B12, K12, scale=2.0), I(0, K12, B12)),
       bugs=[("teacher-lse-local", ["missing-collective"]), ("no-T-squared", ["wrong-scale"]),
             ("label-no-class-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 13. mosaic of four 2x-downsampled images (partners i+1, i+2, i+3 of the
#     global batch), soft labels 1/4 each, dp4
B13, H13, C13, K13 = 8, 8, 2, 5


def pool2(x):
    b, h, w, c = x.shape
    return x.reshape(b, h // 2, 2, w // 2, 2, c).mean((2, 4))


def mosaic_from(pg, yg, gi, nb, transpose=False):
    q = [pg[(gi + j) % nb] for j in range(4)]
    if transpose:
        q[1], q[2] = q[2], q[1]
    top = jnp.concatenate([q[0], q[1]], 2)
    bot = jnp.concatenate([q[2], q[3]], 2)
    t = sum(jax.nn.one_hot(yg[(gi + j) % nb], K13) for j in range(4)) / 4.0
    return jnp.concatenate([top, bot], 1), t


def mosaic_ref(x, y):
    return mosaic_from(pool2(x), y, jnp.arange(x.shape[0]), x.shape[0])


def mosaic_dp(bug):
    def f(x, y):
        bl = x.shape[0]
        pl = pool2(x)
        if bug == "partners-within-shard":
            return mosaic_from(pl, y, jnp.arange(bl), bl)
        pg = lax.all_gather(pl, "dp", tiled=True)
        yg = lax.all_gather(y, "dp", tiled=True)
        gi = idx("dp") * bl + jnp.arange(bl)
        if bug == "labels-local-index":
            img, _ = mosaic_from(pg, yg, gi, B13)
            _, t = mosaic_from(pg, yg, jnp.arange(bl), B13)
            return img, t
        return mosaic_from(pg, yg, gi, B13, transpose=bug == "quadrants-transposed")
    return f


C.smap("s.mosaic_four_partners_allgather_pool.dp4", {"dp": 4}, mosaic_dp, (P("dp"), P("dp")), (P("dp"), P("dp")),
       mosaic_ref, (R(B13, H13, H13, C13), I(0, K13, B13)),
       bugs=[("partners-within-shard", ["wrong-offset"]), ("quadrants-transposed", ["wrong-permutation"]),
             ("labels-local-index", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 14. packed rows built on device from document lengths: segment ids by
#     jnp.searchsorted of the cumulative lengths at global positions,
#     position-in-document embeddings, padding zeroed; sequence over sp4
B14, T14, ND14, D14 = 2, 16, 4, 6


def pack_embed(x, pe, lens, pos, side="right"):
    cum = jnp.cumsum(lens, 1)
    seg = jax.vmap(lambda c: jnp.searchsorted(c, pos, side=side))(cum)  # (B, T)
    start = jnp.take_along_axis(jnp.concatenate([jnp.zeros_like(cum[:, :1]), cum], 1), jnp.minimum(seg, ND14), 1)
    pin = jnp.clip(pos[None, :] - start, 0, T14 - 1)
    ok = (seg < ND14)[..., None]
    return jnp.where(ok, x + pe[pin], 0.0), jnp.where(seg < ND14, seg, -1)


def pack_ref(x, pe, lens):
    return pack_embed(x, pe, lens, jnp.arange(T14))


def pack_sp(bug):
    def f(x, pe, lens):
        tl = x.shape[1]
        gpos = idx("sp") * tl + jnp.arange(tl)
        if bug == "local-position":
            return pack_embed(x, pe, lens, jnp.arange(tl))
        if bug == "side-left":
            return pack_embed(x, pe, lens, gpos, side="left")
        return pack_embed(x, pe, lens, gpos)
    return f


LENS14 = np.array([[5, 3, 6, 1], [2, 7, 4, 0]], np.int32)
C.smap("s.pack_searchsorted_segids_pos_embed.sp4", {"sp": 4}, pack_sp, (P(None, "sp"), P(), P()),
       (P(None, "sp"), P(None, "sp")), pack_ref, (R(B14, T14, D14), R(T14, D14, scale=0.5), LENS14),
       bugs=[("local-position", ["wrong-offset"]), ("side-left", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 15. bf16 input whitening with one-pass statistics by psum_scatter (feature
#     slices) + all_gather, f32 accumulation, dp4
B15, D15 = 16, 8


def bfwhite_ref(x):
    xf = x.astype(jnp.float32)
    mu = jnp.mean(xf, 0)
    var = jnp.maximum(jnp.mean(xf * xf, 0) - mu * mu, 0.0)
    return ((xf - mu) * lax.rsqrt(var + 1e-4)).astype(jnp.bfloat16)


def bfwhite_dp(bug):
    def f(x):
        xf = x.astype(jnp.float32)
        st = jnp.stack([jnp.sum(xf, 0), jnp.sum(xf * xf, 0)])  # (2, D)
        if bug == "sumsq-not-reduced":
            red = lax.psum_scatter(st[0], "dp", scatter_dimension=0, tiled=True)
            me = idx("dp")
            sq = lax.dynamic_slice_in_dim(st[1], me * (D15 // 4), D15 // 4)
            red = jnp.stack([red, sq])
        else:
            red = lax.psum_scatter(st, "dp", scatter_dimension=1, tiled=True)  # (2, D/4)
        nn = x.shape[0] if bug == "local-count" else B15
        mu = red[0] / nn
        var = jnp.maximum(red[1] / nn - mu * mu, 0.0)
        inv = lax.rsqrt(var + 1e-4)
        mu = lax.all_gather(mu, "dp", tiled=True)
        inv = lax.all_gather(inv, "dp", tiled=True)
        return ((xf - mu) * inv).astype(jnp.bfloat16)
    return f


X15 = (R(B15, D15) * 2.0 + 1.0).astype(jnp.bfloat16)
C.smap("s.bf16_whiten_psum_scatter_allgather.dp4", {"dp": 4}, bfwhite_dp, (P("dp"),), P("dp"), bfwhite_ref, (X15,),
       bugs=[("sumsq-not-reduced", ["missing-collective"]), ("local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 16. CutMix with the previous example of the global batch as partner (one
#     ppermute of each device's last image), boxes from fold_in keys
#     (jax.random.randint), lam from the pasted area, smoothed labels; bf16
#     images, dp4
B16, H16, C16, K16 = 8, 6, 2, 4


def cut_box(k):
    k1, k2 = jax.random.split(k)
    hw = jax.random.randint(k1, (2,), 1, H16)
    tl = jax.random.randint(k2, (2,), 0, H16) % (H16 - hw + 1)
    r = jnp.arange(H16)
    rows = (r >= tl[0]) & (r < tl[0] + hw[0])
    cols = (r >= tl[1]) & (r < tl[1] + hw[1])
    return rows[:, None] & cols[None, :]


def cut_apply(key, gi, x, xp, y, yp):
    m = jax.vmap(lambda i: cut_box(jax.random.fold_in(key, i)))(gi)  # (b, H, W)
    xm = jnp.where(m[..., None], xp, x)
    area = jnp.mean(m.astype(jnp.float32), (1, 2))[:, None]
    return xm, (1 - area) * smooth_onehot(y, K16) + area * smooth_onehot(yp, K16)


def cut_ref(key, x, y):
    return cut_apply(key, jnp.arange(x.shape[0]), x, jnp.roll(x, 1, 0), y, jnp.roll(y, 1, 0))


def cut_dp(bug):
    def f(key, x, y):
        n, bl = 4, x.shape[0]
        perm = [(d, (d - 1) % n) for d in range(n)] if bug == "ppermute-wrong-direction" \
            else [(d, (d + 1) % n) for d in range(n)]
        xp = jnp.concatenate([lax.ppermute(x[-1:], "dp", perm), x[:-1]], 0)
        yp = jnp.concatenate([lax.ppermute(y[-1:], "dp", perm), y[:-1]], 0)
        gi = jnp.arange(bl) if bug == "box-key-local-index" else idx("dp") * bl + jnp.arange(bl)
        return cut_apply(key, gi, x, xp, y, yp)
    return f


C.smap("s.cutmix_prev_example_ppermute_foldin_box.dp4", {"dp": 4}, cut_dp, (P(), P("dp"), P("dp")),
       (P("dp"), P("dp")), cut_ref,
       (raw_key(16), R(B16, H16, H16, C16).astype(jnp.bfloat16), I(0, K16, B16)),
       bugs=[("ppermute-wrong-direction", ["wrong-permutation"]), ("box-key-local-index", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 17. Gaussian noise and random erasing with per-example keys from
#     jax.random.split(key, B): each device splits at the global batch size
#     and takes its rows, dp4
B17, H17, C17 = 8, 6, 2


def noise_erase_one(x, k):
    k1, k2, k3 = jax.random.split(k, 3)
    noisy = x + 0.1 * jax.random.normal(k1, x.shape)
    hw = jax.random.randint(k2, (2,), 1, 4)
    tl = jax.random.randint(k3, (2,), 0, H17 - 3)
    r = jnp.arange(H17)
    m = ((r >= tl[0]) & (r < tl[0] + hw[0]))[:, None] & ((r >= tl[1]) & (r < tl[1] + hw[1]))[None, :]
    return jnp.where(m[..., None], 0.0, noisy)


def noise_erase_ref(key, x):
    return jax.vmap(noise_erase_one)(x, jax.random.split(key, x.shape[0]))


def noise_erase_dp(bug):
    def f(key, x):
        bl = x.shape[0]
        if bug == "split-local-count":
            keys = jax.random.split(key, bl)
        else:
            ks = jax.random.split(key, B17)
            keys = ks[:bl] if bug == "slice-at-origin" else lax.dynamic_slice_in_dim(ks, idx("dp") * bl, bl)
        return jax.vmap(noise_erase_one)(x, keys)
    return f


C.smap("s.noise_erase_split_keys_sliced.dp4", {"dp": 4}, noise_erase_dp, (P(), P("dp")), P("dp"), noise_erase_ref,
       (raw_key(17), R(B17, H17, H17, C17)),
       bugs=[("split-local-count", ["wrong-offset"]), ("slice-at-origin", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 18. T5-style span masking of embedded sequences kept sequence-sharded: an
#     all_to_all gives each device whole rows (row = its sp index), one span
#     of 4 positions per row from fold_in(key, row) replaced by a learned
#     mask vector, an all_to_all back to sequence shards, sp4
B18, T18, D18, L18 = 4, 16, 4, 4


def span_one(x, k, mvec, inclusive=False):
    s = jax.random.randint(k, (), 0, T18 - L18)
    t = jnp.arange(T18)
    m = (t >= s) & ((t <= s + L18) if inclusive else (t < s + L18))
    return jnp.where(m[:, None], mvec, x)


def span_ref(key, x, mvec):
    ks = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(B18))
    return jax.vmap(lambda a, k: span_one(a, k, mvec))(x, ks)


def span_sp(bug):
    def f(key, x, mvec):
        rows = lax.all_to_all(x, "sp", 0, 1, tiled=True)  # (1, T, D): this device's row
        br = rows.shape[0]
        r0 = 0 if bug == "row-index-from-zero" else idx("sp") * br
        ks = jax.vmap(lambda i: jax.random.fold_in(key, i))(r0 + jnp.arange(br))
        out = jax.vmap(lambda a, k: span_one(a, k, mvec, inclusive=bug == "span-end-inclusive"))(rows, ks)
        return lax.all_to_all(out, "sp", 1, 0, tiled=True)
    return f


C.smap("s.span_mask_alltoall_rows_roundtrip.sp4", {"sp": 4}, span_sp, (P(), P(None, "sp"), P()), P(None, "sp"),
       span_ref, (raw_key(18), R(B18, T18, D18), R(D18)),
       bugs=[("row-index-from-zero", ["wrong-offset"]), ("span-end-inclusive", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 19. standardisation with the shifted-data variance (shift K = the global
#     batch's first example, broadcast from device 0 by a masked psum), for
#     inputs with a large offset, dp4
B19, D19 = 16, 6


def shifted_ref(x):
    k = x[0]
    d = x - k
    mu = jnp.mean(d, 0)
    var = jnp.mean(d * d, 0) - mu * mu
    return (d - mu) * lax.rsqrt(jnp.maximum(var, 0.0) + 1e-3)


def shifted_dp(bug):
    def f(x):
        if bug == "shift-own-first-row":
            k = x[0]
        else:
            k = psum(jnp.where(idx("dp") == 0, x[0], 0.0), "dp")
        d = x - k
        mu = psum(jnp.sum(d, 0), "dp") / B19
        sq = jnp.sum(d * d, 0)
        msq = sq / x.shape[0] if bug == "sq-not-reduced" else psum(sq, "dp") / B19
        return (d - mu) * lax.rsqrt(jnp.maximum(msq - mu * mu, 0.0) + 1e-3)
    return f


C.smap("s.shifted_variance_broadcast_shift.dp4", {"dp": 4}, shifted_dp, (P("dp"),), P("dp"), shifted_ref,
       (R(B19, D19) * 0.5 + 100.0,),
       bugs=[("shift-own-first-row", ["wrong-operand"]), ("sq-not-reduced", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 20. mixup with the "xor" partner (example i pairs with i ^ local batch: the
#     same slot on the neighbouring device of a pair), one pairwise ppermute
#     d <-> d ^ 1, lam per example from fold_in keys, dp4
B20, D20, K20 = 16, 6, 4
BL20 = B20 // 4


def xor_lam(key, gi):
    return jax.vmap(lambda i: jax.random.uniform(jax.random.fold_in(key, i), minval=0.5))(gi)


def xor_ref(key, x, y):
    part = jnp.arange(B20) ^ BL20
    l = xor_lam(key, jnp.arange(B20))[:, None]
    return l * x + (1 - l) * x[part], l * jax.nn.one_hot(y, K20) + (1 - l) * jax.nn.one_hot(y[part], K20)


def xor_dp(bug):
    def f(key, x, y):
        n, bl = 4, x.shape[0]
        perm = [(d, (d + 1) % n) for d in range(n)] if bug == "ppermute-cyclic" else [(d, d ^ 1) for d in range(n)]
        xp, yp = lax.ppermute(x, "dp", perm), lax.ppermute(y, "dp", perm)
        l = xor_lam(key, idx("dp") * bl + jnp.arange(bl))[:, None]
        if bug == "lam-on-partner":
            l = 1 - l
        return l * x + (1 - l) * xp, l * jax.nn.one_hot(y, K20) + (1 - l) * jax.nn.one_hot(yp, K20)
    return f


C.smap("s.mixup_xor_partner_pair_ppermute.dp4", {"dp": 4}, xor_dp, (P(), P("dp"), P("dp")), (P("dp"), P("dp")),
       xor_ref, (raw_key(20), R(B20, D20), I(0, K20, B20)),
       bugs=[("ppermute-cyclic", ["wrong-permutation"]), ("lam-on-partner", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 21. a RandAugment-lite op per example by lax.switch (identity, horizontal
#     flip, invert, solarize at 0.5) chosen from fold_in(key, global index)
#     under a vmap, then a magnitude blend with the original, batch over dp8
B21, H21, C21 = 16, 4, 3
OPS21 = [lambda a: a, lambda a: a[:, ::-1], lambda a: 1.0 - a, lambda a: jnp.where(a > 0.5, 1.0 - a, a)]


def randaug_one(a, k, shift=0):
    k1, k2 = jax.random.split(k)
    op = (jax.random.randint(k1, (), 0, 4) + shift) % 4
    mag = jax.random.uniform(k2, minval=0.3, maxval=1.0)
    return mag * lax.switch(op, OPS21, a) + (1 - mag) * a


def randaug_ref(key, x):
    ks = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(x.shape[0]))
    return jax.vmap(randaug_one)(x, ks)


def randaug_dp(bug):
    def f(key, x):
        bl = x.shape[0]
        gi = jnp.arange(bl) if bug == "key-local-index" else idx("dp") * bl + jnp.arange(bl)
        ks = jax.vmap(lambda i: jax.random.fold_in(key, i))(gi)
        return jax.vmap(lambda a, k: randaug_one(a, k, shift=1 if bug == "op-index-off-by-one" else 0))(x, ks)
    return f


C.smap("s.randaug_lite_switch_vmap_foldin.dp8", {"dp": 8}, randaug_dp, (P(), P("dp")), P("dp"), randaug_ref,
       (raw_key(21), rng.uniform(0, 1, (B21, H21, H21, C21)).astype(np.float32)),
       bugs=[("key-local-index", ["wrong-offset"]), ("op-index-off-by-one", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 22. input centring and scaling of a bf16 batch with pmean'd bf16 moments
#     (mean and mean square each pmean'd, no f32 upcast), dp8
B22, D22 = 16, 8


def bfc_ref(x):
    mu = jnp.mean(x, 0)
    ms = jnp.mean(x * x, 0)
    return (x - mu) * lax.rsqrt(jnp.maximum(ms - mu * mu, 0) + 1e-2).astype(x.dtype)


def bfc_dp(bug):
    def f(x):
        mu = jnp.mean(x, 0)
        if bug != "mean-not-pmeaned":
            mu = pmean(mu, "dp")
        ms = jnp.mean(x * x, 0)
        ms = psum(ms, "dp") if bug == "ms-psum-not-pmean" else pmean(ms, "dp")
        return (x - mu) * lax.rsqrt(jnp.maximum(ms - mu * mu, 0) + 1e-2).astype(x.dtype)
    return f


C.smap("s.bf16_centre_pmean_moments.dp8", {"dp": 8}, bfc_dp, (P("dp"),), P("dp"), bfc_ref,
       ((R(B22, D22) + 0.5).astype(jnp.bfloat16),),
       bugs=[("mean-not-pmeaned", ["missing-collective"]), ("ms-psum-not-pmean", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 23. random resized crop of images whose height is sharded over sp4 (batch
#     over dp2): the height all_gather'd, the crop resampled whole by
#     scale_and_translate, and each device keeping its own rows of the output
B23, H23, O23, C23 = 4, 12, 8, 2


def rrc23_one(img, k):
    u = jax.random.uniform(k, (3,))
    side = 5.0 + 7.0 * u[0]
    top, left = u[1] * (H23 - side), u[2] * (H23 - side)
    sc = O23 / side
    return jax.image.scale_and_translate(img, (O23, O23, C23), (0, 1), jnp.stack([sc, sc]),
                                         jnp.stack([-top * sc, -left * sc]), method="linear")


def rrc23_ref(key, x):
    ks = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(x.shape[0]))
    return jax.vmap(rrc23_one)(x, ks)


def rrc23_sp(bug):
    def f(key, x):
        bl = x.shape[0]
        ks = jax.vmap(lambda i: jax.random.fold_in(key, i))(idx("dp") * bl + jnp.arange(bl))
        xg = lax.all_gather(x, "dp" if bug == "gather-over-dp" else "sp", axis=1, tiled=True)
        if bug == "gather-over-dp":
            xg = jnp.concatenate([xg] * 2, 1)[:, :H23]
        out = jax.vmap(rrc23_one)(xg, ks)
        ol = O23 // 4
        st = 0 if bug == "rows-at-origin" else idx("sp") * ol
        return lax.dynamic_slice_in_dim(out, st, ol, 1)
    return f


C.smap("s.rrc_height_sharded_gather_resample.dp2xsp4", {"dp": 2, "sp": 4}, rrc23_sp, (P(), P("dp", "sp")),
       P("dp", "sp"), rrc23_ref, (raw_key(23), rng.uniform(0, 1, (B23, H23, H23, C23)).astype(np.float32)),
       bugs=[("rows-at-origin", ["wrong-offset"]), ("gather-over-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 24. mixup with a global permutation made on device: every example's
#     score is a uniform of fold_in(key, global index), the scores
#     all_gather'd and argsort'ed, the partners taken from the all_gather'd
#     batch; lam one scalar from the replicated key, dp4
B24, D24, K24 = 16, 6, 5


def perm_mix_core(key, x, y, xg, yg, scores, rows):
    perm = jnp.argsort(scores)
    lam = jax.random.uniform(jax.random.fold_in(key, 10_000), minval=0.3, maxval=0.7)
    mine = perm[rows]
    return lam * x + (1 - lam) * xg[mine], lam * jax.nn.one_hot(y, K24) + (1 - lam) * jax.nn.one_hot(yg[mine], K24)


def score_of(key, gi):
    return jax.vmap(lambda i: jax.random.uniform(jax.random.fold_in(key, i)))(gi)


def perm_mix_ref(key, x, y):
    return perm_mix_core(key, x, y, x, y, score_of(key, jnp.arange(B24)), jnp.arange(B24))


def perm_mix_dp(bug):
    def f(key, x, y):
        bl = x.shape[0]
        gi = idx("dp") * bl + jnp.arange(bl)
        xg = lax.all_gather(x, "dp", tiled=True)
        yg = lax.all_gather(y, "dp", tiled=True)
        if bug == "scores-local":
            sc = score_of(key, jnp.arange(bl))
            return perm_mix_core(key, x, y, xg, yg, sc, jnp.arange(bl))
        sc = lax.all_gather(score_of(key, gi), "dp", tiled=True)
        rows = jnp.arange(bl) if bug == "rows-at-origin" else gi
        return perm_mix_core(key, x, y, xg, yg, sc, rows)
    return f


C.smap("s.mixup_argsort_scores_global_perm.dp4", {"dp": 4}, perm_mix_dp, (P(), P("dp"), P("dp")),
       (P("dp"), P("dp")), perm_mix_ref, (raw_key(24), R(B24, D24), I(0, K24, B24)),
       bugs=[("scores-local", ["missing-collective"]), ("rows-at-origin", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 25. masking of a flat token stream sharded jointly over (dp, sp): the
#     global position from lax.axis_index(("dp", "sp")), each token's
#     uniform from fold_in(key, position), 15% -> [MASK] (no 80/10/10),
#     count psum'd over both axes
N25 = 64


def flat_mask_core(key, tok, pos):
    u = jax.vmap(lambda p: jax.random.uniform(jax.random.fold_in(key, p)))(pos)
    sel = (u < 0.15) & (tok >= NSPEC10)
    return jnp.where(sel, MASK10, tok), sel.astype(jnp.int32)


def flat_mask_ref(key, tok):
    c, s = flat_mask_core(key, tok, jnp.arange(N25))
    return c, jnp.sum(s)


def flat_mask_dp(bug):
    def f(key, tok):
        nl = tok.shape[0]
        if bug == "axes-order-swapped":
            dev = idx(("sp", "dp"))
        elif bug == "sp-index-only":
            dev = idx("sp")
        else:
            dev = idx(("dp", "sp"))
        c, s = flat_mask_core(key, tok, dev * nl + jnp.arange(nl))
        return c, psum(jnp.sum(s), ("dp", "sp"))
    return f


C.smap("s.flat_stream_mask_joint_axis_index.dp2xsp4", {"dp": 2, "sp": 4}, flat_mask_dp, (P(), P(("dp", "sp"))),
       (P(("dp", "sp")), P()), flat_mask_ref, (raw_key(25), I(0, V10, N25)),
       bugs=[("axes-order-swapped", ["wrong-offset"]), ("sp-index-only", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# GSPMD pairs
# g1. random resized crop, linear head, optax.sgd step (dp8)
OPTG1 = optax.sgd(0.1, momentum=0.9)
WG1 = R(O1 * O1 * C1, 4, scale=0.1)
SG1 = jax.tree.map(np.asarray, OPTG1.init(jnp.asarray(WG1)))
XG1 = rng.uniform(0, 1, (B1, H1, H1, C1)).astype(np.float32)


def g1_step(w, st, key, x, y):
    xa = rrc_ref(key, x).reshape(x.shape[0], -1)

    def loss(w):
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(xa @ w, y))
    l, g = jax.value_and_grad(loss)(w)
    upd, st = OPTG1.update(g, st, w)
    return optax.apply_updates(w, upd), st, l


SPG1 = jax.tree.map(lambda _: P(), SG1)
C.gspmd("g.rrc_scale_translate_linear_sgd.dp8", {"dp": 8}, (P(), SPG1, P(), P("dp"), P("dp")), (P(), SPG1, P()),
        g1_step, (WG1, SG1, raw_key(21), XG1, I(0, 4, B1)))

# g2. SpecAugment with fold_in keys, dp2 x sp4
C.gspmd("g.specaugment_foldin.dp2xsp4", {"dp": 2, "sp": 4}, (P(), P("dp", "sp")), P("dp", "sp"), spec_ref,
        (raw_key(22), R(B5, T5, F5) + 1.0))

# g3. ZCA whitening feeding a linear layer, dp4
C.gspmd("g.zca_newton_schulz_linear.dp4", {"dp": 4}, (P("dp"), P()), P("dp"), lambda x, w: jnp.tanh(zca_ref(x) @ w),
        (X8, R(D8, 8, scale=0.5)))

# g4. per-token fold_in MLM masking, tied-embedding loss, adamw, dp2 x sp4
OPTG4 = optax.adamw(1e-2, weight_decay=0.01)
EG4 = R(V10, 8, scale=0.5)
SG4 = jax.tree.map(np.asarray, OPTG4.init(jnp.asarray(EG4)))


def g4_step(emb, st, key, tok):
    c, lab, _ = mlm_ref(key, tok)

    def loss(e):
        h = jnp.tanh(e[c])
        logits = h @ e.T
        ok = lab >= 0
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.where(ok, lab, 0))
        return jnp.sum(ce * ok) / jnp.maximum(jnp.sum(ok), 1)
    l, g = jax.value_and_grad(loss)(emb)
    upd, st = OPTG4.update(g, st, emb)
    return optax.apply_updates(emb, upd), st, l


SPG4 = jax.tree.map(lambda _: P(), SG4)
C.gspmd("g.mlm_foldin_tied_embedding_adamw.dp2xsp4", {"dp": 2, "sp": 4}, (P(), SPG4, P(), P("dp", "sp")),
        (P(), SPG4, P()), g4_step, (EG4, SG4, raw_key(24), I(0, V10, B10, T10)))

# g5. distillation loss and gradient, dp2 x tp4
C.gspmd("g.distill_kl_ce_grad.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P("dp", "tp"), P("dp")),
        (P(), P("dp", "tp")), lambda s, t, y: jax.value_and_grad(lambda s: distill_ref(s, t, y)[1])(s),
        (R(B12, K12, scale=2.0), R(B12, K12, scale=2.0), I(0, K12, B12)))

# g6. flip mixup, soft targets, optax.adam, dp4
OPTG6 = optax.adam(3e-3)
WG6 = R(D2, K2, scale=0.3)
SG6 = jax.tree.map(np.asarray, OPTG6.init(jnp.asarray(WG6)))


def g6_step(w, st, key, x, y):
    xm, t = flip_mix_ref(key, x, y)

    def loss(w):
        return -jnp.mean(jnp.sum(t * jax.nn.log_softmax(xm @ w, -1), -1))
    l, g = jax.value_and_grad(loss)(w)
    upd, st = OPTG6.update(g, st, w)
    return optax.apply_updates(w, upd), st, l


SPG6 = jax.tree.map(lambda _: P(), SG6)
C.gspmd("g.flip_mixup_soft_target_adam.dp4", {"dp": 4}, (P(), SPG6, P(), P("dp"), P("dp")), (P(), SPG6, P()),
        g6_step, (WG6, SG6, raw_key(26), R(B2, D2), I(0, K2, B2)))

# g7. mosaic with jnp.roll partners and a linear head's soft-target loss, dp4
def g7(x, y, w):
    xs = pool2(x)
    q = [jnp.roll(xs, -j, 0) for j in range(4)]
    img = jnp.concatenate([jnp.concatenate(q[:2], 2), jnp.concatenate(q[2:], 2)], 1)
    t = sum(jax.nn.one_hot(jnp.roll(y, -j, 0), K13) for j in range(4)) / 4.0
    lg = img.reshape(img.shape[0], -1) @ w
    return img, -jnp.mean(jnp.sum(t * jax.nn.log_softmax(lg, -1), -1))


C.gspmd("g.mosaic_roll_partners_soft_loss.dp4", {"dp": 4}, (P("dp"), P("dp"), P()), (P("dp"), P()), g7,
        (R(B13, H13, H13, C13), I(0, K13, B13), R(H13 * H13 * C13, K13, scale=0.2)))

# g8. packed rows from document lengths (searchsorted segment ids), sequence over sp4
C.gspmd("g.pack_searchsorted_pos_embed.sp4", {"sp": 4}, (P(None, "sp"), P(), P()), (P(None, "sp"), P(None, "sp")),
        pack_ref, (R(B14, T14, D14), R(T14, D14, scale=0.5), LENS14))

# g9. a crop at key-drawn offsets (one per batch) upsampled by jax.image.resize
#     (bilinear) and a per-example normal noise, dp8
def g9(key, x):
    k1, k2 = jax.random.split(key)
    off = jax.random.randint(k1, (2,), 0, 5)
    c = lax.dynamic_slice(x, (0, off[0], off[1], 0), (x.shape[0], 8, 8, x.shape[3]))
    up = jax.image.resize(c, (x.shape[0], 12, 12, x.shape[3]), "bilinear")
    return up + 0.05 * jax.random.normal(k2, up.shape)


C.gspmd("g.crop_resize_bilinear_noise.dp8", {"dp": 8}, (P(), P("dp")), P("dp"), g9, (raw_key(29), R(16, 12, 12, 2)))

# g10. BERT masking with the uniforms drawn at the global shape inside the
#      jitted step (the partitioner splits the threefry bits), dp2 x sp4
def g10(key, tok):
    k1, k2, k3 = jax.random.split(key, 3)
    sel = jax.random.bernoulli(k1, 0.15, tok.shape) & (tok >= NSPEC10)
    u = jax.random.uniform(k2, tok.shape)
    rid = jax.random.randint(k3, tok.shape, NSPEC10, V10)
    new = jnp.where(u < 0.8, MASK10, jnp.where(u < 0.9, rid, tok))
    return jnp.where(sel, new, tok), jnp.where(sel, tok, -100)


C.gspmd("g.mlm_global_shape_bernoulli.dp2xsp4", {"dp": 2, "sp": 4}, (P(), P("dp", "sp")),
        (P("dp", "sp"), P("dp", "sp")), g10, (raw_key(30), I(0, V10, 4, 32)))

# g11. the RandAugment-lite switch of 21. feeding a linear head, dp8
C.gspmd("g.randaug_switch_linear.dp8", {"dp": 8}, (P(), P("dp"), P()), P("dp"),
        lambda key, x, w: randaug_ref(key, x).reshape(x.shape[0], -1) @ w,
        (raw_key(31), rng.uniform(0, 1, (B21, H21, H21, C21)).astype(np.float32), R(H21 * H21 * C21, 5, scale=0.2)))

# g12. the random resized crop of 23. with the images' height over sp4 and
#      batch over dp2 (the partitioner decides the exchange), then a mean pool
C.gspmd("g.rrc_height_sharded_pool.dp2xsp4", {"dp": 2, "sp": 4}, (P(), P("dp", "sp")), P("dp"),
        lambda key, x: jnp.mean(rrc23_ref(key, x), (1, 2)),
        (raw_key(32), rng.uniform(0, 1, (B23, H23, H23, C23)).astype(np.float32)))

# g13. padding masks from lengths, optax.smooth_labels targets, optax.lamb
#      step on a masked-mean-pooled classifier, tokens over dp2 x sp4
OPTG13 = optax.lamb(1e-2)
PG13 = {"emb": R(V9, D9), "w": R(D9, K9, scale=0.5)}
SG13 = jax.tree.map(np.asarray, OPTG13.init(jax.tree.map(jnp.asarray, PG13)))


def g13(p, st, tok, lens, y):
    def loss(p):
        m = (jnp.arange(tok.shape[1])[None, :] < lens[:, None]).astype(jnp.float32)
        pooled = jnp.sum(p["emb"][tok] * m[..., None], 1) / jnp.maximum(jnp.sum(m, 1, keepdims=True), 1.0)
        t = optax.smooth_labels(jax.nn.one_hot(y, K9), 0.1)
        return jnp.mean(optax.softmax_cross_entropy(pooled @ p["w"], t))
    l, g = jax.value_and_grad(loss)(p)
    upd, st = OPTG13.update(g, st, p)
    return optax.apply_updates(p, upd), st, l


SPP13 = {"emb": P(), "w": P()}
SPS13 = jax.tree.map(lambda _: P(), SG13)
C.gspmd("g.padmask_smooth_labels_lamb.dp2xsp4", {"dp": 2, "sp": 4}, (SPP13, SPS13, P("dp", "sp"), P("dp"), P("dp")),
        (SPP13, SPS13, P()), g13, (PG13, SG13, I(0, V9, B9, T9), np.array([3, 16, 9, 6], np.int32), I(0, K9, B9)))

C.finish()
