"""samples/fresh117: a 117th batch of programs as a user writes them, on the theme of HuggingFace transformers' Flax encoder-decoder and encoder models that earlier corpora did not use (FlaxBartForConditionalGeneration, FlaxMBart, FlaxMarianMT, FlaxPegasus, FlaxT5 / FlaxLongT5 with a jnp.clip shim, FlaxWhisperForConditionalGeneration on random log-mel input, FlaxRobertaForMaskedLM / FlaxRobertaSelfAttention, FlaxElectraForPreTraining, FlaxBigBirdForMaskedLM with full attention), built from tiny configs with random init and sharded the way a user shards them, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
Every model is built by transformers from a tiny Config (random init, no
weights downloaded); its parameters are the library's own Flax params dict.
transformers 4.46.3's FlaxT5 / FlaxLongT5 call jnp.clip(x, a_max=...), a
keyword jax 0.12 removed: the script gives those two modules a jnp whose clip
accepts a_min / a_max (a user's compat shim; nothing else changes).
shard_map families (the library module called on local shards; bugs after ':'):
 1. FlaxBartForConditionalGeneration seq2seq step over dp4, label-smoothed
    (0.1) cross-entropy with padded targets, the loss a token sum over the
    GLOBAL token count (psum'd count), gradients psum'd, optax.adamw with a
    state from two earlier steps: loss normalised by the local token count
    (then pmean), gradients pmean'd instead of psum'd.
 2. FlaxT5ForConditionalGeneration step with optax.adafactor, the batch over
    both axes of a dp2 x fsdp4 mesh (parameters replicated), gradients and
    loss pmean'd over (dp, fsdp): gradients pmean'd over dp only, loss not
    pmean'd.
 3. FlaxWhisperForConditionalGeneration on random log-mel input, dp4 step
    with optax.adamw: per-device masked token sums, gradient psum'd then
    divided by the psum'd token count: gradient not psum'd, token count not
    psum'd.
 4. a vocabulary-parallel LM head for FlaxBart (untied lm_head, kernel and
    final_logits_bias over tp4, batch over dp2): FlaxBartModule gives the
    decoder states, local logits, distributed log-softmax (pmax, psum of
    exp-sums), the label's logit picked at label - rank offset and psum'd:
    no rank offset, each rank's own max (no pmax), the label logit not
    psum'd.
 5. transformers' FlaxT5DenseGatedActDense (gated-gelu) from a config with
    d_ff / tp on local shards (wi_0 / wi_1 columns, wo rows over tp4, batch
    over dp2) after the library's FlaxT5LayerNorm, psum, residual, plus the
    gradients of a squared loss w.r.t. the three local kernels: pmean
    instead of psum, psum over dp.
 6. FlaxRobertaSelfAttention with its heads over tp4 (a local module from a
    config of hidden / tp and heads / tp, fed the rank's query/key/value
    columns), padding mask, the output dense row-parallel with a psum, bias
    and the residual LayerNorm after it: no psum, the bias added before the
    psum on every rank.
 7. FlaxElectraForPreTraining replaced-token-detection step over dp8 with
    per-sequence masked-mean BCE, gradient accumulation over 2 micro-batches
    by lax.scan, pmean, optax.lamb: accumulated gradients not divided by the
    micro-batch count, no pmean.
 8. FlaxBigBirdForMaskedLM (attention_type original_full) MLM step with the
    batch over dp2 x fsdp4, loss a sum over the global masked count, the
    gradients psum'd over both axes, optax.sgd with nesterov momentum:
    gradients psum'd over dp only, reported loss pmean'd instead of psum'd.
 9. FlaxMarianMTModel step over dp4 x tp2 where the batch is over dp and
    replicated over tp, gradients pmean'd over dp, optax.adam: gradients
    pmean'd over tp (the wrong axis), loss pmean'd but gradients not.
 10. transformers' FlaxT5Attention (causal decoder self-attention with the
    relative position bias and a padding mask) from a config with heads / tp
    on local shards (q/k/v columns, o rows, the relative_attention_bias
    table's head columns over tp4, batch over dp2), psum: no psum, every
    rank using head 0's bias column (all_gather'd, sliced at 0).
GSPMD pairs (jax.jit with in/out shardings from a rule over the params
pytree; correct): 10. FlaxBart forward with Megatron rules (q/k/v/fc1
columns, out_proj/fc2 rows) over dp2 x tp4; 11. FlaxBart label-smoothed
adamw step with FSDP (every param sharded on its largest dim when it divides
by 8) over fsdp8; 12. FlaxT5 forward with Megatron rules over tp4;
13. FlaxT5 adafactor step over dp2 x tp4; 14. FlaxLongT5 (local attention,
radius 2) forward over dp2 x tp4; 15. FlaxWhisper forward over dp2 x tp4
(conv front end replicated); 16. FlaxWhisper adamw step with FSDP over
fsdp8; 17. FlaxRobertaForMaskedLM MLM adam step over dp2 x tp4;
18. FlaxElectraForPreTraining step over dp4 x tp2; 19. FlaxBigBird forward
over tp4; 20. FlaxPegasus forward over dp2 x tp4 with activation
constraints; 21. FlaxMBart label-smoothed step over dp4 x tp2 with optax
adamw and with_sharding_constraint on the logits.
"""
import sys, types
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
import flax.linen as nn
import transformers
from transformers import (BartConfig, FlaxBartForConditionalGeneration, MBartConfig,
                          FlaxMBartForConditionalGeneration, MarianConfig, FlaxMarianMTModel, PegasusConfig,
                          FlaxPegasusForConditionalGeneration, T5Config, FlaxT5ForConditionalGeneration,
                          LongT5Config, FlaxLongT5ForConditionalGeneration, WhisperConfig,
                          FlaxWhisperForConditionalGeneration, RobertaConfig, FlaxRobertaForMaskedLM,
                          ElectraConfig, FlaxElectraForPreTraining, BigBirdConfig, FlaxBigBirdForMaskedLM)
