"""samples/fresh118: a 118th batch of programs as a user writes them, on the theme of HuggingFace transformers' Flax decoder LMs and vision models that earlier corpora did not use (FlaxOPTForCausalLM, FlaxGPTJForCausalLM, FlaxGPTNeoForCausalLM, FlaxBloomForCausalLM with ALiBi, FlaxXGLMForCausalLM, FlaxGemmaForCausalLM and its attention sub-module with the library's KV cache; FlaxViTForImageClassification, FlaxCLIPModel with a contrastive loss, FlaxBeitForImageClassification, FlaxDinov2Model, FlaxResNetForImageClassification and FlaxRegNetForImageClassification with batch-norm statistics), built from tiny Config objects with random init (no weights downloaded), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families (the library module called on the local shards):
 1. FlaxOPTForCausalLM data-parallel step over dp4 with right-padded rows:
    next-token loss = sum(nll * mask) / GLOBAL token count (psum'd count),
    gradients psum'd, optax clip_by_global_norm + adamw with a weight-decay
    mask (no decay on biases / norms), an adam state already under way.
    Bugs: the loss normalised by the local token count (then pmean'd),
    gradients pmean'd instead of psum'd.
 2. BLOOM's self-attention with ALiBi, heads over tp4 (dp2 x tp4), written
    by hand over the library's fused query_key_value / dense parameters and
    the library's build_alibi_tensor on left-padded rows; the baseline is
    the library's FlaxBloomAttention. The rank's slopes are a slice of the
    full 8-head ALiBi tensor at rank * 2; the dense bias and the residual
    added after the psum. Bugs: ALiBi built for the local head count (wrong
    slopes), the slice without the rank offset, residual + bias added on
    every rank before the psum.
 3. FlaxGemmaAttention (GQA 4 query / 2 kv heads, head_dim 8) one-token
    decoding step with the library's KV cache (cached_key / cached_value /
    cache_index as "cache" variables, prefilled), heads and kv heads over
    tp2 by a local module from a config with 2 / 1 heads, batch over dp2,
    o_proj partial sums psum'd. Bugs: no psum, psum over dp, pmean over tp.
 4. FlaxGPTJ greedy decoding step with the library cache (FlaxGPTJModule
    applied with mutable cache), batch over dp2, vocabulary-parallel lm_head
    over tp4: local max / argmax + rank * V / tp, all_gather of the
    candidates, the log-prob of the chosen token by a psum'd log-sum-exp.
    Bugs: argmax without the rank offset, the log-sum-exp without psum.
 5. FlaxGPTNeoForCausalLM (global + local attention layers) step over dp4
    with gradient accumulation by lax.scan over 2 micro-batches, loss over
    the global token count, adamw with a warmup-cosine schedule. Bugs: the
    scan carry overwritten instead of accumulated, gradients not reduced.
 6. FlaxXGLMForCausalLM ZeRO-style step over dp4: gradients raveled
    (ravel_pytree), padded, psum_scatter'd / 4, adam on the rank's slice of
    the flat parameters (state sharded), all_gather of the updated slice.
    Bugs: psum_scatter not divided, the old slice gathered, the parameter
    slice taken without the rank offset.
 7. FlaxViTForImageClassification hand-written FSDP over dp2 x fsdp4:
    kernels / biases with a dim-0 over fsdp all_gather'd before the model,
    label-smoothed CE, their gradients psum_scatter'd / 4 then pmean'd over
    dp, the other gradients pmean'd over both, adamw on the shards. Bugs:
    sharded gradients not pmean'd over dp, psum_scatter not divided.
 8. FlaxCLIPModel contrastive step over dp4: get_image_features /
    get_text_features on the local batch, normalised, all_gather'd, local
    rows of both logit matrices against all columns, labels at rank * B/dp,
    loss / (2 N) psum'd, gradients psum'd, SGD with Nesterov momentum. Bugs:
    labels without the rank offset, gradients pmean'd, only local negatives.
 9. FlaxResNetForImageClassification training step with SYNC batch norm over
    dp4 (flax.linen.BatchNorm swapped for one with axis_name="dp" while the
    body is traced), gradients pmean'd, running statistics already global.
    Bugs: the library's BatchNorm left local (statistics of the local batch,
    then pmean'd), gradients not pmean'd.
10. FlaxRegNetForImageClassification ghost batch norm over dp4 (the baseline
    runs the model on 4 groups of the batch and averages losses and running
    statistics), SGD. Bugs: running statistics left local, statistics psum'd.
GSPMD pairs (jax.jit with in/out shardings; correct): 11. OPT forward with
Megatron specs (dp2 x tp4); 12. GPT-J adamw step under FSDP (fsdp8); 13.
GPT-Neo forward with a padding mask over tp4; 14. BLOOM masked next-token adam
step (dp2 x tp4, fused query_key_value column-parallel); 15. XGLM forward with a
with_sharding_constraint on the hidden states (dp2 x tp4); 16. Gemma clip + SGD
step (dp2 x tp4); 17. Gemma attention KV-cache decoding with the cache over kv
heads (dp2 x tp2); 18. ViT adamw step with a weight-decay mask (dp2 x tp4); 19.
CLIP contrastive loss and gradients over dp8; 20. BEiT classification step
(relative position bias) with parameters over fsdp4 x dp2; 21. DINOv2 forward
(dp2 x tp4); 22. ResNet training step with batch statistics over dp8.
Not used: transformers 4.46.3 FlaxRegNet with layer_type="x" fails in setup
(FlaxRegNetXLayerCollection() got an unexpected keyword argument in_channels);
the RegNet family uses layer_type="y".
"""
import sys, math, contextlib
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
from jax.flatten_util import ravel_pytree
import optax
import flax
import flax.linen as nn
import transformers
from transformers import (OPTConfig, FlaxOPTForCausalLM, GPTJConfig, FlaxGPTJForCausalLM, GPTNeoConfig,
                          FlaxGPTNeoForCausalLM, BloomConfig, FlaxBloomForCausalLM, XGLMConfig, FlaxXGLMForCausalLM,
                          GemmaConfig, FlaxGemmaForCausalLM, ViTConfig, FlaxViTForImageClassification, CLIPConfig,
                          FlaxCLIPModel, BeitConfig, FlaxBeitForImageClassification, Dinov2Config, FlaxDinov2Model,
                          ResNetConfig, FlaxResNetForImageClassification, RegNetConfig,
                          FlaxRegNetForImageClassification)
