"""samples/fresh131: a 131st batch of programs as a user writes them, on the theme of pipeline parallelism as users write it in current JAX (GPipe forward + backward unrolled tick by tick in Python with lax.ppermute hand-offs and a masked-psum loss broadcast, micro-batched schedules with the per-tick outputs written into a buffer, pp x dp and pp x tp (Megatron inside each stage) meshes, an embedding / LM-head encoder split over two stages, heterogeneous stages chosen by lax.switch on axis_index, optax.adam on stage-sharded parameters and optimizer state, fori_loop and scan schedules, a circular pipeline with virtual stages) plus GSPMD pipelines of a vmapped stage stack rolled with jnp.roll, none of them an idiom of samples/fresh .. fresh26, probe, train or wild (nor the fori_loop / stash idioms of fresh126).
Every correct pair is written to provoke a false alarm: each device runs every
stage tick on whatever it holds (garbage on the bubble ticks), the loss is
taken on one device by jnp.where(axis_index == last, loss, 0) and psum'd,
gradients come from jax.value_and_grad of that per-device loss (the cross-
device chain rule through the transposed ppermutes), shared parameters'
gradients are psum'd over pp although only one stage uses them.
shard_map families:
 1. GPipe training step unrolled (pp4, no micro-batches): stacked [S, D, D]
    weights over pp, tanh stages, MSE on the last stage, SGD. Bugs: the
    ppermute sends to the previous stage, the loss not masked to the last
    stage (every stage's local loss psum'd).
 2. the same with 3 micro-batches, 6 ticks written out, per-tick outputs
    written into a preallocated [M, mb, D] buffer, predictions broadcast by
    a masked psum (pp4). Bugs: the buffer slots reversed, the last tick
    missing from the schedule.
 3. pp2 x dp4: two layers per stage, the batch over dp, 2 micro-batches per
    dp shard, loss and gradients pmean'd over dp. Bugs: gradients not
    pmean'd over dp, the stage's layers indexed off by one.
 4. pp2 x tp4 (check_vma=True): a Megatron column/row-parallel MLP block
    with a residual in each stage, the row-parallel partials psum'd over tp.
    Bugs: the row-parallel bias added before the psum, the loss taken on
    stage 0.
 5. a two-stage encoder (pp2): embedding by jnp.take of integer ids, an MLP
    block with residual and layer norm per stage, LM head + cross entropy on
    the last stage; embedding and head replicated, their gradients psum'd
    over pp. Bugs: the head gradient not psum'd, the loss on stage 0.
 6. heterogeneous stages by lax.switch(axis_index) (tanh, residual relu,
    layer norm, linear), unrolled, SGD (pp4). Bugs: the switch index off by
    one, one tick missing from the schedule.
 7. optax.adam on stage-sharded parameters with the optimizer state (mid-
    training mu / nu / count) sharded like them, 2 micro-batches unrolled
    (pp4). Bugs: the loss only on the last micro-batch's output (buffer
    overwritten), the loss taken on stage 0.
 8. a GPipe training step in lax.fori_loop (pp4, 4 micro-batches) with the
    outputs written by dynamic_update_slice. Bugs: the output slot off by
    one, the ppermute backwards.
 9. a GPipe inference step in lax.scan (pp4 x dp2, 4 micro-batches per dp
    shard): stacked per-tick outputs ys[S-1:], softmax head. Bugs: ys
    sliced one tick early, the masked psum without the mask.
 10. a circular pipeline (pp4, 2 virtual stages, 4 micro-batches, 11 ticks
    unrolled) whose ppermute wraps from the last stage to the first; the
    repeat index (t - stage) // M picks the layer. Bugs: no wrap-around pair
    in the permutation, the repeat index computed without the stage offset.
GSPMD pairs (jax.jit with NamedSharding; correct): 11. praxis-style forward
of a vmapped stage stack rolled by jnp.roll (pp4); 12. its training step
with the micro-batch rows over dp (pp4 x dp2); 13. a circular rolled stack
with 2 repeats (pp2); 14. a rolled stack of Megatron MLP stages, hidden over
tp (pp2 x tp4).
Numerics: correct pairs agree at f32 rounding level (about 1e-6); bug
variants differ clearly on the seeded inputs.
Run from the repository root: bash samples/gen/run_fresh131.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh131.sh)
from fresh_lib import Corpus, seeded, mse, state_specs  # noqa: E402
from scalify_jax._export import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh131.py"
C = Corpus("samples/fresh131", SCRIPT, "samples/gen/run_fresh131.sh", sys.argv[1:])
rng, R, I = seeded(131131)
psum, pmean, idx, ppermute = lax.psum, lax.pmean, lax.axis_index, lax.ppermute
LR = 0.1


def fwd(n):
    return [(i, i + 1) for i in range(n - 1)]


def back(n):
    return [(i + 1, i) for i in range(n - 1)]


def dense_tanh(w, b, h):
    return jnp.tanh(h @ w + b)


def layer_norm(h, eps=1e-5):
    mu = jnp.mean(h, -1, keepdims=True)
    var = jnp.mean(jnp.square(h - mu), -1, keepdims=True)
    return (h - mu) * lax.rsqrt(var + eps)


def sgd(p, g):
    return jax.tree.map(lambda a, t: a - LR * t, p, g)


# ---------------------------------------------------------------------------
# 1. GPipe training step unrolled, no micro-batches.
S1, B1, D1 = 4, 8, 8


def ref1(W, b, x, y):
    def loss(W, b):
        h = x
        for s in range(S1):
            h = dense_tanh(W[s], b[s], h)
        return mse(h, y)
    l, (gW, gb) = jax.value_and_grad(loss, (0, 1))(W, b)
    return l, W - LR * gW, b - LR * gb


def gpipe1(bug):
    def f(W, b, x, y):
        me = idx("pp")

        def local_loss(W, b):
            w, bb = W[0], b[0]
            h = x
            for t in range(S1):
                out = dense_tanh(w, bb, h)
                if t < S1 - 1:
                    h = ppermute(out, "pp", back(S1) if bug == "ppermute-backwards" else fwd(S1))
            if bug == "no-last-mask":
                return mse(out, y)
            return jnp.where(me == S1 - 1, mse(out, y), 0.0)
        l, (gW, gb) = jax.value_and_grad(local_loss, (0, 1))(W, b)
        return psum(l, "pp"), W - LR * gW, b - LR * gb
    return f


C.smap("s.gpipe_unrolled_masked_psum_loss_sgd.pp4", {"pp": 4}, gpipe1,
       (P("pp"), P("pp"), P(), P()), (P(), P("pp"), P("pp")), ref1,
       (R(S1, D1, D1, scale=0.6), R(S1, D1, scale=0.1), R(B1, D1), R(B1, D1, scale=0.5)),
       bugs=[("ppermute-backwards", ["wrong-permutation"]), ("no-last-mask", ["missing-mask"])])

# ---------------------------------------------------------------------------
# 2. micro-batched GPipe, ticks written out, outputs into a buffer.
S2, M2, MB2, D2 = 4, 3, 4, 8


def ref2(W, b, x, y):
    def loss(W, b):
        h = x
        for s in range(S2):
            h = dense_tanh(W[s], b[s], h)
        return mse(h, y), h
    (l, pred), (gW, gb) = jax.value_and_grad(loss, (0, 1), has_aux=True)(W, b)
    return l, pred, W - LR * gW, b - LR * gb


def gpipe2(bug):
    def f(W, b, x, y):
        me = idx("pp")
        last = S2 - 1
        xs = x.reshape(M2, MB2, D2)
        ticks = M2 + S2 - 2 if bug == "missing-tick" else M2 + S2 - 1

        def local_loss(W, b):
            w, bb = W[0], b[0]
            h = jnp.zeros((MB2, D2), x.dtype)
            outs = jnp.zeros((M2, MB2, D2), x.dtype)
            for t in range(ticks):
                feed = xs[t] if t < M2 else jnp.zeros_like(xs[0])
                out = dense_tanh(w, bb, jnp.where(me == 0, feed, h))
                m = t - last
                if 0 <= m < M2:
                    slot = M2 - 1 - m if bug == "outputs-reversed" else m
                    outs = outs.at[slot].set(out)
                h = ppermute(out, "pp", fwd(S2))
            pred = outs.reshape(M2 * MB2, D2)
            return jnp.where(me == last, mse(pred, y), 0.0), pred
        (l, pred), (gW, gb) = jax.value_and_grad(local_loss, (0, 1), has_aux=True)(W, b)
        pred = psum(jnp.where(me == last, pred, 0.0), "pp")
        return psum(l, "pp"), pred, W - LR * gW, b - LR * gb
    return f


C.smap("s.gpipe_microbatch_ticks_unrolled_buffer.pp4", {"pp": 4}, gpipe2,
       (P("pp"), P("pp"), P(), P()), (P(), P(), P("pp"), P("pp")), ref2,
       (R(S2, D2, D2, scale=0.6), R(S2, D2, scale=0.1), R(M2 * MB2, D2), R(M2 * MB2, D2, scale=0.5)),
       bugs=[("outputs-reversed", ["wrong-order"]), ("missing-tick", ["missing-step"])])

# ---------------------------------------------------------------------------
# 3. pp2 x dp4, two layers per stage, micro-batches per dp shard.
L3, S3, DP3, B3, D3, M3 = 4, 2, 4, 16, 8, 2


def ref3(W, x, y):
    def loss(W):
        h = x
        for l in range(L3):
            h = jnp.tanh(h @ W[l]) + 0.5 * h
        return mse(h, y)
    l, g = jax.value_and_grad(loss)(W)
    return l, W - LR * g


def ppdp3(bug):
    def f(W, x, y):
        me = idx("pp")
        last = S3 - 1
        mb = x.shape[0] // M3
        xs = x.reshape(M3, mb, D3)

        def stage(W, h):
            for l in range(L3 // S3):
                w = W[(l + 1) % (L3 // S3)] if bug == "layers-off-by-one" else W[l]
                h = jnp.tanh(h @ w) + 0.5 * h
            return h

        def local_loss(W):
            h = jnp.zeros((mb, D3), x.dtype)
            preds = []
            for t in range(M3 + S3 - 1):
                inp = jnp.where(me == 0, xs[min(t, M3 - 1)], h)
                out = stage(W, inp)
                if t >= last:
                    preds.append(out)
                h = ppermute(out, "pp", fwd(S3))
            pred = jnp.concatenate(preds, 0)
            return jnp.where(me == last, mse(pred, y), 0.0)
        l, g = jax.value_and_grad(local_loss)(W)
        if bug != "grads-not-pmeaned-dp":
            g = pmean(g, "dp")
        return pmean(psum(l, "pp"), "dp"), W - LR * g
    return f


C.smap("s.pipeline_pp2_dp4_microbatch_pmean.pp2xdp4", {"pp": S3, "dp": DP3}, ppdp3,
       (P("pp"), P("dp"), P("dp")), (P(), P("pp")), ref3,
       (R(L3, D3, D3, scale=0.6), R(B3, D3), R(B3, D3, scale=0.5)),
       bugs=[("grads-not-pmeaned-dp", ["missing-collective"]), ("layers-off-by-one", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 4. pp2 x tp4, Megatron MLP block in each stage (check_vma=True).
S4, B4, D4, H4 = 2, 8, 8, 16


def mlp4(w1, b1, w2, b2, h):
    return h + jax.nn.gelu(h @ w1 + b1) @ w2 + b2


def ref4(p, x, y):
    def loss(p):
        h = x
        for s in range(S4):
            h = mlp4(p["w1"][s], p["b1"][s], p["w2"][s], p["b2"][s], h)
        return mse(h, y)
    l, g = jax.value_and_grad(loss)(p)
    return l, sgd(p, g)


def pptp4(bug):
    def f(p, x, y):
        me = idx("pp")

        def stage(q, h):
            a = jax.nn.gelu(h @ q["w1"][0] + q["b1"][0])
            part = a @ q["w2"][0]
            if bug == "bias-before-psum":
                return h + psum(part + q["b2"][0], "tp")
            return h + psum(part, "tp") + q["b2"][0]

        def local_loss(q):
            h = x
            out = stage(q, h)
            h = ppermute(out, "pp", fwd(S4))
            out = stage(q, h)
            on = 0 if bug == "loss-on-stage0" else S4 - 1
            return jnp.where(me == on, mse(out, y), 0.0)
        l, g = jax.value_and_grad(local_loss)(p)
        return psum(l, "pp"), sgd(p, g)
    return f


SPEC4 = {"w1": P("pp", None, "tp"), "b1": P("pp", "tp"), "w2": P("pp", "tp", None), "b2": P("pp")}
P4 = {"w1": R(S4, D4, H4, scale=0.4), "b1": R(S4, H4, scale=0.1), "w2": R(S4, H4, D4, scale=0.3),
      "b2": R(S4, D4, scale=0.2)}
C.smap("s.pipeline_megatron_stage_vma.pp2xtp4", {"pp": S4, "tp": 4}, pptp4,
       (SPEC4, P(), P()), (P(), SPEC4), ref4, (P4, R(B4, D4), R(B4, D4, scale=0.5)), check_vma=True,
       bugs=[("bias-before-psum", ["duplicated-term"]), ("loss-on-stage0", ["wrong-stage"])])

# ---------------------------------------------------------------------------
# 5. two-stage encoder: embedding on stage 0, LM head + CE on stage 1.
V5, D5, H5, B5, T5 = 16, 8, 16, 4, 4


def block5(w1, w2, g, h):
    return layer_norm(h + jax.nn.relu(h @ w1) @ w2) * g


def ce5(logits, labels):
    lp = jax.nn.log_softmax(logits, -1)
    return -jnp.mean(jnp.take_along_axis(lp, labels[..., None], -1))


def ref5(p, ids, labels):
    def loss(p):
        h = jnp.take(p["emb"], ids, axis=0)
        for s in range(2):
            h = block5(p["w1"][s], p["w2"][s], p["g"][s], h)
        return ce5(h @ p["head"], labels)
    l, g = jax.value_and_grad(loss)(p)
    return l, sgd(p, g)


def enc5(bug):
    def f(p, ids, labels):
        me = idx("pp")

        def local_loss(p):
            e = jnp.take(p["emb"], ids, axis=0)
            blk = lambda h: block5(p["w1"][0], p["w2"][0], p["g"][0], h)
            h0 = blk(e)
            h1 = blk(ppermute(h0, "pp", [(0, 1)]))
            on = 0 if bug == "loss-on-stage0" else 1
            return jnp.where(me == on, ce5(h1 @ p["head"], labels), 0.0)
        l, g = jax.value_and_grad(local_loss)(p)
        g["emb"] = psum(g["emb"], "pp")
        if bug != "head-grad-not-psummed":
            g["head"] = psum(g["head"], "pp")
        return psum(l, "pp"), sgd(p, g)
    return f


SPEC5 = {"emb": P(), "w1": P("pp"), "w2": P("pp"), "g": P("pp"), "head": P()}
P5 = {"emb": R(V5, D5), "w1": R(2, D5, H5, scale=0.4), "w2": R(2, H5, D5, scale=0.3),
      "g": 1.0 + R(2, D5, scale=0.1), "head": R(D5, V5, scale=0.5)}
C.smap("s.two_stage_encoder_take_embed_lm_head_ce.pp2", {"pp": 2}, enc5,
       (SPEC5, P(), P()), (P(), SPEC5), ref5, (P5, I(0, V5, B5, T5), I(0, V5, B5, T5)),
       bugs=[("head-grad-not-psummed", ["missing-collective"]), ("loss-on-stage0", ["wrong-stage"])])

# ---------------------------------------------------------------------------
# 6. heterogeneous stages by lax.switch on axis_index, unrolled.
S6, B6, D6 = 4, 8, 8
BRANCHES6 = [
    lambda w, b, h: jnp.tanh(h @ w + b),
    lambda w, b, h: h + jax.nn.relu(h @ w + b),
    lambda w, b, h: layer_norm(h @ w) + b,
    lambda w, b, h: h @ w + b,
]


def ref6(W, b, x, y):
    def loss(W, b):
        h = x
        for s in range(S6):
            h = BRANCHES6[s](W[s], b[s], h)
        return mse(h, y)
    l, (gW, gb) = jax.value_and_grad(loss, (0, 1))(W, b)
    return l, W - LR * gW, b - LR * gb


def switch6(bug):
    def f(W, b, x, y):
        me = idx("pp")
        which = jnp.minimum(me + 1, S6 - 1) if bug == "switch-index-off-by-one" else me
        ticks = S6 - 1 if bug == "missing-tick" else S6

        def local_loss(W, b):
            h = x
            for t in range(ticks):
                out = lax.switch(which, BRANCHES6, W[0], b[0], h)
                if t < S6 - 1:
                    h = ppermute(out, "pp", fwd(S6))
            return jnp.where(me == S6 - 1, mse(out, y), 0.0)
        l, (gW, gb) = jax.value_and_grad(local_loss, (0, 1))(W, b)
        return psum(l, "pp"), W - LR * gW, b - LR * gb
    return f


C.smap("s.hetero_stages_lax_switch_axis_index.pp4", {"pp": 4}, switch6,
       (P("pp"), P("pp"), P(), P()), (P(), P("pp"), P("pp")), ref6,
       (R(S6, D6, D6, scale=0.5), R(S6, D6, scale=0.2), R(B6, D6), R(B6, D6, scale=0.5)),
       bugs=[("switch-index-off-by-one", ["wrong-offset"]), ("missing-tick", ["missing-step"])])

# ---------------------------------------------------------------------------
# 7. optax.adam on stage-sharded parameters and optimizer state.
S7, M7, MB7, D7 = 4, 2, 4, 8
OPT7 = optax.adam(1e-2)


def ref7(p, st, x, y):
    def loss(p):
        h = x
        for s in range(S7):
            h = dense_tanh(p["w"][s], p["b"][s], h)
        return mse(h, y)
    l, g = jax.value_and_grad(loss)(p)
    upd, st = OPT7.update(g, st, p)
    return l, optax.apply_updates(p, upd), st


def adam7(bug):
    def f(p, st, x, y):
        me = idx("pp")
        last = S7 - 1
        xs = x.reshape(M7, MB7, D7)

        def local_loss(p):
            h = jnp.zeros((MB7, D7), x.dtype)
            outs = jnp.zeros((M7, MB7, D7), x.dtype)
            for t in range(M7 + S7 - 1):
                out = dense_tanh(p["w"][0], p["b"][0], jnp.where(me == 0, xs[min(t, M7 - 1)], h))
                if t >= last:
                    if bug == "buffer-overwritten":
                        outs = jnp.broadcast_to(out, outs.shape)
                    else:
                        outs = outs.at[t - last].set(out)
                h = ppermute(out, "pp", fwd(S7))
            on = 0 if bug == "loss-on-stage0" else last
            return jnp.where(me == on, mse(outs.reshape(-1, D7), y), 0.0)
        l, g = jax.value_and_grad(local_loss)(p)
        upd, st = OPT7.update(g, st, p)
        return psum(l, "pp"), optax.apply_updates(p, upd), st
    return f


P7 = {"w": R(S7, D7, D7, scale=0.6), "b": R(S7, D7, scale=0.1)}
ST7 = OPT7.init(P7)
ST7 = (ST7[0]._replace(count=jnp.int32(5), mu={"w": R(S7, D7, D7, scale=0.05), "b": R(S7, D7, scale=0.05)},
                       nu={"w": np.abs(R(S7, D7, D7, scale=0.01)) + 1e-4,
                           "b": np.abs(R(S7, D7, scale=0.01)) + 1e-4}),) + tuple(ST7[1:])
SPEC7 = {"w": P("pp"), "b": P("pp")}
SST7 = state_specs(ST7, SPEC7)
C.smap("s.pipeline_optax_adam_sharded_state.pp4", {"pp": 4}, adam7,
       (SPEC7, SST7, P(), P()), (P(), SPEC7, SST7), ref7,
       (P7, ST7, R(M7 * MB7, D7), R(M7 * MB7, D7, scale=0.5)),
       bugs=[("buffer-overwritten", ["wrong-order"]), ("loss-on-stage0", ["wrong-stage"])])

# ---------------------------------------------------------------------------
# 8. GPipe training step in lax.fori_loop.
S8, M8, MB8, D8 = 4, 4, 2, 8


def ref8(W, b, x, y):
    return ref1_like(W, b, x, y, S8)


def ref1_like(W, b, x, y, S):
    def loss(W, b):
        h = x
        for s in range(S):
            h = dense_tanh(W[s], b[s], h)
        return mse(h, y)
    l, (gW, gb) = jax.value_and_grad(loss, (0, 1))(W, b)
    return l, W - LR * gW, b - LR * gb


def fori8(bug):
    def f(W, b, x, y):
        me = idx("pp")
        last = S8 - 1
        xs = x.reshape(M8, MB8, D8)
        perm = back(S8) if bug == "ppermute-backwards" else fwd(S8)
        off = S8 - 2 if bug == "slot-off-by-one" else S8 - 1

        def local_loss(W, b):
            def tick(t, c):
                h, outs = c
                feed = lax.dynamic_index_in_dim(xs, jnp.minimum(t, M8 - 1), 0, keepdims=False)
                out = dense_tanh(W[0], b[0], jnp.where(me == 0, feed, h))
                slot = t - off
                upd = lax.dynamic_update_index_in_dim(outs, out, jnp.clip(slot, 0, M8 - 1), 0)
                outs = jnp.where((slot >= 0) & (slot < M8), upd, outs)
                return ppermute(out, "pp", perm), outs
            c0 = (jnp.zeros((MB8, D8), x.dtype), jnp.zeros((M8, MB8, D8), x.dtype))
            _, outs = lax.fori_loop(0, M8 + S8 - 1, tick, c0)
            return jnp.where(me == last, mse(outs.reshape(-1, D8), y), 0.0)
        l, (gW, gb) = jax.value_and_grad(local_loss, (0, 1))(W, b)
        return psum(l, "pp"), W - LR * gW, b - LR * gb
    return f


C.smap("s.gpipe_fori_loop_dynamic_update_slot.pp4", {"pp": 4}, fori8,
       (P("pp"), P("pp"), P(), P()), (P(), P("pp"), P("pp")), ref8,
       (R(S8, D8, D8, scale=0.6), R(S8, D8, scale=0.1), R(M8 * MB8, D8), R(M8 * MB8, D8, scale=0.5)),
       bugs=[("slot-off-by-one", ["wrong-offset"]), ("ppermute-backwards", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 9. GPipe inference in lax.scan, pp4 x dp2.
S9, DP9, M9, MB9, D9, C9 = 4, 2, 4, 2, 8, 6


def ref9(W, g, head, x):
    h = x
    for s in range(S9):
        h = layer_norm(h + jnp.tanh(h @ W[s])) * g[s]
    return jax.nn.softmax(h @ head, -1)


def scan9(bug):
    def f(W, g, head, x):
        me = idx("pp")
        last = S9 - 1
        xs = x.reshape(M9, MB9, D9)
        feeds = jnp.concatenate([xs, jnp.zeros((S9 - 1, MB9, D9), x.dtype)], 0)

        def tick(h, feed):
            inp = jnp.where(me == 0, feed, h)
            out = layer_norm(inp + jnp.tanh(inp @ W[0])) * g[0]
            return ppermute(out, "pp", fwd(S9)), out
        _, ys = lax.scan(tick, jnp.zeros((MB9, D9), x.dtype), feeds)
        ys = ys[S9 - 2:-1] if bug == "ys-one-tick-early" else ys[S9 - 1:]
        ys = ys if bug == "no-mask-broadcast" else jnp.where(me == last, ys, 0.0)
        h = psum(ys, "pp").reshape(M9 * MB9, D9)
        return jax.nn.softmax(h @ head, -1)
    return f


C.smap("s.gpipe_scan_inference_ys_softmax.pp4xdp2", {"pp": S9, "dp": DP9}, scan9,
       (P("pp"), P("pp"), P(), P("dp")), P("dp"), ref9,
       (R(S9, D9, D9, scale=0.6), 1.0 + R(S9, D9, scale=0.1), R(D9, C9), R(DP9 * M9 * MB9, D9)),
       bugs=[("ys-one-tick-early", ["wrong-offset"]), ("no-mask-broadcast", ["missing-mask"])])

# ---------------------------------------------------------------------------
# 10. circular pipeline with virtual stages, wrap-around ppermute.
S10, V10, M10, MB10, D10 = 4, 2, 4, 2, 8


def ref10(W, x, y):
    def loss(W):
        h = x
        for v in range(V10):
            for s in range(S10):
                h = jnp.tanh(h @ W[v, s]) + 0.3 * h
        return mse(h, y), h
    (l, pred), g = jax.value_and_grad(loss, has_aux=True)(W)
    return l, pred, W - LR * g


def circ10(bug):
    def f(W, x, y):
        me = idx("pp")
        last = S10 - 1
        xs = x.reshape(M10, MB10, D10)
        perm = fwd(S10) if bug == "no-wraparound" else [(i, (i + 1) % S10) for i in range(S10)]

        def local_loss(W):
            h = jnp.zeros((MB10, D10), x.dtype)
            outs = jnp.zeros((M10, MB10, D10), x.dtype)
            for t in range(M10 * V10 + S10 - 1):
                rep = t // M10 if bug == "repeat-no-stage-offset" else (t - me) // M10
                rep = jnp.clip(rep, 0, V10 - 1)
                w = lax.dynamic_index_in_dim(W[:, 0], rep, 0, keepdims=False)
                inp = jnp.where(me == 0, xs[t], h) if t < M10 else h
                out = jnp.tanh(inp @ w) + 0.3 * inp
                m = t - last - M10 * (V10 - 1)
                if 0 <= m < M10:
                    outs = outs.at[m].set(out)
                h = ppermute(out, "pp", perm)
            pred = outs.reshape(-1, D10)
            return jnp.where(me == last, mse(pred, y), 0.0), pred
        (l, pred), g = jax.value_and_grad(local_loss, has_aux=True)(W)
        return psum(l, "pp"), psum(jnp.where(me == last, pred, 0.0), "pp"), W - LR * g
    return f


C.smap("s.circular_virtual_stages_wraparound.pp4", {"pp": S10}, circ10,
       (P(None, "pp"), P(), P()), (P(), P(), P(None, "pp")), ref10,
       (R(V10, S10, D10, D10, scale=0.5), R(M10 * MB10, D10), R(M10 * MB10, D10, scale=0.5)),
       bugs=[("no-wraparound", ["wrong-permutation"]), ("repeat-no-stage-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# GSPMD pipelines: a vmapped stage stack rolled with jnp.roll.


def constrain(mesh, spec):
    m = make_mesh(mesh)
    return lambda a: lax.with_sharding_constraint(a, NamedSharding(m, spec))


def rolled_pipeline(stage, params, xs, S, sc):
    """praxis style: state[s] is stage s's input; each tick shifts the state
    one stage on (jnp.roll), feeds micro-batch t into stage 0, runs the
    vmapped stage stack and keeps the last stage's output."""
    M = xs.shape[0]
    state = sc(jnp.zeros((S,) + xs.shape[1:], xs.dtype))
    outs = []
    for t in range(M + S - 1):
        state = jnp.roll(state, 1, axis=0)
        state = state.at[0].set(xs[t] if t < M else jnp.zeros_like(xs[0]))
        state = sc(jax.vmap(stage)(params, state))
        if t >= S - 1:
            outs.append(state[S - 1])
    return jnp.stack(outs)