from transformers.models.bart.modeling_flax_bart import FlaxBartModule, shift_tokens_right
from transformers.models.t5 import modeling_flax_t5
from transformers.models.longt5 import modeling_flax_longt5
from transformers.models.t5.modeling_flax_t5 import FlaxT5DenseGatedActDense, FlaxT5LayerNorm
from transformers.models.roberta.modeling_flax_roberta import FlaxRobertaSelfAttention
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh117.sh)
from fresh_lib import Corpus, seeded, state_specs, np_tree  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402


class _JnpCompat(types.ModuleType):
    """jax.numpy with the old clip(a, a_min, a_max) keywords (transformers 4.46 T5 on jax 0.12)."""

    def __getattr__(self, k):
        return getattr(jnp, k)

    @staticmethod
    def clip(a, a_min=None, a_max=None, **kw):
        return jnp.clip(a, kw.get("min", a_min), kw.get("max", a_max))


modeling_flax_t5.jnp = _JnpCompat("jnp")
modeling_flax_longt5.jnp = _JnpCompat("jnp")

SCRIPT = "samples/gen/fresh117.py"
C = Corpus("samples/fresh117", SCRIPT, "samples/gen/run_fresh117.sh", sys.argv[1:])
rng, R, I = seeded(117)
LIBS = "transformers %s, flax (HF Flax models), optax %s" % (transformers.__version__, optax.__version__)
V, PAD, BOS, EOS = 64, 1, 0, 2


def specs_by_path(tree, rule):
    """The spec rule('/'.join(path), shape) of every leaf of a params dict."""
    return jax.tree_util.tree_map_with_path(
        lambda path, a: rule("/".join(str(getattr(k, "key", k)) for k in path), np.shape(a)), tree)


def fsdp_rule(n, axis="fsdp"):
    def rule(path, shape):
        if not shape:
            return P()
        d = int(np.argmax(shape))
        if shape[d] % n:
            return P()
        return P(*[axis if i == d else None for i in range(len(shape))])
    return rule


def padded_targets(b, t, lo):
    """Target ids with a random valid length in [lo, t] per row, PAD after, EOS at the end."""
    lab = I(3, V, b, t)
    n = I(lo, t + 1, b)
    lab[np.arange(b), n - 1] = EOS
    lab[np.arange(t)[None, :] >= n[:, None]] = PAD
    return lab, (np.arange(t)[None, :] < n[:, None]).astype(np.int32)


def smoothed_nll(logits, labels, eps=0.1):
    onehot = optax.smooth_labels(jax.nn.one_hot(labels, logits.shape[-1]), eps)
    return optax.softmax_cross_entropy(logits, onehot)


def warm_state(opt, params, grad_fn, n=2):
    """An optimizer state two real steps in (so that gradient scale matters to adam)."""
    s = opt.init(params)
    p = params
    for _ in range(n):
        g = grad_fn(p)
        u, s = opt.update(g, s, p)
        p = optax.apply_updates(p, u)
    return np_tree(s)


def megatron_rule(cols, rows, emb=()):
    def rule(path, shape):
        leaf = path.split("/")[-1]
        mod = path.split("/")[-2] if "/" in path else ""
        if mod in cols:
            return P(None, "tp") if leaf == "kernel" else P("tp")
        if mod in rows and leaf == "kernel":
            return P("tp", None)
        if path in emb:
            return P(None, "tp")
        return P()
    return rule


# ---------------------------------------------------------------------------
# FlaxBart (tiny) and a seq2seq batch with padded sources and targets.
BART_KW = dict(vocab_size=V, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
               dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, pad_token_id=PAD, bos_token_id=BOS,
               eos_token_id=EOS, decoder_start_token_id=EOS)
BART_CFG = BartConfig(**BART_KW)
BART = FlaxBartForConditionalGeneration(BART_CFG, seed=1)
P1 = np_tree(BART.params)
B1, S1L, T1L = 8, 8, 7
SRC1, SAM1 = padded_targets(B1, S1L, 4)
LAB1, LM1 = padded_targets(B1, T1L, 2)


def bart_loss_sum(p, src, sam, lab, lm):
    dec = shift_tokens_right(lab, PAD, EOS)
    logits = BART(src, attention_mask=sam, decoder_input_ids=dec, decoder_attention_mask=lm, params=p,
                  train=False).logits
    return jnp.sum(smoothed_nll(logits, lab) * lm)


OPT1 = optax.adamw(3e-3, weight_decay=0.01)
S1 = warm_state(OPT1, P1, jax.jit(jax.grad(lambda p: bart_loss_sum(p, SRC1, SAM1, LAB1, LM1) / LM1.sum())))