from transformers.models.bloom.modeling_flax_bloom import FlaxBloomAttention, build_alibi_tensor
from transformers.models.gemma.modeling_flax_gemma import FlaxGemmaAttention
from transformers.models.gptj.modeling_flax_gptj import FlaxGPTJModule
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh118.sh)
from fresh_lib import Corpus, seeded, state_specs, np_tree  # noqa: E402
from scalify_jax._export import make_mesh  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402

SCRIPT = "samples/gen/fresh118.py"
C = Corpus("samples/fresh118", SCRIPT, "samples/gen/run_fresh118.sh", sys.argv[1:])
rng, R, I = seeded(118)
LIBS = "transformers %s, flax %s, optax %s" % (transformers.__version__, flax.__version__, optax.__version__)
NOGO = dict(dropout=0.0, attention_dropout=0.0)


def ce(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def specs_by_path(tree, rule):
    return jax.tree_util.tree_map_with_path(
        lambda path, a: rule("/".join(str(getattr(k, "key", k)) for k in path), np.shape(a)), tree)


def warm_state(s):
    """An optimizer state already under way: noise on the float moments (positive for nu)."""
    def f(path, a):
        if np.ndim(a) == 0 or not np.issubdtype(np.asarray(a).dtype, np.floating):
            return a
        n = R(*np.shape(a), scale=0.05)
        return (np.abs(n) * 0.1 if "nu" in jax.tree_util.keystr(path) else n).astype(a.dtype)
    return jax.tree_util.tree_map_with_path(f, s)


def padded(b, s, lo, left=False):
    lens = I(lo, s + 1, b)
    lens[0] = s
    m = (np.arange(s)[None, :] < lens[:, None]).astype(np.int32)
    return m[:, ::-1].copy() if left else m


def megatron(col, row, vocab_rows=()):
    def rule(path, shape):
        if any(path.endswith(c + "/kernel") for c in col):
            return P(None, "tp")
        if any(path.endswith(c + "/bias") for c in col):
            return P("tp")
        if any(path.endswith(r + "/kernel") for r in row):
            return P("tp", None)
        if any(path.endswith(v) for v in vocab_rows):
            return P("tp", None)
        return P()
    return rule


# ---------------------------------------------------------------------------
# 1. OPT dp4 step: masked loss over the global token count, clip + adamw(mask).
OPT_CFG = OPTConfig(vocab_size=64, hidden_size=32, ffn_dim=64, num_hidden_layers=1, num_attention_heads=4,
                    max_position_embeddings=16, word_embed_proj_dim=32, **NOGO)
OPT = FlaxOPTForCausalLM(OPT_CFG, seed=1)
P1 = np_tree(OPT.params)
T1 = I(3, 64, 8, 11)
AM1 = padded(8, 11, 3)
OPT1 = optax.chain(optax.clip_by_global_norm(50.0),
                   optax.adamw(3e-3, weight_decay=0.1, mask=lambda p: jax.tree.map(lambda a: np.ndim(a) >= 2, p)))
S1 = warm_state(np_tree(OPT1.init(P1)))


def opt_sums(p, tok, am):
    logits = OPT(tok[:, :-1], attention_mask=am[:, :-1], params=p).logits
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, tok[:, 1:])
    w = am[:, 1:].astype(jnp.float32)
    return jnp.sum(nll * w), jnp.sum(w)


def step1(p, s, tok, am):
    def loss(p):
        num, den = opt_sums(p, tok, am)
        return num / den
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT1.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def opt_dp(bug):
    def body(p, s, tok, am):
        den = lax.psum(jnp.sum(am[:, 1:].astype(jnp.float32)), "dp")

        def loss(p):
            num, lden = opt_sums(p, tok, am)
            return num / (lden if bug == "local-count" else den)
        l, g = jax.value_and_grad(loss)(p)
        if bug in ("local-count", "grad-pmean"):
            g, l = lax.pmean(g, "dp"), lax.pmean(l, "dp")
        else:
            g, l = lax.psum(g, "dp"), lax.psum(l, "dp")
        u, s = OPT1.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return body


C.smap("s.hf_flax_opt_masked_adamw_step.dp4", {"dp": 4}, opt_dp, (P(), P(), P("dp"), P("dp")), (P(), P(), P()),
       step1, (P1, S1, T1, AM1), bugs=[("local-count", ["wrong_scale"]), ("grad-pmean", ["wrong_scale"])],
       note=LIBS)

# ---------------------------------------------------------------------------
# 2. BLOOM attention with ALiBi, heads over tp4, by hand on the library params.
BL_CFG = BloomConfig(vocab_size=64, hidden_size=32, n_layer=1, n_head=8, attention_dropout=0.0, hidden_dropout=0.0)
BL_ATT = FlaxBloomAttention(BL_CFG)
H2, HD2, TP2 = 8, 4, 4
X2, RES2 = R(4, 7, 32), R(4, 7, 32)
AM2 = padded(4, 7, 3, left=True)
P2 = np_tree(BL_ATT.init(jax.random.PRNGKey(2), X2, RES2, build_alibi_tensor(AM2, H2), AM2)["params"])
P2 = jax.tree.map(lambda a: a * 3.0, P2)
PS2 = {"query_key_value": {"kernel": P(None, "tp"), "bias": P("tp")}, "dense": {"kernel": P("tp", None),
                                                                                   "bias": P()}}


