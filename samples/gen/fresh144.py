"""samples/fresh144: a 144th batch of programs as a user writes them, on the theme of generative-model training steps as current open-source JAX code writes them (the models in plain JAX, the way the flax ports of DiT compute them: flax is not in the pinned environment): DDPM epsilon- and v-prediction noise losses with sinusoidal timestep embeddings and per-example timesteps, min-SNR loss weighting, DiT blocks with adaLN-Zero modulation (shift / scale / gate from the timestep + class conditioning), patchify / unpatchify reshapes and fixed 2-D sin-cos position embeddings, classifier-free guidance at sampling (conditional and unconditional passes combined, DDIM updates) and label dropout at training (a fixed drop mask passed in), a VAE with the reparameterisation trick (the noise passed in) and a KL term, an EMA of the weights after the optimizer step, a GAN discriminator step then generator step with a minibatch-stddev feature, and training steps with jax.grad + optax (adamw / adam, clip_by_global_norm) under dp, fsdp (parameters sharded, all_gather before use, psum_scatter of the gradients), tp (DiT attention heads / MLP hidden units) and dp x tp.
Sizes: latents 8x8x4, patch 2 (16 tokens of 16 values), DiT width 32, 8
heads of dim 4, MLP 64, frequency embedding 32, 10 classes plus the null
class (index 10) for classifier-free guidance; DDPM linear beta schedule
over 1000 steps. The VAE is an MLP (32 -> 32 -> z 8), the GAN two MLPs
(z 8 -> 32 -> 16 and 16 -> 32 (+1 minibatch-stddev feature) -> 16 -> 1).
Optimizer states are warmed by two single-device steps, so a gradient's
scale reaches the update.
shard_map families (bugs in brackets):
 1. DiT forward (dp2 x tp4): patchify, timestep + class conditioning,
    2 adaLN-Zero blocks with q / k / v and fc1 column-parallel (2 heads per
    device), out-projection and fc2 row-parallel with psums over tp, final
    adaLN layer and unpatchify. [no psum after fc2 (each device's partial
    sum gated into the residual); the attention out-projection psum'd over
    (dp, tp), adding the other dp shard's samples.]
 2. DiT forward with the latent rows over sp (dp2 x sp4, one row of patches
    per device): local patchify, the sin-cos position embeddings sliced at
    the device's token offset, K / V all_gather'd over sp (tiled on the
    token axis), final layer and local unpatchify back to the device's rows.
    [the position embeddings sliced without the device offset; K / V
    gathered on the leading (batch) axis and reshaped to [b, T, H, d].]
 3. DDPM epsilon-prediction training step of a 1-block DiT (dp8): per-example
    timesteps, noise passed in, label dropout by a drop mask (null class),
    per-device mean loss, gradients pmean'd, chain(clip_by_global_norm(4),
    adamw), EMA of the parameters after the update. [the gradients psum'd
    (8x) with the per-device mean loss (the global norm, about 1.8, now
    over the clipping threshold); the optimizer run on the local gradients
    and the updates pmean'd.]
 4. v-prediction step with min-SNR-5 weights (fsdp8): every parameter whose
    leading dim divides by 8 sharded on it, all_gather'd before the
    forward, the gradient of the gathered parameters psum_scatter'd
    (replicated leaves psum'd), the global gradient norm from the psum of
    the shards' squares plus the replicated leaves' squares, clipping by
    hand, adamw on the shards, EMA of the shards, the norm returned as a
    metric. [the norm from the local shards (optax.global_norm on the
    device's gradients); the gradient all-reduced and the first n rows
    kept (no rank offset) instead of psum_scatter.]
 5. classifier-free guidance DDIM sampler, CFG-parallel (dp2 x tp4): the
    doubled batch's conditional half on dp rank 0 and the unconditional
    (null class) half on rank 1, a 1-block DiT with heads / MLP over tp,
    eps all_gather'd over dp and combined eps_u + w (eps_c - eps_u) (w = 1.5), 5
    deterministic DDIM steps with x0 clipped. [the halves swapped in the
    combination; the null-label choice from the tp rank instead of the dp
    rank.]
 6. VAE training step (dp2 x fsdp4, batch over both axes): parameters
    all_gather'd over fsdp, reparameterisation z = mu + exp(logvar / 2) eps
    with eps passed in, Gaussian reconstruction + beta KL summed per sample
    over the global batch, gradients psum_scatter'd over fsdp and psum'd
    over dp, adam. [no psum over dp; the KL term divided by the local batch
    size.]
 7. GAN discriminator step then generator step (dp8): non-saturating
    logistic losses, the discriminator with a minibatch-stddev feature over
    the global batch (pmean of the mean and of the mean of squares), the
    generator step against the updated discriminator, two adam optimizers
    (b1 = 0.5), gradients pmean'd. [the minibatch stddev of the local
    batch; the discriminator gradients not reduced.]
 8. DiT epsilon-prediction step with min-SNR-5 weights and label dropout
    (dp2 x tp4, check_vma=True, so jax.grad reduces the replicated
    parameters' gradients): heads / MLP over tp, the loss psum'd over dp
    and divided by the global batch, adamw, EMA. [the out-projection bias
    added to each device's partial sum before the psum (four biases); the
    loss divided by the local batch size.]
GSPMD pairs (jax.jit with NamedSharding in / out shardings; correct):
 9. DiT forward with the CFG doubled batch combined, batch over dp2, heads /
    MLP over tp4; 10. DDPM epsilon DiT step with clip + adamw + EMA,
    parameters on their leading dim and batch over fsdp8; 11. VAE step
    with adam, batch over dp8; 12. GAN D-then-G step pair, hidden units
    over tp4, batch over dp2; 13. v-prediction min-SNR step, parameters
    over fsdp4, batch over (dp2, fsdp4); 14. CFG DDIM sampler by
    lax.fori_loop over a timestep table, batch over dp4, heads / MLP over
    tp2.
Numerics: f32 throughout; correct pairs agree at 1e-7 to 6e-5 (adam steps and
DDIM sampling amplify rounding); bug variants differ by 6e-3 and more.
Run from the repository root: bash samples/gen/run_fresh144.sh [SUBSTR...]
"""
import math
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh144.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh144.py"
C = Corpus("samples/fresh144", SCRIPT, "samples/gen/run_fresh144.sh", sys.argv[1:])
rng, R, I = seeded(144144)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index
f32 = jnp.float32

