"""Plain single-device JAX models used as the baselines of the sample corpus.

Every model is a function `forward(cfg, params, tokens) -> logits` where
`params` is a flat dict name -> array (JAX flattens dicts in sorted key order,
so HLO parameter numbers follow: tokens first, then sorted(params)).
Layers are unrolled with a Python loop; each one runs under
jax.named_scope("layers.<i>") so HLO op_name metadata names the layer.

Models:
  llama  - Llama-3 style decoder: gather embedding, RMSNorm, RoPE, grouped-query
           attention with causal mask, SwiGLU MLP, untied LM head.
  moe    - Mixtral style decoder: the same attention, and a top-2-of-8 router
           with a dense (einsum) dispatch over all experts.
  gpt2   - GPT-2 style decoder: learned positional embedding, LayerNorm with
           bias, fused c_attn projection [H, 3H] laid out (q | k | v), GELU MLP.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np

CONFIGS = {
    # tiny configs: used by tests, numerically checked, f32
    "tiny": dict(model="llama", layers=2, hidden=64, heads=8, kv_heads=4,
                 ffn=128, vocab=128, batch=2, seq=8, dtype="float32",
                 rope_theta=500000.0, eps=1e-5),
    "tiny-bf16": dict(model="llama", layers=2, hidden=64, heads=8, kv_heads=4,
                      ffn=128, vocab=128, batch=2, seq=8, dtype="bfloat16",
                      rope_theta=500000.0, eps=1e-5),
    "tiny-qknorm": dict(model="llama", layers=2, hidden=64, heads=8, kv_heads=4,
                        ffn=128, vocab=128, batch=2, seq=8, dtype="float32",
                        rope_theta=500000.0, eps=1e-5, qk_norm=True),
    "tiny-moe": dict(model="moe", layers=2, hidden=64, heads=8, kv_heads=4,
                     ffn=64, experts=8, top_k=2, vocab=128, batch=2, seq=8,
                     dtype="float32", rope_theta=1000000.0, eps=1e-5),
    "tiny-gpt2": dict(model="gpt2", layers=2, hidden=64, heads=8, ffn=256,
                      vocab=128, max_pos=16, batch=2, seq=8, dtype="float32",
                      eps=1e-5),
    # real shapes at full depth, lowered from ShapeDtypeStruct only, bf16
    "llama3.1-8b": dict(model="llama", layers=32, hidden=4096, heads=32,
                        kv_heads=8, ffn=14336, vocab=128256, batch=2, seq=16,
                        dtype="bfloat16", rope_theta=500000.0, eps=1e-5),
    "llama3.1-70b": dict(model="llama", layers=80, hidden=8192, heads=64,
                         kv_heads=8, ffn=28672, vocab=128256, batch=2, seq=16,
                         dtype="bfloat16", rope_theta=500000.0, eps=1e-5),
    "llama3.1-405b": dict(model="llama", layers=126, hidden=16384, heads=128,
                          kv_heads=8, ffn=53248, vocab=128256, batch=2, seq=16,
                          dtype="bfloat16", rope_theta=500000.0, eps=1e-5),
    "mixtral-8x7b": dict(model="moe", layers=32, hidden=4096, heads=32,
                         kv_heads=8, ffn=14336, experts=8, top_k=2, vocab=32000,
                         batch=2, seq=16, dtype="bfloat16",
                         rope_theta=1000000.0, eps=1e-5),
    "mixtral-8x22b": dict(model="moe", layers=56, hidden=6144, heads=48,
                          kv_heads=8, ffn=16384, experts=8, top_k=2,
                          vocab=32768, batch=2, seq=16, dtype="bfloat16",
                          rope_theta=1000000.0, eps=1e-5),
    # the tiny config with its layers under jax.lax.scan (stacked weights)
    "tiny-scan": dict(model="llama", layers=2, hidden=64, heads=8, kv_heads=4,
                      ffn=128, vocab=128, batch=2, seq=8, dtype="float32",
                      rope_theta=500000.0, eps=1e-5, scan=True),
    # device-count scaling (tp = 2 ... 64): heads, kv heads, ffn and vocab divide by 64
    "llama-scale": dict(model="llama", layers=4, hidden=512, heads=64, kv_heads=64,
                        ffn=1024, vocab=2048, batch=2, seq=16, dtype="float32",
                        rope_theta=500000.0, eps=1e-5),
}


class Cfg:
    def __init__(self, name):
        self.name = name
        for k, v in CONFIGS[name].items():
            setattr(self, k, v)
        self.head_dim = self.hidden // self.heads
        self.dt = jnp.dtype(self.dtype)
        if not hasattr(self, "qk_norm"):
            self.qk_norm = False
        if not hasattr(self, "kv_heads"):
            self.kv_heads = self.heads
        if not hasattr(self, "scan"):
            self.scan = False


def param_shapes(cfg):
    """Name -> shape of every weight (sorted by name when flattened by JAX).
    Scanned configs stack the per-layer weights: `layers.<w>` is [layers, ...]."""
    if cfg.scan:
        return stack_layers(cfg, layer_param_shapes(cfg), lambda shp: (cfg.layers,) + shp)
    return layer_param_shapes(cfg)


def stack_layers(cfg, per_layer, stack):
    """`layers.0.<w>` -> `layers.<w>` (value mapped by `stack`); other layers dropped."""
    out = {}
    for k, v in per_layer.items():
        if not k.startswith("layers."):
            out[k] = v
        elif k.startswith("layers.0."):
            out["layers." + k[len("layers.0."):]] = stack(v)
    return out


def layer_param_shapes(cfg):
    H, F, V, hd = cfg.hidden, cfg.ffn, cfg.vocab, cfg.head_dim
    s = {"embed": (V, H), "final_norm": (H,), "lm_head": (H, V)}
    if cfg.model == "gpt2":
        s = {"embed": (V, H), "pos_embed": (cfg.max_pos, H),
             "final_norm": (H,), "final_norm_b": (H,), "lm_head": (H, V)}
    for i in range(cfg.layers):
        p = f"layers.{i}."
        if cfg.model == "gpt2":
            s.update({p + "ln1": (H,), p + "ln1_b": (H,),
                      p + "c_attn": (H, 3 * H), p + "c_attn_b": (3 * H,),
                      p + "c_proj": (H, H), p + "c_proj_b": (H,),
                      p + "ln2": (H,), p + "ln2_b": (H,),
                      p + "c_fc": (H, F), p + "c_fc_b": (F,),
                      p + "c_mlp_proj": (F, H), p + "c_mlp_proj_b": (H,)})
            continue
        s.update({p + "attn_norm": (H,),
                  p + "wq": (H, cfg.heads * hd),
                  p + "wk": (H, cfg.kv_heads * hd),
                  p + "wv": (H, cfg.kv_heads * hd),
                  p + "wo": (cfg.heads * hd, H),
                  p + "mlp_norm": (H,)})
        if cfg.qk_norm:
            s[p + "q_norm"] = (cfg.heads * hd,)
        if cfg.model == "moe":
            E = cfg.experts
            s.update({p + "router": (H, E), p + "w_gate": (E, H, F),
                      p + "w_up": (E, H, F), p + "w_down": (E, F, H)})
        else:
            s.update({p + "w_gate": (H, F), p + "w_up": (H, F),
                      p + "w_down": (F, H)})
    return s


def abstract_inputs(cfg):
    """(tokens, params) as ShapeDtypeStructs: nothing is allocated."""
    tokens = jax.ShapeDtypeStruct((cfg.batch, cfg.seq), jnp.int32)
    params = {k: jax.ShapeDtypeStruct(v, cfg.dt)
              for k, v in param_shapes(cfg).items()}
    return tokens, params


def random_inputs(cfg, seed=0):
    """Seeded concrete inputs (numpy, float32 draws cast to cfg.dtype)."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, cfg.vocab, size=(cfg.batch, cfg.seq), dtype=np.int32)
    params = {}
    for k, shp in sorted(param_shapes(cfg).items()):
        if k.endswith("norm") or k.endswith("ln1") or k.endswith("ln2"):
            a = 1.0 + 0.1 * rng.standard_normal(shp)
        elif k.endswith("_b"):
            a = 0.1 * rng.standard_normal(shp)
        else:
            fan_in = shp[-2] if len(shp) >= 2 else shp[0]
            scale = 1.0 if k in ("embed", "pos_embed") else 1.0 / math.sqrt(fan_in)
            a = scale * rng.standard_normal(shp)
        params[k] = np.asarray(a, dtype=np.float32).astype(cfg.dt)
    return tokens, params