def bloom_attn(p, h, res, am):
    return BL_ATT.apply({"params": p}, h, res, build_alibi_tensor(am, H2, jnp.float32), am)[0]


def bloom_tp(bug):
    hl = H2 // TP2

    def body(p, h, res, am):
        r = lax.axis_index("tp")
        b, s, _ = h.shape
        qkv = (h @ p["query_key_value"]["kernel"] + p["query_key_value"]["bias"]).reshape(b, s, hl, 3 * HD2)
        q, k, v = jnp.split(qkv, 3, axis=-1)
        if bug == "alibi-local-heads":
            alibi = build_alibi_tensor(am, hl, jnp.float32)
        else:
            full = build_alibi_tensor(am, H2, jnp.float32)
            alibi = lax.dynamic_slice_in_dim(full, 0 if bug == "alibi-no-offset" else r * hl, hl, axis=1)
        keep = jnp.tril(jnp.ones((s, s), bool))[None, None] & (am[:, None, None, :] > 0)
        bias = jnp.where(keep, 0.0, jnp.finfo(jnp.float32).min) + alibi
        sc = jnp.einsum("bqhd,bkhd->bhqk", q / math.sqrt(HD2), k) + bias
        o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(sc, axis=-1), v).reshape(b, s, hl * HD2)
        part = o @ p["dense"]["kernel"]
        if bug == "residual-every-rank":
            return lax.psum(part + p["dense"]["bias"] + res, "tp")
        return lax.psum(part, "tp") + p["dense"]["bias"] + res
    return body


C.smap("s.hf_flax_bloom_alibi_attention_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, bloom_tp,
       (PS2, P("dp"), P("dp"), P("dp")), P("dp"), bloom_attn, (P2, X2, RES2, AM2),
       bugs=[("alibi-local-heads", ["wrong_value"]), ("alibi-no-offset", ["wrong_offset"]),
             ("residual-every-rank", ["wrong_scale"])], note=LIBS)

# ---------------------------------------------------------------------------
# 3. FlaxGemmaAttention KV-cache decode step, heads over tp2, batch over dp2.
GM_CFG = GemmaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=8, max_position_embeddings=16, attention_dropout=0.0,
                     hidden_activation="gelu_pytorch_tanh")
GM_CFG_L = GemmaConfig(**{**GM_CFG.to_dict(), "num_attention_heads": 2, "num_key_value_heads": 1})
GM_ATT, GM_ATT_L = FlaxGemmaAttention(GM_CFG), FlaxGemmaAttention(GM_CFG_L)
B3, L3, T3 = 4, 16, 6  # batch, cache length, tokens already cached
X3 = R(B3, 1, 32)
AM3 = np.ones((B3, L3), np.int32)
AM3[1, :2] = 0  # a left-padded row
POS3 = np.full((B3, 1), T3, np.int32)
P3 = np_tree(GM_ATT.init(jax.random.PRNGKey(3), X3, AM3[:, :1], POS3)["params"])
P3 = jax.tree.map(lambda a: a * 4.0, P3)
KV3 = np.where(np.arange(L3)[None, :, None, None] < T3, R(B3, L3, 2, 8), 0.0).astype(np.float32)
CACHE3 = {"cached_key": KV3, "cached_value": np.where(KV3 != 0, R(B3, L3, 2, 8), 0.0).astype(np.float32),
          "cache_index": np.array(T3, np.int32)}
PS3 = {"q_proj": {"kernel": P(None, "tp")}, "k_proj": {"kernel": P(None, "tp")}, "v_proj": {"kernel": P(None, "tp")},
       "o_proj": {"kernel": P("tp", None)}}
CS3 = {"cached_key": P("dp", None, "tp", None), "cached_value": P("dp", None, "tp", None), "cache_index": P()}


def gemma_decode(att):
    def run(p, cache, x, am, pos):
        (y,), upd = att.apply({"params": p, "cache": cache}, x, am, pos, mutable=["cache"])
        return y, upd["cache"]
    return run


def gemma_decode_tp(bug):
    def body(p, cache, x, am, pos):
        y, c = gemma_decode(GM_ATT_L)(p, cache, x, am, pos)
        if bug == "pmean":
            y = lax.pmean(y, "tp")
        elif bug == "psum-dp":
            y = lax.psum(y, "dp")
        elif bug != "no-psum":
            y = lax.psum(y, "tp")
        return y, c
    return body


C.smap("s.hf_flax_gemma_attention_kv_cache_decode.dp2xtp2", {"dp": 2, "tp": 2}, gemma_decode_tp,
       (PS3, CS3, P("dp"), P("dp"), P("dp")), (P("dp"), CS3), gemma_decode(GM_ATT), (P3, CACHE3, X3, AM3, POS3),
       bugs=[("no-psum", ["missing_collective"]), ("psum-dp", ["wrong_axis"]), ("pmean", ["wrong_scale"])],
       note=LIBS)

# ---------------------------------------------------------------------------
# 4. GPT-J greedy decode step, library cache, vocab-parallel head over tp4.
GJ_CFG = GPTJConfig(vocab_size=64, n_embd=32, n_layer=1, n_head=4, rotary_dim=4, n_positions=16, resid_pdrop=0.0,
                    embd_pdrop=0.0, attn_pdrop=0.0)
