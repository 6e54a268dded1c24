"""samples/fresh41: a 41st batch of programs as a user writes them, on the
theme of Megatron-style sequence parallelism and fused / interleaved weight
layouts under tensor parallelism in current JAX, none of them an idiom of
samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. fused QKV with per-head packing ([q_h k_h v_h] for each head, the
    Megatron layout) as one flat (D, H*3*E) matrix split contiguously over
    tp4, reshaped on device to (D, H/tp, 3, E); causal attention; the
    output projection row-parallel and psum'd. Bugs: the local columns read
    as a blocked [Q | K | V] layout, the packing inside a head read as
    (E, 3) instead of (3, E).
 2. fused blocked GQA projection [Q (8 heads) | K (4) | V (4)] passed
    replicated; rank r dynamic_slices its 2 query heads and its kv head
    out of each block (batch over dp2, heads over tp4), repeats the kv head,
    row-parallel output projection psum'd. Bugs: one contiguous slice of
    the fused matrix (interleaved reading of a blocked layout), the kv
    block offset strided by the query heads per rank.
 3. SwiGLU MLP with a fused gate-up matrix in the interleaved layout
    (columns g0 u0 g1 u1 ...) split over tp4, Megatron sequence parallel in
    the [s, b, h] layout: RMSNorm on the sequence block, all_gather along
    dim 0, psum_scatter along dim 0, residual. Bugs: the interleaved
    columns split as two blocked halves, gate and up swapped.
 4. sequence-parallel LayerNorm + GELU MLP where the sequence blocks are
    gathered NON-tiled (a new leading tp axis, each device's block of 4
    tokens) and reduce-scattered over that leading axis; the row-parallel
    bias added after the reduce-scatter. Bugs: reduce-scatter along the
    token axis (shape-compatible since the block is 4 = tp), the bias
    added before the reduce-scatter (4x).
 5. NormFormer-style mid-FFN LayerNorm over the tp-sharded hidden dim of a
    SwiGLU with a stacked (D, 2, F) gate-up weight: the activation is
    all_gather'd along the hidden dim, normalised, and the rank's slice
    taken back (dp2 x tp4). Bugs: the norm on the local hidden slice (no
    all-gather before the norm), the slice taken at offset 0.
 6. Ulysses sequence parallelism with a fused blocked QKV (replicated
    weight): all_to_all from sequence to heads (split the head axis,
    concatenate the sequence), full causal attention on H/sp heads,
    all_to_all back. Bugs: the fused output read with per-head packing,
    the all_to_all over the head-dim axis instead of the heads.
 7. tied input / output embedding split over tp along the vocabulary
    (dp2 x tp4): masked lookup with the rank's vocab offset + psum, the
    logits against the same local rows, vocab-parallel cross-entropy
    (pmax'd stop_gradient maximum, psum'd exponentials and target logit),
    loss pmean'd over dp; jax.grad in the body (check_vma=True) and an
    optax.adam step shard-wise. Bugs: lookup without the vocab offset, the
    embedding gradient psum'd over tp (it is already a shard's gradient).
 8. a training step of one pre-norm transformer block (dp2 x tp4,
    check_vma=True): Megatron SP in [b, s, h] (sequence over tp), fused
    per-head-packed QKV and fused interleaved gate-up over tp, psum_scatter
    back to sequence blocks, MSE loss psum'd over tp and pmean'd over dp,
    jax.grad and optax.sgd with Nesterov momentum. Bugs: the QKV read as
    blocked, the gate-up read as blocked, the loss pmean'd over tp instead
    of psum'd.
 9. Ulysses over a 2-D mesh (dp2 x sp4) with 4 kv heads and 8 query heads
    in per-head-group packing ([q q k v] per kv group), non-tiled
    all_to_all (a leading sp axis moved by hand with reshape), bf16
    compute. Bugs: after the back all_to_all the heads put in
    (head-in-group, group) order instead of (group, head-in-group), the
    group packing read as [q k q v].
10. sequence parallel the "gather first" way (dp2 x tp4): the full
    sequence all_gather'd, LayerNorm, MLP and residual on it, the
    row-parallel output psum'd, the rank's block dynamic_slice'd at the
    end. Bugs: the all-reduce over dp instead of tp, the next rank's block
    sliced.
11. Ulysses without all_to_all (sp4): the fused blocked QKV output
    all_gather'd along the sequence and the rank's heads sliced, after
    attention the heads all_gather'd and the rank's sequence block sliced.
    Bugs: the heads sliced at the sequence offset, the sequence sliced at
    the head offset.
GSPMD pairs (jax.jit with in/out shardings): 12. the per-head-packed fused
QKV attention of 1. with the flat weight over tp and the q/k/v heads
constrained over tp; 13. the interleaved SwiGLU of 3. in [s, b, h] with
the residual constrained sequence-parallel; 14. Ulysses by sharding
constraints (sequence over sp, then the fused q/k/v heads over sp, then
the sequence again); 15. the tied-embedding adam step of 7. with the
embedding over tp; 16. the training step of 8. with the parameters over tp
and x, y over (dp, tp); 17. the NormFormer FFN of 5. with the hidden dim
over tp; 18. the adam step of 7. with the tied embedding, the norm gain and the
dense layer over tp along the hidden dim instead.
Numerics: see each manifest entry's "numerics"; correct pairs agree at
rounding level, bug variants differ clearly.
Run from the repository root: bash samples/gen/run_fresh41.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P, NamedSharding
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh41.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh41.py"
C = Corpus("samples/fresh41", SCRIPT, "samples/gen/run_fresh41.sh", sys.argv[1:])
rng, R, I = seeded(4141)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index


def causal_attn(q, k, v):
    """q, k, v (b, t, h, e), causal softmax attention, -1e30 masked."""
    t = q.shape[1]
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) * (q.shape[-1] ** -0.5)
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e30)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, axis=-1), v)


def rmsnorm(x, g=None, eps=1e-6):
    y = x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if g is None else y * g


def layernorm(x, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps)


# ---------------------------------------------------------------------------
# 1. fused QKV, per-head packed, split over tp
B1, T1, D1, H1, E1 = 2, 8, 16, 8, 4


def qkv_packed_ref(x, wqkv, wo):
    w = wqkv.reshape(D1, H1, 3, E1)
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w[:, :, j]) for j in range(3))
    o = causal_attn(q, k, v)
    return o.reshape(B1, T1, H1 * E1) @ wo


def qkv_packed_tp(bug):
    def body(x, wqkv, wo):
        hl = wqkv.shape[1] // (3 * E1)
        if bug == "packed-read-as-blocked":
            w = wqkv.reshape(D1, 3, hl, E1).transpose(0, 2, 1, 3)
        elif bug == "inner-packing-e3":
            w = wqkv.reshape(D1, hl, E1, 3).transpose(0, 1, 3, 2)
        else:
            w = wqkv.reshape(D1, hl, 3, E1)
        qkv = jnp.einsum("btd,dhce->cbthe", x, w)
        o = causal_attn(qkv[0], qkv[1], qkv[2])
        return psum(o.reshape(B1, T1, hl * E1) @ wo, "tp")
    return body


ARGS1 = (R(B1, T1, D1), R(D1, H1 * 3 * E1, scale=0.3), R(H1 * E1, D1, scale=0.3))
C.smap("s.fused_qkv_perhead_packed_cols.tp4", {"tp": 4}, qkv_packed_tp, (P(), P(None, "tp"), P("tp")), P(),
       qkv_packed_ref, ARGS1,
       bugs=[("packed-read-as-blocked", ["wrong-reshape-order"]), ("inner-packing-e3", ["wrong-reshape-order"])])

# ---------------------------------------------------------------------------
# 2. fused blocked GQA projection [Q | K | V], replicated, sliced per rank
B2, T2, D2, HQ2, HKV2, E2 = 4, 8, 16, 8, 4, 4


def gqa_blocked_ref(x, wqkv, wo):
    y = jnp.dot(x, wqkv)
    q = y[..., :HQ2 * E2].reshape(B2, T2, HQ2, E2)
    k = y[..., HQ2 * E2:(HQ2 + HKV2) * E2].reshape(B2, T2, HKV2, E2)
    v = y[..., (HQ2 + HKV2) * E2:].reshape(B2, T2, HKV2, E2)
    k, v = jnp.repeat(k, HQ2 // HKV2, axis=2), jnp.repeat(v, HQ2 // HKV2, axis=2)
    return jnp.dot(causal_attn(q, k, v).reshape(B2, T2, HQ2 * E2), wo)


def gqa_blocked_tp(bug):
    def body(x, wqkv, wo):
        r = idx("tp")
        qh = HQ2 // 4  # query heads per rank; one kv head per rank
        if bug == "contiguous-slice":
            w = lax.dynamic_slice_in_dim(wqkv, r * (qh + 2) * E2, (qh + 2) * E2, axis=1)
            wq, wk, wv = w[:, :qh * E2], w[:, qh * E2:(qh + 1) * E2], w[:, (qh + 1) * E2:]
        else:
            kstride = qh * E2 if bug == "kv-stride-from-q" else E2
            wq = lax.dynamic_slice_in_dim(wqkv, r * qh * E2, qh * E2, axis=1)
            wk = lax.dynamic_slice_in_dim(wqkv, HQ2 * E2 + r * kstride, E2, axis=1)
            wv = lax.dynamic_slice_in_dim(wqkv, (HQ2 + HKV2) * E2 + r * E2, E2, axis=1)
        bl = x.shape[0]
        q = jnp.dot(x, wq).reshape(bl, T2, qh, E2)
        k = jnp.broadcast_to(jnp.dot(x, wk).reshape(bl, T2, 1, E2), q.shape)
        v = jnp.broadcast_to(jnp.dot(x, wv).reshape(bl, T2, 1, E2), q.shape)
        return psum(jnp.dot(causal_attn(q, k, v).reshape(bl, T2, qh * E2), wo), "tp")
    return body


ARGS2 = (R(B2, T2, D2), R(D2, (HQ2 + 2 * HKV2) * E2, scale=0.3), R(HQ2 * E2, D2, scale=0.3))
C.smap("s.fused_gqa_blocked_replicated_slices.dp2xtp4", {"dp": 2, "tp": 4}, gqa_blocked_tp,
       (P("dp"), P(), P("tp")), P("dp"), gqa_blocked_ref, ARGS2,
       bugs=[("contiguous-slice", ["wrong-offset"]), ("kv-stride-from-q", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. SwiGLU with interleaved fused gate-up, Megatron SP in [s, b, h]
T3, B3, D3, F3 = 16, 2, 16, 32


def swiglu_sbh_ref(x, g, wgu, w2):
    gu = (rmsnorm(x, g) @ wgu).reshape(T3, B3, F3, 2)
    return x + (jax.nn.silu(gu[..., 0]) * gu[..., 1]) @ w2


def swiglu_sbh_sp(bug):
    def body(x, g, wgu, w2):
        h = lax.all_gather(rmsnorm(x, g), "tp", axis=0, tiled=True)
        gu = h @ wgu
        if bug == "interleaved-split-blocked":
            gate, up = jnp.split(gu, 2, axis=-1)
        else:
            gu = gu.reshape(gu.shape[:-1] + (gu.shape[-1] // 2, 2))
            gate, up = (gu[..., 1], gu[..., 0]) if bug == "gate-up-swapped" else (gu[..., 0], gu[..., 1])
        y = (jax.nn.silu(gate) * up) @ w2
        return x + lax.psum_scatter(y, "tp", scatter_dimension=0, tiled=True)
    return body


ARGS3 = (R(T3, B3, D3), 1.0 + R(D3, scale=0.2), R(D3, 2 * F3, scale=0.3), R(F3, D3, scale=0.3))
C.smap("s.swiglu_interleaved_gateup_sp_sbh.tp4", {"tp": 4}, swiglu_sbh_sp,
       (P("tp"), P(), P(None, "tp"), P("tp")), P("tp"), swiglu_sbh_ref, ARGS3,
       bugs=[("interleaved-split-blocked", ["wrong-reshape-order"]), ("gate-up-swapped", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 4. SP with a non-tiled gather / scatter over a leading tp axis
B4, T4, D4, F4 = 4, 16, 8, 16


def ln_mlp_ref(x, gam, bet, w1, b1, w2, b2):
    h = layernorm(x) * gam + bet
    return x + jax.nn.gelu(h @ w1 + b1) @ w2 + b2


def ln_mlp_stack_sp(bug):
    def body(x, gam, bet, w1, b1, w2, b2):
        h = layernorm(x) * gam + bet
        hs = lax.all_gather(h, "tp", axis=0)  # (tp, b, t_local, d)
        y = jax.nn.gelu(jnp.einsum("pbtd,df->pbtf", hs, w1) + b1)
        y = jnp.einsum("pbtf,fd->pbtd", y, w2)
        if bug == "bias-before-reduce-scatter":
            y = y + b2
        y = lax.psum_scatter(y, "tp", scatter_dimension=2 if bug == "scatter-token-axis" else 0)
        return x + y if bug == "bias-before-reduce-scatter" else x + y + b2
    return body


ARGS4 = (R(B4, T4, D4), 1.0 + R(D4, scale=0.2), R(D4, scale=0.2), R(D4, F4, scale=0.4), R(F4, scale=0.2),
         R(F4, D4, scale=0.4), R(D4, scale=0.5))
C.smap("s.sp_stacked_gather_scatter_ln_mlp.tp4", {"tp": 4}, ln_mlp_stack_sp,
       (P(None, "tp"), P(), P(), P(None, "tp"), P("tp"), P("tp"), P()), P(None, "tp"), ln_mlp_ref, ARGS4,
       bugs=[("scatter-token-axis", ["wrong-shard-dim"]), ("bias-before-reduce-scatter", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 5. NormFormer mid-FFN LayerNorm over the tp-sharded hidden dim
B5, T5, D5, F5 = 4, 4, 16, 32


def normformer_ref(x, wgu, gam, bet, w2):
    gu = jnp.einsum("btd,dcf->cbtf", x, wgu)
    a = jax.nn.silu(gu[0]) * gu[1]
    return x + (layernorm(a) * gam + bet) @ w2


def normformer_tp(bug):
    def body(x, wgu, gam, bet, w2):
        gu = jnp.einsum("btd,dcf->cbtf", x, wgu)
        a = jax.nn.silu(gu[0]) * gu[1]
        fl = a.shape[-1]
        if bug == "ln-local-hidden":
            n = layernorm(a)
        else:
            full = lax.all_gather(a, "tp", axis=2, tiled=True)
            off = 0 if bug == "slice-offset-0" else idx("tp") * fl
            n = lax.dynamic_slice_in_dim(layernorm(full), off, fl, axis=2)
        return x + psum((n * gam + bet) @ w2, "tp")
    return body


ARGS5 = (R(B5, T5, D5), R(D5, 2, F5, scale=0.3), 1.0 + R(F5, scale=0.2), R(F5, scale=0.2), R(F5, D5, scale=0.3))
C.smap("s.normformer_ffn_ln_hidden_tp.dp2xtp4", {"dp": 2, "tp": 4}, normformer_tp,
       (P("dp"), P(None, None, "tp"), P("tp"), P("tp"), P("tp")), P("dp"), normformer_ref, ARGS5,
       bugs=[("ln-local-hidden", ["missing-collective"]), ("slice-offset-0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 6. Ulysses with a fused blocked QKV
B6, T6, D6, H6, E6 = 2, 16, 16, 8, 4


def ulysses_ref(x, wqkv, wo):
    qkv = (x @ wqkv).reshape(B6, T6, 3, H6, E6)
    o = causal_attn(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2])
    return o.reshape(B6, T6, H6 * E6) @ wo


def ulysses_sp(bug):
    def body(x, wqkv, wo):
        tl = x.shape[1]
        y = x @ wqkv
        if bug == "read-as-perhead-packed":
            qkv = y.reshape(B6, tl, H6, 3, E6).transpose(0, 1, 3, 2, 4)
        else:
            qkv = y.reshape(B6, tl, 3, H6, E6)
        if bug == "a2a-head-dim":
            qkv = lax.all_to_all(qkv, "sp", split_axis=4, concat_axis=1, tiled=True)
        else:
            qkv = lax.all_to_all(qkv, "sp", split_axis=3, concat_axis=1, tiled=True)  # (b, t, 3, h/sp, e)
        o = causal_attn(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2])
        if bug == "a2a-head-dim":
            o = lax.all_to_all(o, "sp", split_axis=1, concat_axis=3, tiled=True)
        else:
            o = lax.all_to_all(o, "sp", split_axis=1, concat_axis=2, tiled=True)  # (b, t/sp, h, e)
        return o.reshape(B6, tl, H6 * E6) @ wo
    return body


ARGS6 = (R(B6, T6, D6), R(D6, 3 * H6 * E6, scale=0.3), R(H6 * E6, D6, scale=0.3))
C.smap("s.ulysses_a2a_fused_blocked_qkv.sp4", {"sp": 4}, ulysses_sp, (P(None, "sp"), P(), P()), P(None, "sp"),
       ulysses_ref, ARGS6,
       bugs=[("read-as-perhead-packed", ["wrong-reshape-order"]), ("a2a-head-dim", ["wrong-shard-dim"])])

# ---------------------------------------------------------------------------
# 7. tied embeddings over tp (vocab), adam step, dp2 x tp4
V7, D7, B7, T7 = 32, 16, 4, 8
OPT7 = optax.adam(3e-2)


def tied_fwd_ref(p, tok):
    x = p["emb"][tok]
    h = x + jnp.tanh(rmsnorm(x, p["g"]) @ p["w"])
    return (rmsnorm(h) @ p["emb"].T) * (D7 ** -0.5)


def tied_step_ref(p, s, tok):
    def loss(p):
        lg = tied_fwd_ref(p, tok[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(lg, tok[:, 1:]).mean()
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT7.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def tied_step_tp(bug):
    def body(p, s, tok):
        def loss(p):
            emb = p["emb"]
            vl = emb.shape[0]
            off = idx("tp") * vl
            inp, tgt = tok[:, :-1], tok[:, 1:]
            loc = inp if bug == "lookup-no-offset" else inp - off
            hit = (loc >= 0) & (loc < vl)
            x = psum(jnp.where(hit[..., None], jnp.take(emb, jnp.clip(loc, 0, vl - 1), axis=0), 0.0), "tp")
            h = x + jnp.tanh(rmsnorm(x, p["g"]) @ p["w"])
            lg = (rmsnorm(h) @ emb.T) * (D7 ** -0.5)  # (b, t, vocab / tp)
            m = pmax(lax.stop_gradient(lg.max(-1)), "tp")
            lse = jnp.log(psum(jnp.exp(lg - m[..., None]).sum(-1), "tp")) + m
            tl = tgt - off
            th = (tl >= 0) & (tl < vl)
            zt = psum(jnp.where(th, jnp.take_along_axis(lg, jnp.clip(tl, 0, vl - 1)[..., None], -1)[..., 0], 0.0),
                      "tp")
            return pmean((lse - zt).mean(), "dp")
        l, g = jax.value_and_grad(loss)(p)
        if bug == "emb-grad-psummed":
            g = dict(g, emb=psum(g["emb"], "tp"))
        u, s = OPT7.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return body


P7 = {"emb": R(V7, D7, scale=0.7), "g": 1.0 + R(D7, scale=0.2), "w": R(D7, D7, scale=0.3)}
SPEC7 = {"emb": P("tp", None), "g": P(), "w": P()}
S7 = OPT7.init(P7)
SS7 = state_specs(S7, SPEC7)
TOK7 = I(0, V7, B7, T7 + 1)
C.smap("s.tied_embedding_vocab_tp_adam.dp2xtp4", {"dp": 2, "tp": 4}, tied_step_tp, (SPEC7, SS7, P("dp")),
       (SPEC7, SS7, P()), tied_step_ref, (P7, S7, TOK7),
       bugs=[("lookup-no-offset", ["wrong-offset"]), ("emb-grad-psummed", ["wrong-collective-op"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 8. training step of a block with SP + fused QKV + fused gate-up, sgd nesterov
B8, T8, D8, H8, E8, F8 = 4, 8, 16, 8, 2, 32  # 2 heads per tp rank
OPT8 = optax.sgd(0.05, momentum=0.9, nesterov=True)


def block8(p, x, gather=lambda h: h, scatter=lambda y: y, bug=None):
    def qkv_w(w):
        hl = w.shape[1] // (3 * E8)
        if bug == "qkv-read-blocked":
            return w.reshape(D8, 3, hl, E8).transpose(0, 2, 1, 3)
        return w.reshape(D8, hl, 3, E8)
    h = gather(rmsnorm(x, p["g1"]))
    qkv = jnp.einsum("btd,dhce->cbthe", h, qkv_w(p["wqkv"]))
    o = causal_attn(qkv[0], qkv[1], qkv[2])
    x = x + scatter(o.reshape(o.shape[:2] + (-1,)) @ p["wo"])
    h = gather(rmsnorm(x, p["g2"]))
    gu = h @ p["wgu"]
    if bug == "gateup-read-blocked":
        gate, up = jnp.split(gu, 2, -1)
    else:
        gu = gu.reshape(gu.shape[:-1] + (-1, 2))
        gate, up = gu[..., 0], gu[..., 1]
    return x + scatter((jax.nn.silu(gate) * up) @ p["w2"])


def step8_ref(p, s, x, y):
    def loss(p):
        return jnp.mean((block8(p, x) - y) ** 2)
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT8.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step8_sm(bug):
    def body(p, s, x, y):
        def loss(p):
            out = block8(p, x, lambda h: lax.all_gather(h, "tp", axis=1, tiled=True),
                         lambda y: lax.psum_scatter(y, "tp", scatter_dimension=1, tiled=True), bug)
            sq = jnp.sum((out - y) ** 2)
            tot = pmean(sq, "tp") if bug == "loss-pmean-over-tp" else psum(sq, "tp")
            return pmean(tot / (x.shape[0] * T8 * D8), "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT8.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return body


P8 = {"g1": 1.0 + R(D8, scale=0.1), "wqkv": R(D8, H8 * 3 * E8, scale=0.3), "wo": R(H8 * E8, D8, scale=0.3),
      "g2": 1.0 + R(D8, scale=0.1), "wgu": R(D8, 2 * F8, scale=0.3), "w2": R(F8, D8, scale=0.3)}
SPEC8 = {"g1": P(), "wqkv": P(None, "tp"), "wo": P("tp"), "g2": P(), "wgu": P(None, "tp"), "w2": P("tp")}
S8 = OPT8.init(P8)
SS8 = state_specs(S8, SPEC8)
XY8 = (R(B8, T8, D8), R(B8, T8, D8))
C.smap("s.train_block_sp_fused_qkv_gateup_sgd.dp2xtp4", {"dp": 2, "tp": 4}, step8_sm,
       (SPEC8, SS8, P("dp", "tp"), P("dp", "tp")), (SPEC8, SS8, P()), step8_ref, (P8, S8) + XY8,
       bugs=[("qkv-read-blocked", ["wrong-reshape-order"]), ("gateup-read-blocked", ["wrong-reshape-order"]),
             ("loss-pmean-over-tp", ["wrong-collective-op"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 9. Ulysses GQA, per-group packing [q q k v], non-tiled all_to_all, bf16, dp2 x sp4
B9, T9, D9, G9, E9 = 4, 8, 16, 4, 4  # 4 kv groups, 2 query heads each
BF = jnp.bfloat16


def gqa_group_ref(x, w, wo):
    y = (x.astype(BF) @ w.astype(BF)).reshape(x.shape[0], T9, G9, 4, E9)
    q = y[:, :, :, :2].reshape(x.shape[0], T9, 2 * G9, E9)
    k = jnp.repeat(y[:, :, :, 2], 2, axis=2)
    v = jnp.repeat(y[:, :, :, 3], 2, axis=2)
    o = causal_attn(q, k, v)
    return (o.reshape(x.shape[0], T9, -1) @ wo.astype(BF)).astype(jnp.float32)


def gqa_group_ulysses(bug):
    def body(x, w, wo):
        bl, tl = x.shape[:2]
        y = (x.astype(BF) @ w.astype(BF)).reshape(bl, tl, G9, 4, E9)
        # one kv group per device: (b, tl, sp, 4, e) -> (sp, b, tl, 4, e), a2a over the leading axis
        y = jnp.moveaxis(y, 2, 0)
        y = lax.all_to_all(y, "sp", 0, 0)  # leading axis now indexes the source sequence block
        y = jnp.moveaxis(y, 0, 1).reshape(bl, 4 * tl, 4, E9)  # (b, t, 4, e), this device's group
        if bug == "group-read-qkqv":
            q, k, v = y[:, :, 0::2], y[:, :, 1], y[:, :, 3]
        else:
            q, k, v = y[:, :, :2], y[:, :, 2], y[:, :, 3]
        o = causal_attn(q, jnp.repeat(k[:, :, None], 2, 2), jnp.repeat(v[:, :, None], 2, 2))  # (b, t, 2, e)
        o = o.reshape(bl, 4, tl, 2, E9)
        o = jnp.moveaxis(o, 1, 0)
        o = lax.all_to_all(o, "sp", 0, 0)  # (sp: source group, b, tl, 2, e)
        if bug == "a2a-back-head-order":
            o = o.transpose(1, 2, 3, 0, 4)  # heads as (2, group): j * G + g
        else:
            o = o.transpose(1, 2, 0, 3, 4)  # heads as (group, 2): g * 2 + j
        return (o.reshape(bl, tl, -1) @ wo.astype(BF)).astype(jnp.float32)
    return body


ARGS9 = (R(B9, T9, D9), R(D9, G9 * 4 * E9, scale=0.3), R(2 * G9 * E9, D9, scale=0.3))
C.smap("s.ulysses_gqa_group_packed_bf16.dp2xsp4", {"dp": 2, "sp": 4}, gqa_group_ulysses,
       (P("dp", "sp"), P(), P()), P("dp", "sp"), gqa_group_ref, ARGS9,
       bugs=[("a2a-back-head-order", ["wrong-reshape-order"]), ("group-read-qkqv", ["wrong-reshape-order"])])


# ---------------------------------------------------------------------------
# 10. sequence parallel written the "gather first" way: the full sequence
#     all_gather'd, the norm and the residual on the full sequence
#     (redundant on every rank), the row-parallel output all-reduced with
#     psum, the rank's sequence block dynamic_slice'd at the end; batch over dp.


def sp_gather_first(bug):
    def body(x, gam, bet, w1, b1, w2, b2):
        tl = x.shape[1]
        xf = lax.all_gather(x, "tp", axis=1, tiled=True)
        h = layernorm(xf) * gam + bet
        y = jax.nn.gelu(h @ w1 + b1) @ w2
        y = psum(y, "dp") if bug == "allreduce-over-dp" else psum(y, "tp")
        out = xf + y + b2
        r = idx("tp")
        off = ((r + 1) % 4) * tl if bug == "slice-next-block" else r * tl
        return lax.dynamic_slice_in_dim(out, off, tl, axis=1)
    return body


C.smap("s.sp_gather_first_allreduce_then_slice.dp2xtp4", {"dp": 2, "tp": 4}, sp_gather_first,
       (P("dp", "tp"), P(), P(), P(None, "tp"), P("tp"), P("tp"), P()), P("dp", "tp"), ln_mlp_ref, ARGS4,
       bugs=[("allreduce-over-dp", ["wrong-collective-group"]), ("slice-next-block", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 11. Ulysses without all_to_all: the fused blocked QKV output all_gather'd
#     along the sequence and the rank's heads dynamic_slice'd; after
#     attention the heads all_gather'd and the rank's sequence block sliced.


def ulysses_by_gather(bug):
    def body(x, wqkv, wo):
        tl, hl, r = x.shape[1], H6 // 4, idx("sp")
        y = (x @ wqkv).reshape(B6, tl, 3, H6, E6)
        yf = lax.all_gather(y, "sp", axis=1, tiled=True)
        yh = lax.dynamic_slice_in_dim(yf, (r * tl if bug == "head-slice-at-seq-offset" else r * hl), hl, axis=3)
        o = causal_attn(yh[:, :, 0], yh[:, :, 1], yh[:, :, 2])  # (b, t, hl, e)
        of = lax.all_gather(o, "sp", axis=2, tiled=True)  # (b, t, h, e)
        o = lax.dynamic_slice_in_dim(of, (r * hl if bug == "seq-slice-at-head-offset" else r * tl), tl, axis=1)
        return o.reshape(B6, tl, H6 * E6) @ wo
    return body


C.smap("s.ulysses_by_allgather_and_slices.sp4", {"sp": 4}, ulysses_by_gather, (P(None, "sp"), P(), P()),
       P(None, "sp"), ulysses_ref, ARGS6,
       bugs=[("head-slice-at-seq-offset", ["wrong-offset"]), ("seq-slice-at-head-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# GSPMD pairs
M10 = make_mesh({"tp": 4})


def qkv_packed_cons(x, wqkv, wo):
    w = wqkv.reshape(D1, H1, 3, E1)
    qkv = jnp.einsum("btd,dhce->cbthe", x, w)
    qkv = lax.with_sharding_constraint(qkv, NamedSharding(M10, P(None, None, None, "tp")))
    o = causal_attn(qkv[0], qkv[1], qkv[2])
    return o.reshape(B1, T1, H1 * E1) @ wo


C.gspmd("g.fused_qkv_perhead_packed_heads_constrained.tp4", {"tp": 4}, (P(), P(None, "tp"), P("tp")), P(),
        qkv_packed_cons, ARGS1)


def swiglu_sbh_cons(x, g, wgu, w2):
    sp = NamedSharding(M10, P("tp"))
    h = rmsnorm(lax.with_sharding_constraint(x, sp), g)
    gu = (h @ wgu).reshape(T3, B3, F3, 2)
    gu = lax.with_sharding_constraint(gu, NamedSharding(M10, P(None, None, "tp", None)))
    return lax.with_sharding_constraint(x + (jax.nn.silu(gu[..., 0]) * gu[..., 1]) @ w2, sp)


C.gspmd("g.swiglu_interleaved_gateup_sp_sbh.tp4", {"tp": 4}, (P("tp"), P(), P(None, "tp"), P("tp")), P("tp"),
        swiglu_sbh_cons, ARGS3)

M12 = make_mesh({"sp": 4})


def ulysses_cons(x, wqkv, wo):
    seq = NamedSharding(M12, P(None, "sp"))
    qkv = (lax.with_sharding_constraint(x, seq) @ wqkv).reshape(B6, T6, 3, H6, E6)
    qkv = lax.with_sharding_constraint(qkv, seq)
    qkv = lax.with_sharding_constraint(qkv, NamedSharding(M12, P(None, None, None, "sp")))
    o = causal_attn(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2])
    o = lax.with_sharding_constraint(o, seq)
    return o.reshape(B6, T6, H6 * E6) @ wo


C.gspmd("g.ulysses_by_constraints_fused_qkv.sp4", {"sp": 4}, (P(None, "sp"), P(), P()), P(None, "sp"),
        ulysses_cons, ARGS6)

C.gspmd("g.tied_embedding_vocab_tp_adam.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC7, SS7, P("dp")), (SPEC7, SS7, P()),
        tied_step_ref, (P7, S7, TOK7))

M14 = make_mesh({"dp": 2, "tp": 4})


def step8_cons(p, s, x, y):
    seq = NamedSharding(M14, P("dp", "tp"))

    def loss(p):
        out = block8(p, x, scatter=lambda a: lax.with_sharding_constraint(a, seq))
        return jnp.mean((out - y) ** 2)
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT8.update(g, s, p)
    return optax.apply_updates(p, u), s, l


C.gspmd("g.train_block_sp_fused_qkv_gateup_sgd.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC8, SS8, P("dp", "tp"), P("dp", "tp")),
        (SPEC8, SS8, P()), step8_cons, (P8, S8) + XY8)

C.gspmd("g.normformer_ffn_ln_hidden_tp.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp"), P(None, None, "tp"), P("tp"), P("tp"), P("tp")), P("dp"), normformer_ref, ARGS5)

SPEC16 = {"emb": P(None, "tp"), "g": P("tp"), "w": P(None, "tp")}
C.gspmd("g.tied_embedding_hidden_tp_adam.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC16, state_specs(S7, SPEC16), P("dp")),
        (SPEC16, state_specs(S7, SPEC16), P()), tied_step_ref, (P7, S7, TOK7))

C.finish()
