"""samples/fresh30: a 30th batch of programs as a user writes them, on the
theme of convolutional vision models under spatial and channel parallelism
(lax.conv_general_dilated, flax-style modules written by hand, optax), none
of them an idiom of samples/fresh .. fresh29, probe, train or wild.
Images are NHWC, kernels HWIO throughout.
shard_map families:
 1. a 3x3 then a 5x5 SAME conv with the image's height over sp4: one and
    two halo rows from each neighbour by non-cyclic ppermutes (zeros at the
    image's top and bottom, as SAME pads), VALID in height and SAME in
    width on the extended tile. Bugs: the two halos taken from the wrong
    neighbours (the rows below put above), no halo (SAME on the local tile:
    zero padding at interior boundaries), the 5x5's halo one row wide
    (the missing row zero-padded).
 2. a strided 3x3 / 2 SAME conv (XLA pads 0 above and 1 below, so only one
    row from the next device) followed by a dilated 3x3 (dilation 2, two
    halo rows each side) with height over sp4. Bugs: the strided conv given
    a row from above (symmetric padding as for stride 1), the dilated
    conv's halo one row wide plus a zero row.
 3. channels over tp4: a depthwise 3x3 (weights sharded with the
    channels), a grouped 3x3 with 4 groups (8 -> 16 channels, one group per
    rank; the weight passed replicated and its output channels sliced at
    rank * 4), a 1x1 conv as an einsum contracting the sharded channels and
    psum'd. Bugs: the grouped weight sliced at rank * (input channels per
    group), the 1x1 conv not psum'd.
 4. synchronized batch norm in training mode with the batch over dp4: psum
    of per-channel sums and sums of squares and of the count, biased
    variance for normalising, running mean / variance updated with
    momentum and the unbiased variance. Bugs: local statistics (no psum),
    the Bessel correction from the local count, the variance as the pmean
    of the local variances (the spread of the local means left out).
 5. group norm with 2 groups of 8 channels on a sp2 x tp4 mesh (height over
    sp, channels over tp, a group spans two tp ranks): per-device sums
    psum'd over sp and scattered into a one-hot group vector psum'd over
    tp, swish after. Bugs: no psum over sp (the tile's statistics), the
    group of a rank taken as rank % 2, the count over all four tp ranks
    (not the two of a group).
 6. 3x3 max pooling (stride 1, SAME, -inf padding) then 3x3 average pooling
    with count_include_pad=False, height over sp4: halo rows by ppermute,
    the max pool's halos replaced by -inf at the image's edges, the
    average's divisor from a ones tile with the neighbours' existence as
    halo. Bugs: zeros left as the max pool's edge halos, no exchange
    (pooling on the tile), the divisor of the local tile.
 7. a U-Net decoder stage, height over sp4: a 3x3 / 2 transposed conv
    written as lhs_dilation=2 with padding (1, 2) (an output tile needs one
    input row of the next device), concatenated with the encoder's skip
    (sharded the same), a 3x3 conv with one-row halos, relu. Bugs: the
    transposed conv's row from the previous device, no halo for it, cyclic
    halos for the 3x3 (the image wraps top to bottom).
 8. a training step of a ResNet basic block classifier on a dp2 x sp4 mesh
    (batch over dp, height over sp) with check_vma=True: two 3x3 convs with
    halos, batch norm synchronised over (dp, sp), residual, global average
    pool by psum over sp, a linear head, cross-entropy psum'd over dp,
    jax.value_and_grad in the body, optax.sgd with Nesterov momentum.
    Bugs: batch-norm statistics psum'd over dp only, no halo, the loss
    divided by the local batch.
 9. a ConvNeXt block on dp2 x sp4: depthwise 7x7 with three-row halos,
    channels-last LayerNorm, 4x MLP with GELU, layer scale, stochastic depth
    with a per-example key fold_in(key, global example index) and
    bernoulli keep mask scaled by 1/keep. Bugs: a one-row halo with two
    zero rows, the local example index (no dp offset), the halos'
    neighbours swapped.
10. squeeze-and-excitation on sp2 x tp4 (height over sp, channels over
    tp): the global average pool psum'd over sp, the first FC row-parallel
    (psum over tp), the second column-parallel, sigmoid gate on the local
    channels. Bugs: the pool over the local tile only, the first FC not
    psum'd, the pool divided by the tile's area.
11. 2x bilinear upsampling (jax.image.resize in the baseline) with height
    over sp4 written by hand as 1/4-3/4 blends with one halo row from each
    neighbour (the edge row repeated at the image's top and bottom), the
    width by jax.image.resize locally, then a 3x3 conv with halos. Bugs:
    the zeros of the non-cyclic ppermute used at the edges, the
    neighbours swapped, the conv without halo.
12. a ResNet bottleneck with its channels over tp4 and the batch
    replicated: 1x1 reduce column-parallel, batch norm on the local
    channels, 3x3 conv contracting the sharded channels (psum), 1x1 expand
    column-parallel, residual sliced at the rank's channel offset. Bugs:
    residual at offset 0, the 3x3 not psum'd, residual at the offset of
    the reduced width.
13. the second training step (opt state from a first step) of a small CNN
    with synchronized batch norm under dp8, check_vma=False: per-device
    jax.value_and_grad of the local mean loss, gradients and loss pmean'd,
    optax.adamw. Bugs: batch-norm statistics local, gradients not
    averaged.
14. a bf16 3x3 conv with f32 accumulation (preferred_element_type) with
    the image's WIDTH over sp4: the whole image all_gather'd, zero-padded
    and the tile plus one column each side cut by dynamic_slice at
    rank * width, then an aligned 2x2 / 2 average pool (local). Bugs: the
    slice one column too far right, the slice cut from the unpadded image
    at rank * width - 1 (clamped to 0 on rank 0).
GSPMD pairs (jax.jit with in/out shardings, correct only): 15. the conv
stack of 1. with the height over sp4; 16. the depthwise / grouped / 1x1
convs of 3. with channels and weights over tp4; 17. the training step of
8. on dp2 x sp4 (images P(dp, sp)); 18. the U-Net decoder of 7. with the
bilinear upsampling of 11., height over sp4; 19. group norm and
squeeze-and-excitation with height over sp2 and channels over tp4; 20. the
pooling of 6. with the height over sp8 (two rows per device).
Numerics: every correct pair agrees with its baseline at rounding level;
every bug variant differs clearly (see "numerics").
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh30.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh30.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402

SCRIPT = "samples/gen/fresh30.py"
C = Corpus("samples/fresh30", SCRIPT, "samples/gen/run_fresh30.sh", sys.argv[1:])
rng, R, I = seeded(3030)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
DN = ("NHWC", "HWIO", "NHWC")


def conv(x, w, stride=1, padding="SAME", dil=1, groups=1, lhs_dil=1):
    return lax.conv_general_dilated(x, w, (stride, stride), padding, lhs_dilation=(lhs_dil, lhs_dil),
                                    rhs_dilation=(dil, dil), dimension_numbers=DN, feature_group_count=groups)


def from_above(x, k, n, ax="sp"):
    """The last k rows of the previous device (zeros on device 0)."""
    return lax.ppermute(x[:, -k:], ax, [(i, i + 1) for i in range(n - 1)])


def from_below(x, k, n, ax="sp"):
    """The first k rows of the next device (zeros on the last one)."""
    return lax.ppermute(x[:, :k], ax, [(i + 1, i) for i in range(n - 1)])


# ---------------------------------------------------------------------------
# 1. 3x3 then 5x5 SAME convs, height over sp4, halos by ppermute.
B1, H1, W1, C1 = 2, 16, 8, 8


def convstack(x, w3, b3, w5, b5):
    h = jax.nn.relu(conv(x, w3) + b3)
    return conv(h, w5) + b5


def convstack_sp(bug):
    def f(x, w3, b3, w5, b5):
        n = 4
        if bug == "halo-wrong-neighbour":
            top, bot = from_below(x, 1, n), from_above(x, 1, n)
        else:
            top, bot = from_above(x, 1, n), from_below(x, 1, n)
        if bug == "no-halo":
            h = conv(x, w3)
        else:
            h = conv(jnp.concatenate([top, x, bot], 1), w3, padding=((0, 0), (1, 1)))
        h = jax.nn.relu(h + b3)
        if bug == "halo-width-1-for-5x5":
            ext = jnp.concatenate([from_above(h, 1, n), h, from_below(h, 1, n)], 1)
            return conv(ext, w5, padding=((1, 1), (2, 2))) + b5
        if bug == "no-halo":
            return conv(h, w5) + b5
        ext = jnp.concatenate([from_above(h, 2, n), h, from_below(h, 2, n)], 1)
        return conv(ext, w5, padding=((0, 0), (2, 2))) + b5
    return f


ARGS1 = (R(B1, H1, W1, C1), R(3, 3, C1, C1, scale=0.3), R(C1, scale=0.1), R(5, 5, C1, C1, scale=0.2),
         R(C1, scale=0.1))
C.smap("s.conv3x3_conv5x5_height_halo.sp4", {"sp": 4}, convstack_sp,
       (P(None, "sp"), P(), P(), P(), P()), P(None, "sp"), convstack, ARGS1,
       bugs=[("halo-wrong-neighbour", ["wrong-permutation"]), ("no-halo", ["missing-collective"]),
             ("halo-width-1-for-5x5", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 2. strided 3x3 / 2 SAME conv (pads 0 above, 1 below) then a dilated 3x3.


def strided_dilated(x, ws, wd):
    h = jax.nn.gelu(conv(x, ws, stride=2))
    return conv(h, wd, dil=2)


def strided_dilated_sp(bug):
    def f(x, ws, wd):
        n = 4
        if bug == "strided-row-from-above":
            ext = jnp.concatenate([from_above(x, 1, n), x], 1)
        else:
            ext = jnp.concatenate([x, from_below(x, 1, n)], 1)
        h = jax.nn.gelu(conv(ext, ws, stride=2, padding=((0, 0), (0, 1))))
        if bug == "dilated-halo-width-1":
            ext = jnp.concatenate([from_above(h, 1, n), h, from_below(h, 1, n)], 1)
            return conv(ext, wd, dil=2, padding=((1, 1), (2, 2)))
        ext = jnp.concatenate([from_above(h, 2, n), h, from_below(h, 2, n)], 1)
        return conv(ext, wd, dil=2, padding=((0, 0), (2, 2)))
    return f


C.smap("s.strided_then_dilated_conv_halo.sp4", {"sp": 4}, strided_dilated_sp, (P(None, "sp"), P(), P()),
       P(None, "sp"), strided_dilated, (R(2, 16, 8, 6), R(3, 3, 6, 8, scale=0.3), R(3, 3, 8, 8, scale=0.3)),
       bugs=[("strided-row-from-above", ["wrong-offset"]), ("dilated-halo-width-1", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. channels over tp4: depthwise, grouped (4 groups), 1x1 as matmul + psum.
CI3, CO3, G3 = 8, 16, 4


def group_convs(x, wdw, wg, bg, wpw):
    h = conv(x, wdw, groups=CI3)
    h = jax.nn.silu(conv(h, wg, groups=G3) + bg)
    return jnp.einsum("bhwc,cd->bhwd", h, wpw)


def group_convs_tp(bug):
    def f(x, wdw, wg, bg, wpw):
        me = idx("tp")
        cl = x.shape[-1]
        h = conv(x, wdw, groups=cl)
        per_out = CO3 // G3
        off = me * (CI3 // G3) if bug == "group-weight-offset-by-cin" else me * per_out
        w = lax.dynamic_slice_in_dim(wg, off, per_out, 3)
        h = jax.nn.silu(conv(h, w) + bg)
        y = jnp.einsum("bhwc,cd->bhwd", h, wpw)
        return y if bug == "pointwise-no-psum" else psum(y, "tp")
    return f


C.smap("s.depthwise_grouped_pointwise_channels.tp4", {"tp": 4}, group_convs_tp,
       (P(None, None, None, "tp"), P(None, None, None, "tp"), P(), P("tp"), P("tp")), P(), group_convs,
       (R(2, 8, 8, CI3), R(3, 3, 1, CI3, scale=0.5), R(3, 3, CI3 // G3, CO3, scale=0.4), R(CO3, scale=0.1),
        R(CO3, 8, scale=0.3)),
       bugs=[("group-weight-offset-by-cin", ["wrong-offset"]), ("pointwise-no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 4. synchronized batch norm (train mode) with running statistics, dp4.
MOM, EPS = 0.9, 1e-5


def bn_train(x, gamma, beta, rmean, rvar):
    n = x.shape[0] * x.shape[1] * x.shape[2]
    mean = jnp.mean(x, (0, 1, 2))
    var = jnp.mean(jnp.square(x - mean), (0, 1, 2))
    y = (x - mean) / jnp.sqrt(var + EPS) * gamma + beta
    return y, MOM * rmean + (1 - MOM) * mean, MOM * rvar + (1 - MOM) * var * n / (n - 1)


def syncbn_dp(bug):
    def f(x, gamma, beta, rmean, rvar):
        nl = x.shape[0] * x.shape[1] * x.shape[2]
        s1, s2 = jnp.sum(x, (0, 1, 2)), jnp.sum(x * x, (0, 1, 2))
        cnt = jnp.float32(nl)
        if bug == "local-stats":
            mean, ex2, n = s1 / nl, s2 / nl, cnt
        else:
            s1, s2, n = psum((s1, s2, cnt), "dp")
            mean, ex2 = s1 / n, s2 / n
        var = ex2 - mean * mean
        if bug == "pmean-of-local-variances":
            var = pmean(jnp.mean(jnp.square(x - jnp.mean(x, (0, 1, 2))), (0, 1, 2)), "dp")
        y = (x - mean) * lax.rsqrt(var + EPS) * gamma + beta
        corr = cnt / (cnt - 1) if bug == "bessel-from-local-count" else n / (n - 1)
        return y, MOM * rmean + (1 - MOM) * mean, MOM * rvar + (1 - MOM) * var * corr
    return f


C.smap("s.syncbn_running_stats.dp4", {"dp": 4}, syncbn_dp, (P("dp"), P(), P(), P(), P()), (P("dp"), P(), P()),
       bn_train, (R(8, 4, 4, 8) * 1.5 + 0.7, 1.0 + R(8, scale=0.2), R(8, scale=0.2), R(8, scale=0.1),
                  1.0 + np.abs(R(8, scale=0.1))),
       bugs=[("local-stats", ["missing-all-reduce"]), ("bessel-from-local-count", ["wrong-scale"]),
             ("pmean-of-local-variances", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 5. group norm, 2 groups of 8 channels, height over sp2, channels over tp4.
G5 = 2


def group_norm(x, g, b, eps=1e-5):
    bs, h, w, c = x.shape
    xg = x.reshape(bs, h, w, G5, c // G5)
    m = jnp.mean(xg, (1, 2, 4), keepdims=True)
    v = jnp.var(xg, (1, 2, 4), keepdims=True)
    y = ((xg - m) / jnp.sqrt(v + eps)).reshape(x.shape) * g + b
    return jax.nn.swish(y)


def group_norm_2d(bug):
    def f(x, g, b, eps=1e-5):
        tp = 4
        me = idx("tp")
        grp = me % G5 if bug == "group-of-rank-mod" else me // (tp // G5)
        s = jnp.stack([jnp.sum(x, (1, 2, 3)), jnp.sum(x * x, (1, 2, 3))], -1)  # (b, 2)
        if bug != "no-psum-over-sp":
            s = psum(s, "sp")
        onehot = (jnp.arange(G5) == grp).astype(x.dtype)
        s = psum(s[:, None, :] * onehot[None, :, None], "tp")[:, grp]  # (b, 2)
        ranks = tp if bug == "count-over-all-tp-ranks" else tp // G5
        cnt = x.shape[1] * x.shape[2] * x.shape[3] * ranks * 2  # two sp tiles
        m = s[:, 0] / cnt
        v = s[:, 1] / cnt - m * m
        y = (x - m[:, None, None, None]) * lax.rsqrt(v + eps)[:, None, None, None] * g + b
        return jax.nn.swish(y)
    return f


X5 = R(2, 8, 4, 16) + np.linspace(-1, 1, 16, dtype=np.float32)
C.smap("s.groupnorm_groups_span_tp_ranks.sp2xtp4", {"sp": 2, "tp": 4}, group_norm_2d,
       (P(None, "sp", None, "tp"), P("tp"), P("tp")), P(None, "sp", None, "tp"), group_norm,
       (X5 + np.linspace(0, 2, 8, dtype=np.float32)[None, :, None, None], 1.0 + R(16, scale=0.2), R(16, scale=0.2)),
       bugs=[("no-psum-over-sp", ["missing-all-reduce"]), ("group-of-rank-mod", ["wrong-offset"]),
             ("count-over-all-tp-ranks", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 6. 3x3 max pool (SAME, -inf) then 3x3 avg pool excluding padding, sp4.


def maxpool3(x, padding="SAME"):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 1, 1, 1), padding)


def sumpool3(x, padding="SAME"):
    return lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), padding)


def pools(x):
    y = maxpool3(x)
    return sumpool3(y) / sumpool3(jnp.ones_like(y))


def pools_sp(bug):
    def f(x):
        n = 4
        me = idx("sp")
        if bug == "no-exchange":
            y = maxpool3(x)
            return sumpool3(y) / sumpool3(jnp.ones_like(y))
        top, bot = from_above(x, 1, n), from_below(x, 1, n)
        if bug != "zero-edge-halo-for-max":
            top = jnp.where(me == 0, -jnp.inf, top)
            bot = jnp.where(me == n - 1, -jnp.inf, bot)
        pad = ((0, 0), (0, 0), (1, 1), (0, 0))
        y = maxpool3(jnp.concatenate([top, x, bot], 1), pad)
        s = sumpool3(jnp.concatenate([from_above(y, 1, n), y, from_below(y, 1, n)], 1), pad)
        one = jnp.ones_like(y[:, :1])
        if bug == "divisor-of-local-tile":
            cnt = sumpool3(jnp.ones_like(y))
        else:
            ext = jnp.concatenate([one * (me > 0), jnp.ones_like(y), one * (me < n - 1)], 1)
            cnt = sumpool3(ext, pad)
        return s / cnt
    return f


C.smap("s.maxpool_avgpool_excl_pad_halo.sp4", {"sp": 4}, pools_sp, (P(None, "sp"),), P(None, "sp"), pools,
       (R(2, 16, 8, 4) - 0.8,),
       bugs=[("zero-edge-halo-for-max", ["wrong-offset"]), ("no-exchange", ["missing-collective"]),
             ("divisor-of-local-tile", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. U-Net decoder stage: 3x3 / 2 transposed conv, skip concat, 3x3 conv.


def tconv(x, w):
    return conv(x, w, padding=((1, 2), (1, 2)), lhs_dil=2)


def unet_up(x, skip, wt, bt, wc, bc):
    u = jax.nn.relu(tconv(x, wt) + bt)
    h = jnp.concatenate([u, skip], -1)
    return jax.nn.relu(conv(h, wc) + bc)


def unet_up_sp(bug):
    def f(x, skip, wt, bt, wc, bc):
        n = 4
        me = idx("sp")
        if bug == "tconv-no-halo":
            u = tconv(x, wt)
        else:
            nxt = from_above(x, 1, n) if bug == "tconv-row-from-previous" else from_below(x, 1, n)
            u = conv(jnp.concatenate([x, nxt], 1), wt, padding=((1, 0), (1, 2)), lhs_dil=2)
        h = jnp.concatenate([jax.nn.relu(u + bt), skip], -1)
        if bug == "cyclic-conv-halo":
            top = lax.ppermute(h[:, -1:], "sp", [(i, (i + 1) % n) for i in range(n)])
            bot = lax.ppermute(h[:, :1], "sp", [((i + 1) % n, i) for i in range(n)])
        else:
            top = lax.ppermute(h[:, -1:], "sp", [(i, (i + 1) % n) for i in range(n)])
            bot = lax.ppermute(h[:, :1], "sp", [((i + 1) % n, i) for i in range(n)])
            top = jnp.where(me == 0, 0.0, top)
            bot = jnp.where(me == n - 1, 0.0, bot)
        return jax.nn.relu(conv(jnp.concatenate([top, h, bot], 1), wc, padding=((0, 0), (1, 1))) + bc)
    return f


C.smap("s.unet_decoder_tconv_skip_halo.sp4", {"sp": 4}, unet_up_sp,
       (P(None, "sp"), P(None, "sp"), P(), P(), P(), P()), P(None, "sp"), unet_up,
       (R(2, 8, 4, 8), R(2, 16, 8, 4), R(3, 3, 8, 4, scale=0.3), R(4, scale=0.1), R(3, 3, 8, 6, scale=0.3),
        R(6, scale=0.1)),
       bugs=[("tconv-row-from-previous", ["wrong-permutation"]), ("tconv-no-halo", ["missing-collective"]),
             ("cyclic-conv-halo", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 8. training step of a ResNet basic block classifier, dp2 x sp4, check_vma.
K8, C8 = 5, 8


def bn(x, g, b, stats=None):
    if stats is None:
        m = jnp.mean(x, (0, 1, 2))
        v = jnp.mean(jnp.square(x), (0, 1, 2)) - m * m
    else:
        m, v = stats(x)
    return (x - m) * lax.rsqrt(v + 1e-5) * g + b


def resnet_fwd(p, x, conv3=conv, stats=None, pool=lambda h: jnp.mean(h, (1, 2))):
    h = jax.nn.relu(bn(conv3(x, p["conv1"]), p["bn1"]["scale"], p["bn1"]["bias"], stats))
    h = bn(conv3(h, p["conv2"]), p["bn2"]["scale"], p["bn2"]["bias"], stats)
    h = jax.nn.relu(h + x)
    return pool(h) @ p["head"]["w"] + p["head"]["b"]


OPT8 = optax.sgd(0.05, momentum=0.9, nesterov=True)


def resnet_step(p, s, x, y):
    def loss(p):
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(resnet_fwd(p, x), y))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT8.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def resnet_step_sp(bug):
    def f(p, s, x, y):
        n, bglob = 4, 4

        def conv3(h, w):
            if bug == "no-halo":
                return conv(h, w)
            ext = jnp.concatenate([from_above(h, 1, n), h, from_below(h, 1, n)], 1)
            return conv(ext, w, padding=((0, 0), (1, 1)))

        def stats(h):
            axes = "dp" if bug == "bn-stats-over-dp-only" else ("dp", "sp")
            cnt = psum(jnp.float32(h.shape[0] * h.shape[1] * h.shape[2]), axes)
            m = psum(jnp.sum(h, (0, 1, 2)), axes) / cnt
            return m, psum(jnp.sum(h * h, (0, 1, 2)), axes) / cnt - m * m

        def pool(h):
            return psum(jnp.sum(h, (1, 2)), "sp") / (n * h.shape[1] * h.shape[2])

        def loss(p):
            lg = resnet_fwd(p, x, conv3, stats, pool)
            ce = optax.softmax_cross_entropy_with_integer_labels(lg, y)
            den = x.shape[0] if bug == "loss-over-local-batch" else bglob
            return psum(jnp.sum(ce), "dp") / den
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT8.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P8 = {"conv1": R(3, 3, C8, C8, scale=0.25), "bn1": {"scale": 1.0 + R(C8, scale=0.1), "bias": R(C8, scale=0.1)},
      "conv2": R(3, 3, C8, C8, scale=0.25), "bn2": {"scale": 1.0 + R(C8, scale=0.1), "bias": R(C8, scale=0.1)},
      "head": {"w": R(C8, K8, scale=0.4), "b": R(K8, scale=0.1)}}
S8 = jax.tree.map(lambda a: np.asarray(a) + 0.01 * rng.standard_normal(np.shape(a)).astype(np.float32)
                  if np.ndim(a) else a, OPT8.init(P8))
SP8 = jax.tree.map(lambda a: P(), P8)
SS8 = state_specs(S8, SP8)
X8, Y8 = R(4, 16, 8, C8), I(0, K8, 4)
C.smap("s.resnet_block_train_step_syncbn_sgd.dp2xsp4", {"dp": 2, "sp": 4}, resnet_step_sp,
       (SP8, SS8, P("dp", "sp"), P("dp")), (SP8, SS8, P()), resnet_step, (P8, S8, X8, Y8), check_vma=True,
       bugs=[("bn-stats-over-dp-only", ["missing-all-reduce"]), ("no-halo", ["missing-collective"]),
             ("loss-over-local-batch", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 9. ConvNeXt block on dp2 x sp4: depthwise 7x7 with 3-row halos, layer
#    scale, stochastic depth keyed per example.
C9, KEEP = 8, 0.6


def layer_norm(x, w, b, eps=1e-6):
    m = jnp.mean(x, -1, keepdims=True)
    v = jnp.mean(jnp.square(x - m), -1, keepdims=True)
    return (x - m) * lax.rsqrt(v + eps) * w + b


def convnext_branch(x, p, dw):
    h = dw(x, p["dw_w"]) + p["dw_b"]
    h = layer_norm(h, p["ln_w"], p["ln_b"])
    h = jax.nn.gelu(jnp.einsum("bhwc,cd->bhwd", h, p["w1"]) + p["b1"])
    h = jnp.einsum("bhwd,dc->bhwc", h, p["w2"]) + p["b2"]
    return p["gamma"] * h


def keep_mask(key, ids):
    return jax.vmap(lambda i: jax.random.bernoulli(jax.random.fold_in(key, i), KEEP))(ids)


def convnext(x, p, key):
    h = convnext_branch(x, p, lambda a, w: conv(a, w, groups=C9))
    keep = keep_mask(key, jnp.arange(x.shape[0]))
    return x + jnp.where(keep[:, None, None, None], h / KEEP, 0.0)


def convnext_sp(bug):
    def f(x, p, key):
        n = 4

        def dw(a, w):
            if bug == "halo-width-1":
                ext = jnp.concatenate([from_above(a, 1, n), a, from_below(a, 1, n)], 1)
                return conv(ext, w, groups=C9, padding=((2, 2), (3, 3)))
            if bug == "halo-neighbours-swapped":
                up = lax.ppermute(a[:, :3], "sp", [(i, i + 1) for i in range(n - 1)])
                dn = lax.ppermute(a[:, -3:], "sp", [(i + 1, i) for i in range(n - 1)])
            else:
                up, dn = from_above(a, 3, n), from_below(a, 3, n)
            return conv(jnp.concatenate([up, a, dn], 1), w, groups=C9, padding=((0, 0), (3, 3)))
        h = convnext_branch(x, p, dw)
        bl = x.shape[0]
        ids = jnp.arange(bl) if bug == "local-example-index" else idx("dp") * bl + jnp.arange(bl)
        keep = keep_mask(key, ids)
        return x + jnp.where(keep[:, None, None, None], h / KEEP, 0.0)
    return f


P9 = {"dw_w": R(7, 7, 1, C9, scale=0.2), "dw_b": R(C9, scale=0.1), "ln_w": 1.0 + R(C9, scale=0.1),
      "ln_b": R(C9, scale=0.1), "w1": R(C9, 4 * C9, scale=0.3), "b1": R(4 * C9, scale=0.1),
      "w2": R(4 * C9, C9, scale=0.2), "b2": R(C9, scale=0.1), "gamma": 0.5 + R(C9, scale=0.1)}
KEY9 = np.asarray(jax.random.key_data(jax.random.key(9)))
C.smap("s.convnext_dw7x7_layerscale_droppath.dp2xsp4", {"dp": 2, "sp": 4}, convnext_sp,
       (P("dp", "sp"), jax.tree.map(lambda a: P(), P9), P()), P("dp", "sp"), convnext,
       (R(4, 16, 8, C9), P9, KEY9),
       bugs=[("halo-width-1", ["wrong-offset"]), ("local-example-index", ["wrong-offset"]),
             ("halo-neighbours-swapped", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 10. squeeze-and-excitation, height over sp2, channels over tp4.


def se(x, w1, b1, w2, b2):
    s = jnp.mean(x, (1, 2))
    z = jax.nn.relu(s @ w1 + b1)
    e = jax.nn.sigmoid(z @ w2 + b2)
    return x * e[:, None, None, :]


def se_2d(bug):
    def f(x, w1, b1, w2, b2):
        hl, wl = x.shape[1], x.shape[2]
        if bug == "pool-local-tile":
            s = jnp.mean(x, (1, 2))
        else:
            area = hl * wl if bug == "divide-by-tile-area" else 2 * hl * wl
            s = psum(jnp.sum(x, (1, 2)), "sp") / area
        z = s @ w1
        if bug != "fc1-no-psum":
            z = psum(z, "tp")
        z = jax.nn.relu(z + b1)
        e = jax.nn.sigmoid(z @ w2 + b2)
        return x * e[:, None, None, :]
    return f


C.smap("s.squeeze_excite_pool_sp_fc_tp.sp2xtp4", {"sp": 2, "tp": 4}, se_2d,
       (P(None, "sp", None, "tp"), P("tp"), P(), P(None, "tp"), P("tp")), P(None, "sp", None, "tp"), se,
       (R(2, 8, 4, 16) + 0.3, R(16, 4, scale=0.5), R(4, scale=0.1), R(4, 16, scale=0.5), R(16, scale=0.1)),
       bugs=[("pool-local-tile", ["missing-all-reduce"]), ("fc1-no-psum", ["missing-all-reduce"]),
             ("divide-by-tile-area", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 11. 2x bilinear upsampling by hand with edge-repeat halos, then a 3x3 conv.


def up_conv(x, w, b):
    bs, h, wd, c = x.shape
    u = jax.image.resize(x, (bs, 2 * h, 2 * wd, c), "bilinear")
    return conv(u, w) + b


def up_conv_sp(bug):
    def f(x, w, b):
        n = 4
        me = idx("sp")
        bs, h, wd, c = x.shape
        if bug == "neighbours-swapped":
            prev, nxt = from_below(x, 1, n), from_above(x, 1, n)
        else:
            prev, nxt = from_above(x, 1, n), from_below(x, 1, n)
        if bug != "zero-edge-rows":
            prev = jnp.where(me == 0, x[:, :1], prev)
            nxt = jnp.where(me == n - 1, x[:, -1:], nxt)
        up_rows = jnp.concatenate([prev, x[:, :-1]], 1)
        dn_rows = jnp.concatenate([x[:, 1:], nxt], 1)
        even = 0.25 * up_rows + 0.75 * x
        odd = 0.75 * x + 0.25 * dn_rows
        u = jnp.stack([even, odd], 2).reshape(bs, 2 * h, wd, c)
        u = jax.image.resize(u, (bs, 2 * h, 2 * wd, c), "bilinear")
        if bug == "conv-no-halo":
            return conv(u, w) + b
        ext = jnp.concatenate([from_above(u, 1, n), u, from_below(u, 1, n)], 1)
        return conv(ext, w, padding=((0, 0), (1, 1))) + b
    return f


C.smap("s.bilinear_up2_by_hand_then_conv.sp4", {"sp": 4}, up_conv_sp, (P(None, "sp"), P(), P()), P(None, "sp"),
       up_conv, (R(2, 8, 4, 4) + 1.0, R(3, 3, 4, 4, scale=0.3), R(4, scale=0.1)),
       bugs=[("zero-edge-rows", ["wrong-offset"]), ("neighbours-swapped", ["wrong-permutation"]),
             ("conv-no-halo", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 12. ResNet bottleneck with its channels over tp4.
CI12, CM12 = 16, 8


def bn_eval_free(x, g, b):
    m = jnp.mean(x, (0, 1, 2))
    v = jnp.var(x, (0, 1, 2))
    return (x - m) / jnp.sqrt(v + 1e-5) * g + b


def bottleneck(x, w1, g1, b1, w2, g2, b2, w3, g3, b3):
    h = jax.nn.relu(bn_eval_free(jnp.einsum("bhwc,cm->bhwm", x, w1), g1, b1))
    h = jax.nn.relu(bn_eval_free(conv(h, w2), g2, b2))
    h = bn_eval_free(jnp.einsum("bhwm,mc->bhwc", h, w3), g3, b3)
    return jax.nn.relu(h + x)


def bottleneck_tp(bug):
    def f(x, w1, g1, b1, w2, g2, b2, w3, g3, b3):
        me = idx("tp")
        h = jax.nn.relu(bn_eval_free(jnp.einsum("bhwc,cm->bhwm", x, w1), g1, b1))
        h = conv(h, w2)
        if bug != "conv3x3-no-psum":
            h = psum(h, "tp")
        h = jax.nn.relu(bn_eval_free(h, g2, b2))
        h = bn_eval_free(jnp.einsum("bhwm,mc->bhwc", h, w3), g3, b3)
        cl = h.shape[-1]
        if bug == "residual-offset-0":
            off = 0
        elif bug == "residual-offset-of-reduced-width":
            off = me * (CM12 // 4)
        else:
            off = me * cl
        return jax.nn.relu(h + lax.dynamic_slice_in_dim(x, off, cl, 3))
    return f


C.smap("s.bottleneck_channel_parallel.tp4", {"tp": 4}, bottleneck_tp,
       (P(), P(None, "tp"), P("tp"), P("tp"), P(None, None, "tp"), P(), P(), P(None, "tp"), P("tp"), P("tp")),
       P(None, None, None, "tp"), bottleneck,
       (R(2, 8, 8, CI12), R(CI12, CM12, scale=0.3), 1.0 + R(CM12, scale=0.1), R(CM12, scale=0.1),
        R(3, 3, CM12, CM12, scale=0.2), 1.0 + R(CM12, scale=0.1), R(CM12, scale=0.1),
        R(CM12, CI12, scale=0.3), 1.0 + R(CI12, scale=0.1), R(CI12, scale=0.1)),
       bugs=[("residual-offset-0", ["wrong-offset"]), ("conv3x3-no-psum", ["missing-all-reduce"]),
             ("residual-offset-of-reduced-width", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 13. second AdamW step of a small CNN with synchronized BN under dp8.
OPT13 = optax.adamw(3e-3, weight_decay=0.05)


def cnn_fwd(p, x, mean_fn):
    h = conv(x, p["conv"]["kernel"])  # no bias before batch norm
    m = mean_fn(jnp.mean(h, (0, 1, 2)))
    v = mean_fn(jnp.mean(jnp.square(h), (0, 1, 2))) - m * m
    h = jax.nn.relu((h - m) * lax.rsqrt(v + 1e-5) * p["bn"]["scale"] + p["bn"]["bias"])
    h = jnp.mean(h, (1, 2))
    return h @ p["dense"]["kernel"] + p["dense"]["bias"]


def cnn_step(p, s, x, y):
    def loss(p):
        return optax.softmax_cross_entropy_with_integer_labels(cnn_fwd(p, x, lambda a: a), y).mean()
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT13.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def cnn_step_dp(bug):
    def f(p, s, x, y):
        mean_fn = (lambda a: a) if bug == "bn-local-stats" else (lambda a: pmean(a, "dp"))

        def loss(p):
            return optax.softmax_cross_entropy_with_integer_labels(cnn_fwd(p, x, mean_fn), y).mean()
        l, g = jax.value_and_grad(loss)(p)
        if bug != "grads-not-averaged":
            g = pmean(g, "dp")
        u, s = OPT13.update(g, s, p)
        return optax.apply_updates(p, u), s, pmean(l, "dp")
    return f


P13 = {"conv": {"kernel": R(3, 3, 3, 8, scale=0.4)},
       "bn": {"scale": 1.0 + R(8, scale=0.1), "bias": R(8, scale=0.1)},
       "dense": {"kernel": R(8, 4, scale=0.4), "bias": R(4, scale=0.1)}}
X13, Y13 = R(16, 6, 6, 3), I(0, 4, 16)
P13b, S13, _ = jax.jit(cnn_step)(P13, OPT13.init(P13), R(16, 6, 6, 3), I(0, 4, 16))
P13b, S13 = jax.tree.map(np.asarray, P13b), jax.tree.map(np.asarray, S13)
SP13 = jax.tree.map(lambda a: P(), P13b)
SS13 = state_specs(S13, SP13)
C.smap("s.small_cnn_syncbn_adamw_second_step.dp8", {"dp": 8}, cnn_step_dp,
       (SP13, SS13, P("dp"), P("dp")), (SP13, SS13, P()), cnn_step, (P13b, S13, X13, Y13),
       bugs=[("bn-local-stats", ["missing-all-reduce"]), ("grads-not-averaged", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 14. bf16 3x3 conv (f32 accumulation) with the WIDTH over sp4, the halo
#     columns cut from an all_gather'd, zero-padded image, then an aligned
#     2x2 / 2 average pool.


def wconv_pool(x, w, b):
    y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=DN, preferred_element_type=jnp.float32)
    y = jax.nn.relu(y + b)
    return lax.reduce_window(y, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") * 0.25


def wconv_pool_sp(bug):
    def f(x, w, b):
        me, wl = idx("sp"), x.shape[2]
        full = lax.all_gather(x, "sp", axis=2, tiled=True)
        if bug == "slice-unpadded-image":
            tile = lax.dynamic_slice_in_dim(full, me * wl - 1, wl + 2, 2)
        else:
            padded = jnp.pad(full, ((0, 0), (0, 0), (1, 1), (0, 0)))
            start = me * wl + 1 if bug == "slice-offset-plus-one" else me * wl
            tile = lax.dynamic_slice_in_dim(padded, start, wl + 2, 2)
        y = lax.conv_general_dilated(tile, w, (1, 1), ((1, 1), (0, 0)), dimension_numbers=DN,
                                     preferred_element_type=jnp.float32)
        y = jax.nn.relu(y + b)
        return lax.reduce_window(y, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") * 0.25
    return f


C.smap("s.bf16_conv_width_allgather_halo_avgpool.sp4", {"sp": 4}, wconv_pool_sp,
       (P(None, None, "sp"), P(), P()), P(None, None, "sp"), wconv_pool,
       (R(2, 8, 16, 4, dt=jnp.bfloat16), R(3, 3, 4, 8, scale=0.3, dt=jnp.bfloat16), R(8, scale=0.1)),
       bugs=[("slice-offset-plus-one", ["wrong-offset"]), ("slice-unpadded-image", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 15. the conv stack of 1. with the height over sp4.
C.gspmd("g.conv3x3_conv5x5_height.sp4", {"sp": 4}, (P(None, "sp"), P(), P(), P(), P()), P(None, "sp"),
        convstack, ARGS1)

# 16. depthwise / grouped / 1x1 convs of 3. with the channels over tp4.
C.gspmd("g.depthwise_grouped_pointwise_channels.tp4", {"tp": 4},
        (P(None, None, None, "tp"), P(None, None, None, "tp"), P(None, None, None, "tp"), P("tp"), P("tp")),
        P(None, None, None, "tp"), group_convs,
        (R(2, 8, 8, CI3), R(3, 3, 1, CI3, scale=0.5), R(3, 3, CI3 // G3, CO3, scale=0.4), R(CO3, scale=0.1),
         R(CO3, 8, scale=0.3)))

# 17. the training step of 8., images over (dp, sp).
C.gspmd("g.resnet_block_train_step_sgd.dp2xsp4", {"dp": 2, "sp": 4}, (SP8, SS8, P("dp", "sp"), P("dp")),
        (SP8, SS8, P()), resnet_step, (P8, S8, R(4, 16, 8, C8), I(0, K8, 4)))

# 18. U-Net decoder: transposed conv, skip, conv, then bilinear 2x and conv.


def decoder(x, skip, wt, bt, wc, bc, w, b):
    return up_conv(unet_up(x, skip, wt, bt, wc, bc), w, b)


C.gspmd("g.unet_decoder_tconv_bilinear.sp4", {"sp": 4}, (P(None, "sp"), P(None, "sp"), P(), P(), P(), P(), P(), P()),
        P(None, "sp"), decoder,
        (R(2, 8, 4, 8), R(2, 16, 8, 4), R(3, 3, 8, 4, scale=0.3), R(4, scale=0.1), R(3, 3, 8, 6, scale=0.3),
         R(6, scale=0.1), R(3, 3, 6, 4, scale=0.3), R(4, scale=0.1)))

# 19. group norm then squeeze-and-excitation, height over sp2, channels over tp4.


def gn_se(x, g, b, w1, b1, w2, b2):
    return se(group_norm(x, g, b), w1, b1, w2, b2)


C.gspmd("g.groupnorm_squeeze_excite.sp2xtp4", {"sp": 2, "tp": 4},
        (P(None, "sp", None, "tp"), P("tp"), P("tp"), P("tp"), P(), P(None, "tp"), P("tp")),
        P(None, "sp", None, "tp"), gn_se,
        (R(2, 8, 4, 16) + 0.5, 1.0 + R(16, scale=0.2), R(16, scale=0.2), R(16, 4, scale=0.5), R(4, scale=0.1),
         R(4, 16, scale=0.5), R(16, scale=0.1)))

# 20. the pooling of 6., height over sp8.
C.gspmd("g.maxpool_avgpool_excl_pad.sp8", {"sp": 8}, (P(None, "sp"),), P(None, "sp"), pools,
        (R(2, 16, 8, 4) - 0.8,))

C.finish()