def step1(p, s, src, sam, lab, lm):
    l, g = jax.value_and_grad(lambda p: bart_loss_sum(p, src, sam, lab, lm) / jnp.sum(lm))(p)
    u, s = OPT1.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def bart_dp(bug):
    def body(p, s, src, sam, lab, lm):
        if bug == "local-token-count":
            l, g = jax.value_and_grad(lambda p: bart_loss_sum(p, src, sam, lab, lm) / jnp.sum(lm))(p)
            l, g = lax.pmean(l, "dp"), lax.pmean(g, "dp")
        else:
            n = lax.psum(jnp.sum(lm), "dp")
            l, g = jax.value_and_grad(lambda p: bart_loss_sum(p, src, sam, lab, lm) / n)(p)
            red = lax.pmean if bug == "grad-pmean" else lax.psum
            l, g = lax.psum(l, "dp"), red(g, "dp")
        u, s = OPT1.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return body


C.smap("s.hf_flax_bart_label_smoothed_adamw_global_tokens.dp4", {"dp": 4}, bart_dp,
       (P(), P(), P("dp"), P("dp"), P("dp"), P("dp")), (P(), P(), P()), step1, (P1, S1, SRC1, SAM1, LAB1, LM1),
       bugs=[("local-token-count", ["wrong_scale"]), ("grad-pmean", ["wrong_scale"])], note=LIBS)

# ---------------------------------------------------------------------------
# 2. FlaxT5 with optax.adafactor, batch over dp2 x fsdp4.
T5_CFG = T5Config(vocab_size=V, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=4,
                  relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.0,
                  pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=PAD, feed_forward_proj="gated-gelu",
                  tie_word_embeddings=False)
T5 = FlaxT5ForConditionalGeneration(T5_CFG, seed=2)
P2 = np_tree(T5.params)
SRC2, SAM2 = padded_targets(8, 8, 5)
LAB2, LM2 = padded_targets(8, 6, 6)  # full-length targets: every row has 6 tokens


def t5_loss(p, src, sam, lab):
    dec = shift_tokens_right(lab, PAD, PAD)
    logits = T5(src, attention_mask=sam, decoder_input_ids=dec, params=p, train=False).logits
    return optax.softmax_cross_entropy_with_integer_labels(logits, lab).mean()


OPT2 = optax.adafactor(1e-2, min_dim_size_to_factor=16)
S2 = warm_state(OPT2, P2, jax.jit(jax.grad(lambda p: t5_loss(p, SRC2, SAM2, LAB2))))


def step2(p, s, src, sam, lab):
    l, g = jax.value_and_grad(t5_loss)(p, src, sam, lab)
    u, s = OPT2.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def t5_dp(bug):
    def body(p, s, src, sam, lab):
        l, g = jax.value_and_grad(t5_loss)(p, src, sam, lab)
        g = lax.pmean(g, "dp" if bug == "grad-pmean-dp-only" else ("dp", "fsdp"))
        u, s = OPT2.update(g, s, p)
        return optax.apply_updates(p, u), s, (l if bug == "loss-not-pmean" else lax.pmean(l, ("dp", "fsdp")))
    return body


B2 = P(("dp", "fsdp"))
C.smap("s.hf_flax_t5_adafactor_step_2d_batch.dp2xfsdp4", {"dp": 2, "fsdp": 4}, t5_dp,
       (P(), P(), B2, B2, B2), (P(), P(), P()), step2, (P2, S2, SRC2, SAM2, LAB2),
       bugs=[("grad-pmean-dp-only", ["wrong_axis"]), ("loss-not-pmean", ["missing_collective"])], note=LIBS)

# ---------------------------------------------------------------------------
# 3. FlaxWhisper on random log-mel input, dp4 adamw step.
WH_CFG = WhisperConfig(vocab_size=V, num_mel_bins=8, d_model=16, encoder_layers=1, decoder_layers=1,
                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=32,
                       decoder_ffn_dim=32, max_source_positions=8, max_target_positions=16, dropout=0.0,
                       attention_dropout=0.0, activation_dropout=0.0, pad_token_id=PAD, bos_token_id=BOS,
                       eos_token_id=EOS, decoder_start_token_id=BOS, suppress_tokens=None,
                       begin_suppress_tokens=None)
WHISPER = FlaxWhisperForConditionalGeneration(WH_CFG, seed=3, input_shape=(1, 8, 16))
P3 = np_tree(WHISPER.params)
MEL3 = R(8, 8, 16)
LAB3, LM3 = padded_targets(8, 6, 2)


def whisper_sum(p, mel, lab, lm):
    dec = shift_tokens_right(lab, PAD, BOS)
    logits = WHISPER(mel, decoder_input_ids=dec, params=p, train=False).logits
    return jnp.sum(optax.softmax_cross_entropy_with_integer_labels(logits, lab) * lm)


OPT3 = optax.adamw(1e-2, b1=0.8, weight_decay=0.05)
S3 = warm_state(OPT3, P3, jax.jit(jax.grad(lambda p: whisper_sum(p, MEL3, LAB3, LM3) / LM3.sum())))


def step3(p, s, mel, lab, lm):
    l, g = jax.value_and_grad(lambda p: whisper_sum(p, mel, lab, lm) / jnp.sum(lm))(p)
    u, s = OPT3.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def whisper_dp(bug):
    def body(p, s, mel, lab, lm):
        tot, g = jax.value_and_grad(whisper_sum)(p, mel, lab, lm)
        cnt = jnp.sum(lm).astype(jnp.float32)
        n = cnt if bug == "count-not-psum" else lax.psum(cnt, "dp")
        if bug != "grad-not-psum":
            g = lax.psum(g, "dp")
        g = jax.tree.map(lambda a: a / n, g)
        u, s = OPT3.update(g, s, p)
        return optax.apply_updates(p, u), s, lax.psum(tot, "dp") / lax.psum(cnt, "dp")
    return body