GJ = FlaxGPTJForCausalLM(GJ_CFG, seed=4)
GJ_T = FlaxGPTJModule(GJ_CFG)
P4 = np_tree(GJ.params)
P4["lm_head"] = jax.tree.map(lambda a: a * 20.0, P4["lm_head"])
B4, L4, T4 = 4, 12, 5
CACHE4 = np_tree(GJ.init_cache(B4, L4))


def fill(path, a):
    if np.ndim(a) == 0:
        return np.array(T4, np.int32)
    return np.where(np.arange(L4)[None, :, None, None] < T4, R(*np.shape(a)), 0.0).astype(np.float32)


CACHE4 = jax.tree_util.tree_map_with_path(fill, CACHE4)
TOK4 = I(0, 64, B4, 1)
AM4 = np.ones((B4, L4), np.int32)
POS4 = np.full((B4, 1), T4, np.int32)


def gptj_greedy(p, cache, tok, am, pos):
    out = GJ(tok, attention_mask=am, position_ids=pos, params=p, past_key_values=cache)
    lp = jax.nn.log_softmax(out.logits[:, -1])
    nxt = jnp.argmax(lp, axis=-1)
    return nxt.astype(jnp.int32), jnp.take_along_axis(lp, nxt[:, None], axis=-1)[:, 0], out.past_key_values


def gptj_vocab_tp(bug):
    vl = 64 // 4

    def body(p, cache, tok, am, pos):
        r = lax.axis_index("tp")
        (h,), upd = GJ_T.apply({"params": p["transformer"], "cache": cache["transformer"]}, tok, am, pos,
                               return_dict=False, mutable=["cache"])
        logits = h[:, -1] @ p["lm_head"]["kernel"] + p["lm_head"]["bias"]  # (b, V / tp)
        m = jnp.max(logits, axis=-1)
        i = jnp.argmax(logits, axis=-1).astype(jnp.int32) + (0 if bug == "argmax-no-offset" else r * vl)
        ms, ids = lax.all_gather(m, "tp"), lax.all_gather(i, "tp")  # (tp, b)
        best = jnp.argmax(ms, axis=0)
        gmax = jnp.max(ms, axis=0)
        nxt = jnp.take_along_axis(ids, best[None], axis=0)[0]
        z = jnp.sum(jnp.exp(logits - gmax[:, None]), axis=-1)
        lse = gmax + jnp.log(z if bug == "lse-local" else lax.psum(z, "tp"))
        return nxt, gmax - lse, {"transformer": upd["cache"]}
    return body


CS4 = jax.tree.map(lambda a: P() if np.ndim(a) == 0 else P("dp"), CACHE4)
PS4 = jax.tree.map(lambda a: P(), P4)
PS4["lm_head"] = {"kernel": P(None, "tp"), "bias": P("tp")}
C.smap("s.hf_flax_gptj_greedy_decode_vocab_tp.dp2xtp4", {"dp": 2, "tp": 4}, gptj_vocab_tp,
       (PS4, CS4, P("dp"), P("dp"), P("dp")), (P("dp"), P("dp"), CS4), gptj_greedy, (P4, CACHE4, TOK4, AM4, POS4),
       bugs=[("argmax-no-offset", ["wrong_offset"]), ("lse-local", ["missing_collective"])], note=LIBS)

# ---------------------------------------------------------------------------
# 5. GPT-Neo dp4 step with scan-accumulated micro-batches, warmup-cosine adamw.
NEO_CFG = GPTNeoConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
                       window_size=4, max_position_embeddings=16, intermediate_size=64, embed_dropout=0.0,
                       attention_dropout=0.0, resid_dropout=0.0)
NEO = FlaxGPTNeoForCausalLM(NEO_CFG, seed=5)
P5 = np_tree(NEO.params)
T5, AM5 = I(0, 64, 16, 10), padded(16, 10, 4)
OPT5 = optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 1e-2, 3, 20), weight_decay=0.05)
S5 = warm_state(np_tree(OPT5.init(P5)))


def neo_sums(p, tok, am):
    logits = NEO(tok[:, :-1], attention_mask=am[:, :-1], params=p).logits
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, tok[:, 1:])
    return jnp.sum(nll * am[:, 1:])


def step5(p, s, tok, am):
    l, g = jax.value_and_grad(lambda p: neo_sums(p, tok, am) / jnp.sum(am[:, 1:]))(p)
    u, s = OPT5.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def neo_dp(bug):
    def body(p, s, tok, am):
        den = lax.psum(jnp.sum(am[:, 1:]), "dp").astype(jnp.float32)
        mb = (tok.reshape(2, -1, tok.shape[1]), am.reshape(2, -1, am.shape[1]))

        def micro(acc, xs):
            l, g = jax.value_and_grad(lambda p: neo_sums(p, *xs) / den)(p)
            if bug == "carry-overwritten":
                return (acc[0] + l, g), None
            return (acc[0] + l, jax.tree.map(jnp.add, acc[1], g)), None
        (l, g), _ = lax.scan(micro, (jnp.zeros(()), jax.tree.map(jnp.zeros_like, p)), mb)
        if bug != "no-grad-reduce":
            g = lax.psum(g, "dp")
        u, s = OPT5.update(g, s, p)
        return optax.apply_updates(p, u), s, lax.psum(l, "dp")
    return body


C.smap("s.hf_flax_gptneo_scan_accum_adamw_step.dp4", {"dp": 4}, neo_dp, (P(), P(), P("dp"), P("dp")),
       (P(), P(), P()), step5, (P5, S5, T5, AM5),
       bugs=[("carry-overwritten", ["wrong_value"]), ("no-grad-reduce", ["missing_collective"])], note=LIBS)

