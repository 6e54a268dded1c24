"""samples/fresh100: a 100th batch of programs as a user writes them, on the theme of standard LLM families (Llama-3, Mistral, Gemma-2, Qwen-2, Phi-3, GPT-NeoX / Pythia, Falcon) under GSPMD (jax.jit with NamedSharding on parameters and batch, with_sharding_constraint where a user puts it), blocks, tiny 2-layer models and full training steps, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
GSPMD pairs (correct only):
 1. Llama-3 decoder block (tp4): 8 query heads, 2 kv heads (< tp), RoPE
    rotate-half with the Llama-3.1 frequency scaling, SwiGLU; q/o and MLP
    column / row sharded, k/v projections replicated.
 2. Mistral block with sliding-window causal attention (window 3), dp2 x tp2,
    kv heads = tp, the batch over dp; attention output constrained to heads
    over tp.
 3. Qwen-2 block with q/k/v biases (sharded with their columns), 8 query
    heads, 4 kv heads (> tp2), NTK-scaled RoPE base.
 4. Phi-3 block with the fused qkv_proj and gate_up_proj (column sharded
    over tp4, split after the matmul), kv heads = tp.
 5. GPT-NeoX / Pythia parallel block (tp4): LayerNorm with bias, the fused
    query_key_value laid out per head [h, 3, e], partial rotary (25 %), GELU
    MLP, x + attn(ln1 x) + mlp(ln2 x).
 6. Falcon multi-query block (dp2 x tp4): one kv head, one LayerNorm shared
    by the parallel attention and MLP, the query heads constrained over tp.
 7. tiny 2-layer Gemma-2 model (tp4): sqrt(d)-scaled tied embeddings,
    (1 + g) RMSNorms before and after each sublayer, alternating local
    (window 4) / global attention, attention logit soft-capping 50 and final
    logit soft-capping 30, query_pre_attn_scalar, GeGLU; 4 query / 2 kv heads.
 8. tiny 2-layer Llama model with interleaved (GPT-J / Meta complex) RoPE
    and NTK scaling, untied embeddings, every matrix FSDP-sharded on its
    first dim over fsdp4 and the batch over fsdp4.
 9. training step of the model of 8. with the Llama-3 rope under fsdp2 x
    tp4: cross-entropy with ignore index -100, jax.value_and_grad,
    optax.chain(clip_by_global_norm, adamw); residual stream constrained.
10. training step of the Gemma-2 model of 7. (tied embeddings, soft-caps)
    under dp2 x tp2 with gradient accumulation over 2 microbatches by
    lax.scan inside the jitted step.
11. training step of a tiny Qwen-2 model with tied embeddings under dp8
    (parameters replicated).
12. training step of a tiny Pythia model under fsdp8 (parameters sharded on
    their first dim, the batch over fsdp).
13. training step of a tiny Mistral model under dp2 x tp4 with gradient
    accumulation by lax.fori_loop over 4 microbatches.
14. training step of a tiny Falcon MQA model under tp8 (8 query heads, 1 kv
    head), microbatches accumulated in an unrolled Python loop.
15. training step of a tiny Phi-3 model under fsdp4 x tp2 (matrices over
    fsdp on one dim, over tp on the other).
16. the Qwen-2 block of 3. under dp4 x tp2 with its input in bf16 (f32
    norms and softmax).
10b. the Gemma-2 step of 10. without accumulation (dp2 x tp2), and the
    model of 7. under tp2 (kv heads = tp).
shard_map families (correct body + bugs in brackets):
17. GPT-NeoX parallel block, tp4: one psum of attn + MLP partial sums.
    [the row-parallel biases added before the psum (4x), the attention
    partial sum left out of the psum].
18. Gemma-2 tied embedding: vocab-parallel lookup and tied vocab-parallel
    logits with soft-capping, cross-entropy with ignore index and a per-token
    loss mask, dp2 x tp4. [lookup without the vocab-shard offset, mean over dp of per-shard means
    of valid tokens instead of the global count].
19. Qwen-2 GQA attention with 4 kv heads over tp2 (2 per rank, 4 query heads
    per rank), RoPE at positions, dp2 x tp2. [kv heads grouped by jnp.tile
    instead of jnp.repeat, output projection psum'd over dp instead of tp].
Numerics: every correct f32 pair agrees with its baseline within 2e-6,
except two training steps whose AdamW update normalises gradient entries
that are (near) zero: the Pythia step (1.7e-4; the key-bias gradient is
mathematically zero, its rounding noise becomes +-lr) and the Mistral step
(4.8e-5); the bf16 Qwen-2 block differs by half a bf16 ulp (0.0156 at 4.4).
Every bug variant differs by 0.5 or more. Family 18 takes a float loss mask
beside the -100 labels so that the per-shard mean bug shows on inputs whose
labels never hit the ignore index.
Run from the repository root: bash samples/gen/run_fresh100.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P, NamedSharding
import optax
sys.path.insert(0, "samples/gen")
from fresh_lib import Corpus, seeded  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh100.py"
C = Corpus("samples/fresh100", SCRIPT, "samples/gen/run_fresh100.sh", sys.argv[1:])
rng, R, I = seeded(10000)
NEG = -1e30
B, T, D, V = 4, 8, 32, 64


# ---------------------------------------------------------------- helpers
def rms_norm(x, w, eps=1e-6):
    x32 = x.astype(jnp.float32)
    y = x32 * lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (y * w).astype(x.dtype)


def gemma_norm(x, w, eps=1e-6):
    var = jnp.mean(jnp.square(x), -1, keepdims=True)
    return x * lax.rsqrt(var + eps) * (1.0 + w)


def layer_norm(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * g + b


def inv_freq(dim, theta=10000.0, ntk=1.0):
    base = theta * ntk ** (dim / (dim - 2)) if ntk != 1.0 else theta
    return 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float64) / dim))


def llama3_inv_freq(dim, theta=500000.0, factor=8.0, low=1.0, high=4.0, orig=16):
    inv = inv_freq(dim, theta)
    wavelen = 2 * np.pi / inv
    lo_wl, hi_wl = orig / low, orig / high
    smooth = (orig / wavelen - low) / (high - low)
    scaled = np.where(wavelen > lo_wl, inv / factor, inv)
    mid = (wavelen <= lo_wl) & (wavelen >= hi_wl)
    return np.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled).astype(np.float32)


def rope_half(x, pos, inv):
    """HF rotate_half on the first 2*len(inv) dims of x (b, t, h, e)."""
    rot = 2 * len(inv)
    f = pos.astype(jnp.float32)[..., None] * jnp.asarray(inv, jnp.float32)
    emb = jnp.concatenate([f, f], -1)
    cos, sin = jnp.cos(emb)[..., None, :], jnp.sin(emb)[..., None, :]
    xr, xp = x[..., :rot], x[..., rot:]
    x1, x2 = xr[..., :rot // 2], xr[..., rot // 2:]
    rh = jnp.concatenate([-x2, x1], -1)
    out = (xr * cos + rh * sin).astype(x.dtype)
    return jnp.concatenate([out, xp], -1) if rot < x.shape[-1] else out


def rope_interleaved(x, pos, inv):
    """Meta-Llama complex rotation: pairs (x0, x1), (x2, x3), ..."""
    f = pos.astype(jnp.float32)[..., None] * jnp.asarray(inv, jnp.float32)
    c, s = jnp.cos(f)[..., None, :], jnp.sin(f)[..., None, :]
    xr = x.reshape(*x.shape[:-1], -1, 2)
    a, b = xr[..., 0], xr[..., 1]
    return jnp.stack([a * c - b * s, a * s + b * c], -1).reshape(x.shape)


def causal(t, window=None):
    i = jnp.arange(t)[:, None]
    j = jnp.arange(t)[None, :]
    m = j <= i
    if window is not None:
        m = m & (i - j < window)
    return m


def sdpa(q, k, v, mask, scale=None, softcap=None):
    """q (b, t, hq, e), k / v (b, t, hkv, e); GQA by jnp.repeat."""
    hq, hkv = q.shape[2], k.shape[2]
    if hkv != hq:
        k = jnp.repeat(k, hq // hkv, axis=2)
        v = jnp.repeat(v, hq // hkv, axis=2)
    scale = scale if scale is not None else q.shape[-1] ** -0.5
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k).astype(jnp.float32) * scale
    if softcap is not None:
        s = softcap * jnp.tanh(s / softcap)
    s = jnp.where(mask, s, NEG)
    p = jax.nn.softmax(s, axis=-1).astype(v.dtype)
    return jnp.einsum("bhqk,bkhe->bqhe", p, v)


def ce_ignore(logits, labels, ignore=-100):
    valid = labels != ignore
    safe = jnp.where(valid, labels, 0)
    lp = jax.nn.log_softmax(logits.astype(jnp.float32), -1)
    nll = -jnp.take_along_axis(lp, safe[..., None], -1)[..., 0]
    return jnp.sum(nll * valid) / jnp.maximum(jnp.sum(valid), 1)


def labels_with_ignore(tok, frac=0.25):
    lab = tok[..., 1:].copy()
    drop = rng.random(lab.shape) < frac
    lab[drop] = -100
    return lab


def W(*s, scale=None):
    return R(*s, scale=scale if scale is not None else 1.0 / np.sqrt(s[0]))


def cons(mesh, spec):
    m = make_mesh(mesh)
    return lambda x: lax.with_sharding_constraint(x, NamedSharding(m, spec))


def ident(x):
    return x


POS = jnp.arange(T)[None, :]

# ------------------------------------------------------------ 1. Llama-3 block
HQ1, HKV1, E1, F1 = 8, 2, 4, 64
INV1 = llama3_inv_freq(E1)


def llama_attn(p, x, inv, hq, hkv, e, mask, rope=rope_half, c=ident):
    b, t, _ = x.shape
    q = (x @ p["wq"]).reshape(b, t, hq, e)
    k = (x @ p["wk"]).reshape(b, t, hkv, e)
    v = (x @ p["wv"]).reshape(b, t, hkv, e)
    q, k = rope(q, POS[:, :t], inv), rope(k, POS[:, :t], inv)
    o = c(sdpa(q, k, v, mask))
    return o.reshape(b, t, hq * e) @ p["wo"]


def swiglu(p, x):
    return (jax.nn.silu(x @ p["wg"]) * (x @ p["wu"])) @ p["wd"]


def llama_block(p, x, inv=INV1, hq=HQ1, hkv=HKV1, e=E1, window=None, rope=rope_half, c=ident, cr=ident):
    h = x + llama_attn(p, rms_norm(x, p["ln1"]), inv, hq, hkv, e, causal(x.shape[1], window), rope, c)
    h = cr(h)
    return cr(h + swiglu(p, rms_norm(h, p["ln2"])))


def llama_params(hq, hkv, e, f, d=D):
    return {"ln1": 1 + R(d, scale=0.1), "wq": W(d, hq * e), "wk": W(d, hkv * e), "wv": W(d, hkv * e),
            "wo": W(hq * e, d), "ln2": 1 + R(d, scale=0.1), "wg": W(d, f), "wu": W(d, f), "wd": W(f, d)}


def llama_tp_specs(kv_sharded=True, ax="tp"):
    kv = P(None, ax) if kv_sharded else P()
    return {"ln1": P(), "wq": P(None, ax), "wk": kv, "wv": kv, "wo": P(ax, None), "ln2": P(),
            "wg": P(None, ax), "wu": P(None, ax), "wd": P(ax, None)}


P1 = llama_params(HQ1, HKV1, E1, F1)
C.gspmd("g.llama3_block_gqa_kv2_lt_tp4.tp4", {"tp": 4}, (llama_tp_specs(False), P()), P(),
        llama_block, (P1, R(B, T, D)))

# ------------------------------------------------------------ 2. Mistral SWA block
HQ2, HKV2, E2 = 4, 2, 8
INV2 = inv_freq(E2, 1e6)
c2 = cons({"dp": 2, "tp": 2}, P("dp", None, "tp", None))
P2 = llama_params(HQ2, HKV2, E2, 48)
C.gspmd("g.mistral_block_swa3_kv_eq_tp.dp2xtp2", {"dp": 2, "tp": 2}, (llama_tp_specs(), P("dp")), P("dp"),
        lambda p, x: llama_block(p, x, INV2, HQ2, HKV2, E2, window=3, c=c2), (P2, R(B, T, D)))

# ------------------------------------------------------------ 3. Qwen-2 block with biases
HQ3, HKV3, E3 = 8, 4, 4
INV3 = inv_freq(E3, 1e6, ntk=2.0)


def qwen_block(p, x, c=ident):
    b, t, _ = x.shape
    h = rms_norm(x, p["ln1"])
    q = jnp.einsum("btd,dk->btk", h, p["wq"]) + p["bq"]
    k = jnp.einsum("btd,dk->btk", h, p["wk"]) + p["bk"]
    v = jnp.einsum("btd,dk->btk", h, p["wv"]) + p["bv"]
    q, k, v = q.reshape(b, t, HQ3, E3), k.reshape(b, t, HKV3, E3), v.reshape(b, t, HKV3, E3)
    q, k = rope_half(q, POS, INV3), rope_half(k, POS, INV3)
    o = c(sdpa(q, k, v, causal(t)))
    x = x + jnp.einsum("btk,kd->btd", o.reshape(b, t, -1), p["wo"])
    return x + swiglu(p, rms_norm(x, p["ln2"]))


P3 = dict(llama_params(HQ3, HKV3, E3, 64), bq=R(HQ3 * E3, scale=0.1), bk=R(HKV3 * E3, scale=0.1),
          bv=R(HKV3 * E3, scale=0.1))
S3 = dict(llama_tp_specs(), bq=P("tp"), bk=P("tp"), bv=P("tp"))
C.gspmd("g.qwen2_block_qkv_bias_kv4_gt_tp2.tp2", {"tp": 2}, (S3, P()), P(), qwen_block, (P3, R(B, T, D)))

# ------------------------------------------------------------ 4. Phi-3 fused projections
HQ4, HKV4, E4, F4 = 4, 4, 8, 32
INV4 = inv_freq(E4)


def phi3_block(p, x):
    b, t, d = x.shape
    qkv = rms_norm(x, p["ln1"]) @ p["qkv"]
    q, k, v = jnp.split(qkv, [HQ4 * E4, (HQ4 + HKV4) * E4], axis=-1)
    q = rope_half(q.reshape(b, t, HQ4, E4), POS, INV4)
    k = rope_half(k.reshape(b, t, HKV4, E4), POS, INV4)
    o = sdpa(q, k, v.reshape(b, t, HKV4, E4), causal(t))
    x = x + o.reshape(b, t, d) @ p["o"]
    gate, up = jnp.split(rms_norm(x, p["ln2"]) @ p["gate_up"], 2, axis=-1)
    return x + (up * jax.nn.silu(gate)) @ p["down"]


P4 = {"ln1": 1 + R(D, scale=0.1), "qkv": W(D, (HQ4 + 2 * HKV4) * E4), "o": W(D, D), "ln2": 1 + R(D, scale=0.1),
      "gate_up": W(D, 2 * F4), "down": W(F4, D)}
S4 = {"ln1": P(), "qkv": P(None, "tp"), "o": P("tp", None), "ln2": P(), "gate_up": P(None, "tp"), "down": P("tp", None)}
C.gspmd("g.phi3_block_fused_qkv_gate_up.tp4", {"tp": 4}, (S4, P()), P(), phi3_block, (P4, R(B, T, D)))

# ------------------------------------------------------------ 5. GPT-NeoX parallel block
H5, E5 = 4, 8
ROT5 = int(E5 * 0.25)
INV5 = inv_freq(ROT5)


def neox_attn(p, h):
    b, t, d = h.shape
    qkv = (h @ p["qkv_w"] + p["qkv_b"]).reshape(b, t, H5, 3 * E5)
    q, k, v = qkv[..., :E5], qkv[..., E5:2 * E5], qkv[..., 2 * E5:]
    q, k = rope_half(q, POS[:, :t], INV5), rope_half(k, POS[:, :t], INV5)
    return sdpa(q, k, v, causal(t)).reshape(b, t, d) @ p["dense_w"] + p["dense_b"]


def neox_mlp(p, h):
    return jax.nn.gelu(h @ p["fc1_w"] + p["fc1_b"], approximate=False) @ p["fc2_w"] + p["fc2_b"]


def neox_block(p, x):
    return x + neox_attn(p, layer_norm(x, p["ln1_g"], p["ln1_b"])) + neox_mlp(p, layer_norm(x, p["ln2_g"], p["ln2_b"]))


def neox_params(d=D, f=4 * D):
    return {"ln1_g": 1 + R(d, scale=0.1), "ln1_b": R(d, scale=0.1), "qkv_w": W(d, 3 * d), "qkv_b": R(3 * d, scale=0.1),
            "dense_w": W(d, d), "dense_b": R(d, scale=0.1), "ln2_g": 1 + R(d, scale=0.1), "ln2_b": R(d, scale=0.1),
            "fc1_w": W(d, f), "fc1_b": R(f, scale=0.1), "fc2_w": W(f, d), "fc2_b": R(d, scale=0.1)}


S5 = {"ln1_g": P(), "ln1_b": P(), "qkv_w": P(None, "tp"), "qkv_b": P("tp"), "dense_w": P("tp", None), "dense_b": P(),
      "ln2_g": P(), "ln2_b": P(), "fc1_w": P(None, "tp"), "fc1_b": P("tp"), "fc2_w": P("tp", None), "fc2_b": P()}
P5 = neox_params()
C.gspmd("g.neox_parallel_block_partial_rotary.tp4", {"tp": 4}, (S5, P()), P(), neox_block, (P5, R(B, T, D)))

# ------------------------------------------------------------ 6. Falcon MQA block
H6, E6 = 8, 4
INV6 = inv_freq(E6)
c6 = cons({"dp": 2, "tp": 4}, P("dp", None, "tp", None))


def falcon_block(p, x, c=c6):
    b, t, d = x.shape
    h = layer_norm(x, p["ln_g"], p["ln_b"])
    q = jnp.dot(h, p["wq"]).reshape(b, t, H6, E6)
    kv = jnp.dot(h, p["wkv"]).reshape(b, t, 2, 1, E6)
    k, v = kv[:, :, 0], kv[:, :, 1]
    q = c(rope_half(q, POS[:, :t], INV6))
    k = rope_half(k, POS[:, :t], INV6)
    attn = jnp.dot(c(sdpa(q, k, v, causal(t))).reshape(b, t, d), p["wo"])
    mlp = jnp.dot(jax.nn.gelu(jnp.dot(h, p["w1"])), p["w2"])
    return x + attn + mlp


def falcon_params(d=D):
    return {"ln_g": 1 + R(d, scale=0.1), "ln_b": R(d, scale=0.1), "wq": W(d, d), "wkv": W(d, 2 * E6), "wo": W(d, d),
            "w1": W(d, 4 * d), "w2": W(4 * d, d)}


S6 = {"ln_g": P(), "ln_b": P(), "wq": P(None, "tp"), "wkv": P(), "wo": P("tp", None), "w1": P(None, "tp"),
      "w2": P("tp", None)}
P6 = falcon_params()
C.gspmd("g.falcon_mqa_parallel_block.dp2xtp4", {"dp": 2, "tp": 4}, (S6, P("dp")), P("dp"), falcon_block,
        (P6, R(B, T, D)))

# ------------------------------------------------------------ 7. tiny Gemma-2 model
HQ7, HKV7, E7, F7 = 4, 2, 8, 64
INV7 = inv_freq(E7)


def gemma_layer(p, x, local, c=ident):
    b, t, d = x.shape
    h = gemma_norm(x, p["pre_attn"])
    q = jnp.einsum("btd,dhe->bthe", h, p["q"])
    k = jnp.einsum("btd,dhe->bthe", h, p["k"])
    v = jnp.einsum("btd,dhe->bthe", h, p["v"])
    q, k = rope_half(q, POS[:, :t], INV7), rope_half(k, POS[:, :t], INV7)
    mask = causal(t, 4 if local else None)
    o = c(sdpa(q, k, v, mask, scale=E7 ** -0.5, softcap=50.0))
    x = x + gemma_norm(jnp.einsum("bthe,hed->btd", o, p["o"]), p["post_attn"])
    h = gemma_norm(x, p["pre_ffw"])
    g = jax.nn.gelu(h @ p["gate"], approximate=True) * (h @ p["up"])
    return x + gemma_norm(g @ p["down"], p["post_ffw"])


def gemma_model(p, tok, c=ident):
    x = jnp.take(p["embed"], tok, axis=0) * jnp.sqrt(jnp.float32(D))
    for i, lp in enumerate(p["layers"]):
        x = gemma_layer(lp, x, local=(i % 2 == 0), c=c)
    x = gemma_norm(x, p["final"])
    logits = x @ p["embed"].T
    return 30.0 * jnp.tanh(logits / 30.0)


def gemma_params():
    def layer():
        return {"pre_attn": R(D, scale=0.1), "q": W(D, HQ7, E7), "k": W(D, HKV7, E7), "v": W(D, HKV7, E7),
                "o": R(HQ7, E7, D, scale=0.15), "post_attn": R(D, scale=0.1), "pre_ffw": R(D, scale=0.1),
                "gate": W(D, F7), "up": W(D, F7), "down": W(F7, D), "post_ffw": R(D, scale=0.1)}
    return {"embed": R(V, D, scale=0.2), "layers": [layer(), layer()], "final": R(D, scale=0.1)}


def gemma_specs(ax="tp"):
    lay = {"pre_attn": P(), "q": P(None, ax, None), "k": P(None, ax, None), "v": P(None, ax, None),
           "o": P(ax, None, None), "post_attn": P(), "pre_ffw": P(), "gate": P(None, ax), "up": P(None, ax),
           "down": P(ax, None), "post_ffw": P()}
    return {"embed": P(ax, None), "layers": [lay, dict(lay)], "final": P()}


P7 = gemma_params()
S7_tp4 = gemma_specs()
S7_tp4["layers"] = [dict(l, k=P(), v=P()) for l in S7_tp4["layers"]]  # 2 kv heads < tp4: replicate
C.gspmd("g.gemma2_tiny_model_tied_softcap_local_global.tp4", {"tp": 4}, (S7_tp4, P()), P(None, None, "tp"),
        gemma_model, (P7, I(0, V, B, T)))

# ------------------------------------------------------------ 8. tiny Llama model, interleaved NTK RoPE, FSDP
HQ8, HKV8, E8, F8 = 4, 2, 8, 64
INV8 = inv_freq(E8, 10000.0, ntk=4.0)


def llama_model(p, tok, inv, hq, hkv, e, rope=rope_half, cr=ident, window=None):
    x = cr(p["tok_emb"][tok])
    for lp in p["layers"]:
        x = llama_block(lp, x, inv, hq, hkv, e, window=window, rope=rope, cr=cr)
    return rms_norm(x, p["norm"]) @ p["lm_head"]


def llama_model_params(hq, hkv, e, f, n=2):
    return {"tok_emb": R(V, D, scale=0.5), "layers": [llama_params(hq, hkv, e, f) for _ in range(n)],
            "norm": 1 + R(D, scale=0.1), "lm_head": W(D, V)}


def fsdp_specs(tree, ax="fsdp"):
    return jax.tree.map(lambda a: P(ax) if a.ndim >= 2 else P(), tree)


P8 = llama_model_params(HQ8, HKV8, E8, F8)
S8 = fsdp_specs(P8)
C.gspmd("g.llama_tiny_model_interleaved_ntk_rope.fsdp4", {"fsdp": 4}, (S8, P("fsdp")), P("fsdp"),
        lambda p, t: llama_model(p, t, INV8, HQ8, HKV8, E8, rope=rope_interleaved), (P8, I(0, V, B, T)))


# ------------------------------------------------------------ training steps
def make_step(loss_fn, opt):
    def step(p, s, tok, lab):
        loss, g = jax.value_and_grad(loss_fn)(p, tok, lab)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, loss
    return step


def make_accum_scan(loss_fn, opt):
    def step(p, s, tok, lab):  # tok (m, b, t)
        def micro(acc, mb):
            l, g = jax.value_and_grad(loss_fn)(p, *mb)
            return jax.tree.map(jnp.add, acc, (l, g)), None
        zero = (jnp.zeros((), jnp.float32), jax.tree.map(jnp.zeros_like, p))
        (l, g), _ = lax.scan(micro, zero, (tok, lab))
        m = tok.shape[0]
        l, g = l / m, jax.tree.map(lambda x: x / m, g)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return step


OPT = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3, b1=0.9, b2=0.95, weight_decay=0.1))


def train_pair(name, mesh, params, pspecs, loss_fn, tok_spec, tok, lab, step_maker=make_step, opt=OPT):
    s = opt.init(params)
    pdef = jax.tree.structure(params)
    same = lambda x: jax.tree.structure(x) == pdef  # noqa: E731
    ss = jax.tree.map(lambda x: pspecs if same(x) else P(), s, is_leaf=same)
    C.gspmd(name, mesh, (pspecs, ss, tok_spec, tok_spec), (pspecs, ss, P()), step_maker(loss_fn, opt),
            (params, s, tok, lab))


# 9. Llama-3 rope tiny model, fsdp2 x tp4
HQ9, HKV9, E9 = 8, 2, 4
INV9 = llama3_inv_freq(E9)
P9 = llama_model_params(HQ9, HKV9, E9, 64)


def fsdp_tp_llama_specs(p):
    lay = {"ln1": P(), "wq": P("fsdp", "tp"), "wk": P("fsdp"), "wv": P("fsdp"), "wo": P("tp", "fsdp"), "ln2": P(),
           "wg": P("fsdp", "tp"), "wu": P("fsdp", "tp"), "wd": P("tp", "fsdp")}
    return {"tok_emb": P("tp", "fsdp"), "layers": [dict(lay) for _ in p["layers"]], "norm": P(),
            "lm_head": P("fsdp", "tp")}


c9 = cons({"fsdp": 2, "tp": 4}, P("fsdp", None, None))
tok9 = I(0, V, B, T + 1)
train_pair("g.train_llama3_ce_ignore_clip_adamw.fsdp2xtp4", {"fsdp": 2, "tp": 4}, P9, fsdp_tp_llama_specs(P9),
           lambda p, t, l: ce_ignore(llama_model(p, t, INV9, HQ9, HKV9, E9, cr=c9), l), P("fsdp"),
           tok9[:, :-1], labels_with_ignore(tok9))

# 10. Gemma-2 tied, dp2 x tp2, accumulation by scan
P10 = gemma_params()
S10 = gemma_specs()
c10 = cons({"dp": 2, "tp": 2}, P(None, None, "tp", None))
tok10 = I(0, V, 2, B, T + 1)
train_pair("g.train_gemma2_tied_softcap_accum_scan.dp2xtp2", {"dp": 2, "tp": 2}, P10, S10,
           lambda p, t, l: ce_ignore(gemma_model(p, t, c=c10), l), P(None, "dp"),
           tok10[..., :-1], labels_with_ignore(tok10), step_maker=make_accum_scan)


# 10b. the same Gemma-2 step without accumulation, and the model of 7. with kv heads = tp2
tok10b = I(0, V, B, T + 1)
train_pair("g.train_gemma2_tied_softcap.dp2xtp2", {"dp": 2, "tp": 2}, P10, S10,
           lambda p, t, l: ce_ignore(gemma_model(p, t, c=c10), l), P("dp"), tok10b[:, :-1],
           labels_with_ignore(tok10b))
C.gspmd("g.gemma2_tiny_model_tied_softcap_kv_eq_tp.tp2", {"tp": 2}, (gemma_specs(), P()), P(None, None, "tp"),
        gemma_model, (P7, I(0, V, B, T)))


# 11. Qwen-2 tied tiny model, dp8
def qwen_model(p, tok):
    x = p["embed"][tok]
    for lp in p["layers"]:
        x = qwen_block(lp, x)
    return rms_norm(x, p["norm"]) @ p["embed"].T


P11 = {"embed": R(V, D, scale=0.3), "layers": [dict(llama_params(HQ3, HKV3, E3, 64), bq=R(HQ3 * E3, scale=0.1),
                                                      bk=R(HKV3 * E3, scale=0.1), bv=R(HKV3 * E3, scale=0.1))
                                                 for _ in range(2)], "norm": 1 + R(D, scale=0.1)}
tok11 = I(0, V, 8, T + 1)
train_pair("g.train_qwen2_tied_embeddings.dp8", {"dp": 8}, P11, jax.tree.map(lambda a: P(), P11),
           lambda p, t, l: ce_ignore(qwen_model(p, t), l), P("dp"), tok11[:, :-1], labels_with_ignore(tok11))


# 12. Pythia tiny model, fsdp8
def neox_model(p, tok):
    x = p["embed_in"][tok]
    for lp in p["layers"]:
        x = neox_block(lp, x)
    return layer_norm(x, p["fln_g"], p["fln_b"]) @ p["embed_out"]


P12 = {"embed_in": R(V, D, scale=0.5), "layers": [neox_params() for _ in range(2)], "fln_g": 1 + R(D, scale=0.1),
       "fln_b": R(D, scale=0.1), "embed_out": W(D, V)}
S12 = jax.tree.map(lambda a: P("fsdp") if a.ndim == 2 else P(), P12)
tok12 = I(0, V, 8, T + 1)
train_pair("g.train_pythia_parallel_residual.fsdp8", {"fsdp": 8}, P12, S12,
           lambda p, t, l: ce_ignore(neox_model(p, t), l), P("fsdp"), tok12[:, :-1], labels_with_ignore(tok12))


# 13. Mistral tiny model dp2 x tp4, accumulation by fori_loop
def make_accum_fori(loss_fn, opt):
    def step(p, s, tok, lab):
        m = tok.shape[0]

        def body(i, acc):
            l, g = jax.value_and_grad(loss_fn)(p, tok[i], lab[i])
            return (acc[0] + l, jax.tree.map(jnp.add, acc[1], g))
        l, g = lax.fori_loop(0, m, body, (jnp.float32(0), jax.tree.map(jnp.zeros_like, p)))
        g = jax.tree.map(lambda x: x / m, g)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, l / m
    return step


HQ13, HKV13, E13 = 8, 2, 4
INV13 = inv_freq(E13, 1e6)
P13 = llama_model_params(HQ13, HKV13, E13, 64)
S13 = {"tok_emb": P(), "layers": [llama_tp_specs() for _ in range(2)], "norm": P(), "lm_head": P(None, "tp")}
tok13 = I(0, V, 4, B, T + 1)
train_pair("g.train_mistral_swa_accum_fori.dp2xtp4", {"dp": 2, "tp": 4}, P13, S13,
           lambda p, t, l: ce_ignore(llama_model(p, t, INV13, HQ13, HKV13, E13, window=4), l), P(None, "dp"),
           tok13[..., :-1], labels_with_ignore(tok13), step_maker=make_accum_fori)


# 14. Falcon MQA tiny model, tp8, unrolled accumulation
def falcon_model(p, tok):
    x = p["wte"][tok]
    for lp in p["layers"]:
        x = falcon_block(lp, x, c=ident)
    return layer_norm(x, p["lnf_g"], p["lnf_b"]) @ p["wte"].T


def make_accum_unrolled(loss_fn, opt):
    def step(p, s, tok, lab):
        gs, ls = [], []
        for i in range(tok.shape[0]):
            l, g = jax.value_and_grad(loss_fn)(p, tok[i], lab[i])
            gs.append(g)
            ls.append(l)
        g = jax.tree.map(lambda *x: sum(x) / len(x), *gs)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, jnp.mean(jnp.stack(ls))
    return step


P14 = {"wte": R(V, D, scale=0.3), "layers": [falcon_params() for _ in range(2)], "lnf_g": 1 + R(D, scale=0.1),
       "lnf_b": R(D, scale=0.1)}
S14 = {"wte": P("tp"), "layers": [dict(S6) for _ in range(2)], "lnf_g": P(), "lnf_b": P()}
tok14 = I(0, V, 2, B, T + 1)
train_pair("g.train_falcon_mqa_tied_accum_unrolled.tp8", {"tp": 8}, P14, S14,
           lambda p, t, l: ce_ignore(falcon_model(p, t), l), P(), tok14[..., :-1], labels_with_ignore(tok14),
           step_maker=make_accum_unrolled, opt=optax.chain(optax.clip_by_global_norm(0.5), optax.adamw(3e-4)))


# 15. Phi-3 tiny model, fsdp4 x tp2
def phi3_model(p, tok):
    x = p["embed"][tok]
    for lp in p["layers"]:
        x = phi3_block(lp, x)
    return rms_norm(x, p["norm"]) @ p["lm_head"]


P15 = {"embed": R(V, D, scale=0.5), "layers": [{"ln1": 1 + R(D, scale=0.1), "qkv": W(D, (HQ4 + 2 * HKV4) * E4),
                                                "o": W(D, D), "ln2": 1 + R(D, scale=0.1), "gate_up": W(D, 2 * F4),
                                                "down": W(F4, D)} for _ in range(2)],
       "norm": 1 + R(D, scale=0.1), "lm_head": W(D, V)}
L15 = {"ln1": P(), "qkv": P("fsdp", "tp"), "o": P("tp", "fsdp"), "ln2": P(), "gate_up": P("fsdp", "tp"),
       "down": P("tp", "fsdp")}
S15 = {"embed": P("fsdp", None), "layers": [dict(L15), dict(L15)], "norm": P(), "lm_head": P("fsdp", "tp")}
tok15 = I(0, V, 8, T + 1)
train_pair("g.train_phi3_fused_proj.fsdp4xtp2", {"fsdp": 4, "tp": 2}, P15, S15,
           lambda p, t, l: ce_ignore(phi3_model(p, t), l), P("fsdp"), tok15[:, :-1], labels_with_ignore(tok15))

# 16. Qwen-2 block in bf16, dp4 x tp2
P16 = jax.tree.map(lambda a: a.astype(jnp.bfloat16), P3)
c16 = cons({"dp": 4, "tp": 2}, P("dp", None, "tp", None))
C.gspmd("g.qwen2_block_bf16.dp4xtp2", {"dp": 4, "tp": 2}, (S3, P("dp")), P("dp"),
        lambda p, x: qwen_block(p, x, c=c16), (P16, R(B, T, D).astype(jnp.bfloat16)))

# ============================================================ shard_map families
psum, idx = lax.psum, lax.axis_index
TP17 = 4


# 17. NeoX parallel block, tp4: per-rank heads, one psum of attn + mlp partial sums
def neox_block_tp(bug):
    def body(p, x):
        b, t, d = x.shape
        h1 = layer_norm(x, p["ln1_g"], p["ln1_b"])
        h2 = layer_norm(x, p["ln2_g"], p["ln2_b"])
        hl = H5 // TP17
        qkv = (h1 @ p["qkv_w"] + p["qkv_b"]).reshape(b, t, hl, 3 * E5)
        q, k, v = qkv[..., :E5], qkv[..., E5:2 * E5], qkv[..., 2 * E5:]
        q, k = rope_half(q, POS, INV5), rope_half(k, POS, INV5)
        a = sdpa(q, k, v, causal(t)).reshape(b, t, hl * E5) @ p["dense_w"]
        m = jax.nn.gelu(h2 @ p["fc1_w"] + p["fc1_b"], approximate=False) @ p["fc2_w"]
        if bug == "bias-before-psum":
            return x + psum(a + m + p["dense_b"] + p["fc2_b"], "tp")
        if bug == "attn-not-reduced":
            return x + a + psum(m, "tp") + p["dense_b"] + p["fc2_b"]
        return x + psum(a + m, "tp") + p["dense_b"] + p["fc2_b"]
    return body


P17 = neox_params()
C.smap("s.neox_parallel_block_one_psum.tp4", {"tp": 4}, neox_block_tp, (S5, P()), P(), neox_block, (P17, R(B, T, D)),
       bugs=[("bias-before-psum", ["wrong-scale"]), ("attn-not-reduced", ["missing-all-reduce"])])

# 18. Gemma-2 tied embedding, vocab-parallel lookup + softcapped logits + CE ignore, dp2 x tp4
V18 = 64


def gemma_head_ref(emb, g, tok, lab, mask):
    x = emb[tok] * jnp.sqrt(jnp.float32(D))
    x = gemma_norm(x, g)
    logits = 30.0 * jnp.tanh((x @ emb.T) / 30.0)
    w = mask * (lab != -100)
    safe = jnp.where(lab != -100, lab, 0)
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits, -1), safe[..., None], -1)[..., 0]
    return jnp.sum(nll * w) / jnp.maximum(jnp.sum(w), 1.0)


def gemma_head_vp(bug):
    def body(emb, g, tok, lab, mask):
        vl = emb.shape[0]
        off = idx("tp") * vl
        loc = tok if bug == "lookup-no-offset" else tok - off
        hit = (loc >= 0) & (loc < vl)
        x = jnp.where(hit[..., None], emb[jnp.clip(loc, 0, vl - 1)], 0.0)
        x = psum(x, "tp") * jnp.sqrt(jnp.float32(D))
        x = gemma_norm(x, g)
        z = 30.0 * jnp.tanh((x @ emb.T) / 30.0)
        mx = lax.pmax(lax.stop_gradient(z.max(-1)), "tp")
        lse = jnp.log(psum(jnp.exp(z - mx[..., None]).sum(-1), "tp")) + mx
        valid = lab != -100
        li = jnp.where(valid, lab, 0) - off
        own = (li >= 0) & (li < vl)
        zt = psum(jnp.where(own, jnp.take_along_axis(z, jnp.clip(li, 0, vl - 1)[..., None], -1)[..., 0], 0.0), "tp")
        w = mask * valid
        nll = jnp.where(valid, lse - zt, 0.0) * w
        if bug == "per-shard-mean":
            return lax.pmean(nll.sum() / jnp.maximum(w.sum(), 1.0), "dp")
        return psum(nll.sum(), "dp") / jnp.maximum(psum(w.sum(), "dp"), 1.0)
    return body


tok18 = I(0, V18, B, T + 1)
lab18 = labels_with_ignore(tok18, 0.4)
lab18[:2, :5] = -100  # the two dp halves get different numbers of valid tokens
C.smap("s.gemma2_tied_vocab_parallel_softcap_ce.dp2xtp4", {"dp": 2, "tp": 4}, gemma_head_vp,
       (P("tp", None), P(), P("dp"), P("dp"), P("dp")), P(), gemma_head_ref,
       (R(V18, D, scale=0.2), R(D, scale=0.1), tok18[:, :-1], lab18, (rng.random((B, T)) < 0.8).astype(np.float32)),
       bugs=[("lookup-no-offset", ["wrong-offset"]), ("per-shard-mean", ["wrong-scale"])])

# 19. Qwen-2 GQA attention, 4 kv heads over tp2, dp2 x tp2
HQ19, HKV19, E19 = 8, 4, 4
INV19 = inv_freq(E19, 1e6)


def qwen_attn_ref(wq, wk, wv, bq, bk, bv, wo, x):
    b, t, _ = x.shape
    q = (x @ wq + bq).reshape(b, t, HQ19, E19)
    k = (x @ wk + bk).reshape(b, t, HKV19, E19)
    v = (x @ wv + bv).reshape(b, t, HKV19, E19)
    q, k = rope_half(q, POS, INV19), rope_half(k, POS, INV19)
    return sdpa(q, k, v, causal(t)).reshape(b, t, -1) @ wo


def qwen_attn_tp(bug):
    def body(wq, wk, wv, bq, bk, bv, wo, x):
        b, t, _ = x.shape
        hq, hkv = wq.shape[1] // E19, wk.shape[1] // E19
        q = (x @ wq + bq).reshape(b, t, hq, E19)
        k = (x @ wk + bk).reshape(b, t, hkv, E19)
        v = (x @ wv + bv).reshape(b, t, hkv, E19)
        q, k = rope_half(q, POS, INV19), rope_half(k, POS, INV19)
        if bug == "tile-grouping":
            k, v = jnp.tile(k, (1, 1, hq // hkv, 1)), jnp.tile(v, (1, 1, hq // hkv, 1))
        o = sdpa(q, k, v, causal(t)).reshape(b, t, -1) @ wo
        return psum(o, "dp" if bug == "psum-wrong-axis" else "tp")
    return body


C.smap("s.qwen2_gqa_kv4_over_tp2.dp2xtp2", {"dp": 2, "tp": 2}, qwen_attn_tp,
       (P(None, "tp"),) * 3 + (P("tp"),) * 3 + (P("tp", None), P("dp")), P("dp"), qwen_attn_ref,
       (W(D, HQ19 * E19), W(D, HKV19 * E19), W(D, HKV19 * E19), R(HQ19 * E19, scale=0.1), R(HKV19 * E19, scale=0.1),
        R(HKV19 * E19, scale=0.1), W(HQ19 * E19, D), R(B, T, D)),
       bugs=[("tile-grouping", ["wrong-permutation"]), ("psum-wrong-axis", ["wrong-collective-group"])])

C.finish()
