"""samples/fresh119: a 119th batch of programs as a user writes them, on the theme of two more maintained libraries with JAX backends -- Keras 3 / keras-hub (KERAS_BACKEND=jax: keras-hub backbones samples/wild did not use, GPT2, Bert, Mistral, Phi3, Falcon, OPT, Qwen-MoE, and plain keras layers, EinsumDense, MultiHeadAttention, LayerNormalization, Conv2D + BatchNormalization) sharded with keras.distribution LayoutMaps and exported by jax.jit of model.stateless_call / optimizer.stateless_apply, and HuggingFace diffusers' Flax models (FlaxUNet2DConditionModel, FlaxAutoencoderKL, FlaxDDPMScheduler) in a denoising training step -- none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
Every model is built by its library from a tiny config with random init (no
weights downloaded). Keras models are called statelessly: their variables are
a list of arrays (model.trainable_variables / non_trainable_variables order)
passed to model.stateless_call; the keras AdamW steps keep the optimizer's own
variables (iteration, momentums, velocities) and call
optimizer.stateless_apply. GSPMD shardings of keras models come from a
keras.distribution.LayoutMap (regex keys over the variable paths; a
backbone's own get_layout_map where keras-hub has one) read back as
PartitionSpecs (TensorLayout.axes), the batch over the data axis.
shard_map families (the library layer applied on the local shards):
 1. a keras column/row-parallel EinsumDense pair (tp4 x dp2): a local
    EinsumDense("btd,df->btf") of F / tp units with gelu, then a local
    EinsumDense("btf,fd->btd") without bias, psum over tp, the bias added
    after; the output and the gradient of a squared loss w.r.t. the input
    (vjp of the local branch, psum). Bugs: the down bias added on every rank
    before the psum, the psum over dp instead of tp, no psum of the input
    gradient.
 1b. a keras pre-LN residual MLP block (LayerNormalization, EinsumDense
    pair) in Megatron sequence parallelism (dp2 x tp4): LayerNorm on the
    local sequence chunk, all_gather of the sequence over tp, column/row-
    parallel EinsumDense, psum_scatter back to sequence chunks, then the
    down bias and the residual. Bugs: the bias added before the
    psum_scatter, a psum followed by the neighbour's chunk (wrong offset).
 2. a keras MultiHeadAttention + LayerNormalization + Dense classifier,
    data-parallel training step over dp4 with keras AdamW
    (optimizer.stateless_apply): local gradients pmean'd. Bugs: gradients
    not pmean'd, gradients psum'd.
 2b. the same keras classifier over dp4 with a rematerialised loss
    (jax.checkpoint) and optax.MultiSteps(adam, every 2) accumulation, one
    micro-step already in the accumulator (this step applies). Bugs:
    gradients not pmean'd, the reported loss psum'd.
 3. keras-hub GPT2CausalLM (GPT2Backbone, 1 layer) data-parallel training
    step over dp8 with optax adamw, next-token loss masked by padding_mask
    (the global masked mean = psum of masked sums / psum of counts). Bugs:
    the local masked means pmean'd (wrong when shards hold different
    numbers of real tokens), gradients not reduced.
 4. diffusers FlaxUNet2DConditionModel denoising step over dp4: noisy
    latents from FlaxDDPMScheduler.add_noise, noise-prediction MSE,
    jax.grad, optax adam; gradients and loss pmean'd. Bugs: gradients not
    pmean'd, gradients psum'd.
 5. keras MultiHeadAttention with its heads over tp4 (a local layer of
    H / tp heads fed the rank's head slices of query/key/value kernels and
    biases and of the output kernel; the output bias only on rank 0), psum,
    batch over dp2. Bugs: no psum, the output bias on every rank.
 5b. keras MultiHeadAttention without a mask, the sequence over sp4 (batch
    over dp2): the key/value chunks passed around the sp ring by ppermute
    and concatenated in arrival order (own chunk first; attention does not
    depend on the order of its keys). Bugs: one hop short (a chunk missing),
    the own chunk appended again instead of the last one received.
 5c. keras-hub ReversibleEmbedding (tied, reverse=True logits) with the
    vocabulary over tp4 (batch over dp2) and a vocabulary-parallel
    per-token cross-entropy: max by pmax, log-sum-exp by psum, the target
    logit taken on the rank that owns it and psum'd. Bugs: each rank's own
    max (no pmax), the target logit not masked to its owner.
GSPMD pairs (jax.jit with in/out shardings; correct):
 6. keras-hub GPT2Backbone forward, LayoutMap Megatron specs (dp2 x model4);
 7. keras-hub GPT2CausalLM training step with keras AdamW stateless_apply
    (batch2 x model4, optimizer variables sharded like their parameters);
 8. keras-hub BertBackbone (pooled + sequence outputs) under DataParallel
    (batch8), forward;
 9. keras-hub MistralBackbone (GQA 8 query / 4 kv heads, sliding window 4) forward with a
    LayoutMap (batch2 x model4);
10. keras-hub Phi3CausalLM optax adamw training step with a LayoutMap
    (batch2 x model4);
11. keras-hub QwenMoeBackbone forward with its own get_layout_map
    (batch2 x model4);
12. keras-hub FalconBackbone forward (model4 x batch2, model axis first);
13. keras-hub OPTCausalLM training step, FSDP-style LayoutMap (every
    kernel's first dim over fsdp8, batch over fsdp8);
14. keras Conv2D + BatchNormalization + Dense classifier training step (BN
    batch statistics and moving averages in the non-trainable variables),
    keras AdamW, batch over dp8;
15. diffusers UNet denoising adam step, batch over dp8;
16. the same step FSDP (largest divisible dim of every parameter over
    fsdp8, batch over fsdp8);
17. the same step with the latents' height over sp4 and conv output
    channels over ch2 (spatial x channel);
18. diffusers FlaxAutoencoderKL forward (encode, posterior mean, decode)
    plus a KL + reconstruction loss gradient, batch over dp2, height over
    sp4.
diffusers is pinned to 0.35.2, a version that still ships the Flax models
(FlaxUNet2DConditionModel hardcodes GroupNorm(32), hence 32 channels; one
down/up block without attention, the cross-attention in the mid block, to
keep the exported HLO small).
"""
import os
import sys
os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
import keras
import keras_hub
import diffusers
from diffusers import FlaxUNet2DConditionModel, FlaxAutoencoderKL, FlaxDDPMScheduler
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh119.sh)
from fresh_lib import Corpus, seeded, state_specs, np_tree  # noqa: E402

