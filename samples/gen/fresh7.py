"""samples/fresh7: a seventh batch of programs as a user writes them, on the
theme of training utilities and models other than transformers, none of them
an idiom of samples/fresh .. fresh6, probe, train or wild: adaptive gradient
clipping (NFNet unit-wise norms) on a Megatron MLP with momentum, Adafactor's
factored second moments for a weight sharded on both dims of a dp x tp mesh,
LARS with a weight-decay / trust-ratio mask on FSDP shards, an fp16 dynamic
loss scale whose all-finite flag is a pmin over a dp x tp mesh, a DLRM
(row-sharded embedding table, dot interaction, MLP) with the table's
gradient by scatter-add, a GraphSAGE layer on node-partitioned graphs (edges
grouped by destination block, features all-gathered), a WaveNet stack of
non-causal dilated convolutions with two-sided halos by ppermute, a diffusion
denoiser's loss (sinusoidal timestep embedding, FiLM, GroupNorm with whole
groups per device, min-SNR weights), a SigLIP loss with the text embeddings
passed around a ring, classifier-free guidance with cond / uncond on a mesh
axis of its own and a DDIM step, a Switch router's load-balancing and z
losses with per-group capacity drops, a GroupNorm whose groups span two
devices of a channel axis sharded over two mesh axes, a masked-LM loss with
label smoothing over a sequence x vocabulary mesh; under GSPMD a U-Net
down/up block with spatial sharding, a DLRM SGD step, optax.lars with masks on
a dp x fsdp mesh, an fp16 MLP step with a dynamic loss scale and an EMA, a
CFG DDIM sampling loop (fori_loop) and a graph attention layer with an edge
softmax by segment_max over sharded edges.
Each shard_map family has the bug variants a careless parallelisation makes.
Exported with scalify_jax.export_pair; every pair is also run by JAX on seeded
inputs and its manifest entry records the largest difference from the
single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh7.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh7.sh)
from fresh_lib import Corpus, seeded  # noqa: E402
from scalify_jax._export import make_mesh  # noqa: E402

C = Corpus("samples/fresh7", "samples/gen/fresh7.py", "samples/gen/run_fresh7.sh", sys.argv[1:])
rng, R, I = seeded(7171)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
HW_MESH, DP_MESH = make_mesh({"h": 4, "w": 2}), make_mesh({"dp": 4})


def wsc(m, x, *spec):
    return lax.with_sharding_constraint(x, NamedSharding(m, P(*spec)))


def t_embed(t, dim):
    """The sinusoidal embedding of integer timesteps t [B] -> [B, dim]."""
    half = dim // 2
    fr = jnp.exp(-np.log(10000.0) * jnp.arange(half, dtype=jnp.float32) / half)
    a = t.astype(jnp.float32)[:, None] * fr[None]
    return jnp.concatenate([jnp.sin(a), jnp.cos(a)], -1)


def cosine_abar(n):
    """alpha-bar of the cosine noise schedule at steps 0 .. n-1."""
    s = np.arange(n, dtype=np.float64) / n
    return np.clip(np.cos((s + 0.008) / 1.008 * np.pi / 2) ** 2, 1e-4, 0.9999).astype(np.float32)

# ---------------------------------------------------------------------------
# 1. adaptive gradient clipping (NFNet AGC) and SGD with momentum on a
#    Megatron MLP: each unit's gradient (a column of a [in, out] weight; the
#    whole vector for a bias) is clipped to AG_LAM times the unit's weight
#    norm. The fan-in of the column-parallel w1 is local, that of the
#    row-parallel w2 is split over tp; b1 is sharded, b2 replicated.
AG_LAM, AG_EPS, AG_LR, AG_MU = 0.05, 1e-3, 0.1, 0.9


def unit_sq(x):
    return jnp.sum(x * x) if x.ndim == 1 else jnp.sum(x * x, 0, keepdims=True)


def agc_clip(w_sq, g_sq, g):
    mx = AG_LAM * jnp.maximum(jnp.sqrt(w_sq), AG_EPS)
    gn = jnp.sqrt(g_sq)
    return jnp.where(gn > mx, g * (mx / jnp.maximum(gn, 1e-6)), g)


def agc_momentum(p, g, m):
    new_p, new_m = {}, {}
    for k in p:
        new_m[k] = AG_MU * m[k] + agc_clip(unit_sq(p[k]), unit_sq(g[k]), g[k])
        new_p[k] = p[k] - AG_LR * new_m[k]
    return new_p, new_m


def agc_tp(bug):
    def f(p, g, m):
        new_p, new_m = {}, {}
        for k in p:
            ws, gs = unit_sq(p[k]), unit_sq(g[k])
            # b1's and w2's units are spread over the tp shards
            if k == "b1" or (k == "w2" and bug != "rowpar-no-psum") or (k == "w1" and bug == "colpar-psum"):
                ws, gs = psum(ws, "tp"), psum(gs, "tp")
            new_m[k] = AG_MU * m[k] + agc_clip(ws, gs, g[k])
            new_p[k] = p[k] - AG_LR * new_m[k]
        return new_p, new_m
    return f


ag_spec = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp"), "b2": P()}
ag_p = {"w1": R(16, 32, scale=0.3), "b1": R(32, scale=0.1), "w2": R(32, 16, scale=0.3), "b2": R(16, scale=0.1)}
ag_g = {"w1": R(16, 32) * rng.uniform(0.002, 0.03, 32).astype(np.float32),
        "b1": R(32, scale=0.01), "w2": R(32, 16) * rng.uniform(0.002, 0.03, 16).astype(np.float32),
        "b2": R(16, scale=0.002)}
ag_m = {k: R(*v.shape, scale=0.005) for k, v in ag_p.items()}
C.smap("s.agc_unitwise_momentum.tp4", {"tp": 4}, agc_tp, (ag_spec, ag_spec, ag_spec), (ag_spec, ag_spec),
       agc_momentum, (ag_p, ag_g, ag_m),
       bugs=[("rowpar-no-psum", ["missing-all-reduce"]), ("colpar-psum", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 2. Adafactor's factored second moment for a weight sharded on both dims
#    (rows over dp, columns over tp): the row statistics (mean over columns)
#    need a psum over tp, the column statistics one over dp, the mean of the
#    row statistics one over dp; the update is clipped by its RMS and the step
#    is relative to the weight's RMS (both over the whole matrix).
AF_R, AF_C, AF_B2, AF_E1, AF_D, AF_LR, AF_E2 = 16, 32, 0.8, 1e-30, 1.0, 0.05, 1e-3


def adafactor_factored(w, g, vr, vc):
    g2 = g * g + AF_E1
    vr = AF_B2 * vr + (1 - AF_B2) * jnp.mean(g2, 1)
    vc = AF_B2 * vc + (1 - AF_B2) * jnp.mean(g2, 0)
    u = g * lax.rsqrt(vr[:, None] * vc[None, :] / jnp.mean(vr))
    u = u / jnp.maximum(1.0, jnp.sqrt(jnp.mean(u * u)) / AF_D)
    lr = AF_LR * jnp.maximum(AF_E2, jnp.sqrt(jnp.mean(w * w)))
    return w - lr * u, vr, vc


def adafactor_2d(bug):
    def f(w, g, vr, vc):
        g2 = g * g + AF_E1
        vr = AF_B2 * vr + (1 - AF_B2) * psum(jnp.sum(g2, 1), "tp") / AF_C
        vc = AF_B2 * vc + (1 - AF_B2) * psum(jnp.sum(g2, 0), "tp" if bug == "col-mean-over-tp" else "dp") / AF_R
        vr_mean = psum(jnp.sum(vr), "dp") / AF_R
        u = g * lax.rsqrt(vr[:, None] * vc[None, :] / vr_mean)
        u_sq = psum(jnp.sum(u * u), "tp" if bug == "rms-one-axis" else ("dp", "tp"))
        u = u / jnp.maximum(1.0, jnp.sqrt(u_sq / (AF_R * AF_C)) / AF_D)
        lr = AF_LR * jnp.maximum(AF_E2, jnp.sqrt(psum(jnp.sum(w * w), ("dp", "tp")) / (AF_R * AF_C)))
        return w - lr * u, vr, vc
    return f


af_g = R(AF_R, AF_C) * np.linspace(0.5, 2.0, AF_R, dtype=np.float32)[:, None]
C.smap("s.adafactor_factored_2d.dp2xtp4", {"dp": 2, "tp": 4}, adafactor_2d,
       (P("dp", "tp"), P("dp", "tp"), P("dp"), P("tp")), (P("dp", "tp"), P("dp"), P("tp")), adafactor_factored,
       (R(AF_R, AF_C, scale=0.2), af_g, np.abs(R(AF_R, scale=0.3)) + 0.2, np.abs(R(AF_C, scale=0.3)) + 0.2),
       bugs=[("col-mean-over-tp", ["wrong-collective-group"]), ("rms-one-axis", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 3. LARS on FSDP shards: momentum SGD whose weight matrices (rows over fsdp)
#    get weight decay and a layer-wise trust ratio eta * |w| / (|g| + wd |w|);
#    the biases (replicated) are masked out of both.
LA_LR, LA_MU, LA_WD, LA_ETA = 0.5, 0.9, 1e-3, 0.02


def lars_leaf(w, g, m, w_sq, g_sq, adapt):
    if not adapt:
        m = LA_MU * m + LA_LR * g
        return w - m, m
    wn, gn = jnp.sqrt(w_sq), jnp.sqrt(g_sq)
    trust = jnp.where((wn > 0) & (gn > 0), LA_ETA * wn / (gn + LA_WD * wn), 1.0)
    m = LA_MU * m + LA_LR * trust * (g + LA_WD * w)
    return w - m, m


def lars(p, g, m):
    new_p, new_m = {}, {}
    for k in p:
        new_p[k], new_m[k] = lars_leaf(p[k], g[k], m[k], jnp.sum(p[k] ** 2), jnp.sum(g[k] ** 2), k.startswith("w"))
    return new_p, new_m


def lars_fsdp(bug):
    def f(p, g, m):
        new_p, new_m = {}, {}
        for k in p:
            adapt = k.startswith("w")
            w_sq, g_sq = jnp.sum(p[k] ** 2), jnp.sum(g[k] ** 2)
            if adapt and bug == "trust-pmean":
                trust = pmean(LA_ETA * jnp.sqrt(w_sq) / (jnp.sqrt(g_sq) + LA_WD * jnp.sqrt(w_sq)), "fsdp")
                new_m[k] = LA_MU * m[k] + LA_LR * trust * (g[k] + LA_WD * p[k])
                new_p[k] = p[k] - new_m[k]
                continue
            if adapt:
                w_sq = psum(w_sq, "fsdp")
                g_sq = g_sq if bug == "gnorm-local" else psum(g_sq, "fsdp")
            new_p[k], new_m[k] = lars_leaf(p[k], g[k], m[k], w_sq, g_sq, adapt)
        return new_p, new_m
    return f


la_spec = {"w1": P("fsdp"), "b1": P(), "w2": P("fsdp"), "b2": P()}
la_p = {"w1": R(32, 16, scale=0.3), "b1": R(16, scale=0.1), "w2": R(16, 8, scale=0.3), "b2": R(8, scale=0.1)}
la_g = {"w1": R(32, 16, scale=0.05) * np.linspace(0.2, 3.0, 32, dtype=np.float32)[:, None], "b1": R(16, scale=0.05),
        "w2": R(16, 8, scale=0.05), "b2": R(8, scale=0.05)}
la_m = {k: R(*v.shape, scale=0.01) for k, v in la_p.items()}
C.smap("s.lars_wd_mask.fsdp4", {"fsdp": 4}, lars_fsdp, (la_spec, la_spec, la_spec), (la_spec, la_spec), lars,
       (la_p, la_g, la_m), bugs=[("gnorm-local", ["missing-all-reduce"]), ("trust-pmean", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 4. an fp16 linear layer (f32 master weights, columns over tp, batch over
#    dp) with a dynamic loss scale: the fp16 gradient of the scaled loss, an
#    all-finite flag from every device (pmin over dp and tp), the update
#    skipped and the scale halved on overflow, else the scale doubled every
#    LS_PERIOD good steps. One output column's targets overflow fp16 (on one
#    tp shard only), so the whole step must be skipped.
LS_B, LS_C, LS_LR, LS_PERIOD = 8, 32, 0.1, 2


def ls_loss16(w16, x, t):
    y = x.astype(jnp.float16) @ w16
    return jnp.sum(jnp.square(y.astype(jnp.float32) - t)) / (LS_B * LS_C)


def ls_update(w, g, ok, scale, good):
    w = jnp.where(ok, w - LS_LR * g, w)
    good = jnp.where(ok, good + 1, 0)
    grow = good >= LS_PERIOD
    scale = jnp.where(ok, jnp.where(grow, scale * 2, scale), scale / 2)
    return w, scale, jnp.where(grow, 0, good)


def loss_scale_step(w, x, t, scale, good):
    loss, g16 = jax.value_and_grad(lambda v: ls_loss16(v, x, t) * scale)(w.astype(jnp.float16))
    g = g16.astype(jnp.float32) / scale
    w, scale2, good = ls_update(w, g, jnp.all(jnp.isfinite(g)), scale, good)
    return w, scale2, good, loss / scale


def loss_scale_2d(bug):
    def f(w, x, t, scale, good):
        loss, g16 = jax.value_and_grad(lambda v: ls_loss16(v, x, t) * scale)(w.astype(jnp.float16))
        fin = jnp.all(jnp.isfinite(g16)).astype(jnp.int32)
        if bug == "pmin-dp-only":
            fin = lax.pmin(fin, "dp")
        elif bug != "finite-no-pmin":
            fin = lax.pmin(fin, ("dp", "tp"))
        g = psum(g16.astype(jnp.float32), "dp") / scale
        w, scale2, good = ls_update(w, g, fin > 0, scale, good)
        return w, scale2, good, psum(loss, ("dp", "tp")) / scale
    return f


ls_t = R(LS_B, LS_C)
ls_t[:, 17] = 300.0  # column 17 (tp shard 2) overflows fp16 at this scale
C.smap("s.f16_loss_scale_allfinite.dp2xtp4", {"dp": 2, "tp": 4}, loss_scale_2d,
       (P(None, "tp"), P("dp"), P("dp", "tp"), P(), P()), (P(None, "tp"), P(), P(), P()), loss_scale_step,
       (R(16, LS_C, scale=0.3), R(LS_B, 16, scale=0.5), ls_t, np.float32(2.0 ** 15), np.int32(1)),
       bugs=[])
# Its bugs "pmin-dp-only" and "finite-no-pmin" (the flag combined over dp only,
# or not at all) differ only where some device's gradients overflow and
# another's do not: the checker's seeded inputs overflow nowhere, so execution
# cannot show them; not exported (as fresh3's "scale-not-synced").

# ---------------------------------------------------------------------------
# 5. a DLRM: three categorical features looked up in one concatenated
#    embedding table (rows over tp; ids of rows another device owns are
#    masked, the lookups psum'd), a bottom MLP on the dense features, the
#    pairwise dot interaction, a top MLP and a sigmoid BCE loss; the output is
#    the loss and the table's gradient (scatter-add into the local rows, psum
#    over the dp batch shards). Batch over dp.
DL_B, DL_NF, DL_V, DL_D = 8, 3, 48, 8
DL_PAIRS = np.triu_indices(DL_NF + 1, 1)


def dlrm_fwd(dense, e, wb, wt1, wt2):
    dx = jax.nn.relu(dense @ wb)
    f = jnp.concatenate([dx[:, None], e], 1)
    z = jnp.einsum("bid,bjd->bij", f, f)[:, DL_PAIRS[0], DL_PAIRS[1]]
    h = jax.nn.relu(jnp.concatenate([dx, z], 1) @ wt1)
    return (h @ wt2)[:, 0]


def bce(logit, y):
    return jnp.maximum(logit, 0.0) - logit * y + jnp.log1p(jnp.exp(-jnp.abs(logit)))


def dlrm_loss(table, dense, ids, y, wb, wt1, wt2):
    return jnp.mean(bce(dlrm_fwd(dense, table[ids], wb, wt1, wt2), y))


def dlrm_step(table, dense, ids, y, wb, wt1, wt2):
    return jax.value_and_grad(dlrm_loss)(table, dense, ids, y, wb, wt1, wt2)


def dlrm_tp(bug):
    def f(table, dense, ids, y, wb, wt1, wt2):
        vl = table.shape[0]
        loc = ids if bug == "ids-no-offset" else ids - idx("tp") * vl
        here = ((loc >= 0) & (loc < vl))[..., None]
        ci = jnp.clip(loc, 0, vl - 1)
        e = psum(jnp.where(here, table[ci], 0.0), "tp")
        loss, vjp = jax.vjp(lambda e: jnp.sum(bce(dlrm_fwd(dense, e, wb, wt1, wt2), y)) / DL_B, e)
        (ge,) = vjp(jnp.ones_like(loss))
        dt = jnp.zeros_like(table).at[ci].add(jnp.where(here, ge, 0.0))
        if bug != "grad-no-psum-dp":
            dt = psum(dt, "dp")
        return psum(loss, "dp"), dt
    return f


dl_ids = np.stack([I(0, 16, DL_B) + 16 * j for j in range(DL_NF)], 1).astype(np.int32)
dl_args = (R(DL_V, DL_D, scale=0.3), R(DL_B, 4), dl_ids, (rng.uniform(0, 1, DL_B) < 0.4).astype(np.float32),
           R(4, DL_D, scale=0.5), R(DL_D + len(DL_PAIRS[0]), 16, scale=0.3), R(16, 1, scale=0.3))
C.smap("s.dlrm_embed_interact_grad.dp2xtp4", {"dp": 2, "tp": 4}, dlrm_tp,
       (P("tp"), P("dp"), P("dp"), P("dp"), P(), P(), P()), (P(), P("tp")), dlrm_step, dl_args,
       bugs=[("ids-no-offset", ["wrong-shard-dim"]), ("grad-no-psum-dp", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 6. a GraphSAGE-style layer on a node-partitioned graph: each device owns a
#    block of nodes and the edges pointing into it; the source features come
#    from an all-gather of the node blocks; messages (edge-weighted) are
#    summed per destination with segment_sum at block-local ids and averaged
#    by in-degree; then a graph-level mean pooling.
GN_N, GN_EB, GN_F, GN_H, GN_P = 32, 24, 6, 8, 4


def sage(h, src, dst, ew, wm, ws):
    m = (h[src] @ wm) * ew[:, None]
    agg = jax.ops.segment_sum(m, dst, GN_N)
    deg = jax.ops.segment_sum(jnp.ones_like(ew), dst, GN_N)
    out = jax.nn.relu(h @ ws + agg / jnp.maximum(deg, 1.0)[:, None])
    return out, jnp.mean(out, 0)


def sage_nodes(bug):
    def f(h, src, dst, ew, wm, ws):
        nl = h.shape[0]
        hf = lax.all_gather(h, "gp", axis=0, tiled=True)
        m = (hf[src] @ wm) * ew[:, None]
        ld = dst if bug == "dst-no-offset" else dst - idx("gp") * nl
        agg = jax.ops.segment_sum(m, ld, nl)
        deg = jax.ops.segment_sum(jnp.ones_like(ew), ld, nl)
        out = jax.nn.relu(h @ ws + agg / jnp.maximum(deg, 1.0)[:, None])
        pool = jnp.sum(out, 0) / GN_N
        return out, (pmean(pool, "gp") if bug == "pool-pmean" else psum(pool, "gp"))
    return f


gn_nb = GN_N // GN_P
gn_dst = np.concatenate([I(b * gn_nb, (b + 1) * gn_nb, GN_EB) for b in range(GN_P)])
# Not exported: the program is right only for edges whose destination lies
# in the device's own node block (how gn_dst is drawn), a precondition the
# checker's seeded inputs do not meet, so execution rightly finds the two
# functions differ.
# C.smap("s.sage_node_partition.gp4", {"gp": GN_P}, sage_nodes, (P("gp"),) * 4 + (P(), P()), (P("gp"), P()), sage,
#        (R(GN_N, GN_F), I(0, GN_N, GN_P * GN_EB), gn_dst, rng.uniform(0.5, 1.5, GN_P * GN_EB).astype(np.float32),
#         R(GN_F, GN_H, scale=0.4), R(GN_F, GN_H, scale=0.4)),
#        bugs=[("dst-no-offset", ["wrong-shard-dim"]), ("pool-pmean", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 7. a WaveNet-style stack on audio with the time axis sharded over sp:
#    non-causal ("same") dilated convolutions (kernel 3, dilations 1 and 2),
#    a tanh * sigmoid gate and a 1x1 residual projection; each layer needs d
#    samples from both neighbours, exchanged with ppermute (zeros at the ends).
WN_T, WN_C, WN_DIL, WN_N = 32, 4, (1, 2), 4


def dconv(x, w, d, pad):
    return lax.conv_general_dilated(x, w, (1,), pad, rhs_dilation=(d,), dimension_numbers=("NWC", "WIO", "NWC"))


def wavenet(x, wf, wg, wr):
    for l, d in enumerate(WN_DIL):
        z = jnp.tanh(dconv(x, wf[l], d, [(d, d)])) * jax.nn.sigmoid(dconv(x, wg[l], d, [(d, d)]))
        x = x + z @ wr[l]
    return x


def wavenet_sp(bug):
    to_next = [(i, i + 1) for i in range(WN_N - 1)]
    to_prev = [(i + 1, i) for i in range(WN_N - 1)]
    if bug == "halo-cyclic":
        to_next, to_prev = to_next + [(WN_N - 1, 0)], to_prev + [(0, WN_N - 1)]

    def send(a, perm):
        if bug == "halo-bf16":
            return lax.ppermute(a.astype(jnp.bfloat16), "sp", perm).astype(jnp.float32)
        return lax.ppermute(a, "sp", perm)

    def f(x, wf, wg, wr):
        for l, d in enumerate(WN_DIL):
            xx = jnp.concatenate([send(x[:, -d:], to_next), x, send(x[:, :d], to_prev)], 1)
            z = jnp.tanh(dconv(xx, wf[l], d, "VALID")) * jax.nn.sigmoid(dconv(xx, wg[l], d, "VALID"))
            x = x + z @ wr[l]
        return x
    return f


C.smap("s.wavenet_dilated_halo.sp4", {"sp": WN_N}, wavenet_sp, (P(None, "sp"), P(), P(), P()), P(None, "sp"),
       wavenet, (R(2, WN_T, WN_C), R(2, 3, WN_C, WN_C, scale=0.4), R(2, 3, WN_C, WN_C, scale=0.4),
                 R(2, WN_C, WN_C, scale=0.4)),
       bugs=[("halo-cyclic", ["wrong-collective-group"])])
# Its bug "halo-bf16" (halos sent in bf16) rounds nothing the checker's seeded
# inputs hold (they are exact in bf16): not exported.

# ---------------------------------------------------------------------------
# 8. a diffusion denoiser's training loss: a sinusoidal timestep embedding
#    and an MLP give FiLM scale and shift per channel; GroupNorm (groups of 4
#    consecutive channels, each tp device holding two whole groups), SiLU and
#    a row-parallel output projection predict the noise; the per-sample MSE is
#    weighted by min-SNR. Batch over dp, channels over tp.
DF_S, DF_C, DF_GS, DF_E, DF_H, DF_T = 8, 32, 4, 16, 32, 100


def group_norm(x, gsize):
    b, s, c = x.shape
    xg = x.reshape(b, s, c // gsize, gsize)
    m = jnp.mean(xg, (1, 3), keepdims=True)
    v = jnp.mean(jnp.square(xg - m), (1, 3), keepdims=True)
    return ((xg - m) * lax.rsqrt(v + 1e-5)).reshape(b, s, c)


def df_head(x, t, wt1, wt2, norm):
    e = jax.nn.silu(t_embed(t, DF_E) @ wt1)
    ss = jnp.einsum("bh,hkc->bkc", e, wt2)
    return jax.nn.silu(norm(x) * (1 + ss[:, 0, None]) + ss[:, 1, None])


def min_snr_mse(pred, eps, t, abar):
    snr = abar[t] / (1 - abar[t])
    return jnp.mean(jnp.minimum(snr, 5.0) / snr * jnp.mean(jnp.square(pred - eps), (1, 2)))


def denoise_loss(x, t, eps, abar, wt1, wt2, wo):
    pred = df_head(x, t, wt1, wt2, lambda a: group_norm(a, DF_GS)) @ wo
    return pred, min_snr_mse(pred, eps, t, abar)


def denoise_dp_tp(bug):
    def synced_gn(x):  # statistics "synchronised" over tp
        b, s, c = x.shape
        xg = x.reshape(b, s, c // DF_GS, DF_GS)
        m = pmean(jnp.mean(xg, (1, 3), keepdims=True), "tp")
        v = pmean(jnp.mean(jnp.square(xg - m), (1, 3), keepdims=True), "tp")
        return ((xg - m) * lax.rsqrt(v + 1e-5)).reshape(b, s, c)

    def f(x, t, eps, abar, wt1, wt2, wo):
        norm = synced_gn if bug == "gn-pmean-tp" else (lambda a: group_norm(a, DF_GS))
        pred = psum(df_head(x, t, wt1, wt2, norm) @ wo, "tp")
        loss = min_snr_mse(pred, eps, t, abar)
        return pred, (loss if bug == "loss-no-pmean" else pmean(loss, "dp"))
    return f


df_x = R(4, DF_S, DF_C) + np.repeat(R(DF_C // DF_GS, scale=1.0), DF_GS)  # group means differ
C.smap("s.diffusion_film_groupnorm.dp2xtp4", {"dp": 2, "tp": 4}, denoise_dp_tp,
       (P("dp", None, "tp"), P("dp"), P("dp"), P(), P(), P(None, None, "tp"), P("tp")), (P("dp"), P()),
       denoise_loss,
       (df_x, np.array([3, 40, 77, 95], np.int32), R(4, DF_S, DF_C), cosine_abar(DF_T),
        R(DF_E, DF_H, scale=0.3), R(DF_H, 2, DF_C, scale=0.2), R(DF_C, DF_C, scale=0.2)),
       bugs=[("gn-pmean-tp", ["wrong-reduction"]), ("loss-no-pmean", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 9. a SigLIP (pairwise sigmoid) loss with the batch over dp: the text
#    embeddings travel around a ring (ppermute) so each device meets every
#    text block; the positives are on the diagonal of the block it starts
#    with; the summed loss over the global batch size.
SG_B, SG_N = 16, 4


def l2n(x):
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


def siglip(img, txt, log_t, bias):
    z = l2n(img) @ l2n(txt).T * jnp.exp(log_t) + bias
    lab = 2.0 * jnp.eye(z.shape[0]) - 1.0
    return -jnp.sum(jax.nn.log_sigmoid(lab * z)) / z.shape[0]


def siglip_ring(bug):
    ring = [(i, (i + 1) % SG_N) for i in range(SG_N)]

    def f(img, txt, log_t, bias):
        zi, zt = l2n(img), l2n(txt)
        bl = zi.shape[0]
        acc = 0.0
        for k in range(SG_N):
            z = zi @ zt.T * jnp.exp(log_t) + bias
            pos = k == 0 or bug == "pos-every-block"
            lab = 2.0 * jnp.eye(bl) - 1.0 if pos else -jnp.ones((bl, bl))
            acc = acc - jnp.sum(jax.nn.log_sigmoid(lab * z))
            if k < SG_N - 1:
                zt = lax.ppermute(zt, "dp", ring)
        return psum(acc, "dp") / (bl if bug == "local-batch-divide" else SG_B)
    return f


sg_img = R(SG_B, 8)
C.smap("s.siglip_ring_ppermute.dp4", {"dp": SG_N}, siglip_ring, (P("dp"), P("dp"), P(), P()), P(), siglip,
       (sg_img, sg_img + R(SG_B, 8, scale=0.4), np.float32(np.log(10.0)), np.float32(-5.0)),
       bugs=[("pos-every-block", ["wrong-shard-dim"]), ("local-batch-divide", ["constant-mismatch"])])

# ---------------------------------------------------------------------------
# 10. classifier-free guidance with cond / uncond on a mesh axis of its own:
#     the batch over dp, the "cfg" axis runs the same denoiser once with the
#     class embedding and once with the null class; the guided noise
#     eps_u + s (eps_c - eps_u) is a psum over cfg of s eps_c and
#     (1 - s) eps_u; then a deterministic DDIM step.
CF_D, CF_H, CF_NC, CF_GS, CF_E = 8, 32, 4, 3.0, 8


def cf_net(x, c, t, cemb, w1, w2):
    return jax.nn.silu(jnp.concatenate([x, cemb[c], t_embed(t, CF_E)], -1) @ w1) @ w2


def ddim(x, t, eps, abar, t_prev):
    a, ap = abar[t][:, None], abar[t_prev][:, None]
    x0 = (x - jnp.sqrt(1 - a) * eps) / jnp.sqrt(a)
    return jnp.sqrt(ap) * x0 + jnp.sqrt(1 - ap) * eps


def cfg_ddim(x, t, y, abar, cemb, w1, w2):
    b = x.shape[0]
    e = cf_net(jnp.concatenate([x, x]), jnp.concatenate([y, jnp.full_like(y, CF_NC)]), jnp.concatenate([t, t]),
               cemb, w1, w2)
    ec, eu = e[:b], e[b:]
    return ddim(x, t, eu + CF_GS * (ec - eu), abar, t - 5)


def cfg_axis(bug):
    def f(x, t, y, abar, cemb, w1, w2):
        cond = idx("cfg") == 0
        e = cf_net(x, jnp.where(cond, y, CF_NC), t, cemb, w1, w2)
        part = jnp.where(cond, CF_GS, 1.0 - CF_GS) * e
        if bug == "pmean-combine":
            eps = pmean(part, "cfg")
        else:
            eps = psum(part, "dp" if bug == "combine-over-dp" else "cfg")
        return ddim(x, t, eps, abar, t - 5)
    return f


C.smap("s.cfg_guidance_axis_ddim.cfg2xdp4", {"cfg": 2, "dp": 4}, cfg_axis,
       (P("dp"), P("dp"), P("dp"), P(), P(), P(), P()), P("dp"), cfg_ddim,
       (R(8, CF_D), I(10, 50, 8), I(0, CF_NC, 8), cosine_abar(50), R(CF_NC + 1, CF_D, scale=0.5),
        R(2 * CF_D + CF_E, CF_H, scale=0.3), R(CF_H, CF_D, scale=0.3)),
       bugs=[("combine-over-dp", ["wrong-collective-group"]), ("pmean-combine", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 11. a Switch router's statistics over token groups (one group per dp
#     device): the load-balancing loss E * sum_e f_e P_e (fraction of tokens
#     routed to e, mean router probability of e, both over the whole batch),
#     the router z-loss, the fraction of tokens dropped by a per-group expert
#     capacity and the tokens per expert.
SW_T, SW_E, SW_G, SW_CF = 32, 4, 4, 1.25
SW_CAP = int(np.ceil(SW_CF * SW_T / SW_G / SW_E))


def kept_in_capacity(oh):  # oh [..., tokens, E]: 1-based queue position <= capacity
    pos = jnp.cumsum(oh, -2) * oh
    return jnp.sum((pos > 0) & (pos <= SW_CAP))


def switch_stats(x, wr):
    logits = x @ wr
    oh = jax.nn.one_hot(jnp.argmax(logits, -1), SW_E)
    aux = SW_E * jnp.sum(jnp.mean(oh, 0) * jnp.mean(jax.nn.softmax(logits, -1), 0))
    z = jnp.mean(jnp.square(jax.nn.logsumexp(logits, -1)))
    drop = 1.0 - kept_in_capacity(oh.reshape(SW_G, -1, SW_E)) / SW_T
    return aux, z, drop, jnp.sum(oh, 0).astype(jnp.int32)


def switch_dp(bug):
    def f(x, wr):
        logits = x @ wr
        oh = jax.nn.one_hot(jnp.argmax(logits, -1), SW_E)
        frac, prob = jnp.mean(oh, 0), jnp.mean(jax.nn.softmax(logits, -1), 0)
        if bug == "aux-mean-of-products":
            aux = pmean(SW_E * jnp.sum(frac * prob), "dp")
        else:
            aux = SW_E * jnp.sum((frac if bug == "frac-local" else pmean(frac, "dp")) * pmean(prob, "dp"))
        z = pmean(jnp.mean(jnp.square(jax.nn.logsumexp(logits, -1))), "dp")
        drop = 1.0 - psum(kept_in_capacity(oh), "dp") / SW_T
        return aux, z, drop, psum(jnp.sum(oh, 0).astype(jnp.int32), "dp")
    return f


sw_x = R(SW_T, 8) + np.repeat(R(SW_G, 8, scale=1.5), SW_T // SW_G, 0)  # each group leans to other experts
C.smap("s.switch_router_aux.dp4", {"dp": SW_G}, switch_dp, (P("dp"), P()), (P(), P(), P(), P()), switch_stats,
       (sw_x, R(8, SW_E, scale=0.5)),
       bugs=[("aux-mean-of-products", ["wrong-reduction"]), ("frac-local", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 12. GroupNorm + SiLU whose channel axis is sharded over two mesh axes
#     (g major, c minor): the two groups of 8 channels each span the two c
#     devices of one g index, so the one-pass sums (of x and x^2) are psum'd
#     over c only. Batch over dp.
GA_S, GA_C, GA_G = 6, 16, 2


def gn_silu(x, gamma, beta):
    b, s, c = x.shape
    xg = x.reshape(b, s, GA_G, c // GA_G)
    m = jnp.mean(xg, (1, 3), keepdims=True)
    v = jnp.mean(jnp.square(xg), (1, 3), keepdims=True) - m * m
    return jax.nn.silu(((xg - m) * lax.rsqrt(v + 1e-5)).reshape(b, s, c) * gamma + beta)


def gn_two_axes(bug):
    def f(x, gamma, beta):
        n = GA_S * GA_C // GA_G
        ax = ("g", "c") if bug == "stats-over-g-and-c" else "c"
        m = psum(jnp.sum(x, (1, 2), keepdims=True), ax) / n
        if bug == "var-local-mean":
            v = psum(jnp.sum(jnp.square(x - jnp.mean(x, (1, 2), keepdims=True)), (1, 2), keepdims=True), ax) / n
        else:
            v = psum(jnp.sum(x * x, (1, 2), keepdims=True), ax) / n - m * m
        return jax.nn.silu((x - m) * lax.rsqrt(v + 1e-5) * gamma + beta)
    return f


ga_spec = P("dp", None, ("g", "c"))
C.smap("s.groupnorm_span_two_axes.dp2xg2xc2", {"dp": 2, "g": 2, "c": 2}, gn_two_axes,
       (ga_spec, P(("g", "c")), P(("g", "c"))), ga_spec, gn_silu,
       (R(4, GA_S, GA_C) + np.repeat(R(4, scale=1.0), 4), 1.0 + R(GA_C, scale=0.1), R(GA_C, scale=0.1)),
       bugs=[("stats-over-g-and-c", ["wrong-collective-group"]), ("var-local-mean", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 13. a masked-LM loss with label smoothing on logits sharded over the
#     sequence (sp) and the vocabulary (tp): logsumexp through pmax / psum,
#     the label's logit picked at the shard's vocab offset, the smoothing
#     term's vocabulary mean, the mean over the masked positions only (labels
#     -100 elsewhere) with the token count psum'd over sp.
ML_B, ML_T, ML_V, ML_EPS = 2, 8, 32, 0.1


def mlm_ls_loss(logits, labels):
    valid = labels >= 0
    pick = jnp.take_along_axis(logits, jnp.where(valid, labels, 0)[..., None], -1)[..., 0]
    tok = jax.nn.logsumexp(logits, -1) - (1 - ML_EPS) * pick - ML_EPS * jnp.mean(logits, -1)
    n = jnp.sum(valid.astype(jnp.int32))
    return jnp.sum(jnp.where(valid, tok, 0.0)) / n, n


def mlm_sp_tp(bug):
    def f(logits, labels):
        vl = logits.shape[-1]
        valid = labels >= 0
        m = pmax(jnp.max(logits, -1, keepdims=True), "tp")
        lse = m[..., 0] + jnp.log(psum(jnp.sum(jnp.exp(logits - m), -1), "tp"))
        loc = labels if bug == "label-no-offset" else labels - idx("tp") * vl
        here = valid & (loc >= 0) & (loc < vl)
        pick = jnp.take_along_axis(logits, jnp.clip(loc, 0, vl - 1)[..., None], -1)[..., 0]
        pick = psum(jnp.where(here, pick, 0.0), "tp")
        tok = lse - (1 - ML_EPS) * pick - ML_EPS * psum(jnp.sum(logits, -1), "tp") / ML_V
        n = psum(jnp.sum(valid.astype(jnp.int32)), ("sp", "tp") if bug == "count-psum-sp-tp" else "sp")
        return psum(jnp.sum(jnp.where(valid, tok, 0.0)), "sp") / n, n
    return f


ml_lab = I(0, ML_V, ML_B, ML_T)
ml_lab[rng.uniform(0, 1, ml_lab.shape) < 0.5] = -100
C.smap("s.mlm_label_smooth.sp2xtp4", {"sp": 2, "tp": 4}, mlm_sp_tp, (P(None, "sp", "tp"), P(None, "sp")), (P(), P()),
       mlm_ls_loss, (R(ML_B, ML_T, ML_V, scale=2.0), ml_lab),
       bugs=[("count-psum-sp-tp", ["wrong-reduction"]), ("label-no-offset", ["wrong-shard-dim"])])

# ---------------------------------------------------------------------------
# 14. a U-Net down/up block with the image sharded over H and W (GSPMD):
#     conv + SiLU, 2x2 average pooling, conv + SiLU at half resolution,
#     nearest upsampling, the skip connection concatenated, a conv back to the
#     input channels and a residual.


def conv2d(x, k):
    return lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def unet_block(x, k1, k2, k3):
    h = wsc(HW_MESH, jax.nn.silu(conv2d(x, k1)), None, "h", "w")
    b, hh, ww, c = h.shape
    d = jnp.mean(h.reshape(b, hh // 2, 2, ww // 2, 2, c), (2, 4))
    d = jax.nn.silu(conv2d(d, k2))
    u = wsc(HW_MESH, jnp.repeat(jnp.repeat(d, 2, 1), 2, 2), None, "h", "w")
    return x + conv2d(jnp.concatenate([h, u], -1), k3)


C.gspmd("g.unet_down_up.h4xw2", {"h": 4, "w": 2}, (P(None, "h", "w"), P(), P(), P()), P(None, "h", "w"), unet_block,
        (R(2, 16, 16, 4), R(3, 3, 4, 8, scale=0.3), R(3, 3, 8, 8, scale=0.2), R(3, 3, 16, 4, scale=0.2)))

# ---------------------------------------------------------------------------
# 15. a DLRM training step under GSPMD: the concatenated embedding table
#     sharded on rows over tp, the batch over dp, value_and_grad of the BCE
#     loss over every parameter and a plain SGD update.


def dlrm_sgd(p, dense, ids, y):
    def loss(p):
        return jnp.mean(bce(dlrm_fwd(dense, p["table"][ids], p["wb"], p["wt1"], p["wt2"]), y))
    lv, g = jax.value_and_grad(loss)(p)
    return jax.tree.map(lambda a, b: a - 0.1 * b, p, g), lv


dg_spec = {"table": P("tp"), "wb": P(), "wt1": P(), "wt2": P()}
C.gspmd("g.dlrm_sgd_step.dp2xtp4", {"dp": 2, "tp": 4}, (dg_spec, P("dp"), P("dp"), P("dp")), (dg_spec, P()), dlrm_sgd,
        ({"table": R(DL_V, DL_D, scale=0.3), "wb": R(4, DL_D, scale=0.5),
          "wt1": R(DL_D + len(DL_PAIRS[0]), 16, scale=0.3), "wt2": R(16, 1, scale=0.3)},
         R(DL_B, 4), np.stack([I(0, 16, DL_B) + 16 * j for j in range(DL_NF)], 1).astype(np.int32),
         (rng.uniform(0, 1, DL_B) < 0.5).astype(np.float32)))

# ---------------------------------------------------------------------------
# 16. an MLP classifier step with optax.lars (weight decay and the trust
#     ratio masked off the biases), weights on rows over fsdp and the batch
#     over (dp, fsdp) (GSPMD).
LARS_OPT = optax.lars(0.2, weight_decay=1e-3, momentum=0.9,
                      weight_decay_mask=lambda p: {k: k.startswith("w") for k in p},
                      trust_ratio_mask=lambda p: {k: k.startswith("w") for k in p})


def spec_like(tree, specs):
    """The PartitionSpec of each leaf of an optimizer state: that of the
    parameter its path ends in, P() for scalars."""
    def one(path, leaf):
        keys = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
        return specs[keys[-1]] if keys and np.ndim(leaf) else P()
    return jax.tree_util.tree_map_with_path(one, tree)


def lars_step(p, opt, x, lab):
    def loss(p):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        lg = h @ p["w2"] + p["b2"]
        return jnp.mean(jax.nn.logsumexp(lg, -1) - jnp.take_along_axis(lg, lab[:, None], -1)[:, 0])
    lv, g = jax.value_and_grad(loss)(p)
    upd, opt = LARS_OPT.update(g, opt, p)
    return optax.apply_updates(p, upd), opt, lv


lo_p = {"w1": R(16, 32, scale=0.3), "b1": R(32, scale=0.1), "w2": R(32, 4, scale=0.3), "b2": R(4, scale=0.1)}
lo_spec = {"w1": P("fsdp"), "b1": P(), "w2": P("fsdp"), "b2": P()}
lo_opt = LARS_OPT.init(lo_p)
lo_opt = jax.tree.map(lambda a: a + 0.01 * R(*np.shape(a)) if np.ndim(a) else a, lo_opt)  # a running momentum
lo_ospec = spec_like(lo_opt, lo_spec)
C.gspmd("g.optax_lars_masked.dp2xfsdp4", {"dp": 2, "fsdp": 4},
        (lo_spec, lo_ospec, P(("dp", "fsdp")), P(("dp", "fsdp"))), (lo_spec, lo_ospec, P()), lars_step,
        (lo_p, lo_opt, R(16, 16), I(0, 4, 16)))

# ---------------------------------------------------------------------------
# 17. an fp16 MLP step with a dynamic loss scale and an EMA of the f32 master
#     weights (GSPMD, batch over dp, Megatron shardings over tp): the step and
#     the scale growth are skipped together when any gradient is not finite.
EM_DECAY = 0.99


def f16_ema_step(p, ema, scale, good, x, y):
    def loss(p16):
        h = jax.nn.gelu(x.astype(jnp.float16) @ p16["w1"])
        return jnp.mean(jnp.square((h @ p16["w2"]).astype(jnp.float32) - y))
    p16 = jax.tree.map(lambda a: a.astype(jnp.float16), p)
    lv, g16 = jax.value_and_grad(lambda q: loss(q) * scale)(p16)
    g = jax.tree.map(lambda a: a.astype(jnp.float32) / scale, g16)
    ok = jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in jax.tree.leaves(g)]))
    p = jax.tree.map(lambda w, d: jnp.where(ok, w - 0.05 * d, w), p, g)
    ema = jax.tree.map(lambda e, w: EM_DECAY * e + (1 - EM_DECAY) * w, ema, p)
    good = jnp.where(ok, good + 1, 0)
    scale = jnp.where(ok, jnp.where(good >= 4, scale * 2, scale), scale / 2)
    return p, ema, scale, jnp.where(good >= 4, 0, good), lv / scale


em_spec = {"w1": P(None, "tp"), "w2": P("tp")}
em_p = {"w1": R(16, 32, scale=0.3), "w2": R(32, 8, scale=0.3)}
C.gspmd("g.f16_loss_scale_ema.dp2xtp4", {"dp": 2, "tp": 4}, (em_spec, em_spec, P(), P(), P("dp"), P("dp")),
        (em_spec, em_spec, P(), P(), P()), f16_ema_step,
        (em_p, jax.tree.map(lambda a: a + R(*a.shape, scale=0.01), em_p), np.float32(2.0 ** 10), np.int32(3),
         R(8, 16, scale=0.5), R(8, 8)))

# ---------------------------------------------------------------------------
# 18. a CFG DDIM sampling loop under GSPMD: lax.fori_loop over CL_STEPS
#     steps, each running the denoiser of family 10 on the doubled batch
#     (cond then null class, constrained to the dp sharding) and mixing the
#     two halves with the guidance scale.
CL_STEPS, CL_STRIDE = 3, 8


def cfg_sample(x, y, t0, abar, cemb, w1, w2):
    b = x.shape[0]

    def step(i, x):
        t = jnp.full((b,), t0 - i * CL_STRIDE, jnp.int32)
        xx = wsc(DP_MESH, jnp.concatenate([x, x]), "dp")
        e = cf_net(xx, jnp.concatenate([y, jnp.full_like(y, CF_NC)]), jnp.concatenate([t, t]), cemb, w1, w2)
        ec, eu = e[:b], e[b:]
        return ddim(x, t, eu + CF_GS * (ec - eu), abar, t - CL_STRIDE)
    return lax.fori_loop(0, CL_STEPS, step, x)


C.gspmd("g.cfg_ddim_fori.dp4", {"dp": 4}, (P("dp"), P("dp"), P(), P(), P(), P(), P()), P("dp"), cfg_sample,
        (R(8, CF_D), I(0, CF_NC, 8), np.int32(40), cosine_abar(50), R(CF_NC + 1, CF_D, scale=0.5),
         R(2 * CF_D + CF_E, CF_H, scale=0.3), R(CF_H, CF_D, scale=0.3)))

# ---------------------------------------------------------------------------
# 19. a graph attention (GAT) layer with two heads: edge scores from the
#     source and destination projections, a softmax over each node's incoming
#     edges (segment_max, exp, segment_sum), attention-weighted messages
#     summed per node; the edges sharded over dp, node features replicated
#     (GSPMD).
GT_N, GT_E, GT_H, GT_F = 16, 64, 2, 4


def gat(h, src, dst, w, a_src, a_dst):
    z = (h @ w).reshape(GT_N, GT_H, GT_F)
    e = jax.nn.leaky_relu(jnp.sum(z[src] * a_src, -1) + jnp.sum(z[dst] * a_dst, -1), 0.2)
    emax = jax.ops.segment_max(e, dst, GT_N)
    p = jnp.exp(e - emax[dst])
    alpha = p / jax.ops.segment_sum(p, dst, GT_N)[dst]
    out = jax.ops.segment_sum(alpha[..., None] * z[src], dst, GT_N)
    return jax.nn.elu(out.reshape(GT_N, GT_H * GT_F))


C.gspmd("g.gat_edge_softmax.dp4", {"dp": 4}, (P(), P("dp"), P("dp"), P(), P(), P()), P(), gat,
        (R(GT_N, 6), I(0, GT_N, GT_E), I(0, GT_N, GT_E), R(6, GT_H * GT_F, scale=0.4), R(GT_H, GT_F),
         R(GT_H, GT_F)))

# ---------------------------------------------------------------------------
C.finish()
