"""samples/fresh68: a 68th batch of programs as a user writes them, on the
theme of neural fields and differentiable rendering under sharding in current
JAX (NeRF-style volume rendering with the rays and the samples along each ray
over devices, transmittance by cumulative sums of optical depth and by
cumulative products across devices, alpha compositing, hierarchical
importance resampling by an inverse CDF, Fourier / integrated positional
encodings with the frequency bands over a tensor axis, multi-resolution hash
grids with the table sharded by rows or by levels, SDF networks with eikonal
penalties through jax.grad w.r.t. the inputs, Gaussian-splatting-like
per-primitive contributions reduced over devices, and full training steps
with a photometric loss and optax Adam under dp and dp x tp), none of them an
idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. volume rendering with rays over dp2 and the samples of each ray over
    sp4: optical depth tau = softplus(sigma) * delta, transmittance
    exp(-exclusive cumsum tau) from a local cumsum plus the sum of the
    all_gather'd per-device totals of earlier devices; rgb (white
    background), expected depth psum'd over sp; per-sample weights returned
    sharded. Bugs: inclusive device prefix (own total counted), the
    per-device partial rgb / depth / opacity not psum'd, prefix taken from
    the later devices.
 2. alpha compositing with the samples over sp8 (one ray batch): the
    transmittance as a cumulative product of (1 - alpha); the product of
    earlier devices' blocks by a Hillis-Steele exclusive scan written with
    ppermute (a shift by one, then steps 1, 2, 4 with ones where nothing is
    received). Bugs: ppermutes in the wrong direction, the last scan step
    left out, no initial shift (an inclusive scan).
 3. NeRF positional encoding with 8 frequency bands over tp4 (2 per
    device), points over dp2: sin / cos of 2^k pi x, the first layer's rows
    for the device's bands, partial pre-activations psum'd over tp, the
    identity term x @ Wx and the bias added after the psum, a replicated
    output layer. Bugs: local band index (no tp offset), the bias added
    inside the psum, psum over dp instead of tp.
 4. mip-NeRF integrated positional encoding (mean and diagonal variance,
    sin(2^k mu) exp(-4^k var / 2)) with the bands over tp4, points over dp2,
    the features all_gather'd over tp back to the full band-major layout.
    Bugs: band offset from the dp index, an untiled all_gather on the wrong
    axis reshaped (bands interleaved).
 5. Instant-NGP 2-D multi-resolution hash grid (4 levels, dense indexing on
    the coarse levels, xor-prime hashing in uint32 on the fine ones,
    bilinear interpolation) with every level's table sharded by rows over
    tp4, points over dp2: global row minus the device's first row, masked
    gather, psum over tp; a replicated 2-layer MLP after. Bugs: row offset
    left out, the index clipped instead of masked, pmean instead of psum.
 6. hash-grid field training step with the levels over tp4 (one level per
    device; the first layer's rows of that level), rays' points over dp2,
    check_vma=True: level resolution from axis_index, partial
    pre-activations psum'd, MSE photometric loss pmean'd over dp, jax.grad,
    optax.adam shard-wise. Bugs: every device at level 0's resolution, the
    bias added inside the psum, loss psum'd over dp (the loss doubles; Adam's
    update barely changes).
 7. SDF MLP (softplus(beta=10)) with an eikonal penalty, points over dp8:
    the surface term's and the eikonal term's parameter gradients taken
    separately (jax.grad of a per-point jax.grad w.r.t. the inputs) and
    pmean'd. Bugs: the eikonal gradient psum'd, the surface gradient not
    reduced.
 8. Megatron SDF (hidden over tp4, points over dp2): each device's partial
    SDF and its input gradient by vmap(jax.grad) of the partial, both
    psum'd; normals, eikonal loss pmean'd over dp. Bugs: norms of the
    partial gradients psum'd, the output bias added inside the psum, the
    eikonal loss not pmean'd over dp.
 9. 2-D Gaussian splatting with the depth-sorted primitives over ep8 (4
    each), pixels replicated: alpha = min(0.99, o exp(-q/2)), local
    exclusive cumprod, the transmittance of earlier devices from the
    all_gather'd per-device products, the composite psum'd. Bugs: inclusive
    device prefix, later devices in front, composite not psum'd.
10. order-independent weighted blending of splats, pixels over dp2,
    primitives over ep4: numerator and denominator psum'd, then divided.
    Bugs: only the numerator psum'd, pmean of the per-device ratios.
11. hierarchical importance resampling, rays over dp2, coarse samples and
    fine samples over sp4: pdf normalised by a psum, cdf from a local
    cumsum plus an all_gather'd device prefix, all_gather'd cdf, stratified
    u from global fine-sample indices and a jitter input, inverse CDF by
    counting and linear interpolation in the bins. Bugs: normalised by the
    local sum, cdf without the device offset, u from local indices.
12. full NeRF training step, rays over dp8: PE, 2-layer MLP, volume
    rendering, MSE, value_and_grad on the local rays, loss and gradients
    pmean'd, optax.adam. Bugs: gradients not averaged, loss not averaged.
13. NeRF training step under dp2 x tp4 with check_vma=True: PE bands over
    tp (row-parallel first layer), column-parallel second layer and
    row-parallel density / colour heads, loss pmean'd over dp, jax.grad,
    optax.adam. Bugs: local band index, softplus on the partial density
    before the psum, loss psum'd over dp.
GSPMD pairs (jax.jit with in/out shardings): 14. volume rendering of 1.
with rays over dp and samples over sp; 15. the hash-grid encoding + MLP of
5. with the table's rows over tp; 16. the SDF eikonal value_and_grad of 7.
with points over dp8; 17. the NeRF training step of 12. with the first
layer over tp and the rays over dp (dp2 x tp4); 18. the splat composite of 9.
with the primitives over 8 devices; 19. importance resampling with
jnp.searchsorted, rays over dp8.
Numerics: every correct pair agrees with its baseline at rounding level (f32,
at most 1.2e-6 apart); every bug variant differs clearly (the smallest, 8e-4,
is 8.'s eikonal loss not pmean'd over dp; the others 0.02 and more). The
correct pair 5. is correct only on its domain (points in the unit square,
as drawn): outside it the grid rows leave [0, 64), where the baseline's
gather clamps and the sharded lookup masks, so random inputs from all of R
make the two differ (checked: 0.46 apart for standard-normal points); the
GSPMD pair 15. clamps the points into the square first. 6.'s third bug
(loss psum'd over dp) doubles the gradients, which Adam's first update
almost ignores; the returned loss shows it.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh68.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh68.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh68.py"
C = Corpus("samples/fresh68", SCRIPT, "samples/gen/run_fresh68.sh", sys.argv[1:])
rng, R, I = seeded(6868)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index


def U(*s, lo=0.0, hi=1.0):
    return rng.uniform(lo, hi, s).astype(np.float32)


# ---------------------------------------------------------------------------
# 1. volume rendering, rays over dp, samples over sp (exclusive cumsum of
#    optical depth with a device prefix from all_gather'd totals).
NR, NS = 16, 16


def render(raw_sigma, raw_rgb, delta, tmid):
    tau = jax.nn.softplus(raw_sigma) * delta
    alpha = 1.0 - jnp.exp(-tau)
    T = jnp.exp(-(jnp.cumsum(tau, -1) - tau))
    w = T * alpha
    acc = w.sum(-1)
    rgb = jnp.einsum("rs,rsc->rc", w, jax.nn.sigmoid(raw_rgb)) + (1.0 - acc)[:, None]
    depth = (w * tmid).sum(-1)
    return rgb, depth, w


def render_sp(bug):
    def f(raw_sigma, raw_rgb, delta, tmid):
        n, me = 4, idx("sp")
        tau = jax.nn.softplus(raw_sigma) * delta
        cum = jnp.cumsum(tau, -1)
        tot = lax.all_gather(cum[:, -1], "sp")  # (n, r)
        if bug == "inclusive-device-prefix":
            earlier = jnp.arange(n) <= me
        elif bug == "prefix-from-later-devices":
            earlier = jnp.arange(n) > me
        else:
            earlier = jnp.arange(n) < me
        off = jnp.sum(jnp.where(earlier[:, None], tot, 0.0), 0)
        w = jnp.exp(-(off[:, None] + cum - tau)) * (1.0 - jnp.exp(-tau))
        part = (jnp.einsum("rs,rsc->rc", w, jax.nn.sigmoid(raw_rgb)), (w * tmid).sum(-1), w.sum(-1))
        if bug != "partials-not-summed":
            part = psum(part, "sp")
        c, d, acc = part
        return c + (1.0 - acc)[:, None], d, w
    return f


TM1 = np.cumsum(U(NR, NS, lo=0.05, hi=0.3), -1).astype(np.float32)
DL1 = np.diff(np.concatenate([np.zeros((NR, 1), np.float32), TM1], -1), axis=-1).astype(np.float32)
ARGS1 = (R(NR, NS), R(NR, NS, 3), DL1, TM1)
C.smap("s.volrender_cumsum_device_prefix.dp2xsp4", {"dp": 2, "sp": 4}, render_sp,
       (P("dp", "sp"),) * 4, (P("dp"), P("dp"), P("dp", "sp")), render, ARGS1,
       bugs=[("inclusive-device-prefix", ["wrong-offset"]), ("partials-not-summed", ["missing-all-reduce"]),
             ("prefix-from-later-devices", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 2. alpha compositing by cumulative products, samples over sp8, the
#    product of earlier blocks by a Hillis-Steele exclusive scan of
#    ppermutes.


def composite(alpha, rgb):
    keep = 1.0 - alpha
    T = jnp.cumprod(jnp.concatenate([jnp.ones_like(keep[:, :1]), keep[:, :-1]], 1), 1)
    w = T * alpha
    return jnp.sum(w[..., None] * rgb, 1), w


def composite_sp(bug):
    def f(alpha, rgb):
        n, me = 8, idx("sp")
        keep = 1.0 - alpha
        T = jnp.cumprod(jnp.concatenate([jnp.ones_like(keep[:, :1]), keep[:, :-1]], 1), 1)
        blk = jnp.prod(keep, 1)  # (r,)

        def shift(x, s):
            if bug == "wrong-direction":
                got = lax.ppermute(x, "sp", [(i, i - s) for i in range(s, n)])
                return jnp.where(me < n - s, got, 1.0)
            got = lax.ppermute(x, "sp", [(i, i + s) for i in range(n - s)])
            return jnp.where(me >= s, got, 1.0)
        y = blk if bug == "no-initial-shift" else shift(blk, 1)
        for s in ((1, 2) if bug == "last-step-missing" else (1, 2, 4)):
            y = y * shift(y, s)
        w = T * y[:, None] * alpha
        return psum(jnp.sum(w[..., None] * rgb, 1), "sp"), w
    return f


C.smap("s.alpha_composite_cumprod_hillis_steele.sp8", {"sp": 8}, composite_sp, (P(None, "sp"), P(None, "sp")),
       (P(), P(None, "sp")), composite, (U(6, 32, lo=0.02, hi=0.2), U(6, 32, 3)),
       bugs=[("wrong-direction", ["wrong-permutation"]), ("last-step-missing", ["missing-collective"]),
             ("no-initial-shift", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. positional encoding with the frequency bands over tp (2 of 8 per
#    device), the first layer's band rows local, partial sums psum'd.
L3, H3 = 8, 16


def pe(x, k):
    ang = x[:, None, :] * (2.0 ** k * np.pi)[None, :, None]
    return jnp.stack([jnp.sin(ang), jnp.cos(ang)], 2)  # (n, bands, 2, 3)


def pe_mlp(x, w1, wx, b1, w2):
    h = jax.nn.relu(jnp.einsum("nlsc,lsch->nh", pe(x, jnp.arange(L3, dtype=jnp.float32)), w1) + x @ wx + b1)
    return h @ w2


def pe_mlp_tp(bug):
    def f(x, w1, wx, b1, w2):
        nl = w1.shape[0]
        k = jnp.arange(nl) if bug == "band-index-local" else idx("tp") * nl + jnp.arange(nl)
        pre = jnp.einsum("nlsc,lsch->nh", pe(x, k.astype(jnp.float32)), w1)
        if bug == "bias-inside-psum":
            pre = psum(pre + b1, "tp")
        else:
            pre = psum(pre, "dp" if bug == "psum-over-dp" else "tp") + b1
        return jax.nn.relu(pre + x @ wx) @ w2
    return f


C.smap("s.pe_bands_rowparallel_first_layer.dp2xtp4", {"dp": 2, "tp": 4}, pe_mlp_tp,
       (P("dp"), P("tp"), P(), P(), P()), P("dp"), pe_mlp,
       (U(32, 3, lo=-1, hi=1), R(L3, 2, 3, H3, scale=0.3), R(3, H3, scale=0.3), R(H3, scale=0.1), R(H3, 4, scale=0.3)),
       bugs=[("band-index-local", ["wrong-offset"]), ("bias-inside-psum", ["wrong-scale"]),
             ("psum-over-dp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 4. mip-NeRF integrated positional encoding, bands over tp, features
#    all_gather'd back to the band-major layout.


def ipe(mu, var, k):
    s = 2.0 ** k
    ang = mu[:, None, :] * s[None, :, None]
    dmp = jnp.exp(-0.5 * var[:, None, :] * jnp.square(s)[None, :, None])
    return jnp.stack([jnp.sin(ang) * dmp, jnp.cos(ang) * dmp], 2)


def ipe_ref(mu, var):
    return ipe(mu, var, jnp.arange(8.0)).reshape(mu.shape[0], -1)


def ipe_tp(bug):
    def f(mu, var):
        axis = "dp" if bug == "band-offset-from-dp" else "tp"
        k = (idx(axis) * 2 + jnp.arange(2)).astype(jnp.float32)
        e = ipe(mu, var, k)  # (n, 2, 2, 3)
        if bug == "untiled-gather-wrong-axis":
            g = lax.all_gather(e, "tp", axis=2)  # (n, 2, 4, 2, 3)
        else:
            g = lax.all_gather(e, "tp", axis=1, tiled=True)  # (n, 8, 2, 3)
        return g.reshape(mu.shape[0], -1)
    return f


C.smap("s.mip_ipe_bands_allgather.dp2xtp4", {"dp": 2, "tp": 4}, ipe_tp, (P("dp"), P("dp")), P("dp"), ipe_ref,
       (R(16, 3), U(16, 3, lo=0.0, hi=0.02)),
       bugs=[("band-offset-from-dp", ["wrong-collective-group"]), ("untiled-gather-wrong-axis", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 5. Instant-NGP 2-D hash grid, every level's table sharded by rows over tp.
L5, T5, F5 = 4, 64, 2
RES5 = [int(np.floor(4 * 1.5 ** l)) for l in range(L5)]  # 4, 6, 9, 13
PRIME = np.uint32(2654435761)


def grid_index(ix, iy, res):
    if (res + 1) ** 2 <= T5:
        return ix + iy * (res + 1)
    h = ix.astype(jnp.uint32) ^ (iy.astype(jnp.uint32) * PRIME)
    return (h % np.uint32(T5)).astype(jnp.int32)


def corners(x, res):
    """The 4 corners' (ix, iy) and bilinear weights of points x (n, 2) in [0, 1)."""
    p = x * res
    p0 = jnp.floor(p)
    fr = p - p0
    i0 = p0.astype(jnp.int32)
    out = []
    for dx in (0, 1):
        for dy in (0, 1):
            wgt = (fr[:, 0] if dx else 1 - fr[:, 0]) * (fr[:, 1] if dy else 1 - fr[:, 1])
            out.append((i0[:, 0] + dx, i0[:, 1] + dy, wgt))
    return out