# ---------------------------------------------------------------------------
# 6. XGLM ZeRO-style step: flat gradients reduce-scattered, adam on slices.
XG_CFG = XGLMConfig(vocab_size=64, d_model=32, ffn_dim=64, num_layers=1, attention_heads=4, max_position_embeddings=16,
                    dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
XG = FlaxXGLMForCausalLM(XG_CFG, seed=6)
P6 = np_tree(XG.params)
FLAT6, UNRAVEL6 = ravel_pytree(P6)
N6 = FLAT6.size
NP6 = -(-N6 // 4) * 4
OPT6 = optax.adam(1e-2)
S6 = warm_state(np_tree(OPT6.init(np.zeros(NP6, np.float32))))
T6, AM6 = I(0, 64, 8, 9), padded(8, 9, 5)


def xg_loss(p, tok, am):
    logits = XG(tok[:, :-1], attention_mask=am[:, :-1], params=p).logits
    return ce(logits, tok[:, 1:])


def step6(p, s, tok, am):
    l, g = jax.value_and_grad(xg_loss)(p, tok, am)
    gf = jnp.pad(ravel_pytree(g)[0], (0, NP6 - N6))
    pf = jnp.pad(ravel_pytree(p)[0], (0, NP6 - N6))
    u, s = OPT6.update(gf, s, pf)
    return UNRAVEL6(optax.apply_updates(pf, u)[:N6]), s, l


def xg_zero(bug):
    def body(p, s, tok, am):
        r = lax.axis_index("dp")
        l, g = jax.value_and_grad(xg_loss)(p, tok, am)
        gf = jnp.pad(ravel_pytree(g)[0], (0, NP6 - N6))
        g_sh = lax.psum_scatter(gf, "dp", scatter_dimension=0, tiled=True)
        if bug != "scatter-sum":
            g_sh = g_sh / 4
        pf = jnp.pad(ravel_pytree(p)[0], (0, NP6 - N6))
        p_sh = lax.dynamic_slice_in_dim(pf, 0 if bug == "slice-no-offset" else r * (NP6 // 4), NP6 // 4)
        u, s = OPT6.update(g_sh, s, p_sh)
        new = optax.apply_updates(p_sh, u)
        full = lax.all_gather(p_sh if bug == "stale-gather" else new, "dp", tiled=True)
        return UNRAVEL6(full[:N6]), s, lax.pmean(l, "dp")
    return body


SS6 = jax.tree.map(lambda a: P("dp") if np.ndim(a) == 1 else P(), S6)
C.smap("s.hf_flax_xglm_zero_flat_adam_step.dp4", {"dp": 4}, xg_zero, (P(), SS6, P("dp"), P("dp")),
       (P(), SS6, P()), step6, (P6, S6, T6, AM6),
       bugs=[("scatter-sum", ["wrong_scale"]), ("stale-gather", ["wrong_value"]),
             ("slice-no-offset", ["wrong_offset"])], note=LIBS)

# ---------------------------------------------------------------------------
# 7. ViT classifier, hand-written FSDP over dp2 x fsdp4, label smoothing, adamw.
VIT_CFG = ViTConfig(image_size=8, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=1,
                    num_attention_heads=4, intermediate_size=64, num_labels=5, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)
VIT = FlaxViTForImageClassification(VIT_CFG, seed=7)
P7 = np_tree(VIT.params)
X7, Y7 = R(16, 3, 8, 8), I(0, 5, 16)
OPT7 = optax.adamw(1e-2, weight_decay=0.05)
S7 = warm_state(np_tree(OPT7.init(P7)))
PS7 = jax.tree.map(lambda a: P("fsdp") if np.ndim(a) >= 1 and np.shape(a)[0] % 4 == 0 else P(), P7)


def vit_loss(p, x, y):
    logits = VIT(x, params=p).logits
    return optax.softmax_cross_entropy(logits, optax.smooth_labels(jax.nn.one_hot(y, 5), 0.1)).mean()


def step7(p, s, x, y):
    l, g = jax.value_and_grad(vit_loss)(p, x, y)
    u, s = OPT7.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def vit_fsdp(bug):
    def body(p, s, x, y):
        sharded = jax.tree.map(lambda sp: sp == P("fsdp"), PS7, is_leaf=lambda z: isinstance(z, P))
        full = jax.tree.map(lambda a, sh: lax.all_gather(a, "fsdp", axis=0, tiled=True) if sh else a, p, sharded)
        l, g = jax.value_and_grad(vit_loss)(full, x, y)

        def red(gl, sh):
            if not sh:
                return lax.pmean(gl, ("dp", "fsdp"))
            gs = lax.psum_scatter(gl, "fsdp", scatter_dimension=0, tiled=True)
            gs = gs if bug == "scatter-no-divide" else gs / 4
            return gs if bug == "no-dp-mean" else lax.pmean(gs, "dp")
        g = jax.tree.map(red, g, sharded)
        u, s = OPT7.update(g, s, p)
        return optax.apply_updates(p, u), s, lax.pmean(l, ("dp", "fsdp"))
    return body


SS7 = state_specs(S7, PS7)
C.smap("s.hf_flax_vit_hand_fsdp_adamw_step.dp2xfsdp4", {"dp": 2, "fsdp": 4}, vit_fsdp,
       (PS7, SS7, P(("dp", "fsdp")), P(("dp", "fsdp"))), (PS7, SS7, P()), step7, (P7, S7, X7, Y7),
       bugs=[("no-dp-mean", ["missing_collective"]), ("scatter-no-divide", ["wrong_scale"])], note=LIBS)

# ---------------------------------------------------------------------------
# 8. CLIP contrastive step over dp4: all_gather'd embeddings, offset labels.
CLIP_CFG = CLIPConfig(text_config=dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                       num_attention_heads=4, max_position_embeddings=8),
                      vision_config=dict(image_size=8, patch_size=4, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=4), projection_dim=16)
CLIP = FlaxCLIPModel(CLIP_CFG, seed=8)
P8 = np_tree(CLIP.params)
IMG8, TXT8 = R(8, 3, 8, 8), I(1, 60, 8, 7)
TXT8[:, -1] = 63  # eos = the largest id (the pooled position)
OPT8 = optax.sgd(0.1, momentum=0.9, nesterov=True)
S8 = warm_state(np_tree(OPT8.init(P8)))


def clip_emb(p, img, txt):
    i = CLIP.get_image_features(img, params=p)
    t = CLIP.get_text_features(txt, params=p)
    return i / jnp.linalg.norm(i, axis=-1, keepdims=True), t / jnp.linalg.norm(t, axis=-1, keepdims=True)


def clip_loss(p, img, txt):
    out = CLIP(txt, img, params=p)
    lab = jnp.arange(img.shape[0])
    return (ce(out.logits_per_image, lab) + ce(out.logits_per_text, lab)) / 2


def step8(p, s, img, txt):
    l, g = jax.value_and_grad(clip_loss)(p, img, txt)
    u, s = OPT8.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def clip_dp(bug):
    def body(p, s, img, txt):
        r = lax.axis_index("dp")
        n = img.shape[0] * 4

        def loss(p):
            i, t = clip_emb(p, img, txt)
            scale = jnp.exp(p["logit_scale"])
            if bug == "local-negatives":
                ia, ta = i, t
            else:
                ia, ta = lax.all_gather(i, "dp", tiled=True), lax.all_gather(t, "dp", tiled=True)
            lab = jnp.arange(img.shape[0]) + (0 if bug in ("labels-no-offset", "local-negatives") else
                                              r * img.shape[0])
            li = optax.softmax_cross_entropy_with_integer_labels(scale * i @ ta.T, lab)
            lt = optax.softmax_cross_entropy_with_integer_labels(scale * t @ ia.T, lab)
            return (jnp.sum(li) + jnp.sum(lt)) / (2 * n)
        l, g = jax.value_and_grad(loss)(p)
        g = lax.pmean(g, "dp") if bug == "grad-pmean" else lax.psum(g, "dp")
        u, s = OPT8.update(g, s, p)
        return optax.apply_updates(p, u), s, lax.psum(l, "dp")
    return body


C.smap("s.hf_flax_clip_contrastive_allgather_step.dp4", {"dp": 4}, clip_dp, (P(), P(), P("dp"), P("dp")),
       (P(), P(), P()), step8, (P8, S8, IMG8, TXT8),
       bugs=[("labels-no-offset", ["wrong_offset"]), ("grad-pmean", ["wrong_scale"]),
             ("local-negatives", ["missing_collective"])], note=LIBS)

# ---------------------------------------------------------------------------
# 9. ResNet with sync batch norm over dp4 (flax BatchNorm given axis_name).
RES_CFG = ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic",
                       num_labels=5)
RESNET = FlaxResNetForImageClassification(RES_CFG, seed=9)
V9 = np_tree(RESNET.params)
P9, BS9 = V9["params"], V9["batch_stats"]
X9, Y9 = R(16, 3, 16, 16), I(0, 5, 16)
OPT9 = optax.sgd(0.05, momentum=0.9)
S9 = warm_state(np_tree(OPT9.init(P9)))
_BN = nn.BatchNorm


@contextlib.contextmanager
def sync_batchnorm(axis):
    """Every flax BatchNorm built inside (the library's setup) reduces its statistics over axis."""
    nn.BatchNorm = lambda *a, **k: _BN(*a, axis_name=axis, **k)
    try:
        yield
    finally:
        nn.BatchNorm = _BN


def bn_model_loss(model, p, bs, x, y):
    out, new = model(x, params={"params": p, "batch_stats": bs}, train=True)
    return ce(out.logits, y), new["batch_stats"]


def step9(p, bs, s, x, y):
    (l, bs), g = jax.value_and_grad(lambda p: bn_model_loss(RESNET, p, bs, x, y), has_aux=True)(p)
    u, s = OPT9.update(g, s, p)
    return optax.apply_updates(p, u), bs, s, l


def resnet_sync(bug):
    def body(p, bs, s, x, y):
        ctx = contextlib.nullcontext() if bug == "local-bn-stats" else sync_batchnorm("dp")
        with ctx:
            (l, bs), g = jax.value_and_grad(lambda p: bn_model_loss(RESNET, p, bs, x, y), has_aux=True)(p)
        if bug == "local-bn-stats":
            bs = lax.pmean(bs, "dp")
        if bug != "no-grad-pmean":
            g = lax.pmean(g, "dp")
        u, s = OPT9.update(g, s, p)
        return optax.apply_updates(p, u), bs, s, lax.pmean(l, "dp")
    return body


C.smap("s.hf_flax_resnet_sync_batchnorm_step.dp4", {"dp": 4}, resnet_sync, (P(), P(), P(), P("dp"), P("dp")),
       (P(), P(), P(), P()), step9, (P9, BS9, S9, X9, Y9),
       bugs=[("local-bn-stats", ["wrong_value"]), ("no-grad-pmean", ["missing_collective"])], note=LIBS)

# ---------------------------------------------------------------------------
# 10. RegNet ghost batch norm over dp4: the baseline runs 4 groups of the batch.
REG_CFG = RegNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], groups_width=8,
                       layer_type="y", num_labels=5)