C.smap("s.hf_flax_whisper_logmel_adamw_step.dp4", {"dp": 4}, whisper_dp, (P(), P(), P("dp"), P("dp"), P("dp")),
       (P(), P(), P()), step3, (P3, S3, MEL3, LAB3, LM3),
       bugs=[("grad-not-psum", ["missing_collective"]), ("count-not-psum", ["wrong_scale"])], note=LIBS)

# ---------------------------------------------------------------------------
# 4. vocabulary-parallel LM head for an untied FlaxBart, dp2 x tp4.
BART4_CFG = BartConfig(**{**BART_KW, "tie_word_embeddings": False})
BART4 = FlaxBartForConditionalGeneration(BART4_CFG, seed=4)
P4 = np_tree(BART4.params)
P4["final_logits_bias"] = R(1, V, scale=0.5)
P4["lm_head"]["kernel"] = P4["lm_head"]["kernel"] * 20.0
SRC4, SAM4 = padded_targets(4, 8, 5)
LAB4, LM4 = padded_targets(4, 6, 3)
BART4_MOD = FlaxBartModule(BART4_CFG)


def bart4_ref(p, src, sam, lab):
    dec = shift_tokens_right(lab, PAD, EOS)
    logits = BART4(src, attention_mask=sam, decoder_input_ids=dec, params=p, train=False).logits
    return optax.softmax_cross_entropy_with_integer_labels(logits, lab)


def bart4_vp(bug):
    def body(p, src, sam, lab):
        dec = shift_tokens_right(lab, PAD, EOS)
        b, t = dec.shape
        pos = jnp.broadcast_to(jnp.arange(t)[None], (b, t))
        spos = jnp.broadcast_to(jnp.arange(src.shape[1])[None], src.shape)
        h = BART4_MOD.apply({"params": p["model"]}, src, sam, dec, jnp.ones_like(dec), spos, pos).last_hidden_state
        z = h @ p["lm_head"]["kernel"] + p["final_logits_bias"][0]  # (b, t, V / tp)
        vl = z.shape[-1]
        m = jnp.max(z, -1, keepdims=True)
        if bug != "local-max":
            m = lax.pmax(lax.stop_gradient(m), "tp")
        lse = jnp.log(lax.psum(jnp.sum(jnp.exp(z - m), -1), "tp")) + m[..., 0]
        off = 0 if bug == "no-offset" else lax.axis_index("tp") * vl
        loc = lab - off
        ok = (loc >= 0) & (loc < vl)
        zl = jnp.take_along_axis(z, jnp.clip(loc, 0, vl - 1)[..., None], -1)[..., 0] * ok
        if bug != "label-logit-not-psum":
            zl = lax.psum(zl, "tp")
        return lse - zl
    return body


PS4 = jax.tree.map(lambda a: P(), P4)
PS4["lm_head"]["kernel"] = P(None, "tp")
PS4["final_logits_bias"] = P(None, "tp")
C.smap("s.hf_flax_bart_vocab_parallel_lm_head_ce.dp2xtp4", {"dp": 2, "tp": 4}, bart4_vp,
       (PS4, P("dp"), P("dp"), P("dp")), P("dp"), bart4_ref, (P4, SRC4, SAM4, LAB4),
       bugs=[("no-offset", ["wrong_offset"]), ("local-max", ["missing_collective"]),
             ("label-logit-not-psum", ["missing_collective"])], note=LIBS)

# ---------------------------------------------------------------------------
# 5. FlaxT5DenseGatedActDense, d_ff over tp4, batch over dp2, with kernel grads.
T5F_CFG = T5Config(**{**T5_CFG.to_dict(), "d_ff": 64})
T5F_CFG_L = T5Config(**{**T5_CFG.to_dict(), "d_ff": 16})
FF5, FF5_L, LN5 = FlaxT5DenseGatedActDense(T5F_CFG), FlaxT5DenseGatedActDense(T5F_CFG_L), FlaxT5LayerNorm(16)
X5 = R(4, 6, 16)
P5 = {"ff": np_tree(FF5.init(jax.random.PRNGKey(5), X5, True)["params"]),
      "ln": {"weight": 1.0 + R(16, scale=0.2)}}
P5["ff"] = jax.tree.map(lambda a: 4.0 * a, P5["ff"])


def t5ff(p, x):
    def y_of(ff):
        return x + FF5.apply({"params": ff}, LN5.apply({"params": p["ln"]}, x), True)
    y = y_of(p["ff"])
    return y, jax.grad(lambda ff: jnp.mean(jnp.square(y_of(ff))))(p["ff"])


def t5ff_tp(bug):
    red = {"pmean": lambda a: lax.pmean(a, "tp"), "psum-over-dp": lambda a: lax.psum(a, "dp")}.get(
        bug, lambda a: lax.psum(a, "tp"))

    def body(p, x):
        z = LN5.apply({"params": p["ln"]}, x)
        part, vjp = jax.vjp(lambda ff: FF5_L.apply({"params": ff}, z, True), p["ff"])
        y = x + red(part)
        n = lax.psum(y.size, "dp")  # the mean runs over the global batch
        gff = vjp(2.0 * y / n)[0]
        return y, jax.tree.map(lambda a: lax.psum(a, "dp"), gff)
    return body


