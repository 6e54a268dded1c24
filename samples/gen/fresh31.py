"""samples/fresh31: a 31st batch of programs as a user writes them, on the
theme of diffusion transformers and diffusion / flow-matching training steps
under sharding in JAX / optax, none of them an idiom of samples/fresh ..
fresh29, probe, train or wild.
shard_map families:
 1. a sinusoidal timestep embedding (cos half then sin half, DiT order) whose
    frequencies are split over tp: rank r computes its block of frequencies
    and multiplies its cos and sin blocks by the matching row blocks of the
    replicated first MLP weight (dynamic_slice at r*fl and F + r*fl), psum
    over tp, SiLU, then a column-parallel second layer; batch over dp.
    Bugs: frequencies at local indices (no r*fl offset), the sin rows sliced
    at the cos offset, the first bias added inside the psum (tp times).
 2. adaLN-Zero modulation with the hidden dim over tp: the six chunks
    (shift/scale/gate for attention and MLP) from a replicated (D, 6, D)
    weight, each rank slicing its hidden block; LayerNorm statistics over
    the sharded hidden dim by psum. Bugs: LayerNorm statistics local, the
    modulation sliced at the dp index instead of the tp index, the variance
    about the local mean.
 3. patchify of images whose height is over sp (batch over dp): the local
    rows are cut into p x p patches (reshape + transpose), embedded, and a
    2-D sin-cos position embedding computed on device at the global patch
    rows; the patch projection in bf16 with f32 accumulation. Bugs: local
    patch rows (no offset), the patch vector in (pw, ph, c)
    order, the row offset counted in pixels instead of patches.
 4. the DiT final layer (adaLN shift / scale, LayerNorm, linear to p*p*c)
    and unpatchify with the patch sequence over sp and the image height
    over sp. Bugs: the pixels inside a patch transposed, the token grid read
    column-major.
 5. a DiT block with adaLN-Zero (replicated modulation weight), attention
    heads over tp (q/k/v column-parallel, output projection psum'd), MLP
    over tp; batch over dp. Bugs: residual added inside the psum, the MLP
    output not psum'd, the second MLP bias inside the psum.
 6. classifier-free-guidance label dropout: per-example keys split from the
    step key folded with the dp index, labels dropped to the null class with
    p = 0.4, then a vocab-parallel class-embedding lookup (table rows over
    tp, masked take, psum) plus a sinusoidal timestep embedding. Bugs: key
    not folded (same drops on every dp shard), key folded with the tp index
    (tp ranks disagree), lookup without the vocabulary offset.
 7. CFG sampling with the doubled batch [cond; uncond] sharded over dp4
    (devices 0-1 cond, 2-3 uncond): eps of the partner half by ppermute
    (i <-> i + n/2), guidance eu + w (ec - eu), then one DDIM (eta = 0) step
    from alpha-bar at t and t_prev on the conditional half's x; every
    device returns the guided update of its pair. The seeded inputs give
    the two halves different x (as the witness's do) so that the third bug
    shows; the GSPMD pair 17. passes [x; x]. Bugs: partner taken as
    the next device, halves swapped (guidance toward the unconditional),
    the uncond devices stepping their own x.
 8. v-prediction loss with min-SNR-gamma weights (min(snr, 5) / (snr + 1))
    normalised by their sum over the global batch; timesteps are a
    replicated global vector gathered at the device's rows (dynamic_slice
    at idx * nl), alpha-bar gathered at them; value_and_grad of the local
    numerator over the global weight sum, gradients psum'd. Bugs: timesteps
    sliced at offset 0, the weights normalised by the local sum, gradients
    pmean'd.
 9. a rectified-flow (flow-matching) AdamW training step under dp4:
    per-example keys fold_in(key, global example index), logit-normal t,
    x_t = (1 - t) x0 + t eps, target eps - x0; loss and gradients pmean'd,
    optax.adamw. Bugs: keys folded with the local example index (duplicate
    noise across devices), gradients not averaged, one t per device.
10. a full DiT training step (patchify, patch embedding, timestep MLP and
    class embedding into c, one adaLN-Zero block with heads and MLP over
    tp, final layer, unpatchify, epsilon-prediction loss on a cosine
    schedule) under dp2 x tp4 with check_vma=True: the noise drawn from the
    key folded with the dp index (the baseline draws each dp block with its
    own key), loss pmean'd over dp, jax.grad, optax.adamw shard-wise, and
    an EMA of the parameters. Bugs: noise key not folded (duplicate noise
    on the dp shards), EMA updated only on tp rank 0 for the tp-sharded
    leaves.
11. a DDIM sampler (three steps, eta = 0) by lax.scan over (t, t_prev)
    pairs with a one-layer attention denoiser whose token sequence is over
    sp: learned positions sliced at the device's tokens, keys and values
    all_gather'd. Bugs: attention over the local keys only, positions at
    offset 0.
12. an EMA of parameters under mixed shardings (a matrix over tp, an FSDP
    matrix over dp, a matrix over (dp, tp), a replicated gain) with the
    warm-up decay min(0.999, (1 + step) / (10 + step)), returning the EMA
    and the global distance |ema - params| (per-leaf squares psum'd over
    the leaf's sharded axes). Bugs: EMA updated only on dp rank 0, the
    replicated leaf's squares psum'd over all axes, the (dp, tp) matrix's
    squares psum'd over dp only.
13. adaLN-gated attention of a DiT with the patch sequence over sp and
    heads over tp (sp2 x tp4): keys and values all_gather'd over sp, the
    output projection psum'd over tp. Bugs: keys and values gathered over
    tp, the output projection psum'd over sp.
GSPMD pairs (jax.jit with in/out shardings): 14. the DiT block of 5. with
its weights sharded Megatron-style (dp2 x tp4); 15. the rectified-flow
AdamW step of 9. with the batch over dp8; 16. patchify, embedding, the final
layer and unpatchify with the image height over sp4; 17. the CFG + DDIM
step of 7. with the doubled batch over dp4; 18. the training step of 10.
with EMA, parameters sharded over tp and batch over dp (dp2 x tp4); 19. the
v-prediction min-SNR loss and its gradient of 8. with the batch over dp8.
Numerics: every correct pair agrees with its baseline at rounding level (f32,
at most 2.6e-6 on outputs of magnitude 1-15); every bug variant differs
clearly (see "numerics" in the manifest; the smallest, 0.016, is the EMA bug
of 10., whose EMA moves by 1 - 0.9 of the step). Nothing was dropped for its
numerics; 7.'s seeded inputs were changed from [x; x] to two different
halves after a first export where the third bug could not show.
Not marked known_miss: 5.'s bug b2-inside-psum, which the rules relate to
the baseline (verified with --no-witness) while execution shows it differs;
the checker reports it unverified as a defect of its own.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from the
single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh31.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh31.sh)
from fresh_lib import Corpus, seeded, state_specs, np_tree  # noqa: E402

SCRIPT = "samples/gen/fresh31.py"
C = Corpus("samples/fresh31", SCRIPT, "samples/gen/run_fresh31.sh", sys.argv[1:])
rng, R, I = seeded(3131)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
f32 = jnp.float32


def layernorm(x, eps=1e-6):
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps)


def modulate(x, shift, scale):
    return x * (1.0 + scale[:, None]) + shift[:, None]


def t_sincos(t, dim, max_period=10000.0):
    """DiT's timestep embedding: [cos(t f), sin(t f)], f = max_period^(-k/half)."""
    half = dim // 2
    fr = jnp.exp(-np.log(max_period) * jnp.arange(half, dtype=f32) / half)
    a = t.astype(f32)[:, None] * fr[None]
    return jnp.concatenate([jnp.cos(a), jnp.sin(a)], -1)