REGNET = FlaxRegNetForImageClassification(REG_CFG, seed=10)
V10 = np_tree(REGNET.params)
P10, BS10 = V10["params"], V10["batch_stats"]
X10, Y10 = R(16, 3, 16, 16), I(0, 5, 16)
OPT10 = optax.sgd(0.05)


def step10(p, bs, x, y):
    def loss(p):
        ls, sts = [], []
        for k in range(4):
            l, st = bn_model_loss(REGNET, p, bs, x[4 * k:4 * k + 4], y[4 * k:4 * k + 4])
            ls.append(l)
            sts.append(st)
        return sum(ls) / 4, jax.tree.map(lambda *a: sum(a) / 4, *sts)
    (l, bs), g = jax.value_and_grad(loss, has_aux=True)(p)
    u, _ = OPT10.update(g, OPT10.init(p), p)
    return optax.apply_updates(p, u), bs, l


def regnet_ghost(bug):
    def body(p, bs, x, y):
        (l, bs), g = jax.value_and_grad(lambda p: bn_model_loss(REGNET, p, bs, x, y), has_aux=True)(p)
        if bug == "stats-psum":
            bs = lax.psum(bs, "dp")
        elif bug != "stats-left-local":
            bs = lax.pmean(bs, "dp")
        g = lax.pmean(g, "dp")
        u, _ = OPT10.update(g, OPT10.init(p), p)
        return optax.apply_updates(p, u), bs, lax.pmean(l, "dp")
    return body


