"""samples/fresh4: a fourth batch of programs as a user writes them, none of
them an idiom of samples/fresh, fresh2, fresh3, probe, train or wild:
Megatron vocab-parallel cross-entropy written with one_hot, a gradient clip
by global norm over sharded parameters, rotary embeddings with positions
from axis_index offsets, a 2-D convolution with spatial sharding and a halo
exchange by ppermute, a masked LM loss with a padding mask from the data,
an int8 quantise-dequantise of activations before an all-gather, SGD with an
EMA of the parameters in a fori_loop, grouped-query attention with tp over
kv heads and an ensemble vmapped over a mesh axis (GSPMD), Megatron sequence
parallelism (LayerNorm, then all-gather), an associative-scan SSM over a
sharded sequence, label smoothing over a sharded vocabulary, ZeRO-3 in a
scan over layers, bf16 parameters from f32 masters with optax (GSPMD), and
expert parallelism with a capacity (one_hot dispatch, all_to_all).
Each shard_map family has the bug variants a careless parallelisation makes.
Exported with scalify_jax.export_pair; every pair is also run by JAX on seeded
inputs and its manifest entry records the largest difference from the
single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh4.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh4.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

C = Corpus("samples/fresh4", "samples/gen/fresh4.py", "samples/gen/run_fresh4.sh", sys.argv[1:])
rng, R, I = seeded(4127)
psum, pmax, idx = lax.psum, lax.pmax, lax.axis_index

# ---------------------------------------------------------------------------
# 1. Megatron vocab-parallel cross-entropy written with one_hot: the logits
#    sharded on the vocabulary over tp; max and sum of exp reduced over tp, the
#    target logit picked by a one_hot of the label shifted by the shard's offset.
VX_V = 32


def xent(logits, labels):
    lse = jax.nn.logsumexp(logits, -1)
    tgt = jnp.sum(jax.nn.one_hot(labels, VX_V) * logits, -1)
    return jnp.mean(lse - tgt)


def xent_tp(bug):
    def f(logits, labels):
        vl = logits.shape[-1]
        m = jnp.max(logits, -1, keepdims=True)
        if bug != "local-max":
            m = pmax(m, "tp")
        se = psum(jnp.sum(jnp.exp(logits - m), -1), "tp")
        lse = jnp.log(se) + m[:, 0]
        off = 0 if bug == "no-offset" else idx("tp") * vl
        tgt = psum(jnp.sum(jax.nn.one_hot(labels - off, vl) * logits, -1), "tp")
        return jnp.mean(lse - tgt)
    return f


C.smap("s.vocab_xent_onehot.tp4", {"tp": 4}, xent_tp, (P(None, "tp"), P()), P(), xent,
       (R(8, VX_V, scale=2.0), I(0, VX_V, 8)),
       bugs=[("local-max", ["missing-all-reduce"]), ("no-offset", ["wrong-shard-dim"])])

# ---------------------------------------------------------------------------
# 2. an SGD step with gradient clipping by global norm; parameters and
#    gradients sharded over fsdp (rows), the batch replicated; the squared
#    norms summed over fsdp.
CL_MAX, CL_LR = 0.5, 0.1


def clip_step(w1, w2, x, y):
    g1, g2 = jax.grad(lambda a, b: jnp.mean((jnp.tanh(x @ a.T) @ b - y) ** 2), (0, 1))(w1, w2)
    n = jnp.sqrt(jnp.sum(g1 * g1) + jnp.sum(g2 * g2))
    s = jnp.minimum(1.0, CL_MAX / (n + 1e-6))
    return w1 - CL_LR * s * g1, w2 - CL_LR * s * g2, n


def clip_fsdp(bug):
    def f(w1, w2, x, y):
        a = lax.all_gather(w1, "fsdp", axis=0, tiled=True)
        b = lax.all_gather(w2, "fsdp", axis=0, tiled=True)
        g1, g2 = jax.grad(lambda a, b: jnp.mean((jnp.tanh(x @ a.T) @ b - y) ** 2), (0, 1))(a, b)
        k = idx("fsdp")
        g1 = lax.dynamic_slice_in_dim(g1, k * w1.shape[0], w1.shape[0], 0)
        g2 = lax.dynamic_slice_in_dim(g2, k * w2.shape[0], w2.shape[0], 0)
        sq = jnp.sum(g1 * g1) + jnp.sum(g2 * g2)
        n = jnp.sqrt(sq if bug == "local-norm" else psum(sq, "fsdp"))
        s = jnp.minimum(1.0, CL_MAX / (n + 1e-6))
        return w1 - CL_LR * s * g1, w2 - CL_LR * s * g2, n
    return f


C.smap("s.clip_global_norm.fsdp4", {"fsdp": 4}, clip_fsdp, (P("fsdp"), P("fsdp"), P(), P()),
       (P("fsdp"), P("fsdp"), P()), clip_step, (R(16, 8), R(16, 8), R(8, 8), R(8, 8)),
       bugs=[("local-norm", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 3. rotary embeddings on a sequence-sharded q and k: each shard's positions
#    are its axis_index times the local length plus arange.
RO_D = 8


def rope(x, pos):
    half = RO_D // 2
    inv = 1.0 / (10000.0 ** (jnp.arange(half, dtype=jnp.float32) / half))
    ang = pos[:, None].astype(jnp.float32) * inv[None]
    c, s = jnp.cos(ang)[None, :, None], jnp.sin(ang)[None, :, None]
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], -1)


def rope_qk(q, k):
    pos = jnp.arange(q.shape[1])
    return rope(q, pos), rope(k, pos)


def rope_sp(bug):
    def f(q, k):
        t = q.shape[1]
        pos = jnp.arange(t) if bug == "no-offset" else idx("sp") * t + jnp.arange(t)
        return rope(q, pos), rope(k, pos + (1 if bug == "k-shift" else 0))
    return f


C.smap("s.rope_axis_offset.sp4", {"sp": 4}, rope_sp, (P(None, "sp"), P(None, "sp")), (P(None, "sp"), P(None, "sp")),
       rope_qk, (R(2, 16, 2, RO_D), R(2, 16, 2, RO_D)),
       bugs=[("no-offset", ["wrong-shard-dim"]), ("k-shift", ["constant-mismatch"])])

# ---------------------------------------------------------------------------
# 4. a 3x3 convolution (SAME) on NHWC images with H sharded over sp: one row
#    of halo from each neighbour by ppermute (zeros at the edges).


def conv(x, k):
    return lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def conv_halo(bug):
    n = 4

    def f(x, k):
        up = [(i, i + 1) for i in range(n - 1)]
        down = [(i + 1, i) for i in range(n - 1)]
        if bug == "halo-swap":
            up, down = down, up
        prev = lax.ppermute(x[:, -1:], "sp", up)    # the row above, from the previous shard
        nxt = lax.ppermute(x[:, :1], "sp", down)    # the row below, from the next shard
        xp = jnp.concatenate([prev, x, nxt], 1)
        return lax.conv_general_dilated(xp, k, (1, 1), ((0, 0), (1, 1)),
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return f


C.smap("s.conv_halo.sp4", {"sp": 4}, conv_halo, (P(None, "sp"), P()), P(None, "sp"), conv,
       (R(2, 16, 8, 3), R(3, 3, 3, 4, scale=0.3)),
       bugs=[("halo-swap", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 5. a masked LM loss: the padding mask comes from the data (token id 0), the
#    mean over the unmasked tokens of the whole batch (batch over dp).
ML_V = 16


def mlm_loss(logits, tok):
    mask = (tok != 0).astype(jnp.float32)
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), tok[..., None], -1)[..., 0]
    return jnp.sum(nll * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def mlm_dp(bug):
    def f(logits, tok):
        mask = (tok != 0).astype(jnp.float32)
        nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), tok[..., None], -1)[..., 0]
        if bug == "mean-of-means":
            return lax.pmean(jnp.sum(nll * mask) / jnp.maximum(jnp.sum(mask), 1.0), "dp")
        return psum(jnp.sum(nll * mask), "dp") / jnp.maximum(psum(jnp.sum(mask), "dp"), 1.0)
    return f


ml_tok = I(0, ML_V, 8, 8)
ml_tok[:2, 3:] = 0  # padding: the first shard has fewer tokens
C.smap("s.masked_lm_loss.dp4", {"dp": 4}, mlm_dp, (P("dp"), P("dp")), P(), mlm_loss,
       (R(8, 8, ML_V), ml_tok), bugs=[("mean-of-means", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 6. int8 quantise-dequantise of activations (one scale per tensor, from the
#    global max) before the all-gather of a sequence-parallel layer.


def qdq(x, amax):
    s = amax / 127.0
    return jnp.clip(jnp.round(x / s), -127, 127).astype(jnp.int8), s


def quant_mm(x, w):
    q, s = qdq(x, jnp.max(jnp.abs(x)))
    return (q.astype(jnp.float32) * s) @ w


def quant_sp(bug):
    def f(x, w):
        amax = jnp.max(jnp.abs(x))
        if bug != "local-scale":
            amax = pmax(amax, "sp")
        q, s = qdq(x, amax)
        qf = lax.all_gather(q, "sp", axis=0, tiled=True)
        return (qf.astype(jnp.float32) * s) @ w
    return f


C.smap("s.int8_qdq_allgather.sp4", {"sp": 4}, quant_sp, (P("sp"), P()), P(), quant_mm,
       (R(16, 8) * np.linspace(0.2, 3.0, 16, dtype=np.float32)[:, None], R(8, 8)),
       bugs=[("local-scale", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 7. data-parallel SGD for a few steps in a fori_loop, with an EMA of the
#    parameters updated each step.
FL_STEPS, FL_LR, FL_DECAY = 3, 0.05, 0.9


def fl_grad(w, x, y):
    return jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)


def fori_train(w, x, y):
    def body(i, c):
        w, e = c
        w = w - FL_LR * fl_grad(w, x, y)
        return w, FL_DECAY * e + (1 - FL_DECAY) * w
    return lax.fori_loop(0, FL_STEPS, body, (w, w))


def fori_dp(bug):
    def f(w, x, y):
        def body(i, c):
            w, e = c
            g = fl_grad(w, x, y)
            w = w - FL_LR * (g if bug == "no-pmean" else lax.pmean(g, "dp"))
            return w, FL_DECAY * e + (1 - FL_DECAY) * w
        return lax.fori_loop(0, FL_STEPS, body, (w, w))
    return f


C.smap("s.fori_sgd_ema.dp4", {"dp": 4}, fori_dp, (P(), P("dp"), P("dp")), (P(), P()), fori_train,
       (R(8, 4, scale=0.3), R(16, 8), R(16, 4)), bugs=[("no-pmean", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 8. grouped-query attention (8 query heads, 2 kv heads) under GSPMD, the kv
#    heads sharded over tp and the batch over dp.
GQ_H, GQ_KV, GQ_D = 8, 2, 4


def gqa(x, wq, wk, wv, wo):
    b, t, _ = x.shape
    q = jnp.einsum("btd,dhe->bthe", x, wq).reshape(b, t, GQ_KV, GQ_H // GQ_KV, GQ_D)
    k = jnp.einsum("btd,dhe->bthe", x, wk)
    v = jnp.einsum("btd,dhe->bthe", x, wv)
    s = jnp.einsum("bqkge,bske->bkgqs", q, k) * GQ_D ** -0.5
    causal = jnp.arange(t)[None, :] <= jnp.arange(t)[:, None]
    p = jax.nn.softmax(jnp.where(causal, s, -1e9), -1)
    o = jnp.einsum("bkgqs,bske->bqkge", p, v).reshape(b, t, GQ_H, GQ_D)
    return jnp.einsum("bthe,hed->btd", o, wo)


C.gspmd("g.gqa_kv_tp.dp2xtp2", {"dp": 2, "tp": 2},
        (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P("dp"), gqa,
        (R(4, 8, 16), R(16, GQ_H, GQ_D, scale=0.3), R(16, GQ_KV, GQ_D, scale=0.3),
         R(16, GQ_KV, GQ_D, scale=0.3), R(GQ_H, GQ_D, 16, scale=0.3)))

# ---------------------------------------------------------------------------
# 9. an ensemble of MLPs vmapped over its members, the member axis sharded
#    over ens and the batch over dp (GSPMD).


def ens(w1, w2, x):
    return jax.vmap(lambda a, b: jnp.mean(jax.nn.relu(x @ a) @ b, 0))(w1, w2)


C.gspmd("g.ensemble_vmap.ens4xdp2", {"ens": 4, "dp": 2}, (P("ens"), P("ens"), P("dp")), P("ens"), ens,
        (R(8, 8, 16, scale=0.3), R(8, 16, 4, scale=0.3), R(8, 8)))

# ---------------------------------------------------------------------------
# 10. Megatron sequence parallelism: a LayerNorm on the sequence-sharded
#     activations, then an all-gather of the sequence before causal attention;
#     each shard keeps its own rows of the attention output.
SP_H = 2


def ln(x, g, b):
    m = jnp.mean(x, -1, keepdims=True)
    v = jnp.mean(jnp.square(x - m), -1, keepdims=True)
    return (x - m) * lax.rsqrt(v + 1e-5) * g + b


def sp_attn(x, g, b, wqkv):
    t, d = x.shape
    q, k, v = jnp.split(ln(x, g, b) @ wqkv, 3, -1)
    s = (q @ k.T) * (d ** -0.5)
    s = jnp.where(jnp.arange(t)[None, :] <= jnp.arange(t)[:, None], s, -1e9)
    return x + jax.nn.softmax(s, -1) @ v


def sp_attn_sp(bug):
    def f(x, g, b, wqkv):
        tl, d = x.shape
        if bug == "ln-stats-over-sp":
            m = lax.pmean(jnp.mean(x, -1, keepdims=True), "sp")
            v = lax.pmean(jnp.mean(jnp.square(x - m), -1, keepdims=True), "sp")
            h = (x - m) * lax.rsqrt(v + 1e-5) * g + b
        else:
            h = ln(x, g, b)
        hf = lax.all_gather(h, "sp", axis=0, tiled=True)
        q, k, v = jnp.split(hf @ wqkv, 3, -1)
        t = hf.shape[0]
        s = (q @ k.T) * (d ** -0.5)
        s = jnp.where(jnp.arange(t)[None, :] <= jnp.arange(t)[:, None], s, -1e9)
        o = jax.nn.softmax(s, -1) @ v
        return x + lax.dynamic_slice_in_dim(o, idx("sp") * tl, tl, 0)
    return f


C.smap("s.seqpar_ln_allgather.sp4", {"sp": 4}, sp_attn_sp, (P("sp"), P(), P(), P()), P("sp"), sp_attn,
       (R(16, 8), 1.0 + R(8, scale=0.1), R(8, scale=0.1), R(8, 24, scale=0.3)),
       bugs=[("ln-stats-over-sp", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 11. a Mamba-style linear recurrence h_t = a_t h_{t-1} + b_t by an
#     associative scan over a sequence sharded on sp: each shard scans its
#     block, the carries of the preceding blocks come from an all-gather.


def lin_comb(l, r):
    return l[0] * r[0], r[0] * l[1] + r[1]


def ssm(a, b):
    return lax.associative_scan(lin_comb, (a, b), axis=0)[1]


def ssm_sp(bug):
    n = 4

    def f(a, b):
        A, H = lax.associative_scan(lin_comb, (a, b), axis=0)
        al = lax.all_gather(A[-1], "sp")
        hl = lax.all_gather(H[-1], "sp")
        k = idx("sp")
        c = jnp.zeros_like(H[-1])
        carry = c
        for j in range(n):
            carry = jnp.where(j == k, c, carry)
            c = al[j] * c + hl[j]
        if bug == "no-carry":
            return H
        if bug == "carry-no-decay":
            return H + carry
        return H + A * carry
    return f


C.smap("s.ssm_assoc_scan.sp4", {"sp": 4}, ssm_sp, (P("sp"), P("sp")), P("sp"), ssm,
       (jax.nn.sigmoid(R(16, 8)), R(16, 8)),
       bugs=[("no-carry", ["missing-all-reduce"]), ("carry-no-decay", ["constant-mismatch"])])

# ---------------------------------------------------------------------------
# 12. label-smoothed cross-entropy over a vocabulary sharded on tp: the
#     smoothing term is the mean log-probability over the whole vocabulary.
LS_V, LS_EPS = 32, 0.1


def ls_xent(logits, labels):
    lp = jax.nn.log_softmax(logits)
    nll = -jnp.take_along_axis(lp, labels[:, None], -1)[:, 0]
    return jnp.mean((1 - LS_EPS) * nll - LS_EPS * jnp.mean(lp, -1))


def ls_xent_tp(bug):
    def f(logits, labels):
        vl = logits.shape[-1]
        m = pmax(jnp.max(logits, -1, keepdims=True), "tp")
        lse = jnp.log(psum(jnp.sum(jnp.exp(logits - m), -1, keepdims=True), "tp")) + m
        lp = logits - lse
        lo = idx("tp") * vl
        here = (labels >= lo) & (labels < lo + vl)
        pick = jnp.take_along_axis(lp, jnp.clip(labels - lo, 0, vl - 1)[:, None], -1)[:, 0]
        nll = -psum(jnp.where(here, pick, 0.0), "tp")
        sm = jnp.sum(lp, -1)
        sm = sm / vl if bug == "local-vocab-mean" else psum(sm, "tp") / LS_V
        return jnp.mean((1 - LS_EPS) * nll - LS_EPS * sm)
    return f


C.smap("s.label_smooth_xent.tp4", {"tp": 4}, ls_xent_tp, (P(None, "tp"), P()), P(), ls_xent,
       (R(8, LS_V, scale=2.0), I(0, LS_V, 8)), bugs=[("local-vocab-mean", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 13. a ZeRO-3 step: stacked layer weights sharded over fsdp, each layer's
#     weight all-gathered inside a lax.scan over the layers; the gradient of
#     the all-gather is the reduce-scatter; the batch over fsdp too.
Z_L, Z_D = 3, 8


def z_fwd(ws, x):
    return jnp.sum(lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)[0] ** 2)


def zero3(ws, x):
    nb = x.shape[0]
    loss, g = jax.value_and_grad(lambda ws: z_fwd(ws, x) / nb)(ws)
    return loss, ws - 0.1 * g


def zero3_fsdp(bug):
    def f(ws, x):
        def fwd(ws):
            def layer(h, w):
                return jnp.tanh(h @ lax.all_gather(w, "fsdp", axis=0, tiled=True)), None
            return jnp.sum(lax.scan(layer, x, ws)[0] ** 2)
        nb = x.shape[0] * (1 if bug == "local-batch" else 4)
        loss, g = jax.value_and_grad(lambda ws: fwd(ws) / nb)(ws)
        return psum(loss, "fsdp"), ws - 0.1 * g
    return f


C.smap("s.zero3_scan_layers.fsdp4", {"fsdp": 4}, zero3_fsdp, (P(None, "fsdp"), P("fsdp")), (P(), P(None, "fsdp")),
       zero3, (R(Z_L, Z_D, Z_D, scale=0.4), R(8, Z_D)), bugs=[("local-batch", ["constant-mismatch"])])

# ---------------------------------------------------------------------------
# 14. bf16 parameters cast from f32 master weights, the loss in bf16, the
#     update with optax (clip by global norm, then SGD with momentum) on the
#     f32 masters, under GSPMD on dp x tp.
MX_OPT = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.05, momentum=0.9))


def mixed_step(master, opt, x, y):
    def loss(mw):
        p = jax.tree.map(lambda w: w.astype(jnp.bfloat16), mw)
        h = jax.nn.relu(x.astype(jnp.bfloat16) @ p["w1"]) @ p["w2"]
        return jnp.mean(jnp.square(h.astype(jnp.float32) - y))
    l, g = jax.value_and_grad(loss)(master)
    upd, opt = MX_OPT.update(g, opt, master)
    return optax.apply_updates(master, upd), opt, l


mx_p = {"w1": R(16, 32, scale=0.3), "w2": R(32, 8, scale=0.3)}
mx_spec = {"w1": P(None, "tp"), "w2": P("tp")}
mx_opt = MX_OPT.init(mx_p)
mx_ospec = jax.tree.map(lambda l: P(None, "tp") if np.shape(l) == (16, 32) else P("tp") if np.shape(l) == (32, 8)
                        else P(), mx_opt)
C.gspmd("g.bf16_master_optax_clip.dp2xtp4", {"dp": 2, "tp": 4}, (mx_spec, mx_ospec, P("dp"), P("dp")),
        (mx_spec, mx_ospec, P()), mixed_step, (mx_p, mx_opt, R(8, 16), R(8, 8)))

# ---------------------------------------------------------------------------
# 15. expert parallelism with a capacity: 4 groups of tokens (one per ep
#     device), top-1 routing, dispatch and combine as one_hot einsums, the
#     expert inputs exchanged by all_to_all there and back.
MO_E, MO_C, MO_D = 4, 3, 8


def moe_group(x, wg):
    """x [t, d] one group: dispatch [t, e, c] and combine weights."""
    p = jax.nn.softmax(x @ wg, -1)
    e = jnp.argmax(p, -1)
    oh = jax.nn.one_hot(e, MO_E)
    pos = jnp.sum((jnp.cumsum(oh, 0) - 1) * oh, -1).astype(jnp.int32)
    disp = oh[:, :, None] * jax.nn.one_hot(pos, MO_C)[:, None, :]
    return disp, disp * jnp.max(p, -1)[:, None, None]


def moe(x, wg, we):
    xs = x.reshape(MO_E, -1, MO_D)
    out = []
    for g in range(MO_E):
        disp, comb = moe_group(xs[g], wg)
        ein = jnp.einsum("tec,td->ecd", disp, xs[g])
        eout = jax.nn.gelu(jnp.einsum("ecd,edf->ecf", ein, we))
        out.append(jnp.einsum("tec,ecf->tf", comb, eout))
    return jnp.concatenate(out, 0)


def moe_ep(bug):
    def f(x, wg, we):
        disp, comb = moe_group(x, wg)
        ein = jnp.einsum("tec,td->ecd", disp, x)
        ein = lax.all_to_all(ein, "ep", 0, 0, tiled=True)     # [src groups, c, d] for this expert
        eout = jax.nn.gelu(jnp.einsum("scd,df->scf", ein, we[0]))
        if bug != "no-return-a2a":
            eout = lax.all_to_all(eout, "ep", 0, 0, tiled=True)
        return jnp.einsum("tec,ecf->tf", comb, eout)
    return f


C.smap("s.moe_capacity_a2a.ep4", {"ep": 4}, moe_ep, (P("ep"), P(), P("ep")), P("ep"), moe,
       (R(16, MO_D), R(MO_D, MO_E), R(MO_E, MO_D, MO_D, scale=0.3)),
       bugs=[("no-return-a2a", ["layout-mismatch"])])

# ---------------------------------------------------------------------------
C.finish()
