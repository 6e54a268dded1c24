"""samples/fresh67: a 67th batch of programs as a user writes them, on the theme of normalizing flows and invertible networks under sharding in current JAX (affine / additive coupling layers with a tensor-parallel conditioner, log-determinants reduced over sharded channels and spatial positions, ActNorm with data-dependent initialisation from global batch statistics, invertible 1x1 convolutions by slogdet or LU parametrisation, Glow squeeze / unsqueeze of sharded images, RealNVP checkerboard masks from global positions, bits-per-dimension losses, inverse passes, a jax.grad + optax training step), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families (images NHWC):
 1. affine coupling whose conditioner is a Megatron MLP of 1x1 convolutions
    (hidden channels column-split over tp, second projection row-split and
    psum'd), batch over dp; returns y and the per-example log-det. Bugs: the
    bias added on every rank before the psum, the conditioner not psum'd.
 2. affine coupling with the coupled half's channels over tp (scale / shift
    projections column-split), its inverse applied to a given z, and the
    log-det psum'd over tp. Bugs: log-det summed over the local channels
    only, log-det psum'd over (dp, tp) (mixes examples), the inverse with
    exp(+s).
 3. ActNorm with data-dependent initialisation, batch over dp4, height over
    sp2: per-channel mean and variance pmean'd over (dp, sp); returns y, the
    log-det (global H*W) and the initialised loc / scale. Bugs: statistics
    from the local batch (pmean over sp only), variance as the mean of
    per-device variances around the local means, log-det with the local
    height.
 4. invertible 1x1 convolution with a replicated weight, height over sp:
    slogdet per device times the local pixel count, psum'd over sp; the
    inverse by jnp.linalg.inv on a given z. Bugs: log-det not psum'd, psum'd
    over (dp, sp), the inverse with inv(W).T.
 5. LU-parametrised 1x1 convolution with output channels over tp: each rank
    builds its columns of P L (U + diag(sign exp(log_s))) with the strict
    upper mask at global column indices; log-det from psum'd log_s. Bugs:
    upper mask in local column coordinates, log-det from the local log_s.
 6. Glow squeeze (space-to-depth 2x2) of an image with the height over sp
    (even local blocks), an ActNorm with given parameters and an additive
    coupling on the squeezed channels, then unsqueeze. Bugs: the height
    factored as (2, H/2) instead of (H/2, 2), the (dy, dx) factors swapped
    in the squeeze's transpose (unsqueeze inverted consistently).
 7. RealNVP checkerboard affine coupling, height over sp4 with 3 rows per
    device (odd, so parity differs), conditioner a 3x3 convolution of the
    masked input with one-row halos by ppermute; log-det psum'd over sp.
    Bugs: mask from local row indices, halos from the wrong neighbours,
    log-det over the local rows.
 8. bits per dimension of a flow's output z (batch over dp, height over sp)
    with the per-example log-det given: Gaussian log-density psum'd over sp,
    D = H*W*C global, mean over the batch by pmean. Bugs: divided by the
    local dimension count, the log-det added on every sp shard before the
    psum, the batch mean over the local batch only.
 9. a training step of a one-level Glow (ActNorm, 1x1 conv, affine coupling
    with a Megatron conditioner over tp) on bits per dim, jax.grad inside
    the body (check_vma=True), loss pmean'd over dp, optax.sgd with
    momentum; returns parameters, momentum and loss. Bugs: loss psum'd over
    dp, conditioner bias added before the psum.
10. ActNorm initialisation by a Chan merge of all_gather'd per-device
    means and M2 sums (dp4). Bugs: the between-means term left out, the
    count of the local batch.
11. a 1x1 conv log-det computed by every sp rank but counted by rank 0
    only (psum of a where on axis_index), with bits per dim. Bug: every
    rank adds the log-det.
12. three affine couplings by lax.scan over stacked parameters, channels
    reversed between steps, a bf16 Megatron conditioner with f32 partial
    sums psum'd over tp. Bugs: conditioner not psum'd, channels not
    reversed.
13. the score d log p(x) / dx of an additive-coupling flow by
    jax.value_and_grad inside the body (check_vma=True), batch over dp,
    height over sp. Bug: pmean for psum.
14. checkerboard coupling on a 2-D mesh (height over sp2, width over tp2, 3
    x 3 pixels a device) with a global average of the masked image psum'd
    over both axes in the conditioner. Bugs: mask with a local width index,
    the pool psum'd over sp only.
15. bits per dim with the per-example log-density reduced by psum_scatter
    over the batch then all_gather'd, the dimension count a psum of the
    local one. Bug: local dimension count.
16. Glow squeeze by hand from a height-sharded image (4 rows a device) to
    a channel-sharded result: local space-to-depth, all_to_all (channel
    chunks out, rows in), per-channel gains over sp. Bugs: (dy, dx)
    swapped, height factored as (2, H/2).
17. additive coupling entirely in bf16, conditioner partial sums psum'd in
    bf16 over tp (the correct pair differs by one bf16 ulp). Bug: pmean.
GSPMD pairs (jax.jit with in/out shardings): 18. squeeze + ActNorm + 1x1
conv + coupling + bits per dim, image over (dp, sp); 19. the checkerboard
coupling of 7. with a 3x3 conv, height over sp4 (12 rows); 20. ActNorm
data-dependent init then an LU 1x1 conv with U's columns over tp and the
output channels over tp; 21. the Glow training step with optax.adam, the
conditioner over tp and the batch over dp; 22. a multi-scale level:
squeeze, ActNorm, half the channels factored out into a Gaussian
log-density, the other half squeezed again, image over (dp, sp); 23.
squeeze of an image sharded by height to a result sharded by channels,
and its unsqueeze.
Numerics: every correct pair agrees with its baseline at rounding level;
every bug variant differs clearly (see "numerics"). A first draft of
16.'s height-factor-order bug had 2 rows a device, where (2, 1) and (1, 2)
factorings coincide (no bug); the image was made 16 rows high.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh67.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh67.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh67.py"
C = Corpus("samples/fresh67", SCRIPT, "samples/gen/run_fresh67.sh", sys.argv[1:])
rng, R, I = seeded(6767)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index
LN2 = float(np.log(2.0))
HALF_LOG_2PI = float(0.5 * np.log(2 * np.pi))

# ---------------------------------------------------------------------------
# 1. affine coupling, Megatron conditioner


def coupling_ref(x, w1, b1, w2, b2):
    xa, xb = jnp.split(x, 2, -1)
    h = jax.nn.relu(jnp.einsum("bhwc,cd->bhwd", xa, w1) + b1)
    o = jnp.einsum("bhwd,de->bhwe", h, w2) + b2
    s, t = jnp.split(o, 2, -1)
    s = jnp.tanh(s)
    return jnp.concatenate([xa, xb * jnp.exp(s) + t], -1), jnp.sum(s, (1, 2, 3))


def coupling_tp(bug):
    def f(x, w1, b1, w2, b2):
        xa, xb = jnp.split(x, 2, -1)
        h = jax.nn.relu(jnp.einsum("bhwc,cd->bhwd", xa, w1) + b1)
        part = jnp.einsum("bhwd,de->bhwe", h, w2)
        if bug == "bias-before-psum":
            o = psum(part + b2, "tp")
        elif bug == "conditioner-not-psummed":
            o = part + b2
        else:
            o = psum(part, "tp") + b2
        s, t = jnp.split(o, 2, -1)
        s = jnp.tanh(s)
        return jnp.concatenate([xa, xb * jnp.exp(s) + t], -1), jnp.sum(s, (1, 2, 3))
    return f


C.smap("s.affine_coupling_megatron_conditioner.dp2xtp4", {"dp": 2, "tp": 4}, coupling_tp,
       (P("dp"), P(None, "tp"), P("tp"), P("tp", None), P()), (P("dp"), P("dp")), coupling_ref,
       (R(4, 4, 4, 8), R(4, 32, scale=0.5), R(32, scale=0.1), R(32, 8, scale=0.2), R(8, scale=0.3)),
       bugs=[("bias-before-psum", ["wrong-scale"]), ("conditioner-not-psummed", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 2. coupled half's channels over tp, forward + inverse


def chan_coupling_ref(xa, xb, z, w1, ws, wt):
    h = jnp.tanh(xa @ w1)
    s, t = 0.5 * jnp.tanh(h @ ws), h @ wt
    y = xb * jnp.exp(s) + t
    return y, jnp.sum(s, axis=(1, 2, 3)), (z - t) * jnp.exp(-s)


def chan_coupling_tp(bug):
    def f(xa, xb, z, w1, ws, wt):
        h = jnp.tanh(xa @ w1)
        s, t = 0.5 * jnp.tanh(h @ ws), h @ wt
        y = xb * jnp.exp(s) + t
        ld = s.sum(axis=(1, 2, 3))
        if bug == "logdet-psum-dp-and-tp":
            ld = psum(ld, ("dp", "tp"))
        elif bug != "logdet-local-channels":
            ld = psum(ld, "tp")
        inv = (z - t) * jnp.exp(s if bug == "inverse-exp-plus" else -s)
        return y, ld, inv
    return f


CS = P("dp", None, None, "tp")
C.smap("s.channel_sharded_coupling_inverse.dp2xtp4", {"dp": 2, "tp": 4}, chan_coupling_tp,
       (P("dp"), CS, CS, P(), P(None, "tp"), P(None, "tp")), (CS, P("dp"), CS), chan_coupling_ref,
       (R(4, 4, 4, 4), R(4, 4, 4, 8), R(4, 4, 4, 8), R(4, 16, scale=0.5), R(16, 8), R(16, 8, scale=0.5)),
       bugs=[("logdet-local-channels", ["missing-collective"]), ("logdet-psum-dp-and-tp", ["wrong-axis"]),
             ("inverse-exp-plus", ["wrong-sign"])])

# ---------------------------------------------------------------------------
# 3. ActNorm with data-dependent init


def actnorm_init_ref(x):
    mean = jnp.mean(x, axis=(0, 1, 2))
    var = jnp.mean(jnp.square(x - mean), axis=(0, 1, 2))
    loc, scale = -mean, 1.0 / (jnp.sqrt(var) + 1e-6)
    y = (x + loc) * scale
    ld = x.shape[1] * x.shape[2] * jnp.sum(jnp.log(scale))
    return y, jnp.full((x.shape[0],), ld), loc, scale


def actnorm_init_sh(bug):
    def f(x):
        axes = "sp" if bug == "stats-local-batch" else ("dp", "sp")
        mean = pmean(jnp.mean(x, axis=(0, 1, 2)), axes)
        if bug == "var-of-local-means":
            lm = jnp.mean(x, axis=(0, 1, 2))
            var = pmean(jnp.mean(jnp.square(x - lm), axis=(0, 1, 2)), axes)
        else:
            var = pmean(jnp.mean(jnp.square(x - mean), axis=(0, 1, 2)), axes)
        loc, scale = -mean, 1.0 / (jnp.sqrt(var) + 1e-6)
        y = (x + loc) * scale
        hh = x.shape[1] if bug == "logdet-local-height" else x.shape[1] * lax.psum(1, "sp")
        ld = hh * x.shape[2] * jnp.sum(jnp.log(scale))
        return y, jnp.full((x.shape[0],), ld), loc, scale
    return f


# channel means shifted so the local batches' statistics differ clearly
X3 = R(8, 4, 3, 4) * np.array([1.0, 2.0, 0.5, 1.5], np.float32) + np.array([0.5, -1.0, 2.0, 0.0], np.float32)
X3[:4] += 1.5
C.smap("s.actnorm_ddi_global_stats.dp4xsp2", {"dp": 4, "sp": 2}, actnorm_init_sh, (P("dp", "sp"),),
       (P("dp", "sp"), P("dp"), P(), P()), actnorm_init_ref, (X3,),
       bugs=[("stats-local-batch", ["missing-collective"]), ("var-of-local-means", ["wrong-reduction"]),
             ("logdet-local-height", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 4. invertible 1x1 conv by slogdet, height over sp


def invconv_ref(x, z, w):
    y = jnp.einsum("bhwc,cd->bhwd", x, w)
    ld = x.shape[1] * x.shape[2] * jnp.linalg.slogdet(w)[1]
    return y, jnp.full((x.shape[0],), ld), jnp.einsum("bhwd,dc->bhwc", z, jnp.linalg.inv(w))


def invconv_sp(bug):
    def f(x, z, w):
        y = jnp.einsum("bhwc,cd->bhwd", x, w)
        _, lad = jnp.linalg.slogdet(w)
        ld = x.shape[1] * x.shape[2] * lad
        if bug == "logdet-psum-dp-and-sp":
            ld = psum(ld, ("dp", "sp"))
        elif bug != "logdet-not-psummed":
            ld = psum(ld, "sp")
        wi = jnp.linalg.inv(w)
        if bug == "inverse-transposed":
            wi = wi.T
        return y, jnp.full((x.shape[0],), ld), jnp.einsum("bhwd,dc->bhwc", z, wi)
    return f


W4 = (np.eye(6) + 0.4 * R(6, 6)).astype(np.float32)
C.smap("s.invconv1x1_slogdet_spatial_psum.dp2xsp4", {"dp": 2, "sp": 4}, invconv_sp,
       (P("dp", "sp"), P("dp", "sp"), P()), (P("dp", "sp"), P("dp"), P("dp", "sp")), invconv_ref,
       (R(4, 8, 4, 6), R(4, 8, 4, 6), W4),
       bugs=[("logdet-not-psummed", ["missing-collective"]), ("logdet-psum-dp-and-sp", ["wrong-axis"]),
             ("inverse-transposed", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 5. LU-parametrised 1x1 conv, output channels over tp


def lu_weight(pm, l, u, log_s, sign):
    c = l.shape[0]
    lower = jnp.tril(l, -1) + jnp.eye(c)
    upper = jnp.triu(u, 1) + jnp.diag(sign * jnp.exp(log_s))
    return pm @ lower @ upper


def lu_conv_ref(x, pm, l, u, log_s, sign):
    y = jnp.einsum("bhwc,cd->bhwd", x, lu_weight(pm, l, u, log_s, sign))
    return y, jnp.full((x.shape[0],), x.shape[1] * x.shape[2] * jnp.sum(log_s))


def lu_conv_tp(bug):
    def f(x, pm, l, u, log_s, sign):
        c, k = l.shape[0], u.shape[1]
        cols = idx("tp") * k + jnp.arange(k)
        mcols = jnp.arange(k) if bug == "upper-mask-local-cols" else cols
        rows = jnp.arange(c)[:, None]
        ucols = jnp.where(rows < mcols[None, :], u, 0.0) + jnp.where(rows == cols[None, :], sign * jnp.exp(log_s), 0.0)
        lower = jnp.tril(l, -1) + jnp.eye(c)
        y = jnp.einsum("bhwc,cd->bhwd", x, pm @ (lower @ ucols))
        sl = jnp.sum(log_s)
        if bug != "logdet-local-log-s":
            sl = psum(sl, "tp")
        return y, jnp.full((x.shape[0],), x.shape[1] * x.shape[2] * sl)
    return f


PM5 = np.eye(8, dtype=np.float32)[rng.permutation(8)]
C.smap("s.lu_invconv_output_channels_tp.dp2xtp4", {"dp": 2, "tp": 4}, lu_conv_tp,
       (P("dp"), P(), P(), P(None, "tp"), P("tp"), P("tp")), (P("dp", None, None, "tp"), P("dp")), lu_conv_ref,
       (R(4, 3, 3, 8), PM5, R(8, 8, scale=0.3), R(8, 8, scale=0.3), R(8, scale=0.2),
        np.sign(R(8)).astype(np.float32)),
       bugs=[("upper-mask-local-cols", ["wrong-offset"]), ("logdet-local-log-s", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 6. Glow squeeze / unsqueeze with the height over sp


def squeeze(x, bug=None):
    b, h, w, c = x.shape
    if bug == "height-factor-order":
        y = x.reshape(b, 2, h // 2, w // 2, 2, c).transpose(0, 2, 3, 1, 4, 5)
    elif bug == "dy-dx-swapped":
        y = x.reshape(b, h // 2, 2, w // 2, 2, c).transpose(0, 1, 3, 4, 2, 5)
    else:
        y = x.reshape(b, h // 2, 2, w // 2, 2, c).transpose(0, 1, 3, 2, 4, 5)
    return y.reshape(b, h // 2, w // 2, 4 * c)


def unsqueeze(y, bug=None):
    b, h, w, c4 = y.shape
    c = c4 // 4
    y = y.reshape(b, h, w, 2, 2, c)
    if bug == "height-factor-order":
        x = y.transpose(0, 3, 1, 2, 4, 5)
        return x.reshape(b, 2 * h, 2 * w, c)
    if bug == "dy-dx-swapped":
        x = y.transpose(0, 1, 4, 2, 3, 5)
    else:
        x = y.transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(b, 2 * h, 2 * w, c)


def squeeze_flow(x, loc, logscale, wa, ba, bug=None):
    z = squeeze(x, bug)
    z = (z + loc) * jnp.exp(logscale)
    za, zb = jnp.split(z, 2, -1)
    zb = zb + jnp.tanh(za @ wa + ba)
    return unsqueeze(jnp.concatenate([za, zb], -1), bug)


def squeeze_ref(x, loc, logscale, wa, ba):
    y = squeeze_flow(x, loc, logscale, wa, ba)
    return y, jnp.full((x.shape[0],), x.shape[1] * x.shape[2] / 4 * jnp.sum(logscale))


def squeeze_sp(bug):
    def f(x, loc, logscale, wa, ba):
        y = squeeze_flow(x, loc, logscale, wa, ba, bug)
        ld = psum(x.shape[1] * x.shape[2] / 4 * jnp.sum(logscale), "sp")
        return y, jnp.full((x.shape[0],), ld)
    return f


C.smap("s.glow_squeeze_additive_unsqueeze.dp2xsp4", {"dp": 2, "sp": 4}, squeeze_sp,
       (P("dp", "sp"), P(), P(), P(), P()), (P("dp", "sp"), P("dp")), squeeze_ref,
       (R(2, 16, 4, 2), R(8, scale=0.3), R(8, scale=0.3), R(4, 4), R(4, scale=0.3)),
       bugs=[("height-factor-order", ["wrong-permutation"]), ("dy-dx-swapped", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 7. RealNVP checkerboard coupling, 3x3 conv conditioner with halos


def conv3(x, k, pad_h):
    return lax.conv_general_dilated(x, k, (1, 1), (pad_h, (1, 1)), dimension_numbers=("NHWC", "HWIO", "NHWC"))


def checker_ref(x, k, kb):
    h, w = x.shape[1], x.shape[2]
    mask = ((jnp.arange(h)[:, None] + jnp.arange(w)[None, :]) % 2 == 0).astype(x.dtype)[None, :, :, None]
    xm = x * mask
    o = conv3(xm, k, (1, 1)) + kb
    s, t = jnp.split(o, 2, -1)
    s = jnp.tanh(s)
    y = xm + (1 - mask) * (x * jnp.exp(s) + t)
    return y, jnp.sum((1 - mask) * s, (1, 2, 3))


def checker_sp(bug):
    def f(x, k, kb):
        n, hl, w = 4, x.shape[1], x.shape[2]
        me = idx("sp")
        rows = jnp.arange(hl) if bug == "mask-local-rows" else me * hl + jnp.arange(hl)
        mask = ((rows[:, None] + jnp.arange(w)[None, :]) % 2 == 0).astype(x.dtype)[None, :, :, None]
        xm = x * mask
        down, up = [(i, i + 1) for i in range(n - 1)], [(i + 1, i) for i in range(n - 1)]
        if bug == "halo-wrong-neighbours":
            down, up = up, down
        above = lax.ppermute(xm[:, -1:], "sp", down)  # previous block's last row
        below = lax.ppermute(xm[:, :1], "sp", up)  # next block's first row
        above = jnp.where(me == 0, 0.0, above)
        below = jnp.where(me == n - 1, 0.0, below)
        o = conv3(jnp.concatenate([above, xm, below], 1), k, (0, 0)) + kb
        s, t = jnp.split(o, 2, -1)
        s = jnp.tanh(s)
        y = xm + (1 - mask) * (x * jnp.exp(s) + t)
        ld = jnp.sum((1 - mask) * s, (1, 2, 3))
        return y, (ld if bug == "logdet-local-rows" else psum(ld, "sp"))
    return f


C.smap("s.realnvp_checkerboard_conv_halo.dp2xsp4", {"dp": 2, "sp": 4}, checker_sp,
       (P("dp", "sp"), P(), P()), (P("dp", "sp"), P("dp")), checker_ref,
       (R(2, 12, 4, 3), R(3, 3, 3, 6, scale=0.3), R(6, scale=0.2)),
       bugs=[("mask-local-rows", ["wrong-offset"]), ("halo-wrong-neighbours", ["wrong-permutation"]),
             ("logdet-local-rows", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 8. bits per dimension


def bpd_ref(z, ld):
    d = z.shape[1] * z.shape[2] * z.shape[3]
    logpz = jnp.sum(-0.5 * jnp.square(z) - HALF_LOG_2PI, (1, 2, 3))
    bpd = -(logpz + ld) / (d * LN2) + 8.0
    return jnp.mean(bpd)


def bpd_sh(bug):
    def f(z, ld):
        nsp = lax.psum(1, "sp")
        local = jnp.sum(-0.5 * jnp.square(z) - HALF_LOG_2PI, (1, 2, 3))
        if bug == "logdet-added-per-shard":
            tot = psum(local + ld, "sp")
        else:
            tot = psum(local, "sp") + ld
        d = z.shape[1] * z.shape[2] * z.shape[3]
        if bug != "dims-local":
            d = d * nsp
        bpd = jnp.mean(-tot / (d * LN2) + 8.0)
        return bpd if bug == "batch-mean-local" else pmean(bpd, "dp")
    return f


C.smap("s.bits_per_dim_global_dims.dp2xsp4", {"dp": 2, "sp": 4}, bpd_sh, (P("dp", "sp"), P("dp")), P(),
       bpd_ref, (R(4, 8, 4, 3), 20.0 + R(4, scale=5.0)),
       bugs=[("dims-local", ["wrong-scale"]), ("logdet-added-per-shard", ["wrong-scale"]),
             ("batch-mean-local", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 9. Glow training step, check_vma=True, jax.grad inside, optax.sgd momentum


def glow_forward(p, x, cond):
    z = (x + p["an_loc"]) * jnp.exp(p["an_logs"])
    ld = x.shape[1] * x.shape[2] * jnp.sum(p["an_logs"])
    z = jnp.einsum("bhwc,cd->bhwd", z, p["w_inv"])
    ld = ld + x.shape[1] * x.shape[2] * jnp.linalg.slogdet(p["w_inv"])[1]
    za, zb = jnp.split(z, 2, -1)
    s, t = jnp.split(cond(p, za), 2, -1)
    s = jnp.tanh(s)
    z = jnp.concatenate([za, zb * jnp.exp(s) + t], -1)
    return z, ld + jnp.sum(s, (1, 2, 3))


def glow_bpd(p, x, cond):
    z, ld = glow_forward(p, x, cond)
    d = x.shape[1] * x.shape[2] * x.shape[3]
    logpz = jnp.sum(-0.5 * jnp.square(z) - HALF_LOG_2PI, (1, 2, 3))
    return jnp.mean(-(logpz + ld) / (d * LN2) + 8.0)


def cond_full(p, za):
    h = jax.nn.relu(jnp.einsum("bhwc,cd->bhwd", za, p["c_w1"]) + p["c_b1"])
    return jnp.einsum("bhwd,de->bhwe", h, p["c_w2"]) + p["c_b2"]


OPT = optax.sgd(0.05, momentum=0.9)


def glow_step_ref(p, mom, x):
    loss, g = jax.value_and_grad(lambda q: glow_bpd(q, x, cond_full))(p)
    st = (optax.TraceState(trace=mom), optax.EmptyState())
    upd, st = OPT.update(g, st, p)
    return optax.apply_updates(p, upd), st[0].trace, loss


def glow_step_sh(bug):
    def cond_tp(p, za):
        h = jax.nn.relu(jnp.einsum("bhwc,cd->bhwd", za, p["c_w1"]) + p["c_b1"])
        part = jnp.einsum("bhwd,de->bhwe", h, p["c_w2"])
        if bug == "bias-before-psum":
            return psum(part + p["c_b2"], "tp")
        return psum(part, "tp") + p["c_b2"]

    def f(p, mom, x):
        def loss_fn(q):
            l = glow_bpd(q, x, cond_tp)
            return psum(l, "dp") if bug == "loss-psum-dp" else pmean(l, "dp")
        loss, g = jax.value_and_grad(loss_fn)(p)
        st = (optax.TraceState(trace=mom), optax.EmptyState())
        upd, st = OPT.update(g, st, p)
        return optax.apply_updates(p, upd), st[0].trace, loss
    return f


CH9, HID9 = 6, 16
P9 = {"an_loc": R(CH9, scale=0.2), "an_logs": R(CH9, scale=0.1),
      "w_inv": (np.eye(CH9) + 0.3 * R(CH9, CH9)).astype(np.float32),
      "c_w1": R(CH9 // 2, HID9, scale=0.5), "c_b1": R(HID9, scale=0.1),
      "c_w2": R(HID9, CH9, scale=0.2), "c_b2": R(CH9, scale=0.1)}
S9 = {"an_loc": P(), "an_logs": P(), "w_inv": P(), "c_w1": P(None, "tp"), "c_b1": P("tp"),
      "c_w2": P("tp", None), "c_b2": P()}
M9 = {k: R(*v.shape, scale=0.05) for k, v in P9.items()}
C.smap("s.glow_train_step_sgd_momentum.dp2xtp4", {"dp": 2, "tp": 4}, glow_step_sh, (S9, S9, P("dp")),
       (S9, S9, P()), glow_step_ref, (P9, M9, R(4, 4, 4, CH9)), check_vma=True,
       bugs=[("loss-psum-dp", ["wrong-collective-op"]), ("bias-before-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 10. ActNorm init by a Chan merge of all_gather'd per-device moments (dp4)


def chan_actnorm_ref(x):
    mean = jnp.mean(x, axis=(0, 1, 2))
    var = jnp.var(x, axis=(0, 1, 2))
    logs = -0.5 * jnp.log(var + 1e-5)
    y = (x - mean) * jnp.exp(logs)
    return y, x.shape[1] * x.shape[2] * jnp.sum(logs)


def chan_actnorm_dp(bug):
    def f(x):
        n = x.shape[0] * x.shape[1] * x.shape[2]
        m = jnp.mean(x, axis=(0, 1, 2))
        m2 = jnp.sum(jnp.square(x - m), axis=(0, 1, 2))
        ms, m2s = lax.all_gather(m, "dp"), lax.all_gather(m2, "dp")  # (4, C)
        mean = jnp.mean(ms, 0)
        tot = jnp.sum(m2s, 0)
        if bug != "m2-missing-between-term":
            tot = tot + n * jnp.sum(jnp.square(ms - mean), 0)
        cnt = n if bug == "count-local" else n * ms.shape[0]
        logs = -0.5 * jnp.log(tot / cnt + 1e-5)
        y = (x - mean) * jnp.exp(logs)
        return y, x.shape[1] * x.shape[2] * jnp.sum(logs)
    return f


X10 = R(8, 3, 3, 4) + np.repeat(np.array([0.0, 2.0, -1.0, 1.0], np.float32), 2)[:, None, None, None]
C.smap("s.actnorm_chan_merge_allgather.dp4", {"dp": 4}, chan_actnorm_dp, (P("dp"),), (P("dp"), P()),
       chan_actnorm_ref, (X10,),
       bugs=[("m2-missing-between-term", ["wrong-reduction"]), ("count-local", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 11. a 1x1 conv log-det computed by every sp rank but counted by rank 0
#     only (psum of a where on axis_index), with bits per dim


def invconv_bpd_ref(x, w):
    z = jnp.einsum("bhwc,cd->bhwd", x, w)
    ld = x.shape[1] * x.shape[2] * jnp.linalg.slogdet(w)[1]
    d = x.shape[1] * x.shape[2] * x.shape[3]
    logpz = jnp.sum(-0.5 * jnp.square(z) - HALF_LOG_2PI, (1, 2, 3))
    return z, -(logpz + ld) / (d * LN2)


def invconv_bpd_sp(bug):
    def f(x, w):
        me = idx("sp")
        z = jnp.einsum("bhwc,cd->bhwd", x, w)
        ld = (x.shape[1] * 4) * x.shape[2] * jnp.linalg.slogdet(w)[1]
        logpz = jnp.sum(-0.5 * jnp.square(z) - HALF_LOG_2PI, (1, 2, 3))
        mine = ld if bug == "every-rank-adds-logdet" else jnp.where(me == 0, ld, 0.0)
        tot = psum(logpz + mine, "sp")
        d = x.shape[1] * 4 * x.shape[2] * x.shape[3]
        return z, -tot / (d * LN2)
    return f


C.smap("s.invconv_logdet_rank0_bpd.sp4", {"sp": 4}, invconv_bpd_sp, (P(None, "sp"), P()), (P(None, "sp"), P()),
       invconv_bpd_ref, (R(2, 8, 3, 4), (np.eye(4) + 0.5 * R(4, 4)).astype(np.float32)),
       bugs=[("every-rank-adds-logdet", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 12. a stack of 3 affine couplings by lax.scan over stacked parameters,
#     channels reversed between steps, bf16 Megatron conditioner (f32
#     partial sums psum'd over tp), log-det carried


def stack_ref(x, w1, w2, b2):
    def step(carry, p):
        z, ld = carry
        a, b = jnp.split(z, 2, -1)
        h = jax.nn.gelu(jnp.einsum("bhwc,cd->bhwd", a.astype(jnp.bfloat16), p[0]))
        o = jnp.einsum("bhwd,de->bhwe", h, p[1], preferred_element_type=jnp.float32) + p[2]
        s, t = jnp.split(o, 2, -1)
        s = 0.5 * jnp.tanh(s)
        z = jnp.concatenate([a, b * jnp.exp(s) + t], -1)[..., ::-1]
        return (z, ld + jnp.sum(s, (1, 2, 3))), None
    (z, ld), _ = lax.scan(step, (x, jnp.zeros(x.shape[0])), (w1, w2, b2))
    return z, ld


def stack_tp(bug):
    def f(x, w1, w2, b2):
        def step(carry, p):
            z, ld = carry
            a, b = jnp.split(z, 2, -1)
            h = jax.nn.gelu(jnp.einsum("bhwc,cd->bhwd", a.astype(jnp.bfloat16), p[0]))
            part = jnp.einsum("bhwd,de->bhwe", h, p[1], preferred_element_type=jnp.float32)
            o = part + p[2] if bug == "conditioner-not-psummed" else psum(part, "tp") + p[2]
            s, t = jnp.split(o, 2, -1)
            s = 0.5 * jnp.tanh(s)
            z = jnp.concatenate([a, b * jnp.exp(s) + t], -1)
            if bug != "no-channel-reverse":
                z = z[..., ::-1]
            return (z, ld + jnp.sum(s, (1, 2, 3))), None
        (z, ld), _ = lax.scan(step, (x, jnp.zeros(x.shape[0])), (w1, w2, b2))
        return z, ld
    return f


C.smap("s.coupling_stack_scan_bf16_conditioner.dp2xtp4", {"dp": 2, "tp": 4}, stack_tp,
       (P("dp"), P(None, None, "tp"), P(None, "tp"), P()), (P("dp"), P("dp")), stack_ref,
       (R(4, 3, 3, 6), R(3, 3, 16, scale=0.5, dt=jnp.bfloat16), R(3, 16, 6, scale=0.3, dt=jnp.bfloat16),
        R(3, 6, scale=0.1)),
       bugs=[("conditioner-not-psummed", ["missing-collective"]), ("no-channel-reverse", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 13. the score d log p(x) / dx of an additive-coupling flow by jax.grad
#     inside the body (check_vma=True), batch over dp, height over sp


def score_logp(x, w, g):
    a, b = jnp.split(x * jnp.exp(g), 2, -1)
    z = jnp.concatenate([a, b + jnp.tanh(a @ w)], -1)
    return jnp.sum(-0.5 * jnp.square(z)) + x.shape[0] * x.shape[1] * x.shape[2] * jnp.sum(g)


def score_ref(x, w, g):
    return jax.value_and_grad(score_logp)(x, w, g)


def score_sh(bug):
    def f(x, w, g):
        def tot(xx):
            local = jnp.sum(-0.5 * jnp.square(
                jnp.concatenate([(xx * jnp.exp(g))[..., :2], (xx * jnp.exp(g))[..., 2:] + jnp.tanh((xx * jnp.exp(g))[..., :2] @ w)], -1)))
            ldt = xx.shape[0] * xx.shape[1] * xx.shape[2] * jnp.sum(g)
            v = local + ldt
            return pmean(v, ("dp", "sp")) if bug == "pmean-instead-of-psum" else psum(v, ("dp", "sp"))
        return jax.value_and_grad(tot)(x)
    return f


C.smap("s.flow_score_grad_wrt_input.dp2xsp4", {"dp": 2, "sp": 4}, score_sh, (P("dp", "sp"), P(), P()),
       (P(), P("dp", "sp")), score_ref, (R(4, 8, 2, 4), R(2, 2), R(4, scale=0.2)), check_vma=True,
       bugs=[("pmean-instead-of-psum", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 14. checkerboard coupling on a 2-D mesh (height over sp2, width over tp2,
#     3 x 3 pixels a device), conditioner per pixel plus a global average
#     of the masked image psum'd over both axes


def checker2d_ref(x, w, v):
    h, wd = x.shape[1], x.shape[2]
    mask = ((jnp.arange(h)[:, None] + jnp.arange(wd)[None, :]) % 2).astype(x.dtype)[None, :, :, None]
    xm = x * mask
    pooled = jnp.mean(xm, (1, 2), keepdims=True)
    o = xm @ w + pooled @ v
    s, t = jnp.split(o, 2, -1)
    s = jnp.tanh(s)
    y = xm + (1 - mask) * (x * jnp.exp(s) + t)
    return y, jnp.sum((1 - mask) * s, (1, 2, 3))


def checker2d_sh(bug):
    def f(x, w, v):
        hl, wl = x.shape[1], x.shape[2]
        r = idx("sp") * hl + jnp.arange(hl)
        c = jnp.arange(wl) if bug == "mask-width-local" else idx("tp") * wl + jnp.arange(wl)
        mask = ((r[:, None] + c[None, :]) % 2).astype(x.dtype)[None, :, :, None]
        xm = x * mask
        pooled = jnp.sum(xm, (1, 2), keepdims=True)
        pooled = psum(pooled, "sp" if bug == "pool-sp-only" else ("sp", "tp")) / (hl * wl * 4)
        o = xm @ w + pooled @ v
        s, t = jnp.split(o, 2, -1)
        s = jnp.tanh(s)
        y = xm + (1 - mask) * (x * jnp.exp(s) + t)
        return y, psum(jnp.sum((1 - mask) * s, (1, 2, 3)), ("sp", "tp"))
    return f


C.smap("s.checkerboard_2d_mesh_global_pool.sp2xtp2", {"sp": 2, "tp": 2}, checker2d_sh,
       (P(None, "sp", "tp"), P(), P()), (P(None, "sp", "tp"), P()), checker2d_ref,
       (R(2, 6, 6, 3), R(3, 6, scale=0.4), R(3, 6, scale=0.8)),
       bugs=[("mask-width-local", ["wrong-offset"]), ("pool-sp-only", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 15. bits per dim with the per-example log-density reduced by psum_scatter
#     over the batch then all_gather'd (sp4), dims counted by psum of the
#     local size


def bpd2_ref(z, ld):
    d = z.shape[1] * z.shape[2] * z.shape[3]
    lp = jnp.sum(-0.5 * jnp.square(z) - HALF_LOG_2PI, (1, 2, 3)) + ld
    return -lp / (d * LN2) + 8.0


def bpd2_sp(bug):
    def f(z, ld):
        lp = jnp.sum(-0.5 * jnp.square(z) - HALF_LOG_2PI, (1, 2, 3))
        lp = lax.all_gather(lax.psum_scatter(lp, "sp", tiled=True), "sp", tiled=True) + ld
        d = z.shape[1] * z.shape[2] * z.shape[3]
        if bug != "dims-local":
            d = psum(d, "sp")
        return -lp / (d * LN2) + 8.0
    return f


C.smap("s.bpd_psum_scatter_allgather.sp4", {"sp": 4}, bpd2_sp, (P(None, "sp"), P()), P(), bpd2_ref,
       (R(8, 8, 2, 3), 10.0 + R(8, scale=3.0)), bugs=[("dims-local", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 16. Glow squeeze by hand from a height-sharded image to a channel-sharded
#     result: local 2x2 space-to-depth, then all_to_all (channel chunks of
#     one (dy, dx) each out, height rows in), then per-channel gains


def squeeze_gain_ref(x, g):
    return squeeze(x) * g


def squeeze_a2a(bug):
    def f(x, g):
        z = squeeze(x, bug)  # (b, hl/2, w/2, 4c)
        z = lax.all_to_all(z, "sp", 3, 1, tiled=True)  # (b, h/2, w/2, c)
        return z * g
    return f


C.smap("s.squeeze_height_to_channels_all_to_all.sp4", {"sp": 4}, squeeze_a2a, (P(None, "sp"), P("sp")),
       P(None, None, None, "sp"), squeeze_gain_ref, (R(2, 16, 4, 3), 1.0 + R(12, scale=0.3)),
       bugs=[("dy-dx-swapped", ["wrong-permutation"]), ("height-factor-order", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 17. additive coupling computed entirely in bf16 (conditioner partial sums
#     psum'd in bf16 over tp), batch over dp; additive, so no log-det


def additive_bf16_ref(x, w1, w2):
    a, b = jnp.split(x, 2, -1)
    h = jax.nn.relu(a @ w1)
    return jnp.concatenate([a, b + h @ w2], -1)


def additive_bf16_tp(bug):
    def f(x, w1, w2):
        a, b = jnp.split(x, 2, -1)
        h = jax.nn.relu(a @ w1)
        sh = h @ w2
        if bug == "shift-pmean":
            sh = pmean(sh, "tp")
        else:
            sh = psum(sh, "tp")
        return jnp.concatenate([a, b + sh], -1)
    return f


C.smap("s.additive_coupling_bf16_psum.dp2xtp4", {"dp": 2, "tp": 4}, additive_bf16_tp,
       (P("dp"), P(None, "tp"), P("tp", None)), P("dp"), additive_bf16_ref,
       (R(4, 4, 4, 8, dt=jnp.bfloat16), R(4, 32, scale=0.5, dt=jnp.bfloat16), R(32, 4, scale=0.3, dt=jnp.bfloat16)),
       bugs=[("shift-pmean", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# GSPMD pairs


def glow_level_bpd(x, loc, logs, w, w1, b1, w2, b2):
    z = squeeze(x)
    p = {"an_loc": loc, "an_logs": logs, "w_inv": w, "c_w1": w1, "c_b1": b1, "c_w2": w2, "c_b2": b2}
    return glow_bpd(p, z, cond_full)


C.gspmd("g.glow_squeeze_level_bpd.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"),) + (P(),) * 7, P(),
        glow_level_bpd, (R(4, 16, 4, 2), R(8, scale=0.2), R(8, scale=0.1), (np.eye(8) + 0.3 * R(8, 8)).astype(np.float32),
                         R(4, 16, scale=0.5), R(16, scale=0.1), R(16, 8, scale=0.2), R(8, scale=0.1)))

C.gspmd("g.realnvp_checkerboard_conv.sp4", {"sp": 4}, (P(None, "sp"), P(), P()), (P(None, "sp"), P()),
        checker_ref, (R(2, 12, 4, 3), R(3, 3, 3, 6, scale=0.3), R(6, scale=0.2)))


def actnorm_then_lu(x, pm, l, u, log_s, sign):
    y, ld0, _, _ = actnorm_init_ref(x)
    y, ld1 = lu_conv_ref(y, pm, l, u, log_s, sign)
    return y, ld0 + ld1


C.gspmd("g.actnorm_ddi_lu_invconv.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp"), P(), P(), P(None, "tp"), P("tp"), P("tp")), (P("dp", None, None, "tp"), P("dp")), actnorm_then_lu,
        (R(4, 3, 3, 8) + 1.0, PM5, R(8, 8, scale=0.3), R(8, 8, scale=0.3), R(8, scale=0.2),
         np.sign(R(8)).astype(np.float32)))

ADAM = optax.adam(1e-2)


def glow_adam_step(p, x):
    st = ADAM.init(p)
    loss, g = jax.value_and_grad(lambda q: glow_bpd(q, x, cond_full))(p)
    upd, st = ADAM.update(g, st, p)
    return optax.apply_updates(p, upd), loss


C.gspmd("g.glow_train_step_adam.dp2xtp4", {"dp": 2, "tp": 4}, (S9, P("dp")), (S9, P()), glow_adam_step,
        (P9, R(4, 4, 4, CH9)))


def squeeze_roundtrip(x, g):
    z = squeeze(x) * g
    return z, unsqueeze(z)


def multiscale(x, loc, logs):
    z = (squeeze(x) + loc) * jnp.exp(logs)
    z1, z2 = jnp.split(z, 2, -1)
    lp1 = jnp.sum(-0.5 * jnp.square(z1), (1, 2, 3))
    return squeeze(z2), lp1 + z.shape[1] * z.shape[2] * jnp.sum(logs)


C.gspmd("g.multiscale_factor_out_two_squeezes.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"), P(), P()),
        (P("dp", "sp"), P("dp")), multiscale, (R(2, 16, 8, 2), R(8, scale=0.2), R(8, scale=0.2)))

C.gspmd("g.squeeze_height_to_channels.sp4", {"sp": 4}, (P(None, "sp"), P()),
        (P(None, None, None, "sp"), P(None, "sp")), squeeze_roundtrip, (R(2, 8, 4, 2), 1.0 + R(8, scale=0.2)))

C.finish()
