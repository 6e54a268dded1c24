"""samples/fresh134: a 134th batch of programs as a user writes them, on the theme of false-alarm bait for stacked-parameter programs in which each device runs ITS OWN block of a parameter stacked on a leading axis [n, ...] and sharded over a mesh axis (the [1, ...] block taken with p[0], jnp.squeeze or reshape), in unrolled pipelines with no loop (2, 4, 8 stages; every device applies its layer at every tick, on zeros or stale values too), per-device experts combined by a psum of one-hot-weighted outputs, stage-dependent activations selected by jnp.where over precomputed branches, residual stages whose bubble ticks blow up to huge finite values, tied stage weights, rank-3 and rank-4 stacks (conv kernels, attention projections) and bf16 stages with f32 accumulation, none of them an idiom of samples/fresh .. fresh26, probe, train or wild (nor the lax.switch / fori_loop / buffer idioms of fresh126, fresh131, fresh132).
Every correct pair is written to provoke a false alarm: op by op the per-device
program looks wrong (a device applies its layer to zeros, to another stage's
stale output or to values of order 1e5; the result is kept from one device by
jnp.where(axis_index == last) and psum, by all_gather and the last row, or by
a ppermute to device 0), yet the whole computes the baseline, the plain
sequential stack over the whole batch, up to rounding.
shard_map families (bugs in brackets):
 1. pp2 x dp4: residual MLP stages (w1, b1, w2 stacked [2, ...] over pp, p[0]),
    two ticks with a cyclic ppermute, the output kept by where + psum, MSE
    pmean'd over dp, jax.value_and_grad (check_vma=True), SGD.
    [the kept value masked to stage 0; the loss not pmean'd over dp so the
    gradients are summed over dp].
 2. pp4: gelu stages, per-device loss jnp.where(last, mse, 0) under
    value_and_grad (check_vma=False), optax.adam with stage-sharded state,
    the predictions kept by all_gather over pp and the last row.
    [the ppermute sends to the previous stage; row 0 of the all_gather kept].
 3. pp8, forward, 2 micro-batches (9 ticks): stacks squeezed by reshape and
    jnp.squeeze, the last stage's outputs ppermute'd to device 0 and
    broadcast by a masked psum (check_vma=False).
    [the stage weights applied in reverse order (injected on the last device,
    sent downwards); the result sent to device 0 from device 6].
 4. ep4 x dp2, forward MoE: a top-1 router's one-hot * probability gate, each
    device runs its expert (stacked [4, ...], p[0]) on every token and the
    outputs gate[:, axis_index]-weighted are psum'd over ep; a load-balancing
    term pmean'd over dp. [the gate column of the next expert; no psum].
 5. pp4 x tp2: a Megatron MLP per stage (w1 [4, D, H] over (pp, tp), w2
    [4, H, D] over (pp, tp)), the activation chosen by the stage index via a
    jnp.where chain over the relu / tanh / gelu / silu of the same
    pre-activation, value_and_grad (check_vma=True), SGD.
    [the activations in reverse stage order; the kept value masked to stage 2].
 6. pp4: residual stages h + (h W + b) rsqrt(mean h^2 + 1e-10); on the bubble
    ticks the zero state becomes b * 1e5 and stays of order 1e4..1e5 (finite),
    masked away; per-device loss jnp.where(last, mse, 0) (check_vma=False),
    the pipeline output kept by where + psum, SGD.
    [the kept output not psum'd; the loss taken on stage 2].
 7. pp4: a tied stage h + tanh(h W) W^T + b_s (W used twice per tick), the
    biases stacked separately [4, D] and replicated, indexed by b[axis_index],
    their gradient psum'd over pp; optax.adam (check_vma=False).
    [the bias index reversed; the bias gradient not psum'd].
 8. pp4 x dp2: 1-D conv stages with a rank-4 kernel stack [4, 3, C, C]
    reshaped to [3, C, C], relu residual, value_and_grad (check_vma=True), SGD.
    [the ppermute sends to the previous stage; gradients summed over dp].
 9. pp4, 2 micro-batches (5 ticks): causal attention stages with a rank-4
    qkv stack [4, 3, D, D] and a rank-3 output stack, reshaped; outputs
    collected on the last stage at ticks 3 and 4, kept by where + psum,
    value_and_grad (check_vma=True), SGD.
    [outputs collected one tick early; the kept value masked to stage 2].
 10. pp8, forward: bf16 stage weights, RMS-normalised f32 residual stream cast
    to bf16, dots with preferred_element_type=f32, the output kept by where +
    psum (check_vma=False). [an extra ppermute after the last tick; no psum].
 11. pp2: a shared (replicated) embedding used by stage 0 for the lookup and
    by the last stage as the tied LM head, cross entropy masked to the last
    stage, the embedding gradient psum'd over pp (check_vma=False), SGD.
    [the embedding gradient not psum'd; the loss taken on stage 0].
GSPMD pairs (jax.jit with in/out shardings; correct): 12. lax.scan over a
residual stack [4, D, D] sharded over pp (pp4 x dp2); 13. one-hot-gated
experts by einsum over a stack [8, D, H] sharded over ep (ep8); 14. a vmapped
bf16 ensemble [2, D, D] with f32 accumulation, sharded over m (m2).
Numerics: correct pairs agree at rounding level (f32 about 1e-6, bf16 stages
at bf16 rounding of the f32 stream); bug variants differ by O(0.1)..O(1e5).
Run from the repository root: bash samples/gen/run_fresh134.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
import optax
from jax.sharding import PartitionSpec as P
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh134.sh)
from fresh_lib import Corpus, seeded, mse, state_specs, np_tree  # noqa: E402

SCRIPT = "samples/gen/fresh134.py"
C = Corpus("samples/fresh134", SCRIPT, "samples/gen/run_fresh134.sh", sys.argv[1:])
rng, R, I = seeded(134134)
psum, pmean, idx, ppermute, all_gather = lax.psum, lax.pmean, lax.axis_index, lax.ppermute, lax.all_gather
bf, f32 = jnp.bfloat16, jnp.float32


def fwd(n):
    return [(j, (j + 1) % n) for j in range(n)]


def bwd(n):
    return [(j, (j - 1) % n) for j in range(n)]


def sgd(p, g, lr):
    return jax.tree.map(lambda a, t: a - lr * t, p, g)


# ---------------------------------------------------------------------------
# 1. pp2 x dp4 unrolled residual-MLP pipeline, where + psum, SGD.
N1, D1, H1, B1, LR1 = 2, 8, 16, 16, 0.1


def stage1(w1, b1, w2, h):
    return h + jnp.tanh(h @ w1 + b1) @ w2


def f1_ref(p, x, y):
    def loss(p):
        h = x
        for i in range(N1):
            h = stage1(p["w1"][i], p["b1"][i], p["w2"][i], h)
        return mse(h, y)
    l, g = jax.value_and_grad(loss)(p)
    return sgd(p, g, LR1), l


def f1_sm(bug):
    def f(p, x, y):
        me = idx("pp")
        keep = 0 if bug == "mask-first-stage" else N1 - 1

        def loss(p):
            w1, b1, w2 = p["w1"][0], p["b1"][0], p["w2"][0]
            h = jnp.where(me == 0, x, 0.0)
            for t in range(N1):
                h = stage1(w1, b1, w2, h)
                if t < N1 - 1:
                    h = ppermute(h, "pp", fwd(N1))
            out = psum(jnp.where(me == keep, h, 0.0), "pp")
            l = mse(out, y)
            return l if bug == "grad-summed-over-dp" else pmean(l, "dp")
        l, g = jax.value_and_grad(loss)(p)
        if bug == "grad-summed-over-dp":
            l = pmean(l, "dp")
        return sgd(p, g, LR1), l
    return f


SPEC1 = {"w1": P("pp"), "b1": P("pp"), "w2": P("pp")}
P1 = {"w1": R(N1, D1, H1, scale=0.4), "b1": R(N1, H1, scale=0.1), "w2": R(N1, H1, D1, scale=0.3)}
C.smap("s.pipe2_unrolled_resmlp_where_psum_sgd.pp2xdp4", {"pp": 2, "dp": 4}, f1_sm,
       (SPEC1, P("dp"), P("dp")), (SPEC1, P()), f1_ref, (P1, R(B1, D1), R(B1, D1)), check_vma=True,
       bugs=[("mask-first-stage", ["wrong-device-mask"]), ("grad-summed-over-dp", ["missing-mean"])])

# ---------------------------------------------------------------------------
# 2. pp4 unrolled gelu pipeline, output kept by all_gather + last row, adam.
N2, D2, B2 = 4, 8, 8
OPT2 = optax.adam(0.01)


def stage2(w, b, h):
    return jax.nn.gelu(h @ w + b)


def f2_ref(p, st, x, y):
    def loss(p):
        h = x
        for i in range(N2):
            h = stage2(p["w"][i], p["b"][i], h)
        return mse(h, y), h
    (l, h), g = jax.value_and_grad(loss, has_aux=True)(p)
    u, st = OPT2.update(g, st, p)
    return optax.apply_updates(p, u), st, l, h


def f2_sm(bug):
    def f(p, st, x, y):
        me = idx("pp")
        perm = bwd(N2) if bug == "ppermute-backward" else fwd(N2)

        def loss(p):
            w, b = p["w"][0], p["b"][0]
            h = jnp.where(me == 0, x, 0.0)
            for t in range(N2):
                h = stage2(w, b, h)
                if t < N2 - 1:
                    h = ppermute(h, "pp", perm)
            return jnp.where(me == N2 - 1, mse(h, y), 0.0), h
        (l, h), g = jax.value_and_grad(loss, has_aux=True)(p)
        u, st = OPT2.update(g, st, p)
        allh = all_gather(h, "pp")
        pred = allh[0] if bug == "gather-row-0" else allh[-1]
        return optax.apply_updates(p, u), st, psum(l, "pp"), pred
    return f


SPEC2 = {"w": P("pp"), "b": P("pp")}
P2 = {"w": R(N2, D2, D2, scale=0.6), "b": R(N2, D2, scale=0.1)}
ST2 = np_tree(jax.jit(f2_ref)(P2, OPT2.init(P2), R(B2, D2), R(B2, D2))[1])  # a warm state
SST2 = state_specs(ST2, SPEC2)
C.smap("s.pipe4_unrolled_allgather_last_row_adam.pp4", {"pp": 4}, f2_sm,
       (SPEC2, SST2, P(), P()), (SPEC2, SST2, P(), P()), f2_ref, (P2, ST2, R(B2, D2), R(B2, D2)),
       bugs=[("ppermute-backward", ["wrong-permutation"]), ("gather-row-0", ["wrong-index"])])

# ---------------------------------------------------------------------------
# 3. pp8 forward, 2 micro-batches, result ppermute'd to device 0.
N3, M3, D3, B3 = 8, 2, 8, 8


def stage3(w, b, h):
    return h + jnp.tanh(h @ w + b)


def f3_ref(w, b, x):
    h = x
    for i in range(N3):
        h = stage3(w[i], b[i], h)
    return h


def f3_sm(bug):
    def f(w, b, x):
        me = idx("pp")
        w, b = w.reshape(w.shape[1:]), jnp.squeeze(b, 0)
        mbs = x.reshape(M3, B3 // M3, D3)
        if bug == "reverse-stage-order":
            first, last, perm = N3 - 1, 0, bwd(N3)
        else:
            first, last, perm = 0, N3 - 1, fwd(N3)
        h = jnp.zeros_like(mbs[0])
        outs = []
        for t in range(N3 + M3 - 1):
            if t < M3:
                h = jnp.where(me == first, mbs[t], h)
            h = stage3(w, b, h)
            if t >= N3 - 1:
                outs.append(h)  # the last stage finishes micro-batch t - (N3 - 1)
            if t < N3 + M3 - 2:
                h = ppermute(h, "pp", perm)
        y = jnp.concatenate(outs, 0)
        src = N3 - 2 if bug == "send-from-wrong-device" else last
        y0 = ppermute(y, "pp", [(src, 0)])
        return psum(jnp.where(me == 0, y0, 0.0), "pp")
    return f


C.smap("s.pipe8_microbatch2_ppermute_to_dev0.pp8", {"pp": 8}, f3_sm, (P("pp"), P("pp"), P()), P(), f3_ref,
       (R(N3, D3, D3, scale=0.5), R(N3, D3, scale=0.2), R(B3, D3)),
       bugs=[("reverse-stage-order", ["wrong-order"]), ("send-from-wrong-device", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 4. ep4 x dp2 forward MoE: one-hot gate, per-device expert, psum over ep.
E4, D4, H4, B4 = 4, 8, 16, 16


def gate4(x, wr):
    logits = x @ wr
    pr = jax.nn.softmax(logits, -1)
    oh = jax.nn.one_hot(jnp.argmax(logits, -1), E4)
    return oh * pr, oh, pr


def expert4(w1, w2, x):
    return jax.nn.silu(x @ w1) @ w2


def f4_ref(wr, w1, w2, x):
    g, oh, pr = gate4(x, wr)
    ys = jnp.stack([expert4(w1[e], w2[e], x) for e in range(E4)], 1)
    out = jnp.einsum("be,bed->bd", g, ys)
    aux = E4 * jnp.sum(jnp.mean(oh, 0) * jnp.mean(pr, 0))
    return out, aux


def f4_sm(bug):
    def f(wr, w1, w2, x):
        me = idx("ep")
        g, oh, pr = gate4(x, wr)
        col = (me + 1) % E4 if bug == "gate-column-shifted" else me
        y = g[:, col][:, None] * expert4(w1[0], w2[0], x)
        out = y if bug == "no-psum-combine" else psum(y, "ep")
        aux = E4 * jnp.sum(pmean(jnp.mean(oh, 0), "dp") * pmean(jnp.mean(pr, 0), "dp"))
        return out, aux
    return f


C.smap("s.moe_onehot_gate_expert_per_device_psum.ep4xdp2", {"ep": 4, "dp": 2}, f4_sm,
       (P(), P("ep"), P("ep"), P("dp")), (P("dp"), P()), f4_ref,
       (R(D4, E4), R(E4, D4, H4, scale=0.4), R(E4, H4, D4, scale=0.3), R(B4, D4)),
       bugs=[("gate-column-shifted", ["wrong-index"]), ("no-psum-combine", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 5. pp4 x tp2: Megatron stage, activation chosen by stage index via where.
N5, D5, H5, B5, LR5 = 4, 8, 16, 8, 0.1
ACTS5 = (jax.nn.relu, jnp.tanh, jax.nn.gelu, jax.nn.silu)


def f5_ref(p, x, y):
    def loss(p):
        h = x
        for i in range(N5):
            h = h + ACTS5[i](h @ p["w1"][i] + p["b1"][i]) @ p["w2"][i]
        return mse(h, y)
    l, g = jax.value_and_grad(loss)(p)
    return sgd(p, g, LR5), l


def f5_sm(bug):
    def f(p, x, y):
        me = idx("pp")
        sel = N5 - 1 - me if bug == "act-reversed" else me
        keep = N5 - 2 if bug == "mask-stage-2" else N5 - 1

        def loss(p):
            w1, b1, w2 = p["w1"][0], p["b1"][0], p["w2"][0]
            h = jnp.where(me == 0, x, 0.0)
            for t in range(N5):
                u = h @ w1 + b1
                br = [a(u) for a in ACTS5]
                a = br[3]
                for k in (2, 1, 0):
                    a = jnp.where(sel == k, br[k], a)
                h = h + psum(a @ w2, "tp")
                if t < N5 - 1:
                    h = ppermute(h, "pp", fwd(N5))
            out = psum(jnp.where(me == keep, h, 0.0), "pp")
            return mse(out, y)
        l, g = jax.value_and_grad(loss)(p)
        return sgd(p, g, LR5), l
    return f


SPEC5 = {"w1": P("pp", None, "tp"), "b1": P("pp", "tp"), "w2": P("pp", "tp", None)}
P5 = {"w1": R(N5, D5, H5, scale=0.5), "b1": R(N5, H5, scale=0.2), "w2": R(N5, H5, D5, scale=0.3)}
C.smap("s.stage_activation_where_chain_megatron.pp4xtp2", {"pp": 4, "tp": 2}, f5_sm,
       (SPEC5, P(), P()), (SPEC5, P()), f5_ref, (P5, R(B5, D5), R(B5, D5)), check_vma=True,
       bugs=[("act-reversed", ["wrong-index"]), ("mask-stage-2", ["wrong-device-mask"])])

# ---------------------------------------------------------------------------
# 6. pp4 residual normalised stages, huge finite garbage on bubble ticks.
N6, D6, B6, LR6, EPS6 = 4, 8, 8, 0.05, 1e-10


def stage6(w, b, h):
    r = lax.rsqrt(jnp.mean(h * h, -1, keepdims=True) + EPS6)
    return h + (h @ w + b) * r


def f6_ref(p, x, y):
    def loss(p):
        h = x
        for i in range(N6):
            h = stage6(p["w"][i], p["b"][i], h)
        return mse(h, y), h
    (l, h), g = jax.value_and_grad(loss, has_aux=True)(p)
    return sgd(p, g, LR6), l, h


def f6_sm(bug):
    def f(p, x, y):
        me = idx("pp")
        lmask = N6 - 2 if bug == "loss-on-stage-2" else N6 - 1

        def loss(p):
            w, b = p["w"][0], p["b"][0]
            h = jnp.where(me == 0, x, 0.0)
            for t in range(N6):
                h = stage6(w, b, h)   # zeros -> b * 1e5 on the bubble ticks
                if t < N6 - 1:
                    h = ppermute(h, "pp", fwd(N6))
            return jnp.where(me == lmask, mse(h, y), 0.0), h
        (l, h), g = jax.value_and_grad(loss, has_aux=True)(p)
        kept = jnp.where(me == N6 - 1, h, 0.0)
        out = kept if bug == "no-kept-psum" else psum(kept, "pp")
        return sgd(p, g, LR6), psum(l, "pp"), out
    return f


SPEC6 = {"w": P("pp"), "b": P("pp")}
P6 = {"w": R(N6, D6, D6, scale=0.3), "b": R(N6, D6, scale=0.2)}
C.smap("s.resnorm_pipe4_huge_bubble_values_masked.pp4", {"pp": 4}, f6_sm,
       (SPEC6, P(), P()), (SPEC6, P(), P()), f6_ref, (P6, R(B6, D6), R(B6, D6)),
       bugs=[("no-kept-psum", ["missing-collective"]), ("loss-on-stage-2", ["wrong-device-mask"])])

# ---------------------------------------------------------------------------
# 7. pp4 tied stage weight (used twice), bias stack replicated, b[axis_index].
N7, D7, B7 = 4, 8, 8
OPT7 = optax.adam(0.02)


def stage7(w, b, h):
    return h + jnp.tanh(h @ w) @ w.T + b


def f7_ref(p, st, x, y):
    def loss(p):
        h = x
        for i in range(N7):
            h = stage7(p["w"][i], p["b"][i], h)
        return mse(h, y)
    l, g = jax.value_and_grad(loss)(p)
    u, st = OPT7.update(g, st, p)
    return optax.apply_updates(p, u), st, l


def f7_sm(bug):
    def f(p, st, x, y):
        me = idx("pp")
        bi = N7 - 1 - me if bug == "bias-index-reversed" else me

        def loss(p):
            w, b = p["w"][0], p["b"][bi]
            h = jnp.where(me == 0, x, 0.0)
            for t in range(N7):
                h = stage7(w, b, h)
                if t < N7 - 1:
                    h = ppermute(h, "pp", fwd(N7))
            return jnp.where(me == N7 - 1, mse(h, y), 0.0)
        l, g = jax.value_and_grad(loss)(p)
        gb = g["b"] if bug == "bias-grad-no-psum" else psum(g["b"], "pp")
        u, st = OPT7.update({"w": g["w"], "b": gb}, st, p)
        return optax.apply_updates(p, u), st, psum(l, "pp")
    return f


SPEC7 = {"w": P("pp"), "b": P()}
P7 = {"w": R(N7, D7, D7, scale=0.3), "b": R(N7, D7, scale=0.3)}
ST7 = np_tree(jax.jit(f7_ref)(P7, OPT7.init(P7), R(B7, D7), R(B7, D7))[1])
SST7 = state_specs(ST7, SPEC7)
C.smap("s.tied_stage_weight_bias_stack_indexed.pp4", {"pp": 4}, f7_sm,
       (SPEC7, SST7, P(), P()), (SPEC7, SST7, P()), f7_ref, (P7, ST7, R(B7, D7), R(B7, D7)),
       bugs=[("bias-index-reversed", ["wrong-index"]), ("bias-grad-no-psum", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 8. pp4 x dp2 conv stages, rank-4 kernel stack reshaped.
N8, K8, C8, L8, B8, LR8 = 4, 3, 4, 16, 8, 0.05


def conv8(h, k):
    return lax.conv_general_dilated(h, k, (1,), "SAME", dimension_numbers=("NWC", "WIO", "NWC"))


def stage8(k, b, h):
    return h + jax.nn.relu(conv8(h, k) + b)


def f8_ref(p, x, y):
    def loss(p):
        h = x
        for i in range(N8):
            h = stage8(p["k"][i], p["b"][i], h)
        return mse(h, y)
    l, g = jax.value_and_grad(loss)(p)
    return sgd(p, g, LR8), l


def f8_sm(bug):
    def f(p, x, y):
        me = idx("pp")
        perm = bwd(N8) if bug == "ppermute-backward" else fwd(N8)

        def loss(p):
            k, b = p["k"].reshape(K8, C8, C8), p["b"].reshape(C8)
            h = jnp.where(me == 0, x, 0.0)
            for t in range(N8):
                h = stage8(k, b, h)
                if t < N8 - 1:
                    h = ppermute(h, "pp", perm)
            out = psum(jnp.where(me == N8 - 1, h, 0.0), "pp")
            l = mse(out, y)
            return l if bug == "grad-summed-over-dp" else pmean(l, "dp")
        l, g = jax.value_and_grad(loss)(p)
        if bug == "grad-summed-over-dp":
            l = pmean(l, "dp")
        return sgd(p, g, LR8), l
    return f


SPEC8 = {"k": P("pp"), "b": P("pp")}
P8 = {"k": R(N8, K8, C8, C8, scale=0.4), "b": R(N8, C8, scale=0.1)}
C.smap("s.conv1d_kernel_stack_rank4_reshape.pp4xdp2", {"pp": 4, "dp": 2}, f8_sm,
       (SPEC8, P("dp"), P("dp")), (SPEC8, P()), f8_ref, (P8, R(B8, L8, C8), R(B8, L8, C8)), check_vma=True,
       bugs=[("ppermute-backward", ["wrong-permutation"]), ("grad-summed-over-dp", ["missing-mean"])])

# ---------------------------------------------------------------------------
# 9. pp4 attention stages, rank-4 qkv stack, 2 micro-batches.
N9, M9, T9, D9, B9, LR9 = 4, 2, 4, 8, 4, 0.1
CAUSAL9 = np.tril(np.ones((T9, T9), bool))


def attn9(wqkv, wo, h):
    q, k, v = (h @ wqkv[i] for i in range(3))
    s = jnp.einsum("btd,bsd->bts", q, k) / np.sqrt(D9)
    s = jnp.where(CAUSAL9, s, -1e9)
    return h + jnp.einsum("bts,bsd->btd", jax.nn.softmax(s, -1), v) @ wo


def f9_ref(p, x, y):
    def loss(p):
        h = x
        for i in range(N9):
            h = attn9(p["qkv"][i], p["o"][i], h)
        return mse(h, y)
    l, g = jax.value_and_grad(loss)(p)
    return sgd(p, g, LR9), l


def f9_sm(bug):
    def f(p, x, y):
        me = idx("pp")
        keep = N9 - 2 if bug == "mask-stage-2" else N9 - 1
        start = N9 - 2 if bug == "collect-one-tick-early" else N9 - 1

        def loss(p):
            wqkv, wo = p["qkv"].reshape(3, D9, D9), p["o"].reshape(D9, D9)
            mbs = x.reshape(M9, B9 // M9, T9, D9)
            h = jnp.zeros_like(mbs[0])
            outs = []
            for t in range(N9 + M9 - 1):
                if t < M9:
                    h = jnp.where(me == 0, mbs[t], h)
                h = attn9(wqkv, wo, h)
                if start <= t < start + M9:
                    outs.append(h)
                if t < N9 + M9 - 2:
                    h = ppermute(h, "pp", fwd(N9))
            out = psum(jnp.where(me == keep, jnp.concatenate(outs, 0), 0.0), "pp")
            return mse(out, y)
        l, g = jax.value_and_grad(loss)(p)
        return sgd(p, g, LR9), l
    return f


SPEC9 = {"qkv": P("pp"), "o": P("pp")}
P9 = {"qkv": R(N9, 3, D9, D9, scale=0.4), "o": R(N9, D9, D9, scale=0.3)}
C.smap("s.attn_stages_qkv_rank4_microbatch2.pp4", {"pp": 4}, f9_sm,
       (SPEC9, P(), P()), (SPEC9, P()), f9_ref, (P9, R(B9, T9, D9), R(B9, T9, D9)), check_vma=True,
       bugs=[("collect-one-tick-early", ["wrong-offset"]), ("mask-stage-2", ["wrong-device-mask"])])

# ---------------------------------------------------------------------------
# 10. pp8 bf16 stages with f32 accumulation.
N10, D10, B10 = 8, 16, 8


def stage10(w, g, h):
    hn = h * lax.rsqrt(jnp.mean(h * h, -1, keepdims=True) + 1e-6) * g
    return h + jnp.tanh(jnp.dot(hn.astype(bf), w, preferred_element_type=f32))


def f10_ref(w, g, x):
    h = x
    for i in range(N10):
        h = stage10(w[i], g[i], h)
    return h, jnp.sum(h * h, -1)


def f10_sm(bug):
    def f(w, g, x):
        me = idx("pp")
        w, g = jnp.squeeze(w, 0), jnp.squeeze(g, 0)
        h = jnp.where(me == 0, x, 0.0)
        for t in range(N10):
            h = stage10(w, g, h)
            if t < N10 - 1 or bug == "extra-final-ppermute":
                h = ppermute(h, "pp", fwd(N10))
        kept = jnp.where(me == N10 - 1, h, 0.0)
        out = kept if bug == "no-kept-psum" else psum(kept, "pp")
        return out, jnp.sum(out * out, -1)
    return f


C.smap("s.bf16_stages_f32_stream_where_psum.pp8", {"pp": 8}, f10_sm, (P("pp"), P("pp"), P()), (P(), P()),
       f10_ref, (R(N10, D10, D10, scale=0.3, dt=bf), 1.0 + R(N10, D10, scale=0.1), R(B10, D10)),
       bugs=[("extra-final-ppermute", ["wrong-permutation"]), ("no-kept-psum", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 11. pp2 shared embedding (lookup on stage 0, tied head on the last stage).
N11, V11, D11, B11, T11, LR11 = 2, 16, 8, 4, 4, 0.5


def ce11(logits, lab):
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits, -1), lab[..., None], -1))


def f11_ref(p, tok, lab):
    def loss(p):
        h = p["emb"][tok]
        for i in range(N11):
            h = h + jnp.tanh(h @ p["w"][i])
        return ce11(h @ p["emb"].T, lab)
    l, g = jax.value_and_grad(loss)(p)
    return sgd(p, g, LR11), l


def f11_sm(bug):
    def f(p, tok, lab):
        me = idx("pp")
        lmask = 0 if bug == "loss-on-stage-0" else N11 - 1

        def loss(p):
            w = p["w"][0]
            h = jnp.where(me == 0, p["emb"][tok], 0.0)
            for t in range(N11):
                h = h + jnp.tanh(h @ w)
                if t < N11 - 1:
                    h = ppermute(h, "pp", fwd(N11))
            return jnp.where(me == lmask, ce11(h @ p["emb"].T, lab), 0.0)
        l, g = jax.value_and_grad(loss)(p)
        ge = g["emb"] if bug == "emb-grad-no-psum" else psum(g["emb"], "pp")
        return sgd(p, {"emb": ge, "w": g["w"]}, LR11), psum(l, "pp")
    return f


SPEC11 = {"emb": P(), "w": P("pp")}
P11 = {"emb": R(V11, D11, scale=0.8), "w": R(N11, D11, D11, scale=0.4)}
C.smap("s.shared_embedding_tied_head_grad_psum.pp2", {"pp": 2}, f11_sm,
       (SPEC11, P(), P()), (SPEC11, P()), f11_ref, (P11, I(0, V11, B11, T11), I(0, V11, B11, T11)),
       bugs=[("emb-grad-no-psum", ["missing-collective"]), ("loss-on-stage-0", ["wrong-device-mask"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 12. lax.scan over a residual stack sharded over pp.


def scan_stack(w, b, x):
    def body(h, wb):
        return h + jnp.tanh(h @ wb[0] + wb[1]), None
    h, _ = lax.scan(body, x, (w, b))
    return h


C.gspmd("g.scan_residual_stack_sharded_layers.pp4xdp2", {"pp": 4, "dp": 2}, (P("pp"), P("pp"), P("dp")), P("dp"),
        scan_stack, (R(4, 8, 8, scale=0.4), R(4, 8, scale=0.1), R(8, 8)))


# 13. one-hot-gated experts by einsum over a stack sharded over ep.
def experts_einsum(wr, w1, w2, x):
    logits = x @ wr
    g = jax.nn.one_hot(jnp.argmax(logits, -1), w1.shape[0]) * jax.nn.softmax(logits, -1)
    hid = jax.nn.gelu(jnp.einsum("bd,edh->beh", x, w1))
    return jnp.einsum("be,bed->bd", g, jnp.einsum("beh,ehd->bed", hid, w2))


C.gspmd("g.onehot_experts_einsum_stack.ep8", {"ep": 8}, (P(), P("ep"), P("ep"), P()), P(), experts_einsum,
        (R(8, 8), R(8, 8, 16, scale=0.4), R(8, 16, 8, scale=0.3), R(16, 8)))


# 14. a vmapped bf16 ensemble with f32 accumulation, members over m.
def ensemble_bf16(w1, w2, x):
    def member(a, c):
        hid = jax.nn.relu(jnp.dot(x.astype(bf), a, preferred_element_type=f32))
        return jnp.dot(hid.astype(bf), c, preferred_element_type=f32)
    ys = jax.vmap(member)(w1, w2)
    return jnp.mean(ys, 0), ys


C.gspmd("g.vmap_ensemble_bf16_f32acc_members.m2", {"m": 2}, (P("m"), P("m"), P()), (P(), P("m")), ensemble_bf16,
        (R(2, 8, 16, scale=0.4, dt=bf), R(2, 16, 4, scale=0.3, dt=bf), R(8, 8)))

C.finish()