C.smap("s.hf_flax_regnet_ghost_batchnorm_step.dp4", {"dp": 4}, regnet_ghost, (P(), P(), P("dp"), P("dp")),
       (P(), P(), P()), step10, (P10, BS10, X10, Y10),
       bugs=[("stats-left-local", ["missing_collective"]), ("stats-psum", ["wrong_scale"])], note=LIBS)

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 11. OPT forward, Megatron specs, dp2 x tp4.
OPT_RULE = megatron(("q_proj", "k_proj", "v_proj", "fc1"), ("out_proj", "fc2"), ("embed_tokens/embedding",))
PS11 = specs_by_path(P1, OPT_RULE)
C.gspmd("g.hf_flax_opt_forward_megatron.dp2xtp4", {"dp": 2, "tp": 4}, (PS11, P("dp"), P("dp")), P("dp"),
        lambda p, tok, am: OPT(tok, attention_mask=am, params=p).logits, (P1, T1, AM1), note=LIBS)

# 12. GPT-J adamw step, FSDP over fsdp8.
OPT12 = optax.adamw(1e-2, weight_decay=0.01)
S12 = np_tree(OPT12.init(P4))
T12 = I(0, 64, 8, 9)


def step12(p, s, tok):
    def loss(p):
        return ce(GJ(tok[:, :-1], params=p).logits, tok[:, 1:])
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT12.update(g, s, p)
    return optax.apply_updates(p, u), s, l


PS12 = specs_by_path(P4, lambda path, shape: P("fsdp") if len(shape) == 2 and shape[0] % 8 == 0 else P())
C.gspmd("g.hf_flax_gptj_adamw_step_fsdp.fsdp8", {"fsdp": 8}, (PS12, state_specs(S12, PS12), P("fsdp")),
        (PS12, state_specs(S12, PS12), P()), step12, (P4, S12, T12), note=LIBS)

# 13. GPT-Neo forward (global + local attention) with a padding mask, tp4.
NEO_RULE = megatron(("q_proj", "k_proj", "v_proj", "c_fc"), ("out_proj", "c_proj"))
PS13 = specs_by_path(P5, NEO_RULE)
C.gspmd("g.hf_flax_gptneo_local_attention_forward.tp4", {"tp": 4}, (PS13, P(), P()), P(None, None, "tp"),
        lambda p, tok, am: NEO(tok, attention_mask=am, params=p).logits, (P5, T5[:4], AM5[:4]), note=LIBS)

# 14. BLOOM masked next-token adam step, dp2 x tp4.
BLOOM = FlaxBloomForCausalLM(BloomConfig(vocab_size=64, hidden_size=32, n_layer=2, n_head=8, attention_dropout=0.0,
                                         hidden_dropout=0.0), seed=14)
P14 = np_tree(BLOOM.params)
OPT14 = optax.adam(1e-2)
S14 = np_tree(OPT14.init(P14))
T14, AM14 = I(0, 64, 8, 9), padded(8, 9, 4, left=True)


def step14(p, s, tok, am):
    def loss(p):
        logits = BLOOM(tok[:, :-1], attention_mask=am[:, :-1], params=p).logits
        nll = optax.softmax_cross_entropy_with_integer_labels(logits, tok[:, 1:])
        return jnp.sum(nll * am[:, 1:]) / jnp.sum(am[:, 1:])
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT14.update(g, s, p)
    return optax.apply_updates(p, u), s, l


PS14 = specs_by_path(P14, megatron(("query_key_value", "dense_h_to_4h"), ("self_attention/dense", "dense_4h_to_h"),
                                   ("word_embeddings/embedding",)))
C.gspmd("g.hf_flax_bloom_alibi_masked_adam_step.dp2xtp4", {"dp": 2, "tp": 4},
        (PS14, state_specs(S14, PS14), P("dp"), P("dp")), (PS14, state_specs(S14, PS14), P()), step14,
        (P14, S14, T14, AM14), note=LIBS)

# 15. XGLM forward with a sharding constraint on the hidden states, dp2 x tp4.
M15 = make_mesh({"dp": 2, "tp": 4})
PS15 = specs_by_path(P6, megatron(("q_proj", "k_proj", "v_proj", "fc1"), ("out_proj", "fc2")))


def xglm_fwd(p, tok, am):
    out = XG(tok, attention_mask=am, params=p, output_hidden_states=True)
    h = out.hidden_states[-1]
    h = lax.with_sharding_constraint(h, NamedSharding(M15, P("dp")))
    return out.logits, jnp.mean(jnp.square(h), axis=-1)