PS5 = {"ff": {"wi_0": {"kernel": P(None, "tp")}, "wi_1": {"kernel": P(None, "tp")}, "wo": {"kernel": P("tp", None)}},
       "ln": {"weight": P()}}
C.smap("s.hf_flax_t5_gated_ffn_tp_with_kernel_grads.dp2xtp4", {"dp": 2, "tp": 4}, t5ff_tp, (PS5, P("dp")),
       (P("dp"), PS5["ff"]), t5ff, (P5, X5),
       bugs=[("pmean", ["wrong_scale"]), ("psum-over-dp", ["wrong_axis"])], note=LIBS)

# ---------------------------------------------------------------------------
# 6. FlaxRobertaSelfAttention heads over tp4, row-parallel output dense.
RB_KW = dict(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=4,
             max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
             pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS)
RB_CFG = RobertaConfig(**RB_KW)
RB_CFG_L = RobertaConfig(**{**RB_KW, "hidden_size": 4, "num_attention_heads": 1})
SA6, SA6_L = FlaxRobertaSelfAttention(RB_CFG), FlaxRobertaSelfAttention(RB_CFG_L)
LN6 = nn.LayerNorm(epsilon=RB_CFG.layer_norm_eps)
X6 = R(4, 8, 16)
AM6 = (np.arange(8)[None, :] < I(3, 9, 4)[:, None]).astype(np.int32)
P6 = {"self": np_tree(SA6.init(jax.random.PRNGKey(6), X6, AM6, None)["params"]),
      "dense": {"kernel": R(16, 16, scale=0.3), "bias": R(16, scale=0.5)},
      "LayerNorm": {"scale": 1.0 + R(16, scale=0.1), "bias": R(16, scale=0.1)}}
P6["self"] = jax.tree.map(lambda a: a + R(*a.shape, scale=0.3), P6["self"])


def rb_attn(p, x, am):
    ctx = SA6.apply({"params": p["self"]}, x, am, None)[0]
    return LN6.apply({"params": p["LayerNorm"]}, ctx @ p["dense"]["kernel"] + p["dense"]["bias"] + x)


def rb_tp(bug):
    def body(p, x, am):
        ctx = SA6_L.apply({"params": p["self"]}, x, am, None)[0]
        o = ctx @ p["dense"]["kernel"]
        if bug == "bias-before-psum":
            o = o + p["dense"]["bias"]
        if bug != "no-psum":
            o = lax.psum(o, "tp")
        if bug != "bias-before-psum":
            o = o + p["dense"]["bias"]
        return LN6.apply({"params": p["LayerNorm"]}, o + x)
    return body


COL = {"kernel": P(None, "tp"), "bias": P("tp")}
PS6 = {"self": {"query": COL, "key": COL, "value": COL}, "dense": {"kernel": P("tp", None), "bias": P()},
       "LayerNorm": {"scale": P(), "bias": P()}}
C.smap("s.hf_flax_roberta_self_attention_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, rb_tp, (PS6, P("dp"), P("dp")),
       P("dp"), rb_attn, (P6, X6, AM6),
       bugs=[("no-psum", ["missing_collective"]), ("bias-before-psum", ["wrong_scale"])], note=LIBS)

# ---------------------------------------------------------------------------
# 7. FlaxElectraForPreTraining RTD step, dp8, scan gradient accumulation, lamb.
EL_CFG = ElectraConfig(**RB_KW, embedding_size=8)
ELECTRA = FlaxElectraForPreTraining(EL_CFG, seed=7)
P7 = np_tree(ELECTRA.params)
TOK7 = I(3, V, 32, 8)
AM7 = (np.arange(8)[None, :] < I(4, 9, 32)[:, None]).astype(np.int32)
RTD7 = ((rng.random((32, 8)) < 0.3) & (AM7 > 0)).astype(np.float32)
OPT7 = optax.lamb(1e-2)
S7 = np_tree(OPT7.init(P7))


def electra_loss(p, tok, am, rtd):
    z = ELECTRA(tok, attention_mask=am, params=p, train=False).logits
    bce = optax.sigmoid_binary_cross_entropy(z, rtd)
    m = am.astype(jnp.float32)
    return jnp.mean(jnp.sum(bce * m, -1) / jnp.sum(m, -1))