# 11. forward (pp4)
S11, M11, MB11, D11 = 4, 4, 2, 8
sc11 = constrain({"pp": S11}, P("pp"))


def g11(W, b, xs):
    return rolled_pipeline(lambda p, h: dense_tanh(p[0], p[1], h), (W, b), xs, S11, sc11)


C.gspmd("g.praxis_rolled_stage_stack_forward.pp4", {"pp": S11}, (P("pp"), P("pp"), P()), P(), g11,
        (R(S11, D11, D11, scale=0.6), R(S11, D11, scale=0.1), R(M11, MB11, D11)))

# 12. training step, micro-batch rows over dp (pp4 x dp2)
S12, M12, MB12, D12 = 4, 2, 4, 8
sc12 = constrain({"pp": S12, "dp": 2}, P("pp", "dp"))


def g12(W, b, xs, ys):
    def loss(W, b):
        out = rolled_pipeline(lambda p, h: dense_tanh(p[0], p[1], h), (W, b), xs, S12, sc12)
        return mse(out, ys)
    l, (gW, gb) = jax.value_and_grad(loss, (0, 1))(W, b)
    return l, W - LR * gW, b - LR * gb


C.gspmd("g.praxis_rolled_stack_train_sgd.pp4xdp2", {"pp": S12, "dp": 2},
        (P("pp"), P("pp"), P(None, "dp"), P(None, "dp")), (P(), P("pp"), P("pp")), g12,
        (R(S12, D12, D12, scale=0.6), R(S12, D12, scale=0.1), R(M12, MB12, D12), R(M12, MB12, D12, scale=0.5)))

