"""samples/fresh101: a 101st batch of programs as a user writes them, on the theme of diffusion sampling and latent pipelines with the batch, the image rows or the channels sharded in current JAX / optax (samplers written as loops inside jit: DPM-Solver++ 2M, EDM Heun with churn, Euler ancestral with per-example PRNG keys, DDIM in a while loop whose schedule comes from a carried step counter; classifier-free guidance with the conditional and unconditional halves of the doubled batch on different devices; Imagen dynamic thresholding with a global percentile; a VAE decoder with spatial halos for 3x3 convolutions around a nearest upsampling; cross attention to text tokens sharded over devices; a v-prediction / min-SNR training step of a tiny DiT under dp x tp), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. DPM-Solver++ (2M) sampler, fori_loop over 5 steps with the previous
    data prediction and step size carried; the cosine VP schedule (alpha,
    sigma, lambda) computed from the loop counter; a per-pixel MLP
    denoiser with its hidden dim over tp (column / row parallel, psum) and
    a sinusoidal time embedding whose projection is replicated and sliced
    at the tp rank's hidden block; batch over dp (dp2 x tp4). Bugs: the
    second layer not psum'd, the time projection sliced at the dp index.
 2. EDM (Karras) Heun sampler with churn (S_churn = 2, window [0.05, 5]),
    lax.scan over (sigma, sigma_next, step noise) with EDM preconditioning
    (c_skip, c_out, c_in, c_noise) and the second-order correction skipped
    at sigma_next = 0; the churn noise of every step passed replicated
    (steps, B, P, C) and sliced at the device's examples; batch over dp4.
    Bugs: the noise rows taken at offset 0, the noise rows of the next
    device.
 3. Euler ancestral sampler with the step noise drawn in the body: per
    step key fold_in(key, step), per example fold_in(step key, global
    example index) (the baseline vmaps over all examples); batch over dp4.
    Bugs: the key folded with the local example index (the same noise on
    every device), one draw per device from fold_in(step key, axis_index).
 4. classifier-free guidance where the doubled batch's halves live on the
    two dp devices (dp 0 conditional, dp 1 unconditional embeddings), the
    image replicated; denoiser hidden over tp; guidance written as one
    psum over dp of where(dp == 0, w, 1 - w) * eps; 3 DDIM steps in a
    fori_loop. Bugs: halves swapped (w on the unconditional device), pmean
    instead of psum over dp, the denoiser's hidden psum over (dp, tp)
    (mixing the conditional and unconditional activations).
 5. Imagen dynamic thresholding of the x0 prediction inside a DDIM step:
    per-example 80th percentile of |x0| over all pixels, max(s, 1), clip
    and divide; image rows over sp, batch over dp (dp2 x sp4), |x0|
    all_gather'd over sp (untiled) before jnp.percentile. Bugs: the
    percentile of the local rows, the gather over dp instead of sp, the
    pmax over sp of local percentiles.
 6. VAE decoder block with image rows over sp4: 3x3 conv, GroupNorm (2
    groups, statistics psum'd over sp), SiLU, nearest 2x upsampling, 3x3
    conv; one-row halos by ppermute before each conv (zero at the image
    edge, conv padding only along the width). Bugs: halo rows from the
    wrong side, periodic halos (cyclic ppermute), GroupNorm statistics of
    the local rows.
 7. image-to-text cross attention with the text tokens over sp and the
    batch over dp (dp2 x sp4): keys / values from the local text tokens,
    a padding mask from per-example text lengths at global token
    positions, the softmax merged flash-style by pmax of the maxima and
    psum of numerators and denominators. Bugs: the mask at local token
    positions, the denominator not psum'd, the local maximum used (no
    pmax).
 8. DDIM (eta = 0) in a lax.while_loop whose discrete timestep
    t = 960 - 240 i comes from a carried counter (alpha-bar of the cosine
    schedule computed on the fly, alpha-bar of t < 0 is 1); latent
    channels over tp4, the first 1x1 layer row-parallel (psum), the second
    column-parallel to the local channels. Bugs: the first layer not
    psum'd, the stop test on psum over tp of the counter.
 9. a training step of a tiny DiT (time-embedding shift, one attention
    block with heads over tp, MLP over tp, RMSNorm) with v-prediction and
    min-SNR-5 weights, noise drawn per example from fold_in(key, global
    index), loss pmean'd over dp, jax.value_and_grad and optax.adamw under
    dp2 x tp4 with check_vma=True. Bugs: loss psum'd over dp, the noise
    key folded with the local index, the MLP output psum'd over (dp, tp).
10. classifier-free guidance as in 4., written the common way: the two
    halves' predictions all_gather'd over dp and indexed (0 conditional,
    1 unconditional). Bugs: the conditional taken at index 1, the gather
    over tp instead of dp.
11. Euler ancestral as in 3., the per-example keys from
    jax.random.split(step key, B) sliced at the device's examples. Bugs:
    keys sliced at offset 0, a split into the local batch size on every
    device.
12. cross attention as in 7., the text keys and values all_gather'd over
    sp. Bugs: the gather over dp, the padding mask dropped.
13. a VAE conv pair with the channels over tp4: the first 3x3 conv
    column-parallel (4 of 16 channels per rank), GroupNorm with 2 groups
    of 8 channels each spanning two ranks (per-channel sums all_gather'd
    over tp, the rank's group picked by jnp.take at rank // 2), the second
    conv row-parallel with a psum. Bugs: group statistics from the local 4
    channels only, the group picked at rank % 2.
GSPMD pairs (jax.jit with in/out shardings, correct only): 14. the
DPM-Solver++ sampler of 1. (dp2 x tp4); 15. the EDM Heun sampler of 2. with
its noise over dp4; 16. the Euler ancestral sampler of 3. (dp4); 17. the VAE
decoder block of 6. (sp4); 18. the cross attention of 7. (dp2 x sp4); 19.
the thresholded DDIM step of 5. (dp2 x sp4); 20. the training step of 9.
(dp2 x tp4); 21. the CFG DDIM loop of 4. with the doubled conditioning over
dp (dp2 x tp4); 22. the while-loop DDIM of 8. with channels over tp4; 23.
the channel-parallel VAE conv pair of 13. (tp4); 24. the split-key Euler
ancestral sampler of 11. (dp4).
Numerics: every correct pair agrees with its baseline at rounding level (f32;
at most 3e-5 on the DPM-Solver++ output of magnitude 136, relative 2e-7);
every bug variant differs clearly (the smallest, 0.0002-0.002 on the
training step's optimizer state, are the noise-key and MLP-psum bugs of
9.; see "numerics"). First drafts changed for their numerics: the
DPM-Solver++ schedule started at t = 1 where the cosine alpha is slightly
negative (NaN), the EDM churn noise scale written sqrt(sh^2 - s^2) gave NaN
under jit at gamma = 0 (now s sqrt(gamma (2 + gamma)), as equal), and the
DDIM loop started at t = 999 (alpha-bar ~ 1e-6, outputs ~3e3).
Run from the repository root: bash samples/gen/run_fresh101.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh101.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh101.py"
C = Corpus("samples/fresh101", SCRIPT, "samples/gen/run_fresh101.sh", sys.argv[1:])
rng, R, I = seeded(10101)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
NEG = -1e30
F = 8  # time-embedding width


def temb(t):
    fr = jnp.exp(-np.log(1000.0) * jnp.arange(F // 2) / (F // 2))
    a = jnp.asarray(t, jnp.float32)[..., None] * fr
    return jnp.concatenate([jnp.cos(a), jnp.sin(a)], -1)


def vp(t):
    """cosine VP schedule at continuous t in [0, 1]: alpha, sigma."""
    a = jnp.cos(0.5 * np.pi * (t + 0.008) / 1.008)
    return a, jnp.sqrt(1.0 - a * a)


# ---------------------------------------------------------------------------
# 1. DPM-Solver++ (2M), batch over dp, denoiser hidden over tp
N1, T1, DT1 = 5, 0.98, (0.98 - 0.02) / 5
B1, P1, C1, H1 = 4, 8, 4, 16


def mlp1(x, t, w1, wt, w2, red=lambda y: y):
    h = jnp.tanh(jnp.einsum("bpc,ch->bph", x, w1) + (temb(t * 1000.0) @ wt)[None, None])
    return red(jnp.einsum("bph,hc->bpc", h, w2))


def dpmpp2m(x, w1, wt, w2, den=mlp1):
    def body(i, c):
        x, x0p, hp = c
        tc, tn = T1 - i * DT1, T1 - (i + 1) * DT1
        ac, sc = vp(tc)
        an, sn = vp(tn)
        h = jnp.log(an / sn) - jnp.log(ac / sc)
        eps = den(x, tc, w1, wt, w2)
        x0 = (x - sc * eps) / ac
        r = hp / h
        d = jnp.where(i == 0, x0, (1 + 1 / (2 * r)) * x0 - x0p / (2 * r))
        return (sn / sc) * x - an * jnp.expm1(-h) * d, x0, h
    return lax.fori_loop(0, N1, body, (x, jnp.zeros_like(x), jnp.float32(1.0)))[0]


def dpm_sm(bug):
    hl = H1 // 4

    def den(x, t, w1, wt, w2):
        r = idx("dp") if bug == "temb-sliced-at-dp-index" else idx("tp")
        wts = lax.dynamic_slice_in_dim(wt, r * hl, hl, 1)
        red = (lambda y: y) if bug == "second-layer-not-psummed" else (lambda y: psum(y, "tp"))
        return mlp1(x, t, w1, wts, w2, red)

    def f(x, w1, wt, w2):
        return dpmpp2m(x, w1, wt, w2, den)
    return f


A1 = (R(B1, P1, C1), R(C1, H1, scale=0.5), R(F, H1, scale=0.5), R(H1, C1, scale=0.3))
C.smap("s.dpmpp2m_sampler_hidden_tp.dp2xtp4", {"dp": 2, "tp": 4}, dpm_sm,
       (P("dp"), P(None, "tp"), P(), P("tp")), P("dp"), dpmpp2m, A1,
       bugs=[("second-layer-not-psummed", ["missing-all-reduce"]), ("temb-sliced-at-dp-index", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 2. EDM Heun sampler with churn, batch over dp4, noise replicated and sliced
N2, SD = 4, 0.5
B2, P2, C2, H2 = 8, 8, 4, 12
_r = np.arange(N2) / (N2 - 1)
SIG2 = ((10.0 ** (1 / 7) + _r * (0.02 ** (1 / 7) - 10.0 ** (1 / 7))) ** 7).astype(np.float32)
SIG2N = np.append(SIG2[1:], 0.0).astype(np.float32)
GAM2 = np.where((SIG2 >= 0.05) & (SIG2 <= 5.0), min(2.0 / N2, np.sqrt(2) - 1), 0.0).astype(np.float32)


def edm_den(x, s, w1, wn, w2):
    cs = SD ** 2 / (s ** 2 + SD ** 2)
    co = s * SD / jnp.sqrt(s ** 2 + SD ** 2)
    ci = 1 / jnp.sqrt(s ** 2 + SD ** 2)
    cn = jnp.log(s) / 4
    f = jnp.tanh(jnp.einsum("bpc,ch->bph", ci * x, w1) + cn * wn) @ w2
    return cs * x + co * f


def heun(x, nz, w1, wn, w2):
    def step(x, a):
        s, sn, g, z = a
        sh = s * (1 + g)
        xh = x + s * jnp.sqrt(g * (2 + g)) * z  # sqrt(sh^2 - s^2)
        d = (xh - edm_den(xh, sh, w1, wn, w2)) / sh
        xn = xh + (sn - sh) * d
        snz = jnp.where(sn > 0, sn, 1.0)
        d2 = (xn - edm_den(xn, snz, w1, wn, w2)) / snz
        return jnp.where(sn > 0, xh + (sn - sh) * 0.5 * (d + d2), xn), None
    return lax.scan(step, x, (SIG2, SIG2N, GAM2, nz))[0]


def heun_sm(bug):
    def f(x, nz, w1, wn, w2):
        bl = x.shape[0]
        r = idx("dp")
        if bug == "noise-rows-at-offset-0":
            r = 0
        if bug == "noise-rows-of-next-device":
            r = (r + 1) % 4
        return heun(x, lax.dynamic_slice_in_dim(nz, r * bl, bl, 1), w1, wn, w2)
    return f


A2 = (R(B2, P2, C2, scale=10.0), R(N2, B2, P2, C2), R(C2, H2, scale=0.5), R(H2, scale=0.5), R(H2, C2, scale=0.3))
C.smap("s.edm_heun_churn_noise_sliced.dp4", {"dp": 4}, heun_sm, (P("dp"), P(), P(), P(), P()), P("dp"), heun, A2,
       bugs=[("noise-rows-at-offset-0", ["wrong-offset"]), ("noise-rows-of-next-device", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. Euler ancestral, per-example keys folded with the global example index
N3 = 3
SIG3 = np.array([8.0, 2.0, 0.4], np.float32)
SIG3N = np.array([2.0, 0.4, 0.0], np.float32)


def euler_anc(x, key, w1, wn, w2, gidx=None, noise=None):
    gidx = jnp.arange(x.shape[0]) if gidx is None else gidx

    def draw(ks, shape):
        return jax.vmap(lambda b: jax.random.normal(jax.random.fold_in(ks, b), shape[1:]))(gidx)
    noise = noise or draw

    def step(x, a):
        i, s, sn = a
        up = jnp.minimum(sn, jnp.sqrt(sn ** 2 * (s ** 2 - sn ** 2) / s ** 2))
        down = jnp.sqrt(sn ** 2 - up ** 2)
        d = (x - edm_den(x, s, w1, wn, w2)) / s
        z = noise(jax.random.fold_in(key, i), x.shape)
        return x + d * (down - s) + z * up, None
    return lax.scan(step, x, (jnp.arange(N3), SIG3, SIG3N))[0]


def euler_sm(bug):
    def f(x, key, w1, wn, w2):
        bl = x.shape[0]
        if bug == "key-folded-device-index":
            return euler_anc(x, key, w1, wn, w2,
                             noise=lambda ks, sh: jax.random.normal(jax.random.fold_in(ks, idx("dp")), sh))
        g = jnp.arange(bl) if bug == "key-folded-local-index" else idx("dp") * bl + jnp.arange(bl)
        return euler_anc(x, key, w1, wn, w2, gidx=g)
    return f


KEY = np.asarray(jax.random.key_data(jax.random.key(101)))
A3 = (R(B2, P2, C2, scale=8.0), KEY, R(C2, H2, scale=0.5), R(H2, scale=0.5), R(H2, C2, scale=0.3))
C.smap("s.euler_ancestral_keys_per_example.dp4", {"dp": 4}, euler_sm, (P("dp"), P(), P(), P(), P()), P("dp"),
       euler_anc, A3,
       bugs=[("key-folded-local-index", ["wrong-offset"]), ("key-folded-device-index", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 4. classifier-free guidance, doubled batch halves on the two dp devices
B4, E4, W4 = 2, 6, 3.0
T4 = [(0.9, 0.6), (0.6, 0.3), (0.3, 0.02)]


def cfg_mlp(x, cc, t, w1, wc, wt, w2, red=lambda y: y):
    h = jnp.tanh(jnp.einsum("bpc,ch->bph", x, w1) + (cc @ wc)[:, None] + (temb(t * 1000.0) @ wt)[None, None])
    return red(jnp.einsum("bph,hc->bpc", h, w2))


def cfg_ddim(x, cc, w1, wc, wt, w2):
    def body(i, x):
        tc, tn = jnp.asarray(T4)[i]
        ac, sc = vp(tc)
        an, sn = vp(tn)
        e = cfg_mlp(jnp.concatenate([x, x]), cc, tc, w1, wc, wt, w2)
        ec, eu = e[:B4], e[B4:]
        g = eu + W4 * (ec - eu)
        x0 = (x - sc * g) / ac
        return an * x0 + sn * g
    return lax.fori_loop(0, len(T4), body, x)


def cfg_sm(bug):
    def f(x, cc, w1, wc, wt, w2):
        def body(i, x):
            tc, tn = jnp.asarray(T4)[i]
            ac, sc = vp(tc)
            an, sn = vp(tn)
            ax = ("dp", "tp") if bug == "hidden-psum-over-dp-tp" else "tp"
            e = cfg_mlp(x, cc, tc, w1, wc, wt, w2, lambda y: psum(y, ax))
            cond = idx("dp") == (1 if bug == "halves-swapped" else 0)
            ge = jnp.where(cond, W4, 1.0 - W4) * e
            g = pmean(ge, "dp") if bug == "pmean-over-dp" else psum(ge, "dp")
            x0 = (x - sc * g) / ac
            return an * x0 + sn * g
        return lax.fori_loop(0, len(T4), body, x)
    return f


A4 = (R(B4, P1, C1), R(2 * B4, E4), R(C1, H1, scale=0.5), R(E4, H1, scale=0.5), R(F, H1, scale=0.5),
      R(H1, C1, scale=0.3))
C.smap("s.cfg_doubled_batch_halves_on_dp.dp2xtp4", {"dp": 2, "tp": 4}, cfg_sm,
       (P(), P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P(), cfg_ddim, A4,
       bugs=[("halves-swapped", ["wrong-offset"]), ("pmean-over-dp", ["wrong-collective-op"]),
             ("hidden-psum-over-dp-tp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 5. dynamic thresholding with a global per-example percentile, rows over sp
A5a, S5a = vp(0.7)
A5b, S5b = vp(0.5)


def dyn_ddim(xt, eps, pct=None):
    x0 = (xt - S5a * eps) / A5a
    q = pct(jnp.abs(x0)) if pct else jnp.percentile(jnp.abs(x0).reshape(x0.shape[0], -1), 80.0, axis=1)
    s = jnp.maximum(q, 1.0)[:, None, None, None]
    x0 = jnp.clip(x0, -s, s) / s
    e = (xt - A5a * x0) / S5a
    return A5b * x0 + S5b * e


def dyn_sm(bug):
    def pct(a):
        b = a.shape[0]
        if bug == "local-percentile":
            return jnp.percentile(a.reshape(b, -1), 80.0, axis=1)
        if bug == "pmax-of-local-percentiles":
            return pmax(jnp.percentile(a.reshape(b, -1), 80.0, axis=1), "sp")
        if bug == "gather-over-dp":
            g = lax.all_gather(a, "dp", axis=1, tiled=True)
        else:
            g = jnp.moveaxis(lax.all_gather(a, "sp"), 0, 1)
        return jnp.percentile(g.reshape(b, -1), 80.0, axis=1)

    def f(xt, eps):
        return dyn_ddim(xt, eps, pct)
    return f


A5 = (R(4, 8, 4, 3, scale=2.0), R(4, 8, 4, 3))
C.smap("s.dynamic_threshold_global_percentile.dp2xsp4", {"dp": 2, "sp": 4}, dyn_sm, (P("dp", "sp"),) * 2,
       P("dp", "sp"), dyn_ddim, A5,
       bugs=[("local-percentile", ["missing-collective"]), ("gather-over-dp", ["wrong-axis"]),
             ("pmax-of-local-percentiles", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 6. VAE decoder block with one-row halos, image rows over sp4
NSP = 4
DN = ("NHWC", "HWIO", "NHWC")


def conv(x, w, b, pad_h=1):
    return lax.conv_general_dilated(x, w, (1, 1), ((pad_h, pad_h), (1, 1)), dimension_numbers=DN) + b


def gnorm(x, g, b, G=2, red=None):
    y = x.reshape(x.shape[:3] + (G, x.shape[3] // G))
    s1, s2, n = jnp.sum(y, (1, 2, 4), keepdims=True), jnp.sum(y * y, (1, 2, 4), keepdims=True), y.size // (
        y.shape[0] * G)
    if red:
        s1, s2, n = red(s1), red(s2), n * NSP
    mu = s1 / n
    var = s2 / n - mu * mu
    return ((y - mu) * lax.rsqrt(var + 1e-5)).reshape(x.shape) * g + b


def vae_block(z, w1, b1, g, bg, w2, b2, halo=None, red=None):
    pad = 1 if halo is None else 0
    hx = (lambda x: x) if halo is None else halo
    h = jax.nn.silu(gnorm(conv(hx(z), w1, b1, pad), g, bg, red=red))
    h = jnp.repeat(jnp.repeat(h, 2, 1), 2, 2)
    return conv(hx(h), w2, b2, pad)


def vae_sm(bug):
    down = [(i, i + 1) for i in range(NSP - 1)]
    up = [(i + 1, i) for i in range(NSP - 1)]
    if bug == "periodic-halo":
        down, up = down + [(NSP - 1, 0)], up + [(0, NSP - 1)]

    def halo(x):
        if bug == "halo-from-wrong-side":
            above = lax.ppermute(x[:, :1], "sp", up)
            below = lax.ppermute(x[:, -1:], "sp", down)
        else:
            above = lax.ppermute(x[:, -1:], "sp", down)
            below = lax.ppermute(x[:, :1], "sp", up)
        return jnp.concatenate([above, x, below], 1)

    def f(z, w1, b1, g, bg, w2, b2):
        red = None if bug == "groupnorm-local-stats" else (lambda s: psum(s, "sp"))
        return vae_block(z, w1, b1, g, bg, w2, b2, halo, red)
    return f


A6 = (R(2, 8, 6, 4), R(3, 3, 4, 8, scale=0.3), R(8, scale=0.1), 1 + R(8, scale=0.1), R(8, scale=0.1),
      R(3, 3, 8, 3, scale=0.3), R(3, scale=0.1))
C.smap("s.vae_decoder_halo_upsample_groupnorm.sp4", {"sp": NSP}, vae_sm, (P(None, "sp"),) + (P(),) * 6,
       P(None, "sp"), vae_block, A6,
       bugs=[("halo-from-wrong-side", ["wrong-permutation"]), ("periodic-halo", ["wrong-permutation"]),
             ("groupnorm-local-stats", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 7. cross attention to text tokens sharded over sp, padding by text length
L7, H7, E7 = 16, 2, 4


def xattn(q_in, ctx, lens, wq, wk, wv, wo):
    q = jnp.einsum("bnd,dhe->bhne", q_in, wq)
    k = jnp.einsum("bld,dhe->bhle", ctx, wk)
    v = jnp.einsum("bld,dhe->bhle", ctx, wv)
    s = jnp.einsum("bhne,bhle->bhnl", q, k) / np.sqrt(E7)
    ok = (jnp.arange(ctx.shape[1])[None] < lens[:, None])[:, None, None]
    p = jax.nn.softmax(jnp.where(ok, s, NEG), -1)
    return jnp.einsum("bhnl,bhle,hed->bnd", p, v, wo)


def xattn_sm(bug):
    def f(q_in, ctx, lens, wq, wk, wv, wo):
        ll = ctx.shape[1]
        q = jnp.einsum("bnd,dhe->bhne", q_in, wq)
        k = jnp.einsum("bld,dhe->bhle", ctx, wk)
        v = jnp.einsum("bld,dhe->bhle", ctx, wv)
        s = jnp.einsum("bhne,bhle->bhnl", q, k) / np.sqrt(E7)
        pos = jnp.arange(ll) + (0 if bug == "mask-local-positions" else idx("sp") * ll)
        ok = (pos[None] < lens[:, None])[:, None, None]
        s = jnp.where(ok, s, NEG)
        m = jnp.max(s, -1, keepdims=True)
        if bug != "local-max":
            m = pmax(m, "sp")
        e = jnp.exp(s - m)
        num = psum(jnp.einsum("bhnl,bhle->bhne", e, v), "sp")
        den = jnp.sum(e, -1)[..., None]
        if bug != "den-not-psummed":
            den = psum(den, "sp")
        return jnp.einsum("bhne,hed->bnd", num / den, wo)
    return f


A7 = (R(4, 6, 8), R(4, L7, 6), np.array([3, 16, 7, 10], np.int32), R(8, H7, E7, scale=0.4), R(6, H7, E7, scale=0.4),
      R(6, H7, E7, scale=0.4), R(H7, E7, 8, scale=0.4))
C.smap("s.text_cross_attention_tokens_sp.dp2xsp4", {"dp": 2, "sp": 4}, xattn_sm,
       (P("dp"), P("dp", "sp"), P("dp"), P(), P(), P(), P()), P("dp"), xattn, A7,
       bugs=[("mask-local-positions", ["wrong-offset"]), ("den-not-psummed", ["missing-all-reduce"]),
             ("local-max", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 8. DDIM in a while loop with a carried counter, channels over tp4
N8, C8, H8 = 4, 8, 16


def abar(t):
    a = jnp.cos(0.5 * np.pi * (t / 1000.0 + 0.008) / 1.008) ** 2
    return jnp.where(t < 0, 1.0, a)


def ddim_while(x, w1, wt, w2, first=lambda y: y, stop=lambda i: i):
    def cond(c):
        return stop(c[0]) < N8

    def body(c):
        i, x = c
        t = 960 - 240 * i
        a, an = abar(t), abar(t - 240)
        h = jnp.tanh(first(jnp.einsum("bpc,ch->bph", x, w1)) + (temb(t) @ wt)[None, None])
        e = jnp.einsum("bph,hc->bpc", h, w2)
        x0 = (x - jnp.sqrt(1 - a) * e) / jnp.sqrt(a)
        return i + 1, jnp.sqrt(an) * x0 + jnp.sqrt(1 - an) * e
    return lax.while_loop(cond, body, (jnp.int32(0), x))[1]


def ddim_sm(bug):
    def f(x, w1, wt, w2):
        first = (lambda y: y) if bug == "first-layer-not-psummed" else (lambda y: psum(y, "tp"))
        stop = (lambda i: psum(i, "tp")) if bug == "stop-test-psum-of-counter" else (lambda i: i)
        return ddim_while(x, w1, wt, w2, first, stop)
    return f


A8 = (R(2, 8, C8), R(C8, H8, scale=0.4), R(F, H8, scale=0.4), R(H8, C8, scale=0.3))
C.smap("s.ddim_while_counter_channels_tp.tp4", {"tp": 4}, ddim_sm, (P(None, None, "tp"), P("tp"), P(), P(None, "tp")),
       P(None, None, "tp"), ddim_while, A8,
       bugs=[("first-layer-not-psummed", ["missing-all-reduce"]), ("stop-test-psum-of-counter", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 9. tiny DiT training step: v-prediction, min-SNR-5, dp2 x tp4, adamw
D9, H9, E9, M9, C9, N9, B9 = 8, 4, 4, 16, 4, 8, 4
AB9 = np.cos(0.5 * np.pi * (np.arange(1000) / 1000.0 + 0.008) / 1.008) ** 2
AB9 = np.clip(AB9, 1e-4, 0.9999).astype(np.float32)
OPT9 = optax.adamw(1e-2, weight_decay=0.01)


def rms(x):
    return x * lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)


def dit(p, xt, t, tp_sum=lambda y: y, mlp_sum=None):
    mlp_sum = mlp_sum or tp_sum
    h = xt @ p["w_in"] + (temb(t.astype(jnp.float32)) @ p["wt"])[:, None]
    a = rms(h)
    q, k, v = (jnp.einsum("bnd,dhe->bhne", a, p[n]) for n in ("wq", "wk", "wv"))
    s = jax.nn.softmax(jnp.einsum("bhne,bhme->bhnm", q, k) / np.sqrt(E9), -1)
    h = h + tp_sum(jnp.einsum("bhnm,bhme,hed->bnd", s, v, p["wo"]))
    h = h + mlp_sum(jax.nn.gelu(rms(h) @ p["w1"]) @ p["w2"])
    return rms(h) @ p["w_out"]


def vloss(p, x0, t, key, gidx, fwd):
    eps = jax.vmap(lambda b: jax.random.normal(jax.random.fold_in(key, b), x0.shape[1:]))(gidx)
    ab = jnp.asarray(AB9)[t][:, None, None]
    xt = jnp.sqrt(ab) * x0 + jnp.sqrt(1 - ab) * eps
    v = jnp.sqrt(ab) * eps - jnp.sqrt(1 - ab) * x0
    snr = ab / (1 - ab)
    w = jnp.minimum(snr, 5.0) / (snr + 1)
    return jnp.mean(w * jnp.square(fwd(p, xt, t) - v))


def train9(p, s, x0, t, key):
    l, g = jax.value_and_grad(vloss)(p, x0, t, key, jnp.arange(x0.shape[0]), dit)
    u, s = OPT9.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def train9_sm(bug):
    def f(p, s, x0, t, key):
        bl = x0.shape[0]
        gidx = jnp.arange(bl) + (0 if bug == "noise-key-local-index" else idx("dp") * bl)
        mlp_ax = ("dp", "tp") if bug == "mlp-psum-over-dp-tp" else "tp"

        def fwd(p, xt, t):
            return dit(p, xt, t, lambda y: psum(y, "tp"), lambda y: psum(y, mlp_ax))

        def lossf(p):
            l = vloss(p, x0, t, key, gidx, fwd)
            return psum(l, "dp") if bug == "loss-psum-over-dp" else pmean(l, "dp")
        l, g = jax.value_and_grad(lossf)(p)
        u, s = OPT9.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P9 = {"w_in": R(C9, D9, scale=0.5), "wt": R(F, D9, scale=0.3), "wq": R(D9, H9, E9, scale=0.4),
      "wk": R(D9, H9, E9, scale=0.4), "wv": R(D9, H9, E9, scale=0.4), "wo": R(H9, E9, D9, scale=0.4),
      "w1": R(D9, M9, scale=0.4), "w2": R(M9, D9, scale=0.3), "w_out": R(D9, C9, scale=0.4)}
SPEC9 = {"w_in": P(), "wt": P(), "wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"), "wo": P("tp"),
         "w1": P(None, "tp"), "w2": P("tp"), "w_out": P()}
S9 = jax.tree.map(np.asarray, OPT9.init(P9))
SS9 = state_specs(S9, SPEC9)
A9 = (P9, S9, R(B9, N9, C9), I(0, 1000, B9), KEY)
C.smap("s.dit_vpred_minsnr_adamw_step.dp2xtp4", {"dp": 2, "tp": 4}, train9_sm,
       (SPEC9, SS9, P("dp"), P("dp"), P()), (SPEC9, SS9, P()), train9, A9,
       bugs=[("loss-psum-over-dp", ["wrong-scale"]), ("noise-key-local-index", ["wrong-offset"]),
             ("mlp-psum-over-dp-tp", ["wrong-collective-group"])], check_vma=True)


# ---------------------------------------------------------------------------
# 10. CFG again, the two halves' predictions all_gather'd over dp and indexed
def cfg_gather_sm(bug):
    def f(x, cc, w1, wc, wt, w2):
        def body(i, x):
            tc, tn = jnp.asarray(T4)[i]
            ac, sc = vp(tc)
            an, sn = vp(tn)
            e = cfg_mlp(x, cc, tc, w1, wc, wt, w2, lambda y: psum(y, "tp"))
            ea = lax.all_gather(e, "tp" if bug == "gather-over-tp" else "dp")
            ec, eu = (ea[1], ea[0]) if bug == "cond-index-1" else (ea[0], ea[1])
            g = eu + W4 * (ec - eu)
            x0 = (x - sc * g) / ac
            return an * x0 + sn * g
        return lax.fori_loop(0, len(T4), body, x)
    return f


C.smap("s.cfg_halves_allgather_indexed.dp2xtp4", {"dp": 2, "tp": 4}, cfg_gather_sm,
       (P(), P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P(), cfg_ddim, A4,
       bugs=[("cond-index-1", ["wrong-offset"]), ("gather-over-tp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 11. Euler ancestral with per-example keys from jax.random.split, sliced
def euler_split(x, key, w1, wn, w2, pick=lambda ks: ks):
    def noise(ks, shape):
        return jax.vmap(lambda k: jax.random.normal(k, shape[1:]))(pick(jax.random.split(ks, B2)))
    return euler_anc(x, key, w1, wn, w2, noise=noise)


def euler_split_sm(bug):
    def f(x, key, w1, wn, w2):
        bl = x.shape[0]
        off = 0 if bug == "keys-at-offset-0" else idx("dp") * bl
        if bug == "split-per-device":
            return euler_anc(x, key, w1, wn, w2,
                             noise=lambda ks, sh: jax.vmap(lambda k: jax.random.normal(k, sh[1:]))(
                                 jax.random.split(ks, bl)))
        return euler_split(x, key, w1, wn, w2, lambda ks: lax.dynamic_slice_in_dim(ks, off, bl, 0))
    return f


C.smap("s.euler_ancestral_split_keys_sliced.dp4", {"dp": 4}, euler_split_sm, (P("dp"), P(), P(), P(), P()), P("dp"),
       euler_split, A3, bugs=[("keys-at-offset-0", ["wrong-offset"]), ("split-per-device", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 12. cross attention with the text keys / values all_gather'd over sp
def xattn_gather_sm(bug):
    def f(q_in, ctx, lens, wq, wk, wv, wo):
        k = jnp.einsum("bld,dhe->bhle", ctx, wk)
        v = jnp.einsum("bld,dhe->bhle", ctx, wv)
        ax = "dp" if bug == "gather-over-dp" else "sp"
        k, v = (lax.all_gather(a, ax, axis=2, tiled=True) for a in (k, v))
        q = jnp.einsum("bnd,dhe->bhne", q_in, wq)
        s = jnp.einsum("bhne,bhle->bhnl", q, k) / np.sqrt(E7)
        ok = (jnp.arange(k.shape[2])[None] < lens[:, None])[:, None, None]
        if bug == "no-padding-mask":
            ok = True
        p = jax.nn.softmax(jnp.where(ok, s, NEG), -1)
        return jnp.einsum("bhnl,bhle,hed->bnd", p, v, wo)
    return f


C.smap("s.text_cross_attention_kv_allgather.dp2xsp4", {"dp": 2, "sp": 4}, xattn_gather_sm,
       (P("dp"), P("dp", "sp"), P("dp"), P(), P(), P(), P()), P("dp"), xattn, A7,
       bugs=[("gather-over-dp", ["wrong-axis"]), ("no-padding-mask", ["missing-mask"])])

# ---------------------------------------------------------------------------
# 13. VAE decoder conv pair with the channels over tp4: first conv
#     column-parallel (8 of 16 ... 4 channels per rank), GroupNorm with 2
#     groups of 8 channels spanning two ranks each (per-channel sums
#     all_gather'd over tp, group sums taken from the gathered vector),
#     second conv row-parallel with a psum.
def vae_ch(z, w1, b1, g, bg, w2, b2, G=2):
    h = conv(z, w1, b1)
    y = h.reshape(h.shape[:3] + (G, h.shape[3] // G))
    mu = jnp.mean(y, (1, 2, 4), keepdims=True)
    var = jnp.mean(jnp.square(y - mu), (1, 2, 4), keepdims=True)
    h = jax.nn.silu(((y - mu) * lax.rsqrt(var + 1e-5)).reshape(h.shape) * g + bg)
    return conv(h, w2, b2)


def vae_ch_sm(bug):
    def f(z, w1, b1, g, bg, w2, b2):
        h = conv(z, w1, b1)   # (B, H, W, 4) local channels
        n = h.shape[1] * h.shape[2] * 8
        s1 = lax.all_gather(jnp.sum(h, (1, 2)), "tp", axis=1, tiled=True)        # (B, 16)
        s2 = lax.all_gather(jnp.sum(h * h, (1, 2)), "tp", axis=1, tiled=True)
        grp = idx("tp") // 2
        if bug == "group-stats-local-channels":
            s1, s2, n = jnp.sum(h, (1, 2)), jnp.sum(h * h, (1, 2)), n // 2
            m1, m2 = jnp.sum(s1, 1) / n, jnp.sum(s2, 1) / n
        else:
            gs1 = jnp.sum(s1.reshape(-1, 2, 8), 2)
            gs2 = jnp.sum(s2.reshape(-1, 2, 8), 2)
            if bug == "group-of-rank-mod":
                grp = idx("tp") % 2
            m1 = jnp.take(gs1, grp, axis=1) / n
            m2 = jnp.take(gs2, grp, axis=1) / n
        mu, var = m1[:, None, None, None], (m2 - m1 * m1)[:, None, None, None]
        h = jax.nn.silu((h - mu) * lax.rsqrt(var + 1e-5) * g + bg)
        out = conv(h, w2, jnp.zeros_like(b2))
        return psum(out, "tp") + b2
    return f


A13 = (R(2, 6, 6, 3), R(3, 3, 3, 16, scale=0.3), R(16, scale=0.1), 1 + R(16, scale=0.1), R(16, scale=0.1),
       R(3, 3, 16, 3, scale=0.3), R(3, scale=0.1))
C.smap("s.vae_conv_channels_tp_groupnorm_span.tp4", {"tp": 4}, vae_ch_sm,
       (P(), P(None, None, None, "tp"), P("tp"), P("tp"), P("tp"), P(None, None, "tp"), P()), P(), vae_ch, A13,
       bugs=[("group-stats-local-channels", ["missing-collective"]), ("group-of-rank-mod", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# GSPMD pairs
C.gspmd("g.dpmpp2m_sampler.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp"), P(None, "tp"), P("tp")), P("dp"),
        dpmpp2m, A1)
C.gspmd("g.edm_heun_churn.dp4", {"dp": 4}, (P("dp"), P(None, "dp"), P(), P(), P()), P("dp"), heun, A2)
C.gspmd("g.euler_ancestral_keys.dp4", {"dp": 4}, (P("dp"), P(), P(), P(), P()), P("dp"), euler_anc, A3)
C.gspmd("g.vae_decoder_block.sp4", {"sp": NSP}, (P(None, "sp"),) + (P(),) * 6, P(None, "sp"), vae_block, A6)
C.gspmd("g.text_cross_attention.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp"), P("dp", "sp"), P("dp"), P(), P(), P(), P()),
        P("dp"), xattn, A7)
C.gspmd("g.dynamic_threshold_ddim.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"),) * 2, P("dp", "sp"), dyn_ddim, A5)
C.gspmd("g.dit_vpred_minsnr_adamw_step.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC9, SS9, P("dp"), P("dp"), P()),
        (SPEC9, SS9, P()), train9, A9)

C.gspmd("g.cfg_doubled_batch_ddim.dp2xtp4", {"dp": 2, "tp": 4},
        (P(), P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P(), cfg_ddim, A4)
C.gspmd("g.ddim_while_counter_channels.tp4", {"tp": 4}, (P(None, None, "tp"), P("tp"), P(), P(None, "tp")),
        P(None, None, "tp"), ddim_while, A8)
C.gspmd("g.vae_conv_channels_groupnorm.tp4", {"tp": 4},
        (P(), P(None, None, None, "tp"), P("tp"), P("tp"), P("tp"), P(None, None, "tp"), P()), P(), vae_ch, A13)
C.gspmd("g.euler_ancestral_split_keys.dp4", {"dp": 4}, (P("dp"), P(), P(), P(), P()), P("dp"), euler_split, A3)

C.finish()