def step7(p, s, tok, am, rtd):
    l, g = jax.value_and_grad(electra_loss)(p, tok, am, rtd)
    u, s = OPT7.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def electra_dp(bug):
    def body(p, s, tok, am, rtd):
        k = 2
        mb = jax.tree.map(lambda a: a.reshape((k, a.shape[0] // k) + a.shape[1:]), (tok, am, rtd))

        def acc(c, xs):
            l, g = jax.value_and_grad(electra_loss)(p, *xs)
            return jax.tree.map(jnp.add, c, (l, g)), None
        zero = (jnp.zeros(()), jax.tree.map(jnp.zeros_like, p))
        (l, g), _ = lax.scan(acc, zero, mb)
        if bug != "accum-not-averaged":
            l, g = l / k, jax.tree.map(lambda a: a / k, g)
        if bug != "no-pmean":
            g = lax.pmean(g, "dp")
        u, s = OPT7.update(g, s, p)
        return optax.apply_updates(p, u), s, lax.pmean(l, "dp")
    return body


C.smap("s.hf_flax_electra_rtd_scan_accum_lamb.dp8", {"dp": 8}, electra_dp, (P(), P(), P("dp"), P("dp"), P("dp")),
       (P(), P(), P()), step7, (P7, S7, TOK7, AM7, RTD7),
       bugs=[("accum-not-averaged", ["wrong_scale"]), ("no-pmean", ["missing_collective"])], note=LIBS)

# ---------------------------------------------------------------------------
# 8. FlaxBigBirdForMaskedLM (full attention) MLM step over dp2 x fsdp4.
BB_CFG = BigBirdConfig(**{**RB_KW, "max_position_embeddings": 64}, attention_type="original_full")
BIGBIRD = FlaxBigBirdForMaskedLM(BB_CFG, seed=8)
P8 = np_tree(BIGBIRD.params)
TOK8 = I(3, V, 8, 12)
W8 = (rng.random((8, 12)) < 0.25).astype(np.float32)
W8[:, 0] = 1.0
OPT8 = optax.sgd(0.5, momentum=0.9, nesterov=True)
S8 = np_tree(OPT8.init(P8))
S8 = jax.tree.map(lambda a: a + R(*np.shape(a), scale=0.01), S8)  # momentum under way


def bb_sum(p, tok, w):
    inp = jnp.where(w > 0, 4, tok)  # [MASK] = 4
    z = BIGBIRD(inp, params=p, train=False).logits
    return jnp.sum(optax.softmax_cross_entropy_with_integer_labels(z, tok) * w)


def step8(p, s, tok, w):
    l, g = jax.value_and_grad(lambda p: bb_sum(p, tok, w) / jnp.sum(w))(p)
    u, s = OPT8.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def bb_dp(bug):
    ax = ("dp", "fsdp")

    def body(p, s, tok, w):
        n = lax.psum(jnp.sum(w), ax)
        l, g = jax.value_and_grad(lambda p: bb_sum(p, tok, w) / n)(p)
        g = lax.psum(g, "dp" if bug == "grad-psum-dp-only" else ax)
        u, s = OPT8.update(g, s, p)
        return optax.apply_updates(p, u), s, (lax.pmean(l, ax) if bug == "loss-pmean" else lax.psum(l, ax))
    return body


C.smap("s.hf_flax_bigbird_full_mlm_nesterov_step.dp2xfsdp4", {"dp": 2, "fsdp": 4}, bb_dp,
       (P(), P(), B2, B2), (P(), P(), P()), step8, (P8, S8, TOK8, W8),
       bugs=[("grad-psum-dp-only", ["wrong_axis"]), ("loss-pmean", ["wrong_scale"])], note=LIBS)

# ---------------------------------------------------------------------------
# 9. FlaxMarianMTModel step over dp4 x tp2 (batch replicated over tp), adam.
MARIAN_CFG = MarianConfig(**{**BART_KW, "decoder_start_token_id": PAD}, decoder_vocab_size=V)
MARIAN = FlaxMarianMTModel(MARIAN_CFG, seed=9)
P9 = np_tree(MARIAN.params)
SRC9, SAM9 = padded_targets(8, 8, 4)
LAB9, LM9 = padded_targets(8, 6, 3)


def marian_loss(p, src, sam, lab, lm):
    dec = shift_tokens_right(lab, PAD, PAD)
    z = MARIAN(src, attention_mask=sam, decoder_input_ids=dec, params=p, train=False).logits
    nll = optax.softmax_cross_entropy_with_integer_labels(z, lab)
    return jnp.mean(jnp.sum(nll * lm, -1) / jnp.sum(lm, -1))


OPT9 = optax.adam(5e-3)
S9 = warm_state(OPT9, P9, jax.jit(jax.grad(lambda p: marian_loss(p, SRC9, SAM9, LAB9, LM9))))


def step9(p, s, src, sam, lab, lm):
    l, g = jax.value_and_grad(marian_loss)(p, src, sam, lab, lm)
    u, s = OPT9.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def marian_dp(bug):
    def body(p, s, src, sam, lab, lm):
        l, g = jax.value_and_grad(marian_loss)(p, src, sam, lab, lm)
        if bug != "loss-only-pmean":
            g = lax.pmean(g, "tp" if bug == "grad-pmean-tp" else "dp")
        u, s = OPT9.update(g, s, p)
        return optax.apply_updates(p, u), s, lax.pmean(l, "dp")
    return body


C.smap("s.hf_flax_marian_adam_step_batch_over_dp.dp4xtp2", {"dp": 4, "tp": 2}, marian_dp,
       (P(), P(), P("dp"), P("dp"), P("dp"), P("dp")), (P(), P(), P()), step9, (P9, S9, SRC9, SAM9, LAB9, LM9),
       bugs=[("grad-pmean-tp", ["wrong_axis"]), ("loss-only-pmean", ["missing_collective"])], note=LIBS)

# ---------------------------------------------------------------------------
# 10. FlaxT5Attention (causal, relative position bias) with its heads over tp4.
T5A_CFG_L = T5Config(**{**T5_CFG.to_dict(), "num_heads": 1})
ATT10 = modeling_flax_t5.FlaxT5Attention(T5_CFG, has_relative_attention_bias=True, causal=True)
ATT10_L = modeling_flax_t5.FlaxT5Attention(T5A_CFG_L, has_relative_attention_bias=True, causal=True)
X10 = R(4, 8, 16)
AM10 = (np.arange(8)[None, :] < I(4, 9, 4)[:, None]).astype(np.int32)
P10 = np_tree(ATT10.init(jax.random.PRNGKey(10), X10, AM10)["params"])
P10["relative_attention_bias"]["embedding"] = R(8, 4)  # a bias that matters


def t5attn_ref(p, x, am):
    return ATT10.apply({"params": p}, x, am)[0]


def t5attn_tp(bug):
    def body(p, x, am):
        if bug == "rel-bias-head0":
            rb = lax.all_gather(p["relative_attention_bias"]["embedding"], "tp", axis=1, tiled=True)[:, :1]
            p = {**p, "relative_attention_bias": {"embedding": rb}}
        o = ATT10_L.apply({"params": p}, x, am)[0]
        return o if bug == "no-psum" else lax.psum(o, "tp")
    return body


COL10 = {"kernel": P(None, "tp")}
PS10A = {"q": COL10, "k": COL10, "v": COL10, "o": {"kernel": P("tp", None)},
         "relative_attention_bias": {"embedding": P(None, "tp")}}
C.smap("s.hf_flax_t5_causal_rel_bias_attention_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, t5attn_tp,
       (PS10A, P("dp"), P("dp")), P("dp"), t5attn_ref, (P10, X10, AM10),
       bugs=[("no-psum", ["missing_collective"]), ("rel-bias-head0", ["wrong_offset"])], note=LIBS)

# ---------------------------------------------------------------------------
# GSPMD pairs.
BART_COLS = ("q_proj", "k_proj", "v_proj", "fc1")
BART_ROWS = ("out_proj", "fc2")
PS10 = specs_by_path(P1, megatron_rule(BART_COLS, BART_ROWS, ("model/shared/embedding",)))
C.gspmd("g.hf_flax_bart_forward_megatron.dp2xtp4", {"dp": 2, "tp": 4}, (PS10, P("dp"), P("dp"), P("dp")),
        P("dp", None, "tp"),
        lambda p, src, sam, dec: BART(src, attention_mask=sam, decoder_input_ids=dec, params=p, train=False).logits,
        (P1, SRC1, SAM1, shift_tokens_right(LAB1, PAD, EOS)), note=LIBS)

PS11 = specs_by_path(P1, fsdp_rule(8))
C.gspmd("g.hf_flax_bart_label_smoothed_adamw_fsdp.fsdp8", {"fsdp": 8},
        (PS11, state_specs(S1, PS11), P("fsdp"), P("fsdp"), P("fsdp"), P("fsdp")),
        (PS11, state_specs(S1, PS11), P()), step1, (P1, S1, SRC1, SAM1, LAB1, LM1), note=LIBS)

T5_COLS = ("q", "k", "v", "wi_0", "wi_1")
T5_ROWS = ("o", "wo")
PS12 = specs_by_path(P2, megatron_rule(T5_COLS, T5_ROWS))
C.gspmd("g.hf_flax_t5_forward_megatron.tp4", {"tp": 4}, (PS12, P(), P(), P()), P(),
        lambda p, src, sam, dec: T5(src, attention_mask=sam, decoder_input_ids=dec, params=p, train=False).logits,
        (P2, SRC2, SAM2, shift_tokens_right(LAB2, PAD, PAD)), note=LIBS)

C.gspmd("g.hf_flax_t5_adafactor_step_megatron.dp2xtp4", {"dp": 2, "tp": 4},
        (PS12, state_specs(S2, PS12), P("dp"), P("dp"), P("dp")), (PS12, state_specs(S2, PS12), P()),
        step2, (P2, S2, SRC2, SAM2, LAB2), note=LIBS)

LT5 = FlaxLongT5ForConditionalGeneration(LongT5Config(
    vocab_size=V, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=4, local_radius=2,
    relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.0, pad_token_id=PAD,
    eos_token_id=EOS, decoder_start_token_id=PAD, encoder_attention_type="local"), seed=14)
P14 = np_tree(LT5.params)
PS14 = specs_by_path(P14, megatron_rule(T5_COLS + ("wi",), T5_ROWS))
SRC14, SAM14 = padded_targets(4, 12, 7)
C.gspmd("g.hf_flax_longt5_local_attention_forward.dp2xtp4", {"dp": 2, "tp": 4}, (PS14, P("dp"), P("dp"), P("dp")),
        P("dp"),
        lambda p, src, sam, dec: LT5(src, attention_mask=sam, decoder_input_ids=dec, params=p, train=False).logits,
        (P14, SRC14, SAM14, shift_tokens_right(LAB2[:4], PAD, PAD)), note=LIBS)

PS15 = specs_by_path(P3, megatron_rule(BART_COLS, BART_ROWS))
C.gspmd("g.hf_flax_whisper_forward_megatron.dp2xtp4", {"dp": 2, "tp": 4}, (PS15, P("dp"), P("dp")),
        P("dp", None, None),
        lambda p, mel, dec: WHISPER(mel, decoder_input_ids=dec, params=p, train=False).logits,
        (P3, MEL3, shift_tokens_right(LAB3, PAD, BOS)), note=LIBS)

PS16 = specs_by_path(P3, fsdp_rule(8))
C.gspmd("g.hf_flax_whisper_adamw_step_fsdp.fsdp8", {"fsdp": 8},
        (PS16, state_specs(S3, PS16), P("fsdp"), P("fsdp"), P("fsdp")), (PS16, state_specs(S3, PS16), P()),
        step3, (P3, S3, MEL3, LAB3, LM3), note=LIBS)

ROBERTA = FlaxRobertaForMaskedLM(RB_CFG, seed=17)
P17 = np_tree(ROBERTA.params)
OPT17 = optax.adam(1e-2)
S17 = np_tree(OPT17.init(P17))
TOK17 = I(3, V, 8, 10)
AM17 = (np.arange(10)[None, :] < I(5, 11, 8)[:, None]).astype(np.int32)
W17 = ((rng.random((8, 10)) < 0.3) & (AM17 > 0)).astype(np.float32)
W17[:, 1] = 1.0


def step17(p, s, tok, am, w):
    def loss(p):
        z = ROBERTA(jnp.where(w > 0, 4, tok), attention_mask=am, params=p, train=False).logits
        return jnp.sum(optax.softmax_cross_entropy_with_integer_labels(z, tok) * w) / jnp.sum(w)
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT17.update(g, s, p)
    return optax.apply_updates(p, u), s, l


RB_COLS, RB_ROWS = ("query", "key", "value"), ()


def roberta_rule(path, shape):
    if path.endswith("intermediate/dense/kernel"):
        return P(None, "tp")
    if path.endswith("intermediate/dense/bias"):
        return P("tp")
    if path.endswith("output/dense/kernel") and "attention" not in path:
        return P("tp", None)
    if path.endswith("attention/output/dense/kernel"):
        return P("tp", None)
    if path.endswith("lm_head/dense/kernel"):
        return P(None, "tp")
    return megatron_rule(RB_COLS, RB_ROWS, ("roberta/embeddings/word_embeddings/embedding",))(path, shape)


PS17 = specs_by_path(P17, roberta_rule)
C.gspmd("g.hf_flax_roberta_mlm_adam_step.dp2xtp4", {"dp": 2, "tp": 4},
        (PS17, state_specs(S17, PS17), P("dp"), P("dp"), P("dp")), (PS17, state_specs(S17, PS17), P()),
        step17, (P17, S17, TOK17, AM17, W17), note=LIBS)

PS18 = specs_by_path(P7, roberta_rule)
C.gspmd("g.hf_flax_electra_rtd_lamb_step.dp4xtp2", {"dp": 4, "tp": 2},
        (PS18, state_specs(S7, PS18), P("dp"), P("dp"), P("dp")), (PS18, state_specs(S7, PS18), P()),
        step7, (P7, S7, TOK7, AM7, RTD7), note=LIBS)

PS19 = specs_by_path(P8, roberta_rule)
C.gspmd("g.hf_flax_bigbird_full_forward.tp4", {"tp": 4}, (PS19, P()), P(None, None, "tp"),
        lambda p, tok: BIGBIRD(tok, params=p, train=False).logits, (P8, TOK8), note=LIBS)

PEG_CFG = PegasusConfig(**BART_KW)
PEGASUS = FlaxPegasusForConditionalGeneration(PEG_CFG, seed=20)
P20 = np_tree(PEGASUS.params)
PS20 = specs_by_path(P20, megatron_rule(BART_COLS, BART_ROWS))


def peg_fwd(p, src, sam, dec):
    z = PEGASUS(src, attention_mask=sam, decoder_input_ids=dec, params=p, train=False).logits
    z = lax.with_sharding_constraint(z, NamedSharding(make_mesh({"dp": 2, "tp": 4}), P("dp", None, "tp")))
    return jax.nn.log_softmax(z, -1)


C.gspmd("g.hf_flax_pegasus_forward_log_softmax.dp2xtp4", {"dp": 2, "tp": 4}, (PS20, P("dp"), P("dp"), P("dp")),
        P("dp"), peg_fwd, (P20, SRC1, SAM1, shift_tokens_right(LAB1, PAD, EOS)), note=LIBS)

MBART = FlaxMBartForConditionalGeneration(MBartConfig(**BART_KW), seed=21)
P21 = np_tree(MBART.params)
OPT21 = optax.adamw(2e-3, weight_decay=0.1)
S21 = np_tree(OPT21.init(P21))


def step21(p, s, src, sam, lab, lm):
    def loss(p):
        dec = shift_tokens_right(lab, PAD, EOS)
        z = MBART(src, attention_mask=sam, decoder_input_ids=dec, decoder_attention_mask=lm, params=p,
                  train=False).logits
        z = lax.with_sharding_constraint(z, NamedSharding(make_mesh({"dp": 4, "tp": 2}), P("dp", None, "tp")))
        return jnp.sum(smoothed_nll(z, lab, 0.2) * lm) / jnp.sum(lm)
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT21.update(g, s, p)
    return optax.apply_updates(p, u), s, l


PS21 = specs_by_path(P21, megatron_rule(BART_COLS, BART_ROWS, ("model/shared/embedding",)))
C.gspmd("g.hf_flax_mbart_label_smoothed_adamw_step.dp4xtp2", {"dp": 4, "tp": 2},
        (PS21, state_specs(S21, PS21), P("dp"), P("dp"), P("dp"), P("dp")), (PS21, state_specs(S21, PS21), P()),
        step21, (P21, S21, SRC1, SAM1, LAB1, LM1), note=LIBS)

C.finish()
