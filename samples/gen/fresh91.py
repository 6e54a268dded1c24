"""samples/fresh91: a 91st batch of programs as a user writes them, on the theme of model code from maintained PyPI model libraries that samples/wild does not use -- dm-haiku (hk.transform, hk.nets.MLP, hk.Linear, hk.Embed, hk.MultiHeadAttention, hk.LSTM, hk.Conv2D / hk.BatchNorm with state), HuggingFace transformers' Flax models (FlaxGPT2LMHeadModel, FlaxBertForMaskedLM, FlaxLlamaForCausalLM and FlaxLlamaMLP, FlaxMistralForCausalLM, built from tiny Config objects with random init, no weights downloaded) and penzai (the llamalike transformer of penzai.models with named axes) -- sharded the way a user shards them, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
Every model is built by the library from a tiny config; its parameters are the
library's own pytree (haiku's {module: {name: array}}, the HF Flax params
dict, penzai's parameters unbound by pz.unbind_params and passed as raw arrays
keyed by label, rebound with pz.bind_variables inside the function).
shard_map families (the library module called on the local shards):
 1. hk.nets.MLP classifier, data-parallel training step over dp8: local
    value_and_grad, gradients pmean'd, then optax clip_by_global_norm(0.5) +
    SGD with momentum on the replicated parameters. Bugs: gradients not
    pmean'd, each device clipping its local gradients before the pmean.
 2. a Megatron feed-forward written with two hk.Linear modules on local
    shards (dp2 x tp4): the up projection column-parallel (a local
    hk.Linear(F / tp)), the down projection row-parallel without bias, psum
    over tp, the bias added after. Bugs: the bias added on every rank before
    the psum, the psum over dp instead of tp.
 3. hk.MultiHeadAttention with its heads over tp4 (a local module of H / tp
    heads fed the rank's columns of query/key/value and rows of the output
    projection), causal mask, batch over dp2, psum over tp; the output
    projection's bias zeroed off rank 0. Bugs: the bias kept on every rank,
    no psum.
 4. a vocabulary-parallel hk.Embed (tp4): a local hk.Embed of V / tp rows
    looked up at token - rank offset, rows outside the rank masked to 0,
    psum; batch over dp2. Bugs: no rank offset, no mask.
 5. hk.LSTM unrolled with hk.dynamic_unroll plus an hk.Linear readout,
    regression loss, data-parallel SGD step over dp4. Bugs: gradients
    psum'd (4x the step), gradients not reduced.
 6. FlaxGPT2LMHeadModel (HF transformers) training step over dp4: the model
    called with params= on the local batch, shifted next-token loss,
    gradients pmean'd, optax.adamw. Bugs: gradients not pmean'd, the
    reported loss psum'd instead of pmean'd.
 7. transformers' FlaxLlamaMLP module (SwiGLU) applied on local shards with
    a config whose intermediate_size is I / tp (gate/up column-parallel,
    down row-parallel), psum over tp4, plus the gradient of a squared loss
    w.r.t. the input through it. Bugs: pmean instead of psum, no psum.
 8. penzai llamalike transformer (GQA, SwiGLU, RoPE, named axes), training
    step with optax.adam over dp4 with the loss and gradients pmean'd.
    Bugs: gradients not pmean'd, loss not pmean'd.
 9. a causal hk.Conv1D (kernel 3, VALID) + kernel-1 hk.Conv1D residual block
    with the time axis over sp4: the left neighbour's last 2 steps by a
    non-cyclic ppermute (rank 0 gets zeros = the causal padding). Bugs: the
    halo from the right neighbour, a halo of 1 step (plus a zero step).
GSPMD pairs (jax.jit with in/out shardings; correct): 10. FlaxGPT2LMHeadModel
forward with Megatron parameter specs on its (out, in) Conv1D-style kernels,
batch over dp (dp2 x tp4); 11. a FlaxGPT2 (one layer) adamw training step with FSDP
specs (every kernel's first dim over fsdp8, batch over fsdp8);
12. FlaxBertForMaskedLM masked-LM loss and adam step (dp2 x tp4, query/key/
value/intermediate column-parallel, the output denses row-parallel, word
embeddings over the model dim); 13. FlaxLlamaForCausalLM (GQA 4 query / 2 kv
heads) clip + SGD step with q/k/v/gate/up over tp4 and o/down rows over tp4;
14. FlaxMistralForCausalLM forward with a sliding window of 4 on 8 tokens
(dp2 x tp4); 15. an hk.Conv2D + hk.BatchNorm (hk.transform_with_state, the
batch statistics updated in training mode) + hk.Linear classifier with an adam
step over dp8; 16. an hk.MultiHeadAttention encoder block with the sequence
over sp4 under GSPMD; 17. penzai's llamalike transformer forward with the kv
head groups over tp4; 18. a penzai adamw training step with the parameters
over dp2 x tp4 (heads / neurons over tp, embedding over dp).
Libraries that would not run on jax 0.12.0.1: transformers' FlaxT5 (4.46.3)
calls jnp.clip(a_max=...), a keyword jax 0.12 removed; not used.
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
import haiku as hk
import transformers
from transformers import (GPT2Config, FlaxGPT2LMHeadModel, BertConfig, FlaxBertForMaskedLM, LlamaConfig,
                          FlaxLlamaForCausalLM, MistralConfig, FlaxMistralForCausalLM)
from transformers.models.llama.modeling_flax_llama import FlaxLlamaMLP
import penzai
from penzai import pz
from penzai.models.transformer.variants import llamalike_common as pz_llama
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh91.sh)
from fresh_lib import Corpus, seeded, state_specs, np_tree  # noqa: E402

SCRIPT = "samples/gen/fresh91.py"
C = Corpus("samples/fresh91", SCRIPT, "samples/gen/run_fresh91.sh", sys.argv[1:])
rng, R, I = seeded(91)
LIBS = "dm-haiku %s, transformers %s, penzai %s" % (hk.__version__, transformers.__version__, penzai.__version__)


def ce(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def specs_by_path(tree, rule):
    """The spec rule('/'.join(path), shape) of every leaf of a params dict."""
    return jax.tree_util.tree_map_with_path(
        lambda path, a: rule("/".join(str(getattr(k, "key", k)) for k in path), np.shape(a)), tree)


# ---------------------------------------------------------------------------
# 1. hk.nets.MLP classifier, dp8 training step with clipping + SGD momentum.
def mlp_fn(x):
    return hk.nets.MLP([32, 32, 10], activation=jax.nn.gelu, name="mlp")(x)


MLP_T = hk.without_apply_rng(hk.transform(mlp_fn))
OPT1 = optax.chain(optax.clip_by_global_norm(0.5), optax.sgd(0.1, momentum=0.9))
X1, Y1 = R(32, 16), I(0, 10, 32)
P1 = np_tree(MLP_T.init(jax.random.PRNGKey(1), X1))
S1 = np_tree(OPT1.init(P1))
S1 = jax.tree.map(lambda a: a + R(*np.shape(a), scale=0.1), S1)  # a momentum already under way


def loss1(p, x, y):
    return ce(MLP_T.apply(p, x), y)


def step1(p, s, x, y):
    l, g = jax.value_and_grad(loss1)(p, x, y)
    u, s = OPT1.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step1_dp(bug):
    def body(p, s, x, y):
        l, g = jax.value_and_grad(loss1)(p, x, y)
        if bug == "clip-local-then-pmean":
            g = optax.clip_by_global_norm(0.5).update(g, optax.EmptyState())[0]
        if bug != "no-grad-pmean":
            g = lax.pmean(g, "dp")
        u, s = OPT1.update(g, s, p)
        return optax.apply_updates(p, u), s, lax.pmean(l, "dp")
    return body


C.smap("s.haiku_nets_mlp_clip_sgd_step.dp8", {"dp": 8}, step1_dp, (P(), P(), P("dp"), P("dp")), (P(), P(), P()),
       step1, (P1, S1, X1, Y1), bugs=[("no-grad-pmean", ["missing_collective"]),
                                      ("clip-local-then-pmean", ["wrong_order"])], note=LIBS)

# ---------------------------------------------------------------------------
# 2. Megatron feed-forward from two hk.Linear modules, dp2 x tp4.
D2, F2, TP2 = 16, 64, 4


def ffn(x):
    return hk.Linear(D2, name="down")(jax.nn.gelu(hk.Linear(F2, name="up")(x)))


def ffn_local(x):
    h = jax.nn.gelu(hk.Linear(F2 // TP2, name="up")(x))
    return hk.Linear(D2, with_bias=False, name="down")(h)


def ffn_local_b(x):
    h = jax.nn.gelu(hk.Linear(F2 // TP2, name="up")(x))
    return hk.Linear(D2, name="down")(h)


FFN_T = hk.without_apply_rng(hk.transform(ffn))
FFN_L = hk.without_apply_rng(hk.transform(ffn_local))
FFN_LB = hk.without_apply_rng(hk.transform(ffn_local_b))
X2 = R(8, 6, D2)
P2 = np_tree(FFN_T.init(jax.random.PRNGKey(2), X2))
P2["down"]["b"] = R(D2, scale=0.5)
P2["up"]["b"] = R(F2, scale=0.5)
PS2 = {"up": {"w": P(None, "tp"), "b": P("tp")}, "down": {"w": P("tp", None), "b": P()}}


def ffn_tp(bug):
    def body(p, x):
        if bug == "bias-before-psum":
            return lax.psum(FFN_LB.apply(p, x), "tp")
        y = FFN_L.apply({"up": p["up"], "down": {"w": p["down"]["w"]}}, x)
        y = lax.psum(y, "dp" if bug == "psum-over-dp" else "tp")
        return y + p["down"]["b"]
    return body


C.smap("s.haiku_linear_megatron_ffn.dp2xtp4", {"dp": 2, "tp": 4}, ffn_tp, (PS2, P("dp")), P("dp"),
       lambda p, x: FFN_T.apply(p, x), (P2, X2),
       bugs=[("bias-before-psum", ["wrong_scale"]), ("psum-over-dp", ["wrong_axis"])], note=LIBS)

# ---------------------------------------------------------------------------
# 3. hk.MultiHeadAttention with heads over tp4, batch over dp2, causal.
H3, K3, D3, T3 = 8, 4, 16, 8


def mha(x, nh):
    mask = jnp.tril(jnp.ones((T3, T3), bool))[None, None]
    return hk.MultiHeadAttention(nh, K3, w_init=hk.initializers.VarianceScaling(1.0), model_size=D3, name="attn")(x, x, x, mask=mask)


MHA_T = hk.without_apply_rng(hk.transform(lambda x: mha(x, H3)))
MHA_L = hk.without_apply_rng(hk.transform(lambda x: mha(x, H3 // 4)))
X3 = R(4, T3, D3)
P3 = np_tree(MHA_T.init(jax.random.PRNGKey(3), X3))
P3 = jax.tree.map(lambda a: a + R(*a.shape, scale=0.2) if a.ndim == 1 else a, P3)  # non-zero biases
PS3 = {"attn/query": {"w": P(None, "tp"), "b": P("tp")}, "attn/key": {"w": P(None, "tp"), "b": P("tp")},
       "attn/value": {"w": P(None, "tp"), "b": P("tp")}, "attn/linear": {"w": P("tp", None), "b": P()}}


def mha_tp(bug):
    def body(p, x):
        p = dict(p)
        if bug != "bias-every-rank":
            first = (lax.axis_index("tp") == 0).astype(x.dtype)
            p["attn/linear"] = {"w": p["attn/linear"]["w"], "b": p["attn/linear"]["b"] * first}
        o = MHA_L.apply(p, x)
        return o if bug == "no-psum" else lax.psum(o, "tp")
    return body


C.smap("s.haiku_mha_heads_tp_causal.dp2xtp4", {"dp": 2, "tp": 4}, mha_tp, (PS3, P("dp")), P("dp"),
       lambda p, x: MHA_T.apply(p, x), (P3, X3),
       bugs=[("bias-every-rank", ["wrong_scale"]), ("no-psum", ["missing_collective"])], note=LIBS)

# ---------------------------------------------------------------------------
# 4. vocabulary-parallel hk.Embed, tp4 x dp2.
V4, E4, TP4 = 64, 8, 4
EMB_T = hk.without_apply_rng(hk.transform(lambda t: hk.Embed(V4, E4, name="tok_embed")(t)))
EMB_L = hk.without_apply_rng(hk.transform(lambda t: hk.Embed(V4 // TP4, E4, name="tok_embed")(t)))
T4 = I(0, V4, 4, 12)
P4 = np_tree(EMB_T.init(jax.random.PRNGKey(4), T4))


def emb_tp(bug):
    def body(p, t):
        vl = V4 // TP4
        off = 0 if bug == "no-offset" else lax.axis_index("tp") * vl
        loc = t - off
        ok = (loc >= 0) & (loc < vl)
        if bug == "no-mask":
            e = EMB_L.apply(p, jnp.clip(loc, 0, vl - 1))
        else:
            e = EMB_L.apply(p, jnp.where(ok, loc, 0)) * ok[..., None]
        return lax.psum(e, "tp")
    return body


C.smap("s.haiku_embed_vocab_parallel.dp2xtp4", {"dp": 2, "tp": 4}, emb_tp,
       ({"tok_embed": {"embeddings": P("tp", None)}}, P("dp")), P("dp"),
       lambda p, t: EMB_T.apply(p, t), (P4, T4),
       bugs=[("no-offset", ["wrong_offset"]), ("no-mask", ["missing_mask"])], note=LIBS)

# ---------------------------------------------------------------------------
# 5. hk.LSTM + hk.dynamic_unroll, dp4 SGD step (time-major inputs).
def lstm_fn(x):
    core = hk.LSTM(12, name="lstm")
    out, _ = hk.dynamic_unroll(core, x, core.initial_state(x.shape[1]))
    return hk.Linear(1, name="readout")(out[-1])[:, 0]


LSTM_T = hk.without_apply_rng(hk.transform(lstm_fn))
X5, Y5 = R(6, 16, 5), R(16)
P5 = np_tree(LSTM_T.init(jax.random.PRNGKey(5), X5))
LR5 = 0.2


def loss5(p, x, y):
    return jnp.mean(jnp.square(LSTM_T.apply(p, x) - y))


def step5(p, x, y):
    l, g = jax.value_and_grad(loss5)(p, x, y)
    return jax.tree.map(lambda a, b: a - LR5 * b, p, g), l


def lstm_dp(bug):
    def body(p, x, y):
        l, g = jax.value_and_grad(loss5)(p, x, y)
        if bug == "grad-psum":
            g = lax.psum(g, "dp")
        elif bug != "no-grad-reduce":
            g = lax.pmean(g, "dp")
        return jax.tree.map(lambda a, b: a - LR5 * b, p, g), lax.pmean(l, "dp")
    return body


C.smap("s.haiku_lstm_dynamic_unroll_sgd.dp4", {"dp": 4}, lstm_dp, (P(), P(None, "dp"), P("dp")), (P(), P()),
       step5, (P5, X5, Y5), bugs=[("grad-psum", ["wrong_scale"]), ("no-grad-reduce", ["missing_collective"])],
       note=LIBS)

# ---------------------------------------------------------------------------
# HF transformers Flax models from tiny configs (random init, no download).
GPT_CFG = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=4, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0)
GPT = FlaxGPT2LMHeadModel(GPT_CFG, seed=6)
P6 = np_tree(GPT.params)
T6 = I(0, 64, 8, 9)
OPT6 = optax.adamw(1e-2, weight_decay=0.01)
S6 = np_tree(OPT6.init(P6))


def gpt_loss(p, tok):
    logits = GPT(tok[:, :-1], params=p, train=False).logits
    return ce(logits, tok[:, 1:])


def step6(p, s, tok):
    l, g = jax.value_and_grad(gpt_loss)(p, tok)
    u, s = OPT6.update(g, s, p)
    return optax.apply_updates(p, u), s, l


# 6. FlaxGPT2LMHeadModel data-parallel adamw step over dp4.
def gpt_dp(bug):
    def body(p, s, tok):
        l, g = jax.value_and_grad(gpt_loss)(p, tok)
        if bug != "no-grad-pmean":
            g = lax.pmean(g, "dp")
        u, s = OPT6.update(g, s, p)
        return optax.apply_updates(p, u), s, (lax.psum(l, "dp") if bug == "loss-psum" else lax.pmean(l, "dp"))
    return body


C.smap("s.hf_flax_gpt2_adamw_step.dp4", {"dp": 4}, gpt_dp, (P(), P(), P("dp")), (P(), P(), P()), step6,
       (P6, S6, T6), bugs=[("no-grad-pmean", ["missing_collective"]), ("loss-psum", ["wrong_scale"])], note=LIBS)

# ---------------------------------------------------------------------------
# 7. transformers' FlaxLlamaMLP on local shards, tp4 x dp2, with d/dx.
LM_CFG = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=64, num_hidden_layers=1,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16)
LM_CFG_L = LlamaConfig(**{**LM_CFG.to_dict(), "intermediate_size": 64 // 4})
MLP7, MLP7_L = FlaxLlamaMLP(LM_CFG), FlaxLlamaMLP(LM_CFG_L)
X7 = R(4, 6, 16)
P7 = jax.tree.map(lambda a: 8.0 * a, np_tree(MLP7.init(jax.random.PRNGKey(7), X7)["params"]))
PS7 = {"gate_proj": {"kernel": P(None, "tp")}, "up_proj": {"kernel": P(None, "tp")},
       "down_proj": {"kernel": P("tp", None)}}


def llama_mlp(p, x):
    y = MLP7.apply({"params": p}, x)
    return y, jax.grad(lambda x: jnp.sum(jnp.square(MLP7.apply({"params": p}, x))))(x)


def llama_mlp_tp(bug):
    red = {"pmean": lax.pmean, "no-psum": lambda a, ax: a}.get(bug, lax.psum)

    def fwd(p, x):
        return red(MLP7_L.apply({"params": p}, x), "tp")

    def body(p, x):
        y = fwd(p, x)
        # d/dx sum(y^2) = sum over ranks of the local branch's vjp with 2y
        _, vjp = jax.vjp(lambda x: MLP7_L.apply({"params": p}, x), x)
        gx = red(vjp(2.0 * y)[0], "tp")
        return y, gx
    return body


C.smap("s.hf_flax_llama_mlp_tp_with_input_grad.dp2xtp4", {"dp": 2, "tp": 4}, llama_mlp_tp, (PS7, P("dp")),
       (P("dp"), P("dp")), llama_mlp, (P7, X7),
       bugs=[("pmean", ["wrong_scale"]), ("no-psum", ["missing_collective"])], note=LIBS)

# ---------------------------------------------------------------------------
# penzai llamalike transformer: parameters as raw arrays keyed by label.
PZ_CFG = pz_llama.LlamalikeTransformerConfig(
    num_kv_heads=4, query_head_multiplier=2, embedding_dim=16, projection_dim=8, mlp_hidden_dim=32,
    num_decoder_blocks=2, vocab_size=32, mlp_variant="swiglu", tie_embedder_and_logits=False,
    parameter_dtype=jnp.float32, activation_dtype=jnp.float32)
PZ_UNBOUND, _pz_vars = pz.unbind_params(pz_llama.build_llamalike_transformer(PZ_CFG, init_base_rng=jax.random.key(8)))
PZ_AXES = {v.label: tuple(v.value.named_axes.keys()) for v in _pz_vars}
P8 = {v.label: np.asarray(v.value.unwrap(*PZ_AXES[v.label])) for v in _pz_vars}


def pz_logits(p, tok):
    model = pz.bind_variables(PZ_UNBOUND, [pz.ParameterValue(value=pz.nx.wrap(a).tag(*PZ_AXES[k]), label=k)
                                           for k, a in p.items()])
    return model(pz.nx.wrap(tok).tag("batch", "seq")).unwrap("batch", "seq", "vocabulary")


def pz_loss(p, tok):
    return ce(pz_logits(p, tok[:, :-1]), tok[:, 1:])


OPT8 = optax.adam(3e-3)
S8 = np_tree(OPT8.init(P8))
T8 = I(0, 32, 8, 9)


def step8(p, s, tok):
    l, g = jax.value_and_grad(pz_loss)(p, tok)
    u, s = OPT8.update(g, s, p)
    return optax.apply_updates(p, u), s, l


# 8. penzai training step over dp4.
def pz_dp(bug):
    def body(p, s, tok):
        l, g = jax.value_and_grad(pz_loss)(p, tok)
        if bug != "no-grad-pmean":
            g = jax.tree.map(lambda a: lax.pmean(a, "dp"), g)
        u, s = OPT8.update(g, s, p)
        return optax.apply_updates(p, u), s, (l if bug == "loss-not-pmean" else lax.pmean(l, "dp"))
    return body


C.smap("s.penzai_llamalike_adam_step.dp4", {"dp": 4}, pz_dp, (P(), P(), P("dp")), (P(), P(), P()), step8,
       (P8, S8, T8), bugs=[("no-grad-pmean", ["missing_collective"]), ("loss-not-pmean", ["missing_collective"])],
       note=LIBS)

# ---------------------------------------------------------------------------
# 9. causal hk.Conv1D stack (kernel 3, VALID after a left pad) with the time
#    axis over sp4: the last 2 steps of the left neighbour by ppermute (rank
#    0 receives zeros, the causal padding), then the local VALID conv; a
#    second hk.Conv1D (kernel 1) and a residual.
CK, CC = 3, 8


def tcn(x):
    h = hk.Conv1D(CC, CK, padding="VALID", name="causal")(x)
    return x[:, CK - 1:] + hk.Conv1D(CC, 1, name="mix")(jax.nn.gelu(h))


TCN_T = hk.without_apply_rng(hk.transform(tcn))
X9 = R(2, 16, CC)
P9 = np_tree(TCN_T.init(jax.random.PRNGKey(9), jnp.pad(X9, ((0, 0), (CK - 1, 0), (0, 0)))))


def tcn_ref(p, x):
    return TCN_T.apply(p, jnp.pad(x, ((0, 0), (CK - 1, 0), (0, 0))))


def tcn_sp(bug):
    def body(p, x):
        n = 4
        perm = [(i + 1, i) for i in range(n - 1)] if bug == "halo-from-right" else [(i, i + 1) for i in range(n - 1)]
        w = 1 if bug == "halo-width-1" else CK - 1
        halo = lax.ppermute(x[:, -w:], "sp", perm)
        halo = jnp.pad(halo, ((0, 0), (CK - 1 - w, 0), (0, 0)))
        return TCN_T.apply(p, jnp.concatenate([halo, x], axis=1))
    return body


C.smap("s.haiku_conv1d_causal_halo.sp4", {"sp": 4}, tcn_sp, (P(), P(None, "sp")), P(None, "sp"), tcn_ref, (P9, X9),
       bugs=[("halo-from-right", ["wrong_permutation"]), ("halo-width-1", ["wrong_offset"])], note=LIBS)

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 9. FlaxGPT2LMHeadModel forward, Megatron specs on (out, in) kernels, dp2 x tp4.
def gpt_megatron(path, shape):
    if path.endswith(("c_attn/kernel", "c_fc/kernel")):
        return P("tp", None)
    if path.endswith(("c_attn/bias", "c_fc/bias")):
        return P("tp")
    if path.endswith("c_proj/kernel"):
        return P(None, "tp")
    if path.endswith("wte/embedding"):
        return P("tp", None)
    return P()


PS9 = specs_by_path(P6, gpt_megatron)
C.gspmd("g.hf_flax_gpt2_lm_forward_megatron.dp2xtp4", {"dp": 2, "tp": 4}, (PS9, P("dp")), P("dp", None, "tp"),
        lambda p, tok: GPT(tok, params=p, train=False).logits, (P6, T6[:, :8]), note=LIBS)


# 10. FlaxGPT2 adamw step under FSDP over fsdp8.
def gpt_fsdp(path, shape):
    return P("fsdp") if len(shape) == 2 and shape[0] % 8 == 0 else P()


PS10 = specs_by_path(P6, gpt_fsdp)
C.gspmd("g.hf_flax_gpt2_adamw_step_fsdp.fsdp8", {"fsdp": 8}, (PS10, state_specs(S6, PS10), P("fsdp")),
        (PS10, state_specs(S6, PS10), P()), step6, (P6, S6, T6), note=LIBS)

# 11. FlaxBertForMaskedLM masked-LM loss + adam, dp2 x tp4.
BERT = FlaxBertForMaskedLM(BertConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=4, max_position_embeddings=16,
                                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0), seed=11)
P11 = np_tree(BERT.params)
OPT11 = optax.adam(1e-3)
S11 = np_tree(OPT11.init(P11))
T11 = I(0, 64, 8, 10)
AM11 = (np.arange(10)[None, :] < I(6, 11, 8)[:, None]).astype(np.int32)  # padded rows
W11 = ((rng.random((8, 10)) < 0.3) & (AM11 > 0)).astype(np.float32)  # masked positions
W11[:, 0] = 1.0


def bert_spec(path, shape):
    if path.endswith(("query/kernel", "key/kernel", "value/kernel", "intermediate/dense/kernel")):
        return P(None, "tp")
    if path.endswith(("query/bias", "key/bias", "value/bias", "intermediate/dense/bias")):
        return P("tp")
    if "output/dense/kernel" in path:
        return P("tp", None)
    if path.endswith("word_embeddings/embedding"):
        return P(None, "tp")
    return P()


def step11(p, s, tok, am, w):
    def loss(p):
        inp = jnp.where(w > 0, 3, tok)  # [MASK] = 3
        logits = BERT(inp, attention_mask=am, params=p, train=False).logits
        nll = optax.softmax_cross_entropy_with_integer_labels(logits, tok)
        return jnp.sum(nll * w) / jnp.sum(w)
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT11.update(g, s, p)
    return optax.apply_updates(p, u), s, l


PS11 = specs_by_path(P11, bert_spec)
C.gspmd("g.hf_flax_bert_mlm_adam_step.dp2xtp4", {"dp": 2, "tp": 4},
        (PS11, state_specs(S11, PS11), P("dp"), P("dp"), P("dp")), (PS11, state_specs(S11, PS11), P()),
        step11, (P11, S11, T11, AM11, W11), note=LIBS)

# 12. FlaxLlamaForCausalLM, clip + SGD step, tp4 (batch replicated).
LLAMA = FlaxLlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=16), seed=12)  # 2 layers
P12 = np_tree(LLAMA.params)
OPT12 = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.05))
S12 = np_tree(OPT12.init(P12))
T12 = I(0, 64, 4, 9)


def llama_spec(path, shape):
    if path.endswith(("q_proj/kernel", "k_proj/kernel", "v_proj/kernel", "gate_proj/kernel", "up_proj/kernel",
                      "lm_head/kernel")):
        return P(None, "tp")
    if path.endswith(("o_proj/kernel", "down_proj/kernel")):
        return P("tp", None)
    return P()


def step12(p, s, tok):
    def loss(p):
        return ce(LLAMA(tok[:, :-1], params=p).logits, tok[:, 1:])
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT12.update(g, s, p)
    return optax.apply_updates(p, u), s, l


PS12 = specs_by_path(P12, llama_spec)
C.gspmd("g.hf_flax_llama_gqa_clip_sgd_step.tp4", {"tp": 4}, (PS12, state_specs(S12, PS12), P()),
        (PS12, state_specs(S12, PS12), P()), step12, (P12, S12, T12), note=LIBS)

# 13. FlaxMistralForCausalLM forward, sliding window 4, dp2 x tp4.
MISTRAL = FlaxMistralForCausalLM(MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                               max_position_embeddings=16, sliding_window=4), seed=13)
P13 = np_tree(MISTRAL.params)
PS13 = specs_by_path(P13, llama_spec)
C.gspmd("g.hf_flax_mistral_sliding_window_forward.dp2xtp4", {"dp": 2, "tp": 4}, (PS13, P("dp")), P("dp"),
        lambda p, tok: MISTRAL(tok, params=p).logits, (P13, I(0, 64, 4, 8)), note=LIBS)


# 14. hk.Conv2D + hk.BatchNorm (state) + hk.Linear, adam step over dp8.
def cnn(x, is_training):
    h = hk.Conv2D(8, 3, with_bias=False, name="conv")(x)  # no bias before BN
    h = hk.BatchNorm(True, True, 0.9, name="bn")(h, is_training)
    h = jax.nn.relu(h)
    return hk.Linear(5, name="head")(jnp.mean(h, (1, 2)))


CNN = hk.without_apply_rng(hk.transform_with_state(cnn))
X14, Y14 = R(16, 6, 6, 3), I(0, 5, 16)
P14, ST14 = (np_tree(t) for t in CNN.init(jax.random.PRNGKey(14), X14, True))
OPT14 = optax.adam(1e-2)
S14 = np_tree(OPT14.init(P14))


def step14(p, st, s, x, y):
    def loss(p):
        logits, st2 = CNN.apply(p, st, x, True)
        return ce(logits, y), st2
    (l, st2), g = jax.value_and_grad(loss, has_aux=True)(p)
    u, s = OPT14.update(g, s, p)
    return optax.apply_updates(p, u), st2, s, l


rep = lambda t: jax.tree.map(lambda a: P(), t)
C.gspmd("g.haiku_conv_batchnorm_state_adam_step.dp8", {"dp": 8}, (rep(P14), rep(ST14), rep(S14), P("dp"), P("dp")),
        (rep(P14), rep(ST14), rep(S14), P()), step14, (P14, ST14, S14, X14, Y14), note=LIBS)


# 15. hk.MultiHeadAttention encoder block, sequence over sp4 (GSPMD).
def enc_block(x):
    z = hk.LayerNorm(-1, True, True, name="ln1")(x)
    x = x + hk.MultiHeadAttention(4, 4, w_init=hk.initializers.VarianceScaling(1.0), name="mha")(z, z, z)
    z = hk.LayerNorm(-1, True, True, name="ln2")(x)
    return x + hk.nets.MLP([32, 16], activation=jax.nn.silu, name="ffn")(z)


ENC = hk.without_apply_rng(hk.transform(enc_block))
X15 = R(2, 16, 16)
P15 = np_tree(ENC.init(jax.random.PRNGKey(15), X15))
C.gspmd("g.haiku_mha_encoder_block_seq.sp4", {"sp": 4}, (rep(P15), P(None, "sp")), P(None, "sp"),
        lambda p, x: ENC.apply(p, x), (P15, X15), note=LIBS)


# 16. penzai llamalike forward, kv head groups over tp4.
def pz_spec(label, shape, tp="tp", dp=None):
    axes = PZ_AXES[label]
    return P(*[tp if a in ("head_groups", "neurons") else (dp if a == "embedding" and len(axes) > 1 else None)
               for a in axes])


PS16 = {k: pz_spec(k, a.shape) for k, a in P8.items()}
C.gspmd("g.penzai_llamalike_forward_heads.tp4", {"tp": 4}, (PS16, P()), P(), pz_logits, (P8, T8[:, :8]), note=LIBS)

# 17. penzai adamw step, dp2 x tp4.
OPT17 = optax.adamw(3e-3, weight_decay=0.1)
S17 = np_tree(OPT17.init(P8))


def step17(p, s, tok):
    l, g = jax.value_and_grad(pz_loss)(p, tok)
    u, s = OPT17.update(g, s, p)
    return optax.apply_updates(p, u), s, l


PS17 = {k: pz_spec(k, a.shape, dp="dp") for k, a in P8.items()}
C.gspmd("g.penzai_llamalike_adamw_step.dp2xtp4", {"dp": 2, "tp": 4}, (PS17, state_specs(S17, PS17), P("dp")),
        (PS17, state_specs(S17, PS17), P()), step17, (P8, S17, T8), note=LIBS)

C.finish()