def hash_encode(x, table, lookup=lambda l, g: None):
    feats = []
    for l, res in enumerate(RES5):
        acc = 0.0
        for ix, iy, wgt in corners(x, res):
            g = grid_index(ix, iy, res)
            acc = acc + wgt[:, None] * lookup(l, g)
        feats.append(acc)
    return jnp.concatenate(feats, -1)


def hash_mlp(x, table, w1, w2):
    f = hash_encode(x, table, lambda l, g: table[l][g])
    return jax.nn.relu(f @ w1) @ w2


def hash_mlp_tp(bug):
    def f(x, table, w1, w2):
        rows = table.shape[1]
        first = 0 if bug == "no-row-offset" else idx("tp") * rows

        def lookup(l, g):
            loc = g - first
            if bug == "clip-not-mask":
                return table[l][jnp.clip(loc, 0, rows - 1)]
            ok = (loc >= 0) & (loc < rows)
            return jnp.where(ok[:, None], table[l][jnp.clip(loc, 0, rows - 1)], 0.0)
        feat = hash_encode(x, table, lookup)
        feat = pmean(feat, "tp") if bug == "pmean-not-psum" else psum(feat, "tp")
        return jax.nn.relu(feat @ w1) @ w2
    return f


ARGS5 = (U(16, 2, hi=0.999), R(L5, T5, F5, scale=0.5), R(L5 * F5, 16, scale=0.4), R(16, 3, scale=0.4))
C.smap("s.hashgrid_table_rows_tp.dp2xtp4", {"dp": 2, "tp": 4}, hash_mlp_tp,
       (P("dp"), P(None, "tp"), P(), P()), P("dp"), hash_mlp, ARGS5,
       bugs=[("no-row-offset", ["wrong-offset"]), ("clip-not-mask", ["wrong-offset"]),
             ("pmean-not-psum", ["wrong-collective-op"])],
       note="correct for points in the unit square (the grid's domain, as the inputs are drawn); points outside it "
            "give grid rows outside [0, 64), where the baseline's gather clamps and the sharded lookup masks to 0, "
            "so the two differ there (the GSPMD pair g.hashgrid_table_rows_tp clamps the points first)")