# ----------------------------------------------------------------- building blocks

def rms_norm(x, w, eps):
    xf = x.astype(jnp.float32)
    var = jnp.mean(xf * xf, axis=-1, keepdims=True)
    return (xf * jax.lax.rsqrt(var + eps)).astype(x.dtype) * w


def layer_norm(x, w, b, eps):
    xf = x.astype(jnp.float32)
    mu = jnp.mean(xf, axis=-1, keepdims=True)
    var = jnp.mean((xf - mu) ** 2, axis=-1, keepdims=True)
    return ((xf - mu) * jax.lax.rsqrt(var + eps)).astype(x.dtype) * w + b


def rope_tables(seq, head_dim, theta, offset=0):
    inv = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    pos = jnp.arange(seq, dtype=jnp.float32) + offset
    ang = pos[:, None] * inv[None, :]
    ang = jnp.concatenate([ang, ang], axis=-1)          # [S, hd]
    return jnp.cos(ang), jnp.sin(ang)


def apply_rope(x, cos, sin):
    """x: [B, S, heads, hd]; rotate-half convention (HF Llama)."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    rot = jnp.concatenate([-x2, x1], axis=-1)
    c = cos[None, :, None, :].astype(x.dtype)
    s = sin[None, :, None, :].astype(x.dtype)
    return x * c + rot * s


def causal_attention(q, k, v, scale):
    """q: [B, S, nq, hd]; k, v: [B, S, nkv, hd] (GQA: nq % nkv == 0).
    Returns [B, S, nq, hd]."""
    rep = q.shape[2] // k.shape[2]
    k = jnp.repeat(k, rep, axis=2)
    v = jnp.repeat(v, rep, axis=2)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) * scale
    S = q.shape[1]
    mask = jnp.tril(jnp.ones((S, S), dtype=bool))
    s = jnp.where(mask[None, None], s, jnp.float32(-1e30))
    p = jax.nn.softmax(s, axis=-1).astype(v.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", p, v)


def swiglu(x, w_gate, w_up, w_down):
    return (jax.nn.silu(x @ w_gate) * (x @ w_up)) @ w_down


def top2_weights(logits):
    """Mixtral routing: softmax over the two largest router logits, zero elsewhere.
    Written with max/compare/select (no sort, no top_k custom call).
    logits: [T, E] -> weights [T, E]."""
    lf = logits.astype(jnp.float32)
    m1 = jnp.max(lf, axis=-1, keepdims=True)
    first = lf >= m1
    rest = jnp.where(first, jnp.float32(-1e30), lf)
    m2 = jnp.max(rest, axis=-1, keepdims=True)
    chosen = first | (rest >= m2)
    e = jnp.where(chosen, jnp.exp(lf - m1), 0.0)
    return (e / jnp.sum(e, axis=-1, keepdims=True)).astype(logits.dtype)


def moe_dense(x, router, w_gate, w_up, w_down):
    """x: [T, H]; experts stacked on dim 0. Dense dispatch: every expert sees every
    token, the combine weights are zero for unrouted (token, expert) pairs."""
    wts = top2_weights(x @ router)                                  # [T, E]
    g = jnp.einsum("th,ehf->etf", x, w_gate)
    u = jnp.einsum("th,ehf->etf", x, w_up)
    y = jnp.einsum("etf,efh->eth", jax.nn.silu(g) * u, w_down)      # [E, T, H]
    return jnp.einsum("te,eth->th", wts, y)


# ----------------------------------------------------------------- models

def llama_layer(cfg, p, i, x, cos, sin, pre=None):
    """One decoder layer; its weights are p[pre + "wq"], ... (pre defaults to
    `layers.<i>.`; a scanned body passes pre="layers." and one layer's slices)."""
    B, S, H = x.shape
    hd = cfg.head_dim
    if pre is None:
        pre = f"layers.{i}."
    with jax.named_scope("attn"):
        h = rms_norm(x, p[pre + "attn_norm"], cfg.eps)
        q = h @ p[pre + "wq"]
        if cfg.qk_norm:
            q = rms_norm(q, p[pre + "q_norm"], cfg.eps)
        q = q.reshape(B, S, cfg.heads, hd)
        k = (h @ p[pre + "wk"]).reshape(B, S, cfg.kv_heads, hd)
        v = (h @ p[pre + "wv"]).reshape(B, S, cfg.kv_heads, hd)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        o = causal_attention(q, k, v, 1.0 / math.sqrt(hd))
        x = x + o.reshape(B, S, cfg.heads * hd) @ p[pre + "wo"]
    with jax.named_scope("mlp"):
        h = rms_norm(x, p[pre + "mlp_norm"], cfg.eps)
        if cfg.model == "moe":
            y = moe_dense(h.reshape(B * S, H), p[pre + "router"], p[pre + "w_gate"],
                          p[pre + "w_up"], p[pre + "w_down"]).reshape(B, S, H)
        else:
            y = swiglu(h, p[pre + "w_gate"], p[pre + "w_up"], p[pre + "w_down"])
        x = x + y
    return x


def llama_forward(cfg, params, tokens):
    B, S = tokens.shape
    with jax.named_scope("embed"):
        x = jnp.take(params["embed"], tokens, axis=0)
    cos, sin = rope_tables(S, cfg.head_dim, cfg.rope_theta)
    if cfg.scan:
        # one scanned body over the stacked weights: an HLO while loop whose carry
        # holds the counter, the residual stream and the stacked weights
        stacked = {k: v for k, v in params.items() if k.startswith("layers.")}

        def step(x, lp):
            return llama_layer(cfg, lp, None, x, cos, sin, pre="layers."), None
        with jax.named_scope("layers"):
            x, _ = jax.lax.scan(step, x, stacked)
    else:
        for i in range(cfg.layers):
            with jax.named_scope(f"layers.{i}"):
                x = llama_layer(cfg, params, i, x, cos, sin)
    with jax.named_scope("final_norm"):
        x = rms_norm(x, params["final_norm"], cfg.eps)
    with jax.named_scope("lm_head"):
        return x @ params["lm_head"]


def gpt2_forward(cfg, params, tokens):
    B, S = tokens.shape
    H, nh, hd = cfg.hidden, cfg.heads, cfg.head_dim
    with jax.named_scope("embed"):
        x = jnp.take(params["embed"], tokens, axis=0) + params["pos_embed"][:S][None]
    for i in range(cfg.layers):
        pre = f"layers.{i}."
        with jax.named_scope(f"layers.{i}"):
            with jax.named_scope("attn"):
                h = layer_norm(x, params[pre + "ln1"], params[pre + "ln1_b"], cfg.eps)
                qkv = h @ params[pre + "c_attn"] + params[pre + "c_attn_b"]
                q, k, v = jnp.split(qkv, 3, axis=-1)
                q = q.reshape(B, S, nh, hd)
                k = k.reshape(B, S, nh, hd)
                v = v.reshape(B, S, nh, hd)
                o = causal_attention(q, k, v, 1.0 / math.sqrt(hd)).reshape(B, S, H)
                x = x + o @ params[pre + "c_proj"] + params[pre + "c_proj_b"]
            with jax.named_scope("mlp"):
                h = layer_norm(x, params[pre + "ln2"], params[pre + "ln2_b"], cfg.eps)
                h = jax.nn.gelu(h @ params[pre + "c_fc"] + params[pre + "c_fc_b"],
                                approximate=True)
                x = x + h @ params[pre + "c_mlp_proj"] + params[pre + "c_mlp_proj_b"]
    with jax.named_scope("final_norm"):
        x = layer_norm(x, params["final_norm"], params["final_norm_b"], cfg.eps)
    with jax.named_scope("lm_head"):
        return x @ params["lm_head"]


def forward(cfg, params, tokens):
    if cfg.model == "gpt2":
        return gpt2_forward(cfg, params, tokens)
    return llama_forward(cfg, params, tokens)


# Full-size configs with their layers under jax.lax.scan (stacked weights, one HLO while
# loop), like tiny-scan. Added at the end of the file: every sample records the source
# lines of the code above, so inserting lines there would rewrite the whole corpus.
CONFIGS["llama3.1-8b-scan"] = dict(CONFIGS["llama3.1-8b"], scan=True)
CONFIGS["llama3.1-405b-scan"] = dict(CONFIGS["llama3.1-405b"], scan=True)