SCRIPT = "samples/gen/fresh119.py"
C = Corpus(os.environ.get("FRESH119_OUT", "samples/fresh119"), SCRIPT, "samples/gen/run_fresh119.sh", sys.argv[1:])
rng, R, I = seeded(119)
KLIB = "keras %s, keras-hub %s, backend jax" % (keras.__version__, keras_hub.__version__)
DLIB = "diffusers %s (Flax models)" % diffusers.__version__
M = keras_hub.models


def arrays(vs):
    return [np.asarray(v.value) for v in vs]


def ce(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def layout_specs(layout_map, variables):
    """The PartitionSpec a keras LayoutMap gives every variable (P() if none)."""
    out = []
    for v in variables:
        lay = layout_map[v.path]
        out.append(P(*lay.axes) if lay is not None else P())
    return out


def device_mesh(shape, names):
    return keras.distribution.DeviceMesh(shape, names, devices=jax.devices()[:int(np.prod(shape))])


class KerasAdamW:
    """keras.optimizers.AdamW driven statelessly: its variables as arrays, the
    specs of its momentums/velocities those of their parameters."""

    def __init__(self, model, lr=1e-3, wd=0.01):
        self.opt = keras.optimizers.AdamW(learning_rate=lr, weight_decay=wd)
        self.opt.build(model.trainable_variables)
        self.index = {}
        for i, v in enumerate(model.trainable_variables):
            for lst in (self.opt._momentums, self.opt._velocities):
                self.index[id(lst[i])] = i

    def state(self):
        return arrays(self.opt.variables)

    def specs(self, pspecs):
        return [pspecs[self.index[id(v)]] if id(v) in self.index else P() for v in self.opt.variables]

    def apply(self, ov, grads, tv):
        tv, ov = self.opt.stateless_apply(ov, grads, tv)
        return tv, ov


# ---------------------------------------------------------------------------
# 1. keras column/row-parallel EinsumDense pair, tp4 x dp2, with d/dx.
D1, F1, T1, TP1 = 16, 64, 6, 4


def ffn_model(f, down_bias):
    keras.utils.set_random_seed(1)
    x = keras.Input((T1, D1))
    h = keras.layers.EinsumDense("btd,df->btf", output_shape=(T1, f), bias_axes="f", activation="gelu",
                                 name="up")(x)
    y = keras.layers.EinsumDense("btf,fd->btd", output_shape=(T1, D1), bias_axes="d" if down_bias else None,
                                 name="down")(h)
    return keras.Model(x, y)


FFN, FFN_L, FFN_LB = ffn_model(F1, True), ffn_model(F1 // TP1, False), ffn_model(F1 // TP1, True)
P1 = arrays(FFN.trainable_variables)
P1 = [a * 3.0 for a in P1[:1]] + [R(F1, scale=0.5), P1[2] * 3.0, R(D1, scale=0.5)]
X1 = R(4, T1, D1)
PS1 = [P(None, "tp"), P("tp"), P("tp", None), P()]


def ffn_ref(p, x):
    y = FFN.stateless_call(p, [], x)[0]
    gx = jax.grad(lambda x: jnp.sum(jnp.square(FFN.stateless_call(p, [], x)[0])))(x)
    return y, gx


def ffn_tp(bug):
    def body(p, x):
        up_k, up_b, dn_k, dn_b = p
        if bug == "bias-before-psum":
            local = lambda x: FFN_LB.stateless_call([up_k, up_b, dn_k, dn_b], [], x)[0]
            y = lax.psum(local(x), "tp")
        else:
            local = lambda x: FFN_L.stateless_call([up_k, up_b, dn_k], [], x)[0]
            y = lax.psum(local(x), "dp" if bug == "psum-over-dp" else "tp") + dn_b
        _, vjp = jax.vjp(local, x)
        gx = vjp(2.0 * y)[0]
        if bug != "no-input-grad-psum":
            gx = lax.psum(gx, "tp")
        return y, gx
    return body


C.smap("s.keras_einsumdense_col_row_parallel.dp2xtp4", {"dp": 2, "tp": 4}, ffn_tp, (PS1, P("dp")),
       (P("dp"), P("dp")), ffn_ref, (P1, X1),
       bugs=[("bias-before-psum", ["wrong_scale"]), ("psum-over-dp", ["wrong_axis"]),
             ("no-input-grad-psum", ["missing_collective"])], note=KLIB)

# ---------------------------------------------------------------------------
# 1b. a keras pre-LN residual MLP block, Megatron sequence parallel (dp2 x
#     tp4): the LayerNormalization on the local sequence chunk, all_gather of
#     the sequence over tp, column/row-parallel EinsumDense pair,
#     psum_scatter back onto the sequence chunks, bias and residual after.
T1B, F1B = 16, 32


def sp_block(f, full):
    keras.utils.set_random_seed(11)
    x = keras.Input((None, D1))
    h = keras.layers.LayerNormalization(name="ln")(x)
    h = keras.layers.EinsumDense("btd,df->btf", output_shape=(None, f), bias_axes="f", activation="gelu",
                                 name="up")(h if full else x)
    y = keras.layers.EinsumDense("btf,fd->btd", output_shape=(None, D1), bias_axes="d" if full else None,
                                 name="down")(h)
    return keras.Model(x, x + y if full else y)


SPB, SPB_L = sp_block(F1B, True), sp_block(F1B // 4, False)
LN1B = keras.Sequential([keras.Input((None, D1)), keras.layers.LayerNormalization()])
P1B = [a + R(*a.shape, scale=0.3) for a in arrays(SPB.trainable_variables)]  # ln g/b, up k/b, down k/b
PS1B = [P(), P(), P(None, "tp"), P("tp"), P("tp", None), P()]
X1B = R(4, T1B, D1)


def sp_block_tp(bug):
    def body(p, x):
        g, b, uk, ub, dk, db = p
        h = LN1B.stateless_call([g, b], [], x)[0]
        h = lax.all_gather(h, "tp", axis=1, tiled=True)
        y = SPB_L.stateless_call([uk, ub, dk], [], h)[0]
        if bug == "bias-before-scatter":
            y = y + db
        if bug == "psum-then-wrong-chunk":
            n = x.shape[1]
            k = (lax.axis_index("tp") + 1) % 4
            y = lax.dynamic_slice_in_dim(lax.psum(y, "tp"), k * n, n, axis=1)
        else:
            y = lax.psum_scatter(y, "tp", scatter_dimension=1, tiled=True)
        return x + y + (0.0 if bug == "bias-before-scatter" else db)
    return body


C.smap("s.keras_layernorm_mlp_megatron_sequence_parallel.dp2xtp4", {"dp": 2, "tp": 4}, sp_block_tp,
       (PS1B, P("dp", "tp")), P("dp", "tp"), lambda p, x: SPB.stateless_call(p, [], x)[0], (P1B, X1B),
       bugs=[("bias-before-scatter", ["wrong_scale"]), ("psum-then-wrong-chunk", ["wrong_offset"])], note=KLIB)

# ---------------------------------------------------------------------------
# 2. keras MHA + LayerNorm + Dense classifier, dp4 step with keras AdamW.
T2, D2, NC2 = 8, 16, 5


def mha_classifier():
    keras.utils.set_random_seed(2)
    x = keras.Input((T2, D2))
    a = keras.layers.MultiHeadAttention(num_heads=4, key_dim=4, name="mha")(x, x)
    h = keras.layers.LayerNormalization(name="ln")(x + a)
    h = keras.layers.GlobalAveragePooling1D()(h)
    return keras.Model(x, keras.layers.Dense(NC2, name="head")(h))


MHA2 = mha_classifier()
OPT2 = KerasAdamW(MHA2, lr=1e-2, wd=0.05)
P2, S2 = arrays(MHA2.trainable_variables), OPT2.state()
X2, Y2 = R(16, T2, D2), I(0, NC2, 16)


def loss2(tv, x, y):
    return ce(MHA2.stateless_call(tv, [], x)[0], y)


def step2(tv, ov, x, y):
    l, g = jax.value_and_grad(loss2)(tv, x, y)
    tv, ov = OPT2.apply(ov, g, tv)
    return tv, ov, l


def step2_dp(bug):
    def body(tv, ov, x, y):
        l, g = jax.value_and_grad(loss2)(tv, x, y)
        if bug == "grad-psum":
            g = lax.psum(g, "dp")
        elif bug != "no-grad-pmean":
            g = lax.pmean(g, "dp")
        tv, ov = OPT2.apply(ov, g, tv)
        return tv, ov, lax.pmean(l, "dp")
    return body


C.smap("s.keras_mha_layernorm_adamw_stateless_apply.dp4", {"dp": 4}, step2_dp, (P(), P(), P("dp"), P("dp")),
       (P(), P(), P()), step2, (P2, S2, X2, Y2),
       bugs=[("no-grad-pmean", ["missing_collective"]), ("grad-psum", ["wrong_scale"])], note=KLIB)

# ---------------------------------------------------------------------------
# 2b. the same keras classifier, dp4, rematerialised loss (jax.checkpoint)
#     and optax.MultiSteps(adam, every_k_schedule=2) gradient accumulation,
#     the accumulator one micro-step in (this call applies the update).
OPT2B = optax.MultiSteps(optax.adam(5e-3), every_k_schedule=2)
S2B = OPT2B.init(P2)
S2B = np_tree(S2B._replace(mini_step=jnp.asarray(1, S2B.mini_step.dtype),
                           acc_grads=[R(*np.shape(a), scale=0.05) for a in P2]))
X2B, Y2B = R(16, T2, D2), I(0, NC2, 16)
loss2b = jax.checkpoint(loss2)


def step2b(tv, st, x, y):
    l, g = jax.value_and_grad(loss2b)(tv, x, y)
    u, st = OPT2B.update(g, st, tv)
    return optax.apply_updates(tv, u), st, l


def step2b_dp(bug):
    def body(tv, st, x, y):
        l, g = jax.value_and_grad(loss2b)(tv, x, y)
        if bug != "no-grad-pmean":
            g = lax.pmean(g, "dp")
        u, st = OPT2B.update(g, st, tv)
        return optax.apply_updates(tv, u), st, (lax.psum(l, "dp") if bug == "loss-psum" else lax.pmean(l, "dp"))
    return body


C.smap("s.keras_mha_remat_optax_multisteps.dp4", {"dp": 4}, step2b_dp, (P(), P(), P("dp"), P("dp")),
       (P(), P(), P()), step2b, (P2, S2B, X2B, Y2B),
       bugs=[("no-grad-pmean", ["missing_collective"]), ("loss-psum", ["wrong_scale"])], note=KLIB)

# ---------------------------------------------------------------------------
# keras-hub causal LMs from tiny configs.
V, SEQ = 64, 8


def causal_lm(lm_cls, backbone_cls, seed, **cfg):
    keras.utils.set_random_seed(seed)
    return lm_cls(backbone=backbone_cls(vocabulary_size=V, num_layers=1, hidden_dim=32, intermediate_dim=64,
                                        **cfg), preprocessor=None)


def lm_batch(b, ragged=False):
    tok = I(0, V, b, SEQ + 1)
    mask = np.ones((b, SEQ), np.int32)
    if ragged:  # right padding, a different number of real tokens per row
        lens = rng.integers(2, SEQ + 1, b)
        mask = (np.arange(SEQ)[None] < lens[:, None]).astype(np.int32)
    return {"token_ids": tok[:, :-1], "padding_mask": mask}, tok[:, 1:]


# 3. GPT2CausalLM dp8 optax adamw step with a padding-masked loss.
GPT2 = causal_lm(M.GPT2CausalLM, M.GPT2Backbone, 3, num_heads=4, dropout=0.0, max_sequence_length=16)
OPT3 = optax.adamw(3e-3, weight_decay=0.01)
P3 = arrays(GPT2.trainable_variables)
S3 = np_tree(OPT3.init(P3))
X3, Y3 = lm_batch(16, ragged=True)


def masked_sums(tv, x, y):
    logits = GPT2.stateless_call(tv, [], x)[0]
    w = x["padding_mask"].astype(jnp.float32)
    return jnp.sum(optax.softmax_cross_entropy_with_integer_labels(logits, y) * w), jnp.sum(w)


def loss3(tv, x, y):
    s, n = masked_sums(tv, x, y)
    return s / n


def step3(tv, st, x, y):
    l, g = jax.value_and_grad(loss3)(tv, x, y)
    u, st = OPT3.update(g, st, tv)
    return optax.apply_updates(tv, u), st, l


def step3_dp(bug):
    def body(tv, st, x, y):
        if bug == "pmean-local-means":
            l, g = jax.value_and_grad(loss3)(tv, x, y)
            l, g = lax.pmean(l, "dp"), lax.pmean(g, "dp")
        else:
            n = lax.psum(jnp.sum(x["padding_mask"].astype(jnp.float32)), "dp")
            l, g = jax.value_and_grad(lambda tv: masked_sums(tv, x, y)[0] / n)(tv)
            l = lax.psum(l, "dp")
            if bug != "no-grad-reduce":
                g = lax.psum(g, "dp")
        u, st = OPT3.update(g, st, tv)
        return optax.apply_updates(tv, u), st, l
    return body


C.smap("s.kerashub_gpt2_causal_lm_padmask_adamw.dp8", {"dp": 8}, step3_dp, (P(), P(), P("dp"), P("dp")),
       (P(), P(), P()), step3, (P3, S3, X3, Y3),
       bugs=[("pmean-local-means", ["wrong_scale"]), ("no-grad-reduce", ["missing_collective"])], note=KLIB)

# ---------------------------------------------------------------------------
# 4. diffusers FlaxUNet2DConditionModel denoising step, dp4.
UNET = FlaxUNet2DConditionModel(sample_size=8, in_channels=4, out_channels=4,
                                down_block_types=("DownBlock2D",), up_block_types=("UpBlock2D",),
                                block_out_channels=(32,), layers_per_block=1, attention_head_dim=4,
                                cross_attention_dim=16)
B4, HW4 = 8, 8
P4 = np_tree(UNET.init(jax.random.PRNGKey(4), jnp.zeros((1, 4, HW4, HW4)), jnp.zeros((1,), jnp.int32),
                       jnp.zeros((1, 5, 16)))["params"])
SCHED = FlaxDDPMScheduler(num_train_timesteps=100, beta_schedule="linear")
SCHED_STATE = SCHED.create_state()
OPT4 = optax.adam(1e-3)
S4 = np_tree(OPT4.init(P4))
LAT4, NOISE4, TS4, CTX4 = R(B4, 4, HW4, HW4), R(B4, 4, HW4, HW4), I(0, 100, B4), R(B4, 5, 16)


def unet_loss(p, lat, noise, ts, ctx):
    noisy = SCHED.add_noise(SCHED_STATE, lat, noise, ts)
    pred = UNET.apply({"params": p}, noisy, ts, ctx).sample
    return jnp.mean(jnp.square(pred - noise))


def unet_step(p, s, lat, noise, ts, ctx):
    l, g = jax.value_and_grad(unet_loss)(p, lat, noise, ts, ctx)
    u, s = OPT4.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def unet_dp(bug):
    def body(p, s, lat, noise, ts, ctx):
        l, g = jax.value_and_grad(unet_loss)(p, lat, noise, ts, ctx)
        if bug == "grad-psum":
            g = jax.tree.map(lambda a: lax.psum(a, "dp"), g)
        elif bug != "no-grad-pmean":
            g = jax.tree.map(lambda a: lax.pmean(a, "dp"), g)
        u, s = OPT4.update(g, s, p)
        return optax.apply_updates(p, u), s, lax.pmean(l, "dp")
    return body


C.smap("s.diffusers_unet_ddpm_denoise_adam.dp4", {"dp": 4}, unet_dp, (P(), P(), P("dp"), P("dp"), P("dp"), P("dp")),
       (P(), P(), P()), unet_step, (P4, S4, LAT4, NOISE4, TS4, CTX4),
       bugs=[("no-grad-pmean", ["missing_collective"]), ("grad-psum", ["wrong_scale"])], note=DLIB)

# ---------------------------------------------------------------------------
# 5. keras MultiHeadAttention with heads over tp4, batch over dp2.
H5, K5, D5, T5, TP5 = 8, 4, 16, 6, 4


def mha_model(nh):
    keras.utils.set_random_seed(5)
    q = keras.Input((T5, D5))
    kv = keras.Input((T5 + 2, D5))
    return keras.Model([q, kv], keras.layers.MultiHeadAttention(num_heads=nh, key_dim=K5, name="mha")(q, kv))


MHA5, MHA5_L = mha_model(H5), mha_model(H5 // TP5)
# query/key/value kernels (D, H, K), biases (H, K); output kernel (H, K, D), bias (D)
P5 = [a + R(*a.shape, scale=0.3) for a in arrays(MHA5.trainable_variables)]
PS5 = [P(None, "tp"), P("tp")] * 3 + [P("tp"), P()]
Q5, KV5 = R(4, T5, D5), R(4, T5 + 2, D5)


def mha_tp(bug):
    def body(p, q, kv):
        p = list(p)
        if bug != "bias-every-rank":
            p[7] = p[7] * (lax.axis_index("tp") == 0).astype(p[7].dtype)
        o = MHA5_L.stateless_call(p, [], [q, kv])[0]
        return o if bug == "no-psum" else lax.psum(o, "tp")
    return body


C.smap("s.keras_mha_heads_over_tp.dp2xtp4", {"dp": 2, "tp": 4}, mha_tp, (PS5, P("dp"), P("dp")), P("dp"),
       lambda p, q, kv: MHA5.stateless_call(p, [], [q, kv])[0], (P5, Q5, KV5),
       bugs=[("no-psum", ["missing_collective"]), ("bias-every-rank", ["wrong_scale"])], note=KLIB)

# ---------------------------------------------------------------------------
# 5b. keras MultiHeadAttention (no mask), sequence over sp4, batch over dp2:
#     the key/value chunks passed around the sp ring with ppermute and
#     concatenated in arrival order (own chunk first) -- without a mask
#     attention does not depend on the order of the keys.
T5B = 16


def mha_ring(bug):
    def body(p, q, kv):
        chunks, cur = [kv], kv
        hops = 2 if bug == "missing-chunk" else 3
        for i in range(hops):
            cur = lax.ppermute(cur, "sp", [(j, (j + 1) % 4) for j in range(4)])
            chunks.append(kv if (bug == "own-chunk-twice" and i == 2) else cur)
        return MHA5B.stateless_call(p, [], [q, jnp.concatenate(chunks, axis=1)])[0]
    return body


def mha5b_model():
    keras.utils.set_random_seed(55)
    q = keras.Input((None, D5))
    kv = keras.Input((None, D5))
    return keras.Model([q, kv], keras.layers.MultiHeadAttention(num_heads=4, key_dim=K5, name="mha")(q, kv))


MHA5B = mha5b_model()
P5B = [a + R(*a.shape, scale=0.3) for a in arrays(MHA5B.trainable_variables)]
C.smap("s.keras_mha_ring_gathered_kv_arrival_order.dp2xsp4", {"dp": 2, "sp": 4}, mha_ring,
       ([P()] * len(P5B), P("dp", "sp"), P("dp", "sp")), P("dp", "sp"),
       lambda p, q, kv: MHA5B.stateless_call(p, [], [q, kv])[0], (P5B, R(4, T5B, D5), R(4, T5B, D5)),
       bugs=[("missing-chunk", ["missing_collective"]), ("own-chunk-twice", ["wrong_permutation"])], note=KLIB)

# ---------------------------------------------------------------------------
# 5c. keras-hub ReversibleEmbedding logits (reverse=True) with the vocabulary
#     over tp4 and a vocabulary-parallel cross-entropy: global max by pmax,
#     log-sum-exp by psum, the target logit picked on the rank owning it.
V5C, D5C = 64, 16


def rev_emb(v):
    keras.utils.set_random_seed(56)
    layer = keras_hub.layers.ReversibleEmbedding(v, D5C, tie_weights=True)
    layer.build((None, None))
    return layer


REV, REV_L = rev_emb(V5C), rev_emb(V5C // 4)
P5C = [np.asarray(REV.trainable_variables[0].value) * 4.0]
H5C, Y5C = R(4, 6, D5C), I(0, V5C, 4, 6)


def vocab_ce_ref(p, h, y):
    logits = REV.stateless_call(p, [], h, reverse=True)[0]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y)


def vocab_ce_tp(bug):
    def body(p, h, y):
        logits = REV_L.stateless_call(p, [], h, reverse=True)[0]
        vl = V5C // 4
        m = jnp.max(logits, axis=-1, keepdims=True)
        if bug != "local-max":
            m = lax.pmax(lax.stop_gradient(m), "tp")
        lse = jnp.log(lax.psum(jnp.sum(jnp.exp(logits - m), axis=-1), "tp")) + m[..., 0]
        loc = y - lax.axis_index("tp") * vl
        own = (loc >= 0) & (loc < vl)
        pick = jnp.take_along_axis(logits, jnp.clip(loc, 0, vl - 1)[..., None], axis=-1)[..., 0]
        if bug != "no-owner-mask":
            pick = jnp.where(own, pick, 0.0)
        return lse - lax.psum(pick, "tp")
    return body


C.smap("s.kerashub_reversible_embedding_vocab_parallel_ce.dp2xtp4", {"dp": 2, "tp": 4}, vocab_ce_tp,
       ([P("tp", None)], P("dp"), P("dp")), P("dp"), vocab_ce_ref, (P5C, H5C, Y5C),
       bugs=[("local-max", ["missing_collective"]), ("no-owner-mask", ["missing_mask"])], note=KLIB)

# ---------------------------------------------------------------------------
# GSPMD pairs.
MP = {"batch": 2, "model": 4}
DMESH = device_mesh((2, 4), ["batch", "model"])


def megatron_layout(dmesh, model="model"):
    lm = keras.distribution.LayoutMap(dmesh)
    lm["token_embedding/embeddings"] = (None, model)
    lm[".*(query|key|value).*kernel"] = (None, model, None)
    lm[".*(query|key|value).*bias"] = (model, None)
    lm[".*attention_output.*kernel"] = (model, None, None)
    lm[".*(feedforward_intermediate_dense|feedforward_gate_dense).*kernel"] = (None, model)
    lm[".*feedforward_intermediate_dense.*bias"] = (model,)
    lm[".*feedforward_output_dense.*kernel"] = (model, None)
    return lm


# 6. GPT2Backbone forward with a Megatron LayoutMap.
GB = GPT2.backbone
PS6 = layout_specs(megatron_layout(DMESH), GB.trainable_variables)
X6, _ = lm_batch(4, ragged=True)
C.gspmd("g.kerashub_gpt2_backbone_layoutmap_fwd.batch2xmodel4", MP,
        (PS6, {"token_ids": P("batch"), "padding_mask": P("batch")}), P("batch"),
        lambda tv, x: GB.stateless_call(tv, [], x)[0], (P3, X6), note=KLIB)

# 7. GPT2CausalLM training step with keras AdamW (stateless_apply).
OPT7 = KerasAdamW(GPT2, lr=2e-3, wd=0.01)
S7 = OPT7.state()
PS7 = layout_specs(megatron_layout(DMESH), GPT2.trainable_variables)
X7, Y7 = lm_batch(4)


def step7(tv, ov, x, y):
    l, g = jax.value_and_grad(lambda tv: ce(GPT2.stateless_call(tv, [], x)[0], y))(tv)
    tv, ov = OPT7.apply(ov, g, tv)
    return tv, ov, l


C.gspmd("g.kerashub_gpt2_causal_lm_keras_adamw_step.batch2xmodel4", MP,
        (PS7, OPT7.specs(PS7), {"token_ids": P("batch"), "padding_mask": P("batch")}, P("batch")),
        (PS7, OPT7.specs(PS7), P()), step7, (P3, S7, X7, Y7), note=KLIB)

# 8. BertBackbone under DataParallel, batch8.
BERT = (keras.utils.set_random_seed(8), M.BertBackbone(vocabulary_size=V, num_layers=2, num_heads=4, hidden_dim=32,
                                                          intermediate_dim=64, dropout=0.0,
                                                          max_sequence_length=16))[1]
P8 = arrays(BERT.trainable_variables)
X8, _ = lm_batch(8, ragged=True)
X8["segment_ids"] = (np.arange(SEQ)[None] >= 4).astype(np.int32).repeat(8, 0)
C.gspmd("g.kerashub_bert_backbone_dataparallel_fwd.batch8", {"batch": 8},
        ([P()] * len(P8), {k: P("batch") for k in X8}), {"pooled_output": P("batch"), "sequence_output": P("batch")},
        lambda tv, x: BERT.stateless_call(tv, [], x)[0], (P8, X8), note=KLIB)

# 9. MistralBackbone (GQA 8 query / 4 kv heads, sliding window 4) forward with a LayoutMap.
MISTRAL = (keras.utils.set_random_seed(9), M.MistralBackbone(vocabulary_size=V, num_layers=2, num_query_heads=8,
                                                                num_key_value_heads=4, hidden_dim=32,
                                                                intermediate_dim=64, sliding_window=4))[1]
L9 = megatron_layout(DMESH)
L9["token_embedding/reverse_embeddings"] = ("model", None)
PS9 = layout_specs(L9, MISTRAL.trainable_variables)
P9 = arrays(MISTRAL.trainable_variables)
X9, _ = lm_batch(4)
C.gspmd("g.kerashub_mistral_sliding_window_fwd.batch2xmodel4", MP,
        (PS9, {"token_ids": P("batch"), "padding_mask": P("batch")}), P("batch", None, "model"),
        lambda tv, x: MISTRAL.stateless_call(tv, [], x)[0], (P9, X9), note=KLIB)

# 10. Phi3CausalLM optax adamw step with a LayoutMap.
PHI3 = causal_lm(M.Phi3CausalLM, M.Phi3Backbone, 10, num_query_heads=8, num_key_value_heads=4)
L10 = megatron_layout(DMESH)
L10["token_embedding/reverse_embeddings"] = (None, "model")
PS10 = layout_specs(L10, PHI3.trainable_variables)
P10 = arrays(PHI3.trainable_variables)
OPT10 = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(3e-3, weight_decay=0.1))
S10 = np_tree(OPT10.init(P10))
X10, Y10 = lm_batch(4)


def step10(tv, st, x, y):
    l, g = jax.value_and_grad(lambda tv: ce(PHI3.stateless_call(tv, [], x)[0], y))(tv)
    u, st = OPT10.update(g, st, tv)
    return optax.apply_updates(tv, u), st, l


def list_state_specs(state, pspecs):
    """optax state specs for a list of parameters: lists as long as the
    parameters take their specs, other leaves P()."""
    n = len(pspecs)

    def walk(node):
        if isinstance(node, list) and len(node) == n:
            return list(pspecs)
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            return type(node)(*[walk(c) for c in node])
        if isinstance(node, (tuple, list)):
            return type(node)(walk(c) for c in node)
        return P()
    return walk(state)


C.gspmd("g.kerashub_phi3_causal_lm_clip_adamw_step.batch2xmodel4", MP,
        (PS10, list_state_specs(S10, PS10), {"token_ids": P("batch"), "padding_mask": P("batch")}, P("batch")),
        (PS10, list_state_specs(S10, PS10), P()), step10, (P10, S10, X10, Y10), note=KLIB)

# 11. QwenMoeBackbone forward with keras-hub's own get_layout_map.
QMOE = (keras.utils.set_random_seed(11), M.QwenMoeBackbone(
    vocabulary_size=V, num_layers=1, num_query_heads=8, num_key_value_heads=4, hidden_dim=32, intermediate_dim=64,
    moe_intermediate_dim=16, shared_expert_intermediate_dim=32, num_experts=4, top_k=2))[1]
L11 = M.QwenMoeBackbone.get_layout_map(DMESH, model_parallel_dim_name="model", data_parallel_dim_name="batch")
PS11 = layout_specs(L11, QMOE.trainable_variables)
P11 = [a + R(*a.shape, scale=0.5) if "gate_dense/kernel" in v.path and a.shape[-1] == 4 else a
       for v, a in zip(QMOE.trainable_variables, arrays(QMOE.trainable_variables))]  # a decided router
X11, _ = lm_batch(4)
C.gspmd("g.kerashub_qwen_moe_own_layout_map_fwd.batch2xmodel4", MP,
        (PS11, {"token_ids": P("batch"), "padding_mask": P("batch")}), P("batch"),
        lambda tv, x: QMOE.stateless_call(tv, [], x)[0], (P11, X11), note=KLIB)

# 12. FalconBackbone forward, model axis first in the mesh.
FALCON = (keras.utils.set_random_seed(12), M.FalconBackbone(vocabulary_size=V, num_layers=2, num_attention_heads=4,
                                                               hidden_dim=32, intermediate_dim=64))[1]
DMESH12 = device_mesh((4, 2), ["model", "batch"])
L12 = keras.distribution.LayoutMap(DMESH12)
L12[".*(query|key|value)_dense/kernel"] = (None, "model", None)
L12[".*(query|key|value)_dense/bias"] = ("model", None)
L12[".*attention/output_dense/kernel"] = ("model", None)
L12[".*dense_h_to_4h/kernel"] = (None, "model")
L12[".*dense_h_to_4h/bias"] = ("model",)
L12[".*dense_4h_to_h/kernel"] = ("model", None)
L12["token_embedding/embeddings"] = ("model", None)
PS12 = layout_specs(L12, FALCON.trainable_variables)
P12 = arrays(FALCON.trainable_variables)
X12, _ = lm_batch(4, ragged=True)
C.gspmd("g.kerashub_falcon_backbone_fwd.model4xbatch2", {"model": 4, "batch": 2},
        (PS12, {"token_ids": P("batch"), "padding_mask": P("batch")}), P("batch"),
        lambda tv, x: FALCON.stateless_call(tv, [], x)[0], (P12, X12), note=KLIB)

# 13. OPTCausalLM training step, FSDP LayoutMap over fsdp8.
OPT_LM = causal_lm(M.OPTCausalLM, M.OPTBackbone, 13, num_heads=4, dropout=0.0, max_sequence_length=16)
L13 = keras.distribution.LayoutMap(device_mesh((8,), ["fsdp"]))
L13[".*(embeddings|query/kernel|key/kernel|value/kernel|dense/kernel)"] = ("fsdp",)
PS13 = layout_specs(L13, OPT_LM.trainable_variables)
PS13 = [P(*(s + (None,) * (v.ndim - len(s)))) if len(s) else s for s, v in zip(PS13, OPT_LM.trainable_variables)]
P13 = arrays(OPT_LM.trainable_variables)
OPT13 = optax.adamw(1e-3, b1=0.8, weight_decay=0.02)
S13 = np_tree(OPT13.init(P13))
X13, Y13 = lm_batch(8)


def step13(tv, st, x, y):
    l, g = jax.value_and_grad(lambda tv: ce(OPT_LM.stateless_call(tv, [], x)[0], y))(tv)
    u, st = OPT13.update(g, st, tv)
    return optax.apply_updates(tv, u), st, l


C.gspmd("g.kerashub_opt_causal_lm_fsdp_adamw_step.fsdp8", {"fsdp": 8},
        (PS13, list_state_specs(S13, PS13), {"token_ids": P("fsdp"), "padding_mask": P("fsdp")}, P("fsdp")),
        (PS13, list_state_specs(S13, PS13), P()), step13, (P13, S13, X13, Y13), note=KLIB)


# 14. keras Conv2D + BatchNormalization classifier, keras AdamW, dp8.
def cnn():
    keras.utils.set_random_seed(14)
    x = keras.Input((8, 8, 3))
    h = keras.layers.Conv2D(8, 3, padding="same", use_bias=False, name="conv")(x)
    h = keras.layers.BatchNormalization(momentum=0.9, name="bn")(h)
    h = keras.layers.Activation("relu")(h)
    h = keras.layers.Conv2D(8, 3, strides=2, padding="valid", name="conv2")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(x, keras.layers.Dense(6, name="head")(h))


CNN = cnn()
OPT14 = KerasAdamW(CNN, lr=1e-2, wd=0.01)
P14, N14, S14 = arrays(CNN.trainable_variables), arrays(CNN.non_trainable_variables), OPT14.state()
N14 = [a + R(*a.shape, scale=0.1) ** 2 for a in N14]  # moving stats already under way
X14, Y14 = R(16, 8, 8, 3), I(0, 6, 16)


def step14(tv, ntv, ov, x, y):
    def loss(tv):
        logits, ntv2 = CNN.stateless_call(tv, ntv, x, training=True)
        return ce(logits, y), ntv2
    (l, ntv), g = jax.value_and_grad(loss, has_aux=True)(tv)
    tv, ov = OPT14.apply(ov, g, tv)
    return tv, ntv, ov, l


C.gspmd("g.keras_conv2d_batchnorm_adamw_step.dp8", {"dp": 8},
        ([P()] * len(P14), [P()] * len(N14), [P()] * len(S14), P("dp"), P("dp")),
        ([P()] * len(P14), [P()] * len(N14), [P()] * len(S14), P()), step14, (P14, N14, S14, X14, Y14), note=KLIB)

# 15-17. diffusers UNet denoising step: dp8, fsdp8, spatial x channel.
UNET_ARGS = (P4, S4, LAT4, NOISE4, TS4, CTX4)
REP4 = jax.tree.map(lambda a: P(), P4)
C.gspmd("g.diffusers_unet_ddpm_adam_step.dp8", {"dp": 8},
        (REP4, state_specs(S4, REP4), P("dp"), P("dp"), P("dp"), P("dp")),
        (REP4, state_specs(S4, REP4), P()), unet_step, UNET_ARGS, note=DLIB)


def fsdp_spec(a, n=8, ax="fsdp"):
    dims = [d for d in np.argsort(a.shape)[::-1] if a.shape[d] % n == 0 and a.shape[d] >= n]
    if not dims:
        return P()
    s = [None] * a.ndim
    s[dims[0]] = ax
    return P(*s)


FS4 = jax.tree.map(fsdp_spec, P4)
C.gspmd("g.diffusers_unet_ddpm_adam_step_fsdp.fsdp8", {"fsdp": 8},
        (FS4, state_specs(S4, FS4), P("fsdp"), P("fsdp"), P("fsdp"), P("fsdp")),
        (FS4, state_specs(S4, FS4), P()), unet_step, UNET_ARGS, note=DLIB)


def conv_out_channels(path, a):
    name = "/".join(str(getattr(k, "key", k)) for k in path)
    if name.endswith("kernel") and a.ndim == 4 and a.shape[-1] % 2 == 0:
        return P(None, None, None, "ch")
    return P()


CH4 = jax.tree_util.tree_map_with_path(conv_out_channels, P4)
C.gspmd("g.diffusers_unet_ddpm_adam_step_spatial_channel.sp4xch2", {"sp": 4, "ch": 2},
        (CH4, state_specs(S4, CH4), P(None, None, "sp"), P(None, None, "sp"), P(), P()),
        (CH4, state_specs(S4, CH4), P()), unet_step, UNET_ARGS, note=DLIB)

# 18. diffusers FlaxAutoencoderKL: encode, posterior mean, decode; loss grad.
VAE = FlaxAutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
                        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"), block_out_channels=(16, 32),
                        layers_per_block=1, latent_channels=4, norm_num_groups=8, sample_size=16)
IMG18 = R(4, 3, 16, 16)
P18 = np_tree(VAE.init(jax.random.PRNGKey(18), IMG18[:1])["params"])


def vae_loss(p, img):
    post = VAE.apply({"params": p}, img, method=VAE.encode).latent_dist
    rec = VAE.apply({"params": p}, post.mean, method=VAE.decode).sample
    kl = jnp.mean(post.kl())
    return jnp.mean(jnp.square(rec - img)) + 1e-3 * kl, rec


def vae_fwd_grad(p, img):
    (l, rec), g = jax.value_and_grad(vae_loss, has_aux=True)(p, img)
    return l, rec, g


REP18 = jax.tree.map(lambda a: P(), P18)
C.gspmd("g.diffusers_vae_kl_recon_grad.dp2xsp4", {"dp": 2, "sp": 4}, (REP18, P("dp", None, "sp")),
        (P(), P("dp", None, "sp"), REP18), vae_fwd_grad, (P18, IMG18), note=DLIB)

C.finish()