# ---------------------------------------------------------------------------
# 6. hash-grid field training step, levels over tp (one per device), the
#    points over dp, check_vma=True; photometric MSE, jax.grad, optax.adam.
OPT6 = optax.adam(1e-2)


def field6(p, x, level_res, tp_sum=lambda y: y, bias_in=False):
    pre = 0.0
    for l, res in enumerate(level_res):
        f = 0.0
        for ix, iy, wgt in corners(x, res):
            f = f + wgt[:, None] * p["table"][l][(ix + iy * (res + 1)) % T5]
        pre = pre + f @ p["w1"][l]
    pre = tp_sum(pre + p["b1"]) if bias_in else tp_sum(pre) + p["b1"]
    return jax.nn.sigmoid(jax.nn.relu(pre) @ p["w2"])


def step6(p, s, x, target):
    def loss(p):
        return jnp.mean(jnp.square(field6(p, x, RES5[:L5]) - target))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT6.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step6_sm(bug):
    def f(p, s, x, target):
        me = idx("tp")
        lv = jnp.asarray(0 if bug == "level-zero-resolution" else me, jnp.float32)
        res = jnp.floor(4 * 1.5 ** lv)

        def loss(p):
            r = res.astype(jnp.int32)
            pre = 0.0
            xx = x * res
            p0 = jnp.floor(xx)
            fr = xx - p0
            i0 = p0.astype(jnp.int32)
            for dx in (0, 1):
                for dy in (0, 1):
                    wgt = (fr[:, 0] if dx else 1 - fr[:, 0]) * (fr[:, 1] if dy else 1 - fr[:, 1])
                    row = ((i0[:, 0] + dx) + (i0[:, 1] + dy) * (r + 1)) % T5
                    pre = pre + wgt[:, None] * p["table"][0][row]
            pre = pre @ p["w1"][0]
            if bug == "bias-inside-psum":
                pre = psum(pre + p["b1"], "tp")
            else:
                pre = psum(pre, "tp") + p["b1"]
            out = jax.nn.sigmoid(jax.nn.relu(pre) @ p["w2"])
            l = jnp.mean(jnp.square(out - target))
            return psum(l, "dp") if bug == "loss-psum-over-dp" else pmean(l, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT6.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P6 = {"table": R(L5, T5, F5, scale=0.5), "w1": R(L5, F5, 16, scale=0.5), "b1": R(16, scale=0.1),
      "w2": R(16, 3, scale=0.4)}
S6 = OPT6.init(P6)
SP6 = {"table": P("tp"), "w1": P("tp"), "b1": P(), "w2": P()}
SS6 = state_specs(S6, SP6)
C.smap("s.hashgrid_levels_tp_train_adam.dp2xtp4", {"dp": 2, "tp": 4}, step6_sm, (SP6, SS6, P("dp"), P("dp")),
       (SP6, SS6, P()), step6, (P6, S6, U(16, 2, hi=0.999), U(16, 3)),
       bugs=[("level-zero-resolution", ["wrong-offset"]), ("bias-inside-psum", ["wrong-scale"]),
             ("loss-psum-over-dp", ["wrong-collective-op"])], check_vma=True)

# ---------------------------------------------------------------------------
# 7. SDF MLP with an eikonal penalty, points over dp8; the two terms'
#    parameter gradients taken separately and pmean'd.


def sdf(p, x):
    h = x
    for w, b in p["hidden"]:
        h = jax.nn.softplus(10.0 * (h @ w + b)) / 10.0
    return (h @ p["out"])[..., 0] + p["bias"]


def eik_terms(p, surf, free):
    ls = jnp.mean(jnp.abs(sdf(p, surf)))
    gx = jax.vmap(jax.grad(lambda q: sdf(p, q[None])[0]))(free)
    le = jnp.mean(jnp.square(jnp.linalg.norm(gx, axis=-1) - 1.0))
    return ls, le


def sdf_loss_grads(p, surf, free):
    def loss(p):
        ls, le = eik_terms(p, surf, free)
        return ls + 0.1 * le
    return jax.value_and_grad(loss)(p)


def sdf_dp(bug):
    def f(p, surf, free):
        ls, gs = jax.value_and_grad(lambda p: eik_terms(p, surf, free)[0])(p)
        le, ge = jax.value_and_grad(lambda p: eik_terms(p, surf, free)[1])(p)
        if bug != "surface-grad-unreduced":
            gs = pmean(gs, "dp")
        ge = psum(ge, "dp") if bug == "eikonal-grad-psum" else pmean(ge, "dp")
        g = jax.tree.map(lambda a, b: a + 0.1 * b, gs, ge)
        return pmean(ls + 0.1 * le, "dp"), g
    return f


P7 = {"hidden": [(R(3, 16, scale=0.6), R(16, scale=0.1)), (R(16, 16, scale=0.3), R(16, scale=0.1))],
      "out": R(16, 1, scale=0.3), "bias": np.float32(-0.2)}
SP7 = jax.tree.map(lambda _: P(), P7)
C.smap("s.sdf_eikonal_split_grads_pmean.dp8", {"dp": 8}, sdf_dp, (SP7, P("dp"), P("dp")), (P(), SP7),
       sdf_loss_grads, (P7, R(32, 3, scale=0.6), U(32, 3, lo=-1, hi=1)),
       bugs=[("eikonal-grad-psum", ["wrong-collective-op"]), ("surface-grad-unreduced", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 8. Megatron SDF, hidden over tp, points over dp: partial SDF and its input
#    gradient per device, both psum'd; eikonal loss pmean'd over dp.


def sdf8(x, w1, b1, w2, b2):
    return (jax.nn.softplus(10.0 * (x @ w1 + b1)) / 10.0) @ w2 + b2


def sdf8_ref(x, w1, b1, w2, b2):
    s = sdf8(x, w1, b1, w2, b2)
    n = jax.vmap(jax.grad(lambda q: sdf8(q, w1, b1, w2, b2)))(x)
    return s, n, jnp.mean(jnp.square(jnp.linalg.norm(n, axis=-1) - 1.0))


def sdf8_tp(bug):
    def f(x, w1, b1, w2, b2):
        bias = b2 if bug == "bias-inside-psum" else 0.0
        part = lambda q: sdf8(q, w1, b1, w2, bias)  # noqa: E731
        s = part(x)
        n = jax.vmap(jax.grad(part))(x)
        if bug == "norm-of-partial-grads":
            nrm = psum(jnp.linalg.norm(n, axis=-1), "tp")
        n = psum(n, "tp")
        if bug != "norm-of-partial-grads":
            nrm = jnp.linalg.norm(n, axis=-1)
        s = psum(s, "tp") + (0.0 if bug == "bias-inside-psum" else b2)
        e = jnp.mean(jnp.square(nrm - 1.0))
        return s, n, (e if bug == "eik-loss-not-pmean" else pmean(e, "dp"))
    return f


C.smap("s.sdf_megatron_input_grad_psum.dp2xtp4", {"dp": 2, "tp": 4}, sdf8_tp,
       (P("dp"), P(None, "tp"), P("tp"), P("tp"), P()), (P("dp"), P("dp"), P()), sdf8_ref,
       (U(16, 3, lo=-1, hi=1), R(3, 32, scale=0.8), R(32, scale=0.2), R(32, scale=0.3), np.float32(0.1)),
       bugs=[("norm-of-partial-grads", ["wrong-reduction"]), ("bias-inside-psum", ["wrong-scale"]),
             ("eik-loss-not-pmean", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 9. 2-D Gaussian splatting, depth-sorted primitives over ep8, pixels
#    replicated; transmittance of earlier devices from all_gather'd
#    per-device products of (1 - alpha).
G9 = 32
PIX9 = np.stack(np.meshgrid(np.arange(6.0), np.arange(6.0), indexing="ij"), -1).reshape(-1, 2).astype(np.float32)


def splat_alpha(mean, conic, opac, pix):
    d = pix[None, :, :] - mean[:, None, :]  # (g, p, 2)
    a, b, c = jnp.exp(conic[:, 0]), conic[:, 1], jnp.exp(conic[:, 2])
    b = jnp.tanh(b) * jnp.sqrt(a * c) * 0.9
    q = a[:, None] * d[..., 0] ** 2 + 2 * b[:, None] * d[..., 0] * d[..., 1] + c[:, None] * d[..., 1] ** 2
    return jnp.minimum(0.99, jax.nn.sigmoid(opac)[:, None] * jnp.exp(-0.5 * q))


def splat(mean, conic, opac, col, pix):
    al = splat_alpha(mean, conic, opac, pix)
    T = jnp.cumprod(jnp.concatenate([jnp.ones_like(al[:1]), 1.0 - al[:-1]], 0), 0)
    return jnp.einsum("gp,gc->pc", T * al, col)


def splat_ep(bug):
    def f(mean, conic, opac, col, pix):
        n, me = 8, idx("ep")
        al = splat_alpha(mean, conic, opac, pix)
        T = jnp.cumprod(jnp.concatenate([jnp.ones_like(al[:1]), 1.0 - al[:-1]], 0), 0)
        prods = lax.all_gather(jnp.prod(1.0 - al, 0), "ep")  # (n, p)
        sel = {"inclusive-device-prefix": jnp.arange(n) <= me,
               "later-devices-in-front": jnp.arange(n) > me}.get(bug, jnp.arange(n) < me)
        before = jnp.prod(jnp.where(sel[:, None], prods, 1.0), 0)
        out = jnp.einsum("gp,gc->pc", T * al * before[None], col)
        return out if bug == "composite-not-psummed" else psum(out, "ep")
    return f


ARGS9 = (U(G9, 2, hi=5.0), R(G9, 3, scale=0.5) - np.array([0.5, 0, 0.5], np.float32), R(G9) + 1.0, U(G9, 3), PIX9)
C.smap("s.splat_depth_sorted_device_transmittance.ep8", {"ep": 8}, splat_ep, (P("ep"),) * 4 + (P(),), P(),
       splat, ARGS9,
       bugs=[("inclusive-device-prefix", ["wrong-offset"]), ("later-devices-in-front", ["wrong-offset"]),
             ("composite-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 10. order-independent weighted blending, pixels over dp, primitives over ep.


def blend(mean, conic, opac, col, z, pix):
    al = splat_alpha(mean, conic, opac, pix)
    w = al * jnp.exp(-z)[:, None]
    num = jnp.einsum("gp,gc->pc", w, col)
    return num / (w.sum(0)[:, None] + 1e-3)


def blend_ep(bug):
    def f(mean, conic, opac, col, z, pix):
        al = splat_alpha(mean, conic, opac, pix)
        w = al * jnp.exp(-z)[:, None]
        num, den = jnp.einsum("gp,gc->pc", w, col), w.sum(0)[:, None]
        if bug == "ratio-then-pmean":
            return pmean(num / (den + 1e-3), "ep")
        num = psum(num, "ep")
        if bug != "denominator-local":
            den = psum(den, "ep")
        return num / (den + 1e-3)
    return f


C.smap("s.splat_weighted_blend_num_den_psum.dp2xep4", {"dp": 2, "ep": 4}, blend_ep,
       (P("ep"),) * 5 + (P("dp"),), P("dp"), blend, ARGS9[:4] + (U(G9, lo=0.0, hi=2.0), PIX9),
       bugs=[("denominator-local", ["missing-all-reduce"]), ("ratio-then-pmean", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 11. hierarchical importance resampling, rays over dp, coarse weights and
#     fine samples over sp: pdf normalised by a psum, the cdf from a local
#     cumsum plus a device prefix, all_gather'd; stratified u from global
#     fine-sample indices and a jitter; inverse CDF by counting.
NC11, NF11 = 16, 16


def inv_cdf(edges, cdf, u):
    """edges, cdf (r, s + 1); u (r, f): the fine samples."""
    ind = jnp.sum(cdf[:, None, :] <= u[:, :, None], -1)
    below = jnp.clip(ind - 1, 0, cdf.shape[1] - 1)
    above = jnp.clip(ind, 0, cdf.shape[1] - 1)
    c0, c1 = jnp.take_along_axis(cdf, below, 1), jnp.take_along_axis(cdf, above, 1)
    e0, e1 = jnp.take_along_axis(edges, below, 1), jnp.take_along_axis(edges, above, 1)
    den = jnp.where(c1 - c0 < 1e-5, 1.0, c1 - c0)
    return e0 + (u - c0) / den * (e1 - e0)


def resample(edges, w, jitter):
    pdf = (w + 1e-2) / jnp.sum(w + 1e-2, -1, keepdims=True)
    cdf = jnp.concatenate([jnp.zeros_like(pdf[:, :1]), jnp.cumsum(pdf, -1)], -1)
    u = (jnp.arange(NF11) + jitter) / NF11
    return inv_cdf(edges, cdf, u)


def resample_sp(bug):
    def f(edges, w, jitter):
        n, me, nf = 4, idx("sp"), jitter.shape[1]
        tot = jnp.sum(w + 1e-2, -1, keepdims=True)
        pdf = (w + 1e-2) / (tot if bug == "normalised-by-local-sum" else psum(tot, "sp"))
        cum = jnp.cumsum(pdf, -1)
        if bug != "cdf-without-device-offset":
            sums = lax.all_gather(cum[:, -1], "sp")
            cum = cum + jnp.sum(jnp.where((jnp.arange(n) < me)[:, None], sums, 0.0), 0)[:, None]
        cdf = jnp.concatenate([jnp.zeros_like(pdf[:, :1]), lax.all_gather(cum, "sp", axis=1, tiled=True)], -1)
        j = jnp.arange(nf) if bug == "u-local-index" else me * nf + jnp.arange(nf)
        return inv_cdf(edges, cdf, (j + jitter) / NF11)
    return f


ED11 = np.cumsum(U(8, NC11 + 1, lo=0.05, hi=0.2), -1).astype(np.float32) + 2.0
C.smap("s.importance_resample_inverse_cdf.dp2xsp4", {"dp": 2, "sp": 4}, resample_sp,
       (P("dp"), P("dp", "sp"), P("dp", "sp")), P("dp", "sp"), resample,
       (ED11, np.abs(R(8, NC11)), U(8, NF11)),
       bugs=[("normalised-by-local-sum", ["missing-all-reduce"]), ("cdf-without-device-offset", ["wrong-offset"]),
             ("u-local-index", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 12. a full NeRF training step, rays over dp8: positional encoding, a
#     2-layer MLP, volume rendering along the rays, photometric MSE,
#     value_and_grad on the local rays, loss and gradients pmean'd, Adam.
L12, S12, H12 = 4, 8, 32
OPT12 = optax.adam(5e-3)
TS12 = np.linspace(2.0, 6.0, S12).astype(np.float32)


def nerf_fwd(p, o, d, tp_bands=None, tp_sum=lambda y: y, dens_act_before_sum=False, layer2=None):
    pts = o[:, None, :] + d[:, None, :] * TS12[None, :, None]  # (r, s, 3)
    k = jnp.arange(L12, dtype=jnp.float32) if tp_bands is None else tp_bands
    ang = pts[..., None, :] * (2.0 ** k * np.pi)[:, None]  # (r, s, l, 3)
    enc = jnp.concatenate([jnp.sin(ang), jnp.cos(ang)], -1).reshape(pts.shape[:2] + (-1,))
    h = jax.nn.relu(tp_sum(jnp.einsum("rsf,fh->rsh", enc, p["w1"])) + pts @ p["wx"] + p["b1"])
    h2 = jax.nn.relu(h @ p["w2"] + p["b2"])
    sig = h2 @ p["wsig"]
    sigma = tp_sum(jax.nn.softplus(sig[..., 0])) if dens_act_before_sum else jax.nn.softplus(tp_sum(sig)[..., 0])
    rgb = jax.nn.sigmoid(tp_sum(h2 @ p["wrgb"]))
    delta = np.diff(np.append(TS12, TS12[-1] + 1e10))[None, :] * jnp.linalg.norm(d, axis=-1, keepdims=True)
    tau = sigma * delta
    w = jnp.exp(-(jnp.cumsum(tau, -1) - tau)) * (1.0 - jnp.exp(-tau))
    return jnp.einsum("rs,rsc->rc", w, rgb)


def nerf_step(p, s, o, d, target):
    l, g = jax.value_and_grad(lambda p: jnp.mean(jnp.square(nerf_fwd(p, o, d) - target)))(p)
    u, s = OPT12.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def nerf_step_dp(bug):
    def f(p, s, o, d, target):
        l, g = jax.value_and_grad(lambda p: jnp.mean(jnp.square(nerf_fwd(p, o, d) - target)))(p)
        if bug != "grads-not-averaged":
            g = pmean(g, "dp")
        if bug != "loss-not-averaged":
            l = pmean(l, "dp")
        u, s = OPT12.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P12 = {"w1": R(2 * 3 * L12, H12, scale=0.3), "wx": R(3, H12, scale=0.3), "b1": R(H12, scale=0.1),
       "w2": R(H12, H12, scale=0.2), "b2": R(H12, scale=0.1), "wsig": R(H12, 1, scale=0.3),
       "wrgb": R(H12, 3, scale=0.3)}
S12s = OPT12.init(P12)
SP12 = jax.tree.map(lambda _: P(), P12)
SS12 = state_specs(S12s, SP12)
D12 = R(32, 3)
D12 = (D12 / np.linalg.norm(D12, axis=-1, keepdims=True)).astype(np.float32)
RAYS12 = (R(32, 3, scale=0.2), D12 * 0.25, U(32, 3))
C.smap("s.nerf_train_step_adam.dp8", {"dp": 8}, nerf_step_dp, (SP12, SS12, P("dp"), P("dp"), P("dp")),
       (SP12, SS12, P()), nerf_step, (P12, S12s) + RAYS12,
       bugs=[("grads-not-averaged", ["missing-all-reduce"]), ("loss-not-averaged", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 13. the NeRF training step under dp2 x tp4 (check_vma=True): PE bands over
#     tp with the first layer's band rows local (row-parallel), the second
#     layer column-parallel, density and colour heads row-parallel.


def nerf_step_tp(bug):
    def f(p, s, o, d, target):
        me = idx("tp")

        def loss(p):
            nl = 1  # one band per device
            k = jnp.arange(nl) if bug == "band-index-local" else me * nl + jnp.arange(nl)
            out = nerf_fwd(p, o, d, tp_bands=k.astype(jnp.float32), tp_sum=lambda y: psum(y, "tp"),
                           dens_act_before_sum=bug == "softplus-before-psum")
            l = jnp.mean(jnp.square(out - target))
            return psum(l, "dp") if bug == "loss-psum-over-dp" else pmean(l, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT12.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


# the first layer's rows are ordered (band, sin/cos, coord) in the tp pairs:
# one band's 6 rows per device; the baseline's encoding of nerf_fwd orders
# them (band, [sin xyz, cos xyz]) too, so P("tp") on w1's rows is right.
SP13 = {"w1": P("tp"), "wx": P(), "b1": P(), "w2": P(None, "tp"), "b2": P("tp"), "wsig": P("tp"), "wrgb": P("tp")}
SS13 = state_specs(S12s, SP13)
C.smap("s.nerf_train_step_pe_megatron_adam.dp2xtp4", {"dp": 2, "tp": 4}, nerf_step_tp,
       (SP13, SS13, P("dp"), P("dp"), P("dp")), (SP13, SS13, P()), nerf_step, (P12, S12s) + RAYS12,
       bugs=[("band-index-local", ["wrong-offset"]), ("softplus-before-psum", ["wrong-reduction"]),
             ("loss-psum-over-dp", ["wrong-collective-op"])], check_vma=True)

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 14. volume rendering of 1. with rays over dp and samples over sp.
C.gspmd("g.volrender_rays_dp_samples_sp.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"),) * 4,
        (P("dp"), P("dp"), P("dp", "sp")), render, ARGS1)


# 15. the hash-grid encoding + MLP of 5., the table's rows over tp, points
#     over dp (the points clamped into the unit square first).
def hash_mlp_clamped(x, table, w1, w2):
    return hash_mlp(jnp.clip(x, 0.0, 0.999), table, w1, w2)


C.gspmd("g.hashgrid_table_rows_tp.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp"), P(), P()), P("dp"),
        hash_mlp_clamped, ARGS5)

# 16. the SDF eikonal value_and_grad of 7., points over dp8.
C.gspmd("g.sdf_eikonal_value_and_grad.dp8", {"dp": 8}, (SP7, P("dp"), P("dp")), (P(), SP7), sdf_loss_grads,
        (P7, R(32, 3, scale=0.6), U(32, 3, lo=-1, hi=1)))

# 17. the NeRF training step of 12., the MLP's hidden dim over tp, rays over dp.
SP17 = {"w1": P(None, "tp"), "wx": P(None, "tp"), "b1": P("tp"), "w2": P("tp", None), "b2": P(), "wsig": P(),
        "wrgb": P()}
SS17 = state_specs(S12s, SP17)
C.gspmd("g.nerf_train_step_adam_hidden_tp.dp2xtp4", {"dp": 2, "tp": 4}, (SP17, SS17, P("dp"), P("dp"), P("dp")),
        (SP17, SS17, P()), nerf_step, (P12, S12s) + RAYS12)

# 18. the splat composite of 9., primitives over 8 devices.
C.gspmd("g.splat_composite_primitives_sharded.ep8", {"ep": 8}, (P("ep"),) * 4 + (P(),), P(), splat, ARGS9)


# 19. importance resampling with jnp.searchsorted, rays over dp8.
def resample_ss(edges, w, u):
    pdf = (w + 1e-2) / jnp.sum(w + 1e-2, -1, keepdims=True)
    cdf = jnp.concatenate([jnp.zeros_like(pdf[:, :1]), jnp.cumsum(pdf, -1)], -1)
    ind = jax.vmap(lambda c, q: jnp.searchsorted(c, q, side="right"))(cdf, u)
    below, above = jnp.maximum(ind - 1, 0), jnp.minimum(ind, NC11)
    c0, c1 = jnp.take_along_axis(cdf, below, 1), jnp.take_along_axis(cdf, above, 1)
    e0, e1 = jnp.take_along_axis(edges, below, 1), jnp.take_along_axis(edges, above, 1)
    t = (u - c0) / jnp.where(c1 - c0 < 1e-5, 1.0, c1 - c0)
    return jnp.sort(jnp.concatenate([edges, e0 + t * (e1 - e0)], -1), -1)


C.gspmd("g.importance_resample_searchsorted_sort.dp8", {"dp": 8}, (P("dp"),) * 3, P("dp"), resample_ss,
        (ED11, np.abs(R(8, NC11)), np.sort(U(8, NF11), -1)))

C.finish()