IMG, PCH, CIN = 8, 2, 4                 # latents 8x8x4, 2x2 patches
GRID = IMG // PCH                       # 4x4 tokens
NTOK, PD = GRID * GRID, PCH * PCH * CIN
DM, NH, HD, MLPD, FREQ = 32, 8, 4, 64, 32
NC = 10                                 # classes; NC is the null class (CFG)
T_STEPS = 1000
BETAS = np.linspace(1e-4, 0.02, T_STEPS, dtype=np.float64)
ALPHA_BAR = np.cumprod(1.0 - BETAS).astype(np.float32)
SNR_GAMMA = 5.0
EMA_DECAY = 0.99


# ---------------------------------------------------------------------------
# diffusion pieces


def timestep_embedding(t, dim=FREQ, max_period=10000):
    """DiT's TimestepEmbedder.timestep_embedding: [cos, sin] of t * exp(-log(P) i / half)."""
    half = dim // 2
    freqs = jnp.exp(-math.log(max_period) * jnp.arange(half, dtype=f32) / half)
    args = t.astype(f32)[:, None] * freqs[None]
    return jnp.concatenate([jnp.cos(args), jnp.sin(args)], -1)


def q_sample(x0, t, eps):
    ab = jnp.take(jnp.asarray(ALPHA_BAR), t)[:, None, None, None]
    return jnp.sqrt(ab) * x0 + jnp.sqrt(1.0 - ab) * eps


def snr(t):
    ab = jnp.take(jnp.asarray(ALPHA_BAR), t)
    return ab / (1.0 - ab)


