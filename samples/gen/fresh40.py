"""samples/fresh40: a 40th batch of programs as a user writes them, on the
theme of complete small models written the way model libraries write them
(T5, ViT, Mamba, GPT-2, BERT, Swin, Perceiver, Conformer, a 1-D UNet), run
under GSPMD (jax.jit with in/out shardings and with_sharding_constraint,
the partitioner choosing the collectives) and as hand-written shard_map
equivalents, none of them an idiom of samples/fresh .. fresh37, probe,
train or wild.
GSPMD pairs (jax.jit with in/out shardings; correct by construction):
 g1/g2. a T5 encoder block (RMSNorm without bias or mean, bidirectional
    relative position buckets as in t5x with a learned (bucket, head) bias,
    no 1/sqrt(d) scaling, ReLU FFN, padding mask): data parallel over dp8,
    and dp2 x tp4 with heads, bias columns and the FFN over tp and a
    with_sharding_constraint on the per-head attention output.
 g3/g4. a ViT: patch embedding as a stride-4 lax.conv_general_dilated
    (NHWC/HWIO), class token concatenated, learned positions, a pre-LN block
    with fused qkv (D, 3, H, E), classifier on the class token: batch over
    dp4, and FSDP-style on dp2 x fsdp4 (the batch over both, every kernel
    P('fsdp', ...) on its first dim).
 g5/g6. a Mamba-style block: x and gate projections, depthwise causal
    conv1d written as a sum of shifted slices, SiLU, input-dependent dt
    (low rank + softplus), B, C, A = -exp(A_log), the selective scan by
    lax.scan (g5) or lax.associative_scan (g6), D skip, SiLU(z) gate, out
    projection: the inner channels over tp4 (x dp2), and the sequence over
    sp4.
 g7/g8. a GPT-2 model (learned wte / wpe, fused c_attn with bias, causal
    attention, gelu_new MLP, ln_f, logits tied to wte): the vocabulary and
    c_attn / c_fc columns over tp4, and dp2 x tp4 with constraints on the
    hidden states (batch over dp) and on the logits (vocab over tp).
 g9-g11. a BERT MLM head: the hidden states at the masked positions
    gathered with take_along_axis, dense + erf GELU + LayerNorm(1e-12),
    decoder tied to the word embeddings plus an output bias, weighted mean
    NLL over masked positions: batch over dp4, the vocabulary over tp4,
    and the hidden states' sequence over sp4 (the gather crosses shards).
 g12/g13. a Swin block with shifted windows: jnp.roll by -2 on H and W,
    window partition by reshape/transpose, attention with a relative
    position bias table indexed by the (ws*ws, ws*ws) relative index and
    the shifted-window mask (-100), windows merged, rolled back, MLP: batch
    over dp2, and the image rows over sp4.
 g14/g15. a Perceiver block: learned latents cross-attending (2 heads) to
    a masked input array, latent MLP, a latent self-attention block: batch
    over dp4, and the input array's length over sp4.
 g16/g17. a Conformer block (half-step FFNs with swish, MHSA, the
    convolution module: pointwise conv + GLU, depthwise conv k=5 with
    feature_group_count, inference BatchNorm, swish, pointwise conv; final
    LayerNorm): dp2 x tp4 with heads, FFN and conv channels over tp and the
    residual constrained to the batch over dp, and the sequence over sp4.
 g18/g19. a 1-D UNet denoiser (sinusoidal timestep embedding + MLP added
    per level, SAME convs, a stride-2 downsampling conv, nearest upsampling
    by jnp.repeat, skip concatenation): batch over dp4, length over sp4.
 g20. a GPT-2 training step, optax.adamw, FSDP over fsdp8 (every matrix
    whose first dim divides P('fsdp', None), the batch over fsdp).
 g21. a ViT training step, optax.lion with weight decay, dp2 x tp4
    (heads and MLP over tp).
 g22. a T5 encoder regression step (mean pooled), optax.adafactor with
    factored second moments (min_dim_size_to_factor=8), FSDP over fsdp4.
 g23. a BERT (one post-LN layer + the MLM head) step, optax.adamw, dp2 x
    tp4 with with_sharding_constraint on hidden states, per-head activations
    and the gathered logits.
 g24. a Conformer step, optax.lion, the sequence over sp4 with the residual
    stream constrained to P(None, 'sp', None).
 g25. a 1-D UNet epsilon-prediction step (cosine schedule, clipping by the
    global norm chained before optax.adamw), batch over dp4.
shard_map families (hand-written equivalents, with bugs):
 1. GPT-2 with the tied embedding vocab-parallel over tp4: masked local
    embedding lookup psum'd, blocks replicated, tied logits on the local
    vocabulary, cross-entropy with pmax / psum'd log-sum-exp and the target
    logit psum'd. Bugs: lookup without the vocab offset, log-sum-exp of the
    local vocabulary only, target logit not psum'd.
 2. ViT forward, batch over dp2, heads and MLP over tp4 (Megatron column /
    row parallel, the qkv kernel sliced on its head dim). Bugs: attention
    output projection not psum'd, MLP psum'd over dp instead of tp, scores
    scaled by sqrt of the local heads' width.
 3. Swin shifted-window attention with the image rows over sp4 (one window
    row per device): the cyclic roll by -2 rows as a ppermute of the next
    device's first rows, the shifted-window mask from global rows
    (axis_index), the roll back as a ppermute of the previous device's last
    rows. Bugs: first exchange in the wrong direction, mask from local rows,
    no roll back.
 4. Mamba block with the sequence over sp4: causal-conv halo (last 3 tokens
    of the left neighbour, zeros on device 0), a local selective scan from
    zero state, and the incoming state from an all_gather of every device's
    end state and total decay combined in order. Bugs: halo from the right
    neighbour, cyclic halo (device 0 gets the last device's tail), carry
    summed without the decays in between.
 5. BERT MLM head, batch over dp2, vocabulary over tp4, weighted mean over
    masked positions (unequal per-row weights, some rows with none) by psum
    of numerator and denominator. Bugs: pmean of per-shard means, label
    without the vocab offset, log-sum-exp with the local maximum.
 6. Perceiver cross-attention with the input array over sp4 and latents
    replicated: the softmax combined with pmax and psum'd numerator and
    denominator. Bugs: denominator not psum'd, local max instead of pmax,
    the input mask ignored.
 7. Conformer convolution module + half-step FFN with the sequence over sp4:
    a 2-token halo from both neighbours (zeros at the ends) for the k=5
    depthwise conv. Bugs: right halo zeroed, halos swapped, cyclic halos.
 8. a GPT-2 training step by hand, ZeRO-3 style, over fsdp4: matrices
    all_gather'd inside, gradients of the gathered matrices psum_scatter'd
    and divided, of the replicated vectors pmean'd, optax.adamw on the
    shards, the loss pmean'd. Bugs: replicated gradients not averaged, the
    local slice of the local gradient taken instead of the reduce-scatter,
    the returned loss not pmean'd.
Numerics: correct pairs agree with the baseline at rounding level (f32,
within ~1e-6); every bug variant differs clearly (see "numerics"). Two
exceptions are still rounding only: the GPT-2 AdamW steps (g20, family 8)
and the BERT step (g23) differ by 1e-5 .. 3e-5 because the gradient of a
key-projection bias is exactly zero in exact arithmetic (softmax is
invariant to it) and rounding noise of ~1e-9 there is normalised by Adam's
first step; eps=1e-6 (as BERT and many GPT-2 recipes use) keeps it at that
level. The ViT uses BEiT-style q / v biases without a key bias for the same
reason (Lion's sign update would turn the noise into +-lr).
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh40.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P, NamedSharding
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh40.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh40.py"
C = Corpus("samples/fresh40", SCRIPT, "samples/gen/run_fresh40.sh", sys.argv[1:])
rng, R, I = seeded(4040)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index


def W(*shape):
    return R(*shape, scale=1.0 / np.sqrt(shape[0]))


def layer_norm(x, g, b, eps=1e-5):
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps) * g + b


def t5_norm(x, g, eps=1e-6):
    var = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
    return g * (x * lax.rsqrt(var + eps))


def wsc(mesh, spec):
    return lambda x: lax.with_sharding_constraint(x, NamedSharding(mesh, spec))


def ident(x):
    return x


def specs_by(params, rule):
    return {k: rule(k, v) for k, v in params.items()}


# ===========================================================================
# T5 encoder block
D5, H5, E5, F5, T5L = 16, 4, 4, 32, 8


def t5_buckets(qlen, klen, num_buckets=8, max_distance=16):
    ctx = jnp.arange(qlen, dtype=jnp.int32)[:, None]
    mem = jnp.arange(klen, dtype=jnp.int32)[None, :]
    n = -(mem - ctx)
    num_buckets //= 2
    ret = (n < 0).astype(jnp.int32) * num_buckets
    n = jnp.abs(n)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    val_if_large = max_exact + (
        jnp.log(n.astype(jnp.float32) / max_exact + np.finfo(np.float32).eps)
        / np.log(max_distance / max_exact) * (num_buckets - max_exact)).astype(jnp.int32)
    val_if_large = jnp.minimum(val_if_large, num_buckets - 1)
    return ret + jnp.where(is_small, n, val_if_large)


def t5_block(p, x, mask, head_cons=ident):
    h = t5_norm(x, p["ln1"])
    q = jnp.einsum("btd,dhe->bthe", h, p["wq"])
    k = jnp.einsum("btd,dhe->bthe", h, p["wk"])
    v = jnp.einsum("btd,dhe->bthe", h, p["wv"])
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k)
    bias = p["rel"][t5_buckets(x.shape[1], x.shape[1])]  # (q, k, h)
    s = s + jnp.transpose(bias, (2, 0, 1))[None]
    s = jnp.where(mask[:, None, None, :] > 0, s, -1e9)
    o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, axis=-1), v)
    o = head_cons(o)
    x = x + jnp.einsum("bqhe,hed->bqd", o, p["wo"])
    h = t5_norm(x, p["ln2"])
    return x + jax.nn.relu(h @ p["wi"]) @ p["wo_ff"]


def t5_params():
    return {"ln1": 1 + R(D5, scale=0.1), "wq": W(D5, H5, E5), "wk": W(D5, H5, E5), "wv": W(D5, H5, E5),
            "wo": R(H5, E5, D5, scale=0.25), "rel": R(8, H5, scale=0.5), "ln2": 1 + R(D5, scale=0.1),
            "wi": W(D5, F5), "wo_ff": W(F5, D5)}


def pad_mask(b, t, lens):
    return (np.arange(t)[None, :] < np.asarray(lens)[:, None]).astype(np.float32)


PT5 = t5_params()
XT5 = R(8, T5L, D5)
MT5 = pad_mask(8, T5L, [8, 5, 7, 3, 8, 6, 2, 8])
T5_REP = {k: P() for k in PT5}
T5_TP = {"ln1": P(), "wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"), "wo": P("tp"),
         "rel": P(None, "tp"), "ln2": P(), "wi": P(None, "tp"), "wo_ff": P("tp")}
M_DT = make_mesh({"dp": 2, "tp": 4})

C.gspmd("g.t5_encoder_block_relbias.dp8", {"dp": 8}, (T5_REP, P("dp"), P("dp")), P("dp"),
        lambda p, x, m: t5_block(p, x, m), (PT5, XT5, MT5))
C.gspmd("g.t5_encoder_block_relbias.dp2xtp4", {"dp": 2, "tp": 4}, (T5_TP, P("dp"), P("dp")), P("dp"),
        lambda p, x, m: t5_block(p, x, m, head_cons=wsc(M_DT, P("dp", None, "tp", None))), (PT5, XT5, MT5))

# ===========================================================================
# ViT
DV, HV, EV, FV, NCV, PS = 16, 4, 4, 32, 10, 4


def vit(p, img):
    x = vit_embed(p, img)
    h = layer_norm(x, p["ln1_g"], p["ln1_b"], eps=1e-6)
    qkv = jnp.einsum("btd,dkhe->kbthe", h, p["qkv"]) + vit_qkv_bias(p)[:, None, None]
    q, k, v = qkv[0], qkv[1], qkv[2]
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(EV)
    o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)
    x = x + jnp.einsum("bqhe,hed->bqd", o, p["proj"]) + p["proj_b"]
    h = layer_norm(x, p["ln2_g"], p["ln2_b"], eps=1e-6)
    x = x + jax.nn.gelu(h @ p["fc1"] + p["fc1_b"], approximate=False) @ p["fc2"] + p["fc2_b"]
    return vit_head(p, x)


def vit_qkv_bias(p):
    """BEiT-style: learned query and value biases, no key bias (its gradient is zero)."""
    return jnp.stack([p["q_b"], jnp.zeros_like(p["q_b"]), p["v_b"]])


def vit_head(p, x):
    x = layer_norm(x, p["lnf_g"], p["lnf_b"], eps=1e-6)
    return x[:, 0] @ p["head"] + p["head_b"]


def vit_embed(p, img):
    pt = lax.conv_general_dilated(img, p["patch_w"], (PS, PS), "VALID",
                                  dimension_numbers=("NHWC", "HWIO", "NHWC")) + p["patch_b"]
    b = pt.shape[0]
    pt = pt.reshape(b, -1, DV)
    cls = jnp.broadcast_to(p["cls"], (b, 1, DV))
    return jnp.concatenate([cls, pt], axis=1) + p["pos"]


def vit_params():
    return {"patch_w": R(PS, PS, 3, DV, scale=0.15), "patch_b": R(DV, scale=0.1), "cls": R(1, 1, DV, scale=0.5),
            "pos": R(1, 17, DV, scale=0.5), "ln1_g": 1 + R(DV, scale=0.1), "ln1_b": R(DV, scale=0.1),
            "qkv": W(DV, 3, HV, EV), "q_b": R(HV, EV, scale=0.1), "v_b": R(HV, EV, scale=0.1), "proj": R(HV, EV, DV, scale=0.25),
            "proj_b": R(DV, scale=0.1), "ln2_g": 1 + R(DV, scale=0.1), "ln2_b": R(DV, scale=0.1),
            "fc1": W(DV, FV), "fc1_b": R(FV, scale=0.1), "fc2": W(FV, DV), "fc2_b": R(DV, scale=0.1),
            "lnf_g": 1 + R(DV, scale=0.1), "lnf_b": R(DV, scale=0.1), "head": W(DV, NCV),
            "head_b": R(NCV, scale=0.1)}


PV = vit_params()
IMG = R(8, 16, 16, 3)
V_REP = {k: P() for k in PV}
V_FSDP = {k: (P("fsdp") if v.ndim >= 2 and v.shape[0] % 4 == 0 else P()) for k, v in PV.items()}
C.gspmd("g.vit_patch_conv_cls_token.dp4", {"dp": 4}, (V_REP, P("dp")), P("dp"), vit, (PV, IMG))
C.gspmd("g.vit_patch_conv_cls_token_fsdp.dp2xfsdp4", {"dp": 2, "fsdp": 4}, (V_FSDP, P(("dp", "fsdp"))),
        P(("dp", "fsdp")), vit, (PV, IMG))

# ===========================================================================
# Mamba-style block
DM, DI, NS, KC, RK, LM = 8, 16, 4, 4, 4, 16


def mamba_pre(p, x):
    xs, z = x @ p["w_x"], x @ p["w_z"]
    L = x.shape[1]
    xp = jnp.pad(xs, ((0, 0), (KC - 1, 0), (0, 0)))
    xc = sum(xp[:, k:k + L] * p["conv_w"][k] for k in range(KC)) + p["conv_b"]
    return jax.nn.silu(xc), z


def mamba_ssm_inputs(p, xc):
    dt = jax.nn.softplus((xc @ p["w_dtr"]) @ p["w_dt"] + p["b_dt"])  # (b, l, di)
    A = -jnp.exp(p["A_log"])  # (di, n)
    Bm, Cm = xc @ p["w_B"], xc @ p["w_C"]  # (b, l, n)
    dA = jnp.exp(dt[..., None] * A)  # (b, l, di, n)
    dBx = (dt * xc)[..., None] * Bm[:, :, None, :]
    return dA, dBx, Cm


def mamba_post(p, x, xc, z, y):
    y = y + xc * p["D"]
    y = y * jax.nn.silu(z)
    return x + y @ p["w_out"]


def mamba(p, x, assoc=False):
    xc, z = mamba_pre(p, x)
    dA, dBx, Cm = mamba_ssm_inputs(p, xc)
    if assoc:
        def comb(a, b):
            return a[0] * b[0], b[0] * a[1] + b[1]
        _, h = lax.associative_scan(comb, (dA, dBx), axis=1)
    else:
        def step(hc, inp):
            a, bx = inp
            hc = a * hc + bx
            return hc, hc
        h0 = jnp.zeros((x.shape[0], DI, NS), x.dtype)
        _, h = lax.scan(step, h0, (jnp.swapaxes(dA, 0, 1), jnp.swapaxes(dBx, 0, 1)))
        h = jnp.swapaxes(h, 0, 1)
    y = jnp.einsum("bldn,bln->bld", h, Cm)
    return mamba_post(p, x, xc, z, y)


def mamba_params():
    return {"w_x": W(DM, DI), "w_z": W(DM, DI), "conv_w": R(KC, DI, scale=0.5), "conv_b": R(DI, scale=0.1),
            "w_dtr": W(DI, RK), "w_dt": W(RK, DI), "b_dt": R(DI, scale=0.3) - 1.0,
            "A_log": np.log(rng.uniform(0.03, 0.2, (DI, NS))).astype(np.float32),
            "w_B": W(DI, NS), "w_C": W(DI, NS), "D": 1 + R(DI, scale=0.1), "w_out": W(DI, DM)}


PM = mamba_params()
XM = R(4, LM, DM)
M_TP = {"w_x": P(None, "tp"), "w_z": P(None, "tp"), "conv_w": P(None, "tp"), "conv_b": P("tp"),
        "w_dtr": P("tp"), "w_dt": P(None, "tp"), "b_dt": P("tp"), "A_log": P("tp"), "w_B": P("tp"),
        "w_C": P("tp"), "D": P("tp"), "w_out": P("tp")}
M_REP = {k: P() for k in PM}
C.gspmd("g.mamba_gated_conv_scan_inner_tp.dp2xtp4", {"dp": 2, "tp": 4}, (M_TP, P("dp")), P("dp"),
        lambda p, x: mamba(p, x), (PM, XM))
C.gspmd("g.mamba_gated_conv_assoc_scan_seq.sp4", {"sp": 4}, (M_REP, P(None, "sp")), P(None, "sp"),
        lambda p, x: mamba(p, x, assoc=True), (PM, XM))

# ===========================================================================
# GPT-2
VG, TG, DG, HG, EG = 32, 8, 16, 4, 4


def gpt2(p, tok, hid_cons=ident):
    x = jnp.take(p["wte"], tok, axis=0) + p["wpe"][:tok.shape[1]]
    return gpt2_trunk(p, hid_cons(x), hid_cons) @ p["wte"].T


def gpt2_trunk(p, x, hid_cons=ident):
    b, t, _ = x.shape
    h = layer_norm(x, p["ln1_g"], p["ln1_b"])
    qkv = h @ p["c_attn"] + p["c_attn_b"]
    q, k, v = jnp.split(qkv, 3, axis=-1)
    split = lambda a: a.reshape(b, t, HG, EG).transpose(0, 2, 1, 3)
    q, k, v = split(q), split(k), split(v)
    w = (q @ k.transpose(0, 1, 3, 2)) / np.sqrt(EG)
    causal = jnp.tril(jnp.ones((t, t), bool))
    w = jnp.where(causal, w, jnp.finfo(w.dtype).min)
    a = (jax.nn.softmax(w, -1) @ v).transpose(0, 2, 1, 3).reshape(b, t, DG)
    x = hid_cons(x + a @ p["c_proj"] + p["c_proj_b"])
    h = layer_norm(x, p["ln2_g"], p["ln2_b"])
    x = x + jax.nn.gelu(h @ p["c_fc"] + p["c_fc_b"], approximate=True) @ p["mlp_proj"] + p["mlp_proj_b"]
    return layer_norm(hid_cons(x), p["lnf_g"], p["lnf_b"])


def gpt2_params():
    return {"wte": R(VG, DG, scale=0.3), "wpe": R(16, DG, scale=0.1), "ln1_g": 1 + R(DG, scale=0.1),
            "ln1_b": R(DG, scale=0.1), "c_attn": W(DG, 3 * DG), "c_attn_b": R(3 * DG, scale=0.1),
            "c_proj": W(DG, DG), "c_proj_b": R(DG, scale=0.1), "ln2_g": 1 + R(DG, scale=0.1),
            "ln2_b": R(DG, scale=0.1), "c_fc": W(DG, 4 * DG), "c_fc_b": R(4 * DG, scale=0.1),
            "mlp_proj": W(4 * DG, DG), "mlp_proj_b": R(DG, scale=0.1), "lnf_g": 1 + R(DG, scale=0.1),
            "lnf_b": R(DG, scale=0.1)}


PG = gpt2_params()
TOKG = I(0, VG, 4, TG)
G_TP = {k: P() for k in PG}
G_TP.update({"wte": P("tp"), "c_attn": P(None, "tp"), "c_attn_b": P("tp"), "c_fc": P(None, "tp"),
             "c_fc_b": P("tp"), "mlp_proj": P("tp")})
C.gspmd("g.gpt2_tied_wte_vocab_tp.tp4", {"tp": 4}, (G_TP, P()), P(None, None, "tp"), gpt2, (PG, TOKG))


def gpt2_dt(p, tok):
    lg = gpt2(p, tok, hid_cons=wsc(M_DT, P("dp", None, None)))
    return lax.with_sharding_constraint(lg, NamedSharding(M_DT, P("dp", None, "tp")))


C.gspmd("g.gpt2_tied_wte_constrained.dp2xtp4", {"dp": 2, "tp": 4}, (G_TP, P("dp")), P("dp", None, "tp"),
        gpt2_dt, (PG, TOKG))

# ===========================================================================
# BERT MLM head
VB, DB, TB, MB = 32, 16, 16, 4


def mlm_head(p, hidden, pos, labels, w, logit_cons=ident):
    g = jnp.take_along_axis(hidden, pos[..., None], axis=1)  # (b, m, d)
    h = jax.nn.gelu(g @ p["dense"] + p["dense_b"], approximate=False)
    h = layer_norm(h, p["ln_g"], p["ln_b"], eps=1e-12)
    logits = logit_cons(h @ p["emb"].T + p["out_b"])
    logp = jax.nn.log_softmax(logits, -1)
    nll = -jnp.take_along_axis(logp, labels[..., None], -1)[..., 0]
    return jnp.sum(nll * w) / (jnp.sum(w) + 1e-5)


def mlm_params():
    return {"dense": W(DB, DB), "dense_b": R(DB, scale=0.1), "ln_g": 1 + R(DB, scale=0.1),
            "ln_b": R(DB, scale=0.1), "emb": R(VB, DB, scale=0.5), "out_b": R(VB, scale=0.1)}


def masked_positions(b, t, m):
    return np.stack([np.sort(rng.choice(t, m, replace=False)) for _ in range(b)]).astype(np.int32)


PB = mlm_params()
HB = R(8, TB, DB)
POSB = masked_positions(8, TB, MB)
LABB = I(0, VB, 8, MB)
WB = (rng.uniform(size=(8, MB)) < 0.7).astype(np.float32)
WB[3] = 0.0
B_REP = {k: P() for k in PB}
B_TP = dict(B_REP, emb=P("tp"), out_b=P("tp"))
MLM_ARGS = (PB, HB, POSB, LABB, WB)
C.gspmd("g.bert_mlm_head_gather_masked.dp4", {"dp": 4}, (B_REP, P("dp"), P("dp"), P("dp"), P("dp")), P(),
        mlm_head, MLM_ARGS)
C.gspmd("g.bert_mlm_head_vocab_tp.tp4", {"tp": 4}, (B_TP, P(), P(), P(), P()), P(), mlm_head, MLM_ARGS)
C.gspmd("g.bert_mlm_head_gather_seq_sharded.sp4", {"sp": 4}, (B_REP, P(None, "sp"), P(), P(), P()), P(),
        mlm_head, MLM_ARGS)

# ===========================================================================
# Swin block
WS, SH, CS, HS = 4, 2, 8, 2


def rel_index(ws):
    coords = np.stack(np.meshgrid(np.arange(ws), np.arange(ws), indexing="ij")).reshape(2, -1)
    rel = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0) + (ws - 1)
    return (rel[..., 0] * (2 * ws - 1) + rel[..., 1]).astype(np.int32)


def window_partition(x, ws):
    b, h, w, c = x.shape
    x = x.reshape(b, h // ws, ws, w // ws, ws, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, ws * ws, c)


def window_reverse(win, ws, b, h, w):
    c = win.shape[-1]
    x = win.reshape(b, h // ws, w // ws, ws, ws, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(b, h, w, c)


def shift_mask(h, w, ws, sh, row0=0, rows=None):
    """The shifted-window attention mask of the windows in image rows
    [row0, row0 + rows) (all rows by default): (n_windows, ws*ws, ws*ws)."""
    img = np.zeros((1, h, w, 1), np.float32)
    cnt = 0
    for hs in (slice(0, -ws), slice(-ws, -sh), slice(-sh, None)):
        for wsl in (slice(0, -ws), slice(-ws, -sh), slice(-sh, None)):
            img[:, hs, wsl, :] = cnt
            cnt += 1
    rows = h if rows is None else rows
    mw = window_partition(img[:, row0:row0 + rows], ws)[..., 0]
    am = mw[:, None, :] - mw[:, :, None]
    return np.where(am != 0, -100.0, 0.0).astype(np.float32)


RELI = rel_index(WS)


def swin_attn(p, win, mask, nw):
    """win (b*nw, n, c) windows; mask (nw, n, n) or None."""
    bw, n, c = win.shape
    e = c // HS
    qkv = (win @ p["qkv"] + p["qkv_b"]).reshape(bw, n, 3, HS, e).transpose(2, 0, 3, 1, 4)
    q, k, v = qkv[0] * (e ** -0.5), qkv[1], qkv[2]
    a = q @ jnp.swapaxes(k, -1, -2)  # (bw, heads, n, n)
    a = a + jnp.transpose(p["rel_table"][RELI], (2, 0, 1))[None]
    if mask is not None:
        a = a.reshape(bw // nw, nw, HS, n, n) + mask[None, :, None]
        a = a.reshape(bw, HS, n, n)
    o = (jax.nn.softmax(a, -1) @ v).transpose(0, 2, 1, 3).reshape(bw, n, c)
    return o @ p["proj"] + p["proj_b"]


def swin_block(p, x):
    b, h, w, c = x.shape
    sc = x
    y = layer_norm(x, p["n1_g"], p["n1_b"])
    y = jnp.roll(y, shift=(-SH, -SH), axis=(1, 2))
    nw = (h // WS) * (w // WS)
    o = swin_attn(p, window_partition(y, WS), jnp.asarray(shift_mask(h, w, WS, SH)), nw)
    y = jnp.roll(window_reverse(o, WS, b, h, w), shift=(SH, SH), axis=(1, 2))
    x = sc + y
    y = layer_norm(x, p["n2_g"], p["n2_b"])
    return x + jax.nn.gelu(y @ p["fc1"] + p["fc1_b"]) @ p["fc2"] + p["fc2_b"]


def swin_params():
    return {"n1_g": 1 + R(CS, scale=0.1), "n1_b": R(CS, scale=0.1), "qkv": W(CS, 3 * CS),
            "qkv_b": R(3 * CS, scale=0.1), "rel_table": R((2 * WS - 1) ** 2, HS, scale=0.5),
            "proj": W(CS, CS), "proj_b": R(CS, scale=0.1), "n2_g": 1 + R(CS, scale=0.1),
            "n2_b": R(CS, scale=0.1), "fc1": W(CS, 4 * CS), "fc1_b": R(4 * CS, scale=0.1),
            "fc2": W(4 * CS, CS), "fc2_b": R(CS, scale=0.1)}


PS_ = swin_params()
XS = R(2, 16, 8, CS)
S_REP = {k: P() for k in PS_}
C.gspmd("g.swin_shifted_window_roll.dp2", {"dp": 2}, (S_REP, P("dp")), P("dp"), swin_block, (PS_, XS))
C.gspmd("g.swin_shifted_window_roll_rows.sp4", {"sp": 4}, (S_REP, P(None, "sp")), P(None, "sp"), swin_block,
        (PS_, XS))

# ===========================================================================
# Perceiver
NL, DL, DIN, HP, MP = 4, 16, 8, 2, 16


def mha_qkv(q_in, kv_in, wq, wk, wv, wo, kmask=None):
    q = jnp.einsum("bnd,dhe->bhne", q_in, wq)
    k = jnp.einsum("bmd,dhe->bhme", kv_in, wk)
    v = jnp.einsum("bmd,dhe->bhme", kv_in, wv)
    s = jnp.einsum("bhne,bhme->bhnm", q, k) * (q.shape[-1] ** -0.5)
    if kmask is not None:
        s = jnp.where(kmask[:, None, None, :], s, -1e30)
    o = jnp.einsum("bhnm,bhme->bhne", jax.nn.softmax(s, -1), v)
    return jnp.einsum("bhne,hed->bnd", o, wo)


def perceiver(p, inp, inmask):
    b = inp.shape[0]
    lat = jnp.broadcast_to(p["latents"], (b, NL, DL))
    kv = layer_norm(inp, p["in_g"], p["in_b"])
    lat = lat + mha_qkv(layer_norm(lat, p["lq_g"], p["lq_b"]), kv, p["cq"], p["ck"], p["cv"], p["co"], inmask > 0)
    return perceiver_rest(p, lat)


def perceiver_rest(p, lat):
    lat = lat + jax.nn.gelu(layer_norm(lat, p["m1_g"], p["m1_b"]) @ p["m1_w1"]) @ p["m1_w2"]
    h = layer_norm(lat, p["sa_g"], p["sa_b"])
    lat = lat + mha_qkv(h, h, p["sq"], p["sk"], p["sv"], p["so"])
    return lat + jax.nn.gelu(layer_norm(lat, p["m2_g"], p["m2_b"]) @ p["m2_w1"]) @ p["m2_w2"]


def perceiver_params():
    e = DL // HP
    p = {"latents": R(NL, DL, scale=0.5), "in_g": 1 + R(DIN, scale=0.1), "in_b": R(DIN, scale=0.1),
         "lq_g": 1 + R(DL, scale=0.1), "lq_b": R(DL, scale=0.1), "cq": W(DL, HP, e), "ck": W(DIN, HP, e),
         "cv": W(DIN, HP, e), "co": R(HP, e, DL, scale=0.25), "sa_g": 1 + R(DL, scale=0.1),
         "sa_b": R(DL, scale=0.1), "sq": W(DL, HP, e), "sk": W(DL, HP, e), "sv": W(DL, HP, e),
         "so": R(HP, e, DL, scale=0.25)}
    for m in ("m1", "m2"):
        p.update({m + "_g": 1 + R(DL, scale=0.1), m + "_b": R(DL, scale=0.1), m + "_w1": W(DL, 2 * DL),
                  m + "_w2": W(2 * DL, DL)})
    return p


PP = perceiver_params()
XP = R(4, MP, DIN)
MKP = pad_mask(4, MP, [16, 11, 6, 14])
P_REP = {k: P() for k in PP}
C.gspmd("g.perceiver_latent_cross_attn.dp4", {"dp": 4}, (P_REP, P("dp"), P("dp")), P("dp"), perceiver,
        (PP, XP, MKP))
C.gspmd("g.perceiver_latent_cross_attn_inputs_seq.sp4", {"sp": 4}, (P_REP, P(None, "sp"), P(None, "sp")), P(),
        perceiver, (PP, XP, MKP))

# ===========================================================================
# Conformer
DC, HC, KDW, TC = 16, 4, 5, 16


def ffn_half(p, pre, x):
    h = layer_norm(x, p[pre + "_g"], p[pre + "_b"])
    return 0.5 * (jax.nn.swish(h @ p[pre + "_w1"] + p[pre + "_b1"]) @ p[pre + "_w2"] + p[pre + "_b2"])


def conv_module(p, x, exchange=None):
    """exchange(h): the (left, right) halos of the GLU output h from the
    neighbours, for a sequence-sharded caller; None pads with zeros."""
    h = layer_norm(x, p["cv_g"], p["cv_b"])
    h = h @ p["pw1"] + p["pw1_b"]
    h = h[..., :DC] * jax.nn.sigmoid(h[..., DC:])  # GLU
    pad = KDW // 2
    if exchange is None:
        h = lax.conv_general_dilated(h, p["dw"], (1,), [(pad, pad)], dimension_numbers=("NWC", "WIO", "NWC"),
                                     feature_group_count=DC)
    else:
        left, right = exchange(h)
        h = lax.conv_general_dilated(jnp.concatenate([left, h, right], 1), p["dw"], (1,), "VALID",
                                     dimension_numbers=("NWC", "WIO", "NWC"), feature_group_count=DC)
    h = h + p["dw_b"]
    h = (h - p["bn_mean"]) * lax.rsqrt(p["bn_var"] + 1e-5) * p["bn_g"] + p["bn_b"]
    h = jax.nn.swish(h)
    return h @ p["pw2"] + p["pw2_b"]


def conformer(p, x, res_cons=ident, head_cons=ident):
    x = res_cons(x + ffn_half(p, "ff1", x))
    h = layer_norm(x, p["at_g"], p["at_b"])
    q = jnp.einsum("btd,dhe->bthe", h, p["wq"])
    k = jnp.einsum("btd,dhe->bthe", h, p["wk"])
    v = jnp.einsum("btd,dhe->bthe", h, p["wv"])
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    o = head_cons(jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v))
    x = res_cons(x + jnp.einsum("bqhe,hed->bqd", o, p["wo"]))
    x = res_cons(x + conv_module(p, x))
    x = res_cons(x + ffn_half(p, "ff2", x))
    return layer_norm(x, p["out_g"], p["out_b"])


def conformer_params():
    e = DC // HC
    p = {"at_g": 1 + R(DC, scale=0.1), "at_b": R(DC, scale=0.1), "wq": W(DC, HC, e), "wk": W(DC, HC, e),
         "wv": W(DC, HC, e), "wo": R(HC, e, DC, scale=0.25), "cv_g": 1 + R(DC, scale=0.1),
         "cv_b": R(DC, scale=0.1), "pw1": W(DC, 2 * DC), "pw1_b": R(2 * DC, scale=0.1),
         "dw": R(KDW, 1, DC, scale=0.4), "dw_b": R(DC, scale=0.1), "bn_mean": R(DC, scale=0.1),
         "bn_var": rng.uniform(0.5, 1.5, DC).astype(np.float32), "bn_g": 1 + R(DC, scale=0.1),
         "bn_b": R(DC, scale=0.1), "pw2": W(DC, DC), "pw2_b": R(DC, scale=0.1),
         "out_g": 1 + R(DC, scale=0.1), "out_b": R(DC, scale=0.1)}
    for f in ("ff1", "ff2"):
        p.update({f + "_g": 1 + R(DC, scale=0.1), f + "_b": R(DC, scale=0.1), f + "_w1": W(DC, 4 * DC),
                  f + "_b1": R(4 * DC, scale=0.1), f + "_w2": W(4 * DC, DC), f + "_b2": R(DC, scale=0.1)})
    return p


PC = conformer_params()
XC = R(4, TC, DC)
C_REP = {k: P() for k in PC}
C_TP = dict(C_REP, wq=P(None, "tp"), wk=P(None, "tp"), wv=P(None, "tp"), wo=P("tp"), ff1_w1=P(None, "tp"),
            ff1_b1=P("tp"), ff1_w2=P("tp"), ff2_w1=P(None, "tp"), ff2_b1=P("tp"), ff2_w2=P("tp"),
            dw=P(None, None, "tp"), dw_b=P("tp"), bn_mean=P("tp"), bn_var=P("tp"), bn_g=P("tp"), bn_b=P("tp"),
            pw2=P("tp"))
C.gspmd("g.conformer_block_conv_module.dp2xtp4", {"dp": 2, "tp": 4}, (C_TP, P("dp")), P("dp"),
        lambda p, x: conformer(p, x, res_cons=wsc(M_DT, P("dp", None, None)),
                               head_cons=wsc(M_DT, P("dp", None, "tp", None))), (PC, XC))
C.gspmd("g.conformer_block_conv_module_seq.sp4", {"sp": 4}, (C_REP, P(None, "sp")), P(None, "sp"),
        lambda p, x: conformer(p, x), (PC, XC))

# ===========================================================================
# 1-D UNet denoiser
CU, LU, TE = 4, 16, 8


def conv1d(x, w, b, stride=1):
    return lax.conv_general_dilated(x, w, (stride,), "SAME", dimension_numbers=("NWC", "WIO", "NWC")) + b


def timestep_embedding(t, dim=TE, max_period=10000.0):
    half = dim // 2
    freqs = jnp.exp(-np.log(max_period) * jnp.arange(half, dtype=jnp.float32) / half)
    args = t[:, None].astype(jnp.float32) * freqs[None]
    return jnp.concatenate([jnp.cos(args), jnp.sin(args)], axis=-1)


def unet1d(p, x, t):
    e = jax.nn.silu(timestep_embedding(t) @ p["t1"] + p["t1_b"]) @ p["t2"] + p["t2_b"]
    h1 = jax.nn.silu(conv1d(x, p["c1"], p["c1_b"]) + (e @ p["e1"])[:, None])
    h2 = jax.nn.silu(conv1d(h1, p["down"], p["down_b"], stride=2))
    h2 = jax.nn.silu(conv1d(h2, p["mid"], p["mid_b"]) + (e @ p["e2"])[:, None])
    u = jnp.repeat(h2, 2, axis=1)
    u = jax.nn.silu(conv1d(u, p["up"], p["up_b"]))
    return conv1d(jnp.concatenate([u, h1], -1), p["out"], p["out_b"])


def unet_params():
    return {"t1": W(TE, 16), "t1_b": R(16, scale=0.1), "t2": W(16, 16), "t2_b": R(16, scale=0.1),
            "c1": R(3, CU, 8, scale=0.3), "c1_b": R(8, scale=0.1), "e1": W(16, 8), "down": R(3, 8, 16, scale=0.2),
            "down_b": R(16, scale=0.1), "mid": R(3, 16, 16, scale=0.15), "mid_b": R(16, scale=0.1),
            "e2": W(16, 16), "up": R(3, 16, 8, scale=0.15), "up_b": R(8, scale=0.1),
            "out": R(3, 16, CU, scale=0.15), "out_b": R(CU, scale=0.1)}


PU = unet_params()
XU = R(8, LU, CU)
TU = rng.uniform(0, 1000, 8).astype(np.float32)
U_REP = {k: P() for k in PU}
C.gspmd("g.unet1d_denoiser_skip_concat.dp4", {"dp": 4}, (U_REP, P("dp"), P("dp")), P("dp"), unet1d, (PU, XU, TU))
C.gspmd("g.unet1d_denoiser_length_sharded.sp4", {"sp": 4}, (U_REP, P(None, "sp"), P()), P(None, "sp"), unet1d,
        (PU, XU, TU))

# ===========================================================================
# training steps (GSPMD)


def ce(logits, labels):
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels))


# g20. GPT-2 + adamw, FSDP over fsdp8.
OPT20 = optax.adamw(3e-3, b1=0.9, b2=0.95, eps=1e-6, weight_decay=0.1)
S20 = OPT20.init(PG)
SPEC20 = {k: (P("fsdp", None) if v.ndim == 2 and v.shape[0] % 8 == 0 else P()) for k, v in PG.items()}
SS20 = state_specs(S20, SPEC20)


def step20(p, s, tok):
    loss, g = jax.value_and_grad(lambda p: ce(gpt2(p, tok[:, :-1]), tok[:, 1:]))(p)
    u, s = OPT20.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


C.gspmd("g.train_gpt2_adamw_fsdp.fsdp8", {"fsdp": 8}, (SPEC20, SS20, P("fsdp")), (SPEC20, SS20, P()), step20,
        (PG, S20, I(0, VG, 8, TG + 1)))

# g21. ViT + lion, dp2 x tp4.
OPT21 = optax.lion(1e-3, weight_decay=0.01)
S21 = OPT21.init(PV)
SPEC21 = dict(V_REP, qkv=P(None, None, "tp"), q_b=P("tp"), v_b=P("tp"), proj=P("tp"), fc1=P(None, "tp"),
              fc1_b=P("tp"), fc2=P("tp"))
SS21 = state_specs(S21, SPEC21)


def step21(p, s, img, y):
    loss, g = jax.value_and_grad(lambda p: ce(vit(p, img), y))(p)
    u, s = OPT21.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


C.gspmd("g.train_vit_lion_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC21, SS21, P("dp"), P("dp")),
        (SPEC21, SS21, P()), step21, (PV, S21, IMG, I(0, NCV, 8)))

# g22. T5 encoder regression + adafactor (factored), FSDP over fsdp4.
OPT22 = optax.adafactor(1e-2, min_dim_size_to_factor=8)
PT22 = dict(PT5, reg=W(D5, 2))
S22 = OPT22.init(PT22)
SPEC22 = {k: (P("fsdp", *[None] * (v.ndim - 1)) if v.ndim >= 2 and v.shape[0] % 4 == 0 else P())
          for k, v in PT22.items()}
SS22 = state_specs(S22, SPEC22)


def step22(p, s, x, m, y):
    def loss(p):
        h = t5_block(p, x, m)
        pooled = jnp.sum(h * m[..., None], 1) / jnp.sum(m, 1, keepdims=True)
        return jnp.mean(jnp.square(pooled @ p["reg"] - y))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT22.update(g, s, p)
    return optax.apply_updates(p, u), s, l


C.gspmd("g.train_t5enc_adafactor_fsdp.fsdp4", {"fsdp": 4}, (SPEC22, SS22, P("fsdp"), P("fsdp"), P("fsdp")),
        (SPEC22, SS22, P()), step22, (PT22, S22, XT5, MT5, R(8, 2)))

# g23. BERT (post-LN layer + MLM head) + adamw, dp2 x tp4 with constraints.


def bert_layer(p, x, amask, hid=ident, heads=ident):
    b, t, d = x.shape
    q = heads((x @ p["q"] + p["q_b"]).reshape(b, t, HB_, d // HB_))
    k = heads((x @ p["k"] + p["k_b"]).reshape(b, t, HB_, d // HB_))
    v = heads((x @ p["v"] + p["v_b"]).reshape(b, t, HB_, d // HB_))
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(d // HB_)
    s = s + (1.0 - amask[:, None, None, :]) * -10000.0
    o = heads(jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)).reshape(b, t, d)
    x = hid(layer_norm(x + o @ p["ao"] + p["ao_b"], p["aln_g"], p["aln_b"], eps=1e-12))
    h = jax.nn.gelu(x @ p["i"] + p["i_b"], approximate=False)
    return hid(layer_norm(x + h @ p["o"] + p["o_b"], p["oln_g"], p["oln_b"], eps=1e-12))


HB_ = 4


def bert_params():
    p = {"tok": R(VB, DB, scale=0.5), "pos": R(TB, DB, scale=0.1), "eln_g": 1 + R(DB, scale=0.1),
         "eln_b": R(DB, scale=0.1)}
    for n in ("q", "k", "v", "ao"):
        p.update({n: W(DB, DB), n + "_b": R(DB, scale=0.1)})
    p.update({"aln_g": 1 + R(DB, scale=0.1), "aln_b": R(DB, scale=0.1), "i": W(DB, 4 * DB),
              "i_b": R(4 * DB, scale=0.1), "o": W(4 * DB, DB), "o_b": R(DB, scale=0.1),
              "oln_g": 1 + R(DB, scale=0.1), "oln_b": R(DB, scale=0.1)})
    head = mlm_params()
    head.pop("emb")
    p.update({"mlm_" + k: v for k, v in head.items()})
    return p


PBT = bert_params()
M23 = M_DT


def bert_mlm_loss(p, ids, amask, pos, labels, w, hid=ident, heads=ident, logit_cons=ident):
    x = layer_norm(jnp.take(p["tok"], ids, axis=0) + p["pos"][None], p["eln_g"], p["eln_b"], eps=1e-12)
    x = bert_layer(p, hid(x), amask, hid, heads)
    hp = {k[4:]: v for k, v in p.items() if k.startswith("mlm_")}
    hp["emb"] = p["tok"]
    return mlm_head(hp, x, pos, labels, w, logit_cons)


OPT23 = optax.adamw(1e-3, eps=1e-6, weight_decay=0.01)
S23 = OPT23.init(PBT)
SPEC23 = {k: P() for k in PBT}
SPEC23.update({"q": P(None, "tp"), "k": P(None, "tp"), "v": P(None, "tp"), "q_b": P("tp"), "k_b": P("tp"),
               "v_b": P("tp"), "ao": P("tp"), "i": P(None, "tp"), "i_b": P("tp"), "o": P("tp"),
               "tok": P("tp"), "mlm_out_b": P("tp")})
SS23 = state_specs(S23, SPEC23)


def step23(p, s, ids, amask, pos, labels, w):
    def loss(p):
        return bert_mlm_loss(p, ids, amask, pos, labels, w, hid=wsc(M23, P("dp", None, None)),
                             heads=wsc(M23, P("dp", None, "tp", None)), logit_cons=wsc(M23, P("dp", None, "tp")))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT23.update(g, s, p)
    return optax.apply_updates(p, u), s, l


AM23 = pad_mask(8, TB, [16, 12, 16, 9, 14, 16, 10, 16])
C.gspmd("g.train_bert_mlm_adamw_constrained.dp2xtp4", {"dp": 2, "tp": 4},
        (SPEC23, SS23, P("dp"), P("dp"), P("dp"), P("dp"), P("dp")), (SPEC23, SS23, P()), step23,
        (PBT, S23, I(0, VB, 8, TB), AM23, POSB, LABB, WB))

# g24. Conformer + lion, sequence over sp4.
OPT24 = optax.lion(3e-4, b1=0.9, b2=0.99, weight_decay=0.1)
S24 = OPT24.init(PC)
SS24 = state_specs(S24, C_REP)
M24 = make_mesh({"sp": 4})


def step24(p, s, x, y):
    def loss(p):
        out = conformer(p, x, res_cons=wsc(M24, P(None, "sp", None)))
        return jnp.mean(jnp.square(out - y))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT24.update(g, s, p)
    return optax.apply_updates(p, u), s, l


C.gspmd("g.train_conformer_lion_seq.sp4", {"sp": 4}, (C_REP, SS24, P(None, "sp"), P(None, "sp")),
        (C_REP, SS24, P()), step24, (PC, S24, XC, R(4, TC, DC)))

# g25. 1-D UNet eps-prediction + clip + adamw, dp4.
OPT25 = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(2e-3, weight_decay=1e-4))
S25 = OPT25.init(PU)
SS25 = state_specs(S25, U_REP)


def cosine_abar(t, T=1000.0, s=0.008):
    f = jnp.cos((t / T + s) / (1 + s) * np.pi / 2) ** 2
    return f / np.cos(s / (1 + s) * np.pi / 2) ** 2


def step25(p, s, x0, noise, t):
    ab = cosine_abar(t)[:, None, None]
    xt = jnp.sqrt(ab) * x0 + jnp.sqrt(1 - ab) * noise
    l, g = jax.value_and_grad(lambda p: jnp.mean(jnp.square(unet1d(p, xt, t) - noise)))(p)
    u, s = OPT25.update(g, s, p)
    return optax.apply_updates(p, u), s, l


C.gspmd("g.train_unet1d_eps_clip_adamw.dp4", {"dp": 4}, (U_REP, SS25, P("dp"), P("dp"), P("dp")),
        (U_REP, SS25, P()), step25, (PU, S25, XU, R(8, LU, CU), TU))

# ===========================================================================
# shard_map families
# 1. GPT-2 with the tied embedding vocab-parallel over tp4.
TOK1 = I(0, VG, 4, TG + 1)


def gpt2_loss(p, tok):
    return ce(gpt2(p, tok[:, :-1]), tok[:, 1:])


def gpt2_vocab_tp(bug):
    def body(p, tok):
        vl, r = p["wte"].shape[0], idx("tp")
        inp, tgt = tok[:, :-1], tok[:, 1:]
        off = 0 if bug == "emb-no-offset" else r * vl
        loc = inp - off
        ok = (loc >= 0) & (loc < vl)
        e = jnp.where(ok[..., None], jnp.take(p["wte"], jnp.clip(loc, 0, vl - 1), axis=0), 0.0)
        x = psum(e, "tp") + p["wpe"][:inp.shape[1]]
        lg = gpt2_trunk(p, x) @ p["wte"].T  # (b, t, vl)
        m = pmax(jnp.max(lg, -1), "tp")
        se = jnp.sum(jnp.exp(lg - m[..., None]), -1)
        if bug != "lse-local-vocab":
            se = psum(se, "tp")
        lse = jnp.log(se) + m
        tl = tgt - r * vl
        tok_ok = (tl >= 0) & (tl < vl)
        z = jnp.where(tok_ok, jnp.take_along_axis(lg, jnp.clip(tl, 0, vl - 1)[..., None], -1)[..., 0], 0.0)
        if bug != "target-not-psummed":
            z = psum(z, "tp")
        return jnp.mean(lse - z)
    return body


G1_SPEC = dict({k: P() for k in PG}, wte=P("tp"))
C.smap("s.gpt2_tied_embedding_vocab_parallel_ce.tp4", {"tp": 4}, gpt2_vocab_tp, (G1_SPEC, P()), P(), gpt2_loss,
       (PG, TOK1), bugs=[("emb-no-offset", ["wrong-offset"]), ("lse-local-vocab", ["missing-all-reduce"]),
                         ("target-not-psummed", ["missing-all-reduce"])])

# 2. ViT forward, batch over dp4, heads and MLP over tp2 (Megatron).


def vit_tp(bug):
    def body(p, img):
        x = vit_embed(p, img)
        h = layer_norm(x, p["ln1_g"], p["ln1_b"], eps=1e-6)
        qkv = jnp.einsum("btd,dkhe->kbthe", h, p["qkv"]) + vit_qkv_bias(p)[:, None, None]
        q, k, v = qkv[0], qkv[1], qkv[2]
        width = q.shape[-1] * q.shape[-2] if bug == "scale-local-heads-width" else q.shape[-1]
        s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(width)
        o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)
        a = jnp.einsum("bqhe,hed->bqd", o, p["proj"])
        if bug != "attn-out-not-psummed":
            a = psum(a, "tp")
        x = x + a + p["proj_b"]
        h = layer_norm(x, p["ln2_g"], p["ln2_b"], eps=1e-6)
        m = jax.nn.gelu(h @ p["fc1"] + p["fc1_b"], approximate=False) @ p["fc2"]
        m = psum(m, "dp" if bug == "mlp-psum-over-dp" else "tp")
        return vit_head(p, x + m + p["fc2_b"])
    return body


V2_SPEC = dict(V_REP, qkv=P(None, None, "tp"), q_b=P("tp"), v_b=P("tp"), proj=P("tp"), fc1=P(None, "tp"),
               fc1_b=P("tp"), fc2=P("tp"))
C.smap("s.vit_megatron_heads_mlp.dp4xtp2", {"dp": 4, "tp": 2}, vit_tp, (V2_SPEC, P("dp")), P("dp"), vit, (PV, IMG),
       bugs=[("attn-out-not-psummed", ["missing-all-reduce"]), ("mlp-psum-over-dp", ["wrong-collective-group"]),
             ("scale-local-heads-width", ["wrong-scale"])])

# 3. Swin shifted windows with the image rows over sp4 (one window row each).
NSP = 4
HL3 = XS.shape[1] // NSP
MASKS3 = np.stack([shift_mask(XS.shape[1], XS.shape[2], WS, SH, row0=k * HL3, rows=HL3) for k in range(NSP)])


def swin_rows(bug):
    def body(p, x):
        b, hl, w, c = x.shape
        r = idx("sp")
        sc = x
        y = layer_norm(x, p["n1_g"], p["n1_b"])
        y = jnp.roll(y, -SH, axis=2)
        if bug == "row-shift-wrong-direction":
            fwd = [(i, (i + 1) % NSP) for i in range(NSP)]
        else:
            fwd = [(i, (i - 1) % NSP) for i in range(NSP)]  # my first rows end the previous device's block
        y = jnp.concatenate([y[:, SH:], lax.ppermute(y[:, :SH], "sp", fwd)], 1)
        mask = jnp.asarray(MASKS3)[0 if bug == "mask-from-local-rows" else r]
        o = swin_attn(p, window_partition(y, WS), mask, (hl // WS) * (w // WS))
        y = window_reverse(o, WS, b, hl, w)
        if bug != "no-row-roll-back":
            bwd = [(i, (i + 1) % NSP) for i in range(NSP)]
            y = jnp.concatenate([lax.ppermute(y[:, -SH:], "sp", bwd), y[:, :-SH]], 1)
        y = jnp.roll(y, SH, axis=2)
        x = sc + y
        y = layer_norm(x, p["n2_g"], p["n2_b"])
        return x + jax.nn.gelu(y @ p["fc1"] + p["fc1_b"]) @ p["fc2"] + p["fc2_b"]
    return body


C.smap("s.swin_shifted_windows_rows_ppermute.sp4", {"sp": 4}, swin_rows, (S_REP, P(None, "sp")), P(None, "sp"),
       swin_block, (PS_, XS), bugs=[("row-shift-wrong-direction", ["wrong-permutation"]),
                                    ("mask-from-local-rows", ["wrong-offset"]),
                                    ("no-row-roll-back", ["wrong-permutation"])])

# 4. Mamba block with the sequence over sp4.


def mamba_seq(bug):
    def body(p, x):
        r = idx("sp")
        xs, z = x @ p["w_x"], x @ p["w_z"]
        L = x.shape[1]
        if bug == "halo-from-right":
            perm = [(i, i - 1) for i in range(1, NSP)]
        elif bug == "halo-cyclic":
            perm = [(i, (i + 1) % NSP) for i in range(NSP)]
        else:
            perm = [(i, i + 1) for i in range(NSP - 1)]
        tail = xs[:, -(KC - 1):] if bug != "halo-from-right" else xs[:, :KC - 1]
        xp = jnp.concatenate([lax.ppermute(tail, "sp", perm), xs], 1)
        xc = jax.nn.silu(sum(xp[:, k:k + L] * p["conv_w"][k] for k in range(KC)) + p["conv_b"])
        dA, dBx, Cm = mamba_ssm_inputs(p, xc)
        acum, hloc = lax.associative_scan(lambda a, b: (a[0] * b[0], b[0] * a[1] + b[1]), (dA, dBx), axis=1)
        ends_a = lax.all_gather(acum[:, -1], "sp")  # (n, b, di, ns)
        ends_h = lax.all_gather(hloc[:, -1], "sp")
        h_in = jnp.zeros_like(hloc[:, 0])
        for j in range(NSP - 1):
            nxt = h_in + ends_h[j] if bug == "carry-without-decay" else ends_a[j] * h_in + ends_h[j]
            h_in = jnp.where(j < r, nxt, h_in)
        h = hloc + acum * h_in[:, None]
        y = jnp.einsum("bldn,bln->bld", h, Cm)
        return mamba_post(p, x, xc, z, y)
    return body


C.smap("s.mamba_conv_halo_scan_carry.sp4", {"sp": 4}, mamba_seq, (M_REP, P(None, "sp")), P(None, "sp"),
       lambda p, x: mamba(p, x), (PM, XM),
       bugs=[("halo-from-right", ["wrong-permutation"]), ("halo-cyclic", ["wrong-permutation"]),
             ("carry-without-decay", ["numerics"])])

# 5. BERT MLM head, batch over dp2, vocabulary over tp4.


def mlm_dp_tp(bug):
    def body(p, hidden, pos, labels, w):
        r, vl = idx("tp"), p["emb"].shape[0]
        g = jnp.take_along_axis(hidden, pos[..., None], axis=1)
        h = jax.nn.gelu(g @ p["dense"] + p["dense_b"], approximate=False)
        h = layer_norm(h, p["ln_g"], p["ln_b"], eps=1e-12)
        lg = h @ p["emb"].T + p["out_b"]
        m = jnp.max(lg, -1)
        if bug != "lse-local-max":
            m = pmax(m, "tp")
        lse = jnp.log(psum(jnp.sum(jnp.exp(lg - m[..., None]), -1), "tp")) + m
        tl = labels - (0 if bug == "label-no-vocab-offset" else r * vl)
        ok = (tl >= 0) & (tl < vl)
        z = psum(jnp.where(ok, jnp.take_along_axis(lg, jnp.clip(tl, 0, vl - 1)[..., None], -1)[..., 0], 0.0), "tp")
        num, den = jnp.sum((lse - z) * w), jnp.sum(w)
        if bug == "pmean-of-shard-means":
            return pmean(num / (den + 1e-5), "dp")
        return psum(num, "dp") / (psum(den, "dp") + 1e-5)
    return body


C.smap("s.bert_mlm_head_masked_vocab_parallel.dp2xtp4", {"dp": 2, "tp": 4}, mlm_dp_tp,
       (B_TP, P("dp"), P("dp"), P("dp"), P("dp")), P(), mlm_head, MLM_ARGS,
       bugs=[("pmean-of-shard-means", ["wrong-reduction"]), ("label-no-vocab-offset", ["wrong-offset"]),
             ("lse-local-max", ["missing-all-reduce"])])

# 6. Perceiver cross-attention with the input array over sp4.


def perceiver_seq(bug):
    def body(p, inp, inmask):
        b = inp.shape[0]
        lat = jnp.broadcast_to(p["latents"], (b, NL, DL))
        kv = layer_norm(inp, p["in_g"], p["in_b"])
        q = jnp.einsum("bnd,dhe->bhne", layer_norm(lat, p["lq_g"], p["lq_b"]), p["cq"])
        k = jnp.einsum("bmd,dhe->bhme", kv, p["ck"])
        v = jnp.einsum("bmd,dhe->bhme", kv, p["cv"])
        s = jnp.einsum("bhne,bhme->bhnm", q, k) * (q.shape[-1] ** -0.5)
        if bug != "input-mask-ignored":
            s = jnp.where(inmask[:, None, None, :] > 0, s, -1e30)
        m = jnp.max(s, -1, keepdims=True)
        if bug != "local-max-not-pmax":
            m = pmax(m, "sp")
        e = jnp.exp(s - m)
        num = psum(jnp.einsum("bhnm,bhme->bhne", e, v), "sp")
        den = jnp.sum(e, -1, keepdims=True)
        if bug != "denominator-not-psummed":
            den = psum(den, "sp")
        lat = lat + jnp.einsum("bhne,hed->bnd", num / den, p["co"])
        return perceiver_rest(p, lat)
    return body


C.smap("s.perceiver_cross_attn_inputs_split.sp4", {"sp": 4}, perceiver_seq, (P_REP, P(None, "sp"), P(None, "sp")),
       P(), perceiver, (PP, XP, MKP),
       bugs=[("denominator-not-psummed", ["missing-all-reduce"]), ("local-max-not-pmax", ["missing-all-reduce"]),
             ("input-mask-ignored", ["numerics"])])

# 7. Conformer convolution module + half-step FFN, sequence over sp4.


def conformer_conv_part(p, x):
    x = x + ffn_half(p, "ff1", x)
    return x + conv_module(p, x)


def conformer_conv_seq(bug):
    def body(p, x):
        k = KDW // 2

        def exchange(h):
            to_right = [(i, i + 1) for i in range(NSP - 1)]
            to_left = [(i, i - 1) for i in range(1, NSP)]
            if bug == "halos-cyclic":
                to_right, to_left = to_right + [(NSP - 1, 0)], to_left + [(0, NSP - 1)]
            left = lax.ppermute(h[:, -k:], "sp", to_right)
            right = lax.ppermute(h[:, :k], "sp", to_left)
            if bug == "halos-swapped":
                left, right = right, left
            if bug == "right-halo-zeroed":
                right = jnp.zeros_like(right)
            return left, right
        x = x + ffn_half(p, "ff1", x)
        return x + conv_module(p, x, exchange)
    return body


C.smap("s.conformer_dwconv_two_sided_halo.sp4", {"sp": 4}, conformer_conv_seq, (C_REP, P(None, "sp")),
       P(None, "sp"), conformer_conv_part, (PC, XC),
       bugs=[("right-halo-zeroed", ["missing-collective"]), ("halos-swapped", ["wrong-permutation"]),
             ("halos-cyclic", ["wrong-permutation"])])

# 8. GPT-2 training step by hand, ZeRO-3 over fsdp4.
OPT8 = optax.adamw(3e-3, b1=0.9, b2=0.95, eps=1e-6, weight_decay=0.1)
S8 = OPT8.init(PG)
SPEC8 = {k: (P("fsdp", None) if v.ndim == 2 else P()) for k, v in PG.items()}
SS8 = state_specs(S8, SPEC8)


def step8_ref(p, s, tok):
    loss, g = jax.value_and_grad(gpt2_loss)(p, tok)
    u, s = OPT8.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


def zero3(bug):
    def body(p, s, tok):
        r = idx("fsdp")
        full = {k: (lax.all_gather(v, "fsdp", axis=0, tiled=True) if SPEC8[k] != P() else v) for k, v in p.items()}
        loss, g = jax.value_and_grad(gpt2_loss)(full, tok)

        def reduce(k, gk):
            if SPEC8[k] == P():
                return gk if bug == "replicated-grad-not-averaged" else pmean(gk, "fsdp")
            if bug == "local-slice-no-reduce-scatter":
                rows = gk.shape[0] // NSP
                return lax.dynamic_slice_in_dim(gk, r * rows, rows, 0)
            return lax.psum_scatter(gk, "fsdp", scatter_dimension=0, tiled=True) / NSP
        g = {k: reduce(k, v) for k, v in g.items()}
        u, s = OPT8.update(g, s, p)
        if bug != "loss-not-pmeaned":
            loss = pmean(loss, "fsdp")
        return optax.apply_updates(p, u), s, loss
    return body


C.smap("s.gpt2_zero3_adamw_by_hand.fsdp4", {"fsdp": 4}, zero3, (SPEC8, SS8, P("fsdp")), (SPEC8, SS8, P()),
       step8_ref, (PG, S8, I(0, VG, 8, TG + 1)),
       bugs=[("replicated-grad-not-averaged", ["missing-all-reduce"]),
             ("local-slice-no-reduce-scatter", ["missing-collective"]),
             ("loss-not-pmeaned", ["missing-all-reduce"])])

C.finish()