def cosine_alpha_bar(T, s=0.008):
    x = np.arange(T + 1) / T
    f = np.cos((x + s) / (1 + s) * np.pi / 2) ** 2
    ab = f[1:] / f[0]
    return np.clip(ab, 1e-3, 0.9999).astype(np.float32)


def sdpa(q, k, v):
    """q (b, n, h, e), k / v (b, m, h, e), no mask."""
    s = jnp.einsum("bnhe,bmhe->bhnm", q, k) / np.sqrt(q.shape[-1])
    return jnp.einsum("bhnm,bmhe->bnhe", jax.nn.softmax(s, -1), v)


TS = 50
AB = cosine_alpha_bar(TS)

# ---------------------------------------------------------------------------
# 1. timestep embedding with its frequencies split over tp, and the timestep
#    MLP (first layer row-parallel over the embedding, second column-parallel).
F1, H1, O1 = 16, 32, 16   # frequencies (embedding 2*F1), hidden, output


def t_mlp(t, w1, b1, w2, b2):
    h = jax.nn.silu(t_sincos(t, 2 * F1) @ w1 + b1)
    return h @ w2 + b2


def t_mlp_tp(bug):
    def f(t, w1, b1, w2, b2):
        r, fl = idx("tp"), F1 // 4
        k = jnp.arange(fl, dtype=f32) if bug == "freq-offset-missing" else (r * fl + jnp.arange(fl)).astype(f32)
        fr = jnp.exp(-np.log(10000.0) * k / F1)
        a = jnp.outer(t, fr)
        wc = lax.dynamic_slice_in_dim(w1, r * fl, fl, 0)
        ws = lax.dynamic_slice_in_dim(w1, r * fl if bug == "sin-rows-at-cos-offset" else F1 + r * fl, fl, 0)
        h = jnp.dot(jnp.cos(a), wc) + jnp.dot(jnp.sin(a), ws)
        if bug == "bias-inside-psum":
            h = psum(h + b1, "tp")
        else:
            h = psum(h, "tp") + b1
        return jnp.dot(jax.nn.silu(h), w2) + b2
    return f