# 13. circular rolled stack, 2 repeats (pp2), M == S so a micro-batch re-enters stage 0
S13, V13, M13, MB13, D13 = 2, 2, 2, 4, 8
sc13 = constrain({"pp": S13}, P("pp"))


def g13(W, xs):
    state = sc13(jnp.zeros((S13, MB13, D13), xs.dtype))
    outs = []
    for t in range(M13 * V13 + S13 - 1):
        rolled = jnp.roll(state, 1, axis=0)   # stage S-1's output wraps to stage 0
        first = xs[t] if t < M13 else rolled[0]
        state = rolled.at[0].set(first)
        rep = jnp.clip((t - jnp.arange(S13)) // M13, 0, V13 - 1)
        w = W[rep, jnp.arange(S13)]
        state = sc13(jax.vmap(lambda w, h: jnp.tanh(h @ w) + 0.3 * h)(w, state))
        if t >= M13 * (V13 - 1) + S13 - 1:
            outs.append(state[S13 - 1])
    return jnp.stack(outs)


C.gspmd("g.circular_rolled_stack_repeats.pp2", {"pp": S13}, (P(None, "pp"), P()), P(), g13,
        (R(V13, S13, D13, D13, scale=0.5), R(M13, MB13, D13)))

# 14. rolled stack of Megatron MLP stages, hidden over tp (pp2 x tp4)
S14, M14, MB14, D14, H14 = 2, 3, 2, 8, 16
sc14 = constrain({"pp": S14, "tp": 4}, P("pp"))


def g14(p, xs, ys):
    out = rolled_pipeline(lambda q, h: mlp4(q["w1"], q["b1"], q["w2"], q["b2"], h), p, xs, S14, sc14)
    return out, mse(out, ys)


SPEC14 = {"w1": P("pp", None, "tp"), "b1": P("pp", "tp"), "w2": P("pp", "tp", None), "b2": P("pp")}
P14 = {"w1": R(S14, D14, H14, scale=0.4), "b1": R(S14, H14, scale=0.1), "w2": R(S14, H14, D14, scale=0.3),
       "b2": R(S14, D14, scale=0.2)}
C.gspmd("g.rolled_megatron_stage_stack.pp2xtp4", {"pp": S14, "tp": 4}, (SPEC14, P(), P()), (P(), P()), g14,
        (P14, R(M14, MB14, D14), R(M14, MB14, D14, scale=0.5)))

C.finish()
