"""samples/fresh10: a tenth batch of programs as a user writes them, on the
theme of randomness, precision and quantisation in training, none of them an
idiom of samples/fresh .. fresh9, probe, train or wild.
shard_map families: dropout whose key is folded with the dp index, against
a baseline that draws the same bits (a vmap over the batch blocks, block i
with fold_in(key, i)), in an SGD step; masked-LM random masking with one
key per example (split over the global batch, each device slicing its own
keys); stochastic depth drawn over the global batch and sliced by
axis_index; fp8 (float8_e4m3fn) scaled matmuls with delayed scaling (amax
histories updated from pmax'd amaxes of sharded operands); an AQT-style
int8 x int8 -> int32 row-parallel matmul with per-token and per-channel
scales over the sharded contraction dim (pmax) and an int32 psum; 4-bit
packing of a row-sharded weight into uint8 nibbles by bit ops, unpacking
with sign extension; QLoRA-style blockwise dequantisation of a frozen
column-sharded base weight plus a LoRA adapter's gradients; Adam with
8-bit blockwise (row-wise absmax) quantised moments under ZeRO (all_gather,
psum_scatter); stochastic rounding of an f32 update into bf16 weights with
bits shared by the replicas, and the rounding residual; a label-smoothed
cross-entropy over a vocabulary-sharded bf16 head with f32 reductions
(log-sum-exp with pmax); weighted batch statistics by a parallel (Chan)
merge of per-shard (count, mean, M2); bf16 weights updated with Kahan
compensation and an f32 EMA; hybrid fp8 training whose backward pass
quantises a cotangent to float8_e5m2 with a current scale (custom_vjp, the
amax pmax'd over the two axes the cotangent is sharded on).
Under GSPMD (jax_threefry_partitionable, on by default in jax 0.12, so that
the partitioned draw equals the single-device one): dropout in an MLP step,
BERT-style 80/10/10 masking with an AdamW step, stochastic depth, bf16
compute with bf16 Adam moments (optax mu_dtype) and f32 accumulation, fp8
delayed scaling with gradients, int4-packed weights, a QLoRA AdamW step,
stochastic rounding with random bits over a sharded weight, 8-bit
blockwise Adam state on an FSDP mesh, Gumbel-max sampling
(jax.random.categorical) over a sharded vocabulary, mixup with a random
permutation and Beta weights, weighted batch statistics, the
label-smoothed bf16 cross-entropy and the e5m2 cotangent quantiser.
Two minimal pairs isolate what two of the programs hinge on: a weighted
mean merged from per-device means (shard_map), and a Beta draw from a key
made by fold_in (GSPMD).
Randomness in shard_map: a per-device program that folds axis_index into
its key draws other bits than jax.random over the global shape, so its
baseline is written the way the bits are defined (a vmap over the batch
blocks, block i keyed by fold_in(key, i)), or each device draws over the
global batch and slices its rows; no pair whose randomness cannot equal
its baseline's is exported as correct.
Left out: fp16 dynamic loss scaling over dp (with the unsynchronised scale
as its bug), an idiom of fresh3 and fresh7. Nothing was dropped for failing
to export or lower on CPU: float8_e4m3fn / float8_e5m2 dots, int8 x int8 ->
int32 dots and an int32 psum all run on XLA:CPU.
Each shard_map family has the bug variants a careless parallelisation makes
(no fold_in of the axis index, per-device keys where the replicas must
share them, a scale or amax from the local shard only, a reduction in bf16
where the baseline has f32, a missing psum / pmean, a merge that ignores the
counts). Exported with scalify_jax.export_pair; every pair is also run by
JAX on seeded inputs and its manifest entry records the largest difference
from the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh10.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh10.sh)
from fresh_lib import Corpus, seeded, mse, np_tree, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh10.py"
C = Corpus("samples/fresh10", SCRIPT, "samples/gen/run_fresh10.sh", sys.argv[1:])
rng, R, I = seeded(1010)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
assert jax.config.jax_threefry_partitionable
KEY = np.asarray(jax.random.PRNGKey(10))  # raw uint32[2] keys as inputs
KEY2 = np.asarray(jax.random.PRNGKey(2026))
BF = jnp.bfloat16
F8 = jnp.float8_e4m3fn
F8_MAX = 448.0


# ---------------------------------------------------------------------------
# 1. dropout with a key per batch block: the baseline defines the dropout
#    mask block by block (vmap over DR_N blocks of the batch, block i drawn
#    with fold_in(key, i)), which is exactly what each device of dp draws
#    with fold_in(key, axis_index('dp')); an SGD step of an MLP with the
#    dropout on its hidden units, gradients pmean'd.
DR_N, DR_B, DR_D, DR_H, DR_P, DR_LR = 4, 32, 8, 32, 0.25, 0.1


def drop_block(k, h):
    keep = jax.random.bernoulli(k, 1.0 - DR_P, h.shape)
    return jnp.where(keep, h / (1.0 - DR_P), 0.0)


def dr_loss(w1, w2, x, y, key, blocks):
    h = jnp.tanh(x @ w1)
    if blocks is None:  # one device's block, its key given
        h = drop_block(key, h)
    else:
        hb = h.reshape(blocks, -1, DR_H)
        h = jax.vmap(lambda i, hh: drop_block(jax.random.fold_in(key, i), hh))(jnp.arange(blocks), hb)
        h = h.reshape(-1, DR_H)
    return mse(h @ w2, y)


def dr_step(w1, w2, x, y, key):
    lv, (g1, g2) = jax.value_and_grad(dr_loss, (0, 1))(w1, w2, x, y, key, DR_N)
    return w1 - DR_LR * g1, w2 - DR_LR * g2, lv


def dropout_foldin(bug):
    def f(w1, w2, x, y, key):
        i = idx("dp")
        if bug == "fold-in-offset":
            i = i + 1
        k = key if bug == "no-fold-in" else jax.random.fold_in(key, i)
        lv, (g1, g2) = jax.value_and_grad(dr_loss, (0, 1))(w1, w2, x, y, k, None)
        if bug != "grad-no-pmean":
            g1, g2 = pmean(g1, "dp"), pmean(g2, "dp")
        return w1 - DR_LR * g1, w2 - DR_LR * g2, pmean(lv, "dp")
    return f


C.smap("s.dropout_foldin_block_keys_sgd.dp4", {"dp": DR_N}, dropout_foldin, (P(), P(), P("dp"), P("dp"), P()),
       (P(), P(), P()), dr_step,
       (R(DR_D, DR_H, scale=0.4), R(DR_H, DR_D, scale=0.3), R(DR_B, DR_D), R(DR_B, DR_D, scale=0.5), KEY),
       bugs=[("no-fold-in", ["wrong-random-key"]), ("fold-in-offset", ["wrong-random-key"]),
             ("grad-no-pmean", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 2. masked-LM random masking with a key per example: keys = split(key, B)
#    over the global batch, example b masks each position with probability
#    MM_P (vmap of bernoulli over its key); masked tokens become MM_MASK; the
#    loss is the cross-entropy at the masked positions over their count.
#    Each device splits the same B keys and takes its rows by axis_index;
#    the numerator's gradient and the count are psum'd.
MM_B, MM_T, MM_V, MM_D, MM_P, MM_MASK = 16, 16, 32, 16, 0.3, 0


def mm_mask(keys):
    return jax.vmap(lambda k: jax.random.bernoulli(k, MM_P, (MM_T,)))(keys)


def mm_num(emb, wo, tokens, mask):
    inp = jnp.where(mask, MM_MASK, tokens)
    h = jnp.tanh(emb[inp])
    logp = jax.nn.log_softmax(h @ wo, -1)
    nll = -jnp.take_along_axis(logp, tokens[..., None], -1)[..., 0]
    return jnp.sum(nll * mask)


def mlm_step(emb, wo, tokens, key):
    mask = mm_mask(jax.random.split(key, MM_B))
    cnt = jnp.maximum(jnp.sum(mask), 1)
    lv, (ge, gw) = jax.value_and_grad(lambda e, w: mm_num(e, w, tokens, mask) / cnt, (0, 1))(emb, wo)
    return lv, ge, gw, cnt


def mlm_keys(bug):
    def f(emb, wo, tokens, key):
        bl = tokens.shape[0]
        if bug == "split-local-batch":
            keys = jax.random.split(key, bl)
        else:
            keys = lax.dynamic_slice_in_dim(jax.random.split(key, MM_B), idx("dp") * bl, bl)
        mask = mm_mask(keys)
        cnt = jnp.sum(mask) if bug == "count-not-psummed" else psum(jnp.sum(mask), "dp")
        cnt = jnp.maximum(cnt, 1)
        lv, (ge, gw) = jax.value_and_grad(lambda e, w: mm_num(e, w, tokens, mask) / cnt, (0, 1))(emb, wo)
        return psum(lv, "dp"), psum(ge, "dp"), psum(gw, "dp"), cnt
    return f


C.smap("s.mlm_mask_per_example_keys.dp4", {"dp": 4}, mlm_keys, (P(), P(), P("dp"), P()), (P(), P(), P(), P()),
       mlm_step, (R(MM_V, MM_D, scale=0.5), R(MM_D, MM_V, scale=0.3), I(1, MM_V, MM_B, MM_T), KEY),
       bugs=[("split-local-batch", ["wrong-random-key"]), ("count-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 3. stochastic depth over SD_L residual blocks: example b skips block l when
#    a Bernoulli draw (key fold_in(key, l), over the global batch) says so,
#    the kept branches scaled by 1 / keep. Each device draws the global
#    batch's mask (B scalars) and slices its own rows.
SD_L, SD_B, SD_D, SD_KEEP = 3, 32, 16, 0.6


def sd_masks(key, b):
    return [jax.random.bernoulli(jax.random.fold_in(key, l), SD_KEEP, (b,)) for l in range(SD_L)]


def sd_apply(ws, x, masks):
    for l in range(SD_L):
        x = x + jnp.where(masks[l][:, None], jnp.tanh(x @ ws[l]) / SD_KEEP, 0.0)
    return x


def sd_net(ws, x, key):
    return sd_apply(ws, x, sd_masks(key, SD_B))


def sd_local(bug):
    def f(ws, x, key):
        bl = x.shape[0]
        if bug == "local-draw":
            masks = sd_masks(key, bl)
        else:
            off = idx("dp") if bug == "slice-offset-unscaled" else idx("dp") * bl
            masks = [lax.dynamic_slice_in_dim(m, off, bl) for m in sd_masks(key, SD_B)]
        return sd_apply(ws, x, masks)
    return f


C.smap("s.stochastic_depth_global_draw.dp4", {"dp": 4}, sd_local, (P(), P("dp"), P()), P("dp"), sd_net,
       (R(SD_L, SD_D, SD_D, scale=0.4), R(SD_B, SD_D), KEY),
       bugs=[("local-draw", ["wrong-random-key"]), ("slice-offset-unscaled", ["wrong-shard-dim"])])

# ---------------------------------------------------------------------------
# 4. fp8 delayed scaling: y = x @ w in float8_e4m3fn, each operand scaled by
#    F8_MAX over the largest amax of its history (delayed scaling), the
#    product accumulated in f32 and unscaled; the histories roll and take
#    the current amaxes. x's batch over dp (amax pmax'd over dp), w's
#    columns over tp (amax pmax'd over tp).
F8_B, F8_K, F8_N, F8_H = 16, 32, 32, 8


def q8(a, s):
    return jnp.clip(a * s, -F8_MAX, F8_MAX).astype(F8)


def fp8_mm(x, w, sx, sw):
    return lax.dot(q8(x, sx), q8(w, sw), preferred_element_type=jnp.float32) / (sx * sw)


def push(hist, amax):
    return jnp.roll(hist, 1).at[0].set(amax)


def fp8_delayed(x, w, hx, hw):
    sx, sw = F8_MAX / jnp.max(hx), F8_MAX / jnp.max(hw)
    y = fp8_mm(x, w, sx, sw)
    return y, push(hx, jnp.max(jnp.abs(x))), push(hw, jnp.max(jnp.abs(w)))


def fp8_shards(bug):
    def f(x, w, hx, hw):
        sx, sw = F8_MAX / jnp.max(hx), F8_MAX / jnp.max(hw)
        if bug == "x-scale-current-local":
            sx = F8_MAX / jnp.max(jnp.abs(x))
        y = fp8_mm(x, w, sx, sw)
        ax = pmax(jnp.max(jnp.abs(x)), "tp" if bug == "x-amax-wrong-axis" else "dp")
        aw = jnp.max(jnp.abs(w)) if bug == "w-amax-no-pmax" else pmax(jnp.max(jnp.abs(w)), "tp")
        return y, push(hx, ax), push(hw, aw)
    return f


f8_x = R(F8_B, F8_K)
f8_x[F8_B // 2:] *= 3.0  # the largest |x| is in the second dp shard
f8_w = R(F8_K, F8_N, scale=0.2)
f8_w[:, 3 * F8_N // 4:] *= 2.5  # and the largest |w| in the last tp shard
C.smap("s.fp8_delayed_scaling_amax_hist.dp2xtp4", {"dp": 2, "tp": 4}, fp8_shards,
       (P("dp"), P(None, "tp"), P(), P()), (P("dp", "tp"), P(), P()), fp8_delayed,
       (f8_x, f8_w, np.abs(R(F8_H)) + 2.0, np.abs(R(F8_H, scale=0.2)) + 0.4),
       bugs=[("w-amax-no-pmax", ["missing-all-reduce"]), ("x-amax-wrong-axis", ["wrong-collective-group"]),
             ("x-scale-current-local", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 5. AQT-style int8 matmul: x quantised per token (row amax over K), w per
#    output channel (column amax over K), int8 x int8 -> int32, dequantised
#    with the product of the scales. K is sharded over tp on both operands:
#    the amaxes are pmax'd over tp and the int32 partial products psum'd.
AQ_B, AQ_K, AQ_N = 16, 32, 16


def qi8(a, amax):
    return jnp.clip(jnp.round(a * (127.0 / amax)), -127, 127).astype(jnp.int8)


def aqt(acc, ax, aw):
    return acc.astype(jnp.float32) * (ax / 127.0) * (aw / 127.0)


def aqt_mm(x, w):
    ax = jnp.max(jnp.abs(x), 1, keepdims=True)
    aw = jnp.max(jnp.abs(w), 0, keepdims=True)
    acc = lax.dot(qi8(x, ax), qi8(w, aw), preferred_element_type=jnp.int32)
    return aqt(acc, ax, aw)


def aqt_tp(bug):
    def f(x, w):
        ax = jnp.max(jnp.abs(x), 1, keepdims=True)
        aw = jnp.max(jnp.abs(w), 0, keepdims=True)
        if bug != "x-scale-local":
            ax = pmax(ax, "tp")
        if bug != "w-scale-local":
            aw = pmax(aw, "tp")
        acc = lax.dot(qi8(x, ax), qi8(w, aw), preferred_element_type=jnp.int32)
        if bug != "no-psum":
            acc = psum(acc, "tp")
        return aqt(acc, ax, aw)
    return f


C.smap("s.aqt_int8_int32acc_rowparallel.dp2xtp4", {"dp": 2, "tp": 4}, aqt_tp, (P("dp", "tp"), P("tp")),
       P("dp"), aqt_mm, (R(AQ_B, AQ_K), R(AQ_K, AQ_N, scale=0.3)),
       bugs=[("x-scale-local", ["wrong-scale"]), ("w-scale-local", ["wrong-scale"]),
             ("no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 6. int4 weights packed two to a byte: per-column scales over the rows of a
#    row-sharded weight (amax pmax'd over tp), codes in [-8, 7], columns 2j
#    and 2j+1 packed into the low and high nibbles of a uint8 by bit ops;
#    unpacked (mask, shift, sign extension by xor / subtract), dequantised
#    and applied to x (its K sharded as the rows): psum over tp.
I4_B, I4_K, I4_N = 8, 32, 16


def pack4(q):
    u = q.astype(jnp.int32) & 0xF
    return (u[:, 0::2] | (u[:, 1::2] << 4)).astype(jnp.uint8)


def unpack4(p):
    u = p.astype(jnp.int32)
    lo, hi = ((u & 0xF) ^ 8) - 8, ((u >> 4) ^ 8) - 8
    return jnp.stack([lo, hi], -1).reshape(p.shape[0], -1)


def int4_codes(w, amax):
    s = amax / 7.0
    return jnp.clip(jnp.round(w / s), -8, 7).astype(jnp.int8), s


def int4_linear(x, w):
    q, s = int4_codes(w, jnp.max(jnp.abs(w), 0))
    p = pack4(q)
    return p, s, x @ (unpack4(p).astype(jnp.float32) * s)


def int4_tp(bug):
    def f(x, w):
        amax = jnp.max(jnp.abs(w), 0)
        if bug != "scale-local-amax":
            amax = pmax(amax, "tp")
        q, s = int4_codes(w, amax)
        p = pack4(q)
        y = x @ (unpack4(p).astype(jnp.float32) * s)
        return p, s, (y if bug == "y-no-psum" else psum(y, "tp"))
    return f


i4_w = R(I4_K, I4_N, scale=0.3)
i4_w[I4_K // 2:] *= 2.0  # the column maxima in the later row shards
C.smap("s.int4_pack_nibbles_rowparallel.tp4", {"tp": 4}, int4_tp, (P(None, "tp"), P("tp")), (P("tp"), P(), P()),
       int4_linear, (R(I4_B, I4_K), i4_w),
       bugs=[("scale-local-amax", ["wrong-scale"]), ("y-no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 7. QLoRA-style: a frozen base weight stored as 4-bit codes (int8 in
#    [-8, 7]) with one f32 scale per block of QL_G rows and column,
#    dequantised on the fly, plus a LoRA adapter (A [K, r], B [r, N]) scaled
#    by alpha / r; the MSE loss's gradients for A and B. N (the base's
#    columns, B's columns, the target's) over tp: the loss and A's gradient
#    psum'd.
QL_T, QL_K, QL_N, QL_R, QL_G, QL_ALPHA = 8, 32, 32, 4, 8, 8.0


def ql_deq(codes, scales):
    k, n = codes.shape
    return (codes.astype(jnp.float32).reshape(k // QL_G, QL_G, n) * scales[:, None, :]).reshape(k, n)


def ql_sum(a, b, codes, scales, x, y):
    out = x @ ql_deq(codes, scales) + (x @ a) @ b * (QL_ALPHA / QL_R)
    return jnp.sum(jnp.square(out - y)) / (QL_T * QL_N)


def qlora_grads(a, b, codes, scales, x, y):
    lv, (ga, gb) = jax.value_and_grad(ql_sum, (0, 1))(a, b, codes, scales, x, y)
    return lv, ga, gb


def qlora_tp(bug):
    def f(a, b, codes, scales, x, y):
        lv, (ga, gb) = jax.value_and_grad(ql_sum, (0, 1))(a, b, codes, scales, x, y)
        if bug != "gradA-no-psum":
            ga = psum(ga, "tp")
        if bug != "loss-no-psum":
            lv = psum(lv, "tp")
        return lv, ga, gb
    return f


C.smap("s.qlora_block_dequant_lora_grads.tp4", {"tp": 4}, qlora_tp,
       (P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P(), P(None, "tp")), (P(), P(), P(None, "tp")),
       qlora_grads,
       (R(QL_K, QL_R, scale=0.3), R(QL_R, QL_N, scale=0.3), I(-8, 8, QL_K, QL_N).astype(np.int8),
        np.abs(R(QL_K // QL_G, QL_N, scale=0.05)) + 0.01, R(QL_T, QL_K), R(QL_T, QL_N, scale=0.5)),
       bugs=[("gradA-no-psum", ["missing-all-reduce"]), ("loss-no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 8. Adam with 8-bit moments under ZeRO over fsdp: the weight's rows and
#    the batch sharded over fsdp, m stored as int8 codes and v as uint8
#    codes with one absmax scale per row (a block of A8_C values); each
#    device all-gathers the weight, takes its batch shard's gradient,
#    psum_scatter's it to its rows, dequantises its moments, steps and
#    requantises them with the rows' new absmax.
A8_B, A8_R, A8_C, A8_LR, A8_B1, A8_B2, A8_T = 32, 32, 16, 0.01, 0.9, 0.999, 5


def a8_loss(w, x, y):
    return jnp.sum(jnp.square(jnp.tanh(x @ w) - y))


def a8_update(w, g, mc, ms, vc, vs, blockmax=lambda a: a):
    m = mc.astype(jnp.float32) * (ms[:, None] / 127.0)
    v = vc.astype(jnp.float32) * (vs[:, None] / 255.0)
    m = A8_B1 * m + (1 - A8_B1) * g
    v = A8_B2 * v + (1 - A8_B2) * g * g
    mh, vh = m / (1 - A8_B1 ** A8_T), v / (1 - A8_B2 ** A8_T)
    w = w - A8_LR * mh / (jnp.sqrt(vh) + 1e-8)
    ms, vs = blockmax(jnp.max(jnp.abs(m), 1)), blockmax(jnp.max(v, 1))
    mc = jnp.round(m / ms[:, None] * 127.0).astype(jnp.int8)
    vc = jnp.round(v / vs[:, None] * 255.0).astype(jnp.uint8)
    return w, mc, ms, vc, vs


def adam8_step(w, mc, ms, vc, vs, x, y):
    lv, g = jax.value_and_grad(a8_loss)(w, x, y)
    return a8_update(w, g / A8_B, mc, ms, vc, vs) + (lv / A8_B,)


def adam8_zero(bug):
    def f(w, mc, ms, vc, vs, x, y):
        full = lax.all_gather(w, "fsdp", axis=0, tiled=True)
        lv, g = jax.value_and_grad(a8_loss)(full, x, y)
        if bug == "grad-scatter-no-sum":
            g = lax.dynamic_slice_in_dim(g, idx("fsdp") * w.shape[0], w.shape[0]) * 4
        else:
            g = lax.psum_scatter(g, "fsdp", scatter_dimension=0, tiled=True)
        bm = (lambda a: pmax(a, "fsdp")) if bug == "block-absmax-pmax" else (lambda a: a)
        return a8_update(w, g / A8_B, mc, ms, vc, vs, bm) + (psum(lv, "fsdp") / A8_B,)
    return f


a8_w = R(A8_R, A8_C, scale=0.3)
a8_m = R(A8_R, A8_C, scale=0.05)
a8_v = np.abs(R(A8_R, A8_C, scale=0.01))
a8_ms, a8_vs = np.abs(a8_m).max(1), a8_v.max(1)
C.smap("s.adam_8bit_blockwise_moments_zero.fsdp4", {"fsdp": 4}, adam8_zero, (P("fsdp"),) * 7,
       (P("fsdp"),) * 5 + (P(),), adam8_step,
       (a8_w, np.round(a8_m / a8_ms[:, None] * 127).astype(np.int8), a8_ms,
        np.round(a8_v / a8_vs[:, None] * 255).astype(np.uint8), a8_vs, R(A8_B, A8_R), R(A8_B, A8_C, scale=0.5)),
       bugs=[("grad-scatter-no-sum", ["missing-all-reduce"]), ("block-absmax-pmax", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 9. stochastic rounding of an SGD update into bf16 weights: u = w - lr * g
#    in f32, 16 random bits (jax.random.bits) added below bf16's mantissa,
#    truncated; the residual u - w_new is returned too (for error
#    feedback). The weights are replicated over dp, so every replica must
#    draw the same bits (one key, no fold_in); the gradient is pmean'd in f32.
SR_B, SR_D, SR_H, SR_LR = 32, 16, 16, 0.1


def sr_round(u, key):
    bits = jax.random.bits(key, u.shape, jnp.uint32) >> 16
    ui = lax.bitcast_convert_type(u, jnp.uint32)
    t = lax.bitcast_convert_type((ui + bits) & jnp.uint32(0xFFFF0000), jnp.float32)
    w = t.astype(BF)
    return w, u - w.astype(jnp.float32)


def sr_loss(w, x, y):
    return mse(jnp.tanh(x @ w.astype(jnp.float32)), y)


def sr_step(w, x, y, key):
    lv, g = jax.value_and_grad(sr_loss)(w.astype(jnp.float32), x, y)
    return sr_round(w.astype(jnp.float32) - SR_LR * g, key) + (lv,)


def sr_dp(bug):
    def f(w, x, y, key):
        lv, g = jax.value_and_grad(sr_loss)(w.astype(jnp.float32), x, y)
        if bug == "grad-pmean-bf16":
            g = pmean(g.astype(BF), "dp").astype(jnp.float32)
        elif bug != "grad-no-pmean":
            g = pmean(g, "dp")
        k = jax.random.fold_in(key, idx("dp")) if bug == "sr-key-fold-axis" else key
        return sr_round(w.astype(jnp.float32) - SR_LR * g, k) + (pmean(lv, "dp"),)
    return f


C.smap("s.stochastic_round_bf16_update.dp4", {"dp": 4}, sr_dp, (P(), P("dp"), P("dp"), P()), (P(), P(), P()),
       sr_step, (R(SR_D, SR_H, scale=0.3).astype(BF), R(SR_B, SR_D), R(SR_B, SR_H, scale=0.5), KEY2),
       bugs=[("sr-key-fold-axis", ["wrong-random-key"]), ("grad-no-pmean", ["missing-all-reduce"]),
             ("grad-pmean-bf16", ["dtype-mismatch"])])

# ---------------------------------------------------------------------------
# 10. label-smoothed cross-entropy over a vocabulary-sharded bf16 head: the
#     logits in bf16, every reduction in f32: the row max (pmax over tp), the
#     sum of exponentials (psum), the label's logit (psum of the shard that
#     holds it) and the mean logit for the smoothing term (psum / V).
#     Outputs the per-token log-sum-exp and the mean loss.
LS_T, LS_D, LS_V, LS_EPS = 16, 16, 64, 0.1


def ls_terms(lse, lab, mean_logit):
    return (1 - LS_EPS) * (lse - lab) + LS_EPS * (lse - mean_logit)


def ls_ce(h, w, labels):
    lf = jnp.dot(h, w).astype(jnp.float32)
    m = jnp.max(lf, -1)
    lse = m + jnp.log(jnp.sum(jnp.exp(lf - m[:, None]), -1))
    lab = jnp.take_along_axis(lf, labels[:, None], -1)[:, 0]
    return lse, jnp.mean(ls_terms(lse, lab, jnp.mean(lf, -1)))


def ls_vocab(bug):
    def f(h, w, labels):
        vl = w.shape[1]
        lf = jnp.dot(h, w).astype(jnp.float32)
        m = jnp.max(lf, -1)
        if bug != "local-max-no-pmax":
            m = pmax(m, "tp")
        se = jnp.sum(jnp.exp(lf - m[:, None]), -1)
        se = psum(se.astype(BF), "tp").astype(jnp.float32) if bug == "sum-exp-psum-bf16" else psum(se, "tp")
        lse = m + jnp.log(se)
        loc = labels - idx("tp") * vl
        mine = (loc >= 0) & (loc < vl)
        lab = psum(jnp.where(mine, jnp.take_along_axis(lf, jnp.clip(loc, 0, vl - 1)[:, None], -1)[:, 0], 0.0), "tp")
        mean_logit = psum(jnp.sum(lf, -1), "tp") / (vl if bug == "smooth-local-vocab" else LS_V)
        return lse, jnp.mean(ls_terms(lse, lab, mean_logit))
    return f


C.smap("s.label_smooth_ce_bf16_vocab_f32_reduce.tp4", {"tp": 4}, ls_vocab, (P(), P(None, "tp"), P()), (P(), P()),
       ls_ce, ((R(LS_T, LS_D) + 1.0).astype(BF), (R(LS_D, LS_V, scale=0.5) + 0.15).astype(BF), I(0, LS_V, LS_T)),
       bugs=[("local-max-no-pmax", ["missing-all-reduce"]), ("sum-exp-psum-bf16", ["dtype-mismatch"]),
             ("smooth-local-vocab", ["constant-mismatch"])])

# ---------------------------------------------------------------------------
# 11. weighted batch statistics by a parallel merge: each device computes
#     its shard's weight sum, weighted mean and M2 (two passes), all-gathers
#     the triples and merges them in device order (Chan et al.: delta of the
#     means, n_a n_b / n); the normalised rows and running statistics
#     (momentum WV_MOM, unbiased variance) are returned.
WV_B, WV_D, WV_MOM = 32, 8, 0.9


def wv_out(x, wt, mean, var, n, rm, rv):
    xn = (x - mean) * lax.rsqrt(var + 1e-5) * wt[:, None]
    return xn, WV_MOM * rm + (1 - WV_MOM) * mean, WV_MOM * rv + (1 - WV_MOM) * var * n / (n - 1)


def wv_stats(x, wt, rm, rv):
    n = jnp.sum(wt)
    mean = jnp.sum(wt[:, None] * x, 0) / n
    var = jnp.sum(wt[:, None] * jnp.square(x - mean), 0) / n
    return wv_out(x, wt, mean, var, n, rm, rv)


def wv_merge(bug):
    def f(x, wt, rm, rv):
        n = jnp.sum(wt)
        mu = jnp.sum(wt[:, None] * x, 0) / n
        m2 = jnp.sum(wt[:, None] * jnp.square(x - mu), 0)
        ns, mus, m2s = (lax.all_gather(a, "dp") for a in (n, mu, m2))
        na, ma, qa = ns[0], mus[0], m2s[0]
        for i in range(1, ns.shape[0]):
            nb, mb, qb = ns[i], mus[i], m2s[i]
            d = mb - ma
            nn = na + nb
            if bug == "merge-mean-of-means":
                ma = (ma * i + mb) / (i + 1)
            else:
                ma = ma + d * nb / nn
            qa = qa + qb if bug == "m2-no-delta" else qa + qb + d * d * na * nb / nn
            na = nn
        return wv_out(x, wt, ma, qa / na, na, rm, rv)
    return f


wv_x = R(WV_B, WV_D)
wv_x[WV_B // 2:] += 1.5  # shards with different means
wv_wt = rng.uniform(0.2, 1.0, WV_B).astype(np.float32)
wv_wt[:WV_B // 4] *= 3.0  # and different weight sums
C.smap("s.weighted_stats_chan_merge.dp4", {"dp": 4}, wv_merge, (P("dp"), P("dp"), P(), P()), (P("dp"), P(), P()),
       wv_stats, (wv_x, wv_wt, R(WV_D, scale=0.1), np.abs(R(WV_D)) + 0.5),
       bugs=[("merge-mean-of-means", ["wrong-reduction"]), ("m2-no-delta", ["wrong-reduction"])])

# ===========================================================================
# GSPMD pairs: the same ideas left to the partitioner. jax.random under
# jax_threefry_partitionable draws the same bits sharded as on one device.

# ---------------------------------------------------------------------------
# 12. dropout on the hidden units of an MLP training step (batch over dp,
#     hidden over tp), the mask from jax.random.bernoulli of the global shape.
def gdrop_step(w1, w2, x, y, key):
    def loss(w1, w2):
        h = jnp.tanh(x @ w1)
        keep = jax.random.bernoulli(key, 1.0 - DR_P, h.shape)
        return mse(jnp.where(keep, h / (1.0 - DR_P), 0.0) @ w2, y)
    lv, (g1, g2) = jax.value_and_grad(loss, (0, 1))(w1, w2)
    return w1 - DR_LR * g1, w2 - DR_LR * g2, lv


C.gspmd("g.dropout_mlp_sgd_threefry.dp2xtp4", {"dp": 2, "tp": 4}, (P(None, "tp"), P("tp"), P("dp"), P("dp"), P()),
        (P(None, "tp"), P("tp"), P()), gdrop_step,
        (R(DR_D, DR_H, scale=0.4), R(DR_H, DR_D, scale=0.3), R(DR_B, DR_D), R(DR_B, DR_D, scale=0.5), KEY))

# ---------------------------------------------------------------------------
# 13. BERT-style masking: 15% of the positions selected, of those 80% become
#     the mask token, 10% a random token (randint), 10% stay; the masked
#     positions' cross-entropy; an AdamW step. Tokens over dp, the output
#     head's vocabulary over tp.
BM_B, BM_T, BM_V, BM_D = 8, 16, 64, 16
bm_opt = optax.adamw(0.01, weight_decay=0.01)


def bert_mask(tokens, key):
    k1, k2, k3 = jax.random.split(key, 3)
    sel = jax.random.bernoulli(k1, 0.15, tokens.shape)
    r = jax.random.uniform(k2, tokens.shape)
    rnd = jax.random.randint(k3, tokens.shape, 1, BM_V)
    inp = jnp.where(sel & (r < 0.8), MM_MASK, jnp.where(sel & (r < 0.9), rnd, tokens))
    return inp, sel


def bert_step(p, st, tokens, key):
    inp, sel = bert_mask(tokens, key)

    def loss(p):
        h = jnp.tanh(p["emb"][inp] @ p["w"])
        logp = jax.nn.log_softmax(h @ p["out"], -1)
        nll = -jnp.take_along_axis(logp, tokens[..., None], -1)[..., 0]
        return jnp.sum(nll * sel) / jnp.maximum(jnp.sum(sel), 1)
    lv, g = jax.value_and_grad(loss)(p)
    u, st = bm_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


bm_p = {"emb": R(BM_V, BM_D, scale=0.5), "w": R(BM_D, BM_D, scale=0.3), "out": R(BM_D, BM_V, scale=0.3)}
bm_ps = {"emb": P(), "w": P(None, "tp"), "out": P(None, "tp")}
bm_st = np_tree(bm_opt.init(bm_p))
C.gspmd("g.bert_80_10_10_mask_adamw.dp2xtp4", {"dp": 2, "tp": 4},
        (bm_ps, state_specs(bm_st, bm_ps), P("dp"), P()), (bm_ps, state_specs(bm_st, bm_ps), P()),
        bert_step, (bm_p, bm_st, I(1, BM_V, BM_B, BM_T), KEY))

# ---------------------------------------------------------------------------
# 14. stochastic depth in a training step: per-example Bernoulli survival of
#     each residual block (batch over dp, the blocks' columns over tp), SGD.
def gsd_step(ws, x, y, key):
    lv, g = jax.value_and_grad(lambda ws: mse(sd_net(ws, x, key), y))(ws)
    return ws - 0.1 * g, lv


C.gspmd("g.stochastic_depth_resblocks_sgd.dp2xtp4", {"dp": 2, "tp": 4}, (P(None, None, "tp"), P("dp"), P("dp"), P()),
        (P(None, None, "tp"), P()), gsd_step, (R(SD_L, SD_D, SD_D, scale=0.4), R(SD_B, SD_D), R(SD_B, SD_D), KEY))

# ---------------------------------------------------------------------------
# 15. bf16 compute from f32 master weights, f32 accumulation
#     (preferred_element_type), Adam with bf16 first moments (mu_dtype).
ba_opt = optax.adam(0.01, mu_dtype=BF)


def bdot(a, b):
    return lax.dot(a.astype(BF), b.astype(BF), preferred_element_type=jnp.float32)


def bf16_adam_step(p, st, x, y):
    lv, g = jax.value_and_grad(lambda p: mse(bdot(jax.nn.gelu(bdot(x, p["w1"]) + p["b1"]), p["w2"]), y))(p)
    u, st = ba_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


ba_p = {"w1": R(16, 64, scale=0.3), "b1": R(64, scale=0.1), "w2": R(64, 16, scale=0.2)}
ba_ps = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp")}
ba_st = np_tree(ba_opt.init(ba_p))
C.gspmd("g.bf16_compute_bf16_mu_adam_f32acc.dp2xtp4", {"dp": 2, "tp": 4},
        (ba_ps, state_specs(ba_st, ba_ps), P("dp"), P("dp")), (ba_ps, state_specs(ba_st, ba_ps), P()),
        bf16_adam_step, (ba_p, ba_st, R(16, 16), R(16, 16, scale=0.5)))

# ---------------------------------------------------------------------------
# 16. fp8 delayed scaling in a two-layer training step: every matmul operand
#     quantised to float8_e4m3fn with its history's scale, the amax
#     histories updated, SGD on the f32 weights (gradients through the
#     quantisation).
def fp8_mlp_step(w1, w2, h1x, h1w, h2x, h2w, x, y):
    def loss(w1, w2):
        h = jnp.tanh(fp8_mm(x, w1, F8_MAX / jnp.max(h1x), F8_MAX / jnp.max(h1w)))
        o = fp8_mm(h, w2, F8_MAX / jnp.max(h2x), F8_MAX / jnp.max(h2w))
        return mse(o, y), h
    (lv, h), (g1, g2) = jax.value_and_grad(loss, (0, 1), has_aux=True)(w1, w2)
    am = lambda a: jnp.max(jnp.abs(a))
    return (w1 - 0.05 * g1, w2 - 0.05 * g2, push(h1x, am(x)), push(h1w, am(w1)), push(h2x, am(h)),
            push(h2w, am(w2)), lv)


hist = lambda lo: np.abs(R(F8_H, scale=0.3)) + lo
C.gspmd("g.fp8_delayed_scaling_mlp_grad.dp2xtp4", {"dp": 2, "tp": 4},
        (P(None, "tp"), P("tp"), P(), P(), P(), P(), P("dp"), P("dp")),
        (P(None, "tp"), P("tp"), P(), P(), P(), P(), P()), fp8_mlp_step,
        (R(F8_K, F8_N, scale=0.2), R(F8_N, 16, scale=0.2), hist(3.0), hist(0.6), hist(1.0), hist(0.6),
         R(F8_B, F8_K), R(F8_B, 16, scale=0.5)))

# ---------------------------------------------------------------------------
# 17. int4-packed weights: uint8 [K, N/2] (columns 2j, 2j+1 in the low and
#     high nibbles) with one scale per group of 8 rows and column, unpacked,
#     sign-extended and dequantised in the program; packed columns over tp.
def int4_group_linear(x, packed, scales):
    q = unpack4(packed).astype(jnp.float32)
    k, n = q.shape
    w = (q.reshape(k // 8, 8, n) * scales[:, None, :]).reshape(k, n)
    return jax.nn.relu(x @ w)


i4_q = I(-8, 8, 32, 32).astype(np.int8)
C.gspmd("g.int4_packed_group_dequant_matmul.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp"), P(None, "tp")),
        P("dp", "tp"), int4_group_linear,
        (R(8, 32), np.asarray(pack4(jnp.asarray(i4_q))), np.abs(R(4, 32, scale=0.05)) + 0.01))

# ---------------------------------------------------------------------------
# 18. a QLoRA AdamW step: the frozen block-quantised base (codes and scales
#     of 7.) column-sharded over tp, the adapter trained with optax.adamw.
ql_opt = optax.adamw(0.01)


def qlora_adamw_step(ad, st, codes, scales, x, y):
    lv, g = jax.value_and_grad(lambda ad: ql_sum(ad["a"], ad["b"], codes, scales, x, y))(ad)
    u, st = ql_opt.update(g, st, ad)
    return optax.apply_updates(ad, u), st, lv


ql_ad = {"a": R(QL_K, QL_R, scale=0.3), "b": R(QL_R, QL_N, scale=0.3)}
ql_ps = {"a": P(), "b": P(None, "tp")}
ql_st = np_tree(ql_opt.init(ql_ad))
C.gspmd("g.qlora_block_dequant_adamw.dp2xtp4", {"dp": 2, "tp": 4},
        (ql_ps, state_specs(ql_st, ql_ps), P(None, "tp"), P(None, "tp"), P("dp"), P("dp", "tp")),
        (ql_ps, state_specs(ql_st, ql_ps), P()), qlora_adamw_step,
        (ql_ad, ql_st, I(-8, 8, QL_K, QL_N).astype(np.int8), np.abs(R(QL_K // QL_G, QL_N, scale=0.05)) + 0.01,
         R(QL_T, QL_K), R(QL_T, QL_N, scale=0.5)))

# ---------------------------------------------------------------------------
# 19. stochastic rounding of the SGD update of bf16 weights whose columns are
#     over tp: the random bits drawn with the weight's (sharded) shape.
C.gspmd("g.stochastic_round_bf16_sgd.dp2xtp4", {"dp": 2, "tp": 4}, (P(None, "tp"), P("dp"), P("dp", "tp"), P()),
        (P(None, "tp"), P(None, "tp"), P()), sr_step,
        (R(SR_D, SR_H, scale=0.3).astype(BF), R(SR_B, SR_D), R(SR_B, SR_H, scale=0.5), KEY2))

# ---------------------------------------------------------------------------
# 20. Adam with 8-bit row-wise quantised moments (8.) under GSPMD: the
#     weight, the codes and the scales' rows over fsdp, the batch over dp.
C.gspmd("g.adam_8bit_blockwise_moments.dp2xfsdp4", {"dp": 2, "fsdp": 4}, (P("fsdp"),) * 5 + (P("dp"), P("dp")),
        (P("fsdp"),) * 5 + (P(),), adam8_step,
        (a8_w, np.round(a8_m / a8_ms[:, None] * 127).astype(np.int8), a8_ms,
         np.round(a8_v / a8_vs[:, None] * 255).astype(np.uint8), a8_vs, R(A8_B, A8_R), R(A8_B, A8_C, scale=0.5)))

# ---------------------------------------------------------------------------
# 21. sampling: jax.random.categorical (Gumbel-max) at a temperature over a
#     vocabulary-sharded LM head, with the sampled tokens' log-probabilities.
def sample_tokens(h, w, key):
    logits = (h @ w) / 0.7
    tok = jax.random.categorical(key, logits, -1)
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), tok[:, None], -1)[:, 0]
    return tok, logp


C.gspmd("g.gumbel_categorical_sample_vocab.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp"), P()),
        (P("dp"), P("dp")), sample_tokens, (R(16, 16), R(16, 128, scale=0.5), KEY))

# ---------------------------------------------------------------------------
# 22. mixup: Beta(0.4, 0.4) weights per example, partners by a random
#     permutation of the batch, labels mixed as one-hot; a softmax
#     classifier's SGD step, batch over dp.
def mixup_step(w, x, labels, key):
    k1, k2 = jax.random.split(key)
    lam = jax.random.beta(k1, 0.4, 0.4, (x.shape[0],))
    perm = jax.random.permutation(k2, x.shape[0])
    oh = jax.nn.one_hot(labels, w.shape[1])
    xm = lam[:, None] * x + (1 - lam[:, None]) * x[perm]
    ym = lam[:, None] * oh + (1 - lam[:, None]) * oh[perm]
    lv, g = jax.value_and_grad(lambda w: -jnp.mean(jnp.sum(ym * jax.nn.log_softmax(xm @ w, -1), -1)))(w)
    return w - 0.5 * g, lv


C.gspmd("g.mixup_beta_permutation_sgd.dp4", {"dp": 4}, (P(), P("dp"), P("dp"), P()), (P(), P()), mixup_step,
        (R(16, 10, scale=0.3), R(32, 16), I(0, 10, 32), KEY2))

# ---------------------------------------------------------------------------
# 23. weighted batch statistics (11.) with the batch over dp, and the
#     label-smoothed bf16 cross-entropy (10.) with tokens over dp and the
#     vocabulary over tp.
C.gspmd("g.weighted_batch_stats_running.dp4", {"dp": 4}, (P("dp"), P("dp"), P(), P()), (P("dp"), P(), P()),
        wv_stats, (wv_x, wv_wt, R(WV_D, scale=0.1), np.abs(R(WV_D)) + 0.5))
C.gspmd("g.label_smooth_ce_bf16_vocab.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp"), P("dp")), (P("dp"), P()),
        ls_ce, ((R(LS_T, LS_D) + 1.0).astype(BF), (R(LS_D, LS_V, scale=0.5) + 0.15).astype(BF), I(0, LS_V, LS_T)))

# ---------------------------------------------------------------------------
# 24. bf16 weights updated with Kahan compensation (a bf16 buffer of what the
#     bf16 additions lost) and an f32 EMA of the bf16 weights; the gradient
#     of the dp-sharded batch pmean'd in f32 before the update is rounded.
KH_LR, KH_EMA = 0.05, 0.99


def kahan_update(w, c, ema, g):
    y = (-KH_LR * g).astype(BF) - c
    t = w + y
    c = (t - w) - y
    return t, c, KH_EMA * ema + (1 - KH_EMA) * t.astype(jnp.float32)


def kahan_step(w, c, ema, x, y):
    lv, g = jax.value_and_grad(sr_loss)(w.astype(jnp.float32), x, y)
    return kahan_update(w, c, ema, g) + (lv,)


def kahan_dp(bug):
    def f(w, c, ema, x, y):
        lv, g = jax.value_and_grad(sr_loss)(w.astype(jnp.float32), x, y)
        if bug == "update-psum-not-pmean":
            g = psum(g, "dp")
        elif bug != "grad-no-pmean":
            g = pmean(g, "dp")
        return kahan_update(w, c, ema, g) + (pmean(lv, "dp"),)
    return f


kh_w = R(SR_D, SR_H, scale=0.3).astype(BF)
C.smap("s.kahan_bf16_weights_f32_ema.dp4", {"dp": 4}, kahan_dp, (P(), P(), P(), P("dp"), P("dp")), (P(),) * 4,
       kahan_step, (kh_w, R(SR_D, SR_H, scale=1e-3).astype(BF), np.asarray(kh_w, np.float32) + R(SR_D, SR_H, scale=0.01),
                    R(SR_B, SR_D), R(SR_B, SR_H, scale=0.5)),
       bugs=[("grad-no-pmean", ["missing-all-reduce"]), ("update-psum-not-pmean", ["constant-mismatch"])])

# ---------------------------------------------------------------------------
# 25. the smallest form of 11.'s merge: each device's weighted mean (its
#     weighted sum over its weight sum), the global mean as the psum of the
#     means times the weight sums over the psum of the weight sums.
def wmean(x, wt):
    return jnp.sum(wt[:, None] * x, 0) / jnp.sum(wt)


def wmean_dp(bug):
    def f(x, wt):
        n = jnp.sum(wt)
        mu = jnp.sum(wt[:, None] * x, 0) / n
        return psum(n * mu, "dp") / psum(n, "dp")
    return f


C.smap("s.weighted_mean_of_local_means_min.dp4", {"dp": 4}, wmean_dp, (P("dp"), P("dp")), P(), wmean, (wv_x, wv_wt))

# ---------------------------------------------------------------------------
# 26. the smallest form of 22.'s Beta draw: Beta(0.4, 0.4) weights per
#     example from a key derived by fold_in, scaling rows over dp.
C.gspmd("g.beta_weights_fold_in_key_min.dp4", {"dp": 4}, (P("dp"), P()), P("dp"),
        lambda x, key: jax.random.beta(jax.random.fold_in(key, 1), 0.4, 0.4, (x.shape[0],))[:, None] * x,
        (R(32, 16), KEY))

# ---------------------------------------------------------------------------
# 27. hybrid fp8 training: the hidden pre-activation's cotangent quantised to
#     float8_e5m2 in the backward pass (a custom_vjp, identity forward) with
#     a current per-tensor scale from its amax; a column-parallel layer, batch
#     over dp and hidden units over tp, so the cotangent's amax is pmax'd over
#     both axes and the weight gradient psum'd over dp. SGD step; the
#     gradient is returned too (for logging).
E5_MAX = 57344.0
HY_B, HY_D, HY_H = 16, 16, 32


def e5_grad(amax_of):
    @jax.custom_vjp
    def q(h):
        return h

    def fwd(h):
        return h, None

    def bwd(_, g):
        s = E5_MAX / amax_of(g)
        return (jnp.clip(g * s, -E5_MAX, E5_MAX).astype(jnp.float8_e5m2).astype(jnp.float32) / s,)
    q.defvjp(fwd, bwd)
    return q


def hy_sum(w, x, y, q):
    return jnp.sum(jnp.square(jnp.tanh(q(x @ w)) - y)) / (HY_B * HY_H)


def hybrid_step(w, x, y):
    lv, g = jax.value_and_grad(hy_sum)(w, x, y, e5_grad(lambda g: jnp.max(jnp.abs(g))))
    return w - 0.5 * g, g, lv


def hybrid_dp_tp(bug):
    def amax(g):
        a = jnp.max(jnp.abs(g))
        if bug == "grad-amax-local":
            return a
        return pmax(a, "dp" if bug == "grad-amax-dp-only" else ("dp", "tp"))

    def f(w, x, y):
        lv, g = jax.value_and_grad(hy_sum)(w, x, y, e5_grad(amax))
        if bug != "dw-no-psum-dp":
            g = psum(g, "dp")
        return w - 0.5 * g, g, psum(lv, ("dp", "tp"))
    return f


hy_args = (R(HY_D, HY_H, scale=0.3), R(HY_B, HY_D), R(HY_B, HY_H, scale=0.5))
hy_args[2][:, 3 * HY_H // 4:] *= 4.0  # the largest cotangents in the last tp shard
hy_args[1][HY_B // 2:] *= 2.0  # and in the second dp shard
C.smap("s.fp8_e5m2_grad_custom_vjp.dp2xtp4", {"dp": 2, "tp": 4}, hybrid_dp_tp, (P(None, "tp"), P("dp"), P("dp", "tp")),
       (P(None, "tp"), P(None, "tp"), P()), hybrid_step, hy_args,
       bugs=[("grad-amax-local", ["missing-all-reduce"]), ("grad-amax-dp-only", ["wrong-collective-group"]),
             ("dw-no-psum-dp", ["missing-all-reduce"])])
C.gspmd("g.fp8_e5m2_grad_custom_vjp.dp2xtp4", {"dp": 2, "tp": 4}, (P(None, "tp"), P("dp"), P("dp", "tp")),
        (P(None, "tp"), P(None, "tp"), P()), hybrid_step, hy_args)

# ---------------------------------------------------------------------------
C.finish()