C.smap("s.timestep_freqs_split_tp_mlp.dp2xtp4", {"dp": 2, "tp": 4}, t_mlp_tp,
       (P("dp"), P(), P(), P(None, "tp"), P("tp")), P("dp", "tp"), t_mlp,
       (rng.uniform(0, 1000, 8).astype(np.float32), R(2 * F1, H1, scale=0.3), R(H1, scale=0.1),
        R(H1, O1, scale=0.3), R(O1, scale=0.1)),
       bugs=[("freq-offset-missing", ["wrong-offset"]), ("sin-rows-at-cos-offset", ["wrong-offset"]),
             ("bias-inside-psum", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 2. adaLN-Zero modulation with the hidden dim over tp.
D2 = 16


def adaln_six(x, c, wm, bm):
    mod = jnp.einsum("bd,dke->bke", jax.nn.silu(c), wm) + bm
    xn = layernorm(x)
    h1 = modulate(xn, mod[:, 0], mod[:, 1])
    h2 = modulate(xn, mod[:, 3], mod[:, 4])
    return h1, h2, mod[:, jnp.array([2, 5])]


def adaln_six_tp(bug):
    def f(x, c, wm, bm):
        dl = x.shape[-1]
        r = idx("dp") if bug == "mod-sliced-at-dp-index" else idx("tp")
        wl = lax.dynamic_slice_in_dim(wm, r * dl, dl, 2)
        bl = lax.dynamic_slice_in_dim(bm, r * dl, dl, 1)
        mod = jnp.einsum("bd,dke->bke", jax.nn.silu(c), wl) + bl
        if bug == "ln-stats-local":
            xn = layernorm(x)
        else:
            mu = psum(jnp.sum(x, -1, keepdims=True), "tp") / D2
            m_loc = jnp.mean(x, -1, keepdims=True) if bug == "var-about-local-mean" else mu
            var = psum(jnp.sum(jnp.square(x - m_loc), -1, keepdims=True), "tp") / D2
            xn = (x - mu) * lax.rsqrt(var + 1e-6)
        h1 = modulate(xn, mod[:, 0], mod[:, 1])
        h2 = modulate(xn, mod[:, 3], mod[:, 4])
        return h1, h2, jnp.stack([mod[:, 2], mod[:, 5]], 1)
    return f


C.smap("s.adaln_zero_six_chunks_hidden_tp.dp2xtp4", {"dp": 2, "tp": 4}, adaln_six_tp,
       (P("dp", None, "tp"), P("dp"), P(), P()), (P("dp", None, "tp"),) * 3, adaln_six,
       (R(4, 4, D2) + 0.5, R(4, D2), R(D2, 6, D2, scale=0.3), R(6, D2, scale=0.1)),
       bugs=[("ln-stats-local", ["missing-all-reduce"]), ("mod-sliced-at-dp-index", ["wrong-collective-group"]),
             ("var-about-local-mean", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. patchify with the image height over sp and 2-D sin-cos positions
#    computed on device at the global patch rows.
PT, CH, D3 = 2, 3, 16


def patchify(img, p=PT):
    b, h, w, c = img.shape
    x = img.reshape(b, h // p, p, w // p, p, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(b, (h // p) * (w // p), p * p * c)


def unpatchify(x, gh, gw, p=PT, c=CH):
    b = x.shape[0]
    x = x.reshape(b, gh, gw, p, p, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(b, gh * p, gw * p, c)


def sincos_1d(pos, dim):
    om = 1.0 / 10000 ** (jnp.arange(dim // 2, dtype=f32) / (dim / 2.0))
    a = pos.astype(f32)[:, None] * om[None]
    return jnp.concatenate([jnp.sin(a), jnp.cos(a)], -1)


def pos_2d(rows, cols, dim):
    er, ec = sincos_1d(rows, dim // 2), sincos_1d(cols, dim // 2)
    gh, gw = er.shape[0], ec.shape[0]
    e = jnp.concatenate([jnp.broadcast_to(er[:, None], (gh, gw, dim // 2)),
                         jnp.broadcast_to(ec[None], (gh, gw, dim // 2))], -1)
    return e.reshape(gh * gw, dim)


def patch_embed(img, wp, bp):
    """bf16 patch projection with f32 accumulation, f32 bias and positions."""
    gh, gw = img.shape[1] // PT, img.shape[2] // PT
    y = jnp.dot(patchify(img).astype(jnp.bfloat16), wp.astype(jnp.bfloat16), preferred_element_type=f32)
    return y + bp + pos_2d(jnp.arange(gh), jnp.arange(gw), wp.shape[1])


def patch_embed_sp(bug):
    def f(img, wp, bp):
        b, hl, w, c = img.shape
        ghl, gw = hl // PT, w // PT
        if bug == "patch-vector-hw-swapped":
            x = img.reshape(b, ghl, PT, gw, PT, c).transpose(0, 1, 3, 4, 2, 5).reshape(b, ghl * gw, -1)
        else:
            x = patchify(img)
        if bug == "local-patch-rows":
            rows = jnp.arange(ghl)
        elif bug == "row-offset-in-pixels":
            rows = idx("sp") * hl + jnp.arange(ghl)
        else:
            rows = idx("sp") * ghl + jnp.arange(ghl)
        y = jnp.einsum("bnk,kd->bnd", x.astype(jnp.bfloat16), wp.astype(jnp.bfloat16), preferred_element_type=f32)
        return y + bp + pos_2d(rows, jnp.arange(gw), wp.shape[1])
    return f


C.smap("s.patchify_sincos2d_height_sp.dp2xsp4", {"dp": 2, "sp": 4}, patch_embed_sp,
       (P("dp", "sp"), P(), P()), P("dp", "sp"), patch_embed,
       (R(4, 16, 8, CH), R(PT * PT * CH, D3, scale=0.3), R(D3, scale=0.1)),
       bugs=[("local-patch-rows", ["wrong-offset"]), ("patch-vector-hw-swapped", ["wrong-reshape-order"]),
             ("row-offset-in-pixels", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 4. DiT final layer and unpatchify, patch sequence and image height over sp.
GH4, GW4 = 8, 4


def final_layer(x, c, fm, fb, fo, fob):
    mod = jnp.einsum("bd,dke->bke", jax.nn.silu(c), fm) + fb
    h = modulate(layernorm(x), mod[:, 0], mod[:, 1])
    return h @ fo + fob


def final_unpatchify(x, c, fm, fb, fo, fob):
    return unpatchify(final_layer(x, c, fm, fb, fo, fob), GH4, GW4)


def final_unpatchify_sp(bug):
    def f(x, c, fm, fb, fo, fob):
        y = final_layer(x, c, fm, fb, fo, fob)
        b, nl = y.shape[:2]
        ghl = nl // GW4
        if bug == "patch-pixels-transposed":
            y = y.reshape(b, ghl, GW4, PT, PT, CH).transpose(0, 1, 4, 2, 3, 5)
        elif bug == "token-grid-column-major":
            y = y.reshape(b, GW4, ghl, PT, PT, CH).transpose(0, 2, 3, 1, 4, 5)
        else:
            y = y.reshape(b, ghl, GW4, PT, PT, CH).transpose(0, 1, 3, 2, 4, 5)
        return y.reshape(b, ghl * PT, GW4 * PT, CH)
    return f


C.smap("s.final_layer_unpatchify_tokens_sp.sp4", {"sp": 4}, final_unpatchify_sp,
       (P(None, "sp"), P(), P(), P(), P(), P()), P(None, "sp"), final_unpatchify,
       (R(2, GH4 * GW4, D3), R(2, D3), R(D3, 2, D3, scale=0.3), R(2, D3, scale=0.1),
        R(D3, PT * PT * CH, scale=0.3), R(PT * PT * CH, scale=0.1)),
       bugs=[("patch-pixels-transposed", ["wrong-reshape-order"]), ("token-grid-column-major", ["wrong-reshape-order"])])

# ---------------------------------------------------------------------------
# 5. a DiT block with adaLN-Zero, heads over tp, MLP over tp.
D5, NH5, HD5, F5 = 16, 4, 4, 32


def dit_block(p, x, c):
    mod = jnp.einsum("bd,dke->bke", jax.nn.silu(c), p["wm"]) + p["bm"]
    sh1, sc1, g1, sh2, sc2, g2 = (mod[:, i] for i in range(6))
    h = modulate(layernorm(x), sh1, sc1)
    q, k, v = (jnp.einsum("bnd,dhe->bnhe", h, p[w]) for w in ("wq", "wk", "wv"))
    o = jnp.einsum("bnhe,hed->bnd", sdpa(q, k, v), p["wo"])
    x = x + g1[:, None] * o
    h = modulate(layernorm(x), sh2, sc2)
    m = jax.nn.gelu(h @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return x + g2[:, None] * m


def dit_block_tp(bug):
    def f(p, x, c):
        mod = jnp.einsum("bd,dke->bke", jax.nn.silu(c), p["wm"]) + p["bm"]
        sh1, sc1, g1, sh2, sc2, g2 = (mod[:, i] for i in range(6))
        h = modulate(layernorm(x), sh1, sc1)
        q, k, v = (jnp.einsum("bnd,dhe->bnhe", h, p[w]) for w in ("wq", "wk", "wv"))
        o = jnp.einsum("bnhe,hed->bnd", sdpa(q, k, v), p["wo"])
        if bug == "residual-inside-psum":
            x = psum(x + g1[:, None] * o, "tp")
        else:
            x = x + g1[:, None] * psum(o, "tp")
        h = modulate(layernorm(x), sh2, sc2)
        m = jax.nn.gelu(h @ p["w1"] + p["b1"]) @ p["w2"]
        if bug == "mlp-not-psummed":
            m = m + p["b2"]
        elif bug == "b2-inside-psum":
            m = psum(m + p["b2"], "tp")
        else:
            m = psum(m, "tp") + p["b2"]
        return x + g2[:, None] * m
    return f


def dit_params(D, NH, HD, F):
    return {"wm": R(D, 6, D, scale=0.25), "bm": R(6, D, scale=0.1),
            "wq": R(D, NH, HD, scale=0.3), "wk": R(D, NH, HD, scale=0.3), "wv": R(D, NH, HD, scale=0.3),
            "wo": R(NH, HD, D, scale=0.3), "w1": R(D, F, scale=0.25), "b1": R(F, scale=0.1),
            "w2": R(F, D, scale=0.2), "b2": R(D, scale=0.1)}


DIT_SPEC = {"wm": P(), "bm": P(), "wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"),
            "wo": P("tp"), "w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp"), "b2": P()}
p5 = dit_params(D5, NH5, HD5, F5)
x5, c5 = R(4, 8, D5), R(4, D5)
C.smap("s.dit_block_adaln_zero_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, dit_block_tp,
       (DIT_SPEC, P("dp"), P("dp")), P("dp"), dit_block, (p5, x5, c5),
       bugs=[("residual-inside-psum", ["wrong-reduction"]), ("mlp-not-psummed", ["missing-all-reduce"]),
             ("b2-inside-psum", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 6. CFG label dropout with per-example keys from the step key folded with
#    the dp index, then a vocab-parallel class-embedding lookup.
NCLS, D6, PDROP, NDP6 = 15, 16, 0.4, 2   # classes 0..14, null class 15


def drop_labels_ref(key, y):
    nl = y.shape[0] // NDP6
    keys = jnp.concatenate([jax.random.split(jax.random.fold_in(key, g), nl) for g in range(NDP6)])
    drop = jax.vmap(lambda k: jax.random.bernoulli(k, PDROP))(keys)
    return jnp.where(drop, NCLS, y)


def cond_embed(key, y, t, table):
    return table[drop_labels_ref(key, y)] + t_sincos(t, D6)


def cond_embed_tp(bug):
    def f(key, y, t, table):
        nl, vl = y.shape[0], table.shape[0]
        if bug == "key-not-folded":
            k = key
        elif bug == "key-folded-with-tp-index":
            k = jax.random.fold_in(key, idx("tp"))
        else:
            k = jax.random.fold_in(key, idx("dp"))
        drop = jax.vmap(lambda k: jax.random.bernoulli(k, PDROP))(jax.random.split(k, nl))
        yy = jnp.where(drop, NCLS, y)
        loc = yy if bug == "lookup-without-offset" else yy - idx("tp") * vl
        ok = (loc >= 0) & (loc < vl)
        e = jnp.take(table, jnp.clip(loc, 0, vl - 1), axis=0) * ok[:, None]
        return psum(e, "tp") + t_sincos(t, D6)
    return f


C.smap("s.cfg_label_dropout_folded_keys_vocab_tp.dp2xtp4", {"dp": 2, "tp": 4}, cond_embed_tp,
       (P(), P("dp"), P("dp"), P("tp")), P("dp"), cond_embed,
       (np.array([0, 3131], np.uint32), I(0, NCLS, 8), rng.uniform(0, 1000, 8).astype(np.float32),
        R(NCLS + 1, D6)),
       bugs=[("key-not-folded", ["wrong-random-key"]), ("key-folded-with-tp-index", ["wrong-random-key"]),
             ("lookup-without-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 7. CFG sampling with the doubled batch [cond; uncond] over dp4 and one
#    DDIM step.
B7, N7, D7, GUIDE = 4, 4, 8, 4.0


def eps_model7(p, x, y, t):
    e = p["emb"][y][:, None] + (t_sincos(t[None], 8) @ p["wt"])[None]
    return jax.nn.silu(x @ p["w1"] + e) @ p["w2"]


def ddim_step(x, e, t, tprev):
    ab, abp = jnp.asarray(AB)[t], jnp.asarray(AB)[tprev]
    x0 = (x - jnp.sqrt(1 - ab) * e) / jnp.sqrt(ab)
    return jnp.sqrt(abp) * x0 + jnp.sqrt(1 - abp) * e


def cfg_ddim(p, xx, yy, t, tprev):
    eps = eps_model7(p, xx, yy, t)
    ec, eu = eps[:B7], eps[B7:]
    e = eu + GUIDE * (ec - eu)
    xn = ddim_step(xx[:B7], e, t, tprev)
    return jnp.concatenate([xn, xn], 0)


def cfg_ddim_dp(bug):
    def f(p, xx, yy, t, tprev):
        n = 4
        me = idx("dp")
        if bug == "partner-next-device":
            perm = [(i, (i + 1) % n) for i in range(n)]
        else:
            perm = [(i, (i + n // 2) % n) for i in range(n)]
        eps = eps_model7(p, xx, yy, t)
        other = lax.ppermute(eps, "dp", perm)
        cond = (me >= n // 2) if bug == "halves-swapped" else (me < n // 2)
        ec = jnp.where(cond, eps, other)
        eu = jnp.where(cond, other, eps)
        e = eu + GUIDE * (ec - eu)
        if bug == "uncond-steps-own-x":
            x = xx
        else:
            x = jnp.where(me < n // 2, xx, lax.ppermute(xx, "dp", perm))
        return ddim_step(x, e, t, tprev)
    return f


p7 = {"emb": R(NCLS + 1, D7, scale=0.5), "wt": R(8, D7, scale=0.5), "w1": R(D7, D7, scale=0.4),
      "w2": R(D7, D7, scale=0.4)}
x7 = R(B7, N7, D7)
y7 = np.concatenate([I(0, NCLS, B7), np.full(B7, NCLS, np.int32)])
C.smap("s.cfg_doubled_batch_pairs_ddim.dp4", {"dp": 4}, cfg_ddim_dp,
       (jax.tree.map(lambda _: P(), p7), P("dp"), P("dp"), P(), P()), P("dp"), cfg_ddim,
       (p7, np.concatenate([x7, R(B7, N7, D7)]), y7, np.array(30, np.int32), np.array(20, np.int32)),
       bugs=[("partner-next-device", ["wrong-permutation"]), ("halves-swapped", ["wrong-offset"]),
             ("uncond-steps-own-x", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 8. v-prediction with min-SNR-gamma weights normalised over the global
#    batch; timesteps a replicated global vector gathered at the rows.
B8, D8, GAMMA = 16, 8, 5.0


def vnet(p, xt, t):
    h = jax.nn.silu(jnp.concatenate([xt, t_sincos(t, 8)], -1) @ p["w1"] + p["b1"])
    return h @ p["w2"]


def vpred_terms(p, x0, eps, t):
    ab = jnp.take(jnp.asarray(AB), t)[:, None]
    xt = jnp.sqrt(ab) * x0 + jnp.sqrt(1 - ab) * eps
    v = jnp.sqrt(ab) * eps - jnp.sqrt(1 - ab) * x0
    snr = ab[:, 0] / (1 - ab[:, 0])
    w = jnp.minimum(snr, GAMMA) / (snr + 1)
    return jnp.sum(w * jnp.mean(jnp.square(vnet(p, xt, t) - v), -1)), jnp.sum(w)


def vpred_loss_grad(p, x0, eps, t_all):
    def loss(p):
        num, den = vpred_terms(p, x0, eps, t_all)
        return num / den
    return jax.value_and_grad(loss)(p)


def vpred_dp(bug):
    def f(p, x0, eps, t_all):
        nl = x0.shape[0]
        off = 0 if bug == "t-slice-offset-zero" else idx("dp") * nl
        t = lax.dynamic_slice_in_dim(t_all, off, nl)
        _, wsum = vpred_terms(p, x0, eps, t)
        den = wsum if bug == "weights-normalised-locally" else psum(wsum, "dp")
        lv, g = jax.value_and_grad(lambda p: vpred_terms(p, x0, eps, t)[0] / den)(p)
        red = pmean if bug == "grads-pmean" else psum
        return psum(lv, "dp"), jax.tree.map(lambda a: red(a, "dp"), g)
    return f


p8 = {"w1": R(D8 + 8, 32, scale=0.3), "b1": R(32, scale=0.1), "w2": R(32, D8, scale=0.3)}
rep8 = jax.tree.map(lambda _: P(), p8)
args8 = (p8, R(B8, D8), R(B8, D8), I(0, TS, B8))
C.smap("s.vpred_minsnr_global_weights_t_gather.dp4", {"dp": 4}, vpred_dp,
       (rep8, P("dp"), P("dp"), P()), (P(), rep8), vpred_loss_grad, args8,
       bugs=[("t-slice-offset-zero", ["wrong-offset"]), ("weights-normalised-locally", ["missing-all-reduce"]),
             ("grads-pmean", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 9. a rectified-flow AdamW training step with per-example keys.
B9, D9 = 16, 8
opt9 = optax.adamw(3e-3, weight_decay=0.01)


def flow_net(p, xt, t):
    h = jax.nn.silu(jnp.concatenate([xt, t_sincos(t * 1000.0, 8)], -1) @ p["w1"] + p["b1"])
    h = jax.nn.silu(h @ p["w2"] + p["b2"])
    return h @ p["w3"]


def flow_draw(key, gidx, d):
    def one(i):
        kt, ke = jax.random.split(jax.random.fold_in(key, i))
        return jax.nn.sigmoid(jax.random.normal(kt, ())), jax.random.normal(ke, (d,))
    return jax.vmap(one)(gidx)


def flow_loss(p, x0, t, eps):
    xt = (1 - t[:, None]) * x0 + t[:, None] * eps
    return jnp.mean(jnp.square(flow_net(p, xt, t) - (eps - x0)))


def flow_step(p, st, x0, key):
    t, eps = flow_draw(key, jnp.arange(x0.shape[0]), x0.shape[1])
    lv, g = jax.value_and_grad(flow_loss)(p, x0, t, eps)
    u, st = opt9.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


def flow_step_dp(bug):
    def f(p, st, x0, key):
        nl, d = x0.shape
        gidx = jnp.arange(nl) if bug == "local-example-index" else idx("dp") * nl + jnp.arange(nl)
        t, eps = flow_draw(key, gidx, d)
        if bug == "one-t-per-device":
            t = jnp.full((nl,), jax.nn.sigmoid(jax.random.normal(jax.random.fold_in(key, idx("dp")), ())))
        lv, g = jax.value_and_grad(flow_loss)(p, x0, t, eps)
        if bug != "grads-not-averaged":
            g = pmean(g, "dp")
        u, st = opt9.update(g, st, p)
        return optax.apply_updates(p, u), st, pmean(lv, "dp")
    return f


p9 = {"w1": R(D9 + 8, 32, scale=0.3), "b1": R(32, scale=0.1), "w2": R(32, 32, scale=0.2),
      "b2": R(32, scale=0.1), "w3": R(32, D9, scale=0.2)}
rep9 = jax.tree.map(lambda _: P(), p9)
st9 = np_tree(opt9.init(p9))
ss9 = state_specs(st9, rep9)
key9 = np.array([7, 99], np.uint32)
C.smap("s.rectified_flow_adamw_perexample_keys.dp4", {"dp": 4}, flow_step_dp,
       (rep9, ss9, P("dp"), P()), (rep9, ss9, P()), flow_step, (p9, st9, R(B9, D9), key9),
       bugs=[("local-example-index", ["wrong-random-key"]), ("grads-not-averaged", ["missing-all-reduce"]),
             ("one-t-per-device", ["wrong-random-key"])])

# ---------------------------------------------------------------------------
# 10. a full DiT training step with EMA under dp2 x tp4 (check_vma=True).
IMG10, D10, NH10, HD10, F10, NDP10 = 8, 16, 4, 4, 32, 2
G10 = IMG10 // PT
opt10 = optax.adamw(2e-3, weight_decay=0.02)
EMA10 = 0.9


def dit_forward(p, img, t, y, block=dit_block):
    x = patchify(img) @ p["pe_w"] + p["pe_b"] + pos_2d(jnp.arange(G10), jnp.arange(G10), D10)
    te = jax.nn.silu(t_sincos(t, D10) @ p["t_w1"] + p["t_b1"]) @ p["t_w2"]
    c = te + p["cls"][y]
    x = block(p["blk"], x, c)
    return unpatchify(final_layer(x, c, p["fm"], p["fb"], p["fo"], p["fob"]), G10, G10)


def noise_ref(key, shape):
    nl = shape[0] // NDP10
    return jnp.concatenate([jax.random.normal(jax.random.fold_in(key, g), (nl,) + shape[1:])
                            for g in range(NDP10)])


def eps_loss(p, img, t, y, noise, block=dit_block):
    ab = jnp.asarray(AB)[t][:, None, None, None]
    xt = jnp.sqrt(ab) * img + jnp.sqrt(1 - ab) * noise
    return jnp.mean(jnp.square(dit_forward(p, xt, t, y, block) - noise))


def ema_update(ema, p, decay=EMA10):
    return jax.tree.map(lambda e, q: decay * e + (1 - decay) * q, ema, p)


def dit_step(p, st, ema, img, t, y, key):
    noise = noise_ref(key, img.shape)
    lv, g = jax.value_and_grad(eps_loss)(p, img, t, y, noise)
    u, st = opt10.update(g, st, p)
    p = optax.apply_updates(p, u)
    return p, st, ema_update(ema, p), lv


p10 = {"pe_w": R(PT * PT * CH, D10, scale=0.3), "pe_b": R(D10, scale=0.1),
       "t_w1": R(D10, D10, scale=0.3), "t_b1": R(D10, scale=0.1), "t_w2": R(D10, D10, scale=0.3),
       "cls": R(NCLS + 1, D10, scale=0.5), "blk": dit_params(D10, NH10, HD10, F10),
       "fm": R(D10, 2, D10, scale=0.25), "fb": R(2, D10, scale=0.1),
       "fo": R(D10, PT * PT * CH, scale=0.3), "fob": R(PT * PT * CH, scale=0.1)}
spec10 = jax.tree.map(lambda _: P(), p10)
spec10["blk"] = dict(DIT_SPEC)
st10 = np_tree(opt10.init(p10))
ss10 = state_specs(st10, spec10)
ema10 = jax.tree.map(lambda a: (a + R(*a.shape, scale=0.05)).astype(np.float32), p10)


def dit_step_tp(bug):
    def f(p, st, ema, img, t, y, key):
        k = key if bug == "noise-key-not-folded" else jax.random.fold_in(key, idx("dp"))
        noise = jax.random.normal(k, img.shape)

        def loss(p):
            return pmean(eps_loss(p, img, t, y, noise, block=dit_block_tp(None)), "dp")
        lv, g = jax.value_and_grad(loss)(p)
        u, st = opt10.update(g, st, p)
        p = optax.apply_updates(p, u)
        new = ema_update(ema, p)
        if bug == "ema-only-tp-rank0":
            new["blk"] = jax.tree.map(lambda n, e, s: jnp.where(idx("tp") == 0, n, e) if "tp" in tuple(s) else n,
                                      new["blk"], ema["blk"], DIT_SPEC, is_leaf=lambda s: isinstance(s, P))
        return p, st, new, lv
    return f


args10 = (p10, st10, ema10, R(4, IMG10, IMG10, CH), I(0, TS, 4), I(0, NCLS + 1, 4), np.array([1, 2024], np.uint32))
C.smap("s.dit_train_step_adamw_ema_folded_noise.dp2xtp4", {"dp": 2, "tp": 4}, dit_step_tp,
       (spec10, ss10, spec10, P("dp"), P("dp"), P("dp"), P()), (spec10, ss10, spec10, P()), dit_step, args10,
       check_vma=True,
       bugs=[("noise-key-not-folded", ["wrong-random-key"]), ("ema-only-tp-rank0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 11. a DDIM sampler by lax.scan with the token sequence over sp.
N11, D11 = 16, 16
SCHED11 = np.array([[40, 30], [30, 20], [20, 10]], np.int32)


def den11(p, x, t, pos, kv=None):
    h = x + pos + (t_sincos(t[None], D11) @ p["wt"])[None]
    q, k, v = h @ p["wq"], h @ p["wk"], h @ p["wv"]
    if kv is not None:
        k, v = kv(k), kv(v)
    s = jnp.einsum("bnd,bmd->bnm", q, k) / np.sqrt(D11)
    h = h + jnp.einsum("bnm,bmd->bnd", jax.nn.softmax(s, -1), v) @ p["wo"]
    return jax.nn.gelu(h @ p["w1"]) @ p["w2"]


def ddim_sample(p, x):
    def body(x, tt):
        e = den11(p, x, tt[0], p["pos"])
        return ddim_step(x, e, tt[0], tt[1]), None
    return lax.scan(body, x, jnp.asarray(SCHED11))[0]


def ddim_sample_sp(bug):
    def f(p, x):
        nl = x.shape[1]
        off = 0 if bug == "positions-offset-zero" else idx("sp") * nl
        pos = lax.dynamic_slice_in_dim(p["pos"], off, nl, 0)
        kv = None if bug == "local-keys-only" else (lambda a: lax.all_gather(a, "sp", axis=1, tiled=True))

        def body(x, tt):
            e = den11(p, x, tt[0], pos, kv)
            return ddim_step(x, e, tt[0], tt[1]), None
        return lax.scan(body, x, jnp.asarray(SCHED11))[0]
    return f


p11 = {k: R(D11, D11, scale=0.25) for k in ("wt", "wq", "wk", "wv", "wo", "w1", "w2")}
p11["pos"] = R(N11, D11, scale=0.5)
C.smap("s.ddim_scan_attention_tokens_sp.sp4", {"sp": 4}, ddim_sample_sp,
       (jax.tree.map(lambda _: P(), p11), P(None, "sp")), P(None, "sp"), ddim_sample, (p11, R(2, N11, D11)),
       bugs=[("local-keys-only", ["missing-collective"]), ("positions-offset-zero", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 12. EMA with warm-up decay under mixed shardings, and the global distance.
spec12 = {"wq": P(None, "tp"), "wf": P("dp"), "w2d": P("dp", "tp"), "g": P()}
AXES12 = {"wq": ("tp",), "wf": ("dp",), "w2d": ("dp", "tp"), "g": ()}


def ema_warmup(ema, p, step):
    s = step.astype(f32)
    d = jnp.minimum(0.999, (1 + s) / (10 + s))
    new = jax.tree.map(lambda e, q: d * e + (1 - d) * q, ema, p)
    dist = jnp.sqrt(sum(jnp.sum(jnp.square(new[k] - p[k])) for k in sorted(p)))
    return new, dist


def ema_warmup_sharded(bug):
    def f(ema, p, step):
        s = step.astype(f32)
        d = jnp.minimum(0.999, (1 + s) / (10 + s))
        new = {k: d * ema[k] + (1 - d) * p[k] for k in p}
        if bug == "update-only-dp0":
            new = {k: jnp.where(idx("dp") == 0, new[k], ema[k]) for k in p}
        tot = 0.0
        for k in sorted(p):
            sq = jnp.sum(jnp.square(new[k] - p[k]))
            ax = AXES12[k]
            if bug == "replicated-psummed-all" and k == "g":
                ax = ("dp", "tp")
            if bug == "w2d-psum-dp-only" and k == "w2d":
                ax = ("dp",)
            tot = tot + (psum(sq, ax) if ax else sq)
        return new, jnp.sqrt(tot)
    return f


p12 = {"wq": R(16, 16), "wf": R(16, 8), "w2d": R(16, 16), "g": 1.0 + R(16, scale=0.1)}
ema12 = jax.tree.map(lambda a: a + R(*a.shape, scale=0.5), p12)
C.smap("s.ema_warmup_decay_mixed_shardings.dp2xtp4", {"dp": 2, "tp": 4}, ema_warmup_sharded,
       (spec12, spec12, P()), (spec12, P()), ema_warmup, (ema12, p12, np.array(3, np.int32)),
       bugs=[("update-only-dp0", ["wrong-offset"]), ("replicated-psummed-all", ["wrong-collective-group"]),
             ("w2d-psum-dp-only", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 13. adaLN-gated attention, patch sequence over sp and heads over tp.
D13, NH13, HD13 = 16, 4, 4


def gated_attn(x, c, wm, wq, wk, wv, wo):
    mod = jnp.einsum("bd,dke->bke", jax.nn.silu(c), wm)
    h = modulate(layernorm(x), mod[:, 0], mod[:, 1])
    q, k, v = (jnp.einsum("bnd,dhe->bnhe", h, w) for w in (wq, wk, wv))
    return x + mod[:, 2][:, None] * jnp.einsum("bnhe,hed->bnd", sdpa(q, k, v), wo)


def gated_attn_sptp(bug):
    def f(x, c, wm, wq, wk, wv, wo):
        mod = jnp.einsum("bd,dke->bke", jax.nn.silu(c), wm)
        h = modulate(layernorm(x), mod[:, 0], mod[:, 1])
        q, k, v = (jnp.einsum("bnd,dhe->bnhe", h, w) for w in (wq, wk, wv))
        gax = "tp" if bug == "kv-gathered-over-tp" else "sp"
        k, v = (lax.all_gather(a, gax, axis=1, tiled=True) for a in (k, v))
        o = jnp.einsum("bnhe,hed->bnd", sdpa(q, k, v), wo)
        o = psum(o, "sp" if bug == "out-proj-psum-over-sp" else "tp")
        return x + mod[:, 2][:, None] * o
    return f


C.smap("s.dit_gated_attn_seq_sp_heads_tp.sp2xtp4", {"sp": 2, "tp": 4}, gated_attn_sptp,
       (P(None, "sp"), P(), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P(None, "sp"),
       gated_attn, (R(2, 16, D13), R(2, D13), R(D13, 3, D13, scale=0.3), R(D13, NH13, HD13, scale=0.3),
                    R(D13, NH13, HD13, scale=0.3), R(D13, NH13, HD13, scale=0.3), R(NH13, HD13, D13, scale=0.3)),
       bugs=[("kv-gathered-over-tp", ["wrong-collective-group"]), ("out-proj-psum-over-sp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 14. the DiT block of 5. with Megatron-style weight shardings.
C.gspmd("g.dit_block_adaln_zero.dp2xtp4", {"dp": 2, "tp": 4}, (DIT_SPEC, P("dp"), P("dp")), P("dp"),
        dit_block, (p5, x5, c5))

# 15. the rectified-flow AdamW step of 9. with the batch over dp8.
C.gspmd("g.rectified_flow_adamw_step.dp8", {"dp": 8}, (rep9, ss9, P("dp"), P()), (rep9, ss9, P()),
        flow_step, (p9, st9, R(B9, D9), key9))

# 16. patchify, embedding, final layer and unpatchify, image height over sp4.


def embed_final(img, wp, bp, c, fm, fb, fo, fob):
    x = patch_embed(img, wp, bp)
    return unpatchify(final_layer(x, c, fm, fb, fo, fob), img.shape[1] // PT, img.shape[2] // PT)


C.gspmd("g.patchify_final_unpatchify.sp4", {"sp": 4}, (P(None, "sp"), P(), P(), P(), P(), P(), P(), P()),
        P(None, "sp"), embed_final,
        (R(2, 16, 8, CH), R(PT * PT * CH, D3, scale=0.3), R(D3, scale=0.1), R(2, D3), R(D3, 2, D3, scale=0.3),
         R(2, D3, scale=0.1), R(D3, PT * PT * CH, scale=0.3), R(PT * PT * CH, scale=0.1)))

# 17. the CFG + DDIM step of 7. with the doubled batch over dp4.
C.gspmd("g.cfg_ddim_doubled_batch.dp4", {"dp": 4}, (jax.tree.map(lambda _: P(), p7), P("dp"), P("dp"), P(), P()),
        P("dp"), cfg_ddim, (p7, np.concatenate([x7, x7]), y7, np.array(30, np.int32), np.array(20, np.int32)))

# 18. the DiT training step of 10. with EMA.
C.gspmd("g.dit_train_step_adamw_ema.dp2xtp4", {"dp": 2, "tp": 4},
        (spec10, ss10, spec10, P("dp"), P("dp"), P("dp"), P()), (spec10, ss10, spec10, P()), dit_step, args10)

# 19. the v-prediction min-SNR loss and gradient of 8., batch over dp8.
C.gspmd("g.vpred_minsnr_value_and_grad.dp8", {"dp": 8}, (rep8, P("dp"), P("dp"), P("dp")), (P(), rep8),
        vpred_loss_grad, args8)

C.finish()
