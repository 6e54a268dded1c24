"""samples/fresh126: a 126th batch of programs as a user writes them, on the theme of pipeline parallelism and point-to-point communication written with jax.shard_map and lax.ppermute in current JAX (GPipe over a pp axis in lax.fori_loop / lax.scan with the bubble, its backward pass by jax.value_and_grad inside the per-device body or written by hand with jax.vjp and a stash, a circular pipeline with virtual stages whose last stage wraps to the first, pp x dp with gradients reduced over dp, the loss on the last stage broadcast by a masked psum, tied embeddings shared by the first and the last stage, a hand-written ring all-reduce, halo exchanges of 1-D convolutions with zero and reflect padding, a token shift across sequence shards) plus GSPMD pipelines of a vmapped stage stack rolled with jnp.roll, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
Residual tanh layers h + tanh(h W + b) keep activations of order 1 through
up to 8 layers; stage s of the pipeline holds layer block s, so the
baseline is the plain sequential stack over the whole batch.
shard_map families:
 1. GPipe forward (pp4, M = 6 micro-batches of 2 rows) in a lax.fori_loop
    over M + S - 1 ticks: stage 0 reads micro-batch min(t, M - 1), the
    others the state ppermute'd i -> i + 1 (non-cyclic), the last stage
    writes micro-batch t - (S - 1) with a validity mask, the output buffer
    psum'd over pp. Bugs: the handoff sent i -> i - 1, the output written
    at t - S (off by one).
 2. a GPipe SGD step (pp4, lax.scan over ticks) with jax.value_and_grad of
    the per-device loss inside the body: every stage computes a squared
    error on its own output, the stage mask keeps the last stage's, the
    loss broadcast by psum over pp. Bugs: no stage mask (every stage's
    error psum'd and differentiated), the target micro-batch index off by
    one.
 3. a GPipe step with a hand-written backward (pp4): an all-forward scan
    stashing each stage's inputs by micro-batch, then an all-backward scan
    recomputing the stage by jax.vjp from the stash, cotangents
    ppermute'd i -> i - 1, weight gradients accumulated. Bugs: cotangents
    sent i -> i + 1, the recompute reading the stash one micro-batch late.
 4. a circular (interleaved) pipeline forward (pp4, V = 2 virtual stages per
    device, layer v S + s on device s, M = S micro-batches so the last
    stage's output wraps straight into stage 0 by a cyclic ppermute);
    stage s at tick t runs repeat (t - s) // M. Bugs: the ring not closed
    (no (S - 1) -> 0 pair), the repeat computed as t // M.
 5. pp2 x dp4 SGD step, two layers per stage, batch over dp, gradients
    pmean'd over dp, the loss psum'd over pp with the stage mask then
    pmean'd over dp. Bugs: gradients psum'd over dp (4x step), gradients
    pmean'd over pp instead of dp.
 6. tied input/output embeddings over pp4 x dp2: stage 0 looks the tokens
    up in E, stage 3 scores against E^T with a softmax cross-entropy; the
    gradient of E is psum'd over pp (the first and the last stage hold
    its two parts) and pmean'd over dp. Bugs: no psum over pp, pmean over
    pp instead of psum.
 7. a ring all-reduce by hand over dp8 of the gradient of a softmax
    regression (one row of W per chunk): reduce-scatter by 7 ppermutes
    i -> i + 1 accumulating chunk (r - k - 1) mod n, all-gather by 7 more,
    then the mean and an SGD step. Bugs: the reduce-scatter adds chunk
    (r - k) mod n, the all-gather phase sends to the left.
 8. a 1-D convolution (K = 5, SAME, zero padding) over a sequence sharded
    over sp4 (dp2 x sp4): 2-row halos from both neighbours by
    non-cyclic ppermutes (zeros at the global edges). Bugs: the halos
    swapped (left halo from the right neighbour), cyclic ppermutes
    (periodic instead of zero padding).
 9. a depthwise 1-D convolution with reflect padding (jnp.pad
    mode="reflect") over sp4 (dp2 x sp4): interior halos by ppermute,
    reflected rows on the first and last shards. Bugs: jnp.pad reflect
    applied on every shard (edge fill on interior shards), symmetric
    instead of reflect at the global edges.
10. an RWKV-style token shift across sequence shards (dp2 x sp4): the
    previous token's features (a learnt fill vector at position 0) from
    the last row of the left neighbour, mixed and projected. Bugs: the
    fill applied on every shard's first row, the last row sent to the
    left neighbour (next-token features).
11. GPipe evaluation (pp4 x dp2, M = 5, lax.scan over micro-batches
    padded with S - 1 bubble slots): per-micro-batch losses on the last
    stage, broadcast by a masked psum over pp, pmean'd over dp. Bugs: the
    loss taken on stage 0, bubble ticks not masked (their losses added
    into micro-batch 0's slot).
GSPMD pairs (jax.jit with shardings over a stage axis; correct): 12. a
vmapped stage stack (S = 4 over pp, micro-batch rows over dp) advanced by
jnp.roll of the state, stage 0 fed by .at[0].set; 13. the circular version
(V = 2 repeats, weights (V, S, D, D) over (None, pp), per-stage repeat
chosen by a gather, the roll wrapping the last stage into the first);
14. a value_and_grad SGD step through the rolled pipeline (pp2 x dp4).
Numerics: correct pairs agree at f32 rounding (about 1e-6); bug variants
differ at order 0.1 to 1 on the seeded inputs.
Run from the repository root: bash samples/gen/run_fresh126.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh126.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

SCRIPT = "samples/gen/fresh126.py"
C = Corpus("samples/fresh126", SCRIPT, "samples/gen/run_fresh126.sh", sys.argv[1:])
rng, R, I = seeded(126126)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index
D = 8


def layer(h, w, b):
    return h + jnp.tanh(h @ w + b)


def stack(h, W, b):
    for l in range(W.shape[0]):
        h = layer(h, W[l], b[l])
    return h


def fwd_perm(n):
    return [(j, j + 1) for j in range(n - 1)]


def bwd_perm(n):
    return [(j, j - 1) for j in range(1, n)]


# ---------------------------------------------------------------------------
# 1. GPipe forward in a fori_loop.
S1, M1, MB1 = 4, 6, 2


def gpipe_ref(x, W, b):
    return stack(x.reshape(M1 * MB1, D), W, b).reshape(M1, MB1, D)


def gpipe_fwd(bug):
    def f(x, W, b):
        s = idx("pp")
        w, bb = W[0], b[0]
        perm = bwd_perm(S1) if bug == "handoff-backward" else fwd_perm(S1)

        def tick(t, c):
            state, out = c
            inp = jnp.where(s == 0, x[jnp.minimum(t, M1 - 1)], state)
            y = layer(inp, w, bb)
            k = t - S1 if bug == "write-off-by-one" else t - (S1 - 1)
            valid = (s == S1 - 1) & (k >= 0)
            out = jnp.where(valid, lax.dynamic_update_index_in_dim(out, y, jnp.clip(k, 0, M1 - 1), 0), out)
            return lax.ppermute(y, "pp", perm), out
        _, out = lax.fori_loop(0, M1 + S1 - 1, tick, (jnp.zeros((MB1, D)), jnp.zeros((M1, MB1, D))))
        return psum(out, "pp")
    return f


C.smap("s.gpipe_forward_foriloop_bubble.pp4", {"pp": 4}, gpipe_fwd, (P(), P("pp"), P("pp")), P(),
       gpipe_ref, (R(M1, MB1, D), R(S1, D, D, scale=0.4), R(S1, D, scale=0.2)),
       bugs=[("handoff-backward", ["wrong-permutation"]), ("write-off-by-one", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 2. GPipe SGD step, value_and_grad inside the body, masked loss psum'd.
S2, M2, MB2, LR2 = 4, 4, 2, 0.2


def gpipe_sgd_ref(W, b, x, y):
    def loss(W, b):
        h = stack(x.reshape(-1, D), W, b)
        return jnp.mean(jnp.square(h - y.reshape(-1, D)))
    l, (gW, gb) = jax.value_and_grad(loss, (0, 1))(W, b)
    return W - LR2 * gW, b - LR2 * gb, l


def gpipe_sgd(bug):
    def f(W, b, x, y):
        s = idx("pp")

        def local_loss(W, b):
            def tick(c, t):
                state, acc = c
                inp = jnp.where(s == 0, x[jnp.minimum(t, M2 - 1)], state)
                out = layer(inp, W[0], b[0])
                k = t - (S2 - 1)
                kt = k - 1 if bug == "target-off-by-one" else k
                err = jnp.sum(jnp.square(out - y[jnp.clip(kt, 0, M2 - 1)]))
                acc = acc + jnp.where(k >= 0, err, 0.0)
                return (lax.ppermute(out, "pp", fwd_perm(S2)), acc), None
            (_, acc), _ = lax.scan(tick, (jnp.zeros((MB2, D)), jnp.float32(0)), jnp.arange(M2 + S2 - 1))
            l = acc / (M2 * MB2 * D)
            return l if bug == "no-stage-mask" else jnp.where(s == S2 - 1, l, 0.0)
        l, (gW, gb) = jax.value_and_grad(local_loss, (0, 1))(W, b)
        return W - LR2 * gW, b - LR2 * gb, psum(l, "pp")
    return f


C.smap("s.gpipe_sgd_valgrad_stage_mask.pp4", {"pp": 4}, gpipe_sgd, (P("pp"), P("pp"), P(), P()),
       (P("pp"), P("pp"), P()), gpipe_sgd_ref,
       (R(S2, D, D, scale=0.4), R(S2, D, scale=0.2), R(M2, MB2, D), R(M2, MB2, D)),
       bugs=[("no-stage-mask", ["missing-mask"]), ("target-off-by-one", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. GPipe with a hand-written backward: stash, jax.vjp recompute, cotangents to i - 1.
S3, M3, MB3 = 4, 4, 2


def manual_bwd_ref(W, b, x, y):
    def loss(W, b):
        h = stack(x.reshape(-1, D), W, b)
        return jnp.sum(jnp.square(h - y.reshape(-1, D))) / (M3 * MB3)
    l, (gW, gb) = jax.value_and_grad(loss, (0, 1))(W, b)
    return gW, gb, l


def manual_bwd(bug):
    def f(W, b, x, y):
        s = idx("pp")
        w, bb = W[0], b[0]
        last = s == S3 - 1
        T = M3 + S3 - 1

        def fwd(c, t):
            state, stash, loss = c
            j = t - s
            ok = (j >= 0) & (j < M3)
            jc = jnp.clip(j, 0, M3 - 1)
            inp = jnp.where(s == 0, x[jc], state)
            stash = jnp.where(ok, lax.dynamic_update_index_in_dim(stash, inp, jc, 0), stash)
            out = layer(inp, w, bb)
            loss = loss + jnp.where(ok & last, jnp.sum(jnp.square(out - y[jc])), 0.0)
            return (lax.ppermute(out, "pp", fwd_perm(S3)), stash, loss), None
        z = jnp.zeros((MB3, D))
        (_, stash, loss), _ = lax.scan(fwd, (z, jnp.zeros((M3, MB3, D)), jnp.float32(0)), jnp.arange(T))

        def bwd(c, t):
            g_in, gw, gb = c
            j = t - (S3 - 1 - s)
            ok = (j >= 0) & (j < M3)
            jc = jnp.clip(j, 0, M3 - 1)
            h = stash[jnp.clip(j + 1, 0, M3 - 1)] if bug == "stash-late" else stash[jc]
            out, vjp = jax.vjp(layer, h, w, bb)
            dy = jnp.where(last, 2.0 * (out - y[jc]) / (M3 * MB3), g_in)
            dx, dw, db = vjp(dy)
            gw = gw + jnp.where(ok, dw, 0.0)
            gb = gb + jnp.where(ok, db, 0.0)
            perm = fwd_perm(S3) if bug == "cotangent-forward" else bwd_perm(S3)
            return (lax.ppermute(dx, "pp", perm), gw, gb), None
        (_, gw, gb), _ = lax.scan(bwd, (z, jnp.zeros_like(w), jnp.zeros_like(bb)), jnp.arange(T))
        return gw[None], gb[None], psum(loss, "pp") / (M3 * MB3)
    return f


C.smap("s.gpipe_manual_backward_vjp_stash.pp4", {"pp": 4}, manual_bwd, (P("pp"), P("pp"), P(), P()),
       (P("pp"), P("pp"), P()), manual_bwd_ref,
       (R(S3, D, D, scale=0.4), R(S3, D, scale=0.2), R(M3, MB3, D), R(M3, MB3, D)),
       bugs=[("cotangent-forward", ["wrong-permutation"]), ("stash-late", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 4. circular pipeline, V virtual stages per device, the ring closed.
S4, V4, M4, MB4 = 4, 2, 4, 2


def circular_ref(x, W, b):
    return stack(x.reshape(-1, D), W.reshape(V4 * S4, D, D), b.reshape(V4 * S4, D)).reshape(M4, MB4, D)


def circular(bug):
    def f(x, W, b):
        s = idx("pp")
        if bug == "ring-open":
            perm = fwd_perm(S4)
        else:
            perm = [(j, (j + 1) % S4) for j in range(S4)]

        def tick(t, c):
            state, out = c
            i = t - s
            v = jnp.clip((t if bug == "repeat-from-tick" else i) // M4, 0, V4 - 1)
            m = jnp.clip(i, 0, V4 * M4 - 1) % M4
            inp = jnp.where((s == 0) & (t < M4), x[jnp.minimum(t, M4 - 1)], state)
            y = layer(inp, W[v, 0], b[v, 0])
            done = (s == S4 - 1) & (i >= (V4 - 1) * M4) & (i < V4 * M4)
            out = jnp.where(done, lax.dynamic_update_index_in_dim(out, y, m, 0), out)
            return lax.ppermute(y, "pp", perm), out
        _, out = lax.fori_loop(0, V4 * M4 + S4 - 1, tick, (jnp.zeros((MB4, D)), jnp.zeros((M4, MB4, D))))
        return psum(out, "pp")
    return f


C.smap("s.circular_pipeline_virtual_stages_wrap.pp4", {"pp": 4}, circular, (P(), P(None, "pp"), P(None, "pp")), P(),
       circular_ref, (R(M4, MB4, D), R(V4, S4, D, D, scale=0.35), R(V4, S4, D, scale=0.2)),
       bugs=[("ring-open", ["wrong-permutation"]), ("repeat-from-tick", ["wrong-index"])])

# ---------------------------------------------------------------------------
# 5. pp2 x dp4 SGD step, two layers per stage, gradients pmean'd over dp.
S5, L5, M5, MB5, LR5 = 2, 2, 4, 2, 0.3
B5 = 4 * M5 * MB5


def ppdp_ref(W, b, x, y):
    def loss(W, b):
        h = stack(x, W.reshape(S5 * L5, D, D), b.reshape(S5 * L5, D))
        return jnp.mean(jnp.square(h - y))
    l, (gW, gb) = jax.value_and_grad(loss, (0, 1))(W, b)
    return W - LR5 * gW, b - LR5 * gb, l


def ppdp(bug):
    def f(W, b, x, y):
        s = idx("pp")
        xm, ym = x.reshape(M5, MB5, D), y.reshape(M5, MB5, D)

        def local_loss(W, b):
            def tick(t, c):
                state, acc = c
                inp = jnp.where(s == 0, xm[jnp.minimum(t, M5 - 1)], state)
                out = stack(inp, W[0], b[0])
                k = t - (S5 - 1)
                err = jnp.sum(jnp.square(out - ym[jnp.clip(k, 0, M5 - 1)]))
                return lax.ppermute(out, "pp", fwd_perm(S5)), acc + jnp.where((k >= 0) & (s == S5 - 1), err, 0.0)
            _, acc = lax.fori_loop(0, M5 + S5 - 1, tick, (jnp.zeros((MB5, D)), jnp.float32(0)))
            return acc / (M5 * MB5 * D)
        l, g = jax.value_and_grad(local_loss, (0, 1))(W, b)
        if bug == "grad-psum-dp":
            g = jax.tree.map(lambda t: psum(t, "dp"), g)
        elif bug == "grad-pmean-pp":
            g = jax.tree.map(lambda t: pmean(t, "pp"), g)
        else:
            g = jax.tree.map(lambda t: pmean(t, "dp"), g)
        return W - LR5 * g[0], b - LR5 * g[1], pmean(psum(l, "pp"), "dp")
    return f


C.smap("s.pp2xdp4_sgd_grad_pmean_dp.pp2xdp4", {"pp": 2, "dp": 4}, ppdp,
       (P("pp"), P("pp"), P("dp"), P("dp")), (P("pp"), P("pp"), P()), ppdp_ref,
       (R(S5, L5, D, D, scale=0.4), R(S5, L5, D, scale=0.2), R(B5, D), R(B5, D)),
       bugs=[("grad-psum-dp", ["wrong-collective"]), ("grad-pmean-pp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 6. tied embeddings between the first and the last stage, pp4 x dp2.
S6, M6, MB6, V6, LR6 = 4, 2, 2, 16, 0.5
B6 = 2 * M6 * MB6


def tied_loss(E, W, b, ids, tgt):
    h = stack(E[ids], W, b)
    logits = h @ E.T
    return jnp.mean(jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, tgt[:, None], -1)[:, 0])


def tied_ref(E, W, b, ids, tgt):
    l, (gE, gW, gb) = jax.value_and_grad(tied_loss, (0, 1, 2))(E, W, b, ids, tgt)
    return E - LR6 * gE, W - LR6 * gW, b - LR6 * gb, l


def tied(bug):
    def f(E, W, b, ids, tgt):
        s = idx("pp")
        im, tm = ids.reshape(M6, MB6), tgt.reshape(M6, MB6)

        def local_loss(E, W, b):
            def tick(c, t):
                state, acc = c
                inp = jnp.where(s == 0, E[im[jnp.minimum(t, M6 - 1)]], state)
                h = layer(inp, W[0], b[0])
                k = t - (S6 - 1)
                logits = h @ E.T
                tk = tm[jnp.clip(k, 0, M6 - 1)]
                ce = jnp.sum(jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, tk[:, None], -1)[:, 0])
                acc = acc + jnp.where((k >= 0) & (s == S6 - 1), ce, 0.0)
                return (lax.ppermute(h, "pp", fwd_perm(S6)), acc), None
            (_, acc), _ = lax.scan(tick, (jnp.zeros((MB6, D)), jnp.float32(0)), jnp.arange(M6 + S6 - 1))
            return acc / (M6 * MB6)
        l, (gE, gW, gb) = jax.value_and_grad(local_loss, (0, 1, 2))(E, W, b)
        if bug == "tied-grad-no-psum":
            pass
        elif bug == "tied-grad-pmean-pp":
            gE = pmean(gE, "pp")
        else:
            gE = psum(gE, "pp")
        gE, gW, gb = (pmean(t, "dp") for t in (gE, gW, gb))
        return E - LR6 * gE, W - LR6 * gW, b - LR6 * gb, pmean(psum(l, "pp"), "dp")
    return f


C.smap("s.tied_embedding_first_last_stage.pp4xdp2", {"dp": 2, "pp": 4}, tied,
       (P(), P("pp"), P("pp"), P("dp"), P("dp")), (P(), P("pp"), P("pp"), P()), tied_ref,
       (R(V6, D, scale=0.7), R(S6, D, D, scale=0.4), R(S6, D, scale=0.2), I(0, V6, B6), I(0, V6, B6)),
       bugs=[("tied-grad-no-psum", ["missing-collective"]), ("tied-grad-pmean-pp", ["wrong-collective"])])

# ---------------------------------------------------------------------------
# 7. ring all-reduce by hand (reduce-scatter + all-gather by ppermute), dp8.
N7, C7, B7, LR7 = 8, 3, 32, 0.5


def softreg_loss(W, x, y):
    logits = x @ W
    return jnp.mean(jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, y[:, None], -1)[:, 0])


def ring_ref(W, x, y):
    l, g = jax.value_and_grad(softreg_loss)(W, x, y)
    return W - LR7 * g, l


def ring_allreduce(bug):
    def f(W, x, y):
        r = idx("dp")
        l, g = jax.value_and_grad(softreg_loss)(W, x, y)   # (N7, C7): chunk c is row c
        right = [(j, (j + 1) % N7) for j in range(N7)]
        left = [(j, (j - 1) % N7) for j in range(N7)]
        send = g[r]
        for k in range(N7 - 1):
            recv = lax.ppermute(send, "dp", right)
            c = (r - k) % N7 if bug == "rs-wrong-chunk" else (r - k - 1) % N7
            send = recv + g[c]
        out = lax.dynamic_update_index_in_dim(jnp.zeros_like(g), send, (r + 1) % N7, 0)
        for k in range(N7 - 1):
            recv = lax.ppermute(send, "dp", left if bug == "ag-left" else right)
            out = lax.dynamic_update_index_in_dim(out, recv, (r - k) % N7, 0)
            send = recv
        return W - LR7 * out / N7, pmean(l, "dp")
    return f


C.smap("s.ring_allreduce_rs_ag_ppermute.dp8", {"dp": 8}, ring_allreduce, (P(), P("dp"), P("dp")), (P(), P()),
       ring_ref, (R(N7, C7, scale=0.5), R(B7, N7), I(0, C7, B7)),
       bugs=[("rs-wrong-chunk", ["wrong-index"]), ("ag-left", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 8. 1-D convolution with zero padding, halos by ppermute.
B8, T8, C8, K8 = 4, 32, 4, 5
H8 = K8 // 2
DN = ("NWC", "WIO", "NWC")


def conv_zero_ref(x, w):
    return lax.conv_general_dilated(x, w, (1,), "SAME", dimension_numbers=DN)


def conv_zero(bug):
    def f(x, w):
        n = 4
        if bug == "cyclic-edges":
            to_r = [(j, (j + 1) % n) for j in range(n)]
            to_l = [(j, (j - 1) % n) for j in range(n)]
        else:
            to_r, to_l = fwd_perm(n), bwd_perm(n)
        from_left = lax.ppermute(x[:, -H8:], "sp", to_r)
        from_right = lax.ppermute(x[:, :H8], "sp", to_l)
        if bug == "halos-swapped":
            from_left, from_right = lax.ppermute(x[:, :H8], "sp", to_r), lax.ppermute(x[:, -H8:], "sp", to_l)
        xp = jnp.concatenate([from_left, x, from_right], 1)
        return lax.conv_general_dilated(xp, w, (1,), "VALID", dimension_numbers=DN)
    return f


C.smap("s.halo_conv1d_zero_pad.dp2xsp4", {"dp": 2, "sp": 4}, conv_zero, (P("dp", "sp"), P()), P("dp", "sp"),
       conv_zero_ref, (R(B8, T8, C8), R(K8, C8, C8, scale=0.4)),
       bugs=[("halos-swapped", ["wrong-permutation"]), ("cyclic-edges", ["wrong-boundary"])])

# ---------------------------------------------------------------------------
# 9. depthwise 1-D convolution with reflect padding at the global edges.
B9, T9, C9 = 4, 32, 6
H9 = 2


def dwconv(xp, w):
    return lax.conv_general_dilated(xp, w[:, None, :], (1,), "VALID", dimension_numbers=DN, feature_group_count=C9)


def conv_reflect_ref(x, w):
    return dwconv(jnp.pad(x, ((0, 0), (H9, H9), (0, 0)), mode="reflect"), w)


def conv_reflect(bug):
    def f(x, w):
        n = 4
        r = idx("sp")
        if bug == "reflect-every-shard":
            return dwconv(jnp.pad(x, ((0, 0), (H9, H9), (0, 0)), mode="reflect"), w)
        from_left = lax.ppermute(x[:, -H9:], "sp", fwd_perm(n))
        from_right = lax.ppermute(x[:, :H9], "sp", bwd_perm(n))
        if bug == "symmetric-edges":
            lo, hi = x[:, H9 - 1::-1], x[:, :-H9 - 1:-1]
        else:
            lo, hi = x[:, H9:0:-1], x[:, -2:-H9 - 2:-1]
        left = jnp.where(r == 0, lo, from_left)
        right = jnp.where(r == n - 1, hi, from_right)
        return dwconv(jnp.concatenate([left, x, right], 1), w)
    return f


C.smap("s.halo_dwconv1d_reflect_pad.dp2xsp4", {"dp": 2, "sp": 4}, conv_reflect, (P("dp", "sp"), P()),
       P("dp", "sp"), conv_reflect_ref, (R(B9, T9, C9), R(2 * H9 + 1, C9, scale=0.5)),
       bugs=[("reflect-every-shard", ["wrong-boundary"]), ("symmetric-edges", ["wrong-boundary"])])

# ---------------------------------------------------------------------------
# 10. RWKV-style token shift across sequence shards.
B10, T10, D10 = 4, 16, 8


def tshift_ref(x, fill, mu, Wk):
    prev = jnp.concatenate([jnp.broadcast_to(fill, (x.shape[0], 1, D10)), x[:, :-1]], 1)
    mix = x * mu + prev * (1.0 - mu)
    return mix @ Wk, jnp.square(x - prev).sum(-1)


def tshift(bug):
    def f(x, fill, mu, Wk):
        r = idx("sp")
        if bug == "shift-to-left":
            got = lax.ppermute(x[:, -1:], "sp", bwd_perm(4))
        else:
            got = lax.ppermute(x[:, -1:], "sp", fwd_perm(4))
        fb = jnp.broadcast_to(fill, got.shape)
        first = fb if bug == "fill-every-shard" else jnp.where(r == 0, fb, got)
        prev = jnp.concatenate([first, x[:, :-1]], 1)
        mix = x * mu + prev * (1.0 - mu)
        return mix @ Wk, jnp.square(x - prev).sum(-1)
    return f


C.smap("s.token_shift_prev_token_fill.dp2xsp4", {"dp": 2, "sp": 4}, tshift, (P("dp", "sp"), P(), P(), P()),
       (P("dp", "sp"), P("dp", "sp")), tshift_ref,
       (R(B10, T10, D10), R(D10), np.asarray(jax.nn.sigmoid(R(D10))), R(D10, D10, scale=0.4)),
       bugs=[("fill-every-shard", ["wrong-boundary"]), ("shift-to-left", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 11. GPipe evaluation, per-micro-batch losses on the last stage, masked psum.
S11, M11, MB11 = 4, 5, 2
B11 = 2 * M11 * MB11


def eval_ref(W, b, x, y):
    h = stack(x, W, b)
    per = jnp.mean(jnp.square(h - y).reshape(2, M11, MB11 * D), -1)   # per dp shard, per micro-batch
    return jnp.mean(per, 0), jnp.mean(per)


def gpipe_eval(bug):
    def f(W, b, x, y):
        s = idx("pp")
        xm = jnp.concatenate([x.reshape(M11, MB11, D), jnp.zeros((S11 - 1, MB11, D))], 0)
        ym = y.reshape(M11, MB11, D)
        stage = 0 if bug == "loss-on-stage0" else S11 - 1

        def tick(c, xt):
            state, t, losses = c
            out = layer(jnp.where(s == 0, xt, state), W[0], b[0])
            k = t - (S11 - 1)
            kc = jnp.clip(k, 0, M11 - 1)
            lk = jnp.mean(jnp.square(out - ym[kc]))
            if bug != "bubble-unmasked":
                lk = jnp.where(k >= 0, lk, 0.0)
            losses = losses.at[kc].add(lk)
            return (lax.ppermute(out, "pp", fwd_perm(S11)), t + 1, losses), None
        (_, _, losses), _ = lax.scan(tick, (jnp.zeros((MB11, D)), 0, jnp.zeros(M11)), xm)
        losses = pmean(psum(jnp.where(s == stage, losses, 0.0), "pp"), "dp")
        return losses, jnp.mean(losses)
    return f


C.smap("s.gpipe_eval_per_microbatch_loss_masked_psum.pp4xdp2", {"dp": 2, "pp": 4}, gpipe_eval,
       (P("pp"), P("pp"), P("dp"), P("dp")), (P(), P()), eval_ref,
       (R(S11, D, D, scale=0.4), R(S11, D, scale=0.2), R(B11, D), R(B11, D)),
       bugs=[("loss-on-stage0", ["wrong-stage"]), ("bubble-unmasked", ["missing-mask"])])

# ---------------------------------------------------------------------------
# GSPMD pairs: a vmapped stage stack advanced by jnp.roll.
S12, M12, MB12 = 4, 6, 4
stage_layer = jax.vmap(layer)


def rolled_pipeline(x, W, b):
    S, M = W.shape[0], x.shape[0]
    state = jnp.zeros((S,) + x.shape[1:])
    outs = jnp.zeros_like(x)
    for t in range(M + S - 1):
        if t < M:
            state = state.at[0].set(x[t])
        state = stage_layer(state, W, b)
        if t >= S - 1:
            outs = outs.at[t - (S - 1)].set(state[-1])
        state = jnp.roll(state, 1, axis=0)
    return outs


C.gspmd("g.vmapped_stage_stack_roll.pp4xdp2", {"pp": 4, "dp": 2}, (P(None, "dp"), P("pp"), P("pp")),
        P(None, "dp"), rolled_pipeline,
        (R(M12, MB12, D), R(S12, D, D, scale=0.4), R(S12, D, scale=0.2)))

S13, V13, M13, MB13 = 4, 2, 4, 2


def circular_rolled(x, W, b):
    V, S = W.shape[:2]
    M = x.shape[0]
    state = jnp.zeros((S,) + x.shape[1:])
    outs = jnp.zeros_like(x)
    stages = jnp.arange(S)
    for t in range(V * M + S - 1):
        if t < M:
            state = state.at[0].set(x[t])
        v = jnp.clip((t - stages) // M, 0, V - 1)
        state = stage_layer(state, W[v, stages], b[v, stages])
        i = t - (S - 1)
        if (V - 1) * M <= i < V * M:
            outs = outs.at[i % M].set(state[-1])
        state = jnp.roll(state, 1, axis=0)   # the last stage wraps into stage 0
    return outs


C.gspmd("g.circular_vmapped_stack_roll_wrap.pp4", {"pp": 4}, (P(), P(None, "pp"), P(None, "pp")), P(),
        circular_rolled, (R(M13, MB13, D), R(V13, S13, D, D, scale=0.35), R(V13, S13, D, scale=0.2)))

S14, M14, MB14, LR14 = 2, 4, 4, 0.2


def rolled_sgd(W, b, x, y):
    def loss(W, b):
        return jnp.mean(jnp.square(rolled_pipeline(x, W, b) - y))
    l, (gW, gb) = jax.value_and_grad(loss, (0, 1))(W, b)
    return W - LR14 * gW, b - LR14 * gb, l


C.gspmd("g.rolled_pipeline_sgd_step.pp2xdp4", {"pp": 2, "dp": 4},
        (P("pp"), P("pp"), P(None, "dp"), P(None, "dp")), (P("pp"), P("pp"), P()), rolled_sgd,
        (R(S14, D, D, scale=0.4), R(S14, D, scale=0.2), R(M14, MB14, D), R(M14, MB14, D)))

C.finish()