def sincos_2d(dim, gh, gw):
    """MAE / DiT get_2d_sincos_pos_embed: half the dims for the column, half for the row."""
    def one(d, pos):
        om = 1.0 / 10000 ** (np.arange(d // 2, dtype=np.float64) / (d / 2.0))
        out = np.einsum("m,d->md", pos.reshape(-1), om)
        return np.concatenate([np.sin(out), np.cos(out)], 1)
    gy, gx = np.meshgrid(np.arange(gh, dtype=np.float64), np.arange(gw, dtype=np.float64), indexing="ij")
    return np.concatenate([one(dim // 2, gx), one(dim // 2, gy)], 1)[None].astype(np.float32)


POS = sincos_2d(DM, GRID, GRID)         # [1, 16, 32], a fixed buffer passed in


# ---------------------------------------------------------------------------
# DiT


def layer_norm(x, eps=1e-6):
    """nn.LayerNorm(elementwise_affine=False, eps=1e-6)."""
    m = jnp.mean(x, -1, keepdims=True)
    v = jnp.mean(jnp.square(x - m), -1, keepdims=True)
    return (x - m) * lax.rsqrt(v + eps)


def modulate(x, shift, scale):
    return x * (1 + scale[:, None]) + shift[:, None]


def patchify(x, p=PCH):
    B, H, W, Cc = x.shape
    x = x.reshape(B, H // p, p, W // p, p, Cc).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(B, (H // p) * (W // p), p * p * Cc)


def unpatchify(x, h, w, p=PCH, c=CIN):
    """DiT's unpatchify: [B, h*w, p*p*c] -> [B, h*p, w*p, c] (NHWC)."""
    x = x.reshape(x.shape[0], h, w, p, p, c)
    x = jnp.einsum("nhwpqc->nhpwqc", x)
    return x.reshape(x.shape[0], h * p, w * p, c)


def dense(fan_in, fan_out, bias=0.02):
    return {"w": R(fan_in, fan_out, scale=fan_in ** -0.5), "b": R(fan_out, scale=bias)}


def dit_init(nblk):
    def blk():
        return {"ada": {"w": R(DM, 6 * DM, scale=0.5 * DM ** -0.5), "b": R(6 * DM, scale=0.2)},
                "q": {"w": R(DM, NH, HD, scale=DM ** -0.5), "b": R(NH, HD, scale=0.02)},
                "k": {"w": R(DM, NH, HD, scale=DM ** -0.5), "b": R(NH, HD, scale=0.02)},
                "v": {"w": R(DM, NH, HD, scale=DM ** -0.5), "b": R(NH, HD, scale=0.02)},
                "o": {"w": R(NH, HD, DM, scale=DM ** -0.5), "b": R(DM, scale=0.1)},
                "fc1": dense(DM, MLPD), "fc2": dense(MLPD, DM, 0.1)}
    return {"x_emb": dense(PD, DM),
            "t_mlp1": dense(FREQ, DM), "t_mlp2": dense(DM, DM),
            "y_emb": R(NC + 1, DM, scale=0.5),
            "blocks": {"b%d" % i: blk() for i in range(nblk)},
            "final": {"ada": {"w": R(DM, 2 * DM, scale=0.5 * DM ** -0.5), "b": R(2 * DM, scale=0.2)},
                      "lin": dense(DM, PD)}}


def conditioning(p, t, y):
    te = timestep_embedding(t)
    te = jax.nn.silu(te @ p["t_mlp1"]["w"] + p["t_mlp1"]["b"]) @ p["t_mlp2"]["w"] + p["t_mlp2"]["b"]
    return te + jnp.take(p["y_emb"], y, axis=0)


def attention(q, k, v):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(HD)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)


ident = lambda o: o  # noqa: E731


def dit_block(x, c, bp, attn_red=ident, mlp_red=ident, kv=None, o_bias_in_partial=False):
    """adaLN-Zero block; attn_red / mlp_red reduce the row-parallel partial sums, kv gathers K / V."""
    mod = jax.nn.silu(c) @ bp["ada"]["w"] + bp["ada"]["b"]
    sh_msa, sc_msa, g_msa, sh_mlp, sc_mlp, g_mlp = jnp.split(mod, 6, -1)
    h = modulate(layer_norm(x), sh_msa, sc_msa)
    q, k, v = (jnp.einsum("btd,dhk->bthk", h, bp[n]["w"]) + bp[n]["b"] for n in ("q", "k", "v"))
    if kv is not None:
        k, v = kv(k), kv(v)
    o = jnp.einsum("bthk,hkd->btd", attention(q, k, v), bp["o"]["w"])
    o = attn_red(o + bp["o"]["b"]) if o_bias_in_partial else attn_red(o) + bp["o"]["b"]
    x = x + g_msa[:, None] * o
    h = modulate(layer_norm(x), sh_mlp, sc_mlp)
    h = jax.nn.gelu(h @ bp["fc1"]["w"] + bp["fc1"]["b"])
    return x + g_mlp[:, None] * (mlp_red(h @ bp["fc2"]["w"]) + bp["fc2"]["b"])


def final_layer(x, c, fp):
    shift, scale = jnp.split(jax.nn.silu(c) @ fp["ada"]["w"] + fp["ada"]["b"], 2, -1)
    return modulate(layer_norm(x), shift, scale) @ fp["lin"]["w"] + fp["lin"]["b"]


def dit_apply(p, x, t, y, pos, **blk):
    """x [B, H, W, C] latents (H, W: the local rows / columns), pos [1, tokens, DM]."""
    B, H, W, _ = x.shape
    h = patchify(x) @ p["x_emb"]["w"] + p["x_emb"]["b"] + pos
    c = conditioning(p, t, y)
    for bp in p["blocks"].values():
        h = dit_block(h, c, bp, **blk)
    return unpatchify(final_layer(h, c, p["final"]), H // PCH, W // PCH)


def dit_tp_spec(path, w):
    """Megatron-style: q / k / v / fc1 column-parallel, o / fc2 row-parallel (their biases replicated)."""
    names = [getattr(k, "key", None) for k in path]
    if len(names) >= 2 and names[-2] in ("q", "k", "v"):
        return P(None, "tp", None) if names[-1] == "w" else P("tp", None)
    if len(names) >= 2 and names[-2] == "fc1":
        return P(None, "tp") if names[-1] == "w" else P("tp")
    if len(names) >= 2 and names[-2] in ("o", "fc2") and names[-1] == "w":
        return P("tp")
    return P()


def tree_specs(params, fn):
    return jax.tree_util.tree_map_with_path(fn, params)


def fsdp_specs(params, axis, n):
    """FSDP: a leaf whose leading dim divides by the axis size is sharded on it, others replicated."""
    return jax.tree.map(lambda w: P(axis) if np.shape(w)[0] % n == 0 else P(), params)


def ema_update(ema, params):
    return jax.tree.map(lambda e, q: EMA_DECAY * e + (1 - EMA_DECAY) * q, ema, params)


def latents(B):
    return np.tanh(R(B, IMG, IMG, CIN) + R(B, 1, 1, CIN, scale=0.5)).astype(np.float32)


def warm(step, args, batches):
    """runs the single-device step on batches; args: the leading carried arguments."""
    j = jax.jit(step)
    n = len(args)
    for b in batches:
        args = tuple(j(*args, *b)[:n])
    return tuple(jax.tree.map(np.asarray, a) for a in args)


# ---------------------------------------------------------------------------
# 1. DiT forward, heads / MLP over tp (dp2 x tp4).
B1 = 4


def dit_fwd(p, x, t, y, pos):
    return dit_apply(p, x, t, y, pos)


def dit_fwd_tp(bug):
    def f(p, x, t, y, pos):
        tp_sum = lambda o: psum(o, "tp")  # noqa: E731
        attn_red = (lambda o: psum(o, ("dp", "tp"))) if bug == "attn-psum-over-dp-tp" else tp_sum
        mlp_red = ident if bug == "fc2-no-psum" else tp_sum
        return dit_apply(p, x, t, y, pos, attn_red=attn_red, mlp_red=mlp_red)
    return f


P1 = dit_init(2)
PS1 = tree_specs(P1, dit_tp_spec)
C.smap("s.dit_adaln_zero_forward_heads_mlp_tp.dp2xtp4", {"dp": 2, "tp": 4}, dit_fwd_tp,
       (PS1, P("dp"), P("dp"), P("dp"), P()), P("dp"), dit_fwd,
       (P1, latents(B1), I(0, T_STEPS, B1), I(0, NC, B1), POS),
       bugs=[("fc2-no-psum", ["missing-all-reduce"]),
             ("attn-psum-over-dp-tp", ["wrong-collective-group", "wrong-axis"])])

# ---------------------------------------------------------------------------
# 2. DiT forward with latent rows over sp (dp2 x sp4): one row of patches per device.
B2, SP2 = 4, 4


def dit_fwd_sp(bug):
    def f(p, x, t, y, pos):
        n_loc = (x.shape[1] // PCH) * (x.shape[2] // PCH)
        start = 0 if bug == "pos-no-offset" else idx("sp") * n_loc
        pos_l = lax.dynamic_slice_in_dim(pos, start, n_loc, 1)

        def kv(a):
            if bug == "kv-gather-batch-axis":
                return lax.all_gather(a, "sp", tiled=True).reshape(a.shape[0], -1, *a.shape[2:])
            return lax.all_gather(a, "sp", axis=1, tiled=True)
        return dit_apply(p, x, t, y, pos_l, kv=kv)
    return f


P2 = dit_init(2)
C.smap("s.dit_patch_rows_seq_parallel_kv_gather.dp2xsp4", {"dp": 2, "sp": SP2}, dit_fwd_sp,
       (P(), P("dp", "sp"), P("dp"), P("dp"), P()), P("dp", "sp"), dit_fwd,
       (P2, latents(B2), I(0, T_STEPS, B2), I(0, NC, B2), POS),
       bugs=[("pos-no-offset", ["wrong-offset"]), ("kv-gather-batch-axis", ["wrong-layout", "wrong-shard-dim"])])

# ---------------------------------------------------------------------------
# 3. DDPM epsilon-prediction step, label dropout, clip + adamw, EMA (dp8).
B3 = 16
OPT3 = optax.chain(optax.clip_by_global_norm(4.0), optax.adamw(3e-3, weight_decay=0.01))


def eps_loss(p, x0, t, eps, y, drop, pos):
    y = jnp.where(drop, NC, y)                     # label dropout: the null class
    pred = dit_apply(p, q_sample(x0, t, eps), t, y, pos)
    return jnp.mean(jnp.square(pred - eps))


def ddpm_step(params, opt_state, ema, x0, t, eps, y, drop, pos):
    loss, g = jax.value_and_grad(eps_loss)(params, x0, t, eps, y, drop, pos)
    updates, opt_state = OPT3.update(g, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, ema_update(ema, params), loss


def ddpm_step_dp(bug):
    def f(params, opt_state, ema, x0, t, eps, y, drop, pos):
        loss, g = jax.value_and_grad(eps_loss)(params, x0, t, eps, y, drop, pos)
        if bug == "updates-pmean-local-opt":
            updates, opt_state = OPT3.update(g, opt_state, params)
            updates = pmean(updates, "dp")
        else:
            g = psum(g, "dp") if bug == "grad-psum-local-mean" else pmean(g, "dp")
            updates, opt_state = OPT3.update(g, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, ema_update(ema, params), pmean(loss, "dp")
    return f


def ddpm_batch(B):
    return (latents(B), np.sort(I(0, T_STEPS, B)), R(B, IMG, IMG, CIN), I(0, NC, B),
            rng.random(B) < 0.25, POS)


P3 = dit_init(1)
P3, S3, E3 = warm(ddpm_step, (P3, OPT3.init(P3), P3), [ddpm_batch(B3) for _ in range(2)])
DATA3 = ddpm_batch(B3)
C.smap("s.ddpm_eps_dit_label_dropout_clip_adamw_ema.dp8", {"dp": 8}, ddpm_step_dp,
       (P(), P(), P(), P("dp"), P("dp"), P("dp"), P("dp"), P("dp"), P()), (P(), P(), P(), P()), ddpm_step,
       (P3, S3, E3) + DATA3,
       bugs=[("grad-psum-local-mean", ["wrong-scale", "wrong-collective"]),
             ("updates-pmean-local-opt", ["local-statistic", "wrong-order"])])

# ---------------------------------------------------------------------------
# 4. v-prediction step with min-SNR weights under fsdp8, hand clipping, adamw, EMA.
B4, FS4, MAXN4 = 16, 8, 0.5
OPT4 = optax.adamw(1e-3, b2=0.99, weight_decay=0.05)


def v_loss(p, x0, t, eps, y, pos):
    ab = jnp.take(jnp.asarray(ALPHA_BAR), t)[:, None, None, None]
    v = jnp.sqrt(ab) * eps - jnp.sqrt(1.0 - ab) * x0
    pred = dit_apply(p, q_sample(x0, t, eps), t, y, pos)
    s = snr(t)
    w = jnp.minimum(s, SNR_GAMMA) / (s + 1.0)      # min-SNR-gamma for v-prediction
    return jnp.sum(w * jnp.mean(jnp.square(pred - v), (1, 2, 3)))


def clip_by_norm(g, g_norm, max_norm):
    """optax.clip_by_global_norm's rule given the norm."""
    trigger = g_norm < max_norm
    return jax.tree.map(lambda u: lax.select(trigger, u, u / g_norm * max_norm), g)


def vpred_step(params, opt_state, ema, x0, t, eps, y, pos):
    loss, g = jax.value_and_grad(lambda p: v_loss(p, x0, t, eps, y, pos) / x0.shape[0])(params)
    g_norm = optax.global_norm(g)
    g = clip_by_norm(g, g_norm, MAXN4)
    updates, opt_state = OPT4.update(g, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, ema_update(ema, params), {"loss": loss, "grad_norm": g_norm}


def vpred_step_fsdp(specs, ax="fsdp", n_glob=B4, dp=None):
    sharded = jax.tree.map(lambda s: s != P(), specs, is_leaf=lambda s: isinstance(s, P))
    data_axes = (dp, ax) if dp else ax

    def make(bug):
        def f(params, opt_state, ema, x0, t, eps, y, pos):
            full = jax.tree.map(lambda w, s: lax.all_gather(w, ax, axis=0, tiled=True) if s else w,
                                params, sharded)
            loss, g = jax.value_and_grad(lambda p: v_loss(p, x0, t, eps, y, pos) / n_glob)(full)

            def reduce(gf, w, s):
                if not s:
                    return psum(gf, data_axes)
                if bug == "grad-allreduce-slice-no-offset":
                    return lax.slice_in_dim(psum(gf, data_axes), 0, w.shape[0], axis=0)
                gs = lax.psum_scatter(gf, ax, scatter_dimension=0, tiled=True)
                return psum(gs, dp) if dp else gs
            g = jax.tree.map(reduce, g, params, sharded)
            if bug == "grad-norm-local-shards":
                g_norm = optax.global_norm(g)
            else:
                sq_sh = sum(jnp.sum(jnp.square(a)) for a, s in zip(jax.tree.leaves(g), jax.tree.leaves(sharded)) if s)
                sq_rep = sum(jnp.sum(jnp.square(a)) for a, s in zip(jax.tree.leaves(g), jax.tree.leaves(sharded))
                             if not s)
                g_norm = jnp.sqrt(psum(sq_sh, ax) + sq_rep)
            g = clip_by_norm(g, g_norm, MAXN4)
            updates, opt_state = OPT4.update(g, opt_state, params)
            params = optax.apply_updates(params, updates)
            return params, opt_state, ema_update(ema, params), {"loss": psum(loss, data_axes), "grad_norm": g_norm}
        return f
    return make


def vpred_batch(B):
    return latents(B), np.sort(I(0, T_STEPS, B)), R(B, IMG, IMG, CIN), I(0, NC, B), POS


P4 = dit_init(1)
P4, S4, E4 = warm(vpred_step, (P4, OPT4.init(P4), P4), [vpred_batch(B4) for _ in range(2)])
PS4 = fsdp_specs(P4, "fsdp", FS4)
SS4 = state_specs(S4, PS4)
C.smap("s.vpred_minsnr_fsdp_all_gather_psum_scatter_clip_adamw_ema.fsdp8", {"fsdp": FS4},
       vpred_step_fsdp(PS4),
       (PS4, SS4, PS4, P("fsdp"), P("fsdp"), P("fsdp"), P("fsdp"), P()),
       (PS4, SS4, PS4, {"loss": P(), "grad_norm": P()}), vpred_step, (P4, S4, E4) + vpred_batch(B4),
       bugs=[("grad-norm-local-shards", ["local-statistic", "missing-all-reduce"]),
             ("grad-allreduce-slice-no-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 5. classifier-free guidance DDIM sampler, CFG-parallel halves over dp2, DiT over tp4.
B5, CFG_W = 4, 1.5
DDIM_T = [999, 799, 599, 399, 199]


def ddim_update(x, eps, t, t_prev):
    ab = ALPHA_BAR[t]
    ab_prev = ALPHA_BAR[t_prev] if t_prev >= 0 else 1.0
    x0 = jnp.clip((x - math.sqrt(1 - ab) * eps) / math.sqrt(ab), -1.0, 1.0)
    return math.sqrt(ab_prev) * x0 + math.sqrt(1 - ab_prev) * eps


def cfg_sample(p, x, y, pos):
    """guided DDIM (eta = 0): the conditional and unconditional passes as one doubled batch."""
    B = x.shape[0]
    for t, t_prev in zip(DDIM_T, DDIM_T[1:] + [-1]):
        xin = jnp.concatenate([x, x], 0)
        yin = jnp.concatenate([y, jnp.full_like(y, NC)], 0)
        eps = dit_apply(p, xin, jnp.full((2 * B,), t, jnp.int32), yin, pos)
        eps_c, eps_u = jnp.split(eps, 2, 0)
        x = ddim_update(x, eps_u + CFG_W * (eps_c - eps_u), t, t_prev)
    return x


def cfg_sample_parallel(bug):
    def f(p, x, y, pos):
        half = idx("tp") if bug == "null-label-from-tp-rank" else idx("dp")    # 0: conditional, 1: null
        yl = jnp.where(half == 0, y, NC)
        tp_sum = lambda o: psum(o, "tp")  # noqa: E731
        for t, t_prev in zip(DDIM_T, DDIM_T[1:] + [-1]):
            eps = dit_apply(p, x, jnp.full((x.shape[0],), t, jnp.int32), yl, pos, attn_red=tp_sum, mlp_red=tp_sum)
            both = lax.all_gather(eps, "dp")                                      # [2, B, H, W, C]
            if bug == "halves-swapped":
                eps_c, eps_u = both[1], both[0]
            else:
                eps_c, eps_u = both[0], both[1]
            x = ddim_update(x, eps_u + CFG_W * (eps_c - eps_u), t, t_prev)
        return x
    return f


P5 = dit_init(1)
PS5 = tree_specs(P5, dit_tp_spec)
C.smap("s.cfg_ddim_sampler_cond_uncond_halves_over_dp.dp2xtp4", {"dp": 2, "tp": 4}, cfg_sample_parallel,
       (PS5, P(), P(), P()), P(), cfg_sample, (P5, R(B5, IMG, IMG, CIN), I(0, NC, B5), POS),
       bugs=[("halves-swapped", ["wrong-permutation"]), ("null-label-from-tp-rank", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 6. VAE training step, dp2 x fsdp4: reparameterisation with eps passed in, KL term, adam.
B6, XD6, H6, Z6, BETA6 = 32, 32, 32, 8, 0.5
OPT6 = optax.adam(2e-3)


def vae_init():
    return {"enc": dense(XD6, H6), "mu": dense(H6, Z6), "logvar": dense(H6, Z6, 0.1),
            "dec1": dense(Z6, H6), "dec2": dense(H6, XD6)}


def vae_terms(p, x, eps):
    """per-sample Gaussian reconstruction sum and KL(q(z|x) || N(0, I))."""
    h = jax.nn.gelu(x @ p["enc"]["w"] + p["enc"]["b"])
    mu = h @ p["mu"]["w"] + p["mu"]["b"]
    logvar = h @ p["logvar"]["w"] + p["logvar"]["b"]
    z = mu + jnp.exp(0.5 * logvar) * eps
    xr = jax.nn.gelu(z @ p["dec1"]["w"] + p["dec1"]["b"]) @ p["dec2"]["w"] + p["dec2"]["b"]
    rec = jnp.sum(jnp.square(xr - x), -1)
    kl = -0.5 * jnp.sum(1.0 + logvar - jnp.square(mu) - jnp.exp(logvar), -1)
    return rec, kl


def vae_loss(p, x, eps):
    rec, kl = vae_terms(p, x, eps)
    return jnp.mean(rec + BETA6 * kl)


def vae_step(params, opt_state, x, eps):
    loss, g = jax.value_and_grad(vae_loss)(params, x, eps)
    updates, opt_state = OPT6.update(g, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def vae_step_fsdp(bug):
    def f(params, opt_state, x, eps):
        full = jax.tree.map(lambda w: lax.all_gather(w, "fsdp", axis=0, tiled=True), params)

        def loss_fn(p):
            rec, kl = vae_terms(p, x, eps)
            kl_term = jnp.sum(kl) / x.shape[0] if bug == "kl-local-batch-mean" else jnp.sum(kl) / B6
            return jnp.sum(rec) / B6 + BETA6 * kl_term
        loss, g = jax.value_and_grad(loss_fn)(full)
        g = jax.tree.map(lambda a: lax.psum_scatter(a, "fsdp", scatter_dimension=0, tiled=True), g)
        if bug != "grad-no-dp-psum":
            g = psum(g, "dp")
        updates, opt_state = OPT6.update(g, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, psum(loss, ("dp", "fsdp"))
    return f


def vae_data(B):
    x = np.tanh(R(B, XD6) + R(B, 1, scale=0.5) + np.linspace(-1, 1, XD6, dtype=np.float32))
    return x.astype(np.float32), R(B, Z6)


P6 = vae_init()
P6, S6 = warm(vae_step, (P6, OPT6.init(P6)), [vae_data(B6) for _ in range(2)])
PS6 = jax.tree.map(lambda _: P("fsdp"), P6)
C.smap("s.vae_reparam_kl_fsdp_psum_scatter_adam.dp2xfsdp4", {"dp": 2, "fsdp": 4}, vae_step_fsdp,
       (PS6, state_specs(S6, PS6), P(("dp", "fsdp")), P(("dp", "fsdp"))), (PS6, state_specs(S6, PS6), P()),
       vae_step, (P6, S6) + vae_data(B6),
       bugs=[("grad-no-dp-psum", ["missing-all-reduce"]),
             ("kl-local-batch-mean", ["wrong-scale", "wrong-denominator"])])

# ---------------------------------------------------------------------------
# 7. GAN: discriminator step, then generator step against the updated discriminator (dp8).
B7, Z7, X7, H7 = 32, 8, 16, 32
OPT7 = optax.adam(2e-3, b1=0.5, b2=0.99)


def gan_init():
    g = {"l1": dense(Z7, H7), "l2": dense(H7, H7), "out": dense(H7, X7)}
    d = {"l1": dense(X7, H7), "l2": dense(H7 + 1, X7), "out": dense(X7, 1)}
    return g, d


def generator(p, z):
    h = jax.nn.leaky_relu(z @ p["l1"]["w"] + p["l1"]["b"], 0.2)
    h = jax.nn.leaky_relu(h @ p["l2"]["w"] + p["l2"]["b"], 0.2)
    return jnp.tanh(h @ p["out"]["w"] + p["out"]["b"])


def batch_moments(h):
    return jnp.mean(h, 0), jnp.mean(h * h, 0)


def discriminator(p, x, moments=batch_moments):
    """MLP discriminator with ProGAN's minibatch-stddev feature (the group: the whole batch)."""
    h = jax.nn.leaky_relu(x @ p["l1"]["w"] + p["l1"]["b"], 0.2)
    m, msq = moments(h)
    sd = jnp.mean(jnp.sqrt(jnp.maximum(msq - m * m, 0.0) + 1e-8))
    h = jnp.concatenate([h, jnp.broadcast_to(sd, (h.shape[0], 1))], -1)
    h = jax.nn.leaky_relu(h @ p["l2"]["w"] + p["l2"]["b"], 0.2)
    return (h @ p["out"]["w"] + p["out"]["b"])[:, 0]


def d_loss_fn(pd, pg, z, x_real, moments=batch_moments):
    fake = lax.stop_gradient(generator(pg, z))
    return (jnp.mean(jax.nn.softplus(-discriminator(pd, x_real, moments)))
            + jnp.mean(jax.nn.softplus(discriminator(pd, fake, moments))))


def g_loss_fn(pg, pd, z, moments=batch_moments):
    return jnp.mean(jax.nn.softplus(-discriminator(pd, generator(pg, z), moments)))


def gan_step(pg, pd, sg, sd, z_d, z_g, x_real):
    d_loss, gd = jax.value_and_grad(d_loss_fn)(pd, pg, z_d, x_real)
    upd, sd = OPT7.update(gd, sd, pd)
    pd = optax.apply_updates(pd, upd)
    g_loss, gg = jax.value_and_grad(g_loss_fn)(pg, pd, z_g)
    upd, sg = OPT7.update(gg, sg, pg)
    pg = optax.apply_updates(pg, upd)
    return pg, pd, sg, sd, {"d_loss": d_loss, "g_loss": g_loss}


def gan_step_dp(bug):
    def moments(h):
        m, msq = batch_moments(h)
        if bug == "mbstd-local-batch":
            return m, msq
        return pmean(m, "dp"), pmean(msq, "dp")

    def f(pg, pd, sg, sd, z_d, z_g, x_real):
        d_loss, gd = jax.value_and_grad(d_loss_fn)(pd, pg, z_d, x_real, moments)
        if bug != "d-grads-not-reduced":
            gd = pmean(gd, "dp")
        upd, sd = OPT7.update(gd, sd, pd)
        pd = optax.apply_updates(pd, upd)
        g_loss, gg = jax.value_and_grad(g_loss_fn)(pg, pd, z_g, moments)
        gg = pmean(gg, "dp")
        upd, sg = OPT7.update(gg, sg, pg)
        pg = optax.apply_updates(pg, upd)
        return pg, pd, sg, sd, {"d_loss": pmean(d_loss, "dp"), "g_loss": pmean(g_loss, "dp")}
    return f


def gan_data(B):
    modes = np.repeat(np.arange(4), B // 4)
    centres = np.stack([np.sin(np.arange(X7) * (k + 1) * 0.7) for k in range(4)]).astype(np.float32)
    x = np.tanh(centres[modes] * 1.5 + R(B, X7, scale=0.2))   # sorted by mode: devices see different modes
    return R(B, Z7), R(B, Z7), x.astype(np.float32)


G7, D7 = gan_init()
G7, D7, SG7, SD7 = warm(gan_step, (G7, D7, OPT7.init(G7), OPT7.init(D7)), [gan_data(B7) for _ in range(2)])
C.smap("s.gan_d_then_g_step_minibatch_stddev_adam.dp8", {"dp": 8}, gan_step_dp,
       (P(), P(), P(), P(), P("dp"), P("dp"), P("dp")), (P(), P(), P(), P(), P()), gan_step,
       (G7, D7, SG7, SD7) + gan_data(B7),
       bugs=[("mbstd-local-batch", ["local-statistic"]), ("d-grads-not-reduced", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 8. DiT epsilon step with min-SNR weights and label dropout, heads / MLP over tp (dp2 x tp4, check_vma).
B8 = 8
OPT8 = optax.adamw(1e-3, weight_decay=0.05)


def minsnr_eps_terms(p, x0, t, eps, y, drop, pos, **blk):
    y = jnp.where(drop, NC, y)
    pred = dit_apply(p, q_sample(x0, t, eps), t, y, pos, **blk)
    s = snr(t)
    return jnp.minimum(s, SNR_GAMMA) / s * jnp.mean(jnp.square(pred - eps), (1, 2, 3))


def minsnr_step(params, opt_state, ema, x0, t, eps, y, drop, pos):
    loss, g = jax.value_and_grad(lambda p: jnp.mean(minsnr_eps_terms(p, x0, t, eps, y, drop, pos)))(params)
    updates, opt_state = OPT8.update(g, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, ema_update(ema, params), loss


def minsnr_step_tp(bug):
    def f(params, opt_state, ema, x0, t, eps, y, drop, pos):
        def loss_fn(p):
            tp_sum = lambda o: psum(o, "tp")  # noqa: E731
            per = minsnr_eps_terms(p, x0, t, eps, y, drop, pos, attn_red=tp_sum, mlp_red=tp_sum,
                                   o_bias_in_partial=bug == "o-bias-before-psum")
            n = x0.shape[0] if bug == "loss-over-local-batch" else B8
            return psum(jnp.sum(per), "dp") / n
        loss, g = jax.value_and_grad(loss_fn)(params)                          # check_vma: grads reduced
        updates, opt_state = OPT8.update(g, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, ema_update(ema, params), loss
    return f


P8 = dit_init(1)
P8, S8, E8 = warm(minsnr_step, (P8, OPT8.init(P8), P8), [ddpm_batch(B8) for _ in range(2)])
PS8 = tree_specs(P8, dit_tp_spec)
SS8 = state_specs(S8, PS8)
C.smap("s.dit_minsnr_eps_step_heads_mlp_tp_adamw_ema.dp2xtp4", {"dp": 2, "tp": 4}, minsnr_step_tp,
       (PS8, SS8, PS8, P("dp"), P("dp"), P("dp"), P("dp"), P("dp"), P()), (PS8, SS8, PS8, P()), minsnr_step,
       (P8, S8, E8) + ddpm_batch(B8), check_vma=True,
       bugs=[("o-bias-before-psum", ["wrong-scale", "duplicated-term"]),
             ("loss-over-local-batch", ["wrong-denominator", "wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.


# 9. DiT forward with the CFG doubled batch, dp2 x tp4.
def cfg_eps(p, x, t, y, pos):
    xin = jnp.concatenate([x, x], 0)
    yin = jnp.concatenate([y, jnp.full_like(y, NC)], 0)
    eps_c, eps_u = jnp.split(dit_apply(p, xin, jnp.concatenate([t, t]), yin, pos), 2, 0)
    return eps_u + CFG_W * (eps_c - eps_u)


P9 = dit_init(2)
C.gspmd("g.dit_cfg_doubled_batch_forward_heads_mlp_tp.dp2xtp4", {"dp": 2, "tp": 4},
        (tree_specs(P9, dit_tp_spec), P("dp"), P("dp"), P("dp"), P()), P("dp"), cfg_eps,
        (P9, latents(4), I(0, T_STEPS, 4), I(0, NC, 4), POS))

# 10. DDPM epsilon step (clip + adamw + EMA), parameters and batch over fsdp8.
P10 = dit_init(1)
P10, S10, E10 = warm(ddpm_step, (P10, OPT3.init(P10), P10), [ddpm_batch(16) for _ in range(2)])
PS10 = fsdp_specs(P10, "fsdp", 8)
SS10 = state_specs(S10, PS10)
C.gspmd("g.ddpm_eps_dit_step_clip_adamw_ema_params_fsdp.fsdp8", {"fsdp": 8},
        (PS10, SS10, PS10, P("fsdp"), P("fsdp"), P("fsdp"), P("fsdp"), P("fsdp"), P()),
        (PS10, SS10, PS10, P()), ddpm_step, (P10, S10, E10) + ddpm_batch(16))

# 11. VAE step (adam), batch over dp8.
P11 = vae_init()
P11, S11 = warm(vae_step, (P11, OPT6.init(P11)), [vae_data(32) for _ in range(2)])
C.gspmd("g.vae_reparam_kl_step_adam.dp8", {"dp": 8}, (P(), P(), P("dp"), P("dp")), (P(), P(), P()),
        vae_step, (P11, S11) + vae_data(32))

# 12. GAN D-then-G step pair, hidden units over tp4, batch over dp2.
G12, D12 = gan_init()
G12, D12, SG12, SD12 = warm(gan_step, (G12, D12, OPT7.init(G12), OPT7.init(D12)), [gan_data(16) for _ in range(2)])


def gan_tp_spec(path, w):
    names = [getattr(k, "key", None) for k in path]
    if names[-2] in ("l1",):
        return P(None, "tp") if names[-1] == "w" else P("tp")
    if names[-2] == "out" and names[-1] == "w" and np.shape(w)[0] == H7:
        return P("tp", None)
    return P()


GS12, DS12 = tree_specs(G12, gan_tp_spec), tree_specs(D12, gan_tp_spec)
C.gspmd("g.gan_d_then_g_step_mbstd_hidden_tp.dp2xtp4", {"dp": 2, "tp": 4},
        (GS12, DS12, state_specs(SG12, GS12), state_specs(SD12, DS12), P("dp"), P("dp"), P("dp")),
        (GS12, DS12, state_specs(SG12, GS12), state_specs(SD12, DS12), P()), gan_step,
        (G12, D12, SG12, SD12) + gan_data(16))

# 13. v-prediction min-SNR step, parameters over fsdp4, batch over (dp2, fsdp4).
P13 = dit_init(1)
P13, S13, E13 = warm(vpred_step, (P13, OPT4.init(P13), P13), [vpred_batch(16) for _ in range(2)])
PS13 = fsdp_specs(P13, "fsdp", 4)
SS13 = state_specs(S13, PS13)
BT13 = P(("dp", "fsdp"))
C.gspmd("g.vpred_minsnr_step_clip_adamw_ema_params_fsdp.dp2xfsdp4", {"dp": 2, "fsdp": 4},
        (PS13, SS13, PS13, BT13, BT13, BT13, BT13, P()), (PS13, SS13, PS13, {"loss": P(), "grad_norm": P()}),
        vpred_step, (P13, S13, E13) + vpred_batch(16))

# 14. CFG DDIM sampler by lax.fori_loop over a timestep table, dp4 x tp2.
DDIM14 = np.array([999, 899, 799, 699, 599, 499, 399, 299, 199, 99], np.int32)


def cfg_sample_loop(p, x, y, pos):
    ts = jnp.asarray(DDIM14)
    ab_tab = jnp.asarray(ALPHA_BAR)

    def body(i, x):
        t = ts[i]
        ab = ab_tab[t]
        ab_prev = jnp.where(i + 1 < ts.shape[0], ab_tab[ts[jnp.minimum(i + 1, ts.shape[0] - 1)]], 1.0)
        eps = cfg_eps(p, x, jnp.full((x.shape[0],), t), y, pos)
        x0 = jnp.clip((x - jnp.sqrt(1 - ab) * eps) / jnp.sqrt(ab), -1.0, 1.0)
        return jnp.sqrt(ab_prev) * x0 + jnp.sqrt(1 - ab_prev) * eps
    return lax.fori_loop(0, ts.shape[0], body, x)


P14 = dit_init(1)
C.gspmd("g.cfg_ddim_sampler_fori_loop_heads_mlp_tp.dp4xtp2", {"dp": 4, "tp": 2},
        (tree_specs(P14, dit_tp_spec), P("dp"), P("dp"), P()), P("dp"), cfg_sample_loop,
        (P14, R(8, IMG, IMG, CIN), I(0, NC, 8), POS))

C.finish()