C.gspmd("g.hf_flax_xglm_forward_constrained.dp2xtp4", {"dp": 2, "tp": 4}, (PS15, P("dp"), P("dp")), (P("dp"), P("dp")),
        xglm_fwd, (P6, T6, AM6), note=LIBS)

# 16. Gemma clip + SGD step, dp2 x tp4.
GEMMA = FlaxGemmaForCausalLM(GemmaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                         max_position_embeddings=16, hidden_activation="gelu_pytorch_tanh"), seed=16)
P16 = np_tree(GEMMA.params)
OPT16 = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.1))
S16 = np_tree(OPT16.init(P16))
T16, AM16 = I(0, 64, 4, 9), padded(4, 9, 5)
PS16 = specs_by_path(P16, megatron(("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"), ("o_proj", "down_proj")))


def step16(p, s, tok, am):
    def loss(p):
        logits = GEMMA(tok[:, :-1], attention_mask=am[:, :-1], params=p).logits
        nll = optax.softmax_cross_entropy_with_integer_labels(logits, tok[:, 1:])
        return jnp.sum(nll * am[:, 1:]) / jnp.sum(am[:, 1:])
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT16.update(g, s, p)
    return optax.apply_updates(p, u), s, l


C.gspmd("g.hf_flax_gemma_clip_sgd_step.dp2xtp4", {"dp": 2, "tp": 4}, (PS16, state_specs(S16, PS16), P("dp"), P("dp")),
        (PS16, state_specs(S16, PS16), P()), step16, (P16, S16, T16, AM16), note=LIBS)

# 17. Gemma attention KV-cache decode under GSPMD, cache over kv heads.
C.gspmd("g.hf_flax_gemma_attention_kv_cache_decode.dp2xtp2", {"dp": 2, "tp": 2},
        (PS3, CS3, P("dp"), P("dp"), P("dp")), (P("dp"), CS3), gemma_decode(GM_ATT), (P3, CACHE3, X3, AM3, POS3),
        note=LIBS)

# 18. ViT adamw step with a weight-decay mask, Megatron specs, dp2 x tp4.
OPT18 = optax.adamw(1e-2, weight_decay=0.1, mask=lambda p: jax.tree.map(lambda a: np.ndim(a) >= 2, p))
S18 = np_tree(OPT18.init(P7))
PS18 = specs_by_path(P7, megatron(("query", "key", "value", "intermediate/dense"), ("output/dense",)))


def step18(p, s, x, y):
    l, g = jax.value_and_grad(lambda p: ce(VIT(x, params=p).logits, y))(p)
    u, s = OPT18.update(g, s, p)
    return optax.apply_updates(p, u), s, l


C.gspmd("g.hf_flax_vit_masked_adamw_step.dp2xtp4", {"dp": 2, "tp": 4},
        (PS18, state_specs(S18, PS18), P("dp"), P("dp")), (PS18, state_specs(S18, PS18), P()), step18,
        (P7, S18, X7, Y7), note=LIBS)

# 19. CLIP contrastive loss + gradients, batch over dp8.
C.gspmd("g.hf_flax_clip_contrastive_grad.dp8", {"dp": 8}, (P(), P("dp"), P("dp")), (P(), P()),
        jax.value_and_grad(clip_loss), (P8, IMG8, TXT8), note=LIBS)

# 20. BEiT classification step (relative position bias), parameters over fsdp4, batch over dp2 x fsdp4.
BEIT = FlaxBeitForImageClassification(BeitConfig(image_size=8, patch_size=4, hidden_size=32, num_hidden_layers=1,
                                                 num_attention_heads=4, intermediate_size=64, num_labels=5,
                                                 use_relative_position_bias=True, hidden_dropout_prob=0.0,
                                                 attention_probs_dropout_prob=0.0, layer_scale_init_value=0.5),
                                      seed=20)
P20 = np_tree(BEIT.params)
OPT20 = optax.lion(1e-3, weight_decay=0.01)
S20 = np_tree(OPT20.init(P20))
PS20 = jax.tree.map(lambda a: P("fsdp") if np.ndim(a) >= 1 and np.shape(a)[0] % 4 == 0 else P(), P20)


def step20(p, s, x, y):
    l, g = jax.value_and_grad(lambda p: ce(BEIT(x, params=p).logits, y))(p)
    u, s = OPT20.update(g, s, p)
    return optax.apply_updates(p, u), s, l


C.gspmd("g.hf_flax_beit_relpos_lion_step.dp2xfsdp4", {"dp": 2, "fsdp": 4},
        (PS20, state_specs(S20, PS20), P(("dp", "fsdp")), P(("dp", "fsdp"))), (PS20, state_specs(S20, PS20), P()),
        step20, (P20, S20, X7, Y7), note=LIBS)

# 21. DINOv2 forward, dp2 x tp4.
DINO = FlaxDinov2Model(Dinov2Config(image_size=8, patch_size=4, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=4, mlp_ratio=2, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=0.0, layerscale_value=0.5), seed=21)
P21 = np_tree(DINO.params)
PS21 = specs_by_path(P21, megatron(("query", "key", "value", "fc1"), ("output/dense", "fc2")))
C.gspmd("g.hf_flax_dinov2_forward.dp2xtp4", {"dp": 2, "tp": 4}, (PS21, P("dp")), (P("dp"), P("dp")),
        lambda p, x: tuple(DINO(x, params=p)[:2]), (P21, X7), note=LIBS)

# 22. ResNet training step with batch statistics, dp8 (global batch norm by GSPMD).
C.gspmd("g.hf_flax_resnet_batchnorm_step.dp8", {"dp": 8}, (P(), P(), P(), P("dp"), P("dp")), (P(), P(), P(), P()),
        step9, (P9, BS9, S9, X9, Y9), note=LIBS)

C.finish()
