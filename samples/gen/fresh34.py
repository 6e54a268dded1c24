"""samples/fresh34: a 34th batch of programs as a user writes them, on the
theme of memory-saving and chunked computation in sharded training (JAX /
optax), none of them an idiom of samples/fresh .. fresh33, probe, train or
wild.
shard_map families:
 1. vocab-parallel cross-entropy computed over vocabulary chunks: vocab over
    tp4, batch over dp2, a lax.scan over the local head's column blocks
    carrying a running max, a running sum of exponentials rescaled at every
    new max, and the target logit picked at the global index tp offset +
    chunk * size; the per-rank (max, sum) merged by pmax and a rescaled psum;
    the loss pmean'd over dp. Bugs: running sum not rescaled when the max
    grows, target index from the local chunk index (no tp offset), target
    logit not psum'd over tp.
 2. a masked token loss computed in sequence chunks by lax.fori_loop
    (dynamic_slice of the hidden states and labels, ignore index -100),
    the head FSDP-sharded over dp and all_gather'd, (loss sum, token count)
    accumulated in the loop carry and psum'd over dp, with its gradient in
    the head shard by jax.value_and_grad (check_vma=True). Bugs: the loop
    stops one chunk short, the count taken as all tokens of a chunk
    (ignored ones included).
 3. blockwise (flash-style) causal attention with the sequence over sp4:
    keys and values all_gather'd, the running (max, denominator,
    accumulator) initialised from the device's own diagonal block and a
    lax.scan over the key blocks, the blocks at or after the device masked.
    Bugs: the carry initialised from key block 0 (another shard's block),
    the accumulator not rescaled, the mask letting the diagonal block in a
    second time.
 4. a chunked tensor-parallel MLP over the sequence: jax.lax.map over
    sequence chunks of a pre-norm GELU MLP in bf16 with f32 accumulation,
    w1 columns and w2 rows over tp4, batch over dp2, the chunk function
    under jax.checkpoint(dots_with_no_batch_dims_saveable), the row-parallel
    output psum'd in the chunk. Bugs: chunks reassembled without moving the
    chunk axis back (tokens land in other rows), pmean instead of psum.
 5. two SGD-with-momentum steps, each accumulating gradients over 2
    micro-batches of the local batch in a lax.scan as a running mean
    (acc + (g - acc) / (i + 1)), a Megatron MLP regression on dp2 x tp4
    (check_vma=True): each micro-batch's loss pmean'd over dp, so the
    transpose does the dp reduction of the gradients. Bugs: the running
    mean's divisor off by one, the scan over the micro-batches but the
    last, the micro-batch loss psum'd over dp.
 6. ZeRO-2-style accumulation: gradients of replicated parameters summed
    over 4 micro-batches in a lax.fori_loop, then one psum_scatter over dp4
    and a division by dp * M; SGD with Nesterov momentum on the device's
    slice (momentum kept sharded), the new slices all_gather'd. Bugs:
    divided by M only, the slice of the parameters taken at offset 0, the
    loop forgetting the last micro-batch.
 7. a stack of 3 Megatron MLP layers (stacked weights, tp4) run by a
    lax.scan over jax.checkpoint'ed layers with
    save_only_these_names(checkpoint_name "pre"), batch over dp2, the loss
    and jax.grad of the stacked weights (check_vma=True). Bugs: the layer
    scan reversed, the loss psum'd over dp.
 8. jax.remat of a whole 2-layer stack under FSDP (dp2 x fsdp4, batch over
    both): each layer's weight all_gather'd over fsdp inside the
    remat'ed function (nothing_saveable), two full training steps with
    optax.sgd(momentum) in a Python loop (check_vma=True). Bugs: loss
    pmean'd over fsdp only (gradients twice as large), the second step's
    gradient at the first step's parameters, the untiled all_gather
    reassembled in the wrong order.
 9. query-chunked causal attention by lax.map (chunks of 4 queries against
    all keys, jax.checkpoint around each chunk), heads over tp4, output
    projection rows over tp and psum'd. Bugs: causal mask without the
    chunk's offset, output not psum'd.
10. a fused memory-efficient cross-entropy written with jax.custom_vjp,
    vocab over tp4: the forward a lax.fori_loop over vocabulary blocks for
    the local log-sum-exp merged by pmax / psum, the backward recomputing
    softmax minus one-hot block by block, the hidden-state gradient psum'd
    over tp; value_and_grad of the mean loss in hidden states and head.
    Bugs: the one-hot at local block indices (no tp offset), the softmax of
    the backward normalised by the local log-sum-exp, the hidden-state
    gradient not psum'd.
11. a token-weighted loss over micro-batches split over dp4 (x is
    (M, B, ...) with B over dp): a lax.scan over the micro-batches summing
    the masked loss sums and token counts; gradients and counts psum'd over
    dp and divided once; one optax.adam step. Bugs: mean of micro-batch
    means, the count not psum'd over dp.
12. non-causal (encoder) blockwise attention: a lax.scan over key blocks of
    4 with the queries pre-scaled by E ** -0.5 (the baseline divides the
    scores by sqrt(E)), heads over tp4, batch over dp2, output projection
    psum'd. Bugs: the scale applied a second time to the scores, the
    denominator not rescaled at a new max.
13. gradient accumulation over 3 micro-batches (lax.scan, sum, then times
    1 / 3), gradients pmean'd over dp2, one plain SGD step. Bugs: the scan
    skipping the last micro-batch, the sum scaled by 1 / dp instead of
    1 / M.
14. bidirectional attention with the sequence over sp4: keys and values
    all_gather'd untiled and a lax.scan over the 4 gathered blocks with the
    online softmax, the scale the Python constant 1 / math.sqrt(E)
    multiplied in (the baseline divides by jnp.sqrt(E)). Bugs: the values
    taken from the gathered keys, the accumulator rescaled twice.
15. gradient accumulation over strided micro-batches (micro-batch j is rows
    j, j + 3, ... of the local batch, by reshape and swapaxes), a running
    mean in a lax.scan over (index, micro-batch), gradients pmean'd over
    dp4, optax.chain(add_decayed_weights, sgd). Bugs: the last micro-batch
    skipped, gradients not pmean'd.
GSPMD pairs (jax.jit with in/out shardings): 16. the chunked vocab scan of 1.
with its gradient (dp2 x tp4); 17. gradient accumulation by lax.scan and an
optax.adamw step with FSDP parameters over dp4; 18. blockwise causal
attention by lax.scan over key blocks, sequence over sp4; 19. the lax.map
chunked MLP under a remat policy with tp-sharded weights (dp2 x tp4); 20.
a jax.remat'ed scan over a stacked layer dim, two optax.adam steps, FSDP x TP.
Known miss: 2.'s count-all-tokens (the witness's random labels are never
the ignore index). Left out: jax.device_put / host offloading inside jit
(memory kinds), replaced by remat policies.
Numerics: see each pair's "numerics"; correct pairs agree at rounding level,
bug variants differ clearly.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh34.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import math
import sys
from functools import partial
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
from jax.ad_checkpoint import checkpoint_name
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh34.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh34.py"
C = Corpus("samples/fresh34", SCRIPT, "samples/gen/run_fresh34.sh", sys.argv[1:])
rng, R, I = seeded(3434)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
POL = jax.checkpoint_policies
NEG = -1e30

# ---------------------------------------------------------------------------
# 1. vocab-parallel CE over vocabulary chunks (scan, online log-sum-exp).
B1, T1, D1, V1, CS1 = 4, 4, 16, 64, 4


def ce_full(h, w, y):
    lg = jnp.einsum("btd,dv->btv", h, w)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, y))


def chunked_vocab_ce(bug):
    def f(h, w, y):
        vl = w.shape[1]
        nc = vl // CS1
        off = idx("tp") * vl
        wc = jnp.moveaxis(w.reshape(w.shape[0], nc, CS1), 1, 0)  # (nc, d, cs)

        def body(carry, xs):
            m, s, tgt = carry
            c, wk = xs
            lg = jnp.einsum("btd,dv->btv", h, wk)
            m_new = jnp.maximum(m, jnp.max(lg, -1))
            if bug == "sum-not-rescaled":
                s = s + jnp.sum(jnp.exp(lg - m_new[..., None]), -1)
            else:
                s = s * jnp.exp(m - m_new) + jnp.sum(jnp.exp(lg - m_new[..., None]), -1)
            base = c * CS1 if bug == "local-chunk-index" else off + c * CS1
            hit = y[..., None] == base + jnp.arange(CS1)
            tgt = tgt + jnp.sum(jnp.where(hit, lg, 0.0), -1)
            return (m_new, s, tgt), None

        init = (jnp.full(y.shape, -jnp.inf), jnp.zeros(y.shape), jnp.zeros(y.shape))
        (m, s, tgt), _ = lax.scan(body, init, (jnp.arange(nc), wc))
        mg = pmax(m, "tp")
        lse = mg + jnp.log(psum(s * jnp.exp(m - mg), "tp"))
        if bug != "target-not-psummed":
            tgt = psum(tgt, "tp")
        return pmean(jnp.mean(lse - tgt), "dp")
    return f


C.smap("s.vocab_chunk_scan_online_lse.dp2xtp4", {"dp": 2, "tp": 4}, chunked_vocab_ce,
       (P("dp"), P(None, "tp"), P("dp")), P(), ce_full,
       (R(B1, T1, D1), R(D1, V1, scale=0.6), I(0, V1, B1, T1)),
       bugs=[("sum-not-rescaled", ["wrong-scale"]), ("local-chunk-index", ["wrong-offset"]),
             ("target-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 2. masked token loss in sequence chunks (fori_loop), head FSDP over dp,
#    (sum, count) psum'd over dp, value_and_grad in the head shard.
B2, T2, D2, V2, CS2 = 4, 8, 16, 32, 2
IGN = -100


def masked_ce(h, w, y):
    def loss(w):
        lg = jnp.einsum("btd,dv->btv", h, w)
        ok = y != IGN
        ce = optax.softmax_cross_entropy_with_integer_labels(lg, jnp.where(ok, y, 0))
        return jnp.sum(jnp.where(ok, ce, 0.0)) / jnp.sum(ok)
    return jax.value_and_grad(loss)(w)


def seq_chunk_loss(bug):
    def f(h, w, y):
        def loss(w):
            wf = lax.all_gather(w, "dp", axis=0, tiled=True)
            nc = h.shape[1] // CS2
            stop = nc - 1 if bug == "loop-one-short" else nc

            def body(c, carry):
                tot, cnt = carry
                hc = lax.dynamic_slice_in_dim(h, c * CS2, CS2, 1)
                yc = lax.dynamic_slice_in_dim(y, c * CS2, CS2, 1)
                ok = yc != IGN
                ce = optax.softmax_cross_entropy_with_integer_labels(hc @ wf, jnp.where(ok, yc, 0))
                n = jnp.float32(yc.size) if bug == "count-all-tokens" else jnp.sum(ok).astype(jnp.float32)
                return tot + jnp.sum(jnp.where(ok, ce, 0.0)), cnt + n
            zero = lax.pcast(jnp.float32(0), "dp", to="varying")
            tot, cnt = lax.fori_loop(0, stop, body, (zero, zero))
            return psum(tot, "dp") / psum(cnt, "dp")
        return jax.value_and_grad(loss)(w)
    return f


Y2 = I(0, V2, B2, T2)
Y2[rng.random((B2, T2)) < 0.3] = IGN
Y2[0, :5] = IGN  # the first rows (dp shard 0) have more ignored tokens
C.smap("s.seq_chunk_masked_loss_fsdp_head.dp4", {"dp": 4}, seq_chunk_loss,
       (P("dp"), P("dp"), P("dp")), (P(), P("dp")), masked_ce,
       (R(B2, T2, D2), R(D2, V2, scale=0.5), Y2),
       bugs=[("loop-one-short", ["wrong-reduction"]), ("count-all-tokens", ["wrong-scale"])], check_vma=True)

# ---------------------------------------------------------------------------
# 3. blockwise causal attention, sequence over sp4, scan over key blocks.
B3, T3, H3, E3 = 2, 16, 2, 8


def causal_attn(q, k, v):
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    s = jnp.where(jnp.tril(jnp.ones((q.shape[1],) * 2, bool)), s, NEG)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def blockwise_cp(bug):
    def f(q, k, v):
        n, tl = 4, q.shape[1]
        me = idx("sp")
        kk = lax.all_gather(k, "sp")  # (n, b, tl, h, e)
        vv = lax.all_gather(v, "sp")
        scale = 1.0 / np.sqrt(q.shape[-1])

        def scores(kb):
            return jnp.einsum("bqhe,bkhe->bhqk", q, kb) * scale

        # the diagonal block: causal inside the block
        k0, v0 = (k, v) if bug != "init-from-block-0" else (kk[0], vv[0])
        s0 = jnp.where(jnp.tril(jnp.ones((tl, tl), bool)), scores(k0), NEG)
        m = jnp.max(s0, -1)
        p0 = jnp.exp(s0 - m[..., None])
        l = jnp.sum(p0, -1)
        acc = jnp.einsum("bhqk,bkhe->bhqe", p0, v0)

        def body(carry, xs):
            m, l, acc = carry
            j, kb, vb = xs
            vis = (j <= me) if bug == "diag-twice" else (j < me)
            s = jnp.where(vis, scores(kb), NEG)
            m_new = jnp.maximum(m, jnp.max(s, -1))
            p = jnp.exp(s - m_new[..., None])
            a = jnp.exp(m - m_new)
            l = l * a + jnp.sum(p, -1)
            pv = jnp.einsum("bhqk,bkhe->bhqe", p, vb)
            acc = acc + pv if bug == "acc-not-rescaled" else acc * a[..., None] + pv
            return (m_new, l, acc), None

        (m, l, acc), _ = lax.scan(body, (m, l, acc), (jnp.arange(n), kk, vv))
        return jnp.einsum("bhqe->bqhe", acc / l[..., None])
    return f


C.smap("s.blockwise_causal_scan_keyblocks.sp4", {"sp": 4}, blockwise_cp, (P(None, "sp"),) * 3, P(None, "sp"),
       causal_attn, (R(B3, T3, H3, E3), R(B3, T3, H3, E3), R(B3, T3, H3, E3)),
       bugs=[("init-from-block-0", ["wrong-offset"]), ("acc-not-rescaled", ["wrong-scale"]),
             ("diag-twice", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 4. chunked TP MLP over the sequence by lax.map, bf16, remat policy.
B4, T4, D4, F4, CS4 = 4, 8, 16, 32, 2


def rms(x, g, eps=1e-6):
    xf = x.astype(jnp.float32)
    return (xf * lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + eps)).astype(x.dtype) * g


def mlp_ref(x, g, w1, w2):
    h = jnp.einsum("btd,df->btf", rms(x, g), w1, preferred_element_type=jnp.float32)
    o = jnp.einsum("btf,fd->btd", jax.nn.gelu(h).astype(jnp.bfloat16), w2, preferred_element_type=jnp.float32)
    return x + o.astype(jnp.bfloat16)


def chunked_mlp_tp(bug):
    def f(x, g, w1, w2):
        b, t, d = x.shape
        nc = t // CS4

        @partial(jax.checkpoint, policy=POL.dots_with_no_batch_dims_saveable)
        def chunk(xc):
            h = jnp.einsum("btd,df->btf", rms(xc, g), w1, preferred_element_type=jnp.float32)
            o = jnp.einsum("btf,fd->btd", jax.nn.gelu(h).astype(jnp.bfloat16), w2,
                           preferred_element_type=jnp.float32)
            o = pmean(o, "tp") if bug == "pmean-not-psum" else psum(o, "tp")
            return xc + o.astype(jnp.bfloat16)

        xs = jnp.swapaxes(x.reshape(b, nc, CS4, d), 0, 1)  # (nc, b, cs, d)
        ys = lax.map(chunk, xs)
        if bug == "chunk-axis-not-moved-back":
            return ys.reshape(b, t, d)
        return jnp.swapaxes(ys, 0, 1).reshape(b, t, d)
    return f


bf = jnp.bfloat16
C.smap("s.lax_map_seq_chunked_mlp_bf16_remat.dp2xtp4", {"dp": 2, "tp": 4}, chunked_mlp_tp,
       (P("dp"), P(), P(None, "tp"), P("tp", None)), P("dp"), mlp_ref,
       (R(B4, T4, D4, dt=bf), (1.0 + R(D4, scale=0.1)).astype(bf), R(D4, F4, scale=0.3, dt=bf),
        R(F4, D4, scale=0.3, dt=bf)),
       bugs=[("chunk-axis-not-moved-back", ["wrong-reshape-order"]), ("pmean-not-psum", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 5. two momentum-SGD steps with a running-mean gradient accumulation over
#    micro-batches (lax.scan), Megatron MLP regression on dp2 x tp4.
B5, D5, F5, M5 = 8, 8, 16, 2
OPT5 = optax.sgd(0.05, momentum=0.9)


def mlp5(p, x, tp_sum=lambda y: y):
    return tp_sum(jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"])


def two_steps_ref(p, s, x, y):
    for _ in range(2):
        g = jax.grad(lambda p: jnp.mean(jnp.square(mlp5(p, x) - y)))(p)
        u, s = OPT5.update(g, s, p)
        p = optax.apply_updates(p, u)
    return p, s


def accum_running_mean(bug):
    def f(p, s, x, y):
        mb = x.shape[0] // M5
        xs, ys = x.reshape(M5, mb, -1), y.reshape(M5, mb, -1)
        if bug == "last-micro-dropped":
            xs, ys = xs[:-1], ys[:-1]

        def micro_loss(p, xm, ym):
            l = jnp.mean(jnp.square(mlp5(p, xm, lambda a: psum(a, "tp")) - ym))
            return psum(l, "dp") if bug == "psum-over-dp" else pmean(l, "dp")

        for _ in range(2):
            def body(acc, xs_):
                i, xm, ym = xs_
                g = jax.grad(micro_loss)(p, xm, ym)
                k = i + 2 if bug == "divisor-off-by-one" else i + 1
                return jax.tree.map(lambda a, b: a + (b - a) / k, acc, g), None
            acc0 = jax.tree.map(jnp.zeros_like, p)
            g, _ = lax.scan(body, acc0, (jnp.arange(xs.shape[0]), xs, ys))
            u, s = OPT5.update(g, s, p)
            p = optax.apply_updates(p, u)
        return p, s
    return f


P5 = {"w1": R(D5, F5, scale=0.4), "b1": R(F5, scale=0.1), "w2": R(F5, D5, scale=0.4)}
SPEC5 = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp", None)}
S5 = OPT5.init(P5)
SS5 = state_specs(S5, SPEC5)
C.smap("s.grad_accum_running_mean_two_sgd_steps.dp2xtp4", {"dp": 2, "tp": 4}, accum_running_mean,
       (SPEC5, SS5, P("dp"), P("dp")), (SPEC5, SS5), two_steps_ref,
       (P5, S5, R(B5, D5), R(B5, D5)),
       bugs=[("divisor-off-by-one", ["wrong-scale"]), ("last-micro-dropped", ["wrong-reduction"]),
             ("psum-over-dp", ["wrong-scale"])], check_vma=True)

# ---------------------------------------------------------------------------
# 6. ZeRO-2 style: local gradient sum over micro-batches (fori_loop), one
#    psum_scatter over dp4 / (dp * M), Nesterov SGD on the slice, all_gather.
B6, D6, O6, M6 = 16, 8, 8, 4
OPT6 = optax.sgd(0.1, momentum=0.8, nesterov=True)


def lin_loss(p, x, y):
    return jnp.mean(jnp.square(jnp.tanh(x @ p["w"]) @ p["v"] - y))


def zero2_ref(p, s, x, y):
    g = jax.grad(lin_loss)(p, x, y)
    u, s = OPT6.update(g, s, p)
    return optax.apply_updates(p, u), s


def zero2(bug):
    def f(p, s, x, y):
        n = 4
        mb = x.shape[0] // M6
        stop = M6 - 1 if bug == "loop-drops-last" else M6

        def body(i, acc):
            xm = lax.dynamic_slice_in_dim(x, i * mb, mb, 0)
            ym = lax.dynamic_slice_in_dim(y, i * mb, mb, 0)
            return jax.tree.map(jnp.add, acc, jax.grad(lin_loss)(p, xm, ym))
        g = lax.fori_loop(0, stop, body, jax.tree.map(jnp.zeros_like, p))
        div = M6 if bug == "divide-by-M-only" else n * M6
        g = jax.tree.map(lambda a: lax.psum_scatter(a, "dp", scatter_dimension=0, tiled=True) / div, g)
        r = 0 if bug == "param-slice-at-0" else idx("dp")
        mine = jax.tree.map(lambda a: lax.dynamic_slice_in_dim(a, r * (a.shape[0] // n), a.shape[0] // n, 0), p)
        u, s = OPT6.update(g, s, mine)
        mine = optax.apply_updates(mine, u)
        return jax.tree.map(lambda a: lax.all_gather(a, "dp", axis=0, tiled=True), mine), s
    return f


P6 = {"w": R(D6, 16, scale=0.4), "v": R(16, O6, scale=0.4)}
S6 = jax.tree.map(lambda a: a + 0.01 * rng.standard_normal(a.shape).astype(np.float32), OPT6.init(P6))
SS6 = jax.tree.map(lambda a: P("dp"), S6)
C.smap("s.zero2_psum_scatter_accum_nesterov.dp4", {"dp": 4}, zero2, (P(), SS6, P("dp"), P("dp")), (P(), SS6),
       zero2_ref, (P6, S6, R(B6 * 4, D6), R(B6 * 4, O6)),
       bugs=[("divide-by-M-only", ["wrong-scale"]), ("param-slice-at-0", ["wrong-offset"]),
             ("loop-drops-last", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 7. scan over checkpointed Megatron MLP layers (save_only_these_names),
#    dp2 x tp4, loss and jax.grad of the stacked weights.
L7, B7, T7, D7, F7 = 3, 4, 4, 8, 16


def layer7(x, w1, w2, tp_sum=lambda y: y):
    h = checkpoint_name(x / jnp.sqrt(1.0 + jnp.mean(x * x, -1, keepdims=True)), "pre")
    return x + tp_sum(jax.nn.silu(h @ w1) @ w2)


def stack_loss_ref(w1s, w2s, x, y):
    def loss(w1s, w2s):
        def body(h, ws):
            return layer7(h, *ws), None
        h, _ = lax.scan(body, x, (w1s, w2s))
        return jnp.mean(jnp.square(h - y))
    return jax.value_and_grad(loss, (0, 1))(w1s, w2s)


def stack_ckpt_tp(bug):
    def f(w1s, w2s, x, y):
        def loss(w1s, w2s):
            @partial(jax.checkpoint, policy=POL.save_only_these_names("pre"))
            def body(h, ws):
                return layer7(h, *ws, tp_sum=lambda a: psum(a, "tp")), None
            h, _ = lax.scan(body, x, (w1s, w2s), reverse=bug == "layers-reversed")
            l = jnp.mean(jnp.square(h - y))
            return psum(l, "dp") if bug == "loss-psum-dp" else pmean(l, "dp")
        return jax.value_and_grad(loss, (0, 1))(w1s, w2s)
    return f


C.smap("s.scan_ckpt_names_megatron_stack_grad.dp2xtp4", {"dp": 2, "tp": 4}, stack_ckpt_tp,
       (P(None, None, "tp"), P(None, "tp", None), P("dp"), P("dp")), (P(), (P(None, None, "tp"), P(None, "tp", None))),
       stack_loss_ref, (R(L7, D7, F7, scale=0.4), R(L7, F7, D7, scale=0.4), R(B7, T7, D7), R(B7, T7, D7)),
       bugs=[("layers-reversed", ["wrong-order"]), ("loss-psum-dp", ["wrong-scale"])], check_vma=True)

# ---------------------------------------------------------------------------
# 8. jax.remat of a whole layer stack under FSDP (dp2 x fsdp4), two SGD
#    momentum steps.
L8, B8, D8 = 2, 8, 16
OPT8 = optax.sgd(0.1, momentum=0.9)


def stack8(ws, x, gather=lambda w: w):
    for l in range(L8):
        x = jnp.tanh(x @ gather(ws[l]["w"]) + ws[l]["b"])
    return x


def fsdp_two_steps_ref(ws, s, x, y):
    for _ in range(2):
        g = jax.grad(lambda ws: jnp.mean(jnp.square(stack8(ws, x) - y)))(ws)
        u, s = OPT8.update(g, s, ws)
        ws = optax.apply_updates(ws, u)
    return ws, s


def fsdp_remat(bug):
    def f(ws, s, x, y):
        def gather(w):
            if bug == "untiled-gather-wrong-order":
                a = lax.all_gather(w, "fsdp", axis=1)  # (dl, 4, d)
                return a.reshape(-1, w.shape[1])
            return lax.all_gather(w, "fsdp", axis=0, tiled=True)

        stack = jax.remat(lambda ws, x: stack8(ws, x, gather), policy=POL.nothing_saveable)

        def loss(ws):
            l = jnp.mean(jnp.square(stack(ws, x) - y))
            return pmean(l, "fsdp") if bug == "loss-pmean-fsdp-only" else pmean(l, ("dp", "fsdp"))
        ws0 = ws
        for step in range(2):
            g = jax.grad(loss)(ws0 if (bug == "second-step-old-params" and step == 1) else ws)
            u, s = OPT8.update(g, s, ws)
            ws = optax.apply_updates(ws, u)
        return ws, s
    return f


WS8 = [{"w": R(D8, D8, scale=0.4), "b": R(D8, scale=0.1)} for _ in range(L8)]
SPEC8 = [{"w": P("fsdp"), "b": P()} for _ in range(L8)]
S8 = OPT8.init(WS8)
SS8 = (optax.TraceState(trace=SPEC8), optax.EmptyState())
C.smap("s.remat_whole_stack_fsdp_two_sgd_steps.dp2xfsdp4", {"dp": 2, "fsdp": 4}, fsdp_remat,
       (SPEC8, SS8, P(("dp", "fsdp")), P(("dp", "fsdp"))), (SPEC8, SS8), fsdp_two_steps_ref,
       (WS8, S8, R(B8, D8), R(B8, D8)),
       bugs=[("loss-pmean-fsdp-only", ["wrong-scale"]), ("second-step-old-params", ["wrong-operand"]),
             ("untiled-gather-wrong-order", ["wrong-reshape-order"])], check_vma=True)

# ---------------------------------------------------------------------------
# 9. query-chunked causal attention by lax.map with jax.checkpoint, heads
#    over tp4, output projection psum'd.
B9, T9, D9, H9, E9, CS9 = 2, 8, 16, 8, 4, 4


def attn_layer(x, wq, wk, wv, wo):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    return jnp.einsum("bthe,hed->btd", causal_attn(q, k, v), wo)


def qchunk_tp(bug):
    def f(x, wq, wk, wv, wo):
        q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
        t = x.shape[1]
        nc = t // CS9

        @jax.checkpoint
        def one(args):
            c, qc = args
            s = jnp.einsum("bqhe,bkhe->bhqk", qc, k) / np.sqrt(E9)
            qpos = jnp.arange(CS9) if bug == "mask-without-chunk-offset" else c * CS9 + jnp.arange(CS9)
            s = jnp.where(qpos[:, None] >= jnp.arange(t)[None, :], s, NEG)
            return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)

        qs = jnp.moveaxis(q.reshape(q.shape[0], nc, CS9, *q.shape[2:]), 1, 0)
        o = lax.map(one, (jnp.arange(nc), qs))
        o = jnp.moveaxis(o, 0, 1).reshape(q.shape)
        y = jnp.einsum("bthe,hed->btd", o, wo)
        return y if bug == "no-output-psum" else psum(y, "tp")
    return f


C.smap("s.query_chunk_lax_map_causal_heads_tp.tp4", {"tp": 4}, qchunk_tp,
       (P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P(), attn_layer,
       (R(B9, T9, D9), R(D9, H9, E9, scale=0.3), R(D9, H9, E9, scale=0.3), R(D9, H9, E9, scale=0.3),
        R(H9, E9, D9, scale=0.3)),
       bugs=[("mask-without-chunk-offset", ["wrong-offset"]), ("no-output-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 10. fused memory-efficient CE with jax.custom_vjp, vocab over tp4.
N10, D10, V10, BS10 = 8, 16, 32, 4


def ce_vg(h, w, y):
    return jax.value_and_grad(lambda h, w: jnp.mean(optax.softmax_cross_entropy_with_integer_labels(h @ w, y)),
                              (0, 1))(h, w)


def fused_ce(bug):
    def make():
        def lse_of(h, w):
            nb = w.shape[1] // BS10

            def body(j, carry):
                m, s = carry
                lg = h @ lax.dynamic_slice_in_dim(w, j * BS10, BS10, 1)
                mn = jnp.maximum(m, lg.max(-1))
                return mn, s * jnp.exp(m - mn) + jnp.exp(lg - mn[:, None]).sum(-1)
            m, s = lax.fori_loop(0, nb, body, (jnp.full(h.shape[:1], -jnp.inf), jnp.zeros(h.shape[:1])))
            mg = pmax(m, "tp")
            return m, s, mg + jnp.log(psum(s * jnp.exp(m - mg), "tp"))

        def target_logit(h, w, y):
            off = idx("tp") * w.shape[1]
            loc = y - off
            ok = (loc >= 0) & (loc < w.shape[1])
            col = jnp.take(w, jnp.clip(loc, 0, w.shape[1] - 1), axis=1).T  # (n, d)
            return psum(jnp.where(ok, jnp.sum(h * col, -1), 0.0), "tp")

        @jax.custom_vjp
        def loss(h, w, y):
            return jnp.mean(lse_of(h, w)[2] - target_logit(h, w, y))

        def fwd(h, w, y):
            m, s, lse = lse_of(h, w)
            return jnp.mean(lse - target_logit(h, w, y)), (h, w, y, lse, m + jnp.log(s))

        def bwd(res, ct):
            h, w, y, lse, llse = res
            n = h.shape[0]
            off = 0 if bug == "onehot-local-index" else idx("tp") * w.shape[1]
            norm = llse if bug == "bwd-local-lse" else lse
            nb = w.shape[1] // BS10

            def body(j, carry):
                dh, dw = carry
                wb = lax.dynamic_slice_in_dim(w, j * BS10, BS10, 1)
                p = jnp.exp(h @ wb - norm[:, None])
                oh = (y[:, None] == off + j * BS10 + jnp.arange(BS10)).astype(h.dtype)
                dl = (p - oh) * (ct / n)
                return dh + dl @ wb.T, lax.dynamic_update_slice_in_dim(dw, h.T @ dl, j * BS10, 1)
            dh, dw = lax.fori_loop(0, nb, body, (jnp.zeros_like(h), jnp.zeros_like(w)))
            if bug != "dh-not-psummed":
                dh = psum(dh, "tp")
            return dh, dw, None
        loss.defvjp(fwd, bwd)
        return loss

    def f(h, w, y):
        loss = make()
        return jax.value_and_grad(loss, (0, 1))(h, w, y)
    return f


C.smap("s.custom_vjp_fused_ce_vocab_blocks.tp4", {"tp": 4}, fused_ce, (P(), P(None, "tp"), P()),
       (P(), (P(), P(None, "tp"))), ce_vg, (R(N10, D10), R(D10, V10, scale=0.5), I(0, V10, N10)),
       bugs=[("onehot-local-index", ["wrong-offset"]), ("bwd-local-lse", ["missing-all-reduce"]),
             ("dh-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 11. token-weighted loss over micro-batches split over dp4, one adam step.
M11, B11, T11, D11, V11 = 3, 8, 4, 8, 16
OPT11 = optax.adam(0.01)


def tok_loss_sum(w, x, y, msk):
    ce = optax.softmax_cross_entropy_with_integer_labels(jnp.einsum("btd,dv->btv", x, w), y)
    return jnp.sum(ce * msk), jnp.sum(msk)


def micro_ref(w, s, x, y, msk):
    def loss(w):
        tot, cnt = tok_loss_sum(w, x, y, msk)
        return tot / cnt
    l, g = jax.value_and_grad(loss)(w)
    u, s = OPT11.update(g, s, w)
    return optax.apply_updates(w, u), s, l


def micro_dp(bug):
    def f(w, s, x, y, msk):
        def body(carry, xs):
            gs, ls, cs = carry
            xm, ym, mm = xs
            (tot, cnt), g = jax.value_and_grad(tok_loss_sum, has_aux=True)(w, xm, ym, mm)
            if bug == "mean-of-micro-means":
                gc, tc = psum(g, "dp") / psum(cnt, "dp"), psum(tot, "dp") / psum(cnt, "dp")
                return (gs + gc / M11, ls + tc / M11, cs), None
            return (gs + g, ls + tot, cs + cnt), None
        (g, l, c), _ = lax.scan(body, (jnp.zeros_like(w), jnp.float32(0), jnp.float32(0)), (x, y, msk))
        if bug != "mean-of-micro-means":
            c = c if bug == "count-not-psummed" else psum(c, "dp")
            g, l = psum(g, "dp") / c, psum(l, "dp") / c
        u, s = OPT11.update(g, s, w)
        return optax.apply_updates(w, u), s, l
    return f


MSK11 = (rng.random((M11, B11, T11)) < 0.7).astype(np.float32)
MSK11[0, :2] = 0.0  # micro-batch 0 has fewer tokens, dp shard 0 fewest
MSK11[2, 4:] = 1.0
W11 = R(D11, V11, scale=0.5)
S11 = OPT11.init(W11)
C.smap("s.microbatches_split_over_dp_token_weighted_adam.dp4", {"dp": 4}, micro_dp,
       (P(), P(), P(None, "dp"), P(None, "dp"), P(None, "dp")), (P(), P(), P()),
       lambda w, s, x, y, m: micro_ref(w, s, x.reshape(-1, T11, D11), y.reshape(-1, T11), m.reshape(-1, T11)),
       (W11, S11, R(M11, B11, T11, D11), I(0, V11, M11, B11, T11), MSK11),
       bugs=[("mean-of-micro-means", ["wrong-reduction"]), ("count-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 12. non-causal (encoder) blockwise attention: a lax.scan over key blocks
#     of 4 with the queries pre-scaled by E ** -0.5 (the flash-kernel way),
#     heads over tp4, batch over dp2, output projection psum'd.
B12, T12, D12, H12, E12, KB12 = 4, 8, 16, 8, 4, 4


def enc_attn(x, wq, wk, wv, wo):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E12)
    return jnp.einsum("bhqk,bkhe,hed->bqd", jax.nn.softmax(s, -1), v, wo)


def enc_blockwise_tp(bug):
    def f(x, wq, wk, wv, wo):
        q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
        q = q * E12 ** -0.5
        b, t, h, e = q.shape
        kb = jnp.moveaxis(k.reshape(b, t // KB12, KB12, h, e), 1, 0)
        vb = jnp.moveaxis(v.reshape(b, t // KB12, KB12, h, e), 1, 0)

        def body(carry, kv):
            m, l, acc = carry
            kj, vj = kv
            s = jnp.einsum("bqhe,bkhe->bqhk", q, kj)
            if bug == "scale-applied-twice":
                s = s / np.sqrt(E12)
            mn = jnp.maximum(m, s.max(-1))
            p = jnp.exp(s - mn[..., None])
            a = jnp.exp(m - mn)
            l = (l if bug == "l-not-rescaled" else l * a) + p.sum(-1)
            return (mn, l, acc * a[..., None] + jnp.einsum("bqhk,bkhe->bqhe", p, vj)), None
        init = (jnp.full((b, t, h), -jnp.inf), jnp.zeros((b, t, h)), jnp.zeros((b, t, h, e)))
        (m, l, acc), _ = lax.scan(body, init, (kb, vb))
        return psum(jnp.einsum("bqhe,hed->bqd", acc / l[..., None], wo), "tp")
    return f


C.smap("s.encoder_blockwise_prescaled_q_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, enc_blockwise_tp,
       (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P("dp"), enc_attn,
       (R(B12, T12, D12), R(D12, H12, E12, scale=0.5), R(D12, H12, E12, scale=0.5), R(D12, H12, E12, scale=0.3),
        R(H12, E12, D12, scale=0.3)),
       bugs=[("scale-applied-twice", ["constant-mismatch"]), ("l-not-rescaled", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 13. gradient accumulation over 3 micro-batches (sum, then times 1 / 3),
#     gradients pmean'd over dp2 after the scan, one plain SGD step.
B13, D13, M13 = 12, 8, 3
OPT13S = optax.sgd(0.2)


def reg_loss(p, x, y):
    return jnp.mean(jnp.square(jax.nn.softplus(x @ p["a"]) @ p["b"] - y))


def sgd_ref(p, x, y):
    u, _ = OPT13S.update(jax.grad(reg_loss)(p, x, y), OPT13S.init(p), p)
    return optax.apply_updates(p, u)


def accum_third(bug):
    def f(p, x, y):
        n_micro = 2 if bug == "scan-skips-last" else M13
        xs = x.reshape(M13, -1, x.shape[-1])[:n_micro]
        ys = y.reshape(M13, -1, y.shape[-1])[:n_micro]

        def body(acc, xy):
            return jax.tree.map(jnp.add, acc, jax.grad(reg_loss)(p, *xy)), None
        g, _ = lax.scan(body, jax.tree.map(jnp.zeros_like, p), (xs, ys))
        inv = 1.0 / (2 if bug == "divided-by-dp-size" else M13)
        g = jax.tree.map(lambda a: pmean(a * inv, "dp"), g)
        u, _ = OPT13S.update(g, OPT13S.init(p), p)
        return optax.apply_updates(p, u)
    return f


C.smap("s.grad_accum_three_micro_times_third_sgd.dp2", {"dp": 2}, accum_third, (P(), P("dp"), P("dp")), P(),
       sgd_ref, ({"a": R(D13, 16, scale=0.4), "b": R(16, 4, scale=0.4)}, R(B13, D13), R(B13, 4)),
       bugs=[("scan-skips-last", ["wrong-reduction"]), ("divided-by-dp-size", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 14. bidirectional attention with the sequence over sp4: keys and values
#     all_gather'd (untiled), a lax.scan over the 4 gathered blocks with the
#     online softmax; the scale a Python constant 1 / math.sqrt(E)
#     multiplied in, where the baseline divides by jnp.sqrt(E).
B14, T14, H14, E14 = 2, 16, 2, 8
SCALE14 = 1.0 / math.sqrt(E14)


def bidir_attn(q, k, v):
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / jnp.sqrt(jnp.float32(E14))
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def bidir_sp(bug):
    def f(q, k, v):
        kk = lax.all_gather(k, "sp")
        vv = kk if bug == "values-from-keys" else lax.all_gather(v, "sp")

        def body(carry, kv):
            m, l, o = carry
            kj, vj = kv
            s = jnp.einsum("bqhe,bkhe->bhqk", q, kj) * SCALE14
            mn = jnp.maximum(m, s.max(-1))
            a = jnp.exp(m - mn)
            p = jnp.exp(s - mn[..., None])
            o = o * a[..., None] * (a[..., None] if bug == "o-rescaled-twice" else 1.0)
            return (mn, l * a + p.sum(-1), o + jnp.einsum("bhqk,bkhe->bhqe", p, vj)), None
        b, t, h, e = q.shape
        init = (jnp.full((b, h, t), -jnp.inf), jnp.zeros((b, h, t)), jnp.zeros((b, h, t, e)))
        (m, l, o), _ = lax.scan(body, init, (kk, vv))
        return jnp.einsum("bhqe->bqhe", o / l[..., None])
    return f


C.smap("s.bidir_attn_gathered_blocks_scan_const_scale.sp4", {"sp": 4}, bidir_sp, (P(None, "sp"),) * 3,
       P(None, "sp"), bidir_attn, (R(B14, T14, H14, E14), R(B14, T14, H14, E14), R(B14, T14, H14, E14)),
       bugs=[("values-from-keys", ["wrong-operand"]), ("o-rescaled-twice", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 15. gradient accumulation over strided micro-batches (micro-batch j is
#     rows j, j + 3, ... of the local batch: reshape(-1, 3, d) then
#     swapaxes), a running mean in a lax.scan over (index, micro-batch),
#     gradients pmean'd over dp4, SGD with decoupled weight decay
#     (optax.chain(add_decayed_weights, sgd)).
B15, D15, M15 = 24, 8, 3
OPT15 = optax.chain(optax.add_decayed_weights(1e-2), optax.sgd(0.1))


def wd_sgd_ref(p, x, y):
    u, _ = OPT15.update(jax.grad(reg_loss)(p, x, y), OPT15.init(p), p)
    return optax.apply_updates(p, u)


def strided_running_mean(bug):
    def f(p, x, y):
        xs = jnp.swapaxes(x.reshape(-1, M15, x.shape[-1]), 0, 1)
        ys = jnp.swapaxes(y.reshape(-1, M15, y.shape[-1]), 0, 1)
        if bug == "last-micro-skipped":
            xs, ys = xs[:-1], ys[:-1]

        def body(acc, it):
            i, xm, ym = it
            g = jax.grad(reg_loss)(p, xm, ym)
            return jax.tree.map(lambda a, b: a + (b - a) / (i + 1).astype(a.dtype), acc, g), None
        g, _ = lax.scan(body, jax.tree.map(jnp.zeros_like, p), (jnp.arange(xs.shape[0]), xs, ys))
        if bug != "no-dp-pmean":
            g = pmean(g, "dp")
        u, _ = OPT15.update(g, OPT15.init(p), p)
        return optax.apply_updates(p, u)
    return f


C.smap("s.strided_micro_running_mean_wd_sgd.dp4", {"dp": 4}, strided_running_mean, (P(), P("dp"), P("dp")), P(),
       wd_sgd_ref, ({"a": R(D15, 16, scale=0.4), "b": R(16, 4, scale=0.4)}, R(B15, D15), R(B15, 4)),
       bugs=[("last-micro-skipped", ["wrong-reduction"]), ("no-dp-pmean", ["missing-all-reduce"])])

# ===========================================================================
# GSPMD pairs (jax.jit with in/out shardings).
# 16. the chunked vocab scan of 1. with value_and_grad, dp2 x tp4.


def ce_vocab_scan(h, w, y):
    def loss(h, w):
        nc = w.shape[1] // 8
        wc = jnp.moveaxis(w.reshape(w.shape[0], nc, 8), 1, 0)

        def body(carry, xs):
            m, s, tgt = carry
            c, wk = xs
            lg = jnp.einsum("btd,dv->btv", h, wk)
            mn = jnp.maximum(m, lax.stop_gradient(lg.max(-1)))
            s = s * jnp.exp(m - mn) + jnp.exp(lg - mn[..., None]).sum(-1)
            tgt = tgt + jnp.sum(jnp.where(y[..., None] == c * 8 + jnp.arange(8), lg, 0.0), -1)
            return (mn, s, tgt), None
        init = (jnp.full(y.shape, -1e30), jnp.zeros(y.shape), jnp.zeros(y.shape))
        (m, s, tgt), _ = lax.scan(body, init, (jnp.arange(nc), wc))
        return jnp.mean(m + jnp.log(s) - tgt)
    return jax.value_and_grad(loss, (0, 1))(h, w)


C.gspmd("g.vocab_chunk_scan_ce_grad.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp"), P("dp")),
        (P(), (P("dp"), P(None, "tp"))), ce_vocab_scan, (R(B1, T1, D1), R(D1, V1, scale=0.6), I(0, V1, B1, T1)))

# 17. gradient accumulation by lax.scan (sum then divide) and an optax.adamw
#     step, FSDP parameters over dp4, batch over dp4.
OPT13 = optax.adamw(1e-2, weight_decay=0.05)
P13 = {"w1": R(16, 32, scale=0.3), "w2": R(32, 8, scale=0.3)}
S13 = OPT13.init(P13)
SPEC13 = {"w1": P("dp"), "w2": P("dp")}
SS13 = state_specs(S13, SPEC13)


def accum_adamw(p, s, x, y):
    xs, ys = x.reshape(4, -1, x.shape[-1]), y.reshape(4, -1, y.shape[-1])

    def lossf(p, xm, ym):
        return jnp.mean(jnp.square(jax.nn.relu(xm @ p["w1"]) @ p["w2"] - ym))

    def body(acc, xy):
        g = jax.grad(lossf)(p, *xy)
        return jax.tree.map(jnp.add, acc, g), None
    g, _ = lax.scan(body, jax.tree.map(jnp.zeros_like, p), (xs, ys))
    g = jax.tree.map(lambda a: a / 4, g)
    u, s = OPT13.update(g, s, p)
    return optax.apply_updates(p, u), s


C.gspmd("g.grad_accum_scan_adamw_fsdp.dp4", {"dp": 4}, (SPEC13, SS13, P("dp"), P("dp")), (SPEC13, SS13),
        accum_adamw, (P13, S13, R(32, 16), R(32, 8)))

# 18. blockwise causal attention by lax.scan over key blocks, sequence sp4.


def blockwise_full(q, k, v):
    b, t, h, e = q.shape
    nb = 4
    kb = jnp.moveaxis(k.reshape(b, nb, t // nb, h, e), 1, 0)
    vb = jnp.moveaxis(v.reshape(b, nb, t // nb, h, e), 1, 0)
    qpos = jnp.arange(t)

    def body(carry, xs):
        m, l, acc = carry
        j, kj, vj = xs
        s = jnp.einsum("bqhe,bkhe->bhqk", q, kj) / np.sqrt(e)
        kpos = j * (t // nb) + jnp.arange(t // nb)
        s = jnp.where(qpos[:, None] >= kpos[None, :], s, NEG)
        mn = jnp.maximum(m, s.max(-1))
        p = jnp.exp(s - mn[..., None])
        a = jnp.exp(m - mn)
        return (mn, l * a + p.sum(-1), acc * a[..., None] + jnp.einsum("bhqk,bkhe->bhqe", p, vj)), None
    init = (jnp.full((b, h, t), NEG), jnp.zeros((b, h, t)), jnp.zeros((b, h, t, e)))
    (m, l, acc), _ = lax.scan(body, init, (jnp.arange(nb), kb, vb))
    return jnp.einsum("bhqe->bqhe", acc / l[..., None])


C.gspmd("g.blockwise_attn_scan_keyblocks.sp4", {"sp": 4}, (P(None, "sp"),) * 3, P(None, "sp"), blockwise_full,
        (R(B3, T3, H3, E3), R(B3, T3, H3, E3), R(B3, T3, H3, E3)))

# 19. the lax.map chunked MLP (f32 here) under a remat policy with its
#     gradient, tp-sharded weights, batch over dp.


def chunked_mlp_grad(x, w1, w2):
    def loss(w1, w2):
        @partial(jax.checkpoint, policy=POL.checkpoint_dots)
        def chunk(xc):
            return jnp.sum(jnp.square(jax.nn.gelu(xc @ w1) @ w2))
        xs = x.reshape(-1, 4, x.shape[-1])
        return jnp.sum(lax.map(chunk, xs, batch_size=2)) / x.shape[0]
    return jax.value_and_grad(loss, (0, 1))(w1, w2)


C.gspmd("g.lax_map_chunked_mlp_remat_grad.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp"), P("tp")),
        (P(), (P(None, "tp"), P("tp"))), chunked_mlp_grad, (R(32, 16), R(16, 32, scale=0.3), R(32, 16, scale=0.3)))

# 20. a jax.remat'ed scan over a stacked layer dim, two optax.adam steps,
#     FSDP x TP (stacked weights over (None, dp, tp)).
OPT16 = optax.adam(3e-3)
P16 = {"w": R(3, 16, 16, scale=0.3), "g": 1.0 + R(3, 16, scale=0.1)}
S16 = OPT16.init(P16)
SPEC16 = {"w": P(None, "dp", "tp"), "g": P()}
SS16 = state_specs(S16, SPEC16)


def remat_stack_two_steps(p, s, x, y):
    def loss(p):
        @jax.remat
        def body(h, lw):
            w, g = lw
            hn = h * lax.rsqrt(jnp.mean(h * h, -1, keepdims=True) + 1e-6) * g
            return h + jnp.tanh(hn @ w), None
        h, _ = lax.scan(body, x, (p["w"], p["g"]))
        return jnp.mean(jnp.square(h - y))
    for _ in range(2):
        g = jax.grad(loss)(p)
        u, s = OPT16.update(g, s, p)
        p = optax.apply_updates(p, u)
    return p, s


C.gspmd("g.remat_scan_stack_two_adam_steps.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC16, SS16, P("dp"), P("dp")),
        (SPEC16, SS16), remat_stack_two_steps, (P16, S16, R(8, 16), R(8, 16)))

C.finish()
