"""samples/fresh129: a 129th batch of programs as a user writes them, on the theme of distributed training code ported to JAX from PyTorch frameworks (Megatron-LM, DeepSpeed, torchtitan, FairScale) by an engineer who keeps the PyTorch structure (nn.Linear weights stored [out, in] and applied as x @ w.T, Megatron's input masks and masked targets, DeepSpeed's flat padded parameter buffers, zhuzilin-style ring-attention merges, FairScale's chunks and skip portals), written with jax.shard_map on 8 CPU devices, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. Megatron VocabParallelEmbedding (dp2 x tp4): the table's rows over tp,
    ids replicated over tp; input_mask = ids out of [start, end), masked
    ids set to 0, local lookup, masked rows zeroed, psum over tp; the
    table gradient by jax.vjp of the local lookup, psum'd over dp. Bugs:
    the mask sign flipped when zeroing rows, vocab_start_index computed
    from the dp rank.
 2. Megatron vocab-parallel cross entropy with label smoothing (dp4 x
    tp2): local max -> pmax, logits shifted in place, the target logit
    picked on the owning shard (masked_target) -> psum, sum of exp ->
    psum, the mean log-prob over the whole vocabulary by psum; per-token
    losses and the global mean. Bugs: pmax omitted (each shard shifts by
    its own max), the target picked on every shard (no target_mask).
 3. the backward of Megatron's vocab-parallel cross entropy written by
    hand (dp2 x tp4, ignore_index -100): softmax from the pmax / psum
    statistics, grad_2d[arange, masked_target] -= 1 - target_mask, times
    grad_output = 1 / (global count of valid tokens). Bugs: the one-hot
    subtracted on every shard (at masked_target 0 where the target is not
    owned), the mean over the local valid count.
 4. a Megatron attention block with sequence parallelism in a batch-first
    port (dp2 x tp4): all_gather of the sequence shards, ColumnParallel
    q/k/v (one head per tp device), causal attention, RowParallel output
    projection reduce-scattered over the sequence, bias and residual
    after. Bugs: SEQ_DIM = 0 (Megatron's [s, b, h] first dim) used for the
    gather and the scatter of a [b, s, h] tensor (attention only within
    the local chunk, tokens of other devices as extra batch rows), the
    RowParallel bias added before the reduce-scatter.
 5. a sequence-parallel LayerNorm + Megatron MLP with its backward by
    hand (dp4 x tp2): the LN on the local sequence shard, all_gather,
    column/row-parallel MLP through jax.vjp, reduce-scatter, residual;
    the gradient of the gathered input reduce-scattered, the LN weight
    and bias and the output bias gradients psum'd over dp and tp (the
    sequence_parallel attribute). Bugs: the LN weight gradients reduced
    over dp only, the input gradient sliced instead of reduce-scattered.
 6. DeepSpeed ZeRO-2 AdamW (dp8): parameters flattened into one padded
    buffer, the local gradient reduce-scattered by psum_scatter, global
    grad-norm clipping from psum'd squared shard norms, Adam moments held
    per shard, the local parameter partition updated and all-gathered.
    Bugs: the partition offset one device off ((rank + 1) % world), the
    clipping norm from the local partition only.
 7. ZeRO-3 with hierarchical partitioning (MiCS / hpZ style, rep2 x
    shard4) and SGD with momentum and weight decay: the flat parameters
    and momentum sharded over shard and replicated over rep, all_gather
    before the forward, gradients psum_scatter'd within the shard group,
    psum'd across rep, averaged over the world. Bugs: the all-reduce over
    rep dropped, the average over the shard-group size.
 8. torchtitan loss parallel (dp2 x cp2 x tp2): a ColwiseParallel lm head
    (vocabulary over tp) with the cross entropy computed on the sharded
    logits (ignore_index -100), the loss and the gradients of the hidden
    states and of the lm-head weight by hand; token counts and weight
    gradients reduced over dp and cp. Bugs: the mean over the local valid
    count, the weight gradient reduced over dp only (cp forgotten).
 9. context parallel with zigzag (load-balanced) chunks and causal ring
    attention (dp2 x cp4, 2n = 8 chunks; device i holds chunks i and
    2n-1-i, the loader already permuted the sequence): positions per
    chunk, a k/v ring by ppermute, blocks merged as in ring-flash-attn
    (out -= sigmoid(block_lse - lse) (out - block_out), lse -=
    logsigmoid(lse - block_lse)), fully masked blocks guarded. Bugs: the
    second chunk taken as n + i instead of 2n-1-i, the sigmoid argument
    sign flipped.
10. FairScale Pipe (pp4 x dp2): the dp-local batch split into 4 chunks
    (torch.chunk, contiguous), GPipe clock ticks with the activation
    handed i -> i + 1 by ppermute, a @skippable stash on stage 0 popped on
    stage 3 carried alongside the activation, the last stage's outputs
    broadcast by a masked psum over pp. Bugs: the skip sent straight from
    stage 0 to stage 3 at the same tick (another micro-batch's skip),
    the batch split strided but reassembled contiguously.
GSPMD pairs (jax.jit with in/out shardings; correct): 11. a sequence-
parallel LN + MLP block (dp2 x tp4); 12. a vocabulary-sharded tied
embedding and cross entropy with its table gradient (dp4 x tp2); 13. an
FSDP AdamW step with optax, every parameter's first dim over dp8; 14.
causal attention on zigzag-permuted sequences with positions (dp2 x cp2 x
tp2, heads over tp).
Numerics: correct pairs agree at f32 rounding level; bug variants differ
by O(0.1 .. 1) on the seeded inputs.
Run from the repository root: bash samples/gen/run_fresh129.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh129.sh)
from fresh_lib import Corpus, seeded, state_specs, np_tree  # noqa: E402

SCRIPT = "samples/gen/fresh129.py"
C = Corpus("samples/fresh129", SCRIPT, "samples/gen/run_fresh129.sh", sys.argv[1:])
rng, R, I = seeded(129129)
psum, pmax, idx = lax.psum, lax.pmax, lax.axis_index
NEG_INF = -jnp.inf

# ---------------------------------------------------------------------------
# 1. Megatron VocabParallelEmbedding forward + table gradient.
V1, D1 = 32, 8


def vpe_ref(table, ids, g):
    emb, vjp = jax.vjp(lambda t: t[ids], table)
    (dt,) = vjp(g)
    return emb, dt


def vpe_tp(bug):
    def f(table, ids, g):
        per = table.shape[0]
        rank = idx("dp") if bug == "start-from-dp-rank" else idx("tp")
        vocab_start_index = rank * per
        vocab_end_index = vocab_start_index + per
        input_mask = (ids < vocab_start_index) | (ids >= vocab_end_index)
        masked_input = jnp.where(input_mask, 0, ids - vocab_start_index)

        def lookup(w):
            out = w[masked_input]
            if bug == "mask-sign-flipped":
                return jnp.where(~input_mask[..., None], 0.0, out)
            return jnp.where(input_mask[..., None], 0.0, out)
        part, vjp = jax.vjp(lookup, table)
        emb = psum(part, "tp")
        (dt,) = vjp(g)
        return emb, psum(dt, "dp")
    return f


C.smap("s.megatron_vocab_parallel_embedding_grad.dp2xtp4", {"dp": 2, "tp": 4}, vpe_tp,
       (P("tp", None), P("dp"), P("dp")), (P("dp"), P("tp", None)), vpe_ref,
       (R(V1, D1), I(0, V1, 4, 6), R(4, 6, D1)),
       bugs=[("mask-sign-flipped", ["wrong-mask"]), ("start-from-dp-rank", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 2. Megatron vocab-parallel cross entropy with label smoothing (forward).
N2, V2, LS2 = 16, 32, 0.1


def vce_ref(logits, target):
    logp = jax.nn.log_softmax(logits, -1)
    nll = -jnp.take_along_axis(logp, target[:, None], -1)[:, 0]
    smoothing = LS2 * V2 / (V2 - 1)
    loss = (1.0 - smoothing) * nll - smoothing * jnp.mean(logp, -1)
    return loss, jnp.mean(loss)


def vce_tp(bug):
    def f(logits, target):
        n, per = logits.shape
        logits_max = jnp.max(logits, -1)
        if bug != "no-pmax":
            logits_max = pmax(logits_max, "tp")
        logits = logits - logits_max[:, None]
        start = idx("tp") * per
        target_mask = (target < start) | (target >= start + per)
        masked_target = jnp.where(target_mask, 0, target - start)
        predicted = logits[jnp.arange(n), masked_target]
        if bug != "target-every-shard":
            predicted = jnp.where(target_mask, 0.0, predicted)
        predicted = psum(predicted, "tp")
        exp_logits = jnp.exp(logits)
        sum_exp = psum(jnp.sum(exp_logits, -1), "tp")
        loss = jnp.log(sum_exp) - predicted
        log_probs = logits - jnp.log(sum_exp)[:, None]
        mean_log_probs = psum(jnp.sum(log_probs, -1), "tp") / V2
        smoothing = LS2 * V2 / (V2 - 1)
        loss = (1.0 - smoothing) * loss - smoothing * mean_log_probs
        return loss, psum(jnp.sum(loss), "dp") / N2
    return f


C.smap("s.megatron_vocab_parallel_ce_label_smoothing.dp4xtp2", {"dp": 4, "tp": 2}, vce_tp,
       (P("dp", "tp"), P("dp")), (P("dp"), P()), vce_ref, (R(N2, V2, scale=3.0), I(0, V2, N2)),
       bugs=[("no-pmax", ["missing-collective"]), ("target-every-shard", ["wrong-mask"])])

# ---------------------------------------------------------------------------
# 3. the backward of the vocab-parallel cross entropy, by hand.
N3, V3 = 16, 32
T3 = I(0, V3, N3)
T3[[2, 9, 10]] = -100


def vce_grad_ref(logits, target):
    def loss(l):
        valid = target != -100
        t = jnp.where(valid, target, 0)
        nll = -jnp.take_along_axis(jax.nn.log_softmax(l, -1), t[:, None], -1)[:, 0]
        return jnp.sum(jnp.where(valid, nll, 0.0)) / jnp.sum(valid)
    return jax.grad(loss)(logits)


def vce_grad_tp(bug):
    def f(logits, target):
        n, per = logits.shape
        valid = target != -100
        m = pmax(jnp.max(logits, -1), "tp")
        exp_logits = jnp.exp(logits - m[:, None])
        sum_exp = psum(jnp.sum(exp_logits, -1), "tp")
        softmax = exp_logits / sum_exp[:, None]
        start = idx("tp") * per
        target_mask = (target < start) | (target >= start + per)
        masked_target = jnp.where(target_mask, 0, target - start)
        softmax_update = 1.0 if bug == "onehot-every-shard" else 1.0 - target_mask.astype(jnp.float32)
        grad_2d = softmax.at[jnp.arange(n), masked_target].add(-softmax_update)
        cnt = jnp.sum(valid.astype(jnp.float32))
        if bug != "local-valid-count":
            cnt = psum(cnt, "dp")
        grad_output = jnp.where(valid, 1.0 / cnt, 0.0)
        return grad_2d * grad_output[:, None]
    return f


C.smap("s.megatron_vocab_parallel_ce_backward.dp2xtp4", {"dp": 2, "tp": 4}, vce_grad_tp,
       (P("dp", "tp"), P("dp")), P("dp", "tp"), vce_grad_ref, (R(N3, V3, scale=2.0), T3),
       bugs=[("onehot-every-shard", ["wrong-mask"]), ("local-valid-count", ["wrong-denominator"])])

# ---------------------------------------------------------------------------
# 4. Megatron attention block, sequence parallel, batch-first port.
B4, S4, H4, NH4 = 4, 16, 16, 4
HD4 = H4 // NH4


def causal_mha(x, wq, wk, wv, nh):
    b, s, _ = x.shape
    q = (x @ wq.T).reshape(b, s, nh, HD4)
    k = (x @ wk.T).reshape(b, s, nh, HD4)
    v = (x @ wv.T).reshape(b, s, nh, HD4)
    sc = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(HD4)
    sc = jnp.where(jnp.tril(jnp.ones((s, s), bool)), sc, NEG_INF)
    ctx = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(sc, -1), v)
    return ctx.reshape(b, s, nh * HD4)


def sp_attn_ref(x, wq, wk, wv, wo, bo):
    return x + causal_mha(x, wq, wk, wv, NH4) @ wo.T + bo


def sp_attn_tp(bug):
    SEQ_DIM = 0 if bug == "seq-dim-first" else 1

    def f(x, wq, wk, wv, wo, bo):
        total = lax.all_gather(x, "tp", axis=SEQ_DIM, tiled=True)
        ctx = causal_mha(total, wq, wk, wv, wq.shape[0] // HD4)
        out_parallel = ctx @ wo.T
        if bug == "bias-before-reduce-scatter":
            out_parallel = out_parallel + bo
        out = lax.psum_scatter(out_parallel, "tp", scatter_dimension=SEQ_DIM, tiled=True)
        if bug != "bias-before-reduce-scatter":
            out = out + bo
        return x + out
    return f


C.smap("s.megatron_sp_attention_block_batch_first.dp2xtp4", {"dp": 2, "tp": 4}, sp_attn_tp,
       (P("dp", "tp"), P("tp", None), P("tp", None), P("tp", None), P(None, "tp"), P()), P("dp", "tp"),
       sp_attn_ref, (R(B4, S4, H4), R(H4, H4, scale=0.4), R(H4, H4, scale=0.4), R(H4, H4, scale=0.4),
                     R(H4, H4, scale=0.3), R(H4, scale=0.5)),
       bugs=[("seq-dim-first", ["wrong-axis"]), ("bias-before-reduce-scatter", ["duplicated-term"])])

# ---------------------------------------------------------------------------
# 5. sequence-parallel LayerNorm + Megatron MLP, backward by hand.
B5, S5, H5, F5 = 4, 8, 8, 16
NEL5 = B5 * S5 * H5


def layer_norm(x, g, b):
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + 1e-5) * g + b


def mlp5(w1, b1, w2, y):
    return jax.nn.gelu(y @ w1.T + b1) @ w2.T


def sp_ln_mlp_ref(p, x, y):
    def loss(p):
        out = x + mlp5(p["fc1_w"], p["fc1_b"], p["fc2_w"], layer_norm(x, p["ln_w"], p["ln_b"])) + p["fc2_b"]
        return jnp.sum(jnp.square(out - y)) / NEL5
    return jax.value_and_grad(loss)(p)


def sp_ln_mlp_tp(bug):
    def f(p, x, y):
        ln_out, ln_vjp = jax.vjp(lambda g, b: layer_norm(x, g, b), p["ln_w"], p["ln_b"])
        total = lax.all_gather(ln_out, "tp", axis=1, tiled=True)
        part, mlp_vjp = jax.vjp(mlp5, p["fc1_w"], p["fc1_b"], p["fc2_w"], total)
        out = x + lax.psum_scatter(part, "tp", scatter_dimension=1, tiled=True) + p["fc2_b"]
        r = out - y
        loss = psum(jnp.sum(jnp.square(r)), ("dp", "tp")) / NEL5
        dout = 2.0 * r / NEL5
        d_fc2_b = psum(jnp.sum(dout, (0, 1)), ("dp", "tp"))
        dpart = lax.all_gather(dout, "tp", axis=1, tiled=True)
        dw1, db1, dw2, dtotal = mlp_vjp(dpart)
        dw1, db1, dw2 = (psum(t, "dp") for t in (dw1, db1, dw2))
        if bug == "input-grad-sliced":
            s = x.shape[1]
            dln = lax.dynamic_slice_in_dim(dtotal, idx("tp") * s, s, axis=1)
        else:
            dln = lax.psum_scatter(dtotal, "tp", scatter_dimension=1, tiled=True)
        dg, dbeta = ln_vjp(dln)
        axes = "dp" if bug == "ln-grad-not-reduced" else ("dp", "tp")
        dg, dbeta = psum(dg, axes), psum(dbeta, axes)
        return loss, {"ln_w": dg, "ln_b": dbeta, "fc1_w": dw1, "fc1_b": db1, "fc2_w": dw2, "fc2_b": d_fc2_b}
    return f


SPEC5 = {"ln_w": P(), "ln_b": P(), "fc1_w": P("tp", None), "fc1_b": P("tp"), "fc2_w": P(None, "tp"), "fc2_b": P()}
P5 = {"ln_w": 1.0 + R(H5, scale=0.2), "ln_b": R(H5, scale=0.2), "fc1_w": R(F5, H5, scale=0.4),
      "fc1_b": R(F5, scale=0.1), "fc2_w": R(H5, F5, scale=0.3), "fc2_b": R(H5, scale=0.1)}
C.smap("s.sp_layernorm_megatron_mlp_backward.dp4xtp2", {"dp": 4, "tp": 2}, sp_ln_mlp_tp,
       (SPEC5, P("dp", "tp"), P("dp", "tp")), (P(), SPEC5), sp_ln_mlp_ref,
       (P5, R(B5, S5, H5), R(B5, S5, H5)),
       bugs=[("ln-grad-not-reduced", ["missing-collective"]), ("input-grad-sliced", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 6. DeepSpeed ZeRO-2 AdamW on a flat padded buffer (dp8).
W6 = 8
SHAPES6 = {"w1": (6, 10), "b1": (10,), "w2": (10, 2)}
NP6 = sum(int(np.prod(s)) for s in SHAPES6.values())      # 90
PAD6 = -NP6 % W6                                            # 6 -> 96
SH6 = (NP6 + PAD6) // W6                                    # 12
LR6, BETA1, BETA2, EPS6, WD6, CLIP6, STEP6 = 1e-2, 0.9, 0.999, 1e-8, 0.01, 0.5, 3


def flatten6(p):
    return jnp.concatenate([p[k].ravel() for k in SHAPES6] + [jnp.zeros(PAD6)])


def unflatten6(flat):
    out, o = {}, 0
    for k, s in SHAPES6.items():
        n = int(np.prod(s))
        out[k] = flat[o:o + n].reshape(s)
        o += n
    return out


def loss6(p, x, y, n_global):
    pred = jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"]
    return jnp.sum(jnp.square(pred - y)) / n_global


def adamw(p, g, m, v, step):
    m = BETA1 * m + (1 - BETA1) * g
    v = BETA2 * v + (1 - BETA2) * g * g
    mh = m / (1 - BETA1 ** step)
    vh = v / (1 - BETA2 ** step)
    return p - LR6 * (mh / (jnp.sqrt(vh) + EPS6) + WD6 * p), m, v


def zero2_ref(p, m, v, x, y):
    g = flatten6(jax.grad(loss6)(p, x, y, x.shape[0]))
    norm = jnp.sqrt(jnp.sum(g * g))
    g = g * jnp.minimum(1.0, CLIP6 / (norm + 1e-6))
    newflat, m, v = adamw(flatten6(p), g, m, v, STEP6)
    return unflatten6(newflat), m, v


def zero2_dp(bug):
    def f(p, m, v, x, y):
        world = W6
        rank = idx("dp")
        g_full = flatten6(jax.grad(loss6)(p, x, y, x.shape[0] * world))
        g = lax.psum_scatter(g_full, "dp", scatter_dimension=0, tiled=True)
        sq = jnp.sum(g * g)
        norm = jnp.sqrt(sq if bug == "local-clip-norm" else psum(sq, "dp"))
        g = g * jnp.minimum(1.0, CLIP6 / (norm + 1e-6))
        part = (rank + 1) % world if bug == "partition-offset-plus-one" else rank
        p_shard = lax.dynamic_slice_in_dim(flatten6(p), part * SH6, SH6)
        p_shard, m, v = adamw(p_shard, g, m, v, STEP6)
        return unflatten6(lax.all_gather(p_shard, "dp", tiled=True)), m, v
    return f


P6 = {"w1": R(6, 10, scale=0.5), "b1": R(10, scale=0.1), "w2": R(10, 2, scale=0.5)}
M6 = R(NP6 + PAD6, scale=0.05)
V6 = np.abs(R(NP6 + PAD6, scale=0.05)) ** 2
M6[NP6:] = 0.0
V6[NP6:] = 0.0
C.smap("s.deepspeed_zero2_adamw_flat_buffer_clip.dp8", {"dp": 8}, zero2_dp,
       (P(), P("dp"), P("dp"), P("dp"), P("dp")), (P(), P("dp"), P("dp")), zero2_ref,
       (P6, M6, V6, R(16, 6), R(16, 2, scale=2.0)),
       bugs=[("partition-offset-plus-one", ["wrong-offset"]), ("local-clip-norm", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 7. ZeRO-3 hierarchical (hpZ / MiCS), SGD with momentum.
LR7, MOM7, WD7 = 0.1, 0.9, 1e-3


def zero3_ref(flat, mom, x, y):
    g = flatten6(jax.grad(loss6)(unflatten6(flat), x, y, x.shape[0]))
    mom = MOM7 * mom + g + WD7 * flat
    return flat - LR7 * mom, mom


def zero3_hier(bug):
    def f(flat_shard, mom, x, y):
        world = 8
        full = lax.all_gather(flat_shard, "shard", tiled=True)
        # each rank's loss is the mean over its own micro-batch
        g = flatten6(jax.grad(loss6)(unflatten6(full), x, y, x.shape[0]))
        g = lax.psum_scatter(g, "shard", scatter_dimension=0, tiled=True)
        if bug != "no-rep-allreduce":
            g = psum(g, "rep")
        g = g / (4 if bug == "avg-over-shard-group" else world)
        mom = MOM7 * mom + g + WD7 * flat_shard
        return flat_shard - LR7 * mom, mom
    return f


FLAT7 = np.asarray(flatten6({k: R(*s, scale=0.5) for k, s in SHAPES6.items()}))
C.smap("s.zero3_hierarchical_hpz_sgd_momentum.rep2xshard4", {"rep": 2, "shard": 4}, zero3_hier,
       (P("shard"), P("shard"), P(("rep", "shard")), P(("rep", "shard"))), (P("shard"), P("shard")), zero3_ref,
       (FLAT7, R(NP6 + PAD6, scale=0.1), R(16, 6), R(16, 2, scale=2.0)),
       bugs=[("no-rep-allreduce", ["missing-collective"]), ("avg-over-shard-group", ["wrong-denominator"])])

# ---------------------------------------------------------------------------
# 8. torchtitan loss parallel: ColwiseParallel lm head, CE on sharded logits.
B8, T8, D8, V8 = 2, 8, 8, 32
LAB8 = I(0, V8, B8, T8)
LAB8[0, 5:] = -100
LAB8[1, [0, 3]] = -100


def lp_ref(w, h, labels):
    def loss(w, h):
        logits = h @ w.T
        valid = labels != -100
        t = jnp.where(valid, labels, 0)
        nll = -jnp.take_along_axis(jax.nn.log_softmax(logits, -1), t[..., None], -1)[..., 0]
        return jnp.sum(jnp.where(valid, nll, 0.0)) / jnp.sum(valid)
    l, (dw, dh) = jax.value_and_grad(loss, (0, 1))(w, h)
    return l, dw, dh


def lp_tp(bug):
    def f(w, h, labels):
        logits = h @ w.T
        per = w.shape[0]
        valid = labels != -100
        m = pmax(jnp.max(logits, -1, keepdims=True), "tp")
        e = jnp.exp(logits - m)
        se = psum(jnp.sum(e, -1, keepdims=True), "tp")
        start = idx("tp") * per
        tmask = (labels >= start) & (labels < start + per) & valid
        local_t = jnp.where(tmask, labels - start, 0)
        picked = jnp.take_along_axis(logits, local_t[..., None], -1)[..., 0]
        picked = psum(jnp.where(tmask, picked, 0.0), "tp")
        tok = jnp.log(se[..., 0]) + m[..., 0] - picked
        cnt = jnp.sum(valid.astype(jnp.float32))
        if bug != "local-valid-count":
            cnt = psum(cnt, ("dp", "cp"))
        loss = psum(jnp.sum(jnp.where(valid, tok, 0.0)), ("dp", "cp")) / cnt
        onehot = jax.nn.one_hot(local_t, per) * tmask[..., None]
        dlogits = (e / se - onehot) * (valid / cnt)[..., None]
        dw = jnp.einsum("btv,btd->vd", dlogits, h)
        dw = psum(dw, "dp" if bug == "wgrad-no-cp-reduce" else ("dp", "cp"))
        dh = psum(dlogits @ w, "tp")
        return loss, dw, dh
    return f


C.smap("s.torchtitan_loss_parallel_lm_head.dp2xcp2xtp2", {"dp": 2, "cp": 2, "tp": 2}, lp_tp,
       (P("tp", None), P("dp", "cp"), P("dp", "cp")), (P(), P("tp", None), P("dp", "cp")), lp_ref,
       (R(V8, D8, scale=0.5), R(B8, T8, D8), LAB8),
       bugs=[("local-valid-count", ["wrong-denominator"]), ("wgrad-no-cp-reduce", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 9. zigzag context parallel, causal ring attention with lse merges.
B9, T9, D9, N9 = 2, 32, 8, 4
C9 = T9 // (2 * N9)
ZZ9 = np.concatenate([np.concatenate([np.arange(i * C9, (i + 1) * C9),
                                      np.arange((2 * N9 - 1 - i) * C9, (2 * N9 - i) * C9)]) for i in range(N9)])


def zigzag_ref(q, k, v):
    s = jnp.einsum("bqd,bkd->bqk", q, k) / np.sqrt(D9)
    s = jnp.where(ZZ9[:, None] >= ZZ9[None, :], s, NEG_INF)
    return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, -1), v)


def zigzag_cp(bug):
    def positions(r):
        second = N9 + r if bug == "second-chunk-n-plus-i" else 2 * N9 - 1 - r
        return jnp.concatenate([r * C9 + jnp.arange(C9), second * C9 + jnp.arange(C9)])

    def block(q, k, v, qpos, kpos):
        s = jnp.einsum("bqd,bkd->bqk", q, k) / np.sqrt(D9)
        s = jnp.where(qpos[:, None] >= kpos[None, :], s, NEG_INF)
        m = jnp.max(s, -1, keepdims=True)
        m = jnp.where(jnp.isfinite(m), m, 0.0)
        p = jnp.exp(s - m)
        l = jnp.sum(p, -1, keepdims=True)
        out = jnp.einsum("bqk,bkd->bqd", p, v) / jnp.maximum(l, 1e-30)
        lse = jnp.where(l > 0, jnp.log(jnp.maximum(l, 1e-30)) + m, NEG_INF)
        return out, lse

    def f(q, k, v):
        rank = idx("cp")
        qpos = positions(rank)
        out, lse = block(q, k, v, qpos, qpos)
        perm = [(j, (j + 1) % N9) for j in range(N9)]
        for step in range(1, N9):
            k, v = lax.ppermute(k, "cp", perm), lax.ppermute(v, "cp", perm)
            src = (rank - step) % N9
            bout, blse = block(q, k, v, qpos, positions(src))
            if bug == "sigmoid-sign":
                out = out - jax.nn.sigmoid(lse - blse) * (out - bout)
            else:
                out = out - jax.nn.sigmoid(blse - lse) * (out - bout)
            lse = lse - jax.nn.log_sigmoid(lse - blse)
        return out
    return f


C.smap("s.zigzag_context_parallel_ring_flash_merge.dp2xcp4", {"dp": 2, "cp": 4}, zigzag_cp,
       (P("dp", "cp"),) * 3, P("dp", "cp"), zigzag_ref, (R(B9, T9, D9), R(B9, T9, D9), R(B9, T9, D9)),
       bugs=[("second-chunk-n-plus-i", ["wrong-offset"]), ("sigmoid-sign", ["wrong-rescale"])])

# ---------------------------------------------------------------------------
# 10. FairScale Pipe: chunks, GPipe clock, skip portal from stage 0 to 3.
S10, M10, B10, H10 = 4, 4, 16, 8


def pipe_ref(w, b, x):
    h = x
    for s in range(S10):
        h = jnp.tanh(h @ w[s].T + b[s])
    return h + x


def pipe_pp(bug):
    def f(w, b, x):
        stage = idx("pp")
        n, hdim = x.shape
        mb = n // M10
        if bug == "strided-chunks":
            chunks = x.reshape(mb, M10, hdim).transpose(1, 0, 2)
        else:
            chunks = x.reshape(M10, mb, hdim)   # torch.chunk(x, chunks, dim=0)
        w, b = w[0], b[0]
        fwd = [(j, j + 1) for j in range(S10 - 1)]
        act = jnp.zeros((mb, hdim))
        skip = jnp.zeros((mb, hdim))
        outs = jnp.zeros((M10, mb, hdim))
        for t in range(M10 + S10 - 1):
            i = min(t, M10 - 1)
            inp = jnp.where(stage == 0, chunks[i], act)
            skip_in = jnp.where(stage == 0, chunks[i], skip)   # stash('skip', input) on stage 0
            h = jnp.tanh(inp @ w.T + b)
            if bug == "skip-direct-portal":
                popped = lax.ppermute(jnp.where(stage == 0, chunks[i], 0.0), "pp", [(0, S10 - 1)])
            else:
                popped = skip_in
            j = t - (S10 - 1)
            if 0 <= j < M10:
                outs = outs.at[j].set(jnp.where(stage == S10 - 1, h + popped, outs[j]))
            act, skip = lax.ppermute(h, "pp", fwd), lax.ppermute(skip_in, "pp", fwd)
        outs = psum(jnp.where(stage == S10 - 1, outs, 0.0), "pp")
        return outs.reshape(n, hdim)
    return f


C.smap("s.fairscale_pipe_chunks_skip_portal.pp4xdp2", {"pp": 4, "dp": 2}, pipe_pp,
       (P("pp"), P("pp"), P("dp")), P("dp"), pipe_ref,
       (R(S10, H10, H10, scale=0.5), R(S10, H10, scale=0.1), R(B10, H10)),
       bugs=[("skip-direct-portal", ["wrong-permutation"]), ("strided-chunks", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 11. sequence-parallel LN + MLP block.


def gs_ln_mlp(x, g, b, w1, w2):
    return x + jax.nn.gelu(layer_norm(x, g, b) @ w1.T) @ w2.T


C.gspmd("g.sequence_parallel_ln_mlp_block.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp", "tp"), P(), P(), P("tp", None), P(None, "tp")), P("dp", "tp"), gs_ln_mlp,
        (R(4, 16, 8), 1.0 + R(8, scale=0.2), R(8, scale=0.2), R(16, 8, scale=0.4), R(8, 16, scale=0.3)))


# 12. vocabulary-sharded tied embedding + CE and the table gradient.
def gs_tied(table, ids, tgt):
    def loss(t):
        h = jnp.tanh(jnp.take(t, ids, axis=0))
        logits = h @ t.T
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits, -1), tgt[..., None], -1))
    return jax.value_and_grad(loss)(table)


C.gspmd("g.vocab_sharded_tied_embedding_ce_grad.dp4xtp2", {"dp": 4, "tp": 2},
        (P("tp", None), P("dp"), P("dp")), (P(), P("tp", None)), gs_tied,
        (R(32, 8), I(0, 32, 8, 6), I(0, 32, 8, 6)))

# 13. FSDP AdamW with optax, every first dim over dp8.
OPT13 = optax.adamw(1e-2, weight_decay=0.01)
P13 = {"w1": R(16, 8, scale=0.4), "b1": R(8, scale=0.1), "w2": R(8, 8, scale=0.4)}
SPEC13 = {"w1": P("dp", None), "b1": P("dp"), "w2": P("dp", None)}
S13 = np_tree(OPT13.init(P13))
S13 = jax.tree.map(lambda a: a + 0.01 if a.dtype == np.float32 and a.ndim else a, S13)


def fsdp_step(p, s, x, y):
    def loss(p):
        return jnp.mean(jnp.square(jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] - y))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT13.update(g, s, p)
    return optax.apply_updates(p, u), s, l


SS13 = state_specs(S13, SPEC13)
C.gspmd("g.fsdp_adamw_optax_first_dim.dp8", {"dp": 8}, (SPEC13, SS13, P("dp"), P("dp")), (SPEC13, SS13, P()),
        fsdp_step, (P13, S13, R(16, 16), R(16, 8)))


# 14. causal attention on zigzag-permuted sequences, heads over tp.
def gs_zigzag(q, k, v):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(D9)
    s = jnp.where(ZZ9[:, None] >= ZZ9[None, :], s, NEG_INF)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, -1), v)


C.gspmd("g.zigzag_causal_attention_positions.dp2xcp2xtp2", {"dp": 2, "cp": 2, "tp": 2},
        (P("dp", "tp", "cp"),) * 3, P("dp", "tp", "cp"), gs_zigzag,
        (R(2, 2, T9, D9), R(2, 2, T9, D9), R(2, 2, T9, D9)))

C.finish()
